//! The preemption record on the wire: `POST /v1/preemptions` from `preempt/budget`'s
//! background thread (and the same record written by budgetd's drain worker), and
//! the record as budgetd reports it (`GET /v1/preemptions`, `budgetctl usage
//! --preemptions`, `why`).
//!
//! Slurm never tells a preempt plugin which candidates it took, so the plugin confirms
//! a preemption itself and reports it here: which run lost its GPUs, to whom, why, and
//! the victim's facts (budgetd fills missing ones from its ledger). budgetd keys the
//! record by `(victim, run)` and keeps the first one, so repeats change nothing.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Route of the preemption record (`POST` to add, `GET` to list).
pub const ROUTE: &str = "/v1/preemptions";

/// Why a run was preempted. Serialised in snake case (`free_tier`, `over_budget`,
/// `rebalance`, `drain`, `partition_tier`, `qos`), the spelling budgetd stores and reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PreemptionReason {
    /// The victim was in the free tier.
    FreeTier,
    /// The victim's path was over budget.
    OverBudget,
    /// Hierarchical rebalancing: the victim's side held more than its share.
    Rebalance,
    /// A maintenance drain took the node.
    Drain,
    /// The site's partition order: the preemptor's partition has a higher
    /// `PriorityTier` (as `preempt/partition_prio` preempts), the victim was
    /// past its protected window; the budgets were not asked.
    PartitionTier,
    /// The site's QOS order: the preemptor's QOS lists the victim's in its
    /// `Preempt=` (as `preempt/qos` preempts), the victim was past its
    /// protected window; the budgets were not asked.
    Qos,
}

impl PreemptionReason {
    /// Every reason, in declaration order.
    pub const ALL: [PreemptionReason; 6] = [
        PreemptionReason::FreeTier,
        PreemptionReason::OverBudget,
        PreemptionReason::Rebalance,
        PreemptionReason::Drain,
        PreemptionReason::PartitionTier,
        PreemptionReason::Qos,
    ];

    /// The wire (and database) spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            PreemptionReason::FreeTier => "free_tier",
            PreemptionReason::OverBudget => "over_budget",
            PreemptionReason::Rebalance => "rebalance",
            PreemptionReason::Drain => "drain",
            PreemptionReason::PartitionTier => "partition_tier",
            PreemptionReason::Qos => "qos",
        }
    }

    /// A preemption between budgeted teams by the cost-aware rule (`rebalance`,
    /// `over_budget`): what the site caps, the lost-work budgets and the reverse
    /// locks count, in budgetd (`/metrics`, `why`) and in `preempt/budget`.
    pub fn is_rebalancing(self) -> bool {
        matches!(
            self,
            PreemptionReason::Rebalance | PreemptionReason::OverBudget
        )
    }

    /// Which rule took the run, in plain words (`budgetctl why`).
    pub fn words(self) -> &'static str {
        match self {
            PreemptionReason::FreeTier => "the victim ran in the free tier",
            PreemptionReason::OverBudget => "the budgets: the victim's team was over budget",
            PreemptionReason::Rebalance => {
                "the budgets: the victim's side held more than its share"
            }
            PreemptionReason::Drain => "a maintenance drain took the node",
            PreemptionReason::PartitionTier => {
                "the partition order: the preemptor's partition has the higher PriorityTier, which wins over the budgets once the victim's window is over"
            }
            PreemptionReason::Qos => {
                "the QOS order: the preemptor's QOS lists the victim's in its Preempt=, which wins over the budgets once the victim's window is over"
            }
        }
    }

    /// The reason spelled `s`, if any.
    pub fn parse(s: &str) -> Option<PreemptionReason> {
        Self::ALL.into_iter().find(|r| r.as_str() == s)
    }
}

