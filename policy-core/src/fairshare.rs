//! Hierarchical fair share (docs/design.md §4): usage ratios, Fair-Tree ranking and tiers.
//!
//! Given the declared tree and each (account, user)'s window usage, this
//! computes for every node of the tree its allocation, usage (descendants
//! included), ratio `r = usage / allocation`, and for every leaf a global rank.
//!
//! Ranking (Fair-Tree style): at every node, children (sub-accounts and member
//! users alike) are ordered by `r`, lower first, ties by kind then name; a
//! depth-first walk in that order numbers the leaves 0, 1, 2, ... So any sibling
//! with a lower ratio outranks every leaf beneath a sibling with a higher one.
//! An account with neither children nor members is a leaf itself.
//!
//! Tiers: a leaf is [`Tier::Budgeted`] when every account on its path (the root
//! excluded, and the user itself when it has an explicit allocation) has `r < 1`,
//! else [`Tier::OverBudget`]. [`Tier::Free`] is chosen by the job, not the tree.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::HOUR;
use crate::tree::{MAX_ALLOCATION_GPU_HOURS, ROOT, TreeSpec};

/// Ratio reported for a node with no allocation: finite (so it survives JSON)
/// and far above 1, so such a node is always over budget.
pub const RATIO_NO_ALLOCATION: f64 = 1e9;

/// The three tiers of docs/design.md §4.3, highest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Tier {
    Budgeted,
    OverBudget,
    Free,
}

impl Tier {
    /// Short lower-case name for tables and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Tier::Budgeted => "budgeted",
            Tier::OverBudget => "over_budget",
            Tier::Free => "free",
        }
    }

    /// The tier in words for people (pages, `why`): "within budget",
    /// "over budget", "free tier".
    pub fn words(self) -> &'static str {
        match self {
            Tier::Budgeted => "within budget",
            Tier::OverBudget => "over budget",
            Tier::Free => "free tier",
        }
    }
}

/// What a node of the computed tree is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind")]
pub enum NodeKind {
    Account,
    User { account: String },
}

/// One node of the computed tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Node {
    /// Account name, or user name for a user node.
    pub name: String,
    #[serde(flatten)]
    pub kind: NodeKind,
    /// Index of the parent node in [`FairShare::nodes`]; `None` for the root.
    pub parent: Option<usize>,
    pub children: Vec<usize>,
    /// Weighted GPU-seconds per window.
    pub allocation: f64,
    /// Weighted GPU-seconds used in the window, descendants included.
    pub usage: f64,
    /// `usage / allocation` ([`RATIO_NO_ALLOCATION`] when allocation is 0).
    pub ratio: f64,
    /// Position among its siblings (0 = lowest ratio).
    pub sibling_rank: u32,
    /// Global leaf rank (0 = best) for leaves; `None` for inner nodes.
    pub leaf_rank: Option<u32>,
    /// Tier of jobs placed at this node (leaves; inner nodes: their own path).
    pub tier: Tier,
    /// Counts for the tier decision (accounts, and users with explicit allocations).
    pub budget_bearing: bool,
}

/// Usage input: weighted GPU-seconds in the window per (account, user).
pub type UsageByLeaf = BTreeMap<(String, String), f64>;

/// Where a job's (account, user) lands in the ranking.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeafKey {
    /// Node index of the leaf (user node, or the account for non-members).
    pub node: usize,
    /// Global rank (0 = best).
    pub rank: u32,
    pub tier: Tier,
}

/// The computed fair-share state at one instant: what the plugins rank by.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "FairShareData", into = "FairShareData")]
pub struct FairShare {
    /// The instant the usage was evaluated at (Unix seconds).
    pub at: i64,
    pub window_secs: i64,
    /// Nodes, root first, in depth-first ranking order.
    pub nodes: Vec<Node>,
    /// Number of leaves (ranks are `0..num_leaves`).
    pub num_leaves: u32,
    accounts: HashMap<String, usize>,
    users: HashMap<(String, String), usize>,
    /// For each account: the worst leaf rank in its subtree (non-member jobs).
    account_worst_leaf: HashMap<usize, usize>,
}

#[derive(Serialize, Deserialize)]
struct FairShareData {
    at: i64,
    window_secs: i64,
    nodes: Vec<Node>,
}

