//! The cost-aware rule's ranking knobs through the real budgetctl: `policy set
//! tier_projection=... tier_band=... share_order=... entitled_first=... balance_band=...` stores
//! them (audited), `policy show` prints them with "(default)" where unset, bad
//! values are refused before anything is sent, and `why` ranks with the site's
//! values: a team over budget by 5% and holding none of its entitled GPUs ranks
//! with budgeted jobs under the default projected tier (0.6 of a window ahead:
//! 1.05 x 0.4 = 0.42) or a band of 0.1, over budget with neither.

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
fn ranking_knobs_are_set_shown_refused_and_reach_why() {
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

    let show = ctl_ok(sock, &["policy", "show"]);
    assert_eq!(value(&show, "tier_projection"), "0.6 (default)", "{show}");
    assert_eq!(value(&show, "tier_band"), "none (default)", "{show}");
    assert_eq!(value(&show, "share_order"), "off (default)", "{show}");
    assert_eq!(value(&show, "entitled_first"), "on (default)", "{show}");
    assert_eq!(value(&show, "balance_band"), "0.15 (default)", "{show}");
    assert_eq!(why_tier(&d), "budgeted");
    let why = ctl_ok(sock, &["why", "2"]);
    assert!(
        why.contains("over budget in the window, but heading below its allocation"),
        "{why}"
    );

    // No projection (and no band): the same job ranks over budget.
    let out = ctl_ok(
        sock,
        &["policy", "set", "tier_projection=none", "tier_band=none"],
    );
    assert_eq!(value(&out, "tier_projection"), "none", "{out}");
    assert_eq!(value(&out, "tier_band"), "none", "{out}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(
        (&p["tier_band"], &p["tier_projection"]),
        (&json!(0.0), &json!(0.0)),
        "{p}"
    );
    assert_eq!(why_tier(&d), "over_budget");
    // A projection too short to bring 1.05 below 1 with nothing held:
    // 1.05 x (1 - 0.04) = 1.008.
    ctl_ok(sock, &["policy", "set", "tier_projection=0.04"]);
    assert_eq!(why_tier(&d), "over_budget");
    ctl_ok(sock, &["policy", "set", "tier_projection=0.1"]);
    assert_eq!(why_tier(&d), "budgeted");
    ctl_ok(sock, &["policy", "set", "tier_projection=off"]);

    let out = ctl_ok(
        sock,
        &[
            "policy",
            "set",
            "tier_band=0.2",
            "share_order=off",
            "entitled_first=on",
            "balance_band=0.3",
        ],
    );
    assert_eq!(value(&out, "tier_band"), "0.2", "{out}");
    assert_eq!(value(&out, "balance_band"), "0.3", "{out}");
    assert_eq!(value(&out, "share_order"), "off", "{out}");
    assert_eq!(value(&out, "entitled_first"), "on", "{out}");
    let show = ctl_ok(sock, &["policy", "show"]);
    assert_eq!(show, out, "show and set's answer differ");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    assert_eq!(
        (
            &p["tier_band"],
            &p["share_order"],
            &p["entitled_first"],
            &p["balance_band"]
        ),
        (&json!(0.2), &json!(false), &json!(true), &json!(0.3)),
        "{p}"
    );
    assert_eq!(why_tier(&d), "budgeted");
    // A band narrower than teama's 5% leaves it over budget.
    ctl_ok(sock, &["policy", "set", "tier_band=0.01"]);
    assert_eq!(why_tier(&d), "over_budget");

    // Bad values are refused before sending (exit 2), naming the key; nothing changes.
    let audit = ctl_ok(sock, &["audit", "--json"]);
    let policy = ctl_ok(sock, &["policy", "show", "--json"]);
    for (arg, needle) in [
        (
            "tier_band=1.5",
            "tier_band: expected a fraction between 0 and 1",
        ),
        ("tier_band=-0.1", "tier_band: expected a fraction"),
        ("tier_band=NaN", "tier_band: expected a fraction"),
        ("tier_band=off-ish", "tier_band: expected a fraction"),
        (
            "tier_projection=2",
            "tier_projection: expected a fraction between 0 and 1",
        ),
        (
            "tier_projection=soon",
            "tier_projection: expected a fraction",
        ),
        (
            "balance_band=2",
            "balance_band: expected a fraction between 0 and 1",
        ),
        (
            "share_order=maybe",
            "share_order: expected on, off or default",
        ),
        (
            "entitled_first=",
            "entitled_first: expected on, off or default",
        ),
    ] {
        let out = ctl(sock, &["policy", "set", "share_order=on", arg]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{arg}: {stderr}");
        assert!(
            stderr.contains(needle),
            "{arg}: {stderr:?} lacks {needle:?}"
        );
    }
    assert_eq!(ctl_ok(sock, &["audit", "--json"]), audit);
    assert_eq!(ctl_ok(sock, &["policy", "show", "--json"]), policy);

    // `default` puts each back to the rule's default: unset, left out of the policy.
    let out = ctl_ok(
        sock,
        &[
            "policy",
            "set",
            "tier_band=default",
            "share_order=default",
            "entitled_first=default",
            "tier_projection=default",
            "balance_band=default",
        ],
    );
    assert_eq!(value(&out, "tier_band"), "none (default)", "{out}");
    assert_eq!(value(&out, "tier_projection"), "0.6 (default)", "{out}");
    assert_eq!(value(&out, "share_order"), "off (default)", "{out}");
    assert_eq!(value(&out, "entitled_first"), "on (default)", "{out}");
    assert_eq!(value(&out, "balance_band"), "0.15 (default)", "{out}");
    let (_, p) = call(&c, "GET", "/v1/policy", None);
    for k in [
        "tier_band",
        "share_order",
        "entitled_first",
        "tier_projection",
        "balance_band",
    ] {
        assert!(p.get(k).is_none(), "{k} in {p}");
    }
    assert_eq!(why_tier(&d), "budgeted");

    // Every change is in the audit log with the values before and after.
    let audit: Value =
        serde_json::from_str(&ctl_ok(sock, &["audit", "--json"])).expect("audit json");
    let sets: Vec<&Value> = audit
        .as_array()
        .expect("entries")
        .iter()
        .filter(|e| e["action"] == "policy.set")
        .collect();
    assert_eq!(sets.len(), 7, "{audit}");
    let last = sets[6];
    assert_eq!(last["old"]["tier_band"], json!(0.01), "{last}");
    assert_eq!(last["old"]["tier_projection"], json!(0.0), "{last}");
    assert_eq!(last["old"]["share_order"], json!(false), "{last}");
    assert!(last["new"].get("tier_band").is_none(), "{last}");
}
