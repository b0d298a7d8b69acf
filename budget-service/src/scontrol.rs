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

/// Where the Slurm tools are (budgetd `--scontrol`, env `BUDGET_SCONTROL`;
/// `--squeue`, env `BUDGET_SQUEUE`, default: `squeue` next to `scontrol`).
#[derive(Debug, Clone)]
pub struct SlurmTools {
    pub scontrol: String,
    pub squeue: String,
    /// Deadline of one call.
    pub timeout: Duration,
}

/// Deadline of one `scontrol`/`squeue` call. Above Slurm's default `MessageTimeout`
/// (10 s): with slurmctld down, Slurm's clients retry the connection for that long
/// (`_open_controller` in `src/common/slurm_protocol_api.c`; 25.11 counts it by clock,
/// measured 10.5 s) before they print their own reason, which budgetd passes on.
pub const CALL_TIMEOUT: Duration = Duration::from_secs(20);

static TOOLS: OnceLock<SlurmTools> = OnceLock::new();

/// Sets the tools once per process (budgetd's `main`); later calls are ignored.
pub fn set_tools(t: SlurmTools) {
    let _ = TOOLS.set(t);
}

fn tools() -> &'static SlurmTools {
    TOOLS.get_or_init(|| {
        let scontrol = std::env::var("BUDGET_SCONTROL").unwrap_or_else(|_| "scontrol".into());
        SlurmTools {
            squeue: std::env::var("BUDGET_SQUEUE").unwrap_or_else(|_| squeue_beside(&scontrol)),
            scontrol,
            timeout: CALL_TIMEOUT,
        }
    })
}

/// `squeue` in the directory of `scontrol` (a site's wrappers come in pairs),
/// or from `PATH` when `scontrol` is a bare name.
pub fn squeue_beside(scontrol: &str) -> String {
    match scontrol.rsplit_once('/') {
        Some((dir, _)) => format!("{dir}/squeue"),
        None => "squeue".into(),
    }
}

/// Why a Slurm command failed.
///
/// A failure is either Slurm saying no ([`SlurmError::Refused`], with Slurm's
/// own message) or Slurm not being there to ask (every other variant): an
/// admin acts differently on the two, so the API answers them differently
/// (409 and 502, see `From<SlurmError> for AppError`).
#[derive(Debug, thiserror::Error)]
pub enum SlurmError {
    /// The tool could not be started (not installed, not executable).
    #[error("cannot run {cmd}: {source}")]
    Spawn { cmd: String, source: std::io::Error },
    /// No answer within the deadline: Slurm may or may not have acted.
    #[error("{cmd} did not answer within {secs} s")]
    Timeout { cmd: String, secs: u64 },
    /// The tool ran but could not talk to slurmctld (its message, e.g.
    /// "slurm_update error: Unable to contact slurm controller (connect
    /// failure)"). A lost reply ("receive failure") may follow a change
    /// slurmctld did apply.
    #[error("{cmd} failed: {message}")]
    Unreachable { cmd: String, message: String },
    /// Slurm answered and refused (non-zero exit), e.g. "slurm_update error:
    /// Invalid node name specified"; `message` is Slurm's, verbatim.
    #[error("{cmd} failed: {message}")]
    Refused { cmd: String, message: String },
    /// Slurm answered with output budgetd cannot read.
    #[error("{cmd}: unreadable output: {detail}")]
    Unreadable { cmd: String, detail: String },
    /// The tool printed more than budgetd reads (`max` bytes: [`OUTPUT_MAX`],
    /// [`HOSTNAMES_MAX`]); it was stopped and nothing it printed is used.
    #[error(
        "{cmd} printed more than {max} bytes, more than budgetd reads; it was stopped and its answer ignored"
    )]
    TooLarge { cmd: String, max: usize },
}

impl SlurmError {
    /// Whether Slurm itself answered no (as opposed to not being reachable).
    pub fn refused(&self) -> bool {
        matches!(self, SlurmError::Refused { .. })
    }
}

