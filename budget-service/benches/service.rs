//! Service benchmarks (plain `main`, not a timed test). Prints a Markdown table.
//!
//! Run: `cargo bench -p budget-service --bench service`
//! Scale with env: `BENCH_ACCOUNTS` (1000), `BENCH_RUNS` (1000000),
//! `BENCH_SYNC_JOBS` (10000), `BENCH_HTTP_SECS` (3).
//!
//! Figures: fair-share snapshot over N accounts and M runs in the window
//! (compute + JSON), sync of K running jobs (store level and over HTTP),
//! GET /v1/snapshot throughput over the Unix socket (304 and 200 apart),
//! load time of the ledger at start, the web view's accounts page against
//! `GET /v1/share` (p50/p95 over TCP), peak RSS (VmHWM).

use std::time::{Duration, Instant};

use budget_client::{Client, Endpoint};
use budget_protocol::tree::{NewAccount, PolicyPatch, WeightsPatch};
use budget_protocol::{JobRun, JobSync, PluginSnapshot, RunState};
use budget_service::ledger::RunRecord;
use budget_service::{AppState, Config, Store};
use policy_core::MemberSpec;

const T: i64 = 1_800_000_000;
const DAY: i64 = 86_400;
/// The web view's reader token in the benchmark's config.
const UI_TOKEN: &str = "bench-reader-token";
/// Requests per web-view timing.
const UI_REQUESTS: usize = 40;

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn vm_hwm_mib() -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<f64>().ok())
        .map_or(0.0, |kb| kb / 1024.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

/// 1000 accounts: 10 orgs x 9 programmes x 11 teams (+ the 10 orgs + 90
/// programmes = 1000), one member per team.
fn build_tree(store: &mut Store, n_accounts: usize) -> Vec<(String, String)> {
    let mut leaves = Vec::new();
    let orgs = 10.min(n_accounts);
    let per_org = (n_accounts - orgs) / orgs;
    let progs_per_org = 9.min(per_org);
    let teams_per_prog = (per_org - progs_per_org) / progs_per_org.max(1);
    let mut count = 0;
    let add = |s: &mut Store, name: &str, parent: Option<&str>, alloc: f64| {
        s.create_account(
            "bench",
            NewAccount {
                name: name.into(),
                parent: parent.map(Into::into),
                allocation_gpu_hours: alloc,
                overcommit: false,
            },
            T,
        )
        .expect("account");
    };
    for o in 0..orgs {
        let org = format!("org{o}");
        add(store, &org, None, 10_000.0);
        count += 1;
        for p in 0..progs_per_org {
            let prog = format!("{org}-p{p}");
            add(store, &prog, Some(&org), 1_000.0);
            count += 1;
            for t in 0..teams_per_prog {
                if count >= n_accounts {
                    break;
                }
                let team = format!("{prog}-t{t}");
                add(store, &team, Some(&prog), 80.0);
                count += 1;
                let user = format!("u{o}x{p}x{t}");
                store
                    .add_member(
                        "bench",
                        MemberSpec {
                            user: user.clone(),
                            account: team.clone(),
                            allocation_gpu_hours: None,
                        },
                        T,
                    )
                    .expect("member");
                leaves.push((team, user));
            }
        }
    }
    leaves
}

fn main() -> anyhow::Result<()> {
    let n_accounts = env("BENCH_ACCOUNTS", 1000);
    let n_runs = env("BENCH_RUNS", 1_000_000);
    let n_sync = env("BENCH_SYNC_JOBS", 10_000);
    let http_secs = env("BENCH_HTTP_SECS", 3) as u64;
    let dir = tempfile::tempdir()?;
    let db = dir.path().join("bench.db");
    let mut rows: Vec<(String, String)> = Vec::new();
    let mut store = Store::open(&db, &PolicyPatch::default())?;
    let leaves = build_tree(&mut store, n_accounts);
    store.set_weights(
        "bench",
        WeightsPatch {
            default: None,
            set: [
                ("h100".to_string(), 1.0),
                ("b200".into(), 1.5),
                ("b300".into(), 2.0),
            ]
            .into(),
        },
        T,
    )?;
    let types = [None, Some("h100"), Some("b200"), Some("b300")];

    // Ledger: runs overlapping the 7-day window ending at T (some across its left edge, 1% running).
    let mut rng = Lcg(42);
    let t_fill = Instant::now();
    let batch = 100_000;
    let mut job: u32 = 1;
    while (job as usize) <= n_runs {
        let mut recs = Vec::with_capacity(batch);
        for _ in 0..batch.min(n_runs + 1 - job as usize) {
            let (account, user) = &leaves[rng.below(leaves.len() as u64) as usize];
            let start = T - 8 * DAY + i64::try_from(rng.below(8 * DAY as u64 - 60)).unwrap_or(0);
            let running = rng.below(100) == 0;
            let end = if running {
                None
            } else {
                Some((start + 60 + i64::try_from(rng.below(2 * DAY as u64)).unwrap_or(0)).min(T))
            };
            recs.push(RunRecord {
                job_id: job,
                run: 0,
                submit: 0,
                rerun: 0,
                account: account.clone(),
                user: user.clone(),
                partition: Some("gpu".into()),
                gpus: 1 + rng.below(8) as u32,
                gpu_type: types[rng.below(4) as usize].map(str::to_string),
                start: Some(start),
                end,
                free_tier: rng.below(20) == 0,
                min_runtime_secs: 3600,
                nodes: None,
                state: if running {
                    RunState::Running
                } else {
                    RunState::Ended
                },
                first_seen: start,
                time_limit_secs: None,
                checkpoint_secs: None,
            });
            job += 1;
        }
        store.ingest(&recs, "bench", false)?;
    }
    let fill = t_fill.elapsed();

    // 1. Fair-share snapshot: usage over the ledger + FairShare::compute + JSON.
    let mut times = Vec::new();
    let mut body_len = 0;
    for _ in 0..7 {
        let t0 = Instant::now();
        let snapshot = PluginSnapshot {
            version: "bench".into(),
            generated_at: T,
            policy: store.policy().clone(),
            weights: store.weights().clone(),
            fair_share: store.fair_share(T),
            drains: Vec::new(),
            cluster_gpus: None,
            cluster_weighted_gpus: None,
        };
        let body = serde_json::to_vec(&snapshot)?;
        times.push(t0.elapsed());
        body_len = body.len();
    }
    let snap = median(times);
    rows.push((
        format!("fair-share snapshot, {n_accounts} accounts + {} users, {n_runs} runs in window (usage + compute + JSON {} KiB), median of 7", leaves.len(), body_len / 1024),
        format!("{} (goal < 100 ms)", ms(snap)),
    ));

    // Restart: load the ledger mirror from SQLite.
    drop(store);
    let t0 = Instant::now();
    let mut store = Store::open(&db, &PolicyPatch::default())?;
    rows.push((
        format!(
            "budgetd start: open + load {} ledger rows",
            store.ledger().len()
        ),
        ms(t0.elapsed()),
    ));

    // 2. Sync of N running jobs (new, then repeated unchanged, then all ended).
    let sync_batch = |state: RunState, end: Option<i64>| JobSync {
        collected_at: T,
        runs: (0..n_sync as u32)
            .map(|i| {
                let (account, user) = &leaves[i as usize % leaves.len()];
                JobRun {
                    job_id: 10_000_000 + i,
                    run: 0,
                    submit: None,
                    account: account.clone(),
                    user: user.clone(),
                    partition: Some("gpu".into()),
                    gpus: 4,
                    gpu_type: Some("h100".into()),
                    start: Some(T - 3600),
                    end,
                    state,
                    free_tier: false,
                    min_runtime_secs: 3600,
                    nodes: Some("node[001-002]".into()),
                    priority: Some(3_000_000_000),
                    reason: None,
                    time_limit_secs: Some(86_400),
                    checkpoint_secs: None,
                }
            })
            .collect(),
        live: None,
        queue: None,
    };
    let running = sync_batch(RunState::Running, None);
    let t0 = Instant::now();
    let out = store.sync(&running, T)?;
    let first = t0.elapsed();
    assert_eq!(out.inserted as usize, n_sync);
    let t0 = Instant::now();
    let out = store.sync(&running, T)?;
    let repeat = t0.elapsed();
    assert_eq!(out.unchanged as usize, n_sync);
    let ended = sync_batch(RunState::Ended, Some(T));
    let t0 = Instant::now();
    store.sync(&ended, T)?;
    let end_all = t0.elapsed();
    rows.push((
        format!(
            "sync {n_sync} running jobs, store level: first (all inserted, one fsync'd transaction)"
        ),
        format!("{} (goal < 50 ms)", ms(first)),
    ));
    rows.push((
        format!("sync {n_sync} running jobs, store level: repeat (all unchanged)"),
        ms(repeat),
    ));
    rows.push((
        format!("sync {n_sync} jobs, store level: all ended (all updated)"),
        ms(end_all),
    ));

    // 3. Over HTTP on the Unix socket: sync and snapshot throughput.
    let socket = dir.path().join("bench.sock");
    // A reader token for the web view's pages (over TCP, as a browser reads them).
    let config = Config::parse(&format!(
        "[[tokens]]\ntoken = \"{UI_TOKEN}\"\nuser = \"lead\"\nrole = \"reader\"\n"
    ))
    .map_err(|e| anyhow::anyhow!("bench config: {e}"))?;
    let state = AppState::new(store, config);
    let server = budgetd_testkit::Budgetd::serve(state, &socket, true);
    let client = Client::new(Endpoint::parse(&socket.display().to_string())?)
        .with_timeout(Duration::from_secs(60))
        .with_max_body(1 << 30);
    // HTTP sync: a fresh set of 10k running jobs (ids shifted).
    let mut http_sync = sync_batch(RunState::Running, None);
    for r in &mut http_sync.runs {
        r.job_id += 1_000_000;
    }
    let body = serde_json::to_vec(&http_sync)?;
    let post_sync = || -> anyhow::Result<Duration> {
        let t0 = Instant::now();
        let r = client.request(
            "POST",
            budget_protocol::SYNC_PATH,
            &[("Content-Type", "application/json")],
            Some(&body),
        )?;
        let took = t0.elapsed();
        anyhow::ensure!(r.status == 200, "{}", String::from_utf8_lossy(&r.body));
        Ok(took)
    };
    let http_first = post_sync()?;
    let http_repeat = post_sync()?;
    rows.push((
        format!(
            "POST /v1/sync/jobs, {n_sync} running jobs ({} KiB JSON), first / repeat",
            body.len() / 1024
        ),
        format!("{} / {}", ms(http_first), ms(http_repeat)),
    ));

    let first = client.request("GET", budget_protocol::SNAPSHOT_PATH, &[], None)?;
    assert_eq!(first.status, 200);
    let etag = first.etag().unwrap_or_default().to_string();
    let size = first.body.len();
    for (label, conditional) in [
        ("304 Not Modified (If-None-Match)", true),
        ("200 with full body", false),
    ] {
        let deadline = Instant::now() + Duration::from_secs(http_secs);
        let threads: Vec<_> = (0..2)
            .map(|_| {
                let c = client.clone();
                let etag = etag.clone();
                std::thread::spawn(move || {
                    let mut n = 0u64;
                    let mut other = 0u64;
                    while Instant::now() < deadline {
                        let headers: Vec<(&str, &str)> = if conditional {
                            vec![("If-None-Match", etag.as_str())]
                        } else {
                            vec![]
                        };
                        match c.request("GET", budget_protocol::SNAPSHOT_PATH, &headers, None) {
                            Ok(r) if r.status == if conditional { 304 } else { 200 } => n += 1,
                            _ => other += 1,
                        }
                    }
                    (n, other)
                })
            })
            .collect();
        let t0 = Instant::now();
        let (mut n, mut other) = (0, 0);
        for t in threads {
            let (a, b) = t.join().expect("client thread");
            n += a;
            other += b;
        }
        let secs = t0.elapsed().as_secs_f64();
        let what = if conditional {
            String::new()
        } else {
            format!(", {} KiB body", size / 1024)
        };
        rows.push((
            format!("GET /v1/snapshot {label}{what}, 2 client threads, new connection per request, 2 cores shared"),
            format!("{:.0} req/s (goal >= 1000/s){}", n as f64 / secs, if other > 0 { format!(", {other} unexpected (snapshot refreshed)") } else { String::new() }),
        ));
    }
    // 4. The web view's accounts page (4 share reports + HTML) against the
    // share report it is built from, one request at a time over TCP.
    let tcp = server
        .tcp
        .ok_or_else(|| anyhow::anyhow!("no TCP listener"))?;
    let web = Client::new(Endpoint::parse(&format!("http://{tcp}"))?)
        .with_timeout(Duration::from_secs(60))
        .with_max_body(1 << 30);
    let login = web.request(
        "POST",
        "/ui/login",
        &[("Content-Type", "application/x-www-form-urlencoded")],
        Some(format!("token={UI_TOKEN}").as_bytes()),
    )?;
    let cookie = login
        .header("set-cookie")
        .and_then(|c| c.split(';').next())
        .ok_or_else(|| anyhow::anyhow!("login set no cookie ({})", login.status))?
        .to_string();
    let api = web.clone().with_token(UI_TOKEN);
    for (label, client, path, headers) in [
        (
            "GET /ui/tree (accounts page: 4 windows of share + HTML)",
            &web,
            format!("/ui/tree?at={T}"),
            vec![("Cookie", cookie.as_str())],
        ),
        (
            "GET /v1/share (one window, JSON)",
            &api,
            format!("/v1/share?at={T}"),
            vec![],
        ),
    ] {
        // Within the reader's expensive-read budget (120 a minute by default).
        let mut times = Vec::new();
        let mut size = 0;
        for _ in 0..UI_REQUESTS {
            let t0 = Instant::now();
            let r = client.request("GET", &path, &headers, None)?;
            times.push(t0.elapsed());
            anyhow::ensure!(r.status == 200, "{path}: {}", r.status);
            size = r.body.len();
        }
        times.sort();
        let p95 = times[(times.len() * 95).div_ceil(100) - 1];
        rows.push((
            format!("{label}, {n_accounts} accounts, {n_runs} runs, reader token, {UI_REQUESTS} requests one at a time ({} KiB)", size / 1024),
            format!("p50 {} / p95 {} (goal < 200 ms p95)", ms(times[times.len() / 2]), ms(p95)),
        ));
    }
    drop(server);
    rows.push((
        format!("filling the ledger with {n_runs} runs (ingest in 100k batches)"),
        format!("{:.1} s", fill.as_secs_f64()),
    ));
    rows.push((
        "peak RSS of the whole benchmark (VmHWM)".into(),
        format!("{:.0} MiB", vm_hwm_mib()),
    ));

    println!("| measurement | result |\n|---|---|");
    for (k, v) in rows {
        println!("| {k} | {v} |");
    }
    Ok(())
}
