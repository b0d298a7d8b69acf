//! The service's state: the SQLite connection plus in-memory copies of the
//! tree, coordinators, weights, policy and ledger, and every mutation.
//!
//! Every mutation follows one pattern so that bad input changes nothing:
//! apply the change to a *copy* of the in-memory state, validate the copy
//! (tree rules come from `policy_core::TreeSpec::validate`), then write the
//! rows, one audit row and the bumped generation in a single transaction, and
//! only after the commit replace the in-memory state. A failed validation or
//! a failed commit leaves both the database and memory as they were.
//! [`Store::commit`] is that pattern's one implementation, and
//! [`Store::commit_tree`] (`tree.rs`) the one for changes of the account tree.
//!
//! Here: opening, reads, weights and policy; `tree.rs`: accounts, members,
//! coordinators; `runs.rs`: the run ledger's syncs and imports.
//!
//! The store is used behind a `std::sync::Mutex` (see `state.rs`): rusqlite's
//! `Connection` is `Send` but not `Sync`, every operation is short and
//! synchronous, and one writer at a time is what SQLite does anyway.

use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use budget_protocol::tree::{AuditEntry, Coordinator, PolicyPatch, WeightsPatch};
use budget_protocol::{Policy, RunState};
use policy_core::fairshare::UsageByLeaf;
use policy_core::tree::ROOT;
use policy_core::{AccountSpec, FairShare, GpuWeights, HOUR, MemberSpec, TreeSpec};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::json;

use crate::error::{AppError, AppResult};
use crate::ledger::{Ledger, RunRecord};

mod runs;
mod tree;

pub use runs::EndContradicted;

/// The state behind the mutex.
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    tree: TreeSpec,
    coordinators: BTreeSet<Coordinator>,
    weights: GpuWeights,
    policy: Policy,
    ledger: Ledger,
    /// Bumped (and persisted) by every committed change; shared so readers
    /// can tell without the lock whether a cached snapshot is current.
    generation: Arc<AtomicU64>,
}

/// Logs each setting of a stored policy of the previous release that is now a
/// constant of the rule (`Policy::REMOVED`), `hysteresis` only when it is not
/// the constant (that release always stored it): the stored value is ignored
/// from now on, and the site should know.
fn warn_removed_settings(stored: &str) {
    let Ok(serde_json::Value::Object(fields)) = serde_json::from_str(stored) else {
        return;
    };
    let rule = policy_core::rebalance::RebalancePolicy::default();
    let hysteresis = serde_json::json!(rule.hysteresis);
    for name in Policy::REMOVED {
        match fields.get(name) {
            None | Some(serde_json::Value::Null) => {}
            Some(v) if name == "hysteresis" && *v == hysteresis => {}
            Some(v) => tracing::warn!(
                setting = name,
                stored = %v,
                "the stored policy sets a setting that is now a fixed constant of the rule \
                 (docs/design.md §6.6); the stored value is ignored"
            ),
        }
    }
}

fn meta_get(conn: &Connection, key: &str) -> rusqlite::Result<Option<String>> {
    conn.query_row("SELECT value FROM meta WHERE key = ?1", [key], |r| r.get(0))
        .optional()
}

fn meta_set(tx: &Transaction<'_>, key: &str, value: &str) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO meta(key, value) VALUES (?1, ?2) ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        params![key, value],
    )?;
    Ok(())
}

/// The audit row of one change: who did what to which target, from what to what.
#[derive(Debug)]
pub(crate) struct Change<'a> {
    pub actor: &'a str,
    pub at: i64,
    pub action: &'a str,
    pub target: String,
    pub old: Option<serde_json::Value>,
    pub new: Option<serde_json::Value>,
}

impl<'a> Change<'a> {
    pub fn new(
        actor: &'a str,
        at: i64,
        action: &'a str,
        target: impl Into<String>,
        old: Option<serde_json::Value>,
        new: Option<serde_json::Value>,
    ) -> Change<'a> {
        Change {
            actor,
            at,
            action,
            target: target.into(),
            old,
            new,
        }
    }
}

