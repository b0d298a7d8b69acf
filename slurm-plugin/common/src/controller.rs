//! Controller-only symbols of `slurmctld`, looked up at run time, and safe-ish wrappers.
//!
//! `job_list`, `part_list`, `default_part_loc`, `lock_slurmctld`, `unlock_slurmctld`,
//! `slurmctld_tres_cnt` and `last_job_update` live in the `slurmctld` binary, not in
//! libslurmfull. A plugin that referenced them directly would fail to load in `sshare`
//! (which also loads the priority plugin), so they are resolved with
//! `dlsym(RTLD_DEFAULT, ...)`, once, here and nowhere else (all of them exist in every
//! supported release, 22.05 to 26.05). In a process without them, [`Controller::get`]
//! returns an error and callers skip work.

use std::ffi::{CStr, c_char, c_void};
use std::sync::OnceLock;

use slurm_ffi::sys::{self, job_record_t, part_record_t, slurmctld_lock_t};
use slurm_ffi::{SlurmList, SlurmListIterator};

unsafe extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// glibc's `RTLD_DEFAULT`: search the global scope (the executable first).
const RTLD_DEFAULT: *mut c_void = std::ptr::null_mut();

type LockFn = unsafe extern "C" fn(slurmctld_lock_t);

/// Errors from controller lookups.
#[derive(Debug, thiserror::Error)]
pub enum ControllerError {
    #[error("symbol {0} not found: not running inside slurmctld")]
    Missing(&'static str),
}

/// Resolved addresses of the controller's globals and lock functions.
#[derive(Debug, Clone, Copy)]
pub struct Controller {
    job_list: *mut SlurmList,
    part_list: *mut SlurmList,
    default_part: *const *const part_record_t,
    lock: LockFn,
    unlock: LockFn,
    tres_cnt: *const u32,
    last_job_update: *mut sys::time_t,
}

// SAFETY: the pointers are addresses of process-global variables and functions of
// slurmctld; sharing the addresses between threads is fine (access is under Slurm locks).
unsafe impl Send for Controller {}
// SAFETY: as above.
unsafe impl Sync for Controller {}

fn lookup(name: &'static CStr) -> Result<*mut c_void, ControllerError> {
    // SAFETY: dlsym with RTLD_DEFAULT and a NUL-terminated name is always safe to call.
    let p = unsafe { dlsym(RTLD_DEFAULT, name.as_ptr()) };
    if p.is_null() {
        Err(ControllerError::Missing(name.to_str().unwrap_or("?")))
    } else {
        Ok(p)
    }
}

static CONTROLLER: OnceLock<Result<Controller, String>> = OnceLock::new();

impl Controller {
    fn resolve() -> Result<Controller, ControllerError> {
        let lock = lookup(c"lock_slurmctld")?;
        let unlock = lookup(c"unlock_slurmctld")?;
        Ok(Controller {
            job_list: lookup(c"job_list")?.cast(),
            part_list: lookup(c"part_list")?.cast(),
            default_part: lookup(c"default_part_loc")?.cast(),
            // SAFETY: these symbols are `void lock_slurmctld(slurmctld_lock_t)` and
            // `void unlock_slurmctld(slurmctld_lock_t)` in every supported release.
            lock: unsafe { std::mem::transmute::<*mut c_void, LockFn>(lock) },
            // SAFETY: as above.
            unlock: unsafe { std::mem::transmute::<*mut c_void, LockFn>(unlock) },
            tres_cnt: lookup(c"slurmctld_tres_cnt")?.cast(),
            last_job_update: lookup(c"last_job_update")?.cast(),
        })
    }

    /// The controller's symbols, or why they are unavailable (e.g. inside `sshare`).
    pub fn get() -> Result<&'static Controller, String> {
        CONTROLLER
            .get_or_init(|| Controller::resolve().map_err(|e| e.to_string()))
            .as_ref()
            .map_err(Clone::clone)
    }

    /// Take slurmctld locks; released when the guard drops.
    pub fn lock(&'static self, levels: slurmctld_lock_t) -> LockGuard {
        // SAFETY: lock_slurmctld is safe to call from any thread that holds no locks.
        unsafe { (self.lock)(levels) };
        LockGuard { ctl: self, levels }
    }

