//! The discrete-event replay: events, placement, backfill and the mechanics of
//! preemption, identical for every policy; what differs between policies
//! (priorities, and who may be preempted) lives behind
//! [`crate::policy::SchedPolicy`], each policy with its own state.
//!
//! # Events and time
//! Submissions come from the sorted trace; run ends, protection ends,
//! requeued jobs' begin times, recalculation ticks, metric samples and the
//! backfill timer sit in a binary heap keyed by
//! `(time, kind, sequence number)`, so ties always break the same way. At one
//! instant the engine handles ends, then protection ends, then requeued jobs
//! that become eligible, then submissions, then the tick, the sample and the
//! backfill timer, and then runs **one** scheduling pass: the
//! same instant never depends on heap internals or hash order.
//!
//! # Priorities
//! Like Slurm's `PriorityCalcPeriod`, priorities are recomputed at every tick
//! (`--recalc-interval`, default 5 min) and stay fixed in between. Pending jobs
//! live in *classes* whose members differ only by age, each a FIFO by
//! `(submit, job)`; a pass walks the classes merged by
//! `(class priority desc, submit, job)`. The policy says which class a job is
//! in (at load, or as it is submitted) and what each class's priority is
//! ([`crate::policy`]).
//!
//! # Time limits
//! Each job has a requested time limit drawn from its duration by
//! `--time-limits` ([`crate::limits`]); only the *limit* is visible to backfill
//! and to the preemption rule, never the true duration, as in Slurm. With
//! `exact` each run's limit is the work it has left (perfect limits).
//!
//! # Placement and backfill (identical for all policies)
//! First fit ([`crate::cluster`]). A pass walks pending jobs in priority
//! order and starts each one that fits. A job that does not fit (and cannot
//! preempt) gets a reservation ([`Backfill`], `--backfill`; which ones, below):
//! - `nodes` (default), as Slurm's `sched/backfill` does: its start is
//!   planned by releasing running jobs' GPUs node by node in the order of
//!   their time-limit ends until it can be placed (the will-run test), and
//!   the nodes of that placement are *held*: a later job may start on a held
//!   node only if its limit ends before the planned start; otherwise only on
//!   the other nodes (`backfill.c`'s `_add_reservation` removes the planned
//!   nodes from the availability map from the planned start to its end).
//! - `gpus`: the engine's older model: its *shadow time* is the earliest
//!   time-limit end at which enough GPUs are free (counted in GPUs, whole
//!   nodes for multi-node jobs); later jobs start if they fit now and either
//!   their limit ends before the shadow time or they use no more than the
//!   GPUs left over then, on any node (fragmentation at the shadow time is
//!   ignored, so small jobs can keep a multi-node job waiting).
//!
//! Like Slurm's backfill, every job a pass examines and cannot start holds
//! nodes (`nodes` only; `--backfill-reservations K` caps them at the first K
//! blocked jobs, K = 1 being EASY backfill): each is planned on the nodes
//! the earlier ones do not hold, a
//! job that fits now starts only off the nodes of every reservation planned
//! to start before its limit ends, and one whose free GPUs all lie on such
//! nodes waits, planned. A job whose planned start lies beyond
//! `--backfill-window` (Slurm's `bf_window`) holds nothing, as in
//! `backfill.c` ("StartTime set to time after current backfill window. No
//! reservation created"). The walk stops after `--backfill-depth` jobs
//! (Slurm's `bf_max_job_test`), or as soon as no GPU is free and no
//! preemption is possible. A plan is answered by `will_run.rs`'s index of
//! the running jobs per node: the same answer as the walk over running jobs
//! in time-limit order, which debug builds check on every plan.
//!
//! # Main scheduler and backfill passes
//! Like Slurm, the pass above is the *backfill* pass, run every
//! `--bf-interval` seconds (`bf_interval`, [`crate::config::DEFAULT_BF_INTERVAL`]
//! by default) when a job or node changed since the last one. On every other
//! event the *main scheduler's* pass walks the same order, starts (or
//! preempts for) each job in turn and stops at the first that cannot start,
//! planning nothing: a job that could backfill waits for the next backfill
//! pass. `--bf-interval 0`: every pass is a backfill pass.
//!
//! # Preemption (Slurm's mechanics; the policy only answers)
//! For a pending job that does not fit, Slurm asks the preempt plugin about
//! every running candidate, sorts the allowed ones by the plugin's priority
//! (victim order), removes them in that order until the job fits (trial
//! first-fit), puts back those not needed (least preferred first), and
//! preempts nothing unless the job can then start. The engine does exactly
//! that with the candidates and order the policy gives
//! ([`crate::policy::SchedPolicy::candidates`]). Victims are requeued with their
//! original submit time and may start again only after `--requeue-delay`
//! (Slurm's begin time after a requeue, [`crate::config::DEFAULT_REQUEUE_DELAY`]
//! by default); work since their last checkpoint (or since the run
//! start) is lost; the next run gets a fresh protected window. At most
//! `preempt_attempts` jobs try to preempt per pass; a class none of whose
//! members found a candidate is skipped for the rest of the pass.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::ops::Bound::{Excluded, Unbounded};

use crate::checker::{self, CheckReport, JobFacts, RunRecord};
use crate::cluster::{Alloc, Cluster, plan};
pub use crate::config::{
    ALL_RESERVATIONS, Backfill, DEFAULT_BACKFILL_WINDOW, MinRuntimeRule, SimConfig,
};
pub use crate::policy::PolicyKind;
use crate::policy::{Candidate, SchedPolicy};
use crate::rng::{Purpose, unit};
use crate::trace::JobSpec;
use crate::usage::SlidingUsage;
pub use crate::view::TeamInfo;
use crate::view::{EngineView, JobInit, JobState};
use crate::will_run::WillRun;

