//! Suite `testbed-qos`: slurm-budget beside real QOS, on a testbed with accounting
//! (MariaDB + slurmdbd, `TestbedConfig::accounting`; the releases of
//! [`ACCOUNTING_SLURM_RELEASES`]: on another one the suite reports nothing and passes)
//! and 2 slurmd with 4 fake GPUs each.
//! The user is a member of `teama` and `teamb` in slurmdbd and in budgetd; QOS
//! `normal` (priority 0, every association's default) and `high` (priority 1000).
//!
//! Section 1: `priority/multifactor` + `site_factor/budget` (`mode=dominant`).
//! multifactor's weights: age, fair share and QOS 1000 each (the template's); with
//! slurmdbd none of them is zeroed, so the fair-share factor is live and QOS `high`
//! weighs its full 1000. teama fills the cluster (over its share), teamb holds nothing.
//!
//! 1.1 slurmctld accounts through slurmdbd, and the plugin scales one rank step above
//!     the three weights (3001);
//! 1.2 (a) an under-share team's job overtakes an over-share team's job of equal QOS
//!     (`normal`): squeue priority, sprio's SITE apart by more than the weights, sprio's
//!     FAIRSHARE nonzero (real fair-share factors present);
//! 1.3 (b) within one team, its job in QOS `high` is ordered above its job in `normal`:
//!     squeue priority, sprio's QOS column 1000 against 0, the same SITE;
//! 1.4 (c) a higher QOS never lifts a job past a better-ranked team: teama's job in
//!     `high` stays below teamb's job in `normal` over several plugin periods.
//!
//! Section 2 ([`section_preempt_lists`]): `preempt/budget` (with the global
//! `PreemptMode=REQUEUE`, loaded for the whole suite: section 1's jobs keep the site
//! default's one-hour window, so nothing is preempted there; no `job_submit/budget`,
//! which would refuse section 1's first jobs until its snapshot holds the accounts:
//! the plugin reads each job's window from its `--comment` as that plugin would) and QOS
//! `Preempt=` lists: QOS `scavenger` and `normal` (`Preempt=scavenger`), both
//! `PreemptMode=requeue`. teama is well within budget (1000 GPU-h), teamb has none
//! (always over budget), so the budgets alone let teama take teamb's jobs once their
//! windows are over and never the reverse.
//!
//! 2.1 slurmdbd holds normal's `Preempt=scavenger`, and slurmctld the QOS' mode;
//! 2.2 (a) a normal job takes a scavenger job past its window, where the budgets alone
//!     would not: teama fills the cluster with scavenger jobs (20 s windows); budgetd's
//!     why (which knows no QOS) lists no victim for teamb's normal job, and `budgetctl
//!     why` says what it cannot know; teamb's job starts within a cycle of a window's
//!     end by preempting one of them; budgetd records it as `qos`, and `budgetctl why` on
//!     the requeued job says the QOS order took its run;
//! 2.3 (c) the contract wins: no scavenger job is requeued inside its window (2.2's
//!     wait, watched every 0.5 s);
//! 2.4 (b) a scavenger job never takes a normal one: teamb fills the cluster with
//!     normal jobs (5 s windows); teama's scavenger job, which the budgets alone would
//!     let take one once the windows are over, stays pending three cycles past them,
//!     and nothing is requeued.
//!
//! Section 3 ([`section_exempt_time`]): the QOS `PreemptExemptTime` that Slurm's core
//! checks after preempt/budget answered (`acct_policy_is_job_preempt_exempt`), with the
//! policy and budgets of section 2: QOS `exempt` (`PreemptExemptTime` 60 s,
//! `PreemptMode=requeue`) and `urgent` (`Preempt=exempt`), each created whole, so that
//! slurmctld has its list and its exemption once it knows the QOS (its copy shows
//! neither).
//!
//! 3.1 slurmdbd holds urgent's `Preempt=exempt` and exempt's 60 s exemption;
//! 3.2 the exemption outlasts the window: teama fills the cluster with two exempt
//!     jobs (windows 15 s and 90 s); teamb's urgent job, which the QOS order lets take
//!     the first once its 15 s window is over, stays pending and nothing is requeued
//!     until that job's exemption ends (watched every 0.5 s);
//! 3.3 then the urgent job starts within a cycle by requeueing it, recorded `qos`;
//! 3.4 the window outlasts the exemption: the second job, past its exemption but
//!     inside its 90 s window, is not taken.
//!
//! `QOS_SECTIONS="1"` runs only some sections (default all).

