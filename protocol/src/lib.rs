//! Wire types of slurm-budget: everything budgetd accepts or answers, shared
//! by the service (which serves them), the `slurmctld` plugins, the node agent
//! and `budgetctl` (which read them), so no two of them can disagree about a
//! field.
//!
//! The plugins' three exchanges, all started by a plugin's background thread:
//! - `GET /v1/snapshot` returns a [`PluginSnapshot`]: everything the plugins
//!   need to decide without I/O. It carries a `version` (also sent as the
//!   `ETag`); a request with `If-None-Match: <version>` gets `304 Not Modified`
//!   so an unchanged snapshot costs almost nothing.
//! - `POST /v1/sync/jobs` sends a [`JobSync`]: the runs the controller knows
//!   (pending, running, recently ended). The service turns them into run
//!   intervals keyed by `(job_id, run)`, so repeating a sync changes nothing.
//! - `POST /v1/preemptions` sends a [`preemption::PreemptionRecord`] (module
//!   [`preemption`]: the route, the reasons, the record body, and the record as
//!   budgetd reports it).
//!
//! The node agent's report is [`AgentReport`]. The admin API's bodies live in
//! one module per subject: [`tree`] (accounts, members, coordinators, weights,
//! policy, audit), [`reports`] (share, usage, import), [`why`] (a job's
//! explanation), [`drains`], [`preemption`], [`idle`], [`shadow`], [`runs`] (the
//! ledger's runs over a time range, for `budgetctl whatif`), [`whatif`] (what
//! budgetd's web view hands `budgetctl whatif --input` and reads back), and
//! [`service`] (health, the error body). [`time`] (feature `time`) is the TIME argument
//! format budgetd and budgetctl share.
//!
//! This crate holds types and formats only: no I/O, no HTTP, no policy.
//! Field names are the JSON names.

mod decode;
pub mod drains;
pub mod idle;
pub mod preemption;
pub mod reports;
pub mod runs;
pub mod service;
pub mod shadow;
#[cfg(feature = "time")]
pub mod time;
pub mod tree;
pub mod whatif;
pub mod why;

pub use decode::SnapshotError;
use policy_core::{FairShare, GpuWeights};
use serde::{Deserialize, Serialize};

/// Path of the snapshot endpoint.
pub const SNAPSHOT_PATH: &str = "/v1/snapshot";
/// Path of the job-state sync endpoint.
pub const SYNC_PATH: &str = "/v1/sync/jobs";

/// Site policy the plugins apply: what a site decides (docs/design.md §6.6).
/// Every other number of the rule is a constant of it
/// (`policy_core::rebalance::RebalancePolicy::default()`, with the ablation
/// that chose each).
///
/// On the wire ([`PolicyWire`]) it also carries `hysteresis`, always the
/// rule's constant, which plugins of the previous release require; and it
/// reads policies of the previous release, stored in budgetd's database or
/// served in its snapshot, whose removed settings ([`Policy::REMOVED`]) are
/// ignored: the rule's constants apply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(from = "PolicyWire", into = "PolicyWire")]
pub struct Policy {
    /// Length of the sliding usage window in seconds (default 7 days).
    pub window_secs: i64,
    /// `min_runtime` applied when a job declares none.
    pub default_min_runtime_secs: i64,
    /// Largest `min_runtime` a job may declare.
    pub max_min_runtime_secs: i64,
    /// Reject jobs that declare no `min_runtime`.
    pub require_min_runtime: bool,
    /// A snapshot older than this puts the plugins in safe mode.
    pub snapshot_max_age_secs: i64,
    /// A job whose GPUs stay idle this long is flagged as squatting.
    pub idle_threshold_secs: i64,
    /// Site safety net: at most this many rebalancing preemptions per window
    /// (`None`: no cap). Left out of the JSON when unset, so plugins of the
    /// previous release still read a snapshot that sets no cap.
    pub site_max_preemptions: Option<u32>,
    /// Site safety net: at most this many GPU-hours lost to rebalancing per
    /// window (`None`: no cap).
    pub site_max_lost_gpu_hours: Option<f64>,
    /// A job requeued this many times is no longer taken for rebalancing
    /// (`None`: the rule's default, `RebalancePolicy::default().max_requeues`;
    /// [`Policy::NO_REQUEUE_CAP`]: no cap, the rule's `None`, what
    /// `budgetctl policy set max_requeues=none` and the simulator's
    /// `--rule max_requeues=none` say).
    pub max_requeues: Option<u32>,
    /// How readily the rule preempts: a preset benefit/cost factor
    /// (`PreemptionPreset`). Left out of the JSON at `default`, so plugins of
    /// the previous release read a snapshot that keeps the default.
    pub preemption: PreemptionPreset,
}

