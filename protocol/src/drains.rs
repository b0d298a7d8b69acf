//! Maintenance drains (`/v1/drains`): the request, and per drained node its
//! Slurm state, the jobs still holding it and when and how each leaves it
//! (requeued by the drain, or running to its time limit where its partition
//! has `PreemptMode=OFF`).

use serde::{Deserialize, Serialize};

/// `POST /v1/drains` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// Slurm hostlist, e.g. `gpu[1-2]`.
    pub nodes: String,
    pub reason: String,
}

/// How a job holding a drained node leaves it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Leaves {
    /// The drain requeues it: at once for free tier, else when its protected
    /// window ends. (The default: what a budgetd that predates `leaves` meant.)
    #[default]
    Requeue,
    /// Nothing requeues it (its partition has `PreemptMode=OFF`, the site's
    /// "never preempted", maintenance included): it runs to its end, at the
    /// latest its time limit (Slurm's `EndTime`).
    TimeLimit,
}

/// A job holding a drained node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldingJob {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub free_tier: bool,
    pub start: Option<i64>,
    /// When it leaves the node: with `leaves: requeue`, when the drain
    /// requeues it (now for free tier, else its window end); with
    /// `leaves: time_limit`, its end time (Slurm's `EndTime`: start plus time
    /// limit). The name predates `leaves` and is kept for older readers.
    pub requeue_at: i64,
    /// Requeued by the drain, or running to its time limit.
    #[serde(default)]
    pub leaves: Leaves,
    /// The job's partition as Slurm names it (empty from a budgetd that
    /// predates this field).
    #[serde(default)]
    pub partition: String,
}

/// `GET /v1/drains` item (and `POST /v1/drains` answer item).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStatus {
    pub node: String,
    pub reason: String,
    pub since: i64,
    pub actor: String,
    /// Slurm's state now (`MIXED+DRAIN`, `IDLE+DRAIN` = drained, ...).
    pub slurm_state: String,
    /// No job left on the node.
    pub empty: bool,
    /// When the node will be empty: the latest instant one of its jobs
    /// leaves (`HoldingJob::requeue_at`), now when none holds it.
    pub empty_at: i64,
    pub jobs: Vec<HoldingJob>,
}

/// `DELETE /v1/drains/{nodes}` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undrained {
    /// The nodes returned to service.
    pub undrained: Vec<String>,
}
