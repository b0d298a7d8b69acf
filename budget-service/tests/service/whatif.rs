//! The web view's what-if on a real budgetd (real SQLite file, real TCP),
//! with a stand-in for `budgetctl` (a shell script named in `[whatif]`
//! budgetctl) that records what budgetd hands it and answers a fixed
//! report, or runs long, or fails: who may use it (a reader on any
//! account, a coordinator within their subtree and nothing else, a plain
//! user not at all), what the child gets (the viewer's scope, no token, no
//! environment), bad input refused with nothing started, one replay at a
//! time (429), the time limit, a missing budgetctl. The real budgetctl runs
//! in the browser test (`ui_browser`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use budget_client::{Client, Response};
use serde_json::{Value, json};

use crate::common::*;
use crate::ui::{get, session, text};

/// A report as `budgetctl whatif --json` prints it, for two teams.
fn answer(since: i64, until: i64) -> Value {
    let f = |used: f64, sf: f64, p50: Option<f64>| {
        json!({"gpu_hours": used, "entitlement_shortfall": sf, "wait_p50_hours": p50,
               "wait_p95_hours": p50.map(|h| h * 3.0), "jobs_started": 3, "jobs_waiting": 1,
               "preemptions": 1, "lost_gpu_hours": 0.5})
    };
    let team = |name: &str, alloc: f64, new: f64, was: Value, would: Value| {
        json!({"team": name, "allocation_gpu_hours": alloc, "new_allocation_gpu_hours": new,
               "entitled_gpus": 4.0, "new_entitled_gpus": 4.8,
               "ledger": was.clone(), "as_it_was": was, "as_it_would_be": would})
    };
    json!({
        "since": since, "until": until, "nodes": 2, "gpus_per_node": 8,
        "jobs": 7, "runs": 8, "jobs_left_out": 1,
        "settings": [{"account": "teama", "change": {"kind": "percent", "value": 20.0}}],
        "teams": [
            team("teama", 100.0, 120.0, f(96.0, 0.25, Some(1.5)), f(110.0, 0.125, Some(0.75))),
            team("teama-ml", 40.0, 48.0, f(12.0, 0.0, None), f(12.0, 0.0, None)),
        ],
        "modelled": ["the cluster shape <modelled>"],
        "faithfulness": [{"team": "teama", "usage_budgetd": 96.0, "usage_as_it_was": 96.0,
                          "usage_difference": 0.0, "shortfall_ledger": 0.25,
                          "shortfall_as_it_was": 0.25, "shortfall_difference": 0.0, "within": true}],
        "faithful": true, "faithful_within": 0.02, "hidden_runs": 3,
        "cluster_source": "16 GPUs (budgetd's last read of Slurm) as 2 nodes x 8 GPUs (default)",
        "seconds": {"convert": 0.0, "as_it_was": 0.1, "as_it_would_be": 0.1, "total": 0.2}
    })
}

/// A stand-in budgetctl in `dir`: `body` after a line that records its
/// arguments, environment and stdin into `dir`.
fn fake(dir: &Path, body: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let p = dir.join("budgetctl");
    let d = dir.display();
    let script = format!(
        "#!/bin/sh\nprintf '%s\\n' \"$@\" > {d}/args\nenv > {d}/env\ncat > {d}/input.json\n{body}\n"
    );
    std::fs::write(&p, script).expect("write fake budgetctl");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    p
}

/// budgetd on a 16-GPU cluster with the UI's teams and runs, `whatif`
/// lines in its config, carol coordinating teama.
fn server(whatif: &str) -> Server {
    let cfg = format!("{}\n[whatif]\n{whatif}\n", config_text());
    let s = Server::start_with_cluster(&cfg, 16);
    crate::ui::setup(&s, budget_service::clock::now());
    let (st, b) = call(
        &s.unix(),
        "POST",
        "/v1/coordinators",
        Some(&json!({"user": "carol", "account": "teama"})),
    );
    assert_eq!(st, 201, "{b}");
    s
}