fn audit(tx: &Transaction<'_>, c: &Change<'_>) -> rusqlite::Result<()> {
    tx.execute(
        "INSERT INTO audit(at, actor, action, target, old, new) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        params![
            c.at,
            c.actor,
            c.action,
            c.target,
            c.old.as_ref().map(|v| v.to_string()),
            c.new.as_ref().map(|v| v.to_string())
        ],
    )?;
    Ok(())
}

fn norm_parent(p: Option<String>) -> Option<String> {
    p.filter(|p| p != ROOT && !p.is_empty())
}

impl Store {
    /// Opens the database, migrates it, and loads the in-memory state.
    /// `default_policy` is stored only if the database has no policy yet.
    pub fn open(path: &Path, default_policy: &PolicyPatch) -> anyhow::Result<Store> {
        let conn = crate::db::open(path)?;
        Store::load(conn, default_policy)
    }

    fn load(mut conn: Connection, default_policy: &PolicyPatch) -> anyhow::Result<Store> {
        let policy = match meta_get(&conn, "policy")? {
            Some(text) => {
                warn_removed_settings(&text);
                serde_json::from_str(&text)?
            }
            None => {
                let p = default_policy.apply(&Policy::default());
                crate::policy::validate(&p).map_err(anyhow::Error::msg)?;
                let tx = conn.transaction()?;
                meta_set(&tx, "policy", &serde_json::to_string(&p)?)?;
                tx.commit()?;
                p
            }
        };
        let generation: u64 = meta_get(&conn, "generation")?
            .and_then(|g| g.parse().ok())
            .unwrap_or(0);
        let mut tree = TreeSpec::default();
        {
            let mut st = conn.prepare(
                "SELECT name, parent, allocation, overcommit FROM accounts ORDER BY name",
            )?;
            let rows = st.query_map([], |r| {
                Ok(AccountSpec {
                    name: r.get(0)?,
                    parent: r.get(1)?,
                    allocation_gpu_hours: r.get(2)?,
                    overcommit: r.get(3)?,
                })
            })?;
            for a in rows {
                tree.accounts.push(a?);
            }
            let mut st = conn
                .prepare("SELECT user, account, allocation FROM members ORDER BY account, user")?;
            let rows = st.query_map([], |r| {
                Ok(MemberSpec {
                    user: r.get(0)?,
                    account: r.get(1)?,
                    allocation_gpu_hours: r.get(2)?,
                })
            })?;
            for m in rows {
                tree.members.push(m?);
            }
        }
        let mut coordinators = BTreeSet::new();
        {
            let mut st = conn.prepare("SELECT user, account FROM coordinators")?;
            let rows = st.query_map([], |r| {
                Ok(Coordinator {
                    user: r.get(0)?,
                    account: r.get(1)?,
                })
            })?;
            for c in rows {
                coordinators.insert(c?);
            }
        }
        let mut weights = GpuWeights::default();
        if let Some(d) = meta_get(&conn, "default_weight")? {
            weights.default = d.parse()?;
        }
        {
            let mut st = conn.prepare("SELECT gpu_type, weight FROM gpu_weights")?;
            let rows = st.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, f64>(1)?)))?;
            for w in rows {
                let (t, w) = w?;
                weights.by_type.insert(t, w);
            }
        }
        let mut ledger = Ledger::default();
        {
            let mut st = conn.prepare(
                "SELECT job_id, run, account, user, partition, gpus, gpu_type, start, end, free_tier, \
                 min_runtime, nodes, state, first_seen, time_limit, checkpoint, submit, rerun FROM runs",
            )?;
            let mut rows = st.query([])?;
            while let Some(r) = rows.next()? {
                let state: String = r.get(12)?;
                ledger.put(&RunRecord {
                    job_id: r.get(0)?,
                    run: r.get(1)?,
                    account: r.get(2)?,
                    user: r.get(3)?,
                    partition: r.get(4)?,
                    gpus: r.get(5)?,
                    gpu_type: r.get(6)?,
                    start: r.get(7)?,
                    end: r.get(8)?,
                    free_tier: r.get(9)?,
                    min_runtime_secs: r.get(10)?,
                    nodes: r.get(11)?,
                    state: RunState::parse(&state)
                        .ok_or_else(|| anyhow::anyhow!("bad run state {state:?} in db"))?,
                    first_seen: r.get(13)?,
                    time_limit_secs: r.get(14)?,
                    checkpoint_secs: r.get(15)?,
                    submit: r.get(16)?,
                    rerun: r.get(17)?,
                });
            }
        }
        Ok(Store {
            conn,
            tree,
            coordinators,
            weights,
            policy,
            ledger,
            generation: Arc::new(AtomicU64::new(generation)),
        })
    }

    // ---- reads ----

    pub fn tree(&self) -> &TreeSpec {
        &self.tree
    }
    pub fn coordinators(&self) -> &BTreeSet<Coordinator> {
        &self.coordinators
    }
    pub fn weights(&self) -> &GpuWeights {
        &self.weights
    }
    pub fn policy(&self) -> &Policy {
        &self.policy
    }
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
    /// The connection, for modules owning tables of their own (`drain`,
    /// `preemptions`): they follow the same one-transaction-per-change rule.
    pub(crate) fn conn_mut(&mut self) -> &mut Connection {
        &mut self.conn
    }
    pub(crate) fn conn(&self) -> &Connection {
        &self.conn
    }
    /// The database file (for backups, which read it through a connection of their own).
    pub fn db_path(&self) -> Option<std::path::PathBuf> {
        self.conn
            .path()
            .filter(|p| !p.is_empty())
            .map(std::path::PathBuf::from)
    }
    /// Shared handle on the generation counter.
    pub fn generation_handle(&self) -> Arc<AtomicU64> {
        self.generation.clone()
    }
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// Weighted GPU-seconds per (account, user) in `[at - len, at]`, charged
    /// and free tier apart.
    pub fn weighted_usage(&self, at: i64, len: i64) -> (UsageByLeaf, UsageByLeaf) {
        self.weighted_usage_at(&[at], len).pop().unwrap_or_default()
    }

    /// [`Store::weighted_usage`] at each instant of `ats`, from one pass
    /// over the ledger ([`crate::ledger::Ledger::usage_at`]).
    pub fn weighted_usage_at(&self, ats: &[i64], len: i64) -> Vec<(UsageByLeaf, UsageByLeaf)> {
        let fold = |rows: Vec<(String, String, Option<String>, i128)>| {
            let mut out = UsageByLeaf::new();
            for (a, u, t, secs) in rows {
                *out.entry((a, u)).or_insert(0.0) +=
                    secs as f64 * self.weights.weight(t.as_deref());
            }
            out
        };
        self.ledger
            .usage_at(ats, len)
            .into_iter()
            .map(|sums| (fold(sums.charged), fold(sums.free)))
            .collect()
    }

    /// The fair-share tree at `at` over the policy's window.
    pub fn fair_share(&self, at: i64) -> FairShare {
        let (usage, _) = self.weighted_usage(at, self.policy.window_secs);
        FairShare::compute(&self.tree, &usage, at, self.policy.window_secs)
    }

    /// Audit rows after `after_id`, oldest first, at most `limit`.
    pub fn audit_log(&self, after_id: i64, limit: i64) -> AppResult<Vec<AuditEntry>> {
        let mut st = self.conn.prepare(
            "SELECT id, at, actor, action, target, old, new FROM audit WHERE id > ?1 ORDER BY id LIMIT ?2",
        )?;
        let rows = st.query_map(params![after_id, limit], |r| {
            let parse = |s: Option<String>| s.and_then(|s| serde_json::from_str(&s).ok());
            Ok(AuditEntry {
                id: r.get(0)?,
                at: r.get(1)?,
                actor: r.get(2)?,
                action: r.get(3)?,
                target: r.get(4)?,
                old: parse(r.get(5)?),
                new: parse(r.get(6)?),
            })
        })?;
        Ok(rows.collect::<Result<_, _>>()?)
    }

    /// Number of rows of the `runs` table (tests, metrics).
    pub fn count_runs_in_db(&self) -> AppResult<i64> {
        Ok(self
            .conn
            .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))?)
    }

    // ---- the one way to change anything ----

    /// Writes one change as every mutation must (module doc): in one
    /// transaction `write` the rows, add the audit row (if any) and the bumped
    /// generation, commit; only after the commit `swap` the in-memory state
    /// and publish the new generation. If anything fails before the commit,
    /// the database rolls back and memory is untouched.
    pub(crate) fn commit<R>(
        &mut self,
        change: Option<Change<'_>>,
        write: impl FnOnce(&Transaction<'_>) -> rusqlite::Result<R>,
        swap: impl FnOnce(&mut Store),
    ) -> AppResult<()> {
        let next = self.generation.load(Ordering::SeqCst) + 1;
        let tx = self.conn.transaction()?;
        write(&tx)?;
        if let Some(c) = &change {
            audit(&tx, c)?;
        }
        meta_set(&tx, "generation", &next.to_string())?;
        tx.commit()?;
        swap(self);
        self.generation.store(next, Ordering::SeqCst);
        Ok(())
    }

    /// Sets GPU-type weights (and optionally the default weight).
    pub fn set_weights(
        &mut self,
        actor: &str,
        patch: WeightsPatch,
        now: i64,
    ) -> AppResult<GpuWeights> {
        let mut new = self.weights.clone();
        if let Some(d) = patch.default {
            policy_core::weights::validate_weight("default", d)
                .map_err(|e| AppError::Invalid(e.to_string()))?;
            new.default = d;
        }
        for (t, w) in &patch.set {
            new.set(t, *w)
                .map_err(|e| AppError::Invalid(e.to_string()))?;
        }
        if new == self.weights {
            return Ok(new);
        }
        let change = Change::new(
            actor,
            now,
            "weights.set",
            "weights",
            Some(json!(self.weights)),
            Some(json!(new)),
        );
        let stored = new.clone();
        self.commit(
            Some(change),
            |tx| {
                meta_set(tx, "default_weight", &new.default.to_string())?;
                for (t, w) in &new.by_type {
                    tx.execute(
                        "INSERT INTO gpu_weights(gpu_type, weight) VALUES (?1, ?2) \
                         ON CONFLICT(gpu_type) DO UPDATE SET weight = excluded.weight",
                        params![t, w],
                    )?;
                }
                Ok(())
            },
            |s| s.weights = stored,
        )?;
        Ok(new)
    }

    /// Changes policy fields.
    pub fn set_policy(&mut self, actor: &str, patch: &PolicyPatch, now: i64) -> AppResult<Policy> {
        let new = patch.apply(&self.policy);
        crate::policy::validate(&new).map_err(AppError::Invalid)?;
        if new == self.policy {
            return Ok(new);
        }
        let text = serde_json::to_string(&new)?;
        let change = Change::new(
            actor,
            now,
            "policy.set",
            "policy",
            Some(json!(self.policy)),
            Some(json!(new)),
        );
        let stored = new.clone();
        self.commit(
            Some(change),
            |tx| meta_set(tx, "policy", &text),
            |s| s.policy = stored,
        )?;
        Ok(new)
    }

    /// Allocation in GPU-hours of an account (for reports).
    pub fn allocation_gpu_hours(&self, account: &str) -> Option<f64> {
        self.tree.account(account).map(|a| a.allocation_gpu_hours)
    }
}

/// GPU-seconds to GPU-hours.
pub fn hours(secs: f64) -> f64 {
    secs / HOUR as f64
}

#[cfg(test)]
pub(crate) mod tests;
