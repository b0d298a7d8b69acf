//! The run ledger's mutations: job-state syncs from the plugin, the live set
//! that closes runs Slurm forgot, and imports (`ingest`).

use std::collections::BTreeMap;

use budget_protocol::{JobSync, RefusedRun, RunState, SyncOutcome};
use rusqlite::params;

use super::{Change, Store, meta_get, meta_set};
use crate::error::AppResult;
use crate::ledger::{Merge, RunRecord, conflict, merge};

const UPSERT_RUN: &str = "INSERT INTO runs(job_id, run, account, user, partition, gpus, gpu_type, start, end, \
     free_tier, min_runtime, nodes, state, first_seen, source, time_limit, checkpoint, submit, rerun) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) \
     ON CONFLICT(job_id, run, submit, rerun) DO UPDATE SET account = excluded.account, user = excluded.user, \
     partition = excluded.partition, gpus = excluded.gpus, gpu_type = excluded.gpu_type, start = excluded.start, \
     end = excluded.end, free_tier = excluded.free_tier, min_runtime = excluded.min_runtime, \
     nodes = excluded.nodes, state = excluded.state, time_limit = excluded.time_limit, \
     checkpoint = excluded.checkpoint";

/// Removes the row a merged record replaces under a new key (a row stored
/// without a submit time that adopted one).
const DELETE_RUN: &str =
    "DELETE FROM runs WHERE job_id = ?1 AND run = ?2 AND submit = ?3 AND rerun = ?4";

/// A run that a sync reported running after the ledger had ended it (at
/// `end`): the ledger keeps its end, and budgetd says so
/// (`budget_sync_contradicted_runs_total`, a rate-limited warning).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EndContradicted {
    pub job_id: u32,
    pub run: u32,
    pub end: i64,
}

impl Store {
    /// Ingests job-state runs from the plugin, run by run: a run that fails
    /// its checks is refused (listed in the outcome with the reason) and the
    /// others are stored, so one odd job never blocks the whole cluster's
    /// accounting.
    pub fn sync(&mut self, batch: &JobSync, now: i64) -> AppResult<SyncOutcome> {
        Ok(self.sync_noting_contradictions(batch, now)?.0)
    }

    /// [`Store::sync`], also returning the runs the batch reported running
    /// whose stored row had already ended ([`EndContradicted`]).
    pub fn sync_noting_contradictions(
        &mut self,
        batch: &JobSync,
        now: i64,
    ) -> AppResult<(SyncOutcome, Vec<EndContradicted>)> {
        let mut recs = Vec::with_capacity(batch.runs.len());
        let mut refused = Vec::new();
        let mut contradicted = Vec::new();
        let live_at = meta_get(&self.conn, "live_at")?.and_then(|v| v.parse::<i64>().ok());
        for (i, r) in batch.runs.iter().enumerate() {
            match RunRecord::from_job_run(r, now) {
                Ok(rec) => {
                    let rec = self.fold_raced_requeue(rec);
                    let (rec, lost) = self.started_again(rec, batch.collected_at, live_at);
                    contradicted.extend(self.end_contradicted(&rec, batch.collected_at));
                    recs.extend(lost);
                    recs.push(rec);
                }
                Err(e) => refused.push(RefusedRun {
                    job_id: r.job_id,
                    run: r.run,
                    index: i,
                    error: e,
                }),
            }
        }
        let mut out = self.ingest(&recs, "sync", false)?;
        out.refused = refused;
        if let Some(live) = &batch.live {
            out.closed = self.close_forgotten(live, batch.collected_at)?;
        }
        Ok((out, contradicted))
    }

    /// Whether `rec`, collected at `collected_at`, reports running a run
    /// whose stored row already ended before then. The merge rule keeps the
    /// stored end (an end is final: a run reopened by a late or wrong report
    /// would be charged twice), so the report counts as "unchanged"; this
    /// names it, for the warning and the counter that say the controller and
    /// the ledger disagree (an imported end while the job still ran, most
    /// likely). A report collected before the end is only late, not a
    /// contradiction.
    fn end_contradicted(&self, rec: &RunRecord, collected_at: i64) -> Option<EndContradicted> {
        if rec.state != RunState::Running || rec.end.is_some() {
            return None;
        }
        let old = self
            .ledger
            .find_rerun(rec.job_id, rec.run, rec.submit, rec.rerun)?;
        let end = old.end.filter(|&e| e < collected_at)?;
        (old.state == RunState::Ended).then_some(EndContradicted {
            job_id: rec.job_id,
            run: rec.run,
            end,
        })
    }

