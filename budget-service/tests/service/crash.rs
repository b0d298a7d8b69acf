//! The real budgetd binary's life: kill -9 during a stream of sync requests
//! (after a restart on the same database the ledger holds exactly the
//! acknowledged requests' effects — nothing lost, nothing twice; the one
//! request whose answer never arrived may have been applied or not, but only
//! atomically), and a clean stop on SIGTERM.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;

use crate::daemon::*;

const BASE: i64 = 1_800_000_000;

/// Request i starts job i (run 0) and ends job i-1 at the same instant.
fn request(i: i64) -> serde_json::Value {
    let mut runs = vec![
        json!({"job_id": i, "run": 0, "account": "teama", "user": "alice", "gpus": 1,
        "state": "running", "start": BASE + i}),
    ];
    if i > 0 {
        runs.push(
            json!({"job_id": i - 1, "run": 0, "account": "teama", "user": "alice", "gpus": 1,
            "state": "ended", "start": BASE + i - 1, "end": BASE + i}),
        );
    }
    json!({"collected_at": BASE + i, "runs": runs})
}

#[test]
fn ledger_equals_the_acknowledged_requests_after_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("b.db");
    let sock = dir.path().join("s.sock");
    let mut d = Daemon::start(&db, &sock);
    let client = d.client();
    crate::common::add_account(&client, "teama", None, 100.0);
    let acked = Arc::new(AtomicUsize::new(0));
    let counter = acked.clone();
    // Sequential stream: requests 0..n acknowledged, then at most one in flight.
    let streamer = std::thread::spawn(move || {
        let mut i: i64 = 0;
        loop {
            let body = serde_json::to_vec(&request(i)).expect("json");
            match client.request(
                "POST",
                budget_protocol::SYNC_PATH,
                &[("Content-Type", "application/json")],
                Some(&body),
            ) {
                Ok(r) if r.status == 200 => {
                    let out: budget_protocol::SyncOutcome = r.json().expect("outcome");
                    assert_eq!(out.inserted, 1, "request {i} must insert its job once");
                    i += 1;
                    counter.store(usize::try_from(i).unwrap_or(0), Ordering::SeqCst);
                }
                Ok(r) => panic!("request {i}: status {}", r.status),
                Err(_) => return i, // the daemon died: request i is the one in flight
            }
            if i > 100_000 {
                return i;
            }
        }
    });
    while acked.load(Ordering::SeqCst) < 300 {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    d.kill9();
    let in_flight = streamer.join().expect("streamer");
    let acked = in_flight; // requests 0..in_flight were acknowledged
    assert!(acked >= 300);

    // Restart on the same database.
    let d2 = Daemon::start(&db, &sock);
    let conn = rusqlite::Connection::open(&db).expect("open db");
    let mut st = conn
        .prepare("SELECT job_id, run, start, end, state FROM runs ORDER BY job_id")
        .expect("prepare");
    let rows: BTreeMap<i64, (i64, i64, Option<i64>, String)> = st
        .query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                (r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?),
            ))
        })
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows");
    let applied_in_flight = rows.contains_key(&acked);
    let n = if applied_in_flight { acked + 1 } else { acked };
    assert_eq!(
        rows.len() as i64,
        n,
        "ledger has {} rows for {acked} acknowledged requests",
        rows.len()
    );
    for job in 0..n {
        let (run, start, end, state) = rows
            .get(&job)
            .cloned()
            .unwrap_or_else(|| panic!("job {job} lost"));
        assert_eq!((run, start), (0, BASE + job), "job {job}");
        if job + 1 < n {
            assert_eq!(
                (end, state.as_str()),
                (Some(BASE + job + 1), "ended"),
                "job {job} should be ended"
            );
        } else {
            assert_eq!(
                (end, state.as_str()),
                (None, "running"),
                "last job {job} should still run"
            );
        }
    }
    // Replaying every acknowledged request changes nothing (no duplicates).
    let c = d2.client();
    for i in [0, acked / 2, acked - 1] {
        let body = serde_json::to_vec(&request(i)).expect("json");
        let r = c
            .request("POST", budget_protocol::SYNC_PATH, &[], Some(&body))
            .expect("replay");
        let out: budget_protocol::SyncOutcome = r.json().expect("outcome");
        assert_eq!(
            (out.inserted, out.updated),
            (0, 0),
            "replay of {i} changed the ledger"
        );
    }
    // And the service's own view (the mirror rebuilt at start) agrees.
    let u: serde_json::Value = c
        .get_json(&format!(
            "/v1/usage?by=user&since={BASE}&at={}",
            BASE + n + 10
        ))
        .expect("usage");
    let expected_secs = (n - 1) + 10 + 1; // n-1 ended runs of 1 s, the last running from BASE+n-1 to BASE+n+10
    let got = u["rows"][0]["usage_gpu_hours"].as_f64().unwrap_or(0.0) * 3600.0;
    assert!(
        (got - expected_secs as f64).abs() < 1e-6,
        "usage {got} s != {expected_secs} s"
    );
}

#[test]
fn sigterm_stops_budgetd_cleanly_and_a_stale_socket_is_replaced() {
    let dir = tempfile::tempdir().expect("tempdir");
    let sock = dir.path().join("s.sock");
    let db = dir.path().join("b.db");
    let mut d = Daemon::start(&db, &sock);
    crate::common::add_account(&d.client(), "teama", None, 10.0);
    let status = d.stop();
    assert!(status.success(), "budgetd exited with {status}");
    assert!(!sock.exists(), "socket left behind after SIGTERM");
    // A stale socket file (nobody listening) does not stop a restart.
    let stale = std::os::unix::net::UnixListener::bind(&sock).expect("stale socket");
    drop(stale);
    let d = Daemon::start(&db, &sock);
    let (_, accounts) = crate::common::call(&d.client(), "GET", "/v1/accounts", None);
    assert_eq!(accounts[0]["name"], "teama", "{accounts}");
}
