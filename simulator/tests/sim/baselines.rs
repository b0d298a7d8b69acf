//! The Slurm baselines a site would pick instead of the product, on hand-made
//! traces whose schedules are worked out below: `fair-tree` (Fair Tree on
//! decayed usage, no preemption) and `multifactor-qos` (Fair Tree plus QOS
//! preemption after `PreemptExemptTime`). Cluster: 1 node x 4 GPUs; teams `a`
//! and `b`, 2 GPUs each; every job takes the whole node, so the order in which
//! pending jobs start is the order the policy ranks them.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use budget_sim::cli::{prepare, run_policies, to_json};
use budget_sim::engine::{MinRuntimeRule, Outcome, PolicyKind, SimConfig, simulate};
use budget_sim::policy::fair_tree::{Assoc, rank};
use budget_sim::trace::JobSpec;

use super::cli_args::args;

const H: i64 = 3_600;

fn job(id: &str, team: &str, user: &str, submit: i64, duration: i64, min: i64) -> JobSpec {
    JobSpec {
        id: id.into(),
        user: user.into(),
        team: team.into(),
        submit,
        gpus: 4,
        duration,
        min_runtime: Some(min),
        free: false,
        checkpoint: None,
        limit: None,
    }
}

fn cfg() -> SimConfig {
    SimConfig {
        nodes: 1,
        gpus_per_node: 4,
        recalc: 300,
        min_runtime: MinRuntimeRule::Cap(0),
        ..SimConfig::default()
    }
}

fn shares() -> BTreeMap<String, f64> {
    [("a".to_string(), 2.0), ("b".to_string(), 2.0)]
        .into_iter()
        .collect()
}

fn starts(o: &Outcome) -> Vec<i64> {
    o.jobs.iter().map(|j| j.first_start).collect()
}

/// `a` runs a 6 h job; while it runs, `a` and then `b` queue one more each.
/// Static priority and FIFO start `a`'s first (submitted first); Fair Tree
/// starts `b`'s (no usage: infinite Level Fairshare, above `a`'s 0.5).
#[test]
fn fair_tree_ranks_the_team_that_used_less_first() {
    let trace = vec![
        job("a1", "a", "ua", 0, 6 * H, 0),
        job("a2", "a", "ua", 60, H, 0),
        job("b1", "b", "ub", 120, 2 * H, 0),
    ];
    let o = simulate(&trace, &shares(), PolicyKind::FairTree, &cfg());
    assert_eq!(starts(&o), vec![0, 8 * H, 6 * H]);
    assert_eq!(o.preemptions, 0);
    assert_eq!(o.check, Default::default());
}

/// Siblings within a parent, and the tree above them. `a/heavy` runs 4 h
/// (16 GPU-h). Queued meanwhile, in this order: `b/x` (1 h), `a/heavy` (1 h),
/// `a/light` (1 h), `b/x` (1 h).
/// - 4 h: `b` has no usage, so its user ranks first: X1 runs to 5 h.
/// - 5 h: `b` used 4 GPU-h, `a` 16: `b`'s Level Fairshare 0.5 / 0.2 = 2.5
///   beats `a`'s 0.5 / 0.8 = 0.625, so X2 runs next, although `a/light` has
///   used nothing (a flat ranking of users would pick `a/light`).
/// - 6 h: within `a`, `light` (no usage) outranks `heavy`: L1, then H2 at 7 h.
#[test]
fn fair_tree_ranks_siblings_within_their_parent() {
    let trace = vec![
        job("h1", "a", "heavy", 0, 4 * H, 0),
        job("x1", "b", "x", 60, H, 0),
        job("h2", "a", "heavy", 120, H, 0),
        job("l1", "a", "light", 180, H, 0),
        job("x2", "b", "x", 240, H, 0),
    ];
    let o = simulate(&trace, &shares(), PolicyKind::FairTree, &cfg());
    assert_eq!(starts(&o), vec![0, 4 * H, 7 * H, 6 * H, 5 * H]);
    assert_eq!(o.check, Default::default());
}

/// The ranking itself on a deeper tree: root -> account `p` -> accounts
/// `p1`, `p2` with one user each, and root -> account `q` -> one user, every
/// association with one share. `q` used less than `p`, so `q`'s user outranks
/// both users below `p`, even `p2`'s, who used nothing.
#[test]
fn fair_tree_ranking_is_depth_first_by_level_fairshare() {
    let acct = |parent, shares| Assoc {
        parent,
        shares,
        usage: 0.0,
        user: false,
    };
    let user = |parent, usage| Assoc {
        parent: Some(parent),
        shares: 1.0,
        usage,
        user: true,
    };
    let r = rank(&[
        acct(None, 1.0),
        acct(Some(0), 1.0),
        acct(Some(0), 1.0),
        user(1, 6.0),
        user(2, 0.0),
        acct(None, 1.0),
        user(5, 4.0),
    ]);
    // p: 0.5 / 0.6; q: 0.5 / 0.4. Within p: p2 (no usage) first.
    assert_eq!((r.rank[6], r.rank[4], r.rank[3]), (3, 2, 1));
    assert_eq!(r.factor(6), 1.0);
    assert!(r.level_fs[5] > 1.0 && r.level_fs[0] < 1.0);
}

