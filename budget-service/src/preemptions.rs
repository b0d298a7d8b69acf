//! The preemption record (issue 4): every run that lost its GPUs to another job or
//! to a maintenance drain, with who took it, why, and the GPU-hours of the lost run.
//!
//! Two writers, one table keyed by `(job_id, run)` so either may repeat itself:
//! - `preempt/budget`'s background thread posts Slurm's preemptions
//!   (`POST /v1/preemptions`): it remembers which `(victim, preemptor, reason)` its
//!   `preemptable` hook allowed and reports a victim once its `restart_cnt` grew and
//!   that preemptor started;
//! - budgetd's drain worker ([`crate::drain`]) records the requeues it issues itself.
//!
//! The first record of a run wins (`INSERT OR IGNORE`): a drain requeue and a late
//! plugin report of the same run cannot double-count it. Also here: the "when" parts
//! of `budgetctl why` (which jobs a pending job may take and at what instant; who may
//! take a running job once its window ends; who took a requeued one).

use std::collections::BTreeMap;

use budget_protocol::RunState;
use policy_core::FairShare;
use policy_core::preempt::{self, Allowed, Context, JobView, PreemptPolicy};
use policy_core::protection::protected_until;
use rusqlite::{OptionalExtension, params};
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};
use crate::ledger::RunRecord;
use crate::store::Store;

/// Why a run was preempted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reason {
    FreeTier,
    OverBudget,
    Rebalance,
    Drain,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::FreeTier => "free_tier",
            Reason::OverBudget => "over_budget",
            Reason::Rebalance => "rebalance",
            Reason::Drain => "drain",
        }
    }

    fn parse(s: &str) -> Reason {
        match s {
            "free_tier" => Reason::FreeTier,
            "over_budget" => Reason::OverBudget,
            "rebalance" => Reason::Rebalance,
            _ => Reason::Drain,
        }
    }

    /// The reason behind a policy-core decision.
    pub fn of(a: &Allowed) -> Reason {
        match a {
            Allowed::VictimFreeTier => Reason::FreeTier,
            Allowed::VictimOverBudget => Reason::OverBudget,
            Allowed::Rebalance { .. } => Reason::Rebalance,
        }
    }
}

/// `POST /v1/preemptions` body. Victim facts are optional: the ledger fills them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewPreemption {
    pub victim: u32,
    /// The victim's run (`restart_cnt` of the run that was lost).
    pub run: u32,
    #[serde(default)]
    pub preemptor: Option<u32>,
    pub reason: Reason,
    /// When the victim lost its GPUs (Unix seconds).
    pub at: i64,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Start of the lost run.
    #[serde(default)]
    pub start: Option<i64>,
}

/// One recorded preemption.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub preemptor: Option<u32>,
    pub preemptor_account: Option<String>,
    pub reason: Reason,
    pub at: i64,
    pub gpus: u32,
    pub run_start: Option<i64>,
    /// GPU-hours of the lost run (GPUs x its length, unweighted).
    pub gpu_hours: f64,
    /// `plugin` or `drain`.
    pub source: String,
}

/// Per-account totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountLoss {
    pub account: String,
    pub preemptions: u64,
    pub gpu_hours_lost: f64,
    /// Preemptions by reason.
    pub by_reason: BTreeMap<String, u64>,
}

/// `GET /v1/preemptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptionReport {
    pub since: i64,
    pub rows: Vec<Preemption>,
    pub by_account: Vec<AccountLoss>,
}

/// Records a preemption; `Ok(false)` when `(victim, run)` was already recorded.
pub fn record(store: &mut Store, p: &NewPreemption, source: &str) -> AppResult<bool> {
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
        reason: Reason::parse(&r.get::<_, String>(6)?),
        at: r.get(7)?,
        gpus: r.get(8)?,
        run_start: r.get(9)?,
        gpu_hours: r.get(10)?,
        source: r.get(11)?,
    })
}

const COLS: &str = "job_id, run, account, user, preemptor, preemptor_account, reason, at, gpus, \
                    run_start, gpu_hours, source";

