//! Suite `testbed-tiers`: `preempt/budget` keeps the site's partition order
//! (`PriorityTier`, what `preempt/partition_prio` preempts by) beside the contract and
//! the budgets, on a real slurmctld + 2 slurmd x 2 fake GPUs with job_submit/budget,
//! priority/budget and budgetd. Partition `gpu` (the default, `PriorityTier=1`) and
//! `high` (`PriorityTier=2`) span the same nodes; teama is well within budget, teamb
//! has no allocation (always over budget), so the budgets alone would let teama take
//! teamb's jobs and never the reverse.
//!
//! 1. and 2. a higher tier takes a lower tier's job, but not inside its window:
//!    teama fills the cluster in `gpu` with 20 s windows; teamb's job in `high` waits
//!    while they are protected (the contract wins: nothing is requeued before the
//!    window ends), then starts within a cycle of the window's end by preempting one
//!    of them, though teama is under budget and teamb over it; budgetd records the
//!    preemption as `partition_tier`, and `budgetctl why` on the requeued job says the
//!    partition order took its run;
//! 3. a lower tier never takes a higher one: teamb fills the cluster in `high` with
//!    5 s windows; teama's job in `gpu` (under budget, which the budgets alone would let
//!    take an over-budget job once its window is over) stays pending for three
//!    cycles past the windows, and nothing is requeued;
//! 4. the same tier: as 3, but teamb's jobs in `gpu`: the budget rule, teama's job
//!    starts by preemption within a cycle of the window's end, recorded `over_budget`;
//! 5. the site's "never": partition `frozen` (`PriorityTier=1`, `PreemptMode=OFF`)
//!    over the same nodes; teamb fills the cluster in it with 5 s windows; teama's job
//!    in `high` (a higher tier and an under-budget team: both the partition order and
//!    the budgets would take them) stays pending three cycles past the windows, nothing
//!    is requeued; `scontrol show job` gives `frozen`'s jobs no `PreemptEligibleTime`
//!    (the plugin answers their mode OFF, as `preempt/partition_prio` does) and `gpu`'s
//!    one; `why` lists no victim and `budgetctl why` names the partition's PreemptMode;
//!    a drain of a node holding one of `frozen`'s jobs does not requeue it, and
//!    budgetd's drain status shows it leaving at its `EndTime` (its time limit);
//! 6. the partition's own mode: partition `cancel` (`PriorityTier=1`,
//!    `PreemptMode=CANCEL`, the global mode REQUEUE); teamb fills the cluster in it,
//!    teama's job in `high` takes one at its window's end, and Slurm cancels that job
//!    (state PREEMPTED, not requeued) as the plugin answers for its partition; budgetd
//!    records the preemption (`partition_tier`) all the same.
//!
//! QOS `Preempt=` lists need slurmdbd, which this testbed does not run: the `qos`
//! suite covers them on the accounting testbed. `PreemptExemptTime`: not covered.

use anyhow::Result;
use testbed_tests::api::PolicyPatch;
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::now;

use crate::preemption::{check_recorded, check_why_took_run, sbatch_2gpu, wait_preemption};

/// min_runtime of the protected victims of section 1 (s).
const WINDOW: i64 = 20;
/// min_runtime of the victims of sections 3 and 4 (s).
const SHORT: i64 = 5;
/// sched_interval.
const CYCLE: i64 = 5;
/// Polling + RPC latency allowed on top of one cycle.
const SLACK: i64 = 3;

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-tiers", |checks| -> Result<()> {
        let mut config = TestbedConfig::from_env(
            "PARTITION_TIER_DIR",
            "/tmp/slurm-budget-partition-tier",
            "PARTITION_TIER_PORT_BASE",
            20417,
        )?;
        config.nodes = 2;
        config.gpus = 2;
        config.priority = Some("budget".into());
        config.budget_period = 2;
        // The contract's plugins, fast preemption (SLURM-NOTES "Fast, repeatable
        // preemption tests") and a second partition over the same nodes, one tier up.
        config.extra_conf = Some(format!(
            "JobSubmitPlugins=budget\nPreemptType=preempt/budget\nPreemptMode=REQUEUE\n\
             PartitionName=high Nodes=gpu[1-{n}] PriorityTier=2 MaxTime=INFINITE State=UP\n\
             PartitionName=frozen Nodes=gpu[1-{n}] PriorityTier=1 PreemptMode=OFF MaxTime=INFINITE State=UP\n\
             PartitionName=cancel Nodes=gpu[1-{n}] PriorityTier=1 PreemptMode=CANCEL MaxTime=INFINITE State=UP",
            n = config.nodes
        ));
        config.unset = vec!["TESTBED_PRIORITY_EXTRA"];
        with_testbed(checks, config, scenario)
    });
}

