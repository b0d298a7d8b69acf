//! The web view under `/ui` on a real budgetd (real SQLite file, real TCP):
//! the login sets an `HttpOnly`, `SameSite=Strict` cookie and logout clears
//! it; without a valid cookie every page sends to the login page, no data; a
//! bad token gets a clear error and no cookie; each page's figures equal the
//! JSON API's for the same instant and caller; a user token sees no other
//! team's jobs; text from the ledger is escaped.

use budget_client::{Client, Response};
use serde_json::{Value, json};

use crate::common::*;

const PAGES: [&str; 6] = [
    "/ui/tree",
    "/ui/queue",
    "/ui/preemptions",
    "/ui/drains",
    "/ui/whatif",
    "/ui/whatif/0-1",
];

pub fn get(c: &Client, path: &str, cookie: Option<&str>) -> Response {
    let h: Vec<(&str, &str)> = cookie.map(|v| ("Cookie", v)).into_iter().collect();
    c.request("GET", path, &h, None).expect("request")
}

pub fn text(r: &Response) -> String {
    String::from_utf8(r.body.clone()).expect("utf8 page")
}

/// Posts the login form; the answer.
fn login(c: &Client, token: &str, extra: &[(&str, &str)]) -> Response {
    let mut h = vec![("Content-Type", "application/x-www-form-urlencoded")];
    h.extend_from_slice(extra);
    let body = format!("token={}", token.replace('+', "%2B"));
    c.request("POST", "/ui/login", &h, Some(body.as_bytes()))
        .expect("login")
}

/// Logs in with `token` and returns the `Cookie` header value to send.
pub fn session(s: &Server, token: &str) -> String {
    let r = login(&s.tcp(None), token, &[]);
    assert_eq!(r.status, 303, "{}", text(&r));
    let set = r.header("set-cookie").expect("Set-Cookie").to_string();
    set.split(';').next().expect("cookie pair").to_string()
}

/// The number in `data-ATTR="N"` of a page.
fn data_num(page: &str, attr: &str) -> i64 {
    let key = format!("{attr}=\"");
    let at = page
        .find(&key)
        .unwrap_or_else(|| panic!("no {attr} in {page}"))
        + key.len();
    page[at..]
        .split('"')
        .next()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("bad {attr}"))
}

/// The HTML of the table row whose first attribute is `attr="value"`.
fn row<'p>(page: &'p str, attr: &str, value: &str) -> &'p str {
    let key = format!("<tr {attr}=\"{value}\">");
    let at = page
        .find(&key)
        .unwrap_or_else(|| panic!("no row {key} in {page}"));
    let end = page[at..].find("</tr>").map_or(page.len(), |e| at + e);
    &page[at..end]
}

/// Teams and runs: teama (alice) with a sub-account, teamb (bob); runs
/// ended in this window and the windows before, one running, pending jobs
/// of both teams; a preemption and idle reports of teama's running job.
pub fn setup(s: &Server, now: i64) {
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    add_account(&c, "teama-ml", Some("teama"), 40.0);
    add_account(&c, "teamb", None, 50.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "alice", "teama-ml");
    add_member(&c, "bob", "teamb");
    let d = 86_400;
    let ended = |job: u32, acct: &str, user: &str, gpus: u32, start: i64, end: i64| {
        json!({"job_id": job, "run": 0, "account": acct, "user": user, "gpus": gpus,
               "state": "ended", "start": start, "end": end})
    };
    let pending = |job: u32, acct: &str, user: &str, gpus: u32| {
        json!({"job_id": job, "run": 0, "account": acct, "user": user, "gpus": gpus,
               "state": "pending", "submit": now - 600})
    };
    let sync = json!({"collected_at": now, "runs": [
        ended(101, "teama", "alice", 4, now - 3 * d, now - 2 * d),
        ended(102, "teama-ml", "alice", 2, now - 10 * d, now - 9 * d),
        ended(103, "teamb", "bob", 1, now - 20 * d, now - 19 * d),
        ended(104, "teamb", "bob", 8, now - 5 * d, now - 4 * d),
        json!({"job_id": 105, "run": 0, "account": "teama", "user": "alice", "gpus": 2,
               "state": "running", "start": now - 7200, "nodes": "n1"}),
        pending(106, "teama", "alice", 2),
        pending(107, "teama-ml", "alice", 1),
        pending(201, "teamb", "bob", 4),
    ]});
    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let ctl = s.tcp(Some(CONTROLLER_TOKEN));
    let rec = json!({"victim": 104, "run": 0, "reason": "rebalance", "at": now - 4 * d - 60,
                     "account": "teamb", "user": "bob", "gpus": 8, "start": now - 5 * d});
    let (st, b) = call(&ctl, "POST", "/v1/preemptions", Some(&rec));
    assert_eq!(st, 200, "{b}");
    let gpu = |idle: i64| {
        json!({"index": 0, "uuid": "GPU-a1", "name": "NVIDIA H100", "util_pct": 0,
               "memory_used_mib": 500, "memory_total_mib": 81559, "idle_secs": idle,
               "processes": [{"pid": 4000, "job_id": 105, "used_memory_mib": 500}]})
    };
    for (at, idle) in [(now - 3600, 0), (now, 3600)] {
        let r = json!({"node": "n1", "at": at, "nvml": true, "gpus": [gpu(idle)]});
        let (st, b) = call(&c, "POST", "/v1/agent/report", Some(&r));
        assert_eq!(st, 200, "{b}");
    }
}

