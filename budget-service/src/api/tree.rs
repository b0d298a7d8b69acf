//! Handlers for the account tree, members, coordinators, weights, policy and
//! the audit log. Each checks the caller's [`Scope`] against the tree *inside*
//! the same store lock that performs the change ([`scoped`]), so a check
//! cannot go stale.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use budget_protocol::Policy;
use budget_protocol::tree::{
    AccountDetail, AccountPatch, AuditEntry, Coordinator, MemberPatch, NewAccount, NewMember,
    PolicyPatch, WeightsPatch,
};
use policy_core::{AccountSpec, GpuWeights, MemberSpec};
use serde::Deserialize;

use super::{ApiJson, ApiQuery};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::store::Store;

/// A caller with its scope, computed under the store lock of the request.
struct Access {
    caller: Caller,
    scope: Scope,
    state: AppState,
}

impl Access {
    /// Fails with a logged 403 ("permission denied: USER may not WHAT") unless `allowed`.
    fn require(&self, allowed: bool, what: &str) -> AppResult<()> {
        self.caller.require(&self.state, allowed, what)
    }

    fn actor(&self) -> String {
        self.caller.actor()
    }
}

/// Runs `f` on the store with the caller's [`Access`], both under one lock.
async fn scoped<T, F>(st: &AppState, caller: Caller, f: F) -> AppResult<T>
where
    T: Send + 'static,
    F: FnOnce(&mut Store, &Access) -> AppResult<T> + Send + 'static,
{
    let state = st.clone();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        f(
            s,
            &Access {
                caller,
                scope,
                state,
            },
        )
    })
    .await
}

fn unknown_account(name: &str) -> AppError {
    AppError::NotFound(format!("unknown account {name:?}"))
}

fn account_exists(s: &Store, name: &str) -> AppResult<()> {
    match s.tree().account(name) {
        Some(_) => Ok(()),
        None => Err(unknown_account(name)),
    }
}

pub async fn list_accounts(
    State(st): State<AppState>,
    caller: Caller,
) -> AppResult<Json<Vec<AccountSpec>>> {
    scoped(&st, caller, |s, a| Ok(Json(readable_accounts(s, &a.scope)))).await
}

/// The accounts `scope` may read, as `GET /v1/accounts` answers them.
pub fn readable_accounts(s: &Store, scope: &Scope) -> Vec<AccountSpec> {
    s.tree()
        .accounts
        .iter()
        .filter(|acc| scope.can_read(&acc.name))
        .cloned()
        .collect()
}

pub async fn get_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> AppResult<Json<serde_json::Value>> {
    scoped(&st, caller, move |s, a| {
        let Some(account) = s.tree().account(&name).cloned() else {
            return Err(unknown_account(&name));
        };
        a.require(a.scope.can_read(&name), &format!("read account {name:?}"))?;
        let tree = s.tree();
        let detail = AccountDetail {
            account,
            children: tree.children_of(&name).map(|c| c.name.clone()).collect(),
            coordinators: s
                .coordinators()
                .iter()
                .filter(|c| c.account == name)
                .map(|c| c.user.clone())
                .collect(),
            members: tree
                .members
                .iter()
                .filter(|m| m.account == name)
                .cloned()
                .collect(),
        };
        // Through a JSON value, whose keys are sorted: the nested account keeps
        // the key order this answer always had.
        Ok(Json(serde_json::to_value(detail)?))
    })
    .await
}

pub async fn create_account(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<NewAccount>,
) -> AppResult<(StatusCode, Json<AccountSpec>)> {
    scoped(&st, caller, move |s, a| {
        let parent = req
            .parent
            .clone()
            .unwrap_or_else(|| policy_core::tree::ROOT.to_string());
        a.require(
            a.scope.can_manage_under(&parent),
            &format!("create an account under {parent:?}"),
        )?;
        let created = s.create_account(&a.actor(), req, now())?;
        tracing::info!(actor = %a.actor(), account = %created.name, "account created");
        Ok((StatusCode::CREATED, Json(created)))
    })
    .await
}

