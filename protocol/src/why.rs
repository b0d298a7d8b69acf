//! The explanation of one job (`GET /v1/jobs/{id}/why`, `budgetctl why`):
//! tier, rank path, priority and its parts, protection, whom it may preempt
//! or be preempted by and when, a drain's requeue time, an idle flag, and
//! what happened to its previous run.

use policy_core::FairShare;
use policy_core::fairshare::Tier;
use policy_core::priority::PriorityParts;
use policy_core::rebalance;
use serde::{Deserialize, Serialize};

use crate::RunState;
use crate::idle::FlaggedJob;
use crate::preemption::{Preemption, PreemptionReason};

/// One step of a job's rank path.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathStep {
    /// Account name, or `account/user` for a user node.
    pub node: String,
    pub allocation_gpu_hours: f64,
    pub usage_gpu_hours: f64,
    pub ratio: f64,
    /// Rank among siblings, 1 = lowest ratio.
    pub rank: u32,
    pub tier: Tier,
}

/// Why the rule allows a preemption, as `why` reports it (`reason` of
/// [`PreemptPeer`] and [`Outlook`]). Serialised with a `reason` tag in snake
/// case: `victim_free_tier`, `victim_over_budget`, `rebalance` with the
/// figures where the two jobs' paths split, `partition_tier` with the two
/// partitions' `PriorityTier`s, or `qos` with the two jobs' QOS names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum PeerReason {
    VictimFreeTier,
    /// The victim's path is over budget (or the rule took it by its
    /// over-budget clause), as `preempt/budget` records it.
    VictimOverBudget,
    /// Both budgeted; they split below `parent`.
    Rebalance {
        parent: String,
        preemptor_side: String,
        preemptor_ratio: f64,
        victim_side: String,
        victim_ratio: f64,
        /// Weighted GPUs the victim's side holds, rounded to a whole number
        /// (the field is an integer on the wire: earlier readers parse it so).
        victim_side_gpus: u32,
        /// Its entitled GPUs (weighted).
        victim_side_entitled_gpus: f64,
    },
    /// The site's partition order won: the preemptor's partition has the
    /// higher `PriorityTier` and the victim is past its protected window, so
    /// the budgets were not asked.
    PartitionTier {
        preemptor_tier: u16,
        victim_tier: u16,
    },
    /// The site's QOS order won: the preemptor's QOS lists the victim's in
    /// its `Preempt=` and the victim is past its protected window, so the
    /// budgets were not asked. Only `preempt/budget` knows the jobs' QOS
    /// (budgetd does not read them: its `why` never names this).
    Qos {
        preemptor_qos: String,
        victim_qos: String,
    },
}

impl PeerReason {
    /// The wire reason for what the cost-aware rule ([`rebalance::decide`])
    /// allowed, with `fs` naming the nodes. A victim whose tier is over budget
    /// (`victim_over_budget`) is `victim_over_budget` whatever the clause, as
    /// `preempt/budget` records it.
    pub fn of(fs: &FairShare, a: &rebalance::Allowed, victim_over_budget: bool) -> PeerReason {
        match a {
            rebalance::Allowed::VictimFreeTier => PeerReason::VictimFreeTier,
            rebalance::Allowed::HigherPartitionTier {
                preemptor_tier,
                victim_tier,
            } => PeerReason::PartitionTier {
                preemptor_tier: *preemptor_tier,
                victim_tier: *victim_tier,
            },
            rebalance::Allowed::QosPreemptList {
                preemptor_qos,
                victim_qos,
            } => PeerReason::Qos {
                preemptor_qos: preemptor_qos.clone(),
                victim_qos: victim_qos.clone(),
            },
            rebalance::Allowed::Rebalance(_) if victim_over_budget => PeerReason::VictimOverBudget,
            rebalance::Allowed::Rebalance(r) => match r.clause {
                rebalance::Clause::OverBudget => PeerReason::VictimOverBudget,
                rebalance::Clause::Entitlement => PeerReason::Rebalance {
                    parent: rebalance::node_name(fs, r.parent),
                    preemptor_side: rebalance::node_name(fs, r.preemptor_side),
                    preemptor_ratio: r.preemptor_ratio,
                    victim_side: rebalance::node_name(fs, r.victim_side),
                    victim_ratio: r.victim_ratio,
                    victim_side_gpus: whole_gpus(r.victim_side_held),
                    victim_side_entitled_gpus: r.victim_side_entitled,
                },
            },
        }
    }

