//! The web view's what-if: the site's ledger replayed with one allocation
//! changed, by `budgetctl whatif` in a child process.
//!
//! budgetd must not link the simulator, so it runs the CLI that does:
//! `budgetctl whatif --input - --json --set ACCOUNT=CHANGE`. The child gets
//! no token and no socket: budgetd assembles its input itself
//! ([`input_for`], the documents `GET /v1/accounts`, `/v1/policy`,
//! `/v1/runs` and `/v1/usage?by=user` answer the viewer, from the handlers'
//! own functions with the viewer's scope) and writes it to the child's
//! stdin; the child prints its answer on stdout (read back as
//! `budget_protocol::whatif::Report`) and its progress on stderr, whose last
//! line the result page shows while it runs.
//!
//! One replay at a time ([`Whatifs::claim`]: a second request while one
//! runs is refused, not queued: a replay takes minutes of CPU on the
//! controller, and the child runs at a lower CPU priority so slurmctld's
//! syncs and snapshots keep theirs); a replay still running after
//! `[whatif] time_limit_secs` is killed. Results are kept in memory only, at
//! most `keep_results` of them for at most `keep_secs` each, and each is
//! shown only to the viewer who started it.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use budget_protocol::whatif::{Input, Report};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};

use crate::auth::Scope;
use crate::caller::{Caller, Role};
use crate::config::WhatifConfig;
use crate::store::Store;

/// A week in seconds (the form's unit of range).
pub const WEEK: i64 = 7 * 86_400;

/// The most weeks the form offers.
pub const MAX_WEEKS: u32 = 4;

/// The largest answer read from the child (a 1,000-team answer is far smaller).
const STDOUT_MAX: u64 = 64 << 20;

/// The longest progress line kept.
const LINE_MAX: usize = 500;

/// How much lower the child's CPU priority is (`nice`).
const CHILD_NICENESS: i32 = 10;

/// The `budgetctl` to run: `[whatif] budgetctl`, else the one beside
/// budgetd's own executable, else the first on `PATH`; `Err` says why none
/// is usable, in words for the page.
pub fn find_budgetctl(cfg: &WhatifConfig) -> Result<PathBuf, String> {
    if let Some(p) = &cfg.budgetctl {
        return if executable(p) {
            Ok(p.clone())
        } else {
            Err(format!(
                "[whatif] budgetctl = {:?} in budgetd's config is not an executable file",
                p.display().to_string()
            ))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|d| d.join("budgetctl")));
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("budgetctl"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    beside
        .into_iter()
        .chain(on_path)
        .find(|p| executable(p))
        .ok_or_else(|| {
            "budgetctl was found neither beside budgetd nor on its PATH; \
install it or name it in budgetd's config ([whatif] budgetctl = \"/usr/bin/budgetctl\")"
                .to_string()
        })
}

fn executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// What the child replays for `caller` over `[since, until]`: the four
/// documents the API answers that caller, from the same functions.
pub fn input_for(
    s: &Store,
    caller: &Caller,
    scope: &Scope,
    since: i64,
    until: i64,
    cluster_gpus: Option<u32>,
) -> Input {
    Input {
        since,
        until,
        accounts: crate::api::tree::readable_accounts(s, scope),
        policy: s.policy().clone(),
        runs: crate::api::runs::report_for(s, caller, scope, since, until, cluster_gpus),
        usage: crate::report::usage(s, since, until, true, scope),
    }
}

/// An allocation change as the form takes it: `+N%`, `-N%` or GPU-hours.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    Percent(f64),
    GpuHours(f64),
}

impl Change {
    /// Reads the form's text; `Err` says what is wrong, in words.
    pub fn parse(text: &str) -> Result<Change, String> {
        const HOW: &str = "write +N% or -N% (relative to today's allocation) or a number of \
GPU-hours per window, e.g. +20%, -10% or 1200";
        let t = text.trim();
        if t.is_empty() {
            return Err(format!("enter a change: {HOW}"));
        }
        let number = |s: &str| match s.parse::<f64>() {
            Ok(v) if v.is_finite() && s.len() <= 24 => Ok(v),
            _ => Err(format!("{t:?} is not a change: {HOW}")),
        };
        if let Some(p) = t.strip_suffix('%') {
            if !(p.starts_with('+') || p.starts_with('-')) {
                return Err(format!("{t:?}: say + or - before a percentage: {HOW}"));
            }
            let v = number(p)?;
            if v < -100.0 {
                return Err(format!(
                    "{t:?}: an allocation cannot shrink by more than 100%"
                ));
            }
            Ok(Change::Percent(v))
        } else {
            if t.starts_with('+') || t.starts_with('-') {
                return Err(format!("{t:?} is not a change: {HOW}"));
            }
            Ok(Change::GpuHours(number(t)?))
        }
    }

