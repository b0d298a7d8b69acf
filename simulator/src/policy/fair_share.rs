//! The product's policy: tiers + Fair-Tree rank from
//! `policy_core::FairShare::compute` on the exact sliding-window usage
//! (incremental `A(t) - A(t-W)`, checked equal to `policy_core::window_usage`
//! with `--verify-window`), then age. One account per team, one leaf per user;
//! a class is a leaf plus the free-tier flag, with priority
//! `policy_core::priority::job_priority(tier, rank, leaves, 0)` (the rank field
//! dominates the age field, so this order *is* the full priority order; a test
//! checks it).
//!
//! Preemption, two rules:
//! - `budget` ([`policy_core::rebalance`]): the plugin's period state
//!   ([`PreemptState`]) is computed at the first preemption attempt of each
//!   pass from what the plugin's thread has (running jobs with their *time
//!   limits*, pending demand, the preemption record, the snapshot), and stays
//!   fixed during the pass, as in `slurmctld` (the thread refreshes between
//!   passes, not inside one). Preemptors granted victims in the pass are kept
//!   in [`InFlight`], as the plugin's callback does. The callback's decision
//!   is [`rebalance::decide`], in its two halves: side-level checks once per
//!   (preemptor, victim leaf), victim-level checks per job: the same code.
//! - `budget-v1` ([`budget_v1::may_preempt`], [`budget_v1::victim_order`]):
//!   the old rule on live holdings, unchanged, so its figures reproduce.
//!
//! Holdings count non-free running jobs. Traces and scenarios name no GPU
//! type, so every job's GPUs weigh 1 (`RunningJob::weight`): weighted GPUs
//! are raw GPUs here and the figures are those of the rule before weights.

use std::collections::{BTreeMap, VecDeque};

use policy_core::fairshare::{FairShare, LeafKey, Tier, UsageByLeaf};
use policy_core::preempt::JobView;
use policy_core::priority::job_priority;
use policy_core::rebalance::{
    self, Allowed, Clause, Denied, InFlight, PastPreemption, PendingJob, PreemptState, RunningJob,
};
use policy_core::tree::{AccountSpec, MemberSpec, TreeSpec};

use super::budget_v1::{self, Context, PreemptPolicy};
use super::{Candidate, PolicyKind, SchedPolicy};
use crate::config::SimConfig;
use crate::view::{EngineView, JobInit, JobState, TeamInfo};

/// What the rule reads of a running job's record, copied when the run starts
/// (none of it changes while it runs): the period state and each preemption
/// attempt read it for hundreds of running jobs, and the replay's job table
/// is too large to stay in cache.
#[derive(Debug, Clone, Copy)]
struct RunInfo {
    leaf: u32,
    free: bool,
    gpus: u32,
    run_start: i64,
    limit_end: i64,
    min_runtime: i64,
    checkpoint: i64,
    /// The run's number: the times the job was requeued before it.
    run: u32,
}

impl RunInfo {
    fn of(job: &JobState) -> RunInfo {
        RunInfo {
            leaf: job.leaf,
            free: job.free,
            gpus: job.gpus,
            run_start: job.run_start,
            limit_end: job.limit_end,
            min_runtime: job.min_runtime,
            checkpoint: job.checkpoint,
            run: job.run,
        }
    }
}

