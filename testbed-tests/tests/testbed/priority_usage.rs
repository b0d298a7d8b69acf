//! Suite `testbed-priority`: priority/budget and the usage ledger against a real
//! slurmctld + 4 slurmd with 8 fake GPUs each, and budgetd.
//!
//! 1. the plugin is loaded (its version line names the running Slurm release) and
//!    slurmctld runs jobs;
//! 2. `squeue %Q` shows nonzero priorities, `sprio` the factors, `sshare` works;
//! 3. priorities follow budgets without any job update: the team whose running jobs
//!    burn its budget falls behind the idle team; cutting the idle team's allocation
//!    to 0 puts its job below within one period; a free-tier job stays below budgeted
//!    jobs; `budgetctl why` orders pending jobs as squeue does; budgetd knows the
//!    running runs;
//! 4. budgetd hung (SIGSTOP): safe mode logged once, sbatch still fast; SIGCONT: safe
//!    mode left, logged once;
//! 5. usage exactness: for completed, running, cancelled-while-running, requeued and
//!    requeued-then-cancelled jobs every run in the ledger (GPUs, start, end) equals
//!    Slurm's own times within 2 s, and the usage report adds up to the same GPU-s;
//! 6. budgetd hung, then killed and restarted: sbatch latency within noise of a
//!    baseline measured just before, jobs keep running, and every run that started,
//!    ended or was requeued meanwhile is in the ledger once, with exact times;
//! 7. slurmctld restarted (SIGTERM, then SIGKILL): the plugin reloads, an allocation
//!    change made while it was down orders the queue within one period after it, no
//!    run is lost or counted twice, and `fini` joins the background thread.
//!
//! `PRIORITY_SECTIONS="1 2 3"` runs only some sections (2 and 3 need 1, 5 needs 1
//! and 4, 6 and 7 need 5).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use budget_protocol::RunState;
use testbed_tests::api::PolicyPatch;
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::ledger::{self, Exactness, Truth};
use testbed_tests::logs::in_order;
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::{now, now_f64};

/// priority/budget's refresh period (s).
const PERIOD: u64 = 2;

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-priority", |checks| -> Result<()> {
        let mut config = TestbedConfig::from_env(
            "TEST_SLURM_DIR",
            "/tmp/slurm-budget-priority",
            "TEST_SLURM_PORT_BASE",
            19417,
        )?;
        config.nodes = 4;
        config.gpus = 8;
        config.priority = Some("budget".into());
        config.budget_period = PERIOD as u32;
        config.unset = vec!["TESTBED_EXTRA_CONF", "TESTBED_NO_BUDGETD"];
        with_testbed(checks, config, scenario)
    });
}

/// Jobs that live across sections.
struct Jobs {
    /// The four 8-GPU teama jobs that fill the cluster (section 1).
    running: Vec<JobId>,
    ja: JobId,
    jb: JobId,
    jf: JobId,
    truth: Truth,
    /// Section 5's long runners, still running in section 7.
    r1: JobId,
    q1: JobId,
    /// Section 6's requeued job.
    q2: JobId,
}

/// `PRIORITY_SECTIONS` (default all seven). Sections build on earlier ones' jobs:
/// 2 and 3 need 1; 5 needs 1 and 4; 6 and 7 need 5.
fn sections() -> Result<Vec<u32>> {
    let spec = std::env::var("PRIORITY_SECTIONS").unwrap_or_default();
    if spec.trim().is_empty() {
        return Ok((1..=7).collect());
    }
    let mut v = spec
        .split_whitespace()
        .map(|s| match s.parse::<u32>() {
            Ok(n @ 1..=7) => Ok(n),
            _ => bail!("PRIORITY_SECTIONS={spec:?}: sections are 1 to 7"),
        })
        .collect::<Result<Vec<u32>>>()?;
    v.sort_unstable();
    v.dedup();
    for (n, needs) in [(2, &[1][..]), (3, &[1]), (5, &[1, 4]), (6, &[5]), (7, &[5])] {
        if v.contains(&n) && !needs.iter().all(|m| v.contains(m)) {
            bail!("PRIORITY_SECTIONS={spec:?}: section {n} needs sections {needs:?}");
        }
    }
    Ok(v)
}

