//! `GET /v1/runs`: the ledger's runs over a time range with what a replay needs
//! (submit time, size, time limit, contract, free tier, checkpoint), the
//! cluster's GPUs and the window; read by `budgetctl whatif`. Scoped as `why`
//! is: admins and readers see every run, coordinators those of their subtrees,
//! users their own and those of the accounts they belong to; the runs left out
//! are counted (`hidden`), not named.

use axum::Json;
use axum::extract::State;
use budget_protocol::runs::{LedgerRun, RunsReport};
use serde::Deserialize;

use super::{ApiQuery, query_range};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::ledger::RunRecord;
use crate::state::AppState;
use crate::store::Store;

/// The longest range one request may ask for (a year and a day).
pub const MAX_RANGE_SECS: i64 = 366 * 86_400;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunsQuery {
    /// Start of the range (default: one window before `until`).
    #[serde(default)]
    since: Option<String>,
    /// End of the range (default: now).
    #[serde(default)]
    until: Option<String>,
}

pub async fn list(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<RunsQuery>,
) -> AppResult<Json<RunsReport>> {
    let (since, until) = query_range(q.since.as_deref(), q.until.as_deref(), "until", now())?;
    if since.is_some_and(|s| until - s > MAX_RANGE_SECS) {
        return Err(AppError::BadRequest(format!(
            "the range may span at most {MAX_RANGE_SECS} s (366 days)"
        )));
    }
    let _permit = st.expensive_read(&caller).await?;
    let cluster_gpus = st.cluster_gpus();
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        let since = since.unwrap_or(until - s.policy().window_secs);
        Ok(Json(report_for(
            s,
            &caller,
            &scope,
            since,
            until,
            cluster_gpus,
        )))
    })
    .await
}

/// The runs `caller` may see in `[since, until]`, as `GET /v1/runs` answers
/// them (the web view's what-if hands the same report to `budgetctl whatif`).
pub fn report_for(
    s: &Store,
    caller: &Caller,
    scope: &Scope,
    since: i64,
    until: i64,
    cluster_gpus: Option<u32>,
) -> RunsReport {
    let all = s.ledger().overlapping(since, until);
    let total = all.len();
    let runs: Vec<LedgerRun> = all
        .into_iter()
        .filter(|r| super::why::sees(caller, scope, r))
        .map(wire)
        .collect();
    RunsReport {
        since,
        until,
        window_secs: s.policy().window_secs,
        cluster_gpus,
        hidden: (total - runs.len()) as u64,
        runs,
    }
}

fn wire(r: RunRecord) -> LedgerRun {
    LedgerRun {
        job_id: r.job_id,
        run: r.run,
        submit: r.submit,
        rerun: r.rerun,
        account: r.account,
        user: r.user,
        gpus: r.gpus,
        gpu_type: r.gpu_type,
        start: r.start,
        end: r.end,
        state: r.state,
        free_tier: r.free_tier,
        min_runtime_secs: r.min_runtime_secs,
        time_limit_secs: r.time_limit_secs,
        checkpoint_secs: r.checkpoint_secs,
        nodes: r.nodes,
    }
}
