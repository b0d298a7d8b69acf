//! Account tree CRUD and every bad-input case of the issue: each must be a
//! clear 4xx error and change nothing.

use serde_json::json;

use crate::common::*;

#[test]
fn crud_round_trip_with_audit() {
    let s = start();
    let c = s.unix();
    add_account(&c, "org", None, 1000.0);
    add_account(&c, "teama", Some("org"), 600.0);
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        Some(&json!({"allocation_gpu_hours": 500.0})),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["allocation_gpu_hours"], 500.0);
    add_member(&c, "alice", "teama");
    let (st, b) = call(&c, "GET", "/v1/accounts/teama", None);
    assert_eq!(st, 200);
    assert_eq!(b["members"][0]["user"], "alice");
    let (st, _) = call(&c, "DELETE", "/v1/members/teama/alice", None);
    assert_eq!(st, 204);
    let (st, _) = call(&c, "DELETE", "/v1/accounts/teama", None);
    assert_eq!(st, 204);
    let (st, _) = call(&c, "GET", "/v1/accounts/teama", None);
    assert_eq!(st, 404);
    let (_, audit) = call(&c, "GET", "/v1/audit", None);
    let actions: Vec<&str> = audit
        .as_array()
        .expect("list")
        .iter()
        .map(|e| e["action"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        actions,
        [
            "account.create",
            "account.create",
            "account.modify",
            "member.add",
            "member.remove",
            "account.delete"
        ]
    );
    // who, when, old, new
    let modify = &audit[2];
    assert_eq!(modify["actor"], "root (uid 0)");
    assert_eq!(modify["old"]["allocation_gpu_hours"], 600.0);
    assert_eq!(modify["new"]["allocation_gpu_hours"], 500.0);
    assert!(modify["at"].as_i64().unwrap_or(0) > 1_700_000_000);
}

/// Sends a bad request, asserts status and message, and that nothing changed.
fn refused(
    c: &budget_client::Client,
    method: &str,
    path: &str,
    body: &[u8],
    status: u16,
    needle: &str,
) {
    let before = observable(c);
    let (st, b) = call_raw(c, method, path, body);
    assert_eq!(
        st,
        status,
        "{method} {path} {}: {b}",
        String::from_utf8_lossy(body)
    );
    assert!(
        err(&b).contains(needle),
        "{:?} should mention {needle:?}",
        err(&b)
    );
    assert_eq!(observable(c), before, "a refused request changed something");
}

