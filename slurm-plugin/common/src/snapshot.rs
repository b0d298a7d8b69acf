//! The plugins' in-memory copy of `budgetd`'s [`PluginSnapshot`] and the background
//! fetcher that keeps it fresh (docs/design.md §9.1, §9.3).
//!
//! Plugin callbacks run inside `slurmctld` under its locks and must never do I/O, so
//! they only read a [`SnapshotCache`]: one `Arc` behind an `RwLock` whose write side is
//! held only for a pointer swap (readers never wait for the network). A [`Fetcher`],
//! ticked by a [`Worker`] thread started in the plugin's `init` and joined in `fini`,
//! does `GET /v1/snapshot` over the budgetd socket with a hard timeout and
//! `If-None-Match`, so an unchanged snapshot costs a `304` and no parsing.
//!
//! Freshness: the snapshot counts as fresh while the last successful contact (a `200`
//! or a `304`) is at most `policy.snapshot_max_age_secs` old. Callers that need the
//! fair-share state use [`SnapshotCache::fresh`], which returns `None` in safe mode;
//! policy values (defaults, limits) may come from a stale snapshot through
//! [`SnapshotCache::policy`], because a site's limits do not stop applying when the
//! service is down. Entering and leaving safe mode are logged once each, by the
//! fetcher thread, never by a callback.
//!
//! Each `.so` (priority, preempt, job_submit) links its own copy of this module and runs
//! its own fetcher; with `304`s that costs next to nothing and keeps the plugins
//! independent of each other's load order.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use budget_client::{Client, Endpoint};
use budget_protocol::{PluginSnapshot, Policy, SNAPSHOT_PATH};

use crate::log;
use crate::worker::Worker;

/// Unix time in seconds (callbacks and the fetcher agree on one clock).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The shared, lock-light snapshot holder.
#[derive(Debug, Default)]
pub struct SnapshotCache {
    current: RwLock<Option<Arc<PluginSnapshot>>>,
    /// Unix seconds of the last successful contact with budgetd (0 = never).
    confirmed_at: AtomicI64,
    /// `budget_max_age` from the configuration (0 = use the snapshot's policy).
    max_age_override: AtomicI64,
}

impl SnapshotCache {
    /// An empty cache: safe mode until the first snapshot arrives.
    pub fn new() -> Self {
        Self::default()
    }

    /// The newest snapshot received, however old.
    pub fn latest(&self) -> Option<Arc<PluginSnapshot>> {
        // A poisoned lock only means a panic happened while swapping a pointer: the
        // value is still a valid Option<Arc>, so keep serving it.
        match self.current.read() {
            Ok(g) => g.clone(),
            Err(p) => p.into_inner().clone(),
        }
    }

    /// The snapshot if it is fresh at `now`; `None` means safe mode.
    pub fn fresh(&self, now: i64) -> Option<Arc<PluginSnapshot>> {
        let snap = self.latest()?;
        let max_age = self.max_age(&snap.policy);
        let at = self.confirmed_at.load(Ordering::Acquire);
        (at > 0 && now.saturating_sub(at) <= max_age).then_some(snap)
    }

    /// Snapshot age that enters safe mode: the configured override, else the policy's.
    pub fn max_age(&self, policy: &Policy) -> i64 {
        match self.max_age_override.load(Ordering::Relaxed) {
            n if n > 0 => n,
            _ => policy.snapshot_max_age_secs.max(0),
        }
    }

    /// Set (or clear, with `None`) the configured maximum age.
    pub fn set_max_age_override(&self, secs: Option<i64>) {
        self.max_age_override
            .store(secs.unwrap_or(0).max(0), Ordering::Relaxed);
    }

    /// The site policy of the newest snapshot, or the built-in defaults before any.
    pub fn policy(&self) -> Policy {
        self.latest().map(|s| s.policy.clone()).unwrap_or_default()
    }

