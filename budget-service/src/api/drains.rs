//! `/v1/drains`: maintenance drains (docs/design.md §7). Changes are admin-only; the
//! list is readable by every authenticated caller (users want to know when a node is
//! back).
//!
//! A drain request is validated in full (hostlist syntax, every node known to Slurm)
//! before anything changes; then it is persisted, then Slurm's DRAIN is set. If Slurm
//! still refuses (it changed between the check and the update) or cannot be reached,
//! the request is undone: the rows are deleted again, and what slurmctld applied
//! before it failed (it applies a node list node by node and stops at an unknown node)
//! is reverted in Slurm, so a failed request leaves nothing behind; what could not be
//! reverted is named in the answer. A refusal is a 409 carrying Slurm's own message,
//! an unreachable Slurm a 502 (`AppError::SlurmRefused`, `AppError::BadGateway`).
//! Undrain is all-or-nothing the same way.

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
use policy_core::hostlist;

fn check_reason(r: &str) -> AppResult<String> {
    let r = r.trim();
    if r.is_empty() {
        return Err(AppError::Invalid("reason must not be empty".into()));
    }
    if r.chars().count() > 200 || r.chars().any(|c| c.is_control() || c == '"' || c == '=') {
        return Err(AppError::Invalid(
            "reason: at most 200 characters, no quotes, '=' or control characters (Slurm stores it in the node's Reason)".into(),
        ));
    }
    Ok(r.to_string())
}

/// At most 50 of `names` (`len` in all) joined with commas, then how many
/// were left out: an error naming a whole cluster's nodes stays readable.
fn first_names<'a>(names: impl Iterator<Item = &'a str>, len: usize) -> String {
    const SHOWN: usize = 50;
    let mut out = names.take(SHOWN).collect::<Vec<_>>().join(",");
    if len > SHOWN {
        out.push_str(&format!(" ... ({} more)", len - SHOWN));
    }
    out
}

