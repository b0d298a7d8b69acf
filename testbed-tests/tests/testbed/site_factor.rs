//! Suite `testbed-sitefactor`: `site_factor/budget` beside `priority/multifactor` (the
//! site keeps multifactor and its weights) on 2 slurmd with 4 fake GPUs each and
//! budgetd, `PrioritySiteFactorParameters=mode=dominant`. multifactor's weights here:
//! age, fair share, QOS (the template's) and partition 1000 each; the partition
//! factor stands for the site's own weights (QOS needs slurmdbd, which the testbed
//! does not run; multifactor adds both the same way).
//!
//! 1. the plugin loads beside multifactor and scales one rank step above the sum of
//!    multifactor's weights (4001);
//! 2. one ledger: the runs of this plugin's jobs reach budgetd (usage, `why`);
//! 3. an under-share team's job overtakes an over-share team's job of equal QOS and
//!    partition, in squeue's priorities and sprio's SITE column, in the order
//!    `budgetctl why` gives (tier, then rank);
//! 4. the site's weight still counts: the same team's job in the higher-factor
//!    partition ranks above its other job (by exactly the partition weight's share,
//!    the site factor equal), and never above a better-ranked team's job;
//! 5. priorities follow budgets without job updates: cutting the under-share team's
//!    allocation to 0 puts its job below within a few periods;
//! 6. within one tier the rank decides (the policy's tier projection off, both teams
//!    budgeted): the team below its entitlement first, by at least a rank step;
//! 7. `scontrol reconfigure` to `mode=factor,weight=3000`: every SITE within 0..3000, the
//!    best-ranked budgeted job's exactly 3000, each priority the sum of its factors, and
//!    the partition weight (900 apart) now outweighs the two teams' budget terms;
//! 8. a bad value on reconfigure (`mode=factor` without weight) is logged, naming the
//!    parameter; before 24.05 the mode in force stays (`site_factor_p_reconfig`), from
//!    24.05 (reconfigure re-executes slurmctld) the plugin runs in shadow mode;
//!    slurmctld answers either way;
//! 9. a bad value at start (`mode=dominat`): logged, naming the parameter and the
//!    value; the plugin runs in shadow mode and slurmctld runs on, multifactor without
//!    a site factor (a new job's SITE is 0).

use anyhow::{Context, Result};
use testbed_tests::checks::{Check, Checks, run_suite, say, wait_secs};
use testbed_tests::logs::in_order;
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};

/// The plugin's refresh period (s).
const PERIOD: u64 = 2;

/// multifactor's weights on this testbed: age, fair share, QOS (slurm.conf.in) and
/// the partition weight below, 1000 each.
const WEIGHTS: u64 = 4000;

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-sitefactor", |checks| -> Result<()> {
        let mut config = TestbedConfig::from_env(
            "SITE_FACTOR_DIR",
            "/tmp/slurm-budget-sitefactor",
            "SITE_FACTOR_PORT_BASE",
            20217,
        )?;
        config.nodes = 2;
        config.gpus = 4;
        config.priority = Some("multifactor".into());
        config.site_factor = Some("mode=dominant".into());
        config.budget_period = PERIOD as u32;
        // Partition `high` on the same nodes with 10x the job factor: its jobs get
        // the whole partition weight (1000), those of `gpu` a tenth of it.
        config.extra_conf = Some(
            "PriorityWeightPartition=1000\n\
             PartitionName=high Nodes=gpu[1-2] PriorityJobFactor=10 MaxTime=INFINITE State=UP"
                .into(),
        );
        config.unset = vec!["TESTBED_NO_BUDGETD", "TESTBED_PRIORITY_EXTRA"];
        with_testbed(checks, config, scenario)
    });
}

/// sprio's SITE, PARTITION and total of one job.
fn sprio(s: &Slurm, id: JobId) -> Result<(i64, i64, i64)> {
    Ok(s.site_partition_total(id)?)
}

