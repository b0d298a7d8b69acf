//! Judging one pair (the callback): [`decide`] runs the side-level checks
//! ([`judge_sides`]) and the victim-level ones ([`judge_victim`]), and answers
//! [`Allowed`] or [`Denied`]; [`victim_priority`] orders Slurm's candidates.

use serde::{Deserialize, Serialize};

use super::inflight::InFlight;
use super::jobs::{
    PendingJob, QosView, RunningJob, expected_lost_gpu_secs, tidy, weighted_lost_gpu_secs,
};
use super::state::{PreemptState, node_name, shortfall, split_at};
use crate::fairshare::{FairShare, NodeKind, Tier};
use crate::protection::{is_protected, protected_until};

/// Which clause allowed a rebalancing preemption.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Clause {
    /// The victim's side stays at or above its entitlement without it.
    Entitlement,
    /// The victim's path is over budget by more than the band.
    OverBudget,
}

/// A rebalancing preemption that is allowed, with the figures behind it (node
/// indices into [`FairShare::nodes`]; [`node_name`] prints them).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Rebalance {
    pub clause: Clause,
    pub parent: usize,
    pub preemptor_side: usize,
    pub victim_side: usize,
    pub preemptor_ratio: f64,
    pub victim_ratio: f64,
    /// Weighted GPUs the preemptor's side is short of `min(entitled, demand)`.
    pub deficit: f64,
    /// Weighted GPUs of that deficit turnover will not cover in time.
    pub uncovered: f64,
    /// Weighted GPUs already granted to other preemptors of the side in this period.
    pub in_flight: f64,
    /// Weighted GPUs the victim's side holds.
    pub victim_side_held: f64,
    pub victim_side_entitled: f64,
    /// Work the victim loses (GPU-seconds).
    pub victim_lost_gpu_secs: f64,
    /// Some job's GPUs weigh other than 1 ([`describe`](super::describe) says "weighted GPUs").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub weighted: bool,
}

/// Why a preemption is allowed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Allowed {
    VictimFreeTier,
    Rebalance(Rebalance),
    /// The site's partition order: the preemptor's partition has a higher
    /// `PriorityTier` than the victim's, and the victim is past its protected
    /// window, so it is taken as `preempt/partition_prio` would take it,
    /// whatever the budgets say.
    HigherPartitionTier {
        preemptor_tier: u16,
        victim_tier: u16,
    },
    /// The site's QOS order: the preemptor's QOS lists the victim's in its
    /// `Preempt=` (sacctmgr), and the victim is past its protected window, so
    /// it is taken as `preempt/qos` would take it, whatever the budgets say.
    QosPreemptList {
        preemptor_qos: String,
        victim_qos: String,
    },
}

/// Why a preemption is refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum Denied {
    /// The victim's partition has `PreemptMode=OFF`: the site said its jobs
    /// are never preempted, so nothing takes them, whoever asks (the budgets,
    /// a higher partition tier, a free-tier victim's preemptor), as
    /// `preempt/partition_prio` refuses them.
    PartitionPreemptOff { partition: String },
    /// The victim is inside its protected window.
    Protected { until: i64 },
    /// Free-tier jobs never preempt.
    PreemptorFree,
    /// The victim's partition has a higher `PriorityTier` than the
    /// preemptor's: the site's partition order forbids it, whatever the
    /// budgets say (`preempt/partition_prio` never lets a lower tier take a
    /// higher one).
    LowerPartitionTier {
        preemptor_tier: u16,
        victim_tier: u16,
    },
    /// The victim's QOS lists the preemptor's in its `Preempt=`: the
    /// preemptor's QOS is the site's lower class (a scavenger QOS), and the
    /// site's QOS order forbids it, whatever the budgets say (`preempt/qos`
    /// never lets a QOS take one that may preempt it; slurmdbd refuses
    /// loops).
    LowerQos {
        preemptor_qos: String,
        victim_qos: String,
    },
    /// Safe mode: no fresh fair-share snapshot, only free-tier jobs yield.
    SafeMode,
    /// The state was computed from another snapshot than the one given.
    StaleState,
    /// An account is not in the snapshot.
    UnknownAccount { account: String },
    /// Only budgeted jobs take non-free jobs.
    PreemptorNotBudgeted { tier: Tier },
    /// Same leaf, or one path contains the other.
    SameSide,
    /// The two jobs' paths split below one account into a user of it and
    /// another of its users or sub-accounts: rebalancing moves GPUs only
    /// between sibling accounts, never between users of one account
    /// (docs/design.md §6.1).
    WithinAccount { account: String },
    /// The priority order does not put the preemptor's side first by the hysteresis.
    RatioGapTooSmall {
        preemptor_ratio: f64,
        victim_ratio: f64,
        hysteresis: f64,
    },
    /// The victim's side does not hold more than its entitlement (by the
    /// victim's GPUs) and is not over budget by the band. Weighted GPUs.
    VictimSideWithinEntitlement {
        held: f64,
        entitled: f64,
        victim_gpus: f64,
        /// Some job's GPUs weigh other than 1.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        weighted: bool,
    },
    /// The preemptor's side gets what it is short of from turnover soon enough
    /// (or other preemptors of the side were already granted it). Weighted GPUs.
    TurnoverSuffices {
        deficit: f64,
        uncovered: f64,
        in_flight: f64,
        /// The first GPUs expected free for the side, if any.
        next_release: Option<i64>,
        /// Some job's GPUs weigh other than 1.
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        weighted: bool,
    },
    /// The victim's side took from the preemptor's side within the last window.
    RecentReverse { at: i64 },
    /// The victim has been requeued too often.
    RequeueCap { requeues: u32, max: u32 },
    /// The preemptor's side has spent its lost-work budget.
    LostBudget {
        /// All three in weighted GPU-seconds ([`weighted_lost_gpu_secs`]).
        spent_gpu_secs: f64,
        budget_gpu_secs: f64,
        victim_lost_gpu_secs: f64,
        /// Some job's GPUs weigh other than 1: the words say "weighted GPU-h".
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        weighted: bool,
    },
    /// What the victim's GPUs deliver to the preemptor's side sooner than
    /// turnover would is less than `factor` times the work it loses (weighted
    /// GPU-seconds).
    NotWorthIt {
        benefit_gpu_secs: f64,
        cost_gpu_secs: f64,
        factor: f64,
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        weighted: bool,
    },
    /// The site's cap on preemptions or lost GPU-hours per window is reached.
    SiteCap {
        preemptions: u32,
        lost_gpu_hours: f64,
    },
}

impl Denied {
    /// The variant's name (`"NotWorthIt"`, `"SameSide"`, ...): a stable key
    /// for counting refusals by reason (`budget-sim --count-refusals`) that
    /// does not depend on the derived `Debug` text.
    pub fn name(&self) -> &'static str {
        match self {
            Denied::PartitionPreemptOff { .. } => "PartitionPreemptOff",
            Denied::Protected { .. } => "Protected",
            Denied::PreemptorFree => "PreemptorFree",
            Denied::LowerPartitionTier { .. } => "LowerPartitionTier",
            Denied::LowerQos { .. } => "LowerQos",
            Denied::SafeMode => "SafeMode",
            Denied::StaleState => "StaleState",
            Denied::UnknownAccount { .. } => "UnknownAccount",
            Denied::PreemptorNotBudgeted { .. } => "PreemptorNotBudgeted",
            Denied::SameSide => "SameSide",
            Denied::WithinAccount { .. } => "WithinAccount",
            Denied::RatioGapTooSmall { .. } => "RatioGapTooSmall",
            Denied::VictimSideWithinEntitlement { .. } => "VictimSideWithinEntitlement",
            Denied::TurnoverSuffices { .. } => "TurnoverSuffices",
            Denied::RecentReverse { .. } => "RecentReverse",
            Denied::RequeueCap { .. } => "RequeueCap",
            Denied::LostBudget { .. } => "LostBudget",
            Denied::NotWorthIt { .. } => "NotWorthIt",
            Denied::SiteCap { .. } => "SiteCap",
        }
    }
}

/// A decision with its reason.
pub type Decision = Result<Allowed, Denied>;

/// The side-level part of a rebalancing decision: everything that depends only
/// on the two jobs' places, not on the victim's own run. The simulator and the
/// plugin may cache it per (preemptor, victim leaf); [`decide`] runs both parts.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SideVerdict {
    pub(super) parent: usize,
    pub(super) ps: usize,
    pub(super) vs: usize,
    pub(super) p_ratio: f64,
    pub(super) v_ratio: f64,
    /// The over-budget clause holds for the victim's path.
    pub(super) over_budget: bool,
    /// Weighted GPUs granted to other preemptors of the side.
    pub(super) in_flight: f64,
    pub(super) deficit: f64,
    pub(super) uncovered: f64,
    /// Weighted GPUs of the victim's side already allowed to other preemptions.
    pub(super) victims_in_flight: f64,
    /// Victims allowed and not yet in the record, with their lost GPU-seconds.
    pub(super) site_in_flight: (u32, f64),
}

