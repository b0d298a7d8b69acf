//! Opening the SQLite database and migrating its schema.
//!
//! The schema is versioned with SQLite's `user_version`: every migration a
//! database lacks runs once, all of them inside ONE transaction that also sets
//! `user_version`, so a failure or a crash mid-migration leaves the previous
//! version intact. Before migrating a database that holds data, budgetd copies
//! it (online backup API) to `DB.schema-vN.bak` beside it. The database runs in
//! WAL mode with `synchronous = FULL`: a transaction the service acknowledged
//! survives a crash of the process and of the machine (the ledger must not
//! lose a run, docs/design.md §3). Foreign keys are on for every connection.
//! The `runs` table has no secondary index: every query over runs is served
//! by the in-memory mirror (`ledger.rs`), so an index would only slow ingestion.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::{Connection, backup::Backup};

/// Migrations in order; index + 1 is the `user_version` after each.
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: tree, budgets, policy, audit, ledger.
    r#"
    CREATE TABLE meta (
        key   TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE accounts (
        name        TEXT PRIMARY KEY,
        parent      TEXT REFERENCES accounts(name),
        allocation  REAL NOT NULL CHECK (allocation >= 0),
        overcommit  INTEGER NOT NULL DEFAULT 0,
        created_at  INTEGER NOT NULL
    );
    CREATE INDEX accounts_parent ON accounts(parent);
    CREATE TABLE members (
        user        TEXT NOT NULL,
        account     TEXT NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
        allocation  REAL CHECK (allocation IS NULL OR allocation >= 0),
        PRIMARY KEY (user, account)
    );
    CREATE TABLE coordinators (
        user        TEXT NOT NULL,
        account     TEXT NOT NULL REFERENCES accounts(name) ON DELETE CASCADE,
        PRIMARY KEY (user, account)
    );
    CREATE TABLE gpu_weights (
        gpu_type    TEXT PRIMARY KEY,
        weight      REAL NOT NULL CHECK (weight > 0)
    );
    CREATE TABLE audit (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        at          INTEGER NOT NULL,
        actor       TEXT NOT NULL,
        action      TEXT NOT NULL,
        target      TEXT NOT NULL,
        old         TEXT,
        new         TEXT
    );
    CREATE TRIGGER audit_no_update BEFORE UPDATE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    CREATE TRIGGER audit_no_delete BEFORE DELETE ON audit
        BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
    CREATE TABLE runs (
        job_id      INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        account     TEXT NOT NULL,
        user        TEXT NOT NULL,
        partition   TEXT,
        gpus        INTEGER NOT NULL,
        gpu_type    TEXT,
        start       INTEGER,
        end         INTEGER,
        free_tier   INTEGER NOT NULL,
        min_runtime INTEGER NOT NULL,
        nodes       TEXT,
        state       TEXT NOT NULL,
        first_seen  INTEGER NOT NULL,
        source      TEXT NOT NULL,
        PRIMARY KEY (job_id, run)
    ) WITHOUT ROWID;
    "#,
    // 2: maintenance drains (docs/design.md §7) and the preemption record (§6.5).
    r#"
    CREATE TABLE drains (
        node        TEXT PRIMARY KEY,
        reason      TEXT NOT NULL,
        since       INTEGER NOT NULL,
        actor       TEXT NOT NULL
    );
    CREATE TABLE preemptions (
        job_id      INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        account     TEXT NOT NULL,
        user        TEXT NOT NULL,
        preemptor   INTEGER,
        preemptor_account TEXT,
        reason      TEXT NOT NULL,
        at          INTEGER NOT NULL,
        gpus        INTEGER NOT NULL,
        run_start   INTEGER,
        gpu_hours   REAL NOT NULL,
        source      TEXT NOT NULL,
        PRIMARY KEY (job_id, run)
    ) WITHOUT ROWID;
    "#,
    // 3: node-agent reports and the idle ledger (docs/design.md §8, `idle.rs`).
    r#"
    CREATE TABLE agent_reports (
        node        TEXT PRIMARY KEY,
        at          INTEGER NOT NULL,
        nvml        INTEGER NOT NULL,
        gpus        INTEGER NOT NULL,
        report      TEXT NOT NULL
    );
    CREATE TABLE idle_streaks (
        job_id      INTEGER NOT NULL,
        gpu_uuid    TEXT NOT NULL,
        node        TEXT NOT NULL,
        start       INTEGER NOT NULL,
        end         INTEGER NOT NULL CHECK (end >= start),
        broken_at   INTEGER,
        PRIMARY KEY (job_id, gpu_uuid, start)
    ) WITHOUT ROWID;
    CREATE INDEX idle_streaks_gpu_end ON idle_streaks(gpu_uuid, end);
    CREATE INDEX idle_streaks_end ON idle_streaks(end);
    "#,
    // 4: a run's time limit and declared checkpoint interval (the cost-aware
    // rule's inputs, read by `budgetctl why`).
    r#"
    ALTER TABLE runs ADD COLUMN time_limit INTEGER;
    ALTER TABLE runs ADD COLUMN checkpoint INTEGER;
    "#,
    // 5: the run key tells reused job ids apart: Slurm's submit
    // time of the run joins the key; rows stored before it have 0 (unknown) and
    // adopt the first submit time synced for them.
    r#"
    CREATE TABLE runs_new (
        job_id      INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        submit      INTEGER NOT NULL DEFAULT 0,
        account     TEXT NOT NULL,
        user        TEXT NOT NULL,
        partition   TEXT,
        gpus        INTEGER NOT NULL,
        gpu_type    TEXT,
        start       INTEGER,
        end         INTEGER,
        free_tier   INTEGER NOT NULL,
        min_runtime INTEGER NOT NULL,
        nodes       TEXT,
        state       TEXT NOT NULL,
        first_seen  INTEGER NOT NULL,
        source      TEXT NOT NULL,
        time_limit  INTEGER,
        checkpoint  INTEGER,
        PRIMARY KEY (job_id, run, submit)
    ) WITHOUT ROWID;
    INSERT INTO runs_new (job_id, run, submit, account, user, partition, gpus, gpu_type, start,
        end, free_tier, min_runtime, nodes, state, first_seen, source, time_limit, checkpoint)
        SELECT job_id, run, 0, account, user, partition, gpus, gpu_type, start, end, free_tier,
        min_runtime, nodes, state, first_seen, source, time_limit, checkpoint FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_new RENAME TO runs;
    "#,
    // 6: a run slurmctld lost in a crash and started again under the same job id,
    // run and submit time is a row of its own (`rerun` 1, 2, ...): the lost run
    // stays charged. Every row stored before is rerun 0.
    r#"
    CREATE TABLE runs_new (
        job_id      INTEGER NOT NULL,
        run         INTEGER NOT NULL,
        submit      INTEGER NOT NULL DEFAULT 0,
        rerun       INTEGER NOT NULL DEFAULT 0,
        account     TEXT NOT NULL,
        user        TEXT NOT NULL,
        partition   TEXT,
        gpus        INTEGER NOT NULL,
        gpu_type    TEXT,
        start       INTEGER,
        end         INTEGER,
        free_tier   INTEGER NOT NULL,
        min_runtime INTEGER NOT NULL,
        nodes       TEXT,
        state       TEXT NOT NULL,
        first_seen  INTEGER NOT NULL,
        source      TEXT NOT NULL,
        time_limit  INTEGER,
        checkpoint  INTEGER,
        PRIMARY KEY (job_id, run, submit, rerun)
    ) WITHOUT ROWID;
    INSERT INTO runs_new (job_id, run, submit, rerun, account, user, partition, gpus, gpu_type,
        start, end, free_tier, min_runtime, nodes, state, first_seen, source, time_limit, checkpoint)
        SELECT job_id, run, submit, 0, account, user, partition, gpus, gpu_type, start, end,
        free_tier, min_runtime, nodes, state, first_seen, source, time_limit, checkpoint FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_new RENAME TO runs;
    "#,
    // 7: shadow mode (`crate::shadow`): the queue samples (how Slurm's order
    // differs from the budget order), the preemptions the rule would have made
    // (once per victim run) and each team's entitlement shortfall per sample.
    r#"
    CREATE TABLE shadow_orders (
        at          INTEGER PRIMARY KEY,
        pending     INTEGER NOT NULL,
        pairs       INTEGER NOT NULL,
        discordant  INTEGER NOT NULL,
        slurm_ties  INTEGER NOT NULL,
        tau         REAL,
        furthest    TEXT NOT NULL
    );
    CREATE TABLE shadow_preemptions (
        victim            INTEGER NOT NULL,
        victim_run        INTEGER NOT NULL,
        account           TEXT NOT NULL,
        user              TEXT NOT NULL,
        gpus              INTEGER NOT NULL,
        preemptor         INTEGER NOT NULL,
        preemptor_account TEXT NOT NULL,
        preemptor_user    TEXT NOT NULL,
        at                INTEGER NOT NULL,
        lost_gpu_hours    REAL NOT NULL,
        reason            TEXT NOT NULL,
        PRIMARY KEY (victim, victim_run)
    );
    CREATE INDEX shadow_preemptions_at ON shadow_preemptions(at);
    CREATE TABLE shadow_shortfall (
        at        INTEGER NOT NULL,
        account   TEXT NOT NULL,
        held      REAL NOT NULL,
        entitled  REAL NOT NULL,
        demand    REAL NOT NULL,
        target    REAL NOT NULL,
        shortfall REAL NOT NULL,
        PRIMARY KEY (at, account)
    );
    "#,
];

