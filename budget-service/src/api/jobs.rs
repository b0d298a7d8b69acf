//! Handlers for the ledger side: plugin snapshot and sync, sacct import,
//! usage and fair-share reports, job explanations and metrics.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use budget_protocol::reports::{ImportReport, ShareReport, UsageReport};
use budget_protocol::service::ErrorDetails;
use budget_protocol::why::Why;
use budget_protocol::{JobSync, SyncOutcome};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, ApiText, query_time};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::report;
use crate::sacct;
use crate::state::AppState;
use crate::store::Change;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AtQuery {
    #[serde(default)]
    at: Option<String>,
}

pub async fn share(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<AtQuery>,
) -> AppResult<Json<ShareReport>> {
    let at = query_time(q.at.as_deref(), "at", now())?;
    let _permit = st.expensive_read(&caller).await?;
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        Ok(Json(report::share(s, at, &scope)))
    })
    .await
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageQuery {
    #[serde(default)]
    by: Option<String>,
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    at: Option<String>,
}

pub async fn usage(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<UsageQuery>,
) -> AppResult<Json<UsageReport>> {
    let by_user = match q.by.as_deref() {
        None | Some("account") => false,
        Some("user") => true,
        Some(o) => {
            return Err(AppError::BadRequest(format!(
                "by must be account or user, got {o:?}"
            )));
        }
    };
    let at = query_time(q.at.as_deref(), "at", now())?;
    let since = match q.since.as_deref() {
        Some(s) => Some(query_time(Some(s), "since", 0)?),
        None => None,
    };
    if since.is_some_and(|s| s > at) {
        return Err(AppError::BadRequest("since must not be after at".into()));
    }
    let _permit = st.expensive_read(&caller).await?;
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        let from = since.unwrap_or(at - s.policy().window_secs);
        Ok(Json(report::usage(s, from, at, by_user, &scope)))
    })
    .await
}

/// Strips quotes and a weak marker from an `If-None-Match` value.
fn etag_matches(headers: &HeaderMap, version: &str) -> bool {
    headers
        .get_all(header::IF_NONE_MATCH)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|v| v.trim().trim_start_matches("W/").trim_matches('"'))
        .any(|v| v == version || v == "*")
}

pub async fn snapshot(
    State(st): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
) -> AppResult<Response> {
    caller.require_controller(&st, "read the plugin snapshot")?;
    let snap = st.snapshot(now()).await?;
    let etag = format!("\"{}\"", snap.snapshot.version);
    st.counters
        .last_snapshot_fetch_at
        .store(u64::try_from(now()).unwrap_or(0), Ordering::Relaxed);
    super::site::record_fetch(&st, &headers, snap.generation, now());
    if etag_matches(&headers, &snap.snapshot.version) {
        st.counters
            .snapshots_not_modified
            .fetch_add(1, Ordering::Relaxed);
        return Ok((StatusCode::NOT_MODIFIED, [(header::ETAG, etag)]).into_response());
    }
    st.counters.snapshots_served.fetch_add(1, Ordering::Relaxed);
    Ok((
        [
            (header::ETAG, etag),
            (header::CONTENT_TYPE, "application/json".to_string()),
        ],
        snap.body.clone(),
    )
        .into_response())
}

