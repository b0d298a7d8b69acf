//! Plugin sync (idempotent and exact), the snapshot with ETag/304, and `why`.

use serde_json::{Value, json};

use crate::common::*;

fn sync(c: &budget_client::Client, runs: Value, at: i64) -> (u16, Value) {
    call(
        c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": at, "runs": runs})),
    )
}

#[test]
fn sync_is_idempotent_and_exact_across_repeats() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    add_member(&c, "alice", "teama");
    let t0 = 1_800_000_000;
    let batch = json!([
        {"job_id": 7, "run": 0, "account": "teama", "user": "alice", "gpus": 2, "state": "running", "start": t0, "min_runtime_secs": 3600},
        {"job_id": 8, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "pending"},
    ]);
    let (st, b) = sync(&c, batch.clone(), t0 + 10);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b, json!({"inserted": 2, "updated": 0, "unchanged": 0}));
    let (_, b) = sync(&c, batch.clone(), t0 + 20);
    assert_eq!(b, json!({"inserted": 0, "updated": 0, "unchanged": 2}));
    // A report with a moved (earlier) start leaves the start alone. (A later one is
    // the same run started again after slurmctld lost it: a row of its own, see
    // store::tests::a_run_slurmctld_lost_in_a_crash_stays_charged_and_the_next_is_its_own_row.)
    let moved = json!([{"job_id": 7, "run": 0, "account": "teama", "user": "alice", "gpus": 2, "state": "running", "start": t0 - 99}]);
    let (_, b) = sync(&c, moved, t0 + 30);
    assert_eq!(b, json!({"inserted": 0, "updated": 0, "unchanged": 1}));
    // Requeue: run 0 ends (requeued), run 1 starts; job 8 starts.
    let next = json!([
        {"job_id": 7, "run": 0, "account": "teama", "user": "alice", "gpus": 2, "state": "requeued", "start": t0, "end": t0 + 7200},
        {"job_id": 7, "run": 1, "account": "teama", "user": "alice", "gpus": 2, "state": "running", "start": t0 + 7300},
        {"job_id": 8, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "running", "start": t0 + 7200},
    ]);
    let (_, b) = sync(&c, next.clone(), t0 + 7400);
    assert_eq!(b, json!({"inserted": 1, "updated": 2, "unchanged": 0}));
    let (_, b) = sync(&c, next, t0 + 7500);
    assert_eq!(b, json!({"inserted": 0, "updated": 0, "unchanged": 3}));
    // A stale report of run 0 as running does not revive it; its end is final.
    let stale = json!([{"job_id": 7, "run": 0, "account": "teama", "user": "alice", "gpus": 2, "state": "ended", "start": t0, "end": t0 + 9999}]);
    let (_, b) = sync(&c, stale, t0 + 7600);
    assert_eq!(b["unchanged"], 1);
    // Usage is exact: 2 GPUs x 7200 s + 2 x 700 s + 1 x 800 s at t0 + 8000.
    let (_, u) = call(
        &c,
        "GET",
        &format!("/v1/usage?by=user&at={}", t0 + 8000),
        None,
    );
    let h = u["rows"][0]["usage_gpu_hours"].as_f64().expect("usage");
    assert!(
        (h - (2.0 * 7200.0 + 2.0 * 700.0 + 800.0) / 3600.0).abs() < 1e-9,
        "{u}"
    );
    // A bad run is refused on its own, named with the reason; the good runs
    // of the same batch are stored (one odd job must not stop the whole
    // cluster's accounting).
    let long_nodes = "n".repeat(129);
    let bad = json!([
        {"job_id": 9, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "pending"},
        {"job_id": 10, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "ended", "start": 50, "end": 10},
        {"job_id": 11, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "running", "start": t0, "nodes": long_nodes},
    ]);
    let (st, b) = sync(&c, bad.clone(), t0);
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["inserted"], 1, "{b}");
    let refused = b["refused"].as_array().expect("refused runs");
    assert_eq!(refused.len(), 2, "{b}");
    assert_eq!(
        (&refused[0]["job_id"], &refused[0]["index"]),
        (&json!(10), &json!(1))
    );
    assert!(
        refused[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("end (10) is before start (50)")),
        "{b}"
    );
    assert!(
        refused[1]["error"]
            .as_str()
            .is_some_and(|e| e.contains("nodes")),
        "{b}"
    );
    let (_, j) = call(&c, "GET", "/v1/jobs/9/why", None);
    assert_eq!(j["job_id"], 9, "{j}");
    // The same batch again: the good run is unchanged, the bad ones refused again.
    let (_, b) = sync(&c, bad, t0);
    assert_eq!(
        (&b["unchanged"], b["refused"].as_array().map(Vec::len)),
        (&json!(1), Some(2))
    );
    let (st, b) = call(
        &c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": 1, "runs": [], "extra": true})),
    );
    assert_eq!((st, err(&b).contains("unknown field `extra`")), (422, true));
}