/// Schema version this build expects.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Why the database could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum DbError {
    #[error("database {path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error(
        "database {path} has schema version {found}, newer than this budgetd ({SCHEMA_VERSION}); upgrade budgetd"
    )]
    TooNew { path: String, found: i64 },
    #[error("database {path}: migrating schema version {from} to {to} failed: {reason}")]
    Migration {
        path: String,
        from: i64,
        to: i64,
        reason: String,
    },
}

/// Where the copy of a database is kept before migrating it from `from`:
/// `DB.schema-vFROM.bak` beside it (budgetd may write that folder: under
/// systemd it is its `StateDirectory`). An existing copy of the same version is
/// kept (the first one is the one that matters); the name then gets the time.
pub fn migration_backup_path(path: &Path, from: i64, now: i64) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".schema-v{from}.bak"));
    let p = PathBuf::from(name);
    if !p.exists() {
        return p;
    }
    let mut name = path.as_os_str().to_owned();
    name.push(format!(".schema-v{from}.{now}.bak"));
    PathBuf::from(name)
}

/// Why a copy of the database ([`copy`]) failed.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    #[error("{path}: {source}")]
    Sqlite {
        path: String,
        source: rusqlite::Error,
    },
    #[error("{path}: the database stayed locked for 30 s; try again")]
    Locked { path: String },
}