    /// Its short name, the `reason` tag of the JSON (`victim_free_tier`,
    /// `victim_over_budget`, `rebalance`, `partition_tier`, `qos`): what `budgetctl
    /// why` prints, so the text and the JSON say the same.
    pub fn name(&self) -> &'static str {
        match self {
            PeerReason::VictimFreeTier => "victim_free_tier",
            PeerReason::VictimOverBudget => "victim_over_budget",
            PeerReason::Rebalance { .. } => "rebalance",
            PeerReason::PartitionTier { .. } => "partition_tier",
            PeerReason::Qos { .. } => "qos",
        }
    }

    /// Which rule won, in plain words for `budgetctl why`.
    pub fn words(&self) -> String {
        match self {
            PeerReason::VictimFreeTier => "the victim runs in the free tier".into(),
            PeerReason::VictimOverBudget => "the budgets: the victim's team is over budget".into(),
            PeerReason::Rebalance {
                preemptor_side,
                victim_side,
                ..
            } => format!(
                "the budgets: {victim_side} holds more than its share, {preemptor_side} less"
            ),
            PeerReason::PartitionTier {
                preemptor_tier,
                victim_tier,
            } => format!(
                "the partition order: PriorityTier {preemptor_tier} above {victim_tier} wins over the budgets once the victim's window is over"
            ),
            PeerReason::Qos {
                preemptor_qos,
                victim_qos,
            } => format!(
                "the QOS order: QOS {preemptor_qos} lists {victim_qos} in its Preempt=, which wins over the budgets once the victim's window is over"
            ),
        }
    }
}

/// Weighted GPUs as the wire's whole number of GPUs (rounded, never negative).
fn whole_gpus(x: f64) -> u32 {
    if x.is_finite() {
        x.round().clamp(0.0, f64::from(u32::MAX)) as u32
    } else {
        0
    }
}

/// Another job the explained job could preempt, or be preempted by, now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptPeer {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// Why the rule allows it.
    pub reason: PeerReason,
}

/// A job another may preempt, and from when.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outlook {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    /// First instant the rule allows it (now, or the victim's window end).
    pub at: i64,
    pub reason: PeerReason,
}

/// The timing part of `why` (docs/design.md §6).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WhyPreemption {
    /// Pending job: running jobs it may preempt, each at the instant its window ends
    /// (the cost-aware rule evaluated then, in today's state: fair share,
    /// holdings, forecast, preemption history).
    pub may_preempt: Vec<Outlook>,
    /// Running job: pending jobs that may take it once its window is over.
    pub may_be_taken_by: Vec<Outlook>,
    /// Running job on a drained node: when the drain requeues it.
    pub drain_requeue_at: Option<i64>,
    /// Running job of a `PreemptMode=OFF` partition on a drained node:
    /// nothing requeues it, the drain waits for it to reach its time limit
    /// (`null` otherwise, and from a budgetd that predates this field).
    #[serde(default)]
    pub drain_waits: Option<DrainWait>,
    /// Requeued (or re-run) job: the preemption of its previous run.
    pub preempted: Option<Preemption>,
}

/// A drained node's job that the drain does not requeue: its partition has
/// `PreemptMode=OFF` (the site's "never preempted", maintenance included), so
/// it runs to its time limit and the node is empty no sooner.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainWait {
    /// The job's partition, the one with `PreemptMode=OFF`.
    pub partition: String,
    /// When it reaches its time limit (start plus the time limit the
    /// controller synced); `null` when the ledger has no time limit for it.
    pub until: Option<i64>,
}

