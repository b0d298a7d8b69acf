//! What a policy sees of the replay ([`crate::policy::SchedPolicy`]'s hooks): the job
//! table ([`JobState`]), the teams ([`TeamInfo`]), a job as it is classified at load
//! ([`JobInit`]), and [`EngineView`], a read-only borrow of the engine's shared state
//! at one instant. The engine ([`crate::engine`]) owns and changes that state; the
//! policies depend on this module and never on the engine, so the two do not import
//! each other.

use std::collections::BTreeSet;

use crate::checker::RunRecord;
use crate::cluster::{Alloc, Cluster};
use crate::usage::SlidingUsage;

/// A team and its allocation.
#[derive(Debug, Clone, PartialEq)]
pub struct TeamInfo {
    pub name: String,
    /// Allocation in GPUs (allocation = GPUs x window).
    pub gpus: f64,
}

/// A job as the engine tracks it.
#[derive(Debug, Clone)]
pub(crate) struct JobState {
    pub leaf: u32,
    pub team: u32,
    pub class: u32,
    pub submit: i64,
    pub gpus: u32,
    pub duration: i64,
    pub min_runtime: i64,
    /// Free tier as the policy sees it (always false for baselines).
    pub free: bool,
    /// Checkpoint interval it keeps and declares (0: none).
    pub checkpoint: i64,
    /// Requested time limit; `None` with `exact` limits (each run: its remaining work).
    pub limit: Option<i64>,
    pub remaining: i64,
    /// Number of the current (or next) run; also the times it was requeued.
    pub run: u32,
    pub running: bool,
    pub done: bool,
    pub run_start: i64,
    /// End of the current run at its time limit.
    pub limit_end: i64,
    /// End of the current run when it completes (the engine's knowledge, never the policy's).
    pub true_end: i64,
    pub alloc: Alloc,
    pub first_start: Option<i64>,
    pub end: i64,
    pub wait_class: &'static str,
    pub preemptions: u32,
    /// Index of the open run in `runs`.
    pub open_run: usize,
}

impl JobState {
    /// Time limit of a run starting now.
    pub fn run_limit(&self) -> i64 {
        self.limit.unwrap_or(self.remaining)
    }
}

/// What a policy needs to know about a job to classify it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct JobInit {
    pub index: u32,
    pub leaf: u32,
    pub team: u32,
    /// The trace's free flag or the seed's free-tier draw.
    pub free: bool,
}

/// The engine's state that every policy may read: jobs, cluster, usage, running jobs.
/// Policies keep their own state ([`crate::policy::SchedPolicy`]); the class
/// priorities they set at a recalculation are handed to them apart.
pub(crate) struct EngineView<'c> {
    pub now: i64,
    pub jobs: &'c [JobState],
    /// `(team, user)` of each fair-share leaf.
    pub leaves: &'c [(String, String)],
    /// The team of each leaf.
    pub leaf_team: &'c [u32],
    pub teams: &'c [TeamInfo],
    pub cluster: &'c Cluster,
    /// Charged (non-free) usage per leaf.
    pub usage: &'c SlidingUsage,
    /// Running jobs by `(end at time limit, job)`.
    pub running_by_limit: &'c BTreeSet<(i64, u32)>,
    /// GPUs of pending non-free jobs per leaf.
    pub pending_gpus: &'c [u64],
    /// Every run so far (the open ones without an end).
    pub runs: &'c [RunRecord],
}

impl EngineView<'_> {
    /// Cumulative charged GPU-seconds of each team at `t` (>= the last change).
    pub fn team_cumulative(&self, t: i64) -> Vec<i64> {
        let mut out = vec![0i64; self.teams.len()];
        for (leaf, &team) in self.leaf_team.iter().enumerate() {
            out[team as usize] += self.usage.cumulative(leaf, t);
        }
        out
    }

    /// Cumulative charged GPU-seconds of each fair-share leaf at `t` (>= the last change).
    pub fn leaf_cumulative(&self, t: i64) -> Vec<i64> {
        (0..self.leaf_team.len())
            .map(|leaf| self.usage.cumulative(leaf, t))
            .collect()
    }
}
