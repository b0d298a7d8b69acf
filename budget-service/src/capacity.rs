//! The cluster's GPUs, read from Slurm once a minute by type ([`ClusterGpus`])
//! and published in the plugin snapshot: `cluster_gpus` (raw) and
//! `cluster_weighted_gpus`, each type's GPUs x its billing weight under the
//! store's weights, computed when the snapshot is (so a weight change applies
//! at once). The weighted count is the capacity the cost-aware rule scales
//! entitlements to when the top-level allocations exceed the cluster (both are
//! weighted GPUs: allocations are weighted GPU-hours), in the plugins and
//! `budgetctl why` as in the simulator.
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

use policy_core::GpuWeights;

use crate::scontrol::{self, NodeInfo, SlurmError};

/// How often the count is read again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How soon a failed read is tried again (budgetd may start before slurmctld).
pub const RETRY: Duration = Duration::from_secs(5);

/// GPUs of the nodes that count toward the capacity, by `Gres=` type
/// (lower-cased; `None`: untyped).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClusterGpus {
    by_type: BTreeMap<Option<String>, u32>,
}

impl ClusterGpus {
    /// The GPUs of the nodes that count toward the capacity; `None` when
    /// they are 0.
    pub fn from_nodes(nodes: &BTreeMap<String, NodeInfo>) -> Option<ClusterGpus> {
        let mut by_type: BTreeMap<Option<String>, u32> = BTreeMap::new();
        for n in nodes.values().filter(|n| n.counts_toward_capacity()) {
            for (t, g) in &n.gpu_types {
                let e = by_type.entry(t.clone()).or_default();
                *e = e.saturating_add(*g);
            }
        }
        let c = ClusterGpus { by_type };
        (c.total() > 0).then_some(c)
    }

    /// `gpus` GPUs of no named type (`None` when 0): a cluster given by its
    /// size alone (tests, `budgetd-testkit`).
    pub fn untyped(gpus: u32) -> Option<ClusterGpus> {
        (gpus > 0).then(|| ClusterGpus {
            by_type: BTreeMap::from([(None, gpus)]),
        })
    }

    /// Raw GPUs (the snapshot's `cluster_gpus`).
    pub fn total(&self) -> u32 {
        self.by_type
            .values()
            .fold(0u32, |acc, &n| acc.saturating_add(n))
    }

    /// Weighted GPUs under `weights` (the snapshot's `cluster_weighted_gpus`):
    /// each type's GPUs x its weight (untyped and unknown types: the default
    /// weight), rounded to 1e-9 so that the JSON reads as the sum an admin
    /// would write (8 x 2.2 = 17.6).
    pub fn weighted(&self, weights: &GpuWeights) -> f64 {
        let w: f64 = self
            .by_type
            .iter()
            .map(|(t, &n)| f64::from(n) * weights.weight(t.as_deref()))
            .sum();
        let r = (w * 1e9).round() / 1e9;
        if r.is_finite() { r } else { w }
    }
}

/// What one read of Slurm leaves published: the GPUs it gave, or the last
/// known ones when it failed.
#[derive(Debug, Default)]
pub struct Tracker {
    known: Option<ClusterGpus>,
    last_error: Option<String>,
}

impl Tracker {
    /// Takes one read's outcome; returns the count to publish and, when the read
    /// failed with an error other than the last one, the message to log.
    pub fn update(
        &mut self,
        read: Result<BTreeMap<String, NodeInfo>, SlurmError>,
    ) -> (Option<ClusterGpus>, Option<String>) {
        match read {
            Ok(nodes) if !nodes.is_empty() => {
                self.last_error = None;
                self.known = ClusterGpus::from_nodes(&nodes);
                (self.known.clone(), None)
            }
            Ok(_) => self.failed("scontrol show node listed no node".into()),
            Err(e) => self.failed(e.to_string()),
        }
    }

    /// Whether the last read failed.
    pub fn failing(&self) -> bool {
        self.last_error.is_some()
    }