fn scenario(c: &mut Checks, tb: &Testbed) -> Result<()> {
    let sections = sections()?;
    let on = |n: u32| sections.contains(&n);
    if on(1) {
        let mut jobs = section_1(c, tb)?;
        if on(2) {
            section_2(c, tb, &jobs)?;
        }
        if on(3) {
            section_3(c, tb, &jobs)?;
        }
        if on(4) {
            let js = section_4(c, tb)?;
            if on(5) {
                section_5(c, tb, &mut jobs, js)?;
                if on(6) {
                    section_6(c, tb, &mut jobs)?;
                }
                if on(7) {
                    section_7(c, tb, &mut jobs)?;
                }
            }
        }
    } else if on(4) {
        section_4(c, tb)?;
    }
    let log = tb.ctld_log();
    let panics = log.lines(|l| l.contains("priority/budget: panic"))?;
    c.record(
        "end: no panic logged by the plugin",
        Check::that(panics.is_empty())
            .expected("no 'priority/budget: panic' line")
            .actual(panics.first().map_or("none", String::as_str)),
    );
    c.record(
        "end: every testbed daemon alive (scripts/testbed status)",
        Check::that(tb.all_daemons_up()),
    );
    Ok(())
}

fn sbatch(s: &Slurm, args: &[&str]) -> Result<JobId> {
    Ok(s.sbatch(args)?)
}

fn section_1(c: &mut Checks, tb: &Testbed) -> Result<Jobs> {
    say("== 1. plugin loaded, jobs run");
    let s = tb.slurm();
    let log = tb.ctld_log();
    let version = s.version()?;
    let built_for = format!(" built for Slurm {version}");
    let loaded =
        log.lines(|l| in_order(l, &["priority/budget: loaded: slurm-budget ", &built_for]))?;
    c.record(
        "1 plugin loaded: version line names the running Slurm",
        Check::that(!loaded.is_empty())
            .expected(format!(
                "priority/budget: loaded: slurm-budget ...{built_for}"
            ))
            .actual(loaded.first().map_or("no such line", String::as_str)),
    );

    // Two teams with equal allocations; the suite's user is a member of both.
    let api = tb.budgetd();
    api.create_account("teama", None, 100.0)?;
    api.create_account("teamb", None, 100.0)?;
    api.add_member(tb.user(), "teama")?;
    api.add_member(tb.user(), "teamb")?;
    // The plugin logs its first snapshot only; that the new tree reached it shows in
    // the priorities of sections 2 and 3.
    let w = wait_secs(10, || {
        log.contains_in_order(&["priority/budget: budget snapshot ", " loaded"])
    });
    c.record(
        "1 plugin loaded a budget snapshot",
        Check::that(w.ok)
            .actual(w.describe())
            .log("budget snapshot"),
    );

    // Fill all 32 GPUs with teama's jobs, then queue one job per kind.
    let mut running = Vec::new();
    for _ in 0..4 {
        running.push(sbatch(
            s,
            &["-A", "teama", "--gres=gpu:8", "--wrap", "sleep 300"],
        )?);
    }
    let w = wait_secs(20, || {
        Ok::<_, testbed_tests::Error>(s.queue(&["-t", "R"])?.len() == 4)
    });
    c.record(
        "1 four 8-GPU jobs running",
        Check::that(w.ok).actual(w.describe()).jobs(&running),
    );
    let ja = sbatch(s, &["-A", "teama", "--gres=gpu:8", "--wrap", "sleep 10"])?;
    let jb = sbatch(s, &["-A", "teamb", "--gres=gpu:8", "--wrap", "sleep 10"])?;
    let jf = sbatch(
        s,
        &[
            "-A",
            "teamb",
            "--gres=gpu:2",
            "--comment",
            "unallocated",
            "--wrap",
            "sleep 10",
        ],
    )?;
    Ok(Jobs {
        running,
        ja,
        jb,
        jf,
        truth: Truth::default(),
        r1: 0,
        q1: 0,
        q2: 0,
    })
}

