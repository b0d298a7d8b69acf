//! `budgetctl shadow`: what shadow mode found over the window
//! (`GET /v1/shadow`): how Slurm's order of the pending jobs differs from the
//! budget order, the preemptions the rule would have made with the work they
//! would have lost, and each team's shortfall against the rule's target.
//! budgetd computes every figure; this prints them.

use budget_protocol::shadow::{ROUTE, ShadowReport};
use budget_protocol::why::PeerReason;

use crate::api::Api;
use crate::output::{Out, local, num, render, time_arg};

fn tier(t: policy_core::Tier) -> &'static str {
    t.as_str()
}

fn reason(r: &PeerReason) -> String {
    match r {
        PeerReason::VictimFreeTier => "free tier".into(),
        PeerReason::VictimOverBudget => "over budget".into(),
        PeerReason::Rebalance {
            preemptor_side,
            victim_side,
            ..
        } => format!("rebalance {preemptor_side} < {victim_side}"),
        PeerReason::PartitionTier {
            preemptor_tier,
            victim_tier,
        } => format!("partition tier {preemptor_tier} > {victim_tier}"),
        PeerReason::Qos {
            preemptor_qos,
            victim_qos,
        } => format!("QOS {preemptor_qos} lists {victim_qos}"),
    }
}

fn text(v: &ShadowReport) -> String {
    let mut o = format!("shadow mode {} .. {}\n", local(v.since), local(v.at));
    let r = &v.order;
    o.push_str("\norder (Slurm's priority against the budget order):\n");
    match r.latest_at {
        None => o.push_str(
            "no queue sample in the window (is site_factor/budget loaded with mode=shadow?)\n",
        ),
        Some(t) => {
            o.push_str(&format!(
                "latest sample {}: {} pending, {} pairs ordered by the budget, {} ordered the other way by Slurm ({}), {} tied by Slurm\n",
                local(t),
                r.pending,
                r.pairs,
                r.discordant,
                if r.pairs > 0 {
                    format!("{}%", num(100.0 * r.discordant as f64 / r.pairs as f64, 1))
                } else {
                    "-".into()
                },
                r.slurm_ties,
            ));
            o.push_str(&format!(
                "rank correlation (Kendall tau-b): {} latest, {} mean over {} samples; discordant pairs {} on average\n",
                r.tau.map_or("-".into(), |t| num(t, 3)),
                r.mean_tau.map_or("-".into(), |t| num(t, 3)),
                r.samples,
                r.mean_discordant_share
                    .map_or("-".into(), |s| format!("{}%", num(100.0 * s, 1))),
            ));
            if !r.furthest.is_empty() {
                let rows: Vec<Vec<String>> = r
                    .furthest
                    .iter()
                    .map(|g| {
                        vec![
                            g.job_id.to_string(),
                            g.account.clone(),
                            g.user.clone(),
                            g.priority.to_string(),
                            tier(g.tier).to_string(),
                            (g.rank + 1).to_string(),
                            g.slurm_position.to_string(),
                            g.budget_position.to_string(),
                        ]
                    })
                    .collect();
                o.push_str("furthest apart:\n");
                o.push_str(&render(
                    &[
                        "JOB", "ACCOUNT", "USER", "PRIORITY", "TIER", "RANK", "SLURM #", "BUDGET #",
                    ],
                    &rows,
                ));
            }
        }
    }
    o.push_str(&format!(
        "\npreemptions the rule would have made (none was carried out): {}, {} GPU-hours of work lost\n",
        v.preemptions.len(),
        num(v.lost_gpu_hours, 3)
    ));
    if !v.preemptions.is_empty() {
        let rows: Vec<Vec<String>> = v
            .preemptions
            .iter()
            .map(|p| {
                vec![
                    local(p.at),
                    format!("{} ({}/{})", p.victim, p.account, p.user),
                    p.gpus.to_string(),
                    format!(
                        "{} ({}/{})",
                        p.preemptor, p.preemptor_account, p.preemptor_user
                    ),
                    num(p.lost_gpu_hours, 3),
                    reason(&p.reason),
                ]
            })
            .collect();
        o.push_str(&render(
            &["WHEN", "VICTIM", "GPUS", "PREEMPTOR", "LOST GPUH", "WHY"],
            &rows,
        ));
    }
    o.push_str("\nentitlement shortfall (weighted GPUs; target = min(entitled, demand)):\n");
    if v.shortfall.is_empty() {
        o.push_str("no sample\n");
    } else {
        let rows: Vec<Vec<String>> = v
            .shortfall
            .iter()
            .map(|t| {
                vec![
                    t.account.clone(),
                    num(t.held_gpus, 2),
                    num(t.entitled_gpus, 2),
                    num(t.demand_gpus, 2),
                    num(t.target_gpus, 2),
                    num(t.shortfall_gpus, 2),
                    num(t.shortfall_gpu_hours, 3),
                ]
            })
            .collect();
        o.push_str(&render(
            &[
                "ACCOUNT",
                "HELD",
                "ENTITLED",
                "DEMAND",
                "TARGET",
                "SHORT NOW",
                "SHORT GPUH",
            ],
            &rows,
        ));
    }
    o
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
        ROUTE.to_string()
    } else {
        format!("{ROUTE}?{}", q.join("&"))
    };
    let v: ShadowReport = api.get(&path)?;
    out.print(&v, text)
}
