//! Hardening, on the real service: a plain user's large body is refused from
//! its head, before any byte of it is read; slow and idle connections are
//! closed and connections capped per peer while the controller still gets
//! in; expensive reads are limited per caller; the controller role is exact;
//! agent tokens report for their own nodes only, in bounded reports; `why`
//! shows a user only the jobs they may see, and two budgetd refuse to share a
//! database file, which is created 0600, a failed re-drain keeps the drain in
//! force, and one job that cannot be requeued does not stop a drain pass,
//! nor one of a `PreemptMode=OFF` partition, whose node is empty at its time limit.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::common::*;
use crate::daemon::{
    BUDGETD, Daemon, fake_slurm_budgetd, fake_slurm_budgetd_with_nodes,
    fake_slurm_budgetd_with_partitions,
};

/// Sends `head` (a request head, no body) and returns the status line answered
/// within `wait`, or `None` if the server said nothing (it waits for the body).
fn head_only(addr: std::net::SocketAddr, head: &str, wait: Duration) -> Option<String> {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(wait)).expect("timeout");
    s.write_all(head.as_bytes()).expect("write head");
    let mut buf = [0u8; 512];
    match s.read(&mut buf) {
        Ok(n) if n > 0 => Some(
            String::from_utf8_lossy(&buf[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string(),
        ),
        _ => None,
    }
}

/// A budgetd whose configuration is `extra` before the test configuration.
fn start_with(extra: &str) -> budgetd_testkit::Budgetd {
    budgetd_testkit::Budgetd::start(&format!("{extra}{}", config_text()))
}

/// `n` TCP connections to `addr` that send nothing, accepted in this order.
fn hold_idle(addr: std::net::SocketAddr, n: usize) -> Vec<TcpStream> {
    (0..n)
        .map(|_| TcpStream::connect(addr).expect("connect"))
        .collect()
}

#[test]
fn a_plain_users_large_body_is_refused_from_its_head_before_any_byte_is_read() {
    let s = start();
    let addr = s.tcp.expect("tcp");
    // 150 kB: under the import limit (200 kB) of these tests, over a user's 64 KiB.
    // Only the head is sent: a server that reads the body before deciding waits.
    for path in ["/v1/usage/import", "/v1/sync/jobs", "/v1/accounts"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE_TOKEN}\r\n\
             Content-Type: text/plain\r\nContent-Length: 150000\r\n\r\n"
        );
        let t = Instant::now();
        let status = head_only(addr, &head, Duration::from_secs(3));
        assert!(
            status.as_deref().is_some_and(|l| l.contains(" 413 ")),
            "{path}: a plain user's 150 kB body was not refused from its head: {status:?}"
        );
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "{path}: {:?}",
            t.elapsed()
        );
    }
    // A 200 MB Content-Length from a plain user: refused at once too.
    let head = format!(
        "POST /v1/usage/import HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {ALICE_TOKEN}\r\n\
         Content-Length: 209715200\r\n\r\n"
    );
    let status = head_only(addr, &head, Duration::from_secs(3));
    assert!(
        status.as_deref().is_some_and(|l| l.contains(" 413 ")),
        "{status:?}"
    );
    // A body without Content-Length (chunked) is cut off at the user limit.
    let big = vec![b'x'; 100_000];
    let (st, b) = call_raw(&s.tcp(Some(ALICE_TOKEN)), "POST", "/v1/accounts", &big);
    assert_eq!(st, 413, "{b}");
    assert!(err(&b).contains("65536"), "{b}");
    // The admin's import limit is unchanged: 150 kB of sacct text is read and parsed.
    let (st, b) = call_raw(
        &s.tcp(Some(ADMIN_TOKEN)),
        "POST",
        "/v1/usage/import",
        &vec![b'\n'; 150_000],
    );
    assert_ne!(st, 413, "{b}");
}

#[test]
fn roles_are_exact_and_the_controller_alone_syncs_and_reads_the_snapshot() {
    let s = budgetd_testkit::Budgetd::start(&format!(
        "{}[admins]\nusers = [\"alice\"]\n",
        config_text()
    ));
    let now = budget_service::clock::now();
    let sync = json!({"collected_at": now, "runs": []});
    let rec = json!({"victim": 5, "run": 0, "reason": "rebalance", "at": now});
    // An admin token: everything but the controller's routes.
    let admin = s.tcp(Some(ADMIN_TOKEN));
    assert_eq!(call(&admin, "GET", "/v1/snapshot", None).0, 403);
    assert_eq!(call(&admin, "POST", "/v1/sync/jobs", Some(&sync)).0, 403);
    assert_eq!(call(&admin, "POST", "/v1/preemptions", Some(&rec)).0, 403);
    // The controller token: the snapshot, syncs and records, reads; no changes.
    let ctl = s.tcp(Some(CONTROLLER_TOKEN));
    assert_eq!(call(&ctl, "GET", "/v1/snapshot", None).0, 200);
    let (st, b) = call(&ctl, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let (st, b) = call(&ctl, "POST", "/v1/preemptions", Some(&rec));
    assert!(st == 200 || st == 201 || st == 422, "{st} {b}");
    assert_ne!(st, 403, "{b}");
    let (st, _) = call(
        &ctl,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "x", "allocation_gpu_hours": 1})),
    );
    assert_eq!(st, 403);
    // A `user` token whose user is a configured admin name stays a user.
    let alice = s.tcp(Some(ALICE_TOKEN));
    let (st, b) = call(
        &alice,
        "POST",
        "/v1/accounts",
        Some(&json!({"name": "x", "allocation_gpu_hours": 1})),
    );
    assert_eq!(
        st, 403,
        "a user token named like an admin became admin: {b}"
    );
    assert_eq!(call(&alice, "GET", "/v1/snapshot", None).0, 403);
    // Root on the socket is admin and controller (the plugins run as SlurmUser/root).
    let root = s.unix();
    assert_eq!(call(&root, "GET", "/v1/snapshot", None).0, 200);
    assert_eq!(call(&root, "POST", "/v1/sync/jobs", Some(&sync)).0, 200);
}