fn copy_sql(path: &Path) -> impl FnOnce(rusqlite::Error) -> CopyError + '_ {
    move |source| CopyError::Sqlite {
        path: path.display().to_string(),
        source,
    }
}

/// Copies the database `src` into the (new or emptied) database file `dst` in one
/// backup step (SQLite's online backup API), retrying while SQLite reports the
/// source busy. Used before a migration and by backups and restores (`backup.rs`).
pub(crate) fn copy(src: &Connection, dst_path: &Path) -> Result<(), CopyError> {
    let mut dst = Connection::open(dst_path).map_err(copy_sql(dst_path))?;
    copy_into(src, &mut dst, dst_path)
}

/// [`copy`] into an open connection.
pub(crate) fn copy_into(
    src: &Connection,
    dst: &mut Connection,
    dst_path: &Path,
) -> Result<(), CopyError> {
    let b = Backup::new(src, dst).map_err(copy_sql(dst_path))?;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // -1: all pages in one step, so the copy is one read transaction's view.
        match b.step(-1).map_err(copy_sql(dst_path))? {
            rusqlite::backup::StepResult::Done => return Ok(()),
            rusqlite::backup::StepResult::More => {}
            _ if Instant::now() > deadline => {
                return Err(CopyError::Locked {
                    path: dst_path.display().to_string(),
                });
            }
            _ => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

/// Runs `migrations[from..]` in ONE transaction, which also sets `user_version`:
/// a failure leaves the database exactly as it was (and says so). A database that
/// holds data (`from > 0`) is first copied with the online backup API to
/// [`migration_backup_path`]; no copy, no migration.
fn migrate(
    conn: &mut Connection,
    path: &Path,
    from: i64,
    migrations: &[&str],
) -> Result<(), DbError> {
    let p = path.display().to_string();
    let to = migrations.len() as i64;
    let mut backup = None;
    if from > 0 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        let target = migration_backup_path(path, from, now);
        copy(conn, &target).map_err(|e| DbError::Migration {
            path: p.clone(),
            from,
            to,
            reason: format!("the backup before migrating failed: {e}; nothing migrated"),
        })?;
        tracing::info!(from, to, backup = %target.display(), "database backed up before its migration");
        backup = Some(target);
    }
    let fail = |source: rusqlite::Error| DbError::Migration {
        path: p.clone(),
        from,
        to,
        reason: format!(
            "{source}; rolled back, the database is unchanged at version {from}{}",
            match &backup {
                Some(b) => format!(" (its copy: {})", b.display()),
                None => String::new(),
            }
        ),
    };
    let tx = conn.transaction().map_err(fail)?;
    for sql in migrations.iter().skip(usize::try_from(from).unwrap_or(0)) {
        tx.execute_batch(sql).map_err(fail)?;
    }
    tx.pragma_update(None, "user_version", to).map_err(fail)?;
    tx.commit().map_err(fail)?;
    tracing::info!(from, to, "database migrated");
    Ok(())
}

/// Opens (creating if needed) and migrates the database at `path`.
pub fn open(path: &Path) -> Result<Connection, DbError> {
    let p = path.display().to_string();
    let wrap = |source| DbError::Sqlite {
        path: p.clone(),
        source,
    };
    let mut conn = Connection::open(path).map_err(wrap)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(wrap)?;
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(wrap)?;
    conn.pragma_update(None, "synchronous", "FULL")
        .map_err(wrap)?;
    conn.pragma_update(None, "foreign_keys", "ON")
        .map_err(wrap)?;
    // 64 MiB of page cache: a sync of 10,000 runs into a ledger of millions
    // touches many B-tree pages; the default 2 MiB makes it re-read them.
    conn.pragma_update(None, "cache_size", -65_536)
        .map_err(wrap)?;
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .map_err(wrap)?;
    if version > SCHEMA_VERSION {
        return Err(DbError::TooNew {
            path: p,
            found: version,
        });
    }
    if version < SCHEMA_VERSION {
        migrate(&mut conn, path, version, MIGRATIONS)?;
    }
    Ok(conn)
}

/// Why the database file could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    #[error("cannot open {path}: {source}")]
    Open {
        path: String,
        source: std::io::Error,
    },
    #[error(
        "{path} is in use by another budgetd (pid {holder}); two services on one database would both write the ledger"
    )]
    Locked { path: String, holder: String },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
}