/// The reservation of the first blocked job of a pass, when only that one
/// holds anything (`--backfill gpus`, or `--backfill-reservations 1`).
enum Reservation {
    /// `--backfill gpus`: shadow time and GPUs left over then.
    Gpus { shadow: i64, extra: i64 },
    /// `--backfill nodes`: planned start and the nodes it holds.
    Nodes { shadow: i64, held: Vec<bool> },
    /// The job cannot start even when every running job has ended (it is
    /// larger than the cluster, or held by nothing we model): nothing held.
    Never,
}

/// Outcome of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    pub team: u32,
    pub submit: i64,
    pub first_start: i64,
    pub end: i64,
    pub gpus: u32,
    /// How long it runs when nothing stops it (seconds).
    pub duration: i64,
    /// Wait class: the tier at first start (budget), the declared level
    /// (static), `all` (decay).
    pub wait_class: &'static str,
    pub preemptions: u32,
}

/// One preemption, for the oscillation count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionEvent {
    pub at: i64,
    pub preemptor_team: u32,
    pub victim_team: u32,
    /// The victim was free tier (yields by design; not a rebalancing).
    pub victim_free: bool,
}

/// Everything a replay produced; metrics are computed from it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub policy: PolicyKind,
    pub teams: Vec<TeamInfo>,
    pub capacity_gpus: u64,
    /// Each team's entitled GPUs: its allocation, scaled down proportionally
    /// when allocations sum above the cluster.
    pub entitled_gpus: Vec<f64>,
    /// End of the last job (seconds since the first submission).
    pub makespan: i64,
    pub jobs: Vec<JobResult>,
    pub runs: Vec<RunRecord>,
    pub preemptions: u64,
    /// Preemptions by the clause of the rule that allowed them:
    /// victim free tier, victim over budget, rebalance between budgeted sides.
    pub preemptions_by_reason: [u64; 3],
    pub preemption_log: Vec<PreemptionEvent>,
    pub lost_gpu_secs: i64,
    pub busy_gpu_secs: i64,
    pub sample_every: i64,
    /// `samples[k][team]`: cumulative charged GPU-seconds of each team at `k x sample_every`.
    pub samples: Vec<Vec<i64>>,
    /// `entitled[k][team]`: cumulative `min(entitled GPUs, demand)` GPU-seconds at `k x sample_every`.
    pub entitled: Vec<Vec<f64>>,
    pub check: CheckReport,
    /// Jobs not finished when the replay stopped at the horizon.
    pub unfinished_jobs: u64,
    /// Scheduling passes run (for speed figures).
    pub passes: u64,
    /// What bound the rule (`SimConfig::count_refusals`).
    pub refusals: Option<crate::metrics::Refusals>,
}

/// `(time, kind, sequence, job, run)`: ordered by time, then kind, then insertion.
type Event = (i64, u8, u64, u32, u32);

const EV_END: u8 = 0;
const EV_PROTECT: u8 = 1;
/// A requeued job's begin time has come: it is eligible again.
const EV_ELIGIBLE: u8 = 2;
const EV_TICK: u8 = 3;
const EV_SAMPLE: u8 = 4;
/// A backfill pass is due (every `bf_interval`).
const EV_BACKFILL: u8 = 5;

/// Outcome of one preemption attempt.
pub(crate) enum Attempt {
    Started,
    /// No running job may be preempted by this job's class: skip the class this pass.
    NoVictims,
    /// Victims exist but are not enough.
    NotEnough,
}

/// k-way merge over the pending classes, in priority order. Holds no borrow,
/// so jobs can be started (removed from their class) while it walks.
struct Merge {
    heap: BinaryHeap<(u64, Reverse<i64>, Reverse<u32>, usize)>,
}

impl Merge {
    fn new(classes: &[BTreeSet<(i64, u32)>], prio: &[u64]) -> Merge {
        let mut heap = BinaryHeap::new();
        for (c, set) in classes.iter().enumerate() {
            if let Some(&(s, j)) = set.first() {
                heap.push((prio[c], Reverse(s), Reverse(j), c));
            }
        }
        Merge { heap }
    }

    fn next(&mut self, classes: &[BTreeSet<(i64, u32)>]) -> Option<u32> {
        let (p, Reverse(s), Reverse(j), c) = self.heap.pop()?;
        if let Some(&(s2, j2)) = classes[c].range((Excluded((s, j)), Unbounded)).next() {
            self.heap.push((p, Reverse(s2), Reverse(j2), c));
        }
        Some(j)
    }
}

/// The engine's state: jobs, cluster, usage, pending classes, events and the
/// figures it collects. Policies keep their own state ([`SchedPolicy`]) and read
/// this one through [`EngineView`] ([`Core::view`]).
pub(crate) struct Core<'a> {
    pub cfg: &'a SimConfig,
    pub specs: &'a [JobSpec],
    pub jobs: Vec<JobState>,
    /// `(team, user)` of each fair-share leaf.
    pub leaves: Vec<(String, String)>,
    pub leaf_team: Vec<u32>,
    pub teams: Vec<TeamInfo>,
    pub cluster: Cluster,
    /// Charged (non-free) usage per leaf.
    pub usage: SlidingUsage,
    pub classes: Vec<BTreeSet<(i64, u32)>>,
    pub class_prio: Vec<u64>,
    /// Running jobs by `(end at time limit, job)`.
    pub running_by_limit: BTreeSet<(i64, u32)>,
    /// The will-run test's index of the running jobs per node (`--backfill nodes`).
    will_run: WillRun,
    /// The nodes of the last plan ([`Core::plan_nodes`]).
    planned: Vec<u32>,
    /// GPUs of pending non-free jobs per leaf.
    pub pending_gpus: Vec<u64>,
    pub now: i64,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    next_submit: usize,
    runs: Vec<RunRecord>,
    preemptions: u64,
    preemptions_by_reason: [u64; 3],
    preemption_log: Vec<PreemptionEvent>,
    lost_gpu_secs: i64,
    busy_gpu_secs: i64,
    samples: Vec<Vec<i64>>,
    /// Entitlement accounting: entitled GPUs, current demand (GPUs of
    /// submitted, unfinished non-free jobs), cumulative min(entitled, demand).
    entitled_gpus: Vec<f64>,
    team_demand: Vec<i64>,
    entitled_cum: Vec<f64>,
    entitled_at: i64,
    entitled_samples: Vec<Vec<f64>>,
    pending: usize,
    running: usize,
    dirty: bool,
    /// Something changed since the last backfill pass (Slurm's backfill
    /// skips a cycle when no job or node changed).
    bf_stale: bool,
    /// The backfill timer fired at this instant.
    bf_due: bool,
    passes: u64,
    /// Preemption attempts by outcome and size, when `count_refusals`.
    attempts: Option<BTreeMap<String, u64>>,
    /// The span `attempts` counts in.
    count_span: (i64, i64),
}