    /// Seconds since the last successful contact, `None` if never.
    pub fn age(&self, now: i64) -> Option<i64> {
        let at = self.confirmed_at.load(Ordering::Acquire);
        (at > 0).then(|| now.saturating_sub(at))
    }

    /// Install a new snapshot received at `now`.
    pub fn store(&self, snap: PluginSnapshot, now: i64) {
        let snap = Arc::new(snap);
        match self.current.write() {
            Ok(mut g) => *g = Some(snap),
            Err(p) => *p.into_inner() = Some(snap),
        }
        self.confirmed_at.store(now, Ordering::Release);
    }

    /// Record that budgetd confirmed the current snapshot (`304`) at `now`.
    pub fn confirm(&self, now: i64) {
        self.confirmed_at.store(now, Ordering::Release);
    }
}

/// Result of one fetch.
#[derive(Debug)]
pub enum Fetched {
    /// `304 Not Modified`: the cached snapshot is still current.
    NotModified,
    /// A new snapshot and the ETag to send next time.
    New(Box<PluginSnapshot>, Option<String>),
}

/// Where snapshots come from (budgetd over HTTP in production, a fake in tests).
pub trait SnapshotSource: Send {
    /// Fetch the snapshot, sending `etag` as `If-None-Match` when given.
    fn fetch(&mut self, etag: Option<&str>) -> Result<Fetched, String>;
}

/// budgetd over its Unix socket (or TCP), with a hard per-request deadline.
#[derive(Debug)]
pub struct HttpSource {
    client: Client,
}

impl HttpSource {
    /// A source for `endpoint` whose every request finishes within `timeout`.
    pub fn new(endpoint: &str, timeout: Duration) -> Result<Self, String> {
        let ep = Endpoint::parse(endpoint).map_err(|e| e.to_string())?;
        Ok(Self {
            client: Client::new(ep).with_timeout(timeout),
        })
    }
}

impl SnapshotSource for HttpSource {
    fn fetch(&mut self, etag: Option<&str>) -> Result<Fetched, String> {
        match self.client.get_if_none_match(SNAPSHOT_PATH, etag) {
            Ok(None) => Ok(Fetched::NotModified),
            Ok(Some(resp)) => {
                let snap: PluginSnapshot = resp.json().map_err(|e| e.to_string())?;
                let tag = resp.etag().map(str::to_string);
                Ok(Fetched::New(Box::new(snap), tag))
            }
            Err(e) => Err(e.to_string()),
        }
    }
}

/// What the fetcher believes about freshness, for logging transitions once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Starting,
    Fresh,
    Safe,
}

/// A freshness transition the fetcher observed on a tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transition {
    /// First fresh snapshot after start.
    FirstSnapshot,
    /// Entered safe mode, with the reason.
    EnteredSafeMode(String),
    /// Left safe mode.
    LeftSafeMode,
}

/// Fetch loop state: the source, the ETag, and the last known mode.
#[derive(Debug)]
pub struct Fetcher<S> {
    cache: Arc<SnapshotCache>,
    source: S,
    etag: Option<String>,
    mode: Mode,
    last_error: Option<String>,
}

impl<S: SnapshotSource> Fetcher<S> {
    /// A fetcher filling `cache` from `source`.
    pub fn new(cache: Arc<SnapshotCache>, source: S) -> Self {
        Self {
            cache,
            source,
            etag: None,
            mode: Mode::Starting,
            last_error: None,
        }
    }

