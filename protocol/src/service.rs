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

/// Path of the backup endpoint (admin only).
pub const BACKUP_PATH: &str = "/v1/backup";

/// `POST /v1/backup`: where budgetd writes a consistent copy of its database.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BackupRequest {
    /// Absolute path on budgetd's host; budgetd (its user) writes the file.
    pub path: String,
    /// Replace an existing file (default: refuse).
    #[serde(default)]
    pub overwrite: bool,
}

/// What a backup holds: the state at the instant it was taken.
/// (Fields in alphabetical order.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackupReport {
    /// Id of the last audit row in the copy (0: none).
    pub audit_id: i64,
    /// Size of the file in bytes.
    pub bytes: u64,
    /// Store generation of the copy: the backup holds every change up to it, none after.
    pub generation: u64,
    /// The file written.
    pub path: String,
    /// Rows of the run ledger in the copy.
    pub runs: i64,
    pub schema_version: i64,
    /// Unix time the copy was taken.
    pub taken_at: i64,
    /// Milliseconds the copy took.
    pub took_ms: u64,
}

/// Path of the plugins' state (`GET`, any authenticated caller).
pub const PLUGINS_PATH: &str = "/v1/plugins";

/// One plugin's last snapshot fetch, as budgetd saw it.
/// (Fields in alphabetical order.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginFetch {
    /// Unix time of the last fetch (answered 200 or 304).
    pub fetched_at: i64,
    /// Store generation of the snapshot the plugin holds since that fetch.
    pub generation: u64,
    /// How often the plugin fetches, in seconds, when it says so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period_secs: Option<u64>,
    /// The plugin (`job_submit/budget`, ...; `unnamed` for clients that do not say).
    pub plugin: String,
}

/// `GET /v1/plugins`: which generation the controller's plugins hold, so a
/// client can tell when a change is in effect in slurmctld.
/// (Fields in alphabetical order.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginsState {
    /// The lowest generation among `plugins` (0: none fetched yet): every change up to
    /// it is in effect in slurmctld.
    pub applied_generation: u64,
    /// The store's generation now.
    pub generation: u64,
    /// Fetches older than this many seconds are not counted (a plugin that stopped
    /// fetching, e.g. a controller that was replaced, must not hold back the rest).
    pub horizon_secs: i64,
    /// Each plugin seen within the horizon, by name.
    pub plugins: Vec<PluginFetch>,
}

/// Header a plugin's snapshot request names itself with: `NAME` or `NAME period=SECS`.
pub const PLUGIN_HEADER: &str = "X-Budget-Plugin";
