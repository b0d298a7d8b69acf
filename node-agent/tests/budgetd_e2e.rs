//! End to end: the real `budget-agent` binary posts to a real budgetd (the
//! `budget-service` library serving on a temp Unix socket and on TCP, with a
//! real SQLite file), and budgetd stores the report.
//!
//! Why here and not in budget-service's tests: Cargo builds `budget-agent`
//! (and sets `CARGO_BIN_EXE_budget-agent`) only for this crate's tests, while
//! budgetd is a library function any crate can start.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use budget_client::{Client, Endpoint};
use budget_service::{AppState, Config, Listeners, Store, bind_unix, run};
use serde_json::Value;

const AGENT_TOKEN: &str = "agent-token-e2e-0001";

/// An in-process budgetd; stopped on drop.
struct Budgetd {
    dir: tempfile::TempDir,
    tcp: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Budgetd {
    fn start() -> Budgetd {
        let dir = tempfile::tempdir().expect("tempdir");
        let config = Config::parse(&format!(
            "[[tokens]]\ntoken = \"{AGENT_TOKEN}\"\nuser = \"gpu-nodes\"\nrole = \"agent\"\n"
        ))
        .expect("config");
        let store = Store::open(&dir.path().join("budget.db"), &config.policy).expect("store");
        let state = AppState::new(store, config);
        let sock = dir.path().join("budgetd.sock");
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let unix = bind_unix(&sock).expect("bind unix");
                let tcp = tokio::net::TcpListener::bind("127.0.0.1:0")
                    .await
                    .expect("bind tcp");
                addr_tx.send(tcp.local_addr().expect("addr")).expect("send");
                let listeners = Listeners {
                    unix: Some(unix),
                    tcp: Some(tcp),
                };
                run(state, listeners, async move {
                    let _ = stop_rx.await;
                })
                .await
                .expect("serve");
            });
        });
        let tcp = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("budgetd address");
        Budgetd {
            dir,
            tcp,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.path().join("budgetd.sock")
    }

    /// `GET /v1/idle` as an admin (this test runs as root, or as budgetd's own uid).
    fn idle(&self) -> Value {
        let c = Client::new(Endpoint::parse(&self.socket().display().to_string()).expect("ep"))
            .with_timeout(Duration::from_secs(10));
        let r = c
            .request("GET", "/v1/idle", &[], None)
            .expect("GET /v1/idle");
        assert_eq!(r.status, 200);
        serde_json::from_slice(&r.body).expect("json")
    }
}

impl Drop for Budgetd {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn agent(node: &str, endpoint: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_budget-agent"));
    c.args([
        "--once",
        "--no-gpu-mode",
        "--node",
        node,
        "--socket",
        endpoint,
    ])
    .env_remove("BUDGET_SOCKET")
    .env_remove("BUDGET_TOKEN");
    c
}

fn node<'a>(idle: &'a Value, name: &str) -> Option<&'a Value> {
    idle["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|x| x["node"] == name))
}

fn has_nvml() -> bool {
    budget_agent::source::NvmlSource::open().is_ok()
}

#[test]
fn the_real_agent_reports_to_budgetd_over_the_socket_and_with_an_agent_token() {
    let d = Budgetd::start();
    let sock = d.socket();
    let out = agent("e2e-sock", &sock.display().to_string())
        .output()
        .expect("run budget-agent");
    assert!(
        out.status.success(),
        "agent over the socket failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let idle = d.idle();
    let n = node(&idle, "e2e-sock").unwrap_or_else(|| panic!("report not stored: {idle}"));
    // Without a GPU (CI) the agent runs in no-GPU mode; on a GPU node it reports NVML.
    assert_eq!(n["nvml"], has_nvml(), "{n}");
    if !has_nvml() {
        assert_eq!(n["gpus"], 0);
    }
    assert!(n["age_secs"].as_i64().is_some_and(|a| a < 60), "{n}");

    // From a GPU node: TCP with an agent token.
    let url = format!("http://{}", d.tcp);
    let out = agent("e2e-tcp", &url)
        .args(["--token", AGENT_TOKEN])
        .output()
        .expect("run budget-agent");
    assert!(
        out.status.success(),
        "agent over TCP failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(node(&d.idle(), "e2e-tcp").is_some());

    // A wrong token is refused, and --once says so in its exit status.
    let out = agent("e2e-bad", &url)
        .args(["--token", "not-the-token-123"])
        .output()
        .expect("run budget-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sending the report"), "stderr: {stderr}");
    assert!(node(&d.idle(), "e2e-bad").is_none());
}

#[test]
fn once_fails_when_budgetd_is_unreachable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing: &Path = &dir.path().join("nobody.sock");
    let out = agent("e2e-none", &missing.display().to_string())
        .output()
        .expect("run budget-agent");
    assert!(!out.status.success());
}
