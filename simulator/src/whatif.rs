//! What if: the site's own run ledger replayed through the engine, once with
//! today's allocations ("as it was") and once with some of them changed ("as it
//! would be"), and the same per-team figures measured on the ledger itself, so
//! the first replay can be checked against what really happened.
//!
//! This module owns the ledger -> trace conversion ([`convert`]), the
//! allocation changes (`--set ACCOUNT=+20%`, [`Setting`], [`apply_settings`]),
//! the per-team figures with one definition for the ledger and for both replays
//! ([`Figures`]) and the two-case comparison ([`compare`], the two replays on
//! two threads). It knows no wire type: callers (`budgetctl whatif`, later
//! budgetd's web view through a client) hand it plain [`LedgerRun`]s.
//! [`generate`] makes a ledger as the plugins would have recorded it, for tests
//! and the benchmark.
//!
//! What the replay models rather than measures is listed in [`MODELLED`] and
//! printed with every answer.

use std::collections::{BTreeMap, BTreeSet};
use std::str::FromStr;
use std::time::Instant;

use policy_core::rebalance::RebalancePolicy;
use serde::Serialize;

use crate::engine::{Outcome, PolicyKind, SimConfig, simulate};
use crate::limits::TimeLimitModel;
use crate::metrics::r6;
use crate::trace::JobSpec;

pub mod generate;

/// Seconds in a shortfall window (one week).
pub const WEEK: i64 = 7 * 86_400;

/// Work assumed for a job that never started in the ledger and declared no
/// time limit (it only matters in the changed replay, if it starts there).
pub const UNKNOWN_WORK_SECS: i64 = 3_600;

/// What the replay models rather than measures, printed with every answer.
pub const MODELLED: [&str; 8] = [
    "cluster shape: the GPUs of budgetd's last capacity read, as nodes of equal size (GPUs per node: the largest single-node run, or --gpus-per-node); drains, down nodes and GPU types are not replayed (every GPU weight 1)",
    "scheduling: the simulator's Slurm model (priorities recomputed every 5 min, first-fit placement, the main scheduler at each event, backfill as sched/backfill every bf_interval 30 s with bf_window 7 days, a requeued job eligible again 121 s later), not slurmctld itself",
    "the tree is flattened: each account jobs are charged to is a team with its own allocation (scaled to the cluster when allocations exceed it); parents' limits and explicit per-user allocations are not applied",
    "usage before the replay's start is not carried in: fair share starts from an empty window",
    "runs in progress at the start re-enter at the start with the work they had left in the window",
    "a job's work: its last run's length plus what its checkpoints saved of earlier runs (checkpoints every declared interval from each run's start); jobs still running or waiting at the end: their time limit (else 1 h)",
    "every requeued run counts as a preemption (node failures and admin requeues included); jobs cancelled before they started are left out",
    "time limits and contracts are the ledger's, kept for every run of a job; jobs without a limit: each run's limit is the work it has left",
];

/// How a run ended, as the ledger says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Pending,
    Running,
    Ended,
    Requeued,
}

/// One ledger row (budgetd's `GET /v1/runs`), without the wire types.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LedgerRun {
    pub job_id: u32,
    /// Slurm's `restart_cnt`.
    pub run: u32,
    /// Another start of the same run after slurmctld lost it (almost always 0).
    pub rerun: u32,
    /// Slurm's submit time of this run (a requeue sets a new one); 0: unknown.
    pub submit: i64,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub status: RunStatus,
    pub free: bool,
    pub min_runtime: i64,
    pub time_limit: Option<i64>,
    pub checkpoint: Option<i64>,
}

/// One account of the tree: its parent (`None` under the root) and its
/// allocation in GPU-hours per window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Account {
    pub parent: Option<String>,
    pub allocation_gpu_hours: f64,
}

/// Everything one what-if needs.
#[derive(Debug, Clone)]
pub struct Inputs {
    /// Every run that overlaps `[since, until]` (pending ones included).
    pub runs: Vec<LedgerRun>,
    pub since: i64,
    pub until: i64,
    /// The usage window (allocations are GPU-hours per window).
    pub window_secs: i64,
    /// The cost-aware rule's knobs, as budgetd's policy sets them.
    pub rule: RebalancePolicy,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// The tree as it is today.
    pub accounts: BTreeMap<String, Account>,
}

/// Why a what-if cannot run: bad input, nothing replayed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum WhatIfError {
    #[error(
        "--set {0:?}: expected ACCOUNT=+N% or ACCOUNT=-N% (relative) or ACCOUNT=N (GPU-hours per window)"
    )]
    Malformed(String),
    #[error("--set {0}: no such account in the tree")]
    UnknownAccount(String),
    #[error("--set {0}: given twice")]
    Twice(String),
    #[error("--set {account}: the allocation would be {value} GPU-hours, below 0")]
    Negative { account: String, value: f64 },
    #[error("the replay needs a cluster: {0}")]
    NoCluster(String),
    #[error("the replay window is empty (since {since} is not before until {until})")]
    EmptyWindow { since: i64, until: i64 },
}

