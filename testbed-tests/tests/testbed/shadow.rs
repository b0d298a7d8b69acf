//! Suite `testbed-shadow`: `site_factor/budget` with `mode=shadow` beside
//! `priority/multifactor` and the site's own `preempt/partition_prio` observes and
//! decides but never acts. The same submissions run twice on a fresh 1-node testbed
//! with 4 fake GPUs:
//!
//! 0. the baseline: multifactor and `preempt/partition_prio` without the plugin (no
//!    budgetd): sprio's factors and the job states are recorded;
//! 1. shadow mode: the plugin loads in `mode=shadow` and writes no site factor;
//! 2. the budget order differs from Slurm's: teamb (far over budget, its week imported)
//!    holds the node and has a pending job in the partition with the higher job
//!    factor, teama (under budget) a pending job in the other: Slurm puts teamb's
//!    first, the budget teama's; `budgetctl shadow` reports the discordant pair;
//! 3. the rule would preempt teamb's running job for teama's (over budget, no
//!    contract left): `budgetctl shadow` names the victim, the preemptor and the lost
//!    work, and the team shortfall; budgetd's `/metrics` counts it;
//! 4. nothing was carried out: every job's sprio factors (SITE 0) and priority are
//!    the baseline's, every job is in the baseline's state, the running job was never
//!    requeued (restart count 0, same start), and the preemption record is empty,
//!    over several scheduler passes.

use anyhow::{Context, Result};
use testbed_tests::api::PolicyPatch;
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::{now, utc_iso};

/// The plugin's refresh period (s).
const PERIOD: u64 = 2;

/// sprio's SITE, PARTITION and total of one job.
type Factors = (i64, i64, i64);

/// What one run saw of each job: (role, sprio factors, state, priority).
#[derive(Debug, Clone, Default, PartialEq)]
struct Seen {
    jobs: Vec<(&'static str, Factors, String, u64)>,
}

fn config(dir: &str, port: u16) -> Result<TestbedConfig> {
    let mut config = TestbedConfig::from_env("SHADOW_DIR", dir, "SHADOW_PORT_BASE", port)?;
    config.nodes = 1;
    config.gpus = 4;
    config.priority = Some("multifactor".into());
    config.budget_period = PERIOD as u32;
    // The site's own preemption (equal PriorityTier: it preempts nothing here) and a
    // partition whose jobs get the whole partition weight, those of `gpu` a tenth.
    config.extra_conf = Some(
        "PriorityWeightPartition=1000\n\
         PreemptType=preempt/partition_prio\n\
         PreemptMode=REQUEUE\n\
         PartitionName=high Nodes=gpu1 PriorityJobFactor=10 MaxTime=INFINITE State=UP"
            .into(),
    );
    config.unset = vec!["TESTBED_NO_BUDGETD", "TESTBED_PRIORITY_EXTRA"];
    Ok(config)
}

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-shadow", |checks| -> Result<()> {
        let mut base = Seen::default();
        let mut baseline = config("/tmp/slurm-budget-shadow", 20317)?;
        baseline.site_factor = None;
        say("== 0. baseline: multifactor and preempt/partition_prio, no plugin");
        with_testbed(checks, baseline, |c, tb| -> Result<()> {
            base = run_baseline(c, tb)?;
            Ok(())
        })?;
        let mut shadow = config("/tmp/slurm-budget-shadow", 20317)?;
        shadow.site_factor = Some("mode=shadow".into());
        shadow.budgetd_config = Some("shadow_sample_secs = 1\n".into());
        with_testbed(checks, shadow, |c, tb| scenario(c, tb, &base))
    });
}

/// sprio's SITE, PARTITION and total of one job.
fn sprio(s: &Slurm, id: JobId) -> Result<(i64, i64, i64)> {
    Ok(s.site_partition_total(id)?)
}

