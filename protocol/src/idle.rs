//! Idle GPUs as budgetd reports them: what ingesting a node-agent report
//! changed (`POST /v1/agent/report`) and the idle report (`GET /v1/idle`):
//! jobs holding GPUs idle beyond the policy's threshold, idle GPU-hours per
//! account, and how fresh each node agent's latest report is. (The report a
//! node agent sends is [`AgentReport`](crate::AgentReport).)

use serde::{Deserialize, Serialize};

/// What ingesting one agent report changed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReportOutcome {
    pub node: String,
    /// Whether the report replaced the node's latest (false for a repeat or
    /// a report older than the stored one).
    pub latest_replaced: bool,
    pub streaks_inserted: u64,
    pub streaks_extended: u64,
    pub streaks_unchanged: u64,
    /// Streaks marked as ended by this report (GPU busy or released).
    pub streaks_broken: u64,
    /// Streaks that ended before the idle ledger's retention, deleted by this
    /// report (budgetd's `IDLE_STREAK_RETENTION_SECS`, or two policy windows).
    #[serde(default)]
    pub streaks_pruned: u64,
}

/// One GPU of a flagged job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleGpu {
    pub node: String,
    pub uuid: String,
    /// Start of the current idle streak.
    pub since: i64,
    /// Length of the streak at the node's latest report.
    pub idle_secs: i64,
}

/// A job with GPUs idle beyond the threshold in their nodes' latest reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FlaggedJob {
    pub job_id: u32,
    /// From the run ledger; `null` if the plugin never synced the job.
    pub account: Option<String>,
    pub user: Option<String>,
    pub nodes: Vec<String>,
    /// GPUs idle beyond the threshold now.
    pub gpus_idle: u32,
    /// GPUs the job's latest run holds (run ledger), if known.
    pub gpus: Option<u32>,
    /// Earliest start among its idle streaks.
    pub idle_since: i64,
    /// Longest current streak.
    pub idle_secs: i64,
    pub idle_gpus: Vec<IdleGpu>,
}

/// Idle GPU-hours of one account (the job's own account, no roll-up).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountIdle {
    /// `null`: jobs the run ledger does not know.
    pub account: Option<String>,
    /// Idle GPU-hours in `[from, at]` (unweighted).
    pub idle_gpu_hours: f64,
    /// Jobs with idle time in the window.
    pub jobs: u32,
    /// GPUs idle beyond the threshold now.
    pub idle_gpus_now: u32,
    pub flagged_jobs: u32,
}

/// The latest report of one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    pub node: String,
    pub at: i64,
    pub age_secs: i64,
    pub nvml: bool,
    pub gpus: u32,
    /// Older than `agent_stale_secs`: flags nothing.
    pub stale: bool,
}

/// `GET /v1/idle`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IdleReport {
    pub at: i64,
    pub from: i64,
    pub threshold_secs: i64,
    pub stale_after_secs: i64,
    pub flagged: Vec<FlaggedJob>,
    pub by_account: Vec<AccountIdle>,
    /// Latest report per node (admins and readers only).
    pub nodes: Vec<NodeReport>,
}
