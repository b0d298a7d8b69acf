//! What a late team's first window could have had at best, and the least work
//! an oracle would have destroyed to give it that (`budget-sim --late-oracle
//! TEAM`): a yardstick for the late-arrival goal (the late team's window
//! misses at most a tenth of its entitlement) against the lost-work goal.
//!
//! The oracle reads a finished replay at the start of two windows of the
//! team: its first (from the instant it first asks for GPUs, as
//! `first_week_shortfall` measures it) and the one the replay missed most (as
//! `entitlement_shortfall_worst` finds it, windows ending a day apart). It
//! knows every running job's natural end (its start plus its duration: the generated
//! workloads declare no checkpoints, so a run needs its whole duration). It
//! favours the late team beyond anything a scheduler could do:
//! - every GPU that comes free goes to the late team while it asks for more
//!   than it holds (no other team's job starts in between, no backfill into a
//!   draining node);
//! - it asks, at each instant, what the replay says it asked
//!   (`min(entitled, demand)`, the amount the shortfall is measured against);
//! - free-tier GPUs and idle GPUs are its at once, for nothing, and the GPUs
//!   its own jobs hold at the window's start stay its own (a job that ends
//!   is followed by its next one at once).
//!
//! Two placements are modelled: **fluid** (any freed GPU serves the team, the
//! placement of 1-GPU jobs) and **whole nodes** (a node serves it only once
//! every job on it has ended or been preempted, the placement of jobs of a
//! node or more). Preempting a run (fluid) or a node's runs (whole nodes) at
//! that instant brings its GPUs forward from their natural end; its cost is
//! the work they lose, their GPU-seconds since they started. The oracle picks,
//! greedily, what brings the most entitled GPU-seconds per GPU-second lost,
//! until the window's shortfall is at the goal's fraction. Greedy is not a
//! proof of the least loss, so the figures are an estimate of what the goal
//! costs in a model that flatters the late team, not a bound on any policy:
//! where even it must destroy more than the lost-work goal allows, the two
//! goals conflict on that workload; where it destroys little, a rule could do
//! better than it does.

use serde::Serialize;

use crate::engine::Outcome;
use crate::metrics::{first_window, shortfall_at, window_ends};

/// Resolution of the window's integration (seconds).
const STEP: i64 = 300;

/// The oracle's figures for one placement model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OracleCase {
    /// The window's shortfall (fraction of the entitlement) with no
    /// preemption: natural turnover alone, every freed GPU the team's.
    pub shortfall_without_preemption: f64,
    /// Whether preempting reached the goal's fraction.
    pub reached: bool,
    /// The shortfall the picked preemptions leave.
    pub shortfall: f64,
    /// Runs preempted (fluid) or nodes emptied (whole nodes).
    pub preempted: usize,
    /// Jobs preempted (whole nodes: every other team's job on the emptied
    /// nodes).
    pub jobs_preempted: usize,
    /// GPU-hours of work lost.
    pub lost_gpu_hours: f64,
    /// The same as a fraction of the replay's work (the lost-work goal's
    /// measure).
    pub lost_fraction_of_work: f64,
}

/// The oracle at the start of one window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OracleWindow {
    /// Days since the first submission when the window starts.
    pub start_days: f64,
    /// The shortfall the replay itself had in this window.
    pub replay_shortfall: f64,
    /// Running jobs of other teams at the window's start (not free tier).
    pub running_jobs: usize,
    /// GPUs idle or free tier at the window's start.
    pub free_gpus: u64,
    /// GPUs the team's own jobs held at the window's start.
    pub own_gpus: u64,
    pub fluid: OracleCase,
    pub whole_nodes: OracleCase,
}

/// What `--late-oracle TEAM` adds to a replay's report.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LateOracle {
    pub team: String,
    /// The goal's fraction the oracle aims at.
    pub goal: f64,
    /// The team's entitled GPUs.
    pub entitled_gpus: f64,
    pub first_window: OracleWindow,
    pub worst_window: OracleWindow,
}

