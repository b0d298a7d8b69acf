//! The harness's error kinds: a command that could not run or failed, output that
//! did not parse, budgetd's API, its database, and a missing build output.

use std::fmt;

/// Result with the harness's [`Error`].
pub type Result<T> = std::result::Result<T, Error>;

/// What went wrong outside the system under test's checks.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A command could not be started.
    #[error("cannot run {command}: {source}")]
    Spawn {
        command: String,
        #[source]
        source: std::io::Error,
    },
    /// A command exited with a failure status.
    #[error("{command} failed ({status}): {stderr}")]
    Failed {
        command: String,
        status: String,
        stderr: String,
    },
    /// Output of a command, a file or a log that does not have the expected shape.
    #[error("unexpected output of {what}: {detail}")]
    Parse { what: String, detail: String },
    /// A budgetd request failed.
    #[error("budgetd {request}: {source}")]
    Api {
        request: String,
        #[source]
        source: budget_client::ClientError,
    },
    /// budgetd's SQLite file could not be read.
    #[error("reading budgetd's ledger {path}: {source}")]
    Ledger {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    /// A file the harness needs (build output, pid file, log) is missing or unreadable.
    #[error("{path}: {detail}")]
    File { path: String, detail: String },
    /// A setting read from the environment is invalid.
    #[error("{name}={value:?}: {detail}")]
    Setting {
        name: String,
        value: String,
        detail: String,
    },
}

impl Error {
    /// A [`Error::Parse`] for `what`.
    pub fn parse(what: impl fmt::Display, detail: impl fmt::Display) -> Self {
        Error::Parse {
            what: what.to_string(),
            detail: detail.to_string(),
        }
    }

    /// A [`Error::File`] for `path`.
    pub fn file(path: impl fmt::Debug, detail: impl fmt::Display) -> Self {
        Error::File {
            path: format!("{path:?}"),
            detail: detail.to_string(),
        }
    }
}
