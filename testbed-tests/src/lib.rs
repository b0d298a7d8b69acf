//! `testbed-tests`: the harness of slurm-budget's integration tests against a real
//! Slurm testbed (`scripts/testbed`: slurmctld + N slurmd with fake GPUs + budgetd on
//! loopback). The suites themselves live in `tests/testbed/` (one module each); this
//! library is what they share:
//!
//! - [`testbed`]: bring a testbed up through `scripts/testbed up` with a suite's
//!   settings, capture the environment `scripts/testbed env` exports, restart its
//!   daemons, and tear it down when the guard drops (also on a panic);
//! - [`slurm`]: Slurm's client commands run with exactly that environment (so a
//!   testbed that puts another release's wrappers first on `PATH` is used unchanged),
//!   and their output parsed from explicit `--Format` fields with epoch times;
//! - [`api`]: budgetd's REST API through `budget-client`, with typed responses;
//! - [`ledger`]: budgetd's run ledger read from its SQLite file, and its comparison
//!   with the runs Slurm reports;
//! - [`logs`]: reading `slurmctld.log` (counting lines, the time of a line);
//! - [`time`]: clock, Slurm and log time stamps;
//! - [`checks`]: named checks, their output, and the per-suite summary line that
//!   `scripts/test` adds up;
//! - [`wait`]: polling until a condition holds;
//! - [`env`]: the environment `scripts/testbed env` exports, applied to Slurm's commands.
//!
//! Nothing here hard-codes a Slurm binary path or a release-specific output format.

pub mod api;
pub mod checks;
mod command;
pub mod env;
pub mod error;
pub mod ledger;
pub mod logs;
pub mod slurm;
pub mod testbed;
pub mod time;
pub mod wait;

pub use error::{Error, Result};

use std::path::PathBuf;

/// The repository root (this crate's parent folder).
pub fn repo_root() -> PathBuf {
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest.parent().map(PathBuf::from).unwrap_or(manifest)
}

/// Where the release build lives: `$CARGO_TARGET_DIR/release`, else `target/release`
/// under the repository root. The suites run the binaries and plugins built there.
pub fn release_dir() -> PathBuf {
    match std::env::var_os("CARGO_TARGET_DIR") {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            if dir.is_absolute() {
                dir.join("release")
            } else {
                repo_root().join(dir).join("release")
            }
        }
        None => repo_root().join("target").join("release"),
    }
}

/// Where the Slurm plugins for the testbed's release live: [`release_dir`] for the
/// machine's own release, `target/slurm-V/release` when `TESTBED_SLURM=V` names
/// another one (built by `scripts/setup --slurm V`: a plugin loads only into the exact
/// release it was built for). budgetd and the CLIs do not depend on the release.
pub fn plugin_dir() -> PathBuf {
    match std::env::var("TESTBED_SLURM") {
        Ok(v) if !v.is_empty() && v != DEFAULT_SLURM_RELEASE => repo_root()
            .join("target")
            .join(format!("slurm-{v}"))
            .join("release"),
        _ => release_dir(),
    }
}

/// The Slurm release of this machine's own packages (`scripts/lib/releases.sh`).
pub const DEFAULT_SLURM_RELEASE: &str = "22.05";

/// The releases whose testbed runs accounting (`TestbedConfig::accounting`: MariaDB +
/// slurmdbd; `SB_ACCOUNTING_RELEASES` in `scripts/lib/releases.sh`).
pub const ACCOUNTING_SLURM_RELEASES: &[&str] = &["22.05", "24.11", "25.11", "26.05"];
