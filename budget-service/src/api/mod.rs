//! The HTTP API: the router, its extractors and the small handlers.
//!
//! Routes live under `/v1` (plus `/metrics`); the full list is in
//! [`crate::openapi`], which a test checks against this router. Request
//! bodies are JSON objects with unknown fields refused (except the sacct
//! import, which is text); a field the document does not mark nullable is
//! refused as `null` rather than read as absent; every error is
//! `{"error": "..."}` with a 4xx/5xx status.
//!
//! The first middleware, [`authenticate_first`], decides who calls from the
//! request head alone (peer credentials or bearer token) before any body byte
//! is read, then bounds the body by role (admins' usage import large, the
//! controller's syncs medium, everyone else small; a too-large
//! `Content-Length` is refused unread) and the whole request by a deadline.

pub(crate) mod drains;
pub(crate) mod idle;
mod import;
mod metrics;
pub(crate) mod preemptions;
mod reports;
pub(crate) mod runs;
pub(crate) mod shadow;
mod site;
mod snapshot;
mod sync;
pub(crate) mod tree;
pub(crate) mod why;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, MatchedPath, Request, State};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use budget_protocol::preemption;
use budget_protocol::service::{ErrorBody, Health};
use serde::de::DeserializeOwned;

use crate::auth::{Authenticated, Caller, Role};
use crate::error::AppError;
use crate::state::AppState;

/// A JSON body, rejected with a message that names the problem (and the
/// field, for unknown or mistyped fields). The body must be a JSON object
/// (serde would also read a struct from an array of its fields), and a field
/// the OpenAPI document does not mark nullable may not be `null` (serde
/// reads `null` as absent for an optional field, which would make
/// `{"default": null}` a silent no-op).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

/// Whether `v` is JSON `null`, the value itself skipped unread otherwise.
struct NullMark(bool);

impl<'de> serde::Deserialize<'de> for NullMark {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Option::<serde::de::IgnoredAny>::deserialize(d).map(|v| NullMark(v.is_none()))
    }
}

/// The checks of [`ApiJson`] that serde does not make, on a body that
/// parsed: a JSON object, without `null` for the optional fields that
/// `method path`'s request schema does not mark nullable, with each
/// required field that may be `null` present (serde reads an absent
/// `Option` as `None`).
fn check_body_shape(bytes: &[u8], method: &str, path: Option<&str>) -> Result<(), AppError> {
    if bytes.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return Err(AppError::Invalid(
            "invalid request body: expected a JSON object".into(),
        ));
    }
    let Some(path) = path else {
        return Ok(());
    };
    let fields = crate::openapi::body_fields(method, path);
    if fields.not_null.is_empty() && fields.present.is_empty() {
        return Ok(());
    }
    let top: std::collections::BTreeMap<String, NullMark> =
        serde_json::from_slice(bytes).map_err(|e| json_error(&e))?;
    if let Some((name, _)) = top
        .iter()
        .find(|(name, v)| v.0 && fields.not_null.iter().any(|f| f == *name))
    {
        return Err(AppError::Invalid(format!(
            "invalid request body: field `{name}` may not be null (leave it out to keep the current value)"
        )));
    }
    if let Some(name) = fields.present.iter().find(|f| !top.contains_key(*f)) {
        return Err(AppError::Invalid(format!(
            "invalid request body: missing field `{name}` (null is a value here)"
        )));
    }
    Ok(())
}

/// The body limit [`authenticate_first`] applied to this request.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

fn limit_of(req: &Request) -> usize {
    req.extensions().get::<BodyLimit>().map_or(0, |l| l.0)
}

fn body_error(e: BytesRejection, limit: usize) -> AppError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        AppError::TooLarge(limit)
    } else {
        AppError::BadRequest(e.body_text())
    }
}

/// Maps a serde_json error to 400 (not JSON) or 422 (JSON of the wrong shape).
pub fn json_error(e: &serde_json::Error) -> AppError {
    use serde_json::error::Category;
    match e.classify() {
        Category::Syntax | Category::Eof | Category::Io => {
            AppError::BadRequest(format!("malformed JSON: {e}"))
        }
        Category::Data => AppError::Invalid(format!("invalid request body: {e}")),
    }
}

