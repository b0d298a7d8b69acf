//! Log lines a client can cause at will (refused requests) are rate-limited:
//! one line per kind per second at most, the next one saying how many were
//! left out, so a client repeating a refused request cannot flood the log.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// One rate-limited kind of log line.
#[derive(Debug, Default)]
pub struct LogLimit {
    /// Unix second of the last line written.
    last: AtomicI64,
    /// Lines left out since.
    suppressed: AtomicU64,
}

impl LogLimit {
    pub const fn new() -> Self {
        Self {
            last: AtomicI64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(n)` when a line may be written now (`n`: lines left out since
    /// the last one), `None` when this one is left out.
    pub fn allow_at(&self, now_secs: i64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        if now_secs > last
            && self
                .last
                .compare_exchange(last, now_secs, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            Some(self.suppressed.swap(0, Ordering::Relaxed))
        } else {
            self.suppressed.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// [`LogLimit::allow_at`] with the wall clock.
    pub fn allow(&self) -> Option<u64> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        self.allow_at(now)
    }
}

/// Unauthenticated TCP requests refused.
pub static UNAUTHENTICATED: LogLimit = LogLimit::new();

/// Agent reports naming jobs the ledger places on other nodes.
pub static AGENT_OFF_NODE: LogLimit = LogLimit::new();

/// Syncs reporting running a run the ledger has already ended.
pub static SYNC_CONTRADICTED: LogLimit = LogLimit::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_line_a_second_and_the_count_left_out() {
        let l = LogLimit::new();
        assert_eq!(l.allow_at(100), Some(0));
        for _ in 0..1000 {
            assert_eq!(l.allow_at(100), None);
        }
        assert_eq!(l.allow_at(101), Some(1000));
        assert_eq!(l.allow_at(101), None);
        assert_eq!(l.allow_at(105), Some(1));
    }
}
