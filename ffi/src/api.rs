//! Plugin entry-point signatures per Slurm release: the one place that encodes the API
//! tables of `../shared/SLURM-NOTES.md`.
//!
//! Each plugin pins its `#[no_mangle]` exports to these types with a
//! `const _: Type = function;` line, so building against another release fails at compile
//! time instead of at `dlopen` (missing symbol) or, worse, with a mismatched ABI.
//! Symbols a release lacks are simply absent from this module under that cfg.

use crate::SlurmList;
use crate::sys::{job_record_t, slurmdb_assoc_rec_t};

/// Two x86_64 `long double` (x87 80-bit) arguments passed by value.
///
/// Rust has no f80. The SysV ABI passes each `long double` in memory in a 16-byte,
/// 16-aligned slot, exactly like the halves of a 32-byte by-value struct (MEMORY
/// class), so this struct receives both arguments of `priority_p_calc_fs_factor`.
#[cfg(not(slurm_25_11))]
#[repr(C, align(16))]
#[derive(Clone, Copy, Debug, Default)]
pub struct LongDoublePair {
    /// First argument's 16-byte slot (10 significant bytes).
    pub a: [u8; 16],
    /// Second argument's 16-byte slot.
    pub b: [u8; 16],
}

/// Decode an x87 80-bit extended value (little-endian, in the low 10 bytes) to f64.
pub fn f80_to_f64(bytes: &[u8; 16]) -> f64 {
    let mut m = [0u8; 8];
    m.copy_from_slice(&bytes[..8]);
    let mantissa = u64::from_le_bytes(m);
    let se = u16::from_le_bytes([bytes[8], bytes[9]]);
    let sign = if se & 0x8000 != 0 { -1.0 } else { 1.0 };
    let exp = i32::from(se & 0x7fff);
    if exp == 0 && mantissa == 0 {
        return sign * 0.0;
    }
    if exp == 0x7fff {
        return if mantissa << 1 == 0 {
            sign * f64::INFINITY
        } else {
            f64::NAN
        };
    }
    // value = mantissa (with explicit integer bit) * 2^(exp - 16383 - 63)
    let e = if exp == 0 {
        1 - 16383 - 63
    } else {
        exp - 16383 - 63
    };
    // Split the power so intermediate results neither overflow nor underflow needlessly.
    sign * (mantissa as f64) * 2f64.powi(e / 2) * 2f64.powi(e - e / 2)
}

/// Priority plugin (`PriorityType`) operations, in the order of Slurm's `syms[]`.
pub mod priority {
    use super::*;
    #[cfg(not(slurm_24_05))]
    use crate::sys::priority_factors_request_msg_t;

    /// `uint32_t priority_p_set(uint32_t last_prio, job_record_t *job)`.
    /// Called with the job write lock held. Returning 0 holds the job.
    pub type SetFn = unsafe extern "C" fn(u32, *mut job_record_t) -> u32;
    /// `void priority_p_reconfig(bool assoc_clear)`.
    pub type ReconfigFn = unsafe extern "C" fn(bool);
    /// `void priority_p_set_assoc_usage(slurmdb_assoc_rec_t *assoc)`.
    pub type SetAssocUsageFn = unsafe extern "C" fn(*mut slurmdb_assoc_rec_t);
    /// `double priority_p_calc_fs_factor(long double, long double)` (removed in 25.11).
    #[cfg(not(slurm_25_11))]
    pub type CalcFsFactorFn = unsafe extern "C" fn(LongDoublePair) -> f64;
    /// `List priority_p_get_priority_factors_list(req_msg, uid)` (<= 23.11).
    /// 22.05 calls it with no locks held; 23.02+ with job/node/part read locks.
    #[cfg(not(slurm_24_05))]
    pub type GetPriorityFactorsListFn =
        unsafe extern "C" fn(*mut priority_factors_request_msg_t, UidT) -> SlurmList;
    /// `list_t *priority_p_get_priority_factors_list(uid_t uid)` (24.05+).
    #[cfg(slurm_24_05)]
    pub type GetPriorityFactorsListFn = unsafe extern "C" fn(UidT) -> SlurmList;
    /// `void priority_p_job_end(job_record_t *job)`.
    pub type JobEndFn = unsafe extern "C" fn(*mut job_record_t);
    /// `uint32_t priority_p_recover(uint32_t prio_boost)` (23.02+).
    #[cfg(slurm_23_02)]
    pub type RecoverFn = unsafe extern "C" fn(u32) -> u32;
    /// `void priority_p_thread_start(void)` (23.11.6+): where background threads start,
    /// since `init` runs under the config write lock before jobs are loaded there.
    #[cfg(slurm_23_11_6)]
    pub type ThreadStartFn = unsafe extern "C" fn();

    /// True when the plugin must start its background thread from `init` (no
    /// `priority_p_thread_start` hook in this release).
    pub const THREAD_FROM_INIT: bool = !cfg!(slurm_23_11_6);
    /// True when `get_priority_factors_list` runs without slurmctld locks held
    /// (22.05): the plugin must take the job read lock itself.
    pub const FACTORS_NEEDS_OWN_LOCK: bool = !cfg!(slurm_23_02);

    type UidT = crate::sys::uid_t;
}

/// Preemption plugin (`PreemptType`) operations.
///
/// All are called by `slurmctld` with the job lock held (read or write): never lock.
pub mod preempt {
    use crate::sys::{job_queue_rec_t, job_record_t};

