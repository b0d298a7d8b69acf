//! `POST /v1/usage/import`: sacct history, bad lines with line numbers in
//! both modes, unknown accounts, idempotent re-import; a large import stored
//! in batches (a sync goes between them, the counts are a single batch's, a
//! partial import completed by importing the file again charges once).

use serde_json::Value;

use crate::common::*;

const HEADER: &str = "JobID|Account|User|Partition|AllocTRES|Start|End|State";

fn import(c: &budget_client::Client, text: &str, skip: bool) -> (u16, Value) {
    let path = format!("/v1/usage/import?tz=UTC&skip_invalid={skip}");
    let r = c
        .request(
            "POST",
            &path,
            &[("Content-Type", "text/plain")],
            Some(text.as_bytes()),
        )
        .expect("import");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

fn ledger_usage(c: &budget_client::Client) -> Value {
    call(c, "GET", "/v1/usage?by=user&since=0&at=2000000000", None).1
}

fn setup() -> Server {
    let s = start();
    add_account(&s.unix(), "teama", None, 600.0);
    add_account(&s.unix(), "teamb", None, 300.0);
    s
}

/// A Unix time as sacct prints it (`%Y-%m-%dT%H:%M:%S`, UTC here).
fn sacct_time(t: i64) -> String {
    jiff::Timestamp::from_second(t)
        .expect("time")
        .strftime("%Y-%m-%dT%H:%M:%S")
        .to_string()
}

#[test]
fn bad_lines_are_reported_with_numbers_and_import_nothing_by_default() {
    let s = setup();
    let c = s.unix();
    let text = format!(
        "{HEADER}\n\
         100|teama|alice|gpu|gres/gpu=2|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
         101|teama|alice|gpu|gres/gpu=2|2026-01-01T00:00:00|2026-01-01T01:00:00\n\
         102|teama|alice|gpu|gres/gpu=2|2026-01-01T25:00:00|2026-01-01T01:00:00|COMPLETED\n\
         103|teamz|bob|gpu|gres/gpu=2|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
         104|teamb|bob|gpu|gres/gpu:h100=1|2026-01-01T00:00:00|Unknown|RUNNING\n"
    );
    let before = (observable(&c), ledger_usage(&c));
    let (st, b) = import(&c, &text, false);
    assert_eq!(st, 422, "{b}");
    let msg = err(&b);
    assert!(msg.contains("3 invalid line(s); nothing imported"), "{msg}");
    assert!(
        msg.contains("line 3: expected 8 '|'-separated fields, found 7"),
        "{msg}"
    );
    assert!(
        msg.contains("line 4: bad Start \"2026-01-01T25:00:00\""),
        "{msg}"
    );
    assert!(msg.contains("line 5: unknown account \"teamz\""), "{msg}");
    let lines: Vec<u64> = b["details"]["invalid"]
        .as_array()
        .expect("details")
        .iter()
        .filter_map(|e| e["line"].as_u64())
        .collect();
    assert_eq!(lines, [3, 4, 5]);
    assert_eq!(
        (observable(&c), ledger_usage(&c)),
        before,
        "a refused import changed something"
    );

    // With skip_invalid the valid lines go in, the same bad lines are reported.
    let (st, b) = import(&c, &text, true);
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        (b["lines"].as_u64(), b["inserted"].as_u64()),
        (Some(5), Some(2))
    );
    let lines: Vec<u64> = b["invalid"]
        .as_array()
        .expect("invalid")
        .iter()
        .filter_map(|e| e["line"].as_u64())
        .collect();
    assert_eq!(lines, [3, 4, 5]);
    let after = ledger_usage(&c);
    let alice = after["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["user"] == "alice")
        .cloned()
        .unwrap_or_default();
    assert_eq!(alice["usage_gpu_hours"], 2.0);

    // Re-importing the same file changes nothing, audit included.
    let before = (observable(&c), ledger_usage(&c));
    let (st, b) = import(&c, &text, true);
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        (
            b["inserted"].as_u64(),
            b["updated"].as_u64(),
            b["unchanged"].as_u64()
        ),
        (Some(0), Some(0), Some(2))
    );
    assert_eq!((observable(&c), ledger_usage(&c)), before);
}

