//! `budget-agent`: the node agent binary. Samples the node's GPUs every
//! `--interval`, and posts each report to `budgetd` (or prints it with `--print`).
//!
//! Without NVML it says so on stderr and exits 0, or with `--no-gpu-mode`
//! keeps running and reports `nvml: false`, so a mixed fleet can run one
//! service definition everywhere. `--once` exits non-zero when budgetd
//! refuses or cannot be reached.
//!
//! Authentication: on the controller host (or any host sharing budgetd's
//! socket) the agent runs as root and `--socket PATH` makes it an admin by
//! peer credentials; from GPU nodes it uses `--socket http://ctl:PORT` with
//! `--token-file` (`BUDGET_TOKEN_FILE`, mode 0600: a `--token` argument is
//! visible to every user in `ps`) or `--token` (`BUDGET_TOKEN`) of a
//! `role = "agent"` token, which may post reports and nothing else.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use budget_agent::AgentError;
use budget_agent::agent::Agent;
use budget_agent::jobmap::JobMapper;
use budget_agent::source::NvmlSource;
use budget_protocol::{AGENT_REPORT_PATH, AgentReport};
use clap::Parser;

#[derive(Parser, Debug)]
#[command(
    name = "budget-agent",
    version,
    about = "slurm-budget node agent: GPU utilisation and idle-GPU reports"
)]
struct Args {
    /// Node name as Slurm knows it (default: the short host name).
    #[arg(long)]
    node: Option<String>,
    /// budgetd's Unix socket or URL (`/run/budgetd.sock`, `http://ctl:8080`).
    #[arg(long, env = "BUDGET_SOCKET")]
    socket: Option<String>,
    /// Bearer token for a TCP endpoint. Visible to every user in `ps`: prefer
    /// --token-file or the BUDGET_TOKEN environment variable.
    #[arg(long, env = "BUDGET_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// File holding the bearer token for a TCP endpoint (keep it 0600).
    #[arg(long, env = "BUDGET_TOKEN_FILE", conflicts_with = "token")]
    token_file: Option<std::path::PathBuf>,
    /// Seconds between samples.
    #[arg(long, default_value_t = 30)]
    interval: u64,
    /// Utilisation (percent) at or below which a job's GPU counts as idle.
    #[arg(long, default_value_t = 5)]
    idle_threshold_pct: u32,
    /// Take one sample and exit.
    #[arg(long)]
    once: bool,
    /// Print reports as JSON lines instead of sending them.
    #[arg(long)]
    print: bool,
    /// Keep running without NVML, reporting `nvml: false`.
    #[arg(long)]
    no_gpu_mode: bool,
}

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

fn short_hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().split('.').next().unwrap_or("").to_string())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "localhost".to_string())
}

fn send(client: &budget_client::Client, report: &AgentReport) -> Result<()> {
    let _: serde_json::Value = client
        .post_json(AGENT_REPORT_PATH, report)
        .context("sending the report to budgetd")?;
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    let node = args.node.clone().unwrap_or_else(short_hostname);
    let source = match NvmlSource::open() {
        Ok(s) => {
            eprintln!(
                "budget-agent: node {node}: NVML driver {}",
                s.driver_version()
            );
            Some(s)
        }
        Err(AgentError::NoNvml(why)) if !args.no_gpu_mode => {
            eprintln!(
                "budget-agent: node {node}: no GPU monitoring possible: NVML unavailable ({why}); exiting. Use --no-gpu-mode to keep reporting without GPUs."
            );
            return Ok(());
        }
        Err(e) => {
            eprintln!("budget-agent: node {node}: running in no-GPU mode: {e}");
            None
        }
    };
    let client = match (&args.socket, args.print) {
        (_, true) => None,
        (Some(s), false) => {
            let endpoint = budget_client::Endpoint::parse(s).context("parsing --socket")?;
            let mut c = budget_client::Client::new(endpoint).with_timeout(Duration::from_secs(5));
            if let Some(t) = &args.token {
                c = c.with_token(t.clone());
            } else if let Some(path) = &args.token_file {
                c = c.with_token(budget_client::read_token_file(path).context("--token-file")?);
            }
            Some(c)
        }
        (None, false) => anyhow::bail!(
            "no budgetd endpoint: give --socket PATH|URL (or BUDGET_SOCKET), or --print"
        ),
    };
    let mut agent = Agent::new(node, source, JobMapper::default(), args.idle_threshold_pct);
    loop {
        match agent.step(now()) {
            Ok(report) => match &client {
                None => println!("{}", serde_json::to_string(&report)?),
                // A failed send is logged and retried next period: the agent
                // must outlive budgetd restarts. With --once there is no next
                // period, so the failure is the exit status (scripts, tests).
                Some(c) => {
                    if let Err(e) = send(c, &report) {
                        if args.once {
                            return Err(e);
                        }
                        eprintln!("budget-agent: {e:#}");
                    }
                }
            },
            Err(e) => eprintln!("budget-agent: sample failed: {e}"),
        }
        if args.once {
            return Ok(());
        }
        std::thread::sleep(Duration::from_secs(args.interval.max(1)));
    }
}
