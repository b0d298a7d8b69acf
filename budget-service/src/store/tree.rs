//! Tree mutations: accounts, members and coordinators. Each one that changes
//! the tree goes through [`Store::commit_tree`] (copy, validate, commit, swap).

use budget_protocol::tree::{AccountPatch, Coordinator, NewAccount};
use policy_core::tree::validate_name;
use policy_core::{AccountSpec, MemberSpec, TreeSpec};
use rusqlite::{Transaction, params};
use serde_json::json;

use super::{Change, Store, norm_parent};
use crate::error::{AppError, AppResult};

impl Store {
    /// Changes the tree as every tree mutation must (module doc of `store`):
    /// `edit` a copy of the tree, validate the copy (the accounts then kept
    /// sorted by name), then [`Store::commit`] `change` with the rows `write`
    /// writes, the copy replacing the tree only after the commit. Invalid
    /// input changes nothing.
    pub(crate) fn commit_tree<R>(
        &mut self,
        edit: impl FnOnce(&mut TreeSpec),
        change: Change<'_>,
        write: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<R>,
    ) -> AppResult<()> {
        let mut tree = self.tree.clone();
        edit(&mut tree);
        tree.validate()?;
        tree.accounts.sort_by(|a, b| a.name.cmp(&b.name));
        self.commit(Some(change), write, |s| s.tree = tree)
    }

    fn account_or_404(&self, name: &str) -> AppResult<&AccountSpec> {
        self.tree
            .account(name)
            .ok_or_else(|| AppError::NotFound(format!("unknown account {name:?}")))
    }

    fn member_or_404(&self, account: &str, user: &str) -> AppResult<MemberSpec> {
        self.tree
            .members
            .iter()
            .find(|m| m.account == account && m.user == user)
            .cloned()
            .ok_or_else(|| {
                AppError::NotFound(format!(
                    "user {user:?} is not a member of account {account:?}"
                ))
            })
    }

    /// Creates an account.
    pub fn create_account(
        &mut self,
        actor: &str,
        req: NewAccount,
        now: i64,
    ) -> AppResult<AccountSpec> {
        let spec = AccountSpec {
            name: req.name,
            parent: norm_parent(req.parent),
            allocation_gpu_hours: req.allocation_gpu_hours,
            overcommit: req.overcommit,
        };
        let change = Change::new(
            actor,
            now,
            "account.create",
            &spec.name,
            None,
            Some(json!(spec)),
        );
        self.commit_tree(
            |tree| tree.accounts.push(spec.clone()),
            change,
            |tx| {
                tx.execute(
                    "INSERT INTO accounts(name, parent, allocation, overcommit, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![spec.name, spec.parent, spec.allocation_gpu_hours, spec.overcommit, now],
                )
            },
        )?;
        Ok(spec)
    }

    /// Changes an account's allocation, parent or overcommit flag.
    pub fn modify_account(
        &mut self,
        actor: &str,
        name: &str,
        patch: AccountPatch,
        now: i64,
    ) -> AppResult<AccountSpec> {
        let old = self.account_or_404(name)?.clone();
        let mut new = old.clone();
        if let Some(a) = patch.allocation_gpu_hours {
            new.allocation_gpu_hours = a;
        }
        if let Some(p) = patch.parent {
            new.parent = norm_parent(Some(p));
        }
        if let Some(o) = patch.overcommit {
            new.overcommit = o;
        }
        if new == old {
            return Ok(old);
        }
        let change = Change::new(
            actor,
            now,
            "account.modify",
            name,
            Some(json!(old)),
            Some(json!(new)),
        );
        self.commit_tree(
            |tree| {
                if let Some(a) = tree.accounts.iter_mut().find(|a| a.name == name) {
                    *a = new.clone();
                }
            },
            change,
            |tx| {
                tx.execute(
                    "UPDATE accounts SET parent = ?2, allocation = ?3, overcommit = ?4 WHERE name = ?1",
                    params![name, new.parent, new.allocation_gpu_hours, new.overcommit],
                )
            },
        )?;
        Ok(new)
    }

