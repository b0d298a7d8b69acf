//! What a replay is configured with besides the trace and the policy: [`SimConfig`]
//! (cluster, window, recalculation period, the rule's knobs, time limits, backfill,
//! sampling, seed), how minimum runtimes are drawn ([`MinRuntimeRule`]) and what a
//! blocked job's reservation holds ([`Backfill`]). Read by the engine and by the
//! policies; re-exported from [`crate::engine`].

use policy_core::rebalance::RebalancePolicy;

use crate::limits::TimeLimitModel;

/// How a job's minimum runtime is chosen when the trace does not declare one.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MinRuntimeRule {
    /// The same for every job, whatever its duration, as the product gives a
    /// job that declares none (`default_min_runtime_secs`).
    Fixed(i64),
    /// `min(duration, cap)`.
    Cap(i64),
    /// `fraction x duration`, rounded down.
    Fraction(f64),
}

impl MinRuntimeRule {
    /// `fixed:1h` (1 h for every job), `cap:2h` / `2h` (a duration:
    /// min(duration, 2h)), `frac:0.25`, `none` (= cap 0).
    pub fn parse(s: &str) -> Result<MinRuntimeRule, String> {
        let s = s.trim();
        if s == "none" {
            return Ok(MinRuntimeRule::Cap(0));
        }
        if let Some(d) = s.strip_prefix("fixed:") {
            return policy_core::parse_duration(d)
                .map(MinRuntimeRule::Fixed)
                .map_err(|e| format!("min-runtime rule {s:?}: fixed:DURATION ({e})"));
        }
        if let Some(f) = s.strip_prefix("frac:") {
            return match f.parse::<f64>() {
                Ok(v) if (0.0..=1.0).contains(&v) => Ok(MinRuntimeRule::Fraction(v)),
                _ => Err(format!(
                    "min-runtime rule {s:?}: fraction must be a number in [0, 1]"
                )),
            };
        }
        let d = s.strip_prefix("cap:").unwrap_or(s);
        policy_core::parse_duration(d)
            .map(MinRuntimeRule::Cap)
            .map_err(|e| {
                format!(
                    "min-runtime rule {s:?}: expected fixed:DURATION, cap:DURATION, DURATION, frac:F or none ({e})"
                )
            })
    }

    pub fn apply(&self, duration: i64) -> i64 {
        match *self {
            MinRuntimeRule::Fixed(c) => c,
            MinRuntimeRule::Cap(c) => duration.min(c),
            MinRuntimeRule::Fraction(f) => (duration as f64 * f).floor() as i64,
        }
    }

    pub fn describe(&self) -> String {
        match *self {
            MinRuntimeRule::Fixed(c) => {
                format!("{} for every job", policy_core::format_duration(c))
            }
            MinRuntimeRule::Cap(0) => "none (0)".to_string(),
            MinRuntimeRule::Cap(c) => format!("min(duration, {})", policy_core::format_duration(c)),
            MinRuntimeRule::Fraction(f) => format!("{f} x duration"),
        }
    }
}

/// The min_runtime the product gives a job that declares none: `protocol`'s
/// `Policy::default().default_min_runtime_secs` (1 h), which the plugins
/// apply through `policy_core::contract::effective_contract`. The replay's
/// default, so that the rule is judged with the protection it really gives
/// (not `min(duration, cap)`, which would tell it short jobs' true ends).
pub const PRODUCT_DEFAULT_MIN_RUNTIME: i64 = 3600;

/// Everything a replay needs besides the trace and the policy.
#[derive(Debug, Clone)]
pub struct SimConfig {
    pub nodes: u32,
    pub gpus_per_node: u32,
    /// Sliding window length (seconds).
    pub window: i64,
    /// Priority / fair-share recalculation period (seconds).
    pub recalc: i64,
    /// Ratio hysteresis of the old rule (`budget-v1`).
    pub hysteresis: f64,
    /// Knobs of the cost-aware rule (`budget`).
    pub rule: RebalancePolicy,
    /// Checkpoint interval in seconds for jobs whose trace declares none; 0: no
    /// checkpoints (a preempted run loses all its work). Jobs declare what they keep.
    pub checkpoint: i64,
    pub min_runtime: MinRuntimeRule,
    /// Requested time limits.
    pub time_limits: TimeLimitModel,
    /// The partition's maximum time limit (seconds).
    pub max_time_limit: i64,
    /// Pending jobs examined per scheduling pass.
    pub backfill_depth: usize,
    /// What the top blocked job's reservation holds ([`Backfill`]).
    pub backfill: Backfill,
    /// Blocked jobs per pass that hold nodes with `Backfill::Nodes`
    /// ([`ALL_RESERVATIONS`], the default: every blocked job the pass examines,
    /// as Slurm's backfill plans them; 1: EASY, the first blocked job only).
    /// Each later one is planned on the nodes the earlier ones do not hold.
    pub backfill_reservations: usize,
    /// How far ahead a reservation may be planned (seconds; Slurm's
    /// `bf_window`): a blocked job that cannot start within it holds no
    /// nodes. `Backfill::Nodes` only.
    pub backfill_window: i64,
    /// Seconds between backfill passes (Slurm's `bf_interval`): in between,
    /// each event runs only the main scheduler, which starts jobs in priority
    /// order and stops at the first that cannot start. 0: every pass is a
    /// backfill pass (the engine's older model).
    pub bf_interval: i64,
    /// Seconds a requeued (preempted) job waits before it is eligible again
    /// ([`DEFAULT_REQUEUE_DELAY`]); 0: at once.
    pub requeue_delay: i64,
    /// Preemption attempts per scheduling pass.
    pub preempt_attempts: usize,
    /// Metric sample period (seconds).
    pub sample_every: i64,
    pub decay_half_life: i64,
    pub seed: u64,
    /// Fraction of jobs drawn (by seed) into the free tier, besides the trace's `free` column.
    pub free_fraction: f64,
    /// Check the incremental window usage against `policy_core::window_usage`
    /// at every recalculation (slow: tests and small traces).
    pub verify_window: bool,
    /// Count why the rule refused each (pending, running) pair it was asked
    /// about and how each preemption attempt ended ([`crate::metrics::Refusals`]),
    /// within `[from, until)` of simulated time; `None`: count nothing.
    pub count_refusals: Option<(i64, i64)>,
    /// Simulated time at which the replay gives up (seconds since the first
    /// submission). Without checkpoints, rebalancing can requeue a long job
    /// forever (each run is preempted right after its window and loses all its
    /// work); the replay then stops here and reports the unfinished jobs.
    pub horizon: i64,
}