fn scenario(c: &mut Checks, tb: &Testbed) -> Result<()> {
    let api = tb.budgetd();
    let user = tb.user();
    api.set_policy(&PolicyPatch {
        default_min_runtime_secs: Some(WINDOW),
        max_min_runtime_secs: Some(120),
        snapshot_max_age_secs: Some(30),
        max_requeues: Some(3),
        ..PolicyPatch::default()
    })?;
    api.create_account("teama", None, 1000.0)?;
    api.create_account("teamb", None, 0.0)?;
    api.add_member(user, "teama")?;
    api.add_member(user, "teamb")?;
    // The plugins' next snapshot holds the tree.
    sleep_secs(3.0);
    section_1_2(c, tb)?;
    section_3(c, tb)?;
    section_4(c, tb)?;
    section_5(c, tb)?;
    section_6(c, tb)?;
    Ok(())
}

/// A 2-GPU job of `account` in `partition` with a window of `window` s, sleeping
/// `sleep_for` s.
fn job_in(s: &Slurm, account: &str, partition: &str, window: i64, sleep_for: u32) -> Result<JobId> {
    let comment = format!("min_runtime={window}s");
    sbatch_2gpu(s, account, &comment, &["-p", partition], sleep_for)
}

/// Fills the cluster (2 x 2 GPUs) with two jobs of `account` in `partition`; waits
/// up to 15 s for both to run; their ids and starts.
fn fill(
    c: &mut Checks,
    s: &Slurm,
    label: &str,
    account: &str,
    partition: &str,
    window: i64,
) -> Result<[(JobId, i64); 2]> {
    let jobs = [
        job_in(s, account, partition, window, 600)?,
        job_in(s, account, partition, window, 600)?,
    ];
    let w = wait_secs(15, || s.all_in_state("RUNNING", &jobs));
    c.record(
        format!("{label} {account} fills the cluster in {partition}"),
        Check::that(w.ok).actual(w.describe()).jobs(&jobs),
    );
    Ok([
        (jobs[0], s.known_job(jobs[0])?.start.unwrap_or(0)),
        (jobs[1], s.known_job(jobs[1])?.start.unwrap_or(0)),
    ])
}

/// Polls until three cycles past both victims' windows (they started at `s1`
/// and `s2` with [`SHORT`] windows) and records, as `name`, that `p` never ran
/// and neither victim was requeued.
fn stays_pending(
    c: &mut Checks,
    s: &Slurm,
    name: &str,
    p: JobId,
    [(v1, s1), (v2, s2)]: [(JobId, i64); 2],
) -> Result<()> {
    let until = s1.max(s2) + SHORT + 3 * CYCLE + SLACK;
    let mut started = false;
    while now() < until {
        started |= s.state(p)? == "RUNNING";
        sleep_secs(0.5);
    }
    let taken = requeued(s, &[v1, v2])?;
    c.record(
        name,
        Check::that(!started && taken.is_empty() && s.all_in_state("RUNNING", &[v1, v2])?)
            .actual(format!("preemptor started {started}, requeued {taken:?}"))
            .jobs(&[p, v1, v2]),
    );
    Ok(())
}

