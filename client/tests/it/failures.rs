//! Failure paths: unreachable service, stalled and dripping servers against
//! the overall deadline, oversize bodies, malformed responses, early answers.

use std::net::TcpListener;
use std::time::{Duration, Instant};

use budget_client::{Client, ClientError, Endpoint};
use serde_json::Value;

use crate::support::{Behaviour, Transport, reply, serve, temp_socket_path};

fn protocol_message(err: ClientError) -> String {
    match err {
        ClientError::Protocol(m) => m,
        other => panic!("expected Protocol, got {other:?}"),
    }
}

#[test]
fn missing_socket_is_a_connect_error_with_a_hint() {
    let path = temp_socket_path();
    let err = Client::new(Endpoint::Unix(path.clone()))
        .get_json::<Value>("/x")
        .unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    assert!(err.is_unavailable());
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "cannot reach budgetd at unix:{}: ",
            path.display()
        )),
        "{msg}"
    );
    assert!(msg.contains("No such file or directory"), "{msg}");
    assert!(
        msg.ends_with("is budgetd running? set --socket or BUDGET_SOCKET"),
        "{msg}"
    );
}

/// A budgetd that stopped accepting (its accept backlog full): the connect
/// itself is bounded by the request timeout (a Unix-socket connect without a
/// deadline would hang `slurmctld`'s `fini`).
#[test]
fn a_full_accept_backlog_times_out_the_unix_connect() {
    let path = temp_socket_path();
    let l = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
    l.bind(&socket2::SockAddr::unix(&path).unwrap()).unwrap();
    l.listen(0).unwrap();
    // Fill the backlog: connections that are never accepted (non-blocking, so
    // the filler itself cannot hang); stop at the first that would block.
    let mut held = Vec::new();
    for _ in 0..64 {
        let s = socket2::Socket::new(socket2::Domain::UNIX, socket2::Type::STREAM, None).unwrap();
        s.set_nonblocking(true).unwrap();
        match s.connect(&socket2::SockAddr::unix(&path).unwrap()) {
            Ok(()) => held.push(s),
            Err(_) => break,
        }
    }
    assert!(!held.is_empty(), "the backlog took no connection");
    let (tx, rx) = std::sync::mpsc::channel();
    let p2 = path.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        let r = Client::new(Endpoint::Unix(p2))
            .with_timeout(Duration::from_millis(300))
            .get_json::<Value>("/x");
        let _ = tx.send((r, t.elapsed()));
    });
    let (r, took) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the connect hung past 10 s with a 300 ms timeout");
    let err = r.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(took < Duration::from_secs(2), "{took:?}");
    drop(held);
}

#[test]
fn a_caller_may_name_its_own_endpoint_setting() {
    let path = temp_socket_path();
    let err = Client::new(Endpoint::Unix(path))
        .with_connect_hint("set budget_socket in PriorityParameters")
        .get_json::<Value>("/x")
        .unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.ends_with("is budgetd running? set budget_socket in PriorityParameters"),
        "{msg}"
    );
}

#[test]
fn refused_tcp_port_is_a_connect_error() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let err = Client::from_url(&format!("http://127.0.0.1:{port}"))
        .unwrap()
        .request("GET", "/", &[], None)
        .unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.starts_with(&format!(
            "cannot reach budgetd at http://127.0.0.1:{port}: "
        )),
        "{msg}"
    );
    assert!(msg.contains("refused"), "{msg}");
    assert!(msg.ends_with("set --url or BUDGET_URL"), "{msg}");
}

/// Asserts `f` fails with `Timeout` between 450 ms and 1 s.
fn assert_times_out_quickly(f: impl FnOnce() -> Result<budget_client::Response, ClientError>) {
    let start = Instant::now();
    let err = f().unwrap_err();
    let took = start.elapsed();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(err.is_unavailable());
    assert!(
        took >= Duration::from_millis(450),
        "fired too early: {took:?}"
    );
    assert!(took < Duration::from_secs(1), "fired too late: {took:?}");
    assert!(
        err.to_string().contains("did not answer within 500ms"),
        "{err}"
    );
}

#[test]
fn server_that_never_answers_times_out_on_unix() {
    let server = serve(Transport::Unix, Behaviour::Stall(Duration::from_secs(5)));
    let client = server.client().with_timeout(Duration::from_millis(500));
    assert_times_out_quickly(|| client.request("GET", "/v1/snapshot", &[], None));
}

#[test]
fn server_that_never_answers_times_out_on_tcp() {
    let server = serve(Transport::Tcp, Behaviour::Stall(Duration::from_secs(5)));
    let client = server.client().with_timeout(Duration::from_millis(500));
    assert_times_out_quickly(|| client.request("GET", "/v1/snapshot", &[], None));
}

