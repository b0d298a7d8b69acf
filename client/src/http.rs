//! The HTTP/1.1 wire format, and nothing else: serialising one request and
//! parsing one response from any `BufRead`. No sockets here, so every parsing
//! rule is unit-tested on byte strings.
//!
//! Everything received is untrusted: lines and header sections are bounded,
//! numbers are parsed with overflow checks, bodies are bounded by `max_body`
//! before any allocation of that size, and every anomaly is a
//! [`WireError::Protocol`], never a panic.

use std::io::{self, BufRead, Read};

/// Longest accepted status, header, chunk-size or trailer line.
const MAX_LINE: usize = 8 * 1024;
/// Most bytes accepted for the whole header section (or trailer section).
const MAX_HEAD: usize = 64 * 1024;
/// Most header fields accepted.
const MAX_HEADERS: usize = 128;
/// Most interim (1xx) responses skipped before the final one.
const MAX_INTERIM: usize = 8;

/// Failure while parsing a response; the client adds endpoint context.
#[derive(Debug)]
pub(crate) enum WireError {
    Io(io::Error),
    Protocol(String),
    TooLarge,
}

impl From<io::Error> for WireError {
    fn from(e: io::Error) -> Self {
        WireError::Io(e)
    }
}

fn proto<T>(msg: impl Into<String>) -> Result<T, WireError> {
    Err(WireError::Protocol(msg.into()))
}

/// A parsed response.
#[derive(Debug)]
pub(crate) struct RawResponse {
    pub status: u16,
    pub reason: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

/// RFC 9110 `tchar`: what may appear in a method or a header name.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn is_token(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(is_tchar)
}

/// Serialises a request head and body. Returns a description of the first
/// invalid part (a CR/LF in a value would let a caller inject headers or a
/// second request, so it is refused, not escaped).
pub(crate) fn encode_request(
    method: &str,
    path: &str,
    host: &str,
    headers: &[(&str, &str)],
    body: Option<&[u8]>,
) -> Result<Vec<u8>, String> {
    if !is_token(method) {
        return Err(format!("invalid method {method:?}"));
    }
    if !path.starts_with('/') {
        return Err(format!("path must start with '/': {path:?}"));
    }
    if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
        return Err(format!(
            "path contains spaces or control characters: {path:?}"
        ));
    }
    let mut out = Vec::with_capacity(256 + body.map_or(0, <[u8]>::len));
    out.extend_from_slice(format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\n").as_bytes());
    let has = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
    for (name, value) in headers {
        if !is_token(name) {
            return Err(format!("invalid header name {name:?}"));
        }
        // Framing headers are ours: a caller-supplied one could desync the
        // connection or contradict the body we send.
        for reserved in ["host", "content-length", "transfer-encoding", "connection"] {
            if name.eq_ignore_ascii_case(reserved) {
                return Err(format!("header {name:?} is set by the client"));
            }
        }
        if value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
            return Err(format!("header {name:?} has a CR, LF or NUL in its value"));
        }
        out.extend_from_slice(format!("{name}: {value}\r\n").as_bytes());
    }
    out.extend_from_slice(b"Connection: close\r\n");
    if !has("user-agent") {
        out.extend_from_slice(
            concat!(
                "User-Agent: budget-client/",
                env!("CARGO_PKG_VERSION"),
                "\r\n"
            )
            .as_bytes(),
        );
    }
    if !has("accept") {
        out.extend_from_slice(b"Accept: application/json\r\n");
    }
    match body {
        Some(b) => {
            if !has("content-type") {
                out.extend_from_slice(b"Content-Type: application/json\r\n");
            }
            out.extend_from_slice(format!("Content-Length: {}\r\n", b.len()).as_bytes());
        }
        // Servers may answer 411 Length Required to a body-carrying method
        // without a length.
        None if matches!(method, "POST" | "PUT" | "PATCH") => {
            out.extend_from_slice(b"Content-Length: 0\r\n");
        }
        None => {}
    }
    out.extend_from_slice(b"\r\n");
    if let Some(b) = body {
        out.extend_from_slice(b);
    }
    Ok(out)
}

/// Reads one line (up to and excluding `\n`, with a trailing `\r` removed).
/// `Ok(None)` at a clean EOF before any byte.
fn read_line<R: BufRead>(r: &mut R, budget: &mut usize) -> Result<Option<Vec<u8>>, WireError> {
    let mut line = Vec::new();
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            if line.is_empty() {
                return Ok(None);
            }
            return proto("connection closed in the middle of a line");
        }
        let (take, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        if line.len() + take > MAX_LINE || take > *budget {
            return proto("line or header section too long");
        }
        line.extend_from_slice(&buf[..take]);
        r.consume(take);
        *budget -= take;
        if done {
            line.pop();
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            return Ok(Some(line));
        }
    }
}

