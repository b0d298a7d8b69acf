//! Maintenance drains that respect the scheduling contract (docs/design.md §7):
//! the `drains` table and what a drain means for the jobs on its nodes.
//!
//! Mechanism (ARCHITECTURE.md, "Drains", with the measurement behind it): budgetd
//! persists each drained node here (so a drain survives a restart of budgetd),
//! sets Slurm's own `state=DRAIN reason="budget: TEXT"` so no new job lands
//! there ([`crate::scontrol::drain`]), and the drain worker
//! ([`crate::drain_worker`]) requeues every job on a drained node the first
//! second [`policy_core::preempt::drain_may_take`] allows it: free-tier jobs at
//! once, others when their protected window ends. Undrain is `state=resume`
//! plus deleting the row. Drains also go into the plugin snapshot (`drains`),
//! where `preempt/budget` lets any non-free pending job take a drained node's
//! job once its window is over.
//!
//! A job of a partition with `PreemptMode=OFF` is never requeued by a drain
//! (the site's "never preempted"): the drain waits for it to end, so its node
//! is empty at the job's end time (its time limit), not at its window end.
//!
//! This module is the table and the pure rules over it (no Slurm call, no
//! worker): [`status`] says per node which jobs hold it and when and how each
//! leaves it, from what the caller read from Slurm.

use std::collections::BTreeMap;

use budget_protocol::DrainSpec;
use budget_protocol::drains::{DrainStatus, HoldingJob, Leaves};
use policy_core::contract::{effective_contract, is_free_name};
use policy_core::hostlist;
use policy_core::protection::window_end;
use rusqlite::params;
use serde_json::json;

use crate::error::{AppError, AppResult};
use crate::scontrol::{NodeInfo, PartitionInfo, SlurmJob, bare_reason};
use crate::store::{Change, Store};

/// One drained node as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrainRow {
    pub node: String,
    pub reason: String,
    pub since: i64,
    pub actor: String,
}

