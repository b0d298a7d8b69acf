//! The Slurm priority number: tier, then fair-share rank, then age (docs/design.md §4).
//!
//! A `u32` is split into three fields so that `squeue -o %Q` orders jobs
//! exactly as the policy does and a reader can decode it by eye:
//! `tier base (1e9, 2e9, 3e9) + rank level x 10,000 + age in minutes (< 10,000)`.
//! The result is never 0, which Slurm reads as "held".

use serde::{Deserialize, Serialize};

use crate::fairshare::Tier;

/// Priority base of each tier; higher tiers get higher bases.
pub const fn tier_base(tier: Tier) -> u32 {
    match tier {
        Tier::Budgeted => 3_000_000_000,
        Tier::OverBudget => 2_000_000_000,
        Tier::Free => 1_000_000_000,
    }
}

/// Span of the age field; age saturates at `AGE_SPAN - 1` minutes (~6.9 days).
pub const AGE_SPAN: u32 = 10_000;
/// Seconds per age step.
pub const AGE_UNIT_SECS: i64 = 60;
/// Largest rank level that still fits below the next tier's base.
pub const MAX_RANK_LEVEL: u32 = 99_999;

/// The decoded fields of a priority.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct PriorityParts {
    pub tier: Tier,
    /// `num_leaves - rank`, so the best leaf has the highest level.
    pub rank_level: u32,
    /// Age in minutes since eligibility, saturated.
    pub age_minutes: u32,
}

/// Composes the priority of a pending job.
/// `rank` is the job's leaf rank (0 = best) among `num_leaves`.
pub fn job_priority(tier: Tier, rank: u32, num_leaves: u32, age_secs: i64) -> u32 {
    let parts = priority_parts(tier, rank, num_leaves, age_secs);
    tier_base(parts.tier) + parts.rank_level * AGE_SPAN + parts.age_minutes
}

/// The fields [`job_priority`] adds up.
pub fn priority_parts(tier: Tier, rank: u32, num_leaves: u32, age_secs: i64) -> PriorityParts {
    let rank_level = num_leaves.saturating_sub(rank).min(MAX_RANK_LEVEL);
    let age_minutes = (age_secs.max(0) / AGE_UNIT_SECS).min(i64::from(AGE_SPAN - 1)) as u32;
    PriorityParts {
        tier,
        rank_level,
        age_minutes,
    }
}

/// Decodes a priority made by [`job_priority`]; `None` for other numbers.
pub fn decode_priority(priority: u32) -> Option<PriorityParts> {
    let tier = match priority / 1_000_000_000 {
        3 => Tier::Budgeted,
        2 => Tier::OverBudget,
        1 => Tier::Free,
        _ => return None,
    };
    let rest = priority % 1_000_000_000;
    Some(PriorityParts {
        tier,
        rank_level: rest / AGE_SPAN,
        age_minutes: rest % AGE_SPAN,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn tier_then_rank_then_age(
            t1 in 0usize..3, t2 in 0usize..3, r1 in 0u32..200_000, r2 in 0u32..200_000,
            n in 0u32..200_000, a1 in -10i64..2_000_000, a2 in -10i64..2_000_000,
        ) {
            let tiers = [Tier::Budgeted, Tier::OverBudget, Tier::Free];
            let p1 = job_priority(tiers[t1], r1, n, a1);
            let p2 = job_priority(tiers[t2], r2, n, a2);
            prop_assert!(p1 > 0);
            if t1 < t2 { prop_assert!(p1 > p2); }
            if t1 == t2 && r1 < r2 && r1 < n && n - r1 <= MAX_RANK_LEVEL { prop_assert!(p1 > p2); }
            let d = decode_priority(p1).unwrap();
            prop_assert_eq!(d, priority_parts(tiers[t1], r1, n, a1));
        }
    }
}