    /// As `budgetctl whatif --set ACCOUNT=CHANGE` takes it.
    pub fn arg(&self) -> String {
        match self {
            Change::Percent(p) => format!("{p:+}%"),
            Change::GpuHours(h) => format!("{h}"),
        }
    }

    /// In words for the page.
    pub fn words(&self) -> String {
        match self {
            Change::Percent(p) => format!("{p:+}%"),
            Change::GpuHours(h) => format!("{h} GPU-hours per window"),
        }
    }
}

/// What one what-if replays.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    pub account: String,
    pub change: Change,
    pub weeks: u32,
}

/// Where a what-if stands.
#[derive(Debug, Clone)]
pub enum State {
    /// Running; the child's last progress line.
    Running(String),
    Done(Box<Report>),
    /// Failed or stopped, with why (for the page).
    Failed(String),
}

/// One what-if, as its page shows it.
#[derive(Debug, Clone)]
pub struct Job {
    pub id: String,
    /// Who started it: only they see it.
    owner: (String, Role),
    pub request: Request,
    /// Unix time it started.
    pub started_at: i64,
    started: Instant,
    finished: Option<Instant>,
    pub state: State,
}

impl Job {
    /// Whether `caller` started it.
    pub fn owned_by(&self, caller: &Caller) -> bool {
        self.owner.0 == caller.user && self.owner.1 == caller.role
    }

    /// Seconds since it started (to its end once finished).
    pub fn elapsed_secs(&self) -> f64 {
        self.finished
            .unwrap_or_else(Instant::now)
            .duration_since(self.started)
            .as_secs_f64()
    }
}

/// The what-ifs in memory and the one-at-a-time slot.
#[derive(Debug, Default)]
pub struct Whatifs {
    inner: Mutex<Jobs>,
    /// Since budgetd started, for `/metrics` ([`Whatifs::counts`]).
    counts: Counts,
}

/// What-ifs ended by outcome, requests refused while one ran, and how long
/// the last one took: what an operator watches (`/metrics`).
#[derive(Debug, Default)]
struct Counts {
    done: AtomicU64,
    failed: AtomicU64,
    /// Among `failed`: stopped at `[whatif] time_limit_secs`.
    time_limit: AtomicU64,
    busy: AtomicU64,
    /// Milliseconds the last what-if to end ran (0: none yet).
    last_ms: AtomicU64,
}

/// [`Whatifs::counts`]: the figures `/metrics` exports.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WhatifCounts {
    pub done: u64,
    pub failed: u64,
    pub time_limit: u64,
    pub busy: u64,
    pub running: bool,
    pub last_secs: f64,
}

#[derive(Debug, Default)]
struct Jobs {
    next: u64,
    /// Oldest first.
    list: VecDeque<Job>,
}

/// The slot of the one replay running; [`Whatifs::claim`] hands it out.
#[derive(Debug)]
pub struct Slot {
    id: String,
}

