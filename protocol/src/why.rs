//! The explanation of one job (`GET /v1/jobs/{id}/why`, `budgetctl why`):
//! tier, rank path, priority and its parts, protection, whom it may preempt
//! or be preempted by and when, a drain's requeue time, an idle flag, and
//! what happened to its previous run.

use policy_core::fairshare::Tier;
use policy_core::preempt::Allowed;
use policy_core::priority::PriorityParts;
use serde::{Deserialize, Serialize};

use crate::RunState;
use crate::idle::FlaggedJob;
use crate::preemption::Preemption;

/// One step of a job's rank path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathStep {
    /// Account name, or `account/user` for a user node.
    pub node: String,
    pub allocation_gpu_hours: f64,
    pub usage_gpu_hours: f64,
    pub ratio: f64,
    /// Rank among siblings, 1 = lowest ratio.
    pub rank: u32,
    pub tier: Tier,
}

/// Another job the explained job could preempt, or be preempted by, now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptPeer {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Why policy_core allows it.
    pub reason: Allowed,
}

/// A job another may preempt, and from when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// First instant the rule allows it (now, or the victim's window end).
    pub at: i64,
    pub reason: Allowed,
}

/// The timing part of `why` (docs/design.md §6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhyPreemption {
    /// Pending job: running jobs it may preempt, each at the instant its window ends
    /// (the rule evaluated then, with today's fair share and holdings).
    pub may_preempt: Vec<Outlook>,
    /// Running job: pending jobs that may take it once its window is over.
    pub may_be_taken_by: Vec<Outlook>,
    /// Running job on a drained node: when the drain requeues it.
    pub drain_requeue_at: Option<i64>,
    /// Requeued (or re-run) job: the preemption of its previous run.
    pub preempted: Option<Preemption>,
}

/// `GET /v1/jobs/{id}/why`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Why {
    pub at: i64,
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub state: RunState,
    pub gpus: u32,
    pub gpu_type: Option<String>,
    pub free_tier: bool,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub min_runtime_secs: i64,
    /// End of the protected window of a running run (`null` for free-tier
    /// and not-running runs).
    pub protected_until: Option<i64>,
    pub protected_now: bool,
    pub tier: Tier,
    /// Global rank (1 = best) of the job's leaf; `null` if its account is
    /// not in the tree.
    pub rank: Option<u32>,
    pub num_leaves: u32,
    pub fair_share_factor: f64,
    /// Slurm priority as the plugin computes it, and its parts.
    pub priority: u32,
    pub priority_parts: PriorityParts,
    /// From the root down to the job's leaf.
    pub path: Vec<PathStep>,
    /// For a pending job: why it waits, in the cost-aware rule's words
    /// (`policy_core::rebalance::describe_wait`: "GPUs expected free at T from
    /// jobs A, B; no preemption needed" or "preempting job C: its window ended
    /// ..., least work lost"); `null` for other states.
    #[serde(default)]
    pub wait: Option<String>,
    /// For a pending job: running jobs it could preempt now.
    pub could_preempt: Vec<PreemptPeer>,
    /// For a running job: pending jobs that could preempt it now.
    pub preemptable_by: Vec<PreemptPeer>,
    /// When: whom a pending job may take and at what instant, who may take a
    /// running job after its window, a drain's requeue time, and who took the
    /// previous (or this requeued) run with its GPU-hours.
    pub preemption: WhyPreemption,
    /// Set when the job holds GPUs idle beyond the idle threshold now
    /// (docs/design.md §8).
    #[serde(default)]
    pub idle: Option<FlaggedJob>,
}