fn parse_status_line(line: &[u8]) -> Result<(u16, String), WireError> {
    let Ok(line) = std::str::from_utf8(line) else {
        return proto("status line is not UTF-8");
    };
    let shown = || line.chars().take(80).collect::<String>();
    let Some(rest) = line.strip_prefix("HTTP/1.") else {
        return proto(format!("not an HTTP/1.x status line: {:?}", shown()));
    };
    let rb = rest.as_bytes();
    // "<minor-digit> <3 digits>[ <reason>]"
    if rb.len() < 5 || !rb[0].is_ascii_digit() || rb[1] != b' ' {
        return proto(format!("malformed status line: {:?}", shown()));
    }
    // Byte-wise: slicing the str at fixed offsets could split a multi-byte
    // character and panic.
    let code = &rb[2..5];
    if !code.iter().all(u8::is_ascii_digit) || rb.get(5).is_some_and(|&b| b != b' ') {
        return proto(format!("malformed status code: {:?}", shown()));
    }
    let status = code
        .iter()
        .fold(0u16, |acc, &d| acc * 10 + u16::from(d - b'0'));
    if !(100..=599).contains(&status) {
        return proto(format!("status code out of range: {:?}", shown()));
    }
    let reason = rest.get(6..).unwrap_or("").trim().to_string();
    Ok((status, reason))
}

/// Reads header (or trailer) fields up to the empty line.
fn read_fields<R: BufRead>(
    r: &mut R,
    budget: &mut usize,
) -> Result<Vec<(String, String)>, WireError> {
    let mut fields = Vec::new();
    loop {
        let Some(line) = read_line(r, budget)? else {
            return proto("connection closed inside the header section");
        };
        if line.is_empty() {
            return Ok(fields);
        }
        if line[0] == b' ' || line[0] == b'\t' {
            return proto("obsolete header line folding is not accepted");
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return proto("header line without ':'");
        };
        let name = match std::str::from_utf8(&line[..colon]) {
            Ok(n) if is_token(n) => n.to_string(),
            _ => return proto("invalid header name"),
        };
        let value = String::from_utf8_lossy(&line[colon + 1..])
            .trim_matches([' ', '\t'])
            .to_string();
        if fields.len() >= MAX_HEADERS {
            return proto("too many header fields");
        }
        fields.push((name, value));
    }
}

/// How the body is delimited.
enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilEof,
}

fn framing(
    status: u16,
    head_request: bool,
    headers: &[(String, String)],
) -> Result<Framing, WireError> {
    if head_request || status == 204 || status == 304 || (100..200).contains(&status) {
        return Ok(Framing::None);
    }
    let mut codings = Vec::new();
    let mut length: Option<u64> = None;
    for (name, value) in headers {
        if name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(
                value
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty()),
            );
        } else if name.eq_ignore_ascii_case("content-length") {
            // A list of identical values is allowed (RFC 9110 8.6); anything
            // else is a framing ambiguity we refuse.
            for v in value.split(',') {
                let v = v.trim();
                if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                    return proto(format!("invalid Content-Length {value:?}"));
                }
                let Ok(n) = v.parse::<u64>() else {
                    return proto(format!("Content-Length out of range {value:?}"));
                };
                if length.is_some_and(|l| l != n) {
                    return proto("conflicting Content-Length values");
                }
                length = Some(n);
            }
        }
    }
    // Transfer-Encoding overrides Content-Length (RFC 9112 6.3). We send no
    // TE/Accept-Encoding, so "chunked" alone is the only coding we accept.
    if !codings.is_empty() {
        return if codings == ["chunked"] {
            Ok(Framing::Chunked)
        } else {
            proto(format!(
                "unsupported Transfer-Encoding {}",
                codings.join(", ")
            ))
        };
    }
    Ok(match length {
        Some(n) => Framing::Length(n),
        None => Framing::UntilEof,
    })
}

/// Appends exactly `n` bytes from `r` to `body`.
fn read_exact_into<R: Read>(r: &mut R, n: u64, body: &mut Vec<u8>) -> Result<(), WireError> {
    let got = r.take(n).read_to_end(body)?;
    if (got as u64) < n {
        return proto(format!("connection closed after {got} of {n} body bytes"));
    }
    Ok(())
}

