//! `GET /v1/runs`, what `budgetctl whatif` replays: the runs of a range with
//! their submit time, limit, contract and checkpoint as synced by the plugin,
//! the cluster's GPUs, the window; runs outside the range left out; scoped as
//! the other reads (admins and readers all, a coordinator their subtree, a
//! user their own and their accounts'), the rest counted, not named; bad
//! ranges refused.

use serde_json::{Value, json};

use crate::common::*;

fn jobs(b: &Value) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = b["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| {
            (
                r["job_id"].as_u64().expect("id"),
                r["run"].as_u64().expect("run"),
            )
        })
        .collect();
    v.sort_unstable();
    v
}

#[test]
fn runs_of_a_range_scoped_by_caller() {
    let s = Server::start_with_cluster(&config_text(), 64);
    let c = s.unix();
    let now = budget_protocol_now();
    add_account(&c, "org", None, 1000.0);
    add_account(&c, "teama", Some("org"), 400.0);
    add_account(&c, "teamb", None, 300.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/coordinators",
        Some(&json!({"user": "carol", "account": "org"})),
    );
    assert_eq!(st, 201, "{b}");
    let h = 3600;
    let run = |job: u32,
               run: u32,
               acct: &str,
               user: &str,
               state: &str,
               submit: i64,
               start: Option<i64>,
               end: Option<i64>| {
        json!({"job_id": job, "run": run, "account": acct, "user": user, "gpus": 4,
               "submit": submit, "state": state, "start": start, "end": end,
               "min_runtime_secs": 1800, "time_limit_secs": 4 * h, "checkpoint_secs": 600,
               "nodes": "n1"})
    };
    let sync = json!({"collected_at": now, "runs": [
        // Ended long before the range: left out.
        run(1, 0, "teama", "alice", "ended", now - 100 * h, Some(now - 99 * h), Some(now - 98 * h)),
        // Requeued inside the range, then running.
        run(2, 0, "teama", "alice", "requeued", now - 10 * h, Some(now - 9 * h), Some(now - 8 * h)),
        run(2, 1, "teama", "alice", "running", now - 8 * h, Some(now - 7 * h), None),
        // Started before the range, ended in it.
        run(3, 0, "teamb", "bob", "ended", now - 30 * h, Some(now - 25 * h), Some(now - 5 * h)),
        // Pending since before the range.
        run(4, 0, "teamb", "bob", "pending", now - 30 * h, None, None),
    ]});
    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let since = now - 20 * h;
    let path = format!("/v1/runs?since={since}&until={now}");

    let (st, b) = call(&s.tcp(Some(ADMIN_TOKEN)), "GET", &path, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(jobs(&b), vec![(2, 0), (2, 1), (3, 0), (4, 0)]);
    assert_eq!(
        (b["since"].as_i64(), b["until"].as_i64()),
        (Some(since), Some(now))
    );
    assert_eq!(b["cluster_gpus"], 64);
    assert_eq!(b["window_secs"], 7 * 86_400);
    assert_eq!(b["hidden"], 0);
    let r = b["runs"]
        .as_array()
        .and_then(|v| v.iter().find(|r| r["job_id"] == 2 && r["run"] == 1))
        .expect("job 2 run 1");
    assert_eq!(r["submit"], now - 8 * h);
    assert_eq!(r["state"], "running");
    assert_eq!(r["time_limit_secs"], 4 * h);
    assert_eq!(r["min_runtime_secs"], 1800);
    assert_eq!(r["checkpoint_secs"], 600);
    assert_eq!(r["account"], "teama");

    // A reader sees all; the coordinator of org its subtree (teama), alice
    // her own; the rest is counted, not named.
    let (st, b) = call(&s.tcp(Some(READER_TOKEN)), "GET", &path, None);
    assert_eq!((st, jobs(&b).len()), (200, 4), "{b}");
    let (st, b) = call(&s.tcp(Some(CAROL_TOKEN)), "GET", &path, None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(jobs(&b), vec![(2, 0), (2, 1)]);
    assert_eq!(b["hidden"], 2);
    assert!(!b.to_string().contains("bob"), "{b}");
    let (st, b) = call(&s.tcp(Some(ALICE_TOKEN)), "GET", &path, None);
    assert_eq!(
        (st, jobs(&b), b["hidden"].as_u64()),
        (200, vec![(2, 0), (2, 1)], Some(2))
    );

    // The default range: one window ending now.
    let (st, b) = call(&c, "GET", "/v1/runs", None);
    assert_eq!(st, 200, "{b}");
    assert_eq!(
        b["until"]
            .as_i64()
            .zip(b["since"].as_i64())
            .map(|(u, s)| u - s),
        Some(7 * 86_400)
    );
    assert_eq!(jobs(&b), vec![(1, 0), (2, 0), (2, 1), (3, 0), (4, 0)]);

    // Bad ranges: 400, with the reason.
    for (q, want) in [
        (
            format!("since={now}&until={since}"),
            "since must not be after until",
        ),
        (format!("since=0&until={now}"), "at most"),
        ("until=yesterday".to_string(), "until"),
        ("what=1".to_string(), "what"),
    ] {
        let (st, b) = call(&c, "GET", &format!("/v1/runs?{q}"), None);
        assert_eq!(st, 400, "{q}: {b}");
        assert!(err(&b).contains(want), "{q}: {b}");
    }
}

fn budget_protocol_now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}
