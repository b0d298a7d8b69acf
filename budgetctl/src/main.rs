//! `budgetctl`: the sacctmgr-style admin CLI of budgetd.
//!
//! Turns verbs into API calls through `budget-client`, reading the answers as
//! `budget-protocol`'s types (the ones budgetd serves, so the two cannot
//! disagree), and prints them: tables for people, `--json` for scripts.
//! TIME arguments are converted to Unix seconds here, in the caller's local
//! time zone, so the service never guesses whose "local" was meant.
//! Exit status: 0 success, 1 the request failed (message on stderr as
//! `budgetctl: <message>`), 2 bad usage.
//!
//! One module per subject: [`args`] (the command line), [`api`] (typed
//! calls), [`output`] (tables, `--json`), [`tree`], [`policy`], [`reports`]
//! (share, usage, import, audit, why), [`drains`] (drains and the preemption
//! record), [`idle`], [`shadow`], [`simulate`], [`whatif`] (the ledger replayed
//! with allocations changed), [`site`] (backup, and when a change is in effect
//! in slurmctld: `status`, `--wait`).

mod api;
mod args;
mod drains;
mod idle;
mod output;
mod policy;
mod reports;
mod shadow;
mod simulate;
mod site;
mod tree;
mod whatif;

use clap::Parser;

use crate::api::Api;
use crate::args::{Cli, Command, UsageCmd, UsageError};
use crate::output::Out;

/// Runs a parsed command, printing to stdout.
fn run(cli: &Cli) -> anyhow::Result<()> {
    if let Command::Simulate(args) = &cli.command {
        return simulate::run(args);
    }
    let api = Api::from_cli(cli)?;
    let out = Out { json: cli.json };
    let changes = site::changes_budget_state(&cli.command);
    let result = dispatch(cli, &api, out);
    if result.is_ok() && changes {
        site::in_effect(&api, cli.wait, cli.wait_timeout)?;
    }
    result
}

fn dispatch(cli: &Cli, api: &Api, out: Out) -> anyhow::Result<()> {
    match &cli.command {
        Command::Account(c) => tree::account(api, out, c),
        Command::User(c) => tree::user(api, out, c),
        Command::Coordinator(c) => tree::coordinator(api, out, c),
        Command::Budget(c) => tree::budget(api, out, c),
        Command::Weights(c) => tree::weights(api, out, c),
        Command::Policy(c) => policy::run(api, out, c),
        Command::Share { at } => reports::share(api, out, at.as_deref()),
        Command::Usage(u) => match &u.command {
            Some(UsageCmd::Import {
                file,
                skip_invalid,
                tz,
            }) => reports::import(api, out, file, *skip_invalid, tz.as_deref()),
            None if u.preemptions => drains::preemptions(api, out, u.since.as_deref()),
            None => reports::usage(api, out, u),
        },
        Command::Audit { limit } => reports::audit(api, out, *limit),
        Command::Why { job_id } => reports::why(api, out, *job_id),
        Command::Drain { nodes, reason } => drains::drain(api, out, nodes, reason),
        Command::Drains => drains::drains(api, out),
        Command::Undrain { nodes } => drains::undrain(api, out, nodes),
        Command::Idle { since, at } => idle::run(api, out, since.as_deref(), at.as_deref()),
        Command::Shadow { since, at } => shadow::run(api, out, since.as_deref(), at.as_deref()),
        Command::Backup { file, force } => site::backup(api, out, cli.url.is_some(), file, *force),
        Command::Status => site::status(api, out, cli.wait, cli.wait_timeout),
        Command::Simulate(args) => simulate::run(args),
        Command::Whatif(a) => whatif::run(api, out, a),
    }
}

fn main() {
    let cli = Cli::parse();
    if let Err(e) = run(&cli) {
        // The chain of causes, each once (some errors repeat their source).
        let mut msg = String::new();
        for cause in e.chain() {
            let text = cause.to_string();
            if !msg.contains(&text) {
                if !msg.is_empty() {
                    msg.push_str(": ");
                }
                msg.push_str(&text);
            }
        }
        eprintln!("budgetctl: {msg}");
        std::process::exit(if e.downcast_ref::<UsageError>().is_some() {
            2
        } else {
            1
        });
    }
}