/// The victims Slurm requeued (restart count above 0).
fn requeued(s: &Slurm, victims: &[JobId]) -> Result<Vec<JobId>> {
    let mut out = Vec::new();
    for &v in victims {
        if s.known_job(v)?.restarts >= 1 {
            out.push(v);
        }
    }
    Ok(out)
}

fn section_1_2(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 1-2. a higher tier takes a lower tier's job, never inside its window");
    let s = tb.slurm();
    let [(v1, s1), (v2, s2)] = fill(c, s, "1", "teama", "gpu", WINDOW)?;
    let p = job_in(s, "teamb", "high", WINDOW, 600)?;
    let window_end = s1.min(s2) + WINDOW;
    let deadline = window_end + 3 * CYCLE + 10;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], window_end, deadline)?;
    c.record(
        "2 the contract wins: no lower-tier job requeued inside its window",
        Check::that(!early && (pstart == 0 || pstart >= window_end))
            .actual(format!(
                "early stop {early}, preemptor start {pstart}, window end {window_end}"
            ))
            .jobs(&[v1, v2, p]),
    );
    let taken = requeued(s, &[v1, v2])?;
    c.record(
        "1 the high-tier job of over-budget teamb started by preempting one job of under-budget teama",
        Check::that(pstart > 0 && taken.len() == 1)
            .actual(format!("preemptor {p} start {pstart}, requeued {taken:?}"))
            .jobs(&[p, v1, v2]),
    );
    let Some(&victim) = taken.first().filter(|_| pstart > 0) else {
        return Ok(tb.clear_jobs()?);
    };
    let vstart = if victim == v1 { s1 } else { s2 };
    c.record(
        "1 it starts within a cycle of the victim's window end",
        Check::within(pstart - (vstart + WINDOW), 0, CYCLE + SLACK).jobs(&[victim, p]),
    );
    check_recorded(
        c,
        tb.budgetd(),
        "1 budgetd records it as partition_tier",
        victim,
        p,
        "partition_tier",
    );
    check_why_took_run(
        c,
        tb,
        "1 budgetctl why on the victim: the partition order took its run",
        victim,
        p,
        "partition_tier: the partition order",
    )?;
    Ok(tb.clear_jobs()?)
}

fn section_3(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 3. a lower tier never takes a higher one, whatever the budgets say");
    let s = tb.slurm();
    let [(v1, s1), (v2, s2)] = fill(c, s, "3", "teamb", "high", SHORT)?;
    let p = job_in(s, "teama", "gpu", WINDOW, 600)?;
    // Three cycles past both windows: the budgets alone would have taken one.
    stays_pending(
        c,
        s,
        "3 under-budget teama's job in gpu stays pending; no job of over-budget teamb in high is requeued",
        p,
        [(v1, s1), (v2, s2)],
    )?;
    // budgetd's why judges it as the plugin does: from Slurm's partitions.
    let w = tb.budgetd().why(p)?;
    let names: Vec<JobId> = w.preemption.may_preempt.iter().map(|o| o.job_id).collect();
    c.record(
        "3 why on teama's job: it may preempt none of teamb's higher-tier jobs",
        Check::that(names.is_empty())
            .actual(format!("may preempt {names:?}"))
            .jobs(&[p, v1, v2]),
    );
    let (ok, out) = tb.run_budgetctl(&[], &["why", &p.to_string()])?;
    c.record(
        "3 budgetctl why on teama's job names the partition order",
        Check::that(ok && out.contains("the partition order wins"))
            .expected("'... cannot be taken: the partition order wins, its partition's PriorityTier 2 is above this job's 1 ...'")
            .actual(out.as_str()),
    );
    Ok(tb.clear_jobs()?)
}

