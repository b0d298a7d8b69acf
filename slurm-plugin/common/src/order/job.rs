//! Reading a `job_record_t`: the only place that dereferences Slurm's job structs.
//!
//! Every pointer is checked for NULL; strings are read lossily; nothing here panics on
//! Slurm data. Callers must hold at least the job read lock (callbacks from
//! `set_job_prio` hold the write lock).

use std::borrow::Cow;
use std::ffi::c_char;

use crate::cstr::opt_str;
use crate::gpus::{Gpus, job_gpus};
use crate::users::UserCache;
use budget_protocol::{JobRun, RunState, bounded_text};
use policy_core::contract::{Contract, effective_contract, is_free_name, parse_admin_comment};
use slurm_ffi::job_state;
use slurm_ffi::sys::job_record_t;

use super::compute::{self, JobKey};

/// Borrowed view of the fields the policy needs.
#[derive(Debug)]
pub struct JobView<'a> {
    pub job_id: u32,
    pub account: Cow<'a, str>,
    pub user: Option<Cow<'a, str>>,
    /// The contract the job runs under (`policy_core::contract`).
    pub contract: Contract,
    pub submit_time: i64,
    pub begin_time: i64,
    pub nice: u32,
}

impl JobView<'_> {
    /// The inputs of the priority decision at `now`.
    pub fn key(&self, now: i64) -> JobKey<'_> {
        JobKey {
            account: &self.account,
            user: self.user.as_deref(),
            free_tier: self.contract.free_tier,
            age_secs: compute::age_secs(now, self.submit_time, self.begin_time),
            nice: self.nice,
        }
    }
}

/// User name of a job: the record's own if set (launched jobs), else the cache.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn user_name<'a>(job: &'a job_record_t, users: &UserCache) -> Option<Cow<'a, str>> {
    // SAFETY: user_name is NULL or an xmalloc'ed string owned by the record.
    match unsafe { opt_str(job.user_name) } {
        Some(n) if !n.is_empty() => {
            users.learn(job.user_id, &n);
            Some(n)
        }
        _ => users.get(job.user_id).map(|n| Cow::Owned(n.to_string())),
    }
}

/// The contract a job runs under: the one job_submit/budget stored in
/// `admin_comment`; only without one, its comment, partition and QOS are read
/// (`policy_core::contract::effective_contract`), with `default_min_runtime`.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn contract(job: &job_record_t, default_min_runtime: i64) -> Contract {
    // SAFETY: admin_comment is NULL or a string owned by the record.
    let admin = unsafe { opt_str(job.admin_comment) };
    if let Some(c) = admin.as_deref().and_then(parse_admin_comment) {
        return c;
    }
    // SAFETY: string fields of a valid record; qos_ptr is NULL or a valid QOS record.
    let (comment, partition, qos) = unsafe {
        (
            opt_str(job.comment),
            opt_str(job.partition),
            job.qos_ptr.as_ref().and_then(|q| opt_str(q.name)),
        )
    };
    let free_by_name = is_free_name(partition.as_deref()) || is_free_name(qos.as_deref());
    effective_contract(None, comment.as_deref(), free_by_name, default_min_runtime)
}

/// Read a job record into a [`JobView`]; `default_min_runtime` is the site default
/// for jobs without a stored contract.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn view<'a>(
    job: &'a job_record_t,
    users: &UserCache,
    default_min_runtime: i64,
) -> JobView<'a> {
    // SAFETY: details is NULL or a valid struct owned by the record.
    let details = unsafe { job.details.as_ref() };
    JobView {
        job_id: job.job_id,
        // SAFETY: string fields of a valid record.
        account: unsafe { opt_str(job.account) }.unwrap_or(Cow::Borrowed("")),
        // SAFETY: as above.
        user: unsafe { user_name(job, users) },
        // SAFETY: as above.
        contract: unsafe { contract(job, default_min_runtime) },
        submit_time: details.map(|d| d.submit_time).unwrap_or(0),
        begin_time: details.map(|d| d.begin_time).unwrap_or(0),
        nice: details.map(|d| d.nice).unwrap_or(slurm_ffi::NICE_OFFSET),
    }
}