fn section_2(c: &mut Checks, tb: &Testbed, j: &Jobs) -> Result<()> {
    say("== 2. priorities visible to Slurm's tools");
    let s = tb.slurm();
    for (what, id) in [("teama", j.ja), ("teamb", j.jb), ("free-tier", j.jf)] {
        let p = s.priority(id)?;
        c.record(
            format!("2 pending {what} job: priority > 0"),
            Check::that(p > 0)
                .actual(format!("job {id}: {p}"))
                .jobs(&[id]),
        );
    }
    let (pf, pa) = (s.priority(j.jf)?, s.priority(j.ja)?);
    c.record(
        "2 free-tier job below the budgeted job",
        Check::that(pf < pa)
            .expected(format!("free {} < teama {}", j.jf, j.ja))
            .actual(format!("{pf} vs {pa}"))
            .jobs(&[j.jf, j.ja]),
    );
    // One job per call: 24.11's sprio parses the whole -j argument for every
    // comma-separated item (`_build_job_list` in src/sprio/opts.c calls
    // unfmt_job_id_string(str) instead of (job)), so "-j 5,6,7" fails there.
    let mut listed: Vec<JobId> = Vec::new();
    for id in [j.ja, j.jb, j.jf] {
        listed.extend(
            s.run("sprio", &["-h", "-j", &id.to_string(), "-o", "%i %Y %Q"])?
                .lines()
                .filter_map(|l| l.split_whitespace().next()?.parse::<JobId>().ok()),
        );
    }
    let mut want = vec![j.ja, j.jb, j.jf];
    let mut got = listed.clone();
    want.sort_unstable();
    got.sort_unstable();
    c.record(
        "2 sprio lists the three pending jobs (with the QOS column)",
        Check::eq(want, got),
    );
    c.record("2 sshare runs", Check::that(s.succeeds("sshare", &[])));
    c.record(
        "2 slurmctld still up after sprio/sshare",
        Check::that(s.ping()),
    );
    Ok(())
}