    /// One fetch at `now`; returns the freshness transition, if any, for the caller
    /// (or [`Fetcher::tick_and_log`]) to report.
    pub fn tick(&mut self, now: i64) -> Option<Transition> {
        match self.source.fetch(self.etag.as_deref()) {
            Ok(Fetched::NotModified) if self.cache.latest().is_some() => {
                self.cache.confirm(now);
                self.last_error = None;
            }
            // A 304 with nothing cached (we never sent an ETag, so only a confused
            // server does this): forget the ETag and fetch in full next time.
            Ok(Fetched::NotModified) => {
                self.etag = None;
                self.last_error = Some("304 Not Modified without a cached snapshot".into());
            }
            Ok(Fetched::New(snap, tag)) => {
                self.etag = tag.or_else(|| Some(format!("\"{}\"", snap.version)));
                self.cache.store(*snap, now);
                self.last_error = None;
            }
            Err(e) => self.last_error = Some(e),
        }
        let fresh = self.cache.fresh(now).is_some();
        let next = if fresh { Mode::Fresh } else { Mode::Safe };
        let prev = std::mem::replace(&mut self.mode, next);
        match (prev, next) {
            (Mode::Starting, Mode::Fresh) => Some(Transition::FirstSnapshot),
            (Mode::Safe, Mode::Fresh) => Some(Transition::LeftSafeMode),
            (Mode::Starting | Mode::Fresh, Mode::Safe) => {
                Some(Transition::EnteredSafeMode(self.safe_reason(now)))
            }
            _ => None,
        }
    }

    fn safe_reason(&self, now: i64) -> String {
        let err = self.last_error.as_deref().unwrap_or("no error");
        match self.cache.age(now) {
            None => format!("no snapshot received from budgetd yet ({err})"),
            Some(age) => format!(
                "snapshot is {age} s old, more than the maximum age of {} s (last error: {err})",
                self.cache.max_age(&self.cache.policy())
            ),
        }
    }

    /// [`Fetcher::tick`] and log the transition through Slurm's log.
    pub fn tick_and_log(&mut self, now: i64) {
        match self.tick(now) {
            Some(Transition::FirstSnapshot) => {
                let v = self
                    .cache
                    .latest()
                    .map(|s| s.version.clone())
                    .unwrap_or_default();
                log::info(&format!(
                    "snapshot {v} received from budgetd; fair-share decisions enabled"
                ));
            }
            Some(Transition::LeftSafeMode) => {
                log::info("budgetd snapshot fresh again: leaving safe mode, rebalancing enabled");
            }
            Some(Transition::EnteredSafeMode(why)) => log::error(&format!(
                "entering safe mode: {why}; contracts still honoured, budgeted jobs not rebalanced, \
                 free-tier jobs still preemptable, unknown accounts accepted"
            )),
            None => {
                if let Some(e) = &self.last_error {
                    log::debug(&format!("snapshot fetch failed: {e}"));
                }
            }
        }
    }
}

/// Where and how often to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetcherConfig {
    /// budgetd endpoint: a socket path, `unix:/path` or `http://host:port`.
    pub endpoint: String,
    /// Time between fetches.
    pub period: Duration,
    /// Hard deadline of one request (connect, write, read).
    pub timeout: Duration,
    /// Overrides the snapshot's `policy.snapshot_max_age_secs` when set.
    pub max_age_secs: Option<i64>,
}

/// Default budgetd socket (the same as `priority/budget`'s).
pub const DEFAULT_ENDPOINT: &str = "/run/slurm-budget/budgetd.sock";
/// Environment variable that overrides the endpoint (handy for testbeds).
pub const ENDPOINT_ENV: &str = "SLURM_BUDGET_ENDPOINT";

impl Default for FetcherConfig {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.into(),
            period: Duration::from_secs(5),
            timeout: Duration::from_millis(1000),
            max_age_secs: None,
        }
    }
}