#[test]
fn login_sets_an_httponly_strict_cookie_and_logout_clears_it() {
    let s = start();
    let c = s.tcp(None);
    let r = login(&c, READER_TOKEN, &[]);
    assert_eq!(r.status, 303);
    assert_eq!(r.header("location"), Some("/ui/tree"));
    let set = r.header("set-cookie").expect("Set-Cookie");
    assert!(set.starts_with("budget_ui="), "{set}");
    for part in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(set.contains(part), "{part} missing: {set}");
    }
    // The token is not in the cookie as written, and no Secure over plain HTTP.
    assert!(
        !set.contains(READER_TOKEN) && !set.contains("Secure"),
        "{set}"
    );
    // Behind a TLS proxy that says so, the cookie is Secure.
    let r = login(&c, READER_TOKEN, &[("X-Forwarded-Proto", "https")]);
    assert!(
        r.header("set-cookie")
            .is_some_and(|v| v.contains("; Secure"))
    );
    let cookie = session(&s, READER_TOKEN);
    let page = get(&c, "/ui/tree", Some(&cookie));
    assert_eq!(page.status, 200);
    let html = text(&page);
    assert!(html.contains("Signed in as prom") && html.contains("<h1>Accounts</h1>"));
    // No script, nothing from elsewhere, not cached.
    assert!(!html.contains("<script") && !html.contains("http://") && !html.contains("https://"));
    assert!(
        page.header("content-security-policy")
            .is_some_and(|v| v.contains("default-src 'none'"))
    );
    assert_eq!(page.header("cache-control"), Some("no-store"));
    let out = c
        .request("POST", "/ui/logout", &[("Cookie", &cookie)], None)
        .expect("logout");
    assert_eq!(
        (out.status, out.header("location")),
        (303, Some("/ui/login"))
    );
    let cleared = out.header("set-cookie").expect("Set-Cookie");
    assert!(
        cleared.starts_with("budget_ui=;") && cleared.contains("Max-Age=0"),
        "{cleared}"
    );
    // The API does not take the cookie for a token.
    let r = c
        .request("GET", "/v1/share", &[("Cookie", &cookie)], None)
        .expect("api");
    assert_eq!(r.status, 401);
}