#[test]
fn bad_header_empty_file_and_non_admins_are_refused() {
    let s = setup();
    let c = s.unix();
    let before = observable(&c);
    let (st, b) = import(&c, "JobID|User|Start\n1|a|2026-01-01T00:00:00\n", true);
    assert_eq!(st, 422);
    assert!(
        err(&b).contains("line 1: header lacks column(s) account"),
        "{b}"
    );
    let (st, b) = import(&c, "", true);
    assert_eq!((st, err(&b).contains("empty file")), (422, true));
    let (st, _) = import(&s.tcp(Some(READER_TOKEN)), &format!("{HEADER}\n"), true);
    assert_eq!(st, 403);
    let r = c
        .request(
            "POST",
            "/v1/usage/import?tz=Mars/Olympus",
            &[],
            Some(format!("{HEADER}\n").as_bytes()),
        )
        .expect("request");
    assert_eq!(r.status, 400);
    assert_eq!(observable(&c), before);
}

#[test]
fn import_has_its_own_larger_body_limit() {
    let s = setup();
    let c = s.unix();
    // ~100 KB: above the JSON limit (64 KiB in the test config), below the import limit.
    let mut text = format!("{HEADER}\n");
    for i in 0..1200 {
        text.push_str(&format!(
            "{}|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n",
            5000 + i
        ));
    }
    assert!(text.len() > 65_536 && text.len() < 200_000);
    let (st, b) = import(&c, &text, false);
    assert_eq!((st, b["inserted"].as_u64()), (200, Some(1200)), "{b}");
    let before = observable(&c);
    let mut big = text.clone();
    while big.len() < 300_000 {
        big.push_str(&text[HEADER.len() + 1..]);
    }
    let (st, b) = import(&c, &big, true);
    assert_eq!(st, 413, "{b}");
    assert!(err(&b).contains("limit of 200000 bytes"), "{b}");
    assert_eq!(observable(&c), before);
}

#[test]
fn an_imported_end_the_controller_contradicts_is_refused_and_the_run_stays_charged() {
    let s = setup();
    let c = s.unix();
    let now = budget_service::clock::now();
    let run = |id: u32| {
        serde_json::json!({"job_id": id, "run": 0, "account": "teama", "user": "alice",
                           "gpus": 1, "state": "running", "start": now - 4 * 3600})
    };
    let sync = |body: serde_json::Value| {
        let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&body));
        assert_eq!(st, 200, "{b}");
    };
    // Job 300 runs, started 4 h ago; then the controller's complete live set
    // has it still running.
    sync(serde_json::json!({"collected_at": now, "runs": [run(300)]}));
    let live_at = budget_service::clock::now();
    sync(serde_json::json!({"collected_at": live_at, "runs": [run(300)], "live": [[300, 0]]}));
    // Job 301 is first seen after that set, in a partial sync.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    sync(serde_json::json!({"collected_at": live_at + 1, "runs": [run(301)]}));
    // sacct says both ended 3 h ago.
    let line = |id: u32| {
        format!(
            "{id}|teama|alice|gpu|gres/gpu=1|{}|{}|COMPLETED\n",
            sacct_time(now - 4 * 3600),
            sacct_time(now - 3 * 3600)
        )
    };
    let text = format!("{HEADER}\n{}{}", line(300), line(301));
    let (st, b) = import(&c, &text, false);
    assert_eq!(st, 200, "{b}");
    // 300's end is contradicted by the controller (running after it): refused,
    // listed as a conflict. 301's is not (the controller never saw it alive
    // after that end): taken, as an import closes runs after an outage.
    let conflicts: Vec<u64> = b["conflicts"]
        .as_array()
        .expect("conflicts")
        .iter()
        .filter_map(|r| r["job_id"].as_u64())
        .collect();
    assert_eq!(conflicts, [300], "{b}");
    assert_eq!(b["updated"], 1, "{b}");
    // Job 300 is still charged as running (4 GPU-h, not 1); 301 for its hour.
    let (_, u) = call(
        &c,
        "GET",
        &format!("/v1/usage?by=user&at={}", live_at + 2),
        None,
    );
    let h = u["rows"][0]["usage_gpu_hours"].as_f64().expect("usage");
    assert!((h - 5.0).abs() < 0.01, "{u}");
}