/// `GET /v1/jobs/{id}/why`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Why {
    pub at: i64,
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub state: RunState,
    pub gpus: u32,
    pub gpu_type: Option<String>,
    pub free_tier: bool,
    pub start: Option<i64>,
    pub end: Option<i64>,
    pub min_runtime_secs: i64,
    /// End of the protected window of a running run (`null` for free-tier
    /// and not-running runs).
    pub protected_until: Option<i64>,
    pub protected_now: bool,
    pub tier: Tier,
    /// Global rank (1 = best) of the job's leaf; `null` if its account is
    /// not in the tree.
    pub rank: Option<u32>,
    pub num_leaves: u32,
    pub fair_share_factor: f64,
    /// Slurm priority as the plugin computes it, and its parts.
    pub priority: u32,
    pub priority_parts: PriorityParts,
    /// From the root down to the job's leaf.
    pub path: Vec<PathStep>,
    /// For a pending job: why it waits, in the cost-aware rule's words
    /// (`policy_core::rebalance::describe_wait`: "GPUs expected free at T from
    /// jobs A, B; no preemption needed" or "preempting job C: its window ended
    /// ..., least work lost"); `null` for other states.
    #[serde(default)]
    pub wait: Option<String>,
    /// For a pending job: running jobs it could preempt now.
    pub could_preempt: Vec<PreemptPeer>,
    /// For a running job: pending jobs that could preempt it now.
    pub preemptable_by: Vec<PreemptPeer>,
    /// When: whom a pending job may take and at what instant, who may take a
    /// running job after its window, a drain's requeue time, and who took the
    /// previous (or this requeued) run with its GPU-hours.
    pub preemption: WhyPreemption,
    /// Set when the job holds GPUs idle beyond the idle threshold now
    /// (docs/design.md §8).
    #[serde(default)]
    pub idle: Option<FlaggedJob>,
}

// The record's reason follows from the rule's permission; it is written here,
// beside `PeerReason`, so that `preemption` (what is recorded) needs nothing of
// `why` (what is explained).
impl PreemptionReason {
    /// The reason recorded for a preemption: the rule's (`Some`, as `why`
    /// reports it), or the drain hook's (`None`, a drained node's job past its
    /// window).
    pub fn of(allowed: Option<&PeerReason>) -> PreemptionReason {
        allowed.map_or(PreemptionReason::Drain, PreemptionReason::from)
    }
}

