//! Bounded fuzzing of every parser that reads outside input, and of every
//! JSON body of budgetd's API (issue 11, "Also build"): proptest with random
//! and grammar-shaped inputs, a fixed number of cases each (`FUZZ_CASES`,
//! default 1000; the API gets a tenth), so it runs in `scripts/test` in
//! seconds. Each target prints `fuzz <target>: N inputs tried, 0 failures`
//! when it passes (a failure panics with proptest's minimal input).
//!
//! Properties: no parser panics; what a parser accepts is within its bounds
//! (durations up to 366 days, hostlists up to the cap, sacct records that
//! pass the ledger's own checks); the stored contract round-trips; budgetd
//! never answers a body with a 5xx.

use std::sync::atomic::{AtomicU64, Ordering};

use budget_service::ledger::RunRecord;
use policy_core::contract::{Contract, format_admin_comment, parse_admin_comment};
use policy_core::duration::{MAX_DURATION_SECS, format_duration, parse_duration};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn cases(divisor: u32) -> u32 {
    let n = std::env::var("FUZZ_CASES")
        .ok()
        .and_then(|v| v.parse::<u32>().ok())
        .unwrap_or(1000);
    (n / divisor).max(1)
}

/// Runs `strategy` through `check` `cases` times; prints the count.
fn fuzz<S: Strategy>(
    name: &str,
    divisor: u32,
    strategy: S,
    check: impl Fn(S::Value) -> Result<(), TestCaseError>,
) where
    S::Value: std::fmt::Debug,
{
    let tried = AtomicU64::new(0);
    let mut runner = TestRunner::new(Config {
        cases: cases(divisor),
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&strategy, |v| {
        tried.fetch_add(1, Ordering::Relaxed);
        check(v)
    });
    if let Err(e) = result {
        panic!("fuzz {name}: {e}");
    }
    println!(
        "fuzz {name}: {} inputs tried, 0 failures",
        tried.load(Ordering::Relaxed)
    );
}

/// Text near a grammar: its tokens in random order plus random characters.
fn shaped(tokens: &'static [&'static str]) -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop_oneof![
            3 => prop::sample::select(tokens).prop_map(str::to_string),
            1 => any::<char>().prop_map(|c| c.to_string()),
            1 => "[0-9]{1,12}",
        ],
        0..12,
    )
    .prop_map(|v| v.concat())
}

#[test]
fn fuzz_min_runtime_and_comments() {
    let tokens: &'static [&'static str] = &[
        "min_runtime=",
        "checkpoint=",
        "free",
        "budget:free",
        "budget:min_runtime=",
        "h",
        "m",
        "s",
        "d",
        "-",
        ":",
        " ",
        ",",
        "=",
        "90m",
        "2h30m",
        "1-00:00:00",
        "366d",
        "367d",
    ];
    fuzz("min_runtime/comment", 1, shaped(tokens), |s| {
        if let Ok(v) = parse_duration(&s) {
            prop_assert!((0..=MAX_DURATION_SECS).contains(&v), "{s:?} -> {v}");
            prop_assert_eq!(parse_duration(&format_duration(v)).ok(), Some(v));
        }
        if let Ok(c) = policy_core::comment::parse_comment(&s) {
            prop_assert!(
                c.min_runtime
                    .is_none_or(|m| (0..=MAX_DURATION_SECS).contains(&m))
            );
        }
        if let Some(c) = parse_admin_comment(&s) {
            prop_assert!((0..=MAX_DURATION_SECS).contains(&c.min_runtime));
        }
        Ok(())
    });
    // The stored contract is read back as written, whatever else the
    // administrator's comment holds.
    fuzz(
        "stored contract round trip",
        1,
        (
            0..=MAX_DURATION_SECS,
            any::<bool>(),
            proptest::option::of("[ -~]{0,40}"),
        ),
        |(min, free, existing)| {
            let c = Contract {
                min_runtime: if free { 0 } else { min },
                free_tier: free,
            };
            let text = format_admin_comment(existing.as_deref(), &c);
            prop_assert_eq!(parse_admin_comment(&text), Some(c));
            Ok(())
        },
    );
}

#[test]
fn fuzz_hostlists_and_tres() {
    let tokens: &'static [&'static str] = &[
        "gpu",
        "n",
        "[",
        "]",
        "-",
        ",",
        "0",
        "08",
        "10",
        "999999999",
        " ",
        "rack",
        "x",
    ];
    fuzz("hostlist", 1, shaped(tokens), |s| {
        if let Ok(hosts) = policy_core::hostlist::expand_at_most(&s, 1000) {
            prop_assert!(hosts.len() <= 1000);
        }
        Ok(())
    });
    let tokens: &'static [&'static str] = &[
        "gres",
        "gres/",
        "gpu",
        ":",
        "=",
        ",",
        "h100",
        "shard",
        "4",
        "18446744073709551615",
        "/",
    ];
    fuzz("tres", 1, shaped(tokens), |s| {
        let _ = policy_core::tres::gpus(&s);
        Ok(())
    });
}

