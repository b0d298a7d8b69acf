//! `budgetctl simulate`: replays a job trace through the policy offline
//! (`budget-sim`, the same flags as the `budget-sim` binary); needs no budgetd.

use budget_sim::SimulateArgs;

pub fn run(args: &SimulateArgs) -> anyhow::Result<()> {
    budget_sim::run_cli(args)
}
