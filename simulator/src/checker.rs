//! Invariant checker: an independent pass over everything the engine did.
//!
//! The engine records every run (job, run number, GPUs per node, start, end,
//! how it ended). After the replay this module re-derives, without using the
//! engine's state or the policy core's protection helper:
//! - **contract breaks**: a non-free run preempted before `start + min_runtime`;
//! - **double booking**: at no instant does any node hold more GPUs than it has
//!   (sweep over each node's run intervals, ends before starts at equal times);
//! - **accounting**: every GPU-second is counted once: the sum over runs of
//!   GPUs x length equals the engine's busy counter and equals useful work
//!   (each job's duration x GPUs) plus the lost work of preempted runs; each
//!   job's saved progress plus its final run equals its duration;
//!
//! Jobs still running or pending when a replay stops at its horizon are
//! left out of the per-job check (the engine reports them as unfinished).
//!
//! The counts are reported in the results and must all be zero.

use serde::Serialize;

use crate::cluster::Alloc;

/// One run as the engine recorded it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RunRecord {
    /// Index of the job in the (sorted) trace.
    pub job: u32,
    /// 0 for the first run, +1 per requeue.
    pub run: u32,
    pub start: i64,
    /// `None` while running.
    pub end: Option<i64>,
    pub gpus: u32,
    #[serde(skip)]
    pub alloc: Alloc,
    /// Ended by preemption (requeued) rather than by completing.
    pub preempted: bool,
    /// Declared minimum runtime of the job.
    pub min_runtime: i64,
    /// Free tier (no protection, not charged).
    pub free: bool,
    /// Work saved by checkpoints during this run (seconds; preempted runs only).
    pub saved: i64,
    /// Job index of the preemptor, for preempted runs.
    pub preempted_by: Option<u32>,
}

/// What the checker found; every field must be 0.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckReport {
    pub contract_breaks: u64,
    pub double_booked: u64,
    pub accounting_errors: u64,
    /// Recalculations where the incremental window usage differed from
    /// `policy_core::window_usage` (only counted with `verify_window`).
    pub window_mismatches: u64,
}

impl CheckReport {
    pub fn total(&self) -> u64 {
        self.contract_breaks + self.double_booked + self.accounting_errors + self.window_mismatches
    }
}

/// Per-job facts the accounting check needs.
#[derive(Debug, Clone, Copy)]
pub struct JobFacts {
    pub gpus: u32,
    pub duration: i64,
    pub done: bool,
}

