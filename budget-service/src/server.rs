//! Listening and serving: the Unix socket (always) and TCP (optional), with
//! graceful shutdown shared by both.
//!
//! budgetd runs its own accept loop (hyper's HTTP/1 connection builder)
//! rather than `axum::serve`, for three things a hostile local user would
//! otherwise exploit: a deadline on the request head that also closes idle
//! keep-alive connections (`header_timeout_secs`), a cap on open connections
//! overall and per peer (uid on the socket, IP on TCP), and the peer's
//! identity ([`Peer`]: the kernel's credentials, readable only from the
//! accepted socket) attached to every request. uid 0, budgetd's own uid and
//! the configured admin/controller uids are never capped, so slurmctld's
//! plugins get in however many connections users hold open.
//!
//! TCP has no kernel credentials, so the same guarantee needs two more
//! rules. Addresses in `trusted_addresses` (slurmctld's hosts: a site knows
//! them, as slurm.conf does) are never capped, like the privileged uids.
//! And `reserved_connections` more connections, beyond both caps, are kept
//! for controller and agent tokens: a connection that arrives when the
//! general share (or its address's share) is full is admitted into the
//! reserve, and each of its requests is served only if it carries such a
//! token; anything else is answered 503 and the connection closed at once,
//! and a reserved connection must send its head within
//! `RESERVE_HEAD_TIMEOUT`. Who may use a connection is only known from its
//! first request, hence admission first and the check on the request: a
//! reserve decided at accept time could be filled by anyone. So that a flood
//! of idle connections cannot hold the reserve either (each reopened as soon
//! as the deadline closes it), a connection arriving at a full reserve
//! displaces the oldest one there that has not yet shown a controller or
//! agent token: the controller sends its head as soon as it connects, so it
//! is past that point before a flood could displace it. The reserve also
//! sits over the per-address cap, because an agent's node is where users run
//! jobs too and shares its address with them. The controller's surest way in
//! stays `trusted_addresses` (or the socket).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::IntoResponse;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use crate::auth::Peer;
use crate::error::AppError;
use crate::state::AppState;

/// The sockets to serve.
#[derive(Debug, Default)]
pub struct Listeners {
    pub unix: Option<UnixListener>,
    pub tcp: Option<TcpListener>,
}

/// Binds the Unix socket at `path`: a stale socket file (nobody accepting)
/// is removed first; a live one is an error (another budgetd runs). The
/// socket is made world-connectable (0666): authorisation, not file mode,
/// decides what a caller may do.
pub fn bind_unix(path: &Path) -> std::io::Result<UnixListener> {
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(std::io::Error::other(format!(
                "{} exists and is not a socket",
                path.display()
            )));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(std::io::Error::other(format!(
                "{} is in use by a running service",
                path.display()
            )));
        }
        std::fs::remove_file(path)?;
    }
    let l = UnixListener::bind(path)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))?;
    Ok(l)
}

/// Who a connection is counted against.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum PeerKey {
    Uid(u32),
    Ip(IpAddr),
    Unknown,
}

/// How long a connection in the reserve may take to send a request head
/// (and to send the next one): the controller and agents send theirs as
/// soon as they connect, so an idle client is closed well before the
/// general `header_timeout_secs`.
const RESERVE_HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// Open connections: the general share, overall and per peer, and the
/// reserve over it.
#[derive(Debug, Default)]
struct ConnCount {
    total: usize,
    per_peer: HashMap<PeerKey, usize>,
    /// The reserve's connections, oldest first: `Some` (how to close it)
    /// while the connection has not shown a controller or agent token and may
    /// be displaced, `None` once it has.
    reserve: BTreeMap<u64, Option<Arc<Notify>>>,
    next_reserve_id: u64,
}

/// A counted connection; uncounted when dropped. `key: None`: in the
/// reserve, as `reserve_id`.
struct ConnSlot {
    counts: Arc<Mutex<ConnCount>>,
    key: Option<PeerKey>,
    reserve_id: u64,
}