/// The state a run is reported in, or `None` for jobs not worth syncing.
///
/// A pending job is always `Pending`, whatever its `start_time`: the scheduler sets
/// that to its *estimated* start while a job waits (seen: a year ahead on a full
/// cluster), and a requeued job keeps the previous run's start only until
/// `batch_requeue_fini` clears it. The previous run of a requeued job is reported
/// separately by [`runs`].
pub fn run_state(job_state: u32, start_time: i64) -> Option<RunState> {
    let base = job_state::base(job_state);
    if job_state::is_pending(job_state) {
        return Some(RunState::Pending);
    }
    if job_state::is_running(job_state) || job_state::is_suspended(job_state) {
        return Some(RunState::Running);
    }
    if job_state::is_finished(job_state) {
        if start_time <= 0 {
            return None; // cancelled before it ever ran: nothing to charge
        }
        if base == slurm_ffi::sys::JOB_PREEMPTED || job_state & slurm_ffi::sys::JOB_REQUEUE != 0 {
            return Some(RunState::Requeued);
        }
        return Some(RunState::Ended);
    }
    None
}

/// The previous run of a requeued job (`restart_cnt > 0`): `(start, end)`.
///
/// `_job_requeue_op` bumps `restart_cnt` and sets `end_time = time_last_active = now`;
/// while the job is still COMPLETING, `start_time` holds that run's start, afterwards it
/// is 0 or an estimate. `None` when the requeue time is unknown (after a controller
/// restart `time_last_active` is not restored: budgetd has the run by then).
///
/// Also for a job requeued and then cancelled before its new run started, in between
/// two passes: cancelling a pending job sets `start_time = end_time = now` and leaves
/// `time_last_active` at the requeue time. Without this the previous run was never
/// closed and stayed "running" in budgetd's ledger, charged forever.
pub fn previous_run(
    job_state: u32,
    restart_cnt: u16,
    start_time: i64,
    end_time: i64,
    time_last_active: i64,
) -> Option<(Option<i64>, i64)> {
    if restart_cnt == 0 || time_last_active <= 0 {
        return None;
    }
    if job_state::is_finished(job_state) {
        let never_ran = start_time > 0 && start_time == end_time;
        return (never_ran && time_last_active <= start_time).then_some((None, time_last_active));
    }
    if !job_state::is_pending(job_state) {
        return None;
    }
    let completing = job_state & slurm_ffi::sys::JOB_COMPLETING != 0;
    let start =
        (completing && start_time > 0 && start_time <= time_last_active).then_some(start_time);
    Some((start, time_last_active))
}

/// The submit time of a job's current run as reported to budgetd: `None` while it is
/// not known yet.
///
/// A requeue (`_job_requeue_op`, or a failed launch in `job_complete`) bumps
/// `restart_cnt` and leaves the job PENDING|COMPLETING; the new run's submit time is
/// set only by `batch_requeue_fini`, once the previous run is done completing. Until
/// then `details->submit_time` is the previous run's. Reported as the new run's, it
/// made budgetd store run n under run n-1's submit time and, when the real one came,
/// a second row of run n beside it (a row is keyed by job, run and submit); the next
/// live set closed the first as forgotten: an ended run without a start that no later
/// sync fills in (priority suite, section 6, on a loaded machine). Without a submit
/// time budgetd stores the run under 0 and adopts the first real one sent.
pub fn current_submit(job_state: u32, restart_cnt: u16, submit_time: i64) -> Option<i64> {
    let requeue_window =
        restart_cnt > 0 && job_state::is_pending(job_state) && job_state::is_completing(job_state);
    (!requeue_window && submit_time > 0).then_some(submit_time)
}

const FNV_OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
const FNV_PRIME: u64 = 0x0000_0100_0000_01b3;

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(FNV_PRIME);
    }
    h
}

fn fnv_int(h: u64, v: i64) -> u64 {
    fnv(h, &v.to_le_bytes())
}

fn ptr(p: *const c_char) -> i64 {
    p as usize as i64
}

