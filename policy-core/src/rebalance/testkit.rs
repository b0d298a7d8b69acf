//! Fixtures shared by the rule's tests: small trees, jobs and states.

use super::*;
pub(super) use crate::fairshare::{FairShare, Tier, UsageByLeaf};
pub(super) use crate::tree::{AccountSpec, MemberSpec, TreeSpec};

pub(super) const W: i64 = 7 * 86_400;

/// Teams `a` and `b` with `alloc` GPUs each (as GPU-hours per 7 days), usage in GPU-hours.
pub(super) fn two(alloc: f64, a_used: f64, b_used: f64) -> FairShare {
    let tree = TreeSpec {
        root_allocation_gpu_hours: None,
        accounts: ["a", "b"]
            .iter()
            .map(|n| AccountSpec {
                name: n.to_string(),
                parent: None,
                allocation_gpu_hours: alloc * 168.0,
                overcommit: false,
            })
            .collect(),
        members: ["a", "b"]
            .iter()
            .map(|n| MemberSpec {
                user: format!("u{n}"),
                account: n.to_string(),
                allocation_gpu_hours: None,
            })
            .collect(),
    };
    let usage: UsageByLeaf = [
        (("a".to_string(), "ua".to_string()), a_used * 3600.0),
        (("b".to_string(), "ub".to_string()), b_used * 3600.0),
    ]
    .into_iter()
    .collect();
    FairShare::compute(&tree, &usage, 0, W)
}

pub(super) fn run<'a>(
    id: u32,
    team: &'a str,
    user: &'a str,
    gpus: u32,
    start: i64,
    limit: i64,
) -> RunningJob<'a> {
    RunningJob {
        job_id: id,
        account: team,
        user,
        free_tier: false,
        gpus,
        weight: 1.0,
        run_start: start,
        time_limit: Some(limit),
        min_runtime: 3600,
        checkpoint: None,
        grace: 0,
        requeues: 0,
        leaf: None,
        partition_tier: None,
        partition_preempt_off: None,
        qos: None,
    }
}

pub(super) fn pend<'a>(id: u32, team: &'a str, user: &'a str, gpus: u32) -> PendingJob<'a> {
    PendingJob {
        job_id: id,
        account: team,
        user,
        free_tier: false,
        gpus,
        weight: 1.0,
        leaf: None,
        partition_tier: None,
        qos: None,
    }
}

/// Where a pending job of `who` (user `u<who>`) ranks under `policy`, with
/// `running` on a 16-GPU cluster.
pub(super) fn ranked(
    fs: &FairShare,
    running: &[RunningJob<'_>],
    policy: RebalancePolicy,
    who: &str,
) -> Option<(Tier, u32)> {
    let st = PreemptState::compute(
        Some(fs),
        running.iter().copied(),
        [],
        [],
        Some(16.0),
        policy,
        H,
    );
    st.priority_place(fs, who, &format!("u{who}"))
}

/// What the preemption rule says to a pending 4-GPU job of `b` taking
/// `victim` under `policy` (priority-only knobs must not change it).
pub(super) fn b_takes(
    fs: &FairShare,
    running: &[RunningJob<'_>],
    victim: &RunningJob<'_>,
    policy: RebalancePolicy,
) -> Result<Allowed, Denied> {
    let st = PreemptState::compute(
        Some(fs),
        running.iter().copied(),
        [pend(9, "b", "ub", 4)],
        [],
        Some(16.0),
        policy,
        H,
    );
    decide(
        &st,
        Some(fs),
        &InFlight::default(),
        &pend(9, "b", "ub", 4),
        victim,
        10 * H,
    )
}

pub(super) const H: i64 = 3600;

/// b holds 12 of a 16-GPU cluster (entitled 8 each); a holds 4 and wants 8 more.
pub(super) fn starved(limit: i64) -> (FairShare, Vec<RunningJob<'static>>) {
    let fs = two(8.0, 100.0, 1000.0);
    let running = vec![
        run(1, "a", "ua", 4, 0, 48 * H),
        run(2, "b", "ub", 4, 0, limit),
        run(3, "b", "ub", 4, 0, limit),
        run(4, "b", "ub", 4, 0, limit),
    ];
    (fs, running)
}

/// A rebalancing of the window: a job of `a` took one of `b` at `at`,
/// destroying `lost_hours` GPU-hours of GPUs weighing `weight`.
pub(super) fn a_took_from_b(at: i64, lost_hours: f64, weight: f64) -> PastPreemption<'static> {
    PastPreemption {
        at,
        preemptor_account: "a",
        preemptor_user: "ua",
        victim_account: "b",
        victim_user: "ub",
        lost_gpu_secs: lost_hours * 3600.0,
        weight,
    }
}

/// Account `t` (16 GPUs of 32) with members `u1` and `u2`, and account `o`
/// (16) with member `uo`; usage in GPU-hours per user.
pub(super) fn one_account_two_users(u1_used: f64, u2_used: f64) -> FairShare {
    let acct = |n: &str| AccountSpec {
        name: n.to_string(),
        parent: None,
        allocation_gpu_hours: 16.0 * 168.0,
        overcommit: false,
    };
    let member = |u: &str, a: &str| MemberSpec {
        user: u.to_string(),
        account: a.to_string(),
        allocation_gpu_hours: None,
    };
    let tree = TreeSpec {
        root_allocation_gpu_hours: None,
        accounts: vec![acct("t"), acct("o")],
        members: vec![member("u1", "t"), member("u2", "t"), member("uo", "o")],
    };
    let usage: UsageByLeaf = [
        (("t".to_string(), "u1".to_string()), u1_used * 3600.0),
        (("t".to_string(), "u2".to_string()), u2_used * 3600.0),
    ]
    .into_iter()
    .collect();
    FairShare::compute(&tree, &usage, 0, W)
}

/// `j` on GPUs of billing weight `w`.
pub(super) fn on(j: RunningJob<'_>, w: f64) -> RunningJob<'_> {
    RunningJob { weight: w, ..j }
}

/// `n` running jobs of team `t` with `gpus` GPUs of weight `w` each,
/// started at 0 with a 100 h limit, ids from `first`.
pub(super) fn jobs_of(
    t: &'static str,
    u: &'static str,
    first: u32,
    n: u32,
    gpus: u32,
    w: f64,
) -> Vec<RunningJob<'static>> {
    (0..n)
        .map(|i| on(run(first + i, t, u, gpus, 0, 100 * H), w))
        .collect()
}

/// Teams a and b entitled to 64 weighted GPUs each on a cluster of 128.
pub(super) fn sixty_four(a_ratio: f64, b_ratio: f64) -> FairShare {
    let alloc = 64.0 * 168.0;
    two(64.0, a_ratio * alloc, b_ratio * alloc)
}

pub(super) fn state(
    fs: &FairShare,
    running: &[RunningJob<'_>],
    pending: &[PendingJob<'_>],
    now: i64,
) -> PreemptState {
    state_under(RebalancePolicy::default(), fs, running, pending, now)
}

pub(super) fn state_under(
    policy: RebalancePolicy,
    fs: &FairShare,
    running: &[RunningJob<'_>],
    pending: &[PendingJob<'_>],
    now: i64,
) -> PreemptState {
    PreemptState::compute(
        Some(fs),
        running.iter().copied(),
        pending.iter().copied(),
        [],
        Some(128.0),
        policy,
        now,
    )
}
