//! Reporting Slurm's preemptions to budgetd (`POST /v1/preemptions`, the
//! [`budget_protocol::preemption`] record), so every lost run is recorded with its
//! preemptor, reason and GPU-hours.
//!
//! Slurm never tells a preempt plugin that a preemption happened: it asks
//! `preemptable(victim, preemptor)` for many candidates and then preempts a subset.
//! So the `preemptable` hook only remembers, per victim, the latest allowed
//! `(run, reason)` of each of up to [`PER_VICTIM`] preemptors in a bounded in-memory
//! map ([`Pending`]: a mutex and a hash insert, no I/O). A background thread (never a
//! callback) then walks the jobs under the job *read* lock once per second and confirms
//! a preemption when the victim's `restart_cnt` grew past the remembered run (or the
//! run ended in state PREEMPTED: a partition with `PreemptMode=CANCEL`) **and** a
//! remembered preemptor has started since (the one decided on last if several did). The
//! requeue comes first: with a GraceTime the victim keeps running through the grace
//! (and every pending job that cannot start asks about it meanwhile, hence several
//! preemptors per victim), and the preemptor starts only once the victim's processes
//! are gone (KillWait for a job that traps SIGTERM) and a scheduling cycle later —
//! measured: 7-8 s after the requeue with GraceTime=10, KillWait=5 (the contract suite of
//! `testbed-tests`, section 5). So a requeued victim stays watched while a remembered preemptor is still
//! pending. A candidate that was allowed but not taken, or a victim requeued for another
//! reason (drain, node failure, `scontrol requeue`) whose preemptors never start, does not
//! match and is dropped. Posts happen after the lock is released, with the client's hard
//! timeout; budgetd deduplicates by `(victim, run)`, so a retry or a drain worker's own
//! record of the same run never double-counts.

use std::collections::HashMap;
use std::sync::Mutex;

use budget_protocol::preemption::{PreemptionReason, PreemptionRecord};

/// Remembered candidates older than this are forgotten (a preemption completes within
/// GraceTime + KillWait + a few scheduling cycles).
pub const MAX_AGE_SECS: i64 = 900;
/// Bound on remembered victims (a huge cluster evaluates many candidates per cycle).
pub const CAPACITY: usize = 8192;
/// Bound on remembered preemptors per victim (the most recently allowed are kept).
pub const PER_VICTIM: usize = 8;

/// An allowed preemption not yet confirmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub run: u32,
    pub preemptor: u32,
    pub reason: PreemptionReason,
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
    /// Pending (a requeued victim, or a preemptor still waiting for its resources).
    pub pending: bool,
    /// Start of the current run (0 if none).
    pub start: i64,
    /// Ended in state PREEMPTED: Slurm cancelled it to preempt it (its
    /// partition's `PreemptMode=CANCEL`, or a job it could not requeue).
    pub ended_preempted: bool,
}

/// A confirmed preemption, ready to post.
#[derive(Debug, Clone, PartialEq)]
pub struct Confirmed {
    pub victim: u32,
    pub c: Candidate,
}

impl Confirmed {
    /// The `POST /v1/preemptions` body, confirmed at `at`.
    pub fn record(&self, at: i64) -> PreemptionRecord {
        PreemptionRecord {
            victim: self.victim,
            run: self.c.run,
            preemptor: Some(self.c.preemptor),
            reason: self.c.reason,
            at,
            account: Some(self.c.account.clone()),
            user: Some(self.c.user.clone()),
            gpus: Some(self.c.gpus),
            start: Some(self.c.start),
        }
    }
}

/// Victim -> the latest allowed candidate of each of its most recent preemptors, each
/// with the sequence number of that decision (decisions within one second are ordered).
#[derive(Debug, Default)]
pub struct Pending {
    map: Mutex<Map>,
}

#[derive(Debug, Default)]
struct Map {
    victims: HashMap<u32, Vec<(u64, Candidate)>>,
    seq: u64,
}

