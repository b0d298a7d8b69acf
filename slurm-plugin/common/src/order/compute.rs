//! The priority of one job from the in-memory snapshot: pure, no I/O, no Slurm types.
//!
//! Tier, then fair-share rank, then age (docs/design.md §4), composed by
//! `policy_core::priority::job_priority`. Everything Slurm-specific (reading the job
//! record) is in `job.rs`; this module only decides, so it is unit-tested directly.
//!
//! The rank is the cost-aware rule's (`PreemptState::priority_place`, the one the
//! simulator measured): within a tier, accounts holding fewer GPUs than their
//! entitlement come first, then Fair-Tree's ratio order. That needs the GPUs each
//! account holds, so the background pass computes an [`EntitledOrder`] from the
//! snapshot and the running jobs it saw ([`entitled_order`]); without one (before the
//! first pass, or for another snapshot) the rank is Fair-Tree's alone. Holdings are
//! weighted GPUs, as the entitlements: each job's GPUs x the billing weight of
//! their type in the snapshot ([`gpu_weight`]), against the snapshot's weighted
//! capacity, as `preempt/budget` counts them.
//!
//! Without any snapshot (budgetd never reached since the plugin loaded) every
//! non-free job is treated as budgeted with equal rank: the queue degrades to FIFO by
//! age, free-tier jobs still last (safe mode, docs/design.md §9.3). With a stale snapshot
//! the last known ranking is kept.

use budget_protocol::PluginSnapshot;
use policy_core::Tier;
use policy_core::priority::{self, PriorityParts};
use policy_core::rebalance::{PreemptState, RunningJob, weighted_gpus};

/// The entitlement-first order of one snapshot: the rule's period state computed
/// from the GPUs each (account, user) holds (only holdings matter for the order).
pub type EntitledOrder = PreemptState;

/// Billing weight of one GPU of `gpu_type` in `snapshot` (`None`: no
/// snapshot yet, every GPU weighs 1).
pub fn gpu_weight(snapshot: Option<&PluginSnapshot>, gpu_type: Option<&str>) -> f64 {
    snapshot.map_or(1.0, |s| s.weights.weight(gpu_type))
}

/// The GPUs one key holds, raw and weighted (each job's GPUs x its weight,
/// `policy_core::rebalance::weighted_gpus`), as the pass adds them up.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Held {
    pub gpus: u32,
    pub weighted: f64,
}

impl Held {
    /// Adds a job's `gpus` GPUs of billing weight `weight`.
    pub fn add(&mut self, gpus: u32, weight: f64) {
        self.gpus = self.gpus.saturating_add(gpus);
        self.weighted += weighted_gpus(gpus, weight);
    }

    /// The mean billing weight of its GPUs (1 when it holds none): what
    /// [`entitled_order`] takes beside the count.
    pub fn weight(&self) -> f64 {
        if self.gpus > 0 {
            self.weighted / f64::from(self.gpus)
        } else {
            1.0
        }
    }
}

/// The order for `snapshot` with `held`: `(account, user, GPUs held by its running
/// non-free jobs, their billing weight)` ([`gpu_weight`]; a key holding GPUs of
/// several types passes their mean weight, or one entry per type: entries add up).
pub fn entitled_order<'a>(
    snapshot: &PluginSnapshot,
    held: impl IntoIterator<Item = (&'a str, &'a str, u32, f64)>,
    now: i64,
) -> EntitledOrder {
    entitled_order_under(snapshot, snapshot.policy.rebalance(), held, now)
}