/// The oracle for team `team` of `o`, judged at `goal` (e.g. 0.10); `None`
/// when the team does not exist, has no entitlement or never asked.
pub fn late_oracle(
    o: &Outcome,
    team: &str,
    window: i64,
    gpus_per_node: u32,
    goal: f64,
) -> Option<LateOracle> {
    let t = o.teams.iter().position(|x| x.name == team)?;
    let e = o.entitled_gpus.get(t).copied().filter(|&e| e > 0.0)?;
    let per = o.sample_every.max(1);
    let wlen = (window / per).max(1) as usize;
    // The report's own windows: the first as `first_week_shortfall` measures
    // it, the worst as `entitlement_shortfall_worst` finds it.
    let first = first_window(o, t, window)?;
    let worst_end = window_ends(o, window)
        .into_iter()
        .filter_map(|k| shortfall_at(o, k, window)[t].map(|(m, en)| (k, m / en)))
        .fold(None, |best: Option<(usize, f64)>, (k, f)| match best {
            Some((_, b)) if b >= f => best,
            _ => Some((k, f)),
        })?
        .0;
    let worst = (worst_end.saturating_sub(wlen), worst_end);
    let ctx = Ctx {
        o,
        t,
        e,
        per,
        gpus_per_node,
        goal,
    };
    Some(LateOracle {
        team: team.to_string(),
        goal,
        entitled_gpus: e,
        first_window: ctx.window(first)?,
        worst_window: ctx.window(worst)?,
    })
}

/// What every window of one team's oracle reads.
struct Ctx<'a> {
    o: &'a Outcome,
    t: usize,
    e: f64,
    per: i64,
    gpus_per_node: u32,
    goal: f64,
}

/// A run of another team at the window's start: its GPUs on each node, when
/// it would end by itself, the work it would lose if preempted then.
struct Victim {
    alloc: Vec<(u32, u32)>,
    gpus: f64,
    natural_end: i64,
    lost: f64,
}

/// A node in the whole-node model: it serves the team whole once every other
/// team's job on it is gone (`others_end`); until then only its own jobs'
/// GPUs count, each until it ends.
struct NodeModel {
    others_end: i64,
    lost: f64,
    jobs: usize,
    own: Vec<(i64, f64)>,
}

