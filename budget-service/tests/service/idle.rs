//! Idle GPUs (docs/design.md §8): node-agent reports from two nodes, a job flagged
//! past the threshold, idle GPU-hours checked against hand-computed streaks
//! (an agent restart and a busy sample included), idempotent repeats, bad or
//! oversize reports refused with nothing stored, who may post and who sees
//! what, and metrics (budgetctl's tests print the same with the real binary).

use budget_client::Client;
use serde_json::{Value, json};

use crate::common::*;

/// One GPU sample: `job` holds it (if any), idle for `idle` seconds.
fn gpu(index: u32, uuid: &str, job: Option<u32>, idle: i64) -> Value {
    let processes: Vec<Value> = job
        .iter()
        .map(|j| json!({"pid": 4000 + index, "job_id": j, "used_memory_mib": 500}))
        .collect();
    json!({
        "index": index, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3",
        "util_pct": if idle > 0 { 0 } else { 87 },
        "memory_used_mib": 500, "memory_total_mib": 81559,
        "processes": processes, "idle_secs": idle,
    })
}

fn report(node: &str, at: i64, gpus: Vec<Value>) -> Value {
    json!({"node": node, "at": at, "nvml": true, "gpus": gpus})
}

fn post(c: &Client, r: &Value) -> Value {
    let (st, b) = call(c, "POST", "/v1/agent/report", Some(r));
    assert_eq!(st, 200, "{b}");
    b
}

/// Teams, users and the runs the plugin synced: job 101 (teama/alice, 2 GPUs
/// on n1), 202 (teamb/bob, 1 GPU on n2), 303 (teamb/bob, busy on n2).
fn setup(s: &Server, now: i64) {
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    add_account(&c, "teamb", None, 100.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let (st, b) = call(
        &c,
        "POST",
        "/v1/coordinators",
        Some(&json!({"user": "carol", "account": "teamb"})),
    );
    assert_eq!(st, 201, "{b}");
    let run = |job: u32, acct: &str, user: &str, gpus: u32, node: &str| {
        json!({"job_id": job, "run": 0, "account": acct, "user": user, "gpus": gpus,
               "state": "running", "start": now - 7200, "nodes": node})
    };
    let sync = json!({"collected_at": now, "runs": [
        run(101, "teama", "alice", 2, "n1"),
        run(202, "teamb", "bob", 1, "n2"),
        run(303, "teamb", "bob", 1, "n2"),
    ]});
    assert_eq!(call(&c, "POST", "/v1/sync/jobs", Some(&sync)).0, 200);
}

/// The reports, in order. Hand-computed streaks (threshold 1800 s):
/// - 101 on n1/a1: idle [now-3600, now] = 3600 s, open in n1's latest report: flagged;
/// - 101 on n1/a2: idle [now-900, now] = 900 s: below the threshold;
/// - 202 on n2/b1: idle from now-3200; the agent restarts at now-1700 (its first
///   sample says 0, then a streak from now-1700), so one streak
///   [now-3200, now-1400] = 1800 s; busy from now-1000: not open, not flagged;
/// - 303 on n2/b2: always busy.
///
/// teama: 4500 s = 1.25 GPU-h; teamb: 1800 s = 0.5 GPU-h.
fn reports(now: i64) -> Vec<Value> {
    vec![
        report(
            "n1",
            now - 3600,
            vec![
                gpu(0, "GPU-a1", Some(101), 0),
                gpu(1, "GPU-a2", Some(101), 0),
            ],
        ),
        report(
            "n1",
            now - 1800,
            vec![
                gpu(0, "GPU-a1", Some(101), 1800),
                gpu(1, "GPU-a2", Some(101), 0),
            ],
        ),
        report(
            "n1",
            now,
            vec![
                gpu(0, "GPU-a1", Some(101), 3600),
                gpu(1, "GPU-a2", Some(101), 900),
            ],
        ),
        report(
            "n2",
            now - 2000,
            vec![
                gpu(0, "GPU-b1", Some(202), 1200),
                gpu(1, "GPU-b2", Some(303), 0),
            ],
        ),
        // The agent restarted: idle_secs starts again from 0.
        report(
            "n2",
            now - 1700,
            vec![
                gpu(0, "GPU-b1", Some(202), 0),
                gpu(1, "GPU-b2", Some(303), 0),
            ],
        ),
        report(
            "n2",
            now - 1400,
            vec![
                gpu(0, "GPU-b1", Some(202), 300),
                gpu(1, "GPU-b2", Some(303), 0),
            ],
        ),
        report(
            "n2",
            now - 1000,
            vec![
                gpu(0, "GPU-b1", Some(202), 0),
                gpu(1, "GPU-b2", Some(303), 0),
            ],
        ),
        report(
            "n2",
            now,
            vec![
                gpu(0, "GPU-b1", Some(202), 0),
                gpu(1, "GPU-b2", Some(303), 0),
            ],
        ),
    ]
}

fn account<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["by_account"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["account"] == name))
        .unwrap_or_else(|| panic!("no idle row for {name}: {v}"))
}

