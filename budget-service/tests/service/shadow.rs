//! Shadow mode: the pending queue a sync carries (`site_factor/budget` in
//! `mode=shadow`), recorded in SQLite at most once per `shadow_sample_secs`;
//! `GET /v1/shadow` scoped per caller, and the `budget_shadow_*` metrics.

use serde_json::{Value, json};

use crate::common::*;

/// The scene of `why`'s test: teamb far over budget runs job 2 (8 GPUs, its
/// window over 1 h ago); teama, entitled to ~6 GPUs and holding 1 (job 4,
/// protected), waits with job 3 (4 GPUs); teamb's job 5 waits too.
fn scene(c: &budget_client::Client, now: i64) {
    add_account(c, "teama", None, 1000.0);
    add_account(c, "teamb", None, 100.0);
    add_member(c, "alice", "teama");
    add_member(c, "bob", "teamb");
    let runs = json!([
        {"job_id": 1, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "ended", "start": now - 86_400, "end": now - 3600},
        {"job_id": 2, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "state": "running", "start": now - 7200, "min_runtime_secs": 3600},
        {"job_id": 3, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "state": "pending", "min_runtime_secs": 600},
        {"job_id": 4, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "state": "running", "start": now - 60, "min_runtime_secs": 3600},
        {"job_id": 5, "run": 0, "account": "teamb", "user": "bob", "gpus": 1, "state": "pending", "min_runtime_secs": 600},
    ]);
    let (st, b) = call(
        c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": now, "runs": runs})),
    );
    assert_eq!(st, 200, "{b}");
}

/// Slurm (multifactor alone) puts teamb's job 5 first; the budget order teama's job 3.
fn queue(now: i64) -> Value {
    json!({"collected_at": now, "runs": [], "queue": {"num_leaves": 2, "jobs": [
        {"job_id": 5, "priority": 2000, "tier": "over_budget", "rank": 1},
        {"job_id": 3, "priority": 1000, "tier": "budgeted", "rank": 0},
    ]}})
}

fn rows(db: &std::path::Path, sql: &str) -> i64 {
    let conn = rusqlite::Connection::open(db).expect("open db");
    conn.query_row(sql, [], |r| r.get(0)).expect(sql)
}