impl Ctx<'_> {
    fn window(&self, (lo, hi): (usize, usize)) -> Option<OracleWindow> {
        let (o, t, per) = (self.o, self.t, self.per);
        let start = lo as i64 * per;
        let secs = (hi.checked_sub(lo)?) as i64 * per;
        if secs <= 0 {
            return None;
        }
        // What the team asked, per sample period (mean GPUs).
        let asked: Vec<f64> = (lo + 1..=hi)
            .map(|k| (o.entitled[k][t] - o.entitled[k - 1][t]) / per as f64)
            .collect();
        let asked_total: f64 = asked.iter().sum::<f64>() * per as f64;
        let received_replay = (o.samples[hi][t] - o.samples[lo][t]) as f64;
        let denom = self.e * secs as f64;
        let replay_shortfall = (asked_total - received_replay).max(0.0) / denom;
        let target = asked_total - self.goal * denom;

        // Work each run's job had saved by checkpoints before it (runs are
        // recorded in the order they start).
        let mut saved_so_far = vec![0i64; o.jobs.len()];
        let mut victims = Vec::new();
        let mut own: Vec<(u32, i64, f64)> = Vec::new();
        let (mut busy, mut free_tier, mut own_gpus) = (0u64, 0u64, 0u64);
        for r in &o.runs {
            let saved = {
                let s = &mut saved_so_far[r.job as usize];
                let before = *s;
                *s += r.saved.max(0);
                before
            };
            if r.start > start || r.end.unwrap_or(i64::MAX) <= start {
                continue;
            }
            busy += u64::from(r.gpus);
            let job = &o.jobs[r.job as usize];
            let natural_end = r.start.saturating_add((job.duration - saved).max(0));
            if r.free {
                free_tier += u64::from(r.gpus);
            } else if job.team as usize == t {
                own_gpus += u64::from(r.gpus);
                own.extend(
                    r.alloc
                        .iter()
                        .map(|&(nd, g)| (nd, natural_end, f64::from(g))),
                );
            } else {
                victims.push(Victim {
                    alloc: r.alloc.clone(),
                    gpus: f64::from(r.gpus),
                    natural_end,
                    lost: ((start - r.start) * i64::from(r.gpus)) as f64,
                });
            }
        }
        let free_gpus = o.capacity_gpus.saturating_sub(busy) + free_tier;
        let work = (o.busy_gpu_secs - o.lost_gpu_secs) as f64;
        let case = |received: &dyn Fn(&[bool]) -> f64, cost: &[f64], jobs: &[usize]| {
            let short = |got: f64| (asked_total - got).max(0.0) / denom;
            let without = received(&vec![false; cost.len()]);
            let (picked, got) = greedy(received, cost, target, without);
            let chosen = || {
                picked
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| **p)
                    .map(|(i, _)| i)
            };
            let lost: f64 = chosen().map(|i| cost[i]).sum();
            OracleCase {
                shortfall_without_preemption: r6(short(without)),
                reached: got >= target,
                shortfall: r6(short(got)),
                preempted: chosen().count(),
                jobs_preempted: chosen().map(|i| jobs[i]).sum(),
                lost_gpu_hours: r6(lost / 3600.0),
                lost_fraction_of_work: r6(if work > 0.0 { lost / work } else { 0.0 }),
            }
        };

        // Fluid: the free GPUs and its own stay the team's; each victim's GPUs
        // come at its end, or at the start if preempted.
        let base = (free_gpus + own_gpus) as f64;
        let fluid_received = |picked: &[bool]| {
            let releases: Vec<(i64, f64)> = victims
                .iter()
                .zip(picked)
                .map(|(v, &p)| (if p { start } else { v.natural_end }, v.gpus))
                .collect();
            integrate(&asked, per, start, secs, |s| {
                base + releases
                    .iter()
                    .filter(|r| r.0 <= s)
                    .map(|r| r.1)
                    .sum::<f64>()
            })
        };
        let fluid_cost: Vec<f64> = victims.iter().map(|v| v.lost).collect();
        let fluid = case(&fluid_received, &fluid_cost, &vec![1; victims.len()]);

        // Whole nodes. A multi-node victim's loss is split over its nodes by
        // its GPUs on each, so emptying all of them charges it whole.
        let g = f64::from(self.gpus_per_node.max(1));
        let num_nodes = (o.capacity_gpus / u64::from(self.gpus_per_node.max(1))) as usize;
        let mut nodes: Vec<NodeModel> = (0..num_nodes)
            .map(|_| NodeModel {
                others_end: start,
                lost: 0.0,
                jobs: 0,
                own: Vec::new(),
            })
            .collect();
        for v in &victims {
            for &(nd, k) in &v.alloc {
                if let Some(m) = nodes.get_mut(nd as usize) {
                    m.others_end = m.others_end.max(v.natural_end);
                    m.lost += v.lost * f64::from(k) / v.gpus.max(1.0);
                    m.jobs += 1;
                }
            }
        }
        for &(nd, end, k) in &own {
            if let Some(m) = nodes.get_mut(nd as usize) {
                m.own.push((end, k));
            }
        }
        // Items: the nodes another team's jobs hold; the rest serve whole.
        let (items, whole): (Vec<&NodeModel>, Vec<&NodeModel>) =
            nodes.iter().partition(|m| m.jobs > 0);
        let whole_gpus = whole.len() as f64 * g;
        let node_received = |picked: &[bool]| {
            integrate(&asked, per, start, secs, |s| {
                whole_gpus
                    + items
                        .iter()
                        .zip(picked)
                        .map(|(m, &p)| {
                            if p || s >= m.others_end {
                                g
                            } else {
                                m.own.iter().filter(|o| o.0 > s).map(|o| o.1).sum()
                            }
                        })
                        .sum::<f64>()
            })
        };
        let node_cost: Vec<f64> = items.iter().map(|m| m.lost).collect();
        let node_jobs: Vec<usize> = items.iter().map(|m| m.jobs).collect();
        let whole_nodes = case(&node_received, &node_cost, &node_jobs);

        Some(OracleWindow {
            start_days: start as f64 / 86_400.0,
            replay_shortfall: r6(replay_shortfall),
            running_jobs: victims.len(),
            free_gpus,
            own_gpus,
            fluid,
            whole_nodes,
        })
    }
}

