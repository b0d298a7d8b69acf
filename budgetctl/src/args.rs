//! The command line: every verb and flag (clap). Parsing only; each verb is
//! carried out by the module of its subject.

use budget_client::DEFAULT_SOCKET;
use clap::{Args, Parser, Subcommand};

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
    /// Bearer token for --url. Visible to every user in `ps`: prefer
    /// --token-file or the BUDGET_TOKEN environment variable.
    #[arg(long, global = true, env = "BUDGET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// File holding the bearer token for --url (its first line; keep it 0600).
    #[arg(
        long,
        global = true,
        env = "BUDGET_TOKEN_FILE",
        conflicts_with = "token"
    )]
    pub token_file: Option<std::path::PathBuf>,
    /// Print JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Request timeout in seconds.
    #[arg(long, global = true, default_value_t = 30)]
    pub timeout: u64,
    /// After a change, wait until slurmctld's plugins have loaded it (exit 1 on
    /// --wait-timeout). Without it budgetctl only says whether it is in effect yet.
    #[arg(long, global = true)]
    pub wait: bool,
    /// Longest --wait, in seconds.
    #[arg(long, global = true, default_value_t = 60, value_name = "SECS")]
    pub wait_timeout: u64,
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
    /// Site policy (min_runtime defaults, preemption strength, site caps, ...).
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
    ///
    /// All or nothing: when Slurm refuses ("Slurm refused this request: <Slurm's
    /// message>") or cannot be reached ("could not reach Slurm: ..."), nothing is
    /// drained, the message is printed and budgetctl exits 1.
    Drain {
        /// Slurm hostlist, e.g. gpu[1-2].
        nodes: String,
        #[arg(long)]
        reason: String,
    },
    /// Drained nodes: state, jobs holding them, when each will be empty.
    Drains,
    /// Return drained nodes to service.
    ///
    /// All or nothing, as drain: if Slurm refuses or cannot be reached, the drain
    /// stays in force and the message is printed (exit 1).
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
    /// Shadow mode's findings over the window (`site_factor/budget` with
    /// `mode=shadow`): how Slurm's order of the pending jobs differs from the
    /// budget order, the preemptions the rule would have made with the work
    /// they would have lost, and each team's shortfall against the rule's target.
    Shadow {
        /// Start of the interval (default: one window before --at).
        #[arg(long)]
        since: Option<String>,
        /// End of the interval (default: now).
        #[arg(long)]
        at: Option<String>,
    },
    /// Write a consistent copy of budgetd's database to FILE while it runs (admin;
    /// budgetd writes FILE on its host; restore with `budgetd --restore FILE`).
    Backup {
        /// Where budgetd writes the copy (made absolute against the current folder).
        file: std::path::PathBuf,
        /// Replace FILE if it exists.
        #[arg(long)]
        force: bool,
    },
    /// Which generation slurmctld's plugins hold: whether every change is in effect
    /// there (with --wait: wait until it is).
    Status,
    /// Replay a job trace through the policy offline (budget-sim); needs no budgetd.
    Simulate(Box<budget_sim::SimulateArgs>),
    /// What if: replay the site's own ledger over the last weeks through the
    /// simulator with allocations changed, per team as it was and as it would be.
    ///
    /// Example: budgetctl whatif --set robotics=+20% --set rl=1200 --weeks 4.
    /// Prints per team the entitlement shortfall, p50/p95 wait, preemptions and
    /// lost work; checks the "as it was" replay against budgetd's own figures for
    /// the window; lists what the replay models rather than measures. Changes nothing.
    Whatif(WhatifArgs),
}

#[derive(Debug, Args)]
pub struct WhatifArgs {
    /// An allocation change, repeatable: ACCOUNT=+20% or ACCOUNT=-10% (relative
    /// to today's), or ACCOUNT=1200 (GPU-hours per window). A change to a parent
    /// account scales its whole subtree.
    #[arg(long = "set", value_name = "ACCOUNT=CHANGE")]
    pub set: Vec<String>,
    /// Weeks of the ledger to replay (1 to 52), ending at --at.
    #[arg(long, default_value_t = 4, conflicts_with = "input")]
    pub weeks: u32,
    /// End of the replay (default: now).
    #[arg(long, conflicts_with = "input")]
    pub at: Option<String>,
    /// Replay this input instead of reading budgetd (FILE, or - for stdin): one
    /// JSON document with the range and what `GET /v1/accounts`, `/v1/policy`,
    /// `/v1/runs` and `/v1/usage?by=user` answer for it
    /// (`budget_protocol::whatif::Input`; budgetd's web view writes it). The
    /// range is the input's: no --weeks or --at.
    #[arg(long, value_name = "FILE")]
    pub input: Option<std::path::PathBuf>,
    /// GPUs per node (default: the most GPUs a run held on one node in the ledger, else 8).
    #[arg(long, value_name = "N")]
    pub gpus_per_node: Option<u32>,
    /// The cluster's GPUs (default: what budgetd last read from Slurm).
    #[arg(long, value_name = "N")]
    pub cluster_gpus: Option<u32>,
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
    /// Show the policy ("(default)": the rule's default, not set here).
    Show,
    /// Set KEY=VALUE ...: default_min_runtime, max_min_runtime (durations: 90m,
    /// 4h, 7d, HH:MM:SS), require_min_runtime (true|false), preemption
    /// (gentle|default|aggressive: a benefit/cost factor of 4, 2 or 1),
    /// site_max_preemptions (count per window|none), site_max_lost_gpu_hours
    /// (GPU-hours per window|none), max_requeues (count|none|default); and
    /// window, snapshot_max_age, idle_threshold (durations). Every other number
    /// of the rule is a constant of it (docs/design.md §6.6).
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
    /// --skip-invalid, which imports the valid lines. A large file is stored in
    /// batches (budgetd's import_batch_runs); if budgetd stops half way, the
    /// batches stored stay, and importing the same file again completes it
    /// without charging anything twice.
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
