//! Test harness: an in-process budgetd (`budgetd-testkit`) with one token
//! per role, and request helpers.

#![allow(dead_code)]

use budget_client::Client;
use serde_json::Value;

pub const ADMIN_TOKEN: &str = "admin-token-0001";
pub const READER_TOKEN: &str = "reader-token-0001";
pub const CAROL_TOKEN: &str = "carol-token-0001";
pub const ALICE_TOKEN: &str = "alice-token-0001";
pub const AGENT_TOKEN: &str = "agent-token-0001";
pub const CONTROLLER_TOKEN: &str = "controller-token-0001";

/// Config with one token per role.
pub fn config_text() -> String {
    format!(
        "body_limit_bytes = 65536\nimport_limit_bytes = 200000\n[[tokens]]\ntoken = \"{ADMIN_TOKEN}\"\nuser = \"ops\"\nrole = \"admin\"\n\
         [[tokens]]\ntoken = \"{READER_TOKEN}\"\nuser = \"prom\"\nrole = \"reader\"\n\
         [[tokens]]\ntoken = \"{CAROL_TOKEN}\"\nuser = \"carol\"\n\
         [[tokens]]\ntoken = \"{ALICE_TOKEN}\"\nuser = \"alice\"\n\
         [[tokens]]\ntoken = \"{AGENT_TOKEN}\"\nuser = \"gpu-nodes\"\nrole = \"agent\"\nnodes = [\"n1\", \"n2\"]\n\
         [[tokens]]\ntoken = \"{CONTROLLER_TOKEN}\"\nuser = \"slurm\"\nrole = \"controller\"\n"
    )
}

/// The in-process budgetd of these tests (`budgetd-testkit`).
pub type Server = budgetd_testkit::Budgetd;
pub use budgetd_testkit::call;

/// budgetd with one token per role ([`config_text`]).
pub fn start() -> Server {
    Server::start(&config_text())
}

/// Sends raw bytes.
pub fn call_raw(c: &Client, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let r = c
        .request(
            method,
            path,
            &[("Content-Type", "application/json")],
            Some(body),
        )
        .expect("request");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// Everything observable about the tree and its history, to assert that a
/// refused request changed nothing.
pub fn observable(c: &Client) -> Value {
    let (_, accounts) = call(c, "GET", "/v1/accounts", None);
    let (_, members) = call(c, "GET", "/v1/members", None);
    let (_, coords) = call(c, "GET", "/v1/coordinators", None);
    let (_, weights) = call(c, "GET", "/v1/weights", None);
    let (_, policy) = call(c, "GET", "/v1/policy", None);
    let (_, audit) = call(c, "GET", "/v1/audit", None);
    let (_, health) = call(c, "GET", "/v1/health", None);
    serde_json::json!({
        "accounts": accounts, "members": members, "coordinators": coords, "weights": weights,
        "policy": policy, "audit": audit, "generation": health["generation"],
    })
}

/// Creates an account as admin, asserting success.
pub fn add_account(c: &Client, name: &str, parent: Option<&str>, alloc: f64) {
    let (s, b) = call(
        c,
        "POST",
        "/v1/accounts",
        Some(&serde_json::json!({"name": name, "parent": parent, "allocation_gpu_hours": alloc})),
    );
    assert_eq!(s, 201, "{b}");
}

/// Adds a member as admin, asserting success.
pub fn add_member(c: &Client, user: &str, account: &str) {
    let (s, b) = call(
        c,
        "POST",
        "/v1/members",
        Some(&serde_json::json!({"user": user, "account": account})),
    );
    assert_eq!(s, 201, "{b}");
}

/// The error message of a JSON error body.
pub fn err(b: &Value) -> String {
    b["error"].as_str().unwrap_or_default().to_string()
}

/// The value of an unlabelled sample in `/metrics`.
pub fn metric(c: &budget_client::Client, name: &str) -> Option<f64> {
    let r = c.request("GET", "/metrics", &[], None).expect("metrics");
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).expect("utf8");
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.trim().parse().ok())
}
