//! The run ledger's rules and its in-memory mirror.
//!
//! Every run of every job is one row keyed by `(job_id, run, submit, rerun)`:
//! Slurm's job id, `restart_cnt` and submit time, and how many times that same
//! run started again after slurmctld lost it in a crash ([`RunRecord::rerun`],
//! almost always 0). This module owns
//! (1) the merge rule that makes ingestion idempotent and exact — a run's start
//! never changes once set, its end is set once, terminal states are final —
//! and (2) [`Ledger`], a compact in-memory copy of the `runs` table.
//!
//! Why a mirror: the fair-share snapshot needs the window usage of every
//! (account, user) over up to millions of runs, within tens of milliseconds.
//! SQLite needs ~1 µs per row just to hand a row over, so the service keeps
//! the few fields usage needs (strings interned) in memory, changes it only
//! after the database transaction that wrote the same rows has committed, and
//! rebuilds it from the table at start. Usage is then exact integer
//! arithmetic: GPU-seconds per (account, user, GPU type) are summed as
//! integers (clipped with [`policy_core::Run::overlap_secs`]), and the GPU
//! type's weight is applied once per sum, so the result does not depend on the
//! order of runs.

use std::collections::HashMap;
use std::sync::Arc;

use budget_protocol::{JobRun, RunState};
use policy_core::preempt::JobView;
use policy_core::rebalance::{PendingJob, RunningJob};
use policy_core::{GpuWeights, Run};
use serde::{Deserialize, Serialize};

/// One ledger row as stored and returned by the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    pub job_id: u32,
    pub run: u32,
    /// Slurm's submit time of this run, 0 when unknown: part of the key, so a
    /// reused job id (a cold-started controller restarts its counter) is a new row.
    #[serde(default)]
    pub submit: i64,
    /// 0, or how many times slurmctld lost this run (a crash before its state
    /// save recorded the start: it reloads the job pending, same id, run and
    /// submit time) and started it again: each start is a row of its own, so
    /// the lost run stays charged (`Store::sync`, docs/design.md §3.4).
    #[serde(default)]
    pub rerun: u32,
    pub account: String,
    pub user: String,
    pub partition: Option<String>,
    pub gpus: u32,
    pub gpu_type: Option<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub free_tier: bool,
    pub min_runtime_secs: i64,
    pub nodes: Option<String>,
    pub state: RunState,
    /// When the service first heard of this run (Unix seconds).
    pub first_seen: i64,
    /// The run's time limit in seconds, if the controller sent one.
    pub time_limit_secs: Option<i64>,
    /// Declared checkpoint interval in seconds.
    pub checkpoint_secs: Option<i64>,
}

/// What ingesting one record does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    Insert(RunRecord),
    Update(RunRecord),
    Unchanged,
}

/// Latest sane Unix time (year 2100): later values are typos or garbage.
pub const MAX_TIME: i64 = 4_102_444_800;
/// Most GPUs one run may hold.
pub const MAX_GPUS: u32 = 1_000_000;

fn terminal(s: RunState) -> bool {
    matches!(s, RunState::Ended | RunState::Requeued)
}

fn check_text(field: &str, v: &str) -> Result<(), String> {
    if v.is_empty() || v.len() > budget_protocol::MAX_RUN_TEXT || v.chars().any(char::is_control) {
        return Err(format!(
            "{field} must be 1-{} printable characters, got {v:?}",
            budget_protocol::MAX_RUN_TEXT
        ));
    }
    Ok(())
}

impl RunRecord {
    /// Converts and checks one synced run; the message names the field.
    pub fn from_job_run(r: &JobRun, seen_at: i64) -> Result<RunRecord, String> {
        check_text("account", &r.account)?;
        check_text("user", &r.user)?;
        for (f, v) in [
            ("partition", &r.partition),
            ("gpu_type", &r.gpu_type),
            ("nodes", &r.nodes),
        ] {
            if let Some(v) = v {
                check_text(f, v)?;
            }
        }
        let rec = RunRecord {
            job_id: r.job_id,
            run: r.run,
            submit: r.submit.unwrap_or(0),
            rerun: 0,
            account: r.account.clone(),
            user: r.user.clone(),
            partition: r.partition.clone(),
            gpus: r.gpus,
            gpu_type: r.gpu_type.as_ref().map(|t| t.to_ascii_lowercase()),
            start: r.start,
            end: r.end,
            free_tier: r.free_tier,
            min_runtime_secs: r.min_runtime_secs,
            nodes: r.nodes.clone(),
            time_limit_secs: r.time_limit_secs.filter(|l| *l > 0),
            checkpoint_secs: r.checkpoint_secs.filter(|c| *c > 0),
            state: r.state,
            first_seen: seen_at,
        };
        rec.check()?;
        Ok(rec)
    }

