//! The site policy through the real budgetctl: `policy set` offers the short
//! list a site decides (min_runtime default and maximum, the preemption preset,
//! the site caps, the requeue cap, and the window, snapshot age and idle
//! threshold), stored and audited; `policy show` prints them and where the
//! rule's constants are documented; the settings that are now constants of the
//! rule are refused by name before anything is sent, and change nothing; and
//! `why` ranks with the rule's constant projected tier: a team over budget by 5%
//! and holding none of its entitled GPUs ranks with budgeted jobs (0.6 of a
//! window ahead: 1.05 x 0.4 = 0.42).

use serde_json::{Value, json};

use crate::support::*;

/// The VALUE column of `key` in `policy show`'s table (or `set`'s answer).
fn value(table: &str, key: &str) -> String {
    table
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(' '))
        .map(|v| v.trim().to_string())
        .unwrap_or_else(|| panic!("no {key} in:\n{table}"))
}

/// `why 2 --json`'s tier (job 2: teama's pending job).
fn why_tier(d: &Budgetd) -> String {
    let why: Value =
        serde_json::from_str(&ctl_ok(&d.socket, &["why", "2", "--json"])).expect("json");
    why["tier"].as_str().expect("tier").to_string()
}

#[test]
fn the_short_list_is_set_shown_and_audited() {
    let d = budgetd();
    let c = d.unix();
    let sock = d.socket.as_path();
    let show = ctl_ok(sock, &["policy", "show"]);
    assert_eq!(
        value(&show, "preemption"),
        "default (benefit factor 2)",
        "{show}"
    );
    assert_eq!(value(&show, "max_requeues"), "1 (default)", "{show}");
    assert!(
        show.trim_end().ends_with(
            "constants of it, each with the ablation that chose it: docs/design.md §6.6."
        ),
        "{show}"
    );
    for k in ["hysteresis", "tier_band", "share_order", "balance_band"] {
        assert!(!show.contains(k), "{k} shown:\n{show}");
    }
    let out = ctl_ok(
        sock,
        &[
            "policy",
            "set",
            "default_min_runtime=30m",
            "max_min_runtime=2h",
            "require_min_runtime=true",
            "preemption=aggressive",
            "site_max_preemptions=5",
            "site_max_lost_gpu_hours=12.5",
            "max_requeues=2",
            "window=1d",
            "snapshot_max_age=30s",
            "idle_threshold=10m",
        ],
    );
    for (k, v) in [
        ("default_min_runtime", "30m"),
        ("max_min_runtime", "2h"),
        ("require_min_runtime", "true"),
        ("preemption", "aggressive (benefit factor 1)"),
        ("site_max_preemptions", "5"),
        ("site_max_lost_gpu_hours", "12.5"),
        ("max_requeues", "2"),
        ("window", "1d"),
        ("snapshot_max_age", "30s"),
        ("idle_threshold", "10m"),
    ] {
        assert_eq!(value(&out, k), v, "{k}: {out}");
    }
    assert_eq!(
        ctl_ok(sock, &["policy", "show"]),
        out,
        "show and set's answer differ"
    );
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(
        p,
        json!({"window_secs": 86400, "default_min_runtime_secs": 1800,
            "max_min_runtime_secs": 7200, "require_min_runtime": true, "hysteresis": 0.1,
            "snapshot_max_age_secs": 30, "idle_threshold_secs": 600,
            "site_max_preemptions": 5, "site_max_lost_gpu_hours": 12.5, "max_requeues": 2,
            "preemption": "aggressive"}),
    );
    // Each preset by name, as the plugins' snapshot carries it.
    for (name, factor) in [("gentle", "4"), ("default", "2"), ("aggressive", "1")] {
        let out = ctl_ok(sock, &["policy", "set", &format!("preemption={name}")]);
        assert_eq!(
            value(&out, "preemption"),
            format!("{name} (benefit factor {factor})"),
            "{out}"
        );
        let (_, snap) = call(&c, "GET", "/v1/snapshot", None);
        let want = if name == "default" {
            Value::Null
        } else {
            json!(name)
        };
        assert_eq!(snap["policy"]["preemption"], want, "{snap}");
        assert_eq!(snap["policy"]["hysteresis"], json!(0.1), "{snap}");
    }
    let audit: Value =
        serde_json::from_str(&ctl_ok(sock, &["audit", "--json"])).expect("audit json");
    let sets: Vec<&Value> = audit
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "policy.set")
        .collect();
    assert_eq!(sets.len(), 4, "{audit}");
    // gentle -> default: the preset left out again; default -> aggressive.
    assert_eq!(sets[2]["old"]["preemption"], "gentle", "{audit}");
    assert!(sets[2]["new"].get("preemption").is_none(), "{audit}");
    assert_eq!(sets[3]["new"]["preemption"], "aggressive", "{audit}");
}

