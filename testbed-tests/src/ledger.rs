//! Usage exactness: the runs Slurm reports ([`Truth`], from its own start and end
//! times) against budgetd's run ledger, read read-only from its SQLite file (no API
//! lists every run of a job), compared run by run ([`Truth::compare`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use rusqlite::{Connection, OpenFlags};

use crate::error::{Error, Result};
use crate::slurm::{Job, JobId};

/// Largest difference (s) allowed between a ledger time and Slurm's.
pub const MAX_DEVIATION_SECS: i64 = 2;

/// One run in budgetd's ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRun {
    pub job_id: JobId,
    pub run: u32,
    pub gpus: u32,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// `pending`, `running`, `ended`, `requeued`.
    pub state: String,
}

/// The ledger's runs of `jobs` that started (or are not pending), by job and run.
pub fn runs(db: &Path, jobs: &[JobId]) -> Result<Vec<LedgerRun>> {
    let mut out: Vec<LedgerRun> = rows(db, jobs)?
        .into_iter()
        .filter(|r| r.start.is_some() || r.state != "pending")
        .map(|r| LedgerRun {
            job_id: r.job_id,
            run: r.run,
            gpus: r.gpus,
            start: r.start,
            end: r.end,
            state: r.state,
        })
        .collect();
    // Stable: the submissions of a reused id stay in submit order.
    out.sort_by_key(|r| (r.job_id, r.run));
    Ok(out)
}

/// One row of budgetd's ledger, every column the suites compare (pending rows
/// included): a reused job id has one row per submission, told apart by `submit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedgerRow {
    pub job_id: JobId,
    pub run: u32,
    /// Slurm's submit time of the run (0: unknown).
    pub submit: i64,
    /// 0, or which start of the same job, run and submit after slurmctld lost
    /// the earlier ones (a crash before its state save recorded them).
    pub rerun: u32,
    pub account: String,
    pub gpus: u32,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// `pending`, `running`, `ended`, `requeued`.
    pub state: String,
}

impl LedgerRow {
    /// Pending or running: the ledger still counts it as alive.
    pub fn open(&self) -> bool {
        self.state == "pending" || self.state == "running"
    }

    /// GPU-seconds it is charged up to `now` (a running run up to `now`; a run
    /// without a start is not charged).
    pub fn gpu_seconds(&self, now: i64) -> i64 {
        match self.start {
            Some(s) => i64::from(self.gpus) * (self.end.unwrap_or(now) - s).max(0),
            None => 0,
        }
    }

    /// `job:run@submit account state start..end` (`@submit+rerun` for a rerun),
    /// for messages.
    pub fn describe(&self) -> String {
        let rerun = if self.rerun > 0 {
            format!("+{}", self.rerun)
        } else {
            String::new()
        };
        format!(
            "{}:{}@{}{rerun} {} {} {}..{}",
            self.job_id,
            self.run,
            self.submit,
            self.account,
            self.state,
            opt(self.start),
            opt(self.end)
        )
    }
}

fn open_read_only(db: &Path) -> Result<Connection> {
    let err = |source| Error::Ledger {
        path: db.display().to_string(),
        source,
    };
    let conn = Connection::open_with_flags(
        db,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(err)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))
        .map_err(err)?;
    Ok(conn)
}

/// Every ledger row of `jobs` (all states, every submission), by job, submit, run,
/// rerun.
pub fn rows(db: &Path, jobs: &[JobId]) -> Result<Vec<LedgerRow>> {
    let err = |source| Error::Ledger {
        path: db.display().to_string(),
        source,
    };
    let conn = open_read_only(db)?;
    let mut stmt = conn
        .prepare(
            "SELECT job_id, run, submit, account, gpus, start, end, state, rerun FROM runs \
             ORDER BY job_id, submit, run, rerun",
        )
        .map_err(err)?;
    let rows = stmt
        .query_map([], |r| {
            Ok(LedgerRow {
                job_id: r.get(0)?,
                run: r.get(1)?,
                submit: r.get(2)?,
                account: r.get(3)?,
                gpus: r.get(4)?,
                start: r.get(5)?,
                end: r.get(6)?,
                state: r.get(7)?,
                rerun: r.get(8)?,
            })
        })
        .map_err(err)?;
    let mut out = Vec::new();
    for row in rows {
        let row = row.map_err(err)?;
        if jobs.contains(&row.job_id) {
            out.push(row);
        }
    }
    Ok(out)
}

