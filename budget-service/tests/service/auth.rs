//! AuthN/AuthZ: admins, coordinators inside and outside their subtree, users
//! reading their own and others' accounts, bad tokens. Every refusal changes
//! nothing.

use serde_json::json;

use crate::common::*;

fn setup() -> Server {
    let s = start();
    let c = s.unix();
    add_account(&c, "org", None, 1000.0);
    add_account(&c, "teama", Some("org"), 600.0);
    add_account(&c, "teamb", Some("org"), 300.0);
    add_account(&c, "teama1", Some("teama"), 100.0);
    add_member(&c, "alice", "teama1");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/coordinators",
        Some(&json!({"user": "carol", "account": "teama"})),
    );
    assert_eq!(st, 201, "{b}");
    s
}

#[test]
fn unknown_or_missing_token_is_401_and_changes_nothing() {
    let s = setup();
    let admin = s.unix();
    let before = observable(&admin);
    for token in [None, Some("wrong-token-123")] {
        let c = s.tcp(token);
        let (st, b) = call(
            &c,
            "POST",
            "/v1/accounts",
            Some(&json!({"name": "x", "allocation_gpu_hours": 1})),
        );
        assert_eq!(st, 401, "{b}");
        assert!(
            err(&b).contains("token") || err(&b).contains("Authorization"),
            "{b}"
        );
        assert_eq!(call(&c, "GET", "/v1/accounts", None).0, 401);
    }
    // Health and the OpenAPI document are open.
    assert_eq!(call(&s.tcp(None), "GET", "/v1/health", None).0, 200);
    assert_eq!(observable(&admin), before);
}

#[test]
fn admin_token_may_do_anything() {
    let s = setup();
    let c = s.tcp(Some(ADMIN_TOKEN));
    let (st, b) = call(
        &c,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "teamc", "parent": "org", "allocation_gpu_hours": 50})),
    );
    assert_eq!(st, 201, "{b}");
    let (_, audit) = call(&c, "GET", "/v1/audit", None);
    let last = audit
        .as_array()
        .and_then(|a| a.last())
        .cloned()
        .unwrap_or_default();
    assert_eq!(last["actor"], "ops (token)");
    assert_eq!(
        call(
            &c,
            "PATCH",
            "/v1/policy",
            Some(&json!({"preemption": "gentle"}))
        )
        .0,
        200
    );
}

#[test]
fn coordinator_manages_only_their_subtree() {
    let s = setup();
    let admin = s.unix();
    let carol = s.tcp(Some(CAROL_TOKEN));
    // Inside: create under teama, modify/delete below teama, add members.
    let (st, b) = call(
        &carol,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "teama2", "parent": "teama", "allocation_gpu_hours": 50})),
    );
    assert_eq!(st, 201, "{b}");
    assert_eq!(
        call(
            &carol,
            "PATCH",
            "/v1/accounts/teama1",
            Some(&json!({"allocation_gpu_hours": 150}))
        )
        .0,
        200
    );
    assert_eq!(
        call(
            &carol,
            "POST",
            "/v1/members",
            Some(&json!({"user": "dan", "account": "teama2"}))
        )
        .0,
        201
    );
    assert_eq!(
        call(&carol, "DELETE", "/v1/members/teama2/dan", None).0,
        204
    );
    assert_eq!(call(&carol, "DELETE", "/v1/accounts/teama2", None).0, 204);
    // Outside: each refused with 403, nothing changed.
    let before = observable(&admin);
    let outside: Vec<(&str, &str, Option<serde_json::Value>)> = vec![
        (
            "POST",
            "/v1/accounts",
            Some(json!({"name": "x", "parent": "teamb", "allocation_gpu_hours": 1})),
        ),
        (
            "POST",
            "/v1/accounts",
            Some(json!({"name": "x", "allocation_gpu_hours": 1})),
        ),
        (
            "PATCH",
            "/v1/accounts/teamb",
            Some(json!({"allocation_gpu_hours": 1})),
        ),
        (
            "PATCH",
            "/v1/accounts/teama",
            Some(json!({"allocation_gpu_hours": 900})),
        ),
        (
            "PATCH",
            "/v1/accounts/teama1",
            Some(json!({"parent": "teamb"})),
        ),
        ("DELETE", "/v1/accounts/teamb", None),
        (
            "POST",
            "/v1/members",
            Some(json!({"user": "eve", "account": "teamb"})),
        ),
        ("PATCH", "/v1/weights", Some(json!({"set": {"h100": 3}}))),
        (
            "PATCH",
            "/v1/policy",
            Some(json!({"preemption": "aggressive"})),
        ),
        (
            "POST",
            "/v1/sync/jobs",
            Some(json!({"collected_at": 1, "runs": []})),
        ),
        ("GET", "/v1/snapshot", None),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/accounts/teamb", None),
    ];
    for (m, p, body) in outside {
        let (st, b) = call(&carol, m, p, body.as_ref());
        assert_eq!(st, 403, "{m} {p}: {b}");
        assert!(err(&b).contains("permission denied: carol may not"), "{b}");
    }
    assert_eq!(observable(&admin), before);
    // Reads inside the subtree work.
    assert_eq!(call(&carol, "GET", "/v1/accounts/teama1", None).0, 200);
}

