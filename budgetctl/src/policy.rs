//! `budgetctl policy show|set`: the site policy (window, min_runtime
//! defaults, hysteresis, snapshot age, idle threshold, and the site caps on
//! rebalancing preemptions per window: `site_max_preemptions`,
//! `site_max_lost_gpu_hours`, `none` to clear; `max_requeues`, the requeues
//! after which a job is no longer taken for rebalancing, `none` for no cap; and the ranking
//! knobs of the cost-aware rule, `tier_projection`, `tier_band`, `share_order`,
//! `entitled_first`, `balance_band`). The rule's knobs take `default` to go back to the
//! rule's default, which `show` marks "(default)".

use anyhow::bail;
use budget_protocol::Policy;
use budget_protocol::tree::PolicyPatch;

use crate::api::Api;
use crate::args::{PolicyCmd, UsageError};
use crate::output::{Out, num, render};

const KEYS: &str = "window, default_min_runtime, max_min_runtime, require_min_runtime, \
                    hysteresis, snapshot_max_age, idle_threshold, site_max_preemptions, \
                    site_max_lost_gpu_hours, max_requeues, tier_projection, tier_band, \
                    share_order, entitled_first, balance_band";

/// `on|off|default` (and the usual true/false, yes/no, 1/0) of a ranking
/// switch: `None` is back to the rule's default.
fn switch(k: &str, val: &str) -> Result<Option<bool>, UsageError> {
    match val.trim() {
        "default" => Ok(None),
        "on" | "true" | "yes" | "1" => Ok(Some(true)),
        "off" | "false" | "no" | "0" => Ok(Some(false)),
        _ => Err(UsageError(format!(
            "{k}: expected on, off or default, got {val:?}"
        ))),
    }
}

/// `0..=1|none|off|default` of a fractional ranking knob: `None` is back to
/// the rule's default, `none`/`off` is 0 (how the policy says "off").
fn fraction(k: &str, val: &str) -> Result<Option<f64>, UsageError> {
    match val.trim() {
        "default" => Ok(None),
        "none" | "off" => Ok(Some(0.0)),
        v => v
            .parse::<f64>()
            .ok()
            .filter(|x| x.is_finite() && (0.0..=1.0).contains(x))
            .map(Some)
            .ok_or_else(|| {
                UsageError(format!(
                    "{k}: expected a fraction between 0 and 1, none or default, got {val:?}"
                ))
            }),
    }
}

/// Reads `KEY=VALUE` pairs (durations as 90m, 4h, 7d, HH:MM:SS) into a patch.
fn patch(pairs: &[String]) -> anyhow::Result<PolicyPatch> {
    let mut p = PolicyPatch::default();
    for pair in pairs {
        let (k, val) = pair
            .split_once('=')
            .ok_or_else(|| UsageError(format!("expected KEY=VALUE, got {pair:?}")))?;
        let dur = || -> anyhow::Result<Option<i64>> {
            Ok(Some(
                policy_core::parse_duration(val).map_err(|e| UsageError(format!("{k}: {e}")))?,
            ))
        };
        match k.trim().trim_end_matches("_secs") {
            "window" => p.window_secs = dur()?,
            "default_min_runtime" => p.default_min_runtime_secs = dur()?,
            "max_min_runtime" => p.max_min_runtime_secs = dur()?,
            "snapshot_max_age" => p.snapshot_max_age_secs = dur()?,
            "idle_threshold" => p.idle_threshold_secs = dur()?,
            "require_min_runtime" => {
                p.require_min_runtime =
                    Some(val.parse::<bool>().map_err(|_| {
                        UsageError(format!("{k}: expected true or false, got {val:?}"))
                    })?)
            }
            "hysteresis" => {
                p.hysteresis = Some(
                    val.parse::<f64>()
                        .map_err(|_| UsageError(format!("{k}: expected a number, got {val:?}")))?,
                )
            }
            "max_requeues" => {
                // `none` is no cap, as the simulator's `--rule max_requeues=none`.
                p.max_requeues = Some(match val.trim() {
                    "default" => None,
                    "none" | "off" => Some(Policy::NO_REQUEUE_CAP),
                    v => Some(
                        v.parse::<u32>()
                            .ok()
                            .filter(|n| *n != Policy::NO_REQUEUE_CAP)
                            .ok_or_else(|| {
                                UsageError(format!(
                                    "{k}: expected a whole number, none (no cap) or default, got {val:?}"
                                ))
                            })?,
                    ),
                })
            }
            "site_max_preemptions" => {
                p.site_max_preemptions = Some(match val.trim() {
                    "none" | "off" => None,
                    v => Some(v.parse::<u32>().map_err(|_| {
                        UsageError(format!("{k}: expected a whole number or none, got {val:?}"))
                    })?),
                })
            }
            "site_max_lost_gpu_hours" => {
                p.site_max_lost_gpu_hours = Some(match val.trim() {
                    "none" | "off" => None,
                    v => Some(
                        v.parse::<f64>()
                            .ok()
                            .filter(|x| x.is_finite() && *x >= 0.0)
                            .ok_or_else(|| {
                                UsageError(format!(
                                    "{k}: expected a number of GPU-hours >= 0 or none, got {val:?}"
                                ))
                            })?,
                    ),
                })
            }
            // 0 is how the policy says "no band" / "no projection" / "GPUs held
            // alone" (`Policy::tier_band`, `tier_projection`, `balance_band`).
            "tier_band" => p.tier_band = Some(fraction(k, val)?),
            "tier_projection" => p.tier_projection = Some(fraction(k, val)?),
            "balance_band" => p.balance_band = Some(fraction(k, val)?),
            "share_order" => p.share_order = Some(switch(k, val)?),
            "entitled_first" => p.entitled_first = Some(switch(k, val)?),
            _ => bail!(UsageError(format!(
                "unknown policy key {k:?}; keys: {KEYS}"
            ))),
        }
    }
    Ok(p)
}

