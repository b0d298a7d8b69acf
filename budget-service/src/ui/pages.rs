//! The web view's four pages. Each reads its figures from the function
//! behind the matching API route, with the caller's scope:
//! - accounts: `report::share_at` (`GET /v1/share?at=` reads one instant
//!   through it), at now (or the `at` asked for, read as the API reads it)
//!   and at the ends of the 3 windows before, from one pass over the
//!   ledger;
//! - waiting queue: `api::why::explain_for` (`GET /v1/jobs/{id}/why`) for
//!   every pending job the caller may see (`api::why::sees`), with one
//!   `why::Explainer` for all of them;
//! - preemptions and idle GPUs: `api::preemptions::report_since`
//!   (`GET /v1/preemptions?since=`, readers only, as there) and
//!   `api::idle::report_for` (`GET /v1/idle`);
//! - drains: `api::drains::statuses` (`GET /v1/drains`).
//!
//! Each page states the instant (and interval) it shows, in `data-t`
//! attributes too, so it can be compared with the API at that instant.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use axum::Extension;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use budget_protocol::RunState;
use budget_protocol::reports::{ShareReport, ShareRow};
use budget_protocol::why::Why;
use policy_core::fairshare::Tier;
use serde::Deserialize;

use super::login::Viewer;
use super::svg::{Window, usage_chart};
use super::{error_page, escape, html, num, page, ratio, time_el};
use crate::api;
use crate::auth::Scope;
use crate::caller::Caller;
use crate::clock::now;
use crate::error::{AppError, AppResult};
use crate::state::AppState;
use crate::why::Explainer;

/// The most waiting jobs the queue page explains (each is a `why`).
pub const QUEUE_SHOWN: usize = 200;

/// How many windows the accounts page charts.
const WINDOWS: i64 = 4;

/// The answer to a page request without a valid cookie: to the login page
/// (a redirect, not a 401: a browser logs every 4xx as a console error).
pub(super) fn sign_in() -> Response {
    Redirect::to("/ui/login").into_response()
}

/// The page of `result`: its body, or the error page.
fn answer(caller: &Caller, path: &str, title: &str, result: AppResult<String>) -> Response {
    match result {
        Ok(body) => html(StatusCode::OK, page(title, Some(caller), path, &body)),
        Err(e) => error_page(caller, path, &e),
    }
}

/// A duration in whole days or hours.
fn span(secs: i64) -> String {
    if secs % 86_400 == 0 {
        format!("{} days", secs / 86_400)
    } else {
        format!("{:.1} hours", secs as f64 / 3600.0)
    }
}

/// The accounts page's query: `at`, the instant shown (a TIME as
/// `GET /v1/share?at=` reads it; default now).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TreeQuery {
    #[serde(default)]
    at: Option<String>,
}

/// `GET /ui/tree[?at=TIME]`.
pub async fn tree(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
    query: Result<Query<TreeQuery>, QueryRejection>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    let path = "/ui/tree";
    let c2 = caller.clone();
    let result = async {
        let q = query
            .map_err(|e| AppError::BadRequest(format!("bad query parameter: {}", e.body_text())))?;
        let t = api::query_time(q.at.as_deref(), "at", now())?;
        let _permit = st.expensive_read(&caller).await?;
        st.with_store(move |s| {
            let scope = Scope::of(&c2, s.tree(), s.coordinators());
            let window = s.policy().window_secs;
            // Newest first: the share report now, then at the end of each
            // window before, all from one pass over the ledger.
            let ats: Vec<i64> = (0..WINDOWS).map(|k| t - k * window).collect();
            let reports = crate::report::share_at(s, &ats, &scope);
            Ok(tree_body(&reports, window))
        })
        .await
    }
    .await;
    answer(&caller, path, "Accounts", result)
}