#[test]
fn a_login_or_logout_posted_from_another_site_is_refused() {
    let s = start();
    let c = s.tcp(None);
    let host = c.request("GET", "/ui/login", &[], None).expect("page");
    assert_eq!(host.status, 200);
    for extra in [
        vec![("Origin", "http://evil.example")],
        vec![("Origin", "null")],
        vec![("Sec-Fetch-Site", "cross-site")],
        vec![("Sec-Fetch-Site", "same-site")],
        // A proxy's host wins over the socket's: an Origin naming the socket is refused.
        vec![
            ("X-Forwarded-Host", "budget.example.org"),
            ("Origin", "http://evil.example"),
        ],
    ] {
        let r = login(&c, READER_TOKEN, &extra);
        assert_eq!(r.status, 403, "{extra:?}");
        assert!(r.header("set-cookie").is_none(), "{extra:?}");
        assert!(text(&r).contains("sent from another site"), "{extra:?}");
    }
    // The browser's own form passes: same origin by either header.
    let r = login(&c, READER_TOKEN, &[("Sec-Fetch-Site", "same-origin")]);
    assert_eq!(r.status, 303);
    let r = login(
        &c,
        READER_TOKEN,
        &[
            ("X-Forwarded-Host", "budget.example.org"),
            ("Origin", "https://budget.example.org"),
        ],
    );
    assert_eq!(r.status, 303);
    // A cross-site logout leaves the session alone.
    let cookie = session(&s, READER_TOKEN);
    let out = c
        .request(
            "POST",
            "/ui/logout",
            &[("Cookie", &cookie), ("Origin", "http://evil.example")],
            None,
        )
        .expect("logout");
    assert_eq!(out.status, 403);
    assert!(out.header("set-cookie").is_none());
    assert_eq!(get(&c, "/ui/tree", Some(&cookie)).status, 200);
}

#[test]
fn without_a_valid_cookie_every_page_is_the_login_page_with_no_data() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    for cookie in [
        None,
        Some("budget_ui=00ff"),
        Some("budget_ui=not-hex"),
        Some("other=1"),
    ] {
        for p in PAGES {
            let r = get(&c, p, cookie);
            assert_eq!(
                (r.status, r.header("location")),
                (303, Some("/ui/login")),
                "{p} {cookie:?}"
            );
            let html = text(&r);
            for secret in ["teama", "teamb", "alice", "bob", "106", "201"] {
                assert!(!html.contains(secret), "{p} shows {secret} without login");
            }
        }
    }
    // The login page has the form and no data.
    let r = get(&c, "/ui/login", None);
    assert_eq!(r.status, 200);
    let html = text(&r);
    assert!(
        html.contains("<form method=\"post\" action=\"/ui/login\">"),
        "{html}"
    );
    assert!(html.contains("<label for=\"token\">") && !html.contains("teama"));
    // The Unix socket's peer (an admin here) is no login for the view either.
    let r = get(&s.unix(), "/ui/tree", None);
    assert_eq!(r.status, 303);
    assert!(!text(&r).contains("teama"));
    // /ui goes to the accounts page.
    assert_eq!(get(&c, "/ui", None).header("location"), Some("/ui/tree"));
}

#[test]
fn a_bad_token_is_refused_clearly_and_sets_no_cookie() {
    let s = start();
    let c = s.tcp(None);
    let refusals = |t: &str| (login(&c, t, &[]), t.to_string());
    for ((r, t), status, words) in [
        (refusals("no-such-token"), 401, "unknown token"),
        (refusals(ADMIN_TOKEN), 403, "reader or user tokens only"),
        (
            refusals(CONTROLLER_TOKEN),
            403,
            "reader or user tokens only",
        ),
        (refusals(AGENT_TOKEN), 403, "reader or user tokens only"),
        (refusals(""), 400, "enter a token"),
    ] {
        assert_eq!(r.status, status, "{t}");
        assert!(r.header("set-cookie").is_none(), "{t} got a cookie");
        assert!(text(&r).contains(words), "{t}: {}", text(&r));
        assert!(text(&r).contains("role=\"alert\""));
    }
    // A cookie made by hand from an admin token is no login either.
    let hex: String = ADMIN_TOKEN.bytes().map(|b| format!("{b:02x}")).collect();
    assert_eq!(
        get(&c, "/ui/tree", Some(&format!("budget_ui={hex}"))).status,
        303
    );
    // A form over the view's limit is refused unread.
    let big = format!("token={}", "x".repeat(10_000));
    let r = c
        .request(
            "POST",
            "/ui/login",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            Some(big.as_bytes()),
        )
        .expect("login");
    assert!(r.status == 400 || r.status == 413, "{}", r.status);
    assert!(r.header("set-cookie").is_none());
}

