//! `site_factor/budget`: slurm-budget's order (tier, then fair-share rank on the
//! window) as `priority/multifactor`'s site factor, so a site keeps multifactor and all
//! its weights (`PrioritySiteFactorPlugin=site_factor/budget`).
//!
//! Owns the exported C symbols (Slurm's site-factor interface of the built release,
//! pinned to `slurm_ffi::api::site_factor` types) and their wiring, each a thin,
//! panic-guarded shim; [`params`] parses `PrioritySiteFactorParameters` and [`term`]
//! turns a job's place in the budget order into the number multifactor adds.
//!
//! Everything else is `slurm_plugin_common::order`, the code `priority/budget` runs:
//! the snapshot from budgetd and safe mode, the entitlement-first order, and the
//! background pass, which here writes each pending job's `site_factor` (instead of its
//! priority) and sends job state to budgetd's ledger exactly as `priority/budget`
//! does. multifactor adds a new site factor at its next calculation
//! (`PriorityCalcPeriod`, or when Slurm sets the job's priority: submission, update,
//! requeue, release).
//!
//! Callbacks: `site_factor_p_set` (from multifactor's `priority_p_set`, job write lock
//! held) reads the snapshot and the order, no I/O, no lock the thread holds across I/O;
//! `site_factor_p_update` (multifactor's decay thread, job write lock held) has nothing
//! left to do: the pass keeps the factors current. The thread is joined in `fini`
//! before Slurm `dlclose`s us. The plugin owns the site factor of pending jobs: an
//! admin's `scontrol update SiteFactor=` is replaced at the job's next calculation.
//!
//! `mode=shadow` writes no site factor anywhere (callback or pass): the pass still
//! computes the order and feeds the ledger, and reports the pending queue, Slurm's
//! priority beside each job's budget placement, to budgetd, which records how the
//! two orders differ and the preemptions the rule would have made.

pub mod params;
pub mod term;

use std::ffi::CStr;
use std::sync::Arc;

use arc_swap::ArcSwapOption;
use slurm_ffi::api::site_factor as api;
use slurm_ffi::sys::{self, job_record_t};
use slurm_plugin_common::controller::Controller;
use slurm_plugin_common::log;
use slurm_plugin_common::order::compute;
use slurm_plugin_common::order::job;
use slurm_plugin_common::order::pass::{self, Apply};
use slurm_plugin_common::order::state::state;
use slurm_plugin_common::settings::Settings;
use slurm_plugin_common::worker;
use slurm_plugin_common::{cstr, ffi_guard, install_panic_hook};

use crate::params::Weights;
use crate::term::Scale;

// The symbols Slurm's loader reads; `PrioritySiteFactorPlugin=site_factor/budget`.
slurm_plugin_common::plugin_symbols!(
    name: "Site factor budget plugin (slurm-budget)",
    type: "site_factor/budget",
);

/// What safe mode means for site factors (logged when entering it).
pub const SAFE_MODE_EFFECT: &str =
    "site factors keep the last known ranking (all budgeted jobs equal if none), no rebalancing";

/// The scale in force (none until `init` parsed the parameters).
static SCALE: ArcSwapOption<Scale> = ArcSwapOption::const_empty();

/// The scale in force, for the callbacks and the pass.
pub fn scale() -> Option<Arc<Scale>> {
    SCALE.load_full()
}

/// Install a scale (`init`, `site_factor_p_reconfig`, the benchmark).
pub fn set_scale(s: Scale) {
    SCALE.store(Some(Arc::new(s)));
}

/// multifactor's weights from `slurm.conf`.
fn conf_weights() -> Weights {
    // SAFETY: `slurm_conf` is libslurmfull's configuration, filled before plugins load
    // and replaced only under the configuration lock (init and reconfig run inside it
    // or before any other thread reads it).
    unsafe {
        let c = &*std::ptr::addr_of!(sys::slurm_conf);
        Weights {
            age: c.priority_weight_age,
            assoc: c.priority_weight_assoc,
            fair_share: c.priority_weight_fs,
            job_size: c.priority_weight_js,
            partition: c.priority_weight_part,
            qos: c.priority_weight_qos,
            tres: cstr::opt_string(c.priority_weight_tres),
        }
    }
}

