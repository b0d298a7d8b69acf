//! The GPUs a job record asks for (or holds once running): one reading for both
//! `priority/budget` (the ledger it syncs to budgetd) and `preempt/budget` (the
//! holdings the rebalancing rule weighs).
//!
//! The structured request `gres_list_req` comes first: it covers every way to ask
//! (`--gres`, `--gpus`, `--gpus-per-node`, `--gpus-per-task`, `--gpus-per-socket`).
//! Without it, the request strings `tres_per_job` / `tres_per_node` are read with
//! [`policy_core::tres`]. `tres_req_cnt` has no GPU slot without slurmdbd, so it is
//! not used (SLURM-NOTES).

use slurm_ffi::sys::{gres_job_state_t, gres_state_t, job_record_t};
use slurm_ffi::{NO_VAL, NO_VAL64};

use crate::controller::for_each;
use crate::cstr::opt_str;

/// GPU count and type of a job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gpus {
    pub count: u32,
    pub gpu_type: Option<String>,
}

fn valid(n: u64) -> bool {
    n != 0 && n != NO_VAL64 && n != u64::MAX
}

/// Allocated nodes if running, else the requested minimum, else 1.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
unsafe fn nodes(job: &job_record_t) -> u32 {
    if job.node_cnt > 0 && job.node_cnt != NO_VAL {
        return job.node_cnt;
    }
    // SAFETY: details is NULL or a valid struct owned by the record, under the lock.
    unsafe { job.details.as_ref() }
        .map(|d| d.min_nodes)
        .filter(|n| *n > 0 && *n != NO_VAL)
        .unwrap_or(1)
}

/// GPUs of a job: its GRES request list, else its request strings.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock (its lists and strings
/// are read).
pub unsafe fn job_gpus(job: &job_record_t) -> Gpus {
    // SAFETY: forwarded contract.
    let listed = unsafe { gres_list_gpus(job) };
    if listed.count > 0 {
        return listed;
    }
    // SAFETY: forwarded contract.
    unsafe { requested_gpus(job) }
}

/// GPUs in `tres_per_job`, else `tres_per_node` x the job's nodes.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
pub unsafe fn requested_gpus(job: &job_record_t) -> Gpus {
    // SAFETY: string fields of a valid record under the lock.
    let (per_job, per_node) = unsafe { (opt_str(job.tres_per_job), opt_str(job.tres_per_node)) };
    // SAFETY: forwarded contract.
    let nodes = unsafe { nodes(job) };
    let g = policy_core::tres::job_gpus(per_job.as_deref(), per_node.as_deref(), nodes);
    Gpus {
        count: g.count,
        gpu_type: g.gpu_type.filter(|_| g.count > 0).map(str::to_string),
    }
}

/// GPUs in the structured request `gres_list_req` (0 without one).
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock.
unsafe fn gres_list_gpus(job: &job_record_t) -> Gpus {
    // SAFETY: forwarded contract.
    let nodes = unsafe { nodes(job) };
    // SAFETY: details is NULL or a valid struct owned by the record, under the lock.
    let tasks = unsafe { job.details.as_ref() }
        .map(|d| d.num_tasks)
        .filter(|n| *n > 0 && *n != NO_VAL)
        .unwrap_or(nodes);
    let mut out = Gpus::default();
    // SAFETY: gres_list_req is NULL or a list of gres_state_t* under the job lock;
    // each item's gres_data is the job-state struct of that GRES.
    unsafe {
        for_each(job.gres_list_req, |p: *mut gres_state_t| {
            let Some(g) = p.as_ref() else { return };
            if opt_str(g.gres_name).as_deref() != Some("gpu") {
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
                out.gpu_type = opt_str(js.type_name).map(|t| t.into_owned());
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_ffi::{EmptyRecord, JobDetails};

    #[test]
    fn the_request_strings_count_per_job_else_per_node() {
        let (mut details, mut job) = (JobDetails::empty(), job_record_t::empty());
        // SAFETY: a valid record with literal strings, read by this thread only.
        // (`job_gpus` reads them only without a GRES list, which needs a live Slurm.)
        let gpus = |job: &job_record_t| unsafe { requested_gpus(job) };
        assert_eq!(gpus(&job), Gpus::default());
        details.min_nodes = 3;
        job.details = &mut details;
        job.tres_per_node = c"gres:gpu:h100:2".as_ptr().cast_mut();
        // Pending: per node x the requested minimum of nodes.
        let typed = |count| Gpus {
            count,
            gpu_type: Some("h100".into()),
        };
        assert_eq!(gpus(&job), typed(6));
        // Running: x the allocated nodes.
        job.node_cnt = 2;
        assert_eq!(gpus(&job), typed(4));
        job.node_cnt = NO_VAL;
        assert_eq!(gpus(&job), typed(6));
        // A per-job request wins.
        job.tres_per_job = c"gres/gpu=5".as_ptr().cast_mut();
        assert_eq!(gpus(&job).count, 5);
        job.tres_per_job = c"gres/shard=5".as_ptr().cast_mut();
        assert_eq!(gpus(&job), typed(6));
    }
}
