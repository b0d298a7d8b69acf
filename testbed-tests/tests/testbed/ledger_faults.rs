//! Suite `testbed-faults`: the usage ledger when Slurm forgets or reuses jobs
//! (reused job ids, runs lost or forgotten), against a real slurmctld + 2 slurmd x 4 fake GPUs,
//! priority/budget and budgetd, with `MinJobAge=10` (Slurm purges a finished job
//! 10-20 s after its end) and a 1 s plugin period (a complete live set every 12 s).
//!
//! 1. cold restart with budgetd's database kept (`scripts/testbed down`, `up`: no
//!    slurmctld state, job ids start at 1 again): the new jobs reuse the old ids and
//!    get rows of their own (their account, GPUs, Slurm's start), never merged into
//!    the old runs; the old running runs are closed at the last time Slurm was seen
//!    to have them, the old pending one without a charge; `why` shows the new jobs'
//!    own accounts; the old account's usage stops growing;
//! 2. a job that started after slurmctld's last state save, then `kill -9`: slurmctld
//!    restarts from that save (the suite puts back a copy taken just before the
//!    submission, since the 5 s save delay cannot be timed from outside) and does
//!    not know the job; the ledger closes its run within the start..kill span, and
//!    the next job, which gets the same id, is a row of its own;
//! 3. a cancel racing a requeue (`scontrol requeue` and `scancel` back to back):
//!    no run of the job stays open, and the job is charged once for the time it held
//!    its GPUs (Slurm's start to Slurm's end);
//! 4. budgetd killed; meanwhile a running job is cancelled, one completes and a
//!    pending one is cancelled, Slurm purges all three (MinJobAge), and slurmctld
//!    restarts (the plugin's outbox of unacknowledged ends is lost); budgetd back:
//!    every one of them is closed when the complete live set arrives, at the last
//!    time Slurm was seen to have it (never after its real end), the pending one
//!    uncharged, and the account's usage stops growing;
//! 5. a job slurmctld saved pending (held), released: it starts and budgetd stores
//!    the start; `kill -9` before the next save, and slurmctld restarts from the copy
//!    taken while it was pending (as in 2): it has the job pending again, same id,
//!    run 0 and submit time; released again it runs and completes. The ledger keeps
//!    the first run charged (closed at the last complete live set before the kill)
//!    and the second as a row of its own under the same key; a resend after a plain
//!    restart changes nothing; GPU-seconds = what really ran.
//!
//! Folder and port base: `FAULTS_DIR`, `FAULTS_PORT_BASE`.

use anyhow::{Context, Result};
use testbed_tests::checks::{Check, Checks, run_suite, say, sleep_secs, wait_secs};
use testbed_tests::ledger::{self, LedgerRow};
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::{Testbed, TestbedConfig, with_testbed};
use testbed_tests::time::now;

/// priority/budget's period (s): a complete live set every 12 periods.
const PERIOD: u64 = 1;
/// Passes between two complete live sets (`FULL_CHECK_EVERY` in the plugin).
const FULL_EVERY: u64 = 12;
/// slurm.conf MinJobAge for this suite (s).
const MIN_JOB_AGE: u32 = 10;
/// How long a closure may take: one complete live set, a slow pass, a restart.
const CLOSE_WITHIN: u64 = PERIOD * FULL_EVERY + 15;
/// Allowed difference (s) between a ledger time and Slurm's.
const DEVIATION: i64 = 2;

#[test]
#[ignore = "starts a Slurm testbed; run with --ignored (see main.rs)"]
fn suite() {
    run_suite("testbed-faults", |checks| -> Result<()> {
        let mut config = TestbedConfig::from_env(
            "FAULTS_DIR",
            "/tmp/slurm-budget-faults",
            "FAULTS_PORT_BASE",
            20017,
        )?;
        config.nodes = 2;
        config.gpus = 4;
        config.priority = Some("budget".into());
        config.budget_period = PERIOD as u32;
        config.min_job_age = Some(MIN_JOB_AGE);
        config.unset = vec![
            "TESTBED_EXTRA_CONF",
            "TESTBED_NO_BUDGETD",
            "TESTBED_KEEP_STATE",
        ];
        with_testbed(checks, config, scenario)
    });
}

