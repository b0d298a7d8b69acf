//! `--late-oracle TEAM`: the oracle judges the windows the report measures
//! (its `replay_shortfall` is the report's first-week and worst-window
//! figure), adds a key to the report and changes nothing else, and refuses a
//! team the replay does not have. The baselines' replays are used: the
//! oracle reads any replay's outcome alike, and they are quick.

use budget_sim::cli::{prepare, run_policies, to_json};
use serde_json::Value;

use super::cli_args::args;

fn replay(extra: &[&str]) -> Value {
    let p = prepare(&args(extra)).expect("prepare");
    let reports: Vec<_> = run_policies(&p).into_iter().map(|(_, r)| r).collect();
    serde_json::from_str(&to_json(&reports).expect("json")).expect("valid json")
}

fn f(v: &Value) -> f64 {
    v.as_f64().expect("a number")
}

#[test]
fn the_oracle_reads_the_reports_windows_and_changes_nothing() {
    // A late team with whole-node jobs (16-32 GPUs) on a cluster others fill
    // with 1-2 GPU jobs: the shape where placement matters most.
    let base = [
        "--scenario",
        "late-wide-b",
        "--seed",
        "2",
        "--policy",
        "fair-tree,static",
    ];
    let plain = replay(&base);
    let mut with = base.to_vec();
    with.extend(["--late-oracle", "l"]);
    let mut judged = replay(&with);
    for policy in ["fair-tree", "static"] {
        let oracle = judged[policy]
            .as_object_mut()
            .and_then(|r| r.remove("late_oracle"))
            .expect("each policy has the oracle");
        assert!(plain[policy].get("late_oracle").is_none());
        let l = plain[policy]["teams"]
            .as_array()
            .and_then(|t| t.iter().find(|t| t["team"] == "l"))
            .expect("team l");
        assert_eq!(oracle["team"], "l");
        assert_eq!(f(&oracle["goal"]), 0.10);
        let (first, worst) = (&oracle["first_window"], &oracle["worst_window"]);
        assert!(
            (f(&first["replay_shortfall"]) - f(&l["entitlement_shortfall_first_week"])).abs()
                < 1e-6,
            "{policy}: the first window is the report's: {first} vs {l}"
        );
        assert!(
            (f(&worst["replay_shortfall"]) - f(&l["entitlement_shortfall_worst"])).abs() < 1e-6,
            "{policy}: the worst window is the report's: {worst} vs {l}"
        );
        // The team arrives on day 7, to a full cluster.
        assert!((6.5..=7.5).contains(&f(&first["start_days"])), "{first}");
        assert_eq!(first["own_gpus"], 0, "{first}");
        assert!(first["running_jobs"].as_u64().unwrap_or(0) > 0, "{first}");
        for w in [first, worst] {
            let (fluid, nodes) = (&w["fluid"], &w["whole_nodes"]);
            // Any freed GPU serves the team in the fluid model: never worse
            // than waiting for whole nodes.
            assert!(
                f(&fluid["shortfall_without_preemption"])
                    <= f(&nodes["shortfall_without_preemption"]) + 1e-9,
                "{w}"
            );
            for c in [fluid, nodes] {
                let lost = f(&c["lost_gpu_hours"]);
                assert!(lost >= 0.0, "{c}");
                if c["preempted"] == 0 {
                    assert_eq!(lost, 0.0, "{c}");
                }
                assert!(f(&c["shortfall"]) <= f(&c["shortfall_without_preemption"]) + 1e-9);
                if c["reached"] == true {
                    assert!(f(&c["shortfall"]) <= 0.10 + 1e-9, "{c}");
                }
            }
        }
        // Whole-node jobs on nodes held by 1-2 GPU jobs: waiting for whole
        // nodes is what costs this team its first week.
        assert!(
            f(&first["whole_nodes"]["shortfall_without_preemption"])
                > f(&first["fluid"]["shortfall_without_preemption"]),
            "{first}"
        );
    }
    assert_eq!(judged, plain, "the oracle changed the replay's report");
}

#[test]
fn an_unknown_team_or_checkpoints_are_refused() {
    let e = prepare(&args(&[
        "--scenario",
        "late-wide",
        "--late-oracle",
        "nobody",
    ]))
    .expect_err("no team nobody");
    let msg = format!("{e:#}");
    assert!(msg.contains("nobody") && msg.contains("l"), "{msg}");
    let e = prepare(&args(&[
        "--scenario",
        "late-wide",
        "--late-oracle",
        "l",
        "--checkpoint-interval",
        "1h",
    ]))
    .expect_err("checkpoints are not modelled");
    assert!(format!("{e:#}").contains("--checkpoint-interval"));
}
