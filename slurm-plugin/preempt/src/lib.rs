//! `preempt/budget`: who may preempt whom under slurm-budget (docs/design.md §6), loaded by
//! `PreemptType=preempt/budget` with `PreemptMode=REQUEUE`.
//!
//! Slurm's own machinery does the preempting (candidate search, `select/cons_tres`
//! fitting, GraceTime, requeue); this plugin only answers its questions, with the rule
//! of `policy_core::rebalance` (the simulator's and `budgetd`'s too) evaluated on the
//! job records, the period state and the in-memory snapshot:
//! - `preempt_p_preemptable(preemptee, preemptor)`: [`policy_core::rebalance::decide`]
//!   (protected window of the current run, free tier, the site's partition order:
//!   the two partitions' `PriorityTier`, read from `part_ptr->priority_tier`, as
//!   `preempt/partition_prio` compares them, a lower tier never taking a higher one
//!   and a higher one taking a lower one past its window whatever the budgets say;
//!   the site's QOS order: each job's QOS (`qos_ptr`: id, name and the `Preempt=`
//!   bit string `preempt_bitstr`, read in place as `preempt/qos` tests it,
//!   [`jobs::preempt_words`]), a QOS listed by the victim's never taking it and
//!   one listing the victim's taking it past its window whatever the budgets say;
//!   either order's refusal before either's allowance;
//!   within one tier and no QOS relation the cost-aware rule: a
//!   budgeted job takes another team's job only when turnover at the running jobs'
//!   time limits will not deliver its side's entitlement in time, within requeue,
//!   lost-work, reverse-lock and site caps; [`rule`]), with the victims and
//!   preemptors already allowed since the state was computed counted ([`rule::Grants`]),
//!   plus drains: a job on a node listed in the snapshot's drains may be taken by any
//!   non-free job once its window is over. In safe mode (no fresh snapshot) only
//!   free-tier jobs yield. A job whose partition has `PreemptMode=OFF` is never a
//!   victim, whoever asks (drains included), as `preempt/partition_prio` refuses it.
//! - `PREEMPT_DATA_PRIO`: [`policy_core::rebalance::victim_priority`] (free first, least
//!   work lost: checkpoint-aware, then most over share); `MODE` (`get_mode` 25.05+):
//!   the job's partition's `PreemptMode` where it sets one, else the global one, as
//!   `preempt/partition_prio` answers ([`preempt_mode`]);
//!   `GRACE_TIME`: the victim partition's `GraceTime` (slurm.conf), so sites set it
//!   where jobs checkpoint on SIGTERM.
//! - `preempt_p_job_preempt_check` (also the pending-queue comparator): true only for a
//!   non-free job against a free one. Anything snapshot-dependent could change between
//!   two comparisons of one sort (the fetcher swaps snapshots concurrently) and break
//!   the sort's strict weak order; tier/rank order among pending jobs is the priority
//!   plugin's job.
//!
//! Every hook runs under slurmctld's job lock: no I/O, no locking, and no walk of
//! `job_list` (Slurm calls `preemptable` from inside a `list_for_each` over it). The
//! period state (holdings, demand, time-limit forecast per tree node) is computed by a
//! background thread under the job read lock whenever `last_job_update` or the snapshot
//! changes, at most once a second; the same thread settles the grants, and once per
//! load seeds their history of rebalancing preemptions from budgetd's record, so that
//! a restarted `slurmctld` keeps the window's site cap, lost-work budgets and reverse
//! locks (`seed_history`).

pub mod jobs;
pub mod report;
pub mod rule;

#[cfg(not(slurm_25_05))]
use std::ffi::c_void;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwapOption;
use budget_protocol::preemption::{self, PreemptionReason, PreemptionReport, RecordOutcome};
use slurm_ffi::api::preempt as api;
use slurm_ffi::sys::{self, job_queue_rec_t, job_record_t};
use slurm_plugin_common::settings::{LazyClient, Settings};
use slurm_plugin_common::snapshot::{SnapshotCache, spawn_fetcher, unix_now};
use slurm_plugin_common::users::{UserCache, lookup_uid};
use slurm_plugin_common::worker::Worker;
use slurm_plugin_common::{controller, ffi_guard, install_panic_hook, log};

