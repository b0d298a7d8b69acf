//! `priority/budget`: the slurmctld priority plugin of slurm-budget.
//!
//! Owns the exported C symbols (the plugin ABI of the built Slurm release, pinned to
//! `slurm_ffi::api::priority` types) and their wiring; each export is a thin,
//! panic-guarded shim. The logic lives in the modules:
//! - [`compute`]: pure priority decision (tier, rank, age) from the snapshot;
//! - [`job`]: reading `job_record_t` (contract, runs for the ledger);
//! - [`pass`]: the periodic recalculation + collection under the job write lock;
//! - [`sync`]: job-state sync to budgetd (background thread only);
//! - [`state`]: the plugin's statics (snapshot cache, uid cache, settings, worker);
//! - [`factors`]: `sprio`; [`job_end`]: unused TRES run-seconds give-back.
//!
//! Settings (`PriorityParameters`), the snapshot fetcher and safe mode, the uid cache
//! and GPU counts are `slurm-plugin-common`'s, shared with the other two plugins.
//!
//! Invariants (ARCHITECTURE.md): callbacks do no I/O and take no lock the background
//! thread holds across I/O; no panic crosses the FFI boundary; the thread is joined
//! in `fini` before Slurm `dlclose`s us.

pub mod factors;
pub mod job_end;

pub use slurm_plugin_common::order::{compute, job, pass, state, sync};

use std::ffi::CStr;

use slurm_ffi::SlurmList;
use slurm_ffi::api::priority as api;
use slurm_ffi::sys::{self, job_record_t, slurmdb_assoc_rec_t};
use slurm_plugin_common::controller::Controller;
use slurm_plugin_common::log;
use slurm_plugin_common::settings::Settings;
use slurm_plugin_common::snapshot::unix_now;
use slurm_plugin_common::worker;
use slurm_plugin_common::{ffi_guard, install_panic_hook};

use crate::state::{SAFE_MODE_EFFECT, state};

// The symbols Slurm's loader reads; `PriorityType=priority/budget`.
slurm_plugin_common::plugin_symbols!(
    name: "Priority budget plugin (slurm-budget)",
    type: "priority/budget",
);

fn start_worker() {
    pass::start_worker("budget-prio", SAFE_MODE_EFFECT, |st, budgetd, memo| {
        pass::run_pass(st, budgetd, memo, pass::Apply::Priority);
    });
}

/// `int init(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        log::set_prefix(PLUGIN_TYPE);
        install_panic_hook();
        let st = state();
        st.set_settings(Settings::load_and_log());
        let in_ctld = Controller::get().is_ok();
        log::info(&format!(
            "loaded: slurm-budget {} built for Slurm {} (plugin_version 0x{:06x}){}",
            env!("CARGO_PKG_VERSION"),
            slurm_ffi::version::version_string(slurm_ffi::SLURM_VERSION_NUMBER),
            plugin_version,
            if in_ctld {
                ""
            } else {
                ", client mode (no slurmctld symbols)"
            }
        ));
        // 22.05-23.11.5: init runs after jobs are loaded, without locks: start here.
        // 23.11.6+: Slurm calls priority_p_thread_start later for that.
        if api::THREAD_FROM_INIT && in_ctld {
            start_worker();
        }
        sys::SLURM_SUCCESS
    })
}
const _: slurm_ffi::api::common::InitFn = init;

/// `int fini(void)`: stop and join the thread (Slurm dlcloses us right after).
#[unsafe(no_mangle)]
pub extern "C" fn fini() -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        if worker::stop_all(&state().worker) > 0 {
            log::info("background thread stopped");
        }
        sys::SLURM_SUCCESS
    })
}
const _: slurm_ffi::api::common::FiniFn = fini;

/// `priority_p_set`: called by `set_job_prio` with the job write lock held.
///
/// # Safety
/// `job` is NULL or a valid job record (Slurm's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn priority_p_set(last_prio: u32, job: *mut job_record_t) -> u32 {
    // Never 0 (0 = held) on failure: keep what the job had, or 1.
    let fallback = last_prio.max(1);
    ffi_guard(fallback, || {
        // SAFETY: Slurm passes a valid record or NULL.
        let Some(job) = (unsafe { job.as_ref() }) else {
            return fallback;
        };
        // Admin-set priority (scontrol update priority=N) wins, as in priority/basic.
        if job.direct_set_prio != 0 && job.priority > 1 {
            return job.priority;
        }
        let st = state();
        st.mark_dirty(job.job_id);
        let snap = st.snapshots.latest();
        let default_min = pass::default_min_runtime(snap.as_deref());
        // SAFETY: valid record under the job write lock.
        let v = unsafe { job::view(job, &st.users, default_min) };
        let order = st.order();
        compute::decide(snap.as_deref(), order.as_deref(), &v.key(unix_now())).priority
    })
}
const _: api::SetFn = priority_p_set;