impl Drop for ConnSlot {
    fn drop(&mut self) {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let Some(key) = &self.key else {
            // Gone already if it was displaced.
            c.reserve.remove(&self.reserve_id);
            return;
        };
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_peer.get_mut(key) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_peer.remove(key);
            }
        }
    }
}

/// How a new connection is let in.
enum Admission {
    /// Not counted: privileged uids on the socket, trusted TCP addresses.
    Free,
    /// In the general share.
    Counted(ConnSlot),
    /// In the reserve: served only for controller and agent tokens.
    Reserved(ConnSlot, ReserveTicket),
}

/// A connection's place in the reserve: `displaced` fires when a newer
/// connection takes it before this one showed a controller or agent token.
#[derive(Clone)]
struct ReserveTicket {
    counts: Arc<Mutex<ConnCount>>,
    id: u64,
    displaced: Arc<Notify>,
}

impl ReserveTicket {
    /// Notes that the connection showed a controller or agent token: it is
    /// no longer displaced. False when it was displaced already.
    fn keep(&self) -> bool {
        let mut c = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        match c.reserve.get_mut(&self.id) {
            Some(entry) => {
                *entry = None;
                true
            }
            None => false,
        }
    }
}

/// Counts a new connection of `peer`, or refuses it (`None`) when the caps
/// are reached (on TCP: the reserve too).
fn admit(state: &AppState, counts: &Arc<Mutex<ConnCount>>, peer: &Peer) -> Option<Admission> {
    let key = match peer {
        Peer::Unix { uid: Some(uid), .. } => {
            if state.admin_uids.contains(uid) || state.controller_uids.contains(uid) {
                return Some(Admission::Free);
            }
            PeerKey::Uid(*uid)
        }
        Peer::Unix { uid: None, .. } => PeerKey::Unknown,
        Peer::Tcp(addr) => {
            if state.config.trusted_addresses.contains(&addr.ip()) {
                return Some(Admission::Free);
            }
            PeerKey::Ip(addr.ip())
        }
    };
    let mut c = counts.lock().unwrap_or_else(|p| p.into_inner());
    let mine = c.per_peer.get(&key).copied().unwrap_or(0);
    if c.total >= state.config.max_connections || mine >= state.config.max_connections_per_peer {
        // Tokens, and so the reserve, are TCP's; on the socket the
        // privileged uids are never capped instead.
        if !matches!(key, PeerKey::Ip(_)) || state.config.reserved_connections == 0 {
            return None;
        }
        if c.reserve.len() >= state.config.reserved_connections {
            // Full: the oldest connection that has shown no token yet makes room.
            let oldest = c
                .reserve
                .iter()
                .find_map(|(id, d)| d.as_ref().map(|d| (*id, d.clone())));
            let (id, displaced) = oldest?;
            c.reserve.remove(&id);
            displaced.notify_one();
            state
                .counters
                .reserve_displaced
                .fetch_add(1, Ordering::Relaxed);
        }
        let id = c.next_reserve_id;
        c.next_reserve_id += 1;
        let displaced = Arc::new(Notify::new());
        c.reserve.insert(id, Some(displaced.clone()));
        return Some(Admission::Reserved(
            ConnSlot {
                counts: counts.clone(),
                key: None,
                reserve_id: id,
            },
            ReserveTicket {
                counts: counts.clone(),
                id,
                displaced,
            },
        ));
    }
    c.total += 1;
    *c.per_peer.entry(key.clone()).or_insert(0) += 1;
    Some(Admission::Counted(ConnSlot {
        counts: counts.clone(),
        key: Some(key),
        reserve_id: 0,
    }))
}