#[test]
fn fuzz_sacct_import_lines() {
    let tokens: &'static [&'static str] = &[
        "|",
        "\n",
        "123",
        "123_4",
        "123+1",
        "teama",
        "alice",
        "gpu",
        "gres/gpu=2",
        "gres/gpu:h100=4",
        "billing=1,cpu=2,",
        "2026-01-01T00:00:00",
        "Unknown",
        "None",
        "COMPLETED",
        "RUNNING",
        "PENDING",
        "CANCELLED by 0",
        "REQUEUED",
    ];
    let header = "JobID|JobIDRaw|Account|User|Partition|AllocTRES|Start|End|State\n";
    let tz = jiff::tz::TimeZone::UTC;
    fuzz("sacct lines", 1, shaped(tokens), |body| {
        let text = format!("{header}{body}");
        if let Ok(p) = budget_service::sacct::parse(&text, &tz, &|a| a == "teama", 1_800_000_000) {
            for r in &p.records {
                prop_assert!(RunRecord::check(r).is_ok(), "{r:?}");
            }
        }
        Ok(())
    });
}

/// A JSON value of bounded depth with the API's own field names likely.
fn json_value() -> impl Strategy<Value = serde_json::Value> {
    use serde_json::Value;
    let names: &'static [&'static str] = &[
        "name",
        "parent",
        "allocation_gpu_hours",
        "user",
        "account",
        "job_id",
        "run",
        "runs",
        "collected_at",
        "gpus",
        "state",
        "start",
        "end",
        "node",
        "at",
        "nvml",
        "reason",
        "nodes",
        "weight",
        "by_type",
        "default",
        "window_secs",
        "live",
        "submit",
        "hysteresis",
        "preemption",
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        "[ -~]{0,20}".prop_map(Value::String),
        prop::sample::select(&["running", "pending", "ended", "requeued", "root", "teama"][..])
            .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(names), inner), 0..6).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

#[test]
fn fuzz_every_json_body_of_the_api() {
    let d = budgetd_testkit::Budgetd::start("");
    let c = d.unix();
    // Every route with a body, from budgetd's own OpenAPI document.
    let (_, doc) = budgetd_testkit::call(&c, "GET", "/v1/openapi.json", None);
    let mut routes: Vec<(String, String)> = Vec::new();
    for (path, ops) in doc["paths"].as_object().expect("paths") {
        // Drains resolve node names with Slurm's `scontrol`, absent here.
        if path.starts_with("/v1/drains") {
            continue;
        }
        for method in ["post", "put", "patch", "delete"] {
            if ops.get(method).is_some() {
                routes.push((
                    method.to_uppercase(),
                    path.replace("{id}", "7")
                        .replace("{name}", "teama")
                        .replace("{user}", "alice")
                        .replace("{account}", "teama")
                        .replace("{node}", "n1"),
                ));
            }
        }
    }
    assert!(routes.len() >= 8, "{routes:?}");
    let routes: &'static [(String, String)] = Box::leak(routes.into_boxed_slice());
    let body = prop_oneof![
        3 => json_value().prop_map(|v| serde_json::to_vec(&v).unwrap_or_default()),
        1 => prop::collection::vec(any::<u8>(), 0..200),
    ];
    fuzz(
        "api json bodies",
        10,
        (prop::sample::select(routes), body),
        |((method, path), bytes)| {
            let r = c
                .request(
                    &method,
                    &path,
                    &[("Content-Type", "application/json")],
                    Some(&bytes),
                )
                .map_err(|e| TestCaseError::fail(format!("{method} {path}: {e}")))?;
            prop_assert!(
                r.status < 500,
                "{method} {path} -> {}: {}",
                r.status,
                String::from_utf8_lossy(&r.body)
            );
            Ok(())
        },
    );
    let (st, _) = budgetd_testkit::call(&c, "GET", "/v1/health", None);
    assert_eq!(st, 200, "budgetd still answers");
}