#[test]
fn idle_and_slow_connections_are_closed_and_capped_per_peer_while_root_gets_in() {
    let s = start_with("header_timeout_secs = 1\nmax_connections_per_peer = 4\n");
    let addr = s.tcp.expect("tcp");
    let t = Instant::now();
    let mut idle = hold_idle(addr, 4);
    // A slow client: half a request head, then nothing.
    idle[0]
        .write_all(b"GET /v1/health HTTP/1.1\r\nHo")
        .expect("write");
    std::thread::sleep(Duration::from_millis(200));
    // Over the cap from this address, without a controller or agent token:
    // not served (503 from the reserve kept for those), and closed at once.
    let mut fifth = TcpStream::connect(addr).expect("connect");
    fifth
        .set_read_timeout(Some(Duration::from_secs(2)))
        .expect("timeout");
    let _ = fifth.write_all(b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n");
    let mut answer = Vec::new();
    let _ = fifth.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    assert!(
        answer.is_empty() || answer.starts_with("HTTP/1.1 503 "),
        "a connection over the per-peer cap was served: {answer}"
    );
    // Root on the socket is never capped.
    assert_eq!(call(&s.unix(), "GET", "/v1/health", None).0, 200);
    // The idle and the slow connections are closed by the head deadline (1 s).
    for c in &mut idle {
        c.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        let mut b = Vec::new();
        let _ = c.read_to_end(&mut b);
    }
    let closed_after = t.elapsed();
    assert!(
        closed_after < Duration::from_secs(4),
        "idle connections were kept open for {closed_after:?}"
    );
    // With them gone, the address may connect again.
    assert_eq!(
        call(&s.tcp(Some(ALICE_TOKEN)), "GET", "/v1/health", None).0,
        200
    );
}

#[test]
fn the_controller_and_agents_get_in_over_tcp_while_idle_clients_hold_the_general_share() {
    let s = start_with("max_connections = 4\nmax_connections_per_peer = 4\n");
    let addr = s.tcp.expect("tcp");
    // Unauthenticated clients hold every connection of the general share,
    // sending nothing.
    let held = hold_idle(addr, 4);
    std::thread::sleep(Duration::from_millis(200));
    // The controller's snapshot still answers, over TCP, from the same address.
    let r = s
        .tcp(Some(CONTROLLER_TOKEN))
        .request("GET", "/v1/snapshot", &[], None)
        .map(|r| r.status);
    assert_eq!(
        r.ok(),
        Some(200),
        "the controller's snapshot over TCP while the general share is held"
    );
    // An agent's report path is reserved too (its token's own nodes).
    let now = budget_service::clock::now();
    let report = json!({"node": "n1", "at": now, "nvml": true, "gpus": []});
    let r = s
        .tcp(Some(AGENT_TOKEN))
        .request(
            "POST",
            "/v1/agent/report",
            &[("Content-Type", "application/json")],
            Some(report.to_string().as_bytes()),
        )
        .map(|r| r.status);
    assert_eq!(
        r.ok(),
        Some(200),
        "an agent's report while the share is held"
    );
    // Anyone else gets no connection out of the reserve: a user's request is
    // answered 503 and its connection closed, an unauthenticated one too.
    let mut answered_503 = 0.0;
    for token in [Some(ALICE_TOKEN), None] {
        let r = s
            .tcp(token)
            .request("GET", "/v1/health", &[], None)
            .map(|r| r.status);
        assert!(
            matches!(r, Ok(503) | Err(_)),
            "{token:?} was served over the general cap: {r:?}"
        );
        if matches!(r, Ok(503)) {
            answered_503 += 1.0;
        }
    }
    // Each refusal from the reserve is counted.
    assert!(answered_503 > 0.0, "no request was answered 503");
    assert_eq!(
        metric(&s.unix(), "budget_reserve_refusals_total"),
        Some(answered_503)
    );
    drop(held);
}

#[test]
fn idle_clients_holding_the_reserve_too_are_displaced_by_the_controller() {
    let s =
        start_with("max_connections = 4\nmax_connections_per_peer = 4\nreserved_connections = 2\n");
    let addr = s.tcp.expect("tcp");
    // Unauthenticated clients hold the general share and then the whole
    // reserve, sending nothing (accepted in this order).
    let held = hold_idle(addr, 6);
    // The controller still gets in: its connection takes the place of the
    // oldest reserved one that showed no token.
    let r = s
        .tcp(Some(CONTROLLER_TOKEN))
        .request("GET", "/v1/snapshot", &[], None)
        .map(|r| r.status);
    assert_eq!(
        r.ok(),
        Some(200),
        "the controller's snapshot while idle clients held the general share and the reserve"
    );
    // The displacement is counted where operators look.
    let metrics = s
        .unix()
        .request("GET", "/metrics", &[], None)
        .map(|r| String::from_utf8_lossy(&r.body).into_owned())
        .unwrap_or_default();
    assert!(
        metrics
            .lines()
            .any(|l| l.starts_with("budget_reserve_displaced_total ") && !l.ends_with(" 0")),
        "{metrics}"
    );
    drop(held);
}

#[test]
fn expensive_reads_are_limited_per_caller_but_not_for_admins_or_the_controller() {
    let s = start_with("expensive_reads_per_minute = 3\n");
    let alice = s.tcp(Some(ALICE_TOKEN));
    let statuses: Vec<u16> = (0..5)
        .map(|_| call(&alice, "GET", "/v1/share", None).0)
        .collect();
    assert_eq!(
        statuses,
        vec![200, 200, 200, 429, 429],
        "alice's share reads"
    );
    assert_eq!(metric(&s.unix(), "budget_reads_throttled_total"), Some(2.0));
    // Another user has a budget of their own; admins and the controller have none.
    assert_eq!(
        call(&s.tcp(Some(CAROL_TOKEN)), "GET", "/v1/usage", None).0,
        200
    );
    for _ in 0..5 {
        assert_eq!(
            call(&s.tcp(Some(ADMIN_TOKEN)), "GET", "/v1/share", None).0,
            200
        );
        assert_eq!(
            call(&s.tcp(Some(CONTROLLER_TOKEN)), "GET", "/v1/share", None).0,
            200
        );
    }
}

#[test]
fn agent_tokens_report_only_their_nodes_in_bounded_reports() {
    let s = start();
    let now = budget_service::clock::now();
    let agent = s.tcp(Some(AGENT_TOKEN));
    let report = |node: &str, gpus: serde_json::Value| json!({"node": node, "at": now, "nvml": true, "gpus": gpus});
    let gpu = |i: u32, jobs: std::ops::Range<u32>| {
        json!({"index": i, "uuid": format!("GPU-{i}"), "name": "H100", "util_pct": 0,
               "memory_used_mib": 1, "memory_total_mib": 80000, "idle_secs": 60,
               "processes": jobs.map(|j| json!({"pid": j, "job_id": j})).collect::<Vec<_>>()})
    };
    let (st, b) = call(
        &agent,
        "POST",
        "/v1/agent/report",
        Some(&report("n1", json!([gpu(0, 1..3)]))),
    );
    assert_eq!(st, 200, "{b}");
    // Another node's GPUs: refused, nothing stored.
    let (st, b) = call(
        &agent,
        "POST",
        "/v1/agent/report",
        Some(&report("n9", json!([gpu(0, 1..3)]))),
    );
    assert_eq!(st, 403, "{b}");
    let (_, v) = call(&s.unix(), "GET", "/v1/idle", None);
    let nodes: Vec<&str> = v["nodes"]
        .as_array()
        .map(|a| a.iter().filter_map(|n| n["node"].as_str()).collect())
        .unwrap_or_default();
    assert_eq!(nodes, vec!["n1"], "{v}");
    // 8 GPUs x 100 jobs = 800 (job, GPU) rows from one report: refused (as admin too).
    let many: Vec<_> = (0..8).map(|i| gpu(i, 1..101)).collect();
    let (st, b) = call(
        &s.unix(),
        "POST",
        "/v1/agent/report",
        Some(&report("n2", json!(many))),
    );
    assert_eq!(st, 422, "{b}");
}

#[test]
fn why_shows_a_user_only_jobs_they_may_see() {
    let s = start();
    let c = s.unix();
    add_account(&c, "org", None, 1000.0);
    add_account(&c, "teama", Some("org"), 600.0);
    add_account(&c, "teamb", Some("org"), 300.0);
    add_account(&c, "teama1", Some("teama"), 100.0);
    add_member(&c, "alice", "teama1");
    add_member(&c, "bob", "teamb");
    add_member(&c, "dave", "teama");
    let now = budget_service::clock::now();
    let run = |job: u32, acct: &str, user: &str, state: &str| {
        let mut r = json!({"job_id": job, "run": 0, "account": acct, "user": user, "gpus": 8, "state": state});
        if state == "running" {
            r["start"] = json!(now - 600);
        }
        r
    };
    let sync = json!({"collected_at": now, "runs": [
        run(1, "teama1", "alice", "pending"),
        run(2, "teamb", "bob", "running"),
        run(3, "teama", "dave", "running"),
    ]});
    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let alice = s.tcp(Some(ALICE_TOKEN));
    // teama is an ancestor alice reads for her rank path; its jobs are not hers to see.
    let (st, b) = call(&alice, "GET", "/v1/jobs/3/why", None);
    assert_eq!(st, 403, "alice saw a job of her parent account: {b}");
    let (st, b) = call(&alice, "GET", "/v1/jobs/1/why", None);
    assert_eq!(st, 200, "{b}");
    let peers: Vec<u64> = b["could_preempt"]
        .as_array()
        .map(|a| a.iter().filter_map(|p| p["job_id"].as_u64()).collect())
        .unwrap_or_default();
    assert!(
        !peers.contains(&2) && !peers.contains(&3),
        "alice's why lists others' jobs: {b}"
    );
    // An admin sees the peers.
    let (_, b) = call(&c, "GET", "/v1/jobs/1/why", None);
    assert!(b["could_preempt"].is_array(), "{b}");
}

/// The timing lines of `why` (`preemption.may_preempt`, `preemption.may_be_taken_by`)
/// name only jobs the caller may see, as its peers do: a user of one team is not
/// shown another team's job ids, which an admin sees in the same places.
#[test]
fn why_timing_lists_only_jobs_the_caller_may_see() {
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 100.0);
    add_account(&c, "teamb", None, 100.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let now = budget_service::clock::now();
    let run = |job: u32, user: &str, acct: &str, state: &str, free: bool, gpus: u32| {
        let mut r = json!({"job_id": job, "run": 0, "account": acct, "user": user,
            "gpus": gpus, "state": state, "free_tier": free});
        if state == "running" {
            r["start"] = json!(now - 600);
        }
        r
    };
    // Free-tier runs may be taken by any budgeted job, at once: each pending job
    // may take both running ones.
    let sync = json!({"collected_at": now, "runs": [
        run(1, "alice", "teama", "pending", false, 8),
        run(2, "bob", "teamb", "running", true, 8),
        run(3, "alice", "teama", "running", true, 4),
        run(4, "bob", "teamb", "pending", false, 8),
    ]});
    let (st, b) = call(&c, "POST", "/v1/sync/jobs", Some(&sync));
    assert_eq!(st, 200, "{b}");
    let ids = |w: &serde_json::Value, list: &str| -> Vec<u64> {
        let mut ids: Vec<u64> = w["preemption"][list]
            .as_array()
            .map(|a| a.iter().filter_map(|o| o["job_id"].as_u64()).collect())
            .unwrap_or_default();
        ids.sort_unstable();
        ids
    };
    let alice = s.tcp(Some(ALICE_TOKEN));
    let (st, w1) = call(&alice, "GET", "/v1/jobs/1/why", None);
    assert_eq!(st, 200, "{w1}");
    assert_eq!(ids(&w1, "may_preempt"), vec![3], "{w1}");
    // Nor do the rule's words about the wait name teamb's job.
    let words = w1["wait"].as_str().unwrap_or_default();
    assert!(!words.is_empty(), "{w1}");
    assert!(!words.contains("job 2"), "{words}");
    let (st, w3) = call(&alice, "GET", "/v1/jobs/3/why", None);
    assert_eq!(st, 200, "{w3}");
    assert_eq!(ids(&w3, "may_be_taken_by"), vec![1], "{w3}");
    // The admin sees every team's jobs there.
    let (_, w1) = call(&c, "GET", "/v1/jobs/1/why", None);
    assert_eq!(ids(&w1, "may_preempt"), vec![2, 3], "{w1}");
    assert_eq!(
        w1["preemption"]["may_preempt"][0]["reason"],
        json!({"reason": "victim_free_tier"})
    );
    let (_, w3) = call(&c, "GET", "/v1/jobs/3/why", None);
    assert_eq!(ids(&w3, "may_be_taken_by"), vec![1, 4], "{w3}");
}

#[test]
fn a_second_budgetd_on_the_same_database_refuses_and_the_file_is_0600() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("budget.db");
    let first = Daemon::start(&db, &dir.path().join("a.sock"));
    let mode = std::fs::metadata(&db).expect("db").permissions().mode() & 0o777;
    assert_eq!(mode, 0o600, "database created with mode {mode:o}");
    let out = Command::new(BUDGETD)
        .arg("--db")
        .arg(&db)
        .arg("--socket")
        .arg(dir.path().join("b.sock"))
        .stdin(Stdio::null())
        .output()
        .expect("second budgetd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a second budgetd started on the same database"
    );
    assert!(stderr.contains("in use by another budgetd"), "{stderr}");
    assert!(!dir.path().join("b.sock").exists());
    drop(first);
}

