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
    if let Some(h) = p.site_max_lost_gpu_hours
        && !(h.is_finite() && (0.0..=MAX_ALLOCATION_GPU_HOURS).contains(&h))
    {
        return Err(format!(
            "site_max_lost_gpu_hours must be a number of GPU-hours between 0 and \
             {MAX_ALLOCATION_GPU_HOURS:e}, got {h}"
        ));
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
            window_secs: Some(0),
            ..Default::default()
        }
        .apply(&p);
        assert!(validate(&bad).unwrap_err().contains("window_secs"));
        let bad = PolicyPatch {
            site_max_lost_gpu_hours: Some(Some(f64::INFINITY)),
            ..Default::default()
        }
        .apply(&p);
        assert!(
            validate(&bad)
                .unwrap_err()
                .contains("site_max_lost_gpu_hours")
        );
        for preemption in budget_protocol::PreemptionPreset::ALL {
            let good = PolicyPatch {
                preemption: Some(preemption),
                ..Default::default()
            }
            .apply(&p);
            validate(&good).unwrap();
        }
    }
}