use anyhow::{Result, anyhow, bail};
use testbed_tests::api::{Budgetd, PolicyPatch};
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::logs::in_order;
use testbed_tests::slurm::{Factors, JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::now;
use testbed_tests::{ACCOUNTING_SLURM_RELEASES, DEFAULT_SLURM_RELEASE};

use crate::preemption::{
    both_running, check_recorded, check_why_took_run, wait_preemption, wait_start,
};

/// The plugin's refresh period (s).
const PERIOD: u64 = 2;

/// multifactor's weights on this testbed: age, fair share, QOS (slurm.conf.in).
const WEIGHTS: i64 = 3000;

/// `PriorityWeightQOS` (slurm.conf.in): what QOS `high`, the highest priority of all
/// QOS, weighs.
const QOS_WEIGHT: i64 = 1000;

/// The sections this suite has.
const SECTIONS: [u32; 3] = [1, 2, 3];

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-qos", |checks| -> Result<()> {
        let release = std::env::var("TESTBED_SLURM").unwrap_or_default();
        let release = if release.is_empty() {
            DEFAULT_SLURM_RELEASE.to_string()
        } else {
            release
        };
        if !ACCOUNTING_SLURM_RELEASES.contains(&release.as_str()) {
            say(format_args!(
                "[qos] skipped: the accounting testbed (slurmdbd, MariaDB) runs on Slurm {} only (TESTBED_SLURM={release})",
                ACCOUNTING_SLURM_RELEASES.join(", ")
            ));
            return Ok(());
        }
        let sections = sections()?;
        let mut config =
            TestbedConfig::from_env("QOS_DIR", "/tmp/slurm-budget-qos", "QOS_PORT_BASE", 20617)?;
        config.nodes = 2;
        config.gpus = 4;
        config.priority = Some("multifactor".into());
        config.site_factor = Some("mode=dominant".into());
        config.budget_period = PERIOD as u32;
        config.accounting = true;
        config.accounts = vec!["teama".into(), "teamb".into()];
        let extra = preempt_lists_conf();
        config.extra_conf = Some(if extra.is_empty() {
            "# (none)".into()
        } else {
            extra.into()
        });
        config.unset = vec!["TESTBED_NO_BUDGETD", "TESTBED_PRIORITY_EXTRA"];
        with_testbed(checks, config, |c, tb| scenario(c, tb, &sections))
    });
}

/// `QOS_SECTIONS` (default all).
fn sections() -> Result<Vec<u32>> {
    let spec = std::env::var("QOS_SECTIONS").unwrap_or_default();
    if spec.trim().is_empty() {
        return Ok(SECTIONS.to_vec());
    }
    spec.split_whitespace()
        .map(|s| match s.parse::<u32>() {
            Ok(n) if SECTIONS.contains(&n) => Ok(n),
            _ => bail!("QOS_SECTIONS={spec:?}: sections are {SECTIONS:?}"),
        })
        .collect()
}

fn scenario(c: &mut Checks, tb: &Testbed, sections: &[u32]) -> Result<()> {
    let api = tb.budgetd();
    // QOS `high` for every section; `normal` exists in a new slurmdbd (priority 0).
    tb.add_qos("high", &["Priority=1000"])?;
    api.create_account("teama", None, 100.0)?;
    api.create_account("teamb", None, 100.0)?;
    api.add_member(tb.user(), "teama")?;
    api.add_member(tb.user(), "teamb")?;
    if sections.contains(&1) {
        section_site_factor(c, tb)?;
    }
    if sections.contains(&2) {
        section_preempt_lists(c, tb)?;
    }
    if sections.contains(&3) {
        section_exempt_time(c, tb)?;
    }
    let panics = tb
        .ctld_log()
        .lines(|l| l.contains("site_factor/budget: panic") || l.contains("budget: panic"))?;
    c.record(
        "end: no panic logged by a plugin",
        Check::that(panics.is_empty())
            .expected("no 'budget: panic' line")
            .actual(panics.first().map_or("none", String::as_str)),
    );
    c.record(
        "end: every testbed daemon alive, slurmdbd and MariaDB included (scripts/testbed status)",
        Check::that(tb.all_daemons_up()),
    );
    Ok(())
}