impl Slot {
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Whatifs {
    fn jobs(&self) -> std::sync::MutexGuard<'_, Jobs> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a what-if of `caller` as running and returns its slot, or
    /// `None` while another one runs. Finished ones past `keep_secs`, and
    /// the oldest beyond `keep_results`, are forgotten here.
    pub fn claim(
        &self,
        cfg: &WhatifConfig,
        caller: &Caller,
        request: Request,
        started_at: i64,
        id_prefix: i64,
    ) -> Option<Slot> {
        let mut j = self.jobs();
        if j.list.iter().any(|x| matches!(x.state, State::Running(_))) {
            self.counts.busy.fetch_add(1, Ordering::Relaxed);
            return None;
        }
        let keep = Duration::from_secs(cfg.keep_secs);
        j.list
            .retain(|x| x.finished.is_none_or(|f| f.elapsed() <= keep));
        while j.list.len() >= cfg.keep_results {
            j.list.pop_front();
        }
        j.next += 1;
        // budgetd's start time in the id: an old page's link never names
        // a what-if of a later budgetd.
        let id = format!("{id_prefix:x}-{}", j.next);
        j.list.push_back(Job {
            id: id.clone(),
            owner: (caller.user.clone(), caller.role),
            request,
            started_at,
            started: Instant::now(),
            finished: None,
            state: State::Running("starting budgetctl".into()),
        });
        Some(Slot { id })
    }

    /// The what-if `id`, if `caller` started it and it is still kept.
    pub fn get(&self, cfg: &WhatifConfig, id: &str, caller: &Caller) -> Option<Job> {
        let keep = Duration::from_secs(cfg.keep_secs);
        self.jobs()
            .list
            .iter()
            .find(|x| x.id == id && x.owned_by(caller))
            .filter(|x| x.finished.is_none_or(|f| f.elapsed() <= keep))
            .cloned()
    }

    /// `caller`'s what-ifs still kept, newest first.
    pub fn of(&self, caller: &Caller) -> Vec<Job> {
        self.jobs()
            .list
            .iter()
            .rev()
            .filter(|x| x.owned_by(caller))
            .cloned()
            .collect()
    }

    /// Whether a replay is running now.
    pub fn busy(&self) -> bool {
        self.jobs()
            .list
            .iter()
            .any(|x| matches!(x.state, State::Running(_)))
    }

    fn set(&self, slot: &Slot, state: State) {
        let mut j = self.jobs();
        if let Some(x) = j.list.iter_mut().find(|x| x.id == slot.id) {
            if !matches!(state, State::Running(_)) {
                x.finished = Some(Instant::now());
            }
            x.state = state;
        }
    }

    /// Ends `slot`'s what-if with `state` (done or failed): frees the slot.
    pub fn finish(&self, slot: Slot, state: State) {
        let c = &self.counts;
        match &state {
            State::Running(_) => {}
            State::Done(_) => {
                c.done.fetch_add(1, Ordering::Relaxed);
            }
            State::Failed(_) => {
                c.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        let ran = {
            let j = self.jobs();
            j.list
                .iter()
                .find(|x| x.id == slot.id)
                .map(|x| x.started.elapsed().as_millis())
        };
        if let Some(ms) = ran {
            // At least 1 ms, so that 0 keeps meaning "none yet".
            let ms = u64::try_from(ms).unwrap_or(u64::MAX).max(1);
            c.last_ms.store(ms, Ordering::Relaxed);
        }
        self.set(&slot, state);
    }

    /// Ends `slot`'s what-if stopped at its time limit, with `why`.
    fn stop_at_limit(&self, slot: Slot, why: String) {
        self.counts.time_limit.fetch_add(1, Ordering::Relaxed);
        self.finish(slot, State::Failed(why));
    }

    /// Since budgetd started: what-ifs done, failed (the time limit's among
    /// them), requests refused while one ran; whether one runs now and how
    /// long the last one to end took.
    pub fn counts(&self) -> WhatifCounts {
        let c = &self.counts;
        WhatifCounts {
            done: c.done.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            time_limit: c.time_limit.load(Ordering::Relaxed),
            busy: c.busy.load(Ordering::Relaxed),
            running: self.busy(),
            last_secs: c.last_ms.load(Ordering::Relaxed) as f64 / 1000.0,
        }
    }
}

/// Runs the child for `slot` to its end and records the outcome. Never
/// panics; every failure becomes the what-if's `Failed` message.
pub async fn run(
    whatifs: &Whatifs,
    slot: Slot,
    budgetctl: PathBuf,
    cfg: WhatifConfig,
    request: Request,
    input: Input,
) {
    let limit = Duration::from_secs(cfg.time_limit_secs);
    let outcome =
        tokio::time::timeout(limit, child(whatifs, &slot, &budgetctl, &request, &input)).await;
    match outcome {
        Ok(Ok(report)) => {
            tracing::info!(id = slot.id(), account = %request.account, "what-if done");
            whatifs.finish(slot, State::Done(Box::new(report)));
        }
        Ok(Err(why)) => {
            tracing::warn!(id = slot.id(), %why, "what-if failed");
            whatifs.finish(slot, State::Failed(why));
        }
        Err(_) => {
            tracing::warn!(
                id = slot.id(),
                secs = limit.as_secs(),
                "what-if stopped: time limit"
            );
            whatifs.stop_at_limit(
                slot,
                format!(
                    "the replay ran longer than {} s ([whatif] time_limit_secs) and was stopped",
                    limit.as_secs()
                ),
            );
        }
    }
}

/// The child from spawn to its parsed answer. Dropping this future (the
/// time limit, budgetd stopping) kills the child (`kill_on_drop`).
async fn child(
    whatifs: &Whatifs,
    slot: &Slot,
    budgetctl: &Path,
    request: &Request,
    input: &Input,
) -> Result<Report, String> {
    let body = serde_json::to_vec(input).map_err(|e| format!("cannot encode the input: {e}"))?;
    let set = format!("{}={}", request.account, request.change.arg());
    let mut cmd = tokio::process::Command::new(budgetctl);
    cmd.args(["whatif", "--input", "-", "--json", "--set", set.as_str()])
        // Nothing of budgetd's environment (no token, no socket) reaches it.
        .env_clear()
        .env("TZ", "UTC")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    // SAFETY: runs in the forked child before exec; setpriority is a single
    // system call that takes no lock and touches no memory of the parent.
    unsafe {
        cmd.pre_exec(|| {
            libc::setpriority(libc::PRIO_PROCESS, 0, CHILD_NICENESS);
            Ok(())
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", budgetctl.display()))?;
    let (Some(mut stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("budgetctl's pipes could not be opened".into());
    };
    let write = async move {
        // A child that exits early (a refused input) closes its end: its
        // own message on stderr says why, not this broken pipe.
        let _ = stdin.write_all(&body).await;
        drop(stdin);
    };
    let read_out = async move {
        let mut out = Vec::new();
        stdout
            .take(STDOUT_MAX)
            .read_to_end(&mut out)
            .await
            .map(|_| out)
    };
    let read_err = async {
        // Split on bytes, not UTF-8 lines: a stray byte must not stop the
        // reading (the child would then block on a full pipe).
        let mut lines = BufReader::new(stderr).split(b'\n');
        let mut last = String::new();
        while let Ok(Some(bytes)) = lines.next_segment().await {
            let line = shorten(String::from_utf8_lossy(&bytes).trim());
            if line.is_empty() {
                continue;
            }
            whatifs.set(slot, State::Running(progress_words(&line)));
            last = line;
        }
        last
    };
    let ((), out, last) = tokio::join!(write, read_out, read_err);
    let status = child
        .wait()
        .await
        .map_err(|e| format!("budgetctl could not be waited for: {e}"))?;
    if !status.success() {
        let said = last.strip_prefix("budgetctl: ").unwrap_or(&last);
        return Err(if said.is_empty() {
            format!("budgetctl whatif failed ({status})")
        } else {
            format!("budgetctl whatif failed: {said}")
        });
    }
    let out = out.map_err(|e| format!("cannot read budgetctl's answer: {e}"))?;
    serde_json::from_slice(&out).map_err(|e| {
        format!("budgetctl's answer could not be read ({e}): is it the same release as budgetd?")
    })
}

/// A progress line without `budgetctl`'s `whatif: ` prefix.
fn progress_words(line: &str) -> String {
    line.strip_prefix("whatif:")
        .map_or(line, str::trim_start)
        .to_string()
}

/// At most [`LINE_MAX`] bytes of `s`, cut at a character boundary.
fn shorten(s: &str) -> String {
    if s.len() <= LINE_MAX {
        return s.to_string();
    }
    let mut end = LINE_MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}...", &s[..end])
}

/// Accounts `caller` may try changes on, with `scope`: every account for a
/// viewer who reads every account (a reader: the view admits no admin
/// token), the coordinated subtrees for a coordinator, none otherwise.
pub fn may_change(caller: &Caller, scope: &Scope, account: &str) -> bool {
    caller.reads_all() || scope.can_manage_under(account)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn changes_read_as_budgetctl_takes_them() {
        assert_eq!(Change::parse(" +20% "), Ok(Change::Percent(20.0)));
        assert_eq!(Change::parse("-12.5%"), Ok(Change::Percent(-12.5)));
        assert_eq!(Change::parse("1200"), Ok(Change::GpuHours(1200.0)));
        assert_eq!(Change::Percent(20.0).arg(), "+20%");
        assert_eq!(Change::Percent(-12.5).arg(), "-12.5%");
        assert_eq!(Change::GpuHours(1200.0).arg(), "1200");
        for (bad, says) in [
            ("", "enter a change"),
            ("20%", "say + or -"),
            ("-150%", "more than 100%"),
            ("+5", "not a change"),
            ("lots", "not a change"),
            ("NaN", "not a change"),
            ("inf", "not a change"),
            ("1e400", "not a change"),
        ] {
            let e = Change::parse(bad).expect_err(bad);
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn progress_and_long_lines() {
        assert_eq!(
            progress_words("whatif:   1.0s 12 runs read"),
            "1.0s 12 runs read"
        );
        assert_eq!(progress_words("budgetctl: bad"), "budgetctl: bad");
        let long = "é".repeat(400);
        let s = shorten(&long);
        assert!(s.len() <= LINE_MAX + 3 && s.ends_with("..."));
    }
}