fn section_3(c: &mut Checks, tb: &Testbed, j: &Jobs) -> Result<()> {
    say("== 3. priorities follow budgets (no job updates)");
    let s = tb.slurm();
    let api = tb.budgetd();
    // teama burns GPU time (32 GPUs running): after a sync and a snapshot its ratio is
    // above teamb's, so teamb's pending job must rank first.
    let above = |a: JobId, b: JobId| -> Result<bool> { Ok(s.priority(a)? > s.priority(b)?) };
    let w = wait_secs(PERIOD * 6, || above(j.jb, j.ja));
    c.record(
        "3 teamb overtakes teama as teama's running jobs use its budget",
        Check::that(w.ok).actual(w.describe()).jobs(&[j.ja, j.jb]),
    );
    // budgetctl why ranks as the plugin does (the projected tier, entitlement first,
    // then Fair-Tree, from the GPUs each account holds): teama holds 32 GPUs, far
    // above its entitlement, so teamb ranks first, by tier (teama's ratio projected
    // 0.6 of a window ahead at 32 GPUs is past 1) or, in one tier, by rank.
    let (wa, wb) = (api.why(j.ja), api.why(j.jb));
    let (qa, qb) = (s.priority(j.ja)?, s.priority(j.jb)?);
    let tier = |t: &str| {
        ["budgeted", "over_budget", "free"]
            .iter()
            .position(|x| *x == t)
    };
    c.record(
        "3 budgetctl why orders the two pending jobs as squeue does (tier, then rank)",
        Check::that(matches!((&wa, &wb), (Ok(a), Ok(b))
            if (tier(&b.tier) < tier(&a.tier) || (a.tier == b.tier && b.rank < a.rank))
                && tier(&b.tier).is_some()
                && b.priority > a.priority && qb > qa))
        .actual(match (&wa, &wb) {
            (Ok(a), Ok(b)) => format!(
                "why: teama job {:?} rank {:?} prio {}, teamb job {:?} rank {:?} prio {}; squeue {qa} vs {qb}",
                a.tier, a.rank, a.priority, b.tier, b.rank, b.priority
            ),
            (Err(e), _) | (_, Err(e)) => e.to_string(),
        })
        .jobs(&[j.ja, j.jb]),
    );
    let before = s.priority(j.jb)?;
    let t0 = Instant::now();
    api.set_allocation("teamb", 0.0)?;
    let w = wait_secs(PERIOD * 3 + 2, || above(j.ja, j.jb));
    let after = s.priority(j.jb).unwrap_or(0);
    c.record(
        "3 teamb allocation -> 0: its job below teama's within ~1 period",
        Check::that(w.ok)
            .expected(format!("within {} s", PERIOD * 3 + 2))
            .actual(format!(
                "reordered after {:.1} s (period {PERIOD} s); teamb job {before} -> {after}",
                t0.elapsed().as_secs_f64()
            ))
            .jobs(&[j.ja, j.jb]),
    );
    let (pf, pb) = (s.priority(j.jf)?, s.priority(j.jb)?);
    c.record(
        "3 free-tier job still below the over-budget job",
        Check::that(pf < pb)
            .actual(format!("{pf} vs {pb}"))
            .jobs(&[j.jf, j.jb]),
    );
    let first = j.running[0];
    let why = api.why(first);
    c.record(
        "3 budgetd knows a running job (why: running)",
        Check::that(matches!(&why, Ok(w) if w.job_id == first && w.state == RunState::Running))
            .expected(format!("job {first} running"))
            .actual(match &why {
                Ok(w) => format!("job {} run {} {:?}", w.job_id, w.run, w.state),
                Err(e) => e.to_string(),
            }),
    );
    Ok(())
}

/// Section 4; returns the job submitted while budgetd hung.
fn section_4(c: &mut Checks, tb: &Testbed) -> Result<JobId> {
    say("== 4. budgetd hung: safe mode, Slurm keeps scheduling");
    let s = tb.slurm();
    let log = tb.ctld_log();
    tb.budgetd().set_policy(&PolicyPatch {
        snapshot_max_age_secs: Some(4),
        ..PolicyPatch::default()
    })?;
    sleep_secs((PERIOD + 1) as f64); // the plugin picks up the new max age
    tb.signal_budgetd("STOP")?;
    let outcome = (|| -> Result<JobId> {
        let w = wait_secs(15, || log.contains("priority/budget: entering safe mode"));
        c.record(
            "4 safe mode entered (logged)",
            Check::that(w.ok).actual(w.describe()).log("safe mode"),
        );
        let (js, took) = s.sbatch_timed(&["-A", "teama", "--gres=gpu:1", "--wrap", "sleep 1"])?;
        let ms = took.as_millis();
        c.record(
            "4 sbatch while budgetd hangs under 1000 ms",
            Check::that(ms < 1000).actual(format!("{ms} ms")),
        );
        let p = s.priority(js)?;
        c.record(
            "4 job submitted in safe mode: priority > 0",
            Check::that(p > 0)
                .actual(format!("job {js}: {p}"))
                .jobs(&[js]),
        );
        Ok(js)
    })();
    tb.signal_budgetd("CONT")?;
    let js = outcome?;
    let w = wait_secs(15, || log.contains("priority/budget: leaving safe mode"));
    c.record(
        "4 safe mode left (logged)",
        Check::that(w.ok).actual(w.describe()).log("safe mode"),
    );
    let entries = log.count("entering safe mode")?;
    c.record(
        "4 safe mode entry logged once",
        Check::eq(1, entries).log("safe mode"),
    );
    Ok(js)
}

