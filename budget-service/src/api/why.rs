//! A job's explanation: `GET /v1/jobs/{id}/why`.

use axum::Json;
use axum::extract::{Path, State};
use budget_protocol::why::Why;

use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::ledger::RunRecord;
use crate::state::AppState;
use crate::store::Store;
use crate::why::Explainer;
use budget_protocol::idle::FlaggedJob;

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
    let partitions = st.partitions();
    let st2 = st.clone();
    st.with_store(move |s| {
        let runs = s.ledger().job_runs(job_id);
        let Some(job) = explained_run(&runs) else {
            return Err(AppError::NotFound(format!(
                "job {job_id} is not in the ledger"
            )));
        };
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        if !sees(&caller, &scope, job) {
            return Err(caller.refuse(&st2, &format!("explain job {job_id}")));
        }
        let explainer = Explainer::new(s, &snap.snapshot, &partitions, t);
        let flagged = flagged_now(s, t, st2.config.agent_stale_secs);
        Ok(Json(explain_for(
            &explainer, &caller, &scope, job, &flagged,
        )))
    })
    .await
}

/// The run of a job that `why` explains: its latest run that is not an
/// array element's, else its latest.
pub fn explained_run(runs: &[RunRecord]) -> Option<&RunRecord> {
    runs.iter()
        .rfind(|r| r.run < crate::sacct::ARRAY_RUN_BASE)
        .or(runs.last())
}

/// Whether `caller` may see job run `r`: readers everything, anyone their
/// own jobs and those of the accounts they belong to or coordinate, not
/// those of ancestors they may only read for the rank path.
pub fn sees(caller: &Caller, scope: &Scope, r: &RunRecord) -> bool {
    caller.reads_all() || caller.user == r.user || scope.can_see_jobs_of(&r.account)
}

/// The jobs flagged idle at `t` (none when the idle ledger cannot be
/// read: `why` answers without its idle line then).
pub fn flagged_now(s: &Store, t: i64, stale: i64) -> Vec<FlaggedJob> {
    crate::idle::flagged(s, t, stale).unwrap_or_default()
}

/// `GET /v1/jobs/{id}/why`'s answer for a `job` that `caller` may see
/// ([`sees`]) at the explainer's instant, other jobs named only if
/// `caller` may see them; `flagged` from [`flagged_now`] at that instant.
/// The web view's queue (`crate::ui`) reads it from here, one explainer
/// for all its jobs.
pub fn explain_for(
    explainer: &Explainer<'_>,
    caller: &Caller,
    scope: &Scope,
    job: &RunRecord,
    flagged: &[FlaggedJob],
) -> Why {
    let visible = |r: &RunRecord| sees(caller, scope, r);
    let mut why = explainer.explain(job, &visible);
    why.idle = flagged.iter().find(|f| f.job_id == job.job_id).cloned();
    why
}
