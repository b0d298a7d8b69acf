//! Reading what the preemption rule needs out of `job_record_t`.
//!
//! Every pointer is checked; strings are read lossily through
//! `slurm_plugin_common::cstr`; nothing panics on Slurm data. Callers hold the job lock
//! (Slurm calls every preempt hook under it). The formats inside the strings (the
//! stored contract, TRES, hostlists) are `policy-core`'s; the GPU count and the
//! uid -> name cache are `slurm-plugin-common`'s, as in `priority/budget`. The
//! GPU type is kept so that the rule's views count the job's GPUs weighted by
//! the snapshot's billing weights ([`JobFacts::weight`]). The job's QOS is
//! read as `preempt/qos` reads it ([`QosFacts`]: `qos_ptr`'s id, name and
//! `Preempt=` bit string, [`preempt_words`]).

use policy_core::GpuWeights;
use policy_core::comment::parse_comment;
use policy_core::contract::{Contract, effective_contract, is_free_name};
use policy_core::rebalance::{PendingJob, QosView, RunningJob};
use slurm_ffi::job_state;
use slurm_ffi::sys::{self, job_record_t};
use slurm_plugin_common::cstr::opt_string;
use slurm_plugin_common::gpus::{Gpus, job_gpus};
use slurm_plugin_common::users::UserCache;

/// What the rule needs to know about one job, owned (so it can be cached per pass).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    pub job_id: u32,
    pub account: String,
    /// Empty when the name is not known yet: the job is then placed at its account.
    pub user: String,
    pub contract: Contract,
    /// Start of the current run (0 if not running).
    pub run_start: i64,
    pub gpus: u32,
    /// The GPUs' type as the job names it (`job_gpus`), if any.
    pub gpu_type: Option<String>,
    pub running: bool,
    /// Allocated nodes (hostlist expression), if any.
    pub nodes: Option<String>,
    /// Time limit of the run in seconds; `None`: unlimited (or not set).
    pub time_limit: Option<i64>,
    /// Times the job was requeued before this run (`restart_cnt`).
    pub requeues: u32,
    /// Declared checkpoint interval (`checkpoint=` in the comment), seconds.
    pub checkpoint: Option<i64>,
    /// Its partition's GraceTime in seconds.
    pub grace: i64,
    /// Its partition's `PriorityTier` (`part_ptr->priority_tier`: the
    /// partition it runs in, or, for a pending job, the one Slurm is placing
    /// it in); `None` without a partition record.
    pub partition_tier: Option<u16>,
    /// `Some(name)` when its partition has `PreemptMode=OFF`
    /// (`part_ptr->preempt_mode`): the site's "never preempt these"
    /// ([`RunningJob::partition_preempt_off`]).
    pub partition_preempt_off: Option<String>,
    /// Its QOS (`job_ptr->qos_ptr`) with the QOS its `Preempt=` list names;
    /// `None` without a QOS record ([`RunningJob::qos`]).
    pub qos: Option<QosFacts>,
}

/// A job's QOS as `preempt/qos` reads it, owned: its id, its name, and the
/// data words of its `Preempt=` bit string ([`QosView::preempts`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QosFacts {
    pub id: u32,
    pub name: String,
    /// Trailing zero words dropped: a QOS that lists none holds no words.
    pub preempts: Vec<u64>,
}

impl QosFacts {
    /// The rule's view of it.
    pub fn view(&self) -> QosView<'_> {
        QosView {
            id: self.id,
            name: &self.name,
            preempts: &self.preempts,
        }
    }
}

/// Slurm's bit string signature, its first word (`BITSTR_MAGIC` in
/// `src/common/bitstring.[ch]`, the same from 22.05 to 26.05).
const BITSTR_MAGIC: i64 = 0x4243_4445;
/// Header words before the data: the signature and the size in bits
/// (`BITSTR_OVERHEAD`, 2 from 22.05 to 26.05).
const BITSTR_OVERHEAD: usize = 2;
/// The most bits read from a `Preempt=` bit string. Slurm sizes it to the
/// QOS table (`g_qos_count`: the highest QOS id + 1); a size beyond this is
/// not a QOS table and is read as no list.
const MAX_QOS_BITS: i64 = 1 << 16;