#[test]
fn a_failed_redrain_keeps_the_drain_in_force_and_forgets_only_the_new_nodes() {
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
    // Slurm refuses the next drain (n1 again with a new reason, and n2).
    std::fs::write(slurm.join("fail-drain"), "").expect("marker");
    let (s, b) = call(
        &c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n[1-2]", "reason": "psu"})),
    );
    // A refusal, with Slurm's own words: not a 500.
    assert_eq!(s, 409, "{b}");
    let msg = b["error"].as_str().unwrap_or("");
    assert!(
        msg.starts_with("Slurm refused this request: slurm_update error: Access/permission denied"),
        "{b}"
    );
    std::fs::remove_file(slurm.join("fail-drain")).expect("marker");
    let (s, b) = call(&c, "GET", "/v1/drains", None);
    assert_eq!(s, 200, "{b}");
    let drains: Vec<(String, String)> = b
        .as_array()
        .expect("list")
        .iter()
        .map(|d| {
            (
                d["node"].as_str().unwrap_or("").to_string(),
                d["reason"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    // n1's drain is still in force, with its old reason; n2 was never drained.
    assert_eq!(drains, vec![("n1".to_string(), "fan".to_string())], "{b}");
}

#[test]
fn one_job_that_cannot_be_requeued_does_not_stop_the_drain_pass() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    // Three free-tier jobs on n1 (requeued at once); Slurm refuses to requeue the first.
    let job = |id: u32| free_job_on_n1(id, "gpu");
    std::fs::write(
        slurm.join("jobs.json"),
        json!({"jobs": [job(101), job(102), job(103)]}).to_string(),
    )
    .expect("jobs");
    std::fs::write(slurm.join("fail-requeue-101"), "").expect("marker");
    let c = d.client();
    drain_n1(&c);
    let calls = || std::fs::read_to_string(slurm.join("calls")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Until 101 was tried at least twice (a later pass) and its neighbours requeued.
    while !(calls().matches("requeue 101").count() >= 2
        && calls().contains("requeue 102")
        && calls().contains("requeue 103"))
    {
        assert!(
            Instant::now() < deadline,
            "the drain pass did not requeue 102 and 103 past 101; scontrol calls:\n{}",
            calls()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Each requeued once, and recorded; 101 not.
    assert_eq!(calls().matches("requeue 102").count(), 1, "{}", calls());
    assert_eq!(calls().matches("requeue 103").count(), 1, "{}", calls());
    let (s, b) = call(&c, "GET", "/v1/preemptions?since=0", None);
    assert_eq!(s, 200, "{b}");
    let mut victims: Vec<u64> = b["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .filter(|r| r["reason"] == "drain")
        .filter_map(|r| r["job_id"].as_u64())
        .collect();
    victims.sort_unstable();
    assert_eq!(victims, vec![102, 103], "{b}");
    // The failure is reported (once, in budgetd's log), naming the job and Slurm's words.
    let log = std::fs::read_to_string(dir.path().join("budgetd.log")).expect("log");
    assert!(
        log.contains("1 requeue(s) failed: job 101") && log.contains("no longer pending execution"),
        "budgetd log:\n{log}"
    );
}

/// A running free-tier job `id` of alice on n1 in `partition`, as the fake
/// Slurm's `jobs.json` lists it (a drain may take it at once).
/// Drains node n1 for maintenance (`POST /v1/drains`, 201) and returns the answer.
fn drain_n1(c: &budget_client::Client) -> Value {
    let (s, b) = call(
        c,
        "POST",
        "/v1/drains",
        Some(&json!({"nodes": "n1", "reason": "maintenance"})),
    );
    assert_eq!(s, 201, "{b}");
    b
}

fn free_job_on_n1(id: u32, partition: &str) -> Value {
    json!({"job_id": id, "job_state": "RUNNING", "restart_cnt": 0, "start_time": 1000,
           "nodes": "n1", "account": "teama", "user_name": "alice", "partition": partition,
           "qos": "normal", "node_count": 1, "tres_per_node": "gres:gpu:1",
           "admin_comment": "budget:min_runtime=0 budget:free", "comment": ""})
}

#[test]
fn a_drain_waits_for_a_job_of_a_preempt_mode_off_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    // Two free-tier jobs on n1 (a drain takes them at once), one in partition
    // frozen, whose PreemptMode=OFF says its jobs are never preempted.
    std::fs::write(
        slurm.join("jobs.json"),
        json!({"jobs": [free_job_on_n1(201, "gpu"), free_job_on_n1(202, "frozen")]}).to_string(),
    )
    .expect("jobs");
    std::fs::write(slurm.join("partitions"), "gpu 1\nfrozen 1 OFF\n").expect("partitions");
    let c = d.client();
    drain_n1(&c);
    let calls = || std::fs::read_to_string(slurm.join("calls")).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(20);
    // Until 201 was requeued and three more passes read the partitions.
    while !(calls().contains("requeue 201")
        && calls()
            .split("requeue 201")
            .nth(1)
            .is_some_and(|after| after.matches("show partition").count() >= 3))
    {
        assert!(
            Instant::now() < deadline,
            "the drain pass did not requeue 201 and go on; scontrol calls:\n{}",
            calls()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(!calls().contains("requeue 202"), "{}", calls());
}

#[test]
fn a_preempt_mode_off_job_leaves_a_drained_node_at_its_time_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd(dir.path());
    let now = budget_service::clock::now();
    // On n1: 301 in gpu, its 1 h window started now (requeued when it ends);
    // 302 in frozen (PreemptMode=OFF), its 60 s window started now and its time
    // limit ends in 2 h (Slurm 23.02+'s number shape).
    let job = |id: u32, partition: &str, min: i64, end: Value| {
        json!({"job_id": id, "job_state": "RUNNING", "restart_cnt": 0, "start_time": now,
               "end_time": end, "nodes": "n1", "account": "teama", "user_name": "alice",
               "partition": partition, "qos": "normal", "node_count": 1,
               "tres_per_node": "gres:gpu:1",
               "admin_comment": format!("budget:min_runtime={min}"), "comment": ""})
    };
    let (window_301, end_302) = (now + 3600, now + 7200);
    let jobs = |with_302: bool| {
        let mut v = vec![job(301, "gpu", 3600, json!(now + 86_400))];
        if with_302 {
            v.push(job(
                302,
                "frozen",
                60,
                json!({"set": true, "infinite": false, "number": end_302}),
            ));
        }
        json!({ "jobs": v }).to_string()
    };
    std::fs::write(slurm.join("jobs.json"), jobs(true)).expect("jobs");
    std::fs::write(slurm.join("partitions"), "gpu 1\nfrozen 1 OFF\n").expect("partitions");
    let c = d.client();
    let check = |b: &Value| {
        let node = &b[0];
        let held: Vec<(u64, String, i64, String)> = node["jobs"]
            .as_array()
            .expect("jobs")
            .iter()
            .map(|j| {
                (
                    j["job_id"].as_u64().unwrap_or(0),
                    j["leaves"].as_str().unwrap_or("").to_string(),
                    j["requeue_at"].as_i64().unwrap_or(0),
                    j["partition"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        assert_eq!(
            held,
            [
                (301, "requeue".into(), window_301, "gpu".into()),
                (302, "time_limit".into(), end_302, "frozen".into()),
            ],
            "{b}"
        );
        assert_eq!(
            node["empty_at"], end_302,
            "the node waits for 302's end: {b}"
        );
    };
    // The drain's answer (read from Slurm then) and the list (the worker's view).
    let b = drain_n1(&c);
    check(&b);
    let (s, b) = call(&c, "GET", "/v1/drains", None);
    assert_eq!(s, 200, "{b}");
    check(&b);
    // 302 ended by itself: the node is empty when 301's window ends.
    std::fs::write(slurm.join("jobs.json"), jobs(false)).expect("jobs");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (s, b) = call(&c, "GET", "/v1/drains", None);
        assert_eq!(s, 200, "{b}");
        if b[0]["jobs"].as_array().is_some_and(|j| j.len() == 1) {
            assert_eq!(b[0]["empty_at"], window_301, "{b}");
            assert_eq!(b[0]["jobs"][0]["leaves"], "requeue", "{b}");
            break;
        }
        assert!(Instant::now() < deadline, "302 still listed: {b}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let calls = std::fs::read_to_string(slurm.join("calls")).unwrap_or_default();
    assert!(!calls.contains("requeue 30"), "nothing was due: {calls}");
}

#[test]
fn why_says_the_drain_waits_for_a_preempt_mode_off_job_to_reach_its_time_limit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, slurm) = fake_slurm_budgetd_with_partitions(dir.path(), "gpu 1\nfrozen 1 OFF\n");
    let c = d.client();
    add_account(&c, "teama", None, 8.0 * 168.0);
    add_member(&c, "alice", "teama");
    let now = budget_service::clock::now();
    // On n1, both started a minute ago with a 1 h window: 501 in gpu (the
    // drain requeues it when its window ends), 502 in frozen (PreemptMode=OFF)
    // with a 2 h time limit; 503 in frozen with no time limit synced.
    let (window, limit_502) = (now - 60 + 3600, now - 60 + 7200);
    let run = |id: u32, partition: &str, limit: Option<i64>| {
        json!({"job_id": id, "run": 0, "account": "teama", "user": "alice", "gpus": 1,
               "partition": partition, "state": "running", "start": now - 60,
               "min_runtime_secs": 3600, "nodes": "n1", "time_limit_secs": limit})
    };
    let runs = json!([
        run(501, "gpu", Some(7200)),
        run(502, "frozen", Some(7200)),
        run(503, "frozen", None)
    ]);
    let (s, b) = call(
        &c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": now, "runs": runs})),
    );
    assert_eq!(s, 200, "{b}");
    std::fs::write(slurm.join("jobs.json"), json!({"jobs": []}).to_string()).expect("jobs");
    let timing = |id: u32| {
        let (s, w) = call(&c, "GET", &format!("/v1/jobs/{id}/why"), None);
        assert_eq!(s, 200, "{w}");
        w["preemption"].clone()
    };
    // Not drained yet: neither is said.
    let p = timing(502);
    assert!(
        p["drain_requeue_at"].is_null() && p["drain_waits"].is_null(),
        "{p}"
    );
    drain_n1(&c);
    // budgetd read the partitions at start; until then frozen is not known OFF.
    let deadline = Instant::now() + Duration::from_secs(20);
    while timing(502)["drain_waits"].is_null() {
        assert!(
            Instant::now() < deadline,
            "frozen never read as OFF: {}",
            timing(502)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let p = timing(502);
    assert_eq!(
        (p["drain_waits"].clone(), p["drain_requeue_at"].clone()),
        (
            json!({"partition": "frozen", "until": limit_502}),
            Value::Null
        ),
        "{p}"
    );
    let p = timing(503);
    assert_eq!(
        (p["drain_waits"].clone(), p["drain_requeue_at"].clone()),
        (json!({"partition": "frozen", "until": null}), Value::Null),
        "no time limit in the ledger, none made up: {p}"
    );
    let p = timing(501);
    assert_eq!(
        (p["drain_waits"].clone(), p["drain_requeue_at"].clone()),
        (Value::Null, json!(window)),
        "{p}"
    );
}

/// budgetd over the fake Slurm whose `scontrol show node` lists `nodes`, and its
/// first snapshot that carries a cluster count (budgetd reads Slurm at start, then
/// once a minute: the first snapshots may come before the first read).
fn budgetd_over_nodes(nodes: &str) -> (tempfile::TempDir, Daemon, serde_json::Value) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (d, _) = fake_slurm_budgetd_with_nodes(dir.path(), nodes);
    let c = d.client();
    let deadline = Instant::now() + Duration::from_secs(20);
    let snap = loop {
        let (s, b) = call(&c, "GET", "/v1/snapshot", None);
        assert_eq!(s, 200, "{b}");
        if !b["cluster_gpus"].is_null() {
            break b;
        }
        assert!(
            Instant::now() < deadline,
            "no cluster_gpus in the snapshot: {b}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    (dir, d, snap)
}

#[test]
fn the_snapshot_carries_the_gpus_of_the_nodes_that_can_run_jobs() {
    // 4 + 4 GPUs up; n3's 8 are down, n4 has none.
    let (dir, d, snap) = budgetd_over_nodes(
        "n1 gpu:4 IDLE\nn2 gpu:a100:2(S:0),gpu:v100:2(S:1) ALLOCATED\n\
         n3 gpu:8 DOWN+NOT_RESPONDING\nn4 (null) IDLE\n",
    );
    let c = d.client();
    assert_eq!(snap["cluster_gpus"], 8, "{snap}");
    let version = snap["version"].as_str().expect("version");
    assert!(version.ends_with("-8"), "{version}");
    let log = std::fs::read_to_string(dir.path().join("budgetd.log")).expect("log");
    assert!(log.contains("cluster GPUs"), "budgetd log:\n{log}");

    // `why` ranks as the plugins do, with that capacity: teama and teamb are
    // allocated 8 GPUs each (16 on a cluster of 8: 4 each). teama holds 5 and
    // has the lower ratio; teamb holds 3 (its ratio higher from an ended run).
    // Scaled, teama is above its 4 (plus a window balance of at most 0.6) and
    // teamb below: teamb first. By the allocations as they are both would be
    // below their 8 and Fair-Tree's ratio order would put teama first (the
    // test below).
    let (a, b) = overcommitted_whys(&c);
    assert_eq!(b["path"][1]["node"], "teamb", "{b}");
    assert_eq!(b["path"][1]["rank"], 2, "{b}");
    assert_eq!(
        (b["rank"].clone(), a["rank"].clone()),
        (json!(1), json!(2)),
        "{a}\n{b}"
    );
}

#[test]
fn the_snapshots_capacity_is_weighted_by_node_gpu_type_and_why_ranks_with_it() {
    // 8 H100 and 4 B300: 12 GPUs.
    let (_dir, d, snap) =
        budgetd_over_nodes("h1 gpu:h100:8(S:0-1) IDLE\nb1 gpu:B300:4(S:0-1) MIXED\n");
    let c = d.client();
    // Uniform weights: the weighted count is the raw one, the version as before.
    assert_eq!(
        (
            snap["cluster_gpus"].clone(),
            snap["cluster_weighted_gpus"].clone()
        ),
        (json!(12), json!(12.0)),
        "{snap}"
    );
    assert!(
        snap["version"].as_str().expect("version").ends_with("-12"),
        "{snap}"
    );
    // B300 weighs 2.5: 8 + 4 x 2.5 = 18 weighted GPUs, at once (no new read of Slurm).
    let (s, b) = call(
        &c,
        "PATCH",
        "/v1/weights",
        Some(&json!({"set": {"b300": 2.5}})),
    );
    assert_eq!(s, 200, "{b}");
    let (_, snap) = call(&c, "GET", "/v1/snapshot", None);
    assert_eq!(
        (
            snap["cluster_gpus"].clone(),
            snap["cluster_weighted_gpus"].clone()
        ),
        (json!(12), json!(18.0)),
        "{snap}"
    );
    assert!(
        snap["version"]
            .as_str()
            .expect("version")
            .ends_with("-12-18"),
        "{snap}"
    );

    // teama and teamb are allocated 8 weighted GPUs each: 16 on a cluster of 18
    // weighted GPUs, 8 each (the raw 12 would scale them to 6). teama (the
    // lower ratio) runs 4 B300 = 10 weighted GPUs, past its entitlement even
    // with the window balance the rule adds (at most 0.15 x 8: 9.2); teamb runs
    // 7 H100, below its 8: teamb's pending job ranks first.
    add_account(&c, "teama", None, 8.0 * 168.0);
    add_account(&c, "teamb", None, 8.0 * 168.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let runs = json!([
        {"job_id": 11, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "gpu_type": "b300", "state": "running", "start": t - 60},
        {"job_id": 12, "run": 0, "account": "teama", "user": "alice", "gpus": 1, "gpu_type": "b300", "state": "pending"},
        {"job_id": 22, "run": 0, "account": "teamb", "user": "bob", "gpus": 7, "gpu_type": "h100", "state": "running", "start": t - 60},
        {"job_id": 20, "run": 0, "account": "teamb", "user": "bob", "gpus": 4, "gpu_type": "h100", "state": "ended", "start": t - 3 * 3600, "end": t - 2 * 3600},
        {"job_id": 21, "run": 0, "account": "teamb", "user": "bob", "gpus": 1, "gpu_type": "h100", "state": "pending"},
    ]);
    let (s, b) = call(
        &c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": t, "runs": runs})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, a) = call(&c, "GET", "/v1/jobs/12/why", None);
    assert_eq!(s, 200, "{a}");
    let (s, b) = call(&c, "GET", "/v1/jobs/21/why", None);
    assert_eq!(s, 200, "{b}");
    // Fair-Tree alone puts teama first (its ratio is lower) ...
    assert_eq!(
        (a["path"][1]["rank"].clone(), b["path"][1]["rank"].clone()),
        (json!(1), json!(2)),
        "{a}\n{b}"
    );
    // ... but entitlement first counts teama's weighted GPUs: 10, past its 8
    // plus the window balance (9.2), so teamb, below its own, ranks first (the
    // raw 4 GPUs would have put teama below its entitlement, first again).
    assert_eq!(
        (b["rank"].clone(), a["rank"].clone()),
        (json!(1), json!(2)),
        "{a}\n{b}"
    );
}

#[test]
fn lost_work_budgets_are_charged_by_the_weight_of_the_victims_gpus() {
    // teama and teamb are entitled to 8 GPUs each (no cluster count: the
    // allocations as they are); teama's lost-work budget is 5% x 8 x 168 h =
    // 67.2 GPU-h per window. Earlier in the window teama took job 31, 4 B300
    // GPUs for 10 h: 40 GPU-h. teamb now holds 12 H100 GPUs (and ran 8 for 20 h
    // before: its ratio is well above teama's); teama waits with job 12 on 4,
    // and taking teamb's job 22 (4 GPUs, 5 h in) loses 20 more.
    let s = start();
    let c = s.unix();
    add_account(&c, "teama", None, 8.0 * 168.0);
    add_account(&c, "teamb", None, 8.0 * 168.0);
    add_member(&c, "alice", "teama");
    add_member(&c, "bob", "teamb");
    let t = budget_service::clock::now();
    let h = 3600;
    let runs = json!([
        {"job_id": 12, "run": 0, "account": "teama", "user": "alice", "gpus": 4, "gpu_type": "h100", "state": "pending"},
        {"job_id": 30, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "gpu_type": "h100", "state": "ended", "start": t - 40 * h, "end": t - 20 * h},
        {"job_id": 31, "run": 0, "account": "teamb", "user": "bob", "gpus": 4, "gpu_type": "b300", "state": "ended", "start": t - 11 * h, "end": t - h},
        {"job_id": 22, "run": 0, "account": "teamb", "user": "bob", "gpus": 4, "gpu_type": "h100", "state": "running", "start": t - 5 * h},
        {"job_id": 23, "run": 0, "account": "teamb", "user": "bob", "gpus": 8, "gpu_type": "h100", "state": "running", "start": t - 5 * h},
    ]);
    let (st, b) = call(
        &c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": t, "runs": runs})),
    );
    assert_eq!(st, 200, "{b}");
    let rec = json!({"victim": 31, "run": 0, "preemptor": 12, "reason": "rebalance", "at": t - h});
    let (st, b) = call(&c, "POST", "/v1/preemptions", Some(&rec));
    assert!(st == 200 || st == 201, "{st} {b}");
    // The record names the lost run's GPU type, from the ledger.
    let (st, b) = call(&c, "GET", "/v1/preemptions?since=0", None);
    assert_eq!(st, 200, "{b}");
    let row = &b["rows"][0];
    assert_eq!(
        (
            row["job_id"].clone(),
            row["gpu_hours"].clone(),
            row["gpu_type"].clone()
        ),
        (json!(31), json!(40.0), json!("b300")),
        "{b}"
    );
    // Every GPU weighs 1: 40 + 20 = 60 <= 67.2, teama may take job 22.
    let (st, w) = call(&c, "GET", "/v1/jobs/12/why", None);
    assert_eq!(st, 200, "{w}");
    let takes: Vec<u64> = w["could_preempt"]
        .as_array()
        .expect("could_preempt")
        .iter()
        .filter_map(|p| p["job_id"].as_u64())
        .collect();
    assert!(takes.contains(&22), "{w}");
    // B300 weighs 2: job 31 cost the budget 80 weighted GPU-h, more than all of it.
    let (st, b) = call(
        &c,
        "PATCH",
        "/v1/weights",
        Some(&json!({"set": {"b300": 2.0}})),
    );
    assert_eq!(st, 200, "{b}");
    let (st, w) = call(&c, "GET", "/v1/jobs/12/why", None);
    assert_eq!(st, 200, "{w}");
    assert_eq!(w["could_preempt"], json!([]), "{w}");
    let wait = w["wait"].as_str().expect("wait");
    assert!(
        wait.contains("lost-work budget (80.00 of 67.20 weighted GPU-h spent)"),
        "{w}"
    );
}

/// teama and teamb allocated 8 GPUs each; teama (lower ratio) runs job 11 on 5
/// GPUs, teamb (its ratio higher from an ended run) runs job 22 on 3 and waits
/// with job 21: `why` of 11 and 21. Entitled to their 8 (plus a window balance
/// of at most 0.15 x 8) both are below their entitlement and rank by ratio,
/// teama first; scaled to 4 (plus 0.6), teama is above and teamb below, first.
fn overcommitted_whys(c: &budget_client::Client) -> (serde_json::Value, serde_json::Value) {
    add_account(c, "teama", None, 8.0 * 168.0);
    add_account(c, "teamb", None, 8.0 * 168.0);
    add_member(c, "alice", "teama");
    add_member(c, "bob", "teamb");
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock")
        .as_secs() as i64;
    let runs = json!([
        {"job_id": 11, "run": 0, "account": "teama", "user": "alice", "gpus": 5, "state": "running", "start": t - 60},
        {"job_id": 22, "run": 0, "account": "teamb", "user": "bob", "gpus": 3, "state": "running", "start": t - 60},
        {"job_id": 20, "run": 0, "account": "teamb", "user": "bob", "gpus": 4, "state": "ended", "start": t - 3 * 3600, "end": t - 2 * 3600},
        {"job_id": 21, "run": 0, "account": "teamb", "user": "bob", "gpus": 4, "state": "pending"},
    ]);
    let (s, b) = call(
        c,
        "POST",
        "/v1/sync/jobs",
        Some(&json!({"collected_at": t, "runs": runs})),
    );
    assert_eq!(s, 200, "{b}");
    let (s, a) = call(c, "GET", "/v1/jobs/11/why", None);
    assert_eq!(s, 200, "{a}");
    let (s, b) = call(c, "GET", "/v1/jobs/21/why", None);
    assert_eq!(s, 200, "{b}");
    (a, b)
}

#[test]
fn without_a_cluster_count_why_ranks_by_the_allocations_as_they_are() {
    // The in-process budgetd reads no Slurm: no cluster_gpus, both teams are
    // below their 8 GPUs and the lower ratio ranks first (teama).
    let s = start();
    let c = s.unix();
    let (_, snap) = call(&c, "GET", "/v1/snapshot", None);
    assert!(snap["cluster_gpus"].is_null(), "{snap}");
    let (a, b) = overcommitted_whys(&c);
    assert_eq!(
        (a["rank"].clone(), b["rank"].clone()),
        (json!(1), json!(2)),
        "{a}\n{b}"
    );
}

#[test]
fn a_weighted_capacity_that_rounds_to_nothing_is_published_as_unknown() {
    // Weights may go down to just above 0; 12 GPUs x 1e-13 rounds to 0 at the
    // snapshot's 1e-9 precision. The snapshot promises a capacity above 0 or
    // none (its schema's exclusiveMinimum), so it leaves the field out and the
    // plugins fall back to the raw count.
    let (_dir, d, _snap) =
        budgetd_over_nodes("h1 gpu:h100:8(S:0-1) IDLE\nb1 gpu:B300:4(S:0-1) MIXED\n");
    let c = d.client();
    let (s, b) = call(&c, "PATCH", "/v1/weights", Some(&json!({"default": 1e-13})));
    assert_eq!(s, 200, "{b}");
    let (s, snap) = call(&c, "GET", "/v1/snapshot", None);
    assert_eq!(s, 200, "{snap}");
    assert_eq!(
        (
            snap["cluster_gpus"].clone(),
            snap.get("cluster_weighted_gpus").cloned()
        ),
        (json!(12), None),
        "{snap}"
    );
}