/// (job, run, start, end, preempted_by)
type RunRow = (u32, u32, i64, Option<i64>, Option<u32>);

/// `a` runs 1 h alone, so it is over its share when it submits A1 at 1 h:
/// A1 goes to `scavenger` and starts on the idle node, exempt from preemption
/// for its min_runtime of 2 h. B1 of `b` (no usage: `normal`) comes at 2 h and
/// waits: A1 is inside its PreemptExemptTime. At 3 h A1's time is up and B1
/// preempts it at once; A1 is requeued (still `scavenger`) and runs again
/// after B1.
#[test]
fn qos_preempts_a_scavenger_job_only_after_its_exempt_time() {
    let trace = vec![
        job("a0", "a", "ua", 0, H, 0),
        job("a1", "a", "ua", H, 10 * H, 2 * H),
        job("b1", "b", "ub", 2 * H, H, H),
    ];
    let o = simulate(&trace, &shares(), PolicyKind::MultifactorQos, &cfg());
    let classes: Vec<&str> = o.jobs.iter().map(|j| j.wait_class).collect();
    assert_eq!(classes, vec!["normal", "scavenger", "normal"]);
    let runs: Vec<RunRow> = o
        .runs
        .iter()
        .map(|r| (r.job, r.run, r.start, r.end, r.preempted_by))
        .collect();
    assert_eq!(
        runs,
        vec![
            (0, 0, 0, Some(H), None),
            (1, 0, H, Some(3 * H), Some(2)),
            (2, 0, 3 * H, Some(4 * H), None),
            (1, 1, 4 * H, Some(14 * H), None),
        ]
    );
    assert_eq!(o.preemptions_by_reason, [0, 1, 0]);
    assert_eq!(o.lost_gpu_secs, 4 * 2 * H);
    assert_eq!(o.check, Default::default());
    // Fair Tree alone never preempts: B1 waits for A1's end.
    let ft = simulate(&trace, &shares(), PolicyKind::FairTree, &cfg());
    assert_eq!(starts(&ft), vec![0, H, 11 * H]);
    assert_eq!(ft.preemptions, 0);
}

/// Nothing preempts a `normal` job, and a `scavenger` job preempts nothing:
/// A0 (`normal`, submitted before anyone used anything) holds the node for
/// 10 h past its 1 h window while B1 (`normal`) waits; A2, submitted while
/// `a` is over its share (`scavenger`), waits behind B1 although it came first.
#[test]
fn qos_never_preempts_normal_jobs() {
    let trace = vec![
        job("a0", "a", "ua", 0, 10 * H, H),
        job("a2", "a", "ua", 2 * H, H, 0),
        job("b1", "b", "ub", 3 * H, H, 0),
    ];
    let o = simulate(&trace, &shares(), PolicyKind::MultifactorQos, &cfg());
    assert_eq!(o.preemptions, 0);
    assert_eq!(starts(&o), vec![0, 11 * H, 10 * H]);
    let classes: Vec<&str> = o.jobs.iter().map(|j| j.wait_class).collect();
    assert_eq!(classes, vec!["normal", "scavenger", "normal"]);
    assert_eq!(o.check, Default::default());
}

/// `--policy fair-tree,multifactor-qos` replays both and reports them under
/// their names, with the invariants of every policy.
#[test]
fn baselines_are_selectable_and_reported() {
    let dir = std::env::temp_dir().join(format!("budget-sim-baselines-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let mut s = String::from("job_id,user,team,submit_time,gpus,duration_s,min_runtime_s,free\n");
    for i in 0..120 {
        let team = ["ta", "tb", "tc"][i % 3];
        let gpus = [1, 2, 4, 8][i % 4];
        let _ = writeln!(
            s,
            "j{i},{team}u{},{team},{},{gpus},{},1800,0",
            i % 2,
            i * 600,
            3_600 + (i * 7_919) % 40_000
        );
    }
    let trace = dir.join("trace.csv");
    std::fs::write(&trace, s).expect("write trace");
    let args = args(&[
        "--trace",
        trace.to_str().expect("utf-8 path"),
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--shares",
        "ta=8,tb=4,tc=4",
        "--policy",
        "fair-tree,multifactor-qos",
        "--json",
    ]);
    let p = prepare(&args).expect("prepare");
    assert_eq!(
        p.policies,
        vec![PolicyKind::FairTree, PolicyKind::MultifactorQos]
    );
    let reports: Vec<_> = run_policies(&p).into_iter().map(|(_, r)| r).collect();
    let v: serde_json::Value =
        serde_json::from_str(&to_json(&reports).expect("json")).expect("valid json");
    for name in ["fair-tree", "multifactor-qos"] {
        let r = &v[name];
        assert_eq!(r["contract_breaks"], 0, "{name}");
        assert_eq!(r["invariant_violations"], 0, "{name}: {}", r["checks"]);
        assert_eq!(r["unfinished_jobs"], 0, "{name}");
        assert!(!r["teams"][0]["entitlement_shortfall_mean"].is_null());
    }
    assert_eq!(v["fair-tree"]["preemptions"], 0);
    let _ = std::fs::remove_dir_all(&dir);
}