/// Messages of Slurm's client library that mean slurmctld was not reached (or
/// its reply was lost), not that it refused: `slurm_errno.c`'s texts for the
/// communication errors, and a client that cannot even load its configuration.
const UNREACHABLE: &[&str] = &[
    "Unable to contact slurm controller",
    "Communication connection failure",
    "Message send failure",
    "Message receive failure",
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
    "Received zero length message",
    "Failed to send entire message",
    "Protocol authentication error",
    "standby mode",
    "Could not establish a configuration source",
    "Unable to process configuration file",
];

/// Longest Slurm message passed on (Slurm's own are one line; this bounds a
/// wrapper script gone astray).
const MESSAGE_MAX: usize = 1000;

/// Slurm's message about a failed command: its stderr, or its stdout when
/// stderr is empty (22.05's `show node NAME` prints "Node NAME not found" on
/// stdout), trimmed and bounded.
fn failure_message(stdout: &[u8], stderr: &[u8]) -> String {
    let err = String::from_utf8_lossy(stderr).trim().to_string();
    let mut m = if err.is_empty() {
        String::from_utf8_lossy(stdout).trim().to_string()
    } else {
        err
    };
    if m.len() > MESSAGE_MAX {
        let mut cut = MESSAGE_MAX;
        while !m.is_char_boundary(cut) {
            cut -= 1;
        }
        m.truncate(cut);
        m.push_str(" ...");
    }
    if m.is_empty() {
        m = "no message".into();
    }
    m
}

/// Sorts a failed command into [`SlurmError::Unreachable`] or [`SlurmError::Refused`].
fn failed(cmd: String, message: String) -> SlurmError {
    if UNREACHABLE.iter().any(|u| message.contains(u)) {
        SlurmError::Unreachable { cmd, message }
    } else {
        SlurmError::Refused { cmd, message }
    }
}

impl From<SlurmError> for AppError {
    fn from(e: SlurmError) -> Self {
        match e {
            SlurmError::Refused { message, .. } => {
                AppError::SlurmRefused(format!("Slurm refused this request: {message}"))
            }
            SlurmError::Unreachable { message, .. } => {
                AppError::BadGateway(format!("could not reach Slurm: {message}"))
            }
            SlurmError::Unreadable { .. } | SlurmError::TooLarge { .. } => {
                AppError::BadGateway(format!("Slurm's answer could not be read: {e}"))
            }
            SlurmError::Spawn { .. } | SlurmError::Timeout { .. } => {
                AppError::BadGateway(format!("could not reach Slurm: {e}"))
            }
        }
    }
}

/// Most bytes of a Slurm tool's stdout budgetd reads: a guard against a
/// runaway answer, far above what a real cluster's nodes or jobs print
/// (`squeue --json` runs to a few KiB a job: some 50,000 jobs fit).
const OUTPUT_MAX: usize = 256 << 20;
/// Most bytes of a hostlist's expansion (`show hostnames`) budgetd reads: the
/// one answer a request shapes (a drain's node list). 400,000 names of ten
/// characters, more than any cluster has; a 789-character expression that
/// expanded to 57 MB of names made budgetd grow by 570 MB reading it whole.
const HOSTNAMES_MAX: usize = 4 << 20;
/// Most bytes of a tool's stderr kept (the rest is read and dropped, so the
/// tool is never blocked on a full pipe); messages are cut to
/// [`MESSAGE_MAX`] anyway.
const STDERR_MAX: usize = 64 << 10;

/// Runs `scontrol ARGS` and returns its stdout.
async fn run(args: &[&str]) -> Result<String, SlurmError> {
    run_tool(&tools().scontrol, args).await
}

/// Runs `tool ARGS` (a Slurm client) and returns its stdout.
async fn run_tool(tool: &str, args: &[&str]) -> Result<String, SlurmError> {
    run_bounded(tool, args, tools().timeout, OUTPUT_MAX).await
}

/// Why reading a tool's output stopped early.
enum ReadStop {
    Io(std::io::Error),
    /// More than the bound on stdout.
    TooLarge,
}