fn section_4(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 4. the same tier: the budget rule as before");
    let s = tb.slurm();
    let [(v1, s1), (v2, s2)] = fill(c, s, "4", "teamb", "gpu", SHORT)?;
    let p = job_in(s, "teama", "gpu", WINDOW, 600)?;
    let window_end = s1.min(s2) + SHORT;
    let deadline = window_end.max(now()) + 3 * CYCLE + 10;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], window_end, deadline)?;
    let taken = requeued(s, &[v1, v2])?;
    c.record(
        "4 under-budget teama's job started by preempting one job of over-budget teamb",
        Check::that(pstart > 0 && !early && taken.len() == 1)
            .actual(format!(
                "preemptor {p} start {pstart}, early {early}, requeued {taken:?}"
            ))
            .jobs(&[p, v1, v2]),
    );
    if let Some(&victim) = taken.first().filter(|_| pstart > 0) {
        check_recorded(
            c,
            tb.budgetd(),
            "4 budgetd records it as over_budget",
            victim,
            p,
            "over_budget",
        );
    }
    Ok(tb.clear_jobs()?)
}

fn section_5(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 5. PreemptMode=OFF: never taken, whoever asks");
    let s = tb.slurm();
    let [(v1, s1), (v2, s2)] = fill(c, s, "5", "teamb", "frozen", SHORT)?;
    // A higher tier and an under-budget team: both rules would take one.
    let p = job_in(s, "teama", "high", WINDOW, 600)?;
    stays_pending(
        c,
        s,
        "5 teama's job in high stays pending; no job of over-budget teamb in frozen (PreemptMode=OFF) is requeued",
        p,
        [(v1, s1), (v2, s2)],
    )?;
    // budgetd's why judges it as the plugin does: from Slurm's partitions.
    let why = tb.budgetd().why(p)?;
    let names: Vec<JobId> = why
        .preemption
        .may_preempt
        .iter()
        .map(|o| o.job_id)
        .collect();
    c.record(
        "5 why on teama's job: it may preempt none of frozen's jobs",
        Check::that(names.is_empty())
            .actual(format!("may preempt {names:?}"))
            .jobs(&[p, v1, v2]),
    );
    let (ok, out) = tb.run_budgetctl(&[], &["why", &p.to_string()])?;
    c.record(
        "5 budgetctl why on teama's job names the partition's PreemptMode=OFF",
        Check::that(ok && out.contains("partition frozen has PreemptMode=OFF"))
            .expected("'... cannot be taken: partition frozen has PreemptMode=OFF (the site's setting: ...)'")
            .actual(out.as_str()),
    );
    // The mode the plugin answers for a job reaches `scontrol show job`: Slurm
    // prints PreemptEligibleTime only for a started job whose mode is not OFF.
    // teama's pending job goes first, so the probe in gpu gets v2's GPUs.
    s.cancel(&[p, v2])?;
    let probe = job_in(s, "teama", "gpu", SHORT, 600)?;
    let w = wait_secs(15, || s.all_in_state("RUNNING", &[probe]));
    let eligible = |id: JobId| -> Result<bool> {
        Ok(s.run("scontrol", &["show", "job", "-o", &id.to_string()])?
            .contains("PreemptEligibleTime="))
    };
    let (frozen_shown, gpu_shown) = (eligible(v1)?, w.ok && eligible(probe)?);
    c.record(
        "5 the plugin's mode: OFF for frozen's job (no PreemptEligibleTime), REQUEUE for gpu's (shown)",
        Check::that(!frozen_shown && gpu_shown)
            .actual(format!(
                "frozen job {v1}: {frozen_shown}; gpu job {probe} ({}): {gpu_shown}",
                w.describe()
            ))
            .jobs(&[v1, probe]),
    );
    drain_waits_for_time_limit(c, tb, v1)?;
    Ok(tb.clear_jobs()?)
}

