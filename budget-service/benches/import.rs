//! Import benchmark (plain `main`, not a timed test): how long a large sacct
//! import keeps the controller's sync and snapshot waiting. Prints a Markdown table.
//!
//! Run: `cargo bench -p budget-service --bench import`
//! Scale with env: `BENCH_IMPORT_MB` (46 MiB of sacct text), `BENCH_ACCOUNTS` (30),
//! `BENCH_IMPORT_BATCH` (`import_batch_runs`, default the config's).
//!
//! A real budgetd (in process, real SQLite file, Unix socket) gets one
//! `POST /v1/usage/import` of a generated sacct file while, throughout, the
//! controller (root on the socket) posts a 200-run `POST /v1/sync/jobs` and
//! fetches `GET /v1/snapshot` every 50 ms, each timed. A probe thread takes the
//! store lock every millisecond and records how long it waited: the longest
//! wait is (within a millisecond) the longest single hold of the lock by
//! anyone else, the import included.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use budget_client::{Client, Endpoint};
use budget_protocol::tree::PolicyPatch;
use budget_protocol::{JobRun, JobSync, RunState};
use budget_service::{AppState, Config, Store};

const T: i64 = 1_800_000_000;

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn pct(v: &mut [Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    v.sort();
    let i = ((v.len() as f64 - 1.0) * p).round() as usize;
    v[i.min(v.len() - 1)]
}

fn summary(mut v: Vec<Duration>) -> String {
    format!(
        "{} calls: p50 {} / p99 {} / max {}",
        v.len(),
        ms(pct(&mut v, 0.5)),
        ms(pct(&mut v, 0.99)),
        ms(pct(&mut v, 1.0))
    )
}

fn iso(t: i64) -> String {
    jiff::Timestamp::from_second(t)
        .map(|ts| ts.strftime("%Y-%m-%dT%H:%M:%S").to_string())
        .unwrap_or_default()
}

/// Calls made by [`timed_loop`]: when each was sent, how long it took.
type Calls = Vec<(Instant, Duration)>;

/// Loops `f` every `every` until `stop`, timing each call.
fn timed_loop(
    stop: Arc<AtomicBool>,
    every: Duration,
    mut f: impl FnMut() -> anyhow::Result<()> + Send + 'static,
) -> std::thread::JoinHandle<anyhow::Result<Calls>> {
    std::thread::spawn(move || {
        let mut times = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let t0 = Instant::now();
            f()?;
            times.push((t0, t0.elapsed()));
            std::thread::sleep(every);
        }
        Ok(times)
    })
}

