//! The benchmarks' shared fixture and timer (feature `test-records`): the budget
//! snapshot of 1,000 ranked users the callbacks' benchmarks read, and the batched
//! timing and report line both print, so `priority_p_set` and `site_factor_p_set`
//! are measured on the same snapshot the same way.

use std::time::Instant;

use budget_protocol::PluginSnapshot;
use policy_core::{AccountSpec, FairShare, GpuWeights, MemberSpec, TreeSpec};

/// 10 organisations x 10 teams x 10 users, every user with some usage.
pub fn snapshot() -> PluginSnapshot {
    let (mut accounts, mut members) = (Vec::new(), Vec::new());
    let mut usage = std::collections::BTreeMap::new();
    for o in 0..10 {
        accounts.push(AccountSpec {
            name: format!("org{o}"),
            parent: None,
            allocation_gpu_hours: 10_000.0,
            overcommit: false,
        });
        for t in 0..10 {
            let team = format!("org{o}team{t}");
            accounts.push(AccountSpec {
                name: team.clone(),
                parent: Some(format!("org{o}")),
                allocation_gpu_hours: 1_000.0,
                overcommit: false,
            });
            for u in 0..10 {
                let user = format!("user{o}{t}{u}");
                members.push(MemberSpec {
                    account: team.clone(),
                    user: user.clone(),
                    allocation_gpu_hours: None,
                });
                usage.insert(
                    (team.clone(), user),
                    f64::from(o * 100 + t * 10 + u) * 3600.0,
                );
            }
        }
    }
    let tree = TreeSpec {
        root_allocation_gpu_hours: None,
        accounts,
        members,
    };
    PluginSnapshot {
        version: "bench".into(),
        generated_at: 1_000_000,
        policy: Default::default(),
        weights: GpuWeights::default(),
        fair_share: FairShare::compute(&tree, &usage, 1_000_000, policy_core::DEFAULT_WINDOW_SECS),
        drains: vec![],
        cluster_gpus: None,
        cluster_weighted_gpus: None,
    }
}

/// Print `NAME: median N ns, p99 M ns (K calls)` (scripts/bench-slurm parses it).
pub fn report(name: &str, mut ns: Vec<u64>) {
    ns.sort_unstable();
    let median = ns[ns.len() / 2];
    let p99 = ns[ns.len() * 99 / 100];
    println!(
        "{name}: median {median} ns, p99 {p99} ns ({} calls)",
        ns.len()
    );
}

/// Time `f` in batches of `batch` calls (Instant costs ~20 ns: amortise it).
pub fn measure(mut f: impl FnMut(), rounds: usize, batch: u32) -> Vec<u64> {
    for _ in 0..10_000 {
        f();
    }
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..batch {
                f();
            }
            (t.elapsed().as_nanos() / u128::from(batch)) as u64
        })
        .collect()
}
