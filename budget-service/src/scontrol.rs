//! Slurm's `scontrol`, the one way budgetd talks to Slurm: running it (hard
//! timeout, `SLURM_TIME_FORMAT=%s` so times are exact Unix seconds) and reading
//! what it prints (`show node -o`, `show job -o`, `show hostnames`).
//!
//! Why the command-line tool and not libslurm: budgetd must not link GPL
//! Slurm, and `scontrol` is what admins already trust. Everything that knows
//! `scontrol`'s argument syntax or its text output lives here, so a change of
//! that interface (e.g. reading jobs as structured output instead of
//! `show job -o` text, whose free-text fields a user can shape) stays local.

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::AppError;

/// Where the Slurm tools are (budgetd `--scontrol`, env `BUDGET_SCONTROL`).
#[derive(Debug, Clone)]
pub struct SlurmTools {
    pub scontrol: String,
    /// Deadline of one call.
    pub timeout: Duration,
}

static TOOLS: OnceLock<SlurmTools> = OnceLock::new();

/// Sets the tools once per process (budgetd's `main`); later calls are ignored.
pub fn set_tools(t: SlurmTools) {
    let _ = TOOLS.set(t);
}

fn tools() -> &'static SlurmTools {
    TOOLS.get_or_init(|| SlurmTools {
        scontrol: std::env::var("BUDGET_SCONTROL").unwrap_or_else(|_| "scontrol".into()),
        timeout: Duration::from_secs(10),
    })
}

/// Why a Slurm command failed.
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    #[error("cannot run {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    #[error("{cmd} did not answer within {secs} s")]
    Timeout { cmd: String, secs: u64 },
    #[error("{cmd} failed: {stderr}")]
    Failed { cmd: String, stderr: String },
}

impl From<SlurmError> for AppError {
    fn from(e: SlurmError) -> Self {
        AppError::Internal(format!("slurm: {e}"))
    }
}

/// Runs `scontrol ARGS` and returns its stdout.
async fn run(args: &[&str]) -> Result<String, SlurmError> {
    let t = tools();
    let cmd = format!("{} {}", t.scontrol, args.join(" "));
    let mut c = tokio::process::Command::new(&t.scontrol);
    c.args(args)
        .env("SLURM_TIME_FORMAT", "%s")
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = match tokio::time::timeout(t.timeout, c.output()).await {
        Err(_) => {
            return Err(SlurmError::Timeout {
                cmd,
                secs: t.timeout.as_secs(),
            });
        }
        Ok(Err(source)) => return Err(SlurmError::Spawn { cmd, source }),
        Ok(Ok(o)) => o,
    };
    if !out.status.success() {
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        return Err(SlurmError::Failed { cmd, stderr });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Every node Slurm knows, by name (`scontrol show node -o`).
pub async fn show_nodes() -> Result<BTreeMap<String, NodeInfo>, SlurmError> {
    Ok(parse_nodes(&run(&["show", "node", "-o"]).await?))
}

/// Every job Slurm knows (`scontrol show job -o`).
pub async fn show_jobs() -> Result<Vec<SlurmJob>, SlurmError> {
    Ok(parse_jobs(&run(&["show", "job", "-o"]).await?))
}

/// The node names of a hostlist expression (`scontrol show hostnames`);
/// Slurm's refusal of a malformed expression is `SlurmError::Failed`.
pub async fn hostnames(expr: &str) -> Result<Vec<String>, SlurmError> {
    Ok(run(&["show", "hostnames", expr])
        .await?
        .split_whitespace()
        .map(str::to_string)
        .collect())
}

/// Slurm's node reason for a budget drain.
pub fn drain_reason(reason: &str) -> String {
    format!("budget: {reason}")
}

/// Sets DRAIN with the reason `budget: REASON` on `nodes` (one `scontrol update`).
pub async fn drain(nodes: &[String], reason: &str) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    let r = format!("reason={}", drain_reason(reason));
    run(&["update", &n, "state=drain", &r]).await.map(|_| ())
}

/// Returns `nodes` to service.
pub async fn resume(nodes: &[String]) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    run(&["update", &n, "state=resume"]).await.map(|_| ())
}

/// Requeues a job (`scontrol requeue`).
pub async fn requeue(job_id: u32) -> Result<(), SlurmError> {
    run(&["requeue", &job_id.to_string()]).await.map(|_| ())
}

/// `Key=Value` pairs of one `scontrol show ... -o` line. Values may hold spaces
/// (`Reason=budget: fan [root@...]`, `AdminComment=budget:min_runtime=0 budget:free`):
/// a token without `=` continues the previous value.
pub fn parse_kv_line(line: &str) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = Vec::new();
    for tok in line.split(' ').filter(|t| !t.is_empty()) {
        match tok.split_once('=') {
            Some((k, v))
                if !k.is_empty()
                    && k.chars()
                        .all(|c| c.is_ascii_alphanumeric() || "/:_".contains(c)) =>
            {
                out.push((k.to_string(), v.to_string()))
            }
            _ => {
                if let Some((_, v)) = out.last_mut() {
                    v.push(' ');
                    v.push_str(tok);
                }
            }
        }
    }
    out
}

