//! `budgetctl policy show|set`: the site policy, what a site decides: the
//! min_runtime default and maximum (and whether a job must declare one), the
//! preemption strength (`preemption=gentle|default|aggressive`, a benefit/cost
//! factor), the site caps on rebalancing preemptions per window
//! (`site_max_preemptions`, `site_max_lost_gpu_hours`, `none` to clear), the
//! requeue cap per job (`max_requeues`, `none` for no cap, `default` for the
//! rule's, which `show` marks "(default)"), and the operational settings
//! (window, snapshot age, idle threshold). Every other number of the rule is a
//! constant of it: naming one is refused, before anything is sent.

use anyhow::bail;
use budget_protocol::tree::{PolicyPatch, fixed_constant_message};
use budget_protocol::{Policy, PreemptionPreset};

use crate::api::Api;
use crate::args::{PolicyCmd, UsageError};
use crate::output::{Out, num, render};

const KEYS: &str = "default_min_runtime, max_min_runtime, require_min_runtime, preemption, \
                    site_max_preemptions, site_max_lost_gpu_hours, max_requeues, window, \
                    snapshot_max_age, idle_threshold";

/// The line `show` ends with: where the rule's constants are.
const CONSTANTS: &str = "The rule's other numbers are constants of it, each with the ablation that chose it: docs/design.md §6.6.";

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
            "preemption" => {
                p.preemption = Some(PreemptionPreset::parse(val).ok_or_else(|| {
                    UsageError(format!(
                        "{k}: expected gentle, default or aggressive, got {val:?}"
                    ))
                })?)
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
            removed if Policy::REMOVED.contains(&removed) => {
                bail!(UsageError(format!(
                    "{}; settable: {KEYS}",
                    fixed_constant_message(removed)
                )))
            }
            _ => bail!(UsageError(format!(
                "unknown policy key {k:?}; keys: {KEYS}"
            ))),
        }
    }
    Ok(p)
}

/// The policy as a KEY/VALUE table, keys in name order, durations readable,
/// and a line saying where the rule's constants are documented.
fn table(p: &Policy) -> String {
    // Every field by name (no `..`): a new policy field must be shown here.
    let Policy {
        window_secs,
        default_min_runtime_secs,
        max_min_runtime_secs,
        require_min_runtime,
        snapshot_max_age_secs,
        idle_threshold_secs,
        site_max_preemptions,
        site_max_lost_gpu_hours,
        max_requeues,
        preemption,
    } = p;
    let d = |secs: &i64| policy_core::format_duration(*secs);
    // The requeue cap shows the value in effect, the rule's default when unset.
    let rule = p.rebalance();
    let rows = [
        ("default_min_runtime", d(default_min_runtime_secs)),
        ("idle_threshold", d(idle_threshold_secs)),
        ("max_min_runtime", d(max_min_runtime_secs)),
        (
            "max_requeues",
            rule.max_requeues.map_or("none".into(), |n| n.to_string())
                + if max_requeues.is_none() {
                    " (default)"
                } else {
                    ""
                },
        ),
        (
            "preemption",
            format!(
                "{} (benefit factor {})",
                preemption.name(),
                num(preemption.benefit_factor(), 1)
            ),
        ),
        ("require_min_runtime", require_min_runtime.to_string()),
        (
            "site_max_lost_gpu_hours",
            site_max_lost_gpu_hours.map_or("none".into(), |h| num(h, 2)),
        ),
        (
            "site_max_preemptions",
            site_max_preemptions.map_or("none".into(), |n| n.to_string()),
        ),
        ("snapshot_max_age", d(snapshot_max_age_secs)),
        ("window", d(window_secs)),
    ]
    .map(|(k, v)| vec![k.to_string(), v]);
    format!("{}{CONSTANTS}\n", render(&["KEY", "VALUE"], &rows))
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
        let p = patch(&["window=14d".into(), "preemption=gentle".into()]).expect("patch");
        assert_eq!(p.window_secs, Some(14 * 86_400));
        assert_eq!(p.preemption, Some(PreemptionPreset::Gentle));
        assert_eq!(
            patch(&["idle_threshold_secs=30m".into()])
                .expect("suffix")
                .idle_threshold_secs,
            Some(1800)
        );
        for bad in [
            "window=forever",
            "preemption=brutal",
            "preemption=2",
            "colour=blue",
            "window",
        ] {
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
        assert!(
            line("preemption").ends_with(" default (benefit factor 2)"),
            "{t}"
        );
        assert!(line("require_min_runtime").ends_with(" false"), "{t}");
        assert!(line("site_max_preemptions").ends_with(" none"), "{t}");
        assert!(t.ends_with(&format!("{CONSTANTS}\n")), "{t}");
        // Header, ten settings, the line on the constants.
        assert_eq!(t.lines().count(), 12, "{t}");
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
    fn presets_map_to_their_factors() {
        for (name, factor) in [("gentle", 4.0), ("default", 2.0), ("aggressive", 1.0)] {
            let p = patch(&[format!("preemption={name}")]).expect(name);
            let policy = p.apply(&Policy::default());
            assert_eq!(policy.rebalance().benefit_factor, Some(factor), "{name}");
            let t = table(&policy);
            let line = t.lines().find(|l| l.starts_with("preemption"));
            assert!(
                line.is_some_and(|l| l.ends_with(&format!(" {name} (benefit factor {factor})"))),
                "{t}"
            );
        }
    }

    #[test]
    fn the_rules_constants_are_refused_by_name() {
        for k in Policy::REMOVED {
            for v in ["0.2", "on", "none", "default"] {
                let e = patch(&["window=14d".into(), format!("{k}={v}")]).unwrap_err();
                let msg = e
                    .downcast_ref::<UsageError>()
                    .map(ToString::to_string)
                    .unwrap_or_default();
                assert!(
                    msg.contains(&format!("`{k}` is a fixed constant of the rule"))
                        && msg.contains("preemption"),
                    "{k}={v}: {e}"
                );
            }
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
}
