//! Prometheus text exposition for `GET /metrics`: every family budgetd
//! exports, written in one place.
//!
//! Gauges are computed from the current plugin snapshot (so a scrape costs
//! no extra fair-share computation), the ledger, the preemption record and
//! the idle report; counters come from [`crate::state::Counters`] and reset
//! when budgetd restarts, as Prometheus expects of counters.

use std::collections::BTreeMap;
use std::fmt::{Display, Write};
use std::sync::atomic::{AtomicU64, Ordering};

use budget_protocol::RunState;
use policy_core::fairshare::NodeKind;
use policy_core::preempt::job_tier;

use crate::snapshot::CachedSnapshot;
use crate::state::AppState;
use crate::store::{Store, hours};

/// The exposition text, written family by family.
#[derive(Debug, Default)]
struct Exposition(String);

/// A label value with `\`, `"` and newlines escaped.
fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Exposition {
    /// The `# HELP` and `# TYPE` lines of a family.
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.0, "# HELP {name} {help}");
        let _ = writeln!(self.0, "# TYPE {name} {kind}");
    }

    /// One sample; labels are escaped.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        let _ = if labels.is_empty() {
            writeln!(self.0, "{name} {value}")
        } else {
            let l: Vec<String> = labels
                .iter()
                .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
                .collect();
            writeln!(self.0, "{name}{{{}}} {value}", l.join(","))
        };
    }

    /// A family with one sample per value of a single label.
    fn by_label<'a, V: Display>(
        &mut self,
        (name, kind, help): (&str, &str, &str),
        label: &str,
        samples: impl IntoIterator<Item = (&'a str, V)>,
    ) {
        self.family(name, kind, help);
        for (l, v) in samples {
            self.sample(name, &[(label, l)], v);
        }
    }

    /// A family with one unlabelled sample.
    fn single(&mut self, (name, kind, help): (&str, &str, &str), value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }
}

fn load(c: &AtomicU64) -> u64 {
    c.load(Ordering::Relaxed)
}

