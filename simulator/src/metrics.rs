//! Figures of merit computed from a replay's [`Outcome`].
//!
//! Definitions (also printed by `--help` and in the README):
//! - **allocation share** of a team: its allocation in GPUs / cluster GPUs.
//! - **attained share** in a window: the team's charged GPU-seconds in the
//!   window / (cluster GPUs x window length). Windows are the sliding 7-day
//!   windows (`--window`) ending at every whole day from day 7 to the end of
//!   the replay (one window over the whole replay if it is shorter).
//!   `deviation = attained - allocation`; the table shows its mean absolute
//!   value and its largest absolute value.
//! - **Jain's index** over teams of `x = mean attained share / allocation
//!   share`: `(sum x)^2 / (n sum x^2)`, 1 when every team gets the same fraction
//!   of its allocation (teams with no allocation are left out).
//! - **utilisation**: busy GPU-seconds (lost work included) / (cluster GPUs x
//!   makespan), makespan = first submission to last end.
//! - **utilisation while jobs arrive** (`utilization_to_last_submit`): busy
//!   GPU-seconds (lost work included) from the first to the last submission /
//!   (cluster GPUs x that span): the cluster's use before the replay drains
//!   its remaining backlog (`None` when every job was submitted at once).
//! - **preemptions per GPU-day**: preemptions / (cluster GPUs x makespan in days).
//! - **GPU-hours lost**: GPUs x (preemption time - start of the run, or of the
//!   last checkpoint), summed over preemptions.
//! - **work GPU-hours** (`work_gpu_hours`): useful GPU-hours completed = busy
//!   GPU-hours - GPU-hours lost (each finished job's duration x GPUs, plus
//!   progress checkpointed by unfinished ones).
//! - **entitlement shortfall**: per team and window W (the same windows as the
//!   attained share), `max(0, E - R) / (e x |W|)` where `e` is the team's
//!   entitled GPUs (its allocation, scaled down proportionally when allocations
//!   sum above the cluster), `E` the integral over W of `min(e, demand)` with
//!   demand = GPUs of the team's non-free jobs submitted and not finished
//!   (pending, requeued or running), and `R` the GPU-hours the team held in W
//!   (charged runs, lost work included). Per team: mean and worst window;
//!   policy level: sum of shortfalls / sum of `e x |W|` over teams with an
//!   allocation and windows (GPU-weighted). Exact: demand changes are
//!   integrated at the instant they happen (simulator/README.md, "Entitlement
//!   shortfall").
//! - **reversals**: preemptions of a non-free job of team Y by team X when Y
//!   had preempted a non-free job of X within the previous window (the
//!   oscillation the rule must not produce, docs/design.md §6.2).
//! - **wait**: first start - submission, per tier at first start (budget), per
//!   declared level (static), all jobs (decay); p50/p95 by nearest rank.
//!
//! Every float is rounded to 6 decimals so the JSON is byte-stable.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::checker::CheckReport;
use crate::engine::Outcome;

/// Rounds to 6 decimals (stable JSON, readable tables).
pub fn r6(x: f64) -> f64 {
    if x.is_finite() {
        (x * 1e6).round() / 1e6
    } else {
        0.0
    }
}

/// One team's row.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TeamReport {
    pub team: String,
    pub allocation_gpus: f64,
    pub allocation_share: f64,
    pub attained_share_mean: f64,
    pub mean_abs_deviation: f64,
    pub max_deviation: f64,
    pub jobs: usize,
    pub gpu_hours: f64,
    /// Entitled GPUs (allocation, scaled to the cluster if allocations exceed it).
    pub entitled_gpus: f64,
    /// Mean over windows of the entitlement shortfall (fraction of `entitled x |W|`).
    pub entitlement_shortfall_mean: f64,
    /// Worst window's entitlement shortfall.
    pub entitlement_shortfall_worst: f64,
    /// Shortfall over the window that starts when the team first asks for
    /// GPUs (a team arriving on a busy cluster: did it get its first week?).
    pub entitlement_shortfall_first_week: f64,
}

/// Wait statistics of one class, in hours.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct WaitStats {
    pub jobs: usize,
    pub p50_hours: f64,
    pub p95_hours: f64,
}