pub(crate) struct FairSharePolicy {
    kind: PolicyKind,
    tree: TreeSpec,
    window: i64,
    verify_window: bool,
    hysteresis: f64,
    rule: rebalance::RebalancePolicy,
    fs: Option<FairShare>,
    leaf_place: Vec<Option<LeafKey>>,
    leaf_path: Vec<Vec<usize>>,
    /// GPUs held per fair-share node, kept live (the old rule reads it).
    held: Vec<u32>,
    /// Running jobs past their protected window (or free tier), by (leaf, free).
    exposed: BTreeMap<(u32, bool), BTreeMap<u32, RunInfo>>,
    /// The running jobs by `(end at time limit, job)`, as the engine's
    /// `running_by_limit`, with what the rule reads of each.
    running: BTreeMap<(i64, u32), RunInfo>,
    exposed_count: usize,
    window_mismatches: u64,
    /// Period state of the cost-aware rule; `None` until needed in a pass.
    state: Option<PreemptState>,
    /// The pass's first preemption attempt came and needed no state: the
    /// jobs started since then, left out when the state is computed later in
    /// the pass (see `candidates_v2`).
    since_first_attempt: Option<Vec<u32>>,
    /// Debug builds: the state computed at the first attempt as before, to
    /// check the later one against.
    #[cfg(debug_assertions)]
    state_at_first_attempt: Option<PreemptState>,
    in_flight: InFlight,
    /// Rebalancing preemptions in the last window: (time, preemptor leaf,
    /// victim leaf, lost GPU-seconds as estimated when decided).
    history: VecDeque<(i64, u32, u32, f64)>,
    /// The rule's refusals by reason, when `SimConfig::count_refusals`.
    refusals: Option<BTreeMap<String, u64>>,
    /// The span of simulated time `refusals` counts in.
    count_span: (i64, i64),
}

/// Adds `n` refusals for `denied` of a preemptor of `team` to `counts`, keyed
/// `"team Variant"` ([`Denied::name`]).
fn tally(counts: &mut Option<BTreeMap<String, u64>>, team: &str, denied: &Denied, n: u64) {
    let Some(counts) = counts.as_mut() else {
        return;
    };
    *counts
        .entry(format!("{team} {}", denied.name()))
        .or_default() += n;
}