impl Pending {
    /// Called from `preemptable` (job lock held): bounded work, no I/O.
    pub fn remember(&self, victim: u32, c: Candidate) {
        let Ok(mut g) = self.map.lock() else { return };
        let Map { victims: m, seq } = &mut *g;
        *seq += 1;
        if m.len() >= CAPACITY && !m.contains_key(&victim) {
            // Full: forget the victim with the oldest decision (rare; off the common path).
            let oldest = m
                .iter()
                .min_by_key(|(_, cs)| cs.iter().map(|(n, _)| *n).max().unwrap_or(0))
                .map(|(k, _)| *k);
            if let Some(k) = oldest {
                m.remove(&k);
            }
        }
        let cs = m.entry(victim).or_default();
        // Candidates of an earlier run are stale once a later run is being decided on.
        cs.retain(|(_, x)| x.run >= c.run && x.preemptor != c.preemptor);
        if cs.len() >= PER_VICTIM
            && let Some(i) = (0..cs.len()).min_by_key(|&i| cs[i].0)
        {
            cs.swap_remove(i);
        }
        cs.push((*seq, c));
    }

    /// Job ids the walk must look at (victims and their preemptors).
    pub fn watched(&self) -> Vec<u32> {
        let Ok(g) = self.map.lock() else {
            return Vec::new();
        };
        g.victims
            .iter()
            .flat_map(|(v, cs)| std::iter::once(*v).chain(cs.iter().map(|(_, c)| c.preemptor)))
            .collect()
    }

