//! The backfill reservation (`--backfill`), worked out by hand: a two-node job
//! waits for nodes that free up one GPU at a time, and a later one-GPU job
//! with a long limit could take the GPU it needs.
//!
//! Cluster: 3 nodes x 2 GPUs; one team `t` (decayed fair share: one priority
//! class, first come first served, no preemption); exact time limits.
//!
//! | job | submit | GPUs | duration | placed |
//! |---|---|---|---|---|
//! | P1 | 0     | 1 | 3,600   | node 0 |
//! | P2 | 0     | 1 | 10,800  | node 0 |
//! | Q  | 0     | 2 | 10,800  | node 1 |
//! | L  | 0     | 1 | 360,000 | node 2 |
//! | W  | 60    | 4 | 18,000  | two whole nodes |
//! | S  | 3,700 | 1 | 36,000  | see below |
//!
//! At 3,700 (P1 has ended) node 0 and node 2 each have one GPU free, and W,
//! first in line, does not fit. Its reservation:
//! - `gpus` (the old model): 2 GPUs free, +1 (P2) and +2 (Q) at 10,800: 5 >= 4,
//!   shadow 10,800 with 1 GPU to spare. S (limit past the shadow, 1 GPU <= 1)
//!   may start anywhere, and first fit puts it on node 0: at 10,800 only node 1
//!   is whole, and W waits for S to end at 39,700.
//! - `nodes` (Slurm's `sched/backfill`): releasing P2 and Q at 10,800 makes
//!   nodes 0 and 1 whole; W is planned there and both are held. S ends after
//!   10,800, so it may only use node 2: it starts there, and W starts at 10,800.
//!
//! These hand-worked cases backfill on every event (`bf_interval` 0). With
//! Slurm's `bf_interval` (default 30 s) the main scheduler, on S's submission,
//! stops at W (first in line, blocked) and S starts at the next backfill pass,
//! 3,720; W still starts at 10,800, when the main scheduler finds it fits.

use std::collections::BTreeMap;

use budget_sim::engine::{Backfill, MinRuntimeRule, PolicyKind, SimConfig, simulate};
use budget_sim::trace::JobSpec;

fn job(id: &str, submit: i64, gpus: u32, duration: i64) -> JobSpec {
    JobSpec {
        id: id.into(),
        user: "ut".into(),
        team: "t".into(),
        submit,
        gpus,
        duration,
        min_runtime: Some(0),
        free: false,
        checkpoint: None,
        limit: None,
    }
}

const W: u32 = 4;
const S: u32 = 5;

/// `(first start of W, first start of S, S's nodes)` under `backfill`,
/// backfilling on every event.
fn replay(backfill: Backfill) -> (i64, i64, Vec<u32>) {
    replay_every(backfill, 0)
}

/// [`replay`] with backfill passes every `bf_interval` seconds.
fn replay_every(backfill: Backfill, bf_interval: i64) -> (i64, i64, Vec<u32>) {
    let trace = vec![
        job("P1", 0, 1, 3_600),
        job("P2", 0, 1, 10_800),
        job("Q", 0, 2, 10_800),
        job("L", 0, 1, 360_000),
        job("W", 60, 4, 18_000),
        job("S", 3_700, 1, 36_000),
    ];
    let shares: BTreeMap<String, f64> = [("t".to_string(), 6.0)].into_iter().collect();
    let cfg = SimConfig {
        nodes: 3,
        gpus_per_node: 2,
        min_runtime: MinRuntimeRule::Cap(0),
        backfill,
        bf_interval,
        ..SimConfig::default()
    };
    let o = simulate(&trace, &shares, PolicyKind::Decay, &cfg);
    assert_eq!(o.runs.len(), 6, "every job runs once");
    let run = |j: u32| o.runs.iter().find(|r| r.job == j).expect("ran");
    let nodes = run(S).alloc.iter().map(|&(n, _)| n).collect();
    (run(W).start, run(S).start, nodes)
}

#[test]
fn nodes_reservation_holds_the_nodes_of_the_planned_start() {
    assert_eq!(replay(Backfill::Nodes), (10_800, 3_700, vec![2]));
}

#[test]
fn a_backfill_candidate_waits_for_the_next_backfill_pass() {
    assert_eq!(budget_sim::engine::SimConfig::default().bf_interval, 30);
    assert_eq!(replay_every(Backfill::Nodes, 30), (10_800, 3_720, vec![2]));
    assert_eq!(replay_every(Backfill::Nodes, 300), (10_800, 3_900, vec![2]));
}

#[test]
fn gpu_count_reservation_lets_a_small_job_fragment_them() {
    assert_eq!(replay(Backfill::Gpus), (39_700, 3_700, vec![0]));
}