impl FetcherConfig {
    /// Read the budgetd keys of `PriorityParameters` (comma separated `key=value`; other
    /// keys belong to other plugins and are ignored), so one line in `slurm.conf`
    /// configures all three plugins: `budget_socket=PATH`, `budget_period=SECS`
    /// (1..=3600), `budget_timeout_ms=MS` (10..=60000), `budget_max_age=SECS`. Bad values
    /// are reported and the default kept.
    pub fn parse(params: &str) -> (Self, Vec<String>) {
        let mut cfg = Self::default();
        let mut problems = Vec::new();
        for item in params.split(',') {
            let Some((k, v)) = item.split_once('=') else {
                continue;
            };
            let (k, v) = (k.trim(), v.trim());
            let num = |lo: u64, hi: u64| v.parse::<u64>().ok().filter(|n| (lo..=hi).contains(n));
            let ok = match k {
                "budget_socket" if !v.is_empty() => {
                    cfg.endpoint = v.to_string();
                    true
                }
                "budget_period" => num(1, 3600)
                    .map(|n| cfg.period = Duration::from_secs(n))
                    .is_some(),
                "budget_timeout_ms" => num(10, 60_000)
                    .map(|n| cfg.timeout = Duration::from_millis(n))
                    .is_some(),
                "budget_max_age" => num(1, 7 * 86_400)
                    .map(|n| cfg.max_age_secs = Some(n as i64))
                    .is_some(),
                _ => true,
            };
            if !ok {
                problems.push(format!("PriorityParameters: bad value {k}={v:?}"));
            }
        }
        (cfg, problems)
    }

    /// The configuration of this process: `PriorityParameters`, then the
    /// `SLURM_BUDGET_ENDPOINT` environment variable.
    pub fn load() -> (Self, Vec<String>) {
        let (mut cfg, problems) = Self::parse(&priority_params().unwrap_or_default());
        if let Ok(ep) = std::env::var(ENDPOINT_ENV)
            && !ep.trim().is_empty()
        {
            cfg.endpoint = ep.trim().to_string();
        }
        (cfg, problems)
    }
}

/// `PriorityParameters` from `slurm.conf` as `slurmctld` read it.
pub fn priority_params() -> Option<String> {
    // SAFETY: `slurm_conf` is libslurmfull's global configuration, filled before any
    // plugin loads; the string is copied at once.
    unsafe { crate::cstr::opt_string(slurm_ffi::sys::slurm_conf.priority_params) }
}

