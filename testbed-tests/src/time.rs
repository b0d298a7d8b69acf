//! Time: the clock, Slurm's time fields and log time stamps, all as Unix seconds.
//!
//! Slurm's client commands run with `SLURM_TIME_FORMAT=%s` (see [`crate::slurm`]), so
//! their time fields are already Unix seconds, or a word for "no time" (`Unknown`,
//! `None`, `N/A`). Log lines carry the daemon's `LogTimeFormat` stamp: local time
//! (`[2026-12-01T20:06:02.123]`, the default) or a time with an offset (`rfc5424`).
//! Both are read here, so nothing else parses dates.

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{Timestamp, Zoned};

/// Now, in Unix seconds.
pub fn now() -> i64 {
    Timestamp::now().as_second()
}

/// Now, in Unix seconds with milliseconds (for lags printed with a decimal).
pub fn now_f64() -> f64 {
    Timestamp::now().as_millisecond() as f64 / 1000.0
}

/// A Slurm time field printed with `SLURM_TIME_FORMAT=%s`: `Some(seconds)`, or `None`
/// for `Unknown`, `None`, `N/A`, an empty field or 0 (Slurm's "no time").
pub fn slurm_time(field: &str) -> Option<i64> {
    match field.trim().parse::<i64>() {
        Ok(t) if t > 0 => Some(t),
        _ => None,
    }
}

/// The time stamp of a Slurm log line (`[STAMP] message`), in Unix seconds
/// (milliseconds dropped, like `date +%s`). `None` for a line without one.
pub fn log_stamp(line: &str) -> Option<i64> {
    let rest = line.strip_prefix('[')?;
    let stamp = &rest[..rest.find(']')?];
    // With an offset (rfc5424, rfc3339): an absolute instant.
    if let Ok(t) = stamp.parse::<Timestamp>() {
        return Some(t.as_second());
    }
    // Without one (iso8601, iso8601_ms): the daemon's local time, which is ours.
    let civil: DateTime = stamp.parse().ok()?;
    let zoned: Zoned = civil.to_zoned(TimeZone::system()).ok()?;
    Some(zoned.timestamp().as_second())
}

/// `seconds` as `YYYY-MM-DDTHH:MM:SS` in UTC (sacct's `Start`/`End` with `--tz UTC`).
pub fn utc_iso(seconds: i64) -> String {
    match Timestamp::from_second(seconds) {
        Ok(t) => t.strftime("%Y-%m-%dT%H:%M:%S").to_string(),
        Err(_) => format!("@{seconds}"),
    }
}

/// `seconds` as local `HH:MM:SS` (for messages).
pub fn clock(seconds: i64) -> String {
    match Timestamp::from_second(seconds) {
        Ok(t) => t.to_zoned(TimeZone::system()).strftime("%T").to_string(),
        Err(_) => format!("@{seconds}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_fields() {
        assert_eq!(slurm_time("1764619562"), Some(1_764_619_562));
        assert_eq!(slurm_time(" 1764619562\n"), Some(1_764_619_562));
        for none in ["Unknown", "None", "N/A", "", "0", "2026-12-01T20:06:02"] {
            assert_eq!(slurm_time(none), None, "{none:?}");
        }
    }

    #[test]
    fn log_stamps() {
        // An offset is absolute whatever the local zone.
        assert_eq!(
            log_stamp("[2026-12-01T20:06:02.789+00:00] Requeuing JobId=7"),
            Some(1_796_155_562)
        );
        assert_eq!(
            log_stamp("[2026-12-01T21:06:02+01:00] x"),
            Some(1_796_155_562)
        );
        // Without an offset: local time; the same instant as that local time.
        let local = Timestamp::from_second(1_796_155_562)
            .unwrap()
            .to_zoned(TimeZone::system())
            .strftime("%Y-%m-%dT%H:%M:%S")
            .to_string();
        assert_eq!(log_stamp(&format!("[{local}.123] x")), Some(1_796_155_562));
        assert_eq!(log_stamp(&format!("[{local}] x")), Some(1_796_155_562));
        assert_eq!(log_stamp("no stamp"), None);
        assert_eq!(log_stamp("[garbage] x"), None);
        assert_eq!(log_stamp("[2026-12-01T20:06:02"), None);
    }

    #[test]
    fn utc_format() {
        assert_eq!(utc_iso(1_796_155_562), "2026-12-01T20:06:02");
    }
}
