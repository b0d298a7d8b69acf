//! Maintenance drains that respect the scheduling contract (DESIGN 3.6).
//!
//! Mechanism (ARCHITECTURE.md, "Drains", with the measurement behind it): budgetd
//! persists each drained node (table `drains`, so a drain survives a restart of
//! budgetd), sets Slurm's own `state=DRAIN reason="budget: TEXT"` so no new job lands
//! there, and a worker task requeues every job on a drained node with
//! `scontrol requeue` the first second [`policy_core::preempt::drain_may_take`]
//! allows it: free-tier jobs at once, others when their protected window ends. The
//! worker reads running jobs fresh from `scontrol show job -o` each tick (not from
//! the plugin's last sync, which can be seconds old), so a requeue lands within one
//! tick of the window end; it re-applies DRAIN when Slurm lost it (a `slurmctld`
//! restarted with clean state, a manual resume). Undrain is `state=resume` plus
//! deleting the row. Drains also go into the plugin snapshot (`drains`), where
//! `preempt/budget` lets any non-free pending job take a drained node's job once its
//! window is over.
//!
//! Slurm's command-line tools are the interface (not libslurm: budgetd must not link
//! GPL Slurm, and `scontrol` is what admins already trust); every call has a hard
//! timeout and `SLURM_TIME_FORMAT=%s`, so times are exact Unix seconds.

use std::collections::{BTreeMap, HashSet};
use std::sync::OnceLock;
use std::time::Duration;

use policy_core::preempt::{JobView, drain_may_take};
use policy_core::protection::protected_until;
use rusqlite::params;
use serde::{Deserialize, Serialize};

use crate::error::{AppError, AppResult};
use crate::preemptions::{NewPreemption, Reason};
use crate::state::AppState;
use crate::store::Store;

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
pub async fn scontrol(args: &[&str]) -> Result<String, SlurmError> {
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

/// GPUs in a TRES string (`gres:gpu:2`, `gres:gpu:h100:4`, `gres/gpu=2`).
fn tres_gpus(s: &str) -> u32 {
    let mut total = 0u32;
    for item in s.split(',') {
        let item = item.trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let f: Vec<&str> = item.split([':', '=']).collect();
        if f.first() == Some(&"gpu") {
            let n = f
                .last()
                .and_then(|c| c.parse::<u32>().ok())
                .filter(|_| f.len() > 1)
                .unwrap_or(1);
            total = total.saturating_add(n);
        }
    }
    total
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
        let gpus = match get("TresPerJob") {
            t if !t.is_empty() && t != "(null)" => tres_gpus(&t),
            _ => tres_gpus(&get("TresPerNode")).saturating_mul(nodes_n),
        };
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

/// The job's contract `(free_tier, min_runtime_secs)`: the validated one in
/// `admin_comment` (written by `job_submit/budget`), else the comment read as the
/// submit plugin would, with the site default.
pub fn contract(job: &SlurmJob, default_min: i64) -> (bool, i64) {
    let mut min = None;
    let mut free = false;
    for tok in job.admin_comment.split_whitespace() {
        if let Some(v) = tok.strip_prefix("budget:min_runtime=") {
            min = v.parse::<i64>().ok().filter(|&s| s >= 0);
        } else if tok == "budget:free" {
            free = true;
        }
    }
    if let Some(m) = min {
        return (free, if free { 0 } else { m });
    }
    let req = policy_core::comment::parse_comment(&job.comment).unwrap_or_default();
    let by_name = [&job.partition, &job.qos]
        .iter()
        .any(|n| n.split(',').any(|p| p.trim().eq_ignore_ascii_case("free")));
    let free = req.free_tier || by_name;
    (
        free,
        if free {
            0
        } else {
            req.min_runtime.unwrap_or(default_min).max(0)
        },
    )
}

/// Expands a hostlist without Slurm (`gpu[1-3,5],login1`), for names already valid.
pub fn expand_simple(s: &str) -> Vec<String> {
    let mut items = Vec::new();
    let (mut depth, mut start) = (0i32, 0usize);
    for (i, b) in s.bytes().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    let mut out = Vec::new();
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        let (Some(o), Some(c)) = (item.find('['), item.rfind(']')) else {
            out.push(item.to_string());
            continue;
        };
        if c < o {
            out.push(item.to_string());
            continue;
        }
        let (pre, ranges, suf) = (&item[..o], &item[o + 1..c], &item[c + 1..]);
        for r in ranges.split(',') {
            match r.split_once('-') {
                Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                    (Ok(x), Ok(y)) if x <= y && y - x < 100_000 => {
                        for n in x..=y {
                            out.push(format!("{pre}{n:0w$}{suf}", w = a.len()));
                        }
                    }
                    _ => out.push(format!("{pre}{r}{suf}")),
                },
                None => out.push(format!("{pre}{r}{suf}")),
            }
        }
    }
    out
}

