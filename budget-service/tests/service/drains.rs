//! Drains that Slurm refuses or cannot be reached for, on the real `budgetd`
//! binary with its real SQLite file, Slurm stood in for by
//! `tests/fixtures/fake-slurm` (which answers with Slurm 22.05's own messages
//! and applies a node list node by node as slurmctld does): a refusal is a 409
//! carrying Slurm's words, an unreachable Slurm a 502, and neither leaves a
//! drain behind, in budgetd or in Slurm.

use std::path::Path;

use serde_json::{Value, json};

use crate::common::*;
use crate::daemon::fake_slurm_budgetd;

/// `(node, reason)` of every drain budgetd lists.
fn listed(b: &Value) -> Vec<(String, String)> {
    b.as_array()
        .expect("list")
        .iter()
        .map(|d| {
            (
                d["node"].as_str().unwrap_or("").to_string(),
                d["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// `(node, reason)` rows of the `drains` table, read from the database file.
fn stored(dir: &Path) -> Vec<(String, String)> {
    let db = rusqlite::Connection::open_with_flags(
        dir.join("budget.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open db");
    let mut st = db
        .prepare("SELECT node, reason FROM drains ORDER BY node")
        .expect("prepare");
    st.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// What the fake Slurm holds drained: `(node, Slurm's reason)`.
fn slurm_drained(slurm: &Path) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = std::fs::read_to_string(slurm.join("drained"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_once('\t'))
        .map(|(n, r)| (n.to_string(), r.to_string()))
        .collect();
    v.sort();
    v
}

fn pair(n: &str, r: &str) -> (String, String) {
    (n.to_string(), r.to_string())
}

fn error_of(b: &Value) -> &str {
    b["error"].as_str().unwrap_or("")
}

#[test]
fn a_drain_slurm_refuses_midway_is_a_409_with_slurms_words_and_is_undone_in_slurm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n1", "reason": "fan"})),
    );
    assert_eq!(s, 201, "{b}");
    // n3 is gone from Slurm between budgetd's check and its update (a
    // reconfigure): slurmctld sets n1's reason, drains n2, then stops at n3
    // with "Invalid node name specified".
    std::fs::write(slurm.join("forget-before-update"), "n3\n").expect("marker");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n[1-3]", "reason": "psu"})),
    );
    assert_eq!(s, 409, "{b}");
    assert!(
        error_of(&b).starts_with(
            "Slurm refused this request: slurm_update error: Invalid node name specified"
        ),
        "{b}"
    );
    // Nothing changed: n1 still drained for "fan" (budgetd and Slurm), n2 resumed again.
    let (s, b) = call(&c, "GET", "/v1/drains", None);
    assert_eq!(s, 200, "{b}");
    assert_eq!(listed(&b), vec![pair("n1", "fan")], "{b}");
    assert_eq!(stored(dir.path()), vec![pair("n1", "fan")]);
    assert_eq!(slurm_drained(&slurm), vec![pair("n1", "budget: fan")]);
}

#[test]
fn an_unknown_node_is_refused_before_anything_changes_with_slurms_words() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n1,nosuchnode", "reason": "x"})),
    );
    assert_eq!(s, 422, "{b}");
    let msg = error_of(&b);
    assert!(
        msg.contains("unknown node(s) nosuchnode")
            && msg.contains("Slurm: Node nosuchnode not found")
            && msg.contains("Slurm has: n1,n2,n3"),
        "{b}"
    );
    // An undrain names only budgetd's own drains: a node it never drained,
    // known to Slurm or not, is a 404 (`conformance` checks Slurm is not asked).
    let (s, b) = call(&c, "DELETE", "/v1/drains/nosuchnode", None);
    assert_eq!(s, 404, "{b}");
    assert!(
        error_of(&b).contains("not drained by budgetd: nosuchnode"),
        "{b}"
    );
    assert!(stored(dir.path()).is_empty());
    assert!(slurm_drained(&slurm).is_empty());
    let calls = std::fs::read_to_string(slurm.join("calls")).unwrap_or_default();
    assert!(
        !calls.contains("update"),
        "Slurm was asked to change: {calls}"
    );
}

#[test]
fn slurm_unreachable_is_a_502_and_nothing_is_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    std::fs::write(slurm.join("ctld-down"), "").expect("marker");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n1", "reason": "x"})),
    );
    assert_eq!(s, 502, "{b}");
    assert!(
        error_of(&b).starts_with("could not reach Slurm: ")
            && error_of(&b).contains("Unable to contact slurm controller (connect failure)"),
        "{b}"
    );
    assert!(stored(dir.path()).is_empty());
    std::fs::remove_file(slurm.join("ctld-down")).expect("marker");
    let (s, b) = call(&c, "GET", "/v1/drains", None);
    assert_eq!((s, listed(&b)), (200, vec![]), "{b}");
}

#[test]
fn a_drain_whose_reply_is_lost_is_a_502_and_undone_in_slurm() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    // slurmctld applies the drain, then its reply is lost.
    std::fs::write(slurm.join("lose-update-reply"), "").expect("marker");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n[1-2]", "reason": "x"})),
    );
    assert_eq!(s, 502, "{b}");
    assert!(
        error_of(&b).contains("Unable to contact slurm controller (receive failure)"),
        "{b}"
    );
    assert!(stored(dir.path()).is_empty());
    assert!(
        slurm_drained(&slurm).is_empty(),
        "{:?}",
        slurm_drained(&slurm)
    );
}

#[test]
fn a_drain_that_cannot_be_undone_names_the_nodes_left_drained() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let c = d.client();
    // slurmctld applies the drain and dies before it answers: budgetd cannot
    // undo it, and says which nodes Slurm may still hold drained.
    std::fs::write(slurm.join("ctld-dies-on-update"), "").expect("marker");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n[1-2]", "reason": "x"})),
    );
    assert_eq!(s, 502, "{b}");
    let msg = error_of(&b);
    assert!(
        msg.contains("receive failure") && msg.contains("n1,n2 may still be drained in Slurm"),
        "{b}"
    );
    assert!(stored(dir.path()).is_empty());
}

#[test]
fn an_undrain_slurm_refuses_is_a_409_and_the_drain_stays_in_force() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    // n3 registered with less than configured: slurmctld refuses to resume it.
    std::fs::write(slurm.join("nodes"), "n1\nn2\nn3 gpu:4 IDLE+INVALID_REG\n").expect("nodes");
    let c = d.client();
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n[1-3]", "reason": "fan"})),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(&c, "DELETE", "/v1/drains/n%5B1-3%5D", None);
    assert_eq!(s, 409, "{b}");
    assert!(
        error_of(&b).starts_with(
            "Slurm refused this request: slurm_update error: Invalid node state specified"
        ),
        "{b}"
    );
    // Slurm resumed n1 and n2 before refusing n3: budgetd drained them again.
    let all = vec![pair("n1", "fan"), pair("n2", "fan"), pair("n3", "fan")];
    assert_eq!(stored(dir.path()), all);
    assert_eq!(
        slurm_drained(&slurm),
        vec![
            pair("n1", "budget: fan"),
            pair("n2", "budget: fan"),
            pair("n3", "budget: fan")
        ]
    );
}
