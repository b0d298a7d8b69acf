//! Handlers for the account tree, members, coordinators, weights, policy and
//! the audit log. Each checks the caller's [`Scope`] against the tree *inside*
//! the same store lock that performs the change, so a check cannot go stale.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use policy_core::{AccountSpec, GpuWeights, MemberSpec};
use serde::Deserialize;

use super::{ApiJson, ApiQuery};
use crate::auth::{Caller, Scope};
use crate::error::{AppError, AppResult};
use crate::policy::PolicyPatch;
use crate::state::AppState;
use crate::store::{AccountPatch, AuditEntry, Coordinator, NewAccount, WeightsPatch};
use crate::timefmt::now;
use budget_protocol::Policy;

pub async fn list_accounts(
    State(st): State<AppState>,
    caller: Caller,
) -> AppResult<Json<Vec<AccountSpec>>> {
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        Ok(Json(
            s.tree()
                .accounts
                .iter()
                .filter(|a| scope.can_read(&a.name))
                .cloned()
                .collect(),
        ))
    })
    .await
}

pub async fn get_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> AppResult<Json<serde_json::Value>> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let Some(a) = s.tree().account(&name).cloned() else {
            return Err(AppError::NotFound(format!("unknown account {name:?}")));
        };
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_read(&name) {
            return Err(caller.refuse(&st2, &format!("read account {name:?}")));
        }
        let members: Vec<&MemberSpec> = s
            .tree()
            .members
            .iter()
            .filter(|m| m.account == name)
            .collect();
        let children: Vec<&str> = s
            .tree()
            .children_of(&name)
            .map(|c| c.name.as_str())
            .collect();
        let coordinators: Vec<&str> = s
            .coordinators()
            .iter()
            .filter(|c| c.account == name)
            .map(|c| c.user.as_str())
            .collect();
        Ok(Json(serde_json::json!({
            "account": a, "children": children, "members": members, "coordinators": coordinators,
        })))
    })
    .await
}

pub async fn create_account(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<NewAccount>,
) -> AppResult<(StatusCode, Json<AccountSpec>)> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        let parent = req
            .parent
            .clone()
            .unwrap_or_else(|| policy_core::tree::ROOT.to_string());
        if !scope.can_manage_under(&parent) {
            return Err(caller.refuse(&st2, &format!("create an account under {parent:?}")));
        }
        let a = s.create_account(&caller.actor(), req, now())?;
        tracing::info!(actor = %caller.actor(), account = %a.name, "account created");
        Ok((StatusCode::CREATED, Json(a)))
    })
    .await
}

pub async fn modify_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<AccountPatch>,
) -> AppResult<Json<AccountSpec>> {
    let st2 = st.clone();
    st.with_store(move |s| {
        if s.tree().account(&name).is_none() {
            return Err(AppError::NotFound(format!("unknown account {name:?}")));
        }
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_modify(&name) {
            return Err(caller.refuse(&st2, &format!("modify account {name:?}")));
        }
        if let Some(p) = &patch.parent
            && !scope.can_manage_under(p)
        {
            return Err(caller.refuse(&st2, &format!("move an account under {p:?}")));
        }
        Ok(Json(s.modify_account(
            &caller.actor(),
            &name,
            patch,
            now(),
        )?))
    })
    .await
}

pub async fn delete_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> AppResult<StatusCode> {
    let st2 = st.clone();
    st.with_store(move |s| {
        if s.tree().account(&name).is_none() {
            return Err(AppError::NotFound(format!("unknown account {name:?}")));
        }
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_modify(&name) {
            return Err(caller.refuse(&st2, &format!("delete account {name:?}")));
        }
        s.delete_account(&caller.actor(), &name, now())?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccountFilter {
    #[serde(default)]
    account: Option<String>,
}

pub async fn list_members(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AccountFilter>,
) -> AppResult<Json<Vec<MemberSpec>>> {
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        Ok(Json(
            s.tree()
                .members
                .iter()
                .filter(|m| {
                    scope.can_read(&m.account) && q.account.as_ref().is_none_or(|a| *a == m.account)
                })
                .cloned()
                .collect(),
        ))
    })
    .await
}

/// `POST /v1/members` body.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NewMember {
    user: String,
    account: String,
    #[serde(default)]
    allocation_gpu_hours: Option<f64>,
}

