//! The policies the simulator compares, each with its own state behind
//! [`SchedPolicy`]; the engine owns everything they share (jobs, cluster, usage,
//! pending classes), lends it to them read-only as an [`EngineView`] (`view.rs`:
//! the policies never import the engine) and calls them at a few points:
//! classification at load, priorities at each recalculation tick, run
//! start/stop, the end of a protected window, and preemption candidates.
//!
//! - [`fair_share::FairSharePolicy`]: the product (tiers + Fair-Tree rank on
//!   the sliding window + age). `budget` preempts by the cost-aware rule
//!   ([`policy_core::rebalance`]); `budget-v1` by the old rule
//!   ([`budget_v1::may_preempt`]), kept here only for comparison.
//! - [`static_priority::StaticPriority`]: FIFO by a user-declared level; never preempts.
//! - [`decay::DecayedFairShare`]: Slurm's classic fair share; never preempts.
//! - [`fair_tree::FairTree`]: Slurm's Fair Tree (the default since 19.05) on
//!   decayed usage; never preempts.
//! - [`multifactor_qos::MultifactorQos`]: Fair Tree plus `preempt/qos`: jobs of
//!   teams over their share go to a `scavenger` QOS that `normal` jobs preempt
//!   after its `PreemptExemptTime` (each job's min_runtime).

pub mod budget_v1;
pub mod decay;
pub mod fair_share;
pub mod fair_tree;
pub mod multifactor_qos;
pub mod static_priority;

use crate::config::SimConfig;
use crate::view::{EngineView, JobInit, TeamInfo};

/// The policies the simulator compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    /// The product with the cost-aware preemption rule.
    Budget,
    /// The product with the old rule (preempt as soon as allowed).
    BudgetV1,
    Static,
    Decay,
    /// Slurm's Fair Tree, no preemption.
    FairTree,
    /// Slurm's multifactor (Fair Tree) with QOS preemption after `PreemptExemptTime`.
    MultifactorQos,
}

impl PolicyKind {
    /// What `--policy all` replays: the product and every baseline.
    pub const ALL: [PolicyKind; 6] = [
        PolicyKind::Budget,
        PolicyKind::BudgetV1,
        PolicyKind::Static,
        PolicyKind::Decay,
        PolicyKind::FairTree,
        PolicyKind::MultifactorQos,
    ];

    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Budget => "budget",
            PolicyKind::BudgetV1 => "budget-v1",
            PolicyKind::Static => "static",
            PolicyKind::Decay => "decay",
            PolicyKind::FairTree => "fair-tree",
            PolicyKind::MultifactorQos => "multifactor-qos",
        }
    }

    pub fn describe(self) -> &'static str {
        match self {
            PolicyKind::Budget => {
                "tiers + Fair-Tree rank on the 7-day sliding window + age; preemption by the cost-aware rule (policy_core::rebalance)"
            }
            PolicyKind::BudgetV1 => {
                "tiers + Fair-Tree rank on the 7-day sliding window + age; preemption as soon as the old rule allows (policy_core::preempt)"
            }
            PolicyKind::Static => {
                "FIFO by user-declared priority (seeded: 80% high, 15% normal, 5% low); no preemption"
            }
            PolicyKind::Decay => {
                "Slurm classic fair share 2^(-U/S), usage half-life 7 days, then age; no preemption"
            }
            PolicyKind::FairTree => {
                "Slurm Fair Tree (rank of level fairshare S/U, depth first), usage half-life 7 days, then age; no preemption"
            }
            PolicyKind::MultifactorQos => {
                "Slurm Fair Tree + preempt/qos: QOS normal when the team is under its share at submit, else scavenger; normal preempts scavenger after PreemptExemptTime = min_runtime (requeue)"
            }
        }
    }
}

/// A running job a pending job may preempt, as the preempt plugin reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate {
    pub job: u32,
    /// The plugin's victim priority (ascending: preempted first).
    pub order: u32,
    /// 0: free tier, 1: over budget (`multifactor-qos`: a `scavenger` job,
    /// submitted while its team was over its share), 2: rebalance between
    /// budgeted sides.
    pub reason: u8,
}

