//! Shadow mode's recorder and report (`GET /v1/shadow`, `budgetctl shadow`,
//! the `budget_shadow_*` families of `/metrics`).
//!
//! `site_factor/budget` in `mode=shadow` changes no priority; with its sync it
//! sends the pending queue (Slurm's actual priority of each job beside the
//! job's place in the budget order, `budget_protocol::shadow::QueueOrder`). At
//! most once every `shadow_sample_secs` budgetd records a sample of it
//! ([`record`]), in one transaction:
//! - the order: how many pending pairs the budget order orders and how many of
//!   them Slurm orders the other way or ties, Kendall's tau-b, the jobs placed
//!   furthest apart ([`order_stats`]);
//! - the preemptions the cost-aware rule would make now, decided from the
//!   ledger's running and pending runs with the rule `why` asks
//!   (`crate::why::Rule`: `policy_core::rebalance::decide` in the period state
//!   `preempt/budget` computes, grants and victims in flight counted) and
//!   Slurm's mechanics as `preempt/budget` meets them: a pending job of the queue
//!   (Slurm's pending jobs but the held ones), in budget order, that does not fit in
//!   the free GPUs asks the running jobs in the
//!   plugin's victim order (`rebalance::victim_priority`, least work lost first)
//!   and takes victims only if they make it fit. Each victim run is recorded
//!   once, with the work it would lose (`rebalance::expected_lost_gpu_secs`);
//!   while it still runs and its preemptor still waits, the pair stays in
//!   flight in later samples. GPUs are counted cluster-wide (the snapshot's
//!   `cluster_gpus`), not node by node: Slurm's node fit is not modelled;
//! - each team's (account's) holdings against the rule's target
//!   (`min(entitled, demand)`) from the same period state.
//!
//! Samples older than two policy windows are dropped as new ones come.

use std::collections::{HashMap, HashSet};

use budget_protocol::PluginSnapshot;
use budget_protocol::RunState;
use budget_protocol::shadow::{
    OrderGap, OrderReport, QueueOrder, QueuedJob, SAMPLE_GAP_SECS, ShadowReport, TeamShortfall,
    WouldPreempt,
};
use budget_protocol::why::PeerReason;
use policy_core::fairshare::{NodeKind, Tier};
use policy_core::rebalance::{self, InFlight};
use policy_core::tree::ROOT;
use rusqlite::params;

use crate::error::AppResult;
use crate::ledger::RunRecord;
use crate::partitions::Partitions;
use crate::store::Store;
use crate::why::Rule;

/// Jobs of a sample kept as the furthest apart.
pub const FURTHEST: usize = 5;

/// Pending jobs (in budget order) a sample asks the rule about: the front of
/// the queue, where Slurm's scheduler preempts.
pub const MAX_PREEMPTORS: usize = 200;

/// The order figures of one queue sample.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderStats {
    pub pending: u32,
    pub pairs: u64,
    pub discordant: u64,
    pub slurm_ties: u64,
    pub tau: Option<f64>,
    /// `(job, slurm position, budget position)`, 1-based, furthest apart first.
    pub furthest: Vec<(QueuedJob, u32, u32)>,
}

