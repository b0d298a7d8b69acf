//! The preemption record (`/v1/preemptions`): every run that lost its GPUs to
//! another job or to a maintenance drain, with who took it, why, and the
//! GPU-hours of the lost run. `preempt/budget`'s background thread and
//! budgetd's drain worker write it; `budgetctl usage --preemptions` and
//! `budgetctl why` read it.

use std::collections::BTreeMap;

use policy_core::preempt::Allowed;
use serde::{Deserialize, Serialize};

/// Path of the preemption record.
pub const PREEMPTIONS_PATH: &str = "/v1/preemptions";

/// Why a run was preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    FreeTier,
    OverBudget,
    Rebalance,
    Drain,
}

impl Reason {
    /// The JSON (and stored) name.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FreeTier => "free_tier",
            Reason::OverBudget => "over_budget",
            Reason::Rebalance => "rebalance",
            Reason::Drain => "drain",
        }
    }

    /// Reads [`Reason::as_str`]'s output.
    pub fn parse(s: &str) -> Option<Reason> {
        Some(match s {
            "free_tier" => Reason::FreeTier,
            "over_budget" => Reason::OverBudget,
            "rebalance" => Reason::Rebalance,
            "drain" => Reason::Drain,
            _ => return None,
        })
    }

    /// The reason behind a policy-core decision.
    pub fn of(a: &Allowed) -> Reason {
        match a {
            Allowed::VictimFreeTier => Reason::FreeTier,
            Allowed::VictimOverBudget => Reason::OverBudget,
            Allowed::Rebalance { .. } => Reason::Rebalance,
        }
    }
}

/// `POST /v1/preemptions` body. Victim facts are optional: the ledger fills them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPreemption {
    pub victim: u32,
    /// The victim's run (`restart_cnt` of the run that was lost).
    pub run: u32,
    #[serde(default)]
    pub preemptor: Option<u32>,
    pub reason: Reason,
    /// When the victim lost its GPUs (Unix seconds).
    pub at: i64,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Start of the lost run.
    #[serde(default)]
    pub start: Option<i64>,
}

/// `POST /v1/preemptions` answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Recorded {
    /// `false` when `(victim, run)` was already recorded (the first record wins).
    pub inserted: bool,
}

/// One recorded preemption.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub preemptor: Option<u32>,
    pub preemptor_account: Option<String>,
    pub reason: Reason,
    pub at: i64,
    pub gpus: u32,
    pub run_start: Option<i64>,
    /// GPU-hours of the lost run (GPUs x its length, unweighted).
    pub gpu_hours: f64,
    /// `plugin` or `drain`.
    pub source: String,
}

/// Per-account totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountLoss {
    pub account: String,
    pub preemptions: u64,
    pub gpu_hours_lost: f64,
    /// Preemptions by reason.
    pub by_reason: BTreeMap<String, u64>,
}

/// `GET /v1/preemptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptionReport {
    pub since: i64,
    pub rows: Vec<Preemption>,
    pub by_account: Vec<AccountLoss>,
}
