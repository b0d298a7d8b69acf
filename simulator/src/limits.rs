//! Users' requested time limits (`sbatch --time`), modelled from true durations.
//!
//! Traces record how long each job ran, not what its user asked for (Helios'
//! `walltime_limit_s` equals the duration; Philly has none). Slurm, backfill and
//! the preemption rule only ever see the *limit*, so the replay must not hand
//! them the true duration. A model turns each duration into a limit, drawn by
//! the seed per job (`Purpose::TimeLimit`), so results are reproducible:
//!
//! - `exact`: each run's limit is exactly the work it has left. Perfect
//!   knowledge, as the first replays assumed (reproduces their figures).
//! - `overrequest:LO-HI[,max:P]`: with probability `P` the user takes the
//!   partition maximum (`--max-time-limit`); otherwise the duration times a
//!   factor drawn log-uniformly in `[LO, HI]`, rounded **up** to a wall-time
//!   class (30m, 1h, 2h, 4h, 8h, 12h, 1d, 2d, 3d, 4d, 5d, 7d, then whole weeks),
//!   capped at the maximum. Users over-ask, pick round values, and often just
//!   take the maximum; this is the shape of runtime estimates reported on
//!   production clusters, with the spread chosen, not fitted.
//! - `moderate` = `overrequest:1-3` (the default), `sloppy` = `overrequest:1-10,max:0.4`.
//!
//! A limit is never below the job's duration (the job did run that long): a
//! job longer than the maximum gets its duration rounded up to a whole day, as
//! if an admin had raised its limit. A requeued job keeps its limit for every
//! run (Slurm's `time_limit` does not change), so after a checkpointed restart
//! the limit over-states the run even more.

use crate::rng::{Purpose, unit};

/// Wall-time classes users pick from (seconds), ascending.
const CLASSES: [i64; 12] = [
    1_800,
    3_600,
    2 * 3_600,
    4 * 3_600,
    8 * 3_600,
    12 * 3_600,
    86_400,
    2 * 86_400,
    3 * 86_400,
    4 * 86_400,
    5 * 86_400,
    7 * 86_400,
];

/// How requested limits relate to true durations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum TimeLimitModel {
    /// Each run's limit is the work it has left.
    Exact,
    /// Log-uniform over-request factor in `[lo, hi]`; `max_share` of jobs ask for the maximum.
    OverRequest { lo: f64, hi: f64, max_share: f64 },
}

impl TimeLimitModel {
    /// `exact`, `moderate`, `sloppy`, or `overrequest:LO-HI[,max:P]`.
    pub fn parse(s: &str) -> Result<TimeLimitModel, String> {
        let s = s.trim();
        match s {
            "exact" => return Ok(TimeLimitModel::Exact),
            "moderate" => return TimeLimitModel::parse("overrequest:1-3"),
            "sloppy" => return TimeLimitModel::parse("overrequest:1-10,max:0.4"),
            _ => {}
        }
        let err = || {
            format!(
                "time-limit model {s:?}: expected exact, moderate, sloppy or overrequest:LO-HI[,max:P] (1 <= LO <= HI, 0 <= P <= 1)"
            )
        };
        let rest = s.strip_prefix("overrequest:").ok_or_else(err)?;
        let (range, max) = match rest.split_once(",max:") {
            Some((r, m)) => (r, m.parse::<f64>().map_err(|_| err())?),
            None => (rest, 0.0),
        };
        let (lo, hi) = range.split_once('-').ok_or_else(err)?;
        let (lo, hi) = (
            lo.parse::<f64>().map_err(|_| err())?,
            hi.parse::<f64>().map_err(|_| err())?,
        );
        if !(lo.is_finite()
            && hi.is_finite()
            && 1.0 <= lo
            && lo <= hi
            && (0.0..=1.0).contains(&max))
        {
            return Err(err());
        }
        Ok(TimeLimitModel::OverRequest {
            lo,
            hi,
            max_share: max,
        })
    }