fn read_chunked<R: BufRead>(r: &mut R, max_body: usize) -> Result<Vec<u8>, WireError> {
    let mut body = Vec::new();
    loop {
        let mut budget = MAX_LINE;
        let Some(line) = read_line(r, &mut budget)? else {
            return proto("connection closed before the last chunk");
        };
        let size_part = line.split(|&b| b == b';').next().unwrap_or(&[]);
        let size_str = String::from_utf8_lossy(size_part);
        let size_str = size_str.trim_matches([' ', '\t']);
        if size_str.is_empty() || size_str.len() > 16 {
            return proto(format!(
                "invalid chunk size line {:?}",
                String::from_utf8_lossy(&line)
            ));
        }
        let Ok(size) = u64::from_str_radix(size_str, 16) else {
            return proto(format!("invalid chunk size {size_str:?}"));
        };
        if size == 0 {
            let mut trailer_budget = MAX_HEAD;
            read_fields(r, &mut trailer_budget)?;
            return Ok(body);
        }
        if (body.len() as u64).saturating_add(size) > max_body as u64 {
            return Err(WireError::TooLarge);
        }
        read_exact_into(r, size, &mut body)?;
        let mut budget = 2;
        match read_line(r, &mut budget) {
            Ok(Some(l)) if l.is_empty() => {}
            Ok(None) => return proto("connection closed after chunk data"),
            _ => return proto("chunk data not followed by CRLF"),
        }
    }
}

