//! `budgetctl drain NODES --reason TEXT`, `budgetctl drains`, `budgetctl undrain NODES`,
//! `budgetctl usage --preemptions`, and the preemption-timing lines of `why`.
//!
//! The service does the work (`/v1/drains`, `/v1/preemptions`); this prints it: per
//! node the instant it will be empty and the jobs holding it, each with the instant
//! the drain requeues it (now for free tier, else its protected window's end).

use serde_json::{Value, json};

use super::table::{num, render};
use super::{Ctl, enc, local, s, time_arg};

/// Seconds from now, as "in 40 s" / "now".
fn eta(at: i64, now: i64) -> String {
    let d = at - now;
    if d <= 0 {
        "now".into()
    } else {
        format!("in {d} s")
    }
}

/// The drain table: one block per node.
fn drains_text(v: &Value) -> String {
    let now = crate::timefmt::now();
    let mut o = String::new();
    let items = v.as_array().cloned().unwrap_or_default();
    if items.is_empty() {
        return "no drains\n".into();
    }
    for d in items {
        let empty_at = d["empty_at"].as_i64().unwrap_or(now);
        o.push_str(&format!(
            "{}: {} (reason \"{}\", since {}, by {}); {}\n",
            s(&d["node"]),
            s(&d["slurm_state"]),
            s(&d["reason"]),
            local(d["since"].as_i64().unwrap_or(0)),
            s(&d["actor"]),
            if d["empty"] == true {
                "empty now".to_string()
            } else {
                format!("empty at {} ({})", local(empty_at), eta(empty_at, now))
            }
        ));
        let rows: Vec<Vec<String>> = d["jobs"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|j| {
                        let at = j["requeue_at"].as_i64().unwrap_or(now);
                        vec![
                            format!("  {}", s(&j["job_id"])),
                            s(&j["run"]),
                            format!("{}/{}", s(&j["account"]), s(&j["user"])),
                            s(&j["gpus"]),
                            if j["free_tier"] == true {
                                "free"
                            } else {
                                "contract"
                            }
                            .into(),
                            format!("{} ({})", local(at), eta(at, now)),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default();
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

impl Ctl {
    pub(super) fn drain(&self, nodes: &str, reason: &str) -> anyhow::Result<()> {
        let v = self.send_json(
            "POST",
            "/v1/drains",
            &json!({ "nodes": nodes, "reason": reason }),
        )?;
        self.out(&v, drains_text)
    }

    pub(super) fn drains(&self) -> anyhow::Result<()> {
        let v = self.get("/v1/drains")?;
        self.out(&v, drains_text)
    }

    pub(super) fn undrain(&self, nodes: &str) -> anyhow::Result<()> {
        let v = self.send("DELETE", &format!("/v1/drains/{}", enc(nodes)), None)?;
        self.out(&v, |v| {
            let n: Vec<String> = v["undrained"]
                .as_array()
                .map(|a| a.iter().map(s).collect())
                .unwrap_or_default();
            format!("undrained {}\n", n.join(","))
        })
    }

    /// `usage --preemptions`: preemptions and GPU-hours lost per account.
    pub(super) fn preemptions(&self, since: Option<&str>) -> anyhow::Result<()> {
        let path = match since {
            Some(sn) => format!("/v1/preemptions?since={}", time_arg("since", sn)?),
            None => "/v1/preemptions".into(),
        };
        let v = self.get(&path)?;
        self.out(&v, |v| {
            let rows: Vec<Vec<String>> = v["by_account"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|r| {
                            let reasons: Vec<String> = r["by_reason"]
                                .as_object()
                                .map(|m| m.iter().map(|(k, n)| format!("{k}={n}")).collect())
                                .unwrap_or_default();
                            vec![
                                s(&r["account"]),
                                s(&r["preemptions"]),
                                num(r["gpu_hours_lost"].as_f64().unwrap_or(0.0), 3),
                                reasons.join(" "),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            render(&["ACCOUNT", "PREEMPTIONS", "GPUH_LOST", "BY_REASON"], &rows)
        })
    }
}

/// Lines `why` adds from the `preemption` object.
pub(super) fn why_text(w: &Value) -> String {
    let p = &w["preemption"];
    let now = w["at"].as_i64().unwrap_or(0);
    let mut o = String::new();
    let list = |key: &str, verb: &str| -> String {
        let items: Vec<String> = p[key]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|x| {
                        let at = x["at"].as_i64().unwrap_or(now);
                        format!(
                            "job {} ({}/{}, {} GPUs) {verb} {} ({}): {}",
                            s(&x["job_id"]),
                            s(&x["account"]),
                            s(&x["user"]),
                            s(&x["gpus"]),
                            local(at),
                            eta(at, now),
                            s(&x["reason"]["reason"])
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if items.is_empty() {
            "none".into()
        } else {
            format!("\n  {}", items.join("\n  "))
        }
    };
    if w["state"] == "pending" {
        o.push_str(&format!("may preempt: {}\n", list("may_preempt", "from")));
    }
    if w["state"] == "running" {
        o.push_str(&format!(
            "may be taken by: {}\n",
            list("may_be_taken_by", "from")
        ));
        if let Some(t) = p["drain_requeue_at"].as_i64() {
            o.push_str(&format!(
                "drain: node drained; requeued at {} ({})\n",
                local(t),
                eta(t, now)
            ));
        }
    }
    if let Some(x) = p["preempted"].as_object() {
        o.push_str(&format!(
            "run {} preempted at {} by {} ({}); the lost run had {} GPU-hours\n",
            s(&x["run"].clone()),
            local(x["at"].as_i64().unwrap_or(0)),
            match x["preemptor"].as_u64() {
                Some(j) => format!(
                    "job {j} ({})",
                    x["preemptor_account"].as_str().unwrap_or("?")
                ),
                None => "a maintenance drain".into(),
            },
            s(&x["reason"]),
            num(x["gpu_hours"].as_f64().unwrap_or(0.0), 3)
        ));
    }
    o
}
