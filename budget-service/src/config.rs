//! The `budgetd --config FILE` file (TOML): who is an admin, which bearer
//! tokens exist for TCP callers, and defaults for a fresh database.
//!
//! Example:
//! ```toml
//! snapshot_refresh_secs = 15      # recompute the plugin snapshot at least this often
//! body_limit_bytes = 4194304     # JSON bodies
//! import_limit_bytes = 268435456 # usage import (sacct text)
//! import_batch_runs = 2000        # runs per import transaction (the store lock is free between)
//!
//! user_body_limit_bytes = 65536  # bodies of callers that are neither admin nor controller
//! header_timeout_secs = 10        # request head (and idle keep-alive) deadline
//! request_timeout_secs = 60       # whole request, admins' imports excepted
//! max_connections = 2048          # open connections, privileged uids not counted
//! max_connections_per_peer = 256  # per uid (socket) or IP address (TCP)
//! reserved_connections = 64       # TCP, over both caps: controller and agent tokens only
//! trusted_addresses = ["10.0.0.5"] # TCP peers never capped (slurmctld's hosts)
//! expensive_reads_per_minute = 120 # share/usage/why/idle per caller
//! shadow_sample_secs = 60         # shadow mode: one sample of the queue at most this often
//! backup_dir = "/var/lib/slurm-budget/backups" # `budgetctl backup` writes only here (default: `backups` beside the database)
//!
//! [admins]
//! uids = [990]                    # uid 0 and the uid running budgetd are always admins
//! users = ["slurmadmin"]
//!
//! [controller]                    # slurmctld's plugins: sync, snapshot, preemption records
//! uids = [64030]                  # uid 0 and budgetd's own uid always are
//! users = ["slurm"]
//!
//! [[tokens]]                      # TCP callers: Authorization: Bearer <token>
//! token = "s3cret-prometheus"
//! user = "prometheus"
//! role = "reader"                 # admin | controller | reader | user | agent
//!
//! [[tokens]]                      # a node agent over TCP: may only post reports
//! token = "s3cret-node-agents"
//! user = "gpu-nodes"
//! role = "agent"
//! nodes = ["gpu01"]               # agent tokens: the nodes it may report for (one each, best)
//!
//! [ui_proxy]                      # the web view behind the site's sign-in proxy (optional)
//! user_header = "X-Remote-User"   # the header the proxy sets to the signed-in user
//! addresses = ["127.0.0.1"]       # TCP peers trusted to set it (the proxy's hosts); ignored from others
//! readers = ["pm-alice"]          # these users read every account; the others see what a user token sees
//!
//! [whatif]                        # the web view's what-if (`budgetctl whatif` run as a child)
//! budgetctl = "/usr/bin/budgetctl" # default: beside budgetd's executable, else on PATH
//! time_limit_secs = 600           # a replay running longer is stopped
//! keep_results = 20               # finished what-ifs kept in memory, at most
//! keep_secs = 3600                # and for at most this long
//!
//! [policy]                        # used only when the database has no policy yet
//! window_secs = 604800
//! preemption = "default"          # gentle | default | aggressive
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use budget_protocol::tree::PolicyPatch;

/// What a token's holder may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    /// Anything but the controller's own routes.
    Admin,
    /// slurmctld's plugins over TCP: the snapshot, job syncs, preemption
    /// records (and reads); nothing else.
    Controller,
    /// Read everything (dashboards, Prometheus), change nothing.
    Reader,
    /// The named user: read own accounts, manage coordinated subtrees.
    User,
    /// A node agent (`budget-agent` over TCP): may post agent reports and
    /// nothing else. Least privilege, because the token sits on every GPU
    /// node; agents on the controller host use the socket as root instead.
    Agent,
}

/// One bearer token.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TokenSpec {
    pub token: String,
    pub user: String,
    #[serde(default = "default_role")]
    pub role: TokenRole,
    /// For `agent` tokens (required, not empty): the nodes whose reports the
    /// token may post. One token per node is best: a token taken from one
    /// node then cannot speak for any other.
    #[serde(default)]
    pub nodes: Vec<String>,
}

