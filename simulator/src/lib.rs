//! budget-sim: a deterministic discrete-event replay of GPU job traces
//! through the *same* policy core the Slurm plugins use
//! ([`policy_core::FairShare::compute`], [`policy_core::priority::job_priority`],
//! [`policy_core::rebalance::decide`]), side by side with the baselines (the old
//! rule `budget-v1`, static priority, Slurm-style decayed fair share, Fair Tree,
//! multifactor with QOS preemption), on the same placement and backfill logic.
//!
//! Entry points: [`SimulateArgs`] + [`run_cli`] (used by `budgetctl simulate`
//! and the `budget-sim` binary); [`engine::simulate`] for programs and tests.
//! Module map: [`trace`] (input formats, the site CSV format), [`config`] (what a
//! replay is configured with), [`engine`] (events, priorities, backfill,
//! preemption), [`policy`] (the policies compared, which see the engine only
//! through `view.rs`'s `EngineView`), [`usage`] (exact incremental
//! sliding window), [`cluster`] (first-fit placement), `will_run.rs` (the
//! backfill's will-run test, indexed), [`checker`]
//! (invariants), [`metrics`] (figures and their definitions), [`late_oracle`] (what a late
//! team's first window could have had, and what that would have cost), [`svg`] (charts),
//! [`whatif`] (a site's ledger replayed with allocations changed).

pub mod checker;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod engine;
pub mod late_oracle;
pub mod limits;
pub mod metrics;
pub mod policy;
pub mod rng;
pub mod scenario;
pub mod svg;
pub mod trace;
pub mod usage;
mod view;
pub mod whatif;
mod will_run;

pub use cli::{SimulateArgs, run_cli};
