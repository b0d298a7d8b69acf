//! Shared application state: the store behind its lock, the config, the
//! cluster's GPUs, the counters `/metrics` reports, and the snapshot cache
//! (`snapshot.rs`) and read throttle (`throttle.rs`) it holds.
//!
//! Why `std::sync::Mutex` around the store and `spawn_blocking` around its
//! use: rusqlite calls block (a commit waits for fsync), so they must not run
//! on the async workers that accept connections and serve cached snapshots;
//! and a std mutex is the right lock for short, synchronous critical sections
//! that never cross an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use budget_protocol::service::PluginFetch;

use crate::caller::Caller;
use crate::capacity::ClusterGpus;
use crate::config::Config;
use crate::error::{AppError, AppResult};
use crate::partitions::Partitions;
use crate::snapshot::{self, CachedSnapshot, SnapshotCache};
use crate::store::Store;
use crate::throttle::{ReadPermit, ReadThrottle};

/// Counters for `/metrics`.
#[derive(Debug, Default)]
pub struct Counters {
    pub requests: AtomicU64,
    pub errors_4xx: AtomicU64,
    pub errors_5xx: AtomicU64,
    pub syncs: AtomicU64,
    pub sync_runs_inserted: AtomicU64,
    pub sync_runs_updated: AtomicU64,
    pub sync_runs_unchanged: AtomicU64,
    /// Runs a sync reported running after the ledger had ended them (the
    /// ledger's end kept; `crate::store::EndContradicted`).
    pub sync_runs_contradicted: AtomicU64,
    pub snapshots_served: AtomicU64,
    pub snapshots_not_modified: AtomicU64,
    pub snapshot_computations: AtomicU64,
    pub auth_refusals: AtomicU64,
    /// Unix time of the last successful sync (0: none yet).
    pub last_sync_at: AtomicU64,
    /// Unix time of the last plugin snapshot request answered 200 or 304 (0: none
    /// yet): the plugins are in safe mode once this is older than their maximum age.
    pub last_snapshot_fetch_at: AtomicU64,
    /// Connections closed at once because a connection cap was reached.
    pub connections_refused: AtomicU64,
    /// Expensive reads refused with 429 (per-caller rate or concurrency).
    pub reads_throttled: AtomicU64,
    /// Requests on a connection of the TCP reserve answered 503 because they
    /// carry no controller or agent token (`crate::server`).
    pub reserve_refusals: AtomicU64,
    /// Reserved TCP connections closed to make room for a newcomer because
    /// they had shown no controller or agent token (`crate::server`).
    pub reserve_displaced: AtomicU64,
    /// Jobs in agent reports ignored because the ledger places them on
    /// other nodes (`crate::idle`).
    pub agent_jobs_off_node: AtomicU64,
    /// Shadow mode: queue samples recorded, would-be preemptions recorded
    /// (`crate::shadow`), and when the last sample was taken (0: none yet).
    pub shadow_samples: AtomicU64,
    pub shadow_preemptions: AtomicU64,
    pub shadow_last_sample_at: AtomicU64,
}