impl From<FairShareData> for FairShare {
    fn from(d: FairShareData) -> Self {
        FairShare::from_nodes(d.at, d.window_secs, d.nodes)
    }
}

impl From<FairShare> for FairShareData {
    fn from(f: FairShare) -> Self {
        FairShareData {
            at: f.at,
            window_secs: f.window_secs,
            nodes: f.nodes,
        }
    }
}

/// `usage / allocation`, finite whatever the inputs: above `f64::MAX` it is
/// `f64::MAX` (still above every real ratio, and JSON can carry it).
fn ratio(usage: f64, allocation: f64) -> f64 {
    if allocation > 0.0 {
        (usage / allocation).min(f64::MAX)
    } else {
        RATIO_NO_ALLOCATION
    }
}

impl FairShare {
    /// Computes the fair-share tree. `tree` should be valid
    /// ([`TreeSpec::validate`]); unknown parents are treated as the root.
    /// Usage of (account, user) pairs whose account is unknown is ignored.
    ///
    /// Four phases, each a function below: declare the nodes with their allocations
    /// (`Draft::declare`), charge the usage up every path and take the ratios
    /// (`Draft::charge`), order siblings by ratio and renumber the nodes depth-first
    /// (`Draft::into_ranking_order`), then number the leaves and give every node its
    /// tier (`assign_ranks_and_tiers`).
    pub fn compute(tree: &TreeSpec, usage: &UsageByLeaf, at: i64, window_secs: i64) -> FairShare {
        let mut draft = Draft::declare(tree);
        draft.charge(usage);
        let mut nodes = draft.into_ranking_order();
        assign_ranks_and_tiers(&mut nodes);
        FairShare::from_nodes(at, window_secs, nodes)
    }

    /// Rebuilds the lookup maps from nodes (used after deserialising).
    pub fn from_nodes(at: i64, window_secs: i64, nodes: Vec<Node>) -> FairShare {
        let mut accounts = HashMap::new();
        let mut users = HashMap::new();
        let mut num_leaves = 0;
        for (i, n) in nodes.iter().enumerate() {
            match &n.kind {
                NodeKind::Account => {
                    accounts.insert(n.name.clone(), i);
                }
                NodeKind::User { account } => {
                    users.insert((account.clone(), n.name.clone()), i);
                }
            }
            if n.leaf_rank.is_some() {
                num_leaves += 1;
            }
        }
        // Nodes are in depth-first order, so a subtree's last leaf is its worst.
        let mut account_worst_leaf = HashMap::new();
        for (i, n) in nodes.iter().enumerate().rev() {
            if n.leaf_rank.is_some() {
                let mut cur = Some(i);
                let mut guard = 0;
                while let Some(c) = cur {
                    account_worst_leaf.entry(c).or_insert(i);
                    cur = nodes.get(c).and_then(|n| n.parent);
                    guard += 1;
                    if guard > nodes.len() {
                        break;
                    }
                }
            }
        }
        FairShare {
            at,
            window_secs,
            nodes,
            num_leaves,
            accounts,
            users,
            account_worst_leaf,
        }
    }

    /// Node index of an account.
    pub fn account(&self, name: &str) -> Option<usize> {
        self.accounts.get(name).copied()
    }

    /// Where a job of `user` under `account` ranks. A member gets its own leaf;
    /// a non-member of a known account gets the worst leaf of that account's
    /// subtree (it has no share of its own) but the account's tier.
    /// `None` when the account is unknown.
    pub fn place(&self, account: &str, user: &str) -> Option<LeafKey> {
        if let Some(&u) = self.users.get(&(account.to_string(), user.to_string())) {
            let n = &self.nodes[u];
            return Some(LeafKey {
                node: u,
                rank: n.leaf_rank.unwrap_or(self.num_leaves),
                tier: n.tier,
            });
        }
        let a = self.account(account)?;
        let worst = self.account_worst_leaf.get(&a).copied().unwrap_or(a);
        Some(LeafKey {
            node: a,
            rank: self
                .nodes
                .get(worst)
                .and_then(|n| n.leaf_rank)
                .unwrap_or(self.num_leaves),
            tier: self.nodes[a].tier,
        })
    }