/// Parses one response. `head_request` suppresses the body (a HEAD response
/// advertises a length it does not send).
pub(crate) fn read_response<R: BufRead>(
    r: &mut R,
    head_request: bool,
    max_body: usize,
) -> Result<RawResponse, WireError> {
    let mut interim = 0;
    let (status, reason, headers) = loop {
        let mut budget = MAX_HEAD;
        let Some(line) = read_line(r, &mut budget)? else {
            return proto("connection closed before any response");
        };
        let (status, reason) = parse_status_line(&line)?;
        let headers = read_fields(r, &mut budget)?;
        if status == 101 {
            return proto("unexpected 101 Switching Protocols");
        }
        if (100..200).contains(&status) {
            // 100 Continue, 103 Early Hints: skip to the final response.
            interim += 1;
            if interim > MAX_INTERIM {
                return proto("too many interim (1xx) responses");
            }
            continue;
        }
        break (status, reason, headers);
    };
    let body = match framing(status, head_request, &headers)? {
        Framing::None => Vec::new(),
        Framing::Length(n) => {
            if n > max_body as u64 {
                return Err(WireError::TooLarge);
            }
            // Preallocate modestly: the declared length is the peer's claim.
            let mut body = Vec::with_capacity(n.min(64 * 1024) as usize);
            read_exact_into(r, n, &mut body)?;
            body
        }
        Framing::Chunked => read_chunked(r, max_body)?,
        Framing::UntilEof => {
            let mut body = Vec::new();
            r.take((max_body as u64).saturating_add(1))
                .read_to_end(&mut body)?;
            if body.len() > max_body {
                return Err(WireError::TooLarge);
            }
            body
        }
    };
    Ok(RawResponse {
        status,
        reason,
        headers,
        body,
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn parse(raw: &[u8]) -> Result<RawResponse, WireError> {
        read_response(&mut io::BufReader::new(raw), false, 1024)
    }

    fn protocol_err(raw: &[u8]) -> String {
        match parse(raw) {
            Err(WireError::Protocol(m)) => m,
            other => panic!("expected protocol error for {raw:?}, got {other:?}"),
        }
    }

    #[test]
    fn encodes_request_with_framing_headers() {
        let req = encode_request(
            "POST",
            "/v1/x?y=1",
            "h:1",
            &[("Authorization", "Bearer t")],
            Some(b"{}"),
        )
        .unwrap();
        let s = String::from_utf8(req).unwrap();
        assert!(
            s.starts_with("POST /v1/x?y=1 HTTP/1.1\r\nHost: h:1\r\n"),
            "{s}"
        );
        for h in [
            "Authorization: Bearer t\r\n",
            "Connection: close\r\n",
            "Content-Type: application/json\r\n",
            "Content-Length: 2\r\n",
        ] {
            assert!(s.contains(h), "missing {h:?} in {s}");
        }
        assert!(s.ends_with("\r\n\r\n{}"));
        let put = String::from_utf8(encode_request("PUT", "/", "h", &[], None).unwrap()).unwrap();
        assert!(put.contains("Content-Length: 0\r\n"));
        let get = String::from_utf8(encode_request("GET", "/", "h", &[], None).unwrap()).unwrap();
        assert!(!get.contains("Content-Length") && !get.contains("Content-Type"));
    }

    #[test]
    fn refuses_injection_and_reserved_headers() {
        assert!(encode_request("GET", "/a b", "h", &[], None).is_err());
        assert!(encode_request("GET", "v1", "h", &[], None).is_err());
        assert!(encode_request("GE T", "/", "h", &[], None).is_err());
        assert!(encode_request("GET", "/", "h", &[("X", "a\r\nEvil: 1")], None).is_err());
        assert!(encode_request("GET", "/", "h", &[("Bad Name", "v")], None).is_err());
        assert!(encode_request("GET", "/", "h", &[("content-length", "5")], None).is_err());
    }

    #[test]
    fn parses_content_length_and_lf_only_lines() {
        let r = parse(b"HTTP/1.1 200 OK\nContent-Length: 5\nX-A:  b \n\nhelloEXTRA").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), &r.body[..]),
            (200, "OK", &b"hello"[..])
        );
        assert_eq!(r.headers[1], ("X-A".to_string(), "b".to_string()));
    }

    #[test]
    fn parses_chunked_with_extensions_and_trailers() {
        let raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n\
            4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nX-T: 1\r\n\r\n";
        assert_eq!(parse(raw).unwrap().body, b"Wikipedia in\r\n\r\nchunks.");
    }

    #[test]
    fn skips_interim_responses_and_reads_to_eof() {
        let r = parse(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200\r\n\r\nrest").unwrap();
        assert_eq!(
            (r.status, r.reason.as_str(), &r.body[..]),
            (200, "", &b"rest"[..])
        );
    }

    #[test]
    fn no_body_for_304_204_and_head() {
        let r = parse(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 10\r\n\r\n").unwrap();
        assert!(r.body.is_empty());
        let raw = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n";
        let r = read_response(&mut io::BufReader::new(&raw[..]), true, 1024).unwrap();
        assert!(r.body.is_empty());
    }

    #[test]
    fn body_limits() {
        let big = b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n";
        assert!(matches!(parse(big), Err(WireError::TooLarge)));
        let mut eof = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        eof.extend(std::iter::repeat_n(b'x', 1025));
        assert!(matches!(parse(&eof), Err(WireError::TooLarge)));
        let mut exact = b"HTTP/1.1 200 OK\r\n\r\n".to_vec();
        exact.extend(std::iter::repeat_n(b'x', 1024));
        assert_eq!(parse(&exact).unwrap().body.len(), 1024);
        let chunk = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nFFFFFFFFFFFFFFFF\r\n";
        assert!(matches!(parse(chunk), Err(WireError::TooLarge)));
    }

    /// Mutations of valid responses (xorshift, fixed seed) must never panic,
    /// only parse or fail.
    #[test]
    fn mutated_responses_never_panic() {
        let seeds: &[&[u8]] = &[
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 404 Nope\r\n\r\n{}",
        ];
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for _ in 0..20_000 {
            let mut raw = seeds[(next() % 3) as usize].to_vec();
            for _ in 0..(next() % 4 + 1) {
                let i = (next() as usize) % raw.len();
                match next() % 3 {
                    0 => raw[i] = next() as u8,
                    1 => raw.truncate(i),
                    _ => raw.insert(i, b"\r\n:;0 \xff"[(next() % 7) as usize]),
                }
                if raw.is_empty() {
                    break;
                }
            }
            let _ = read_response(&mut io::BufReader::new(&raw[..]), false, 64);
        }
    }

    #[test]
    fn rejects_malformed_responses() {
        let cases: &[&[u8]] = &[
            b"",
            b"garbage\r\n\r\n",
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/1.1 2000 OK\r\n\r\n",
            b"HTTP/1.1 999 Nope\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nNoColon\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: v\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: b\r\n folded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nabc",
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
            b"HTTP/1.1 200 OK\r\nA: b",
            b"HTTP/1.1 101 Switching Protocols\r\n\r\n",
            "HTTP/1.1 20\u{e9} OK\r\n\r\n".as_bytes(),
            "HTTP/1.1 200\u{e9}\r\n\r\n".as_bytes(),
            "HTTP/1.\u{e9}200 OK\r\n\r\n".as_bytes(),
        ];
        for raw in cases {
            protocol_err(raw);
        }
        let mut long = b"HTTP/1.1 200 OK\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_LINE + 1));
        protocol_err(&long);
    }
}