pub use policy_core::rebalance::PreemptionPreset;

impl Default for Policy {
    fn default() -> Self {
        Self {
            window_secs: policy_core::DEFAULT_WINDOW_SECS,
            default_min_runtime_secs: 3600,
            max_min_runtime_secs: 86_400,
            require_min_runtime: false,
            snapshot_max_age_secs: 60,
            idle_threshold_secs: 1800,
            site_max_preemptions: None,
            site_max_lost_gpu_hours: None,
            max_requeues: None,
            preemption: PreemptionPreset::Default,
        }
    }
}

impl Policy {
    /// `max_requeues` meaning "no requeue cap": `None` already means the rule's
    /// default on the wire (older plugins read it so), and no job is requeued
    /// this often.
    pub const NO_REQUEUE_CAP: u32 = u32::MAX;

    /// Settings of the previous release that are now constants of the rule
    /// (`RebalancePolicy::default()`): refused in a policy patch, ignored in a
    /// stored policy or snapshot of that release.
    pub const REMOVED: [&'static str; 6] = [
        "hysteresis",
        "tier_band",
        "tier_projection",
        "share_order",
        "entitled_first",
        "balance_band",
    ];

    /// The cost-aware rule's knobs under this policy: the rule's constants with
    /// the site's preemption preset, site caps and requeue cap
    /// (`preempt/budget`, `priority/budget` and `budgetctl why` read the same).
    pub fn rebalance(&self) -> policy_core::rebalance::RebalancePolicy {
        let rule = policy_core::rebalance::RebalancePolicy::default();
        policy_core::rebalance::RebalancePolicy {
            site_max_preemptions: self.site_max_preemptions,
            site_max_lost_gpu_hours: self.site_max_lost_gpu_hours,
            max_requeues: match self.max_requeues {
                None => rule.max_requeues,
                Some(Self::NO_REQUEUE_CAP) => None,
                Some(n) => Some(n),
            },
            benefit_factor: Some(self.preemption.benefit_factor()),
            ..rule
        }
    }
}

/// [`Policy`] as JSON: what the previous release wrote and reads (its
/// plugins deny unknown fields and require `hysteresis`), and what it stored.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyWire {
    window_secs: i64,
    default_min_runtime_secs: i64,
    max_min_runtime_secs: i64,
    require_min_runtime: bool,
    /// Always written as the rule's constant (the previous release's plugins
    /// read it into their rule); read and ignored.
    #[serde(default, skip_deserializing)]
    hysteresis: f64,
    snapshot_max_age_secs: i64,
    idle_threshold_secs: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    site_max_preemptions: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    site_max_lost_gpu_hours: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_requeues: Option<u32>,
    #[serde(default, skip_serializing_if = "is_default_preset")]
    preemption: PreemptionPreset,
    /// The removed settings of the previous release ([`Policy::REMOVED`]),
    /// read and ignored, never written.
    #[serde(default, skip_serializing, rename = "hysteresis")]
    _hysteresis: Option<serde::de::IgnoredAny>,
    #[serde(default, skip_serializing, rename = "tier_band")]
    _tier_band: Option<serde::de::IgnoredAny>,
    #[serde(default, skip_serializing, rename = "tier_projection")]
    _tier_projection: Option<serde::de::IgnoredAny>,
    #[serde(default, skip_serializing, rename = "share_order")]
    _share_order: Option<serde::de::IgnoredAny>,
    #[serde(default, skip_serializing, rename = "entitled_first")]
    _entitled_first: Option<serde::de::IgnoredAny>,
    #[serde(default, skip_serializing, rename = "balance_band")]
    _balance_band: Option<serde::de::IgnoredAny>,
}

fn is_default_preset(p: &PreemptionPreset) -> bool {
    *p == PreemptionPreset::Default
}

