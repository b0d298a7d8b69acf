//! `POST /v1/usage/import`: sacct history, bad lines with line numbers in
//! both modes, unknown accounts, idempotent re-import.

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
    let iso = |t: i64| {
        jiff::Timestamp::from_second(t)
            .expect("time")
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
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
            iso(now - 4 * 3600),
            iso(now - 3 * 3600)
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
    let iso = |t: i64| {
        jiff::Timestamp::from_second(t)
            .expect("time")
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string()
    };
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
        iso(now - 4 * 3600),
        iso(now - 3 * 3600)
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