/// Expands a Slurm hostlist with `scontrol show hostnames` and checks every name is a
/// node Slurm knows. Bad input: 422 naming the problem, nothing changed.
pub async fn resolve_nodes(expr: &str) -> AppResult<(Vec<String>, BTreeMap<String, NodeInfo>)> {
    let expr = expr.trim();
    if expr.is_empty()
        || expr.len() > 4096
        || !expr
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,[]".contains(c))
    {
        return Err(AppError::Invalid(format!(
            "bad node list {expr:?}: expected a Slurm hostlist such as gpu[1-2],gpu7"
        )));
    }
    let names: Vec<String> = match scontrol(&["show", "hostnames", expr]).await {
        Ok(t) => t.split_whitespace().map(str::to_string).collect(),
        Err(SlurmError::Failed { stderr, .. }) => {
            return Err(AppError::Invalid(format!(
                "bad node list {expr:?}: {stderr}"
            )));
        }
        Err(e) => return Err(e.into()),
    };
    let nodes = parse_nodes(&scontrol(&["show", "node", "-o"]).await?);
    let unknown: Vec<&str> = names
        .iter()
        .filter(|n| !nodes.contains_key(*n))
        .map(String::as_str)
        .collect();
    if names.is_empty() || !unknown.is_empty() {
        return Err(AppError::Invalid(format!(
            "unknown node(s) {}; Slurm has: {}",
            if unknown.is_empty() {
                expr.to_string()
            } else {
                unknown.join(",")
            },
            nodes.keys().cloned().collect::<Vec<_>>().join(",")
        )));
    }
    Ok((names, nodes))
}

/// One drained node as stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainRow {
    pub node: String,
    pub reason: String,
    pub since: i64,
    pub actor: String,
}

/// Every drain, by node.
pub fn list(store: &Store) -> AppResult<Vec<DrainRow>> {
    let mut st = store
        .conn()
        .prepare("SELECT node, reason, since, actor FROM drains ORDER BY node")?;
    let rows = st.query_map([], |r| {
        Ok(DrainRow {
            node: r.get(0)?,
            reason: r.get(1)?,
            since: r.get(2)?,
            actor: r.get(3)?,
        })
    })?;
    Ok(rows.collect::<Result<_, _>>()?)
}

/// The snapshot's view of the drains.
pub fn snapshot_drains(store: &Store) -> Vec<budget_protocol::DrainSpec> {
    list(store)
        .unwrap_or_default()
        .into_iter()
        .map(|d| budget_protocol::DrainSpec {
            node: d.node,
            reason: d.reason,
            since: d.since,
        })
        .collect()
}

/// Writes (`Some(reason)`) or deletes (`None`) drains of `nodes` in one transaction
/// with an audit row, and bumps the generation so the plugins' snapshot changes.
pub fn write(
    store: &mut Store,
    actor: &str,
    nodes: &[String],
    reason: Option<&str>,
    now: i64,
) -> AppResult<()> {
    let next = store.generation() + 1;
    let generation = store.generation_handle();
    let tx = store.conn_mut().transaction()?;
    for n in nodes {
        match reason {
            Some(r) => tx.execute(
                "INSERT INTO drains(node, reason, since, actor) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT(node) DO UPDATE SET reason = excluded.reason, actor = excluded.actor",
                params![n, r, now, actor],
            )?,
            None => tx.execute("DELETE FROM drains WHERE node = ?1", [n])?,
        };
    }
    tx.execute(
        "INSERT INTO audit(at, actor, action, target, old, new) VALUES (?1, ?2, ?3, ?4, NULL, ?5)",
        params![
            now,
            actor,
            if reason.is_some() { "drain" } else { "undrain" },
            nodes.join(","),
            reason.map(|r| serde_json::json!({ "reason": r }).to_string())
        ],
    )?;
    tx.execute(
        "INSERT INTO meta(key, value) VALUES ('generation', ?1) \
         ON CONFLICT(key) DO UPDATE SET value = excluded.value",
        [next.to_string()],
    )?;
    tx.commit()?;
    generation.store(next, std::sync::atomic::Ordering::SeqCst);
    Ok(())
}

/// A job holding a drained node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HoldingJob {
    pub job_id: u32,
    pub run: u32,
    pub account: String,
    pub user: String,
    pub gpus: u32,
    pub free_tier: bool,
    pub start: Option<i64>,
    /// When the drain requeues it: now for free tier, else its window end.
    pub requeue_at: i64,
}

