//! Backups under load and their restore, with the real budgetd binary and real
//! SQLite files.
//!
//! Three clients change budgetd while a backup is taken: plugin syncs (one new
//! run per request), sacct imports (one run and one audit row per request) and
//! tree changes (create an account, add a member, change its allocation; one
//! audit row each). Each client waits for every answer, so at any instant the
//! database holds a *prefix* of each client's requests. The backup must hold
//! exactly such a cut: per client a prefix (runs, rows and audit rows agreeing),
//! the audit log equal to the live one up to the backup's last id, the generation
//! equal to the number of changes it holds, and every row equal to the live row.
//! Restored with `budgetd --restore`, the database dumps identical to the backup
//! and budgetd serves that state (generation, audit log, tree).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use budget_client::Client;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

use crate::common::{self, call};
use crate::daemon::{BUDGETD, Daemon};

const SYNC_BASE: i64 = 1_000_000;
const IMPORT_BASE: i64 = 2_000_000;
const SEED_BASE: i64 = 5_000_000;
const T0: i64 = 1_790_000_000;

/// Every table of a database, rows sorted, as text: two dumps are equal iff
/// the databases hold the same rows.
fn dump(path: &Path) -> BTreeMap<String, Vec<String>> {
    let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open");
    let tables: Vec<String> = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'")
        .expect("tables")
        .query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("names");
    let mut out = BTreeMap::new();
    for t in tables {
        let mut st = conn
            .prepare(&format!("SELECT * FROM \"{t}\""))
            .expect("select");
        let n = st.column_count();
        let mut rows: Vec<String> = st
            .query_map([], |r| {
                let cols: Vec<String> = (0..n)
                    .map(|i| {
                        r.get::<_, rusqlite::types::Value>(i)
                            .map(|v| format!("{v:?}"))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                Ok(cols.join("|"))
            })
            .expect("rows")
            .collect::<Result<_, _>>()
            .expect("collect");
        rows.sort();
        out.insert(t, rows);
    }
    out
}

fn ids_in(conn: &Connection, base: i64) -> Vec<i64> {
    conn.prepare(
        "SELECT job_id FROM runs WHERE job_id >= ?1 AND job_id < ?1 + 1000000 ORDER BY job_id",
    )
    .expect("prepare")
    .query_map([base], |r| r.get::<_, i64>(0))
    .expect("query")
    .map(|r| r.expect("id") - base)
    .collect()
}

fn rows(conn: &Connection, sql: &str) -> Vec<String> {
    let mut st = conn.prepare(sql).expect("prepare");
    let n = st.column_count();
    st.query_map([], |r| {
        Ok((0..n)
            .map(|i| {
                r.get::<_, rusqlite::types::Value>(i)
                    .map(|v| format!("{v:?}"))
            })
            .collect::<Result<Vec<_>, _>>()?
            .join("|"))
    })
    .expect("query")
    .collect::<Result<_, _>>()
    .expect("rows")
}

fn post(c: &Client, path: &str, ct: &str, body: &[u8]) -> u16 {
    c.request("POST", path, &[("Content-Type", ct)], Some(body))
        .expect("request")
        .status
}

/// Runs `op(i)` for i = 0, 1, ... until `stop`; each must answer 2xx.
fn lane(
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    mut op: impl FnMut(u64) -> u16 + Send + 'static,
) -> std::thread::JoinHandle<u64> {
    std::thread::spawn(move || {
        let mut i = 0;
        while !stop.load(Ordering::SeqCst) {
            let st = op(i);
            assert!((200..300).contains(&st), "request {i}: status {st}");
            i += 1;
            done.store(i, Ordering::SeqCst);
        }
        i
    })
}

/// The tree client's request `i`: create `t{k}`, add `u{k}` to it, set its allocation to 2.
fn tree_op(c: &Client, i: u64) -> u16 {
    let k = i / 3;
    let (method, path, body) = match i % 3 {
        0 => (
            "POST",
            "/v1/accounts".to_string(),
            json!({"name": format!("t{k}"), "allocation_gpu_hours": 1.0}),
        ),
        1 => (
            "POST",
            "/v1/members".to_string(),
            json!({"user": format!("u{k}"), "account": format!("t{k}")}),
        ),
        _ => (
            "PATCH",
            format!("/v1/accounts/t{k}"),
            json!({"allocation_gpu_hours": 2.0}),
        ),
    };
    call(c, method, &path, Some(&body)).0
}

#[test]
fn a_backup_under_load_is_one_consistent_instant_and_restores_exactly() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.sqlite");
    let sock = dir.path().join("budgetd.sock");
    // The default backup folder: `backups` beside the database.
    std::fs::create_dir(dir.path().join("backups")).expect("backups folder");
    let file = dir.path().join("backups/backup.sqlite");
    let mut d = Daemon::start(&db, &sock);
    let c = d.client();
    common::add_account(&c, "syncs", None, 100.0);
    common::add_account(&c, "imports", None, 100.0);
    // A ledger of 40,000 runs first, so the copy takes a while and requests land
    // while it runs.
    for batch in 0..10 {
        let runs: Vec<Value> = (0..4000)
            .map(|j| {
                let id = SEED_BASE + batch * 4000 + j;
                json!({"job_id": id, "run": 0, "account": "syncs", "user": "carol", "gpus": 1,
                       "state": "ended", "start": T0 - 86_400 + j, "end": T0 - 86_000 + j})
            })
            .collect();
        let body = json!({"collected_at": T0, "runs": runs});
        let st = post(
            &c,
            budget_protocol::SYNC_PATH,
            "application/json",
            body.to_string().as_bytes(),
        );
        assert_eq!(st, 200);
    }
    let g0: u64 = call(&c, "GET", "/v1/health", None).1["generation"]
        .as_u64()
        .expect("generation");

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Vec<Arc<AtomicU64>> = (0..3).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let sc = d.client();
    let syncs = lane(stop.clone(), counts[0].clone(), move |i| {
        let i = i as i64;
        let body = json!({"collected_at": T0 + i, "runs": [{
            "job_id": SYNC_BASE + i, "run": 0, "account": "syncs", "user": "alice", "gpus": 1,
            "state": "ended", "start": T0 + i, "end": T0 + i + 60}]});
        post(
            &sc,
            budget_protocol::SYNC_PATH,
            "application/json",
            body.to_string().as_bytes(),
        )
    });
    let ic = d.client();
    let imports = lane(stop.clone(), counts[1].clone(), move |i| {
        let text = format!(
            "JobID|Account|User|Partition|AllocTRES|Start|End|State\n\
             {}|imports|bob|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n",
            IMPORT_BASE + i as i64
        );
        post(
            &ic,
            "/v1/usage/import?tz=UTC",
            "text/plain",
            text.as_bytes(),
        )
    });
    let tc = d.client();
    let tree = lane(stop.clone(), counts[2].clone(), move |i| tree_op(&tc, i));

    // Backup in the middle of the stream.
    while counts.iter().any(|n| n.load(Ordering::SeqCst) < 30) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let before: Vec<u64> = counts.iter().map(|n| n.load(Ordering::SeqCst)).collect();
    let (st, report) = call(
        &c,
        "POST",
        "/v1/backup",
        Some(&json!({"path": file.display().to_string()})),
    );
    let after: Vec<u64> = counts.iter().map(|n| n.load(Ordering::SeqCst)).collect();
    assert_eq!(st, 200, "{report}");
    // Keep writing after the backup, so the live database moves past it.
    while counts
        .iter()
        .zip(&after)
        .any(|(n, a)| n.load(Ordering::SeqCst) < a + 20)
    {
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::SeqCst);
    let totals = [syncs, imports, tree].map(|t| t.join().expect("client"));
    eprintln!(
        "backup: clients had done {before:?} requests before it, {after:?} after, {totals:?} in all; report {report}"
    );

    // The backup is one instant: a prefix of every client's requests.
    let b =
        Connection::open_with_flags(&file, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open backup");
    let live =
        Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).expect("open live");
    let k_sync = ids_in(&b, SYNC_BASE);
    let k_import = ids_in(&b, IMPORT_BASE);
    assert_eq!(
        k_sync,
        (0..k_sync.len() as i64).collect::<Vec<_>>(),
        "sync runs: not a prefix"
    );
    assert_eq!(
        k_import,
        (0..k_import.len() as i64).collect::<Vec<_>>(),
        "import runs: not a prefix"
    );
    let (k_sync, k_import) = (k_sync.len() as u64, k_import.len() as u64);
    let audit_id = report["audit_id"].as_i64().expect("audit_id");
    // The audit log is the live one up to the backup's last id, no row missing.
    let b_audit = rows(&b, "SELECT * FROM audit ORDER BY id");
    assert_eq!(
        b_audit,
        rows(
            &live,
            &format!("SELECT * FROM audit WHERE id <= {audit_id} ORDER BY id")
        ),
        "audit log"
    );
    let imports_audited: u64 = b
        .query_row(
            "SELECT count(*) FROM audit WHERE action = 'usage.import'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    assert_eq!(
        imports_audited, k_import,
        "every import's runs and its audit row together"
    );
    let k_tree: u64 = b
        .query_row(
            "SELECT count(*) FROM audit WHERE action IN ('account.create', 'member.add', 'account.modify') AND target LIKE 't%'",
            [],
            |r| r.get(0),
        )
        .expect("count");
    // The tree is the audit log's replay: t{k} exists after 3k+1 requests, u{k}
    // after 3k+2, allocation 2 after 3k+3.
    let mut want_accounts = vec!["imports|100.0".to_string(), "syncs|100.0".to_string()];
    let mut want_members = vec![];
    for i in 0..k_tree {
        let k = i / 3;
        match i % 3 {
            0 => want_accounts.push(format!("t{k}|1.0")),
            1 => want_members.push(format!("u{k}|t{k}")),
            _ => {
                let a = want_accounts
                    .iter_mut()
                    .find(|a| a.starts_with(&format!("t{k}|")))
                    .expect("account");
                *a = format!("t{k}|2.0");
            }
        }
    }
    want_accounts.sort();
    want_members.sort();
    let texts = |sql: &str| -> Vec<String> {
        b.prepare(sql)
            .expect("prepare")
            .query_map([], |r| r.get::<_, String>(0))
            .expect("query")
            .collect::<Result<_, _>>()
            .expect("rows")
    };
    let mut b_accounts =
        texts("SELECT printf('%s|%.1f', name, allocation) FROM accounts ORDER BY name");
    let mut b_members = texts("SELECT user || '|' || account FROM members ORDER BY user, account");
    b_accounts.sort();
    b_members.sort();
    assert_eq!(b_accounts, want_accounts, "accounts");
    assert_eq!(b_members, want_members, "members");
    // The generation counts exactly the changes the copy holds.
    let gen_b = report["generation"].as_u64().expect("generation");
    assert_eq!(
        gen_b,
        g0 + k_sync + k_import + k_tree,
        "generation vs changes held"
    );
    // The cut lies between what the clients had seen acknowledged before and after.
    for (k, (lo, hi)) in [k_sync, k_import, k_tree]
        .iter()
        .zip(before.iter().zip(&after))
    {
        assert!(lo <= k && *k <= hi + 1, "cut {k} outside [{lo}, {hi}+1]");
    }
    // Every run in the copy is the live row, and the live database went on.
    let b_runs = rows(&b, "SELECT * FROM runs ORDER BY job_id, run");
    let live_runs = rows(&live, "SELECT * FROM runs ORDER BY job_id, run");
    assert!(
        b_runs.iter().all(|r| live_runs.contains(r)),
        "a run differs from the live row"
    );
    assert!(
        live_runs.len() as u64 >= b_runs.len() as u64 + 40,
        "the load went on after the backup"
    );
    assert!(b_runs.len() > 40_000);
    assert_eq!(report["runs"].as_u64(), Some(b_runs.len() as u64));
    drop((b, live));
    let backup_dump = dump(&file);

    // Restore: refused while budgetd runs, then stop, restore, start.
    let refused = Command::new(BUDGETD)
        .args([
            "--db",
            db.to_str().expect("utf8"),
            "--socket",
            sock.to_str().expect("utf8"),
            "--restore",
        ])
        .arg(&file)
        .output()
        .expect("budgetd --restore");
    assert!(!refused.status.success());
    let msg = String::from_utf8_lossy(&refused.stderr);
    assert!(
        msg.contains("budgetd is running") && msg.contains("stop it first"),
        "{msg}"
    );
    assert!(d.stop().success());
    let restored = Command::new(BUDGETD)
        .args([
            "--db",
            db.to_str().expect("utf8"),
            "--socket",
            sock.to_str().expect("utf8"),
            "--restore",
        ])
        .arg(&file)
        .output()
        .expect("budgetd --restore");
    let said = String::from_utf8_lossy(&restored.stdout);
    assert!(
        restored.status.success(),
        "{said}{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    assert!(
        said.contains(&format!("generation {gen_b}, last audit id {audit_id}")),
        "{said}"
    );
    assert!(said.contains(".before-restore-"), "{said}");
    let d2 = Daemon::start(&db, &sock);
    let c2 = d2.client();
    let h = call(&c2, "GET", "/v1/health", None).1;
    assert_eq!(h["generation"].as_u64(), Some(gen_b), "{h}");
    let audit = call(&c2, "GET", "/v1/audit?limit=100000", None).1;
    let audit = audit.as_array().expect("audit");
    assert_eq!(audit.len(), b_audit.len());
    assert_eq!(audit.last().map(|e| e["id"].as_i64()), Some(Some(audit_id)));
    let accounts = call(&c2, "GET", "/v1/accounts", None).1;
    assert_eq!(
        accounts.as_array().map(Vec::len),
        Some(want_accounts.len()),
        "{accounts}"
    );
    assert_eq!(
        dump(&db),
        backup_dump,
        "restored database differs from the backup"
    );
    drop(d2);
    // The replaced database was kept and still holds the newer state.
    let kept: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".before-restore-"))
        .collect();
    assert_eq!(kept.len(), 1);
    let kept_runs = rows(
        &Connection::open_with_flags(kept[0].path(), OpenFlags::SQLITE_OPEN_READ_ONLY)
            .expect("kept"),
        "SELECT count(*) FROM runs",
    );
    assert_eq!(
        kept_runs,
        [format!("Integer({})", 40_000 + totals[0] + totals[1])]
    );
}

