//! Opening a connection to an [`Endpoint`] and doing deadline-bounded I/O on
//! it. This module owns the "never hang" guarantee: every connect, write and
//! read is bounded by what is left of the request's overall deadline, so a
//! server that accepts and then stalls (or drips one byte at a time) costs at
//! most the configured timeout.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use crate::endpoint::Endpoint;
use crate::error::ClientError;

/// An open connection, Unix or TCP.
enum Stream {
    Unix(UnixStream),
    Tcp(TcpStream),
}

impl Stream {
    fn set_read_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_read_timeout(Some(d)),
            Stream::Tcp(s) => s.set_read_timeout(Some(d)),
        }
    }
    fn set_write_timeout(&self, d: Duration) -> io::Result<()> {
        match self {
            Stream::Unix(s) => s.set_write_timeout(Some(d)),
            Stream::Tcp(s) => s.set_write_timeout(Some(d)),
        }
    }
}

/// A connection whose every read and write is bounded by `deadline`. Reads
/// and writes past the deadline fail with [`io::ErrorKind::TimedOut`].
pub(crate) struct Conn {
    stream: Stream,
    deadline: Instant,
}

/// Time left before `deadline`, or a `TimedOut` error when none is. Never
/// returns zero: `set_read_timeout(Some(0))` is an error in std.
fn remaining(deadline: Instant) -> io::Result<Duration> {
    let left = deadline.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "request deadline passed",
        ))
    } else {
        Ok(left)
    }
}

/// True for the error kinds a socket timeout produces (`EAGAIN` surfaces as
/// `WouldBlock` on Linux when `SO_RCVTIMEO` fires).
pub(crate) fn is_timeout(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
    )
}

impl Conn {
    /// Connects to `endpoint` before `deadline`.
    ///
    /// TCP uses `connect_timeout` per resolved address. A Unix-socket connect
    /// blocks while the listener's accept backlog is full (a stuck budgetd,
    /// which would hang `slurmctld` at shutdown); Linux bounds that
    /// wait by the socket's send timeout, so it is set to what is left of the
    /// deadline before connecting ([`connect_unix`]).
    pub(crate) fn connect(
        endpoint: &Endpoint,
        timeout: Duration,
        deadline: Instant,
    ) -> Result<Conn, ClientError> {
        let timed_out = || ClientError::Timeout {
            endpoint: endpoint.to_string(),
            timeout,
        };
        let connect_err = |source: io::Error| {
            if is_timeout(&source) {
                timed_out()
            } else {
                ClientError::Connect {
                    endpoint: endpoint.to_string(),
                    source,
                    hint: match endpoint {
                        Endpoint::Unix(_) => "set --socket or BUDGET_SOCKET",
                        Endpoint::Tcp { .. } => "set --url or BUDGET_URL",
                    },
                }
            }
        };
        let stream = match endpoint {
            Endpoint::Unix(path) => {
                let left = remaining(deadline).map_err(|_| timed_out())?;
                Stream::Unix(connect_unix(path, left).map_err(connect_err)?)
            }
            Endpoint::Tcp { host, port } => {
                // Resolution may consult DNS and has no timeout in std; budgetd
                // addresses are IP literals or /etc/hosts names in practice.
                let addrs: Vec<SocketAddr> = (host.as_str(), *port)
                    .to_socket_addrs()
                    .map_err(connect_err)?
                    .collect();
                let mut last = io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("{host} resolved to no address"),
                );
                let mut found = None;
                for addr in addrs {
                    let left = remaining(deadline).map_err(|_| timed_out())?;
                    match TcpStream::connect_timeout(&addr, left) {
                        Ok(s) => {
                            found = Some(s);
                            break;
                        }
                        Err(e) => last = e,
                    }
                }
                let s = found.ok_or_else(|| connect_err(last))?;
                // Requests are tiny and written in one go; don't let Nagle
                // hold the tail back waiting for an ACK.
                let _ = s.set_nodelay(true);
                Stream::Tcp(s)
            }
        };
        Ok(Conn { stream, deadline })
    }
}

/// Connects to the Unix socket `path` within `timeout`: the send timeout
/// (`SO_SNDTIMEO`) bounds the kernel's wait for room in a full accept backlog
/// (`unix_stream_connect` waits `sock_sndtimeo`); past it the connect fails
/// with `EAGAIN`, which [`is_timeout`] reads as a timeout. The socket is
/// close-on-exec (socket2 sets it).
fn connect_unix(path: &std::path::Path, timeout: Duration) -> io::Result<UnixStream> {
    let addr = socket2::SockAddr::unix(path)?;
    let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None)?;
    s.set_write_timeout(Some(timeout))?;
    s.connect(&addr)?;
    Ok(UnixStream::from(std::os::fd::OwnedFd::from(s)))
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(remaining(self.deadline)?)?;
        match &mut self.stream {
            Stream::Unix(s) => s.read(buf),
            Stream::Tcp(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(remaining(self.deadline)?)?;
        match &mut self.stream {
            Stream::Unix(s) => s.write(buf),
            Stream::Tcp(s) => s.write(buf),
        }
    }
    fn flush(&mut self) -> io::Result<()> {
        match &mut self.stream {
            Stream::Unix(s) => s.flush(),
            Stream::Tcp(s) => s.flush(),
        }
    }
}
