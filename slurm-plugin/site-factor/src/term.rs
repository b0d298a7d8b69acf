//! The site factor of one job: the budget order (tier, then fair-share rank) as the
//! number `priority/multifactor` adds to its weighted sum. Pure: no Slurm types but the
//! placement, no I/O.
//!
//! multifactor adds `site_factor - NICE_OFFSET` to the sum of its weighted factors
//! (each factor in `[0, 1]` times its weight), clamps the total to `[1, 2^32 - 1]`,
//! and `sprio` shows `site_factor - NICE_OFFSET` in its SITE column. The term is
//! therefore kept in `0..=MAX_TERM` (never negative: a job's own priority never drops
//! below what multifactor alone gives it).
//!
//! Two modes ([`Mode`], from `PrioritySiteFactorParameters`):
//! - `dominant`: one rank step is larger than all of multifactor's weights together,
//!   and a tier spans every rank, so tier, then rank, decide the order; the site's
//!   factors (QOS, partition, age, ...) order jobs of the same tier and rank;
//! - `factor`: the budget order scaled to `[0, weight]`, one weighted factor among the
//!   others (a budgeted job at the best rank gets `weight`, a free-tier job 0);
//! - `shadow`: no term at all ([`Scale::writes`] is false): the plugin leaves every
//!   job's site factor as Slurm set it and only reports the order.

use policy_core::Tier;
use slurm_plugin_common::order::compute::Placement;

/// Largest term: `site_factor = NICE_OFFSET + term` stays a `u32`.
pub const MAX_TERM: u32 = i32::MAX as u32;

/// How the budget order combines with multifactor's factors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Tiers, then ranks, above everything else multifactor adds.
    Dominant,
    /// The budget order as one factor of weight `weight` (`1..=MAX_TERM`).
    Factor { weight: u32 },
    /// Observe only: the order is reported to budgetd, no site factor is written.
    Shadow,
}

/// The mode with the figures it needs, computed once per (re)configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// `step`: one rank (more than the sum of multifactor's weights); `levels`: rank
    /// levels per tier (ranks are compressed into them on a tree too large to fit).
    Dominant {
        step: u32,
        levels: u32,
    },
    Factor {
        weight: u32,
    },
    /// `mode=shadow`: the term is 0 and the plugin writes none.
    Shadow,
}

/// Tier as a level: free 0, over budget 1, budgeted 2.
fn tier_level(t: Tier) -> u32 {
    match t {
        Tier::Free => 0,
        Tier::OverBudget => 1,
        Tier::Budgeted => 2,
    }
}

impl Scale {
    /// The scale of `mode` when multifactor's weights add up to `weights` (a job's
    /// weighted factors are at most that). `None`: `dominant` cannot put even the
    /// three tiers above weights that large.
    pub fn new(mode: Mode, weights: u64) -> Option<Scale> {
        match mode {
            Mode::Factor { weight } => Some(Scale::Factor { weight }),
            Mode::Shadow => Some(Scale::Shadow),
            Mode::Dominant => {
                let step = weights.checked_add(1)?;
                // 3 tiers x (levels + 1) rank scores x step <= MAX_TERM.
                let per_tier = u64::from(MAX_TERM) / 3 / step;
                if per_tier == 0 {
                    return None;
                }
                Some(Scale::Dominant {
                    step: u32::try_from(step).ok()?,
                    levels: u32::try_from(per_tier - 1).unwrap_or(u32::MAX),
                })
            }
        }
    }

    /// The term (without `NICE_OFFSET`) of a job placed at `p`.
    pub fn term(&self, p: &Placement) -> u32 {
        let tier = tier_level(p.tier);
        // 0 (worst) ..= num_leaves (best); an unplaced job has rank == num_leaves.
        let leaves = p.num_leaves;
        let score = leaves.saturating_sub(p.rank.min(leaves));
        match *self {
            Scale::Dominant { step, levels } => {
                let score = if leaves <= levels {
                    score
                } else {
                    (u64::from(score) * u64::from(levels) / u64::from(leaves)) as u32
                };
                let t = (u64::from(tier) * (u64::from(levels) + 1) + u64::from(score))
                    * u64::from(step);
                t.min(u64::from(MAX_TERM)) as u32
            }
            Scale::Factor { weight } => {
                let span = u64::from(leaves) + 1;
                let num = u64::from(tier) * span + u64::from(score);
                let den = 3 * span - 1;
                (u64::from(weight) * num / den).min(u64::from(MAX_TERM)) as u32
            }
            Scale::Shadow => 0,
        }
    }