/// [`entitled_order`] under `rule` instead of the snapshot policy's: the
/// tests vary the rule's constants to see each one act.
fn entitled_order_under<'a>(
    snapshot: &PluginSnapshot,
    rule: policy_core::rebalance::RebalancePolicy,
    held: impl IntoIterator<Item = (&'a str, &'a str, u32, f64)>,
    now: i64,
) -> EntitledOrder {
    let running = held.into_iter().filter(|h| h.2 > 0).enumerate().map(
        |(i, (account, user, gpus, weight))| RunningJob {
            job_id: u32::try_from(i).unwrap_or(u32::MAX),
            account,
            user,
            free_tier: false,
            gpus,
            weight,
            run_start: now,
            time_limit: None,
            min_runtime: 0,
            checkpoint: None,
            grace: 0,
            requeues: 0,
            leaf: None,
            partition_tier: None,
            partition_preempt_off: None,
            qos: None,
        },
    );
    // The snapshot's (weighted) cluster capacity, as preempt/budget computes
    // its state: the two plugins must agree on who is below its entitlement.
    PreemptState::compute(
        Some(&snapshot.fair_share),
        running,
        [],
        [],
        snapshot.capacity_gpus(),
        rule,
        now,
    )
}

/// What the priority depends on, read from a job record.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct JobKey<'a> {
    pub account: &'a str,
    /// User name, if known (Slurm leaves it NULL for pending jobs; see
    /// `crate::users`).
    pub user: Option<&'a str>,
    /// The job's contract puts it in the free tier (`policy_core::contract`: the one
    /// stored by job_submit/budget, else its comment, partition or QOS).
    pub free_tier: bool,
    /// Seconds the job has been eligible to run.
    pub age_secs: i64,
    /// `details->nice` (NICE_OFFSET is neutral).
    pub nice: u32,
}

/// The decision for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub parts: PriorityParts,
    /// Leaf rank (0 = best) used, and the number of leaves it is out of.
    pub rank: u32,
    pub num_leaves: u32,
    /// The account/user was found in the snapshot.
    pub placed: bool,
    /// Final priority after nice, never 0.
    pub priority: u32,
}

/// Where a job's account/user (and free-tier opt-in) puts it in a snapshot: everything
/// of the decision except age and nice, so the background pass can keep it between
/// passes while neither the snapshot nor the job's key changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Placement {
    pub tier: Tier,
    pub rank: u32,
    pub num_leaves: u32,
    pub placed: bool,
}

/// Tier and rank of a job in `snapshot` (FIFO-budgeted without one), ranked by
/// `order` when it was computed from this snapshot.
pub fn place(
    snapshot: Option<&PluginSnapshot>,
    order: Option<&EntitledOrder>,
    key: &JobKey<'_>,
) -> Placement {
    place_key(
        snapshot,
        order,
        key.account,
        key.user.unwrap_or(""),
        key.free_tier,
    )
}

/// [`place`] from the parts of a key that matter: account, user, free-tier opt-in.
pub fn place_key(
    snapshot: Option<&PluginSnapshot>,
    order: Option<&EntitledOrder>,
    account: &str,
    user: &str,
    free: bool,
) -> Placement {
    let (tier, rank, num_leaves, placed) = match snapshot {
        None => (if free { Tier::Free } else { Tier::Budgeted }, 0, 0, false),
        Some(s) => {
            let fs = &s.fair_share;
            // `priority_place` is Fair-Tree's place for an order of another snapshot.
            let found = match order {
                Some(o) => o.priority_place(fs, account, user),
                None => fs.place(account, user).map(|l| (l.tier, l.rank)),
            };
            match found {
                Some((tier, rank)) => (
                    if free { Tier::Free } else { tier },
                    rank,
                    fs.num_leaves,
                    true,
                ),
                // Unknown account: no allocation, so over budget and ranked last.
                None => (
                    if free { Tier::Free } else { Tier::OverBudget },
                    fs.num_leaves,
                    fs.num_leaves,
                    false,
                ),
            }
        }
    };
    Placement {
        tier,
        rank,
        num_leaves,
        placed,
    }
}

/// Final priority of a placed job at `age_secs` with `nice` (never 0).
pub fn priority_of(p: &Placement, age_secs: i64, nice: u32) -> u32 {
    apply_nice(
        priority::job_priority(p.tier, p.rank, p.num_leaves, age_secs),
        nice,
    )
}

