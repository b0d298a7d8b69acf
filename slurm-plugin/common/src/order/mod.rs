//! The budget order of pending jobs and the job-state sync: what `priority/budget` and
//! `site_factor/budget` share, so both rank jobs and feed budgetd's ledger with the
//! same code.
//! - [`compute`]: the pure decision (tier, fair-share rank, age) from the snapshot;
//! - [`job`]: reading `job_record_t` (contract, runs for the ledger);
//! - [`pass`]: the periodic walk under the job write lock: each pending job's
//!   priority (`priority/budget`) or site factor (`site_factor/budget`), the
//!   entitlement-first order, the runs to sync;
//! - [`sync`]: job-state sync to budgetd (background thread only);
//! - [`state`]: a plugin's statics (snapshot cache, uid cache, settings, worker).
//!
//! Each cdylib links its own copy, so every plugin has its own [`state::state`].

pub mod compute;
pub mod job;
pub mod pass;
pub mod state;
pub mod sync;