/// Fingerprint of everything [`compute::place`] reads from a job (account, user, and
/// what its contract is read from: comments, partition, QOS). The background pass keeps
/// a job's placement while this and the snapshot stay the same. `users_generation` stands for the uid cache (jobs without a
/// `user_name` are placed by the cached name).
///
/// String fields are fingerprinted by address, not content: reading every string of
/// 100k jobs costs a cache miss each under the job write lock. Slurm replaces a field
/// by freeing the old string and allocating a new one (`xfree` + `xstrdup`), so a change
/// shows as a new address, except when the allocator hands back the same address; the
/// pass re-places every job every `FULL_SYNC_EVERY` passes to heal that case.
pub fn key_fingerprint(job: &job_record_t, users_generation: u64) -> u64 {
    let mut h = fnv_int(FNV_OFFSET, ptr(job.account));
    h = fnv_int(h, ptr(job.comment));
    h = fnv_int(h, ptr(job.admin_comment));
    h = fnv_int(h, ptr(job.user_name));
    h = fnv_int(h, ptr(job.partition));
    h = fnv_int(h, job.qos_ptr as usize as i64);
    h = fnv_int(h, i64::from(job.user_id));
    fnv_int(h, users_generation as i64)
}

/// Fingerprint of everything [`runs`] reports for a job, given its `key_fp` and the
/// site's default `min_runtime` (reported for jobs without a stored contract): when it
/// equals what budgetd last acknowledged, the pass does not rebuild or resend the job.
/// Strings by address, as in [`key_fingerprint`].
pub fn sync_fingerprint(job: &job_record_t, key_fp: u64, default_min_runtime: i64) -> u64 {
    let pending = job_state::is_pending(job.job_state);
    let finished = job_state::is_finished(job.job_state);
    let mut h = fnv_int(key_fp, default_min_runtime);
    h = fnv_int(h, i64::from(job.job_state));
    h = fnv_int(h, i64::from(job.restart_cnt));
    // A pending job's start_time is only the scheduler's estimate: not reported.
    h = fnv_int(h, if pending { 0 } else { job.start_time });
    h = fnv_int(h, if finished { job.end_time } else { 0 });
    h = fnv_int(
        h,
        if pending && job.restart_cnt > 0 {
            job.time_last_active
        } else {
            0
        },
    );
    h = fnv_int(h, i64::from(job.node_cnt));
    h = fnv_int(h, job.gres_list_req as usize as i64);
    h = fnv_int(h, job.details as usize as i64);
    h = fnv_int(h, ptr(job.partition));
    h = fnv_int(h, ptr(job.nodes));
    h = fnv_int(h, ptr(job.tres_per_node));
    fnv_int(h, ptr(job.tres_per_job))
}

/// Name of a job without an account (no `--account`, no accounting default): budgetd
/// refuses an empty name, and one refused record fails the whole sync batch.
pub const NO_ACCOUNT: &str = "(none)";

/// An account or user name as budgetd accepts it (1-128 printable characters):
/// empty becomes [`NO_ACCOUNT`], control characters `?`, longer names are cut.
pub fn ledger_name(s: &str) -> String {
    if s.is_empty() {
        return NO_ACCOUNT.to_string();
    }
    let mut out: String = s
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if out.len() > 128 {
        let mut cut = 128;
        while !out.is_char_boundary(cut) {
            cut -= 1;
        }
        out.truncate(cut);
    }
    out
}

/// Build the sync record(s) for one job: its current run, plus, for a job requeued
/// since (restart_cnt > 0 and pending), the end of the previous run. The contract
/// reported is the one `preempt/budget` enforces (`default_min_runtime` for a job
/// without a stored or declared one).
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn runs(
    job: &job_record_t,
    users: &UserCache,
    default_min_runtime: i64,
    out: &mut Vec<JobRun>,
) {
    if run_state(job.job_state, job.start_time).is_none() {
        return;
    }
    // SAFETY: forwarded contract.
    unsafe { runs_with_gpus(job, users, default_min_runtime, job_gpus(job), out) }
}