pub async fn modify_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    ApiJson(patch): ApiJson<AccountPatch>,
) -> AppResult<Json<AccountSpec>> {
    scoped(&st, caller, move |s, a| {
        account_exists(s, &name)?;
        a.require(
            a.scope.can_modify(&name),
            &format!("modify account {name:?}"),
        )?;
        if let Some(p) = &patch.parent {
            a.require(
                a.scope.can_manage_under(p),
                &format!("move an account under {p:?}"),
            )?;
        }
        Ok(Json(s.modify_account(&a.actor(), &name, patch, now())?))
    })
    .await
}

pub async fn delete_account(
    State(st): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
) -> AppResult<StatusCode> {
    scoped(&st, caller, move |s, a| {
        account_exists(s, &name)?;
        a.require(
            a.scope.can_modify(&name),
            &format!("delete account {name:?}"),
        )?;
        s.delete_account(&a.actor(), &name, now())?;
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

impl AccountFilter {
    /// The `items` whose account the caller may read and the filter names
    /// (all, without `?account=`).
    fn readable<'i, T: Clone + 'i>(
        &self,
        a: &Access,
        items: impl IntoIterator<Item = &'i T>,
        account: impl Fn(&T) -> &str,
    ) -> Vec<T> {
        items
            .into_iter()
            .filter(|i| {
                let acc = account(i);
                a.scope.can_read(acc) && self.account.as_deref().is_none_or(|f| f == acc)
            })
            .cloned()
            .collect()
    }
}

pub async fn list_members(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AccountFilter>,
) -> AppResult<Json<Vec<MemberSpec>>> {
    scoped(&st, caller, move |s, a| {
        Ok(Json(q.readable(a, &s.tree().members, |m| &m.account)))
    })
    .await
}

pub async fn add_member(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(m): ApiJson<NewMember>,
) -> AppResult<(StatusCode, Json<MemberSpec>)> {
    scoped(&st, caller, move |s, a| {
        a.require(
            a.scope.can_manage_under(&m.account),
            &format!("add members to {:?}", m.account),
        )?;
        let spec = MemberSpec {
            user: m.user,
            account: m.account,
            allocation_gpu_hours: m.allocation_gpu_hours,
        };
        Ok((
            StatusCode::CREATED,
            Json(s.add_member(&a.actor(), spec, now())?),
        ))
    })
    .await
}

pub async fn modify_member(
    State(st): State<AppState>,
    caller: Caller,
    Path((account, user)): Path<(String, String)>,
    ApiJson(p): ApiJson<MemberPatch>,
) -> AppResult<Json<MemberSpec>> {
    scoped(&st, caller, move |s, a| {
        a.require(
            a.scope.can_manage_under(&account),
            &format!("change members of {account:?}"),
        )?;
        Ok(Json(s.modify_member(
            &a.actor(),
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
    scoped(&st, caller, move |s, a| {
        a.require(
            a.scope.can_manage_under(&account),
            &format!("remove members of {account:?}"),
        )?;
        s.remove_member(&a.actor(), &account, &user, now())?;
        Ok(StatusCode::NO_CONTENT)
    })
    .await
}

pub async fn list_coordinators(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AccountFilter>,
) -> AppResult<Json<Vec<Coordinator>>> {
    scoped(&st, caller, move |s, a| {
        Ok(Json(q.readable(a, s.coordinators(), |c| &c.account)))
    })
    .await
}

pub async fn add_coordinator(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(c): ApiJson<Coordinator>,
) -> AppResult<(StatusCode, Json<Coordinator>)> {
    scoped(&st, caller, move |s, a| {
        a.require(
            a.scope.can_modify(&c.account),
            &format!("add coordinators of {:?}", c.account),
        )?;
        Ok((
            StatusCode::CREATED,
            Json(s.add_coordinator(&a.actor(), c, now())?),
        ))
    })
    .await
}

pub async fn remove_coordinator(
    State(st): State<AppState>,
    caller: Caller,
    Path((account, user)): Path<(String, String)>,
) -> AppResult<StatusCode> {
    scoped(&st, caller, move |s, a| {
        a.require(
            a.scope.can_modify(&account),
            &format!("remove coordinators of {account:?}"),
        )?;
        s.remove_coordinator(&a.actor(), &Coordinator { user, account }, now())?;
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
