//! The slurm-budget node agent (docs/design.md §8): samples every GPU of a node and the
//! processes on it through NVML, maps processes to Slurm jobs, tracks how long
//! each job-held GPU has been idle, and reports to `budgetd`.
//!
//! The agent is split so the parts that need no GPU are testable anywhere:
//! - [`source`]: where samples come from ([`source::NvmlSource`] on a real node);
//! - [`jobmap`]: process -> Slurm job id, from `/proc` (cgroup path or environment);
//! - [`idle`]: per-GPU idle tracking over successive samples;
//! - [`agent`]: one sampling step that ties them into a `budget_protocol::AgentReport`.
//!
//! Without NVML (no GPU, no driver) the agent says so and either exits cleanly
//! or keeps running in a clearly reported no-GPU mode; it never crashes.

pub mod agent;
pub mod idle;
pub mod jobmap;
pub mod source;

/// What can go wrong while sampling.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    /// NVML could not be loaded or initialised: no GPU or no driver on this node.
    #[error("NVML is not available on this node ({0}): no NVIDIA GPU or driver")]
    NoNvml(String),
    /// An NVML call failed for one device.
    #[error("NVML call {call} failed on GPU {index}: {message}")]
    Device {
        call: &'static str,
        index: u32,
        message: String,
    },
}