    /// Deletes an account that has no child accounts and no running runs;
    /// its memberships and coordinators go with it (recorded in the audit row).
    pub fn delete_account(&mut self, actor: &str, name: &str, now: i64) -> AppResult<()> {
        let old = self.account_or_404(name)?.clone();
        let children: Vec<&str> = self
            .tree
            .children_of(name)
            .map(|c| c.name.as_str())
            .collect();
        if !children.is_empty() {
            return Err(AppError::Conflict(format!(
                "account {name:?} has child accounts ({}); delete or move them first",
                children.join(", ")
            )));
        }
        if self.ledger.has_running(name) {
            return Err(AppError::Conflict(format!(
                "account {name:?} has running jobs; delete it when they end"
            )));
        }
        let members: Vec<&MemberSpec> = self
            .tree
            .members
            .iter()
            .filter(|m| m.account == name)
            .collect();
        let coords: Vec<&Coordinator> = self
            .coordinators
            .iter()
            .filter(|c| c.account == name)
            .collect();
        let old_json = json!({ "account": old, "members": members, "coordinators": coords });
        let change = Change::new(actor, now, "account.delete", name, Some(old_json), None);
        self.commit_tree(
            |tree| {
                tree.accounts.retain(|a| a.name != name);
                tree.members.retain(|m| m.account != name);
            },
            change,
            |tx| tx.execute("DELETE FROM accounts WHERE name = ?1", [name]),
        )?;
        // The rows went with the account (ON DELETE CASCADE).
        self.coordinators.retain(|c| c.account != name);
        Ok(())
    }

    /// Adds a user to an account.
    pub fn add_member(&mut self, actor: &str, m: MemberSpec, now: i64) -> AppResult<MemberSpec> {
        self.account_or_404(&m.account)?;
        let change = Change::new(
            actor,
            now,
            "member.add",
            format!("{}/{}", m.account, m.user),
            None,
            Some(json!(m)),
        );
        self.commit_tree(
            |tree| tree.members.push(m.clone()),
            change,
            |tx| {
                tx.execute(
                    "INSERT INTO members(user, account, allocation) VALUES (?1, ?2, ?3)",
                    params![m.user, m.account, m.allocation_gpu_hours],
                )
            },
        )?;
        Ok(m)
    }

    /// Sets (or, with `None`, clears) a member's explicit allocation.
    pub fn modify_member(
        &mut self,
        actor: &str,
        account: &str,
        user: &str,
        allocation: Option<f64>,
        now: i64,
    ) -> AppResult<MemberSpec> {
        let old = self.member_or_404(account, user)?;
        let new = MemberSpec {
            allocation_gpu_hours: allocation,
            ..old.clone()
        };
        if new == old {
            return Ok(new);
        }
        let change = Change::new(
            actor,
            now,
            "member.modify",
            format!("{account}/{user}"),
            Some(json!(old)),
            Some(json!(new)),
        );
        self.commit_tree(
            |tree| {
                if let Some(m) = tree
                    .members
                    .iter_mut()
                    .find(|m| m.account == account && m.user == user)
                {
                    *m = new.clone();
                }
            },
            change,
            |tx| {
                tx.execute(
                    "UPDATE members SET allocation = ?3 WHERE user = ?1 AND account = ?2",
                    params![user, account, allocation],
                )
            },
        )?;
        Ok(new)
    }

    /// Removes a user from an account.
    pub fn remove_member(
        &mut self,
        actor: &str,
        account: &str,
        user: &str,
        now: i64,
    ) -> AppResult<()> {
        let old = self.member_or_404(account, user)?;
        let change = Change::new(
            actor,
            now,
            "member.remove",
            format!("{account}/{user}"),
            Some(json!(old)),
            None,
        );
        self.commit_tree(
            |tree| {
                tree.members
                    .retain(|m| !(m.account == account && m.user == user));
            },
            change,
            |tx| {
                tx.execute(
                    "DELETE FROM members WHERE user = ?1 AND account = ?2",
                    params![user, account],
                )
            },
        )
    }

    /// Makes a user coordinator of an account.
    pub fn add_coordinator(
        &mut self,
        actor: &str,
        c: Coordinator,
        now: i64,
    ) -> AppResult<Coordinator> {
        validate_name(&c.user)?;
        self.account_or_404(&c.account)?;
        if self.coordinators.contains(&c) {
            return Err(AppError::Conflict(format!(
                "user {:?} is already a coordinator of account {:?}",
                c.user, c.account
            )));
        }
        let change = Change::new(
            actor,
            now,
            "coordinator.add",
            format!("{}/{}", c.account, c.user),
            None,
            Some(json!(c)),
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "INSERT INTO coordinators(user, account) VALUES (?1, ?2)",
                    params![c.user, c.account],
                )
            },
            |s| {
                s.coordinators.insert(c.clone());
            },
        )?;
        Ok(c)
    }

    /// Removes a coordinator.
    pub fn remove_coordinator(&mut self, actor: &str, c: &Coordinator, now: i64) -> AppResult<()> {
        if !self.coordinators.contains(c) {
            return Err(AppError::NotFound(format!(
                "user {:?} is not a coordinator of account {:?}",
                c.user, c.account
            )));
        }
        let change = Change::new(
            actor,
            now,
            "coordinator.remove",
            format!("{}/{}", c.account, c.user),
            Some(json!(c)),
            None,
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "DELETE FROM coordinators WHERE user = ?1 AND account = ?2",
                    params![c.user, c.account],
                )
            },
            |s| {
                s.coordinators.remove(c);
            },
        )
    }
}
