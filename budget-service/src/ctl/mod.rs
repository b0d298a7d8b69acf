//! `budgetctl`: the sacctmgr-style admin CLI of budgetd.
//!
//! Owns argument parsing (clap), turning verbs into API calls through
//! `budget-client`, and printing: tables for people, `--json` for scripts.
//! TIME arguments are converted to Unix seconds here, in the caller's local
//! time zone, so the service never guesses whose "local" was meant.
//! Exit status: 0 success, 1 the request failed (message on stderr as
//! `budgetctl: <message>`), 2 bad usage.

mod drain;
mod idle;
mod table;

use std::time::Duration;

use anyhow::{Context, anyhow, bail};
use budget_client::{Client, Endpoint};
use clap::{Args, Parser, Subcommand};
use serde_json::{Value, json};

use crate::timefmt::{format_local, parse_time, zone};
use table::{num, render};

/// Default socket path of budgetd.
pub const DEFAULT_SOCKET: &str = "/run/slurm-budget/budgetd.sock";

/// Admin CLI for slurm-budget: accounts, budgets, usage, fair share.
#[derive(Debug, Parser)]
#[command(name = "budgetctl", version)]
pub struct Cli {
    /// budgetd's Unix socket (callers are identified by their uid).
    #[arg(long, global = true, env = "BUDGET_SOCKET", default_value = DEFAULT_SOCKET)]
    pub socket: String,
    /// budgetd over TCP instead, e.g. http://host:8700 (needs --token).
    #[arg(long, global = true, env = "BUDGET_URL")]
    pub url: Option<String>,
    /// Bearer token for --url.
    #[arg(long, global = true, env = "BUDGET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Request timeout in seconds.
    #[arg(long, global = true, default_value_t = 30)]
    pub timeout: u64,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create, change, delete and list accounts.
    #[command(subcommand)]
    Account(AccountCmd),
    /// Add users to accounts and remove them.
    #[command(subcommand)]
    User(UserCmd),
    /// Manage account coordinators.
    #[command(subcommand)]
    Coordinator(CoordinatorCmd),
    /// Set budgets: an account's allocation, or a member's own allocation.
    #[command(subcommand)]
    Budget(BudgetCmd),
    /// GPU-type billing weights.
    #[command(subcommand)]
    Weights(WeightsCmd),
    /// Site policy (window, min_runtime defaults, hysteresis, ...).
    #[command(subcommand)]
    Policy(PolicyCmd),
    /// The fair-share table, like sshare.
    Share {
        /// Evaluate the window at this instant (Unix seconds, RFC 3339 or local YYYY-MM-DDTHH:MM:SS).
        #[arg(long)]
        at: Option<String>,
    },
    /// Usage by account or user; `usage import FILE` loads sacct history.
    Usage(UsageArgs),
    /// The audit log of every change.
    Audit {
        /// Show at most this many entries (the latest).
        #[arg(long, default_value_t = 100)]
        limit: i64,
    },
    /// Explain a job: tier, rank path, priority, protection, preemption.
    Why { job_id: u32 },
    /// Drain nodes for maintenance: no new jobs; each job requeued when its contract allows.
    Drain {
        /// Slurm hostlist, e.g. gpu[1-2].
        nodes: String,
        #[arg(long)]
        reason: String,
    },
    /// Drained nodes: state, jobs holding them, when each will be empty.
    Drains,
    /// Return drained nodes to service.
    Undrain { nodes: String },
    /// Jobs holding GPUs idle beyond the policy's idle threshold, then idle
    /// GPU-hours per account over the window (from the node agents' reports).
    Idle {
        /// Start of the GPU-hours interval (default: one window before --at).
        #[arg(long)]
        since: Option<String>,
        /// End of the interval (default: now).
        #[arg(long)]
        at: Option<String>,
    },
    /// Replay a job trace through the policy offline (budget-sim); needs no budgetd.
    Simulate(budget_sim::SimulateArgs),
}