/// The tier of an account's row in words. The report's tier is that of
/// the account's path (docs/design.md §4.3): an account within its own
/// allocation is over budget when an account above it is, which the words
/// say, naming that account when the caller may read it; the root bears no
/// budget, so its ratio (the whole tree's usage against the root's
/// allocation) puts nothing over budget.
fn account_tier(row: &ShareRow, by_name: &HashMap<&str, &ShareRow>) -> String {
    if row.parent.is_none() {
        return "no budget (the root)".to_string();
    }
    if row.tier != Tier::OverBudget || row.ratio >= 1.0 {
        return row.tier.words().to_string();
    }
    // The nearest account above it over its own allocation.
    let mut up = row.parent.as_deref();
    let mut steps = 0;
    while let Some(name) = up {
        steps += 1;
        let Some(p) = by_name.get(name) else { break };
        if p.parent.is_none() {
            break;
        }
        if p.ratio >= 1.0 {
            let via = if steps == 1 { "parent" } else { "ancestor" };
            return format!("over budget (via {via} {})", escape(name));
        }
        up = p.parent.as_deref();
    }
    "over budget (via an account above it)".to_string()
}

fn tree_body(reports: &[ShareReport], window: i64) -> String {
    let Some(current) = reports.first() else {
        return String::new();
    };
    let mut out = format!(
        "<p>Figures as of {} (<span data-at=\"{}\">window: {}</span>). Allocation and usage are weighted GPU-hours per window; \
the ratio is usage / allocation; rank 1 is the lowest ratio among siblings. The tier is the account's path's: an account \
is over budget when it or an account above it has used its allocation (ratio 1 or more); the root bears no budget. \
The tier a waiting job ranks in may differ (it reads the ratios projected ahead; see the waiting queue). \
The chart shows the last {WINDOWS} windows, \
oldest first: a bar is the usage, the dark line the allocation, a red bar an account over its allocation.</p>",
        time_el(current.at),
        current.at,
        span(window)
    );
    out.push_str(
        "<table><caption>Accounts you may read</caption><thead><tr>\
<th scope=\"col\">Account</th><th scope=\"col\">Allocation</th><th scope=\"col\">Usage</th>\
<th scope=\"col\">Ratio</th><th scope=\"col\">Tier</th><th scope=\"col\">Rank</th>\
<th scope=\"col\">Last windows</th></tr></thead><tbody>",
    );
    // Each report's account rows by name, oldest first.
    let by_name: Vec<HashMap<&str, &ShareRow>> = reports
        .iter()
        .rev()
        .map(|r| {
            r.rows
                .iter()
                .filter(|x| x.user.is_none())
                .map(|x| (x.account.as_str(), x))
                .collect()
        })
        .collect();
    let now_by_name = by_name.last().cloned().unwrap_or_default();
    for row in current.rows.iter().filter(|r| r.user.is_none()) {
        // Oldest first; a window where the account did not exist counts 0.
        let windows: Vec<Window> = by_name
            .iter()
            .map(|m| {
                m.get(row.account.as_str()).map_or(
                    Window {
                        allocation: 0.0,
                        usage: 0.0,
                    },
                    |x| Window {
                        allocation: x.allocation_gpu_hours,
                        usage: x.usage_gpu_hours,
                    },
                )
            })
            .collect();
        let name = escape(&row.account);
        out.push_str(&format!(
            "<tr data-account=\"{name}\"><th scope=\"row\" style=\"padding-left:{}rem\">{name}</th>\
<td class=\"n\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
            0.5 + row.depth as f64,
            num(row.allocation_gpu_hours),
            num(row.usage_gpu_hours),
            ratio(row.ratio),
            account_tier(row, &now_by_name),
            row.rank,
            usage_chart(&row.account, &windows)
        ));
    }
    out.push_str("</tbody></table>");
    out
}

