//! The generated overload and arrival scenarios under the cost-aware rule
//! (`budget`): the goals' invariants that must hold whatever the figures:
//! no contract broken, no invariant violated, every job finished, no
//! reversal (a team never takes from a team that took from it within the
//! window), preemptions and lost work bounded. And the old rule (`budget-v1`)
//! thrashes on the same workload, so the scenario does test what issue 9 is
//! about. Seeds 1-3: nothing here is tuned to one draw.

use budget_sim::cli::{Prepared, prepare};
use budget_sim::engine::{PolicyKind, simulate};
use budget_sim::metrics::{PolicyReport, report};

use super::cli_args::args;

fn prepared(scenario: &str, seed: u64) -> Prepared {
    let seed = seed.to_string();
    prepare(&args(&["--scenario", scenario, "--seed", &seed])).expect("scenario")
}

fn replay(p: &Prepared, kind: PolicyKind) -> PolicyReport {
    let o = simulate(&p.jobs, &p.shares, kind, &p.cfg);
    report(&o, p.cfg.window, &p.notes)
}

/// Scenarios on which the rule misses goal P (at most 0.05 preemptions per
/// GPU-day) once jobs get the product's 1 h min_runtime instead of
/// min(duration, 2 h): `fragmented` seed 1 goes from 0.034 to 0.081. A finding
/// about the rule, measured by scripts/sim-goals; the other invariants still
/// hold there and are asserted.
const MISSES_GOAL_P: &[&str] = &["fragmented"];

fn assert_invariants(name: &str, r: &PolicyReport) {
    assert_eq!(r.contract_breaks, 0, "{name}: contract broken");
    assert_eq!(r.invariant_violations, 0, "{name}: {:?}", r.checks);
    assert_eq!(r.unfinished_jobs, 0, "{name}: jobs never finished");
    assert_eq!(r.reversals, 0, "{name}: preemptions went back and forth");
    let misses_p = MISSES_GOAL_P
        .iter()
        .any(|s| name.starts_with(&format!("{s} ")));
    assert!(
        misses_p || r.preemptions_per_gpu_day <= 0.05,
        "{name}: {} preemptions per GPU-day",
        r.preemptions_per_gpu_day
    );
    assert!(
        r.lost_fraction_of_work <= 0.05,
        "{name}: lost {:.1}% of the work",
        r.lost_fraction_of_work * 100.0
    );
}

#[test]
fn cost_aware_rule_keeps_the_invariants_under_sustained_overload() {
    for scenario in [
        "overload",
        "multiday",
        "late-arrival",
        "fragmented",
        "many-teams",
    ] {
        // The rule must be exercised on every scenario, but a seed may need no
        // preemption at all (overload seeds 1 and 2 since the engine plans
        // every blocked job as Slurm's backfill does: turnover alone delivers
        // every entitlement), which is the point of the rule.
        let mut preemptions = 0;
        for seed in [1, 2, 3] {
            let p = prepared(scenario, seed);
            let r = replay(&p, PolicyKind::Budget);
            let name = format!("{scenario} seed {seed}");
            assert_invariants(&name, &r);
            preemptions += r.preemptions;
        }
        assert!(
            preemptions > 0,
            "{scenario}: the rule never preempted on seeds 1-3"
        );
    }
}

#[test]
fn late_team_gets_its_first_week() {
    for seed in [1, 2] {
        let p = prepared("late-arrival", seed);
        let r = replay(&p, PolicyKind::Budget);
        let late = r.teams.iter().find(|t| t.team == "l").expect("team l");
        assert!(
            late.entitlement_shortfall_first_week <= 0.10,
            "seed {seed}: the late team missed {:.1}% of its first week",
            late.entitlement_shortfall_first_week * 100.0
        );
    }
}

#[test]
fn old_rule_thrashes_on_the_same_workload() {
    let p = prepared("multiday", 1);
    let old = replay(&p, PolicyKind::BudgetV1);
    let new = replay(&p, PolicyKind::Budget);
    assert!(old.reversals > 0, "the old rule should go back and forth");
    assert!(
        old.gpu_hours_lost > old.work_gpu_hours,
        "the old rule should lose more work than it completes: {} vs {}",
        old.gpu_hours_lost,
        old.work_gpu_hours
    );
    assert!(new.gpu_hours_lost * 20.0 < old.gpu_hours_lost);
}

/// The late-arrival shapes pose the problem they are for: without preemption
/// and without fair share (static priorities) the late team misses more than
/// 10% of some window, because the cluster is held when it arrives. And the
/// cost-aware rule keeps its invariants on them. Seeds 1-2; the figures the
/// rule reaches on them are measured by scripts/sim-goals, not asserted here.
#[test]
fn late_shapes_hold_the_cluster_and_keep_the_invariants() {
    for scenario in [
        "late-whole-node",
        "late-whole-node-b",
        "late-wide",
        "late-wide-b",
        "over-holds",
        "over-holds-b",
    ] {
        for seed in [1, 2] {
            let p = prepared(scenario, seed);
            let name = format!("{scenario} seed {seed}");
            let held = replay(&p, PolicyKind::Static);
            let late = held.teams.iter().find(|t| t.team == "l").expect("team l");
            assert!(late.entitled_gpus > 0.0, "{name}: l entitled to nothing");
            assert!(
                late.entitlement_shortfall_worst > 0.10,
                "{name}: static leaves l only {:.1}% short",
                late.entitlement_shortfall_worst * 100.0
            );
            assert_eq!(held.unfinished_jobs, 0, "{name}");
            assert_invariants(&name, &replay(&p, PolicyKind::Budget));
        }
    }
}
