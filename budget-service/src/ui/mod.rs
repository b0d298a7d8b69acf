//! The read-only web view under `/ui`, for project leads and program
//! managers: server-rendered HTML with inline SVG charts, no script, no
//! external resource (a strict `Content-Security-Policy` says so to the
//! browser).
//!
//! Pages ([`pages`]): the account tree with 4 windows of usage against
//! allocation, the waiting queue grouped by team, preemptions, lost work and
//! idle GPU-hours per team, drains in progress; and the what-if ([`whatif`],
//! for viewers who read every account and for coordinators within their
//! subtrees): a form, then a page that follows the replay (`budgetctl
//! whatif` in a child process, `crate::whatif`) and shows both cases. Every figure comes from the
//! function behind the matching `GET /v1/...` route, called with the
//! caller's own scope, so a page shows what the API shows that caller at the
//! same instant, and nothing more.
//!
//! Who is reading ([`login`]): a reader or user token entered once on the
//! login page, kept in an `HttpOnly`, `SameSite=Strict` cookie scoped to
//! `/ui`. Without a valid cookie every page answers the login page and no
//! data (a redirect to the login page). Or, where `[ui_proxy]` is set, the
//! user the site's sign-in proxy passes. These routes sit outside the API's bearer-token middleware and
//! outside the OpenAPI document (they answer HTML, not JSON).

mod login;
mod pages;
mod svg;
mod whatif;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};

use crate::caller::Caller;
use crate::state::AppState;

/// The largest login form accepted (a token is far shorter).
const FORM_LIMIT_BYTES: usize = 4096;

/// The view's routes (state applied), merged into the API's router.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/ui", get(|| async { Redirect::to("/ui/tree") }))
        .route("/ui/", get(|| async { Redirect::to("/ui/tree") }))
        .route("/ui/login", get(login::form).post(login::login))
        .route("/ui/logout", post(login::logout))
        .route("/ui/tree", get(pages::tree))
        .route("/ui/queue", get(pages::queue))
        .route("/ui/preemptions", get(pages::preemptions))
        .route("/ui/drains", get(pages::drains))
        .route("/ui/whatif", get(whatif::form).post(whatif::submit))
        .route("/ui/whatif/{id}", get(whatif::result))
        .layer(DefaultBodyLimit::max(FORM_LIMIT_BYTES))
        .layer(middleware::from_fn_with_state(state.clone(), viewer))
        .layer(middleware::from_fn(headers))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::api::count_requests,
        ))
        .with_state(state)
}

/// Resolves who reads ([`login::Viewer`]) once, for the pages to extract.
async fn viewer(
    axum::extract::State(st): axum::extract::State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let v = login::viewer(&st, &req);
    req.extensions_mut().insert(v);
    next.run(req).await
}

/// Headers on every answer of the view: nothing cached (pages hold figures
/// a person may only see while logged in), no script, style or image from
/// anywhere (inline style only), no framing, no referrer.
async fn headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    res
}

/// `s` safe as HTML text or a double- or single-quoted attribute value.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// GPU-hours and other figures as the pages print them.
pub fn num(x: f64) -> String {
    // `+ 0.0` turns -0.0 into 0.0 (no "-0.00").
    format!("{:.2}", x + 0.0)
}

/// A ratio as the pages print it.
pub fn ratio(x: f64) -> String {
    format!("{:.3}", x + 0.0)
}

/// A fraction (0..1) as a percentage, as the pages print it.
pub fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0 + 0.0)
}

/// Hours, or `-` when there is no figure.
pub fn hours(x: Option<f64>) -> String {
    x.map_or_else(|| "-".to_string(), num)
}

