//! Generated overload and arrival scenarios (`--scenario NAME --seed S`).
//!
//! Real traces show what happened at one site; these show what a site whose
//! demand is 2-3x its supply lives with every week, which is where a
//! preemption rule is tested. Each team submits a Poisson stream of jobs
//! (sizes and lengths drawn independently, no checkpoints, min_runtime from
//! `--min-runtime-rule`) at a rate that makes it *offer* a given number of busy
//! GPUs on average. Everything is drawn from the seed, so a scenario is a pure
//! function of `(name, seed)`: `--seed 1` is the one the docs report, other
//! seeds check that nothing was tuned to it.
//!
//! | name | cluster | teams (allocation GPUs) | offered busy GPUs | jobs |
//! |---|---|---|---|---|
//! | `overload` | 16 x 8 | a 64, b 32, c 32 | each ~102 (0.8 of the cluster) for 21 days: 2.4x supply | 1-16 GPUs, 1-48 h |
//! | `multiday` | 16 x 8 | a 64, b 64 | each ~102 for 28 days: 1.6x | 1-16 GPUs, 12 h-5 d |
//! | `late-arrival` | 16 x 8 | m 64, l 64 | m ~154 (1.2x the cluster) days 0-28, multi-day; l ~96 from day 7 to 28 | m: 4-16 GPUs, 1-5 d; l: 1-16 GPUs, 1-48 h |
//! | `fragmented` | 16 x 8 | w 64, n 64 | w ~77 in 2-4-node jobs, n ~128 in 1-2-GPU jobs, days 0-21: 1.6x | w: 16-32 GPUs, 4-48 h; n: 1-2 GPUs, 1-12 h |
//! | `many-teams` | 16 x 8 | a 40, b 24, c 24, d 16, e 16, f 8 | a 60, b 48, c 36, d 32, f 24 days 0-21; e 48 days 7-21: 1.9x | c: 1-16 GPUs, 6 h-3 d; e: 1-16 GPUs, 1-24 h; the others 1-16 GPUs, 1-48 h |
//! | `late-whole-node` | 16 x 8 | m 64, l 64 | m ~154 (1.2x) days 0-28 in whole nodes; l ~96 days 7-28 | m: 8-16 GPUs, 2-5 d; l: 1-16 GPUs, 1-48 h |
//! | `late-whole-node-b` | 16 x 8 | m 32, l 96 | m ~154 days 0-28 in whole nodes; l ~128 days 10-28 | m: 8-16 GPUs, 3-7 d; l: 1-16 GPUs, 1-48 h |
//! | `late-wide` | 16 x 8 | a 40, b 40, l 48 | a, b ~77 each (1.2x) days 0-28; l ~64 days 7-28 | a, b: 1-4 GPUs, 1-3 d; l: 8-16 GPUs, 4-48 h |
//! | `late-wide-b` | 16 x 8 | a 32, b 32, l 64 | a, b ~77 each days 0-28; l ~90 days 7-28 | a, b: 1-2 GPUs, 1-3 d; l: 16-32 GPUs, 4-48 h |
//! | `over-holds` | 16 x 8 | o 1, l 127 | o ~192 (1.5x) days 0-28; l ~96 days 7-28 | o: 1-16 GPUs, 6 h-3 d; l: 1-16 GPUs, 1-48 h |
//! | `over-holds-b` | 16 x 8 | o 1, l 127 | o ~192 days 0-28, min_runtime 45 s; l ~96 days 7-28 | o: 1-16 GPUs, 5-30 min; l: 1-8 GPUs, 1-12 h |
//!
//! Sizes (GPUs, weight): overload and `l` 1:0.3, 2:0.2, 4:0.2, 8:0.2, 16:0.1;
//! multiday 1:0.2, 2:0.2, 4:0.2, 8:0.25, 16:0.15; `m` 4:0.3, 8:0.4, 16:0.3;
//! `w` 16:0.6, 32:0.4; `n` 1:0.6, 2:0.4 (n offers ~128: 1.0 of the cluster).
//!
//! `fragmented` is adversarial (not derived from a trace): a team whose every job needs whole nodes shares the cluster with a
//! team flooding it with one- and two-GPU jobs. Free GPUs then come back one
//! at a time on many nodes, so the wide team's entitlement depends on the
//! backfill reservation holding nodes for it (`--backfill nodes`) and on
//! whether the rule can free whole nodes by taking small jobs.
//!
//! `many-teams` (the case for the projected tier) is adversarial too:
//! six teams whose entitlements differ fivefold, each asking for 1.5-3 times
//! its allocation, one of them arriving in the second week, with the same job
//! sizes for all (team f, entitled to 8 GPUs, submits 16-GPU jobs). Jobs are
//! lumpy against the small entitlements, so a ranking that serves whichever
//! team is furthest below its entitlement by *share* lets the small teams
//! overshoot and puts the difference on the large one: the scenarios with two
//! or three teams could not show it.
//!
//! The three `late-*`/`over-holds` shapes (and a variant of each) are the
//! late-arrival cases the weekly guarantee must survive: a late team `l`
//! arrives to a cluster that the other teams already fill, with whole-node
//! multi-day jobs (`late-whole-node`), with small multi-day jobs that leave no
//! whole node free for the late team's 8-16 GPU jobs (`late-wide`), or with
//! the jobs of a team far over its budget (`over-holds`; its variant is the
//! testbed case: 30-minute jobs with a 45-second min_runtime). The late team's
//! worst 7-day window is the figure these are for.
//! Lengths are log-uniform in the range given. Four users per team.

