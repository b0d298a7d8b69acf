//! The delay a requeued job waits before it may start again (Slurm's begin
//! time after a requeue: the credential lifetime + 1 s, 121 s by default).
//!
//! Cluster: 1 node x 2 GPUs; teams `a` and `b`, 1 GPU each; the old rule
//! (`budget-v1`), under which a free-tier job yields at once.
//!
//! | job | team | submit | GPUs | duration | free |
//! |---|---|---|---|---|---|
//! | F | a | 0  | 2 | 1,000 | yes |
//! | J | b | 60 | 2 | 100   | no  |
//!
//! At 60 J preempts F (free tier) and runs until 160. F is requeued at 60 and
//! eligible again at 60 + delay: with no delay it restarts when J ends (160);
//! with the default 121 s, at 181; with 300 s, at 360 although the node is
//! free from 160.

use std::collections::BTreeMap;

use budget_sim::engine::{MinRuntimeRule, PolicyKind, SimConfig, simulate};
use budget_sim::trace::JobSpec;

fn job(id: &str, team: &str, submit: i64, duration: i64, free: bool) -> JobSpec {
    JobSpec {
        id: id.into(),
        user: format!("u{team}"),
        team: team.into(),
        submit,
        gpus: 2,
        duration,
        min_runtime: Some(0),
        free,
        checkpoint: None,
        limit: None,
    }
}

/// F's runs, `(start, end)`, with `requeue_delay`.
fn f_runs(requeue_delay: i64) -> Vec<(i64, Option<i64>)> {
    let trace = vec![job("F", "a", 0, 1_000, true), job("J", "b", 60, 100, false)];
    let shares: BTreeMap<String, f64> = [("a".to_string(), 1.0), ("b".to_string(), 1.0)]
        .into_iter()
        .collect();
    let cfg = SimConfig {
        nodes: 1,
        gpus_per_node: 2,
        min_runtime: MinRuntimeRule::Cap(0),
        requeue_delay,
        ..SimConfig::default()
    };
    let o = simulate(&trace, &shares, PolicyKind::BudgetV1, &cfg);
    assert_eq!(o.unfinished_jobs, 0);
    o.runs
        .iter()
        .filter(|r| r.job == 0)
        .map(|r| (r.start, r.end))
        .collect()
}

#[test]
fn a_requeued_job_does_not_restart_before_the_delay() {
    assert_eq!(SimConfig::default().requeue_delay, 121);
    assert_eq!(f_runs(0), vec![(0, Some(60)), (160, Some(1_160))]);
    assert_eq!(f_runs(121), vec![(0, Some(60)), (181, Some(1_181))]);
    assert_eq!(f_runs(300), vec![(0, Some(60)), (360, Some(1_360))]);
}