/// `GET /ui/queue`.
pub async fn queue(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    let path = "/ui/queue";
    let t = now();
    let c2 = caller.clone();
    let result = async {
        let _permit = st.expensive_read(&caller).await?;
        let snap = st.snapshot(t).await?;
        let partitions = st.partitions();
        let stale = st.config.agent_stale_secs;
        st.with_store(move |s| {
            let scope = Scope::of(&c2, s.tree(), s.coordinators());
            // One explainer (one read of the ledger's live runs and one
            // period state) for every job, as `why` computes it for one.
            let explainer = Explainer::new(s, &snap.snapshot, &partitions, t);
            let flagged = api::why::flagged_now(s, t, stale);
            let ids: BTreeSet<u32> = explainer
                .pending()
                .iter()
                .filter(|r| api::why::sees(&c2, &scope, r))
                .map(|r| r.job_id)
                .collect();
            let runs = s.ledger().jobs_runs(&ids);
            let mut whys = Vec::new();
            let mut left_out = 0usize;
            for id in ids {
                // The run `why` explains, when it is the waiting one.
                let Some(job) = runs
                    .get(&id)
                    .and_then(|r| api::why::explained_run(r))
                    .filter(|j| j.state == RunState::Pending && api::why::sees(&c2, &scope, j))
                else {
                    continue;
                };
                if whys.len() == QUEUE_SHOWN {
                    left_out += 1;
                    continue;
                }
                whys.push(api::why::explain_for(
                    &explainer, &c2, &scope, job, &flagged,
                ));
            }
            Ok(queue_body(t, whys, left_out))
        })
        .await
    }
    .await;
    answer(&caller, path, "Waiting queue", result)
}

fn queue_body(t: i64, whys: Vec<Why>, left_out: usize) -> String {
    let mut out = format!(
        "<p>Jobs waiting as of {}, the ones you may see, grouped by team, highest priority first. \
Tier and rank are those the scheduler gives the job now (rank 1 is first); the reason is \
budgetd's explanation (as <code>budgetctl why</code> prints it). The earliest opening is the \
first instant the preemption rule lets the job take a running job's GPUs, when there is one; \
budgetd does not know Slurm's own start estimate.</p>",
        time_el(t)
    );
    if whys.is_empty() {
        out.push_str("<p>No waiting job.</p>");
        return out;
    }
    let mut teams: BTreeMap<String, Vec<Why>> = BTreeMap::new();
    for w in whys {
        teams.entry(w.account.clone()).or_default().push(w);
    }
    for (team, mut jobs) in teams {
        jobs.sort_by(|a, b| b.priority.cmp(&a.priority).then(a.job_id.cmp(&b.job_id)));
        let name = escape(&team);
        out.push_str(&format!(
            "<table data-team=\"{name}\"><caption>{name}: {} waiting</caption><thead><tr>\
<th scope=\"col\">Job</th><th scope=\"col\">User</th><th scope=\"col\">GPUs</th><th scope=\"col\">Tier</th>\
<th scope=\"col\">Rank</th><th scope=\"col\">Why it waits</th><th scope=\"col\">Earliest opening</th></tr></thead><tbody>",
            jobs.len()
        ));
        for w in jobs {
            let rank = w.rank.map_or_else(
                || "none".to_string(),
                |r| format!("{r} of {}", w.num_leaves),
            );
            let opening = w
                .preemption
                .may_preempt
                .first()
                .map_or_else(|| "not known".to_string(), |o| time_el(o.at));
            out.push_str(&format!(
                "<tr data-job=\"{}\"><th scope=\"row\">{}</th><td>{}</td><td class=\"n\">{}</td><td>{}</td>\
<td class=\"n\">{}</td><td>{}</td><td>{}</td></tr>",
                w.job_id,
                w.job_id,
                escape(&w.user),
                w.gpus,
                w.tier.words(),
                escape(&rank),
                escape(w.wait.as_deref().unwrap_or("")),
                opening
            ));
        }
        out.push_str("</tbody></table>");
    }
    if left_out > 0 {
        out.push_str(&format!(
            "<p>{left_out} more waiting jobs not shown (this page explains the first {QUEUE_SHOWN} by job id); \
ask <code>budgetctl why JOB</code> for one of them.</p>"
        ));
    }
    out
}

