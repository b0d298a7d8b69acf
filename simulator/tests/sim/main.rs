//! The simulator's integration tests, one binary (the project's style):
//! - [`backfill`]: the backfill reservation, nodes held vs GPU counts, by hand,
//!   and the wait for the next backfill pass (`bf_interval`);
//! - [`baselines`]: the Slurm baselines (Fair Tree; multifactor with QOS
//!   preemption after `PreemptExemptTime`) on hand-worked schedules;
//! - [`cli_args`]: the command line parsed as `budget-sim` parses it;
//! - [`determinism`]: same inputs and seed, same bytes;
//! - [`late_oracle`]: `--late-oracle` reads the replay's own windows and
//!   changes nothing in it;
//! - [`hand_trace`]: a schedule worked out by hand, replayed through the old rule;
//! - [`requeue`]: a requeued job waits Slurm's requeue delay before it restarts;
//! - [`entitlement`]: the entitlement shortfall and work figures on a hand-computed trace;
//! - [`scenarios`]: the generated overload and arrival scenarios keep the goals'
//!   invariants under the cost-aware rule.

mod backfill;
mod baselines;
mod cli_args;
mod determinism;
mod entitlement;
mod hand_trace;
mod late_oracle;
mod requeue;
mod scenarios;
