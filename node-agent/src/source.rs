//! Where GPU samples come from.
//!
//! [`NvmlSource`] reads real devices through `nvml-wrapper` (which loads
//! `libnvidia-ml.so` at run time, so the binary builds and starts on machines
//! without a driver). [`GpuSource`] is the seam the sampling step uses, so its
//! logic can be exercised with recorded samples where no GPU exists.

use nvml_wrapper::Nvml;
use nvml_wrapper::enums::device::UsedGpuMemory;

use budget_protocol::{GpuProcess, GpuSample};

use crate::AgentError;

/// A provider of GPU samples.
pub trait GpuSource {
    /// Reads every GPU once, as the driver sees it: each process's job
    /// (`GpuProcess::job_id`) and the GPU's idle streak (`GpuSample::idle_secs`)
    /// are not the driver's to know and stay unset (`None`, 0) for the sampling
    /// step to fill.
    fn sample(&mut self) -> Result<Vec<GpuSample>, AgentError>;
}

/// Real GPUs through NVML.
pub struct NvmlSource {
    nvml: Nvml,
    /// Per-device timestamp of the last process-utilisation sample, so each
    /// query returns only samples since the previous one.
    last_seen_us: Vec<u64>,
}

const MIB: u64 = 1024 * 1024;

impl NvmlSource {
    /// Loads and initialises NVML.
    pub fn open() -> Result<Self, AgentError> {
        let nvml = Nvml::init().map_err(|e| AgentError::NoNvml(e.to_string()))?;
        Ok(Self {
            nvml,
            last_seen_us: Vec::new(),
        })
    }

    /// Driver version, for the start-up log line.
    pub fn driver_version(&self) -> String {
        self.nvml
            .sys_driver_version()
            .unwrap_or_else(|e| format!("unknown ({e})"))
    }
}

impl GpuSource for NvmlSource {
    fn sample(&mut self) -> Result<Vec<GpuSample>, AgentError> {
        let count = self.nvml.device_count().map_err(|e| AgentError::Device {
            call: "device_count",
            index: 0,
            message: e.to_string(),
        })?;
        self.last_seen_us.resize(count as usize, 0);
        let mut out = Vec::with_capacity(count as usize);
        for index in 0..count {
            let err = |call: &'static str| {
                move |e: nvml_wrapper::error::NvmlError| AgentError::Device {
                    call,
                    index,
                    message: e.to_string(),
                }
            };
            let dev = self
                .nvml
                .device_by_index(index)
                .map_err(err("device_by_index"))?;
            let util = dev.utilization_rates().map_err(err("utilization_rates"))?;
            let mem = dev.memory_info().map_err(err("memory_info"))?;
            let mut processes: Vec<GpuProcess> = dev
                .running_compute_processes()
                .map_err(err("running_compute_processes"))?
                .into_iter()
                .map(|p| GpuProcess {
                    pid: p.pid,
                    job_id: None,
                    used_memory_mib: match p.used_gpu_memory {
                        UsedGpuMemory::Used(b) => Some(b / MIB),
                        UsedGpuMemory::Unavailable => None,
                    },
                    sm_util_pct: None,
                })
                .collect();
            // Per-process utilisation is optional (not every GPU supports it):
            // a failure leaves the field empty rather than failing the sample.
            let since = self.last_seen_us[index as usize];
            if let Ok(samples) = dev.process_utilization_stats(since) {
                for s in samples {
                    self.last_seen_us[index as usize] =
                        self.last_seen_us[index as usize].max(s.timestamp);
                    if let Some(p) = processes.iter_mut().find(|p| p.pid == s.pid) {
                        p.sm_util_pct = Some(p.sm_util_pct.unwrap_or(0).max(s.sm_util));
                    }
                }
            }
            out.push(GpuSample {
                index,
                uuid: dev.uuid().map_err(err("uuid"))?,
                name: dev.name().map_err(err("name"))?,
                util_pct: util.gpu,
                memory_used_mib: mem.used / MIB,
                memory_total_mib: mem.total / MIB,
                processes,
                idle_secs: 0,
            });
        }
        Ok(out)
    }
}
