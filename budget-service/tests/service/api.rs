//! Cross-cutting API behaviour: OpenAPI coverage, 404/405 JSON, metrics.

use serde_json::json;

use crate::common::*;

/// Every route of the router with its methods; the OpenAPI document must list each.
const ROUTES: &[(&str, &[&str])] = &[
    ("/v1/health", &["get"]),
    ("/v1/openapi.json", &["get"]),
    ("/v1/accounts", &["get", "post"]),
    ("/v1/accounts/{name}", &["get", "patch", "delete"]),
    ("/v1/members", &["get", "post"]),
    ("/v1/members/{account}/{user}", &["delete", "patch"]),
    ("/v1/coordinators", &["get", "post"]),
    ("/v1/coordinators/{account}/{user}", &["delete"]),
    ("/v1/weights", &["get", "patch"]),
    ("/v1/policy", &["get", "patch"]),
    ("/v1/audit", &["get"]),
    ("/v1/usage", &["get"]),
    ("/v1/usage/import", &["post"]),
    ("/v1/share", &["get"]),
    ("/v1/snapshot", &["get"]),
    ("/v1/sync/jobs", &["post"]),
    ("/v1/jobs/{id}/why", &["get"]),
    ("/v1/drains", &["get", "post"]),
    ("/v1/drains/{nodes}", &["delete"]),
    ("/v1/preemptions", &["get", "post"]),
    ("/v1/agent/report", &["post"]),
    ("/v1/idle", &["get"]),
    ("/v1/shadow", &["get"]),
    ("/v1/runs", &["get"]),
    ("/v1/backup", &["post"]),
    ("/v1/plugins", &["get"]),
    ("/metrics", &["get"]),
];

#[test]
fn openapi_lists_every_route_and_routes_answer() {
    let s = start();
    let c = s.unix();
    let (st, doc) = call(&c, "GET", "/v1/openapi.json", None);
    assert_eq!(st, 200);
    assert_eq!(doc["openapi"], "3.0.3");
    let paths = doc["paths"].as_object().expect("paths");
    assert_eq!(
        paths.len(),
        ROUTES.len(),
        "document and router differ in size"
    );
    for (path, methods) in ROUTES {
        for m in *methods {
            assert!(
                paths[*path][*m].is_object(),
                "{m} {path} missing from the OpenAPI document"
            );
        }
        // The route exists: anything but the router's JSON 404 "no such route".
        let concrete = path
            .replace("{name}", "x")
            .replace("{account}", "x")
            .replace("{user}", "y")
            .replace("{id}", "1");
        let (st, b) = call(&c, &methods[0].to_uppercase(), &concrete, None);
        assert!(!err(&b).contains("no such route"), "{path}: {st} {b}");
    }
    let (st, b) = call(&c, "GET", "/v1/nope", None);
    assert_eq!((st, err(&b).contains("no such route")), (404, true));
    let (st, b) = call(&c, "PUT", "/v1/health", None);
    assert_eq!((st, err(&b).contains("method not allowed")), (405, true));
}

#[test]
fn agent_tokens_get_the_documented_403_on_every_other_route_and_every_route_lists_the_reserve_503()
{
    let s = start();
    let (_, doc) = call(&s.unix(), "GET", "/v1/openapi.json", None);
    let agent = s.tcp(Some(AGENT_TOKEN));
    for (path, methods) in ROUTES {
        for m in *methods {
            let responses = &doc["paths"][*path][*m]["responses"];
            assert!(
                responses["503"].is_object(),
                "{m} {path}: the reserve's 503 is not documented"
            );
            // Routes without authentication answer anyone, agents included.
            let open = doc["paths"][*path][*m]["security"]
                .as_array()
                .is_some_and(Vec::is_empty);
            if *path == "/v1/agent/report" || open {
                continue;
            }
            let concrete = path
                .replace("{name}", "x")
                .replace("{account}", "x")
                .replace("{user}", "y")
                .replace("{nodes}", "n1")
                .replace("{id}", "1");
            let (st, b) = call(&agent, &m.to_uppercase(), &concrete, None);
            assert_eq!(st, 403, "{m} {path} for an agent token: {b}");
            assert!(
                responses["403"].is_object(),
                "{m} {path}: answers agent tokens 403, not documented"
            );
        }
    }
}

#[test]
fn metrics_report_usage_tiers_and_errors() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 10.0);
    add_member(&c, "alice", "teama");
    let now = budget_service::clock::now();
    let sync = json!({"collected_at": now, "runs": [
        {"job_id": 1, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "state": "running", "start": now - 3600},
        {"job_id": 2, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "pending"},
    ]});
    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let _ = call(&c, "GET", "/v1/accounts/ghost", None);
    let r = c.request("GET", "/metrics", &[], None).expect("metrics");
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).expect("utf8");
    for needle in [
        "budget_account_usage_gpu_hours{account=\"teama\"} 4",
        "budget_account_allocation_gpu_hours{account=\"teama\"} 10",
        "budget_account_ratio{account=\"teama\"} 0.4",
        "budget_runs{state=\"running\",tier=\"budgeted\"} 1",
        "budget_runs{state=\"pending\",tier=\"budgeted\"} 1",
        "budget_syncs_total 1",
        "budget_sync_runs_total{outcome=\"inserted\"} 2",
        "budget_http_errors_total{class=\"4xx\"} 1",
        "budget_snapshot_age_seconds",
        "budget_snapshot_info{version=\"",
    ] {
        assert!(text.contains(needle), "metrics lack {needle:?}:\n{text}");
    }
    // Readers may scrape over TCP; users may not; no token: 401.
    assert_eq!(
        s.tcp(Some(READER_TOKEN))
            .request("GET", "/metrics", &[], None)
            .expect("r")
            .status,
        200
    );
    assert_eq!(
        s.tcp(Some(ALICE_TOKEN))
            .request("GET", "/metrics", &[], None)
            .expect("r")
            .status,
        403
    );
    assert_eq!(
        s.tcp(None)
            .request("GET", "/metrics", &[], None)
            .expect("r")
            .status,
        401
    );
}

#[test]
fn metrics_tell_when_the_plugins_last_fetched_their_snapshot() {
    // Dashboards and the safe-mode alert (observability/) compare this timestamp with
    // the policy's maximum age: 0 until a plugin fetches, then the time of the fetch,
    // for a full answer and for a 304 alike.
    let s = start();
    let c = s.unix();
    let value = |name: &str| -> i64 {
        let r = c.request("GET", "/metrics", &[], None).expect("metrics");
        let text = String::from_utf8(r.body).expect("utf8");
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in:\n{text}"))
    };
    assert_eq!(value("budget_snapshot_last_fetch_timestamp_seconds"), 0);
    assert_eq!(value("budget_policy_snapshot_max_age_seconds"), 60);
    let before = budget_service::clock::now();
    let r = c
        .request("GET", "/v1/snapshot", &[], None)
        .expect("snapshot");
    assert_eq!(r.status, 200);
    let fetched = value("budget_snapshot_last_fetch_timestamp_seconds");
    assert!(fetched >= before, "{fetched} < {before}");
    let etag = r.etag().expect("etag").to_string();
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let r = c
        .request(
            "GET",
            "/v1/snapshot",
            &[("If-None-Match", etag.as_str())],
            None,
        )
        .expect("snapshot");
    assert_eq!(r.status, 304);
    assert!(value("budget_snapshot_last_fetch_timestamp_seconds") > fetched);
}
