//! What the preemption rules need to know about a job ([`JobView`]) and the
//! judgements on it they share: its tier ([`job_tier`]), how far over share its
//! side is ([`over_share`]), and whether a maintenance drain may take it
//! ([`drain_may_take`]: any job past its protected window).
//!
//! Slurm's own machinery (`PreemptMode=REQUEUE`) carries preemption out. Who
//! may preempt whom is the cost-aware rule's ([`crate::rebalance::decide`],
//! docs/design.md §6). Without a fresh fair-share snapshot (safe mode,
//! docs/design.md §9.3) [`job_tier`] ranks every non-free job over budget, as
//! it does a job of an account the snapshot does not know.

use crate::fairshare::{FairShare, Tier};
use crate::protection::is_protected;

/// What the rule needs to know about a job.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobView<'a> {
    pub job_id: u32,
    pub account: &'a str,
    pub user: &'a str,
    /// Opted into the free tier.
    pub free_tier: bool,
    /// Start of the current run (running jobs); ignored for pending ones.
    pub run_start: i64,
    /// Declared minimum runtime in seconds.
    pub min_runtime: i64,
    pub gpus: u32,
}

/// Tier of a job from its opt-in and the snapshot (unknown accounts and safe
/// mode: over budget, the most conservative non-free tier).
pub fn job_tier(fs: Option<&FairShare>, job: &JobView<'_>) -> Tier {
    if job.free_tier {
        return Tier::Free;
    }
    fs.and_then(|fs| fs.place(job.account, job.user))
        .map(|p| p.tier)
        .unwrap_or(Tier::OverBudget)
}

/// Whether a maintenance drain may requeue `victim` now.
pub fn drain_may_take(victim: &JobView<'_>, now: i64) -> bool {
    !is_protected(victim.run_start, victim.min_runtime, victim.free_tier, now)
}

/// Highest ratio among the budget-bearing nodes on the victim's path: how far
/// "over share" the victim's side is.
pub fn over_share(fs: Option<&FairShare>, job: &JobView<'_>) -> f64 {
    let Some(fs) = fs else { return 0.0 };
    let Some(place) = fs.place(job.account, job.user) else {
        return 0.0;
    };
    over_share_at(fs, place.node)
}

/// [`over_share`] of a job placed at `node` of `fs` (the node
/// [`FairShare::place`] gives its account and user), without looking the
/// names up: the highest ratio among the budget-bearing nodes from `node` up
/// to the root (0 for a node `fs` does not have).
pub fn over_share_at(fs: &FairShare, node: usize) -> f64 {
    let mut over = 0.0;
    let mut cur = Some(node);
    let mut steps = 0;
    while let Some(i) = cur {
        let Some(n) = fs.nodes.get(i) else { break };
        // A malformed tree with a cycle stops after one walk over the nodes.
        steps += 1;
        if steps > fs.nodes.len() {
            break;
        }
        if n.budget_bearing {
            over = f64::max(over, n.ratio);
        }
        cur = n.parent;
    }
    over
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::{job, two_teams};

    #[test]
    fn tiers_from_opt_in_and_snapshot() {
        let fs = two_teams(10.0, 120.0);
        let a = job(1, "a", "ua", false, 0, 0, 1);
        let b = job(2, "b", "ub", false, 0, 0, 1);
        assert_eq!(job_tier(Some(&fs), &a), Tier::Budgeted);
        assert_eq!(job_tier(Some(&fs), &b), Tier::OverBudget);
        // The opt-in wins over the snapshot.
        assert_eq!(
            job_tier(Some(&fs), &job(3, "a", "ua", true, 0, 0, 1)),
            Tier::Free
        );
        assert_eq!(
            job_tier(None, &job(3, "a", "ua", true, 0, 0, 1)),
            Tier::Free
        );
        // Unknown accounts and safe mode: over budget.
        assert_eq!(
            job_tier(Some(&fs), &job(4, "x", "ux", false, 0, 0, 1)),
            Tier::OverBudget
        );
        assert_eq!(job_tier(None, &a), Tier::OverBudget);
    }

    #[test]
    fn over_share_is_the_highest_ratio_on_the_path() {
        let fs = two_teams(10.0, 80.0);
        let a = job(1, "a", "ua", false, 0, 0, 1);
        let b = job(2, "b", "ub", false, 0, 0, 1);
        assert!((over_share(Some(&fs), &a) - 0.1).abs() < 1e-9);
        assert!((over_share(Some(&fs), &b) - 0.8).abs() < 1e-9);
        assert_eq!(
            over_share(Some(&fs), &job(3, "x", "ux", false, 0, 0, 1)),
            0.0
        );
        assert_eq!(over_share(None, &b), 0.0);
        // Placed already: the same figure without the name lookup.
        for j in [&a, &b] {
            let node = fs.place(j.account, j.user).unwrap().node;
            assert_eq!(over_share_at(&fs, node), over_share(Some(&fs), j));
        }
        assert_eq!(over_share_at(&fs, fs.nodes.len()), 0.0);
    }

    #[test]
    fn a_drain_takes_only_jobs_past_their_window() {
        let r = job(1, "a", "ua", false, 0, 600, 8);
        assert!(!drain_may_take(&r, 0));
        assert!(!drain_may_take(&r, 599));
        assert!(drain_may_take(&r, 600));
        // Free-tier jobs have no window.
        assert!(drain_may_take(&job(2, "a", "ua", true, 599, 3600, 1), 600));
    }
}
