//! budgetd answers as its own OpenAPI document says, in the cases a
//! schema-driven fuzzer (`scripts/conformance`, every check) probes: a
//! request the schema forbids is refused and changes nothing, one it allows is
//! taken, and an undrain of a node budgetd never drained asks Slurm nothing.

use serde_json::{Value, json};

use crate::common::*;
use crate::daemon::fake_slurm_budgetd;

/// `method path body` is refused with `status` and leaves everything
/// observable as it was.
fn refused_unchanged(
    c: &budget_client::Client,
    method: &str,
    path: &str,
    body: &[u8],
    status: u16,
) {
    let before = observable(c);
    let (st, b) = call_raw(c, method, path, body);
    assert_eq!(
        st,
        status,
        "{method} {path} {}: {b}",
        String::from_utf8_lossy(body)
    );
    assert!(!err(&b).is_empty(), "no error message: {b}");
    assert_eq!(observable(c), before, "a refused request changed something");
}

/// A body must be a JSON object: serde alone reads a struct of optional
/// fields from an array of its values (`[null, null]` was a 200 no-op).
#[test]
fn a_body_that_is_not_a_json_object_is_refused_and_changes_nothing() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    for body in [&b"[null, null]"[..], b"[]", b"[100.0]"] {
        refused_unchanged(&c, "PATCH", "/v1/accounts/teama", body, 422);
        refused_unchanged(&c, "PATCH", "/v1/weights", body, 422);
        refused_unchanged(&c, "PATCH", "/v1/policy", body, 422);
    }
    refused_unchanged(&c, "POST", "/v1/accounts", br#"["x", null, 5.0]"#, 422);
    let (st, b) = call_raw(&c, "PATCH", "/v1/accounts/teama", b"[null, null]");
    assert!(err(&b).contains("JSON object"), "{st} {b}");
}

/// `null` for a field the document does not mark nullable is refused (serde
/// read it as absent: `{"default": null}` was a 200 that changed nothing),
/// and so is the absence of a required one that may be `null`; the fields it
/// marks nullable still take `null`.
#[test]
fn null_for_a_field_the_document_does_not_mark_nullable_is_refused() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    add_member(&c, "alice", "teama");
    for (method, path, body) in [
        ("PATCH", "/v1/weights", json!({"default": null})),
        ("PATCH", "/v1/weights", json!({"default": null, "set": {}})),
        (
            "PATCH",
            "/v1/accounts/teama",
            json!({"allocation_gpu_hours": null}),
        ),
        ("PATCH", "/v1/accounts/teama", json!({"parent": null})),
        ("PATCH", "/v1/accounts/teama", json!({"overcommit": null})),
        ("PATCH", "/v1/policy", json!({"window_secs": null})),
        (
            "PATCH",
            "/v1/policy",
            json!({"preemption": null, "site_max_preemptions": 3}),
        ),
    ] {
        let bytes = serde_json::to_vec(&body).expect("json");
        refused_unchanged(&c, method, path, &bytes, 422);
        let (_, b) = call_raw(&c, method, path, &bytes);
        assert!(err(&b).contains("may not be null"), "{path} {body}: {b}");
    }
    // A required field that may be null must be there: `{}` read as `null`
    // cleared a member's allocation.
    refused_unchanged(&c, "PATCH", "/v1/members/teama/alice", b"{}", 422);
    // Nullable fields: null means something.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/policy",
        Some(&json!({"site_max_preemptions": null})),
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/members/teama/alice",
        Some(&json!({"allocation_gpu_hours": null})),
    );
    assert_eq!(st, 200, "{b}");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "teamb", "parent": null, "allocation_gpu_hours": 5})),
    );
    assert_eq!(st, 201, "{b}");
    // Nullable through the schema a property references (`queue` is a
    // `QueueOrder`, nullable): null there is "no queue", as schemathesis reads it.
    let ctl = s.tcp(Some(CONTROLLER_TOKEN));
    let (st, b) = call(
        &ctl,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": 0, "live": [], "queue": null, "runs": []})),
    );
    assert_eq!(st, 200, "{b}");
}

/// The served document, as a client reads it.
fn document(c: &budget_client::Client) -> Value {
    let (st, doc) = call(c, "GET", "/v1/openapi.json", None);
    assert_eq!(st, 200);
    doc
}

