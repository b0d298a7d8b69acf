//! The account tree as admins declare it (docs/design.md §2), and its validation.
//!
//! The tree always has an implicit root named [`ROOT`]; every declared account
//! hangs below it (an account without a parent is a child of the root).
//! Users are leaves: a user may be a member of several accounts. Validation is
//! done on a whole proposed tree, so the service can apply a change to a copy,
//! validate, and only then write it: bad input changes nothing.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

/// Name of the implicit root account.
pub const ROOT: &str = "root";

/// The largest allocation accepted, in weighted GPU-hours per window (a
/// million GPUs for a thousand hours). Bounded so that every sum and
/// conversion to GPU-seconds of the fair-share tree stays finite.
pub const MAX_ALLOCATION_GPU_HOURS: f64 = 1e9;

/// One declared account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountSpec {
    /// Slurm account name (lower case).
    pub name: String,
    /// Parent account; `None` means the root.
    pub parent: Option<String>,
    /// Weighted GPU-hours per window.
    pub allocation_gpu_hours: f64,
    /// Allows this account's children to sum above its allocation.
    #[serde(default)]
    pub overcommit: bool,
}

/// A user's membership of an account.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemberSpec {
    pub user: String,
    pub account: String,
    /// Explicit allocation in weighted GPU-hours per window; `None` shares the
    /// account's remaining allocation equally with the other such members.
    #[serde(default)]
    pub allocation_gpu_hours: Option<f64>,
}

/// The whole declared tree.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TreeSpec {
    /// Allocation of the root in GPU-hours per window; `None`: unlimited.
    #[serde(default)]
    pub root_allocation_gpu_hours: Option<f64>,
    pub accounts: Vec<AccountSpec>,
    pub members: Vec<MemberSpec>,
}

/// Why a tree is not acceptable. Messages are shown to admins verbatim.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TreeError {
    #[error(
        "invalid name {0:?}: use 1-64 characters of a-z, 0-9, '_', '-' or '.', starting with a letter or digit"
    )]
    BadName(String),
    #[error("account {0:?} already exists")]
    Duplicate(String),
    #[error("user {user:?} is already a member of account {account:?}")]
    DuplicateMember { user: String, account: String },
    #[error("unknown parent account {parent:?} for account {account:?}")]
    UnknownParent { account: String, parent: String },
    #[error("unknown account {0:?}")]
    UnknownAccount(String),
    #[error("account {0:?} would be its own ancestor (cycle)")]
    Cycle(String),
    #[error(
        "allocation of {name:?} must be a number of GPU-hours between 0 and {max:e}, got {value}",
        max = MAX_ALLOCATION_GPU_HOURS
    )]
    BadAllocation { name: String, value: f64 },
    #[error(
        "children of {parent:?} would have {children:.3} GPU-hours, above its allocation of {allocation:.3}; \
         lower them or mark {parent:?} with --overcommit"
    )]
    Overcommitted {
        parent: String,
        children: f64,
        allocation: f64,
    },
    #[error("the root account {0:?} is implicit and cannot be declared")]
    RootDeclared(String),
}

/// Checks a Slurm-style account or user name.
pub fn validate_name(name: &str) -> Result<(), TreeError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_-.".contains(&b));
    if ok {
        Ok(())
    } else {
        Err(TreeError::BadName(name.to_string()))
    }
}

fn validate_allocation(name: &str, value: f64) -> Result<(), TreeError> {
    if value.is_finite() && (0.0..=MAX_ALLOCATION_GPU_HOURS).contains(&value) {
        Ok(())
    } else {
        Err(TreeError::BadAllocation {
            name: name.to_string(),
            value,
        })
    }
}

impl TreeSpec {
    /// Finds an account by name.
    pub fn account(&self, name: &str) -> Option<&AccountSpec> {
        self.accounts.iter().find(|a| a.name == name)
    }

    /// Parent of `name` (the root for top-level accounts).
    pub fn parent_of(&self, name: &str) -> Option<&str> {
        self.account(name)
            .map(|a| a.parent.as_deref().unwrap_or(ROOT))
    }