use std::collections::BTreeMap;

use crate::rng::{Purpose, Stream, splitmix64};
use crate::trace::JobSpec;

/// The generated scenarios.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ScenarioName {
    /// Three teams each offering 0.8 of the cluster for three weeks.
    Overload,
    /// Two teams with multi-day jobs, 1.6x supply for four weeks.
    Multiday,
    /// A team arrives on day 7 to a cluster full of another team's multi-day jobs.
    LateArrival,
    /// Whole-node jobs of one team against a flood of 1-2 GPU jobs of another.
    Fragmented,
    /// Six teams of unequal size, each asking for 1.5-3x its allocation.
    ManyTeams,
    /// A team arrives on day 7 to a cluster full of another team's multi-day whole-node jobs.
    LateWholeNode,
    /// As late-whole-node, the late team entitled to 3/4, arriving on day 10, against 3-7 day jobs.
    LateWholeNodeB,
    /// A team with 8-16 GPU jobs arrives on day 7 to a cluster full of 1-4 GPU multi-day jobs.
    LateWide,
    /// As late-wide, with 16-32 GPU (multi-node) late jobs against 1-2 GPU jobs.
    LateWideB,
    /// A team arrives on day 7 to a cluster held by a team far over its budget.
    OverHolds,
    /// As over-holds, the holding team's jobs 5-30 minutes with a 45-second min_runtime.
    OverHoldsB,
}

/// A generated workload with its cluster and allocations.
#[derive(Debug, Clone)]
pub struct Scenario {
    pub jobs: Vec<JobSpec>,
    pub shares: BTreeMap<String, f64>,
    pub nodes: u32,
    pub gpus_per_node: u32,
    pub description: String,
}

/// One team's stream of submissions.
struct TeamStream {
    team: &'static str,
    allocation: f64,
    /// Mean busy GPUs the stream offers.
    offered: f64,
    from_day: f64,
    to_day: f64,
    sizes: &'static [(u32, f64)],
    /// Job length range in hours (log-uniform).
    hours: (f64, f64),
    /// Declared min_runtime in seconds (None: `--min-runtime-rule` decides).
    min_runtime: Option<i64>,
}

impl TeamStream {
    fn new(
        team: &'static str,
        allocation: f64,
        offered: f64,
        (from_day, to_day): (f64, f64),
        sizes: &'static [(u32, f64)],
        hours: (f64, f64),
    ) -> Self {
        TeamStream {
            team,
            allocation,
            offered,
            from_day,
            to_day,
            sizes,
            hours,
            min_runtime: None,
        }
    }
}

const MIXED: &[(u32, f64)] = &[(1, 0.3), (2, 0.2), (4, 0.2), (8, 0.2), (16, 0.1)];
const MULTIDAY: &[(u32, f64)] = &[(1, 0.2), (2, 0.2), (4, 0.2), (8, 0.25), (16, 0.15)];
const LARGE: &[(u32, f64)] = &[(4, 0.3), (8, 0.4), (16, 0.3)];
const WIDE: &[(u32, f64)] = &[(16, 0.6), (32, 0.4)];
const NARROW: &[(u32, f64)] = &[(1, 0.6), (2, 0.4)];
const WHOLE: &[(u32, f64)] = &[(8, 0.6), (16, 0.4)];
const SMALL: &[(u32, f64)] = &[(1, 0.4), (2, 0.3), (4, 0.3)];
const UP_TO_8: &[(u32, f64)] = &[(1, 0.3), (2, 0.3), (4, 0.2), (8, 0.2)];
const USERS: u32 = 4;

