//! Suite `testbed-contract`: the scheduling contract (min_runtime windows, tiers,
//! the preemption rule) against a real slurmctld + 2 slurmd x 2 fake GPUs with
//! job_submit/budget, preempt/budget, priority/budget and budgetd. Every timing is
//! checked against Slurm's own stamps.
//!
//! 1. rejections: `min_runtime=4x`, `min_runtime=`, `min_runtime=-5m`, above the site
//!    maximum, above `--time`, unknown account, free + min_runtime: sbatch fails with
//!    the reason, nothing is queued; a valid job stores its contract and is forced
//!    requeueable;
//! 2. protection: over-budget jobs fill the cluster inside their windows; a budgeted
//!    job waits; the first victim (the youngest run) is requeued within one scheduling
//!    cycle after its window ends, never before; budgetd records the preemption
//!    (over_budget); the requeued job's next run gets a fresh window;
//! 3. free tier: a free job on otherwise idle GPUs yields at once to a budgeted job;
//! 4. rebalancing between two budgeted teams (rule clause 3): under `lab`, labx (ratio
//!    0) and laby (ratio 0.5 from imported sacct history, within budget) have equal
//!    shares; laby fills the cluster with short windows; `why` on the pending labx
//!    job names both laby jobs, each from its window end (reason rebalance); the labx
//!    job preempts exactly one laby job within one cycle after its window; budgetd
//!    records it (rebalance); then no A->B->A: two cycles past the labx job's own
//!    window, with laby's requeued job eligible and pending, nothing of labx was
//!    requeued, and `why` on that laby job names no lab job it may take;
//! 5. GraceTime: a victim in partition `grace` (GraceTime=10) whose batch script runs
//!    its payload under srun with a SIGTERM trap writing a checkpoint marker: SIGTERM
//!    only after its window, the marker is written, the batch script itself is not
//!    signalled at grace start, the victim stays RUNNING through the grace, is
//!    requeued after it, and the preemptor starts ~GraceTime (+ a cycle, KillWait)
//!    later;
//! 6. the window's preemptions outlive slurmctld: an over-budget job is preempted as in
//!    section 2; the site cap is set to the rebalancing preemptions budgetd recorded;
//!    slurmctld restarts (preempt/budget keeps its history in memory) and the plugin
//!    logs that it read them back from budgetd; the same situation again: the budgeted
//!    job waits past the victims' windows with nothing requeued ("site cap reached");
//!    with the cap one higher it starts by preemption.
//! 7. over-budget work with time limits: as section 2, but the over-budget jobs
//!    have 30-minute time limits, so turnover alone would free the cluster within
//!    half an hour; a budgeted job still starts by preemption within a cycle and two
//!    plugin periods of the first window's end (what preempting delivers, 2 GPUs
//!    for ~30 minutes, outweighs the seconds of work the victim loses), never before.
//!
//! Windows are 5-20 s, `sched_interval=5`, `cred_expire=5`, `KillWait=5`.
//! `CONTRACT_SECTIONS="4 5"` runs only some sections; `CONTRACT_PRIORITY` sets the
//! testbed's `TESTBED_PRIORITY` (default budget).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;

use anyhow::{Result, bail, ensure};
use budget_protocol::RunState;
use budget_protocol::why::PeerReason;
use testbed_tests::api::{Budgetd, PolicyPatch};
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::logs::SEEDED_HISTORY;
use testbed_tests::slurm::{Job, JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::{now, utc_iso};

use crate::preemption::{
    both_running, check_recorded, sbatch_2gpu, start_of, wait_preemption, wait_start,
};

/// GraceTime of partition `grace` (section 5).
const GRACE: i64 = 10;
/// min_runtime of the protected jobs (s).
const WINDOW: i64 = 20;
/// min_runtime of laby's jobs (section 4).
const SHORT: i64 = 15;
/// min_runtime of labx's job (section 4).
const XWIN: i64 = 5;
/// min_runtime of the GraceTime victim (section 5).
const GRACE_WINDOW: i64 = 10;
/// sched_interval.
const CYCLE: i64 = 5;
/// Polling + RPC latency allowed on top of one cycle.
const SLACK: i64 = 3;
/// slurm.conf KillWait.
const KILLWAIT: i64 = 5;
/// The rule's rank hysteresis, a constant of it
/// (`policy_core::rebalance::RebalancePolicy::default().hysteresis`, which the
/// snapshot's policy carries for plugins of the previous release).
const HYSTERESIS: f64 = 0.1;

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-contract", |checks| -> Result<()> {
        let sections = sections()?;
        let mut config = TestbedConfig::from_env(
            "CONTRACT_DIR",
            "/tmp/slurm-budget-contract",
            "CONTRACT_PORT_BASE",
            18817,
        )?;
        config.nodes = 2;
        config.gpus = 2;
        config.priority = Some(
            std::env::var("CONTRACT_PRIORITY")
                .ok()
                .filter(|p| !p.is_empty())
                .unwrap_or_else(|| "budget".into()),
        );
        config.budget_period = 2;
        // The contract's plugins and fast preemption knobs (SLURM-NOTES "Fast,
        // repeatable preemption tests"; AuthInfo=cred_expire=5 comes with the
        // testbed). Partition `grace` spans the same nodes as the default `gpu`.
        config.extra_conf = Some(format!(
            "JobSubmitPlugins=budget\nPreemptType=preempt/budget\nPreemptMode=REQUEUE\n\
             PartitionName=grace Nodes=gpu[1-{}] GraceTime={GRACE} MaxTime=INFINITE State=UP",
            config.nodes
        ));
        with_testbed(checks, config, |c, tb| scenario(c, tb, &sections))
    });
}

