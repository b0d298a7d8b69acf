//! Canned-response servers for the tests. Each server accepts exactly one
//! connection, captures the raw request (head plus a `Content-Length` body),
//! runs a behaviour, and hands the captured request back through
//! [`Server::request`].

use std::io::{Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use budget_client::{Client, Endpoint};

/// What the server does after reading the request.
pub enum Behaviour {
    /// Write these bytes, then close.
    Reply(Vec<u8>),
    /// Read nothing, write these bytes at once, then close (an early answer).
    ReplyWithoutReading(Vec<u8>),
    /// Write nothing and keep the connection open for this long.
    Stall(Duration),
    /// Write one byte every `interval`, `count` times (a slow drip).
    Drip { interval: Duration, count: usize },
}

/// Transport of a test server.
#[derive(Clone, Copy)]
pub enum Transport {
    Unix,
    Tcp,
}

/// A running one-shot server.
pub struct Server {
    pub endpoint: Endpoint,
    rx: mpsc::Receiver<Vec<u8>>,
    socket: Option<PathBuf>,
}

impl Server {
    /// A client for this server, with a 2 s timeout so a bug fails fast.
    pub fn client(&self) -> Client {
        Client::new(self.endpoint.clone()).with_timeout(Duration::from_secs(2))
    }

    /// The raw request the server received (waits up to 5 s).
    pub fn request(&self) -> String {
        let raw = self.rx.recv_timeout(Duration::from_secs(5)).unwrap();
        String::from_utf8(raw).unwrap()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(p) = &self.socket {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// A fresh socket path in the temp dir, unique per process and call.
pub fn temp_socket_path() -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("budget-client-{}-{n}.sock", std::process::id()))
}

/// Reads a request head and its `Content-Length` body.
fn read_request(s: &mut impl Read) -> Vec<u8> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut byte) {
            Ok(1) => buf.push(byte[0]),
            _ => return buf,
        }
    }
    let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map_or(0, |v| v.trim().parse::<usize>().unwrap());
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).unwrap();
    buf.extend(body);
    buf
}

fn run(mut s: impl Read + Write, behaviour: Behaviour, tx: mpsc::Sender<Vec<u8>>) {
    if let Behaviour::ReplyWithoutReading(bytes) = &behaviour {
        let _ = s.write_all(bytes);
        let _ = tx.send(Vec::new());
        return;
    }
    let _ = tx.send(read_request(&mut s));
    match behaviour {
        Behaviour::Reply(bytes) | Behaviour::ReplyWithoutReading(bytes) => {
            let _ = s.write_all(&bytes);
        }
        Behaviour::Stall(d) => thread::sleep(d),
        Behaviour::Drip { interval, count } => {
            for _ in 0..count {
                if s.write_all(b"H").is_err() {
                    return;
                }
                thread::sleep(interval);
            }
        }
    }
}

/// Starts a one-shot server on `transport`.
pub fn serve(transport: Transport, behaviour: Behaviour) -> Server {
    let (tx, rx) = mpsc::channel();
    match transport {
        Transport::Unix => {
            let path = temp_socket_path();
            let listener = UnixListener::bind(&path).unwrap();
            thread::spawn(move || {
                if let Ok((s, _)) = listener.accept() {
                    run(s, behaviour, tx);
                }
            });
            Server {
                endpoint: Endpoint::Unix(path.clone()),
                rx,
                socket: Some(path),
            }
        }
        Transport::Tcp => {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            thread::spawn(move || {
                if let Ok((s, _)) = listener.accept() {
                    run(s, behaviour, tx);
                }
            });
            Server {
                endpoint: Endpoint::Tcp {
                    host: "127.0.0.1".into(),
                    port,
                },
                rx,
                socket: None,
            }
        }
    }
}

/// Shorthand: a server that replies with `bytes`.
pub fn reply(transport: Transport, bytes: &[u8]) -> Server {
    serve(transport, Behaviour::Reply(bytes.to_vec()))
}
