//! Command line: `budgetctl simulate` / `budget-sim` (same flags).
//!
//! Team allocations (`--shares`) come from, in order: `--shares TEAM=GPUS,...`;
//! `--quota-file` (see [`crate::trace::load_quotas`]); the trace's documented
//! quotas (Helios: vcvGl 160, vcvlY 16 GPUs); for Philly `philly_vc_quota.csv`
//! beside the trace (nodes x GPUs per node); else the cluster split equally.
//! Philly has no teams: each job gets one drawn by the seed in proportion to
//! the quotas, and every output says so. `--scenario` replaces the trace by a
//! generated workload ([`crate::scenario`]) with its own cluster and allocations.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::Context as _;

use policy_core::rebalance::RebalancePolicy;

use crate::engine::{MinRuntimeRule, Outcome, PolicyKind, SimConfig, simulate};
use crate::limits::TimeLimitModel;
use crate::metrics::{PolicyReport, report};
use crate::scenario::ScenarioName;
use crate::trace::{self, Format, JobSpec};

/// Which policies to replay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PolicyArg {
    /// The product, cost-aware preemption rule.
    Budget,
    /// The product with the old rule (preempt as soon as allowed).
    BudgetV1,
    Static,
    Decay,
    /// Slurm's Fair Tree fair share (no preemption).
    FairTree,
    /// Slurm's multifactor with QOS preemption after PreemptExemptTime.
    MultifactorQos,
    /// All six.
    All,
}

impl PolicyArg {
    pub fn kinds(self) -> Vec<PolicyKind> {
        match self {
            PolicyArg::Budget => vec![PolicyKind::Budget],
            PolicyArg::BudgetV1 => vec![PolicyKind::BudgetV1],
            PolicyArg::Static => vec![PolicyKind::Static],
            PolicyArg::Decay => vec![PolicyKind::Decay],
            PolicyArg::FairTree => vec![PolicyKind::FairTree],
            PolicyArg::MultifactorQos => vec![PolicyKind::MultifactorQos],
            PolicyArg::All => PolicyKind::ALL.to_vec(),
        }
    }
}

/// The policies named by a list of `--policy` values, each once, in canonical order.
pub fn policy_kinds(args: &[PolicyArg]) -> Vec<PolicyKind> {
    let mut v: Vec<PolicyKind> = args.iter().flat_map(|a| a.kinds()).collect();
    v.sort();
    v.dedup();
    v
}

/// `--rule key=value,...`: settings of the cost-aware rule
/// ([`RebalancePolicy::set`]), applied over the defaults. Boxed: `budgetctl`'s
/// command enum holds these arguments inline.
#[derive(Debug, Clone, PartialEq)]
pub struct RuleArg(pub Box<RebalancePolicy>);

fn parse_rule(s: &str) -> Result<RuleArg, String> {
    let mut p = RebalancePolicy::default();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected KEY=VALUE"))?;
        p.set(k, v).map_err(|e| e.to_string())?;
    }
    Ok(RuleArg(Box::new(p)))
}

/// Team allocations in GPUs, from `TEAM=GPUS,...`.
#[derive(Debug, Clone, PartialEq)]
pub struct Shares(pub BTreeMap<String, f64>);

fn parse_shares(s: &str) -> Result<Shares, String> {
    let mut out = BTreeMap::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (team, gpus) = part
            .split_once('=')
            .ok_or_else(|| format!("{part:?}: expected TEAM=GPUS"))?;
        let g: f64 = gpus
            .trim()
            .parse()
            .map_err(|_| format!("{part:?}: GPUS must be a number"))?;
        if !(g.is_finite() && g >= 0.0) || team.trim().is_empty() {
            return Err(format!("{part:?}: expected a team name and GPUs >= 0"));
        }
        if out.insert(team.trim().to_string(), g).is_some() {
            return Err(format!("team {:?} given twice", team.trim()));
        }
    }
    if out.is_empty() {
        return Err("no shares given".into());
    }
    Ok(Shares(out))
}

