//! Usage and fair-share reports: `GET /v1/share`, `GET /v1/usage`.

use axum::Json;
use axum::extract::State;
use budget_protocol::reports::{ShareReport, UsageReport};
use serde::Deserialize;

use super::{ApiQuery, query_range, query_time};
use crate::auth::{Caller, Scope};
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::report;
use crate::state::AppState;

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
    let (since, at) = query_range(q.since.as_deref(), q.at.as_deref(), "at", now())?;
    let _permit = st.expensive_read(&caller).await?;
    st.with_store(move |s| {
        let scope = Scope::of(&caller, s.tree(), s.coordinators());
        let from = since.unwrap_or(at - s.policy().window_secs);
        Ok(Json(report::usage(s, from, at, by_user, &scope)))
    })
    .await
}
