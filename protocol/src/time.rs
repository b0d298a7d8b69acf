//! The TIME format of query values and `budgetctl` arguments.
//!
//! Accepted everywhere a TIME is asked for: Unix seconds (`1767225600`),
//! RFC 3339 (`2026-01-01T00:00:00Z`, `2026-01-01T01:00:00+01:00`) and a civil
//! `YYYY-MM-DDTHH:MM:SS` (also with a space) read in a given time zone —
//! the system's unless one is named. The API always answers in Unix seconds.
//! One parser for budgetd (query values, read in the service's zone) and
//! budgetctl (arguments, read in the caller's zone and sent as Unix seconds),
//! so the two never disagree about what a TIME means.

use jiff::Timestamp;
use jiff::civil::DateTime;
use jiff::tz::TimeZone;

/// The accepted forms, quoted in errors.
pub const TIME_FORMS: &str =
    "Unix seconds, RFC 3339 (2026-01-01T00:00:00Z) or YYYY-MM-DDTHH:MM:SS (local time)";

/// A time zone by IANA name, or the system's for `None`.
pub fn zone(name: Option<&str>) -> Result<TimeZone, String> {
    match name {
        None => Ok(TimeZone::system()),
        Some(n) => TimeZone::get(n).map_err(|e| format!("unknown time zone {n:?}: {e}")),
    }
}

/// Parses a civil `YYYY-MM-DDTHH:MM:SS` in `tz`.
pub fn parse_civil(text: &str, tz: &TimeZone) -> Option<i64> {
    let dt: DateTime = text.trim().replacen(' ', "T", 1).parse().ok()?;
    Some(dt.to_zoned(tz.clone()).ok()?.timestamp().as_second())
}

/// Parses a TIME in one of [`TIME_FORMS`].
pub fn parse_time(text: &str, tz: &TimeZone) -> Result<i64, String> {
    let t = text.trim();
    if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
        return t
            .parse::<i64>()
            .map_err(|_| format!("time {t:?} is out of range"));
    }
    if let Ok(ts) = t.parse::<Timestamp>() {
        return Ok(ts.as_second());
    }
    parse_civil(t, tz).ok_or_else(|| format!("invalid time {t:?}; accepted: {TIME_FORMS}"))
}

/// Prints Unix seconds as a local civil time (`2026-01-01 10:00:00`) for tables.
pub fn format_local(secs: i64, tz: &TimeZone) -> String {
    match Timestamp::from_second(secs) {
        Ok(ts) => ts
            .to_zoned(tz.clone())
            .strftime("%Y-%m-%d %H:%M:%S")
            .to_string(),
        Err(_) => secs.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_every_form() {
        let utc = TimeZone::UTC;
        assert_eq!(parse_time("1767225600", &utc), Ok(1_767_225_600));
        assert_eq!(parse_time("2026-01-01T00:00:00Z", &utc), Ok(1_767_225_600));
        assert_eq!(
            parse_time("2026-01-01T01:00:00+01:00", &utc),
            Ok(1_767_225_600)
        );
        assert_eq!(parse_time("2026-01-01T00:00:00", &utc), Ok(1_767_225_600));
        assert_eq!(parse_time("2026-01-01 00:00:00", &utc), Ok(1_767_225_600));
        assert!(
            parse_time("yesterday", &utc)
                .unwrap_err()
                .contains("RFC 3339")
        );
        assert_eq!(format_local(1_767_225_600, &utc), "2026-01-01 00:00:00");
    }
}
