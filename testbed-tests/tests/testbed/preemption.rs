//! What the suites that watch a preemption happen share: 2-GPU jobs on the
//! 2 x 2 GPU testbed, waiting for a preemptor to start while its victims are
//! protected, and budgetd's record of the preemption. Used by `contract` and
//! `partition_tier`.

use anyhow::Result;
use testbed_tests::api::Budgetd;
use testbed_tests::checks::{Check, Checks, sleep_secs, wait_secs};
use testbed_tests::slurm::{JobId, Slurm};
use testbed_tests::testbed::Testbed;
use testbed_tests::time::now;

/// A job's start, 0 when unknown (the shell's `epoch` of `Unknown`); an error
/// once Slurm forgot the job.
pub fn start_of(s: &Slurm, id: JobId) -> Result<i64> {
    Ok(s.known_job(id)?.start.unwrap_or(0))
}

/// Submits a 2-GPU job of `account` that sleeps `sleep_for` seconds, with
/// `comment` as `--comment` and `extra` sbatch options.
pub fn sbatch_2gpu(
    s: &Slurm,
    account: &str,
    comment: &str,
    extra: &[&str],
    sleep_for: u32,
) -> Result<JobId> {
    let wrap = format!("sleep {sleep_for}");
    let mut args = vec!["-A", account, "--gres=gpu:2", "--comment", comment];
    args.extend_from_slice(extra);
    args.extend_from_slice(&["--wrap", &wrap]);
    Ok(s.sbatch(&args)?)
}

pub fn both_running(s: &Slurm, a: JobId, b: JobId) -> Result<bool> {
    Ok(s.all_in_state("RUNNING", &[a, b])?)
}

/// Polls every 0.5 s until `job` runs or `deadline` (Unix s) has passed: its start
/// (0 when it did not start). `watch(now)` runs on every poll while it waits.
pub fn wait_start(
    s: &Slurm,
    job: JobId,
    deadline: i64,
    mut watch: impl FnMut(i64) -> Result<()>,
) -> Result<i64> {
    while now() < deadline {
        if s.state(job)? == "RUNNING" {
            return start_of(s, job);
        }
        watch(now())?;
        sleep_secs(0.5);
    }
    Ok(0)
}

/// Waits (until `deadline`) for `preemptor` to start while both `victims` run; its
/// start (0 if it did not start), and whether a victim stopped running before
/// `window_end` (a second of polling slack).
pub fn wait_preemption(
    s: &Slurm,
    preemptor: JobId,
    victims: [JobId; 2],
    window_end: i64,
    deadline: i64,
) -> Result<(i64, bool)> {
    let mut early = false;
    let start = wait_start(s, preemptor, deadline, |t| {
        // Never before the windows end: both victims still running while protected.
        if t < window_end - 1 && !both_running(s, victims[0], victims[1])? {
            early = true;
        }
        Ok(())
    })?;
    Ok((start, early))
}

/// budgetd holds the preemption of `victim` by `preemptor` for `reason`, reported by
/// the plugin, with GPU-hours > 0.
fn recorded(api: &Budgetd, victim: JobId, preemptor: JobId, reason: &str) -> Result<bool> {
    Ok(api.preemptions()?.iter().any(|r| {
        r.job_id == victim
            && r.preemptor == Some(preemptor)
            && r.reason == reason
            && r.source == "plugin"
            && r.gpu_hours > 0.0
    }))
}

/// Waits up to 20 s for `budgetctl why` on the requeued `victim` to name the
/// rule that took its run (its "preempted at ... by job P" line holding
/// `words`, once the plugin's sync told budgetd of the requeue, a period or two
/// later), and records the check as `name`.
pub fn check_why_took_run(
    c: &mut Checks,
    tb: &Testbed,
    name: &str,
    victim: JobId,
    preemptor: JobId,
    words: &str,
) -> Result<()> {
    let mut out = String::new();
    let w = wait_secs(20, || -> Result<bool> {
        let (ok, text) = tb.run_budgetctl(&[], &["why", &victim.to_string()])?;
        out = text;
        Ok(ok
            && out.lines().any(|l| {
                l.contains("preempted at ")
                    && l.contains(&format!("by job {preemptor}"))
                    && l.contains(words)
            }))
    });
    let line = out
        .lines()
        .find(|l| l.contains("preempted at "))
        .unwrap_or("");
    c.record(
        name,
        Check::that(w.ok)
            .expected(format!(
                "'run 0 preempted at ... by job {preemptor} (...) ({words}...)'"
            ))
            .actual(if line.is_empty() { out.as_str() } else { line }),
    );
    Ok(())
}

/// Waits up to 20 s for budgetd to hold the preemption of `victim` by
/// `preemptor` for `reason` ([`recorded`]), and records the check as `name`.
pub fn check_recorded(
    c: &mut Checks,
    api: &Budgetd,
    name: impl std::fmt::Display,
    victim: JobId,
    preemptor: JobId,
    reason: &str,
) {
    let w = wait_secs(20, || recorded(api, victim, preemptor, reason));
    c.record(
        name,
        Check::that(w.ok)
            .expected(format!(
                "a row: victim {victim}, preemptor {preemptor}, reason {reason}, source plugin, GPU-hours > 0"
            ))
            .actual(w.describe())
            .jobs(&[victim, preemptor])
            .log("preempt/budget"),
    );
}
