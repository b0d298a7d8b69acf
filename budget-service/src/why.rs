//! The explanation of one job (`GET /v1/jobs/{id}/why`, `budgetctl why`): its
//! tier, rank path and priority parts as `priority/budget` computes them, its
//! protected window, and every preemption answer (whom it could preempt or be
//! preempted by now, from when, why a pending job waits) from the one rule
//! `preempt/budget` applies: the cost-aware rule of `policy_core::rebalance`
//! ([`rebalance::decide`]), in the state the plugin's thread computes from
//! budgetd's ledger and snapshot.
//!
//! Every job it lists besides the explained one passes the caller's `visible`
//! test, so a user's `why` never names other teams' jobs.

use budget_protocol::why::{
    DrainWait, Outlook, PathStep, PeerReason, PreemptPeer, Why, WhyPreemption,
};
use budget_protocol::{PluginSnapshot, RunState};
use policy_core::fairshare::{NodeKind, Tier};
use policy_core::priority::{job_priority, priority_parts};
use policy_core::protection::{is_protected, protected_until, window_end};
use policy_core::rebalance::{self, InFlight, PastPreemption, PreemptState};
use policy_core::{FairShare, GpuWeights, hostlist, preempt};

use crate::ledger::RunRecord;
use crate::partitions::{Partitions, preempt_off_of, tier_of};
use crate::store::{Store, hours};

/// Which jobs the caller may see.
pub type Visible<'v> = dyn Fn(&RunRecord) -> bool + 'v;

/// The cost-aware rule with the inputs `preempt/budget` has: the snapshot's
/// fair share and GPU weights, and the period state computed from every running
/// run (time limits, requeues, checkpoints as the controller synced them),
/// every pending one, and the rebalancing preemptions of the window; each
/// run's partition `PriorityTier` and `PreemptMode=OFF` from Slurm's partitions
/// (`crate::partitions`), as the plugin reads them from the job record.
/// `crate::shadow` decides its would-be preemptions with it too.
pub(crate) struct Rule<'a> {
    pub(crate) fs: &'a FairShare,
    pub(crate) weights: &'a GpuWeights,
    pub(crate) state: PreemptState,
    partitions: &'a Partitions,
}

impl<'a> Rule<'a> {
    pub(crate) fn new(
        store: &Store,
        snap: &'a PluginSnapshot,
        partitions: &'a Partitions,
        running: &[RunRecord],
        pending: &[RunRecord],
        now: i64,
    ) -> Rule<'a> {
        let fs = &snap.fair_share;
        // GPUs weighted by type with the snapshot's weights, as the plugins weigh
        // them (its capacity is weighted with the same).
        let w = &snap.weights;
        let history = crate::preemptions::rebalancing(store, now);
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
        Rule {
            fs,
            weights: w,
            state,
            partitions,
        }
    }

    /// `r` as the rule sees a running job: GPUs weighted, its partition's tier
    /// and whether that partition has `PreemptMode=OFF`.
    pub(crate) fn running<'r>(&self, r: &'r RunRecord) -> rebalance::RunningJob<'r> {
        rebalance::RunningJob {
            partition_tier: tier_of(self.partitions, r.partition.as_deref()),
            partition_preempt_off: preempt_off_of(self.partitions, r.partition.as_deref()),
            ..r.running_job(self.weights)
        }
    }

    /// `r` as the rule sees a pending job, as [`Rule::running`].
    pub(crate) fn pending<'r>(&self, r: &'r RunRecord) -> rebalance::PendingJob<'r> {
        rebalance::PendingJob {
            partition_tier: tier_of(self.partitions, r.partition.as_deref()),
            ..r.pending_job(self.weights)
        }
    }

    /// Whether pending `preemptor` may preempt running `victim` at `at` (in
    /// this state, no grant in flight), and the wire's reason.
    fn allows(&self, preemptor: &RunRecord, victim: &RunRecord, at: i64) -> Option<PeerReason> {
        self.allows_with(&InFlight::default(), preemptor, victim, at)
    }

    /// [`Rule::allows`] with grants and victims already in flight, as the
    /// plugin's callback counts them within one period.
    pub(crate) fn allows_with(
        &self,
        in_flight: &InFlight,
        preemptor: &RunRecord,
        victim: &RunRecord,
        at: i64,
    ) -> Option<PeerReason> {
        let a = rebalance::decide(
            &self.state,
            Some(self.fs),
            in_flight,
            &self.pending(preemptor),
            &self.running(victim),
            at,
        )
        .ok()?;
        let over = preempt::job_tier(Some(self.fs), &victim.view()) == Tier::OverBudget;
        Some(PeerReason::of(self.fs, &a, over))
    }
}

/// Explains the latest run of a job at `now` with the given snapshot (its fair
/// share, and its cluster capacity as `preempt/budget` takes it). The other jobs
/// listed (peers now, timing lines) are only those `visible` accepts.
pub fn explain(
    store: &Store,
    snap: &PluginSnapshot,
    partitions: &Partitions,
    job: &RunRecord,
    now: i64,
    visible: &Visible<'_>,
) -> Why {
    Explainer::new(store, snap, partitions, now).explain(job, visible)
}

/// The state every explanation at one instant reads (the running and
/// pending runs, the rule's period state), computed once: [`explain`] for
/// one job, or many jobs of the same instant without reading the whole
/// ledger again for each (the web view's queue).
pub struct Explainer<'a> {
    store: &'a Store,
    running: Vec<RunRecord>,
    pending: Vec<RunRecord>,
    rule: Rule<'a>,
    now: i64,
}