/// `GET /ui/preemptions`.
pub async fn preemptions(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    let path = "/ui/preemptions";
    let t = now();
    let c2 = caller.clone();
    let result = async {
        let _permit = st.expensive_read(&caller).await?;
        let stale = st.config.agent_stale_secs;
        st.with_store(move |s| {
            let window = s.policy().window_secs;
            let since = t - window;
            // The preemption record is for readers, as in the API.
            let lost = if c2.reads_all() {
                Some(api::preemptions::report_since(s, since)?)
            } else {
                None
            };
            let idle = api::idle::report_for(s, &c2, t, Some(since), t, stale)?;
            Ok(preemptions_body(t, since, lost, &idle))
        })
        .await
    }
    .await;
    answer(&caller, path, "Preemptions and idle GPUs", result)
}

fn preemptions_body(
    t: i64,
    since: i64,
    lost: Option<budget_protocol::preemption::PreemptionReport>,
    idle: &budget_protocol::idle::IdleReport,
) -> String {
    let mut out = format!(
        "<p data-since=\"{since}\" data-at=\"{t}\">From {} to {}.</p><h2>Preemptions and lost work</h2>",
        time_el(since),
        time_el(t)
    );
    match lost {
        None => out.push_str(
            "<p>Your token's role may not read the preemption record (the API answers it to readers only).</p>",
        ),
        Some(r) if r.by_account.is_empty() => out.push_str("<p>No preemption in this interval.</p>"),
        Some(r) => {
            out.push_str(
                "<table><caption>Preemptions per team</caption><thead><tr><th scope=\"col\">Team</th>\
<th scope=\"col\">Preemptions</th><th scope=\"col\">GPU-hours lost</th><th scope=\"col\">By reason</th></tr></thead><tbody>",
            );
            for a in &r.by_account {
                let reasons: Vec<String> = a
                    .by_reason
                    .iter()
                    .map(|(k, v)| format!("{}: {v}", escape(k)))
                    .collect();
                let name = escape(&a.account);
                out.push_str(&format!(
                    "<tr data-account=\"{name}\"><th scope=\"row\">{name}</th><td class=\"n\">{}</td><td class=\"n\">{}</td><td>{}</td></tr>",
                    a.preemptions,
                    num(a.gpu_hours_lost),
                    reasons.join(", ")
                ));
            }
            out.push_str("</tbody></table>");
        }
    }
    out.push_str(&format!(
        "<h2>Idle (\"squatted\") GPUs</h2><p>GPU-hours that jobs held while their GPUs sat idle past {} \
(unweighted), as the node agents reported them; jobs you may see.</p>",
        escape(&span(idle.threshold_secs))
    ));
    if idle.by_account.is_empty() {
        out.push_str("<p>No idle GPU-hours in this interval.</p>");
        return out;
    }
    out.push_str(
        "<table><caption>Idle GPU-hours per team</caption><thead><tr><th scope=\"col\">Team</th>\
<th scope=\"col\">Idle GPU-hours</th><th scope=\"col\">Jobs</th><th scope=\"col\">GPUs idle now</th>\
<th scope=\"col\">Jobs flagged now</th></tr></thead><tbody>",
    );
    for a in &idle.by_account {
        let name = a
            .account
            .as_deref()
            .map_or_else(|| "(jobs the ledger does not know)".to_string(), escape);
        out.push_str(&format!(
            "<tr data-idle=\"{name}\"><th scope=\"row\">{name}</th><td class=\"n\">{}</td><td class=\"n\">{}</td>\
<td class=\"n\">{}</td><td class=\"n\">{}</td></tr>",
            num(a.idle_gpu_hours),
            a.jobs,
            a.idle_gpus_now,
            a.flagged_jobs
        ));
    }
    out.push_str("</tbody></table>");
    out
}

/// `GET /ui/drains`.
pub async fn drains(
    State(st): State<AppState>,
    Extension(Viewer(viewer)): Extension<Viewer>,
) -> Response {
    let Some(caller) = viewer else {
        return sign_in();
    };
    let t = now();
    let result = api::drains::statuses(&st)
        .await
        .map(|rows| drains_body(t, &rows));
    answer(&caller, "/ui/drains", "Drains", result)
}

