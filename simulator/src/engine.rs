//! The discrete-event replay.
//!
//! # Events and time
//! Submissions come from the sorted trace; run ends, protection ends,
//! recalculation ticks and metric samples sit in a binary heap keyed by
//! `(time, kind, sequence number)`, so ties always break the same way. At one
//! instant the engine handles ends, then protection ends, then submissions,
//! then the tick and the sample, and then runs **one** scheduling pass: the
//! same instant never depends on heap internals or hash order.
//!
//! # Priorities (all three policies)
//! Like Slurm's `PriorityCalcPeriod`, priorities are recomputed at every tick
//! (`--recalc-interval`, default 5 min) and stay fixed in between; a job
//! submitted between ticks gets its class's current priority. Pending jobs
//! live in *classes* whose members differ only by age, each a FIFO by
//! `(submit, job)`; a pass walks the classes merged by
//! `(class priority desc, submit, job)`. For the budget policy a class is a
//! fair-share leaf (team, user) plus the free-tier flag and its priority is
//! `policy_core::priority::job_priority(tier, rank, leaves, 0)`: because the
//! rank field dominates the age field, this order *is* the order of the full
//! `job_priority(.., age)` (a test checks it), at O(log classes) per job.
//! - `budget`: tier + Fair-Tree rank from `policy_core::FairShare::compute`
//!   on the exact sliding-window usage, then age; preemption by
//!   `policy_core::preempt::may_preempt`, victims by `victim_order`.
//! - `static`: FIFO by a user-declared level (high/normal/low). Traces carry
//!   none, so each job draws one from the seed: 80% high, 15% normal, 5% low
//!   (priority inflation made nearly everything HIGH). Free-tier jobs are low.
//!   No preemption.
//! - `decay`: Slurm's classic fair share at team level: usage decayed with a
//!   7-day half-life, factor `2^(-U/S)` (U: team's share of decayed usage, S:
//!   its share of allocations), then age. No preemption (as Slurm's
//!   `priority/multifactor` with `PreemptType=preempt/none`).
//!
//! # Placement and backfill (identical for all policies)
//! First fit ([`crate::cluster`]). A pass walks pending jobs in priority
//! order and starts each one that fits. The first job that does not fit (and,
//! for `budget`, cannot preempt) gets a reservation: its *shadow time* is the
//! earliest end of running jobs at which enough GPUs are free (counted in GPUs,
//! whole nodes for multi-node jobs; ends are known exactly because traces give
//! real durations, as if users set perfect time limits). Later jobs are started
//! only if they fit now and either end before the shadow time or use no more
//! than the GPUs left over at the shadow time (EASY backfill on GPU counts,
//! ignoring node fragmentation at the shadow time). The walk stops after
//! `--backfill-depth` jobs (Slurm's `bf_max_job_test`), or as soon as no GPU is
//! free and no preemption is possible.
//!
//! # Preemption (budget only)
//! A pending non-free job that does not fit collects every running job that
//! is past its protected window (or free tier) and that `may_preempt` allows,
//! sorts them by `victim_order` (then job index), removes them in that order
//! until the job fits (trial first-fit), then puts back those not needed
//! (least preferred first), as Slurm's `cons_tres` will-run test does. If the
//! job still does not fit, nobody is preempted. Victims are requeued with
//! their original submit time; work since the last checkpoint (or since the
//! run start) is lost; the next run gets a fresh protected window.
//! Holdings (`held`, GPUs per fair-share node) count non-free running jobs.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::ops::Bound::{Excluded, Unbounded};

use policy_core::fairshare::{FairShare, LeafKey, Tier, UsageByLeaf};
use policy_core::preempt::{self, Context, JobView, PreemptPolicy};
use policy_core::priority::job_priority;
use policy_core::tree::{AccountSpec, MemberSpec, TreeSpec};

use crate::checker::{self, CheckReport, JobFacts, RunRecord};
use crate::cluster::{Alloc, Cluster, plan};
use crate::rng::{Purpose, unit};
use crate::trace::JobSpec;
use crate::usage::SlidingUsage;