/// `CONTRACT_SECTIONS` (default all seven).
fn sections() -> Result<Vec<u32>> {
    let spec = std::env::var("CONTRACT_SECTIONS").unwrap_or_default();
    if spec.trim().is_empty() {
        return Ok(vec![1, 2, 3, 4, 5, 6, 7]);
    }
    spec.split_whitespace()
        .map(|s| match s.parse::<u32>() {
            Ok(n @ 1..=7) => Ok(n),
            _ => bail!("CONTRACT_SECTIONS={spec:?}: sections are 1 to 7"),
        })
        .collect()
}

fn scenario(c: &mut Checks, tb: &Testbed, sections: &[u32]) -> Result<()> {
    let s = tb.slurm();
    let api = tb.budgetd();
    let user = tb.user();
    // Budget tree: teama is well within budget, teamb has no allocation (always over
    // budget).
    api.set_policy(&PolicyPatch {
        default_min_runtime_secs: Some(WINDOW),
        max_min_runtime_secs: Some(120),
        snapshot_max_age_secs: Some(30),
        // Section 2 takes the same job twice (its fresh window after a requeue):
        // the rule's requeue cap (1 by default) would keep it.
        max_requeues: Some(3),
        ..PolicyPatch::default()
    })?;
    api.create_account("teama", None, 1000.0)?;
    api.create_account("teamb", None, 0.0)?;
    // Section 4: lab (200) splits into labx and laby (100 each, equal shares); laby
    // used 50 GPU-hours two days ago (ratio 0.5: within budget, but above labx's 0 by
    // more than the hysteresis), imported from sacct-format history.
    api.create_account("lab", None, 200.0)?;
    api.create_account("labx", Some("lab"), 100.0)?;
    api.create_account("laby", Some("lab"), 100.0)?;
    api.add_member(user, "labx")?;
    api.add_member(user, "laby")?;
    let start = now() - 2 * 86_400;
    let history = format!(
        "JobID|Account|User|Partition|AllocTRES|Start|End|State\n\
         900001|laby|{user}|gpu|cpu=4,gres/gpu:h100=4|{}|{}|COMPLETED\n",
        utc_iso(start),
        utc_iso(start + 45_000)
    );
    let import = api.import_sacct(&history)?;
    ensure!(
        import.inserted == 1 && import.invalid.is_empty(),
        "history import: {} run(s) inserted, {} invalid line(s)",
        import.inserted,
        import.invalid.len()
    );
    // Wait until job_submit/budget has the snapshot with this tree and policy: an
    // unknown account and a min_runtime above the new site maximum must both be
    // refused. --test-only runs the job_submit plugin and queues nothing, so a probe
    // that comes too early cannot leave a job behind.
    let w = wait_secs(40, || -> Result<bool> {
        let a = s.sbatch_attempt(&["--test-only", "-A", "teamx", "--wrap", "true"])?;
        let b = s.sbatch_attempt(&[
            "--test-only",
            "-A",
            "teama",
            "--comment",
            "min_runtime=3m",
            "--wrap",
            "true",
        ])?;
        Ok(a.output.contains("no GPU budget") && b.output.contains("site's maximum"))
    });
    ensure!(
        w.ok,
        "job_submit/budget never saw the tree and policy: {}",
        w.describe()
    );
    say(format_args!(
        "job_submit/budget saw the tree and policy {}",
        w.describe()
    ));
    // budgetd counts the GPUs of the nodes that can run jobs (scontrol show node,
    // read at start and retried every 5 s until slurmctld answers) and publishes
    // them in the snapshot: the capacity the plugins scale entitlements to.
    let total = tb.config().nodes * tb.config().gpus;
    let mut seen = None;
    let w = wait_secs(30, || -> Result<bool> {
        seen = api.snapshot()?.cluster_gpus;
        Ok(seen.is_some())
    });
    c.record(
        "0 snapshot cluster_gpus = the testbed's GPUs",
        Check::eq(Some(total), seen).actual(format!("{seen:?} ({})", w.describe())),
    );

    for section in sections {
        let t0 = now();
        match section {
            1 => section_1(c, tb)?,
            2 => section_2(c, tb)?,
            3 => section_3(c, tb)?,
            4 => section_4(c, tb)?,
            5 => section_5(c, tb)?,
            6 => section_6(c, tb)?,
            _ => section_7(c, tb)?,
        }
        say(format_args!("   (section {section}: {} s)", now() - t0));
    }
    Ok(())
}