#[test]
fn every_bad_tree_input_is_refused_and_changes_nothing() {
    let s = start();
    let c = s.unix();
    add_account(&c, "org", None, 1000.0);
    add_account(&c, "teama", Some("org"), 600.0);
    add_account(&c, "teama1", Some("teama"), 100.0);
    let post = |body: serde_json::Value| serde_json::to_vec(&body).expect("json");
    // unknown parent
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "x", "parent": "nope", "allocation_gpu_hours": 1})),
        422,
        "unknown parent account \"nope\"",
    );
    // cycle
    refused(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        &post(json!({"parent": "teama1"})),
        422,
        "cycle",
    );
    refused(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        &post(json!({"parent": "teama"})),
        422,
        "cycle",
    );
    // duplicate
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "teama", "allocation_gpu_hours": 1})),
        409,
        "already exists",
    );
    // negative, non-numeric allocation
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "y", "allocation_gpu_hours": -5})),
        422,
        "between 0 and 1e9",
    );
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "y", "allocation_gpu_hours": "lots"})),
        422,
        "allocation_gpu_hours",
    );
    refused(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        &post(json!({"allocation_gpu_hours": -1})),
        422,
        "between 0 and 1e9",
    );
    // children above parent without overcommit (new child, raised child, lowered parent)
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "teamb", "parent": "org", "allocation_gpu_hours": 500})),
        422,
        "above its allocation",
    );
    refused(
        &c,
        "PATCH",
        "/v1/accounts/teama1",
        &post(json!({"allocation_gpu_hours": 700})),
        422,
        "--overcommit",
    );
    refused(
        &c,
        "PATCH",
        "/v1/accounts/org",
        &post(json!({"allocation_gpu_hours": 10})),
        422,
        "above its allocation",
    );
    // bad name
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "Bad Name", "allocation_gpu_hours": 1})),
        422,
        "invalid name",
    );
    // malformed JSON, unknown fields, missing field, wrong type
    refused(
        &c,
        "POST",
        "/v1/accounts",
        b"{\"name\": \"z\", ",
        400,
        "malformed JSON",
    );
    refused(
        &c,
        "POST",
        "/v1/accounts",
        b"not json",
        400,
        "malformed JSON",
    );
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "z", "allocation_gpu_hours": 1, "colour": "red"})),
        422,
        "unknown field `colour`",
    );
    refused(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        &post(json!({"alloc": 1})),
        422,
        "unknown field `alloc`",
    );
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &post(json!({"name": "z"})),
        422,
        "missing field `allocation_gpu_hours`",
    );
    // oversize body (limit 64 KiB in the test config)
    let mut big = b"{\"name\": \"z\", \"allocation_gpu_hours\": 1, \"parent\": \"".to_vec();
    big.extend(std::iter::repeat_n(b'a', 70_000));
    big.extend(b"\"}");
    refused(
        &c,
        "POST",
        "/v1/accounts",
        &big,
        413,
        "larger than the limit of 65536 bytes",
    );
    // delete with children
    refused(
        &c,
        "DELETE",
        "/v1/accounts/teama",
        b"",
        409,
        "child accounts (teama1)",
    );
    // unknown account
    refused(
        &c,
        "PATCH",
        "/v1/accounts/ghost",
        &post(json!({"allocation_gpu_hours": 1})),
        404,
        "unknown account",
    );
    // member of unknown account, duplicate member
    add_member(&c, "alice", "teama");
    refused(
        &c,
        "POST",
        "/v1/members",
        &post(json!({"user": "bob", "account": "ghost"})),
        404,
        "unknown account",
    );
    refused(
        &c,
        "POST",
        "/v1/members",
        &post(json!({"user": "alice", "account": "teama"})),
        409,
        "already a member",
    );
    // member allocations: above the account's, negative, unknown member
    refused(
        &c,
        "PATCH",
        "/v1/members/teama/alice",
        &post(json!({"allocation_gpu_hours": 1000})),
        422,
        "above its allocation",
    );
    refused(
        &c,
        "PATCH",
        "/v1/members/teama/alice",
        &post(json!({"allocation_gpu_hours": -1})),
        422,
        "between 0 and 1e9",
    );
    refused(
        &c,
        "PATCH",
        "/v1/members/teama/bob",
        &post(json!({"allocation_gpu_hours": 1})),
        404,
        "not a member",
    );
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/members/teama/alice",
        Some(&json!({"allocation_gpu_hours": 50})),
    );
    assert_eq!(
        (st, b["allocation_gpu_hours"].as_f64()),
        (200, Some(50.0)),
        "{b}"
    );
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/members/teama/alice",
        Some(&json!({"allocation_gpu_hours": null})),
    );
    assert_eq!(
        (st, b["allocation_gpu_hours"].is_null()),
        (200, true),
        "{b}"
    );
    // weights and policy
    refused(
        &c,
        "PATCH",
        "/v1/weights",
        &post(json!({"set": {"h100": -2}})),
        422,
        "must be a number > 0 and at most",
    );
    refused(
        &c,
        "PATCH",
        "/v1/weights",
        &post(json!({"set": {"h100": "x"}})),
        422,
        "invalid type",
    );
    refused(
        &c,
        "PATCH",
        "/v1/policy",
        &post(json!({"window_secs": 5})),
        422,
        "window_secs",
    );
    refused(
        &c,
        "PATCH",
        "/v1/policy",
        &post(json!({"window": 5})),
        422,
        "unknown field `window`",
    );
    // The overcommit flag makes the same child acceptable.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/accounts/org",
        Some(&json!({"overcommit": true})),
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "teamb", "parent": "org", "allocation_gpu_hours": 500})),
    );
    assert_eq!(st, 201, "{b}");
}

#[test]
fn weights_and_policy_round_trip() {
    let s = start();
    let c = s.unix();
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/weights",
        Some(&json!({"set": {"B300": 2.5, "h100": 1.0}})),
    );
    assert_eq!(st, 200, "{b}");
    assert_eq!(b["by_type"]["b300"], 2.5);
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(&json!({"preemption": "gentle", "window_secs": 86400})),
    );
    assert_eq!(st, 200, "{b}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(
        (p["preemption"].as_str(), p["window_secs"].as_i64()),
        (Some("gentle"), Some(86400))
    );
}

/// The snapshot's policy as the plugins fetch it, with its version (the ETag).
fn snapshot_policy(c: &budget_client::Client) -> (String, serde_json::Value) {
    let r = c
        .request("GET", "/v1/snapshot", &[], None)
        .expect("snapshot");
    assert_eq!(r.status, 200);
    let etag = r.etag().expect("etag").to_string();
    let body: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
    let version = body["version"].as_str().expect("version");
    assert_eq!(etag, format!("\"{version}\""), "the ETag is the version");
    (etag, body["policy"].clone())
}

/// The policy row budgetd stored in its SQLite database.
fn stored_policy(db: &std::path::Path) -> serde_json::Value {
    let db = rusqlite::Connection::open(db).expect("open db");
    let stored: String = db
        .query_row("SELECT value FROM meta WHERE key = 'policy'", [], |r| {
            r.get(0)
        })
        .expect("policy row");
    serde_json::from_str(&stored).expect("json")
}

