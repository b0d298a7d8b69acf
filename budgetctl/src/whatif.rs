//! `budgetctl whatif`: the site's own ledger over the last weeks replayed
//! through the simulator (`budget_sim::whatif`) with today's allocations and
//! with some changed, side by side per team, with the "as it was" replay
//! checked against what budgetd reports for the same window. Reads
//! `GET /v1/accounts`, `/v1/policy`, `/v1/runs` and `/v1/usage`, or the same
//! four documents from `--input` (budgetd's web view runs it so, without a
//! token: `budget_protocol::whatif::Input`); changes nothing. Progress goes
//! to stderr while the replays run.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use budget_protocol::reports::UsageReport;
use budget_protocol::runs::{LedgerRun, RunsReport};
use budget_protocol::whatif::Input;
use budget_protocol::{Policy, RunState};
use budget_sim::whatif::{
    self, Account, Comparison, Figures, Inputs, Progress, RunStatus, Setting,
};
use policy_core::AccountSpec;
use serde::Serialize;

use crate::api::Api;
use crate::args::{UsageError, WhatifArgs};
use crate::output::{Out, local, now, num, render, time_arg};

/// How close "as it was" must come to the ledger: 2% of usage, 2 points of shortfall.
pub const FAITHFUL_WITHIN: f64 = 0.02;

/// GPUs per node when neither the flag nor the ledger tells.
const DEFAULT_GPUS_PER_NODE: u32 = 8;

/// The faithfulness check of one team.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub team: String,
    /// GPU-hours budgetd reports for the window (`GET /v1/usage`, raw).
    pub usage_budgetd: f64,
    pub usage_as_it_was: f64,
    /// `(as it was - budgetd) / budgetd`; 0 when both are 0.
    pub usage_difference: Option<f64>,
    /// Entitlement shortfall measured on the ledger and in the replay.
    pub shortfall_ledger: f64,
    pub shortfall_as_it_was: f64,
    pub shortfall_difference: f64,
    pub within: bool,
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub struct Answer {
    #[serde(flatten)]
    pub comparison: Comparison,
    pub faithfulness: Vec<Check>,
    /// Whether every team's "as it was" is within [`FAITHFUL_WITHIN`].
    pub faithful: bool,
    pub faithful_within: f64,
    /// Runs in the range the caller may not see, left out of the replay.
    pub hidden_runs: u64,
    /// Where the cluster's size and GPUs per node came from.
    pub cluster_source: String,
}

pub fn run(api: &Api, out: Out, a: &WhatifArgs) -> anyhow::Result<()> {
    // Bad values are refused before anything is read or replayed.
    let settings: Vec<Setting> = a
        .set
        .iter()
        .map(|s| s.parse::<Setting>().map_err(|e| UsageError(e.to_string())))
        .collect::<Result<_, _>>()?;
    let t0 = Instant::now();
    let say = |msg: &str| {
        eprintln!("whatif: {:>5.1}s {msg}", t0.elapsed().as_secs_f64());
    };
    let input = match &a.input {
        Some(path) => {
            let input = read_input(path)?;
            tree(&input.accounts, &settings)?;
            say(&format!(
                "{} runs read from the input, {} to {}",
                input.runs.runs.len(),
                local(input.since),
                local(input.until)
            ));
            input
        }
        None => fetch(api, a, &settings, &say)?,
    };
    replay(out, a, &settings, input, &say)
}

/// The accounts as the simulator's library reads them, with `settings`
/// checked against them (unknown accounts, twice the same, a negative
/// result) before any replay.
fn tree(specs: &[AccountSpec], settings: &[Setting]) -> anyhow::Result<BTreeMap<String, Account>> {
    let accounts: BTreeMap<String, Account> = specs
        .iter()
        .map(|s| {
            let a = Account {
                parent: s.parent.clone(),
                allocation_gpu_hours: s.allocation_gpu_hours,
            };
            (s.name.clone(), a)
        })
        .collect();
    whatif::apply_settings(&accounts, settings).map_err(|e| UsageError(e.to_string()))?;
    Ok(accounts)
}