impl ScenarioName {
    pub fn name(self) -> &'static str {
        match self {
            ScenarioName::Overload => "overload",
            ScenarioName::Multiday => "multiday",
            ScenarioName::LateArrival => "late-arrival",
            ScenarioName::Fragmented => "fragmented",
            ScenarioName::ManyTeams => "many-teams",
            ScenarioName::LateWholeNode => "late-whole-node",
            ScenarioName::LateWholeNodeB => "late-whole-node-b",
            ScenarioName::LateWide => "late-wide",
            ScenarioName::LateWideB => "late-wide-b",
            ScenarioName::OverHolds => "over-holds",
            ScenarioName::OverHoldsB => "over-holds-b",
        }
    }

    /// Every generated scenario, in the order of the table above.
    pub const ALL: [ScenarioName; 11] = [
        ScenarioName::Overload,
        ScenarioName::Multiday,
        ScenarioName::LateArrival,
        ScenarioName::Fragmented,
        ScenarioName::ManyTeams,
        ScenarioName::LateWholeNode,
        ScenarioName::LateWholeNodeB,
        ScenarioName::LateWide,
        ScenarioName::LateWideB,
        ScenarioName::OverHolds,
        ScenarioName::OverHoldsB,
    ];

    /// The team that arrives late and the day it arrives, if the scenario has one.
    pub fn late_team(self) -> Option<(&'static str, f64)> {
        match self {
            ScenarioName::LateArrival
            | ScenarioName::LateWholeNode
            | ScenarioName::LateWide
            | ScenarioName::LateWideB
            | ScenarioName::OverHolds
            | ScenarioName::OverHoldsB => Some(("l", 7.0)),
            ScenarioName::LateWholeNodeB => Some(("l", 10.0)),
            ScenarioName::ManyTeams => Some(("e", 7.0)),
            _ => None,
        }
    }

    fn streams(self) -> Vec<TeamStream> {
        let cluster = 128.0;
        match self {
            ScenarioName::Overload => [("a", 64.0), ("b", 32.0), ("c", 32.0)]
                .into_iter()
                .map(|(team, allocation)| TeamStream {
                    team,
                    allocation,
                    offered: 0.8 * cluster,
                    from_day: 0.0,
                    to_day: 21.0,
                    sizes: MIXED,
                    hours: (1.0, 48.0),
                    min_runtime: None,
                })
                .collect(),
            ScenarioName::Multiday => ["a", "b"]
                .into_iter()
                .map(|team| TeamStream {
                    team,
                    allocation: 64.0,
                    offered: 0.8 * cluster,
                    from_day: 0.0,
                    to_day: 28.0,
                    sizes: MULTIDAY,
                    hours: (12.0, 120.0),
                    min_runtime: None,
                })
                .collect(),
            ScenarioName::LateArrival => vec![
                TeamStream {
                    team: "m",
                    allocation: 64.0,
                    offered: 1.2 * cluster,
                    from_day: 0.0,
                    to_day: 28.0,
                    sizes: LARGE,
                    hours: (24.0, 120.0),
                    min_runtime: None,
                },
                TeamStream {
                    team: "l",
                    allocation: 64.0,
                    offered: 0.75 * cluster,
                    from_day: 7.0,
                    to_day: 28.0,
                    sizes: MIXED,
                    hours: (1.0, 48.0),
                    min_runtime: None,
                },
            ],
            ScenarioName::Fragmented => vec![
                TeamStream {
                    team: "w",
                    allocation: 64.0,
                    offered: 0.6 * cluster,
                    from_day: 0.0,
                    to_day: 21.0,
                    sizes: WIDE,
                    hours: (4.0, 48.0),
                    min_runtime: None,
                },
                TeamStream {
                    team: "n",
                    allocation: 64.0,
                    offered: 1.0 * cluster,
                    from_day: 0.0,
                    to_day: 21.0,
                    sizes: NARROW,
                    hours: (1.0, 12.0),
                    min_runtime: None,
                },
            ],
            // (team, allocation, offered busy GPUs, first day, sizes, hours)
            ScenarioName::ManyTeams => [
                ("a", 40.0, 60.0, 0.0, MIXED, (1.0, 48.0)),
                ("b", 24.0, 48.0, 0.0, MIXED, (1.0, 48.0)),
                ("c", 24.0, 36.0, 0.0, MULTIDAY, (6.0, 72.0)),
                ("d", 16.0, 32.0, 0.0, MIXED, (1.0, 48.0)),
                ("e", 16.0, 48.0, 7.0, MIXED, (1.0, 24.0)),
                ("f", 8.0, 24.0, 0.0, MIXED, (1.0, 48.0)),
            ]
            .into_iter()
            .map(
                |(team, allocation, offered, from_day, sizes, hours)| TeamStream {
                    team,
                    allocation,
                    offered,
                    from_day,
                    to_day: 21.0,
                    sizes,
                    hours,
                    min_runtime: None,
                },
            )
            .collect(),
            ScenarioName::LateWholeNode => vec![
                TeamStream::new("m", 64.0, 1.2 * cluster, (0.0, 28.0), WHOLE, (48.0, 120.0)),
                TeamStream::new("l", 64.0, 0.75 * cluster, (7.0, 28.0), MIXED, (1.0, 48.0)),
            ],
            ScenarioName::LateWholeNodeB => vec![
                TeamStream::new("m", 32.0, 1.2 * cluster, (0.0, 28.0), WHOLE, (72.0, 168.0)),
                TeamStream::new("l", 96.0, 1.0 * cluster, (10.0, 28.0), MIXED, (1.0, 48.0)),
            ],
            ScenarioName::LateWide => vec![
                TeamStream::new("a", 40.0, 0.6 * cluster, (0.0, 28.0), SMALL, (24.0, 72.0)),
                TeamStream::new("b", 40.0, 0.6 * cluster, (0.0, 28.0), SMALL, (24.0, 72.0)),
                TeamStream::new("l", 48.0, 0.5 * cluster, (7.0, 28.0), WHOLE, (4.0, 48.0)),
            ],
            ScenarioName::LateWideB => vec![
                TeamStream::new("a", 32.0, 0.6 * cluster, (0.0, 28.0), NARROW, (24.0, 72.0)),
                TeamStream::new("b", 32.0, 0.6 * cluster, (0.0, 28.0), NARROW, (24.0, 72.0)),
                TeamStream::new("l", 64.0, 0.7 * cluster, (7.0, 28.0), WIDE, (4.0, 48.0)),
            ],
            ScenarioName::OverHolds => vec![
                TeamStream::new("o", 1.0, 1.5 * cluster, (0.0, 28.0), MIXED, (6.0, 72.0)),
                TeamStream::new("l", 127.0, 0.75 * cluster, (7.0, 28.0), MIXED, (1.0, 48.0)),
            ],
            ScenarioName::OverHoldsB => vec![
                TeamStream {
                    min_runtime: Some(45),
                    ..TeamStream::new(
                        "o",
                        1.0,
                        1.5 * cluster,
                        (0.0, 28.0),
                        MIXED,
                        (5.0 / 60.0, 0.5),
                    )
                },
                TeamStream::new(
                    "l",
                    127.0,
                    0.75 * cluster,
                    (7.0, 28.0),
                    UP_TO_8,
                    (1.0, 12.0),
                ),
            ],
        }
    }

    /// Generates the scenario for `seed`.
    pub fn generate(self, seed: u64) -> Scenario {
        let streams = self.streams();
        let mut jobs = Vec::new();
        let mut described = Vec::new();
        for (k, s) in streams.iter().enumerate() {
            let mut rng = Stream::new(splitmix64(seed ^ ((k as u64 + 1) << 32)), Purpose::Scenario);
            let weights: Vec<f64> = s.sizes.iter().map(|x| x.1).collect();
            let mean_gpus = s.sizes.iter().map(|x| f64::from(x.0) * x.1).sum::<f64>()
                / weights.iter().sum::<f64>();
            let (lo, hi) = s.hours;
            let mean_hours = (hi - lo) / (hi / lo).ln();
            // Poisson arrivals: offered busy GPUs = rate x E[GPUs] x E[length].
            let mean_gap = mean_gpus * mean_hours * 3600.0 / s.offered;
            let (start, end) = (s.from_day * 86_400.0, s.to_day * 86_400.0);
            let mut t = start + rng.exp(mean_gap);
            let mut n = 0;
            while t < end {
                let gpus = s.sizes[rng.pick(&weights)].0;
                let hours = rng.log_uniform(lo, hi);
                let user = (rng.unit() * f64::from(USERS)) as u32;
                jobs.push(JobSpec {
                    id: format!("{}{n}", s.team),
                    user: format!("{}u{user}", s.team),
                    team: s.team.to_string(),
                    submit: t as i64,
                    gpus,
                    duration: (hours * 3600.0).round() as i64,
                    min_runtime: s.min_runtime,
                    free: false,
                    checkpoint: None,
                    limit: None,
                });
                n += 1;
                t += rng.exp(mean_gap);
            }
            described.push(format!(
                "{} (allocation {} GPUs) offers ~{:.0} busy GPUs from day {} to {}: {n} jobs",
                s.team, s.allocation, s.offered, s.from_day, s.to_day
            ));
        }
        // Stable: equal submit times keep generation order.
        jobs.sort_by_key(|j| j.submit);
        if let Some(t0) = jobs.first().map(|j| j.submit) {
            for j in &mut jobs {
                j.submit -= t0;
            }
        }
        Scenario {
            jobs,
            shares: streams
                .iter()
                .map(|s| (s.team.to_string(), s.allocation))
                .collect(),
            nodes: 16,
            gpus_per_node: 8,
            description: format!(
                "scenario {} (seed {seed}, generated): {}",
                self.name(),
                described.join("; ")
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenarios_are_seeded_and_offer_what_they_say() {
        for name in ScenarioName::ALL {
            let a = name.generate(1);
            let b = name.generate(1);
            assert_eq!(a.jobs, b.jobs, "{name:?} is not deterministic");
            assert_ne!(a.jobs, name.generate(2).jobs, "{name:?} ignores the seed");
            for s in name.streams() {
                let work: f64 = a
                    .jobs
                    .iter()
                    .filter(|j| j.team == s.team)
                    .map(|j| j.duration as f64 * f64::from(j.gpus))
                    .sum();
                let offered = work / ((s.to_day - s.from_day) * 86_400.0);
                assert!(
                    (offered / s.offered - 1.0).abs() < 0.2,
                    "{name:?} {}: offers {offered:.1} GPUs, meant {}",
                    s.team,
                    s.offered
                );
                for j in a.jobs.iter().filter(|j| j.team == s.team) {
                    assert!(s.sizes.iter().any(|x| x.0 == j.gpus));
                    assert_eq!(j.min_runtime, s.min_runtime);
                }
            }
            assert!(a.jobs.windows(2).all(|w| w[0].submit <= w[1].submit));
            assert_eq!(a.jobs.first().map(|j| j.submit), Some(0));
        }
        // The late team submits nothing before day 7.
        let late = ScenarioName::LateArrival.generate(1);
        let first_l = late.jobs.iter().find(|j| j.team == "l").map(|j| j.submit);
        let first_m = late.jobs.iter().find(|j| j.team == "m").map(|j| j.submit);
        assert!(first_l.unwrap_or(0) - first_m.unwrap_or(0) >= 7 * 86_400 - 86_400 / 2);
    }

    /// Each late-arrival shape has a late team that is entitled to something,
    /// submits nothing before its day, and finds the cluster full: the other
    /// teams offer at least the whole cluster until it arrives.
    #[test]
    fn late_shapes_have_a_late_team_and_a_full_cluster() {
        for name in ScenarioName::ALL {
            let Some((team, day)) = name.late_team() else {
                continue;
            };
            for seed in [1, 2, 3] {
                let sc = name.generate(seed);
                assert!(
                    sc.shares[team] > 0.0,
                    "{name:?}: {team} entitled to nothing"
                );
                let t0 = sc.jobs.iter().map(|j| j.submit).min().unwrap_or(0);
                let arrival = sc
                    .jobs
                    .iter()
                    .filter(|j| j.team == team)
                    .map(|j| j.submit - t0)
                    .min()
                    .expect("the late team submits");
                let stream_start = name
                    .streams()
                    .iter()
                    .map(|s| s.from_day)
                    .fold(f64::INFINITY, f64::min);
                let due = ((day - stream_start) * 86_400.0) as i64;
                // Re-based to the first job of all, which may come hours after day 0.
                assert!(
                    arrival >= due - 2 * 86_400,
                    "{name:?} seed {seed}: {team} came at {arrival} s"
                );
                let capacity = f64::from(sc.nodes * sc.gpus_per_node);
                // GPU-seconds the others submitted before the late team came,
                // counted up to its arrival, per second of that time.
                let held: f64 = sc
                    .jobs
                    .iter()
                    .filter(|j| j.team != team && j.submit - t0 < arrival)
                    .map(|j| f64::from(j.gpus) * (j.duration.min(arrival - (j.submit - t0))) as f64)
                    .sum::<f64>()
                    / arrival as f64;
                // Half the jobs are still running at the arrival: the backlog
                // offered by then must at least cover half the cluster, and the
                // rate offered must exceed the cluster.
                assert!(
                    held >= 0.5 * capacity,
                    "{name:?} seed {seed}: others held {held:.0} GPUs on average"
                );
                let rate: f64 = name
                    .streams()
                    .iter()
                    .filter(|s| s.team != team)
                    .map(|s| s.offered)
                    .sum();
                assert!(
                    rate >= capacity,
                    "{name:?}: others offer {rate} < {capacity}"
                );
            }
        }
    }
}