impl From<&PeerReason> for PreemptionReason {
    fn from(a: &PeerReason) -> Self {
        match a {
            PeerReason::VictimFreeTier => PreemptionReason::FreeTier,
            PeerReason::VictimOverBudget => PreemptionReason::OverBudget,
            PeerReason::Rebalance { .. } => PreemptionReason::Rebalance,
            PeerReason::PartitionTier { .. } => PreemptionReason::PartitionTier,
            PeerReason::Qos { .. } => PreemptionReason::Qos,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::fairshare::UsageByLeaf;
    use policy_core::tree::{AccountSpec, MemberSpec, TreeSpec};
    use serde_json::json;

    fn rebalance() -> PeerReason {
        PeerReason::Rebalance {
            parent: "root".into(),
            preemptor_side: "teama".into(),
            preemptor_ratio: 0.25,
            victim_side: "teamb".into(),
            victim_ratio: 1.5,
            victim_side_gpus: 12,
            victim_side_entitled_gpus: 8.0,
        }
    }

    /// The JSON `why` has always sent (the tag `reason`, the figures of a
    /// rebalancing, a whole number of GPUs held), spelled out by hand.
    #[test]
    fn reasons_keep_their_wire_format() {
        let cases = [
            (
                PeerReason::VictimFreeTier,
                json!({"reason": "victim_free_tier"}),
            ),
            (
                PeerReason::VictimOverBudget,
                json!({"reason": "victim_over_budget"}),
            ),
            (
                rebalance(),
                json!({
                    "reason": "rebalance", "parent": "root",
                    "preemptor_side": "teama", "preemptor_ratio": 0.25,
                    "victim_side": "teamb", "victim_ratio": 1.5,
                    "victim_side_gpus": 12, "victim_side_entitled_gpus": 8.0,
                }),
            ),
            (
                PeerReason::PartitionTier {
                    preemptor_tier: 2,
                    victim_tier: 1,
                },
                json!({"reason": "partition_tier", "preemptor_tier": 2, "victim_tier": 1}),
            ),
            (
                PeerReason::Qos {
                    preemptor_qos: "normal".into(),
                    victim_qos: "scavenger".into(),
                },
                json!({"reason": "qos", "preemptor_qos": "normal", "victim_qos": "scavenger"}),
            ),
        ];
        for (reason, wire) in cases {
            assert_eq!(serde_json::to_value(&reason).unwrap(), wire);
            assert_eq!(
                serde_json::from_value::<PeerReason>(wire.clone()).unwrap(),
                reason
            );
            assert_eq!(json!(reason.name()), wire["reason"]);
        }
        // The count of GPUs held is an integer on the wire.
        assert!(
            serde_json::from_value::<PeerReason>(json!({
                "reason": "rebalance", "parent": "root",
                "preemptor_side": "teama", "preemptor_ratio": 0.25,
                "victim_side": "teamb", "victim_ratio": 1.5,
                "victim_side_gpus": 11.5, "victim_side_entitled_gpus": 8.0,
            }))
            .is_err()
        );
    }

    #[test]
    fn the_rules_permission_as_the_wire_says_it() {
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: ["teama", "teamb"]
                .map(|name| AccountSpec {
                    name: name.into(),
                    parent: None,
                    allocation_gpu_hours: 100.0,
                    overcommit: false,
                })
                .into(),
            members: [("alice", "teama"), ("bob", "teamb")]
                .map(|(user, account)| MemberSpec {
                    user: user.into(),
                    account: account.into(),
                    allocation_gpu_hours: None,
                })
                .into(),
        };
        let usage: UsageByLeaf = [(("teamb".to_string(), "bob".to_string()), 3600.0)]
            .into_iter()
            .collect();
        let fs = FairShare::compute(&tree, &usage, 0, policy_core::DEFAULT_WINDOW_SECS);
        let node = |name: &str| {
            fs.nodes
                .iter()
                .position(|n| n.name == name)
                .expect("node in the tree")
        };
        let allowed = |clause| {
            rebalance::Allowed::Rebalance(rebalance::Rebalance {
                clause,
                parent: node("root"),
                preemptor_side: node("teama"),
                victim_side: node("teamb"),
                preemptor_ratio: 0.25,
                victim_ratio: 1.5,
                deficit: 4.0,
                uncovered: 4.0,
                in_flight: 0.0,
                victim_side_held: 11.6,
                victim_side_entitled: 8.0,
                victim_lost_gpu_secs: 3600.0,
                weighted: true,
            })
        };
        let entitlement = allowed(rebalance::Clause::Entitlement);
        // Nodes by name; 11.6 weighted GPUs held are 12 on the wire.
        assert_eq!(PeerReason::of(&fs, &entitlement, false), rebalance());
        assert_eq!(
            PeerReason::of(&fs, &entitlement, true),
            PeerReason::VictimOverBudget
        );
        assert_eq!(
            PeerReason::of(&fs, &allowed(rebalance::Clause::OverBudget), false),
            PeerReason::VictimOverBudget
        );
        assert_eq!(
            PeerReason::of(&fs, &rebalance::Allowed::VictimFreeTier, true),
            PeerReason::VictimFreeTier
        );
        // The partition order is named as such, over budget or not.
        let tier = rebalance::Allowed::HigherPartitionTier {
            preemptor_tier: 2,
            victim_tier: 1,
        };
        let reason = PeerReason::of(&fs, &tier, true);
        assert_eq!(
            reason,
            PeerReason::PartitionTier {
                preemptor_tier: 2,
                victim_tier: 1
            }
        );
        assert_eq!(
            PreemptionReason::of(Some(&reason)),
            PreemptionReason::PartitionTier
        );
        assert!(!PreemptionReason::PartitionTier.is_rebalancing());
        // The QOS order too.
        let qos = rebalance::Allowed::QosPreemptList {
            preemptor_qos: "normal".into(),
            victim_qos: "scavenger".into(),
        };
        let by_qos = PeerReason::of(&fs, &qos, true);
        assert_eq!(by_qos.name(), "qos");
        assert_eq!(PreemptionReason::of(Some(&by_qos)), PreemptionReason::Qos);
        assert!(!PreemptionReason::Qos.is_rebalancing());
        assert_eq!(
            by_qos.words(),
            "the QOS order: QOS normal lists scavenger in its Preempt=, which wins over the budgets once the victim's window is over"
        );
        assert!(
            reason
                .words()
                .starts_with("the partition order: PriorityTier 2 above 1")
        );
    }
}
