//! `/v1/preemptions`: the preemption record. `preempt/budget`'s background thread
//! posts (the controller only, idempotent by `(victim, run)`); readers list and total it.

use axum::Json;
use axum::extract::State;
use budget_protocol::preemption::{PreemptionRecord, PreemptionReport, RecordOutcome};
use serde::Deserialize;

use super::{ApiJson, ApiQuery, query_time};
use crate::auth::Caller;
use crate::error::AppResult;
use crate::preemptions;
use crate::state::AppState;
use crate::store::Store;

pub async fn create(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(p): ApiJson<PreemptionRecord>,
) -> AppResult<Json<RecordOutcome>> {
    caller.require_controller(&st, "record preemptions")?;
    let inserted = st
        .with_store(move |s| preemptions::record(s, &p, "plugin"))
        .await?;
    Ok(Json(RecordOutcome { inserted }))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    #[serde(default)]
    since: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> AppResult<Json<PreemptionReport>> {
    caller.require_reader(&st, "read the preemption record")?;
    let since = query_time(q.since.as_deref(), "since", 0)?;
    st.with_store(move |s| report_since(s, since).map(Json))
        .await
}

/// `GET /v1/preemptions`'s answer (readers only: check first): every
/// preemption since `since` and the totals per account. The web view
/// (`crate::ui`) reads it from here.
pub fn report_since(s: &Store, since: i64) -> AppResult<PreemptionReport> {
    let rows = preemptions::list(s, since)?;
    Ok(PreemptionReport {
        since,
        by_account: preemptions::by_account(&rows),
        rows,
    })
}