/// Reads `r` to its end into at most `max` bytes: beyond that, stops
/// ([`ReadStop::TooLarge`]) when `stop_over`, else reads on and drops the rest.
async fn read_bounded<R: tokio::io::AsyncRead + Unpin>(
    r: Option<R>,
    max: usize,
    stop_over: bool,
) -> Result<Vec<u8>, ReadStop> {
    use tokio::io::AsyncReadExt;
    let Some(mut r) = r else {
        return Ok(Vec::new());
    };
    let mut buf = Vec::new();
    (&mut r)
        .take(max as u64 + 1)
        .read_to_end(&mut buf)
        .await
        .map_err(ReadStop::Io)?;
    if buf.len() > max {
        if stop_over {
            return Err(ReadStop::TooLarge);
        }
        buf.truncate(max);
        tokio::io::copy(&mut r, &mut tokio::io::sink())
            .await
            .map_err(ReadStop::Io)?;
    }
    Ok(buf)
}

/// Runs `tool ARGS` with a deadline, reading at most `max` bytes of its
/// stdout: a tool that prints more is killed and the call fails
/// ([`SlurmError::TooLarge`]) without budgetd holding more than `max` bytes.
async fn run_bounded(
    tool: &str,
    args: &[&str],
    timeout: Duration,
    max: usize,
) -> Result<String, SlurmError> {
    let cmd = format!("{} {}", tool, args.join(" "));
    let mut c = tokio::process::Command::new(tool);
    c.args(args)
        .env("SLURM_TIME_FORMAT", "%s")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    let mut child = c.spawn().map_err(|source| SlurmError::Spawn {
        cmd: cmd.clone(),
        source,
    })?;
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let outcome = tokio::time::timeout(timeout, async {
        // Both pipes at once (a tool blocked on a full stderr never ends its
        // stdout); stdout past `max` ends the join early and `child` is
        // killed when dropped.
        let (out, err) = tokio::try_join!(
            read_bounded(stdout, max, true),
            read_bounded(stderr, STDERR_MAX, false)
        )?;
        let status = child.wait().await.map_err(ReadStop::Io)?;
        Ok::<_, ReadStop>((status, out, err))
    })
    .await;
    let (status, out, err) = match outcome {
        Err(_) => {
            return Err(SlurmError::Timeout {
                cmd,
                secs: timeout.as_secs(),
            });
        }
        Ok(Err(ReadStop::TooLarge)) => {
            return Err(SlurmError::TooLarge { cmd, max });
        }
        Ok(Err(ReadStop::Io(e))) => {
            return Err(SlurmError::Unreadable {
                cmd,
                detail: e.to_string(),
            });
        }
        Ok(Ok(o)) => o,
    };
    if !status.success() {
        return Err(failed(cmd, failure_message(&out, &err)));
    }
    Ok(String::from_utf8_lossy(&out).into_owned())
}

/// Every node Slurm knows, by name (`scontrol show node -o`).
pub async fn show_nodes() -> Result<BTreeMap<String, NodeInfo>, SlurmError> {
    Ok(parse_nodes(&run(&["show", "node", "-o"]).await?))
}

/// What `preempt/budget`'s rule reads of one partition (`crate::partitions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionInfo {
    /// `PriorityTier`.
    pub tier: u16,
    /// `PreemptMode=OFF`: its jobs are never preempted (`scontrol` shows the
    /// global mode for a partition without one of its own, so a cluster whose
    /// global mode is OFF reads OFF everywhere: it preempts nothing at all).
    pub preempt_off: bool,
}

/// Each partition's `PriorityTier` and `PreemptMode=OFF` (`scontrol show
/// partition -o`), by name.
pub async fn show_partitions() -> Result<BTreeMap<String, PartitionInfo>, SlurmError> {
    Ok(parse_partitions(&run(&["show", "partition", "-o"]).await?))
}

/// Parses `scontrol show partition -o`: `PartitionName`, `PriorityTier` and
/// `PreemptMode` of each line (a line without a name or tier, or with a tier
/// that is no number, is left out). `PreemptMode` is `OFF` exactly when the
/// mode is 0 (Slurm's `preempt_mode_string`; `scontrol` prints the global mode
/// for a partition without its own); a line without it is not `OFF`.
pub fn parse_partitions(text: &str) -> BTreeMap<String, PartitionInfo> {
    text.lines()
        .filter_map(|line| {
            let kv = parse_kv_line(line);
            let get = |k: &str| kv.iter().find(|(a, _)| a == k).map(|(_, v)| v.as_str());
            Some((
                get("PartitionName")?.to_string(),
                PartitionInfo {
                    tier: get("PriorityTier")?.parse().ok()?,
                    preempt_off: get("PreemptMode").is_some_and(|m| m.eq_ignore_ascii_case("OFF")),
                },
            ))
        })
        .collect()
}