    /// The checks a synced run gets ([`RunRecord::from_job_run`]), for a run
    /// that came another way (an import): printable texts of bounded length,
    /// and [`RunRecord::check`].
    pub fn check_all(&self) -> Result<(), String> {
        check_text("account", &self.account)?;
        check_text("user", &self.user)?;
        for (f, v) in [
            ("partition", &self.partition),
            ("gpu_type", &self.gpu_type),
            ("nodes", &self.nodes),
        ] {
            if let Some(v) = v {
                check_text(f, v)?;
            }
        }
        self.check()
    }

    /// Internal consistency of a record.
    pub fn check(&self) -> Result<(), String> {
        if self.gpus > MAX_GPUS {
            return Err(format!(
                "gpus must be at most {MAX_GPUS}, got {}",
                self.gpus
            ));
        }
        if !(0..=policy_core::duration::MAX_DURATION_SECS).contains(&self.min_runtime_secs) {
            return Err(format!(
                "min_runtime_secs must be between 0 and 366 days, got {}",
                self.min_runtime_secs
            ));
        }
        for (f, v) in [
            ("submit", Some(self.submit)),
            ("start", self.start),
            ("end", self.end),
        ] {
            if let Some(t) = v
                && !(0..=MAX_TIME).contains(&t)
            {
                return Err(format!(
                    "{f} must be a Unix time between 0 and {MAX_TIME}, got {t}"
                ));
            }
        }
        if let (Some(s), Some(e)) = (self.start, self.end)
            && e < s
        {
            return Err(format!("end ({e}) is before start ({s})"));
        }
        match self.state {
            RunState::Running if self.start.is_none() => Err("a running run needs a start".into()),
            RunState::Running | RunState::Pending if self.end.is_some() => {
                Err(format!("a {} run cannot have an end", self.state.as_str()))
            }
            RunState::Pending if self.start.is_some() => {
                Err("a pending run cannot have a start".into())
            }
            _ => Ok(()),
        }
    }

    /// The run as the cost-aware rule sees a running job (requeues: its run
    /// number; GraceTime unknown here: 0), its GPUs weighted by their type
    /// under `weights`.
    pub fn running_job(&self, weights: &GpuWeights) -> RunningJob<'_> {
        RunningJob {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.free_tier,
            gpus: self.gpus,
            weight: weights.weight(self.gpu_type.as_deref()),
            run_start: self.start.unwrap_or(0),
            time_limit: self.time_limit_secs,
            min_runtime: self.min_runtime_secs,
            checkpoint: self.checkpoint_secs,
            grace: 0,
            requeues: self.run,
            leaf: None,
            // The ledger keeps partition names, not their PriorityTier or
            // PreemptMode: `why::Rule` sets them from Slurm's partitions when known.
            partition_tier: None,
            partition_preempt_off: None,
            // budgetd does not read the jobs' QOS (nor their Preempt= lists):
            // the QOS order is left to `preempt/budget`, which reads them.
            qos: None,
        }
    }

    /// The run as the cost-aware rule sees a pending job, its GPUs weighted
    /// as [`RunRecord::running_job`]'s.
    pub fn pending_job(&self, weights: &GpuWeights) -> PendingJob<'_> {
        PendingJob {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.free_tier,
            gpus: self.gpus,
            weight: weights.weight(self.gpu_type.as_deref()),
            leaf: None,
            partition_tier: None,
            qos: None,
        }
    }

    /// The run as the preemption rule sees it (a pending run starts at 0).
    pub fn view(&self) -> JobView<'_> {
        JobView {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.free_tier,
            run_start: self.start.unwrap_or(0),
            min_runtime: self.min_runtime_secs,
            gpus: self.gpus,
        }
    }

    /// The interval the window arithmetic sees, if the run ever started.
    pub fn as_run(&self) -> Option<Run> {
        self.start.map(|start| Run {
            start,
            end: self.end,
            gpus: self.gpus,
            weight: 1.0,
        })
    }
}