/// The job (an error once Slurm forgot it).
fn job(s: &Slurm, id: JobId) -> Result<Job> {
    Ok(s.known_job(id)?)
}

/// Fills the cluster (2 x 2 GPUs) with two [`sbatch_2gpu`] jobs; waits up to 15 s
/// for both to run and returns them.
fn fill_cluster(
    s: &Slurm,
    account: &str,
    comment: &str,
    extra: &[&str],
    sleep_for: u32,
) -> Result<[JobId; 2]> {
    let jobs = [
        sbatch_2gpu(s, account, comment, extra, sleep_for)?,
        sbatch_2gpu(s, account, comment, extra, sleep_for)?,
    ];
    wait_secs(15, || both_running(s, jobs[0], jobs[1]));
    Ok(jobs)
}

fn section_1(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 1. rejections");
    let s = tb.slurm();
    let before = s.queue(&[])?.len();
    let rejections: [(&str, &str, &[&str]); 7] = [
        (
            "min_runtime=4x",
            "invalid duration \"4x\"",
            &["-A", "teama", "--comment", "min_runtime=4x"],
        ),
        (
            "min_runtime=",
            "empty duration",
            &["-A", "teama", "--comment", "min_runtime="],
        ),
        (
            "min_runtime=-5m",
            "negative duration",
            &["-A", "teama", "--comment=min_runtime=-5m"],
        ),
        (
            "above the site maximum",
            "above this site's maximum of 2m",
            &["-A", "teama", "--comment", "min_runtime=3m"],
        ),
        (
            "above --time",
            "longer than the job's time limit of 1m (--time)",
            &["-A", "teama", "--time=1", "--comment", "min_runtime=2m"],
        ),
        (
            "unknown account",
            "account 'teamx' has no GPU budget",
            &["-A", "teamx", "--comment", "min_runtime=30s"],
        ),
        (
            "free tier + min_runtime",
            "cannot be combined with the free tier",
            &["-A", "teama", "--comment", "unallocated min_runtime=1m"],
        ),
    ];
    for (label, want, args) in rejections {
        let mut args = args.to_vec();
        args.extend(["--wrap", "sleep 1"]);
        let out = s.sbatch_attempt(&args)?;
        let reason = out
            .output
            .find("slurm-budget: ")
            .map(|i| {
                out.output[i..]
                    .lines()
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take(110)
                    .collect::<String>()
            })
            .unwrap_or_else(|| out.output.clone());
        c.record(
            format!("1 {label}: sbatch refuses with the reason"),
            Check::that(!out.accepted && out.output.contains(want))
                .expected(format!("refused, saying {want:?}"))
                .actual(if out.accepted {
                    format!("accepted: {}", out.output)
                } else {
                    reason
                }),
        );
    }
    let after = s.queue(&[])?.len();
    c.record(
        "1 nothing queued by the refused submissions",
        Check::eq(before, after),
    );
    let ok = s.sbatch(&[
        "-A",
        "teama",
        "--comment",
        "exp1 min_runtime=30s",
        "--wrap",
        "sleep 1",
    ])?;
    let j = job(s, ok)?;
    c.record(
        "1 valid job stores its contract in AdminComment",
        Check::eq("budget:min_runtime=30", j.admin_comment.as_str()).jobs(&[ok]),
    );
    c.record(
        "1 valid job forced requeueable",
        Check::eq(true, j.requeue).jobs(&[ok]),
    );
    // Slurm itself refuses AdminComment from non-operators; as root there is nothing
    // to check.
    if tb.user() != "root" {
        let changed = s.succeeds(
            "scontrol",
            &["update", &format!("job={ok}"), "AdminComment=x"],
        );
        c.record(
            "1 a user cannot change the stored contract",
            Check::that(!changed).actual(format!("scontrol update accepted: {changed}")),
        );
    }
    s.cancel(&[ok])?;
    Ok(())
}