    /// A cancel racing a requeue (`scontrol requeue` and `scancel` within
    /// milliseconds): Slurm ends the job with `restart_cnt` already bumped but
    /// the previous run's start kept, so the plugin reports an ended run n with
    /// run n-1's start (and the end of both). Run n starts only after run n-1
    /// ended, so an ended run n whose start is the stored run n-1's start is
    /// run n-1 ending: it is taken as that run, which otherwise stayed open
    /// (charged until the live set closed it) beside a second charge for the
    /// same time (a requeue racing the job sync, seen on the testbed).
    fn fold_raced_requeue(&self, mut rec: RunRecord) -> RunRecord {
        if rec.run == 0 || !matches!(rec.state, RunState::Ended | RunState::Requeued) {
            return rec;
        }
        let Some(start) = rec.start else {
            return rec;
        };
        if let Some(prev) = self.ledger.with_start(rec.job_id, rec.run - 1, start) {
            rec.run = prev.run;
            rec.submit = prev.submit;
            rec.rerun = prev.rerun;
        }
        rec
    }

    /// Which row of its key `(job id, run, submit)` a synced record belongs to,
    /// and the lost run to close when the job started again after slurmctld lost
    /// a run: killed (-9) after a run started but before its state save recorded
    /// the start, slurmctld reloads the job pending with the same id, `restart_cnt`
    /// and submit time, and later starts it again. Slurm never reports a run
    /// pending after it started, nor a second start of one run, otherwise (a
    /// requeue is a new run number). So, against the key's current row:
    /// - a record with the start of one of the key's rows is that row (a repeat,
    ///   or a late report of a run lost earlier);
    /// - a pending record collected after the current row's start, or one with a
    ///   later start, means that run was lost: the record opens a row of its own
    ///   (`rerun` + 1), and the lost run, if still open, is closed like a run
    ///   Slurm forgot ([`Store::close_forgotten`]): at the last time it was known
    ///   alive (the newest complete live set, every one of which had it, or its
    ///   first sighting), never after this record was collected nor after the
    ///   next start, never before its own start;
    /// - anything else (a pending report collected before the start: stale) is
    ///   merged into the current row, which the merge rule keeps started.
    ///
    /// The lost run stays charged for the time it ran (docs/design.md §3.4);
    /// repeats find their rows by start and change nothing.
    fn started_again(
        &self,
        mut rec: RunRecord,
        collected_at: i64,
        live_at: Option<i64>,
    ) -> (RunRecord, Option<RunRecord>) {
        let Some(cur) = self.ledger.find(rec.job_id, rec.run, rec.submit) else {
            return (rec, None);
        };
        if rec.submit == 0 {
            // Unknown submit: the latest submission's (as the merge would adopt).
            rec.submit = cur.submit;
        }
        if let Some(s) = rec.start
            && let Some(r) = self
                .ledger
                .rerun_with_start(rec.job_id, rec.run, rec.submit, s)
        {
            rec.rerun = r;
            return (rec, None);
        }
        rec.rerun = cur.rerun;
        let Some(lost_start) = cur.start else {
            return (rec, None);
        };
        let again = match rec.start {
            None => rec.state == RunState::Pending && collected_at > lost_start,
            Some(s) => s > lost_start,
        };
        if !again {
            return (rec, None);
        }
        rec.rerun = cur.rerun + 1;
        if cur.end.is_some() || matches!(cur.state, RunState::Ended | RunState::Requeued) {
            return (rec, None);
        }
        let mut alive = live_at
            .unwrap_or(lost_start)
            .max(cur.first_seen)
            .min(collected_at);
        if let Some(s) = rec.start {
            alive = alive.min(s);
        }
        let end = alive.max(lost_start);
        tracing::warn!(
            "sync: job {} run {} (submit {}) started again after slurmctld lost it: \
             the lost run ({lost_start}..{end}) stays charged, the new one is rerun {}",
            rec.job_id,
            rec.run,
            rec.submit,
            rec.rerun
        );
        let mut lost = cur;
        lost.end = Some(end);
        lost.state = RunState::Ended;
        (rec, Some(lost))
    }