/// The merge rule: what ingesting `incoming` does given the stored row.
///
/// - a new key is inserted as sent;
/// - `start` and `end` are each set once and never change afterwards;
/// - `ended`/`requeued` are final states; a run with an end is never running,
///   a run with a start never pending again (a late, stale report);
/// - account, user, partition, GPUs, GPU type, free tier and contract may
///   still change while the run has not started (Slurm allows it for pending
///   jobs) and are frozen from its start on;
/// - `first_seen` keeps its first value.
///
/// Repeating any sync therefore leaves every row as it is.
pub fn merge(existing: Option<&RunRecord>, incoming: &RunRecord) -> Merge {
    let Some(old) = existing else {
        return Merge::Insert(incoming.clone());
    };
    let mut new = old.clone();
    if old.submit == 0 {
        // A row stored before submit times were known adopts the first one sent.
        new.submit = incoming.submit;
    }
    if old.start.is_none() && !terminal(old.state) {
        new.account.clone_from(&incoming.account);
        new.user.clone_from(&incoming.user);
        new.partition.clone_from(&incoming.partition);
        new.gpus = incoming.gpus;
        new.gpu_type.clone_from(&incoming.gpu_type);
        new.free_tier = incoming.free_tier;
        new.min_runtime_secs = incoming.min_runtime_secs;
    }
    if new.start.is_none() && !terminal(old.state) {
        new.start = incoming.start;
    }
    if new.end.is_none() {
        // An end before the frozen start would be a contradiction: keep the start
        // and clamp (a controller never reports that, but a replay might).
        new.end = match (incoming.end, new.start) {
            (Some(e), Some(s)) => Some(e.max(s)),
            (e, _) => e,
        };
    }
    if !terminal(old.state) {
        new.state = incoming.state;
        if incoming.nodes.is_some() {
            new.nodes.clone_from(&incoming.nodes);
        }
        // `scontrol update TimeLimit=` changes it while the run lives.
        if incoming.time_limit_secs.is_some() {
            new.time_limit_secs = incoming.time_limit_secs;
        }
        if incoming.checkpoint_secs.is_some() {
            new.checkpoint_secs = incoming.checkpoint_secs;
        }
    }
    if new.end.is_some() && !terminal(new.state) {
        new.state = RunState::Ended;
    }
    if (new.state == RunState::Running && new.start.is_none())
        || (new.state == RunState::Pending && new.start.is_some())
    {
        new.state = old.state;
    }
    if new == *old {
        Merge::Unchanged
    } else {
        Merge::Update(new)
    }
}

/// Why `incoming` cannot be the stored run `old` (for imports: a reused job
/// id or a wrong file), or `None` when it may be. Only frozen fields count:
/// account, user and GPUs once the run started, and the start itself.
pub fn conflict(old: &RunRecord, incoming: &RunRecord) -> Option<String> {
    let mut diffs = Vec::new();
    if old.start.is_none() && !terminal(old.state) {
        // Pending: its account and user are already the job's (a reused id
        // brings another owner), and it cannot have started before it was
        // submitted.
        if old.account != incoming.account {
            diffs.push(format!(
                "account {} (stored pending as {})",
                incoming.account, old.account
            ));
        }
        if old.user != incoming.user {
            diffs.push(format!(
                "user {} (stored pending as {})",
                incoming.user, old.user
            ));
        }
        if let Some(s) = incoming.start
            && old.submit > 0
            && s < old.submit
        {
            diffs.push(format!(
                "start {s} before the stored submission at {}",
                old.submit
            ));
        }
        return (!diffs.is_empty()).then(|| {
            format!(
                "job {} run {} is stored as another job: {}",
                old.job_id,
                old.run,
                diffs.join(", ")
            )
        });
    }
    if old.account != incoming.account {
        diffs.push(format!(
            "account {} (stored {})",
            incoming.account, old.account
        ));
    }
    if old.user != incoming.user {
        diffs.push(format!("user {} (stored {})", incoming.user, old.user));
    }
    if old.gpus != incoming.gpus {
        diffs.push(format!("gpus {} (stored {})", incoming.gpus, old.gpus));
    }
    if old.start.is_some() && incoming.start.is_some() && old.start != incoming.start {
        diffs.push(format!(
            "start {} (stored {})",
            incoming.start.unwrap_or(0),
            old.start.unwrap_or(0)
        ));
    }
    (!diffs.is_empty()).then(|| {
        format!(
            "job {} run {} is stored as another job: {}",
            old.job_id,
            old.run,
            diffs.join(", ")
        )
    })
}

