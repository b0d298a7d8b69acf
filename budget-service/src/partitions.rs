//! Slurm's partitions' `PriorityTier`s, read from `scontrol show partition -o`
//! once a minute ([`spawn`]), so that `why` and shadow mode judge a preemption
//! between partitions as `preempt/budget` does: the plugin reads each job's
//! `part_ptr->priority_tier`, budgetd the tier of the partition the ledger names
//! for the run ([`tier_of`]).
//!
//! A failed read keeps the last known tiers (logged once until a read succeeds):
//! a slurmctld restart must not make `why` change its answers. Before any read the
//! map is empty: every tier is unknown and the budgets alone decide, as for a
//! ledger run without a partition.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scontrol;

/// How often the tiers are read again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How soon a failed read is tried again (budgetd may start before slurmctld).
pub const RETRY: Duration = Duration::from_secs(5);

/// `PriorityTier` by partition name.
pub type PartitionTiers = BTreeMap<String, u16>;

/// The tier a run of `partition` (the ledger's text: one name, or a pending
/// job's comma-separated list) is judged in: the highest known tier among the
/// names (Slurm tries each partition of a pending job in turn; its best one is
/// what it may preempt from); `None` when none is known.
pub fn tier_of(tiers: &PartitionTiers, partition: Option<&str>) -> Option<u16> {
    partition?
        .split(',')
        .filter_map(|p| tiers.get(p.trim()).copied())
        .max()
}

/// Reads the tiers every [`REFRESH`] ([`RETRY`] after a failure) and calls `publish` with each read that
/// changed them.
pub fn spawn<F>(publish: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(PartitionTiers) + Send + 'static,
{
    tokio::spawn(async move {
        let mut before: Option<PartitionTiers> = None;
        let mut failing: Option<String> = None;
        loop {
            match scontrol::show_partition_tiers().await {
                Ok(tiers) => {
                    failing = None;
                    if before.as_ref() != Some(&tiers) {
                        tracing::info!(?tiers, "partition PriorityTiers");
                        publish(tiers.clone());
                        before = Some(tiers);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    if failing.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "partition PriorityTiers: reading Slurm failed; keeping the last known ones");
                        failing = Some(msg);
                    }
                }
            }
            tokio::time::sleep(if failing.is_some() { RETRY } else { REFRESH }).await;
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_is_judged_in_its_best_known_partition() {
        let tiers = PartitionTiers::from([("gpu".into(), 1), ("high".into(), 2)]);
        assert_eq!(tier_of(&tiers, Some("gpu")), Some(1));
        assert_eq!(tier_of(&tiers, Some("gpu,high")), Some(2));
        assert_eq!(tier_of(&tiers, Some("gone,gpu")), Some(1));
        assert_eq!(tier_of(&tiers, Some("gone")), None);
        assert_eq!(tier_of(&tiers, None), None);
        assert_eq!(tier_of(&PartitionTiers::new(), Some("gpu")), None);
    }
}