/// The three jobs, submitted in this order: teamb's running job on all 4 GPUs, then
/// teamb's pending job in `high` and teama's in `gpu`.
fn submit(c: &mut Checks, s: &Slurm) -> Result<[(&'static str, JobId); 3]> {
    let running = s.sbatch(&[
        "-A",
        "teamb",
        "-p",
        "gpu",
        "--gres=gpu:4",
        "--wrap",
        "sleep 300",
    ])?;
    let w = wait_secs(20, || s.all_in_state("RUNNING", &[running]));
    c.record(
        "teamb's 4-GPU job running",
        Check::that(w.ok).actual(w.describe()).jobs(&[running]),
    );
    let high = s.sbatch(&[
        "-A",
        "teamb",
        "-p",
        "high",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let low = s.sbatch(&[
        "-A",
        "teama",
        "-p",
        "gpu",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    Ok([
        ("running", running),
        ("teamb-high", high),
        ("teama-gpu", low),
    ])
}

/// sprio (pending jobs; zeros for the running one), state and priority of each job.
fn observe(s: &Slurm, jobs: &[(&'static str, JobId)]) -> Result<Seen> {
    let mut seen = Seen::default();
    for &(role, id) in jobs {
        let job = s.known_job(id)?;
        let factors = if job.state == "PENDING" {
            sprio(s, id)?
        } else {
            (0, 0, 0)
        };
        seen.jobs.push((role, factors, job.state, job.priority));
    }
    Ok(seen)
}

fn run_baseline(c: &mut Checks, tb: &Testbed) -> Result<Seen> {
    let s = tb.slurm();
    let jobs = submit(c, s)?;
    // Several scheduler passes (sched_interval=5): whatever the site's rules do.
    sleep_secs(6.0);
    let seen = observe(s, &jobs)?;
    say(format_args!("        baseline: {seen:?}"));
    c.record(
        "0 baseline: the running job runs, both others wait, teamb's (high) above teama's",
        Check::that(matches!(
            &seen.jobs[..],
            [(_, _, r, _), (_, h, hs, _), (_, l, ls, _)]
                if r == "RUNNING" && hs == "PENDING" && ls == "PENDING" && h.2 > l.2
        ))
        .actual(format!("{seen:?}"))
        .jobs(&jobs.map(|(_, id)| id)),
    );
    Ok(seen)
}

fn scenario(c: &mut Checks, tb: &Testbed, base: &Seen) -> Result<()> {
    let s = tb.slurm();
    let log = tb.ctld_log();
    let api = tb.budgetd();
    let user = tb.user();

    say("== 1. site_factor/budget loaded in mode=shadow");
    let mode = log.lines(|l| {
        l.contains("site_factor/budget: PrioritySiteFactorParameters=") && l.contains("Shadow")
    })?;
    c.record(
        "1 plugin loaded in mode=shadow",
        Check::that(!mode.is_empty()).actual(mode.first().map_or("no such line", String::as_str)),
    );

    say("== 2. teamb far over budget, teama under; the budget order differs from Slurm's");
    api.create_account("teama", None, 1000.0)?;
    api.create_account("teamb", None, 10.0)?;
    api.add_member(user, "teama")?;
    api.add_member(user, "teamb")?;
    // No contract: a running job may be taken at once (by the rule, were it acting).
    api.set_policy(&PolicyPatch {
        default_min_runtime_secs: Some(0),
        ..PolicyPatch::default()
    })?;
    let start = now() - 2 * 86_400;
    let history = format!(
        "JobID|Account|User|Partition|AllocTRES|Start|End|State\n\
         900001|teamb|{user}|gpu|cpu=4,gres/gpu:h100=4|{}|{}|COMPLETED\n",
        utc_iso(start),
        utc_iso(start + 36_000)
    );
    api.import_sacct(&history)?;
    let w = wait_secs(10, || {
        log.contains_in_order(&["site_factor/budget: budget snapshot ", " loaded"])
    });
    c.record(
        "2 plugin loaded a budget snapshot",
        Check::that(w.ok).actual(w.describe()),
    );
    let jobs = submit(c, s)?;
    let ids = jobs.map(|(_, id)| id);
    let (running, victim_start) = {
        let j = s.known_job(ids[0])?;
        (ids[0], j.start)
    };
    let report = || -> Result<serde_json::Value> {
        let out = tb
            .budgetctl(&["--json", "shadow"])
            .output()
            .context("budgetctl shadow")?;
        anyhow::ensure!(
            out.status.success(),
            "budgetctl shadow: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(serde_json::from_slice(&out.stdout)?)
    };
    let w = wait_secs(PERIOD * 8, || -> Result<bool> {
        let r = report()?;
        Ok(r["order"]["pending"].as_u64() == Some(2)
            && r["order"]["discordant"].as_u64() == Some(1)
            && r["preemptions"].as_array().is_some_and(|p| !p.is_empty()))
    });
    let r = report()?;
    c.record(
        "2 budgetctl shadow: Slurm orders the one pending pair against the budget (tau -1)",
        Check::that(
            r["order"]["pairs"].as_u64() == Some(1)
                && r["order"]["discordant"].as_u64() == Some(1)
                && r["order"]["tau"].as_f64() == Some(-1.0)
                && r["order"]["furthest"][0]["job_id"].as_u64() == Some(u64::from(ids[2])),
        )
        .actual(format!("{}; order {}", w.describe(), r["order"]))
        .jobs(&ids),
    );

    say("== 3. the rule's would-be preemption is recorded, not carried out");
    let p = &r["preemptions"][0];
    c.record(
        "3 budgetctl shadow: teamb's running job for teama's, with its lost work",
        Check::that(
            r["preemptions"].as_array().map(Vec::len) == Some(1)
                && p["victim"].as_u64() == Some(u64::from(running))
                && p["preemptor"].as_u64() == Some(u64::from(ids[2]))
                && p["account"] == "teamb"
                && p["lost_gpu_hours"].as_f64().is_some_and(|h| h > 0.0),
        )
        .actual(format!("{}", r["preemptions"]))
        .jobs(&ids),
    );
    let teama = r["shortfall"]
        .as_array()
        .and_then(|t| t.iter().find(|t| t["account"] == "teama").cloned())
        .unwrap_or_default();
    c.record(
        "3 teama's shortfall: holds 0 of its target",
        Check::that(
            teama["held_gpus"].as_f64() == Some(0.0)
                && teama["shortfall_gpus"].as_f64().is_some_and(|g| g > 0.0),
        )
        .actual(format!("{teama}")),
    );
    let text = tb
        .budgetctl(&["shadow"])
        .output()
        .context("budgetctl shadow")?;
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    for l in text.lines() {
        say(format_args!("        {l}"));
    }
    c.record(
        "3 budgetctl shadow (text) names the would-be preemption",
        Check::that(
            text.contains("preemptions the rule would have made (none was carried out): 1")
                && text.contains(&format!("{running} (teamb/")),
        )
        .actual(text.lines().take(12).collect::<Vec<_>>().join(" | ")),
    );
    let metrics = api.metrics()?;
    c.record(
        "3 /metrics counts it",
        Check::that(metrics.contains("budget_shadow_would_preempt_total 1\n")).actual(
            metrics
                .lines()
                .filter(|l| l.starts_with("budget_shadow_"))
                .collect::<Vec<_>>()
                .join(" | "),
        ),
    );

    say("== 4. no priority changed, no job preempted: the baseline's sprio and states");
    // Several scheduler passes (sched_interval=5) and plugin passes after the decision.
    sleep_secs(6.0);
    let seen = observe(s, &jobs)?;
    say(format_args!("        shadow:   {seen:?}"));
    c.record(
        "4 sprio (site 0, partition, total), priority and state of each job as in the baseline",
        Check::that(&seen == base)
            .expected(format!("{base:?}"))
            .actual(format!("{seen:?}"))
            .jobs(&ids),
    );
    let victim = s.known_job(running)?;
    c.record(
        "4 the would-be victim still runs its first run (restart count 0, same start)",
        Check::that(
            victim.state == "RUNNING" && victim.restarts == 0 && victim.start == victim_start,
        )
        .actual(format!(
            "{} restarts {} start {:?} (was {victim_start:?})",
            victim.state, victim.restarts, victim.start
        ))
        .jobs(&[running]),
    );
    let record = api.preemptions()?;
    c.record(
        "4 nothing preempted: budgetd's preemption record is empty",
        Check::that(record.is_empty()).actual(format!("{record:?}")),
    );
    s.cancel(&ids)?;
    Ok(())
}
