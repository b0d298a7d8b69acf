//! The `budgetd --config FILE` file (TOML): who is an admin, which bearer
//! tokens exist for TCP callers, and defaults for a fresh database.
//!
//! Example:
//! ```toml
//! snapshot_refresh_secs = 15      # recompute the plugin snapshot at least this often
//! body_limit_bytes = 4194304     # JSON bodies
//! import_limit_bytes = 268435456 # usage import (sacct text)
//!
//! [admins]
//! uids = [990]                    # uid 0 and the uid running budgetd are always admins
//! users = ["slurmadmin"]
//!
//! [[tokens]]                      # TCP callers: Authorization: Bearer <token>
//! token = "s3cret-prometheus"
//! user = "prometheus"
//! role = "reader"                 # admin | reader | user | agent
//!
//! [[tokens]]                      # a node agent over TCP: may only post reports
//! token = "s3cret-node-agents"
//! user = "gpu-nodes"
//! role = "agent"
//!
//! [policy]                        # used only when the database has no policy yet
//! window_secs = 604800
//! hysteresis = 0.1
//! ```

use std::path::Path;

use serde::{Deserialize, Serialize};

use budget_protocol::tree::PolicyPatch;

/// What a token's holder may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TokenRole {
    /// Anything.
    Admin,
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
}

fn default_role() -> TokenRole {
    TokenRole::User
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

/// The whole config file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub admins: Admins,
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
    /// A node whose latest agent report is older than this flags no job as
    /// idle (its agent stopped: the streaks it last saw are no longer news).
    #[serde(default = "default_agent_stale")]
    pub agent_stale_secs: i64,
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

fn default_agent_stale() -> i64 {
    300
}

impl Default for Config {
    fn default() -> Self {
        Self {
            admins: Admins::default(),
            tokens: Vec::new(),
            policy: PolicyPatch::default(),
            snapshot_refresh_secs: default_refresh(),
            body_limit_bytes: default_body_limit(),
            import_limit_bytes: default_import_limit(),
            agent_stale_secs: default_agent_stale(),
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
        }
        if cfg.snapshot_refresh_secs < 1 {
            return Err("snapshot_refresh_secs must be >= 1".into());
        }
        if cfg.agent_stale_secs < 1 {
            return Err("agent_stale_secs must be >= 1".into());
        }
        if cfg.body_limit_bytes < 1024 || cfg.import_limit_bytes < 1024 {
            return Err("body_limit_bytes and import_limit_bytes must be >= 1024".into());
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
    fn parses_the_documented_example_and_refuses_unknown_keys() {
        let cfg = Config::parse(
            "snapshot_refresh_secs = 5\n[admins]\nuids=[990]\nusers=[\"ops\"]\n\
             [[tokens]]\ntoken=\"0123456789\"\nuser=\"prom\"\nrole=\"reader\"\n[policy]\nhysteresis=0.2\n",
        )
        .unwrap();
        assert_eq!(cfg.admins.uids, vec![990]);
        assert_eq!(cfg.tokens[0].role, TokenRole::Reader);
        assert_eq!(cfg.policy.hysteresis, Some(0.2));
        assert!(Config::parse("bogus = 1").unwrap_err().contains("bogus"));
        assert!(
            Config::parse("[policy]\nwindow_secs = -1")
                .unwrap_err()
                .contains("window_secs")
        );
    }
}
