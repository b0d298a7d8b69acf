//! Opening the SQLite database and migrating its schema.
//!
//! The schema is versioned with SQLite's `user_version`: migration N runs
//! once, inside a transaction that also sets `user_version = N`, so a crash
//! mid-migration leaves the previous version intact. The database runs in
//! WAL mode with `synchronous = FULL`: a transaction the service acknowledged
//! survives a crash of the process and of the machine (the ledger must not
//! lose a run, docs/design.md §3). Foreign keys are on for every connection.
//! The `runs` table has no secondary index: every query over runs is served
//! by the in-memory mirror (`ledger.rs`), so an index would only slow ingestion.

use std::path::Path;

use rusqlite::Connection;

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
    // 2: maintenance drains (docs/design.md §7) and the preemption record (issue 4).
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
    // 4: the run key tells reused job ids apart (issue 11 item 7): Slurm's submit
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
        PRIMARY KEY (job_id, run, submit)
    ) WITHOUT ROWID;
    INSERT INTO runs_new (job_id, run, submit, account, user, partition, gpus, gpu_type, start,
        end, free_tier, min_runtime, nodes, state, first_seen, source)
        SELECT job_id, run, 0, account, user, partition, gpus, gpu_type, start, end, free_tier,
        min_runtime, nodes, state, first_seen, source FROM runs;
    DROP TABLE runs;
    ALTER TABLE runs_new RENAME TO runs;
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
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(version).unwrap_or(0))
    {
        let tx = conn.transaction().map_err(wrap)?;
        tx.execute_batch(sql).map_err(wrap)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)
            .map_err(wrap)?;
        tx.commit().map_err(wrap)?;
        tracing::info!(version = i + 1, "database migrated");
    }
    Ok(conn)
}

#[cfg(test)]
mod tests {
    use super::*;

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
