//! The what-if pages: `GET /ui/whatif` (the form), `POST /ui/whatif`
//! (starts a replay, `crate::whatif`, and sends to its page) and
//! `GET /ui/whatif/{id}` (the replay's progress, refreshed every 2 s by the
//! browser itself, no script; then both cases side by side).
//!
//! Who may use it: a viewer who reads every account (a reader token or a
//! reader the sign-in proxy names: the view admits no admin token, so this
//! is its admin), on any account; a coordinator on the accounts of the
//! subtrees they coordinate, replaying the runs the API shows them; anyone
//! else gets the API's refusal. The form is refused when posted from
//! another site's page, as the login form is. Bad input answers the form
//! again with the reason, and nothing starts; so does a request while
//! another replay runs (429: one at a time).

use axum::Extension;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Redirect, Response};
use budget_protocol::whatif::{Figures, Report};
use serde::Deserialize;

use super::login::{Viewer, cross_site};
use super::pages::sign_in;
use super::svg::{Pair, paired_chart};
use super::{error_page, escape, hours, html, num, page, page_with, pct, time_el};
use crate::auth::Scope;
use crate::caller::Caller;
use crate::clock::now;
use crate::error::AppError;
use crate::state::AppState;
use crate::whatif::{self as wi, Change, Job, MAX_WEEKS, Request, State as JobState, WEEK};

const PATH: &str = "/ui/whatif";
const TITLE: &str = "What if";

/// What the form was sent with (kept to fill it again after an error).
#[derive(Debug, Default, Deserialize)]
pub struct WhatifForm {
    #[serde(default)]
    account: String,
    #[serde(default)]
    change: String,
    #[serde(default)]
    weeks: String,
}

/// The accounts `caller` may try changes on, by name; `Err`: the refusal
/// page (the API's words: admins and coordinators only).
async fn choices(st: &AppState, caller: &Caller) -> Result<Vec<String>, Response> {
    let c2 = caller.clone();
    let r = st
        .with_store(move |s| {
            let scope = Scope::of(&c2, s.tree(), s.coordinators());
            let allowed = c2.reads_all() || scope.coordinates_any();
            let mut names: Vec<String> = s
                .tree()
                .accounts
                .iter()
                .filter(|a| wi::may_change(&c2, &scope, &a.name))
                .map(|a| a.name.clone())
                .collect();
            names.sort();
            Ok((allowed, names))
        })
        .await;
    match r {
        Ok((true, names)) => Ok(names),
        Ok((false, _)) => Err(error_page(
            caller,
            PATH,
            &caller.refuse(
                st,
                "try a what-if (admins and coordinators only: a reader token, or a coordinator within their subtree)",
            ),
        )),
        Err(e) => Err(error_page(caller, PATH, &e)),
    }
}