/// Every integer in a query or path states its bounds, and budgetd takes a
/// value at each bound (no 400/422: a schema-valid request) and refuses one
/// past the upper bound with 400. Before, `GET /v1/audit?after=` with a
/// number past 2^63 was a 400 "number too large" the schema did not foretell.
#[test]
fn every_integer_parameter_states_its_bounds_and_budgetd_takes_them() {
    let s = start();
    let c = s.unix();
    let doc = document(&c);
    let mut checked = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        let shared = item["parameters"].as_array().cloned().unwrap_or_default();
        for (method, op) in item.as_object().expect("item") {
            if method == "parameters" || method == "post" {
                continue;
            }
            let mut params = shared.clone();
            params.extend(op["parameters"].as_array().cloned().unwrap_or_default());
            for p in &params {
                let schema = &p["schema"];
                if schema["type"] != "integer" {
                    continue;
                }
                let name = p["name"].as_str().expect("name");
                let (Some(min), Some(max)) =
                    (schema["minimum"].as_i64(), schema["maximum"].as_i64())
                else {
                    panic!("{method} {path}: integer `{name}` states no bounds: {schema}");
                };
                let url = |v: &str| {
                    if p["in"] == "path" {
                        path.replace(&format!("{{{name}}}"), v)
                    } else {
                        format!("{path}?{name}={v}")
                    }
                };
                for v in [min.to_string(), max.to_string()] {
                    let (st, b) = call_raw(&c, &method.to_ascii_uppercase(), &url(&v), b"");
                    assert!(
                        st != 400 && st != 422,
                        "{method} {} (in bounds) answered {st}: {b}",
                        url(&v)
                    );
                }
                let past = (i128::from(max) + 1).to_string();
                let (st, b) = call_raw(&c, &method.to_ascii_uppercase(), &url(&past), b"");
                assert_eq!(st, 400, "{method} {} (out of bounds): {b}", url(&past));
                checked += 1;
            }
        }
    }
    assert!(checked >= 3, "{checked} integer parameters");
}

/// Every request body is required, as budgetd requires it: the document said
/// nothing, so a request without one was schema-valid and answered 400.
#[test]
fn every_request_body_is_required_and_a_missing_one_is_a_4xx() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    let doc = document(&c);
    let mut bodies = 0;
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("item") {
            if op["requestBody"].is_null() {
                continue;
            }
            bodies += 1;
            assert_eq!(
                op["requestBody"]["required"], true,
                "{method} {path}: body not marked required"
            );
            if path.contains("backup") || path.contains("drains") {
                continue; // the fake Slurm's routes are checked in `drains`
            }
            let concrete = path
                .replace("{name}", "teama")
                .replace("{account}", "teama")
                .replace("{user}", "alice");
            let r = c
                .request(&method.to_ascii_uppercase(), &concrete, &[], None)
                .expect("request");
            assert!(
                (400..500).contains(&r.status),
                "{method} {path} without a body: {}",
                r.status
            );
        }
    }
    assert!(bodies >= 10, "{bodies} bodies");
}

/// An undrain naming a node budgetd has not drained is a 404 before any
/// Slurm call: before, budgetd asked Slurm to expand and read the nodes
/// first, so with slurmctld down the answer was a 502 for a request that
/// could never have done anything.
#[test]
fn an_undrain_of_a_node_budgetd_has_not_drained_asks_slurm_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    let (st, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n3", "reason": "fan"})),
    );
    assert_eq!(st, 201, "{b}");
    let calls = || std::fs::read_to_string(slurm.join("calls")).unwrap_or_default();
    std::fs::write(slurm.join("ctld-down"), "").expect("marker");
    for expr in ["0", "n1", "n[1-2]", "n3,n1", "nosuch"] {
        let before = calls();
        let (st, b) = call(&c, "DELETE", &format!("/v1/drains/{expr}"), None);
        assert_eq!(st, 404, "{expr}: {b}");
        assert!(err(&b).contains("not drained by budgetd"), "{expr}: {b}");
        // The drain worker reads Slurm on its own schedule; this request
        // ran no `scontrol show hostnames`/`update` of its own.
        let new = calls()[before.len()..].to_string();
        assert!(
            !new.contains("show hostnames") && !new.contains("update"),
            "{expr}: Slurm was asked: {new}"
        );
    }
    // budgetd's own drain still goes to Slurm (down: 502, the drain stays).
    let (st, b) = call(&c, "DELETE", "/v1/drains/n3", None);
    assert_eq!(st, 502, "{b}");
    std::fs::remove_file(slurm.join("ctld-down")).expect("marker");
    let (st, b) = call(&c, "DELETE", "/v1/drains/n3", None);
    assert_eq!(st, 200, "{b}");
}

/// A number written just past a bound the document states is refused: read
/// with serde_json's fast float parser, `1000000.0000000001` came out as the
/// bound itself (one unit in the last place off), so a weight the schema
/// forbids was stored.
#[test]
fn a_number_written_just_past_a_stated_bound_is_refused() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    refused_unchanged(
        &c,
        "PATCH",
        "/v1/weights",
        br#"{"default": 1000000.0000000001}"#,
        422,
    );
    refused_unchanged(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        br#"{"allocation_gpu_hours": 1000000000.0000002}"#,
        422,
    );
    // The bounds themselves are taken.
    let (st, b) = call_raw(&c, "PATCH", "/v1/weights", br#"{"default": 1000000.0}"#);
    assert_eq!(st, 200, "{b}");
    let (st, b) = call_raw(
        &c,
        "PATCH",
        "/v1/accounts/teama",
        br#"{"allocation_gpu_hours": 1000000000}"#,
    );
    assert_eq!(st, 200, "{b}");
}