/// Everything handlers share.
#[derive(Debug)]
pub struct Inner {
    pub store: Mutex<Store>,
    pub generation: Arc<AtomicU64>,
    pub config: Config,
    /// uids that are admins (config + 0 + budgetd's own uid).
    pub admin_uids: Vec<u32>,
    /// uids that are the controller (config + 0 + budgetd's own uid).
    pub controller_uids: Vec<u32>,
    /// Controller store operations waiting for the store lock: other
    /// callers do not take the lock while this is non-zero, so a sync or a
    /// snapshot waits for at most the one operation running (docs/design.md §11).
    pub controller_waiting: AtomicUsize,
    /// Admission of unprivileged callers' expensive reads.
    pub reads: ReadThrottle,
    /// The plugin snapshot last computed (`crate::snapshot`).
    pub snapshot: SnapshotCache,
    pub counters: Counters,
    /// uid -> user name, resolved once per uid.
    pub user_names: Mutex<HashMap<u32, String>>,
    pub started_at: i64,
    /// Each plugin's last snapshot fetch (name -> what it holds), for `GET /v1/plugins`.
    pub plugin_fetches: Mutex<BTreeMap<String, PluginFetch>>,
    /// Held by a drain worker pass, a drain request and an undrain: the worker
    /// re-applies every drain it finds whose node is not draining, so a drain's
    /// rows and their rollback, and an undrain's resume and its forgetting the
    /// drain, must not straddle a pass (seen on 24.11: a node resumed
    /// by `budgetctl undrain` drained again 0.1 s later). A tokio mutex: it is held
    /// across `scontrol`/`squeue` awaits.
    pub drain_ops: tokio::sync::Mutex<()>,
    /// Held by a usage import from its parse to its last batch: one import
    /// at a time, so the batches of two imports never interleave and each
    /// report counts against the ledger its own earlier batches left.
    pub imports: tokio::sync::Mutex<()>,
    /// Slurm's nodes and jobs as last read for the drains, which `GET
    /// /v1/drains` answers from (`None`: not read yet).
    pub drain_view: Mutex<Option<Arc<crate::drains::SlurmView>>>,
    /// The cluster's GPUs by type as [`crate::capacity`] last read them from
    /// Slurm (`None`: unknown), published as the snapshot's `cluster_gpus` and,
    /// weighted with the store's weights, `cluster_weighted_gpus`.
    capacity: Mutex<Option<ClusterGpus>>,
    /// Slurm's partitions' `PriorityTier`s and `PreemptMode=OFF` as [`crate::partitions`] last read
    /// them (empty: unknown), for `why` and shadow mode.
    partitions: Mutex<Arc<Partitions>>,
    /// The Unix socket being served (set by `server::run`), which a backup
    /// must never replace.
    pub socket_path: Mutex<Option<std::path::PathBuf>>,
    /// The web view's what-ifs: the one running and the results kept.
    pub whatifs: crate::whatif::Whatifs,
}

/// Cheap-to-clone handle given to every handler.
#[derive(Debug, Clone)]
pub struct AppState(pub Arc<Inner>);

impl std::ops::Deref for AppState {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.0
    }
}

impl AppState {
    /// Wraps an opened store.
    pub fn new(store: Store, config: Config) -> AppState {
        // SAFETY: getuid has no preconditions and cannot fail.
        let own_uid = unsafe { libc::getuid() };
        let mut admin_uids = vec![0, own_uid];
        admin_uids.extend(config.admins.uids.iter().copied());
        admin_uids.sort_unstable();
        admin_uids.dedup();
        let mut controller_uids = vec![0, own_uid];
        controller_uids.extend(config.controller.uids.iter().copied());
        controller_uids.sort_unstable();
        controller_uids.dedup();
        let reads = ReadThrottle::new(config.expensive_reads_per_minute);
        AppState(Arc::new(Inner {
            generation: store.generation_handle(),
            store: Mutex::new(store),
            config,
            admin_uids,
            controller_uids,
            controller_waiting: AtomicUsize::new(0),
            reads,
            snapshot: SnapshotCache::default(),
            counters: Counters::default(),
            user_names: Mutex::new(HashMap::new()),
            started_at: crate::clock::now(),
            plugin_fetches: Mutex::new(BTreeMap::new()),
            drain_ops: tokio::sync::Mutex::new(()),
            imports: tokio::sync::Mutex::new(()),
            drain_view: Mutex::new(None),
            capacity: Mutex::new(None),
            partitions: Mutex::new(Arc::default()),
            socket_path: Mutex::new(None),
            whatifs: crate::whatif::Whatifs::default(),
        }))
    }

