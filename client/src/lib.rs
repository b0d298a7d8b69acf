//! `budget-client`: a small blocking HTTP/1.1 client for `budgetd`.
//!
//! This crate owns how the `slurmctld` plugins' background thread and the
//! `budgetctl` admin CLI talk to `budgetd`: endpoint parsing ([`Endpoint`]),
//! one request per connection ([`Client::request`]) and JSON helpers, and the
//! error type ([`ClientError`]) whose messages users see.
//!
//! Why blocking `std` rather than hyper/reqwest: the plugins run inside
//! `slurmctld`'s address space, where no tokio runtime (with its worker
//! threads, signal handling and thread-locals) may exist, and where a `.so`
//! should pull in as little code as possible. A request is a few hundred bytes
//! over a local Unix socket once every few seconds, so an async stack buys
//! nothing. What matters there is that a call can never hang: every request has
//! one overall deadline ([`Client::with_timeout`]) that bounds connect, each
//! write and each read, and responses are bounded in size
//! ([`Client::with_max_body`]). Malformed responses become
//! [`ClientError::Protocol`], never a panic.
//!
//! Each request opens a fresh connection and sends `Connection: close`: no
//! pooling state to go stale across a `budgetd` restart, and reading to EOF is
//! always a valid way to end a response.
//!
//! ```no_run
//! use budget_client::{Client, DEFAULT_SOCKET, Endpoint};
//! use std::time::Duration;
//!
//! # fn main() -> Result<(), budget_client::ClientError> {
//! let client = Client::new(Endpoint::parse(DEFAULT_SOCKET)?)
//!     .with_timeout(Duration::from_secs(2));
//! let accounts: serde_json::Value = client.get_json("/v1/accounts")?;
//! # let _ = accounts;
//! # Ok(())
//! # }
//! ```

mod client;
mod conn;
mod endpoint;
mod error;
mod http;
mod token;

pub use client::{Client, DEFAULT_MAX_BODY, DEFAULT_SOCKET, DEFAULT_TIMEOUT, Response};
pub use endpoint::Endpoint;
pub use error::ClientError;
pub use token::{MAX_TOKEN_FILE_BYTES, TokenFileError, read_token_file};