    /// `bool preempt_p_job_preempt_check(job_queue_rec_t *preemptor, job_queue_rec_t
    /// *preemptee)`: also used as a comparator when sorting the pending queue, so it
    /// must be a strict weak order.
    pub type JobPreemptCheckFn =
        unsafe extern "C" fn(*mut job_queue_rec_t, *mut job_queue_rec_t) -> bool;
    /// `bool preempt_p_preemptable(job_record_t *preemptee, job_record_t *preemptor)`
    /// (note the order): called for every job of `job_list`, running or not.
    pub type PreemptableFn = unsafe extern "C" fn(*mut job_record_t, *mut job_record_t) -> bool;
    /// `int preempt_p_get_data(job_record_t *job, slurm_preempt_data_type_t, void *data)`
    /// (<= 24.11): ENABLED (`bool *`, job NULL), MODE (`uint16_t *`), PRIO (`uint32_t *`,
    /// ascending = preempted first), GRACE_TIME (`uint32_t *`, seconds).
    #[cfg(not(slurm_25_05))]
    pub type GetDataFn = unsafe extern "C" fn(
        *mut job_record_t,
        crate::sys::slurm_preempt_data_type_t,
        *mut std::ffi::c_void,
    ) -> i32;
    /// `uint32_t preempt_p_get_grace_time(job_record_t *job)` (25.05+).
    #[cfg(slurm_25_05)]
    pub type GetGraceTimeFn = unsafe extern "C" fn(*mut job_record_t) -> u32;
    /// `uint16_t preempt_p_get_mode(job_record_t *job)` (25.05+).
    #[cfg(slurm_25_05)]
    pub type GetModeFn = unsafe extern "C" fn(*mut job_record_t) -> u16;
    /// `uint32_t preempt_p_get_prio(job_record_t *job)` (25.05+).
    #[cfg(slurm_25_05)]
    pub type GetPrioFn = unsafe extern "C" fn(*mut job_record_t) -> u32;
}

/// Job submit plugin (`JobSubmitPlugins`) operations. Called with config/job/node/part
/// read locks held; `err_msg` must be `xmalloc`ed (Slurm `xfree`s it).
pub mod job_submit {
    use crate::sys::{job_desc_msg_t, job_record_t};
    use std::ffi::c_char;

    /// `int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg)`.
    pub type SubmitFn = unsafe extern "C" fn(*mut job_desc_msg_t, u32, *mut *mut c_char) -> i32;
    /// `int job_modify(job_desc_msg_t *job_desc, job_record_t *job_ptr, uint32_t
    /// submit_uid)` (22.05).
    #[cfg(not(slurm_23_02))]
    pub type ModifyFn = unsafe extern "C" fn(*mut job_desc_msg_t, *mut job_record_t, u32) -> i32;
    /// `int job_modify(job_desc_msg_t *, job_record_t *, uint32_t submit_uid, char
    /// **err_msg)` (23.02+).
    #[cfg(slurm_23_02)]
    pub type ModifyFn =
        unsafe extern "C" fn(*mut job_desc_msg_t, *mut job_record_t, u32, *mut *mut c_char) -> i32;
}

/// Site-factor plugin (`PrioritySiteFactorPlugin`) operations, loaded by
/// `priority/multifactor` only (22.05: `src/common/site_factor.c`; 23.02+:
/// `src/interfaces/site_factor.c`), in the order of Slurm's `syms[]`.
pub mod site_factor {
    use super::*;

    /// `void site_factor_p_reconfig(void)`: from multifactor's `priority_p_reconfig`
    /// (`scontrol reconfigure`); dropped from `syms[]` in 24.05.
    #[cfg(not(slurm_24_05))]
    pub type ReconfigFn = unsafe extern "C" fn();
    /// `void site_factor_p_set(job_record_t *)`: from multifactor's `priority_p_set`
    /// (`set_job_prio`: job write lock held) before it sums the factors.
    pub type SetFn = unsafe extern "C" fn(*mut job_record_t);
    /// `void site_factor_p_update(void)`: from multifactor's decay thread, job write
    /// lock held, before it recomputes every priority.
    pub type UpdateFn = unsafe extern "C" fn();
}

/// Common plugin entry points.
pub mod common {
    /// `int init(void)`: 22.05 calls it without locks after jobs are loaded;
    /// 23.02+ under the config write lock before jobs are read.
    pub type InitFn = unsafe extern "C" fn() -> i32;
    /// `int fini(void)`: the library is `dlclose`d right after: join threads first.
    pub type FiniFn = unsafe extern "C" fn() -> i32;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f80(v_bits: u64, se: u16) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&v_bits.to_le_bytes());
        b[8..10].copy_from_slice(&se.to_le_bytes());
        b
    }

    #[test]
    fn decodes_f80() {
        // 1.0 = mantissa 0x8000_0000_0000_0000, exponent 16383
        assert_eq!(f80_to_f64(&f80(1 << 63, 16383)), 1.0);
        assert_eq!(f80_to_f64(&f80(1 << 63, 16384)), 2.0);
        assert_eq!(f80_to_f64(&f80(3 << 62, 16383 | 0x8000)), -1.5);
        assert_eq!(f80_to_f64(&f80(0, 0)), 0.0);
        assert!(f80_to_f64(&f80(1 << 63, 0x7fff)).is_infinite());
        // NO_VAL (0xfffffffe) as long double
        let no_val = f80_to_f64(&f80(0xffff_fffe_u64 << 32, 16383 + 31));
        assert_eq!(no_val, f64::from(0xffff_fffe_u32));
    }
}
