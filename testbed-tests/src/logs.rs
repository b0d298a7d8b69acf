//! Reading a daemon's log file (`slurmctld.log`, `budgetd.log`): lines that match,
//! how many, the time stamp of the first one, and the lines about given jobs that a
//! failed check prints.
//!
//! The log is read whole on every call: the testbed's logs stay small (a few MB), and
//! a fresh read never misses a line written between two calls.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::time::log_stamp;

/// One log file.
#[derive(Debug, Clone)]
pub struct LogFile {
    path: PathBuf,
}

impl LogFile {
    /// The log at `path` (it need not exist yet).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        LogFile { path: path.into() }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The whole file (invalid UTF-8 replaced); empty while it does not exist.
    pub fn text(&self) -> Result<String> {
        match std::fs::read(&self.path) {
            Ok(bytes) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
            Err(e) => Err(Error::file(&self.path, e)),
        }
    }

    /// Lines for which `matches` holds.
    pub fn lines(&self, matches: impl Fn(&str) -> bool) -> Result<Vec<String>> {
        Ok(self
            .text()?
            .lines()
            .filter(|l| matches(l))
            .map(str::to_string)
            .collect())
    }

    /// How many lines contain `needle`.
    pub fn count(&self, needle: &str) -> Result<usize> {
        Ok(self.text()?.lines().filter(|l| l.contains(needle)).count())
    }

    /// Whether some line contains `needle`.
    pub fn contains(&self, needle: &str) -> Result<bool> {
        Ok(self.count(needle)? > 0)
    }

    /// Whether some line contains every one of `parts`, in this order (`grep 'a .* b'`).
    pub fn contains_in_order(&self, parts: &[&str]) -> Result<bool> {
        Ok(self.text()?.lines().any(|l| in_order(l, parts)))
    }

    /// Time stamp (Unix seconds) of the first line for which `matches` holds.
    pub fn first_time(&self, matches: impl Fn(&str) -> bool) -> Result<Option<i64>> {
        Ok(self
            .text()?
            .lines()
            .find(|l| matches(l))
            .and_then(log_stamp))
    }

    /// The last `limit` lines that name one of `jobs` (`JobId=N`, Slurm's `%pJ`),
    /// contain one of `needles`, or report a problem of slurm-budget (an error or panic
    /// of a `*/budget` plugin, a budgetd warning): the context a failed check prints.
    pub fn context(&self, jobs: &[u32], needles: &[String], limit: usize) -> Vec<String> {
        let Ok(text) = self.text() else {
            return Vec::new();
        };
        let relevant = |l: &str| {
            jobs.iter().any(|j| names_job(l, *j))
                || needles.iter().any(|n| l.contains(n.as_str()))
                || (l.contains("/budget") && (l.contains("error") || l.contains("panic")))
                || l.contains(" WARN ")
                || l.contains(" ERROR ")
        };
        let mut hits: Vec<&str> = text.lines().filter(|l| relevant(l)).collect();
        let skip = hits.len().saturating_sub(limit);
        hits.drain(..skip);
        hits.into_iter().map(str::to_string).collect()
    }
}

/// Whether `line` contains every one of `parts`, each after the previous one.
pub fn in_order(line: &str, parts: &[&str]) -> bool {
    let mut rest = line;
    for p in parts {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => return false,
        }
    }
    true
}

/// Whether `line` names job `job` as Slurm prints it (`JobId=N` not followed by a
/// digit, so job 12 does not match `JobId=123`).
pub fn names_job(line: &str, job: u32) -> bool {
    let needle = format!("JobId={job}");
    line.match_indices(&needle).any(|(i, _)| {
        !line[i + needle.len()..]
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit())
    })
}

/// What `preempt/budget` logs once per load when it read the window's rebalancing
/// preemptions back from budgetd ("rebalance history: N preemption(s) ...").
pub const SEEDED_HISTORY: &str = "rebalance history: ";

/// The count N of a [`SEEDED_HISTORY`] line, if `line` is one.
pub fn seeded_history(line: &str) -> Option<usize> {
    line.split(SEEDED_HISTORY)
        .nth(1)?
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeded_history_reads_the_count() {
        assert_eq!(
            super::seeded_history(
                "[t] preempt/budget: rebalance history: 3 preemption(s) of the last window"
            ),
            Some(3)
        );
        assert_eq!(super::seeded_history("rebalance: job 1 requeued"), None);
    }

    use super::*;

    #[test]
    fn order_of_parts() {
        assert!(in_order(
            "budget snapshot 3 loaded: 4 ranked",
            &["budget snapshot ", " loaded"]
        ));
        assert!(!in_order(
            "loaded budget snapshot",
            &["budget snapshot", "loaded"]
        ));
        assert!(in_order("anything", &[]));
    }

    #[test]
    fn job_names() {
        assert!(names_job("[t] Requeuing JobId=12", 12));
        assert!(names_job("[t] preempted JobId=12 has been requeued", 12));
        assert!(!names_job("[t] Requeuing JobId=123", 12));
        assert!(names_job("JobId=123 JobId=12 x", 12));
        assert!(!names_job("job 12", 12));
    }

    #[test]
    fn reads_and_times() {
        let dir = std::env::temp_dir().join(format!("testbed-tests-logs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("slurmctld.log");
        let log = LogFile::new(&path);
        assert_eq!(log.count("x").unwrap(), 0, "a missing log is empty");
        std::fs::write(
            &path,
            "[2026-12-01T20:06:02.100+00:00] Requeuing JobId=123\n\
             [2026-12-01T20:06:05.900+00:00] Requeuing JobId=12\n\
             [2026-12-01T20:06:07.000+00:00] priority/budget: loaded: x\n",
        )
        .unwrap();
        assert_eq!(
            log.first_time(|l| l.ends_with("Requeuing JobId=12"))
                .unwrap(),
            Some(1_796_155_565)
        );
        assert_eq!(log.count("Requeuing").unwrap(), 2);
        assert!(
            log.contains_in_order(&["priority/budget", "loaded:"])
                .unwrap()
        );
        let ctx = log.context(&[12], &["loaded".to_string()], 1);
        assert_eq!(
            ctx,
            vec!["[2026-12-01T20:06:07.000+00:00] priority/budget: loaded: x"]
        );
        let ctx = log.context(&[12], &[], 5);
        assert_eq!(ctx.len(), 1);
        // A plugin's error is context for any failure.
        std::fs::write(
            &path,
            "[t] error: Could not open job state file\n[t] error: preempt/budget: x\n",
        )
        .unwrap();
        assert_eq!(
            log.context(&[], &[], 5),
            vec!["[t] error: preempt/budget: x"]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
