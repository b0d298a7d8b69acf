//! The priority plugin's job-state sync against a real budgetd (in-process,
//! real SQLite, real Unix socket): a first pass after a restart with more jobs
//! than one request body may hold is sent in acknowledged chunks, and a run
//! budgetd refuses is reported, not resent forever.

use std::ffi::c_char;
use std::time::Instant;

use budget_protocol::{JobRun, JobSync, RunState};
use budgetd_testkit::{Budgetd, call};
use priority_budget::sync::{CHUNK_RUNS, SyncAck, Syncer};
use serde_json::json;
use slurm_plugin_common::settings::Settings;

/// Stands in for Slurm's `log_var` (the plugin logs through it; no slurmctld
/// here). Declared with the fixed arguments the plugin always passes
/// (`level, "%s", text`): on x86-64 and aarch64 a variadic call with these
/// arguments reaches a non-variadic callee unchanged.
///
/// # Safety
/// `text` is a NUL-terminated string (what `slurm_plugin_common::log` passes).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn log_var(_level: u32, _fmt: *const c_char, text: *const c_char) {
    if !text.is_null() {
        // SAFETY: the caller passes a valid C string.
        let s = unsafe { std::ffi::CStr::from_ptr(text) };
        eprintln!("slurm log: {}", s.to_string_lossy());
    }
}

const T0: i64 = 1_800_000_000;

fn run(job_id: u32) -> JobRun {
    JobRun {
        job_id,
        run: 0,
        submit: Some(T0 - 10),
        account: "teama".into(),
        user: "alice".into(),
        partition: Some("gpu".into()),
        gpus: 1,
        gpu_type: Some("h100".into()),
        start: Some(T0),
        end: None,
        state: RunState::Running,
        free_tier: false,
        min_runtime_secs: 3600,
        // Long but accepted node lists make each run ~400 bytes of JSON.
        nodes: Some(format!("node[{}]", "0001,".repeat(20) + "0002")),
        priority: Some(1000),
        reason: None,
        time_limit_secs: Some(7200),
        checkpoint_secs: None,
    }
}

fn budgetd() -> Budgetd {
    let d = Budgetd::start("");
    let c = d.unix();
    let (s, b) = call(
        &c,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "teama", "allocation_gpu_hours": 1e6})),
    );
    assert_eq!(s, 201, "{b}");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/members",
        Some(&json!({"user": "alice", "account": "teama"})),
    );
    assert_eq!(s, 201, "{b}");
    d
}

fn syncer(d: &Budgetd) -> Syncer {
    let (settings, errors) = Settings::parse(&format!(
        "budget_socket={},budget_timeout_ms=30000",
        d.socket.display()
    ));
    assert!(errors.is_empty(), "{errors:?}");
    Syncer::new(&settings)
}

fn charged_gpu_hours(d: &Budgetd, at: i64) -> f64 {
    let (s, u) = call(
        &d.unix(),
        "GET",
        &format!("/v1/usage?by=user&at={at}"),
        None,
    );
    assert_eq!(s, 200, "{u}");
    u["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter_map(|r| r["usage_gpu_hours"].as_f64())
                .sum()
        })
        .unwrap_or(0.0)
}

#[test]
fn a_first_pass_larger_than_the_body_limit_is_sent_in_acknowledged_chunks() {
    const JOBS: u32 = 20_000;
    let d = budgetd();
    let batch = JobSync {
        collected_at: T0 + 100,
        runs: (1..=JOBS).map(run).collect(),
        live: None,
        queue: None,
    };
    let body = serde_json::to_vec(&batch).expect("encode").len();
    assert!(
        body > 4 << 20,
        "the batch must exceed budgetd's 4 MiB limit: {body} bytes"
    );
    // What the plugin did before: the whole batch in one request is refused
    // (413) on every pass.
    let one = d
        .unix()
        .post_json::<_, serde_json::Value>("/v1/sync/jobs", &batch);
    assert!(
        one.as_ref().is_err_and(|e| e.to_string().contains("413")),
        "one body of {body} bytes: {one:?}"
    );
    let mut s = syncer(&d);
    let t = Instant::now();
    let ack = s.send_jobs(batch.clone());
    let took = t.elapsed();
    assert_eq!(ack, SyncAck::All);
    eprintln!(
        "{JOBS} runs ({body} bytes) in {} chunks of at most {CHUNK_RUNS}: {took:?}",
        (JOBS as usize).div_ceil(CHUNK_RUNS)
    );
    // Every run is in the ledger: 20,000 GPUs x 100 s.
    let h = charged_gpu_hours(&d, T0 + 100);
    assert!(
        (h - f64::from(JOBS) * 100.0 / 3600.0).abs() < 1e-6,
        "{h} GPU-hours"
    );
    // Repeating the pass changes nothing and is acknowledged again.
    assert_eq!(s.send_jobs(batch), SyncAck::All);
}

#[test]
fn a_refused_run_is_reported_and_the_rest_of_the_batch_is_stored() {
    let d = budgetd();
    let mut bad = run(2);
    bad.state = RunState::Ended;
    bad.start = Some(T0 + 50);
    bad.end = Some(T0 + 10); // an end before its start: refused
    let batch = JobSync {
        collected_at: T0 + 100,
        runs: vec![run(1), bad, run(3)],
        live: None,
        queue: None,
    };
    let mut s = syncer(&d);
    // Before: the whole batch was rejected (422) and resent on every pass.
    assert_eq!(s.send_jobs(batch), SyncAck::All);
    let h = charged_gpu_hours(&d, T0 + 100);
    assert!((h - 200.0 / 3600.0).abs() < 1e-9, "{h} GPU-hours");
    let (st, _) = call(&d.unix(), "GET", "/v1/jobs/2/why", None);
    assert_eq!(st, 404, "the refused run is not stored");
}

#[test]
fn an_unreachable_budgetd_acknowledges_nothing() {
    let d = budgetd();
    let mut s = syncer(&d);
    drop(d);
    let ack = s.send_jobs(JobSync {
        collected_at: T0,
        runs: vec![run(1), run(2)],
        live: None,
        queue: None,
    });
    assert_eq!(ack, SyncAck::Except([1, 2].into_iter().collect()));
}