fn section_2(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 2. protection, then a fresh window after requeue");
    let s = tb.slurm();
    let api = tb.budgetd();
    s.cancel_user(tb.user())?;
    sleep_secs(2.0);
    let window = format!("min_runtime={WINDOW}s");
    let [v1, v2] = fill_cluster(s, "teamb", &window, &[], 600)?;
    let filled = both_running(s, v1, v2)?;
    c.record(
        "2 two over-budget jobs fill the cluster",
        Check::that(filled).jobs(&[v1, v2]),
    );
    let (s1, s2) = (start_of(s, v1)?, start_of(s, v2)?);
    let p = sbatch_2gpu(s, "teama", &window, &[], 15)?;
    let deadline = now() + WINDOW + 3 * CYCLE + 20;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], s1.min(s2) + WINDOW, deadline)?;
    let mut victim = None;
    for v in [v1, v2] {
        if job(s, v)?.restarts >= 1 {
            victim = Some(v);
        }
    }
    c.record(
        "2 budgeted job started by preemption",
        Check::that(pstart > 0 && victim.is_some())
            .actual(format!("preemptor {p} start {pstart}, victim {victim:?}"))
            .jobs(&[p, v1, v2]),
    );
    c.record(
        "2 no victim touched inside its window",
        Check::that(!early).jobs(&[v1, v2]),
    );
    let Some(victim) = victim.filter(|_| pstart > 0) else {
        return finish_2(tb);
    };
    let vstart = if victim == v1 { s1 } else { s2 };
    let lag = pstart - (vstart + WINDOW);
    c.record(
        "2 victim requeued after its window: preemptor starts within a cycle of the window end",
        Check::within(lag, 0, CYCLE + SLACK).jobs(&[victim, p]),
    );
    // Least work lost goes first among equals (victim_order counts GPU-seconds of
    // the run; equal GPUs: the younger run).
    if s1 != s2 {
        let young = if s2 > s1 { v2 } else { v1 };
        c.record("2 youngest run chosen as victim", Check::eq(young, victim));
    }
    check_recorded(
        c,
        api,
        "2 preemption recorded by budgetd (reason over_budget)",
        victim,
        p,
        "over_budget",
    );
    // Fresh window: once the preemptor ends the victim runs again with a new
    // StartTime; a second budgeted job must then wait a whole new window.
    wait_secs(60, || {
        Ok::<_, testbed_tests::Error>(s.state(victim)? == "RUNNING")
    });
    let vj = job(s, victim)?;
    let r2 = vj.start.unwrap_or(0);
    c.record(
        "2 requeued job restarted (its next run starts later)",
        Check::that(r2 > vstart)
            .actual(format!(
                "run {} at {r2}, first run at {vstart}",
                vj.restarts
            ))
            .jobs(&[victim]),
    );
    let other = if victim == v1 { v2 } else { v1 };
    s.cancel(&[other])?;
    sleep_secs(1.0);
    // Fill the freed GPUs so the only way in is preemption again.
    let filler = sbatch_2gpu(s, "teamb", "min_runtime=120s", &[], 600)?;
    s.wait_state(filler, "RUNNING", 10);
    let p2 = sbatch_2gpu(s, "teama", &window, &[], 5)?;
    let p2start = wait_start(s, p2, now() + WINDOW + 3 * CYCLE + 10, |_| Ok(()))?;
    let lag2 = p2start - (r2 + WINDOW);
    c.record(
        "2 second run protected afresh: preemptor starts within a cycle of the new window end",
        Check::that(p2start > 0 && (0..=CYCLE + SLACK).contains(&lag2))
            .expected(format!(
                "started, 0..={} s after the new window end",
                CYCLE + SLACK
            ))
            .actual(format!("start {p2start}, {lag2} s after"))
            .jobs(&[p2, victim, filler]),
    );
    c.record(
        "2 filler inside its window untouched",
        Check::eq(0, job(s, filler)?.restarts).jobs(&[filler]),
    );
    finish_2(tb)
}

fn finish_2(tb: &Testbed) -> Result<()> {
    tb.slurm().cancel_user(tb.user())?;
    sleep_secs(3.0);
    Ok(())
}

fn section_3(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 3. free tier yields at once");
    let s = tb.slurm();
    let [f1, f2] = fill_cluster(s, "teamx", "unallocated", &[], 600)?;
    c.record(
        "3 free jobs run on idle GPUs without a budget",
        Check::that(both_running(s, f1, f2)?)
            .actual(format!("AdminComment={}", job(s, f1)?.admin_comment))
            .jobs(&[f1, f2]),
    );
    let b = sbatch_2gpu(s, "teama", &format!("min_runtime={WINDOW}s"), &[], 600)?;
    let t0 = now();
    let bstart = wait_start(s, b, t0 + CYCLE + SLACK + 5, |_| Ok(()))?;
    c.record(
        "3 budgeted job starts within a cycle by preempting a free job",
        Check::that(bstart > 0 && bstart - t0 <= CYCLE + SLACK)
            .expected(format!("started <= {} s after submission", CYCLE + SLACK))
            .actual(if bstart > 0 {
                format!("{} s", bstart - t0)
            } else {
                "not started".into()
            })
            .jobs(&[b, f1, f2]),
    );
    let requeued = job(s, f1)?.restarts + job(s, f2)?.restarts;
    c.record(
        "3 exactly one free job requeued",
        Check::eq(1, requeued).jobs(&[f1, f2]),
    );
    s.cancel_user(tb.user())?;
    Ok(())
}

/// `why` on the pending labx job names exactly `want` among lab's jobs, each from
/// its window end, for reason rebalance. (Only lab's jobs are compared: the ledger
/// may still list a ghost "running" run of an earlier section's job that was
/// requeued and cancelled within one sync period.)
fn why_names(api: &Budgetd, x: JobId, want: &BTreeMap<JobId, i64>) -> Result<bool> {
    let w = api.why(x)?;
    let lab: BTreeMap<JobId, (i64, bool)> = w
        .preemption
        .may_preempt
        .iter()
        .filter(|o| o.account.starts_with("lab"))
        .map(|o| {
            (
                o.job_id,
                (o.at, matches!(o.reason, PeerReason::Rebalance { .. })),
            )
        })
        .collect();
    Ok(w.state == RunState::Pending
        && lab.len() == want.len()
        && want.iter().all(|(j, t)| lab.get(j) == Some(&(*t, true))))
}