/// Replays `jobs` (sorted by submit time, submit of the first = 0) under `policy`.
/// `shares` gives each team's allocation in GPUs; teams of the trace without
/// one get 0 (always over budget).
pub fn simulate(
    jobs: &[JobSpec],
    shares: &BTreeMap<String, f64>,
    policy: PolicyKind,
    cfg: &SimConfig,
) -> Outcome {
    let (mut core, mut pol) = Core::new(jobs, shares, policy, cfg);
    core.run(pol.as_mut());
    core.finish(pol.as_ref())
}

impl<'a> Core<'a> {
    fn new(
        specs: &'a [JobSpec],
        shares: &BTreeMap<String, f64>,
        kind: PolicyKind,
        cfg: &'a SimConfig,
    ) -> (Core<'a>, Box<dyn SchedPolicy>) {
        // Teams: those with shares, plus those in the trace; sorted by name.
        let mut team_names: BTreeSet<String> = shares.keys().cloned().collect();
        team_names.extend(specs.iter().map(|j| j.team.clone()));
        let teams: Vec<TeamInfo> = team_names
            .iter()
            .map(|n| TeamInfo {
                name: n.clone(),
                gpus: shares.get(n).copied().unwrap_or(0.0),
            })
            .collect();
        let team_idx: BTreeMap<&str, u32> = teams
            .iter()
            .enumerate()
            .map(|(i, t)| (t.name.as_str(), i as u32))
            .collect();
        let leaf_set: BTreeSet<(String, String)> = specs
            .iter()
            .map(|j| (j.team.clone(), j.user.clone()))
            .collect();
        let leaves: Vec<(String, String)> = leaf_set.into_iter().collect();
        let leaf_idx: BTreeMap<(&str, &str), u32> = leaves
            .iter()
            .enumerate()
            .map(|(i, (t, u))| ((t.as_str(), u.as_str()), i as u32))
            .collect();
        let leaf_team: Vec<u32> = leaves.iter().map(|(t, _)| team_idx[t.as_str()]).collect();
        let policy = crate::policy::build(kind, cfg, &teams, &leaves);
        let jobs: Vec<JobState> = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let leaf = leaf_idx[&(s.team.as_str(), s.user.as_str())];
                let team = leaf_team[leaf as usize];
                let free_drawn =
                    s.free || unit(cfg.seed, i as u64, Purpose::FreeTier) < cfg.free_fraction;
                let (class, free, wait_class) = policy.classify(&JobInit {
                    index: i as u32,
                    leaf,
                    team,
                    free: free_drawn,
                });
                let duration = s.duration.max(0);
                JobState {
                    leaf,
                    team,
                    class,
                    submit: s.submit,
                    gpus: s.gpus,
                    duration,
                    min_runtime: s
                        .min_runtime
                        .unwrap_or_else(|| cfg.min_runtime.apply(duration))
                        .max(0),
                    free,
                    checkpoint: s.checkpoint.unwrap_or(cfg.checkpoint).max(0),
                    limit: s.limit.map(|l| l.max(duration)).or_else(|| {
                        cfg.time_limits
                            .limit(cfg.seed, i as u64, duration, cfg.max_time_limit)
                    }),
                    remaining: duration,
                    run: 0,
                    running: false,
                    done: false,
                    run_start: 0,
                    limit_end: 0,
                    true_end: 0,
                    alloc: Vec::new(),
                    first_start: None,
                    end: 0,
                    wait_class,
                    preemptions: 0,
                    open_run: usize::MAX,
                }
            })
            .collect();
        let nteams = teams.len();
        let nleaves = leaves.len();
        let capacity = f64::from(cfg.nodes) * f64::from(cfg.gpus_per_node);
        let total_alloc: f64 = teams.iter().map(|t| t.gpus).sum();
        let scale = if total_alloc > capacity && total_alloc > 0.0 {
            capacity / total_alloc
        } else {
            1.0
        };
        let core = Core {
            cfg,
            specs,
            jobs,
            leaves,
            leaf_team,
            entitled_gpus: teams.iter().map(|t| t.gpus * scale).collect(),
            teams,
            cluster: Cluster::new(cfg.nodes, cfg.gpus_per_node),
            usage: SlidingUsage::new(nleaves, cfg.window),
            classes: vec![BTreeSet::new(); policy.num_classes()],
            class_prio: policy.initial_priorities(),
            running_by_limit: BTreeSet::new(),
            will_run: WillRun::new(cfg.nodes, cfg.gpus_per_node),
            planned: Vec::new(),
            pending_gpus: vec![0; nleaves],
            now: 0,
            heap: BinaryHeap::new(),
            seq: 0,
            next_submit: 0,
            runs: Vec::new(),
            preemptions: 0,
            preemptions_by_reason: [0; 3],
            preemption_log: Vec::new(),
            lost_gpu_secs: 0,
            busy_gpu_secs: 0,
            samples: Vec::new(),
            team_demand: vec![0; nteams],
            entitled_cum: vec![0.0; nteams],
            entitled_at: 0,
            entitled_samples: Vec::new(),
            pending: 0,
            running: 0,
            dirty: false,
            bf_stale: false,
            bf_due: false,
            passes: 0,
            attempts: cfg.count_refusals.map(|_| BTreeMap::new()),
            count_span: cfg.count_refusals.unwrap_or((0, 0)),
        };
        (core, policy)
    }

    /// What the policy hooks read: the shared state, borrowed for one call.
    fn view(&self) -> EngineView<'_> {
        EngineView {
            now: self.now,
            jobs: &self.jobs,
            leaves: &self.leaves,
            leaf_team: &self.leaf_team,
            teams: &self.teams,
            cluster: &self.cluster,
            usage: &self.usage,
            running_by_limit: &self.running_by_limit,
            pending_gpus: &self.pending_gpus,
            runs: &self.runs,
        }
    }

    fn push(&mut self, t: i64, kind: u8, job: u32, run: u32) {
        self.seq += 1;
        self.heap.push(Reverse((t, kind, self.seq, job, run)));
    }

    fn active(&self) -> bool {
        self.pending > 0 || self.running > 0 || self.next_submit < self.specs.len()
    }

    fn run(&mut self, pol: &mut dyn SchedPolicy) {
        if self.specs.is_empty() {
            return;
        }
        let t0 = self.specs[0].submit;
        self.entitled_at = t0;
        self.push(t0, EV_TICK, 0, 0);
        self.push(t0, EV_SAMPLE, 0, 0);
        if self.cfg.bf_interval > 0 {
            self.push(t0, EV_BACKFILL, 0, 0);
        }
        loop {
            let t_heap = self.heap.peek().map(|Reverse(e)| e.0);
            let t_sub = self.specs.get(self.next_submit).map(|j| j.submit);
            let t = match (t_heap, t_sub) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if t > self.cfg.horizon {
                break;
            }
            self.now = t;
            self.pop_events(pol, t, EV_ELIGIBLE);
            while self.next_submit < self.specs.len() && self.specs[self.next_submit].submit == t {
                self.submit(pol, self.next_submit as u32);
                self.next_submit += 1;
            }
            self.pop_events(pol, t, EV_BACKFILL);
            if self.cfg.bf_interval == 0 {
                if self.dirty {
                    self.dirty = false;
                    self.pass(pol, true);
                }
            } else {
                self.bf_stale |= self.dirty;
                if self.bf_due && self.bf_stale {
                    // The backfill pass starts what the main scheduler would too.
                    self.dirty = false;
                    self.bf_stale = false;
                    self.pass(pol, true);
                } else if self.dirty {
                    self.dirty = false;
                    self.pass(pol, false);
                }
                self.bf_due = false;
            }
            // Jobs that can never start (bigger than the cluster): stop rather
            // than tick forever; the checker reports them as unfinished.
            if self.pending > 0
                && self.running == 0
                && self.next_submit == self.specs.len()
                && !self.bf_stale
                && self.heap.iter().all(|Reverse(e)| e.1 >= EV_TICK)
            {
                break;
            }
        }
    }

    /// Handles every heap event at `t` with kind <= `max_kind`.
    fn pop_events(&mut self, pol: &mut dyn SchedPolicy, t: i64, max_kind: u8) {
        while let Some(&Reverse((et, kind, _, job, run))) = self.heap.peek() {
            if et != t || kind > max_kind {
                break;
            }
            self.heap.pop();
            match kind {
                EV_END => self.end(pol, job, run),
                EV_PROTECT => self.protect_end(pol, job, run),
                EV_ELIGIBLE => self.eligible(job, run),
                EV_TICK => self.tick(pol),
                EV_SAMPLE => self.sample(),
                _ => {
                    self.bf_due = true;
                    self.schedule_next(EV_BACKFILL, self.cfg.bf_interval);
                }
            }
        }
    }

    /// Integrates `min(entitled, demand)` up to now, before demand changes.
    fn advance_entitled(&mut self, t: i64) {
        let dt = (t - self.entitled_at).max(0) as f64;
        if dt > 0.0 {
            for (k, cum) in self.entitled_cum.iter_mut().enumerate() {
                *cum += dt * self.entitled_gpus[k].min(self.team_demand[k] as f64);
            }
        }
        self.entitled_at = self.entitled_at.max(t);
    }

    fn change_demand(&mut self, j: u32, sign: i64) {
        let job = &self.jobs[j as usize];
        if job.free {
            return;
        }
        let (team, gpus) = (job.team as usize, i64::from(job.gpus));
        self.advance_entitled(self.now);
        self.team_demand[team] += sign * gpus;
    }

    fn set_pending(&mut self, j: u32, pending: bool) {
        let job = &self.jobs[j as usize];
        if job.free {
            return;
        }
        let (leaf, gpus) = (job.leaf as usize, u64::from(job.gpus));
        if pending {
            self.pending_gpus[leaf] += gpus;
        } else {
            self.pending_gpus[leaf] -= gpus;
        }
    }

    fn submit(&mut self, pol: &mut dyn SchedPolicy, j: u32) {
        if let Some(class) = pol.submit_class(&self.view(), j) {
            self.jobs[j as usize].class = class;
        }
        let job = &self.jobs[j as usize];
        self.classes[job.class as usize].insert((job.submit, j));
        self.pending += 1;
        self.set_pending(j, true);
        self.change_demand(j, 1);
        self.dirty = true;
    }

    /// Starts job `j` now; `false` if it does not fit (nothing changes).
    fn start(&mut self, pol: &mut dyn SchedPolicy, j: u32) -> bool {
        let gpus = self.jobs[j as usize].gpus;
        match self.cluster.place(gpus) {
            Some(alloc) => self.start_on(pol, j, alloc),
            None => false,
        }
    }

    /// Starts `j` on nodes outside a reservation's `held` ones, if it fits there.
    fn start_outside(&mut self, pol: &mut dyn SchedPolicy, j: u32, held: &[bool]) -> bool {
        let gpus = self.jobs[j as usize].gpus;
        match self.cluster.place_where(gpus, |n| !held[n]) {
            Some(alloc) => self.start_on(pol, j, alloc),
            None => false,
        }
    }

    /// Starts `j`, which ends by `end` at its limit, off the nodes that a
    /// reservation of the pass planned to start before then holds.
    fn start_before_holds(
        &mut self,
        pol: &mut dyn SchedPolicy,
        j: u32,
        end: i64,
        held_from: &[i64],
    ) -> bool {
        let gpus = self.jobs[j as usize].gpus;
        match self.cluster.place_where(gpus, |n| held_from[n] >= end) {
            Some(alloc) => self.start_on(pol, j, alloc),
            None => false,
        }
    }

    fn start_on(&mut self, pol: &mut dyn SchedPolicy, j: u32, alloc: Alloc) -> bool {
        let now = self.now;
        let gpus = self.jobs[j as usize].gpus;
        let wait_class = pol.wait_class(&self.view(), j);
        let run_index = self.runs.len();
        let job = &mut self.jobs[j as usize];
        self.classes[job.class as usize].remove(&(job.submit, j));
        job.running = true;
        job.run_start = now;
        job.limit_end = now.saturating_add(job.run_limit());
        job.true_end = now + job.remaining;
        job.alloc = alloc.clone();
        job.open_run = run_index;
        if job.first_start.is_none() {
            job.first_start = Some(now);
            if let Some(w) = wait_class {
                job.wait_class = w;
            }
        }
        let (true_end, limit_end, run, leaf, free, until) = (
            job.true_end,
            job.limit_end,
            job.run,
            job.leaf,
            job.free,
            now + job.min_runtime,
        );
        self.runs.push(RunRecord {
            job: j,
            run,
            start: now,
            end: None,
            gpus,
            alloc,
            preempted: false,
            min_runtime: job.min_runtime,
            free,
            saved: 0,
            preempted_by: None,
        });
        self.pending -= 1;
        self.running += 1;
        self.set_pending(j, false);
        self.running_by_limit.insert((limit_end, j));
        self.will_run
            .add(&self.jobs[j as usize].alloc, limit_end, j);
        self.push(true_end, EV_END, j, run);
        if !free {
            self.usage.change(leaf as usize, now, i64::from(gpus));
        }
        pol.on_start(&self.view(), j);
        if pol.preempts() && !free && until > now {
            self.push(until, EV_PROTECT, j, run);
        }
        true
    }

    /// Ends the current run of `j` (completion or preemption) and frees its GPUs.
    fn stop_run(&mut self, pol: &mut dyn SchedPolicy, j: u32, preempted_by: Option<u32>) {
        let now = self.now;
        pol.on_stop(&self.view(), j);
        let job = &mut self.jobs[j as usize];
        let ckpt = job.checkpoint;
        let elapsed = now - job.run_start;
        let alloc = std::mem::take(&mut job.alloc);
        let (gpus, leaf, limit_end, open, free) =
            (job.gpus, job.leaf, job.limit_end, job.open_run, job.free);
        let saved = match preempted_by {
            None => elapsed,
            Some(_) if ckpt > 0 => (elapsed / ckpt * ckpt).min(job.remaining),
            Some(_) => 0,
        };
        job.remaining -= saved;
        job.running = false;
        if preempted_by.is_some() {
            job.run += 1;
            job.preemptions += 1;
            self.preemptions += 1;
            self.lost_gpu_secs += (elapsed - saved) * i64::from(gpus);
            // Pending at once, eligible after the requeue delay (its begin time).
            let (class, submit, run) = (job.class, job.submit, job.run);
            if self.cfg.requeue_delay > 0 {
                self.push(now + self.cfg.requeue_delay, EV_ELIGIBLE, j, run);
            } else {
                self.classes[class as usize].insert((submit, j));
            }
            self.pending += 1;
        } else {
            job.done = true;
            job.end = now;
        }
        self.running -= 1;
        self.busy_gpu_secs += elapsed * i64::from(gpus);
        if let Some(r) = self.runs.get_mut(open) {
            r.end = Some(now);
            r.preempted = preempted_by.is_some();
            r.saved = if preempted_by.is_some() { saved } else { 0 };
            r.preempted_by = preempted_by;
        }
        self.cluster.release(&alloc);
        self.running_by_limit.remove(&(limit_end, j));
        self.will_run.remove(&alloc, limit_end, j);
        if preempted_by.is_some() {
            self.set_pending(j, true);
        } else {
            self.change_demand(j, -1);
        }
        if !free {
            self.usage.change(leaf as usize, now, -i64::from(gpus));
        }
        self.dirty = true;
    }

    fn end(&mut self, pol: &mut dyn SchedPolicy, j: u32, run: u32) {
        let job = &self.jobs[j as usize];
        // A stale end: the run was preempted and the job requeued.
        if !job.running || job.run != run {
            return;
        }
        self.stop_run(pol, j, None);
    }

    /// A requeued job's begin time has come: it joins its class's queue.
    fn eligible(&mut self, j: u32, run: u32) {
        let job = &self.jobs[j as usize];
        if !job.running && !job.done && job.run == run {
            self.classes[job.class as usize].insert((job.submit, j));
            self.dirty = true;
        }
    }

    fn protect_end(&mut self, pol: &mut dyn SchedPolicy, j: u32, run: u32) {
        let job = &self.jobs[j as usize];
        if job.running && job.run == run {
            pol.on_exposed(&self.view(), j);
            self.dirty = true;
        }
    }

    fn schedule_next(&mut self, kind: u8, period: i64) {
        if self.active() {
            let next = self.now + period.max(1);
            self.push(next, kind, 0, 0);
        }
    }

    fn tick(&mut self, pol: &mut dyn SchedPolicy) {
        // The window usage is read here because reading it drops history the
        // sliding window no longer needs (`SlidingUsage::window_usage`); the
        // priorities leave the state for the call, so the policy writes them
        // while it reads the rest through the view.
        let now = self.now;
        let window_usage: Vec<i64> = (0..self.leaves.len())
            .map(|leaf| self.usage.window_usage(leaf, now))
            .collect();
        let mut class_prio = std::mem::take(&mut self.class_prio);
        pol.recompute(&self.view(), &window_usage, &mut class_prio);
        self.class_prio = class_prio;
        self.dirty = true;
        self.schedule_next(EV_TICK, self.cfg.recalc);
    }

    fn sample(&mut self) {
        let cum = self.view().team_cumulative(self.now);
        self.samples.push(cum);
        self.advance_entitled(self.now);
        self.entitled_samples.push(self.entitled_cum.clone());
        self.schedule_next(EV_SAMPLE, self.cfg.sample_every);
    }

    /// GPUs a job of `gpus` needs free at once: its own on one node, whole
    /// nodes' worth for a multi-node job.
    fn reserved_gpus(&self, gpus: u32) -> u32 {
        let g = self.cluster.gpus_per_node();
        if gpus > g {
            self.cluster.nodes_needed(gpus) * g
        } else {
            gpus
        }
    }

    /// GPUs needed for a reservation: whole nodes for multi-node jobs.
    fn shadow(&self, gpus: u32) -> (i64, i64) {
        let need = i64::from(self.reserved_gpus(gpus));
        let mut avail = self.cluster.free_total() as i64;
        for &(end, j) in &self.running_by_limit {
            avail += i64::from(self.jobs[j as usize].gpus);
            if avail >= need {
                return (end, avail - need);
            }
        }
        (i64::MAX, 0)
    }

    /// Slurm's will-run test for a reservation: release running jobs' GPUs in
    /// the order of their time-limit ends, node by node, until `gpus` can be
    /// placed (first fit) on the nodes no earlier reservation of the pass holds;
    /// the instant and the nodes of that placement. `None` if it cannot be
    /// placed within the backfill window. Answered by the index
    /// ([`WillRun::plan`]); debug builds check it against the walk itself.
    /// The nodes are left in `self.planned`.
    fn plan_nodes(&mut self, gpus: u32) -> Option<i64> {
        let horizon = self.now.saturating_add(self.cfg.backfill_window);
        let planned = self.will_run.plan(
            self.cluster.free_per_node(),
            gpus,
            self.now,
            horizon,
            &mut self.planned,
        );
        #[cfg(debug_assertions)]
        debug_assert_eq!(
            planned.map(|t| (t, self.planned.clone())),
            self.plan_nodes_walk(gpus, horizon),
            "will-run index and walk disagree for {gpus} GPUs at {}",
            self.now
        );
        planned
    }

    /// The will-run test as a walk over the running jobs, what
    /// [`Core::plan_nodes`] must answer (debug builds only).
    #[cfg(debug_assertions)]
    fn plan_nodes_walk(&self, gpus: u32, horizon: i64) -> Option<(i64, Vec<u32>)> {
        let g = self.cluster.gpus_per_node();
        let off = |n: usize| self.will_run.is_held(n);
        let mut free: Vec<u32> = self
            .cluster
            .free_per_node()
            .iter()
            .enumerate()
            .map(|(n, &f)| if off(n) { 0 } else { f })
            .collect();
        let need_whole = self.cluster.nodes_needed(gpus) as usize;
        let mut whole = free.iter().filter(|&&f| f == g).count();
        let fits = |free: &[u32], whole: usize| {
            if gpus <= g {
                free.iter().any(|&f| f >= gpus)
            } else {
                whole >= need_whole
            }
        };
        let hold = |free: &[u32]| {
            let alloc = plan(free, g, gpus)?;
            Some(alloc.into_iter().map(|(n, _)| n).collect::<Vec<u32>>())
        };
        if fits(&free, whole) {
            return hold(&free).map(|h| (self.now, h));
        }
        for &(end, j) in &self.running_by_limit {
            if end > horizon {
                // Slurm: "StartTime set to time after current backfill
                // window. No reservation created".
                return None;
            }
            let mut hit = false;
            for &(n, k) in &self.jobs[j as usize].alloc {
                if off(n as usize) {
                    continue;
                }
                let f = &mut free[n as usize];
                *f += k;
                if *f == g {
                    whole += 1;
                }
                hit |= gpus <= g && *f >= gpus;
            }
            if hit || (gpus > g && whole >= need_whole) {
                return hold(&free).map(|h| (end.max(self.now), h));
            }
        }
        None
    }

    /// With several reservations: a blocked job of `gpus` takes the pass's next
    /// slot, if any is left, and holds the nodes of its plan on the nodes the
    /// earlier ones do not hold (none if it cannot be planned within the
    /// window). `held_from[n]` is the planned start of the reservation holding
    /// node `n` (`i64::MAX`: none); reservations never share a node, so one
    /// instant per node says everything the pass needs.
    ///
    /// `unplannable` is the smallest need (GPUs on one node, or whole nodes'
    /// GPUs) that found no plan earlier in the pass: nothing larger can find
    /// one either, since the nodes held and the jobs started since only take
    /// GPUs away at every instant. It saves the walk over every running job
    /// that a plan beyond the window costs (most of a pass on a large cluster).
    fn hold_next(
        &mut self,
        held_from: &mut [i64],
        earliest_hold: &mut i64,
        slots: &mut usize,
        unplannable: &mut u32,
        gpus: u32,
    ) {
        if *slots >= self.cfg.backfill_reservations {
            return;
        }
        *slots += 1;
        let need = self.reserved_gpus(gpus);
        if need >= *unplannable {
            return;
        }
        match self.plan_nodes(gpus) {
            Some(shadow) => {
                for &n in &self.planned {
                    held_from[n as usize] = shadow;
                    *earliest_hold = (*earliest_hold).min(shadow);
                    self.will_run.hold(n);
                }
            }
            None => *unplannable = need,
        }
    }

    fn reservation(&mut self, gpus: u32) -> Reservation {
        match self.cfg.backfill {
            Backfill::Gpus => {
                let (shadow, extra) = self.shadow(gpus);
                Reservation::Gpus { shadow, extra }
            }
            Backfill::Nodes => match self.plan_nodes(gpus) {
                Some(shadow) => {
                    let mut held = vec![false; self.cluster.num_nodes() as usize];
                    for &n in &self.planned {
                        held[n as usize] = true;
                    }
                    Reservation::Nodes { shadow, held }
                }
                None => Reservation::Never,
            },
        }
    }

    /// One scheduling pass over the pending jobs in priority order. `backfill`:
    /// Slurm's backfill pass (reservations, later jobs around them); else the
    /// main scheduler's, which stops at the first job that cannot start (nor
    /// preempt its way in), as `job_scheduler.c` stops a partition.
    fn pass(&mut self, pol: &mut dyn SchedPolicy, backfill: bool) {
        self.passes += 1;
        pol.begin_pass();
        let preempting = pol.preempts();
        let mut merge = Merge::new(&self.classes, &self.class_prio);
        let mut reservation: Option<Reservation> = None;
        let mut scanned = 0usize;
        let mut attempts = 0usize;
        let mut hopeless: BTreeSet<u32> = BTreeSet::new();
        // With several reservations (`backfill_reservations` > 1, nodes): the
        // planned start of the reservation holding each node (`hold_next`),
        // and how many of the pass's slots were used (a job that cannot be
        // planned uses one too).
        let several = self.cfg.backfill == Backfill::Nodes && self.cfg.backfill_reservations > 1;
        let mut held_from: Vec<i64> = if several {
            vec![i64::MAX; self.cluster.num_nodes() as usize]
        } else {
            Vec::new()
        };
        let mut earliest_hold = i64::MAX;
        let mut slots = 0usize;
        let mut unplannable = u32::MAX;
        while let Some(j) = merge.next(&self.classes) {
            if scanned >= self.cfg.backfill_depth {
                break;
            }
            scanned += 1;
            let can_preempt =
                preempting && pol.has_candidates() && attempts < self.cfg.preempt_attempts;
            if self.cluster.free_total() == 0 && !can_preempt {
                break;
            }
            let job = &self.jobs[j as usize];
            let (gpus, limit, class, free) = (job.gpus, job.run_limit(), job.class, job.free);
            if !backfill {
                if self.start(pol, j) {
                    continue;
                }
                if can_preempt && !free {
                    attempts += 1;
                    if let Attempt::Started = self.try_preempt(pol, j) {
                        continue;
                    }
                }
                break;
            }
            if several && self.cluster.fits(gpus) {
                // Only on nodes no reservation planned to start before its
                // limit ends holds.
                let end = self.now.saturating_add(limit);
                let started = if earliest_hold < end {
                    self.start_before_holds(pol, j, end, &held_from)
                } else {
                    self.start(pol, j)
                };
                if !started {
                    // Its GPUs are free only on held nodes: it waits, planned.
                    self.hold_next(
                        &mut held_from,
                        &mut earliest_hold,
                        &mut slots,
                        &mut unplannable,
                        gpus,
                    );
                }
                continue;
            }
            if self.cluster.fits(gpus) {
                let end = self.now.saturating_add(limit);
                match reservation.as_mut() {
                    None | Some(Reservation::Never) => {
                        self.start(pol, j);
                    }
                    Some(Reservation::Gpus { shadow, extra }) => {
                        let ok = end <= *shadow || i64::from(gpus) <= *extra;
                        if ok && self.start(pol, j) && end > *shadow {
                            *extra -= i64::from(gpus);
                        }
                    }
                    Some(Reservation::Nodes { shadow, held }) => {
                        if end <= *shadow {
                            self.start(pol, j);
                        } else {
                            // A held node is free for it only until the
                            // planned start: past it, only the other nodes.
                            self.start_outside(pol, j, held);
                        }
                    }
                }
                continue;
            }
            if can_preempt && !free && !hopeless.contains(&class) {
                attempts += 1;
                match self.try_preempt(pol, j) {
                    Attempt::Started => {
                        // Its victims' GPUs may be left over on some nodes.
                        unplannable = u32::MAX;
                        continue;
                    }
                    Attempt::NoVictims => {
                        hopeless.insert(class);
                    }
                    Attempt::NotEnough => {}
                }
            }
            if several {
                self.hold_next(
                    &mut held_from,
                    &mut earliest_hold,
                    &mut slots,
                    &mut unplannable,
                    gpus,
                );
                continue;
            }
            if reservation.is_none() {
                reservation = Some(self.reservation(gpus));
            }
        }
        self.will_run.end_pass();
        pol.end_pass();
    }

    /// Slurm's `cons_tres` step: remove allowed candidates in victim order
    /// until `p` fits, then put back those not needed (least preferred first).
    /// `None` if `p` does not fit even with all of them gone.
    fn fit(&self, p: u32, cands: &[Candidate]) -> Option<Vec<Candidate>> {
        let g = self.cluster.gpus_per_node();
        let need = self.jobs[p as usize].gpus;
        let mut free = self.cluster.free_per_node().to_vec();
        let mut chosen = Vec::new();
        let mut fits = false;
        for c in cands {
            for &(n, k) in &self.jobs[c.job as usize].alloc {
                free[n as usize] += k;
            }
            chosen.push(*c);
            if plan(&free, g, need).is_some() {
                fits = true;
                break;
            }
        }
        if !fits {
            return None;
        }
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let alloc = &self.jobs[chosen[i].job as usize].alloc;
            for &(n, k) in alloc {
                free[n as usize] -= k;
            }
            if plan(&free, g, need).is_some() {
                chosen.remove(i);
            } else {
                for &(n, k) in alloc {
                    free[n as usize] += k;
                }
            }
        }
        Some(chosen)
    }

    fn try_preempt(&mut self, pol: &mut dyn SchedPolicy, p: u32) -> Attempt {
        let attempt = self.try_preempt_once(pol, p);
        let (from, until) = self.count_span;
        if let Some(counts) = self
            .attempts
            .as_mut()
            .filter(|_| (from..until).contains(&self.now))
        {
            let outcome = match attempt {
                Attempt::Started => "started",
                Attempt::NoVictims => "no_victims",
                Attempt::NotEnough => "not_enough",
            };
            let job = &self.jobs[p as usize];
            let team = &self.teams[job.team as usize].name;
            let key = format!("{team} {outcome} {} GPUs", job.gpus);
            *counts.entry(key).or_default() += 1;
        }
        attempt
    }

    fn try_preempt_once(&mut self, pol: &mut dyn SchedPolicy, p: u32) -> Attempt {
        let mut cands = pol.candidates(&self.view(), p);
        if cands.is_empty() {
            return Attempt::NoVictims;
        }
        // Slurm's candidate sort by the plugin's priority (job index breaks ties).
        cands.sort_unstable_by_key(|c| (c.order, c.job));
        let Some(victims) = self.fit(p, &cands) else {
            return Attempt::NotEnough;
        };
        pol.on_preempt(&self.view(), p, &victims);
        for c in &victims {
            self.preemptions_by_reason[usize::from(c.reason)] += 1;
            let (pt, v) = (self.jobs[p as usize].team, &self.jobs[c.job as usize]);
            self.preemption_log.push(PreemptionEvent {
                at: self.now,
                preemptor_team: pt,
                victim_team: v.team,
                victim_free: v.free,
            });
            self.stop_run(pol, c.job, Some(p));
        }
        if self.start(pol, p) {
            Attempt::Started
        } else {
            // Cannot happen: the trial placement used the same first-fit plan.
            debug_assert!(false, "preemptor {p} did not fit after its victims left");
            Attempt::NotEnough
        }
    }

    fn finish(mut self, pol: &dyn SchedPolicy) -> Outcome {
        let unfinished = self.jobs.iter().filter(|j| !j.done).count() as u64;
        let makespan = if unfinished > 0 {
            self.now
        } else {
            self.jobs.iter().map(|j| j.end).max().unwrap_or(0)
        };
        // One last sample after the end so every window up to the makespan is covered.
        let period = self.cfg.sample_every.max(1);
        while (self.samples.len() as i64 - 1) * period < makespan {
            let t = self.samples.len() as i64 * period;
            self.samples.push(self.view().team_cumulative(t));
            self.advance_entitled(t);
            self.entitled_samples.push(self.entitled_cum.clone());
        }
        let facts: Vec<JobFacts> = self
            .jobs
            .iter()
            .map(|j| JobFacts {
                gpus: j.gpus,
                duration: j.duration,
                done: j.done,
            })
            .collect();
        let mut check = checker::check(
            &self.runs,
            &facts,
            self.cfg.nodes,
            self.cfg.gpus_per_node,
            self.busy_gpu_secs,
            self.lost_gpu_secs,
        );
        check.window_mismatches = pol.window_mismatches();
        // Charged usage plus free-tier usage must equal all busy GPU-seconds.
        let charged: i64 = self.view().team_cumulative(makespan).iter().sum();
        let free_busy: i64 = self
            .runs
            .iter()
            .filter(|r| r.free)
            .map(|r| (r.end.unwrap_or(r.start) - r.start) * i64::from(r.gpus))
            .sum();
        if unfinished == 0 && charged + free_busy != self.busy_gpu_secs {
            check.accounting_errors += 1;
        }
        let jobs = self
            .jobs
            .iter()
            .map(|j| JobResult {
                team: j.team,
                submit: j.submit,
                first_start: j.first_start.unwrap_or(j.submit),
                end: j.end,
                gpus: j.gpus,
                duration: j.duration,
                wait_class: j.wait_class,
                preemptions: j.preemptions,
            })
            .collect();
        Outcome {
            policy: pol.kind(),
            teams: self.teams,
            capacity_gpus: self.cluster.capacity(),
            entitled_gpus: self.entitled_gpus,
            makespan,
            jobs,
            runs: self.runs,
            preemptions: self.preemptions,
            preemptions_by_reason: self.preemptions_by_reason,
            preemption_log: self.preemption_log,
            lost_gpu_secs: self.lost_gpu_secs,
            busy_gpu_secs: self.busy_gpu_secs,
            sample_every: period,
            samples: self.samples,
            entitled: self.entitled_samples,
            check,
            unfinished_jobs: unfinished,
            passes: self.passes,
            // Only a policy that asks the cost-aware rule has refusals to report.
            refusals: self.attempts.take().and_then(|attempts| {
                pol.refusals().map(|by_reason| crate::metrics::Refusals {
                    by_reason,
                    attempts,
                })
            }),
        }
    }
}