#[test]
fn a_sync_reporting_running_a_run_an_import_ended_keeps_the_end_and_is_counted() {
    let s = setup();
    let c = s.unix();
    let now = budget_service::clock::now();
    let run = |id: u32| {
        serde_json::json!({"job_id": id, "run": 0, "account": "teama", "user": "alice",
                           "gpus": 1, "state": "running", "start": now - 4 * 3600})
    };
    let sync = |at: i64, runs: serde_json::Value| {
        let (st, b) = call(
            &c,
            "POST",
            "/v1/sync/jobs",
            Some(&serde_json::json!({"collected_at": at, "runs": runs})),
        );
        assert_eq!(st, 200, "{b}");
        b
    };
    let name = "budget_sync_contradicted_runs_total";
    // Jobs 400 and 401 run; no complete live set yet, so an import may end them.
    sync(now - 3600, serde_json::json!([run(400), run(401)]));
    assert_eq!(metric(&c, name), Some(0.0));
    // sacct says 400 ended 3 h ago.
    let text = format!(
        "{HEADER}\n400|teama|alice|gpu|gres/gpu=1|{}|{}|COMPLETED\n",
        sacct_time(now - 4 * 3600),
        sacct_time(now - 3 * 3600)
    );
    let (st, b) = import(&c, &text, false);
    assert_eq!((st, &b["updated"]), (200, &serde_json::json!(1)), "{b}");
    // The controller still reports both running: the import's end is kept
    // (counted unchanged), and the contradiction is counted, once per report.
    let b = sync(now, serde_json::json!([run(400), run(401)]));
    assert_eq!(b["unchanged"], 2, "{b}");
    assert_eq!(metric(&c, name), Some(1.0));
    sync(now + 1, serde_json::json!([run(400)]));
    assert_eq!(metric(&c, name), Some(2.0));
    // A late report collected before the end contradicts nothing.
    sync(now - 3 * 3600 - 60, serde_json::json!([run(400)]));
    assert_eq!(metric(&c, name), Some(2.0));
    // 400 stays charged for its hour only; 401 for the 4 h it ran.
    let (_, u) = call(&c, "GET", &format!("/v1/usage?by=user&at={now}"), None);
    let h = u["rows"][0]["usage_gpu_hours"].as_f64().expect("usage");
    assert!((h - 5.0).abs() < 0.01, "{u}");
}

