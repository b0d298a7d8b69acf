//! The rule in words for logs and `budgetctl why`: why a pending job waits
//! ([`explain_wait`], [`describe_wait`]), an allowed rebalancing ([`describe`])
//! and a refusal ([`denied_words`]), with amounts as text.

use serde::{Deserialize, Serialize};

use super::inflight::InFlight;
use super::jobs::{PendingJob, RunningJob};
use super::judge::{Allowed, Clause, Denied, Rebalance, decide, victim_priority};
use super::state::{PreemptState, node_name};
use crate::fairshare::FairShare;
use crate::protection::protected_until;

/// Weighted GPUs in words: a whole number without decimals, else up to two.
pub fn gpus_text(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{x:.0}")
    } else {
        let s = format!("{x:.2}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The unit of amounts in messages: "GPUs", or "weighted GPUs" when some
/// job's GPUs weigh other than 1.
pub(super) fn unit(weighted: bool) -> &'static str {
    if weighted { "weighted GPUs" } else { "GPUs" }
}

/// Node names of an allowed rebalancing, for logs and `budgetctl why`
/// (amounts in weighted GPUs, named so when some job's GPUs weigh other than 1).
pub fn describe(fs: &FairShare, r: &Rebalance) -> String {
    format!(
        "{} below {}: {} short of {:.1} {} ({:.1} not covered by turnover), {} holds {} of {:.1} entitled; victim loses {:.1} GPU-h",
        match r.clause {
            Clause::Entitlement => "rebalance",
            Clause::OverBudget => "over budget",
        },
        node_name(fs, r.parent),
        node_name(fs, r.preemptor_side),
        r.deficit,
        unit(r.weighted),
        r.uncovered,
        node_name(fs, r.victim_side),
        gpus_text(r.victim_side_held),
        r.victim_side_entitled,
        r.victim_lost_gpu_secs / crate::HOUR as f64,
    )
}

/// Why a pending job waits, in the rule's terms (`budgetctl why`): what
/// [`decide`] says about every running job, summed up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum Wait {
    /// The rule allows taking `victim` now; among the allowed, Slurm's order
    /// ([`victim_priority`]) puts it first: free tier, else least work lost.
    Preempting {
        victim: u32,
        /// When its protected window ended.
        window_ended: i64,
        allowed: Allowed,
    },
    /// Turnover covers the side's deficit: GPUs of jobs above their side's
    /// entitlement come free at their time limits, the last needed at `at`.
    Turnover {
        side: usize,
        at: Option<i64>,
        jobs: Vec<u32>,
        /// Weighted GPUs.
        deficit: f64,
        /// Weighted GPUs already being freed for the side.
        in_flight: f64,
        /// Some job's GPUs weigh other than 1.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        weighted: bool,
    },
    /// No preemption, for the reason the rule gave about the running job
    /// Slurm would have asked about first (`None` when nothing runs).
    Refused {
        victim: Option<u32>,
        denied: Option<Denied>,
    },
}