use policy_core::fairshare::Tier;
use policy_core::rebalance::{Allowed, Clause, Denied};

use crate::jobs::{JobFacts, facts, is_running};
use crate::rule::{Grants, JobNow, Period, decide};

// The symbols Slurm's loader reads; `PreemptType=preempt/budget`.
slurm_plugin_common::plugin_symbols!(
    name: "Preempt budget plugin (slurm-budget)",
    type: "preempt/budget",
);

/// What safe mode means for preemption (logged when entering it).
const SAFE_MODE_EFFECT: &str = "contracts still honoured, budgeted jobs not rebalanced, \
                                free-tier jobs still preemptable";

struct Plugin {
    snapshots: Arc<SnapshotCache>,
    users: UserCache,
    holdings: ArcSwapOption<Period>,
    /// What the callbacks allowed since the period state was computed.
    grants: Mutex<Grants>,
    /// When the site cap last refused a preemption (logged once per period state).
    cap_logged: Mutex<i64>,
    workers: Mutex<Vec<Worker>>,
    /// Allowed preemptions awaiting confirmation (see `report`).
    pending: report::Pending,
    /// Whether the history was seeded from budgetd's record (`seed_history`).
    seed: Mutex<HistorySeed>,
}

/// Seeding the rebalancing history once per load (`seed_history`).
#[derive(Debug, Default)]
struct HistorySeed {
    /// When this load started (`init`): records from then on may be its own
    /// (`Grants::seed`).
    loaded_at: i64,
    done: bool,
    /// Last attempt, so that an unreachable budgetd is asked every
    /// `SEED_RETRY_SECS`, not every second.
    tried_at: i64,
}

const SEED_RETRY_SECS: i64 = 30;

fn plugin() -> &'static Plugin {
    static P: OnceLock<Plugin> = OnceLock::new();
    P.get_or_init(|| Plugin {
        snapshots: Arc::new(SnapshotCache::new()),
        users: UserCache::default(),
        holdings: ArcSwapOption::empty(),
        grants: Mutex::new(Grants::default()),
        cap_logged: Mutex::new(0),
        workers: Mutex::new(Vec::new()),
        pending: report::Pending::default(),
        seed: Mutex::new(HistorySeed::default()),
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
            if let Ok(mut seed) = p.seed.lock() {
                *seed = HistorySeed {
                    loaded_at: unix_now(),
                    ..HistorySeed::default()
                };
            }
            let settings = Settings::load_and_log();
            // Made on the holdings thread at its first report (it may read the token file).
            let mut reporter = LazyClient::new(&settings);
            match spawn_fetcher(
                "budget-preempt",
                Arc::clone(&p.snapshots),
                settings.clone(),
                SAFE_MODE_EFFECT,
            ) {
                Ok(w) => workers.push(w),
                Err(e) => log::error(&format!("cannot start snapshot thread: {e}; safe mode")),
            }
            match Worker::spawn("budget-holdings", Duration::from_secs(1), move || {
                seed_history(plugin(), &mut reporter);
                settle_grants(plugin());
                refresh_holdings(plugin());
                report_preemptions(plugin(), &mut reporter);
            }) {
                Ok(w) => workers.push(w),
                Err(e) => log::error(&format!("cannot start holdings thread: {e}; safe mode")),
            }
        }
        // SAFETY: slurm_conf is filled before plugins load; read-only here.
        let mode = unsafe { sys::slurm_conf.preempt_mode };
        if mode & STOP_BITS != sys::PREEMPT_MODE_REQUEUE as u16 {
            log::error(&format!(
                "PreemptMode=0x{mode:x} is not REQUEUE: jobs of partitions without a \
                 PreemptMode of their own are stopped that way when preempted (as \
                 preempt/partition_prio does); preempt/budget is made for REQUEUE (a \
                 cancelled victim's job ends for good), set PreemptMode=REQUEUE"
            ));
        }
        log::loaded();
        sys::SLURM_SUCCESS
    })
}
const _: slurm_ffi::api::common::InitFn = init;