/// When budgetd last received the controller's complete live set (`meta.live_at`,
/// the plugin's collection time): the time a run closed as forgotten ends at.
pub fn live_at(db: &Path) -> Result<Option<i64>> {
    let conn = open_read_only(db)?;
    let v: Option<String> = conn
        .query_row("SELECT value FROM meta WHERE key = 'live_at'", [], |r| {
            r.get(0)
        })
        .map(Some)
        .or_else(|e| match e {
            rusqlite::Error::QueryReturnedNoRows => Ok(None),
            e => Err(e),
        })
        .map_err(|source| Error::Ledger {
            path: db.display().to_string(),
            source,
        })?;
    Ok(v.and_then(|v| v.parse().ok()))
}

/// A run as Slurm reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TruthRun {
    pub gpus: u32,
    pub start: i64,
    /// `None` while it runs.
    pub end: Option<i64>,
}

/// The jobs whose runs the ledger must match, and their runs as Slurm reported them.
/// Runs of requeued jobs are recorded when they happen: Slurm forgets a run's times
/// at the requeue.
#[derive(Debug, Clone, Default)]
pub struct Truth {
    gpus: BTreeMap<JobId, u32>,
    runs: BTreeMap<(JobId, u32), TruthRun>,
}

/// Job states in which a job's last run is over.
const ENDED: [&str; 6] = [
    "COMPLETED",
    "CANCELLED",
    "FAILED",
    "TIMEOUT",
    "NODE_FAIL",
    "OUT_OF_MEMORY",
];

impl Truth {
    /// Tracks `job`, which requested `gpus` GPUs.
    pub fn track(&mut self, job: JobId, gpus: u32) {
        self.gpus.insert(job, gpus);
    }

    /// The tracked jobs.
    pub fn tracked(&self) -> Vec<JobId> {
        self.gpus.keys().copied().collect()
    }

    /// Records the current run of `job` (running, or ended with a start): nothing for
    /// an untracked job or one in another state.
    pub fn record(&mut self, job: &Job) {
        let Some(&gpus) = self.gpus.get(&job.id) else {
            return;
        };
        let run = match (job.state.as_str(), job.start) {
            ("RUNNING", Some(start)) => TruthRun {
                gpus,
                start,
                end: None,
            },
            (s, Some(start)) if ENDED.contains(&s) => TruthRun {
                gpus,
                start,
                end: Some(job.end.unwrap_or(start)),
            },
            _ => return,
        };
        self.runs.insert((job.id, job.restarts), run);
    }

    /// Records run `run` of `job` from `start` to `end` (a requeue Slurm will forget).
    pub fn record_run(&mut self, job: JobId, run: u32, start: i64, end: i64) {
        if let Some(&gpus) = self.gpus.get(&job) {
            self.runs.insert(
                (job, run),
                TruthRun {
                    gpus,
                    start,
                    end: Some(end),
                },
            );
        }
    }

    /// GPU-seconds of the recorded runs of `jobs` up to `now` (running runs end now).
    pub fn gpu_seconds(&self, jobs: &[JobId], now: i64) -> i64 {
        self.runs
            .iter()
            .filter(|((j, _), _)| jobs.contains(j))
            .map(|(_, r)| i64::from(r.gpus) * (r.end.unwrap_or(now) - r.start))
            .sum()
    }

    /// Compares the ledger's runs of the tracked jobs with the truth at `now`.
    pub fn compare(&self, ledger: &[LedgerRun], now: i64) -> Exactness {
        let mut x = Exactness {
            jobs: self.gpus.len(),
            ..Exactness::default()
        };
        let mut seen = Vec::new();
        for l in ledger.iter().filter(|l| self.gpus.contains_key(&l.job_id)) {
            let key = (l.job_id, l.run);
            seen.push(key);
            let name = format!("{}:{}", l.job_id, l.run);
            let Some(t) = self.runs.get(&key) else {
                x.diffs.push(format!(
                    "extra run {name} ({} {}..{})",
                    l.state,
                    opt(l.start),
                    opt(l.end)
                ));
                continue;
            };
            if l.gpus != t.gpus {
                x.diffs
                    .push(format!("{name} gpus {} != {}", l.gpus, t.gpus));
            }
            let Some(ls) = l.start else {
                x.diffs.push(format!("{name} no start"));
                continue;
            };
            x.worst = x.worst.max((ls - t.start).abs());
            let end = match (t.end, l.end) {
                (None, None) => now,
                (None, Some(le)) => {
                    x.diffs
                        .push(format!("{name} ended in ledger ({le}) but runs in Slurm"));
                    now
                }
                (Some(e), None) => {
                    x.diffs
                        .push(format!("{name} open in ledger, ended {e} in Slurm"));
                    continue;
                }
                (Some(e), Some(le)) => {
                    x.worst = x.worst.max((le - e).abs());
                    e
                }
            };
            x.slurm_gpu_s += i64::from(t.gpus) * (end - t.start);
            x.ledger_gpu_s += i64::from(l.gpus) * (l.end.unwrap_or(now) - ls);
            x.runs += 1;
        }
        for (j, r) in self.runs.keys() {
            if !seen.contains(&(*j, *r)) {
                x.diffs.push(format!("missing run {j}:{r}"));
            }
        }
        if x.worst > MAX_DEVIATION_SECS {
            x.diffs.push(format!("max deviation {} s", x.worst));
        }
        x
    }
}