/// The form, with `error` above it when given.
fn form_page(
    st: &AppState,
    caller: &Caller,
    status: StatusCode,
    accounts: &[String],
    error: Option<&str>,
    values: &WhatifForm,
) -> Response {
    let mut body = String::new();
    if let Some(e) = error {
        body.push_str(&format!(
            "<p class=\"error\" role=\"alert\" id=\"whatif-error\">{}</p>",
            escape(e)
        ));
    }
    body.push_str(
        "<p>Replays the last weeks of this site's own ledger (submit times, sizes, time limits, contracts) \
through the simulator twice: <em>as it was</em>, with today's allocations, and <em>as it would be</em>, with \
one account's allocation changed (a change to a parent account scales its whole subtree). The result shows, \
per team, the entitlement shortfall, waits, preemptions and lost work in both cases, side by side. It \
changes nothing. One replay runs at a time; it may take a few minutes on a large site.</p>",
    );
    let disabled = wi::find_budgetctl(&st.config.whatif).err();
    if let Some(why) = &disabled {
        body.push_str(&format!(
            "<p class=\"error\" role=\"alert\">The what-if is not available on this budgetd: {}</p>",
            escape(why)
        ));
    } else if accounts.is_empty() {
        body.push_str("<p>There is no account to change yet.</p>");
    } else {
        let described = if error.is_some() {
            " aria-describedby=\"whatif-error\""
        } else {
            ""
        };
        let mut options = String::new();
        for a in accounts {
            let sel = if *a == values.account {
                " selected"
            } else {
                ""
            };
            let a = escape(a);
            options.push_str(&format!("<option value=\"{a}\"{sel}>{a}</option>"));
        }
        let weeks_now: u32 = values.weeks.trim().parse().unwrap_or(MAX_WEEKS);
        let mut weeks = String::new();
        for w in 1..=MAX_WEEKS {
            let sel = if w == weeks_now { " selected" } else { "" };
            let unit = if w == 1 { "week" } else { "weeks" };
            weeks.push_str(&format!("<option value=\"{w}\"{sel}>{w} {unit}</option>"));
        }
        body.push_str(&format!(
            "<form method=\"post\" action=\"{PATH}\">\
<label for=\"account\">Account</label><select id=\"account\" name=\"account\" required{described}>{options}</select>\
<label for=\"change\">Change of its allocation: +N% or -N% (relative to today's), or GPU-hours per window</label>\
<input id=\"change\" name=\"change\" type=\"text\" required maxlength=\"32\" placeholder=\"+20%\" value=\"{}\"{described}>\
<label for=\"weeks\">Weeks of the ledger to replay, up to now</label><select id=\"weeks\" name=\"weeks\">{weeks}</select>\
<p><button type=\"submit\">Replay</button></p></form>",
            escape(&values.change)
        ));
    }
    let mine = st.whatifs.of(caller);
    if !mine.is_empty() {
        body.push_str("<h2>Your recent what-ifs</h2><ul>");
        for j in &mine {
            let state = match &j.state {
                JobState::Running(_) => "running",
                JobState::Done(_) => "done",
                JobState::Failed(_) => "failed",
            };
            body.push_str(&format!(
                "<li><a href=\"{PATH}/{}\">{} {}, {} weeks</a>, started {} ({state})</li>",
                escape(&j.id),
                escape(&j.request.account),
                escape(&j.request.change.words()),
                j.request.weeks,
                time_el(j.started_at)
            ));
        }
        body.push_str("</ul>");
    }
    html(status, page(TITLE, Some(caller), PATH, &body))
}

/// `GET /ui/whatif`.
pub async fn form(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    match choices(&st, &caller).await {
        Ok(accounts) => form_page(
            &st,
            &caller,
            StatusCode::OK,
            &accounts,
            None,
            &WhatifForm::default(),
        ),
        Err(refused) => refused,
    }
}

