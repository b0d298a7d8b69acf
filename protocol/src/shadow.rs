//! Shadow mode on the wire: the pending queue `site_factor/budget` reports in
//! `mode=shadow` ([`QueueOrder`], the `queue` of a [`crate::JobSync`]: Slurm's
//! actual priority of each pending job beside the job's place in the budget
//! order), and what budgetd makes of it over the last window ([`ShadowReport`],
//! `GET /v1/shadow`, `budgetctl shadow`): how Slurm's order differs from the
//! budget order, the preemptions the cost-aware rule would have made, and each
//! team's entitlement shortfall against the rule's target.
//!
//! Compatibility: `queue` is left out of every sync but the one message that
//! carries it, which the plugin sends on its own after the pass's runs were
//! acknowledged (as the complete live set), so a budgetd of the previous
//! release, which refuses the field, refuses only that message and the ledger
//! is fed as before. A plugin of the previous release never sends it: budgetd
//! then records no order, and its report says so (`order.samples` 0).

use policy_core::Tier;
use serde::{Deserialize, Serialize};

use crate::why::PeerReason;

/// Route of the shadow report.
pub const ROUTE: &str = "/v1/shadow";

/// Most pending jobs one [`QueueOrder`] names (those of Slurm's highest
/// priorities): the front of the queue is where the two orders matter, and
/// the message stays under 1 MiB.
pub const MAX_QUEUE: usize = 5_000;

/// The pending queue at one pass: every pending, not held job (at most
/// [`MAX_QUEUE`]) with Slurm's priority and the job's budget placement.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueueOrder {
    /// Leaves of the snapshot's tree (a rank is `0..num_leaves`; an unplaced
    /// job has `num_leaves`).
    pub num_leaves: u32,
    pub jobs: Vec<QueuedJob>,
}

/// One pending job as Slurm and the budget order each place it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QueuedJob {
    pub job_id: u32,
    /// Slurm's priority (`job_record_t::priority`) at the pass.
    pub priority: u32,
    /// Its tier in the budget order.
    pub tier: Tier,
    /// Its rank within the tier (0: best), entitlement first.
    pub rank: u32,
}

/// `GET /v1/shadow`: shadow mode's findings from `since` to `at`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ShadowReport {
    pub since: i64,
    pub at: i64,
    pub order: OrderReport,
    /// The would-be preemptions of the window, oldest first (those the caller
    /// may see: the victim's or the preemptor's job).
    pub preemptions: Vec<WouldPreempt>,
    /// GPU-hours those preemptions would have destroyed.
    pub lost_gpu_hours: f64,
    /// Each team (account) the caller may read, in the tree's order.
    pub shortfall: Vec<TeamShortfall>,
}

/// How Slurm's order of the pending jobs differs from the budget order.
///
/// A pair counts when the budget order puts one job strictly before the other
/// (a better tier, or a better rank in the same tier); it is discordant when
/// Slurm's priority puts them the other way, tied when Slurm gives both the
/// same priority. Pairs of the same tier and rank are left to the site's own
/// factors and not counted.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OrderReport {
    /// Queue samples recorded in the window.
    pub samples: u64,
    /// The latest sample (`None`: none in the window).
    pub latest_at: Option<i64>,
    /// Pending jobs of the latest sample.
    pub pending: u32,
    /// Pairs the budget order orders, of the latest sample.
    pub pairs: u64,
    /// Of those, the pairs Slurm orders the other way.
    pub discordant: u64,
    /// Of those, the pairs Slurm ties.
    pub slurm_ties: u64,
    /// Kendall's tau-b between Slurm's priorities and the budget order of the
    /// latest sample (1: the same order, -1: reversed; `None`: under two
    /// jobs, or one side all tied).
    pub tau: Option<f64>,
    /// Mean tau-b over the window's samples that have one.
    pub mean_tau: Option<f64>,
    /// Mean share of discordant pairs over the window's samples with pairs.
    pub mean_discordant_share: Option<f64>,
    /// The jobs of the latest sample whose place differs most between the two
    /// orders, furthest first (those the caller may see).
    pub furthest: Vec<OrderGap>,
}

/// One pending job's place in both orders (1 = first).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OrderGap {
    pub job_id: u32,
    pub account: String,
    pub user: String,
    pub priority: u32,
    pub tier: Tier,
    pub rank: u32,
    pub slurm_position: u32,
    pub budget_position: u32,
}

/// A preemption the rule would have made, recorded once per victim run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WouldPreempt {
    pub at: i64,
    pub victim: u32,
    pub victim_run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub preemptor: u32,
    pub preemptor_account: String,
    pub preemptor_user: String,
    /// The work the victim would have lost (since its last checkpoint, or its
    /// whole run), GPU-hours.
    pub lost_gpu_hours: f64,
    pub reason: PeerReason,
}

/// One team's entitlement against what it holds, in weighted GPUs.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TeamShortfall {
    pub account: String,
    /// Latest sample: GPUs its running jobs hold (Slurm's decisions, as they are).
    pub held_gpus: f64,
    /// Its entitled GPUs.
    pub entitled_gpus: f64,
    /// GPUs its running and pending jobs ask for.
    pub demand_gpus: f64,
    /// What the rule would target: `min(entitled, demand)`.
    pub target_gpus: f64,
    /// `target - held`, floored at 0.
    pub shortfall_gpus: f64,
    /// The shortfall over the window, GPU-hours (between samples at most
    /// [`SAMPLE_GAP_SECS`] apart; a longer gap counts that long).
    pub shortfall_gpu_hours: f64,
}

/// Longest interval one shortfall sample stands for.
pub const SAMPLE_GAP_SECS: i64 = 600;