/// Side-level checks for a budgeted preemptor `p` against a non-free victim
/// `v`, reading only the victim's account, user and leaf: the same verdict holds
/// for every running job of that leaf.
pub fn judge_sides(
    state: &PreemptState,
    fs: Option<&FairShare>,
    in_flight: &InFlight,
    p: &PendingJob<'_>,
    v: &RunningJob<'_>,
) -> Result<SideVerdict, Denied> {
    if p.free_tier {
        return Err(Denied::PreemptorFree);
    }
    let Some(fs) = fs else {
        return Err(Denied::SafeMode);
    };
    if !state.matches(fs) {
        return Err(if state.fair_share_at.is_none() {
            Denied::SafeMode
        } else {
            Denied::StaleState
        });
    }
    let node_of = |leaf: Option<usize>, account: &str, user: &str| match leaf {
        Some(n) if n < fs.nodes.len() => Ok(n),
        _ => fs
            .place(account, user)
            .map(|p| p.node)
            .ok_or_else(|| Denied::UnknownAccount {
                account: account.to_string(),
            }),
    };
    let pn = node_of(p.leaf, p.account, p.user)?;
    let vn = node_of(v.leaf, v.account, v.user)?;
    // A leaf's tier is its node's (members and non-members alike: FairShare::place).
    let (p_tier, v_tier) = (fs.nodes[pn].tier, fs.nodes[vn].tier);
    if p_tier != Tier::Budgeted {
        return Err(Denied::PreemptorNotBudgeted { tier: p_tier });
    }
    let (p_path, v_path) = (state.path(fs, pn), state.path(fs, vn));
    let k = split_at(&p_path, &v_path).ok_or(Denied::SameSide)?;
    let (parent, ps, vs) = (v_path[k - 1], p_path[k], v_path[k]);
    // The product's unit of entitlement is the account: users of one account
    // share its allocation, and a user's own ratio only orders the account's
    // queue. Rebalancing inside one account would requeue a colleague's run to
    // reorder that queue, work lost for no entitlement gained (Helios measured
    // exactly one such preemption and it cost the replay its makespan:
    // docs/simulator-results.md). So both sides must be accounts.
    if !matches!(fs.nodes[ps].kind, NodeKind::Account)
        || !matches!(fs.nodes[vs].kind, NodeKind::Account)
    {
        return Err(Denied::WithinAccount {
            account: node_name(fs, parent),
        });
    }
    let policy = &state.policy;
    if policy.reverse_lock
        && let Some(&at) = state.took_from.get(&(vs, ps))
    {
        return Err(Denied::RecentReverse { at });
    }
    let (p_ratio, v_ratio) = (fs.nodes[ps].ratio, fs.nodes[vs].ratio);
    let h = policy.hysteresis.max(0.0);
    // Written as ">=" so that a NaN ratio also refuses.
    if p_ratio >= v_ratio - h || p_ratio.is_nan() || v_ratio.is_nan() {
        return Err(Denied::RatioGapTooSmall {
            preemptor_ratio: p_ratio,
            victim_ratio: v_ratio,
            hysteresis: h,
        });
    }
    let over_budget = policy.over_budget_band.is_some_and(|band| {
        v_tier == Tier::OverBudget
            && v_path[k..]
                .iter()
                .filter(|&&i| fs.nodes[i].budget_bearing)
                .any(|&i| fs.nodes[i].ratio >= 1.0 + band.max(0.0))
    });
    let vside = &state.nodes[vs];
    let taken = in_flight.victim_gpus_under(vs, v.job_id);
    if !over_budget && tidy(vside.held - taken).max(0.0) <= vside.entitled {
        return Err(Denied::VictimSideWithinEntitlement {
            held: vside.held,
            entitled: vside.entitled,
            victim_gpus: 0.0,
            weighted: state.weighted,
        });
    }
    let pside = &state.nodes[ps];
    let granted = in_flight.gpus_under(ps, p.job_id);
    let uncovered = if pside.deficit <= 0.0 {
        0.0
    } else {
        // Computed here, where the snapshot is at hand: `judge_victim` reads
        // the releases for the benefit test.
        let forecast = state.forecast(fs);
        // With a benefit factor every GPU of the deficit may be preempted for,
        // each victim weighed on its own in `judge_victim`.
        if policy.benefit_factor.is_some() {
            pside.deficit
        } else {
            forecast.uncovered[ps]
        }
    };
    if uncovered <= 0.0 || granted >= uncovered {
        return Err(Denied::TurnoverSuffices {
            deficit: pside.deficit,
            uncovered,
            in_flight: granted,
            next_release: state.releases(fs, ps).first().map(|r| r.at),
            weighted: state.weighted,
        });
    }
    Ok(SideVerdict {
        parent,
        ps,
        vs,
        p_ratio,
        v_ratio,
        over_budget,
        in_flight: granted,
        deficit: pside.deficit,
        uncovered,
        victims_in_flight: taken,
        site_in_flight: in_flight.victims_total(v.job_id),
    })
}

/// Entitled GPU-seconds (weighted) that preempting `gpus` weighted GPUs now
/// delivers to the preemptor's side of `sides` sooner than the forecast's
/// releases would, over the next window: the part of the deficit not yet
/// granted to other preemptors that these GPUs cover, for as long as
/// turnover would have left it missing. 0 before [`judge_sides`] computed
/// the forecast.
fn benefit(state: &PreemptState, sides: &SideVerdict, gpus: f64, now: i64) -> f64 {
    let Some(f) = state.forecast.get() else {
        return 0.0;
    };
    let releases = f.releases.get(&sides.ps).map(Vec::as_slice).unwrap_or(&[]);
    let deficit = sides.deficit;
    let short = |x: f64| shortfall(deficit - x, releases, now, now + state.window);
    let from = sides.in_flight.min(deficit);
    let to = (sides.in_flight + gpus).min(deficit);
    (short(from) - short(to)).max(0.0)
}

/// [`Denied::PartitionPreemptOff`] when `v` runs in a partition with
/// `PreemptMode=OFF`.
fn never_preempted(v: &RunningJob<'_>) -> Result<(), Denied> {
    match v.partition_preempt_off {
        Some(partition) => Err(Denied::PartitionPreemptOff {
            partition: partition.to_string(),
        }),
        None => Ok(()),
    }
}

/// Victim-level checks, after [`judge_sides`] allowed the pair of sides.
pub fn judge_victim(
    state: &PreemptState,
    sides: &SideVerdict,
    v: &RunningJob<'_>,
    now: i64,
) -> Decision {
    // Also here, not only in `decide`: callers that judge a victim directly
    // (the simulator's band) never take a job of a `PreemptMode=OFF` partition.
    never_preempted(v)?;
    if is_protected(v.run_start, v.min_runtime, v.free_tier, now) {
        return Err(Denied::Protected {
            until: protected_until(v.run_start, v.min_runtime),
        });
    }
    let policy = &state.policy;
    if let Some(max) = policy.max_requeues
        && v.requeues >= max
    {
        return Err(Denied::RequeueCap {
            requeues: v.requeues,
            max,
        });
    }
    let vside = &state.nodes[sides.vs];
    // Weighted GPUs: the side's holdings less the victims already leaving it,
    // less this victim's size, against its entitlement.
    let held = tidy(vside.held - sides.victims_in_flight).max(0.0);
    let size = v.weighted_gpus();
    let keeps_entitlement = tidy(held - size) >= vside.entitled && held >= size;
    if !sides.over_budget && !keeps_entitlement {
        return Err(Denied::VictimSideWithinEntitlement {
            held: vside.held,
            entitled: vside.entitled,
            victim_gpus: size,
            weighted: state.weighted,
        });
    }
    let lost = expected_lost_gpu_secs(v, now);
    let pside = &state.nodes[sides.ps];
    // The budget is weighted GPU-seconds; the site cap below counts raw ones.
    let charged = weighted_lost_gpu_secs(lost, v.weight);
    if pside.lost_spent + charged > pside.lost_budget {
        return Err(Denied::LostBudget {
            spent_gpu_secs: pside.lost_spent,
            budget_gpu_secs: pside.lost_budget,
            victim_lost_gpu_secs: charged,
            weighted: state.weighted,
        });
    }
    if let Some(factor) = policy.benefit_factor {
        let benefit = benefit(state, sides, size, now);
        let cost = charged + policy.restart_cost.max(0.0) * size;
        if benefit < factor * cost {
            return Err(Denied::NotWorthIt {
                benefit_gpu_secs: benefit,
                cost_gpu_secs: cost,
                factor,
                weighted: state.weighted,
            });
        }
    }
    let (n_flight, lost_flight) = sides.site_in_flight;
    if state.site_cap_reached_with(n_flight, lost_flight + lost) {
        let (preemptions, lost_secs) = state.site_totals();
        return Err(Denied::SiteCap {
            preemptions: preemptions.saturating_add(n_flight),
            lost_gpu_hours: (lost_secs + lost_flight) / crate::HOUR as f64,
        });
    }
    Ok(Allowed::Rebalance(Rebalance {
        clause: if keeps_entitlement {
            Clause::Entitlement
        } else {
            Clause::OverBudget
        },
        parent: sides.parent,
        preemptor_side: sides.ps,
        victim_side: sides.vs,
        preemptor_ratio: sides.p_ratio,
        victim_ratio: sides.v_ratio,
        deficit: sides.deficit,
        uncovered: sides.uncovered,
        in_flight: sides.in_flight,
        victim_side_held: vside.held,
        victim_side_entitled: vside.entitled,
        victim_lost_gpu_secs: lost,
        weighted: state.weighted,
    }))
}