    /// Whether the plugin writes site factors (every mode but `shadow`).
    pub fn writes(&self) -> bool {
        !matches!(self, Scale::Shadow)
    }

    /// `job_record_t::site_factor` for a job placed at `p`.
    pub fn site_factor(&self, p: &Placement) -> u32 {
        slurm_ffi::NICE_OFFSET.saturating_add(self.term(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(tier: Tier, rank: u32, num_leaves: u32) -> Placement {
        Placement {
            tier,
            rank,
            num_leaves,
            placed: true,
        }
    }

    #[test]
    fn dominant_ranks_above_the_sum_of_weights() {
        // multifactor's weights: age, fair share, QOS 1000 each.
        let s = Scale::new(Mode::Dominant, 3000).expect("scale");
        let Scale::Dominant { step, levels } = s else {
            panic!("{s:?}")
        };
        assert_eq!(step, 3001);
        assert!(levels > 1000);
        let (best, next) = (at(Tier::Budgeted, 0, 10), at(Tier::Budgeted, 1, 10));
        // One rank apart: more than every other factor together.
        assert!(s.term(&best) - s.term(&next) > 3000);
        // The worst budgeted rank above the best over-budget one, above free.
        let worst = at(Tier::Budgeted, 10, 10);
        let over = at(Tier::OverBudget, 0, 10);
        let free = at(Tier::Free, 0, 10);
        assert!(s.term(&worst) > s.term(&over) + 3000);
        assert!(s.term(&over) > s.term(&free) + 3000);
        assert_eq!(s.term(&at(Tier::Free, 10, 10)), 0);
        assert!(s.term(&best) <= MAX_TERM);
        assert_eq!(
            s.site_factor(&at(Tier::Free, 10, 10)),
            slurm_ffi::NICE_OFFSET
        );
    }

    #[test]
    fn dominant_compresses_ranks_of_a_tree_too_large() {
        // 10^6 of weights: 714 rank levels per tier; a tree of 100,000 leaves.
        let s = Scale::new(Mode::Dominant, 1_000_000).expect("scale");
        let Scale::Dominant { levels, .. } = s else {
            panic!("{s:?}")
        };
        assert_eq!(levels, 714);
        let n = 100_000;
        let terms: Vec<u32> = [0, 50_000, n]
            .iter()
            .map(|&r| s.term(&at(Tier::Budgeted, r, n)))
            .collect();
        assert!(terms[0] > terms[1] && terms[1] > terms[2], "{terms:?}");
        assert!(s.term(&at(Tier::Budgeted, n, n)) > s.term(&at(Tier::OverBudget, 0, n)));
        assert!(terms[0] <= MAX_TERM);
        // Weights too large for even three tiers: no scale.
        assert_eq!(Scale::new(Mode::Dominant, u64::from(MAX_TERM)), None);
    }

    #[test]
    fn factor_scales_the_order_to_its_weight() {
        let s = Scale::new(Mode::Factor { weight: 5000 }, 3000).expect("scale");
        assert_eq!(s.term(&at(Tier::Budgeted, 0, 4)), 5000);
        assert_eq!(s.term(&at(Tier::Free, 4, 4)), 0);
        let order = [
            at(Tier::Budgeted, 0, 4),
            at(Tier::Budgeted, 3, 4),
            at(Tier::OverBudget, 0, 4),
            at(Tier::OverBudget, 4, 4),
            at(Tier::Free, 0, 4),
        ];
        let terms: Vec<u32> = order.iter().map(|p| s.term(p)).collect();
        assert!(terms.windows(2).all(|w| w[0] > w[1]), "{terms:?}");
        // No snapshot yet (no leaves): budgeted jobs share the top, free ones 0.
        assert_eq!(s.term(&at(Tier::Budgeted, 0, 0)), 5000);
        assert_eq!(s.term(&at(Tier::OverBudget, 0, 0)), 2500);
        let shadow = Scale::new(Mode::Shadow, u64::from(MAX_TERM)).expect("scale");
        assert!(!shadow.writes() && s.writes());
        assert_eq!(shadow.term(&at(Tier::Budgeted, 0, 4)), 0);
        let max = Scale::new(Mode::Factor { weight: MAX_TERM }, 0).expect("scale");
        assert_eq!(max.site_factor(&at(Tier::Budgeted, 0, 9)), u32::MAX);
    }
}
