//! The plugin snapshot for slurmctld's plugins: `GET /v1/snapshot`, with
//! its ETag (304 when unchanged).

use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::clock::now;
use crate::error::AppResult;
use crate::state::AppState;

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