pub async fn add_member(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(m): ApiJson<NewMember>,
) -> AppResult<(StatusCode, Json<MemberSpec>)> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_manage_under(&m.account) {
            return Err(caller.refuse(&st2, &format!("add members to {:?}", m.account)));
        }
        let spec = MemberSpec {
            user: m.user,
            account: m.account,
            allocation_gpu_hours: m.allocation_gpu_hours,
        };
        Ok((
            StatusCode::CREATED,
            Json(s.add_member(&caller.actor(), spec, now())?),
        ))
    })
    .await
}

/// `PATCH /v1/members/{account}/{user}` body; `null` clears the explicit
/// allocation (the member then shares the account's rest equally).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemberPatch {
    allocation_gpu_hours: Option<f64>,
}

pub async fn modify_member(
    State(st): State<AppState>,
    caller: Caller,
    Path((account, user)): Path<(String, String)>,
    ApiJson(p): ApiJson<MemberPatch>,
) -> AppResult<Json<MemberSpec>> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_manage_under(&account) {
            return Err(caller.refuse(&st2, &format!("change members of {account:?}")));
        }
        Ok(Json(s.modify_member(
            &caller.actor(),
            &account,
            &user,
            p.allocation_gpu_hours,
            now(),
        )?))
    })
    .await
}

pub async fn remove_member(
    State(st): State<AppState>,
    caller: Caller,
    Path((account, user)): Path<(String, String)>,
) -> AppResult<StatusCode> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_manage_under(&account) {
            return Err(caller.refuse(&st2, &format!("remove members of {account:?}")));
        }
        s.remove_member(&caller.actor(), &account, &user, now())?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

pub async fn list_coordinators(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AccountFilter>,
) -> AppResult<Json<Vec<Coordinator>>> {
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        Ok(Json(
            s.coordinators()
                .iter()
                .filter(|c| {
                    scope.can_read(&c.account) && q.account.as_ref().is_none_or(|a| *a == c.account)
                })
                .cloned()
                .collect(),
        ))
    })
    .await
}

pub async fn add_coordinator(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(c): ApiJson<Coordinator>,
) -> AppResult<(StatusCode, Json<Coordinator>)> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_modify(&c.account) {
            return Err(caller.refuse(&st2, &format!("add coordinators of {:?}", c.account)));
        }
        Ok((
            StatusCode::CREATED,
            Json(s.add_coordinator(&caller.actor(), c, now())?),
        ))
    })
    .await
}

pub async fn remove_coordinator(
    State(st): State<AppState>,
    caller: Caller,
    Path((account, user)): Path<(String, String)>,
) -> AppResult<StatusCode> {
    let st2 = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !scope.can_modify(&account) {
            return Err(caller.refuse(&st2, &format!("remove coordinators of {account:?}")));
        }
        s.remove_coordinator(&caller.actor(), &Coordinator { user, account }, now())?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

pub async fn get_weights(
    State(st): State<AppState>,
    _caller: Caller,
) -> AppResult<Json<GpuWeights>> {
    st.with_store(|s| Ok(Json(s.weights().clone()))).await
}

pub async fn set_weights(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(patch): ApiJson<WeightsPatch>,
) -> AppResult<Json<GpuWeights>> {
    caller.require_admin(&st, "set GPU weights")?;
    st.with_store(move |s| Ok(Json(s.set_weights(&caller.actor(), patch, now())?)))
        .await
}

pub async fn get_policy(State(st): State<AppState>, _caller: Caller) -> AppResult<Json<Policy>> {
    st.with_store(|s| Ok(Json(s.policy().clone()))).await
}

pub async fn set_policy(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(patch): ApiJson<PolicyPatch>,
) -> AppResult<Json<Policy>> {
    caller.require_admin(&st, "change the policy")?;
    if patch.is_empty() {
        return Err(AppError::Invalid("policy patch sets no field".into()));
    }
    st.with_store(move |s| Ok(Json(s.set_policy(&caller.actor(), &patch, now())?)))
        .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditQuery {
    #[serde(default)]
    after: Option<i64>,
    #[serde(default)]
    limit: Option<i64>,
}

pub async fn audit(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AuditQuery>,
) -> AppResult<Json<Vec<AuditEntry>>> {
    caller.require_reader(&st, "read the audit log")?;
    let limit = q.limit.unwrap_or(1000).clamp(1, 100_000);
    st.with_store(move |s| Ok(Json(s.audit_log(q.after.unwrap_or(0), limit)?)))
        .await
}
