//! The decision `preempt/budget` gives Slurm, as a pure function of job facts, the
//! period state and the snapshot: the policy core's cost-aware rule
//! ([`policy_core::rebalance`], the simulator's too) plus the drain hook.
//!
//! The background thread computes a [`Period`] (the rule's [`PreemptState`]
//! from every running and pending job, the recent preemptions and the snapshot)
//! when `last_job_update` or the snapshot changed, at most once a second. The
//! callbacks of one scheduling pass all read that one period, so [`Grants`]
//! counts what they already allowed (preemptors and victims in flight): one
//! preemptor's need never takes victims twice over, two preemptors of a side
//! never both take the same excess, and the site cap counts preemptions not
//! yet confirmed.
//!
//! Every job's GPUs count weighted by their type under the snapshot's
//! billing weights (`JobFacts::running_job`), and the capacity is the
//! snapshot's weighted one (`PluginSnapshot::capacity_gpus`): the rule's
//! holdings are in the unit of the entitlements (weighted GPU-hours per
//! window as a rate). Without a snapshot (safe mode) every GPU weighs 1.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;

use budget_protocol::preemption::Preemption;
use budget_protocol::{PluginSnapshot, Policy};
use policy_core::hostlist;
use policy_core::preempt::drain_may_take;
use policy_core::rebalance::{
    self, Allowed, Denied, InFlight, PastPreemption, PreemptState, expected_lost_gpu_secs,
};

use crate::jobs::JobFacts;

/// A rebalancing preemption that happened (a victim the rule allowed, then
/// requeued), kept for one window: the reverse lock, the lost-work budgets and
/// the site cap read them. Kept in memory, and seeded once per load from
/// budgetd's preemption record ([`Past::from_record`], [`Grants::seed`]): a
/// restarted `slurmctld` keeps counting the window's preemptions instead of
/// starting from none.
#[derive(Debug, Clone, PartialEq)]
pub struct Past {
    pub at: i64,
    pub victim: u32,
    pub preemptor_account: String,
    pub preemptor_user: String,
    pub victim_account: String,
    pub victim_user: String,
    /// Raw GPU-seconds; the preemptor side's lost-work budget is charged them
    /// times the billing weight of `gpu_type` (the site cap counts them raw).
    pub lost_gpu_secs: f64,
    /// The victim's GPU type (`None`: untyped, weight 1).
    pub gpu_type: Option<String>,
}

impl Past {
    /// A rebalancing preemption of budgetd's record (reasons `rebalance` and
    /// `over_budget`, what the site cap counts; `None` for the others). The
    /// record names the preemptor's account but not its user (the preemptor
    /// user is left empty, so the rule counts it at the account: the lost-work
    /// budgets of the account and above, reverse locks between accounts), and
    /// its lost work is the whole run (GPUs x run length), an upper bound of
    /// what the rule estimated. Which rows are this load's own is
    /// [`Grants::seed`]'s to tell.
    pub fn from_record(p: &Preemption) -> Option<Past> {
        if !p.reason.is_rebalancing() {
            return None;
        }
        Some(Past {
            at: p.at,
            victim: p.job_id,
            preemptor_account: p.preemptor_account.clone().unwrap_or_default(),
            preemptor_user: String::new(),
            victim_account: p.account.clone(),
            victim_user: p.user.clone(),
            lost_gpu_secs: (p.gpu_hours * 3600.0).max(0.0),
            gpu_type: p.gpu_type.clone(),
        })
    }
}

/// State computed once per period: the snapshot it was computed with, the rule's
/// [`PreemptState`], and the drained nodes.
#[derive(Debug)]
pub struct Period {
    stamp: i64,
    snapshot: Option<Arc<PluginSnapshot>>,
    state: PreemptState,
    drained: HashSet<String>,
}

impl Period {
    /// Compute from every job (running ones hold, pending ones ask) and the
    /// recent preemptions. `stamp` is `last_job_update`.
    pub fn compute(
        stamp: i64,
        snapshot: Option<Arc<PluginSnapshot>>,
        jobs: &[JobFacts],
        history: &[Past],
        now: i64,
    ) -> Self {
        let policy = snapshot
            .as_ref()
            .map(|s| s.policy.rebalance())
            .unwrap_or_default();
        let weights = snapshot.as_ref().map(|s| &s.weights);
        let state = PreemptState::compute(
            snapshot.as_ref().map(|s| &s.fair_share),
            jobs.iter()
                .filter(|j| j.running)
                .map(|j| j.running_job(weights)),
            jobs.iter()
                .filter(|j| !j.running && j.gpus > 0)
                .map(|j| j.pending_job(weights)),
            history.iter().map(|h| PastPreemption {
                at: h.at,
                preemptor_account: &h.preemptor_account,
                preemptor_user: &h.preemptor_user,
                victim_account: &h.victim_account,
                victim_user: &h.victim_user,
                lost_gpu_secs: h.lost_gpu_secs,
                weight: weights.map_or(1.0, |w| w.weight(h.gpu_type.as_deref())),
            }),
            // The cluster's weighted GPUs as budgetd read them from Slurm: a
            // site whose top-level allocations exceed them has its
            // entitlements scaled down, as the simulator computes them
            // (unknown: the allocations).
            snapshot.as_ref().and_then(|s| s.capacity_gpus()),
            policy,
            now,
        );
        let drained = snapshot
            .as_ref()
            .map(|s| s.drains.iter().map(|d| d.node.clone()).collect())
            .unwrap_or_default();
        Period {
            stamp,
            snapshot,
            state,
            drained,
        }
    }