/// Renders every metric.
pub fn render(store: &Store, state: &AppState, snap: &CachedSnapshot, now: i64) -> String {
    let mut x = Exposition::default();
    let fs = &snap.snapshot.fair_share;
    let accounts: Vec<_> = fs
        .nodes
        .iter()
        .filter(|n| matches!(n.kind, NodeKind::Account))
        .collect();
    x.by_label(
        (
            "budget_account_usage_gpu_hours",
            "gauge",
            "Weighted GPU-hours used in the window, descendants included.",
        ),
        "account",
        accounts.iter().map(|n| (n.name.as_str(), hours(n.usage))),
    );
    x.by_label(
        (
            "budget_account_allocation_gpu_hours",
            "gauge",
            "Allocation in weighted GPU-hours per window.",
        ),
        "account",
        accounts
            .iter()
            .map(|n| (n.name.as_str(), hours(n.allocation))),
    );
    x.by_label(
        (
            "budget_account_ratio",
            "gauge",
            "Usage ratio (usage / allocation) of the account.",
        ),
        "account",
        accounts.iter().map(|n| (n.name.as_str(), n.ratio)),
    );
    let mut tiers: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (state_name, state_v) in [
        ("pending", RunState::Pending),
        ("running", RunState::Running),
    ] {
        for t in ["budgeted", "over_budget", "free"] {
            tiers.insert((state_name, t), 0);
        }
        for r in store.ledger().in_state(state_v) {
            *tiers
                .entry((state_name, job_tier(Some(fs), &r.view()).as_str()))
                .or_insert(0) += 1;
        }
    }
    x.family(
        "budget_runs",
        "gauge",
        "Pending and running runs by tier (latest sync).",
    );
    for ((s, t), n) in &tiers {
        x.sample("budget_runs", &[("state", *s), ("tier", *t)], n);
    }
    x.single(
        ("budget_ledger_runs", "gauge", "Rows in the run ledger."),
        store.ledger().len(),
    );
    x.single(
        (
            "budget_snapshot_age_seconds",
            "gauge",
            "Age of the current plugin snapshot.",
        ),
        (now - snap.snapshot.generated_at).max(0),
    );
    x.single(
        (
            "budget_snapshot_generation",
            "gauge",
            "Store generation of the current snapshot.",
        ),
        snap.generation,
    );
    x.by_label(
        (
            "budget_snapshot_info",
            "gauge",
            "Version (ETag) of the current snapshot.",
        ),
        "version",
        [(snap.snapshot.version.as_str(), 1)],
    );
    x.single(
        (
            "budget_policy_snapshot_max_age_seconds",
            "gauge",
            "Snapshot age at which the plugins enter safe mode (policy; budget_max_age overrides it).",
        ),
        snap.snapshot.policy.snapshot_max_age_secs,
    );
    let c = &state.counters;
    let counters: [(&str, &str, u64); 14] = [
        (
            "budget_syncs_total",
            "Job-state syncs accepted.",
            load(&c.syncs),
        ),
        (
            "budget_snapshots_served_total",
            "Snapshots sent in full (200).",
            load(&c.snapshots_served),
        ),
        (
            "budget_snapshots_not_modified_total",
            "Snapshot requests answered 304.",
            load(&c.snapshots_not_modified),
        ),
        (
            "budget_snapshot_computations_total",
            "Fair-share snapshots computed.",
            load(&c.snapshot_computations),
        ),
        (
            "budget_http_requests_total",
            "HTTP requests answered.",
            load(&c.requests),
        ),
        (
            "budget_auth_refusals_total",
            "Requests refused with 401 or 403.",
            load(&c.auth_refusals),
        ),
        (
            "budget_connections_refused_total",
            "Connections closed at once, unread, because a connection cap was reached.",
            load(&c.connections_refused),
        ),
        (
            "budget_reserve_refusals_total",
            "Requests on a reserved TCP connection answered 503 for carrying no controller or agent token.",
            load(&c.reserve_refusals),
        ),
        (
            "budget_reserve_displaced_total",
            "Reserved TCP connections closed, unread, to make room for a newcomer because they had shown no controller or agent token.",
            load(&c.reserve_displaced),
        ),
        (
            "budget_reads_throttled_total",
            "Expensive reads (share, usage, why, idle) refused with 429.",
            load(&c.reads_throttled),
        ),
        (
            "budget_agent_jobs_off_node_total",
            "Jobs in agent reports ignored because the ledger places them on other nodes.",
            load(&c.agent_jobs_off_node),
        ),
        (
            "budget_last_sync_timestamp_seconds",
            "Unix time of the last sync (0: none).",
            load(&c.last_sync_at),
        ),
        (
            "budget_snapshot_last_fetch_timestamp_seconds",
            "Unix time a plugin last fetched the snapshot (200 or 304; 0: none).",
            load(&c.last_snapshot_fetch_at),
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
        x.single((name, kind, help), v);
    }
    x.by_label(
        (
            "budget_sync_runs_total",
            "counter",
            "Runs received by syncs, by outcome.",
        ),
        "outcome",
        [
            ("inserted", load(&c.sync_runs_inserted)),
            ("updated", load(&c.sync_runs_updated)),
            ("unchanged", load(&c.sync_runs_unchanged)),
        ],
    );
    x.single(
        (
            "budget_sync_contradicted_runs_total",
            "counter",
            "Runs a sync reported running that the ledger had already ended (by an import, most likely); the ledger's end is kept (also counted unchanged).",
        ),
        load(&c.sync_runs_contradicted),
    );
    x.by_label(
        (
            "budget_http_errors_total",
            "counter",
            "HTTP responses with an error status, by class.",
        ),
        "class",
        [("4xx", load(&c.errors_4xx)), ("5xx", load(&c.errors_5xx))],
    );
    preemptions(&mut x, store);
    site_cap(&mut x, store, now);
    idle(&mut x, store, now, state.config.agent_stale_secs);
    shadow(&mut x, store, state, now);
    whatif(&mut x, state);
    x.0
}

/// The web view's what-ifs (`crate::whatif`): counters since budgetd started,
/// whether one runs now, and how long the last one took.
fn whatif(x: &mut Exposition, state: &AppState) {
    let w = state.whatifs.counts();
    x.by_label(
        (
            "budget_whatif_runs_total",
            "counter",
            "What-ifs of the web view ended, by outcome (failed includes those stopped at [whatif] time_limit_secs).",
        ),
        "outcome",
        [("done", w.done), ("failed", w.failed)],
    );
    x.single(
        (
            "budget_whatif_time_limit_stops_total",
            "counter",
            "What-ifs stopped at [whatif] time_limit_secs (counted in budget_whatif_runs_total{outcome=\"failed\"} too).",
        ),
        w.time_limit,
    );
    x.single(
        (
            "budget_whatif_busy_refusals_total",
            "counter",
            "What-if requests refused (429) because another one was running.",
        ),
        w.busy,
    );
    x.single(
        (
            "budget_whatif_running",
            "gauge",
            "1 while a what-if replay runs (one at a time), else 0.",
        ),
        u8::from(w.running),
    );
    x.single(
        (
            "budget_whatif_last_duration_seconds",
            "gauge",
            "Wall-clock seconds the last what-if to end ran (0: none since budgetd started).",
        ),
        w.last_secs,
    );
}

/// Shadow mode (`crate::shadow`): the latest queue sample's order figures, the
/// window's would-be preemptions and each team's shortfall at the latest sample.
/// Only the counters when no sample was ever taken (no plugin in shadow mode).
fn shadow(x: &mut Exposition, store: &Store, state: &AppState, now: i64) {
    let c = &state.counters;
    x.single(
        (
            "budget_shadow_samples_total",
            "counter",
            "Queue samples shadow mode recorded (site_factor/budget in mode=shadow).",
        ),
        load(&c.shadow_samples),
    );
    x.single(
        (
            "budget_shadow_would_preempt_total",
            "counter",
            "Preemptions the cost-aware rule would have made in shadow mode, recorded (none was carried out).",
        ),
        load(&c.shadow_preemptions),
    );
    let Ok(l) = crate::shadow::latest(store, now) else {
        return;
    };
    if let Some(o) = &l.order {
        x.single(
            (
                "budget_shadow_pending_jobs",
                "gauge",
                "Pending jobs in the latest shadow queue sample.",
            ),
            o.pending,
        );
        x.single(
            (
                "budget_shadow_order_pairs",
                "gauge",
                "Pending pairs the budget order orders (different tier or rank), latest sample.",
            ),
            o.pairs,
        );
        x.single(
            (
                "budget_shadow_order_discordant_pairs",
                "gauge",
                "Of those pairs, the ones Slurm's priority orders the other way, latest sample.",
            ),
            o.discordant,
        );
        if let Some(tau) = o.tau {
            x.single(
                (
                    "budget_shadow_order_tau",
                    "gauge",
                    "Kendall tau-b between Slurm's priorities and the budget order, latest sample (1: same order).",
                ),
                tau,
            );
        }
    }
    x.single(
        (
            "budget_shadow_would_preempt_window",
            "gauge",
            "Would-be preemptions recorded in the policy window.",
        ),
        l.preemptions,
    );
    x.single(
        (
            "budget_shadow_would_lose_gpu_hours_window",
            "gauge",
            "GPU-hours the would-be preemptions of the policy window would have destroyed.",
        ),
        l.lost_gpu_hours,
    );
    x.by_label(
        (
            "budget_shadow_shortfall_gpus",
            "gauge",
            "Per account, the rule's target (min of entitled GPUs and demand) minus the GPUs held, latest shadow sample.",
        ),
        "account",
        l.shortfall
            .iter()
            .map(|t| (t.account.as_str(), t.shortfall_gpus)),
    );
}

/// Preemptions and GPU-hours lost per account, all time.
fn preemptions(x: &mut Exposition, store: &Store) {
    let rows = crate::preemptions::list(store, 0).unwrap_or_default();
    let by_account = crate::preemptions::by_account(&rows);
    let name = "budget_preemptions_total";
    x.family(
        name,
        "counter",
        "Runs preempted or requeued by a drain, by victim account and reason.",
    );
    for a in &by_account {
        for (reason, n) in &a.by_reason {
            x.sample(
                name,
                &[("account", a.account.as_str()), ("reason", reason.as_str())],
                n,
            );
        }
    }
    x.by_label(
        (
            "budget_preempted_gpu_hours_total",
            "counter",
            "GPU-hours of runs lost to preemption, by victim account.",
        ),
        "account",
        by_account
            .iter()
            .map(|a| (a.account.as_str(), a.gpu_hours_lost)),
    );
}

/// The site safety net (docs/design.md §6.4): rebalancing preemptions and the GPU-hours
/// they lost in the window ending now, the caps `budgetctl policy set` gave,
/// and whether a cap is reached (then `preempt/budget` refuses rebalancing
/// and logs "site cap reached" in the slurmctld log).
fn site_cap(x: &mut Exposition, store: &Store, now: i64) {
    let (n, lost) = crate::preemptions::site_totals(store, now);
    let p = store.policy();
    x.single(
        (
            "budget_rebalance_preemptions_window",
            "gauge",
            "Rebalancing preemptions (reasons rebalance and over_budget) in the window ending now.",
        ),
        n,
    );
    x.single(
        (
            "budget_rebalance_lost_gpu_hours_window",
            "gauge",
            "GPU-hours of runs lost to rebalancing preemptions in the window ending now.",
        ),
        lost,
    );
    x.family(
        "budget_site_cap",
        "gauge",
        "Site caps per window set with budgetctl policy set (absent: no cap).",
    );
    if let Some(m) = p.site_max_preemptions {
        x.sample("budget_site_cap", &[("kind", "preemptions")], m);
    }
    if let Some(m) = p.site_max_lost_gpu_hours {
        x.sample("budget_site_cap", &[("kind", "lost_gpu_hours")], m);
    }
    let reached = p.site_max_preemptions.is_some_and(|m| n >= u64::from(m))
        || p.site_max_lost_gpu_hours.is_some_and(|m| lost >= m);
    x.single(
        (
            "budget_site_cap_reached",
            "gauge",
            "1 while a site cap is reached: preempt/budget takes no job for rebalancing.",
        ),
        u8::from(reached),
    );
}

/// Idle GPUs now and idle GPU-hours over the window per account, and the age
/// of each node agent's latest report.
fn idle(x: &mut Exposition, store: &Store, now: i64, stale: i64) {
    let window = store.policy().window_secs;
    let all = |_: Option<&str>, _: Option<&str>| true;
    let rep = match crate::idle::report(store, now, now - window, now, stale, &all, true) {
        Ok(r) => r,
        Err(e) => {
            tracing::warn!(error = %e, "idle metrics unavailable");
            return;
        }
    };
    let known = || {
        rep.by_account
            .iter()
            .filter_map(|a| a.account.as_deref().map(|n| (n, a)))
    };
    x.by_label(
        (
            "budget_idle_gpus",
            "gauge",
            "GPUs idle beyond the idle threshold now, by job account.",
        ),
        "account",
        known().map(|(n, a)| (n, a.idle_gpus_now)),
    );
    x.by_label(
        (
            "budget_idle_gpu_hours",
            "gauge",
            "Idle GPU-hours of jobs in the usage window, by job account.",
        ),
        "account",
        known().map(|(n, a)| (n, a.idle_gpu_hours)),
    );
    x.by_label(
        (
            "budget_agent_last_report_age_seconds",
            "gauge",
            "Seconds since the node agent's latest report.",
        ),
        "node",
        rep.nodes.iter().map(|n| (n.node.as_str(), n.age_secs)),
    );
}