/// What must not change when a report is repeated (node ages move with the clock).
fn stable(v: &Value) -> Value {
    json!({"flagged": v["flagged"], "by_account": v["by_account"],
           "nodes": v["nodes"].as_array().map(|n| n.iter().map(|x| json!([x["node"], x["at"], x["gpus"]])).collect::<Vec<_>>())})
}

#[test]
fn two_nodes_flag_the_idle_job_with_exact_gpu_hours_and_repeats_change_nothing() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let admin = s.unix();
    for r in reports(now) {
        post(&admin, &r);
    }
    let (st, v) = call(&admin, "GET", "/v1/idle", None);
    assert_eq!(st, 200, "{v}");
    assert_eq!(v["threshold_secs"], 1800);
    let flagged = v["flagged"].as_array().expect("flagged");
    assert_eq!(flagged.len(), 1, "{v}");
    let f = &flagged[0];
    assert_eq!(
        (
            &f["job_id"],
            &f["account"],
            &f["user"],
            &f["gpus_idle"],
            &f["gpus"]
        ),
        (
            &json!(101),
            &json!("teama"),
            &json!("alice"),
            &json!(1),
            &json!(2)
        )
    );
    assert_eq!(f["nodes"], json!(["n1"]));
    assert_eq!(f["idle_since"], now - 3600);
    assert_eq!(f["idle_secs"], 3600);
    assert_eq!(f["idle_gpus"][0]["uuid"], "GPU-a1");
    assert_eq!(account(&v, "teama")["idle_gpu_hours"], 1.25);
    assert_eq!(account(&v, "teamb")["idle_gpu_hours"], 0.5);
    assert_eq!(account(&v, "teama")["idle_gpus_now"], 1);
    assert_eq!(account(&v, "teamb")["flagged_jobs"], 0);
    let nodes: Vec<&str> = v["nodes"]
        .as_array()
        .expect("nodes")
        .iter()
        .filter_map(|n| n["node"].as_str())
        .collect();
    assert_eq!(nodes, ["n1", "n2"]);

    // A window that cuts the streaks: [now-1800, now] holds 1800 + 900 s of teama
    // and 400 s of teamb's streak.
    let (_, w) = call(
        &admin,
        "GET",
        &format!("/v1/idle?since={}&at={now}", now - 1800),
        None,
    );
    assert_eq!(account(&w, "teama")["idle_gpu_hours"], 0.75);
    assert_eq!(account(&w, "teamb")["idle_gpu_hours"], 400.0 / 3600.0);

    // Every report again, and out of order: nothing changes.
    let before = stable(&v);
    for r in reports(now).iter().rev() {
        let o = post(&admin, r);
        assert_eq!(
            (
                &o["streaks_inserted"],
                &o["streaks_extended"],
                &o["latest_replaced"]
            ),
            (&json!(0), &json!(0), &json!(false)),
            "{o}"
        );
    }
    let (_, again) = call(&admin, "GET", "/v1/idle", None);
    assert_eq!(stable(&again), before);

    // why shows the flag; metrics carry the gauges.
    let (_, why) = call(&admin, "GET", "/v1/jobs/101/why", None);
    assert_eq!(why["idle"]["gpus_idle"], 1, "{why}");
    let (_, why) = call(&admin, "GET", "/v1/jobs/202/why", None);
    assert!(why["idle"].is_null(), "{why}");
    let text = String::from_utf8(
        admin
            .request("GET", "/metrics", &[], None)
            .expect("metrics")
            .body,
    )
    .expect("utf8");
    for needle in [
        "budget_idle_gpus{account=\"teama\"} 1",
        "budget_idle_gpus{account=\"teamb\"} 0",
        "budget_idle_gpu_hours{account=\"teama\"} 1.25",
        "budget_idle_gpu_hours{account=\"teamb\"} 0.5",
        "budget_agent_last_report_age_seconds{node=\"n1\"}",
        "budget_agent_last_report_age_seconds{node=\"n2\"}",
    ] {
        assert!(text.contains(needle), "metrics lack {needle:?}:\n{text}");
    }

    // Users see their own accounts' jobs, coordinators their subtree.
    let (_, alice) = call(&s.tcp(Some(ALICE_TOKEN)), "GET", "/v1/idle", None);
    assert_eq!(alice["flagged"][0]["job_id"], 101);
    let accts: Vec<&Value> = alice["by_account"]
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| &r["account"])
        .collect();
    assert_eq!(accts, [&json!("teama")]);
    assert_eq!(alice["nodes"], json!([]));
    let (_, carol) = call(&s.tcp(Some(CAROL_TOKEN)), "GET", "/v1/idle", None);
    assert_eq!(carol["flagged"], json!([]));
    assert_eq!(account(&carol, "teamb")["idle_gpu_hours"], 0.5);
    assert_eq!(carol["by_account"].as_array().map(Vec::len), Some(1));
}