/// An allocation change.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Change {
    /// `+20%`: percent of today's allocation, added.
    Percent(f64),
    /// `1200`: GPU-hours per window.
    Absolute(f64),
}

/// `ACCOUNT=CHANGE`, as `--set` takes it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Setting {
    pub account: String,
    pub change: Change,
}

impl FromStr for Setting {
    type Err = WhatIfError;

    fn from_str(s: &str) -> Result<Setting, WhatIfError> {
        let bad = || WhatIfError::Malformed(s.to_string());
        let (account, value) = s.split_once('=').ok_or_else(bad)?;
        let account = account.trim().to_ascii_lowercase();
        let value = value.trim();
        if account.is_empty() || value.is_empty() {
            return Err(bad());
        }
        let number = |t: &str| match t.parse::<f64>() {
            Ok(v) if v.is_finite() => Ok(v),
            _ => Err(bad()),
        };
        let change = if let Some(p) = value.strip_suffix('%') {
            // A percentage must say its direction: `20%` alone is ambiguous.
            if !(p.starts_with('+') || p.starts_with('-')) {
                return Err(bad());
            }
            Change::Percent(number(p)?)
        } else {
            let v = number(value)?;
            if value.starts_with('+') || value.starts_with('-') || v < 0.0 {
                return Err(bad());
            }
            Change::Absolute(v)
        };
        Ok(Setting { account, change })
    }
}

/// The allocations (GPU-hours per window) of every account after `settings`.
/// A change to an account scales its whole subtree by the same factor (giving
/// an organisation +20% gives each of its teams +20%); an absolute value on an
/// account that had 0 sets that account only.
pub fn apply_settings(
    accounts: &BTreeMap<String, Account>,
    settings: &[Setting],
) -> Result<BTreeMap<String, f64>, WhatIfError> {
    let mut out: BTreeMap<String, f64> = accounts
        .iter()
        .map(|(n, a)| (n.clone(), a.allocation_gpu_hours))
        .collect();
    let mut seen = BTreeSet::new();
    for s in settings {
        if !accounts.contains_key(&s.account) {
            return Err(WhatIfError::UnknownAccount(s.account.clone()));
        }
        if !seen.insert(s.account.clone()) {
            return Err(WhatIfError::Twice(s.account.clone()));
        }
    }
    // Shallowest first, so a setting on a descendant stands as given whatever
    // the order of the flags.
    let mut ordered: Vec<&Setting> = settings.iter().collect();
    ordered.sort_by_key(|s| depth(accounts, &s.account));
    for s in ordered {
        let old = accounts
            .get(&s.account)
            .map_or(0.0, |a| a.allocation_gpu_hours);
        let new = match s.change {
            Change::Percent(p) => old * (1.0 + p / 100.0),
            Change::Absolute(v) => v,
        };
        if new < 0.0 {
            return Err(WhatIfError::Negative {
                account: s.account.clone(),
                value: r6(new),
            });
        }
        if old > 0.0 {
            let f = new / old;
            for name in subtree(accounts, &s.account) {
                if let (Some(v), Some(a)) = (out.get_mut(&name), accounts.get(&name)) {
                    *v = a.allocation_gpu_hours * f;
                }
            }
        } else if let Some(v) = out.get_mut(&s.account) {
            *v = new;
        }
    }
    Ok(out)
}

/// How many accounts lie above `account` (a cycle cannot occur: the tree is validated).
fn depth(accounts: &BTreeMap<String, Account>, account: &str) -> usize {
    let mut d = 0;
    let mut at = accounts.get(account).and_then(|a| a.parent.as_deref());
    while let Some(p) = at {
        d += 1;
        if d > accounts.len() {
            break;
        }
        at = accounts.get(p).and_then(|a| a.parent.as_deref());
    }
    d
}

/// `account` and every account below it.
fn subtree(accounts: &BTreeMap<String, Account>, account: &str) -> Vec<String> {
    let mut out = vec![account.to_string()];
    let mut i = 0;
    while i < out.len() {
        let parent = out[i].clone();
        out.extend(
            accounts
                .iter()
                .filter(|(_, a)| a.parent.as_deref() == Some(parent.as_str()))
                .map(|(n, _)| n.clone()),
        );
        i += 1;
    }
    out
}

/// The cluster as nodes of equal size: `cluster_gpus` GPUs in nodes of
/// `gpus_per_node` (the last node rounded up).
pub fn shape(cluster_gpus: u32, gpus_per_node: u32) -> Result<(u32, u32), WhatIfError> {
    if cluster_gpus == 0 || gpus_per_node == 0 {
        return Err(WhatIfError::NoCluster(format!(
            "{cluster_gpus} GPUs in nodes of {gpus_per_node}"
        )));
    }
    Ok((cluster_gpus.div_ceil(gpus_per_node), gpus_per_node))
}