/// The data words of a Slurm bit string (`bitstr_t *`, as `bit_alloc` lays it
/// out in 22.05 to 26.05: `int64_t` words, `[0]` the signature, `[1]` the
/// size in bits, then the bits, bit `i` at `1 << (i % 64)` of data word
/// `i / 64` on a little-endian host), read without calling Slurm: bit `i`
/// of the answer is bit `i` of the string, trailing zero words dropped. NULL,
/// a wrong signature or an implausible size: no words (no QOS listed), never
/// a read past the size the string states (what `bit_test` asserts).
///
/// # Safety
/// `b` must be NULL or point to a Slurm bit string that stays valid and
/// unchanged while this runs (a QOS record's `preempt_bitstr` under the job
/// lock, as `preempt/qos` reads it).
pub unsafe fn preempt_words(b: *const i64) -> Vec<u64> {
    if b.is_null() {
        return Vec::new();
    }
    // SAFETY: a non-NULL bit string has its two header words.
    let (magic, nbits) = unsafe { (b.read(), b.add(1).read()) };
    if magic != BITSTR_MAGIC || !(0..=MAX_QOS_BITS).contains(&nbits) {
        return Vec::new();
    }
    let bits = usize::try_from(nbits).unwrap_or(0);
    // SAFETY: `bit_alloc(nbits)` allocates the header and ceil(nbits / 64) words.
    let data = unsafe { std::slice::from_raw_parts(b.add(BITSTR_OVERHEAD), bits.div_ceil(64)) };
    let word = |i: usize| {
        // Slurm's `_bit_mask` counts from the other end on a big-endian host.
        let w = u64::from_ne_bytes(data[i].to_ne_bytes());
        let w = if cfg!(target_endian = "big") {
            w.reverse_bits()
        } else {
            w
        };
        // Bits past the stated size are not the string's.
        match bits - i * 64 {
            n if n < 64 => w & ((1u64 << n) - 1),
            _ => w,
        }
    };
    let used = (0..data.len())
        .rev()
        .find(|&i| word(i) != 0)
        .map_or(0, |i| i + 1);
    (0..used).map(word).collect()
}

impl JobFacts {
    /// The policy core's view of this job.
    pub fn view(&self) -> policy_core::preempt::JobView<'_> {
        policy_core::preempt::JobView {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.contract.free_tier,
            run_start: self.run_start,
            min_runtime: self.contract.min_runtime,
            gpus: self.gpus,
        }
    }

    /// Billing weight of one of its GPUs under `weights` (the snapshot's;
    /// `None`, safe mode: 1, every GPU alike).
    pub fn weight(&self, weights: Option<&GpuWeights>) -> f64 {
        weights.map_or(1.0, |w| w.weight(self.gpu_type.as_deref()))
    }

    /// The cost-aware rule's view of this job as a running job, its GPUs
    /// weighted under `weights` ([`JobFacts::weight`]).
    pub fn running_job(&self, weights: Option<&GpuWeights>) -> RunningJob<'_> {
        RunningJob {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.contract.free_tier,
            gpus: self.gpus,
            weight: self.weight(weights),
            run_start: self.run_start,
            time_limit: self.time_limit,
            min_runtime: self.contract.min_runtime,
            checkpoint: self.checkpoint,
            grace: self.grace,
            requeues: self.requeues,
            leaf: None,
            partition_tier: self.partition_tier,
            partition_preempt_off: self.partition_preempt_off.as_deref(),
            qos: self.qos.as_ref().map(QosFacts::view),
        }
    }

    /// The cost-aware rule's view of this job as a pending job, weighted as
    /// [`JobFacts::running_job`].
    pub fn pending_job(&self, weights: Option<&GpuWeights>) -> PendingJob<'_> {
        PendingJob {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.contract.free_tier,
            gpus: self.gpus,
            weight: self.weight(weights),
            leaf: None,
            partition_tier: self.partition_tier,
            qos: self.qos.as_ref().map(QosFacts::view),
        }
    }
}

/// A time limit in minutes as seconds; `NO_VAL` and `INFINITE` are none.
pub fn limit_secs(minutes: u32) -> Option<i64> {
    (minutes != slurm_ffi::NO_VAL && minutes != slurm_ffi::INFINITE)
        .then(|| i64::from(minutes) * 60)
}

/// Whether a job is running now (suspended jobs hold no GPUs for the rule).
pub fn is_running(job: &job_record_t) -> bool {
    job_state::is_running(job.job_state)
}

