//! `job_submit/budget`: the submit side of slurm-budget's scheduling contract
//! (docs/design.md §5), loaded by `JobSubmitPlugins=budget`.
//!
//! Owns the exported C symbols (pinned to `slurm_ffi::api::job_submit` types) and the
//! translation between Slurm's `job_desc_msg_t` and the pure rules of [`validate`]:
//! - `job_submit`: parse and validate `min_runtime=` from `--comment`, apply the site
//!   default or refuse, refuse values above the site maximum or the job's time limit,
//!   force `requeue=1`, store the contract in `admin_comment`, refuse accounts without a
//!   budget (unless free tier, or in safe mode);
//! - `job_modify`: refuse user changes that would alter the stored contract.
//!
//! Both run under slurmctld's config/job/node/part read locks: no I/O, no locking. The
//! budget tree comes from the in-memory snapshot that this plugin's own background
//! thread keeps fresh ([`slurm_plugin_common::snapshot`]). Messages go back through
//! `err_msg` (allocated with Slurm's `xstrdup`), which `sbatch` prints.

pub mod validate;

use std::ffi::c_char;
use std::sync::{Arc, Mutex, OnceLock};

use policy_core::contract::parse_admin_comment;
use slurm_ffi::api::job_submit as api;
use slurm_ffi::sys::{self, job_desc_msg_t, job_record_t};
use slurm_ffi::{INFINITE, NO_VAL, NO_VAL16};
use slurm_plugin_common::cstr::{opt_string, xstrdup};
use slurm_plugin_common::settings::Settings;
use slurm_plugin_common::snapshot::{SnapshotCache, spawn_fetcher, unix_now};
use slurm_plugin_common::worker::Worker;
use slurm_plugin_common::{controller, ffi_guard, install_panic_hook, log};

use crate::validate::{ModifyRequest, RejectKind, Rejection, SubmitRequest};

// The symbols Slurm's loader reads; `JobSubmitPlugins=budget`.
slurm_plugin_common::plugin_symbols!(
    name: "Job submit budget plugin (slurm-budget)",
    type: "job_submit/budget",
);

/// What safe mode means for submissions (logged when entering it).
const SAFE_MODE_EFFECT: &str = "jobs naming accounts outside the budget tree are accepted; \
                                contracts are still validated against the last known policy";

fn cache() -> &'static Arc<SnapshotCache> {
    static CACHE: OnceLock<Arc<SnapshotCache>> = OnceLock::new();
    CACHE.get_or_init(|| Arc::new(SnapshotCache::new()))
}

static WORKER: Mutex<Option<Worker>> = Mutex::new(None);

/// `int init(void)`: called once at slurmctld start (and after a reconfigure that
/// changes JobSubmitPlugins). Starts the snapshot fetcher; touches no Slurm lock.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        log::set_prefix(PLUGIN_TYPE);
        install_panic_hook();
        let Ok(mut slot) = WORKER.lock() else {
            return sys::SLURM_ERROR;
        };
        if slot.is_none() {
            match spawn_fetcher(
                "budget-submit",
                Arc::clone(cache()),
                Settings::load_and_log(),
                SAFE_MODE_EFFECT,
            ) {
                Ok(w) => *slot = Some(w),
                Err(e) => {
                    // Without the thread we stay in safe mode: submissions still work.
                    log::error(&format!("cannot start snapshot thread: {e}; safe mode"));
                }
            }
        }
        log::loaded();
        sys::SLURM_SUCCESS
    })
}
const _: slurm_ffi::api::common::InitFn = init;

// `int fini(void)`: stop and join the fetcher before Slurm `dlclose`s us.
slurm_plugin_common::plugin_fini!(&WORKER);

fn is_privileged(uid: u32) -> bool {
    // SAFETY: slurm_conf is libslurmfull's global configuration; our callers hold the
    // config read lock, so it is not being replaced.
    let slurm_user = unsafe { sys::slurm_conf.slurm_user_id };
    uid == 0 || uid == slurm_user
}

fn minutes(m: u32) -> Option<i64> {
    (m != NO_VAL && m != INFINITE).then(|| i64::from(m) * 60)
}