/// `priority_p_reconfig`: re-read PriorityParameters (endpoint, timeout, max age, sync
/// and pass log apply at the next pass; a new period applies after a restart). Never
/// joins the thread: Slurm may hold locks here that the thread waits for.
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_reconfig(_assoc_clear: bool) {
    ffi_guard((), || {
        state().set_settings(Settings::load_and_log());
        log::verbose("reconfigured");
    });
}
const _: api::ReconfigFn = priority_p_reconfig;

/// `priority_p_set_assoc_usage`: slurmdbd association usage is not our source of
/// truth (budgetd is); nothing to do.
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_set_assoc_usage(_assoc: *mut slurmdb_assoc_rec_t) {}
const _: api::SetAssocUsageFn = priority_p_set_assoc_usage;

/// `priority_p_calc_fs_factor`: only `sshare` calls it (22.05); return Slurm's
/// classic `2^(-usage/shares)` like priority/basic, 0 for unset shares.
#[cfg(not(slurm_25_11))]
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_calc_fs_factor(args: slurm_ffi::api::LongDoublePair) -> f64 {
    ffi_guard(0.0, || {
        let usage = slurm_ffi::api::f80_to_f64(&args.a);
        let shares = slurm_ffi::api::f80_to_f64(&args.b);
        let unset = shares.is_nan() || shares <= 0.0;
        if unset || (shares - f64::from(slurm_ffi::NO_VAL)).abs() < 1e-6 {
            0.0
        } else {
            2f64.powf(-(usage / shares))
        }
    })
}
#[cfg(not(slurm_25_11))]
const _: api::CalcFsFactorFn = priority_p_calc_fs_factor;

/// `priority_p_get_priority_factors_list` for `sprio` (22.05-23.11 signature).
///
/// # Safety
/// `req` is NULL or a valid request message.
#[cfg(not(slurm_24_05))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn priority_p_get_priority_factors_list(
    req: *mut sys::priority_factors_request_msg_t,
    _uid: sys::uid_t,
) -> SlurmList {
    ffi_guard(std::ptr::null_mut(), || {
        // SAFETY: NULL or valid per Slurm.
        let filter = match unsafe { req.as_ref() } {
            // SAFETY: the lists are NULL or lists of uint32_t*.
            Some(r) => unsafe {
                factors::Filter {
                    job_ids: factors::u32_list(r.job_id_list),
                    uids: factors::u32_list(r.uid_list),
                }
            },
            None => factors::Filter::default(),
        };
        factors::factors_list(state(), &filter, api::FACTORS_NEEDS_OWN_LOCK, unix_now())
    })
}
/// `priority_p_get_priority_factors_list` for `sprio` (24.05+: no filters; sprio
/// filters client-side).
#[cfg(slurm_24_05)]
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_get_priority_factors_list(_uid: sys::uid_t) -> SlurmList {
    ffi_guard(std::ptr::null_mut(), || {
        factors::factors_list(
            state(),
            &factors::Filter::default(),
            api::FACTORS_NEEDS_OWN_LOCK,
            unix_now(),
        )
    })
}
const _: api::GetPriorityFactorsListFn = priority_p_get_priority_factors_list;

/// `priority_p_job_end`: give back unused `grp_used_tres_run_secs` (as priority/basic).
///
/// # Safety
/// `job` is NULL or a valid job record, job write lock held.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn priority_p_job_end(job: *mut job_record_t) {
    ffi_guard((), || {
        // SAFETY: Slurm's contract.
        if let Some(j) = unsafe { job.as_ref() } {
            // SAFETY: as above.
            unsafe { job_end::job_end(j) }
        }
    });
}
const _: api::JobEndFn = priority_p_job_end;

/// `priority_p_recover` (23.02+): keep the job's priority boost as is.
#[cfg(slurm_23_02)]
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_recover(prio_boost: u32) -> u32 {
    prio_boost
}
#[cfg(slurm_23_02)]
const _: api::RecoverFn = priority_p_recover;

/// `priority_p_thread_start` (23.11.6+): jobs are loaded and locks are free now.
#[cfg(slurm_23_11_6)]
#[unsafe(no_mangle)]
pub extern "C" fn priority_p_thread_start() {
    ffi_guard((), || {
        if Controller::get().is_ok() {
            start_worker();
        }
    });
}
#[cfg(slurm_23_11_6)]
const _: api::ThreadStartFn = priority_p_thread_start;

/// The plugin type string, checked against the exported bytes in tests.
pub fn plugin_type_str() -> &'static str {
    CStr::from_bytes_until_nul(&plugin_type)
        .ok()
        .and_then(|c| c.to_str().ok())
        .unwrap_or("")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn symbols_are_well_formed() {
        assert_eq!(plugin_type_str(), PLUGIN_TYPE);
        assert!(CStr::from_bytes_until_nul(&plugin_name).is_ok());
        assert_eq!(
            plugin_version & 0xffffff,
            slurm_ffi::SLURM_VERSION_NUMBER & 0xffffff
        );
    }
}
