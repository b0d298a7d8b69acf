//! Read-only reports computed from the store: the `sshare`-like fair-share
//! table, usage by account or user, and the explanation of one job.
//!
//! Everything here is derived (nothing is stored): the numbers come from
//! `policy_core` — window clipping (`Run`), `FairShare::compute`, tiers,
//! `priority_parts` and the cost-aware rule (`rebalance::decide`, `explain_wait`)
//! — applied to the ledger and tree.

use std::collections::BTreeMap;

use budget_protocol::reports::{ShareReport, ShareRow, UsageReport, UsageRow};
use budget_protocol::why::{PathStep, PreemptPeer, Why};
use budget_protocol::{PluginSnapshot, RunState};
use policy_core::FairShare;
use policy_core::fairshare::{NodeKind, Tier};
use policy_core::preempt;
use policy_core::priority::{job_priority, priority_parts};
use policy_core::protection::{is_protected, protected_until};
use policy_core::rebalance::{self, InFlight, PastPreemption, PreemptState};
use policy_core::tree::ROOT;

use crate::auth::Scope;
use crate::ledger::RunRecord;
use crate::store::{Store, hours};

/// Builds the fair-share table at `at`, rows in ranking (depth-first) order.
pub fn share(store: &Store, at: i64, scope: &Scope) -> ShareReport {
    let window = store.policy().window_secs;
    let (usage, free) = store.weighted_usage(at, window);
    let fs = FairShare::compute(store.tree(), &usage, at, window);
    // Free-tier usage rolled up like charged usage, for display.
    let mut free_by_account: BTreeMap<String, f64> = BTreeMap::new();
    let mut free_by_user: BTreeMap<(String, String), f64> = BTreeMap::new();
    for ((a, u), v) in &free {
        *free_by_user.entry((a.clone(), u.clone())).or_insert(0.0) += v;
        if store.tree().account(a).is_some() {
            for acc in std::iter::once(a.clone()).chain(store.tree().ancestors(a)) {
                *free_by_account.entry(acc).or_insert(0.0) += v;
            }
        }
    }
    let mut depth = vec![0usize; fs.nodes.len()];
    let mut rows = Vec::with_capacity(fs.nodes.len());
    for (i, n) in fs.nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            depth[i] = depth[p] + 1;
        }
        let parent_name = n.parent.map(|p| fs.nodes[p].name.clone());
        let (account, user, parent, free_secs, factor) = match &n.kind {
            NodeKind::Account => {
                let rank = fs.place(&n.name, "\u{0}").map_or(fs.num_leaves, |p| p.rank);
                (
                    n.name.clone(),
                    None,
                    parent_name,
                    free_by_account.get(&n.name).copied().unwrap_or(0.0),
                    n.leaf_rank
                        .map_or_else(|| fs.factor(rank), |r| fs.factor(r)),
                )
            }
            NodeKind::User { account } => (
                account.clone(),
                Some(n.name.clone()),
                Some(account.clone()),
                free_by_user
                    .get(&(account.clone(), n.name.clone()))
                    .copied()
                    .unwrap_or(0.0),
                fs.factor(n.leaf_rank.unwrap_or(fs.num_leaves)),
            ),
        };
        if !scope.can_read(&account)
            || user
                .as_deref()
                .is_some_and(|u| !scope.can_see_user_in(&account, u))
        {
            continue;
        }
        let overcommit =
            user.is_none() && store.tree().account(&account).is_some_and(|a| a.overcommit);
        rows.push(ShareRow {
            account,
            parent,
            user,
            depth: depth[i],
            allocation_gpu_hours: hours(n.allocation),
            usage_gpu_hours: hours(n.usage),
            free_usage_gpu_hours: hours(free_secs),
            ratio: n.ratio,
            rank: n.sibling_rank + 1,
            leaf_rank: n.leaf_rank.map(|r| r + 1),
            fair_share_factor: factor,
            tier: n.tier,
            overcommit,
        });
    }
    ShareReport {
        at,
        window_secs: window,
        rows,
    }
}