/// The policies the simulator compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    Budget,
    Static,
    Decay,
}

impl PolicyKind {
    pub const ALL: [PolicyKind; 3] = [PolicyKind::Budget, PolicyKind::Static, PolicyKind::Decay];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Budget => "budget",
            PolicyKind::Static => "static",
            PolicyKind::Decay => "decay",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            PolicyKind::Budget => {
                "tiers + Fair-Tree rank on the 7-day sliding window + age; preemption by the product rule"
            }
            PolicyKind::Static => {
                "FIFO by user-declared priority (seeded: 80% high, 15% normal, 5% low); no preemption"
            }
            PolicyKind::Decay => {
                "Slurm classic fair share 2^(-U/S), usage half-life 7 days, then age; no preemption"
            }
        }
    }
}

/// How a job's minimum runtime is chosen when the trace does not declare one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinRuntimeRule {
    /// `min(duration, cap)`.
    Cap(i64),
    /// `fraction x duration`, rounded down.
    Fraction(f64),
}

impl MinRuntimeRule {
    /// `cap:2h` / `2h` (a duration: min(duration, 2h)), `frac:0.25`, `none` (= cap 0).
    pub fn parse(s: &str) -> Result<MinRuntimeRule, String> {
        let s = s.trim();
        if s == "none" {
            return Ok(MinRuntimeRule::Cap(0));
        }
        if let Some(f) = s.strip_prefix("frac:") {
            return match f.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(MinRuntimeRule::Fraction(v)),
                _ => Err(format!(
                    "min-runtime rule {s:?}: fraction must be a number in [0, 1]"
                )),
            };
        }
        let d = s.strip_prefix("cap:").unwrap_or(s);
        policy_core::parse_duration(d)
            .map(MinRuntimeRule::Cap)
            .map_err(|e| {
                format!(
                    "min-runtime rule {s:?}: expected cap:DURATION, DURATION, frac:F or none ({e})"
                )
            })
    }

    pub fn apply(&self, duration: i64) -> i64 {
        match *self {
            MinRuntimeRule::Cap(c) => duration.min(c),
            MinRuntimeRule::Fraction(f) => (duration as f64 * f).floor() as i64,
        }
    }

    pub fn describe(&self) -> String {
        match *self {
            MinRuntimeRule::Cap(0) => "none (0)".to_string(),
            MinRuntimeRule::Cap(c) => format!("min(duration, {})", policy_core::format_duration(c)),
            MinRuntimeRule::Fraction(f) => format!("{f} x duration"),
        }
    }
}

/// Everything a replay needs besides the trace and the policy.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Sliding window length (seconds).
    pub window: i64,
    /// Priority / fair-share recalculation period (seconds).
    pub recalc: i64,
    pub hysteresis: f64,
    /// Checkpoint interval in seconds; 0: no checkpoints (a preempted run loses all its work).
    pub checkpoint: i64,
    pub min_runtime: MinRuntimeRule,
    /// Pending jobs examined per scheduling pass.
    pub backfill_depth: usize,
    /// Preemption attempts per scheduling pass.
    pub preempt_attempts: usize,
    /// Metric sample period (seconds).
    pub sample_every: i64,
    pub decay_half_life: i64,
    pub seed: u64,
    /// Fraction of jobs drawn (by seed) into the free tier, besides the trace's `free` column.
    pub free_fraction: f64,
    /// Check the incremental window usage against `policy_core::window_usage`
    /// at every recalculation (slow: tests and small traces).
    pub verify_window: bool,
    /// Simulated time at which the replay gives up (seconds since the first
    /// submission). Without checkpoints, rebalancing can requeue a long job
    /// forever (each run is preempted right after its window and loses all its
    /// work); the replay then stops here and reports the unfinished jobs.
    pub horizon: i64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 1,
            gpus_per_node: 8,
            window: policy_core::DEFAULT_WINDOW_SECS,
            recalc: 300,
            hysteresis: PreemptPolicy::default().hysteresis,
            checkpoint: 0,
            min_runtime: MinRuntimeRule::Cap(2 * 3600),
            backfill_depth: 200,
            preempt_attempts: 16,
            sample_every: 3600,
            decay_half_life: 7 * 86_400,
            seed: 1,
            free_fraction: 0.0,
            verify_window: false,
            horizon: i64::MAX,
        }
    }
}