/// Claims the database file for this process: creates it if missing with
/// mode 0600 (it holds who used what; SQLite's -wal/-shm files copy the
/// mode), removes world access from an existing one, and takes an
/// exclusive `flock` on it, held while the returned file is open. A second
/// budgetd on the same file fails here, before it touches anything. (SQLite's
/// own locks are fcntl locks, which `flock` does not interfere with on Linux.)
pub fn claim(path: &Path) -> Result<std::fs::File, ClaimError> {
    use std::io::{Read, Seek, Write};
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    use std::os::unix::io::AsRawFd;
    let p = path.display().to_string();
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .open(path)
        .map_err(|source| ClaimError::Open {
            path: p.clone(),
            source,
        })?;
    // SAFETY: flock on a file descriptor this function owns.
    let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            // The holder's pid is in the `<db>.pid` file next to it.
            let mut holder = String::new();
            if let Ok(mut h) = std::fs::File::open(pid_file(path)) {
                let _ = h.read_to_string(&mut holder);
            }
            let holder = holder.trim();
            return Err(ClaimError::Locked {
                path: p,
                holder: if holder.is_empty() {
                    "unknown".into()
                } else {
                    holder.to_string()
                },
            });
        }
        return Err(ClaimError::Lock { path: p, source: e });
    }
    if let Ok(meta) = f.metadata() {
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o007 != 0 {
            tracing::warn!(path = %p, mode = format!("{mode:o}"), "database was world-accessible; removing world access");
            let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o770));
        }
    }
    if let Ok(mut pf) = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(pid_file(path))
    {
        let _ = writeln!(pf, "{}", std::process::id());
    }
    let _ = f.rewind();
    Ok(f)
}

fn pid_file(path: &Path) -> std::path::PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".pid");
    std::path::PathBuf::from(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claimed_database_is_0600_and_cannot_be_claimed_twice() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.db");
        let held = claim(&path).expect("first claim");
        let mode = std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let e = claim(&path).expect_err("second claim");
        assert!(e.to_string().contains("in use by another budgetd"), "{e}");
        drop(held);
        claim(&path).expect("claim after release");
    }

    #[test]
    fn migrates_once_and_keeps_the_audit_append_only() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("b.db");
        let conn = open(&path).expect("open");
        conn.execute(
            "INSERT INTO audit(at, actor, action, target) VALUES (1, 'a', 'x', 't')",
            [],
        )
        .expect("insert");
        assert!(conn.execute("UPDATE audit SET actor = 'b'", []).is_err());
        assert!(conn.execute("DELETE FROM audit", []).is_err());
        drop(conn);
        let conn = open(&path).expect("reopen");
        let v: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("version");
        assert_eq!(v, SCHEMA_VERSION);
        let fk: i64 = conn
            .pragma_query_value(None, "foreign_keys", |r| r.get(0))
            .expect("fk");
        assert_eq!(fk, 1);
    }
}
