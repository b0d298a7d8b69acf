//! End to end: the real `budget-agent` binary posts to a real budgetd (the
//! `budget-service` library serving on a temp Unix socket and on TCP, with a
//! real SQLite file, started by `budgetd-testkit`), and budgetd stores the report.
//!
//! Why here and not in budget-service's tests: Cargo builds `budget-agent`
//! (and sets `CARGO_BIN_EXE_budget-agent`) only for this crate's tests, while
//! budgetd is a library function any crate can start.

use std::path::Path;
use std::process::Command;

use budgetd_testkit::Budgetd;
use serde_json::Value;

const AGENT_TOKEN: &str = "agent-token-e2e-0001";

/// budgetd with an agent token (`budgetd-testkit`).
fn budgetd() -> Budgetd {
    Budgetd::start(&format!(
        "[[tokens]]\ntoken = \"{AGENT_TOKEN}\"\nuser = \"gpu-nodes\"\nrole = \"agent\"\nnodes = [\"e2e-tcp\", \"e2e-bad\", \"e2e-file\"]\n"
    ))
}

/// `GET /v1/idle` as an admin (this test runs as root, or as budgetd's own uid).
fn idle_report(d: &Budgetd) -> Value {
    let r = d
        .unix()
        .request("GET", "/v1/idle", &[], None)
        .expect("GET /v1/idle");
    assert_eq!(r.status, 200);
    serde_json::from_slice(&r.body).expect("json")
}

fn agent(node: &str, endpoint: &str) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_budget-agent"));
    c.args([
        "--once",
        "--no-gpu-mode",
        "--node",
        node,
        "--socket",
        endpoint,
    ])
    .env_remove("BUDGET_SOCKET")
    .env_remove("BUDGET_TOKEN")
    .env_remove("BUDGET_TOKEN_FILE");
    c
}

fn node<'a>(idle: &'a Value, name: &str) -> Option<&'a Value> {
    idle["nodes"]
        .as_array()
        .and_then(|n| n.iter().find(|x| x["node"] == name))
}

fn has_nvml() -> bool {
    budget_agent::source::NvmlSource::open().is_ok()
}

#[test]
fn the_real_agent_reports_to_budgetd_over_the_socket_and_with_an_agent_token() {
    let d = budgetd();
    let out = agent("e2e-sock", &d.socket.display().to_string())
        .output()
        .expect("run budget-agent");
    assert!(
        out.status.success(),
        "agent over the socket failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let idle = idle_report(&d);
    let n = node(&idle, "e2e-sock").unwrap_or_else(|| panic!("report not stored: {idle}"));
    // Without a GPU (CI) the agent runs in no-GPU mode; on a GPU node it reports NVML.
    assert_eq!(n["nvml"], has_nvml(), "{n}");
    if !has_nvml() {
        assert_eq!(n["gpus"], 0);
    }
    assert!(n["age_secs"].as_i64().is_some_and(|a| a < 60), "{n}");

    // From a GPU node: TCP with an agent token.
    let url = format!("http://{}", d.tcp.expect("tcp listener"));
    let out = agent("e2e-tcp", &url)
        .args(["--token", AGENT_TOKEN])
        .output()
        .expect("run budget-agent");
    assert!(
        out.status.success(),
        "agent over TCP failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(node(&idle_report(&d), "e2e-tcp").is_some());

    // A wrong token is refused, and --once says so in its exit status.
    let out = agent("e2e-bad", &url)
        .args(["--token", "not-the-token-123"])
        .output()
        .expect("run budget-agent");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("sending the report"), "stderr: {stderr}");
    assert!(node(&idle_report(&d), "e2e-bad").is_none());
}

#[test]
fn once_fails_when_budgetd_is_unreachable() {
    let dir = tempfile::tempdir().expect("tempdir");
    let missing: &Path = &dir.path().join("nobody.sock");
    let out = agent("e2e-none", &missing.display().to_string())
        .output()
        .expect("run budget-agent");
    assert!(!out.status.success());
}

#[test]
fn the_agent_reads_its_token_from_a_file_and_refuses_a_bad_one() {
    use std::fs::Permissions;
    use std::os::unix::fs::PermissionsExt;
    let d = budgetd();
    let url = format!("http://{}", d.tcp.expect("tcp listener"));
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("agent.token");
    // Surrounding white space (an editor's final newline) is not part of the token.
    std::fs::write(&file, format!("{AGENT_TOKEN}\n")).expect("write token");
    std::fs::set_permissions(&file, Permissions::from_mode(0o600)).expect("chmod");
    let out = agent("e2e-file", &url)
        .arg("--token-file")
        .arg(&file)
        .output()
        .expect("run budget-agent");
    assert!(
        out.status.success(),
        "agent with --token-file failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(node(&idle_report(&d), "e2e-file").is_some());

    // A missing, empty or two-line file: a clear error naming the file, nothing sent.
    let missing = dir.path().join("missing.token");
    let empty = dir.path().join("empty.token");
    std::fs::write(&empty, "\n").expect("write");
    let two = dir.path().join("two.token");
    std::fs::write(&two, format!("{AGENT_TOKEN}\nX-Other: 1\n")).expect("write");
    std::fs::set_permissions(&empty, Permissions::from_mode(0o600)).expect("chmod");
    std::fs::set_permissions(&two, Permissions::from_mode(0o600)).expect("chmod");
    // The right token in a file everyone may read: refused, as ssh refuses such a key.
    let open = dir.path().join("open.token");
    std::fs::write(&open, format!("{AGENT_TOKEN}\n")).expect("write");
    std::fs::set_permissions(&open, Permissions::from_mode(0o644)).expect("chmod");
    for (path, why) in [
        (&missing, "No such file"),
        (&empty, "empty"),
        (&two, "white space"),
        (&open, "readable or writable by other users"),
    ] {
        let before = idle_report(&d);
        let out = agent("e2e-bad", &url)
            .arg("--token-file")
            .arg(path)
            .output()
            .expect("run budget-agent");
        assert!(!out.status.success(), "{} accepted", path.display());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("--token-file")
                && stderr.contains(&path.display().to_string())
                && stderr.contains(why),
            "stderr for {}: {stderr}",
            path.display()
        );
        assert!(node(&idle_report(&d), "e2e-bad").is_none(), "{before}");
    }
}