fn drains_body(t: i64, rows: &[budget_protocol::drains::DrainStatus]) -> String {
    let mut out = format!(
        "<p>Maintenance drains as of {}. A node is empty once its last job has left: free-tier jobs are \
requeued at once, the others when their protected window ends; a job whose partition has PreemptMode=OFF \
is never requeued and runs to its time limit.</p>",
        time_el(t)
    );
    if rows.is_empty() {
        out.push_str("<p>No drain in progress.</p>");
        return out;
    }
    out.push_str(
        "<table><caption>Drained nodes</caption><thead><tr><th scope=\"col\">Node</th><th scope=\"col\">Reason</th>\
<th scope=\"col\">Since</th><th scope=\"col\">Slurm state</th><th scope=\"col\">Jobs left</th>\
<th scope=\"col\">Empty at (ETA)</th></tr></thead><tbody>",
    );
    for d in rows {
        let node = escape(&d.node);
        let eta = if d.empty {
            "empty now".to_string()
        } else {
            time_el(d.empty_at)
        };
        let to_limit = d
            .jobs
            .iter()
            .filter(|j| j.leaves == budget_protocol::drains::Leaves::TimeLimit)
            .count();
        let left = match to_limit {
            0 => d.jobs.len().to_string(),
            n => format!(
                "{} ({n} {} to {} time limit: PreemptMode=OFF)",
                d.jobs.len(),
                if n == 1 { "runs" } else { "run" },
                if n == 1 { "its" } else { "their" }
            ),
        };
        out.push_str(&format!(
            "<tr data-node=\"{node}\"><th scope=\"row\">{node}</th><td>{}</td><td>{}</td><td>{}</td>\
<td class=\"n\">{left}</td><td>{eta}</td></tr>",
            escape(&d.reason),
            time_el(d.since),
            escape(&d.slurm_state)
        ));
    }
    out.push_str("</tbody></table>");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acc(name: &str, parent: Option<&str>, ratio: f64, tier: Tier) -> ShareRow {
        ShareRow {
            account: name.into(),
            parent: parent.map(str::to_string),
            user: None,
            depth: 0,
            allocation_gpu_hours: 1.0,
            usage_gpu_hours: ratio,
            free_usage_gpu_hours: 0.0,
            ratio,
            rank: 1,
            leaf_rank: None,
            fair_share_factor: 1.0,
            tier,
            overcommit: false,
        }
    }

    #[test]
    fn an_inherited_over_budget_names_the_nearest_account_over_its_own() {
        let rows = [
            acc("root", None, 3.0, Tier::Budgeted),
            acc("a", Some("root"), 1.5, Tier::OverBudget),
            acc("a<1>", Some("a"), 0.5, Tier::OverBudget),
            acc("a2", Some("a<1>"), 0.0, Tier::OverBudget),
            acc("b", Some("root"), 0.2, Tier::Budgeted),
        ];
        let all: HashMap<&str, &ShareRow> = rows.iter().map(|r| (r.account.as_str(), r)).collect();
        let words = |i: usize, m: &HashMap<&str, &ShareRow>| account_tier(&rows[i], m);
        assert_eq!(words(0, &all), "no budget (the root)");
        assert_eq!(words(1, &all), "over budget");
        assert_eq!(words(2, &all), "over budget (via parent a)");
        assert_eq!(words(3, &all), "over budget (via ancestor a)");
        assert_eq!(words(4, &all), "within budget");
        // An ancestor the caller may not read is not named.
        let mut hidden = all.clone();
        hidden.remove("a");
        assert_eq!(words(2, &hidden), "over budget (via an account above it)");
        // A name is escaped as HTML.
        let rows2 = [acc("x", Some("a<1>"), 0.0, Tier::OverBudget)];
        let mut m = all.clone();
        let over = acc("a<1>", Some("a"), 1.0, Tier::OverBudget);
        m.insert("a<1>", &over);
        assert_eq!(
            account_tier(&rows2[0], &m),
            "over budget (via parent a&lt;1&gt;)"
        );
    }
}
