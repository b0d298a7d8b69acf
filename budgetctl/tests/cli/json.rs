//! `--json` prints the service's answer itself: the same JSON value as
//! budgetd's body for the same request, keys sorted, pretty-printed. Scripts
//! rely on it; the typed reading in between must neither drop nor add a field.

use serde_json::{Value, json};

use crate::support::*;

const T: &str = "1767225600"; // 2026-01-01T00:00:00Z

/// What the CLI printed before typed responses: the body, as a JSON value, pretty.
fn pretty(v: &Value) -> String {
    format!("{}\n", serde_json::to_string_pretty(v).expect("json"))
}

#[test]
fn json_output_is_the_service_answer() {
    let d = budgetd();
    let c = d.unix();
    let sock = d.socket.as_path();
    for args in [
        &["account", "add", "org", "--allocation", "1000"][..],
        &[
            "account",
            "add",
            "teama",
            "--parent",
            "org",
            "--allocation",
            "600",
        ],
        &[
            "account",
            "add",
            "teamb",
            "--parent",
            "org",
            "--allocation",
            "300",
            "--overcommit",
        ],
        &["user", "add", "alice", "--account", "teama"],
        &[
            "user",
            "add",
            "bob",
            "--account",
            "teamb",
            "--allocation",
            "100",
        ],
        &["coordinator", "add", "carol", "--account", "org"],
        &["weights", "set", "h100=1", "b300=2.5"],
        &["policy", "set", "preemption=gentle"],
    ] {
        ctl_ok(sock, args);
    }
    let t: i64 = T.parse().expect("T");
    let run = |job: u32,
               run: u32,
               acct: &str,
               user: &str,
               state: &str,
               start: Option<i64>,
               end: Option<i64>| {
        json!({"job_id": job, "run": run, "account": acct, "user": user, "gpus": 4,
               "gpu_type": "b300", "state": state, "start": start, "end": end,
               "min_runtime_secs": 3600, "nodes": "gpu[1-2]"})
    };
    call_ok(
        &c,
        "POST",
        "/v1/sync/jobs",
        &json!({"collected_at": t, "runs": [
            run(1, 0, "teama", "alice", "requeued", Some(t - 7200), Some(t - 3600)),
            run(1, 1, "teama", "alice", "running", Some(t - 3000), None),
            run(2, 0, "teamb", "bob", "running", Some(t - 600), None),
            run(3, 0, "teamb", "bob", "pending", None, None),
        ]}),
    );
    call_ok(
        &c,
        "POST",
        "/v1/preemptions",
        &json!({"victim": 1, "run": 0, "preemptor": 2, "reason": "rebalance", "at": t - 3600}),
    );

    // (budgetctl arguments, the request budgetd answers, the part printed)
    let cases: Vec<(Vec<&str>, String, Option<&str>)> = vec![
        (vec!["account", "show"], "/v1/accounts".into(), None),
        (
            vec!["account", "show", "org"],
            "/v1/accounts/org".into(),
            None,
        ),
        (vec!["coordinator", "show"], "/v1/coordinators".into(), None),
        (vec!["weights", "show"], "/v1/weights".into(), None),
        (vec!["policy", "show"], "/v1/policy".into(), None),
        (
            vec!["share", "--at", T],
            format!("/v1/share?at={T}"),
            Some("rows"),
        ),
        (
            vec!["usage", "--by", "user", "--at", T],
            format!("/v1/usage?by=user&at={T}"),
            None,
        ),
        (
            vec!["usage", "--preemptions", "--since", "0"],
            "/v1/preemptions?since=0".into(),
            None,
        ),
        (vec!["audit"], "/v1/audit?limit=100000".into(), None),
        (
            vec!["idle", "--since", "0", "--at", T],
            format!("/v1/idle?since=0&at={T}"),
            None,
        ),
        (vec!["why", "1"], "/v1/jobs/1/why".into(), None),
        (vec!["why", "2"], "/v1/jobs/2/why".into(), None),
        (vec!["why", "3"], "/v1/jobs/3/why".into(), None),
    ];
    for (args, path, part) in cases {
        let mut with_json = args.clone();
        with_json.push("--json");
        // `why` answers with the service's clock: retry across a second boundary.
        let mut last = (String::new(), String::new());
        for _ in 0..5 {
            let printed = ctl_ok(sock, &with_json);
            let (st, body) = call(&c, "GET", &path, None);
            assert_eq!(st, 200, "{path}: {body}");
            let body = match part {
                Some(p) => body[p].clone(),
                None => body,
            };
            last = (printed, pretty(&body));
            if last.0 == last.1 {
                break;
            }
        }
        assert_eq!(
            last.0, last.1,
            "budgetctl {args:?} --json differs from {path}"
        );
    }
}

/// A reader that stops reading (`budgetctl share | head -1`) ends budgetctl
/// quietly with exit 0, in JSON and in text: no panic, nothing on stderr.
#[test]
fn a_closed_pipe_is_not_an_error() {
    use std::process::{Command, Stdio};
    let d = budgetd();
    let sock = d.socket.as_path();
    // Enough accounts that the answer is larger than one write.
    ctl_ok(sock, &["account", "add", "org", "--allocation", "1000000"]);
    for i in 0..200 {
        ctl_ok(
            sock,
            &[
                "account",
                "add",
                &format!("team{i:03}"),
                "--parent",
                "org",
                "--allocation",
                "10",
            ],
        );
    }
    for args in [
        &["share", "--at", T, "--json"][..],
        &["share", "--at", T][..],
    ] {
        let mut child = Command::new(BUDGETCTL)
            .args(args)
            .env("BUDGET_SOCKET", sock)
            .env("TZ", "UTC")
            .env_remove("BUDGET_URL")
            .env_remove("BUDGET_TOKEN")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run budgetctl");
        // Close the read end before budgetctl has its answer to print.
        drop(child.stdout.take());
        let out = child.wait_with_output().expect("wait for budgetctl");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {:?} {stderr}", out.status);
        assert!(stderr.is_empty(), "{args:?}: {stderr}");
    }
}
