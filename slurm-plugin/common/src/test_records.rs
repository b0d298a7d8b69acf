//! Job records for the plugins' tests (feature `test-records`): the running
//! job every record test starts from, so each test sets only the fields it is
//! about. Never built into a plugin.

use std::ffi::CStr;

use slurm_ffi::EmptyRecord;
use slurm_ffi::sys::job_record_t;

/// A running job of `account` started at `start_time` on `node_cnt` nodes with
/// `tres_per_node` (e.g. `c"gres/gpu:h100=4"`); every other field zero or NULL.
pub fn running_job(
    job_id: u32,
    account: &'static CStr,
    tres_per_node: &'static CStr,
    start_time: i64,
    node_cnt: u32,
) -> job_record_t {
    let mut job = job_record_t::empty();
    job.job_id = job_id;
    job.job_state = slurm_ffi::sys::JOB_RUNNING;
    job.start_time = start_time;
    job.node_cnt = node_cnt;
    job.account = account.as_ptr().cast_mut();
    job.tres_per_node = tres_per_node.as_ptr().cast_mut();
    job
}