    /// Path of node indices from the root down to `node` (both included).
    pub fn path(&self, node: usize) -> Vec<usize> {
        let mut path = vec![node];
        let mut cur = self.nodes.get(node).and_then(|n| n.parent);
        while let Some(p) = cur {
            if path.len() > self.nodes.len() {
                break;
            }
            path.push(p);
            cur = self.nodes[p].parent;
        }
        path.reverse();
        path
    }

    /// Slurm-style fair-share factor in (0, 1]: 1 for the best leaf.
    pub fn factor(&self, rank: u32) -> f64 {
        if self.num_leaves == 0 {
            return 1.0;
        }
        f64::from(self.num_leaves.saturating_sub(rank).max(1)) / f64::from(self.num_leaves)
    }

    /// Usage in GPU-hours of a node.
    pub fn usage_gpu_hours(&self, node: usize) -> f64 {
        self.nodes
            .get(node)
            .map(|n| n.usage / HOUR as f64)
            .unwrap_or(0.0)
    }

    /// GPUs held per node, each running job counted at its leaf and every
    /// ancestor: the input of the preemption rule's "holds more than its share".
    pub fn holdings<'a>(
        &self,
        running: impl IntoIterator<Item = (&'a str, &'a str, u32)>,
    ) -> Vec<u32> {
        let mut held = vec![0u32; self.nodes.len()];
        for (account, user, gpus) in running {
            if let Some(place) = self.place(account, user) {
                // A non-member is charged to the account node, not the worst leaf.
                for i in self.path(place.node) {
                    held[i] = held[i].saturating_add(gpus);
                }
            }
        }
        held
    }
}

/// The tree while [`FairShare::compute`] builds it: nodes in declaration order (root,
/// accounts, members) with name lookups.
#[derive(Debug)]
struct Draft {
    nodes: Vec<Node>,
    accounts: HashMap<String, usize>,
    users: HashMap<(String, String), usize>,
}

fn hours_to_secs(h: f64) -> f64 {
    // Allocations are GPU-hours *per window*: the window length does not scale
    // them, so the conversion is plain hours -> seconds. Validation bounds
    // them already; a stored value from before that bound is taken at the
    // bound (and anything not a number as 0), so the tree stays finite.
    let h = if h.is_finite() {
        h.clamp(0.0, MAX_ALLOCATION_GPU_HOURS)
    } else if h > 0.0 {
        MAX_ALLOCATION_GPU_HOURS
    } else {
        0.0
    };
    h * HOUR as f64
}

/// Usage as charged: finite and not negative (anything else counts as 0), at
/// most `f64::MAX / 4` so that sums up a path stay finite.
fn finite_usage(u: f64) -> f64 {
    if u.is_finite() {
        u.clamp(0.0, f64::MAX / 4.0)
    } else {
        0.0
    }
}

fn new_node(name: &str, kind: NodeKind, allocation: f64, budget_bearing: bool) -> Node {
    Node {
        name: name.to_string(),
        kind,
        parent: None,
        children: Vec::new(),
        allocation,
        usage: 0.0,
        ratio: 0.0,
        sibling_rank: 0,
        leaf_rank: None,
        tier: Tier::Budgeted,
        budget_bearing,
    }
}

