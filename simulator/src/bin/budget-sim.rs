//! `budget-sim`: the simulator without `budgetctl`, same flags as
//! `budgetctl simulate` (for tests and benchmarks).

use clap::Parser;

#[derive(Debug, Parser)]
#[command(
    name = "budget-sim",
    about = "Replay a GPU job trace through the slurm-budget policy and two baselines"
)]
struct Cli {
    #[command(flatten)]
    args: budget_sim::SimulateArgs,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    budget_sim::run_cli(&cli.args)
}
