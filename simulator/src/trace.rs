//! Reading job traces: the Helios and Philly files in `shared/traces`, and the
//! plain site CSV format.
//!
//! # Site CSV format (`--format csv`)
//!
//! One job per line, comma separated, no quoting, with a header line naming
//! the columns (any order; extra columns are ignored):
//!
//! | column | meaning |
//! |---|---|
//! | `job_id` | any text without commas, unique per trace |
//! | `user` | user name (leaf of the fair-share tree) |
//! | `team` | Slurm account (team) charged |
//! | `submit_time` | seconds (integer or decimal) on any common origin |
//! | `gpus` | GPUs requested (jobs with 0 GPUs are skipped and counted) |
//! | `duration_s` | seconds of work the job needs (its real run time) |
//! | `min_runtime_s` (optional) | declared minimum runtime: seconds, or a duration such as `2h30m`; empty: the `--min-runtime-rule` applies |
//! | `free` (optional) | `1`/`true`/`yes` opts the job into the free tier |
//! | `checkpoint_s` (optional) | the job checkpoints this often and declares it (`checkpoint=` in its comment): seconds or a duration; empty: `--checkpoint-interval` |
//!
//! Blank lines and lines starting with `#` are skipped. A `sacct` export maps
//! as `sacct -a -X -P --delimiter=, -o JobID,User,Account,Submit,AllocTRES,Elapsed`
//! followed by converting `Submit` to epoch seconds, `Elapsed` to seconds and
//! the `gres/gpu=` part of `AllocTRES` to a count.
//!
//! Every parse error names the file and the 1-based line number.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::rng::{Purpose, unit};

/// Input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// `helios_venus_2vc_sept.csv` (SenseTime Helios, submit times in µs).
    Helios,
    /// `philly_jobs_rfold.csv` (Microsoft Philly: arrival, size, duration; no teams).
    Philly,
    /// The site CSV format documented in this module.
    Csv,
}

impl Format {
    /// Guesses the format from the file name when `--format` is not given.
    pub fn guess(path: &Path) -> Format {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().to_ascii_lowercase())
            .unwrap_or_default();
        if name.contains("helios") {
            Format::Helios
        } else if name.contains("philly") {
            Format::Philly
        } else {
            Format::Csv
        }
    }
}

/// One job as the trace describes it.
#[derive(Debug, Clone, PartialEq)]
pub struct JobSpec {
    pub id: String,
    pub user: String,
    pub team: String,
    /// Seconds, re-based so that the first submission is at 0.
    pub submit: i64,
    pub gpus: u32,
    /// Seconds of work (>= 0).
    pub duration: i64,
    /// Declared minimum runtime, if the trace has one.
    pub min_runtime: Option<i64>,
    pub free: bool,
    /// Checkpoint interval the job keeps and declares, if the trace has one.
    pub checkpoint: Option<i64>,
    /// Requested time limit (seconds), if the trace has one (a site's own
    /// ledger does); `None`: drawn by the time-limit model (`--time-limits`).
    pub limit: Option<i64>,
}

/// A parsed trace and what was done to it on the way in.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    /// Sorted by (submit, input order).
    pub jobs: Vec<JobSpec>,
    /// Human-readable notes printed with every result (skipped lines, team assignment).
    pub notes: Vec<String>,
    /// Team allocations in GPUs that the trace's source documents, if any.
    pub default_shares: Option<BTreeMap<String, f64>>,
}

/// Why a trace or quota file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum TraceError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: {msg}")]
    Line {
        path: PathBuf,
        line: usize,
        msg: String,
    },
    #[error("{path}: {msg}")]
    File { path: PathBuf, msg: String },
}

/// Quotas from SOURCES.md for the Helios Venus September slice (GPUs).
pub const HELIOS_QUOTAS: [(&str, f64); 2] = [("vcvGl", 160.0), ("vcvlY", 16.0)];

fn read(path: &Path) -> Result<String, TraceError> {
    std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a trace file in `format`.
pub fn load(path: &Path, format: Format) -> Result<Trace, TraceError> {
    let text = read(path)?;
    parse(&text, path, format)
}

/// Parses trace text; `path` only names the source in errors.
pub fn parse(text: &str, path: &Path, format: Format) -> Result<Trace, TraceError> {
    let mut trace = match format {
        Format::Helios => parse_helios(text, path)?,
        Format::Philly => parse_philly(text, path)?,
        Format::Csv => parse_csv(text, path)?,
    };
    // Stable sort keeps input order among equal submit times: determinism.
    trace.jobs.sort_by_key(|j| j.submit);
    if let Some(t0) = trace.jobs.first().map(|j| j.submit) {
        for j in &mut trace.jobs {
            j.submit -= t0;
        }
    }
    Ok(trace)
}

/// Data lines with their 1-based line numbers: blank and `#` lines skipped.
fn data_lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')))
        .filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
}

