//! The public [`Client`]: configuration (endpoint, token, timeout, body
//! limit), one request per connection, mapping of wire/IO failures and non-2xx
//! statuses to [`ClientError`], and the JSON convenience methods both callers
//! use.

use std::io::{BufReader, Write};
use std::time::{Duration, Instant};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::conn::{Conn, is_timeout};
use crate::endpoint::Endpoint;
use crate::error::ClientError;
use crate::http::{WireError, encode_request, read_response};

/// Default overall timeout per request. Generous for an interactive CLI; the
/// plugin thread should set its own, shorter one.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
/// Default response body limit (16 MiB): well above a fair-share snapshot of
/// thousands of accounts, well below anything that hurts `slurmctld`.
pub const DEFAULT_MAX_BODY: usize = 16 * 1024 * 1024;

/// Where `budgetd` listens by default on a controller: the socket `budgetctl` and the
/// `slurmctld` plugins use unless told otherwise.
pub const DEFAULT_SOCKET: &str = "/run/slurm-budget/budgetd.sock";

/// Longest excerpt of a non-JSON error body quoted in [`ClientError::Status`].
const MAX_ERROR_EXCERPT: usize = 200;

/// A blocking `budgetd` client. Cheap to clone; holds no connection (each
/// request connects afresh), so one value can be shared across threads.
#[derive(Debug, Clone)]
pub struct Client {
    endpoint: Endpoint,
    token: Option<String>,
    timeout: Duration,
    max_body: usize,
    /// Replaces the connect error's hint (which setting selects the endpoint).
    connect_hint: Option<&'static str>,
}

/// A received response (any status).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// HTTP status code.
    pub status: u16,
    /// Reason phrase of the status line (may be empty).
    pub reason: String,
    /// Header fields in received order; names as sent by the server.
    pub headers: Vec<(String, String)>,
    /// The decoded body (chunked framing removed).
    pub body: Vec<u8>,
}

impl Response {
    /// First value of header `name`, compared case-insensitively.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The `ETag` header, as sent (quotes included), for
    /// [`Client::get_if_none_match`].
    pub fn etag(&self) -> Option<&str> {
        self.header("etag")
    }

    /// True for 2xx.
    pub fn is_success(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// Decodes the body as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> Result<T, ClientError> {
        serde_json::from_slice(&self.body).map_err(|source| ClientError::Json {
            context: "in response body",
            source,
        })
    }

    /// Turns a non-2xx response into [`ClientError::Status`].
    pub fn error_for_status(self) -> Result<Response, ClientError> {
        if self.is_success() {
            Ok(self)
        } else {
            Err(ClientError::Status {
                status: self.status,
                message: error_message(&self.body, &self.reason),
            })
        }
    }
}

/// The human-readable message of an error response: `{"error": "..."}` when
/// the body is such JSON (budgetd's error shape), else a short excerpt of the
/// body, else the reason phrase.
fn error_message(body: &[u8], reason: &str) -> String {
    #[derive(serde::Deserialize)]
    struct ErrorBody {
        error: String,
    }
    if let Ok(e) = serde_json::from_slice::<ErrorBody>(body) {
        return e.error;
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return if reason.is_empty() {
            "(no message)".to_string()
        } else {
            reason.to_string()
        };
    }
    let mut excerpt: String = text.chars().take(MAX_ERROR_EXCERPT).collect();
    if excerpt.len() < text.len() {
        excerpt.push('…');
    }
    excerpt
}

impl Client {
    /// A client for `endpoint` with no token, [`DEFAULT_TIMEOUT`] and
    /// [`DEFAULT_MAX_BODY`].
    pub fn new(endpoint: Endpoint) -> Self {
        Client {
            endpoint,
            token: None,
            timeout: DEFAULT_TIMEOUT,
            max_body: DEFAULT_MAX_BODY,
            connect_hint: None,
        }
    }

    /// [`Endpoint::parse`] then [`Client::new`].
    pub fn from_url(url_or_path: &str) -> Result<Self, ClientError> {
        Ok(Client::new(Endpoint::parse(url_or_path)?))
    }

    /// Sends `Authorization: Bearer <token>` on every request (TCP callers;
    /// Unix-socket callers are identified by peer credentials instead).
    pub fn with_token(mut self, token: impl Into<String>) -> Self {
        self.token = Some(token.into());
        self
    }

