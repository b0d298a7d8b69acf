//! Slurm's client commands (`sbatch`, `squeue`, `scontrol`, `sinfo`, `sprio`, `sshare`,
//! `scancel`, and `sacctmgr` where the testbed runs slurmdbd) against one testbed, and
//! their output parsed.
//!
//! Every command runs with the environment `scripts/testbed env` exports for that
//! testbed ([`TestbedEnv`]: `SLURM_CONF`, and whatever else a testbed needs, e.g. a
//! `PATH` with another Slurm release's client wrappers first), found on that `PATH`,
//! never at a fixed location. On top of it: `SLURM_TIME_FORMAT=%s` (every time field
//! is Unix seconds, the same in every release since `slurm_make_time_str` reads it),
//! and `SBATCH_OUTPUT` into the testbed folder (job output never lands in the
//! repository).
//!
//! Job fields come from `squeue --Format` with explicit fields, no padding and a `|`
//! after each one (the free-text `admin_comment` last, so a `|` inside it stays
//! whole), not from `scontrol show job` text whose values may contain spaces.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use crate::command;
use crate::env::TestbedEnv;
use crate::error::{Error, Result};
use crate::time::slurm_time;

/// A Slurm job id.
pub type JobId = u32;

/// The `squeue --Format` fields [`Job`] is read from, in order.
const JOB_FORMAT: &str = "JobID:0|,State:0|,RestartCnt:0|,StartTime:0|,EndTime:0|,Partition:0|,\
Reason:0|,Account:0|,PriorityLong:0|,Requeue:0|,NodeList:0|,SubmitTime:0|,admin_comment:0";
const JOB_FIELDS: usize = 13;

/// Attempts of a read-only query before its failure is an error.
const QUERY_TRIES: usize = 3;

/// `squeue -j` for a job Slurm does not know (any more).
fn is_unknown_job(out: &Output) -> bool {
    !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("Invalid job id")
}

/// What `squeue` knows about one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Job {
    pub id: JobId,
    /// `PENDING`, `RUNNING`, `COMPLETED`, `CANCELLED`, ...
    pub state: String,
    /// Slurm's `restart_cnt`: the run number (0 for the first run).
    pub restarts: u32,
    /// Start of the current (or last) run; for a pending job Slurm's estimate.
    pub start: Option<i64>,
    /// End of the last run (or the time limit's end while running).
    pub end: Option<i64>,
    pub partition: String,
    /// Why it is pending (`None` for a running job).
    pub reason: String,
    pub account: String,
    pub priority: u64,
    /// Whether the job may be requeued.
    pub requeue: bool,
    pub nodes: String,
    /// Submit time of the current run (a requeue sets a new one): with the id, what
    /// tells two jobs apart when Slurm reuses an id.
    pub submit: Option<i64>,
    /// The admin comment (the stored contract); empty when unset.
    pub admin_comment: String,
}

impl Job {
    /// Parses one line of `squeue -h -O JOB_FORMAT`.
    pub fn parse(line: &str) -> Result<Job> {
        let f: Vec<&str> = line.splitn(JOB_FIELDS, '|').collect();
        if f.len() != JOB_FIELDS {
            return Err(Error::parse(
                "squeue --Format",
                format!("{} fields instead of {JOB_FIELDS} in {line:?}", f.len()),
            ));
        }
        let num = |i: usize, name: &str| -> Result<u64> {
            f[i].trim().parse::<u64>().map_err(|_| {
                Error::parse("squeue --Format", format!("{name} {:?} in {line:?}", f[i]))
            })
        };
        let text = |i: usize| f[i].trim().to_string();
        let admin = f[12].trim_end_matches(['\n', '\r']).trim();
        Ok(Job {
            id: u32::try_from(num(0, "JobID")?)
                .map_err(|_| Error::parse("squeue --Format", format!("job id in {line:?}")))?,
            state: text(1),
            restarts: u32::try_from(num(2, "RestartCnt")?).unwrap_or(u32::MAX),
            start: slurm_time(f[3]),
            end: slurm_time(f[4]),
            partition: text(5),
            reason: text(6),
            account: text(7),
            priority: num(8, "PriorityLong")?,
            requeue: num(9, "Requeue")? != 0,
            nodes: text(10),
            submit: slurm_time(f[11]),
            admin_comment: if admin == "(null)" {
                String::new()
            } else {
                admin.to_string()
            },
        })
    }
}