pub async fn sync(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(batch): ApiJson<JobSync>,
) -> AppResult<Json<SyncOutcome>> {
    caller.require_controller(&st, "sync job state")?;
    let t = now();
    let out = st.with_store_controller(move |s| s.sync(&batch, t)).await?;
    let c = &st.counters;
    c.syncs.fetch_add(1, Ordering::Relaxed);
    c.sync_runs_inserted
        .fetch_add(out.inserted, Ordering::Relaxed);
    c.sync_runs_updated
        .fetch_add(out.updated, Ordering::Relaxed);
    c.sync_runs_unchanged
        .fetch_add(out.unchanged, Ordering::Relaxed);
    c.last_sync_at
        .store(u64::try_from(t).unwrap_or(0), Ordering::Relaxed);
    for r in out.refused.iter().take(10) {
        tracing::warn!(
            job_id = r.job_id,
            run = r.run,
            "sync: run refused: {}",
            r.error
        );
    }
    if out.refused.len() > 10 {
        tracing::warn!("sync: {} more runs refused", out.refused.len() - 10);
    }
    Ok(Json(out))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ImportQuery {
    #[serde(default)]
    skip_invalid: Option<bool>,
    /// IANA zone of sacct's civil times (default: the service's).
    #[serde(default)]
    tz: Option<String>,
}

pub async fn import(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ImportQuery>,
    body: ApiText,
) -> AppResult<Json<ImportReport>> {
    caller.require_admin(&st, "import usage")?;
    let tz = budget_protocol::time::zone(q.tz.as_deref()).map_err(AppError::BadRequest)?;
    let skip_invalid = q.skip_invalid.unwrap_or(false);
    st.with_store(move |s| {
        let t = now();
        let parsed = {
            let tree = s.tree();
            sacct::parse(body.text(), &tz, &|a| tree.account(a).is_some(), t)
                .map_err(|e| AppError::Invalid(format!("line {}: {}; nothing imported", e.line, e.error)))?
        };
        if !parsed.invalid.is_empty() && !skip_invalid {
            let shown: Vec<String> =
                parsed.invalid.iter().take(20).map(|e| format!("line {}: {}", e.line, e.error)).collect();
            return Err(AppError::InvalidWithDetails {
                message: format!(
                    "{} invalid line(s); nothing imported (--skip-invalid imports the valid lines): {}{}",
                    parsed.invalid.len(),
                    shown.join("; "),
                    if parsed.invalid.len() > 20 { "; ..." } else { "" }
                ),
                details: ErrorDetails {
                    invalid: parsed.invalid,
                },
            });
        }
        let (lines, skipped_invalid) = (parsed.lines, parsed.invalid.len());
        let actor = caller.actor();
        let out = s.ingest_audited(&parsed.records, "import", true, |o| {
            let summary = serde_json::json!({
                "lines": lines, "inserted": o.inserted, "updated": o.updated,
                "unchanged": o.unchanged, "invalid_skipped": skipped_invalid,
                "conflicts": o.refused.len(),
            });
            Some(Change::new(&actor, t, "usage.import", "ledger", None, Some(summary)))
        })?;
        let report = ImportReport {
            lines: parsed.lines,
            runs: parsed.records.len(),
            inserted: out.inserted,
            updated: out.updated,
            unchanged: out.unchanged,
            skipped: parsed.skipped,
            invalid: parsed.invalid,
            conflicts: out.refused,
        };
        Ok(Json(report))
    })
    .await
}

pub async fn why(
    State(st): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> AppResult<Json<Why>> {
    let job_id: u32 = id
        .parse()
        .map_err(|_| AppError::BadRequest(format!("job id must be a number, got {id:?}")))?;
    let t = now();
    let _permit = st.expensive_read(&caller).await?;
    let snap = st.snapshot(t).await?;
    let st2 = st.clone();
    st.with_store(move |s| {
        let runs = s.ledger().job_runs(job_id);
        let Some(job) = runs
            .iter()
            .rfind(|r| r.run < crate::sacct::ARRAY_RUN_BASE)
            .or(runs.last())
        else {
            return Err(AppError::NotFound(format!(
                "job {job_id} is not in the ledger"
            )));
        };
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        // Jobs of the accounts the caller belongs to or coordinates, not
        // those of ancestors it may only read for the rank path.
        let sees = |r: &crate::ledger::RunRecord| {
            caller.reads_all() || caller.user == r.user || scope.can_see_jobs_of(&r.account)
        };
        if !sees(job) {
            return Err(caller.refuse(&st2, &format!("explain job {job_id}")));
        }
        let mut why = report::why(s, &snap.snapshot, job, t, &sees);
        why.idle = crate::idle::job_flag(s, job_id, t, st2.config.agent_stale_secs);
        Ok(Json(why))
    })
    .await
}

pub async fn metrics(State(st): State<AppState>, caller: Caller) -> AppResult<Response> {
    caller.require_reader(&st, "read metrics")?;
    let t = now();
    let snap = st.snapshot(t).await?;
    let st2 = st.clone();
    let text = st
        .with_store(move |s| Ok(crate::metrics::render(s, &st2, &snap, t)))
        .await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response())
}
