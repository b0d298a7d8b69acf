//! Responses of the read-only reports: the `sshare`-like fair-share table
//! (`GET /v1/share`), usage by account or user (`GET /v1/usage`) and the
//! outcome of a sacct history import (`POST /v1/usage/import`).

use policy_core::fairshare::Tier;
use serde::{Deserialize, Serialize};

/// One row of the fair-share table: an account, or a user under an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareRow {
    /// The account (for user rows: the account the user is a member of).
    pub account: String,
    /// Parent account (`null` for the root); for user rows: `account`.
    pub parent: Option<String>,
    /// The user, for user rows; `null` for account rows.
    pub user: Option<String>,
    /// Depth in the tree (root 0).
    pub depth: usize,
    /// Weighted GPU-hours per window.
    pub allocation_gpu_hours: f64,
    /// Weighted GPU-hours used in the window, every descendant included.
    pub usage_gpu_hours: f64,
    /// Free-tier GPU-hours in the window (never charged).
    pub free_usage_gpu_hours: f64,
    /// usage / allocation.
    pub ratio: f64,
    /// Rank among siblings, 1 = lowest ratio.
    pub rank: u32,
    /// Global rank of a leaf (1 = best), `null` for inner nodes.
    pub leaf_rank: Option<u32>,
    /// Slurm-style fair-share factor in (0, 1]; inner accounts: that of a
    /// job charged to the account by a non-member.
    pub fair_share_factor: f64,
    pub tier: Tier,
    pub overcommit: bool,
}

/// `GET /v1/share`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ShareReport {
    pub at: i64,
    pub window_secs: i64,
    pub rows: Vec<ShareRow>,
}

/// One row of `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageRow {
    pub account: String,
    /// `null` in `by=account` rows.
    pub user: Option<String>,
    /// Weighted GPU-hours charged (by=account: every descendant included).
    pub usage_gpu_hours: f64,
    /// Unweighted GPU-hours charged.
    pub raw_gpu_hours: f64,
    /// Weighted free-tier GPU-hours (never charged).
    pub free_gpu_hours: f64,
    /// Whether the account is in the budget tree (synced jobs may use others).
    pub in_tree: bool,
}

/// `GET /v1/usage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UsageReport {
    pub from: i64,
    pub to: i64,
    /// `account` or `user`.
    pub by: String,
    pub rows: Vec<UsageRow>,
}

/// A line of a sacct import that was not imported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LineError {
    /// 1-based line number in the file.
    pub line: usize,
    pub error: String,
}

/// `POST /v1/usage/import` answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ImportReport {
    pub lines: usize,
    pub runs: usize,
    pub inserted: u64,
    pub updated: u64,
    pub unchanged: u64,
    /// Lines deliberately not imported (pending, never started), with why.
    pub skipped: Vec<LineError>,
    /// Bad lines (imported only the others, with `skip_invalid`).
    pub invalid: Vec<LineError>,
    /// Records whose job id and run are stored with another account, user,
    /// size or start (a reused job id, or a wrong file): not imported.
    #[serde(default)]
    pub conflicts: Vec<crate::RefusedRun>,
}
