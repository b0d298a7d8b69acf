//! `multifactor-qos`: Slurm's own answer to "a protected window, then
//! preemptible", as a site would configure it without this product:
//! `priority/multifactor` with Fair Tree ([`super::fair_tree`]), and
//! `PreemptType=preempt/qos`, `PreemptMode=REQUEUE`, with two QOS:
//!
//! ```text
//! sacctmgr add qos scavenger Priority=0
//! sacctmgr add qos normal Priority=1000 Preempt=scavenger
//! # PreemptExemptTime: each job's min_runtime (below)
//! ```
//!
//! The model and why a real site does the same:
//! - **Which QOS a job gets.** A job goes to `normal` when its team's account
//!   is at or under its share at submit time (the account's Fair Tree Level
//!   Fairshare, `sshare -l`'s "Level FS", >= 1, as of the last
//!   `PriorityCalcPeriod`; before the first one every team is under), else to
//!   `scavenger`. Slurm has no built-in "over your share, so preemptible"
//!   switch: sites get it from a `job_submit` script or a cron job that reads
//!   `sshare` and sets each account's default QOS. Deciding at each
//!   submission from the latest calculation is the most responsive form of
//!   that, so it favours the baseline. A job keeps its QOS when requeued, as
//!   Slurm keeps it; no one moves pending jobs between QOS.
//! - **Priority.** `PriorityWeightQOS` dominates: every `normal` job ranks
//!   above every `scavenger` job (what a scavenger QOS is for: it runs on
//!   what `normal` leaves), then the Fair Tree factor, then age (ties by submit
//!   time), as the `fair-tree` baseline.
//! - **Who may preempt whom.** `normal` preempts `scavenger` (`Preempt=` on
//!   the QOS), any team's, the preemptor's own included, as `preempt/qos`
//!   reads QOS and not accounts; nothing preempts `normal`, and `scavenger`
//!   preempts nothing.
//! - **PreemptExemptTime.** A job runs at least its `min_runtime` before it
//!   may be preempted: the same windows the product's rule protects (the
//!   trace's or the seeded `--min-runtime-rule`), so both protect the same
//!   work. Slurm sets the exempt time per QOS (or globally), not per job; a
//!   site would need one QOS per window length to match, so the per-job window
//!   is the baseline at its most careful, never worse for it.
//! - **Victims.** `preempt/qos` orders candidates by QOS priority then node
//!   count (`preempt_p_get_prio`: `QOS priority << 16 + nodes`), fewest
//!   nodes first (all candidates are `scavenger`); Slurm removes them in that
//!   order until the job fits and preempts only when it can then start (the
//!   engine's mechanics). Victims are requeued (`PreemptMode=REQUEUE`, no
//!   `GraceTime`) and lose the work since their last checkpoint.

use std::collections::BTreeSet;

use super::fair_tree::FairTreeState;
use super::{Candidate, PolicyKind, SchedPolicy};
use crate::config::SimConfig;
use crate::view::{EngineView, JobInit, TeamInfo};

/// Class of a job: `leaf * 2 + QOS`.
const SCAVENGER: u32 = 0;
const NORMAL: u32 = 1;

/// The QOS factor's weight: above every Fair Tree rank (at most `u32::MAX`).
const QOS_WEIGHT: u64 = 1 << 32;

pub(crate) struct MultifactorQos {
    state: FairTreeState,
    leaves: usize,
    /// Running `scavenger` jobs past their `PreemptExemptTime`.
    exposed: BTreeSet<u32>,
}

impl MultifactorQos {
    pub fn new(cfg: &SimConfig, teams: &[TeamInfo], leaves: &[(String, String)]) -> Self {
        MultifactorQos {
            state: FairTreeState::new(cfg, teams, leaves),
            leaves: leaves.len(),
            exposed: BTreeSet::new(),
        }
    }

    fn scavenger(sim: &EngineView<'_>, j: u32) -> bool {
        sim.jobs[j as usize].class % 2 == SCAVENGER
    }
}

impl SchedPolicy for MultifactorQos {
    fn kind(&self) -> PolicyKind {
        PolicyKind::MultifactorQos
    }

    fn num_classes(&self) -> usize {
        self.leaves * 2
    }

    fn initial_priorities(&self) -> Vec<u64> {
        (0..self.leaves * 2)
            .map(|c| {
                if c % 2 == NORMAL as usize {
                    QOS_WEIGHT
                } else {
                    0
                }
            })
            .collect()
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        (job.leaf * 2 + NORMAL, false, "normal")
    }

    fn submit_class(&mut self, sim: &EngineView<'_>, j: u32) -> Option<u32> {
        let job = &sim.jobs[j as usize];
        let under = self
            .state
            .team_level_fs(job.team)
            .is_none_or(|lf| lf >= 1.0);
        Some(job.leaf * 2 + if under { NORMAL } else { SCAVENGER })
    }

    fn recompute(&mut self, sim: &EngineView<'_>, _window_usage: &[i64], class_prio: &mut [u64]) {
        self.state.recompute(sim);
        for (c, p) in class_prio.iter_mut().enumerate() {
            let rank = u64::from(self.state.leaf_rank((c / 2) as u32));
            *p = if c % 2 == NORMAL as usize {
                QOS_WEIGHT + rank
            } else {
                rank
            };
        }
    }

    fn wait_class(&self, sim: &EngineView<'_>, j: u32) -> Option<&'static str> {
        Some(if Self::scavenger(sim, j) {
            "scavenger"
        } else {
            "normal"
        })
    }

    fn on_start(&mut self, sim: &EngineView<'_>, j: u32) {
        if Self::scavenger(sim, j) && sim.jobs[j as usize].min_runtime <= 0 {
            self.exposed.insert(j);
        }
    }

    fn on_stop(&mut self, _sim: &EngineView<'_>, j: u32) {
        self.exposed.remove(&j);
    }

    fn on_exposed(&mut self, sim: &EngineView<'_>, j: u32) {
        if Self::scavenger(sim, j) {
            self.exposed.insert(j);
        }
    }

    fn preempts(&self) -> bool {
        true
    }

    fn has_candidates(&self) -> bool {
        !self.exposed.is_empty()
    }

    fn candidates(&mut self, sim: &EngineView<'_>, p: u32) -> Vec<Candidate> {
        if Self::scavenger(sim, p) {
            return Vec::new();
        }
        self.exposed
            .iter()
            .map(|&v| Candidate {
                job: v,
                // Same QOS for all: the node count decides, fewest first.
                order: u32::try_from(sim.jobs[v as usize].alloc.len()).unwrap_or(u32::MAX),
                reason: 1,
            })
            .collect()
    }
}
