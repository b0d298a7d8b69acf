//! The scheduling contract's protected window (DESIGN 3.4).
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

/// The instant a run may first be requeued (by a drain, or by the rule once it
/// allows): the end of its protected window, or `now` when it has none left (free
/// tier, window over, or no known start). Never before `now`.
pub fn window_end(free_tier: bool, min_runtime: i64, run_start: Option<i64>, now: i64) -> i64 {
    match run_start {
        Some(s) if !free_tier => protected_until(s, min_runtime).max(now),
        _ => now,
    }
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

    #[test]
    fn window_end_is_never_in_the_past() {
        assert_eq!(window_end(false, 60, Some(1000), 1030), 1060);
        assert_eq!(window_end(false, 60, Some(1000), 1060), 1060);
        assert_eq!(window_end(false, 60, Some(1000), 2000), 2000);
        assert_eq!(
            window_end(true, 60, Some(1000), 1030),
            1030,
            "free tier: now"
        );
        assert_eq!(window_end(false, 60, None, 1030), 1030, "not started: now");
        // The window ends exactly where protection stops.
        for now in 990..1070 {
            let end = window_end(false, 60, Some(1000), now);
            assert!(!is_protected(1000, 60, false, end));
            assert_eq!(end > now, is_protected(1000, 60, false, now));
        }
    }
}