/// Interned strings: accounts, users, partitions and GPU types repeat a lot.
#[derive(Debug, Default, Clone)]
struct Pool {
    names: Vec<Arc<str>>,
    ids: HashMap<Arc<str>, u32>,
}

impl Pool {
    fn id(&mut self, s: &str) -> u32 {
        if let Some(&i) = self.ids.get(s) {
            return i;
        }
        let i = self.names.len() as u32;
        let a: Arc<str> = Arc::from(s);
        self.names.push(a.clone());
        self.ids.insert(a, i);
        i
    }
    fn opt_id(&mut self, s: Option<&str>) -> u32 {
        s.map_or(u32::MAX, |s| self.id(s))
    }
    fn get(&self, i: u32) -> &str {
        self.names.get(i as usize).map_or("", |s| s)
    }
    fn opt_get(&self, i: u32) -> Option<String> {
        (i != u32::MAX).then(|| self.get(i).to_string())
    }
}

/// Compact in-memory row.
#[derive(Debug, Clone)]
struct MemRun {
    job_id: u32,
    run: u32,
    submit: i64,
    rerun: u32,
    /// Index into [`Ledger::leaves`].
    leaf: u32,
    partition: u32,
    gpu_type: u32,
    gpus: u32,
    start: Option<i64>,
    end: Option<i64>,
    free_tier: bool,
    state: RunState,
    min_runtime: i64,
    first_seen: i64,
    nodes: Option<Box<str>>,
    time_limit: Option<i64>,
    checkpoint: Option<i64>,
}

/// Weighted-usage inputs: integer GPU-seconds per (account, user, GPU type).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct UsageSums {
    /// `(account, user, gpu_type) -> GPU-seconds` charged to budgets.
    pub charged: Vec<(String, String, Option<String>, i128)>,
    /// The same for free-tier runs (recorded, never charged).
    pub free: Vec<(String, String, Option<String>, i128)>,
}

/// The in-memory mirror of the `runs` table.
#[derive(Debug, Default, Clone)]
pub struct Ledger {
    runs: Vec<MemRun>,
    /// `(job_id, run)` -> rows with that id and run, one per submission
    /// (almost always one; more when a job id was reused).
    index: HashMap<(u32, u32), Vec<usize>>,
    strings: Pool,
    /// (account id, user id) pairs.
    leaves: Vec<(u32, u32)>,
    leaf_ids: HashMap<(u32, u32), u32>,
}

