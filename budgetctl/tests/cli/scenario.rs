//! The acceptance scenario: budgetd, a sacct import with runs across both
//! window edges, and `budgetctl share --at T --json` compared with a window
//! computed by hand; then errors, exit codes and callers identified by uid.

use std::os::unix::process::CommandExt;

use serde_json::Value;

use crate::support::*;

const SACCT: &str = "\
JobID|Account|User|Partition|AllocTRES|Start|End|State
1001|teama|alice|gpu|billing=8,cpu=8,gres/gpu:h100=8,gres/gpu=8,mem=64G,node=1|2025-12-31T12:00:00|2026-01-01T12:00:00|COMPLETED
1002|teama|alice|gpu|cpu=4,gres/gpu=4|2026-01-05T00:00:00|2026-01-06T00:00:00|FAILED
1003|teamb|bob|gpu|gres/gpu:b300=2,gres/gpu=2|2026-01-07T00:00:00|Unknown|RUNNING
1004|teamb|bob|gpu|gres/gpu=1|2025-12-20T00:00:00|2025-12-25T00:00:00|COMPLETED
1005|teamc|carl|gpu|gres/gpu=2|2026-01-02T00:00:00|2026-01-02T10:00:00|REQUEUED
1005|teamc|carl|gpu|gres/gpu=2|2026-01-06T00:00:00|2026-01-08T06:00:00|COMPLETED
1007|teama|alice|gpu|gres/gpu=1|Unknown|Unknown|PENDING
1008_1|teamb|bob|gpu|gres/gpu=1|2026-01-07T12:00:00|2026-01-07T18:00:00|CANCELLED by 0
";

/// T = 2026-01-08T00:00:00Z; the 7-day window is [2026-01-01T00:00Z, T].
const T: &str = "2026-01-08T00:00:00Z";

fn row<'a>(rows: &'a [Value], account: &str, user: Option<&str>) -> &'a Value {
    rows.iter()
        .find(|r| r["account"] == account && r["user"].as_str() == user)
        .unwrap_or_else(|| panic!("no row {account}/{user:?}"))
}