fn default_role() -> TokenRole {
    TokenRole::User
}

/// The web view behind a site's sign-in proxy (`[ui_proxy]`): requests
/// from `addresses` carrying `user_header` are read as that user, without
/// the token login. The header of any other peer is ignored, so a client
/// that reaches budgetd directly cannot name itself someone else; the proxy
/// must set the header itself (dropping what the browser sent).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UiProxy {
    pub user_header: String,
    pub addresses: Vec<std::net::IpAddr>,
    /// Users who read every account (leads, program managers); any other
    /// user sees what a user token of that name sees.
    #[serde(default)]
    pub readers: Vec<String>,
}

/// The web view's what-if (`[whatif]`, `crate::whatif`): budgetd runs
/// `budgetctl whatif --input -` as a child process, one at a time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WhatifConfig {
    /// The `budgetctl` to run; `None`: the one beside budgetd's own
    /// executable, else the first on `PATH`. Not found: the what-if page
    /// says so and nothing else changes.
    #[serde(default)]
    pub budgetctl: Option<std::path::PathBuf>,
    /// A replay still running after this many seconds is stopped (killed).
    #[serde(default = "default_whatif_time_limit")]
    pub time_limit_secs: u64,
    /// Finished what-ifs kept in memory for their pages, at most this many,
    /// each at most `keep_secs`.
    #[serde(default = "default_whatif_keep_results")]
    pub keep_results: usize,
    #[serde(default = "default_whatif_keep_secs")]
    pub keep_secs: u64,
}

impl Default for WhatifConfig {
    fn default() -> Self {
        WhatifConfig {
            budgetctl: None,
            time_limit_secs: default_whatif_time_limit(),
            keep_results: default_whatif_keep_results(),
            keep_secs: default_whatif_keep_secs(),
        }
    }
}

fn default_whatif_time_limit() -> u64 {
    600
}

fn default_whatif_keep_results() -> usize {
    20
}

fn default_whatif_keep_secs() -> u64 {
    3600
}

/// Configured admins (in addition to uid 0 and budgetd's own uid).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Admins {
    #[serde(default)]
    pub uids: Vec<u32>,
    #[serde(default)]
    pub users: Vec<String>,
}

