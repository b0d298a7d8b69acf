//! The service's state: the SQLite connection plus in-memory copies of the
//! tree, coordinators, weights, policy and ledger, and every mutation.
//!
//! Every mutation follows one pattern so that bad input changes nothing:
//! apply the change to a *copy* of the in-memory state, validate the copy
//! (tree rules come from `policy_core::TreeSpec::validate`), then write the
//! rows, one audit row and the bumped generation in a single transaction, and
//! only after the commit replace the in-memory state. A failed validation or
//! a failed commit leaves both the database and memory as they were.
//!
//! The store is used behind a `std::sync::Mutex` (see `state.rs`): rusqlite's
//! `Connection` is `Send` but not `Sync`, every operation is short and
//! synchronous, and one writer at a time is what SQLite does anyway.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use budget_protocol::tree::{
    AccountPatch, AuditEntry, Coordinator, NewAccount, PolicyPatch, WeightsPatch,
};
use budget_protocol::{JobSync, Policy, RefusedRun, RunState, SyncOutcome};
use policy_core::fairshare::UsageByLeaf;
use policy_core::tree::{ROOT, validate_name};
use policy_core::{AccountSpec, FairShare, GpuWeights, HOUR, MemberSpec, TreeSpec};
use rusqlite::{Connection, OptionalExtension, Transaction, params};
use serde_json::json;

use crate::error::{AppError, AppResult};
use crate::ledger::{Ledger, Merge, RunRecord, conflict, merge};

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

const UPSERT_RUN: &str = "INSERT INTO runs(job_id, run, account, user, partition, gpus, gpu_type, start, end, \
     free_tier, min_runtime, nodes, state, first_seen, source, time_limit, checkpoint, submit, rerun) \
     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19) \
     ON CONFLICT(job_id, run, submit, rerun) DO UPDATE SET account = excluded.account, user = excluded.user, \
     partition = excluded.partition, gpus = excluded.gpus, gpu_type = excluded.gpu_type, start = excluded.start, \
     end = excluded.end, free_tier = excluded.free_tier, min_runtime = excluded.min_runtime, \
     nodes = excluded.nodes, state = excluded.state, time_limit = excluded.time_limit, \
     checkpoint = excluded.checkpoint";

/// Removes the row a merged record replaces under a new key (a row stored
/// without a submit time that adopted one).
const DELETE_RUN: &str =
    "DELETE FROM runs WHERE job_id = ?1 AND run = ?2 AND submit = ?3 AND rerun = ?4";

impl Store {
    /// Opens the database, migrates it, and loads the in-memory state.
    /// `default_policy` is stored only if the database has no policy yet.
    pub fn open(path: &Path, default_policy: &PolicyPatch) -> anyhow::Result<Store> {
        let conn = crate::db::open(path)?;
        Store::load(conn, default_policy)
    }