struct LineCtx<'a> {
    path: &'a Path,
    line: usize,
}

impl LineCtx<'_> {
    fn err(&self, msg: impl Into<String>) -> TraceError {
        TraceError::Line {
            path: self.path.to_path_buf(),
            line: self.line,
            msg: msg.into(),
        }
    }

    fn field<'f>(&self, fields: &[&'f str], idx: usize, name: &str) -> Result<&'f str, TraceError> {
        fields.get(idx).map(|s| s.trim()).ok_or_else(|| {
            self.err(format!(
                "missing column {name:?} (line has {} fields)",
                fields.len()
            ))
        })
    }

    /// A finite, non-negative decimal number.
    fn number(&self, fields: &[&str], idx: usize, name: &str) -> Result<f64, TraceError> {
        let s = self.field(fields, idx, name)?;
        match s.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
            _ => Err(self.err(format!(
                "column {name:?}: expected a number >= 0, got {s:?}"
            ))),
        }
    }

    /// An optional duration column: seconds or a duration such as `2h30m`; empty: none.
    fn duration(
        &self,
        fields: &[&str],
        idx: Option<usize>,
        name: &str,
    ) -> Result<Option<i64>, TraceError> {
        match idx.and_then(|c| fields.get(c)).map(|s| s.trim()) {
            None | Some("") => Ok(None),
            Some(s) => Ok(Some(match s.parse::<i64>() {
                Ok(v) if v >= 0 => v,
                Ok(_) => return Err(self.err(format!("column {name:?}: negative value {s:?}"))),
                Err(_) => policy_core::parse_duration(s)
                    .map_err(|e| self.err(format!("column {name:?}: {e}")))?,
            })),
        }
    }

    fn count(&self, fields: &[&str], idx: usize, name: &str) -> Result<u32, TraceError> {
        let s = self.field(fields, idx, name)?;
        s.parse::<u32>().map_err(|_| {
            self.err(format!(
                "column {name:?}: expected a whole number >= 0, got {s:?}"
            ))
        })
    }
}

/// Seconds as an integer: traces give decimals, the simulator counts whole seconds.
fn secs(v: f64) -> i64 {
    v.round() as i64
}

fn header_index(header: &str) -> BTreeMap<String, usize> {
    header
        .trim_start_matches('#')
        .split(',')
        .enumerate()
        .map(|(i, h)| (h.trim().to_ascii_lowercase(), i))
        .collect()
}

fn require(
    cols: &BTreeMap<String, usize>,
    name: &str,
    path: &Path,
    line: usize,
) -> Result<usize, TraceError> {
    cols.get(name).copied().ok_or_else(|| TraceError::Line {
        path: path.to_path_buf(),
        line,
        msg: format!("header lacks column {name:?}"),
    })
}

fn parse_helios(text: &str, path: &Path) -> Result<Trace, TraceError> {
    let mut lines = data_lines(text);
    let (hline, header) = lines.next().ok_or_else(|| TraceError::File {
        path: path.to_path_buf(),
        msg: "empty trace".into(),
    })?;
    let cols = header_index(header);
    let c_id = require(&cols, "job_id", path, hline)?;
    let c_user = require(&cols, "user", path, hline)?;
    let c_team = require(&cols, "tenant", path, hline)?;
    let c_submit = require(&cols, "submit_time", path, hline)?;
    let c_gpus = require(&cols, "num_chips", path, hline)?;
    let c_dur = require(&cols, "duration_s", path, hline)?;
    let mut trace = Trace {
        default_shares: Some(
            HELIOS_QUOTAS
                .iter()
                .map(|&(t, g)| (t.to_string(), g))
                .collect(),
        ),
        ..Trace::default()
    };
    let mut skipped = 0usize;
    for (line, l) in lines {
        let ctx = LineCtx { path, line };
        let f: Vec<&str> = l.split(',').collect();
        let gpus = ctx.count(&f, c_gpus, "num_chips")?;
        let job = JobSpec {
            id: ctx.field(&f, c_id, "job_id")?.to_string(),
            user: ctx.field(&f, c_user, "user")?.to_string(),
            team: ctx.field(&f, c_team, "tenant")?.to_string(),
            // Helios submit times are microseconds.
            submit: (ctx.number(&f, c_submit, "submit_time")? / 1e6).floor() as i64,
            gpus,
            duration: secs(ctx.number(&f, c_dur, "duration_s")?),
            min_runtime: None,
            free: false,
            checkpoint: None,
            limit: None,
        };
        if gpus == 0 {
            skipped += 1;
            continue;
        }
        trace.jobs.push(job);
    }
    if skipped > 0 {
        trace
            .notes
            .push(format!("{skipped} jobs without GPUs skipped"));
    }
    Ok(trace)
}

