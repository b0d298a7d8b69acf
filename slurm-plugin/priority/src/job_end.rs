//! `priority_p_job_end`: give back the unused part of `grp_used_tres_run_secs`.
//!
//! Slurm calls it only with `AccountingStorageEnforce=limits|safe` (with the job write
//! lock held). At job start `acct_policy` charges `tres_alloc_cnt x time_limit` to the
//! association and QOS running-seconds counters; the priority plugin must remove the
//! remainder when the job ends, or GrpTRESRunMins limits would fill up forever. This
//! mirrors `priority_p_job_end` of priority/basic (src/plugins/priority/basic) exactly:
//! subtract `tres_alloc_cnt[i] * time_limit * 60` with underflow clamped to 0, from the
//! QOS and from the association and each of its parents, under the assoc+QOS write locks.

use slurm_ffi::NO_CONSUME_VAL64;
use slurm_ffi::sys::{self, job_record_t};
use slurm_plugin_common::controller::Controller;

/// Subtract `unused` from `counters` (length `n`), clamping at 0.
///
/// # Safety
/// `counters` must be NULL or point to at least `n` u64.
unsafe fn give_back(counters: *mut u64, unused: &[u64]) {
    if counters.is_null() {
        return;
    }
    for (i, u) in unused.iter().enumerate() {
        // SAFETY: i < n per contract.
        let c = unsafe { &mut *counters.add(i) };
        *c = c.saturating_sub(*u);
    }
}

/// Apply the job-end accounting for `job`.
///
/// # Safety
/// `job` must be a valid job record with the job write lock held (Slurm's contract).
pub unsafe fn job_end(job: &job_record_t) {
    let Ok(ctl) = Controller::get() else { return };
    let n = ctl.tres_cnt() as usize;
    if n == 0 || job.tres_alloc_cnt.is_null() {
        return;
    }
    let time_limit_secs = u64::from(job.time_limit) * 60;
    let unused: Vec<u64> = (0..n)
        .map(|i| {
            // SAFETY: tres_alloc_cnt has slurmctld_tres_cnt entries.
            let a = unsafe { *job.tres_alloc_cnt.add(i) };
            if a == NO_CONSUME_VAL64 {
                0
            } else {
                a.wrapping_mul(time_limit_secs)
            }
        })
        .collect();
    let mut locks = sys::assoc_mgr_lock_t {
        assoc: sys::WRITE_LOCK,
        qos: sys::WRITE_LOCK,
        ..Default::default()
    };
    // SAFETY: assoc_mgr locks guard the usage counters below; released at the end.
    unsafe {
        sys::assoc_mgr_lock(&mut locks);
        if let Some(qos) = job.qos_ptr.as_ref()
            && let Some(usage) = qos.usage.as_ref()
        {
            give_back(usage.grp_used_tres_run_secs, &unused);
        }
        let mut assoc = job.assoc_ptr;
        let mut guard = 0;
        while let Some(a) = assoc.as_ref() {
            let Some(usage) = a.usage.as_ref() else { break };
            give_back(usage.grp_used_tres_run_secs, &unused);
            assoc = usage.parent_assoc_ptr;
            guard += 1;
            if guard > 10_000 {
                break; // a cycle would be a Slurm bug; never spin under its locks
            }
        }
        sys::assoc_mgr_unlock(&mut locks);
    }
}
