//! The submission and modification rules of `job_submit/budget`, as pure functions of
//! what the job asks for, the site policy and the (possibly missing) fair-share
//! snapshot. The FFI layer (`lib.rs`) only reads the C structs into these inputs and
//! writes the outcome back, so every rule is unit-tested here.
//!
//! Choices (documented in ARCHITECTURE.md and slurm-conf):
//! - Free tier: the comment word `unallocated` (or `free`), or a partition or QOS named
//!   `free`. A free job has no protection, so declaring `min_runtime` with it is refused
//!   rather than silently ignored.
//! - Time limit: `--time` if given; else the partition's `DefaultTime`, else its
//!   `MaxTime` (what Slurm itself will apply); unlimited means no check.
//! - Accounts: with a fresh snapshot, a non-free job must name an account of the budget
//!   tree; in safe mode (no fresh snapshot) unknown accounts are accepted (and logged),
//!   because a service outage must not stop submissions.
//! - Interactive jobs (`salloc`/`srun` outside a batch script) cannot be requeued after
//!   their window, so only free-tier ones are accepted.

use budget_protocol::Policy;
use policy_core::FairShare;
use policy_core::comment::{CommentError, parse_comment};
use policy_core::contract::{Contract, format_admin_comment, is_free_name};
use policy_core::format_duration;

/// What a submission asks for.
#[derive(Debug, Clone, Default)]
pub struct SubmitRequest<'a> {
    pub comment: Option<&'a str>,
    /// `admin_comment` set at submission (only operators can).
    pub admin_comment: Option<&'a str>,
    pub account: Option<&'a str>,
    pub partition: Option<&'a str>,
    pub qos: Option<&'a str>,
    /// A batch script is attached (sbatch).
    pub batch: bool,
    /// Effective time limit in seconds and where it comes from; `None` = unlimited.
    pub time_limit: Option<(i64, String)>,
}

/// Why a request is refused; the message is shown to the user by `sbatch`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejection {
    pub kind: RejectKind,
    pub message: String,
}

/// Class of rejection, mapped to a Slurm error code by the FFI layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RejectKind {
    BadContract,
    TimeLimit,
    Account,
    NotRequeueable,
    Denied,
}

/// An accepted submission: what to write back into the job description.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Accepted {
    pub contract: Contract,
    pub admin_comment: String,
    /// Something worth a log line (e.g. unknown account accepted in safe mode).
    pub note: Option<String>,
}

const PREFIX: &str = "slurm-budget";

fn reject(kind: RejectKind, message: String) -> Rejection {
    Rejection {
        kind,
        message: format!("{PREFIX}: {message}"),
    }
}

fn comment_error(e: &CommentError) -> String {
    format!(
        "invalid --comment: {e}. Example: sbatch --comment min_runtime=4h (the job is never \
         preempted during its first 4 hours)"
    )
}