/// Preemptions at or after `since`, oldest first.
pub fn list(store: &Store, since: i64) -> AppResult<Vec<Preemption>> {
    let mut st = store.conn().prepare(&format!(
        "SELECT {COLS} FROM preemptions WHERE at >= ?1 ORDER BY at, job_id, run"
    ))?;
    let rows = st.query_map([since], row)?;
    Ok(rows.collect::<Result<_, _>>()?)
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

/// Prometheus lines: preemptions and GPU-hours lost per account, all time.
pub fn render_metrics(store: &Store, out: &mut String) {
    use std::fmt::Write;
    let rows = list(store, 0).unwrap_or_default();
    let esc = |v: &str| v.replace('\\', "\\\\").replace('"', "\\\"");
    let _ = writeln!(
        out,
        "# HELP budget_preemptions_total Runs preempted or requeued by a drain, by victim account and reason.\n\
         # TYPE budget_preemptions_total counter"
    );
    for a in by_account(&rows) {
        for (reason, n) in &a.by_reason {
            let _ = writeln!(
                out,
                "budget_preemptions_total{{account=\"{}\",reason=\"{reason}\"}} {n}",
                esc(&a.account)
            );
        }
    }
    let _ = writeln!(
        out,
        "# HELP budget_preempted_gpu_hours_total GPU-hours of runs lost to preemption, by victim account.\n\
         # TYPE budget_preempted_gpu_hours_total counter"
    );
    for a in by_account(&rows) {
        let _ = writeln!(
            out,
            "budget_preempted_gpu_hours_total{{account=\"{}\"}} {}",
            esc(&a.account),
            a.gpu_hours_lost
        );
    }
}

/// A job another may preempt, and from when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// First instant the rule allows it (now, or the victim's window end).
    pub at: i64,
    pub reason: Allowed,
}

fn view(r: &RunRecord) -> JobView<'_> {
    JobView {
        job_id: r.job_id,
        account: &r.account,
        user: &r.user,
        free_tier: r.free_tier,
        run_start: r.start.unwrap_or(0),
        min_runtime: r.min_runtime_secs,
        gpus: r.gpus,
    }
}

/// The instant a running run leaves its window (now for free tier or past windows).
fn window_end(r: &RunRecord, now: i64) -> i64 {
    match r.start {
        Some(s) if !r.free_tier => protected_until(s, r.min_runtime_secs).max(now),
        _ => now,
    }
}

/// What `why` adds about preemption timing (DESIGN 3.5, issue 4 item 4).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhyPreemption {
    /// Pending job: running jobs it may preempt, each at the instant its window ends
    /// (the rule evaluated then, with today's fair share and holdings).
    pub may_preempt: Vec<Outlook>,
    /// Running job: pending jobs that may take it once its window is over.
    pub may_be_taken_by: Vec<Outlook>,
    /// Running job on a drained node: when the drain requeues it.
    pub drain_requeue_at: Option<i64>,
    /// Requeued (or re-run) job: the preemption of its previous run.
    pub preempted: Option<Preemption>,
}

/// Computes the timing part of `why` for `job` at `now`.
pub fn why(store: &Store, fs: &FairShare, job: &RunRecord, now: i64) -> WhyPreemption {
    let running = store.ledger().in_state(RunState::Running);
    let held = fs.holdings(
        running
            .iter()
            .filter(|r| !r.free_tier)
            .map(|r| (r.account.as_str(), r.user.as_str(), r.gpus)),
    );
    let ctx_at = |t: i64| Context {
        fair_share: Some(fs),
        held: &held,
        policy: PreemptPolicy {
            hysteresis: store.policy().hysteresis,
        },
        now: t,
    };
    let outlook = |r: &RunRecord, at: i64, reason: Allowed| Outlook {
        job_id: r.job_id,
        run: r.run,
        account: r.account.clone(),
        user: r.user.clone(),
        gpus: r.gpus,
        at,
        reason,
    };
    let mut out = WhyPreemption::default();
    match job.state {
        RunState::Pending => {
            for r in &running {
                let at = window_end(r, now);
                if let Ok(a) = preempt::may_preempt(&ctx_at(at), &view(job), &view(r)) {
                    out.may_preempt.push(outlook(r, at, a));
                }
            }
            out.may_preempt.sort_by_key(|o| (o.at, o.job_id));
            // A pending re-run: say what happened to the previous run.
            if job.run > 0 {
                out.preempted = of_run(store, job.job_id, job.run - 1);
            }
        }
        RunState::Running => {
            let at = window_end(job, now);
            for p in store.ledger().in_state(RunState::Pending) {
                if let Ok(a) = preempt::may_preempt(&ctx_at(at), &view(&p), &view(job)) {
                    out.may_be_taken_by.push(outlook(&p, at, a));
                }
            }
            let drained = crate::drain::list(store).unwrap_or_default();
            if let Some(nodes) = &job.nodes {
                let mine = crate::drain::expand_simple(nodes);
                if drained.iter().any(|d| mine.contains(&d.node)) {
                    out.drain_requeue_at = Some(at);
                }
            }
            if job.run > 0 {
                out.preempted = of_run(store, job.job_id, job.run - 1);
            }
        }
        RunState::Requeued | RunState::Ended => {
            out.preempted = of_run(store, job.job_id, job.run);
        }
    }
    out
}