/// Whether pending `p` may preempt running `v` now, and why: the callback.
///
/// The clauses in the order they are tried, the first that answers wins:
/// 0. the site's "never": a victim whose partition has `PreemptMode=OFF` is
///    never taken ([`Denied::PartitionPreemptOff`]), whatever the rest would
///    say (tried first because it is the one refusal that never ends: the
///    words then say "never", not "not until");
/// 1. the contract: a victim inside its protected window is never taken
///    (free-tier jobs have none);
/// 2. free-tier jobs never preempt (whatever their partition: a user could
///    otherwise opt into the free tier in a high-tier partition and take
///    budgeted work without being charged);
/// 3. the site's partition order, when both jobs' partition `PriorityTier`s
///    are known: a preemptor in a lower tier never takes a victim in a
///    higher one ([`Denied::LowerPartitionTier`]); a free-tier victim is
///    taken as before; a preemptor in a higher tier takes the (unprotected)
///    victim whatever the budgets say ([`Allowed::HigherPartitionTier`]),
///    as `preempt/partition_prio` would, in safe mode too (it needs no
///    snapshot);
/// 4. the site's QOS order, when both jobs' QOS are known: a preemptor whose
///    QOS the victim's QOS lists in its `Preempt=` (the site's lower class,
///    a scavenger QOS) never takes it ([`Denied::LowerQos`]); a free-tier
///    victim is taken as before; a preemptor whose QOS lists the victim's
///    takes the (unprotected) victim whatever the budgets say
///    ([`Allowed::QosPreemptList`]), as `preempt/qos` would, in safe mode
///    too. Both refusals (3, 4) are tried before either allowance: where the
///    partition order and the QOS order disagree, nothing is preempted (a
///    preemption destroys work; neither of the site's orders is read as
///    overriding the other). The same QOS, or neither listing the other:
///    no QOS relation (`PreemptMode=WITHIN` is not read);
/// 5. within one tier and no QOS relation: the free tier, then the
///    cost-aware rebalancing rule ([`judge_sides`], [`judge_victim`]).
pub fn decide(
    state: &PreemptState,
    fs: Option<&FairShare>,
    in_flight: &InFlight,
    p: &PendingJob<'_>,
    v: &RunningJob<'_>,
    now: i64,
) -> Decision {
    never_preempted(v)?;
    if is_protected(v.run_start, v.min_runtime, v.free_tier, now) {
        return Err(Denied::Protected {
            until: protected_until(v.run_start, v.min_runtime),
        });
    }
    if p.free_tier {
        return Err(Denied::PreemptorFree);
    }
    let tiers = p.partition_tier.zip(v.partition_tier);
    if let Some((preemptor_tier, victim_tier)) = tiers
        && preemptor_tier < victim_tier
    {
        return Err(Denied::LowerPartitionTier {
            preemptor_tier,
            victim_tier,
        });
    }
    let qos = p.qos.zip(v.qos);
    if let Some((pq, vq)) = qos
        && vq.lists(&pq)
    {
        return Err(Denied::LowerQos {
            preemptor_qos: pq.name.to_string(),
            victim_qos: vq.name.to_string(),
        });
    }
    if v.free_tier {
        return Ok(Allowed::VictimFreeTier);
    }
    if let Some((preemptor_tier, victim_tier)) = tiers
        && preemptor_tier > victim_tier
    {
        return Ok(Allowed::HigherPartitionTier {
            preemptor_tier,
            victim_tier,
        });
    }
    if let Some((pq, vq)) = qos
        && pq.lists(&vq)
    {
        return Ok(qos_allowed(&pq, &vq));
    }
    let sides = judge_sides(state, fs, in_flight, p, v)?;
    judge_victim(state, &sides, v, now)
}

/// [`Allowed::QosPreemptList`] of `preemptor`'s QOS over `victim`'s.
fn qos_allowed(preemptor: &QosView<'_>, victim: &QosView<'_>) -> Allowed {
    Allowed::QosPreemptList {
        preemptor_qos: preemptor.name.to_string(),
        victim_qos: victim.name.to_string(),
    }
}