    fn load(mut conn: Connection, default_policy: &PolicyPatch) -> anyhow::Result<Store> {
        let policy = match meta_get(&conn, "policy")? {
            Some(text) => serde_json::from_str(&text)?,
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
        let sums = self.ledger.usage(at, len);
        let fold = |rows: Vec<(String, String, Option<String>, i128)>| {
            let mut out = UsageByLeaf::new();
            for (a, u, t, secs) in rows {
                *out.entry((a, u)).or_insert(0.0) +=
                    secs as f64 * self.weights.weight(t.as_deref());
            }
            out
        };
        (fold(sums.charged), fold(sums.free))
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

    // ---- tree mutations ----

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
        let mut tree = self.tree.clone();
        tree.accounts.push(spec.clone());
        tree.validate()?;
        tree.accounts.sort_by(|a, b| a.name.cmp(&b.name));
        let change = Change::new(
            actor,
            now,
            "account.create",
            &spec.name,
            None,
            Some(json!(spec)),
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "INSERT INTO accounts(name, parent, allocation, overcommit, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                    params![spec.name, spec.parent, spec.allocation_gpu_hours, spec.overcommit, now],
                )
            },
            |s| s.tree = tree,
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
        let mut tree = self.tree.clone();
        if let Some(a) = tree.accounts.iter_mut().find(|a| a.name == name) {
            *a = new.clone();
        }
        tree.validate()?;
        let change = Change::new(
            actor,
            now,
            "account.modify",
            name,
            Some(json!(old)),
            Some(json!(new)),
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "UPDATE accounts SET parent = ?2, allocation = ?3, overcommit = ?4 WHERE name = ?1",
                    params![name, new.parent, new.allocation_gpu_hours, new.overcommit],
                )
            },
            |s| s.tree = tree,
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
        let mut tree = self.tree.clone();
        tree.accounts.retain(|a| a.name != name);
        tree.members.retain(|m| m.account != name);
        tree.validate()?;
        let change = Change::new(actor, now, "account.delete", name, Some(old_json), None);
        self.commit(
            Some(change),
            |tx| tx.execute("DELETE FROM accounts WHERE name = ?1", [name]),
            |s| {
                s.tree = tree;
                s.coordinators.retain(|c| c.account != name);
            },
        )
    }

    /// Adds a user to an account.
    pub fn add_member(&mut self, actor: &str, m: MemberSpec, now: i64) -> AppResult<MemberSpec> {
        self.account_or_404(&m.account)?;
        let mut tree = self.tree.clone();
        tree.members.push(m.clone());
        tree.validate()?;
        let change = Change::new(
            actor,
            now,
            "member.add",
            format!("{}/{}", m.account, m.user),
            None,
            Some(json!(m)),
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "INSERT INTO members(user, account, allocation) VALUES (?1, ?2, ?3)",
                    params![m.user, m.account, m.allocation_gpu_hours],
                )
            },
            |s| s.tree = tree,
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
        let mut tree = self.tree.clone();
        if let Some(m) = tree
            .members
            .iter_mut()
            .find(|m| m.account == account && m.user == user)
        {
            *m = new.clone();
        }
        tree.validate()?;
        let change = Change::new(
            actor,
            now,
            "member.modify",
            format!("{account}/{user}"),
            Some(json!(old)),
            Some(json!(new)),
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "UPDATE members SET allocation = ?3 WHERE user = ?1 AND account = ?2",
                    params![user, account, allocation],
                )
            },
            |s| s.tree = tree,
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
        let mut tree = self.tree.clone();
        tree.members
            .retain(|m| !(m.account == account && m.user == user));
        tree.validate()?;
        let change = Change::new(
            actor,
            now,
            "member.remove",
            format!("{account}/{user}"),
            Some(json!(old)),
            None,
        );
        self.commit(
            Some(change),
            |tx| {
                tx.execute(
                    "DELETE FROM members WHERE user = ?1 AND account = ?2",
                    params![user, account],
                )
            },
            |s| s.tree = tree,
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

    // ---- ledger ----

    /// Ingests job-state runs from the plugin, run by run: a run that fails
    /// its checks is refused (listed in the outcome with the reason) and the
    /// others are stored, so one odd job never blocks the whole cluster's
    /// accounting (issue 11 item 2).
    pub fn sync(&mut self, batch: &JobSync, now: i64) -> AppResult<SyncOutcome> {
        let mut recs = Vec::with_capacity(batch.runs.len());
        let mut refused = Vec::new();
        let live_at = meta_get(&self.conn, "live_at")?.and_then(|v| v.parse::<i64>().ok());
        for (i, r) in batch.runs.iter().enumerate() {
            match RunRecord::from_job_run(r, now) {
                Ok(rec) => {
                    let rec = self.fold_raced_requeue(rec);
                    let (rec, lost) = self.started_again(rec, batch.collected_at, live_at);
                    recs.extend(lost);
                    recs.push(rec);
                }
                Err(e) => refused.push(RefusedRun {
                    job_id: r.job_id,
                    run: r.run,
                    index: i,
                    error: e,
                }),
            }
        }
        let mut out = self.ingest(&recs, "sync", false)?;
        out.refused = refused;
        if let Some(live) = &batch.live {
            out.closed = self.close_forgotten(live, batch.collected_at)?;
        }
        Ok(out)
    }

    /// A cancel racing a requeue (`scontrol requeue` and `scancel` within
    /// milliseconds): Slurm ends the job with `restart_cnt` already bumped but
    /// the previous run's start kept, so the plugin reports an ended run n with
    /// run n-1's start (and the end of both). Run n starts only after run n-1
    /// ended, so an ended run n whose start is the stored run n-1's start is
    /// run n-1 ending: it is taken as that run, which otherwise stayed open
    /// (charged until the live set closed it) beside a second charge for the
    /// same time (issue 11 item 12, seen on the testbed).
    fn fold_raced_requeue(&self, mut rec: RunRecord) -> RunRecord {
        if rec.run == 0 || !matches!(rec.state, RunState::Ended | RunState::Requeued) {
            return rec;
        }
        let Some(start) = rec.start else {
            return rec;
        };
        if let Some(prev) = self.ledger.with_start(rec.job_id, rec.run - 1, start) {
            rec.run = prev.run;
            rec.submit = prev.submit;
            rec.rerun = prev.rerun;
        }
        rec
    }

    /// Which row of its key `(job id, run, submit)` a synced record belongs to,
    /// and the lost run to close when the job started again after slurmctld lost
    /// a run: killed (-9) after a run started but before its state save recorded
    /// the start, slurmctld reloads the job pending with the same id, `restart_cnt`
    /// and submit time, and later starts it again. Slurm never reports a run
    /// pending after it started, nor a second start of one run, otherwise (a
    /// requeue is a new run number). So, against the key's current row:
    /// - a record with the start of one of the key's rows is that row (a repeat,
    ///   or a late report of a run lost earlier);
    /// - a pending record collected after the current row's start, or one with a
    ///   later start, means that run was lost: the record opens a row of its own
    ///   (`rerun` + 1), and the lost run, if still open, is closed like a run
    ///   Slurm forgot ([`Store::close_forgotten`]): at the last time it was known
    ///   alive (the newest complete live set, every one of which had it, or its
    ///   first sighting), never after this record was collected nor after the
    ///   next start, never before its own start;
    /// - anything else (a pending report collected before the start: stale) is
    ///   merged into the current row, which the merge rule keeps started.
    ///
    /// The lost run stays charged for the time it ran (docs/design.md §3.4);
    /// repeats find their rows by start and change nothing.
    fn started_again(
        &self,
        mut rec: RunRecord,
        collected_at: i64,
        live_at: Option<i64>,
    ) -> (RunRecord, Option<RunRecord>) {
        let Some(cur) = self.ledger.find(rec.job_id, rec.run, rec.submit) else {
            return (rec, None);
        };
        if rec.submit == 0 {
            // Unknown submit: the latest submission's (as the merge would adopt).
            rec.submit = cur.submit;
        }
        if let Some(s) = rec.start
            && let Some(r) = self
                .ledger
                .rerun_with_start(rec.job_id, rec.run, rec.submit, s)
        {
            rec.rerun = r;
            return (rec, None);
        }
        rec.rerun = cur.rerun;
        let Some(lost_start) = cur.start else {
            return (rec, None);
        };
        let again = match rec.start {
            None => rec.state == RunState::Pending && collected_at > lost_start,
            Some(s) => s > lost_start,
        };
        if !again {
            return (rec, None);
        }
        rec.rerun = cur.rerun + 1;
        if cur.end.is_some() || matches!(cur.state, RunState::Ended | RunState::Requeued) {
            return (rec, None);
        }
        let mut alive = live_at
            .unwrap_or(lost_start)
            .max(cur.first_seen)
            .min(collected_at);
        if let Some(s) = rec.start {
            alive = alive.min(s);
        }
        let end = alive.max(lost_start);
        tracing::warn!(
            "sync: job {} run {} (submit {}) started again after slurmctld lost it: \
             the lost run ({lost_start}..{end}) stays charged, the new one is rerun {}",
            rec.job_id,
            rec.run,
            rec.submit,
            rec.rerun
        );
        let mut lost = cur;
        lost.end = Some(end);
        lost.state = RunState::Ended;
        (rec, Some(lost))
    }

    /// Closes every pending or running run whose job is not in `live` (the
    /// complete set Slurm had at `at`), or is there with another submit time
    /// (a later run, or a reused id), at the time of the previous complete set
    /// (the last time Slurm was seen to have it; never before the run's start
    /// or first sighting). Runs first seen after `at` are left alone.
    /// A set collected before the newest one applied is stale and ignored: a
    /// request the plugin gave up on while budgetd hung is still in the socket's
    /// queue when budgetd resumes, and may be handled after a newer one.
    /// Returns how many were closed.
    pub fn close_forgotten(&mut self, live: &[(u32, i64)], at: i64) -> AppResult<u64> {
        let newest = meta_get(&self.conn, "live_at")?.and_then(|v| v.parse::<i64>().ok());
        if newest.is_some_and(|t| t > at) {
            tracing::info!("sync: ignored a stale live set (collected at {at}, newest {newest:?})");
            return Ok(0);
        }
        let live: std::collections::HashMap<u32, i64> = live.iter().copied().collect();
        let last_seen = newest.unwrap_or(at);
        let mut closes = Vec::new();
        for state in [RunState::Running, RunState::Pending] {
            for r in self.ledger.in_state(state) {
                if r.first_seen > at {
                    continue;
                }
                let forgotten = match live.get(&r.job_id) {
                    None => true,
                    Some(&s) => s != 0 && r.submit != 0 && s != r.submit,
                };
                if !forgotten {
                    continue;
                }
                let mut c = r.clone();
                let end = last_seen.max(r.first_seen).max(r.start.unwrap_or(i64::MIN));
                c.end = Some(end);
                c.state = RunState::Ended;
                closes.push(c);
            }
        }
        let out = self.ingest(&closes, "sync-live", false)?;
        let tx = self.conn.transaction()?;
        meta_set(&tx, "live_at", &at.to_string())?;
        tx.commit()?;
        if !closes.is_empty() {
            tracing::warn!(
                "sync: closed {} runs Slurm no longer has (at {last_seen})",
                closes.len()
            );
        }
        Ok(out.updated)
    }

    /// Writes checked records through the merge rule in one transaction and
    /// returns what changed. Nothing is written when nothing changed.
    ///
    /// A record belongs to the stored row of the same job id, run and submit
    /// time ([`Ledger::find`]): a reused job id is a new row, never merged
    /// into the old job's. With `strict` (imports), a record whose job id and
    /// run are stored with another account, user, size or start is listed in
    /// `refused` as a conflict instead of being counted "unchanged".
    pub fn ingest(
        &mut self,
        recs: &[RunRecord],
        source: &str,
        strict: bool,
    ) -> AppResult<SyncOutcome> {
        self.ingest_audited(recs, source, strict, |_| None)
    }

    /// [`Store::ingest`] with the audit row `audit` makes from the outcome written in
    /// the same transaction (an import's runs and its audit row are one change: a
    /// backup or a crash never has one without the other).
    pub(crate) fn ingest_audited<'a>(
        &mut self,
        recs: &[RunRecord],
        source: &str,
        strict: bool,
        audit: impl FnOnce(&SyncOutcome) -> Option<Change<'a>>,
    ) -> AppResult<SyncOutcome> {
        let mut out = SyncOutcome::default();
        // Later records of the same key in one batch merge onto earlier ones.
        // Value: the merged row, and the submit of the stored row it replaces.
        let mut pending: BTreeMap<(u32, u32, i64, u32), (RunRecord, i64)> = BTreeMap::new();
        for (i, rec) in recs.iter().enumerate() {
            // A run's start is its own: a record with the start of one of its
            // key's reruns is that rerun (imports carry rerun 0).
            let rerouted = rec
                .start
                .and_then(|s| {
                    self.ledger
                        .rerun_with_start(rec.job_id, rec.run, rec.submit, s)
                })
                .filter(|&r| r != rec.rerun)
                .map(|rerun| RunRecord {
                    rerun,
                    ..rec.clone()
                });
            let rec = rerouted.as_ref().unwrap_or(rec);
            let in_batch = pending
                .range(
                    (rec.job_id, rec.run, i64::MIN, 0)..=(rec.job_id, rec.run, i64::MAX, u32::MAX),
                )
                .filter(|(k, _)| (rec.submit == 0 || k.2 == rec.submit) && k.3 == rec.rerun)
                .map(|(k, (r, rep))| (*k, r.clone(), *rep))
                .next_back();
            let from_batch = in_batch.is_some();
            let (stored, replaces) = match in_batch {
                Some((k, r, rep)) => {
                    pending.remove(&k);
                    (Some(r), rep)
                }
                None => {
                    let found = self
                        .ledger
                        .find_rerun(rec.job_id, rec.run, rec.submit, rec.rerun);
                    let rep = found.as_ref().map_or(rec.submit, |f| f.submit);
                    (found, rep)
                }
            };
            if strict && let Some(why) = stored.as_ref().and_then(|old| conflict(old, rec)) {
                out.refused.push(RefusedRun {
                    job_id: rec.job_id,
                    run: rec.run,
                    index: i,
                    error: why,
                });
                if let Some(old) = stored.filter(|_| from_batch) {
                    // Keep what an earlier record of the batch merged.
                    pending.insert(
                        (old.job_id, old.run, old.submit, old.rerun),
                        (old, replaces),
                    );
                }
                continue;
            }
            match merge(stored.as_ref(), rec) {
                Merge::Insert(r) => {
                    out.inserted += 1;
                    pending.insert((r.job_id, r.run, r.submit, r.rerun), (r, replaces));
                }
                Merge::Update(r) => {
                    out.updated += 1;
                    pending.insert((r.job_id, r.run, r.submit, r.rerun), (r, replaces));
                }
                Merge::Unchanged => {
                    out.unchanged += 1;
                    if let Some(old) = stored.filter(|_| from_batch) {
                        // Merged earlier in this batch: still to be written.
                        pending.insert(
                            (old.job_id, old.run, old.submit, old.rerun),
                            (old, replaces),
                        );
                    }
                }
            }
        }
        if pending.is_empty() {
            return Ok(out);
        }
        self.commit(
            audit(&out),
            |tx| {
                let mut del = tx.prepare_cached(DELETE_RUN)?;
                let mut st = tx.prepare_cached(UPSERT_RUN)?;
                for (r, replaces) in pending.values() {
                    if *replaces != r.submit {
                        del.execute(params![r.job_id, r.run, replaces, r.rerun])?;
                    }
                    st.execute(params![
                        r.job_id,
                        r.run,
                        r.account,
                        r.user,
                        r.partition,
                        r.gpus,
                        r.gpu_type,
                        r.start,
                        r.end,
                        r.free_tier,
                        r.min_runtime_secs,
                        r.nodes,
                        r.state.as_str(),
                        r.first_seen,
                        source,
                        r.time_limit_secs,
                        r.checkpoint_secs,
                        r.submit,
                        r.rerun
                    ])?;
                }
                Ok(())
            },
            |s| {
                for (r, replaces) in pending.values() {
                    s.ledger.put_replacing(r, *replaces);
                }
            },
        )?;
        Ok(out)
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
pub(crate) mod tests {
    use super::*;
    use budget_protocol::JobRun;

    /// A store on a fresh database in a temp dir (kept alive by the `TempDir`).
    pub(crate) fn store() -> (tempfile::TempDir, Store) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = Store::open(&dir.path().join("t.db"), &PolicyPatch::default()).expect("open");
        (dir, s)
    }

    fn job_run(
        job_id: u32,
        submit: i64,
        account: &str,
        state: RunState,
        start: Option<i64>,
    ) -> JobRun {
        JobRun {
            job_id,
            run: 0,
            submit: Some(submit),
            account: account.into(),
            user: format!("{account}-user"),
            partition: None,
            gpus: 2,
            gpu_type: None,
            start,
            end: None,
            state,
            free_tier: false,
            min_runtime_secs: 0,
            nodes: None,
            priority: None,
            reason: None,
            time_limit_secs: None,
            checkpoint_secs: None,
        }
    }

    fn sync_one(s: &mut Store, r: JobRun, now: i64) -> SyncOutcome {
        s.sync(
            &JobSync {
                collected_at: now,
                runs: vec![r],
                live: None,
            },
            now,
        )
        .expect("sync")
    }

    /// Issue 11 item 7: a job id Slurm reuses (a cold-started controller, or
    /// MaxJobId wrapping) is a new run, never merged into the old job's; a
    /// database from before the submit key migrates, its rows adopting the
    /// submit time the upgraded plugin sends, without duplicates.
    #[test]
    fn reused_job_ids_are_new_runs_and_old_databases_migrate() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("old.db");
        {
            // A database of schema 3 (before the submit key) with one running run.
            let conn = Connection::open(&path).expect("open");
            for (i, sql) in crate::db::MIGRATIONS[..3].iter().enumerate() {
                conn.execute_batch(sql).expect("migrate");
                conn.pragma_update(None, "user_version", (i + 1) as i64)
                    .expect("version");
            }
            conn.execute(
                "INSERT INTO runs(job_id, run, account, user, gpus, start, free_tier, min_runtime, \
                 state, first_seen, source) VALUES (1, 0, 'bio', 'bio-user', 2, 1000, 0, 0, \
                 'running', 1000, 'sync')",
                [],
            )
            .expect("old row");
        }
        let mut s = Store::open(&path, &PolicyPatch::default()).expect("open and migrate");
        assert_eq!(s.count_runs_in_db().expect("count"), 1);
        // The upgraded plugin sends the same run with its submit time: adopted.
        let out = sync_one(
            &mut s,
            job_run(1, 900, "bio", RunState::Running, Some(1000)),
            1100,
        );
        assert_eq!((out.inserted, out.updated), (0, 1));
        assert_eq!(s.count_runs_in_db().expect("count"), 1);
        assert_eq!(s.ledger().get(1, 0).map(|r| r.submit), Some(900));
        // A cold-started controller hands out id 1 again: a new job, new row.
        let out = sync_one(
            &mut s,
            job_run(1, 5000, "filler", RunState::Pending, None),
            5001,
        );
        assert_eq!((out.inserted, out.updated, out.unchanged), (1, 0, 0));
        let out = sync_one(
            &mut s,
            job_run(1, 5000, "filler", RunState::Running, Some(5010)),
            5020,
        );
        assert_eq!(out.updated, 1);
        let new = s.ledger().get(1, 0).expect("new job");
        assert_eq!((new.account.as_str(), new.start), ("filler", Some(5010)));
        let old = s.ledger().find(1, 0, 900).expect("old job kept");
        assert_eq!((old.account.as_str(), old.start), ("bio", Some(1000)));
        // Usage: the new job charges filler from its own start, not from bio's.
        let u = s.ledger().usage(5110, 10_000);
        let of = |a: &str| {
            u.charged
                .iter()
                .filter(|r| r.0 == a)
                .map(|r| r.3)
                .sum::<i128>()
        };
        assert_eq!(of("filler"), 2 * 100);
        assert_eq!(of("bio"), 2 * (5110 - 1000));
        // Both survive a restart.
        drop(s);
        let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
        assert_eq!(s.ledger().len(), 2);
        assert_eq!(
            s.ledger().get(1, 0).map(|r| r.account),
            Some("filler".into())
        );
    }

    /// Sends Slurm's complete live set `jobs` collected at `at`; the runs closed.
    fn live(s: &mut Store, at: i64, jobs: &[(u32, i64)]) -> u64 {
        s.sync(
            &JobSync {
                collected_at: at,
                runs: vec![],
                live: Some(jobs.to_vec()),
            },
            at,
        )
        .expect("sync")
        .closed
    }

    /// Issue 11 item 12: with the complete live set, the runs Slurm forgot are
    /// closed at the previous complete set's time; live ones stay open; a
    /// pending run never charged; a stale submission of a reused id closed.
    #[test]
    fn a_complete_live_set_closes_what_slurm_forgot() {
        let (_d, mut s) = store();
        sync_one(
            &mut s,
            job_run(1, 90, "a", RunState::Running, Some(100)),
            110,
        );
        sync_one(
            &mut s,
            job_run(2, 95, "b", RunState::Running, Some(105)),
            110,
        );
        sync_one(&mut s, job_run(3, 99, "c", RunState::Pending, None), 110);
        // Everything live at 200.
        assert_eq!(live(&mut s, 200, &[(1, 90), (2, 95), (3, 99)]), 0);
        // At 500 Slurm has only job 1; job 2 vanished (e.g. a start lost in a
        // controller crash), job 3 was cancelled while pending.
        assert_eq!(live(&mut s, 500, &[(1, 90)]), 2);
        let two = s.ledger().get(2, 0).expect("run");
        assert_eq!((two.state, two.end), (RunState::Ended, Some(200)));
        let three = s.ledger().get(3, 0).expect("run");
        assert_eq!(
            (three.state, three.start, three.end),
            (RunState::Ended, None, Some(200))
        );
        assert_eq!(
            s.ledger().get(1, 0).map(|r| r.state),
            Some(RunState::Running)
        );
        // Job 1's id now belongs to another submission: the old run closes at 500.
        assert_eq!(live(&mut s, 800, &[(1, 700)]), 1);
        assert_eq!(s.ledger().get(1, 0).and_then(|r| r.end), Some(500));
        // Charged: job 1 100..500 and job 2 105..200, 2 GPUs each; job 3 nothing.
        let u = s.ledger().usage(1000, 10_000);
        let total: i128 = u.charged.iter().map(|r| r.3).sum();
        assert_eq!(total, 2 * (400 + 95));
        // A run first seen after the set was collected is left alone.
        sync_one(
            &mut s,
            job_run(9, 900, "a", RunState::Running, Some(905)),
            910,
        );
        assert_eq!(live(&mut s, 850, &[]), 0);
    }

    /// A live set collected before the newest applied one (a request buffered
    /// while budgetd hung, handled late) closes nothing and does not move the
    /// time forgotten runs are closed at.
    #[test]
    fn a_stale_live_set_is_ignored() {
        let (_d, mut s) = store();
        sync_one(
            &mut s,
            job_run(5, 90, "a", RunState::Running, Some(100)),
            110,
        );
        assert_eq!(live(&mut s, 300, &[(5, 90)]), 0);
        assert_eq!(live(&mut s, 200, &[]), 0, "stale: collected before 300");
        assert_eq!(
            s.ledger().get(5, 0).map(|r| r.state),
            Some(RunState::Running)
        );
        assert_eq!(live(&mut s, 400, &[]), 1);
        assert_eq!(s.ledger().get(5, 0).and_then(|r| r.end), Some(300));
    }

    /// Issue 11 item 12: a cancel racing a requeue makes Slurm report run 1
    /// with run 0's start; it ends run 0 (charged once), a resend changes
    /// nothing, and a real run 1 (its own, later start) stays a run of its own.
    #[test]
    fn a_cancel_racing_a_requeue_ends_the_run_it_started() {
        let (_d, mut s) = store();
        sync_one(
            &mut s,
            job_run(5, 470, "bio", RunState::Running, Some(472)),
            473,
        );
        let mut raced = job_run(5, 470, "bio", RunState::Ended, Some(472));
        raced.run = 1;
        raced.end = Some(476);
        assert_eq!(sync_one(&mut s, raced.clone(), 477).updated, 1);
        assert_eq!(sync_one(&mut s, raced, 478).unchanged, 1);
        let runs = s.ledger().job_runs(5);
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(
            (runs[0].run, runs[0].state, runs[0].end),
            (0, RunState::Ended, Some(476))
        );
        let u = s.ledger().usage(1000, 10_000);
        assert_eq!(u.charged.iter().map(|r| r.3).sum::<i128>(), 2 * 4);
        // A requeue that completed: run 1 starts later, a row of its own.
        sync_one(
            &mut s,
            job_run(6, 470, "bio", RunState::Running, Some(480)),
            481,
        );
        let mut requeued = job_run(6, 470, "bio", RunState::Requeued, Some(480));
        requeued.end = Some(490);
        sync_one(&mut s, requeued, 491);
        let mut second = job_run(6, 491, "bio", RunState::Ended, Some(500));
        second.run = 1;
        second.end = Some(510);
        assert_eq!(sync_one(&mut s, second, 511).inserted, 1);
        assert_eq!(s.ledger().job_runs(6).len(), 2);
    }

    /// A sync batch of `runs` collected at `at` (no live set).
    fn sync_at(s: &mut Store, at: i64, runs: Vec<JobRun>) -> SyncOutcome {
        s.sync(
            &JobSync {
                collected_at: at,
                runs,
                live: None,
            },
            at,
        )
        .expect("sync")
    }

    /// The GPU-seconds charged over everything stored.
    fn charged(s: &Store) -> i128 {
        s.ledger()
            .usage(100_000, 100_000)
            .charged
            .iter()
            .map(|r| r.3)
            .sum()
    }

    /// A job saved by slurmctld while pending starts (budgetd stores the start),
    /// slurmctld is killed (-9) before its state save records the start, reloads the
    /// job as pending (same id, run 0 and submit time) and starts it again. The
    /// reports budgetd receives, in order, then every one of them again: the first
    /// run stays charged, closed at the last complete live set that had it running,
    /// the second run is a row of its own, and repeats (even the stale ones from
    /// before the kill) change nothing.
    #[test]
    fn a_run_slurmctld_lost_in_a_crash_stays_charged_and_the_next_is_its_own_row() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("lost.db");
        let mut s = Store::open(&path, &PolicyPatch::default()).expect("open");
        let pending = job_run(7, 90, "bio", RunState::Pending, None);
        let first = job_run(7, 90, "bio", RunState::Running, Some(110));
        let second = job_run(7, 90, "bio", RunState::Running, Some(148));
        let mut ended = second.clone();
        ended.state = RunState::Ended;
        ended.end = Some(158);
        // Before the kill: pending (saved so by slurmctld), then running from 110,
        // in a complete live set at 124; killed at 128.
        let mut reports: Vec<(i64, Option<JobRun>)> = vec![
            (100, Some(pending.clone())),
            (100, None),
            (112, Some(first.clone())),
            (124, None),
            // Restarted from the save: pending again, then running again, then done.
            (140, Some(pending.clone())),
            (140, None),
            (150, Some(second.clone())),
            (152, None),
            (160, Some(ended.clone())),
        ];
        for (at, r) in &reports {
            match r {
                Some(r) => {
                    sync_at(&mut s, *at, vec![r.clone()]);
                }
                None => {
                    live(&mut s, *at, &[(7, 90)]);
                }
            }
        }
        let want = |s: &Store| {
            let runs = s.ledger().job_runs(7);
            let got: Vec<_> = runs
                .iter()
                .map(|r| (r.run, r.submit, r.start, r.end, r.state))
                .collect();
            assert_eq!(
                got,
                vec![
                    (0, 90, Some(110), Some(124), RunState::Ended),
                    (0, 90, Some(148), Some(158), RunState::Ended),
                ],
                "{runs:?}"
            );
            assert_eq!(charged(s), 2 * (124 - 110) + 2 * (158 - 148));
            assert_eq!(s.count_runs_in_db().expect("count"), 2);
        };
        want(&s);
        // Every report again, in order, and the stale ones from before the kill
        // once more at the end (a request handled late): nothing changes.
        reports.push((100, Some(pending)));
        reports.push((112, Some(first)));
        for (at, r) in reports {
            if let Some(r) = r {
                let out = sync_at(&mut s, at, vec![r]);
                assert_eq!((out.inserted, out.updated), (0, 0), "{out:?}");
            }
        }
        want(&s);
        // An import of the second run (as from sacct: no rerun) is that row, not a
        // conflict with the first.
        let imported = RunRecord::from_job_run(&ended, 200).expect("valid");
        let out = s.ingest(&[imported], "import", true).expect("import");
        assert!(out.refused.is_empty() && out.unchanged == 1, "{out:?}");
        want(&s);
        drop(s);
        let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
        want(&s);
    }

    /// The same crash when the restarted slurmctld starts the job again before
    /// the plugin's first pass (no pending report in between: a running report
    /// with a later start), and when the lost run's end had been reported before
    /// the crash: each run is a row of its own, charged once.
    #[test]
    fn a_lost_run_started_again_without_a_pending_report_is_a_row_of_its_own() {
        let (_d, mut s) = store();
        sync_at(
            &mut s,
            112,
            vec![job_run(8, 90, "bio", RunState::Running, Some(110))],
        );
        live(&mut s, 124, &[(8, 90)]);
        sync_at(
            &mut s,
            150,
            vec![job_run(8, 90, "bio", RunState::Running, Some(148))],
        );
        let runs = s.ledger().job_runs(8);
        let got: Vec<_> = runs.iter().map(|r| (r.start, r.end, r.state)).collect();
        assert_eq!(
            got,
            vec![
                (Some(110), Some(124), RunState::Ended),
                (Some(148), None, RunState::Running)
            ],
            "{runs:?}"
        );
        // Ended and reported, then lost: the job runs again under the same key.
        let mut done = job_run(9, 90, "bio", RunState::Ended, Some(110));
        done.end = Some(120);
        sync_at(&mut s, 121, vec![done.clone()]);
        sync_at(
            &mut s,
            140,
            vec![job_run(9, 90, "bio", RunState::Pending, None)],
        );
        let mut again = job_run(9, 90, "bio", RunState::Ended, Some(148));
        again.end = Some(150);
        sync_at(&mut s, 151, vec![again.clone()]);
        assert_eq!(sync_at(&mut s, 152, vec![done, again]).unchanged, 2);
        let runs = s.ledger().job_runs(9);
        let got: Vec<_> = runs.iter().map(|r| (r.start, r.end, r.state)).collect();
        assert_eq!(
            got,
            vec![
                (Some(110), Some(120), RunState::Ended),
                (Some(148), Some(150), RunState::Ended)
            ],
            "{runs:?}"
        );
    }

    /// An import of a run whose id is stored as another job is a conflict,
    /// never "unchanged" (issue 11 item 7).
    #[test]
    fn an_import_conflict_is_reported_not_dropped() {
        let (_d, mut s) = store();
        sync_one(
            &mut s,
            job_run(4, 900, "bio", RunState::Running, Some(1000)),
            1100,
        );
        let mut other =
            RunRecord::from_job_run(&job_run(4, 0, "filler", RunState::Ended, Some(3000)), 4000)
                .expect("valid");
        other.submit = 0;
        other.end = Some(3600);
        let out = s.ingest(&[other.clone()], "import", true).expect("ingest");
        assert_eq!((out.inserted, out.updated, out.unchanged), (0, 0, 0));
        assert_eq!(out.refused.len(), 1, "{out:?}");
        let why = &out.refused[0].error;
        assert!(
            why.contains("account filler (stored bio)") && why.contains("start 3000 (stored 1000)"),
            "{why}"
        );
        assert_eq!(s.ledger().get(4, 0).map(|r| r.account), Some("bio".into()));
        // The same run as stored (same account, user, size and start) is not one.
        let mut same = other;
        same.account = "bio".into();
        same.user = "bio-user".into();
        same.start = Some(1000);
        let out = s.ingest(&[same], "import", true).expect("ingest");
        assert!(out.refused.is_empty() && out.updated == 1, "{out:?}");
    }

    fn acct(name: &str, parent: Option<&str>, alloc: f64) -> NewAccount {
        NewAccount {
            name: name.into(),
            parent: parent.map(Into::into),
            allocation_gpu_hours: alloc,
            overcommit: false,
        }
    }

    #[test]
    fn bad_mutations_change_nothing_and_good_ones_survive_reopen() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.db");
        {
            let mut s = Store::open(&path, &PolicyPatch::default()).expect("open");
            s.create_account("t", acct("a", None, 100.0), 1).expect("a");
            s.create_account("t", acct("a1", Some("a"), 60.0), 1)
                .expect("a1");
            let g = s.generation();
            assert!(matches!(
                s.create_account("t", acct("a", None, 1.0), 2),
                Err(AppError::Conflict(_))
            ));
            assert!(matches!(
                s.create_account("t", acct("x", Some("zz"), 1.0), 2),
                Err(AppError::Invalid(_))
            ));
            assert!(matches!(
                s.create_account("t", acct("a2", Some("a"), 50.0), 2),
                Err(AppError::Invalid(_))
            ));
            let cyc = AccountPatch {
                parent: Some("a1".into()),
                ..Default::default()
            };
            assert!(matches!(
                s.modify_account("t", "a", cyc, 2),
                Err(AppError::Invalid(_))
            ));
            assert!(matches!(
                s.delete_account("t", "a", 2),
                Err(AppError::Conflict(_))
            ));
            assert_eq!(s.generation(), g);
            assert_eq!(s.audit_log(0, 100).expect("audit").len(), 2);
        }
        let s = Store::open(&path, &PolicyPatch::default()).expect("reopen");
        assert_eq!(s.tree().accounts.len(), 2);
        assert_eq!(s.generation(), 2);
    }

    #[test]
    fn delete_takes_members_and_coordinators_along() {
        let (_d, mut s) = store();
        s.create_account("t", acct("a", None, 10.0), 1).expect("a");
        s.add_member(
            "t",
            MemberSpec {
                user: "u".into(),
                account: "a".into(),
                allocation_gpu_hours: None,
            },
            1,
        )
        .expect("member");
        s.add_coordinator(
            "t",
            Coordinator {
                user: "c".into(),
                account: "a".into(),
            },
            1,
        )
        .expect("coord");
        s.delete_account("t", "a", 2).expect("delete");
        assert!(s.tree().members.is_empty());
        assert!(s.coordinators().is_empty());
    }
}
