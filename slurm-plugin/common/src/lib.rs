//! Shared FFI glue and budgetd plumbing for the slurm-budget plugins (`priority/budget`,
//! `preempt/budget` and `job_submit/budget`).
//!
//! Owns everything a plugin needs to be a well-behaved guest inside `slurmctld`:
//! - [`log`]: Slurm logging through `log_var(level, "%s", msg)`, never user text as format;
//! - [`guard`]: `catch_unwind` around every export and a panic hook that logs via Slurm;
//! - [`controller`]: every `dlsym` of a controller-only symbol (`job_list`, `part_list`,
//!   locks, `last_job_update`), so the same `.so` still loads in `sshare`, plus RAII
//!   lock guards and job and partition iteration;
//! - [`worker`]: a background thread that is stopped and joined in `fini`;
//! - [`cstr`]: reading C strings from Slurm records without trusting them;
//! - [`settings`]: the one parser of `PriorityParameters`' `budget_*` keys and
//!   `SLURM_BUDGET_ENDPOINT`;
//! - [`snapshot`]: the in-memory budgetd snapshot, the fetcher that keeps it fresh and
//!   safe mode;
//! - [`gpus`]: the GPUs of a job record;
//! - [`users`]: the uid -> user name cache (lookups on background threads only).
//!
//! Pure formats shared with budgetd (the stored contract, hostlists, TRES strings)
//! live in `policy-core`; wire types in `budget-protocol`.
//!
//! Each cdylib links its own copy of this rlib, so statics here are per plugin.

pub mod controller;
pub mod cstr;
pub mod gpus;
pub mod guard;
pub mod log;
pub mod settings;
pub mod snapshot;
pub mod users;
pub mod worker;

pub use guard::{ffi_guard, install_panic_hook};
pub use slurm_ffi;