/// Who the controller is (in addition to uid 0 and budgetd's own uid):
/// slurmctld's `SlurmUser`, whose plugins sync jobs and read the snapshot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Controller {
    #[serde(default)]
    pub uids: Vec<u32>,
    #[serde(default)]
    pub users: Vec<String>,
}

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub admins: Admins,
    #[serde(default)]
    pub controller: Controller,
    #[serde(default)]
    pub tokens: Vec<TokenSpec>,
    #[serde(default)]
    pub policy: PolicyPatch,
    /// The cached plugin snapshot is recomputed when older than this, even
    /// without writes, because running jobs keep using GPU time.
    #[serde(default = "default_refresh")]
    pub snapshot_refresh_secs: i64,
    /// Largest accepted request body.
    #[serde(default = "default_body_limit")]
    pub body_limit_bytes: usize,
    /// Largest accepted `usage import` file (sacct text).
    #[serde(default = "default_import_limit")]
    pub import_limit_bytes: usize,
    /// Runs an import stores per transaction: the store lock is taken and
    /// released per batch, so a sync or a snapshot waits for one batch at
    /// most, never for a whole large import.
    #[serde(default = "default_import_batch")]
    pub import_batch_runs: usize,
    /// A node whose latest agent report is older than this flags no job as
    /// idle (its agent stopped: the streaks it last saw are no longer news).
    #[serde(default = "default_agent_stale")]
    pub agent_stale_secs: i64,
    /// Shadow mode (`crate::shadow`): at most one sample of the pending queue
    /// that `site_factor/budget` in `mode=shadow` sends is recorded this often.
    #[serde(default = "default_shadow_sample")]
    pub shadow_sample_secs: i64,
    /// Largest body from callers that are neither admin nor controller
    /// (users, readers, agents): their routes take small bodies, and a
    /// plain user must not make budgetd buffer megabytes.
    #[serde(default = "default_user_body_limit")]
    pub user_body_limit_bytes: usize,
    /// A connection must send a request head within this many seconds of
    /// opening or of its previous response (slow or idle clients are closed).
    #[serde(default = "default_header_timeout")]
    pub header_timeout_secs: u64,
    /// A request (its body included) must be answered within this many
    /// seconds; admins get ten times as long (usage imports).
    #[serde(default = "default_request_timeout")]
    pub request_timeout_secs: u64,
    /// Open connections at most (uid 0, budgetd's uid and the controller's
    /// uids on the socket are not counted, so the controller always gets in).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    /// Open connections per peer (uid on the socket, IP address on TCP).
    #[serde(default = "default_max_per_peer")]
    pub max_connections_per_peer: usize,
    /// TCP connections beyond both caps that only controller and agent
    /// tokens may use: a connection admitted into this reserve is served
    /// only while its requests carry such a token (others are answered 503
    /// and closed), so clients that hold the general share open cannot keep
    /// slurmctld's plugins or the node agents out.
    #[serde(default = "default_reserved_connections")]
    pub reserved_connections: usize,
    /// TCP peers (IP addresses) whose connections are never counted, as
    /// privileged uids on the socket are not: slurmctld's hosts (primary
    /// and backup) when they reach budgetd over TCP.
    #[serde(default)]
    pub trusted_addresses: Vec<std::net::IpAddr>,
    /// Expensive reads (share, usage, why, idle) per caller per minute.
    #[serde(default = "default_expensive_reads")]
    pub expensive_reads_per_minute: u32,
    /// The folder `POST /v1/backup` (`budgetctl backup`) writes into, or into
    /// a folder below it; `None`: `backups` beside the database.
    #[serde(default)]
    pub backup_dir: Option<std::path::PathBuf>,
    /// The web view's sign-in by a reverse proxy (`None`: token login only).
    #[serde(default)]
    pub ui_proxy: Option<UiProxy>,
    /// The web view's what-if.
    #[serde(default)]
    pub whatif: WhatifConfig,
}

fn default_user_body_limit() -> usize {
    64 * 1024
}

fn default_header_timeout() -> u64 {
    10
}

fn default_request_timeout() -> u64 {
    60
}

fn default_max_connections() -> usize {
    2048
}

fn default_max_per_peer() -> usize {
    256
}

fn default_reserved_connections() -> usize {
    64
}

fn default_expensive_reads() -> u32 {
    120
}

fn default_refresh() -> i64 {
    15
}

fn default_body_limit() -> usize {
    4 * 1024 * 1024
}

fn default_import_limit() -> usize {
    256 * 1024 * 1024
}

/// The plugin's largest sync chunk: an import batch keeps the store lock
/// about as long as a sync may (measured in docs/benchmarks.md).
fn default_import_batch() -> usize {
    2000
}

fn default_agent_stale() -> i64 {
    300
}

fn default_shadow_sample() -> i64 {
    60
}

impl Default for Config {
    fn default() -> Self {
        Self {
            admins: Admins::default(),
            controller: Controller::default(),
            tokens: Vec::new(),
            policy: PolicyPatch::default(),
            snapshot_refresh_secs: default_refresh(),
            body_limit_bytes: default_body_limit(),
            import_limit_bytes: default_import_limit(),
            import_batch_runs: default_import_batch(),
            agent_stale_secs: default_agent_stale(),
            shadow_sample_secs: default_shadow_sample(),
            user_body_limit_bytes: default_user_body_limit(),
            header_timeout_secs: default_header_timeout(),
            request_timeout_secs: default_request_timeout(),
            max_connections: default_max_connections(),
            max_connections_per_peer: default_max_per_peer(),
            reserved_connections: default_reserved_connections(),
            trusted_addresses: Vec::new(),
            expensive_reads_per_minute: default_expensive_reads(),
            backup_dir: None,
            ui_proxy: None,
            whatif: WhatifConfig::default(),
        }
    }
}

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: String,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
}

