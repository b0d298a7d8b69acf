//! The plugins' in-memory copy of `budgetd`'s [`PluginSnapshot`], the fetcher that
//! keeps it fresh, and safe mode (docs/design.md §9.1, §9.3): one implementation for
//! all three plugins.
//!
//! Plugin callbacks run inside `slurmctld` under its locks and must never do I/O, so
//! they only read a [`SnapshotCache`]: one `Arc` behind an [`ArcSwapOption`], swapped
//! whole by the fetcher (readers never wait, not even for the swap). A [`Fetcher`],
//! ticked by a plugin's background thread (started in `init` or
//! `priority_p_thread_start`, joined in `fini`), does `GET /v1/snapshot` with a hard
//! timeout and `If-None-Match`, so an unchanged snapshot costs a `304` and no parsing.
//!
//! Freshness and the stale-snapshot default: the snapshot counts as fresh while the
//! last successful contact (a `200` or a `304`) is at most [`SnapshotCache::max_age`]
//! old: `budget_max_age` from `PriorityParameters` when set, else the snapshot's own
//! `policy.snapshot_max_age_secs` (budgetd's default 60 s, validated to 1..=86400),
//! never less than 1 s. Before the first snapshot the plugins are in safe mode.
//! What safe mode means is the plugin's: [`SnapshotCache::fresh`] returns `None`
//! then, and `preempt/budget` and `job_submit/budget` stop using fair-share state;
//! `priority/budget` keeps ranking by the newest snapshot however old
//! ([`SnapshotCache::latest`]); site policy values (defaults, limits) come from the
//! newest snapshot however old ([`SnapshotCache::policy`]), because a site's limits
//! do not stop applying while the service is down.
//!
//! Logged once each, by the background thread, never by a callback: the first
//! snapshot, entering safe mode (with the reason and the plugin's own consequences),
//! leaving it, a fetch error when it starts or changes, and budgetd reachable again.
//!
//! Each `.so` links its own copy of this module and runs its own fetcher; with `304`s
//! that costs next to nothing and keeps the plugins independent of each other's load
//! order.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::ArcSwapOption;
use budget_protocol::service::PLUGIN_HEADER;
use budget_protocol::{PluginSnapshot, Policy, SNAPSHOT_PATH};

use crate::log;
use crate::settings::{LazyClient, Settings};
use crate::worker::Worker;

/// Unix time in seconds (callbacks and the background threads agree on one clock).
pub fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// The shared, wait-free snapshot holder.
#[derive(Debug, Default)]
pub struct SnapshotCache {
    current: ArcSwapOption<PluginSnapshot>,
    /// Unix seconds of the last successful contact with budgetd (0 = never).
    confirmed_at: AtomicI64,
    /// `budget_max_age` from the settings (0 = use the snapshot's policy).
    max_age_override: AtomicI64,
}

impl SnapshotCache {
    /// An empty cache: safe mode until the first snapshot arrives.
    pub fn new() -> Self {
        Self::default()
    }

    /// The newest snapshot received, however old.
    pub fn latest(&self) -> Option<Arc<PluginSnapshot>> {
        self.current.load_full()
    }

    /// The snapshot if it is fresh at `now`; `None` means safe mode.
    pub fn fresh(&self, now: i64) -> Option<Arc<PluginSnapshot>> {
        let snap = self.latest()?;
        let at = self.confirmed_at.load(Ordering::Acquire);
        (at > 0 && now.saturating_sub(at) <= self.max_age(&snap.policy)).then_some(snap)
    }

    /// Snapshot age that enters safe mode: the configured override, else the
    /// policy's; at least 1 s.
    pub fn max_age(&self, policy: &Policy) -> i64 {
        match self.max_age_override.load(Ordering::Relaxed) {
            n if n > 0 => n,
            _ => policy.snapshot_max_age_secs.max(1),
        }
    }

    /// Set (or clear, with `None`) the configured maximum age.
    pub fn set_max_age_override(&self, secs: Option<i64>) {
        self.max_age_override
            .store(secs.unwrap_or(0).max(0), Ordering::Relaxed);
    }

    /// The site policy of the newest snapshot, or the built-in defaults before any.
    pub fn policy(&self) -> Policy {
        self.current
            .load()
            .as_ref()
            .map(|s| s.policy.clone())
            .unwrap_or_default()
    }

