//! Test harness: an in-process budgetd on a temp socket and TCP port.

#![allow(dead_code)]

use std::path::PathBuf;
use std::time::Duration;

use budget_client::{Client, Endpoint};
use budget_service::{AppState, Config, Listeners, Store, bind_unix, run};
use serde_json::Value;

pub const ADMIN_TOKEN: &str = "admin-token-0001";
pub const READER_TOKEN: &str = "reader-token-0001";
pub const CAROL_TOKEN: &str = "carol-token-0001";
pub const ALICE_TOKEN: &str = "alice-token-0001";
pub const AGENT_TOKEN: &str = "agent-token-0001";

/// Config with one token per role.
pub fn config_text() -> String {
    format!(
        "body_limit_bytes = 65536\nimport_limit_bytes = 200000\n[[tokens]]\ntoken = \"{ADMIN_TOKEN}\"\nuser = \"ops\"\nrole = \"admin\"\n\
         [[tokens]]\ntoken = \"{READER_TOKEN}\"\nuser = \"prom\"\nrole = \"reader\"\n\
         [[tokens]]\ntoken = \"{CAROL_TOKEN}\"\nuser = \"carol\"\n\
         [[tokens]]\ntoken = \"{ALICE_TOKEN}\"\nuser = \"alice\"\n\
         [[tokens]]\ntoken = \"{AGENT_TOKEN}\"\nuser = \"gpu-nodes\"\nrole = \"agent\"\n"
    )
}

/// A running in-process server; stopped on drop.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub socket: PathBuf,
    pub db: PathBuf,
    pub tcp: std::net::SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    pub fn start() -> Server {
        Server::start_with(&config_text())
    }

    pub fn start_with(config: &str) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        // Let other uids reach the socket (auth tests run budgetctl as nobody).
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod");
        let socket = dir.path().join("budgetd.sock");
        let db = dir.path().join("budget.db");
        let config = Config::parse(config).expect("config");
        let store = Store::open(&db, &config.policy).expect("store");
        let state = AppState::new(store, config);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let sock = socket.clone();
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
                addr_tx
                    .send(tcp.local_addr().expect("addr"))
                    .expect("send addr");
                run(
                    state,
                    Listeners {
                        unix: Some(unix),
                        tcp: Some(tcp),
                    },
                    async move {
                        let _ = stop_rx.await;
                    },
                )
                .await
                .expect("serve");
            });
        });
        let tcp = addr_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("server address");
        Server {
            dir,
            socket,
            db,
            tcp,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// Client on the Unix socket (the test runs as root: an admin).
    pub fn unix(&self) -> Client {
        Client::new(Endpoint::parse(&self.socket.display().to_string()).expect("endpoint"))
            .with_timeout(Duration::from_secs(30))
            .with_max_body(256 << 20)
    }

    /// Client on TCP with a token (or none).
    pub fn tcp(&self, token: Option<&str>) -> Client {
        let c = Client::new(Endpoint::parse(&format!("http://{}", self.tcp)).expect("endpoint"))
            .with_timeout(Duration::from_secs(30));
        match token {
            Some(t) => c.with_token(t),
            None => c,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Sends a request; returns status and JSON body (Null when empty or not JSON).
pub fn call(c: &Client, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let bytes = body.map(|b| serde_json::to_vec(b).expect("encode"));
    let headers: &[(&str, &str)] = if bytes.is_some() {
        &[("Content-Type", "application/json")]
    } else {
        &[]
    };
    let r = c
        .request(method, path, headers, bytes.as_deref())
        .expect("request");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// Sends raw bytes.
pub fn call_raw(c: &Client, method: &str, path: &str, body: &[u8]) -> (u16, Value) {
    let r = c
        .request(
            method,
            path,
            &[("Content-Type", "application/json")],
            Some(body),
        )
        .expect("request");
    (
        r.status,
        serde_json::from_slice(&r.body).unwrap_or(Value::Null),
    )
}

/// Everything observable about the tree and its history, to assert that a
/// refused request changed nothing.
pub fn observable(c: &Client) -> Value {
    let (_, accounts) = call(c, "GET", "/v1/accounts", None);
    let (_, members) = call(c, "GET", "/v1/members", None);
    let (_, coords) = call(c, "GET", "/v1/coordinators", None);
    let (_, weights) = call(c, "GET", "/v1/weights", None);
    let (_, policy) = call(c, "GET", "/v1/policy", None);
    let (_, audit) = call(c, "GET", "/v1/audit", None);
    let (_, health) = call(c, "GET", "/v1/health", None);
    serde_json::json!({
        "accounts": accounts, "members": members, "coordinators": coords, "weights": weights,
        "policy": policy, "audit": audit, "generation": health["generation"],
    })
}

/// Creates an account as admin, asserting success.
pub fn add_account(c: &Client, name: &str, parent: Option<&str>, alloc: f64) {
    let (s, b) = call(
        c,
        "POST",
        "/v1/accounts",
        Some(&serde_json::json!({"name": name, "parent": parent, "allocation_gpu_hours": alloc})),
    );
    assert_eq!(s, 201, "{b}");
}

/// Adds a member as admin, asserting success.
pub fn add_member(c: &Client, user: &str, account: &str) {
    let (s, b) = call(
        c,
        "POST",
        "/v1/members",
        Some(&serde_json::json!({"user": user, "account": account})),
    );
    assert_eq!(s, 201, "{b}");
}

/// The error message of a JSON error body.
pub fn err(b: &Value) -> String {
    b["error"].as_str().unwrap_or_default().to_string()
}