/// Records the current run of each job in the truth.
fn truth_now(s: &Slurm, truth: &mut Truth, ids: &[JobId]) -> Result<()> {
    for id in ids {
        if let Some(job) = s.job(*id)? {
            truth.record(&job);
        }
    }
    Ok(())
}

/// `scontrol requeue` a running job; its run ends now (Slurm forgets its times).
fn requeue_now(s: &Slurm, truth: &mut Truth, id: JobId) -> Result<()> {
    let job = s.known_job(id)?;
    let start = job
        .start
        .with_context(|| format!("job {id} has no start to requeue"))?;
    s.requeue(id)?;
    truth.record_run(id, job.restarts, start, now());
    Ok(())
}

/// The ledger matches Slurm (waits up to 3 periods for a sync).
fn check_exact(c: &mut Checks, tb: &Testbed, truth: &Truth, name: &str) {
    let db = tb.database();
    let tracked = truth.tracked();
    let mut last = Exactness::default();
    let w = wait_secs(PERIOD * 3 + 2, || -> Result<bool> {
        last = truth.compare(&ledger::runs(&db, &tracked)?, now());
        Ok(last.exact())
    });
    let mut actual = last.summary();
    if !w.ok {
        actual.push_str(&format!("; differences: {}", last.diffs.join("; ")));
        if let Some(e) = &w.last_error {
            actual.push_str(&format!("; last error: {e}"));
        }
    }
    c.record(
        name,
        Check::that(w.ok)
            .expected("every run once, same GPUs, start and end within 2 s of Slurm's")
            .actual(actual)
            .jobs(&tracked),
    );
}

fn section_5(c: &mut Checks, tb: &Testbed, j: &mut Jobs, js: JobId) -> Result<()> {
    say("== 5. usage exactness: ledger vs Slurm's own start/end times");
    let s = tb.slurm();
    let api = tb.budgetd();
    // The four 8-GPU jobs have been running since section 1: cancel them while running.
    for id in &j.running {
        j.truth.track(*id, 8);
    }
    let mut all = j.running.clone();
    all.extend([j.ja, j.jb, j.jf, js]);
    s.cancel(&all)?;
    wait_secs(15, || s.all_in_state("CANCELLED", &j.running));
    truth_now(s, &mut j.truth, &j.running)?;

    api.create_account("exact", None, 100.0)?;
    api.add_member(tb.user(), "exact")?;
    let mut submit = |gpus: u32, extra: &[&str], cmd: &str| -> Result<JobId> {
        let gres = format!("--gres=gpu:{gpus}");
        let mut args = vec!["-A", "exact", gres.as_str()];
        args.extend_from_slice(extra);
        args.extend(["--wrap", cmd]);
        let id = sbatch(s, &args)?;
        j.truth.track(id, gpus);
        Ok(id)
    };
    let c1 = submit(2, &[], "sleep 2")?;
    let c2 = submit(1, &[], "sleep 4")?;
    let r1 = submit(3, &[], "sleep 600")?;
    let x1 = submit(4, &[], "sleep 600")?;
    let q1 = submit(2, &["--requeue"], "sleep 600")?;
    // Requeued, then cancelled while pending before the plugin's next pass: its first
    // run must still be closed at the requeue (it once stayed "running" forever).
    // (A cancel racing the requeue itself, within milliseconds, where Slurm keeps
    // run 0's start on run 1: suite ledger_faults, section 3.)
    let q3 = submit(1, &["--requeue"], "sleep 600")?;
    let w = wait_secs(20, || s.all_in_state("RUNNING", &[r1, x1, q1, q3]));
    c.record(
        "5 running, to-be-cancelled and to-be-requeued jobs start",
        Check::that(w.ok)
            .actual(w.describe())
            .jobs(&[r1, x1, q1, q3]),
    );
    sleep_secs(3.0);
    s.cancel(&[x1])?;
    requeue_now(s, &mut j.truth, q1)?;
    requeue_now(s, &mut j.truth, q3)?;
    // Once the requeue has finished (pending again), cancel it, within one period.
    s.wait_state(q3, "PENDING", 5);
    s.cancel(&[q3])?;
    let w = wait_secs(20, || -> Result<bool> {
        Ok(s.job(q1)?
            .is_some_and(|q| q.state == "RUNNING" && q.restarts == 1))
    });
    c.record(
        "5 requeued job runs again (run 1)",
        Check::that(w.ok).actual(w.describe()).jobs(&[q1]),
    );
    wait_secs(10, || s.all_in_state("COMPLETED", &[c1, c2]));
    truth_now(s, &mut j.truth, &[c1, c2, r1, x1, q1, q3])?;
    check_exact(
        c,
        tb,
        &j.truth,
        "5 ledger = Slurm for completed, running, cancelled, requeued and requeued-then-cancelled runs",
    );
    // The API's view adds up the same: usage by user for the account of these jobs.
    let mine = [c1, c2, r1, x1, q1, q3];
    let want = j.truth.gpu_seconds(&mine, now());
    let got: f64 = api
        .usage_by_user()?
        .iter()
        .filter(|r| r.account == "exact")
        .map(|r| r.raw_gpu_hours)
        .sum();
    let got = (got * 3600.0).round() as i64;
    c.record(
        "5 usage report: account exact's GPU-s = Slurm's (within 2 s per run)",
        Check::within(got - want, -24, 24).actual(format!("{got} GPU-s vs {want} from Slurm")),
    );
    j.r1 = r1;
    j.q1 = q1;
    Ok(())
}

