//! `budgetctl idle` and the idle line of `budgetctl why` (DESIGN 3.7).
//!
//! The service decides which jobs are idle beyond the threshold and sums the
//! idle GPU-hours (`GET /v1/idle`); this prints them: flagged jobs first, then
//! idle GPU-hours per account over the window, then (for admins) how fresh
//! each node agent's latest report is.

use serde_json::Value;

use super::table::{num, render};
use super::{Ctl, local, s, time_arg};

/// "2h 5m" / "40s": idle streak lengths read better than seconds.
fn dur(secs: i64) -> String {
    let (h, m, sec) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{sec}s"),
        (0, _) => format!("{m}m"),
        _ => format!("{h}h {m}m"),
    }
}

fn idle_text(v: &Value) -> String {
    let mut o = String::new();
    let threshold = v["threshold_secs"].as_i64().unwrap_or(0);
    let flagged = v["flagged"].as_array().cloned().unwrap_or_default();
    if flagged.is_empty() {
        o.push_str(&format!("no job idle beyond {}\n", dur(threshold)));
    } else {
        o.push_str(&format!("jobs idle beyond {}:\n", dur(threshold)));
        let rows: Vec<Vec<String>> = flagged
            .iter()
            .map(|j| {
                vec![
                    s(&j["job_id"]),
                    s(&j["account"]),
                    s(&j["user"]),
                    j["nodes"]
                        .as_array()
                        .map(|n| n.iter().map(s).collect::<Vec<_>>().join(","))
                        .unwrap_or_default(),
                    format!(
                        "{}/{}",
                        s(&j["gpus_idle"]),
                        j["gpus"].as_u64().map_or("?".into(), |g| g.to_string())
                    ),
                    local(j["idle_since"].as_i64().unwrap_or(0)),
                    dur(j["idle_secs"].as_i64().unwrap_or(0)),
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
        local(v["from"].as_i64().unwrap_or(0)),
        local(v["at"].as_i64().unwrap_or(0))
    ));
    let rows: Vec<Vec<String>> = v["by_account"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|r| {
                    vec![
                        r["account"].as_str().unwrap_or("(unknown job)").to_string(),
                        num(r["idle_gpu_hours"].as_f64().unwrap_or(0.0), 3),
                        s(&r["jobs"]),
                        s(&r["flagged_jobs"]),
                        s(&r["idle_gpus_now"]),
                    ]
                })
                .collect()
        })
        .unwrap_or_default();
    if rows.is_empty() {
        o.push_str("none\n");
    } else {
        o.push_str(&render(
            &["ACCOUNT", "IDLE GPUH", "JOBS", "FLAGGED", "IDLE GPUS NOW"],
            &rows,
        ));
    }
    let nodes = v["nodes"].as_array().cloned().unwrap_or_default();
    if !nodes.is_empty() {
        let rows: Vec<Vec<String>> = nodes
            .iter()
            .map(|n| {
                vec![
                    s(&n["node"]),
                    format!("{}s", s(&n["age_secs"])),
                    if n["nvml"] == true { "yes" } else { "no" }.into(),
                    s(&n["gpus"]),
                    if n["stale"] == true { "stale" } else { "ok" }.into(),
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
pub fn why_text(w: &Value) -> String {
    let f = &w["idle"];
    if !f.is_object() {
        return String::new();
    }
    format!(
        "idle:      {} GPU(s) idle since {} ({}) on {}: flagged as squatting\n",
        s(&f["gpus_idle"]),
        local(f["idle_since"].as_i64().unwrap_or(0)),
        dur(f["idle_secs"].as_i64().unwrap_or(0)),
        f["nodes"]
            .as_array()
            .map(|n| n.iter().map(s).collect::<Vec<_>>().join(","))
            .unwrap_or_default()
    )
}

impl Ctl {
    pub(super) fn idle(&self, since: Option<&str>, at: Option<&str>) -> anyhow::Result<()> {
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
        let v = self.get(&path)?;
        self.out(&v, idle_text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_and_why_line() {
        assert_eq!(dur(40), "40s");
        assert_eq!(dur(1800), "30m");
        assert_eq!(dur(7500), "2h 5m");
        assert_eq!(why_text(&serde_json::json!({"idle": null})), "");
        let line = why_text(
            &serde_json::json!({"idle": {"gpus_idle": 2, "idle_since": 0, "idle_secs": 3600, "nodes": ["gpu1"]}}),
        );
        assert!(
            line.contains("2 GPU(s) idle") && line.contains("gpu1") && line.contains("1h 0m"),
            "{line}"
        );
    }
}