/// `application/x-www-form-urlencoded` of one value.
fn enc(v: &str) -> String {
    v.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Posts the what-if form.
fn post(c: &Client, cookie: &str, fields: &[(&str, &str)], extra: &[(&str, &str)]) -> Response {
    let mut h = vec![
        ("Content-Type", "application/x-www-form-urlencoded"),
        ("Cookie", cookie),
    ];
    h.extend_from_slice(extra);
    let body: Vec<String> = fields
        .iter()
        .map(|(k, v)| format!("{k}={}", enc(v)))
        .collect();
    c.request("POST", "/ui/whatif", &h, Some(body.join("&").as_bytes()))
        .expect("post")
}

/// The result page of a what-if once it is no longer running.
fn finished(c: &Client, cookie: &str, path: &str) -> String {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let r = get(c, path, Some(cookie));
        assert_eq!(r.status, 200, "{}", text(&r));
        let page = text(&r);
        if !page.contains("http-equiv=\"refresh\"") {
            return page;
        }
        assert!(Instant::now() < until, "still running: {page}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_coordinator_replays_within_their_subtree_and_a_user_is_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let until = budget_service::clock::now();
    std::fs::write(
        dir.path().join("answer.json"),
        answer(until - 2 * 7 * 86_400, until).to_string(),
    )
    .expect("answer");
    let bin = fake(
        dir.path(),
        &format!(
            "echo 'whatif:   0.0s 3 runs read' >&2\ncat {}/answer.json",
            dir.path().display()
        ),
    );
    let s = server(&format!("budgetctl = \"{}\"", bin.display()));
    let c = s.tcp(None);

    // A plain user: the API's refusal, on the form and on a post.
    let alice = session(&s, ALICE_TOKEN);
    let r = get(&c, "/ui/whatif", Some(&alice));
    assert_eq!(r.status, 403);
    assert!(
        text(&r).contains("admins and coordinators only"),
        "{}",
        text(&r)
    );
    let fields = [("account", "teama"), ("change", "+20%"), ("weeks", "2")];
    let r = post(&c, &alice, &fields, &[]);
    assert_eq!(r.status, 403);
    assert!(!dir.path().join("args").exists(), "nothing may start");

    // A coordinator of teama: its subtree to choose from, nothing else.
    let carol = session(&s, CAROL_TOKEN);
    let r = get(&c, "/ui/whatif", Some(&carol));
    assert_eq!(r.status, 200, "{}", text(&r));
    let page = text(&r);
    assert!(page.contains("<option value=\"teama\""), "{page}");
    assert!(page.contains("<option value=\"teama-ml\""), "{page}");
    assert!(!page.contains("<option value=\"teamb\""), "{page}");
    let r = post(
        &c,
        &carol,
        &[("account", "teamb"), ("change", "+20%"), ("weeks", "2")],
        &[],
    );
    assert_eq!(r.status, 403);
    assert!(
        text(&r).contains("permission denied: carol may not try a what-if on account"),
        "{}",
        text(&r)
    );
    assert!(!dir.path().join("args").exists(), "nothing may start");

    // Within the subtree: started, sent to its page, which ends with the report.
    let r = post(&c, &carol, &fields, &[("Sec-Fetch-Site", "same-origin")]);
    assert_eq!(r.status, 303, "{}", text(&r));
    let at = r.header("location").expect("location").to_string();
    assert!(at.starts_with("/ui/whatif/"), "{at}");
    let page = finished(&c, &carol, &at);
    for want in [
        "<tbody data-team=\"teama\"><tr data-case=\"was\">",
        "<tr data-case=\"would\"><th scope=\"row\">as it would be</th><td class=\"n\">120.00</td><td class=\"n\">12.5%</td><td class=\"n\">0.75</td>",
        "<td class=\"n\">100.00</td><td class=\"n\">25.0%</td><td class=\"n\">1.50</td><td class=\"n\">4.50</td>",
        "<svg class=\"p\"",
        "teama: 25.0% as it was, 12.5% as it would be;",
        "the cluster shape &lt;modelled&gt;",
        "3 runs of accounts you may not see are left out",
        "data-faithful=\"true\"",
    ] {
        assert!(page.contains(want), "{want:?} missing from {page}");
    }
    // /metrics counted it done (the refusals above started nothing).
    let m = s.unix();
    assert_eq!(
        metric(&m, "budget_whatif_runs_total{outcome=\"done\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "budget_whatif_runs_total{outcome=\"failed\"}"),
        Some(0.0)
    );
    assert!(metric(&m, "budget_whatif_last_duration_seconds").unwrap_or(0.0) > 0.0);
    // What the child was given: the change, the input on stdin, no token
    // and none of budgetd's environment.
    let args = std::fs::read_to_string(dir.path().join("args")).expect("args");
    assert_eq!(
        args.lines().collect::<Vec<_>>(),
        ["whatif", "--input", "-", "--json", "--set", "teama=+20%"]
    );
    let env = std::fs::read_to_string(dir.path().join("env")).expect("env");
    assert!(!env.contains("BUDGET") && !env.contains("CARGO"), "{env}");
    let input: budget_protocol::whatif::Input =
        serde_json::from_slice(&std::fs::read(dir.path().join("input.json")).expect("input"))
            .expect("the input reads as budget_protocol::whatif::Input");
    assert_eq!(input.until - input.since, 2 * 7 * 86_400);
    assert_eq!(input.runs.cluster_gpus, Some(16));
    // carol sees teama's subtree (and the root): the runs of teamb are hidden.
    let teams: std::collections::BTreeSet<&str> =
        input.runs.runs.iter().map(|r| r.account.as_str()).collect();
    assert_eq!(teams, ["teama", "teama-ml"].into_iter().collect());
    assert!(input.runs.hidden > 0);
    assert!(input.accounts.iter().all(|a| a.name != "teamb"));
    // The same documents the API answers carol for that range.
    let api = s.tcp(Some(CAROL_TOKEN));
    let (_, runs) = call(
        &api,
        "GET",
        &format!("/v1/runs?since={}&until={}", input.since, input.until),
        None,
    );
    assert_eq!(serde_json::to_value(&input.runs).expect("runs"), runs);
    let (_, accounts) = call(&api, "GET", "/v1/accounts", None);
    assert_eq!(
        serde_json::to_value(&input.accounts).expect("accounts"),
        accounts
    );

    // Only the one who started it sees it; the form lists it for them.
    let reader = session(&s, READER_TOKEN);
    assert_eq!(get(&c, &at, Some(&reader)).status, 404);
    assert!(text(&get(&c, "/ui/whatif", Some(&carol))).contains(&format!("href=\"{at}\"")));
    assert_eq!(get(&c, &at, None).status, 303, "no session: the login page");
}

#[test]
fn bad_input_answers_the_form_again_and_starts_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake(dir.path(), "exit 3");
    let s = server(&format!("budgetctl = \"{}\"", bin.display()));
    let c = s.tcp(None);
    let reader = session(&s, READER_TOKEN);
    // A reader chooses among every account.
    let page = text(&get(&c, "/ui/whatif", Some(&reader)));
    for a in ["teama", "teama-ml", "teamb"] {
        assert!(page.contains(&format!("<option value=\"{a}\"")), "{page}");
    }
    for (fields, status, says) in [
        (
            [("account", "nope"), ("change", "+20%"), ("weeks", "2")],
            400,
            "no account &quot;nope&quot; in the tree",
        ),
        (
            [("account", ""), ("change", "+20%"), ("weeks", "2")],
            400,
            "choose an account",
        ),
        (
            [("account", "teamb"), ("change", "20%"), ("weeks", "2")],
            400,
            "say + or - before a percentage",
        ),
        (
            [("account", "teamb"), ("change", "lots"), ("weeks", "2")],
            400,
            "is not a change",
        ),
        (
            [("account", "teamb"), ("change", "-101%"), ("weeks", "2")],
            400,
            "more than 100%",
        ),
        (
            [("account", "teamb"), ("change", "1200"), ("weeks", "5")],
            400,
            "weeks: a whole number from 1 to 4",
        ),
        (
            [("account", "teamb"), ("change", "<b>x</b>"), ("weeks", "0")],
            400,
            "&lt;b&gt;x&lt;/b&gt;",
        ),
    ] {
        let r = post(&c, &reader, &fields, &[]);
        let page = text(&r);
        assert_eq!(r.status, status, "{fields:?}: {page}");
        assert!(
            page.contains(says),
            "{fields:?}: {says:?} missing from {page}"
        );
        // The form again, with what was sent.
        assert!(page.contains("<form method=\"post\" action=\"/ui/whatif\">"));
        assert!(!page.contains("<b>x</b>"), "escaped");
    }
    // Posted from another site's page: refused as the login form is.
    for h in [
        ("Sec-Fetch-Site", "cross-site"),
        ("Origin", "http://evil.example"),
    ] {
        let r = post(
            &c,
            &reader,
            &[("account", "teamb"), ("change", "+20%"), ("weeks", "2")],
            &[h],
        );
        assert_eq!(r.status, 403, "{h:?}");
        assert!(text(&r).contains("another site"), "{}", text(&r));
    }
    assert!(!dir.path().join("args").exists(), "nothing may start");

    // A child that fails: its page says so, and the next one may start.
    let fields = [("account", "teamb"), ("change", "1200"), ("weeks", "1")];
    let r = post(&c, &reader, &fields, &[]);
    assert_eq!(r.status, 303, "{}", text(&r));
    let at = r.header("location").expect("location").to_string();
    let page = finished(&c, &reader, &at);
    assert!(
        page.contains("budgetctl whatif failed (exit status: 3)"),
        "{page}"
    );
    let args = std::fs::read_to_string(dir.path().join("args")).expect("args");
    assert!(args.contains("teamb=1200"), "{args}");
    assert_eq!(post(&c, &reader, &fields, &[]).status, 303);
}

#[test]
fn one_replay_at_a_time_within_its_time_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let bin = fake(
        dir.path(),
        "echo 'whatif:   0.0s 3 runs read from the input' >&2\nexec sleep 30",
    );
    let s = server(&format!(
        "budgetctl = \"{}\"\ntime_limit_secs = 3",
        bin.display()
    ));
    let c = s.tcp(None);
    let reader = session(&s, READER_TOKEN);
    let carol = session(&s, CAROL_TOKEN);
    let fields = [("account", "teama"), ("change", "-10%"), ("weeks", "1")];
    let r = post(&c, &reader, &fields, &[]);
    assert_eq!(r.status, 303, "{}", text(&r));
    let at = r.header("location").expect("location").to_string();
    // Its page follows it: the child's last line, and a refresh.
    let until = Instant::now() + Duration::from_secs(10);
    loop {
        let page = text(&get(&c, &at, Some(&reader)));
        assert!(
            page.contains("<meta http-equiv=\"refresh\" content=\"2\">"),
            "{page}"
        );
        if page.contains("3 runs read from the input") {
            break;
        }
        assert!(Instant::now() < until, "no progress shown: {page}");
        std::thread::sleep(Duration::from_millis(100));
    }
    // Anyone else's request meanwhile: busy, nothing started.
    let r = post(&c, &carol, &fields, &[]);
    assert_eq!(r.status, 429, "{}", text(&r));
    assert!(text(&r).contains("another what-if is running now"));
    // Past its time limit it is stopped, and the slot is free again.
    let page = finished(&c, &reader, &at);
    assert!(
        page.contains("the replay ran longer than 3 s ([whatif] time_limit_secs) and was stopped"),
        "{page}"
    );
    // /metrics counted it: one stopped at its limit (a failure), one refusal,
    // how long it ran; none running until the next one starts.
    let m = s.unix();
    assert_eq!(
        metric(&m, "budget_whatif_runs_total{outcome=\"failed\"}"),
        Some(1.0)
    );
    assert_eq!(
        metric(&m, "budget_whatif_runs_total{outcome=\"done\"}"),
        Some(0.0)
    );
    assert_eq!(
        metric(&m, "budget_whatif_time_limit_stops_total"),
        Some(1.0)
    );
    assert_eq!(metric(&m, "budget_whatif_busy_refusals_total"), Some(1.0));
    assert_eq!(metric(&m, "budget_whatif_running"), Some(0.0));
    let ran = metric(&m, "budget_whatif_last_duration_seconds").unwrap_or(0.0);
    assert!((3.0..10.0).contains(&ran), "last what-if ran {ran} s");
    assert_eq!(post(&c, &carol, &fields, &[]).status, 303);
    assert_eq!(metric(&m, "budget_whatif_running"), Some(1.0));
}

#[test]
fn without_budgetctl_the_page_says_so_and_nothing_starts() {
    let s = server("budgetctl = \"/nonexistent/budgetctl\"");
    let c = s.tcp(None);
    let reader = session(&s, READER_TOKEN);
    let r = get(&c, "/ui/whatif", Some(&reader));
    assert_eq!(r.status, 200);
    let page = text(&r);
    assert!(
        page.contains("The what-if is not available on this budgetd"),
        "{page}"
    );
    assert!(page.contains("is not an executable file"), "{page}");
    assert!(!page.contains("<form method=\"post\" action=\"/ui/whatif\">"));
    let r = post(
        &c,
        &reader,
        &[("account", "teama"), ("change", "+20%"), ("weeks", "2")],
        &[],
    );
    assert_eq!(r.status, 503, "{}", text(&r));
}
