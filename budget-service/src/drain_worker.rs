//! The drain worker (docs/design.md §7): one pass per second while budgetd
//! runs, keeping Slurm's DRAIN on every drained node and requeueing each job
//! there the first second its contract lets go (see [`crate::drains`]).
//!
//! It reads running jobs fresh from Slurm each tick (not from the plugin's last
//! sync, which can be seconds old), so a requeue lands within one tick of the
//! window end; it re-applies DRAIN when Slurm lost it (a `slurmctld` restarted
//! with clean state, a manual resume). Each requeue it issues is recorded as a
//! `drain` preemption. A job of a partition with `PreemptMode=OFF` is never
//! requeued: the site said its jobs are never preempted, maintenance included,
//! so the drain waits for it to end (as `preempt/budget` never lets a drain's
//! preemptor take it).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use budget_protocol::preemption::{PreemptionReason, PreemptionRecord};
use policy_core::preempt::{JobView, drain_may_take};
use policy_core::protection::window_end;

use crate::drains::{SlurmView, contract, on_drained_node, preempt_off};
use crate::error::AppResult;
use crate::scontrol::{self, NodeInfo, PartitionInfo, SlurmJob};
use crate::state::AppState;

impl AppState {
    /// Keeps what was just read from Slurm as the drains' view (served by
    /// `GET /v1/drains`) and returns it.
    pub fn publish_drain_view(
        &self,
        nodes: BTreeMap<String, NodeInfo>,
        jobs: Vec<SlurmJob>,
        partitions: BTreeMap<String, PartitionInfo>,
    ) -> Arc<SlurmView> {
        let view = Arc::new(SlurmView {
            nodes,
            jobs,
            partitions,
            read: Instant::now(),
        });
        *self.drain_view.lock().unwrap_or_else(|p| p.into_inner()) = Some(view.clone());
        view
    }

    /// The drains' last view of Slurm, however old.
    pub fn drain_view(&self) -> Option<Arc<SlurmView>> {
        self.drain_view
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Starts the drain worker: one pass per second while budgetd runs.
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut requeued: HashSet<(u32, u32)> = HashSet::new();
        let mut last_error = String::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let result = {
                let _ops = state.drain_ops.lock().await;
                pass(&state, &mut requeued).await
            };
            match result {
                Ok(()) => last_error.clear(),
                Err(e) => {
                    // Log a failure once, not every second (Slurm may be down for minutes).
                    let msg = e.to_string();
                    if msg != last_error {
                        tracing::warn!(error = %msg, "drain worker: pass failed; retrying every second");
                        last_error = msg;
                    }
                }
            }
        }
    })
}

/// One pass: keep DRAIN set, requeue every job the contract lets go.
async fn pass(state: &AppState, requeued: &mut HashSet<(u32, u32)>) -> AppResult<()> {
    let drains = state.with_store(|s| crate::drains::list(s)).await?;
    if drains.is_empty() {
        requeued.clear();
        return Ok(());
    }
    let nodes = scontrol::show_nodes().await?;
    for d in &drains {
        match nodes.get(&d.node) {
            Some(n) if !n.draining() => {
                // Slurm forgot the drain (slurmctld restarted with clean state, or
                // someone resumed the node by hand): the persisted drain wins.
                tracing::info!(node = %d.node, state = %n.state, "drain worker: re-applying DRAIN");
                scontrol::drain(std::slice::from_ref(&d.node), &d.reason).await?;
            }
            Some(_) => {}
            None => tracing::debug!(node = %d.node, "drain worker: node unknown to Slurm"),
        }
    }
    let jobs = scontrol::show_jobs().await?;
    // Read fresh with the jobs (not the 60 s reader's copy, empty until its
    // first read): a requeue cannot be taken back.
    let partitions = scontrol::show_partitions().await?;
    let view = state.publish_drain_view(nodes, jobs, partitions);
    let (jobs, partitions) = (&view.jobs, &view.partitions);
    let default_min = state
        .with_store(|s| Ok(s.policy().default_min_runtime_secs))
        .await?;
    let drained: Vec<&str> = drains.iter().map(|d| d.node.as_str()).collect();
    let now = crate::clock::now();
    // One job that cannot be requeued (gone, already completing, refused)
    // must not hold up the others: failures are collected, the pass goes on.
    let mut failures: Vec<String> = Vec::new();
    for j in jobs {
        if !on_drained_node(j, &drained) || requeued.contains(&(j.job_id, j.run)) {
            continue;
        }
        if preempt_off(j, partitions) {
            tracing::debug!(job = j.job_id, partition = %j.partition, "drain worker: PreemptMode=OFF, waiting for the job to end");
            continue;
        }
        let (free, min) = contract(j, default_min);
        let view = JobView {
            job_id: j.job_id,
            account: &j.account,
            user: &j.user,
            free_tier: free,
            run_start: j.start.unwrap_or(0),
            min_runtime: min,
            gpus: j.gpus,
        };
        if !drain_may_take(&view, now) {
            continue;
        }
        if let Err(e) = scontrol::requeue(j.job_id).await {
            failures.push(format!("job {}: {e}", j.job_id));
            continue;
        }
        requeued.insert((j.job_id, j.run));
        let due = window_end(free, min, j.start, now);
        tracing::info!(
            job = j.job_id,
            run = j.run,
            nodes = %j.nodelist,
            free_tier = free,
            lag_secs = now - due,
            "drain worker: requeued"
        );
        let rec = PreemptionRecord {
            victim: j.job_id,
            run: j.run,
            preemptor: None,
            reason: PreemptionReason::Drain,
            at: now,
            account: Some(j.account.clone()),
            user: Some(j.user.clone()),
            gpus: Some(j.gpus),
            start: j.start,
        };
        if let Err(e) = state
            .with_store(move |s| crate::preemptions::record(s, &rec, "drain"))
            .await
        {
            failures.push(format!("job {}: recording the preemption: {e}", j.job_id));
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(crate::error::AppError::Unavailable(format!(
            "{} requeue(s) failed: {}",
            failures.len(),
            failures.join("; ")
        )))
    }
}