/// Compares Slurm's order (priority, highest first) with the budget order
/// (tier, then rank) of `jobs`. O(n²) in the queue's length, which the plugin
/// bounds (`MAX_QUEUE`).
pub fn order_stats(jobs: &[QueuedJob]) -> OrderStats {
    let n = jobs.len();
    let (mut concordant, mut discordant, mut budget_ties, mut slurm_ties_all, mut ties_in_pairs) =
        (0u64, 0u64, 0u64, 0u64, 0u64);
    for i in 0..n {
        let a = &jobs[i];
        for b in &jobs[i + 1..] {
            // > 0: the budget order puts a first; Slurm likewise.
            let budget = (b.tier, b.rank).cmp(&(a.tier, a.rank)) as i8;
            let slurm = a.priority.cmp(&b.priority) as i8;
            if slurm == 0 {
                slurm_ties_all += 1;
            }
            match (budget, slurm) {
                (0, _) => budget_ties += 1,
                (_, 0) => ties_in_pairs += 1,
                (x, y) if x == y => concordant += 1,
                _ => discordant += 1,
            }
        }
    }
    let all = (n as u64) * (n as u64).saturating_sub(1) / 2;
    let denom = ((all - budget_ties) as f64 * (all - slurm_ties_all) as f64).sqrt();
    let tau = (denom > 0.0).then(|| (concordant as f64 - discordant as f64) / denom);
    // Positions: Slurm's by priority; the budget's by tier and rank, Slurm's
    // order within a tie (a tie is the site's factors' to break, not a gap).
    let mut slurm: Vec<usize> = (0..n).collect();
    slurm.sort_by(|&x, &y| {
        jobs[y]
            .priority
            .cmp(&jobs[x].priority)
            .then(jobs[x].job_id.cmp(&jobs[y].job_id))
    });
    let mut slurm_pos = vec![0u32; n];
    for (p, &i) in slurm.iter().enumerate() {
        slurm_pos[i] = p as u32 + 1;
    }
    let mut budget = slurm.clone();
    budget.sort_by_key(|&i| (jobs[i].tier, jobs[i].rank));
    let mut gaps: Vec<(QueuedJob, u32, u32)> = budget
        .iter()
        .enumerate()
        .map(|(p, &i)| (jobs[i], slurm_pos[i], p as u32 + 1))
        .filter(|(_, s, b)| s != b)
        .collect();
    gaps.sort_by_key(|(j, s, b)| (std::cmp::Reverse(s.abs_diff(*b)), *b, j.job_id));
    gaps.truncate(FURTHEST);
    OrderStats {
        pending: n as u32,
        pairs: all - budget_ties,
        discordant,
        slurm_ties: ties_in_pairs,
        tau,
        furthest: gaps,
    }
}

/// What one sample recorded.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorded {
    pub order: OrderStats,
    /// Would-be preemptions recorded for the first time.
    pub preemptions: Vec<WouldPreempt>,
    /// Teams sampled.
    pub teams: usize,
}

/// Records one sample at `now` of `queue` against the ledger and `snap`.
pub fn record(
    store: &mut Store,
    snap: &PluginSnapshot,
    partitions: &Partitions,
    queue: &QueueOrder,
    now: i64,
) -> AppResult<Recorded> {
    let order = order_stats(&queue.jobs);
    let running = store.ledger().in_state(RunState::Running);
    let pending = store.ledger().in_state(RunState::Pending);
    let open = open_decisions(store, &running, &pending, now)?;
    let (preemptions, teams) = {
        let rule = Rule::new(store, snap, partitions, &running, &pending, now);
        // Preemptors: the pending jobs Slurm would schedule (the queue: not held).
        let queued: HashSet<u32> = queue.jobs.iter().map(|j| j.job_id).collect();
        let eligible: Vec<RunRecord> = pending
            .iter()
            .filter(|p| queued.contains(&p.job_id))
            .cloned()
            .collect();
        let preemptions = would_preempt(&rule, snap, &running, &eligible, &open, now);
        let teams = shortfall_now(&rule);
        (preemptions, teams)
    };
    let furthest: Vec<(u32, u32, Tier, u32, u32, u32)> = order
        .furthest
        .iter()
        .map(|(j, s, b)| (j.job_id, j.priority, j.tier, j.rank, *s, *b))
        .collect();
    let horizon = now - 2 * store.policy().window_secs;
    let tx = store.conn_mut().transaction()?;
    tx.execute(
        "INSERT OR REPLACE INTO shadow_orders(at, pending, pairs, discordant, slurm_ties, tau, furthest) \
         VALUES (?1,?2,?3,?4,?5,?6,?7)",
        params![
            now,
            order.pending,
            order.pairs as i64,
            order.discordant as i64,
            order.slurm_ties as i64,
            order.tau,
            serde_json::to_string(&furthest).unwrap_or_else(|_| "[]".into()),
        ],
    )?;
    let mut recorded = Vec::new();
    for p in preemptions {
        let n = tx.execute(
            "INSERT OR IGNORE INTO shadow_preemptions(victim, victim_run, account, user, gpus, \
             preemptor, preemptor_account, preemptor_user, at, lost_gpu_hours, reason) \
             VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11)",
            params![
                p.victim,
                p.victim_run,
                p.account,
                p.user,
                p.gpus,
                p.preemptor,
                p.preemptor_account,
                p.preemptor_user,
                p.at,
                p.lost_gpu_hours,
                serde_json::to_string(&p.reason).unwrap_or_default(),
            ],
        )?;
        if n == 1 {
            recorded.push(p);
        }
    }
    for t in &teams {
        tx.execute(
            "INSERT OR REPLACE INTO shadow_shortfall(at, account, held, entitled, demand, target, shortfall) \
             VALUES (?1,?2,?3,?4,?5,?6,?7)",
            params![
                now,
                t.account,
                t.held_gpus,
                t.entitled_gpus,
                t.demand_gpus,
                t.target_gpus,
                t.shortfall_gpus
            ],
        )?;
    }
    tx.execute("DELETE FROM shadow_orders WHERE at < ?1", [horizon])?;
    tx.execute("DELETE FROM shadow_preemptions WHERE at < ?1", [horizon])?;
    tx.execute("DELETE FROM shadow_shortfall WHERE at < ?1", [horizon])?;
    tx.commit()?;
    Ok(Recorded {
        order,
        preemptions: recorded,
        teams: teams.len(),
    })
}