/// Median and largest sbatch latency of a batch (ms).
#[derive(Debug, Clone, Copy)]
struct Latency {
    median: u128,
    max: u128,
}

/// Submits eight one-GPU jobs of ~1 s, tracked in the truth; their ids and latency.
fn submit_batch(s: &Slurm, truth: &mut Truth) -> Result<(Vec<JobId>, Latency)> {
    let mut ids = Vec::new();
    let mut ms = Vec::new();
    for _ in 0..8 {
        let (id, took) = s.sbatch_timed(&["-A", "exact", "--gres=gpu:1", "--wrap", "sleep 1"])?;
        truth.track(id, 1);
        ids.push(id);
        ms.push(took.as_millis());
    }
    ms.sort_unstable();
    let median = ms[(ms.len() - 1) / 2];
    let max = ms[ms.len() - 1];
    Ok((ids, Latency { median, max }))
}

/// The batch's median sbatch latency is within noise of the baseline measured just
/// before the fault.
fn check_latency(c: &mut Checks, name: &str, lat: Latency, base: Latency) {
    let noise = (base.median * 2).max(base.median + 25);
    c.record(
        name,
        Check::that(lat.median <= noise)
            .expected(format!("<= {noise} ms"))
            .actual(format!(
                "median {} ms (max {}) vs baseline {} ms (max {})",
                lat.median, lat.max, base.median, base.max
            )),
    );
}

/// The jobs run to completion (within 20 s); their runs go into the truth.
fn check_completed(
    c: &mut Checks,
    s: &Slurm,
    truth: &mut Truth,
    name: &str,
    ids: &[JobId],
) -> Result<()> {
    // The batch may run one job after another on the one node that earlier sections'
    // long jobs leave free (seen on 24.11: a job every ~2.5 s, 8 jobs in ~20 s on an
    // idle machine): the bound is about Slurm completing them at all while budgetd is
    // hung or dead, not their speed (sbatch latency is checked on its own).
    let w = wait_secs(60, || s.all_in_state("COMPLETED", ids));
    c.record(name, Check::that(w.ok).actual(w.describe()).jobs(ids));
    truth_now(s, truth, ids)
}

