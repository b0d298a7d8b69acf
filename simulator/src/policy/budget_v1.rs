//! The old preemption rule, kept only as the simulator's `budget-v1` baseline
//! so that its figures reproduce: preempt as soon as allowed, on live holdings.
//! The product (budgetd, `preempt/budget`, the `budget` policy here) decides
//! with the cost-aware rule ([`policy_core::rebalance::decide`]).
//!
//! A running job R may be preempted by a pending job P only if R is past its
//! protected window and one of:
//! - R is free tier and P is not;
//! - R is over budget and P is budgeted;
//! - both budgeted: where their paths split, P's side has a ratio lower than
//!   R's side by more than the hysteresis, and R's side holds more GPUs than
//!   its entitled share of that parent.
//!
//! When the fair-share snapshot is missing or stale the rule degrades to safe
//! mode (docs/design.md §9.3): contracts hold, budgeted jobs are never rebalanced,
//! free-tier jobs stay preemptable. Victims are taken in [`victim_order`].
//!
//! The rule is antisymmetric in any one state: see the property tests.

use policy_core::fairshare::{FairShare, Tier};
use policy_core::preempt::{JobView, job_tier, over_share};
use policy_core::protection::{is_protected, protected_until};

/// Policy knobs of the rule.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PreemptPolicy {
    /// P's side must have a ratio lower than R's side by more than this.
    pub hysteresis: f64,
}

impl Default for PreemptPolicy {
    fn default() -> Self {
        Self { hysteresis: 0.1 }
    }
}

/// The state a decision is taken in.
#[derive(Debug, Clone, Copy)]
pub struct Context<'a> {
    /// `None` in safe mode (no fresh snapshot).
    pub fair_share: Option<&'a FairShare>,
    /// GPUs held per node of `fair_share` ([`FairShare::holdings`]).
    pub held: &'a [u32],
    pub policy: PreemptPolicy,
    pub now: i64,
}

/// Why a preemption is allowed.
#[derive(Debug, Clone, PartialEq)]
pub enum Allowed {
    VictimFreeTier,
    VictimOverBudget,
    /// Both budgeted; their paths split below the tree node `parent`, into
    /// the sides `preemptor_side` and `victim_side` (node indexes of the
    /// fair-share tree: the baseline only orders by the clause, and what
    /// budgetd reports is `budget_protocol::why::PeerReason`, of the rule).
    Rebalance {
        parent: usize,
        preemptor_side: usize,
        victim_side: usize,
    },
}

/// Why a preemption is refused.
#[derive(Debug, Clone, PartialEq)]
pub enum Denied {
    /// The victim is inside its protected window.
    Protected { until: i64 },
    /// Free-tier jobs never preempt.
    PreemptorFree,
    /// The preemptor ranks no higher than the victim by tier.
    PreemptorTierNotHigher { preemptor: Tier, victim: Tier },
    /// Safe mode: no fresh fair-share snapshot, only free-tier jobs yield.
    SafeMode,
    /// An account is not in the snapshot.
    UnknownAccount { account: String },
    /// Same leaf, or one path contains the other: nothing to rebalance.
    SameSide,
    /// The preemptor's side is not lower by more than the hysteresis.
    RatioGapTooSmall {
        preemptor_ratio: f64,
        victim_ratio: f64,
        hysteresis: f64,
    },
    /// The victim's side does not hold more than its entitled share.
    VictimWithinShare { held: u32, entitled: f64 },
}

/// A decision with its reason.
pub type Decision = Result<Allowed, Denied>;