/// A 4-GPU job of `account` in QOS `qos`, sleeping `secs`.
fn job(s: &Slurm, account: &str, qos: &str, secs: u32) -> Result<JobId> {
    let qos = format!("--qos={qos}");
    let wrap = format!("sleep {secs}");
    Ok(s.sbatch(&["-A", account, &qos, "--gres=gpu:4", "--wrap", &wrap])?)
}

/// Section 1: the site factor in `mode=dominant` beside multifactor's live fair-share
/// and QOS factors.
fn section_site_factor(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 1.1 slurmdbd behind slurmctld; site_factor/budget above multifactor's weights");
    let s = tb.slurm();
    let log = tb.ctld_log();
    let config = s.run("scontrol", &["show", "config"])?;
    let storage = config
        .lines()
        .find(|l| l.starts_with("AccountingStorageType "))
        .unwrap_or("")
        .to_string();
    c.record(
        "1.1 slurmctld accounts through slurmdbd",
        Check::that(storage.ends_with("accounting_storage/slurmdbd")).actual(&storage),
    );
    let assocs = tb.sacctmgr(&[
        "-n",
        "-P",
        "list",
        "assoc",
        &format!("user={}", tb.user()),
        "format=account,qos",
    ])?;
    let mut accounts: Vec<&str> = assocs.lines().filter_map(|l| l.split('|').next()).collect();
    accounts.sort_unstable();
    c.record(
        "1.1 slurmdbd holds the user's associations with teama and teamb",
        Check::that(accounts.contains(&"teama") && accounts.contains(&"teamb"))
            .actual(assocs.trim().replace('\n', "; ")),
    );
    let high = s.ctld_qos("high")?;
    c.record(
        "1.1 slurmctld knows QOS high with priority 1000 (from slurmdbd)",
        Check::that(high.as_deref().is_some_and(|q| q.contains("Priority=1000"))).actual(
            high.as_deref()
                .map_or("unknown", |q| q.lines().next().unwrap_or("")),
        ),
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
        "1.1 mode=dominant: one rank step above age + fair share + QOS weights",
        Check::that(!scaled.is_empty())
            .expected(format!("a line with Dominant {{ {step}, .. }}"))
            .actual(scaled.first().map_or("no such line", String::as_str)),
    );
    let w = wait_secs(10, || {
        log.contains_in_order(&["site_factor/budget: budget snapshot ", " loaded"])
    });
    c.record(
        "1.1 plugin loaded a budget snapshot",
        Check::that(w.ok)
            .actual(w.describe())
            .log("budget snapshot"),
    );

    // teama fills all 8 GPUs: over its share; teamb holds nothing.
    let running = [
        job(s, "teama", "normal", 300)?,
        job(s, "teama", "normal", 300)?,
    ];
    let w = wait_secs(20, || s.all_in_state("RUNNING", &running));
    c.record(
        "1.1 two 4-GPU teama jobs running (the cluster full)",
        Check::that(w.ok).actual(w.describe()).jobs(&running),
    );

    say("== 1.2 (a) an under-share team's job overtakes an over-share team's job of equal QOS");
    // teama's submitted first (older: more age).
    let ja = job(s, "teama", "normal", 10)?;
    let jb = job(s, "teamb", "normal", 10)?;
    let w = wait_secs(PERIOD * 6, || -> Result<bool> {
        Ok(s.priority(jb)? > s.priority(ja)?)
    });
    let (fa, fb) = (s.factors(ja)?, s.factors(jb)?);
    c.record(
        "1.2 teamb's job above teama's (squeue priority), both in QOS normal",
        Check::that(w.ok && fa.qos == fb.qos)
            .actual(format!("{}; teama {fa:?}, teamb {fb:?}", w.describe()))
            .jobs(&[ja, jb]),
    );
    c.record(
        "1.2 sprio's SITE: teamb's above teama's by more than multifactor's weights",
        Check::that(fb.site - fa.site > WEIGHTS)
            .actual(format!("SITE teama {}, teamb {}", fa.site, fb.site))
            .jobs(&[ja, jb]),
    );
    c.record(
        "1.2 sprio's FAIRSHARE nonzero: multifactor's fair share is live with slurmdbd",
        Check::that(fa.fairshare > 0 && fb.fairshare > 0)
            .actual(format!(
                "FAIRSHARE teama {}, teamb {}",
                fa.fairshare, fb.fairshare
            ))
            .jobs(&[ja, jb]),
    );

    say("== 1.3 (b) within one team, QOS high above QOS normal");
    let ja_high = job(s, "teama", "high", 10)?;
    let fh = s.factors(ja_high)?;
    let fa = s.factors(ja)?;
    c.record(
        "1.3 teama's job in QOS high above its job in normal (squeue priority)",
        Check::that(s.priority(ja_high)? > s.priority(ja)?)
            .actual(format!("high {}, normal {}", fh.total, fa.total))
            .jobs(&[ja_high, ja]),
    );
    c.record(
        "1.3 sprio's QOS column: high 1000, normal 0; the same SITE",
        Check::that(fh.qos == QOS_WEIGHT && fa.qos == 0 && fh.site == fa.site)
            .expected(format!("QOS {QOS_WEIGHT} vs 0, SITE equal"))
            .actual(format!("high {fh:?}, normal {fa:?}"))
            .jobs(&[ja_high, ja]),
    );

    say("== 1.4 (c) a higher QOS never lifts a job past a better-ranked team");
    // Over several plugin periods: the order holds at every look, not once.
    let mut seen: Vec<(Factors, Factors)> = Vec::new();
    let mut ok = true;
    for _ in 0..(PERIOD * 2 + 1) {
        let (h, b) = (s.factors(ja_high)?, s.factors(jb)?);
        ok &= h.total < b.total;
        seen.push((h, b));
        sleep_secs(1.0);
    }
    let last = seen.last().copied().unwrap_or_default();
    c.record(
        "1.4 teama's job in QOS high stays below teamb's job in QOS normal",
        Check::that(ok && last.0.qos == QOS_WEIGHT && last.1.qos == 0)
            .actual(format!(
                "{} looks over {} s; last teama high {:?}, teamb normal {:?}",
                seen.len(),
                PERIOD * 2 + 1,
                last.0,
                last.1
            ))
            .jobs(&[ja_high, jb]),
    );
    Ok(tb.clear_jobs()?)
}

