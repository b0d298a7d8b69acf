//! Idle GPUs (docs/design.md §8): node-agent reports, the idle ledger, and the jobs
//! flagged as idle beyond `Policy::idle_threshold_secs`.
//!
//! `budget-agent` posts an [`AgentReport`] per node every sample period. For
//! each GPU it says which Slurm jobs have processes on it and `idle_secs`, how
//! long the GPU has been continuously idle while held (0 when busy or free).
//! budgetd keeps two things:
//! - the latest report of each node (`agent_reports`, replaced by newer ones:
//!   an older report arriving late never replaces a newer one);
//! - the idle ledger (`idle_streaks`): per (job, GPU uuid) the idle streaks as
//!   closed intervals `[start, end]`, where `start = at - idle_secs` (the agent's
//!   own streak start, so every report of one streak names the same row) and
//!   `end` is the latest report that still saw it idle.
//!
//! Why intervals and not samples: idle GPU-hours over any window are then a
//! sum of clipped interval lengths, exact to the second and independent of
//! how often agents report; and ingestion is idempotent (a repeated report
//! finds its row and leaves `end` where it is).
//!
//! Agent restarts: a restarted agent forgets its streaks and starts counting
//! from 0, which would split one long idle stretch into two and reset the
//! "idle since" of a squatting job. A new streak therefore *continues* the
//! previous streak of the same job and GPU when it starts at most
//! [`MERGE_GAP_SECS`] after that streak's last report and no report in
//! between saw the GPU busy or released: each report marks the recent streaks
//! it does not continue with `broken_at` (the first such report's time). A
//! restarted agent's first sample also shows `idle_secs = 0`, but at the very
//! instant its new streak starts, so it does not break the old one; a real
//! busy sample comes strictly before the new start and does.
//!
//! A GPU shared by several jobs (MPS, shards) counts once per job. Idle
//! GPU-hours count every recorded idle second of a job, not only the part past
//! the threshold: holding a GPU idle burns the team's budget either way.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use budget_protocol::AgentReport;
use budget_protocol::idle::{
    AccountIdle, FlaggedJob, IdleGpu, IdleReport, NodeReport, ReportOutcome,
};
use rusqlite::{OptionalExtension, Transaction, params};

use crate::error::{AppError, AppResult};
use crate::store::{Store, hours};

/// Longest gap between two streaks of one job and GPU, with no busy report
/// between them, that still counts as one streak (an agent restart). Must
/// exceed the agent's interval (default 30 s) plus its restart time.
pub const MERGE_GAP_SECS: i64 = 300;
/// Most GPUs one report may list (a node has at most a few dozen).
pub const MAX_GPUS_PER_REPORT: usize = 64;
/// Most processes one GPU sample may list.
pub const MAX_PROCESSES_PER_GPU: usize = 256;
/// Most (job, GPU) pairs one report may name: each is a row written under
/// the store lock, so one report must stay a small transaction.
pub const MAX_JOB_GPUS_PER_REPORT: usize = 512;
/// Latest reports of nodes silent this long are deleted (nodes renamed or
/// removed); their idle streaks stay in the idle ledger.
pub const AGENT_REPORT_RETENTION_SECS: i64 = 30 * 86_400;
/// Idle streaks that ended longer ago than this (or than two policy windows,
/// if longer) leave the idle ledger: `GET /v1/idle` reports over the window by
/// default, and without pruning the table grew with every report forever.
pub const IDLE_STREAK_RETENTION_SECS: i64 = 90 * 86_400;
/// How far ahead of budgetd's clock a report's `at` may be.
pub const MAX_CLOCK_SKEW_SECS: i64 = 300;

fn check_name(what: &str, v: &str) -> AppResult<()> {
    let ok = !v.is_empty()
        && v.len() <= 128
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(AppError::Invalid(format!(
            "{what} {v:?} must be 1-128 characters of letters, digits, '-', '_', '.', ':'"
        )))
    }
}