/// Validate a submission.
pub fn validate_submit(
    req: &SubmitRequest<'_>,
    policy: &Policy,
    fair_share: Option<&FairShare>,
) -> Result<Accepted, Rejection> {
    let parsed = parse_comment(req.comment.unwrap_or(""))
        .map_err(|e| reject(RejectKind::BadContract, comment_error(&e)))?;
    let free_tier = parsed.free_tier || is_free_name(req.partition) || is_free_name(req.qos);
    let mut note = None;
    let min_runtime = if free_tier {
        if let Some(m) = parsed.min_runtime {
            return Err(reject(
                RejectKind::BadContract,
                format!(
                    "min_runtime={} cannot be combined with the free tier: free-tier jobs \
                     have no protection and may be preempted at any time. Drop min_runtime, \
                     or leave the free tier to run under your budget",
                    format_duration(m)
                ),
            ));
        }
        0
    } else {
        let m = match parsed.min_runtime {
            Some(m) => m,
            None if policy.require_min_runtime => {
                return Err(reject(
                    RejectKind::BadContract,
                    "this site requires a declared minimum runtime: add --comment \
                     min_runtime=DURATION (e.g. min_runtime=4h), or use the free tier with \
                     --comment unallocated"
                        .into(),
                ));
            }
            None => policy.default_min_runtime_secs.max(0),
        };
        if m > policy.max_min_runtime_secs {
            return Err(reject(
                RejectKind::BadContract,
                format!(
                    "min_runtime={} is above this site's maximum of {}",
                    format_duration(m),
                    format_duration(policy.max_min_runtime_secs)
                ),
            ));
        }
        if let Some((limit, source)) = &req.time_limit
            && m > *limit
        {
            let what = if parsed.min_runtime.is_some() {
                format!("min_runtime={}", format_duration(m))
            } else {
                format!("the site default min_runtime={}", format_duration(m))
            };
            return Err(reject(
                RejectKind::TimeLimit,
                format!(
                    "{what} is longer than the job's time limit of {} ({source}): raise \
                         --time or lower min_runtime",
                    format_duration(*limit)
                ),
            ));
        }
        if !req.batch {
            return Err(reject(
                RejectKind::NotRequeueable,
                "interactive jobs (salloc/srun) cannot be requeued once their min_runtime \
                 is over; submit a batch script with sbatch, or use the free tier with \
                 --comment unallocated"
                    .into(),
            ));
        }
        m
    };
    if !free_tier {
        let account = req.account.map(str::trim).filter(|a| !a.is_empty());
        match (fair_share, account) {
            (Some(fs), Some(a))
                if fs.account(a).is_none() && fs.account(&a.to_lowercase()).is_none() =>
            {
                let a = a.to_lowercase();
                return Err(reject(
                    RejectKind::Account,
                    format!(
                        "account '{a}' has no GPU budget yet. If it was just created, retry \
                         in a few seconds: slurmctld picks up budget changes every few seconds \
                         (`budgetctl ... --wait` returns once a change is in effect). \
                         Otherwise ask your coordinator to create it (budgetctl account add \
                         {a} --parent PARENT --allocation GPU_HOURS) and add you (budgetctl \
                         user add USER --account {a}), or submit to the free tier with \
                         --comment unallocated"
                    ),
                ));
            }
            (Some(_), None) => {
                return Err(reject(
                    RejectKind::Account,
                    "no account given: submit with --account=ACCOUNT (the budget account to \
                     charge; see budgetctl share), or use the free tier with --comment \
                     unallocated"
                        .into(),
                ));
            }
            (None, Some(a)) => {
                note = Some(format!(
                    "safe mode: account '{a}' accepted without a budget check"
                ));
            }
            _ => {}
        }
    }
    let contract = Contract {
        min_runtime,
        free_tier,
    };
    Ok(Accepted {
        contract,
        admin_comment: format_admin_comment(req.admin_comment, &contract),
        note,
    })
}

/// What a modification asks for, and the job it applies to.
#[derive(Debug, Clone, Default)]
pub struct ModifyRequest<'a> {
    /// The requester is root or SlurmUser.
    pub privileged: bool,
    /// New comment, if being changed.
    pub comment: Option<&'a str>,
    /// New admin comment, if being changed.
    pub admin_comment: Option<&'a str>,
    /// New `requeue` flag, if being changed.
    pub requeue: Option<u16>,
    pub partition: Option<&'a str>,
    pub qos: Option<&'a str>,
    /// The job's stored contract, if it has one.
    pub stored: Option<Contract>,
    /// The job's current partition and QOS (to judge free-tier changes).
    pub current_partition: Option<&'a str>,
    pub current_qos: Option<&'a str>,
}

