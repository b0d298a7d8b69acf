//! The preemption record (docs/design.md §6.5): every run that lost its GPUs to another job or
//! to a maintenance drain, with who took it, why, and the GPU-hours of the lost run.
//!
//! Two writers, one table keyed by `(job_id, run)` so either may repeat itself:
//! - `preempt/budget`'s background thread posts Slurm's preemptions
//!   (`POST /v1/preemptions`): it remembers which `(victim, preemptor, reason)` its
//!   `preemptable` hook allowed and reports a victim once its `restart_cnt` grew and
//!   that preemptor started;
//! - budgetd's drain worker ([`crate::drain_worker`]) records the requeues it issues itself.
//!
//! The first record of a run wins (`INSERT OR IGNORE`): a drain requeue and a late
//! plugin report of the same run cannot double-count it. `why` reads it here: who
//! took a requeued run ([`of_run`]), and the rebalancing preemptions of the window
//! that the cost-aware rule counts ([`rebalancing`]).

use std::collections::BTreeMap;

use budget_protocol::preemption::{AccountLoss, Preemption, PreemptionReason, PreemptionRecord};
use rusqlite::{OptionalExtension, params};

use crate::error::{AppError, AppResult};
use crate::store::Store;

/// Records a preemption; `Ok(false)` when `(victim, run)` was already recorded.
pub fn record(store: &mut Store, p: &PreemptionRecord, source: &str) -> AppResult<bool> {
    if p.at <= 0 || p.at > crate::ledger::MAX_TIME {
        return Err(AppError::Invalid(format!("at {} is not a sane time", p.at)));
    }
    let led = store.ledger().get(p.victim, p.run);
    let account = p
        .account
        .clone()
        .or_else(|| led.as_ref().map(|r| r.account.clone()))
        .ok_or_else(|| {
            AppError::Invalid(format!(
                "job {} run {} is not in the ledger; send account, user, gpus and start",
                p.victim, p.run
            ))
        })?;
    let user = p
        .user
        .clone()
        .or_else(|| led.as_ref().map(|r| r.user.clone()))
        .unwrap_or_default();
    let gpus = p.gpus.or(led.as_ref().map(|r| r.gpus)).unwrap_or(0);
    let start = p.start.or(led.as_ref().and_then(|r| r.start));
    // The lost run ends when the victim lost its GPUs (a ledger end, if the sync
    // already closed the run, is the same instant up to a sync period).
    let end = led.as_ref().and_then(|r| r.end).unwrap_or(p.at);
    let secs = start.map_or(0, |s| (end - s).max(0));
    let gpu_hours = f64::from(gpus) * secs as f64 / 3600.0;
    let preemptor_account = p.preemptor.and_then(|id| {
        store
            .ledger()
            .job_runs(id)
            .last()
            .map(|r| r.account.clone())
    });
    let tx = store.conn_mut().transaction()?;
    let n = tx.execute(
        "INSERT OR IGNORE INTO preemptions(job_id, run, account, user, preemptor, preemptor_account, \
         reason, at, gpus, run_start, gpu_hours, source) VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12)",
        params![
            p.victim,
            p.run,
            account,
            user,
            p.preemptor,
            preemptor_account,
            p.reason.as_str(),
            p.at,
            gpus,
            start,
            gpu_hours,
            source
        ],
    )?;
    tx.commit()?;
    Ok(n == 1)
}

fn row(r: &rusqlite::Row<'_>) -> rusqlite::Result<Preemption> {
    Ok(Preemption {
        job_id: r.get(0)?,
        run: r.get(1)?,
        account: r.get(2)?,
        user: r.get(3)?,
        preemptor: r.get(4)?,
        preemptor_account: r.get(5)?,
        // Rows are written by `record` only; an unknown name cannot occur.
        reason: PreemptionReason::parse(&r.get::<_, String>(6)?).unwrap_or(PreemptionReason::Drain),
        at: r.get(7)?,
        gpus: r.get(8)?,
        run_start: r.get(9)?,
        gpu_hours: r.get(10)?,
        source: r.get(11)?,
        gpu_type: None,
    })
}

/// `p` with the GPU type of its run, from the ledger (the record has no column
/// for it: the ledger is where a run's type lives, and it keeps the runs of
/// far more than the one window the lost-work budgets read).
fn with_gpu_type(store: &Store, mut p: Preemption) -> Preemption {
    p.gpu_type = store.ledger().get(p.job_id, p.run).and_then(|r| r.gpu_type);
    p
}

const COLS: &str = "job_id, run, account, user, preemptor, preemptor_account, reason, at, gpus, \
                    run_start, gpu_hours, source";

/// Preemptions at or after `since`, oldest first.
pub fn list(store: &Store, since: i64) -> AppResult<Vec<Preemption>> {
    let mut st = store.conn().prepare(&format!(
        "SELECT {COLS} FROM preemptions WHERE at >= ?1 ORDER BY at, job_id, run"
    ))?;
    let rows = st.query_map([since], row)?;
    Ok(rows
        .map(|p| p.map(|p| with_gpu_type(store, p)))
        .collect::<Result<_, _>>()?)
}

/// The preemption of one run, if recorded.
pub fn of_run(store: &Store, job_id: u32, run: u32) -> Option<Preemption> {
    store
        .conn()
        .query_row(
            &format!("SELECT {COLS} FROM preemptions WHERE job_id = ?1 AND run = ?2"),
            params![job_id, run],
            row,
        )
        .optional()
        .ok()
        .flatten()
        .map(|p| with_gpu_type(store, p))
}

/// Rebalancing preemptions (reasons `rebalance` and `over_budget`: what the
/// cost-aware rule allows between budgeted teams) in the window ending at
/// `now`, and the GPU-hours their runs lost: what the site caps count.
pub fn site_totals(store: &Store, now: i64) -> (u64, f64) {
    rebalancing(store, now)
        .iter()
        .fold((0, 0.0), |(n, h), p| (n + 1, h + p.gpu_hours))
}

/// The rebalancing preemptions ([`PreemptionReason::is_rebalancing`]) of the
/// window ending at `now`, oldest first: what the site caps count and `why`
/// gives the cost-aware rule as its history.
pub fn rebalancing(store: &Store, now: i64) -> Vec<Preemption> {
    list(store, now - store.policy().window_secs + 1)
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.at <= now && p.reason.is_rebalancing())
        .collect()
}

/// Totals per victim account (no roll-up: a preemption is a fact about one job).
pub fn by_account(rows: &[Preemption]) -> Vec<AccountLoss> {
    let mut m: BTreeMap<&str, AccountLoss> = BTreeMap::new();
    for r in rows {
        let e = m.entry(&r.account).or_insert_with(|| AccountLoss {
            account: r.account.clone(),
            ..AccountLoss::default()
        });
        e.preemptions += 1;
        e.gpu_hours_lost += r.gpu_hours;
        *e.by_reason.entry(r.reason.as_str().into()).or_insert(0) += 1;
    }
    m.into_values().collect()
}