/// Expands a Slurm hostlist with Slurm itself and checks every name is a node
/// Slurm knows; returns the names and Slurm's nodes as read now. Bad input: 422
/// naming the problem (with Slurm's own words for an unknown node), nothing changed.
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
        Err(SlurmError::Refused { message, .. }) => {
            return Err(AppError::Invalid(format!(
                "bad node list {expr:?}: {message}"
            )));
        }
        Err(e @ SlurmError::TooLarge { .. }) => {
            return Err(AppError::Invalid(format!(
                "bad node list {expr:?}: it expands to more host names than any cluster has ({e})"
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
        // Slurm's own words about the first unknown name, for the admin who
        // knows Slurm's messages better than budgetd's.
        let slurm_says = match unknown.first() {
            Some(n) => scontrol::unknown_node_message(n)
                .await
                .map(|m| format!(" (Slurm: {m})"))
                .unwrap_or_default(),
            None => String::new(),
        };
        return Err(AppError::Invalid(format!(
            "unknown node(s) {}{slurm_says}; Slurm has: {}",
            if unknown.is_empty() {
                expr.to_string()
            } else {
                first_names(unknown.iter().copied(), unknown.len())
            },
            first_names(nodes.keys().map(String::as_str), nodes.len())
        )));
    }
    Ok((names, nodes))
}

/// The error a failed `scontrol update` answers: Slurm's (409 refused, 502
/// unreachable), with `note` (what undoing it did or could not do) appended.
fn update_failed(e: SlurmError, note: &str) -> AppError {
    match AppError::from(e) {
        AppError::SlurmRefused(m) => AppError::SlurmRefused(format!("{m}{note}")),
        AppError::BadGateway(m) => AppError::BadGateway(format!("{m}{note}")),
        other => other,
    }
}

/// Reverts in Slurm what a failed drain of `nodes` applied (`before`: Slurm's
/// nodes read before it, `rows`: budgetd's drains before it). Returns a note
/// for the answer: that nothing changed, or which nodes may be left changed.
async fn undo_drain(
    nodes: &[String],
    before: &BTreeMap<String, NodeInfo>,
    rows: &[DrainRow],
) -> String {
    let after = match scontrol::show_nodes().await {
        Ok(a) => a,
        Err(e) => {
            // Cannot tell what slurmctld applied: name every node it may have drained.
            let maybe: Vec<&str> = nodes
                .iter()
                .filter(|n| before.get(*n).is_some_and(|b| !b.draining()))
                .map(String::as_str)
                .collect();
            tracing::error!(error = %e, nodes = %maybe.join(","), "drain: cannot read Slurm to undo a failed drain");
            return if maybe.is_empty() {
                String::new()
            } else {
                format!(
                    "; budgetd could not check what Slurm applied ({e}): {} may still be drained in Slurm (undrain by hand: scontrol update nodename={} state=resume)",
                    maybe.join(","),
                    maybe.join(",")
                )
            };
        }
    };
    let undo = drains::drain_undo(nodes, before, &after, rows);
    if undo.is_empty() {
        return "; nothing was changed".into();
    }
    let mut left: Vec<String> = Vec::new();
    if !undo.resume.is_empty()
        && let Err(e) = scontrol::resume(&undo.resume).await
    {
        tracing::error!(error = %e, nodes = %undo.resume.join(","), "drain: undoing a failed drain");
        left.push(format!(
            "{} may still be drained in Slurm ({e})",
            undo.resume.join(",")
        ));
    }
    for (reason, ns) in &undo.redrain {
        if let Err(e) = scontrol::drain(ns, reason).await {
            tracing::error!(error = %e, nodes = %ns.join(","), "drain: restoring a drain's reason");
            left.push(format!(
                "the Slurm reason of {} may not read {:?} ({e})",
                ns.join(","),
                scontrol::drain_reason(reason)
            ));
        }
    }
    for (reason, ns) in &undo.reason_back {
        if let Err(e) = scontrol::set_reason(ns, reason).await {
            tracing::error!(error = %e, nodes = %ns.join(","), "drain: restoring a node reason");
            left.push(format!(
                "the Slurm reason of {} may not read {reason:?} ({e})",
                ns.join(",")
            ));
        }
    }
    if left.is_empty() {
        "; nothing was changed (budgetd undid what Slurm had applied)".into()
    } else {
        format!("; undoing it failed: {}", left.join("; "))
    }
}

/// Reads Slurm and computes the status of `drains` (the read becomes the
/// drains' view of Slurm, as a worker pass's does).
async fn live_status(st: &AppState, drains: Vec<DrainRow>) -> AppResult<Vec<DrainStatus>> {
    if drains.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = scontrol::show_nodes().await?;
    let jobs = scontrol::show_jobs().await?;
    let partitions = scontrol::show_partitions().await?;
    let view = st.publish_drain_view(nodes, jobs, partitions);
    let default_min = st
        .with_store(|s| Ok(s.policy().default_min_runtime_secs))
        .await?;
    Ok(drains::status(
        &drains,
        &view.nodes,
        &view.jobs,
        &view.partitions,
        default_min,
        now(),
    ))
}

pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<DrainRequest>,
) -> AppResult<(StatusCode, Json<Vec<DrainStatus>>)> {
    caller.require_admin(&st, "drain nodes")?;
    let reason = check_reason(&req.reason)?;
    // No drain worker pass from reading Slurm's nodes (the state an undo goes back
    // to) until the request is done or undone: the worker would drain in Slurm a node
    // whose row a rollback removes.
    let ops = st.drain_ops.lock().await;
    let (nodes, slurm_before) = resolve_nodes(&req.nodes).await?;
    let actor = caller.actor();
    let t = now();
    let before = st.with_store(|s| drains::list(s)).await?;
    {
        let (nodes, reason) = (nodes.clone(), reason.clone());
        st.with_store(move |s| drains::write(s, &actor, &nodes, Some(&reason), t))
            .await?;
    }
    if let Err(e) = scontrol::drain(&nodes, &reason).await {
        tracing::warn!(error = %e, nodes = %nodes.join(","), by = %caller.actor(), "drain: scontrol failed; undoing the request");
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
        let note = undo_drain(&nodes, &slurm_before, &before).await;
        return Err(update_failed(e, &note));
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
    statuses(&st).await.map(Json)
}

/// `GET /v1/drains`'s answer: every drain with its node's jobs and ETA. From
/// the drain worker's last reading of Slurm, never a Slurm call of its own:
/// any caller may ask as often as it likes. The web view (`crate::ui`)
/// reads it from here.
pub async fn statuses(st: &AppState) -> AppResult<Vec<DrainStatus>> {
    let (rows, default_min) = st
        .with_store(|s| Ok((drains::list(s)?, s.policy().default_min_runtime_secs)))
        .await?;
    let view = st.drain_view();
    drains::status_from_view(&rows, view.as_deref(), default_min, now())
}

/// The 404 for the `nodes` that budgetd has not drained (`rows`), if any.
fn not_drained(nodes: &[String], rows: &[DrainRow]) -> Option<AppError> {
    let missing: Vec<&str> = nodes
        .iter()
        .filter(|n| !rows.iter().any(|d| &d.node == *n))
        .map(String::as_str)
        .collect();
    (!missing.is_empty()).then(|| {
        AppError::NotFound(format!(
            "not drained by budgetd: {}",
            first_names(missing.iter().copied(), missing.len())
        ))
    })
}

pub async fn remove(
    State(st): State<AppState>,
    caller: Caller,
    Path(expr): Path<String>,
) -> AppResult<Json<Undrained>> {
    caller.require_admin(&st, "undrain nodes")?;
    // No drain worker pass between reading Slurm's nodes, the resume and
    // forgetting the drain (it would drain the resumed node again).
    let _ops = st.drain_ops.lock().await;
    let rows = st.with_store(|s| drains::list(s)).await?;
    // Only budgetd's own drains can be undrained here, and their names are
    // stored expanded: a list naming any other node, or one budgetd cannot
    // read itself (Slurm's grammar), names no drain of budgetd's and is
    // answered without asking Slurm anything.
    match hostlist::expand(expr.trim()) {
        Ok(names) => {
            if let Some(missing) = not_drained(&names, &rows) {
                return Err(missing);
            }
        }
        Err(e) => {
            return Err(AppError::NotFound(format!(
                "not drained by budgetd: {e} (GET /v1/drains lists the drains)"
            )));
        }
    }
    let (nodes, slurm_before) = resolve_nodes(&expr).await?;
    if let Some(missing) = not_drained(&nodes, &rows) {
        return Err(missing);
    }
    // Only nodes Slurm holds drained are resumed: Slurm refuses to resume one it
    // does not ("Invalid node state specified"), e.g. one resumed by hand, and
    // forgetting its drain is all there is left to do.
    let resume: Vec<String> = nodes
        .iter()
        .filter(|n| slurm_before.get(*n).is_some_and(NodeInfo::draining))
        .cloned()
        .collect();
    if !resume.is_empty()
        && let Err(e) = scontrol::resume(&resume).await
    {
        tracing::warn!(error = %e, nodes = %resume.join(","), by = %caller.actor(), "undrain: scontrol failed; undoing the request");
        // slurmctld resumes node by node: drain again those it resumed
        // before it failed. The rows stay, so the drain worker also drains
        // again any node this cannot.
        let note = match scontrol::show_nodes().await {
            Err(r) => format!(
                "; budgetd could not check what Slurm applied ({r}): the drain stays, and budgetd drains any of {} Slurm resumed again once it reaches Slurm",
                resume.join(",")
            ),
            Ok(after) => {
                let mut left = Vec::new();
                for (reason, ns) in drains::resume_undo(&resume, &after, &rows) {
                    if let Err(r) = scontrol::drain(&ns, &reason).await {
                        left.push(format!("{} ({r})", ns.join(",")));
                    }
                }
                if left.is_empty() {
                    "; nothing was changed".into()
                } else {
                    format!(
                        "; the drain stays, and budgetd drains again each second the nodes Slurm resumed: {}",
                        left.join("; ")
                    )
                }
            }
        };
        return Err(update_failed(e, &note));
    }
    let (n2, actor, t) = (nodes.clone(), caller.actor(), now());
    st.with_store(move |s| drains::write(s, &actor, &n2, None, t))
        .await?;
    tracing::info!(nodes = %nodes.join(","), by = %caller.actor(), "undrained");
    Ok(Json(Undrained { undrained: nodes }))
}