/// The time limit Slurm will apply: `--time`, else the partition's `DefaultTime`, else
/// its `MaxTime`; the strictest over a multi-partition request. `None` = unlimited.
///
/// # Safety
/// `desc` is a valid job description; the caller holds the partition read lock.
unsafe fn effective_time_limit(desc: &job_desc_msg_t) -> Option<(i64, String)> {
    if desc.time_limit != NO_VAL {
        return minutes(desc.time_limit).map(|s| (s, "--time".to_string()));
    }
    // SAFETY: a string field of the caller's valid description.
    let wanted = unsafe { opt_string(desc.partition) };
    let mut best: Option<(i64, String)> = None;
    let Ok(ctl) = controller::Controller::get() else {
        return None;
    };
    let mut visit = |p: &sys::part_record_t, is_default: bool| {
        // SAFETY: the partition's name, valid under the partition lock.
        let name = unsafe { opt_string(p.name) }.unwrap_or_default();
        let selected = match &wanted {
            Some(w) => w.split(',').any(|x| x.trim() == name),
            None => is_default,
        };
        if !selected {
            return;
        }
        let limit = minutes(p.default_time)
            .map(|s| (s, format!("partition {name} DefaultTime")))
            .or_else(|| minutes(p.max_time).map(|s| (s, format!("partition {name} MaxTime"))));
        if let Some(l) = limit
            && best.as_ref().is_none_or(|b| l.0 < b.0)
        {
            best = Some(l);
        }
    };
    // SAFETY: job_submit and job_modify run with the partition read lock held.
    unsafe { ctl.for_each_partition(&mut visit) };
    best
}

fn error_code(kind: RejectKind) -> i32 {
    let code = match kind {
        RejectKind::BadContract => sys::ESLURM_INVALID_TIME_VALUE,
        RejectKind::TimeLimit => sys::ESLURM_INVALID_TIME_LIMIT,
        RejectKind::Account => sys::ESLURM_INVALID_ACCOUNT,
        RejectKind::NotRequeueable | RejectKind::Denied => sys::ESLURM_ACCESS_DENIED,
    };
    code as i32
}

/// Hand `r` to Slurm: log it and set `*err_msg` (xmalloc'ed; Slurm frees it).
fn refuse(r: &Rejection, err_msg: *mut *mut c_char, what: &str) -> i32 {
    log::verbose(&format!("{what} refused: {}", r.message));
    if !err_msg.is_null() {
        // SAFETY: err_msg points to a `char *` owned by the caller; replace (and free)
        // any earlier message so nothing leaks.
        unsafe {
            if !(*err_msg).is_null() {
                sys::slurm_xfree(err_msg.cast());
            }
            *err_msg = xstrdup(&r.message);
        }
    }
    error_code(r.kind)
}

/// # Safety
/// `desc` is Slurm's valid job description, under the locks `job_submit` runs with.
unsafe fn submit(desc: &mut job_desc_msg_t, uid: u32, err_msg: *mut *mut c_char) -> i32 {
    let now = unix_now();
    let policy = cache().policy();
    let fresh = cache().fresh(now);
    // SAFETY: string fields of the valid description, NULL or NUL-terminated.
    let (comment, admin_comment, account, partition, qos) = unsafe {
        (
            opt_string(desc.comment),
            opt_string(desc.admin_comment),
            opt_string(desc.account),
            opt_string(desc.partition),
            opt_string(desc.qos),
        )
    };
    let req = SubmitRequest {
        comment: comment.as_deref(),
        admin_comment: admin_comment.as_deref(),
        account: account.as_deref(),
        partition: partition.as_deref(),
        qos: qos.as_deref(),
        batch: !desc.script.is_null(),
        // SAFETY: forwarded contract (the partition read lock is held).
        time_limit: unsafe { effective_time_limit(desc) },
    };
    match validate::validate_submit(&req, &policy, fresh.as_ref().map(|s| &s.fair_share)) {
        Err(r) => refuse(&r, err_msg, &format!("submission by uid {uid}")),
        Ok(a) => {
            if let Some(n) = &a.note {
                log::verbose(n);
            }
            desc.requeue = 1;
            let new = xstrdup(&a.admin_comment);
            if new.is_null() {
                return sys::SLURM_ERROR;
            }
            if !desc.admin_comment.is_null() {
                // SAFETY: the field is xmalloc'ed by Slurm's unpacking; we own replacing it.
                unsafe { sys::slurm_xfree((&raw mut desc.admin_comment).cast()) };
            }
            desc.admin_comment = new;
            sys::SLURM_SUCCESS
        }
    }
}

