//! The plugin snapshot: its assembly from the store and the cluster's GPUs
//! ([`assemble`]) and its cache ([`SnapshotCache`]).
//!
//! The live state (the store behind its lock, the cluster's GPUs) is
//! `state.rs`'s; this module builds the snapshot from it and keeps the last one,
//! and the snapshot's readers (`GET /v1/snapshot`, `why`, `/metrics`) read only
//! what it hands out. A cached snapshot is served while nothing was written
//! since (same store generation), the cluster's GPUs are the same and it is
//! younger than `snapshot_refresh_secs`.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::body::Bytes;
use budget_protocol::PluginSnapshot;

use crate::capacity::ClusterGpus;
use crate::error::AppResult;
use crate::store::Store;

/// A computed snapshot, its JSON body (served as is) and its version.
#[derive(Debug)]
pub struct CachedSnapshot {
    pub snapshot: PluginSnapshot,
    pub body: Bytes,
    /// Store generation it was computed from.
    pub generation: u64,
    /// The cluster's GPUs it was computed with.
    pub capacity: Option<ClusterGpus>,
}

/// The snapshot of the store `s` at `now` with the cluster's GPUs `capacity`.
pub fn assemble(s: &Store, capacity: Option<ClusterGpus>, now: i64) -> AppResult<CachedSnapshot> {
    let generation = s.generation();
    // No GPUs found, or a weighted sum that rounds to nothing (weights near
    // their lower bound), is published as unknown: the snapshot's contract is
    // a capacity above 0 or none, which the plugins read as "allocations
    // stand as they are".
    let cluster_gpus = capacity.as_ref().map(ClusterGpus::total).filter(|&n| n > 0);
    // Weighted with the weights this snapshot carries (a weight
    // change bumps the generation, so it is applied at once).
    let weighted = capacity
        .as_ref()
        .map(|c| c.weighted(s.weights()))
        .filter(|w| w.is_finite() && *w > 0.0);
    // The counts are in the version: counts read again within the
    // same second and generation still change the ETag (the
    // weighted one only where it differs from the raw one, so a
    // uniform site's versions read as before).
    let version = match (cluster_gpus, weighted) {
        (Some(n), Some(w)) if w != f64::from(n) => {
            format!("{generation}-{now}-{n}-{w}")
        }
        (Some(n), _) => format!("{generation}-{now}-{n}"),
        (None, _) => format!("{generation}-{now}"),
    };
    let snapshot = PluginSnapshot {
        version,
        generated_at: now,
        policy: s.policy().clone(),
        weights: s.weights().clone(),
        fair_share: s.fair_share(now),
        drains: crate::drains::snapshot_drains(s),
        cluster_gpus,
        cluster_weighted_gpus: weighted,
    };
    let body = Bytes::from(serde_json::to_vec(&snapshot)?);
    Ok(CachedSnapshot {
        snapshot,
        body,
        generation,
        capacity,
    })
}

/// The last snapshot computed. One computation at a time: a request that
/// arrives while one runs waits for it and is then served its result.
#[derive(Debug, Default)]
pub struct SnapshotCache(tokio::sync::Mutex<Option<Arc<CachedSnapshot>>>);

impl SnapshotCache {
    /// The cached snapshot if it is current at `now`: computed from the store
    /// generation `generation` holds now, with the GPUs `capacity` gives now,
    /// less than `refresh_secs` before `now` (and not after it). Else the one
    /// `compute` makes with those GPUs, which is cached.
    pub async fn get<C, F, Fut>(
        &self,
        now: i64,
        refresh_secs: i64,
        generation: &AtomicU64,
        capacity: C,
        compute: F,
    ) -> AppResult<Arc<CachedSnapshot>>
    where
        C: Fn() -> Option<ClusterGpus>,
        F: FnOnce(Option<ClusterGpus>) -> Fut,
        Fut: Future<Output = AppResult<CachedSnapshot>>,
    {
        let mut cache = self.0.lock().await;
        if let Some(c) = cache.as_ref() {
            let fresh =
                now - c.snapshot.generated_at < refresh_secs && now >= c.snapshot.generated_at;
            if fresh
                && c.generation == generation.load(Ordering::SeqCst)
                && c.capacity == capacity()
            {
                return Ok(c.clone());
            }
        }
        let c = Arc::new(compute(capacity()).await?);
        *cache = Some(c.clone());
        Ok(c)
    }
}
