//! The background pass (every `budget_period` seconds, on the plugin's own thread):
//! 1. refresh the snapshot from budgetd (hard timeouts; no Slurm lock held),
//! 2. update safe mode, resolve user names recorded as unknown (NSS, no lock held),
//! 3. under the job write lock: recompute the priority of every pending job and collect
//!    the runs of pending, running and recently ended jobs,
//! 4. after unlocking: send those runs to budgetd.
//!
//! slurmctld never recalculates priorities on its own (only at submit/update/requeue),
//! so step 3 is what makes a budget change reorder the queue without any job update.

use std::time::Instant;

use budget_protocol::{JobRun, JobSync};
use slurm_ffi::job_state;
use slurm_ffi::sys::job_record_t;
use slurm_plugin_common::controller::Controller;
use slurm_plugin_common::log;

use crate::compute;
use crate::job;
use crate::service::Service;
use crate::state::State;
use crate::users;

/// Figures of one pass, for logs and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassStats {
    pub pending: u32,
    pub changed: u32,
    pub runs: u32,
    pub lock_micros: u128,
    /// Time spent sending the runs to budgetd (after unlocking).
    pub sync_micros: u128,
}

/// Current Unix time.
pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// Recompute one pending job's priority; true when it changed.
/// Held jobs (priority 0) and admin-set priorities are left alone.
///
/// # Safety
/// `job` must be valid, with the job write lock held.
pub unsafe fn recompute(
    state: &State,
    snap: Option<&budget_protocol::PluginSnapshot>,
    job: &mut job_record_t,
    now: i64,
) -> bool {
    if !job_state::is_pending(job.job_state) || job.priority == 0 || job.direct_set_prio != 0 {
        return false;
    }
    // SAFETY: forwarded contract.
    let v = unsafe { job::view(job, &state.users) };
    let p = compute::decide(snap, &v.key(now)).priority;
    if p != job.priority {
        job.priority = p;
        true
    } else {
        false
    }
}

/// One pass. Without a `service` (budgetd disabled) only priorities are recomputed.
pub fn run_pass(state: &State, service: Option<&mut Service>) -> PassStats {
    let cfg = state.config();
    let mut service = service;
    if let Some(svc) = service.as_deref_mut() {
        svc.refresh_snapshot(state, now());
    }
    state.update_safe_mode(now(), "budgetd unreachable or slow");
    state.users.resolve_misses(users::lookup_uid);

    let Ok(ctl) = Controller::get() else {
        return PassStats::default();
    };
    let snapshot = state.current();
    let snap = snapshot.as_deref().map(|l| &l.snapshot);
    let mut stats = PassStats::default();
    let mut runs: Vec<JobRun> = Vec::new();
    let collect = cfg.sync_jobs && service.is_some();
    {
        let guard = ctl.job_write_lock();
        let t = Instant::now();
        let now = now();
        guard.for_each_job(|job| {
            if job_state::is_pending(job.job_state) {
                stats.pending += 1;
            }
            // SAFETY: valid record, job write lock held by `guard`.
            if unsafe { recompute(state, snap, job, now) } {
                stats.changed += 1;
            }
            if collect {
                // SAFETY: as above.
                unsafe { job::runs(job, &state.users, now, &mut runs) };
            }
        });
        if stats.changed > 0 {
            // Tell clients (squeue caches by last_update) that job data changed.
            ctl.touch_last_job_update(&guard, now);
        }
        stats.lock_micros = t.elapsed().as_micros();
    }
    stats.runs = runs.len() as u32;
    if let Some(svc) = service
        && collect
    {
        let t = Instant::now();
        svc.send_jobs(JobSync {
            collected_at: now(),
            runs,
        });
        stats.sync_micros = t.elapsed().as_micros();
    }
    // Stable format: scripts/bench-slurm parses it (budget_pass_log=1 logs it at info).
    let line = format!(
        "pass: {} pending, {} priorities changed, {} runs, job lock held {} us, sync {} us",
        stats.pending, stats.changed, stats.runs, stats.lock_micros, stats.sync_micros
    );
    if cfg.pass_log {
        log::info(&line);
    } else {
        log::debug(&line);
    }
    stats
}
