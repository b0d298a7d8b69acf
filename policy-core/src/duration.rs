//! Parsing and printing of the durations users write in `min_runtime=` and
//! admins write in policy settings.
//!
//! Accepted forms (one of):
//! - unit form: one or more `<integer><unit>` groups with units `d`, `h`, `m`, `s`
//!   in that order, each at most once: `90m`, `4h`, `1d`, `2h30m`, `1d12h`, `45s`;
//! - clock form: `HH:MM:SS` (hours may exceed 23), or `D-HH:MM:SS` as Slurm's `--time`.
//!
//! Anything else is an error whose message names the accepted forms, because
//! the text reaches a researcher through `sbatch` and must tell them how to fix it.

use std::fmt;

/// Longest duration accepted anywhere: 366 days. Bigger values are typos.
pub const MAX_DURATION_SECS: i64 = 366 * 86_400;

/// The accepted forms, quoted in every parse error.
pub const ACCEPTED_FORMS: &str = "accepted forms: 90m, 4h, 1d, 2h30m, 45s (units d,h,m,s in that order) or HH:MM:SS or D-HH:MM:SS";

/// Why a duration could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DurationError {
    #[error("empty duration; {ACCEPTED_FORMS}")]
    Empty,
    #[error("negative duration {0:?} is not allowed; {ACCEPTED_FORMS}")]
    Negative(String),
    #[error("invalid duration {0:?}; {ACCEPTED_FORMS}")]
    Invalid(String),
    #[error("duration {0:?} is longer than 366 days")]
    TooLong(String),
}

/// Parses a duration in one of the [accepted forms](ACCEPTED_FORMS) into seconds.
pub fn parse_duration(text: &str) -> Result<i64, DurationError> {
    let s = text.trim();
    if s.is_empty() {
        return Err(DurationError::Empty);
    }
    if s.starts_with('-') {
        return Err(DurationError::Negative(s.to_string()));
    }
    let invalid = || DurationError::Invalid(s.to_string());
    let secs = if s.contains(':') {
        parse_clock(s).ok_or_else(invalid)?
    } else {
        parse_units(s).ok_or_else(invalid)?
    };
    if secs > MAX_DURATION_SECS {
        return Err(DurationError::TooLong(s.to_string()));
    }
    Ok(secs)
}

/// `HH:MM:SS` or `D-HH:MM:SS`; minutes and seconds below 60.
fn parse_clock(s: &str) -> Option<i64> {
    let (days, clock) = match s.split_once('-') {
        Some((d, rest)) => (parse_digits(d)?, rest),
        None => (0, s),
    };
    let mut parts = clock.split(':');
    let (h, m, sec) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    let (h, m, sec) = (parse_digits(h)?, parse_digits(m)?, parse_digits(sec)?);
    if m >= 60 || sec >= 60 || (days > 0 && h >= 24) {
        return None;
    }
    days.checked_mul(86_400)?
        .checked_add(h.checked_mul(3600)?)?
        .checked_add(m * 60 + sec)
}

/// `1d2h30m15s` style: groups in strictly descending unit order.
fn parse_units(s: &str) -> Option<i64> {
    const UNITS: [(char, i64); 4] = [('d', 86_400), ('h', 3600), ('m', 60), ('s', 1)];
    let mut total: i64 = 0;
    let mut next_unit = 0usize;
    let mut rest = s;
    while !rest.is_empty() {
        let digits_end = rest.find(|c: char| !c.is_ascii_digit())?;
        let value = parse_digits(&rest[..digits_end])?;
        let unit = rest[digits_end..].chars().next()?;
        let idx = UNITS.iter().position(|(u, _)| *u == unit)?;
        if idx < next_unit {
            return None;
        }
        next_unit = idx + 1;
        total = total.checked_add(value.checked_mul(UNITS[idx].1)?)?;
        rest = &rest[digits_end + unit.len_utf8()..];
    }
    Some(total)
}

fn parse_digits(s: &str) -> Option<i64> {
    if s.is_empty() || s.len() > 12 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// Prints seconds in the compact unit form (`2h30m`, `1d`, `0s`), which
/// [`parse_duration`] reads back to the same value.
pub fn format_duration(secs: i64) -> String {
    if secs <= 0 {
        return "0s".to_string();
    }
    let mut out = String::new();
    let mut rest = secs;
    for (unit, size) in [("d", 86_400), ("h", 3600), ("m", 60), ("s", 1)] {
        let n = rest / size;
        rest %= size;
        if n > 0 {
            out.push_str(&n.to_string());
            out.push_str(unit);
        }
    }
    out
}

/// A duration wrapper that prints in the compact form.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compact(pub i64);

impl fmt::Display for Compact {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_every_documented_form() {
        assert_eq!(parse_duration("90m"), Ok(5400));
        assert_eq!(parse_duration("4h"), Ok(14_400));
        assert_eq!(parse_duration("1d"), Ok(86_400));
        assert_eq!(parse_duration("2h30m"), Ok(9000));
        assert_eq!(parse_duration("45s"), Ok(45));
        assert_eq!(parse_duration("1d12h"), Ok(129_600));
        assert_eq!(parse_duration("04:00:00"), Ok(14_400));
        assert_eq!(parse_duration("36:00:00"), Ok(129_600));
        assert_eq!(parse_duration("1-02:00:00"), Ok(93_600));
        assert_eq!(parse_duration(" 0m "), Ok(0));
    }

    #[test]
    fn rejects_malformed_values_with_the_accepted_forms() {
        for bad in [
            "4x",
            "",
            "m",
            "h4",
            "4",
            "2m30h",
            "4h4h",
            "1:2",
            "00:60:00",
            "1-25:00:00",
            "1.5h",
            "4 h",
            "1-2",
            "abc",
            "99999999999999d",
        ] {
            let err = parse_duration(bad).expect_err(bad);
            if !bad.is_empty() {
                assert!(
                    err.to_string().contains("accepted forms")
                        || matches!(err, DurationError::TooLong(_)),
                    "{bad}: {err}"
                );
            }
        }
        assert_eq!(
            parse_duration("-5m"),
            Err(DurationError::Negative("-5m".into()))
        );
        assert!(matches!(
            parse_duration("400d"),
            Err(DurationError::TooLong(_))
        ));
    }

    proptest! {
        #[test]
        fn format_then_parse_round_trips(secs in 0i64..MAX_DURATION_SECS) {
            prop_assert_eq!(parse_duration(&format_duration(secs)), Ok(secs));
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,20}") {
            let _ = parse_duration(&s);
        }
    }
}