#[test]
fn users_read_their_own_accounts_only() {
    let s = setup();
    let admin = s.unix();
    let alice = s.tcp(Some(ALICE_TOKEN));
    assert_eq!(call(&alice, "GET", "/v1/accounts/teama1", None).0, 200);
    assert_eq!(
        call(&alice, "GET", "/v1/accounts/teama", None).0,
        200,
        "ancestors are readable"
    );
    let (st, b) = call(&alice, "GET", "/v1/accounts/teamb", None);
    assert_eq!((st, err(&b).contains("permission denied")), (403, true));
    let (_, list) = call(&alice, "GET", "/v1/accounts", None);
    let names: Vec<&str> = list
        .as_array()
        .expect("list")
        .iter()
        .map(|a| a["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names, ["org", "teama", "teama1"]);
    let (_, share) = call(&alice, "GET", "/v1/share", None);
    assert!(
        share["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .all(|r| r["account"] != "teamb")
    );
    let before = observable(&admin);
    assert_eq!(
        call(
            &alice,
            "PATCH",
            "/v1/accounts/teama1",
            Some(&json!({"allocation_gpu_hours": 1}))
        )
        .0,
        403
    );
    assert_eq!(
        call(
            &alice,
            "POST",
            "/v1/members",
            Some(&json!({"user": "alice", "account": "teamb"}))
        )
        .0,
        403
    );
    assert_eq!(observable(&admin), before);
    // A reader sees everything but changes nothing.
    let reader = s.tcp(Some(READER_TOKEN));
    assert_eq!(call(&reader, "GET", "/v1/accounts/teamb", None).0, 200);
    assert_eq!(call(&reader, "DELETE", "/v1/accounts/teama1", None).0, 403);
    assert_eq!(observable(&admin), before);
}

#[test]
fn read_scope_per_role_agents_read_no_site_settings_and_members_no_other_teams_users() {
    let s = setup();
    let admin = s.unix();
    // bob belongs to teama itself, the parent alice reads for her rank path.
    add_member(&admin, "bob", "teama");
    let now = budget_service::clock::now();
    let runs = json!([
        {"job_id": 41, "run": 0, "account": "teama", "user": "bob", "gpus": 1, "state": "running", "start": now - 3600},
        {"job_id": 42, "run": 0, "account": "teama1", "user": "alice", "gpus": 1, "state": "running", "start": now - 3600},
    ]);
    let (st, b) = call(
        &admin,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": now, "runs": runs})),
    );
    assert_eq!(st, 200, "{b}");
    let users_in = |c: &budget_client::Client, path: &str| -> Vec<String> {
        let (st, b) = call(c, "GET", path, None);
        assert_eq!(st, 200, "{path}: {b}");
        b["rows"]
            .as_array()
            .expect("rows")
            .iter()
            .filter_map(|r| r["user"].as_str().map(String::from))
            .collect()
    };
    // A member sees her own per-user rows, not those of another team's
    // users (here: of the parent account she reads for her rank path), as
    // `why` refuses her that team's jobs.
    let alice = s.tcp(Some(ALICE_TOKEN));
    for path in ["/v1/share", "/v1/usage?by=user"] {
        let users = users_in(&alice, path);
        assert!(users.contains(&"alice".to_string()), "{path}: {users:?}");
        assert!(!users.contains(&"bob".to_string()), "{path}: {users:?}");
    }
    assert_eq!(call(&alice, "GET", "/v1/jobs/41/why", None).0, 403);
    // The coordinator of teama and a reader see bob's rows.
    for token in [CAROL_TOKEN, READER_TOKEN] {
        let c = s.tcp(Some(token));
        for path in ["/v1/share", "/v1/usage?by=user"] {
            let users = users_in(&c, path);
            assert!(
                users.contains(&"bob".to_string()),
                "{token} {path}: {users:?}"
            );
        }
    }
    // Site settings: users and readers read them; an agent token reads
    // nothing but posts its nodes' reports.
    let agent = s.tcp(Some(AGENT_TOKEN));
    for path in ["/v1/weights", "/v1/policy", "/v1/drains", "/v1/plugins"] {
        let (st, b) = call(&agent, "GET", path, None);
        assert_eq!(st, 403, "agent {path}: {b}");
        for token in [ALICE_TOKEN, READER_TOKEN] {
            let (st, b) = call(&s.tcp(Some(token)), "GET", path, None);
            assert_ne!(st, 403, "{token} {path}: {b}");
        }
    }
    for path in ["/v1/accounts", "/v1/share", "/v1/usage", "/v1/idle"] {
        let (st, b) = call(&agent, "GET", path, None);
        assert_eq!(st, 403, "agent {path}: {b}");
    }
}