impl Draft {
    /// Phase 1: the root, every account under its parent (unknown parents and
    /// self-parents under the root) and every member under its account, with
    /// allocations: the root's is declared or the sum of its children's; members
    /// without an explicit allocation share what their account has left equally.
    fn declare(tree: &TreeSpec) -> Draft {
        let mut nodes: Vec<Node> = Vec::with_capacity(tree.accounts.len() + tree.members.len() + 1);
        let mut accounts: HashMap<String, usize> = HashMap::new();
        let root_alloc = tree
            .root_allocation_gpu_hours
            .map(hours_to_secs)
            .unwrap_or_else(|| {
                tree.accounts
                    .iter()
                    .filter(|a| a.parent.as_deref().unwrap_or(ROOT) == ROOT)
                    .map(|a| hours_to_secs(a.allocation_gpu_hours))
                    .sum()
            });
        nodes.push(new_node(ROOT, NodeKind::Account, root_alloc, false));
        accounts.insert(ROOT.to_string(), 0);
        for a in &tree.accounts {
            accounts.insert(a.name.clone(), nodes.len());
            nodes.push(new_node(
                &a.name,
                NodeKind::Account,
                hours_to_secs(a.allocation_gpu_hours),
                true,
            ));
        }
        for a in &tree.accounts {
            let me = accounts[&a.name];
            let p = a
                .parent
                .as_deref()
                .and_then(|p| accounts.get(p).copied())
                .unwrap_or(0);
            let p = if p == me { 0 } else { p };
            nodes[me].parent = Some(p);
            nodes[p].children.push(me);
        }
        let mut users: HashMap<(String, String), usize> = HashMap::new();
        for m in &tree.members {
            let Some(&acc) = accounts.get(&m.account) else {
                continue;
            };
            let i = nodes.len();
            let mut n = new_node(
                &m.user,
                NodeKind::User {
                    account: m.account.clone(),
                },
                0.0,
                m.allocation_gpu_hours.is_some(),
            );
            n.allocation = m.allocation_gpu_hours.map(hours_to_secs).unwrap_or(0.0);
            n.parent = Some(acc);
            nodes.push(n);
            nodes[acc].children.push(i);
            users.insert((m.account.clone(), m.user.clone()), i);
        }
        share_implicit_allocations(&mut nodes);
        Draft {
            nodes,
            accounts,
            users,
        }
    }

    /// Phase 2: each (account, user) pair charges its user node (if a member) and
    /// the account with every ancestor; then every node's ratio.
    fn charge(&mut self, usage: &UsageByLeaf) {
        let nodes = &mut self.nodes;
        for ((account, user), &u) in usage {
            let Some(&acc) = self.accounts.get(account) else {
                continue;
            };
            let u = finite_usage(u);
            if let Some(&ui) = self.users.get(&(account.clone(), user.clone())) {
                nodes[ui].usage = (nodes[ui].usage + u).min(f64::MAX);
            }
            let mut cur = Some(acc);
            let mut guard = 0;
            while let Some(c) = cur {
                nodes[c].usage = (nodes[c].usage + u).min(f64::MAX);
                cur = nodes[c].parent;
                guard += 1;
                if guard > nodes.len() {
                    break;
                }
            }
        }
        for n in nodes.iter_mut() {
            n.ratio = ratio(n.usage, n.allocation);
        }
    }

    /// Phase 3: order every node's children by ratio (lower first; ties: accounts
    /// before users, then by name), record each one's sibling rank, and renumber
    /// the nodes in depth-first order of that ranking. Nodes unreachable from the
    /// root (cycles in an invalid tree) are dropped.
    fn into_ranking_order(self) -> Vec<Node> {
        let mut nodes = self.nodes;
        let mut order = Vec::with_capacity(nodes.len());
        let mut stack = vec![0usize];
        while let Some(i) = stack.pop() {
            order.push(i);
            let mut kids = nodes[i].children.clone();
            kids.sort_by(|&a, &b| {
                let (na, nb) = (&nodes[a], &nodes[b]);
                na.ratio
                    .total_cmp(&nb.ratio)
                    .then_with(|| {
                        matches!(na.kind, NodeKind::User { .. })
                            .cmp(&matches!(nb.kind, NodeKind::User { .. }))
                    })
                    .then_with(|| na.name.cmp(&nb.name))
            });
            for (r, &k) in kids.iter().enumerate() {
                nodes[k].sibling_rank = r as u32;
            }
            nodes[i].children = kids.clone();
            stack.extend(kids.into_iter().rev());
        }
        let mut new_index = vec![usize::MAX; nodes.len()];
        for (new, &old) in order.iter().enumerate() {
            new_index[old] = new;
        }
        order
            .iter()
            .map(|&old| {
                let mut n = nodes[old].clone();
                n.parent = n.parent.map(|p| new_index[p]).filter(|&p| p != usize::MAX);
                n.children = n
                    .children
                    .iter()
                    .map(|&c| new_index[c])
                    .filter(|&c| c != usize::MAX)
                    .collect();
                n
            })
            .collect()
    }
}