/// GPU-seconds the team receives over `[start, start + secs)`: at each step,
/// what it asked (per sample period of `per` seconds), capped by the GPUs it
/// could have then (`avail`).
fn integrate(asked: &[f64], per: i64, start: i64, secs: i64, avail: impl Fn(i64) -> f64) -> f64 {
    let mut total = 0.0;
    let mut s = start;
    while s < start + secs {
        let k = ((s - start) / per) as usize;
        let want = asked.get(k).copied().unwrap_or(0.0);
        let dt = STEP.min(start + secs - s);
        total += want.min(avail(s)) * dt as f64;
        s += dt;
    }
    total
}

/// Picks items until `received` reaches `target`, each time the one that
/// brings the most per GPU-second lost (a loss under one GPU-second counts as
/// one, so free gains come first, largest first), from `none` (what no pick
/// receives). Returns the picks and what they give.
fn greedy(
    received: &dyn Fn(&[bool]) -> f64,
    cost: &[f64],
    target: f64,
    none: f64,
) -> (Vec<bool>, f64) {
    let mut picked = vec![false; cost.len()];
    let mut got = none;
    while got < target {
        let mut best: Option<(usize, f64, f64)> = None;
        for i in 0..cost.len() {
            if picked[i] {
                continue;
            }
            picked[i] = true;
            let gain = received(&picked) - got;
            picked[i] = false;
            if gain <= 0.0 {
                continue;
            }
            let ratio = gain / cost[i].max(1.0);
            if best.is_none_or(|(_, r, _)| ratio > r) {
                best = Some((i, ratio, gain));
            }
        }
        let Some((i, _, gain)) = best else { break };
        picked[i] = true;
        got += gain;
    }
    (picked, got)
}

/// [`crate::metrics::r6`], and never `-0` (an empty sum of floats is `-0.0`,
/// which JSON would print as such).
fn r6(x: f64) -> f64 {
    crate::metrics::r6(x) + 0.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cheapest_preemption_that_reaches_the_goal_is_picked() {
        // The team asks 8 GPUs for 10 hours; 4 are its own; two 4-GPU runs
        // of others end at 5 h and 10 h. Without preemption it gets
        // 4 x 10 + 4 x 5 = 60 of 80 GPU-hours: 25% short.
        let h = 3600;
        let asked = vec![8.0; 10];
        let ends = [5 * h, 10 * h];
        let cost = [100.0 * h as f64, 1.0 * h as f64];
        let received = |picked: &[bool]| {
            integrate(&asked, h, 0, 10 * h, |s| {
                4.0 + ends
                    .iter()
                    .zip(picked)
                    .filter(|(e, p)| **p || **e <= s)
                    .count() as f64
                    * 4.0
            })
        };
        assert_eq!(received(&[false, false]), 60.0 * h as f64);
        // The goal: at most 10% of 80 GPU-hours missed.
        let none = received(&[false, false]);
        let (picked, got) = greedy(&received, &cost, 72.0 * h as f64, none);
        // Either preemption gains 20 GPU-hours; the one that loses 1 GPU-hour
        // is picked, and it is enough (80 >= 72).
        assert_eq!(picked, vec![false, true]);
        assert_eq!(got, 80.0 * h as f64);
    }

    #[test]
    fn an_unreachable_goal_stops_when_nothing_gains() {
        // Nothing can be preempted: the picks stay empty and the target unmet.
        let h = 3600;
        let asked = vec![2.0; 4];
        let received = |_: &[bool]| integrate(&asked, h, 0, 4 * h, |_| 1.0);
        let (picked, got) = greedy(&received, &[], 7.2 * h as f64, received(&[]));
        assert!(picked.is_empty());
        assert_eq!(got, 4.0 * h as f64);
    }
}