/// A duration (`90m`, `2h30m`, `HH:MM:SS`...) or `0` / `none`.
/// `all` or `FROM-UNTIL` (durations, FROM before UNTIL): a span of simulated time.
fn parse_span(s: &str) -> Result<(i64, i64), String> {
    if s.trim() == "all" {
        return Ok((0, i64::MAX));
    }
    let (from, until) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: want all or FROM-UNTIL, e.g. 7d-14d"))?;
    let (from, until) = (parse_secs(from)?, parse_secs(until)?);
    if from >= until {
        return Err(format!("{s:?}: FROM must come before UNTIL"));
    }
    Ok((from, until))
}

fn parse_secs(s: &str) -> Result<i64, String> {
    match s.trim() {
        "0" | "none" => Ok(0),
        d => policy_core::parse_duration(d).map_err(|e| e.to_string()),
    }
}

fn parse_positive_secs(s: &str) -> Result<i64, String> {
    match parse_secs(s)? {
        0 => Err("must be longer than 0".into()),
        v => Ok(v),
    }
}

/// `--backfill-reservations`: `all` (every blocked job the pass examines, as
/// Slurm's backfill) or a count from 1 (EASY backfill) to 10,000.
fn parse_reservations(s: &str) -> Result<usize, String> {
    match s.trim() {
        "all" => Ok(crate::engine::ALL_RESERVATIONS),
        n => match n.parse::<usize>() {
            Ok(k @ 1..=10_000) => Ok(k),
            _ => Err(format!(
                "expected `all` or a whole number from 1 to 10000, got {n:?}"
            )),
        },
    }
}