/// The account rows of `GET /v1/share?at=` by name.
fn share_at(c: &Client, at: i64) -> Vec<Value> {
    let (st, b) = call(c, "GET", &format!("/v1/share?at={at}"), None);
    assert_eq!(st, 200, "{b}");
    b["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["user"].is_null())
        .cloned()
        .collect()
}

/// A number of the API as the pages print it: `{:.2}` and `{:.3}` of it
/// then read as `ui::num` and `ui::ratio` write (-0.0 as 0.0).
fn f(v: &Value) -> f64 {
    v.as_f64().expect("number") + 0.0
}

#[test]
fn each_page_equals_the_api_for_the_same_instant_and_caller() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    for token in [READER_TOKEN, ALICE_TOKEN] {
        let api = s.tcp(Some(token));
        let cookie = session(&s, token);
        // Accounts: every row's figures and its 4 windows, as /v1/share says.
        let html = text(&get(&c, "/ui/tree", Some(&cookie)));
        let at = data_num(&html, "data-at");
        let (_, policy) = call(&api, "GET", "/v1/policy", None);
        let window = policy["window_secs"].as_i64().expect("window");
        let rows = share_at(&api, at);
        assert!(!rows.is_empty());
        for r in &rows {
            let name = r["account"].as_str().expect("name");
            let tr = row(&html, "data-account", name);
            let cells = format!(
                "<td class=\"n\">{:.2}</td><td class=\"n\">{:.2}</td><td class=\"n\">{:.3}</td>",
                f(&r["allocation_gpu_hours"]),
                f(&r["usage_gpu_hours"]),
                f(&r["ratio"])
            );
            assert!(tr.contains(&cells), "{token} {name}: {cells} not in {tr}");
            assert!(
                tr.contains(&format!("<td class=\"n\">{}</td>", r["rank"])),
                "{tr}"
            );
            let mut desc = String::new();
            for k in (0..4).rev() {
                let old = share_at(&api, at - k * window);
                let (a, u) = old
                    .iter()
                    .find(|o| o["account"] == name)
                    .map_or((0.0, 0.0), |o| {
                        (f(&o["allocation_gpu_hours"]), f(&o["usage_gpu_hours"]))
                    });
                desc.push_str(&format!(
                    " {u:.2} of {a:.2}{};",
                    if u > a { " (over)" } else { "" }
                ));
            }
            assert!(
                tr.contains(&desc),
                "{token} {name} chart: {desc} not in {tr}"
            );
        }
        // The tree at an instant asked for is the share report at that instant.
        let past = now - 86_400;
        let html_past = text(&get(&c, &format!("/ui/tree?at={past}"), Some(&cookie)));
        assert_eq!(data_num(&html_past, "data-at"), past);
        for r in share_at(&api, past) {
            let tr = row(
                &html_past,
                "data-account",
                r["account"].as_str().expect("name"),
            );
            let cell = format!("<td class=\"n\">{:.2}</td>", f(&r["usage_gpu_hours"]));
            assert!(tr.contains(&cell), "{cell} not in {tr}");
        }
        for bad in ["/ui/tree?at=yesterday-ish", "/ui/tree?since=1"] {
            let r = get(&c, bad, Some(&cookie));
            assert_eq!(r.status, 400, "{bad}");
            assert!(text(&r).contains("role=\"alert\""), "{bad}");
        }
        // The usage of the windows before shows (102 ended 9 days ago).
        if token == READER_TOKEN {
            assert!(html.contains(" 48.00 of 40.00 (over);"), "{html}");
            assert!(!rows.is_empty() && html.matches("<tr data-account=").count() == rows.len());
        } else {
            // alice reads her accounts and their ancestors, not teamb.
            assert!(!html.contains("data-account=\"teamb\""));
        }

        // Queue: each waiting job's tier, rank and reason, as `why` says.
        let html = text(&get(&c, "/ui/queue", Some(&cookie)));
        let shown = if token == READER_TOKEN {
            vec![106, 107, 201]
        } else {
            vec![106, 107]
        };
        assert_eq!(html.matches("<tr data-job=").count(), shown.len(), "{html}");
        for id in shown {
            let (st, why) = call(&api, "GET", &format!("/v1/jobs/{id}/why"), None);
            assert_eq!(st, 200, "{why}");
            let tr = row(&html, "data-job", &id.to_string());
            let tier = match why["tier"].as_str() {
                Some("budgeted") => "within budget",
                Some("over_budget") => "over budget",
                _ => "free tier",
            };
            let rank = format!("{} of {}", why["rank"], why["num_leaves"]);
            assert!(
                tr.contains(&format!("<td>{tier}</td>")),
                "{tier} not in {tr}"
            );
            assert!(tr.contains(&rank), "{rank} not in {tr}");
            let wait = budget_service::ui::escape(why["wait"].as_str().expect("wait"));
            assert!(tr.contains(&wait), "{wait} not in {tr}");
        }

        // Preemptions (readers only, as in the API) and idle GPU-hours.
        let html = text(&get(&c, "/ui/preemptions", Some(&cookie)));
        let since = data_num(&html, "data-since");
        let at = data_num(&html, "data-at");
        let (st, lost) = call(&api, "GET", &format!("/v1/preemptions?since={since}"), None);
        if token == READER_TOKEN {
            assert_eq!(st, 200);
            let by = lost["by_account"].as_array().expect("by_account");
            assert_eq!(by.len(), 1, "{lost}");
            for a in by {
                let tr = row(
                    &html,
                    "data-account",
                    a["account"].as_str().expect("account"),
                );
                let cells = format!(
                    "<td class=\"n\">{}</td><td class=\"n\">{:.2}</td>",
                    a["preemptions"],
                    f(&a["gpu_hours_lost"])
                );
                assert!(tr.contains(&cells), "{cells} not in {tr}");
            }
        } else {
            assert_eq!(st, 403);
            assert!(html.contains("may not read the preemption record"));
            assert!(!html.contains("teamb"));
        }
        let (st, idle) = call(
            &api,
            "GET",
            &format!("/v1/idle?since={since}&at={at}"),
            None,
        );
        assert_eq!(st, 200, "{idle}");
        let by = idle["by_account"].as_array().expect("by_account");
        assert!(!by.is_empty(), "{idle}");
        for a in by {
            let tr = row(&html, "data-idle", a["account"].as_str().expect("account"));
            let cells = format!(
                "<td class=\"n\">{:.2}</td><td class=\"n\">{}</td>",
                f(&a["idle_gpu_hours"]),
                a["jobs"]
            );
            assert!(tr.contains(&cells), "{cells} not in {tr}");
        }

        // Drains: none here, as the API says.
        let html = text(&get(&c, "/ui/drains", Some(&cookie)));
        let (st, drains) = call(&api, "GET", "/v1/drains", None);
        assert_eq!((st, drains), (200, json!([])));
        assert!(html.contains("No drain in progress."));
    }
}

