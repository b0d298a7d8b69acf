//! `sprio` support: `priority_p_get_priority_factors_list`.
//!
//! `sprio` recomputes each job's total client-side as
//! `age + assoc + fs + js + part + qos + (site - NICE_OFFSET) - (nice - NICE_OFFSET)`
//! (src/sprio/print.c), so we report our three components in those slots:
//! tier base (1e9..3e9) in `priority_qos` (the QOS column: a tier is a QOS-like class;
//! `priority_site` is a u32 offset by NICE_OFFSET and cannot hold 3e9), rank level x
//! 10,000 in `priority_fs`, age minutes in `priority_age`; `priority_site` stays
//! neutral (NICE_OFFSET). The sum is exactly our priority.
//! `sprio` shows the age, fair-share and QOS columns only when `PriorityWeightAge`,
//! `PriorityWeightFairshare` and `PriorityWeightQOS` are nonzero in slurm.conf (the
//! testbed sets them; priority/budget does not otherwise use weights).
//!
//! Objects are allocated with Slurm's allocator and freed by our own list destructor,
//! which frees exactly what we allocated (the object, its partition copy and, where
//! the release keeps the factors in a separate `priority_factors_t`, that struct).
//!
//! Per release (slurm/slurm.h): 22.05 keeps the factors in the object itself; 24.11
//! points to a `priority_factors_t` (cfg `slurm_prio_factors_t`, detected from the
//! header); 26.05 also names the job by `slurm_step_id_t step_id` (cfg `slurm_26_05`).

use std::ffi::c_void;

use slurm_ffi::sys::{self, job_record_t, priority_factors_object_t};
use slurm_ffi::{NICE_OFFSET, SlurmList, job_state};
use slurm_plugin_common::controller::{Controller, for_each};
use slurm_plugin_common::cstr;

use crate::compute;
use crate::job;
use crate::pass::default_min_runtime;
use crate::state::State;

/// List destructor for our objects (`ListDelF`).
unsafe extern "C" fn destroy_factors(p: *mut c_void) {
    if p.is_null() {
        return;
    }
    let obj = p.cast::<priority_factors_object_t>();
    // SAFETY: `obj` was allocated by `new_object` below with slurm_xcalloc, and its
    // partition with xstrdup; slurm_xfree takes the address of the pointer to free.
    unsafe {
        let mut part = (*obj).partition.cast::<c_void>();
        sys::slurm_xfree(&mut part);
        #[cfg(slurm_prio_factors_t)]
        {
            // Ours, from `alloc_zeroed`; NULL for a job with a direct priority.
            let mut f = (*obj).prio_factors.cast::<c_void>();
            sys::slurm_xfree(&mut f);
        }
        let mut o = p;
        sys::slurm_xfree(&mut o);
    }
}

fn new_object() -> *mut priority_factors_object_t {
    alloc_zeroed::<priority_factors_object_t>()
}

/// A zeroed `T` from Slurm's allocator (so Slurm's `xfree` could free it), or NULL.
fn alloc_zeroed<T>() -> *mut T {
    // SAFETY: slurm_xcalloc(count, size, clear, try, file, line, func) returns zeroed
    // memory (clear = true) or NULL with try = true.
    unsafe {
        sys::slurm_xcalloc(
            1,
            std::mem::size_of::<T>(),
            true,
            true,
            c"priority_budget".as_ptr(),
            0,
            c"factors".as_ptr(),
        )
        .cast()
    }
}

/// Filters of the request (22.05/23.x): job ids and uids.
#[derive(Debug, Default)]
pub struct Filter {
    pub job_ids: Option<Vec<u32>>,
    pub uids: Option<Vec<u32>>,
}

impl Filter {
    fn keeps(&self, job: &job_record_t) -> bool {
        self.job_ids
            .as_ref()
            .is_none_or(|ids| ids.contains(&job.job_id))
            && self.uids.as_ref().is_none_or(|u| u.contains(&job.user_id))
    }
}

/// Read a Slurm list of `uint32_t *` into a vector; `None` for a NULL list.
///
/// # Safety
/// `list` must be NULL or a valid list of `uint32_t *`.
pub unsafe fn u32_list(list: SlurmList) -> Option<Vec<u32>> {
    if list.is_null() {
        return None;
    }
    let mut v = Vec::new();
    // SAFETY: forwarded contract; items are non-NULL u32 pointers (checked).
    unsafe {
        for_each(list, |p: *mut u32| {
            if let Some(x) = p.as_ref() {
                v.push(*x);
            }
        });
    }
    Some(v)
}

