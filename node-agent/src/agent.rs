//! One sampling step: read the GPUs, map processes to jobs, update idle
//! streaks, and build the report sent to `budgetd`.

use budget_protocol::AgentReport;

use crate::AgentError;
use crate::idle::IdleTracker;
use crate::jobmap::JobMapper;
use crate::source::GpuSource;

/// The agent's state across samples.
pub struct Agent<S> {
    pub node: String,
    source: Option<S>,
    mapper: JobMapper,
    idle: IdleTracker,
}

impl<S: GpuSource> Agent<S> {
    /// `source: None` is the no-GPU mode: reports say `nvml: false` and list no GPUs.
    pub fn new(
        node: String,
        source: Option<S>,
        mapper: JobMapper,
        idle_threshold_pct: u32,
    ) -> Self {
        Self {
            node,
            source,
            mapper,
            idle: IdleTracker::new(idle_threshold_pct),
        }
    }

    /// Takes one sample at `now` (Unix seconds).
    pub fn step(&mut self, now: i64) -> Result<AgentReport, AgentError> {
        let Some(source) = self.source.as_mut() else {
            return Ok(AgentReport {
                node: self.node.clone(),
                at: now,
                nvml: false,
                gpus: Vec::new(),
            });
        };
        let mut gpus = source.sample()?;
        for g in &mut gpus {
            for p in &mut g.processes {
                p.job_id = self.mapper.job_of(p.pid);
            }
            let held = g.processes.iter().any(|p| p.job_id.is_some());
            g.idle_secs = self.idle.observe(&g.uuid, g.util_pct, held, now);
        }
        Ok(AgentReport {
            node: self.node.clone(),
            at: now,
            nvml: true,
            gpus,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_protocol::{GpuProcess, GpuSample};

    /// Recorded samples: stands in for NVML where no GPU exists (tests only).
    struct Recorded(Vec<Vec<GpuSample>>);

    impl GpuSource for Recorded {
        fn sample(&mut self) -> Result<Vec<GpuSample>, AgentError> {
            if self.0.is_empty() {
                return Err(AgentError::Device {
                    call: "sample",
                    index: 0,
                    message: "exhausted".into(),
                });
            }
            Ok(self.0.remove(0))
        }
    }

    fn gpu(util: u32, pids: &[u32]) -> GpuSample {
        GpuSample {
            index: 0,
            uuid: "GPU-1".into(),
            name: "NVIDIA H100".into(),
            util_pct: util,
            memory_used_mib: 1000,
            memory_total_mib: 81_000,
            processes: pids
                .iter()
                .map(|&pid| GpuProcess {
                    pid,
                    job_id: None,
                    used_memory_mib: Some(500),
                    sm_util_pct: None,
                })
                .collect(),
            idle_secs: 0,
        }
    }

    #[test]
    fn idle_job_gpu_is_reported_with_its_job_and_streak() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("10");
        std::fs::create_dir_all(&p).expect("mkdir");
        std::fs::write(
            p.join("cgroup"),
            b"0::/system.slice/slurmstepd.scope/job_5/step_0/user/task_0\n",
        )
        .expect("write");
        let source = Recorded(vec![
            vec![gpu(0, &[10])],
            vec![gpu(1, &[10])],
            vec![gpu(0, &[])],
        ]);
        let mut agent = Agent::new("gpu1".into(), Some(source), JobMapper::new(dir.path()), 5);
        let r1 = agent.step(1000).expect("sample");
        assert_eq!(r1.gpus[0].processes[0].job_id, Some(5));
        assert_eq!(r1.gpus[0].idle_secs, 0);
        let r2 = agent.step(1300).expect("sample");
        assert_eq!(r2.gpus[0].idle_secs, 300);
        let r3 = agent.step(1600).expect("sample");
        assert_eq!(r3.gpus[0].idle_secs, 0, "GPU released");
        assert!(agent.step(1900).is_err());
    }

    #[test]
    fn no_gpu_mode_reports_itself() {
        let mut agent: Agent<Recorded> = Agent::new("n1".into(), None, JobMapper::default(), 5);
        let r = agent.step(7).expect("no-gpu report");
        assert!(!r.nvml);
        assert!(r.gpus.is_empty());
    }
}