impl From<PolicyWire> for Policy {
    fn from(w: PolicyWire) -> Self {
        Policy {
            window_secs: w.window_secs,
            default_min_runtime_secs: w.default_min_runtime_secs,
            max_min_runtime_secs: w.max_min_runtime_secs,
            require_min_runtime: w.require_min_runtime,
            snapshot_max_age_secs: w.snapshot_max_age_secs,
            idle_threshold_secs: w.idle_threshold_secs,
            site_max_preemptions: w.site_max_preemptions,
            site_max_lost_gpu_hours: w.site_max_lost_gpu_hours,
            max_requeues: w.max_requeues,
            preemption: w.preemption,
        }
    }
}

impl From<Policy> for PolicyWire {
    fn from(p: Policy) -> Self {
        PolicyWire {
            window_secs: p.window_secs,
            default_min_runtime_secs: p.default_min_runtime_secs,
            max_min_runtime_secs: p.max_min_runtime_secs,
            require_min_runtime: p.require_min_runtime,
            hysteresis: policy_core::rebalance::RebalancePolicy::default().hysteresis,
            snapshot_max_age_secs: p.snapshot_max_age_secs,
            idle_threshold_secs: p.idle_threshold_secs,
            site_max_preemptions: p.site_max_preemptions,
            site_max_lost_gpu_hours: p.site_max_lost_gpu_hours,
            max_requeues: p.max_requeues,
            preemption: p.preemption,
            _hysteresis: None,
            _tier_band: None,
            _tier_projection: None,
            _share_order: None,
            _entitled_first: None,
            _balance_band: None,
        }
    }
}

/// A node under a maintenance drain (docs/design.md §7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DrainSpec {
    pub node: String,
    pub reason: String,
    /// When the drain was requested (Unix seconds).
    pub since: i64,
}

/// Everything the plugins need, computed by the service at `generated_at`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PluginSnapshot {
    /// Changes whenever any field below changes; also the HTTP `ETag`.
    pub version: String,
    pub generated_at: i64,
    pub policy: Policy,
    pub weights: GpuWeights,
    pub fair_share: FairShare,
    #[serde(default)]
    pub drains: Vec<DrainSpec>,
    /// GPUs of the nodes that can run jobs, as budgetd last read them from
    /// Slurm (`scontrol show node`); `None`: unknown (budgetd has not read
    /// them yet, or found none). Raw GPUs: the capacity of a release that did
    /// not publish [`PluginSnapshot::cluster_weighted_gpus`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_gpus: Option<u32>,
    /// The same GPUs weighted: each node's GPUs x the billing weight of their
    /// `Gres=` type under [`PluginSnapshot::weights`] (untyped ones: the
    /// default weight), the unit of the allocations (weighted GPU-hours). The
    /// cost-aware rule's cluster capacity: a site whose top-level allocations
    /// exceed it has every entitlement scaled down to fit, as the simulator
    /// computes them. `None`: unknown, or a budgetd of the previous release;
    /// left out of the JSON then (the snapshot never denied unknown fields,
    /// so plugins of the previous release read it and keep `cluster_gpus`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_weighted_gpus: Option<f64>,
}

impl PluginSnapshot {
    /// The cluster capacity the cost-aware rule takes
    /// (`PreemptState::compute`'s `capacity_gpus`, weighted GPUs):
    /// [`PluginSnapshot::cluster_weighted_gpus`], else (a budgetd of the
    /// previous release) [`PluginSnapshot::cluster_gpus`]; `None` when
    /// unknown or not above 0 (then the top-level allocations stand as they are).
    pub fn capacity_gpus(&self) -> Option<f64> {
        match self.cluster_weighted_gpus {
            Some(w) if w.is_finite() && w > 0.0 => Some(w),
            _ => self.cluster_gpus.filter(|&n| n > 0).map(f64::from),
        }
    }
}

/// Slurm-side state of a job run, as the plugin sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunState {
    Pending,
    Running,
    /// Ended for any reason (completed, failed, cancelled, timeout, node fail).
    Ended,
    /// Ended by a requeue (preemption, node failure, `scontrol requeue`).
    Requeued,
}