/// Per-team figures, one definition for the ledger and both replays, over
/// `[since, until]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Figures {
    /// GPU-hours charged to the team in the window (non-free runs, lost work
    /// included): what budgetd reports as raw usage.
    pub gpu_hours: f64,
    /// Entitlement shortfall (0..1): over the weekly windows ending at
    /// `until`, `sum max(0, E - R) / sum (e x |W|)`, `e` the team's entitled
    /// GPUs, `E` the integral of `min(e, demand)` (GPUs of its non-free jobs
    /// submitted and not finished), `R` the GPU-hours it held (as the
    /// simulator's report defines it). 0 for a team entitled to nothing.
    pub entitlement_shortfall: f64,
    /// Wait (first start - submit) of the jobs submitted in the window that
    /// started, hours, nearest rank; `None` when none started.
    pub wait_p50_hours: Option<f64>,
    pub wait_p95_hours: Option<f64>,
    /// Jobs submitted in the window that started / that had not started at `until`.
    pub jobs_started: usize,
    pub jobs_waiting: usize,
    /// Runs of the team's jobs preempted (requeued) in the window.
    pub preemptions: u64,
    /// GPU-hours of work those preemptions lost (since the last checkpoint).
    pub lost_gpu_hours: f64,
}

/// One team's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamRow {
    pub team: String,
    /// Allocation today and in the changed case (GPU-hours per window).
    pub allocation_gpu_hours: f64,
    pub new_allocation_gpu_hours: f64,
    /// Entitled GPUs today and in the changed case.
    pub entitled_gpus: f64,
    pub new_entitled_gpus: f64,
    /// Measured on the ledger.
    pub ledger: Figures,
    /// The replay with today's allocations.
    pub as_it_was: Figures,
    /// The replay with the changed allocations.
    pub as_it_would_be: Figures,
}

/// The two replays side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Comparison {
    pub since: i64,
    pub until: i64,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Jobs replayed, ledger rows read, jobs left out (cancelled before they started).
    pub jobs: usize,
    pub runs: usize,
    pub jobs_left_out: usize,
    pub settings: Vec<Setting>,
    pub teams: Vec<TeamRow>,
    pub modelled: Vec<String>,
    /// Wall-clock seconds: conversion, each replay (they run side by side), figures.
    pub seconds: Timings,
}

/// Where the time went.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Timings {
    pub convert: f64,
    pub as_it_was: f64,
    pub as_it_would_be: f64,
    pub total: f64,
}

