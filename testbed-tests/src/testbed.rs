//! One testbed's life: settings ([`TestbedConfig`]), `scripts/testbed up`, the
//! environment its clients need ([`TestbedEnv`], from `scripts/testbed env`), the
//! fault injections the suites use (stop/start slurmctld, signal or restart budgetd),
//! and `scripts/testbed down` when the [`Testbed`] guard drops, also when a check
//! panicked.
//!
//! The testbed itself stays `scripts/testbed`'s business: this module only sets the
//! `TESTBED_*` variables a suite chooses and passes every other one (`TESTBED_SLURM`,
//! `TESTBED_GPU_TYPE`, `TESTBED_UP_TIMEOUT`, ...) through untouched.
//!
//! With [`TestbedConfig::accounting`] the testbed also runs MariaDB and slurmdbd
//! (the releases of [`crate::ACCOUNTING_SLURM_RELEASES`]); [`Testbed::sacctmgr`] and [`Testbed::add_qos`] change its
//! database (QOS, their `Preempt=` lists, users' QOS lists).
//!
//! `KEEP_TESTBED=1` leaves the testbed up for inspection; otherwise it is stopped,
//! and its folder purged when every check passed (kept, with its logs, when one
//! failed).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::api::Budgetd;
use crate::checks::{Checks, say};
use crate::command;
use crate::error::{Error, Result};
use crate::logs::{LogFile, SEEDED_HISTORY, seeded_history};
use crate::slurm::Slurm;
use crate::wait::wait_secs;
// What `scripts/testbed env` exports lives in `env.rs` (Slurm's commands run with it).
pub use crate::env::TestbedEnv;
use crate::{release_dir, repo_root};

/// The plugins the testbed loads: `(cargo lib name, Slurm plugin file)`, like
/// `SB_PLUGINS` in `scripts/lib/common.sh`.
const PLUGINS: [(&str, &str); 3] = [
    ("priority_budget", "priority_budget.so"),
    ("job_submit_budget", "job_submit_budget.so"),
    ("preempt_budget", "preempt_budget.so"),
];

/// Plugins copied when built, needed only by the suites that load them
/// (`site_factor/budget`: `TestbedConfig::site_factor`; `scripts/testbed` refuses to
/// start such a testbed without it).
const OPTIONAL_PLUGINS: [(&str, &str); 1] = [("site_factor_budget", "site_factor_budget.so")];

/// Environment variable that leaves the testbed up after a suite.
pub const KEEP_VAR: &str = "KEEP_TESTBED";

/// A suite's testbed settings: the `TESTBED_*` variables it sets for `scripts/testbed`.
#[derive(Debug, Clone)]
pub struct TestbedConfig {
    /// `TESTBED_DIR`.
    pub dir: PathBuf,
    /// `TESTBED_PORT_BASE`.
    pub port_base: u16,
    /// `TESTBED_NODES`.
    pub nodes: u32,
    /// `TESTBED_GPUS` (per node).
    pub gpus: u32,
    /// `TESTBED_PRIORITY`; `None` leaves the caller's (or the default, budget).
    pub priority: Option<String>,
    /// `TESTBED_BUDGET_PERIOD` in seconds.
    pub budget_period: u32,
    /// `TESTBED_EXTRA_CONF`; `None` leaves the caller's unless listed in `unset`.
    pub extra_conf: Option<String>,
    /// Variables removed from the testbed's environment.
    pub unset: Vec<&'static str>,
    /// `TESTBED_MIN_JOB_AGE` (Slurm's `MinJobAge`, s); `None`: the testbed's 300.
    pub min_job_age: Option<u32>,
    /// `TESTBED_SITE_FACTOR`: with priority `multifactor`, load `site_factor/budget`
    /// with this `PrioritySiteFactorParameters`.
    pub site_factor: Option<String>,
    /// budgetd's `--config` file (TOML text), written into the testbed's folder
    /// and passed as `TESTBED_BUDGETD_CONFIG`; `None`: budgetd's defaults.
    pub budgetd_config: Option<String>,
    /// `TESTBED_ACCOUNTING`: `true` runs MariaDB + slurmdbd beside slurmctld
    /// (`AccountingStorageType=accounting_storage/slurmdbd`,
    /// `AccountingStorageEnforce=associations`; the releases of
    /// [`crate::ACCOUNTING_SLURM_RELEASES`]). Always set by the
    /// suite (`false` sends `0`), never taken from the caller's environment.
    pub accounting: bool,
    /// `TESTBED_ACCOUNTS` with accounting: the accounts created in slurmdbd, the
    /// suite's user a member of each (the first its default). Every account the
    /// suite submits as must be here: sbatch refuses any other. Empty: the
    /// testbed's default, `teama teamb`.
    pub accounts: Vec<String>,
}