fn section_4(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 4. rebalancing between two budgeted teams, and no A->B->A");
    let s = tb.slurm();
    let api = tb.budgetd();
    tb.clear_jobs()?;
    let (rx, ry) = (api.ratio("labx")?, api.ratio("laby")?);
    c.record(
        "4 laby within budget but above labx by more than the hysteresis",
        Check::that(ry < 1.0 && ry - rx > HYSTERESIS)
            .expected(format!("laby < 1 and laby - labx > {HYSTERESIS}"))
            .actual(format!("labx r={rx}, laby r={ry}")),
    );
    let [y1, y2] = fill_cluster(s, "laby", &format!("min_runtime={SHORT}s"), &[], 600)?;
    c.record(
        "4 laby fills the cluster (2 x 2 GPUs)",
        Check::that(both_running(s, y1, y2)?).jobs(&[y1, y2]),
    );
    let (ys1, ys2) = (start_of(s, y1)?, start_of(s, y2)?);
    let x = sbatch_2gpu(s, "labx", &format!("min_runtime={XWIN}s"), &[], 600)?;
    // why on the pending labx job, while laby's windows still run: both laby jobs,
    // each from the end of its own window, for reason rebalance.
    let want = BTreeMap::from([(y1, ys1 + SHORT), (y2, ys2 + SHORT)]);
    let into = now() - ys1.min(ys2);
    let w = wait_secs(8, || why_names(api, x, &want));
    let shown = api.why(x).map(|w| {
        w.preemption
            .may_preempt
            .iter()
            .map(|o| format!("job {} ({}) at {}", o.job_id, o.account, o.at))
            .collect::<Vec<_>>()
            .join(", ")
    });
    c.record(
        "4 why on the pending labx job names both laby jobs from their window ends (rebalance)",
        Check::that(w.ok)
            .expected(format!("{want:?} ({into} s into laby's windows)"))
            .actual(match shown {
                Ok(list) => format!("may preempt: {list}"),
                Err(e) => e.to_string(),
            })
            .jobs(&[x, y1, y2]),
    );
    let deadline = now() + SHORT + 3 * CYCLE + 10;
    let (xstart, early) = wait_preemption(s, x, [y1, y2], ys1.min(ys2) + SHORT, deadline)?;
    let mut victims = Vec::new();
    let mut other = 0;
    for y in [y1, y2] {
        if job(s, y)?.restarts >= 1 {
            victims.push(y);
        } else {
            other = y;
        }
    }
    c.record(
        "4 labx job started by preempting exactly one laby job",
        Check::that(xstart > 0 && victims.len() == 1)
            .actual(format!("labx start {xstart}, requeued: {victims:?}"))
            .jobs(&[x, y1, y2]),
    );
    c.record(
        "4 no laby job touched inside its window",
        Check::that(!early).jobs(&[y1, y2]),
    );
    if victims.len() != 1 || xstart == 0 {
        tb.clear_jobs()?;
        return Ok(());
    }
    let victim = victims[0];
    let vstart = if victim == y1 { ys1 } else { ys2 };
    c.record(
        "4 victim requeued after its window: labx job starts within a cycle of the window end",
        Check::within(xstart - (vstart + SHORT), 0, CYCLE + SLACK).jobs(&[victim, x]),
    );
    check_recorded(
        c,
        api,
        "4 preemption recorded by budgetd (reason rebalance)",
        victim,
        x,
        "rebalance",
    );
    // No A->B->A: laby's requeued job becomes eligible (BeginTime = requeue + 6 s) and
    // stays pending behind labx; two scheduling cycles past the labx job's own window,
    // nothing of labx was requeued, and the other laby job was not taken either (laby
    // now holds exactly its entitled half of lab).
    let mut eligible = None;
    while now() < xstart + XWIN + 2 * CYCLE + 1 {
        let v = job(s, victim)?;
        if v.state == "PENDING" && v.reason != "BeginTime" {
            eligible = Some(v.reason);
        }
        sleep_secs(0.5);
    }
    let v = job(s, victim)?;
    c.record(
        "4 laby's requeued job eligible and pending past labx's window",
        Check::that(eligible.is_some() && v.state == "PENDING")
            .actual(format!(
                "{} now, Reason={}",
                v.state,
                eligible.as_deref().unwrap_or("never eligible")
            ))
            .jobs(&[victim]),
    );
    let (xj, oj) = (job(s, x)?, job(s, other)?);
    c.record(
        "4 no A->B->A: labx job and the other laby job still running, never requeued",
        Check::eq(
            ("RUNNING", 0, "RUNNING", 0),
            (
                xj.state.as_str(),
                xj.restarts,
                oj.state.as_str(),
                oj.restarts,
            ),
        )
        .jobs(&[x, other]),
    );
    let labx_victims: Vec<JobId> = api
        .preemptions()?
        .iter()
        .filter(|r| r.account == "labx")
        .map(|r| r.job_id)
        .collect();
    c.record(
        "4 no preemption of a labx job recorded",
        Check::eq(Vec::<JobId>::new(), labx_victims),
    );
    // The reverse is refused by the rule itself: the pending laby job may preempt no
    // job of lab (neither labx's, by ratio, nor laby's own, same side).
    let w = wait_secs(6, || -> Result<bool> {
        let w = api.why(victim)?;
        Ok(w.state == RunState::Pending
            && !w
                .preemption
                .may_preempt
                .iter()
                .any(|o| o.account.starts_with("lab")))
    });
    c.record(
        "4 why on the requeued laby job: it may preempt no lab job",
        Check::that(w.ok).actual(w.describe()).jobs(&[victim]),
    );
    tb.clear_jobs()?;
    Ok(())
}

