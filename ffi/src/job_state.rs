//! Rust versions of Slurm's job-state macros (`IS_JOB_PENDING` & co. in `slurm.h`),
//! which bindgen cannot translate because they are function-like macros.

use crate::sys;

/// The base state (`job_state & JOB_STATE_BASE`).
pub fn base(job_state: u32) -> u32 {
    job_state & sys::JOB_STATE_BASE
}

/// `IS_JOB_PENDING`: base state PENDING (completing/configuring flags may be set).
pub fn is_pending(job_state: u32) -> bool {
    base(job_state) == sys::JOB_PENDING
}

/// `IS_JOB_RUNNING`.
pub fn is_running(job_state: u32) -> bool {
    base(job_state) == sys::JOB_RUNNING
}

/// `IS_JOB_SUSPENDED`.
pub fn is_suspended(job_state: u32) -> bool {
    base(job_state) == sys::JOB_SUSPENDED
}

/// `IS_JOB_FINISHED`: base state past SUSPENDED (complete, cancelled, failed, ...).
pub fn is_finished(job_state: u32) -> bool {
    base(job_state) > sys::JOB_SUSPENDED
}

/// `IS_JOB_COMPLETING`.
pub fn is_completing(job_state: u32) -> bool {
    job_state & sys::JOB_COMPLETING != 0
}

/// `IS_JOB_REVOKED` (federation sibling revoked).
pub fn is_revoked(job_state: u32) -> bool {
    job_state & sys::JOB_REVOKED != 0
}

/// Short lowercase name of the base state, for logs and the wire.
pub fn name(job_state: u32) -> &'static str {
    match base(job_state) {
        sys::JOB_PENDING => "pending",
        sys::JOB_RUNNING => "running",
        sys::JOB_SUSPENDED => "suspended",
        sys::JOB_COMPLETE => "completed",
        sys::JOB_CANCELLED => "cancelled",
        sys::JOB_FAILED => "failed",
        sys::JOB_TIMEOUT => "timeout",
        sys::JOB_NODE_FAIL => "node_fail",
        sys::JOB_PREEMPTED => "preempted",
        sys::JOB_BOOT_FAIL => "boot_fail",
        sys::JOB_DEADLINE => "deadline",
        sys::JOB_OOM => "oom",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn states() {
        assert!(is_pending(sys::JOB_PENDING));
        assert!(is_pending(sys::JOB_PENDING | sys::JOB_COMPLETING));
        assert!(is_running(sys::JOB_RUNNING));
        assert!(is_finished(sys::JOB_COMPLETE));
        assert!(is_finished(sys::JOB_PREEMPTED));
        assert!(!is_finished(sys::JOB_SUSPENDED));
        assert!(is_completing(sys::JOB_CANCELLED | sys::JOB_COMPLETING));
        assert_eq!(name(sys::JOB_TIMEOUT), "timeout");
    }
}