impl RunState {
    /// The JSON name (also how budgetd stores it).
    pub fn as_str(self) -> &'static str {
        match self {
            RunState::Pending => "pending",
            RunState::Running => "running",
            RunState::Ended => "ended",
            RunState::Requeued => "requeued",
        }
    }

    /// Reads [`RunState::as_str`]'s output.
    pub fn parse(s: &str) -> Option<RunState> {
        Some(match s {
            "pending" => RunState::Pending,
            "running" => RunState::Running,
            "ended" => RunState::Ended,
            "requeued" => RunState::Requeued,
            _ => return None,
        })
    }
}

/// One run of one job. A job requeued twice reports runs 0, 1 and 2.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobRun {
    pub job_id: u32,
    /// Slurm's `restart_cnt` for this run (0 for the first run).
    pub run: u32,
    /// Slurm's submit time of this run (`details->submit_time`; a requeue sets
    /// a new one). Tells two jobs with the same id apart (ids wrap at
    /// MaxJobId and restart after a controller cold start). `None`: unknown
    /// (the previous run of a requeued job, older plugins).
    #[serde(default)]
    pub submit: Option<i64>,
    pub account: String,
    pub user: String,
    #[serde(default)]
    pub partition: Option<String>,
    pub gpus: u32,
    #[serde(default)]
    pub gpu_type: Option<String>,
    /// Start of this run; `None` while pending.
    #[serde(default)]
    pub start: Option<i64>,
    /// End of this run; `None` while pending or running.
    #[serde(default)]
    pub end: Option<i64>,
    pub state: RunState,
    /// Opted into the free tier (never charged to a budget).
    #[serde(default)]
    pub free_tier: bool,
    /// The validated contract in seconds.
    #[serde(default)]
    pub min_runtime_secs: i64,
    /// Nodes the run holds (Slurm hostlist expression), if running.
    #[serde(default)]
    pub nodes: Option<String>,
    /// Slurm priority at the time of the sync.
    #[serde(default)]
    pub priority: Option<u32>,
    /// Slurm's textual state reason, if any (e.g. `Priority`, `Resources`).
    #[serde(default)]
    pub reason: Option<String>,
    /// The run's time limit in seconds (`None`: unlimited or unknown): the
    /// cost-aware rule's turnover forecast (`budgetctl why`) reads it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time_limit_secs: Option<i64>,
    /// Declared checkpoint interval (`checkpoint=` in the comment), seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_secs: Option<i64>,
}

impl JobRun {
    /// A run with the fields every sync names; every other field is what its
    /// absence on the wire means (no submit time, partition, GPU type, start,
    /// end, nodes, priority, reason, time limit or checkpoint; not free tier; no
    /// contract), for callers to fill with `..JobRun::new(..)`.
    pub fn new(
        job_id: u32,
        run: u32,
        account: impl Into<String>,
        user: impl Into<String>,
        gpus: u32,
        state: RunState,
    ) -> Self {
        Self {
            job_id,
            run,
            submit: None,
            account: account.into(),
            user: user.into(),
            partition: None,
            gpus,
            gpu_type: None,
            start: None,
            end: None,
            state,
            free_tier: false,
            min_runtime_secs: 0,
            nodes: None,
            priority: None,
            reason: None,
            time_limit_secs: None,
            checkpoint_secs: None,
        }
    }
}

/// Longest text field of a [`JobRun`] budgetd stores (account, user,
/// partition, GPU type, nodes), in bytes; longer or empty ones, or ones with
/// control characters, are refused.
pub const MAX_RUN_TEXT: usize = 128;

/// What marks a field cut by [`bounded_text`].
pub const CUT_MARKER: &str = "...";

/// A text field as budgetd accepts it: control characters become `?`, a
/// value longer than [`MAX_RUN_TEXT`] bytes is cut at a character boundary
/// and ends in [`CUT_MARKER`] (a job on 40 scattered nodes has a `NodeList`
/// Slurm cannot compress below that), and an empty one is `None`. The plugin
/// sends its optional fields through this, so budgetd never has to refuse one.
pub fn bounded_text(s: &str) -> Option<String> {
    if s.is_empty() {
        return None;
    }
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if out.len() > MAX_RUN_TEXT {
        let mut cut = MAX_RUN_TEXT - CUT_MARKER.len();
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
        out.push_str(CUT_MARKER);
    }
    Some(out)
}

