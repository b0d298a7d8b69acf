//! Mapping a process id to the Slurm job that owns it, from sources a user
//! cannot forge:
//! 1. the process's cgroup path (`/proc/PID/cgroup`) when it is one slurmd
//!    made: `/system.slice/slurmstepd.scope/job_<ID>/...` or
//!    `/slurmstepd.scope/job_<ID>/...` (cgroup v2), `/slurm[_NODE]/uid_<U>/job_<ID>/...`
//!    (v1). Only the position right under Slurm's own root counts: a user with
//!    a delegated cgroup subtree can create a `job_123` directory of their own
//!    (under `user.slice`), which is not at that position;
//! 2. else its ancestry: the nearest ancestor that is a `slurmstepd` owned
//!    by root, whose title is `slurmstepd: [<ID>.<step>]`.
//!
//! A process's environment (`SLURM_JOB_ID`) is never used: a user sets it to
//! any value, and would flag someone else's job as idle.
//!
//! A process in neither is not a Slurm job (a squatter outside Slurm, or a
//! system daemon) and is reported with no job id.

use std::path::{Path, PathBuf};

/// Most ancestors walked to find a slurmstepd (pid chains are short).
const MAX_ANCESTRY: usize = 64;

/// Reads job ids from a `/proc`-like tree (a temp folder in tests).
#[derive(Debug, Clone)]
pub struct JobMapper {
    proc_root: PathBuf,
}

impl Default for JobMapper {
    fn default() -> Self {
        Self::new("/proc")
    }
}

impl JobMapper {
    pub fn new(proc_root: impl AsRef<Path>) -> Self {
        Self {
            proc_root: proc_root.as_ref().to_path_buf(),
        }
    }

    /// Slurm job id of `pid`, if it belongs to a job.
    pub fn job_of(&self, pid: u32) -> Option<u32> {
        let dir = self.proc_root.join(pid.to_string());
        if let Ok(cgroup) = std::fs::read_to_string(dir.join("cgroup"))
            && let Some(id) = job_from_cgroup(&cgroup)
        {
            return Some(id);
        }
        self.job_from_ancestry(pid)
    }

    /// The job of the nearest root-owned `slurmstepd` ancestor of `pid`.
    fn job_from_ancestry(&self, pid: u32) -> Option<u32> {
        let mut cur = self.parent_of(pid)?;
        for _ in 0..MAX_ANCESTRY {
            if cur <= 1 {
                return None;
            }
            let dir = self.proc_root.join(cur.to_string());
            let status = std::fs::read_to_string(dir.join("status")).ok()?;
            if status_field(&status, "Name:") == Some("slurmstepd")
                && status_field(&status, "Uid:") == Some("0")
            {
                let cmdline = std::fs::read(dir.join("cmdline")).ok()?;
                return job_from_stepd_title(&cmdline);
            }
            cur = status_field(&status, "PPid:")?.parse().ok()?;
        }
        None
    }

    fn parent_of(&self, pid: u32) -> Option<u32> {
        let status =
            std::fs::read_to_string(self.proc_root.join(pid.to_string()).join("status")).ok()?;
        status_field(&status, "PPid:")?.parse().ok()
    }
}

/// The first value of `key` in a `/proc/PID/status` text (for `Uid:`, the real uid).
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|l| l.strip_prefix(key))
        .and_then(|v| v.split_whitespace().next())
}

/// `slurmstepd: [123.0]` (or `[123.batch]`, `[123.extern]`) -> 123.
pub fn job_from_stepd_title(cmdline: &[u8]) -> Option<u32> {
    let text = String::from_utf8_lossy(cmdline);
    let rest = text.strip_prefix("slurmstepd: [")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let after = rest.get(digits.len()..)?;
    if !(after.starts_with('.') || after.starts_with(']')) {
        return None;
    }
    digits.parse().ok()
}

/// The job id of a cgroup line written by slurmd: `job_<digits>` right under
/// Slurm's own root (see the module doc), nowhere else.
pub fn job_from_cgroup(text: &str) -> Option<u32> {
    text.lines().find_map(|line| {
        // hierarchy-id:controllers:path
        let path = line.splitn(3, ':').nth(2)?;
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let job = match parts.as_slice() {
            ["system.slice", "slurmstepd.scope", job, ..] | ["slurmstepd.scope", job, ..] => job,
            [root, uid, job, ..]
                if (*root == "slurm" || root.starts_with("slurm_")) && uid.starts_with("uid_") =>
            {
                job
            }
            _ => return None,
        };
        job.strip_prefix("job_").and_then(|d| d.parse().ok())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, pid: u32, file: &str, text: &[u8]) {
        let p = dir.join(pid.to_string());
        std::fs::create_dir_all(&p).expect("mkdir");
        std::fs::write(p.join(file), text).expect("write");
    }

    fn status(name: &str, ppid: u32, uid: u32) -> Vec<u8> {
        format!("Name:\t{name}\nPPid:\t{ppid}\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n").into_bytes()
    }

    #[test]
    fn reads_slurms_cgroup_then_the_slurmstepd_ancestor_never_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = dir.path();
        // A job step in Slurm's cgroup (v2 and v1).
        write(
            d,
            100,
            "cgroup",
            b"0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
        );
        write(
            d,
            101,
            "cgroup",
            b"4:devices:/slurm/uid_1000/job_17/step_batch\n",
        );
        // A user's own process claiming another user's job 77 in its environment and
        // in a cgroup of its own delegated subtree: not a job.
        write(
            d,
            200,
            "cgroup",
            b"0::/user.slice/user-1000.slice/user@1000.service/job_77\n",
        );
        write(d, 200, "environ", b"HOME=/home/u\0SLURM_JOB_ID=77\0");
        write(d, 200, "status", &status("python", 150, 1000));
        write(d, 150, "status", &status("bash", 1, 1000));
        // A user process named slurmstepd (not root's): not a job either.
        write(d, 300, "cgroup", b"0::/user.slice\n");
        write(d, 300, "status", &status("python", 301, 1000));
        write(d, 301, "status", &status("slurmstepd", 1, 1000));
        write(d, 301, "cmdline", b"slurmstepd: [77.0]\0");
        // A task under root's slurmstepd (no Slurm cgroup: proctrack/linuxproc).
        write(d, 400, "cgroup", b"0::/\n");
        write(d, 400, "status", &status("python", 401, 1000));
        write(d, 401, "status", &status("bash", 402, 1000));
        write(d, 402, "status", &status("slurmstepd", 1, 0));
        write(d, 402, "cmdline", b"slurmstepd: [555.batch]\0");
        let m = JobMapper::new(d);
        assert_eq!(m.job_of(100), Some(4242));
        assert_eq!(m.job_of(101), Some(17));
        assert_eq!(
            m.job_of(200),
            None,
            "environment and user cgroups are not trusted"
        );
        assert_eq!(
            m.job_of(300),
            None,
            "a user's own slurmstepd is not Slurm's"
        );
        assert_eq!(m.job_of(400), Some(555));
        assert_eq!(m.job_of(999), None, "a vanished process is not an error");
    }

    #[test]
    fn stepd_titles() {
        assert_eq!(job_from_stepd_title(b"slurmstepd: [12.0]\0"), Some(12));
        assert_eq!(job_from_stepd_title(b"slurmstepd: [12]\0"), Some(12));
        assert_eq!(job_from_stepd_title(b"slurmstepd: [12x.0]"), None);
        assert_eq!(job_from_stepd_title(b"python"), None);
    }
}
