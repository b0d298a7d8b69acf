//! `budgetctl`: thin entry point; see `budget_service::ctl`.

use budget_service::ctl::{Cli, UsageError, run};
use clap::Parser;

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
