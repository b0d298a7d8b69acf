//! `budgetctl drain NODES --reason TEXT`, `budgetctl drains`, `budgetctl undrain NODES`,
//! `budgetctl usage --preemptions`, and the preemption-timing lines of `why`.
//!
//! The service does the work (`/v1/drains`, `/v1/preemptions`); this prints it: per
//! node the instant it will be empty and the jobs holding it, each with the instant
//! it leaves: when the drain requeues it (now for free tier, else its protected
//! window's end), or, for a job of a `PreemptMode=OFF` partition, which nothing
//! requeues, its end at its time limit.

use budget_protocol::RunState;
use budget_protocol::drains::{DrainRequest, DrainStatus, HoldingJob, Leaves, Undrained};
use budget_protocol::preemption::{self, PreemptionReport};
use budget_protocol::why::{Outlook, Why};

use crate::api::{Api, enc};
use crate::output::{Out, eta, local, now, num, render, time_arg};

/// How a holding job leaves its node, in words: requeued, or running to its
/// time limit where its partition forbids preemption.
fn leaves_text(j: &HoldingJob, now: i64) -> String {
    match j.leaves {
        Leaves::Requeue => format!(
            "requeued at {} ({})",
            local(j.requeue_at),
            eta(j.requeue_at, now)
        ),
        Leaves::TimeLimit => time_limit_text(&j.partition, Some(j.requeue_at), now),
    }
}

/// A drained node's job of a `PreemptMode=OFF` `partition` (empty: unknown),
/// in words: it runs to its time limit (at `end`, when known) and is never
/// requeued. `budgetctl drains` and `why` word it alike.
fn time_limit_text(partition: &str, end: Option<i64>, now: i64) -> String {
    let part = if partition.is_empty() {
        "its partition".to_string()
    } else {
        format!("partition {partition}")
    };
    let ends = match end {
        Some(t) => format!(", ends at {} ({})", local(t), eta(t, now)),
        None => String::new(),
    };
    format!("runs to its time limit{ends}: never requeued ({part} has PreemptMode=OFF)")
}

/// The node line's note when the node waits for jobs that run to their time
/// limit (none of them is requeued, so the drain cannot end sooner).
fn held_to_time_limit(d: &DrainStatus) -> String {
    let ids: Vec<String> = d
        .jobs
        .iter()
        .filter(|j| j.leaves == Leaves::TimeLimit && j.requeue_at >= d.empty_at)
        .map(|j| j.job_id.to_string())
        .collect();
    match ids.len() {
        0 => String::new(),
        1 => format!(
            ", when job {} reaches its time limit (PreemptMode=OFF: never requeued)",
            ids[0]
        ),
        _ => format!(
            ", when jobs {} reach their time limit (PreemptMode=OFF: never requeued)",
            ids.join(", ")
        ),
    }
}

