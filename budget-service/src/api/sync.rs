//! Job state from slurmctld's priority plugin: `POST /v1/sync/jobs` (and the
//! pending queue of `site_factor/budget` in shadow mode, handed to
//! `api::shadow`).

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use budget_protocol::{JobSync, SyncOutcome};

use super::ApiJson;
use crate::auth::Caller;
use crate::clock::now;
use crate::error::AppResult;
use crate::loglimit;
use crate::state::AppState;

pub async fn sync(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(batch): ApiJson<JobSync>,
) -> AppResult<Json<SyncOutcome>> {
    caller.require_controller(&st, "sync job state")?;
    let t = now();
    let mut batch = batch;
    if let Some(queue) = batch.queue.take() {
        super::shadow::sample(&st, queue, t).await?;
    }
    let (out, contradicted) = st
        .with_store_controller(move |s| s.sync_noting_contradictions(&batch, t))
        .await?;
    let c = &st.counters;
    c.syncs.fetch_add(1, Ordering::Relaxed);
    c.sync_runs_inserted
        .fetch_add(out.inserted, Ordering::Relaxed);
    c.sync_runs_updated
        .fetch_add(out.updated, Ordering::Relaxed);
    c.sync_runs_unchanged
        .fetch_add(out.unchanged, Ordering::Relaxed);
    c.sync_runs_contradicted
        .fetch_add(contradicted.len() as u64, Ordering::Relaxed);
    if let Some(first) = contradicted.first()
        && let Some(left_out) = loglimit::SYNC_CONTRADICTED.allow()
    {
        // The controller still runs a job the ledger has ended (an import's
        // end, most likely): the end is kept, so the job is no longer
        // charged while it runs. Rate-limited: the plugin repeats running
        // jobs in every sync.
        tracing::warn!(
            job_id = first.job_id,
            run = first.run,
            ended_at = first.end,
            in_this_sync = contradicted.len(),
            earlier_left_out = left_out,
            "sync: the controller reports running a run the ledger ended (by an import or \
             a close of a run Slurm had stopped reporting); the stored end is kept"
        );
    }
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