/// Recorded pairs still in flight: the victim run still running, its
/// preemptor still pending (`(victim, preemptor)`).
fn open_decisions(
    store: &Store,
    running: &[RunRecord],
    pending: &[RunRecord],
    now: i64,
) -> AppResult<Vec<(u32, u32)>> {
    let runs: HashSet<(u32, u32)> = running.iter().map(|r| (r.job_id, r.run)).collect();
    let waiting: HashSet<u32> = pending.iter().map(|r| r.job_id).collect();
    let mut st = store.conn().prepare(
        "SELECT victim, victim_run, preemptor FROM shadow_preemptions WHERE at >= ?1 AND at <= ?2",
    )?;
    let rows = st.query_map(params![now - store.policy().window_secs, now], |r| {
        Ok((
            r.get::<_, u32>(0)?,
            r.get::<_, u32>(1)?,
            r.get::<_, u32>(2)?,
        ))
    })?;
    let mut out = Vec::new();
    for row in rows {
        let (victim, run, preemptor) = row?;
        if runs.contains(&(victim, run)) && waiting.contains(&preemptor) {
            out.push((victim, preemptor));
        }
    }
    Ok(out)
}

/// The preemptions the rule would make at `now` (see the module doc).
fn would_preempt(
    rule: &Rule<'_>,
    snap: &PluginSnapshot,
    running: &[RunRecord],
    pending: &[RunRecord],
    open: &[(u32, u32)],
    now: i64,
) -> Vec<WouldPreempt> {
    let (fs, w) = (rule.fs, rule.weights);
    let by_id: HashMap<u32, &RunRecord> = running.iter().map(|r| (r.job_id, r)).collect();
    let pending_by_id: HashMap<u32, &RunRecord> = pending.iter().map(|r| (r.job_id, r)).collect();
    let mut in_flight = InFlight::default();
    let mut taken: HashSet<u32> = HashSet::new();
    let mut served: HashSet<u32> = HashSet::new();
    for &(victim, preemptor) in open {
        if let (Some(v), Some(p)) = (by_id.get(&victim), pending_by_id.get(&preemptor)) {
            let vj = v.running_job(w);
            in_flight.take(&vj, fs, rebalance::expected_lost_gpu_secs(&vj, now));
            in_flight.grant(&p.pending_job(w), fs);
            taken.insert(victim);
            served.insert(preemptor);
        }
    }
    let used: u64 = running.iter().map(|r| u64::from(r.gpus)).sum();
    let mut free = i64::from(snap.cluster_gpus.unwrap_or(0)) - used as i64;
    // Slurm's free GPUs include those of the victims already in flight once
    // they go; their preemptors (skipped below) take them.
    let mut queue: Vec<(&RunRecord, (Tier, u32))> = pending
        .iter()
        .filter(|p| !p.free_tier && p.gpus > 0 && !served.contains(&p.job_id))
        .map(|p| {
            let place = rule
                .state
                .priority_place(fs, &p.account, &p.user)
                .unwrap_or((Tier::OverBudget, fs.num_leaves));
            (p, place)
        })
        .collect();
    queue.sort_by_key(|(p, place)| (*place, p.first_seen, p.job_id));
    let mut victims_order: Vec<&RunRecord> = running
        .iter()
        .filter(|r| r.gpus > 0 && r.start.is_some())
        .collect();
    victims_order.sort_by_key(|r| {
        (
            rebalance::victim_priority(Some(fs), &r.running_job(w), now),
            r.job_id,
        )
    });
    let mut out = Vec::new();
    for (p, _) in queue.into_iter().take(MAX_PREEMPTORS) {
        let need = i64::from(p.gpus);
        if need <= free {
            free -= need;
            continue;
        }
        let mut trial = in_flight.clone();
        let mut picked: Vec<(&RunRecord, PeerReason, f64)> = Vec::new();
        let mut freed = 0i64;
        for v in victims_order.iter().filter(|v| !taken.contains(&v.job_id)) {
            if free.max(0) + freed >= need {
                break;
            }
            if let Some(reason) = rule.allows_with(&trial, p, v, now) {
                let vj = v.running_job(w);
                let lost = rebalance::expected_lost_gpu_secs(&vj, now);
                trial.take(&vj, fs, lost);
                trial.grant(&p.pending_job(w), fs);
                freed += i64::from(v.gpus);
                picked.push((v, reason, lost));
            }
        }
        // Nothing is preempted unless the preemptor can then start.
        if picked.is_empty() || free.max(0) + freed < need {
            continue;
        }
        in_flight = trial;
        free = free.max(0) + freed - need;
        for (v, reason, lost) in picked {
            taken.insert(v.job_id);
            out.push(WouldPreempt {
                at: now,
                victim: v.job_id,
                victim_run: v.run,
                account: v.account.clone(),
                user: v.user.clone(),
                gpus: v.gpus,
                preemptor: p.job_id,
                preemptor_account: p.account.clone(),
                preemptor_user: p.user.clone(),
                lost_gpu_hours: lost / 3600.0,
                reason,
            });
        }
    }
    out
}

