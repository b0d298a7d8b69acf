//! Grants and victims already allowed in the current period and not yet
//! reflected in the period state ([`InFlight`]), so that several preemptors of
//! one side do not each claim its whole deficit.

use super::jobs::{PendingJob, RunningJob, tidy};
use crate::fairshare::FairShare;

/// Preemptors granted victims and not running yet, so that several preemptors
/// of one side (in one scheduling pass, or while victims finish their GraceTime)
/// do not each claim its whole deficit. The plugin records a preemptor the first
/// time the callback allows it a victim (it cannot know which candidates Slurm
/// takes): conservative. The simulator starts a preemptor at once, so its list
/// lives for one pass.
///
/// It also counts the *victims* allowed and not yet requeued ([`InFlight::take`]):
/// the period state's holdings refresh once a second at best, so without them
/// two preemptors of one pass could each take a job of the same side, each
/// check seeing the side above its entitlement by one job,
/// and several preemptions of one pass could each pass the site cap. The
/// simulator takes none (its holdings are live).
/// Amounts are weighted GPUs, as the state's holdings.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct InFlight {
    /// (preemptor job, its leaf path, weighted GPUs).
    grants: Vec<(u32, Vec<usize>, f64)>,
    /// (victim job, its leaf path, weighted GPUs, work it loses in GPU-seconds).
    victims: Vec<(u32, Vec<usize>, f64, f64)>,
}

impl InFlight {
    /// Records that `p` (its leaf path `path`) was allowed to preempt.
    pub fn grant(&mut self, p: &PendingJob<'_>, fs: &FairShare) {
        if self.grants.iter().any(|g| g.0 == p.job_id) {
            return;
        }
        // Placed already (`PendingJob::leaf`, same snapshot): no name lookup.
        let node = match p.leaf {
            Some(n) if n < fs.nodes.len() => Some(n),
            _ => fs.place(p.account, p.user).map(|place| place.node),
        };
        if let Some(n) = node {
            self.grants.push((p.job_id, fs.path(n), p.weighted_gpus()));
        }
    }

    /// Weighted GPUs granted to preemptors under `side`, other than `except`.
    pub fn gpus_under(&self, side: usize, except: u32) -> f64 {
        tidy(
            self.grants
                .iter()
                .filter(|g| g.0 != except && g.1.contains(&side))
                .map(|g| g.2)
                .sum(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.grants.is_empty() && self.victims.is_empty()
    }

    /// Records that victim `v` was allowed to be preempted (losing
    /// `lost_gpu_secs`): until [`InFlight::retain_victims`] drops it, its
    /// GPUs count as already leaving its side, and it counts toward the
    /// site cap.
    pub fn take(&mut self, v: &RunningJob<'_>, fs: &FairShare, lost_gpu_secs: f64) {
        if self.victims.iter().any(|x| x.0 == v.job_id) {
            return;
        }
        let node = match v.leaf {
            Some(n) if n < fs.nodes.len() => Some(n),
            _ => fs.place(v.account, v.user).map(|p| p.node),
        };
        if let Some(n) = node {
            self.victims.push((
                v.job_id,
                fs.path(n),
                v.weighted_gpus(),
                lost_gpu_secs.max(0.0),
            ));
        }
    }

    /// Weighted GPUs of victims under `side` already allowed, other than `except`.
    pub fn victim_gpus_under(&self, side: usize, except: u32) -> f64 {
        tidy(
            self.victims
                .iter()
                .filter(|x| x.0 != except && x.1.contains(&side))
                .map(|x| x.2)
                .sum(),
        )
    }

    /// Victims allowed and their lost work (GPU-seconds), other than `except`.
    pub fn victims_total(&self, except: u32) -> (u32, f64) {
        self.victims
            .iter()
            .filter(|x| x.0 != except)
            .fold((0, 0.0), |(n, l), x| (n + 1, l + x.3))
    }

    /// Job ids of the victims recorded.
    pub fn victims(&self) -> impl Iterator<Item = u32> + '_ {
        self.victims.iter().map(|x| x.0)
    }

    /// Keeps the victims `keep` says are still on their way out (running,
    /// not yet requeued, not yet in the preemption record).
    pub fn retain_victims(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.victims.retain(|x| keep(x.0));
    }

    /// Keeps the grants whose preemptor `keep` says is still waiting (pending, not
    /// running): once it runs, its GPUs are in the state's holdings.
    pub fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        self.grants.retain(|g| keep(g.0));
    }
}
