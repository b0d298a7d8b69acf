//! A job's explanation: `GET /v1/jobs/{id}/why`.

use axum::Json;
use axum::extract::{Path, State};
use budget_protocol::why::Why;

use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::state::AppState;

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
        let mut why = crate::why::explain(s, &snap.snapshot, job, t, &sees);
        why.idle = crate::idle::job_flag(s, job_id, t, st2.config.agent_stale_secs);
        Ok(Json(why))
    })
    .await
}
