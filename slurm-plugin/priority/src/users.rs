//! uid -> user name cache.
//!
//! Slurm leaves `job_record->user_name` NULL until a job launches, and resolving a uid
//! through NSS (`getpwuid_r`) may do network I/O (LDAP, SSSD): forbidden in a callback
//! and under the job lock. So callbacks only read this cache and record misses; the
//! background thread resolves the misses with no Slurm lock held, and the next pass
//! ranks those jobs with their real names.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Shared cache of resolved names and pending misses.
#[derive(Debug, Default)]
pub struct UserCache {
    names: RwLock<HashMap<u32, Arc<str>>>,
    misses: Mutex<HashSet<u32>>,
    /// Bumped whenever a name is added or changed (the pass re-ranks jobs then).
    generation: AtomicU64,
}

impl UserCache {
    /// Name for `uid` if already resolved; records a miss otherwise. Never blocks on I/O.
    pub fn get(&self, uid: u32) -> Option<Arc<str>> {
        if let Ok(names) = self.names.read()
            && let Some(n) = names.get(&uid)
        {
            return Some(Arc::clone(n));
        }
        if let Ok(mut m) = self.misses.lock() {
            m.insert(uid);
        }
        None
    }

    /// Remember a name Slurm already knows (job records of launched jobs carry it).
    pub fn learn(&self, uid: u32, name: &str) {
        if let Ok(names) = self.names.read()
            && names.get(&uid).is_some_and(|n| &**n == name)
        {
            return;
        }
        if let Ok(mut names) = self.names.write() {
            names.insert(uid, Arc::from(name));
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Changes whenever the cache learns a name.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// Resolve recorded misses with `resolve` (may block: call without Slurm locks).
    /// Returns how many names were added.
    pub fn resolve_misses(&self, resolve: impl Fn(u32) -> Option<String>) -> usize {
        let misses: Vec<u32> = match self.misses.lock() {
            Ok(mut m) => m.drain().collect(),
            Err(_) => return 0,
        };
        let mut added = 0;
        for uid in misses {
            if let Some(name) = resolve(uid) {
                self.learn(uid, &name);
                added += 1;
            }
        }
        added
    }
}

pub use slurm_plugin_common::users::lookup_uid;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miss_then_resolve() {
        let c = UserCache::default();
        assert_eq!(c.get(1000), None);
        assert_eq!(c.resolve_misses(|u| Some(format!("u{u}"))), 1);
        assert_eq!(c.get(1000).as_deref(), Some("u1000"));
        assert_eq!(c.resolve_misses(|_| None), 0);
        assert_eq!(lookup_uid(0).as_deref(), Some("root"));
    }
}
