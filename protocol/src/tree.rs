//! Request and response bodies of the account tree, members, coordinators,
//! GPU weights, policy and the audit log (`/v1/accounts`, `/v1/members`,
//! `/v1/coordinators`, `/v1/weights`, `/v1/policy`, `/v1/audit`).
//!
//! Accounts, members and weights themselves are `policy_core`'s
//! [`AccountSpec`](policy_core::AccountSpec), [`MemberSpec`](policy_core::MemberSpec)
//! and [`GpuWeights`](policy_core::GpuWeights): the tree the service stores
//! is the tree the policy ranks.

use std::collections::BTreeMap;

use policy_core::{AccountSpec, MemberSpec};
use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::{Policy, PreemptionPreset};

/// `POST /v1/accounts` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewAccount {
    pub name: String,
    /// Parent account; absent, null or `"root"`: under the root.
    #[serde(default)]
    pub parent: Option<String>,
    pub allocation_gpu_hours: f64,
    #[serde(default)]
    pub overcommit: bool,
}

/// `PATCH /v1/accounts/{name}` body: fields to change; an absent field is
/// left as it is (and sent absent: budgetd refuses `null` for these fields).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocation_gpu_hours: Option<f64>,
    /// New parent (`"root"` for the top level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overcommit: Option<bool>,
}

/// `GET /v1/accounts/{name}`: one account with its neighbourhood.
/// (Fields in alphabetical order: the JSON keys keep the order they always had.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AccountDetail {
    pub account: AccountSpec,
    /// Names of the child accounts.
    pub children: Vec<String>,
    /// Users coordinating this account.
    pub coordinators: Vec<String>,
    pub members: Vec<MemberSpec>,
}

/// `POST /v1/members` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    pub user: String,
    pub account: String,
    #[serde(default)]
    pub allocation_gpu_hours: Option<f64>,
}

/// `PATCH /v1/members/{account}/{user}` body; `null` clears the explicit
/// allocation (the member then shares the account's rest equally).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    pub allocation_gpu_hours: Option<f64>,
}

/// `POST /v1/coordinators` body, and one coordinator as listed.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Coordinator {
    pub user: String,
    pub account: String,
}

/// `PATCH /v1/weights` body (`default` absent: unchanged, and sent absent:
/// budgetd refuses `null` for it).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WeightsPatch {
    /// New weight for GPUs without a known type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<f64>,
    /// Type -> weight to set.
    #[serde(default)]
    pub set: BTreeMap<String, f64>,
}

/// A partial policy: every field optional. The body of `PATCH /v1/policy`,
/// and the `[policy]` table of budgetd's config file (defaults for a fresh
/// database). A patch naming a setting that is now a constant of the rule
/// ([`Policy::REMOVED`]) is refused with a message that says so
/// ([`fixed_constant_message`]), whatever its value.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "PolicyPatchWire")]
pub struct PolicyPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_min_runtime_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_min_runtime_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub require_min_runtime: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_max_age_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub idle_threshold_secs: Option<i64>,
    /// `Some(None)` (JSON `null`) clears the cap; absent keeps it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_max_preemptions: Option<Option<u32>>,
    /// As `site_max_preemptions`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_max_lost_gpu_hours: Option<Option<f64>>,
    /// As `site_max_preemptions` (`null`: back to the rule's default).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requeues: Option<Option<u32>>,
    /// The preemption strength (`gentle`, `default`, `aggressive`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionPreset>,
}

/// The message refusing a patch that names `field`, one of [`Policy::REMOVED`].
pub fn fixed_constant_message(field: &str) -> String {
    format!(
        "`{field}` is a fixed constant of the rule, not a site setting (its value and the \
         ablation that chose it: docs/design.md §6.6); nothing was changed"
    )
}