fn parse_philly(text: &str, path: &Path) -> Result<Trace, TraceError> {
    // `#job id,arrival time (sec),topology,shape,size,duration (sec)`: fixed columns.
    let mut trace = Trace::default();
    for (line, l) in data_lines(text) {
        let ctx = LineCtx { path, line };
        let f: Vec<&str> = l.split(',').collect();
        if f.len() < 6 {
            return Err(ctx.err(format!(
                "expected 6 columns (job id, arrival, topology, shape, size, duration), got {}",
                f.len()
            )));
        }
        let gpus = ctx.count(&f, 4, "size")?;
        if gpus == 0 {
            return Err(ctx.err("column \"size\": a job needs at least one GPU"));
        }
        trace.jobs.push(JobSpec {
            id: ctx.field(&f, 0, "job id")?.to_string(),
            // Teams are assigned later (assign_teams): Philly has none.
            user: String::new(),
            team: String::new(),
            submit: secs(ctx.number(&f, 1, "arrival time")?),
            gpus,
            duration: secs(ctx.number(&f, 5, "duration")?),
            min_runtime: None,
            free: false,
            checkpoint: None,
            limit: None,
        });
    }
    Ok(trace)
}

fn parse_bool(s: &str) -> Option<bool> {
    match s.to_ascii_lowercase().as_str() {
        "" | "0" | "false" | "no" | "n" => Some(false),
        "1" | "true" | "yes" | "y" | "free" => Some(true),
        _ => None,
    }
}

fn parse_csv(text: &str, path: &Path) -> Result<Trace, TraceError> {
    let mut lines = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim_end_matches('\r')));
    // The header is the first non-blank line (it may not start with '#').
    let (hline, header) = lines
        .by_ref()
        .find(|(_, l)| !l.trim().is_empty())
        .ok_or_else(|| TraceError::File {
            path: path.to_path_buf(),
            msg: "empty trace".into(),
        })?;
    let cols = header_index(header);
    let c_id = require(&cols, "job_id", path, hline)?;
    let c_user = require(&cols, "user", path, hline)?;
    let c_team = require(&cols, "team", path, hline)?;
    let c_submit = require(&cols, "submit_time", path, hline)?;
    let c_gpus = require(&cols, "gpus", path, hline)?;
    let c_dur = require(&cols, "duration_s", path, hline)?;
    let c_min = cols.get("min_runtime_s").copied();
    let c_free = cols.get("free").copied();
    let c_ckpt = cols.get("checkpoint_s").copied();
    let mut trace = Trace::default();
    let mut skipped = 0usize;
    let mut seen = std::collections::BTreeSet::new();
    for (line, l) in lines.filter(|(_, l)| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
    {
        let ctx = LineCtx { path, line };
        let f: Vec<&str> = l.split(',').collect();
        let id = ctx.field(&f, c_id, "job_id")?;
        let user = ctx.field(&f, c_user, "user")?;
        let team = ctx.field(&f, c_team, "team")?;
        if id.is_empty() || user.is_empty() || team.is_empty() {
            return Err(ctx.err("job_id, user and team must not be empty"));
        }
        if !seen.insert(id.to_string()) {
            return Err(ctx.err(format!("duplicate job_id {id:?}")));
        }
        let min_runtime = ctx.duration(&f, c_min, "min_runtime_s")?;
        let checkpoint = match ctx.duration(&f, c_ckpt, "checkpoint_s")? {
            Some(0) => return Err(ctx.err("column \"checkpoint_s\": must be longer than 0")),
            c => c,
        };
        let free = match c_free.and_then(|c| f.get(c)).map(|s| s.trim()) {
            None => false,
            Some(s) => parse_bool(s).ok_or_else(|| {
                ctx.err(format!(
                    "column \"free\": expected 0/1/true/false, got {s:?}"
                ))
            })?,
        };
        let gpus = ctx.count(&f, c_gpus, "gpus")?;
        let job = JobSpec {
            id: id.to_string(),
            user: user.to_string(),
            team: team.to_string(),
            submit: secs(ctx.number(&f, c_submit, "submit_time")?),
            gpus,
            duration: secs(ctx.number(&f, c_dur, "duration_s")?),
            min_runtime,
            free,
            checkpoint,
            limit: None,
        };
        if gpus == 0 {
            skipped += 1;
            continue;
        }
        trace.jobs.push(job);
    }
    if skipped > 0 {
        trace
            .notes
            .push(format!("{skipped} jobs without GPUs skipped"));
    }
    Ok(trace)
}