    /// Direct child accounts of `name`.
    pub fn children_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a AccountSpec> + 'a {
        self.accounts
            .iter()
            .filter(move |a| a.parent.as_deref().unwrap_or(ROOT) == name)
    }

    /// Every account of the subtree below `name`, `name` included.
    pub fn subtree(&self, name: &str) -> BTreeSet<String> {
        let mut out = BTreeSet::new();
        let mut stack = vec![name.to_string()];
        while let Some(n) = stack.pop() {
            if out.insert(n.clone()) {
                stack.extend(self.children_of(&n).map(|c| c.name.clone()));
            }
        }
        out
    }

    /// Ancestors of `name` from its parent up to the root (root included).
    pub fn ancestors(&self, name: &str) -> Vec<String> {
        let mut out = Vec::new();
        let mut cur = name.to_string();
        while let Some(p) = self.parent_of(&cur) {
            if out.iter().any(|x| x == p) || out.len() > self.accounts.len() {
                break; // a cycle; validate() reports it
            }
            out.push(p.to_string());
            if p == ROOT {
                break;
            }
            cur = p.to_string();
        }
        out
    }

    /// Validates the whole tree: names, duplicates, parents, cycles,
    /// allocations, and children's sum against each parent's allocation.
    pub fn validate(&self) -> Result<(), TreeError> {
        let mut names = BTreeSet::new();
        for a in &self.accounts {
            if a.name == ROOT {
                return Err(TreeError::RootDeclared(a.name.clone()));
            }
            validate_name(&a.name)?;
            validate_allocation(&a.name, a.allocation_gpu_hours)?;
            if !names.insert(a.name.as_str()) {
                return Err(TreeError::Duplicate(a.name.clone()));
            }
        }
        if let Some(r) = self.root_allocation_gpu_hours {
            validate_allocation(ROOT, r)?;
        }
        for a in &self.accounts {
            if let Some(p) = &a.parent
                && p != ROOT
                && !names.contains(p.as_str())
            {
                return Err(TreeError::UnknownParent {
                    account: a.name.clone(),
                    parent: p.clone(),
                });
            }
        }
        // Cycle check: walk up from each account; a walk longer than the
        // number of accounts must have looped.
        let parent: BTreeMap<&str, &str> = self
            .accounts
            .iter()
            .map(|a| (a.name.as_str(), a.parent.as_deref().unwrap_or(ROOT)))
            .collect();
        for a in &self.accounts {
            let mut cur = a.name.as_str();
            for _ in 0..=self.accounts.len() {
                match parent.get(cur) {
                    Some(p) if *p == a.name => return Err(TreeError::Cycle(a.name.clone())),
                    Some(p) => cur = p,
                    None => break,
                }
            }
            if cur != ROOT {
                return Err(TreeError::Cycle(a.name.clone()));
            }
        }
        let mut seen = BTreeSet::new();
        for m in &self.members {
            validate_name(&m.user)?;
            if !names.contains(m.account.as_str()) {
                return Err(TreeError::UnknownAccount(m.account.clone()));
            }
            if let Some(v) = m.allocation_gpu_hours {
                validate_allocation(&m.user, v)?;
            }
            if !seen.insert((m.user.as_str(), m.account.as_str())) {
                return Err(TreeError::DuplicateMember {
                    user: m.user.clone(),
                    account: m.account.clone(),
                });
            }
        }
        // Children's allocations (and explicit user allocations) may not sum
        // above the parent's unless the parent allows overcommit.
        let check = |parent_name: &str, allocation: Option<f64>, overcommit: bool| {
            let Some(allocation) = allocation else {
                return Ok(());
            };
            let children: f64 = self
                .children_of(parent_name)
                .map(|c| c.allocation_gpu_hours)
                .sum::<f64>()
                + self
                    .members
                    .iter()
                    .filter(|m| m.account == parent_name)
                    .filter_map(|m| m.allocation_gpu_hours)
                    .sum::<f64>();
            if !overcommit && children > allocation * (1.0 + 1e-9) + 1e-9 {
                return Err(TreeError::Overcommitted {
                    parent: parent_name.to_string(),
                    children,
                    allocation,
                });
            }
            Ok(())
        };
        check(ROOT, self.root_allocation_gpu_hours, false)?;
        for a in &self.accounts {
            check(&a.name, Some(a.allocation_gpu_hours), a.overcommit)?;
        }
        Ok(())
    }

    /// Accounts whose children sum above their allocation (allowed by
    /// `overcommit`), for reports: `(account, children's sum, allocation)`.
    pub fn overcommitted(&self) -> Vec<(String, f64, f64)> {
        self.accounts
            .iter()
            .filter_map(|a| {
                let children: f64 = self
                    .children_of(&a.name)
                    .map(|c| c.allocation_gpu_hours)
                    .sum();
                (children > a.allocation_gpu_hours + 1e-9)
                    .then(|| (a.name.clone(), children, a.allocation_gpu_hours))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acct(name: &str, parent: Option<&str>, alloc: f64) -> AccountSpec {
        AccountSpec {
            name: name.into(),
            parent: parent.map(Into::into),
            allocation_gpu_hours: alloc,
            overcommit: false,
        }
    }

    #[test]
    fn rejects_each_kind_of_bad_tree() {
        let ok = TreeSpec {
            root_allocation_gpu_hours: Some(1000.0),
            accounts: vec![
                acct("a", None, 600.0),
                acct("b", None, 400.0),
                acct("a1", Some("a"), 600.0),
            ],
            members: vec![],
        };
        ok.validate().unwrap();

        let mut t = ok.clone();
        t.accounts.push(acct("a", None, 1.0));
        assert_eq!(t.validate(), Err(TreeError::Duplicate("a".into())));

        let mut t = ok.clone();
        t.accounts.push(acct("x", Some("nope"), 1.0));
        assert!(matches!(t.validate(), Err(TreeError::UnknownParent { .. })));

        let mut t = ok.clone();
        t.accounts[0].parent = Some("a1".into());
        assert!(matches!(t.validate(), Err(TreeError::Cycle(_))));

        let mut t = ok.clone();
        t.accounts[1].allocation_gpu_hours = -1.0;
        assert!(matches!(t.validate(), Err(TreeError::BadAllocation { .. })));

        // Above the bound: x 3600 it would overflow GPU-seconds to infinity.
        for bad in [
            1e306,
            f64::INFINITY,
            f64::NAN,
            MAX_ALLOCATION_GPU_HOURS * 2.0,
        ] {
            let mut t = ok.clone();
            t.accounts[2].allocation_gpu_hours = bad;
            t.accounts[0].overcommit = true;
            let err = t.validate().unwrap_err();
            assert!(
                matches!(err, TreeError::BadAllocation { .. }),
                "{bad}: {err}"
            );
            assert!(err.to_string().contains("between 0 and 1e9"), "{err}");
            let mut t = ok.clone();
            t.root_allocation_gpu_hours = Some(bad);
            assert!(matches!(t.validate(), Err(TreeError::BadAllocation { .. })));
        }

        let mut t = ok.clone();
        t.accounts[2].allocation_gpu_hours = 700.0;
        assert!(matches!(t.validate(), Err(TreeError::Overcommitted { .. })));
        t.accounts[0].overcommit = true;
        t.validate().unwrap();
        assert_eq!(t.overcommitted().len(), 1);

        let mut t = ok.clone();
        t.accounts.push(acct("Bad Name", None, 0.0));
        assert!(matches!(t.validate(), Err(TreeError::BadName(_))));
    }

    #[test]
    fn walks_the_tree() {
        let t = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![
                acct("a", None, 6.0),
                acct("a1", Some("a"), 3.0),
                acct("a2", Some("a"), 3.0),
            ],
            members: vec![],
        };
        assert_eq!(t.ancestors("a1"), vec!["a".to_string(), ROOT.to_string()]);
        assert_eq!(t.subtree("a").len(), 3);
    }
}