/// `POST /ui/whatif`: checks the form, starts the replay and sends to its
/// page; or the form again with why nothing started.
pub async fn submit(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
    headers: HeaderMap,
    form: Result<Form<WhatifForm>, FormRejection>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    if cross_site(&headers) {
        tracing::warn!(
            form = "whatif",
            "web view form refused: posted from another site"
        );
        return error_page(
            &caller,
            PATH,
            &AppError::Forbidden(
                "this form was sent from another site's page and was refused; open the what-if page here and send it from there"
                    .into(),
            ),
        );
    }
    let accounts = match choices(&st, &caller).await {
        Ok(a) => a,
        Err(refused) => return refused,
    };
    let values = match form {
        Ok(Form(f)) => f,
        Err(e) => {
            let msg = format!("the form could not be read: {}", e.body_text());
            return form_page(
                &st,
                &caller,
                StatusCode::BAD_REQUEST,
                &accounts,
                Some(&msg),
                &WhatifForm::default(),
            );
        }
    };
    let again = |status: StatusCode, msg: &str| {
        form_page(&st, &caller, status, &accounts, Some(msg), &values)
    };
    let account = values.account.trim().to_string();
    if account.is_empty() {
        return again(StatusCode::BAD_REQUEST, "choose an account");
    }
    if !accounts.contains(&account) {
        if caller.reads_all() {
            return again(
                StatusCode::BAD_REQUEST,
                &format!("no account {account:?} in the tree"),
            );
        }
        // A coordinator outside their subtrees: refused as the API refuses.
        let e = caller.refuse(
            &st,
            &format!(
                "try a what-if on account {account:?} (only within the subtrees they coordinate)"
            ),
        );
        return again(StatusCode::FORBIDDEN, &e.to_string());
    }
    let change = match Change::parse(&values.change) {
        Ok(c) => c,
        Err(e) => return again(StatusCode::BAD_REQUEST, &e),
    };
    let weeks = match values.weeks.trim().parse::<u32>() {
        Ok(w) if (1..=MAX_WEEKS).contains(&w) => w,
        _ => {
            return again(
                StatusCode::BAD_REQUEST,
                &format!("weeks: a whole number from 1 to {MAX_WEEKS}"),
            );
        }
    };
    let budgetctl = match wi::find_budgetctl(&st.config.whatif) {
        Ok(p) => p,
        Err(why) => {
            return again(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("the what-if is not available on this budgetd: {why}"),
            );
        }
    };
    let Some(cluster_gpus) = st.cluster_gpus() else {
        return again(
            StatusCode::SERVICE_UNAVAILABLE,
            "budgetd does not know the cluster's GPUs yet (it reads them from Slurm every minute); try again shortly",
        );
    };
    let until = now();
    let request = Request {
        account,
        change,
        weeks,
    };
    let cfg = st.config.whatif.clone();
    let Some(slot) = st
        .whatifs
        .claim(&cfg, &caller, request.clone(), until, st.started_at)
    else {
        return again(
            StatusCode::TOO_MANY_REQUESTS,
            "another what-if is running now (one at a time); try again when it is done",
        );
    };
    let id = slot.id().to_string();
    let c2 = caller.clone();
    let since = until - i64::from(weeks) * WEEK;
    let input = st
        .with_store(move |s| {
            let scope = Scope::of(&c2, s.tree(), s.coordinators());
            Ok(wi::input_for(
                s,
                &c2,
                &scope,
                since,
                until,
                Some(cluster_gpus),
            ))
        })
        .await;
    let input = match input {
        Ok(i) => i,
        Err(e) => {
            st.whatifs.finish(
                slot,
                JobState::Failed(format!("the input could not be read: {e}")),
            );
            return error_page(&caller, PATH, &e);
        }
    };
    tracing::info!(
        id,
        caller = %caller.actor(),
        account = %request.account,
        change = %request.change.arg(),
        weeks,
        runs = input.runs.runs.len(),
        "what-if started"
    );
    let st2 = st.clone();
    tokio::spawn(async move {
        wi::run(&st2.whatifs, slot, budgetctl, cfg, request, input).await;
    });
    Redirect::to(&format!("{PATH}/{id}")).into_response()
}

/// `GET /ui/whatif/{id}`: the replay's progress, then its result.
pub async fn result(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
    Path(id): Path<String>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    let Some(job) = st.whatifs.get(&st.config.whatif, &id, &caller) else {
        return error_page(
            &caller,
            PATH,
            &AppError::NotFound(format!(
                "no what-if {id:?} of yours: results are kept in memory for {} minutes (the last {}), and shown only to whoever started them",
                st.config.whatif.keep_secs / 60,
                st.config.whatif.keep_results
            )),
        );
    };
    let what = format!(
        "{} {} over the last {} week{}",
        escape(&job.request.account),
        escape(&job.request.change.words()),
        job.request.weeks,
        if job.request.weeks == 1 { "" } else { "s" }
    );
    match &job.state {
        JobState::Running(progress) => {
            let body = format!(
                "<p>Replaying {what}, started {} ({:.0} s ago). This page refreshes itself every 2 seconds.</p>\
<p role=\"status\" id=\"progress\">{}</p>",
                time_el(job.started_at),
                job.elapsed_secs(),
                escape(progress)
            );
            html(
                StatusCode::OK,
                page_with(
                    TITLE,
                    Some(&caller),
                    PATH,
                    "<meta http-equiv=\"refresh\" content=\"2\">",
                    &body,
                ),
            )
        }
        JobState::Failed(why) => {
            let body = format!(
                "<p>What if {what}, started {}:</p><p class=\"error\" role=\"alert\">{}</p>\
<p><a href=\"{PATH}\">Try another what-if</a></p>",
                time_el(job.started_at),
                escape(why)
            );
            html(StatusCode::OK, page(TITLE, Some(&caller), PATH, &body))
        }
        JobState::Done(report) => html(
            StatusCode::OK,
            page(
                TITLE,
                Some(&caller),
                PATH,
                &result_body(&job, &what, report),
            ),
        ),
    }
}