#[test]
fn snapshot_serves_etag_and_304_until_a_write() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    let r1 = c
        .request("GET", "/v1/snapshot", &[], None)
        .expect("snapshot");
    assert_eq!(r1.status, 200);
    let etag = r1.etag().expect("etag").to_string();
    let snap: budget_protocol::PluginSnapshot = r1.json().expect("PluginSnapshot");
    assert_eq!(format!("\"{}\"", snap.version), etag);
    assert!(snap.fair_share.account("teama").is_some());
    let r2 = c
        .request("GET", "/v1/snapshot", &[("If-None-Match", &etag)], None)
        .expect("conditional");
    assert_eq!(r2.status, 304);
    assert!(r2.body.is_empty());
    assert_eq!(
        c.get_if_none_match("/v1/snapshot", Some(&etag))
            .expect("client helper"),
        None
    );
    // Any write invalidates it.
    add_account(&c, "teamb", None, 50.0);
    let r3 = c
        .request("GET", "/v1/snapshot", &[("If-None-Match", &etag)], None)
        .expect("after write");
    assert_eq!(r3.status, 200);
    assert_ne!(r3.etag(), Some(etag.as_str()));
    // The snapshot is the controller's (not a reader's, not an admin token's).
    for (token, want) in [
        (READER_TOKEN, 403),
        (ADMIN_TOKEN, 403),
        (CONTROLLER_TOKEN, 200),
    ] {
        assert_eq!(
            s.tcp(Some(token))
                .request("GET", "/v1/snapshot", &[], None)
                .expect("r")
                .status,
            want,
            "{token}"
        );
    }
}

#[test]
fn why_explains_tier_path_protection_and_preemption() {
    let s = start();
    let c = s.unix();
    // teama is entitled to ~6 GPUs (1000 GPU-h a week) and holds 1: the
    // cost-aware rule lets it take GPUs no time limit will release.
    add_account(&c, "teama", None, 1000.0);
    add_account(&c, "teamb", None, 100.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let now = budget_service::clock::now();
    // teamb is far over budget; its job's protection has ended.
    let runs = json!([
        {"job_id": 1, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "ended", "start": now - 86_400, "end": now - 3600},
        {"job_id": 2, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "running", "start": now - 7200, "min_runtime_secs": 3600},
        {"job_id": 3, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "state": "pending", "min_runtime_secs": 600},
        {"job_id": 4, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "running", "start": now - 60, "min_runtime_secs": 3600},
    ]);
    let (st, b) = sync(&c, runs, now);
    assert_eq!(st, 200, "{b}");
    let (st, w) = call(&c, "GET", "/v1/jobs/2/why", None);
    assert_eq!(st, 200, "{w}");
    assert_eq!(w["tier"], "over_budget");
    assert_eq!(w["protected_until"], now - 7200 + 3600);
    assert_eq!(w["protected_now"], false);
    let path: Vec<&str> = w["path"]
        .as_array()
        .expect("path")
        .iter()
        .map(|p| p["node"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(path, ["root", "teamb", "teamb/bob"]);
    assert!(w["path"][1]["ratio"].as_f64().unwrap_or(0.0) > 1.0);
    assert_eq!(w["preemptable_by"][0]["job_id"], 3);
    assert_eq!(
        w["preemptable_by"][0]["reason"]["reason"],
        "victim_over_budget"
    );
    let (_, w3) = call(&c, "GET", "/v1/jobs/3/why", None);
    assert_eq!(w3["tier"], "budgeted");
    assert_eq!(w3["rank"], 1);
    assert_eq!(
        w3["could_preempt"].as_array().map(Vec::len),
        Some(1),
        "{w3}"
    );
    assert!(w3["priority"].as_u64().unwrap_or(0) >= 3_000_000_000);
    // ... and says why in the rule's words.
    let wait = w3["wait"].as_str().unwrap_or_default();
    assert!(
        wait.starts_with("preempting job 2: its window ended 1h")
            && wait.contains(" ago, least work lost (16.00 GPU-h)"),
        "{wait}"
    );
    assert_eq!(w["wait"], Value::Null);
    // Job 4 is inside its protected window: nobody may preempt it.
    let (_, w4) = call(&c, "GET", "/v1/jobs/4/why", None);
    assert_eq!(
        (
            w4["protected_now"].as_bool(),
            w4["preemptable_by"].as_array().map(Vec::len)
        ),
        (Some(true), Some(0))
    );
    let (st, _) = call(&c, "GET", "/v1/jobs/999/why", None);
    assert_eq!(st, 404);
    let (st, b) = call(&c, "GET", "/v1/jobs/abc/why", None);
    assert_eq!((st, err(&b).contains("number")), (400, true));
    // alice may explain her own job but not bob's.
    let alice = s.tcp(Some(ALICE_TOKEN));
    assert_eq!(call(&alice, "GET", "/v1/jobs/3/why", None).0, 200);
    assert_eq!(call(&alice, "GET", "/v1/jobs/2/why", None).0, 403);
}