/// The tier column says why an account is where it is. `/v1/share` gives an
/// account its path's tier (docs/design.md §4.3): teama-ml used nothing in
/// this window (ratio 0) yet is over budget because teama used all of its
/// allocation (4 GPUs for a day plus 2 for 2 hours: 100 of 100), and the
/// root, whose ratio is the whole tree's usage against the sum of its
/// children's allocations (teamb's 192 on top: about 1.95), bears no budget
/// and puts nothing over budget. The page names the parent and the root's
/// status instead of "over budget" at ratio 0 and "within budget" at 1.95.
#[test]
fn the_tier_column_says_an_account_inherits_its_parents_over_budget_and_the_root_has_none() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    for token in [READER_TOKEN, ALICE_TOKEN] {
        let api = s.tcp(Some(token));
        let cookie = session(&s, token);
        let html = text(&get(&c, "/ui/tree", Some(&cookie)));
        let rows = share_at(&api, data_num(&html, "data-at"));
        let of = |name: &str| {
            rows.iter()
                .find(|r| r["account"] == name)
                .unwrap_or_else(|| panic!("{token}: no {name} in {rows:?}"))
                .clone()
        };
        // The API's figures the page explains.
        let (ml, teama) = (of("teama-ml"), of("teama"));
        assert_eq!(
            (ml["tier"].as_str(), f(&ml["ratio"])),
            (Some("over_budget"), 0.0)
        );
        assert!(f(&teama["ratio"]) >= 1.0, "{teama}");
        assert_eq!(teama["tier"], "over_budget");
        assert!(
            row(&html, "data-account", "teama-ml")
                .contains("<td>over budget (via parent teama)</td>"),
            "{token}: {html}"
        );
        assert!(row(&html, "data-account", "teama").contains("<td>over budget</td>"));
        if token == READER_TOKEN {
            let root = of("root");
            assert!(f(&root["ratio"]) > 1.9, "{root}");
            assert_eq!(root["tier"], "budgeted");
            let tr = row(&html, "data-account", "root");
            assert!(
                tr.contains("<td>no budget (the root)</td>") && !tr.contains("within budget"),
                "{tr}"
            );
            assert!(row(&html, "data-account", "teamb").contains("<td>over budget</td>"));
        }
    }
}

