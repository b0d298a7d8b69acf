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
        Some(&json!({"hysteresis": 0.25, "window_secs": 86400})),
    );
    assert_eq!(st, 200, "{b}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(
        (p["hysteresis"].as_f64(), p["window_secs"].as_i64()),
        (Some(0.25), Some(86400))
    );
}

/// The cost-aware rule's ranking knobs: unset (the rule's default) they are
/// absent from the policy and the snapshot; set, budgetd stores them in its
/// database, audits the change, and the plugins' snapshot carries them under a
/// new version; a bad value is a 422 that changes nothing; `null` goes back to
/// the default.
#[test]
fn ranking_knobs_are_stored_audited_validated_and_in_the_snapshot() {
    let s = start();
    let c = s.unix();
    let snapshot = || {
        let r = c
            .request("GET", "/v1/snapshot", &[], None)
            .expect("snapshot");
        assert_eq!(r.status, 200);
        let etag = r.etag().expect("etag").to_string();
        let body: serde_json::Value = serde_json::from_slice(&r.body).expect("json");
        let version = body["version"].as_str().expect("version");
        assert_eq!(etag, format!("\"{version}\""), "the ETag is the version");
        (etag, body["policy"].clone())
    };
    let knobs = [
        "tier_band",
        "share_order",
        "entitled_first",
        "tier_projection",
        "balance_band",
    ];
    let (v0, p0) = snapshot();
    for k in knobs {
        assert!(p0.get(k).is_none(), "{k} in {p0}");
    }

    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(
            &json!({"tier_band": 0.2, "share_order": false, "entitled_first": true, "tier_projection": 0.4, "balance_band": 0.25}),
        ),
    );
    assert_eq!(st, 200, "{b}");
    let want = json!([0.2, false, true, 0.4, 0.25]);
    let got = |p: &serde_json::Value| json!(knobs.map(|k| p[k].clone()));
    assert_eq!(got(&b), want, "{b}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(got(&p), want, "{p}");
    let (v1, p1) = snapshot();
    assert_eq!(got(&p1), want, "{p1}");
    assert_ne!(v1, v0, "a policy change must change the snapshot's version");
    // What budgetd stored in its SQLite database (and serves after a restart).
    let db = rusqlite::Connection::open(s.db.as_ref().expect("db")).expect("open db");
    let stored: String = db
        .query_row("SELECT value FROM meta WHERE key = 'policy'", [], |r| {
            r.get(0)
        })
        .expect("policy row");
    let stored: serde_json::Value = serde_json::from_str(&stored).expect("json");
    assert_eq!(got(&stored), want, "{stored}");
    let (_, audit) = call(&c, "GET", "/v1/audit", None);
    let last = audit.as_array().and_then(|a| a.last()).expect("an entry");
    assert_eq!(last["action"], "policy.set", "{last}");
    assert!(last["old"].get("tier_band").is_none(), "{last}");
    assert_eq!(got(&last["new"]), want, "{last}");

    let post = |body: serde_json::Value| serde_json::to_vec(&body).expect("json");
    for (body, needle) in [
        (
            json!({"tier_band": 1.5}),
            "tier_band must be a fraction between 0 and 1",
        ),
        (json!({"tier_band": -0.1}), "tier_band must be a fraction"),
        (json!({"tier_band": "off"}), "invalid type"),
        (json!({"share_order": "maybe"}), "invalid type"),
        (json!({"entitled_first": 1}), "invalid type"),
        (
            json!({"tier_projection": 1.2}),
            "tier_projection must be a fraction of a window between 0 and 1",
        ),
        (json!({"tier_projection": -0.5}), "tier_projection must be"),
        (json!({"tier_projection": "on"}), "invalid type"),
        (
            json!({"balance_band": 1.5}),
            "balance_band must be a fraction of the entitlement between 0 and 1",
        ),
        (json!({"balance_band": -0.2}), "balance_band must be"),
        (json!({"balance_band": true}), "invalid type"),
        // One bad field refuses the whole patch.
        (
            json!({"share_order": true, "tier_band": 2}),
            "tier_band must be",
        ),
    ] {
        refused(&c, "PATCH", "/v1/policy", &post(body), 422, needle);
    }
    assert_eq!(snapshot().1, p1, "a refused patch changed the snapshot");

    // 0 is no band, kept as 0 (not unset).
    let (st, b) = call(&c, "PATCH", "/v1/policy", Some(&json!({"tier_band": 0})));
    assert_eq!((st, &b["tier_band"]), (200, &json!(0.0)), "{b}");
    let (v2, p2) = snapshot();
    assert_eq!(p2["tier_band"], json!(0.0), "{p2}");
    assert_ne!(v2, v1);
    // 0 is no projection (the snapshot's tier), kept as 0 as well.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(&json!({"tier_projection": 0})),
    );
    assert_eq!((st, &b["tier_projection"]), (200, &json!(0.0)), "{b}");
    assert_eq!(snapshot().1["tier_projection"], json!(0.0));
    // 0 is the instantaneous entitlement test, kept as 0 too.
    let (st, b) = call(&c, "PATCH", "/v1/policy", Some(&json!({"balance_band": 0})));
    assert_eq!((st, &b["balance_band"]), (200, &json!(0.0)), "{b}");
    assert_eq!(snapshot().1["balance_band"], json!(0.0));
    // null: back to the rule's default, absent again everywhere.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(
            &json!({"tier_band": null, "share_order": null, "entitled_first": null, "tier_projection": null, "balance_band": null}),
        ),
    );
    assert_eq!(st, 200, "{b}");
    let (_, p3) = snapshot();
    for k in knobs {
        assert!(b.get(k).is_none(), "{k} in {b}");
        assert!(p3.get(k).is_none(), "{k} in {p3}");
    }
    assert_eq!(p3, p0);
}