/// A stage of [`compare`], reported as it happens (stderr progress).
#[derive(Debug, Clone, PartialEq)]
pub enum Progress {
    Converted { jobs: usize, runs: usize },
    Started(&'static str),
    Finished { case: &'static str, seconds: f64 },
}

/// One job as the ledger tells it, after grouping its runs.
#[derive(Debug, Clone)]
struct LedgerJob {
    team: String,
    user: String,
    /// Original submit time (run 0's), clamped to `since`.
    submit: i64,
    /// Submitted inside the window (counts toward waits).
    in_window: bool,
    first_start: Option<i64>,
    /// End of the run that completed it; `None`: not finished at `until`.
    end: Option<i64>,
    gpus: u32,
    free: bool,
    min_runtime: i64,
    checkpoint: Option<i64>,
    limit: Option<i64>,
    /// Work the trace gives the job (seconds).
    work: i64,
}

/// The trace of a ledger and what it was made of.
#[derive(Debug, Clone)]
pub struct Converted {
    /// Sorted by submit (then job id), submit relative to `since`.
    pub jobs: Vec<JobSpec>,
    ledger_jobs: Vec<LedgerJob>,
    /// The ledger's runs as activity, absolute times.
    runs: Vec<Held>,
    pub left_out: usize,
}

/// A run as the figures read it.
#[derive(Debug, Clone, Copy)]
struct Held {
    job: usize,
    start: i64,
    /// `None`: still running at `until`.
    end: Option<i64>,
    gpus: u32,
    free: bool,
    preempted: bool,
    lost_secs: i64,
}

/// Work a preempted run of `elapsed` seconds kept with checkpoints every `ckpt`
/// seconds from its start (the engine's rule).
fn saved(elapsed: i64, ckpt: Option<i64>) -> i64 {
    match ckpt {
        Some(c) if c > 0 => elapsed.max(0) / c * c,
        _ => 0,
    }
}

/// Groups the ledger's runs into jobs and makes the trace: one job per Slurm
/// job (a job id's runs from its run 0 on; a reused id starts again at run 0),
/// submit, size, contract, free tier, checkpoint and time limit from its
/// runs, its work from their lengths ([`MODELLED`]).
pub fn convert(runs: &[LedgerRun], since: i64, until: i64) -> Converted {
    let mut rows: Vec<&LedgerRun> = runs.iter().collect();
    rows.sort_by_key(|r| (r.job_id, r.submit, r.run, r.rerun));
    let mut groups: Vec<Vec<&LedgerRun>> = Vec::new();
    for r in rows {
        let new_job = match groups.last().and_then(|g| g.last()) {
            None => true,
            Some(prev) => prev.job_id != r.job_id || (r.run == 0 && r.rerun == 0),
        };
        if new_job {
            groups.push(vec![r]);
        } else if let Some(g) = groups.last_mut() {
            g.push(r);
        }
    }
    let mut jobs: Vec<(LedgerJob, u32, Vec<&LedgerRun>)> = Vec::new();
    let mut left_out = 0;
    for g in groups {
        let Some(first) = g.first() else { continue };
        let Some(last) = g.last() else { continue };
        let started: Vec<&&LedgerRun> = g.iter().filter(|r| r.start.is_some()).collect();
        if started.is_empty() && last.status == RunStatus::Ended {
            left_out += 1;
            continue;
        }
        // Run 0's submit is the job's; a job whose run 0 lies before the
        // range (or is unknown) was submitted before it.
        let original = match (first.run, first.submit, first.start) {
            (0, s, _) if s > 0 => s,
            (0, _, Some(st)) => st,
            _ => since - 1,
        };
        let submit = original.max(since).min(until);
        let ckpt = first.checkpoint.filter(|&c| c > 0);
        let limit = first.time_limit.filter(|&l| l > 0);
        let mut work = 0;
        let mut end = None;
        let mut running_left = None;
        for r in &started {
            let (Some(s), st) = (r.start, r.status) else {
                continue;
            };
            let s = s.max(since);
            match (st, r.end) {
                (RunStatus::Requeued, Some(e)) => work += saved(e.min(until) - s, ckpt),
                (RunStatus::Ended, Some(e)) => {
                    work += (e.min(until) - s).max(0);
                    end = Some(e.min(until));
                }
                _ => running_left = Some(s),
            }
        }
        if end.is_none() {
            // Still running or waiting at `until`: its limit (which the engine
            // would raise to a longer work, so the limit the rule and backfill
            // saw stays the ledger's), and past `until` if it is running.
            let at_least = work
                + match running_left {
                    Some(s) => until - s + 1,
                    None => 1,
                };
            work = match limit {
                Some(l) => l.max(at_least),
                None => at_least.max(work + UNKNOWN_WORK_SECS),
            };
        }
        let lj = LedgerJob {
            team: first.account.clone(),
            user: first.user.clone(),
            submit,
            in_window: original >= since,
            first_start: started.iter().filter_map(|r| r.start).min(),
            end,
            gpus: first.gpus.max(1),
            free: first.free,
            min_runtime: first.min_runtime.max(0),
            checkpoint: ckpt,
            limit,
            work: work.max(0),
        };
        jobs.push((lj, first.job_id, g));
    }
    // The engine's order: by submit, then job id (stable, deterministic).
    jobs.sort_by_key(|(j, id, _)| (j.submit, *id));
    let mut held = Vec::new();
    let mut specs = Vec::with_capacity(jobs.len());
    let mut ledger_jobs = Vec::with_capacity(jobs.len());
    for (i, (j, id, g)) in jobs.into_iter().enumerate() {
        for r in g {
            let Some(s) = r.start else { continue };
            let e = r.end.filter(|_| r.status != RunStatus::Running);
            let stop = e.unwrap_or(until).min(until);
            let s = s.max(since);
            let preempted = r.status == RunStatus::Requeued;
            let elapsed = (stop - s).max(0);
            held.push(Held {
                job: i,
                start: s,
                end: e.map(|e| e.min(until)),
                gpus: r.gpus,
                free: r.free,
                preempted,
                lost_secs: if preempted {
                    elapsed - saved(elapsed, j.checkpoint)
                } else {
                    0
                },
            });
        }
        specs.push(JobSpec {
            id: id.to_string(),
            user: j.user.clone(),
            team: j.team.clone(),
            submit: j.submit - since,
            gpus: j.gpus,
            duration: j.work,
            min_runtime: Some(j.min_runtime),
            free: j.free,
            checkpoint: j.checkpoint,
            limit: j.limit,
        });
        ledger_jobs.push(j);
    }
    Converted {
        jobs: specs,
        ledger_jobs,
        runs: held,
        left_out,
    }
}

/// Allocations in GPU-hours per window -> GPUs, for the teams jobs are charged to.
fn team_gpus(
    allocs: &BTreeMap<String, f64>,
    teams: &[String],
    window: i64,
) -> BTreeMap<String, f64> {
    let hours = window.max(1) as f64 / 3600.0;
    teams
        .iter()
        .map(|t| (t.clone(), allocs.get(t).copied().unwrap_or(0.0) / hours))
        .collect()
}

/// Entitled GPUs: allocations scaled down proportionally when they sum above
/// the cluster (as the engine and the plugins do).
fn entitled(gpus: &BTreeMap<String, f64>, capacity: f64) -> BTreeMap<String, f64> {
    let sum: f64 = gpus.values().sum();
    let f = if sum > capacity && sum > 0.0 {
        capacity / sum
    } else {
        1.0
    };
    gpus.iter().map(|(t, g)| (t.clone(), g * f)).collect()
}

/// The jobs and runs figures are computed from, absolute times.
struct Activity<'a> {
    jobs: Vec<ActJob<'a>>,
    runs: Vec<Held>,
}

/// A job as the figures read it.
#[derive(Debug, Clone, Copy)]
struct ActJob<'a> {
    team: &'a str,
    submit: i64,
    /// Submitted inside the window (its wait counts).
    in_window: bool,
    first_start: Option<i64>,
    /// `None`: not finished at `until`.
    end: Option<i64>,
    gpus: u32,
    free: bool,
}