#[test]
fn dripping_server_hits_the_overall_deadline() {
    // Each read succeeds within 100 ms, so only the overall deadline can stop
    // this: per-read timeouts alone would wait 5 s.
    let server = serve(
        Transport::Unix,
        Behaviour::Drip {
            interval: Duration::from_millis(100),
            count: 50,
        },
    );
    let client = server.client().with_timeout(Duration::from_millis(500));
    assert_times_out_quickly(|| client.request("GET", "/", &[], None));
}

#[test]
fn oversize_content_length_is_refused_before_reading() {
    // Declares 100 MB but sends only a few bytes: the limit check must come
    // from the header, not from reading (which would end in a truncation).
    let server = reply(
        Transport::Tcp,
        b"HTTP/1.1 200 OK\r\nContent-Length: 100000000\r\n\r\nabc",
    );
    let err = server
        .client()
        .with_max_body(1024)
        .request("GET", "/", &[], None)
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BodyTooLarge { limit: 1024 }),
        "{err:?}"
    );
}

#[test]
fn oversize_chunked_and_unframed_bodies_are_refused() {
    let mut chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    for _ in 0..3 {
        chunked.extend_from_slice(b"200\r\n");
        chunked.extend(std::iter::repeat_n(b'x', 0x200));
        chunked.extend_from_slice(b"\r\n");
    }
    chunked.extend_from_slice(b"0\r\n\r\n");
    let server = reply(Transport::Unix, &chunked);
    let err = server
        .client()
        .with_max_body(1024)
        .request("GET", "/", &[], None)
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BodyTooLarge { limit: 1024 }),
        "{err:?}"
    );

    let mut unframed = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
    unframed.extend(std::iter::repeat_n(b'y', 4096));
    let server = reply(Transport::Unix, &unframed);
    let err = server
        .client()
        .with_max_body(1024)
        .request("GET", "/", &[], None)
        .unwrap_err();
    assert!(
        matches!(err, ClientError::BodyTooLarge { limit: 1024 }),
        "{err:?}"
    );
}

#[test]
fn garbage_status_line_is_a_protocol_error() {
    let server = reply(Transport::Tcp, b"SSH-2.0-OpenSSH_9.2\r\n\r\n");
    let err = server.client().request("GET", "/", &[], None).unwrap_err();
    let msg = protocol_message(err);
    assert!(msg.contains("not an HTTP/1.x status line"), "{msg}");
    assert!(msg.contains("SSH-2.0"), "{msg}");
}

#[test]
fn binary_garbage_and_bad_framing_are_protocol_errors() {
    let server = reply(Transport::Unix, &[0xff, 0xfe, 0x00, b'\n', b'\n']);
    protocol_message(server.client().request("GET", "/", &[], None).unwrap_err());

    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort",
    );
    let msg = protocol_message(server.client().request("GET", "/", &[], None).unwrap_err());
    assert!(msg.contains("5 of 10"), "{msg}");

    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nnothex\r\n",
    );
    let msg = protocol_message(server.client().request("GET", "/", &[], None).unwrap_err());
    assert!(msg.contains("chunk size"), "{msg}");
}

#[test]
fn server_closing_without_answer_is_a_protocol_error() {
    let server = reply(Transport::Tcp, b"");
    let msg = protocol_message(server.client().request("GET", "/", &[], None).unwrap_err());
    assert!(msg.contains("closed before any response"), "{msg}");
}

#[test]
fn early_answer_is_returned_even_if_the_upload_fails() {
    // The server answers 413 without reading a 4 MiB body and closes; our
    // write then fails with EPIPE, but the response is what the user needs.
    let server = serve(
        Transport::Unix,
        Behaviour::ReplyWithoutReading(
            b"HTTP/1.1 413 Payload Too Large\r\nContent-Length: 24\r\n\r\n{\"error\":\"body too big\"}"
                .to_vec(),
        ),
    );
    let big = vec![b' '; 4 << 20];
    let resp = server
        .client()
        .request("POST", "/v1/usage", &[], Some(&big))
        .unwrap();
    assert_eq!(resp.status, 413);
    let err = resp.error_for_status().unwrap_err();
    assert!(
        matches!(&err, ClientError::Status { status: 413, message } if message == "body too big")
    );
}

#[test]
fn invalid_requests_are_refused_before_connecting() {
    // The endpoint does not exist: an InvalidRequest (not Connect) proves no
    // connection was attempted.
    let client = Client::new(Endpoint::Unix(temp_socket_path()));
    for (method, path, headers) in [
        ("GET", "/a\r\nX: y", vec![]),
        (
            "GET",
            "/",
            vec![("X-Id", "1\r\nAuthorization: Bearer stolen")],
        ),
        ("GET", "/", vec![("Host", "evil")]),
        ("G T", "/", vec![]),
    ] {
        let err = client.request(method, path, &headers, None).unwrap_err();
        assert!(
            matches!(err, ClientError::InvalidRequest(_)),
            "{method} {path:?}: {err:?}"
        );
    }
}
