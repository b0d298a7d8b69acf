//! Plugin configuration, read from `PriorityParameters` in `slurm.conf`.
//!
//! Keys (comma separated, unknown keys ignored so stock multifactor options may stand
//! beside ours):
//! - `budget_socket=PATH`   Unix socket of budgetd (default `/run/slurm-budget/budgetd.sock`)
//! - `budget_period=SECS`   background refresh period (default 5, 1..=3600)
//! - `budget_timeout_ms=MS` hard timeout of each request to budgetd (default 1000)
//! - `budget_max_age=SECS`  snapshot age that enters safe mode; overrides the snapshot's
//!   own `policy.snapshot_max_age_secs` when set
//! - `budget_sync=0|1`      send job state to budgetd (default 1)
//! - `budget_pass_log=0|1`  log every background pass at info level with its timings
//!   (pending jobs, priorities changed, runs, job-lock hold time); default 0, where the
//!   same line is logged at debug level only (benchmarks parse it: scripts/bench-slurm)

use std::time::Duration;

/// Default socket path of budgetd on a production controller.
pub const DEFAULT_SOCKET: &str = "/run/slurm-budget/budgetd.sock";

/// Parsed plugin configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub socket: String,
    pub period: Duration,
    pub timeout: Duration,
    pub max_age_secs: Option<i64>,
    pub sync_jobs: bool,
    pub pass_log: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            socket: DEFAULT_SOCKET.to_string(),
            period: Duration::from_secs(5),
            timeout: Duration::from_millis(1000),
            max_age_secs: None,
            sync_jobs: true,
            pass_log: false,
        }
    }
}

/// A bad value in `PriorityParameters`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("PriorityParameters: bad value for {key}: {value:?} ({why})")]
pub struct ConfigError {
    pub key: String,
    pub value: String,
    pub why: &'static str,
}

fn num(key: &str, value: &str, lo: u64, hi: u64) -> Result<u64, ConfigError> {
    let err = |why| ConfigError {
        key: key.to_string(),
        value: value.to_string(),
        why,
    };
    let n: u64 = value.trim().parse().map_err(|_| err("not a number"))?;
    if n < lo || n > hi {
        return Err(err("out of range"));
    }
    Ok(n)
}

impl Config {
    /// Parse a `PriorityParameters` string (may be empty). Errors name the key; the
    /// caller logs them and keeps the default for that key.
    pub fn parse(params: &str) -> (Config, Vec<ConfigError>) {
        let mut c = Config::default();
        let mut errors = Vec::new();
        for item in params.split(',') {
            let Some((key, value)) = item.split_once('=') else {
                continue;
            };
            let key = key.trim();
            let r = match key {
                "budget_socket" if !value.trim().is_empty() => {
                    c.socket = value.trim().to_string();
                    Ok(())
                }
                "budget_period" => {
                    num(key, value, 1, 3600).map(|n| c.period = Duration::from_secs(n))
                }
                "budget_timeout_ms" => {
                    num(key, value, 10, 60_000).map(|n| c.timeout = Duration::from_millis(n))
                }
                "budget_max_age" => {
                    num(key, value, 1, 86_400 * 7).map(|n| c.max_age_secs = Some(n as i64))
                }
                "budget_sync" => num(key, value, 0, 1).map(|n| c.sync_jobs = n == 1),
                "budget_pass_log" => num(key, value, 0, 1).map(|n| c.pass_log = n == 1),
                _ => Ok(()),
            };
            if let Err(e) = r {
                errors.push(e);
            }
        }
        (c, errors)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_keeps_defaults() {
        let (c, e) = Config::parse(
            "budget_socket=/tmp/b.sock,budget_period=2,PriorityFlags=x,budget_timeout_ms=250,budget_max_age=30,budget_sync=0,budget_pass_log=1",
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(c.socket, "/tmp/b.sock");
        assert_eq!(c.period, Duration::from_secs(2));
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.max_age_secs, Some(30));
        assert!(!c.sync_jobs);
        assert!(c.pass_log);
        let (c, e) = Config::parse("budget_period=0,budget_timeout_ms=abc");
        assert_eq!(e.len(), 2);
        assert_eq!(c, Config::default());
        assert_eq!(Config::parse("").0, Config::default());
    }
}
