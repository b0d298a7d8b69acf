//! The cost-aware preemption rule (docs/design.md §6): a preemption between budgeted
//! teams happens only when it buys a team entitlement that natural turnover will
//! not deliver soon enough, and it takes the victims that lose the least work.
//!
//! [`crate::preempt`] says when a preemption is *allowed* (the old rule, kept as
//! `budget-v1` in the simulator). Applied as soon as allowed it thrashes under
//! sustained overload: teams hover at r = 1 as usage slides through the window,
//! each crossing flips who is "budgeted", and multi-hour runs are requeued back
//! and forth (docs/simulator-results.md). This rule decides whether one should
//! *happen*, from what `preempt/budget` really knows inside `slurmctld`.
//!
//! # Two halves: the period state and the callback
//! Slurm asks `preemptable(victim, preemptor)` for every running candidate of
//! every pending job it tries to place, under the job lock, many times a pass:
//! that callback must be O(1)-ish and do no I/O. Everything global is computed
//! once per period by the plugin's background thread into a [`PreemptState`]
//! ([`PreemptState::compute`]), from:
//! - the fair-share snapshot ([`FairShare`]): tree, allocations, window ratios, tiers;
//! - every running job ([`RunningJob`]: size and the billing weight of its GPU
//!   type, run start, **time limit**, requeue count, declared min_runtime and
//!   checkpoint interval, partition GraceTime) and every pending job
//!   ([`PendingJob`]: size and weight), never a job's true duration;
//! - the recent preemptions ([`PastPreemption`], from the preemption record);
//! - the cluster's weighted GPU capacity and the time.
//!
//! The callback ([`decide`]) reads that state, a small [`InFlight`] list of
//! preemptors already granted victims and not yet running, and the two jobs.
//!
//! # Wiring in `preempt/budget` (done: `slurm-plugin/preempt/src/rule.rs`)
//! - Background thread, each period (when `last_job_update` or the snapshot
//!   changed, as `Holdings` today): one walk under the job read lock collecting
//!   every running job as a [`RunningJob`] (`time_limit` minutes x 60, `None` for
//!   INFINITE; `run_start`; `restart_cnt`; the contract's min_runtime and declared
//!   checkpoint; the partition's `grace_time`) and every pending job as a
//!   [`PendingJob`]; the confirmed preemptions of the last window as
//!   [`PastPreemption`]s (the plugin's own record, or budgetd's); the cluster's GPU
//!   count; then [`PreemptState::compute`] outside the lock, swapped in behind an
//!   `Arc`. The same thread drops [`InFlight`] grants ([`InFlight::retain`]) whose
//!   preemptor is running, no longer pending, or had no victim requeued for it by
//!   then (the preemption record in `report.rs` knows): a preemptor whose victims
//!   are in their GraceTime holds nothing yet, so its grant must outlive one
//!   state, but one Slurm did not preempt for must not block its side. (The
//!   simulator starts a preemptor with its victims' exit, so there a grant lives
//!   for one pass.)
//! - `preempt_p_preemptable(victim, preemptor)`: build the two views from the job
//!   records (no walk of `job_list`), [`decide`] with the current state and the
//!   `InFlight` list, and [`InFlight::grant`] the preemptor when the answer is a
//!   rebalance; drains stay `drain_may_take` as today.
//! - `PREEMPT_DATA_PRIO` / `preempt_p_get_prio`: [`victim_priority`].
//! - `priority/budget`: the same state (its own thread computes one) ranks pending
//!   jobs with [`PreemptState::priority_place`] instead of `FairShare::place`.
//! - `budgetctl why`: [`Denied::TurnoverSuffices`] carries the first release
//!   ([`PreemptState::releases`] lists them with job ids), [`Rebalance`] the
//!   victim's lost work; [`describe`] words an allowed one. Knobs:
//!   [`RebalancePolicy::set`] takes every knob as `key=value` (the simulator's
//!   `--rule`); a site sets some of them with `budgetctl policy set`
//!   (`protocol::Policy::rebalance` maps them), the others are constants.
//!
//! # Weighted GPUs
//! Allocations are weighted GPU-hours (docs/design.md §2.3: a B300 hour may
//! cost 2.2 H100 hours), so a side's entitlement is in *weighted* GPUs, and so
//! is every amount compared with it: holdings and demand ([`SideState`]), the
//! victim's size, the deficit, grants and victims in flight ([`InFlight`]),
//! the forecast's releases, the share order (`held / entitled`) and the
//! projected tier (`held x window / allocation`). A job counts as its GPUs x
//! the billing weight of its GPU type ([`weighted_gpus`], the one formula),
//! and the cluster's capacity as each node's GPUs x their type's weight. Raw
//! GPU counts stay what Slurm places; with every weight 1 (a uniform site, the
//! simulator) the amounts are the raw counts and nothing changes. Lost work is
//! estimated in raw GPU-seconds ([`expected_lost_gpu_secs`], the preemption
//! record's GPU-hours) and the site cap counts it so (an admin's GPU-hours);
//! a side's lost-work budget is a fraction of its (weighted) entitled
//! GPU-seconds, so what it is charged is weighted too: the work a victim loses
//! times the billing weight of its GPUs ([`weighted_lost_gpu_secs`]), for the
//! window's past preemptions ([`PastPreemption::weight`]) as for the victim
//! at hand (destroying a B300 hour costs the budget 2.2 H100 hours).
//!
//! # The rule
//! Entitled GPUs of a tree node: its allocation as a weighted GPU rate
//! (allocation per window / window length), scaled down when siblings'
//! allocations exceed their parent's (or the top level exceeds the cluster's
//! weighted capacity). A running job R may be
//! preempted by a pending job P when R is past its protected window and either
//! R is free tier and P is not (unchanged, immediate), or, with P budgeted and
//! their paths splitting below node `parent` into sides `ps` (P's) and `vs` (R's):
//! 0. **Between accounts**: `ps` and `vs` are both accounts (sibling teams or
//!    top-level budget nodes), never a user: GPUs move between accounts only,
//!    never from one user of an account to another or to a sub-account of it
//!    ([`Denied::WithinAccount`]; docs/design.md §6.1).
//! 1. **Rank agreement**: `ratio(ps) < ratio(vs) - hysteresis` (the priority
//!    order agrees that P's side comes first; as in the old rule).
//! 2. **Victim side above its entitlement**: R's side still holds at least its
//!    entitled GPUs without R (`held(vs) - weighted(R) >= entitled(vs)`), or R's path
//!    below the split is over budget by more than a band
//!    (`ratio >= 1 + over_budget_band`: the over-budget clause, with hysteresis).
//! 3. **What it buys outweighs what it destroys**: P's side is short of
//!    `min(entitled, demand)` by more than the GPUs already granted to its other
//!    preemptors in this period, and the entitled GPU-seconds R's GPUs deliver
//!    to it sooner than turnover would (the GPUs of siblings above their
//!    entitlement come free at their *time limits*; the gain is counted over
//!    the next window, for the part of the deficit not yet granted) are at
//!    least `benefit_factor` (2) times R's cost: the work it loses (rule 5) plus
//!    `restart_cost` (600 s) of its GPUs for the requeue and restart
//!    ([`Denied::NotWorthIt`]). So a run that just left its window is taken
//!    when turnover is hours away, and one that has run long, or whose limit
//!    is near, is left to finish. Without a factor (`benefit_factor=none`,
//!    the ablation) the older test applies: the forecast shortfall must exceed
//!    `shortfall_tolerance x entitled x window`, and the side may take the
//!    smallest number of GPUs (`uncovered`) that brings it within tolerance.
//! 4. **No reversal**: R's side has not preempted P's side within the last
//!    window (`reverse_lock`).
//! 5. **Bounded cost**: R has been requeued fewer than `max_requeues` times; the
//!    work R would lose (GPUs x time since its last declared checkpoint, GraceTime
//!    included, times its GPUs' billing weight) fits in what is left of P's side's
//!    lost-work budget for the window
//!    (`lost_budget x entitled GPU-seconds per window`); the site caps on
//!    preemptions and lost GPU-hours per window are not reached.
//!
//! Beside these clauses stands the site's partition order, tried before them
//! when both jobs' partition `PriorityTier`s are known
//! ([`RunningJob::partition_tier`]): a preemptor in a lower tier never takes a
//! victim in a higher one ([`Denied::LowerPartitionTier`]); one in a higher
//! tier takes a victim past its window whatever the budgets say
//! ([`Allowed::HigherPartitionTier`], as `preempt/partition_prio` would, in
//! safe mode too). Beside it the site's QOS order, when both jobs' QOS are
//! known ([`RunningJob::qos`], [`QosView`]: the `Preempt=` lists of
//! `preempt/qos`): a preemptor whose QOS the victim's lists never takes it
//! ([`Denied::LowerQos`]); one whose QOS lists the victim's takes it past its
//! window whatever the budgets say ([`Allowed::QosPreemptList`]). Both orders'
//! refusals are tried before either's allowance, so where they disagree
//! nothing is preempted. The contract is tried first and always wins; a free-tier
//! preemptor never preempts, whatever its partition or QOS. Before all of them, a
//! victim whose partition has `PreemptMode=OFF`
//! ([`RunningJob::partition_preempt_off`]) is never taken
//! ([`Denied::PartitionPreemptOff`]), as `preempt/partition_prio` refuses it.
//!
//! Victims are ordered ([`victim_priority`]) free tier first, then least work
//! lost (checkpoint-aware), then most over share. A maintenance drain is not
//! this module's business ([`crate::preempt::drain_may_take`]).
//!
//! The rule is antisymmetric in any one state (2 and 3 cannot both hold in both
//! directions: 3 needs `held(ps) < entitled(ps)`, 2 needs `held(vs) > entitled(vs)`
//! or R over budget while P is budgeted), never takes a protected job, and in safe
//! mode (no snapshot) only takes free-tier jobs: property tests in `judge.rs`.
//!
//! # Where each stage lives
//! - `policy.rs`: the knobs ([`RebalancePolicy`]) and their parsing;
//! - `jobs.rs`: the job views ([`RunningJob`], [`PendingJob`], [`PastPreemption`])
//!   and their amounts (weighted GPUs, lost work);
//! - `state.rs`: the period state ([`PreemptState`]), its turnover forecast and the
//!   tree's node names ([`node_name`]);
//! - `inflight.rs`: grants and victims allowed within a period ([`InFlight`]);
//! - `judge.rs`: the callback's judgement ([`decide`], [`judge_sides`],
//!   [`judge_victim`]) and the victim order ([`victim_priority`]);
//! - `wait.rs`: the rule in words ([`explain_wait`], [`describe_wait`], [`describe`]).
//!
//! Each file imports only from the ones listed above it (`wait.rs` reads `judge.rs`,
//! which reads `state.rs`), so the stages form no import circle.
//!
//! [`FairShare`]: crate::FairShare

mod inflight;
mod jobs;
mod judge;
mod policy;
mod state;
#[cfg(test)]
mod testkit;
mod wait;

pub use inflight::InFlight;
pub use jobs::{
    PastPreemption, PendingJob, QosView, RunningJob, expected_lost_gpu_secs, weighted_gpus,
    weighted_lost_gpu_secs,
};
pub use judge::{
    Allowed, Clause, Decision, Denied, Rebalance, SideVerdict, decide, judge_sides, judge_victim,
    victim_priority,
};
pub use policy::{PolicyError, PreemptionPreset, RebalancePolicy};
pub use state::{PreemptState, Release, SideState, entitled_with_balance, node_name};
pub use wait::{
    Wait, allowed_words, denied_words, describe, describe_wait, describe_wait_shown, explain_wait,
    gpus_text, utc,
};
