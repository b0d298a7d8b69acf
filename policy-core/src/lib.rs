//! The policy core of slurm-budget: every scheduling decision the product makes,
//! as pure functions of their inputs.
//!
//! This crate is shared by the `slurmctld` plugins, the budget service and the
//! simulator, so that the three can never disagree about what a rule means.
//! It does no I/O, reads no clock and holds no global state (architecture
//! invariant 3): every function takes "now" and the data it needs as arguments,
//! and the same inputs always give the same outputs.
//!
//! It also owns the few Slurm text formats that plugins and service both read, so
//! each is parsed one way: the contract stored in `admin_comment` ([`contract`]),
//! hostlist expressions ([`hostlist`]) and GPU counts in TRES request strings
//! ([`tres`]).
//!
//! Units used throughout: times are Unix seconds (`i64`), durations are seconds
//! (`i64`), usage is *weighted GPU-seconds* (`f64`) and allocations are stated
//! in weighted GPU-hours per window at the edges (API, CLI) but stored here in
//! GPU-seconds so that ratios need no conversion.

pub mod comment;
pub mod contract;
pub mod duration;
pub mod fairshare;
pub mod hostlist;
pub mod preempt;
pub mod priority;
pub mod protection;
pub mod rebalance;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tree;
pub mod tres;
pub mod weights;
pub mod window;

pub use duration::{DurationError, format_duration, parse_duration};
pub use fairshare::{FairShare, LeafKey, Tier};
pub use tree::{AccountSpec, MemberSpec, TreeError, TreeSpec};
pub use weights::GpuWeights;
pub use window::{Run, window_usage};

/// Seconds in one hour, for GPU-hour <-> GPU-second conversions.
pub const HOUR: i64 = 3600;
/// Seconds in one day.
pub const DAY: i64 = 86_400;
/// The default length of the sliding usage window: 7 days.
pub const DEFAULT_WINDOW_SECS: i64 = 7 * DAY;