/// Checks a report as a whole before anything is written.
pub fn check(r: &AgentReport, now: i64) -> AppResult<()> {
    check_name("node", &r.node)?;
    if r.at <= 0 || r.at > now + MAX_CLOCK_SKEW_SECS || r.at > crate::ledger::MAX_TIME {
        return Err(AppError::Invalid(format!(
            "at {} is not a sane time (budgetd's clock says {now}; is the node's clock right?)",
            r.at
        )));
    }
    if !r.nvml && !r.gpus.is_empty() {
        return Err(AppError::Invalid(
            "a report with nvml: false cannot list GPUs".into(),
        ));
    }
    if r.gpus.len() > MAX_GPUS_PER_REPORT {
        return Err(AppError::Invalid(format!(
            "{} GPUs in one report (at most {MAX_GPUS_PER_REPORT})",
            r.gpus.len()
        )));
    }
    let mut seen = BTreeSet::new();
    let mut job_gpus = 0usize;
    for (i, g) in r.gpus.iter().enumerate() {
        job_gpus += g
            .processes
            .iter()
            .filter_map(|p| p.job_id)
            .collect::<BTreeSet<u32>>()
            .len();
        check_name(&format!("gpus[{i}].uuid"), &g.uuid)?;
        if !seen.insert(g.uuid.as_str()) {
            return Err(AppError::Invalid(format!(
                "gpus[{i}]: GPU {} is listed twice",
                g.uuid
            )));
        }
        if g.idle_secs < 0 || g.idle_secs >= r.at {
            return Err(AppError::Invalid(format!(
                "gpus[{i}].idle_secs {} must be between 0 and at",
                g.idle_secs
            )));
        }
        if g.util_pct > 100 {
            return Err(AppError::Invalid(format!(
                "gpus[{i}].util_pct {} is above 100",
                g.util_pct
            )));
        }
        if g.processes.len() > MAX_PROCESSES_PER_GPU {
            return Err(AppError::Invalid(format!(
                "gpus[{i}]: {} processes (at most {MAX_PROCESSES_PER_GPU})",
                g.processes.len()
            )));
        }
    }
    if job_gpus > MAX_JOB_GPUS_PER_REPORT {
        return Err(AppError::Invalid(format!(
            "{job_gpus} (job, GPU) pairs in one report (at most {MAX_JOB_GPUS_PER_REPORT})"
        )));
    }
    Ok(())
}

enum Step {
    Inserted,
    Extended,
    Unchanged,
}

/// Moves the end of streak `(job, uuid, start)` to `at` if later; a broken
/// mark the streak now covers is obsolete and dropped.
#[allow(clippy::too_many_arguments)]
fn extend(
    tx: &Transaction<'_>,
    job: u32,
    uuid: &str,
    start: i64,
    end: i64,
    broken: Option<i64>,
    node: &str,
    at: i64,
) -> rusqlite::Result<Step> {
    let new_end = end.max(at);
    let new_broken = broken.filter(|&b| b > new_end);
    if new_end == end && new_broken == broken {
        return Ok(Step::Unchanged);
    }
    tx.execute(
        "UPDATE idle_streaks SET end = ?4, broken_at = ?5, node = ?6 \
         WHERE job_id = ?1 AND gpu_uuid = ?2 AND start = ?3",
        params![job, uuid, start, new_end, new_broken, node],
    )?;
    Ok(Step::Extended)
}

