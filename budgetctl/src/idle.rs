//! `budgetctl idle` and the idle line of `budgetctl why` (docs/design.md §8).
//!
//! The service decides which jobs are idle beyond the threshold and sums the
//! idle GPU-hours (`GET /v1/idle`); this prints them: flagged jobs first, then
//! idle GPU-hours per account over the window, then (for admins) how fresh
//! each node agent's latest report is.

use budget_protocol::idle::IdleReport;
use budget_protocol::why::Why;

use crate::api::Api;
use crate::output::{Out, dur, local, num, opt, render, time_arg};

fn idle_text(v: &IdleReport) -> String {
    let mut o = String::new();
    if v.flagged.is_empty() {
        o.push_str(&format!("no job idle beyond {}\n", dur(v.threshold_secs)));
    } else {
        o.push_str(&format!("jobs idle beyond {}:\n", dur(v.threshold_secs)));
        let rows: Vec<Vec<String>> = v
            .flagged
            .iter()
            .map(|j| {
                vec![
                    j.job_id.to_string(),
                    opt(j.account.as_deref()),
                    opt(j.user.as_deref()),
                    j.nodes.join(","),
                    format!(
                        "{}/{}",
                        j.gpus_idle,
                        j.gpus.map_or("?".into(), |g| g.to_string())
                    ),
                    local(j.idle_since),
                    dur(j.idle_secs),
                ]
            })
            .collect();
        o.push_str(&render(
            &[
                "JOB",
                "ACCOUNT",
                "USER",
                "NODES",
                "IDLE GPUS",
                "IDLE SINCE",
                "FOR",
            ],
            &rows,
        ));
    }
    o.push_str(&format!(
        "\nidle GPU-hours {} .. {}:\n",
        local(v.from),
        local(v.at)
    ));
    let rows: Vec<Vec<String>> = v
        .by_account
        .iter()
        .map(|r| {
            vec![
                r.account.as_deref().unwrap_or("(unknown job)").to_string(),
                num(r.idle_gpu_hours, 3),
                r.jobs.to_string(),
                r.flagged_jobs.to_string(),
                r.idle_gpus_now.to_string(),
            ]
        })
        .collect();
    if rows.is_empty() {
        o.push_str("none\n");
    } else {
        o.push_str(&render(
            &["ACCOUNT", "IDLE GPUH", "JOBS", "FLAGGED", "IDLE GPUS NOW"],
            &rows,
        ));
    }
    if !v.nodes.is_empty() {
        let rows: Vec<Vec<String>> = v
            .nodes
            .iter()
            .map(|n| {
                vec![
                    n.node.clone(),
                    format!("{}s", n.age_secs),
                    if n.nvml { "yes" } else { "no" }.into(),
                    n.gpus.to_string(),
                    if n.stale { "stale" } else { "ok" }.into(),
                ]
            })
            .collect();
        o.push_str("\nnode agents:\n");
        o.push_str(&render(
            &["NODE", "LAST REPORT", "NVML", "GPUS", "STATE"],
            &rows,
        ));
    }
    o
}

/// The `why` line for a job flagged idle (empty when it is not).
pub fn why_text(w: &Why) -> String {
    let Some(f) = &w.idle else {
        return String::new();
    };
    format!(
        "idle:      {} GPU(s) idle since {} ({}) on {}: flagged as squatting\n",
        f.gpus_idle,
        local(f.idle_since),
        dur(f.idle_secs),
        f.nodes.join(",")
    )
}

pub fn run(api: &Api, out: Out, since: Option<&str>, at: Option<&str>) -> anyhow::Result<()> {
    let mut q = Vec::new();
    if let Some(v) = since {
        q.push(format!("since={}", time_arg("since", v)?));
    }
    if let Some(v) = at {
        q.push(format!("at={}", time_arg("at", v)?));
    }
    let path = if q.is_empty() {
        "/v1/idle".to_string()
    } else {
        format!("/v1/idle?{}", q.join("&"))
    };
    let v: IdleReport = api.get(&path)?;
    out.print(&v, idle_text)
}