    /// Closes every pending or running run whose job is not in `live` (the
    /// complete set Slurm had at `at`), or is there with another submit time
    /// (a later run, or a reused id), at the time of the previous complete set
    /// (the last time Slurm was seen to have it; never before the run's start
    /// or first sighting). Runs first seen after `at` are left alone.
    /// A set collected before the newest one applied is stale and ignored: a
    /// request the plugin gave up on while budgetd hung is still in the socket's
    /// queue when budgetd resumes, and may be handled after a newer one.
    /// Returns how many were closed.
    pub fn close_forgotten(&mut self, live: &[(u32, i64)], at: i64) -> AppResult<u64> {
        let newest = meta_get(&self.conn, "live_at")?.and_then(|v| v.parse::<i64>().ok());
        if newest.is_some_and(|t| t > at) {
            tracing::info!("sync: ignored a stale live set (collected at {at}, newest {newest:?})");
            return Ok(0);
        }
        let live: std::collections::HashMap<u32, i64> = live.iter().copied().collect();
        let last_seen = newest.unwrap_or(at);
        let mut closes = Vec::new();
        for state in [RunState::Running, RunState::Pending] {
            for r in self.ledger.in_state(state) {
                if r.first_seen > at {
                    continue;
                }
                let forgotten = match live.get(&r.job_id) {
                    None => true,
                    Some(&s) => s != 0 && r.submit != 0 && s != r.submit,
                };
                if !forgotten {
                    continue;
                }
                let mut c = r.clone();
                let end = last_seen.max(r.first_seen).max(r.start.unwrap_or(i64::MIN));
                c.end = Some(end);
                c.state = RunState::Ended;
                closes.push(c);
            }
        }
        let out = self.ingest(&closes, "sync-live", false)?;
        let tx = self.conn.transaction()?;
        meta_set(&tx, "live_at", &at.to_string())?;
        tx.commit()?;
        if !closes.is_empty() {
            tracing::warn!(
                "sync: closed {} runs Slurm no longer has (at {last_seen})",
                closes.len()
            );
        }
        Ok(out.updated)
    }

    /// Writes checked records through the merge rule in one transaction and
    /// returns what changed. Nothing is written when nothing changed.
    ///
    /// A record belongs to the stored row of the same job id, run and submit
    /// time ([`Ledger::find`]): a reused job id is a new row, never merged
    /// into the old job's. With `strict` (imports), a record whose job id and
    /// run are stored with another account, user, size or start is listed in
    /// `refused` as a conflict instead of being counted "unchanged".
    pub fn ingest(
        &mut self,
        recs: &[RunRecord],
        source: &str,
        strict: bool,
    ) -> AppResult<SyncOutcome> {
        self.ingest_audited(recs, source, strict, |_| None)
    }

