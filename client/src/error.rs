//! The one error type of this crate. It owns the wording users see when
//! `budgetctl` cannot do its job, so messages name the endpoint and say what to
//! try next, and it lets the plugin's background thread tell "service down"
//! (keep the last snapshot, retry later) from "service said no" (a bug or a
//! policy decision worth logging).

use std::io;
use std::time::Duration;

/// Everything a request can fail with.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The endpoint string could not be parsed.
    #[error("invalid budgetd endpoint {0}")]
    InvalidEndpoint(String),

    /// The request itself is malformed (bad method, path or header: e.g. a
    /// CR/LF that would let a caller-supplied value inject headers).
    #[error("invalid request: {0}")]
    InvalidRequest(String),

    /// Could not connect: socket missing, connection refused, host unknown.
    #[error("cannot reach budgetd at {endpoint}: {source} — is budgetd running? {hint}")]
    Connect {
        /// Endpoint in its display form (`unix:/run/...` or `http://host:port`).
        endpoint: String,
        /// The OS error.
        #[source]
        source: io::Error,
        /// Which flag/variable selects the endpoint.
        hint: &'static str,
    },

    /// The overall deadline passed (connect, send or receive).
    #[error("budgetd at {endpoint} did not answer within {timeout:?}")]
    Timeout {
        /// Endpoint in its display form.
        endpoint: String,
        /// The configured request timeout.
        timeout: Duration,
    },

    /// Any other I/O failure after connecting (reset, broken pipe).
    #[error("I/O error talking to budgetd at {endpoint}: {source}")]
    Io {
        /// Endpoint in its display form.
        endpoint: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },

    /// The peer did not speak valid HTTP/1.x (or closed mid-response).
    #[error("protocol error from budgetd: {0}")]
    Protocol(String),

    /// The response body exceeds the client's limit.
    #[error("response body exceeds the limit of {limit} bytes")]
    BodyTooLarge {
        /// The configured limit.
        limit: usize,
    },

    /// `budgetd` answered with a non-2xx status. `message` is the `error`
    /// field of a JSON body when present, else a short excerpt of the body,
    /// else the reason phrase.
    #[error("budgetd returned {status}: {message}")]
    Status {
        /// HTTP status code.
        status: u16,
        /// Human-readable reason.
        message: String,
    },

    /// A request body could not be encoded, or a 2xx body decoded, as JSON.
    #[error("invalid JSON {context}: {source}")]
    Json {
        /// What was being (de)serialised.
        context: &'static str,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
}

impl ClientError {
    /// HTTP status for [`ClientError::Status`], else `None`.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Status { status, .. } => Some(*status),
            _ => None,
        }
    }

    /// True when the service could not be reached or did not answer in time:
    /// the caller should keep its last state and retry later, rather than
    /// treating the answer as a decision.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            ClientError::Connect { .. } | ClientError::Timeout { .. } | ClientError::Io { .. }
        ) || matches!(self, ClientError::Status { status, .. } if *status == 502 || *status == 503 || *status == 504)
    }
}