/// Members without an explicit allocation share equally what their account has
/// left after the explicit ones (never less than nothing).
fn share_implicit_allocations(nodes: &mut [Node]) {
    for acc in 0..nodes.len() {
        if !matches!(nodes[acc].kind, NodeKind::Account) {
            continue;
        }
        let users: Vec<usize> = nodes[acc]
            .children
            .iter()
            .copied()
            .filter(|&c| !matches!(nodes[c].kind, NodeKind::Account))
            .collect();
        let explicit: f64 = users
            .iter()
            .filter(|&&u| nodes[u].budget_bearing)
            .map(|&u| nodes[u].allocation)
            .sum();
        let implicit: Vec<usize> = users
            .iter()
            .copied()
            .filter(|&u| !nodes[u].budget_bearing)
            .collect();
        if !implicit.is_empty() {
            let share = (nodes[acc].allocation - explicit).max(0.0) / implicit.len() as f64;
            for u in implicit {
                nodes[u].allocation = share;
            }
        }
    }
}

/// Phase 4, on nodes in depth-first ranking order: leaves get ranks 0, 1, ... in
/// that order; a node is over budget when it bears a budget and its ratio is at
/// least 1, or its parent is over budget.
fn assign_ranks_and_tiers(nodes: &mut [Node]) {
    let mut rank = 0u32;
    for i in 0..nodes.len() {
        let over_self = nodes[i].budget_bearing && nodes[i].ratio >= 1.0;
        let parent_over = nodes[i]
            .parent
            .map(|p| nodes[p].tier == Tier::OverBudget)
            .unwrap_or(false);
        nodes[i].tier = if over_self || parent_over {
            Tier::OverBudget
        } else {
            Tier::Budgeted
        };
        if nodes[i].children.is_empty() && i != 0 {
            nodes[i].leaf_rank = Some(rank);
            rank += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::{AccountSpec, MemberSpec};
    use proptest::prelude::*;

    fn tree(accounts: &[(&str, Option<&str>, f64)], members: &[(&str, &str)]) -> TreeSpec {
        TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: accounts
                .iter()
                .map(|(n, p, a)| AccountSpec {
                    name: n.to_string(),
                    parent: p.map(Into::into),
                    allocation_gpu_hours: *a,
                    overcommit: false,
                })
                .collect(),
            members: members
                .iter()
                .map(|(u, a)| MemberSpec {
                    user: u.to_string(),
                    account: a.to_string(),
                    allocation_gpu_hours: None,
                })
                .collect(),
        }
    }

    fn usage(entries: &[(&str, &str, f64)]) -> UsageByLeaf {
        entries
            .iter()
            .map(|(a, u, h)| ((a.to_string(), u.to_string()), h * 3600.0))
            .collect()
    }

    /// A tree that skipped validation (a row stored before the bounds) and
    /// usage that is not a number still give a tree of finite numbers only,
    /// which JSON carries without a `null`.
    #[test]
    fn out_of_range_inputs_give_a_finite_tree() {
        let mut t = tree(
            &[
                ("huge", None, 1e306),
                ("inf", None, f64::INFINITY),
                ("nan", None, f64::NAN),
                ("tiny", None, 1e-300),
                ("neg", None, -5.0),
            ],
            &[("alice", "huge"), ("bob", "tiny")],
        );
        t.members[0].allocation_gpu_hours = Some(f64::INFINITY);
        let u: UsageByLeaf = [
            (("huge".to_string(), "alice".to_string()), f64::INFINITY),
            (("inf".to_string(), "x".to_string()), f64::MAX),
            (("nan".to_string(), "x".to_string()), f64::NAN),
            (("tiny".to_string(), "bob".to_string()), 1e300),
            (("neg".to_string(), "x".to_string()), f64::MAX),
        ]
        .into_iter()
        .collect();
        let fs = FairShare::compute(&t, &u, 0, 7 * 86_400);
        for n in &fs.nodes {
            assert!(n.allocation.is_finite() && n.allocation >= 0.0, "{n:?}");
            assert!(n.usage.is_finite() && n.usage >= 0.0, "{n:?}");
            assert!(n.ratio.is_finite() && n.ratio >= 0.0, "{n:?}");
        }
        let json = serde_json::to_string(&fs).unwrap();
        for field in ["allocation", "usage", "ratio"] {
            assert!(!json.contains(&format!("\"{field}\":null")), "{json}");
        }
        let back: FairShare = serde_json::from_str(&json).unwrap();
        assert_eq!(back.nodes.len(), 8);
    }

    #[test]
    fn lower_ratio_team_outranks_every_leaf_of_a_higher_one() {
        let t = tree(
            &[
                ("teama", None, 600.0),
                ("teamb", None, 300.0),
                ("teamc", None, 100.0),
            ],
            &[
                ("alice", "teama"),
                ("bob", "teama"),
                ("carol", "teamb"),
                ("dave", "teamc"),
            ],
        );
        // ratios: teama 300/600 = .5, teamb 30/300 = .1, teamc 150/100 = 1.5
        let u = usage(&[
            ("teama", "alice", 300.0),
            ("teamb", "carol", 30.0),
            ("teamc", "dave", 150.0),
        ]);
        let fs = FairShare::compute(&t, &u, 0, crate::DEFAULT_WINDOW_SECS);
        let carol = fs.place("teamb", "carol").unwrap();
        let bob = fs.place("teama", "bob").unwrap();
        let alice = fs.place("teama", "alice").unwrap();
        let dave = fs.place("teamc", "dave").unwrap();
        assert_eq!((carol.rank, bob.rank, alice.rank, dave.rank), (0, 1, 2, 3));
        assert_eq!(carol.tier, Tier::Budgeted);
        // alice used her whole equal share, but only explicit user allocations
        // bear a budget: her tier follows teama (r = 0.5).
        assert_eq!(alice.tier, Tier::Budgeted);
        assert_eq!(dave.tier, Tier::OverBudget);
    }

    #[test]
    fn tiers_follow_the_path() {
        let t = tree(
            &[("a", None, 10.0), ("a1", Some("a"), 5.0), ("b", None, 10.0)],
            &[],
        );
        let u = usage(&[("a1", "x", 11.0), ("b", "y", 9.0)]);
        let fs = FairShare::compute(&t, &u, 0, crate::DEFAULT_WINDOW_SECS);
        assert_eq!(fs.place("a1", "x").unwrap().tier, Tier::OverBudget);
        assert_eq!(fs.place("b", "y").unwrap().tier, Tier::Budgeted);
        assert!(fs.place("nope", "y").is_none());
        let a = fs.account("a").unwrap();
        assert!((fs.nodes[a].ratio - 1.1).abs() < 1e-12);
        // survives a JSON round trip with its indexes
        let back: FairShare = serde_json::from_str(&serde_json::to_string(&fs).unwrap()).unwrap();
        assert_eq!(back.place("a1", "x"), fs.place("a1", "x"));
    }

    #[test]
    fn declared_allocations_and_implicit_shares() {
        // Phase 1: "x" has an explicit 30 of team's 100; "y" and "z" share the 70 left.
        // "self" names itself as parent (invalid): it hangs under the root.
        let mut t = tree(
            &[("team", None, 100.0), ("self", Some("self"), 10.0)],
            &[("x", "team"), ("y", "team"), ("z", "team"), ("w", "nosuch")],
        );
        t.members[0].allocation_gpu_hours = Some(30.0);
        let fs = FairShare::compute(&t, &UsageByLeaf::new(), 0, crate::DEFAULT_WINDOW_SECS);
        let alloc = |a: &str, u: &str| {
            let n = fs.place(a, u).unwrap().node;
            fs.nodes[n].allocation / 3600.0
        };
        assert_eq!(alloc("team", "x"), 30.0);
        assert_eq!(alloc("team", "y"), 35.0);
        assert_eq!(alloc("team", "z"), 35.0);
        assert!(fs.nodes[fs.place("team", "x").unwrap().node].budget_bearing);
        assert!(!fs.nodes[fs.place("team", "y").unwrap().node].budget_bearing);
        let root = &fs.nodes[0];
        // The sum of the accounts declared at the top ("self" only hangs there).
        assert_eq!(root.allocation / 3600.0, 100.0);
        assert_eq!(fs.nodes[fs.account("self").unwrap()].parent, Some(0));
        assert!(
            fs.place("nosuch", "w").is_none(),
            "a member of no account is dropped"
        );
        // Explicit allocations above the account's leave nothing to share.
        t.members[0].allocation_gpu_hours = Some(150.0);
        t.root_allocation_gpu_hours = Some(500.0);
        let fs = FairShare::compute(&t, &UsageByLeaf::new(), 0, crate::DEFAULT_WINDOW_SECS);
        let n = fs.place("team", "y").unwrap().node;
        assert_eq!(fs.nodes[n].allocation, 0.0);
        assert_eq!(
            fs.nodes[0].allocation / 3600.0,
            500.0,
            "declared root allocation"
        );
    }

    fn arb_tree() -> impl Strategy<Value = (TreeSpec, UsageByLeaf)> {
        // Up to 12 accounts, each parent an earlier account or the root.
        (1usize..12).prop_flat_map(|n| {
            (
                proptest::collection::vec((0usize..100, 0u32..1000), n),
                proptest::collection::vec((0usize..100, 0usize..4, 0u32..2000), 0..30),
            )
                .prop_map(move |(accts, uses)| {
                    let accounts: Vec<AccountSpec> = accts
                        .iter()
                        .enumerate()
                        .map(|(i, &(p, alloc))| AccountSpec {
                            name: format!("a{i}"),
                            parent: if i == 0 || p % 3 == 0 {
                                None
                            } else {
                                Some(format!("a{}", p % i))
                            },
                            allocation_gpu_hours: f64::from(alloc),
                            overcommit: true,
                        })
                        .collect();
                    let mut members = Vec::new();
                    let mut usage = UsageByLeaf::new();
                    for &(a, u, h) in &uses {
                        let account = format!("a{}", a % n);
                        let user = format!("u{u}");
                        if !members
                            .iter()
                            .any(|m: &MemberSpec| m.user == user && m.account == account)
                        {
                            members.push(MemberSpec {
                                user: user.clone(),
                                account: account.clone(),
                                allocation_gpu_hours: None,
                            });
                        }
                        *usage.entry((account, user)).or_insert(0.0) += f64::from(h) * 3600.0;
                    }
                    (
                        TreeSpec {
                            root_allocation_gpu_hours: None,
                            accounts,
                            members,
                        },
                        usage,
                    )
                })
        })
    }

    proptest! {
        /// Ranks are a permutation of 0..n: a total order on leaves.
        #[test]
        fn ranking_is_a_total_order((t, u) in arb_tree()) {
            let fs = FairShare::compute(&t, &u, 0, crate::DEFAULT_WINDOW_SECS);
            let mut ranks: Vec<u32> = fs.nodes.iter().filter_map(|n| n.leaf_rank).collect();
            ranks.sort_unstable();
            prop_assert_eq!(ranks, (0..fs.num_leaves).collect::<Vec<_>>());
        }

        /// A sibling with a lower ratio never ranks below one with a higher ratio:
        /// every leaf under the lower sibling has a better rank than every leaf
        /// under the higher one.
        #[test]
        fn lower_ratio_sibling_never_ranks_below((t, u) in arb_tree()) {
            let fs = FairShare::compute(&t, &u, 0, crate::DEFAULT_WINDOW_SECS);
            let leaves_under = |i: usize| -> Vec<u32> {
                let mut out = vec![];
                let mut stack = vec![i];
                while let Some(x) = stack.pop() {
                    if let Some(r) = fs.nodes[x].leaf_rank { out.push(r); }
                    stack.extend(fs.nodes[x].children.iter().copied());
                }
                out
            };
            for n in &fs.nodes {
                for &a in &n.children {
                    for &b in &n.children {
                        if fs.nodes[a].ratio < fs.nodes[b].ratio {
                            let worst_a = leaves_under(a).into_iter().max();
                            let best_b = leaves_under(b).into_iter().min();
                            if let (Some(wa), Some(bb)) = (worst_a, best_b) {
                                prop_assert!(wa < bb);
                            }
                        }
                    }
                }
            }
        }

        /// Usage is conserved: the root holds the sum of all known usage.
        #[test]
        fn usage_rolls_up_exactly((t, u) in arb_tree()) {
            let fs = FairShare::compute(&t, &u, 0, crate::DEFAULT_WINDOW_SECS);
            let total: f64 = u.values().sum();
            prop_assert!((fs.nodes[0].usage - total).abs() <= 1e-6 * total.max(1.0));
        }
    }
}
