//! The background pass (every `budget_period` seconds, on the plugin's own thread):
//! 1. refresh the snapshot from budgetd and log safe-mode transitions
//!    (`crate::snapshot`; hard timeouts, no Slurm lock held),
//! 2. resolve user names recorded as unknown (NSS, no lock held),
//! 3. under the job write lock: recompute the priority (or, for `site_factor/budget`,
//!    the site factor: [`Apply`]) of every pending job (ranked
//!    entitlement first, from the GPUs the previous pass saw held, weighted by their
//!    type with the snapshot's billing weights: `compute`) and
//!    collect the runs of pending, running and recently ended jobs whose reported
//!    state changed since budgetd last acknowledged it ([`PassMemo`]),
//! 4. after unlocking: send those runs to budgetd.
//!
//! slurmctld never recalculates priorities on its own (only at submit/update/requeue),
//! so step 3 is what makes a budget change reorder the queue without any job update.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;
use std::time::Instant;

use crate::controller::Controller;
use crate::log;
use crate::snapshot::{SnapshotFetcher, unix_now};
use crate::users::lookup_uid;
use crate::worker::Worker;
use budget_protocol::shadow::{MAX_QUEUE, QueueOrder, QueuedJob};
use budget_protocol::{JobRun, JobSync, PluginSnapshot, Policy};
use slurm_ffi::job_state;

use super::compute::{self, EntitledOrder, Held};
use super::job;
use super::state::State;
use super::sync::{SyncAck, Syncer};

/// Figures of one pass, for logs and benchmarks.
#[derive(Debug, Default, Clone, Copy)]
pub struct PassStats {
    pub pending: u32,
    pub changed: u32,
    /// Site factors written (`Apply::SiteFactor`).
    pub site_factors_changed: u32,
    pub runs: u32,
    pub lock_micros: u128,
    /// Time spent sending the runs to budgetd (after unlocking).
    pub sync_micros: u128,
}

/// Hasher for job ids (dense, sequential u32, and `job_list` holds jobs in submission
/// order): the low bits stay the id, so consecutive jobs land in consecutive buckets
/// and the pass walks the table nearly sequentially instead of missing the cache on
/// every job; the top 7 bits (hashbrown's tag) are mixed. SipHash would cost ~20 ns a
/// lookup on top.
#[derive(Debug, Default, Clone, Copy)]
pub struct JobIdHasher(u64);

impl Hasher for JobIdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        let mix = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = u64::from(n) | (mix & (0x7f << 57));
    }
}

/// What the pass remembers about one job between passes.
#[derive(Debug, Clone, Copy)]
struct Memo {
    /// `job::key_fingerprint` when the key was last read.
    key_fp: u64,
    /// Index of the job's (account, user, free tier) in [`PassMemo::keys`].
    key: u32,
    /// `job_state` at the last pass (a change means: re-read everything).
    last_state: u32,
    /// `job::sync_fingerprint` budgetd last acknowledged (0: never / resend).
    synced_fp: u64,
    /// Pass that last saw the job (older entries are pruned).
    seen: u64,
    /// GPUs it holds while running (read when its state changes).
    gpus: u32,
    /// Their type, as an index into [`PassMemo::gpu_types`] (read with them).
    gpu_type: u32,
}

const NO_KEY: u32 = u32::MAX;

/// Most distinct GPU types remembered; later ones weigh as untyped (the
/// default weight, as an unknown type does).
const MAX_GPU_TYPES: usize = 256;