    fn failed(&mut self, msg: String) -> (Option<ClusterGpus>, Option<String>) {
        let log = (self.last_error.as_deref() != Some(msg.as_str())).then(|| msg.clone());
        self.last_error = Some(msg);
        (self.known.clone(), log)
    }
}

/// Starts the refresh: a read at once, then one every [`REFRESH`] ([`RETRY`]
/// after a failed one). Each count that differs from the last one published is
/// handed to `publish` (budgetd's: `AppState::set_capacity`); the worker is the
/// only writer, so it keeps the last published count itself and needs nothing
/// else of the service's state.
pub fn spawn<F>(publish: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(Option<ClusterGpus>) + Send + 'static,
{
    tokio::spawn(async move {
        let mut tracker = Tracker::default();
        // What the service holds before the first read: unknown.
        let mut before: Option<ClusterGpus> = None;
        loop {
            let (gpus, log) = tracker.update(scontrol::show_nodes().await);
            if let Some(msg) = log {
                tracing::warn!(error = %msg, kept = ?gpus.as_ref().map(ClusterGpus::total), "cluster GPUs: reading Slurm failed; keeping the last known count");
            }
            if gpus != before {
                tracing::info!(
                    cluster_gpus = ?gpus.as_ref().map(ClusterGpus::total),
                    by_type = ?gpus,
                    was = ?before.as_ref().map(ClusterGpus::total),
                    "cluster GPUs"
                );
                publish(gpus.clone());
                before = gpus;
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
        let total = |r: (Option<ClusterGpus>, Option<String>)| (r.0.map(|c| c.total()), r.1);
        assert_eq!(total(t.update(Ok(nodes))), (Some(6), None));
        assert!(!t.failing());
        let fail = || SlurmError::Unreachable {
            cmd: "scontrol show node -o".into(),
            message: "slurm_load_node error: Unable to contact slurm controller".into(),
        };
        let (gpus, log) = total(t.update(Err(fail())));
        assert_eq!(gpus, Some(6));
        assert!(log.is_some_and(|m| m.contains("Unable to contact")));
        // The same failure again: still the last count, not logged again.
        assert_eq!(total(t.update(Err(fail()))), (Some(6), None));
        assert!(t.failing());
        // Output without any node is a failed read too.
        let (gpus, log) = total(t.update(Ok(parse_nodes("garbage\n"))));
        assert_eq!(gpus, Some(6));
        assert!(log.is_some());
        // Every GPU node down: unknown, not 0.
        let down =
            parse_nodes("NodeName=a Gres=gpu:4 State=DOWN\nNodeName=x Gres=(null) State=IDLE");
        assert_eq!(t.update(Ok(down)), (None, None));
    }

    #[test]
    fn the_capacity_is_weighted_by_each_nodes_gpu_type() {
        // 8 untyped GPUs, 4 + 4 a100 (one node drained: not counted), 2 a100 and
        // 2 v100 on one node, 8 B300.
        let nodes = parse_nodes(
            "NodeName=a Gres=gpu:8 State=IDLE\n\
             NodeName=b Gres=gpu:a100:4(S:0-1) State=MIXED\n\
             NodeName=c Gres=gpu:a100:4(S:0-1) State=MIXED+DRAIN\n\
             NodeName=d Gres=gpu:A100:2(S:0),gpu:v100:2(S:1) State=ALLOCATED\n\
             NodeName=e Gres=gpu:b300:8(S:0-1) State=IDLE",
        );
        let c = ClusterGpus::from_nodes(&nodes).expect("GPUs");
        assert_eq!(c.total(), 24);
        // Uniform weights: the raw count.
        assert_eq!(c.weighted(&GpuWeights::default()), 24.0);
        let mut w = GpuWeights::default();
        w.set("b300", 2.2).expect("b300");
        w.set("a100", 0.5).expect("a100");
        // 8 x 1 + 6 x 0.5 + 2 x 1 (v100: the default) + 8 x 2.2 = 30.6.
        assert_eq!(c.weighted(&w), 30.6);
        w.default = 2.0;
        // Untyped and unknown types take the default weight: 16 + 3 + 4 + 17.6.
        assert_eq!(c.weighted(&w), 40.6);
    }
}