    /// Whether this is still valid for `stamp` and `snapshot` (same `Arc`, or both none).
    pub fn matches(&self, stamp: i64, snapshot: Option<&Arc<PluginSnapshot>>) -> bool {
        self.stamp == stamp
            && match (&self.snapshot, snapshot) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            }
    }

    /// Whether this was computed with a snapshot (else: safe mode).
    pub fn has_snapshot(&self) -> bool {
        self.snapshot.is_some()
    }

    /// The snapshot's fair share, if any.
    pub fn fair_share(&self) -> Option<&policy_core::FairShare> {
        self.snapshot.as_ref().map(|s| &s.fair_share)
    }

    /// The rule's state.
    pub fn state(&self) -> &PreemptState {
        &self.state
    }

    /// Whether `nodes` (a hostlist) touches a drained node. A list that does not
    /// parse (never seen from Slurm) touches none: a drain never takes a job by
    /// guesswork; budgetd's drain worker still requeues it at its window end.
    pub fn on_drained_node(&self, nodes: Option<&str>) -> bool {
        !self.drained.is_empty()
            && nodes
                .and_then(|n| hostlist::expand(n).ok())
                .is_some_and(|hosts| hosts.iter().any(|h| self.drained.contains(h)))
    }
}

/// A victim allowed and not yet requeued.
#[derive(Debug, Clone, PartialEq)]
struct VictimGrant {
    /// Its run when allowed (`restart_cnt`).
    run: u32,
    until: i64,
    past: Past,
}

/// What the callbacks allowed since the period state was computed: the rule's
/// [`InFlight`] plus when each entry expires and what becomes of a victim once
/// Slurm requeued it.
#[derive(Debug, Default)]
pub struct Grants {
    in_flight: InFlight,
    /// Preemptor -> until when its grant holds while it is still pending.
    preemptors: HashMap<u32, i64>,
    victims: HashMap<u32, VictimGrant>,
    /// Rebalancing preemptions of the last window.
    history: VecDeque<Past>,
}

/// How long a grant outlives its decision beyond the victim's GraceTime: a
/// preemptor starts 7-8 s after the requeue on the testbed (GraceTime 10 s,
/// KillWait 5 s, `report.rs`); a grant Slurm did not act on expires by then.
pub const GRANT_SLACK_SECS: i64 = 60;

/// What the background walk saw of a job the grants name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JobNow {
    pub running: bool,
    pub pending: bool,
    pub restart_cnt: u32,
    /// Ended in state PREEMPTED: Slurm cancelled it to preempt it (its
    /// partition's `PreemptMode=CANCEL`, or a job it could not requeue).
    pub ended_preempted: bool,
}

impl Grants {
    /// Records an allowed rebalancing of `victim` by `preemptor`.
    fn grant(
        &mut self,
        snapshot: &PluginSnapshot,
        p: &JobFacts,
        v: &JobFacts,
        lost: f64,
        now: i64,
    ) {
        let (fs, w) = (&snapshot.fair_share, Some(&snapshot.weights));
        let until = now + v.grace.max(0) + GRANT_SLACK_SECS;
        self.in_flight.grant(&p.pending_job(w), fs);
        self.in_flight.take(&v.running_job(w), fs, lost);
        let e = self.preemptors.entry(p.job_id).or_insert(until);
        *e = (*e).max(until);
        self.victims.insert(
            v.job_id,
            VictimGrant {
                run: v.requeues,
                until,
                past: Past {
                    at: now,
                    victim: v.job_id,
                    preemptor_account: p.account.clone(),
                    preemptor_user: p.user.clone(),
                    victim_account: v.account.clone(),
                    victim_user: v.user.clone(),
                    lost_gpu_secs: lost,
                    gpu_type: v.gpu_type.clone(),
                },
            },
        );
    }

    /// Job ids the background walk must look at.
    pub fn watched(&self) -> Vec<u32> {
        self.preemptors
            .keys()
            .chain(self.victims.keys())
            .copied()
            .collect()
    }

    /// Drops grants that are over: a preemptor no longer pending or past its
    /// time; a victim requeued (then a preemption in the history, at `now`),
    /// ended, or past its time while still running (Slurm took another).
    /// History older than `window` is forgotten. Returns the victims that
    /// became history.
    pub fn settle(&mut self, seen: &HashMap<u32, JobNow>, now: i64, window: i64) -> Vec<Past> {
        self.preemptors
            .retain(|id, until| *until >= now && seen.get(id).is_some_and(|j| j.pending));
        let mut done = Vec::new();
        self.victims.retain(|id, g| match seen.get(id) {
            // Requeued, or cancelled by the preemption (CANCEL: the run is lost
            // all the same, and counts against the caps and budgets).
            Some(j) if j.restart_cnt > g.run || (j.pending && !j.running) || j.ended_preempted => {
                let mut past = g.past.clone();
                past.at = now;
                done.push(past);
                false
            }
            Some(j) => j.running && g.until >= now,
            None => false,
        });
        let (p, v) = (&self.preemptors, &self.victims);
        self.in_flight.retain(|id| p.contains_key(&id));
        self.in_flight.retain_victims(|id| v.contains_key(&id));
        self.history.extend(done.iter().cloned());
        while self.history.front().is_some_and(|h| h.at <= now - window) {
            self.history.pop_front();
        }
        done
    }

