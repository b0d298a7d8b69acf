//! uid -> user name, for job records that carry no name yet.
//!
//! Slurm leaves `job_record->user_name` NULL until a job launches (22.05), and
//! resolving a uid through NSS (`getpwuid_r`) may do network I/O (LDAP, SSSD):
//! forbidden in a callback and under the job lock. So callbacks only read a
//! [`UserCache`] and record misses; a plugin's background thread resolves the misses
//! with [`lookup_uid`] and no Slurm lock held. Until then `priority/budget` ranks such
//! a job at its account, and `preempt/budget` places it at its account node
//! (conservative: same-account jobs are never rebalanced against each other).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

/// Shared cache of resolved names and pending misses.
#[derive(Debug, Default)]
pub struct UserCache {
    names: RwLock<HashMap<u32, Arc<str>>>,
    misses: Mutex<HashSet<u32>>,
    /// Bumped whenever a name is added or changed (priority/budget re-ranks then).
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

/// `getpwuid_r`: the user name of `uid`, or `None`. May block on NSS: background
/// threads only.
pub fn lookup_uid(uid: u32) -> Option<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: an all-zero passwd is a valid out-parameter for getpwuid_r.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: buffers are valid for the given lengths; result is checked below.
    let rc = unsafe {
        libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        )
    };
    if rc != 0 || result.is_null() || pwd.pw_name.is_null() {
        return None;
    }
    // SAFETY: pw_name points into `buf`, NUL-terminated by getpwuid_r.
    unsafe { crate::cstr::opt_string(pwd.pw_name) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn miss_then_resolve_then_learn() {
        let c = UserCache::default();
        assert_eq!(c.get(1000), None);
        let g0 = c.generation();
        assert_eq!(c.resolve_misses(|u| Some(format!("u{u}"))), 1);
        assert_eq!(c.get(1000).as_deref(), Some("u1000"));
        assert!(c.generation() > g0);
        assert_eq!(c.resolve_misses(|_| None), 0, "nothing missed since");
        let g1 = c.generation();
        c.learn(1000, "u1000");
        assert_eq!(c.generation(), g1, "the same name changes nothing");
        c.learn(1000, "renamed");
        assert_eq!(c.get(1000).as_deref(), Some("renamed"));
        assert!(c.generation() > g1);
    }

    #[test]
    fn root_is_uid_zero() {
        assert_eq!(lookup_uid(0).as_deref(), Some("root"));
        let c = UserCache::default();
        assert_eq!(c.get(0), None);
        assert_eq!(c.resolve_misses(lookup_uid), 1);
        assert_eq!(c.get(0).as_deref(), Some("root"));
    }
}