    pub fn describe(&self) -> String {
        match *self {
            TimeLimitModel::Exact => "exact (each run's limit = its remaining work)".into(),
            TimeLimitModel::OverRequest { lo, hi, max_share } => format!(
                "duration x log-uniform [{lo}, {hi}] rounded up to a wall-time class{}",
                if max_share > 0.0 {
                    format!(", {max_share} of jobs ask for the maximum")
                } else {
                    String::new()
                }
            ),
        }
    }

    /// The limit job `index` (of `duration` seconds) asks for; `None` for
    /// `exact` (the engine then uses each run's remaining work).
    pub fn limit(&self, seed: u64, index: u64, duration: i64, max_limit: i64) -> Option<i64> {
        let TimeLimitModel::OverRequest { lo, hi, max_share } = *self else {
            return None;
        };
        let duration = duration.max(0);
        if duration > max_limit {
            // Longer than the site maximum: its own duration, rounded up to a day.
            return Some(ceil_to(duration, 86_400));
        }
        if unit(seed, index, Purpose::TimeLimitMax) < max_share {
            return Some(max_limit);
        }
        let f = (lo.ln() + unit(seed, index, Purpose::TimeLimit) * (hi.ln() - lo.ln())).exp();
        let want = (duration as f64 * f).ceil() as i64;
        Some(round_up_to_class(want).min(max_limit).max(duration))
    }
}

/// `x` rounded up to a positive multiple of `step` (i64 has no stable `div_ceil`).
fn ceil_to(x: i64, step: i64) -> i64 {
    ((x + step - 1) / step).max(1) * step
}

/// The smallest wall-time class at or above `secs` (whole weeks beyond 7 days).
pub fn round_up_to_class(secs: i64) -> i64 {
    CLASSES
        .iter()
        .copied()
        .find(|&c| c >= secs)
        .unwrap_or_else(|| ceil_to(secs, 7 * 86_400))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn models_parse() {
        assert_eq!(TimeLimitModel::parse("exact"), Ok(TimeLimitModel::Exact));
        assert_eq!(
            TimeLimitModel::parse("moderate"),
            Ok(TimeLimitModel::OverRequest {
                lo: 1.0,
                hi: 3.0,
                max_share: 0.0
            })
        );
        assert_eq!(
            TimeLimitModel::parse("sloppy"),
            Ok(TimeLimitModel::OverRequest {
                lo: 1.0,
                hi: 10.0,
                max_share: 0.4
            })
        );
        for bad in [
            "",
            "overrequest:3-1",
            "overrequest:0.5-2",
            "overrequest:1-2,max:2",
            "x",
        ] {
            assert!(TimeLimitModel::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_are_classes_never_below_the_duration() {
        assert_eq!(round_up_to_class(1), 1_800);
        assert_eq!(round_up_to_class(3_601), 7_200);
        assert_eq!(round_up_to_class(8 * 86_400), 14 * 86_400);
        let m = TimeLimitModel::parse("sloppy").unwrap();
        let max = 7 * 86_400;
        let mut at_max = 0;
        for i in 0..2_000u64 {
            let d = (i as i64 * 997) % (6 * 86_400) + 60;
            let l = m.limit(1, i, d, max).unwrap();
            assert!(l >= d && l <= max, "{d} -> {l}");
            assert!(CLASSES.contains(&l), "{l} is not a class");
            at_max += usize::from(l == max);
        }
        // 40% ask for the maximum, plus those whose factor lands there.
        assert!(at_max > 800, "{at_max}");
        // Longer than the maximum: the duration rounded up to a day.
        assert_eq!(m.limit(1, 0, 8 * 86_400 + 5, max), Some(9 * 86_400));
        assert_eq!(TimeLimitModel::Exact.limit(1, 0, 100, max), None);
        // Deterministic per (seed, job).
        assert_eq!(m.limit(3, 7, 5_000, max), m.limit(3, 7, 5_000, max));
    }
}