/// slurm.conf lines sections 2 and 3 need (`TESTBED_EXTRA_CONF`), empty for none:
/// `preempt/budget` with the global REQUEUE mode.
fn preempt_lists_conf() -> &'static str {
    "PreemptType=preempt/budget\nPreemptMode=REQUEUE"
}

/// min_runtime of section 2's protected victims (s).
const WINDOW: i64 = 20;
/// min_runtime of section 2's victims that are never taken (s).
const SHORT: i64 = 5;
/// sched_interval (slurm.conf.in).
const CYCLE: i64 = 5;
/// Polling + RPC latency allowed on top of one cycle.
const SLACK: i64 = 3;

/// A 4-GPU job of `account` in QOS `qos` with a window of `window` s, sleeping
/// `secs` s.
fn job_with_window(s: &Slurm, account: &str, qos: &str, window: i64, secs: u32) -> Result<JobId> {
    let qos = format!("--qos={qos}");
    let comment = format!("min_runtime={window}s");
    let wrap = format!("sleep {secs}");
    Ok(s.sbatch(&[
        "-A",
        account,
        &qos,
        "--gres=gpu:4",
        "--comment",
        &comment,
        "--wrap",
        &wrap,
    ])?)
}

/// Fills the cluster (2 x 4 GPUs) with two jobs of `account` in QOS `qos`; waits up
/// to 15 s for both to run; their ids and starts.
fn fill(
    c: &mut Checks,
    s: &Slurm,
    label: &str,
    account: &str,
    qos: &str,
    window: i64,
) -> Result<[(JobId, i64); 2]> {
    let jobs = [
        job_with_window(s, account, qos, window, 600)?,
        job_with_window(s, account, qos, window, 600)?,
    ];
    let w = wait_secs(15, || s.all_in_state("RUNNING", &jobs));
    c.record(
        format!("{label} {account} fills the cluster in QOS {qos}"),
        Check::that(w.ok).actual(w.describe()).jobs(&jobs),
    );
    Ok([
        (jobs[0], s.known_job(jobs[0])?.start.unwrap_or(0)),
        (jobs[1], s.known_job(jobs[1])?.start.unwrap_or(0)),
    ])
}