#[test]
fn a_user_token_does_not_see_another_teams_jobs_in_the_queue() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    let alice = session(&s, ALICE_TOKEN);
    let html = text(&get(&c, "/ui/queue", Some(&alice)));
    assert!(html.contains("<tr data-job=\"106\">") && html.contains("<tr data-job=\"107\">"));
    for other in ["data-job=\"201\"", "bob", "teamb", ">201<"] {
        assert!(!html.contains(other), "alice's queue shows {other}: {html}");
    }
    // The API refuses her the same job.
    let (st, _) = call(&s.tcp(Some(ALICE_TOKEN)), "GET", "/v1/jobs/201/why", None);
    assert_eq!(st, 403);
    // A reader sees both teams, grouped.
    let reader = session(&s, READER_TOKEN);
    let html = text(&get(&c, "/ui/queue", Some(&reader)));
    assert!(
        html.contains("<table data-team=\"teama\">")
            && html.contains("<table data-team=\"teamb\">")
    );
    assert!(html.contains("<tr data-job=\"201\">"));
}

/// budgetd behind a sign-in proxy at `proxy` (the tests' own address when
/// it is 127.0.0.1), which passes the user in `X-Remote-User`.
fn start_behind_proxy(proxy: &str) -> Server {
    Server::start(&format!(
        "{}[ui_proxy]\nuser_header = \"X-Remote-User\"\naddresses = [\"{proxy}\"]\nreaders = [\"lead1\"]\n",
        config_text()
    ))
}

#[test]
fn a_trusted_proxy_signs_people_in_with_their_roles_scope() {
    let s = start_behind_proxy("127.0.0.1");
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    let as_user = |user: &str, path: &str| {
        c.request("GET", path, &[("X-Remote-User", user)], None)
            .expect("page")
    };
    // A listed reader sees every team, with no logout (the proxy owns the session).
    let r = as_user("lead1", "/ui/queue");
    assert_eq!(r.status, 200);
    let html = text(&r);
    assert!(html.contains("Signed in as lead1 (reader: every account) signed in by the site"));
    assert!(!html.contains("/ui/logout"), "{html}");
    assert!(html.contains("<tr data-job=\"201\">") && html.contains("<tr data-job=\"106\">"));
    let tree = text(&as_user("lead1", "/ui/tree"));
    assert!(tree.contains("data-account=\"root\""), "{tree}");
    // Anyone else reads as a user of that name: alice sees her jobs, not bob's.
    let html = text(&as_user("alice", "/ui/queue"));
    assert!(html.contains("Signed in as alice (user: your accounts)"));
    assert!(html.contains("<tr data-job=\"106\">") && html.contains("<tr data-job=\"107\">"));
    for other in ["data-job=\"201\"", "bob", "teamb"] {
        assert!(!html.contains(other), "proxied alice sees {other}: {html}");
    }
    // The same as her token shows.
    let token = text(&get(&c, "/ui/queue", Some(&session(&s, ALICE_TOKEN))));
    let rows = |h: &str| h.matches("<tr data-job=").count();
    assert_eq!(rows(&html), rows(&token));
    // A name that is no user name, or none at all: the login page, no data.
    for bad in ["al ice", "<b>x</b>", "-rf", ""] {
        let r = as_user(bad, "/ui/queue");
        assert_eq!(
            (r.status, r.header("location")),
            (303, Some("/ui/login")),
            "{bad:?}"
        );
    }
    assert_eq!(get(&c, "/ui/queue", None).status, 303);
}

#[test]
fn a_user_header_from_an_untrusted_peer_is_ignored() {
    // The proxy is elsewhere: this client's header names no one.
    let s = start_behind_proxy("10.9.9.9");
    let now = budget_service::clock::now();
    setup(&s, now);
    let c = s.tcp(None);
    let r = c
        .request("GET", "/ui/queue", &[("X-Remote-User", "lead1")], None)
        .expect("page");
    assert_eq!((r.status, r.header("location")), (303, Some("/ui/login")));
    assert!(!text(&r).contains("201"));
    // The token login still works beside it.
    let cookie = session(&s, READER_TOKEN);
    assert_eq!(get(&c, "/ui/queue", Some(&cookie)).status, 200);
}