/// The policy as a KEY/VALUE table, keys in name order, durations readable.
fn table(p: &Policy) -> String {
    // Every field by name (no `..`): a new policy field must be shown here.
    let Policy {
        window_secs,
        default_min_runtime_secs,
        max_min_runtime_secs,
        require_min_runtime,
        hysteresis,
        snapshot_max_age_secs,
        idle_threshold_secs,
        site_max_preemptions,
        site_max_lost_gpu_hours,
        max_requeues,
        tier_band,
        share_order,
        entitled_first,
        tier_projection,
        balance_band,
    } = p;
    let d = |secs: &i64| policy_core::format_duration(*secs);
    // The rule's knobs show the value in effect, the rule's default when unset.
    let rule = p.rebalance();
    let unset = |u: bool| if u { " (default)" } else { "" };
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let rows = [
        (
            "balance_band",
            rule.balance_band.map_or("none".into(), |b| num(b, 3)) + unset(balance_band.is_none()),
        ),
        ("default_min_runtime", d(default_min_runtime_secs)),
        (
            "entitled_first",
            on(rule.entitled_first) + unset(entitled_first.is_none()),
        ),
        ("hysteresis", num(*hysteresis, 3)),
        ("idle_threshold", d(idle_threshold_secs)),
        ("max_min_runtime", d(max_min_runtime_secs)),
        (
            "max_requeues",
            rule.max_requeues.map_or("none".into(), |n| n.to_string())
                + unset(max_requeues.is_none()),
        ),
        ("require_min_runtime", require_min_runtime.to_string()),
        (
            "share_order",
            on(rule.share_order) + unset(share_order.is_none()),
        ),
        (
            "site_max_lost_gpu_hours",
            site_max_lost_gpu_hours.map_or("none".into(), |h| num(h, 2)),
        ),
        (
            "site_max_preemptions",
            site_max_preemptions.map_or("none".into(), |n| n.to_string()),
        ),
        ("snapshot_max_age", d(snapshot_max_age_secs)),
        (
            "tier_band",
            rule.tier_band.map_or("none".into(), |b| num(b, 3)) + unset(tier_band.is_none()),
        ),
        (
            "tier_projection",
            rule.tier_projection.map_or("none".into(), |a| num(a, 3))
                + unset(tier_projection.is_none()),
        ),
        ("window", d(window_secs)),
    ]
    .map(|(k, v)| vec![k.to_string(), v]);
    render(&["KEY", "VALUE"], &rows)
}