/// Sections 2 and 3: budgetd's policy (windows up to 120 s) and the budgets: teama
/// well within budget (1000 GPU-h), teamb with none (always over budget).
fn preempt_policy(api: &Budgetd) -> Result<()> {
    api.set_policy(&PolicyPatch {
        default_min_runtime_secs: Some(WINDOW),
        max_min_runtime_secs: Some(120),
        snapshot_max_age_secs: Some(30),
        max_requeues: Some(3),
        ..PolicyPatch::default()
    })?;
    api.set_allocation("teama", 1000.0)?;
    api.set_allocation("teamb", 0.0)?;
    Ok(())
}

/// The jobs Slurm requeued (restart count above 0).
fn requeued(s: &Slurm, jobs: &[JobId]) -> Result<Vec<JobId>> {
    let mut out = Vec::new();
    for &j in jobs {
        if s.known_job(j)?.restarts >= 1 {
            out.push(j);
        }
    }
    Ok(out)
}

/// The running jobs budgetd's why says pending `job` may preempt, once the
/// plugin's sync has told budgetd of the job (up to 15 s).
fn may_preempt(api: &Budgetd, job: JobId) -> Result<Vec<JobId>> {
    let mut names = None;
    let w = wait_secs(15, || -> Result<bool> {
        names = api
            .why(job)
            .ok()
            .map(|w| w.preemption.may_preempt.iter().map(|o| o.job_id).collect());
        Ok(names.is_some())
    });
    names.ok_or_else(|| anyhow!("job {job} not in budgetd's ledger: {}", w.describe()))
}