/// [`PolicyPatch`] as read: the settable fields, and those of
/// [`Policy::REMOVED`] only to refuse them by name ([`fixed_constant_message`]).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PolicyPatchWire {
    #[serde(default)]
    window_secs: Option<i64>,
    #[serde(default)]
    default_min_runtime_secs: Option<i64>,
    #[serde(default)]
    max_min_runtime_secs: Option<i64>,
    #[serde(default)]
    require_min_runtime: Option<bool>,
    #[serde(default)]
    snapshot_max_age_secs: Option<i64>,
    #[serde(default)]
    idle_threshold_secs: Option<i64>,
    #[serde(default, deserialize_with = "present")]
    site_max_preemptions: Option<Option<u32>>,
    #[serde(default, deserialize_with = "present")]
    site_max_lost_gpu_hours: Option<Option<f64>>,
    #[serde(default, deserialize_with = "present")]
    max_requeues: Option<Option<u32>>,
    #[serde(default)]
    preemption: Option<PreemptionPreset>,
    // Present (`null` included) is refused.
    #[serde(default, deserialize_with = "present")]
    hysteresis: Option<Option<IgnoredAny>>,
    #[serde(default, deserialize_with = "present")]
    tier_band: Option<Option<IgnoredAny>>,
    #[serde(default, deserialize_with = "present")]
    tier_projection: Option<Option<IgnoredAny>>,
    #[serde(default, deserialize_with = "present")]
    share_order: Option<Option<IgnoredAny>>,
    #[serde(default, deserialize_with = "present")]
    entitled_first: Option<Option<IgnoredAny>>,
    #[serde(default, deserialize_with = "present")]
    balance_band: Option<Option<IgnoredAny>>,
}

impl TryFrom<PolicyPatchWire> for PolicyPatch {
    type Error = String;

    fn try_from(w: PolicyPatchWire) -> Result<Self, String> {
        let removed = [
            w.hysteresis.is_some(),
            w.tier_band.is_some(),
            w.tier_projection.is_some(),
            w.share_order.is_some(),
            w.entitled_first.is_some(),
            w.balance_band.is_some(),
        ];
        if let Some((name, _)) = Policy::REMOVED.iter().zip(removed).find(|(_, set)| *set) {
            return Err(fixed_constant_message(name));
        }
        Ok(PolicyPatch {
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
        })
    }
}

/// A field that is present (`null` included) is `Some`: absent stays `None` by
/// `default`, so a patch tells "clear" from "leave alone".
fn present<'de, D, T>(d: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

impl PolicyPatch {
    /// `base` with every field this patch sets replaced.
    pub fn apply(&self, base: &Policy) -> Policy {
        Policy {
            window_secs: self.window_secs.unwrap_or(base.window_secs),
            default_min_runtime_secs: self
                .default_min_runtime_secs
                .unwrap_or(base.default_min_runtime_secs),
            max_min_runtime_secs: self
                .max_min_runtime_secs
                .unwrap_or(base.max_min_runtime_secs),
            require_min_runtime: self.require_min_runtime.unwrap_or(base.require_min_runtime),
            snapshot_max_age_secs: self
                .snapshot_max_age_secs
                .unwrap_or(base.snapshot_max_age_secs),
            idle_threshold_secs: self.idle_threshold_secs.unwrap_or(base.idle_threshold_secs),
            site_max_preemptions: self
                .site_max_preemptions
                .unwrap_or(base.site_max_preemptions),
            site_max_lost_gpu_hours: self
                .site_max_lost_gpu_hours
                .unwrap_or(base.site_max_lost_gpu_hours),
            max_requeues: self.max_requeues.unwrap_or(base.max_requeues),
            preemption: self.preemption.unwrap_or(base.preemption),
        }
    }

    /// Whether the patch sets nothing.
    pub fn is_empty(&self) -> bool {
        *self == PolicyPatch::default()
    }
}

/// One row of `GET /v1/audit`: who changed what, when, from what to what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditEntry {
    pub id: i64,
    pub at: i64,
    pub actor: String,
    pub action: String,
    pub target: String,
    pub old: Option<serde_json::Value>,
    pub new: Option<serde_json::Value>,
}