/// Usage in `[from, to]` by account (rolled up) or by (account, user).
pub fn usage(store: &Store, from: i64, to: i64, by_user: bool, scope: &Scope) -> UsageReport {
    let len = (to - from).max(0);
    let sums = store.ledger().usage(to, len);
    let w = store.weights();
    // (weighted, raw, free) GPU-seconds per (account, user).
    let mut cells: BTreeMap<(String, String), (f64, f64, f64)> = BTreeMap::new();
    for (a, u, t, s) in sums.charged {
        let c = cells.entry((a, u)).or_default();
        c.0 += s as f64 * w.weight(t.as_deref());
        c.1 += s as f64;
    }
    for (a, u, t, s) in sums.free {
        cells.entry((a, u)).or_default().2 += s as f64 * w.weight(t.as_deref());
    }
    let tree = store.tree();
    let mut rows = Vec::new();
    if by_user {
        for ((a, u), (wt, raw, free)) in cells {
            if scope.can_read(&a) && scope.can_see_user_in(&a, &u) {
                let in_tree = tree.account(&a).is_some();
                rows.push(UsageRow {
                    account: a,
                    user: Some(u),
                    usage_gpu_hours: hours(wt),
                    raw_gpu_hours: hours(raw),
                    free_gpu_hours: hours(free),
                    in_tree,
                });
            }
        }
    } else {
        let mut acc: BTreeMap<String, (f64, f64, f64, bool)> = BTreeMap::new();
        acc.insert(ROOT.to_string(), (0.0, 0.0, 0.0, true));
        for a in &tree.accounts {
            acc.insert(a.name.clone(), (0.0, 0.0, 0.0, true));
        }
        for ((a, _), (wt, raw, free)) in cells {
            let chain: Vec<String> = if tree.account(&a).is_some() {
                std::iter::once(a.clone())
                    .chain(tree.ancestors(&a))
                    .collect()
            } else {
                vec![a.clone()]
            };
            for name in chain {
                let e = acc.entry(name).or_insert((0.0, 0.0, 0.0, false));
                e.0 += wt;
                e.1 += raw;
                e.2 += free;
            }
        }
        for (a, (wt, raw, free, in_tree)) in acc {
            if scope.can_read(&a) {
                rows.push(UsageRow {
                    account: a,
                    user: None,
                    usage_gpu_hours: hours(wt),
                    raw_gpu_hours: hours(raw),
                    free_gpu_hours: hours(free),
                    in_tree,
                });
            }
        }
    }
    UsageReport {
        from,
        to,
        by: if by_user { "user" } else { "account" }.into(),
        rows,
    }
}

/// The wire's reason (`PreemptPeer::reason`) for what the cost-aware rule allowed.
/// A job of an over-budget path is `victim_over_budget`, as `preempt/budget`
/// records it.
fn wire_reason(fs: &FairShare, a: &rebalance::Allowed, victim: &RunRecord) -> preempt::Allowed {
    let over = preempt::job_tier(Some(fs), &victim.view()) == Tier::OverBudget;
    match a {
        rebalance::Allowed::VictimFreeTier => preempt::Allowed::VictimFreeTier,
        rebalance::Allowed::Rebalance(r) => match r.clause {
            _ if over => preempt::Allowed::VictimOverBudget,
            rebalance::Clause::OverBudget => preempt::Allowed::VictimOverBudget,
            rebalance::Clause::Entitlement => preempt::Allowed::Rebalance {
                parent: rebalance::node_name(fs, r.parent),
                preemptor_side: rebalance::node_name(fs, r.preemptor_side),
                preemptor_ratio: r.preemptor_ratio,
                victim_side: rebalance::node_name(fs, r.victim_side),
                victim_ratio: r.victim_ratio,
                // The wire's field is a whole number (budgetctl of the
                // previous release reads it so): the weighted GPUs held, rounded.
                victim_side_gpus: wire_gpus(r.victim_side_held),
                victim_side_entitled_gpus: r.victim_side_entitled,
            },
        },
    }
}

