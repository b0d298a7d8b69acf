//! Same inputs and seed give byte-identical JSON; a different seed changes
//! the seeded parts. Uses a generated site-CSV trace (always available) and,
//! when present, the Helios slice from `shared/traces`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use budget_sim::SimulateArgs;
use budget_sim::cli::{prepare, run_policies, to_json};

use super::cli_args::args;

fn json(a: &SimulateArgs) -> String {
    let p = prepare(a).expect("prepare");
    let reports: Vec<_> = run_policies(&p).into_iter().map(|(_, r)| r).collect();
    to_json(&reports).expect("json")
}

/// A contended synthetic trace: 3 teams, mixed sizes and durations.
fn synthetic(dir: &Path) -> PathBuf {
    let mut s = String::from("job_id,user,team,submit_time,gpus,duration_s,min_runtime_s,free\n");
    let mut x: u64 = 12345;
    for i in 0..600 {
        x = budget_sim::rng::splitmix64(x);
        let team = ["ta", "tb", "tc"][(x % 3) as usize];
        let user = format!("{team}u{}", (x >> 8) % 3);
        let gpus = [1, 1, 2, 4, 8, 16][((x >> 16) % 6) as usize];
        let dur = 600 + (x >> 24) % 30_000;
        let min = if (x >> 40).is_multiple_of(4) {
            "30m".to_string()
        } else {
            String::new()
        };
        let free = u8::from((x >> 44).is_multiple_of(10));
        let _ = writeln!(
            s,
            "j{i},{user},{team},{},{gpus},{dur},{min},{free}",
            i * 900
        );
    }
    let p = dir.join("synthetic.csv");
    std::fs::write(&p, s).expect("write trace");
    p
}

#[test]
fn same_inputs_same_bytes() {
    let dir = std::env::temp_dir().join(format!("budget-sim-det-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("tmp dir");
    let trace = synthetic(&dir);
    let t = trace.to_str().expect("utf-8 path");
    let base = [
        "--trace",
        t,
        "--nodes",
        "8",
        "--gpus-per-node",
        "8",
        "--shares",
        "ta=32,tb=16,tc=16",
        "--window",
        "1d",
        "--checkpoint-interval",
        "30m",
        "--verify-window",
    ];
    let mut a = base.to_vec();
    a.extend(["--seed", "7", "--json"]);
    let one = json(&args(&a));
    let two = json(&args(&a));
    assert_eq!(one, two);
    let v: serde_json::Value = serde_json::from_str(&one).expect("valid json");
    for p in ["budget", "static", "decay"] {
        let r = &v[p];
        for k in [
            "jain_index",
            "utilization",
            "preemptions_per_gpu_day",
            "gpu_hours_lost",
            "contract_breaks",
            "teams",
        ] {
            assert!(!r[k].is_null(), "{p}.{k} missing");
        }
        assert_eq!(r["contract_breaks"], 0, "{p}");
        assert_eq!(r["invariant_violations"], 0, "{p}: {}", r["checks"]);
        assert_eq!(r["unfinished_jobs"], 0, "{p}");
        let t0 = &r["teams"][0];
        for k in [
            "team",
            "allocation_share",
            "attained_share_mean",
            "max_deviation",
        ] {
            assert!(!t0[k].is_null(), "{p}.teams[0].{k} missing");
        }
    }
    assert!(
        v["budget"]["preemptions"].as_u64().unwrap_or(0) > 0,
        "the synthetic trace should contend"
    );
    // Counting what bound the rule decides nothing: the same replay, plus the
    // counts, which name the scenario's teams and add up with its preemptions.
    let mut c = base.to_vec();
    c.extend(["--seed", "7", "--json", "--count-refusals"]);
    let mut counted: serde_json::Value =
        serde_json::from_str(&json(&args(&c))).expect("valid json");
    let refusals = counted["budget"]
        .as_object_mut()
        .and_then(|r| r.remove("refusals"))
        .expect("budget reports its refusals");
    assert_eq!(counted, v, "counting refusals changed the replay");
    let by_reason = refusals["by_reason"].as_object().expect("by_reason");
    assert!(
        !by_reason.is_empty(),
        "a contended replay refuses some pairs"
    );
    for key in by_reason.keys() {
        let team = key.split(' ').next().unwrap_or_default();
        assert!(["ta", "tb", "tc"].contains(&team), "{key}: not a team's");
    }
    let attempts = refusals["attempts"].as_object().expect("attempts");
    let started: u64 = attempts
        .iter()
        .filter(|(k, _)| k.contains(" started "))
        .map(|(_, n)| n.as_u64().unwrap_or(0))
        .sum();
    let preemptions = v["budget"]["preemptions"].as_u64().unwrap_or(0);
    assert!(
        started > 0 && started <= preemptions,
        "{started} started attempts for {preemptions} preemptions"
    );
    for p in ["static", "decay"] {
        assert!(v[p].get("refusals").is_none(), "{p} has no rule to count");
    }
    let mut b = base.to_vec();
    b.extend(["--seed", "8", "--json"]);
    assert_ne!(
        one,
        json(&args(&b)),
        "the seed must matter (free-tier and static draws)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn helios_slice_is_deterministic_when_present() {
    let trace =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/traces/helios_venus_2vc_sept.csv");
    if !trace.exists() {
        eprintln!("skipped: {} not found", trace.display());
        return;
    }
    let t = trace.to_str().expect("utf-8 path");
    let a = args(&[
        "--trace",
        t,
        "--nodes",
        "22",
        "--gpus-per-node",
        "8",
        "--max-jobs",
        "500",
        "--json",
    ]);
    assert_eq!(json(&a), json(&a));
}

/// A reader that stops reading (`budget-sim ... | head`) ends the replay
/// quietly with exit 0: no panic, nothing on stderr.
#[test]
fn a_closed_pipe_is_not_an_error() {
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_budget-sim"))
        .args(["--scenario", "overload", "--policy", "static", "--json"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run budget-sim");
    // Closed long before the replay has its report to print.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait for budget-sim");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?} {stderr}", out.status);
    assert!(stderr.is_empty(), "{stderr}");
}