/// The payload, run as an srun step: on SIGTERM it writes a checkpoint marker and
/// keeps running (a job that exits 0 during its grace ends COMPLETED, not requeued).
const GRACE_STEP: &str = r#"#!/bin/bash
mark="$1"
trap 'echo "checkpoint $(date +%s) run ${SLURM_RESTART_COUNT:-0}" >> "$mark"' TERM
echo "step $(date +%s) run ${SLURM_RESTART_COUNT:-0}" >> "$mark"
while :; do sleep 0.2; done
"#;

/// The batch script: its own trap shows when the batch shell itself is signalled.
const GRACE_BATCH: &str = r#"#!/bin/bash
step="$1" mark="$2"
trap 'echo "batch-term $(date +%s) run ${SLURM_RESTART_COUNT:-0}" >> "$mark"' TERM
srun "$step" "$mark" &
while :; do sleep 0.2; done
"#;

/// Epoch of the first `KIND T run 0` line of the marker file.
fn mark_time(marks: &str, kind: &str) -> Option<i64> {
    marks.lines().find_map(|l| {
        let mut w = l.split_whitespace();
        match (w.next(), w.next(), w.next(), w.next(), w.next()) {
            (Some(k), Some(t), Some("run"), Some("0"), None) if k == kind => t.parse().ok(),
            _ => None,
        }
    })
}