fn scenario(c: &mut Checks, tb: &Testbed) -> Result<()> {
    let s = tb.slurm();
    let log = tb.ctld_log();
    let api = tb.budgetd();

    say("== 1. site_factor/budget loaded beside priority/multifactor");
    let version = s.version()?;
    let built_for = format!(" built for Slurm {version}");
    let loaded = log.lines(|l| {
        in_order(
            l,
            &["site_factor/budget: loaded: slurm-budget ", &built_for],
        )
    })?;
    c.record(
        "1 plugin loaded: version line names the running Slurm",
        Check::that(!loaded.is_empty())
            .expected(format!(
                "site_factor/budget: loaded: slurm-budget ...{built_for}"
            ))
            .actual(loaded.first().map_or("no such line", String::as_str)),
    );
    let config = s.run("scontrol", &["show", "config"])?;
    let prio_type = config
        .lines()
        .find(|l| l.starts_with("PriorityType "))
        .unwrap_or("")
        .to_string();
    c.record(
        "1 PriorityType is still priority/multifactor",
        Check::that(prio_type.ends_with("priority/multifactor")).actual(&prio_type),
    );
    let step = format!("step: {}", WEIGHTS + 1);
    let scaled = log.lines(|l| {
        in_order(
            l,
            &[
                "site_factor/budget: PrioritySiteFactorParameters=",
                "Dominant",
                &step,
            ],
        )
    })?;
    c.record(
        "1 mode=dominant: one rank step above the sum of multifactor's weights",
        Check::that(!scaled.is_empty())
            .expected(format!("a line with Dominant {{ {step}, .. }}"))
            .actual(scaled.first().map_or("no such line", String::as_str)),
    );

    say("== 2. one ledger: this plugin's runs reach budgetd");
    api.create_account("teama", None, 100.0)?;
    api.create_account("teamb", None, 100.0)?;
    api.add_member(tb.user(), "teama")?;
    api.add_member(tb.user(), "teamb")?;
    let w = wait_secs(10, || {
        log.contains_in_order(&["site_factor/budget: budget snapshot ", " loaded"])
    });
    c.record(
        "2 plugin loaded a budget snapshot",
        Check::that(w.ok)
            .actual(w.describe())
            .log("budget snapshot"),
    );
    // teama fills all 8 GPUs: its usage grows, teamb's stays 0.
    let mut running = Vec::new();
    for _ in 0..2 {
        running.push(s.sbatch(&["-A", "teama", "--gres=gpu:4", "--wrap", "sleep 300"])?);
    }
    let w = wait_secs(20, || s.all_in_state("RUNNING", &running));
    c.record(
        "2 two 4-GPU teama jobs running",
        Check::that(w.ok).actual(w.describe()).jobs(&running),
    );
    let teama_usage = || -> Result<f64> {
        Ok(api
            .usage_by_user()?
            .iter()
            .filter(|r| r.account == "teama")
            .map(|r| r.raw_gpu_hours)
            .sum())
    };
    let w = wait_secs(PERIOD * 5, || teama_usage().map(|h| h > 0.0));
    c.record(
        "2 budgetd charges teama's running jobs (synced by site_factor/budget)",
        Check::that(w.ok)
            .actual(format!(
                "{}; teama {:.4} GPU-h",
                w.describe(),
                teama_usage().unwrap_or(-1.0)
            ))
            .jobs(&running),
    );
    let why = api.why(running[0]);
    c.record(
        "2 budgetd knows the running run (why)",
        Check::that(matches!(&why, Ok(y) if y.account == "teama" && y.start.is_some()))
            .actual(format!("{why:?}").chars().take(300).collect::<String>())
            .jobs(&running[..1]),
    );

    say("== 3. an under-share team's job overtakes an over-share team's job");
    // Same QOS (none) and partition; teama's submitted first (older: more age).
    let ja = s.sbatch(&[
        "-A",
        "teama",
        "-p",
        "gpu",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let jb = s.sbatch(&[
        "-A",
        "teamb",
        "-p",
        "gpu",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let above = |a: JobId, b: JobId| -> Result<bool> { Ok(s.priority(a)? > s.priority(b)?) };
    let w = wait_secs(PERIOD * 6, || above(jb, ja));
    c.record(
        "3 teamb's job above teama's (squeue priority)",
        Check::that(w.ok)
            .actual(format!(
                "{}; teama {} vs teamb {}",
                w.describe(),
                s.priority(ja).unwrap_or(0),
                s.priority(jb).unwrap_or(0)
            ))
            .jobs(&[ja, jb]),
    );
    let (sa, sb) = (sprio(s, ja)?, sprio(s, jb)?);
    c.record(
        "3 sprio's SITE column: teamb's above teama's by more than multifactor's weights",
        Check::that(sb.0 - sa.0 > WEIGHTS as i64 && sb.1 == sa.1)
            .actual(format!(
                "teama (site, partition, total) {sa:?}, teamb {sb:?}"
            ))
            .jobs(&[ja, jb]),
    );
    let (wa, wb) = (api.why(ja), api.why(jb));
    let tier = |t: &str| {
        ["budgeted", "over_budget", "free"]
            .iter()
            .position(|x| *x == t)
    };
    c.record(
        "3 budgetctl why orders the two jobs as multifactor does (tier, then rank)",
        Check::that(matches!((&wa, &wb), (Ok(a), Ok(b))
            if tier(&b.tier).is_some()
                && (tier(&b.tier) < tier(&a.tier) || (a.tier == b.tier && b.rank < a.rank))))
        .actual(match (&wa, &wb) {
            (Ok(a), Ok(b)) => format!(
                "teama {} rank {:?}, teamb {} rank {:?}",
                a.tier, a.rank, b.tier, b.rank
            ),
            (Err(e), _) | (_, Err(e)) => e.to_string(),
        })
        .jobs(&[ja, jb]),
    );

    say("== 4. the site's own weight still counts within the budget order");
    let jb_high = s.sbatch(&[
        "-A",
        "teamb",
        "-p",
        "high",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let ja_high = s.sbatch(&[
        "-A",
        "teama",
        "-p",
        "high",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let (pb, pbh, pah) = (s.priority(jb)?, s.priority(jb_high)?, s.priority(ja_high)?);
    let (sbh, sah) = (sprio(s, jb_high)?, sprio(s, ja_high)?);
    c.record(
        "4 teamb's job in partition high above its job in gpu (same site factor, +900 partition)",
        Check::that(pbh > pb && sbh.0 == sb.0 && sbh.1 - sb.1 == 900)
            .actual(format!(
                "high {pbh} {sbh:?} vs gpu {pb} {sb:?} (site, partition, total)"
            ))
            .jobs(&[jb, jb_high]),
    );
    c.record(
        "4 teama's job in partition high stays below teamb's in gpu (the budget order dominates)",
        Check::that(pah < pb)
            .actual(format!("teama high {pah} {sah:?} vs teamb gpu {pb}"))
            .jobs(&[ja_high, jb]),
    );

    say("== 5. priorities follow budgets without job updates");
    let before = (s.priority(ja)?, s.priority(jb)?);
    api.set_allocation("teamb", 0.0)?;
    let w = wait_secs(PERIOD * 4 + 2, || above(ja, jb));
    c.record(
        "5 teamb allocation -> 0: its job below teama's within a few periods",
        Check::that(w.ok)
            .expected(format!("within {} s", PERIOD * 4 + 2))
            .actual(format!(
                "{}; (teama, teamb) {before:?} -> ({}, {})",
                w.describe(),
                s.priority(ja).unwrap_or(0),
                s.priority(jb).unwrap_or(0)
            ))
            .jobs(&[ja, jb]),
    );
    let (sa, sb) = (sprio(s, ja)?, sprio(s, jb)?);
    c.record(
        "5 sprio's SITE column follows: teama's above teamb's",
        Check::that(sa.0 > sb.0)
            .actual(format!("teama {sa:?}, teamb {sb:?}"))
            .jobs(&[ja, jb]),
    );

    section_6(c, tb, ja, jb)?;
    section_7(c, tb, ja, jb, jb_high, ja_high)?;
    section_8(c, tb, jb)?;
    section_9(c, tb)?;

    let panics = log.lines(|l| l.contains("site_factor/budget: panic"))?;
    c.record(
        "end: no panic logged by the plugin",
        Check::that(panics.is_empty())
            .expected("no 'site_factor/budget: panic' line")
            .actual(panics.first().map_or("none", String::as_str)),
    );
    c.record(
        "end: every testbed daemon alive (scripts/testbed status)",
        Check::that(tb.all_daemons_up()),
    );
    Ok(())
}

/// Replace the `PrioritySiteFactorParameters` line of the testbed's slurm.conf.
fn set_site_factor_params(tb: &Testbed, value: &str) -> Result<()> {
    let path = tb.dir().join("etc").join("slurm.conf");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let out: Vec<String> = text
        .lines()
        .map(|l| {
            if l.starts_with("PrioritySiteFactorParameters=") {
                format!("PrioritySiteFactorParameters={value}")
            } else {
                l.to_string()
            }
        })
        .collect();
    std::fs::write(&path, out.join("\n") + "\n").with_context(|| path.display().to_string())?;
    Ok(())
}

fn section_6(c: &mut Checks, tb: &Testbed, ja: JobId, jb: JobId) -> Result<()> {
    say("== 6. within one tier, the rank decides");
    let (s, api) = (tb.slurm(), tb.budgetd());
    // teama's allocation up to 1000 GPU-h a week (5.95 GPUs): its tier, projected 0.6
    // of a window ahead at the 8 GPUs it holds (the rule's constant), is
    // 0.6 x 8 x 168 / 1000 = 0.81, budgeted, and it stays above its entitlement (even
    // with the window balance: 5.95 x 1.15 = 6.8); teamb's allocation back: both
    // budgeted, teamb (holding nothing) below its entitlement.
    api.set_allocation("teama", 1000.0)?;
    api.set_allocation("teamb", 100.0)?;
    let both_budgeted = || -> Result<bool> {
        let (a, b) = (api.why(ja)?, api.why(jb)?);
        Ok(a.tier == "budgeted" && b.tier == "budgeted" && s.priority(jb)? > s.priority(ja)?)
    };
    let w = wait_secs(PERIOD * 5, both_budgeted);
    let (wa, wb) = (api.why(ja), api.why(jb));
    let (sa, sb) = (sprio(s, ja)?, sprio(s, jb)?);
    c.record(
        "6 both budgeted: teamb (below its entitlement) above teama by more than the weights",
        Check::that(w.ok && sb.0 - sa.0 > WEIGHTS as i64)
            .actual(format!(
                "{}; why teama {:?} rank {:?}, teamb {:?} rank {:?}; sprio teama {sa:?}, teamb {sb:?}",
                w.describe(),
                wa.as_ref().map(|y| y.tier.clone()).unwrap_or_default(),
                wa.as_ref().ok().and_then(|y| y.rank),
                wb.as_ref().map(|y| y.tier.clone()).unwrap_or_default(),
                wb.as_ref().ok().and_then(|y| y.rank),
            ))
            .jobs(&[ja, jb]),
    );
    Ok(())
}

fn section_7(
    c: &mut Checks,
    tb: &Testbed,
    ja: JobId,
    jb: JobId,
    jb_high: JobId,
    ja_high: JobId,
) -> Result<()> {
    say("== 7. scontrol reconfigure: mode=factor,weight=3000");
    let s = tb.slurm();
    let log = tb.ctld_log();
    set_site_factor_params(tb, "mode=factor,weight=3000")?;
    s.run("scontrol", &["reconfigure"])?;
    let w = wait_secs(10, || {
        log.contains_in_order(&[
            "site_factor/budget: PrioritySiteFactorParameters=\"mode=factor,weight=3000\"",
            "Factor { weight: 3000 }",
        ])
    });
    c.record(
        "7 the new mode is logged",
        Check::that(w.ok)
            .actual(w.describe())
            .log("PrioritySiteFactorParameters"),
    );
    let jobs = [ja, jb, jb_high, ja_high];
    let w = wait_secs(PERIOD * 4, || -> Result<bool> {
        Ok(sprio(s, jb)?.0 == 3000 && sprio(s, ja)?.0 <= 3000)
    });
    let all: Vec<(JobId, (i64, i64, i64))> = jobs
        .iter()
        .map(|&j| Ok((j, sprio(s, j)?)))
        .collect::<Result<_>>()?;
    c.record(
        "7 every SITE within 0..=3000, the best-ranked budgeted job's (teamb) exactly 3000",
        Check::that(w.ok && all.iter().all(|(_, f)| (0..=3000).contains(&f.0)))
            .actual(format!(
                "{}; (job, (site, partition, total)) {all:?}",
                w.describe()
            ))
            .jobs(&jobs),
    );
    // Without slurmdbd multifactor zeroes the age and fair-share weights, and no QOS
    // exists: a priority is its site and partition factors, one addend each.
    c.record(
        "7 each priority is SITE + PARTITION (the budget one weighted factor among others)",
        Check::that(
            all.iter()
                .all(|(_, (site, part, total))| site + part == *total),
        )
        .actual(format!("{all:?}"))
        .jobs(&jobs),
    );
    let (pah, pb) = (s.priority(ja_high)?, s.priority(jb)?);
    c.record(
        "7 as one factor, the budget no longer dominates: teama's job in high (+900) above teamb's in gpu",
        Check::that(pah > pb)
            .actual(format!("teama high {pah} vs teamb gpu {pb}"))
            .jobs(&[ja_high, jb]),
    );
    Ok(())
}

fn section_8(c: &mut Checks, tb: &Testbed, jb: JobId) -> Result<()> {
    say(
        "== 8. a bad value on reconfigure: logged; the mode in force stays (before 24.05) or shadow",
    );
    let s = tb.slurm();
    let log = tb.ctld_log();
    // From 24.05 `scontrol reconfigure` re-executes slurmctld: no reconfig callback,
    // the new process's `init` reads the bad value.
    let reexec = reconfigure_reexecutes(&s.version()?);
    set_site_factor_params(tb, "mode=factor")?;
    s.run("scontrol", &["reconfigure"])?;
    let outcome = if reexec {
        "runs in mode=shadow"
    } else {
        "keeping the mode in force"
    };
    let w = wait_secs(10, || {
        log.contains_in_order(&[
            "site_factor/budget: PrioritySiteFactorParameters: mode=factor needs weight=N",
            outcome,
        ])
    });
    c.record(
        "8 the error names the parameter and says what runs",
        Check::that(w.ok)
            .actual(format!("{} (expected {outcome:?})", w.describe()))
            .log("PrioritySiteFactorParameters"),
    );
    let up = wait_secs(20, || Ok::<bool, String>(s.ping()));
    c.record(
        "8 slurmctld answers after the reconfigure",
        Check::that(up.ok).actual(up.describe()),
    );
    testbed_tests::checks::sleep_secs((PERIOD * 2) as f64);
    if reexec {
        // Shadow writes no factor: a new job gets SITE 0, multifactor's sum only.
        new_job_gets_no_site_factor(
            c,
            s,
            "8 in shadow mode a new job gets no site factor (SITE 0)",
        )?;
    } else {
        let f = sprio(s, jb)?;
        c.record(
            "8 teamb's job keeps its factor-mode SITE (3000)",
            Check::eq(3000, f.0).jobs(&[jb]),
        );
    }
    Ok(())
}

/// Whether `scontrol reconfigure` re-executes slurmctld on this release (24.05 and
/// later), so that plugins see a fresh `init` instead of their reconfig callback.
fn reconfigure_reexecutes(version: &str) -> bool {
    let mut parts = version.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (24, 5)
}

fn section_9(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 9. a bad value at start: logged, the plugin runs in shadow mode, slurmctld runs on");
    let s = tb.slurm();
    let log = tb.ctld_log();
    set_site_factor_params(tb, "mode=dominat")?;
    let needle = "site_factor/budget: PrioritySiteFactorParameters: bad mode \"dominat\"";
    let before = log.count(needle)?;
    tb.restart_ctld()?;
    let logged = log.count(needle)? > before
        && log.contains_in_order(&[needle, "runs in mode=shadow (no site factor)"])?;
    c.record(
        "9 the error names the parameter and the value, and shadow mode runs",
        Check::that(logged).log("PrioritySiteFactorParameters"),
    );
    c.record("9 slurmctld answers", Check::that(s.ping()));
    new_job_gets_no_site_factor(
        c,
        s,
        "9 a new job gets no site factor (SITE 0), multifactor's own factors only",
    )
}

/// Submits a 4-GPU job of teamb and checks (as `check`) that sprio shows it no
/// site factor: SITE 0 and the total multifactor's partition factor alone.
fn new_job_gets_no_site_factor(c: &mut Checks, s: &Slurm, check: &str) -> Result<()> {
    let id = s.sbatch(&[
        "-A",
        "teamb",
        "-p",
        "gpu",
        "--gres=gpu:4",
        "--wrap",
        "sleep 10",
    ])?;
    let f = sprio(s, id)?;
    c.record(
        check,
        Check::that(f.0 == 0 && f.2 == f.1)
            .actual(format!("(site, partition, total) {f:?}"))
            .jobs(&[id]),
    );
    Ok(())
}