fn percentile(sorted: &[i64], q: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    Some(r6(sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 3600.0))
}

/// The figures of every team in `teams` over `[since, until]`.
fn figures(
    act: &Activity<'_>,
    teams: &[String],
    entitled: &BTreeMap<String, f64>,
    since: i64,
    until: i64,
) -> Vec<Figures> {
    let idx: BTreeMap<&str, usize> = teams
        .iter()
        .enumerate()
        .map(|(i, t)| (t.as_str(), i))
        .collect();
    let n = teams.len();
    // Weekly windows ending at `until` (the first may be shorter).
    let mut windows = Vec::new();
    let mut hi = until;
    while hi > since {
        let lo = (hi - WEEK).max(since);
        windows.push((lo, hi));
        hi = lo;
    }
    windows.reverse();
    let mut gpu_secs = vec![0i64; n];
    let mut held_w = vec![vec![0i64; windows.len()]; n];
    let mut preemptions = vec![0u64; n];
    let mut lost = vec![0i64; n];
    let job_team: Vec<Option<usize>> = act.jobs.iter().map(|j| idx.get(j.team).copied()).collect();
    for r in &act.runs {
        let Some(t) = job_team.get(r.job).copied().flatten() else {
            continue;
        };
        let stop = r.end.unwrap_or(until).min(until);
        let start = r.start.max(since);
        if r.preempted && r.end.is_some_and(|e| e > since && e <= until) {
            preemptions[t] += 1;
            lost[t] += r.lost_secs * i64::from(r.gpus);
        }
        if r.free || stop <= start {
            continue;
        }
        gpu_secs[t] += (stop - start) * i64::from(r.gpus);
        for (w, &(lo, hi)) in windows.iter().enumerate() {
            let ov = stop.min(hi) - start.max(lo);
            if ov > 0 {
                held_w[t][w] += ov * i64::from(r.gpus);
            }
        }
    }
    // Demand: +GPUs at submit, -GPUs at the end, per team.
    let mut demand: Vec<Vec<(i64, i64)>> = vec![Vec::new(); n];
    let mut waits: Vec<Vec<i64>> = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (j, team) in act.jobs.iter().zip(&job_team) {
        let Some(t) = *team else { continue };
        let ActJob {
            submit,
            in_window,
            first_start,
            end,
            gpus,
            free,
            ..
        } = *j;
        if in_window {
            match first_start {
                Some(s) if s <= until => waits[t].push(s - submit),
                _ => waiting[t] += 1,
            }
        }
        if free {
            continue;
        }
        let from = submit.max(since);
        let to = end.unwrap_or(until).min(until);
        if to > from {
            demand[t].push((from, i64::from(gpus)));
            demand[t].push((to, -i64::from(gpus)));
        }
    }
    let mut out = Vec::with_capacity(n);
    for t in 0..n {
        let e = entitled.get(&teams[t]).copied().unwrap_or(0.0);
        let mut ev = std::mem::take(&mut demand[t]);
        ev.sort_unstable();
        let mut short = 0.0;
        let mut whole = 0.0;
        if e > 0.0 {
            let mut ent_w = vec![0.0f64; windows.len()];
            let mut d = 0i64;
            let mut at = since;
            let mut k = 0;
            let add = |from: i64, to: i64, d: i64, ent_w: &mut [f64]| {
                let m = e.min(d as f64);
                if m <= 0.0 {
                    return;
                }
                for (w, &(lo, hi)) in windows.iter().enumerate() {
                    let ov = to.min(hi) - from.max(lo);
                    if ov > 0 {
                        ent_w[w] += m * ov as f64;
                    }
                }
            };
            while k < ev.len() {
                let tk = ev[k].0;
                add(at, tk, d, &mut ent_w);
                while k < ev.len() && ev[k].0 == tk {
                    d += ev[k].1;
                    k += 1;
                }
                at = tk;
            }
            add(at, until, d, &mut ent_w);
            for (w, &(lo, hi)) in windows.iter().enumerate() {
                short += (ent_w[w] - held_w[t][w] as f64).max(0.0);
                whole += e * (hi - lo) as f64;
            }
        }
        let mut wv = std::mem::take(&mut waits[t]);
        wv.sort_unstable();
        out.push(Figures {
            gpu_hours: r6(gpu_secs[t] as f64 / 3600.0),
            entitlement_shortfall: r6(if whole > 0.0 { short / whole } else { 0.0 }),
            wait_p50_hours: percentile(&wv, 0.5),
            wait_p95_hours: percentile(&wv, 0.95),
            jobs_started: wv.len(),
            jobs_waiting: waiting[t],
            preemptions: preemptions[t],
            lost_gpu_hours: r6(lost[t] as f64 / 3600.0),
        });
    }
    out
}