/// Every drain, by node.
pub fn list(store: &Store) -> AppResult<Vec<DrainRow>> {
    let mut st = store
        .conn()
        .prepare("SELECT node, reason, since, actor FROM drains ORDER BY node")?;
    let rows = st.query_map([], |r| {
        Ok(DrainRow {
            node: r.get(0)?,
            reason: r.get(1)?,
            since: r.get(2)?,
            actor: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The snapshot's view of the drains.
pub fn snapshot_drains(store: &Store) -> Vec<DrainSpec> {
    list(store)
        .unwrap_or_default()
        .into_iter()
        .map(|d| DrainSpec {
            node: d.node,
            reason: d.reason,
            since: d.since,
        })
        .collect()
}

/// Writes (`Some(reason)`) or deletes (`None`) drains of `nodes` in one transaction
/// with an audit row, and bumps the generation so the plugins' snapshot changes.
pub fn write(
    store: &mut Store,
    actor: &str,
    nodes: &[String],
    reason: Option<&str>,
    now: i64,
) -> AppResult<()> {
    let change = Change {
        actor,
        at: now,
        action: if reason.is_some() { "drain" } else { "undrain" },
        target: nodes.join(","),
        old: None,
        new: reason.map(|r| json!({ "reason": r })),
    };
    store.commit(
        Some(change),
        |tx| {
            for n in nodes {
                match reason {
                    Some(r) => tx.execute(
                        "INSERT INTO drains(node, reason, since, actor) VALUES (?1, ?2, ?3, ?4) \
                         ON CONFLICT(node) DO UPDATE SET reason = excluded.reason, actor = excluded.actor",
                        params![n, r, now, actor],
                    )?,
                    None => tx.execute("DELETE FROM drains WHERE node = ?1", [n])?,
                };
            }
            Ok(())
        },
        |_| {},
    )
}

/// The job's contract `(free_tier, min_runtime_secs)`: the validated one in
/// `admin_comment` (written by `job_submit/budget`), else the comment read as the
/// submit plugin would, with the site default (policy-core's one reader).
pub fn contract(job: &SlurmJob, default_min: i64) -> (bool, i64) {
    let c = effective_contract(
        Some(&job.admin_comment),
        Some(&job.comment),
        is_free_name(Some(&job.partition)) || is_free_name(Some(&job.qos)),
        default_min,
    );
    (c.free_tier, c.min_runtime)
}

/// Whether a running job holds any of the `drained` nodes. (A node list Slurm
/// printed is valid; one that is not holds no node we could name.)
pub fn on_drained_node(job: &SlurmJob, drained: &[&str]) -> bool {
    job.holds_nodes()
        && hostlist::expand(&job.nodelist)
            .unwrap_or_default()
            .iter()
            .any(|n| drained.contains(&n.as_str()))
}

/// Whether `job` runs in a partition with `PreemptMode=OFF`: no drain
/// requeues it (the drain worker skips it; `preempt/budget` lets no
/// preemptor take it).
pub fn preempt_off(job: &SlurmJob, partitions: &BTreeMap<String, PartitionInfo>) -> bool {
    partitions
        .get(&job.partition)
        .is_some_and(|p| p.preempt_off)
}

/// How and when `job`, whose protected window ends at `window` (now for
/// free tier), leaves a drained node: requeued by the drain then, or, in a
/// `PreemptMode=OFF` partition, at its end time (its time limit). Slurm always
/// gives a running job an end time; were it missing, the window end stands in
/// (the earliest the job could leave were it preemptible).
pub fn leaves(
    job: &SlurmJob,
    partitions: &BTreeMap<String, PartitionInfo>,
    window: i64,
) -> (Leaves, i64) {
    if preempt_off(job, partitions) {
        (Leaves::TimeLimit, job.end.unwrap_or(window))
    } else {
        (Leaves::Requeue, window)
    }
}

/// Drains with their holding jobs at `now` (pure: the caller reads Slurm).
/// A node is empty when its last job leaves ([`leaves`]).
pub fn status(
    drains: &[DrainRow],
    nodes: &BTreeMap<String, NodeInfo>,
    jobs: &[SlurmJob],
    partitions: &BTreeMap<String, PartitionInfo>,
    default_min: i64,
    now: i64,
) -> Vec<DrainStatus> {
    drains
        .iter()
        .map(|d| {
            let holding: Vec<HoldingJob> = jobs
                .iter()
                .filter(|j| on_drained_node(j, &[d.node.as_str()]))
                .map(|j| {
                    let (free, min) = contract(j, default_min);
                    let window = window_end(free, min, j.start, now);
                    let (how, at) = leaves(j, partitions, window);
                    HoldingJob {
                        job_id: j.job_id,
                        run: j.run,
                        account: j.account.clone(),
                        user: j.user.clone(),
                        gpus: j.gpus,
                        free_tier: free,
                        start: j.start,
                        requeue_at: at,
                        leaves: how,
                        partition: j.partition.clone(),
                    }
                })
                .collect();
            DrainStatus {
                node: d.node.clone(),
                reason: d.reason.clone(),
                since: d.since,
                actor: d.actor.clone(),
                slurm_state: nodes
                    .get(&d.node)
                    .map_or("UNKNOWN".into(), |n| n.state.clone()),
                empty: holding.is_empty(),
                empty_at: holding.iter().map(|h| h.requeue_at).max().unwrap_or(now),
                jobs: holding,
            }
        })
        .collect()
}

/// What undoing a failed `scontrol update ... state=drain` takes. slurmctld
/// applies a node list node by node and stops at the first node it does not
/// know, so a refused drain may have drained, or re-labelled, the nodes before
/// it; this compares Slurm's nodes before the request with Slurm's nodes after
/// the failure.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct DrainUndo {
    /// Not draining before, draining now: resume them.
    pub resume: Vec<String>,
    /// budgetd's drains whose Slurm reason the request overwrote, by their
    /// reason (budgetd's, without `budget: `): drain them again with it.
    pub redrain: BTreeMap<String, Vec<String>>,
    /// Drained by someone else before, their reason overwritten, by the reason
    /// as it was set: put it back (the state is left alone).
    pub reason_back: BTreeMap<String, Vec<String>>,
}

impl DrainUndo {
    pub fn is_empty(&self) -> bool {
        self.resume.is_empty() && self.redrain.is_empty() && self.reason_back.is_empty()
    }
}

/// The undo of a failed drain of `requested` (pure: the caller reads Slurm).
/// `rows` are budgetd's drains before the request.
pub fn drain_undo(
    requested: &[String],
    before: &BTreeMap<String, NodeInfo>,
    after: &BTreeMap<String, NodeInfo>,
    rows: &[DrainRow],
) -> DrainUndo {
    let mut undo = DrainUndo::default();
    let reason = |n: &NodeInfo| n.reason.as_deref().map(bare_reason).map(str::to_string);
    for name in requested {
        // A node Slurm no longer knows has nothing left to undo.
        let (Some(b), Some(a)) = (before.get(name), after.get(name)) else {
            continue;
        };
        if !b.draining() {
            if a.draining() {
                undo.resume.push(name.clone());
            }
        } else if reason(a) != reason(b) {
            match (rows.iter().find(|d| &d.node == name), reason(b)) {
                (Some(d), _) => undo
                    .redrain
                    .entry(d.reason.clone())
                    .or_default()
                    .push(name.clone()),
                (None, Some(r)) => undo.reason_back.entry(r).or_default().push(name.clone()),
                (None, None) => {}
            }
        }
    }
    undo
}

/// The undo of a failed `scontrol update ... state=resume` of `resumed`
/// (budgetd's drains, all draining before): the nodes Slurm resumed anyway,
/// by their drain reason, to drain again.
pub fn resume_undo(
    resumed: &[String],
    after: &BTreeMap<String, NodeInfo>,
    rows: &[DrainRow],
) -> BTreeMap<String, Vec<String>> {
    let mut redrain: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for name in resumed {
        let released = after.get(name).is_some_and(|n| !n.draining());
        if let (true, Some(d)) = (released, rows.iter().find(|d| &d.node == name)) {
            redrain
                .entry(d.reason.clone())
                .or_default()
                .push(name.clone());
        }
    }
    redrain
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scontrol::tests::JOB;
    use crate::scontrol::{parse_jobs, parse_nodes};

    #[test]
    fn contract_from_admin_comment_else_comment() {
        let j = &parse_jobs(JOB)[0];
        assert_eq!(contract(j, 5), (false, 60));
        let free = JOB.replace(
            "AdminComment=budget:min_runtime=60 ",
            "AdminComment=budget:min_runtime=0 budget:free",
        );
        assert_eq!(contract(&parse_jobs(&free)[0], 5), (true, 0));
        let none = JOB.replace("AdminComment=budget:min_runtime=60 ", "AdminComment= ");
        assert_eq!(contract(&parse_jobs(&none)[0], 5), (false, 60));
    }

    #[test]
    fn status_gives_per_node_eta() {
        let jobs = parse_jobs(&format!(
            "{JOB}\n{}",
            JOB.replace("JobId=7", "JobId=8")
                .replace("StartTime=1000", "StartTime=1100")
                .replace("budget:min_runtime=60", "budget:min_runtime=0 budget:free")
        ));
        let nodes = parse_nodes(
            "NodeName=gpu1 Arch=x86_64 State=MIXED+DRAIN Reason=budget: fan [root@1]\nNodeName=gpu3 State=IDLE",
        );
        let d = |n: &str| DrainRow {
            node: n.into(),
            reason: "fan".into(),
            since: 1,
            actor: "root".into(),
        };
        let parts = BTreeMap::new();
        let st = status(&[d("gpu1"), d("gpu3")], &nodes, &jobs, &parts, 30, 1030);
        assert_eq!(st[0].jobs.len(), 2);
        assert_eq!(st[0].jobs[0].requeue_at, 1060);
        assert_eq!(st[0].jobs[0].leaves, Leaves::Requeue);
        assert_eq!(st[0].jobs[1].requeue_at, 1030, "free tier: now");
        assert_eq!(st[0].empty_at, 1060);
        assert!(st[1].empty && st[1].empty_at == 1030);
        assert_eq!(st[1].slurm_state, "IDLE");
    }

    #[test]
    fn a_preempt_mode_off_job_leaves_at_its_end_time() {
        // Job 7 (window ends 1060, EndTime 4600) in partition frozen
        // (PreemptMode=OFF); job 8, free tier, in gpu.
        let jobs = parse_jobs(&format!(
            "{}\n{}",
            JOB.replace("Partition=gpu", "Partition=frozen EndTime=4600"),
            JOB.replace("JobId=7", "JobId=8")
                .replace("budget:min_runtime=60", "budget:min_runtime=0 budget:free")
        ));
        let nodes = parse_nodes("NodeName=gpu1 State=MIXED+DRAIN Reason=budget: fan [root@1]");
        let part = |preempt_off| PartitionInfo {
            tier: 1,
            preempt_off,
        };
        let parts = BTreeMap::from([
            ("frozen".to_string(), part(true)),
            ("gpu".to_string(), part(false)),
        ]);
        let row = DrainRow {
            node: "gpu1".into(),
            reason: "fan".into(),
            since: 1,
            actor: "root".into(),
        };
        let st = status(std::slice::from_ref(&row), &nodes, &jobs, &parts, 30, 1030);
        let j = &st[0].jobs;
        assert_eq!((j[0].leaves, j[0].requeue_at), (Leaves::TimeLimit, 4600));
        assert_eq!(j[0].partition, "frozen");
        assert_eq!((j[1].leaves, j[1].requeue_at), (Leaves::Requeue, 1030));
        assert_eq!(st[0].empty_at, 4600, "the node waits for the OFF job's end");
        // frozen not OFF (or unknown): job 7 is requeued at its window end.
        let st = status(&[row], &nodes, &jobs, &BTreeMap::new(), 30, 1030);
        assert_eq!(
            (st[0].jobs[0].leaves, st[0].empty_at),
            (Leaves::Requeue, 1060)
        );
    }

    #[test]
    fn undo_of_a_drain_slurm_applied_in_part() {
        // Before: n1 drained by budgetd ("fan"), n4 by an admin, n2/n3/n5 in service.
        let before = parse_nodes(
            "NodeName=n1 State=MIXED+DRAIN Reason=budget: fan [root@1]\n\
             NodeName=n2 State=IDLE\nNodeName=n3 State=IDLE\n\
             NodeName=n4 State=IDLE+DRAIN Reason=admin: disk [alice@2]\nNodeName=n5 State=IDLE",
        );
        // slurmctld relabelled n1 and n4, drained n2, then stopped at n5 (gone).
        let after = parse_nodes(
            "NodeName=n1 State=MIXED+DRAIN Reason=budget: psu [root@3]\n\
             NodeName=n2 State=IDLE+DRAIN Reason=budget: psu [root@3]\nNodeName=n3 State=IDLE\n\
             NodeName=n4 State=IDLE+DRAIN Reason=budget: psu [root@3]",
        );
        let rows = [DrainRow {
            node: "n1".into(),
            reason: "fan".into(),
            since: 1,
            actor: "root".into(),
        }];
        let req: Vec<String> = ["n1", "n2", "n3", "n4", "n5"].map(String::from).to_vec();
        let undo = drain_undo(&req, &before, &after, &rows);
        assert_eq!(undo.resume, ["n2"]);
        assert_eq!(
            undo.redrain,
            BTreeMap::from([("fan".into(), vec!["n1".into()])])
        );
        assert_eq!(
            undo.reason_back,
            BTreeMap::from([("admin: disk".into(), vec!["n4".into()])])
        );
        // Nothing applied: nothing to undo.
        assert!(drain_undo(&req, &before, &before, &rows).is_empty());
        // A resume Slurm applied to n1 before refusing n2: n1 is drained again.
        let resumed = parse_nodes("NodeName=n1 State=MIXED\nNodeName=n2 State=IDLE+DRAIN");
        let rows2 = [
            rows[0].clone(),
            DrainRow {
                node: "n2".into(),
                ..rows[0].clone()
            },
        ];
        assert_eq!(
            resume_undo(&["n1".into(), "n2".into()], &resumed, &rows2),
            BTreeMap::from([("fan".into(), vec!["n1".into()])])
        );
    }
}

/// How old the drain worker's last reading of Slurm may be for `GET
/// /v1/drains` to be answered from it (the worker reads Slurm once a second
/// while drains exist). Older: 503, as the status would be a guess.
pub const VIEW_MAX_AGE: std::time::Duration = std::time::Duration::from_secs(10);

/// Slurm's nodes and jobs as a drain worker pass (or a drain request) last
/// read them: `GET /v1/drains` answers from this, so reading drains starts no
/// Slurm process however often it is asked.
#[derive(Debug)]
pub struct SlurmView {
    pub nodes: BTreeMap<String, NodeInfo>,
    pub jobs: Vec<SlurmJob>,
    /// Read with the jobs: which of them runs to its time limit.
    pub partitions: BTreeMap<String, PartitionInfo>,
    pub read: std::time::Instant,
}

/// The status of `drains` from the last [`SlurmView`], or why it cannot be
/// given (no reading yet, or one older than [`VIEW_MAX_AGE`]).
pub fn status_from_view(
    drains: &[DrainRow],
    view: Option<&SlurmView>,
    default_min: i64,
    now: i64,
) -> AppResult<Vec<DrainStatus>> {
    if drains.is_empty() {
        return Ok(Vec::new());
    }
    match view {
        Some(v) if v.read.elapsed() <= VIEW_MAX_AGE => Ok(status(
            drains,
            &v.nodes,
            &v.jobs,
            &v.partitions,
            default_min,
            now,
        )),
        Some(v) => Err(AppError::Unavailable(format!(
            "drain status unknown: budgetd last read Slurm {} s ago (at most {} s is served); \
             the drain worker cannot reach Slurm, see budgetd's log",
            v.read.elapsed().as_secs(),
            VIEW_MAX_AGE.as_secs()
        ))),
        None => Err(AppError::Unavailable(
            "drain status unknown: budgetd has not read Slurm yet; try again in a second".into(),
        )),
    }
}
