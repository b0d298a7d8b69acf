//! `/v1/drains`: maintenance drains (DESIGN 3.6). Changes are admin-only; the list is
//! readable by every authenticated caller (users want to know when a node is back).
//!
//! A drain request is validated in full (hostlist syntax, every node known to Slurm)
//! before anything changes; then it is persisted, then Slurm's DRAIN is set. If Slurm
//! refuses, the rows are deleted again so a failed request leaves nothing behind.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};

use super::ApiJson;
use crate::auth::Caller;
use crate::drain::{self, DrainStatus};
use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::timefmt::now;

/// `POST /v1/drains` body.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// Slurm hostlist, e.g. `gpu[1-2]`.
    pub nodes: String,
    pub reason: String,
}

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

pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<DrainRequest>,
) -> AppResult<(StatusCode, Json<Vec<DrainStatus>>)> {
    caller.require_admin(&st, "drain nodes")?;
    let reason = check_reason(&req.reason)?;
    let (nodes, _) = drain::resolve_nodes(&req.nodes).await?;
    let actor = caller.actor();
    let t = now();
    {
        let (nodes, reason) = (nodes.clone(), reason.clone());
        st.with_store(move |s| drain::write(s, &actor, &nodes, Some(&reason), t))
            .await?;
    }
    if let Err(e) = drain::slurm_drain(&nodes, &reason).await {
        let (n2, actor) = (nodes.clone(), caller.actor());
        let _ = st
            .with_store(move |s| drain::write(s, &actor, &n2, None, t))
            .await;
        return Err(e.into());
    }
    tracing::info!(nodes = %nodes.join(","), reason = %reason, by = %caller.actor(), "drain requested");
    let rows = st.with_store(|s| drain::list(s)).await?;
    let mine: Vec<_> = rows
        .into_iter()
        .filter(|d| nodes.contains(&d.node))
        .collect();
    Ok((
        StatusCode::CREATED,
        Json(drain::live_status(&st, mine).await?),
    ))
}

pub async fn list(
    State(st): State<AppState>,
    _caller: Caller,
) -> AppResult<Json<Vec<DrainStatus>>> {
    let rows = st.with_store(|s| drain::list(s)).await?;
    Ok(Json(drain::live_status(&st, rows).await?))
}

pub async fn remove(
    State(st): State<AppState>,
    caller: Caller,
    Path(expr): Path<String>,
) -> AppResult<Json<serde_json::Value>> {
    caller.require_admin(&st, "undrain nodes")?;
    let (nodes, _) = drain::resolve_nodes(&expr).await?;
    let rows = st.with_store(|s| drain::list(s)).await?;
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
    drain::slurm_resume(&nodes).await?;
    let (n2, actor, t) = (nodes.clone(), caller.actor(), now());
    st.with_store(move |s| drain::write(s, &actor, &n2, None, t))
        .await?;
    tracing::info!(nodes = %nodes.join(","), by = %caller.actor(), "undrained");
    Ok(Json(serde_json::json!({ "undrained": nodes })))
}
