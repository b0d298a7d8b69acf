//! Mapping a process id to the Slurm job that owns it.
//!
//! Two sources, tried in order, because sites differ:
//! 1. the process's cgroup path (`/proc/PID/cgroup`), which with
//!    `ProctrackType=proctrack/cgroup` contains `.../job_<ID>/...`;
//! 2. its environment (`/proc/PID/environ`), where every job step has
//!    `SLURM_JOB_ID=<ID>` (readable by root, which the agent runs as).
//!
//! A process in neither is not a Slurm job (a squatter outside Slurm, or a
//! system daemon) and is reported with no job id.

use std::path::{Path, PathBuf};

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
        let environ = std::fs::read(dir.join("environ")).ok()?;
        job_from_environ(&environ)
    }
}

/// Finds `job_<digits>` as a path component in cgroup lines.
pub fn job_from_cgroup(text: &str) -> Option<u32> {
    text.lines()
        .flat_map(|line| line.split('/'))
        .find_map(|part| part.strip_prefix("job_").and_then(|d| d.parse().ok()))
}

/// Finds `SLURM_JOB_ID=<digits>` in a NUL-separated environment block.
pub fn job_from_environ(block: &[u8]) -> Option<u32> {
    block
        .split(|&b| b == 0)
        .filter_map(|kv| std::str::from_utf8(kv).ok())
        .find_map(|kv| {
            kv.strip_prefix("SLURM_JOB_ID=")
                .and_then(|v| v.trim().parse().ok())
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cgroup_then_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p1 = dir.path().join("100");
        std::fs::create_dir_all(&p1).expect("mkdir");
        std::fs::write(
            p1.join("cgroup"),
            "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
        )
        .expect("write");
        let p2 = dir.path().join("200");
        std::fs::create_dir_all(&p2).expect("mkdir");
        std::fs::write(p2.join("cgroup"), "0::/user.slice\n").expect("write");
        std::fs::write(p2.join("environ"), b"HOME=/root\0SLURM_JOB_ID=77\0X=1\0").expect("write");
        let p3 = dir.path().join("300");
        std::fs::create_dir_all(&p3).expect("mkdir");
        std::fs::write(p3.join("environ"), b"HOME=/root\0").expect("write");
        let m = JobMapper::new(dir.path());
        assert_eq!(m.job_of(100), Some(4242));
        assert_eq!(m.job_of(200), Some(77));
        assert_eq!(m.job_of(300), None);
        assert_eq!(m.job_of(999), None, "a vanished process is not an error");
    }

    #[test]
    fn finds_the_job_of_this_test_process_environment() {
        // The real /proc path: our own process has no SLURM_JOB_ID unless run in a job.
        let me = std::process::id();
        let expected = std::env::var("SLURM_JOB_ID")
            .ok()
            .and_then(|v| v.parse().ok());
        assert_eq!(JobMapper::default().job_of(me), expected);
    }
}
