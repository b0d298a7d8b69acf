//! Read-only reports computed from the store: the `sshare`-like fair-share
//! table and usage by account or user (the explanation of one job is
//! [`crate::why`]).
//!
//! Everything here is derived (nothing is stored): the numbers come from
//! `policy_core` — window clipping (`Run`), `FairShare::compute`, tiers —
//! applied to the ledger and tree.

use std::collections::{BTreeMap, HashMap};

use budget_protocol::reports::{ShareReport, ShareRow, UsageReport, UsageRow};
use policy_core::fairshare::{NodeKind, UsageByLeaf};
use policy_core::tree::ROOT;
use policy_core::{AccountSpec, FairShare};

use crate::auth::Scope;
use crate::store::{Store, hours};

/// Builds the fair-share table at `at`, rows in ranking (depth-first) order.
pub fn share(store: &Store, at: i64, scope: &Scope) -> ShareReport {
    share_at(store, &[at], scope).pop().unwrap_or(ShareReport {
        at,
        window_secs: store.policy().window_secs,
        rows: Vec::new(),
    })
}

/// [`share`] at each instant of `ats` (entry `k` is exactly
/// `share(store, ats[k], scope)`), the usage of every window read in one
/// pass over the ledger.
pub fn share_at(store: &Store, ats: &[i64], scope: &Scope) -> Vec<ShareReport> {
    let window = store.policy().window_secs;
    ats.iter()
        .zip(store.weighted_usage_at(ats, window))
        .map(|(&at, (usage, free))| share_of(store, at, window, &usage, &free, scope))
        .collect()
}

/// The fair-share table at `at` from that window's charged and free usage.
fn share_of(
    store: &Store,
    at: i64,
    window: i64,
    usage: &UsageByLeaf,
    free: &UsageByLeaf,
    scope: &Scope,
) -> ShareReport {
    let tree = store.tree();
    let fs = FairShare::compute(tree, usage, at, window);
    // The tree's accounts by name, looked up as `TreeSpec::account` finds
    // them (the first of a name) without a scan per row.
    let mut specs: HashMap<&str, &AccountSpec> = HashMap::with_capacity(tree.accounts.len());
    for a in &tree.accounts {
        specs.entry(a.name.as_str()).or_insert(a);
    }
    // Free-tier usage rolled up like charged usage, for display.
    let mut free_by_account: BTreeMap<String, f64> = BTreeMap::new();
    let mut free_by_user: BTreeMap<(String, String), f64> = BTreeMap::new();
    for ((a, u), v) in free {
        *free_by_user.entry((a.clone(), u.clone())).or_insert(0.0) += v;
        if specs.contains_key(a.as_str()) {
            for acc in std::iter::once(a.clone()).chain(ancestors(&specs, a)) {
                *free_by_account.entry(acc).or_insert(0.0) += v;
            }
        }
    }
    let mut depth = vec![0usize; fs.nodes.len()];
    let mut rows = Vec::with_capacity(fs.nodes.len());
    for (i, n) in fs.nodes.iter().enumerate() {
        if let Some(p) = n.parent {
            depth[i] = depth[p] + 1;
        }
        let parent_name = n.parent.map(|p| fs.nodes[p].name.clone());
        let (account, user, parent, free_secs, factor) = match &n.kind {
            NodeKind::Account => {
                let rank = fs.place(&n.name, "\u{0}").map_or(fs.num_leaves, |p| p.rank);
                (
                    n.name.clone(),
                    None,
                    parent_name,
                    free_by_account.get(&n.name).copied().unwrap_or(0.0),
                    n.leaf_rank
                        .map_or_else(|| fs.factor(rank), |r| fs.factor(r)),
                )
            }
            NodeKind::User { account } => (
                account.clone(),
                Some(n.name.clone()),
                Some(account.clone()),
                free_by_user
                    .get(&(account.clone(), n.name.clone()))
                    .copied()
                    .unwrap_or(0.0),
                fs.factor(n.leaf_rank.unwrap_or(fs.num_leaves)),
            ),
        };
        if !scope.can_read(&account)
            || user
                .as_deref()
                .is_some_and(|u| !scope.can_see_user_in(&account, u))
        {
            continue;
        }
        let overcommit =
            user.is_none() && specs.get(account.as_str()).is_some_and(|a| a.overcommit);
        rows.push(ShareRow {
            account,
            parent,
            user,
            depth: depth[i],
            allocation_gpu_hours: hours(n.allocation),
            usage_gpu_hours: hours(n.usage),
            free_usage_gpu_hours: hours(free_secs),
            ratio: n.ratio,
            rank: n.sibling_rank + 1,
            leaf_rank: n.leaf_rank.map(|r| r + 1),
            fair_share_factor: factor,
            tier: n.tier,
            overcommit,
        });
    }
    ShareReport {
        at,
        window_secs: window,
        rows,
    }
}