impl std::fmt::Display for PreemptionReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `POST /v1/preemptions` body. Victim facts are optional: budgetd fills them from
/// its ledger when the run is known there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PreemptionRecord {
    pub victim: u32,
    /// The victim's run (`restart_cnt` of the run that was lost).
    pub run: u32,
    #[serde(default)]
    pub preemptor: Option<u32>,
    pub reason: PreemptionReason,
    /// When the victim lost its GPUs (Unix seconds).
    pub at: i64,
    #[serde(default)]
    pub account: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub gpus: Option<u32>,
    /// Start of the lost run.
    #[serde(default)]
    pub start: Option<i64>,
}

/// budgetd's answer to a `POST /v1/preemptions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordOutcome {
    /// `false` when `(victim, run)` was already recorded (the first record wins).
    pub inserted: bool,
}

/// One recorded preemption.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preemption {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub preemptor: Option<u32>,
    pub preemptor_account: Option<String>,
    pub reason: PreemptionReason,
    pub at: i64,
    pub gpus: u32,
    pub run_start: Option<i64>,
    /// GPU-hours of the lost run (GPUs x its length, unweighted).
    pub gpu_hours: f64,
    /// `plugin` or `drain`.
    pub source: String,
    /// GPU type of the lost run as budgetd's ledger knows it (lower case;
    /// `None`: untyped, or the run is no longer in the ledger). The lost-work
    /// budgets charge `gpu_hours` times the type's billing weight; absent from
    /// a budgetd older than the field.
    #[serde(default)]
    pub gpu_type: Option<String>,
}

/// Per-account totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AccountLoss {
    pub account: String,
    pub preemptions: u64,
    pub gpu_hours_lost: f64,
    /// Preemptions by reason.
    pub by_reason: BTreeMap<String, u64>,
}

/// `GET /v1/preemptions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PreemptionReport {
    pub since: i64,
    pub rows: Vec<Preemption>,
    pub by_account: Vec<AccountLoss>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::why::PeerReason;
    use serde_json::json;

    #[test]
    fn reasons_spell_as_budgetd_stores_them() {
        for r in PreemptionReason::ALL {
            let wire = serde_json::to_value(r).unwrap();
            assert_eq!(wire, json!(r.as_str()));
            assert_eq!(PreemptionReason::parse(r.as_str()), Some(r));
            assert_eq!(r.to_string(), r.as_str());
        }
        assert_eq!(PreemptionReason::parse("nope"), None);
        assert_eq!(PreemptionReason::of(None), PreemptionReason::Drain);
        assert_eq!(
            PreemptionReason::of(Some(&PeerReason::VictimOverBudget)),
            PreemptionReason::OverBudget
        );
    }

    #[test]
    fn record_body_matches_the_wire_format() {
        // What preempt/budget has always posted, built by hand.
        let posted = json!({
            "victim": 7, "run": 1, "preemptor": 9, "reason": "over_budget", "at": 100,
            "account": "teamb", "user": "bob", "gpus": 2, "start": 10,
        });
        let r: PreemptionRecord = serde_json::from_value(posted.clone()).unwrap();
        assert_eq!(r.reason, PreemptionReason::OverBudget);
        assert_eq!(serde_json::to_value(&r).unwrap(), posted);
        // Victim facts may be left out; unknown fields are refused.
        let minimal: PreemptionRecord =
            serde_json::from_value(json!({"victim": 7, "run": 0, "reason": "drain", "at": 1}))
                .unwrap();
        assert_eq!((minimal.preemptor, minimal.gpus), (None, None));
        assert!(
            serde_json::from_value::<PreemptionRecord>(
                json!({"victim": 7, "run": 0, "reason": "drain", "at": 1, "x": 1})
            )
            .is_err()
        );
        assert!(
            serde_json::from_value::<PreemptionRecord>(
                json!({"victim": 7, "run": 0, "reason": "maintenance", "at": 1})
            )
            .is_err()
        );
        let out: RecordOutcome = serde_json::from_value(json!({"inserted": false})).unwrap();
        assert!(!out.inserted);
    }
}
