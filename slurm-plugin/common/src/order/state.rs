//! The plugin's process-wide statics, composed from `slurm-plugin-common`'s pieces:
//! the snapshot cache (and through it safe mode), the uid -> name cache, the settings
//! (swapped on `scontrol reconfigure`), the background worker handle, and the jobs
//! `priority_p_set` touched since the last pass, and the entitlement-first order the
//! last pass computed (`compute::entitled_order`).
//!
//! Callbacks (`priority_p_set`, `sprio`) only *read* here: one wait-free load of an
//! `Arc`, no lock that the background thread could hold during I/O.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, OnceLock};

use crate::settings::Settings;
use crate::snapshot::SnapshotCache;
use crate::users::UserCache;
use crate::worker::Worker;
use arc_swap::{ArcSwap, ArcSwapOption};

use super::compute::EntitledOrder;

/// What safe mode means for priorities (logged when entering it).
pub const SAFE_MODE_EFFECT: &str =
    "priorities keep the last known ranking (FIFO by age if none), no rebalancing";

/// Everything the plugin keeps between callbacks.
#[derive(Debug)]
pub struct State {
    pub snapshots: Arc<SnapshotCache>,
    pub users: UserCache,
    /// Replaced on `scontrol reconfigure` (a new period applies from the next start).
    settings: ArcSwap<Settings>,
    pub worker: Mutex<Option<Worker>>,
    /// Jobs `priority_p_set` saw since the last pass (Slurm calls it after every job
    /// update, requeue and release): the pass re-reads their keys. Both sides run under
    /// the job write lock, so this mutex is never contended.
    dirty: Mutex<Vec<u32>>,
    /// The order the last pass ranked pending jobs by, so that `priority_p_set`
    /// (a new or updated job) and `sprio` rank the same way between passes.
    order: ArcSwapOption<EntitledOrder>,
}

/// Beyond this many dirty jobs between two passes the pass re-reads every job.
pub const DIRTY_MAX: usize = 65_536;

impl Default for State {
    fn default() -> Self {
        State {
            snapshots: Arc::new(SnapshotCache::new()),
            users: UserCache::default(),
            settings: ArcSwap::from_pointee(Settings::default()),
            worker: Mutex::new(None),
            dirty: Mutex::new(Vec::new()),
            order: ArcSwapOption::empty(),
        }
    }
}

static STATE: OnceLock<State> = OnceLock::new();

/// The plugin state (created on first use).
pub fn state() -> &'static State {
    STATE.get_or_init(State::default)
}

impl State {
    /// The current settings (defaults until `init` read `PriorityParameters`).
    pub fn settings(&self) -> Arc<Settings> {
        self.settings.load_full()
    }

    /// Replace the settings (`init`, `priority_p_reconfig`).
    pub fn set_settings(&self, s: Settings) {
        self.settings.store(Arc::new(s));
    }

    /// The entitlement-first order of the last pass (none before the first one).
    pub fn order(&self) -> Option<Arc<EntitledOrder>> {
        self.order.load_full()
    }

    /// Publish the order a pass ranks by.
    pub fn set_order(&self, order: Option<Arc<EntitledOrder>>) {
        self.order.store(order);
    }

    /// Note that `priority_p_set` (re)computed `job_id` (O(1), no allocation once warm).
    pub fn mark_dirty(&self, job_id: u32) {
        if let Ok(mut d) = self.dirty.lock()
            && d.len() <= DIRTY_MAX
        {
            d.push(job_id);
        }
    }

    /// The dirty jobs since the last call; `None` when there were too many to track
    /// (then every job must be re-read).
    pub fn take_dirty(&self) -> Option<HashSet<u32>> {
        let mut d = self.dirty.lock().ok()?;
        if d.len() > DIRTY_MAX {
            d.clear();
            return None;
        }
        let set = d.iter().copied().collect();
        d.clear();
        Some(set)
    }
}