/// Weighted GPUs as the wire's whole number of GPUs (rounded, never negative).
fn wire_gpus(x: f64) -> u32 {
    if x.is_finite() {
        x.round().clamp(0.0, f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

/// Explains the latest run of a job at `now` with the given snapshot (its fair
/// share, and its cluster capacity as `preempt/budget` takes it). `visible` says which other jobs the caller may see: the peers listed
/// (jobs this one could preempt or be preempted by) are only those, so a
/// user's `why` never lists other users' jobs cluster-wide.
pub fn why(
    store: &Store,
    snap: &PluginSnapshot,
    job: &RunRecord,
    now: i64,
    visible: &dyn Fn(&RunRecord) -> bool,
) -> Why {
    let fs = &snap.fair_share;
    // The cost-aware rule, with the inputs `preempt/budget` has: every running
    // run (time limits, requeues, checkpoints as the controller synced them),
    // every pending one, and the rebalancing preemptions of the window.
    let running = store.ledger().in_state(RunState::Running);
    let pending = store.ledger().in_state(RunState::Pending);
    let history = crate::preemptions::rebalancing(store, now);
    // GPUs weighted by type with the snapshot's weights, as the plugins weigh
    // them (its capacity is weighted with the same).
    let w = &snap.weights;
    let state = PreemptState::compute(
        Some(fs),
        running.iter().map(|r| r.running_job(w)),
        pending.iter().map(|r| r.pending_job(w)),
        history.iter().map(|h| PastPreemption {
            at: h.at,
            preemptor_account: h.preemptor_account.as_deref().unwrap_or(""),
            preemptor_user: "",
            victim_account: &h.account,
            victim_user: &h.user,
            lost_gpu_secs: h.gpu_hours * 3600.0,
            // Its budget is charged the lost GPU-hours times their weight.
            weight: w.weight(h.gpu_type.as_deref()),
        }),
        snap.capacity_gpus(),
        store.policy().rebalance(),
        now,
    );
    let v = job.view();
    let place = fs.place(&job.account, &job.user);
    // Tier and rank as priority/budget computes them: entitlement first
    // (`priority_place`, from the GPUs each account holds), then Fair-Tree.
    let placed = state.priority_place(fs, &job.account, &job.user);
    let tier = match placed {
        Some((tier, _)) if !v.free_tier => tier,
        _ => preempt::job_tier(Some(fs), &v),
    };
    let rank = placed.map(|(_, r)| r);
    let age = match job.start {
        Some(s) => s - job.first_seen,
        None => now - job.first_seen,
    };
    let parts = priority_parts(tier, rank.unwrap_or(fs.num_leaves), fs.num_leaves, age);
    let priority = job_priority(tier, rank.unwrap_or(fs.num_leaves), fs.num_leaves, age);
    let path = place
        .map(|p| {
            fs.path(p.node)
                .into_iter()
                .map(|i| {
                    let n = &fs.nodes[i];
                    PathStep {
                        node: match &n.kind {
                            NodeKind::Account => n.name.clone(),
                            NodeKind::User { account } => format!("{account}/{}", n.name),
                        },
                        allocation_gpu_hours: hours(n.allocation),
                        usage_gpu_hours: hours(n.usage),
                        ratio: n.ratio,
                        rank: n.sibling_rank + 1,
                        tier: n.tier,
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let none = InFlight::default();
    let peer = |r: &RunRecord, reason| PreemptPeer {
        job_id: r.job_id,
        run: r.run,
        account: r.account.clone(),
        user: r.user.clone(),
        gpus: r.gpus,
        reason,
    };
    let mut could_preempt = Vec::new();
    let mut preemptable_by = Vec::new();
    let mut wait = None;
    match job.state {
        RunState::Pending => {
            let p = job.pending_job(w);
            let views: Vec<_> = running.iter().map(|r| r.running_job(w)).collect();
            for (r, v) in running.iter().zip(&views).filter(|(r, _)| visible(r)) {
                if let Ok(a) = rebalance::decide(&state, Some(fs), &none, &p, v, now) {
                    could_preempt.push(peer(r, wire_reason(fs, &a, r)));
                }
            }
            let w = rebalance::explain_wait(&state, Some(fs), &none, &p, &views, now);
            wait = Some(rebalance::describe_wait(Some(fs), &w, now));
        }
        RunState::Running => {
            let v = job.running_job(w);
            for p in pending.iter().filter(|p| visible(p)) {
                if let Ok(a) =
                    rebalance::decide(&state, Some(fs), &none, &p.pending_job(w), &v, now)
                {
                    preemptable_by.push(peer(p, wire_reason(fs, &a, job)));
                }
            }
        }
        _ => {}
    }
    let running_now = job.state == RunState::Running;
    Why {
        at: now,
        job_id: job.job_id,
        run: job.run,
        account: job.account.clone(),
        user: job.user.clone(),
        state: job.state,
        gpus: job.gpus,
        gpu_type: job.gpu_type.clone(),
        free_tier: job.free_tier,
        start: job.start,
        end: job.end,
        min_runtime_secs: job.min_runtime_secs,
        protected_until: job
            .start
            .filter(|_| running_now && !job.free_tier)
            .map(|s| protected_until(s, job.min_runtime_secs)),
        protected_now: running_now
            && job
                .start
                .is_some_and(|s| is_protected(s, job.min_runtime_secs, job.free_tier, now)),
        tier,
        rank: rank.map(|r| r + 1),
        num_leaves: fs.num_leaves,
        fair_share_factor: rank.map_or(0.0, |r| fs.factor(r)),
        priority,
        priority_parts: parts,
        path,
        wait,
        could_preempt,
        preemptable_by,
        preemption: crate::preemptions::why(store, fs, job, now),
        idle: None,
    }
}
