//! Fixtures for tests of the preemption rules (policy-core's own, and with the
//! feature `testkit` the simulator's baselines): job views and a two-team tree.
//! Never part of a plugin or of budgetd.

use crate::FairShare;
use crate::fairshare::UsageByLeaf;
use crate::preempt::JobView;
use crate::tree::{AccountSpec, MemberSpec, TreeSpec};

/// A job view with the fields a preemption test sets.
pub fn job<'a>(
    id: u32,
    account: &'a str,
    user: &'a str,
    free: bool,
    start: i64,
    min: i64,
    gpus: u32,
) -> JobView<'a> {
    JobView {
        job_id: id,
        account,
        user,
        free_tier: free,
        run_start: start,
        min_runtime: min,
        gpus,
    }
}

/// Two top-level teams `a` and `b` of 100 GPU-h each, users `ua` and `ub`, with
/// `a_used` and `b_used` GPU-h in the window.
pub fn two_teams(a_used: f64, b_used: f64) -> FairShare {
    let tree = TreeSpec {
        root_allocation_gpu_hours: None,
        accounts: vec![
            AccountSpec {
                name: "a".into(),
                parent: None,
                allocation_gpu_hours: 100.0,
                overcommit: false,
            },
            AccountSpec {
                name: "b".into(),
                parent: None,
                allocation_gpu_hours: 100.0,
                overcommit: false,
            },
        ],
        members: vec![
            MemberSpec {
                user: "ua".into(),
                account: "a".into(),
                allocation_gpu_hours: None,
            },
            MemberSpec {
                user: "ub".into(),
                account: "b".into(),
                allocation_gpu_hours: None,
            },
        ],
    };
    let usage: UsageByLeaf = [
        (("a".to_string(), "ua".to_string()), a_used * 3600.0),
        (("b".to_string(), "ub".to_string()), b_used * 3600.0),
    ]
    .into_iter()
    .collect();
    FairShare::compute(&tree, &usage, 0, crate::DEFAULT_WINDOW_SECS)
}

/// a0, a1 top-level; a2 under a0; a3 under a1 (overcommit allowed); users
/// u0..u2 in every account; `accts` gives each account's allocation first.
pub fn nested_tree(accts: &[(u32, u32, u32)]) -> TreeSpec {
    let parents = [None, None, Some("a0"), Some("a1")];
    TreeSpec {
        root_allocation_gpu_hours: None,
        accounts: accts
            .iter()
            .enumerate()
            .map(|(i, &(alloc, _, _))| AccountSpec {
                name: format!("a{i}"),
                parent: parents[i].map(Into::into),
                allocation_gpu_hours: f64::from(alloc),
                overcommit: true,
            })
            .collect(),
        members: (0..4)
            .flat_map(|a| {
                (0..3).map(move |u| MemberSpec {
                    user: format!("u{u}"),
                    account: format!("a{a}"),
                    allocation_gpu_hours: None,
                })
            })
            .collect(),
    }
}
