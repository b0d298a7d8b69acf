//! Static priority: FIFO by a user-declared level (high/normal/low). Traces
//! carry none, so each job draws one from the seed: 80% high, 15% normal, 5%
//! low (priority inflation made nearly everything HIGH). Free-tier jobs are
//! low. Never preempts.

use super::{PolicyKind, SchedPolicy};
use crate::rng::{Purpose, unit};
use crate::view::{EngineView, JobInit};

pub struct StaticPriority {
    pub seed: u64,
}

impl SchedPolicy for StaticPriority {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Static
    }

    fn num_classes(&self) -> usize {
        3
    }

    fn initial_priorities(&self) -> Vec<u64> {
        vec![0, 1, 2]
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        let level = if job.free {
            0
        } else {
            let x = unit(self.seed, u64::from(job.index), Purpose::StaticPriority);
            if x < 0.80 {
                2
            } else if x < 0.95 {
                1
            } else {
                0
            }
        };
        (
            level,
            false,
            ["static_low", "static_normal", "static_high"][level as usize],
        )
    }

    fn recompute(&mut self, _sim: &EngineView<'_>, _window_usage: &[i64], _class_prio: &mut [u64]) {
    }
}