/// The releases other than the machine's own, in `scripts/lib/releases.sh`'s order:
/// each one's suites default to their own folders and ports.
const OTHER_RELEASES: [&str; 3] = ["24.11", "25.11", "26.05"];

/// Ports between two releases' defaults: every suite's testbed (its nodes, budgetd,
/// slurmdbd and MariaDB at most 91 above its base) and every suite's base (18817-20617)
/// fit below the next release's.
const RELEASE_PORT_STRIDE: u16 = 3000;

/// The folder suffix and port offset of release `release`'s default testbeds: none for
/// the machine's own release, `-V` and a stride of ports per other release (a release
/// not in the list after them), so that the suites of several releases can run at once
/// without one testbed meeting another's folder or ports.
fn release_defaults(release: Option<&str>) -> (String, u16) {
    match release {
        None => (String::new(), 0),
        Some(r) if r == crate::DEFAULT_SLURM_RELEASE => (String::new(), 0),
        Some(r) => {
            let slot = OTHER_RELEASES
                .iter()
                .position(|known| *known == r)
                .unwrap_or(OTHER_RELEASES.len());
            // At most 4 slots: 4 * 3000 fits a u16.
            (format!("-{r}"), (slot as u16 + 1) * RELEASE_PORT_STRIDE)
        }
    }
}

impl TestbedConfig {
    /// Settings with the folder from `$dir_var` (else `default_dir`) and the port base
    /// from `$port_var` (else `default_port`): each suite's overrides. For a release
    /// other than the machine's own (`TESTBED_SLURM=V`), the defaults are the release's
    /// own ([`release_defaults`]), so that releases' suites can run side by side.
    pub fn from_env(
        dir_var: &str,
        default_dir: &str,
        port_var: &str,
        default_port: u16,
    ) -> Result<TestbedConfig> {
        Self::from_vars(
            |name| std::env::var(name).ok(),
            dir_var,
            default_dir,
            port_var,
            default_port,
        )
    }

    /// [`TestbedConfig::from_env`] reading variables through `var`.
    pub fn from_vars(
        var: impl Fn(&str) -> Option<String>,
        dir_var: &str,
        default_dir: &str,
        port_var: &str,
        default_port: u16,
    ) -> Result<TestbedConfig> {
        let release = var("TESTBED_SLURM").filter(|r| !r.is_empty());
        let (dir_suffix, port_offset) = release_defaults(release.as_deref());
        let dir = PathBuf::from(
            var(dir_var)
                .filter(|d| !d.is_empty())
                .unwrap_or_else(|| format!("{default_dir}{dir_suffix}")),
        );
        if !dir.is_absolute() || dir == Path::new("/") {
            return Err(Error::Setting {
                name: dir_var.into(),
                value: dir.display().to_string(),
                detail: "must be an absolute folder other than /".into(),
            });
        }
        let port_base = match var(port_var) {
            Some(p) if !p.is_empty() => p.parse::<u16>().map_err(|_| Error::Setting {
                name: port_var.into(),
                value: p.clone(),
                detail: "must be a port number".into(),
            })?,
            _ => default_port
                .checked_add(port_offset)
                .ok_or_else(|| Error::Setting {
                    name: port_var.into(),
                    value: String::new(),
                    detail: format!(
                        "the default port base {default_port} + {port_offset} for Slurm {} is past 65535: set it",
                        release.as_deref().unwrap_or(crate::DEFAULT_SLURM_RELEASE)
                    ),
                })?,
        };
        Ok(TestbedConfig {
            dir,
            port_base,
            nodes: 4,
            gpus: 8,
            priority: None,
            budget_period: 5,
            extra_conf: None,
            unset: Vec::new(),
            min_job_age: None,
            site_factor: None,
            budgetd_config: None,
            accounting: false,
            accounts: Vec::new(),
        })
    }

