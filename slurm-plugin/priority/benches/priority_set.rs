//! `cargo bench -p priority-budget --bench priority_set`: cost of the exported
//! `priority_p_set` callback (what slurmctld calls under the job write lock), on a
//! realistic job record and a budget snapshot of 1,000 ranked users (10 organisations
//! x 10 teams x 10 users), for a job with the contract job_submit/budget stores and for
//! one without (read from its comment), plus the pure decision alone (`compute::decide`).
//!
//! Prints one line per case: `NAME: median N ns, p99 M ns (K calls)`, NAME one word
//! (scripts/bench-slurm parses them). No Slurm process is needed: the record is built here, and the snapshot
//! is stored the way the background thread stores it.

use std::ffi::CString;
use std::hint::black_box;

use priority_budget::compute::{self, JobKey};
use priority_budget::state::state;
use slurm_ffi::sys::job_record_t;
use slurm_ffi::{EmptyRecord, JobDetails};
use slurm_plugin_common::bench::{measure, report, snapshot};

fn main() {
    let snap = snapshot();
    let st = state();
    st.snapshots.store(snap.clone(), 1_000_000);
    // Every user holds 1-4 GPUs: the entitlement-first order the background pass
    // computes from its holdings (once per pass, outside the job lock).
    let keys: Vec<(String, String, u32)> = snap
        .fair_share
        .nodes
        .iter()
        .filter_map(|n| match &n.kind {
            policy_core::fairshare::NodeKind::User { account } => {
                Some((account.clone(), n.name.clone(), 1 + n.name.len() as u32 % 4))
            }
            policy_core::fairshare::NodeKind::Account => None,
        })
        .collect();
    let held = || {
        keys.iter()
            .map(|(a, u, g)| (a.as_str(), u.as_str(), *g, 1.0))
    };
    let order = compute::entitled_order(&snap, held(), 1_000_000);
    report(
        &format!("compute::entitled_order ({} keys holding GPUs)", keys.len()),
        measure(
            || {
                black_box(compute::entitled_order(black_box(&snap), held(), 1_000_000));
            },
            50,
            2,
        ),
    );
    st.set_order(Some(std::sync::Arc::new(order.clone())));
    // A pending job as slurmctld holds it: account, comment with a contract, no user
    // name yet (Slurm fills it at launch; the plugin's uid cache knows it).
    st.users.learn(4242, "user555");
    let account = CString::new("org5team5").unwrap_or_default();
    let comment = CString::new("min_runtime=4h").unwrap_or_default();
    // The contract as job_submit/budget stores it.
    let admin = CString::new("budget:min_runtime=14400").unwrap_or_default();
    let mut details = JobDetails::empty();
    details.submit_time = 999_000;
    details.begin_time = 999_000;
    details.nice = slurm_ffi::NICE_OFFSET;
    let mut job = job_record_t::empty();
    job.job_id = 1;
    job.user_id = 4242;
    job.account = account.as_ptr().cast_mut();
    job.comment = comment.as_ptr().cast_mut();
    job.admin_comment = admin.as_ptr().cast_mut();
    job.details = &mut details;
    job.priority = 1;

    // SAFETY (both calls): a valid record with valid strings, used by this thread only.
    let set = |jp: *mut job_record_t| unsafe { priority_budget::priority_p_set(1, jp) };
    let time_set = |jp: *mut job_record_t| {
        let p = set(jp);
        assert!(p > 1, "priority_p_set returned {p}");
        measure(
            || {
                black_box(set(black_box(jp)));
            },
            2_000,
            500,
        )
    };
    report("priority_p_set", time_set(&mut job));
    // A job without a stored contract (job_submit/budget not loaded): the contract is
    // read from its comment, partition and QOS instead.
    job.admin_comment = std::ptr::null_mut();
    report("priority_p_set_without_stored_contract", time_set(&mut job));

    let key = JobKey {
        account: "org5team5",
        user: Some("user555"),
        free_tier: false,
        age_secs: 1_000,
        nice: slurm_ffi::NICE_OFFSET,
    };
    let decide = measure(
        || {
            black_box(compute::decide(
                Some(black_box(&snap)),
                Some(black_box(&order)),
                black_box(&key),
            ));
        },
        2_000,
        500,
    );
    report("compute::decide", decide);
}