fn opt(t: Option<i64>) -> String {
    t.map_or_else(|| "-".to_string(), |t| t.to_string())
}

/// The outcome of [`Truth::compare`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Exactness {
    /// Runs compared.
    pub runs: usize,
    /// Jobs tracked.
    pub jobs: usize,
    pub slurm_gpu_s: i64,
    pub ledger_gpu_s: i64,
    /// Largest start/end difference seen (s).
    pub worst: i64,
    /// Every difference, one line each; empty when the ledger is exact.
    pub diffs: Vec<String>,
}

impl Exactness {
    /// Every run once, same GPUs, times within [`MAX_DEVIATION_SECS`].
    pub fn exact(&self) -> bool {
        self.diffs.is_empty()
    }

    /// One line: runs, GPU-seconds on both sides, worst deviation.
    pub fn summary(&self) -> String {
        let mut s = String::new();
        let _ = write!(
            s,
            "{} runs of {} jobs, {} GPU-s in Slurm vs {} in the ledger, max deviation {} s",
            self.runs, self.jobs, self.slurm_gpu_s, self.ledger_gpu_s, self.worst
        );
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(id: JobId, state: &str, restarts: u32, start: Option<i64>, end: Option<i64>) -> Job {
        Job {
            id,
            state: state.into(),
            restarts,
            start,
            end,
            partition: "gpu".into(),
            reason: "None".into(),
            account: "a".into(),
            priority: 1,
            requeue: true,
            nodes: String::new(),
            submit: None,
            admin_comment: String::new(),
        }
    }

    fn led(job_id: JobId, run: u32, gpus: u32, start: Option<i64>, end: Option<i64>) -> LedgerRun {
        LedgerRun {
            job_id,
            run,
            gpus,
            start,
            end,
            state: if end.is_some() { "ended" } else { "running" }.into(),
        }
    }

    fn truth() -> Truth {
        let mut t = Truth::default();
        t.track(1, 2);
        t.track(2, 1);
        t.record(&job(1, "COMPLETED", 0, Some(100), Some(110)));
        t.record(&job(2, "RUNNING", 1, Some(200), Some(900)));
        t.record_run(2, 0, 150, 190);
        // Untracked and pending jobs are not runs.
        t.record(&job(3, "RUNNING", 0, Some(100), None));
        t.record(&job(1, "PENDING", 1, Some(5000), None));
        t
    }

    #[test]
    fn exact_ledger() {
        let t = truth();
        let l = [
            led(1, 0, 2, Some(101), Some(111)),
            led(2, 0, 1, Some(150), Some(192)),
            led(2, 1, 1, Some(200), None),
            led(3, 0, 8, Some(1), None), // untracked: ignored
        ];
        let x = t.compare(&l, 300);
        assert!(x.exact(), "{x:?}");
        assert_eq!((x.runs, x.jobs, x.worst), (3, 2, 2));
        assert_eq!(x.slurm_gpu_s, 2 * 10 + 40 + 100);
        assert_eq!(x.ledger_gpu_s, 2 * 10 + 42 + 100);
        assert_eq!(t.gpu_seconds(&[1, 2], 300), x.slurm_gpu_s);
        assert_eq!(t.gpu_seconds(&[2], 300), 140);
    }

    #[test]
    fn every_kind_of_difference() {
        let t = truth();
        let l = [
            led(1, 0, 4, Some(100), None),      // gpus, open in ledger
            led(2, 1, 1, Some(204), Some(250)), // ended in ledger, 4 s off
            led(2, 2, 1, Some(260), None),      // extra
        ];
        let x = t.compare(&l, 300);
        assert!(!x.exact());
        let all = x.diffs.join("; ");
        for want in [
            "1:0 gpus 4 != 2",
            "1:0 open in ledger, ended 110 in Slurm",
            "2:1 ended in ledger (250) but runs in Slurm",
            "extra run 2:2",
            "missing run 2:0",
            "max deviation 4 s",
        ] {
            assert!(all.contains(want), "{want:?} not in {all:?}");
        }
        let x = t.compare(&[led(1, 0, 2, None, None)], 300);
        assert!(x.diffs.iter().any(|d| d == "1:0 no start"), "{x:?}");
    }
}