/// Everything reported for one policy (the JSON object under its name).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PolicyReport {
    pub policy: String,
    pub description: String,
    pub jobs: usize,
    pub makespan_days: f64,
    pub jain_index: f64,
    pub utilization: f64,
    /// Busy GPU share from the first to the last submission (module docs).
    pub utilization_to_last_submit: Option<f64>,
    pub preemptions: u64,
    /// `free_tier`, `over_budget`, `rebalance`: which clause of the rule allowed each.
    pub preemptions_by_reason: BTreeMap<String, u64>,
    pub preemptions_per_gpu_day: f64,
    pub gpu_hours_lost: f64,
    /// Useful GPU-hours completed (busy - lost).
    pub work_gpu_hours: f64,
    /// `gpu_hours_lost / work_gpu_hours`.
    pub lost_fraction_of_work: f64,
    /// Entitlement shortfall, GPU-weighted over teams and windows (0..1).
    pub entitlement_shortfall: f64,
    /// Preemptions that reversed one made in the other direction within a window.
    pub reversals: u64,
    pub contract_breaks: u64,
    /// Double booking + accounting errors + window mismatches.
    pub invariant_violations: u64,
    /// Jobs that had not finished when the replay hit its horizon (preemption
    /// livelock without checkpoints); 0 in a normal replay.
    pub unfinished_jobs: u64,
    pub checks: CheckReport,
    pub windows: usize,
    pub teams: Vec<TeamReport>,
    pub wait: BTreeMap<String, WaitStats>,
    pub notes: Vec<String>,
    /// What bound the cost-aware rule (`--count-refusals`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusals: Option<Refusals>,
    /// What an oracle would have given a late team's first window, and at
    /// what loss (`--late-oracle TEAM`; absent otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late_oracle: Option<crate::late_oracle::LateOracle>,
}

/// What bound the cost-aware rule over one replay (`--count-refusals`): the
/// diagnosis of a policy that leaves a team short, counted rather than guessed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Refusals {
    /// The rule's refusals by the preemptor's team and reason (the name of
    /// `policy_core::rebalance::Denied`'s variant, `Denied::name`:
    /// `"l LostBudget"`), one per (pending job, running job) pair the engine asked about, as often as the plugin's
    /// callback would be asked. A side-level refusal (`judge_sides`) counts
    /// once for each running job of the refused leaf.
    pub by_reason: BTreeMap<String, u64>,
    /// Preemption attempts of blocked jobs, by the job's team, outcome and
    /// GPUs (`"l started 16 GPUs"`): `started`; `no_victims`, the rule allowed
    /// no running job; `not_enough`, the victims it allowed free no placement
    /// for the job (the rest of each node is held by jobs it may not take).
    pub attempts: BTreeMap<String, u64>,
}

fn percentile(sorted: &[i64], q: f64) -> i64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Attained share of each team over the window ending at sample `k`
/// (shorter at the start of the replay). Used by the table and the charts.
pub fn attained_at(o: &Outcome, k: usize, window: i64) -> Vec<f64> {
    let per = o.sample_every.max(1);
    let wlen = (window / per).max(1) as usize;
    let lo = k.saturating_sub(wlen);
    let secs = ((k - lo) as i64 * per) as f64;
    let cap = o.capacity_gpus as f64;
    o.teams
        .iter()
        .enumerate()
        .map(|(t, _)| {
            let used = (o.samples[k][t] - o.samples[lo][t]) as f64;
            if secs > 0.0 && cap > 0.0 {
                used / (cap * secs)
            } else {
                0.0
            }
        })
        .collect()
}

/// Entitlement shortfall of each team over the window ending at sample `k`:
/// `Some((missing GPU-seconds, entitled x |W| GPU-seconds))`, `None` for a team
/// without an entitlement.
pub fn shortfall_at(o: &Outcome, k: usize, window: i64) -> Vec<Option<(f64, f64)>> {
    let per = o.sample_every.max(1);
    let wlen = (window / per).max(1) as usize;
    let lo = k.saturating_sub(wlen);
    let secs = ((k - lo) as i64 * per) as f64;
    (0..o.teams.len())
        .map(|t| {
            let e = o.entitled_gpus.get(t).copied().unwrap_or(0.0);
            if e <= 0.0 || secs <= 0.0 {
                return None;
            }
            let entitled = o.entitled[k][t] - o.entitled[lo][t];
            let received = (o.samples[k][t] - o.samples[lo][t]) as f64;
            Some(((entitled - received).max(0.0), e * secs))
        })
        .collect()
}

/// Per sample period and team: mean GPUs held and mean `min(entitled, demand)`
/// over the period (`--timeline-dir`), as CSV: where a shortfall comes from.
pub fn timeline_csv(o: &Outcome) -> String {
    let per = o.sample_every.max(1) as f64;
    let mut s = String::from("hour,team,held_gpus,entitled_and_asked_gpus,entitled_gpus\n");
    for k in 1..o.samples.len().min(o.entitled.len()) {
        for (t, info) in o.teams.iter().enumerate() {
            let held = (o.samples[k][t] - o.samples[k - 1][t]) as f64 / per;
            let asked = (o.entitled[k][t] - o.entitled[k - 1][t]) / per;
            s.push_str(&format!(
                "{},{},{:.2},{:.2},{:.2}\n",
                k as f64 * per / 3600.0,
                info.name,
                held,
                asked,
                o.entitled_gpus.get(t).copied().unwrap_or(0.0)
            ));
        }
    }
    s
}

