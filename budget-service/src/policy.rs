//! Site policy validation.
//!
//! [`budget_protocol::Policy`] is the wire type the plugins read, and
//! [`PolicyPatch`](budget_protocol::tree::PolicyPatch) the partial update (`PATCH /v1/policy`, config defaults);
//! this module owns the rules a policy must obey before the service stores
//! it, so a bad `budgetctl policy set` changes nothing.

use budget_protocol::Policy;
use policy_core::tree::MAX_ALLOCATION_GPU_HOURS;

/// Checks a whole policy; the message names the offending field.
pub fn validate(p: &Policy) -> Result<(), String> {
    let max = policy_core::duration::MAX_DURATION_SECS;
    if !(3600..=max).contains(&p.window_secs) {
        return Err(format!(
            "window_secs must be between 3600 (1h) and {max} (366d), got {}",
            p.window_secs
        ));
    }
    for (name, v) in [
        ("default_min_runtime_secs", p.default_min_runtime_secs),
        ("max_min_runtime_secs", p.max_min_runtime_secs),
        ("idle_threshold_secs", p.idle_threshold_secs),
    ] {
        if !(0..=max).contains(&v) {
            return Err(format!(
                "{name} must be between 0 and {max} seconds, got {v}"
            ));
        }
    }
    if p.default_min_runtime_secs > p.max_min_runtime_secs {
        return Err(format!(
            "default_min_runtime_secs ({}) must not exceed max_min_runtime_secs ({})",
            p.default_min_runtime_secs, p.max_min_runtime_secs
        ));
    }
    if !(p.hysteresis.is_finite() && (0.0..=10.0).contains(&p.hysteresis)) {
        return Err(format!(
            "hysteresis must be a number between 0 and 10, got {}",
            p.hysteresis
        ));
    }
    if let Some(h) = p.site_max_lost_gpu_hours
        && !(h.is_finite() && (0.0..=MAX_ALLOCATION_GPU_HOURS).contains(&h))
    {
        return Err(format!(
            "site_max_lost_gpu_hours must be a number of GPU-hours between 0 and \
             {MAX_ALLOCATION_GPU_HOURS:e}, got {h}"
        ));
    }
    for (name, value, what) in [
        (
            "tier_band",
            p.tier_band,
            "a fraction between 0 and 1 (0: no band)",
        ),
        (
            "tier_projection",
            p.tier_projection,
            "a fraction of a window between 0 and 1 (0: no projection)",
        ),
        (
            "balance_band",
            p.balance_band,
            "a fraction of the entitlement between 0 and 1 (0: GPUs held alone)",
        ),
    ] {
        if let Some(x) = value
            && !(x.is_finite() && (0.0..=1.0).contains(&x))
        {
            return Err(format!("{name} must be {what}, got {x}"));
        }
    }
    if !(1..=86_400).contains(&p.snapshot_max_age_secs) {
        return Err(format!(
            "snapshot_max_age_secs must be between 1 and 86400, got {}",
            p.snapshot_max_age_secs
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_protocol::tree::PolicyPatch;

    #[test]
    fn default_policy_is_valid_and_bad_fields_are_named() {
        let p = Policy::default();
        validate(&p).unwrap();
        let bad = PolicyPatch {
            default_min_runtime_secs: Some(10 * 86_400),
            ..Default::default()
        }
        .apply(&p);
        assert!(
            validate(&bad)
                .unwrap_err()
                .contains("default_min_runtime_secs")
        );
        let bad = PolicyPatch {
            hysteresis: Some(f64::NAN),
            ..Default::default()
        }
        .apply(&p);
        assert!(validate(&bad).unwrap_err().contains("hysteresis"));
        let bad = PolicyPatch {
            window_secs: Some(0),
            ..Default::default()
        }
        .apply(&p);
        assert!(validate(&bad).unwrap_err().contains("window_secs"));
        // The fractional ranking knobs: each bad value refused naming the knob,
        // each good one (0 = off included) accepted.
        // (name, the patch setting it, values refused, values accepted)
        type Knob = (&'static str, fn(f64) -> PolicyPatch, [f64; 4], [f64; 3]);
        let knobs: [Knob; 3] = [
            (
                "tier_band",
                |x| PolicyPatch {
                    tier_band: Some(Some(x)),
                    ..Default::default()
                },
                [f64::NAN, f64::INFINITY, -0.01, 1.01],
                [0.0, 0.1, 1.0],
            ),
            (
                "tier_projection",
                |x| PolicyPatch {
                    tier_projection: Some(Some(x)),
                    ..Default::default()
                },
                [f64::NAN, f64::NEG_INFINITY, -0.01, 1.5],
                [0.0, 0.6, 1.0],
            ),
            (
                "balance_band",
                |x| PolicyPatch {
                    balance_band: Some(Some(x)),
                    ..Default::default()
                },
                [f64::NAN, f64::INFINITY, -0.1, 1.01],
                [0.0, 0.15, 1.0],
            ),
        ];
        for (name, patch, bad, good) in knobs {
            for x in bad {
                let err = validate(&patch(x).apply(&p)).unwrap_err();
                assert!(err.contains(name), "{name}={x}: {err}");
            }
            for x in good {
                validate(&patch(x).apply(&p)).unwrap();
            }
        }
    }
}