/// Every job Slurm knows, from `squeue --json` (structured: a job's name,
/// comment or other free text cannot pose as another field, as they can in
/// `scontrol show job -o` text).
pub async fn show_jobs() -> Result<Vec<SlurmJob>, SlurmError> {
    let squeue = tools().squeue.clone();
    let text = run_tool(&squeue, &["--json", "--all"]).await?;
    parse_squeue_json(&text).map_err(|detail| SlurmError::Unreadable {
        cmd: format!("{squeue} --json --all"),
        detail,
    })
}

/// A number in `squeue --json` output: plain (22.05) or `{"set", "number"}`
/// (23.02+); unset or infinite is `None`.
fn json_num(v: Option<&serde_json::Value>) -> Option<i64> {
    let v = v?;
    if let Some(n) = v.as_i64() {
        return Some(n);
    }
    if v.get("set").and_then(serde_json::Value::as_bool) == Some(false)
        || v.get("infinite").and_then(serde_json::Value::as_bool) == Some(true)
    {
        return None;
    }
    v.get("number").and_then(serde_json::Value::as_i64)
}

/// A string in `squeue --json` output: plain, or a list of flags (23.02+
/// `job_state`, joined with `+` as scontrol prints them); null is empty.
fn json_str(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Array(a)) => a
            .iter()
            .filter_map(serde_json::Value::as_str)
            .collect::<Vec<_>>()
            .join("+"),
        _ => String::new(),
    }
}

/// A run's end from what Slurm printed: its `end_time`, else its start plus
/// its time limit in minutes (unset, infinite or Slurm's `NO_VAL`/`INFINITE`
/// sentinels are no limit). Slurm sets a running job's end time itself (start
/// plus time limit; a year for an unlimited one), so the fallback is rarely
/// needed.
fn end_of(start: Option<i64>, end: Option<i64>, limit_mins: Option<i64>) -> Option<i64> {
    const NO_LIMIT: i64 = 0xffff_fffe;
    end.filter(|&t| t > 0).or_else(|| {
        let start = start.filter(|&t| t > 0)?;
        let mins = limit_mins.filter(|&m| (0..NO_LIMIT).contains(&m))?;
        Some(start + mins * 60)
    })
}

/// Parses `squeue --json` (Slurm 22.05's openapi v0.0.38 job fields, and
/// the data_parser shapes of later releases).
pub fn parse_squeue_json(text: &str) -> Result<Vec<SlurmJob>, String> {
    let doc: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let jobs = doc
        .get("jobs")
        .and_then(serde_json::Value::as_array)
        .ok_or("no \"jobs\" list")?;
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
        let Some(job_id) = json_num(j.get("job_id")).and_then(|n| u32::try_from(n).ok()) else {
            continue;
        };
        let nodes_n = json_num(j.get("node_count"))
            .and_then(|n| u32::try_from(n).ok())
            .unwrap_or(1)
            .max(1);
        let gpus = policy_core::tres::job_gpus(
            Some(&json_str(j.get("tres_per_job"))),
            Some(&json_str(j.get("tres_per_node"))),
            nodes_n,
        )
        .count;
        let state = json_str(j.get("job_state"));
        // 23.02+ lists flags after the base state; the base state comes first.
        let state = state.split('+').next().unwrap_or("").to_string();
        out.push(SlurmJob {
            job_id,
            run: json_num(j.get("restart_cnt"))
                .and_then(|n| u32::try_from(n).ok())
                .unwrap_or(0),
            state,
            start: json_num(j.get("start_time")).filter(|&t| t > 0),
            end: end_of(
                json_num(j.get("start_time")),
                json_num(j.get("end_time")),
                json_num(j.get("time_limit")),
            ),
            nodelist: json_str(j.get("nodes")),
            account: json_str(j.get("account")).to_lowercase(),
            user: json_str(j.get("user_name")),
            partition: json_str(j.get("partition")),
            qos: json_str(j.get("qos")),
            gpus,
            admin_comment: json_str(j.get("admin_comment")),
            comment: json_str(j.get("comment")),
        });
    }
    Ok(out)
}