/// Shortfall of team `t` over the window starting at the sample before it
/// first asked for GPUs (clipped to the replay); 0 if it never asked.
pub fn first_week_shortfall(o: &Outcome, t: usize, window: i64) -> f64 {
    let per = o.sample_every.max(1);
    let e = o.entitled_gpus.get(t).copied().unwrap_or(0.0);
    let Some((lo, hi)) = first_window(o, t, window) else {
        return 0.0;
    };
    let secs = ((hi - lo) as i64 * per) as f64;
    if e <= 0.0 || secs <= 0.0 {
        return 0.0;
    }
    let entitled = o.entitled[hi][t] - o.entitled[lo][t];
    let received = (o.samples[hi][t] - o.samples[lo][t]) as f64;
    (entitled - received).max(0.0) / (e * secs)
}

/// Preemptions of a non-free job of team Y by team X within a window after Y
/// preempted a non-free job of X.
pub fn reversals(o: &Outcome, window: i64) -> u64 {
    let mut last: BTreeMap<(u32, u32), i64> = BTreeMap::new();
    let mut n = 0;
    for e in o.preemption_log.iter().filter(|e| !e.victim_free) {
        if e.preemptor_team == e.victim_team {
            continue;
        }
        if last
            .get(&(e.victim_team, e.preemptor_team))
            .is_some_and(|&t| e.at - t < window)
        {
            n += 1;
        }
        last.insert((e.preemptor_team, e.victim_team), e.at);
    }
    n
}

/// The samples at which the report's windows end: one a day from the first
/// full window on; the last sample alone when the replay is shorter than a
/// window; none when it has no sample after its start.
pub fn window_ends(o: &Outcome, window: i64) -> Vec<usize> {
    let per = o.sample_every.max(1);
    let last = o.samples.len().saturating_sub(1);
    let wlen = (window / per).max(1) as usize;
    let step = (86_400 / per).max(1) as usize;
    if last >= wlen {
        (wlen..=last).step_by(step).collect()
    } else if last > 0 {
        vec![last]
    } else {
        vec![]
    }
}

/// Team `t`'s first window as samples `(lo, hi)`: from the sample before it
/// first asked for GPUs, one window long, clipped to the replay; `None` if it
/// never asked.
pub fn first_window(o: &Outcome, t: usize, window: i64) -> Option<(usize, usize)> {
    let per = o.sample_every.max(1);
    let wlen = (window / per).max(1) as usize;
    let n = o.entitled.len().min(o.samples.len());
    let k0 = (1..n).find(|&k| o.entitled[k][t] > o.entitled[k - 1][t])?;
    Some((k0 - 1, (k0 - 1 + wlen).min(n - 1)))
}

