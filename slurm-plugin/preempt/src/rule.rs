//! The decision `preempt/budget` gives Slurm, as a pure function of job facts, the
//! per-pass holdings and the snapshot: the policy core's rule plus the drain hook.

use std::collections::HashSet;
use std::sync::Arc;

use budget_protocol::{PluginSnapshot, Policy};
use policy_core::hostlist;
use policy_core::preempt::{
    Allowed, Context, Decision, Denied, PreemptPolicy, drain_may_take, may_preempt,
};

use crate::jobs::JobFacts;

/// State computed once per scheduling pass: the snapshot it was computed with, GPUs
/// held per fair-share node by running non-free jobs, and the drained nodes.
#[derive(Debug)]
pub struct Holdings {
    stamp: i64,
    snapshot: Option<Arc<PluginSnapshot>>,
    held: Vec<u32>,
    drained: HashSet<String>,
}

impl Holdings {
    /// Compute from the running jobs. `stamp` is `last_job_update`.
    pub fn compute(
        stamp: i64,
        snapshot: Option<Arc<PluginSnapshot>>,
        running: Vec<JobFacts>,
    ) -> Self {
        let held = match &snapshot {
            Some(s) => s.fair_share.holdings(
                running
                    .iter()
                    .filter(|j| !j.contract.free_tier)
                    .map(|j| (j.account.as_str(), j.user.as_str(), j.gpus)),
            ),
            None => Vec::new(),
        };
        let drained = snapshot
            .as_ref()
            .map(|s| s.drains.iter().map(|d| d.node.clone()).collect())
            .unwrap_or_default();
        Holdings {
            stamp,
            snapshot,
            held,
            drained,
        }
    }