/// A team and its allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamInfo {
    pub name: String,
    /// Allocation in GPUs (allocation = GPUs x window).
    pub gpus: f64,
}

/// Outcome of one job.
#[derive(Debug, Clone, PartialEq)]
pub struct JobResult {
    pub team: u32,
    pub submit: i64,
    pub first_start: i64,
    pub end: i64,
    pub gpus: u32,
    /// Wait class: the tier at first start (budget), the declared level
    /// (static), `all` (decay).
    pub wait_class: &'static str,
    pub preemptions: u32,
}

/// Everything a replay produced; metrics are computed from it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub policy: PolicyKind,
    pub teams: Vec<TeamInfo>,
    pub capacity_gpus: u64,
    /// End of the last job (seconds since the first submission).
    pub makespan: i64,
    pub jobs: Vec<JobResult>,
    pub runs: Vec<RunRecord>,
    pub preemptions: u64,
    /// Preemptions by the clause of the rule that allowed them:
    /// victim free tier, victim over budget, rebalance between budgeted sides.
    pub preemptions_by_reason: [u64; 3],
    pub lost_gpu_secs: i64,
    pub busy_gpu_secs: i64,
    pub sample_every: i64,
    /// `samples[k][team]`: cumulative charged GPU-seconds of each team at `k x sample_every`.
    pub samples: Vec<Vec<i64>>,
    pub check: CheckReport,
    /// Jobs not finished when the replay stopped at the horizon.
    pub unfinished_jobs: u64,
    /// Scheduling passes run (for speed figures).
    pub passes: u64,
}

/// `(time, kind, sequence, job, run)`: ordered by time, then kind, then insertion.
type Event = (i64, u8, u64, u32, u32);

const EV_END: u8 = 0;
const EV_PROTECT: u8 = 1;
const EV_TICK: u8 = 2;
const EV_SAMPLE: u8 = 3;

#[derive(Debug, Clone)]
struct JobState {
    leaf: u32,
    team: u32,
    class: u32,
    submit: i64,
    gpus: u32,
    duration: i64,
    min_runtime: i64,
    /// Free tier as the budget policy sees it (always false for baselines).
    free: bool,
    remaining: i64,
    run: u32,
    running: bool,
    done: bool,
    run_start: i64,
    expected_end: i64,
    alloc: Alloc,
    first_start: Option<i64>,
    end: i64,
    wait_class: &'static str,
    preemptions: u32,
    /// Index of the open run in `runs`.
    open_run: usize,
}

/// Outcome of one preemption attempt.
enum Attempt {
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

struct Sim<'a> {
    cfg: &'a SimConfig,
    policy: PolicyKind,
    specs: &'a [JobSpec],
    jobs: Vec<JobState>,
    leaves: Vec<(String, String)>,
    leaf_team: Vec<u32>,
    teams: Vec<TeamInfo>,
    tree: TreeSpec,
    cluster: Cluster,
    usage: SlidingUsage,
    classes: Vec<BTreeSet<(i64, u32)>>,
    class_prio: Vec<u64>,
    running_by_end: BTreeSet<(i64, u32)>,
    /// Running jobs past their protected window (or free tier), by (leaf, free).
    exposed: BTreeMap<(u32, bool), BTreeSet<u32>>,
    exposed_count: usize,
    heap: BinaryHeap<Reverse<Event>>,
    seq: u64,
    next_submit: usize,
    now: i64,
    fs: Option<FairShare>,
    leaf_place: Vec<Option<LeafKey>>,
    leaf_path: Vec<Vec<usize>>,
    held: Vec<u32>,
    decay_usage: Vec<f64>,
    decay_last_cum: Vec<i64>,
    decay_last_t: i64,
    runs: Vec<RunRecord>,
    preemptions: u64,
    preemptions_by_reason: [u64; 3],
    lost_gpu_secs: i64,
    busy_gpu_secs: i64,
    samples: Vec<Vec<i64>>,
    window_mismatches: u64,
    pending: usize,
    running: usize,
    dirty: bool,
    passes: u64,
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
    let mut sim = Sim::new(jobs, shares, policy, cfg);
    sim.run();
    sim.finish()
}