/// Computes the report of one replay.
pub fn report(o: &Outcome, window: i64, notes: &[String]) -> PolicyReport {
    let cap = o.capacity_gpus as f64;
    let ends = window_ends(o, window);
    let shares: Vec<Vec<f64>> = ends.iter().map(|&k| attained_at(o, k, window)).collect();
    let short: Vec<Vec<Option<(f64, f64)>>> =
        ends.iter().map(|&k| shortfall_at(o, k, window)).collect();
    let (mut short_sum, mut entitled_sum) = (0.0, 0.0);
    let mut teams = Vec::new();
    let mut xs = Vec::new();
    for (t, info) in o.teams.iter().enumerate() {
        let alloc = if cap > 0.0 { info.gpus / cap } else { 0.0 };
        let n = shares.len().max(1) as f64;
        let mean = shares.iter().map(|s| s[t]).sum::<f64>() / n;
        let mean_abs = shares.iter().map(|s| (s[t] - alloc).abs()).sum::<f64>() / n;
        let max_dev = shares
            .iter()
            .map(|s| (s[t] - alloc).abs())
            .fold(0.0, f64::max);
        if alloc > 0.0 {
            xs.push(mean / alloc);
        }
        let fracs: Vec<f64> = short
            .iter()
            .filter_map(|w| w[t])
            .map(|(missing, entitled)| {
                short_sum += missing;
                entitled_sum += entitled;
                missing / entitled
            })
            .collect();
        let short_mean = fracs.iter().sum::<f64>() / fracs.len().max(1) as f64;
        let short_worst = fracs.iter().copied().fold(0.0, f64::max);
        let team_jobs: Vec<_> = o.jobs.iter().filter(|j| j.team as usize == t).collect();
        let gpu_secs = o.samples.last().map(|s| s[t]).unwrap_or(0);
        teams.push(TeamReport {
            team: info.name.clone(),
            allocation_gpus: r6(info.gpus),
            allocation_share: r6(alloc),
            attained_share_mean: r6(mean),
            mean_abs_deviation: r6(mean_abs),
            max_deviation: r6(max_dev),
            jobs: team_jobs.len(),
            gpu_hours: r6(gpu_secs as f64 / 3600.0),
            entitled_gpus: r6(o.entitled_gpus.get(t).copied().unwrap_or(0.0)),
            entitlement_shortfall_mean: r6(short_mean),
            entitlement_shortfall_worst: r6(short_worst),
            entitlement_shortfall_first_week: r6(first_week_shortfall(o, t, window)),
        });
    }
    let sum: f64 = xs.iter().sum();
    let sum2: f64 = xs.iter().map(|x| x * x).sum();
    let jain = if sum2 > 0.0 {
        sum * sum / (xs.len() as f64 * sum2)
    } else {
        1.0
    };
    let mut waits: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for j in &o.jobs {
        waits
            .entry(j.wait_class.to_string())
            .or_default()
            .push(j.first_start - j.submit);
    }
    let wait = waits
        .into_iter()
        .map(|(k, mut v)| {
            v.sort_unstable();
            let s = WaitStats {
                jobs: v.len(),
                p50_hours: r6(percentile(&v, 0.5) as f64 / 3600.0),
                p95_hours: r6(percentile(&v, 0.95) as f64 / 3600.0),
            };
            (k, s)
        })
        .collect();
    let span = o.makespan.max(1) as f64;
    let utilization_to_last_submit = utilization_to(o, o.jobs.iter().map(|j| j.submit).max());
    let work = (o.busy_gpu_secs - o.lost_gpu_secs) as f64;
    let gpu_days = cap * span / 86_400.0;
    let c = &o.check;
    PolicyReport {
        policy: o.policy.name().to_string(),
        description: o.policy.describe().to_string(),
        jobs: o.jobs.len(),
        makespan_days: r6(o.makespan as f64 / 86_400.0),
        jain_index: r6(jain),
        utilization: r6(if cap > 0.0 {
            o.busy_gpu_secs as f64 / (cap * span)
        } else {
            0.0
        }),
        utilization_to_last_submit,
        preemptions: o.preemptions,
        preemptions_by_reason: ["free_tier", "over_budget", "rebalance"]
            .iter()
            .zip(o.preemptions_by_reason)
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        preemptions_per_gpu_day: r6(if gpu_days > 0.0 {
            o.preemptions as f64 / gpu_days
        } else {
            0.0
        }),
        gpu_hours_lost: r6(o.lost_gpu_secs as f64 / 3600.0),
        work_gpu_hours: r6(work / 3600.0),
        lost_fraction_of_work: r6(if work > 0.0 {
            o.lost_gpu_secs as f64 / work
        } else {
            0.0
        }),
        entitlement_shortfall: r6(if entitled_sum > 0.0 {
            short_sum / entitled_sum
        } else {
            0.0
        }),
        reversals: reversals(o, window),
        contract_breaks: c.contract_breaks,
        invariant_violations: c.double_booked + c.accounting_errors + c.window_mismatches,
        unfinished_jobs: o.unfinished_jobs,
        checks: c.clone(),
        windows: ends.len(),
        teams,
        wait,
        notes: notes.to_vec(),
        refusals: o.refusals.clone(),
        late_oracle: None,
    }
}

/// Busy GPU share of `[0, end]` (runs still going at the makespan count to
/// it); `None` for an empty span or a cluster without GPUs.
fn utilization_to(o: &Outcome, end: Option<i64>) -> Option<f64> {
    let end = end.filter(|&e| e > 0)?;
    let cap = o.capacity_gpus as f64;
    if cap <= 0.0 {
        return None;
    }
    let busy: i64 = o
        .runs
        .iter()
        .map(|r| {
            let stop = r.end.unwrap_or(o.makespan).min(end);
            (stop - r.start.min(end)).max(0) * i64::from(r.gpus)
        })
        .sum();
    Some(r6(busy as f64 / (cap * end as f64)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
        assert_eq!(percentile(&v, 0.5), 5);
        assert_eq!(percentile(&v, 0.95), 10);
        assert_eq!(percentile(&[7], 0.95), 7);
        assert_eq!(percentile(&[], 0.5), 0);
        assert_eq!(r6(1.0 / 3.0), 0.333333);
    }
}
