//! What every route may answer: the liveness document (`GET /v1/health`)
//! and the error body of every 4xx/5xx.

use serde::{Deserialize, Serialize};

use crate::reports::LineError;

/// `GET /v1/health` (no authentication).
/// (Fields in alphabetical order: the JSON keys keep the order they always had.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Health {
    /// Store generation: bumped by every committed change.
    pub generation: u64,
    pub schema_version: i64,
    pub started_at: i64,
    /// `ok`.
    pub status: String,
    /// budgetd's version.
    pub version: String,
}

/// The body of every error answer: `{"error": "..."}`, plus `details` where
/// a request failed item by item (the bad lines of an import).
/// (Fields in alphabetical order: the JSON keys keep the order they always had.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorBody {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<ErrorDetails>,
    pub error: String,
}

/// Per-item details of an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ErrorDetails {
    /// Lines of a sacct import that cannot be imported.
    #[serde(default)]
    pub invalid: Vec<LineError>,
}
