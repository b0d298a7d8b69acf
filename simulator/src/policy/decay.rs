//! Slurm's classic fair share at team level: usage decayed with a half-life
//! (`decay_half_life`, 7 days), factor `2^(-U/S)` (U: the team's share of
//! decayed usage, S: its share of allocations), then age. Never preempts (as
//! Slurm's `priority/multifactor` with `PreemptType=preempt/none`).

use super::{PolicyKind, SchedPolicy};
use crate::config::SimConfig;
use crate::view::{EngineView, JobInit};

pub struct DecayedFairShare {
    half_life: i64,
    usage: Vec<f64>,
    last_cum: Vec<i64>,
    last_t: i64,
}

impl DecayedFairShare {
    pub fn new(cfg: &SimConfig, teams: usize) -> Self {
        DecayedFairShare {
            half_life: cfg.decay_half_life,
            usage: vec![0.0; teams],
            last_cum: vec![0; teams],
            last_t: 0,
        }
    }
}

impl SchedPolicy for DecayedFairShare {
    fn kind(&self) -> PolicyKind {
        PolicyKind::Decay
    }

    fn num_classes(&self) -> usize {
        self.usage.len()
    }

    fn initial_priorities(&self) -> Vec<u64> {
        vec![0; self.usage.len()]
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        (job.team, false, "all")
    }

    fn recompute(&mut self, sim: &EngineView<'_>, _window_usage: &[i64], class_prio: &mut [u64]) {
        let now = sim.now;
        let cum = sim.team_cumulative(now);
        let dt = (now - self.last_t) as f64;
        let factor = 0.5f64.powf(dt / self.half_life.max(1) as f64);
        for (t, c) in cum.iter().enumerate() {
            self.usage[t] = self.usage[t] * factor + (c - self.last_cum[t]) as f64;
        }
        self.last_cum = cum;
        self.last_t = now;
        let total_u: f64 = self.usage.iter().sum();
        let total_s: f64 = sim.teams.iter().map(|t| t.gpus).sum();
        for (t, team) in sim.teams.iter().enumerate() {
            let u = if total_u > 0.0 {
                self.usage[t] / total_u
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
