//! Who reads the web view: the login page, the session cookie and logout.
//!
//! A reader or user token from budgetd's config is entered once on the
//! login form (POST, never in a URL) and kept in the cookie `budget_ui`:
//! `HttpOnly` (no script reads it), `SameSite=Strict` (no other site's page
//! sends it), `Path=/ui` (the API never sees it: the API reads bearer
//! tokens only, so the cookie cannot be used to change anything), and
//! `Secure` when the request came through a TLS proxy that says so with
//! `X-Forwarded-Proto: https` (budgetd itself speaks plain HTTP; over plain
//! HTTP a `Secure` cookie would never come back). The cookie holds the
//! token hex-encoded, and each request checks it against the configured
//! tokens again, so a token removed from the config logs its holders out.
//!
//! The login and logout forms refuse a request another site's page made
//! (login CSRF: a page elsewhere posting its own token would sign the
//! browser in as someone else): `Sec-Fetch-Site` other than `same-origin`
//! or `none`, or an `Origin` whose host differs from the request's
//! (`X-Forwarded-Host` behind a proxy, else `Host`). A client that sends
//! neither header (curl, an old browser) is not a cross-site page and passes.
//! The what-if form (`ui::whatif`) refuses such a post the same way.
//!
//! Admin, controller and agent tokens are refused here: the view is for
//! reading, and a token that can change budgets or post syncs should not
//! sit in a browser.
//!
//! A site whose reverse proxy already signs people in (Kerberos, OIDC, the
//! site's SSO) names its hosts and header in `[ui_proxy]`: a request from
//! one of those addresses carrying the header is that user, a reader if
//! listed in `readers`, else with a user token's scope; there is no login
//! form and no logout (the proxy owns the session). The header is read only
//! from those peers (never from a Unix-socket or other TCP peer), so a
//! client reaching budgetd directly cannot claim a name; a name that is not
//! a plausible user name is refused (logged, the login page, no data).

use axum::Form;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{escape, html, page};
use crate::auth::Peer;
use crate::caller::{Caller, Role};
use crate::state::AppState;

/// The cookie's name.
pub const COOKIE: &str = "budget_ui";

/// The login page, with an error line when `error` is given.
pub fn login_page(status: StatusCode, error: Option<&str>) -> Response {
    let err = error
        .map(|e| {
            format!(
                "<p class=\"error\" role=\"alert\" id=\"login-error\">{}</p>",
                escape(e)
            )
        })
        .unwrap_or_default();
    let described = if error.is_some() {
        " aria-describedby=\"login-error\""
    } else {
        ""
    };
    let body = format!(
        "{err}<p>Enter a <strong>reader</strong> or <strong>user</strong> token of this budgetd \
(ask the site's administrators). It is kept in a cookie for this view only.</p>\
<form method=\"post\" action=\"/ui/login\">\
<label for=\"token\">Token</label>\
<input id=\"token\" name=\"token\" type=\"password\" autocomplete=\"current-password\" required{described}> \
<button type=\"submit\">Sign in</button></form>"
    );
    html(status, page("Sign in", None, "", &body))
}

/// `GET /ui/login`.
pub async fn form() -> Response {
    login_page(StatusCode::OK, None)
}

#[derive(Debug, Deserialize)]
pub struct LoginForm {
    #[serde(default)]
    token: String,
}

/// `POST /ui/login`: a known reader or user token sets the cookie and goes
/// to the accounts page; anything else answers the login page again with
/// the reason, and no cookie.
pub async fn login(
    State(st): State<AppState>,
    headers: HeaderMap,
    form: Result<Form<LoginForm>, axum::extract::rejection::FormRejection>,
) -> Response {
    if cross_site(&headers) {
        return refuse_cross_site("login");
    }
    let token = match form {
        Ok(Form(f)) => f.token.trim().to_string(),
        Err(e) => {
            return login_page(
                StatusCode::BAD_REQUEST,
                Some(&format!("the form could not be read: {}", e.body_text())),
            );
        }
    };
    if token.is_empty() {
        return login_page(StatusCode::BAD_REQUEST, Some("enter a token"));
    }
    let Some(caller) = crate::auth::token_caller(&st, Some(&token), "ui") else {
        st.counters
            .auth_refusals
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        tracing::warn!("web view login refused: unknown token");
        return login_page(
            StatusCode::UNAUTHORIZED,
            Some("unknown token: check it and try again"),
        );
    };
    if !may_use_view(&caller) {
        tracing::warn!(caller = %caller.actor(), "web view login refused: role");
        return login_page(
            StatusCode::FORBIDDEN,
            Some(
                "this view takes reader or user tokens only (admin, controller and agent tokens are refused)",
            ),
        );
    }
    let secure = forwarded_https(&headers);
    let cookie = format!(
        "{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict{}",
        hex(token.as_bytes()),
        if secure { "; Secure" } else { "" }
    );
    let mut res = Redirect::to("/ui/tree").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// `POST /ui/logout`: clears the cookie and goes to the login page.
pub async fn logout(headers: HeaderMap) -> Response {
    if cross_site(&headers) {
        return refuse_cross_site("logout");
    }
    let secure = if forwarded_https(&headers) {
        "; Secure"
    } else {
        ""
    };
    let cookie = format!("{COOKIE}=; Path=/ui; Max-Age=0; HttpOnly; SameSite=Strict{secure}");
    let mut res = Redirect::to("/ui/login").into_response();
    if let Ok(v) = HeaderValue::from_str(&cookie) {
        res.headers_mut().insert(header::SET_COOKIE, v);
    }
    res
}

/// Whether a form post came from another site's page (see the module doc).
pub(super) fn cross_site(headers: &HeaderMap) -> bool {
    let value = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_ascii_lowercase())
    };
    if let Some(site) = value("sec-fetch-site") {
        return !matches!(site.as_str(), "same-origin" | "none");
    }
    let Some(origin) = value("origin") else {
        return false;
    };
    // `Origin: null` (a sandboxed frame, a redirect across sites) has no host.
    let Some((_, origin_host)) = origin.split_once("://") else {
        return true;
    };
    let host = value("x-forwarded-host")
        .and_then(|v| v.split(',').next().map(|h| h.trim().to_string()))
        .or_else(|| value("host"));
    host.as_deref() != Some(origin_host.trim_end_matches('/'))
}