/// Every account's holdings against the rule's target, from the period state.
fn shortfall_now(rule: &Rule<'_>) -> Vec<TeamShortfall> {
    let fs = rule.fs;
    fs.nodes
        .iter()
        .enumerate()
        .filter(|(_, n)| matches!(n.kind, NodeKind::Account) && n.name != ROOT)
        .filter_map(|(i, n)| {
            let s = rule.state.side(fs, i)?;
            let target = s.entitled.min(s.demand);
            Some(TeamShortfall {
                account: n.name.clone(),
                held_gpus: s.held,
                entitled_gpus: s.entitled,
                demand_gpus: s.demand,
                target_gpus: target,
                shortfall_gpus: (target - s.held).max(0.0),
                shortfall_gpu_hours: 0.0,
            })
        })
        .collect()
}

/// Which jobs and accounts the reader may see.
pub struct Visibility<'v> {
    /// A job of `(account, user)`.
    pub job: &'v dyn Fn(&str, &str) -> bool,
    /// An account's figures.
    pub account: &'v dyn Fn(&str) -> bool,
}

/// The report of the samples from `since` to `at`.
pub fn report(store: &Store, since: i64, at: i64, see: &Visibility<'_>) -> AppResult<ShadowReport> {
    let order = order_report(store, since, at, see)?;
    let mut st = store.conn().prepare(
        "SELECT victim, victim_run, account, user, gpus, preemptor, preemptor_account, \
         preemptor_user, at, lost_gpu_hours, reason FROM shadow_preemptions \
         WHERE at >= ?1 AND at <= ?2 ORDER BY at, victim, victim_run",
    )?;
    let rows = st.query_map(params![since, at], |r| {
        Ok(WouldPreempt {
            victim: r.get(0)?,
            victim_run: r.get(1)?,
            account: r.get(2)?,
            user: r.get(3)?,
            gpus: r.get(4)?,
            preemptor: r.get(5)?,
            preemptor_account: r.get(6)?,
            preemptor_user: r.get(7)?,
            at: r.get(8)?,
            lost_gpu_hours: r.get(9)?,
            // Rows are written by `record` only.
            reason: serde_json::from_str(&r.get::<_, String>(10)?)
                .unwrap_or(PeerReason::VictimOverBudget),
        })
    })?;
    let mut preemptions = Vec::new();
    for p in rows {
        let p = p?;
        if (see.job)(&p.account, &p.user) || (see.job)(&p.preemptor_account, &p.preemptor_user) {
            preemptions.push(p);
        }
    }
    let lost_gpu_hours = preemptions.iter().map(|p| p.lost_gpu_hours).sum();
    Ok(ShadowReport {
        since,
        at,
        order,
        preemptions,
        lost_gpu_hours,
        shortfall: shortfall_report(store, since, at, see)?,
    })
}