/// Reads a quota file: a header line, then `name,count` lines. When the header
/// mentions nodes (`vc,node num` as in `philly_vc_quota.csv`) counts are nodes
/// and are multiplied by `gpus_per_node`; otherwise they are GPUs.
pub fn load_quotas(path: &Path, gpus_per_node: u32) -> Result<BTreeMap<String, f64>, TraceError> {
    let text = read(path)?;
    parse_quotas(&text, path, gpus_per_node)
}

/// See [`load_quotas`].
pub fn parse_quotas(
    text: &str,
    path: &Path,
    gpus_per_node: u32,
) -> Result<BTreeMap<String, f64>, TraceError> {
    let mut lines = data_lines(text);
    let (_, header) = lines.next().ok_or_else(|| TraceError::File {
        path: path.to_path_buf(),
        msg: "empty quota file".into(),
    })?;
    let per = if header.to_ascii_lowercase().contains("node") {
        f64::from(gpus_per_node)
    } else {
        1.0
    };
    let mut out = BTreeMap::new();
    for (line, l) in lines {
        let ctx = LineCtx { path, line };
        let f: Vec<&str> = l.split(',').collect();
        let name = ctx.field(&f, 0, "name")?;
        let n = ctx.number(&f, 1, "count")?;
        if name.is_empty() || out.insert(name.to_string(), n * per).is_some() {
            return Err(ctx.err(format!("empty or repeated name {name:?}")));
        }
    }
    if out.is_empty() {
        return Err(TraceError::File {
            path: path.to_path_buf(),
            msg: "no quotas".into(),
        });
    }
    Ok(out)
}

