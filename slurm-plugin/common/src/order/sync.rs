//! Job-state sync to budgetd (`POST /v1/sync/jobs`), from the background thread
//! (never from a callback), bounded by `budget_timeout_ms` through `budget-client`.
//! The snapshot comes through `crate::snapshot`, like in the other
//! plugins.
//!
//! Ingestion is idempotent (keyed by job and run), so a failed batch is simply sent
//! again. Ended runs are kept until budgetd acknowledges them, so an outage longer
//! than Slurm's `MinJobAge` loses no run. Failures are logged once when they start
//! (and when the error changes) and once when they end, never on every pass.

use std::collections::{HashMap, HashSet};

use crate::log;
use crate::settings::{LazyClient, Settings};
use budget_protocol::shadow::QueueOrder;
use budget_protocol::{JobRun, JobSync, RunState, SYNC_PATH, SyncOutcome};

/// Connection to budgetd's sync endpoint plus what must survive a failed batch.
#[derive(Debug)]
pub struct Syncer {
    /// The client, made on the first send on the background thread (it may read
    /// `budget_token_file`), or why it is unusable (every send then fails with it).
    client: LazyClient,
    /// The settings `client` was built from.
    built_from: Settings,
    sync_error: Option<String>,
    /// Ended/requeued runs not yet acknowledged by budgetd. Slurm forgets finished jobs
    /// after MinJobAge; keeping them here means an outage longer than that loses no run.
    outbox: HashMap<(u32, u32), JobRun>,
    /// Starts of runs seen running. Slurm clears `start_time` when it requeues a job,
    /// so a requeue that happens between two passes (or while budgetd is unreachable)
    /// is reported without the run's start; it is filled in from here. Entries go
    /// when budgetd acknowledges the run's final state.
    starts: HashMap<(u32, u32), i64>,
    /// Why the last shadow queue was not taken (logged once per error).
    queue_error: Option<String>,
}

/// Most ended runs kept while budgetd is unreachable (oldest dropped first is not
/// tracked; beyond this, new ones are dropped and an error is logged).
pub const OUTBOX_MAX: usize = 200_000;

impl Syncer {
    /// A syncer for `settings`' endpoint and timeout.
    pub fn new(settings: &Settings) -> Syncer {
        Syncer {
            client: LazyClient::new(settings),
            built_from: settings.clone(),
            sync_error: None,
            outbox: HashMap::new(),
            starts: HashMap::new(),
            queue_error: None,
        }
    }

    /// Follow `scontrol reconfigure`: a new endpoint or timeout gets a new client
    /// (the outbox and the remembered starts are kept).
    pub fn reconfigure(&mut self, settings: &Settings) {
        if !self.built_from.same_connection(settings) {
            self.client = LazyClient::new(settings);
            self.built_from = settings.clone();
        }
    }

    fn report(slot: &mut Option<String>, what: &str, result: Result<(), String>) {
        match result {
            Ok(()) => {
                if slot.take().is_some() {
                    log::info(&format!("{what}: budgetd reachable again"));
                }
            }
            Err(e) => {
                if slot.as_deref() != Some(e.as_str()) {
                    log::error(&format!(
                        "{what} failed: {e} (logged once; retrying every period)"
                    ));
                    *slot = Some(e);
                }
            }
        }
    }