/// Per-job memory of the background pass (owned by the worker thread, never read by
/// callbacks). The pass is memory-bound: a job record spans 17 cache lines, and reading
/// every field of 100k records under the job write lock costs ~75 ms. So:
/// - a job's placement key (account, user, free tier) is interned once; each new
///   snapshot is applied by placing every *distinct* key (hundreds), not every job;
/// - a pending job whose state did not change, that `priority_p_set` did not see since
///   the last pass (Slurm calls it after every update), is not re-read: the pass reads
///   only its id, state, priority and age (4 lines of the record + its details);
/// - a job whose reported state budgetd already acknowledged is not rebuilt or resent.
///
/// Every `FULL_CHECK_EVERY` passes, after a failed sync and when the uid cache learned
/// a name, every job is re-read; after a failed sync every job is also re-sent.
#[derive(Debug, Default)]
pub struct PassMemo {
    jobs: HashMap<u32, Memo, BuildHasherDefault<JobIdHasher>>,
    /// Interned placement keys and their placement in the current snapshot.
    key_ids: HashMap<(String, String, bool), u32>,
    keys: Vec<(String, String, bool)>,
    placements: Vec<compute::Placement>,
    /// GPUs held per key by running jobs at the last pass (raw and weighted),
    /// and the holdings the current `order` was computed from.
    held: Vec<Held>,
    order_held: Vec<Held>,
    /// Lower-cased GPU types seen (index 0: untyped), and the weight of each in
    /// the current snapshot: a job's GPUs are weighted in the walk by a lookup,
    /// so a new snapshot's weights apply at the next pass without re-reading jobs.
    gpu_types: Vec<Option<String>>,
    type_weights: Vec<f64>,
    /// The entitlement-first order `placements` follow.
    order: Option<Arc<EntitledOrder>>,
    pass: u64,
    /// Keeps the snapshot alive, so its address identifies it.
    snap: Option<Arc<PluginSnapshot>>,
    users_gen: u64,
    force_full: bool,
    /// Fingerprints sent in the last batch, acknowledged when the sync succeeds.
    unacked: Vec<(u32, u64)>,
}

/// Passes between full re-reads and resyncs (heals anything a hint missed, e.g. a
/// string replaced at the same address, or budgetd restored from a backup).
pub const FULL_CHECK_EVERY: u64 = 12;

/// Most distinct placement keys remembered before the interner starts over.
const MAX_KEYS: usize = 200_000;

impl PassMemo {
    /// Start a pass; returns whether every job must be re-read.
    fn begin(&mut self, snapshot: &Option<Arc<PluginSnapshot>>, users_gen: u64, now: i64) -> bool {
        self.pass += 1;
        let mut full = self.force_full
            || self.pass % FULL_CHECK_EVERY == 1
            || users_gen != self.users_gen
            || self.keys.len() > MAX_KEYS;
        self.force_full = false;
        self.users_gen = users_gen;
        if self.keys.len() > MAX_KEYS {
            self.keys.clear();
            self.key_ids.clear();
            for m in self.jobs.values_mut() {
                m.key = NO_KEY;
            }
        }
        let same = match (&self.snap, snapshot) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => self.pass > 1,
            _ => false,
        };
        if !same || self.gpu_types.is_empty() {
            if self.gpu_types.is_empty() {
                self.gpu_types.push(None);
            }
            let snap = snapshot.as_deref();
            self.type_weights = self
                .gpu_types
                .iter()
                .map(|t| compute::gpu_weight(snap, t.as_deref()))
                .collect();
        }
        // Holdings move every pass, so the order is recomputed when they or the
        // snapshot changed: O(distinct keys), not O(jobs). `held` has one entry per
        // key (keys interned since the last pass hold nothing yet; after the
        // interner started over it is cut back with them).
        self.held.resize(self.keys.len(), Held::default());
        if !same || self.held != self.order_held {
            self.snap.clone_from(snapshot);
            let snap = snapshot.as_deref();
            self.order = snap.map(|s| {
                let held = self
                    .keys
                    .iter()
                    .zip(&self.held)
                    .filter(|((_, _, free), _)| !free)
                    .map(|((a, u, _), g)| (a.as_str(), u.as_str(), g.gpus, g.weight()));
                Arc::new(compute::entitled_order(s, held, now))
            });
            self.order_held.clone_from(&self.held);
            let order = self.order.as_deref();
            self.placements = self
                .keys
                .iter()
                .map(|(a, u, f)| compute::place_key(snap, order, a, u, *f))
                .collect();
        }
        self.unacked.clear();
        full |= self.pass == 1;
        full
    }

    /// Intern a key and place it in the current snapshot.
    fn intern(&mut self, account: &str, user: &str, free: bool) -> u32 {
        let k = (account.to_string(), user.to_string(), free);
        if let Some(&i) = self.key_ids.get(&k) {
            return i;
        }
        let i = self.keys.len() as u32;
        let snap = self.snap.as_deref();
        self.placements.push(compute::place_key(
            snap,
            self.order.as_deref(),
            account,
            user,
            free,
        ));
        self.keys.push(k.clone());
        self.key_ids.insert(k, i);
        i
    }

    /// Index of a GPU type in [`PassMemo::gpu_types`] (0: untyped, or past
    /// [`MAX_GPU_TYPES`]), weighted with the current snapshot's weights.
    fn intern_type(&mut self, gpu_type: Option<&str>) -> u32 {
        let Some(t) = gpu_type.filter(|t| !t.is_empty()) else {
            return 0;
        };
        let t = t.to_ascii_lowercase();
        if let Some(i) = self.gpu_types.iter().position(|x| x.as_deref() == Some(&t)) {
            return i as u32;
        }
        if self.gpu_types.len() >= MAX_GPU_TYPES {
            return 0;
        }
        self.type_weights
            .push(compute::gpu_weight(self.snap.as_deref(), Some(&t)));
        self.gpu_types.push(Some(t));
        (self.gpu_types.len() - 1) as u32
    }

    /// After a sync: remember what budgetd now has; when a chunk failed, resend
    /// everything it did not acknowledge next time.
    fn acknowledge(&mut self, ack: &SyncAck) {
        let failed = match ack {
            SyncAck::All => None,
            SyncAck::Except(jobs) => Some(jobs),
        };
        if let Some(failed) = failed {
            self.force_full = true;
            let sent: std::collections::HashSet<u32> =
                self.unacked.iter().map(|(u, _)| *u).collect();
            for (id, m) in self.jobs.iter_mut() {
                if failed.contains(id) || !sent.contains(id) {
                    m.synced_fp = 0;
                }
            }
        }
        for (id, fp) in self.unacked.drain(..) {
            if failed.is_some_and(|f| f.contains(&id)) {
                continue;
            }
            if let Some(m) = self.jobs.get_mut(&id) {
                m.synced_fp = fp;
            }
        }
        // Drop jobs Slurm no longer has (purged), outside the job lock.
        if self.pass.is_multiple_of(16) {
            let pass = self.pass;
            self.jobs.retain(|_, m| m.seen == pass);
        }
    }

    /// Number of jobs remembered.
    pub fn len(&self) -> usize {
        self.jobs.len()
    }

    /// True when no job is remembered.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }
}