impl FairSharePolicy {
    pub fn new(
        kind: PolicyKind,
        cfg: &SimConfig,
        teams: &[TeamInfo],
        leaves: &[(String, String)],
    ) -> Self {
        let window_hours = cfg.window as f64 / policy_core::HOUR as f64;
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: teams
                .iter()
                .map(|t| AccountSpec {
                    name: t.name.clone(),
                    parent: None,
                    allocation_gpu_hours: t.gpus * window_hours,
                    overcommit: false,
                })
                .collect(),
            members: leaves
                .iter()
                .map(|(t, u)| MemberSpec {
                    user: u.clone(),
                    account: t.clone(),
                    allocation_gpu_hours: None,
                })
                .collect(),
        };
        FairSharePolicy {
            kind,
            tree,
            window: cfg.window,
            verify_window: cfg.verify_window,
            hysteresis: cfg.hysteresis,
            rule: cfg.rule,
            fs: None,
            leaf_place: vec![None; leaves.len()],
            leaf_path: vec![Vec::new(); leaves.len()],
            held: Vec::new(),
            exposed: BTreeMap::new(),
            running: BTreeMap::new(),
            exposed_count: 0,
            window_mismatches: 0,
            state: None,
            since_first_attempt: None,
            #[cfg(debug_assertions)]
            state_at_first_attempt: None,
            in_flight: InFlight::default(),
            history: VecDeque::new(),
            refusals: cfg.count_refusals.map(|_| BTreeMap::new()),
            count_span: cfg.count_refusals.unwrap_or((0, 0)),
        }
    }

    fn add_exposed(&mut self, sim: &EngineView<'_>, j: u32) {
        let job = &sim.jobs[j as usize];
        if self
            .exposed
            .entry((job.leaf, job.free))
            .or_default()
            .insert(j, RunInfo::of(job))
            .is_none()
        {
            self.exposed_count += 1;
        }
    }

    fn held_add(&mut self, leaf: u32, gpus: u32, add: bool) {
        if let Some(path) = self.leaf_path.get(leaf as usize) {
            for &i in path {
                if let Some(h) = self.held.get_mut(i) {
                    *h = if add { *h + gpus } else { *h - gpus };
                }
            }
        }
    }

    /// Compares the incremental window with the policy core's definition over every run.
    fn verify(&mut self, sim: &EngineView<'_>, usage: &UsageByLeaf) {
        let now = sim.now;
        let mut by_leaf: Vec<Vec<policy_core::Run>> = vec![Vec::new(); sim.leaves.len()];
        for r in sim.runs.iter().filter(|r| !r.free) {
            let leaf = sim.jobs[r.job as usize].leaf as usize;
            by_leaf[leaf].push(policy_core::Run {
                start: r.start,
                end: r.end,
                gpus: r.gpus,
                weight: 1.0,
            });
        }
        for (i, (team, user)) in sim.leaves.iter().enumerate() {
            let expect = policy_core::window_usage(&by_leaf[i], now, self.window);
            if usage.get(&(team.clone(), user.clone())).copied() != Some(expect) {
                self.window_mismatches += 1;
            }
        }
    }

    fn view<'c>(sim: &'c EngineView<'_>, j: u32) -> JobView<'c> {
        let job = &sim.jobs[j as usize];
        let (account, user) = &sim.leaves[job.leaf as usize];
        JobView {
            job_id: j,
            account,
            user,
            free_tier: job.free,
            run_start: job.run_start,
            min_runtime: job.min_runtime,
            gpus: job.gpus,
        }
    }

    /// What the plugin reads from a running job's record, with the leaf node
    /// placed at the last recalculation (the snapshot the state is built from).
    fn running<'c>(&self, sim: &'c EngineView<'_>, j: u32) -> RunningJob<'c> {
        self.running_job(sim, j, &RunInfo::of(&sim.jobs[j as usize]))
    }

    /// [`Self::running`] from what was copied of the job's record (`job`).
    fn running_job<'c>(&self, sim: &'c EngineView<'_>, j: u32, job: &RunInfo) -> RunningJob<'c> {
        let self_leaf = self
            .leaf_place
            .get(job.leaf as usize)
            .copied()
            .flatten()
            .map(|p| p.node);
        let (account, user) = &sim.leaves[job.leaf as usize];
        RunningJob {
            job_id: j,
            account,
            user,
            free_tier: job.free,
            gpus: job.gpus,
            // Traces and scenarios name no GPU type: every GPU weighs 1.
            weight: 1.0,
            run_start: job.run_start,
            time_limit: Some(job.limit_end - job.run_start),
            min_runtime: job.min_runtime,
            checkpoint: (job.checkpoint > 0).then_some(job.checkpoint),
            grace: 0,
            requeues: job.run,
            leaf: self_leaf,
            // Traces name no partitions and no QOS: the budget rule alone.
            partition_tier: None,
            partition_preempt_off: None,
            qos: None,
        }
    }

    /// The old rule: one decision per group of exposed jobs (every member
    /// shares the leaf, the free flag and "past its window", all it reads).
    fn candidates_v1(&self, sim: &EngineView<'_>, p: u32) -> Vec<Candidate> {
        let Some(fs) = self.fs.as_ref() else {
            return Vec::new();
        };
        let pview = Self::view(sim, p);
        let ctx = Context {
            fair_share: Some(fs),
            held: &self.held,
            policy: PreemptPolicy {
                hysteresis: self.hysteresis,
            },
            now: sim.now,
        };
        let mut out = Vec::new();
        for set in self.exposed.values() {
            let Some(&first) = set.keys().next() else {
                continue;
            };
            let reason = match budget_v1::may_preempt(&ctx, &pview, &Self::view(sim, first)) {
                Ok(budget_v1::Allowed::VictimFreeTier) => 0u8,
                Ok(budget_v1::Allowed::VictimOverBudget) => 1,
                Ok(budget_v1::Allowed::Rebalance { .. }) => 2,
                Err(_) => continue,
            };
            for &v in set.keys() {
                out.push(Candidate {
                    job: v,
                    order: budget_v1::victim_order(Some(fs), &Self::view(sim, v), sim.now),
                    reason,
                });
            }
        }
        out
    }

    /// The state the plugin's thread computes each period, from what it has.
    /// `started`: jobs started since the instant the state is for (within
    /// the same pass: same time, same snapshot, no other job stopped), left
    /// out of the running jobs and counted as pending again, which is what
    /// the jobs were at that instant.
    fn period_state(&self, sim: &EngineView<'_>, fs: &FairShare, started: &[u32]) -> PreemptState {
        let now = sim.now;
        let leaves = &sim.leaves;
        let mut started: Vec<u32> = started.to_vec();
        started.sort_unstable();
        let mut pending_gpus: Vec<u64> = sim.pending_gpus.to_vec();
        for &j in &started {
            let job = &sim.jobs[j as usize];
            if !job.free {
                pending_gpus[job.leaf as usize] += u64::from(job.gpus);
            }
        }
        // The same jobs in the same order as the engine's `running_by_limit`.
        debug_assert!(self.running.keys().eq(sim.running_by_limit.iter()));
        let running = self
            .running
            .iter()
            .filter(|((_, j), _)| started.binary_search(j).is_err())
            .map(|(&(_, j), r)| self.running_job(sim, j, r));
        let pending = pending_gpus
            .iter()
            .enumerate()
            .filter(|(_, g)| **g > 0)
            .map(|(leaf, &g)| PendingJob {
                job_id: u32::MAX,
                account: &leaves[leaf].0,
                user: &leaves[leaf].1,
                free_tier: false,
                gpus: u32::try_from(g).unwrap_or(u32::MAX),
                weight: 1.0,
                leaf: self.leaf_place.get(leaf).copied().flatten().map(|p| p.node),
                partition_tier: None,
                qos: None,
            });
        // Each with its two leaves' nodes, placed in this snapshot as the
        // running jobs' are.
        let node = |leaf: u32| {
            self.leaf_place
                .get(leaf as usize)
                .copied()
                .flatten()
                .map(|p| p.node)
        };
        let history = self.history.iter().map(|&(at, pl, vl, lost)| {
            let past = PastPreemption {
                at,
                preemptor_account: &leaves[pl as usize].0,
                preemptor_user: &leaves[pl as usize].1,
                victim_account: &leaves[vl as usize].0,
                victim_user: &leaves[vl as usize].1,
                lost_gpu_secs: lost,
                // The simulator's GPUs all weigh 1.
                weight: 1.0,
            };
            (past, [node(pl), node(vl)])
        });
        PreemptState::compute_hinted(
            Some(fs),
            running,
            pending,
            history,
            Some(sim.cluster.capacity() as f64),
            self.rule,
            now,
        )
    }

    /// Computes the pass's state, as of its first attempt (`started`: the
    /// jobs started since, [`Self::period_state`]); debug builds check it
    /// against the one computed at that attempt.
    fn settle_state(&mut self, sim: &EngineView<'_>, started: &[u32]) {
        let Some(fs) = self.fs.as_ref() else {
            return;
        };
        let state = self.period_state(sim, fs, started);
        #[cfg(debug_assertions)]
        if let Some(first) = self.state_at_first_attempt.take() {
            assert_eq!(state, first, "the state of the pass's first attempt");
        }
        self.state = Some(state);
    }

    /// The cost-aware rule, exactly as the plugin's callback would answer.
    fn candidates_v2(&mut self, sim: &EngineView<'_>, p: u32) -> Vec<Candidate> {
        let now = sim.now;
        // Refusals outside the span asked for are not counted.
        let (from, until) = self.count_span;
        let counting = (from..until).contains(&now);
        let mut refusals = if counting { self.refusals.take() } else { None };
        let out = self.candidates_v2_counted(sim, p, &mut refusals);
        if counting {
            self.refusals = refusals;
        }
        out
    }

    /// [`Self::candidates_v2`], tallying refusals into `refusals` when counting.
    fn candidates_v2_counted(
        &mut self,
        sim: &EngineView<'_>,
        p: u32,
        refusals: &mut Option<BTreeMap<String, u64>>,
    ) -> Vec<Candidate> {
        let now = sim.now;
        // The preemption record keeps one window.
        while self
            .history
            .front()
            .is_some_and(|h| h.0 <= now - self.window)
        {
            self.history.pop_front();
        }
        let Some(fs) = self.fs.as_ref() else {
            return Vec::new();
        };
        let pj = &sim.jobs[p as usize];
        let (pa, pu) = &sim.leaves[pj.leaf as usize];
        let pview = PendingJob {
            job_id: p,
            account: pa,
            user: pu,
            free_tier: pj.free,
            gpus: pj.gpus,
            weight: 1.0,
            leaf: self
                .leaf_place
                .get(pj.leaf as usize)
                .copied()
                .flatten()
                .map(|p| p.node),
            partition_tier: None,
            qos: None,
        };
        // The state is the one of the pass's first attempt (the plugin's, fixed
        // while Slurm's pass runs). It is computed when first read: a free-tier
        // victim is judged with it, a non-free one only for a budgeted
        // preemptor (`judge_sides` refuses any other before reading the state,
        // the rule's first clause). When the first attempts of a pass need
        // none, the jobs they let start are left out when it is computed
        // (except when refusals are counted: then each attempt's are).
        let budgeted = pview
            .leaf
            .filter(|&n| n < fs.nodes.len())
            .or_else(|| fs.place(pa, pu).map(|p| p.node))
            .is_some_and(|n| fs.nodes[n].tier == Tier::Budgeted);
        if self.state.is_none() {
            let free_victims = self.exposed.keys().any(|&(_, free)| free);
            let started = self.since_first_attempt.take().unwrap_or_default();
            #[cfg(debug_assertions)]
            if started.is_empty() && self.state_at_first_attempt.is_none() {
                self.state_at_first_attempt = Some(self.period_state(sim, fs, &[]));
            }
            // Counting refusals, every attempt's are counted as before.
            if !budgeted && !free_victims && refusals.is_none() {
                self.since_first_attempt = Some(started);
                return Vec::new();
            }
            self.settle_state(sim, &started);
        }
        // The same snapshot, borrowed again past the state's computation.
        let Some(fs) = self.fs.as_ref() else {
            return Vec::new();
        };
        let Some(state) = self.state.as_ref() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        let mut granted = false;
        for (&(_, free), set) in &self.exposed {
            if free {
                for (&v, r) in set {
                    let rv = self.running_job(sim, v, r);
                    let decision =
                        rebalance::decide(state, Some(fs), &self.in_flight, &pview, &rv, now);
                    if let Err(denied) = &decision {
                        tally(refusals, pa, denied, 1);
                    }
                    if let Ok(Allowed::VictimFreeTier) = decision {
                        out.push(Candidate {
                            job: v,
                            order: rebalance::victim_priority(Some(fs), &rv, now),
                            reason: 0,
                        });
                    }
                }
                continue;
            }
            // `judge_sides` refuses a free-tier or not budgeted preemptor every
            // non-free victim, before reading anything of the victim but its
            // place: unless the refusals are counted, nothing to ask.
            if (pj.free || !budgeted) && refusals.is_none() {
                continue;
            }
            // Every member shares what the side-level checks read (leaf, not free).
            let Some((&first, r)) = set.first_key_value() else {
                continue;
            };
            let sides = match rebalance::judge_sides(
                state,
                Some(fs),
                &self.in_flight,
                &pview,
                &self.running_job(sim, first, r),
            ) {
                Ok(sides) => sides,
                Err(denied) => {
                    tally(refusals, pa, &denied, set.len() as u64);
                    continue;
                }
            };
            for (&v, r) in set {
                let rv = self.running_job(sim, v, r);
                let decision = rebalance::judge_victim(state, &sides, &rv, now);
                if let Err(denied) = &decision {
                    tally(refusals, pa, denied, 1);
                }
                if let Ok(Allowed::Rebalance(r)) = decision {
                    granted = true;
                    out.push(Candidate {
                        job: v,
                        order: rebalance::victim_priority(Some(fs), &rv, now),
                        reason: if r.clause == Clause::OverBudget { 1 } else { 2 },
                    });
                }
            }
        }
        if granted {
            self.in_flight.grant(&pview, fs);
        }
        out
    }
}