/// Why a config file that holds tokens is too open, as ssh judges key files:
/// readable or writable by users outside its owner and group (group-readable
/// is fine: budgetd may run as a group member of the file). `None`: fine, or
/// no token in it.
pub fn permission_warning(path: &Path, cfg: &Config) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    if cfg.tokens.is_empty() {
        return None;
    }
    let mode = std::fs::metadata(path).ok()?.permissions().mode() & 0o777;
    let open = if mode & 0o004 != 0 {
        "readable by other users"
    } else if mode & 0o022 != 0 {
        "writable by users other than its owner"
    } else {
        return None;
    };
    Some(format!(
        "{} holds {} bearer token(s) and is {open} (mode {mode:04o}): anyone who reads it \
         can act as those callers; chmod 0600 (or 0640 with budgetd's group) and rotate the tokens",
        path.display(),
        cfg.tokens.len()
    ))
}

impl Config {
    /// Reads and checks a config file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Config::parse(&text).map_err(|message| ConfigError::Parse {
            path: path.display().to_string(),
            message,
        })
    }

    /// Parses config text (TOML).
    pub fn parse(text: &str) -> Result<Config, String> {
        let cfg: Config = toml::from_str(text).map_err(|e| e.to_string())?;
        for t in &cfg.tokens {
            if t.token.len() < 8 {
                return Err(format!(
                    "token of user {:?} is shorter than 8 characters",
                    t.user
                ));
            }
            match (t.role == TokenRole::Agent, t.nodes.is_empty()) {
                (true, true) => {
                    return Err(format!(
                        "agent token of user {:?} needs nodes = [\"NODE\", ...] (the nodes it reports for)",
                        t.user
                    ));
                }
                (false, false) => {
                    return Err(format!(
                        "token of user {:?}: nodes is only for role = \"agent\"",
                        t.user
                    ));
                }
                _ => {}
            }
        }
        if cfg.header_timeout_secs < 1 || cfg.request_timeout_secs < 1 {
            return Err("header_timeout_secs and request_timeout_secs must be >= 1".into());
        }
        if cfg.max_connections < 1 || cfg.max_connections_per_peer < 1 {
            return Err("max_connections and max_connections_per_peer must be >= 1".into());
        }
        if cfg.expensive_reads_per_minute < 1 {
            return Err("expensive_reads_per_minute must be >= 1".into());
        }
        if cfg.snapshot_refresh_secs < 1 {
            return Err("snapshot_refresh_secs must be >= 1".into());
        }
        if cfg.import_batch_runs < 1 {
            return Err("import_batch_runs must be >= 1".into());
        }
        if cfg.shadow_sample_secs < 1 {
            return Err("shadow_sample_secs must be >= 1".into());
        }
        if cfg.agent_stale_secs < 1 {
            return Err("agent_stale_secs must be >= 1".into());
        }
        if cfg.body_limit_bytes < 1024
            || cfg.import_limit_bytes < 1024
            || cfg.user_body_limit_bytes < 1024
        {
            return Err(
                "body_limit_bytes, import_limit_bytes and user_body_limit_bytes must be >= 1024"
                    .into(),
            );
        }
        if let Some(px) = &cfg.ui_proxy {
            let header = px.user_header.trim().to_ascii_lowercase();
            if axum::http::HeaderName::from_bytes(header.as_bytes()).is_err() {
                return Err(format!(
                    "[ui_proxy] user_header {:?} is not an HTTP header name",
                    px.user_header
                ));
            }
            if matches!(
                header.as_str(),
                "authorization" | "cookie" | "host" | "x-forwarded-for" | "x-forwarded-host"
            ) {
                return Err(format!(
                    "[ui_proxy] user_header {:?} carries something else; name the header the proxy sets to the user (e.g. X-Remote-User)",
                    px.user_header
                ));
            }
            if px.addresses.is_empty() {
                return Err(
                    "[ui_proxy] addresses must name the proxy's hosts (only they may pass a user)"
                        .into(),
                );
            }
        }
        if cfg.whatif.time_limit_secs < 1 || cfg.whatif.keep_results < 1 || cfg.whatif.keep_secs < 1
        {
            return Err("[whatif] time_limit_secs, keep_results and keep_secs must be >= 1".into());
        }
        let policy = cfg.policy.apply(&budget_protocol::Policy::default());
        crate::policy::validate(&policy).map_err(|e| format!("[policy]: {e}"))?;
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ui_proxy_needs_its_hosts_and_a_header_of_its_own() {
        let px = |body: &str| Config::parse(&format!("[ui_proxy]\n{body}\n"));
        let cfg =
            px("user_header = \"X-Remote-User\"\naddresses = [\"10.0.0.7\"]\nreaders = [\"pm\"]")
                .expect("valid");
        let p = cfg.ui_proxy.expect("ui_proxy");
        assert_eq!((p.readers.len(), p.addresses.len()), (1, 1));
        for (body, says) in [
            (
                "user_header = \"X-Remote-User\"\naddresses = []",
                "addresses",
            ),
            (
                "user_header = \"Cookie\"\naddresses = [\"10.0.0.7\"]",
                "carries something else",
            ),
            (
                "user_header = \"bad header\"\naddresses = [\"10.0.0.7\"]",
                "not an HTTP header",
            ),
            (
                "user_header = \"X-User\"\naddresses = [\"proxy.example\"]",
                "addresses",
            ),
            (
                "user_header = \"X-User\"\naddresses = [\"10.0.0.7\"]\nlogout = 1",
                "logout",
            ),
        ] {
            let err = px(body).expect_err(body);
            assert!(err.to_string().contains(says), "{body}: {err}");
        }
    }

    #[test]
    fn the_packaged_config_file_parses() {
        let cfg = Config::parse(include_str!("../../packaging/etc/budgetd.toml"))
            .expect("packaging/etc/budgetd.toml");
        assert_eq!(cfg.whatif, WhatifConfig::default());
    }

    #[test]
    fn parses_the_documented_example_and_refuses_unknown_keys() {
        let cfg = Config::parse(
            "snapshot_refresh_secs = 5\n[admins]\nuids=[990]\nusers=[\"ops\"]\n\
             [[tokens]]\ntoken=\"0123456789\"\nuser=\"prom\"\nrole=\"reader\"\n[policy]\npreemption=\"gentle\"\n",
        )
        .unwrap();
        assert_eq!(cfg.admins.uids, vec![990]);
        assert_eq!(cfg.tokens[0].role, TokenRole::Reader);
        assert_eq!(
            cfg.policy.preemption,
            Some(budget_protocol::PreemptionPreset::Gentle)
        );
        // A setting that is now a constant of the rule is refused by name.
        let e = Config::parse("[policy]\nhysteresis = 0.1").unwrap_err();
        assert!(
            e.contains("`hysteresis` is a fixed constant of the rule"),
            "{e}"
        );
        assert!(Config::parse("bogus = 1").unwrap_err().contains("bogus"));
        let w = Config::parse("[whatif]\nbudgetctl = \"/opt/b\"\ntime_limit_secs = 30\n")
            .expect("whatif");
        assert_eq!(w.whatif.time_limit_secs, 30);
        assert_eq!(w.whatif.keep_results, 20);
        assert!(
            Config::parse("[whatif]\nkeep_results = 0")
                .unwrap_err()
                .contains("keep_results")
        );
        assert!(
            Config::parse("[policy]\nwindow_secs = -1")
                .unwrap_err()
                .contains("window_secs")
        );
    }
}