/// Start the fetcher thread for `cache`: it reads the configuration on its first tick,
/// then fetches every `budget_period`. Join it with [`Worker::stop`] in `fini`.
pub fn spawn_fetcher(name: &str, cache: Arc<SnapshotCache>) -> std::io::Result<Worker> {
    let mut state: Option<Fetcher<HttpSource>> = None;
    let mut failed_config = false;
    // The worker's period is fixed at spawn; the configured interval is honoured by
    // skipping ticks (the worker wakes every second; an idle wake costs nothing).
    let mut next_due = 0i64;
    let mut period_secs = 5i64;
    Worker::spawn(name, Duration::from_secs(1), move || {
        let now = unix_now();
        if state.is_none() && !failed_config {
            let (cfg, problems) = FetcherConfig::load();
            for p in problems {
                log::error(&p);
            }
            period_secs = cfg.period.as_secs().max(1) as i64;
            cache.set_max_age_override(cfg.max_age_secs);
            match HttpSource::new(&cfg.endpoint, cfg.timeout) {
                Ok(src) => {
                    log::verbose(&format!(
                        "fetching {SNAPSHOT_PATH} from {} every {period_secs} s (timeout {} ms)",
                        cfg.endpoint,
                        cfg.timeout.as_millis()
                    ));
                    state = Some(Fetcher::new(Arc::clone(&cache), src));
                }
                Err(e) => {
                    log::error(&format!(
                        "bad budgetd endpoint {:?}: {e}; staying in safe mode",
                        cfg.endpoint
                    ));
                    failed_config = true;
                }
            }
        }
        if let Some(f) = state.as_mut()
            && now >= next_due
        {
            next_due = now + period_secs;
            f.tick_and_log(now);
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::tree::TreeSpec;
    use policy_core::{FairShare, GpuWeights};
    use std::collections::VecDeque;

    fn snap(version: &str, max_age: i64) -> PluginSnapshot {
        let fs = FairShare::compute(&TreeSpec::default(), &Default::default(), 0, 7 * 86400);
        PluginSnapshot {
            version: version.into(),
            generated_at: 0,
            policy: Policy {
                snapshot_max_age_secs: max_age,
                ..Policy::default()
            },
            weights: GpuWeights::default(),
            fair_share: fs,
            drains: vec![],
        }
    }

    struct Script(VecDeque<Result<Fetched, String>>, Vec<Option<String>>);
    impl SnapshotSource for Script {
        fn fetch(&mut self, etag: Option<&str>) -> Result<Fetched, String> {
            self.1.push(etag.map(str::to_string));
            self.0
                .pop_front()
                .unwrap_or_else(|| Err("connection refused".into()))
        }
    }

    #[test]
    fn freshness_etag_and_transitions_logged_once() {
        let cache = Arc::new(SnapshotCache::new());
        assert!(cache.fresh(0).is_none());
        assert_eq!(cache.policy(), Policy::default());
        let script = Script(
            VecDeque::from(vec![
                Err("connection refused".into()),
                Ok(Fetched::New(
                    Box::new(snap("v1", 30)),
                    Some("\"v1\"".into()),
                )),
                Ok(Fetched::NotModified),
                Err("timed out".into()),
                Err("timed out".into()),
                Err("timed out".into()),
                Ok(Fetched::NotModified),
            ]),
            vec![],
        );
        let mut f = Fetcher::new(Arc::clone(&cache), script);
        assert!(
            matches!(f.tick(100), Some(Transition::EnteredSafeMode(m)) if m.contains("no snapshot"))
        );
        assert_eq!(f.tick(105), Some(Transition::LeftSafeMode));
        assert_eq!(f.tick(110), None);
        assert!(cache.fresh(110).is_some());
        // Failures within the max age keep the snapshot fresh.
        assert_eq!(f.tick(120), None);
        assert_eq!(f.tick(140), None);
        assert!(cache.fresh(140).is_some());
        // 31 s after the last 304: stale, logged once.
        assert!(
            matches!(f.tick(141), Some(Transition::EnteredSafeMode(m)) if m.contains("31 s old") && m.contains("timed out"))
        );
        assert!(cache.fresh(141).is_none());
        assert_eq!(
            cache.latest().map(|s| s.version.clone()).as_deref(),
            Some("v1"),
            "stale policy still readable"
        );
        assert_eq!(f.tick(150), Some(Transition::LeftSafeMode));
        // The ETag is sent once known.
        assert_eq!(f.source.1[0], None);
        assert_eq!(f.source.1[2].as_deref(), Some("\"v1\""));
    }

    #[test]
    fn first_snapshot_transition() {
        let cache = Arc::new(SnapshotCache::new());
        let script = Script(
            VecDeque::from(vec![Ok(Fetched::New(Box::new(snap("v1", 60)), None))]),
            vec![],
        );
        let mut f = Fetcher::new(Arc::clone(&cache), script);
        assert_eq!(f.tick(1), Some(Transition::FirstSnapshot));
        // Without an ETag header the version is used, quoted.
        assert_eq!(f.etag.as_deref(), Some("\"v1\""));
    }

    #[test]
    fn config_from_priority_parameters() {
        let (c, p) = FetcherConfig::parse(
            "budget_socket=/tmp/b.sock,budget_period=2,PriorityFlags=x,budget_timeout_ms=500,budget_max_age=30,budget_period=0",
        );
        assert_eq!(c.endpoint, "/tmp/b.sock");
        assert_eq!(c.period, Duration::from_secs(2));
        assert_eq!(c.timeout, Duration::from_millis(500));
        assert_eq!(c.max_age_secs, Some(30));
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(FetcherConfig::parse("").0, FetcherConfig::default());
        let cache = SnapshotCache::new();
        cache.store(snap("v", 60), 100);
        cache.set_max_age_override(Some(5));
        assert!(cache.fresh(105).is_some() && cache.fresh(106).is_none());
    }
}
