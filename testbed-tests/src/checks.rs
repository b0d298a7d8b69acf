//! Named checks and their report.
//!
//! A suite is one scenario on one testbed: its checks are steps that build on each
//! other, so a failed check is recorded and the scenario goes on (like the shell
//! suites did), and the suite's test fails at the end. Each check prints one line
//! (`ok` / `FAIL` and its name, with the measured value); a failed one adds what was
//! expected, what was seen, and the log lines about the jobs it names. Each suite ends
//! with `<suite>: N passed, M failed`, the line `scripts/test` adds up.
//!
//! The lines go straight to the process's standard output, not through `println!`,
//! which libtest captures until a test ends: a suite runs for minutes and its
//! progress must show while it runs.

use std::fmt::Display;
use std::io::Write;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::logs::LogFile;
use crate::slurm::JobId;
// Polling lives in `wait.rs` (Slurm's commands poll too); the suites import it from here.
pub use crate::wait::{POLL, Waited, wait_secs, wait_until};

/// Log lines printed per log file under a failed check.
const CONTEXT_LINES: usize = 12;

/// Writes one line to the process's standard output at once.
pub fn say(line: impl Display) {
    // This crate's own unit tests record checks too: their lines stay captured, so a
    // test's "x: 1 passed, 1 failed" never reaches the totals scripts/test adds up.
    if cfg!(test) {
        println!("{line}");
        return;
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The outcome of one check, with what it saw.
#[derive(Debug, Clone, Default)]
#[must_use = "record it with Checks::record"]
pub struct Check {
    ok: bool,
    expected: Option<String>,
    actual: Option<String>,
    jobs: Vec<JobId>,
    needles: Vec<String>,
}

impl Check {
    /// Passes when `ok`.
    pub fn that(ok: bool) -> Check {
        Check {
            ok,
            ..Check::default()
        }
    }

    /// Passes when `expected == actual`.
    pub fn eq<T: PartialEq + std::fmt::Debug>(expected: T, actual: T) -> Check {
        Check::that(expected == actual)
            .expected(format!("{expected:?}"))
            .actual(format!("{actual:?}"))
    }

    /// Passes when `lo <= value <= hi`.
    pub fn within(value: i64, lo: i64, hi: i64) -> Check {
        Check::that(lo <= value && value <= hi)
            .expected(format!("{lo}..={hi}"))
            .actual(value)
    }

    /// What the check wanted (printed when it fails).
    pub fn expected(mut self, e: impl Display) -> Check {
        self.expected = Some(e.to_string());
        self
    }

    /// What it saw (printed always).
    pub fn actual(mut self, a: impl Display) -> Check {
        self.actual = Some(a.to_string());
        self
    }

    /// Jobs whose log lines a failure prints.
    pub fn jobs(mut self, jobs: &[JobId]) -> Check {
        self.jobs.extend_from_slice(jobs);
        self
    }

    /// A text whose log lines a failure prints.
    pub fn log(mut self, needle: impl Into<String>) -> Check {
        self.needles.push(needle.into());
        self
    }

    /// Whether it passed.
    pub fn passed(&self) -> bool {
        self.ok
    }
}

/// The checks of one suite.
#[derive(Debug)]
pub struct Checks {
    suite: String,
    passed: usize,
    failed: Vec<String>,
    /// Each failed check's name with what it saw, cut short: repeated at the end of
    /// the suite and in its panic, the part of a CI log that is kept.
    failed_details: Vec<String>,
    logs: Vec<LogFile>,
}

impl Checks {
    /// No checks yet for `suite`.
    pub fn new(suite: &str) -> Checks {
        Checks {
            suite: suite.to_string(),
            passed: 0,
            failed: Vec::new(),
            failed_details: Vec::new(),
            logs: Vec::new(),
        }
    }

    /// Logs whose lines about a failed check's jobs are printed under it.
    pub fn watch_logs(&mut self, logs: Vec<LogFile>) {
        self.logs = logs;
    }

    /// Records check `name`; true when it passed.
    pub fn record(&mut self, name: impl Display, check: Check) -> bool {
        let name = name.to_string();
        if check.ok {
            self.passed += 1;
            match &check.actual {
                Some(a) => say(format_args!("  ok    {name}: {a}")),
                None => say(format_args!("  ok    {name}")),
            }
            return true;
        }
        say(format_args!("  FAIL  {name}"));
        if let Some(e) = &check.expected {
            say(format_args!("          expected: {e}"));
        }
        if let Some(a) = &check.actual {
            say(format_args!("          actual:   {a}"));
        }
        for log in &self.logs {
            let lines = log.context(&check.jobs, &check.needles, CONTEXT_LINES);
            if lines.is_empty() {
                continue;
            }
            say(format_args!("          {}:", log.path().display()));
            for l in lines {
                say(format_args!("            {l}"));
            }
        }
        let mut detail = name.clone();
        if let Some(a) = &check.actual {
            detail.push_str(" -- ");
            detail.push_str(&cut(a, DETAIL_CHARS));
        }
        self.failed_details.push(detail);
        self.failed.push(name);
        false
    }

    /// Each failed check with what it saw (cut to [`DETAIL_CHARS`]).
    pub fn failed_details(&self) -> &[String] {
        &self.failed_details
    }

    /// Records an error that ended the scenario early.
    pub fn abort(&mut self, error: impl Display) {
        let _ = self.record(
            "scenario ran to its end",
            Check::that(false).actual(format!("stopped by an error: {error}")),
        );
    }

    /// Checks passed so far.
    pub fn passed(&self) -> usize {
        self.passed
    }

    /// Names of the failed checks.
    pub fn failed(&self) -> &[String] {
        &self.failed
    }

    /// The summary line `scripts/test` adds up.
    pub fn summary(&self) -> String {
        format!(
            "{}: {} passed, {} failed",
            self.suite,
            self.passed,
            self.failed.len()
        )
    }
}

/// How much of a failed check's observation is repeated at the end of a suite.
pub const DETAIL_CHARS: usize = 600;

/// `s` cut to at most `max` characters (on a char boundary), marked when cut.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}...", &s[..i]),
        None => s.to_string(),
    }
}