/// `GET /v1/drains` item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainStatus {
    pub node: String,
    pub reason: String,
    pub since: i64,
    pub actor: String,
    /// Slurm's state now (`MIXED+DRAIN`, `IDLE+DRAIN` = drained, ...).
    pub slurm_state: String,
    /// No job left on the node.
    pub empty: bool,
    /// When the node will be empty: the latest requeue instant of its jobs.
    pub empty_at: i64,
    pub jobs: Vec<HoldingJob>,
}

fn window_end(free: bool, min: i64, start: Option<i64>, now: i64) -> i64 {
    match start {
        Some(s) if !free => protected_until(s, min).max(now),
        _ => now,
    }
}

fn is_running(j: &SlurmJob) -> bool {
    j.state == "RUNNING" || j.state == "SUSPENDED"
}

/// Drains with their holding jobs at `now` (pure: the caller reads Slurm).
pub fn status(
    drains: &[DrainRow],
    nodes: &BTreeMap<String, NodeInfo>,
    jobs: &[SlurmJob],
    default_min: i64,
    now: i64,
) -> Vec<DrainStatus> {
    drains
        .iter()
        .map(|d| {
            let holding: Vec<HoldingJob> = jobs
                .iter()
                .filter(|j| is_running(j) && expand_simple(&j.nodelist).contains(&d.node))
                .map(|j| {
                    let (free, min) = contract(j, default_min);
                    HoldingJob {
                        job_id: j.job_id,
                        run: j.run,
                        account: j.account.clone(),
                        user: j.user.clone(),
                        gpus: j.gpus,
                        free_tier: free,
                        start: j.start,
                        requeue_at: window_end(free, min, j.start, now),
                    }
                })
                .collect();
            DrainStatus {
                node: d.node.clone(),
                reason: d.reason.clone(),
                since: d.since,
                actor: d.actor.clone(),
                slurm_state: nodes
                    .get(&d.node)
                    .map_or("UNKNOWN".into(), |n| n.state.clone()),
                empty: holding.is_empty(),
                empty_at: holding.iter().map(|h| h.requeue_at).max().unwrap_or(now),
                jobs: holding,
            }
        })
        .collect()
}

/// Reads Slurm and computes the status of `drains`.
pub async fn live_status(state: &AppState, drains: Vec<DrainRow>) -> AppResult<Vec<DrainStatus>> {
    if drains.is_empty() {
        return Ok(Vec::new());
    }
    let nodes = parse_nodes(&scontrol(&["show", "node", "-o"]).await?);
    let jobs = parse_jobs(&scontrol(&["show", "job", "-o"]).await?);
    let default_min = state
        .with_store(|s| Ok(s.policy().default_min_runtime_secs))
        .await?;
    Ok(status(
        &drains,
        &nodes,
        &jobs,
        default_min,
        crate::timefmt::now(),
    ))
}

/// Slurm's drain reason for a budget drain.
pub fn slurm_reason(reason: &str) -> String {
    format!("budget: {reason}")
}

/// Sets DRAIN with the reason on `nodes` (one `scontrol update`).
pub async fn slurm_drain(nodes: &[String], reason: &str) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    let r = format!("reason={}", slurm_reason(reason));
    scontrol(&["update", &n, "state=drain", &r])
        .await
        .map(|_| ())
}

/// Returns `nodes` to service.
pub async fn slurm_resume(nodes: &[String]) -> Result<(), SlurmError> {
    let n = format!("nodename={}", nodes.join(","));
    scontrol(&["update", &n, "state=resume"]).await.map(|_| ())
}

/// Starts the drain worker: one pass per second while budgetd runs.
pub fn spawn_worker(state: AppState) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut requeued: HashSet<(u32, u32)> = HashSet::new();
        let mut last_error = String::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            match pass(&state, &mut requeued).await {
                Ok(()) => last_error.clear(),
                Err(e) => {
                    // Log a failure once, not every second (Slurm may be down for minutes).
                    let msg = e.to_string();
                    if msg != last_error {
                        tracing::warn!(error = %msg, "drain worker: pass failed; retrying every second");
                        last_error = msg;
                    }
                }
            }
        }
    })
}