/// Explains a pending job's wait with [`decide`] against each running job.
pub fn explain_wait(
    state: &PreemptState,
    fs: Option<&FairShare>,
    in_flight: &InFlight,
    p: &PendingJob<'_>,
    running: &[RunningJob<'_>],
    now: i64,
) -> Wait {
    let mut best: Option<(u32, &RunningJob<'_>, Allowed)> = None;
    let mut refused: Option<(u32, &RunningJob<'_>, Denied)> = None;
    let mut turnover = false;
    for v in running {
        let order = victim_priority(fs, v, now);
        match decide(state, fs, in_flight, p, v, now) {
            Ok(a) => {
                if best
                    .as_ref()
                    .is_none_or(|b| (order, v.job_id) < (b.0, b.1.job_id))
                {
                    best = Some((order, v, a));
                }
            }
            Err(d) => {
                // Turnover delivers the side's time, or delivers it soon enough
                // that taking this job would cost more than it buys.
                turnover |= matches!(
                    d,
                    Denied::TurnoverSuffices { .. } | Denied::NotWorthIt { .. }
                );
                // The most informative refusal: a job past its window before a
                // protected one, a protected one (taken perhaps at its window's
                // end) before one of a `PreemptMode=OFF` partition (never
                // taken), then Slurm's order.
                let key = (refusal_rank(&d), order, v.job_id);
                if refused
                    .as_ref()
                    .is_none_or(|r| key < (refusal_rank(&r.2), r.0, r.1.job_id))
                {
                    refused = Some((order, v, d));
                }
            }
        }
    }
    if let Some((_, v, allowed)) = best {
        return Wait::Preempting {
            victim: v.job_id,
            window_ended: protected_until(v.run_start, v.min_runtime),
            allowed,
        };
    }
    if turnover && let Some(fs) = fs {
        // The highest side on the job's path the forecast covers.
        if let Some(place) = fs.place(p.account, p.user) {
            for side in fs.path(place.node).into_iter().skip(1) {
                let rel = state.releases(fs, side);
                if let Some(s) = state.side(fs, side).filter(|_| !rel.is_empty()) {
                    return Wait::Turnover {
                        side,
                        at: rel.last().map(|r| r.at),
                        jobs: rel.iter().map(|r| r.job_id).collect(),
                        deficit: s.deficit,
                        in_flight: in_flight.gpus_under(side, p.job_id),
                        weighted: state.weighted,
                    };
                }
            }
        }
    }
    match refused {
        Some((_, v, d)) => Wait::Refused {
            victim: Some(v.job_id),
            denied: Some(d),
        },
        None => Wait::Refused {
            victim: None,
            denied: None,
        },
    }
}

/// How little a refusal tells about a wait (lower: more), for choosing the
/// refusal [`explain_wait`] reports.
fn refusal_rank(d: &Denied) -> u8 {
    match d {
        Denied::PartitionPreemptOff { .. } => 2,
        Denied::Protected { .. } => 1,
        _ => 0,
    }
}

/// A Unix time as `YYYY-MM-DD HH:MM:SS UTC` (no time zone database in the core).
pub fn utc(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    // Civil from days (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// [`Wait`] in words, with [`describe`] for an allowed rebalancing:
/// "GPUs expected free at T from jobs A, B; no preemption needed" or
/// "preempting job C: its window ended, least work lost".
pub fn describe_wait(fs: Option<&FairShare>, w: &Wait, now: i64) -> String {
    describe_wait_shown(fs, w, now, &|_| true)
}

/// [`describe_wait`] for a reader who may see only some jobs: a job `shown`
/// refuses is named as one of another account, never by its id, so the words
/// reveal no more than the job lists beside them (budgetd's `why` for a user).
pub fn describe_wait_shown(
    fs: Option<&FairShare>,
    w: &Wait,
    now: i64,
    shown: &dyn Fn(u32) -> bool,
) -> String {
    let job = |id: u32| {
        if shown(id) {
            format!("job {id}")
        } else {
            "a job of another account".to_string()
        }
    };
    let jobs = |j: &[u32]| {
        let ids: Vec<String> = j
            .iter()
            .filter(|&&id| shown(id))
            .map(u32::to_string)
            .collect();
        let hidden = j.len() - ids.len();
        let others = match hidden {
            1 => "1 job of another account".to_string(),
            n => format!("{n} jobs of other accounts"),
        };
        match (ids.is_empty(), hidden) {
            (false, 0) => format!("jobs {}", ids.join(", ")),
            (false, _) => format!("jobs {} and {others}", ids.join(", ")),
            (true, _) => others,
        }
    };
    match w {
        Wait::Preempting {
            victim,
            window_ended,
            allowed,
        } => {
            let ago = crate::format_duration(now - window_ended);
            match (allowed, fs) {
                (Allowed::VictimFreeTier, _) => {
                    format!("preempting {}: it runs in the free tier", job(*victim))
                }
                (a @ (Allowed::HigherPartitionTier { .. } | Allowed::QosPreemptList { .. }), _) => {
                    format!(
                        "preempting {}: its window ended {ago} ago; {}",
                        job(*victim),
                        allowed_words(a)
                    )
                }
                (Allowed::Rebalance(r), Some(fs)) => format!(
                    "preempting {}: its window ended {ago} ago, least work lost ({:.2} GPU-h); {}",
                    job(*victim),
                    r.victim_lost_gpu_secs / crate::HOUR as f64,
                    describe(fs, r)
                ),
                (Allowed::Rebalance(r), None) => format!(
                    "preempting {}: its window ended {ago} ago, least work lost ({:.2} GPU-h)",
                    job(*victim),
                    r.victim_lost_gpu_secs / crate::HOUR as f64
                ),
            }
        }
        Wait::Turnover {
            side,
            at,
            jobs: j,
            deficit,
            in_flight,
            weighted,
        } => {
            let name = fs.map(|fs| node_name(fs, *side)).unwrap_or_default();
            let when = match at {
                Some(t) => format!(
                    "at {} (in {})",
                    utc(*t),
                    crate::format_duration((t - now).max(0))
                ),
                None => "soon".into(),
            };
            let u = unit(*weighted);
            let mut o = format!(
                "GPUs expected free {when} from {}; no preemption needed ({name} short of {deficit:.1} {u}, covered by their time limits",
                jobs(j)
            );
            if *in_flight > 0.0 {
                o.push_str(&format!(
                    ", {} {u} already being freed for it",
                    gpus_text(*in_flight)
                ));
            }
            o.push(')');
            o
        }
        Wait::Refused {
            victim: None,
            denied: _,
        } => "no running job to preempt; waiting for free GPUs".into(),
        Wait::Refused {
            victim: Some(v),
            denied,
        } => format!(
            "no preemption: {} (first in Slurm's order) {}",
            job(*v),
            denied
                .as_ref()
                .map_or_else(String::new, |d| denied_words(fs, d, now))
        ),
    }
}

/// Why a preemption is allowed, in words, for the clauses that need no
/// tree to name (the partition order, the QOS order and the free tier); a rebalancing is
/// [`describe`]d.
pub fn allowed_words(a: &Allowed) -> String {
    match a {
        Allowed::VictimFreeTier => "it runs in the free tier".into(),
        Allowed::HigherPartitionTier {
            preemptor_tier,
            victim_tier,
        } => format!(
            "the partition order wins: PriorityTier {preemptor_tier} above the victim's {victim_tier}, and its window is over, so the budgets are not asked"
        ),
        Allowed::QosPreemptList {
            preemptor_qos,
            victim_qos,
        } => format!(
            "the QOS order wins: QOS {preemptor_qos} lists the victim's QOS {victim_qos} in its Preempt=, and its window is over, so the budgets are not asked"
        ),
        Allowed::Rebalance(_) => "the budgets rebalance it".into(),
    }
}

/// A refusal in words.
pub fn denied_words(_fs: Option<&FairShare>, d: &Denied, now: i64) -> String {
    let h = |s: f64| s / crate::HOUR as f64;
    match d {
        Denied::PartitionPreemptOff { partition } => format!(
            "cannot be taken: partition {partition} has PreemptMode=OFF (the site's setting: its jobs are never preempted, whatever the budgets or partition tiers say)"
        ),
        Denied::Protected { until } => format!(
            "is protected until {} (in {})",
            utc(*until),
            crate::format_duration((until - now).max(0))
        ),
        Denied::PreemptorFree => "cannot be taken: free-tier jobs never preempt".into(),
        Denied::LowerPartitionTier {
            preemptor_tier,
            victim_tier,
        } => format!(
            "cannot be taken: the partition order wins, its partition's PriorityTier {victim_tier} is above this job's {preemptor_tier} (a lower tier never preempts a higher one, whatever the budgets say)"
        ),
        Denied::LowerQos {
            preemptor_qos,
            victim_qos,
        } => format!(
            "cannot be taken: the QOS order wins, its QOS {victim_qos} lists this job's QOS {preemptor_qos} in its Preempt= (a QOS never preempts one that may preempt it, whatever the budgets say)"
        ),
        Denied::SafeMode => {
            "cannot be taken: no fresh fair-share snapshot (safe mode), only free-tier jobs yield"
                .into()
        }
        Denied::StaleState => "cannot be taken yet: the state is being recomputed".into(),
        Denied::UnknownAccount { account } => {
            format!("cannot be taken: account {account} is not in the tree")
        }
        Denied::PreemptorNotBudgeted { tier } => format!(
            "cannot be taken: only budgeted jobs take others, this one is {}",
            tier.words()
        ),
        Denied::SameSide => "cannot be taken: it belongs to the same side".into(),
        Denied::WithinAccount { account } => format!(
            "cannot be taken: both jobs are within account {account}, and GPUs are rebalanced only between accounts"
        ),
        Denied::RatioGapTooSmall {
            preemptor_ratio,
            victim_ratio,
            hysteresis,
        } => format!(
            "cannot be taken: usage ratios {preemptor_ratio:.3} vs {victim_ratio:.3} differ by less than the hysteresis {hysteresis}"
        ),
        Denied::VictimSideWithinEntitlement {
            held,
            entitled,
            weighted,
            ..
        } => format!(
            "cannot be taken: its side holds {} {} of {entitled:.1} entitled",
            gpus_text(*held),
            unit(*weighted)
        ),
        Denied::TurnoverSuffices {
            deficit, weighted, ..
        } => format!(
            "need not be taken: turnover covers the {deficit:.1} {} short",
            unit(*weighted)
        ),
        Denied::RecentReverse { at } => format!(
            "cannot be taken: its side was preempted by this side at {} (no back-and-forth within a window)",
            utc(*at)
        ),
        Denied::RequeueCap { requeues, max } => {
            format!("cannot be taken: requeued {requeues} times (cap {max})")
        }
        Denied::LostBudget {
            spent_gpu_secs,
            budget_gpu_secs,
            victim_lost_gpu_secs,
            weighted,
        } => {
            let u = if *weighted { "weighted GPU-h" } else { "GPU-h" };
            format!(
                "cannot be taken: losing {:.2} {u} would pass the side's lost-work budget ({:.2} of {:.2} {u} spent)",
                h(*victim_lost_gpu_secs),
                h(*spent_gpu_secs),
                h(*budget_gpu_secs)
            )
        }
        Denied::NotWorthIt {
            benefit_gpu_secs,
            cost_gpu_secs,
            factor,
            weighted,
        } => {
            let u = if *weighted { "weighted GPU-h" } else { "GPU-h" };
            format!(
                "need not be taken: it would lose {:.2} {u} to deliver {:.2} entitled {u} sooner than turnover, less than {factor} times its loss",
                h(*cost_gpu_secs),
                h(*benefit_gpu_secs)
            )
        }
        Denied::SiteCap {
            preemptions,
            lost_gpu_hours,
        } => format!(
            "cannot be taken: the site cap is reached ({preemptions} rebalancing preemptions, {lost_gpu_hours:.2} GPU-h lost in the window)"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn waits_are_explained_in_the_rules_terms() {
        let now = 2 * H;
        let p = pend(9, "a", "ua", 4);
        // Turnover: b's runs end at their 5 h time limits.
        let (fs, running) = starved(5 * H);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let w = explain_wait(&st, Some(&fs), &InFlight::default(), &p, &running, now);
        assert!(
            matches!(&w, Wait::Turnover { at: Some(t), jobs, .. } if *t == 5 * H && jobs == &[2]),
            "{w:?}"
        );
        assert_eq!(
            describe_wait(Some(&fs), &w, now),
            "GPUs expected free at 1970-01-01 05:00:00 UTC (in 3h) from jobs 2; no preemption needed (a short of 4.0 GPUs, covered by their time limits)"
        );
        // A reader who may not see job 2 reads no id.
        assert_eq!(
            describe_wait_shown(Some(&fs), &w, now, &|id| id != 2),
            "GPUs expected free at 1970-01-01 05:00:00 UTC (in 3h) from 1 job of another account; no preemption needed (a short of 4.0 GPUs, covered by their time limits)"
        );
        let several = Wait::Turnover {
            side: 0,
            at: None,
            jobs: vec![2, 3, 5],
            deficit: 1.0,
            in_flight: 0.0,
            weighted: false,
        };
        let text = describe_wait_shown(Some(&fs), &several, now, &|id| id == 3);
        assert!(
            text.contains("from jobs 3 and 2 jobs of other accounts;"),
            "{text}"
        );
        let text = describe_wait_shown(Some(&fs), &several, now, &|_| false);
        assert!(text.contains("from 3 jobs of other accounts;"), "{text}");
        // Multi-day runs: preempt the one that loses least (the youngest).
        let (fs, mut running) = starved(48 * H);
        running[3].run_start = H;
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let w = explain_wait(&st, Some(&fs), &InFlight::default(), &p, &running, now);
        assert!(matches!(w, Wait::Preempting { victim: 4, .. }), "{w:?}");
        let text = describe_wait(Some(&fs), &w, now);
        assert!(
            text.starts_with("preempting job 4: its window ended 0s ago, least work lost (4.00 GPU-h); rebalance below"),
            "{text}"
        );
        let text = describe_wait_shown(Some(&fs), &w, now, &|id| id != 4);
        assert!(
            text.starts_with("preempting a job of another account: its window ended"),
            "{text}"
        );
        // Nothing to take.
        let w = explain_wait(&st, Some(&fs), &InFlight::default(), &p, &[], now);
        assert_eq!(
            describe_wait(Some(&fs), &w, now),
            "no running job to preempt; waiting for free GPUs"
        );
        assert_eq!(utc(1_767_225_600 + 3661), "2026-01-01 01:01:01 UTC");
    }

    #[test]
    fn a_refusal_names_the_tier_in_words() {
        let d = Denied::PreemptorNotBudgeted {
            tier: crate::Tier::OverBudget,
        };
        assert_eq!(
            denied_words(None, &d, 0),
            "cannot be taken: only budgeted jobs take others, this one is over budget"
        );
    }
}