#[test]
fn backup_refuses_what_it_must_and_says_why() {
    let s = common::start();
    let c = s.unix();
    // The default backup folder: `backups` beside the database.
    let folder = s.dir().join("backups");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/backup",
        Some(&json!({"path": s.dir().join("b.sqlite").display().to_string()})),
    );
    assert_eq!(st, 422, "{b}");
    assert!(
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("backup folder") && e.contains("backup_dir")),
        "{b}"
    );
    assert!(!s.dir().join("b.sqlite").exists());
    std::fs::create_dir(&folder).expect("backups folder");
    let file = folder.join("b.sqlite");
    let path = file.display().to_string();
    let req = |p: &str, overwrite: bool| json!({"path": p, "overwrite": overwrite});

    let (st, b) = call(&c, "POST", "/v1/backup", Some(&req("rel/b.sqlite", false)));
    assert_eq!(st, 422, "{b}");
    assert!(
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("must be absolute")),
        "{b}"
    );
    let missing = folder.join("no/such/b.sqlite");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/backup",
        Some(&req(&missing.display().to_string(), false)),
    );
    assert_eq!(st, 422, "{b}");
    assert!(
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("budgetd does not create it")),
        "{b}"
    );
    // Readers and plain users may not.
    let (st, b) = call(
        &s.tcp(Some(common::READER_TOKEN)),
        "POST",
        "/v1/backup",
        Some(&req(&path, false)),
    );
    assert_eq!(st, 403, "{b}");
    assert!(!file.exists());

    let (st, first) = call(&c, "POST", "/v1/backup", Some(&req(&path, false)));
    assert_eq!(st, 200, "{first}");
    let bytes = std::fs::read(&file).expect("backup");
    assert!(bytes.starts_with(b"SQLite format 3\0"));
    common::add_account(&c, "teama", None, 10.0);
    // No overwrite unless asked; the file is untouched.
    let (st, b) = call(&c, "POST", "/v1/backup", Some(&req(&path, false)));
    assert_eq!(st, 409, "{b}");
    assert!(
        b["error"]
            .as_str()
            .is_some_and(|e| e.contains("already exists")),
        "{b}"
    );
    assert_eq!(std::fs::read(&file).expect("backup"), bytes);
    let (st, second) = call(&c, "POST", "/v1/backup", Some(&req(&path, true)));
    assert_eq!(st, 200, "{second}");
    assert_eq!(
        second["generation"].as_u64(),
        first["generation"].as_u64().map(|g| g + 1),
        "{first} {second}"
    );
    // Nothing but the backup is left in the folder (no temporary file).
    let names: Vec<String> = std::fs::read_dir(&folder)
        .expect("dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["b.sqlite"]);
    let _: Value = second;
}