/// `simulate` arguments. Scripts depend on these names.
#[derive(Debug, Clone, clap::Args)]
pub struct SimulateArgs {
    /// Job trace to replay.
    #[arg(long, required_unless_present = "scenario")]
    pub trace: Option<PathBuf>,
    /// A generated workload instead of a trace (drawn from --seed; brings its
    /// own cluster and allocations, which --nodes, --gpus-per-node, --shares override).
    #[arg(long, value_enum, conflicts_with_all = ["trace", "format", "quota_file"])]
    pub scenario: Option<ScenarioName>,
    /// Trace format; default: guessed from the file name (helios, philly, else csv).
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Nodes in the simulated cluster.
    #[arg(long, required_unless_present = "scenario", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: Option<u32>,
    /// GPUs per node.
    #[arg(long, required_unless_present = "scenario", value_parser = clap::value_parser!(u32).range(1..))]
    pub gpus_per_node: Option<u32>,
    /// Policies to replay (comma separated), or all six side by side.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "all")]
    pub policy: Vec<PolicyArg>,
    /// Team allocations as GPU counts (allocation = GPUs x window), e.g. `a=96,b=32`.
    #[arg(long, value_parser = parse_shares)]
    pub shares: Option<Shares>,
    /// Seed for every random draw (Philly teams, static priorities, free-tier draws).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Print one JSON object keyed by policy name instead of tables.
    #[arg(long)]
    pub json: bool,
    /// Minimum runtime of jobs whose trace declares none: `fixed:1h` (1 h for
    /// every job: the product's default for a job that declares none),
    /// `cap:2h` or `2h` (min(duration, 2h)), `frac:0.25` (a quarter of the
    /// duration), `none`.
    #[arg(long, default_value = "fixed:1h", value_parser = MinRuntimeRule::parse)]
    pub min_runtime_rule: MinRuntimeRule,
    /// Checkpoint interval that jobs whose trace has none keep and declare
    /// (`checkpoint=` in their comment): a preempted job loses only the work
    /// since its last checkpoint (`0`: no checkpoints, the whole run is lost).
    #[arg(long, default_value = "0", value_parser = parse_secs)]
    pub checkpoint_interval: i64,
    /// Users' requested time limits: `exact` (each run's limit = its remaining
    /// work: perfect knowledge), `moderate` (duration x 1-3, rounded up to a
    /// wall-time class), `sloppy` (x 1-10, 40% ask for the maximum), or
    /// `overrequest:LO-HI[,max:P]`. Backfill and the preemption rule see only limits.
    #[arg(long, default_value = "moderate", value_parser = TimeLimitModel::parse)]
    pub time_limits: TimeLimitModel,
    /// The partition's maximum time limit.
    #[arg(long, default_value = "7d", value_parser = parse_positive_secs)]
    pub max_time_limit: i64,
    /// Settings of the cost-aware rule (`budget`), e.g.
    /// `shortfall_tolerance=0.05,lost_budget=none,max_requeues=2,reverse_lock=off,
    /// over_budget_band=off,site_max_preemptions=20,site_max_lost_gpu_hours=500,hysteresis=0.1`.
    #[arg(long, value_parser = parse_rule)]
    pub rule: Option<RuleArg>,
    /// Write `share_<policy>.svg` charts into this directory.
    #[arg(long)]
    pub svg_dir: Option<PathBuf>,
    /// Write `timeline_<policy>.csv` into this directory: per hour and team, GPUs
    /// held and GPUs entitled-and-asked-for (where a shortfall comes from).
    #[arg(long)]
    pub timeline_dir: Option<PathBuf>,
    /// Sliding usage window.
    #[arg(long, default_value = "7d", value_parser = parse_positive_secs)]
    pub window: i64,
    /// Preemption hysteresis between budgeted sides (usage-ratio gap) of the
    /// old rule (`budget-v1`); the cost-aware rule's is `--rule hysteresis=`.
    #[arg(long, default_value_t = 0.1)]
    pub hysteresis: f64,
    /// Replay only the first N jobs (by submit time).
    #[arg(long)]
    pub max_jobs: Option<usize>,
    /// Quota file `name,count` (a header naming nodes means node counts).
    #[arg(long)]
    pub quota_file: Option<PathBuf>,
    /// Priority / fair-share recalculation period.
    #[arg(long, default_value = "5m", value_parser = parse_positive_secs)]
    pub recalc_interval: i64,
    /// Fraction of jobs drawn by the seed into the free tier (budget policy).
    #[arg(long, default_value_t = 0.0)]
    pub free_fraction: f64,
    /// Pending jobs examined per scheduling pass (Slurm's bf_max_job_test).
    #[arg(long, default_value_t = 200)]
    pub backfill_depth: usize,
    /// What the first blocked job's reservation holds: `nodes` (Slurm's
    /// sched/backfill: the nodes it will start on, from its planned start) or
    /// `gpus` (GPU counts only, the engine's older model).
    #[arg(long, value_enum, default_value = "nodes")]
    pub backfill: crate::engine::Backfill,
    /// Blocked jobs per pass that hold nodes, with `--backfill nodes`: `all`
    /// (every blocked job the pass examines, as Slurm's backfill plans them)
    /// or the first K (1: EASY backfill). Each is planned on the nodes the
    /// earlier ones of the pass do not hold.
    /// Default: `all` with `--backfill nodes`; `--backfill gpus` has one
    /// GPU-count reservation.
    #[arg(long, value_parser = parse_reservations)]
    pub backfill_reservations: Option<usize>,
    /// How far ahead a blocked job's start may be planned for it to hold
    /// nodes (Slurm's `bf_window`; with `--backfill nodes`).
    #[arg(long, default_value = "7d", value_parser = parse_positive_secs)]
    pub backfill_window: i64,
    /// Seconds between backfill passes (Slurm's `bf_interval`, default
    /// 30 s); between them the main scheduler starts jobs in priority order
    /// and stops at the first that cannot start. `0`: backfill on every event.
    #[arg(long, default_value = "30s", value_parser = parse_secs)]
    pub bf_interval: i64,
    /// How long a preempted job waits, requeued, before it may start again
    /// (Slurm: the credential lifetime + 1 s, 121 s by default). `0`: at once.
    #[arg(long, default_value = "121s", value_parser = parse_secs)]
    pub requeue_delay: i64,
    /// Check the incremental window against policy_core::window_usage at every
    /// recalculation (slow; for small traces).
    #[arg(long)]
    pub verify_window: bool,
    /// Report, for the cost-aware rule, why it refused the (pending, running)
    /// pairs it was asked about and how each preemption attempt ended
    /// (`refusals` in the JSON report): what binds. Optionally only within a
    /// span of simulated time since the first submission, `FROM-UNTIL` (e.g.
    /// `7d-14d`: a late team's first week); alone, the whole replay.
    #[arg(long, num_args = 0..=1, default_missing_value = "all", value_parser = parse_span)]
    pub count_refusals: Option<(i64, i64)>,
    /// Report, for team TEAM (a late-arrival scenario's `l`), what an oracle
    /// that knows every job's end would have given its first window and the
    /// least work it would have destroyed for it (`late_oracle` in the JSON
    /// report; `simulator/src/late_oracle.rs` says what it assumes).
    #[arg(long, value_name = "TEAM")]
    pub late_oracle: Option<String>,
}