/// A batch of job runs from the controller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSync {
    /// When the plugin collected the batch (Unix seconds).
    pub collected_at: i64,
    pub runs: Vec<JobRun>,
    /// The complete set of jobs Slurm had at `collected_at`, as
    /// `[job_id, submit time of its current run (0: unknown)]`, sent once every
    /// run of the pass was acknowledged. budgetd closes every pending or
    /// running run Slurm no longer has (a start lost in a controller crash, a
    /// cancel racing a requeue, jobs purged while budgetd was down, pending
    /// jobs cancelled), at the time of the previous complete set: the last
    /// time Slurm was seen to have them. Absent: a partial
    /// batch, nothing is closed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Vec<(u32, i64)>>,
    /// `site_factor/budget` in `mode=shadow`: the pending queue with Slurm's
    /// actual priority and the budget placement of each job, sent in a message
    /// of its own (no runs) after the pass's runs were acknowledged
    /// ([`shadow`] says why). Absent in every other sync.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<shadow::QueueOrder>,
}

/// What a sync changed.
///
/// A batch is taken run by run: a run budgetd refuses (a field out of bounds,
/// an end before its start) is listed in `refused` and the others are still
/// stored, so one odd job cannot stop the whole cluster's accounting. The
/// plugin logs refusals and does not resend them (resending the same run
/// would be refused again).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncOutcome {
    /// Runs seen for the first time.
    pub inserted: u64,
    /// Runs whose end or state changed.
    pub updated: u64,
    /// Runs already known exactly as sent.
    pub unchanged: u64,
    /// Pending or running runs closed because Slurm no longer has their job
    /// (with a complete `live` set; absent when none).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub closed: u64,
    /// Runs not stored, each with the reason (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<RefusedRun>,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// One run of a sync batch that budgetd did not store.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedRun {
    pub job_id: u32,
    pub run: u32,
    /// Index of the run in the batch's `runs`.
    pub index: usize,
    /// What is wrong, naming the field.
    pub error: String,
}

/// Path of the node agent's report endpoint.
pub const AGENT_REPORT_PATH: &str = "/v1/agent/report";

/// One process on a GPU, mapped to its Slurm job where possible.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuProcess {
    pub pid: u32,
    /// Slurm job id from the process's cgroup or environment; `None` if not a job.
    #[serde(default)]
    pub job_id: Option<u32>,
    /// GPU memory used by the process in MiB.
    #[serde(default)]
    pub used_memory_mib: Option<u64>,
    /// SM utilisation of the process in percent over the last sample period.
    #[serde(default)]
    pub sm_util_pct: Option<u32>,
}

/// One GPU as the node agent saw it (docs/design.md §8).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSample {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    /// GPU (SM) utilisation in percent.
    pub util_pct: u32,
    pub memory_used_mib: u64,
    pub memory_total_mib: u64,
    pub processes: Vec<GpuProcess>,
    /// Seconds this GPU has been continuously idle while held by a job
    /// (0 when busy or free).
    pub idle_secs: i64,
}

