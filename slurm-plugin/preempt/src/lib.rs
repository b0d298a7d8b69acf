//! `preempt/budget`: who may preempt whom under slurm-budget (docs/design.md §6), loaded by
//! `PreemptType=preempt/budget` with `PreemptMode=REQUEUE`.
//!
//! Slurm's own machinery does the preempting (candidate search, `select/cons_tres`
//! fitting, GraceTime, requeue); this plugin only answers its questions, with the rule
//! of `policy_core::preempt` evaluated on the job records and the in-memory snapshot:
//! - `preempt_p_preemptable(preemptee, preemptor)`: [`policy_core::preempt::may_preempt`]
//!   (protected window of the current run, free tier, over budget, hierarchical
//!   rebalancing with hysteresis and current holdings), plus drains: a job on a node
//!   listed in the snapshot's drains may be taken by any non-free job once its window
//!   is over. In safe mode (no fresh snapshot) only free-tier jobs yield.
//! - `PREEMPT_DATA_PRIO`: [`policy_core::preempt::victim_order`] (free first, most over
//!   share, youngest run); `MODE`: always REQUEUE; `GRACE_TIME`: the victim partition's
//!   `GraceTime` (slurm.conf), so sites set it where jobs checkpoint on SIGTERM.
//! - `preempt_p_job_preempt_check` (also the pending-queue comparator): true only for a
//!   non-free job against a free one. Anything snapshot-dependent could change between
//!   two comparisons of one sort (the fetcher swaps snapshots concurrently) and break
//!   the sort's strict weak order; tier/rank order among pending jobs is the priority
//!   plugin's job.
//!
//! Every hook runs under slurmctld's job lock: no I/O, no locking, and no walk of
//! `job_list` (Slurm calls `preemptable` from inside a `list_for_each` over it). Holdings
//! (GPUs held per tree node by running non-free jobs) are computed by a background
//! thread under the job read lock whenever `last_job_update` or the snapshot changes.

#![allow(non_upper_case_globals)]
// The exports are C entry points: Slurm hands us raw pointers by contract, and they
// cannot be `unsafe fn` without changing the ABI type they are pinned to.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub mod jobs;
pub mod report;
pub mod rule;

use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use slurm_ffi::api::preempt as api;
use slurm_ffi::sys::{self, job_queue_rec_t, job_record_t};
use slurm_plugin_common::snapshot::{SnapshotCache, spawn_fetcher, unix_now};
use slurm_plugin_common::worker::Worker;
use slurm_plugin_common::{controller, ffi_guard, install_panic_hook, log};

use crate::jobs::{UserCache, facts, is_running, lookup_uid};
use crate::rule::{Holdings, decide};

/// Human-readable plugin name (Slurm reads the bytes of this symbol).
#[unsafe(no_mangle)]
pub static plugin_name: [u8; 37] = *b"Preempt budget plugin (slurm-budget)\0";
/// `PreemptType=preempt/budget`.
#[unsafe(no_mangle)]
pub static plugin_type: [u8; 15] = *b"preempt/budget\0";
/// Must equal the loading Slurm's SLURM_VERSION_NUMBER (major.minor.micro).
#[unsafe(no_mangle)]
pub static plugin_version: u32 = slurm_ffi::SLURM_VERSION_NUMBER;

const PLUGIN_TYPE: &str = "preempt/budget";

struct Plugin {
    snapshots: Arc<SnapshotCache>,
    users: Arc<UserCache>,
    holdings: Mutex<Option<Arc<Holdings>>>,
    workers: Mutex<Vec<Worker>>,
    /// Allowed preemptions awaiting confirmation (see `report`).
    pending: report::Pending,
}

fn plugin() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| Plugin {
        snapshots: Arc::new(SnapshotCache::new()),
        users: Arc::new(UserCache::default()),
        holdings: Mutex::new(None),
        workers: Mutex::new(Vec::new()),
        pending: report::Pending::default(),
    })
}

