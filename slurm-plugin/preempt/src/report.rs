//! Reporting Slurm's preemptions to budgetd (`POST /v1/preemptions`), so every lost
//! run is recorded with its preemptor, reason and GPU-hours (issue 4, item 5).
//!
//! Slurm never tells a preempt plugin that a preemption happened: it asks
//! `preemptable(victim, preemptor)` for many candidates and then preempts a subset.
//! So the `preemptable` hook only remembers, per victim, the latest allowed
//! `(run, preemptor, reason)` in a bounded in-memory map ([`Pending`]: a mutex and a
//! hash insert, no I/O). A background thread (never a callback) then walks the jobs
//! under the job *read* lock once per second and confirms a preemption when the
//! victim's `restart_cnt` grew past the remembered run **and** the remembered
//! preemptor has started since: a candidate that was allowed but not taken, or a
//! victim requeued for another reason (drain, node failure, `scontrol requeue`),
//! does not match and is dropped. Posts happen after the lock is released, with the
//! client's hard timeout; budgetd deduplicates by `(victim, run)`, so a retry or a
//! drain worker's own record of the same run never double-counts.

use std::collections::HashMap;
use std::sync::Mutex;

use policy_core::preempt::Allowed;

/// Remembered candidates older than this are forgotten (a preemption completes within
/// GraceTime + KillWait + a few scheduling cycles).
pub const MAX_AGE_SECS: i64 = 900;
/// Bound on remembered victims (a huge cluster evaluates many candidates per cycle).
pub const CAPACITY: usize = 8192;

/// Reason string as budgetd's `Reason` spells it.
pub fn reason_of(allowed: Option<&Allowed>) -> &'static str {
    match allowed {
        Some(Allowed::VictimFreeTier) => "free_tier",
        Some(Allowed::VictimOverBudget) => "over_budget",
        Some(Allowed::Rebalance { .. }) => "rebalance",
        None => "drain",
    }
}

/// An allowed preemption not yet confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub run: u32,
    pub preemptor: u32,
    pub reason: &'static str,
    /// When `preemptable` allowed it.
    pub at: i64,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub start: i64,
}

/// What the walk saw of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    pub restart_cnt: u32,
    pub running: bool,
    /// Start of the current run (0 if none).
    pub start: i64,
}

/// A confirmed preemption, ready to post.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmed {
    pub victim: u32,
    pub c: Candidate,
}

impl Confirmed {
    /// The `POST /v1/preemptions` body.
    pub fn body(&self, at: i64) -> String {
        serde_json::json!({
            "victim": self.victim, "run": self.c.run, "preemptor": self.c.preemptor,
            "reason": self.c.reason, "at": at, "account": self.c.account,
            "user": self.c.user, "gpus": self.c.gpus, "start": self.c.start,
        })
        .to_string()
    }
}

/// Victim -> latest allowed candidate.
#[derive(Debug, Default)]
pub struct Pending {
    map: Mutex<HashMap<u32, Candidate>>,
}

impl Pending {
    /// Called from `preemptable` (job lock held): O(1), no I/O.
    pub fn remember(&self, victim: u32, c: Candidate) {
        let Ok(mut m) = self.map.lock() else { return };
        if m.len() >= CAPACITY && !m.contains_key(&victim) {
            // Full: forget the oldest (rare; bounded work, off the common path).
            if let Some(oldest) = m.iter().min_by_key(|(_, c)| c.at).map(|(k, _)| *k) {
                m.remove(&oldest);
            }
        }
        m.insert(victim, c);
    }

    /// Job ids the walk must look at (victims and their preemptors).
    pub fn watched(&self) -> Vec<u32> {
        let Ok(m) = self.map.lock() else {
            return Vec::new();
        };
        m.iter().flat_map(|(v, c)| [*v, c.preemptor]).collect()
    }

    /// Confirm and drop resolved candidates given what the walk saw at `now`.
    pub fn resolve(&self, seen: &HashMap<u32, Seen>, now: i64) -> Vec<Confirmed> {
        let Ok(mut m) = self.map.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        m.retain(|&victim, c| {
            let Some(v) = seen.get(&victim) else {
                // Gone from job_list (purged): nothing more to learn.
                return false;
            };
            if v.restart_cnt > c.run {
                let p = seen.get(&c.preemptor);
                // The preemptor must have started at or after the decision (a second
                // of slack: start_time and our clock are both whole seconds).
                if p.is_some_and(|p| p.running && p.start >= c.at - 1) {
                    out.push(Confirmed {
                        victim,
                        c: c.clone(),
                    });
                }
                return false;
            }
            now - c.at <= MAX_AGE_SECS
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(run: u32, preemptor: u32, at: i64) -> Candidate {
        Candidate {
            run,
            preemptor,
            reason: "over_budget",
            at,
            account: "teamb".into(),
            user: "bob".into(),
            gpus: 2,
            start: 10,
        }
    }

    #[test]
    fn confirms_only_requeued_victims_whose_preemptor_started() {
        let p = Pending::default();
        p.remember(1, cand(0, 9, 100));
        p.remember(2, cand(0, 8, 100)); // allowed, never taken
        p.remember(3, cand(1, 7, 100)); // requeued, but its preemptor did not start
        let seen: HashMap<u32, Seen> = [
            (
                1,
                Seen {
                    restart_cnt: 1,
                    running: false,
                    start: 0,
                },
            ),
            (
                9,
                Seen {
                    restart_cnt: 0,
                    running: true,
                    start: 101,
                },
            ),
            (
                2,
                Seen {
                    restart_cnt: 0,
                    running: true,
                    start: 10,
                },
            ),
            (
                8,
                Seen {
                    restart_cnt: 0,
                    running: false,
                    start: 0,
                },
            ),
            (
                3,
                Seen {
                    restart_cnt: 2,
                    running: false,
                    start: 0,
                },
            ),
            (
                7,
                Seen {
                    restart_cnt: 0,
                    running: false,
                    start: 0,
                },
            ),
        ]
        .into_iter()
        .collect();
        let c = p.resolve(&seen, 102);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].victim, c[0].c.preemptor), (1, 9));
        assert!(c[0].body(102).contains("\"reason\":\"over_budget\""));
        // 2 is still a candidate, 1 and 3 are resolved.
        let mut w = p.watched();
        w.sort_unstable();
        assert_eq!(w, vec![2, 8]);
        // Old candidates expire.
        assert!(p.resolve(&seen, 100 + MAX_AGE_SECS + 1).is_empty());
        assert!(p.watched().is_empty());
        assert_eq!(reason_of(None), "drain");
    }
}
