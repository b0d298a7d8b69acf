//! Maintenance drains (`/v1/drains`): the request, and per drained node its
//! Slurm state, the jobs still holding it and when each will be requeued.

use serde::{Deserialize, Serialize};

/// `POST /v1/drains` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// Slurm hostlist, e.g. `gpu[1-2]`.
    pub nodes: String,
    pub reason: String,
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
    /// When the drain requeues it: now for free tier, else its window end.
    pub requeue_at: i64,
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
    /// When the node will be empty: the latest requeue instant of its jobs.
    pub empty_at: i64,
    pub jobs: Vec<HoldingJob>,
}

/// `DELETE /v1/drains/{nodes}` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Undrained {
    /// The nodes returned to service.
    pub undrained: Vec<String>,
}