    /// `scripts/testbed` with these settings (and the caller's other variables).
    fn script(&self) -> Command {
        let mut cmd = Command::new(repo_root().join("scripts").join("testbed"));
        cmd.current_dir(repo_root())
            .env("TESTBED_DIR", &self.dir)
            .env("TESTBED_PORT_BASE", self.port_base.to_string())
            .env("TESTBED_NODES", self.nodes.to_string())
            .env("TESTBED_GPUS", self.gpus.to_string())
            .env("TESTBED_BUDGET_PERIOD", self.budget_period.to_string());
        // The plugins and budgetd this crate checked and copied, also where
        // `CARGO_TARGET_DIR` moved the build (scripts/testbed looks in target/).
        if std::env::var_os("TESTBED_PLUGINS_FROM").is_none() {
            cmd.env("TESTBED_PLUGINS_FROM", crate::plugin_dir());
        }
        if std::env::var_os("TESTBED_BUDGETD").is_none() {
            cmd.env("TESTBED_BUDGETD", release_dir().join("budgetd"));
        }
        for v in &self.unset {
            cmd.env_remove(v);
        }
        if let Some(p) = &self.priority {
            cmd.env("TESTBED_PRIORITY", p);
        }
        if let Some(c) = &self.extra_conf {
            cmd.env("TESTBED_EXTRA_CONF", c);
        }
        if let Some(age) = self.min_job_age {
            cmd.env("TESTBED_MIN_JOB_AGE", age.to_string());
        }
        if let Some(params) = &self.site_factor {
            cmd.env("TESTBED_SITE_FACTOR", params);
        }
        if self.budgetd_config.is_some() {
            // Written by `Testbed::up`; restarts of budgetd read it again.
            cmd.env("TESTBED_BUDGETD_CONFIG", self.dir.join("budgetd.toml"));
        }
        cmd.env(
            "TESTBED_ACCOUNTING",
            if self.accounting { "1" } else { "0" },
        );
        if self.accounts.is_empty() {
            cmd.env_remove("TESTBED_ACCOUNTS");
        } else {
            cmd.env("TESTBED_ACCOUNTS", self.accounts.join(" "));
        }
        cmd
    }
}

/// A running testbed; stopped when dropped (see the module doc).
#[derive(Debug)]
pub struct Testbed {
    config: TestbedConfig,
    env: TestbedEnv,
    slurm: Slurm,
    budgetd: Budgetd,
    user: String,
    keep: bool,
    passed: bool,
}

