//! Listening and serving: the Unix socket (always) and TCP (optional), with
//! graceful shutdown shared by both.
//!
//! Each listener is served by `axum::serve` with per-connection
//! [`Peer`] info, which carries the kernel's peer credentials for Unix
//! connections: authentication needs them, and they can only be read from
//! the accepted socket, not from an HTTP request.

use std::future::Future;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::Path;

use tokio::net::{TcpListener, UnixListener};

use crate::auth::Peer;
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

/// Serves the API on the given listeners until `shutdown` completes, then
/// stops accepting and lets in-flight requests finish.
pub async fn run(
    state: AppState,
    listeners: Listeners,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = crate::api::app(state);
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(true);
    });
    let wait = |mut rx: tokio::sync::watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|v| *v).await;
    };
    let mut tasks = Vec::new();
    if let Some(l) = listeners.unix {
        let svc = app.clone().into_make_service_with_connect_info::<Peer>();
        let fut = axum::serve(l, svc).with_graceful_shutdown(wait(rx.clone()));
        tasks.push(tokio::spawn(async move { fut.await }));
    }
    if let Some(l) = listeners.tcp {
        let svc = app.clone().into_make_service_with_connect_info::<Peer>();
        let fut = axum::serve(l, svc).with_graceful_shutdown(wait(rx.clone()));
        tasks.push(tokio::spawn(async move { fut.await }));
    }
    for t in tasks {
        t.await.map_err(std::io::Error::other)??;
    }
    Ok(())
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
