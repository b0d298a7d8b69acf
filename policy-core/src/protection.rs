//! The scheduling contract's protected window (docs/design.md §5).
//!
//! A run is protected during `[run_start, run_start + min_runtime)`. Every run
//! (after a requeue) gets a fresh window because it is counted from the start
//! of *this* run. Free-tier jobs have no protection.

/// End of the protected window of a run (Unix seconds).
pub fn protected_until(run_start: i64, min_runtime: i64) -> i64 {
    run_start.saturating_add(min_runtime.max(0))
}

/// Whether a running job may not be preempted or requeued at `now`.
pub fn is_protected(run_start: i64, min_runtime: i64, free_tier: bool, now: i64) -> bool {
    !free_tier && now < protected_until(run_start, min_runtime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_is_half_open_and_free_jobs_have_none() {
        assert!(is_protected(100, 60, false, 100));
        assert!(is_protected(100, 60, false, 159));
        assert!(!is_protected(100, 60, false, 160));
        assert!(!is_protected(100, 60, true, 100));
        assert!(!is_protected(100, 0, false, 100));
        assert_eq!(protected_until(i64::MAX - 1, 10), i64::MAX);
    }
}