/// budgetd storing imports in batches of `batch` runs, with its state at
/// hand (its store lock, to hold an import between two batches).
struct Batched {
    server: Server,
    state: budget_service::AppState,
    db: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

fn batched(batch: usize) -> Batched {
    batched_on(tempfile::tempdir().expect("tempdir"), batch)
}

/// [`batched`] on the database `budget.db` already in `dir`, if any.
fn batched_on(dir: tempfile::TempDir, batch: usize) -> Batched {
    let db = dir.path().join("budget.db");
    let config =
        budget_service::Config::parse(&format!("import_batch_runs = {batch}\n{}", config_text()))
            .expect("config");
    let store = budget_service::Store::open(&db, &config.policy).expect("store");
    let state = budget_service::AppState::new(store, config);
    let server = Server::serve(state.clone(), &dir.path().join("budgetd.sock"), false);
    Batched {
        server,
        state,
        db,
        _dir: dir,
    }
}

impl Batched {
    fn lock(&self) -> std::sync::MutexGuard<'_, budget_service::Store> {
        self.state.store.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes the store lock at a moment `ready` says yes to (tried each
    /// time the lock is free: between two of an import's batches), and holds it.
    fn lock_when(
        &self,
        ready: impl Fn(&budget_service::Store) -> bool,
    ) -> std::sync::MutexGuard<'_, budget_service::Store> {
        loop {
            let g = self.lock();
            if ready(&g) {
                return g;
            }
            drop(g);
            std::thread::yield_now();
        }
    }
}

/// `n` (at most 1,380) one-GPU, one-hour completed runs of jobs `first..`,
/// users u0-u6 in teama and teamb.
fn sacct_file(first: u32, n: u32) -> String {
    assert!(n <= 23 * 60);
    let mut text = format!("{HEADER}\n");
    for i in 0..n {
        let (h, m) = (i / 60, i % 60);
        text.push_str(&format!(
            "{}|{}|u{}|gpu|gres/gpu=1|2026-01-01T{h:02}:{m:02}:00|2026-01-01T{:02}:{m:02}:00|COMPLETED\n",
            first + i,
            if i % 2 == 0 { "teama" } else { "teamb" },
            i % 7,
            h + 1,
        ));
    }
    text
}

fn total_usage(c: &budget_client::Client) -> f64 {
    ledger_usage(c)["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["usage_gpu_hours"].as_f64())
        .sum()
}

fn setup_accounts(c: &budget_client::Client) {
    add_account(c, "teama", None, 600.0);
    add_account(c, "teamb", None, 300.0);
}

/// Runs `import` on a thread of its own.
fn import_in_background(
    c: budget_client::Client,
    text: String,
) -> std::thread::JoinHandle<(u16, Value)> {
    std::thread::spawn(move || import(&c, &text, false))
}

#[test]
fn a_sync_sent_during_a_large_import_is_answered_before_the_import_completes() {
    let b = batched(5);
    let c = b.server.unix();
    setup_accounts(&c);
    let n = 1200;
    let (tx, events) = std::sync::mpsc::channel();
    let import_tx = tx.clone();
    let import_client = b.server.unix();
    let importing = std::thread::spawn(move || {
        let answer = import(&import_client, &sacct_file(10_000, n), false);
        import_tx.send("import").expect("event");
        answer
    });
    // Hold the import between two batches: some of its runs are stored, not all.
    let held = b.lock_when(|s| !s.ledger().is_empty());
    let stored = held.ledger().len();
    assert!(
        stored < n as usize,
        "the import held the store lock from its first run to its last ({stored} runs)"
    );
    // The controller's sync arrives now and queues at the store lock.
    let sync_tx = tx;
    let sync_client = b.server.unix();
    let syncing = std::thread::spawn(move || {
        let body = serde_json::json!({"collected_at": budget_service::clock::now(), "runs": [
            {"job_id": 90, "run": 0, "account": "teama", "user": "alice", "gpus": 1,
             "state": "running", "start": budget_service::clock::now() - 60}]});
        let (st, out) = call(&sync_client, "POST", "/v1/sync/jobs", Some(&body));
        sync_tx.send("sync").expect("event");
        (st, out)
    });
    while b
        .state
        .controller_waiting
        .load(std::sync::atomic::Ordering::SeqCst)
        == 0
    {
        std::thread::yield_now();
    }
    drop(held);
    // The sync goes ahead of the import's next batch; hold the import again
    // once the sync's run is stored, until the sync's answer is in.
    let held = b.lock_when(|s| s.ledger().find(90, 0, 0).is_some());
    let stored = held.ledger().len() - 1;
    assert!(
        stored < n as usize,
        "the import completed before the sync was stored"
    );
    let (st, out) = syncing.join().expect("sync thread");
    assert_eq!(
        (st, &out["inserted"]),
        (200, &serde_json::json!(1)),
        "{out}"
    );
    drop(held);
    let (st, report) = importing.join().expect("import thread");
    assert_eq!(
        (st, &report["inserted"]),
        (200, &serde_json::json!(n)),
        "{report}"
    );
    let order: Vec<&str> = events.try_iter().collect();
    assert_eq!(order, ["sync", "import"]);
    assert_eq!(b.lock().ledger().len(), n as usize + 1);
}

#[test]
fn an_import_stopped_between_batches_is_completed_by_importing_the_file_again_charging_once() {
    let b = batched(50);
    let c = b.server.unix();
    setup_accounts(&c);
    let n = 1200u32;
    let text = sacct_file(10_000, n);
    let importing = import_in_background(b.server.unix(), text.clone());
    // The database as a crash (kill -9, power loss) between two batches
    // leaves it: the batches committed so far, nothing of the rest.
    let crashed = tempfile::tempdir().expect("tempdir");
    let held = b.lock_when(|s| !s.ledger().is_empty());
    let kept = held.ledger().len();
    assert!(kept > 0 && kept < n as usize, "{kept} runs stored");
    rusqlite::Connection::open(&b.db)
        .expect("open")
        .execute(
            "VACUUM INTO ?1",
            [crashed.path().join("budget.db").display().to_string()],
        )
        .expect("copy");
    drop(held);
    let (st, _) = importing.join().expect("import thread");
    assert_eq!(st, 200);
    drop(b);

    // budgetd started again on that database: the committed batches are
    // there, each with its audit row.
    let b = batched_on(crashed, 50);
    let c = b.server.unix();
    assert_eq!(b.lock().ledger().len(), kept);
    assert_eq!(kept % 50, 0, "a batch is stored whole or not at all");
    let (_, audit) = call(&c, "GET", "/v1/audit", None);
    let batches: Vec<u64> = audit
        .as_array()
        .or_else(|| audit["entries"].as_array())
        .expect("audit")
        .iter()
        .filter(|e| e["action"] == "usage.import")
        .filter_map(|e| e["new"]["batch"].as_u64())
        .collect();
    assert_eq!(batches.len(), kept / 50, "{audit}");
    assert!(((total_usage(&c)) - kept as f64).abs() < 1e-6);

    // The same file again completes the import; nothing is charged twice.
    let (st, report) = import(&c, &text, false);
    assert_eq!(st, 200, "{report}");
    assert_eq!(
        (
            &report["inserted"],
            &report["unchanged"],
            &report["updated"]
        ),
        (
            &serde_json::json!(n as usize - kept),
            &serde_json::json!(kept),
            &serde_json::json!(0)
        ),
        "{report}"
    );
    assert_eq!(report["conflicts"], serde_json::json!([]));
    assert_eq!(b.lock().ledger().len(), n as usize);
    let total = total_usage(&c);
    assert!(
        (total - f64::from(n)).abs() < 1e-6,
        "charged {total} GPU-h for {n}"
    );
    // And once more: everything unchanged.
    let (_, report) = import(&c, &text, false);
    assert_eq!(report["unchanged"], serde_json::json!(n), "{report}");
}

#[test]
fn a_batched_import_reports_what_a_single_batch_does() {
    let now = budget_service::clock::now();
    // Inserted: 40 new runs; updated: 10 synced running, ended by the file;
    // unchanged: 10 imported before; conflicts: 5 stored with another user;
    // one invalid line, skipped.
    let mut text = format!("{HEADER}\n");
    for i in 0..65u32 {
        let user = if i >= 60 { "bob" } else { "alice" };
        text.push_str(&format!(
            "{}|teama|{user}|gpu|gres/gpu=2|{}|{}|COMPLETED\n",
            500 + i,
            sacct_time(now - 5 * 3600 - i64::from(i)),
            sacct_time(now - 3600)
        ));
    }
    text.push_str("999|teama|alice|gpu|gres/gpu=2|2026-01-01T25:00:00|Unknown|RUNNING\n");
    let earlier: String = text
        .lines()
        .take(1)
        .chain(text.lines().skip(51).take(10))
        .fold(String::new(), |mut s, l| {
            s.push_str(l);
            s.push('\n');
            s
        });
    let run = |i: u32, user: &str| {
        serde_json::json!({"job_id": 500 + i, "run": 0, "account": "teama", "user": user,
                           "gpus": 2, "state": "running", "start": now - 5 * 3600 - i64::from(i)})
    };
    let mut synced: Vec<Value> = (40..50).map(|i| run(i, "alice")).collect();
    synced.extend((60..65).map(|i| run(i, "alice")));
    let mut results = Vec::new();
    for batch in [1_000_000, 7] {
        let b = batched(batch);
        let c = b.server.unix();
        setup_accounts(&c);
        let (st, out) = call(
            &c,
            "POST",
            "/v1/sync/jobs",
            Some(&serde_json::json!({"collected_at": now - 1800, "runs": synced})),
        );
        assert_eq!(st, 200, "{out}");
        let (st, out) = import(&c, &earlier, false);
        assert_eq!(
            (st, &out["inserted"]),
            (200, &serde_json::json!(10)),
            "{out}"
        );
        let (st, report) = import(&c, &text, true);
        assert_eq!(st, 200, "{report}");
        results.push((report, ledger_usage(&c), b.lock().ledger().len()));
    }
    let (single, batched) = (&results[0], &results[1]);
    assert_eq!(
        (
            &single.0["inserted"],
            &single.0["updated"],
            &single.0["unchanged"],
            single.0["conflicts"].as_array().map(Vec::len),
            single.0["invalid"].as_array().map(Vec::len),
        ),
        (
            &serde_json::json!(40),
            &serde_json::json!(10),
            &serde_json::json!(10),
            Some(5),
            Some(1)
        ),
        "{}",
        single.0
    );
    assert_eq!(single, batched);
}
