//! Node agent overhead: what one sampling step costs on the node besides NVML
//! itself (which needs a GPU and is measured only where one exists).
//!
//! Prints a Markdown table: process -> job mapping over every process in the
//! real /proc, and one full step over a recorded 8-GPU sample with 4 job
//! processes per GPU (the mapping and idle tracking the agent adds to NVML).
//! Run: `cargo bench -p budget-agent --bench agent_overhead`.

use std::hint::black_box;
use std::time::Instant;

use budget_agent::AgentError;
use budget_agent::agent::Agent;
use budget_agent::jobmap::JobMapper;
use budget_agent::source::{GpuSource, NvmlSource};
use budget_protocol::{GpuProcess, GpuSample};

struct Recorded(Vec<GpuSample>);

impl GpuSource for Recorded {
    fn sample(&mut self) -> Result<Vec<GpuSample>, AgentError> {
        Ok(self.0.clone())
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default();
    let mapper = JobMapper::default();
    let mut per_scan = Vec::new();
    for _ in 0..50 {
        let t = Instant::now();
        for &p in &pids {
            black_box(mapper.job_of(p));
        }
        per_scan.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let scan_us = median(per_scan);

    let my_pid = std::process::id();
    let gpus: Vec<GpuSample> = (0..8)
        .map(|i| GpuSample {
            index: i,
            uuid: format!("GPU-{i}"),
            name: "NVIDIA H100".into(),
            util_pct: if i % 2 == 0 { 0 } else { 90 },
            memory_used_mib: 1000,
            memory_total_mib: 81_000,
            processes: (0..4)
                .map(|k| GpuProcess {
                    pid: my_pid + k,
                    job_id: None,
                    used_memory_mib: Some(100),
                    sm_util_pct: Some(3),
                })
                .collect(),
            idle_secs: 0,
        })
        .collect();
    let mut agent = Agent::new(
        "bench".into(),
        Some(Recorded(gpus)),
        JobMapper::default(),
        5,
    );
    let mut per_step = Vec::new();
    for i in 0..200 {
        let t = Instant::now();
        let report = agent.step(1_000 + i).expect("recorded sample");
        black_box(serde_json::to_vec(&report).expect("json"));
        per_step.push(t.elapsed().as_secs_f64() * 1e6);
    }
    let step_us = median(per_step);
    let nvml = if NvmlSource::open().is_ok() {
        "present"
    } else {
        "absent (no GPU here)"
    };

    println!("| node agent | figure |");
    println!("|---|---|");
    println!(
        "| process->job mapping, all {} processes in /proc | {scan_us:.0} µs per scan ({:.2} µs/process) |",
        pids.len(),
        scan_us / pids.len().max(1) as f64
    );
    println!("| one step, 8 GPUs x 4 processes, excl. NVML, incl. JSON | {step_us:.0} µs |");
    println!(
        "| at the default 30 s interval | {:.4} % of one core |",
        step_us / 30e6 * 100.0
    );
    println!("| NVML | {nvml} |");
}
