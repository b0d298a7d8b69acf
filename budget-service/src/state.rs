//! Shared application state: the store behind its lock, the config, the
//! cached plugin snapshot and the counters `/metrics` reports.
//!
//! Why `std::sync::Mutex` around the store and `spawn_blocking` around its
//! use: rusqlite calls block (a commit waits for fsync), so they must not run
//! on the async workers that accept connections and serve cached snapshots;
//! and a std mutex is the right lock for short, synchronous critical sections
//! that never cross an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Bytes;
use budget_protocol::PluginSnapshot;
use budget_protocol::service::PluginFetch;

use crate::config::Config;
use crate::error::{AppError, AppResult};
use crate::store::Store;

/// A computed snapshot, its JSON body (served as is) and its version.
#[derive(Debug)]
pub struct CachedSnapshot {
    pub snapshot: PluginSnapshot,
    pub body: Bytes,
    /// Store generation it was computed from.
    pub generation: u64,
}

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
    pub snapshots_served: AtomicU64,
    pub snapshots_not_modified: AtomicU64,
    pub snapshot_computations: AtomicU64,
    pub auth_refusals: AtomicU64,
    /// Unix time of the last successful sync (0: none yet).
    pub last_sync_at: AtomicU64,
    /// Unix time of the last plugin snapshot request answered 200 or 304 (0: none
    /// yet): the plugins are in safe mode once this is older than their maximum age.
    pub last_snapshot_fetch_at: AtomicU64,
}

/// Everything handlers share.
#[derive(Debug)]
pub struct Inner {
    pub store: Mutex<Store>,
    pub generation: Arc<AtomicU64>,
    pub config: Config,
    /// uids that are admins (config + 0 + budgetd's own uid).
    pub admin_uids: Vec<u32>,
    pub snapshot: tokio::sync::Mutex<Option<Arc<CachedSnapshot>>>,
    pub counters: Counters,
    /// uid -> user name, resolved once per uid.
    pub user_names: Mutex<HashMap<u32, String>>,
    pub started_at: i64,
    /// Each plugin's last snapshot fetch (name -> what it holds), for `GET /v1/plugins`.
    pub plugin_fetches: Mutex<BTreeMap<String, PluginFetch>>,
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
        AppState(Arc::new(Inner {
            generation: store.generation_handle(),
            store: Mutex::new(store),
            config,
            admin_uids,
            snapshot: tokio::sync::Mutex::new(None),
            counters: Counters::default(),
            user_names: Mutex::new(HashMap::new()),
            started_at: crate::clock::now(),
            plugin_fetches: Mutex::new(BTreeMap::new()),
        }))
    }

    /// Runs `f` with the store on the blocking pool.
    pub async fn with_store<T, F>(&self, f: F) -> AppResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Store) -> AppResult<T> + Send + 'static,
    {
        let me = self.clone();
        tokio::task::spawn_blocking(move || {
            // A panic while holding the lock cannot leave memory ahead of the
            // database (memory changes only after commit), so keep serving.
            let mut store = me
                .store
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner());
            f(&mut store)
        })
        .await
        .map_err(|e| AppError::Internal(format!("worker failed: {e}")))?
    }

    /// The current plugin snapshot: the cached one if nothing was written
    /// since and it is younger than `snapshot_refresh_secs`, else a new one.
    pub async fn snapshot(&self, now: i64) -> AppResult<Arc<CachedSnapshot>> {
        let mut cache = self.snapshot.lock().await;
        if let Some(c) = cache.as_ref() {
            let fresh = now - c.snapshot.generated_at < self.config.snapshot_refresh_secs
                && now >= c.snapshot.generated_at;
            if fresh && c.generation == self.generation.load(Ordering::SeqCst) {
                return Ok(c.clone());
            }
        }
        let computed = self
            .with_store(move |s| {
                let generation = s.generation();
                let snapshot = PluginSnapshot {
                    version: format!("{generation}-{now}"),
                    generated_at: now,
                    policy: s.policy().clone(),
                    weights: s.weights().clone(),
                    fair_share: s.fair_share(now),
                    drains: crate::drains::snapshot_drains(s),
                };
                let body = Bytes::from(serde_json::to_vec(&snapshot)?);
                Ok(CachedSnapshot {
                    snapshot,
                    body,
                    generation,
                })
            })
            .await?;
        self.counters
            .snapshot_computations
            .fetch_add(1, Ordering::Relaxed);
        let c = Arc::new(computed);
        *cache = Some(c.clone());
        Ok(c)
    }
}
