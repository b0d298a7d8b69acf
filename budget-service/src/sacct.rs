//! Parsing `sacct` history for `usage import` (pure: no I/O, no clock).
//!
//! Input is the output of
//! `sacct -X -D -P -o JobID,Account,User,Partition,AllocTRES,Start,End,State`:
//! a header line naming the columns (any order; extra columns ignored;
//! `JobIDRaw` used when present), then one `|`-separated line per job run.
//!
//! Decisions (documented in `budgetctl usage import --help` too):
//! - GPUs come from `gres/gpu:TYPE=N` (typed, preferred) or `gres/gpu=N` in
//!   AllocTRES; no GPU entry means 0 GPUs (recorded, charges nothing).
//! - Start/End are sacct's `YYYY-MM-DDTHH:MM:SS` in the given time zone;
//!   `Unknown`/`None`/empty mean "not yet" (End of a RUNNING job).
//! - Run numbers: `-D` lists every run of a requeued job as its own line; the
//!   runs of one job are numbered 0, 1, ... by Start. Identical duplicate lines
//!   count once. So re-importing the same file yields the same keys.
//! - Array tasks `123_4` (without `JobIDRaw`) are keyed `(123, 2^30 + 4*256 + n)`
//!   (n: the task's run); plugin-synced runs never reach 2^30, so keys never
//!   collide. With a `JobIDRaw` column the task's own job id is used instead.
//! - PENDING lines, runs that never started and RUNNING array tasks without
//!   `JobIDRaw` (their key could never match the plugin's, so they would never
//!   be closed; the plugin's sync records them) are skipped, with the reason;
//!   heterogeneous components (`123+1`) are errors.
//! - Unknown accounts are errors of their line.

use std::collections::BTreeMap;

use budget_protocol::RunState;
use budget_protocol::reports::LineError;
use jiff::tz::TimeZone;

use crate::ledger::RunRecord;

/// Marks run numbers of array tasks keyed by the array's job id.
pub const ARRAY_RUN_BASE: u32 = 1 << 30;

/// The result of parsing a whole file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// Non-empty data lines read (the header excluded).
    pub lines: usize,
    pub records: Vec<RunRecord>,
    pub invalid: Vec<LineError>,
    /// Lines deliberately not imported (pending, never started), with why.
    pub skipped: Vec<LineError>,
}

/// Columns we need (or may use).
const REQUIRED: [&str; 7] = [
    "jobid",
    "account",
    "user",
    "alloctres",
    "start",
    "end",
    "state",
];

struct Line {
    line: usize,
    job_id: u32,
    array_task: Option<u32>,
    account: String,
    user: String,
    partition: Option<String>,
    gpus: u32,
    gpu_type: Option<String>,
    start: i64,
    end: Option<i64>,
    state: RunState,
}