/// Section 2: `preempt/budget` honouring QOS `Preempt=` lists with a scavenger QOS.
fn section_preempt_lists(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 2.1 QOS scavenger, normal with Preempt=scavenger; teama within budget, teamb over");
    let api = tb.budgetd();
    let s = tb.slurm();
    preempt_policy(api)?;
    tb.add_qos("scavenger", &["PreemptMode=requeue"])?;
    tb.sacctmgr(&[
        "modify",
        "qos",
        "where",
        "name=normal",
        "set",
        "Preempt=scavenger",
        "PreemptMode=requeue",
    ])?;
    // slurmctld's copy shows the mode (not the list), which the same update carries.
    tb.wait_ctld_qos("normal", |q| q.contains("PreemptMode=REQUEUE"))?;
    tb.wait_ctld_qos("scavenger", |q| q.contains("PreemptMode=REQUEUE"))?;
    let lists = tb.sacctmgr(&["-n", "-P", "show", "qos", "format=name,preempt"])?;
    c.record(
        "2.1 slurmdbd: normal's Preempt= lists scavenger, scavenger's lists none",
        Check::that(
            lists.lines().any(|l| l.trim() == "normal|scavenger")
                && lists.lines().any(|l| l.trim() == "scavenger|"),
        )
        .actual(lists.trim().replace('\n', "; ")),
    );
    // The plugins' next snapshot holds the policy and the allocations.
    sleep_secs(PERIOD as f64 + 1.0);

    say("== 2.2 (a) a normal job takes a scavenger job past its window, the budgets aside");
    let [(v1, s1), (v2, s2)] = fill(c, s, "2.2", "teama", "scavenger", WINDOW)?;
    let p = job_with_window(s, "teamb", "normal", WINDOW, 600)?;
    // budgetd judges by the contract, the partitions and the budgets only.
    let names = may_preempt(api, p)?;
    c.record(
        "2.2 budgetd's why on over-budget teamb's job (no QOS known to it): no victim, the budgets alone would not take teama's jobs",
        Check::that(names.is_empty())
            .actual(format!("may preempt {names:?}"))
            .jobs(&[p, v1, v2]),
    );
    let (ok, out) = tb.run_budgetctl(&[], &["why", &p.to_string()])?;
    c.record(
        "2.2 budgetctl why on it says budgetd reads no QOS Preempt= lists",
        Check::that(
            ok && out.contains("qos:       not known here (budgetd reads no QOS Preempt= lists)"),
        )
        .actual(out.as_str()),
    );
    let window_end = s1.min(s2) + WINDOW;
    let deadline = window_end + 3 * CYCLE + 10;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], window_end, deadline)?;
    c.record(
        "2.3 the contract wins: no scavenger job requeued inside its window",
        Check::that(!early && (pstart == 0 || pstart >= window_end))
            .actual(format!(
                "early stop {early}, preemptor start {pstart}, window end {window_end}"
            ))
            .jobs(&[v1, v2, p]),
    );
    let taken = requeued(s, &[v1, v2])?;
    c.record(
        "2.2 over-budget teamb's normal job started by preempting one scavenger job of under-budget teama",
        Check::that(pstart > 0 && taken.len() == 1)
            .actual(format!("preemptor {p} start {pstart}, requeued {taken:?}"))
            .jobs(&[p, v1, v2]),
    );
    if let Some(&victim) = taken.first().filter(|_| pstart > 0) {
        let vstart = if victim == v1 { s1 } else { s2 };
        c.record(
            "2.2 it starts within a cycle of the victim's window end",
            Check::within(pstart - (vstart + WINDOW), 0, CYCLE + SLACK).jobs(&[victim, p]),
        );
        check_recorded(c, api, "2.2 budgetd records it as qos", victim, p, "qos");
        check_why_took_run(
            c,
            tb,
            "2.2 budgetctl why on the victim: the QOS order took its run",
            victim,
            p,
            "qos: the QOS order",
        )?;
    }
    tb.clear_jobs()?;

    say("== 2.4 (b) a scavenger job never takes a normal one, whatever the budgets say");
    let [(v1, s1), (v2, s2)] = fill(c, s, "2.4", "teamb", "normal", SHORT)?;
    let p = job_with_window(s, "teama", "scavenger", WINDOW, 600)?;
    // Three cycles past both windows: the budgets alone would have taken one.
    let until = s1.max(s2) + SHORT + 3 * CYCLE + SLACK;
    let mut started = false;
    while now() < until {
        started |= s.state(p)? == "RUNNING";
        sleep_secs(0.5);
    }
    let taken = requeued(s, &[v1, v2])?;
    c.record(
        "2.4 under-budget teama's scavenger job stays pending; no normal job of over-budget teamb is requeued",
        Check::that(!started && taken.is_empty() && s.all_in_state("RUNNING", &[v1, v2])?)
            .actual(format!("preemptor started {started}, requeued {taken:?}"))
            .jobs(&[p, v1, v2]),
    );
    // budgetd, knowing no QOS, would let it take them: what its why cannot know.
    let names = may_preempt(api, p)?;
    c.record(
        "2.4 budgetd's why (no QOS known to it) still lists teamb's jobs as victims: the budgets alone would take them",
        Check::that(!names.is_empty())
            .actual(format!("may preempt {names:?}"))
            .jobs(&[p, v1, v2]),
    );
    Ok(tb.clear_jobs()?)
}

/// Section 3's `PreemptExemptTime` of QOS `exempt` (s).
const EXEMPT: i64 = 60;
/// min_runtime of section 3's first victim: its window ends well inside its exemption.
const EXEMPT_WINDOW: i64 = 15;
/// min_runtime of section 3's second victim: its window outlasts its exemption.
const LONG_WINDOW: i64 = 90;