/// Inputs resolved from the arguments, ready to replay.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub jobs: Vec<JobSpec>,
    pub shares: BTreeMap<String, f64>,
    pub cfg: SimConfig,
    pub policies: Vec<PolicyKind>,
    pub notes: Vec<String>,
    /// `--late-oracle`: the team whose first window the oracle judges.
    pub late_oracle: Option<String>,
}

/// Reads the trace (or generates the scenario) and resolves teams, allocations and settings.
pub fn prepare(args: &SimulateArgs) -> anyhow::Result<Prepared> {
    if !(0.0..=1.0).contains(&args.free_fraction) {
        anyhow::bail!("--free-fraction must be in [0, 1]");
    }
    if !(args.hysteresis.is_finite() && args.hysteresis >= 0.0) {
        anyhow::bail!("--hysteresis must be a number >= 0");
    }
    let backfill_reservations = match (args.backfill, args.backfill_reservations) {
        (crate::engine::Backfill::Gpus, Some(k)) if k > 1 => anyhow::bail!(
            "--backfill-reservations {} needs --backfill nodes (a GPU-count reservation holds no nodes)",
            if k == crate::engine::ALL_RESERVATIONS {
                "all".to_string()
            } else {
                k.to_string()
            }
        ),
        (crate::engine::Backfill::Gpus, _) => 1,
        (crate::engine::Backfill::Nodes, k) => k.unwrap_or(crate::engine::ALL_RESERVATIONS),
    };
    let (mut tr, format, source, nodes, gpus_per_node) = match (&args.scenario, &args.trace) {
        (Some(name), _) => {
            let sc = name.generate(args.seed);
            let tr = trace::Trace {
                jobs: sc.jobs,
                notes: vec![sc.description],
                default_shares: Some(sc.shares),
            };
            (
                tr,
                None,
                format!("scenario {}", name.name()),
                args.nodes.unwrap_or(sc.nodes),
                args.gpus_per_node.unwrap_or(sc.gpus_per_node),
            )
        }
        (None, Some(path)) => {
            let format = args.format.unwrap_or_else(|| Format::guess(path));
            let (Some(nodes), Some(gpn)) = (args.nodes, args.gpus_per_node) else {
                anyhow::bail!("--nodes and --gpus-per-node are required with --trace");
            };
            (
                trace::load(path, format)?,
                Some(format),
                format!("trace {} ({format:?})", path.display()),
                nodes,
                gpn,
            )
        }
        (None, None) => anyhow::bail!("give --trace PATH or --scenario NAME"),
    };
    let quota_file = args.quota_file.clone().or_else(|| {
        let path = args.trace.as_ref()?;
        (format == Some(Format::Philly))
            .then(|| path.with_file_name("philly_vc_quota.csv"))
            .filter(|p| p.exists())
    });
    let file_quotas = match &quota_file {
        Some(p) => Some(trace::load_quotas(p, gpus_per_node)?),
        None => None,
    };
    let capacity = f64::from(nodes) * f64::from(gpus_per_node);
    let mut notes = vec![format!(
        "{source}, cluster {nodes} nodes x {gpus_per_node} GPUs, seed {}, window {}, min runtime {}, checkpoint {}, time limits {} (max {})",
        args.seed,
        policy_core::format_duration(args.window),
        args.min_runtime_rule.describe(),
        if args.checkpoint_interval > 0 {
            policy_core::format_duration(args.checkpoint_interval)
        } else {
            "none".into()
        },
        args.time_limits.describe(),
        policy_core::format_duration(args.max_time_limit),
    )];
    let rule = args.rule.as_ref().map(|r| *r.0).unwrap_or_default();
    if rule != RebalancePolicy::default() {
        notes.push(format!("cost-aware rule settings: {rule:?}"));
    }
    let shares: BTreeMap<String, f64> = if let Some(s) = &args.shares {
        notes.push("allocations from --shares".into());
        s.0.clone()
    } else if let Some(q) = &file_quotas {
        notes.push(format!(
            "allocations from {}",
            quota_file
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default()
        ));
        q.clone()
    } else if let Some(d) = &tr.default_shares {
        notes.push(if args.scenario.is_some() {
            "allocations from the scenario".into()
        } else {
            "allocations from the trace's documented quotas (SOURCES.md)".into()
        });
        d.clone()
    } else {
        BTreeMap::new()
    };
    if tr.jobs.iter().any(|j| j.team.is_empty()) {
        if shares.is_empty() {
            anyhow::bail!("the trace has no teams: give --shares or --quota-file to assign them");
        }
        trace::assign_teams(&mut tr, &shares, args.seed);
    }
    let shares = if shares.is_empty() {
        let teams: std::collections::BTreeSet<&str> =
            tr.jobs.iter().map(|j| j.team.as_str()).collect();
        let each = capacity / teams.len().max(1) as f64;
        notes.push(format!(
            "no allocations given: the cluster is split equally ({each:.2} GPUs per team)"
        ));
        teams.into_iter().map(|t| (t.to_string(), each)).collect()
    } else {
        shares
    };
    let sum: f64 = shares.values().sum();
    if (sum - capacity).abs() > 1e-9 {
        notes.push(format!(
            "allocations sum to {sum} GPUs, the cluster has {capacity}{}",
            if sum > capacity {
                ": entitlements are scaled down in proportion"
            } else {
                ""
            }
        ));
    }
    let unknown: std::collections::BTreeSet<&str> = tr
        .jobs
        .iter()
        .map(|j| j.team.as_str())
        .filter(|t| !shares.contains_key(*t))
        .collect();
    if !unknown.is_empty() {
        notes.push(format!(
            "teams without allocation (always over budget): {}",
            unknown.into_iter().collect::<Vec<_>>().join(",")
        ));
    }
    if let Some(n) = args.max_jobs
        && n < tr.jobs.len()
    {
        notes.push(format!(
            "only the first {n} of {} jobs replayed (--max-jobs)",
            tr.jobs.len()
        ));
        tr.jobs.truncate(n);
    }
    let too_big = tr
        .jobs
        .iter()
        .filter(|j| f64::from(j.gpus) > capacity)
        .count();
    if too_big > 0 {
        notes.push(format!("{too_big} jobs larger than the cluster skipped"));
        tr.jobs.retain(|j| f64::from(j.gpus) <= capacity);
    }
    notes.extend(tr.notes.iter().cloned());
    // Give up well after any sane schedule: last submission + 10x the time the
    // whole trace's work needs on the cluster + 30 days.
    let work: f64 = tr
        .jobs
        .iter()
        .map(|j| j.duration as f64 * f64::from(j.gpus))
        .sum();
    let last_submit = tr.jobs.last().map(|j| j.submit).unwrap_or(0);
    let horizon = last_submit
        .saturating_add((10.0 * work / capacity.max(1.0)) as i64)
        .saturating_add(30 * 86_400);
    let cfg = SimConfig {
        horizon,
        nodes,
        gpus_per_node,
        window: args.window,
        recalc: args.recalc_interval,
        hysteresis: args.hysteresis,
        rule,
        checkpoint: args.checkpoint_interval,
        min_runtime: args.min_runtime_rule,
        time_limits: args.time_limits,
        max_time_limit: args.max_time_limit,
        backfill_depth: args.backfill_depth.max(1),
        backfill: args.backfill,
        backfill_reservations,
        backfill_window: args.backfill_window,
        bf_interval: args.bf_interval,
        requeue_delay: args.requeue_delay,
        seed: args.seed,
        free_fraction: args.free_fraction,
        verify_window: args.verify_window,
        count_refusals: args.count_refusals,
        ..SimConfig::default()
    };
    if let Some(team) = &args.late_oracle {
        if !shares.contains_key(team) {
            anyhow::bail!(
                "--late-oracle {team}: no such team (teams: {})",
                shares.keys().cloned().collect::<Vec<_>>().join(", ")
            );
        }
        // The oracle counts a victim's whole run as lost.
        if args.checkpoint_interval > 0 {
            anyhow::bail!("--late-oracle does not model --checkpoint-interval; leave one out");
        }
    }
    Ok(Prepared {
        jobs: tr.jobs,
        shares,
        cfg,
        policies: policy_kinds(&args.policy),
        notes,
        late_oracle: args.late_oracle.clone(),
    })
}