/// Parses sacct text. `known_account` says whether an account exists;
/// `now` becomes the records' `first_seen`. A bad header fails the whole file.
pub fn parse(
    text: &str,
    tz: &TimeZone,
    known_account: &dyn Fn(&str) -> bool,
    now: i64,
) -> Result<Parsed, LineError> {
    let mut out = Parsed::default();
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
    let (header_no, header) =
        lines
            .by_ref()
            .find(|(_, l)| !l.trim().is_empty())
            .ok_or(LineError {
                line: 1,
                error: "empty file: expected a sacct header line".into(),
            })?;
    let cols: Vec<String> = header
        .split('|')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let col = |name: &str| cols.iter().position(|c| c == name);
    let missing: Vec<&str> = REQUIRED
        .iter()
        .copied()
        .filter(|c| col(c).is_none())
        .collect();
    if !missing.is_empty() {
        return Err(LineError {
            line: header_no,
            error: format!(
                "header lacks column(s) {}; produce the file with \
                 sacct -X -D -P -o JobID,Account,User,Partition,AllocTRES,Start,End,State",
                missing.join(", ")
            ),
        });
    }
    let idx = |name: &str| col(name).unwrap_or(usize::MAX);
    let (c_job, c_acc, c_user, c_tres, c_start, c_end, c_state) = (
        idx("jobid"),
        idx("account"),
        idx("user"),
        idx("alloctres"),
        idx("start"),
        idx("end"),
        idx("state"),
    );
    let (c_part, c_raw) = (col("partition"), col("jobidraw"));

    let mut good: Vec<Line> = Vec::new();
    for (no, text) in lines {
        if text.trim().is_empty() {
            continue;
        }
        out.lines += 1;
        let fields: Vec<&str> = text.split('|').collect();
        if fields.len() != cols.len() {
            out.invalid.push(LineError {
                line: no,
                error: format!(
                    "expected {} '|'-separated fields, found {}",
                    cols.len(),
                    fields.len()
                ),
            });
            continue;
        }
        let f = |i: usize| fields.get(i).map_or("", |s| s.trim());
        match parse_line(
            &f,
            (c_job, c_acc, c_user, c_tres, c_start, c_end, c_state),
            c_part,
            c_raw,
            tz,
            known_account,
        ) {
            Ok(Ok(mut l)) => {
                l.line = no;
                good.push(l);
            }
            Ok(Err(why)) => out.skipped.push(LineError {
                line: no,
                error: why,
            }),
            Err(e) => out.invalid.push(LineError { line: no, error: e }),
        }
    }

    // Number the runs of each job by start; identical duplicates count once.
    let mut by_job: BTreeMap<(u32, Option<u32>), Vec<Line>> = BTreeMap::new();
    for l in good {
        by_job.entry((l.job_id, l.array_task)).or_default().push(l);
    }
    for ((job_id, task), mut runs) in by_job {
        runs.sort_by_key(|l| (l.start, l.line));
        // One job and one start is one run, whatever its lines say about its
        // end: a RUNNING line and the COMPLETED line of the same run (sacct
        // read twice) keep the one that ended. Lines of one start that differ
        // in who ran it, its GPUs, or two different ends, are errors.
        let mut merged: Vec<Line> = Vec::with_capacity(runs.len());
        for l in runs {
            match merged.last_mut() {
                Some(a) if a.start == l.start => {
                    if let Some(why) = same_run(a, &l) {
                        out.invalid.push(LineError {
                            line: l.line,
                            error: format!(
                                "job {job_id} has another line (line {}) with the same Start: {why}",
                                a.line
                            ),
                        });
                    } else if a.end.is_none() && l.end.is_some() {
                        *a = l;
                    }
                }
                _ => merged.push(l),
            }
        }
        for (n, l) in merged.into_iter().enumerate() {
            let run = match task {
                None => u32::try_from(n).unwrap_or(u32::MAX),
                Some(t) if t < (1 << 22) && n < 256 => ARRAY_RUN_BASE + t * 256 + n as u32,
                Some(_) => {
                    out.invalid.push(LineError {
                        line: l.line,
                        error: "array task id or requeue count too large".into(),
                    });
                    continue;
                }
            };
            let line = l.line;
            let rec = RunRecord {
                job_id,
                run,
                // sacct's Submit is not read: an imported run matches the
                // latest stored submission of its id and run, and a different
                // job stored there is reported as a conflict.
                submit: 0,
                rerun: 0,
                account: l.account,
                user: l.user,
                partition: l.partition,
                gpus: l.gpus,
                gpu_type: l.gpu_type,
                start: Some(l.start),
                end: l.end,
                free_tier: false,
                min_runtime_secs: 0,
                nodes: None,
                state: l.state,
                first_seen: now,
                time_limit_secs: None,
                checkpoint_secs: None,
            };
            // The checks a synced run gets (bounded GPUs and times,
            // printable names).
            match rec.check_all() {
                Ok(()) => out.records.push(rec),
                Err(error) => out.invalid.push(LineError { line, error }),
            }
        }
    }
    out.invalid.sort_by_key(|e| e.line);
    Ok(out)
}

/// Why two lines with the same job and Start are not the same run.
fn same_run(a: &Line, b: &Line) -> Option<String> {
    if a.account != b.account || a.user != b.user {
        return Some(format!(
            "{}/{} and {}/{}",
            a.account, a.user, b.account, b.user
        ));
    }
    if a.gpus != b.gpus || a.gpu_type != b.gpu_type {
        return Some(format!("{} and {} GPUs", a.gpus, b.gpus));
    }
    match (a.end, b.end) {
        (Some(x), Some(y)) if x != y => Some(format!("two different Ends ({x} and {y})")),
        _ => None,
    }
}

type Cols = (usize, usize, usize, usize, usize, usize, usize);

