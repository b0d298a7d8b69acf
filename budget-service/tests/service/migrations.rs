//! Schema migrations with the real budgetd binary on databases of earlier schema
//! versions (`tests/fixtures/schema-v*.sql`, frozen copies of what earlier
//! budgetd versions wrote): the data survives, a copy of the old file is written
//! first, all pending migrations run in ONE transaction, and a migration that
//! fails leaves the database exactly as it was.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use rusqlite::{Connection, OpenFlags};

use crate::common::call;
use crate::daemon::{BUDGETD, Daemon};

fn fixture(name: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// A database file made from `sql` (plus `extra`), closed (no -wal left).
fn make_db(path: &Path, sql: &str, extra: &str) {
    let conn = Connection::open(path).expect("create");
    conn.execute_batch(sql).expect("fixture");
    conn.execute_batch(extra).expect("extra");
}

/// Every table's rows (sorted, as text), the schema (as table `sqlite_master`)
/// and `user_version`.
fn dump(path: &Path) -> (i64, BTreeMap<String, Vec<String>>) {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open");
    let version: i64 = conn
        .pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("version");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    let mut out = BTreeMap::new();
    for t in std::iter::once("sqlite_master".to_string()).chain(tables) {
        let mut st = conn
            .prepare(&format!("SELECT * FROM \"{t}\""))
            .expect("select");
        let n = st.column_count();
        let names: Vec<String> = st.column_names().iter().map(|c| c.to_string()).collect();
        let mut rows: Vec<String> = st
            .query_map([], |r| {
                Ok((0..n)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{}={v:?}", names[i]))
                    })
                    .collect::<Result<Vec<_>, _>>()?
                    .join("|"))
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("collect");
        rows.sort();
        out.insert(t, rows);
    }
    (version, out)
}

fn bak(db: &Path, from: i64) -> PathBuf {
    PathBuf::from(format!("{}.schema-v{from}.bak", db.display()))
}

#[test]
fn an_old_database_is_backed_up_then_migrated_and_keeps_its_data() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.sqlite");
    let sock = dir.path().join("budgetd.sock");
    make_db(&db, &fixture("schema-v2.sql"), "");
    let (v, before) = dump(&db);
    assert_eq!(v, 2);

    let mut d = Daemon::start(&db, &sock);
    let c = d.client();
    let h = call(&c, "GET", "/v1/health", None).1;
    assert_eq!(
        h["schema_version"].as_i64(),
        Some(budget_service::db::SCHEMA_VERSION)
    );
    assert_eq!(h["generation"].as_u64(), Some(9), "{h}");
    // The old rows are served: tree, members, audit, ledger, drains.
    let accounts = call(&c, "GET", "/v1/accounts", None).1;
    let names: Vec<&str> = accounts
        .as_array()
        .expect("accounts")
        .iter()
        .filter_map(|a| a["name"].as_str())
        .collect();
    assert_eq!(names, ["bio", "physics", "physics-hep"], "{accounts}");
    let audit = call(&c, "GET", "/v1/audit", None).1;
    assert_eq!(audit.as_array().map(Vec::len), Some(8));
    let usage = call(&c, "GET", "/v1/usage?by=user&since=0&at=1780010000", None).1;
    assert!(
        usage.to_string().contains("alice") && usage.to_string().contains("carol"),
        "{usage}"
    );
    assert!(d.stop().success());

    // The copy taken first is the old database, unchanged.
    let (bv, copy) = dump(&bak(&db, 2));
    assert_eq!(bv, 2);
    assert_eq!(
        copy, before,
        "the pre-migration backup differs from the old database"
    );
    // The migrated database holds every old row (the policy row budgetd adds on
    // first start aside) and the new tables.
    let (after_v, after) = dump(&db);
    assert_eq!(after_v, budget_service::db::SCHEMA_VERSION);
    // Later migrations may add columns (e.g. the run's submit time): every old
    // column keeps its value, the new ones are left out of the comparison.
    for (t, rows) in before.iter().filter(|(t, _)| *t != "sqlite_master") {
        let old_columns: Vec<&str> = rows
            .first()
            .map(|r| r.split('|').filter_map(|f| f.split('=').next()).collect())
            .unwrap_or_default();
        let now: Vec<String> = after[t]
            .iter()
            .filter(|r| !(t == "meta" && r.starts_with("key=Text(\"policy\")")))
            .map(|r| {
                r.split('|')
                    .filter(|f| {
                        f.split('=')
                            .next()
                            .is_some_and(|c| old_columns.contains(&c))
                    })
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        assert_eq!(now, *rows, "table {t}");
    }
    assert!(after.contains_key("agent_reports") && after.contains_key("idle_streaks"));

    // Opening again migrates nothing and writes no second copy.
    let d = Daemon::start(&db, &sock);
    drop(d);
    let baks = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".bak"))
        })
        .count();
    assert_eq!(baks, 1);
}

