//! Idle ("squatting") detection: how long each GPU held by a Slurm job has
//! been below the utilisation threshold, over successive samples.
//!
//! A GPU counts as idle-while-held when at least one Slurm job process is on
//! it and its utilisation is at or below the threshold. Any busy sample, or a
//! sample with no job on the GPU, resets its clock. The service decides what
//! "too long" is (`Policy::idle_threshold_secs`) and flags the job.

use std::collections::HashMap;

/// Tracks idle streaks per GPU (by UUID, stable across re-enumeration).
#[derive(Debug, Clone)]
pub struct IdleTracker {
    /// Utilisation at or below this percentage is idle.
    threshold_pct: u32,
    since: HashMap<String, i64>,
}

impl IdleTracker {
    pub fn new(threshold_pct: u32) -> Self {
        Self {
            threshold_pct,
            since: HashMap::new(),
        }
    }

    /// Records one sample of one GPU at `now`; returns its idle streak in seconds.
    pub fn observe(&mut self, uuid: &str, util_pct: u32, held_by_job: bool, now: i64) -> i64 {
        if held_by_job && util_pct <= self.threshold_pct {
            let start = *self.since.entry(uuid.to_string()).or_insert(now);
            (now - start).max(0)
        } else {
            self.since.remove(uuid);
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streak_grows_while_idle_and_resets_on_work_or_release() {
        let mut t = IdleTracker::new(5);
        assert_eq!(t.observe("g0", 0, true, 100), 0);
        assert_eq!(t.observe("g0", 3, true, 160), 60);
        assert_eq!(t.observe("g0", 80, true, 220), 0, "busy resets");
        assert_eq!(t.observe("g0", 0, true, 280), 0);
        assert_eq!(t.observe("g0", 0, true, 400), 120);
        assert_eq!(
            t.observe("g0", 0, false, 460),
            0,
            "no job on it: not squatting"
        );
        assert_eq!(
            t.observe("g1", 0, true, 460),
            0,
            "GPUs are tracked separately"
        );
    }
}