    /// Overall deadline per request, covering connect, sending and receiving
    /// the whole response. A zero duration is raised to 1 ms.
    pub fn with_timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout.max(Duration::from_millis(1));
        self
    }

    /// Largest accepted response body in bytes.
    pub fn with_max_body(mut self, max_body: usize) -> Self {
        self.max_body = max_body;
        self
    }

    /// What a "cannot reach budgetd" error tells the reader to check, for callers
    /// whose endpoint is not set by `budgetctl`'s `--socket`/`--url` (e.g. the
    /// plugins' `PriorityParameters`).
    pub fn with_connect_hint(mut self, hint: &'static str) -> Self {
        self.connect_hint = Some(hint);
        self
    }

    /// The endpoint requests go to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// The overall per-request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Sends one request and returns the response whatever its status (only
    /// transport and protocol failures are errors here). `path` includes any
    /// query string. `Host`, `Content-Length`, `Connection` and
    /// `Transfer-Encoding` are set by the client and refused in `headers`.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Result<Response, ClientError> {
        let deadline = Instant::now() + self.timeout;
        let caller_auth = headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case("authorization"));
        let auth = self
            .token
            .as_ref()
            .filter(|_| !caller_auth)
            .map(|t| format!("Bearer {t}"));
        let mut all: Vec<(&str, &str)> = Vec::with_capacity(headers.len() + 1);
        if let Some(auth) = &auth {
            all.push(("Authorization", auth));
        }
        all.extend_from_slice(headers);
        let wire = encode_request(method, path, &self.endpoint.host_header(), &all, body)
            .map_err(ClientError::InvalidRequest)?;

        let mut conn = Conn::connect(&self.endpoint, self.timeout, deadline).map_err(|mut e| {
            if let (ClientError::Connect { hint, .. }, Some(h)) = (&mut e, self.connect_hint) {
                *hint = h;
            }
            e
        })?;
        // A server may answer (e.g. 413, 401) and close before reading all of
        // the request; then the write fails but the response is still there
        // to read, and is more useful than "broken pipe". SIGPIPE cannot kill
        // us on a Unix socket inside slurmctld: it blocks SIGPIPE in main()
        // before starting threads, and std ignores it in Rust binaries.
        let write_result = conn.write_all(&wire).and_then(|()| conn.flush());
        let mut reader = BufReader::with_capacity(8 * 1024, conn);
        let read_result = read_response(
            &mut reader,
            method.eq_ignore_ascii_case("HEAD"),
            self.max_body,
        );
        let raw = match (write_result, read_result) {
            (_, Ok(raw)) => raw,
            (Err(w), Err(_)) => return Err(self.wire_error(WireError::Io(w))),
            (Ok(()), Err(r)) => return Err(self.wire_error(r)),
        };
        Ok(Response {
            status: raw.status,
            reason: raw.reason,
            headers: raw.headers,
            body: raw.body,
        })
    }

    /// `request` with a JSON body (if any), then [`Response::error_for_status`].
    fn call<B: Serialize + ?Sized>(
        &self,
        method: &str,
        path: &str,
        body: Option<&B>,
    ) -> Result<Response, ClientError> {
        let encoded = match body {
            Some(b) => Some(serde_json::to_vec(b).map_err(|source| ClientError::Json {
                context: "in request body",
                source,
            })?),
            None => None,
        };
        self.request(method, path, &[], encoded.as_deref())?
            .error_for_status()
    }

    /// `GET path`, non-2xx as [`ClientError::Status`], body decoded as JSON.
    pub fn get_json<T: DeserializeOwned>(&self, path: &str) -> Result<T, ClientError> {
        self.call::<()>("GET", path, None)?.json()
    }

    /// `POST path` with `body` as JSON, non-2xx as [`ClientError::Status`],
    /// response decoded as JSON. Use `T = serde::de::IgnoredAny` to ignore it.
    pub fn post_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.call("POST", path, Some(body))?.json()
    }

    /// `PUT path` with `body` as JSON; like [`Client::post_json`].
    pub fn put_json<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
    ) -> Result<T, ClientError> {
        self.call("PUT", path, Some(body))?.json()
    }

    /// `DELETE path`, non-2xx as [`ClientError::Status`]; the response is
    /// returned undecoded (often `204 No Content`).
    pub fn delete(&self, path: &str) -> Result<Response, ClientError> {
        self.call::<()>("DELETE", path, None)
    }

    /// Conditional `GET`: sends `If-None-Match: <etag>` when `etag` is given.
    /// `Ok(None)` on `304 Not Modified` (the caller keeps what it has),
    /// `Ok(Some(response))` on 2xx (take the new `ETag` from
    /// [`Response::etag`]), [`ClientError::Status`] otherwise.
    pub fn get_if_none_match(
        &self,
        path: &str,
        etag: Option<&str>,
    ) -> Result<Option<Response>, ClientError> {
        self.get_if_none_match_with(path, etag, &[])
    }

    /// [`Client::get_if_none_match`] with `extra` headers.
    pub fn get_if_none_match_with(
        &self,
        path: &str,
        etag: Option<&str>,
        extra: &[(&str, &str)],
    ) -> Result<Option<Response>, ClientError> {
        let mut headers: Vec<(&str, &str)> = extra.to_vec();
        if let Some(tag) = etag {
            headers.push(("If-None-Match", tag));
        }
        let resp = self.request("GET", path, &headers, None)?;
        if resp.status == 304 {
            return Ok(None);
        }
        resp.error_for_status().map(Some)
    }

    fn wire_error(&self, e: WireError) -> ClientError {
        match e {
            WireError::Io(e) if is_timeout(&e) => ClientError::Timeout {
                endpoint: self.endpoint.to_string(),
                timeout: self.timeout,
            },
            WireError::Io(source) => ClientError::Io {
                endpoint: self.endpoint.to_string(),
                source,
            },
            WireError::Protocol(m) => ClientError::Protocol(m),
            WireError::TooLarge => ClientError::BodyTooLarge {
                limit: self.max_body,
            },
        }
    }
}