/// [`runs`] with the job's GPUs already read (the GRES list walk needs a live Slurm).
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn runs_with_gpus(
    job: &job_record_t,
    users: &UserCache,
    default_min_runtime: i64,
    g: Gpus,
    out: &mut Vec<JobRun>,
) {
    // SAFETY: forwarded contract.
    let v = unsafe { view(job, users, default_min_runtime) };
    let Some(state) = run_state(job.job_state, job.start_time) else {
        return;
    };
    let start = (state != RunState::Pending && job.start_time > 0).then_some(job.start_time);
    // Every optional text goes through bounded_text: budgetd refuses a field over
    // 128 bytes, and a job on many scattered nodes (or in many partitions) has one.
    // SAFETY: string fields of a valid record.
    let partition = unsafe { opt_str(job.partition) }.and_then(|p| bounded_text(&p));
    // SAFETY: as above.
    let nodes = unsafe { opt_str(job.nodes) }.and_then(|p| bounded_text(&p));
    let free_tier = v.contract.free_tier;
    let min_runtime_secs = v.contract.min_runtime;
    let end = match state {
        RunState::Ended | RunState::Requeued => (job.end_time > 0).then_some(job.end_time),
        _ => None,
    };
    let base = JobRun {
        job_id: job.job_id,
        run: u32::from(job.restart_cnt),
        submit: current_submit(job.job_state, job.restart_cnt, v.submit_time),
        account: ledger_name(&v.account),
        user: v
            .user
            .as_deref()
            .map(ledger_name)
            .unwrap_or_else(|| format!("uid{}", job.user_id)),
        partition,
        gpus: g.count,
        gpu_type: g.gpu_type.as_deref().and_then(bounded_text),
        start,
        end,
        state,
        free_tier,
        min_runtime_secs,
        nodes,
        priority: Some(job.priority),
        reason: None,
        time_limit_secs: (job.time_limit != slurm_ffi::NO_VAL
            && job.time_limit != slurm_ffi::INFINITE)
            .then(|| i64::from(job.time_limit) * 60),
        // SAFETY: comment is NULL or a string owned by the record.
        checkpoint_secs: unsafe { opt_str(job.comment) }
            .and_then(|c| policy_core::comment::parse_comment(&c).ok())
            .and_then(|r| r.checkpoint),
    };
    // A requeued job is pending again with restart_cnt bumped: report the end of the
    // previous run (and its start while Slurm still shows it; else Service fills it
    // in from the start it saw while the run was running).
    if matches!(state, RunState::Pending | RunState::Ended)
        && let Some((prev_start, prev_end)) = previous_run(
            job.job_state,
            job.restart_cnt,
            job.start_time,
            job.end_time,
            job.time_last_active,
        )
    {
        out.push(JobRun {
            run: u32::from(job.restart_cnt) - 1,
            // The requeue gave the job a new submit time: the previous run's is
            // unknown here (budgetd matches the run it stored).
            submit: None,
            start: prev_start,
            end: Some(prev_end),
            state: RunState::Requeued,
            nodes: None,
            priority: None,
            ..base.clone()
        });
    }
    out.push(base);
}