/// One pass: keep DRAIN set, requeue every job the contract lets go.
async fn pass(state: &AppState, requeued: &mut HashSet<(u32, u32)>) -> AppResult<()> {
    let drains = state.with_store(|s| list(s)).await?;
    if drains.is_empty() {
        requeued.clear();
        return Ok(());
    }
    let nodes = parse_nodes(&scontrol(&["show", "node", "-o"]).await?);
    for d in &drains {
        match nodes.get(&d.node) {
            Some(n) if !n.draining() => {
                // Slurm forgot the drain (slurmctld restarted with clean state, or
                // someone resumed the node by hand): the persisted drain wins.
                tracing::info!(node = %d.node, state = %n.state, "drain worker: re-applying DRAIN");
                slurm_drain(std::slice::from_ref(&d.node), &d.reason).await?;
            }
            Some(_) => {}
            None => tracing::debug!(node = %d.node, "drain worker: node unknown to Slurm"),
        }
    }
    let jobs = parse_jobs(&scontrol(&["show", "job", "-o"]).await?);
    let default_min = state
        .with_store(|s| Ok(s.policy().default_min_runtime_secs))
        .await?;
    let drained: HashSet<&str> = drains.iter().map(|d| d.node.as_str()).collect();
    let now = crate::timefmt::now();
    for j in jobs.iter().filter(|j| is_running(j)) {
        if !expand_simple(&j.nodelist)
            .iter()
            .any(|n| drained.contains(n.as_str()))
            || requeued.contains(&(j.job_id, j.run))
        {
            continue;
        }
        let (free, min) = contract(j, default_min);
        let view = JobView {
            job_id: j.job_id,
            account: &j.account,
            user: &j.user,
            free_tier: free,
            run_start: j.start.unwrap_or(0),
            min_runtime: min,
            gpus: j.gpus,
        };
        if !drain_may_take(&view, now) {
            continue;
        }
        let id = j.job_id.to_string();
        scontrol(&["requeue", &id]).await?;
        requeued.insert((j.job_id, j.run));
        let due = window_end(free, min, j.start, now);
        tracing::info!(
            job = j.job_id,
            run = j.run,
            nodes = %j.nodelist,
            free_tier = free,
            lag_secs = now - due,
            "drain worker: requeued"
        );
        let rec = NewPreemption {
            victim: j.job_id,
            run: j.run,
            preemptor: None,
            reason: Reason::Drain,
            at: now,
            account: Some(j.account.clone()),
            user: Some(j.user.clone()),
            gpus: Some(j.gpus),
            start: j.start,
        };
        state
            .with_store(move |s| crate::preemptions::record(s, &rec, "drain"))
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const JOB: &str = "JobId=7 JobName=wrap UserId=alice(1001) Account=TeamA QOS=(null) JobState=RUNNING Restarts=2 StartTime=1000 Partition=gpu NodeList=gpu[1-2] NumNodes=2 AdminComment=budget:min_runtime=60  Comment=min_runtime=60s hello world  TresPerNode=gres:gpu:h100:2 ";

    #[test]
    fn parses_jobs_with_spaces_in_values() {
        let j = &parse_jobs(JOB)[0];
        assert_eq!((j.job_id, j.run, j.start, j.gpus), (7, 2, Some(1000), 4));
        assert_eq!(j.user, "alice");
        assert_eq!(j.account, "teama");
        assert_eq!(j.comment, "min_runtime=60s hello world");
        assert_eq!(contract(j, 5), (false, 60));
        let free = JOB.replace(
            "AdminComment=budget:min_runtime=60 ",
            "AdminComment=budget:min_runtime=0 budget:free",
        );
        assert_eq!(contract(&parse_jobs(&free)[0], 5), (true, 0));
        let none = JOB.replace("AdminComment=budget:min_runtime=60 ", "AdminComment= ");
        assert_eq!(contract(&parse_jobs(&none)[0], 5), (false, 60));
    }

    #[test]
    fn status_gives_per_node_eta() {
        let jobs = parse_jobs(&format!(
            "{JOB}\n{}",
            JOB.replace("JobId=7", "JobId=8")
                .replace("StartTime=1000", "StartTime=1100")
                .replace("budget:min_runtime=60", "budget:min_runtime=0 budget:free")
        ));
        let nodes = parse_nodes(
            "NodeName=gpu1 Arch=x86_64 State=MIXED+DRAIN Reason=budget: fan [root@1]\nNodeName=gpu3 State=IDLE",
        );
        assert_eq!(
            nodes["gpu1"].reason.as_deref(),
            Some("budget: fan [root@1]")
        );
        assert!(nodes["gpu1"].draining() && !nodes["gpu3"].draining());
        let d = |n: &str| DrainRow {
            node: n.into(),
            reason: "fan".into(),
            since: 1,
            actor: "root".into(),
        };
        let st = status(&[d("gpu1"), d("gpu3")], &nodes, &jobs, 30, 1030);
        assert_eq!(st[0].jobs.len(), 2);
        assert_eq!(st[0].jobs[0].requeue_at, 1060);
        assert_eq!(st[0].jobs[1].requeue_at, 1030, "free tier: now");
        assert_eq!(st[0].empty_at, 1060);
        assert!(st[1].empty && st[1].empty_at == 1030);
        assert_eq!(st[1].slurm_state, "IDLE");
    }

    #[test]
    fn hostlists() {
        assert_eq!(
            expand_simple("gpu[1-2,5],x"),
            vec!["gpu1", "gpu2", "gpu5", "x"]
        );
        assert_eq!(expand_simple("n[08-09]"), vec!["n08", "n09"]);
    }
}