#[test]
fn the_rules_constants_are_refused_by_name_and_change_nothing() {
    let d = budgetd();
    let sock = d.socket.as_path();
    let audit = ctl_ok(sock, &["audit", "--json"]);
    let policy = ctl_ok(sock, &["policy", "show", "--json"]);
    for arg in [
        "hysteresis=0.2",
        "tier_band=0.1",
        "tier_projection=none",
        "share_order=on",
        "entitled_first=off",
        "balance_band=default",
    ] {
        let key = arg.split('=').next().unwrap_or_default();
        let out = ctl(sock, &["policy", "set", "preemption=gentle", arg]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        let needle = format!("`{key}` is a fixed constant of the rule, not a site setting");
        assert!(
            stderr.contains(&needle),
            "{arg}: {stderr:?} lacks {needle:?}"
        );
        assert!(
            stderr.contains("settable: default_min_runtime"),
            "{arg}: {stderr}"
        );
    }
    for (arg, needle) in [
        (
            "preemption=brutal",
            "preemption: expected gentle, default or aggressive",
        ),
        ("window=forever", "window"),
    ] {
        let out = ctl(sock, &["policy", "set", arg]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{arg}: {stderr:?} lacks {needle:?}"
        );
    }
    assert_eq!(ctl_ok(sock, &["audit", "--json"]), audit);
    assert_eq!(ctl_ok(sock, &["policy", "show", "--json"]), policy);
}

#[test]
fn why_ranks_with_the_rules_constant_projected_tier() {
    let d = budgetd();
    let c = d.unix();
    let sock = d.socket.as_path();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("clock after 1970")
            .as_secs(),
    )
    .expect("time fits i64");
    // teama: 100 GPU-h a week (0.6 GPUs entitled), 105 used two days ago (ratio
    // 1.05), nothing running, one job pending.
    ctl_ok(sock, &["account", "add", "teama", "--allocation", "100"]);
    ctl_ok(sock, &["user", "add", "alice", "--account", "teama"]);
    let start = now - 2 * 86_400;
    call_ok(
        &c,
        "POST",
        "/v1/sync/jobs",
        &json!({"collected_at": now, "runs": [
            {"job_id": 1, "run": 0, "account": "teama", "user": "alice", "gpus": 7,
             "state": "ended", "start": start, "end": start + 15 * 3600, "min_runtime_secs": 60},
            {"job_id": 2, "run": 0, "account": "teama", "user": "alice", "gpus": 1,
             "state": "pending", "min_runtime_secs": 60},
        ]}),
    );
    assert_eq!(why_tier(&d), "budgeted");
    let why = ctl_ok(sock, &["why", "2"]);
    assert!(
        why.contains("over budget in the window, but heading below its allocation"),
        "{why}"
    );
    // A preset changes what a preemption must buy, not the ranking.
    ctl_ok(sock, &["policy", "set", "preemption=gentle"]);
    assert_eq!(why_tier(&d), "budgeted");
}