impl SchedPolicy for FairSharePolicy {
    fn kind(&self) -> PolicyKind {
        self.kind
    }

    fn num_classes(&self) -> usize {
        self.leaf_place.len() * 2
    }

    fn initial_priorities(&self) -> Vec<u64> {
        vec![0; self.leaf_place.len() * 2]
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        (job.leaf * 2 + u32::from(job.free), job.free, "")
    }

    fn recompute(&mut self, sim: &EngineView<'_>, window_usage: &[i64], class_prio: &mut [u64]) {
        let now = sim.now;
        let mut usage = UsageByLeaf::new();
        for (i, (team, user)) in sim.leaves.iter().enumerate() {
            usage.insert((team.clone(), user.clone()), window_usage[i] as f64);
        }
        if self.verify_window {
            self.verify(sim, &usage);
        }
        let fs = FairShare::compute(&self.tree, &usage, now, self.window);
        // Places in the new snapshot first: the period state below reads them.
        for (i, (team, user)) in sim.leaves.iter().enumerate() {
            let place = fs.place(team, user);
            self.leaf_path[i] = place.map(|p| fs.path(p.node)).unwrap_or_default();
            self.leaf_place[i] = place;
        }
        // The cost-aware policy ranks teams below their entitled GPUs first
        // (`PreemptState::priority_place`); the old one by Fair-Tree alone.
        let order = (self.kind == PolicyKind::Budget).then(|| self.period_state(sim, &fs, &[]));
        for (i, (team, user)) in sim.leaves.iter().enumerate() {
            let place = self.leaf_place[i];
            let placed = match &order {
                Some(st) => st.priority_place(&fs, team, user),
                None => place.map(|p| (p.tier, p.rank)),
            };
            // The tier a job starts in is its wait class.
            self.leaf_place[i] = place.zip(placed).map(|(p, (tier, rank))| LeafKey {
                node: p.node,
                rank,
                tier,
            });
            let (tier, rank) = placed.unwrap_or((Tier::OverBudget, fs.num_leaves));
            class_prio[i * 2] = u64::from(job_priority(tier, rank, fs.num_leaves, 0));
            class_prio[i * 2 + 1] = u64::from(job_priority(Tier::Free, rank, fs.num_leaves, 0));
        }
        let jobs = &sim.jobs;
        let leaves = &sim.leaves;
        self.held = fs.holdings(
            sim.running_by_limit
                .iter()
                .map(|&(_, j)| &jobs[j as usize])
                .filter(|j| !j.free)
                .map(|j| {
                    (
                        leaves[j.leaf as usize].0.as_str(),
                        leaves[j.leaf as usize].1.as_str(),
                        j.gpus,
                    )
                }),
        );
        self.fs = Some(fs);
        self.state = None;
    }

