//! `budget-sim`'s arguments parsed as its command line would parse them, for
//! the modules that replay through `cli::prepare`.

use budget_sim::SimulateArgs;
use clap::Parser;

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

/// The arguments of `budget-sim EXTRA...`, or clap's error.
pub fn try_args(extra: &[&str]) -> Result<SimulateArgs, clap::Error> {
    let mut v = vec!["sim"];
    v.extend_from_slice(extra);
    Cli::try_parse_from(v).map(|c| c.args)
}

/// The arguments of `budget-sim EXTRA...`; a test's own command line must parse.
pub fn args(extra: &[&str]) -> SimulateArgs {
    try_args(extra).expect("the test's command line parses")
}