    /// The cluster's GPUs by type as last read from Slurm (`None`: unknown).
    pub fn capacity(&self) -> Option<ClusterGpus> {
        self.capacity
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The cluster's raw GPUs as last read from Slurm (`None`: unknown).
    pub fn cluster_gpus(&self) -> Option<u32> {
        self.capacity().map(|c| c.total())
    }

    /// Sets the cluster's GPUs; the next snapshot carries them (a cached
    /// snapshot computed with others is no longer served).
    pub fn set_capacity(&self, gpus: Option<ClusterGpus>) {
        *self.capacity.lock().unwrap_or_else(|p| p.into_inner()) = gpus;
    }

    /// Slurm's partitions' `PriorityTier`s and `PreemptMode=OFF` as last read (empty: unknown).
    pub fn partitions(&self) -> Arc<Partitions> {
        Arc::clone(&self.partitions.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Sets the partitions `why`, shadow mode and the drain worker read.
    pub fn set_partitions(&self, partitions: Partitions) {
        *self.partitions.lock().unwrap_or_else(|p| p.into_inner()) = Arc::new(partitions);
    }

    /// Runs `f` with the store on the blocking pool, after any controller
    /// operation waiting for the store (see [`AppState::with_store_controller`]).
    pub async fn with_store<T, F>(&self, f: F) -> AppResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> AppResult<T> + Send + 'static,
    {
        self.store_op(false, f).await
    }

    /// Runs `f` with the store for the controller (sync, snapshot): ahead of
    /// every other caller that has not yet taken the store lock.
    pub async fn with_store_controller<T, F>(&self, f: F) -> AppResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> AppResult<T> + Send + 'static,
    {
        self.store_op(true, f).await
    }

    async fn store_op<T, F>(&self, controller: bool, f: F) -> AppResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> AppResult<T> + Send + 'static,
    {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot leave memory ahead of the
            // database (memory changes only after commit), so keep serving.
            let lock = || {
                me.store
                    .lock()
                    .unwrap_or_else(|poisoned| poisoned.into_inner())
            };
            if controller {
                me.controller_waiting.fetch_add(1, Ordering::SeqCst);
                let mut store = lock();
                me.controller_waiting.fetch_sub(1, Ordering::SeqCst);
                return f(&mut store);
            }
            // Yield to the controller (bounded: a stream of syncs must not
            // starve everyone else for good), also when a controller operation
            // arrived while this one waited for the lock: the std mutex is not
            // fair, so without the second look a user read that queued first
            // would take the lock ahead of a sync (measured: sync p50 10 -> 127 ms
            // under 8 looping readers, scripts/bench-hostile).
            let until = Instant::now() + Duration::from_secs(2);
            loop {
                while me.controller_waiting.load(Ordering::SeqCst) > 0 && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut store = lock();
                if me.controller_waiting.load(Ordering::SeqCst) == 0 || Instant::now() >= until {
                    return f(&mut store);
                }
            }
        })
        .await
        .map_err(|e| AppError::Internal(format!("worker failed: {e}")))?
    }

    /// Admits an expensive read (a whole-ledger scan) of `caller`
    /// (`crate::throttle`): admins and the controller pass freely, anyone else
    /// within their budget, else 429.
    pub async fn expensive_read(&self, caller: &Caller) -> AppResult<Option<ReadPermit>> {
        self.reads
            .admit(caller, &self.counters.reads_throttled)
            .await
    }

    /// The current plugin snapshot (`crate::snapshot`): the cached one if
    /// nothing was written since and it is younger than
    /// `snapshot_refresh_secs`, else a new one.
    pub async fn snapshot(&self, now: i64) -> AppResult<Arc<CachedSnapshot>> {
        self.snapshot
            .get(
                now,
                self.config.snapshot_refresh_secs,
                &self.generation,
                || self.capacity(),
                |capacity| async move {
                    let computed = self
                        .with_store_controller(move |s| snapshot::assemble(s, capacity, now))
                        .await?;
                    self.counters
                        .snapshot_computations
                        .fetch_add(1, Ordering::Relaxed);
                    Ok(computed)
                },
            )
            .await
    }
}