fn scenario(c: &mut Checks, tb: &Testbed) -> Result<()> {
    let api = tb.budgetd();
    for account in ["bio", "filler"] {
        api.create_account(account, None, 100.0)?;
        api.add_member(tb.user(), account)?;
    }
    section_1(c, tb)?;
    section_2(c, tb)?;
    section_3(c, tb)?;
    section_4(c, tb)?;
    section_5(c, tb)?;
    let panics = tb
        .ctld_log()
        .lines(|l| l.contains("priority/budget: panic"))?;
    c.record(
        "end: no panic logged by the plugin",
        Check::that(panics.is_empty()).actual(panics.first().map_or("none", String::as_str)),
    );
    c.record(
        "end: every testbed daemon alive (scripts/testbed status)",
        Check::that(tb.all_daemons_up()),
    );
    Ok(())
}

/// The ledger's rows of `jobs`.
fn rows(tb: &Testbed, jobs: &[JobId]) -> Result<Vec<LedgerRow>> {
    Ok(ledger::rows(&tb.database(), jobs)?)
}

/// One line per row, for check output.
fn describe(rows: &[LedgerRow]) -> String {
    if rows.is_empty() {
        return "no rows".into();
    }
    rows.iter()
        .map(LedgerRow::describe)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Waits (up to `secs`) until `cond` holds for the rows of `jobs`; the last rows.
fn wait_rows(
    tb: &Testbed,
    jobs: &[JobId],
    secs: u64,
    cond: impl Fn(&[LedgerRow]) -> bool,
) -> (bool, Vec<LedgerRow>) {
    let mut last = Vec::new();
    let w = wait_secs(secs, || -> Result<bool> {
        last = rows(tb, jobs)?;
        Ok(cond(&last))
    });
    (w.ok, last)
}

/// The row of `job` with `submit`.
fn row_of(rows: &[LedgerRow], job: JobId, submit: i64) -> Option<&LedgerRow> {
    rows.iter().find(|r| r.job_id == job && r.submit == submit)
}

/// Rows of `job` still pending or running.
fn open_rows(rows: &[LedgerRow]) -> Vec<&LedgerRow> {
    rows.iter().filter(|r| r.open()).collect()
}

/// Slurm's submit time of `job` (what budgetd keys the run by).
fn submit_of(s: &Slurm, job: JobId) -> Result<i64> {
    s.known_job(job)?
        .submit
        .with_context(|| format!("job {job} has no submit time"))
}

/// The raw GPU-seconds budgetd charges `account` over the window.
fn usage_secs(tb: &Testbed, account: &str) -> Result<i64> {
    let hours: f64 = tb
        .budgetd()
        .usage_by_user()?
        .iter()
        .filter(|r| r.account == account)
        .map(|r| r.raw_gpu_hours)
        .sum();
    Ok((hours * 3600.0).round() as i64)
}

/// Waits until budgetd received a complete live set collected at or after `t`.
fn wait_live_set_after(tb: &Testbed, t: i64) -> Option<i64> {
    let db = tb.database();
    let mut last = None;
    wait_secs(CLOSE_WITHIN, || -> Result<bool> {
        last = ledger::live_at(&db)?;
        Ok(last.is_some_and(|at| at >= t))
    });
    last
}

/// The account's usage does not grow across a complete live set (nothing of it is
/// charged as running any more), and equals the GPU-seconds of its ledger rows.
fn check_usage_frozen(c: &mut Checks, tb: &Testbed, name: &str, account: &str) -> Result<()> {
    let before = usage_secs(tb, account)?;
    let t = now();
    let seen = wait_live_set_after(tb, t + 1);
    let after = usage_secs(tb, account)?;
    c.record(
        name,
        Check::that(seen.is_some() && before == after)
            .expected(format!(
                "{account}'s raw GPU-s the same before and after a complete live set"
            ))
            .actual(format!(
                "{before} GPU-s, then {after} GPU-s (live set at {})",
                seen.map_or("-".into(), |t| t.to_string())
            )),
    );
    Ok(())
}

/// Three `bio` jobs: 2 GPUs running `sleep 600`, 1 GPU running `second`, and 1 GPU
/// held pending by `--begin`; records `check` once the two run.
fn two_running_one_pending(
    c: &mut Checks,
    s: &Slurm,
    check: &str,
    second: &str,
) -> Result<[JobId; 3]> {
    let r1 = s.sbatch(&["-A", "bio", "--gres=gpu:2", "--wrap", "sleep 600"])?;
    let r2 = s.sbatch(&["-A", "bio", "--gres=gpu:1", "--wrap", second])?;
    let p = s.sbatch(&[
        "-A",
        "bio",
        "--gres=gpu:1",
        "--begin=now+3600",
        "--wrap",
        "sleep 600",
    ])?;
    let w = wait_secs(20, || s.all_in_state("RUNNING", &[r1, r2]));
    c.record(
        check,
        Check::that(w.ok).actual(w.describe()).jobs(&[r1, r2, p]),
    );
    Ok([r1, r2, p])
}

fn section_1(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 1. cold restart, budgetd's database kept: reused job ids (item 7)");
    let s = tb.slurm();
    let old = two_running_one_pending(c, s, "1 two bio jobs running, one pending", "sleep 600")?;
    let [b1, b2, b3] = old;
    let mut old_submit = Vec::new();
    for id in old {
        old_submit.push(submit_of(s, id)?);
    }
    let (ok, got) = wait_rows(tb, &old, 10, |rs| {
        let running = |j| rs.iter().any(|r| r.job_id == j && r.state == "running");
        running(b1) && running(b2) && rs.iter().any(|r| r.job_id == b3 && r.state == "pending")
    });
    c.record(
        "1 the ledger has them (two running, one pending)",
        Check::that(ok).actual(describe(&got)).jobs(&old),
    );
    // Slurm must have been seen with the running runs in a complete live set: that
    // instant is the end they are closed at.
    let start = got.iter().filter_map(|r| r.start).max().unwrap_or(now());
    let live_before = wait_live_set_after(tb, start);
    c.record(
        "1 budgetd got a complete live set with the running jobs",
        Check::that(live_before.is_some()).actual(format!(
            "live set at {live_before:?}, jobs started by {start}"
        )),
    );
    let live_before = live_before.unwrap_or(start);

    let t_down = now();
    tb.down_and_up()?;
    say(format_args!(
        "   testbed down and up again (cold slurmctld state) in {} s",
        now() - t_down
    ));
    let f1 = s.sbatch(&["-A", "filler", "--gres=gpu:1", "--wrap", "sleep 600"])?;
    let f2 = s.sbatch(&["-A", "filler", "--gres=gpu:3", "--wrap", "sleep 600"])?;
    let f3 = s.sbatch(&[
        "-A",
        "filler",
        "--gres=gpu:2",
        "--begin=now+3600",
        "--wrap",
        "sleep 600",
    ])?;
    let new = [f1, f2, f3];
    c.record(
        "1 the cold slurmctld reuses the old job ids",
        Check::eq(old.to_vec(), new.to_vec()),
    );
    let w = wait_secs(20, || s.all_in_state("RUNNING", &[f1, f2]));
    c.record(
        "1 two new filler jobs running, one pending",
        Check::that(w.ok).actual(w.describe()).jobs(&new),
    );
    let mut fresh = Vec::new();
    for id in new {
        fresh.push(s.known_job(id)?);
    }
    let gpus = [1u32, 3, 2];
    let (_, got) = wait_rows(tb, &old, CLOSE_WITHIN, |rs| {
        let old_closed = old
            .iter()
            .zip(&old_submit)
            .all(|(&j, &sub)| row_of(rs, j, sub).is_some_and(|r| !r.open()));
        let new_there = fresh.iter().all(|f| {
            f.submit.is_some_and(|sub| {
                row_of(rs, f.id, sub).is_some_and(|r| r.start.is_some() || f.state != "RUNNING")
            })
        });
        old_closed && new_there
    });

    // The new jobs: rows of their own, with their own account, GPUs and start.
    let mut bad = Vec::new();
    for (f, g) in fresh.iter().zip(gpus) {
        let row = f.submit.and_then(|sub| row_of(&got, f.id, sub));
        let ok = row.is_some_and(|r| {
            r.account == "filler"
                && r.gpus == g
                && match (f.state.as_str(), f.start, r.start) {
                    ("RUNNING", Some(ss), Some(ls)) => (ss - ls).abs() <= DEVIATION,
                    ("PENDING", _, None) => r.state == "pending",
                    _ => false,
                }
        });
        if !ok {
            bad.push(format!("job {} ({} in Slurm)", f.id, f.state));
        }
    }
    let per_id_rows: Vec<usize> = old
        .iter()
        .map(|&j| got.iter().filter(|r| r.job_id == j).count())
        .collect();
    c.record(
        "1 each reused id: a new row (filler, its GPUs, Slurm's start), the old row kept apart",
        Check::that(bad.is_empty() && per_id_rows == [2, 2, 2])
            .expected("2 rows per id; new rows = Slurm's jobs")
            .actual(format!(
                "{}; rows per id {per_id_rows:?}",
                if bad.is_empty() {
                    describe(&got)
                } else {
                    format!("wrong: {}; rows: {}", bad.join(", "), describe(&got))
                }
            ))
            .jobs(&old),
    );
    // The old runs: closed at the last time Slurm was seen to have them.
    let mut wrong = Vec::new();
    for (&j, &sub) in old.iter().zip(&old_submit).take(2) {
        match row_of(&got, j, sub) {
            Some(r) if !r.open() && r.account == "bio" => {
                let end = r.end.unwrap_or(i64::MAX);
                if end < live_before || end > t_down {
                    wrong.push(format!(
                        "{} ends outside {live_before}..{t_down}",
                        r.describe()
                    ));
                }
            }
            Some(r) => wrong.push(format!("{} still open or merged", r.describe())),
            None => wrong.push(format!("job {j} submit {sub}: old row gone")),
        }
    }
    c.record(
        "1 old running runs closed at the last complete live set before the restart",
        Check::that(wrong.is_empty())
            .expected(format!("ended, end in {live_before}..={t_down}"))
            .actual(if wrong.is_empty() {
                describe(
                    &got[..]
                        .iter()
                        .filter(|r| r.account == "bio")
                        .cloned()
                        .collect::<Vec<_>>(),
                )
            } else {
                wrong.join("; ")
            })
            .jobs(&old),
    );
    let old_pending = row_of(&got, b3, old_submit[2]);
    c.record(
        "1 old pending job closed, never charged",
        Check::that(old_pending.is_some_and(|r| !r.open() && r.gpu_seconds(now()) == 0))
            .actual(old_pending.map_or("no row".into(), LedgerRow::describe))
            .jobs(&[b3]),
    );
    let api = tb.budgetd();
    let mut views = Vec::new();
    let mut ok = true;
    for f in &fresh {
        match api.why(f.id) {
            Ok(w) => {
                let state = format!("{:?}", w.state).to_lowercase();
                ok &= w.account == "filler" && state == f.state.to_lowercase();
                views.push(format!("{} {} {state}", w.job_id, w.account));
            }
            Err(e) => {
                ok = false;
                views.push(format!("{}: {e}", f.id));
            }
        }
    }
    c.record(
        "1 why: the new jobs (running and pending) show their own account",
        Check::that(ok).actual(views.join(", ")).jobs(&new),
    );
    check_usage_frozen(
        c,
        tb,
        "1 bio's usage no longer grows after the restart (old runs not charged on)",
        "bio",
    )?;
    tb.clear_jobs()?;
    Ok(())
}

fn section_2(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 2. a job started after slurmctld's last state save, then kill -9 (item 12)");
    let s = tb.slurm();
    // slurmctld saves a change at most 5 s after it (state_save.c SAVE_MAX_WAIT):
    // after 6 s quiet the copy holds everything before the submission.
    sleep_secs(6.0);
    let copy = tb.dir().join("state-before-submit");
    tb.copy_ctld_state(&copy)?;
    let k = s.sbatch(&["-A", "bio", "--gres=gpu:2", "--wrap", "sleep 600"])?;
    let k_submit = submit_of(s, k)?;
    let ran = s.wait_state(k, "RUNNING", 20);
    let (synced, got) = wait_rows(tb, &[k], 10, |rs| {
        row_of(rs, k, k_submit).is_some_and(|r| r.state == "running")
    });
    c.record(
        "2 the job runs and the ledger has it running",
        Check::that(ran && synced).actual(describe(&got)).jobs(&[k]),
    );
    let start = row_of(&got, k, k_submit).and_then(|r| r.start);
    let k_node = s.job(k)?.map(|j| j.nodes).unwrap_or_default();
    let t_kill = now();
    tb.stop_ctld(true)?;
    tb.restore_ctld_state(&copy)?;
    tb.start_ctld()?;
    c.record(
        "2 slurmctld restarted from the older save does not know the job",
        Check::eq(None, s.job(k)?.map(|j| j.state)).jobs(&[k]),
    );
    let (_, got) = wait_rows(tb, &[k], CLOSE_WITHIN, |rs| {
        row_of(rs, k, k_submit).is_some_and(|r| !r.open())
    });
    let row = row_of(&got, k, k_submit);
    c.record(
        "2 the ledger closes the run Slurm forgot, within its start..kill span",
        Check::that(
            row.is_some_and(|r| {
                !r.open() && r.end.is_some_and(|e| Some(e) >= start && e <= t_kill)
            }),
        )
        .expected(format!("ended, end in {start:?}..={t_kill}"))
        .actual(describe(&got))
        .jobs(&[k]),
    );
    // Slurm kills what the node still runs of the job it forgot (an orphan, reported
    // at the node's next registration), before the id is used again.
    let log = tb.ctld_log();
    let step = format!("StepId={k}.");
    let w = wait_secs(40, || -> Result<bool> {
        Ok(!log
            .lines(|l| l.contains("Orphan") && l.contains(&step))?
            .is_empty())
    });
    c.record(
        "2 slurmctld kills the forgotten job on its node (orphan)",
        Check::that(w.ok).actual(w.describe()).jobs(&[k]),
    );
    // The forgotten id is free again: the next job gets it, and a row of its own.
    // It goes to another node: the one that killed the orphan has revoked the id's
    // credential, and on 24.11 slurmctld kills a new job with that id placed there
    // until the revocation expires ("Killing non-startable batch JobId=...: Job
    // credential revoked", measured on 24.11.5; 22.05.8 starts it).
    let mut args = vec!["-A", "filler", "--gres=gpu:1"];
    if !k_node.is_empty() {
        args.extend(["--exclude", k_node.as_str()]);
    }
    args.extend(["--wrap", "sleep 600"]);
    let n = s.sbatch(&args)?;
    c.record("2 the next job reuses the forgotten id", Check::eq(k, n));
    s.wait_state(n, "RUNNING", 20);
    let job = s.known_job(n)?;
    let n_submit = job.submit.unwrap_or(0);
    let (_, got) = wait_rows(tb, &[n], 10, |rs| {
        row_of(rs, n, n_submit).is_some_and(|r| r.state == "running")
    });
    let new_row = row_of(&got, n, n_submit);
    let old_row = row_of(&got, k, k_submit);
    c.record(
        "2 the job with the reused id is a row of its own; the old one stays closed",
        Check::that(
            new_row.is_some_and(|r| {
                r.account == "filler"
                    && r.gpus == 1
                    && r.start
                        .zip(job.start)
                        .is_some_and(|(a, b)| (a - b).abs() <= DEVIATION)
            }) && old_row.is_some_and(|r| !r.open() && r.account == "bio"),
        )
        .actual(describe(&got))
        .jobs(&[n]),
    );
    tb.clear_jobs()?;
    Ok(())
}

fn section_3(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 3. a cancel racing a requeue (item 12)");
    let s = tb.slurm();
    let q = s.sbatch(&[
        "-A",
        "bio",
        "--gres=gpu:2",
        "--requeue",
        "--wrap",
        "sleep 600",
    ])?;
    let ran = s.wait_state(q, "RUNNING", 20);
    let (synced, _) = wait_rows(tb, &[q], 10, |rs| rs.iter().any(|r| r.state == "running"));
    c.record(
        "3 the requeueable job runs and the ledger has it running",
        Check::that(ran && synced).jobs(&[q]),
    );
    let start = s
        .known_job(q)?
        .start
        .with_context(|| format!("job {q} runs without a start"))?;
    sleep_secs(3.0); // some GPU time to charge
    // Both requests within milliseconds, from one shell.
    let id = q.to_string();
    let out = s.output(
        "sh",
        &["-c", "scontrol requeue \"$0\"; scancel \"$0\"", id.as_str()],
    )?;
    let t_race = now();
    let w = wait_secs(15, || -> Result<bool> {
        Ok(s.job(q)?.is_none_or(|j| j.state == "CANCELLED"))
    });
    let job = s.job(q)?;
    c.record(
        "3 requeue and cancel back to back: Slurm ends the job cancelled",
        Check::that(w.ok)
            .actual(format!(
                "{} ({})",
                job.as_ref().map_or("purged".into(), |j| format!(
                    "{} restarts={} start={:?} end={:?}",
                    j.state, j.restarts, j.start, j.end
                )),
                String::from_utf8_lossy(&out.stderr).trim()
            ))
            .jobs(&[q]),
    );
    // The GPUs were held from the start to the requeue or the cancel, whichever
    // Slurm recorded as the end (never later than the race itself).
    let end = job
        .as_ref()
        .and_then(|j| j.end)
        .unwrap_or(t_race)
        .min(t_race);
    let want = 2 * (end - start);
    let (closed, got) = wait_rows(tb, &[q], CLOSE_WITHIN, |rs| open_rows(rs).is_empty());
    c.record(
        "3 no run of the job stays open in the ledger",
        Check::that(closed).actual(describe(&got)).jobs(&[q]),
    );
    let charged: i64 = got.iter().map(|r| r.gpu_seconds(now())).sum();
    c.record(
        "3 the job is charged once: ledger GPU-s = Slurm's start..end x GPUs",
        Check::within(charged - want, -2 * 2 * DEVIATION, 2 * 2 * DEVIATION)
            .actual(format!(
                "{charged} GPU-s in the ledger vs {want} from Slurm ({start}..{end}); {}",
                describe(&got)
            ))
            .jobs(&[q]),
    );
    tb.clear_jobs()?;
    Ok(())
}

fn section_4(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 4. budgetd down longer than MinJobAge, then slurmctld restarted (item 12)");
    let s = tb.slurm();
    // The second runs past the kill below (which waits for a live set, up to 13 s).
    let jobs = two_running_one_pending(c, s, "4 two jobs running, one pending", "sleep 25")?;
    let [a1, a2, p1] = jobs;
    let (ok, got) = wait_rows(tb, &jobs, 10, |rs| {
        let has = |j, st: &str| rs.iter().any(|r| r.job_id == j && r.state == st);
        has(a1, "running") && has(a2, "running") && has(p1, "pending")
    });
    c.record(
        "4 the ledger has them",
        Check::that(ok).actual(describe(&got)).jobs(&jobs),
    );
    let start = got.iter().filter_map(|r| r.start).max().unwrap_or(now());
    let live_before = wait_live_set_after(tb, start).unwrap_or(start);

    let t_kill = now();
    let pid = tb.signal_budgetd("KILL")?;
    Testbed::wait_gone(pid, std::time::Duration::from_secs(5));
    s.cancel(&[a1, p1])?;
    // Each end as Slurm records it, read while Slurm still has the job (a1 may be
    // purged before a2 completes).
    let mut ends: [Option<i64>; 2] = [None, None];
    let w = wait_secs(40, || -> Result<bool> {
        for (slot, (id, state)) in ends.iter_mut().zip([(a1, "CANCELLED"), (a2, "COMPLETED")]) {
            if slot.is_none()
                && let Some(j) = s.job(id)?
                && j.state == state
            {
                *slot = j.end;
            }
        }
        Ok(ends.iter().all(Option::is_some))
    });
    c.record(
        "4 while budgetd is down: one job cancelled, one completed, the pending one cancelled",
        Check::that(w.ok)
            .actual(format!("ends {ends:?}; {}", w.describe()))
            .jobs(&jobs),
    );
    let ends: Vec<i64> = ends.iter().map(|e| e.unwrap_or(i64::MIN)).collect();
    // Slurm purges them MinJobAge after their end, in a purge pass every
    // max(10, MinJobAge) s.
    let w = wait_secs(u64::from(MIN_JOB_AGE) * 2 + 20, || -> Result<bool> {
        for id in jobs {
            if s.job(id)?.is_some() {
                return Ok(false);
            }
        }
        Ok(true)
    });
    c.record(
        "4 Slurm purged all three (MinJobAge) while budgetd is down",
        Check::that(w.ok).actual(w.describe()).jobs(&jobs),
    );
    // The plugin's outbox (ends not yet acknowledged) lives in slurmctld's memory.
    tb.stop_ctld(false)?;
    tb.start_ctld()?;
    tb.start_budgetd()?;
    let (closed, got) = wait_rows(tb, &jobs, CLOSE_WITHIN, |rs| open_rows(rs).is_empty());
    c.record(
        "4 budgetd back: every run Slurm purged meanwhile is closed",
        Check::that(closed).actual(describe(&got)).jobs(&jobs),
    );
    let mut wrong = Vec::new();
    for (id, real_end) in [a1, a2].iter().zip(&ends) {
        let r = got.iter().find(|r| r.job_id == *id);
        let ok = r.is_some_and(|r| {
            r.end
                .is_some_and(|e| e >= live_before.min(t_kill) && e <= t_kill && e <= *real_end)
        });
        if !ok {
            wrong.push(format!(
                "job {id} (ended {real_end} in Slurm): {}",
                r.map_or("no row".into(), LedgerRow::describe)
            ));
        }
    }
    c.record(
        "4 closed at the last complete live set before budgetd died (never after the real end)",
        Check::that(wrong.is_empty())
            .expected(format!("end in {live_before}..={t_kill}"))
            .actual(if wrong.is_empty() {
                describe(&got)
            } else {
                wrong.join("; ")
            })
            .jobs(&jobs),
    );
    let p = got.iter().find(|r| r.job_id == p1);
    c.record(
        "4 the pending job cancelled meanwhile: not pending, never charged",
        Check::that(p.is_some_and(|r| !r.open() && r.gpu_seconds(now()) == 0))
            .actual(p.map_or("no row".into(), LedgerRow::describe))
            .jobs(&[p1]),
    );
    check_usage_frozen(
        c,
        tb,
        "4 bio's usage no longer grows (nothing of it charged as running)",
        "bio",
    )?;
    Ok(())
}

fn section_5(c: &mut Checks, tb: &Testbed) -> Result<()> {
    say("== 5. a job saved pending, started, then kill -9 before the save: it runs again");
    let s = tb.slurm();
    // Held, so that slurmctld's save has it pending and the start comes when we say.
    let j = s.sbatch(&["-A", "bio", "--gres=gpu:2", "--hold", "--wrap", "sleep 30"])?;
    let submit = submit_of(s, j)?;
    let (synced, got) = wait_rows(tb, &[j], 10, |rs| {
        row_of(rs, j, submit).is_some_and(|r| r.state == "pending")
    });
    c.record(
        "5 the held job is pending in the ledger",
        Check::that(synced).actual(describe(&got)).jobs(&[j]),
    );
    // slurmctld saves a change at most 5 s after it: the copy has the job pending.
    sleep_secs(6.0);
    let copy = tb.dir().join("state-job-pending");
    tb.copy_ctld_state(&copy)?;
    s.run("scontrol", &["release", &j.to_string()])?;
    let ran = s.wait_state(j, "RUNNING", 20);
    let first_start = s.known_job(j)?.start;
    let (synced, got) = wait_rows(tb, &[j], 10, |rs| {
        rs.iter().any(|r| r.job_id == j && r.state == "running")
    });
    c.record(
        "5 released, it runs and the ledger has it running",
        Check::that(ran && synced).actual(describe(&got)).jobs(&[j]),
    );
    // budgetd sees it running in a complete live set: the last time it is known alive.
    let live_before = wait_live_set_after(tb, first_start.unwrap_or(now()));
    sleep_secs(2.0);
    let t_kill = now();
    tb.stop_ctld(true)?;
    tb.restore_ctld_state(&copy)?;
    tb.start_ctld()?;
    let back = s.job(j)?;
    c.record(
        "5 slurmctld restarted from the older save has the job pending again (same submit, run 0)",
        Check::that(
            back.as_ref().is_some_and(|b| {
                b.state == "PENDING" && b.restarts == 0 && b.submit == Some(submit)
            }),
        )
        .actual(back.as_ref().map_or("unknown".into(), |b| {
            format!("{} restarts={} submit={:?}", b.state, b.restarts, b.submit)
        }))
        .jobs(&[j]),
    );
    // The lost run is closed once budgetd hears of the job pending again.
    let closed_first = |rs: &[LedgerRow]| {
        rs.iter()
            .any(|r| r.job_id == j && r.start == first_start && !r.open())
    };
    let (ok, got) = wait_rows(tb, &[j], CLOSE_WITHIN, |rs| {
        closed_first(rs) && rs.iter().any(|r| r.job_id == j && r.state == "pending")
    });
    c.record(
        "5 the lost run is closed, the job pending again is a row of its own",
        Check::that(ok).actual(describe(&got)).jobs(&[j]),
    );
    s.run("scontrol", &["release", &j.to_string()])?;
    let ran = s.wait_state(j, "RUNNING", 30);
    let second_start = s.known_job(j)?.start;
    let mut second_end = None;
    let w = wait_secs(60, || -> Result<bool> {
        if let Some(job) = s.job(j)?
            && job.state == "COMPLETED"
        {
            second_end = job.end;
            return Ok(true);
        }
        Ok(false)
    });
    c.record(
        "5 released again, it runs again and completes",
        Check::that(ran && w.ok)
            .actual(format!(
                "start {second_start:?} end {second_end:?}; {}",
                w.describe()
            ))
            .jobs(&[j]),
    );
    let (_, got) = wait_rows(tb, &[j], CLOSE_WITHIN, |rs| {
        closed_first(rs)
            && rs
                .iter()
                .any(|r| r.job_id == j && r.start == second_start && r.state == "ended")
    });
    check_lost_run(
        c,
        &got,
        (j, submit),
        (first_start, live_before, t_kill),
        (second_start, second_end),
    );
    // A plain restart makes the plugin resend the job (it forgot what budgetd
    // acknowledged): nothing changes.
    tb.restart_ctld()?;
    let _ = wait_live_set_after(tb, now());
    let again = rows(tb, &[j])?;
    c.record(
        "5 a resend after a plain restart changes nothing (idempotent)",
        Check::eq(describe(&got), describe(&again)).jobs(&[j]),
    );
    check_usage_frozen(
        c,
        tb,
        "5 bio's usage no longer grows (neither run charged as running)",
        "bio",
    )?;
    tb.clear_jobs()?;
    Ok(())
}

/// Section 5's ledger rows of job `j`: the lost first run charged within
/// `[live_before, t_kill]`, the second its own row (Slurm's start and end), and the
/// job charged what really ran.
fn check_lost_run(
    c: &mut Checks,
    got: &[LedgerRow],
    (j, submit): (JobId, i64),
    (first_start, live_before, t_kill): (Option<i64>, Option<i64>, i64),
    (second_start, second_end): (Option<i64>, Option<i64>),
) {
    let keyed: Vec<&LedgerRow> = got
        .iter()
        .filter(|r| r.job_id == j && r.run == 0 && r.submit == submit)
        .collect();
    let first = keyed.iter().find(|r| r.start == first_start);
    let lo = live_before.unwrap_or(i64::MAX);
    c.record(
        "5 the lost run stays charged: closed at the last live set before the kill",
        Check::that(first.is_some_and(|r| {
            r.rerun == 0
                && !r.open()
                && r.end.is_some_and(|e| e >= lo && e <= t_kill)
                && r.gpu_seconds(0) > 0
        }))
        .expected(format!(
            "start {first_start:?}, ended in {live_before:?}..={t_kill}"
        ))
        .actual(describe(got))
        .jobs(&[j]),
    );
    let second = keyed
        .iter()
        .find(|r| r.start.is_some() && r.start != first_start);
    let near =
        |a: Option<i64>, b: Option<i64>| a.zip(b).is_some_and(|(a, b)| (a - b).abs() <= DEVIATION);
    c.record(
        "5 the second run is a row of its own (same key), Slurm's start and end",
        Check::that(
            keyed.len() == 2
                && second.is_some_and(|r| {
                    r.rerun == 1
                        && r.state == "ended"
                        && near(r.start, second_start)
                        && near(r.end, second_end)
                }),
        )
        .expected(format!(
            "2 rows of {j}:0@{submit}; the second (rerun 1) {second_start:?}..{second_end:?}"
        ))
        .actual(describe(got))
        .jobs(&[j]),
    );
    let charged: i64 = got.iter().map(|r| r.gpu_seconds(now())).sum();
    let ran_first = first_start.map_or(0, |s| 2 * (t_kill - s));
    let ran_second = match (second_start, second_end) {
        (Some(a), Some(b)) => 2 * (b - a),
        _ => 0,
    };
    let from_live = first_start.zip(live_before).map_or(0, |(s, l)| 2 * (l - s));
    c.record(
        "5 the job is charged what ran: the second run exactly, the first up to the kill",
        Check::that(
            charged >= ran_second + from_live - 2 * 2 * DEVIATION
                && charged <= ran_second + ran_first + 2 * 2 * DEVIATION,
        )
        .expected(format!(
            "{} ..= {} GPU-s",
            ran_second + from_live,
            ran_second + ran_first
        ))
        .actual(format!("{charged} GPU-s; {}", describe(got)))
        .jobs(&[j]),
    );
}