#[test]
fn a_failed_migration_changes_nothing_and_all_pending_steps_are_one_transaction() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.sqlite");
    let sock = dir.path().join("budgetd.sock");
    // A version-1 database (two migrations pending) where someone created a table
    // by hand that the third migration creates: that step fails.
    make_db(
        &db,
        &fixture("schema-v1.sql"),
        "CREATE TABLE agent_reports (note TEXT); INSERT INTO agent_reports VALUES ('by hand');",
    );
    let before = dump(&db);
    let out = Command::new(BUDGETD)
        .arg("--db")
        .arg(&db)
        .arg("--socket")
        .arg(&sock)
        .env("BUDGET_LOG", "error")
        .output()
        .expect("budgetd");
    assert!(!out.status.success(), "budgetd must refuse to start");
    let msg = String::from_utf8_lossy(&out.stderr);
    assert!(
        msg.contains("migrating schema version 1 to")
            && msg.contains("table agent_reports already exists")
            && msg.contains("rolled back, the database is unchanged at version 1")
            && msg.contains(".schema-v1.bak"),
        "{msg}"
    );
    // Nothing changed: not even migration 2, which ran fine before 3 failed.
    assert_eq!(dump(&db), before);
    assert!(!dump(&db).1.contains_key("drains"));
    // The copy was written before anything was tried.
    assert_eq!(dump(&bak(&db, 1)), before);
    assert!(!sock.exists());
}

/// A policy row stored by the previous release, with every setting that is now
/// a constant of the rule set to another value than the constant: the real
/// budgetd still opens the database, serves the site's settings (the removed
/// ones ignored, logged once each), carries the rule's `hysteresis` in the
/// snapshot for plugins of that release, and the next change writes the row
/// in the new form.
#[test]
fn a_policy_stored_by_the_previous_release_still_loads() {
    const OLD: &str = r#"{"window_secs":86400,"default_min_runtime_secs":1800,"max_min_runtime_secs":7200,"require_min_runtime":true,"hysteresis":0.3,"snapshot_max_age_secs":60,"idle_threshold_secs":1800,"site_max_preemptions":4,"max_requeues":2,"tier_band":0.1,"share_order":true,"entitled_first":false,"tier_projection":0.4,"balance_band":0}"#;
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.sqlite");
    let sock = dir.path().join("budgetd.sock");
    let log = dir.path().join("budgetd.log");
    let mut d = Daemon::start(&db, &sock);
    assert!(d.stop().success());
    let conn = Connection::open(&db).expect("open");
    let n = conn
        .execute("UPDATE meta SET value = ?1 WHERE key = 'policy'", [OLD])
        .expect("store the old policy");
    assert_eq!(n, 1);
    drop(conn);

    let mut cmd = Command::new(BUDGETD);
    cmd.env("BUDGET_LOG", "warn")
        .stderr(std::fs::File::create(&log).expect("log file"));
    let mut d = Daemon::start_cmd(&db, &sock, cmd);
    let c = d.client();
    let (st, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(st, 200, "{p}");
    assert_eq!(
        p,
        serde_json::json!({"window_secs": 86400, "default_min_runtime_secs": 1800,
            "max_min_runtime_secs": 7200, "require_min_runtime": true, "hysteresis": 0.1,
            "snapshot_max_age_secs": 60, "idle_threshold_secs": 1800,
            "site_max_preemptions": 4, "max_requeues": 2}),
        "the site's settings, the rule's hysteresis, no removed setting"
    );
    let (st, snap) = call(&c, "GET", "/v1/snapshot", None);
    assert_eq!(st, 200, "{snap}");
    assert_eq!(snap["policy"], p, "the snapshot carries the same policy");
    // What a plugin of this release reads: the rule's constants, whatever was stored.
    let read: budget_protocol::Policy =
        serde_json::from_value(snap["policy"].clone()).expect("policy");
    assert_eq!(
        read.rebalance(),
        policy_core::rebalance::RebalancePolicy {
            site_max_preemptions: Some(4),
            max_requeues: Some(2),
            ..Default::default()
        }
    );
    // A change stores the row in the new form.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(&serde_json::json!({"preemption": "gentle"})),
    );
    assert_eq!(st, 200, "{b}");
    assert!(d.stop().success());
    let text = std::fs::read_to_string(&log).expect("log");
    for k in budget_protocol::Policy::REMOVED {
        assert!(
            text.contains(&format!("setting=\"{k}\"")) || text.contains(&format!("setting={k}")),
            "no warning for {k}: {text}"
        );
    }
    let conn = Connection::open(&db).expect("open");
    let stored: String = conn
        .query_row("SELECT value FROM meta WHERE key = 'policy'", [], |r| {
            r.get(0)
        })
        .expect("row");
    let stored: serde_json::Value = serde_json::from_str(&stored).expect("json");
    assert_eq!(stored["preemption"], "gentle", "{stored}");
    assert_eq!(stored["hysteresis"], 0.1, "{stored}");
    for k in budget_protocol::Policy::REMOVED.iter().skip(1) {
        assert!(stored.get(k).is_none(), "{k} still stored: {stored}");
    }
}
