//! The plugin's process-wide state: the snapshot (swapped atomically), safe mode,
//! the user-name cache, the configuration and the background worker handle.
//!
//! Callbacks (`priority_p_set`, `sprio`) only *read* here: one atomic load of an `Arc`,
//! no lock that the background thread could hold during I/O.

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arc_swap::{ArcSwap, ArcSwapOption};
use budget_protocol::PluginSnapshot;
use slurm_plugin_common::log;
use slurm_plugin_common::worker::Worker;

use crate::config::Config;
use crate::users::UserCache;

/// A snapshot with the local time it was last confirmed current by budgetd.
#[derive(Debug)]
pub struct Loaded {
    pub snapshot: PluginSnapshot,
    /// Local Unix time of the last successful fetch (200 or 304).
    pub confirmed_at: AtomicI64,
}

/// Everything the plugin keeps between callbacks.
#[derive(Debug)]
pub struct State {
    pub snapshot: ArcSwapOption<Loaded>,
    safe_mode: AtomicBool,
    pub users: UserCache,
    /// Replaced on `scontrol reconfigure` (the refresh period applies from the next start).
    pub config: ArcSwap<Config>,
    pub worker: Mutex<Option<Worker>>,
    /// Jobs `priority_p_set` saw since the last pass (Slurm calls it after every job
    /// update, requeue and release): the pass re-reads their keys. Both sides run under
    /// the job write lock, so this mutex is never contended.
    dirty: Mutex<Vec<u32>>,
}

/// Beyond this many dirty jobs between two passes the pass re-reads every job.
pub const DIRTY_MAX: usize = 65_536;

impl Default for State {
    fn default() -> Self {
        State {
            snapshot: ArcSwapOption::empty(),
            safe_mode: AtomicBool::new(false),
            users: UserCache::default(),
            config: ArcSwap::from_pointee(Config::default()),
            worker: Mutex::new(None),
            dirty: Mutex::new(Vec::new()),
        }
    }
}

static STATE: OnceLock<State> = OnceLock::new();

/// The plugin state (created on first use).
pub fn state() -> &'static State {
    STATE.get_or_init(State::default)
}

impl State {
    /// The current configuration (defaults until `init` parsed one).
    pub fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Current snapshot, if any (possibly stale: see [`State::is_stale`]).
    pub fn current(&self) -> Option<Arc<Loaded>> {
        self.snapshot.load_full()
    }

    /// Max snapshot age before safe mode: config override, else the snapshot's policy.
    pub fn max_age(&self, loaded: Option<&Loaded>) -> i64 {
        self.config()
            .max_age_secs
            .or_else(|| loaded.map(|l| l.snapshot.policy.snapshot_max_age_secs))
            .unwrap_or(60)
            .max(1)
    }

    /// True when there is no snapshot or it was last confirmed too long ago.
    pub fn is_stale(&self, now: i64) -> bool {
        match self.current() {
            None => true,
            Some(l) => now - l.confirmed_at.load(Ordering::Relaxed) > self.max_age(Some(&l)),
        }
    }

    /// Update safe mode from staleness; logs once on entry and once on exit.
    /// Returns the new value.
    pub fn update_safe_mode(&self, now: i64, why: &str) -> bool {
        let stale = self.is_stale(now);
        let was = self.safe_mode.swap(stale, Ordering::Relaxed);
        if stale && !was {
            log::error(&format!(
                "entering safe mode: budget snapshot missing or older than {} s ({why}); \
                 priorities keep the last known ranking (FIFO by age if none), no rebalancing",
                self.max_age(self.current().as_deref())
            ));
        } else if !stale && was {
            log::info("leaving safe mode: fresh budget snapshot from budgetd");
        }
        stale
    }

    /// Whether safe mode is on (for other components, e.g. a preempt plugin).
    pub fn safe_mode(&self) -> bool {
        self.safe_mode.load(Ordering::Relaxed)
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
    pub fn take_dirty(&self) -> Option<std::collections::HashSet<u32>> {
        let mut d = self.dirty.lock().ok()?;
        if d.len() > DIRTY_MAX {
            d.clear();
            return None;
        }
        let set = d.iter().copied().collect();
        d.clear();
        Some(set)
    }

    /// Start in safe mode without logging (nothing fetched yet at init).
    pub fn set_safe_mode_quiet(&self, on: bool) {
        self.safe_mode.store(on, Ordering::Relaxed);
    }
}