/// Sleeps `secs` seconds.
pub fn sleep_secs(secs: f64) {
    std::thread::sleep(Duration::from_secs_f64(secs));
}

/// One suite at a time: every suite starts its own testbed, and the machine has room
/// for one (libtest runs tests on parallel threads unless told otherwise).
static ONE_SUITE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Runs scenario `body` as suite `suite`: its checks, the summary line, its wall
/// time; panics (fails the test) when a check failed or the scenario stopped early.
pub fn run_suite<E: Display>(suite: &str, body: impl FnOnce(&mut Checks) -> Result<(), E>) {
    let _one = ONE_SUITE_AT_A_TIME
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    let t0 = Instant::now();
    say(format_args!("== suite {suite}"));
    let mut checks = Checks::new(suite);
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| body(&mut checks)));
    match outcome {
        Ok(Ok(())) => {}
        Ok(Err(e)) => checks.abort(format_args!("{e:#}")),
        Err(panic) => {
            let msg = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into());
            checks.abort(format_args!("panic: {msg}"));
        }
    }
    say("");
    say(format_args!(
        "{suite}: ran in {:.0} s",
        t0.elapsed().as_secs_f64()
    ));
    for d in checks.failed_details() {
        say(format_args!("  FAILED {d}"));
    }
    say(checks.summary());
    if !checks.failed().is_empty() {
        panic!(
            "{suite}: {} check(s) failed: {}",
            checks.failed().len(),
            checks.failed_details().join(" | ")
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn details_are_cut_on_a_char_boundary() {
        assert_eq!(cut("abc", 3), "abc");
        assert_eq!(cut("abcd", 3), "abc...");
        assert_eq!(cut("ééé", 2), "éé...");
    }

    #[test]
    fn counts_and_summary() {
        let mut c = Checks::new("testbed-x");
        assert!(c.record("a", Check::that(true)));
        assert!(c.record("b", Check::within(3, 0, 5)));
        assert!(!c.record("c", Check::eq(1, 2)));
        assert!(!c.record("d", Check::within(6, 0, 5)));
        assert_eq!(c.summary(), "testbed-x: 2 passed, 2 failed");
        assert_eq!(c.failed(), ["c", "d"]);
    }

    #[test]
    fn a_failing_suite_fails_its_test() {
        let r = std::panic::catch_unwind(|| {
            run_suite("testbed-y", |c| -> Result<(), String> {
                c.record("fine", Check::that(true));
                Err("testbed did not come up".into())
            })
        });
        assert!(r.is_err());
        let r = std::panic::catch_unwind(|| {
            run_suite("testbed-z", |_| -> Result<(), String> { Ok(()) })
        });
        assert!(r.is_ok());
    }
}