impl<'a> Sim<'a> {
    fn new(
        specs: &'a [JobSpec],
        shares: &BTreeMap<String, f64>,
        policy: PolicyKind,
        cfg: &'a SimConfig,
    ) -> Sim<'a> {
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
        let (num_classes, class_prio) = match policy {
            PolicyKind::Budget => (leaves.len() * 2, vec![0; leaves.len() * 2]),
            PolicyKind::Static => (3, vec![0, 1, 2]),
            PolicyKind::Decay => (teams.len(), vec![0; teams.len()]),
        };
        let jobs = specs
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let leaf = leaf_idx[&(s.team.as_str(), s.user.as_str())];
                let team = leaf_team[leaf as usize];
                let free_drawn =
                    s.free || unit(cfg.seed, i as u64, Purpose::FreeTier) < cfg.free_fraction;
                let level = if free_drawn {
                    0
                } else {
                    let x = unit(cfg.seed, i as u64, Purpose::StaticPriority);
                    if x < 0.80 {
                        2
                    } else if x < 0.95 {
                        1
                    } else {
                        0
                    }
                };
                let (class, free, wait_class) = match policy {
                    PolicyKind::Budget => (leaf * 2 + u32::from(free_drawn), free_drawn, ""),
                    PolicyKind::Static => (
                        level,
                        false,
                        ["static_low", "static_normal", "static_high"][level as usize],
                    ),
                    PolicyKind::Decay => (team, false, "all"),
                };
                JobState {
                    leaf,
                    team,
                    class,
                    submit: s.submit,
                    gpus: s.gpus,
                    duration: s.duration.max(0),
                    min_runtime: s
                        .min_runtime
                        .unwrap_or_else(|| cfg.min_runtime.apply(s.duration.max(0)))
                        .max(0),
                    free,
                    remaining: s.duration.max(0),
                    run: 0,
                    running: false,
                    done: false,
                    run_start: 0,
                    expected_end: 0,
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
        Sim {
            cfg,
            policy,
            specs,
            jobs,
            leaves,
            leaf_team,
            teams,
            tree,
            cluster: Cluster::new(cfg.nodes, cfg.gpus_per_node),
            usage: SlidingUsage::new(nleaves, cfg.window),
            classes: vec![BTreeSet::new(); num_classes],
            class_prio,
            running_by_end: BTreeSet::new(),
            exposed: BTreeMap::new(),
            exposed_count: 0,
            heap: BinaryHeap::new(),
            seq: 0,
            next_submit: 0,
            now: 0,
            fs: None,
            leaf_place: vec![None; nleaves],
            leaf_path: vec![Vec::new(); nleaves],
            held: Vec::new(),
            decay_usage: vec![0.0; nteams],
            decay_last_cum: vec![0; nteams],
            decay_last_t: 0,
            runs: Vec::new(),
            preemptions: 0,
            preemptions_by_reason: [0; 3],
            lost_gpu_secs: 0,
            busy_gpu_secs: 0,
            samples: Vec::new(),
            window_mismatches: 0,
            pending: 0,
            running: 0,
            dirty: false,
            passes: 0,
        }
    }

    fn push(&mut self, t: i64, kind: u8, job: u32, run: u32) {
        self.seq += 1;
        self.heap.push(Reverse((t, kind, self.seq, job, run)));
    }

    fn active(&self) -> bool {
        self.pending > 0 || self.running > 0 || self.next_submit < self.specs.len()
    }