/// Gives every job without a team one drawn from `quotas` with probability
/// proportional to the quota, reproducibly from `seed` and the job's position;
/// the user is the team (Philly has no users either).
pub fn assign_teams(trace: &mut Trace, quotas: &BTreeMap<String, f64>, seed: u64) -> usize {
    let total: f64 = quotas.values().sum();
    let mut assigned = 0;
    if total <= 0.0 {
        return 0;
    }
    for (i, job) in trace.jobs.iter_mut().enumerate() {
        if !job.team.is_empty() {
            continue;
        }
        let x = unit(seed, i as u64, Purpose::Team) * total;
        let mut acc = 0.0;
        let mut pick = quotas.keys().next_back().cloned().unwrap_or_default();
        for (name, q) in quotas {
            acc += q;
            if x < acc {
                pick = name.clone();
                break;
            }
        }
        job.team = pick.clone();
        job.user = pick;
        assigned += 1;
    }
    if assigned > 0 {
        trace.notes.push(format!(
            "teams are NOT in the trace: {assigned} jobs were assigned to teams at random (seed {seed}) in proportion to their quotas"
        ));
    }
    assigned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str, f: Format) -> Result<Trace, TraceError> {
        parse(text, Path::new("t.csv"), f)
    }

    #[test]
    fn csv_reads_optional_columns_and_rebases_time() {
        let t = p(
            "job_id,user,team,submit_time,gpus,duration_s,min_runtime_s,free,checkpoint_s\n\
             # comment\n\
             a,u1,t1,1000,2,3600,2h,0,30m\n\
             b,u2,t2,900,1,60,,yes,\n\
             c,u2,t2,950,0,60,,\n",
            Format::Csv,
        )
        .unwrap();
        assert_eq!(t.jobs.len(), 2);
        assert_eq!(
            (t.jobs[0].id.as_str(), t.jobs[0].submit, t.jobs[0].free),
            ("b", 0, true)
        );
        assert_eq!((t.jobs[1].submit, t.jobs[1].min_runtime), (100, Some(7200)));
        assert_eq!(
            (t.jobs[0].checkpoint, t.jobs[1].checkpoint),
            (None, Some(1800))
        );
        assert_eq!(t.notes, vec!["1 jobs without GPUs skipped".to_string()]);
    }

    #[test]
    fn bad_lines_name_their_line_number() {
        let head = "job_id,user,team,submit_time,gpus,duration_s,min_runtime_s,free,checkpoint_s\n";
        let cases = [
            (
                format!("{head}a,u,t,0,1,10\nb,u,t,x,1,10\n"),
                3,
                "submit_time",
            ),
            (format!("{head}\na,u,t,0,-1,10\n"), 3, "gpus"),
            (format!("{head}a,u,t,0,1\n"), 2, "missing column"),
            (format!("{head}a,u,t,0,1,10,4x\n"), 2, "accepted forms"),
            (format!("{head}a,u,t,0,1,10,,maybe\n"), 2, "free"),
            (format!("{head}a,u,t,0,1,10,,0,0\n"), 2, "checkpoint_s"),
            (format!("{head}a,u,t,0,1,10,,0,soon\n"), 2, "checkpoint_s"),
            (
                format!("{head}a,u,t,0,1,10\na,u,t,0,1,10\n"),
                3,
                "duplicate",
            ),
            (format!("{head}a,u,t,0,1,-5\n"), 2, "duration_s"),
            ("job_id,user,submit_time\n".to_string(), 1, "team"),
        ];
        for (text, line, needle) in cases {
            let e = p(&text, Format::Csv).expect_err(&text).to_string();
            assert!(e.starts_with(&format!("t.csv:{line}: ")), "{e}");
            assert!(e.contains(needle), "{e}");
        }
        let e = p(
            "#h\n0,0.0,CLOS,1,1,5\n1,2.0,CLOS,1,zero,5\n",
            Format::Philly,
        )
        .unwrap_err()
        .to_string();
        assert!(e.starts_with("t.csv:3: ") && e.contains("size"), "{e}");
    }

    #[test]
    fn helios_and_philly_shapes() {
        let h = "# c\njob_id,user,tenant,class,submit_time,num_chips,chip_type,num_nodes,duration_s,walltime_limit_s,final_status\n\
                 1,uA,vcvGl,x,5000000,8,,1,10.4,10.4,COMPLETED\n2,uB,vcvlY,x,2000000,1,,1,3.0,3.0,FAILED\n";
        let t = p(h, Format::Helios).unwrap();
        assert_eq!((t.jobs[0].id.as_str(), t.jobs[0].submit), ("2", 0));
        assert_eq!(
            (
                t.jobs[1].submit,
                t.jobs[1].duration,
                t.jobs[1].team.as_str()
            ),
            (3, 10, "vcvGl")
        );
        assert!(t.default_shares.is_some());
        let mut ph = p("#job id,arrival time (sec),topology,shape,size,duration (sec)\n0,0.0,CLOS,1,1,5.0\n1,3.0,CLOS,1,8,9\n", Format::Philly).unwrap();
        let q = parse_quotas("vc,node num\na,3\nb,1\n", Path::new("q"), 8).unwrap();
        assert_eq!(q["a"], 24.0);
        assert_eq!(assign_teams(&mut ph, &q, 1), 2);
        assert!(ph.jobs.iter().all(|j| j.team == "a" || j.team == "b"));
        assert!(ph.notes[0].contains("NOT in the trace"));
    }

    #[test]
    fn team_assignment_follows_quotas() {
        let mut t = Trace {
            jobs: (0..20_000)
                .map(|i| JobSpec {
                    id: i.to_string(),
                    user: String::new(),
                    team: String::new(),
                    submit: i,
                    gpus: 1,
                    duration: 1,
                    min_runtime: None,
                    free: false,
                    checkpoint: None,
                    limit: None,
                })
                .collect(),
            ..Trace::default()
        };
        let q: BTreeMap<String, f64> = [("a".to_string(), 3.0), ("b".to_string(), 1.0)]
            .into_iter()
            .collect();
        assign_teams(&mut t, &q, 7);
        let a = t.jobs.iter().filter(|j| j.team == "a").count() as f64 / 20_000.0;
        assert!((a - 0.75).abs() < 0.02, "{a}");
    }
}