impl Testbed {
    /// Checks the build outputs, starts a fresh testbed (`down --purge`, the plugins
    /// copied into its plugin folder, `up`), and reads its client environment.
    pub fn up(config: TestbedConfig) -> Result<Testbed> {
        let release = release_dir();
        let plugin_build = crate::plugin_dir();
        for (lib, _) in PLUGINS {
            require(&plugin_build.join(format!("lib{lib}.so")))?;
        }
        for bin in ["budgetd", "budgetctl"] {
            require(&release.join(bin))?;
        }
        // A fresh testbed, budgetd's database included. Quiet: there may be none.
        let _ = command::output(config.script().arg("down").arg("--purge"));
        let plugins = config.dir.join("plugins");
        std::fs::create_dir_all(&plugins).map_err(|e| Error::file(&plugins, e))?;
        for (lib, file) in PLUGINS {
            let from = plugin_build.join(format!("lib{lib}.so"));
            std::fs::copy(&from, plugins.join(file)).map_err(|e| Error::file(&from, e))?;
        }
        for (lib, file) in OPTIONAL_PLUGINS {
            let from = plugin_build.join(format!("lib{lib}.so"));
            if from.is_file() {
                std::fs::copy(&from, plugins.join(file)).map_err(|e| Error::file(&from, e))?;
            }
        }
        let mut up = config.script();
        if let Some(text) = &config.budgetd_config {
            let file = config.dir.join("budgetd.toml");
            std::fs::write(&file, text).map_err(|e| Error::file(&file, e))?;
        }
        up.arg("up")
            .stdout(Stdio::inherit())
            .stderr(Stdio::inherit());
        let status = up.status().map_err(|source| Error::Spawn {
            command: command::describe(&up),
            source,
        })?;
        // From here on the guard stops what `up` started, even if `up` failed halfway.
        let mut tb = Testbed {
            env: TestbedEnv::default(),
            slurm: Slurm::new(TestbedEnv::default(), config.dir.clone()),
            budgetd: Budgetd::new(&config.dir.join("budgetd.sock")),
            user: String::new(),
            keep: std::env::var(KEEP_VAR).is_ok_and(|v| !v.is_empty() && v != "0"),
            passed: false,
            config,
        };
        if !status.success() {
            return Err(Error::Failed {
                command: command::describe(&up),
                status: status.to_string(),
                stderr: "see its output above".into(),
            });
        }
        tb.env = tb.capture_env()?;
        tb.slurm = Slurm::new(tb.env.clone(), tb.config.dir.clone());
        let socket = tb
            .env
            .get("BUDGET_SOCKET")
            .map(PathBuf::from)
            .unwrap_or_else(|| tb.config.dir.join("budgetd.sock"));
        tb.budgetd = Budgetd::new(&socket);
        tb.user = command::stdout(Command::new("id").arg("-un"))?
            .trim()
            .to_string();
        Ok(tb)
    }

