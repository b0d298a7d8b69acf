//! Slurm's Fair Tree fair share, the default of `priority/multifactor` since
//! 19.05 (Slurm's `doc/html/fair_tree.shtml`, `priority/multifactor/fair_tree.c`),
//! as a baseline: what a site runs when it does not run this product.
//!
//! # The algorithm ([`rank`])
//! - Usage: each user's charged GPU-seconds, decayed with
//!   `PriorityDecayHalfLife` = `decay_half_life` (7 days, the `decay`
//!   baseline's; [`DecayedUsage`]) at every recalculation
//!   (`PriorityCalcPeriod` = `--recalc-interval`); an account's usage is the
//!   sum of its children's.
//! - Level Fairshare of an association among its siblings: `LF = S / U`, with
//!   `S` its raw shares over the raw shares of itself and its siblings, and
//!   `U` its usage over its parent's (0 when the parent has none). `S = 0`
//!   gives `LF = 0` (last); `U = 0` with `S > 0` gives infinity (first).
//! - A depth-first walk visits siblings by LF, highest first (a user before
//!   an account at equal LF) and numbers users in pre-order, from the number
//!   of users down; a user's fair-share factor is `rank / users` (the best
//!   user 1.0). So every user below a sibling account with a higher LF ranks
//!   above every user below one with a lower LF, at every level.
//! - Ties, as documented: sibling users with equal LF share a rank; a user
//!   with the LF of a sibling account gets the rank of that account's best
//!   user (the walk carries the tie down); sibling accounts with equal LF have
//!   their children merged before they are walked. (Slurm's source counts
//!   tied accounts only up to the first sibling account, so there tied
//!   accounts are walked one after the other instead; the two differ only for
//!   sibling accounts whose LF is exactly equal with usage below them, which
//!   float usage makes vanishingly rare.) Among equal keys Slurm's `qsort`
//!   order is unspecified; here it is the tree's order (teams by name, users
//!   by name), so replays are deterministic.
//!
//! # The simulator's tree and priority
//! root -> one account per team, raw shares = its allocation in GPUs -> one
//! user association per (team, user) of the trace, raw shares 1 (`sacctmgr`'s
//! default `Fairshare=1`: users of an account split it equally, as the
//! product's members without an allocation do). A team without users ranks
//! nothing. Job priority is the fair-share factor, ties by submit time: a
//! site whose `PriorityWeightFairshare` dominates age, as the `decay`
//! baseline is modelled. Never preempts (`PreemptType=preempt/none`).
//! [`super::multifactor_qos`] adds QOS preemption on the same ranking.

use super::decay::DecayedUsage;
use super::{PolicyKind, SchedPolicy};
use crate::config::SimConfig;
use crate::view::{EngineView, JobInit, TeamInfo};

/// One association of Slurm's tree: an account or a user.
#[derive(Debug, Clone, PartialEq)]
pub struct Assoc {
    /// The parent account, an earlier entry of the same slice; `None`: a
    /// child of root. A parent that is not an earlier account counts as root.
    pub parent: Option<usize>,
    /// Raw shares (`Fairshare=`); not finite or below 0 counts as 0.
    pub shares: f64,
    /// A user's raw (decayed) usage; ignored for accounts, whose usage is
    /// their children's. Not finite or below 0 counts as 0.
    pub usage: f64,
    pub user: bool,
}

/// What one Fair Tree calculation gives, indexed like the associations.
#[derive(Debug, Clone, PartialEq)]
pub struct Ranking {
    /// Level Fairshare among siblings (`S / U`; infinite without usage).
    pub level_fs: Vec<f64>,
    /// Rank of each user, from `users` (best) down to 1; 0 for accounts.
    pub rank: Vec<u32>,
    /// Number of user associations.
    pub users: u32,
}

impl Ranking {
    /// The fair-share factor of association `i`: `rank / users` (0 for accounts).
    pub fn factor(&self, i: usize) -> f64 {
        match self.rank.get(i) {
            Some(&r) if self.users > 0 => f64::from(r) / f64::from(self.users),
            _ => 0.0,
        }
    }
}

fn nonneg(x: f64) -> f64 {
    if x.is_finite() && x > 0.0 { x } else { 0.0 }
}

/// The depth-first walk: the ranks given so far, and the next rank without ties.
struct Walk<'a> {
    assocs: &'a [Assoc],
    children: &'a [Vec<usize>],
    level_fs: &'a [f64],
    rank: Vec<u32>,
    /// The rank of the last user ranked (a tied user takes it again).
    current: u32,
    /// The rank the next user gets when it is not tied.
    next: u32,
}