    fn wait_class(&self, sim: &EngineView<'_>, j: u32) -> Option<&'static str> {
        let job = &sim.jobs[j as usize];
        Some(if job.free {
            Tier::Free.as_str()
        } else {
            self.leaf_place[job.leaf as usize]
                .map(|p| p.tier)
                .unwrap_or(Tier::OverBudget)
                .as_str()
        })
    }

    fn on_start(&mut self, sim: &EngineView<'_>, j: u32) {
        if let Some(started) = self.since_first_attempt.as_mut() {
            started.push(j);
        }
        let job = &sim.jobs[j as usize];
        self.running.insert((job.limit_end, j), RunInfo::of(job));
        let (leaf, gpus, free) = (job.leaf, job.gpus, job.free);
        if free || job.min_runtime <= 0 {
            self.add_exposed(sim, j);
        }
        if !free {
            self.held_add(leaf, gpus, true);
        }
    }

    fn on_stop(&mut self, sim: &EngineView<'_>, j: u32) {
        // A job stopping in a pass whose state is not computed yet: it is
        // computed now, while the job still runs (only a free-tier victim
        // can stop so, and the state leaves those out, but the state must
        // not depend on that).
        if let Some(started) = self.since_first_attempt.take() {
            self.settle_state(sim, &started);
        }
        let job = &sim.jobs[j as usize];
        self.running.remove(&(job.limit_end, j));
        let key = (job.leaf, job.free);
        if let Some(set) = self.exposed.get_mut(&key) {
            if set.remove(&j).is_some() {
                self.exposed_count -= 1;
            }
            if set.is_empty() {
                self.exposed.remove(&key);
            }
        }
        if !job.free {
            self.held_add(job.leaf, job.gpus, false);
        }
    }

    fn on_exposed(&mut self, sim: &EngineView<'_>, j: u32) {
        self.add_exposed(sim, j);
    }

    fn preempts(&self) -> bool {
        true
    }

    fn has_candidates(&self) -> bool {
        self.fs.is_some() && self.exposed_count > 0
    }

    fn begin_pass(&mut self) {
        self.state = None;
        self.since_first_attempt = None;
        #[cfg(debug_assertions)]
        {
            self.state_at_first_attempt = None;
        }
        self.in_flight = InFlight::default();
    }

    fn end_pass(&mut self) {
        // Starts and stops between passes are no pass's: a state the pass
        // did not need is never computed.
        self.since_first_attempt = None;
        #[cfg(debug_assertions)]
        {
            self.state_at_first_attempt = None;
        }
    }

    fn candidates(&mut self, sim: &EngineView<'_>, p: u32) -> Vec<Candidate> {
        match self.kind {
            PolicyKind::BudgetV1 => self.candidates_v1(sim, p),
            _ => self.candidates_v2(sim, p),
        }
    }

    fn on_preempt(&mut self, sim: &EngineView<'_>, p: u32, victims: &[Candidate]) {
        let pl = sim.jobs[p as usize].leaf;
        for c in victims.iter().filter(|c| c.reason != 0) {
            let v = self.running(sim, c.job);
            let lost = rebalance::expected_lost_gpu_secs(&v, sim.now);
            self.history
                .push_back((sim.now, pl, sim.jobs[c.job as usize].leaf, lost));
        }
    }

    fn refusals(&self) -> Option<BTreeMap<String, u64>> {
        // The old rule (`budget-v1`) is not the one counted.
        if self.kind == PolicyKind::BudgetV1 {
            return None;
        }
        self.refusals.clone()
    }

    fn window_mismatches(&self) -> u64 {
        self.window_mismatches
    }
}

#[cfg(test)]
mod tests {
    use std::cmp::Reverse;

