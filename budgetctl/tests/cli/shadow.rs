//! `budgetctl shadow`: what shadow mode recorded from a queue the controller
//! sent (teamb far over budget holds 8 GPUs; Slurm ranks its pending job above
//! teama's, the budget the other way; the rule would take teamb's job for teama's).

use serde_json::json;

use crate::support::*;

#[test]
fn shadow_prints_the_order_the_would_be_preemption_and_the_shortfall() {
    let d = budgetd();
    let c = d.unix();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs(),
    )
    .expect("time fits i64");
    for (name, alloc) in [("teama", 1000), ("teamb", 100)] {
        call_ok(
            &c,
            "POST",
            "/v1/accounts",
            &json!({"name": name, "allocation_gpu_hours": alloc}),
        );
    }
    for (user, account) in [("alice", "teama"), ("bob", "teamb")] {
        call_ok(
            &c,
            "POST",
            "/v1/members",
            &json!({"user": user, "account": account}),
        );
    }
    let runs = json!([
        {"job_id": 1, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "ended", "start": now - 86_400, "end": now - 3600},
        {"job_id": 2, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "running", "start": now - 7200, "min_runtime_secs": 3600},
        {"job_id": 3, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "state": "pending", "min_runtime_secs": 600},
        {"job_id": 5, "run": 0, "account": "teamb", "user": "bob", "gpus": 1, "state": "pending", "min_runtime_secs": 600},
    ]);
    call_ok(
        &c,
        "POST",
        "/v1/sync/jobs",
        &json!({"collected_at": now, "runs": runs}),
    );
    let out = ctl_ok(&d.socket, &["shadow"]);
    assert!(out.contains("no queue sample in the window"), "{out}");
    call_ok(
        &c,
        "POST",
        "/v1/sync/jobs",
        &json!({"collected_at": now, "runs": [], "queue": {"num_leaves": 2, "jobs": [
            {"job_id": 5, "priority": 2000, "tier": "over_budget", "rank": 1},
            {"job_id": 3, "priority": 1000, "tier": "budgeted", "rank": 0},
        ]}}),
    );

    let out = ctl_ok(&d.socket, &["shadow"]);
    assert!(
        out.contains(": 2 pending, 1 pairs ordered by the budget, 1 ordered the other way by Slurm (100%), 0 tied by Slurm"),
        "{out}"
    );
    assert!(
        out.contains("rank correlation (Kendall tau-b): -1 latest, -1 mean over 1 samples; discordant pairs 100% on average"),
        "{out}"
    );
    let row = |prefix: &str| {
        out.lines()
            .find(|l| l.trim_start().starts_with(prefix))
            .unwrap_or_else(|| panic!("no row {prefix:?}:\n{out}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    // Job 3: second in Slurm's order, first in the budget's.
    assert_eq!(
        row("3 "),
        ["3", "teama", "alice", "1000", "budgeted", "1", "2", "1"]
    );
    assert!(
        out.contains("preemptions the rule would have made (none was carried out): 1, 16"),
        "{out}"
    );
    let p = out
        .lines()
        .find(|l| l.contains("2 (teamb/bob)"))
        .unwrap_or_else(|| panic!("no preemption row:\n{out}"));
    assert!(
        p.contains("3 (teama/alice)") && p.contains(" 16") && p.contains("over budget"),
        "{p}"
    );
    let teama = row("teama ");
    // Holds 0 of a target of 4 (its demand, under its entitlement).
    assert_eq!((teama[1], teama[4], teama[5]), ("0", "4", "4"), "{teama:?}");
    // --json prints the service's answer.
    let json: serde_json::Value =
        serde_json::from_str(&ctl_ok(&d.socket, &["--json", "shadow"])).expect("json");
    assert_eq!(json["preemptions"][0]["victim"], 2);
    assert_eq!(json["order"]["discordant"], 1);
}