/// Drains the node of `v1` (running in `frozen`, alone on its node) and records
/// that budgetd's drain status shows it running to its time limit: leaving at
/// Slurm's `EndTime`, the node empty no sooner, and `budgetctl drains` and
/// `budgetctl why` saying why; nothing requeues it. Undrains the node again.
fn drain_waits_for_time_limit(c: &mut Checks, tb: &Testbed, v1: JobId) -> Result<()> {
    let s = tb.slurm();
    let job = s.known_job(v1)?;
    let node = job.nodes.clone();
    let (accepted, drain_out) = tb.run_budgetctl(&[], &["drain", &node, "--reason", "tiers"])?;
    let listed = tb.budgetd().drains();
    let (_, text) = tb.run_budgetctl(&[], &["drains"])?;
    let (_, why) = tb.run_budgetctl(&[], &["why", &v1.to_string()])?;
    // Past the window, a few drain worker passes: still running, never requeued.
    sleep_secs(3.0);
    let after = s.known_job(v1)?;
    tb.budgetd().undrain(&node)?;
    let d = listed?.into_iter().find(|d| d.node == node);
    let held = d
        .as_ref()
        .and_then(|d| d.jobs.iter().find(|j| j.job_id == v1).cloned());
    // squeue's text prints EndTime NONE for a job without a time limit (frozen
    // has MaxTime=INFINITE); Slurm's job record, which budgetd reads through
    // `squeue --json`, sets such a run's end a year after its start.
    let end = job.end.or(job.start.map(|t| t + 365 * 86_400)).unwrap_or(0);
    c.record(
        "5 a drained node holding frozen's job: budgetd shows the job leaving at its EndTime (time_limit), the node empty no sooner, budgetctl drains and why say why; not requeued",
        Check::that(
            accepted
                && end > 0
                && held.as_ref().is_some_and(|h| h.leaves == "time_limit" && h.requeue_at == end)
                && d.as_ref().is_some_and(|d| d.empty_at >= end)
                && text.contains("runs to its time limit")
                && text.contains("partition frozen has PreemptMode=OFF")
                && why.contains("the drain waits for this job: it runs to its time limit")
                && why.contains("partition frozen has PreemptMode=OFF")
                && after.state == "RUNNING"
                && after.restarts == 0,
        )
        .expected(format!("job {v1} on {node}: leaves time_limit at its EndTime {end}"))
        .actual(format!(
            "drain accepted {accepted} ({}); held {held:?}; empty_at {:?}; job now {} restarts {}; budgetctl drains:\n{text}\nbudgetctl why:\n{why}",
            drain_out.lines().next().unwrap_or(""),
            d.as_ref().map(|d| d.empty_at),
            after.state,
            after.restarts
        ))
        .jobs(&[v1]),
    );
    Ok(())
}

fn section_6(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 6. PreemptMode=CANCEL on a partition: its victim is cancelled, and recorded");
    let s = tb.slurm();
    let [(v1, s1), (v2, s2)] = fill(c, s, "6", "teamb", "cancel", SHORT)?;
    let p = job_in(s, "teama", "high", WINDOW, 600)?;
    let window_end = s1.min(s2) + SHORT;
    let deadline = window_end.max(now()) + 3 * CYCLE + 10;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], window_end, deadline)?;
    // The victim: the one no longer running; Slurm ends it PREEMPTED (after
    // KillWait), never requeues it.
    let mut ended = Vec::new();
    let w = wait_secs(15, || -> Result<bool> {
        ended.clear();
        for v in [v1, v2] {
            let j = s.known_job(v)?;
            if j.state != "RUNNING" {
                ended.push((v, j.state, j.restarts));
            }
        }
        Ok(ended.iter().any(|(_, state, _)| state == "PREEMPTED"))
    });
    c.record(
        "6 teama's high-tier job started by taking one job of cancel's; Slurm cancelled it (PREEMPTED, no requeue)",
        Check::that(
            pstart > 0
                && !early
                && w.ok
                && ended.len() == 1
                && ended[0].1 == "PREEMPTED"
                && ended[0].2 == 0,
        )
        .actual(format!(
            "preemptor {p} start {pstart}, early {early}; ended (job, state, restarts) {ended:?} ({})",
            w.describe()
        ))
        .jobs(&[p, v1, v2]),
    );
    if let Some(&(victim, _, _)) = ended.first().filter(|_| pstart > 0) {
        check_recorded(
            c,
            tb.budgetd(),
            "6 budgetd records the cancelled run's preemption as partition_tier",
            victim,
            p,
            "partition_tier",
        );
    }
    Ok(tb.clear_jobs()?)
}