/// One job's priority and multifactor's weighted factors, as `sprio` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Factors {
    /// The job's priority (`%Y`).
    pub total: i64,
    /// The site factor (`%S`).
    pub site: i64,
    /// Weighted age (`%A`).
    pub age: i64,
    /// Weighted fair share (`%F`): 0 without slurmdbd (multifactor zeroes its weight).
    pub fairshare: i64,
    /// Weighted partition factor (`%P`).
    pub partition: i64,
    /// Weighted QOS factor (`%Q`): 0 without slurmdbd (no QOS exists).
    pub qos: i64,
}

impl Factors {
    /// The `sprio -o` format [`Factors::parse`] reads.
    pub const FORMAT: &'static str = "%Y %S %A %F %P %Q";

    /// Parses one line of `sprio -h -o FORMAT` (numbers may print as decimals).
    pub fn parse(line: &str) -> Result<Factors> {
        let nums: Vec<i64> = line
            .split_whitespace()
            .map(|w| w.parse::<f64>().map(|v| v.round() as i64))
            .collect::<std::result::Result<_, _>>()
            .map_err(|_| Error::parse("sprio", format!("a non-number in {line:?}")))?;
        match nums[..] {
            [total, site, age, fairshare, partition, qos] => Ok(Factors {
                total,
                site,
                age,
                fairshare,
                partition,
                qos,
            }),
            _ => Err(Error::parse(
                "sprio",
                format!("{} numbers instead of 6 in {line:?}", nums.len()),
            )),
        }
    }
}

/// The result of an `sbatch` that may be refused.
#[derive(Debug, Clone)]
pub struct Submission {
    /// Exit status 0.
    pub accepted: bool,
    /// Standard output and error.
    pub output: String,
}

/// Slurm's client commands for one testbed.
#[derive(Debug, Clone)]
pub struct Slurm {
    env: TestbedEnv,
    cwd: PathBuf,
    job_output: PathBuf,
}

impl Slurm {
    /// Commands with `env` applied, run in `cwd`, job output under `cwd/out`.
    pub fn new(env: TestbedEnv, cwd: PathBuf) -> Slurm {
        let job_output = cwd.join("out");
        Slurm {
            env,
            cwd,
            job_output,
        }
    }

    /// Where job output goes (`slurm-%j.out` files).
    pub fn job_output_dir(&self) -> &PathBuf {
        &self.job_output
    }