    /// Seconds since the last successful contact, `None` if never.
    pub fn age(&self, now: i64) -> Option<i64> {
        let at = self.confirmed_at.load(Ordering::Acquire);
        (at > 0).then(|| now.saturating_sub(at))
    }

    /// Install a new snapshot received at `now`.
    pub fn store(&self, snap: PluginSnapshot, now: i64) {
        self.current.store(Some(Arc::new(snap)));
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

/// Where snapshots come from (budgetd over HTTP in production, a script in tests).
pub trait SnapshotSource: Send {
    /// Fetch the snapshot, sending `etag` as `If-None-Match` when given.
    fn fetch(&mut self, etag: Option<&str>) -> Result<Fetched, String>;
}

/// budgetd over its Unix socket (or TCP) as the settings say, with a hard deadline
/// per request. The client is made on the first fetch, on the fetcher's thread (it may
/// read `budget_token_file`). An unusable endpoint or token makes every fetch fail with
/// its reason, so the plugin stays in safe mode and says why, like any other failure.
///
/// Each request names the plugin and its period (`X-Budget-Plugin: priority/budget
/// period=5`): budgetd records which generation each plugin holds, so `budgetctl`
/// can say when a change is in effect in slurmctld.
#[derive(Debug)]
pub struct HttpSource {
    client: LazyClient,
    ident: String,
}

impl HttpSource {
    /// A source for `settings`' endpoint, timeout and token (no I/O yet).
    pub fn new(settings: &Settings) -> Self {
        Self {
            client: LazyClient::new(settings),
            ident: format!(
                "{} period={}",
                log::prefix().unwrap_or("unnamed"),
                settings.period.as_secs()
            ),
        }
    }
}

impl SnapshotSource for HttpSource {
    fn fetch(&mut self, etag: Option<&str>) -> Result<Fetched, String> {
        let client = self.client.get()?;
        let ident = [(PLUGIN_HEADER, self.ident.as_str())];
        match client.get_if_none_match_with(SNAPSHOT_PATH, etag, &ident) {
            Ok(None) => Ok(Fetched::NotModified),
            Ok(Some(resp)) => {
                // Decoded and range-checked: a snapshot with a number out of
                // range is refused whole (the cache keeps the previous one).
                let snap = PluginSnapshot::decode(&resp.body)
                    .map_err(|e| format!("bad snapshot from budgetd: {e}"))?;
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

/// Something a tick observed that is worth one log line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The first snapshot since the plugin loaded was stored.
    FirstSnapshot { version: String, leaves: u32 },
    /// Entered safe mode, with the reason.
    EnteredSafeMode(String),
    /// Left safe mode.
    LeftSafeMode,
    /// Fetching started failing, or fails with another error than before.
    FetchFailing(String),
    /// Fetching succeeds again after failing.
    FetchRecovered,
}

/// Fetch loop state: the source, the ETag, the last known mode and error.
#[derive(Debug)]
pub struct Fetcher<S> {
    cache: Arc<SnapshotCache>,
    source: S,
    etag: Option<String>,
    mode: Mode,
    last_error: Option<String>,
    /// What safe mode means for this plugin, appended to the "entering" line.
    effect: &'static str,
}

impl<S: SnapshotSource> Fetcher<S> {
    /// A fetcher filling `cache` from `source`; `effect` says what safe mode changes
    /// in this plugin (logged when entering it).
    pub fn new(cache: Arc<SnapshotCache>, source: S, effect: &'static str) -> Self {
        Self {
            cache,
            source,
            etag: None,
            mode: Mode::Starting,
            last_error: None,
            effect,
        }
    }

    /// Fetch from `source` from now on (the ETag is forgotten; mode and cache stay).
    pub fn replace_source(&mut self, source: S) {
        self.source = source;
        self.etag = None;
    }

    /// One fetch at `now`; returns what changed, in the order to log it.
    pub fn tick(&mut self, now: i64) -> Vec<Event> {
        let mut events = Vec::new();
        let had = self.cache.latest().is_some();
        let etag = self.etag.as_deref().filter(|_| had);
        let result = match self.source.fetch(etag) {
            Ok(Fetched::NotModified) if had => {
                self.cache.confirm(now);
                Ok(())
            }
            // A 304 with nothing cached (we sent no ETag, so only a confused server
            // does this): forget the ETag and fetch in full next time.
            Ok(Fetched::NotModified) => {
                self.etag = None;
                Err("304 Not Modified without a cached snapshot".to_string())
            }
            Ok(Fetched::New(snap, tag)) => {
                self.etag = tag.or_else(|| Some(format!("\"{}\"", snap.version)));
                if !had {
                    events.push(Event::FirstSnapshot {
                        version: snap.version.clone(),
                        leaves: snap.fair_share.num_leaves,
                    });
                }
                self.cache.store(*snap, now);
                Ok(())
            }
            Err(e) => Err(e),
        };
        match result {
            Ok(()) => {
                if self.last_error.take().is_some() {
                    events.push(Event::FetchRecovered);
                }
            }
            Err(e) => {
                if self.last_error.as_deref() != Some(e.as_str()) {
                    events.push(Event::FetchFailing(e.clone()));
                }
                self.last_error = Some(e);
            }
        }
        let next = if self.cache.fresh(now).is_some() {
            Mode::Fresh
        } else {
            Mode::Safe
        };
        match (std::mem::replace(&mut self.mode, next), next) {
            (Mode::Safe, Mode::Fresh) => events.push(Event::LeftSafeMode),
            (Mode::Starting | Mode::Fresh, Mode::Safe) => {
                events.push(Event::EnteredSafeMode(self.safe_reason(now)));
            }
            _ => {}
        }
        events
    }

    fn safe_reason(&self, now: i64) -> String {
        let err = self.last_error.as_deref().unwrap_or("no error");
        match self.cache.age(now) {
            None => format!("no snapshot received from budgetd yet (last error: {err})"),
            Some(age) => format!(
                "budget snapshot is {age} s old, more than the maximum age of {} s \
                 (last error: {err})",
                self.cache.max_age(&self.cache.policy())
            ),
        }
    }

    /// [`Fetcher::tick`], each event logged through Slurm's log.
    pub fn tick_and_log(&mut self, now: i64) {
        for e in self.tick(now) {
            match e {
                Event::FirstSnapshot { version, leaves } => log::info(&format!(
                    "budget snapshot {version} loaded from budgetd: {leaves} accounts/users ranked"
                )),
                Event::EnteredSafeMode(why) => {
                    log::error(&format!("entering safe mode: {why}; {}", self.effect))
                }
                Event::LeftSafeMode => {
                    log::info("leaving safe mode: fresh budget snapshot from budgetd")
                }
                Event::FetchFailing(e) => log::error(&format!(
                    "snapshot fetch from budgetd failed: {e} (logged once; retrying every period)"
                )),
                Event::FetchRecovered => log::info("snapshot fetch: budgetd reachable again"),
            }
        }
    }
}

/// The fetcher a plugin's background thread drives from [`Settings`]: it applies
/// `budget_max_age`, and after `scontrol reconfigure` changed the endpoint or the
/// timeout it talks to the new one (mode, cache and error state carry over).
#[derive(Debug)]
pub struct SnapshotFetcher {
    fetcher: Fetcher<HttpSource>,
    /// The settings the current source was built from.
    built_from: Settings,
}

impl SnapshotFetcher {
    /// A fetcher filling `cache` as `settings` say; `effect`: see [`Fetcher::new`].
    pub fn new(cache: Arc<SnapshotCache>, settings: &Settings, effect: &'static str) -> Self {
        cache.set_max_age_override(settings.max_age_secs);
        log_source(settings);
        Self {
            fetcher: Fetcher::new(cache, HttpSource::new(settings), effect),
            built_from: settings.clone(),
        }
    }

    /// One fetch at `now` with the current `settings`, logged.
    pub fn tick(&mut self, settings: &Settings, now: i64) {
        self.fetcher
            .cache
            .set_max_age_override(settings.max_age_secs);
        if !self.built_from.same_connection(settings) {
            log_source(settings);
            self.fetcher.replace_source(HttpSource::new(settings));
            self.built_from = settings.clone();
        }
        self.fetcher.tick_and_log(now);
    }
}

fn log_source(s: &Settings) {
    log::verbose(&format!(
        "fetching {SNAPSHOT_PATH} from {} every {} s (timeout {} ms){}",
        s.endpoint,
        s.period.as_secs(),
        s.timeout.as_millis(),
        match &s.token_file {
            Some(f) => format!(", token from {f}"),
            None => String::new(),
        }
    ));
}

/// Start a thread that keeps `cache` fresh as `settings` say, fetching every
/// `settings.period`. Join it with [`Worker::stop`] in `fini`.
pub fn spawn_fetcher(
    name: &str,
    cache: Arc<SnapshotCache>,
    settings: Settings,
    effect: &'static str,
) -> std::io::Result<Worker> {
    let mut fetcher = SnapshotFetcher::new(cache, &settings, effect);
    let period = settings.period.as_secs().max(1) as i64;
    // The worker wakes every second (an idle wake costs nothing) and fetches when
    // due, so `fini` never waits a whole period for the thread to notice.
    let mut next_due = 0i64;
    Worker::spawn(name, Duration::from_secs(1), move || {
        let now = unix_now();
        if now >= next_due {
            next_due = now + period;
            fetcher.tick(&settings, now);
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
            cluster_gpus: None,
            cluster_weighted_gpus: None,
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

    fn script(steps: Vec<Result<Fetched, String>>) -> Script {
        Script(VecDeque::from(steps), vec![])
    }

    fn new(s: &PluginSnapshot, tag: Option<&str>) -> Result<Fetched, String> {
        Ok(Fetched::New(Box::new(s.clone()), tag.map(str::to_string)))
    }

    fn first(version: &str) -> Event {
        Event::FirstSnapshot {
            version: version.into(),
            leaves: 0,
        }
    }

    #[test]
    fn freshness_etag_and_transitions_logged_once() {
        let cache = Arc::new(SnapshotCache::new());
        assert!(cache.fresh(0).is_none());
        assert_eq!(cache.policy(), Policy::default());
        let s = script(vec![
            Err("connection refused".into()),
            new(&snap("v1", 30), Some("\"v1\"")),
            Ok(Fetched::NotModified),
            Err("timed out".into()),
            Err("timed out".into()),
            Err("timed out".into()),
            Ok(Fetched::NotModified),
        ]);
        let mut f = Fetcher::new(Arc::clone(&cache), s, "effect");
        let e = f.tick(100);
        assert_eq!(e[0], Event::FetchFailing("connection refused".into()));
        assert!(
            matches!(&e[1], Event::EnteredSafeMode(m) if m.contains("no snapshot") && m.contains("refused"))
        );
        assert_eq!(
            f.tick(105),
            vec![first("v1"), Event::FetchRecovered, Event::LeftSafeMode]
        );
        assert!(f.tick(110).is_empty());
        assert!(cache.fresh(110).is_some());
        // Failures within the max age keep the snapshot fresh; the error is logged once.
        assert_eq!(f.tick(120), vec![Event::FetchFailing("timed out".into())]);
        assert!(f.tick(140).is_empty());
        assert!(cache.fresh(140).is_some());
        // 31 s after the last 304: stale, logged once.
        let e = f.tick(141);
        assert!(
            matches!(&e[..], [Event::EnteredSafeMode(m)] if m.contains("31 s old") && m.contains("30 s") && m.contains("timed out")),
            "{e:?}"
        );
        assert!(cache.fresh(141).is_none());
        assert_eq!(
            cache.latest().map(|s| s.version.clone()).as_deref(),
            Some("v1"),
            "stale snapshot still readable"
        );
        assert_eq!(cache.policy().snapshot_max_age_secs, 30);
        assert_eq!(
            f.tick(150),
            vec![Event::FetchRecovered, Event::LeftSafeMode]
        );
        // The ETag is sent once a snapshot is cached, never before.
        assert_eq!(f.source.1[0], None);
        assert_eq!(f.source.1[1], None);
        assert_eq!(f.source.1[2].as_deref(), Some("\"v1\""));
    }

    #[test]
    fn first_snapshot_and_etag_from_the_version() {
        let cache = Arc::new(SnapshotCache::new());
        let mut f = Fetcher::new(
            Arc::clone(&cache),
            script(vec![new(&snap("v1", 60), None), new(&snap("v2", 60), None)]),
            "effect",
        );
        assert_eq!(f.tick(1), vec![first("v1")]);
        // Without an ETag header the version is used, quoted.
        assert_eq!(f.etag.as_deref(), Some("\"v1\""));
        // Later snapshots are not "first".
        assert!(f.tick(2).is_empty());
        assert_eq!(f.etag.as_deref(), Some("\"v2\""));
    }

    #[test]
    fn a_confused_304_and_a_new_source() {
        let cache = Arc::new(SnapshotCache::new());
        let mut f = Fetcher::new(
            Arc::clone(&cache),
            script(vec![Ok(Fetched::NotModified)]),
            "effect",
        );
        let e = f.tick(1);
        assert!(matches!(&e[0], Event::FetchFailing(m) if m.contains("304")));
        assert!(matches!(&e[1], Event::EnteredSafeMode(_)));
        f.replace_source(script(vec![new(&snap("v1", 60), Some("\"v1\""))]));
        assert_eq!(
            f.tick(2),
            vec![first("v1"), Event::FetchRecovered, Event::LeftSafeMode]
        );
        f.replace_source(script(vec![Ok(Fetched::NotModified)]));
        assert_eq!(f.etag, None, "a new source starts without an ETag");
        // Still a snapshot cached: a 304 only confirms it.
        assert!(f.tick(3).is_empty());
        assert_eq!(cache.age(3), Some(0));
    }

    #[test]
    fn stale_default_and_the_configured_max_age() {
        let cache = SnapshotCache::new();
        cache.store(snap("v", 60), 100);
        assert!(cache.fresh(160).is_some() && cache.fresh(161).is_none());
        cache.set_max_age_override(Some(5));
        assert!(cache.fresh(105).is_some() && cache.fresh(106).is_none());
        cache.set_max_age_override(None);
        assert!(cache.fresh(160).is_some());
        // A policy of 0 s (refused by budgetd) still leaves one second.
        cache.store(snap("v", 0), 200);
        assert_eq!(cache.max_age(&cache.policy()), 1);
        assert!(cache.fresh(201).is_some() && cache.fresh(202).is_none());
    }

    #[test]
    fn bad_endpoint_fails_every_fetch_with_its_reason() {
        let settings = Settings {
            endpoint: "https://ctl".into(),
            ..Settings::default()
        };
        let mut src = HttpSource::new(&settings);
        let err = src.fetch(None).unwrap_err();
        assert!(
            err.contains("bad budgetd endpoint") && err.contains("https"),
            "{err}"
        );
    }

    /// A snapshot with a non-finite allocation (JSON `null`, as serde_json
    /// writes infinity) or one out of range is refused with an error naming the
    /// field, and the fetch fails instead of panicking.
    #[test]
    fn http_source_refuses_a_snapshot_with_a_bad_number() {
        use std::io::{Read, Write};
        use std::net::TcpListener;
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![policy_core::AccountSpec {
                name: "x9a".into(),
                parent: None,
                allocation_gpu_hours: 10.0,
                overcommit: false,
            }],
            members: vec![],
        };
        let mut s = snap("v", 60);
        s.fair_share = FairShare::compute(&tree, &Default::default(), 0, 7 * 86400);
        let mut v = serde_json::to_value(&s).expect("json");
        for (bad, says) in [
            (serde_json::Value::Null, "fair_share.nodes[1].allocation"),
            (
                serde_json::json!(1e306),
                "(\"x9a\").allocation must be a number",
            ),
        ] {
            v["fair_share"]["nodes"][1]["allocation"] = bad;
            let body = v.to_string();
            let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
            let port = listener.local_addr().expect("addr").port();
            let server = std::thread::spawn(move || {
                let (mut c, _) = listener.accept().expect("accept");
                let mut buf = [0u8; 4096];
                let _ = c.read(&mut buf);
                let head = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = c.write_all(head.as_bytes());
                let _ = c.write_all(body.as_bytes());
            });
            let settings = Settings {
                endpoint: format!("http://127.0.0.1:{port}"),
                ..Settings::default()
            };
            let Err(err) = HttpSource::new(&settings).fetch(None) else {
                panic!("a snapshot with a bad number was accepted");
            };
            server.join().expect("server");
            assert!(
                err.starts_with("bad snapshot from budgetd: snapshot is not valid"),
                "{err}"
            );
            assert!(err.contains(says), "{err}");
        }
    }
}