/// Validate a modification of an existing job.
pub fn validate_modify(req: &ModifyRequest<'_>, policy: &Policy) -> Result<(), Rejection> {
    if req.privileged {
        return Ok(());
    }
    if req.admin_comment.is_some() {
        return Err(reject(
            RejectKind::Denied,
            "the admin comment holds the validated min_runtime contract and can only be \
             changed by an administrator"
                .into(),
        ));
    }
    if req.requeue == Some(0) {
        return Err(reject(
            RejectKind::NotRequeueable,
            "jobs must stay requeueable (Requeue=1): after min_runtime they may be \
             requeued to rebalance the cluster"
                .into(),
        ));
    }
    let Some(stored) = req.stored else {
        return Ok(());
    };
    let partition = req.partition.or(req.current_partition);
    let qos = req.qos.or(req.current_qos);
    let by_name = is_free_name(partition) || is_free_name(qos);
    let fixed = |what: String| {
        let now = if stored.free_tier {
            "free tier".to_string()
        } else {
            format!("min_runtime={}", format_duration(stored.min_runtime))
        };
        reject(
            RejectKind::Denied,
            format!(
                "{what}: the contract is fixed at submission ({now}); cancel and resubmit \
                 to change it"
            ),
        )
    };
    if let Some(c) = req.comment {
        let parsed =
            parse_comment(c).map_err(|e| reject(RejectKind::BadContract, comment_error(&e)))?;
        let free = parsed.free_tier || by_name;
        if free != stored.free_tier {
            return Err(fixed("the new comment changes the free-tier opt-in".into()));
        }
        if let Some(m) = parsed.min_runtime {
            if !free && m != stored.min_runtime {
                return Err(fixed(format!(
                    "the new comment declares min_runtime={}",
                    format_duration(m)
                )));
            }
        } else if !free && stored.min_runtime != policy.default_min_runtime_secs.max(0) {
            // Dropping the declaration would read as the site default, which differs.
            return Err(fixed("the new comment drops min_runtime".into()));
        }
    } else if (req.partition.is_some() || req.qos.is_some()) && by_name != stored.free_tier {
        return Err(fixed("moving to or from the free partition/QOS".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::tree::{AccountSpec, TreeSpec};

    fn fs() -> FairShare {
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![AccountSpec {
                name: "teama".into(),
                parent: None,
                allocation_gpu_hours: 10.0,
                overcommit: false,
            }],
            members: vec![],
        };
        FairShare::compute(&tree, &Default::default(), 0, 7 * 86400)
    }

    fn policy() -> Policy {
        Policy {
            default_min_runtime_secs: 600,
            max_min_runtime_secs: 7200,
            ..Policy::default()
        }
    }

    fn req(comment: &str) -> SubmitRequest<'_> {
        SubmitRequest {
            comment: Some(comment),
            account: Some("teama"),
            batch: true,
            ..Default::default()
        }
    }

    fn err(r: Result<Accepted, Rejection>) -> Rejection {
        r.expect_err("should be rejected")
    }

    #[test]
    fn bad_values_are_rejected_with_the_problem_named() {
        let f = fs();
        let p = policy();
        let m = err(validate_submit(&req("min_runtime=4x"), &p, Some(&f))).message;
        assert!(
            m.contains("invalid duration \"4x\"") && m.contains("accepted forms"),
            "{m}"
        );
        let m = err(validate_submit(&req("min_runtime="), &p, Some(&f))).message;
        assert!(m.contains("empty duration"), "{m}");
        let m = err(validate_submit(&req("min_runtime=-5m"), &p, Some(&f))).message;
        assert!(m.contains("negative duration"), "{m}");
        let m = err(validate_submit(&req("min_runtime=3h"), &p, Some(&f))).message;
        assert!(m.contains("above this site's maximum of 2h"), "{m}");
        let mut r = req("min_runtime=1h");
        r.time_limit = Some((1800, "--time".into()));
        let e = err(validate_submit(&r, &p, Some(&f)));
        assert_eq!(e.kind, RejectKind::TimeLimit);
        assert!(
            e.message
                .contains("longer than the job's time limit of 30m (--time)"),
            "{}",
            e.message
        );
        assert!(e.message.starts_with("slurm-budget: "));
    }

    #[test]
    fn defaults_requirement_and_storage() {
        let f = fs();
        let p = policy();
        let a = validate_submit(&req("exp42"), &p, Some(&f)).expect("default applies");
        assert_eq!(
            a.contract,
            Contract {
                min_runtime: 600,
                free_tier: false
            }
        );
        assert_eq!(a.admin_comment, "budget:min_runtime=600");
        let a = validate_submit(&req("exp42 min_runtime=1h30m"), &p, Some(&f)).expect("ok");
        assert_eq!(a.admin_comment, "budget:min_runtime=5400");
        let strict = Policy {
            require_min_runtime: true,
            ..p.clone()
        };
        assert!(
            err(validate_submit(&req("exp42"), &strict, Some(&f)))
                .message
                .contains("requires")
        );
        // The default is checked against the time limit too.
        let mut r = req("");
        r.time_limit = Some((300, "partition gpu DefaultTime".into()));
        assert!(
            err(validate_submit(&r, &p, Some(&f)))
                .message
                .contains("site default")
        );
        let mut r = req("min_runtime=1h");
        r.batch = false;
        assert_eq!(
            err(validate_submit(&r, &p, Some(&f))).kind,
            RejectKind::NotRequeueable
        );
    }

    #[test]
    fn free_tier_and_accounts() {
        let f = fs();
        let p = policy();
        let mut r = req("unallocated");
        r.account = Some("nobody");
        r.batch = false;
        let a = validate_submit(&r, &p, Some(&f)).expect("free tier needs no budget");
        assert_eq!(a.admin_comment, "budget:min_runtime=0 budget:free");
        let mut r = req("");
        r.partition = Some("free");
        r.account = None;
        assert!(
            validate_submit(&r, &p, Some(&f))
                .expect("free partition")
                .contract
                .free_tier
        );
        assert!(
            err(validate_submit(
                &req("unallocated min_runtime=1h"),
                &p,
                Some(&f)
            ))
            .message
            .contains("free tier")
        );
        let mut r = req("min_runtime=1h");
        r.account = Some("TeamX");
        let e = err(validate_submit(&r, &p, Some(&f)));
        assert_eq!(e.kind, RejectKind::Account);
        assert!(
            e.message.contains("account 'teamx' has no GPU budget yet. If it was just created, retry in a few seconds")
                && e.message.contains("budgetctl account add teamx"),
            "{}",
            e.message
        );
        r.account = Some("TeamA");
        assert!(
            validate_submit(&r, &p, Some(&f)).is_ok(),
            "Slurm lower-cases accounts"
        );
        r.account = None;
        assert!(
            err(validate_submit(&r, &p, Some(&f)))
                .message
                .contains("no account given")
        );
        // Safe mode: accepted with a note.
        r.account = Some("teamx");
        let a = validate_submit(&r, &p, None).expect("safe mode accepts");
        assert!(a.note.is_some());
    }

    #[test]
    fn modifications() {
        let p = policy();
        let stored = Some(Contract {
            min_runtime: 3600,
            free_tier: false,
        });
        let base = ModifyRequest {
            stored,
            ..Default::default()
        };
        assert!(
            validate_modify(
                &ModifyRequest {
                    comment: Some("note min_runtime=1h"),
                    ..base.clone()
                },
                &p
            )
            .is_ok()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    comment: Some("min_runtime=2h"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    comment: Some("just text"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    comment: Some("unallocated"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    comment: Some("min_runtime=4x"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    admin_comment: Some("x"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    requeue: Some(0),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    partition: Some("free"),
                    ..base.clone()
                },
                &p
            )
            .is_err()
        );
        assert!(
            validate_modify(
                &ModifyRequest {
                    partition: Some("gpu"),
                    ..base.clone()
                },
                &p
            )
            .is_ok()
        );
        let root = ModifyRequest {
            privileged: true,
            comment: Some("min_runtime=2h"),
            ..base.clone()
        };
        assert!(validate_modify(&root, &p).is_ok());
        // Default-valued contract: dropping the declaration changes nothing.
        let d = ModifyRequest {
            stored: Some(Contract {
                min_runtime: 600,
                free_tier: false,
            }),
            comment: Some("x"),
            ..Default::default()
        };
        assert!(validate_modify(&d, &p).is_ok());
    }
}
