//! `budgetctl share|usage|usage import|audit|why`: the fair-share table,
//! usage, sacct history import, the audit log and one job's explanation.

use anyhow::Context;
use budget_protocol::RunState;
use budget_protocol::reports::{ImportReport, ShareReport, UsageReport};
use budget_protocol::time::zone;
use budget_protocol::tree::AuditEntry;
use budget_protocol::why::{PreemptPeer, Why};
use policy_core::Tier;
use serde_json::Value;

use crate::api::{Api, enc};
use crate::args::UsageArgs;
use crate::output::{Out, emit, local, num, opt, print_json, render, time_arg};

pub fn share(api: &Api, out: Out, at: Option<&str>) -> anyhow::Result<()> {
    let path = match at {
        Some(a) => format!("/v1/share?at={}", time_arg("at", a)?),
        None => "/v1/share".to_string(),
    };
    let v: ShareReport = api.get(&path)?;
    if out.json {
        return print_json(&v.rows);
    }
    let rows: Vec<Vec<String>> = v
        .rows
        .iter()
        .map(|r| {
            let indent = "  ".repeat(r.depth);
            vec![
                format!("{indent}{}", r.user.as_deref().unwrap_or(&r.account)),
                if r.user.is_none() {
                    "-".into()
                } else {
                    r.account.clone()
                },
                num(r.allocation_gpu_hours, 3),
                num(r.usage_gpu_hours, 3),
                num(r.ratio, 3),
                r.rank.to_string(),
                opt(r.leaf_rank),
                num(r.fair_share_factor, 3),
                r.tier.as_str().to_string(),
            ]
        })
        .collect();
    emit(&format!(
        "fair share at {} (window {})\n",
        local(v.at),
        policy_core::format_duration(v.window_secs)
    ))?;
    emit(&render(
        &[
            "ACCOUNT/USER",
            "OF",
            "ALLOC_GPUH",
            "USAGE_GPUH",
            "RATIO",
            "RANK",
            "LEAF",
            "FS_FACTOR",
            "TIER",
        ],
        &rows,
    ))
}

pub fn usage(api: &Api, out: Out, u: &UsageArgs) -> anyhow::Result<()> {
    let mut path = format!("/v1/usage?by={}", u.by);
    if let Some(a) = &u.at {
        path.push_str(&format!("&at={}", time_arg("at", a)?));
    }
    if let Some(sn) = &u.since {
        path.push_str(&format!("&since={}", time_arg("since", sn)?));
    }
    let v: UsageReport = api.get(&path)?;
    out.print(&v, |v| {
        let by_user = v.by == "user";
        let rows: Vec<Vec<String>> = v
            .rows
            .iter()
            .map(|r| {
                let mut row = vec![r.account.clone()];
                if by_user {
                    row.push(opt(r.user.as_deref()));
                }
                row.extend([
                    num(r.usage_gpu_hours, 3),
                    num(r.raw_gpu_hours, 3),
                    num(r.free_gpu_hours, 3),
                ]);
                row
            })
            .collect();
        let headers: &[&str] = if by_user {
            &["ACCOUNT", "USER", "USAGE_GPUH", "RAW_GPUH", "FREE_GPUH"]
        } else {
            &["ACCOUNT", "USAGE_GPUH", "RAW_GPUH", "FREE_GPUH"]
        };
        format!(
            "usage from {} to {}\n{}",
            local(v.from),
            local(v.to),
            render(headers, &rows)
        )
    })
}

pub fn import(
    api: &Api,
    out: Out,
    file: &std::path::Path,
    skip_invalid: bool,
    tz: Option<&str>,
) -> anyhow::Result<()> {
    let text = std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
    let tz_name = match tz {
        Some(t) => Some(t.to_string()),
        None => zone(None)
            .ok()
            .and_then(|z| z.iana_name().map(str::to_string)),
    };
    let mut path = format!("/v1/usage/import?skip_invalid={skip_invalid}");
    if let Some(t) = tz_name {
        path.push_str(&format!("&tz={}", enc(&t)));
    }
    let v: ImportReport = api.send_text("POST", &path, text)?;
    out.print(&v, |v| {
        let mut o = format!(
            "{} lines, {} runs: {} new, {} updated, {} unchanged; {} skipped (not started)\n",
            v.lines,
            v.runs,
            v.inserted,
            v.updated,
            v.unchanged,
            v.skipped.len()
        );
        if !v.conflicts.is_empty() {
            o.push_str(&format!(
                "{} conflicting runs not imported (job id stored as another job):\n",
                v.conflicts.len()
            ));
            for c in &v.conflicts {
                o.push_str(&format!("  {}\n", c.error));
            }
        }
        if !v.invalid.is_empty() {
            o.push_str(&format!(
                "{} invalid lines not imported:\n",
                v.invalid.len()
            ));
            for e in &v.invalid {
                o.push_str(&format!("  line {}: {}\n", e.line, e.error));
            }
        }
        o
    })
}