/// The site's default `min_runtime` in `snapshot`, or the built-in default before any.
pub fn default_min_runtime(snapshot: Option<&PluginSnapshot>) -> i64 {
    snapshot.map_or_else(
        || Policy::default().default_min_runtime_secs,
        |s| s.policy.default_min_runtime_secs,
    )
}

/// budgetd as the pass talks to it: the snapshot fetcher and the job-state syncer.
#[derive(Debug)]
pub struct Budgetd {
    pub fetcher: SnapshotFetcher,
    pub syncer: Syncer,
}

/// Start the plugin's background thread once (a second call while it runs does
/// nothing): every settings period it calls `each` with budgetd (the snapshot fetcher,
/// whose safe-mode log line says `safe_mode_effect`, and the job-state syncer) and the
/// pass's memo, which `each` hands to [`run_pass`] with what its plugin writes.
pub fn start_worker(
    thread_name: &str,
    safe_mode_effect: &'static str,
    mut each: impl FnMut(&State, &mut Budgetd, &mut PassMemo) + Send + 'static,
) {
    let st = super::state::state();
    let Ok(mut slot) = st.worker.lock() else {
        return;
    };
    if slot.is_some() {
        return;
    }
    let cfg = st.settings();
    let mut budgetd = Budgetd {
        fetcher: SnapshotFetcher::new(Arc::clone(&st.snapshots), &cfg, safe_mode_effect),
        syncer: Syncer::new(&cfg),
    };
    let mut memo = PassMemo::default();
    let spawned = Worker::spawn(thread_name, cfg.period, move || {
        each(super::state::state(), &mut budgetd, &mut memo);
    });
    match spawned {
        Ok(w) => {
            log::info(&format!(
                "background thread started: budgetd at {}, period {} s, timeout {} ms",
                cfg.endpoint,
                cfg.period.as_secs(),
                cfg.timeout.as_millis()
            ));
            *slot = Some(w);
        }
        Err(e) => log::error(&format!("cannot start background thread: {e}")),
    }
}

/// What the pass writes into each pending, not held job whose priority no admin set.
#[derive(Clone, Copy)]
pub enum Apply<'a> {
    /// `priority/budget`: the job's priority (tier, rank, age, nice).
    Priority,
    /// `site_factor/budget`: `job_record_t::site_factor`, the term of the job's
    /// placement (offset by `NICE_OFFSET`, as Slurm stores it); when it changed, the
    /// priority multifactor summed is shifted by the difference
    /// (`job::apply_site_factor`), so the queue follows the budget within one period,
    /// as with `priority/budget`.
    SiteFactor(&'a dyn Fn(&compute::Placement) -> u32),
    /// `site_factor/budget` in `mode=shadow`: nothing is written (every priority
    /// stays what multifactor made it); the pending queue, Slurm's priority
    /// beside each job's placement, goes to budgetd after the runs
    /// ([`Syncer::send_queue`]).
    Shadow,
}