/// The cells of one case's row.
fn cells(allocation: f64, f: &Figures) -> String {
    [
        num(allocation),
        pct(f.entitlement_shortfall),
        hours(f.wait_p50_hours),
        hours(f.wait_p95_hours),
        f.preemptions.to_string(),
        num(f.lost_gpu_hours),
        num(f.gpu_hours),
    ]
    .iter()
    .map(|c| format!("<td class=\"n\">{c}</td>"))
    .collect()
}

fn result_body(job: &Job, what: &str, r: &Report) -> String {
    let mut out = format!(
        "<p data-since=\"{}\" data-until=\"{}\">What if {what}: the ledger from {} to {} replayed, {} jobs from {} \
ledger rows, on {}. Both cases replay the same jobs; <em>as it was</em> keeps today's allocations, <em>as it \
would be</em> has the change. Replayed in {:.0} s.</p>",
        r.since,
        r.until,
        time_el(r.since),
        time_el(r.until),
        r.jobs,
        r.runs,
        escape(&r.cluster_source),
        job.elapsed_secs()
    );
    out.push_str(
        "<h2>Entitlement shortfall per team</h2><p>The share of the GPU-hours a team was entitled to \
(and asked for) that it did not get: lower is better.</p><div class=\"chart\">",
    );
    let pairs: Vec<Pair> = r
        .teams
        .iter()
        .map(|t| Pair {
            team: t.team.clone(),
            was: t.as_it_was.entitlement_shortfall,
            would: t.as_it_would_be.entitlement_shortfall,
        })
        .collect();
    out.push_str(&paired_chart("Entitlement shortfall", &pairs, pct));
    out.push_str(
        "</div><table><caption>Per team, as it was and as it would be</caption><thead><tr>\
<th scope=\"col\">Team</th><th scope=\"col\">Case</th><th scope=\"col\">Allocation (GPU-hours per window)</th>\
<th scope=\"col\">Entitlement shortfall</th><th scope=\"col\">Wait p50 (hours)</th><th scope=\"col\">Wait p95 (hours)</th>\
<th scope=\"col\">Preemptions</th><th scope=\"col\">GPU-hours lost</th><th scope=\"col\">GPU-hours used</th></tr></thead>",
    );
    for t in &r.teams {
        let name = escape(&t.team);
        out.push_str(&format!(
            "<tbody data-team=\"{name}\"><tr data-case=\"was\"><th scope=\"rowgroup\" rowspan=\"2\">{name}</th>\
<th scope=\"row\">as it was</th>{}</tr><tr data-case=\"would\"><th scope=\"row\">as it would be</th>{}</tr></tbody>",
            cells(t.allocation_gpu_hours, &t.as_it_was),
            cells(t.new_allocation_gpu_hours, &t.as_it_would_be)
        ));
    }
    out.push_str("</table>");
    let off: Vec<String> = r
        .faithfulness
        .iter()
        .filter(|f| !f.within)
        .map(|f| escape(&f.team))
        .collect();
    out.push_str(&format!(
        "<h2>Is the replay faithful?</h2><p data-faithful=\"{}\">{}</p>",
        r.faithful,
        if r.faithful {
            format!(
                "Yes: for every team, <em>as it was</em> comes within {} of what budgetd measured (GPU-hours used \
and entitlement shortfall).",
                pct(r.faithful_within)
            )
        } else {
            format!(
                "Not for every team: <em>as it was</em> is more than {} off what budgetd measured for {}. Read \
their figures with care (<code>budgetctl whatif</code> prints the check in full).",
                pct(r.faithful_within),
                off.join(", ")
            )
        }
    ));
    out.push_str("<h2>Modelled, not measured</h2><ul>");
    if r.hidden_runs > 0 {
        out.push_str(&format!(
            "<li>{} runs of accounts you may not see are left out: the replay is your part of the cluster alone</li>",
            r.hidden_runs
        ));
    }
    if r.jobs_left_out > 0 {
        out.push_str(&format!(
            "<li>{} jobs cancelled before they started are left out</li>",
            r.jobs_left_out
        ));
    }
    for m in &r.modelled {
        out.push_str(&format!("<li>{}</li>", escape(m)));
    }
    out.push_str(&format!(
        "</ul><p><a href=\"{PATH}\">Try another what-if</a></p>"
    ));
    out
}
