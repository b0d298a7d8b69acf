//! The jobs as the rule sees them ([`RunningJob`], [`PendingJob`], a window's
//! [`PastPreemption`]s) and their amounts: weighted GPUs, the one formula
//! ([`weighted_gpus`]), and the work a victim loses ([`expected_lost_gpu_secs`]);
//! a job's QOS with the QOS its `Preempt=` list names ([`QosView`]).

/// A running job as the plugin sees it in `job_record_t`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RunningJob<'a> {
    pub job_id: u32,
    pub account: &'a str,
    pub user: &'a str,
    pub free_tier: bool,
    /// GPUs as Slurm places them (raw count).
    pub gpus: u32,
    /// Billing weight of one of its GPUs (`GpuWeights::weight` of its GPU
    /// type; 1.0 for untyped GPUs on a uniform site). The rule counts the job
    /// as [`RunningJob::weighted_gpus`].
    pub weight: f64,
    /// Start of the current run.
    pub run_start: i64,
    /// Time limit of the run in seconds; `None`: unlimited.
    pub time_limit: Option<i64>,
    /// Declared minimum runtime in seconds.
    pub min_runtime: i64,
    /// Declared checkpoint interval in seconds (`checkpoint=` in the comment).
    pub checkpoint: Option<i64>,
    /// The partition's GraceTime in seconds: a victim keeps running this long.
    pub grace: i64,
    /// Times the job was requeued before this run (Slurm's `restart_cnt`).
    pub requeues: u32,
    /// Its place in the snapshot (`FairShare::place(account, user).node`) when
    /// the caller already knows it from the same snapshot (a per-pass memo);
    /// `None`: placed by name here.
    pub leaf: Option<usize>,
    /// `PriorityTier` of the partition it runs in (slurm.conf), the order
    /// `preempt/partition_prio` preempts by; `None`: not known (the simulator,
    /// a reader without Slurm's partitions), and the tier clause of
    /// [`decide`](super::decide) stays out of it.
    pub partition_tier: Option<u16>,
    /// `Some(name)`: it runs in partition `name`, whose `PreemptMode` is `OFF`
    /// in slurm.conf (the site said "never preempt these"), so no preemptor
    /// takes it, as `preempt/partition_prio` never does; `None`: its
    /// partition allows preemption, or is not known.
    pub partition_preempt_off: Option<&'a str>,
    /// Its QOS and the QOS that one may preempt (`job_ptr->qos_ptr`), the
    /// order `preempt/qos` preempts by; `None`: not known (no QOS record,
    /// the simulator, budgetd), and the QOS clause of
    /// [`decide`](super::decide) stays out of it.
    pub qos: Option<QosView<'a>>,
}

/// A job's QOS as `preempt/qos` reads it (`slurmdb_qos_rec_t`): its id, its
/// name (for the words), and the ids of the QOS its `Preempt=` list names
/// (sacctmgr; Slurm keeps them as the bit string `preempt_bitstr`, bit `i`
/// set for QOS id `i`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QosView<'a> {
    pub id: u32,
    pub name: &'a str,
    /// The bit string's data words: QOS id `i` is bit `i % 64` of word
    /// `i / 64` (the layout of Slurm's `bitstr_t` past its two header words,
    /// little-endian). Empty: it lists none.
    pub preempts: &'a [u64],
}

impl QosView<'_> {
    /// Whether this QOS's `Preempt=` list names `other`, as `preempt/qos`
    /// tests it (`bit_test(qos_or->preempt_bitstr, qos_ee->id)`). A QOS never
    /// lists itself for this rule: the same QOS is `PreemptMode=WITHIN`'s
    /// business, which the rule does not read.
    pub fn lists(&self, other: &QosView<'_>) -> bool {
        if self.id == other.id {
            return false;
        }
        let word = usize::try_from(other.id / 64).ok();
        word.and_then(|w| self.preempts.get(w))
            .is_some_and(|bits| bits & (1u64 << (other.id % 64)) != 0)
    }
}

impl RunningJob<'_> {
    /// Its size for the rule, in weighted GPUs ([`weighted_gpus`]).
    pub fn weighted_gpus(&self) -> f64 {
        weighted_gpus(self.gpus, self.weight)
    }

    /// When the run must end at the latest (its time limit); `i64::MAX` if unlimited.
    pub fn limit_end(&self) -> i64 {
        match self.time_limit {
            Some(l) => self.run_start.saturating_add(l.max(0)),
            None => i64::MAX,
        }
    }
}

