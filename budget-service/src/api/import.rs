//! The sacct usage import: `POST /v1/usage/import` (text body).
//!
//! A large file must never make the controller's sync or snapshot wait behind
//! it (the plugins give up after their timeout, 1 s by default). So the file is
//! parsed and every line checked off the store lock, against a copy of the
//! account tree; a file with bad lines changes nothing (unless `skip_invalid`).
//! The records are then stored in batches of `import_batch_runs`, each batch
//! one transaction with its own audit row, taking and releasing the store lock
//! per batch: a controller operation waits for one batch at most (it goes
//! ahead of the next one, `AppState::with_store_controller`).
//!
//! An import runs on a task of its own: a client that goes away does not stop
//! it half way. If budgetd dies during an import, the batches committed before
//! are kept (each with its audit row) and the rest are not; the client sees
//! its connection close without an answer. Importing the same file again
//! completes it and charges nothing twice: a run's key comes from the file
//! alone (job id, run numbered by Start), so the stored batches' runs merge as
//! "unchanged" and only the missing ones are inserted.

use axum::Json;
use axum::extract::State;
use budget_protocol::SyncOutcome;
use budget_protocol::reports::ImportReport;
use budget_protocol::service::ErrorDetails;
use jiff::tz::TimeZone;
use serde::Deserialize;

use super::{ApiQuery, ApiText};
use crate::auth::Caller;
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::ledger::RunRecord;
use crate::sacct;
use crate::state::AppState;
use crate::store::Change;

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
    let actor = caller.actor();
    let job = tokio::spawn(run(st, actor, body, tz, skip_invalid));
    let report = job
        .await
        .map_err(|e| AppError::Internal(format!("import failed: {e}")))??;
    Ok(Json(report))
}

/// Parses and checks the whole file off the store lock, then stores it batch by batch.
async fn run(
    st: AppState,
    actor: String,
    body: ApiText,
    tz: TimeZone,
    skip_invalid: bool,
) -> AppResult<ImportReport> {
    let _one_at_a_time = st.imports.lock().await;
    let t = now();
    let tree = st.with_store(|s| Ok(s.tree().clone())).await?;
    let parsed = tokio::task::spawn_blocking(move || {
        sacct::parse(body.text(), &tz, &|a| tree.account(a).is_some(), t)
    })
    .await
    .map_err(|e| AppError::Internal(format!("import parse failed: {e}")))?
    .map_err(|e| AppError::Invalid(format!("line {}: {}; nothing imported", e.line, e.error)))?;
    if !parsed.invalid.is_empty() && !skip_invalid {
        let shown: Vec<String> = parsed
            .invalid
            .iter()
            .take(20)
            .map(|e| format!("line {}: {}", e.line, e.error))
            .collect();
        return Err(AppError::InvalidWithDetails {
            message: format!(
                "{} invalid line(s); nothing imported (--skip-invalid imports the valid lines): {}{}",
                parsed.invalid.len(),
                shown.join("; "),
                if parsed.invalid.len() > 20 {
                    "; ..."
                } else {
                    ""
                }
            ),
            details: ErrorDetails {
                invalid: parsed.invalid,
            },
        });
    }
    let sacct::Parsed {
        lines,
        records,
        invalid,
        skipped,
    } = parsed;
    let runs = records.len();
    let batches = into_batches(records, st.config.import_batch_runs);
    let count = batches.len();
    let mut total = SyncOutcome::default();
    let mut first = 0;
    for (k, batch) in batches.into_iter().enumerate() {
        let actor = actor.clone();
        let invalid_skipped = invalid.len();
        let len = batch.len();
        let out = st
            .with_store(move |s| {
                s.import_batch(&batch, first, |o| {
                    let summary = serde_json::json!({
                        "lines": lines, "inserted": o.inserted, "updated": o.updated,
                        "unchanged": o.unchanged, "invalid_skipped": invalid_skipped,
                        "conflicts": o.refused.len(), "batch": k + 1, "batches": count,
                        "runs": len,
                    });
                    Some(Change::new(
                        &actor,
                        t,
                        "usage.import",
                        "ledger",
                        None,
                        Some(summary),
                    ))
                })
            })
            .await
            .map_err(|e| match e {
                e if k == 0 => e,
                e => AppError::Internal(format!(
                    "import stopped at batch {} of {count}: {e}; batches 1-{k} ({first} of {runs} \
                     runs) are stored: import the same file again to complete it (stored runs \
                     count as unchanged)",
                    k + 1
                )),
            })?;
        total.inserted += out.inserted;
        total.updated += out.updated;
        total.unchanged += out.unchanged;
        total.refused.extend(out.refused);
        first += len;
    }
    Ok(ImportReport {
        lines,
        runs,
        inserted: total.inserted,
        updated: total.updated,
        unchanged: total.unchanged,
        skipped,
        invalid,
        conflicts: total.refused,
    })
}

/// `records` cut into batches of at most `size` (at least one record each;
/// no batch for no record).
fn into_batches(records: Vec<RunRecord>, size: usize) -> Vec<Vec<RunRecord>> {
    let size = size.max(1);
    let mut out: Vec<Vec<RunRecord>> = Vec::with_capacity(records.len().div_ceil(size));
    for rec in records {
        match out.last_mut() {
            Some(b) if b.len() < size => b.push(rec),
            _ => {
                let mut b = Vec::with_capacity(size.min(1 << 16));
                b.push(rec);
                out.push(b);
            }
        }
    }
    out
}