/// Read a job record.
///
/// # Safety
/// `job` must be a valid job record under a Slurm job lock: its string fields, its
/// QOS record (its `Preempt=` bit string too) and its GRES list are read.
pub unsafe fn facts(job: &job_record_t, users: &UserCache, default_min_runtime: i64) -> JobFacts {
    // SAFETY: forwarded contract.
    unsafe { facts_with_gpus(job, users, default_min_runtime, job_gpus(job)) }
}

/// [`facts`] with the job's GPUs already read (the GRES list walk needs a live Slurm).
///
/// # Safety
/// As [`facts`].
pub unsafe fn facts_with_gpus(
    job: &job_record_t,
    users: &UserCache,
    default_min_runtime: i64,
    gpus: Gpus,
) -> JobFacts {
    // SAFETY (every read below): string fields of a valid record are NULL or
    // NUL-terminated while the lock is held; qos_ptr is NULL or a valid QOS
    // record, its preempt_bitstr NULL or a bit string.
    let (partition, qos) = unsafe {
        (
            opt_string(job.partition),
            job.qos_ptr.as_ref().map(|q| {
                (
                    q.id,
                    opt_string(q.name),
                    preempt_words(q.preempt_bitstr.cast_const()),
                )
            }),
        )
    };
    let qos_name = qos.as_ref().and_then(|q| q.1.as_deref());
    let free_by_name = is_free_name(partition.as_deref()) || is_free_name(qos_name);
    // SAFETY: as above.
    let (admin_comment, comment) =
        unsafe { (opt_string(job.admin_comment), opt_string(job.comment)) };
    let checkpoint = comment
        .as_deref()
        .and_then(|c| parse_comment(c).ok())
        .and_then(|r| r.checkpoint);
    let contract = effective_contract(
        admin_comment.as_deref(),
        comment.as_deref(),
        free_by_name,
        default_min_runtime,
    );
    // SAFETY: as above.
    let user = match unsafe { opt_string(job.user_name) } {
        Some(n) if !n.is_empty() => n,
        _ => users
            .get(job.user_id)
            .map(|n| n.to_string())
            .unwrap_or_default(),
    };
    let running = is_running(job);
    // SAFETY: part_ptr is NULL or a valid partition record under the job lock.
    let part = unsafe { job.part_ptr.as_ref() };
    JobFacts {
        job_id: job.job_id,
        // SAFETY: as above.
        account: unsafe { opt_string(job.account) }
            .unwrap_or_default()
            .to_lowercase(),
        user,
        contract,
        run_start: if running { job.start_time } else { 0 },
        gpus: gpus.count,
        gpu_type: gpus.gpu_type,
        running,
        // SAFETY: as above.
        nodes: unsafe { opt_string(job.nodes) },
        time_limit: limit_secs(job.time_limit),
        requeues: u32::from(job.restart_cnt),
        checkpoint,
        grace: part.map_or(0, |p| i64::from(p.grace_time)),
        partition_tier: part.map(|p| p.priority_tier),
        // The name is read only for such a partition (rare), so the common
        // path allocates nothing more; NO_VAL16 (unset) is not OFF.
        partition_preempt_off: part
            .filter(|p| u32::from(p.preempt_mode) == sys::PREEMPT_MODE_OFF)
            // SAFETY: as above (the partition's name).
            .map(|p| {
                unsafe { opt_string(p.name) }
                    .or(partition)
                    .unwrap_or_default()
            }),
        // A QOS record without a name still has its id and list (the words
        // then name it by id).
        qos: qos.map(|(id, name, preempts)| QosFacts {
            id,
            name: name.unwrap_or_else(|| format!("id {id}")),
            preempts,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slurm_ffi::{
        EmptyRecord,
        sys::{part_record_t, slurmdb_qos_rec_t},
    };
    use slurm_plugin_common::gpus::requested_gpus;
    use slurm_plugin_common::test_records::running_job;

    #[test]
    fn facts_of_a_record() {
        let mut job = running_job(9, c"TeamA", c"gres/gpu:h100=4", 1000, 2);
        let mut qos = slurmdb_qos_rec_t::empty();
        job.user_id = 4242;
        job.nodes = c"gpu[1-2]".as_ptr().cast_mut();
        job.comment = c"min_runtime=2h checkpoint=30m".as_ptr().cast_mut();
        job.time_limit = 90;
        job.restart_cnt = 2;
        let users = UserCache::default();
        // SAFETY: a valid record with literal strings, read by this thread only.
        let read =
            |job: &job_record_t| unsafe { facts_with_gpus(job, &users, 600, requested_gpus(job)) };
        let f = read(&job);
        assert_eq!((f.job_id, f.account.as_str(), f.gpus), (9, "teama", 8));
        // Its GPUs' type, weighted by the snapshot's weights (safe mode: 1).
        assert_eq!(f.gpu_type.as_deref(), Some("h100"));
        let mut w = GpuWeights::default();
        w.set("H100", 1.5).expect("weight");
        assert_eq!((f.weight(Some(&w)), f.weight(None)), (1.5, 1.0));
        assert_eq!(f.running_job(Some(&w)).weighted_gpus(), 12.0);
        assert_eq!(f.pending_job(Some(&w)).weighted_gpus(), 12.0);
        assert_eq!((f.run_start, f.running), (1000, true));
        assert_eq!(f.nodes.as_deref(), Some("gpu[1-2]"));
        assert_eq!(
            (f.time_limit, f.requeues, f.checkpoint, f.grace),
            (Some(5400), 2, Some(1800), 0)
        );
        job.time_limit = slurm_ffi::INFINITE;
        assert_eq!(read(&job).time_limit, None);
        job.time_limit = 90;
        assert_eq!(
            f.contract,
            Contract {
                min_runtime: 7200,
                free_tier: false
            }
        );
        // No user name on the record yet: the cache, after the background thread
        // resolved the miss this read recorded.
        assert_eq!(f.user, "");
        users.resolve_misses(|uid| Some(format!("u{uid}")));
        assert_eq!(read(&job).user, "u4242");
        job.user_name = c"alice".as_ptr().cast_mut();
        assert_eq!(read(&job).user, "alice");
        // The stored contract wins over the comment; a free QOS only counts without one.
        qos.name = c"free".as_ptr().cast_mut();
        job.qos_ptr = &mut qos;
        assert!(read(&job).contract.free_tier);
        job.admin_comment = c"budget:min_runtime=60".as_ptr().cast_mut();
        assert_eq!(read(&job).contract.min_runtime, 60);
        assert!(!read(&job).contract.free_tier);
        // The partition's PriorityTier and GraceTime reach the rule's views.
        assert_eq!(f.partition_tier, None);
        let mut part = part_record_t::empty();
        part.priority_tier = 3;
        part.grace_time = 30;
        // Slurm's value for a partition without PreemptMode= (a zeroed record
        // would read as OFF).
        part.preempt_mode = slurm_ffi::NO_VAL16;
        job.part_ptr = &mut part;
        let f = read(&job);
        assert_eq!((f.partition_tier, f.grace), (Some(3), 30));
        assert_eq!(f.running_job(None).partition_tier, Some(3));
        assert_eq!(f.pending_job(None).partition_tier, Some(3));
        assert_eq!(f.running_job(None).partition_preempt_off, None);
        // A partition of its own mode other than OFF: preemptable.
        let mut cancel = part_record_t::empty();
        cancel.preempt_mode = sys::PREEMPT_MODE_CANCEL as u16;
        job.part_ptr = &mut cancel;
        assert_eq!(read(&job).partition_preempt_off, None);
        // PreemptMode=OFF: named by the partition record, else the job's.
        let mut off = part_record_t::empty();
        off.preempt_mode = sys::PREEMPT_MODE_OFF as u16;
        job.part_ptr = &mut off;
        job.partition = c"frozen".as_ptr().cast_mut();
        assert_eq!(
            read(&job).running_job(None).partition_preempt_off,
            Some("frozen")
        );
        let mut named = part_record_t::empty();
        named.preempt_mode = sys::PREEMPT_MODE_OFF as u16;
        named.name = c"cold".as_ptr().cast_mut();
        job.part_ptr = &mut named;
        assert_eq!(read(&job).partition_preempt_off.as_deref(), Some("cold"));
        job.part_ptr = std::ptr::null_mut();
        job.partition = std::ptr::null_mut();
        // A pending job holds no run.
        job.job_state = slurm_ffi::sys::JOB_PENDING;
        assert_eq!((read(&job).run_start, read(&job).running), (0, false));
    }

    /// A bit string as Slurm's `bit_alloc(nbits)` lays it out, with `set` set.
    fn bitstr(nbits: i64, set: &[u32]) -> Vec<i64> {
        let mut b = vec![0i64; 2 + usize::try_from(nbits).unwrap().div_ceil(64)];
        b[0] = BITSTR_MAGIC;
        b[1] = nbits;
        for &i in set {
            let w = 2 + usize::try_from(i / 64).unwrap();
            b[w] |= 1i64 << (i % 64);
        }
        b
    }

    #[test]
    fn the_qos_and_its_preempt_list_of_a_record() {
        let mut job = running_job(9, c"TeamA", c"gres/gpu:h100=4", 1000, 2);
        let users = UserCache::default();
        // SAFETY: a valid record with literal strings and live bit strings,
        // read by this thread only.
        let read =
            |job: &job_record_t| unsafe { facts_with_gpus(job, &users, 600, requested_gpus(job)) };
        // No QOS record: no QOS relation (the budget rule alone).
        let f = read(&job);
        assert_eq!(f.qos, None);
        assert_eq!(
            (f.running_job(None).qos, f.pending_job(None).qos),
            (None, None)
        );
        // normal (id 1) lists scavenger (2) and wide (70, the second word) in
        // its Preempt=, as sacctmgr's `Preempt=scavenger,wide` sets the bits.
        let mut bits = bitstr(71, &[2, 70]);
        let mut normal = slurmdb_qos_rec_t::empty();
        normal.id = 1;
        normal.name = c"normal".as_ptr().cast_mut();
        normal.preempt_bitstr = bits.as_mut_ptr();
        job.qos_ptr = &mut normal;
        // The record's list changes only through the job's pointer from here on.
        let q = job.qos_ptr;
        let set = |b: *mut i64| {
            // SAFETY: `q` points to `normal`, alive for the whole test and
            // touched through this pointer only.
            unsafe { (*q).preempt_bitstr = b }
        };
        let f = read(&job);
        let qf = f.qos.clone().expect("a QOS");
        assert_eq!((qf.id, qf.name.as_str()), (1, "normal"));
        assert_eq!(qf.preempts, vec![1 << 2, 1 << 6]);
        let (rv, pv) = (f.running_job(None).qos, f.pending_job(None).qos);
        assert_eq!(rv, Some(qf.view()));
        assert_eq!(pv, Some(qf.view()));
        let view = |id, name| QosView {
            id,
            name,
            preempts: &[],
        };
        assert!(qf.view().lists(&view(2, "scavenger")));
        assert!(qf.view().lists(&view(70, "wide")));
        assert!(!qf.view().lists(&view(3, "high")));
        assert!(!qf.view().lists(&view(64, "other")));
        assert!(!qf.view().lists(&view(1000, "far")));
        let preempts = |job: &job_record_t| read(job).qos.expect("a QOS").preempts;
        // Slurm's empty list (a bit string with no bit set) and no bit
        // string at all: it lists none (no words kept).
        let mut empty = bitstr(8, &[]);
        set(empty.as_mut_ptr());
        assert_eq!(preempts(&job), Vec::<u64>::new());
        set(std::ptr::null_mut());
        assert_eq!(preempts(&job), Vec::<u64>::new());
        // Never read past the size the string states, nor one that is not a
        // bit string (wrong signature, a size that is no QOS table).
        let mut past = bitstr(64, &[2, 63]);
        past[1] = 3;
        set(past.as_mut_ptr());
        assert_eq!(preempts(&job), vec![1 << 2]);
        let mut garbage = bitstr(64, &[2]);
        garbage[0] = 7;
        set(garbage.as_mut_ptr());
        assert!(preempts(&job).is_empty());
        let mut negative = bitstr(64, &[2]);
        negative[1] = -1;
        set(negative.as_mut_ptr());
        assert!(preempts(&job).is_empty());
        let mut huge = bitstr(64, &[2]);
        huge[1] = MAX_QOS_BITS + 1;
        set(huge.as_mut_ptr());
        assert!(preempts(&job).is_empty());
        // A QOS record without a name is named by its id.
        // SAFETY: as in `set`.
        unsafe { (*q).name = std::ptr::null_mut() };
        assert_eq!(read(&job).qos.expect("a QOS").name, "id 1");
        // The free QOS by name still makes a job free (no contract stored).
        let mut free = slurmdb_qos_rec_t::empty();
        free.id = 2;
        free.name = c"free".as_ptr().cast_mut();
        job.qos_ptr = &mut free;
        let f = read(&job);
        assert!(f.contract.free_tier);
        assert_eq!(f.qos.map(|q| (q.id, q.name)), Some((2, "free".to_string())));
    }
}
