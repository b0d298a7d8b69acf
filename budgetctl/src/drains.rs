//! `budgetctl drain NODES --reason TEXT`, `budgetctl drains`, `budgetctl undrain NODES`,
//! `budgetctl usage --preemptions`, and the preemption-timing lines of `why`.
//!
//! The service does the work (`/v1/drains`, `/v1/preemptions`); this prints it: per
//! node the instant it will be empty and the jobs holding it, each with the instant
//! the drain requeues it (now for free tier, else its protected window's end).

use budget_protocol::RunState;
use budget_protocol::drains::{DrainRequest, DrainStatus, Undrained};
use budget_protocol::preemption::{self, PreemptionReport};
use budget_protocol::why::{Outlook, Why};

use crate::api::{Api, enc};
use crate::output::{Out, eta, local, now, num, render, time_arg};

/// The drain table: one block per node.
fn drains_text(items: &Vec<DrainStatus>) -> String {
    let now = now();
    if items.is_empty() {
        return "no drains\n".into();
    }
    let mut o = String::new();
    for d in items {
        o.push_str(&format!(
            "{}: {} (reason \"{}\", since {}, by {}); {}\n",
            d.node,
            d.slurm_state,
            d.reason,
            local(d.since),
            d.actor,
            if d.empty {
                "empty now".to_string()
            } else {
                format!("empty at {} ({})", local(d.empty_at), eta(d.empty_at, now))
            }
        ));
        let rows: Vec<Vec<String>> = d
            .jobs
            .iter()
            .map(|j| {
                vec![
                    format!("  {}", j.job_id),
                    j.run.to_string(),
                    format!("{}/{}", j.account, j.user),
                    j.gpus.to_string(),
                    if j.free_tier { "free" } else { "contract" }.into(),
                    format!("{} ({})", local(j.requeue_at), eta(j.requeue_at, now)),
                ]
            })
            .collect();
        if !rows.is_empty() {
            o.push_str(&render(
                &[
                    "  JOB",
                    "RUN",
                    "ACCOUNT/USER",
                    "GPUS",
                    "KIND",
                    "REQUEUED AT",
                ],
                &rows,
            ));
        }
    }
    o
}

pub fn drain(api: &Api, out: Out, nodes: &str, reason: &str) -> anyhow::Result<()> {
    let req = DrainRequest {
        nodes: nodes.to_string(),
        reason: reason.to_string(),
    };
    let v: Vec<DrainStatus> = api.send_json("POST", "/v1/drains", &req)?;
    out.print(&v, drains_text)
}

pub fn drains(api: &Api, out: Out) -> anyhow::Result<()> {
    let v: Vec<DrainStatus> = api.get("/v1/drains")?;
    out.print(&v, drains_text)
}

pub fn undrain(api: &Api, out: Out, nodes: &str) -> anyhow::Result<()> {
    let v: Undrained = api.delete_for(&format!("/v1/drains/{}", enc(nodes)))?;
    out.print(&v, |v| format!("undrained {}\n", v.undrained.join(",")))
}

/// `usage --preemptions`: preemptions and GPU-hours lost per account.
pub fn preemptions(api: &Api, out: Out, since: Option<&str>) -> anyhow::Result<()> {
    let path = match since {
        Some(sn) => format!("{}?since={}", preemption::ROUTE, time_arg("since", sn)?),
        None => preemption::ROUTE.into(),
    };
    let v: PreemptionReport = api.get(&path)?;
    out.print(&v, |v| {
        let rows: Vec<Vec<String>> = v
            .by_account
            .iter()
            .map(|r| {
                let reasons: Vec<String> = r
                    .by_reason
                    .iter()
                    .map(|(k, n)| format!("{k}={n}"))
                    .collect();
                vec![
                    r.account.clone(),
                    r.preemptions.to_string(),
                    num(r.gpu_hours_lost, 3),
                    reasons.join(" "),
                ]
            })
            .collect();
        render(&["ACCOUNT", "PREEMPTIONS", "GPUH_LOST", "BY_REASON"], &rows)
    })
}

/// Jobs with the instant the rule lets them go, one per line.
fn outlooks(list: &[Outlook], verb: &str, now: i64) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let items: Vec<String> = list
        .iter()
        .map(|x| {
            format!(
                "job {} ({}/{}, {} GPUs) {verb} {} ({}): {} ({})",
                x.job_id,
                x.account,
                x.user,
                x.gpus,
                local(x.at),
                eta(x.at, now),
                x.reason.name(),
                x.reason.words()
            )
        })
        .collect();
    format!("\n  {}", items.join("\n  "))
}

/// Lines `why` adds from its `preemption` part.
pub fn why_text(w: &Why) -> String {
    let p = &w.preemption;
    let now = w.at;
    let mut o = String::new();
    if w.state == RunState::Pending {
        o.push_str(&format!(
            "may preempt: {}\n",
            outlooks(&p.may_preempt, "from", now)
        ));
    }
    if w.state == RunState::Running {
        o.push_str(&format!(
            "may be taken by: {}\n",
            outlooks(&p.may_be_taken_by, "from", now)
        ));
        if let Some(t) = p.drain_requeue_at {
            o.push_str(&format!(
                "drain: node drained; requeued at {} ({})\n",
                local(t),
                eta(t, now)
            ));
        }
    }
    if let Some(x) = &p.preempted {
        o.push_str(&format!(
            "run {} preempted at {} by {} ({}: {}); the lost run had {} GPU-hours\n",
            x.run,
            local(x.at),
            match x.preemptor {
                Some(j) => format!(
                    "job {j} ({})",
                    x.preemptor_account.as_deref().unwrap_or("?")
                ),
                None => "a maintenance drain".into(),
            },
            x.reason.as_str(),
            x.reason.words(),
            num(x.gpu_hours, 3)
        ));
    }
    o
}
