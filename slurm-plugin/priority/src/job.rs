//! Reading a `job_record_t`: the only place that dereferences Slurm's job structs.
//!
//! Every pointer is checked for NULL; strings are read lossily; nothing here panics on
//! Slurm data. Callers must hold at least the job read lock (callbacks from
//! `set_job_prio` hold the write lock).

use std::borrow::Cow;
use std::ffi::{CStr, c_char};

use budget_protocol::{JobRun, RunState};
use slurm_ffi::sys::{gres_job_state_t, gres_state_t, job_record_t};
use slurm_ffi::{NO_VAL, NO_VAL64, job_state};
use slurm_plugin_common::controller::for_each;

use crate::compute::{self, JobKey};
use crate::users::UserCache;

/// Borrow a C string as text (lossy); `None` for NULL.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string that outlives `'a`.
pub unsafe fn text<'a>(p: *const c_char) -> Option<Cow<'a, str>> {
    if p.is_null() {
        None
    } else {
        // SAFETY: caller's contract.
        Some(unsafe { CStr::from_ptr(p) }.to_string_lossy())
    }
}

/// Borrowed view of the fields the policy needs.
#[derive(Debug)]
pub struct JobView<'a> {
    pub job_id: u32,
    pub account: Cow<'a, str>,
    pub user: Option<Cow<'a, str>>,
    pub comment: Option<Cow<'a, str>>,
    pub admin_comment: Option<Cow<'a, str>>,
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
            comment: self.comment.as_deref(),
            admin_comment: self.admin_comment.as_deref(),
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
    match unsafe { text(job.user_name) } {
        Some(n) if !n.is_empty() => {
            users.learn(job.user_id, &n);
            Some(n)
        }
        _ => users.get(job.user_id).map(|n| Cow::Owned(n.to_string())),
    }
}

/// Read a job record into a [`JobView`].
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn view<'a>(job: &'a job_record_t, users: &UserCache) -> JobView<'a> {
    // SAFETY: details is NULL or a valid struct owned by the record.
    let details = unsafe { job.details.as_ref() };
    JobView {
        job_id: job.job_id,
        // SAFETY: string fields of a valid record.
        account: unsafe { text(job.account) }.unwrap_or(Cow::Borrowed("")),
        // SAFETY: as above.
        user: unsafe { user_name(job, users) },
        // SAFETY: as above.
        comment: unsafe { text(job.comment) },
        // SAFETY: as above.
        admin_comment: unsafe { text(job.admin_comment) },
        submit_time: details.map(|d| d.submit_time).unwrap_or(0),
        begin_time: details.map(|d| d.begin_time).unwrap_or(0),
        nice: details.map(|d| d.nice).unwrap_or(slurm_ffi::NICE_OFFSET),
    }
}

/// GPU count and type requested by / allocated to a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gpus {
    pub count: u32,
    pub gpu_type: Option<String>,
}

fn valid(n: u64) -> bool {
    n != 0 && n != NO_VAL64 && n != u64::MAX
}

/// GPUs of a job: from `gres_list_req` (the structured request), else parsed from
/// `tres_per_job`/`tres_per_node`. Without slurmdbd `tres_req_cnt` has no GPU slot,
/// so these are the reliable sources (SLURM-NOTES).
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn gpus(job: &job_record_t) -> Gpus {
    // SAFETY: details is NULL or valid.
    let details = unsafe { job.details.as_ref() };
    let nodes = if job.node_cnt > 0 && job.node_cnt != NO_VAL {
        job.node_cnt
    } else {
        details
            .map(|d| d.min_nodes)
            .filter(|n| *n > 0 && *n != NO_VAL)
            .unwrap_or(1)
    };
    let tasks = details
        .map(|d| d.num_tasks)
        .filter(|n| *n > 0 && *n != NO_VAL)
        .unwrap_or(nodes);
    let mut out = Gpus::default();
    // SAFETY: gres_list_req is NULL or a list of gres_state_t* under the job lock.
    unsafe {
        for_each(job.gres_list_req, |p: *mut gres_state_t| {
            let Some(g) = p.as_ref() else { return };
            if text(g.gres_name).as_deref() != Some("gpu") {
                return;
            }
            let Some(js) = (g.gres_data as *const gres_job_state_t).as_ref() else {
                return;
            };
            let n = if valid(js.total_gres) {
                js.total_gres
            } else if valid(js.gres_per_job) {
                js.gres_per_job
            } else if valid(js.gres_per_node) {
                js.gres_per_node * u64::from(nodes)
            } else if valid(js.gres_per_task) {
                js.gres_per_task * u64::from(tasks)
            } else if valid(js.gres_per_socket) {
                // Socket count per node is not known here; count one socket per node.
                js.gres_per_socket * u64::from(nodes)
            } else {
                0
            };
            out.count = out
                .count
                .saturating_add(u32::try_from(n).unwrap_or(u32::MAX));
            if out.gpu_type.is_none() {
                out.gpu_type = text(js.type_name).map(|t| t.into_owned());
            }
        });
    }
    if out.count == 0 {
        // SAFETY: string fields of a valid record.
        let per_job = unsafe { text(job.tres_per_job) };
        // SAFETY: as above.
        let per_node = unsafe { text(job.tres_per_node) };
        if let Some(g) = per_job.as_deref().and_then(parse_tres_gpus) {
            out = g;
        } else if let Some(mut g) = per_node.as_deref().and_then(parse_tres_gpus) {
            g.count = g.count.saturating_mul(nodes);
            out = g;
        }
    }
    out
}