/// Victim order for Slurm's candidate sort (ascending: lowest preempted first):
/// free tier first; then the least work lost ([`expected_lost_gpu_secs`], so a
/// job that checkpoints or just left its window goes first), log-compressed;
/// then the most over share.
pub fn victim_priority(fs: Option<&FairShare>, v: &RunningJob<'_>, now: i64) -> u32 {
    const FIELD: u32 = (1 << 15) - 1;
    if v.free_tier {
        return 0;
    }
    let lost = expected_lost_gpu_secs(v, now);
    let lost_part = ((1.0 + lost).log2() * 1000.0).min(f64::from(FIELD)) as u32;
    let view = crate::preempt::JobView {
        job_id: v.job_id,
        account: v.account,
        user: v.user,
        free_tier: false,
        run_start: v.run_start,
        min_runtime: v.min_runtime,
        gpus: v.gpus,
    };
    // A victim placed already (`RunningJob::leaf`, same snapshot) is not
    // looked up by name again.
    let over_share = match (fs, v.leaf) {
        (Some(fs), Some(n)) if n < fs.nodes.len() => crate::preempt::over_share_at(fs, n),
        _ => crate::preempt::over_share(fs, &view),
    };
    let over = (over_share * 1000.0).clamp(0.0, f64::from(FIELD)) as u32;
    (1 << 30) | (lost_part << 15) | (FIELD - over)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    /// One of each refusal (the match in `name` is exhaustive; `seen` checks
    /// that this list is too).
    fn one_of_each_denied() -> Vec<Denied> {
        vec![
            Denied::PartitionPreemptOff {
                partition: "frozen".into(),
            },
            Denied::Protected { until: 1 },
            Denied::PreemptorFree,
            Denied::LowerPartitionTier {
                preemptor_tier: 1,
                victim_tier: 2,
            },
            Denied::LowerQos {
                preemptor_qos: "scavenger".into(),
                victim_qos: "normal".into(),
            },
            Denied::SafeMode,
            Denied::StaleState,
            Denied::UnknownAccount {
                account: "x".into(),
            },
            Denied::PreemptorNotBudgeted {
                tier: Tier::OverBudget,
            },
            Denied::SameSide,
            Denied::WithinAccount {
                account: "a".into(),
            },
            Denied::RatioGapTooSmall {
                preemptor_ratio: 0.5,
                victim_ratio: 0.6,
                hysteresis: 0.2,
            },
            Denied::VictimSideWithinEntitlement {
                held: 1.0,
                entitled: 2.0,
                victim_gpus: 1.0,
                weighted: true,
            },
            Denied::TurnoverSuffices {
                deficit: 1.0,
                uncovered: 0.0,
                in_flight: 0.0,
                next_release: Some(5),
                weighted: false,
            },
            Denied::RecentReverse { at: 3 },
            Denied::RequeueCap {
                requeues: 3,
                max: 3,
            },
            Denied::LostBudget {
                spent_gpu_secs: 1.0,
                budget_gpu_secs: 1.0,
                victim_lost_gpu_secs: 1.0,
                weighted: false,
            },
            Denied::NotWorthIt {
                benefit_gpu_secs: 1.0,
                cost_gpu_secs: 2.0,
                factor: 1.5,
                weighted: false,
            },
            Denied::SiteCap {
                preemptions: 1,
                lost_gpu_hours: 0.0,
            },
        ]
    }

    #[test]
    fn every_refusal_has_its_own_name() {
        let all = one_of_each_denied();
        let names: std::collections::BTreeSet<&str> = all.iter().map(Denied::name).collect();
        assert_eq!(names.len(), all.len(), "a name is used twice: {names:?}");
        for n in &names {
            assert!(
                !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric()),
                "{n:?} is not a bare variant name"
            );
        }
        // Each variant is in the list: a variant added to `Denied` and not
        // here fails to compile below, or leaves `seen` short.
        let seen: std::collections::BTreeSet<u8> = all
            .iter()
            .map(|d| match d {
                Denied::PartitionPreemptOff { .. } => 0,
                Denied::Protected { .. } => 1,
                Denied::PreemptorFree => 2,
                Denied::LowerPartitionTier { .. } => 3,
                Denied::SafeMode => 4,
                Denied::StaleState => 5,
                Denied::UnknownAccount { .. } => 6,
                Denied::PreemptorNotBudgeted { .. } => 7,
                Denied::SameSide => 8,
                Denied::WithinAccount { .. } => 9,
                Denied::RatioGapTooSmall { .. } => 10,
                Denied::VictimSideWithinEntitlement { .. } => 11,
                Denied::TurnoverSuffices { .. } => 12,
                Denied::RecentReverse { .. } => 13,
                Denied::RequeueCap { .. } => 14,
                Denied::LostBudget { .. } => 15,
                Denied::NotWorthIt { .. } => 16,
                Denied::SiteCap { .. } => 17,
                Denied::LowerQos { .. } => 18,
            })
            .collect();
        assert_eq!(seen.len(), 19);
    }

    #[test]
    fn turnover_that_comes_soon_enough_means_no_preemption() {
        // b's jobs end (time limit) 3 h from now: 4 GPUs x 3 h = 12 GPU-h missing,
        // within the 33.6 GPU-h tolerance of the tolerance test (the rule without a
        // benefit factor; with one, `benefit_against_cost_...`).
        let (fs, running) = starved(5 * H);
        let now = 2 * H;
        let tolerance_only = RebalancePolicy {
            benefit_factor: None,
            ..RebalancePolicy::default()
        };
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 4)],
            [],
            Some(16.0),
            tolerance_only,
            now,
        );
        let d = decide(
            &st,
            Some(&fs),
            &InFlight::default(),
            &pend(9, "a", "ua", 4),
            &running[1],
            now,
        );
        assert!(
            matches!(d, Err(Denied::TurnoverSuffices { next_release: Some(t), .. }) if t == 5 * H),
            "{d:?}"
        );
        // Same with no tolerance: preempt.
        let strict = RebalancePolicy {
            shortfall_tolerance: 0.0,
            ..tolerance_only
        };
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 4)],
            [],
            Some(16.0),
            strict,
            now,
        );
        assert!(matches!(
            decide(
                &st,
                Some(&fs),
                &InFlight::default(),
                &pend(9, "a", "ua", 4),
                &running[1],
                now
            ),
            Ok(Allowed::Rebalance(Rebalance {
                clause: Clause::Entitlement,
                ..
            }))
        ));
    }

    #[test]
    fn benefit_against_cost_takes_a_fresh_victim_and_spares_one_that_ran_long() {
        // b's jobs end at their 5 h time limits; a is 4 GPUs short. Within the
        // tolerance (12-15.6 GPU-h missing of 33.6), the tolerance test never
        // preempts; the benefit test weighs each victim's loss.
        let (fs, running) = starved(5 * H);
        let p = pend(9, "a", "ua", 4);
        let weigh = RebalancePolicy {
            benefit_factor: Some(2.0),
            restart_cost: 600.0,
            ..RebalancePolicy::default()
        };
        let at = |now: i64, policy: RebalancePolicy| {
            let st = PreemptState::compute(
                Some(&fs),
                running.iter().copied(),
                [p],
                [],
                Some(16.0),
                policy,
                now,
            );
            decide(&st, Some(&fs), &InFlight::default(), &p, &running[1], now)
        };
        // Just past its 1 h window: 4 GPUs x 3.9 h delivered sooner against
        // 4 x 1.1 h lost plus 4 x 10 min to restart: 15.6 >= 2 x 5.07.
        let fresh = 66 * 60;
        assert!(
            matches!(at(fresh, weigh), Ok(Allowed::Rebalance(_))),
            "{:?}",
            at(fresh, weigh)
        );
        let tolerance_only = RebalancePolicy {
            benefit_factor: None,
            ..RebalancePolicy::default()
        };
        assert!(matches!(
            at(fresh, tolerance_only),
            Err(Denied::TurnoverSuffices { .. })
        ));
        // The defaults weigh as above.
        assert_eq!(
            (
                RebalancePolicy::default().benefit_factor,
                RebalancePolicy::default().restart_cost
            ),
            (Some(2.0), 600.0)
        );
        assert!(at(fresh, RebalancePolicy::default()).is_ok());
        // After 2 h: 4 x 3 h sooner against 4 x 2 h lost (+ restart): not worth it.
        match at(2 * H, weigh) {
            Err(Denied::NotWorthIt {
                benefit_gpu_secs,
                cost_gpu_secs,
                factor,
                ..
            }) => {
                assert!((benefit_gpu_secs - 4.0 * 3.0 * 3600.0).abs() < 1e-6);
                assert!((cost_gpu_secs - 4.0 * (2.0 * 3600.0 + 600.0)).abs() < 1e-6);
                assert_eq!(factor, 2.0);
            }
            d => panic!("{d:?}"),
        }
        // The words say what was weighed.
        let words = denied_words(Some(&fs), &at(2 * H, weigh).unwrap_err(), 2 * H);
        assert!(
            words.contains("lose 8.67 GPU-h") && words.contains("12.00"),
            "{words}"
        );
    }

    #[test]
    fn each_check_of_the_rule() {
        let (fs, running) = starved(48 * H);
        let now = 2 * H;
        let p = pend(9, "a", "ua", 4);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let none = InFlight::default();
        let ok = decide(&st, Some(&fs), &none, &p, &running[1], now);
        let Ok(Allowed::Rebalance(r)) = ok else {
            panic!("{ok:?}")
        };
        assert_eq!(r.victim_side_held, 12.0);
        assert!((r.victim_lost_gpu_secs - 4.0 * 2.0 * 3600.0).abs() < 1e-9);
        assert!(describe(&fs, &r).contains("a short of 4.0 GPUs"));
        // Protected victim.
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &running[1], 1800),
            Err(Denied::Protected { until: 3600 })
        ));
        // Reverse direction: a is below its entitlement.
        let pb = pend(10, "b", "ub", 4);
        assert!(decide(&st, Some(&fs), &none, &pb, &running[0], now).is_err());
        // Victim too large to leave b at its entitlement: 12 - 8 < 8.
        let big = run(5, "b", "ub", 8, 0, 48 * H);
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &big, now),
            Err(Denied::VictimSideWithinEntitlement {
                victim_gpus: 8.0,
                ..
            })
        ));
        // Requeued once already.
        let again = RunningJob {
            requeues: 1,
            ..running[1]
        };
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &again, now),
            Err(Denied::RequeueCap {
                requeues: 1,
                max: 1
            })
        ));
        // Another preemptor of a was granted the 4 uncovered GPUs this period.
        let mut inflight = InFlight::default();
        inflight.grant(&pend(11, "a", "ua", 4), &fs);
        assert!(matches!(
            decide(&st, Some(&fs), &inflight, &p, &running[1], now),
            Err(Denied::TurnoverSuffices { in_flight: 4.0, .. })
        ));
        // ... but its own grant does not count against itself.
        inflight.grant(&p, &fs);
        assert_eq!(inflight.gpus_under(fs.account("a").unwrap(), 11), 4.0);
        // Once preemptor 11 runs, its GPUs are holdings, no longer a grant.
        inflight.retain(|job| job != 11);
        assert_eq!(inflight.gpus_under(fs.account("a").unwrap(), 9), 0.0);
        assert!(decide(&st, Some(&fs), &inflight, &p, &running[1], now).is_ok());
        // Safe mode.
        assert_eq!(
            decide(&st, None, &none, &p, &running[1], now),
            Err(Denied::SafeMode)
        );
        let free = RunningJob {
            free_tier: true,
            ..running[1]
        };
        assert_eq!(
            decide(&st, None, &none, &p, &free, now),
            Ok(Allowed::VictimFreeTier)
        );
        let fp = PendingJob {
            free_tier: true,
            ..p
        };
        assert_eq!(
            decide(&st, Some(&fs), &none, &fp, &free, now),
            Err(Denied::PreemptorFree)
        );
        // A state from another snapshot.
        let other = FairShare::from_nodes(5, W, fs.nodes.clone());
        assert_eq!(
            decide(&st, Some(&other), &none, &p, &running[1], now),
            Err(Denied::StaleState)
        );
    }

    #[test]
    fn lost_budget_reverse_lock_and_site_cap() {
        let (fs, running) = starved(48 * H);
        let now = 20 * H;
        let p = pend(9, "a", "ua", 4);
        let none = InFlight::default();
        // a's budget: 5% x 8 GPUs x 168 h = 67.2 GPU-h; 60 GPU-h already spent,
        // the victim would lose 4 x 20 h = 80.
        let spent = [a_took_from_b(now - H, 60.0, 1.0)];
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            spent,
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &running[1], now),
            Err(Denied::LostBudget { .. })
        ));
        // A checkpointing victim (every 30 min, 20 h in) loses nothing: allowed.
        let ck = RunningJob {
            checkpoint: Some(1800),
            ..running[1]
        };
        assert!(decide(&st, Some(&fs), &none, &p, &ck, now).is_ok());
        // b took from a within the window: a may not take from b... and the
        // other way round is refused by the entitlement test anyway.
        let rev = [PastPreemption {
            at: now - 2 * H,
            preemptor_account: "b",
            preemptor_user: "ub",
            victim_account: "a",
            victim_user: "ua",
            lost_gpu_secs: 0.0,
            weight: 1.0,
        }];
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            rev,
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &ck, now),
            Err(Denied::RecentReverse { .. })
        ));
        // Older than the window: forgotten.
        let old = [PastPreemption {
            at: now - W,
            ..rev[0]
        }];
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            old,
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        assert!(decide(&st, Some(&fs), &none, &p, &ck, now).is_ok());
        // Site cap of 1 preemption per window, one in the record.
        let capped = RebalancePolicy {
            site_max_preemptions: Some(1),
            reverse_lock: false,
            ..RebalancePolicy::default()
        };
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            rev,
            Some(16.0),
            capped,
            now,
        );
        assert!(matches!(
            decide(&st, Some(&fs), &none, &p, &ck, now),
            Err(Denied::SiteCap { preemptions: 1, .. })
        ));
    }

    #[test]
    fn the_lost_work_budget_is_charged_weighted_and_the_site_cap_raw() {
        let (fs, running) = starved(48 * H);
        let now = 20 * H;
        let p = pend(9, "a", "ua", 4);
        let none = InFlight::default();
        // a's budget: 5% x 8 weighted GPUs x 168 h = 67.2 weighted GPU-h. The
        // victim checkpoints every 8 h: 20 h in, it loses 4 h x 4 GPUs = 16 GPU-h.
        let victim = RunningJob {
            checkpoint: Some(8 * H),
            ..running[1]
        };
        // Earlier this window a destroyed 40 GPU-h of GPUs weighing `w`.
        let past = |w: f64| [a_took_from_b(now - H, 40.0, w)];
        let state = |w: f64, policy: RebalancePolicy| {
            PreemptState::compute(
                Some(&fs),
                running.iter().copied(),
                [p],
                past(w),
                Some(16.0),
                policy,
                now,
            )
        };
        let default = RebalancePolicy::default();
        // Weight 1: 40 + 16 = 56 <= 67.2.
        assert!(decide(&state(1.0, default), Some(&fs), &none, &p, &victim, now).is_ok());
        // The same 40 GPU-h on GPUs weighing 1.5 spent 60 weighted: 60 + 16 > 67.2.
        let st = state(1.5, default);
        assert_eq!(st.side(&fs, 1).map(|s| s.lost_spent), Some(60.0 * 3600.0));
        match decide(&st, Some(&fs), &none, &p, &victim, now) {
            Err(Denied::LostBudget {
                spent_gpu_secs,
                victim_lost_gpu_secs,
                weighted,
                ..
            }) => {
                assert_eq!(spent_gpu_secs, 60.0 * 3600.0);
                assert_eq!(victim_lost_gpu_secs, 16.0 * 3600.0);
                // The running jobs weigh 1, the past victim's GPUs 1.5: the
                // budget is spoken of in weighted GPU-hours.
                assert!(weighted);
            }
            other => panic!("expected the lost-work budget, got {other:?}"),
        }
        // A weight that is not a number counts as 1, as for GPUs.
        assert!(
            decide(
                &state(f64::NAN, default),
                Some(&fs),
                &none,
                &p,
                &victim,
                now
            )
            .is_ok()
        );
        // The site cap counts raw GPU-hours: 40 + 16 = 56 <= 58, whatever the weight.
        let site = RebalancePolicy {
            lost_budget: None,
            site_max_lost_gpu_hours: Some(58.0),
            ..default
        };
        assert!(decide(&state(1.5, site), Some(&fs), &none, &p, &victim, now).is_ok());
        let tight = RebalancePolicy {
            site_max_lost_gpu_hours: Some(55.0),
            ..site
        };
        assert!(matches!(
            decide(&state(1.0, tight), Some(&fs), &none, &p, &victim, now),
            Err(Denied::SiteCap { .. })
        ));
        assert_eq!(weighted_lost_gpu_secs(10.0, 2.2), 22.0);
        assert_eq!(weighted_lost_gpu_secs(-5.0, 2.2), 0.0);
        assert_eq!(weighted_lost_gpu_secs(10.0, 0.0), 10.0);
    }

    #[test]
    fn a_weighted_victim_is_charged_its_weight() {
        // a's budget 67.2 weighted GPU-h, 40 spent at weight 1; the victim's
        // 16 GPU-h on GPUs weighing 2 cost 32: 72 > 67.2. Its words say weighted.
        let (fs, mut running) = starved(48 * H);
        running[1].weight = 2.0;
        running[1].checkpoint = Some(8 * H);
        let now = 20 * H;
        let p = pend(9, "a", "ua", 4);
        let past = [a_took_from_b(now - H, 40.0, 1.0)];
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            past,
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let d = decide(&st, Some(&fs), &InFlight::default(), &p, &running[1], now);
        let Err(denied @ Denied::LostBudget { .. }) = d else {
            panic!("expected the lost-work budget, got {d:?}");
        };
        assert_eq!(
            denied,
            Denied::LostBudget {
                spent_gpu_secs: 40.0 * 3600.0,
                budget_gpu_secs: 0.05 * 8.0 * 168.0 * 3600.0,
                victim_lost_gpu_secs: 32.0 * 3600.0,
                weighted: true,
            }
        );
        assert_eq!(
            denied_words(Some(&fs), &denied, now),
            "cannot be taken: losing 32.00 weighted GPU-h would pass the side's lost-work budget (40.00 of 67.20 weighted GPU-h spent)"
        );
    }

    #[test]
    fn over_budget_clause_has_a_band() {
        // b holds exactly its entitlement (8 of 16) but used 1.05x / 1.2x its
        // allocation; its job would lose 40 GPU-h, within a's budget.
        let now = 5 * H;
        for (b_used, allowed) in [(1.05 * 8.0 * 168.0, false), (1.2 * 8.0 * 168.0, true)] {
            let fs = two(8.0, 0.0, b_used);
            let running = [run(1, "b", "ub", 8, 0, 100 * H)];
            let p = pend(9, "a", "ua", 8);
            let st = PreemptState::compute(
                Some(&fs),
                running,
                [p],
                [],
                Some(16.0),
                RebalancePolicy::default(),
                now,
            );
            let d = decide(&st, Some(&fs), &InFlight::default(), &p, &running[0], now);
            assert_eq!(d.is_ok(), allowed, "{b_used}: {d:?}");
            if let Ok(Allowed::Rebalance(r)) = d {
                assert_eq!(r.clause, Clause::OverBudget);
            }
        }
    }

    #[test]
    fn victims_losing_least_go_first() {
        let fs = two(8.0, 0.0, 1000.0);
        let now = 10 * H;
        let young_big = run(1, "b", "ub", 8, now - 2 * H, 48 * H); // 16 GPU-h
        let old_small = run(2, "b", "ub", 1, 0, 48 * H); // 10 GPU-h
        let ckpt = RunningJob {
            checkpoint: Some(1800),
            ..young_big
        }; // 0
        let free = RunningJob {
            free_tier: true,
            ..young_big
        };
        let o = |j: &RunningJob<'_>| victim_priority(Some(&fs), j, now);
        assert!(o(&free) < o(&ckpt));
        assert!(o(&ckpt) < o(&old_small));
        assert!(o(&old_small) < o(&young_big));
        // A victim placed already (its leaf node given) orders the same.
        for j in [young_big, old_small, ckpt, free] {
            let placed = RunningJob {
                leaf: fs.place(j.account, j.user).map(|p| p.node),
                ..j
            };
            assert!(placed.leaf.is_some());
            assert_eq!(o(&placed), o(&j));
        }
    }

    #[test]
    fn never_between_users_of_one_account() {
        // u1 holds all 16 of t's GPUs in long runs, u2 (ratio 0) waits for 8: every
        // other check of the rule would allow u2 to take u1's runs (u2 is short
        // of its share of t and turnover is 46 h away), but both are t's users.
        let fs = one_account_two_users(1000.0, 0.0);
        let now = 2 * H;
        let running: Vec<RunningJob<'static>> =
            (1..=4).map(|i| run(i, "t", "u1", 4, 0, 48 * H)).collect();
        let p = pend(9, "t", "u2", 8);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [p],
            [],
            Some(32.0),
            RebalancePolicy::default(),
            now,
        );
        let (u1, u2) = (fs.place("t", "u1").unwrap(), fs.place("t", "u2").unwrap());
        assert!(fs.nodes[u2.node].ratio < fs.nodes[u1.node].ratio - 0.1);
        let side = st.side(&fs, u2.node).unwrap();
        assert!(side.deficit > 0.0 && side.uncovered > 0.0, "{side:?}");
        assert!(st.side(&fs, u1.node).unwrap().held > 4.0);
        for v in &running {
            assert_eq!(
                decide(&st, Some(&fs), &InFlight::default(), &p, v, now),
                Err(Denied::WithinAccount {
                    account: "t".into()
                })
            );
        }
        let words = denied_words(
            Some(&fs),
            &Denied::WithinAccount {
                account: "t".into(),
            },
            now,
        );
        assert!(words.contains("within account t"), "{words}");
        // A free-tier run of a colleague still yields at once.
        let free = RunningJob {
            free_tier: true,
            ..running[0]
        };
        assert_eq!(
            decide(&st, Some(&fs), &InFlight::default(), &p, &free, now),
            Ok(Allowed::VictimFreeTier)
        );
        // Between accounts the rule still rebalances: o (ratio 0, holding
        // nothing) may take a 4-GPU run from t, which holds 20 of its 16 entitled.
        let mut running = running;
        running.push(run(5, "t", "u1", 4, 0, 48 * H));
        let po = pend(10, "o", "uo", 4);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [po],
            [],
            Some(32.0),
            RebalancePolicy::default(),
            now,
        );
        let d = decide(&st, Some(&fs), &InFlight::default(), &po, &running[0], now);
        assert!(
            matches!(d, Ok(Allowed::Rebalance(r)) if node_name(&fs, r.victim_side) == "t"),
            "{d:?}"
        );
    }

    #[test]
    fn a_team_at_its_weighted_entitlement_may_not_preempt_for_more() {
        // a holds 32 GPUs of weight 2 (64 of 64) and asks for 16 more; b holds
        // 80 GPUs of weight 1 (16 above its 64) in 100 h runs, and a's ratio is
        // far below b's: only a's entitlement stops it.
        let fs = sixty_four(0.01, 0.5);
        let b = jobs_of("b", "ub", 100, 20, 4, 1.0);
        let running = [jobs_of("a", "ua", 1, 8, 4, 2.0), b.clone()].concat();
        let p = PendingJob {
            weight: 2.0,
            ..pend(9, "a", "ua", 16)
        };
        let now = 2 * H;
        let st = state(&fs, &running, &[p], now);
        let d = decide(&st, Some(&fs), &InFlight::default(), &p, &b[0], now);
        assert!(
            matches!(d, Err(Denied::TurnoverSuffices { deficit, uncovered, weighted: true, .. }) if deficit == 0.0 && uncovered == 0.0),
            "{d:?}"
        );
        assert_eq!(
            denied_words(Some(&fs), d.as_ref().unwrap_err(), now),
            "need not be taken: turnover covers the 0.0 weighted GPUs short"
        );
        // Counted raw, a would be 32 short of its entitlement and take b's job.
        let raw = [jobs_of("a", "ua", 1, 8, 4, 1.0), b.clone()].concat();
        let p_raw = pend(9, "a", "ua", 16);
        let st = state(&fs, &raw, &[p_raw], now);
        assert!(matches!(
            decide(&st, Some(&fs), &InFlight::default(), &p_raw, &b[0], now),
            Ok(Allowed::Rebalance(_))
        ));
    }

    #[test]
    fn a_team_on_heavy_gpus_may_be_preempted_down_to_its_weighted_entitlement_not_below() {
        // a holds 36 GPUs of weight 2 (72 weighted, 8 above its 64) in 2-GPU
        // runs of 4 weighted GPUs each; b (far lower ratio) holds 40 of its 64
        // and asks for 24 more.
        let fs = sixty_four(0.8, 0.01);
        let a = jobs_of("a", "ua", 1, 18, 2, 2.0);
        let running = [a.clone(), jobs_of("b", "ub", 100, 10, 4, 1.0)].concat();
        let p = pend(9, "b", "ub", 24);
        let now = 2 * H;
        let st = state(&fs, &running, &[p], now);
        let b_side = st.side(&fs, fs.account("b").unwrap()).unwrap();
        assert_eq!((b_side.held, b_side.deficit), (40.0, 24.0));
        // Two victims take a down to 64 (32 such GPUs); a third would leave 60.
        let mut flight = InFlight::default();
        for v in &a[..2] {
            let d = decide(&st, Some(&fs), &flight, &p, v, now);
            let Ok(Allowed::Rebalance(r)) = d else {
                panic!("{d:?}")
            };
            assert_eq!(
                (r.clause, r.victim_side_held, r.weighted),
                (Clause::Entitlement, 72.0, true)
            );
            flight.grant(&p, &fs);
            flight.take(v, &fs, r.victim_lost_gpu_secs);
        }
        assert_eq!(flight.victim_gpus_under(fs.account("a").unwrap(), 0), 8.0);
        let d = decide(&st, Some(&fs), &flight, &p, &a[2], now);
        assert!(
            matches!(d, Err(Denied::VictimSideWithinEntitlement { held, .. }) if held == 72.0),
            "{d:?}"
        );
        // Holding exactly 32 such GPUs, none of a's runs can be taken, and
        // why says so in weighted GPUs.
        let at = [a[..16].to_vec(), jobs_of("b", "ub", 100, 10, 4, 1.0)].concat();
        let st = state(&fs, &at, &[p], now);
        let d = decide(&st, Some(&fs), &InFlight::default(), &p, &a[0], now);
        assert_eq!(
            d,
            Err(Denied::VictimSideWithinEntitlement {
                held: 64.0,
                entitled: 64.0,
                victim_gpus: 0.0,
                weighted: true
            })
        );
        assert_eq!(
            denied_words(Some(&fs), d.as_ref().unwrap_err(), now),
            "cannot be taken: its side holds 64 weighted GPUs of 64.0 entitled"
        );
        // Counted raw, a's 36 GPUs look far below its 64: never taken.
        let raw = [
            jobs_of("a", "ua", 1, 18, 2, 1.0),
            jobs_of("b", "ub", 100, 10, 4, 1.0),
        ]
        .concat();
        let st = state(&fs, &raw, &[p], now);
        assert!(decide(&st, Some(&fs), &InFlight::default(), &p, &raw[0], now).is_err());
    }

    #[test]
    fn the_partition_order_beside_the_contract() {
        // a is far under budget, b far over: the budget rule alone lets a take
        // b's jobs and never the reverse.
        let (fs, running) = starved(48 * H);
        let now = 2 * H;
        let none = InFlight::default();
        let tiered = |v: &RunningJob<'static>, t| RunningJob {
            partition_tier: Some(t),
            ..*v
        };
        let pend_in = |id, team: &'static str, user: &'static str, t| PendingJob {
            partition_tier: Some(t),
            ..pend(id, team, user, 4)
        };
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 4), pend(10, "b", "ub", 4)],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let at = |p: &PendingJob<'_>, v: &RunningJob<'_>, t| decide(&st, Some(&fs), &none, p, v, t);
        // (1) A higher tier takes a lower one past its window even though the
        // victim's team is under budget (the budget rule refuses it).
        let (a_low, b_high) = (pend_in(9, "a", "ua", 1), pend_in(10, "b", "ub", 2));
        let a_run_low = tiered(&running[0], 1);
        assert!(at(&pend(10, "b", "ub", 4), &running[0], now).is_err());
        assert_eq!(
            at(&b_high, &a_run_low, now),
            Ok(Allowed::HigherPartitionTier {
                preemptor_tier: 2,
                victim_tier: 1
            })
        );
        // ... in safe mode too: the partition order needs no snapshot.
        let safe = PreemptState::compute(None, [], [], [], None, RebalancePolicy::default(), now);
        assert!(matches!(
            decide(&safe, None, &none, &b_high, &a_run_low, now),
            Ok(Allowed::HigherPartitionTier { .. })
        ));
        // (2) Not inside the victim's window: the contract wins.
        assert_eq!(
            at(&b_high, &a_run_low, 1800),
            Err(Denied::Protected { until: 3600 })
        );
        // (3) A lower tier never takes a higher one, even from an
        // under-budget team against an over-budget one the budget rule
        // would take.
        let b_run_high = tiered(&running[1], 2);
        assert!(matches!(
            at(&pend(9, "a", "ua", 4), &running[1], now),
            Ok(Allowed::Rebalance(_))
        ));
        let d = at(&a_low, &b_run_high, now);
        assert_eq!(
            d,
            Err(Denied::LowerPartitionTier {
                preemptor_tier: 1,
                victim_tier: 2
            })
        );
        assert!(
            denied_words(Some(&fs), d.as_ref().unwrap_err(), now).contains(
                "the partition order wins, its partition's PriorityTier 2 is above this job's 1"
            )
        );
        // (4) The same tier: the budget rule, as without tiers.
        for (p, v) in [
            (pend(9, "a", "ua", 4), running[1]),
            (pend(10, "b", "ub", 4), running[0]),
        ] {
            let same = at(
                &PendingJob {
                    partition_tier: Some(3),
                    ..p
                },
                &tiered(&v, 3),
                now,
            );
            assert_eq!(same, at(&p, &v, now));
        }
        // One tier unknown: the budget rule.
        assert_eq!(
            at(&b_high, &running[0], now),
            at(&pend(10, "b", "ub", 4), &running[0], now)
        );
        // (5) The free tier: a free-tier victim has no window and is taken by
        // a higher or equal tier at once, never by a lower one; a free-tier
        // preemptor never preempts, whatever its partition.
        let free_low = RunningJob {
            free_tier: true,
            ..tiered(&running[0], 1)
        };
        assert_eq!(at(&b_high, &free_low, 60), Ok(Allowed::VictimFreeTier));
        assert_eq!(
            at(&pend_in(10, "b", "ub", 1), &free_low, 60),
            Ok(Allowed::VictimFreeTier)
        );
        assert!(matches!(
            at(&pend_in(10, "b", "ub", 0), &free_low, 60),
            Err(Denied::LowerPartitionTier { .. })
        ));
        let free_high = PendingJob {
            free_tier: true,
            ..b_high
        };
        assert_eq!(at(&free_high, &a_run_low, now), Err(Denied::PreemptorFree));
        // The words say which rule won.
        let w = explain_wait(&st, Some(&fs), &none, &b_high, &[a_run_low], now);
        let text = describe_wait(Some(&fs), &w, now);
        assert!(
            text.starts_with("preempting job 1: its window ended 1h ago; the partition order wins: PriorityTier 2 above the victim's 1"),
            "{text}"
        );
    }

    #[test]
    fn the_qos_order_beside_the_contract() {
        // a is far under budget, b far over: the budget rule alone lets a take
        // b's jobs and never the reverse.
        let (fs, running) = starved(48 * H);
        let now = 2 * H;
        let none = InFlight::default();
        // normal (id 1) lists scavenger (id 2) in its Preempt=; wide (id 70,
        // in the second word) lists nothing.
        let normal = QosView {
            id: 1,
            name: "normal",
            preempts: &[1 << 2, 0],
        };
        let scavenger = QosView {
            id: 2,
            name: "scavenger",
            preempts: &[],
        };
        let wide = QosView {
            id: 70,
            name: "wide",
            preempts: &[],
        };
        let runs_in = |v: &RunningJob<'static>, q| RunningJob { qos: Some(q), ..*v };
        let pend_in = |id, team: &'static str, user: &'static str, q| PendingJob {
            qos: Some(q),
            ..pend(id, team, user, 4)
        };
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 4), pend(10, "b", "ub", 4)],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let at = |p: &PendingJob<'_>, v: &RunningJob<'_>, t| decide(&st, Some(&fs), &none, p, v, t);
        assert!(normal.lists(&scavenger) && !scavenger.lists(&normal));
        assert!(!normal.lists(&normal) && !normal.lists(&wide) && !wide.lists(&normal));
        // (1) A listed QOS is taken past its window even though the victim's
        // team is under budget (the budget rule refuses it).
        let (b_normal, a_scav) = (
            pend_in(10, "b", "ub", normal),
            runs_in(&running[0], scavenger),
        );
        assert!(at(&pend(10, "b", "ub", 4), &running[0], now).is_err());
        let taken = at(&b_normal, &a_scav, now);
        assert_eq!(
            taken,
            Ok(Allowed::QosPreemptList {
                preemptor_qos: "normal".into(),
                victim_qos: "scavenger".into()
            })
        );
        assert_eq!(
            allowed_words(taken.as_ref().unwrap()),
            "the QOS order wins: QOS normal lists the victim's QOS scavenger in its Preempt=, and its window is over, so the budgets are not asked"
        );
        // ... in safe mode too: the QOS order needs no snapshot.
        let safe = PreemptState::compute(None, [], [], [], None, RebalancePolicy::default(), now);
        assert!(matches!(
            decide(&safe, None, &none, &b_normal, &a_scav, now),
            Ok(Allowed::QosPreemptList { .. })
        ));
        // (2) Not inside the victim's window: the contract wins.
        assert_eq!(
            at(&b_normal, &a_scav, 1800),
            Err(Denied::Protected { until: 3600 })
        );
        // (3) A lower QOS never takes one that lists it, even from an
        // under-budget team against an over-budget one the budget rule would
        // take.
        assert!(matches!(
            at(&pend(9, "a", "ua", 4), &running[1], now),
            Ok(Allowed::Rebalance(_))
        ));
        let d = at(
            &pend_in(9, "a", "ua", scavenger),
            &runs_in(&running[1], normal),
            now,
        );
        assert_eq!(
            d,
            Err(Denied::LowerQos {
                preemptor_qos: "scavenger".into(),
                victim_qos: "normal".into()
            })
        );
        assert!(
            denied_words(Some(&fs), d.as_ref().unwrap_err(), now).contains(
                "cannot be taken: the QOS order wins, its QOS normal lists this job's QOS scavenger in its Preempt="
            )
        );
        // (4) The same QOS, or two that do not list each other, or one QOS
        // unknown: the budget rule, as without QOS.
        for (p, v) in [
            (pend(9, "a", "ua", 4), running[1]),
            (pend(10, "b", "ub", 4), running[0]),
        ] {
            for (pq, vq) in [(normal, normal), (scavenger, scavenger), (wide, normal)] {
                let with = at(&PendingJob { qos: Some(pq), ..p }, &runs_in(&v, vq), now);
                assert_eq!(with, at(&p, &v, now));
            }
            assert_eq!(
                at(
                    &PendingJob {
                        qos: Some(normal),
                        ..p
                    },
                    &v,
                    now
                ),
                at(&p, &v, now)
            );
        }
        // (5) The free tier: a free-tier victim is taken at once unless its
        // QOS lists the preemptor's; a free-tier preemptor never preempts,
        // whatever its QOS.
        let free_scav = RunningJob {
            free_tier: true,
            ..a_scav
        };
        assert_eq!(at(&b_normal, &free_scav, 60), Ok(Allowed::VictimFreeTier));
        let free_normal = RunningJob {
            free_tier: true,
            ..runs_in(&running[0], normal)
        };
        assert!(matches!(
            at(&pend_in(10, "b", "ub", scavenger), &free_normal, 60),
            Err(Denied::LowerQos { .. })
        ));
        let free_preemptor = PendingJob {
            free_tier: true,
            ..b_normal
        };
        assert_eq!(
            at(&free_preemptor, &a_scav, now),
            Err(Denied::PreemptorFree)
        );
        // (6) Where the two site orders disagree, the refusal wins: a higher
        // partition tier does not take a QOS that lists its QOS, and a QOS
        // that lists the victim's does not take a higher partition tier.
        let tier = |p: PendingJob<'static>, t| PendingJob {
            partition_tier: Some(t),
            ..p
        };
        let high_scav = tier(pend_in(10, "b", "ub", scavenger), 2);
        let low_normal = RunningJob {
            partition_tier: Some(1),
            ..runs_in(&running[0], normal)
        };
        assert!(matches!(
            at(&high_scav, &low_normal, now),
            Err(Denied::LowerQos { .. })
        ));
        let low_normal_p = tier(b_normal, 1);
        let high_scav_v = RunningJob {
            partition_tier: Some(2),
            ..a_scav
        };
        assert!(matches!(
            at(&low_normal_p, &high_scav_v, now),
            Err(Denied::LowerPartitionTier { .. })
        ));
        // Both orders agree: the partition order is named.
        assert!(matches!(
            at(
                &tier(b_normal, 2),
                &RunningJob {
                    partition_tier: Some(1),
                    ..a_scav
                },
                now
            ),
            Ok(Allowed::HigherPartitionTier { .. })
        ));
        // (7) A PreemptMode=OFF partition is never taken, whatever the QOS.
        let off = RunningJob {
            partition_preempt_off: Some("frozen"),
            ..a_scav
        };
        assert!(matches!(
            at(&b_normal, &off, now),
            Err(Denied::PartitionPreemptOff { .. })
        ));
        // The words say which rule won.
        let w = explain_wait(&st, Some(&fs), &none, &b_normal, &[a_scav], now);
        let text = describe_wait(Some(&fs), &w, now);
        assert!(
            text.starts_with("preempting job 1: its window ended 1h ago; the QOS order wins: QOS normal lists the victim's QOS scavenger"),
            "{text}"
        );
    }

    #[test]
    fn a_preempt_mode_off_partition_is_never_taken() {
        // a is far under budget, b far over: the budget rule alone lets a take
        // b's jobs (job 2 here).
        let (fs, running) = starved(48 * H);
        let now = 2 * H;
        let none = InFlight::default();
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 4)],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            now,
        );
        let off = |v: &RunningJob<'static>| RunningJob {
            partition_preempt_off: Some("frozen"),
            ..*v
        };
        let refused = Err(Denied::PartitionPreemptOff {
            partition: "frozen".into(),
        });
        let a = pend(9, "a", "ua", 4);
        let at = |p: &PendingJob<'_>, v: &RunningJob<'_>, t| decide(&st, Some(&fs), &none, p, v, t);
        // (1) The budgets would take it; the site's OFF wins.
        assert!(matches!(
            at(&a, &running[1], now),
            Ok(Allowed::Rebalance(_))
        ));
        assert_eq!(at(&a, &off(&running[1]), now), refused);
        // (2) A higher partition tier would take it whatever the budgets say.
        let high = PendingJob {
            partition_tier: Some(2),
            ..pend(10, "b", "ub", 4)
        };
        let low = RunningJob {
            partition_tier: Some(1),
            ..running[0]
        };
        assert!(matches!(
            at(&high, &low, now),
            Ok(Allowed::HigherPartitionTier { .. })
        ));
        assert_eq!(at(&high, &off(&low), now), refused);
        // (3) A free-tier job yields to anyone, but not from an OFF partition.
        let free = RunningJob {
            free_tier: true,
            ..running[1]
        };
        assert_eq!(at(&a, &free, 60), Ok(Allowed::VictimFreeTier));
        assert_eq!(at(&a, &off(&free), 60), refused);
        // (4) Safe mode, and the simulator's direct victim judgement.
        let safe = PreemptState::compute(None, [], [], [], None, RebalancePolicy::default(), now);
        assert_eq!(decide(&safe, None, &none, &a, &off(&free), 60), refused);
        let sides = judge_sides(&st, Some(&fs), &none, &a, &running[1]).unwrap();
        assert_eq!(judge_victim(&st, &sides, &off(&running[1]), now), refused);
        // (5) Inside its window the refusal says "never", not "until".
        assert_eq!(at(&a, &off(&running[1]), 60), refused);
        // The words name the partition and the setting.
        let words = denied_words(Some(&fs), &refused.clone().unwrap_err(), now);
        assert!(
            words.starts_with("cannot be taken: partition frozen has PreemptMode=OFF"),
            "{words}"
        );
        // `why` on a's job: with only OFF jobs of b to take, the refusal names
        // the partition; a protected job beside them is the one reported (it
        // may be taken at its window's end, the OFF ones never).
        let frozen: Vec<_> = running[1..].iter().map(off).collect();
        let w = explain_wait(&st, Some(&fs), &none, &a, &frozen, now);
        let text = describe_wait(Some(&fs), &w, now);
        assert!(
            text.starts_with("no preemption: job 2 (first in Slurm's order) cannot be taken: partition frozen has PreemptMode=OFF"),
            "{text}"
        );
        let young = RunningJob {
            run_start: now - 60,
            ..running[2]
        };
        let w = explain_wait(&st, Some(&fs), &none, &a, &[frozen[0], young], now);
        assert!(
            matches!(
                w,
                Wait::Refused {
                    victim: Some(3),
                    denied: Some(Denied::Protected { .. })
                }
            ),
            "{w:?}"
        );
    }

    // --- Properties -------------------------------------------------------

    /// (allocation GPU-h, usage GPU-h) per account.
    type AccountGen = (u32, u32);
    /// (account, user, free, run start, min runtime, GPUs, limit, requeues,
    /// running, index into [`WEIGHTS`], partition PriorityTier, partition
    /// PreemptMode=OFF)
    type JobGen = (
        usize,
        usize,
        bool,
        i64,
        i64,
        u32,
        i64,
        u32,
        bool,
        usize,
        (Option<u16>, Option<usize>),
        bool,
    );

    /// The QOS jobs are drawn from (id, name, `Preempt=` words): normal lists
    /// scavenger; high lists normal, scavenger and wide (id 70, in the second
    /// word); wide lists scavenger; ring4 and ring5 list each other (a loop
    /// slurmdbd refuses, here to show the rule stays antisymmetric anyway).
    const QOS: [(u32, &str, &[u64]); 7] = [
        (1, "normal", &[1 << 2]),
        (2, "scavenger", &[]),
        (3, "high", &[(1 << 1) | (1 << 2), 1 << (70 - 64)]),
        (70, "wide", &[1 << 2]),
        (4, "ring4", &[1 << 5]),
        (5, "ring5", &[1 << 4]),
        (6, "plain", &[0, 0]),
    ];

    fn qos_view(i: Option<usize>) -> Option<QosView<'static>> {
        i.map(|i| QosView {
            id: QOS[i].0,
            name: QOS[i].1,
            preempts: QOS[i].2,
        })
    }

    /// Billing weights the jobs' GPUs are drawn from (a uniform site's 1 among them).
    const WEIGHTS: [f64; 5] = [1.0, 2.0, 2.2, 1.6, 0.5];

    fn arb_state() -> impl Strategy<Value = (Vec<AccountGen>, Vec<JobGen>, i64, f64, Option<f64>)> {
        (
            proptest::collection::vec((0u32..400, 0u32..600), 4),
            proptest::collection::vec(
                (
                    0usize..4,
                    0usize..3,
                    any::<bool>(),
                    0i64..10_000,
                    0i64..10_000,
                    1u32..17,
                    1i64..200_000,
                    0u32..3,
                    any::<bool>(),
                    0usize..WEIGHTS.len(),
                    (
                        proptest::option::of(0u16..3),
                        proptest::option::of(0usize..QOS.len()),
                    ),
                    proptest::bool::weighted(0.15),
                ),
                2..14,
            ),
            0i64..20_000,
            0.0f64..0.3,
            proptest::option::of(0.0f64..0.3),
        )
    }

    fn build(accts: &[AccountGen]) -> TreeSpec {
        let with_unused: Vec<(u32, u32, u32)> = accts.iter().map(|&(a, u)| (a, u, 0)).collect();
        crate::testkit::nested_tree(&with_unused)
    }

    proptest! {
        /// In any one state the rule never allows both A->B and B->A, never takes a
        /// protected job, and in safe mode takes only free-tier jobs.
        #[test]
        fn antisymmetric_protects_and_safe((accts, jobs, now, tol, band) in arb_state()) {
            let tree = build(&accts);
            let mut usage = UsageByLeaf::new();
            for (i, &(_, used)) in accts.iter().enumerate() {
                usage.insert((format!("a{i}"), "u0".into()), f64::from(used) * 3600.0);
            }
            let fs = FairShare::compute(&tree, &usage, now, W);
            let names: Vec<(String, String)> = jobs.iter().map(|j| (format!("a{}", j.0), format!("u{}", j.1))).collect();
            let as_running = |i: usize| {
                let j = jobs[i];
                RunningJob { job_id: i as u32, account: &names[i].0, user: &names[i].1, free_tier: j.2, gpus: j.5,
                    weight: WEIGHTS[j.9], run_start: j.3, time_limit: Some(j.6), min_runtime: j.4, checkpoint: None, grace: 0, requeues: j.7,
                    // Half the jobs come placed by the caller: the same state either way.
                    leaf: i.is_multiple_of(2).then(|| fs.place(&names[i].0, &names[i].1).map(|p| p.node)).flatten(),
                    partition_tier: j.10.0, partition_preempt_off: j.11.then_some("frozen"), qos: qos_view(j.10.1) }
            };
            let as_pending = |i: usize| {
                let j = jobs[i];
                PendingJob { job_id: i as u32, account: &names[i].0, user: &names[i].1, free_tier: j.2, gpus: j.5, weight: WEIGHTS[j.9], leaf: None, partition_tier: j.10.0, qos: qos_view(j.10.1) }
            };
            // No projection: the band's promotions are checked against the snapshot's
            // tiers below (the rule itself never reads the projected tier).
            let policy = RebalancePolicy { shortfall_tolerance: tol, over_budget_band: band, lost_budget: None, tier_band: None, tier_projection: None, ..RebalancePolicy::default() };
            let st = PreemptState::compute(
                Some(&fs),
                (0..jobs.len()).filter(|&i| jobs[i].8).map(as_running),
                (0..jobs.len()).filter(|&i| !jobs[i].8).map(as_pending),
                [],
                Some(64.0),
                policy,
                now,
            );
            let safe = PreemptState::compute(None, [], [], [], None, policy, now);
            // Entitlement-first ranks are a permutation of Fair-Tree's leaf ranks.
            let mut ranks: Vec<u32> = fs.nodes.iter().enumerate()
                .filter(|(_, n)| n.leaf_rank.is_some())
                .map(|(i, _)| st.ranks(&fs).order_rank[i]).collect();
            ranks.sort_unstable();
            prop_assert_eq!(ranks, (0..fs.num_leaves).collect::<Vec<_>>());
            // Every node holds the weighted GPUs of the running non-free jobs beneath.
            let mut want_held = vec![0.0f64; fs.nodes.len()];
            for i in (0..jobs.len()).filter(|&i| jobs[i].8 && !jobs[i].2) {
                if let Some(place) = fs.place(&names[i].0, &names[i].1) {
                    for n in fs.path(place.node) {
                        want_held[n] += f64::from(jobs[i].5) * WEIGHTS[jobs[i].9];
                    }
                }
            }
            for (n, want) in want_held.iter().enumerate() {
                prop_assert!((st.nodes[n].held - want).abs() < 1e-6, "node {}: {} vs {}", n, st.nodes[n].held, want);
            }
            // The tier band promotes exactly the over-budget leaves whose every
            // over-budget node is inside the band and below its entitlement;
            // the rank is the same walk's.
            let banded = PreemptState::compute(
                Some(&fs),
                (0..jobs.len()).filter(|&i| jobs[i].8).map(as_running),
                (0..jobs.len()).filter(|&i| !jobs[i].8).map(as_pending),
                [],
                Some(64.0),
                RebalancePolicy { tier_band: Some(tol), ..policy },
                now,
            );
            for (a, u) in &names {
                let (Some(place), Some((t0, r0)), Some((t1, r1))) =
                    (fs.place(a, u), st.priority_place(&fs, a, u), banded.priority_place(&fs, a, u))
                else {
                    prop_assert!(fs.place(a, u).is_none());
                    continue;
                };
                prop_assert_eq!(t0, place.tier);
                prop_assert_eq!(r0, r1);
                let inside = fs.path(place.node).iter().all(|&i| {
                    let (n, s) = (&fs.nodes[i], &banded.nodes[i]);
                    !n.budget_bearing || n.ratio < 1.0 || (n.ratio < 1.0 + tol && s.held < s.entitled)
                });
                let want = if inside { Tier::Budgeted } else { place.tier };
                prop_assert_eq!(t1, want);
            }
            let none = InFlight::default();
            for a in 0..jobs.len() {
                for b in 0..jobs.len() {
                    let ab = decide(&st, Some(&fs), &none, &as_pending(a), &as_running(b), now);
                    let ba = decide(&st, Some(&fs), &none, &as_pending(b), &as_running(a), now);
                    prop_assert!(!(ab.is_ok() && ba.is_ok()), "loop between {} and {}: {:?} / {:?}", a, b, ab, ba);
                    // Rebalancing only between accounts: both sides are accounts,
                    // the jobs' accounts differ, and two jobs of one account
                    // never rebalance (whatever their users' ratios).
                    if let Ok(Allowed::Rebalance(r)) = &ab {
                        prop_assert!(matches!(fs.nodes[r.preemptor_side].kind, NodeKind::Account));
                        prop_assert!(matches!(fs.nodes[r.victim_side].kind, NodeKind::Account));
                        prop_assert_ne!(&names[a].0, &names[b].0);
                        // In weighted GPUs: the preemptor's side is below its
                        // entitlement, and the entitlement clause leaves the
                        // victim's side at least its own without the victim.
                        let ps = &st.nodes[r.preemptor_side];
                        prop_assert!(ps.held < ps.entitled, "{:?}", ps);
                        if r.clause == Clause::Entitlement {
                            let left = r.victim_side_held - as_running(b).weighted_gpus();
                            prop_assert!(left >= r.victim_side_entitled - 1e-9, "{:?}", r);
                        }
                    }
                    if names[a].0 == names[b].0 {
                        prop_assert!(!matches!(ab, Ok(Allowed::Rebalance(_))), "{:?}", ab);
                    }
                    let vb = as_running(b);
                    if is_protected(vb.run_start, vb.min_runtime, vb.free_tier, now) {
                        prop_assert!(ab.is_err());
                    }
                    // A victim of a PreemptMode=OFF partition is never taken,
                    // whoever asks, and the refusal names the partition.
                    if jobs[b].11 {
                        prop_assert_eq!(&ab, &Err(Denied::PartitionPreemptOff { partition: "frozen".into() }));
                    }
                    // The partition order, when both tiers are known: a lower
                    // tier never takes a higher one; a higher one takes an
                    // unprotected non-free victim whatever the budgets say.
                    let (pt, vt) = (jobs[a].10.0, jobs[b].10.0);
                    let tiers = pt.zip(vt);
                    if tiers.is_some_and(|(p, v)| p < v) {
                        prop_assert!(ab.is_err(), "{:?}", ab);
                    }
                    // The QOS order, when both QOS are known: a QOS listed by
                    // the victim's never takes it (a loop: neither takes the
                    // other); one that lists the victim's takes it.
                    let qos = qos_view(jobs[a].10.1).zip(qos_view(jobs[b].10.1));
                    let qos_lower = qos.is_some_and(|(p, v)| v.lists(&p));
                    let qos_lists = qos.is_some_and(|(p, v)| p.lists(&v));
                    if qos_lower {
                        prop_assert!(ab.is_err(), "{:?}", ab);
                    }
                    // Either order's refusal wins over the other's allowance.
                    let refused = tiers.is_some_and(|(p, v)| p < v) || qos_lower;
                    let open = !refused && !jobs[a].2 && !vb.free_tier && !jobs[b].11
                        && !is_protected(vb.run_start, vb.min_runtime, false, now);
                    if open && tiers.is_some_and(|(p, v)| p > v) {
                        prop_assert!(matches!(ab, Ok(Allowed::HigherPartitionTier { .. })), "{:?}", ab);
                    }
                    if open && tiers.is_none_or(|(p, v)| p <= v) && qos_lists {
                        prop_assert!(matches!(ab, Ok(Allowed::QosPreemptList { .. })), "{:?}", ab);
                    }
                    // Safe mode: only free-tier jobs yield, lower partition
                    // tiers and listed QOS (the site's orders need no snapshot).
                    for d in [decide(&safe, None, &none, &as_pending(a), &vb, now), decide(&st, None, &none, &as_pending(a), &vb, now)] {
                        if d.is_ok() {
                            let lower = tiers.is_some_and(|(p, v)| p > v) || qos_lists;
                            prop_assert!((vb.free_tier || lower) && !jobs[a].2 && !jobs[b].11);
                        }
                    }
                }
            }
        }
    }
}