/// Section 3: a QOS `PreemptExemptTime` longer or shorter than a job's window: the
/// later of the two ends decides when preempt/budget's victim is taken.
fn section_exempt_time(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say(format_args!(
        "== 3.1 QOS exempt (PreemptExemptTime={EXEMPT} s), urgent with Preempt=exempt; teama within budget, teamb over"
    ));
    let api = tb.budgetd();
    let s = tb.slurm();
    preempt_policy(api)?;
    // sacctmgr reads a bare number as minutes.
    let exempt = format!(
        "PreemptExemptTime={:02}:{:02}:{:02}",
        EXEMPT / 3600,
        EXEMPT / 60 % 60,
        EXEMPT % 60
    );
    tb.add_qos("exempt", &["PreemptMode=requeue", &exempt])?;
    // Created with its list: slurmctld's copy (which shows no list) is complete once
    // it knows the QOS.
    tb.add_qos("urgent", &["Preempt=exempt", "PreemptMode=requeue"])?;
    let rows = tb.sacctmgr(&[
        "-n",
        "-P",
        "show",
        "qos",
        "format=name,preempt,preemptexempttime",
    ])?;
    c.record(
        "3.1 slurmdbd: urgent's Preempt= lists exempt; exempt's PreemptExemptTime is 60 s",
        Check::that(
            rows.lines().any(|l| l.trim() == "urgent|exempt|")
                && rows.lines().any(|l| l.trim() == "exempt||00:01:00"),
        )
        .expected("'urgent|exempt|' and 'exempt||00:01:00'")
        .actual(rows.trim().replace('\n', "; ")),
    );
    // The plugins' next snapshot holds the policy and the allocations.
    sleep_secs(PERIOD as f64 + 1.0);

    say("== 3.2 the exemption outlasts the window: nothing requeued until it ends");
    let short = job_with_window(s, "teama", "exempt", EXEMPT_WINDOW, 600)?;
    let long = job_with_window(s, "teama", "exempt", LONG_WINDOW, 600)?;
    let w = wait_secs(15, || s.all_in_state("RUNNING", &[short, long]));
    c.record(
        format!(
            "3.2 teama fills the cluster in QOS exempt (windows {EXEMPT_WINDOW} s and {LONG_WINDOW} s)"
        ),
        Check::that(w.ok).actual(w.describe()).jobs(&[short, long]),
    );
    let (s1, s2) = (
        s.known_job(short)?.start.unwrap_or(0),
        s.known_job(long)?.start.unwrap_or(0),
    );
    let p = job_with_window(s, "teamb", "urgent", WINDOW, 600)?;
    let window_end = s1 + EXEMPT_WINDOW;
    let exempt_end = s1 + EXEMPT;
    let deadline = exempt_end + 3 * CYCLE + 10;
    // The first poll that saw a victim not running.
    let mut stopped: Option<i64> = None;
    let mut polled_past_window = false;
    let pstart = wait_start(s, p, deadline, |t| {
        polled_past_window |= t > window_end + CYCLE;
        if stopped.is_none() && !both_running(s, short, long)? {
            stopped = Some(t);
        }
        Ok(())
    })?;
    c.record(
        "3.2 the window ended, yet no exempt job was requeued before its exemption's end: both ran, the urgent job pending",
        Check::that(
            polled_past_window
                && stopped.is_none_or(|t| t >= exempt_end - 1)
                && (pstart == 0 || pstart >= exempt_end),
        )
        .expected(format!(
            "both running until {exempt_end} (start {s1} + {EXEMPT} s), though the window ended at {window_end}"
        ))
        .actual(format!(
            "first seen stopped {stopped:?}, urgent job start {pstart}, watched past the window + a cycle {polled_past_window}"
        ))
        .jobs(&[short, long, p]),
    );

    say("== 3.3 at the exemption's end the urgent job takes the job whose window is over");
    let taken = requeued(s, &[short, long])?;
    c.record(
        "3.3 teamb's urgent job started by requeueing teama's exempt job past its window and its exemption",
        Check::that(pstart > 0 && taken == [short])
            .actual(format!("urgent {p} start {pstart}, requeued {taken:?}"))
            .jobs(&[p, short, long]),
    );
    if pstart > 0 {
        c.record(
            "3.3 it starts within a cycle of the exemption's end",
            Check::within(pstart - exempt_end, 0, CYCLE + SLACK).jobs(&[short, p]),
        );
    }
    if taken == [short] {
        check_recorded(c, api, "3.3 budgetd records it as qos", short, p, "qos");
    }
    say("== 3.4 the window outlasts the exemption: the job inside its window is not taken");
    let l = s.known_job(long)?;
    c.record(
        "3.4 nothing requeued inside a window: the exempt job past its exemption but inside its 90 s window still runs, never requeued",
        Check::that(
            pstart > 0
                && pstart < s2 + LONG_WINDOW
                && pstart >= s2 + EXEMPT
                && l.state == "RUNNING"
                && l.restarts == 0,
        )
        .expected(format!(
            "running, 0 restarts, at the urgent job's start in {}..{} (exemption end..window end)",
            s2 + EXEMPT,
            s2 + LONG_WINDOW
        ))
        .actual(format!(
            "{} with {} restarts; urgent job start {pstart}",
            l.state, l.restarts
        ))
        .jobs(&[long, p]),
    );
    Ok(tb.clear_jobs()?)
}