#[test]
fn bad_or_oversize_reports_store_nothing_and_only_admins_or_agents_post() {
    let s = start();
    let now = budget_service::clock::now();
    setup(&s, now);
    let admin = s.unix();
    let good = report("n1", now, vec![gpu(0, "GPU-a1", Some(101), 2000)]);
    let mut unknown = good.clone();
    unknown["extra"] = json!(1);
    let mut unknown_inner = good.clone();
    unknown_inner["gpus"][0]["temperature"] = json!(40);
    let mut dup = good.clone();
    dup["gpus"] = json!([gpu(0, "GPU-a1", Some(101), 2000), gpu(1, "GPU-a1", None, 0)]);
    let future = report("n1", now + 86_400, vec![]);
    let mut no_nvml_gpus = good.clone();
    no_nvml_gpus["nvml"] = json!(false);
    for (bad, status, why) in [
        (&unknown, 422, "extra"),
        (&unknown_inner, 422, "temperature"),
        (&dup, 422, "twice"),
        (&future, 422, "clock"),
        (&no_nvml_gpus, 422, "nvml"),
    ] {
        let (st, b) = call(&admin, "POST", "/v1/agent/report", Some(bad));
        assert_eq!(st, status, "{b}");
        assert!(err(&b).contains(why), "{why:?} not in {b}");
    }
    // Over the body limit (64 KiB in the test config): 413.
    let big: Vec<Value> = (0..400)
        .map(|i| gpu(i, &format!("GPU-{i:04}-{}", "x".repeat(100)), Some(101), 0))
        .collect();
    let (st, b) = call(
        &admin,
        "POST",
        "/v1/agent/report",
        Some(&report("n1", now, big)),
    );
    assert_eq!(st, 413, "{b}");
    let (st, b) = call_raw(&admin, "POST", "/v1/agent/report", b"{not json");
    assert_eq!(st, 400, "{b}");
    // Not an admin or agent: refused.
    for token in [ALICE_TOKEN, READER_TOKEN, CAROL_TOKEN] {
        let (st, b) = call(&s.tcp(Some(token)), "POST", "/v1/agent/report", Some(&good));
        assert_eq!(st, 403, "{b}");
    }
    assert_eq!(
        call(&s.tcp(None), "POST", "/v1/agent/report", Some(&good)).0,
        401
    );
    let (_, v) = call(&admin, "GET", "/v1/idle", None);
    assert_eq!(
        (&v["flagged"], &v["by_account"], &v["nodes"]),
        (&json!([]), &json!([]), &json!([])),
        "a refused report stored something: {v}"
    );
    // An agent token may post, and nothing else.
    let agent = s.tcp(Some(AGENT_TOKEN));
    let o = post(&agent, &good);
    assert_eq!(o["streaks_inserted"], 1, "{o}");
    let sync = json!({"collected_at": now, "runs": []});
    assert_eq!(call(&agent, "POST", "/v1/sync/jobs", Some(&sync)).0, 403);
    assert_eq!(call(&agent, "GET", "/metrics", None).0, 403);
    let (st, v) = call(&agent, "GET", "/v1/idle", None);
    assert_eq!(st, 403, "agents read nothing: {v}");
    let (_, v) = call(&admin, "GET", "/v1/idle", None);
    assert_eq!(v["flagged"][0]["job_id"], 101);
}

#[test]
fn a_report_flags_only_the_jobs_the_ledger_places_on_its_node() {
    let s = start();
    let now = budget_service::clock::now();
    // 101 runs on n1, 202 and 303 on n2 (as synced).
    setup(&s, now);
    let c = s.unix();
    let wide = json!({"collected_at": now, "runs": [
        {"job_id": 404, "run": 0, "account": "teamb", "user": "bob", "gpus": 2,
         "state": "running", "start": now - 7200, "nodes": "n[1-2]"},
    ]});
    assert_eq!(call(&c, "POST", "/v1/sync/jobs", Some(&wide)).0, 200);
    // n1's token (it lists n1 and n2) reports, for n1, idle GPUs of 101 (on
    // n1), 202 (on n2 only), 404 (on n1 and n2) and 505 (not synced yet).
    let agent = s.tcp(Some(AGENT_TOKEN));
    let o = post(
        &agent,
        &report(
            "n1",
            now,
            vec![
                gpu(0, "GPU-a1", Some(101), 2000),
                gpu(1, "GPU-a2", Some(202), 2000),
                gpu(2, "GPU-a3", Some(404), 2000),
                gpu(3, "GPU-a4", Some(505), 2000),
            ],
        ),
    );
    // 202 runs elsewhere: ignored, and its team is charged no idle time.
    assert_eq!(o["streaks_inserted"], 3, "{o}");
    let (_, v) = call(&c, "GET", "/v1/idle", None);
    let flagged: Vec<u64> = v["flagged"]
        .as_array()
        .expect("flagged")
        .iter()
        .filter_map(|f| f["job_id"].as_u64())
        .collect();
    assert!(!flagged.contains(&202), "{v}");
    assert!(flagged.contains(&101) && flagged.contains(&404), "{v}");
    // The job ignored is counted, once per report that names it.
    assert_eq!(metric(&c, "budget_agent_jobs_off_node_total"), Some(1.0));
}