// `void fini(void)`: stop and join our threads before Slurm `dlclose`s us.
slurm_plugin_common::plugin_fini!(&plugin().workers);

/// Background refresh of the period state (holdings, demand, forecast).
///
/// Why not in the callback: Slurm calls `preempt_p_preemptable` from inside
/// `list_for_each(job_list, ...)`, which holds `job_list`'s own list lock; walking
/// `job_list` again there makes `list_iterator_create` fail with EDEADLK and slurmctld
/// `fatal()`s (measured on 22.05.8). So this thread takes the job *read* lock for one
/// short walk (no I/O under it) whenever `last_job_update` or the snapshot changed, and
/// callbacks read the result: at most one tick (1 s) old, which is why the callbacks
/// count what they allowed meanwhile ([`Grants`]).
fn refresh_holdings(p: &Plugin) {
    // Names first, with no Slurm lock held (NSS may block).
    p.users.resolve_misses(lookup_uid);
    let now = unix_now();
    let snap = p.snapshots.fresh(now);
    let Ok(ctl) = controller::Controller::get() else {
        return;
    };
    let stamp = ctl.last_job_update();
    if p.holdings
        .load()
        .as_ref()
        .is_some_and(|h| h.matches(stamp, snap.as_ref()))
    {
        return;
    }
    let default_min = p.snapshots.policy().default_min_runtime_secs;
    let mut jobs = Vec::new();
    {
        let guard = ctl.job_read_lock();
        guard.for_each_job(|job| {
            if is_running(job) || slurm_ffi::job_state::is_pending(job.job_state) {
                // SAFETY: a valid record, read under the job read lock `guard` holds.
                jobs.push(unsafe { facts(job, &p.users, default_min) });
            }
        });
    }
    let history = match p.grants.lock() {
        Ok(g) => g.history(),
        Err(_) => Vec::new(),
    };
    p.holdings.store(Some(Arc::new(Period::compute(
        stamp, snap, &jobs, &history, now,
    ))));
}

/// Once per load, when a snapshot says what the window is: the rebalancing
/// preemptions budgetd recorded in the window that this load does not hold, into the
/// grants' history. Without them a restarted `slurmctld` would start the site
/// cap, the lost-work budgets and the reverse locks from none (the history is
/// in memory). No Slurm lock; an unreachable budgetd is retried every
/// `SEED_RETRY_SECS`, and preemptions meanwhile are this load's own (in memory).
fn seed_history(p: &Plugin, client: &mut LazyClient) {
    let now = unix_now();
    let (loaded_at, window) = {
        let Ok(mut s) = p.seed.lock() else { return };
        if s.done || now - s.tried_at < SEED_RETRY_SECS {
            return;
        }
        // The window is the snapshot's: nothing is tried before the first one.
        let Some(window) = p.snapshots.latest().map(|snap| snap.policy.window_secs) else {
            return;
        };
        s.tried_at = now;
        (s.loaded_at, window)
    };
    let since = now - window + 1;
    let report: PreemptionReport = match client.get().and_then(|c| {
        c.get_json(&format!("{}?since={since}", preemption::ROUTE))
            .map_err(|e| e.to_string())
    }) {
        Ok(r) => r,
        Err(e) => {
            log::error(&format!(
                "cannot read the preemption record ({e}); retrying in {SEED_RETRY_SECS}s; \
                 until then the site cap and lost-work budgets count this load's preemptions only"
            ));
            return;
        }
    };
    let earlier: Vec<rule::Past> = report
        .rows
        .iter()
        .filter_map(rule::Past::from_record)
        .collect();
    let added = match p.grants.lock() {
        Ok(mut g) => g.seed(earlier, loaded_at, now, window),
        Err(_) => return,
    };
    if let Ok(mut s) = p.seed.lock() {
        s.done = true;
    }
    log::info(&format!(
        "rebalance history: {added} preemption(s) of the last window from budgetd's record \
         (the site cap, lost-work budgets and reverse locks count them)"
    ));
}