impl std::fmt::Debug for Apply<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Apply::Priority => "Priority",
            Apply::SiteFactor(_) => "SiteFactor",
            Apply::Shadow => "Shadow",
        })
    }
}

/// One pass with the current settings.
pub fn run_pass(
    state: &State,
    budgetd: &mut Budgetd,
    memo: &mut PassMemo,
    apply: Apply<'_>,
) -> PassStats {
    let cfg = state.settings();
    budgetd.fetcher.tick(&cfg, unix_now());
    budgetd.syncer.reconfigure(&cfg);
    state.users.resolve_misses(lookup_uid);

    let Ok(ctl) = Controller::get() else {
        return PassStats::default();
    };
    // Priorities follow the newest snapshot however old (safe mode keeps the last
    // ranking); the site default contract comes with it.
    let snapshot = state.snapshots.latest();
    let default_min = default_min_runtime(snapshot.as_deref());
    let users_gen = state.users.generation();
    let mut full = memo.begin(&snapshot, users_gen, unix_now());
    state.set_order(memo.order.clone());
    // This pass's holdings, per key, for the next pass's order (grown as keys
    // are interned during the walk).
    let mut held = vec![Held::default(); memo.keys.len()];
    let mut stats = PassStats::default();
    let mut runs: Vec<JobRun> = Vec::new();
    let collect = cfg.sync_jobs;
    // The complete set of jobs, on full passes (every FULL_CHECK_EVERY): budgetd
    // closes the runs Slurm forgot (a start lost in a controller crash, a
    // cancel racing a requeue, jobs purged while budgetd was down).
    let mut live: Option<Vec<(u32, i64)>> = None;
    // Shadow mode: (job, Slurm's priority, placement) of every pending, not held job.
    let mut queue: Vec<(u32, u32, compute::Placement)> = Vec::new();
    {
        let guard = ctl.job_write_lock();
        let t = Instant::now();
        let now = unix_now();
        let pass = memo.pass;
        // Taken under the lock: priority_p_set adds to it under the same lock.
        let dirty = state.take_dirty();
        full |= dirty.is_none();
        let dirty = dirty.unwrap_or_default();
        if collect && full {
            live = Some(Vec::new());
        }
        guard.for_each_job(|job| {
            let id = job.job_id;
            let st = job.job_state;
            let pending = job_state::is_pending(st);
            if pending {
                stats.pending += 1;
            }
            let mut m = memo.jobs.get(&id).copied().unwrap_or(Memo {
                key_fp: 0,
                key: NO_KEY,
                last_state: u32::MAX,
                synced_fp: 0,
                seen: 0,
                gpus: 0,
                gpu_type: 0,
            });
            let state_changed = m.last_state != st;
            let check = full || !pending || state_changed || m.key == NO_KEY || dirty.contains(&id);
            m.last_state = st;
            m.seen = pass;
            let mut key_fp = m.key_fp;
            if check {
                key_fp = job::key_fingerprint(job, users_gen);
                if key_fp != m.key_fp || m.key == NO_KEY {
                    // SAFETY: valid record, job write lock held by `guard`.
                    let v = unsafe { job::view(job, &state.users, default_min) };
                    let k = v.key(now);
                    m.key = memo.intern(k.account, k.user.unwrap_or(""), k.free_tier);
                    m.key_fp = key_fp;
                }
            }
            if job_state::is_running(st) {
                if full || state_changed {
                    // SAFETY: valid record, job write lock held by `guard`.
                    let g = unsafe { crate::gpus::job_gpus(job) };
                    m.gpus = g.count;
                    m.gpu_type = memo.intern_type(g.gpu_type.as_deref());
                }
                let k = m.key as usize;
                if memo.keys.get(k).is_some_and(|key| !key.2) {
                    held.resize(held.len().max(k + 1), Held::default());
                    let w = memo
                        .type_weights
                        .get(m.gpu_type as usize)
                        .copied()
                        .unwrap_or(1.0);
                    held[k].add(m.gpus, w);
                }
            }
            if let Apply::Shadow = apply
                && collect
                && pending
                && job.priority != 0
                && let Some(pl) = memo.placements.get(m.key as usize)
            {
                queue.push((id, job.priority, *pl));
            }
            if pending
                && job.priority != 0
                && job.direct_set_prio == 0
                && let Some(pl) = memo.placements.get(m.key as usize)
            {
                match apply {
                    Apply::Shadow => {}
                    Apply::Priority => {
                        // SAFETY: details is NULL or valid under the lock.
                        let d = unsafe { job.details.as_ref() };
                        let age = compute::age_secs(
                            now,
                            d.map(|d| d.submit_time).unwrap_or(0),
                            d.map(|d| d.begin_time).unwrap_or(0),
                        );
                        let nice = d.map(|d| d.nice).unwrap_or(slurm_ffi::NICE_OFFSET);
                        let p = compute::priority_of(pl, age, nice);
                        if p != job.priority {
                            job.priority = p;
                            stats.changed += 1;
                        }
                    }
                    Apply::SiteFactor(term) => {
                        let f = term(pl);
                        if f != job.site_factor {
                            stats.site_factors_changed += 1;
                            // multifactor recalculates only every PriorityCalcPeriod
                            // (never without slurmdbd): its sum, shifted now.
                            // SAFETY: valid record, job write lock held by `guard`.
                            if unsafe { job::apply_site_factor(job, f) } {
                                stats.changed += 1;
                            }
                        }
                    }
                }
            }
            if collect && check {
                let fp = job::sync_fingerprint(job, key_fp, default_min);
                if fp != m.synced_fp {
                    // SAFETY: as above.
                    unsafe { job::runs(job, &state.users, default_min, &mut runs) };
                    memo.unacked.push((id, fp));
                }
            }
            if let Some(live) = live.as_mut() {
                // SAFETY: details is NULL or valid under the lock.
                let submit = unsafe { job.details.as_ref() }.map_or(0, |d| d.submit_time);
                // 0 (unknown) in a requeue's window, as in the runs (job::current_submit).
                let submit = job::current_submit(st, job.restart_cnt, submit).unwrap_or(0);
                live.push((id, submit));
            }
            memo.jobs.insert(id, m);
        });
        if stats.changed > 0 {
            // Tell clients (squeue caches by last_update) that job data changed.
            ctl.touch_last_job_update(&guard, now);
        }
        stats.lock_micros = t.elapsed().as_micros();
    }
    memo.held = held;
    stats.runs = runs.len() as u32;
    if collect {
        let t = Instant::now();
        let ack = budgetd.syncer.send_jobs(JobSync {
            collected_at: unix_now(),
            runs,
            live,
            queue: None,
        });
        memo.acknowledge(&ack);
        if let Apply::Shadow = apply {
            let num_leaves = snapshot.as_deref().map_or(0, |s| s.fair_share.num_leaves);
            budgetd
                .syncer
                .send_queue(shadow_queue(queue, num_leaves), unix_now());
        }
        stats.sync_micros = t.elapsed().as_micros();
    }
    // Stable format: scripts/bench-slurm parses it (budget_pass_log=1 logs it at info).
    let line = format!(
        "pass: {} pending, {} priorities changed, {} runs, job lock held {} us, sync {} us{}",
        stats.pending,
        stats.changed,
        stats.runs,
        stats.lock_micros,
        stats.sync_micros,
        match apply {
            Apply::Priority => String::new(),
            Apply::Shadow => ", shadow: nothing written".to_string(),
            Apply::SiteFactor(_) =>
                format!(", {} site factors changed", stats.site_factors_changed),
        }
    );
    if cfg.pass_log {
        log::info(&line);
    } else {
        log::debug(&line);
    }
    stats
}

/// The queue shadow mode reports: Slurm's highest priorities first (ties by job
/// id), at most [`budget_protocol::shadow::MAX_QUEUE`] jobs.
pub fn shadow_queue(mut jobs: Vec<(u32, u32, compute::Placement)>, num_leaves: u32) -> QueueOrder {
    jobs.sort_unstable_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    jobs.truncate(MAX_QUEUE);
    QueueOrder {
        num_leaves,
        jobs: jobs
            .into_iter()
            .map(|(job_id, priority, p)| QueuedJob {
                job_id,
                priority,
                tier: p.tier,
                rank: p.rank,
            })
            .collect(),
    }
}