    fn run(&mut self) {
        if self.specs.is_empty() {
            return;
        }
        let t0 = self.specs[0].submit;
        self.push(t0, EV_TICK, 0, 0);
        self.push(t0, EV_SAMPLE, 0, 0);
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
            self.pop_events(t, EV_PROTECT);
            while self.next_submit < self.specs.len() && self.specs[self.next_submit].submit == t {
                self.submit(self.next_submit as u32);
                self.next_submit += 1;
            }
            self.pop_events(t, EV_SAMPLE);
            if self.dirty {
                self.dirty = false;
                self.pass();
            }
            // Jobs that can never start (bigger than the cluster): stop rather
            // than tick forever; the checker reports them as unfinished.
            if self.pending > 0
                && self.running == 0
                && self.next_submit == self.specs.len()
                && self.heap.iter().all(|Reverse(e)| e.1 >= EV_TICK)
            {
                break;
            }
        }
    }

    /// Handles every heap event at `t` with kind <= `max_kind`.
    fn pop_events(&mut self, t: i64, max_kind: u8) {
        while let Some(&Reverse((et, kind, _, job, run))) = self.heap.peek() {
            if et != t || kind > max_kind {
                break;
            }
            self.heap.pop();
            match kind {
                EV_END => self.end(job, run),
                EV_PROTECT => self.protect_end(job, run),
                EV_TICK => self.tick(),
                _ => self.sample(),
            }
        }
    }

    fn submit(&mut self, j: u32) {
        let job = &self.jobs[j as usize];
        self.classes[job.class as usize].insert((job.submit, j));
        self.pending += 1;
        self.dirty = true;
    }

    fn charged(&self, j: u32) -> bool {
        !self.jobs[j as usize].free
    }

    fn add_exposed(&mut self, j: u32) {
        let job = &self.jobs[j as usize];
        if self
            .exposed
            .entry((job.leaf, job.free))
            .or_default()
            .insert(j)
        {
            self.exposed_count += 1;
        }
    }

    fn remove_exposed(&mut self, j: u32) {
        let job = &self.jobs[j as usize];
        let key = (job.leaf, job.free);
        if let Some(set) = self.exposed.get_mut(&key) {
            if set.remove(&j) {
                self.exposed_count -= 1;
            }
            if set.is_empty() {
                self.exposed.remove(&key);
            }
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

    /// Starts job `j` now; `false` if it does not fit (nothing changes).
    fn start(&mut self, j: u32) -> bool {
        let now = self.now;
        let gpus = self.jobs[j as usize].gpus;
        let Some(alloc) = self.cluster.place(gpus) else {
            return false;
        };
        let wait_class = match self.policy {
            PolicyKind::Budget => {
                let job = &self.jobs[j as usize];
                if job.free {
                    Tier::Free.as_str()
                } else {
                    self.leaf_place[job.leaf as usize]
                        .map(|p| p.tier)
                        .unwrap_or(Tier::OverBudget)
                        .as_str()
                }
            }
            _ => self.jobs[j as usize].wait_class,
        };
        let run_index = self.runs.len();
        let job = &mut self.jobs[j as usize];
        self.classes[job.class as usize].remove(&(job.submit, j));
        job.running = true;
        job.run_start = now;
        job.expected_end = now + job.remaining;
        job.alloc = alloc.clone();
        job.open_run = run_index;
        if job.first_start.is_none() {
            job.first_start = Some(now);
            job.wait_class = wait_class;
        }
        let (end, run, leaf, free, until) = (
            job.expected_end,
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
        self.running_by_end.insert((end, j));
        self.push(end, EV_END, j, run);
        if self.policy == PolicyKind::Budget {
            if free || until <= now {
                self.add_exposed(j);
            } else {
                self.push(until, EV_PROTECT, j, run);
            }
        }
        if self.charged(j) {
            self.usage.change(leaf as usize, now, i64::from(gpus));
            if self.policy == PolicyKind::Budget {
                self.held_add(leaf, gpus, true);
            }
        }
        true
    }

    /// Ends the current run of `j` (completion or preemption) and frees its GPUs.
    fn stop_run(&mut self, j: u32, preempted_by: Option<u32>) {
        let now = self.now;
        let ckpt = self.cfg.checkpoint;
        let job = &mut self.jobs[j as usize];
        let elapsed = now - job.run_start;
        let alloc = std::mem::take(&mut job.alloc);
        let (gpus, leaf, expected_end, open) = (job.gpus, job.leaf, job.expected_end, job.open_run);
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
            self.classes[job.class as usize].insert((job.submit, j));
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
        self.running_by_end.remove(&(expected_end, j));
        self.remove_exposed(j);
        if self.charged(j) {
            self.usage.change(leaf as usize, now, -i64::from(gpus));
            if self.policy == PolicyKind::Budget {
                self.held_add(leaf, gpus, false);
            }
        }
        self.dirty = true;
    }

    fn end(&mut self, j: u32, run: u32) {
        let job = &self.jobs[j as usize];
        // A stale end: the run was preempted and the job requeued.
        if !job.running || job.run != run {
            return;
        }
        self.stop_run(j, None);
    }

    fn protect_end(&mut self, j: u32, run: u32) {
        let job = &self.jobs[j as usize];
        if job.running && job.run == run {
            self.add_exposed(j);
            self.dirty = true;
        }
    }

    fn schedule_next(&mut self, kind: u8, period: i64) {
        if self.active() {
            let next = self.now + period.max(1);
            self.push(next, kind, 0, 0);
        }
    }

    fn tick(&mut self) {
        match self.policy {
            PolicyKind::Budget => self.recompute_fair_share(),
            PolicyKind::Decay => self.recompute_decay(),
            PolicyKind::Static => {}
        }
        self.dirty = true;
        self.schedule_next(EV_TICK, self.cfg.recalc);
    }

    fn recompute_fair_share(&mut self) {
        let now = self.now;
        let mut usage = UsageByLeaf::new();
        for (i, (team, user)) in self.leaves.iter().enumerate() {
            usage.insert(
                (team.clone(), user.clone()),
                self.usage.window_usage(i, now) as f64,
            );
        }
        if self.cfg.verify_window {
            self.verify_window(&usage);
        }
        let fs = FairShare::compute(&self.tree, &usage, now, self.cfg.window);
        for (i, (team, user)) in self.leaves.iter().enumerate() {
            let place = fs.place(team, user);
            self.leaf_path[i] = place.map(|p| fs.path(p.node)).unwrap_or_default();
            self.leaf_place[i] = place;
            let (tier, rank) = place
                .map(|p| (p.tier, p.rank))
                .unwrap_or((Tier::OverBudget, fs.num_leaves));
            self.class_prio[i * 2] = u64::from(job_priority(tier, rank, fs.num_leaves, 0));
            self.class_prio[i * 2 + 1] =
                u64::from(job_priority(Tier::Free, rank, fs.num_leaves, 0));
        }
        let jobs = &self.jobs;
        let leaves = &self.leaves;
        let held = fs.holdings(
            self.running_by_end
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
        self.held = held;
        self.fs = Some(fs);
    }

    /// Compares the incremental window with the policy core's definition over every run.
    fn verify_window(&mut self, usage: &UsageByLeaf) {
        let now = self.now;
        let mut by_leaf: Vec<Vec<policy_core::Run>> = vec![Vec::new(); self.leaves.len()];
        for r in self.runs.iter().filter(|r| !r.free) {
            let leaf = self.jobs[r.job as usize].leaf as usize;
            by_leaf[leaf].push(policy_core::Run {
                start: r.start,
                end: r.end,
                gpus: r.gpus,
                weight: 1.0,
            });
        }
        for (i, (team, user)) in self.leaves.iter().enumerate() {
            let expect = policy_core::window_usage(&by_leaf[i], now, self.cfg.window);
            if usage.get(&(team.clone(), user.clone())).copied() != Some(expect) {
                self.window_mismatches += 1;
            }
        }
    }

    fn team_cumulative(&self, t: i64) -> Vec<i64> {
        let mut out = vec![0i64; self.teams.len()];
        for (leaf, &team) in self.leaf_team.iter().enumerate() {
            out[team as usize] += self.usage.cumulative(leaf, t);
        }
        out
    }

    fn recompute_decay(&mut self) {
        let now = self.now;
        let cum = self.team_cumulative(now);
        let dt = (now - self.decay_last_t) as f64;
        let factor = 0.5f64.powf(dt / self.cfg.decay_half_life.max(1) as f64);
        for (t, c) in cum.iter().enumerate() {
            self.decay_usage[t] =
                self.decay_usage[t] * factor + (c - self.decay_last_cum[t]) as f64;
        }
        self.decay_last_cum = cum;
        self.decay_last_t = now;
        let total_u: f64 = self.decay_usage.iter().sum();
        let total_s: f64 = self.teams.iter().map(|t| t.gpus).sum();
        for (t, team) in self.teams.iter().enumerate() {
            let u = if total_u > 0.0 {
                self.decay_usage[t] / total_u
            } else {
                0.0
            };
            let s = if total_s > 0.0 {
                team.gpus / total_s
            } else {
                0.0
            };
            let f = if s > 0.0 { 2f64.powf(-u / s) } else { 0.0 };
            self.class_prio[t] = (f * 1e9).round() as u64;
        }
    }

    fn sample(&mut self) {
        let cum = self.team_cumulative(self.now);
        self.samples.push(cum);
        self.schedule_next(EV_SAMPLE, self.cfg.sample_every);
    }

    fn view(&self, j: u32) -> JobView<'_> {
        let job = &self.jobs[j as usize];
        let (account, user) = &self.leaves[job.leaf as usize];
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

    /// GPUs needed for a reservation: whole nodes for multi-node jobs.
    fn shadow(&self, gpus: u32) -> (i64, i64) {
        let g = self.cluster.gpus_per_node();
        let need = if gpus > g {
            i64::from(self.cluster.nodes_needed(gpus) * g)
        } else {
            i64::from(gpus)
        };
        let mut avail = self.cluster.free_total() as i64;
        for &(end, j) in &self.running_by_end {
            avail += i64::from(self.jobs[j as usize].gpus);
            if avail >= need {
                return (end, avail - need);
            }
        }
        (i64::MAX, 0)
    }

    fn pass(&mut self) {
        self.passes += 1;
        let preempting = self.policy == PolicyKind::Budget && self.fs.is_some();
        let mut merge = Merge::new(&self.classes, &self.class_prio);
        let mut reservation: Option<(i64, i64)> = None;
        let mut scanned = 0usize;
        let mut attempts = 0usize;
        let mut hopeless: BTreeSet<u32> = BTreeSet::new();
        while let Some(j) = merge.next(&self.classes) {
            if scanned >= self.cfg.backfill_depth {
                break;
            }
            scanned += 1;
            let can_preempt =
                preempting && self.exposed_count > 0 && attempts < self.cfg.preempt_attempts;
            if self.cluster.free_total() == 0 && !can_preempt {
                break;
            }
            let job = &self.jobs[j as usize];
            let (gpus, remaining, class, free) = (job.gpus, job.remaining, job.class, job.free);
            if self.cluster.fits(gpus) {
                let ok = match reservation {
                    None => true,
                    Some((shadow, extra)) => {
                        self.now + remaining <= shadow || i64::from(gpus) <= extra
                    }
                };
                if ok
                    && self.start(j)
                    && let Some((shadow, extra)) = reservation.as_mut()
                    && self.now + remaining > *shadow
                {
                    *extra -= i64::from(gpus);
                }
                continue;
            }
            if can_preempt && !free && !hopeless.contains(&class) {
                attempts += 1;
                match self.try_preempt(j) {
                    Attempt::Started => continue,
                    Attempt::NoVictims => {
                        hopeless.insert(class);
                    }
                    Attempt::NotEnough => {}
                }
            }
            if reservation.is_none() {
                reservation = Some(self.shadow(gpus));
            }
        }
    }

    /// Chooses victims for pending job `p` by the policy core's rule and order.
    fn choose_victims(&self, p: u32) -> Result<Vec<(u32, u8)>, Attempt> {
        let Some(fs) = self.fs.as_ref() else {
            return Err(Attempt::NoVictims);
        };
        let pview = self.view(p);
        let ctx = Context {
            fair_share: Some(fs),
            held: &self.held,
            policy: PreemptPolicy {
                hysteresis: self.cfg.hysteresis,
            },
            now: self.now,
        };
        let mut cands: Vec<(u32, u32, u8)> = Vec::new();
        for set in self.exposed.values() {
            // Every job of a group shares the leaf, the free flag and "past its
            // window", which is all the rule reads: one decision per group.
            let Some(&first) = set.first() else { continue };
            let reason = match preempt::may_preempt(&ctx, &pview, &self.view(first)) {
                Ok(preempt::Allowed::VictimFreeTier) => 0u8,
                Ok(preempt::Allowed::VictimOverBudget) => 1,
                Ok(preempt::Allowed::Rebalance { .. }) => 2,
                Err(_) => continue,
            };
            for &v in set {
                let vview = self.view(v);
                debug_assert!(
                    preempt::may_preempt(&ctx, &pview, &vview).is_ok(),
                    "group decision must hold for each member"
                );
                cands.push((preempt::victim_order(Some(fs), &vview, self.now), v, reason));
            }
        }
        if cands.is_empty() {
            return Err(Attempt::NoVictims);
        }
        cands.sort_unstable();
        let g = self.cluster.gpus_per_node();
        let need = self.jobs[p as usize].gpus;
        let mut free = self.cluster.free_per_node().to_vec();
        let mut chosen = Vec::new();
        let mut fits = false;
        for &(_, v, reason) in &cands {
            for &(n, k) in &self.jobs[v as usize].alloc {
                free[n as usize] += k;
            }
            chosen.push((v, reason));
            if plan(&free, g, need).is_some() {
                fits = true;
                break;
            }
        }
        if !fits {
            return Err(Attempt::NotEnough);
        }
        // Put back victims that are not needed, least preferred first.
        let mut i = chosen.len();
        while i > 0 {
            i -= 1;
            let v = chosen[i].0;
            let alloc = &self.jobs[v as usize].alloc;
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
        Ok(chosen)
    }

    fn try_preempt(&mut self, p: u32) -> Attempt {
        let victims = match self.choose_victims(p) {
            Ok(v) => v,
            Err(a) => return a,
        };
        for (v, reason) in victims {
            self.preemptions_by_reason[usize::from(reason)] += 1;
            self.stop_run(v, Some(p));
        }
        if self.start(p) {
            Attempt::Started
        } else {
            // Cannot happen: the trial placement used the same first-fit plan.
            debug_assert!(false, "preemptor {p} did not fit after its victims left");
            Attempt::NotEnough
        }
    }

    fn finish(mut self) -> Outcome {
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
            self.samples.push(self.team_cumulative(t));
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
        check.window_mismatches = self.window_mismatches;
        // Charged usage plus free-tier usage must equal all busy GPU-seconds.
        let charged: i64 = self.team_cumulative(makespan).iter().sum();
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
                wait_class: j.wait_class,
                preemptions: j.preemptions,
            })
            .collect();
        Outcome {
            policy: self.policy,
            teams: self.teams,
            capacity_gpus: self.cluster.capacity(),
            makespan,
            jobs,
            runs: self.runs,
            preemptions: self.preemptions,
            preemptions_by_reason: self.preemptions_by_reason,
            lost_gpu_secs: self.lost_gpu_secs,
            busy_gpu_secs: self.busy_gpu_secs,
            sample_every: period,
            samples: self.samples,
            check,
            unfinished_jobs: unfinished,
            passes: self.passes,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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

    #[test]
    fn min_runtime_rules() {
        assert_eq!(
            MinRuntimeRule::parse("2h").map(|r| r.apply(10_000)),
            Ok(7_200)
        );
        assert_eq!(MinRuntimeRule::parse("2h").map(|r| r.apply(600)), Ok(600));
        assert_eq!(
            MinRuntimeRule::parse("frac:0.5").map(|r| r.apply(601)),
            Ok(300)
        );
        assert_eq!(MinRuntimeRule::parse("none").map(|r| r.apply(601)), Ok(0));
        assert!(MinRuntimeRule::parse("2x").is_err());
    }
}
