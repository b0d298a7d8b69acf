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