    use policy_core::fairshare::Tier;
    use policy_core::priority::job_priority;
    use proptest::prelude::*;

    proptest! {
        /// Walking classes by `job_priority(tier, rank, n, 0)` and then FIFO is
        /// the same order as sorting by the full `job_priority(.., age)` (ties
        /// by submit time): the engine's shortcut does not change the rule.
        #[test]
        fn class_order_equals_full_priority_order(
            jobs in proptest::collection::vec((0usize..3, 0u32..40, 0i64..2_000_000), 1..60),
            n in 40u32..100,
        ) {
            let tiers = [Tier::Budgeted, Tier::OverBudget, Tier::Free];
            let now = 2_000_000i64;
            let mut by_class: Vec<(u64, i64, usize)> = jobs.iter().enumerate()
                .map(|(i, &(t, r, s))| (u64::from(job_priority(tiers[t], r, n, 0)), s, i)).collect();
            by_class.sort_by_key(|&(p, s, i)| (Reverse(p), s, i));
            let mut full: Vec<(u32, i64, usize)> = jobs.iter().enumerate()
                .map(|(i, &(t, r, s))| (job_priority(tiers[t], r, n, now - s), s, i)).collect();
            full.sort_by_key(|&(p, s, i)| (Reverse(p), s, i));
            let a: Vec<usize> = by_class.iter().map(|x| x.2).collect();
            let b: Vec<usize> = full.iter().map(|x| x.2).collect();
            prop_assert_eq!(a, b);
        }
    }
}