impl<T: DeserializeOwned> FromRequest<AppState> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = limit_of(&req);
        let method = req.method().to_string();
        let path = req
            .extensions()
            .get::<MatchedPath>()
            .map(|p| p.as_str().to_string());
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| body_error(e, limit))?;
        // Fast path; on failure parse again with path tracking for the message
        // (serde_path_to_error costs ~2x on large bodies such as 10k-run syncs).
        if let Ok(v) = serde_json::from_slice::<T>(&bytes) {
            check_body_shape(&bytes, &method, path.as_deref())?;
            return Ok(ApiJson(v));
        }
        let mut de = serde_json::Deserializer::from_slice(&bytes);
        let value: T = serde_path_to_error::deserialize(&mut de).map_err(|e| {
            let path = e.path().to_string();
            let inner = e.into_inner();
            match json_error(&inner) {
                // Name the field for type errors ("lots" for a number).
                AppError::Invalid(_) if path != "." && !path.is_empty() => {
                    AppError::Invalid(format!("invalid request body: field `{path}`: {inner}"))
                }
                other => other,
            }
        })?;
        de.end().map_err(|e| json_error(&e))?;
        check_body_shape(&bytes, &method, path.as_deref())?;
        Ok(ApiJson(value))
    }
}

/// A text body (UTF-8) for `usage import`, under its own, larger limit.
/// Kept as the buffer that was read (checked, not copied: an import may be
/// hundreds of MiB).
#[derive(Debug)]
pub struct ApiText(pub Bytes);