/// The late-arrival goal the oracle aims at: a late team's window misses at
/// most this fraction of its entitlement.
const LATE_GOAL: f64 = 0.10;

/// Replays every requested policy (in parallel threads; each replay is
/// deterministic and independent, so the output does not depend on timing).
pub fn run_policies(p: &Prepared) -> Vec<(Outcome, PolicyReport)> {
    std::thread::scope(|s| {
        let handles: Vec<_> = p
            .policies
            .iter()
            .map(|&k| {
                s.spawn(move || {
                    let o = simulate(&p.jobs, &p.shares, k, &p.cfg);
                    let mut r = report(&o, p.cfg.window, &p.notes);
                    r.late_oracle = p.late_oracle.as_deref().and_then(|team| {
                        crate::late_oracle::late_oracle(
                            &o,
                            team,
                            p.cfg.window,
                            p.cfg.gpus_per_node,
                            LATE_GOAL,
                        )
                    });
                    (o, r)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// The JSON document: an object keyed by policy name.
pub fn to_json(reports: &[PolicyReport]) -> anyhow::Result<String> {
    let map: BTreeMap<&str, &PolicyReport> =
        reports.iter().map(|r| (r.policy.as_str(), r)).collect();
    Ok(serde_json::to_string_pretty(&map)?)
}

/// Human-readable tables.
pub fn to_table(reports: &[PolicyReport]) -> String {
    let mut s = String::new();
    if let Some(first) = reports.first() {
        for n in &first.notes {
            let _ = writeln!(s, "note: {n}");
        }
    }
    for r in reports {
        let _ = writeln!(s, "\n== {} == {}", r.policy, r.description);
        let _ = writeln!(
            s,
            "jobs {}  makespan {:.2} d  utilisation {:.3}  Jain {:.4}  preemptions {} ({:.5}/GPU-day)  GPU-h lost {:.1} ({:.2}% of {:.0} work)  entitlement shortfall {:.4}  reversals {}  contract breaks {}  invariant violations {}",
            r.jobs,
            r.makespan_days,
            r.utilization,
            r.jain_index,
            r.preemptions,
            r.preemptions_per_gpu_day,
            r.gpu_hours_lost,
            r.lost_fraction_of_work * 100.0,
            r.work_gpu_hours,
            r.entitlement_shortfall,
            r.reversals,
            r.contract_breaks,
            r.invariant_violations
        );
        if r.preemptions > 0 {
            let by: Vec<String> = r
                .preemptions_by_reason
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect();
            let _ = writeln!(s, "preemptions by clause: {}", by.join(", "));
        }
        if r.unfinished_jobs > 0 {
            let _ = writeln!(
                s,
                "WARNING: {} jobs never finished: the replay stopped at its horizon (preemption livelock; try --checkpoint-interval)",
                r.unfinished_jobs
            );
        }
        let _ = writeln!(
            s,
            "{:<12} {:>9} {:>9} {:>10} {:>10} {:>10} {:>7} {:>11} {:>10} {:>10}",
            "team",
            "alloc GPU",
            "alloc sh",
            "attained",
            "mean|dev|",
            "max|dev|",
            "jobs",
            "GPU-hours",
            "short mean",
            "short max"
        );
        for t in &r.teams {
            let _ = writeln!(
                s,
                "{:<12} {:>9.1} {:>9.4} {:>10.4} {:>10.4} {:>10.4} {:>7} {:>11.1} {:>10.4} {:>10.4}",
                t.team,
                t.allocation_gpus,
                t.allocation_share,
                t.attained_share_mean,
                t.mean_abs_deviation,
                t.max_deviation,
                t.jobs,
                t.gpu_hours,
                t.entitlement_shortfall_mean,
                t.entitlement_shortfall_worst
            );
        }
        let _ = writeln!(s, "({} sliding windows, one ending each day)", r.windows);
        let _ = writeln!(
            s,
            "{:<14} {:>7} {:>10} {:>10}",
            "wait class", "jobs", "p50 h", "p95 h"
        );
        for (k, w) in &r.wait {
            let _ = writeln!(
                s,
                "{:<14} {:>7} {:>10.3} {:>10.3}",
                k, w.jobs, w.p50_hours, w.p95_hours
            );
        }
    }
    if reports.len() > 1 {
        let _ = writeln!(s, "\n== side by side ==");
        let _ = writeln!(
            s,
            "{:<15} {:>7} {:>8} {:>13} {:>12} {:>7} {:>9} {:>10} {:>9} {:>8} {:>9}",
            "policy",
            "Jain",
            "util",
            "preempt/GPU-d",
            "GPU-h lost",
            "lost %",
            "makespan",
            "shortfall",
            "worst",
            "breaks",
            "reversals"
        );
        for r in reports {
            let worst = r
                .teams
                .iter()
                .map(|t| t.entitlement_shortfall_worst)
                .fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "{:<15} {:>7.4} {:>8.3} {:>13.5} {:>12.1} {:>7.2} {:>9.2} {:>10.4} {:>9.4} {:>8} {:>9}",
                r.policy,
                r.jain_index,
                r.utilization,
                r.preemptions_per_gpu_day,
                r.gpu_hours_lost,
                r.lost_fraction_of_work * 100.0,
                r.makespan_days,
                r.entitlement_shortfall,
                worst,
                r.contract_breaks,
                r.reversals
            );
        }
    }
    s
}

/// Runs `simulate`: prints tables (or JSON with `--json`), writes SVGs.
/// Fails when any replay broke a contract or an invariant.
pub fn run_cli(args: &SimulateArgs) -> anyhow::Result<()> {
    let prepared = prepare(args)?;
    let results = run_policies(&prepared);
    if let Some(dir) = &args.svg_dir {
        for (o, _) in &results {
            crate::svg::share_chart(o, prepared.cfg.window, dir)
                .with_context(|| format!("chart for {}", o.policy.name()))?;
        }
    }
    if let Some(dir) = &args.timeline_dir {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        for (o, _) in &results {
            let path = dir.join(format!("timeline_{}.csv", o.policy.name()));
            std::fs::write(&path, crate::metrics::timeline_csv(o))
                .with_context(|| format!("writing {}", path.display()))?;
        }
    }
    let reports: Vec<PolicyReport> = results.into_iter().map(|(_, r)| r).collect();
    let text = if args.json {
        format!("{}\n", to_json(&reports)?)
    } else {
        to_table(&reports)
    };
    // A reader that stopped reading (`| head`) is not an error; `println!`
    // would panic with a backtrace.
    {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => {}
            r => r.context("writing to standard output")?,
        }
    }
    let bad: Vec<&str> = reports
        .iter()
        .filter(|r| r.contract_breaks + r.invariant_violations > 0)
        .map(|r| r.policy.as_str())
        .collect();
    if !bad.is_empty() {
        anyhow::bail!(
            "contract breaks or invariant violations in: {}",
            bad.join(", ")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_settings_parse() {
        let r = parse_rule("shortfall_tolerance=0, lost_budget=none").unwrap();
        assert_eq!(r.0.shortfall_tolerance, 0.0);
        assert_eq!(r.0.lost_budget, None);
        assert!(parse_rule("nonsense").is_err());
        assert!(parse_rule("max_requeues=x").is_err());
        assert_eq!(
            policy_kinds(&[PolicyArg::Decay, PolicyArg::All, PolicyArg::Budget]),
            PolicyKind::ALL.to_vec()
        );
    }

    #[test]
    fn shares_and_durations_parse() {
        let s = parse_shares("a=96, b=32").unwrap();
        assert_eq!(s.0["a"], 96.0);
        assert!(parse_shares("a").is_err());
        assert!(parse_shares("a=-1").is_err());
        assert!(parse_shares("a=1,a=2").is_err());
        assert_eq!(parse_secs("0"), Ok(0));
        assert_eq!(parse_secs("30m"), Ok(1800));
        assert!(parse_positive_secs("0").is_err());
        assert_eq!(
            MinRuntimeRule::parse("frac:0.5"),
            Ok(MinRuntimeRule::Fraction(0.5))
        );
        assert_eq!(
            MinRuntimeRule::parse("cap:4h"),
            Ok(MinRuntimeRule::Cap(14_400))
        );
        assert!(MinRuntimeRule::parse("frac:2").is_err());
        // The flag's default is the product's (and `SimConfig`'s).
        assert_eq!(
            MinRuntimeRule::parse("fixed:1h"),
            Ok(crate::engine::SimConfig::default().min_runtime)
        );
    }
}