/// What differs between policies. Every hook gets the engine's shared state
/// read-only ([`EngineView`]); the recalculation also gets the class priorities
/// to write.
pub(crate) trait SchedPolicy {
    fn kind(&self) -> PolicyKind;
    /// Number of pending classes (jobs of a class differ only by age).
    fn num_classes(&self) -> usize;
    /// Class priorities before the first recalculation.
    fn initial_priorities(&self) -> Vec<u64>;
    /// `(class, free tier as this policy sees it, wait class)` of a job.
    fn classify(&self, job: &JobInit) -> (u32, bool, &'static str);
    /// Recalculation tick: sets `class_prio` (one entry per class) from the state
    /// and `window_usage`, each leaf's charged GPU-seconds in the sliding window
    /// ending now.
    fn recompute(&mut self, sim: &EngineView<'_>, window_usage: &[i64], class_prio: &mut [u64]);
    /// The class of job `j` as it is submitted now (`None`: the one
    /// `classify` gave). It stays the job's class, requeues included.
    fn submit_class(&mut self, _sim: &EngineView<'_>, _j: u32) -> Option<u32> {
        None
    }
    /// Wait class at first start, if the policy decides it then.
    fn wait_class(&self, _sim: &EngineView<'_>, _j: u32) -> Option<&'static str> {
        None
    }
    /// Job `j` just started (the engine's state already says so).
    fn on_start(&mut self, _sim: &EngineView<'_>, _j: u32) {}
    /// Job `j`'s run is about to stop (the engine's state still shows it running).
    fn on_stop(&mut self, _sim: &EngineView<'_>, _j: u32) {}
    /// Job `j`'s protected window just ended.
    fn on_exposed(&mut self, _sim: &EngineView<'_>, _j: u32) {}
    /// Whether the policy ever preempts (protection events are only kept then).
    fn preempts(&self) -> bool {
        false
    }
    /// Whether any running job could be a candidate now.
    fn has_candidates(&self) -> bool {
        false
    }
    /// A scheduling pass begins (the plugin's period state is refreshed).
    fn begin_pass(&mut self) {}
    /// The scheduling pass that began last is over.
    fn end_pass(&mut self) {}
    /// The running jobs pending job `p` may preempt, with their victim order.
    fn candidates(&mut self, _sim: &EngineView<'_>, _p: u32) -> Vec<Candidate> {
        Vec::new()
    }
    /// Slurm preempted `victims` for `p` (called before they stop).
    fn on_preempt(&mut self, _sim: &EngineView<'_>, _p: u32, _victims: &[Candidate]) {}
    /// Recalculations where the incremental window differed from the policy core's.
    fn window_mismatches(&self) -> u64 {
        0
    }
    /// The rule's refusals by reason, when the policy counts them
    /// (`SimConfig::count_refusals`; [`crate::metrics::Refusals::by_reason`]).
    fn refusals(&self) -> Option<std::collections::BTreeMap<String, u64>> {
        None
    }
}

/// The policy of `kind` for these teams and fair-share leaves.
pub(crate) fn build(
    kind: PolicyKind,
    cfg: &SimConfig,
    teams: &[TeamInfo],
    leaves: &[(String, String)],
) -> Box<dyn SchedPolicy> {
    match kind {
        PolicyKind::Budget | PolicyKind::BudgetV1 => {
            Box::new(fair_share::FairSharePolicy::new(kind, cfg, teams, leaves))
        }
        PolicyKind::Static => Box::new(static_priority::StaticPriority { seed: cfg.seed }),
        PolicyKind::Decay => Box::new(decay::DecayedFairShare::new(cfg, teams.len())),
        PolicyKind::FairTree => Box::new(fair_tree::FairTree::new(cfg, teams, leaves)),
        PolicyKind::MultifactorQos => {
            Box::new(multifactor_qos::MultifactorQos::new(cfg, teams, leaves))
        }
    }
}
