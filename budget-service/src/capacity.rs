//! The cluster's GPU count, read from Slurm once a minute and published in the
//! plugin snapshot (`cluster_gpus`): the capacity the cost-aware rule scales
//! entitlements to when the top-level allocations exceed the cluster, in the
//! plugins and `budgetctl why` as in the simulator.
//!
//! The count is the GPUs (`Gres=`) of the nodes of `scontrol show node` that can
//! run jobs ([`NodeInfo::counts_toward_capacity`]). A failed read keeps the last
//! known count (logged once until a read succeeds again): a slurmctld restart
//! must not make the entitlements swing. A count of 0 (no node declares a `gpu`
//! GRES, or every GPU node is down or drained) is published as unknown: the
//! top-level allocations then stand as they are, as before budgetd read Slurm,
//! rather than entitling nobody.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scontrol::{self, NodeInfo, SlurmError};
use crate::state::AppState;

/// How often the count is read again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How soon a failed read is tried again (budgetd may start before slurmctld).
pub const RETRY: Duration = Duration::from_secs(5);

/// GPUs of the nodes that count toward the capacity; `None` when that is 0.
pub fn cluster_gpus(nodes: &BTreeMap<String, NodeInfo>) -> Option<u32> {
    let n = nodes
        .values()
        .filter(|n| n.counts_toward_capacity())
        .fold(0u32, |acc, n| acc.saturating_add(n.gpus));
    (n > 0).then_some(n)
}

/// What one read of Slurm leaves published: the count it gave, or the last
/// known one when it failed.
#[derive(Debug, Default)]
pub struct Tracker {
    known: Option<u32>,
    last_error: Option<String>,
}

impl Tracker {
    /// Takes one read's outcome; returns the count to publish and, when the read
    /// failed with an error other than the last one, the message to log.
    pub fn update(
        &mut self,
        read: Result<BTreeMap<String, NodeInfo>, SlurmError>,
    ) -> (Option<u32>, Option<String>) {
        match read {
            Ok(nodes) if !nodes.is_empty() => {
                self.last_error = None;
                self.known = cluster_gpus(&nodes);
                (self.known, None)
            }
            Ok(_) => self.failed("scontrol show node listed no node".into()),
            Err(e) => self.failed(e.to_string()),
        }
    }

    /// Whether the last read failed.
    pub fn failing(&self) -> bool {
        self.last_error.is_some()
    }

    fn failed(&mut self, msg: String) -> (Option<u32>, Option<String>) {
        let log = (self.last_error.as_deref() != Some(msg.as_str())).then(|| msg.clone());
        self.last_error = Some(msg);
        (self.known, log)
    }
}

/// Starts the refresh: a read at once, then one every [`REFRESH`] ([`RETRY`]
/// after a failed one).
pub fn spawn(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tracker = Tracker::default();
        loop {
            let before = state.cluster_gpus();
            let (gpus, log) = tracker.update(scontrol::show_nodes().await);
            if let Some(msg) = log {
                tracing::warn!(error = %msg, kept = ?gpus, "cluster GPUs: reading Slurm failed; keeping the last known count");
            }
            if gpus != before {
                tracing::info!(cluster_gpus = ?gpus, was = ?before, "cluster GPUs");
                state.set_cluster_gpus(gpus);
            }
            tokio::time::sleep(if tracker.failing() { RETRY } else { REFRESH }).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scontrol::parse_nodes;

    #[test]
    fn counts_nodes_that_run_jobs_and_keeps_the_last_count_on_failure() {
        let mut t = Tracker::default();
        let nodes = parse_nodes(
            "NodeName=a Gres=gpu:4 State=IDLE\nNodeName=b Gres=gpu:a100:4(S:0-1) State=MIXED+DRAIN\nNodeName=c Gres=gpu:2,shard:8 State=ALLOCATED",
        );
        assert_eq!(t.update(Ok(nodes)), (Some(6), None));
        assert!(!t.failing());
        let fail = || SlurmError::Unreachable {
            cmd: "scontrol show node -o".into(),
            message: "slurm_load_node error: Unable to contact slurm controller".into(),
        };
        let (gpus, log) = t.update(Err(fail()));
        assert_eq!(gpus, Some(6));
        assert!(log.is_some_and(|m| m.contains("Unable to contact")));
        // The same failure again: still the last count, not logged again.
        assert_eq!(t.update(Err(fail())), (Some(6), None));
        assert!(t.failing());
        // Output without any node is a failed read too.
        let (gpus, log) = t.update(Ok(parse_nodes("garbage\n")));
        assert_eq!(gpus, Some(6));
        assert!(log.is_some());
        // Every GPU node down: unknown, not 0.
        let down =
            parse_nodes("NodeName=a Gres=gpu:4 State=DOWN\nNodeName=x Gres=(null) State=IDLE");
        assert_eq!(t.update(Ok(down)), (None, None));
    }
}