fn section_6(c: &mut Checks, tb: &Testbed, j: &mut Jobs) -> Result<()> {
    say("== 6. budgetd hung, killed and restarted: Slurm unaffected, no run lost");
    let s = tb.slurm();
    // Jobs of 1 GPU that run ~1 s; the baseline is measured right before each fault.
    let (ids, base) = submit_batch(s, &mut j.truth)?;
    check_completed(c, s, &mut j.truth, "6 baseline jobs ran", &ids)?;

    tb.signal_budgetd("STOP")?;
    let hung = (|| -> Result<()> {
        let q2 = sbatch(
            s,
            &[
                "-A",
                "exact",
                "--gres=gpu:1",
                "--requeue",
                "--wrap",
                "sleep 600",
            ],
        )?;
        j.truth.track(q2, 1);
        j.q2 = q2;
        let (ids, lat) = submit_batch(s, &mut j.truth)?;
        check_latency(
            c,
            "6 sbatch with budgetd hung: median latency within noise of the baseline",
            lat,
            base,
        );
        check_completed(
            c,
            s,
            &mut j.truth,
            "6 jobs submitted while budgetd hangs run to completion",
            &ids,
        )?;
        // A run that starts and is requeued while budgetd hangs (Slurm clears its start).
        s.wait_state(q2, "RUNNING", 10);
        // A pass sees it running. While budgetd hangs a pass waits out two 1 s
        // timeouts (snapshot, sync) before the next period starts, so passes collect
        // about every PERIOD + 2 s: wait two such cycles. A run shorter than one
        // cycle that is requeued and done COMPLETING before the next pass is never
        // seen with its start (the CI flake of 2026-12-02: PERIOD + 2 s was exactly
        // one cycle); docs/design.md says what the ledger then holds.
        sleep_secs((2 * (PERIOD + 2) + 1) as f64);
        requeue_now(s, &mut j.truth, q2)?;
        sleep_secs(1.0);
        Ok(())
    })();
    tb.signal_budgetd("CONT")?;
    hung?;
    check_exact(
        c,
        tb,
        &j.truth,
        "6 budgetd back after SIGSTOP: ledger = Slurm, each run once",
    );

    let pid = tb.signal_budgetd("KILL")?;
    Testbed::wait_gone(pid, Duration::from_secs(5));
    let (ids, lat) = submit_batch(s, &mut j.truth)?;
    check_latency(
        c,
        "6 sbatch with budgetd killed: median latency within noise of the baseline",
        lat,
        base,
    );
    check_completed(
        c,
        s,
        &mut j.truth,
        "6 jobs submitted while budgetd is dead run to completion",
        &ids,
    )?;
    let w = wait_secs(15, || s.all_in_state("RUNNING", &[j.q2]));
    c.record(
        "6 requeued job runs again while budgetd is dead",
        Check::that(w.ok).actual(w.describe()).jobs(&[j.q2]),
    );
    truth_now(s, &mut j.truth, &[j.q2])?;
    tb.start_budgetd()?;
    check_exact(
        c,
        tb,
        &j.truth,
        "6 budgetd restarted after SIGKILL: runs that started/ended meanwhile in the ledger once",
    );
    Ok(())
}

/// Waits (up to 30 s) until slurmctld's saved job state is newer than `id`'s start
/// by a second: that save has the job running.
fn saved_after_start(tb: &Testbed, s: &Slurm, id: JobId) -> Result<()> {
    let start = s.known_job(id)?.start.context("job has no start")?;
    let file = tb.ctld_state_dir().join("job_state");
    let w = wait_secs(30, || -> Result<bool> {
        let saved = std::fs::metadata(&file)?
            .modified()?
            .duration_since(std::time::UNIX_EPOCH)?
            .as_secs();
        Ok(i64::try_from(saved).unwrap_or(i64::MAX) > start)
    });
    if !w.ok {
        say(format!(
            "   (no state save after job {id}'s start: {})",
            w.describe()
        ));
    }
    Ok(())
}