#[test]
fn a_queue_sample_records_order_would_be_preemptions_and_shortfall_once() {
    let s = start();
    let c = s.unix();
    let now = budget_service::clock::now();
    scene(&c, now);
    // Before any sample: an empty report, nothing in /metrics but the counters.
    let (st, r) = call(&c, "GET", "/v1/shadow", None);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["order"]["samples"], 0);
    assert_eq!(r["order"]["latest_at"], Value::Null);
    assert_eq!(r["preemptions"], json!([]));
    assert_eq!(metric(&c, "budget_shadow_samples_total"), Some(0.0));
    assert_eq!(metric(&c, "budget_shadow_order_tau"), None);

    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&queue(now)));
    assert_eq!(st, 200, "{b}");
    // A second queue within shadow_sample_secs (60 s) is not a new sample.
    let (st, _) = call(&c, "POST", "/v1/sync/jobs", Some(&queue(now + 1)));
    assert_eq!(st, 200);

    let (st, r) = call(&c, "GET", "/v1/shadow", None);
    assert_eq!(st, 200, "{r}");
    let o = &r["order"];
    assert_eq!(
        (
            o["samples"].as_u64(),
            o["pending"].as_u64(),
            o["pairs"].as_u64(),
            o["discordant"].as_u64(),
            o["slurm_ties"].as_u64(),
        ),
        (Some(1), Some(2), Some(1), Some(1), Some(0)),
        "{o}"
    );
    assert_eq!(o["tau"], -1.0);
    assert_eq!(o["mean_discordant_share"], 1.0);
    let furthest: Vec<(u64, u64, u64)> = o["furthest"]
        .as_array()
        .expect("furthest")
        .iter()
        .map(|g| {
            (
                g["job_id"].as_u64().unwrap_or(0),
                g["slurm_position"].as_u64().unwrap_or(0),
                g["budget_position"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    assert_eq!(furthest, vec![(3, 2, 1), (5, 1, 2)]);
    assert_eq!(o["furthest"][0]["account"], "teama");

    // The rule would take job 2 (over budget, its window over) for job 3:
    // 8 GPUs x 2 h of work lost. Job 4 is protected; job 5 is teamb's own.
    let p = r["preemptions"].as_array().expect("preemptions");
    assert_eq!(p.len(), 1, "{r}");
    assert_eq!(
        (
            &p[0]["victim"],
            &p[0]["preemptor"],
            &p[0]["account"],
            &p[0]["gpus"]
        ),
        (&json!(2), &json!(3), &json!("teamb"), &json!(8))
    );
    let lost = p[0]["lost_gpu_hours"].as_f64().unwrap_or(0.0);
    assert!((lost - 16.0).abs() < 0.01, "{lost}");
    assert_eq!(p[0]["reason"]["reason"], "victim_over_budget");
    assert!((r["lost_gpu_hours"].as_f64().unwrap_or(0.0) - lost).abs() < 1e-9);

    // teama holds 1 GPU against a target of min(entitled, demand 5).
    let short = r["shortfall"].as_array().expect("shortfall");
    let a = short
        .iter()
        .find(|t| t["account"] == "teama")
        .expect("teama row");
    assert_eq!(a["held_gpus"], 1.0);
    assert_eq!(a["demand_gpus"], 5.0);
    let target = a["target_gpus"].as_f64().unwrap_or(0.0);
    assert!(target > 1.0 && target <= 5.0, "{a}");
    assert!((a["shortfall_gpus"].as_f64().unwrap_or(0.0) - (target - 1.0)).abs() < 1e-9);
    let b_row = short
        .iter()
        .find(|t| t["account"] == "teamb")
        .expect("teamb row");
    assert_eq!(b_row["shortfall_gpus"], 0.0);

    // In SQLite: one sample, one would-be preemption, a shortfall row per team.
    let db = s.db.clone().expect("db");
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_orders"), 1);
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_preemptions"), 1);
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_shortfall"), 2);
    // Nothing was carried out: the preemption record is empty.
    let (_, rec) = call(&c, "GET", "/v1/preemptions", None);
    assert_eq!(rec["rows"], json!([]));

    // /metrics.
    assert_eq!(metric(&c, "budget_shadow_samples_total"), Some(1.0));
    assert_eq!(metric(&c, "budget_shadow_would_preempt_total"), Some(1.0));
    assert_eq!(metric(&c, "budget_shadow_order_tau"), Some(-1.0));
    assert_eq!(
        metric(&c, "budget_shadow_order_discordant_pairs"),
        Some(1.0)
    );
    assert_eq!(metric(&c, "budget_shadow_would_preempt_window"), Some(1.0));
    let shortfall = c
        .request("GET", "/metrics", &[], None)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default();
    assert!(
        shortfall.contains("budget_shadow_shortfall_gpus{account=\"teama\"}"),
        "{shortfall}"
    );
}

#[test]
fn later_samples_keep_a_decision_once_and_the_report_is_scoped() {
    let s = budgetd_testkit::Budgetd::start(&format!("shadow_sample_secs = 1\n{}", config_text()));
    let c = s.unix();
    let now = budget_service::clock::now();
    scene(&c, now);
    for k in 0..3 {
        let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&queue(now + k)));
        assert_eq!(st, 200, "{b}");
        std::thread::sleep(std::time::Duration::from_millis(1100));
    }
    let (_, r) = call(&c, "GET", "/v1/shadow", None);
    assert_eq!(r["order"]["samples"], 3, "{r}");
    // The pair stays in flight (job 2 runs, job 3 waits): recorded once.
    assert_eq!(r["preemptions"].as_array().map(Vec::len), Some(1), "{r}");
    let db = s.db.clone().expect("db");
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_preemptions"), 1);
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_orders"), 3);
    // The teama shortfall accumulates over the samples' spans.
    let a = r["shortfall"]
        .as_array()
        .and_then(|v| v.iter().find(|t| t["account"] == "teama").cloned())
        .expect("teama");
    assert!(
        a["shortfall_gpu_hours"].as_f64().unwrap_or(0.0) > 0.0,
        "{a}"
    );

    // alice (teama) sees her job and the preemption made for it, and her
    // team's row; not the teamb job among the furthest or teamb's row.
    let alice = s.tcp(Some(ALICE_TOKEN));
    let (st, r) = call(&alice, "GET", "/v1/shadow", None);
    assert_eq!(st, 200, "{r}");
    let jobs: Vec<&Value> = r["order"]["furthest"]
        .as_array()
        .expect("furthest")
        .iter()
        .map(|g| &g["job_id"])
        .collect();
    assert_eq!(jobs, [&json!(3)]);
    assert_eq!(r["preemptions"].as_array().map(Vec::len), Some(1));
    let accounts: Vec<&Value> = r["shortfall"]
        .as_array()
        .expect("shortfall")
        .iter()
        .map(|t| &t["account"])
        .collect();
    assert_eq!(accounts, [&json!("teama")]);
    // carol belongs to no team: aggregates only.
    let carol = s.tcp(Some(CAROL_TOKEN));
    let (st, r) = call(&carol, "GET", "/v1/shadow", None);
    assert_eq!(st, 200, "{r}");
    assert_eq!(r["order"]["discordant"], 1);
    assert_eq!(
        (&r["order"]["furthest"], &r["preemptions"], &r["shortfall"]),
        (&json!([]), &json!([]), &json!([]))
    );
    // A window before the samples: none of them.
    let (_, r) = call(
        &c,
        "GET",
        &format!("/v1/shadow?since={}&at={}", now - 100, now - 50),
        None,
    );
    assert_eq!(r["order"]["samples"], 0);
    let (st, b) = call(
        &c,
        "GET",
        &format!("/v1/shadow?since={}&at={}", now, now - 1),
        None,
    );
    assert_eq!((st, err(&b).contains("since")), (400, true));
}

#[test]
fn only_the_controller_sends_a_queue_a_bad_one_changes_nothing_and_held_jobs_take_nothing() {
    let s = start();
    let c = s.unix();
    let now = budget_service::clock::now();
    scene(&c, now);
    let alice = s.tcp(Some(ALICE_TOKEN));
    assert_eq!(
        call(&alice, "POST", "/v1/sync/jobs", Some(&queue(now))).0,
        403
    );
    let mut bad = queue(now);
    bad["queue"]["jobs"][0]["tier"] = json!("platinum");
    let (st, _) = call(&c, "POST", "/v1/sync/jobs", Some(&bad));
    assert!((400..500).contains(&st), "{st}");
    let db = s.db.clone().expect("db");
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_orders"), 0);
    // The controller's token over TCP is taken. Job 3 is held (Slurm leaves it out of
    // the queue): it preempts nothing, even in shadow.
    let ctl = s.tcp(Some(CONTROLLER_TOKEN));
    let mut held = queue(now);
    held["queue"]["jobs"] =
        json!([{"job_id": 5, "priority": 2000, "tier": "over_budget", "rank": 1}]);
    assert_eq!(call(&ctl, "POST", "/v1/sync/jobs", Some(&held)).0, 200);
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_orders"), 1);
    assert_eq!(rows(&db, "SELECT COUNT(*) FROM shadow_preemptions"), 0);
}