fn main() -> anyhow::Result<()> {
    let target_mb = env("BENCH_IMPORT_MB", 46);
    let n_accounts = env("BENCH_ACCOUNTS", 30).max(1);
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("bench.db");
    let socket = dir.path().join("bench.sock");
    let store = Store::open(&db, &PolicyPatch::default())?;
    let mut config = Config::default();
    config.import_batch_runs = env("BENCH_IMPORT_BATCH", config.import_batch_runs);
    let batch = config.import_batch_runs;
    let state = AppState::new(store, config);
    let server = budgetd_testkit::Budgetd::serve(state.clone(), &socket, false);
    let client = || -> anyhow::Result<Client> {
        Ok(Client::new(Endpoint::parse(&socket.display().to_string())?)
            .with_timeout(Duration::from_secs(600))
            .with_max_body(1 << 30))
    };
    let admin = client()?;
    for a in 0..n_accounts {
        let (st, b) = budgetd_testkit::call(
            &admin,
            "POST",
            "/v1/accounts",
            Some(&serde_json::json!({"name": format!("acct{a}"), "allocation_gpu_hours": 1000.0})),
        );
        anyhow::ensure!(st == 201, "account: {b}");
    }

    // The sacct file: ended 4-GPU runs of 1-3 h over the last 8 days.
    let mut text = String::from("JobID|Account|User|Partition|AllocTRES|Start|End|State\n");
    let mut job: u64 = 1;
    while text.len() < target_mb << 20 {
        let start = T - 8 * 86_400 + i64::try_from(job * 37 % (7 * 86_400)).unwrap_or(0);
        let end = start + 3600 + i64::try_from(job % 3).unwrap_or(0) * 3600;
        text.push_str(&format!(
            "{job}|acct{}|user{}|gpu|billing=16,cpu=16,gres/gpu:h100=4,mem=64G,node=1|{}|{}|COMPLETED\n",
            job % n_accounts as u64,
            job % 300,
            iso(start),
            iso(end)
        ));
        job += 1;
    }
    let lines = job - 1;

    // The controller's sync: 200 running jobs, ids far from the import's.
    let sync = JobSync {
        collected_at: T,
        runs: (0..200u32)
            .map(|i| JobRun {
                job_id: 50_000_000 + i,
                run: 0,
                submit: None,
                account: format!("acct{}", i as usize % n_accounts),
                user: format!("user{i}"),
                partition: Some("gpu".into()),
                gpus: 4,
                gpu_type: Some("h100".into()),
                start: Some(T - 3600),
                end: None,
                state: RunState::Running,
                free_tier: false,
                min_runtime_secs: 3600,
                nodes: Some("node001".into()),
                priority: None,
                reason: None,
                time_limit_secs: Some(86_400),
                checkpoint_secs: None,
            })
            .collect(),
        live: None,
        queue: None,
    };
    let sync_body = serde_json::to_vec(&sync)?;

    let stop = Arc::new(AtomicBool::new(false));
    let probe = {
        let stop = stop.clone();
        let state = state.clone();
        std::thread::spawn(move || {
            let mut longest = Duration::ZERO;
            while !stop.load(Ordering::SeqCst) {
                let t0 = Instant::now();
                drop(state.store.lock().unwrap_or_else(|p| p.into_inner()));
                longest = longest.max(t0.elapsed());
                std::thread::sleep(Duration::from_millis(1));
            }
            longest
        })
    };
    let syncs = {
        let c = client()?;
        timed_loop(stop.clone(), Duration::from_millis(50), move || {
            let r = c.request(
                "POST",
                budget_protocol::SYNC_PATH,
                &[("Content-Type", "application/json")],
                Some(&sync_body),
            )?;
            anyhow::ensure!(r.status == 200, "sync: {}", r.status);
            Ok(())
        })
    };
    let snapshots = {
        let c = client()?;
        timed_loop(stop.clone(), Duration::from_millis(50), move || {
            let r = c.request("GET", budget_protocol::SNAPSHOT_PATH, &[], None)?;
            anyhow::ensure!(r.status == 200, "snapshot: {}", r.status);
            Ok(())
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let t0 = Instant::now();
    let r = admin.request(
        "POST",
        "/v1/usage/import?tz=UTC",
        &[("Content-Type", "text/plain")],
        Some(text.as_bytes()),
    )?;
    let took = t0.elapsed();
    std::thread::sleep(Duration::from_millis(100));
    stop.store(true, Ordering::SeqCst);
    anyhow::ensure!(
        r.status == 200,
        "import: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let report: serde_json::Value = serde_json::from_slice(&r.body)?;
    let longest = probe
        .join()
        .map_err(|_| anyhow::anyhow!("probe panicked"))?;
    let syncs = syncs
        .join()
        .map_err(|_| anyhow::anyhow!("sync loop panicked"))??;
    let snapshots = snapshots
        .join()
        .map_err(|_| anyhow::anyhow!("snapshot loop panicked"))??;
    drop(server);
    // The calls sent while the import ran.
    let during = |calls: Calls| -> Vec<Duration> {
        calls
            .into_iter()
            .filter(|(at, _)| *at >= t0 && *at <= t0 + took)
            .map(|(_, d)| d)
            .collect()
    };
    let (syncs, snapshots) = (during(syncs), during(snapshots));

    println!("| figure | value |\n|---|---|");
    println!(
        "| `POST /v1/usage/import`, {:.1} MB, {lines} lines (inserted {}), batches of {batch} runs | {} |",
        text.len() as f64 / 1e6,
        report["inserted"],
        ms(took)
    );
    println!(
        "| longest wait for the store lock (= longest hold) | {} |",
        ms(longest)
    );
    println!(
        "| controller `POST /v1/sync/jobs` (200 runs) during the import | {} |",
        summary(syncs)
    );
    println!(
        "| controller `GET /v1/snapshot` during the import | {} |",
        summary(snapshots)
    );
    Ok(())
}