/// A node as `scontrol show node -o` reports it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub name: String,
    /// e.g. `MIXED+DRAIN`, `IDLE+DRAIN` (shown as DRAINED by sinfo), `ALLOCATED`.
    pub state: String,
    pub reason: Option<String>,
}

impl NodeInfo {
    pub fn draining(&self) -> bool {
        self.state.split('+').any(|s| s == "DRAIN")
    }
}

/// Parses `scontrol show node -o`.
pub fn parse_nodes(text: &str) -> BTreeMap<String, NodeInfo> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let kv = parse_kv_line(line);
        let get = |k: &str| kv.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        if let Some(name) = get("NodeName") {
            m.insert(
                name.clone(),
                NodeInfo {
                    name,
                    state: get("State").unwrap_or_default(),
                    reason: get("Reason").filter(|r| !r.is_empty() && r != "(null)"),
                },
            );
        }
    }
    m
}

/// A job as `scontrol show job -o` reports it (times in Unix seconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlurmJob {
    pub job_id: u32,
    /// `Restarts`: the run number.
    pub run: u32,
    pub state: String,
    pub start: Option<i64>,
    pub nodelist: String,
    pub account: String,
    pub user: String,
    pub partition: String,
    pub qos: String,
    pub gpus: u32,
    pub admin_comment: String,
    pub comment: String,
}

impl SlurmJob {
    /// Whether the job holds its nodes (running or suspended).
    pub fn holds_nodes(&self) -> bool {
        self.state == "RUNNING" || self.state == "SUSPENDED"
    }
}

/// Parses `scontrol show job -o` (with `SLURM_TIME_FORMAT=%s`).
pub fn parse_jobs(text: &str) -> Vec<SlurmJob> {
    let mut out = Vec::new();
    for line in text.lines() {
        let kv = parse_kv_line(line);
        let get = |k: &str| {
            kv.iter()
                .find(|(a, _)| a == k)
                .map(|(_, v)| v.trim().to_string())
                .unwrap_or_default()
        };
        let Ok(job_id) = get("JobId").parse::<u32>() else {
            continue;
        };
        let nodes_n = get("NumNodes")
            .split('-')
            .next()
            .and_then(|n| n.parse::<u32>().ok())
            .unwrap_or(1)
            .max(1);
        let gpus = policy_core::tres::job_gpus(
            Some(&get("TresPerJob")),
            Some(&get("TresPerNode")),
            nodes_n,
        )
        .count;
        let user = get("UserId");
        out.push(SlurmJob {
            job_id,
            run: get("Restarts").parse().unwrap_or(0),
            state: get("JobState"),
            start: get("StartTime").parse::<i64>().ok().filter(|&t| t > 0),
            nodelist: get("NodeList"),
            account: get("Account").to_lowercase(),
            user: user.split('(').next().unwrap_or("").to_string(),
            partition: get("Partition"),
            qos: get("QOS"),
            gpus,
            admin_comment: get("AdminComment"),
            comment: get("Comment"),
        });
    }
    out
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// One `show job -o` line: values with spaces, a contract, GPUs per node.
    pub(crate) const JOB: &str = "JobId=7 JobName=wrap UserId=alice(1001) Account=TeamA QOS=(null) JobState=RUNNING Restarts=2 StartTime=1000 Partition=gpu NodeList=gpu[1-2] NumNodes=2 AdminComment=budget:min_runtime=60  Comment=min_runtime=60s hello world  TresPerNode=gres:gpu:h100:2 ";

    #[test]
    fn parses_jobs_with_spaces_in_values() {
        let j = &parse_jobs(JOB)[0];
        assert_eq!((j.job_id, j.run, j.start, j.gpus), (7, 2, Some(1000), 4));
        assert_eq!(j.user, "alice");
        assert_eq!(j.account, "teama");
        assert_eq!(j.comment, "min_runtime=60s hello world");
        assert_eq!(j.admin_comment, "budget:min_runtime=60");
        assert!(j.holds_nodes());
    }

    #[test]
    fn parses_nodes_with_spaces_in_reasons() {
        let nodes = parse_nodes(
            "NodeName=gpu1 Arch=x86_64 State=MIXED+DRAIN Reason=budget: fan [root@1]\nNodeName=gpu3 State=IDLE",
        );
        assert_eq!(
            nodes["gpu1"].reason.as_deref(),
            Some("budget: fan [root@1]")
        );
        assert!(nodes["gpu1"].draining() && !nodes["gpu3"].draining());
        assert_eq!(nodes["gpu3"].reason, None);
    }
}
