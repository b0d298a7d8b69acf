//! A ledger as the plugins would have recorded it, for what-if tests and the
//! benchmark: jobs drawn per team (Poisson-like arrivals over the span, sizes
//! 1 to 16 GPUs, durations log-uniform around each team's offered load, time
//! limits by the `moderate` model, some checkpointing and free-tier jobs),
//! replayed through the engine with the cost-aware rule, and each run written
//! as a ledger row: requeued runs end at their preemption and the next run is
//! submitted then (Slurm sets a new submit time on requeue), runs open at the
//! end are running, jobs not started are pending.

use policy_core::rebalance::RebalancePolicy;

use super::{LedgerRun, RunStatus, replay_config};
use crate::engine::{PolicyKind, simulate};
use crate::limits::TimeLimitModel;
use crate::trace::JobSpec;

/// One team of a generated site.
#[derive(Debug, Clone)]
pub struct GenTeam {
    pub name: String,
    /// GPUs its allocation is worth (allocation = GPUs x window).
    pub allocation_gpus: f64,
    /// GPU-time it asks for, as a share of the cluster over the span.
    pub load: f64,
    pub users: u32,
}

/// What to generate.
#[derive(Debug, Clone)]
pub struct GenSpec {
    pub teams: Vec<GenTeam>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// The ledger covers `[since, until]` (Unix seconds).
    pub since: i64,
    pub until: i64,
    /// Jobs over all teams.
    pub jobs: usize,
    pub window_secs: i64,
    pub rule: RebalancePolicy,
    pub seed: u64,
}

/// SplitMix64: a deterministic draw in [0, 1) per (seed, job, purpose).
fn draw(seed: u64, job: u64, purpose: u64) -> f64 {
    let mut z = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(job.wrapping_mul(0xBF58_476D_1CE4_E5B9))
        .wrapping_add(purpose.wrapping_mul(0x94D0_49BB_1331_11EB));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The jobs of `spec`, sorted by submit (relative to `since`).
pub fn jobs(spec: &GenSpec) -> Vec<JobSpec> {
    let span = (spec.until - spec.since).max(1);
    let cap = f64::from(spec.nodes) * f64::from(spec.gpus_per_node);
    let total_load: f64 = spec.teams.iter().map(|t| t.load).sum::<f64>().max(1e-9);
    let sizes = [1u32, 1, 1, 1, 2, 2, 4, 8, 8, 16];
    let limits = TimeLimitModel::OverRequest {
        lo: 1.0,
        hi: 3.0,
        max_share: 0.0,
    };
    let max_limit = 7 * 86_400;
    // Mean of a log-uniform factor on [0.1, 3]: the durations' factor has mean 1.
    let (lo, hi) = (0.1f64, 3.0f64);
    let mean_factor = (hi - lo) / (hi / lo).ln();
    let mut out = Vec::with_capacity(spec.jobs);
    let mut k: u64 = 0;
    for team in &spec.teams {
        let n = ((spec.jobs as f64) * team.load / total_load).round() as usize;
        if n == 0 {
            continue;
        }
        let per_job = team.load * cap * span as f64 / n as f64;
        for _ in 0..n {
            k += 1;
            let submit = (draw(spec.seed, k, 1) * span as f64) as i64;
            let mut gpus =
                sizes[(draw(spec.seed, k, 2) * sizes.len() as f64) as usize % sizes.len()];
            gpus = gpus.min(spec.nodes * spec.gpus_per_node).max(1);
            let f = (lo.ln() + draw(spec.seed, k, 3) * (hi.ln() - lo.ln())).exp() / mean_factor;
            let duration = ((per_job / f64::from(gpus)) * f).clamp(60.0, 6.0 * 86_400.0) as i64;
            let user = (draw(spec.seed, k, 4) * f64::from(team.users.max(1))) as u32;
            let free = draw(spec.seed, k, 5) < 0.05;
            let checkpoint = (draw(spec.seed, k, 6) < 0.3).then_some(1_800);
            out.push(JobSpec {
                id: String::new(),
                user: format!("{}-u{user}", team.name),
                team: team.name.clone(),
                submit,
                gpus,
                duration,
                min_runtime: Some(duration.min(3_600)),
                free,
                checkpoint,
                limit: limits.limit(spec.seed, k, duration, max_limit),
            });
        }
    }
    out.sort_by_key(|j| j.submit);
    for (i, j) in out.iter_mut().enumerate() {
        j.id = (i + 1).to_string();
    }
    out
}

/// The ledger of `spec`: its jobs replayed, every run a row (job ids 1, 2, ...
/// in submit order).
pub fn ledger(spec: &GenSpec) -> Vec<LedgerRun> {
    let specs = jobs(spec);
    let shares = spec
        .teams
        .iter()
        .map(|t| (t.name.clone(), t.allocation_gpus))
        .collect();
    let cfg = replay_config(
        spec.nodes,
        spec.gpus_per_node,
        spec.window_secs,
        spec.rule,
        spec.until - spec.since,
    );
    let o = simulate(&specs, &shares, PolicyKind::Budget, &cfg);
    let mut by_job: Vec<Vec<&crate::checker::RunRecord>> = vec![Vec::new(); specs.len()];
    for r in &o.runs {
        if let Some(v) = by_job.get_mut(r.job as usize) {
            v.push(r);
        }
    }
    let since = spec.since;
    let mut out = Vec::with_capacity(o.runs.len() + specs.len() / 10);
    for (i, (s, runs)) in specs.iter().zip(&by_job).enumerate() {
        let row = |run: u32, submit: i64, start, end, status| LedgerRun {
            job_id: (i + 1) as u32,
            run,
            rerun: 0,
            submit,
            account: s.team.clone(),
            user: s.user.clone(),
            gpus: s.gpus,
            start,
            end,
            status,
            free: s.free,
            min_runtime: s.min_runtime.unwrap_or(0),
            time_limit: s.limit,
            checkpoint: s.checkpoint,
        };
        let mut submit = since + s.submit;
        let mut next_run = 0;
        let mut done = false;
        for r in runs {
            let status = match (r.end, r.preempted) {
                (None, _) => RunStatus::Running,
                (Some(_), true) => RunStatus::Requeued,
                (Some(_), false) => RunStatus::Ended,
            };
            out.push(row(
                r.run,
                submit,
                Some(since + r.start),
                r.end.map(|e| since + e),
                status,
            ));
            done = status != RunStatus::Requeued;
            next_run = r.run + 1;
            if let Some(e) = r.end {
                submit = since + e;
            }
        }
        if !done {
            out.push(row(next_run, submit, None, None, RunStatus::Pending));
        }
    }
    out
}
