//! Shared FFI glue for the slurm-budget plugins (`priority/budget`, later `preempt/budget`
//! and `job_submit/budget`).
//!
//! Owns everything a plugin needs to be a well-behaved guest inside `slurmctld`:
//! - [`log`]: Slurm logging through `log_var(level, "%s", msg)`, never user text as format;
//! - [`guard`]: `catch_unwind` around every export and a panic hook that logs via Slurm;
//! - [`controller`]: `dlsym` lookup of controller-only symbols (`job_list`, locks), so
//!   the same `.so` still loads in `sshare`, plus RAII lock guards and job iteration;
//! - [`worker`]: a background thread that is stopped and joined in `fini`;
//! - [`cstr`]: reading C strings from Slurm records without trusting them;
//! - [`snapshot`]: the in-memory budgetd snapshot and the thread that fetches it;
//! - [`contract`]: the validated `min_runtime` contract stored in `admin_comment`;
//! - [`users`]: uid -> user name lookups for the plugins' caches (background threads only).
//!
//! Each cdylib links its own copy of this rlib, so statics here are per plugin.

pub use policy_core::contract;
pub mod controller;
pub mod cstr;
pub mod guard;
pub mod log;
pub mod snapshot;
pub mod users;
pub mod worker;

pub use guard::{ffi_guard, install_panic_hook};
pub use slurm_ffi;
