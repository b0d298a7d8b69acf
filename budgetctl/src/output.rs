//! How budgetctl prints: `--json` (the service's answer, keys sorted, pretty)
//! or text for people: aligned tables, trimmed numbers, local times.
//!
//! Why `--json` goes through a `serde_json::Value`: its keys print sorted,
//! which is what budgetctl has always printed; scripts diff and parse it.

use serde::Serialize;

use budget_protocol::time::{format_local, parse_time, zone};

use crate::args::UsageError;

/// The output mode of one invocation.
#[derive(Debug, Clone, Copy)]
pub struct Out {
    pub json: bool,
}

impl Out {
    /// Prints `v` as JSON (`--json`), or the text `human` makes of it.
    pub fn print<T: Serialize>(
        &self,
        v: &T,
        human: impl FnOnce(&T) -> String,
    ) -> anyhow::Result<()> {
        if self.json {
            print_json(v)
        } else {
            emit(&human(v))
        }
    }
}

/// Prints `v` as pretty JSON with sorted keys.
pub fn print_json<T: Serialize>(v: &T) -> anyhow::Result<()> {
    let value = serde_json::to_value(v)?;
    emit(&format!("{}\n", serde_json::to_string_pretty(&value)?))
}

/// Writes `text` to standard output. A reader that stopped reading
/// (`budgetctl share | head`) is not an error: the output it wanted is out,
/// and `println!` would panic with a backtrace instead.
pub fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => r.map_err(|e| anyhow::anyhow!("writing to standard output: {e}")),
    }
}

/// A TIME argument (`--at`, `--since`) as Unix seconds, read in this
/// machine's zone: the service never has to guess whose "local" was meant.
pub fn time_arg(name: &str, v: &str) -> anyhow::Result<i64> {
    let tz = zone(None).map_err(UsageError)?;
    parse_time(v, &tz).map_err(|e| UsageError(format!("--{name}: {e}")).into())
}

/// Unix seconds as a local civil time.
pub fn local(secs: i64) -> String {
    format_local(secs, &zone(None).unwrap_or(jiff::tz::TimeZone::UTC))
}

/// Now in Unix seconds (for "in 40 s" columns).
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}

/// Seconds from now, as "in 40 s" / "now".
pub fn eta(at: i64, now: i64) -> String {
    let d = at - now;
    if d <= 0 {
        "now".into()
    } else {
        format!("in {d} s")
    }
}

/// "2h 5m" / "40s": streak lengths read better than seconds.
pub fn dur(secs: i64) -> String {
    let (h, m, sec) = (secs / 3600, (secs % 3600) / 60, secs % 60);
    match (h, m) {
        (0, 0) => format!("{sec}s"),
        (0, _) => format!("{m}m"),
        _ => format!("{h}h {m}m"),
    }
}

/// An optional value, `-` when absent.
pub fn opt<T: std::fmt::Display>(v: Option<T>) -> String {
    v.map_or_else(|| "-".into(), |v| v.to_string())
}

/// Renders rows under headers, columns left-aligned and padded to the
/// widest cell, two spaces apart; numbers are right-aligned.
pub fn render(headers: &[&str], rows: &[Vec<String>]) -> String {
    let n = headers.len();
    let mut width: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate().take(n) {
            width[i] = width[i].max(c.chars().count());
        }
    }
    let numeric: Vec<bool> = (0..n)
        .map(|i| {
            !rows.is_empty()
                && rows.iter().all(|r| {
                    r.get(i)
                        .is_none_or(|c| c.is_empty() || c == "-" || c.parse::<f64>().is_ok())
                })
        })
        .collect();
    let mut out = String::new();
    let mut line = |cells: Vec<&str>, header: bool| {
        let mut l = String::new();
        for (i, c) in cells.iter().enumerate() {
            let pad = width[i].saturating_sub(c.chars().count());
            if i > 0 {
                l.push_str("  ");
            }
            if numeric[i] && !header {
                l.push_str(&" ".repeat(pad));
                l.push_str(c);
            } else {
                l.push_str(c);
                if i + 1 < cells.len() {
                    l.push_str(&" ".repeat(pad));
                }
            }
        }
        out.push_str(l.trim_end());
        out.push('\n');
    };
    line(headers.to_vec(), true);
    for r in rows {
        line(r.iter().map(String::as_str).collect(), false);
    }
    out
}

/// A number with up to `digits` decimals, trailing zeros dropped.
pub fn num(v: f64, digits: usize) -> String {
    if v >= 1e8 {
        return "inf".to_string();
    }
    let s = format!("{v:.digits$}");
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aligns_columns() {
        let t = render(
            &["NAME", "GPUH"],
            &[
                vec!["a".into(), "1.5".into()],
                vec!["bbbb".into(), "10".into()],
            ],
        );
        assert_eq!(t, "NAME  GPUH\na      1.5\nbbbb    10\n");
        assert_eq!(num(1.2500, 3), "1.25");
        assert_eq!(num(2.0, 3), "2");
    }

    #[test]
    fn durations() {
        assert_eq!(dur(40), "40s");
        assert_eq!(dur(1800), "30m");
        assert_eq!(dur(7500), "2h 5m");
        assert_eq!(eta(10, 4), "in 6 s");
        assert_eq!(eta(4, 10), "now");
    }
}
