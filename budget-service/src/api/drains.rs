//! `/v1/drains`: maintenance drains (docs/design.md §7). Changes are admin-only; the
//! list is readable by every authenticated caller (users want to know when a node is
//! back).
//!
//! A drain request is validated in full (hostlist syntax, every node known to Slurm)
//! before anything changes; then it is persisted, then Slurm's DRAIN is set. If Slurm
//! refuses, the rows are deleted again so a failed request leaves nothing behind.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use budget_protocol::drains::{DrainRequest, DrainStatus, Undrained};

use super::ApiJson;
use crate::auth::Caller;
use crate::clock::now;
use crate::drains::{self, DrainRow};
use crate::error::{AppError, AppResult};
use crate::scontrol::{self, NodeInfo, SlurmError};
use crate::state::AppState;

fn check_reason(r: &str) -> AppResult<String> {
    let r = r.trim();
    if r.is_empty() {
        return Err(AppError::Invalid("reason must not be empty".into()));
    }
    if r.len() > 200 || r.chars().any(|c| c.is_control() || c == '"' || c == '=') {
        return Err(AppError::Invalid(
            "reason: at most 200 characters, no quotes, '=' or control characters (Slurm stores it in the node's Reason)".into(),
        ));
    }
    Ok(r.to_string())
}

/// Expands a Slurm hostlist with Slurm itself and checks every name is a node
/// Slurm knows. Bad input: 422 naming the problem, nothing changed.
async fn resolve_nodes(expr: &str) -> AppResult<(Vec<String>, BTreeMap<String, NodeInfo>)> {
    let expr = expr.trim();
    if expr.is_empty()
        || expr.len() > 4096
        || !expr
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,[]".contains(c))
    {
        return Err(AppError::Invalid(format!(
            "bad node list {expr:?}: expected a Slurm hostlist such as gpu[1-2],gpu7"
        )));
    }
    let names = match scontrol::hostnames(expr).await {
        Ok(n) => n,
        Err(SlurmError::Failed { stderr, .. }) => {
            return Err(AppError::Invalid(format!(
                "bad node list {expr:?}: {stderr}"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let nodes = scontrol::show_nodes().await?;
    let unknown: Vec<&str> = names
        .iter()
        .filter(|n| !nodes.contains_key(*n))
        .map(String::as_str)
        .collect();
    if names.is_empty() || !unknown.is_empty() {
        return Err(AppError::Invalid(format!(
            "unknown node(s) {}; Slurm has: {}",
            if unknown.is_empty() {
                expr.to_string()
            } else {
                unknown.join(",")
            },
            nodes.keys().cloned().collect::<Vec<_>>().join(",")
        )));
    }
    Ok((names, nodes))
}

/// Reads Slurm and computes the status of `drains`.
async fn live_status(st: &AppState, drains: Vec<DrainRow>) -> AppResult<Vec<DrainStatus>> {
    if drains.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = scontrol::show_nodes().await?;
    let jobs = scontrol::show_jobs().await?;
    let default_min = st
        .with_store(|s| Ok(s.policy().default_min_runtime_secs))
        .await?;
    Ok(drains::status(&drains, &nodes, &jobs, default_min, now()))
}

pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<DrainRequest>,
) -> AppResult<(StatusCode, Json<Vec<DrainStatus>>)> {
    caller.require_admin(&st, "drain nodes")?;
    let reason = check_reason(&req.reason)?;
    let (nodes, _) = resolve_nodes(&req.nodes).await?;
    let actor = caller.actor();
    let t = now();
    // No drain worker pass between writing the rows and a rollback after a failed
    // `scontrol` (it would drain in Slurm a node whose row the rollback removes).
    let ops = st.drain_ops.lock().await;
    let before = st.with_store(|s| drains::list(s)).await?;
    {
        let (nodes, reason) = (nodes.clone(), reason.clone());
        st.with_store(move |s| drains::write(s, &actor, &nodes, Some(&reason), t))
            .await?;
    }
    if let Err(e) = scontrol::drain(&nodes, &reason).await {
        // Undo only what this request did: nodes it newly drained lose their
        // row; nodes drained before keep theirs, with their old reason (a failed
        // re-drain must not end a drain that is in force).
        let actor = caller.actor();
        let fresh: Vec<String> = nodes
            .iter()
            .filter(|n| !before.iter().any(|d| &d.node == *n))
            .cloned()
            .collect();
        let mut old: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for d in before.iter().filter(|d| nodes.contains(&d.node)) {
            old.entry(d.reason.clone())
                .or_default()
                .push(d.node.clone());
        }
        let undone = st
            .with_store(move |s| {
                if !fresh.is_empty() {
                    drains::write(s, &actor, &fresh, None, t)?;
                }
                for (reason, ns) in &old {
                    drains::write(s, &actor, ns, Some(reason), t)?;
                }
                Ok(())
            })
            .await;
        if let Err(u) = undone {
            tracing::error!(error = %u, "drain: rolling back after a failed scontrol failed too");
        }
        return Err(e.into());
    }
    drop(ops);
    tracing::info!(nodes = %nodes.join(","), reason = %reason, by = %caller.actor(), "drain requested");
    let rows = st.with_store(|s| drains::list(s)).await?;
    let mine: Vec<_> = rows
        .into_iter()
        .filter(|d| nodes.contains(&d.node))
        .collect();
    Ok((StatusCode::CREATED, Json(live_status(&st, mine).await?)))
}

pub async fn list(
    State(st): State<AppState>,
    _caller: Caller,
) -> AppResult<Json<Vec<DrainStatus>>> {
    let rows = st.with_store(|s| drains::list(s)).await?;
    Ok(Json(live_status(&st, rows).await?))
}

pub async fn remove(
    State(st): State<AppState>,
    caller: Caller,
    Path(expr): Path<String>,
) -> AppResult<Json<Undrained>> {
    caller.require_admin(&st, "undrain nodes")?;
    let (nodes, _) = resolve_nodes(&expr).await?;
    // No drain worker pass between the resume and forgetting the drain (it would
    // drain the resumed node again).
    let _ops = st.drain_ops.lock().await;
    let rows = st.with_store(|s| drains::list(s)).await?;
    let missing: Vec<&str> = nodes
        .iter()
        .filter(|n| !rows.iter().any(|d| &d.node == *n))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        return Err(AppError::NotFound(format!(
            "not drained by budgetd: {}",
            missing.join(",")
        )));
    }
    scontrol::resume(&nodes).await?;
    let (n2, actor, t) = (nodes.clone(), caller.actor(), now());
    st.with_store(move |s| drains::write(s, &actor, &n2, None, t))
        .await?;
    tracing::info!(nodes = %nodes.join(","), by = %caller.actor(), "undrained");
    Ok(Json(Undrained { undrained: nodes }))
}