/// Whether `preemptor` (pending) may preempt `victim` (running), and why.
pub fn may_preempt(ctx: &Context<'_>, preemptor: &JobView<'_>, victim: &JobView<'_>) -> Decision {
    if is_protected(
        victim.run_start,
        victim.min_runtime,
        victim.free_tier,
        ctx.now,
    ) {
        return Err(Denied::Protected {
            until: protected_until(victim.run_start, victim.min_runtime),
        });
    }
    if preemptor.free_tier {
        return Err(Denied::PreemptorFree);
    }
    if victim.free_tier {
        return Ok(Allowed::VictimFreeTier);
    }
    let Some(fs) = ctx.fair_share else {
        return Err(Denied::SafeMode);
    };
    let p_place =
        fs.place(preemptor.account, preemptor.user)
            .ok_or_else(|| Denied::UnknownAccount {
                account: preemptor.account.to_string(),
            })?;
    let v_place = fs
        .place(victim.account, victim.user)
        .ok_or_else(|| Denied::UnknownAccount {
            account: victim.account.to_string(),
        })?;
    let h = ctx.policy.hysteresis.max(0.0);
    match (p_place.tier, v_place.tier) {
        (Tier::Budgeted, Tier::OverBudget) => return Ok(Allowed::VictimOverBudget),
        (Tier::Budgeted, Tier::Budgeted) => {}
        (p, v) => {
            return Err(Denied::PreemptorTierNotHigher {
                preemptor: p,
                victim: v,
            });
        }
    }
    let p_path = fs.path(p_place.node);
    let v_path = fs.path(v_place.node);
    let split = p_path
        .iter()
        .zip(&v_path)
        .take_while(|(a, b)| a == b)
        .count();
    let (Some(&p_side), Some(&v_side)) = (p_path.get(split), v_path.get(split)) else {
        return Err(Denied::SameSide);
    };
    let parent = v_path[split - 1];
    let (p_ratio, v_ratio) = (fs.nodes[p_side].ratio, fs.nodes[v_side].ratio);
    // Written as ">=" so a NaN ratio (impossible from `compute`, but this is
    // the rule's last line of defence) also refuses.
    if p_ratio >= v_ratio - h || p_ratio.is_nan() || v_ratio.is_nan() {
        return Err(Denied::RatioGapTooSmall {
            preemptor_ratio: p_ratio,
            victim_ratio: v_ratio,
            hysteresis: h,
        });
    }
    let sibling_alloc: f64 = fs.nodes[parent]
        .children
        .iter()
        .map(|&c| fs.nodes[c].allocation)
        .sum();
    let held_parent = ctx.held.get(parent).copied().unwrap_or(0);
    let held_side = ctx.held.get(v_side).copied().unwrap_or(0);
    let entitled = if sibling_alloc > 0.0 {
        f64::from(held_parent) * fs.nodes[v_side].allocation / sibling_alloc
    } else {
        0.0
    };
    if f64::from(held_side) <= entitled {
        return Err(Denied::VictimWithinShare {
            held: held_side,
            entitled,
        });
    }
    Ok(Allowed::Rebalance {
        parent,
        preemptor_side: p_side,
        victim_side: v_side,
    })
}