fn section_5(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 5. GraceTime: SIGTERM after the window, checkpoint, requeue after the grace");
    let s = tb.slurm();
    let api = tb.budgetd();
    tb.clear_jobs()?;
    let dir = tb.dir();
    let mark = dir.join("grace-marks");
    let step = dir.join("grace-step.sh");
    let batch = dir.join("grace-batch.sh");
    let _ = std::fs::remove_file(&mark);
    for (path, text) in [(&step, GRACE_STEP), (&batch, GRACE_BATCH)] {
        std::fs::write(path, text)?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))?;
    }
    let marks = || std::fs::read_to_string(&mark).unwrap_or_default();
    // A protected filler on one node, the victim (partition grace) on the other.
    let fill = sbatch_2gpu(s, "teamb", "min_runtime=120s", &[], 600)?;
    s.wait_state(fill, "RUNNING", 15);
    let (step_s, mark_s, batch_s) = (
        step.to_string_lossy().into_owned(),
        mark.to_string_lossy().into_owned(),
        batch.to_string_lossy().into_owned(),
    );
    let gv = s.sbatch(&[
        "-p",
        "grace",
        "-A",
        "teamb",
        "--gres=gpu:2",
        "--comment",
        &format!("min_runtime={GRACE_WINDOW}s"),
        &batch_s,
        &step_s,
        &mark_s,
    ])?;
    s.wait_state(gv, "RUNNING", 15);
    wait_secs(10, || {
        Ok::<_, std::io::Error>(marks().lines().any(|l| l.starts_with("step ")))
    });
    let g = job(s, gv)?;
    c.record(
        "5 victim runs in partition grace (GraceTime=10), its srun step started",
        Check::that(g.state == "RUNNING" && g.partition == "grace" && !marks().is_empty())
            .actual(format!(
                "{} in {}, marker {:?}",
                g.state,
                g.partition,
                marks().trim()
            ))
            .jobs(&[gv]),
    );
    let gvs = g.start.unwrap_or(0);
    let gp = sbatch_2gpu(s, "teama", &format!("min_runtime={WINDOW}s"), &[], 600)?;
    let mut in_grace_ok = true;
    let deadline = gvs + GRACE_WINDOW + CYCLE + GRACE + KILLWAIT + 25;
    let gps = wait_start(s, gp, deadline, |t| {
        // Inside the grace the victim keeps running and is not yet requeued.
        if let Some(ckpt) = mark_time(&marks(), "checkpoint") {
            let v = job(s, gv)?;
            if t < ckpt + GRACE - 1 && !(v.state == "RUNNING" && v.restarts == 0) {
                in_grace_ok = false;
            }
        }
        Ok(())
    })?;
    let all_marks = marks();
    let t_ckpt = mark_time(&all_marks, "checkpoint");
    let t_batch = mark_time(&all_marks, "batch-term");
    let requeued = format!("preempted JobId={gv} has been requeued");
    let t_rq = tb
        .ctld_log()
        .first_time(|l| l.contains(&requeued))?
        .unwrap_or(0);
    for l in all_marks.lines() {
        say(format_args!("        marker: {l}"));
    }
    c.record(
        "5 checkpoint marker written by the srun step's SIGTERM trap",
        Check::that(t_ckpt.is_some()).jobs(&[gv]),
    );
    let t_ckpt = t_ckpt.unwrap_or(0);
    c.record(
        "5 SIGTERM only after the victim's window (within a cycle of its end)",
        Check::within(t_ckpt - gvs, GRACE_WINDOW, GRACE_WINDOW + CYCLE + SLACK).jobs(&[gv]),
    );
    c.record(
        "5 batch script itself not signalled during the grace",
        Check::that(t_batch.is_none_or(|b| b - t_ckpt >= GRACE - 1))
            .expected(format!(
                "no batch-term line, or one >= {} s after the step's",
                GRACE - 1
            ))
            .actual(match t_batch {
                Some(b) => format!("batch SIGTERM +{} s after the step's", b - t_ckpt),
                None => "no batch-term line".into(),
            }),
    );
    c.record(
        "5 victim RUNNING and not requeued while in its grace",
        Check::that(in_grace_ok).jobs(&[gv]),
    );
    let g = job(s, gv)?;
    // Both stamps are whole seconds (the marker's `date +%s`, the log line's time):
    // a SIGTERM late in one second whose marker is written in the next reads a
    // 10 s grace as 9 s, so the lower bound is one second short.
    c.record(
        "5 victim requeued after the grace (slurmctld's requeue line)",
        Check::that(
            g.restarts == 1
                && t_rq > 0
                && (GRACE - 1..=GRACE + CYCLE + SLACK).contains(&(t_rq - t_ckpt)),
        )
        .expected(format!(
            "Restarts=1, requeue {}..={} s after SIGTERM",
            GRACE - 1,
            GRACE + CYCLE + SLACK
        ))
        .actual(format!(
            "Restarts={}, requeue +{} s after SIGTERM",
            g.restarts,
            t_rq - t_ckpt
        ))
        .jobs(&[gv]),
    );
    // The requeue comes at the first scheduler pass after the grace; the step traps
    // SIGTERM, so its GPUs are free only after KillWait (SIGKILL), and the preemptor
    // starts at the next pass after that.
    // Lower bounds one second short: the requeue's log line and the start time are
    // whole seconds, so a 4.7 s gap reads as 4 (seen once on a loaded machine).
    let after_term = (GRACE, GRACE + 2 * CYCLE + KILLWAIT + SLACK);
    let after_rq = (KILLWAIT - 1, KILLWAIT + CYCLE + SLACK);
    c.record(
        "5 preemptor starts ~GraceTime + KillWait after SIGTERM",
        Check::that(
            gps > 0
                && (after_term.0..=after_term.1).contains(&(gps - t_ckpt))
                && (after_rq.0..=after_rq.1).contains(&(gps - t_rq)),
        )
        .expected(format!(
            "+{}..={} s after SIGTERM, +{}..={} s after the requeue",
            after_term.0, after_term.1, after_rq.0, after_rq.1
        ))
        .actual(format!(
            "+{} s after SIGTERM, +{} s after the requeue",
            gps - t_ckpt,
            gps - t_rq
        ))
        .jobs(&[gp, gv]),
    );
    c.record(
        "5 filler inside its window untouched",
        Check::eq(0, job(s, fill)?.restarts).jobs(&[fill]),
    );
    check_recorded(
        c,
        api,
        "5 preemption recorded by budgetd (reason over_budget)",
        gv,
        gp,
        "over_budget",
    );
    tb.clear_jobs()?;
    Ok(())
}

/// min_runtime of teamb's jobs in section 6 (s).
const CAP_WINDOW: i64 = 5;

/// Section 6's situation: teamb (over budget) fills the cluster with two 2-GPU
/// jobs of `CAP_WINDOW` windows, then a 2-GPU teama job asks; the three jobs.
fn cap_situation(s: &Slurm) -> Result<(JobId, [JobId; 2])> {
    let window = format!("min_runtime={CAP_WINDOW}s");
    let [v1, v2] = fill_cluster(s, "teamb", &window, &[], 600)?;
    let p = sbatch_2gpu(s, "teama", &window, &[], 600)?;
    Ok((p, [v1, v2]))
}

/// Requeues of `jobs` so far.
fn requeues(s: &Slurm, jobs: &[JobId]) -> Result<u32> {
    let mut n = 0;
    for &j in jobs {
        n += job(s, j)?.restarts;
    }
    Ok(n)
}