#[derive(Debug, Subcommand)]
pub enum AccountCmd {
    /// Create an account (no --parent: under the root).
    Add {
        name: String,
        #[arg(long)]
        parent: Option<String>,
        /// Weighted GPU-hours per window.
        #[arg(long, value_name = "GPUH", allow_negative_numbers = true)]
        allocation: f64,
        /// Allow children to sum above this account's allocation.
        #[arg(long)]
        overcommit: bool,
    },
    /// Change an account.
    Modify {
        name: String,
        #[arg(long, value_name = "GPUH", allow_negative_numbers = true)]
        allocation: Option<f64>,
        /// New parent (`root` for the top level).
        #[arg(long)]
        parent: Option<String>,
        #[arg(long, value_name = "true|false")]
        overcommit: Option<bool>,
    },
    /// Delete an account (refused while it has children or running jobs).
    Delete { name: String },
    /// List accounts, or show one with its members and coordinators.
    Show { name: Option<String> },
}

#[derive(Debug, Subcommand)]
pub enum UserCmd {
    /// Make USER a member of an account.
    Add {
        user: String,
        #[arg(long)]
        account: String,
        /// Explicit allocation (default: an equal share of the account's rest).
        #[arg(long, value_name = "GPUH", allow_negative_numbers = true)]
        allocation: Option<f64>,
    },
    /// Remove USER from an account.
    Remove {
        user: String,
        #[arg(long)]
        account: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum CoordinatorCmd {
    /// Let USER manage the account's subtree.
    Add {
        user: String,
        #[arg(long)]
        account: String,
    },
    /// Remove a coordinator.
    Remove {
        user: String,
        #[arg(long)]
        account: String,
    },
    /// List coordinators.
    Show,
}

#[derive(Debug, Subcommand)]
pub enum BudgetCmd {
    /// `budget set ACCOUNT GPUH` sets the account's allocation;
    /// `budget set ACCOUNT GPUH --user U` the member's (`none`: share equally).
    Set {
        account: String,
        #[arg(value_name = "GPUH|none", allow_negative_numbers = true)]
        gpu_hours: String,
        #[arg(long)]
        user: Option<String>,
    },
}

#[derive(Debug, Subcommand)]
pub enum WeightsCmd {
    /// Set weights: TYPE=W ... (`default=W` for untyped GPUs).
    Set {
        #[arg(required = true, value_name = "TYPE=W")]
        pairs: Vec<String>,
    },
    /// Show weights.
    Show,
}

#[derive(Debug, Subcommand)]
pub enum PolicyCmd {
    /// Show the policy.
    Show,
    /// Set KEY=VALUE ...: window, default_min_runtime, max_min_runtime,
    /// snapshot_max_age, idle_threshold (durations: 90m, 4h, 7d, HH:MM:SS),
    /// require_min_runtime (true|false), hysteresis (number).
    Set {
        #[arg(required = true, value_name = "KEY=VALUE")]
        pairs: Vec<String>,
    },
}

#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct UsageArgs {
    /// Group by account (descendants included) or user.
    #[arg(long, default_value = "account", value_parser = ["account", "user"])]
    pub by: String,
    /// Preemptions and GPU-hours lost per account instead (since --since, default: all).
    #[arg(long)]
    pub preemptions: bool,
    /// Start of the interval (default: one window before --at).
    #[arg(long)]
    pub since: Option<String>,
    /// End of the interval (default: now).
    #[arg(long)]
    pub at: Option<String>,
    #[command(subcommand)]
    pub command: Option<UsageCmd>,
}

#[derive(Debug, Subcommand)]
pub enum UsageCmd {
    /// Import history from `sacct -X -D -P -o JobID,Account,User,Partition,AllocTRES,Start,End,State`.
    ///
    /// GPUs come from gres/gpu:TYPE=N or gres/gpu=N; Start/End are read in
    /// --tz (default: this machine's zone); requeued runs (-D) are numbered by
    /// Start; array tasks 123_4 get their own keys; PENDING and never-started
    /// lines are skipped. Re-importing the same file changes nothing. Bad lines
    /// are listed with their numbers: nothing is imported unless
    /// --skip-invalid, which imports the valid lines.
    Import {
        file: std::path::PathBuf,
        #[arg(long)]
        skip_invalid: bool,
        /// IANA time zone of the sacct times (e.g. Europe/Berlin, UTC).
        #[arg(long)]
        tz: Option<String>,
    },
}

/// A usage error (exit 2) as opposed to a failed request (exit 1).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// Runs a parsed command, printing to stdout.
pub fn run(cli: &Cli) -> anyhow::Result<()> {
    if let Command::Simulate(args) = &cli.command {
        return budget_sim::run_cli(args);
    }
    let endpoint = match &cli.url {
        Some(u) => Endpoint::parse(u),
        None => Endpoint::parse(&cli.socket),
    }
    .map_err(|e| UsageError(e.to_string()))?;
    let mut client = Client::new(endpoint)
        .with_timeout(Duration::from_secs(cli.timeout.max(1)))
        .with_max_body(512 << 20);
    if let Some(t) = &cli.token {
        client = client.with_token(t.clone());
    }
    let ctl = Ctl {
        client,
        json: cli.json,
    };
    ctl.dispatch(&cli.command)
}

struct Ctl {
    client: Client,
    json: bool,
}

fn enc(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn time_arg(name: &str, v: &str) -> anyhow::Result<i64> {
    let tz = zone(None).map_err(UsageError)?;
    parse_time(v, &tz).map_err(|e| UsageError(format!("--{name}: {e}")).into())
}

fn local(secs: i64) -> String {
    format_local(secs, &zone(None).unwrap_or(jiff::tz::TimeZone::UTC))
}

fn s(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        Value::Number(n) => n.as_f64().map_or_else(|| n.to_string(), |f| num(f, 3)),
        other => other.to_string(),
    }
}

impl Ctl {
    /// Sends a request; non-2xx becomes an error carrying the server's message
    /// and any per-item details (e.g. import lines).
    fn send(
        &self,
        method: &str,
        path: &str,
        body: Option<(&str, Vec<u8>)>,
    ) -> anyhow::Result<Value> {
        let headers: Vec<(&str, &str)> = body
            .as_ref()
            .map(|(ct, _)| vec![("Content-Type", *ct)])
            .unwrap_or_default();
        let r = self.client.request(
            method,
            path,
            &headers,
            body.as_ref().map(|(_, b)| b.as_slice()),
        )?;
        let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
        if r.is_success() {
            return Ok(v);
        }
        let mut msg = v["error"]
            .as_str()
            .map(str::to_string)
            .unwrap_or_else(|| format!("budgetd returned {}", r.status));
        if let Some(items) = v["details"]["invalid"].as_array() {
            // The message quotes the first lines; list them all, one per line.
            if let Some((head, _)) = msg.split_once(": line ") {
                msg = format!("{head}:");
            }
            for e in items {
                msg.push_str(&format!("\n  line {}: {}", s(&e["line"]), s(&e["error"])));
            }
        }
        Err(anyhow!(msg))
    }

    fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.send("GET", path, None)
    }

    fn send_json(&self, method: &str, path: &str, body: &Value) -> anyhow::Result<Value> {
        self.send(
            method,
            path,
            Some(("application/json", serde_json::to_vec(body)?)),
        )
    }

    fn print_json(&self, v: &Value) -> anyhow::Result<()> {
        println!("{}", serde_json::to_string_pretty(v)?);
        Ok(())
    }

    /// Prints `v` as JSON, or the text from `human`.
    fn out(&self, v: &Value, human: impl FnOnce(&Value) -> String) -> anyhow::Result<()> {
        if self.json {
            self.print_json(v)
        } else {
            print!("{}", human(v));
            Ok(())
        }
    }

    fn dispatch(&self, cmd: &Command) -> anyhow::Result<()> {
        match cmd {
            Command::Account(c) => self.account(c),
            Command::User(c) => self.user(c),
            Command::Coordinator(c) => self.coordinator(c),
            Command::Budget(c) => self.budget(c),
            Command::Weights(c) => self.weights(c),
            Command::Policy(c) => self.policy(c),
            Command::Share { at } => self.share(at.as_deref()),
            Command::Usage(u) => match &u.command {
                Some(UsageCmd::Import {
                    file,
                    skip_invalid,
                    tz,
                }) => self.import(file, *skip_invalid, tz.as_deref()),
                None if u.preemptions => self.preemptions(u.since.as_deref()),
                None => self.usage(u),
            },
            Command::Audit { limit } => self.audit(*limit),
            Command::Why { job_id } => self.why(*job_id),
            Command::Drain { nodes, reason } => self.drain(nodes, reason),
            Command::Drains => self.drains(),
            Command::Undrain { nodes } => self.undrain(nodes),
            Command::Idle { since, at } => self.idle(since.as_deref(), at.as_deref()),
            Command::Simulate(args) => budget_sim::run_cli(args),
        }
    }

