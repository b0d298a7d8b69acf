//! Prometheus text exposition for `GET /metrics`.
//!
//! Gauges are computed from the current plugin snapshot (so a scrape costs
//! no extra fair-share computation) and the ledger; counters come from
//! [`crate::state::Counters`] and reset when budgetd restarts, as Prometheus
//! expects of counters.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::atomic::Ordering;

use budget_protocol::RunState;
use policy_core::fairshare::NodeKind;
use policy_core::preempt::{JobView, job_tier};

use crate::state::{AppState, CachedSnapshot};
use crate::store::{Store, hours};

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Renders every metric.
pub fn render(store: &Store, state: &AppState, snap: &CachedSnapshot, now: i64) -> String {
    let mut out = String::new();
    let fs = &snap.snapshot.fair_share;
    let accounts: Vec<_> = fs
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Account))
        .collect();
    family(
        &mut out,
        "budget_account_usage_gpu_hours",
        "gauge",
        "Weighted GPU-hours used in the window, descendants included.",
    );
    for n in &accounts {
        let _ = writeln!(
            out,
            "budget_account_usage_gpu_hours{{account=\"{}\"}} {}",
            esc(&n.name),
            hours(n.usage)
        );
    }
    family(
        &mut out,
        "budget_account_allocation_gpu_hours",
        "gauge",
        "Allocation in weighted GPU-hours per window.",
    );
    for n in &accounts {
        let _ = writeln!(
            out,
            "budget_account_allocation_gpu_hours{{account=\"{}\"}} {}",
            esc(&n.name),
            hours(n.allocation)
        );
    }
    family(
        &mut out,
        "budget_account_ratio",
        "gauge",
        "Usage ratio (usage / allocation) of the account.",
    );
    for n in &accounts {
        let _ = writeln!(
            out,
            "budget_account_ratio{{account=\"{}\"}} {}",
            esc(&n.name),
            n.ratio
        );
    }
    let mut tiers: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (state_name, state_v) in [
        ("pending", RunState::Pending),
        ("running", RunState::Running),
    ] {
        for t in ["budgeted", "over_budget", "free"] {
            tiers.insert((state_name, t), 0);
        }
        for r in store.ledger().in_state(state_v) {
            let v = JobView {
                job_id: r.job_id,
                account: &r.account,
                user: &r.user,
                free_tier: r.free_tier,
                run_start: r.start.unwrap_or(0),
                min_runtime: r.min_runtime_secs,
                gpus: r.gpus,
            };
            *tiers
                .entry((state_name, job_tier(Some(fs), &v).as_str()))
                .or_insert(0) += 1;
        }
    }
    family(
        &mut out,
        "budget_runs",
        "gauge",
        "Pending and running runs by tier (latest sync).",
    );
    for ((s, t), n) in &tiers {
        let _ = writeln!(out, "budget_runs{{state=\"{s}\",tier=\"{t}\"}} {n}");
    }
    family(
        &mut out,
        "budget_ledger_runs",
        "gauge",
        "Rows in the run ledger.",
    );
    let _ = writeln!(out, "budget_ledger_runs {}", store.ledger().len());
    family(
        &mut out,
        "budget_snapshot_age_seconds",
        "gauge",
        "Age of the current plugin snapshot.",
    );
    let _ = writeln!(
        out,
        "budget_snapshot_age_seconds {}",
        (now - snap.snapshot.generated_at).max(0)
    );
    family(
        &mut out,
        "budget_snapshot_generation",
        "gauge",
        "Store generation of the current snapshot.",
    );
    let _ = writeln!(out, "budget_snapshot_generation {}", snap.generation);
    family(
        &mut out,
        "budget_snapshot_info",
        "gauge",
        "Version (ETag) of the current snapshot.",
    );
    let _ = writeln!(
        out,
        "budget_snapshot_info{{version=\"{}\"}} 1",
        esc(&snap.snapshot.version)
    );
    family(
        &mut out,
        "budget_policy_snapshot_max_age_seconds",
        "gauge",
        "Snapshot age at which the plugins enter safe mode (policy; budget_max_age overrides it).",
    );
    let _ = writeln!(
        out,
        "budget_policy_snapshot_max_age_seconds {}",
        snap.snapshot.policy.snapshot_max_age_secs
    );
    let c = &state.counters;
    let counters: [(&str, &str, u64); 9] = [
        (
            "budget_syncs_total",
            "Job-state syncs accepted.",
            c.syncs.load(Ordering::Relaxed),
        ),
        (
            "budget_snapshots_served_total",
            "Snapshots sent in full (200).",
            c.snapshots_served.load(Ordering::Relaxed),
        ),
        (
            "budget_snapshots_not_modified_total",
            "Snapshot requests answered 304.",
            c.snapshots_not_modified.load(Ordering::Relaxed),
        ),
        (
            "budget_snapshot_computations_total",
            "Fair-share snapshots computed.",
            c.snapshot_computations.load(Ordering::Relaxed),
        ),
        (
            "budget_http_requests_total",
            "HTTP requests answered.",
            c.requests.load(Ordering::Relaxed),
        ),
        (
            "budget_auth_refusals_total",
            "Requests refused with 401 or 403.",
            c.auth_refusals.load(Ordering::Relaxed),
        ),
        (
            "budget_last_sync_timestamp_seconds",
            "Unix time of the last sync (0: none).",
            c.last_sync_at.load(Ordering::Relaxed),
        ),
        (
            "budget_snapshot_last_fetch_timestamp_seconds",
            "Unix time a plugin last fetched the snapshot (200 or 304; 0: none).",
            c.last_snapshot_fetch_at.load(Ordering::Relaxed),
        ),
        (
            "budget_start_timestamp_seconds",
            "Unix time budgetd started.",
            u64::try_from(state.started_at).unwrap_or(0),
        ),
    ];
    for (name, help, v) in counters {
        let kind = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        family(&mut out, name, kind, help);
        let _ = writeln!(out, "{name} {v}");
    }
    family(
        &mut out,
        "budget_sync_runs_total",
        "counter",
        "Runs received by syncs, by outcome.",
    );
    for (o, v) in [
        ("inserted", &c.sync_runs_inserted),
        ("updated", &c.sync_runs_updated),
        ("unchanged", &c.sync_runs_unchanged),
    ] {
        let _ = writeln!(
            out,
            "budget_sync_runs_total{{outcome=\"{o}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    family(
        &mut out,
        "budget_http_errors_total",
        "counter",
        "HTTP responses with an error status, by class.",
    );
    let _ = writeln!(
        out,
        "budget_http_errors_total{{class=\"4xx\"}} {}",
        c.errors_4xx.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        out,
        "budget_http_errors_total{{class=\"5xx\"}} {}",
        c.errors_5xx.load(Ordering::Relaxed)
    );
    crate::preemptions::render_metrics(store, &mut out);
    crate::idle::render_metrics(store, now, state.config.agent_stale_secs, &mut out);
    out
}