/// Runs the checks over `runs`.
pub fn check(
    runs: &[RunRecord],
    jobs: &[JobFacts],
    nodes: u32,
    gpus_per_node: u32,
    engine_busy_gpu_secs: i64,
    engine_lost_gpu_secs: i64,
) -> CheckReport {
    let mut r = CheckReport::default();
    // Contracts.
    for run in runs.iter().filter(|x| x.preempted) {
        let end = run.end.unwrap_or(i64::MAX);
        if !run.free && end < run.start.saturating_add(run.min_runtime.max(0)) {
            r.contract_breaks += 1;
        }
    }
    // Double booking: per node sweep.
    let mut per_node: Vec<Vec<(i64, i64)>> = vec![Vec::new(); nodes as usize];
    for run in runs {
        let end = run.end.unwrap_or(i64::MAX);
        if end < run.start {
            r.double_booked += 1;
            continue;
        }
        // A zero-length run (the trace has zero-duration jobs) holds no GPU for any
        // time; sweeping its +g/-g at one instant would sort -g first and read as
        // a negative holding (seen on Philly with 176 nodes).
        if end == run.start {
            continue;
        }
        for &(n, g) in &run.alloc {
            match per_node.get_mut(n as usize) {
                Some(v) => {
                    v.push((run.start, i64::from(g)));
                    v.push((end, -i64::from(g)));
                }
                None => r.double_booked += 1,
            }
        }
        if run.alloc.iter().map(|&(_, g)| g).sum::<u32>() != run.gpus {
            r.double_booked += 1;
        }
    }
    for mut ev in per_node {
        ev.sort_unstable();
        let mut held = 0i64;
        for (_, d) in ev {
            held += d;
            if held > i64::from(gpus_per_node) || held < 0 {
                r.double_booked += 1;
            }
        }
    }
    // Accounting.
    let mut busy = 0i64;
    let mut lost = 0i64;
    let mut work = vec![0i64; jobs.len()];
    for run in runs {
        let Some(end) = run.end else { continue };
        let len = end - run.start;
        busy += len * i64::from(run.gpus);
        if run.preempted {
            lost += (len - run.saved) * i64::from(run.gpus);
            if let Some(w) = work.get_mut(run.job as usize) {
                *w += run.saved;
            }
        } else if let Some(w) = work.get_mut(run.job as usize) {
            *w += len;
        }
    }
    // Useful work: whole durations of finished jobs, saved progress of the others.
    let useful: i64 = jobs
        .iter()
        .zip(&work)
        .map(|(j, w)| if j.done { j.duration } else { *w } * i64::from(j.gpus))
        .sum();
    if busy != engine_busy_gpu_secs || lost != engine_lost_gpu_secs || busy != useful + lost {
        r.accounting_errors += 1;
    }
    for (j, w) in jobs.iter().zip(&work) {
        if j.done && *w != j.duration {
            r.accounting_errors += 1;
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job: u32, start: i64, end: i64, alloc: Alloc, preempted: bool, min: i64) -> RunRecord {
        let gpus = alloc.iter().map(|a| a.1).sum();
        RunRecord {
            job,
            run: 0,
            start,
            end: Some(end),
            gpus,
            alloc,
            preempted,
            min_runtime: min,
            free: false,
            saved: 0,
            preempted_by: None,
        }
    }

    #[test]
    fn clean_history_passes() {
        let runs = vec![
            run(0, 0, 10, vec![(0, 4)], false, 5),
            run(1, 0, 10, vec![(0, 4)], false, 5),
            run(2, 10, 20, vec![(0, 8)], false, 0),
        ];
        let jobs = [
            JobFacts {
                gpus: 4,
                duration: 10,
                done: true,
            },
            JobFacts {
                gpus: 4,
                duration: 10,
                done: true,
            },
            JobFacts {
                gpus: 8,
                duration: 10,
                done: true,
            },
        ];
        assert_eq!(check(&runs, &jobs, 1, 8, 160, 0), CheckReport::default());
    }

    #[test]
    fn zero_length_runs_hold_nothing() {
        // A zero-duration job placed on a full node at the instant another run
        // ends there: no GPU is ever held twice, nor negatively.
        let runs = vec![
            run(0, 0, 10, vec![(0, 8)], false, 0),
            run(1, 10, 10, vec![(0, 8)], false, 0),
            run(2, 10, 20, vec![(0, 8)], false, 0),
        ];
        let jobs = [
            JobFacts {
                gpus: 8,
                duration: 10,
                done: true,
            },
            JobFacts {
                gpus: 8,
                duration: 0,
                done: true,
            },
            JobFacts {
                gpus: 8,
                duration: 10,
                done: true,
            },
        ];
        assert_eq!(check(&runs, &jobs, 1, 8, 160, 0).double_booked, 0);
        // A run that ends before it starts is a violation.
        let bad = vec![run(0, 10, 5, vec![(0, 8)], false, 0)];
        let one = [JobFacts {
            gpus: 8,
            duration: 0,
            done: false,
        }];
        assert_eq!(check(&bad, &one, 1, 8, 0, 0).double_booked, 1);
    }

    #[test]
    fn each_violation_is_caught() {
        // Preempted at 3 inside a 5 s window; its 3 s are lost work.
        let mut runs = vec![
            run(0, 0, 3, vec![(0, 4)], true, 5),
            run(0, 3, 13, vec![(0, 4)], false, 5),
        ];
        runs[1].run = 1;
        let jobs = [JobFacts {
            gpus: 4,
            duration: 10,
            done: true,
        }];
        let r = check(&runs, &jobs, 1, 8, 52, 12);
        assert_eq!(
            (r.contract_breaks, r.accounting_errors, r.double_booked),
            (1, 0, 0)
        );
        // Two 6-GPU runs overlap on an 8-GPU node.
        let runs = vec![
            run(0, 0, 10, vec![(0, 6)], false, 0),
            run(1, 5, 15, vec![(0, 6)], false, 0),
        ];
        let jobs = [JobFacts {
            gpus: 6,
            duration: 10,
            done: true,
        }; 2];
        let r = check(&runs, &jobs, 1, 8, 120, 0);
        assert_eq!(r.double_booked, 1);
        // Busy differs from the engine's counter and a job ran short.
        let runs = vec![run(0, 0, 9, vec![(0, 1)], false, 0)];
        let jobs = [JobFacts {
            gpus: 1,
            duration: 10,
            done: true,
        }];
        let r = check(&runs, &jobs, 1, 8, 10, 0);
        assert_eq!(r.accounting_errors, 2);
        assert!(r.total() > 0);
    }
}