/// `TreeSpec::ancestors` of `name` over the accounts by name: its parent,
/// that one's, ... up to the root, stopping at a cycle.
fn ancestors(specs: &HashMap<&str, &AccountSpec>, name: &str) -> Vec<String> {
    let parent_of = |n: &str| {
        specs
            .get(n)
            .map(|a| a.parent.as_deref().unwrap_or(ROOT).to_string())
    };
    let mut out: Vec<String> = Vec::new();
    let mut cur = name.to_string();
    while let Some(p) = parent_of(&cur) {
        if out.contains(&p) || out.len() > specs.len() {
            break;
        }
        out.push(p.clone());
        if p == ROOT {
            break;
        }
        cur = p;
    }
    out
}

/// Usage in `[from, to]` by account (rolled up) or by (account, user).
pub fn usage(store: &Store, from: i64, to: i64, by_user: bool, scope: &Scope) -> UsageReport {
    let len = (to - from).max(0);
    let sums = store.ledger().usage(to, len);
    let w = store.weights();
    // (weighted, raw, free) GPU-seconds per (account, user).
    let mut cells: BTreeMap<(String, String), (f64, f64, f64)> = BTreeMap::new();
    for (a, u, t, s) in sums.charged {
        let c = cells.entry((a, u)).or_default();
        c.0 += s as f64 * w.weight(t.as_deref());
        c.1 += s as f64;
    }
    for (a, u, t, s) in sums.free {
        cells.entry((a, u)).or_default().2 += s as f64 * w.weight(t.as_deref());
    }
    let tree = store.tree();
    let mut rows = Vec::new();
    if by_user {
        for ((a, u), (wt, raw, free)) in cells {
            if scope.can_read(&a) && scope.can_see_user_in(&a, &u) {
                let in_tree = tree.account(&a).is_some();
                rows.push(UsageRow {
                    account: a,
                    user: Some(u),
                    usage_gpu_hours: hours(wt),
                    raw_gpu_hours: hours(raw),
                    free_gpu_hours: hours(free),
                    in_tree,
                });
            }
        }
    } else {
        let mut acc: BTreeMap<String, (f64, f64, f64, bool)> = BTreeMap::new();
        acc.insert(ROOT.to_string(), (0.0, 0.0, 0.0, true));
        for a in &tree.accounts {
            acc.insert(a.name.clone(), (0.0, 0.0, 0.0, true));
        }
        for ((a, _), (wt, raw, free)) in cells {
            let chain: Vec<String> = if tree.account(&a).is_some() {
                std::iter::once(a.clone())
                    .chain(tree.ancestors(&a))
                    .collect()
            } else {
                vec![a.clone()]
            };
            for name in chain {
                let e = acc.entry(name).or_insert((0.0, 0.0, 0.0, false));
                e.0 += wt;
                e.1 += raw;
                e.2 += free;
            }
        }
        for (a, (wt, raw, free, in_tree)) in acc {
            if scope.can_read(&a) {
                rows.push(UsageRow {
                    account: a,
                    user: None,
                    usage_gpu_hours: hours(wt),
                    raw_gpu_hours: hours(raw),
                    free_gpu_hours: hours(free),
                    in_tree,
                });
            }
        }
    }
    UsageReport {
        from,
        to,
        by: if by_user { "user" } else { "account" }.into(),
        rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::TreeSpec;

    #[test]
    fn ancestors_by_name_are_the_trees_own() {
        let acc = |n: &str, p: Option<&str>| AccountSpec {
            name: n.into(),
            parent: p.map(str::to_string),
            allocation_gpu_hours: 1.0,
            overcommit: false,
        };
        let tree = TreeSpec {
            accounts: vec![
                acc("a", None),
                acc("a1", Some("a")),
                acc("a11", Some("a1")),
                acc("b", Some("root")),
                acc("orphan", Some("gone")),
            ],
            ..TreeSpec::default()
        };
        let specs: HashMap<&str, &AccountSpec> =
            tree.accounts.iter().map(|a| (a.name.as_str(), a)).collect();
        for n in ["a", "a1", "a11", "b", "orphan", "gone", "root"] {
            assert_eq!(ancestors(&specs, n), tree.ancestors(n), "{n}");
        }
        assert_eq!(ancestors(&specs, "a11"), ["a1", "a", "root"]);
    }
}