impl ApiText {
    /// The text (checked to be UTF-8 when extracted).
    pub fn text(&self) -> &str {
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

impl FromRequest<AppState> for ApiText {
    type Rejection = AppError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let limit = limit_of(&req);
        let bytes = Bytes::from_request(req, state)
            .await
            .map_err(|e| body_error(e, limit))?;
        std::str::from_utf8(&bytes)
            .map_err(|e| AppError::BadRequest(format!("body is not UTF-8 text: {e}")))?;
        Ok(ApiText(bytes))
    }
}

/// The body limit of `caller` on `path`.
fn body_limit(caller: &Caller, path: &str, cfg: &crate::config::Config) -> usize {
    if caller.is_admin() && path == "/v1/usage/import" {
        cfg.import_limit_bytes
    } else if caller.is_admin() || caller.is_controller() {
        cfg.body_limit_bytes
    } else {
        cfg.user_body_limit_bytes
    }
}

/// Authenticates from the request head, then bounds the body (by role) and
/// the request's time. Nothing of the body is read here: a body over the
/// limit is refused from its `Content-Length`, or cut off while read.
async fn authenticate_first(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let (mut parts, body) = req.into_parts();
    let auth = match crate::auth::authenticate(&parts, &state).await {
        // Agent tokens sit on every GPU node, where users run jobs: they
        // post their nodes' reports and read nothing (design §11), refused
        // here once rather than in each handler.
        Ok(c)
            if c.role == Role::Agent && parts.uri.path() != budget_protocol::AGENT_REPORT_PATH =>
        {
            Err(c.refuse(
                &state,
                &format!(
                    "{} {} (agent tokens only post reports)",
                    parts.method,
                    parts.uri.path()
                ),
            ))
        }
        a => a,
    };
    let (limit, secs) = match &auth {
        Ok(c) => {
            let secs = state.config.request_timeout_secs;
            (
                body_limit(c, parts.uri.path(), &state.config),
                if c.is_admin() {
                    secs.saturating_mul(10)
                } else {
                    secs
                },
            )
        }
        // Refused callers get no body at all; the handler answers 401.
        Err(_) => (0, state.config.request_timeout_secs),
    };
    if auth.is_ok()
        && let Some(len) = parts
            .headers
            .get(axum::http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
        && len > limit as u64
    {
        return AppError::TooLarge(limit).into_response();
    }
    parts.extensions.insert(BodyLimit(limit));
    parts.extensions.insert(match auth {
        Ok(c) => Authenticated::Ok(c),
        Err(e) => Authenticated::Refused(e),
    });
    let body = Body::new(http_body_util::Limited::new(body, limit));
    let req = Request::from_parts(parts, body);
    match tokio::time::timeout(Duration::from_secs(secs), next.run(req)).await {
        Ok(res) => res,
        Err(_) => {
            AppError::Timeout(format!("request not completed within {secs} s")).into_response()
        }
    }
}

/// Query parameters, rejected with a 400 naming the parameter.
#[derive(Debug)]
pub struct ApiQuery<T>(pub T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for ApiQuery<T> {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::try_from_uri(&parts.uri)
            .map(|axum::extract::Query(v)| ApiQuery(v))
            .map_err(|e| AppError::BadRequest(format!("bad query parameter: {}", e.body_text())))
    }
}

/// Parses an optional TIME query value (Unix seconds, RFC 3339, local civil).
pub fn query_time(value: Option<&str>, name: &str, default: i64) -> Result<i64, AppError> {
    match value {
        None => Ok(default),
        Some(v) => {
            let tz = budget_protocol::time::zone(None).map_err(AppError::BadRequest)?;
            budget_protocol::time::parse_time(v, &tz)
                .map_err(|e| AppError::BadRequest(format!("{name}: {e}")))
        }
    }
}

/// An interval's query times: its end (`end_name`, default `default_end`) and
/// an optional start `since`, which may not be after the end (400), each
/// parsed as [`query_time`] does.
pub fn query_range(
    since: Option<&str>,
    end: Option<&str>,
    end_name: &str,
    default_end: i64,
) -> Result<(Option<i64>, i64), AppError> {
    let end = query_time(end, end_name, default_end)?;
    let since = match since {
        Some(s) => Some(query_time(Some(s), "since", 0)?),
        None => None,
    };
    if since.is_some_and(|s| s > end) {
        return Err(AppError::BadRequest(format!(
            "since must not be after {end_name}"
        )));
    }
    Ok((since, end))
}

pub(crate) async fn count_requests(
    State(state): State<AppState>,
    req: Request,
    next: Next,
) -> Response {
    let res = next.run(req).await;
    state.counters.requests.fetch_add(1, Ordering::Relaxed);
    let s = res.status();
    if s.is_client_error() {
        state.counters.errors_4xx.fetch_add(1, Ordering::Relaxed);
    } else if s.is_server_error() {
        state.counters.errors_5xx.fetch_add(1, Ordering::Relaxed);
    }
    res
}

async fn not_found() -> AppError {
    AppError::NotFound("no such route; see GET /v1/openapi.json".into())
}

async fn method_not_allowed() -> Response {
    (
        StatusCode::METHOD_NOT_ALLOWED,
        axum::Json(ErrorBody {
            details: None,
            error: "method not allowed on this route".into(),
        }),
    )
        .into_response()
}

async fn health(State(state): State<AppState>) -> axum::Json<Health> {
    axum::Json(Health {
        generation: state.generation.load(Ordering::SeqCst),
        schema_version: crate::db::SCHEMA_VERSION,
        started_at: state.started_at,
        status: "ok".into(),
        version: env!("CARGO_PKG_VERSION").into(),
    })
}

async fn openapi() -> Response {
    (
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        crate::openapi::served(),
    )
        .into_response()
}

/// The whole API as a router (state applied).
pub fn app(state: AppState) -> Router {
    Router::new()
        .route("/v1/health", get(health))
        .route("/v1/openapi.json", get(openapi))
        .route(
            "/v1/accounts",
            get(tree::list_accounts).post(tree::create_account),
        )
        .route(
            "/v1/accounts/{name}",
            get(tree::get_account)
                .patch(tree::modify_account)
                .delete(tree::delete_account),
        )
        .route(
            "/v1/members",
            get(tree::list_members).post(tree::add_member),
        )
        .route(
            "/v1/members/{account}/{user}",
            delete(tree::remove_member).patch(tree::modify_member),
        )
        .route(
            "/v1/coordinators",
            get(tree::list_coordinators).post(tree::add_coordinator),
        )
        .route(
            "/v1/coordinators/{account}/{user}",
            delete(tree::remove_coordinator),
        )
        .route(
            "/v1/weights",
            get(tree::get_weights).patch(tree::set_weights),
        )
        .route("/v1/policy", get(tree::get_policy).patch(tree::set_policy))
        .route("/v1/audit", get(tree::audit))
        .route("/v1/usage", get(reports::usage))
        .route("/v1/usage/import", post(import::import))
        .route("/v1/share", get(reports::share))
        .route(budget_protocol::SNAPSHOT_PATH, get(snapshot::snapshot))
        .route(budget_protocol::SYNC_PATH, post(sync::sync))
        .route("/v1/jobs/{id}/why", get(why::why))
        .route("/v1/drains", get(drains::list).post(drains::create))
        .route("/v1/drains/{nodes}", delete(drains::remove))
        .route(
            preemption::ROUTE,
            get(preemptions::list).post(preemptions::create),
        )
        .route(budget_protocol::AGENT_REPORT_PATH, post(idle::report))
        .route("/v1/idle", get(idle::list))
        .route(budget_protocol::shadow::ROUTE, get(shadow::report))
        .route(budget_protocol::runs::ROUTE, get(runs::list))
        .route("/metrics", get(metrics::metrics))
        .route(budget_protocol::service::BACKUP_PATH, post(site::backup))
        .route(budget_protocol::service::PLUGINS_PATH, get(site::plugins))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // The limits are [`authenticate_first`]'s, per role.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            state.clone(),
            authenticate_first,
        ))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            count_requests,
        ))
        .with_state(state.clone())
        // The web view: HTML, its own login, outside the bearer-token
        // middleware and the OpenAPI document.
        .merge(crate::ui::router(state))
}