/// The short list a site sets: each field stored in the database, audited,
/// served and carried by the plugins' snapshot under a new version; the
/// preemption presets, left out of the snapshot at `default` (plugins of the
/// previous release deny unknown fields), which always carries `hysteresis`,
/// the rule's constant, that those plugins require.
#[test]
fn the_short_list_is_stored_audited_and_in_the_snapshot() {
    let s = start();
    let c = s.unix();
    let db = s.db.as_ref().expect("db");
    let (v0, p0) = snapshot_policy(&c);
    assert_eq!(p0["hysteresis"], json!(0.1), "{p0}");
    assert!(p0.get("preemption").is_none(), "{p0}");
    for k in budget_protocol::Policy::REMOVED.iter().skip(1) {
        assert!(p0.get(k).is_none(), "{k} in {p0}");
    }
    let set = json!({
        "default_min_runtime_secs": 1800,
        "max_min_runtime_secs": 7200,
        "require_min_runtime": true,
        "preemption": "aggressive",
        "site_max_preemptions": 5,
        "site_max_lost_gpu_hours": 12.5,
        "max_requeues": 2,
        "window_secs": 86400,
        "snapshot_max_age_secs": 30,
        "idle_threshold_secs": 600,
    });
    let (st, b) = call(&c, "PATCH", "/v1/policy", Some(&set));
    assert_eq!(st, 200, "{b}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    let (v1, p1) = snapshot_policy(&c);
    assert_ne!(v1, v0, "a policy change must change the snapshot's version");
    let stored = stored_policy(db);
    for (k, want) in set.as_object().expect("object") {
        assert_eq!(&b[k], want, "{k} answered: {b}");
        assert_eq!(&p[k], want, "{k} served: {p}");
        assert_eq!(&p1[k], want, "{k} in the snapshot: {p1}");
        assert_eq!(&stored[k], want, "{k} stored: {stored}");
    }
    assert_eq!(p1["hysteresis"], json!(0.1), "{p1}");
    let (_, audit) = call(&c, "GET", "/v1/audit", None);
    let last = audit.as_array().and_then(|a| a.last()).expect("an entry");
    assert_eq!(last["action"], "policy.set", "{last}");
    assert!(last["old"].get("preemption").is_none(), "{last}");
    assert_eq!(last["new"]["preemption"], "aggressive", "{last}");

    // Each preset is stored by name; `default` is left out again everywhere.
    for preset in ["gentle", "aggressive", "default"] {
        let (st, b) = call(
            &c,
            "PATCH",
            "/v1/policy",
            Some(&json!({"preemption": preset})),
        );
        assert_eq!(st, 200, "{b}");
        let (_, snap) = snapshot_policy(&c);
        let stored = stored_policy(db);
        if preset == "default" {
            assert!(b.get("preemption").is_none(), "{b}");
            assert!(snap.get("preemption").is_none(), "{snap}");
            assert!(stored.get("preemption").is_none(), "{stored}");
        } else {
            assert_eq!(
                (&b["preemption"], &snap["preemption"]),
                (&json!(preset), &json!(preset))
            );
            assert_eq!(stored["preemption"], json!(preset), "{stored}");
        }
    }
    let post = |body: serde_json::Value| serde_json::to_vec(&body).expect("json");
    for (body, needle) in [
        (
            json!({"preemption": "brutal"}),
            "unknown preemption preset \"brutal\": expected gentle, default or aggressive",
        ),
        (
            json!({"preemption": 2}),
            "invalid type: integer `2`, expected a string",
        ),
        (
            json!({"preemption": null}),
            "field `preemption` may not be null",
        ),
        (
            json!({"site_max_lost_gpu_hours": -1}),
            "site_max_lost_gpu_hours",
        ),
    ] {
        refused(&c, "PATCH", "/v1/policy", &post(body), 422, needle);
    }
}

/// Every setting that is now a constant of the rule is refused by name, with a
/// message saying so, whatever its value (null included) and whatever else the
/// patch sets; nothing changes: not the policy, not the database, not the
/// snapshot's version.
#[test]
fn each_constant_of_the_rule_is_refused_by_name_and_changes_nothing() {
    let s = start();
    let c = s.unix();
    let db = s.db.as_ref().expect("db");
    let (v0, p0) = snapshot_policy(&c);
    let stored0 = stored_policy(db);
    for k in budget_protocol::Policy::REMOVED {
        for v in [json!(0.2), json!(0), json!(true), json!(null), json!("off")] {
            let body =
                serde_json::to_vec(&json!({"window_secs": 86400, "preemption": "gentle", k: v}))
                    .expect("json");
            refused(
                &c,
                "PATCH",
                "/v1/policy",
                &body,
                422,
                &format!("`{k}` is a fixed constant of the rule, not a site setting"),
            );
        }
    }
    assert_eq!(
        snapshot_policy(&c),
        (v0, p0),
        "a refused patch changed the snapshot"
    );
    assert_eq!(
        stored_policy(db),
        stored0,
        "a refused patch changed the database"
    );
}