impl Converted {
    /// The ledger as the figures read it.
    fn ledger_activity(&self) -> Activity<'_> {
        Activity {
            jobs: self
                .ledger_jobs
                .iter()
                .map(|j| ActJob {
                    team: j.team.as_str(),
                    submit: j.submit,
                    in_window: j.in_window,
                    first_start: j.first_start,
                    end: j.end,
                    gpus: j.gpus,
                    free: j.free,
                })
                .collect(),
            runs: self.runs.clone(),
        }
    }

    /// A replay's outcome as the figures read it, back in absolute times.
    fn replay_activity(&self, o: &Outcome, since: i64) -> Activity<'_> {
        let mut first: Vec<Option<i64>> = vec![None; self.jobs.len()];
        let mut end: Vec<Option<i64>> = vec![None; self.jobs.len()];
        let mut runs = Vec::with_capacity(o.runs.len());
        for r in &o.runs {
            let j = r.job as usize;
            if let Some(f) = first.get_mut(j) {
                *f = Some(f.map_or(r.start, |v: i64| v.min(r.start)));
            }
            if let (Some(e), false, Some(x)) = (r.end, r.preempted, end.get_mut(j)) {
                *x = Some(e + since);
            }
            let elapsed = r.end.map_or(0, |e| e - r.start);
            runs.push(Held {
                job: j,
                start: r.start + since,
                end: r.end.map(|e| e + since),
                gpus: r.gpus,
                free: r.free,
                preempted: r.preempted,
                lost_secs: if r.preempted { elapsed - r.saved } else { 0 },
            });
        }
        Activity {
            jobs: self
                .jobs
                .iter()
                .zip(&self.ledger_jobs)
                .enumerate()
                .map(|(i, (s, l))| ActJob {
                    team: s.team.as_str(),
                    submit: s.submit + since,
                    in_window: l.in_window,
                    first_start: first[i].map(|f| f + since),
                    end: end[i],
                    gpus: s.gpus,
                    free: s.free,
                })
                .collect(),
            runs,
        }
    }
}

/// The replay's configuration for `inputs` (horizon: `until`).
pub fn sim_config(inputs: &Inputs) -> SimConfig {
    replay_config(
        inputs.nodes,
        inputs.gpus_per_node,
        inputs.window_secs,
        inputs.rule,
        inputs.until - inputs.since,
    )
}

/// What every what-if replay runs with: the ledger's contracts, checkpoints
/// and limits (nothing drawn), the cost-aware rule, stopping at `horizon`.
pub(crate) fn replay_config(
    nodes: u32,
    gpus_per_node: u32,
    window: i64,
    rule: RebalancePolicy,
    horizon: i64,
) -> SimConfig {
    SimConfig {
        nodes,
        gpus_per_node,
        window,
        rule,
        checkpoint: 0,
        min_runtime: crate::config::MinRuntimeRule::Cap(0),
        time_limits: TimeLimitModel::Exact,
        horizon,
        sample_every: 3600,
        ..SimConfig::default()
    }
}