impl Ledger {
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.runs.len()
    }

    /// Whether the ledger is empty.
    pub fn is_empty(&self) -> bool {
        self.runs.is_empty()
    }

    fn leaf(&mut self, account: &str, user: &str) -> u32 {
        let key = (self.strings.id(account), self.strings.id(user));
        if let Some(&l) = self.leaf_ids.get(&key) {
            return l;
        }
        let l = self.leaves.len() as u32;
        self.leaves.push(key);
        self.leaf_ids.insert(key, l);
        l
    }

    fn intern(&mut self, r: &RunRecord) -> MemRun {
        MemRun {
            job_id: r.job_id,
            run: r.run,
            submit: r.submit,
            rerun: r.rerun,
            leaf: self.leaf(&r.account, &r.user),
            partition: self.strings.opt_id(r.partition.as_deref()),
            gpu_type: self.strings.opt_id(r.gpu_type.as_deref()),
            gpus: r.gpus,
            start: r.start,
            end: r.end,
            free_tier: r.free_tier,
            state: r.state,
            min_runtime: r.min_runtime_secs,
            first_seen: r.first_seen,
            nodes: r.nodes.as_deref().map(Box::from),
            time_limit: r.time_limit_secs,
            checkpoint: r.checkpoint_secs,
        }
    }

    fn to_record(&self, m: &MemRun) -> RunRecord {
        let (a, u) = self
            .leaves
            .get(m.leaf as usize)
            .copied()
            .unwrap_or((u32::MAX, u32::MAX));
        RunRecord {
            job_id: m.job_id,
            run: m.run,
            submit: m.submit,
            rerun: m.rerun,
            account: self.strings.get(a).to_string(),
            user: self.strings.get(u).to_string(),
            partition: self.strings.opt_get(m.partition),
            gpus: m.gpus,
            gpu_type: self.strings.opt_get(m.gpu_type),
            start: m.start,
            end: m.end,
            free_tier: m.free_tier,
            min_runtime_secs: m.min_runtime,
            nodes: m.nodes.as_deref().map(str::to_string),
            state: m.state,
            first_seen: m.first_seen,
            time_limit_secs: m.time_limit,
            checkpoint_secs: m.checkpoint,
        }
    }

    /// The stored row for `(job_id, run)`: of the latest submission when the
    /// id was reused, its latest start when slurmctld lost one.
    pub fn get(&self, job_id: u32, run: u32) -> Option<RunRecord> {
        self.index
            .get(&(job_id, run))
            .and_then(|rows| {
                rows.iter()
                    .max_by_key(|&&i| (self.runs[i].submit, self.runs[i].rerun))
            })
            .map(|&i| self.to_record(&self.runs[i]))
    }

    /// The submission an incoming record of `(job_id, run)` with `submit`
    /// belongs to: the same one; for an unknown submit (0) the latest one; for
    /// a known one, a row stored without a submit (written before submit times
    /// were known). `None`: a new run, also when only another submission (a
    /// reused id) is stored.
    fn submission(&self, rows: &[usize], submit: i64) -> Option<i64> {
        let has = |s: i64| rows.iter().any(|&i| self.runs[i].submit == s);
        if submit == 0 {
            rows.iter().map(|&i| self.runs[i].submit).max()
        } else if has(submit) {
            Some(submit)
        } else {
            has(0).then_some(0)
        }
    }

    /// The current row (highest `rerun`) of the submission an incoming record
    /// of `(job_id, run)` with `submit` belongs to (see [`Ledger::find_rerun`]).
    pub fn find(&self, job_id: u32, run: u32, submit: i64) -> Option<RunRecord> {
        let rows = self.index.get(&(job_id, run))?;
        let sub = self.submission(rows, submit)?;
        rows.iter()
            .filter(|&&i| self.runs[i].submit == sub)
            .max_by_key(|&&i| self.runs[i].rerun)
            .map(|&i| self.to_record(&self.runs[i]))
    }

    /// The stored row an incoming record of `(job_id, run, rerun)` with
    /// `submit` belongs to: that rerun of the same submission; for an unknown
    /// submit (0) the latest one; for a known one, a row stored without a
    /// submit. `None`: a new row.
    pub fn find_rerun(&self, job_id: u32, run: u32, submit: i64, rerun: u32) -> Option<RunRecord> {
        let rows = self.index.get(&(job_id, run))?;
        let sub = self.submission(rows, submit)?;
        rows.iter()
            .find(|&&i| self.runs[i].submit == sub && self.runs[i].rerun == rerun)
            .map(|&i| self.to_record(&self.runs[i]))
    }

    /// The rerun of `(job_id, run)` of the submission `submit` belongs to that
    /// started at `start`: a run's start is its own, so a record with that
    /// start is that run (a repeat, or a late report of a run slurmctld lost).
    pub fn rerun_with_start(&self, job_id: u32, run: u32, submit: i64, start: i64) -> Option<u32> {
        let rows = self.index.get(&(job_id, run))?;
        let sub = self.submission(rows, submit)?;
        rows.iter()
            .map(|&i| &self.runs[i])
            .find(|m| m.submit == sub && m.start == Some(start))
            .map(|m| m.rerun)
    }

    /// The stored row of `(job_id, run)` (any submission) that started at
    /// `start`: a run's start is its own, so this is the same run.
    pub fn with_start(&self, job_id: u32, run: u32, start: i64) -> Option<RunRecord> {
        self.index
            .get(&(job_id, run))?
            .iter()
            .find(|&&i| self.runs[i].start == Some(start))
            .map(|&i| self.to_record(&self.runs[i]))
    }

    /// Inserts or replaces a row (after the database committed it). A row of
    /// the same `(job_id, run, rerun)` stored with `replaces` as its submit
    /// (the row the record was merged onto) is replaced.
    pub fn put_replacing(&mut self, r: &RunRecord, replaces: i64) {
        let m = self.intern(r);
        let rows = self.index.entry((r.job_id, r.run)).or_default();
        let at = |s: i64| {
            rows.iter()
                .copied()
                .find(|&i| self.runs[i].submit == s && self.runs[i].rerun == r.rerun)
        };
        match at(r.submit).or_else(|| at(replaces)) {
            Some(i) => self.runs[i] = m,
            None => {
                rows.push(self.runs.len());
                self.runs.push(m);
            }
        }
    }

    /// Inserts or replaces the row with the same `(job_id, run, submit, rerun)`.
    pub fn put(&mut self, r: &RunRecord) {
        self.put_replacing(r, r.submit);
    }

    /// Every run stored under one job id, by submission, run number, then
    /// rerun (a reused id lists the older job's runs first).
    pub fn job_runs(&self, job_id: u32) -> Vec<RunRecord> {
        let mut out: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|m| m.job_id == job_id)
            .map(|m| self.to_record(m))
            .collect();
        out.sort_by_key(|r| (r.submit, r.run, r.rerun));
        out
    }

    /// [`Ledger::job_runs`] of each job in `jobs`, in one pass over the
    /// ledger (the web view's queue explains many jobs at once).
    pub fn jobs_runs(
        &self,
        jobs: &std::collections::BTreeSet<u32>,
    ) -> HashMap<u32, Vec<RunRecord>> {
        let mut out: HashMap<u32, Vec<RunRecord>> = HashMap::new();
        if jobs.is_empty() {
            return out;
        }
        for m in &self.runs {
            if jobs.contains(&m.job_id) {
                out.entry(m.job_id).or_default().push(self.to_record(m));
            }
        }
        for runs in out.values_mut() {
            runs.sort_by_key(|r| (r.submit, r.run, r.rerun));
        }
        out
    }

    /// The latest run of each job in `jobs` (latest submission, then highest
    /// run number, sacct array keys last), in one pass over the ledger: the idle report maps many
    /// jobs to their account and user at once, and `job_runs` per job would
    /// scan the whole ledger each time.
    pub fn latest_runs(&self, jobs: &std::collections::BTreeSet<u32>) -> HashMap<u32, RunRecord> {
        let mut best: HashMap<u32, &MemRun> = HashMap::new();
        if jobs.is_empty() {
            return HashMap::new();
        }
        for m in &self.runs {
            if jobs.contains(&m.job_id) {
                let e = best.entry(m.job_id).or_insert(m);
                if (m.submit, m.run, m.rerun) > (e.submit, e.run, e.rerun) {
                    *e = m;
                }
            }
        }
        best.into_iter()
            .map(|(j, m)| (j, self.to_record(m)))
            .collect()
    }

    /// Rows in a given state (the latest synced pending or running runs).
    pub fn in_state(&self, state: RunState) -> Vec<RunRecord> {
        self.runs
            .iter()
            .filter(|m| m.state == state)
            .map(|m| self.to_record(m))
            .collect()
    }

    /// Whether any run of `account` is running.
    pub fn has_running(&self, account: &str) -> bool {
        let Some(&a) = self.strings.ids.get(account) else {
            return false;
        };
        self.runs
            .iter()
            .any(|m| m.state == RunState::Running && self.leaves[m.leaf as usize].0 == a)
    }

    /// Every row with a start, end or submit in `[since, until]` or open
    /// across it (pending or running: no end), sorted by
    /// `(job_id, submit, run, rerun)`: what a replay of the range reads
    /// (`GET /v1/runs`).
    pub fn overlapping(&self, since: i64, until: i64) -> Vec<RunRecord> {
        let mut out: Vec<RunRecord> = self
            .runs
            .iter()
            .filter(|m| {
                let began = m
                    .start
                    .unwrap_or(if m.submit > 0 { m.submit } else { m.first_seen });
                began <= until && m.end.is_none_or(|e| e >= since)
            })
            .map(|m| self.to_record(m))
            .collect();
        out.sort_by_key(|r| (r.job_id, r.submit, r.run, r.rerun));
        out
    }

    /// Every row, sorted by key (tests, export).
    pub fn all(&self) -> Vec<RunRecord> {
        let mut out: Vec<RunRecord> = self.runs.iter().map(|m| self.to_record(m)).collect();
        out.sort_by_key(|r| (r.job_id, r.run, r.submit, r.rerun));
        out
    }

    /// Integer GPU-seconds of every run inside `[at - len, at]`, per
    /// (account, user, GPU type), charged and free tier apart.
    ///
    /// The sums live in a map keyed by (leaf, GPU type) that holds only the
    /// pairs some run in the window touches: memory is linear in the runs,
    /// never leaves x interned strings (gigabytes at 10k users).
    pub fn usage(&self, at: i64, len: i64) -> UsageSums {
        self.usage_at(&[at], len).pop().unwrap_or_default()
    }

    /// [`Ledger::usage`] at each instant of `ats` (windows of `len`), in
    /// one pass over the runs: entry `k` is exactly `usage(ats[k], len)`.
    pub fn usage_at(&self, ats: &[i64], len: i64) -> Vec<UsageSums> {
        // Per instant: (leaf, GPU type id or u32::MAX) -> (charged, free).
        let mut sums: Vec<HashMap<(u32, u32), (i128, i128)>> = vec![HashMap::new(); ats.len()];
        let (Some(&first), Some(&last)) = (ats.iter().min(), ats.iter().max()) else {
            return Vec::new();
        };
        // A run outside the union of the windows is rejected once.
        let lo = first.saturating_sub(len);
        for m in &self.runs {
            let Some(start) = m.start else { continue };
            if start >= last || m.end.is_some_and(|e| e <= lo) || m.gpus == 0 {
                continue;
            }
            let run = Run {
                start,
                end: m.end,
                gpus: m.gpus,
                weight: 1.0,
            };
            for (k, &at) in ats.iter().enumerate() {
                // Cheap rejection before the exact clip.
                if start >= at || m.end.is_some_and(|e| e <= at.saturating_sub(len)) {
                    continue;
                }
                let v = i128::from(run.overlap_secs(at, len)) * i128::from(m.gpus);
                if v == 0 {
                    continue;
                }
                let e = sums[k].entry((m.leaf, m.gpu_type)).or_default();
                if m.free_tier { e.1 += v } else { e.0 += v }
            }
        }
        sums.into_iter().map(|s| self.usage_rows(&s)).collect()
    }

    /// The rows of one instant's sums, named.
    fn usage_rows(&self, sums: &HashMap<(u32, u32), (i128, i128)>) -> UsageSums {
        // Leaf-major, typed before untyped: a stable order for callers and tests.
        let mut keys: Vec<(u32, u32)> = sums.keys().copied().collect();
        keys.sort_unstable();
        let row = |(leaf, t): (u32, u32), s: i128| {
            let (a, u) = self
                .leaves
                .get(leaf as usize)
                .copied()
                .unwrap_or((u32::MAX, u32::MAX));
            (
                self.strings.get(a).to_string(),
                self.strings.get(u).to_string(),
                self.strings.opt_get(t),
                s,
            )
        };
        let mut out = UsageSums::default();
        for k in keys {
            let (c, f) = sums[&k];
            if c != 0 {
                out.charged.push(row(k, c));
            }
            if f != 0 {
                out.free.push(row(k, f));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(job: u32, run: u32, start: Option<i64>, end: Option<i64>, state: RunState) -> RunRecord {
        RunRecord {
            job_id: job,
            run,
            submit: 0,
            rerun: 0,
            account: "a".into(),
            user: "u".into(),
            partition: None,
            gpus: 2,
            gpu_type: Some("h100".into()),
            start,
            end,
            free_tier: false,
            min_runtime_secs: 60,
            nodes: None,
            state,
            first_seen: 1,
            time_limit_secs: None,
            checkpoint_secs: None,
        }
    }

    #[test]
    fn start_and_end_are_set_once_and_repeats_change_nothing() {
        let pending = rec(1, 0, None, None, RunState::Pending);
        assert!(matches!(merge(None, &pending), Merge::Insert(_)));
        let running = rec(1, 0, Some(100), None, RunState::Running);
        let Merge::Update(stored) = merge(Some(&pending), &running) else {
            panic!("update")
        };
        assert_eq!(stored.start, Some(100));
        assert_eq!(merge(Some(&stored), &running), Merge::Unchanged);
        // A stale pending report (collected before the start) does not un-start it.
        assert_eq!(merge(Some(&stored), &pending), Merge::Unchanged);
        // A later report with a different start does not move it.
        let moved = rec(1, 0, Some(150), None, RunState::Running);
        assert_eq!(merge(Some(&stored), &moved), Merge::Unchanged);
        let ended = rec(1, 0, Some(100), Some(500), RunState::Ended);
        let Merge::Update(done) = merge(Some(&stored), &ended) else {
            panic!("update")
        };
        assert_eq!((done.end, done.state), (Some(500), RunState::Ended));
        // End is final; a stale "running" report does not revive it.
        assert_eq!(merge(Some(&done), &running), Merge::Unchanged);
        assert_eq!(
            merge(
                Some(&done),
                &rec(1, 0, Some(100), Some(900), RunState::Ended)
            ),
            Merge::Unchanged
        );
        // Fields are frozen once started.
        let mut other = running.clone();
        other.account = "b".into();
        assert_eq!(merge(Some(&stored), &other), Merge::Unchanged);
    }

    #[test]
    fn usage_clips_at_both_window_edges_and_keeps_free_apart() {
        let mut l = Ledger::default();
        l.put(&rec(1, 0, Some(50), Some(150), RunState::Ended)); // 50 s inside [100, 200]
        l.put(&rec(2, 0, Some(180), None, RunState::Running)); // 20 s
        let mut f = rec(3, 0, Some(100), Some(200), RunState::Ended);
        f.free_tier = true;
        l.put(&f);
        l.put(&rec(4, 0, Some(0), Some(100), RunState::Ended)); // ends at the edge: 0
        let u = l.usage(200, 100);
        assert_eq!(
            u.charged,
            vec![("a".into(), "u".into(), Some("h100".into()), 140)]
        );
        assert_eq!(
            u.free,
            vec![("a".into(), "u".into(), Some("h100".into()), 200)]
        );
    }

    #[test]
    fn checks_name_the_field() {
        let mut r = rec(1, 0, Some(10), Some(5), RunState::Ended);
        assert!(r.check().unwrap_err().contains("before start"));
        r = rec(1, 0, None, None, RunState::Running);
        assert!(r.check().unwrap_err().contains("start"));
        r = rec(1, 0, Some(1), None, RunState::Running);
        r.gpus = MAX_GPUS + 1;
        assert!(r.check().unwrap_err().contains("gpus"));
    }

    proptest::proptest! {
        /// The mirror's integer sums, weighted per type, equal policy_core's
        /// per-run `window_usage` summed run by run; free runs stay apart;
        /// merging a whole batch twice changes nothing.
        #[test]
        fn mirror_usage_equals_per_run_window_usage(
            runs in proptest::collection::vec((0i64..1000, proptest::option::of(0i64..500), 0u32..9, 0usize..3, proptest::bool::ANY, 0usize..3), 0..40),
            at in 0i64..1500,
            len in 1i64..800,
        ) {
            let types = [None, Some("h100"), Some("b300")];
            let weight = |t: Option<&str>| match t { Some("b300") => 2.5, Some(_) => 1.0, None => 0.5 };
            let mut l = Ledger::default();
            let mut expect_charged = 0.0;
            let mut expect_free = 0.0;
            for (i, &(start, dur, gpus, ty, free, who)) in runs.iter().enumerate() {
                let mut r = rec(i as u32, 0, Some(start), dur.map(|d| start + d), if dur.is_some() { RunState::Ended } else { RunState::Running });
                r.gpus = gpus;
                r.gpu_type = types[ty].map(str::to_string);
                r.free_tier = free;
                r.user = format!("u{who}");
                let run = Run { start, end: r.end, gpus, weight: weight(types[ty]) };
                if free { expect_free += run.window_usage(at, len) } else { expect_charged += run.window_usage(at, len) }
                proptest::prop_assert!(matches!(merge(None, &r), Merge::Insert(_)));
                l.put(&r);
                proptest::prop_assert_eq!(merge(l.get(i as u32, 0).as_ref(), &r), Merge::Unchanged);
            }
            let u = l.usage(at, len);
            let total = |rows: &[(String, String, Option<String>, i128)]| -> f64 {
                rows.iter().map(|(_, _, t, s)| *s as f64 * weight(t.as_deref())).sum()
            };
            proptest::prop_assert!((total(&u.charged) - expect_charged).abs() <= 1e-9 * expect_charged.max(1.0));
            proptest::prop_assert!((total(&u.free) - expect_free).abs() <= 1e-9 * expect_free.max(1.0));
            // Several instants in one pass (the web view's windows, in any
            // order, repeats allowed): each entry is that instant's usage,
            // row for row.
            let ats = [at, at - len, at - 2 * len, at + 37, at];
            let many = l.usage_at(&ats, len);
            proptest::prop_assert_eq!(many.len(), ats.len());
            for (k, &t) in ats.iter().enumerate() {
                let (mut charged, mut free) = (0.0, 0.0);
                for &(start, dur, gpus, ty, is_free, _) in &runs {
                    let run = Run { start, end: dur.map(|d| start + d), gpus, weight: weight(types[ty]) };
                    if is_free { free += run.window_usage(t, len) } else { charged += run.window_usage(t, len) }
                }
                proptest::prop_assert!((total(&many[k].charged) - charged).abs() <= 1e-9 * charged.max(1.0));
                proptest::prop_assert!((total(&many[k].free) - free).abs() <= 1e-9 * free.max(1.0));
                proptest::prop_assert_eq!(&many[k], &l.usage(t, len));
            }
            proptest::prop_assert!(l.usage_at(&[], len).is_empty());
        }
    }
}