    /// `eval "$(scripts/testbed env)"` in a shell, and what it changed.
    fn capture_env(&self) -> Result<TestbedEnv> {
        let mut cmd = self.config.script();
        let script = cmd.get_program().to_os_string();
        let mut sh = Command::new("bash");
        sh.arg("-c")
            // `exit 0` last: bash would exec a last `env` in place, lowering SHLVL.
            .arg(r#"env -0 && printf '\0' && eval "$("$0" env)" && env -0 && exit 0"#)
            .arg(script)
            .current_dir(repo_root());
        // The same variables as `scripts/testbed` itself gets.
        for (k, v) in cmd.get_envs() {
            match v {
                Some(v) => sh.env(k, v),
                None => sh.env_remove(k),
            };
        }
        cmd = sh;
        let out = command::output(&mut cmd)?;
        if !out.status.success() {
            return Err(command::failed(&cmd, &out));
        }
        TestbedEnv::from_dumps(&out.stdout)
    }

    /// The settings it was started with.
    pub fn config(&self) -> &TestbedConfig {
        &self.config
    }

    /// Its folder (`TESTBED_DIR`).
    pub fn dir(&self) -> &Path {
        &self.config.dir
    }

    /// The client environment `scripts/testbed env` exported.
    pub fn env(&self) -> &TestbedEnv {
        &self.env
    }

    /// Slurm's client commands for this testbed.
    pub fn slurm(&self) -> &Slurm {
        &self.slurm
    }

    /// budgetd's API.
    pub fn budgetd(&self) -> &Budgetd {
        &self.budgetd
    }

    /// The user the suite runs (and submits) as.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// `slurmctld.log`.
    pub fn ctld_log(&self) -> LogFile {
        LogFile::new(self.config.dir.join("log").join("slurmctld.log"))
    }

    /// `budgetd.log`.
    pub fn budgetd_log(&self) -> LogFile {
        LogFile::new(self.config.dir.join("log").join("budgetd.log"))
    }

    /// budgetd's SQLite file.
    pub fn database(&self) -> PathBuf {
        self.config.dir.join("budget.sqlite")
    }

    /// The built `budgetctl` with `args`, talking to this testbed's budgetd.
    pub fn budgetctl(&self, args: &[&str]) -> Command {
        self.budgetctl_via(&[], args)
    }

    /// `budgetctl args` run through `wrapper` (e.g. `setpriv --reuid=...`).
    pub fn budgetctl_via(&self, wrapper: &[&str], args: &[&str]) -> Command {
        let ctl = release_dir().join("budgetctl");
        let mut cmd = match wrapper.split_first() {
            Some((program, rest)) => {
                let mut c = Command::new(program);
                c.args(rest).arg(&ctl);
                c
            }
            None => Command::new(&ctl),
        };
        cmd.args(args);
        self.env.apply(&mut cmd);
        cmd.env("BUDGET_SOCKET", self.budgetd.socket())
            .env_remove("BUDGET_URL")
            .env_remove("BUDGET_TOKEN");
        cmd
    }

    /// Runs `budgetctl args`: whether it succeeded, and its output (stdout + stderr).
    pub fn run_budgetctl(&self, wrapper: &[&str], args: &[&str]) -> Result<(bool, String)> {
        let out = command::output(&mut self.budgetctl_via(wrapper, args))?;
        Ok((out.status.success(), command::combined(&out)))
    }

    /// Cancels the suite user's jobs and waits (up to 20 s) until none is left.
    pub fn clear_jobs(&self) -> Result<()> {
        self.slurm.cancel_user(&self.user)?;
        crate::checks::wait_until(Duration::from_secs(20), || {
            Ok::<_, Error>(self.slurm.queue(&["-u", &self.user])?.is_empty())
        });
        Ok(())
    }

    /// Runs `scripts/testbed args` quietly; an error quotes its output.
    pub fn script(&self, args: &[&str]) -> Result<()> {
        command::stdout(self.config.script().args(args)).map(|_| ())
    }

    /// Whether this testbed runs slurmdbd ([`TestbedConfig::accounting`]).
    pub fn accounting(&self) -> bool {
        self.config.accounting
    }

    /// `slurmdbd.log` (a testbed with accounting).
    pub fn dbd_log(&self) -> LogFile {
        LogFile::new(self.config.dir.join("log").join("slurmdbd.log"))
    }

    /// `sacctmgr -i args` against this testbed's slurmdbd (e.g. `["add", "qos",
    /// "scavenger", "Priority=0"]`, `["modify", "qos", "high", "set",
    /// "Preempt=scavenger", "PreemptMode=requeue"]`, `["modify", "user", "root",
    /// "set", "qos=normal,high,scavenger"]`): its output. An error when the testbed
    /// runs without accounting, or when sacctmgr refuses (its message quoted).
    /// slurmdbd hands each change to slurmctld a moment later: wait for it with
    /// [`Testbed::wait_ctld_qos`] before relying on it.
    pub fn sacctmgr(&self, args: &[&str]) -> Result<String> {
        if !self.config.accounting {
            return Err(Error::Setting {
                name: "TESTBED_ACCOUNTING".into(),
                value: "0".into(),
                detail: format!(
                    "sacctmgr {} needs a testbed with slurmdbd (TestbedConfig::accounting)",
                    args.join(" ")
                ),
            });
        }
        self.slurm.sacctmgr(args)
    }

    /// Creates QOS `name` with `settings` (`Priority=1000`, `Preempt=a,b`,
    /// `PreemptMode=requeue`, ...) and waits (up to 10 s) until slurmctld knows it.
    pub fn add_qos(&self, name: &str, settings: &[&str]) -> Result<()> {
        let mut args = vec!["add", "qos", name];
        args.extend_from_slice(settings);
        self.sacctmgr(&args)?;
        self.wait_ctld_qos(name, |_| true)
    }

    /// Waits (up to 10 s) until slurmctld's copy of QOS `name` (the record
    /// [`Slurm::ctld_qos`] returns, e.g. holding `Priority=1000` or
    /// `PreemptMode=REQUEUE`) satisfies `done`; an error naming the last record seen
    /// when it does not in time.
    pub fn wait_ctld_qos(&self, name: &str, done: impl Fn(&str) -> bool) -> Result<()> {
        let mut last = None;
        let w = wait_secs(10, || -> Result<bool> {
            last = self.slurm.ctld_qos(name)?;
            Ok(last.as_deref().is_some_and(&done))
        });
        if w.ok {
            Ok(())
        } else {
            Err(Error::parse(
                format!("scontrol show assoc_mgr flags=qos qos={name}"),
                format!(
                    "slurmctld's copy of QOS {name} not as expected after sacctmgr: {} ({})",
                    last.as_deref().unwrap_or("unknown to slurmctld"),
                    w.describe()
                ),
            ))
        }
    }

    /// `scripts/testbed stop-ctld` (SIGTERM, or SIGKILL with `kill`).
    pub fn stop_ctld(&self, kill: bool) -> Result<()> {
        if kill {
            self.script(&["stop-ctld", "--kill"])
        } else {
            self.script(&["stop-ctld"])
        }
    }

    /// `scripts/testbed start-ctld`: slurmctld again with its saved state.
    pub fn start_ctld(&self) -> Result<()> {
        self.script(&["start-ctld"])
    }

    /// `scripts/testbed restart-ctld`.
    pub fn restart_ctld(&self) -> Result<()> {
        self.script(&["restart-ctld"])
    }

    /// [`Testbed::restart_ctld`], then waits up to 60 s for the new load of
    /// `preempt/budget` to log that it read its rebalancing history back from
    /// budgetd ([`SEEDED_HISTORY`]): how many it read (`None`: nothing logged
    /// in time), and how the wait went.
    pub fn restart_ctld_reading_history(&self) -> Result<(Option<usize>, String)> {
        let log = self.ctld_log();
        let loads = log.count(SEEDED_HISTORY)?;
        self.restart_ctld()?;
        let w = wait_secs(60, || -> Result<bool> {
            Ok(log.count(SEEDED_HISTORY)? > loads)
        });
        let read = if w.ok {
            log.lines(|l| l.contains(SEEDED_HISTORY))?
                .last()
                .and_then(|l| seeded_history(l))
        } else {
            None
        };
        Ok((read, w.describe()))
    }

    /// `scripts/testbed down` then `up`, keeping the folder and budgetd's database:
    /// every daemon stops (jobs die with the namespace) and slurmctld starts cold
    /// (`-c`, no saved state: job ids start at 1 again) unless `TESTBED_KEEP_STATE`
    /// is set. The client environment stays the same (same folder and ports).
    pub fn down_and_up(&self) -> Result<()> {
        self.script(&["down"])?;
        self.script(&["up"])
    }

    /// slurmctld's `StateSaveLocation` (through the testbed's `fast-state` link).
    pub fn ctld_state_dir(&self) -> PathBuf {
        self.config.dir.join("fast-state").join("state")
    }

    /// Copies slurmctld's saved state to `to` (replaced): what a later
    /// [`Testbed::restore_ctld_state`] puts back. slurmctld writes each state file
    /// to a new name and renames it, so a copy taken while it runs holds whole files.
    pub fn copy_ctld_state(&self, to: &Path) -> Result<()> {
        if to.exists() {
            std::fs::remove_dir_all(to).map_err(|e| Error::file(to, e))?;
        }
        let from = self.ctld_state_dir();
        command::stdout(Command::new("cp").arg("-a").arg(&from).arg(to)).map(|_| ())
    }

    /// Replaces slurmctld's saved state with the copy at `from` (slurmctld must be
    /// stopped): the next `start_ctld` restarts from a state save that predates
    /// whatever happened since the copy, as when a `kill -9` comes before the save
    /// thread wrote the latest changes (it writes at most every 5 s).
    pub fn restore_ctld_state(&self, from: &Path) -> Result<()> {
        let state = self.ctld_state_dir();
        let real = std::fs::canonicalize(&state).map_err(|e| Error::file(&state, e))?;
        std::fs::remove_dir_all(&real).map_err(|e| Error::file(&real, e))?;
        command::stdout(Command::new("cp").arg("-a").arg(from).arg(&real)).map(|_| ())
    }

    /// `scripts/testbed start-budgetd`: budgetd again, same database and socket.
    pub fn start_budgetd(&self) -> Result<()> {
        self.script(&["start-budgetd"])
    }

    /// `scripts/testbed status` succeeds: every daemon it started still runs.
    pub fn all_daemons_up(&self) -> bool {
        command::output(self.config.script().arg("status")).is_ok_and(|o| o.status.success())
    }

    /// budgetd's pid, checked to still run the binary the testbed started (a recycled
    /// pid is never signalled).
    pub fn budgetd_pid(&self) -> Result<u32> {
        let file = self.config.dir.join("pids").join("budgetd.pid");
        let text = std::fs::read_to_string(&file).map_err(|e| Error::file(&file, e))?;
        let mut words = text.split_whitespace();
        let pid: u32 = words
            .next()
            .and_then(|p| p.parse().ok())
            .ok_or_else(|| Error::parse(file.display(), format!("no pid in {text:?}")))?;
        let exe = words.next().unwrap_or("");
        let running = std::fs::read_link(format!("/proc/{pid}/exe"))
            .map(|p| {
                p.to_string_lossy()
                    .trim_end_matches(" (deleted)")
                    .to_string()
            })
            .unwrap_or_default();
        let recorded = std::fs::canonicalize(exe)
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_else(|_| exe.to_string());
        if running != recorded {
            return Err(Error::file(
                &file,
                format!("pid {pid} runs {running:?}, not budgetd ({recorded:?})"),
            ));
        }
        Ok(pid)
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, `TERM`) to budgetd; its pid.
    pub fn signal_budgetd(&self, signal: &str) -> Result<u32> {
        let pid = self.budgetd_pid()?;
        command::stdout(
            Command::new("kill")
                .arg(format!("-{signal}"))
                .arg(pid.to_string()),
        )?;
        Ok(pid)
    }

    /// Waits (up to `timeout`) until process `pid` is gone.
    pub fn wait_gone(pid: u32, timeout: Duration) -> bool {
        crate::checks::wait_until(timeout, || {
            Ok::<_, Error>(!Path::new(&format!("/proc/{pid}")).exists())
        })
        .ok
    }

    /// Marks the suite as passed: the guard purges the folder instead of keeping logs.
    pub fn set_passed(&mut self, passed: bool) {
        self.passed = passed;
    }

    /// Whether the guard will leave the testbed up.
    pub fn keep(&self) -> bool {
        self.keep
    }

    /// How to reach this testbed from a shell (for messages).
    pub fn shell_hint(&self) -> String {
        format!(
            "TESTBED_DIR={} TESTBED_PORT_BASE={}",
            self.config.dir.display(),
            self.config.port_base
        )
    }
}

impl Drop for Testbed {
    fn drop(&mut self) {
        if self.keep {
            say(format_args!(
                "[testbed] left up ({KEEP_VAR}): {hint} scripts/testbed env | down",
                hint = self.shell_hint()
            ));
            return;
        }
        // No job may outlive the testbed: slurmd's SIGTERM leaves slurmstepd and the
        // job's processes running. Cancel them and give KillWait time to end them.
        if !self.user.is_empty() && self.slurm.ping() {
            let _ = self.slurm.cancel_user(&self.user);
            let _ = crate::checks::wait_until(Duration::from_secs(15), || {
                Ok::<_, Error>(self.slurm.queue(&["-u", &self.user])?.is_empty())
            });
        }
        let mut down = self.config.script();
        down.arg("down");
        if self.passed {
            down.arg("--purge");
        }
        match command::output(&mut down) {
            Ok(o) if o.status.success() => {
                if !self.passed {
                    say(format_args!(
                        "[testbed] stopped; logs kept in {}",
                        self.config.dir.join("log").display()
                    ));
                }
            }
            Ok(o) => say(format_args!("[testbed] {}", command::failed(&down, &o))),
            Err(e) => say(format_args!("[testbed] {e}")),
        }
    }
}

/// Starts a testbed with `config`, runs `scenario` on it, and stops it: its folder
/// is purged when the scenario ran through with every check passed, else kept with
/// its logs (see [`KEEP_VAR`] to leave it up).
pub fn with_testbed<E: From<Error>>(
    checks: &mut Checks,
    config: TestbedConfig,
    scenario: impl FnOnce(&mut Checks, &Testbed) -> std::result::Result<(), E>,
) -> std::result::Result<(), E> {
    let mut tb = Testbed::up(config)?;
    checks.watch_logs(vec![tb.ctld_log(), tb.budgetd_log()]);
    say(format_args!(
        "[testbed] up: {} (client environment: {})",
        tb.shell_hint(),
        tb.env.names().join(" ")
    ));
    let outcome = scenario(checks, &tb);
    tb.set_passed(outcome.is_ok() && checks.failed().is_empty());
    outcome
}

fn require(path: &Path) -> Result<()> {
    if path.exists() {
        Ok(())
    } else {
        Err(Error::file(
            path,
            "missing: build first (scripts/setup, or cargo build --release --workspace)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_from_env() {
        let vars = |port: &'static str| {
            move |name: &str| match name {
                "D" => Some("/tmp/x".to_string()),
                "P" => Some(port.to_string()),
                _ => None,
            }
        };
        let c = TestbedConfig::from_vars(vars("18299"), "D", "/tmp/d", "P", 1).unwrap();
        assert_eq!((c.dir, c.port_base), (PathBuf::from("/tmp/x"), 18299));
        let c = TestbedConfig::from_vars(vars("1"), "ND", "/tmp/d", "NP", 19).unwrap();
        assert_eq!((c.dir, c.port_base), (PathBuf::from("/tmp/d"), 19));
        assert!(TestbedConfig::from_vars(vars("99999"), "D", "/tmp/d", "P", 1).is_err());
        assert!(TestbedConfig::from_vars(vars("1"), "ND", "rel", "NP", 1).is_err());
        assert!(TestbedConfig::from_vars(vars("1"), "ND", "/", "NP", 1).is_err());
    }

    #[test]
    fn other_releases_default_to_their_own_folders_and_ports() {
        let with_release = |release: &'static str| {
            move |name: &str| (name == "TESTBED_SLURM").then(|| release.to_string())
        };
        let at = |release| {
            let c =
                TestbedConfig::from_vars(with_release(release), "D", "/tmp/d", "P", 18817).unwrap();
            (c.dir, c.port_base)
        };
        assert_eq!(at(""), (PathBuf::from("/tmp/d"), 18817));
        assert_eq!(at("22.05"), (PathBuf::from("/tmp/d"), 18817));
        assert_eq!(at("24.11"), (PathBuf::from("/tmp/d-24.11"), 21817));
        assert_eq!(at("25.11"), (PathBuf::from("/tmp/d-25.11"), 24817));
        assert_eq!(at("26.05"), (PathBuf::from("/tmp/d-26.05"), 27817));
        // Set variables still win.
        let set = |name: &str| match name {
            "TESTBED_SLURM" => Some("24.11".to_string()),
            "D" => Some("/tmp/x".to_string()),
            "P" => Some("18299".to_string()),
            _ => None,
        };
        let c = TestbedConfig::from_vars(set, "D", "/tmp/d", "P", 18817).unwrap();
        assert_eq!((c.dir, c.port_base), (PathBuf::from("/tmp/x"), 18299));
        // A default pushed past the last port is refused, not wrapped.
        assert!(
            TestbedConfig::from_vars(with_release("26.05"), "D", "/tmp/d", "P", 60000).is_err()
        );
    }
}