/// Victim order as a `u32` for Slurm's candidate sort (ascending: the lowest
/// value is preempted first): free tier first, then the most over share, then
/// the least work lost (GPUs x seconds of the current run: a young 128-GPU run
/// loses more than an older 1-GPU run). Counting GPUs matters: ordering by run
/// age alone took large young runs first and livelocked the Philly replay at
/// 83% load (1.5 M preemptions, 8,836 jobs never finished); with GPU-seconds,
/// 3,227 preemptions and every job finishes (`docs/simulator-results.md`).
pub fn victim_order(fs: Option<&FairShare>, victim: &JobView<'_>, now: i64) -> u32 {
    let tier_part: u32 = match job_tier(fs, victim) {
        Tier::Free => 0,
        Tier::OverBudget => 1,
        Tier::Budgeted => 2,
    };
    const FIELD: u32 = (1 << 15) - 1;
    let over = (over_share(fs, victim) * 1000.0).clamp(0.0, f64::from(FIELD)) as u32;
    let over_part = FIELD - over;
    // log2 compresses 1 GPU-second .. ~10^9 GPU-seconds into 15 bits while
    // keeping the order (x1000 keeps sub-doubling resolution).
    let lost = (now - victim.run_start).max(0) as f64 * f64::from(victim.gpus.max(1));
    let lost_part = ((1.0 + lost).log2() * 1000.0).min(f64::from(FIELD)) as u32;
    (tier_part << 30) | (over_part << 15) | lost_part
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::fairshare::UsageByLeaf;
    use policy_core::preempt::drain_may_take;
    use policy_core::testkit::{job, nested_tree, two_teams};
    use proptest::prelude::*;

    #[test]
    fn each_clause_of_the_rule() {
        let fs = two_teams(10.0, 80.0);
        let p = job(1, "a", "ua", false, 0, 0, 4);
        let r = job(2, "b", "ub", false, 0, 600, 8);
        let held = fs.holdings([("b", "ub", 8u32)]);
        let ctx = Context {
            fair_share: Some(&fs),
            held: &held,
            policy: PreemptPolicy::default(),
            now: 100,
        };
        assert_eq!(
            may_preempt(&ctx, &p, &r),
            Err(Denied::Protected { until: 600 })
        );
        let ctx = Context { now: 600, ..ctx };
        assert!(matches!(
            may_preempt(&ctx, &p, &r),
            Ok(Allowed::Rebalance { .. })
        ));
        // Reverse direction refused.
        let r2 = job(3, "a", "ua", false, 0, 0, 4);
        let p2 = job(4, "b", "ub", false, 0, 0, 4);
        assert!(may_preempt(&ctx, &p2, &r2).is_err());
        // Free victims go to anyone non-free, even inside "their window".
        let f = job(5, "b", "ub", true, 599, 3600, 1);
        assert_eq!(may_preempt(&ctx, &p2, &f), Ok(Allowed::VictimFreeTier));
        assert_eq!(may_preempt(&ctx, &f, &r2), Err(Denied::PreemptorFree));
        // Safe mode: only free-tier victims.
        let safe = Context {
            fair_share: None,
            ..ctx
        };
        assert_eq!(may_preempt(&safe, &p, &r), Err(Denied::SafeMode));
        assert_eq!(may_preempt(&safe, &p, &f), Ok(Allowed::VictimFreeTier));
        // Over budget victim.
        let fs = two_teams(10.0, 120.0);
        let ctx = Context {
            fair_share: Some(&fs),
            ..ctx
        };
        assert_eq!(may_preempt(&ctx, &p, &r), Ok(Allowed::VictimOverBudget));
    }

    #[test]
    fn hysteresis_and_share_guard() {
        let fs = two_teams(50.0, 55.0);
        let held = fs.holdings([("b", "ub", 8u32)]);
        let ctx = Context {
            fair_share: Some(&fs),
            held: &held,
            policy: PreemptPolicy { hysteresis: 0.1 },
            now: 0,
        };
        let p = job(1, "a", "ua", false, 0, 0, 1);
        let r = job(2, "b", "ub", false, 0, 0, 8);
        assert!(matches!(
            may_preempt(&ctx, &p, &r),
            Err(Denied::RatioGapTooSmall { .. })
        ));
        let fs = two_teams(10.0, 80.0);
        // b holds 4 of 8 held GPUs: exactly its entitled half, so it keeps them.
        let held = fs.holdings([("b", "ub", 4u32), ("a", "ua", 4)]);
        let ctx = Context {
            fair_share: Some(&fs),
            held: &held,
            ..ctx
        };
        assert!(matches!(
            may_preempt(&ctx, &p, &r),
            Err(Denied::VictimWithinShare { .. })
        ));
    }

    #[test]
    fn victim_order_free_then_over_share_then_youngest() {
        let fs = two_teams(10.0, 80.0);
        let free = job(1, "a", "ua", true, 0, 0, 1);
        let b_old = job(2, "b", "ub", false, 0, 0, 1);
        let b_young = job(3, "b", "ub", false, 3000, 0, 1);
        let a_young = job(4, "a", "ua", false, 3000, 0, 1);
        let now = 3600;
        let o = |j| victim_order(Some(&fs), j, now);
        assert!(o(&free) < o(&b_young));
        assert!(o(&b_young) < o(&b_old));
        assert!(o(&b_old) < o(&a_young), "b is more over share than a");
        // Least work lost counts GPUs: 8 GPUs for 10 min lose more than 1 GPU for 60 min.
        let b_big_young = job(5, "b", "ub", false, 3000, 0, 8);
        assert!(o(&b_old) < o(&b_big_young));
    }

    /// (allocation, usage, unused) per account.
    type AccountGen = (u32, u32, u32);
    /// (account, user, free, run start, min runtime, GPUs) per job.
    type JobGen = (usize, usize, bool, i64, i64, u32);

    fn arb_state() -> impl Strategy<Value = (Vec<AccountGen>, Vec<JobGen>, i64, f64)> {
        (
            proptest::collection::vec((0u32..200, 0u32..300, 0u32..20), 4),
            proptest::collection::vec(
                (
                    0usize..4,
                    0usize..3,
                    any::<bool>(),
                    0i64..1000,
                    0i64..1000,
                    1u32..9,
                ),
                2..10,
            ),
            0i64..2000,
            0.0f64..0.5,
        )
    }

    proptest! {
        /// In any one state the rule never allows both A->B and B->A, and
        /// never lets anyone take a job inside its protected window.
        #[test]
        fn antisymmetric_and_respects_contracts((accts, jobs, now, h) in arb_state()) {
            let tree = nested_tree(&accts);
            let mut usage = UsageByLeaf::new();
            for (i, &(_, used, _)) in accts.iter().enumerate() {
                usage.insert((format!("a{i}"), "u0".into()), f64::from(used) * 3600.0);
            }
            let fs = FairShare::compute(&tree, &usage, now, policy_core::DEFAULT_WINDOW_SECS);
            let names: Vec<(String, String)> = jobs.iter().map(|&(a, u, ..)| (format!("a{a}"), format!("u{u}"))).collect();
            let views: Vec<JobView<'_>> = jobs.iter().zip(&names).enumerate().map(|(i, (&(_, _, free, start, min, gpus), (a, u)))| {
                JobView { job_id: i as u32, account: a, user: u, free_tier: free, run_start: start, min_runtime: min, gpus }
            }).collect();
            let held = fs.holdings(views.iter().map(|v| (v.account, v.user, v.gpus)));
            for fair_share in [Some(&fs), None] {
                let ctx = Context { fair_share, held: &held, policy: PreemptPolicy { hysteresis: h }, now };
                for a in &views {
                    for b in &views {
                        let ab = may_preempt(&ctx, a, b).is_ok();
                        let ba = may_preempt(&ctx, b, a).is_ok();
                        // Both directions can only pass when both runs are
                        // unprotected and neither is "the preemptor" in a
                        // meaningful sense; the rule forbids it outright.
                        prop_assert!(!(ab && ba), "loop between {} and {}", a.job_id, b.job_id);
                        if is_protected(b.run_start, b.min_runtime, b.free_tier, now) {
                            prop_assert!(!ab);
                            prop_assert!(!drain_may_take(b, now));
                        }
                    }
                }
            }
        }
    }
}