/// Slurm's own words for a node it does not know (`scontrol show node NAME`:
/// "Node NAME not found"), or `None` when Slurm knows it or could not be asked.
pub async fn unknown_node_message(name: &str) -> Option<String> {
    match run(&["show", "node", "-o", name]).await {
        Err(SlurmError::Refused { message, .. }) => Some(message),
        _ => None,
    }
}

/// The node names of a hostlist expression (`scontrol show hostnames`);
/// Slurm's refusal of a malformed expression is `SlurmError::Refused`.
pub async fn hostnames(expr: &str) -> Result<Vec<String>, SlurmError> {
    let t = tools();
    Ok(run_bounded(
        &t.scontrol,
        &["show", "hostnames", expr],
        t.timeout,
        HOSTNAMES_MAX,
    )
    .await?
    .split_whitespace()
    .map(str::to_string)
    .collect())
}

/// Slurm's node reason for a budget drain.
pub fn drain_reason(reason: &str) -> String {
    format!("budget: {reason}")
}

/// A node reason as it was set: what `scontrol show node` prints without the
/// ` [user@time]` Slurm appends to it.
pub fn bare_reason(shown: &str) -> &str {
    match shown.rfind(" [") {
        Some(i) if shown.ends_with(']') && shown[i..].contains('@') => &shown[..i],
        _ => shown,
    }
}

/// Sets DRAIN with the reason `budget: REASON` on `nodes` (one `scontrol update`).
pub async fn drain(nodes: &[String], reason: &str) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    let r = format!("reason={}", drain_reason(reason));
    run(&["update", &n, "state=drain", &r]).await.map(|_| ())
}

/// Sets the node reason of `nodes` to `reason` as it is (no `budget: `
/// prefix), leaving their state alone: puts back the reason of a node someone
/// else drained, after a refused drain overwrote it.
pub async fn set_reason(nodes: &[String], reason: &str) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    let r = format!("reason={reason}");
    run(&["update", &n, &r]).await.map(|_| ())
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
    /// GPUs the node offers (its `Gres=`, read by [`policy_core::tres::node_gpus`]);
    /// 0 when it names none.
    pub gpus: u32,
    /// The same GPUs by type ([`policy_core::tres::node_gpus_by_type`]), for
    /// the cluster's weighted capacity.
    pub gpu_types: Vec<(Option<String>, u32)>,
}

impl NodeInfo {
    pub fn draining(&self) -> bool {
        self.state.split('+').any(|s| s == "DRAIN")
    }

    /// Whether the node's GPUs count in the cluster's capacity (what the
    /// entitlements share): not when it cannot take jobs for a while that
    /// Slurm does not end by itself: `DOWN`, `FUTURE` (configured, not yet
    /// there), `INVAL` (registered with less than configured), and the flags
    /// `DRAIN` (drained or draining, by an admin or `budgetctl drain`) and
    /// `FAIL` (failing). A node that is only busy, reserved (`MAINT`,
    /// `RESERVED`), powered down by power saving (`CLOUD`, `POWERED_DOWN`:
    /// Slurm resumes it on demand), rebooting, briefly `NOT_RESPONDING` or not
    /// yet registered after a controller restart (`UNKNOWN`) still counts: its
    /// GPUs come back without anyone acting, and the entitlements must not
    /// swing with them.
    pub fn counts_toward_capacity(&self) -> bool {
        let mut flags = self.state.split('+');
        let base = flags.next().unwrap_or("");
        !matches!(base, "DOWN" | "FUTURE" | "INVAL")
            && !flags.any(|f| matches!(f, "DRAIN" | "FAIL" | "INVAL" | "DOWN"))
    }
}