    /// `program` (looked up on the testbed's `PATH`) with the testbed's environment.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        self.env.apply(&mut cmd);
        cmd.env("SLURM_TIME_FORMAT", "%s")
            .env("SBATCH_OUTPUT", self.job_output.join("slurm-%j.out"))
            .current_dir(&self.cwd);
        cmd
    }

    /// Runs `program args`; its output whatever the exit status.
    pub fn output(&self, program: &str, args: &[&str]) -> Result<Output> {
        command::output(self.command(program).args(args))
    }

    /// Runs `program args`; its standard output, or an error if it failed.
    pub fn run(&self, program: &str, args: &[&str]) -> Result<String> {
        command::stdout(self.command(program).args(args))
    }

    /// [`Slurm::run`] for a read-only query (`squeue`, `sinfo`), tried up to three
    /// times: on a loaded 2-core machine slurmctld may miss one RPC's deadline, and a
    /// scenario must not stop for that.
    fn query(&self, program: &str, args: &[&str]) -> Result<Output> {
        let mut cmd = self.command(program);
        cmd.args(args);
        let mut out = command::output(&mut cmd)?;
        for _ in 1..QUERY_TRIES {
            if out.status.success() || is_unknown_job(&out) {
                break;
            }
            std::thread::sleep(Duration::from_millis(500));
            out = command::output(&mut cmd)?;
        }
        if out.status.success() || is_unknown_job(&out) {
            Ok(out)
        } else {
            Err(command::failed(&cmd, &out))
        }
    }

    /// Whether `program args` exits with status 0.
    pub fn succeeds(&self, program: &str, args: &[&str]) -> bool {
        self.output(program, args).is_ok_and(|o| o.status.success())
    }

    /// `sbatch --parsable args`: the new job's id.
    pub fn sbatch(&self, args: &[&str]) -> Result<JobId> {
        Ok(self.sbatch_timed(args)?.0)
    }

    /// [`Slurm::sbatch`] and how long the command took.
    pub fn sbatch_timed(&self, args: &[&str]) -> Result<(JobId, Duration)> {
        std::fs::create_dir_all(&self.job_output).map_err(|e| Error::file(&self.job_output, e))?;
        let mut cmd = self.command("sbatch");
        cmd.arg("--parsable").args(args);
        let t0 = Instant::now();
        let out = command::stdout(&mut cmd)?;
        let took = t0.elapsed();
        let id = out
            .trim()
            .split(';')
            .next()
            .and_then(|s| s.trim().parse::<JobId>().ok())
            .ok_or_else(|| {
                Error::parse(command::describe(&cmd), format!("no job id in {out:?}"))
            })?;
        Ok((id, took))
    }

    /// `sbatch args` that may be refused (contract checks, `--test-only` probes).
    pub fn sbatch_attempt(&self, args: &[&str]) -> Result<Submission> {
        std::fs::create_dir_all(&self.job_output).map_err(|e| Error::file(&self.job_output, e))?;
        let out = self.output("sbatch", args)?;
        Ok(Submission {
            accepted: out.status.success(),
            output: command::combined(&out),
        })
    }

    /// The job `id`, or `None` once Slurm no longer knows it.
    pub fn job(&self, id: JobId) -> Result<Option<Job>> {
        let out = self.query(
            "squeue",
            &["-h", "-t", "all", "-j", &id.to_string(), "-O", JOB_FORMAT],
        )?;
        if !out.status.success() {
            return Ok(None); // a job Slurm has purged (MinJobAge) or never had
        }
        let text = String::from_utf8_lossy(&out.stdout);
        for line in text.lines().filter(|l| !l.trim().is_empty()) {
            let job = Job::parse(line)?;
            if job.id == id {
                return Ok(Some(job));
            }
        }
        Ok(None)
    }

    /// The job `id`, or an error when Slurm does not know it.
    pub fn known_job(&self, id: JobId) -> Result<Job> {
        self.job(id)?
            .ok_or_else(|| Error::parse("squeue", format!("job {id} unknown to Slurm")))
    }

    /// `squeue -h filters...` (e.g. `-t R`, `-A team`, `-w gpu1`, `-u user`).
    pub fn queue(&self, filters: &[&str]) -> Result<Vec<Job>> {
        let mut args = vec!["-h"];
        args.extend_from_slice(filters);
        args.extend_from_slice(&["-O", JOB_FORMAT]);
        let out = self.query("squeue", &args)?;
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(Job::parse)
            .collect()
    }

    /// The state of job `id` (`""` when unknown).
    pub fn state(&self, id: JobId) -> Result<String> {
        Ok(self.job(id)?.map(|j| j.state).unwrap_or_default())
    }

    /// Whether every job of `ids` is in `state`.
    pub fn all_in_state(&self, state: &str, ids: &[JobId]) -> Result<bool> {
        for id in ids {
            if self.state(*id)? != state {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// Waits (up to `secs`) until job `id` is in `state`.
    pub fn wait_state(&self, id: JobId, state: &str, secs: u64) -> bool {
        crate::wait::wait_secs(secs, || Ok::<_, Error>(self.state(id)? == state)).ok
    }

    /// The priority of job `id` (`squeue %Q`).
    pub fn priority(&self, id: JobId) -> Result<u64> {
        Ok(self.known_job(id)?.priority)
    }

    /// `scancel` these jobs (already ended ones are ignored).
    pub fn cancel(&self, ids: &[JobId]) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let ids: Vec<String> = ids.iter().map(|j| j.to_string()).collect();
        let mut args = vec!["--quiet"];
        args.extend(ids.iter().map(String::as_str));
        // scancel fails for a job that already ended: not an error here.
        self.output("scancel", &args)?;
        Ok(())
    }

    /// `scancel -u user`.
    pub fn cancel_user(&self, user: &str) -> Result<()> {
        self.output("scancel", &["--quiet", "-u", user])?;
        Ok(())
    }

    /// `scontrol requeue id`.
    pub fn requeue(&self, id: JobId) -> Result<()> {
        self.run("scontrol", &["requeue", &id.to_string()])?;
        Ok(())
    }

    /// `sinfo`'s state of `node` (`idle`, `mixed`, `draining`, `drained`, ...).
    pub fn node_state(&self, node: &str) -> Result<String> {
        let out = self.query("sinfo", &["-h", "-N", "-n", node, "-o", "%T"])?;
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text.lines().next().unwrap_or("").trim().to_string())
    }

    /// `scontrol ping` answered.
    pub fn ping(&self) -> bool {
        self.succeeds("scontrol", &["ping"])
    }

    /// sprio's SITE and PARTITION factors and the total priority of job `id`
    /// (multifactor's columns `%S %P %Y`).
    pub fn site_partition_total(&self, id: JobId) -> Result<(i64, i64, i64)> {
        let out = self.run("sprio", &["-h", "-j", &id.to_string(), "-o", "%S %P %Y"])?;
        let nums: Vec<i64> = out
            .split_whitespace()
            .filter_map(|w| w.parse::<f64>().ok().map(|v| v as i64))
            .collect();
        match nums[..] {
            [site, part, total] => Ok((site, part, total)),
            _ => Err(Error::parse(
                format!("sprio -j {id}"),
                format!("unexpected output {out:?}"),
            )),
        }
    }

    /// sprio's priority and weighted factors of pending job `id` ([`Factors`]).
    pub fn factors(&self, id: JobId) -> Result<Factors> {
        let out = self.run(
            "sprio",
            &["-h", "-j", &id.to_string(), "-o", Factors::FORMAT],
        )?;
        let mut lines = out.lines().filter(|l| !l.trim().is_empty());
        match (lines.next(), lines.next()) {
            (Some(line), None) => Factors::parse(line),
            _ => Err(Error::parse(
                format!("sprio -j {id}"),
                format!("not one line (a pending job in one partition): {out:?}"),
            )),
        }
    }

    /// `sacctmgr -i args` (no confirmation prompt) against the testbed's slurmdbd:
    /// its standard output, or an error quoting sacctmgr's message. Only a testbed
    /// with accounting has a slurmdbd to answer (`Testbed::sacctmgr` checks that).
    pub fn sacctmgr(&self, args: &[&str]) -> Result<String> {
        let mut cmd = self.command("sacctmgr");
        cmd.arg("-i").args(args);
        command::stdout(&mut cmd)
    }

    /// slurmctld's own copy of QOS `name` (`scontrol show assoc_mgr flags=qos`: what
    /// the controller schedules by, which slurmdbd updates after each `sacctmgr`
    /// change): the record's lines from `QOS=name(id)` on, `None` while the
    /// controller does not know the QOS.
    pub fn ctld_qos(&self, name: &str) -> Result<Option<String>> {
        let filter = format!("qos={name}");
        let out = self.run("scontrol", &["show", "assoc_mgr", "flags=qos", &filter])?;
        let head = format!("QOS={name}(");
        let mut lines = out.lines().skip_while(|l| !l.starts_with(&head));
        let Some(first) = lines.next() else {
            return Ok(None);
        };
        let mut record = first.to_string();
        for l in lines.take_while(|l| l.starts_with(' ')) {
            record.push('\n');
            record.push_str(l);
        }
        Ok(Some(record))
    }

    /// The Slurm release of the client commands (`22.05.8`), from `scontrol --version`.
    pub fn version(&self) -> Result<String> {
        let out = self.run("scontrol", &["--version"])?;
        out.split_whitespace()
            .last()
            .map(str::to_string)
            .ok_or_else(|| Error::parse("scontrol --version", format!("{out:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_squeue_format() {
        let j = Job::parse(
            "42|RUNNING|1|1796155562|1796155862|gpu|None|teama|3000012345|1|gpu1|1796155500|budget:min_runtime=30 budget:x|y\n",
        )
        .unwrap();
        assert_eq!(j.id, 42);
        assert_eq!(j.state, "RUNNING");
        assert_eq!(j.restarts, 1);
        assert_eq!(j.start, Some(1_796_155_562));
        assert_eq!(j.end, Some(1_796_155_862));
        assert_eq!(j.priority, 3_000_012_345);
        assert_eq!(j.submit, Some(1_796_155_500));
        assert!(j.requeue);
        assert_eq!(j.admin_comment, "budget:min_runtime=30 budget:x|y");

        let p = Job::parse("7|PENDING|0|N/A|Unknown|grace|BeginTime|laby|1|0||1796155500|(null)")
            .unwrap();
        assert_eq!((p.start, p.end), (None, None));
        assert_eq!(p.reason, "BeginTime");
        assert!(!p.requeue);
        assert_eq!(p.admin_comment, "");
    }

    #[test]
    fn parses_sprio_factors() {
        let f = Factors::parse("       26009  21008  3  1000  0  4000\n").unwrap();
        assert_eq!(
            f,
            Factors {
                total: 26009,
                site: 21008,
                age: 3,
                fairshare: 1000,
                partition: 0,
                qos: 4000
            }
        );
        assert_eq!(Factors::parse("1.6 0 0 0.4 0 0").unwrap().total, 2);
        assert!(Factors::parse("1 2 3 4 5").is_err());
        assert!(Factors::parse("1 2 3 4 5 x").is_err());
    }

    #[test]
    fn refuses_bad_lines() {
        assert!(Job::parse("42|RUNNING").is_err());
        assert!(Job::parse("x|RUNNING|0|0|0|gpu|None|a|1|1|n|0|c").is_err());
        assert!(Job::parse("1|RUNNING|0|0|0|gpu|None|a|high|1|n|0|c").is_err());
    }
}