impl Walk<'_> {
    fn level(&mut self, mut siblings: Vec<usize>, account_tied: bool) {
        let (lf, assocs) = (self.level_fs, self.assocs);
        siblings.sort_by(|&a, &b| {
            lf[b]
                .total_cmp(&lf[a])
                .then(assocs[b].user.cmp(&assocs[a].user))
                .then(a.cmp(&b))
        });
        let mut prev: Option<f64> = None;
        let mut i = 0;
        while i < siblings.len() {
            let a = siblings[i];
            let tied = if i == 0 {
                account_tied
            } else {
                prev == Some(lf[a])
            };
            if assocs[a].user {
                if !tied {
                    self.current = self.next;
                }
                self.rank[a] = self.current;
                self.next = self.next.saturating_sub(1);
                i += 1;
            } else {
                // Sibling accounts with the same LF are walked as one.
                let mut merged = self.children[a].clone();
                let mut j = i + 1;
                while let Some(&b) = siblings.get(j) {
                    if assocs[b].user || lf[b] != lf[a] {
                        break;
                    }
                    merged.extend_from_slice(&self.children[b]);
                    j += 1;
                }
                self.level(merged, tied);
                i = j;
            }
            prev = Some(lf[a]);
        }
    }
}

/// Slurm's Fair Tree over `assocs`: each association's Level Fairshare and
/// each user's rank (module doc).
pub fn rank(assocs: &[Assoc]) -> Ranking {
    let n = assocs.len();
    let parent: Vec<Option<usize>> = assocs
        .iter()
        .enumerate()
        .map(|(i, a)| a.parent.filter(|&p| p < i && !assocs[p].user))
        .collect();
    let mut usage: Vec<f64> = assocs
        .iter()
        .map(|a| if a.user { nonneg(a.usage) } else { 0.0 })
        .collect();
    // Parents come first, so one backward pass adds every subtree up.
    for i in (0..n).rev() {
        if let Some(p) = parent[i] {
            usage[p] += usage[i];
        }
    }
    // Children of each account, and of root at index n; shares per level.
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); n + 1];
    let mut level_shares = vec![0.0; n + 1];
    for (i, a) in assocs.iter().enumerate() {
        let slot = parent[i].unwrap_or(n);
        children[slot].push(i);
        level_shares[slot] += nonneg(a.shares);
    }
    let root_usage: f64 = children[n].iter().map(|&i| usage[i]).sum();
    let level_fs: Vec<f64> = (0..n)
        .map(|i| {
            let slot = parent[i].unwrap_or(n);
            let s = if level_shares[slot] > 0.0 {
                nonneg(assocs[i].shares) / level_shares[slot]
            } else {
                0.0
            };
            let above = parent[i].map_or(root_usage, |p| usage[p]);
            let u = if above > 0.0 { usage[i] / above } else { 0.0 };
            // u = 0 with s > 0: infinity, the highest value (Slurm's "NOT A BUG").
            if s == 0.0 { 0.0 } else { s / u }
        })
        .collect();
    let users = u32::try_from(assocs.iter().filter(|a| a.user).count()).unwrap_or(u32::MAX);
    let top = std::mem::take(&mut children[n]);
    let mut walk = Walk {
        assocs,
        children: &children,
        level_fs: &level_fs,
        rank: vec![0; n],
        current: users,
        next: users,
    };
    walk.level(top, false);
    Ranking {
        rank: walk.rank,
        level_fs,
        users,
    }
}

/// The Fair Tree state both Slurm baselines keep: each user's decayed usage
/// and the ranking of the last recalculation.
pub(crate) struct FairTreeState {
    usage: DecayedUsage,
    /// The teams' accounts (in team order), then one user per leaf.
    assocs: Vec<Assoc>,
    teams: usize,
    ranking: Option<Ranking>,
}

impl FairTreeState {
    pub fn new(cfg: &SimConfig, teams: &[TeamInfo], leaves: &[(String, String)]) -> Self {
        let mut assocs: Vec<Assoc> = teams
            .iter()
            .map(|t| Assoc {
                parent: None,
                shares: t.gpus,
                usage: 0.0,
                user: false,
            })
            .collect();
        assocs.extend(leaves.iter().map(|(team, _)| Assoc {
            parent: teams.iter().position(|t| &t.name == team),
            shares: 1.0,
            usage: 0.0,
            user: true,
        }));
        FairTreeState {
            usage: DecayedUsage::new(cfg.decay_half_life, leaves.len()),
            assocs,
            teams: teams.len(),
            ranking: None,
        }
    }

    /// A recalculation (`PriorityCalcPeriod`): decay, add new usage, rank.
    pub fn recompute(&mut self, sim: &EngineView<'_>) {
        self.usage.advance(sim.now, sim.leaf_cumulative(sim.now));
        for (a, &u) in self.assocs[self.teams..].iter_mut().zip(&self.usage.usage) {
            a.usage = u;
        }
        self.ranking = Some(rank(&self.assocs));
    }

