//! Shared FFI glue and budgetd plumbing for the slurm-budget plugins (`priority/budget`,
//! `site_factor/budget`, `preempt/budget` and `job_submit/budget`).
//!
//! Owns everything a plugin needs to be a well-behaved guest inside `slurmctld`:
//! - [`log`]: Slurm logging through `log_var(level, "%s", msg)`, never user text as format;
//! - [`guard`]: `catch_unwind` around every export and a panic hook that logs via Slurm;
//! - [`controller`]: every `dlsym` of a controller-only symbol (`job_list`, `part_list`,
//!   locks, `last_job_update`), so the same `.so` still loads in `sshare`, plus RAII
//!   lock guards and job and partition iteration;
//! - [`plugin_symbols`]: the three symbols Slurm's plugin loader reads from every plugin;
//!   [`plugin_fini`]: a `fini` that stops the plugin's background threads;
//! - [`worker`]: a background thread that is stopped and joined in `fini`;
//! - [`cstr`]: reading C strings from Slurm records without trusting them;
//! - [`settings`]: the one parser of `PriorityParameters`' `budget_*` keys and
//!   `SLURM_BUDGET_ENDPOINT`;
//! - [`snapshot`]: the in-memory budgetd snapshot, the fetcher that keeps it fresh and
//!   safe mode;
//! - [`gpus`]: the GPUs of a job record;
//! - [`users`]: the uid -> user name cache (lookups on background threads only);
//! - [`order`]: the budget order of pending jobs, the background pass that applies it
//!   and the job-state sync to budgetd (`priority/budget` and `site_factor/budget`);
//! - `test_records` (feature `test-records`, tests only): job records to start a test from;
//! - `bench` (feature `test-records`, benchmarks only): the callbacks' benchmark snapshot and timer.
//!
//! Pure formats shared with budgetd (the stored contract, hostlists, TRES strings)
//! live in `policy-core`; wire types in `budget-protocol`.
//!
//! Each cdylib links its own copy of this rlib, so statics here are per plugin.

#[cfg(any(test, feature = "test-records"))]
pub mod bench;
pub mod controller;
pub mod cstr;
pub mod gpus;
pub mod guard;
pub mod log;
pub mod order;
pub mod settings;
pub mod snapshot;
#[cfg(any(test, feature = "test-records"))]
pub mod test_records;
pub mod users;
pub mod worker;

pub use guard::{ffi_guard, install_panic_hook};
pub use slurm_ffi;

/// Defines the three symbols Slurm's plugin loader reads from every plugin
/// (`plugin_name`, `plugin_type`, `plugin_version`), as NUL-terminated bytes and the
/// release this build is for, and `PLUGIN_TYPE`, the type as a Rust string (the log
/// prefix). Used once at the root of each plugin crate.
#[macro_export]
macro_rules! plugin_symbols {
    (name: $name:literal, type: $ty:literal $(,)?) => {
        /// Human-readable plugin name (Slurm reads the bytes of this symbol).
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)] // the names Slurm dlsym()s
        pub static plugin_name: [u8; $name.len() + 1] = $crate::nul_terminated($name);
        /// The plugin's type, as slurm.conf names it.
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)] // the names Slurm dlsym()s
        pub static plugin_type: [u8; $ty.len() + 1] = $crate::nul_terminated($ty);
        /// Must equal the loading Slurm's SLURM_VERSION_NUMBER (major.minor.micro).
        #[unsafe(no_mangle)]
        #[allow(non_upper_case_globals)] // the names Slurm dlsym()s
        pub static plugin_version: u32 = $crate::slurm_ffi::SLURM_VERSION_NUMBER;

        const PLUGIN_TYPE: &str = $ty;
    };
}

/// `text` and a NUL byte in an array of exactly that length (the C strings of
/// [`plugin_symbols`]); a wrong `N` fails the build, since the statics are constants.
pub const fn nul_terminated<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(bytes.len() + 1 == N, "N must be the text's length plus one");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

/// Defines `fini` for a plugin whose only teardown is its background threads: stop and
/// join those in `$slot` ([`worker::stop_all`]) before Slurm `dlclose`s the library.
/// `$slot` is a `&Mutex<W>` as `stop_all` takes it.
#[macro_export]
macro_rules! plugin_fini {
    ($slot:expr) => {
        /// `fini`: stop and join the background threads before Slurm `dlclose`s us.
        #[unsafe(no_mangle)]
        pub extern "C" fn fini() -> i32 {
            $crate::ffi_guard($crate::slurm_ffi::sys::SLURM_SUCCESS, || {
                $crate::worker::stop_all($slot);
                $crate::slurm_ffi::sys::SLURM_SUCCESS
            })
        }
        const _: $crate::slurm_ffi::api::common::FiniFn = fini;
    };
}
