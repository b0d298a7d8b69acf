//! The plugins' one settings parser: the `budget_*` keys of `PriorityParameters` in
//! `slurm.conf`, and the `SLURM_BUDGET_ENDPOINT` environment variable.
//!
//! One line in `slurm.conf` configures all three plugins (comma separated; keys of
//! other plugins, e.g. multifactor's, are ignored):
//! - `budget_socket=PATH`   budgetd endpoint: a socket path, `unix:/path` or
//!   `http://host:port` (default [`budget_client::DEFAULT_SOCKET`]);
//! - `budget_period=SECS`   how often the background thread fetches the snapshot (and,
//!   in `priority/budget`, recomputes priorities and syncs jobs); 1..=3600, default 5;
//! - `budget_timeout_ms=MS` hard deadline of each request to budgetd; 10..=60000,
//!   default 1000;
//! - `budget_max_age=SECS`  snapshot age that enters safe mode; overrides the
//!   snapshot's own `policy.snapshot_max_age_secs` (see [`crate::snapshot`]);
//! - `budget_token_file=PATH` a file holding the bearer token sent to budgetd (needed
//!   over TCP; budgetd gives the plugins' requests the token's role, `admin` today).
//!   Read by the background threads when they first connect ([`LazyClient`]), never in
//!   a Slurm callback; a changed path takes effect at `scontrol reconfigure`;
//! - `budget_sync=0|1`      `priority/budget` sends job state to budgetd (default 1);
//! - `budget_pass_log=0|1`  `priority/budget` logs every pass at info level with its
//!   timings (default 0: the same line at debug level; `scripts/bench-slurm` parses it).
//!
//! `SLURM_BUDGET_ENDPOINT` in `slurmctld`'s environment, when set, replaces
//! `budget_socket` (handy for testbeds). A bad value is reported by the plugin that
//! read it and the default kept for that key.
//!
//! Read [`Settings::load`] where Slurm holds its configuration still (`init`,
//! `priority_p_reconfig`), never from a background thread: `scontrol reconfigure`
//! frees and replaces `slurm_conf`'s strings.

use std::time::Duration;

use budget_client::{Client, ClientError, DEFAULT_SOCKET, Endpoint};

/// Environment variable that overrides the endpoint.
pub const ENDPOINT_ENV: &str = "SLURM_BUDGET_ENDPOINT";

/// What a plugin's "cannot reach budgetd" error tells the administrator to check.
pub const ENDPOINT_HINT: &str =
    "set budget_socket in PriorityParameters (or SLURM_BUDGET_ENDPOINT for slurmctld)";

/// Largest snapshot accepted from budgetd (a tree of many thousands of accounts is a
/// few MiB; this bounds what a confused peer can make the plugin buffer).
pub const MAX_SNAPSHOT_BYTES: usize = 64 << 20;

/// The plugins' settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// budgetd endpoint: a socket path, `unix:/path` or `http://host:port`.
    pub endpoint: String,
    /// Time between two fetches (and `priority/budget` passes).
    pub period: Duration,
    /// Hard deadline of one request (connect, write, read).
    pub timeout: Duration,
    /// Overrides the snapshot's `policy.snapshot_max_age_secs` when set.
    pub max_age_secs: Option<i64>,
    /// `priority/budget` sends job state to budgetd.
    pub sync_jobs: bool,
    /// `priority/budget` logs each pass at info level.
    pub pass_log: bool,
    /// File with the bearer token for budgetd (`budget_token_file`).
    pub token_file: Option<String>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            endpoint: DEFAULT_SOCKET.to_string(),
            period: Duration::from_secs(5),
            timeout: Duration::from_millis(1000),
            max_age_secs: None,
            sync_jobs: true,
            pass_log: false,
            token_file: None,
        }
    }
}

/// A bad value in `PriorityParameters`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("PriorityParameters: bad value for {key}: {value:?} ({why})")]
pub struct SettingsError {
    pub key: String,
    pub value: String,
    pub why: &'static str,
}