/// Read `PrioritySiteFactorParameters` and the weights into a scale.
fn configure() -> Result<Scale, String> {
    // SAFETY: as in `conf_weights`.
    let text = unsafe { cstr::opt_string(sys::slurm_conf.site_factor_params) };
    let mode = params::parse(text.as_deref()).map_err(|e| e.to_string())?;
    let weights = conf_weights().sum();
    let s = Scale::new(mode, weights).ok_or_else(|| {
        format!(
            "PrioritySiteFactorParameters: mode=dominant cannot rank above multifactor's \
             weights, which add up to {weights}: lower the PriorityWeight* values or use \
             mode=factor,weight=N"
        )
    })?;
    log::info(&format!(
        "PrioritySiteFactorParameters={:?}: {s:?} (multifactor's weights add up to {weights})",
        text.unwrap_or_default()
    ));
    Ok(s)
}

fn start_worker() {
    pass::start_worker("budget-site", SAFE_MODE_EFFECT, |st, budgetd, memo| {
        let Some(scale) = scale() else {
            return;
        };
        if !scale.writes() {
            pass::run_pass(st, budgetd, memo, Apply::Shadow);
            return;
        }
        let term = |p: &compute::Placement| scale.site_factor(p);
        pass::run_pass(st, budgetd, memo, Apply::SiteFactor(&term));
    });
}

/// `int init(void)`: from multifactor's `init`. A bad `PrioritySiteFactorParameters`
/// is logged, naming the parameter, and the plugin loads in shadow mode (no site
/// factor: every priority is multifactor's own; the ledger is still fed). Failing
/// `init` instead would be survivable on 22.05 (multifactor runs on and retries the
/// plugin at each job) but stops slurmctld on releases whose `scontrol reconfigure`
/// re-executes the daemon (24.05 and later): a typo must not take the controller down.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        log::set_prefix(PLUGIN_TYPE);
        install_panic_hook();
        let scale = match configure() {
            Ok(s) => s,
            Err(e) => {
                log::error(&format!(
                    "{e}; site_factor/budget runs in mode=shadow (no site factor) until it is fixed"
                ));
                Scale::Shadow
            }
        };
        set_scale(scale);
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
        if in_ctld {
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

/// `site_factor_p_reconfig` (before 24.05): re-read both parameter lines; a bad
/// `PrioritySiteFactorParameters` keeps the mode in force. Never joins the thread.
#[cfg(not(slurm_24_05))]
#[unsafe(no_mangle)]
pub extern "C" fn site_factor_p_reconfig() {
    ffi_guard((), || {
        match configure() {
            Ok(s) => set_scale(s),
            Err(e) => log::error(&format!("{e}; keeping the mode in force")),
        }
        state().set_settings(Settings::load_and_log());
        log::verbose("reconfigured");
    });
}
#[cfg(not(slurm_24_05))]
const _: api::ReconfigFn = site_factor_p_reconfig;

/// `site_factor_p_set`: from multifactor's `priority_p_set` (job write lock held),
/// before it sums the factors: the job's place in the budget order as its site factor.
///
/// # Safety
/// `job` is NULL or a valid job record, job write lock held (Slurm's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn site_factor_p_set(job: *mut job_record_t) {
    ffi_guard((), || {
        let Some(scale) = SCALE.load().as_deref().copied() else {
            return;
        };
        // SAFETY: Slurm passes a valid record or NULL.
        let Some(rec) = (unsafe { job.as_ref() }) else {
            return;
        };
        let st = state();
        st.mark_dirty(rec.job_id);
        // Shadow mode: the job's priority is multifactor's alone (the pass re-reads
        // the job, marked above, for the queue it reports).
        if !scale.writes() {
            return;
        }
        let snap = st.snapshots.latest();
        let default_min = pass::default_min_runtime(snap.as_deref());
        let placement = {
            // SAFETY: valid record under the job write lock.
            let v = unsafe { job::view(rec, &st.users, default_min) };
            let order = st.order();
            compute::place_key(
                snap.as_deref(),
                order.as_deref(),
                &v.account,
                v.user.as_deref().unwrap_or(""),
                v.contract.free_tier,
            )
        };
        // SAFETY: the same valid record; no reference into it is alive any more.
        unsafe { (*job).site_factor = scale.site_factor(&placement) };
    });
}
const _: api::SetFn = site_factor_p_set;

/// `site_factor_p_update`: from multifactor's decay thread (job write lock held) before
/// it recalculates every priority. Nothing to do: the background pass already wrote
/// each pending job's factor from the newest snapshot.
#[unsafe(no_mangle)]
pub extern "C" fn site_factor_p_update() {}
const _: api::UpdateFn = site_factor_p_update;

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
        assert_eq!(PLUGIN_TYPE, "site_factor/budget");
        assert!(CStr::from_bytes_until_nul(&plugin_name).is_ok());
        assert_eq!(
            plugin_version & 0xffffff,
            slurm_ffi::SLURM_VERSION_NUMBER & 0xffffff
        );
    }
}