fn parse_line<'a>(
    f: &dyn Fn(usize) -> &'a str,
    (c_job, c_acc, c_user, c_tres, c_start, c_end, c_state): Cols,
    c_part: Option<usize>,
    c_raw: Option<usize>,
    tz: &TimeZone,
    known_account: &dyn Fn(&str) -> bool,
) -> Result<Result<Line, String>, String> {
    let state_text = f(c_state);
    let state_word = state_text
        .split_whitespace()
        .next()
        .unwrap_or("")
        .to_ascii_uppercase();
    let state = match state_word.as_str() {
        "PENDING" => return Ok(Err("pending".into())),
        "RUNNING" | "SUSPENDED" => RunState::Running,
        "REQUEUED" | "REQUEUE_HOLD" | "REQUEUE_FED" | "PREEMPTED" => RunState::Requeued,
        "COMPLETED" | "FAILED" | "CANCELLED" | "TIMEOUT" | "NODE_FAIL" | "OUT_OF_MEMORY"
        | "BOOT_FAIL" | "DEADLINE" | "REVOKED" => RunState::Ended,
        _ => return Err(format!("unknown State {state_text:?}")),
    };
    let (job_id, array_task) = parse_job_id(f(c_job))?;
    let job_id = match c_raw {
        Some(c) => {
            let raw = f(c);
            let id = raw
                .parse::<u32>()
                .map_err(|_| format!("bad JobIDRaw {raw:?}: expected a number"))?;
            return finish(
                id,
                None,
                f,
                (c_acc, c_user, c_tres, c_start, c_end),
                c_part,
                state,
                tz,
                known_account,
            );
        }
        None => job_id,
    };
    finish(
        job_id,
        array_task,
        f,
        (c_acc, c_user, c_tres, c_start, c_end),
        c_part,
        state,
        tz,
        known_account,
    )
}

#[allow(clippy::too_many_arguments)]
fn finish<'a>(
    job_id: u32,
    array_task: Option<u32>,
    f: &dyn Fn(usize) -> &'a str,
    (c_acc, c_user, c_tres, c_start, c_end): (usize, usize, usize, usize, usize),
    c_part: Option<usize>,
    state: RunState,
    tz: &TimeZone,
    known_account: &dyn Fn(&str) -> bool,
) -> Result<Result<Line, String>, String> {
    let account = f(c_acc).to_ascii_lowercase();
    if account.is_empty() {
        return Err("empty Account".into());
    }
    if !known_account(&account) {
        return Err(format!(
            "unknown account {account:?} (create it first with budgetctl account add)"
        ));
    }
    let user = f(c_user).to_string();
    if user.is_empty() || user.len() > 128 {
        return Err("User must be 1-128 characters".into());
    }
    let (gpus, gpu_type) = parse_tres(f(c_tres))?;
    let start = parse_sacct_time("Start", f(c_start), tz)?;
    let end = parse_sacct_time("End", f(c_end), tz)?;
    let Some(start) = start else {
        return Ok(Err("never started (cancelled before start)".into()));
    };
    if state == RunState::Running && array_task.is_some() {
        // Its key here cannot match the one the plugin will sync (the task's
        // own job id), so it would never be closed: the plugin records it.
        return Ok(Err(
            "running array task without JobIDRaw: the plugin's sync records it".into(),
        ));
    }
    match (state, end) {
        (RunState::Running, Some(_)) => return Err("a RUNNING line cannot have an End time".into()),
        (RunState::Ended | RunState::Requeued, None) => {
            return Err(format!("State {} needs an End time", state.as_str()));
        }
        (_, Some(e)) if e < start => {
            return Err(format!(
                "End is before Start ({} < {})",
                f(c_end),
                f(c_start)
            ));
        }
        _ => {}
    }
    let partition = c_part.map(f).filter(|p| !p.is_empty()).map(str::to_string);
    Ok(Ok(Line {
        line: 0,
        job_id,
        array_task,
        account,
        user,
        partition,
        gpus,
        gpu_type,
        start,
        end,
        state,
    }))
}

/// `123` or `123_4`.
fn parse_job_id(s: &str) -> Result<(u32, Option<u32>), String> {
    let bad = || format!("bad JobID {s:?}: expected 123 or 123_4 (array task)");
    if s.contains('+') {
        return Err(format!(
            "heterogeneous job component {s:?} is not supported"
        ));
    }
    match s.split_once('_') {
        None => Ok((s.parse().map_err(|_| bad())?, None)),
        Some((j, t)) => Ok((
            j.parse().map_err(|_| bad())?,
            Some(t.parse().map_err(|_| bad())?),
        )),
    }
}

/// GPUs and type from AllocTRES (`billing=8,cpu=8,gres/gpu:h100=4,gres/gpu=4,mem=64G`).
pub fn parse_tres(s: &str) -> Result<(u32, Option<String>), String> {
    let mut plain: Option<u32> = None;
    let mut typed: Option<(u32, String)> = None;
    for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!("bad AllocTRES item {item:?}: expected KEY=VALUE"));
        };
        let n = || {
            value
                .parse::<u32>()
                .map_err(|_| format!("bad GPU count in AllocTRES item {item:?}"))
        };
        if key == "gres/gpu" {
            plain = Some(n()?);
        } else if let Some(t) = key.strip_prefix("gres/gpu:") {
            if t.is_empty() {
                return Err(format!("bad AllocTRES item {item:?}: empty GPU type"));
            }
            let count = n()?;
            // Several typed entries on one job: keep the largest as the type.
            if typed.as_ref().is_none_or(|(c, _)| count > *c) {
                typed = Some((count, t.to_ascii_lowercase()));
            }
        }
    }
    Ok(match (typed, plain) {
        (Some((c, t)), p) => (p.unwrap_or(c).max(c), Some(t)),
        (None, Some(p)) => (p, None),
        (None, None) => (0, None),
    })
}

