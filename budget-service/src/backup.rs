//! Backups and restore of budgetd's database with SQLite's online backup API.
//!
//! A backup ([`backup`], `POST /v1/backup`, `budgetctl backup FILE`) copies the
//! database through a connection of its own, in one backup step: that step reads
//! inside one read transaction, so under WAL the copy is the database as of one
//! commit while budgetd keeps serving and writing (writers are not blocked; the
//! store's lock is not held). What the copy holds is read back from the copy
//! itself (generation, last audit id, runs), so the report describes exactly the
//! file written. The copy goes to a temporary name in the target's folder, is
//! synced, then linked into place (refusing an existing file) or renamed over it
//! (`overwrite`): a reader never sees a half-written backup under the final name.
//! Backups are confined to one folder ([`Confinement`]: `backup_dir`, by default
//! `backups` beside the database), and never replace the database's own files
//! (`-wal`, `-shm`, `-journal` included) or the socket.
//!
//! A restore ([`restore`], `budgetd --restore FILE`) runs with budgetd stopped: it
//! checks the file (SQLite, `integrity_check`, a budgetd schema not newer than
//! this build), keeps the current database next to it, then copies the file into
//! the database through SQLite (which also resets the WAL: copying the file by hand
//! next to a stale `-wal` would corrupt it). The next start migrates an older
//! schema as usual (`db.rs`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use budget_protocol::service::BackupReport;
use rusqlite::{Connection, OpenFlags};

use crate::db::{CopyError, copy, copy_into};
use crate::error::AppError;

/// Why a backup or restore failed; each message names the file and what to do.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0}")]
    Refused(String),
    #[error("{0} already exists (pass --force to replace it)")]
    Exists(String),
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
}

impl From<BackupError> for AppError {
    fn from(e: BackupError) -> AppError {
        match e {
            BackupError::Refused(m) => AppError::Invalid(m),
            e @ BackupError::Exists(_) => AppError::Conflict(e.to_string()),
            // The caller named the file: telling them why it failed is the point.
            e @ (BackupError::Io { .. } | BackupError::Sqlite { .. }) => {
                AppError::Invalid(format!("backup failed: {e}"))
            }
        }
    }
}

impl From<CopyError> for BackupError {
    fn from(e: CopyError) -> BackupError {
        match e {
            CopyError::Sqlite { path, source } => BackupError::Sqlite { path, source },
            e @ CopyError::Locked { .. } => BackupError::Refused(e.to_string()),
        }
    }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> BackupError + '_ {
    move |source| BackupError::Io {
        path: path.display().to_string(),
        source,
    }
}

fn sql(path: &Path) -> impl FnOnce(rusqlite::Error) -> BackupError + '_ {
    move |source| BackupError::Sqlite {
        path: path.display().to_string(),
        source,
    }
}

/// What a budgetd database file holds, read from the file itself.
fn describe(conn: &Connection, path: &Path) -> Result<(u64, i64, i64, i64), BackupError> {
    let e = sql(path);
    let read = || -> rusqlite::Result<(u64, i64, i64, i64)> {
        let generation: Option<String> = conn
            .query_row("SELECT value FROM meta WHERE key = 'generation'", [], |r| {
                r.get(0)
            })
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        let audit_id: i64 =
            conn.query_row("SELECT coalesce(max(id), 0) FROM audit", [], |r| r.get(0))?;
        let runs: i64 = conn.query_row("SELECT count(*) FROM runs", [], |r| r.get(0))?;
        let version: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
        Ok((
            generation.and_then(|g| g.parse().ok()).unwrap_or(0),
            audit_id,
            runs,
            version,
        ))
    };
    read().map_err(e)
}

fn fsync_dir(dir: &Path) -> Result<(), BackupError> {
    std::fs::File::open(dir)
        .and_then(|f| f.sync_all())
        .map_err(io(dir))
}

/// Where a backup may be written, and what it must never replace.
#[derive(Debug, Clone)]
pub struct Confinement {
    /// Backups go into this folder or a folder below it (`backup_dir`;
    /// default: `backups` beside the database, [`default_folder`]).
    pub folder: PathBuf,
    /// The Unix socket budgetd serves, if any: replacing it leaves a
    /// restarted budgetd unable to bind.
    pub socket: Option<PathBuf>,
}