#[test]
fn share_at_t_matches_a_hand_computed_window() {
    let d = budgetd();
    let (dir, sock) = (d.dir(), d.socket.as_path());
    for args in [
        &["account", "add", "teama", "--allocation", "600"][..],
        &["account", "add", "teamb", "--allocation", "300"],
        &["account", "add", "teamc", "--allocation", "100"],
        &["user", "add", "alice", "--account", "teama"],
        &["user", "add", "bob", "--account", "teamb"],
        &["user", "add", "carl", "--account", "teamc"],
        &["weights", "set", "h100=1", "b300=2.5"],
        &["budget", "set", "teama", "600"],
    ] {
        ctl_ok(sock, args);
    }
    let file = dir.join("sacct.txt");
    std::fs::write(&file, SACCT).expect("write");
    let import = [
        "usage",
        "import",
        file.to_str().expect("path"),
        "--tz",
        "UTC",
    ];
    let out = ctl_ok(sock, &import);
    assert!(
        out.contains("8 lines, 7 runs: 7 new") && out.contains("1 skipped"),
        "{out}"
    );
    // Re-importing changes nothing.
    let out = ctl_ok(sock, &import);
    assert!(out.contains("0 new, 0 updated, 7 unchanged"), "{out}");

    let json: Value =
        serde_json::from_str(&ctl_ok(sock, &["share", "--at", T, "--json"])).expect("json");
    let rows = json.as_array().expect("a list of objects");
    // By hand, in weighted GPU-hours inside [Jan 1 00:00, Jan 8 00:00]:
    //  teama: 1001 8 GPUs x 12 h (left edge) + 1002 4 x 24 h              = 192
    //  teamb: 1003 2 b300 (x2.5) x 24 h (running, up to T) + 1008_1 1 x 6 h = 126; 1004 ends before: 0
    //  teamc: 1005 run 0 2 x 10 h + run 1 2 x 48 h (right edge clipped)    = 116
    let expect = [
        ("teama", 192.0, 600.0),
        ("teamb", 126.0, 300.0),
        ("teamc", 116.0, 100.0),
    ];
    for (acc, usage, alloc) in expect {
        let r = row(rows, acc, None);
        assert_eq!(r["parent"], "root");
        assert_eq!(r["allocation_gpu_hours"].as_f64(), Some(alloc));
        let u = r["usage_gpu_hours"].as_f64().expect("usage");
        assert!((u - usage).abs() < 1e-9, "{acc}: usage {u} != {usage}");
        let ratio = r["ratio"].as_f64().expect("ratio");
        assert!(
            (ratio - usage / alloc).abs() < 1e-12,
            "{acc}: ratio {ratio}"
        );
    }
    let root = row(rows, "root", None);
    assert!((root["usage_gpu_hours"].as_f64().unwrap_or(0.0) - 434.0).abs() < 1e-9);
    // Ranking: ratios 0.32 < 0.42 < 1.16, so teama, teamb, teamc; teamc is over budget.
    let ranks: Vec<(u64, &str)> = ["teama", "teamb", "teamc"]
        .iter()
        .map(|a| {
            (
                row(rows, a, None)["rank"].as_u64().unwrap_or(0),
                row(rows, a, None)["tier"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        ranks,
        [(1, "budgeted"), (2, "budgeted"), (3, "over_budget")]
    );
    let leaf = |a: &str, u: &str| row(rows, a, Some(u))["leaf_rank"].as_u64();
    assert_eq!(
        (
            leaf("teama", "alice"),
            leaf("teamb", "bob"),
            leaf("teamc", "carl")
        ),
        (Some(1), Some(2), Some(3))
    );
    assert_eq!(row(rows, "teamc", Some("carl"))["tier"], "over_budget");
    assert!(
        (row(rows, "teamb", Some("bob"))["usage_gpu_hours"]
            .as_f64()
            .unwrap_or(0.0)
            - 126.0)
            .abs()
            < 1e-9
    );

    // The human table shows the same.
    let table = ctl_ok(sock, &["share", "--at", T]);
    assert!(
        table.contains("teamc") && table.contains("over_budget") && table.contains("1.16"),
        "{table}"
    );
    // One day later the window is [Jan 2, Jan 9]: 1001 drops out, 1005 run 1
    // now counts in full (2 x 54 h) and run 0 (from Jan 2 00:00) still does.
    let later: Value = serde_json::from_str(&ctl_ok(
        sock,
        &["share", "--at", "2026-01-09T00:00:00Z", "--json"],
    ))
    .expect("json");
    let later = later.as_array().expect("list");
    assert!(
        (row(later, "teama", None)["usage_gpu_hours"]
            .as_f64()
            .unwrap_or(0.0)
            - 96.0)
            .abs()
            < 1e-9
    );
    assert!(
        (row(later, "teamc", None)["usage_gpu_hours"]
            .as_f64()
            .unwrap_or(0.0)
            - 128.0)
            .abs()
            < 1e-9
    );
    // usage --by user --json agrees with share.
    let u: Value = serde_json::from_str(&ctl_ok(
        sock,
        &["usage", "--by", "user", "--at", T, "--json"],
    ))
    .expect("json");
    let carl = u["rows"]
        .as_array()
        .expect("rows")
        .iter()
        .find(|r| r["user"] == "carl")
        .cloned()
        .unwrap_or_default();
    assert!((carl["usage_gpu_hours"].as_f64().unwrap_or(0.0) - 116.0).abs() < 1e-9);
}

#[test]
fn budgetctl_reports_errors_with_exit_codes_and_changes_nothing() {
    let d = budgetd();
    let (dir, sock) = (d.dir(), d.socket.as_path());
    ctl_ok(sock, &["account", "add", "teama", "--allocation", "600"]);
    let audit_before = ctl_ok(sock, &["audit", "--json"]);
    let cases: &[(&[&str], i32, &str)] = &[
        (
            &[
                "account",
                "add",
                "x",
                "--parent",
                "nope",
                "--allocation",
                "1",
            ],
            1,
            "unknown parent account \"nope\"",
        ),
        (
            &["account", "add", "teama", "--allocation", "1"],
            1,
            "already exists",
        ),
        (
            &["account", "add", "y", "--allocation", "-5"],
            1,
            "between 0 and 1e9",
        ),
        (
            &["account", "add", "y", "--allocation", "lots"],
            2,
            "invalid value 'lots'",
        ),
        (
            &[
                "account",
                "add",
                "y",
                "--allocation",
                "700",
                "--parent",
                "teama",
            ],
            1,
            "above its allocation",
        ),
        (
            &["account", "modify", "teama", "--parent", "teama"],
            1,
            "cycle",
        ),
        (&["policy", "set", "window=forever"], 2, "accepted forms"),
        (&["weights", "set", "h100"], 2, "TYPE=WEIGHT"),
        (&["share", "--at", "yesterday"], 2, "RFC 3339"),
        (&["why", "77"], 1, "not in the ledger"),
        (&["budget", "set", "teama", "none"], 2, "cannot be none"),
        (&["budget", "set", "teama", "-1"], 1, "between 0 and 1e9"),
        (
            &["budget", "set", "teama", "5", "--user", "ghost"],
            1,
            "not a member",
        ),
    ];
    for (args, code, needle) in cases {
        let out = ctl(sock, args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*code), "{args:?}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{args:?}: {stderr:?} lacks {needle:?}"
        );
        if *code == 1 {
            assert!(stderr.starts_with("budgetctl: "), "{stderr}");
        }
    }
    // Import: bad lines listed with numbers, nothing imported; --skip-invalid imports the rest.
    let file = dir.join("bad.txt");
    std::fs::write(
        &file,
        "JobID|Account|User|Partition|AllocTRES|Start|End|State\n\
         1|teama|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
         2|ghost|alice|gpu|gres/gpu=1|2026-01-01T00:00:00|2026-01-01T01:00:00|COMPLETED\n\
         3|teama|alice|gpu|gres/gpu=1|2026-02-30T00:00:00|2026-01-01T01:00:00|COMPLETED\n",
    )
    .expect("write");
    let f = file.to_str().expect("path");
    let out = ctl(sock, &["usage", "import", f, "--tz", "UTC"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("line 3: unknown account \"ghost\"")
            && stderr.contains("line 4: bad Start"),
        "{stderr}"
    );
    assert_eq!(
        ctl_ok(sock, &["audit", "--json"]),
        audit_before,
        "failed commands changed the audit log"
    );
    let out = ctl_ok(
        sock,
        &["usage", "import", f, "--tz", "UTC", "--skip-invalid"],
    );
    assert!(
        out.contains("1 new") && out.contains("line 3: unknown account"),
        "{out}"
    );
}

#[test]
fn unix_socket_callers_are_identified_by_uid() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: running budgetctl as uid 65534 needs root");
        return;
    }
    // The testkit's temp dir is world-readable and its socket world-connectable.
    let d = budgetd();
    let (dir, sock) = (d.dir(), d.socket.as_path());
    ctl_ok(sock, &["account", "add", "teama", "--allocation", "600"]);
    ctl_ok(sock, &["account", "add", "teamb", "--allocation", "300"]);
    ctl_ok(sock, &["user", "add", "nobody", "--account", "teamb"]);
    // A copy of budgetctl that uid 65534 can surely execute.
    let exe = dir.join("budgetctl");
    std::fs::copy(BUDGETCTL, &exe).expect("copy");
    // Tests run in parallel threads: a process another test forks while the copy
    // above still had its file open for writing keeps that descriptor until it
    // execs, and the kernel refuses to run a file open for writing (ETXTBSY).
    // That window closes within milliseconds, so a busy file is tried again.
    let as_nobody = |args: &[&str]| {
        let mut tries = 0;
        loop {
            let run = std::process::Command::new(&exe)
                .args(args)
                .env("BUDGET_SOCKET", sock)
                .uid(65534)
                .gid(65534)
                .output();
            match run {
                Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy && tries < 100 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                other => break other.expect("run as nobody"),
            }
        }
    };
    let own = as_nobody(&["account", "show", "teamb"]);
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
    let other = as_nobody(&["account", "show", "teama"]);
    assert_eq!(other.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&other.stderr)
            .contains("permission denied: nobody may not read account \"teama\"")
    );
    let add = as_nobody(&["account", "add", "x", "--allocation", "1"]);
    assert!(String::from_utf8_lossy(&add.stderr).contains("permission denied"));
    let names = ctl_ok(sock, &["account", "show", "--json"]);
    assert!(!names.contains("\"x\""));
}
