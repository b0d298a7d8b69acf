//! `cargo bench -p site-factor-budget --bench site_factor_set`: cost of the exported
//! `site_factor_p_set` callback (what multifactor's `priority_p_set` calls under the
//! job write lock), measured as `priority_p_set`'s bench measures it: a realistic job
//! record, a budget snapshot of 1,000 ranked users (10 organisations x 10 teams x 10
//! users) stored the way the background thread stores it, the entitlement-first order
//! of the last pass, in both modes; plus the pure term alone (`Scale::site_factor`).
//!
//! Prints one line per case: `NAME: median N ns, p99 M ns (K calls)`. No Slurm process
//! is needed.

use std::ffi::CString;
use std::hint::black_box;

use site_factor_budget::term::{Mode, Scale};
use slurm_ffi::sys::job_record_t;
use slurm_ffi::{EmptyRecord, JobDetails};
use slurm_plugin_common::bench::{measure, report, snapshot};
use slurm_plugin_common::order::compute;
use slurm_plugin_common::order::state::state;

fn main() {
    let snap = snapshot();
    let st = state();
    st.snapshots.store(snap.clone(), 1_000_000);
    // Every user holds 1-4 GPUs: the order the background pass publishes.
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
    let held = keys
        .iter()
        .map(|(a, u, g)| (a.as_str(), u.as_str(), *g, 1.0));
    let order = compute::entitled_order(&snap, held, 1_000_000);
    st.set_order(Some(std::sync::Arc::new(order)));
    // A pending job as slurmctld holds it: account, a contract job_submit/budget
    // stored, no user name yet (the plugin's uid cache knows it).
    st.users.learn(4242, "user555");
    let account = CString::new("org5team5").unwrap_or_default();
    let comment = CString::new("min_runtime=4h").unwrap_or_default();
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
    job.site_factor = slurm_ffi::NICE_OFFSET;

    // multifactor's weights of the testbed (age, fair share, QOS: 1000 each).
    let modes = [
        ("dominant", Mode::Dominant),
        ("factor", Mode::Factor { weight: 100_000 }),
    ];
    for (name, mode) in modes {
        let Some(scale) = Scale::new(mode, 3000) else {
            eprintln!("no scale for {mode:?}");
            return;
        };
        site_factor_budget::set_scale(scale);
        let jp: *mut job_record_t = &mut job;
        // SAFETY (every call): a valid record with valid strings, used by this thread only.
        let set = || unsafe { site_factor_budget::site_factor_p_set(black_box(jp)) };
        set();
        assert!(
            job.site_factor > slurm_ffi::NICE_OFFSET,
            "site_factor_p_set left {}",
            job.site_factor
        );
        report(
            &format!("site_factor_p_set_{name}"),
            measure(set, 2_000, 500),
        );
    }
    // A job without a stored contract: read from its comment, partition and QOS.
    job.admin_comment = std::ptr::null_mut();
    let jp: *mut job_record_t = &mut job;
    // SAFETY: as above.
    let set = || unsafe { site_factor_budget::site_factor_p_set(black_box(jp)) };
    report(
        "site_factor_p_set_without_stored_contract",
        measure(set, 2_000, 500),
    );

    let Some(scale) = Scale::new(Mode::Dominant, 3000) else {
        return;
    };
    let p = compute::place_key(Some(&snap), None, "org5team5", "user555", false);
    report(
        "Scale::site_factor",
        measure(
            || {
                black_box(black_box(&scale).site_factor(black_box(&p)));
            },
            2_000,
            500,
        ),
    );
}