/// The default backup folder: `backups` beside the database (under systemd
/// `/var/lib/slurm-budget/backups/`, which the unit creates).
pub fn default_folder(db: &Path) -> PathBuf {
    db.parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join("backups")
}

/// `path` with its folder resolved (symlinks, `..`) and its last component
/// kept as it is: what a file at `path` would be, existing or not.
fn resolved(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    Some(std::fs::canonicalize(dir).ok()?.join(name))
}

/// Refuses a `target` (in the existing folder `dir`) outside the backup
/// folder, or naming one of the database's files or the socket: a backup
/// renamed over the `-wal` file lost acknowledged writes at the next crash,
/// one over the socket kept budgetd from starting again.
fn check_confined(
    db: &Path,
    target: &Path,
    dir: &Path,
    confinement: &Confinement,
) -> Result<(), BackupError> {
    let folder = std::fs::canonicalize(&confinement.folder).map_err(|e| {
        BackupError::Refused(format!(
            "backup folder {}: {e} (create it, or set backup_dir in budgetd's config)",
            confinement.folder.display()
        ))
    })?;
    let in_dir = std::fs::canonicalize(dir).map_err(io(dir))?;
    if !in_dir.starts_with(&folder) {
        return Err(BackupError::Refused(format!(
            "{} is outside the backup folder {} (budgetd writes backups only there; \
             backup_dir in budgetd's config sets it)",
            target.display(),
            folder.display()
        )));
    }
    let name = target.file_name().unwrap_or_default();
    let at = in_dir.join(name);
    if let Some(db) = resolved(db) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut own = db.clone().into_os_string();
            own.push(suffix);
            if at == Path::new(&own) {
                return Err(BackupError::Refused(format!(
                    "{} is one of budgetd's database files ({}, -wal, -shm, -journal)",
                    target.display(),
                    db.display()
                )));
            }
        }
    }
    if confinement.socket.as_deref().and_then(resolved).as_deref() == Some(at.as_path()) {
        return Err(BackupError::Refused(format!(
            "{} is budgetd's socket",
            target.display()
        )));
    }
    match std::fs::symlink_metadata(&at) {
        Ok(m) if !m.file_type().is_file() => Err(BackupError::Refused(format!(
            "{} exists and is not a regular file",
            target.display()
        ))),
        _ => Ok(()),
    }
}

/// Writes a consistent copy of the database at `db` to `target` (absolute; its
/// folder must exist, inside `confinement`'s folder). Refuses an existing
/// `target` unless `overwrite`, and always the database's own files and the
/// socket.
pub fn backup(
    db: &Path,
    target: &Path,
    overwrite: bool,
    confinement: &Confinement,
    now: i64,
) -> Result<BackupReport, BackupError> {
    if !target.is_absolute() {
        return Err(BackupError::Refused(format!(
            "backup path {:?} must be absolute: budgetd writes it on its own host",
            target.display().to_string()
        )));
    }
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return Err(BackupError::Refused(format!(
            "backup path {:?} names no file",
            target.display().to_string()
        )));
    };
    match std::fs::metadata(dir) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(BackupError::Refused(format!(
                "{} is not a folder",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(BackupError::Refused(format!(
                "folder {} of the backup: {e} (budgetd does not create it)",
                dir.display()
            )));
        }
    }
    check_confined(db, target, dir, confinement)?;
    if same_file(db, target) {
        return Err(BackupError::Refused(format!(
            "{} is budgetd's own database",
            target.display()
        )));
    }
    if !overwrite && std::fs::symlink_metadata(target).is_ok() {
        return Err(BackupError::Exists(target.display().to_string()));
    }
    let started = Instant::now();
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".partial-{}", std::process::id()));
    let tmp = dir.join(tmp_name);
    let _ = std::fs::remove_file(&tmp);
    let result = (|| {
        // Read-write flags but never written: a read-only connection to a WAL
        // database depends on the -shm file's permissions.
        let src = Connection::open_with_flags(
            db,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(sql(db))?;
        src.busy_timeout(Duration::from_secs(5)).map_err(sql(db))?;
        copy(&src, &tmp)?;
        drop(src);
        let copy = Connection::open(&tmp).map_err(sql(&tmp))?;
        // A single self-contained file (no -wal beside it) to copy around; budgetd
        // puts a restored database back in WAL mode when it opens it.
        copy.pragma_update(None, "journal_mode", "DELETE")
            .map_err(sql(&tmp))?;
        let (generation, audit_id, runs, schema_version) = describe(&copy, &tmp)?;
        drop(copy);
        let f = std::fs::File::open(&tmp).map_err(io(&tmp))?;
        f.sync_all().map_err(io(&tmp))?;
        let bytes = f.metadata().map_err(io(&tmp))?.len();
        if overwrite {
            std::fs::rename(&tmp, target).map_err(io(target))?;
        } else {
            // A hard link never replaces an existing file: a backup started by
            // someone else meanwhile is not overwritten.
            std::fs::hard_link(&tmp, target).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AlreadyExists {
                    BackupError::Exists(target.display().to_string())
                } else {
                    BackupError::Io {
                        path: target.display().to_string(),
                        source: e,
                    }
                }
            })?;
            std::fs::remove_file(&tmp).map_err(io(&tmp))?;
        }
        fsync_dir(dir)?;
        Ok(BackupReport {
            audit_id,
            bytes,
            generation,
            path: target.display().to_string(),
            runs,
            schema_version,
            taken_at: now,
            took_ms: u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(x), Ok(y)) => x.dev() == y.dev() && x.ino() == y.ino(),
        _ => false,
    }
}