fn section_6(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 6. the window's preemptions outlive a slurmctld restart (site cap)");
    let s = tb.slurm();
    let api = tb.budgetd();
    let log = tb.ctld_log();
    tb.clear_jobs()?;
    // One preemption of this section's own, so that it stands alone.
    let (p, victims) = cap_situation(s)?;
    let started = wait_start(s, p, now() + CAP_WINDOW + 3 * CYCLE + 15, |_| Ok(()))?;
    let taken = requeues(s, &victims)?;
    c.record(
        "6 budgeted job started by preempting an over-budget one",
        Check::that(started > 0 && taken == 1)
            .actual(format!("start {started}, victims requeued {taken}"))
            .jobs(&[p, victims[0], victims[1]]),
    );
    let w = wait_secs(20, || -> Result<bool> {
        Ok(api
            .preemptions()?
            .iter()
            .any(|r| r.preemptor == Some(p) && r.source == "plugin"))
    });
    let recorded = api.rebalancing_preemptions()?.len() as u32;
    say(format_args!(
        "   {recorded} rebalancing preemption(s) recorded ({}); site cap := {recorded}",
        w.describe()
    ));
    tb.clear_jobs()?;
    api.set_policy(&PolicyPatch {
        site_max_preemptions: Some(recorded),
        ..PolicyPatch::default()
    })?;
    let (read, waited) = tb.restart_ctld_reading_history()?;
    c.record(
        "6 after a slurmctld restart preempt/budget reads the window's rebalancing preemptions from budgetd",
        Check::that(read == Some(recorded as usize))
            .expected(format!("{recorded} read back"))
            .actual(format!("{read:?} ({waited})"))
            .log(SEEDED_HISTORY),
    );
    // The same situation: the cap, reached before the restart, still holds.
    let refusals = log.count("site cap reached")?;
    let (p, victims) = cap_situation(s)?;
    let waited = wait_start(s, p, now() + CAP_WINDOW + 4 * CYCLE + 5, |_| Ok(()))?;
    let taken = requeues(s, &victims)?;
    let refused = log.count("site cap reached")? > refusals;
    c.record(
        "6 site cap reached before the restart still holds after it: the budgeted job waits, nothing requeued",
        Check::that(waited == 0 && taken == 0 && refused)
            .expected("not started, 0 requeued, \"site cap reached\" logged")
            .actual(format!(
                "start {waited}, requeued {taken}, logged {refused}"
            ))
            .jobs(&[p, victims[0], victims[1]])
            .log("site cap"),
    );
    // One more allowed: the same job now starts by preemption (the situation
    // does call for one).
    api.set_policy(&PolicyPatch {
        site_max_preemptions: Some(recorded + 1),
        ..PolicyPatch::default()
    })?;
    let started = wait_start(s, p, now() + 4 * CYCLE + 20, |_| Ok(()))?;
    let taken = requeues(s, &victims)?;
    c.record(
        "6 with the cap one higher the budgeted job starts by preemption",
        Check::that(started > 0 && taken == 1)
            .actual(format!("start {started}, victims requeued {taken}"))
            .jobs(&[p, victims[0], victims[1]]),
    );
    // The patch cannot clear a cap (None is "unchanged"): one no section reaches.
    api.set_policy(&PolicyPatch {
        site_max_preemptions: Some(1000),
        ..PolicyPatch::default()
    })?;
    tb.clear_jobs()?;
    Ok(())
}

fn section_7(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 7. over-budget work with 30-minute limits yields after its windows");
    let s = tb.slurm();
    s.cancel_user(tb.user())?;
    sleep_secs(2.0);
    let window = format!("min_runtime={WINDOW}s");
    let [v1, v2] = fill_cluster(s, "teamb", &window, &["--time=30"], 1800)?;
    c.record(
        "7 two over-budget jobs with 30-minute limits fill the cluster",
        Check::that(both_running(s, v1, v2)?).jobs(&[v1, v2]),
    );
    let (s1, s2) = (start_of(s, v1)?, start_of(s, v2)?);
    let p = sbatch_2gpu(s, "teama", &window, &[], 5)?;
    let period = i64::from(tb.config().budget_period);
    let window_end = s1.min(s2) + WINDOW;
    let deadline = window_end + CYCLE + 2 * period + SLACK + 10;
    let (pstart, early) = wait_preemption(s, p, [v1, v2], window_end, deadline)?;
    c.record(
        "7 budgeted job started by preemption within a cycle and two plugin periods of the window end",
        Check::that(pstart > 0 && (0..=CYCLE + 2 * period + SLACK).contains(&(pstart - window_end)))
            .expected(format!(
                "started, 0..={} s after the first window end {window_end}",
                CYCLE + 2 * period + SLACK
            ))
            .actual(format!("start {pstart}"))
            .jobs(&[p, v1, v2])
            .log("preempt/budget"),
    );
    c.record(
        "7 no victim touched inside its window",
        Check::that(!early).jobs(&[v1, v2]),
    );
    s.cancel_user(tb.user())?;
    sleep_secs(3.0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::mark_time;

    #[test]
    fn marker_lines() {
        let m = "step 100 run 0\ncheckpoint 110 run 0\nstep 130 run 1\ncheckpoint 140 run 1\n";
        assert_eq!(mark_time(m, "step"), Some(100));
        assert_eq!(mark_time(m, "checkpoint"), Some(110));
        assert_eq!(mark_time(m, "batch-term"), None);
        assert_eq!(mark_time("checkpoint 140 run 1\n", "checkpoint"), None);
    }
}
