//! Slurm's classic fair share at team level: usage decayed with a half-life
//! (`decay_half_life`, 7 days), factor `2^(-U/S)` (U: the team's share of
//! decayed usage, S: its share of allocations), then age. Never preempts (as
//! Slurm's `priority/multifactor` with `PreemptType=preempt/none`).
//!
//! [`DecayedUsage`] is the decay itself (Slurm's `PriorityDecayHalfLife`),
//! shared with the Fair Tree baselines ([`super::fair_tree`]).

use super::{PolicyKind, SchedPolicy};
use crate::config::SimConfig;
use crate::view::{EngineView, JobInit};

/// Usage decayed with a half-life, as Slurm's `PriorityDecayHalfLife`: at each
/// recalculation the usage so far is multiplied by `0.5^(dt / half-life)` and
/// the GPU-seconds charged since the previous one are added.
pub(crate) struct DecayedUsage {
    half_life: i64,
    /// Decayed GPU-seconds of each entry.
    pub usage: Vec<f64>,
    last_cum: Vec<i64>,
    last_t: i64,
}

impl DecayedUsage {
    pub fn new(half_life: i64, entries: usize) -> Self {
        DecayedUsage {
            half_life,
            usage: vec![0.0; entries],
            last_cum: vec![0; entries],
            last_t: 0,
        }
    }

    /// Decays to `now` and adds what each entry's cumulative charged
    /// GPU-seconds (`cum`, one per entry) grew by since the previous call.
    pub fn advance(&mut self, now: i64, cum: Vec<i64>) {
        let dt = (now - self.last_t) as f64;
        let factor = 0.5f64.powf(dt / self.half_life.max(1) as f64);
        for (t, c) in cum.iter().enumerate() {
            self.usage[t] = self.usage[t] * factor + (c - self.last_cum[t]) as f64;
        }
        self.last_cum = cum;
        self.last_t = now;
    }
}

pub struct DecayedFairShare {
    usage: DecayedUsage,
}

impl DecayedFairShare {
    pub fn new(cfg: &SimConfig, teams: usize) -> Self {
        DecayedFairShare {
            usage: DecayedUsage::new(cfg.decay_half_life, teams),
        }
    }
}

impl SchedPolicy for DecayedFairShare {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Decay
    }

    fn num_classes(&self) -> usize {
        self.usage.usage.len()
    }

    fn initial_priorities(&self) -> Vec<u64> {
        vec![0; self.usage.usage.len()]
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        (job.team, false, "all")
    }

    fn recompute(&mut self, sim: &EngineView<'_>, _window_usage: &[i64], class_prio: &mut [u64]) {
        self.usage.advance(sim.now, sim.team_cumulative(sim.now));
        let usage = &self.usage.usage;
        let total_u: f64 = usage.iter().sum();
        let total_s: f64 = sim.teams.iter().map(|t| t.gpus).sum();
        for (t, team) in sim.teams.iter().enumerate() {
            let u = if total_u > 0.0 {
                usage[t] / total_u
            } else {
                0.0
            };
            let s = if total_s > 0.0 {
                team.gpus / total_s
            } else {
                0.0
            };
            let f = if s > 0.0 { 2f64.powf(-u / s) } else { 0.0 };
            class_prio[t] = (f * 1e9).round() as u64;
        }
    }
}