fn num(key: &str, value: &str, lo: u64, hi: u64) -> Result<u64, SettingsError> {
    let err = |why| SettingsError {
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

impl Settings {
    /// Parse a `PriorityParameters` string (may be empty). Each error names its key;
    /// that key keeps its default.
    pub fn parse(params: &str) -> (Settings, Vec<SettingsError>) {
        let mut s = Settings::default();
        let mut errors = Vec::new();
        for item in params.split(',') {
            let Some((key, value)) = item.split_once('=') else {
                continue;
            };
            let key = key.trim();
            let r = match key {
                "budget_socket" if !value.trim().is_empty() => {
                    s.endpoint = value.trim().to_string();
                    Ok(())
                }
                "budget_period" => {
                    num(key, value, 1, 3600).map(|n| s.period = Duration::from_secs(n))
                }
                "budget_timeout_ms" => {
                    num(key, value, 10, 60_000).map(|n| s.timeout = Duration::from_millis(n))
                }
                "budget_max_age" => {
                    num(key, value, 1, 7 * 86_400).map(|n| s.max_age_secs = Some(n as i64))
                }
                "budget_sync" => num(key, value, 0, 1).map(|n| s.sync_jobs = n == 1),
                "budget_pass_log" => num(key, value, 0, 1).map(|n| s.pass_log = n == 1),
                "budget_token_file" => {
                    let path = value.trim();
                    if path.starts_with('/') {
                        s.token_file = Some(path.to_string());
                        Ok(())
                    } else {
                        Err(SettingsError {
                            key: key.to_string(),
                            value: value.to_string(),
                            why: "not an absolute path",
                        })
                    }
                }
                _ => Ok(()),
            };
            if let Err(e) = r {
                errors.push(e);
            }
        }
        (s, errors)
    }

    /// These settings with the endpoint replaced by `env` (the value of
    /// [`ENDPOINT_ENV`]) when it is set and not blank.
    pub fn with_endpoint_override(mut self, env: Option<&str>) -> Settings {
        if let Some(ep) = env.map(str::trim).filter(|e| !e.is_empty()) {
            self.endpoint = ep.to_string();
        }
        self
    }

    /// The settings of this process: `PriorityParameters` as `slurmctld` read it,
    /// then [`ENDPOINT_ENV`]. Call where Slurm's configuration cannot change under us.
    pub fn load() -> (Settings, Vec<SettingsError>) {
        let (s, errors) = Settings::parse(&priority_params().unwrap_or_default());
        let env = std::env::var(ENDPOINT_ENV).ok();
        (s.with_endpoint_override(env.as_deref()), errors)
    }

    /// [`Settings::load`], logging each bad value through Slurm's log.
    pub fn load_and_log() -> Settings {
        let (s, errors) = Settings::load();
        for e in errors {
            crate::log::error(&format!("{e}; using the default"));
        }
        s
    }

    /// A budgetd client for these settings: the endpoint, the hard timeout, the
    /// snapshot size bound and a connect error that names [`ENDPOINT_HINT`].
    pub fn client(&self) -> Result<Client, ClientError> {
        Ok(Client::new(Endpoint::parse(&self.endpoint)?)
            .with_timeout(self.timeout)
            .with_max_body(MAX_SNAPSHOT_BYTES)
            .with_connect_hint(ENDPOINT_HINT))
    }

    /// [`Settings::client`] with the token of `budget_token_file`, if set. Reads that
    /// file: call it on a background thread only (through [`LazyClient`]).
    pub fn connect(&self) -> Result<Client, String> {
        let client = self
            .client()
            .map_err(|e| format!("bad budgetd endpoint {:?}: {e}", self.endpoint))?;
        match &self.token_file {
            None => Ok(client),
            Some(path) => Ok(client.with_token(read_token(path)?)),
        }
    }

    /// Whether a client built from `self` still serves `other` (same endpoint, timeout
    /// and token file): after `scontrol reconfigure` only a change of these needs a
    /// new one.
    pub fn same_connection(&self, other: &Settings) -> bool {
        self.endpoint == other.endpoint
            && self.timeout == other.timeout
            && self.token_file == other.token_file
    }
}

/// The token in `budget_token_file` (`budget_client::read_token_file`, the one reader
/// `budgetctl` and `budget-agent` use too), its error naming the option.
pub fn read_token(path: &str) -> Result<String, String> {
    budget_client::read_token_file(std::path::Path::new(path))
        .map_err(|e| format!("budget_token_file: {e}"))
}

/// A budgetd client made on first use, on the thread that uses it: making it may read
/// `budget_token_file`, which must never happen in a Slurm callback (`init` only
/// creates this). A failure (bad endpoint, unreadable token) is kept and returned by
/// every request, so the plugin stays in safe mode and logs why.
#[derive(Debug)]
pub struct LazyClient {
    settings: Settings,
    client: Option<Result<Client, String>>,
}

impl LazyClient {
    /// A client for `settings`, not made yet (no I/O).
    pub fn new(settings: &Settings) -> Self {
        LazyClient {
            settings: settings.clone(),
            client: None,
        }
    }

    /// The client, made now if needed (reads the token file).
    pub fn get(&mut self) -> Result<&Client, String> {
        let settings = &self.settings;
        self.client
            .get_or_insert_with(|| settings.connect())
            .as_ref()
            .map_err(Clone::clone)
    }

    /// The settings it was made from.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }
}

/// `PriorityParameters` from `slurm.conf` as `slurmctld` read it.
pub fn priority_params() -> Option<String> {
    // SAFETY: `slurm_conf` is libslurmfull's global configuration, filled before any
    // plugin loads and replaced only by a reconfigure, which holds the configuration
    // write lock while our callers (init, reconfig) run under Slurm's own locking;
    // the string is copied at once.
    unsafe { crate::cstr::opt_string(slurm_ffi::sys::slurm_conf.priority_params) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_keys_and_keeps_defaults() {
        let (s, e) = Settings::parse(
            "budget_socket=/tmp/b.sock,budget_period=2,PriorityFlags=x,budget_timeout_ms=250,\
             budget_max_age=30,budget_sync=0,budget_pass_log=1",
        );
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.endpoint, "/tmp/b.sock");
        assert_eq!(s.period, Duration::from_secs(2));
        assert_eq!(s.timeout, Duration::from_millis(250));
        assert_eq!(s.max_age_secs, Some(30));
        assert!(!s.sync_jobs && s.pass_log);
        let (s, e) = Settings::parse("budget_period=0,budget_timeout_ms=abc,budget_sync=2");
        assert_eq!(e.len(), 3);
        assert_eq!(e[0].key, "budget_period");
        assert_eq!(
            e[1].to_string(),
            "PriorityParameters: bad value for budget_timeout_ms: \"abc\" (not a number)"
        );
        assert_eq!(s, Settings::default());
        assert_eq!(Settings::parse("").0, Settings::default());
        assert_eq!(Settings::default().endpoint, DEFAULT_SOCKET);
    }

    #[test]
    fn environment_replaces_the_endpoint() {
        let (s, _) = Settings::parse("budget_socket=/a.sock");
        assert_eq!(s.clone().with_endpoint_override(None).endpoint, "/a.sock");
        assert_eq!(
            s.clone().with_endpoint_override(Some("  ")).endpoint,
            "/a.sock"
        );
        let e = s.clone().with_endpoint_override(Some(" http://ctl:8700 "));
        assert_eq!(e.endpoint, "http://ctl:8700");
        assert!(!e.same_connection(&s));
        let mut t = s.clone();
        t.pass_log = true;
        assert!(t.same_connection(&s), "only endpoint and timeout matter");
        assert!(s.client().is_ok());
        let bad = Settings {
            endpoint: "ftp://x".into(),
            ..Settings::default()
        };
        assert!(bad.client().is_err());
    }

    #[test]
    fn token_file_is_read_by_the_lazy_client_only() {
        let dir = std::env::temp_dir().join(format!("budget-token-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir");
        let path = dir.join("budget.token");
        let path_s = path.to_str().expect("utf8 path").to_string();
        let (s, e) = Settings::parse(&format!(
            "budget_socket=http://budgetd:8700,budget_token_file={path_s}"
        ));
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(s.token_file.as_deref(), Some(path_s.as_str()));
        let (rel, e) = Settings::parse("budget_token_file=etc/token");
        assert_eq!((rel.token_file, e[0].why), (None, "not an absolute path"));
        // Made lazily: nothing is read until the first use, so a file written after
        // init (or fixed after an error is logged at the next reconfigure) counts.
        let mut lazy = LazyClient::new(&s);
        std::fs::write(&path, "  s3cret-token-0123\n").expect("write");
        // A token file readable by others is refused (ssh-style); 0600 is used.
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        assert!(lazy.get().is_ok());
        assert_eq!(read_token(&path_s).as_deref(), Ok("s3cret-token-0123"));
        for (text, why) in [
            ("", "empty"),
            ("two words", "white space"),
            ("tok\r\nX-Evil: 1", "white space"),
        ] {
            std::fs::write(&path, text).expect("write");
            let err = LazyClient::new(&s).get().map(|_| ()).unwrap_err();
            assert!(
                err.contains(&path_s) && err.contains(why),
                "{text:?}: {err}"
            );
        }
        std::fs::write(&path, "x".repeat(5000)).expect("write");
        assert!(read_token(&path_s).unwrap_err().contains("larger than"));
        let missing = format!("{path_s}.missing");
        assert!(read_token(&missing).unwrap_err().contains(&missing));
        let mut other = s.clone();
        other.token_file = Some("/etc/other.token".into());
        assert!(
            !other.same_connection(&s),
            "a new token file needs a new client"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