/// Settles the grants against the job records (read lock, one walk, only when
/// something is in flight): a victim Slurm requeued becomes a rebalancing
/// preemption of the history, the rest expire (`rule::Grants::settle`).
fn settle_grants(p: &Plugin) {
    use std::collections::{HashMap, HashSet};
    let watched: HashSet<u32> = match p.grants.lock() {
        Ok(g) if !g.idle() => g.watched().into_iter().collect(),
        _ => return,
    };
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
                    JobNow {
                        running: is_running(job),
                        pending: slurm_ffi::job_state::is_pending(job.job_state),
                        restart_cnt: u32::from(job.restart_cnt),
                        ended_preempted: ended_preempted(job),
                    },
                );
            }
        });
    }
    let now = unix_now();
    let window = p.snapshots.policy().window_secs;
    let done = match p.grants.lock() {
        Ok(mut g) => g.settle(&seen, now, window),
        Err(_) => return,
    };
    for d in done {
        log::info(&format!(
            "rebalance: job {} ({}/{}) requeued for {}/{}; {:.2} GPU-h lost",
            d.victim,
            d.victim_account,
            d.victim_user,
            d.preemptor_account,
            d.preemptor_user,
            d.lost_gpu_secs / 3600.0
        ));
    }
}

/// Whether `job` ended in state PREEMPTED: Slurm cancelled it to preempt it
/// (`PreemptMode=CANCEL`, or a job it could not requeue); a requeued victim is
/// pending instead.
fn ended_preempted(job: &job_record_t) -> bool {
    slurm_ffi::job_state::base(job.job_state) == sys::JOB_PREEMPTED
}

/// Confirm remembered preemptions against the job records (read lock, one walk, only
/// when something is remembered) and post them to budgetd after the lock is released.
fn report_preemptions(p: &Plugin, client: &mut LazyClient) {
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
                        ended_preempted: ended_preempted(job),
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
    let c = match client.get() {
        Ok(c) => c,
        Err(e) => {
            log::error(&format!("cannot report preemptions: {e}"));
            return;
        }
    };
    for x in confirmed {
        match c.post_json::<_, RecordOutcome>(preemption::ROUTE, &x.record(now)) {
            Ok(out) => log::info(&format!(
                "job {} run {} preempted by job {} ({}); {}",
                x.victim,
                x.c.run,
                x.c.preemptor,
                x.c.reason,
                if out.inserted {
                    "recorded"
                } else {
                    "already recorded"
                }
            )),
            Err(e) if e.status().is_some() => {
                log::error(&format!("budgetd refused a preemption record: {e}"))
            }
            Err(e) => log::error(&format!(
                "cannot record preemption of job {}: {e}",
                x.victim
            )),
        }
    }
}

/// The latest holdings if they were computed from a still-fresh snapshot; `None` means
/// safe mode (free-tier victims only).
fn current_holdings(now: i64) -> Option<Arc<Period>> {
    let p = plugin();
    let h = p.holdings.load_full()?;
    (h.has_snapshot() && p.snapshots.fresh(now).is_some()).then_some(h)
}

