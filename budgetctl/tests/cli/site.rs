//! `budgetctl backup` and when a change is in effect in slurmctld (`status`, the
//! note after a change, `--wait`), against a real budgetd. The controller's
//! plugins are stood in for by a thread that fetches the snapshot exactly as
//! their fetcher does (`get_if_none_match_with`, the `X-Budget-Plugin` header).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use budget_protocol::service::PLUGIN_HEADER;

use crate::support::*;

fn ctl_in(dir: &Path, socket: &Path, args: &[&str]) -> Output {
    Command::new(BUDGETCTL)
        .args(args)
        .current_dir(dir)
        .env("BUDGET_SOCKET", socket)
        .env("TZ", "UTC")
        .env_remove("BUDGET_URL")
        .env_remove("BUDGET_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run budgetctl")
}

fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn backup_writes_a_file_refuses_to_overwrite_and_force_replaces() {
    let d = budgetd();
    // budgetd writes backups only into its backup folder (by default
    // `backups` beside the database).
    let folder = d.dir().join("backups");
    std::fs::create_dir(&folder).expect("backups folder");
    ctl_ok(
        &d.socket,
        &["account", "add", "teama", "--allocation", "10"],
    );
    let o = ctl_in(&folder, &d.socket, &["backup", "nightly.sqlite"]);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let file = folder.join("nightly.sqlite");
    assert!(
        out.starts_with(&format!("backup written: {}", file.display())),
        "{out}"
    );
    assert!(
        out.contains("holds generation 1, audit log up to id 1, 0 runs"),
        "{out}"
    );
    assert!(
        std::fs::read(&file)
            .expect("file")
            .starts_with(b"SQLite format 3\0")
    );

    let o = ctl_in(&folder, &d.socket, &["backup", "nightly.sqlite"]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        err.trim(),
        format!(
            "budgetctl: {} already exists (pass --force to replace it)",
            file.display()
        )
    );
    ctl_ok(
        &d.socket,
        &["account", "add", "teamb", "--allocation", "10"],
    );
    let o = ctl_in(
        &folder,
        &d.socket,
        &["backup", "--force", "--json", "nightly.sqlite"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("json");
    assert_eq!(v["generation"], 2, "{v}");
    // Outside the backup folder (here: over the database's -wal file) is
    // refused, --force or not, and the file is left alone.
    let wal = d.dir().join("budget.db-wal");
    let before = std::fs::metadata(&wal).map(|m| m.len()).ok();
    let o = ctl_in(
        &folder,
        &d.socket,
        &["backup", "--force", "../budget.db-wal"],
    );
    assert_eq!(o.status.code(), Some(1), "{:?}", text(&o));
    assert!(
        text(&o).1.contains("outside the backup folder"),
        "{:?}",
        text(&o)
    );
    assert_eq!(std::fs::metadata(&wal).map(|m| m.len()).ok(), before);
    // With --url the file is on budgetd's host: a relative name is refused.
    let o = ctl_in(
        &folder,
        &d.socket,
        &[
            "--url",
            "http://127.0.0.1:9",
            "--token",
            "x",
            "backup",
            "b.sqlite",
        ],
    );
    assert_eq!(o.status.code(), Some(2), "{:?}", text(&o));
    assert!(text(&o).1.contains("FILE must be absolute"));
}

/// Fetches the snapshot every `period` as a plugin named `name` does, until dropped.
struct FakePlugin {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakePlugin {
    fn start(d: &Budgetd, name: &'static str, period: Duration) -> FakePlugin {
        let c = d.unix();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::spawn(move || {
            let ident = format!("{name} period={}", period.as_secs().max(1));
            let mut etag: Option<String> = None;
            while !s.load(Ordering::SeqCst) {
                match c.get_if_none_match_with(
                    budget_protocol::SNAPSHOT_PATH,
                    etag.as_deref(),
                    &[(PLUGIN_HEADER, &ident)],
                ) {
                    Ok(Some(r)) => etag = r.etag().map(str::to_string),
                    Ok(None) => {}
                    Err(e) => panic!("snapshot fetch: {e}"),
                }
                std::thread::sleep(period);
            }
        });
        FakePlugin {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for FakePlugin {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[test]
fn budgetctl_says_when_a_change_is_in_effect_in_slurmctld_and_waits_for_it() {
    let d = budgetd();
    // No plugin has fetched: said after the change; --wait times out, bounded.
    let o = ctl(
        &d.socket,
        &["account", "add", "teamx", "--allocation", "10"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(out.contains("teamx"), "{out}");
    assert!(
        err.contains(
            "not yet in effect in slurmctld: no plugin fetched a snapshot in the last 60 s"
        ),
        "{err}"
    );
    let t = Instant::now();
    let o = ctl(
        &d.socket,
        &[
            "--wait",
            "--wait-timeout",
            "1",
            "user",
            "add",
            "alice",
            "--account",
            "teamx",
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("budgetctl: timed out after 1 s waiting for slurmctld to load generation 2: no plugin fetched"),
        "{err}"
    );
    let waited = t.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited < Duration::from_secs(5),
        "{waited:?}"
    );

    // Two plugins fetching every 2 s: a change waits for the slower of them.
    let p1 = FakePlugin::start(&d, "job_submit/budget", Duration::from_secs(2));
    let p2 = FakePlugin::start(&d, "priority/budget", Duration::from_secs(2));
    std::thread::sleep(Duration::from_millis(300));
    let o = ctl(&d.socket, &["budget", "set", "teamx", "20"]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("not yet in effect in slurmctld: its plugins hold generation 2, the change is 3; they fetch every 2 s (--wait waits for it)"),
        "{err}"
    );
    let t = Instant::now();
    let o = ctl(
        &d.socket,
        &[
            "--wait",
            "--wait-timeout",
            "10",
            "account",
            "add",
            "teamy",
            "--allocation",
            "5",
        ],
    );
    let (_, err) = text(&o);
    let waited = t.elapsed();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("in effect in slurmctld (its plugins hold generation 4)"),
        "{err}"
    );
    assert!(waited < Duration::from_secs(5), "{waited:?}");
    let st: serde_json::Value =
        serde_json::from_str(&ctl_ok(&d.socket, &["status", "--json"])).expect("json");
    assert_eq!(st["applied_generation"], 4, "{st}");
    assert_eq!(st["generation"], 4, "{st}");
    let names: Vec<&str> = st["plugins"]
        .as_array()
        .expect("plugins")
        .iter()
        .filter_map(|p| p["plugin"].as_str())
        .collect();
    assert_eq!(names, ["job_submit/budget", "priority/budget"]);
    let human = ctl_ok(&d.socket, &["status"]);
    assert!(
        human.contains("budgetd generation 4") && human.contains("in effect in slurmctld"),
        "{human}"
    );
    // A plugin that stopped fetching does not hold back the others forever, but
    // while within the horizon it does: stop one, change, and the wait times out.
    drop(p2);
    let o = ctl(
        &d.socket,
        &[
            "--wait",
            "--wait-timeout",
            "3",
            "user",
            "add",
            "bob",
            "--account",
            "teamy",
        ],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("timed out after 3 s waiting for slurmctld to load generation 5: its plugins hold generation 4, the change is 5"),
        "{err}"
    );
    drop(p1);
}

/// Mode 0600, as a token file must have.
fn private(f: &std::path::Path) {
    std::fs::set_permissions(f, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

#[test]
fn token_file_authenticates_over_tcp_and_a_bad_file_is_a_clear_error() {
    let d = Budgetd::start(
        "[[tokens]]\ntoken = \"ops-token-file-0001\"\nuser = \"ops\"\nrole = \"admin\"\n",
    );
    let url = format!("http://{}", d.tcp.expect("tcp listener"));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("ops.token");
    std::fs::write(&file, "ops-token-file-0001\n").expect("write token");
    private(&file);
    let path = file.display().to_string();
    // An admin change over TCP with the token read from the file.
    let o = ctl_in(
        dir.path(),
        &d.socket,
        &[
            "--url",
            &url,
            "--token-file",
            &path,
            "account",
            "add",
            "viafile",
            "--allocation",
            "5",
        ],
    );
    assert!(o.status.success(), "{:?}", text(&o));
    let audit = ctl_ok(&d.socket, &["--json", "audit"]);
    assert!(audit.contains("ops (token)"), "{audit}");
    // BUDGET_TOKEN_FILE does the same.
    let o = Command::new(BUDGETCTL)
        .args(["--url", &url, "--json", "account", "show"])
        .env("BUDGET_TOKEN_FILE", &file)
        .env_remove("BUDGET_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run budgetctl");
    assert!(o.status.success(), "{:?}", text(&o));
    assert!(text(&o).0.contains("viafile"));

    // Missing, empty, two-line: exit 2 (usage), the file named, nothing changed.
    let empty = dir.path().join("empty.token");
    std::fs::write(&empty, " \n").expect("write");
    let two = dir.path().join("two.token");
    std::fs::write(&two, "ops-token-file-0001\nX-Injected: 1\n").expect("write");
    let missing = dir.path().join("missing.token");
    private(&empty);
    private(&two);
    // The right token, readable by everyone: refused, as ssh refuses such a key.
    let open = dir.path().join("open.token");
    std::fs::write(&open, "ops-token-file-0001\n").expect("write");
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let before = ctl_ok(&d.socket, &["--json", "account", "show"]);
    for (f, why) in [
        (&missing, "No such file"),
        (&empty, "empty"),
        (&two, "white space"),
        (&open, "readable or writable by other users"),
    ] {
        let p = f.display().to_string();
        let o = ctl_in(
            dir.path(),
            &d.socket,
            &[
                "--url",
                &url,
                "--token-file",
                &p,
                "account",
                "add",
                "bad",
                "--allocation",
                "1",
            ],
        );
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{p}: {err}");
        assert!(
            err.contains("--token-file") && err.contains(&p) && err.contains(why),
            "{p}: {err}"
        );
    }
    assert_eq!(ctl_ok(&d.socket, &["--json", "account", "show"]), before);
}
