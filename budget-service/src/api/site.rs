//! Handlers for running budgetd at a site: `POST /v1/backup` (a consistent copy
//! of the database, `backup.rs`) and `GET /v1/plugins` (which generation the
//! controller's plugins hold, so a client can tell when a change is in effect in
//! slurmctld).

use std::path::PathBuf;
use std::sync::atomic::Ordering;

use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use budget_protocol::service::{
    BackupReport, BackupRequest, PLUGIN_HEADER, PluginFetch, PluginsState,
};

use super::ApiJson;
use crate::auth::Caller;
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::state::AppState;

/// Longest plugin name kept (the header is the client's word; bound it).
const MAX_PLUGIN_NAME: usize = 64;
/// At most this many plugin names are remembered (a misbehaving client cannot
/// grow the map without bound).
const MAX_PLUGINS: usize = 32;

pub async fn backup(
    State(st): State<AppState>,
    caller: Caller,
    ApiJson(req): ApiJson<BackupRequest>,
) -> AppResult<Json<BackupReport>> {
    caller.require_admin(&st, "back up the database")?;
    let db = st
        .with_store(|s| {
            s.db_path()
                .ok_or_else(|| AppError::Invalid("budgetd runs without a database file".into()))
        })
        .await?;
    let t = now();
    let target = PathBuf::from(&req.path);
    let confinement = crate::backup::Confinement {
        folder: st
            .config
            .backup_dir
            .clone()
            .unwrap_or_else(|| crate::backup::default_folder(&db)),
        socket: st
            .socket_path
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone(),
    };
    // Outside the store's lock: the copy reads through a connection of its own
    // and writers go on meanwhile (WAL).
    let report = tokio::task::spawn_blocking(move || {
        crate::backup::backup(&db, &target, req.overwrite, &confinement, t)
    })
    .await
    .map_err(|e| AppError::Internal(format!("backup worker failed: {e}")))??;
    tracing::info!(
        caller = %caller.actor(),
        path = %report.path,
        generation = report.generation,
        audit_id = report.audit_id,
        bytes = report.bytes,
        took_ms = report.took_ms,
        "backup written"
    );
    Ok(Json(report))
}

/// Parses `NAME` or `NAME period=SECS`; `None` for anything else.
fn parse_ident(v: &str) -> Option<(String, Option<u64>)> {
    let mut words = v.split_ascii_whitespace();
    let name = words.next()?;
    if name.len() > MAX_PLUGIN_NAME
        || !name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/_-.".contains(&b))
    {
        return None;
    }
    let mut period = None;
    for w in words {
        if let Some(p) = w.strip_prefix("period=") {
            period = p.parse().ok();
        }
    }
    Some((name.to_string(), period))
}

/// Remembers that the plugin named in `headers` holds `generation` now (snapshot
/// requests without the header, e.g. an admin's curl, are not plugins).
pub fn record_fetch(st: &AppState, headers: &HeaderMap, generation: u64, at: i64) {
    let Some((plugin, period_secs)) = headers
        .get(PLUGIN_HEADER)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_ident)
    else {
        return;
    };
    let mut map = st.plugin_fetches.lock().unwrap_or_else(|p| p.into_inner());
    if map.len() >= MAX_PLUGINS && !map.contains_key(&plugin) {
        // Forget the stalest entry.
        if let Some(k) = map
            .iter()
            .min_by_key(|(_, f)| f.fetched_at)
            .map(|(k, _)| k.clone())
        {
            map.remove(&k);
        }
    }
    map.insert(
        plugin.clone(),
        PluginFetch {
            fetched_at: at,
            generation,
            period_secs,
            plugin,
        },
    );
}

/// Plugins that fetched within the horizon, and the generation all of them hold.
pub async fn plugins(State(st): State<AppState>, _caller: Caller) -> AppResult<Json<PluginsState>> {
    let t = now();
    let max_age = st
        .with_store(|s| Ok(s.policy().snapshot_max_age_secs))
        .await?;
    // A plugin silent for longer than the snapshot's maximum age is in safe mode or
    // gone (a replaced controller): it must not hold back the others.
    let horizon_secs = max_age.max(60);
    let plugins: Vec<PluginFetch> = st
        .plugin_fetches
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .values()
        .filter(|f| t - f.fetched_at <= horizon_secs)
        .cloned()
        .collect();
    Ok(Json(PluginsState {
        applied_generation: plugins.iter().map(|f| f.generation).min().unwrap_or(0),
        generation: st.generation.load(Ordering::SeqCst),
        horizon_secs,
        plugins,
    }))
}

#[cfg(test)]
mod tests {
    use super::parse_ident;

    #[test]
    fn plugin_header_is_parsed_or_ignored() {
        assert_eq!(
            parse_ident("priority/budget period=5"),
            Some(("priority/budget".into(), Some(5)))
        );
        assert_eq!(
            parse_ident("job_submit/budget"),
            Some(("job_submit/budget".into(), None))
        );
        assert_eq!(parse_ident(""), None);
        assert_eq!(parse_ident("bad\u{7f}name"), None);
        assert_eq!(parse_ident(&"x".repeat(65)), None);
    }
}
