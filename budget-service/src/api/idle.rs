//! `/v1/agent/report` and `/v1/idle` (docs/design.md §8): node agents post their
//! reports (admins over the socket, e.g. the agent as root on the controller
//! host; `role = "agent"` tokens over TCP from GPU nodes, each for the
//! nodes its token lists); admins and readers
//! read every flagged job, coordinators those of their subtrees, users their
//! own jobs and those of the accounts they belong to.

use axum::Json;
use axum::extract::State;
use budget_protocol::AgentReport;
use budget_protocol::idle::{IdleReport, ReportOutcome};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, query_range};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::AppResult;
use crate::idle;
use crate::state::AppState;
use crate::store::Store;

pub async fn report(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(r): ApiJson<AgentReport>,
) -> AppResult<Json<ReportOutcome>> {
    // Bound to the node: an agent token reports for the nodes it lists only.
    caller.require_agent_for(&st, &r.node, "post node-agent reports")?;
    let t = now();
    let (out, off_node) = st
        .with_store(move |s| idle::ingest_noting_off_node(s, &r, t))
        .await?;
    st.counters
        .agent_jobs_off_node
        .fetch_add(off_node as u64, std::sync::atomic::Ordering::Relaxed);
    Ok(Json(out))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdleQuery {
    /// Start of the GPU-hours interval (default: one window before `at`).
    #[serde(default)]
    since: Option<String>,
    /// End of the GPU-hours interval (default: now).
    #[serde(default)]
    at: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<IdleQuery>,
) -> AppResult<Json<IdleReport>> {
    let t = now();
    let (since, at) = query_range(q.since.as_deref(), q.at.as_deref(), "at", t)?;
    let _permit = st.expensive_read(&caller).await?;
    let stale = st.config.agent_stale_secs;
    st.with_store(move |s| report_for(s, &caller, t, since, at, stale).map(Json))
        .await
}

/// `GET /v1/idle`'s answer for `caller` once admitted: idle GPU-hours in
/// `[since, at]` (default: one window before `at`), jobs flagged now, only
/// those `caller` may see. The web view (`crate::ui`) reads it from here.
pub fn report_for(
    s: &Store,
    caller: &Caller,
    now: i64,
    since: Option<i64>,
    at: i64,
    stale: i64,
) -> AppResult<IdleReport> {
    let scope = Scope::of(caller, s.tree(), s.coordinators());
    let from = since.unwrap_or(at - s.policy().window_secs);
    let visible = |account: Option<&str>, user: Option<&str>| {
        caller.reads_all()
            || user == Some(caller.user.as_str())
            || account.is_some_and(|a| scope.can_see_jobs_of(a))
    };
    idle::report(s, now, from, at, stale, &visible, caller.reads_all())
}