fn parse_sacct_time(field: &str, s: &str, tz: &TimeZone) -> Result<Option<i64>, String> {
    match s {
        "" | "Unknown" | "None" | "N/A" => Ok(None),
        _ => budget_protocol::time::parse_civil(s, tz)
            .map(Some)
            .ok_or_else(|| {
                format!("bad {field} {s:?}: expected YYYY-MM-DDTHH:MM:SS, Unknown or None")
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HEADER: &str = "JobID|Account|User|Partition|AllocTRES|Start|End|State";

    fn p(body: &str) -> Parsed {
        parse(
            &format!("{HEADER}\n{body}"),
            &TimeZone::UTC,
            &|a| a == "teama" || a == "teamb",
            99,
        )
        .expect("parse")
    }

    #[test]
    fn reads_gpus_times_requeues_and_arrays() {
        let out = p(
            "10|teama|alice|gpu|billing=4,cpu=4,gres/gpu:h100=4,gres/gpu=4|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
                     11|teamb|bob|gpu|gres/gpu=2|2026-01-01T00:00:00|Unknown|RUNNING\n\
                     12|teama|alice|gpu|gres/gpu=1|2026-01-01T02:00:00|2026-01-01T03:00:00|COMPLETED\n\
                     12|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|REQUEUED\n\
                     13_7|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T00:10:00|CANCELLED by 0\n\
                     14|teama|alice|gpu|gres/gpu=1|Unknown|Unknown|PENDING\n\
                     15_2|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|Unknown|RUNNING\n",
        );
        assert!(out.invalid.is_empty(), "{:?}", out.invalid);
        assert_eq!(out.lines, 7);
        assert_eq!(out.skipped.len(), 2);
        assert!(out.skipped[1].error.contains("running array task"));
        let r10 = &out.records[0];
        assert_eq!(
            (r10.job_id, r10.run, r10.gpus, r10.gpu_type.as_deref()),
            (10, 0, 4, Some("h100"))
        );
        assert_eq!(r10.end.zip(r10.start).map(|(e, s)| e - s), Some(3600));
        let r11 = &out.records[1];
        assert_eq!((r11.state, r11.end), (RunState::Running, None));
        // Job 12: the earlier run is run 0 (requeued), the later run 1.
        assert_eq!(
            (out.records[2].run, out.records[2].state),
            (0, RunState::Requeued)
        );
        assert_eq!(
            (out.records[3].run, out.records[3].state),
            (1, RunState::Ended)
        );
        assert_eq!(
            (out.records[4].job_id, out.records[4].run),
            (13, ARRAY_RUN_BASE + 7 * 256)
        );
    }

    #[test]
    fn reports_bad_lines_with_numbers() {
        let out = p(
            "10|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
                     11|teama|alice|gpu|gres/gpu=1|2026-13-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
                     12|teama|alice\n\
                     13|nosuch|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
                     14|teama|alice|gpu|gres/gpu=x|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
                     15|teama|alice|gpu|gres/gpu=1|2026-01-01T02:00:00|2026-01-01T01:00:00|COMPLETED\n",
        );
        let lines: Vec<usize> = out.invalid.iter().map(|e| e.line).collect();
        assert_eq!(lines, vec![3, 4, 5, 6, 7]);
        assert!(out.invalid[0].error.contains("bad Start"));
        assert!(out.invalid[1].error.contains("expected 8"));
        assert!(out.invalid[2].error.contains("unknown account \"nosuch\""));
        assert_eq!(out.records.len(), 1);
        let err = parse("JobID|User\n1|a\n", &TimeZone::UTC, &|_| true, 0).expect_err("header");
        assert!(err.error.contains("account"));
    }

    #[test]
    fn tres_forms() {
        assert_eq!(parse_tres("gres/gpu=2"), Ok((2, None)));
        assert_eq!(
            parse_tres("gres/gpu:b300=8,gres/gpu=8"),
            Ok((8, Some("b300".into())))
        );
        assert_eq!(parse_tres("cpu=4,mem=1G"), Ok((0, None)));
        assert!(parse_tres("gres/gpu").is_err());
    }
}