/// The answer to a cross-site form post: the login page, no cookie change.
fn refuse_cross_site(form: &str) -> Response {
    tracing::warn!(form, "web view form refused: posted from another site");
    login_page(
        StatusCode::FORBIDDEN,
        Some("this form was sent from another site's page and was refused; sign in from this page"),
    )
}

/// Whether `caller`'s role may use the view: readers and users.
fn may_use_view(caller: &Caller) -> bool {
    matches!(caller.role, Role::Reader | Role::User)
}

/// Whether a TLS proxy in front says the browser used HTTPS.
fn forwarded_https(headers: &HeaderMap) -> bool {
    headers
        .get("x-forwarded-proto")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("https"))
}

/// Who reads a page, resolved once per request by the view's middleware
/// and handed to the pages as a request extension.
#[derive(Debug, Clone)]
pub struct Viewer(pub Option<Caller>);

/// `Caller::via` of a person the site's proxy signed in.
pub const VIA_PROXY: &str = "ui-proxy";

/// The reader of `req`: the user a trusted sign-in proxy passes, else the
/// session cookie's token.
pub fn viewer(st: &AppState, req: &Request) -> Viewer {
    let peer = req.extensions().get::<ConnectInfo<Peer>>().map(|c| &c.0);
    if let Some(c) = proxied(st, req.headers(), peer) {
        return Viewer(c);
    }
    Viewer(caller(st, req.headers()))
}

/// The user a trusted proxy passes: `None` when no proxy is configured, the
/// peer is not one of its addresses or it sent no header (the cookie
/// decides then); `Some(None)` for a header that names no plausible user.
fn proxied(st: &AppState, headers: &HeaderMap, peer: Option<&Peer>) -> Option<Option<Caller>> {
    let px = st.config.ui_proxy.as_ref()?;
    let Some(Peer::Tcp(addr)) = peer else {
        return None;
    };
    if !px.addresses.contains(&addr.ip()) {
        return None;
    }
    let raw = headers.get(px.user_header.trim())?;
    let name = raw.to_str().map(str::trim).unwrap_or("");
    if !plausible_user(name) {
        tracing::warn!(
            header = %px.user_header,
            "web view: the sign-in proxy passed a user name that is not one; refused"
        );
        return Some(None);
    }
    let role = if px.readers.iter().any(|r| r == name) {
        Role::Reader
    } else {
        Role::User
    };
    Some(Some(Caller {
        user: name.to_string(),
        uid: None,
        role,
        controller: false,
        agent_nodes: Vec::new(),
        via: VIA_PROXY,
    }))
}

/// A name a site's accounts could hold: 1-64 of letters, digits, `.`, `_`,
/// `-`, `@` (realms), not starting with `-`.
fn plausible_user(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && !name.starts_with('-')
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b'@'))
}

/// The caller of a page request: the cookie's token, if it is still a
/// configured reader or user token.
pub fn caller(st: &AppState, headers: &HeaderMap) -> Option<Caller> {
    let token = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .and_then(|(_, v)| unhex(v))?;
    let token = String::from_utf8(token).ok()?;
    crate::auth::token_caller(st, Some(&token), "ui").filter(may_use_view)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.is_empty() || !s.len().is_multiple_of(2) || s.len() > 2 * super::FORM_LIMIT_BYTES {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plausible_user_names_pass() {
        for ok in ["alice", "a.b_c-d", "alice@EXAMPLE.ORG", "u1"] {
            assert!(plausible_user(ok), "{ok}");
        }
        let long = "a".repeat(65);
        for bad in ["", "-x", "al ice", "a<b>", "a;b", long.as_str(), "é"] {
            assert!(!plausible_user(bad), "{bad:?}");
        }
    }

    #[test]
    fn hex_round_trips_and_refuses_junk() {
        let t = "tok en;\"=é";
        assert_eq!(unhex(&hex(t.as_bytes())).as_deref(), Some(t.as_bytes()));
        assert_eq!(unhex("abc"), None);
        assert_eq!(unhex("zz"), None);
        assert_eq!(unhex(""), None);
    }
}