/// Decide tier, rank and priority for a job.
pub fn decide(
    snapshot: Option<&PluginSnapshot>,
    order: Option<&EntitledOrder>,
    key: &JobKey<'_>,
) -> Decision {
    let p = place(snapshot, order, key);
    Decision {
        parts: priority::priority_parts(p.tier, p.rank, p.num_leaves, key.age_secs),
        rank: p.rank,
        num_leaves: p.num_leaves,
        placed: p.placed,
        priority: priority_of(&p, key.age_secs, key.nice),
    }
}

/// Apply `nice` the way priority/basic does (positive nice lowers), never reaching 0
/// (0 means held).
pub fn apply_nice(prio: u32, nice: u32) -> u32 {
    let offset = i64::from(nice) - i64::from(slurm_ffi::NICE_OFFSET);
    let p = (i64::from(prio) - offset).clamp(1, i64::from(u32::MAX));
    p as u32
}

/// Seconds a job has been eligible: from `begin_time` if set (it is also pushed forward
/// on requeue), else `submit_time`; 0 before eligibility.
pub fn age_secs(now: i64, submit_time: i64, begin_time: i64) -> i64 {
    let since = if begin_time > 0 {
        begin_time.max(submit_time)
    } else {
        submit_time
    };
    if since <= 0 { 0 } else { (now - since).max(0) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::rebalance::RebalancePolicy;
    use policy_core::{AccountSpec, FairShare, GpuWeights, MemberSpec, TreeSpec};

    fn key<'a>(account: &'a str, user: &'a str, age: i64) -> JobKey<'a> {
        JobKey {
            account,
            user: Some(user),
            age_secs: age,
            nice: slurm_ffi::NICE_OFFSET,
            ..Default::default()
        }
    }

    fn snapshot(usage: &[(&str, &str, f64)]) -> PluginSnapshot {
        snapshot_with(100.0, usage)
    }

    /// teama (alice) and teamb (bob) allocated `alloc` GPU-hours a week each.
    fn snapshot_with(alloc: f64, usage: &[(&str, &str, f64)]) -> PluginSnapshot {
        let tree: TreeSpec = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![
                AccountSpec {
                    name: "teama".into(),
                    parent: None,
                    allocation_gpu_hours: alloc,
                    overcommit: false,
                },
                AccountSpec {
                    name: "teamb".into(),
                    parent: None,
                    allocation_gpu_hours: alloc,
                    overcommit: false,
                },
            ],
            members: vec![
                MemberSpec {
                    account: "teama".into(),
                    user: "alice".into(),
                    allocation_gpu_hours: None,
                },
                MemberSpec {
                    account: "teamb".into(),
                    user: "bob".into(),
                    allocation_gpu_hours: None,
                },
            ],
        };
        let usage = usage
            .iter()
            .map(|(a, u, h)| ((a.to_string(), u.to_string()), h * 3600.0))
            .collect();
        let fs = FairShare::compute(&tree, &usage, 1000, policy_core::DEFAULT_WINDOW_SECS);
        PluginSnapshot {
            version: "1".into(),
            generated_at: 1000,
            policy: Default::default(),
            weights: GpuWeights::default(),
            fair_share: fs,
            drains: vec![],
            cluster_gpus: None,
            cluster_weighted_gpus: None,
        }
    }

    #[test]
    fn no_snapshot_is_fifo_budgeted_and_nonzero() {
        let old = decide(None, None, &key("teama", "alice", 600));
        let young = decide(None, None, &key("teamb", "bob", 60));
        assert_eq!(old.parts.tier, Tier::Budgeted);
        assert!(old.priority > young.priority && young.priority > 0);
        let mut free = key("teama", "alice", 6000);
        free.free_tier = true;
        assert!(decide(None, None, &free).priority < young.priority);
    }

    #[test]
    fn lower_usage_ranks_higher_and_over_budget_is_below() {
        let s = snapshot(&[("teama", "alice", 10.0), ("teamb", "bob", 50.0)]);
        let a = decide(Some(&s), None, &key("teama", "alice", 0));
        let b = decide(Some(&s), None, &key("teamb", "bob", 5000));
        assert!(a.placed && b.placed);
        assert!(a.priority > b.priority, "{a:?} {b:?}");
        let s = snapshot(&[("teama", "alice", 150.0), ("teamb", "bob", 50.0)]);
        let a = decide(Some(&s), None, &key("teama", "alice", 5000));
        assert_eq!(a.parts.tier, Tier::OverBudget);
        let unknown = decide(Some(&s), None, &key("nosuch", "eve", 5000));
        assert!(!unknown.placed);
        assert_eq!(unknown.parts.tier, Tier::OverBudget);
    }

    #[test]
    fn an_account_below_its_entitlement_ranks_first_within_its_tier() {
        // teama's ratio is lower (Fair-Tree puts it first), but it holds more GPUs
        // than its entitlement (100 GPU-h a week = 0.6 GPUs) and teamb holds none.
        // The rule without its projected tier here, so that both rank in the
        // snapshot's tier (budgeted) and only the order within it is seen.
        let s = snapshot(&[("teama", "alice", 10.0), ("teamb", "bob", 50.0)]);
        let no_projection = RebalancePolicy {
            tier_projection: None,
            ..RebalancePolicy::default()
        };
        let fair_tree_a = decide(Some(&s), None, &key("teama", "alice", 0));
        let fair_tree_b = decide(Some(&s), None, &key("teamb", "bob", 0));
        assert!(fair_tree_a.rank < fair_tree_b.rank);
        let order = entitled_order_under(&s, no_projection, [("teama", "alice", 4, 1.0)], 1000);
        let a = decide(Some(&s), Some(&order), &key("teama", "alice", 0));
        let b = decide(Some(&s), Some(&order), &key("teamb", "bob", 0));
        assert_eq!(
            (a.parts.tier, b.parts.tier),
            (Tier::Budgeted, Tier::Budgeted)
        );
        assert!(b.rank < a.rank && b.priority > a.priority, "{a:?} {b:?}");
        // An order of another snapshot falls back to Fair-Tree's rank.
        let mut later = snapshot(&[("teama", "alice", 11.0), ("teamb", "bob", 50.0)]);
        later.fair_share.at += 1;
        let stale = decide(Some(&later), Some(&order), &key("teama", "alice", 0));
        assert_eq!(stale.rank, fair_tree_a.rank);
        // With the rule's default projection, teama holding 4 GPUs on a 0.6 GPU
        // allocation heads past it (0.1 + 0.6 x (6.7 - 0.1) = 4.1): its pending job
        // ranks over budget, below teamb's.
        let order = entitled_order(&s, [("teama", "alice", 4, 1.0)], 1000);
        let a = decide(Some(&s), Some(&order), &key("teama", "alice", 0));
        let b = decide(Some(&s), Some(&order), &key("teamb", "bob", 0));
        assert_eq!(
            (a.parts.tier, b.parts.tier),
            (Tier::OverBudget, Tier::Budgeted)
        );
        assert!(b.priority > a.priority, "{a:?} {b:?}");
        // Free-tier jobs stay free whatever the order says.
        let mut free = key("teamb", "bob", 0);
        free.free_tier = true;
        assert_eq!(decide(Some(&s), Some(&order), &free).parts.tier, Tier::Free);
    }

    #[test]
    fn the_rules_ranking_constants_decide_the_order_and_the_band() {
        // As in the test above: teamb holds nothing and outranks teama (holding 4)
        // with entitlement first, the rule's constant.
        let s = snapshot(&[("teama", "alice", 10.0), ("teamb", "bob", 50.0)]);
        let rule = RebalancePolicy::default();
        assert!(rule.entitled_first);
        let ranks = |rule: RebalancePolicy| {
            let order = entitled_order_under(&s, rule, [("teama", "alice", 4, 1.0)], 1000);
            let a = decide(Some(&s), Some(&order), &key("teama", "alice", 0));
            let b = decide(Some(&s), Some(&order), &key("teamb", "bob", 0));
            (a.rank, b.rank)
        };
        let (a, b) = ranks(rule);
        assert!(b < a, "{a} {b}");
        // Without it: Fair-Tree's ratio order again.
        let (a, b) = ranks(RebalancePolicy {
            entitled_first: false,
            ..rule
        });
        assert!(a < b, "{a} {b}");

        // teama over budget by 5% (ratio 1.05) and holding none of its entitled
        // GPUs: budgeted under the rule's projected tier (1.05 x 0.4 = 0.42); with
        // the projection off, over budget without a band or with one narrower than
        // 5%, budgeted within a band of 0.2.
        let s = snapshot(&[("teama", "alice", 105.0), ("teamb", "bob", 50.0)]);
        let tier = |rule: RebalancePolicy| {
            let order = entitled_order_under(&s, rule, [("teamb", "bob", 1, 1.0)], 1000);
            decide(Some(&s), Some(&order), &key("teama", "alice", 0))
                .parts
                .tier
        };
        assert_eq!(tier(rule), Tier::Budgeted);
        // What the snapshot's policy gives is the rule's constants.
        let order = entitled_order(&s, [("teamb", "bob", 1, 1.0)], 1000);
        let by_policy = decide(Some(&s), Some(&order), &key("teama", "alice", 0));
        assert_eq!(by_policy.parts.tier, Tier::Budgeted);
        let no_projection = RebalancePolicy {
            tier_projection: None,
            ..rule
        };
        assert_eq!(tier(no_projection), Tier::OverBudget);
        for (band, want) in [
            (None, Tier::OverBudget),
            (Some(0.04), Tier::OverBudget),
            (Some(0.2), Tier::Budgeted),
        ] {
            let banded = RebalancePolicy {
                tier_band: band,
                ..no_projection
            };
            assert_eq!(tier(banded), want, "tier_band {band:?}");
        }
    }

    #[test]
    fn an_overcommitted_site_is_entitled_to_the_snapshots_cluster_only() {
        // Allocations of 100 GPU-h a week each (0.6 GPUs); a cluster of 1 GPU
        // scales both to 0.5, as preempt/budget and the simulator compute them.
        let mut s = snapshot(&[("teama", "alice", 10.0), ("teamb", "bob", 50.0)]);
        let a = s.fair_share.account("teama").expect("teama");
        let entitled = |s: &PluginSnapshot| {
            entitled_order(s, [("teama", "alice", 1, 1.0)], 1000)
                .side(&s.fair_share, a)
                .expect("side")
                .entitled
        };
        let own = 100.0 / (policy_core::DEFAULT_WINDOW_SECS as f64 / 3600.0);
        assert!((entitled(&s) - own).abs() < 1e-9, "{}", entitled(&s));
        s.cluster_gpus = Some(1);
        assert!((entitled(&s) - 0.5).abs() < 1e-9, "{}", entitled(&s));
        // A cluster larger than the allocations raises nobody's entitlement.
        s.cluster_gpus = Some(64);
        assert!((entitled(&s) - own).abs() < 1e-9, "{}", entitled(&s));
    }

    #[test]
    fn holdings_on_typed_gpus_count_with_the_snapshots_weights() {
        // Both teams are entitled to 64 weighted GPUs on a cluster of 64 H100
        // and 32 B300 at weight 2 (128 weighted). teama (the lower ratio) holds
        // 32 B300, its whole entitlement; teamb holds 40 untyped GPUs.
        let week = 168.0;
        let mut s = snapshot_with(
            64.0 * week,
            &[
                ("teama", "alice", 0.01 * 64.0 * week),
                ("teamb", "bob", 0.2 * 64.0 * week),
            ],
        );
        s.weights.set("b300", 2.0).expect("weight");
        s.cluster_gpus = Some(96);
        s.cluster_weighted_gpus = Some(128.0);
        // The weighted GPUs held alone decide here (the rule without its window
        // balance): with it, teama, having received 1% of its window, counts as
        // below its entitlement up to 64 + 0.15 x 64 and ranks first (checked last).
        let held_alone = RebalancePolicy {
            balance_band: None,
            ..RebalancePolicy::default()
        };
        let b300 = gpu_weight(Some(&s), Some("B300"));
        assert_eq!(
            (
                b300,
                gpu_weight(Some(&s), None),
                gpu_weight(None, Some("b300"))
            ),
            (2.0, 1.0, 1.0)
        );
        // The pass adds a key's jobs up: 32 B300 in two jobs.
        let mut a = Held::default();
        a.add(16, b300);
        a.add(16, b300);
        assert_eq!((a.gpus, a.weighted, a.weight()), (32, 64.0, 2.0));
        let mut b = Held::default();
        b.add(40, gpu_weight(Some(&s), None));
        let order = entitled_order_under(
            &s,
            held_alone,
            [
                ("teama", "alice", a.gpus, a.weight()),
                ("teamb", "bob", b.gpus, b.weight()),
            ],
            1000,
        );
        let side = |o: &EntitledOrder, team: &str| {
            let n = s.fair_share.account(team).expect("team");
            let x = o.side(&s.fair_share, n).expect("side");
            (x.held, x.entitled)
        };
        assert_eq!(side(&order, "teama"), (64.0, 64.0));
        assert_eq!(side(&order, "teamb"), (40.0, 64.0));
        // teama is at its entitlement: teamb, below its own, ranks first.
        let (da, db) = (
            decide(Some(&s), Some(&order), &key("teama", "alice", 0)),
            decide(Some(&s), Some(&order), &key("teamb", "bob", 0)),
        );
        assert_eq!(
            (da.parts.tier, db.parts.tier),
            (Tier::Budgeted, Tier::Budgeted)
        );
        assert!(
            db.rank < da.rank && db.priority > da.priority,
            "{da:?} {db:?}"
        );
        // With the window balance (the rule's constant) teama, owed almost its
        // whole window, is below its entitlement up to 73.6 and first by ratio.
        let balanced = entitled_order(
            &s,
            [
                ("teama", "alice", a.gpus, a.weight()),
                ("teamb", "bob", b.gpus, b.weight()),
            ],
            1000,
        );
        let (ba, bb) = (
            decide(Some(&s), Some(&balanced), &key("teama", "alice", 0)),
            decide(Some(&s), Some(&balanced), &key("teamb", "bob", 0)),
        );
        assert!(ba.rank < bb.rank, "{ba:?} {bb:?}");
        // Without the weights (every GPU 1, the raw capacity) teama's 32 would be
        // half its entitlement and rank first.
        s.weights = GpuWeights::default();
        s.cluster_weighted_gpus = None;
        let raw = entitled_order_under(
            &s,
            held_alone,
            [("teama", "alice", 32, 1.0), ("teamb", "bob", 40, 1.0)],
            1000,
        );
        assert_eq!(side(&raw, "teama"), (32.0, 48.0));
        let (ra, rb) = (
            decide(Some(&s), Some(&raw), &key("teama", "alice", 0)),
            decide(Some(&s), Some(&raw), &key("teamb", "bob", 0)),
        );
        assert!(ra.rank < rb.rank, "{ra:?} {rb:?}");
        // A key on two types passes their mean weight: 2 H100 + 2 B300 at 2.
        let mut mixed = Held::default();
        mixed.add(2, 1.0);
        mixed.add(2, 2.0);
        assert_eq!((mixed.gpus, mixed.weighted, mixed.weight()), (4, 6.0, 1.5));
        assert_eq!(Held::default().weight(), 1.0);
    }

    #[test]
    fn nice_and_age() {
        assert_eq!(apply_nice(100, slurm_ffi::NICE_OFFSET), 100);
        assert_eq!(apply_nice(100, slurm_ffi::NICE_OFFSET + 10), 90);
        assert_eq!(apply_nice(5, slurm_ffi::NICE_OFFSET + 10), 1);
        assert_eq!(
            apply_nice(u32::MAX - 1, slurm_ffi::NICE_OFFSET - 10),
            u32::MAX
        );
        assert_eq!(age_secs(100, 40, 0), 60);
        assert_eq!(age_secs(100, 40, 90), 10);
        assert_eq!(age_secs(100, 40, 200), 0);
        assert_eq!(age_secs(100, 0, 0), 0);
    }
}
