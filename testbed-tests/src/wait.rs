//! Polling until a condition holds: [`wait_until`] and [`wait_secs`], with the
//! outcome ([`Waited`]) a check reports. Used by the testbed's lifecycle, by Slurm's
//! commands (waiting for a job's state) and by the suites (which import it from `checks.rs`).

use std::fmt::Display;
use std::time::{Duration, Instant};

/// Poll interval of [`wait_until`].
pub const POLL: Duration = Duration::from_millis(200);

/// The outcome of [`wait_until`].
#[derive(Debug, Clone)]
pub struct Waited {
    /// The condition held before the deadline.
    pub ok: bool,
    /// How long it took (or the whole wait).
    pub after: Duration,
    /// The last error of the condition, if its last poll failed.
    pub last_error: Option<String>,
}

impl Waited {
    /// `ok after 1.2 s`, or why not.
    pub fn describe(&self) -> String {
        match (&self.ok, &self.last_error) {
            (true, _) => format!("after {:.1} s", self.after.as_secs_f64()),
            (false, Some(e)) => format!(
                "not within {:.0} s (last error: {e})",
                self.after.as_secs_f64()
            ),
            (false, None) => format!("not within {:.0} s", self.after.as_secs_f64()),
        }
    }
}

/// Polls `cond` every [`POLL`] until it returns `Ok(true)` or `timeout` has passed.
/// An error counts as "not yet" (a daemon may be restarting); the last one is kept.
pub fn wait_until<E: Display>(
    timeout: Duration,
    mut cond: impl FnMut() -> Result<bool, E>,
) -> Waited {
    let t0 = Instant::now();
    loop {
        let last_error = match cond() {
            Ok(true) => {
                return Waited {
                    ok: true,
                    after: t0.elapsed(),
                    last_error: None,
                };
            }
            Ok(false) => None,
            Err(e) => Some(e.to_string()),
        };
        if t0.elapsed() >= timeout {
            return Waited {
                ok: false,
                after: t0.elapsed(),
                last_error,
            };
        }
        std::thread::sleep(POLL);
    }
}

/// [`wait_until`] with a timeout in seconds.
pub fn wait_secs<E: Display>(secs: u64, cond: impl FnMut() -> Result<bool, E>) -> Waited {
    wait_until(Duration::from_secs(secs), cond)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits() {
        let mut n = 0;
        let w = wait_until(Duration::from_secs(5), || -> Result<bool, String> {
            n += 1;
            Ok(n >= 2)
        });
        assert!(w.ok && n == 2);
        let w = wait_until(Duration::from_millis(10), || -> Result<bool, String> {
            Err("down".into())
        });
        assert!(!w.ok);
        assert_eq!(w.last_error.as_deref(), Some("down"));
        assert!(w.describe().contains("down"));
    }
}
