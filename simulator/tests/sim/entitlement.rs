//! The entitlement shortfall and the work figures on a trace worked out by hand
//! (definitions: simulator/README.md, "Entitlement shortfall").
//!
//! Cluster: 1 node x 4 GPUs; teams `a` and `b` entitled to 2 GPUs each; window
//! 1 day, samples every hour, so windows end at hours 24 and 48. Decayed fair
//! share (no preemption), exact time limits.
//!
//! | job | team | submit (h) | GPUs | duration (h) | runs (h) |
//! |---|---|---|---|---|---|
//! | A1 | a | 0  | 4 | 24 | 0-24 (ties at t=0 go to the lower job index) |
//! | B1 | b | 0  | 2 | 12 | 24-36 |
//! | A2 | a | 30 | 1 | 20 | 30-50 |
//!
//! Window [0, 24]: a asks 4 (entitled-and-asked min(2, 4) = 2 for 24 h = 48
//! GPU-h) and holds 96: no shortfall. b asks 2 for 24 h (48) and holds 0:
//! shortfall 48 / (2 x 24) = 1.0.
//! Window [24, 48]: a asks nothing until A2 at 30 h, then 1: entitled 18,
//! held 18: 0. b asks 2 until B1 ends at 36 h: 24, held 24: 0.
//! So b: mean 0.5, worst 1.0; a: 0; policy level 48 / (2 teams x 2 windows
//! x 48) = 0.25. b's first week (from hour 0) is the first window: 1.0.
//! Work: 4 x 24 + 2 x 12 + 1 x 20 = 140 GPU-h, nothing lost.
//! Utilisation: 140 / (4 GPUs x 50 h) = 0.7; while jobs arrive (hours 0-30, the
//! last submission): A1's 96 GPU-h and B1's 2 x 6 = 12, so 108 / (4 x 30) = 0.9.

use std::collections::BTreeMap;

use budget_sim::engine::{MinRuntimeRule, PolicyKind, SimConfig, simulate};
use budget_sim::metrics::report;
use budget_sim::trace::JobSpec;

const H: i64 = 3600;

fn job(id: &str, team: &str, submit_h: i64, gpus: u32, hours: i64) -> JobSpec {
    JobSpec {
        id: id.into(),
        user: format!("u{team}"),
        team: team.into(),
        submit: submit_h * H,
        gpus,
        duration: hours * H,
        min_runtime: None,
        free: false,
        checkpoint: None,
        limit: None,
    }
}

fn cfg() -> SimConfig {
    SimConfig {
        nodes: 1,
        gpus_per_node: 4,
        window: 24 * H,
        min_runtime: MinRuntimeRule::Cap(0),
        verify_window: true,
        ..SimConfig::default()
    }
}

fn trace() -> Vec<JobSpec> {
    vec![
        job("A1", "a", 0, 4, 24),
        job("B1", "b", 0, 2, 12),
        job("A2", "a", 30, 1, 20),
    ]
}

#[test]
fn shortfall_and_work_match_the_hand_computation() {
    let shares: BTreeMap<String, f64> = [("a".into(), 2.0), ("b".into(), 2.0)].into();
    let o = simulate(&trace(), &shares, PolicyKind::Decay, &cfg());
    let starts: Vec<(i64, i64)> = o.jobs.iter().map(|j| (j.first_start, j.end)).collect();
    assert_eq!(
        starts,
        vec![(0, 24 * H), (24 * H, 36 * H), (30 * H, 50 * H)]
    );
    let r = report(&o, 24 * H, &[]);
    assert_eq!(r.windows, 2);
    assert_eq!(r.work_gpu_hours, 140.0);
    assert_eq!((r.gpu_hours_lost, r.lost_fraction_of_work), (0.0, 0.0));
    assert_eq!(r.entitlement_shortfall, 0.25);
    assert_eq!(r.utilization, 0.7);
    assert_eq!(r.utilization_to_last_submit, Some(0.9));
    let by: BTreeMap<&str, (f64, f64, f64, f64)> = r
        .teams
        .iter()
        .map(|t| {
            (
                t.team.as_str(),
                (
                    t.entitled_gpus,
                    t.entitlement_shortfall_mean,
                    t.entitlement_shortfall_worst,
                    t.entitlement_shortfall_first_week,
                ),
            )
        })
        .collect();
    assert_eq!(by["a"], (2.0, 0.0, 0.0, 0.0));
    assert_eq!(by["b"], (2.0, 0.5, 1.0, 1.0));
    assert_eq!(r.reversals, 0);
}

#[test]
fn allocations_above_the_cluster_are_scaled_down() {
    // 4 + 4 GPUs on a 4-GPU cluster: each is entitled to 2, as above.
    let shares: BTreeMap<String, f64> = [("a".into(), 4.0), ("b".into(), 4.0)].into();
    let o = simulate(&trace(), &shares, PolicyKind::Decay, &cfg());
    assert_eq!(o.entitled_gpus, vec![2.0, 2.0]);
    let r = report(&o, 24 * H, &[]);
    assert_eq!(r.entitlement_shortfall, 0.25);
}

#[test]
fn json_names_the_fields_as_documented() {
    let shares: BTreeMap<String, f64> = [("a".into(), 2.0), ("b".into(), 2.0)].into();
    let o = simulate(&trace(), &shares, PolicyKind::Decay, &cfg());
    let v = serde_json::to_value(report(&o, 24 * H, &[])).expect("json");
    for k in [
        "entitlement_shortfall",
        "work_gpu_hours",
        "gpu_hours_lost",
        "reversals",
        "utilization_to_last_submit",
    ] {
        assert!(v[k].is_number(), "{k} missing: {v}");
    }
    for k in [
        "entitlement_shortfall_mean",
        "entitlement_shortfall_worst",
        "entitlement_shortfall_first_week",
    ] {
        assert!(v["teams"][1][k].is_number(), "teams[].{k} missing");
    }
    assert_eq!(v["teams"][1]["entitlement_shortfall_worst"], 1.0);
}

#[test]
fn utilisation_while_jobs_arrive_needs_a_span() {
    // Every job submitted at once: there is no arrival span to measure.
    let shares: BTreeMap<String, f64> = [("a".into(), 2.0), ("b".into(), 2.0)].into();
    let at_once = vec![job("A1", "a", 0, 4, 2), job("B1", "b", 0, 2, 1)];
    let o = simulate(&at_once, &shares, PolicyKind::Decay, &cfg());
    let r = report(&o, 24 * H, &[]);
    assert_eq!(r.utilization_to_last_submit, None);
    // A1 runs hours 0-2 on all 4 GPUs, B1 2-3: (8 + 2) GPU-h / (4 GPUs x 3 h).
    assert_eq!(r.utilization, 0.833333);
}
