//! The service's error type and its HTTP mapping.
//!
//! Every handler returns `Result<_, AppError>`; the variant decides the status
//! code and the message is sent as `{"error": "..."}` (plus optional
//! `details`, e.g. the bad lines of an import), so scripts and `budgetctl`
//! can print it verbatim. Internal errors are logged in full but answered
//! with a generic message: SQL text is no business of the caller.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use budget_protocol::service::{ErrorBody, ErrorDetails};
use policy_core::TreeError;

/// An error a request can end in.
#[derive(Debug, Clone, thiserror::Error)]
pub enum AppError {
    /// Malformed request (syntax, bad query parameter): 400.
    #[error("{0}")]
    BadRequest(String),
    /// Well-formed but unacceptable content (unknown field, failed validation): 422.
    #[error("{0}")]
    Invalid(String),
    /// Unacceptable content with per-item details (e.g. import lines): 422.
    #[error("{message}")]
    InvalidWithDetails {
        message: String,
        details: ErrorDetails,
    },
    /// The change conflicts with the current state (duplicate, still in use): 409.
    #[error("{0}")]
    Conflict(String),
    #[error("{0}")]
    NotFound(String),
    /// No or unknown credentials: 401.
    #[error("{0}")]
    Unauthorized(String),
    /// Known caller, not allowed: 403.
    #[error("{0}")]
    Forbidden(String),
    #[error("request body is larger than the limit of {0} bytes")]
    TooLarge(usize),
    /// Too many requests from this caller: 429.
    #[error("{0}")]
    TooMany(String),
    /// The request took too long (slow body, overloaded service): 408.
    #[error("{0}")]
    Timeout(String),
    /// A dependency (NSS) failed for now: 503.
    #[error("{0}")]
    Unavailable(String),
    /// Slurm answered and refused the change ("Slurm refused this request:
    /// <Slurm's own message>"): 409, the request conflicts with what Slurm
    /// holds now (budgetd validated it before asking).
    #[error("{0}")]
    SlurmRefused(String),
    /// Slurm could not be reached, or answered with something unreadable
    /// ("could not reach Slurm: ..."): 502.
    #[error("{0}")]
    BadGateway(String),
    /// Anything else; the message is logged, not sent.
    #[error("internal error: {0}")]
    Internal(String),
}

impl AppError {
    /// The HTTP status of this error.
    pub fn status(&self) -> StatusCode {
        match self {
            AppError::BadRequest(_) => StatusCode::BAD_REQUEST,
            AppError::Invalid(_) | AppError::InvalidWithDetails { .. } => {
                StatusCode::UNPROCESSABLE_ENTITY
            }
            AppError::Conflict(_) => StatusCode::CONFLICT,
            AppError::NotFound(_) => StatusCode::NOT_FOUND,
            AppError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            AppError::Forbidden(_) => StatusCode::FORBIDDEN,
            AppError::TooLarge(_) => StatusCode::PAYLOAD_TOO_LARGE,
            AppError::TooMany(_) => StatusCode::TOO_MANY_REQUESTS,
            AppError::Timeout(_) => StatusCode::REQUEST_TIMEOUT,
            AppError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            AppError::SlurmRefused(_) => StatusCode::CONFLICT,
            AppError::BadGateway(_) => StatusCode::BAD_GATEWAY,
            AppError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<TreeError> for AppError {
    fn from(e: TreeError) -> Self {
        match e {
            TreeError::Duplicate(_) | TreeError::DuplicateMember { .. } => {
                AppError::Conflict(e.to_string())
            }
            _ => AppError::Invalid(e.to_string()),
        }
    }
}

impl From<rusqlite::Error> for AppError {
    fn from(e: rusqlite::Error) -> Self {
        AppError::Internal(format!("database: {e}"))
    }
}

impl From<serde_json::Error> for AppError {
    fn from(e: serde_json::Error) -> Self {
        AppError::Internal(format!("json: {e}"))
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status();
        let body = match self {
            AppError::Internal(msg) => {
                tracing::error!(error = %msg, "internal error");
                ErrorBody {
                    details: None,
                    error: "internal error (see the budgetd log)".into(),
                }
            }
            AppError::InvalidWithDetails { message, details } => ErrorBody {
                details: Some(details),
                error: message,
            },
            other => ErrorBody {
                details: None,
                error: other.to_string(),
            },
        };
        // Through a JSON value, whose keys print sorted: the nested `details`
        // keep the key order this answer always had (scripts compare it).
        let value = serde_json::to_value(&body).unwrap_or_default();
        (status, axum::Json(value)).into_response()
    }
}

/// Result alias of the service.
pub type AppResult<T> = Result<T, AppError>;