/// Replays the ledger with today's allocations and with `settings` applied, on
/// two threads, and measures the same figures on the ledger. `progress` hears
/// each stage as it happens.
pub fn compare(
    inputs: &Inputs,
    settings: &[Setting],
    progress: &(dyn Fn(Progress) + Sync),
) -> Result<Comparison, WhatIfError> {
    let t0 = Instant::now();
    if inputs.since >= inputs.until {
        return Err(WhatIfError::EmptyWindow {
            since: inputs.since,
            until: inputs.until,
        });
    }
    if inputs.nodes == 0 || inputs.gpus_per_node == 0 {
        return Err(WhatIfError::NoCluster("no GPUs".into()));
    }
    let today: BTreeMap<String, f64> = inputs
        .accounts
        .iter()
        .map(|(n, a)| (n.clone(), a.allocation_gpu_hours))
        .collect();
    let changed = apply_settings(&inputs.accounts, settings)?;
    let conv = convert(&inputs.runs, inputs.since, inputs.until);
    let convert_secs = t0.elapsed().as_secs_f64();
    progress(Progress::Converted {
        jobs: conv.jobs.len(),
        runs: inputs.runs.len(),
    });
    // Teams: every account a replayed job is charged to, and every account changed.
    let mut team_set: BTreeSet<String> = conv.jobs.iter().map(|j| j.team.clone()).collect();
    team_set.extend(settings.iter().map(|s| s.account.clone()));
    let teams: Vec<String> = team_set.into_iter().collect();
    let cfg = sim_config(inputs);
    let capacity = f64::from(inputs.nodes) * f64::from(inputs.gpus_per_node);
    let gpus_today = team_gpus(&today, &teams, inputs.window_secs);
    let gpus_new = team_gpus(&changed, &teams, inputs.window_secs);
    let run_case = |case: &'static str, shares: &BTreeMap<String, f64>| {
        progress(Progress::Started(case));
        let t = Instant::now();
        let o = simulate(&conv.jobs, shares, PolicyKind::Budget, &cfg);
        let secs = t.elapsed().as_secs_f64();
        progress(Progress::Finished {
            case,
            seconds: secs,
        });
        (o, secs)
    };
    let ((was, was_secs), (would, would_secs)) = std::thread::scope(|s| {
        let h = s.spawn(|| run_case("as it would be", &gpus_new));
        let a = run_case("as it was", &gpus_today);
        let b = match h.join() {
            Ok(b) => b,
            Err(p) => std::panic::resume_unwind(p),
        };
        (a, b)
    });
    let ent_today = entitled(&gpus_today, capacity);
    let ent_new = entitled(&gpus_new, capacity);
    let ledger = figures(
        &conv.ledger_activity(),
        &teams,
        &ent_today,
        inputs.since,
        inputs.until,
    );
    let f_was = figures(
        &conv.replay_activity(&was, inputs.since),
        &teams,
        &ent_today,
        inputs.since,
        inputs.until,
    );
    let f_would = figures(
        &conv.replay_activity(&would, inputs.since),
        &teams,
        &ent_new,
        inputs.since,
        inputs.until,
    );
    let rows = teams
        .iter()
        .zip(ledger)
        .zip(f_was)
        .zip(f_would)
        .map(|(((t, l), a), b)| TeamRow {
            team: t.clone(),
            allocation_gpu_hours: r6(today.get(t).copied().unwrap_or(0.0)),
            new_allocation_gpu_hours: r6(changed.get(t).copied().unwrap_or(0.0)),
            entitled_gpus: r6(ent_today.get(t).copied().unwrap_or(0.0)),
            new_entitled_gpus: r6(ent_new.get(t).copied().unwrap_or(0.0)),
            ledger: l,
            as_it_was: a,
            as_it_would_be: b,
        })
        .collect();
    Ok(Comparison {
        since: inputs.since,
        until: inputs.until,
        nodes: inputs.nodes,
        gpus_per_node: inputs.gpus_per_node,
        jobs: conv.jobs.len(),
        runs: inputs.runs.len(),
        jobs_left_out: conv.left_out,
        settings: settings.to_vec(),
        teams: rows,
        modelled: MODELLED.iter().map(|s| s.to_string()).collect(),
        seconds: Timings {
            convert: r6(convert_secs),
            as_it_was: r6(was_secs),
            as_it_would_be: r6(would_secs),
            total: r6(t0.elapsed().as_secs_f64()),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree() -> BTreeMap<String, Account> {
        let a = |p: Option<&str>, v: f64| Account {
            parent: p.map(str::to_string),
            allocation_gpu_hours: v,
        };
        BTreeMap::from([
            ("org".to_string(), a(None, 2000.0)),
            ("robotics".to_string(), a(Some("org"), 800.0)),
            ("rl".to_string(), a(Some("org"), 1000.0)),
            ("idle".to_string(), a(None, 0.0)),
        ])
    }

    #[test]
    fn settings_parse_and_apply() {
        let s = |t: &str| t.parse::<Setting>();
        assert_eq!(
            s("Robotics=+20%"),
            Ok(Setting {
                account: "robotics".into(),
                change: Change::Percent(20.0)
            })
        );
        assert_eq!(s("rl=1200").map(|x| x.change), Ok(Change::Absolute(1200.0)));
        assert_eq!(s("rl=-10%").map(|x| x.change), Ok(Change::Percent(-10.0)));
        for bad in [
            "rl", "rl=", "=5", "rl=20%", "rl=abc", "rl=-5", "rl=+5", "rl=nan",
        ] {
            assert!(
                matches!(s(bad), Err(WhatIfError::Malformed(_))),
                "{bad} should be refused"
            );
        }
        let t = tree();
        let out =
            apply_settings(&t, &[s("robotics=+20%").unwrap(), s("rl=1200").unwrap()]).unwrap();
        assert!((out["robotics"] - 960.0).abs() < 1e-9);
        assert_eq!(out["rl"], 1200.0);
        assert_eq!(out["org"], 2000.0);
        // A parent's change scales its subtree.
        let out = apply_settings(&t, &[s("org=-50%").unwrap()]).unwrap();
        assert_eq!(
            (out["org"], out["robotics"], out["rl"]),
            (1000.0, 400.0, 500.0)
        );
        // ... unless a descendant is set too.
        let out = apply_settings(&t, &[s("org=-50%").unwrap(), s("rl=1200").unwrap()]).unwrap();
        assert_eq!((out["robotics"], out["rl"]), (400.0, 1200.0));
        assert_eq!(
            apply_settings(&t, &[s("nope=5").unwrap()]),
            Err(WhatIfError::UnknownAccount("nope".into()))
        );
        assert!(matches!(
            apply_settings(&t, &[s("rl=-150%").unwrap()]),
            Err(WhatIfError::Negative { .. })
        ));
        assert_eq!(
            apply_settings(&t, &[s("rl=5").unwrap(), s("RL=6").unwrap()]),
            Err(WhatIfError::Twice("rl".into()))
        );
        assert_eq!(
            apply_settings(&t, &[s("idle=50").unwrap()]).unwrap()["idle"],
            50.0
        );
    }

    fn run(
        job: u32,
        run: u32,
        submit: i64,
        start: Option<i64>,
        end: Option<i64>,
        st: RunStatus,
    ) -> LedgerRun {
        LedgerRun {
            job_id: job,
            run,
            rerun: 0,
            submit,
            account: "a".into(),
            user: "u".into(),
            gpus: 2,
            start,
            end,
            status: st,
            free: false,
            min_runtime: 600,
            time_limit: Some(7200),
            checkpoint: Some(600),
        }
    }

    #[test]
    fn ledger_jobs_become_a_trace() {
        use RunStatus::*;
        let runs = vec![
            // Requeued after 1900 s (3 checkpoints kept), then ran 1000 s more.
            run(1, 0, 100, Some(100), Some(2000), Requeued),
            run(1, 1, 2000, Some(2500), Some(3500), Ended),
            // Reused id: a new job.
            run(1, 0, 5000, Some(5100), None, Running),
            // Never started, still waiting.
            run(2, 0, 4000, None, None, Pending),
            // Cancelled while pending: left out.
            run(3, 0, 4000, None, Some(4500), Ended),
            // Started before the window: re-enters at its start.
            run(4, 0, -500, Some(-100), Some(700), Ended),
        ];
        let c = convert(&runs, 0, 6000);
        assert_eq!(c.left_out, 1);
        let ids: Vec<(&str, i64, i64)> = c
            .jobs
            .iter()
            .map(|j| (j.id.as_str(), j.submit, j.duration))
            .collect();
        assert_eq!(
            ids,
            vec![
                ("4", 0, 700),
                ("1", 100, 1800 + 1000),
                ("2", 4000, 7200),
                ("1", 5000, 7200),
            ]
        );
        let act = c.ledger_activity();
        let f = figures(
            &act,
            &["a".to_string()],
            &BTreeMap::from([("a".to_string(), 4.0)]),
            0,
            6000,
        );
        assert_eq!(f[0].preemptions, 1);
        // Lost: 1900 - 1800 s on 2 GPUs.
        assert!((f[0].lost_gpu_hours - 200.0 / 3600.0).abs() < 1e-6);
        // Held: 1900 + 1000 + 900 + 700 s on 2 GPUs.
        assert!((f[0].gpu_hours - 2.0 * 4500.0 / 3600.0).abs() < 1e-6);
        // Waits of jobs submitted in the window: 0 (job 1) and 100 (reused id); job 2 waits.
        assert_eq!((f[0].jobs_started, f[0].jobs_waiting), (2, 1));
        assert_eq!(f[0].wait_p95_hours, Some(r6(100.0 / 3600.0)));
    }

    /// A generated ledger replayed with today's allocations gives back the
    /// ledger's own figures: the conversion loses nothing the engine reads.
    #[test]
    fn as_it_was_matches_a_generated_ledger() {
        let team = |name: &str, gpus: f64, load: f64| generate::GenTeam {
            name: name.into(),
            allocation_gpus: gpus,
            load,
            users: 3,
        };
        let spec = generate::GenSpec {
            teams: vec![
                team("a", 24.0, 0.55),
                team("b", 16.0, 0.45),
                team("c", 24.0, 0.2),
            ],
            nodes: 8,
            gpus_per_node: 8,
            since: 1_000_000,
            until: 1_000_000 + 2 * WEEK,
            jobs: 1_500,
            window_secs: WEEK,
            rule: RebalancePolicy::default(),
            seed: 7,
        };
        let runs = generate::ledger(&spec);
        assert!(
            runs.iter().any(|r| r.status == RunStatus::Requeued),
            "no preemption"
        );
        assert!(
            runs.iter().any(|r| r.status == RunStatus::Pending),
            "no backlog"
        );
        let accounts = spec
            .teams
            .iter()
            .map(|t| {
                let a = Account {
                    parent: None,
                    allocation_gpu_hours: t.allocation_gpus * WEEK as f64 / 3600.0,
                };
                (t.name.clone(), a)
            })
            .collect();
        let inputs = Inputs {
            runs,
            since: spec.since,
            until: spec.until,
            window_secs: WEEK,
            rule: spec.rule,
            nodes: 8,
            gpus_per_node: 8,
            accounts,
        };
        let set = ["a=+50%".parse().unwrap()];
        let c = compare(&inputs, &set, &|_| {}).unwrap();
        assert_eq!(c.teams.len(), 3);
        for t in &c.teams {
            assert!(t.ledger.gpu_hours > 0.0, "{t:?}");
            let rel = (t.as_it_was.gpu_hours - t.ledger.gpu_hours).abs() / t.ledger.gpu_hours;
            assert!(rel < 0.02, "{}: usage {rel}: {t:#?}", t.team);
            let d = (t.as_it_was.entitlement_shortfall - t.ledger.entitlement_shortfall).abs();
            assert!(d < 0.02, "{}: shortfall {d}: {t:#?}", t.team);
        }
        let a = &c.teams[0];
        assert_eq!(a.new_allocation_gpu_hours, a.allocation_gpu_hours * 1.5);
        assert!(a.new_entitled_gpus > a.entitled_gpus);
    }
}