/// `int init(void)`: starts the snapshot fetcher and the uid resolver. No Slurm locks.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        log::set_prefix(PLUGIN_TYPE);
        install_panic_hook();
        let p = plugin();
        let Ok(mut workers) = p.workers.lock() else {
            return sys::SLURM_ERROR;
        };
        if workers.is_empty() {
            match spawn_fetcher("budget-preempt", Arc::clone(&p.snapshots)) {
                Ok(w) => workers.push(w),
                Err(e) => log::error(&format!("cannot start snapshot thread: {e}; safe mode")),
            }
            let mut reporter: Option<budget_client::Client> = None;
            match Worker::spawn("budget-holdings", Duration::from_secs(1), move || {
                refresh_holdings(plugin());
                report_preemptions(plugin(), &mut reporter);
            }) {
                Ok(w) => workers.push(w),
                Err(e) => log::error(&format!("cannot start holdings thread: {e}; safe mode")),
            }
        }
        // SAFETY: slurm_conf is filled before plugins load; read-only here.
        let mode = unsafe { sys::slurm_conf.preempt_mode };
        if u32::from(mode) & sys::PREEMPT_MODE_REQUEUE == 0 {
            log::error(&format!(
                "PreemptMode=0x{mode:x} does not include REQUEUE: preempt/budget always answers \
                 REQUEUE; set PreemptMode=REQUEUE so slurm.conf says what happens"
            ));
        }
        log::info(&format!(
            "loaded: slurm-budget {} for Slurm {}",
            env!("CARGO_PKG_VERSION"),
            slurm_ffi::version::version_string(slurm_ffi::SLURM_VERSION_NUMBER)
        ));
        sys::SLURM_SUCCESS
    })
}

/// `void fini(void)`: stop and join our threads before Slurm `dlclose`s us.
#[unsafe(no_mangle)]
pub extern "C" fn fini() -> i32 {
    ffi_guard(sys::SLURM_SUCCESS, || {
        let workers = match plugin().workers.lock() {
            Ok(mut g) => std::mem::take(&mut *g),
            Err(p) => std::mem::take(&mut *p.into_inner()),
        };
        for mut w in workers {
            w.stop();
        }
        sys::SLURM_SUCCESS
    })
}

fn last_job_update() -> Option<i64> {
    unsafe extern "C" {
        fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    }
    // SAFETY: dlsym(RTLD_DEFAULT, name) only looks a symbol up.
    let p =
        unsafe { dlsym(std::ptr::null_mut(), c"last_job_update".as_ptr()) } as *const sys::time_t;
    // SAFETY: a time_t global of slurmctld; a racy read only delays a refresh by a tick.
    (!p.is_null()).then(|| unsafe { p.read_volatile() })
}

/// Background refresh of the holdings (GPUs held per tree node by running jobs).
///
/// Why not in the callback: Slurm calls `preempt_p_preemptable` from inside
/// `list_for_each(job_list, ...)`, which holds `job_list`'s own list lock; walking
/// `job_list` again there makes `list_iterator_create` fail with EDEADLK and slurmctld
/// `fatal()`s (measured on 22.05.8). So this thread takes the job *read* lock for one
/// short walk (no I/O under it) whenever `last_job_update` or the snapshot changed, and
/// callbacks read the result: at most one tick (1 s) old.
fn refresh_holdings(p: &Plugin) {
    // Names first, with no Slurm lock held (NSS may block).
    p.users.resolve_misses(lookup_uid);
    let now = unix_now();
    let snap = p.snapshots.fresh(now);
    let Some(stamp) = last_job_update() else {
        return;
    };
    let current = match p.holdings.lock() {
        Ok(g) => g.clone(),
        Err(_) => return,
    };
    if current
        .as_ref()
        .is_some_and(|h| h.matches(stamp, snap.as_ref()))
    {
        return;
    }
    let Ok(ctl) = controller::Controller::get() else {
        return;
    };
    let default_min = p.snapshots.policy().default_min_runtime_secs;
    let mut running = Vec::new();
    {
        let guard = ctl.job_read_lock();
        guard.for_each_job(|job| {
            if is_running(job) {
                running.push(facts(job, &p.users, default_min));
            }
        });
    }
    let h = Arc::new(Holdings::compute(stamp, snap, running));
    if let Ok(mut g) = p.holdings.lock() {
        *g = Some(h);
    }
}