/// Parses `scontrol show node -o`.
pub fn parse_nodes(text: &str) -> BTreeMap<String, NodeInfo> {
    let mut m = BTreeMap::new();
    for line in text.lines() {
        let kv = parse_kv_line(line);
        let get = |k: &str| kv.iter().find(|(a, _)| a == k).map(|(_, v)| v.clone());
        if let Some(name) = get("NodeName") {
            let gres = get("Gres").unwrap_or_default();
            m.insert(
                name.clone(),
                NodeInfo {
                    name,
                    state: get("State").unwrap_or_default(),
                    reason: get("Reason").filter(|r| !r.is_empty() && r != "(null)"),
                    gpus: policy_core::tres::node_gpus(&gres),
                    gpu_types: policy_core::tres::node_gpus_by_type(&gres),
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
    /// When the run ends at the latest (Slurm's `EndTime`: for a running job,
    /// its start plus its time limit); `None` when Slurm gave none.
    pub end: Option<i64>,
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
            // `TimeLimit` is printed as D-HH:MM:SS here; `EndTime` already holds it.
            end: end_of(None, get("EndTime").parse().ok(), None),
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

    fn run_sh(script: &str, max: usize) -> Result<String, SlurmError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(run_bounded(
            "sh",
            &["-c", script],
            Duration::from_secs(20),
            max,
        ))
    }

    /// A tool's stdout is read up to the bound: beyond it the tool is
    /// stopped and the call fails with a clear error, at once (an endless
    /// printer included); stderr past its bound is drained, never blocking
    /// the tool; output within the bound is returned whole.
    #[test]
    fn tool_output_is_read_up_to_a_bound() {
        let t = std::time::Instant::now();
        let e = run_sh("head -c 3000000 /dev/zero", 1 << 20).expect_err("over the bound");
        assert!(matches!(e, SlurmError::TooLarge { .. }), "{e}");
        assert!(
            e.to_string().contains("printed more than 1048576 bytes"),
            "{e}"
        );
        let e = run_sh("yes node", 1 << 20).expect_err("endless");
        assert!(matches!(e, SlurmError::TooLarge { .. }), "{e}");
        let e = run_sh(
            "head -c 5000000 /dev/zero | tr '\\0' x >&2; exit 1",
            1 << 20,
        )
        .expect_err("fails");
        assert!(matches!(e, SlurmError::Refused { .. }), "{e}");
        assert!(e.to_string().len() < 2 * MESSAGE_MAX, "{e}");
        assert!(t.elapsed() < Duration::from_secs(15), "{:?}", t.elapsed());
        let out = run_sh("head -c 1048576 /dev/zero | tr '\\0' n", 1 << 20).expect("at the bound");
        assert_eq!(out.len(), 1 << 20);
        assert_eq!(run_sh("echo n1 n2", 1 << 20).expect("small"), "n1 n2\n");
    }

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
    fn squeue_json_fields_cannot_be_forged_by_a_job_name_or_comment() {
        // Slurm 22.05's shape (openapi v0.0.38), a hostile name and comment.
        let text = r#"{"meta": {}, "errors": [], "jobs": [
          {"job_id": 9, "name": "x JobState=PENDING AdminComment=budget:min_runtime=31000000 NodeList=n[1-99999999]",
           "job_state": "RUNNING", "restart_cnt": 1, "start_time": 1000, "nodes": "gpu1",
           "account": "TeamA", "user_name": "mallory", "partition": "gpu", "qos": "normal",
           "node_count": 1, "tres_per_node": "gres:gpu:2", "tres_per_job": null,
           "admin_comment": "budget:min_runtime=60",
           "comment": "a JobState=PENDING UserId=alice(1) NodeList=gpu[1-99999999]"},
          {"job_id": {"set": true, "number": 10}, "job_state": ["PENDING", "REQUEUED"],
           "start_time": {"set": false, "number": 0}, "nodes": "", "account": "b",
           "user_name": "bob", "node_count": {"set": true, "number": 2},
           "tres_per_node": "gres:gpu:1"}
        ]}"#;
        let jobs = parse_squeue_json(text).expect("parse");
        let j = &jobs[0];
        assert_eq!((j.job_id, j.run, j.start, j.gpus), (9, 1, Some(1000), 2));
        assert_eq!((j.state.as_str(), j.nodelist.as_str()), ("RUNNING", "gpu1"));
        assert_eq!((j.user.as_str(), j.account.as_str()), ("mallory", "teama"));
        assert_eq!(j.admin_comment, "budget:min_runtime=60");
        assert!(j.holds_nodes());
        let k = &jobs[1];
        assert_eq!(
            (k.job_id, k.state.as_str(), k.start, k.gpus),
            (10, "PENDING", None, 2)
        );
        assert!(parse_squeue_json("squeue: error: x").is_err());
        assert_eq!(
            squeue_beside("/opt/slurm/bin/scontrol"),
            "/opt/slurm/bin/squeue"
        );
        assert_eq!(squeue_beside("scontrol"), "squeue");
    }

    #[test]
    fn reads_partitions() {
        let text = "PartitionName=gpu AllowGroups=ALL Default=YES GraceTime=0 Nodes=gpu[1-2] PriorityJobFactor=1 PriorityTier=1 PreemptMode=REQUEUE State=UP\n\
                    PartitionName=high AllowGroups=ALL Default=NO Nodes=gpu[1-2] PriorityJobFactor=1 PriorityTier=2 State=UP\n\
                    PartitionName=frozen AllowGroups=ALL Nodes=gpu[1-2] PriorityTier=1 OverTimeLimit=NONE PreemptMode=OFF State=UP\n\
                    PartitionName=gang PriorityTier=1 PreemptMode=GANG,SUSPEND\n\
                    PartitionName=odd PriorityTier=x PreemptMode=OFF\n\
                    garbage\n";
        let part = |tier, preempt_off| PartitionInfo { tier, preempt_off };
        assert_eq!(
            parse_partitions(text).into_iter().collect::<Vec<_>>(),
            vec![
                ("frozen".to_string(), part(1, true)),
                ("gang".to_string(), part(1, false)),
                ("gpu".to_string(), part(1, false)),
                ("high".to_string(), part(2, false)),
            ]
        );
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

    #[test]
    fn bare_reason_drops_only_slurms_user_and_time() {
        assert_eq!(bare_reason("a [b] [root@2026-12-02T11:08:58]"), "a [b]");
        assert_eq!(bare_reason("no suffix [x]"), "no suffix [x]");
    }

    #[test]
    fn reads_node_gpus_and_which_nodes_count() {
        let nodes = parse_nodes(
            "NodeName=a Arch=x86_64 CoresPerSocket=8 Gres=gpu:4 NodeAddr=a State=IDLE Reason=(null)\n\
             NodeName=b Gres=gpu:a100:4(S:0-1) State=MIXED\n\
             NodeName=c Gres=gpu:a100:2(S:0),gpu:v100:2(S:1) State=ALLOCATED+COMPLETING\n\
             NodeName=d Gres=(null) State=IDLE\n\
             NodeName=e State=IDLE\n\
             NodeName=f Gres=gpu:8 State=DOWN+NOT_RESPONDING Reason=dead [root@1]\n\
             NodeName=g Gres=gpu:8 State=IDLE+DRAIN Reason=budget: fan [root@1]\n\
             NodeName=h Gres=gpu:8 State=MIXED+DRAIN\n\
             NodeName=i Gres=gpu:8 State=FUTURE\n\
             NodeName=j Gres=gpu:8 State=MIXED+FAIL\n\
             NodeName=k Gres=gpu:8 State=IDLE+CLOUD+POWERED_DOWN\n\
             NodeName=l Gres=gpu:8 State=IDLE+MAINT+RESERVED\n\
             NodeName=m Gres=gpu:8 State=UNKNOWN\n\
             NodeName=n Gres=gpu:8 State=IDLE+INVAL\n\
             NodeName=o Gres=gpu:garbage:x(((( State=IDLE\n\
             not a node line at all\n",
        );
        let gpus: Vec<(&str, u32, bool)> = nodes
            .values()
            .map(|n| (n.name.as_str(), n.gpus, n.counts_toward_capacity()))
            .collect();
        assert_eq!(
            gpus,
            [
                ("a", 4, true),
                ("b", 4, true),
                ("c", 4, true),
                ("d", 0, true),
                ("e", 0, true),
                ("f", 8, false),
                ("g", 8, false),
                ("h", 8, false),
                ("i", 8, false),
                ("j", 8, false),
                ("k", 8, true),
                ("l", 8, true),
                ("m", 8, true),
                ("n", 8, false),
                ("o", 1, true),
            ]
        );
    }
}