/// `--input FILE` (or `-`, stdin): a [`budget_protocol::whatif::Input`].
fn read_input(path: &Path) -> anyhow::Result<Input> {
    let text = if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| UsageError(format!("--input -: cannot read stdin: {e}")))?;
        s
    } else {
        std::fs::read_to_string(path)
            .map_err(|e| UsageError(format!("--input {}: {e}", path.display())))?
    };
    let input: Input = serde_json::from_str(&text).map_err(|e| {
        UsageError(format!(
            "--input {}: not a what-if input: {e}",
            path.display()
        ))
    })?;
    if input.since >= input.until {
        return Err(UsageError(format!(
            "--input {}: the range is empty (since {} is not before until {})",
            path.display(),
            input.since,
            input.until
        ))
        .into());
    }
    Ok(input)
}

/// The input read from budgetd over HTTP: the last `--weeks` up to `--at`.
fn fetch(
    api: &Api,
    a: &WhatifArgs,
    settings: &[Setting],
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Input> {
    if a.weeks == 0 || a.weeks > 52 {
        return Err(UsageError("--weeks: between 1 and 52".into()).into());
    }
    let until = match &a.at {
        Some(t) => time_arg("at", t)?,
        None => now(),
    };
    let since = until - i64::from(a.weeks) * whatif::WEEK;
    let accounts: Vec<AccountSpec> = api.get("/v1/accounts")?;
    tree(&accounts, settings)?;
    let policy: Policy = api.get("/v1/policy")?;
    say(&format!(
        "reading the ledger from {} to {}",
        local(since),
        local(until)
    ));
    let runs: RunsReport = api.get(&format!(
        "{}?since={since}&until={until}",
        budget_protocol::runs::ROUTE
    ))?;
    let usage: UsageReport = api.get(&format!("/v1/usage?by=user&since={since}&at={until}"))?;
    say(&format!("{} runs read", runs.runs.len()));
    Ok(Input {
        since,
        until,
        accounts,
        policy,
        runs,
        usage,
    })
}

/// Both replays of `input` and the faithfulness check, printed.
fn replay(
    out: Out,
    a: &WhatifArgs,
    settings: &[Setting],
    input: Input,
    say: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<()> {
    let Input {
        since,
        until,
        accounts,
        policy,
        runs: report,
        usage,
    } = input;
    let accounts = tree(&accounts, settings)?;
    let (cluster_gpus, gpus_source) = match (a.cluster_gpus, report.cluster_gpus) {
        (Some(g), _) => (g, "--cluster-gpus"),
        (None, Some(g)) => (g, "budgetd's last read of Slurm"),
        (None, None) => {
            return Err(UsageError(
                "budgetd does not know the cluster's GPUs (it has not read them from Slurm): pass --cluster-gpus N"
                    .into(),
            )
            .into());
        }
    };
    let (gpn, gpn_source) = match a.gpus_per_node {
        Some(g) => (g, "--gpus-per-node".to_string()),
        None => match largest_single_node_run(&report.runs) {
            Some(g) => (g, "the largest single-node run".to_string()),
            None => (DEFAULT_GPUS_PER_NODE, "default".to_string()),
        },
    };
    let (nodes, gpus_per_node) =
        whatif::shape(cluster_gpus, gpn).map_err(|e| UsageError(e.to_string()))?;
    let cluster_source = format!(
        "{cluster_gpus} GPUs ({gpus_source}) as {nodes} nodes x {gpus_per_node} GPUs ({gpn_source})"
    );
    let inputs = Inputs {
        runs: report.runs.iter().map(sim_run).collect(),
        since,
        until,
        window_secs: report.window_secs,
        rule: policy.rebalance(),
        nodes,
        gpus_per_node,
        accounts,
    };
    let done = AtomicBool::new(false);
    let comparison = std::thread::scope(|s| {
        // A line every 2 s while the replays run, so a long one shows life.
        s.spawn(|| {
            let mut next = Instant::now() + Duration::from_secs(2);
            while !done.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
                if Instant::now() >= next {
                    say("replaying ...");
                    next += Duration::from_secs(2);
                }
            }
        });
        let progress = |p: Progress| match p {
            Progress::Converted { jobs, runs } => say(&format!(
                "{runs} runs -> {jobs} jobs; replaying on {cluster_source}"
            )),
            Progress::Started(case) => say(&format!("{case}: replaying")),
            Progress::Finished { case, seconds } => say(&format!("{case}: done in {seconds:.1} s")),
        };
        let r = whatif::compare(&inputs, settings, &progress);
        done.store(true, Ordering::Relaxed);
        r
    })
    .map_err(|e| UsageError(e.to_string()))?;
    let _ = std::io::stderr().flush();
    let mut budgetd_usage: BTreeMap<&str, f64> = BTreeMap::new();
    for r in &usage.rows {
        *budgetd_usage.entry(r.account.as_str()).or_default() += r.raw_gpu_hours;
    }
    let faithfulness: Vec<Check> = comparison
        .teams
        .iter()
        .map(|t| {
            check(
                t.team.as_str(),
                budgetd_usage.get(t.team.as_str()).copied().unwrap_or(0.0),
                &t.ledger,
                &t.as_it_was,
            )
        })
        .collect();
    let answer = Answer {
        faithful: faithfulness.iter().all(|c| c.within),
        faithfulness,
        faithful_within: FAITHFUL_WITHIN,
        hidden_runs: report.hidden,
        cluster_source,
        comparison,
    };
    out.print(&answer, text)
}

/// The ledger row as the simulator's library reads it.
fn sim_run(r: &LedgerRun) -> whatif::LedgerRun {
    whatif::LedgerRun {
        job_id: r.job_id,
        run: r.run,
        rerun: r.rerun,
        submit: r.submit,
        account: r.account.clone(),
        user: r.user.clone(),
        gpus: r.gpus,
        start: r.start,
        end: r.end,
        status: match r.state {
            RunState::Pending => RunStatus::Pending,
            RunState::Running => RunStatus::Running,
            RunState::Ended => RunStatus::Ended,
            RunState::Requeued => RunStatus::Requeued,
        },
        free: r.free_tier,
        min_runtime: r.min_runtime_secs,
        time_limit: r.time_limit_secs,
        checkpoint: r.checkpoint_secs,
    }
}

/// The most GPUs any run held on one node (nodes listed as one host).
fn largest_single_node_run(runs: &[LedgerRun]) -> Option<u32> {
    runs.iter()
        .filter(|r| {
            r.nodes.as_deref().is_some_and(|n| {
                policy_core::hostlist::expand_at_most(n, 2).is_ok_and(|h| h.len() == 1)
            })
        })
        .map(|r| r.gpus)
        .max()
        .filter(|&g| g > 0)
}

fn check(team: &str, budgetd: f64, ledger: &Figures, was: &Figures) -> Check {
    let usage_difference = if budgetd > 0.0 {
        Some(budget_sim::metrics::r6((was.gpu_hours - budgetd) / budgetd))
    } else if was.gpu_hours == 0.0 {
        Some(0.0)
    } else {
        None
    };
    let shortfall_difference =
        budget_sim::metrics::r6(was.entitlement_shortfall - ledger.entitlement_shortfall);
    Check {
        team: team.to_string(),
        usage_budgetd: budget_sim::metrics::r6(budgetd),
        usage_as_it_was: was.gpu_hours,
        usage_difference,
        shortfall_ledger: ledger.entitlement_shortfall,
        shortfall_as_it_was: was.entitlement_shortfall,
        shortfall_difference,
        within: usage_difference.is_some_and(|d| d.abs() <= FAITHFUL_WITHIN)
            && shortfall_difference.abs() <= FAITHFUL_WITHIN,
    }
}

fn pct(v: f64) -> String {
    format!("{}%", num(v * 100.0, 1))
}

fn hours(v: Option<f64>) -> String {
    v.map_or("-".to_string(), |h| num(h, 2))
}

/// `was -> would` in one cell.
fn pair(a: String, b: String) -> String {
    if a == b { a } else { format!("{a} -> {b}") }
}

fn text(a: &Answer) -> String {
    let c = &a.comparison;
    let mut s = format!(
        "what if, replaying {} to {} ({} jobs from {} ledger rows) on {}\n",
        local(c.since),
        local(c.until),
        c.jobs,
        c.runs,
        a.cluster_source
    );
    if c.settings.is_empty() {
        s.push_str("no allocation changed (--set ACCOUNT=+20% or ACCOUNT=GPU-HOURS): both columns replay today's\n");
    }
    s.push_str("\nper team, as it was -> as it would be:\n");
    let rows: Vec<Vec<String>> = c
        .teams
        .iter()
        .map(|t| {
            let (x, y) = (&t.as_it_was, &t.as_it_would_be);
            vec![
                t.team.clone(),
                pair(
                    num(t.allocation_gpu_hours, 1),
                    num(t.new_allocation_gpu_hours, 1),
                ),
                pair(pct(x.entitlement_shortfall), pct(y.entitlement_shortfall)),
                pair(hours(x.wait_p50_hours), hours(y.wait_p50_hours)),
                pair(hours(x.wait_p95_hours), hours(y.wait_p95_hours)),
                pair(x.preemptions.to_string(), y.preemptions.to_string()),
                pair(num(x.lost_gpu_hours, 1), num(y.lost_gpu_hours, 1)),
                pair(num(x.gpu_hours, 1), num(y.gpu_hours, 1)),
            ]
        })
        .collect();
    s.push_str(&render(
        &[
            "TEAM",
            "ALLOC_GPUH",
            "SHORTFALL",
            "WAIT_P50_H",
            "WAIT_P95_H",
            "PREEMPTIONS",
            "LOST_GPUH",
            "USED_GPUH",
        ],
        &rows,
    ));
    s.push_str(&format!(
        "\nis the replay faithful? \"as it was\" against the ledger (within {}: {}):\n",
        pct(a.faithful_within),
        if a.faithful { "yes" } else { "NO" }
    ));
    let rows: Vec<Vec<String>> = a
        .faithfulness
        .iter()
        .map(|f| {
            vec![
                f.team.clone(),
                num(f.usage_budgetd, 1),
                num(f.usage_as_it_was, 1),
                f.usage_difference
                    .map_or("-".to_string(), |d| format!("{:+.2}%", d * 100.0)),
                pct(f.shortfall_ledger),
                pct(f.shortfall_as_it_was),
                format!("{:+.2}", f.shortfall_difference * 100.0),
                if f.within { "yes" } else { "NO" }.to_string(),
            ]
        })
        .collect();
    s.push_str(&render(
        &[
            "TEAM",
            "USED_GPUH_BUDGETD",
            "USED_GPUH_REPLAY",
            "DIFF",
            "SHORTFALL_LEDGER",
            "SHORTFALL_REPLAY",
            "DIFF_POINTS",
            "WITHIN",
        ],
        &rows,
    ));
    s.push_str("\nmodelled, not measured:\n");
    if a.hidden_runs > 0 {
        s.push_str(&format!(
            "- {} runs of accounts you may not see are left out: the replay is your part of the cluster alone\n",
            a.hidden_runs
        ));
    }
    if c.jobs_left_out > 0 {
        s.push_str(&format!(
            "- {} jobs cancelled before they started are left out\n",
            c.jobs_left_out
        ));
    }
    for m in &c.modelled {
        s.push_str(&format!("- {m}\n"));
    }
    s.push_str(&format!(
        "\nreplayed in {:.1} s (conversion {:.1} s, the two cases side by side: {:.1} s and {:.1} s)\n",
        c.seconds.total, c.seconds.convert, c.seconds.as_it_was, c.seconds.as_it_would_be
    ));
    s
}