#[test]
fn text_from_the_ledger_is_escaped() {
    let s = start();
    let now = budget_service::clock::now();
    let evil = "<script>alert(1)</script>";
    let sync = json!({"collected_at": now, "runs": [
        {"job_id": 900, "run": 0, "account": evil, "user": "\"><b>eve</b>", "gpus": 1,
         "state": "pending", "submit": now - 60},
    ]});
    let (st, b) = call(&s.unix(), "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let reader = session(&s, READER_TOKEN);
    let html = text(&get(&s.tcp(None), "/ui/queue", Some(&reader)));
    assert!(html.contains("<tr data-job=\"900\">"), "{html}");
    assert!(
        !html.contains("<script") && !html.contains("<b>eve"),
        "{html}"
    );
    assert!(
        html.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{html}"
    );
    assert!(html.contains("&quot;&gt;&lt;b&gt;eve&lt;/b&gt;"), "{html}");
}

/// The drains page on the real `budgetd` binary with Slurm stood in for by
/// the fake Slurm: each drained node's reason, state, jobs left and ETA as
/// `GET /v1/drains` lists them.
#[test]
fn the_drains_page_lists_what_the_api_lists() {
    use crate::daemon::{BUDGETD, Daemon, fake_slurm_tool};
    let dir = tempfile::tempdir().expect("tempdir");
    let slurm = dir.path().join("slurm");
    std::fs::create_dir(&slurm).expect("slurm dir");
    std::fs::write(slurm.join("nodes"), "n1\nn2\nn3\n").expect("nodes");
    let cfg = dir.path().join("budgetd.toml");
    std::fs::write(&cfg, config_text()).expect("config");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let mut cmd = std::process::Command::new(BUDGETD);
    cmd.arg("--scontrol")
        .arg(fake_slurm_tool("scontrol"))
        .arg("--config")
        .arg(&cfg)
        .arg("--listen")
        .arg(format!("127.0.0.1:{port}"))
        .env("FAKE_SLURM_DIR", &slurm)
        .env_remove("BUDGET_SQUEUE");
    let d = Daemon::start_cmd(
        &dir.path().join("budget.db"),
        &dir.path().join("budgetd.sock"),
        cmd,
    );
    let (st, b) = call(
        &d.client(),
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n1,n3", "reason": "PSU <swap> & fan"})),
    );
    assert_eq!(st, 201, "{b}");
    let tcp = Client::new(
        budget_client::Endpoint::parse(&format!("http://127.0.0.1:{port}")).expect("endpoint"),
    );
    let r = login(&tcp, CAROL_TOKEN, &[]);
    let cookie = r
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .expect("cookie")
        .to_string();
    let html = text(&get(&tcp, "/ui/drains", Some(&cookie)));
    let (st, drains) = call(
        &tcp.clone().with_token(CAROL_TOKEN),
        "GET",
        "/v1/drains",
        None,
    );
    assert_eq!(st, 200, "{drains}");
    let rows = drains.as_array().expect("list");
    assert_eq!(rows.len(), 2, "{drains}");
    assert_eq!(html.matches("<tr data-node=").count(), 2, "{html}");
    for d in rows {
        let tr = row(&html, "data-node", d["node"].as_str().expect("node"));
        let reason = budget_service::ui::escape(d["reason"].as_str().expect("reason"));
        assert!(reason.contains("&lt;swap&gt; &amp; fan"), "{reason}");
        let state = d["slurm_state"].as_str().expect("state");
        let eta = if d["empty"] == json!(true) {
            "empty now".to_string()
        } else {
            format!("data-t=\"{}\"", d["empty_at"])
        };
        for want in [
            format!("<td>{reason}</td>"),
            format!("data-t=\"{}\"", d["since"]),
            format!("<td>{}</td>", budget_service::ui::escape(state)),
            format!(
                "<td class=\"n\">{}</td>",
                d["jobs"].as_array().map_or(0, Vec::len)
            ),
            eta,
        ] {
            assert!(tr.contains(&want), "{want} not in {tr}");
        }
    }
}