/// A backup is written only inside the backup folder, and never over the
/// database's own files (`-wal`, `-shm`, `-journal` included) or the socket,
/// even when the folder is the database's own (a careless `backup_dir`) and
/// `overwrite` is asked: each is refused with a clear error, and nothing
/// changes (a backup over the `-wal` file lost acknowledged writes at the next
/// crash; one over the socket kept budgetd from starting).
#[test]
fn backup_is_confined_to_its_folder_and_never_replaces_budgetds_own_files() {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.db");
    let sock = dir.path().join("budgetd.sock");
    let config = budget_service::Config::parse(&format!(
        "backup_dir = \"{}\"\n{}",
        dir.path().display(),
        common::config_text()
    ))
    .expect("config");
    let store = budget_service::Store::open(&db, &config.policy).expect("store");
    let s = common::Server::serve(budget_service::AppState::new(store, config), &sock, true);
    let c = s.unix();
    common::add_account(&c, "teama", None, 10.0);
    let before = common::observable(&c);
    // The database's files and the socket, as they are now.
    let ino = |p: &Path| std::fs::symlink_metadata(p).map(|m| m.ino()).ok();
    let own: Vec<_> = [
        "budget.db",
        "budget.db-wal",
        "budget.db-shm",
        "budgetd.sock",
    ]
    .iter()
    .map(|n| (n.to_string(), ino(&dir.path().join(n))))
    .collect();
    assert!(own.iter().all(|(_, i)| i.is_some()), "{own:?}");
    let sub = dir.path().join("sub");
    std::fs::create_dir(&sub).expect("sub");
    let outside = tempfile::tempdir().expect("tempdir");
    let refused = [
        (dir.path().join("budget.db"), "database files"),
        (dir.path().join("budget.db-wal"), "database files"),
        (dir.path().join("budget.db-shm"), "database files"),
        (dir.path().join("budget.db-journal"), "database files"),
        (sub.join("../budget.db-wal"), "database files"),
        (sock.clone(), "socket"),
        (outside.path().join("b.sqlite"), "outside the backup folder"),
    ];
    for (path, why) in &refused {
        for overwrite in [false, true] {
            let (st, b) = call(
                &c,
                "POST",
                "/v1/backup",
                Some(&json!({"path": path.display().to_string(), "overwrite": overwrite})),
            );
            assert_eq!(st, 422, "{} (overwrite {overwrite}): {b}", path.display());
            assert!(
                b["error"].as_str().is_some_and(|e| e.contains(why)),
                "{}: {b}",
                path.display()
            );
        }
    }
    let now: Vec<_> = own
        .iter()
        .map(|(n, _)| (n.clone(), ino(&dir.path().join(n))))
        .collect();
    assert_eq!(now, own, "a refused backup replaced one of budgetd's files");
    assert!(!dir.path().join("budget.db-journal").exists());
    assert!(
        std::fs::symlink_metadata(&sock)
            .expect("socket")
            .file_type()
            .is_socket()
    );
    assert_eq!(std::fs::read_dir(outside.path()).expect("dir").count(), 0);
    assert_eq!(
        common::observable(&c),
        before,
        "a refused backup changed something"
    );
    // Inside the folder (and below it), a backup is written.
    let (st, b) = call(
        &c,
        "POST",
        "/v1/backup",
        Some(&json!({"path": sub.join("b.sqlite").display().to_string()})),
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = call(&c, "GET", "/v1/accounts", None);
    assert_eq!(st, 200, "{b}");
}