/// A pending job (a preemptor, or demand).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PendingJob<'a> {
    pub job_id: u32,
    pub account: &'a str,
    pub user: &'a str,
    pub free_tier: bool,
    /// GPUs it asks for (raw count).
    pub gpus: u32,
    /// As [`RunningJob::weight`].
    pub weight: f64,
    /// As [`RunningJob::leaf`].
    pub leaf: Option<usize>,
    /// `PriorityTier` of the partition Slurm is placing it in (a job
    /// submitted to several is tried in each in turn), as
    /// [`RunningJob::partition_tier`].
    pub partition_tier: Option<u16>,
    /// As [`RunningJob::qos`].
    pub qos: Option<QosView<'a>>,
}

impl PendingJob<'_> {
    /// Its size for the rule, in weighted GPUs ([`weighted_gpus`]).
    pub fn weighted_gpus(&self) -> f64 {
        weighted_gpus(self.gpus, self.weight)
    }
}

/// `gpus` GPUs of billing weight `weight` in weighted GPUs, the unit of
/// entitlements (allocations are weighted GPU-hours, docs/design.md §2.3):
/// the one formula every holding, demand, victim size and in-flight amount of
/// this module is counted with. A weight that is not a finite number above 0
/// (never a validated `GpuWeights` one) counts as 1.
pub fn weighted_gpus(gpus: u32, weight: f64) -> f64 {
    f64::from(gpus) * billing_weight(weight)
}

/// Work lost (raw GPU-seconds) by a job whose GPUs weigh `weight`, in the
/// weighted GPU-seconds a side's lost-work budget is written in (the weight
/// read as [`weighted_gpus`] reads it).
pub fn weighted_lost_gpu_secs(lost_gpu_secs: f64, weight: f64) -> f64 {
    lost_gpu_secs.max(0.0) * billing_weight(weight)
}

/// A billing weight as this module counts it: one that is not a finite
/// number above 0 (never a validated `GpuWeights` one) counts as 1.
pub(super) fn billing_weight(weight: f64) -> f64 {
    if weight.is_finite() && weight > 0.0 {
        weight
    } else {
        1.0
    }
}

/// A sum or difference of weighted GPUs rounded to 1e-9 GPU, so that float
/// error never decides `held >= entitled` (ten GPUs of weight 2.2 hold 22,
/// not 22.000000000000004) and the result does not depend on the order of
/// the jobs. Whole numbers (every amount on a uniform site) are kept as they
/// are.
pub(super) fn tidy(x: f64) -> f64 {
    if x.fract() == 0.0 || !x.is_finite() {
        return x;
    }
    let r = (x * 1e9).round() / 1e9;
    if r.is_finite() { r } else { x }
}

/// A rebalancing preemption that happened (from the preemption record).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PastPreemption<'a> {
    pub at: i64,
    pub preemptor_account: &'a str,
    pub preemptor_user: &'a str,
    pub victim_account: &'a str,
    pub victim_user: &'a str,
    /// Work lost (raw GPU-seconds), as [`expected_lost_gpu_secs`] estimated it.
    pub lost_gpu_secs: f64,
    /// Billing weight of one of the victim's GPUs (as [`RunningJob::weight`]):
    /// the preemptor side's lost-work budget is charged
    /// [`weighted_lost_gpu_secs`]; the site cap counts the raw GPU-seconds.
    pub weight: f64,
}

/// GPU-seconds of work a victim loses if SIGTERM reaches it at `now`: everything
/// since its last checkpoint (declared interval counted from the run start) when
/// its GraceTime is over, or its whole run when it declared none.
pub fn expected_lost_gpu_secs(v: &RunningJob<'_>, now: i64) -> f64 {
    let ran = (now - v.run_start).max(0).saturating_add(v.grace.max(0));
    let since = match v.checkpoint {
        Some(c) if c > 0 => ran % c,
        _ => ran,
    };
    since as f64 * f64::from(v.gpus)
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::wait::unit;
    use super::super::*;
    use super::*;

    #[test]
    fn weighted_amounts_are_exact_and_read_as_numbers() {
        // Ten GPUs of weight 2.2 are 22 weighted GPUs, not 22.000000000000004:
        // a side entitled to 22 holding them is at its entitlement, not above.
        let fs = two(22.0, 0.0, 0.0);
        let running = jobs_of("a", "ua", 1, 10, 1, 2.2);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [],
            [],
            None,
            RebalancePolicy::default(),
            H,
        );
        let side = st.side(&fs, fs.account("a").unwrap()).unwrap();
        assert_eq!((side.held, side.entitled), (22.0, 22.0));
        assert_eq!(weighted_gpus(3, 2.2), 3.0 * 2.2);
        // A weight that is not a positive number counts as 1.
        for w in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            assert_eq!(weighted_gpus(4, w), 4.0);
        }
        assert_eq!(gpus_text(22.0), "22");
        assert_eq!(gpus_text(24.2), "24.2");
        assert_eq!(gpus_text(1.0 / 3.0), "0.33");
        // A uniform site's messages keep saying "GPUs".
        assert_eq!(unit(false), "GPUs");
    }
}