/// Confirm remembered preemptions against the job records (read lock, one walk, only
/// when something is remembered) and post them to budgetd after the lock is released.
fn report_preemptions(p: &Plugin, client: &mut Option<budget_client::Client>) {
    use std::collections::{HashMap, HashSet};
    let watched: HashSet<u32> = p.pending.watched().into_iter().collect();
    if watched.is_empty() {
        return;
    }
    let Ok(ctl) = controller::Controller::get() else {
        return;
    };
    let mut seen = HashMap::new();
    {
        let guard = ctl.job_read_lock();
        guard.for_each_job(|job| {
            if watched.contains(&job.job_id) {
                seen.insert(
                    job.job_id,
                    report::Seen {
                        restart_cnt: u32::from(job.restart_cnt),
                        running: is_running(job),
                        pending: slurm_ffi::job_state::is_pending(job.job_state),
                        start: job.start_time,
                    },
                );
            }
        });
    }
    let now = unix_now();
    let confirmed = p.pending.resolve(&seen, now);
    if confirmed.is_empty() {
        return;
    }
    if client.is_none() {
        let (cfg, _) = slurm_plugin_common::snapshot::FetcherConfig::load();
        match budget_client::Endpoint::parse(&cfg.endpoint) {
            Ok(ep) => *client = Some(budget_client::Client::new(ep).with_timeout(cfg.timeout)),
            Err(e) => {
                log::error(&format!(
                    "cannot report preemptions to {:?}: {e}",
                    cfg.endpoint
                ));
                return;
            }
        }
    }
    let Some(c) = client.as_ref() else { return };
    for x in confirmed {
        let body = x.body(now);
        let sent = c.request(
            "POST",
            "/v1/preemptions",
            &[("Content-Type", "application/json")],
            Some(body.as_bytes()),
        );
        match sent {
            Ok(r) if r.is_success() => log::info(&format!(
                "job {} run {} preempted by job {} ({}); recorded",
                x.victim, x.c.run, x.c.preemptor, x.c.reason
            )),
            Ok(r) => log::error(&format!(
                "budgetd refused a preemption record: HTTP {}",
                r.status
            )),
            Err(e) => log::error(&format!(
                "cannot record preemption of job {}: {e}",
                x.victim
            )),
        }
    }
}

/// The latest holdings if they were computed from a still-fresh snapshot; `None` means
/// safe mode (free-tier victims only).
fn current_holdings(now: i64) -> Option<Arc<Holdings>> {
    let p = plugin();
    let h = p.holdings.lock().ok()?.clone()?;
    (h.has_snapshot() && p.snapshots.fresh(now).is_some()).then_some(h)
}

fn preemptable(victim: &job_record_t, preemptor: &job_record_t) -> bool {
    if !is_running(victim) {
        return false;
    }
    let now = unix_now();
    let p = plugin();
    let default_min = p.snapshots.policy().default_min_runtime_secs;
    let policy = p.snapshots.policy();
    let v = facts(victim, &p.users, default_min);
    let r = facts(preemptor, &p.users, default_min);
    let h = current_holdings(now);
    let decision = decide(h.as_deref(), &policy, &r, &v, now);
    if let Ok(allowed) = &decision {
        p.pending.remember(
            v.job_id,
            report::Candidate {
                run: u32::from(victim.restart_cnt),
                preemptor: r.job_id,
                reason: report::reason_of(allowed.as_ref()),
                at: now,
                account: v.account.clone(),
                user: v.user.clone(),
                gpus: v.gpus,
                start: v.run_start,
            },
        );
    }
    if decision.is_ok() {
        log::debug(&format!(
            "job {} may preempt job {}: {decision:?}",
            r.job_id, v.job_id
        ));
    }
    decision.is_ok()
}

fn victim_prio(job: &job_record_t) -> u32 {
    let now = unix_now();
    let p = plugin();
    let snap = p.snapshots.fresh(now);
    let v = facts(job, &p.users, p.snapshots.policy().default_min_runtime_secs);
    policy_core::preempt::victim_order(snap.as_ref().map(|s| &s.fair_share), &v.view(), now)
}

fn grace_time(job: &job_record_t) -> u32 {
    // SAFETY: part_ptr is NULL or a valid partition record under the job lock.
    unsafe { job.part_ptr.as_ref() }
        .map(|p| p.grace_time)
        .unwrap_or(0)
}

const MODE: u16 = sys::PREEMPT_MODE_REQUEUE as u16;

