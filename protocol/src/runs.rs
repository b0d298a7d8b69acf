//! The run ledger as budgetd reports it: `GET /v1/runs`, every run that overlaps
//! a time range with what a replay needs (submit time, size, time limit,
//! contract, free tier, checkpoint), the cluster's GPUs as the snapshot
//! publishes them and the window. `budgetctl whatif` replays it through the
//! simulator.

use serde::{Deserialize, Serialize};

use crate::RunState;

/// Route of the ledger's runs (`GET`, `?since=&until=`).
pub const ROUTE: &str = "/v1/runs";

/// One row of the ledger, keyed by `(job_id, run, submit, rerun)`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerRun {
    pub job_id: u32,
    /// Slurm's `restart_cnt`.
    pub run: u32,
    /// Slurm's submit time of this run (a requeue sets a new one); 0: unknown.
    pub submit: i64,
    /// 0, or how many times this run started again after slurmctld lost it.
    pub rerun: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub gpu_type: Option<String>,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub state: RunState,
    pub free_tier: bool,
    pub min_runtime_secs: i64,
    /// The run's time limit in seconds, if the controller sent one.
    pub time_limit_secs: Option<i64>,
    /// Declared checkpoint interval in seconds.
    pub checkpoint_secs: Option<i64>,
    /// Nodes the run held (Slurm hostlist expression).
    pub nodes: Option<String>,
}

/// `GET /v1/runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsReport {
    pub since: i64,
    pub until: i64,
    /// The usage window (allocations are GPU-hours per window).
    pub window_secs: i64,
    /// The cluster's GPUs as budgetd last read them from Slurm (the
    /// snapshot's `cluster_gpus`); `None`: unknown.
    pub cluster_gpus: Option<u32>,
    /// Runs in the range the caller may not see (left out of `runs`).
    pub hidden: u64,
    /// Every run the caller may see with a start, end or submit in the range,
    /// or open across it (pending or running), by `(job_id, submit, run, rerun)`.
    pub runs: Vec<LedgerRun>,
}