/// Records that `job` held GPU `uuid` idle over `[start, at]`.
fn observe_idle(
    tx: &Transaction<'_>,
    job: u32,
    uuid: &str,
    node: &str,
    start: i64,
    at: i64,
) -> rusqlite::Result<Step> {
    let exact: Option<(i64, Option<i64>)> = tx
        .query_row(
            "SELECT end, broken_at FROM idle_streaks WHERE job_id = ?1 AND gpu_uuid = ?2 AND start = ?3",
            params![job, uuid, start],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .optional()?;
    if let Some((end, broken)) = exact {
        return extend(tx, job, uuid, start, end, broken, node, at);
    }
    let prev: Option<(i64, i64, Option<i64>)> = tx
        .query_row(
            "SELECT start, end, broken_at FROM idle_streaks WHERE job_id = ?1 AND gpu_uuid = ?2 \
             AND start < ?3 ORDER BY start DESC LIMIT 1",
            params![job, uuid, start],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .optional()?;
    if let Some((ps, pe, pb)) = prev {
        // Overlap (clock oddities) or an agent restart: the same stretch.
        let overlaps = pe >= start;
        let continues = start - pe <= MERGE_GAP_SECS && pb.is_none_or(|b| b >= start);
        if overlaps || continues {
            return extend(tx, job, uuid, ps, pe, pb, node, at);
        }
    }
    tx.execute(
        "INSERT INTO idle_streaks(job_id, gpu_uuid, node, start, end, broken_at) \
         VALUES (?1, ?2, ?3, ?4, ?5, NULL)",
        params![job, uuid, node, start, at],
    )?;
    Ok(Step::Inserted)
}

/// Jobs of report `r` that the ledger places on other nodes than `r.node`:
/// a report speaks for its own node only, and an agent token is bound to
/// its node, so a job running elsewhere is not this report's to flag idle.
/// The placement is the controller's (the nodes of the job's latest run as
/// synced); a job the ledger does not know yet, or whose nodes it does not
/// know, is taken as reported (an agent may see a job before the next sync).
fn placed_elsewhere(store: &Store, r: &AgentReport) -> BTreeSet<u32> {
    let jobs: BTreeSet<u32> = r
        .gpus
        .iter()
        .flat_map(|g| g.processes.iter().filter_map(|p| p.job_id))
        .collect();
    store
        .ledger()
        .latest_runs(&jobs)
        .into_iter()
        .filter(|(_, run)| {
            run.nodes.as_deref().is_some_and(|hl| {
                // An expression that does not expand cannot place the job.
                policy_core::hostlist::expand(hl)
                    .is_ok_and(|names| !names.is_empty() && !names.contains(&r.node))
            })
        })
        .map(|(j, _)| j)
        .collect()
}

/// Ingests one report in one transaction; a bad report changes nothing.
pub fn ingest(store: &mut Store, r: &AgentReport, now: i64) -> AppResult<ReportOutcome> {
    Ok(ingest_noting_off_node(store, r, now)?.0)
}

/// [`ingest`], also returning how many of the report's jobs were ignored
/// because the ledger places them on other nodes.
pub fn ingest_noting_off_node(
    store: &mut Store,
    r: &AgentReport,
    now: i64,
) -> AppResult<(ReportOutcome, usize)> {
    check(r, now)?;
    let text = serde_json::to_string(r)?;
    let mut out = ReportOutcome {
        node: r.node.clone(),
        ..ReportOutcome::default()
    };
    let keep_streaks_from =
        now - IDLE_STREAK_RETENTION_SECS.max(store.policy().window_secs.saturating_mul(2));
    let elsewhere = placed_elsewhere(store, r);
    if !elsewhere.is_empty()
        && let Some(left_out) = crate::loglimit::AGENT_OFF_NODE.allow()
    {
        tracing::warn!(node = %r.node, jobs = ?elsewhere, left_out, "agent report: ignored its GPUs' jobs that the ledger places on other nodes (one line a second at most; left_out: such reports not logged since the last line)");
    }
    let tx = store.conn_mut().transaction()?;
    out.latest_replaced = tx.execute(
        "INSERT INTO agent_reports(node, at, nvml, gpus, report) VALUES (?1, ?2, ?3, ?4, ?5) \
         ON CONFLICT(node) DO UPDATE SET at = excluded.at, nvml = excluded.nvml, \
         gpus = excluded.gpus, report = excluded.report \
         WHERE excluded.at > agent_reports.at \
            OR (excluded.at = agent_reports.at AND excluded.report <> agent_reports.report)",
        params![r.node, r.at, r.nvml, r.gpus.len() as i64, text],
    )? == 1;
    for g in &r.gpus {
        let jobs: BTreeSet<u32> = g
            .processes
            .iter()
            .filter_map(|p| p.job_id)
            .filter(|j| !elsewhere.contains(j))
            .collect();
        if g.idle_secs > 0 {
            for &job in &jobs {
                match observe_idle(&tx, job, &g.uuid, &r.node, r.at - g.idle_secs, r.at)? {
                    Step::Inserted => out.streaks_inserted += 1,
                    Step::Extended => out.streaks_extended += 1,
                    Step::Unchanged => out.streaks_unchanged += 1,
                }
            }
        }
        // Recent streaks of this GPU that this report did not continue end
        // here (busy, released, or another job now): remember the first such
        // report so a later streak is not merged across it.
        out.streaks_broken += tx.execute(
            "UPDATE idle_streaks SET broken_at = ?2 WHERE gpu_uuid = ?1 AND end < ?2 \
             AND end >= ?2 - ?3 AND (broken_at IS NULL OR broken_at > ?2)",
            params![g.uuid, r.at, MERGE_GAP_SECS],
        )? as u64;
    }
    // Nodes gone silent for good (renamed, removed) leave the latest-report table.
    tx.execute(
        "DELETE FROM agent_reports WHERE at < ?1",
        params![now - AGENT_REPORT_RETENTION_SECS],
    )?;
    // Old streaks leave the idle ledger (an index on `end` makes this cheap when
    // there is nothing to delete, as in almost every report).
    out.streaks_pruned = tx.execute(
        "DELETE FROM idle_streaks WHERE end < ?1",
        params![keep_streaks_from],
    )? as u64;
    tx.commit()?;
    Ok((out, elsewhere.len()))
}

/// Who may see a job: `(account, user)` from the ledger, either unknown.
pub type Visible<'a> = &'a dyn Fn(Option<&str>, Option<&str>) -> bool;

struct Open {
    job_id: u32,
    uuid: String,
    node: String,
    start: i64,
    end: i64,
}

/// Streaks open in a fresh latest report and at least `threshold` long.
fn open_streaks(store: &Store, now: i64, threshold: i64, stale: i64) -> AppResult<Vec<Open>> {
    let mut st = store.conn().prepare_cached(
        "SELECT s.job_id, s.gpu_uuid, s.node, s.start, s.end FROM idle_streaks s \
         JOIN agent_reports r ON r.node = s.node AND r.at = s.end \
         WHERE s.end - s.start >= ?1 AND r.at >= ?2 ORDER BY s.job_id, s.node, s.gpu_uuid",
    )?;
    let rows = st.query_map(params![threshold, now - stale], |r| {
        Ok(Open {
            job_id: r.get(0)?,
            uuid: r.get(1)?,
            node: r.get(2)?,
            start: r.get(3)?,
            end: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// Idle seconds per job in `[from, to]`, overlapping streaks of one (job,
/// GPU) counted once.
fn idle_secs_by_job(store: &Store, from: i64, to: i64) -> AppResult<BTreeMap<u32, i64>> {
    let mut st = store.conn().prepare_cached(
        "SELECT job_id, gpu_uuid, start, end FROM idle_streaks WHERE end > ?1 AND start < ?2 \
         ORDER BY job_id, gpu_uuid, start",
    )?;
    let mut rows = st.query(params![from, to])?;
    let mut out: BTreeMap<u32, i64> = BTreeMap::new();
    // Union of the sorted intervals of each (job, GPU), clipped to the window.
    let mut cur: Option<(u32, String, i64, i64)> = None;
    let mut flush = |c: &Option<(u32, String, i64, i64)>| {
        if let Some((j, _, s, e)) = c {
            let len = (*e).min(to) - (*s).max(from);
            if len > 0 {
                *out.entry(*j).or_insert(0) += len;
            }
        }
    };
    while let Some(r) = rows.next()? {
        let (job, uuid, s, e): (u32, String, i64, i64) =
            (r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?);
        match &mut cur {
            Some((cj, cu, _, ce)) if *cj == job && *cu == uuid && s <= *ce => {
                *ce = (*ce).max(e);
            }
            _ => {
                flush(&cur);
                cur = Some((job, uuid, s, e));
            }
        }
    }
    flush(&cur);
    Ok(out)
}

/// Flagged jobs, grouped from their open streaks (`why` reads its job's
/// flag from here).
pub fn flagged(store: &Store, now: i64, stale: i64) -> AppResult<Vec<FlaggedJob>> {
    let threshold = store.policy().idle_threshold_secs;
    let open = open_streaks(store, now, threshold, stale)?;
    let mut by_job: BTreeMap<u32, Vec<Open>> = BTreeMap::new();
    for o in open {
        by_job.entry(o.job_id).or_default().push(o);
    }
    let ids: BTreeSet<u32> = by_job.keys().copied().collect();
    let runs = store.ledger().latest_runs(&ids);
    Ok(by_job
        .into_iter()
        .map(|(job_id, gpus)| {
            let run = runs.get(&job_id);
            let nodes: BTreeSet<String> = gpus.iter().map(|g| g.node.clone()).collect();
            FlaggedJob {
                job_id,
                account: run.map(|r| r.account.clone()),
                user: run.map(|r| r.user.clone()),
                nodes: nodes.into_iter().collect(),
                gpus_idle: gpus.len() as u32,
                gpus: run.map(|r| r.gpus),
                idle_since: gpus.iter().map(|g| g.start).min().unwrap_or(now),
                idle_secs: gpus.iter().map(|g| g.end - g.start).max().unwrap_or(0),
                idle_gpus: gpus
                    .into_iter()
                    .map(|g| IdleGpu {
                        idle_secs: g.end - g.start,
                        node: g.node,
                        uuid: g.uuid,
                        since: g.start,
                    })
                    .collect(),
            }
        })
        .collect())
}

fn nodes(store: &Store, now: i64, stale: i64) -> AppResult<Vec<NodeReport>> {
    let mut st = store
        .conn()
        .prepare_cached("SELECT node, at, nvml, gpus FROM agent_reports ORDER BY node")?;
    let rows = st.query_map([], |r| {
        let at: i64 = r.get(1)?;
        Ok(NodeReport {
            node: r.get(0)?,
            at,
            age_secs: (now - at).max(0),
            nvml: r.get(2)?,
            gpus: r.get(3)?,
            stale: at < now - stale,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The idle report at `now` with GPU-hours over `[from, to]`, filtered to
/// what `visible` allows; `show_nodes` adds the per-node report list.
pub fn report(
    store: &Store,
    now: i64,
    from: i64,
    to: i64,
    stale: i64,
    visible: Visible<'_>,
    show_nodes: bool,
) -> AppResult<IdleReport> {
    let flagged: Vec<FlaggedJob> = flagged(store, now, stale)?
        .into_iter()
        .filter(|f| visible(f.account.as_deref(), f.user.as_deref()))
        .collect();
    let secs = idle_secs_by_job(store, from, to)?;
    let ids: BTreeSet<u32> = secs.keys().copied().collect();
    let runs = store.ledger().latest_runs(&ids);
    let mut acc: BTreeMap<Option<String>, AccountIdle> = BTreeMap::new();
    fn row(acc: &mut BTreeMap<Option<String>, AccountIdle>, a: Option<String>) -> &mut AccountIdle {
        acc.entry(a.clone()).or_insert(AccountIdle {
            account: a,
            idle_gpu_hours: 0.0,
            jobs: 0,
            idle_gpus_now: 0,
            flagged_jobs: 0,
        })
    }
    // Sum integer seconds first, convert once: exact for hand-checked values.
    let mut acc_secs: HashMap<Option<String>, i64> = HashMap::new();
    for (job, s) in &secs {
        let run = runs.get(job);
        if !visible(
            run.map(|r| r.account.as_str()),
            run.map(|r| r.user.as_str()),
        ) {
            continue;
        }
        let key = run.map(|r| r.account.clone());
        *acc_secs.entry(key.clone()).or_insert(0) += s;
        row(&mut acc, key).jobs += 1;
    }
    for f in &flagged {
        let r = row(&mut acc, f.account.clone());
        r.flagged_jobs += 1;
        r.idle_gpus_now += f.gpus_idle;
    }
    let by_account = acc
        .into_values()
        .map(|mut a| {
            a.idle_gpu_hours = hours(acc_secs.get(&a.account).copied().unwrap_or(0) as f64);
            a
        })
        .collect();
    Ok(IdleReport {
        at: to,
        from,
        threshold_secs: store.policy().idle_threshold_secs,
        stale_after_secs: stale,
        flagged,
        by_account,
        nodes: if show_nodes {
            nodes(store, now, stale)?
        } else {
            Vec::new()
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::tests::store;
    use budget_protocol::{GpuProcess, GpuSample};

    fn report_of(at: i64, gpus: &[(&str, Option<u32>, i64)]) -> AgentReport {
        AgentReport {
            node: "n1".into(),
            at,
            nvml: true,
            gpus: gpus
                .iter()
                .enumerate()
                .map(|(i, (uuid, job, idle))| GpuSample {
                    index: i as u32,
                    uuid: (*uuid).into(),
                    name: "H100".into(),
                    util_pct: if *idle > 0 { 0 } else { 90 },
                    memory_used_mib: 0,
                    memory_total_mib: 80_000,
                    processes: job
                        .iter()
                        .map(|&j| GpuProcess {
                            pid: 1,
                            job_id: Some(j),
                            used_memory_mib: None,
                            sm_util_pct: None,
                        })
                        .collect(),
                    idle_secs: *idle,
                })
                .collect(),
        }
    }

    fn streaks(s: &Store) -> Vec<(u32, String, i64, i64)> {
        let mut st = s
            .conn()
            .prepare("SELECT job_id, gpu_uuid, start, end FROM idle_streaks ORDER BY job_id, gpu_uuid, start")
            .expect("prepare");
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    }

    #[test]
    fn restart_continues_a_streak_but_a_busy_sample_splits_it() {
        let (_d, mut s) = store();
        let now = 100_000;
        // Idle from 1000; reports every 30 s.
        for at in [1000, 1030, 1060] {
            ingest(&mut s, &report_of(at, &[("g", Some(7), at - 1000)]), now).expect("ingest");
        }
        // Agent restarts: its first sample at 1075 says 0, then a new streak from 1075.
        ingest(&mut s, &report_of(1075, &[("g", Some(7), 0)]), now).expect("restart");
        ingest(&mut s, &report_of(1105, &[("g", Some(7), 30)]), now).expect("after");
        assert_eq!(streaks(&s), vec![(7, "g".into(), 1000, 1105)]);
        // Busy at 1135, idle again from 1165: a new streak.
        ingest(&mut s, &report_of(1135, &[("g", Some(7), 0)]), now).expect("busy");
        ingest(&mut s, &report_of(1165, &[("g", Some(7), 0)]), now).expect("idle 0");
        ingest(&mut s, &report_of(1195, &[("g", Some(7), 30)]), now).expect("idle 30");
        assert_eq!(
            streaks(&s),
            vec![(7, "g".into(), 1000, 1105), (7, "g".into(), 1165, 1195)]
        );
        // Repeating any report changes nothing.
        let before = streaks(&s);
        let o = ingest(&mut s, &report_of(1105, &[("g", Some(7), 30)]), now).expect("repeat");
        assert_eq!((o.streaks_inserted, o.streaks_extended), (0, 0));
        assert_eq!(streaks(&s), before);
        let secs = idle_secs_by_job(&s, 0, now).expect("sum");
        assert_eq!(secs.get(&7), Some(&(105 + 30)));
    }

    #[test]
    fn streaks_older_than_the_retention_are_pruned_and_recent_ones_kept() {
        let (_d, mut s) = store();
        let day = 86_400;
        let t0 = 1_000 * day;
        // Job 1 idle long ago, job 2 idle recently.
        ingest(&mut s, &report_of(t0, &[("g1", Some(1), 60)]), t0).expect("old");
        let later = t0 + IDLE_STREAK_RETENTION_SECS - day;
        ingest(&mut s, &report_of(later, &[("g2", Some(2), 60)]), later).expect("recent");
        assert_eq!(streaks(&s).len(), 2, "within the retention nothing goes");
        // Past the retention of job 1's streak: it goes, job 2's stays.
        let now = t0 + IDLE_STREAK_RETENTION_SECS + 10;
        let o = ingest(&mut s, &report_of(now, &[("g3", None, 0)]), now).expect("prune");
        assert_eq!(o.streaks_pruned, 1);
        assert_eq!(streaks(&s), vec![(2, "g2".into(), later - 60, later)]);
    }

    #[test]
    fn bad_reports_are_refused() {
        let now = 100_000;
        let mut r = report_of(1000, &[("g", Some(1), 10), ("g", Some(2), 0)]);
        assert!(check(&r, now).is_err(), "duplicate uuid");
        r.gpus.pop();
        assert!(check(&r, now).is_ok());
        r.gpus[0].idle_secs = -1;
        assert!(check(&r, now).is_err());
        let mut r = report_of(now + 3600, &[]);
        assert!(check(&r, now).is_err(), "from the future");
        r.at = now;
        r.node = "bad node".into();
        assert!(check(&r, now).is_err());
    }
}
