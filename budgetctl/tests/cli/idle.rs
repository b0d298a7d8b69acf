//! `budgetctl idle` and the idle line of `budgetctl why`: one job holding a
//! GPU idle for an hour (past the 30 min threshold) and a busy one.

use serde_json::{Value, json};

use crate::support::*;

fn sample(index: u32, uuid: &str, job: u32, idle_secs: i64) -> Value {
    json!({
        "index": index, "uuid": uuid, "name": "NVIDIA H100 80GB HBM3",
        "util_pct": if idle_secs > 0 { 0 } else { 90 }, "memory_used_mib": 1,
        "memory_total_mib": 81559, "idle_secs": idle_secs,
        "processes": [{"pid": 100 + index, "job_id": job}],
    })
}

#[test]
fn idle_lists_the_squatting_job_and_why_flags_it() {
    let d = budgetd();
    let c = d.unix();
    let now = budget_service_now();
    call_ok(
        &c,
        "POST",
        "/v1/accounts",
        &json!({"name": "teama", "allocation_gpu_hours": 100}),
    );
    call_ok(
        &c,
        "POST",
        "/v1/members",
        &json!({"user": "alice", "account": "teama"}),
    );
    let run = |job: u32| {
        json!({"job_id": job, "run": 0, "account": "teama", "user": "alice", "gpus": 2,
               "state": "running", "start": now - 7200, "nodes": "n1"})
    };
    call_ok(
        &c,
        "POST",
        "/v1/sync/jobs",
        &json!({"collected_at": now, "runs": [run(101), run(102)]}),
    );
    // n1: job 101 idle on GPU a1 for the last hour (1.0 GPU-h), busy on a2;
    // job 102 busy throughout.
    for (at, idle) in [(now - 3600, 0), (now, 3600)] {
        let report = json!({"node": "n1", "at": at, "nvml": true, "gpus": [
            sample(0, "GPU-a1", 101, idle), sample(1, "GPU-a2", 101, 0),
            sample(2, "GPU-a3", 102, 0),
        ]});
        call_ok(&c, "POST", "/v1/agent/report", &report);
    }

    let out = ctl_ok(&d.socket, &["idle"]);
    assert!(out.starts_with("jobs idle beyond 30m:\n"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("101 "))
        .unwrap_or_else(|| panic!("no row for job 101:\n{out}"));
    for cell in ["teama", "alice", "n1", "1/2", "1h 0m"] {
        assert!(line.contains(cell), "{cell:?} missing in {line:?}");
    }
    assert!(!out.lines().any(|l| l.starts_with("102 ")), "{out}");
    let teama = out
        .lines()
        .find(|l| l.starts_with("teama"))
        .unwrap_or_else(|| panic!("no account row:\n{out}"));
    assert_eq!(
        teama.split_whitespace().collect::<Vec<_>>(),
        ["teama", "1", "1", "1", "1"],
        "idle GPU-h, jobs, flagged, idle GPUs now:\n{out}"
    );
    assert!(out.contains("node agents:") && out.contains("n1"), "{out}");

    let json: Value = serde_json::from_str(&ctl_ok(&d.socket, &["idle", "--json"])).expect("json");
    assert_eq!(json["flagged"][0]["job_id"], 101);
    assert_eq!(json["flagged"][0]["idle_secs"], 3600);

    let why = ctl_ok(&d.socket, &["why", "101"]);
    let idle = why
        .lines()
        .find(|l| l.starts_with("idle:"))
        .unwrap_or_else(|| panic!("no idle line:\n{why}"));
    assert!(
        idle.contains("1 GPU(s) idle since") && idle.contains("(1h 0m) on n1"),
        "{idle}"
    );
    assert!(!ctl_ok(&d.socket, &["why", "102"]).contains("idle:"));
}

fn budget_service_now() -> i64 {
    i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs(),
    )
    .expect("time fits i64")
}