/// # Safety
/// Both records must be valid, under the job lock (every preempt hook holds it).
unsafe fn preemptable(victim: &job_record_t, preemptor: &job_record_t) -> bool {
    if !is_running(victim) {
        log::debug(&format!(
            "job {} not a victim of job {}: not running (state 0x{:x})",
            victim.job_id, preemptor.job_id, victim.job_state
        ));
        return false;
    }
    let now = unix_now();
    let p = plugin();
    let policy = p.snapshots.policy();
    let default_min = policy.default_min_runtime_secs;
    // SAFETY: forwarded contract.
    let (v, r) = unsafe {
        (
            facts(victim, &p.users, default_min),
            facts(preemptor, &p.users, default_min),
        )
    };
    let h = current_holdings(now);
    let decision = match p.grants.lock() {
        Ok(mut g) => decide(h.as_deref(), &mut g, &r, &v, now),
        // A poisoned lock: never break a contract by accident.
        Err(_) => return false,
    };
    if let (
        Err(Denied::SiteCap {
            preemptions,
            lost_gpu_hours,
        }),
        Some(h),
    ) = (&decision, h.as_deref())
        && let Ok(mut last) = p.cap_logged.lock()
        && *last != h.state().at
    {
        *last = h.state().at;
        log::info(&format!(
            "site cap reached: job {} not preempted for job {} ({preemptions} rebalancing \
             preemptions, {lost_gpu_hours:.2} GPU-h lost in the window)",
            v.job_id, r.job_id
        ));
    }
    if let Ok(allowed) = &decision {
        p.pending.remember(
            v.job_id,
            report::Candidate {
                run: u32::from(victim.restart_cnt),
                preemptor: r.job_id,
                reason: reason_of(allowed.as_ref(), h.as_deref(), &v),
                at: now,
                account: v.account.clone(),
                user: v.user.clone(),
                gpus: v.gpus,
                start: v.run_start,
            },
        );
    }
    // Debug level (SlurmctldDebug=debug): why each candidate was or was not taken.
    log::debug(&format!(
        "job {} {} job {}: {decision:?} (victim: {} GPUs, run start {})",
        r.job_id,
        if decision.is_ok() {
            "may preempt"
        } else {
            "may not preempt"
        },
        v.job_id,
        v.gpus,
        v.run_start
    ));
    decision.is_ok()
}

/// The preemption record's reason for what the rule allowed (`None`: a drain):
/// a rebalancing that takes a job of an over-budget path is `over_budget`, as
/// the previous rule recorded it.
fn reason_of(a: Option<&Allowed>, h: Option<&Period>, v: &JobFacts) -> PreemptionReason {
    match a {
        None => PreemptionReason::Drain,
        Some(Allowed::VictimFreeTier) => PreemptionReason::FreeTier,
        Some(Allowed::HigherPartitionTier { .. }) => PreemptionReason::PartitionTier,
        Some(Allowed::QosPreemptList { .. }) => PreemptionReason::Qos,
        Some(Allowed::Rebalance(r)) => {
            let tier = policy_core::preempt::job_tier(h.and_then(Period::fair_share), &v.view());
            if r.clause == Clause::OverBudget || tier == Tier::OverBudget {
                PreemptionReason::OverBudget
            } else {
                PreemptionReason::Rebalance
            }
        }
    }
}

/// # Safety
/// `job` must be a valid record under the job lock.
unsafe fn victim_prio(job: &job_record_t) -> u32 {
    let now = unix_now();
    let p = plugin();
    let snap = p.snapshots.fresh(now);
    // SAFETY: forwarded contract.
    let v = unsafe { facts(job, &p.users, p.snapshots.policy().default_min_runtime_secs) };
    rule::victim_priority(snap.as_deref(), &v, now)
}

/// The stored free-tier flag of a queued job: fixed per job, so a strict weak order.
///
/// # Safety
/// `job` must be a valid record under the job lock.
unsafe fn queued_free_tier(job: &job_record_t) -> bool {
    // SAFETY: forwarded contract.
    let f: JobFacts = unsafe { facts(job, &plugin().users, 0) };
    f.contract.free_tier
}