/// Build the factors list for pending jobs. `own_lock`: take the job read lock
/// ourselves (22.05 calls us without locks). Returns NULL when nothing matches (Slurm
/// treats NULL as an empty answer).
pub fn factors_list(state: &State, filter: &Filter, own_lock: bool, now: i64) -> SlurmList {
    let Ok(ctl) = Controller::get() else {
        return std::ptr::null_mut();
    };
    let _guard = own_lock.then(|| ctl.job_read_lock());
    let snapshot = state.snapshots.latest();
    let order = state.order();
    let default_min = default_min_runtime(snapshot.as_deref());
    // SAFETY: list_create with our destructor.
    let list = unsafe { sys::list_create(Some(destroy_factors)) };
    if list.is_null() {
        return list;
    }
    let mut count = 0u32;
    let mut visit = |job: &mut job_record_t| {
        if !job_state::is_pending(job.job_state) || job.priority == 0 || !filter.keeps(job) {
            return;
        }
        let obj = new_object();
        // SAFETY: obj is NULL or a zeroed object we own.
        let Some(o) = (unsafe { obj.as_mut() }) else {
            return;
        };
        set_job_id(o, job);
        o.user_id = job.user_id;
        // SAFETY: job fields read under the job lock.
        let part = unsafe { cstr::opt_str(job.partition) };
        o.partition = part
            .as_deref()
            .map(cstr::xstrdup)
            .unwrap_or(std::ptr::null_mut());
        let mut f = Factors {
            site: NICE_OFFSET,
            nice: v_nice(job),
            ..Factors::default()
        };
        if job.direct_set_prio != 0 {
            o.direct_prio = f64::from(job.priority);
        } else {
            // SAFETY: valid record under the lock.
            let v = unsafe { job::view(job, &state.users, default_min) };
            let d = compute::decide(snapshot.as_deref(), order.as_deref(), &v.key(now));
            f.qos = f64::from(policy_core::priority::tier_base(d.parts.tier));
            f.fs = f64::from(d.parts.rank_level) * f64::from(policy_core::priority::AGE_SPAN);
            f.age = f64::from(d.parts.age_minutes);
        }
        if !store_factors(o, &f, job.direct_set_prio != 0) {
            destroy_factors_object(obj);
            return;
        }
        // SAFETY: valid list, object ownership passes to the list.
        unsafe { sys::list_append(list, obj.cast()) };
        count += 1;
    };
    match &_guard {
        Some(g) => g.for_each_job(&mut visit),
        // 23.02+: slurmctld already holds the job read lock for us.
        // SAFETY: own_lock is false only where Slurm holds the job read lock.
        None => unsafe { ctl.for_each_job_unlocked(&mut visit) },
    }
    if count == 0 {
        // SAFETY: our list, empty.
        unsafe { sys::list_destroy(list) };
        return std::ptr::null_mut();
    }
    list
}

/// The factor slots sprio adds up (see the module doc).
#[derive(Debug, Default)]
struct Factors {
    qos: f64,
    fs: f64,
    age: f64,
    site: u32,
    nice: u32,
}

/// 22.05: the factors are fields of the object itself.
#[cfg(not(slurm_prio_factors_t))]
fn store_factors(o: &mut priority_factors_object_t, f: &Factors, _direct: bool) -> bool {
    o.priority_qos = f.qos;
    o.priority_fs = f.fs;
    o.priority_age = f.age;
    o.priority_site = f.site;
    o.nice = f.nice;
    true
}

/// 24.11+: the factors live in a `priority_factors_t` the object points to; it stays
/// NULL for a job with a direct priority (as slurm.h documents for `direct_prio`).
/// False when the allocation failed (the caller drops the object).
#[cfg(slurm_prio_factors_t)]
fn store_factors(o: &mut priority_factors_object_t, f: &Factors, direct: bool) -> bool {
    if direct {
        return true;
    }
    let pf = alloc_zeroed::<sys::priority_factors_t>();
    // SAFETY: pf is NULL or a zeroed struct we own (tres arrays stay NULL, count 0).
    let Some(p) = (unsafe { pf.as_mut() }) else {
        return false;
    };
    p.priority_qos = f.qos;
    p.priority_fs = f.fs;
    p.priority_age = f.age;
    p.priority_site = f.site;
    p.nice = f.nice;
    o.prio_factors = pf;
    true
}

/// The job id slot: `job_id` up to 25.11, `step_id.job_id` (with the sluid) in 26.05.
#[cfg(not(slurm_26_05))]
fn set_job_id(o: &mut priority_factors_object_t, job: &job_record_t) {
    o.job_id = job.job_id;
}

/// The job id slot: `job_id` up to 25.11, `step_id.job_id` (with the sluid) in 26.05.
#[cfg(slurm_26_05)]
fn set_job_id(o: &mut priority_factors_object_t, job: &job_record_t) {
    o.step_id = job.step_id;
}

fn destroy_factors_object(obj: *mut priority_factors_object_t) {
    // SAFETY: an object from new_object, not in any list.
    unsafe { destroy_factors(obj.cast()) }
}

fn v_nice(job: &job_record_t) -> u32 {
    // SAFETY: details is NULL or valid under the lock.
    unsafe { job.details.as_ref() }
        .map(|d| d.nice)
        .unwrap_or(NICE_OFFSET)
}