/// What [`restore`] did.
#[derive(Debug)]
pub struct Restored {
    /// generation, last audit id, runs and schema version of the restored file.
    pub generation: u64,
    pub audit_id: i64,
    pub runs: i64,
    pub schema_version: i64,
    /// Where the database that was replaced now is (none if there was none).
    pub previous: Option<PathBuf>,
}

/// Replaces the database at `db` with the backup `file` (budgetd must be stopped:
/// `socket` must not answer). The replaced database is kept as
/// `DB.before-restore-UNIXTIME`.
pub fn restore(db: &Path, socket: &Path, file: &Path, now: i64) -> Result<Restored, BackupError> {
    if std::os::unix::net::UnixStream::connect(socket).is_ok() {
        return Err(BackupError::Refused(format!(
            "budgetd is running ({} answers): stop it first (systemctl stop budgetd)",
            socket.display()
        )));
    }
    if same_file(db, file) {
        return Err(BackupError::Refused(format!(
            "{} is the database itself",
            file.display()
        )));
    }
    std::fs::metadata(file).map_err(io(file))?;
    let src =
        Connection::open_with_flags(file, OpenFlags::SQLITE_OPEN_READ_ONLY).map_err(sql(file))?;
    let check: String = src
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .map_err(sql(file))?;
    if check != "ok" {
        return Err(BackupError::Refused(format!(
            "{} fails SQLite's integrity check ({check}); nothing restored",
            file.display()
        )));
    }
    let (generation, audit_id, runs, schema_version) = describe(&src, file).map_err(|e| {
        BackupError::Refused(format!(
            "{} is not a budgetd database ({e}); nothing restored",
            file.display()
        ))
    })?;
    if schema_version > crate::db::SCHEMA_VERSION {
        return Err(BackupError::Refused(format!(
            "{} has schema version {schema_version}, newer than this budgetd ({}); nothing restored",
            file.display(),
            crate::db::SCHEMA_VERSION
        )));
    }
    let mut previous = None;
    if db.exists() {
        let mut name = db.as_os_str().to_owned();
        name.push(format!(".before-restore-{now}"));
        let keep = PathBuf::from(name);
        let cur = Connection::open(db).map_err(sql(db))?;
        copy(&cur, &keep)?;
        previous = Some(keep);
    }
    let mut dst = Connection::open(db).map_err(sql(db))?;
    copy_into(&src, &mut dst, db)?;
    Ok(Restored {
        generation,
        audit_id,
        runs,
        schema_version,
        previous,
    })
}