    /// Adds the rebalancing preemptions of budgetd's record
    /// ([`Past::from_record`]) that this load of the plugin, started at
    /// `loaded_at`, does not hold: those within `window` of `now`, not already
    /// held (same victim and instant: a second seeding adds nothing), and, from
    /// `loaded_at` on, not of a victim this load's history holds from then on
    /// (this load's own: budgetd stamps its report, the history the requeue, a
    /// moment apart). A row of the second the load started in is an earlier
    /// load's unless so (a slurmctld restarted within a second of a
    /// preemption). Oldest first; returns how many were added.
    pub fn seed(&mut self, records: Vec<Past>, loaded_at: i64, now: i64, window: i64) -> usize {
        let held = |h: &Past| {
            self.history.iter().any(|k| {
                k.victim == h.victim && (k.at == h.at || (h.at >= loaded_at && k.at >= loaded_at))
            })
        };
        let earlier: Vec<Past> = records
            .into_iter()
            .filter(|h| h.at > now - window && h.at <= now && !held(h))
            .collect();
        let n = earlier.len();
        self.history.extend(earlier);
        // Oldest first, as `settle` prunes it.
        self.history.make_contiguous().sort_by_key(|h| h.at);
        n
    }

    /// The recent rebalancing preemptions, oldest first.
    pub fn history(&self) -> Vec<Past> {
        self.history.iter().cloned().collect()
    }

    /// Whether nothing is in flight.
    pub fn idle(&self) -> bool {
        self.preemptors.is_empty() && self.victims.is_empty()
    }
}