    /// The rank of a leaf's user at the last recalculation (0 before any).
    pub fn leaf_rank(&self, leaf: u32) -> u32 {
        self.ranking
            .as_ref()
            .and_then(|r| r.rank.get(self.teams + leaf as usize).copied())
            .unwrap_or(0)
    }

    /// A team account's Level Fairshare at the last recalculation (`None` before any).
    pub fn team_level_fs(&self, team: u32) -> Option<f64> {
        self.ranking
            .as_ref()
            .and_then(|r| r.level_fs.get(team as usize).copied())
    }
}

/// `fair-tree`: Fair Tree rank, then age; never preempts.
pub(crate) struct FairTree {
    state: FairTreeState,
    leaves: usize,
}

impl FairTree {
    pub fn new(cfg: &SimConfig, teams: &[TeamInfo], leaves: &[(String, String)]) -> Self {
        FairTree {
            state: FairTreeState::new(cfg, teams, leaves),
            leaves: leaves.len(),
        }
    }
}

impl SchedPolicy for FairTree {
    fn kind(&self) -> PolicyKind {
        PolicyKind::FairTree
    }

    fn num_classes(&self) -> usize {
        self.leaves
    }

    fn initial_priorities(&self) -> Vec<u64> {
        vec![0; self.leaves]
    }

    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str) {
        (job.leaf, false, "all")
    }

    fn recompute(&mut self, sim: &EngineView<'_>, _window_usage: &[i64], class_prio: &mut [u64]) {
        self.state.recompute(sim);
        for (leaf, p) in class_prio.iter_mut().enumerate() {
            *p = u64::from(self.state.leaf_rank(leaf as u32));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn account(shares: f64) -> Assoc {
        Assoc {
            parent: None,
            shares,
            usage: 0.0,
            user: false,
        }
    }

    fn user(parent: usize, usage: f64) -> Assoc {
        Assoc {
            parent: Some(parent),
            shares: 1.0,
            usage,
            user: true,
        }
    }

    #[test]
    fn no_usage_ties_everyone_at_the_top() {
        let r = rank(&[account(1.0), account(3.0), user(0, 0.0), user(1, 0.0)]);
        assert_eq!(r.rank, vec![0, 0, 2, 2]);
        assert_eq!(r.factor(2), 1.0);
        assert!(r.level_fs[0].is_infinite());
    }

    #[test]
    fn tied_sibling_users_share_a_rank_and_the_next_one_skips() {
        // a (LF 2: half the shares, a quarter of the usage) above b (LF 2/3).
        let r = rank(&[
            account(1.0),
            account(1.0),
            user(0, 0.5),
            user(0, 0.5),
            user(1, 3.0),
        ]);
        assert_eq!(r.level_fs[0], 2.0);
        assert_eq!(r.rank[2..], [3, 3, 1]);
    }

    #[test]
    fn a_user_tied_with_a_sibling_account_takes_its_best_users_rank() {
        // Under root: user x (usage 1) and account a (usage 1, users 2 and 0).
        let r = rank(&[
            account(1.0),
            user(0, 2.0),
            user(0, 0.0),
            Assoc {
                parent: None,
                shares: 1.0,
                usage: 2.0,
                user: true,
            },
        ]);
        assert_eq!(r.level_fs[0], r.level_fs[3]);
        // x first (a user before an account at equal LF), then a's best user tied with it.
        assert_eq!(r.rank, vec![0, 1, 3, 3]);
    }

    #[test]
    fn tied_sibling_accounts_are_merged() {
        // a and b tie (equal shares and usage); their users are ranked together.
        let r = rank(&[
            account(1.0),
            account(1.0),
            user(0, 3.0),
            user(0, 1.0),
            user(1, 2.0),
            user(1, 2.0),
        ]);
        assert_eq!(r.level_fs[0], r.level_fs[1]);
        // LF within a: 0.5/0.75, 0.5/0.25; within b: 1, 1.
        assert_eq!(r.rank[2..], [1, 4, 3, 3]);
    }

    #[test]
    fn zero_shares_rank_last_and_bad_input_counts_as_zero() {
        let r = rank(&[
            account(0.0),
            account(f64::NAN),
            account(1.0),
            user(0, 0.0),
            user(1, f64::INFINITY),
            user(2, 5.0),
            Assoc {
                parent: Some(7),
                shares: 1.0,
                usage: -1.0,
                user: true,
            },
        ]);
        // The last user's parent is not earlier: it hangs under root, shares 1 of 2.
        assert_eq!(r.rank[5], 3);
        assert_eq!(r.rank[6], 4);
        assert_eq!(r.level_fs[0], 0.0);
        assert_eq!(r.level_fs[1], 0.0);
    }
}