/// Set a pending job's site factor and shift its priority the way
/// `priority/multifactor` sums it: `site_factor - NICE_OFFSET` is one addend of the
/// priority and of each partition's entry of its partition priorities
/// ([`slurm_ffi::partition_priorities`]), clamped to
/// `1..=u32::MAX`; `prio_factors->priority_site` (sprio's SITE) follows. Exact unless
/// multifactor had clamped the priority; its next calculation recomputes the whole sum.
/// This is multifactor's own arithmetic done in place, instead of calling Slurm's
/// `set_job_prio` from the background thread: that re-enters the site-factor
/// interface, whose teardown holds its context lock while `fini` joins this thread.
/// Returns whether the priority changed.
///
/// # Safety
/// `job` must be a valid job record under the job write lock.
pub unsafe fn apply_site_factor(job: &mut job_record_t, site_factor: u32) -> bool {
    let delta = i64::from(site_factor) - i64::from(job.site_factor);
    job.site_factor = site_factor;
    // SAFETY: prio_factors is NULL or multifactor's struct owned by the record.
    if let Some(f) = unsafe { job.prio_factors.as_mut() } {
        f.priority_site = site_factor;
    }
    if delta == 0 {
        return false;
    }
    let shift = |p: u32| (i64::from(p) + delta).clamp(1, i64::from(u32::MAX)) as u32;
    let before = job.priority;
    job.priority = shift(job.priority);
    // SAFETY: a valid record under the job write lock (the caller's contract).
    let prios = unsafe { slurm_ffi::partition_priorities(job) };
    if !prios.is_null() && !job.part_ptr_list.is_null() {
        // SAFETY: multifactor sizes priority_array to the job's partition list (one
        // entry per partition, written in list order); the list is the record's own.
        let n = unsafe { slurm_ffi::sys::list_count(job.part_ptr_list) };
        for i in 0..usize::try_from(n).unwrap_or(0) {
            // SAFETY: i < the entries multifactor allocated and filled, see above.
            unsafe {
                let p = prios.add(i);
                *p = shift(*p);
            }
        }
    }
    job.priority != before
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpus::requested_gpus;

    /// `list_count` is libslurmfull's, which slurmctld has loaded before it loads
    /// a plugin; a test executable links no Slurm library, and an unoptimised one
    /// keeps `apply_site_factor`'s call to it. No test here gives a record a
    /// partition list, so the call is never taken: if one ever is, this aborts
    /// the test rather than answer a made-up count.
    #[unsafe(no_mangle)]
    extern "C" fn list_count(_list: slurm_ffi::SlurmList) -> std::ffi::c_int {
        unreachable!(
            "list_count called from a unit test: build the record without a partition list"
        )
    }
    use crate::test_records::running_job;
    use slurm_ffi::{EmptyRecord, sys::slurmdb_qos_rec_t};

    #[test]
    fn contract_is_the_stored_one_else_read_like_job_submit() {
        let (mut job, mut qos) = (job_record_t::empty(), slurmdb_qos_rec_t::empty());
        // SAFETY: a valid record with literal strings, read by this thread only.
        let read = |job: &job_record_t| unsafe { contract(job, 3600) };
        let c = |min_runtime, free_tier| Contract {
            min_runtime,
            free_tier,
        };
        job.comment = c"exp42 min_runtime=2h".as_ptr().cast_mut();
        job.admin_comment = c"ticket#7 budget:min_runtime=600".as_ptr().cast_mut();
        assert_eq!(read(&job), c(600, false), "the stored contract wins");
        job.admin_comment = c"budget:min_runtime=0 budget:free".as_ptr().cast_mut();
        assert_eq!(read(&job), c(0, true), "free by partition at submission");
        job.admin_comment = c"ticket#7".as_ptr().cast_mut();
        assert_eq!(
            read(&job),
            c(7200, false),
            "no stored contract: the comment"
        );
        job.comment = std::ptr::null_mut();
        assert_eq!(
            read(&job),
            c(3600, false),
            "nothing declared: the site default"
        );
        job.partition = c"gpu,FREE".as_ptr().cast_mut();
        assert_eq!(read(&job), c(0, true));
        job.partition = c"gpu".as_ptr().cast_mut();
        qos.name = c"free".as_ptr().cast_mut();
        job.qos_ptr = &mut qos;
        assert_eq!(read(&job), c(0, true));
    }

    #[test]
    fn synced_runs_carry_the_enforced_contract() {
        let mut job = running_job(7, c"teama", c"gres:gpu:2", 1000, 1);
        job.user_name = c"alice".as_ptr().cast_mut();
        // Submitted to the free partition: job_submit/budget stored the free tier; the
        // user's comment says nothing about it.
        job.comment = c"exp42".as_ptr().cast_mut();
        job.admin_comment = c"budget:min_runtime=0 budget:free".as_ptr().cast_mut();
        let users = UserCache::default();
        let mut out = Vec::new();
        // SAFETY: a valid record with literal strings.
        let with_gpus = |job: &job_record_t, out: &mut Vec<JobRun>| unsafe {
            runs_with_gpus(job, &users, 3600, requested_gpus(job), out)
        };
        with_gpus(&job, &mut out);
        assert_eq!(out.len(), 1);
        let r = &out[0];
        assert_eq!((r.job_id, r.run, r.state), (7, 0, RunState::Running));
        assert_eq!((r.account.as_str(), r.user.as_str()), ("teama", "alice"));
        assert_eq!((r.gpus, r.start), (2, Some(1000)));
        assert!(r.free_tier);
        assert_eq!(r.min_runtime_secs, 0);
        // Relying on the site default: the ledger gets the window preempt/budget keeps.
        job.admin_comment = c"budget:min_runtime=3600".as_ptr().cast_mut();
        out.clear();
        with_gpus(&job, &mut out);
        assert!(!out[0].free_tier);
        assert_eq!(out[0].min_runtime_secs, 3600);
    }

    #[test]
    fn long_node_lists_and_partitions_are_cut_not_refused() {
        let mut job = job_record_t::empty();
        job.job_id = 9;
        job.job_state = slurm_ffi::sys::JOB_RUNNING;
        job.start_time = 1000;
        job.account = c"teama".as_ptr().cast_mut();
        job.user_name = c"alice".as_ptr().cast_mut();
        // 40 scattered nodes: Slurm's own compressed form is 167 bytes.
        let nodes = format!(
            "gpu[{}]",
            (0..40)
                .map(|i| format!("{:03}", 3 * i))
                .collect::<Vec<_>>()
                .join(",")
        );
        let nodes = std::ffi::CString::new(nodes).expect("no NUL");
        job.nodes = nodes.as_ptr().cast_mut();
        let parts = std::ffi::CString::new(vec![b'p'; 200]).expect("no NUL");
        job.partition = parts.as_ptr().cast_mut();
        let users = UserCache::default();
        let mut out = Vec::new();
        // SAFETY: a valid record with strings that outlive the call.
        unsafe { runs_with_gpus(&job, &users, 3600, requested_gpus(&job), &mut out) };
        let r = &out[0];
        for f in [&r.nodes, &r.partition] {
            let f = f.as_deref().expect("sent");
            assert!(f.len() <= budget_protocol::MAX_RUN_TEXT, "{f}");
            assert!(f.ends_with(budget_protocol::CUT_MARKER), "{f}");
        }
    }

    #[test]
    fn a_requeued_run_is_reported_with_its_own_submit_time_only() {
        use slurm_ffi::sys;
        let (mut job, mut details) = (job_record_t::empty(), slurm_ffi::JobDetails::empty());
        job.job_id = 23;
        job.account = c"exact".as_ptr().cast_mut();
        job.user_name = c"alice".as_ptr().cast_mut();
        job.tres_per_node = c"gres:gpu:1".as_ptr().cast_mut();
        // Run 0 submitted at 50, started at 100, requeued at 160: restart_cnt is
        // bumped, the job is PENDING|COMPLETING, and details->submit_time is still
        // run 0's until batch_requeue_fini.
        details.submit_time = 50;
        job.details = &mut details;
        job.job_state = sys::JOB_PENDING | sys::JOB_COMPLETING;
        job.restart_cnt = 1;
        job.start_time = 100;
        job.time_last_active = 160;
        let users = UserCache::default();
        let collect = |job: &job_record_t| {
            let mut out = Vec::new();
            // SAFETY: a valid record with literal strings and a live details struct.
            unsafe { runs_with_gpus(job, &users, 3600, requested_gpus(job), &mut out) };
            out.iter()
                .map(|r| (r.run, r.state, r.submit, r.start, r.end))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            collect(&job),
            vec![
                (0, RunState::Requeued, None, Some(100), Some(160)),
                // Not run 0's submit time: budgetd would key run 1 under it.
                (1, RunState::Pending, None, None, None),
            ]
        );
        // batch_requeue_fini: COMPLETING cleared, start cleared, new submit time.
        job.job_state = sys::JOB_PENDING;
        job.start_time = 0;
        details.submit_time = 161;
        job.details = &mut details;
        assert_eq!(
            collect(&job),
            vec![
                (0, RunState::Requeued, None, None, Some(160)),
                (1, RunState::Pending, Some(161), None, None),
            ]
        );
        assert_eq!(current_submit(sys::JOB_RUNNING, 1, 161), Some(161));
        assert_eq!(
            current_submit(sys::JOB_PENDING | sys::JOB_COMPLETING, 0, 50),
            Some(50)
        );
        assert_eq!(current_submit(sys::JOB_PENDING, 0, 0), None);
    }

    #[test]
    fn ledger_names_are_never_refused() {
        assert_eq!(ledger_name(""), NO_ACCOUNT);
        assert_eq!(ledger_name("teama"), "teama");
        assert_eq!(ledger_name("a\nb"), "a?b");
        assert_eq!(ledger_name(&"é".repeat(100)).len(), 128);
    }

    #[test]
    fn states() {
        use slurm_ffi::sys;
        assert_eq!(run_state(sys::JOB_PENDING, 0), Some(RunState::Pending));
        // An estimated start (scheduler) is not a run.
        assert_eq!(run_state(sys::JOB_PENDING, 5), Some(RunState::Pending));
        assert_eq!(
            run_state(sys::JOB_PENDING | sys::JOB_COMPLETING, 5),
            Some(RunState::Pending)
        );
        assert_eq!(run_state(sys::JOB_RUNNING, 5), Some(RunState::Running));
        assert_eq!(run_state(sys::JOB_COMPLETE, 5), Some(RunState::Ended));
        assert_eq!(run_state(sys::JOB_CANCELLED, 0), None);
        assert_eq!(run_state(sys::JOB_PREEMPTED, 5), Some(RunState::Requeued));
    }

    #[test]
    fn previous_run_of_a_requeued_job() {
        use slurm_ffi::sys;
        // Requeue window: still completing, start_time is the run's start.
        assert_eq!(
            previous_run(sys::JOB_PENDING | sys::JOB_COMPLETING, 1, 100, 0, 160),
            Some((Some(100), 160))
        );
        // After batch_requeue_fini: start cleared, or an estimate in the future.
        assert_eq!(
            previous_run(sys::JOB_PENDING, 1, 0, 0, 160),
            Some((None, 160))
        );
        assert_eq!(
            previous_run(sys::JOB_PENDING, 1, 9_999, 0, 160),
            Some((None, 160))
        );
        assert_eq!(previous_run(sys::JOB_PENDING, 0, 100, 0, 160), None);
        assert_eq!(previous_run(sys::JOB_PENDING, 2, 100, 0, 0), None);
        assert_eq!(previous_run(sys::JOB_RUNNING, 1, 100, 0, 160), None);
        // Requeued at 160, then cancelled while pending at 170 (start = end = 170):
        // the previous run ended at the requeue.
        assert_eq!(
            previous_run(sys::JOB_CANCELLED, 1, 170, 170, 160),
            Some((None, 160))
        );
        // A run that really ran and completed says nothing about the one before.
        assert_eq!(previous_run(sys::JOB_COMPLETE, 1, 170, 200, 200), None);
        // Never requeued, cancelled while pending: no previous run.
        assert_eq!(previous_run(sys::JOB_CANCELLED, 0, 170, 170, 160), None);
    }

    #[test]
    fn a_new_site_factor_shifts_the_priority_by_its_difference() {
        let mut job = job_record_t::empty();
        // SAFETY: a C struct of numbers and pointers: all zero is valid (NULL, 0).
        // Its type is the release's (`priority_factors_t` from 24.11), read from the field.
        let mut factors = unsafe { std::mem::zeroed() };
        job.prio_factors = &mut factors;
        job.site_factor = slurm_ffi::NICE_OFFSET + 5_000;
        job.priority = 6_000;
        // SAFETY (every call): a valid record used by this thread only, no partition list.
        assert!(unsafe { apply_site_factor(&mut job, slurm_ffi::NICE_OFFSET + 7_000) });
        assert_eq!(job.priority, 8_000);
        assert_eq!(factors.priority_site, slurm_ffi::NICE_OFFSET + 7_000);
        assert!(!unsafe { apply_site_factor(&mut job, slurm_ffi::NICE_OFFSET + 7_000) });
        // Never 0 (held) nor past u32::MAX.
        assert!(unsafe { apply_site_factor(&mut job, slurm_ffi::NICE_OFFSET) });
        assert_eq!(job.priority, 1_000);
        assert!(unsafe { apply_site_factor(&mut job, 0) });
        assert_eq!(job.priority, 1);
        job.priority = u32::MAX - 10;
        assert!(unsafe { apply_site_factor(&mut job, u32::MAX) });
        assert_eq!((job.priority, job.site_factor), (u32::MAX, u32::MAX));
        job.prio_factors = std::ptr::null_mut();
        assert!(unsafe { apply_site_factor(&mut job, 1) });
    }
}