/// Several reservations (`--backfill-reservations`), worked out by hand.
///
/// Cluster: 3 nodes x 2 GPUs, one team, decayed fair share (first come first
/// served), exact time limits.
///
/// | job | submit | GPUs | duration | placed |
/// |---|---|---|---|---|
/// | A | 0   | 2 | 10,000 | node 0 |
/// | B | 0   | 1 | 20,000 | node 1 |
/// | C | 0   | 2 | 5,000  | node 2 |
/// | X | 60  | 4 | 40,000 | two whole nodes |
/// | Y | 60  | 2 | 10,000 | one whole node |
/// | S | 100 | 1 | 50,000 | see below |
///
/// At 60 X does not fit; its plan releases C (5,000) and A (10,000): nodes 0
/// and 2, held from 10,000. Y (one node with 2 GPUs free) does not fit either.
/// - One reservation: Y holds nothing. S fits on node 1's free GPU, and ending
///   after 10,000 it must stay off nodes 0 and 2, so it takes node 1 at 100.
///   X starts at 10,000 on nodes 0 and 2 until 50,000; node 1 holds B until
///   20,000 and S until 50,100, so Y waits for X: it starts at 50,000.
/// - Two: Y is planned off nodes 0 and 2, on node 1 when B ends (20,000), and
///   holds it. S, ending after both planned starts, fits nowhere else and
///   waits. Y starts at 20,000 on node 1 and ends at 30,000; S then starts on
///   node 1 at 30,000 (nodes 0 and 2 run X).
/// - Two, with a backfill window of 15,000 s (Slurm's `bf_window`): at 60 X's
///   plan (10,000) lies within it and Y's (20,000) beyond, so Y holds nothing
///   and the replay is the one-reservation one.
fn replay_reservations(k: usize) -> [(i64, Vec<u32>); 2] {
    replay_reservations_within(k, budget_sim::engine::DEFAULT_BACKFILL_WINDOW)
}

fn replay_reservations_within(k: usize, window: i64) -> [(i64, Vec<u32>); 2] {
    let trace = vec![
        job("A", 0, 2, 10_000),
        job("B", 0, 1, 20_000),
        job("C", 0, 2, 5_000),
        job("X", 60, 4, 40_000),
        job("Y", 60, 2, 10_000),
        job("S", 100, 1, 50_000),
    ];
    let shares: BTreeMap<String, f64> = [("t".to_string(), 6.0)].into_iter().collect();
    let cfg = SimConfig {
        nodes: 3,
        gpus_per_node: 2,
        min_runtime: MinRuntimeRule::Cap(0),
        backfill: Backfill::Nodes,
        backfill_reservations: k,
        backfill_window: window,
        bf_interval: 0,
        ..SimConfig::default()
    };
    let o = simulate(&trace, &shares, PolicyKind::Decay, &cfg);
    assert_eq!(o.runs.len(), 6, "every job runs once");
    let run = |j: u32| {
        let r = o.runs.iter().find(|r| r.job == j).expect("ran");
        (r.start, r.alloc.iter().map(|&(n, _)| n).collect())
    };
    [run(4), run(5)]
}

#[test]
fn a_second_reservation_holds_the_node_of_the_second_blocked_job() {
    assert_eq!(replay_reservations(1), [(50_000, vec![0]), (100, vec![1])]);
    assert_eq!(
        replay_reservations(2),
        [(20_000, vec![1]), (30_000, vec![1])]
    );
    // More slots than blocked jobs change nothing; every blocked job holds
    // nodes by default, as in Slurm.
    assert_eq!(replay_reservations(8), replay_reservations(2));
    assert_eq!(
        SimConfig::default().backfill_reservations,
        budget_sim::engine::ALL_RESERVATIONS
    );
    assert_eq!(
        replay_reservations(budget_sim::engine::ALL_RESERVATIONS),
        replay_reservations(2)
    );
}

#[test]
fn a_job_planned_beyond_the_backfill_window_holds_nothing() {
    assert_eq!(
        replay_reservations_within(2, 15_000),
        [(50_000, vec![0]), (100, vec![1])]
    );
    // Y's plan (20,000, seen from 60) is just within a window of 19,940 s.
    assert_eq!(
        replay_reservations_within(2, 19_940),
        [(20_000, vec![1]), (30_000, vec![1])]
    );
}

/// The flags: `all` or 1-10,000 reservations, a positive window; a GPU-count
/// reservation holds no nodes, so more than one is refused, and by default it
/// has its one.
#[test]
fn backfill_planning_flags_are_checked() {
    use budget_sim::cli::prepare;

    let parse = |extra: &[&str]| {
        let mut v = vec!["--scenario", "overload", "--max-jobs", "10"];
        v.extend_from_slice(extra);
        super::cli_args::try_args(&v)
    };
    let cfg = |extra: &[&str]| prepare(&parse(extra).expect("parses")).map(|p| p.cfg);

    let default = cfg(&[]).expect("default");
    assert_eq!(
        default.backfill_reservations,
        budget_sim::engine::ALL_RESERVATIONS
    );
    assert_eq!(default.backfill_window, 7 * 86_400);
    assert_eq!((default.bf_interval, default.requeue_delay), (30, 121));
    let every = cfg(&["--bf-interval", "0", "--requeue-delay", "6s"]).expect("0, 6s");
    assert_eq!((every.bf_interval, every.requeue_delay), (0, 6));
    let some = cfg(&["--backfill-reservations", "16", "--backfill-window", "1d"]).expect("16, 1d");
    assert_eq!(
        (some.backfill_reservations, some.backfill_window),
        (16, 86_400)
    );
    assert_eq!(
        cfg(&["--backfill-reservations", "all"])
            .expect("all")
            .backfill_reservations,
        budget_sim::engine::ALL_RESERVATIONS
    );
    assert_eq!(
        cfg(&["--backfill", "gpus"])
            .expect("gpus")
            .backfill_reservations,
        1
    );

    for bad in [
        &["--backfill-reservations", "0"][..],
        &["--backfill-reservations", "10001"],
        &["--backfill-reservations", "some"],
        &["--backfill-window", "0"],
        &["--backfill-window", "soon"],
    ] {
        assert!(parse(bad).is_err(), "{bad:?} should be refused");
    }
    let err = cfg(&["--backfill", "gpus", "--backfill-reservations", "all"])
        .expect_err("gpus holds no nodes")
        .to_string();
    assert!(
        err.contains("--backfill-reservations all needs --backfill nodes"),
        "{err}"
    );
}