/// The bits of a `PreemptMode` that say how Slurm stops a victim (OFF is none of
/// them). GANG, WITHIN and PRIORITY are scheduling flags, not ways to stop a job:
/// Slurm's callers compare the answer with REQUEUE, CANCEL and SUSPEND as whole
/// values, so they are masked out (`preempt/partition_prio` strips GANG, and from
/// 25.05 PRIORITY, the same way).
const STOP_BITS: u16 =
    (sys::PREEMPT_MODE_SUSPEND | sys::PREEMPT_MODE_REQUEUE | sys::PREEMPT_MODE_CANCEL) as u16;

/// How Slurm is to stop `job` when it is preempted, as `preempt/partition_prio`
/// answers: its partition's `PreemptMode` when the partition sets one
/// (`part_ptr->preempt_mode`; `NO_VAL16` when it does not), else slurm.conf's
/// global one; `None` (no job) is the global one. OFF for a partition with
/// `PreemptMode=OFF` (whose jobs the rule never offers as victims: backfill then
/// also plans with them as never preempted); CANCEL ends the victim instead of
/// requeueing it, the site's choice for that partition (INSTALL.md).
fn preempt_mode(job: Option<&job_record_t>) -> u16 {
    // SAFETY: part_ptr is NULL or a valid partition record under the job lock.
    let part = job.and_then(|j| unsafe { j.part_ptr.as_ref() });
    // SAFETY: slurm_conf is read-only while the job lock is held.
    let global = unsafe { sys::slurm_conf.preempt_mode };
    stop_mode(part.map(|p| p.preempt_mode), global)
}

/// [`preempt_mode`] from a partition's `preempt_mode` (`None`: no partition
/// record) and the global one.
fn stop_mode(partition: Option<u16>, global: u16) -> u16 {
    match partition {
        Some(m) if m != slurm_ffi::NO_VAL16 => m & STOP_BITS,
        _ => global & STOP_BITS,
    }
}

fn grace_time(job: &job_record_t) -> u32 {
    // SAFETY: part_ptr is NULL or a valid partition record under the job lock.
    unsafe { job.part_ptr.as_ref() }
        .map(|p| p.grace_time)
        .unwrap_or(0)
}

/// `bool preempt_p_preemptable(job_record_t *preemptee, job_record_t *preemptor)`.
///
/// # Safety
/// NULL or valid job records, with the job lock held (Slurm's contract).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_preemptable(
    preemptee: *mut job_record_t,
    preemptor: *mut job_record_t,
) -> bool {
    // On a panic: not preemptable (never break a contract by accident).
    ffi_guard(false, || {
        // SAFETY: valid job records from slurmctld, under the job lock.
        match unsafe { (preemptee.as_ref(), preemptor.as_ref()) } {
            // SAFETY: as above.
            (Some(v), Some(p)) => unsafe { preemptable(v, p) },
            _ => false,
        }
    })
}
const _: api::PreemptableFn = preempt_p_preemptable;

/// `bool preempt_p_job_preempt_check(job_queue_rec_t *preemptor, job_queue_rec_t *preemptee)`.
///
/// # Safety
/// NULL or valid queue records whose `job_ptr` is NULL or a valid job record, with the
/// job lock held.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_job_preempt_check(
    preemptor: *mut job_queue_rec_t,
    preemptee: *mut job_queue_rec_t,
) -> bool {
    ffi_guard(false, || {
        // SAFETY: valid queue records whose job_ptr is a valid job record (job lock held).
        let job = |q: *mut job_queue_rec_t| unsafe { q.as_ref().and_then(|q| q.job_ptr.as_ref()) };
        match (job(preemptor), job(preemptee)) {
            // SAFETY: records under the job lock, as above.
            (Some(a), Some(b)) => unsafe { !queued_free_tier(a) && queued_free_tier(b) },
            _ => false,
        }
    })
}
const _: api::JobPreemptCheckFn = preempt_p_job_preempt_check;