/// # Safety
/// `desc` and `job` are Slurm's valid description and record, under the job lock.
unsafe fn modify(
    desc: &job_desc_msg_t,
    job: &job_record_t,
    uid: u32,
    err_msg: *mut *mut c_char,
) -> i32 {
    let policy = cache().policy();
    // SAFETY: string fields of the valid description and record, NULL or
    // NUL-terminated; qos_ptr is NULL or a valid QOS record while the job lock is held.
    let (comment, admin_comment, partition, qos, current_partition, current_qos, stored) = unsafe {
        (
            opt_string(desc.comment),
            opt_string(desc.admin_comment),
            opt_string(desc.partition),
            opt_string(desc.qos),
            opt_string(job.partition),
            job.qos_ptr.as_ref().and_then(|q| opt_string(q.name)),
            opt_string(job.admin_comment),
        )
    };
    let stored = stored.as_deref().and_then(parse_admin_comment);
    let req = ModifyRequest {
        privileged: is_privileged(uid),
        comment: comment.as_deref(),
        admin_comment: admin_comment.as_deref(),
        requeue: (desc.requeue != NO_VAL16).then_some(desc.requeue),
        partition: partition.as_deref(),
        qos: qos.as_deref(),
        stored,
        current_partition: current_partition.as_deref(),
        current_qos: current_qos.as_deref(),
    };
    match validate::validate_modify(&req, &policy) {
        Ok(()) => sys::SLURM_SUCCESS,
        Err(r) => refuse(
            &r,
            err_msg,
            &format!("update of job {} by uid {uid}", job.job_id),
        ),
    }
}

/// `int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)`.
///
/// # Safety
/// `job_desc` is NULL or a valid job description owned by the caller, `err_msg` NULL or
/// a valid `char **`; slurmctld holds job_submit's locks (Slurm's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> i32 {
    // A panic must not reject every job: accept (Slurm's own checks still run).
    ffi_guard(sys::SLURM_SUCCESS, || {
        // SAFETY: Slurm passes a valid, exclusively owned job description.
        match unsafe { job_desc.as_mut() } {
            // SAFETY: as above, under job_submit's locks.
            Some(desc) => unsafe { submit(desc, submit_uid, err_msg) },
            None => sys::SLURM_SUCCESS,
        }
    })
}
const _: api::SubmitFn = job_submit;

/// `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid)` (22.05).
///
/// # Safety
/// NULL or valid pointers from slurmctld's `update_job`, under the job write lock.
#[cfg(not(slurm_23_02))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut job_record_t,
    submit_uid: u32,
) -> i32 {
    ffi_guard(sys::SLURM_SUCCESS, || {
        // SAFETY: valid pointers from slurmctld's update_job, under the job lock.
        match unsafe { (job_desc.as_ref(), job_ptr.as_ref()) } {
            // 22.05 has no err_msg here: the user sees the error code's text only.
            // SAFETY: as above.
            (Some(d), Some(j)) => unsafe { modify(d, j, submit_uid, std::ptr::null_mut()) },
            _ => sys::SLURM_SUCCESS,
        }
    })
}

/// `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t, char **err_msg)` (23.02+).
///
/// # Safety
/// NULL or valid pointers from slurmctld's `update_job`, under the job write lock;
/// `err_msg` NULL or a valid `char **`.
#[cfg(slurm_23_02)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_modify(
    job_desc: *mut job_desc_msg_t,
    job_ptr: *mut job_record_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> i32 {
    ffi_guard(sys::SLURM_SUCCESS, || {
        // SAFETY: valid pointers from slurmctld's update_job, under the job lock.
        match unsafe { (job_desc.as_ref(), job_ptr.as_ref()) } {
            // SAFETY: as above.
            (Some(d), Some(j)) => unsafe { modify(d, j, submit_uid, err_msg) },
            _ => sys::SLURM_SUCCESS,
        }
    })
}
const _: api::ModifyFn = job_modify;
