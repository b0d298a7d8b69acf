//! Prometheus metrics: `GET /metrics` (the text is `crate::metrics`').

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};

use crate::auth::Caller;
use crate::clock::now;
use crate::error::AppResult;
use crate::state::AppState;

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
