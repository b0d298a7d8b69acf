//! Shadow mode: the queue samples a sync carries (`api::sync` hands them here)
//! and `GET /v1/shadow`, the report over a window, scoped like the other
//! reports: readers see everything, others the jobs and accounts they may see.

use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use budget_protocol::shadow::{QueueOrder, ShadowReport};
use serde::Deserialize;

use super::{ApiQuery, query_range};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::AppResult;
use crate::shadow::{self, Visibility};
use crate::state::AppState;

/// Records `queue` as a sample at `t` unless one was taken less than
/// `shadow_sample_secs` ago (the plugin sends one every pass).
pub async fn sample(st: &AppState, queue: QueueOrder, t: i64) -> AppResult<()> {
    let c = &st.counters;
    let last = i64::try_from(c.shadow_last_sample_at.load(Ordering::Relaxed)).unwrap_or(0);
    if last > 0 && t - last < st.config.shadow_sample_secs {
        return Ok(());
    }
    c.shadow_last_sample_at
        .store(u64::try_from(t).unwrap_or(0), Ordering::Relaxed);
    let snap = st.snapshot(t).await?;
    let partitions = st.partitions();
    let rec = st
        .with_store_controller(move |s| shadow::record(s, &snap.snapshot, &partitions, &queue, t))
        .await?;
    c.shadow_samples.fetch_add(1, Ordering::Relaxed);
    c.shadow_preemptions
        .fetch_add(rec.preemptions.len() as u64, Ordering::Relaxed);
    for p in &rec.preemptions {
        tracing::info!(
            victim = p.victim,
            run = p.victim_run,
            preemptor = p.preemptor,
            lost_gpu_hours = p.lost_gpu_hours,
            "shadow: the rule would preempt job {} for job {} (not done: shadow mode)",
            p.victim,
            p.preemptor
        );
    }
    Ok(())
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShadowQuery {
    #[serde(default)]
    since: Option<String>,
    #[serde(default)]
    at: Option<String>,
}

pub async fn report(
    State(st): State<AppState>,
    caller: Caller,
    ApiQuery(q): ApiQuery<ShadowQuery>,
) -> AppResult<Json<ShadowReport>> {
    let (since, at) = query_range(q.since.as_deref(), q.at.as_deref(), "at", now())?;
    let _permit = st.expensive_read(&caller).await?;
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        let job = |account: &str, user: &str| {
            caller.reads_all() || caller.user == user || scope.can_see_jobs_of(account)
        };
        let account = |a: &str| scope.can_read(a);
        let see = Visibility {
            job: &job,
            account: &account,
        };
        let from = since.unwrap_or(at - s.policy().window_secs);
        shadow::report(s, from, at, &see).map(Json)
    })
    .await
}