    /// One batch of an import (`crate::api::import`): `recs` are the parsed
    /// file's records from index `first` on. Checked against the store as it
    /// is now (an import stores its batches under separate takes of the store
    /// lock): a record whose account was deleted since the file was parsed is
    /// refused like a conflict, the rest go through [`Store::ingest`]'s strict
    /// merge. The batch's runs and the audit row `audit` makes from the
    /// batch's outcome are one transaction, so a backup or a crash never has
    /// one without the other. Refused records are named by their index in
    /// the whole file's records.
    pub(crate) fn import_batch<'a>(
        &mut self,
        recs: &[RunRecord],
        first: usize,
        audit: impl FnOnce(&SyncOutcome) -> Option<Change<'a>>,
    ) -> AppResult<SyncOutcome> {
        let mut gone = Vec::new();
        let mut known = Vec::with_capacity(recs.len());
        let mut index = Vec::with_capacity(recs.len());
        for (i, rec) in recs.iter().enumerate() {
            if self.tree.account(&rec.account).is_some() {
                known.push(rec.clone());
                index.push(first + i);
            } else {
                gone.push(RefusedRun {
                    job_id: rec.job_id,
                    run: rec.run,
                    index: first + i,
                    error: format!(
                        "account {:?} was deleted while the file was imported",
                        rec.account
                    ),
                });
            }
        }
        let mut out = self.ingest_audited(&known, "import", true, |o| {
            let mut all = o.clone();
            all.refused.extend(gone.iter().cloned());
            audit(&all)
        })?;
        for r in &mut out.refused {
            r.index = index.get(r.index).copied().unwrap_or(r.index);
        }
        out.refused.extend(gone);
        out.refused.sort_by_key(|r| r.index);
        Ok(out)
    }

    /// [`Store::ingest`] with the audit row `audit` makes from the outcome written in
    /// the same transaction.
    pub(crate) fn ingest_audited<'a>(
        &mut self,
        recs: &[RunRecord],
        source: &str,
        strict: bool,
        audit: impl FnOnce(&SyncOutcome) -> Option<Change<'a>>,
    ) -> AppResult<SyncOutcome> {
        let mut out = SyncOutcome::default();
        let live_at = if strict {
            meta_get(&self.conn, "live_at")?.and_then(|v| v.parse::<i64>().ok())
        } else {
            None
        };
        // Later records of the same key in one batch merge onto earlier ones.
        // Value: the merged row, and the submit of the stored row it replaces.
        let mut pending: BTreeMap<(u32, u32, i64, u32), (RunRecord, i64)> = BTreeMap::new();
        for (i, rec) in recs.iter().enumerate() {
            // A run's start is its own: a record with the start of one of its
            // key's reruns is that rerun (imports carry rerun 0).
            let rerouted = rec
                .start
                .and_then(|s| {
                    self.ledger
                        .rerun_with_start(rec.job_id, rec.run, rec.submit, s)
                })
                .filter(|&r| r != rec.rerun)
                .map(|rerun| RunRecord {
                    rerun,
                    ..rec.clone()
                });
            let rec = rerouted.as_ref().unwrap_or(rec);
            let in_batch = pending
                .range(
                    (rec.job_id, rec.run, i64::MIN, 0)..=(rec.job_id, rec.run, i64::MAX, u32::MAX),
                )
                .filter(|(k, _)| (rec.submit == 0 || k.2 == rec.submit) && k.3 == rec.rerun)
                .map(|(k, (r, rep))| (*k, r.clone(), *rep))
                .next_back();
            let from_batch = in_batch.is_some();
            let (stored, replaces) = match in_batch {
                Some((k, r, rep)) => {
                    pending.remove(&k);
                    (Some(r), rep)
                }
                None => {
                    let found = self
                        .ledger
                        .find_rerun(rec.job_id, rec.run, rec.submit, rec.rerun);
                    let rep = found.as_ref().map_or(rec.submit, |f| f.submit);
                    (found, rep)
                }
            };
            if strict
                && let Some(why) = stored.as_ref().and_then(|old| {
                    conflict(old, rec).or_else(|| ended_while_live(old, rec, live_at))
                })
            {
                out.refused.push(RefusedRun {
                    job_id: rec.job_id,
                    run: rec.run,
                    index: i,
                    error: why,
                });
                if let Some(old) = stored.filter(|_| from_batch) {
                    // Keep what an earlier record of the batch merged.
                    pending.insert(
                        (old.job_id, old.run, old.submit, old.rerun),
                        (old, replaces),
                    );
                }
                continue;
            }
            match merge(stored.as_ref(), rec) {
                Merge::Insert(r) => {
                    out.inserted += 1;
                    pending.insert((r.job_id, r.run, r.submit, r.rerun), (r, replaces));
                }
                Merge::Update(r) => {
                    out.updated += 1;
                    pending.insert((r.job_id, r.run, r.submit, r.rerun), (r, replaces));
                }
                Merge::Unchanged => {
                    out.unchanged += 1;
                    if let Some(old) = stored.filter(|_| from_batch) {
                        // Merged earlier in this batch: still to be written.
                        pending.insert(
                            (old.job_id, old.run, old.submit, old.rerun),
                            (old, replaces),
                        );
                    }
                }
            }
        }
        if pending.is_empty() {
            return Ok(out);
        }
        self.commit(
            audit(&out),
            |tx| {
                let mut del = tx.prepare_cached(DELETE_RUN)?;
                let mut st = tx.prepare_cached(UPSERT_RUN)?;
                for (r, replaces) in pending.values() {
                    if *replaces != r.submit {
                        del.execute(params![r.job_id, r.run, replaces, r.rerun])?;
                    }
                    st.execute(params![
                        r.job_id,
                        r.run,
                        r.account,
                        r.user,
                        r.partition,
                        r.gpus,
                        r.gpu_type,
                        r.start,
                        r.end,
                        r.free_tier,
                        r.min_runtime_secs,
                        r.nodes,
                        r.state.as_str(),
                        r.first_seen,
                        source,
                        r.time_limit_secs,
                        r.checkpoint_secs,
                        r.submit,
                        r.rerun
                    ])?;
                }
                Ok(())
            },
            |s| {
                for (r, replaces) in pending.values() {
                    s.ledger.put_replacing(r, *replaces);
                }
            },
        )?;
        Ok(out)
    }
}

/// Why an imported end cannot be stored run `old`'s: the controller's newest
/// complete live set (collected at `live_at`) still had the run running,
/// after the end the import gives. `None` when the end is not contradicted.
///
/// Refused rather than taken, with the conflict listed: an end is set once
/// and never changes, so a wrong one would stop charging a job that is still
/// running for good, while a refused one costs nothing (the controller's
/// syncs end the run when Slurm does, and the line can be imported again
/// once the job is over). Only an end the controller contradicts is refused:
/// an import still closes runs the controller stopped reporting (budgetd or
/// the plugins down), which is what imports are for.
fn ended_while_live(old: &RunRecord, incoming: &RunRecord, live_at: Option<i64>) -> Option<String> {
    let live_at = live_at?;
    let end = incoming.end?;
    // A running row first seen by the time of the newest complete live set
    // was in that set: the sync closes every running run it lacks.
    let seen_alive = old.state == RunState::Running
        && old.end.is_none()
        && old.first_seen <= live_at
        && end < live_at;
    seen_alive.then(|| {
        format!(
            "ends at {end}, but the controller reported the run still running at {live_at}; \
             its end is left to the controller's syncs (import the line again once the job is over)"
        )
    })
}
