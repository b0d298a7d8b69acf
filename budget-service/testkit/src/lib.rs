//! An in-process budgetd for tests and benchmarks: the real service (the
//! `budget-service` library's `run`, a real SQLite file, real sockets) on a
//! thread of its own with its own runtime, stopped and joined on drop.
//!
//! Why a crate: the tests of budget-service, budgetctl and the node agent and
//! the service benchmark all need "budgetd on a temp socket"; one copy keeps
//! them starting it the same way. Test support only: it panics (with the
//! reason) when budgetd cannot start.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use budget_client::{Client, Endpoint};
use budget_service::{AppState, Config, Listeners, Store, bind_unix, run};
use serde_json::Value;

/// A running in-process budgetd; stopped on drop.
#[derive(Debug)]
pub struct Budgetd {
    /// Temp dir holding the socket and (for [`Budgetd::start`]) the database.
    dir: Option<tempfile::TempDir>,
    /// The Unix socket.
    pub socket: PathBuf,
    /// The database file ([`Budgetd::start`] only).
    pub db: Option<PathBuf>,
    /// The TCP listener on 127.0.0.1, when asked for.
    pub tcp: Option<SocketAddr>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Budgetd {
    /// budgetd with `config` (TOML text) on a fresh database in a temp dir,
    /// on a Unix socket there and on TCP `127.0.0.1:0`. The temp dir is
    /// world-readable so tests may run clients as other uids.
    pub fn start(config: &str) -> Budgetd {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod tempdir");
        let db = dir.path().join("budget.db");
        let config = Config::parse(config).expect("config");
        let store = Store::open(&db, &config.policy).expect("open store");
        let state = AppState::new(store, config);
        let mut d = Budgetd::serve(state, &dir.path().join("budgetd.sock"), true);
        d.db = Some(db);
        d.dir = Some(dir);
        d
    }

    /// [`Budgetd::start`] on a cluster of `gpus` GPUs, as if budgetd had read
    /// them from Slurm (the snapshot's `cluster_gpus`).
    pub fn start_with_cluster(config: &str, gpus: u32) -> Budgetd {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .expect("chmod tempdir");
        let db = dir.path().join("budget.db");
        let config = Config::parse(config).expect("config");
        let store = Store::open(&db, &config.policy).expect("open store");
        let state = AppState::new(store, config);
        state.set_capacity(budget_service::capacity::ClusterGpus::untyped(gpus));
        let mut d = Budgetd::serve(state, &dir.path().join("budgetd.sock"), true);
        d.db = Some(db);
        d.dir = Some(dir);
        d
    }

    /// Serves an opened `state` on the Unix socket `socket` (and on TCP
    /// `127.0.0.1:0` if `tcp`): for callers that fill the store first.
    /// Returns once the listeners are bound.
    pub fn serve(state: AppState, socket: &Path, tcp: bool) -> Budgetd {
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (ready_tx, ready_rx) = std::sync::mpsc::channel();
        let sock = socket.to_path_buf();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let unix = bind_unix(&sock).expect("bind unix socket");
                let tcp = if tcp {
                    Some(
                        tokio::net::TcpListener::bind("127.0.0.1:0")
                            .await
                            .expect("bind tcp"),
                    )
                } else {
                    None
                };
                ready_tx
                    .send(tcp.as_ref().map(|l| l.local_addr().expect("tcp address")))
                    .expect("report ready");
                let listeners = Listeners {
                    unix: Some(unix),
                    tcp,
                };
                run(state, listeners, async move {
                    let _ = stop_rx.await;
                })
                .await
                .expect("serve");
            });
        });
        let tcp = ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("budgetd did not bind its sockets");
        Budgetd {
            dir: None,
            socket: socket.to_path_buf(),
            db: None,
            tcp,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    /// The temp dir of [`Budgetd::start`] (else the socket's directory).
    pub fn dir(&self) -> &Path {
        match &self.dir {
            Some(d) => d.path(),
            None => self.socket.parent().unwrap_or(Path::new("/")),
        }
    }

    /// A client on the Unix socket (a test running as root is an admin).
    pub fn unix(&self) -> Client {
        Client::new(Endpoint::parse(&self.socket.display().to_string()).expect("endpoint"))
            .with_timeout(Duration::from_secs(30))
            .with_max_body(256 << 20)
    }

    /// A client on TCP with a bearer token (or none).
    pub fn tcp(&self, token: Option<&str>) -> Client {
        let addr = self.tcp.expect("budgetd was started without TCP");
        let c = Client::new(Endpoint::parse(&format!("http://{addr}")).expect("endpoint"))
            .with_timeout(Duration::from_secs(30));
        match token {
            Some(t) => c.with_token(t),
            None => c,
        }
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

/// Sends a request with an optional JSON body; returns the status and the
/// JSON answer (`Null` when empty or not JSON).
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