/// A real snapshot's JSON with 1-4 values replaced: numbers by any f64 (what
/// serde_json cannot write becomes `null`), huge integers, strings or
/// nothing; node indices by any integer.
#[test]
fn fuzz_snapshot_decoder() {
    use budget_protocol::{PluginSnapshot, Policy};
    use policy_core::{AccountSpec, FairShare, GpuWeights, MemberSpec, TreeSpec};
    use serde_json::Value;
    let acct = |name: &str, parent: Option<&str>, alloc: f64| AccountSpec {
        name: name.into(),
        parent: parent.map(Into::into),
        allocation_gpu_hours: alloc,
        overcommit: false,
    };
    let tree = TreeSpec {
        root_allocation_gpu_hours: None,
        accounts: vec![
            acct("bio", None, 100.0),
            acct("bio-a", Some("bio"), 60.0),
            acct("phys", None, 50.0),
        ],
        members: vec![
            MemberSpec {
                user: "alice".into(),
                account: "bio-a".into(),
                allocation_gpu_hours: None,
            },
            MemberSpec {
                user: "bob".into(),
                account: "phys".into(),
                allocation_gpu_hours: Some(10.0),
            },
        ],
    };
    let usage = [(("phys".to_string(), "bob".to_string()), 90_000.0)]
        .into_iter()
        .collect();
    let mut weights = GpuWeights::default();
    weights.set("h100", 1.5).expect("weight");
    let snap = PluginSnapshot {
        version: "1-1".into(),
        generated_at: 1,
        policy: Policy::default(),
        weights,
        fair_share: FairShare::compute(&tree, &usage, 1, 7 * 86_400),
        drains: vec![],
        cluster_gpus: Some(8),
        cluster_weighted_gpus: Some(10.0),
    };
    let good = serde_json::to_value(&snap).expect("json");
    assert_eq!(
        PluginSnapshot::decode(good.to_string().as_bytes()).expect("a real snapshot decodes"),
        snap
    );
    // Every number's place in the JSON, for the mutations.
    fn numbers(v: &Value, at: String, out: &mut Vec<String>) {
        match v {
            Value::Number(_) | Value::Null => out.push(at),
            Value::Array(a) => {
                for (i, x) in a.iter().enumerate() {
                    numbers(x, format!("{at}/{i}"), out);
                }
            }
            Value::Object(o) => {
                for (k, x) in o {
                    numbers(x, format!("{at}/{k}"), out);
                }
            }
            _ => {}
        }
    }
    let mut places = Vec::new();
    numbers(&good, String::new(), &mut places);
    let places: &'static [String] = Box::leak(places.into_boxed_slice());
    let value = prop_oneof![
        4 => any::<f64>().prop_map(|f| serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)),
        2 => any::<i64>().prop_map(Value::from),
        1 => any::<u64>().prop_map(Value::from),
        1 => prop::sample::select(&[1e306, -1e306, 1e-300, -0.0, 5e-324][..]).prop_map(Value::from),
        1 => Just(Value::Null),
        1 => "[ -~]{0,8}".prop_map(Value::String),
    ];
    let mutation = prop::collection::vec((prop::sample::select(places), value), 1..5);
    let input = prop_oneof![
        8 => mutation.prop_map(move |m| {
            let mut v = good.clone();
            for (at, x) in m {
                if let Some(slot) = v.pointer_mut(&at) {
                    *slot = x;
                }
            }
            serde_json::to_vec(&v).unwrap_or_default()
        }),
        1 => prop::collection::vec(any::<u8>(), 0..300),
    ];
    fuzz("snapshot decoder", 1, input, |bytes| {
        let Ok(s) = PluginSnapshot::decode(&bytes) else {
            return Ok(());
        };
        // What was accepted is finite and in range, and using it cannot panic.
        let fs = &s.fair_share;
        for (i, n) in fs.nodes.iter().enumerate() {
            prop_assert!(n.allocation.is_finite() && n.allocation >= 0.0, "{n:?}");
            prop_assert!(n.usage.is_finite() && n.usage >= 0.0, "{n:?}");
            prop_assert!(n.ratio.is_finite() && n.ratio >= 0.0, "{n:?}");
            let _ = fs.path(i);
            let _ = fs.usage_gpu_hours(i);
            if let Some(r) = n.leaf_rank {
                prop_assert!(fs.factor(r).is_finite());
            }
        }
        for (a, u) in [
            ("bio", "alice"),
            ("bio-a", "alice"),
            ("phys", "bob"),
            ("phys", "x"),
        ] {
            let _ = fs.place(a, u);
        }
        prop_assert!(s.weights.default.is_finite() && s.weights.default > 0.0);
        prop_assert!(s.capacity_gpus().is_none_or(f64::is_finite));
        // A budgetd snapshot round-trips through the decoder.
        let again = serde_json::to_vec(&s).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(PluginSnapshot::decode(&again).is_ok());
        Ok(())
    });
}