fn section_7(c: &mut Checks, tb: &Testbed, j: &mut Jobs) -> Result<()> {
    say("== 7. slurmctld restarted (SIGTERM, kill -9): plugin reloads, priorities, ledger");
    let s = tb.slurm();
    let api = tb.budgetd();
    let log = tb.ctld_log();
    // Two pending jobs held back by --begin: their order only follows the budgets.
    let held = |account: &str| {
        sbatch(
            s,
            &[
                "-A",
                account,
                "--gres=gpu:1",
                "--begin=now+3600",
                "--wrap",
                "sleep 1",
            ],
        )
    };
    let pa = held("teama")?;
    let pb = held("teamb")?;
    for (how, kill) in [("SIGTERM", false), ("SIGKILL", true)] {
        let (win, lose) = if kill { (pa, pb) } else { (pb, pa) };
        let winner = s.known_job(win)?.account;
        let loser = s.known_job(lose)?.account;
        let c3 = sbatch(s, &["-A", "exact", "--gres=gpu:1", "--wrap", "sleep 8"])?;
        j.truth.track(c3, 1);
        s.wait_state(c3, "RUNNING", 10);
        // slurmctld saves job state at most 5 s after a change (state_save.c
        // SAVE_MAX_WAIT): a kill -9 sooner makes Slurm itself forget the job, and there
        // is no truth left. On a loaded machine the save comes later than that (seen:
        // the job recovered pending after 6 s, Slurm ran it again, and the ledger kept
        // a run Slurm no longer had), so wait for a save a second after the start.
        sleep_secs(6.0);
        saved_after_start(tb, s, c3)?;
        let loads = log.count("priority/budget: loaded:")?;
        // Flip the budgets while slurmctld is down: only the reloaded plugin can see it.
        tb.stop_ctld(kill)?;
        api.set_allocation(&winner, 1000.0)?;
        api.set_allocation(&loser, 0.0)?;
        tb.start_ctld()?;
        let t0 = now_f64();
        let w = wait_secs(10, || {
            Ok::<_, testbed_tests::Error>(log.count("priority/budget: loaded:")? == loads + 1)
        });
        c.record(
            format!("7 {how}: plugin reloaded (one more 'loaded:' line)"),
            Check::that(w.ok)
                .actual(w.describe())
                .log("priority/budget: loaded"),
        );
        let w = wait_secs(PERIOD * 2, || -> Result<bool> {
            Ok(s.priority(win)? > s.priority(lose)?)
        });
        let (pw, pl) = (s.priority(win).unwrap_or(0), s.priority(lose).unwrap_or(0));
        c.record(
            format!(
                "7 {how}: the account raised while slurmctld was down ranks first within 2 periods"
            ),
            Check::that(w.ok)
                .expected(format!("{winner} job {win} above {loser} job {lose}"))
                .actual(format!(
                    "{:.1} s after the restart (period {PERIOD} s): {pw} vs {pl}",
                    now_f64() - t0
                ))
                .jobs(&[win, lose]),
        );
        s.wait_state(c3, "COMPLETED", 15);
        truth_now(s, &mut j.truth, &[c3, j.r1, j.q1, j.q2])?;
        check_exact(
            c,
            tb,
            &j.truth,
            &format!("7 {how}: no run lost or counted twice across the restart"),
        );
    }
    let stopped = log.count("priority/budget: background thread stopped")?;
    c.record(
        "7 SIGTERM: background thread stopped and joined in fini",
        Check::that(stopped >= 1).actual(format!("{stopped} line(s)")),
    );
    Ok(())
}