pub fn audit(api: &Api, out: Out, limit: i64) -> anyhow::Result<()> {
    let all: Vec<AuditEntry> = api.get("/v1/audit?limit=100000")?;
    let keep = usize::try_from(limit.max(0)).unwrap_or(0);
    let shown = &all[all.len().saturating_sub(keep)..];
    out.print(&shown, |shown| {
        let rows: Vec<Vec<String>> = shown
            .iter()
            .map(|e| {
                let old = e.old.clone().unwrap_or(Value::Null);
                let new = e.new.clone().unwrap_or(Value::Null);
                let change = match (&old, &new) {
                    (Value::Null, n) => format!("new {n}"),
                    (o, Value::Null) => format!("was {o}"),
                    (o, n) => format!("{o} -> {n}"),
                };
                vec![
                    e.id.to_string(),
                    local(e.at),
                    e.actor.clone(),
                    e.action.clone(),
                    e.target.clone(),
                    change,
                ]
            })
            .collect();
        render(&["ID", "AT", "ACTOR", "ACTION", "TARGET", "CHANGE"], &rows)
    })
}

/// Jobs another may preempt or be preempted by, one per line.
fn peers(list: &[PreemptPeer]) -> String {
    if list.is_empty() {
        return "none".into();
    }
    let lines: Vec<String> = list
        .iter()
        .map(|p| {
            format!(
                "job {} ({}/{}, {} GPUs): {} ({})",
                p.job_id,
                p.account,
                p.user,
                p.gpus,
                p.reason.name(),
                p.reason.words()
            )
        })
        .collect();
    format!("\n  {}", lines.join("\n  "))
}

/// What budgetd's answers above cannot know: it reads no job's QOS nor any
/// QOS `Preempt=` list (its ledger holds partitions, not QOS), so its lists
/// are the contract's, the partitions' and the budgets' answer; only
/// `preempt/budget`, reading each job's QOS record in slurmctld, applies the
/// QOS order, and it decides before the budgets.
const QOS_UNKNOWN: &str = "qos:       not known here (budgetd reads no QOS Preempt= lists); preempt/budget reads them: a job whose QOS lists the other's takes it once its window is over, one whose QOS the other's lists never does, whatever the lists above say\n";

fn why_text(w: &Why) -> String {
    let mut o = format!(
        "job {} run {}: {}/{}, {}, {} GPU(s){}{}\n",
        w.job_id,
        w.run,
        w.account,
        w.user,
        w.state.as_str(),
        w.gpus,
        w.gpu_type
            .as_deref()
            .map(|t| format!(" {t}"))
            .unwrap_or_default(),
        if w.free_tier { ", free tier" } else { "" },
    );
    // The rule's ranking tier (policy_core::rebalance, `tier_projection`, `tier_band`)
    // can differ from the window's: an account over budget whose ratio, projected
    // ahead at the GPUs it holds, falls below 1 (or over by less than a band and below
    // its entitled GPUs) ranks with budgeted jobs; one within budget heading past 1
    // ranks with over-budget jobs. Preemption reads the window's tier.
    let over_in_window = w.path.iter().any(|st| st.tier == Tier::OverBudget);
    let note = match (w.tier, over_in_window) {
        (Tier::Budgeted, true) => {
            " (over budget in the window, but heading below its allocation at the GPUs it holds, or within the tier band: ranks with budgeted jobs, preempts no one)"
        }
        (Tier::OverBudget, false) if !w.path.is_empty() && !w.free_tier => {
            " (within budget in the window, but heading past its allocation at the GPUs it holds: ranks with over-budget jobs)"
        }
        _ => "",
    };
    o.push_str(&format!(
        "tier:      {}{}\nrank:      {} of {} (fair-share factor {})\n",
        w.tier.as_str(),
        note,
        opt(w.rank),
        w.num_leaves,
        num(w.fair_share_factor, 3)
    ));
    let pp = &w.priority_parts;
    o.push_str(&format!(
        "priority:  {} (tier {}, rank level {}, age {} min)\n",
        w.priority,
        pp.tier.as_str(),
        pp.rank_level,
        pp.age_minutes
    ));
    let path: Vec<String> = w
        .path
        .iter()
        .map(|st| format!("{} (r={}, #{})", st.node, num(st.ratio, 3), st.rank))
        .collect();
    o.push_str(&format!(
        "path:      {}\n",
        if path.is_empty() {
            "(account not in the tree)".into()
        } else {
            path.join(" > ")
        }
    ));
    match w.protected_until {
        Some(t) => o.push_str(&format!(
            "protected: until {}{}\n",
            local(t),
            if w.protected_now {
                " (protected now)"
            } else {
                " (window over)"
            }
        )),
        None => o.push_str("protected: no\n"),
    }
    match w.state {
        RunState::Pending => {
            if let Some(wait) = &w.wait {
                o.push_str(&format!("wait:      {wait}\n"));
            }
            o.push_str(&format!("could preempt: {}\n", peers(&w.could_preempt)));
            o.push_str(QOS_UNKNOWN);
        }
        RunState::Running => {
            o.push_str(&format!("preemptable by: {}\n", peers(&w.preemptable_by)));
            o.push_str(QOS_UNKNOWN);
        }
        RunState::Ended | RunState::Requeued => {}
    }
    o.push_str(&crate::drains::why_text(w));
    o.push_str(&crate::idle::why_text(w));
    o
}

pub fn why(api: &Api, out: Out, job: u32) -> anyhow::Result<()> {
    let w: Why = api.get(&format!("/v1/jobs/{job}/why"))?;
    out.print(&w, why_text)
}
