//! Incremental, exact sliding-window usage per fair-share leaf.
//!
//! The policy core defines window usage as the overlap of every run with
//! `[t - window, t]` ([`policy_core::window_usage`]). Summing that over every
//! run at every recalculation would make a 111k-job replay quadratic, so each
//! leaf keeps its cumulative GPU-seconds `A(x)`, a piecewise-linear function
//! whose slope is the GPUs it holds, and the window usage is
//! `A(t) - A(t - window)`: the same number, computed in amortised O(1).
//! Times and GPU counts are integers, so the arithmetic is exact (i64) and
//! equality with the policy core's definition can be checked bit for bit
//! (see the engine's `verify_window` option and the tests).

use std::collections::VecDeque;

/// One breakpoint of `A`: from `t` on, `A(x) = cum + rate * (x - t)`.
#[derive(Debug, Clone, Copy)]
struct Breakpoint {
    t: i64,
    cum: i64,
    rate: i64,
}

#[derive(Debug, Clone)]
struct Leaf {
    /// Breakpoints not yet older than the window's lower edge (the first one
    /// may be older: it defines `A` at that edge).
    hist: VecDeque<Breakpoint>,
}

impl Leaf {
    fn last(&self) -> Breakpoint {
        // Never empty: created with one breakpoint and only popped down to one.
        self.hist.back().copied().unwrap_or(Breakpoint {
            t: i64::MIN / 4,
            cum: 0,
            rate: 0,
        })
    }
}

/// Sliding-window usage of many leaves. Queries must come at non-decreasing times.
#[derive(Debug, Clone)]
pub struct SlidingUsage {
    window: i64,
    leaves: Vec<Leaf>,
}

impl SlidingUsage {
    pub fn new(leaves: usize, window: i64) -> SlidingUsage {
        let start = Breakpoint {
            t: i64::MIN / 4,
            cum: 0,
            rate: 0,
        };
        SlidingUsage {
            window,
            leaves: vec![
                Leaf {
                    hist: VecDeque::from([start])
                };
                leaves
            ],
        }
    }

    /// The leaf starts (`delta > 0`) or stops (`delta < 0`) holding GPUs at `t`.
    pub fn change(&mut self, leaf: usize, t: i64, delta: i64) {
        let l = &mut self.leaves[leaf];
        let last = l.last();
        debug_assert!(t >= last.t, "usage changes must come in time order");
        let cum = last.cum + last.rate * (t - last.t);
        let rate = last.rate + delta;
        debug_assert!(rate >= 0, "leaf {leaf} would hold negative GPUs");
        if last.t == t {
            l.hist.pop_back();
        }
        l.hist.push_back(Breakpoint { t, cum, rate });
    }

    /// Cumulative GPU-seconds of `leaf` up to `t` (t >= the last change).
    pub fn cumulative(&self, leaf: usize, t: i64) -> i64 {
        let last = self.leaves[leaf].last();
        last.cum + last.rate * (t - last.t).max(0)
    }

    /// GPUs `leaf` holds now.
    pub fn rate(&self, leaf: usize) -> i64 {
        self.leaves[leaf].last().rate
    }

    /// GPU-seconds of `leaf` inside `[t - window, t]`; drops history that no
    /// later query can need.
    pub fn window_usage(&mut self, leaf: usize, t: i64) -> i64 {
        let now = self.cumulative(leaf, t);
        let edge = t - self.window;
        let l = &mut self.leaves[leaf];
        while l.hist.len() >= 2 && l.hist[1].t <= edge {
            l.hist.pop_front();
        }
        let b = l.hist[0];
        let past = if edge <= b.t {
            b.cum
        } else {
            b.cum + b.rate * (edge - b.t)
        };
        now - past
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::Run;
    use proptest::prelude::*;

    proptest! {
        /// Equals the policy core's definition on random runs and query times.
        #[test]
        fn equals_policy_core_window_usage(
            runs in proptest::collection::vec((0i64..500, 0i64..200, 1u32..9), 0..15),
            queries in proptest::collection::vec(0i64..800, 1..20),
            w in 1i64..300,
        ) {
            let runs: Vec<Run> = runs.into_iter().map(|(s, len, g)| Run { start: s, end: Some(s + len), gpus: g, weight: 1.0 }).collect();
            let mut events: Vec<(i64, i64)> = runs.iter().flat_map(|r| [(r.start, i64::from(r.gpus)), (r.end.unwrap_or(0), -i64::from(r.gpus))]).collect();
            events.sort_by_key(|&(t, d)| (t, -d));
            let mut queries = queries;
            queries.sort();
            let mut u = SlidingUsage::new(1, w);
            let mut ev = events.into_iter().peekable();
            for q in queries {
                while let Some(&(t, d)) = ev.peek() {
                    if t > q { break; }
                    u.change(0, t, d);
                    ev.next();
                }
                // Runs still going at q count up to q, as in the core.
                let view: Vec<Run> = runs.iter().map(|r| Run { end: r.end.filter(|&e| e <= q), ..r.clone() }).filter(|r| r.start <= q).collect();
                let expect = policy_core::window_usage(&view, q, w);
                prop_assert_eq!(u.window_usage(0, q) as f64, expect);
            }
        }
    }
}
