//! The what-if between budgetd's web view and `budgetctl whatif --input`.
//!
//! budgetd does not link the simulator: its web view runs `budgetctl whatif`
//! as a child process and hands it an [`Input`] on stdin, the same four
//! documents `budgetctl whatif` otherwise reads over HTTP (`GET /v1/accounts`,
//! `/v1/policy`, `/v1/runs`, `/v1/usage?by=user`), assembled by the handlers'
//! own functions with the viewer's scope, so the child needs no token. The
//! child prints its `--json` answer, which budgetd reads back as a [`Report`]
//! (the fields the page shows; `budgetctl` prints more, which is ignored).

use serde::{Deserialize, Serialize};

use crate::Policy;
use crate::reports::UsageReport;
use crate::runs::RunsReport;

/// What a what-if replays: the range and the four documents of that range.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Input {
    /// The replayed range, `[since, until]` (Unix seconds).
    pub since: i64,
    pub until: i64,
    /// `GET /v1/accounts`: the accounts the caller may read.
    pub accounts: Vec<policy_core::AccountSpec>,
    /// `GET /v1/policy`.
    pub policy: Policy,
    /// `GET /v1/runs?since=&until=`.
    pub runs: RunsReport,
    /// `GET /v1/usage?by=user&since=&at=until`.
    pub usage: UsageReport,
}

/// An allocation change as `budgetctl whatif --json` reports it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Setting {
    pub account: String,
    pub change: Change,
}

/// `+N%` (percent of today's allocation, added) or GPU-hours per window.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum Change {
    Percent(f64),
    Absolute(f64),
}

/// One team's figures over the range, one definition for the ledger and
/// both replays (`budget_sim::whatif::Figures`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Figures {
    pub gpu_hours: f64,
    /// 0..1.
    pub entitlement_shortfall: f64,
    pub wait_p50_hours: Option<f64>,
    pub wait_p95_hours: Option<f64>,
    pub jobs_started: usize,
    pub jobs_waiting: usize,
    pub preemptions: u64,
    pub lost_gpu_hours: f64,
}

/// One team: allocations and the three sets of figures.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TeamRow {
    pub team: String,
    pub allocation_gpu_hours: f64,
    pub new_allocation_gpu_hours: f64,
    pub ledger: Figures,
    pub as_it_was: Figures,
    pub as_it_would_be: Figures,
}

/// The faithfulness check of one team ("as it was" against the ledger).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub team: String,
    pub usage_budgetd: f64,
    pub usage_as_it_was: f64,
    pub usage_difference: Option<f64>,
    pub within: bool,
}

/// `budgetctl whatif --json`, as budgetd's web view reads it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
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
    /// What the replay models rather than measures, in words.
    pub modelled: Vec<String>,
    pub faithfulness: Vec<Check>,
    pub faithful: bool,
    pub faithful_within: f64,
    /// Runs the caller may not see, left out of the replay.
    pub hidden_runs: u64,
    pub cluster_source: String,
}