pub fn run(api: &Api, out: Out, c: &PolicyCmd) -> anyhow::Result<()> {
    let p: Policy = match c {
        PolicyCmd::Show => api.get("/v1/policy")?,
        PolicyCmd::Set { pairs } => api.send_json("PATCH", "/v1/policy", &patch(pairs)?)?,
    };
    out.print(&p, table)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_are_checked_before_sending() {
        let p = patch(&["window=14d".into(), "hysteresis=0.2".into()]).expect("patch");
        assert_eq!(p.window_secs, Some(14 * 86_400));
        assert_eq!(p.hysteresis, Some(0.2));
        assert_eq!(
            patch(&["idle_threshold_secs=30m".into()])
                .expect("suffix")
                .idle_threshold_secs,
            Some(1800)
        );
        for bad in ["window=forever", "hysteresis=lots", "colour=blue", "window"] {
            assert!(
                patch(&[bad.into()])
                    .unwrap_err()
                    .downcast_ref::<UsageError>()
                    .is_some(),
                "{bad}"
            );
        }
        let t = table(&Policy::default());
        let line = |k: &str| t.lines().find(|l| l.starts_with(k)).unwrap_or_default();
        assert!(line("window").ends_with(" 7d"), "{t}");
        assert!(line("hysteresis").ends_with(" 0.1"), "{t}");
        assert!(line("require_min_runtime").ends_with(" false"), "{t}");
        assert!(line("site_max_preemptions").ends_with(" none"), "{t}");
        assert!(line("tier_band ").ends_with(" none (default)"), "{t}");
        assert!(line("tier_projection").ends_with(" 0.6 (default)"), "{t}");
        assert!(line("share_order").ends_with(" off (default)"), "{t}");
        assert!(line("entitled_first").ends_with(" on (default)"), "{t}");
        assert!(line("balance_band").ends_with(" 0.15 (default)"), "{t}");
        assert_eq!(t.lines().count(), 16, "{t}");
        let p = patch(&[
            "site_max_preemptions=3".into(),
            "site_max_lost_gpu_hours=none".into(),
        ])
        .expect("caps");
        assert_eq!(p.site_max_preemptions, Some(Some(3)));
        assert_eq!(p.site_max_lost_gpu_hours, Some(None));
        for bad in ["site_max_preemptions=-1", "site_max_lost_gpu_hours=NaN"] {
            assert!(patch(&[bad.into()]).is_err(), "{bad}");
        }
    }

    #[test]
    fn max_requeues_none_is_no_cap_as_in_the_simulator() {
        let set = |v: &str| patch(&[format!("max_requeues={v}")]);
        assert_eq!(set("2").expect("2").max_requeues, Some(Some(2)));
        assert_eq!(set("default").expect("default").max_requeues, Some(None));
        for v in ["none", "off"] {
            let p = set(v).expect(v);
            assert_eq!(p.max_requeues, Some(Some(Policy::NO_REQUEUE_CAP)), "{v}");
            // The rule sees no cap, as `--rule max_requeues=none` does.
            let policy = Policy {
                max_requeues: Some(Policy::NO_REQUEUE_CAP),
                ..Policy::default()
            };
            assert_eq!(policy.rebalance().max_requeues, None);
            let t = table(&policy);
            let line = t.lines().find(|l| l.starts_with("max_requeues"));
            assert!(line.is_some_and(|l| l.ends_with(" none")), "{t}");
        }
        let t = table(&Policy::default());
        let line = t.lines().find(|l| l.starts_with("max_requeues"));
        assert!(line.is_some_and(|l| l.ends_with(" 1 (default)")), "{t}");
        for bad in ["-1", "many", "4294967295"] {
            let e = set(bad).unwrap_err();
            assert!(
                e.downcast_ref::<UsageError>()
                    .is_some_and(|u| u.to_string().contains("none (no cap)")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn ranking_knobs_tell_a_value_from_none_from_default() {
        let p = patch(&[
            "tier_band=0.2".into(),
            "share_order=off".into(),
            "entitled_first=on".into(),
            "tier_projection=0.4".into(),
            "balance_band=0.25".into(),
        ])
        .expect("knobs");
        assert_eq!(
            (
                p.tier_band,
                p.share_order,
                p.entitled_first,
                p.tier_projection,
                p.balance_band
            ),
            (
                Some(Some(0.2)),
                Some(Some(false)),
                Some(Some(true)),
                Some(Some(0.4)),
                Some(Some(0.25))
            )
        );
        // `none`/`off` is no band or no projection (0 on the wire), `default`
        // the rule's own.
        for (v, want) in [("none", Some(0.0)), ("off", Some(0.0)), ("0", Some(0.0))] {
            let p = patch(&[format!("tier_band={v}")]).expect(v);
            assert_eq!(p.tier_band, Some(want), "{v}");
            let p = patch(&[format!("tier_projection={v}")]).expect(v);
            assert_eq!(p.tier_projection, Some(want), "{v}");
            let p = patch(&[format!("balance_band={v}")]).expect(v);
            assert_eq!(p.balance_band, Some(want), "{v}");
        }
        assert_eq!(
            patch(&["tier_projection=default".into()])
                .expect("default")
                .tier_projection,
            Some(None)
        );
        let p = patch(&[
            "tier_band=default".into(),
            "share_order=default".into(),
            "entitled_first=default".into(),
        ])
        .expect("defaults");
        assert_eq!(
            (p.tier_band, p.share_order, p.entitled_first),
            (Some(None), Some(None), Some(None))
        );
        for bad in [
            "tier_band=1.01",
            "tier_band=-0.1",
            "tier_band=inf",
            "tier_band=NaN",
            "tier_projection=1.5",
            "tier_projection=-1",
            "tier_projection=soon",
            "balance_band=2",
            "balance_band=lots",
            "share_order=maybe",
            "entitled_first=",
        ] {
            assert!(
                patch(&[bad.into()])
                    .unwrap_err()
                    .downcast_ref::<UsageError>()
                    .is_some(),
                "{bad}"
            );
        }
        // Shown as in effect: set values plainly, no band as none.
        let t = table(&Policy {
            tier_band: Some(0.0),
            share_order: Some(false),
            entitled_first: Some(true),
            tier_projection: Some(0.0),
            balance_band: Some(0.0),
            ..Policy::default()
        });
        let line = |k: &str| t.lines().find(|l| l.starts_with(k)).unwrap_or_default();
        assert!(line("tier_band ").ends_with(" none"), "{t}");
        assert!(line("tier_projection").ends_with(" none"), "{t}");
        assert!(line("balance_band").ends_with(" none"), "{t}");
        assert!(line("share_order").ends_with(" off"), "{t}");
        assert!(line("entitled_first").ends_with(" on"), "{t}");
    }
}