    fn account(&self, c: &AccountCmd) -> anyhow::Result<()> {
        match c {
            AccountCmd::Add {
                name,
                parent,
                allocation,
                overcommit,
            } => {
                let v = self.send_json(
                    "POST",
                    "/v1/accounts",
                    &json!({"name": name, "parent": parent, "allocation_gpu_hours": allocation, "overcommit": overcommit}),
                )?;
                self.out(&v, |v| {
                    format!(
                        "account {} added under {}\n",
                        s(&v["name"]),
                        parent.as_deref().unwrap_or("root")
                    )
                })
            }
            AccountCmd::Modify {
                name,
                allocation,
                parent,
                overcommit,
            } => {
                let mut body = serde_json::Map::new();
                if let Some(a) = allocation {
                    body.insert("allocation_gpu_hours".into(), json!(a));
                }
                if let Some(p) = parent {
                    body.insert("parent".into(), json!(p));
                }
                if let Some(o) = overcommit {
                    body.insert("overcommit".into(), json!(o));
                }
                if body.is_empty() {
                    bail!(UsageError(
                        "account modify: give --allocation, --parent or --overcommit".into()
                    ));
                }
                let v = self.send_json(
                    "PATCH",
                    &format!("/v1/accounts/{}", enc(name)),
                    &Value::Object(body),
                )?;
                self.out(&v, |v| {
                    format!(
                        "account {}: parent {}, allocation {} GPU-h, overcommit {}\n",
                        s(&v["name"]),
                        v["parent"].as_str().unwrap_or("root"),
                        s(&v["allocation_gpu_hours"]),
                        s(&v["overcommit"])
                    )
                })
            }
            AccountCmd::Delete { name } => {
                self.send("DELETE", &format!("/v1/accounts/{}", enc(name)), None)?;
                self.out(&json!({"deleted": name}), |_| {
                    format!("account {name} deleted\n")
                })
            }
            AccountCmd::Show { name: None } => {
                let v = self.get("/v1/accounts")?;
                self.out(&v, |v| {
                    let rows: Vec<Vec<String>> = v
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|a| {
                                    vec![
                                        s(&a["name"]),
                                        a["parent"].as_str().unwrap_or("root").to_string(),
                                        s(&a["allocation_gpu_hours"]),
                                        if a["overcommit"] == true {
                                            "yes".into()
                                        } else {
                                            "no".into()
                                        },
                                    ]
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    render(&["ACCOUNT", "PARENT", "ALLOC_GPUH", "OVERCOMMIT"], &rows)
                })
            }
            AccountCmd::Show { name: Some(n) } => {
                let v = self.get(&format!("/v1/accounts/{}", enc(n)))?;
                self.out(&v, |v| {
                    let a = &v["account"];
                    let list = |x: &Value, key: Option<&str>| -> String {
                        let items: Vec<String> = x
                            .as_array()
                            .map(|xs| xs.iter().map(|i| s(key.map_or(i, |k| &i[k]))).collect())
                            .unwrap_or_default();
                        if items.is_empty() { "-".into() } else { items.join(", ") }
                    };
                    format!(
                        "account:      {}\nparent:       {}\nallocation:   {} GPU-h per window\novercommit:   {}\nchildren:     {}\nmembers:      {}\ncoordinators: {}\n",
                        s(&a["name"]),
                        a["parent"].as_str().unwrap_or("root"),
                        s(&a["allocation_gpu_hours"]),
                        s(&a["overcommit"]),
                        list(&v["children"], None),
                        list(&v["members"], Some("user")),
                        list(&v["coordinators"], None),
                    )
                })
            }
        }
    }

    fn user(&self, c: &UserCmd) -> anyhow::Result<()> {
        match c {
            UserCmd::Add {
                user,
                account,
                allocation,
            } => {
                let v = self.send_json(
                    "POST",
                    "/v1/members",
                    &json!({"user": user, "account": account, "allocation_gpu_hours": allocation}),
                )?;
                self.out(&v, |_| format!("user {user} added to account {account}\n"))
            }
            UserCmd::Remove { user, account } => {
                self.send(
                    "DELETE",
                    &format!("/v1/members/{}/{}", enc(account), enc(user)),
                    None,
                )?;
                self.out(&json!({"removed": user, "account": account}), |_| {
                    format!("user {user} removed from account {account}\n")
                })
            }
        }
    }

    fn coordinator(&self, c: &CoordinatorCmd) -> anyhow::Result<()> {
        match c {
            CoordinatorCmd::Add { user, account } => {
                let v = self.send_json(
                    "POST",
                    "/v1/coordinators",
                    &json!({"user": user, "account": account}),
                )?;
                self.out(&v, |_| {
                    format!("user {user} now coordinates account {account}\n")
                })
            }
            CoordinatorCmd::Remove { user, account } => {
                self.send(
                    "DELETE",
                    &format!("/v1/coordinators/{}/{}", enc(account), enc(user)),
                    None,
                )?;
                self.out(&json!({"removed": user, "account": account}), |_| {
                    format!("user {user} no longer coordinates account {account}\n")
                })
            }
            CoordinatorCmd::Show => {
                let v = self.get("/v1/coordinators")?;
                self.out(&v, |v| {
                    let rows: Vec<Vec<String>> = v
                        .as_array()
                        .map(|a| {
                            a.iter()
                                .map(|c| vec![s(&c["account"]), s(&c["user"])])
                                .collect()
                        })
                        .unwrap_or_default();
                    render(&["ACCOUNT", "COORDINATOR"], &rows)
                })
            }
        }
    }

    fn budget(&self, c: &BudgetCmd) -> anyhow::Result<()> {
        let BudgetCmd::Set {
            account,
            gpu_hours,
            user,
        } = c;
        let value: Option<f64> = if gpu_hours.eq_ignore_ascii_case("none") {
            None
        } else {
            Some(gpu_hours.parse().map_err(|_| {
                UsageError(format!("GPUH must be a number or none, got {gpu_hours:?}"))
            })?)
        };
        match (user, value) {
            (None, None) => bail!(UsageError("an account's allocation cannot be none".into())),
            (None, Some(v)) => {
                let r = self.send_json(
                    "PATCH",
                    &format!("/v1/accounts/{}", enc(account)),
                    &json!({"allocation_gpu_hours": v}),
                )?;
                self.out(&r, |r| {
                    format!(
                        "account {}: {} GPU-h per window\n",
                        s(&r["name"]),
                        s(&r["allocation_gpu_hours"])
                    )
                })
            }
            (Some(u), v) => {
                let r = self.send_json(
                    "PATCH",
                    &format!("/v1/members/{}/{}", enc(account), enc(u)),
                    &json!({"allocation_gpu_hours": v}),
                )?;
                self.out(&r, |r| match r["allocation_gpu_hours"].as_f64() {
                    Some(h) => format!("user {u} in {account}: {} GPU-h per window\n", num(h, 3)),
                    None => format!("user {u} in {account}: an equal share of the account\n"),
                })
            }
        }
    }

    fn weights(&self, c: &WeightsCmd) -> anyhow::Result<()> {
        let v = match c {
            WeightsCmd::Set { pairs } => {
                let mut set = serde_json::Map::new();
                let mut default = None;
                for p in pairs {
                    let (k, w) = p
                        .split_once('=')
                        .ok_or_else(|| UsageError(format!("expected TYPE=WEIGHT, got {p:?}")))?;
                    let w: f64 = w.trim().parse().map_err(|_| {
                        UsageError(format!("weight of {k:?} must be a number, got {w:?}"))
                    })?;
                    if k.eq_ignore_ascii_case("default") {
                        default = Some(w);
                    } else {
                        set.insert(k.to_string(), json!(w));
                    }
                }
                self.send_json(
                    "PATCH",
                    "/v1/weights",
                    &json!({"set": set, "default": default}),
                )?
            }
            WeightsCmd::Show => self.get("/v1/weights")?,
        };
        self.out(&v, |v| {
            let mut rows = vec![vec!["(default)".to_string(), s(&v["default"])]];
            if let Some(m) = v["by_type"].as_object() {
                rows.extend(m.iter().map(|(k, w)| vec![k.clone(), s(w)]));
            }
            render(&["GPU_TYPE", "WEIGHT"], &rows)
        })
    }

    fn policy(&self, c: &PolicyCmd) -> anyhow::Result<()> {
        let v = match c {
            PolicyCmd::Show => self.get("/v1/policy")?,
            PolicyCmd::Set { pairs } => {
                let mut body = serde_json::Map::new();
                for p in pairs {
                    let (k, val) = p
                        .split_once('=')
                        .ok_or_else(|| UsageError(format!("expected KEY=VALUE, got {p:?}")))?;
                    let key = k.trim().trim_end_matches("_secs");
                    let dur = |v: &str| -> anyhow::Result<Value> {
                        Ok(json!(
                            policy_core::parse_duration(v)
                                .map_err(|e| UsageError(format!("{k}: {e}")))?
                        ))
                    };
                    let (field, value) = match key {
                        "window"
                        | "default_min_runtime"
                        | "max_min_runtime"
                        | "snapshot_max_age"
                        | "idle_threshold" => (format!("{key}_secs"), dur(val)?),
                        "require_min_runtime" => (
                            key.to_string(),
                            json!(val.parse::<bool>().map_err(|_| UsageError(format!(
                                "{k}: expected true or false, got {val:?}"
                            )))?),
                        ),
                        "hysteresis" => (
                            key.to_string(),
                            json!(val.parse::<f64>().map_err(|_| UsageError(format!(
                                "{k}: expected a number, got {val:?}"
                            )))?),
                        ),
                        _ => bail!(UsageError(format!(
                            "unknown policy key {k:?}; keys: window, default_min_runtime, max_min_runtime, \
                             require_min_runtime, hysteresis, snapshot_max_age, idle_threshold"
                        ))),
                    };
                    body.insert(field, value);
                }
                self.send_json("PATCH", "/v1/policy", &Value::Object(body))?
            }
        };
        self.out(&v, |v| {
            let rows: Vec<Vec<String>> = v
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, x)| {
                            let shown = match (k.ends_with("_secs"), x.as_i64()) {
                                (true, Some(secs)) => policy_core::format_duration(secs),
                                _ => s(x),
                            };
                            vec![k.trim_end_matches("_secs").to_string(), shown]
                        })
                        .collect()
                })
                .unwrap_or_default();
            render(&["KEY", "VALUE"], &rows)
        })
    }

    fn share(&self, at: Option<&str>) -> anyhow::Result<()> {
        let path = match at {
            Some(a) => format!("/v1/share?at={}", time_arg("at", a)?),
            None => "/v1/share".to_string(),
        };
        let v = self.get(&path)?;
        if self.json {
            return self.print_json(&v["rows"]);
        }
        let rows: Vec<Vec<String>> = v["rows"]
            .as_array()
            .map(|rows| {
                rows.iter()
                    .map(|r| {
                        let depth = r["depth"].as_u64().unwrap_or(0) as usize;
                        let name = match r["user"].as_str() {
                            Some(u) => format!("{}{u}", "  ".repeat(depth)),
                            None => format!("{}{}", "  ".repeat(depth), s(&r["account"])),
                        };
                        let ratio = r["ratio"].as_f64().unwrap_or(0.0);
                        vec![
                            name,
                            if r["user"].is_null() {
                                "-".into()
                            } else {
                                s(&r["account"])
                            },
                            s(&r["allocation_gpu_hours"]),
                            s(&r["usage_gpu_hours"]),
                            num(ratio, 3),
                            s(&r["rank"]),
                            s(&r["leaf_rank"]),
                            num(r["fair_share_factor"].as_f64().unwrap_or(0.0), 3),
                            s(&r["tier"]),
                        ]
                    })
                    .collect()
            })
            .unwrap_or_default();
        println!(
            "fair share at {} (window {})",
            local(v["at"].as_i64().unwrap_or(0)),
            policy_core::format_duration(v["window_secs"].as_i64().unwrap_or(0))
        );
        print!(
            "{}",
            render(
                &[
                    "ACCOUNT/USER",
                    "OF",
                    "ALLOC_GPUH",
                    "USAGE_GPUH",
                    "RATIO",
                    "RANK",
                    "LEAF",
                    "FS_FACTOR",
                    "TIER"
                ],
                &rows
            )
        );
        Ok(())
    }

    fn usage(&self, u: &UsageArgs) -> anyhow::Result<()> {
        let mut path = format!("/v1/usage?by={}", u.by);
        if let Some(a) = &u.at {
            path.push_str(&format!("&at={}", time_arg("at", a)?));
        }
        if let Some(sn) = &u.since {
            path.push_str(&format!("&since={}", time_arg("since", sn)?));
        }
        let v = self.get(&path)?;
        self.out(&v, |v| {
            let by_user = v["by"] == "user";
            let rows: Vec<Vec<String>> = v["rows"]
                .as_array()
                .map(|rows| {
                    rows.iter()
                        .map(|r| {
                            let mut row = vec![s(&r["account"])];
                            if by_user {
                                row.push(s(&r["user"]));
                            }
                            row.extend([
                                s(&r["usage_gpu_hours"]),
                                s(&r["raw_gpu_hours"]),
                                s(&r["free_gpu_hours"]),
                            ]);
                            row
                        })
                        .collect()
                })
                .unwrap_or_default();
            let headers: &[&str] = if by_user {
                &["ACCOUNT", "USER", "USAGE_GPUH", "RAW_GPUH", "FREE_GPUH"]
            } else {
                &["ACCOUNT", "USAGE_GPUH", "RAW_GPUH", "FREE_GPUH"]
            };
            format!(
                "usage from {} to {}\n{}",
                local(v["from"].as_i64().unwrap_or(0)),
                local(v["to"].as_i64().unwrap_or(0)),
                render(headers, &rows)
            )
        })
    }

    fn import(
        &self,
        file: &std::path::Path,
        skip_invalid: bool,
        tz: Option<&str>,
    ) -> anyhow::Result<()> {
        let text =
            std::fs::read(file).with_context(|| format!("cannot read {}", file.display()))?;
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
        let v = self.send("POST", &path, Some(("text/plain", text)))?;
        self.out(&v, |v| {
            let mut out = format!(
                "{} lines, {} runs: {} new, {} updated, {} unchanged; {} skipped (not started)\n",
                s(&v["lines"]),
                s(&v["runs"]),
                s(&v["inserted"]),
                s(&v["updated"]),
                s(&v["unchanged"]),
                v["skipped"].as_array().map_or(0, Vec::len)
            );
            if let Some(bad) = v["invalid"].as_array().filter(|b| !b.is_empty()) {
                out.push_str(&format!("{} invalid lines not imported:\n", bad.len()));
                for e in bad {
                    out.push_str(&format!("  line {}: {}\n", s(&e["line"]), s(&e["error"])));
                }
            }
            out
        })
    }

    fn audit(&self, limit: i64) -> anyhow::Result<()> {
        let all = self.get("/v1/audit?limit=100000")?;
        let items = all.as_array().cloned().unwrap_or_default();
        let keep = usize::try_from(limit.max(0)).unwrap_or(0);
        let v = Value::Array(items[items.len().saturating_sub(keep)..].to_vec());
        self.out(&v, |v| {
            let rows: Vec<Vec<String>> = v
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|e| {
                            let change = match (&e["old"], &e["new"]) {
                                (Value::Null, n) => format!("new {n}"),
                                (o, Value::Null) => format!("was {o}"),
                                (o, n) => format!("{o} -> {n}"),
                            };
                            vec![
                                s(&e["id"]),
                                local(e["at"].as_i64().unwrap_or(0)),
                                s(&e["actor"]),
                                s(&e["action"]),
                                s(&e["target"]),
                                change,
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
            render(&["ID", "AT", "ACTOR", "ACTION", "TARGET", "CHANGE"], &rows)
        })
    }

    fn why(&self, job: u32) -> anyhow::Result<()> {
        let v = self.get(&format!("/v1/jobs/{job}/why"))?;
        self.out(&v, |w| {
            let mut o = format!(
                "job {} run {}: {}/{}, {}, {} GPU(s){}{}\n",
                s(&w["job_id"]),
                s(&w["run"]),
                s(&w["account"]),
                s(&w["user"]),
                s(&w["state"]),
                s(&w["gpus"]),
                w["gpu_type"]
                    .as_str()
                    .map(|t| format!(" {t}"))
                    .unwrap_or_default(),
                if w["free_tier"] == true {
                    ", free tier"
                } else {
                    ""
                },
            );
            o.push_str(&format!(
                "tier:      {}\nrank:      {} of {} (fair-share factor {})\n",
                s(&w["tier"]),
                s(&w["rank"]),
                s(&w["num_leaves"]),
                num(w["fair_share_factor"].as_f64().unwrap_or(0.0), 3)
            ));
            let pp = &w["priority_parts"];
            o.push_str(&format!(
                "priority:  {} (tier {}, rank level {}, age {} min)\n",
                w["priority"],
                s(&pp["tier"]),
                s(&pp["rank_level"]),
                s(&pp["age_minutes"])
            ));
            let path: Vec<String> = w["path"]
                .as_array()
                .map(|p| {
                    p.iter()
                        .map(|st| {
                            format!(
                                "{} (r={}, #{})",
                                s(&st["node"]),
                                num(st["ratio"].as_f64().unwrap_or(0.0), 3),
                                s(&st["rank"])
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
            o.push_str(&format!(
                "path:      {}\n",
                if path.is_empty() {
                    "(account not in the tree)".into()
                } else {
                    path.join(" > ")
                }
            ));
            match w["protected_until"].as_i64() {
                Some(t) => o.push_str(&format!(
                    "protected: until {}{}\n",
                    local(t),
                    if w["protected_now"] == true {
                        " (protected now)"
                    } else {
                        " (window over)"
                    }
                )),
                None => o.push_str("protected: no\n"),
            }
            let peers = |key: &str| -> String {
                let list: Vec<String> = w[key]
                    .as_array()
                    .map(|a| {
                        a.iter()
                            .map(|p| {
                                format!(
                                    "job {} ({}/{}, {} GPUs): {}",
                                    s(&p["job_id"]),
                                    s(&p["account"]),
                                    s(&p["user"]),
                                    s(&p["gpus"]),
                                    s(&p["reason"]["reason"])
                                )
                            })
                            .collect()
                    })
                    .unwrap_or_default();
                if list.is_empty() {
                    "none".into()
                } else {
                    format!("\n  {}", list.join("\n  "))
                }
            };
            if w["state"] == "pending" {
                o.push_str(&format!("could preempt: {}\n", peers("could_preempt")));
            }
            if w["state"] == "running" {
                o.push_str(&format!("preemptable by: {}\n", peers("preemptable_by")));
            }
            o.push_str(&drain::why_text(w));
            o.push_str(&idle::why_text(w));
            o
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "budgetctl",
            "share",
            "--at",
            "2026-01-01T00:00:00Z",
            "--json",
        ])
        .expect("parse");
        assert!(cli.json);
        let cli = Cli::try_parse_from(["budgetctl", "usage", "import", "f.txt", "--skip-invalid"])
            .expect("parse");
        assert!(matches!(
            cli.command,
            Command::Usage(UsageArgs {
                command: Some(UsageCmd::Import {
                    skip_invalid: true,
                    ..
                }),
                ..
            })
        ));
        assert!(
            Cli::try_parse_from(["budgetctl", "account", "add", "x", "--allocation", "-5"]).is_ok()
        );
        assert!(
            Cli::try_parse_from(["budgetctl", "account", "add", "x", "--allocation", "lots"])
                .is_err()
        );
        let cli = Cli::try_parse_from([
            "budgetctl",
            "simulate",
            "--trace",
            "t.csv",
            "--nodes",
            "2",
            "--gpus-per-node",
            "8",
            "--json",
        ])
        .expect("simulate parses");
        assert!(matches!(cli.command, Command::Simulate(ref a) if a.json && a.nodes == Some(2)));
    }
}