/// What a node agent reports every sample period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentReport {
    pub node: String,
    pub at: i64,
    /// `false` when the agent runs without NVML (no GPU or no driver).
    pub nvml: bool,
    pub gpus: Vec<GpuSample>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_run_is_what_the_wire_reads_without_the_optional_fields() {
        let wire = r#"{"job_id":7,"run":1,"account":"a","user":"u","gpus":2,"state":"ended"}"#;
        let read: JobRun = serde_json::from_str(wire).unwrap();
        assert_eq!(JobRun::new(7, 1, "a", "u", 2, RunState::Ended), read);
    }

    #[test]
    fn job_sync_rejects_unknown_fields() {
        let ok = r#"{"collected_at":1,"runs":[{"job_id":1,"run":0,"account":"a","user":"u","gpus":2,"state":"running","start":5}]}"#;
        let s: JobSync = serde_json::from_str(ok).unwrap();
        assert_eq!(s.runs[0].start, Some(5));
        let bad = r#"{"collected_at":1,"runs":[],"extra":1}"#;
        assert!(serde_json::from_str::<JobSync>(bad).is_err());
    }

    /// The policy as a release before the ranking knobs stored and served it.
    const OLD_POLICY: &str = r#"{"window_secs":604800,"default_min_runtime_secs":3600,"max_min_runtime_secs":86400,"require_min_runtime":false,"hysteresis":0.1,"snapshot_max_age_secs":60,"idle_threshold_secs":1800,"max_requeues":2}"#;

    /// The policy of the previous release with every removed setting set.
    const OLD_POLICY_WITH_KNOBS: &str = r#"{"window_secs":604800,"default_min_runtime_secs":3600,"max_min_runtime_secs":86400,"require_min_runtime":true,"hysteresis":0.3,"snapshot_max_age_secs":60,"idle_threshold_secs":1800,"site_max_preemptions":4,"max_requeues":2,"tier_band":0.1,"share_order":true,"entitled_first":false,"tier_projection":0.4,"balance_band":0}"#;

    #[test]
    fn old_policies_read_with_their_removed_settings_ignored() {
        for text in [OLD_POLICY, OLD_POLICY_WITH_KNOBS] {
            let old: Policy = serde_json::from_str(text).expect("old policy");
            assert_eq!(old.max_requeues, Some(2));
            assert_eq!(old.preemption, PreemptionPreset::Default);
            // The removed settings are the rule's constants whatever was stored.
            assert_eq!(
                old.rebalance(),
                policy_core::rebalance::RebalancePolicy {
                    max_requeues: Some(2),
                    site_max_preemptions: old.site_max_preemptions,
                    ..Default::default()
                }
            );
        }
        let with: Policy = serde_json::from_str(OLD_POLICY_WITH_KNOBS).expect("old");
        assert!(with.require_min_runtime && with.site_max_preemptions == Some(4));
        // A policy at the defaults serializes as the previous release wrote it
        // (which its plugins, denying unknown fields and requiring
        // `hysteresis`, read), the hysteresis the rule's constant.
        let old: Policy = serde_json::from_str(OLD_POLICY).expect("old");
        assert_eq!(serde_json::to_string(&old).expect("json"), OLD_POLICY);
        let with = serde_json::to_value(&with).expect("json");
        assert_eq!(with["hysteresis"], serde_json::json!(0.1));
        for k in Policy::REMOVED.iter().filter(|k| **k != "hysteresis") {
            assert!(with.get(k).is_none(), "{k} in {with}");
        }
        // Still strict about anything else.
        let unknown = OLD_POLICY.replace("\"max_requeues\"", "\"max_requeue\"");
        assert!(serde_json::from_str::<Policy>(&unknown).is_err());
        let missing = OLD_POLICY.replace("\"window_secs\":604800,", "");
        assert!(serde_json::from_str::<Policy>(&missing).is_err());
    }

    #[test]
    fn the_preset_sets_the_benefit_factor_and_is_written_only_when_set() {
        let rule = policy_core::rebalance::RebalancePolicy::default();
        assert_eq!(Policy::default().rebalance(), rule);
        for (preset, factor) in [
            (PreemptionPreset::Gentle, 4.0),
            (PreemptionPreset::Default, 2.0),
            (PreemptionPreset::Aggressive, 1.0),
        ] {
            let p = Policy {
                preemption: preset,
                ..Policy::default()
            };
            assert_eq!(
                p.rebalance(),
                policy_core::rebalance::RebalancePolicy {
                    benefit_factor: Some(factor),
                    ..rule
                }
            );
            let text = serde_json::to_string(&p).expect("json");
            assert_eq!(
                text.contains("preemption"),
                preset != PreemptionPreset::Default,
                "{text}"
            );
            assert_eq!(serde_json::from_str::<Policy>(&text).expect("back"), p);
        }
        assert!(
            serde_json::from_str::<Policy>(&OLD_POLICY.replace('}', r#","preemption":"brutal"}"#))
                .is_err()
        );
        // The requeue cap: unset the rule's default, NO_REQUEUE_CAP none.
        let none = Policy {
            max_requeues: Some(Policy::NO_REQUEUE_CAP),
            ..Policy::default()
        };
        assert_eq!(none.rebalance().max_requeues, None);
        assert_eq!(
            Policy::default().rebalance().max_requeues,
            rule.max_requeues
        );
    }

    #[test]
    fn a_policy_patch_refuses_each_removed_setting_by_name() {
        use crate::tree::PolicyPatch;
        for k in Policy::REMOVED {
            for v in ["0.2", "0", "true", "null", "\"off\""] {
                let text = format!(r#"{{"window_secs":86400,"{k}":{v}}}"#);
                let e = serde_json::from_str::<PolicyPatch>(&text).unwrap_err();
                assert!(
                    e.to_string()
                        .contains(&format!("`{k}` is a fixed constant of the rule")),
                    "{text}: {e}"
                );
            }
        }
        let p: PolicyPatch =
            serde_json::from_str(r#"{"preemption":"gentle","site_max_preemptions":null}"#)
                .expect("patch");
        assert_eq!(
            (p.preemption, p.site_max_preemptions),
            (Some(PreemptionPreset::Gentle), Some(None))
        );
        let base = Policy {
            site_max_preemptions: Some(3),
            ..Policy::default()
        };
        let new = p.apply(&base);
        assert_eq!(
            (new.preemption, new.site_max_preemptions),
            (PreemptionPreset::Gentle, None)
        );
        assert!(serde_json::from_str::<PolicyPatch>(r#"{"preemption":"brutal"}"#).is_err());
        assert!(serde_json::from_str::<PolicyPatch>(r#"{"colour":1}"#).is_err());
        // Unset fields are not sent (a `null` would clear a cap).
        let sent = serde_json::to_value(PolicyPatch {
            preemption: Some(PreemptionPreset::Aggressive),
            ..PolicyPatch::default()
        })
        .expect("json");
        assert_eq!(sent, serde_json::json!({"preemption": "aggressive"}));
    }

    fn small_snapshot() -> PluginSnapshot {
        let tree = policy_core::TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![policy_core::AccountSpec {
                name: "teama".into(),
                parent: None,
                allocation_gpu_hours: 168.0,
                overcommit: false,
            }],
            members: vec![],
        };
        let fs = FairShare::compute(
            &tree,
            &Default::default(),
            10,
            policy_core::DEFAULT_WINDOW_SECS,
        );
        let mut weights = GpuWeights::default();
        weights.set("b300", 2.2).expect("weight");
        PluginSnapshot {
            version: "1-10".into(),
            generated_at: 10,
            policy: Policy::default(),
            weights,
            fair_share: fs,
            drains: vec![],
            cluster_gpus: None,
            cluster_weighted_gpus: None,
        }
    }

    /// A snapshot with a non-finite or out-of-range number, or a node index
    /// outside the tree, is refused with an error naming the field; none of
    /// it panics.
    #[test]
    fn decode_refuses_non_finite_and_out_of_range_values() {
        let snap = small_snapshot();
        let good = serde_json::to_value(&snap).expect("json");
        let back = PluginSnapshot::decode(good.to_string().as_bytes()).expect("good decodes");
        assert_eq!(back, snap);
        let cases: Vec<(&str, serde_json::Value, &str)> = vec![
            // What serde_json writes for an infinite allocation.
            (
                "/fair_share/nodes/1/allocation",
                serde_json::Value::Null,
                "nodes[1].allocation",
            ),
            (
                "/fair_share/nodes/1/allocation",
                serde_json::json!(1e306),
                "\"teama\").allocation",
            ),
            (
                "/fair_share/nodes/1/usage",
                serde_json::json!(-1.0),
                "usage",
            ),
            (
                "/fair_share/nodes/1/ratio",
                serde_json::json!(-0.5),
                "ratio",
            ),
            ("/fair_share/nodes/1/parent", serde_json::json!(7), "parent"),
            (
                "/fair_share/nodes/0/children/0",
                serde_json::json!(99),
                "children",
            ),
            (
                "/fair_share/nodes/1/leaf_rank",
                serde_json::json!(5),
                "leaf_rank",
            ),
            (
                "/weights/default",
                serde_json::json!(0.0),
                "weights.default",
            ),
            (
                "/weights/by_type/b300",
                serde_json::json!(1e300),
                "weights.by_type.b300",
            ),
            (
                "/cluster_weighted_gpus",
                serde_json::json!(-3.0),
                "cluster_weighted_gpus",
            ),
            (
                "/fair_share/window_secs",
                serde_json::json!(0),
                "window_secs",
            ),
        ];
        for (pointer, value, says) in cases {
            let mut v = good.clone();
            match v.pointer_mut(pointer) {
                Some(slot) => *slot = value.clone(),
                None => {
                    // A field left out when unset: add it to its object.
                    let (parent, key) = pointer.rsplit_once('/').expect(pointer);
                    let obj = if parent.is_empty() {
                        Some(&mut v)
                    } else {
                        v.pointer_mut(parent)
                    };
                    obj.and_then(serde_json::Value::as_object_mut)
                        .expect(parent)
                        .insert(key.to_string(), value.clone());
                }
            }
            let err = PluginSnapshot::decode(v.to_string().as_bytes())
                .expect_err(&format!("{pointer} = {value} must be refused"));
            let text = err.to_string();
            assert!(text.starts_with("snapshot is not valid: "), "{text}");
            assert!(text.contains(says), "{pointer}: {text}");
        }
        for junk in [&b""[..], b"null", b"{", b"[1,2]", b"\xff\xfe"] {
            assert!(PluginSnapshot::decode(junk).is_err());
        }
    }

    #[test]
    fn the_weighted_capacity_round_trips_is_left_out_when_unknown_and_preferred() {
        let mut snap = small_snapshot();
        // Unknown: neither count is in the JSON, as the previous release wrote it.
        let text = serde_json::to_string(&snap).expect("json");
        assert!(!text.contains("cluster_"), "{text}");
        assert_eq!(snap.capacity_gpus(), None);
        // 8 H100 (weight 1) and 8 B300 (2.2): 16 GPUs, 25.6 weighted.
        snap.cluster_gpus = Some(16);
        snap.cluster_weighted_gpus = Some(25.6);
        let text = serde_json::to_string(&snap).expect("json");
        assert!(text.contains("\"cluster_weighted_gpus\":25.6"), "{text}");
        let back: PluginSnapshot = serde_json::from_str(&text).expect("back");
        assert_eq!(back, snap);
        assert_eq!(back.capacity_gpus(), Some(25.6));
        // A snapshot of the previous release's budgetd (no weighted count):
        // the raw count, as before.
        let mut old: serde_json::Value = serde_json::from_str(&text).expect("value");
        old.as_object_mut()
            .expect("object")
            .remove("cluster_weighted_gpus");
        let old: PluginSnapshot = serde_json::from_value(old).expect("old snapshot");
        assert_eq!(
            (old.cluster_weighted_gpus, old.capacity_gpus()),
            (None, Some(16.0))
        );
        // The snapshot accepts fields it does not know: the previous release's
        // plugins (the same struct less this field) read this one, and this
        // release reads the next one's.
        let mut newer: serde_json::Value = serde_json::from_str(&text).expect("value");
        newer["some_later_field"] = serde_json::json!({"x": 1});
        assert_eq!(
            serde_json::from_value::<PluginSnapshot>(newer).expect("newer"),
            snap
        );
        // A weighted count that is not a positive number is not a capacity.
        for w in [0.0, -3.0] {
            snap.cluster_weighted_gpus = Some(w);
            assert_eq!(snap.capacity_gpus(), Some(16.0));
        }
        snap.cluster_gpus = None;
        assert_eq!(snap.capacity_gpus(), None);
    }

    #[test]
    fn bounded_text_is_always_accepted() {
        assert_eq!(bounded_text(""), None);
        assert_eq!(bounded_text("gpu[1-4]").as_deref(), Some("gpu[1-4]"));
        assert_eq!(bounded_text("a\tb").as_deref(), Some("a?b"));
        let long = format!(
            "gpu[{}]",
            (1..80)
                .map(|i| format!("{:03}", 2 * i))
                .collect::<Vec<_>>()
                .join(",")
        );
        let cut = bounded_text(&long).expect("some");
        assert_eq!(cut.len(), MAX_RUN_TEXT);
        assert!(cut.ends_with(CUT_MARKER) && long.starts_with(&cut[..MAX_RUN_TEXT - 3]));
        let wide = bounded_text(&"é".repeat(100)).expect("some");
        assert!(wide.len() <= MAX_RUN_TEXT && wide.ends_with(CUT_MARKER));
    }
}
