//! The sacct usage import: `POST /v1/usage/import` (text body).

use axum::Json;
use axum::extract::State;
use budget_protocol::reports::ImportReport;
use budget_protocol::service::ErrorDetails;
use serde::Deserialize;

use super::{ApiQuery, ApiText};
use crate::auth::Caller;
use crate::clock::now;
use crate::error::{AppError, AppResult};
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
    st.with_store(move |s| {
        let t = now();
        let parsed = {
            let tree = s.tree();
            sacct::parse(body.text(), &tz, &|a| tree.account(a).is_some(), t)
                .map_err(|e| AppError::Invalid(format!("line {}: {}; nothing imported", e.line, e.error)))?
        };
        if !parsed.invalid.is_empty() && !skip_invalid {
            let shown: Vec<String> =
                parsed.invalid.iter().take(20).map(|e| format!("line {}: {}", e.line, e.error)).collect();
            return Err(AppError::InvalidWithDetails {
                message: format!(
                    "{} invalid line(s); nothing imported (--skip-invalid imports the valid lines): {}{}",
                    parsed.invalid.len(),
                    shown.join("; "),
                    if parsed.invalid.len() > 20 { "; ..." } else { "" }
                ),
                details: ErrorDetails {
                    invalid: parsed.invalid,
                },
            });
        }
        let (lines, skipped_invalid) = (parsed.lines, parsed.invalid.len());
        let actor = caller.actor();
        let out = s.ingest_audited(&parsed.records, "import", true, |o| {
            let summary = serde_json::json!({
                "lines": lines, "inserted": o.inserted, "updated": o.updated,
                "unchanged": o.unchanged, "invalid_skipped": skipped_invalid,
                "conflicts": o.refused.len(),
            });
            Some(Change::new(&actor, t, "usage.import", "ledger", None, Some(summary)))
        })?;
        let report = ImportReport {
            lines: parsed.lines,
            runs: parsed.records.len(),
            inserted: out.inserted,
            updated: out.updated,
            unchanged: out.unchanged,
            skipped: parsed.skipped,
            invalid: parsed.invalid,
            conflicts: out.refused,
        };
        Ok(Json(report))
    })
    .await
}
