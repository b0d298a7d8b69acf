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
use serde::{Deserialize, Serialize};

use crate::Policy;

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
/// database).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyPatch {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default_min_runtime_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_min_runtime_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub require_min_runtime: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hysteresis: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub snapshot_max_age_secs: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_threshold_secs: Option<i64>,
    /// `Some(None)` (JSON `null`) clears the cap; absent keeps it.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub site_max_preemptions: Option<Option<u32>>,
    /// As `site_max_preemptions`.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub site_max_lost_gpu_hours: Option<Option<f64>>,
    /// As `site_max_preemptions` (`null`: back to the rule's default).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_requeues: Option<Option<u32>>,
    /// `null`: back to the rule's default; `0`: no band (see [`Policy::tier_band`]).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tier_band: Option<Option<f64>>,
    /// `null`: back to the rule's default.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub share_order: Option<Option<bool>>,
    /// `null`: back to the rule's default.
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub entitled_first: Option<Option<bool>>,
    /// `null`: back to the rule's default; `0`: no projection (see
    /// [`Policy::tier_projection`]).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub tier_projection: Option<Option<f64>>,
    /// `null`: back to the rule's default; `0`: the instantaneous test (see
    /// [`Policy::balance_band`]).
    #[serde(
        default,
        deserialize_with = "present",
        skip_serializing_if = "Option::is_none"
    )]
    pub balance_band: Option<Option<f64>>,
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
            hysteresis: self.hysteresis.unwrap_or(base.hysteresis),
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
            tier_band: self.tier_band.unwrap_or(base.tier_band),
            share_order: self.share_order.unwrap_or(base.share_order),
            entitled_first: self.entitled_first.unwrap_or(base.entitled_first),
            tier_projection: self.tier_projection.unwrap_or(base.tier_projection),
            balance_band: self.balance_band.unwrap_or(base.balance_band),
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