/// `int preempt_p_get_data(job_record_t *job, slurm_preempt_data_type_t type, void *data)`.
///
/// # Safety
/// `job_ptr` NULL or a valid job record (job lock held); `data` NULL or a valid, aligned
/// pointer to the type `data_type` names (`bool`, `uint16_t` or `uint32_t`).
#[cfg(not(slurm_25_05))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_get_data(
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
            sys::PREEMPT_DATA_MODE => unsafe { *data.cast::<u16>() = preempt_mode(job) },
            sys::PREEMPT_DATA_PRIO => {
                // SAFETY: a valid record under the job lock.
                let prio = job.map(|j| unsafe { victim_prio(j) }).unwrap_or(u32::MAX);
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
///
/// # Safety
/// `job_ptr` NULL or a valid job record, with the job lock held.
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_get_grace_time(job_ptr: *mut job_record_t) -> u32 {
    // SAFETY: valid job record under the job lock.
    ffi_guard(0, || {
        unsafe { job_ptr.as_ref() }.map(grace_time).unwrap_or(0)
    })
}
#[cfg(slurm_25_05)]
const _: api::GetGraceTimeFn = preempt_p_get_grace_time;

/// `uint16_t preempt_p_get_mode(job_record_t *job)` (25.05+): [`preempt_mode`].
///
/// # Safety
/// `job_ptr` NULL or a valid job record, with the job lock held.
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_get_mode(job_ptr: *mut job_record_t) -> u16 {
    // On a panic: the global mode (what a job gets without a partition of its own).
    // SAFETY: slurm_conf is read-only while the job lock is held.
    let global = stop_mode(None, unsafe { sys::slurm_conf.preempt_mode });
    // SAFETY: valid job record under the job lock.
    ffi_guard(global, || preempt_mode(unsafe { job_ptr.as_ref() }))
}
#[cfg(slurm_25_05)]
const _: api::GetModeFn = preempt_p_get_mode;

/// `uint32_t preempt_p_get_prio(job_record_t *job)` (25.05+).
///
/// # Safety
/// `job_ptr` NULL or a valid job record, with the job lock held.
#[cfg(slurm_25_05)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn preempt_p_get_prio(job_ptr: *mut job_record_t) -> u32 {
    // SAFETY: valid job record under the job lock.
    ffi_guard(u32::MAX, || {
        unsafe { job_ptr.as_ref() }
            // SAFETY: as above.
            .map(|j| unsafe { victim_prio(j) })
            .unwrap_or(u32::MAX)
    })
}
#[cfg(slurm_25_05)]
const _: api::GetPrioFn = preempt_p_get_prio;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_partitions_preempt_mode_where_set_else_the_global_one() {
        let (off, suspend, requeue, cancel, gang, within) = (
            sys::PREEMPT_MODE_OFF as u16,
            sys::PREEMPT_MODE_SUSPEND as u16,
            sys::PREEMPT_MODE_REQUEUE as u16,
            sys::PREEMPT_MODE_CANCEL as u16,
            sys::PREEMPT_MODE_GANG as u16,
            sys::PREEMPT_MODE_WITHIN as u16,
        );
        // No partition record, or one without PreemptMode=: the global mode.
        assert_eq!(stop_mode(None, requeue), requeue);
        assert_eq!(stop_mode(Some(slurm_ffi::NO_VAL16), requeue), requeue);
        assert_eq!(stop_mode(Some(slurm_ffi::NO_VAL16), cancel), cancel);
        // The partition's own mode wins, whatever the global one says.
        assert_eq!(stop_mode(Some(cancel), requeue), cancel);
        assert_eq!(stop_mode(Some(off), requeue), off);
        assert_eq!(stop_mode(Some(requeue), cancel), requeue);
        // Scheduling flags are not ways to stop a job: stripped.
        assert_eq!(stop_mode(Some(suspend | gang), requeue), suspend);
        assert_eq!(stop_mode(None, requeue | gang | within), requeue);
    }
}
