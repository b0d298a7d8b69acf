//! The validated scheduling contract as stored on a job (docs/design.md §5.3): its one
//! writer and its one reader.
//!
//! `job_submit/budget` validates `--comment min_runtime=...` once, at submission, and
//! writes the result with [`format_admin_comment`] into the job's `admin_comment`, which
//! only operators can change (Slurm refuses `AdminComment` updates from users;
//! `job_modify` guards `Comment`). Every reader (`preempt/budget`, `priority/budget` and
//! its usage sync, budgetd's drain worker reading `scontrol show job`) goes through
//! [`effective_contract`], which trusts this stored form and reads the user-editable
//! comment only for jobs that have none (submitted before the plugin was enabled, or
//! created by an operator bypassing it).
//!
//! Stored format: white-space separated tokens `budget:min_runtime=<seconds>` and, for
//! the free tier, `budget:free`. Other tokens an administrator put in `admin_comment`
//! are kept by the writer and ignored by the reader.

use crate::comment::parse_comment;

/// Prefix of every token this product writes into `admin_comment`.
pub const TOKEN_PREFIX: &str = "budget:";
const MIN_RUNTIME_TOKEN: &str = "budget:min_runtime=";
const FREE_TOKEN: &str = "budget:free";
/// Name of the partition or QOS that opts a job into the free tier.
pub const FREE_TIER_NAME: &str = "free";

/// A job's contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Contract {
    /// Protected seconds from the start of each run (0 for the free tier).
    pub min_runtime: i64,
    /// Free (unallocated) tier: never charged, preemptable at any time.
    pub free_tier: bool,
}

/// The contract stored in `admin_comment`, if any. A free-tier contract has no
/// protection, whatever `min_runtime` a hand-edited comment says.
pub fn parse_admin_comment(admin_comment: &str) -> Option<Contract> {
    let mut min = None;
    let mut free = false;
    for tok in admin_comment.split_whitespace() {
        if let Some(v) = tok.strip_prefix(MIN_RUNTIME_TOKEN) {
            // A hand-edited value past the longest contract is capped there (the
            // operator's intent is "long"), not dropped in favour of the user's comment;
            // budgetd refuses a run whose min_runtime is beyond it (found by fuzzing).
            min = v
                .parse::<i64>()
                .ok()
                .filter(|&s| s >= 0)
                .map(|s| s.min(crate::duration::MAX_DURATION_SECS));
        } else if tok == FREE_TOKEN {
            free = true;
        }
    }
    min.map(|min_runtime| Contract {
        min_runtime: if free { 0 } else { min_runtime },
        free_tier: free,
    })
}

/// `existing` (an administrator's admin comment, possibly with an older contract) with
/// the contract tokens replaced by `c`.
pub fn format_admin_comment(existing: Option<&str>, c: &Contract) -> String {
    let mut out: Vec<String> = existing
        .unwrap_or("")
        .split_whitespace()
        .filter(|t| !t.starts_with(TOKEN_PREFIX))
        .map(str::to_string)
        .collect();
    out.push(format!("{MIN_RUNTIME_TOKEN}{}", c.min_runtime.max(0)));
    if c.free_tier {
        out.push(FREE_TOKEN.to_string());
    }
    out.join(" ")
}

/// Whether a partition or QOS name (or a comma-separated list of them) opts into the
/// free tier.
pub fn is_free_name(name: Option<&str>) -> bool {
    name.is_some_and(|n| {
        n.split(',')
            .any(|p| p.trim().eq_ignore_ascii_case(FREE_TIER_NAME))
    })
}

/// The contract a job runs under: the stored one; for a job without one, the comment
/// read as `job_submit/budget` would have read it, with `default_min_runtime` when it
/// declares none or cannot be parsed. `free_by_name`: the job's partition or QOS is
/// the free tier ([`is_free_name`]).
pub fn effective_contract(
    admin_comment: Option<&str>,
    comment: Option<&str>,
    free_by_name: bool,
    default_min_runtime: i64,
) -> Contract {
    if let Some(c) = admin_comment.and_then(parse_admin_comment) {
        return c;
    }
    let req = comment
        .and_then(|c| parse_comment(c).ok())
        .unwrap_or_default();
    let free_tier = req.free_tier || free_by_name;
    let min_runtime = if free_tier {
        0
    } else {
        req.min_runtime.unwrap_or(default_min_runtime).max(0)
    };
    Contract {
        min_runtime,
        free_tier,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trip_and_keeps_admin_text() {
        let c = Contract {
            min_runtime: 14400,
            free_tier: false,
        };
        let s = format_admin_comment(None, &c);
        assert_eq!(s, "budget:min_runtime=14400");
        assert_eq!(parse_admin_comment(&s), Some(c));
        let f = Contract {
            min_runtime: 0,
            free_tier: true,
        };
        let s2 = format_admin_comment(Some("ticket#42 budget:min_runtime=5"), &f);
        assert_eq!(s2, "ticket#42 budget:min_runtime=0 budget:free");
        assert_eq!(parse_admin_comment(&s2), Some(f));
        assert_eq!(parse_admin_comment("ticket#42"), None);
        assert_eq!(parse_admin_comment("budget:min_runtime=-3"), None);
        assert_eq!(parse_admin_comment(""), None);
        // A hand-edited free contract with a window still has none.
        assert_eq!(
            parse_admin_comment("budget:min_runtime=60 budget:free"),
            Some(f)
        );
    }

    #[test]
    fn a_stored_min_runtime_past_the_longest_contract_is_capped() {
        let c = parse_admin_comment("budget:min_runtime=99999999999").expect("contract");
        assert_eq!(c.min_runtime, crate::duration::MAX_DURATION_SECS);
    }

    #[test]
    fn fallback_reads_comment() {
        assert_eq!(
            effective_contract(None, Some("x min_runtime=2h"), false, 60),
            Contract {
                min_runtime: 7200,
                free_tier: false
            }
        );
        assert_eq!(
            effective_contract(None, Some("bad min_runtime=4x"), false, 60).min_runtime,
            60
        );
        assert_eq!(
            effective_contract(Some(""), None, false, 60).min_runtime,
            60
        );
        assert!(effective_contract(None, None, true, 60).free_tier);
        assert_eq!(effective_contract(None, None, true, 60).min_runtime, 0);
        assert!(effective_contract(None, Some("unallocated"), false, 60).free_tier);
        assert_eq!(
            effective_contract(
                Some("budget:min_runtime=9"),
                Some("min_runtime=2h"),
                false,
                60
            )
            .min_runtime,
            9
        );
        // The stored contract wins over the partition name too.
        assert!(!effective_contract(Some("budget:min_runtime=9"), None, true, 60).free_tier);
        assert!(is_free_name(Some("gpu,FREE")));
        assert!(!is_free_name(Some("freebie")));
        assert!(!is_free_name(None));
    }

    proptest! {
        /// Whatever an administrator wrote beside it, the reader gets back what the
        /// writer stored, and the administrator's text survives.
        #[test]
        fn writer_and_reader_agree(
            admin in proptest::collection::vec("[a-z#0-9:=]{1,8}", 0..4),
            min in 0i64..10_000_000,
            free: bool,
        ) {
            let c = Contract { min_runtime: if free { 0 } else { min }, free_tier: free };
            let existing = admin.join(" ");
            let s = format_admin_comment(Some(&existing), &c);
            prop_assert_eq!(parse_admin_comment(&s), Some(c));
            for t in admin.iter().filter(|t| !t.starts_with(TOKEN_PREFIX)) {
                prop_assert!(s.split_whitespace().any(|x| x == t));
            }
        }
    }
}