fn order_report(
    store: &Store,
    since: i64,
    at: i64,
    see: &Visibility<'_>,
) -> AppResult<OrderReport> {
    let mut st = store.conn().prepare(
        "SELECT at, pending, pairs, discordant, slurm_ties, tau, furthest FROM shadow_orders \
         WHERE at >= ?1 AND at <= ?2 ORDER BY at",
    )?;
    type Row = (i64, u32, i64, i64, i64, Option<f64>, String);
    let rows: Vec<Row> = st
        .query_map(params![since, at], |r| {
            Ok((
                r.get(0)?,
                r.get(1)?,
                r.get(2)?,
                r.get(3)?,
                r.get(4)?,
                r.get(5)?,
                r.get(6)?,
            ))
        })?
        .collect::<Result<_, _>>()?;
    let mut out = OrderReport {
        samples: rows.len() as u64,
        ..OrderReport::default()
    };
    let taus: Vec<f64> = rows.iter().filter_map(|r| r.5).collect();
    out.mean_tau = (!taus.is_empty()).then(|| taus.iter().sum::<f64>() / taus.len() as f64);
    let shares: Vec<f64> = rows
        .iter()
        .filter(|r| r.2 > 0)
        .map(|r| r.3 as f64 / r.2 as f64)
        .collect();
    out.mean_discordant_share =
        (!shares.is_empty()).then(|| shares.iter().sum::<f64>() / shares.len() as f64);
    if let Some((t, pending, pairs, disc, ties, tau, furthest)) = rows.last() {
        out.latest_at = Some(*t);
        out.pending = *pending;
        out.pairs = (*pairs).max(0) as u64;
        out.discordant = (*disc).max(0) as u64;
        out.slurm_ties = (*ties).max(0) as u64;
        out.tau = *tau;
        let gaps: Vec<(u32, u32, Tier, u32, u32, u32)> =
            serde_json::from_str(furthest).unwrap_or_default();
        for (job_id, priority, tier, rank, s, b) in gaps {
            let Some(run) = store.ledger().job_runs(job_id).pop() else {
                continue;
            };
            if !(see.job)(&run.account, &run.user) {
                continue;
            }
            out.furthest.push(OrderGap {
                job_id,
                account: run.account,
                user: run.user,
                priority,
                tier,
                rank,
                slurm_position: s,
                budget_position: b,
            });
        }
    }
    Ok(out)
}

fn shortfall_report(
    store: &Store,
    since: i64,
    at: i64,
    see: &Visibility<'_>,
) -> AppResult<Vec<TeamShortfall>> {
    let mut times: Vec<i64> = store
        .conn()
        .prepare(
            "SELECT DISTINCT at FROM shadow_shortfall WHERE at >= ?1 AND at <= ?2 ORDER BY at",
        )?
        .query_map(params![since, at], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    times.dedup();
    // Each sample stands for the time to the next one (the last: to `at`),
    // at most SAMPLE_GAP_SECS.
    let span: HashMap<i64, i64> = times
        .iter()
        .enumerate()
        .map(|(k, &t)| {
            let next = times.get(k + 1).copied().unwrap_or(at);
            (t, (next - t).clamp(0, SAMPLE_GAP_SECS))
        })
        .collect();
    let latest = times.last().copied();
    let mut st = store.conn().prepare(
        "SELECT at, account, held, entitled, demand, target, shortfall FROM shadow_shortfall \
         WHERE at >= ?1 AND at <= ?2 ORDER BY at",
    )?;
    let rows = st.query_map(params![since, at], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, f64>(2)?,
            r.get::<_, f64>(3)?,
            r.get::<_, f64>(4)?,
            r.get::<_, f64>(5)?,
            r.get::<_, f64>(6)?,
        ))
    })?;
    let mut by: HashMap<String, TeamShortfall> = HashMap::new();
    for row in rows {
        let (t, account, held, entitled, demand, target, short) = row?;
        let e = by.entry(account.clone()).or_insert_with(|| TeamShortfall {
            account,
            ..TeamShortfall::default()
        });
        e.shortfall_gpu_hours += short * span.get(&t).copied().unwrap_or(0) as f64 / 3600.0;
        if Some(t) == latest {
            e.held_gpus = held;
            e.entitled_gpus = entitled;
            e.demand_gpus = demand;
            e.target_gpus = target;
            e.shortfall_gpus = short;
        }
    }
    // The tree's order; accounts since removed from the tree last.
    let mut out = Vec::new();
    for a in &store.tree().accounts {
        if let Some(t) = by.remove(&a.name)
            && (see.account)(&t.account)
        {
            out.push(t);
        }
    }
    let mut rest: Vec<TeamShortfall> = by
        .into_values()
        .filter(|t| (see.account)(&t.account))
        .collect();
    rest.sort_by(|a, b| a.account.cmp(&b.account));
    out.extend(rest);
    Ok(out)
}