    /// Send job state, in chunks of at most [`CHUNK_RUNS`] runs, each
    /// acknowledged on its own (one body of 16k+ jobs after a restart would pass
    /// budgetd's body limit and be refused on every pass). Ended runs missing
    /// from the current view (purged by Slurm) are added from the outbox until
    /// budgetd acknowledges them. Runs budgetd refuses (listed in its answer) are
    /// logged and count as acknowledged: sending them again would be refused again.
    ///
    /// Returns what budgetd acknowledged: [`SyncAck::All`], or the jobs of the
    /// chunks that were not (the pass resends those).
    pub fn send_jobs(&mut self, mut sync: JobSync) -> SyncAck {
        let live = sync.live.take();
        fill_starts(&mut self.starts, &mut sync.runs);
        merge_outbox(&mut self.outbox, &mut sync.runs);
        let chunks = chunk_bounds(&sync.runs, CHUNK_RUNS);
        let mut result = Ok(());
        let mut acked = 0;
        for (lo, hi) in chunks {
            let chunk = JobSync {
                collected_at: sync.collected_at,
                runs: sync.runs[lo..hi].to_vec(),
                live: None,
                queue: None,
            };
            let sent = match self.client.get() {
                Ok(c) => c
                    .post_json::<_, SyncOutcome>(SYNC_PATH, &chunk)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match sent {
                Ok(out) => {
                    for r in &out.refused {
                        log::error(&format!(
                            "job sync: budgetd refused job {} run {}: {} (not resent)",
                            r.job_id, r.run, r.error
                        ));
                    }
                    acked = hi;
                }
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        let (done, rest) = sync.runs.split_at(acked);
        for r in done {
            self.outbox.remove(&(r.job_id, r.run));
            if is_final(r) {
                self.starts.remove(&(r.job_id, r.run));
            }
        }
        for r in rest.iter().filter(|r| is_final(r)) {
            if self.outbox.len() >= OUTBOX_MAX && !self.outbox.contains_key(&(r.job_id, r.run)) {
                log::error("job sync outbox full: dropping ended runs until budgetd is back");
                break;
            }
            self.outbox.insert((r.job_id, r.run), r.clone());
        }
        // The complete live set only after every run of the pass (and every ended
        // run kept in the outbox) was acknowledged: budgetd closes the runs Slurm no
        // longer has, and must not close one whose real end is still on its way.
        if let Some(live) = live
            && rest.is_empty()
            && self.outbox.is_empty()
            && result.is_ok()
        {
            let msg = JobSync {
                collected_at: sync.collected_at,
                runs: Vec::new(),
                live: Some(live),
                queue: None,
            };
            let sent = match self.client.get() {
                Ok(c) => c
                    .post_json::<_, SyncOutcome>(SYNC_PATH, &msg)
                    .map_err(|e| e.to_string()),
                Err(e) => Err(e),
            };
            match sent {
                Ok(out) if out.closed > 0 => log::info(&format!(
                    "job sync: budgetd closed {} runs Slurm no longer has",
                    out.closed
                )),
                Ok(_) => {}
                Err(e) => result = Err(e),
            }
        }
        let ack = if rest.is_empty() {
            SyncAck::All
        } else {
            SyncAck::Except(rest.iter().map(|r| r.job_id).collect())
        };
        Self::report(&mut self.sync_error, "job sync", result);
        ack
    }
}

impl Syncer {
    /// Send shadow mode's pending queue in a message of its own (no runs): a
    /// budgetd that refuses it (the previous release denies the field) refuses
    /// only this message; the runs went before. Failures are logged once.
    pub fn send_queue(&mut self, queue: QueueOrder, collected_at: i64) {
        let msg = JobSync {
            collected_at,
            runs: Vec::new(),
            live: None,
            queue: Some(queue),
        };
        let sent = match self.client.get() {
            Ok(c) => c
                .post_json::<_, SyncOutcome>(SYNC_PATH, &msg)
                .map(|_| ())
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        Self::report(&mut self.queue_error, "shadow queue", sent);
    }
}

/// What budgetd acknowledged of one [`Syncer::send_jobs`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SyncAck {
    /// Every run.
    All,
    /// Every run except those of these jobs (a chunk failed; later ones were not sent).
    Except(HashSet<u32>),
}

/// Most runs in one sync request. A run is at most ~1 KiB of JSON (every text
/// field is bounded to 128 bytes), so a chunk stays under 2 MiB, half of
/// budgetd's default body limit.
pub const CHUNK_RUNS: usize = 2_000;

/// Chunk boundaries `[lo, hi)` over `runs`, at most `max` runs each, never
/// between two consecutive runs of the same job (a job's runs are acknowledged
/// together; the pass pushes them next to each other).
fn chunk_bounds(runs: &[JobRun], max: usize) -> Vec<(usize, usize)> {
    let max = max.max(1);
    let mut out = Vec::new();
    let mut lo = 0;
    while lo < runs.len() {
        let end = (lo + max).min(runs.len());
        // The last job boundary in (lo, end]; none: the job alone is longer than a chunk.
        let at_boundary = |c: usize| c == runs.len() || runs[c].job_id != runs[c - 1].job_id;
        let hi = (lo + 1..=end)
            .rev()
            .find(|&c| at_boundary(c))
            .unwrap_or(end);
        out.push((lo, hi));
        lo = hi;
    }
    out
}

fn is_final(r: &JobRun) -> bool {
    matches!(r.state, RunState::Ended | RunState::Requeued) && r.end.is_some()
}

/// Remember the starts of running runs; give a final run reported without a start
/// (requeued: Slurm cleared it) the start seen while it ran.
fn fill_starts(starts: &mut HashMap<(u32, u32), i64>, runs: &mut [JobRun]) {
    for r in runs.iter_mut() {
        let key = (r.job_id, r.run);
        match (r.state, r.start) {
            (RunState::Running, Some(s)) => {
                starts.insert(key, s);
            }
            (RunState::Ended | RunState::Requeued, None) => {
                if let Some(&s) = starts.get(&key) {
                    r.start = Some(s);
                }
            }
            _ => {}
        }
    }
}

/// Add outbox runs that the current batch does not already carry.
fn merge_outbox(outbox: &mut HashMap<(u32, u32), JobRun>, runs: &mut Vec<JobRun>) {
    if outbox.is_empty() {
        return;
    }
    let present: std::collections::HashSet<(u32, u32)> =
        runs.iter().map(|r| (r.job_id, r.run)).collect();
    runs.extend(
        outbox
            .values()
            .filter(|r| !present.contains(&(r.job_id, r.run)))
            .cloned(),
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(job_id: u32, run: u32, state: RunState, end: Option<i64>) -> JobRun {
        JobRun {
            start: Some(1),
            end,
            ..JobRun::new(job_id, run, "a", "u", 1, state)
        }
    }

    #[test]
    fn outbox_adds_only_missing_runs() {
        let mut outbox = HashMap::new();
        outbox.insert((1, 0), run(1, 0, RunState::Ended, Some(9)));
        outbox.insert((2, 0), run(2, 0, RunState::Requeued, Some(9)));
        let mut runs = vec![
            run(2, 0, RunState::Requeued, Some(9)),
            run(3, 0, RunState::Running, None),
        ];
        merge_outbox(&mut outbox, &mut runs);
        assert_eq!(runs.len(), 3);
        assert!(runs.iter().any(|r| r.job_id == 1));
        assert!(is_final(&runs[0]) && !is_final(&runs[1]));
    }

    #[test]
    fn chunks_are_bounded_and_keep_a_jobs_runs_together() {
        let runs: Vec<JobRun> = [1, 2, 2, 3, 4, 4, 4, 5]
            .iter()
            .map(|&j| run(j, 0, RunState::Running, None))
            .collect();
        assert_eq!(chunk_bounds(&runs, 3), vec![(0, 3), (3, 4), (4, 7), (7, 8)]);
        assert_eq!(chunk_bounds(&runs, 100), vec![(0, 8)]);
        assert_eq!(chunk_bounds(&[], 3), vec![]);
        // A job with more runs than a chunk is split rather than never sent.
        let same: Vec<JobRun> = (0..5)
            .map(|r| run(9, r, RunState::Ended, Some(2)))
            .collect();
        assert_eq!(chunk_bounds(&same, 2), vec![(0, 2), (2, 4), (4, 5)]);
    }

    #[test]
    fn requeued_run_gets_the_start_seen_while_running() {
        let mut starts = HashMap::new();
        let mut pass1 = vec![run(7, 0, RunState::Running, None)];
        fill_starts(&mut starts, &mut pass1);
        // Requeued between passes: Slurm reports run 0 without a start.
        let mut requeued = run(7, 0, RunState::Requeued, Some(9));
        requeued.start = None;
        let mut pass2 = vec![requeued, run(7, 1, RunState::Pending, None)];
        pass2[1].start = None;
        fill_starts(&mut starts, &mut pass2);
        assert_eq!(pass2[0].start, Some(1));
        assert_eq!(pass2[1].start, None);
    }
}