impl<'a> Explainer<'a> {
    /// The state at `now` with the snapshot `snap` and Slurm's partitions.
    pub fn new(
        store: &'a Store,
        snap: &'a PluginSnapshot,
        partitions: &'a Partitions,
        now: i64,
    ) -> Explainer<'a> {
        let running = store.ledger().in_state(RunState::Running);
        let pending = store.ledger().in_state(RunState::Pending);
        let rule = Rule::new(store, snap, partitions, &running, &pending, now);
        Explainer {
            store,
            running,
            pending,
            rule,
            now,
        }
    }

    /// Every pending run of the ledger at this instant.
    pub fn pending(&self) -> &[RunRecord] {
        &self.pending
    }

    /// [`explain`] of `job` at this instant.
    pub fn explain(&self, job: &RunRecord, visible: &Visible<'_>) -> Why {
        explain_in(self, job, visible)
    }
}

fn explain_in(ex: &Explainer<'_>, job: &RunRecord, visible: &Visible<'_>) -> Why {
    let (store, running, pending, rule, now) =
        (ex.store, &ex.running, &ex.pending, &ex.rule, ex.now);
    let fs = rule.fs;
    let v = job.view();
    let place = fs.place(&job.account, &job.user);
    // Tier and rank as priority/budget computes them: entitlement first
    // (`priority_place`, from the GPUs each account holds), then Fair-Tree.
    let placed = rule.state.priority_place(fs, &job.account, &job.user);
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
            for r in running.iter().filter(|r| visible(r)) {
                if let Some(reason) = rule.allows(job, r, now) {
                    could_preempt.push(peer(r, reason));
                }
            }
            let p = rule.pending(job);
            let views: Vec<_> = running.iter().map(|r| rule.running(r)).collect();
            let none = InFlight::default();
            let wt = rebalance::explain_wait(&rule.state, Some(fs), &none, &p, &views, now);
            // The words name only jobs the reader may see, as the lists do.
            let shown: std::collections::HashSet<u32> = running
                .iter()
                .chain(pending.iter())
                .filter(|r| visible(r))
                .map(|r| r.job_id)
                .collect();
            wait = Some(rebalance::describe_wait_shown(Some(fs), &wt, now, &|id| {
                shown.contains(&id)
            }));
        }
        RunState::Running => {
            for p in pending.iter().filter(|p| visible(p)) {
                if let Some(reason) = rule.allows(p, job, now) {
                    preemptable_by.push(peer(p, reason));
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
        preemption: timing(store, rule, job, (running, pending), now, visible),
        idle: None,
    }
}

/// The timing part of `why` for `job` at `now`: the instant each visible
/// running job's window ends and whether the rule allows the pending `job` to
/// take it then (today's state, evaluated at that instant); for a running
/// `job`, the visible pending jobs that may take it once its own window ends;
/// a drain's requeue time, or that the drain waits for its time limit (a
/// `PreemptMode=OFF` partition); the preemption of the previous (or this
/// requeued) run.
fn timing(
    store: &Store,
    rule: &Rule<'_>,
    job: &RunRecord,
    (running, pending): (&[RunRecord], &[RunRecord]),
    now: i64,
    visible: &Visible<'_>,
) -> WhyPreemption {
    let outlook = |r: &RunRecord, at: i64, reason: PeerReason| Outlook {
        job_id: r.job_id,
        run: r.run,
        account: r.account.clone(),
        user: r.user.clone(),
        gpus: r.gpus,
        at,
        reason,
    };
    let mut out = WhyPreemption::default();
    match job.state {
        RunState::Pending => {
            for r in running.iter().filter(|r| visible(r)) {
                let at = window_end(r.free_tier, r.min_runtime_secs, r.start, now);
                if let Some(reason) = rule.allows(job, r, at) {
                    out.may_preempt.push(outlook(r, at, reason));
                }
            }
            out.may_preempt.sort_by_key(|o| (o.at, o.job_id));
            // A pending re-run: say what happened to the previous run.
            if job.run > 0 {
                out.preempted = crate::preemptions::of_run(store, job.job_id, job.run - 1);
            }
        }
        RunState::Running => {
            let at = window_end(job.free_tier, job.min_runtime_secs, job.start, now);
            for p in pending.iter().filter(|p| visible(p)) {
                if let Some(reason) = rule.allows(p, job, at) {
                    out.may_be_taken_by.push(outlook(p, at, reason));
                }
            }
            let drained = crate::drains::list(store).unwrap_or_default();
            if let Some(nodes) = &job.nodes {
                let mine = hostlist::expand(nodes).unwrap_or_default();
                if drained.iter().any(|d| mine.contains(&d.node)) {
                    // A job of a PreemptMode=OFF partition is never requeued
                    // by a drain: the drain worker waits for it to reach its
                    // time limit.
                    match rule.running(job).partition_preempt_off {
                        Some(partition) => {
                            out.drain_waits = Some(DrainWait {
                                partition: partition.to_string(),
                                until: job.start.zip(job.time_limit_secs).map(|(s, l)| s + l),
                            });
                        }
                        None => out.drain_requeue_at = Some(at),
                    }
                }
            }
            if job.run > 0 {
                out.preempted = crate::preemptions::of_run(store, job.job_id, job.run - 1);
            }
        }
        RunState::Requeued | RunState::Ended => {
            out.preempted = crate::preemptions::of_run(store, job.job_id, job.run);
        }
    }
    out
}