    /// Whether this is still valid for `stamp` and `snapshot` (same `Arc`, or both none).
    pub fn matches(&self, stamp: i64, snapshot: Option<&Arc<PluginSnapshot>>) -> bool {
        self.stamp == stamp
            && match (&self.snapshot, snapshot) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    /// Whether these were computed with a snapshot (else: safe mode).
    pub fn has_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// Whether `nodes` (a hostlist) touches a drained node. A list that does not
    /// parse (never seen from Slurm) touches none: a drain never takes a job by
    /// guesswork; budgetd's drain worker still requeues it at its window end.
    pub fn on_drained_node(&self, nodes: Option<&str>) -> bool {
        !self.drained.is_empty()
            && nodes
                .and_then(|n| hostlist::expand(n).ok())
                .is_some_and(|hosts| hosts.iter().any(|h| self.drained.contains(h)))
    }
}

/// May `preemptor` take `victim` now? `None` holdings = safe mode with no drains.
pub fn decide(
    h: Option<&Holdings>,
    policy: &Policy,
    preemptor: &JobFacts,
    victim: &JobFacts,
    now: i64,
) -> Result<Option<Allowed>, Denied> {
    if !victim.running {
        return Err(Denied::Protected { until: i64::MAX });
    }
    let (fs, held) = match h.and_then(|h| h.snapshot.as_ref().map(|s| (s, h))) {
        Some((s, h)) => (Some(&s.fair_share), h.held.as_slice()),
        None => (None, &[][..]),
    };
    let ctx = Context {
        fair_share: fs,
        held,
        policy: PreemptPolicy {
            hysteresis: policy.hysteresis,
        },
        now,
    };
    let (pv, vv) = (preemptor.view(), victim.view());
    let d: Decision = may_preempt(&ctx, &pv, &vv);
    match d {
        Ok(a) => Ok(Some(a)),
        // A maintenance drain may take any job past its window (free preemptors never
        // take anything).
        Err(e)
            if !matches!(e, Denied::Protected { .. } | Denied::PreemptorFree)
                && h.is_some_and(|h| h.on_drained_node(victim.nodes.as_deref()))
                && drain_may_take(&vv, now) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_protocol::DrainSpec;
    use policy_core::contract::Contract;
    use policy_core::tree::{AccountSpec, MemberSpec, TreeSpec};
    use policy_core::{FairShare, GpuWeights};

    fn snapshot(a_used: f64, b_used: f64, drains: Vec<DrainSpec>) -> Arc<PluginSnapshot> {
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: ["teama", "teamb"]
                .iter()
                .map(|n| AccountSpec {
                    name: n.to_string(),
                    parent: None,
                    allocation_gpu_hours: 100.0,
                    overcommit: false,
                })
                .collect(),
            members: vec![
                MemberSpec {
                    user: "alice".into(),
                    account: "teama".into(),
                    allocation_gpu_hours: None,
                },
                MemberSpec {
                    user: "bob".into(),
                    account: "teamb".into(),
                    allocation_gpu_hours: None,
                },
            ],
        };
        let usage = [
            (("teama".to_string(), "alice".to_string()), a_used * 3600.0),
            (("teamb".to_string(), "bob".to_string()), b_used * 3600.0),
        ]
        .into_iter()
        .collect();
        Arc::new(PluginSnapshot {
            version: "v".into(),
            generated_at: 0,
            policy: Policy::default(),
            weights: GpuWeights::default(),
            fair_share: FairShare::compute(&tree, &usage, 0, 7 * 86400),
            drains,
        })
    }

    fn job(
        id: u32,
        account: &str,
        user: &str,
        min: i64,
        free: bool,
        start: i64,
        running: bool,
    ) -> JobFacts {
        JobFacts {
            job_id: id,
            account: account.into(),
            user: user.into(),
            contract: Contract {
                min_runtime: min,
                free_tier: free,
            },
            run_start: start,
            gpus: 2,
            running,
            nodes: Some("gpu[1-2]".into()),
        }
    }

    #[test]
    fn over_budget_victim_after_its_window_only() {
        let s = snapshot(10.0, 150.0, vec![]);
        let victim = job(1, "teamb", "bob", 20, false, 1000, true);
        let p = job(2, "teama", "alice", 20, false, 0, false);
        let h = Holdings::compute(7, Some(Arc::clone(&s)), vec![victim.clone()]);
        let pol = Policy::default();
        assert!(matches!(
            decide(Some(&h), &pol, &p, &victim, 1019),
            Err(Denied::Protected { until: 1020 })
        ));
        assert_eq!(
            decide(Some(&h), &pol, &p, &victim, 1020),
            Ok(Some(Allowed::VictimOverBudget))
        );
        // Reverse: never.
        let v2 = job(3, "teama", "alice", 0, false, 0, true);
        let p2 = job(4, "teamb", "bob", 0, false, 0, false);
        assert!(decide(Some(&h), &pol, &p2, &v2, 5000).is_err());
        // Pending "victims" are never taken.
        assert!(
            decide(
                Some(&h),
                &pol,
                &p,
                &job(5, "teamb", "bob", 0, false, 0, false),
                5000
            )
            .is_err()
        );
        assert!(h.matches(7, Some(&s)) && !h.matches(8, Some(&s)) && !h.matches(7, None));
    }

    #[test]
    fn safe_mode_and_free_tier() {
        let pol = Policy::default();
        let free = job(1, "teamb", "bob", 0, true, 1000, true);
        let budgeted = job(2, "teamb", "bob", 20, false, 0, true);
        let p = job(3, "teama", "alice", 20, false, 0, false);
        assert_eq!(
            decide(None, &pol, &p, &free, 1000),
            Ok(Some(Allowed::VictimFreeTier))
        );
        assert_eq!(
            decide(None, &pol, &p, &budgeted, 5000),
            Err(Denied::SafeMode)
        );
        let fp = job(4, "teama", "alice", 0, true, 0, false);
        assert_eq!(
            decide(None, &pol, &fp, &free, 5000),
            Err(Denied::PreemptorFree)
        );
    }

    #[test]
    fn drains_take_any_job_past_its_window() {
        let drain = DrainSpec {
            node: "gpu2".into(),
            reason: "fan".into(),
            since: 0,
        };
        let s = snapshot(10.0, 10.0, vec![drain]);
        let victim = job(1, "teama", "alice", 20, false, 1000, true);
        let p = job(2, "teamb", "bob", 0, false, 0, false);
        let h = Holdings::compute(1, Some(s), vec![victim.clone()]);
        let pol = Policy::default();
        assert!(matches!(
            decide(Some(&h), &pol, &p, &victim, 1010),
            Err(Denied::Protected { .. })
        ));
        assert_eq!(decide(Some(&h), &pol, &p, &victim, 1020), Ok(None));
        let mut elsewhere = victim.clone();
        elsewhere.nodes = Some("gpu3".into());
        assert!(decide(Some(&h), &pol, &p, &elsewhere, 1020).is_err());
        let mut unparsable = victim.clone();
        unparsable.nodes = Some("gpu[2".into());
        assert!(decide(Some(&h), &pol, &p, &unparsable, 1020).is_err());
    }
}
