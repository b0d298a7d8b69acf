//! Exact sliding-window usage (docs/design.md §3).
//!
//! usage(t) is the part of every run that overlaps `[t - window, t]`, running
//! jobs included up to `t`, times GPUs times the GPU type's weight. It is a true
//! sliding window, not exponential decay: a run that ended eight days ago
//! counts for nothing, one that ended yesterday counts in full.

use serde::{Deserialize, Serialize};

/// One run of one job: a job requeued twice has three runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    /// Unix seconds when this run started.
    pub start: i64,
    /// Unix seconds when it ended; `None` while it is still running.
    pub end: Option<i64>,
    /// GPUs held by the run.
    pub gpus: u32,
    /// Billing weight of the run's GPU type (1.0 for the reference type).
    pub weight: f64,
}

impl Run {
    /// Seconds of this run that lie inside `[t - window, t]`.
    pub fn overlap_secs(&self, t: i64, window: i64) -> i64 {
        let lo = self.start.max(t - window);
        let hi = self.end.unwrap_or(t).min(t);
        (hi - lo).max(0)
    }

    /// Weighted GPU-seconds of this run inside `[t - window, t]`.
    pub fn window_usage(&self, t: i64, window: i64) -> f64 {
        self.overlap_secs(t, window) as f64 * f64::from(self.gpus) * self.weight
    }

    /// Weighted GPU-seconds of the whole run, up to `t` if it is still running.
    pub fn total_usage(&self, t: i64) -> f64 {
        let end = self.end.unwrap_or(t).max(self.start);
        (end - self.start) as f64 * f64::from(self.gpus) * self.weight
    }
}

/// Sum of [`Run::window_usage`] over `runs`.
pub fn window_usage<'a>(runs: impl IntoIterator<Item = &'a Run>, t: i64, window: i64) -> f64 {
    runs.into_iter().map(|r| r.window_usage(t, window)).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn partial_overlaps_at_both_edges() {
        let w = 100;
        let t = 1000;
        // Starts before the window, ends inside: only [900, 950] counts.
        let r = Run {
            start: 850,
            end: Some(950),
            gpus: 2,
            weight: 1.5,
        };
        assert_eq!(r.overlap_secs(t, w), 50);
        assert_eq!(r.window_usage(t, w), 150.0);
        // Still running: counts up to t.
        let r = Run {
            start: 980,
            end: None,
            gpus: 1,
            weight: 1.0,
        };
        assert_eq!(r.overlap_secs(t, w), 20);
        // Ended before the window.
        let r = Run {
            start: 0,
            end: Some(900),
            gpus: 8,
            weight: 1.0,
        };
        assert_eq!(r.window_usage(t, w), 0.0);
        // Starts after t (a clock skew): nothing.
        let r = Run {
            start: 1100,
            end: None,
            gpus: 8,
            weight: 1.0,
        };
        assert_eq!(r.window_usage(t, w), 0.0);
    }

    proptest! {
        /// The interval arithmetic equals an independent brute-force sum over
        /// every second of the window.
        #[test]
        fn window_usage_equals_brute_force(
            runs in proptest::collection::vec((0i64..400, proptest::option::of(0i64..400), 1u32..9, 1u32..4), 0..12),
            t in 0i64..500,
            w in 1i64..300,
        ) {
            let runs: Vec<Run> = runs.into_iter().map(|(s, len, g, wt)| Run {
                start: s, end: len.map(|l| s + l), gpus: g, weight: f64::from(wt),
            }).collect();
            let fast = window_usage(&runs, t, w);
            let mut slow = 0.0;
            for sec in (t - w)..t {
                for r in &runs {
                    // second [sec, sec+1) is used if the run covers it and it is before t
                    let end = r.end.unwrap_or(t);
                    if r.start <= sec && sec < end {
                        slow += f64::from(r.gpus) * r.weight;
                    }
                }
            }
            prop_assert_eq!(fast, slow);
        }
    }
}