/// Unix seconds as `YYYY-MM-DD HH:MM UTC`.
pub fn utc(t: i64) -> String {
    jiff::Timestamp::from_second(t)
        .map(|ts| ts.strftime("%Y-%m-%d %H:%M UTC").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// A `<time>` element for Unix seconds `t` (machine-readable in `datetime`
/// and `data-t`, which the tests read back).
pub fn time_el(t: i64) -> String {
    let iso = jiff::Timestamp::from_second(t)
        .map(|ts| ts.to_string())
        .unwrap_or_default();
    format!(
        "<time datetime=\"{}\" data-t=\"{t}\">{}</time>",
        escape(&iso),
        escape(&utc(t))
    )
}

/// The pages of the navigation: path and label.
const NAV: [(&str, &str); 5] = [
    ("/ui/tree", "Accounts"),
    ("/ui/queue", "Waiting queue"),
    ("/ui/preemptions", "Preemptions and idle GPUs"),
    ("/ui/drains", "Drains"),
    ("/ui/whatif", "What if"),
];

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;color:#111;background:#fff;line-height:1.4}\
header,main{padding:0.5rem 1.5rem}header{background:#0b3d62;color:#fff}\
header a{color:#fff}nav ul{list-style:none;padding:0;margin:0.5rem 0;display:flex;flex-wrap:wrap;gap:1rem}\
nav a[aria-current=page]{font-weight:bold;text-decoration-thickness:3px}\
a:focus,button:focus,input:focus,select:focus{outline:3px solid #f4b400;outline-offset:2px}\
.skip{position:absolute;left:-9999px}.skip:focus{left:1rem;top:1rem;background:#fff;color:#000;padding:0.5rem}\
table{border-collapse:collapse;margin:0.5rem 0 1.5rem}th,td{border:1px solid #666;padding:0.25rem 0.5rem;text-align:left;vertical-align:top}\
td.n{text-align:right;font-variant-numeric:tabular-nums}caption{text-align:left;font-weight:bold;padding:0.25rem 0}\
.who{float:right}.who form{display:inline}button{font:inherit;padding:0.25rem 0.75rem}\
.error{color:#8b0000;font-weight:bold}label{display:block;margin:0.5rem 0}\
svg.c rect{fill:#2e6da4}svg.c rect.o{fill:#b03a2e}svg.c line{stroke:#111;stroke-width:2}\
input,select{font:inherit;padding:0.2rem}.chart{overflow-x:auto}\
svg.p rect.w{fill:#4a6285}svg.p rect.n{fill:#b5500f}svg.p line{stroke:#111;stroke-width:1}\
svg.p text{font-size:11px;fill:#111}svg.p text.v,svg.p text.t{text-anchor:middle}";

/// A whole page: `title`, the navigation (with `current` marked) and who
/// is logged in when `caller` is given, then `body` (already escaped HTML).
pub fn page(title: &str, caller: Option<&Caller>, current: &str, body: &str) -> String {
    page_with(title, caller, current, "", body)
}

/// [`page`] with `head` (trusted markup, e.g. a refresh) added to `<head>`.
pub fn page_with(
    title: &str,
    caller: Option<&Caller>,
    current: &str,
    head: &str,
    body: &str,
) -> String {
    let mut nav = String::new();
    let mut who = String::new();
    if let Some(c) = caller {
        nav.push_str("<nav aria-label=\"Pages\"><ul>");
        for (path, label) in NAV {
            let cur = if path == current {
                " aria-current=\"page\""
            } else {
                ""
            };
            nav.push_str(&format!("<li><a href=\"{path}\"{cur}>{label}</a></li>"));
        }
        nav.push_str("</ul></nav>");
        // The proxy owns a proxied session: there is nothing to log out of here.
        let logout = if c.via == login::VIA_PROXY {
            "signed in by the site"
        } else {
            "<form method=\"post\" action=\"/ui/logout\"><button type=\"submit\">Log out</button></form>"
        };
        who = format!(
            "<div class=\"who\">Signed in as {} ({}) {logout}</div>",
            escape(&c.user),
            role_name(c)
        );
    }
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
<title>{t} - slurm-budget</title>{head}<style>{STYLE}</style></head><body>\
<a class=\"skip\" href=\"#main\">Skip to content</a>\
<header>{who}<p><strong>slurm-budget</strong> (read-only view)</p>{nav}</header>\
<main id=\"main\"><h1>{t}</h1>{body}</main></body></html>\n",
        t = escape(title)
    )
}

/// The caller's role in words.
fn role_name(c: &Caller) -> &'static str {
    if c.reads_all() {
        "reader: every account"
    } else {
        "user: your accounts"
    }
}

/// A page saying what went wrong (an error of the API's functions, in the
/// API's words), with the API's status.
pub fn error_page(caller: &Caller, current: &str, e: &crate::error::AppError) -> Response {
    let status = e.status();
    let msg = match e {
        crate::error::AppError::Internal(_) => "internal error (see the budgetd log)".to_string(),
        other => other.to_string(),
    };
    let body = format!("<p class=\"error\" role=\"alert\">{}</p>", escape(&msg));
    (
        status,
        Html(page("Cannot show this page", Some(caller), current, &body)),
    )
        .into_response()
}

/// An HTML answer with `status`.
pub fn html(status: StatusCode, text: String) -> Response {
    (status, Html(text)).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_covers_text_and_both_attribute_quotes() {
        assert_eq!(
            escape("<a href='x' title=\"y\">&amp;</a>"),
            "&lt;a href=&#39;x&#39; title=&quot;y&quot;&gt;&amp;amp;&lt;/a&gt;"
        );
        assert_eq!(escape("plain é"), "plain é");
        assert_eq!(
            (num(-0.0), ratio(-0.0), num(1.005)),
            ("0.00".into(), "0.000".into(), "1.00".into())
        );
        assert_eq!(utc(0), "1970-01-01 00:00 UTC");
    }
}