/// May `preemptor` take `victim` now? `None` period = safe mode with no drains.
/// An allowed rebalancing is recorded in `grants`.
pub fn decide(
    period: Option<&Period>,
    grants: &mut Grants,
    preemptor: &JobFacts,
    victim: &JobFacts,
    now: i64,
) -> Result<Option<Allowed>, Denied> {
    if !victim.running {
        return Err(Denied::Protected { until: i64::MAX });
    }
    let safe = PreemptState::compute(None, [], [], [], None, Default::default(), now);
    let (state, snap) = match period.and_then(|p| p.snapshot.as_ref().map(|s| (p, s))) {
        Some((p, s)) => (&p.state, Some(s.as_ref())),
        None => (&safe, None),
    };
    let (fs, w) = (snap.map(|s| &s.fair_share), snap.map(|s| &s.weights));
    let (pv, vv) = (preemptor.pending_job(w), victim.running_job(w));
    let d = rebalance::decide(state, fs, &grants.in_flight, &pv, &vv, now);
    match d {
        Ok(a) => {
            if let (Allowed::Rebalance(r), Some(s)) = (&a, snap) {
                grants.grant(s, preemptor, victim, r.victim_lost_gpu_secs, now);
            }
            Ok(Some(a))
        }
        // A maintenance drain may take any job past its window (free preemptors never
        // take anything), except one of a PreemptMode=OFF partition: the site said
        // never, so the drain waits for it to end, as budgetd's drain worker does.
        Err(e)
            if !matches!(
                e,
                Denied::Protected { .. }
                    | Denied::PreemptorFree
                    | Denied::PartitionPreemptOff { .. }
            ) && period.is_some_and(|p| p.on_drained_node(victim.nodes.as_deref()))
                && drain_may_take(&victim.view(), now) =>
        {
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// Slurm's victim order ([`rebalance::victim_priority`]): free tier first,
/// then least work lost.
pub fn victim_priority(snapshot: Option<&PluginSnapshot>, v: &JobFacts, now: i64) -> u32 {
    rebalance::victim_priority(
        snapshot.map(|s| &s.fair_share),
        &v.running_job(snapshot.map(|s| &s.weights)),
        now,
    )
}

/// The work a victim would lose now (raw GPU-seconds, as the record states it).
pub fn lost_now(v: &JobFacts, now: i64) -> f64 {
    expected_lost_gpu_secs(&v.running_job(None), now)
}

/// The snapshot's policy, or the default in safe mode.
pub fn policy_of(snapshot: Option<&PluginSnapshot>) -> Policy {
    snapshot.map(|s| s.policy.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use budget_protocol::DrainSpec;
    use policy_core::contract::Contract;
    use policy_core::tree::{AccountSpec, MemberSpec, TreeSpec};
    use policy_core::{FairShare, GpuWeights};

    const W: i64 = 7 * 86_400;

    /// Two teams entitled to 4 GPUs each; usage in GPU-hours.
    fn snapshot(
        a_used: f64,
        b_used: f64,
        drains: Vec<DrainSpec>,
        policy: Policy,
    ) -> Arc<PluginSnapshot> {
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: ["teama", "teamb"]
                .iter()
                .map(|n| AccountSpec {
                    name: n.to_string(),
                    parent: None,
                    allocation_gpu_hours: 4.0 * 168.0,
                    overcommit: false,
                })
                .collect(),
            members: vec![
                MemberSpec {
                    user: "alice".into(),
                    account: "teama".into(),
                    allocation_gpu_hours: None,
                },
                MemberSpec {
                    user: "bob".into(),
                    account: "teamb".into(),
                    allocation_gpu_hours: None,
                },
            ],
        };
        let usage = [
            (("teama".to_string(), "alice".to_string()), a_used * 3600.0),
            (("teamb".to_string(), "bob".to_string()), b_used * 3600.0),
        ]
        .into_iter()
        .collect();
        Arc::new(PluginSnapshot {
            version: "v".into(),
            generated_at: 0,
            policy,
            weights: GpuWeights::default(),
            fair_share: FairShare::compute(&tree, &usage, 0, W),
            drains,
            cluster_gpus: None,
            cluster_weighted_gpus: None,
        })
    }

    fn job(id: u32, account: &str, user: &str, start: i64, running: bool) -> JobFacts {
        JobFacts {
            job_id: id,
            account: account.into(),
            user: user.into(),
            contract: Contract {
                min_runtime: 20,
                free_tier: false,
            },
            run_start: start,
            gpus: 4,
            gpu_type: None,
            running,
            nodes: Some("gpu[1-2]".into()),
            time_limit: Some(48 * 3600),
            requeues: 0,
            checkpoint: None,
            grace: 0,
            partition_tier: None,
            partition_preempt_off: None,
            qos: None,
        }
    }

    /// teamb runs two 4-GPU jobs (8 of its 4 entitled), teama waits with two.
    fn starved() -> Vec<JobFacts> {
        vec![
            job(1, "teamb", "bob", 1000, true),
            job(2, "teamb", "bob", 1000, true),
            job(11, "teama", "alice", 0, false),
            job(12, "teama", "alice", 0, false),
        ]
    }

    #[test]
    fn one_side_excess_is_taken_once_per_pass() {
        let s = snapshot(10.0, 500.0, vec![], Policy::default());
        let jobs = starved();
        let h = Period::compute(7, Some(Arc::clone(&s)), &jobs, &[], 2000);
        let mut g = Grants::default();
        let (v1, v2, p1, p2) = (&jobs[0], &jobs[1], &jobs[2], &jobs[3]);
        assert!(matches!(
            decide(Some(&h), &mut g, p1, v1, 1010),
            Err(Denied::Protected { until: 1020 })
        ));
        let a = decide(Some(&h), &mut g, p1, v1, 2000).expect("allowed");
        assert!(matches!(a, Some(Allowed::Rebalance(_))), "{a:?}");
        // Asked again in the same pass: the same victim stays allowed.
        assert!(decide(Some(&h), &mut g, p1, v1, 2000).is_ok());
        // The holdings still say teamb holds 8, but v1's 4 are on their way
        // out: taking v2 too would leave teamb below its entitlement.
        assert!(matches!(
            decide(Some(&h), &mut g, p1, v2, 2000),
            Err(Denied::VictimSideWithinEntitlement { .. })
        ));
        // A second preemptor of teama: the deficit is already granted to p1.
        assert!(matches!(
            decide(Some(&h), &mut g, p2, v1, 2000),
            Err(Denied::TurnoverSuffices { in_flight: 4.0, .. })
        ));
        // Without the grants (a fresh pass) both would have been allowed.
        let mut fresh = Grants::default();
        assert!(decide(Some(&h), &mut fresh, p1, v2, 2000).is_ok());
        // Reverse: never.
        let v3 = job(3, "teama", "alice", 0, true);
        let p3 = job(4, "teamb", "bob", 0, false);
        assert!(decide(Some(&h), &mut g, &p3, &v3, 5000).is_err());
        // Pending "victims" are never taken.
        assert!(
            decide(
                Some(&h),
                &mut g,
                p1,
                &job(5, "teamb", "bob", 0, false),
                5000
            )
            .is_err()
        );
        assert!(h.matches(7, Some(&s)) && !h.matches(8, Some(&s)) && !h.matches(7, None));
    }

    #[test]
    fn the_partition_order_wins_over_the_budgets_but_not_over_the_contract() {
        // teama is under budget, teamb far over: the budgets let teama take
        // teamb's jobs and never the reverse.
        let s = snapshot(10.0, 500.0, vec![], Policy::default());
        let mut jobs = starved();
        let mut a_run = job(3, "teama", "alice", 1000, true);
        let mut b_wait = job(4, "teamb", "bob", 0, false);
        a_run.partition_tier = Some(1);
        b_wait.partition_tier = Some(2);
        jobs.extend([a_run.clone(), b_wait.clone()]);
        let h = Period::compute(7, Some(Arc::clone(&s)), &jobs, &[], 2000);
        let mut g = Grants::default();
        // Inside the victim's window: the contract wins.
        assert!(matches!(
            decide(Some(&h), &mut g, &b_wait, &a_run, 1010),
            Err(Denied::Protected { .. })
        ));
        // Past it: the higher tier takes it, though teamb is over budget;
        // the grants (rebalancing's) are untouched.
        assert_eq!(
            decide(Some(&h), &mut g, &b_wait, &a_run, 2000),
            Ok(Some(Allowed::HigherPartitionTier {
                preemptor_tier: 2,
                victim_tier: 1
            }))
        );
        assert!(g.idle());
        // In safe mode too.
        assert!(matches!(
            decide(None, &mut g, &b_wait, &a_run, 2000),
            Ok(Some(Allowed::HigherPartitionTier { .. }))
        ));
        // A lower tier never takes a higher one, whatever the budgets say
        // (teama holding nothing: the budgets alone would take teamb's job).
        let jobs = starved();
        let h = Period::compute(7, Some(s), &jobs, &[], 2000);
        let mut a_wait = jobs[2].clone();
        let mut b_run = jobs[0].clone();
        assert!(decide(Some(&h), &mut Grants::default(), &a_wait, &b_run, 2000).is_ok());
        a_wait.partition_tier = Some(1);
        b_run.partition_tier = Some(2);
        assert_eq!(
            decide(Some(&h), &mut g, &a_wait, &b_run, 2000),
            Err(Denied::LowerPartitionTier {
                preemptor_tier: 1,
                victim_tier: 2
            })
        );
    }

    #[test]
    fn the_qos_order_wins_over_the_budgets_but_not_over_the_contract() {
        use crate::jobs::QosFacts;
        // normal (id 1) lists scavenger (id 2) in its Preempt=.
        let normal = QosFacts {
            id: 1,
            name: "normal".into(),
            preempts: vec![1 << 2],
        };
        let scavenger = QosFacts {
            id: 2,
            name: "scavenger".into(),
            preempts: vec![],
        };
        // teama is under budget, teamb far over: the budgets let teama take
        // teamb's jobs and never the reverse.
        let s = snapshot(10.0, 500.0, vec![], Policy::default());
        let mut jobs = starved();
        let mut a_run = job(3, "teama", "alice", 1000, true);
        let mut b_wait = job(4, "teamb", "bob", 0, false);
        a_run.qos = Some(scavenger.clone());
        b_wait.qos = Some(normal.clone());
        jobs.extend([a_run.clone(), b_wait.clone()]);
        let h = Period::compute(7, Some(Arc::clone(&s)), &jobs, &[], 2000);
        let mut g = Grants::default();
        // Inside the victim's window: the contract wins.
        assert!(matches!(
            decide(Some(&h), &mut g, &b_wait, &a_run, 1010),
            Err(Denied::Protected { .. })
        ));
        // Past it: normal takes scavenger, though teamb is over budget; the
        // grants (rebalancing's) are untouched; recorded as `qos`.
        let taken = decide(Some(&h), &mut g, &b_wait, &a_run, 2000);
        assert_eq!(
            taken,
            Ok(Some(Allowed::QosPreemptList {
                preemptor_qos: "normal".into(),
                victim_qos: "scavenger".into()
            }))
        );
        assert!(g.idle());
        // In safe mode too.
        assert!(matches!(
            decide(None, &mut g, &b_wait, &a_run, 2000),
            Ok(Some(Allowed::QosPreemptList { .. }))
        ));
        // A scavenger job never takes a normal one, whatever the budgets say
        // (teama holding nothing: the budgets alone would take teamb's job).
        let jobs = starved();
        let h = Period::compute(7, Some(s), &jobs, &[], 2000);
        let mut a_wait = jobs[2].clone();
        let mut b_run = jobs[0].clone();
        assert!(decide(Some(&h), &mut Grants::default(), &a_wait, &b_run, 2000).is_ok());
        a_wait.qos = Some(scavenger);
        b_run.qos = Some(normal.clone());
        assert_eq!(
            decide(Some(&h), &mut g, &a_wait, &b_run, 2000),
            Err(Denied::LowerQos {
                preemptor_qos: "scavenger".into(),
                victim_qos: "normal".into()
            })
        );
        // The same QOS: the budgets, as without QOS.
        a_wait.qos = Some(normal);
        assert!(matches!(
            decide(Some(&h), &mut Grants::default(), &a_wait, &b_run, 2000),
            Ok(Some(Allowed::Rebalance(_)))
        ));
    }

    #[test]
    fn turnover_at_time_limits_means_no_preemption() {
        let s = snapshot(10.0, 500.0, vec![], Policy::default());
        let mut jobs = starved();
        // teamb's runs end within ten minutes at the latest.
        jobs[0].time_limit = Some(1600);
        jobs[1].time_limit = Some(1600);
        let h = Period::compute(7, Some(s), &jobs, &[], 2000);
        let mut g = Grants::default();
        // Preempting now delivers teamb's GPUs 600 s sooner, less than twice
        // what the victim loses: not worth it.
        match decide(Some(&h), &mut g, &jobs[2], &jobs[0], 2000) {
            Err(Denied::NotWorthIt {
                benefit_gpu_secs,
                cost_gpu_secs,
                factor,
                ..
            }) => {
                let gpus = f64::from(jobs[0].gpus);
                assert!((benefit_gpu_secs - gpus * 600.0).abs() < 1e-6);
                assert!(benefit_gpu_secs < factor * cost_gpu_secs);
            }
            other => panic!("{other:?}"),
        }
        assert!(g.idle());
        // The forecast still names when turnover frees them.
        let fs = h.fair_share().expect("snapshot");
        let a = fs.account("teama").expect("teama");
        assert_eq!(h.state().releases(fs, a).first().map(|r| r.at), Some(2600));
    }

    #[test]
    fn requeued_victims_become_history_reverse_lock_and_site_cap() {
        let policy = Policy {
            site_max_preemptions: Some(1),
            ..Policy::default()
        };
        let s = snapshot(10.0, 500.0, vec![], policy);
        let jobs = starved();
        let h = Period::compute(7, Some(Arc::clone(&s)), &jobs, &[], 2000);
        let mut g = Grants::default();
        assert!(decide(Some(&h), &mut g, &jobs[2], &jobs[0], 2000).is_ok());
        let mut seen = HashMap::new();
        let now = |running, pending, restart_cnt| JobNow {
            running,
            pending,
            restart_cnt,
            ended_preempted: false,
        };
        seen.insert(1, now(false, true, 1));
        seen.insert(11, now(false, true, 0));
        let done = g.settle(&seen, 2010, W);
        assert_eq!(done.len(), 1);
        assert_eq!((done[0].victim, done[0].at), (1, 2010));
        assert_eq!(done[0].preemptor_account, "teama");
        assert!(done[0].lost_gpu_secs > 0.0);
        // The preemptor still waits: its grant holds until it starts.
        assert_eq!(g.watched(), vec![11]);
        let h2 = Period::compute(8, Some(s), &jobs, &g.history(), 2020);
        // The site cap (1 per window) is reached.
        let mut fresh = Grants::default();
        assert!(matches!(
            decide(Some(&h2), &mut fresh, &jobs[3], &jobs[1], 2020),
            Err(Denied::SiteCap { preemptions: 1, .. })
        ));
        // Once the preemptor runs, its grant is gone; history stays a window.
        seen.insert(11, now(true, false, 0));
        assert!(g.settle(&seen, 2030, W).is_empty() && g.idle());
        assert_eq!(g.history().len(), 1);
        g.settle(&seen, 2010 + W, W);
        assert!(g.history().is_empty());
        // A victim Slurm cancelled to preempt it (PreemptMode=CANCEL) counts as
        // one requeued does; one that merely ended (completed) does not.
        let granted = || {
            let mut g = Grants::default();
            assert!(decide(Some(&h), &mut g, &jobs[2], &jobs[0], 2000).is_ok());
            g
        };
        let ended = |ended_preempted| {
            HashMap::from([(
                1,
                JobNow {
                    running: false,
                    pending: false,
                    restart_cnt: 0,
                    ended_preempted,
                },
            )])
        };
        assert!(granted().settle(&ended(false), 2030, W).is_empty());
        let done = granted().settle(&ended(true), 2030, W);
        assert_eq!(done.iter().map(|d| d.victim).collect::<Vec<_>>(), vec![1]);
    }

    use budget_protocol::preemption::PreemptionReason;

    /// A row of budgetd's preemption record.
    fn recorded(
        job_id: u32,
        reason: PreemptionReason,
        at: i64,
        preemptor: Option<&str>,
    ) -> Preemption {
        Preemption {
            job_id,
            run: 0,
            account: "teamb".into(),
            user: "bob".into(),
            preemptor: Some(99),
            preemptor_account: preemptor.map(str::to_string),
            reason,
            at,
            gpus: 4,
            run_start: Some(at - 1800),
            gpu_hours: 2.0,
            source: "plugin".into(),
            gpu_type: None,
        }
    }

    #[test]
    fn a_restarted_plugin_counts_the_recorded_preemptions_of_the_window() {
        let loaded_at = 5000;
        let rows = [
            recorded(1, PreemptionReason::Rebalance, 4000, Some("teama")),
            recorded(2, PreemptionReason::OverBudget, 4500, None),
            // Not what the rule counts.
            recorded(3, PreemptionReason::Drain, 4600, Some("teama")),
            recorded(4, PreemptionReason::FreeTier, 4700, Some("teama")),
            // An earlier load's, in the second this load started.
            recorded(5, PreemptionReason::Rebalance, loaded_at, Some("teama")),
            // This load's own: in memory since 5140, reported at 5150.
            recorded(6, PreemptionReason::Rebalance, 5150, Some("teama")),
        ];
        let records: Vec<Past> = rows.iter().filter_map(Past::from_record).collect();
        assert_eq!(records.len(), 4);
        let first = &records[0];
        assert_eq!(
            (first.victim, first.at, first.preemptor_account.as_str()),
            (1, 4000, "teama")
        );
        assert_eq!(
            (first.victim_account.as_str(), first.victim_user.as_str()),
            ("teamb", "bob")
        );
        assert_eq!(first.preemptor_user, "");
        assert!((first.lost_gpu_secs - 7200.0).abs() < 1e-9);
        assert_eq!(records[1].preemptor_account, "");

        let mut g = Grants::default();
        // This load's own preemptions are already in memory: job 1 taken
        // again (both count), and job 6.
        g.history.push_back(Past {
            at: 5100,
            ..first.clone()
        });
        g.history.push_back(Past {
            at: 5140,
            victim: 6,
            ..first.clone()
        });
        // Seeding twice adds nothing the second time; a row older than the
        // window is dropped.
        let mut old = first.clone();
        old.at = 5200 - W;
        let mut with_old = records.clone();
        with_old.push(old);
        assert_eq!(g.seed(with_old, loaded_at, 5200, W), 3);
        assert_eq!(g.seed(records.clone(), loaded_at, 5200, W), 0);
        let at: Vec<i64> = g.history().iter().map(|h| h.at).collect();
        assert_eq!(at, vec![4000, 4500, 5000, 5100, 5140]);

        // The site cap counts the seeded ones: with a cap of 5, a sixth
        // rebalancing is refused although this load made only two.
        let policy = Policy {
            site_max_preemptions: Some(5),
            ..Policy::default()
        };
        let s = snapshot(10.0, 500.0, vec![], policy);
        let jobs = starved();
        let h = Period::compute(7, Some(s), &jobs, &g.history(), 5200);
        assert!(matches!(
            decide(Some(&h), &mut Grants::default(), &jobs[2], &jobs[0], 5200),
            Err(Denied::SiteCap { preemptions: 5, .. })
        ));
        // And the reverse lock between the accounts holds on the seeded rows
        // alone: teamb may not take back from teama what teama took from it
        // before the restart (the row without a preemptor account locks nothing).
        let (p, v) = (
            job(21, "teamb", "bob", 0, false),
            job(22, "teama", "alice", 0, true),
        );
        let s = snapshot(500.0, 10.0, vec![], Policy::default());
        let v2 = job(23, "teama", "alice", 0, true);
        let seeded: Vec<Past> = g
            .history()
            .into_iter()
            .filter(|h| h.at < loaded_at)
            .collect();
        let h = Period::compute(8, Some(s), &[p.clone(), v.clone(), v2], &seeded, 5200);
        let d = decide(Some(&h), &mut Grants::default(), &p, &v, 5200);
        assert!(
            matches!(d, Err(Denied::RecentReverse { at: 4000 })),
            "{d:?}"
        );
    }

    #[test]
    fn recorded_lost_work_is_charged_by_the_weight_of_its_gpu_type() {
        // budgetd's row of a B300 run (2 GPU-h) and this load's own preemption
        // of one: teama's lost-work budget is charged 2 x 2 GPU-h when B300
        // weighs 2, and 2 + 2 raw GPU-h count toward the site cap either way.
        let mut row = recorded(1, PreemptionReason::Rebalance, 1500, Some("teama"));
        row.gpu_type = Some("b300".into());
        let seeded = Past::from_record(&row).expect("a rebalancing row");
        assert_eq!(seeded.gpu_type.as_deref(), Some("b300"));
        let mut v = job(3, "teamb", "bob", 1000, true);
        v.gpu_type = Some("B300".into());
        let mut g = Grants::default();
        let s = snapshot(10.0, 500.0, vec![], Policy::default());
        g.grant(&s, &job(11, "teama", "alice", 0, false), &v, 7200.0, 1900);
        let own = g.victims.get(&3).map(|x| x.past.gpu_type.clone());
        assert_eq!(own, Some(Some("B300".into())));
        let history = vec![
            seeded.clone(),
            Past {
                victim: 3,
                at: 1900,
                gpu_type: Some("B300".into()),
                ..seeded
            },
        ];
        let teama = s.fair_share.account("teama").expect("teama");
        let spent = |snap: &Arc<PluginSnapshot>| {
            let h = Period::compute(7, Some(Arc::clone(snap)), &starved(), &history, 2000);
            let side = h.state.side(&snap.fair_share, teama).expect("side");
            (side.lost_spent, h.state.site_totals().1)
        };
        assert_eq!(spent(&s), (4.0 * 3600.0, 4.0 * 3600.0));
        let mut weighted = (*s).clone();
        weighted.weights.set("b300", 2.0).expect("weight");
        assert_eq!(spent(&Arc::new(weighted)), (8.0 * 3600.0, 4.0 * 3600.0));
    }

    #[test]
    fn safe_mode_and_free_tier() {
        let mut g = Grants::default();
        let mut free = job(1, "teamb", "bob", 1000, true);
        free.contract = Contract {
            min_runtime: 0,
            free_tier: true,
        };
        let budgeted = job(2, "teamb", "bob", 0, true);
        let p = job(3, "teama", "alice", 0, false);
        assert_eq!(
            decide(None, &mut g, &p, &free, 1000),
            Ok(Some(Allowed::VictimFreeTier))
        );
        assert_eq!(
            decide(None, &mut g, &p, &budgeted, 5000),
            Err(Denied::SafeMode)
        );
        let mut fp = job(4, "teama", "alice", 0, false);
        fp.contract.free_tier = true;
        assert_eq!(
            decide(None, &mut g, &fp, &free, 5000),
            Err(Denied::PreemptorFree)
        );
        assert!(g.idle());
    }

    #[test]
    fn drains_take_any_job_past_its_window() {
        let drain = DrainSpec {
            node: "gpu2".into(),
            reason: "fan".into(),
            since: 0,
        };
        let s = snapshot(10.0, 10.0, vec![drain], Policy::default());
        let victim = job(1, "teama", "alice", 1000, true);
        let p = job(2, "teamb", "bob", 0, false);
        let h = Period::compute(1, Some(s), &[victim.clone(), p.clone()], &[], 1000);
        let mut g = Grants::default();
        assert!(matches!(
            decide(Some(&h), &mut g, &p, &victim, 1010),
            Err(Denied::Protected { .. })
        ));
        assert_eq!(decide(Some(&h), &mut g, &p, &victim, 1020), Ok(None));
        let mut elsewhere = victim.clone();
        elsewhere.nodes = Some("gpu3".into());
        assert!(decide(Some(&h), &mut g, &p, &elsewhere, 1020).is_err());
        let mut unparsable = victim.clone();
        unparsable.nodes = Some("gpu[2".into());
        assert!(decide(Some(&h), &mut g, &p, &unparsable, 1020).is_err());
        // A job of a PreemptMode=OFF partition: the drain waits for it to end
        // (the site's "never preempt" wins over maintenance too).
        let mut frozen = victim.clone();
        frozen.partition_preempt_off = Some("frozen".into());
        assert_eq!(
            decide(Some(&h), &mut g, &p, &frozen, 5000),
            Err(Denied::PartitionPreemptOff {
                partition: "frozen".into()
            })
        );
    }

    #[test]
    fn an_overcommitted_site_scales_entitlements_to_the_snapshots_cluster() {
        // Allocations of 4 + 4 GPUs on a cluster of 4: each team is entitled to 2.
        // teamb holds 4 (two 2-GPU jobs), teama waits with one of 2.
        let mut jobs = vec![
            job(1, "teamb", "bob", 1000, true),
            job(2, "teamb", "bob", 1000, true),
            job(11, "teama", "alice", 0, false),
        ];
        for j in &mut jobs {
            j.gpus = 2;
        }
        let unknown = snapshot(10.0, 500.0, vec![], Policy::default());
        let mut known = (*unknown).clone();
        known.cluster_gpus = Some(4);
        let known = Arc::new(known);
        let teamb = unknown.fair_share.account("teamb").expect("teamb");
        let entitled = |s: &Arc<PluginSnapshot>| {
            let h = Period::compute(7, Some(Arc::clone(s)), &jobs, &[], 2000);
            let side = h.state.side(&s.fair_share, teamb).expect("side");
            (side.entitled, side.held)
        };
        // Without the count (budgetd that has not read Slurm, older budgetd):
        // the allocations as they are; teamb is within its 4.
        assert_eq!(entitled(&unknown), (4.0, 4.0));
        let h = Period::compute(7, Some(Arc::clone(&unknown)), &jobs, &[], 2000);
        assert!(matches!(
            decide(Some(&h), &mut Grants::default(), &jobs[2], &jobs[0], 2000),
            Err(Denied::VictimSideWithinEntitlement { .. })
        ));
        // With it: 2 each, as the simulator computes them; teamb's excess of 2
        // may be taken for teama.
        assert_eq!(entitled(&known), (2.0, 4.0));
        let h = Period::compute(7, Some(Arc::clone(&known)), &jobs, &[], 2000);
        let a = decide(Some(&h), &mut Grants::default(), &jobs[2], &jobs[0], 2000);
        assert!(matches!(a, Ok(Some(Allowed::Rebalance(_)))), "{a:?}");
        // A count of 0 is no count (never entitles nobody).
        let mut zero = (*unknown).clone();
        zero.cluster_gpus = Some(0);
        assert_eq!(entitled(&Arc::new(zero)), (4.0, 4.0));
    }

    #[test]
    fn typed_gpus_count_with_the_snapshots_weights_and_the_weighted_capacity() {
        // teamb runs three 1-GPU jobs on B300 (weight 2 in the snapshot): 6
        // weighted GPUs against its entitlement of 4; teama waits with 2.
        let mut jobs = vec![
            job(1, "teamb", "bob", 1000, true),
            job(2, "teamb", "bob", 1000, true),
            job(3, "teamb", "bob", 1000, true),
            job(11, "teama", "alice", 0, false),
        ];
        for j in &mut jobs {
            j.gpus = if j.running { 1 } else { 2 };
            j.gpu_type = j.running.then(|| "B300".to_string());
        }
        let uniform = snapshot(10.0, 500.0, vec![], Policy::default());
        let mut weighted = (*uniform).clone();
        weighted.weights.set("b300", 2.0).expect("weight");
        let weighted = Arc::new(weighted);
        let teamb = uniform.fair_share.account("teamb").expect("teamb");
        let side = |s: &Arc<PluginSnapshot>| {
            let h = Period::compute(7, Some(Arc::clone(s)), &jobs, &[], 2000);
            let side = h.state.side(&s.fair_share, teamb).expect("side");
            (side.entitled, side.held)
        };
        assert_eq!(side(&weighted), (4.0, 6.0));
        // One 1-GPU job (2 weighted) may go: teamb keeps its 4.
        let h = Period::compute(7, Some(Arc::clone(&weighted)), &jobs, &[], 2000);
        let mut g = Grants::default();
        let a = decide(Some(&h), &mut g, &jobs[3], &jobs[0], 2000);
        assert!(
            matches!(&a, Ok(Some(Allowed::Rebalance(r))) if r.victim_side_held == 6.0 && r.weighted),
            "{a:?}"
        );
        // The grant counts it weighted: a second would leave teamb at 2.
        assert!(matches!(
            decide(Some(&h), &mut g, &jobs[3], &jobs[1], 2000),
            Err(Denied::VictimSideWithinEntitlement { .. })
        ));
        // Counted raw (uniform weights) teamb's 3 GPUs are within its 4.
        assert_eq!(side(&uniform), (4.0, 3.0));
        let h = Period::compute(7, Some(Arc::clone(&uniform)), &jobs, &[], 2000);
        assert!(matches!(
            decide(Some(&h), &mut Grants::default(), &jobs[3], &jobs[0], 2000),
            Err(Denied::VictimSideWithinEntitlement { .. })
        ));
        // The weighted capacity wins over the raw count: 4 GPUs weighing 8
        // entitle both teams to their 4 (the raw 4 would scale them to 2).
        let mut both = (*weighted).clone();
        both.cluster_gpus = Some(4);
        assert_eq!(side(&Arc::new(both.clone())).0, 2.0);
        both.cluster_weighted_gpus = Some(8.0);
        assert_eq!(side(&Arc::new(both)).0, 4.0);
    }
}