/// The drain table at `now`: one block per node.
fn drains_text(items: &[DrainStatus], now: i64) -> String {
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
                format!(
                    "empty at {} ({}){}",
                    local(d.empty_at),
                    eta(d.empty_at, now),
                    held_to_time_limit(d)
                )
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
                    leaves_text(j, now),
                ]
            })
            .collect();
        if !rows.is_empty() {
            o.push_str(&render(
                &["  JOB", "RUN", "ACCOUNT/USER", "GPUS", "KIND", "LEAVES"],
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
    out.print(&v, |v| drains_text(v, now()))
}

pub fn drains(api: &Api, out: Out) -> anyhow::Result<()> {
    let v: Vec<DrainStatus> = api.get("/v1/drains")?;
    out.print(&v, |v| drains_text(v, now()))
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
        if let Some(d) = &p.drain_waits {
            o.push_str(&format!(
                "drain: node drained; the drain waits for this job: it {}\n",
                time_limit_text(&d.partition, d.until, now)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: u32, leaves: Leaves, at: i64, partition: &str) -> HoldingJob {
        HoldingJob {
            job_id: id,
            run: 0,
            account: "teama".into(),
            user: "alice".into(),
            gpus: 1,
            free_tier: false,
            start: Some(1000),
            requeue_at: at,
            leaves,
            partition: partition.into(),
        }
    }

    #[test]
    fn a_job_of_a_preempt_mode_off_partition_reads_as_running_to_its_time_limit() {
        let d = DrainStatus {
            node: "n1".into(),
            reason: "fan".into(),
            since: 1,
            actor: "root".into(),
            slurm_state: "MIXED+DRAIN".into(),
            empty: false,
            empty_at: 9000,
            jobs: vec![
                job(41, Leaves::Requeue, 2000, "gpu"),
                job(42, Leaves::TimeLimit, 9000, "frozen"),
            ],
        };
        let text = drains_text(std::slice::from_ref(&d), 1000);
        assert!(
            text.contains(&format!(
                "empty at {} (in 8000 s), when job 42 reaches its time limit (PreemptMode=OFF: never requeued)",
                local(9000)
            )),
            "{text}"
        );
        let row = |id: &str| {
            text.lines()
                .find(|l| l.trim_start().starts_with(id))
                .unwrap_or_default()
                .to_string()
        };
        assert!(
            row("41").contains(&format!("requeued at {} (in 1000 s)", local(2000))),
            "{text}"
        );
        assert!(
            row("42").contains(&format!(
                "runs to its time limit, ends at {} (in 8000 s): never requeued (partition frozen has PreemptMode=OFF)",
                local(9000)
            )),
            "{text}"
        );
        // From a budgetd that predates `leaves`: every job is requeued, as before.
        let old: HoldingJob = serde_json::from_value(serde_json::json!({
            "job_id": 7, "run": 0, "account": "a", "user": "u", "gpus": 1,
            "free_tier": false, "start": 1000, "requeue_at": 2000
        }))
        .expect("old answer");
        assert_eq!((old.leaves, old.partition.as_str()), (Leaves::Requeue, ""));
        assert!(leaves_text(&old, 1000).starts_with("requeued at"));
    }

    /// A running job's `why` answer at 1000 with `preemption` as given (the
    /// other fields as a budgetd answers them, `preemption`'s defaulted ones
    /// left out, as an older budgetd would).
    fn running_why(preemption: serde_json::Value) -> Why {
        serde_json::from_value(serde_json::json!({
            "at": 1000, "job_id": 42, "run": 0, "account": "teama", "user": "alice",
            "state": "running", "gpus": 1, "free_tier": false, "start": 900,
            "min_runtime_secs": 60, "protected_now": false, "tier": "budgeted",
            "num_leaves": 1, "fair_share_factor": 0.5, "priority": 1,
            "priority_parts": {"tier": "budgeted", "rank_level": 0, "age_minutes": 0},
            "path": [], "could_preempt": [], "preemptable_by": [],
            "preemption": preemption
        }))
        .expect("why answer")
    }

    #[test]
    fn why_says_the_drain_waits_for_a_preempt_mode_off_jobs_time_limit() {
        let w = running_why(serde_json::json!({
            "may_preempt": [], "may_be_taken_by": [],
            "drain_waits": {"partition": "frozen", "until": 9000}
        }));
        let text = why_text(&w);
        assert!(
            text.contains(&format!(
                "drain: node drained; the drain waits for this job: it runs to its time limit, ends at {} (in 8000 s): never requeued (partition frozen has PreemptMode=OFF)\n",
                local(9000)
            )),
            "{text}"
        );
        assert!(!text.contains("requeued at"), "{text}");
        // No time limit in the ledger: no time is made up.
        let w = running_why(serde_json::json!({
            "may_preempt": [], "may_be_taken_by": [],
            "drain_waits": {"partition": "frozen", "until": null}
        }));
        assert!(
            why_text(&w).contains(
                "drain: node drained; the drain waits for this job: it runs to its time limit: never requeued (partition frozen has PreemptMode=OFF)\n"
            ),
            "{}",
            why_text(&w)
        );
        // From a budgetd that predates `drain_waits`: the requeue line as before.
        let w = running_why(serde_json::json!({
            "may_preempt": [], "may_be_taken_by": [], "drain_requeue_at": 2000
        }));
        assert_eq!(w.preemption.drain_waits, None);
        let text = why_text(&w);
        assert!(
            text.contains(&format!(
                "drain: node drained; requeued at {} (in 1000 s)",
                local(2000)
            )) && !text.contains("PreemptMode"),
            "{text}"
        );
    }
}