/// Parse GPUs out of a TRES string like `gres:gpu:2`, `gres:gpu:h100:4`, `gres/gpu=2`
/// or `gpu:1,gres:shard:3`. `None` when it names no GPU.
pub fn parse_tres_gpus(s: &str) -> Option<Gpus> {
    let mut found: Option<Gpus> = None;
    for item in s.split(',') {
        let item = item.trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let fields: Vec<&str> = item.split([':', '=']).collect();
        if fields.first() != Some(&"gpu") {
            continue;
        }
        let (gpu_type, count) = match fields.as_slice() {
            [_] => (None, Some(1)),
            [_, c] => match c.parse::<u32>() {
                Ok(n) => (None, Some(n)),
                Err(_) => (Some(c.to_string()), Some(1)),
            },
            [_, t, c, ..] => (Some(t.to_string()), c.parse::<u32>().ok()),
            [] => continue,
        };
        let g = found.get_or_insert_with(Gpus::default);
        g.count = g.count.saturating_add(count.unwrap_or(1));
        if g.gpu_type.is_none() {
            g.gpu_type = gpu_type;
        }
    }
    found
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

/// Fingerprint of everything [`compute::place`] reads from a job (account, user,
/// comments). The background pass keeps a job's placement while this and the snapshot
/// stay the same. `users_generation` stands for the uid cache (jobs without a
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
    h = fnv_int(h, i64::from(job.user_id));
    fnv_int(h, users_generation as i64)
}

/// Fingerprint of everything [`runs`] reports for a job, given its `key_fp`: when it
/// equals what budgetd last acknowledged, the pass does not rebuild or resend the job.
/// Strings by address, as in [`key_fingerprint`].
pub fn sync_fingerprint(job: &job_record_t, key_fp: u64) -> u64 {
    let pending = job_state::is_pending(job.job_state);
    let finished = job_state::is_finished(job.job_state);
    let mut h = fnv_int(key_fp, i64::from(job.job_state));
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

/// Build the sync record(s) for one job at `now`: its current run, plus, for a job
/// requeued since (restart_cnt > 0 and pending), the end of the previous run.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn runs(job: &job_record_t, users: &UserCache, now: i64, out: &mut Vec<JobRun>) {
    // SAFETY: forwarded contract.
    let v = unsafe { view(job, users) };
    let Some(state) = run_state(job.job_state, job.start_time) else {
        return;
    };
    let start = (state != RunState::Pending && job.start_time > 0).then_some(job.start_time);
    // SAFETY: forwarded contract.
    let g = unsafe { gpus(job) };
    // SAFETY: string fields of a valid record.
    let partition = unsafe { text(job.partition) }.map(|p| p.into_owned());
    // SAFETY: as above.
    let nodes = unsafe { text(job.nodes) }.map(|p| p.into_owned());
    let key = v.key(now);
    let free_tier = compute::is_free_tier(&key);
    let min_runtime_secs = [v.admin_comment.as_deref(), v.comment.as_deref()]
        .into_iter()
        .flatten()
        .find_map(|c| {
            policy_core::comment::parse_comment(c)
                .ok()
                .and_then(|r| r.min_runtime)
        })
        .unwrap_or(0);
    let end = match state {
        RunState::Ended | RunState::Requeued => (job.end_time > 0).then_some(job.end_time),
        _ => None,
    };
    let base = JobRun {
        job_id: job.job_id,
        run: u32::from(job.restart_cnt),
        account: ledger_name(&v.account),
        user: v
            .user
            .as_deref()
            .map(ledger_name)
            .unwrap_or_else(|| format!("uid{}", job.user_id)),
        partition,
        gpus: g.count,
        gpu_type: g.gpu_type,
        start,
        end,
        state,
        free_tier,
        min_runtime_secs,
        nodes,
        priority: Some(job.priority),
        reason: None,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_strings() {
        let g = |s| parse_tres_gpus(s);
        assert_eq!(
            g("gres:gpu:2"),
            Some(Gpus {
                count: 2,
                gpu_type: None
            })
        );
        assert_eq!(
            g("gres:gpu:h100:4"),
            Some(Gpus {
                count: 4,
                gpu_type: Some("h100".into())
            })
        );
        assert_eq!(
            g("gres/gpu=3"),
            Some(Gpus {
                count: 3,
                gpu_type: None
            })
        );
        assert_eq!(
            g("gres:gpu"),
            Some(Gpus {
                count: 1,
                gpu_type: None
            })
        );
        assert_eq!(
            g("gres:gpu:b200"),
            Some(Gpus {
                count: 1,
                gpu_type: Some("b200".into())
            })
        );
        assert_eq!(g("gres:shard:3"), None);
        assert_eq!(
            g("gres:shard:3,gres:gpu:1"),
            Some(Gpus {
                count: 1,
                gpu_type: None
            })
        );
        assert_eq!(g(""), None);
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
}