    /// Job write lock + node/part read: what set_job_prio callers hold.
    #[allow(
        clippy::needless_update,
        reason = "26.05 adds select_node; the update is empty only on older releases"
    )]
    pub fn job_write_lock(&'static self) -> LockGuard {
        self.lock(slurmctld_lock_t {
            conf: sys::NO_LOCK,
            job: sys::WRITE_LOCK,
            node: sys::READ_LOCK,
            part: sys::READ_LOCK,
            fed: sys::NO_LOCK,
            // NO_LOCK (0) for the levels a release added (26.05: select_node).
            ..Default::default()
        })
    }

    /// Job/node/part read locks (as multifactor's `get_priority_factors_list`).
    #[allow(
        clippy::needless_update,
        reason = "26.05 adds select_node; the update is empty only on older releases"
    )]
    pub fn job_read_lock(&'static self) -> LockGuard {
        self.lock(slurmctld_lock_t {
            conf: sys::NO_LOCK,
            job: sys::READ_LOCK,
            node: sys::READ_LOCK,
            part: sys::READ_LOCK,
            fed: sys::NO_LOCK,
            // NO_LOCK (0) for the levels a release added (26.05: select_node).
            ..Default::default()
        })
    }

    /// Visit every job record when slurmctld already holds the job lock for us
    /// (e.g. 23.02+ calls `get_priority_factors_list` with job read lock held).
    ///
    /// # Safety
    /// The calling thread must hold at least the job read lock.
    pub unsafe fn for_each_job_unlocked(&self, mut f: impl FnMut(&mut job_record_t)) {
        // SAFETY: caller holds the job lock.
        let list = unsafe { *self.job_list };
        // SAFETY: as above.
        unsafe { for_each(list, |p: *mut job_record_t| f(&mut *p)) };
    }

    /// Visit every partition with a flag for the default one.
    ///
    /// # Safety
    /// The calling thread must hold at least the partition read lock (`job_submit`
    /// and `job_modify` are always called with it).
    pub unsafe fn for_each_partition(&self, mut f: impl FnMut(&part_record_t, bool)) {
        // SAFETY: both globals are read under the partition lock the caller holds.
        let (list, default) = unsafe { (*self.part_list, *self.default_part) };
        // SAFETY: `part_list` is a list of part_record_t*, unchanged under the lock.
        unsafe {
            for_each(list, |p: *mut part_record_t| {
                if let Some(part) = p.as_ref() {
                    f(part, std::ptr::eq(p, default));
                }
            });
        }
    }

    /// `last_job_update`: when slurmctld last changed any job record. Read without a
    /// lock, as Slurm's own RPC handlers do: a torn or stale value only makes a
    /// background thread refresh one tick later.
    pub fn last_job_update(&self) -> i64 {
        // SAFETY: a time_t global of slurmctld; see above for the racy read.
        unsafe { self.last_job_update.read_volatile() }
    }

    /// Number of TRES slots in `tres_alloc_cnt` arrays.
    pub fn tres_cnt(&self) -> u32 {
        // SAFETY: a plain u32 global of slurmctld, read racily like Slurm itself does.
        unsafe { self.tres_cnt.read_volatile() }
    }

    /// Mark job data changed, so `squeue` clients refresh (`last_job_update = now`).
    /// Caller must hold the job write lock.
    pub fn touch_last_job_update(&self, _guard: &LockGuard, now: i64) {
        // SAFETY: written under the job write lock, as slurmctld does.
        unsafe { self.last_job_update.write_volatile(now as sys::time_t) };
    }
}

/// Held slurmctld locks; dropping releases them.
pub struct LockGuard {
    ctl: &'static Controller,
    levels: slurmctld_lock_t,
}

impl LockGuard {
    /// Visit every job record. The closure gets `&mut` because the caller holds at
    /// least a read lock; mutate only with a write lock.
    pub fn for_each_job(&self, mut f: impl FnMut(&mut job_record_t)) {
        // SAFETY: job_list is read under the lock we hold.
        let list = unsafe { *self.ctl.job_list };
        // SAFETY: a valid list (or NULL, handled) and a NULL-terminated iteration.
        unsafe { for_each(list, |p: *mut job_record_t| f(&mut *p)) };
    }

    /// True when this guard holds the job lock for writing.
    pub fn job_write(&self) -> bool {
        self.levels.job == sys::WRITE_LOCK
    }
}

impl std::fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let l = &self.levels;
        write!(
            f,
            "LockGuard(conf={} job={} node={} part={} fed={})",
            l.conf, l.job, l.node, l.part, l.fed
        )
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        // SAFETY: releases exactly the locks taken in `Controller::lock`.
        unsafe { (self.ctl.unlock)(self.levels) };
    }
}

/// Iterate a Slurm list of `T` pointers.
///
/// # Safety
/// `list` must be NULL or a valid Slurm list whose items are `*mut T`, not modified
/// concurrently (hold the lock protecting it).
pub unsafe fn for_each<T>(list: SlurmList, mut f: impl FnMut(*mut T)) {
    if list.is_null() {
        return;
    }
    // SAFETY: valid list per contract.
    let it: SlurmListIterator = unsafe { sys::list_iterator_create(list) };
    if it.is_null() {
        return;
    }
    loop {
        // SAFETY: valid iterator; returns NULL at the end.
        let item = unsafe { sys::list_next(it) };
        if item.is_null() {
            break;
        }
        f(item.cast());
    }
    // SAFETY: created above.
    unsafe { sys::list_iterator_destroy(it) };
}