/// `SimConfig::backfill_reservations` for "every blocked job the pass
/// examines" (Slurm's backfill; bounded by `backfill_depth`).
pub const ALL_RESERVATIONS: usize = usize::MAX;

/// The backfill window the engine models by default: 7 days, the partition's
/// maximum time limit, as `slurm-conf/slurm.conf.in` sets `bf_window` (Slurm's
/// own default is one day; its documentation advises a window at least as
/// long as the longest time limit, so that long jobs are not starved).
pub const DEFAULT_BACKFILL_WINDOW: i64 = 7 * 86_400;

/// Slurm's default `bf_interval` (`BACKFILL_INTERVAL` in
/// `plugins/sched/backfill/backfill.c`). The testbed's `slurm.conf.in` sets 5 s
/// to keep its tests fast; a site keeps the default or raises it.
pub const DEFAULT_BF_INTERVAL: i64 = 30;

/// How long a requeued job waits before it may start again: Slurm's
/// `batch_requeue_fini` (`slurmctld/job_mgr.c`) sets its begin time to now
/// plus the credential lifetime plus one second, and the lifetime defaults to
/// 120 s (`DEFAULT_EXPIRATION_WINDOW`, `common/slurm_cred.c`;
/// `AuthInfo=cred_expire=` changes it; the testbed sets 5).
pub const DEFAULT_REQUEUE_DELAY: i64 = 121;

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 1,
            gpus_per_node: 8,
            window: policy_core::DEFAULT_WINDOW_SECS,
            recalc: 300,
            hysteresis: crate::policy::budget_v1::PreemptPolicy::default().hysteresis,
            rule: RebalancePolicy::default(),
            checkpoint: 0,
            min_runtime: MinRuntimeRule::Fixed(PRODUCT_DEFAULT_MIN_RUNTIME),
            time_limits: TimeLimitModel::Exact,
            max_time_limit: 7 * 86_400,
            backfill_depth: 200,
            backfill: Backfill::Nodes,
            backfill_reservations: ALL_RESERVATIONS,
            backfill_window: DEFAULT_BACKFILL_WINDOW,
            bf_interval: DEFAULT_BF_INTERVAL,
            requeue_delay: DEFAULT_REQUEUE_DELAY,
            preempt_attempts: 16,
            sample_every: 3600,
            decay_half_life: 7 * 86_400,
            seed: 1,
            count_refusals: None,
            free_fraction: 0.0,
            verify_window: false,
            horizon: i64::MAX,
        }
    }
}

/// What the reservation of a blocked job holds (`--backfill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Backfill {
    /// Slurm's `sched/backfill`: the blocked job's start is planned on nodes
    /// (the running jobs' time-limit ends, node by node), and the nodes it
    /// will start on are held from then on: a later job may use a held node
    /// only if its limit ends before the planned start.
    #[default]
    Nodes,
    /// GPU counts only (the engine's older model, kept to reproduce its
    /// figures): a later job may
    /// start if its limit ends before the shadow time or it takes no more than
    /// the GPUs left over at the shadow time, on any node; node fragmentation
    /// at the shadow time is ignored, so a multi-node job can be delayed
    /// indefinitely by small jobs that land on the nodes it waits for.
    Gpus,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_runtime_rules() {
        assert_eq!(
            MinRuntimeRule::parse("2h").map(|r| r.apply(10_000)),
            Ok(7_200)
        );
        assert_eq!(MinRuntimeRule::parse("2h").map(|r| r.apply(600)), Ok(600));
        assert_eq!(
            MinRuntimeRule::parse("frac:0.5").map(|r| r.apply(601)),
            Ok(300)
        );
        assert_eq!(MinRuntimeRule::parse("none").map(|r| r.apply(601)), Ok(0));
        // The product's default: the same for a 10-minute job as for a long one.
        let fixed = MinRuntimeRule::parse("fixed:1h");
        assert_eq!(fixed, Ok(MinRuntimeRule::Fixed(3600)));
        assert_eq!(
            fixed.map(|r| (r.apply(600), r.apply(10_000))),
            Ok((3600, 3600))
        );
        assert_eq!(
            SimConfig::default().min_runtime,
            MinRuntimeRule::Fixed(PRODUCT_DEFAULT_MIN_RUNTIME)
        );
        assert!(MinRuntimeRule::parse("fixed:").is_err());
        assert!(MinRuntimeRule::parse("2x").is_err());
    }
}