/// What `/metrics` shows of shadow mode: the latest sample's order figures
/// and shortfalls, and the window's would-be preemptions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latest {
    pub order: Option<OrderReport>,
    pub preemptions: u64,
    pub lost_gpu_hours: f64,
    pub shortfall: Vec<TeamShortfall>,
}

/// [`Latest`] at `now` over the policy window (everything visible).
pub fn latest(store: &Store, now: i64) -> AppResult<Latest> {
    let since = now - store.policy().window_secs;
    let last: Option<i64> = store.conn().query_row(
        "SELECT MAX(at) FROM shadow_orders WHERE at <= ?1",
        [now],
        |r| r.get(0),
    )?;
    let all_jobs = |_: &str, _: &str| true;
    let all_accounts = |_: &str| true;
    let see = Visibility {
        job: &all_jobs,
        account: &all_accounts,
    };
    let order = match last {
        Some(t) if t >= since => Some(order_report(store, t, t, &see)?),
        _ => None,
    };
    let (preemptions, lost_gpu_hours): (i64, f64) = store.conn().query_row(
        "SELECT COUNT(*), COALESCE(SUM(lost_gpu_hours), 0) FROM shadow_preemptions \
         WHERE at >= ?1 AND at <= ?2",
        params![since, now],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?;
    let last_short: Option<i64> = store.conn().query_row(
        "SELECT MAX(at) FROM shadow_shortfall WHERE at <= ?1",
        [now],
        |r| r.get(0),
    )?;
    let shortfall = match last_short {
        Some(t) if t >= since => shortfall_report(store, t, t, &see)?,
        _ => Vec::new(),
    };
    Ok(Latest {
        order,
        preemptions: preemptions.max(0) as u64,
        lost_gpu_hours,
        shortfall,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(job_id: u32, priority: u32, tier: Tier, rank: u32) -> QueuedJob {
        QueuedJob {
            job_id,
            priority,
            tier,
            rank,
        }
    }

    #[test]
    fn the_same_order_has_tau_one_and_no_discordant_pair() {
        let jobs = [
            job(1, 300, Tier::Budgeted, 0),
            job(2, 200, Tier::Budgeted, 1),
            job(3, 100, Tier::OverBudget, 0),
        ];
        let s = order_stats(&jobs);
        assert_eq!(
            (s.pending, s.pairs, s.discordant, s.slurm_ties),
            (3, 3, 0, 0)
        );
        assert_eq!(s.tau, Some(1.0));
        assert!(s.furthest.is_empty());
    }

    #[test]
    fn a_reversed_order_counts_every_pair_and_names_the_furthest() {
        let jobs = [
            job(1, 100, Tier::Budgeted, 0),
            job(2, 200, Tier::Budgeted, 1),
            job(3, 300, Tier::OverBudget, 0),
            // Same tier and rank as job 3: that pair is the site's to order.
            job(4, 50, Tier::OverBudget, 0),
        ];
        let s = order_stats(&jobs);
        // 6 pairs, (3,4) tied in the budget order: 5 ordered.
        assert_eq!(s.pairs, 5);
        // 1<2 (1 before 2 in budget, Slurm 2 first), 1<3, 2<3: discordant;
        // 1,2 before 4 and Slurm agrees.
        assert_eq!(s.discordant, 3);
        assert_eq!(s.slurm_ties, 0);
        let tau = s.tau.expect("tau");
        // (C - D) / sqrt(5 * 6) = (2 - 3) / sqrt(30).
        assert!((tau - (-1.0 / 30f64.sqrt())).abs() < 1e-12, "{tau}");
        // Slurm: 3, 2, 1, 4; budget: 1, 2, 3, 4 (3 before 4 by Slurm's order).
        let f: Vec<(u32, u32, u32)> = s
            .furthest
            .iter()
            .map(|(j, a, b)| (j.job_id, *a, *b))
            .collect();
        assert_eq!(f, vec![(1, 3, 1), (3, 1, 3)]);
    }

    #[test]
    fn slurm_ties_are_neither_concordant_nor_discordant() {
        let jobs = [
            job(1, 100, Tier::Budgeted, 0),
            job(2, 100, Tier::Budgeted, 1),
        ];
        let s = order_stats(&jobs);
        assert_eq!((s.pairs, s.discordant, s.slurm_ties), (1, 0, 1));
        assert_eq!(s.tau, None);
        assert_eq!(order_stats(&[]).tau, None);
    }
}
