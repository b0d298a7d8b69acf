//! Happy paths over both transports, and what the client puts on the wire:
//! framing headers, bearer token, JSON bodies, conditional GET.

use budget_client::ClientError;
use serde_json::{Value, json};

use crate::support::{Transport, reply};

const JSON_OK: &[u8] =
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 21\r\n\r\n{\"accounts\":[\"a\",\"b\"]}";

#[test]
fn content_length_response_over_unix_socket() {
    let body = br#"{"accounts":["a","b"]}"#;
    let mut raw = format!("HTTP/1.1 200 OK\r\nContent-Length: {}\r\n\r\n", body.len()).into_bytes();
    raw.extend_from_slice(body);
    let server = reply(Transport::Unix, &raw);
    let v: Value = server.client().get_json("/v1/accounts").unwrap();
    assert_eq!(v, json!({"accounts": ["a", "b"]}));

    let req = server.request();
    assert!(req.starts_with("GET /v1/accounts HTTP/1.1\r\n"), "{req}");
    assert!(req.contains("Host: localhost\r\n"), "{req}");
    assert!(req.contains("Connection: close\r\n"), "{req}");
    assert!(!req.contains("Authorization"), "no token set: {req}");
    assert!(!req.contains("Content-Length"), "GET without body: {req}");
}

#[test]
fn content_length_shorter_than_data_is_honoured() {
    // The server sends 22 body bytes but declares 21: the client must stop at
    // 21, so the JSON is cut and decoding fails (rather than reading on).
    let server = reply(Transport::Tcp, JSON_OK);
    let resp = server.client().request("GET", "/x", &[], None).unwrap();
    assert_eq!(resp.body.len(), 21);
    assert!(matches!(
        resp.json::<Value>(),
        Err(ClientError::Json { .. })
    ));
}

#[test]
fn post_json_over_tcp_sends_token_and_body_and_decodes_chunked_reply() {
    let server = reply(
        Transport::Tcp,
        b"HTTP/1.1 201 Created\r\ntransfer-encoding: chunked\r\n\r\n\
          7\r\n{\"id\": \r\n3\r\n42}\r\n0\r\n\r\n",
    );
    let client = server.client().with_token("s3cret");
    let out: Value = client
        .post_json("/v1/accounts", &json!({"name": "physics"}))
        .unwrap();
    assert_eq!(out, json!({"id": 42}));

    let req = server.request();
    let port = match &server.endpoint {
        budget_client::Endpoint::Tcp { port, .. } => *port,
        other => panic!("unexpected {other:?}"),
    };
    assert!(req.starts_with("POST /v1/accounts HTTP/1.1\r\n"), "{req}");
    assert!(
        req.contains(&format!("Host: 127.0.0.1:{port}\r\n")),
        "{req}"
    );
    assert!(req.contains("Authorization: Bearer s3cret\r\n"), "{req}");
    assert!(req.contains("Content-Type: application/json\r\n"), "{req}");
    assert!(req.contains("Content-Length: 18\r\n"), "{req}");
    assert!(req.ends_with("\r\n\r\n{\"name\":\"physics\"}"), "{req}");
}

#[test]
fn chunked_response_over_unix_socket() {
    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Budget: yes\r\n\r\n\
          5\r\nhello\r\n6;note=x\r\n world\r\n0\r\nTrailer-A: 1\r\n\r\n",
    );
    let resp = server.client().request("GET", "/raw", &[], None).unwrap();
    assert_eq!(resp.status, 200);
    assert_eq!(resp.body, b"hello world");
    assert_eq!(resp.header("x-BUDGET"), Some("yes"));
    assert_eq!(resp.header("content-length"), None);
}

#[test]
fn read_to_eof_without_length() {
    let server = reply(Transport::Tcp, b"HTTP/1.0 200 OK\r\n\r\n[1,2,3]");
    let v: Vec<u32> = server.client().get_json("/x").unwrap();
    assert_eq!(v, [1, 2, 3]);
}

#[test]
fn not_modified_returns_none_and_sends_if_none_match() {
    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 304 Not Modified\r\nETag: \"v7\"\r\n\r\n",
    );
    let got = server
        .client()
        .get_if_none_match("/v1/snapshot", Some("\"v7\""))
        .unwrap();
    assert_eq!(got, None);
    assert!(server.request().contains("If-None-Match: \"v7\"\r\n"));
}

#[test]
fn modified_returns_response_with_new_etag() {
    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 200 OK\r\nETag: \"v8\"\r\nContent-Length: 2\r\n\r\n{}",
    );
    let resp = server
        .client()
        .get_if_none_match("/v1/snapshot", None)
        .unwrap()
        .unwrap();
    assert_eq!(resp.etag(), Some("\"v8\""));
    assert_eq!(resp.json::<Value>().unwrap(), json!({}));
    assert!(!server.request().contains("If-None-Match"));
}

#[test]
fn error_json_body_becomes_status_message() {
    let body = br#"{"error":"no such account: physics"}"#;
    let mut raw = format!(
        "HTTP/1.1 404 Not Found\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    raw.extend_from_slice(body);
    let server = reply(Transport::Unix, &raw);
    let err = server
        .client()
        .get_json::<Value>("/v1/accounts/physics")
        .unwrap_err();
    match &err {
        ClientError::Status { status, message } => {
            assert_eq!(
                (*status, message.as_str()),
                (404, "no such account: physics")
            );
        }
        other => panic!("expected Status, got {other:?}"),
    }
    assert_eq!(err.status(), Some(404));
    assert_eq!(
        err.to_string(),
        "budgetd returned 404: no such account: physics"
    );
    assert!(!err.is_unavailable());
}

#[test]
fn error_without_json_uses_text_or_reason() {
    let server = reply(
        Transport::Tcp,
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 9\r\n\r\ndb locked",
    );
    let err = server.client().delete("/v1/accounts/x").unwrap_err();
    assert!(matches!(&err, ClientError::Status { status: 500, message } if message == "db locked"));
    assert!(
        server
            .request()
            .starts_with("DELETE /v1/accounts/x HTTP/1.1\r\n")
    );

    let server = reply(
        Transport::Tcp,
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n",
    );
    let err = server
        .client()
        .get_if_none_match("/v1/snapshot", None)
        .unwrap_err();
    assert!(
        matches!(&err, ClientError::Status { status: 503, message } if message == "Service Unavailable")
    );
    assert!(err.is_unavailable(), "503 means retry later");
}

#[test]
fn request_returns_non_2xx_without_error() {
    let server = reply(
        Transport::Unix,
        b"HTTP/1.1 409 Conflict\r\nContent-Length: 0\r\n\r\n",
    );
    let resp = server.client().request("PUT", "/v1/x", &[], None).unwrap();
    assert_eq!(
        (resp.status, resp.reason.as_str(), resp.is_success()),
        (409, "Conflict", false)
    );
    assert!(
        server.request().contains("Content-Length: 0\r\n"),
        "PUT without body"
    );
}
