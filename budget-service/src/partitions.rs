//! Slurm's partitions' `PriorityTier`s and whether their `PreemptMode` is `OFF`,
//! read from `scontrol show partition -o` once a minute ([`spawn`]), so that `why`
//! and shadow mode judge a preemption between partitions as `preempt/budget`
//! does: the plugin reads each job's `part_ptr->priority_tier` and
//! `part_ptr->preempt_mode`, budgetd those of the partition the ledger names for
//! the run ([`tier_of`], [`preempt_off_of`]).
//!
//! A failed read keeps the last known partitions (logged once until a read
//! succeeds): a slurmctld restart must not make `why` change its answers. Before
//! any read the map is empty: every tier is unknown and the budgets alone decide,
//! and no partition is known to be `OFF`, as for a ledger run without a partition.
//! The drain worker reads the same map: a drain never requeues a job of an `OFF`
//! partition (`crate::drain_worker`).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::scontrol;

/// How often the tiers are read again.
pub const REFRESH: Duration = Duration::from_secs(60);
/// How soon a failed read is tried again (budgetd may start before slurmctld).
pub const RETRY: Duration = Duration::from_secs(5);

/// What the rule reads of one partition (tier, `PreemptMode=OFF`).
pub use crate::scontrol::PartitionInfo as Partition;

/// The partitions by name.
pub type Partitions = BTreeMap<String, Partition>;

/// The tier a run of `partition` (the ledger's text: one name, or a pending
/// job's comma-separated list) is judged in: the highest known tier among the
/// names (Slurm tries each partition of a pending job in turn; its best one is
/// what it may preempt from); `None` when none is known.
pub fn tier_of(partitions: &Partitions, partition: Option<&str>) -> Option<u16> {
    partition?
        .split(',')
        .filter_map(|p| partitions.get(p.trim()).map(|p| p.tier))
        .max()
}

/// The name of the partition with `PreemptMode=OFF` a running run of
/// `partition` (the ledger's text) runs in, if any, as the rule's view carries
/// it (`RunningJob::partition_preempt_off`). A running run names one partition;
/// were it a list, any `OFF` one among the names counts (never preempting a job
/// that may be in such a partition is the safe side).
pub fn preempt_off_of<'a>(partitions: &Partitions, partition: Option<&'a str>) -> Option<&'a str> {
    partition?
        .split(',')
        .map(str::trim)
        .find(|p| partitions.get(*p).is_some_and(|p| p.preempt_off))
}

/// Reads the partitions every [`REFRESH`] ([`RETRY`] after a failure) and calls `publish` with each read that
/// changed them.
pub fn spawn<F>(publish: F) -> tokio::task::JoinHandle<()>
where
    F: Fn(Partitions) + Send + 'static,
{
    tokio::spawn(async move {
        let mut before: Option<Partitions> = None;
        let mut failing: Option<String> = None;
        loop {
            match scontrol::show_partitions().await {
                Ok(partitions) => {
                    failing = None;
                    if before.as_ref() != Some(&partitions) {
                        tracing::info!(?partitions, "partition PriorityTiers and PreemptMode=OFF");
                        publish(partitions.clone());
                        before = Some(partitions);
                    }
                }
                Err(e) => {
                    let msg = e.to_string();
                    if failing.as_deref() != Some(msg.as_str()) {
                        tracing::warn!(error = %msg, "partitions: reading Slurm failed; keeping the last known ones");
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
        let part = |tier, preempt_off| Partition { tier, preempt_off };
        let tiers = Partitions::from([
            ("gpu".into(), part(1, false)),
            ("high".into(), part(2, false)),
            ("frozen".into(), part(1, true)),
        ]);
        assert_eq!(tier_of(&tiers, Some("gpu")), Some(1));
        assert_eq!(tier_of(&tiers, Some("gpu,high")), Some(2));
        assert_eq!(tier_of(&tiers, Some("gone,gpu")), Some(1));
        assert_eq!(tier_of(&tiers, Some("gone")), None);
        assert_eq!(tier_of(&tiers, None), None);
        assert_eq!(tier_of(&Partitions::new(), Some("gpu")), None);
        // PreemptMode=OFF, by the partition's name.
        assert_eq!(preempt_off_of(&tiers, Some("frozen")), Some("frozen"));
        assert_eq!(preempt_off_of(&tiers, Some("gpu, frozen")), Some("frozen"));
        assert_eq!(preempt_off_of(&tiers, Some("gpu")), None);
        assert_eq!(preempt_off_of(&tiers, Some("gone")), None);
        assert_eq!(preempt_off_of(&tiers, None), None);
        assert_eq!(preempt_off_of(&Partitions::new(), Some("frozen")), None);
    }
}