/// `bool preempt_p_preemptable(job_record_t *preemptee, job_record_t *preemptor)`.
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_preemptable(
    preemptee: *mut job_record_t,
    preemptor: *mut job_record_t,
) -> bool {
    // On a panic: not preemptable (never break a contract by accident).
    ffi_guard(false, || {
        // SAFETY: valid job records from slurmctld, under the job lock.
        match unsafe { (preemptee.as_ref(), preemptor.as_ref()) } {
            (Some(v), Some(p)) => preemptable(v, p),
            _ => false,
        }
    })
}
const _: api::PreemptableFn = preempt_p_preemptable;

/// `bool preempt_p_job_preempt_check(job_queue_rec_t *preemptor, job_queue_rec_t *preemptee)`.
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_job_preempt_check(
    preemptor: *mut job_queue_rec_t,
    preemptee: *mut job_queue_rec_t,
) -> bool {
    ffi_guard(false, || {
        // SAFETY: valid queue records whose job_ptr is a valid job record (job lock held).
        let job = |q: *mut job_queue_rec_t| unsafe { q.as_ref().and_then(|q| q.job_ptr.as_ref()) };
        match (job(preemptor), job(preemptee)) {
            (Some(a), Some(b)) => {
                let users = &plugin().users;
                // Only the stored free-tier flag: fixed per job, so a strict weak order.
                !facts(a, users, 0).contract.free_tier && facts(b, users, 0).contract.free_tier
            }
            _ => false,
        }
    })
}
const _: api::JobPreemptCheckFn = preempt_p_job_preempt_check;

/// `int preempt_p_get_data(job_record_t *job, slurm_preempt_data_type_t type, void *data)`.
#[cfg(not(slurm_25_05))]
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_get_data(
    job_ptr: *mut job_record_t,
    data_type: sys::slurm_preempt_data_type_t,
    data: *mut c_void,
) -> i32 {
    ffi_guard(sys::SLURM_ERROR, || {
        if data.is_null() {
            return sys::SLURM_ERROR;
        }
        // SAFETY: NULL (ENABLED) or a valid job record under the job lock.
        let job = unsafe { job_ptr.as_ref() };
        // SAFETY (all writes): Slurm passes a pointer to the type the data kind names.
        match data_type {
            sys::PREEMPT_DATA_ENABLED => {
                // SAFETY: slurm_conf is read-only while the job lock is held.
                let on = unsafe { sys::slurm_conf.preempt_mode } != sys::PREEMPT_MODE_OFF as u16;
                unsafe { *data.cast::<bool>() = on };
            }
            sys::PREEMPT_DATA_MODE => unsafe { *data.cast::<u16>() = MODE },
            sys::PREEMPT_DATA_PRIO => {
                let prio = job.map(victim_prio).unwrap_or(u32::MAX);
                unsafe { *data.cast::<u32>() = prio };
            }
            sys::PREEMPT_DATA_GRACE_TIME => {
                let g = job.map(grace_time).unwrap_or(0);
                unsafe { *data.cast::<u32>() = g };
            }
            other => {
                log::error(&format!("get_data: unknown data type {other}"));
                return sys::SLURM_ERROR;
            }
        }
        sys::SLURM_SUCCESS
    })
}
#[cfg(not(slurm_25_05))]
const _: api::GetDataFn = preempt_p_get_data;

/// `uint32_t preempt_p_get_grace_time(job_record_t *job)` (25.05+).
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_get_grace_time(job_ptr: *mut job_record_t) -> u32 {
    // SAFETY: valid job record under the job lock.
    ffi_guard(0, || {
        unsafe { job_ptr.as_ref() }.map(grace_time).unwrap_or(0)
    })
}
#[cfg(slurm_25_05)]
const _: api::GetGraceTimeFn = preempt_p_get_grace_time;

/// `uint16_t preempt_p_get_mode(job_record_t *job)` (25.05+).
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_get_mode(_job_ptr: *mut job_record_t) -> u16 {
    MODE
}
#[cfg(slurm_25_05)]
const _: api::GetModeFn = preempt_p_get_mode;

/// `uint32_t preempt_p_get_prio(job_record_t *job)` (25.05+).
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub extern "C" fn preempt_p_get_prio(job_ptr: *mut job_record_t) -> u32 {
    // SAFETY: valid job record under the job lock.
    ffi_guard(u32::MAX, || {
        unsafe { job_ptr.as_ref() }
            .map(victim_prio)
            .unwrap_or(u32::MAX)
    })
}
#[cfg(slurm_25_05)]
const _: api::GetPrioFn = preempt_p_get_prio;