    /// Confirm and drop resolved candidates given what the walk saw at `now`.
    ///
    /// Among the remembered preemptors of a requeued victim that started since their
    /// decision, the one decided on last is taken: without GraceTime Slurm requeues a
    /// victim right after the decision of the preemptor that takes it (a preemptor
    /// considered earlier in the same pass was given another victim); with GraceTime,
    /// jobs that ask about a victim in its grace and do not start are skipped.
    pub fn resolve(&self, seen: &HashMap<u32, Seen>, now: i64) -> Vec<Confirmed> {
        let Ok(mut g) = self.map.lock() else {
            return Vec::new();
        };
        let mut out = Vec::new();
        g.victims.retain(|&victim, cs| {
            let Some(v) = seen.get(&victim) else {
                // Gone from job_list (purged): nothing more to learn.
                return false;
            };
            // Requeued past a remembered run, or that run cancelled by a
            // preemption (PreemptMode=CANCEL): it was taken by someone.
            let requeued = |c: &Candidate| {
                v.restart_cnt > c.run || (v.ended_preempted && v.restart_cnt == c.run)
            };
            // The preemptor must have started at or after the decision (a second of
            // slack: start_time and our clock are both whole seconds).
            let started = |c: &Candidate| {
                seen.get(&c.preemptor)
                    .is_some_and(|p| p.running && p.start >= c.at - 1)
            };
            if let Some((_, c)) = cs
                .iter()
                .filter(|(_, c)| requeued(c) && started(c))
                .max_by_key(|(n, _)| *n)
            {
                out.push(Confirmed {
                    victim,
                    c: c.clone(),
                });
                return false;
            }
            cs.retain(|(_, c)| {
                now - c.at <= MAX_AGE_SECS
                    && (!requeued(c) || seen.get(&c.preemptor).is_some_and(|p| p.pending))
            });
            !cs.is_empty()
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
            reason: PreemptionReason::OverBudget,
            at,
            account: "teamb".into(),
            user: "bob".into(),
            gpus: 2,
            start: 10,
        }
    }

    fn seen(restart_cnt: u32, state: &str, start: i64) -> Seen {
        Seen {
            restart_cnt,
            running: state == "R",
            pending: state == "PD",
            start,
            ended_preempted: state == "PR",
        }
    }

    #[test]
    fn confirms_only_requeued_victims_whose_preemptor_started() {
        let p = Pending::default();
        p.remember(1, cand(0, 9, 100));
        p.remember(2, cand(0, 8, 100)); // allowed, never taken
        p.remember(3, cand(1, 7, 100)); // requeued, but its preemptor ended without running
        let seen: HashMap<u32, Seen> = [
            (1, seen(1, "PD", 0)),
            (9, seen(0, "R", 101)),
            (2, seen(0, "R", 10)),
            (8, seen(0, "PD", 0)),
            (3, seen(2, "PD", 0)),
            (7, seen(0, "CA", 0)),
        ]
        .into_iter()
        .collect();
        let c = p.resolve(&seen, 102);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].victim, c[0].c.preemptor), (1, 9));
        let body = serde_json::to_value(c[0].record(102)).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "victim": 1, "run": 0, "preemptor": 9, "reason": "over_budget", "at": 102,
                "account": "teamb", "user": "bob", "gpus": 2, "start": 10,
            })
        );
        // 2 is still a candidate, 1 and 3 are resolved.
        let mut w = p.watched();
        w.sort_unstable();
        assert_eq!(w, vec![2, 8]);
        // Old candidates expire.
        assert!(p.resolve(&seen, 100 + MAX_AGE_SECS + 1).is_empty());
        assert!(p.watched().is_empty());
    }

    #[test]
    fn grace_time_requeue_before_the_preemptor_starts() {
        // GraceTime: the victim is requeued at 115, its preemptor 9 starts at 122 (after
        // KillWait and a cycle); meanwhile a lower-priority job 8 asked about it too.
        let p = Pending::default();
        p.remember(1, cand(0, 9, 100));
        p.remember(1, cand(0, 8, 112));
        p.remember(1, cand(0, 9, 114));
        let waiting: HashMap<u32, Seen> = [
            (1, seen(1, "PD", 0)),
            (9, seen(0, "PD", 0)),
            (8, seen(0, "PD", 0)),
        ]
        .into_iter()
        .collect();
        for t in 115..122 {
            assert!(p.resolve(&waiting, t).is_empty(), "still waiting at {t}");
        }
        let mut w = p.watched();
        w.sort_unstable();
        assert_eq!(w, vec![1, 8, 9]);
        let mut started = waiting.clone();
        started.insert(9, seen(0, "R", 122));
        let c = p.resolve(&started, 122);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].victim, c[0].c.preemptor, c[0].c.at), (1, 9, 114));
        assert!(p.watched().is_empty());
    }

    #[test]
    fn same_pass_two_preemptors_the_last_decision_took_it() {
        // One pass: job 6 is allowed victims 4 and 5 and takes 4; job 7 is then allowed
        // 5 and takes it. Both start in the same second (seen live: two labx jobs).
        let p = Pending::default();
        p.remember(4, cand(0, 6, 100));
        p.remember(5, cand(0, 6, 100));
        p.remember(5, cand(0, 7, 100));
        let s: HashMap<u32, Seen> = [
            (4, seen(1, "PD", 0)),
            (5, seen(1, "PD", 0)),
            (6, seen(0, "R", 101)),
            (7, seen(0, "R", 101)),
        ]
        .into_iter()
        .collect();
        let mut c: Vec<(u32, u32)> = p
            .resolve(&s, 101)
            .iter()
            .map(|x| (x.victim, x.c.preemptor))
            .collect();
        c.sort_unstable();
        assert_eq!(c, vec![(4, 6), (5, 7)]);
    }

    #[test]
    fn a_victim_cancelled_by_its_preemption_is_confirmed_too() {
        // PreemptMode=CANCEL: the victim's run ends PREEMPTED, no requeue.
        let p = Pending::default();
        p.remember(1, cand(0, 9, 100));
        p.remember(2, cand(0, 8, 100));
        let s: HashMap<u32, Seen> = [
            (1, seen(0, "PR", 0)),
            (9, seen(0, "R", 101)),
            // Ended on its own (completed): not taken.
            (2, seen(0, "CD", 0)),
            (8, seen(0, "R", 101)),
        ]
        .into_iter()
        .collect();
        let c = p.resolve(&s, 102);
        assert_eq!(c.len(), 1);
        assert_eq!((c[0].victim, c[0].c.run, c[0].c.preemptor), (1, 0, 9));
    }

    #[test]
    fn a_requeued_victim_whose_preemptors_never_start_is_dropped() {
        let p = Pending::default();
        p.remember(1, cand(0, 9, 100));
        let s: HashMap<u32, Seen> = [(1, seen(1, "PD", 0)), (9, seen(0, "CA", 0))]
            .into_iter()
            .collect();
        assert!(p.resolve(&s, 101).is_empty());
        assert!(p.watched().is_empty());
        // A preemptor that started before the decision did not take this victim.
        p.remember(2, cand(0, 9, 100));
        let s: HashMap<u32, Seen> = [(2, seen(1, "PD", 0)), (9, seen(0, "R", 50))]
            .into_iter()
            .collect();
        assert!(p.resolve(&s, 101).is_empty());
        assert!(p.watched().is_empty());
    }

    #[test]
    fn bounded_per_victim_and_a_new_run_replaces_old_candidates() {
        let p = Pending::default();
        for i in 0..(PER_VICTIM as u32 + 3) {
            p.remember(1, cand(0, 100 + i, i64::from(i)));
        }
        let w = p.watched();
        assert_eq!(w.len(), PER_VICTIM + 1);
        assert!(!w.contains(&100), "the oldest decision was forgotten");
        p.remember(1, cand(1, 7, 50));
        let mut w = p.watched();
        w.sort_unstable();
        assert_eq!(w, vec![1, 7]);
    }
}