/// Serves one connection until it closes or `shutdown` fires (then the
/// request in flight is finished and the connection closed).
/// `reserve`: the connection is in the reserve, and each request is served
/// only if it may use it (else 503 and the connection is closed); it is
/// closed at once if displaced before its first such request.
async fn serve_conn<S>(
    app: Router,
    io: S,
    peer: Peer,
    header_timeout: Duration,
    reserve: Option<(AppState, ReserveTicket)>,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let displaced = reserve.as_ref().map(|(_, t)| t.displaced.clone());
    let svc = hyper::service::service_fn(move |mut req: hyper::Request<hyper::body::Incoming>| {
        let refused = reserve.as_ref().is_some_and(|(s, ticket)| {
            !crate::auth::may_use_connection_reserve(s, req.headers()) || !ticket.keep()
        });
        if refused && let Some((s, _)) = &reserve {
            s.counters.reserve_refusals.fetch_add(1, Ordering::Relaxed);
        }
        req.extensions_mut().insert(ConnectInfo(peer.clone()));
        let mut app = app.clone();
        async move {
            if refused {
                // Connection: close makes hyper close the connection after
                // this answer, freeing the reserved slot at once.
                let mut r =
                    AppError::Unavailable("too many open connections; try again later".into())
                        .into_response();
                r.headers_mut().insert(
                    axum::http::header::CONNECTION,
                    axum::http::HeaderValue::from_static("close"),
                );
                return Ok(r);
            }
            tower::Service::call(&mut app, req.map(Body::new)).await
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(header_timeout)
        .keep_alive(true)
        .serve_connection(TokioIo::new(io), svc);
    let mut conn = std::pin::pin!(conn);
    let stop = async move {
        let _ = shutdown.wait_for(|v| *v).await;
    };
    let displaced = async move {
        match displaced {
            Some(d) => d.notified().await,
            None => std::future::pending().await,
        }
    };
    let finished = tokio::select! {
        r = conn.as_mut() => Some(r),
        () = stop => None,
        // Displaced from the reserve before showing a token: closed (dropped).
        () = displaced => return,
    };
    let r = match finished {
        Some(r) => r,
        None => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = r {
        tracing::debug!(error = %e, "connection ended with an error");
    }
}

/// A listener of either kind, accepting with the peer attached.
enum Accepting {
    Unix(UnixListener),
    Tcp(TcpListener),
}

/// Accepts on `listener` until shutdown, then waits for its connections.
async fn accept_loop(
    state: AppState,
    app: Router,
    listener: Accepting,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let counts = Arc::new(Mutex::new(ConnCount::default()));
    let header_timeout = Duration::from_secs(state.config.header_timeout_secs);
    let mut conns = JoinSet::new();
    loop {
        if *shutdown.borrow() {
            break;
        }
        let accepted = tokio::select! {
            changed = shutdown.changed() => {
                // A dropped sender ends serving too (nothing can stop us later).
                if changed.is_err() || *shutdown.borrow() { break } else { continue }
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => continue,
            a = async {
                match &listener {
                    Accepting::Unix(l) => l.accept().await.map(|(s, _)| {
                        let peer = match s.peer_cred() {
                            Ok(c) => Peer::Unix { uid: Some(c.uid()), pid: c.pid() },
                            Err(_) => Peer::Unix { uid: None, pid: None },
                        };
                        (Either::Unix(s), peer)
                    }),
                    Accepting::Tcp(l) => l.accept().await.map(|(s, addr)| {
                        let _ = s.set_nodelay(true);
                        (Either::Tcp(s), Peer::Tcp(addr))
                    }),
                }
            } => a,
        };
        let (stream, peer) = match accepted {
            Ok(x) => x,
            Err(e) => {
                // EMFILE and friends: keep serving what is open, retry soon.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let app = app.clone();
        let rx = shutdown.clone();
        // Admission is decided here, synchronously, before any byte is read.
        let Some(admission) = admit(&state, &counts, &peer) else {
            state
                .counters
                .connections_refused
                .fetch_add(1, Ordering::Relaxed);
            tracing::debug!(?peer, "connection cap reached; closing the new connection");
            drop(stream);
            continue;
        };
        let (slot, reserve, head_timeout) = match admission {
            Admission::Free => (None, None, header_timeout),
            Admission::Counted(slot) => (Some(slot), None, header_timeout),
            Admission::Reserved(slot, ticket) => (
                Some(slot),
                Some((state.clone(), ticket)),
                header_timeout.min(RESERVE_HEAD_TIMEOUT),
            ),
        };
        conns.spawn(async move {
            // Released when the connection ends.
            let _slot = slot;
            match stream {
                Either::Unix(s) => serve_conn(app, s, peer, head_timeout, reserve, rx).await,
                Either::Tcp(s) => serve_conn(app, s, peer, head_timeout, reserve, rx).await,
            }
        });
    }
    while conns.join_next().await.is_some() {}
}

enum Either {
    Unix(tokio::net::UnixStream),
    Tcp(tokio::net::TcpStream),
}

/// Serves the API on the given listeners until `shutdown` completes, then
/// stops accepting and lets in-flight requests finish.
pub async fn run(
    state: AppState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::api::app(state.clone());
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let mut tasks = Vec::new();
    if let Some(l) = listeners.unix {
        if let Some(path) = l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(Path::to_path_buf))
        {
            *state.socket_path.lock().unwrap_or_else(|p| p.into_inner()) = Some(path);
        }
        tasks.push(tokio::spawn(accept_loop(
            state.clone(),
            app.clone(),
            Accepting::Unix(l),
            rx.clone(),
        )));
    }
    if let Some(l) = listeners.tcp {
        tasks.push(tokio::spawn(accept_loop(
            state.clone(),
            app.clone(),
            Accepting::Tcp(l),
            rx.clone(),
        )));
    }
    for t in tasks {
        t.await.map_err(std::io::Error::other)?;
    }
    Ok(())
}

/// Raises this process's open-file limit to its hard limit (systemd's
/// default soft limit, 1024, is below `max_connections`).
pub fn raise_fd_limit() {
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            let _ = libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
        }
    }
}

/// Completes on SIGTERM or SIGINT.
pub async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let term = signal(SignalKind::terminate());
    let int = signal(SignalKind::interrupt());
    match (term, int) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! {
                _ = t.recv() => tracing::info!("SIGTERM: shutting down"),
                _ = i.recv() => tracing::info!("SIGINT: shutting down"),
            }
        }
        _ => {
            tracing::warn!("cannot install signal handlers; stop budgetd with SIGKILL");
            std::future::pending::<()>().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(dir: &Path) -> AppState {
        let config = crate::Config::parse(
            "max_connections = 1\nmax_connections_per_peer = 1\nreserved_connections = 2\n",
        )
        .expect("config");
        let store = crate::Store::open(&dir.join("b.db"), &config.policy).expect("store");
        AppState::new(store, config)
    }

    fn reserved(a: Option<Admission>) -> Option<(ConnSlot, ReserveTicket)> {
        match a {
            Some(Admission::Reserved(slot, ticket)) => Some((slot, ticket)),
            _ => None,
        }
    }

    /// A full reserve: a newcomer displaces the oldest connection that showed
    /// no token, never one that did; with none left to displace it is refused.
    #[test]
    fn a_full_reserve_displaces_its_oldest_connection_without_a_token() {
        let dir = tempfile::tempdir().expect("tempdir");
        let st = state(dir.path());
        let counts = Arc::new(Mutex::new(ConnCount::default()));
        let peer = Peer::Tcp("10.0.0.9:4000".parse().expect("addr"));
        let general = admit(&st, &counts, &peer);
        assert!(matches!(general, Some(Admission::Counted(_))));
        let (_a, a) = reserved(admit(&st, &counts, &peer)).expect("a reserved");
        let (_b, b) = reserved(admit(&st, &counts, &peer)).expect("b reserved");
        // a shows a controller token; b does not.
        assert!(a.keep());
        let (_c, c) = reserved(admit(&st, &counts, &peer)).expect("c displaces b");
        assert!(!b.keep(), "b was not displaced");
        assert!(a.keep(), "a was displaced although it showed a token");
        assert!(c.keep());
        // Everyone in the reserve has shown a token: nobody to displace.
        assert!(admit(&st, &counts, &peer).is_none());
        // A displaced connection's slot, dropped later, frees nothing twice.
        drop(_b);
        assert!(admit(&st, &counts, &peer).is_none());
        drop(_a);
        assert!(reserved(admit(&st, &counts, &peer)).is_some());
    }
}
