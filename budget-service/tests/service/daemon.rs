//! The real `budgetd` binary as a child process (budgetctl's own tests run the
//! real `budgetctl`).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use budget_client::{Client, Endpoint};

pub const BUDGETD: &str = env!("CARGO_BIN_EXE_budgetd");

/// A running budgetd; killed (SIGKILL) on drop if still running.
pub struct Daemon {
    pub child: Child,
    pub socket: PathBuf,
}

impl Daemon {
    /// Starts budgetd on `db` and `socket` and waits until it answers.
    pub fn start(db: &Path, socket: &Path) -> Daemon {
        Daemon::start_cmd(db, socket, Command::new(BUDGETD))
    }

    /// Starts budgetd with Slurm stood in for by the fake `scontrol`/`squeue` of
    /// `tests/fixtures/fake-slurm` (budgetd's own `--scontrol` seam), whose state
    /// is in `slurm_dir`; budgetd's log (info level) goes to `log`.
    pub fn start_fake_slurm(db: &Path, socket: &Path, slurm_dir: &Path, log: &Path) -> Daemon {
        let mut c = Command::new(BUDGETD);
        c.arg("--scontrol")
            .arg(fake_slurm_tool("scontrol"))
            .env("FAKE_SLURM_DIR", slurm_dir)
            .env_remove("BUDGET_SQUEUE")
            .env("BUDGET_LOG", "info")
            .stderr(std::fs::File::create(log).expect("log file"));
        Daemon::start_cmd(db, socket, c)
    }

    /// Starts `cmd` (budgetd with arguments of the test's own) on `db` and
    /// `socket` and waits until it answers.
    pub fn start_cmd(db: &Path, socket: &Path, mut cmd: Command) -> Daemon {
        if cmd.get_envs().all(|(k, _)| k != "BUDGET_LOG") {
            cmd.env("BUDGET_LOG", "warn").stderr(Stdio::inherit());
        }
        let child = cmd
            .arg("--db")
            .arg(db)
            .arg("--socket")
            .arg(socket)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn budgetd");
        let d = Daemon {
            child,
            socket: socket.to_path_buf(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if d.client()
                .request("GET", "/v1/health", &[], None)
                .is_ok_and(|r| r.status == 200)
            {
                break;
            }
            assert!(Instant::now() < deadline, "budgetd did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        d
    }

    pub fn client(&self) -> Client {
        Client::new(Endpoint::parse(&self.socket.display().to_string()).expect("endpoint"))
            .with_timeout(Duration::from_secs(10))
    }

    /// SIGKILL, then reap.
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then wait for a clean exit.
    pub fn stop(&mut self) -> std::process::ExitStatus {
        let pid = i32::try_from(self.child.id()).expect("pid");
        // SAFETY: sending a signal to our own child process.
        unsafe {
            libc::kill(pid, libc::SIGTERM);
        }
        self.child.wait().expect("wait")
    }
}

/// budgetd in `dir` (database `budget.db`, socket `budgetd.sock`, log
/// `budgetd.log`) against the fake Slurm in `dir/slurm` with nodes n1-n3;
/// returns the fake Slurm's folder too.
pub fn fake_slurm_budgetd(dir: &Path) -> (Daemon, PathBuf) {
    fake_slurm_budgetd_with_nodes(dir, "n1\nn2\nn3\n")
}

/// As [`fake_slurm_budgetd`], with the fake `scontrol show node`'s `nodes` file
/// (one `NAME [GRES STATE]` line per node).
pub fn fake_slurm_budgetd_with_nodes(dir: &Path, nodes: &str) -> (Daemon, PathBuf) {
    fake_slurm_budgetd_with(dir, nodes, None)
}

/// As [`fake_slurm_budgetd`], with the fake `scontrol show partition`'s
/// `partitions` file (one `NAME TIER [PREEMPTMODE]` line each) written before
/// budgetd starts: it reads the partitions at once, then once a minute.
pub fn fake_slurm_budgetd_with_partitions(dir: &Path, partitions: &str) -> (Daemon, PathBuf) {
    fake_slurm_budgetd_with(dir, "n1\nn2\nn3\n", Some(partitions))
}

/// budgetd against a fake Slurm whose files are written first: `nodes` and,
/// when given, `partitions`.
fn fake_slurm_budgetd_with(dir: &Path, nodes: &str, partitions: Option<&str>) -> (Daemon, PathBuf) {
    let slurm = dir.join("slurm");
    std::fs::create_dir(&slurm).expect("slurm dir");
    std::fs::write(slurm.join("nodes"), nodes).expect("nodes");
    if let Some(p) = partitions {
        std::fs::write(slurm.join("partitions"), p).expect("partitions");
    }
    let d = Daemon::start_fake_slurm(
        &dir.join("budget.db"),
        &dir.join("budgetd.sock"),
        &slurm,
        &dir.join("budgetd.log"),
    );
    (d, slurm)
}

/// A tool of `tests/fixtures/fake-slurm` (`scontrol`, `squeue`).
pub fn fake_slurm_tool(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fake-slurm")
        .join(name)
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.kill9();
        }
    }
}
