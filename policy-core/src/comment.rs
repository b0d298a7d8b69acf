//! Reading the scheduling contract out of a job's `--comment` text.
//!
//! Users write `sbatch --comment "min_runtime=4h"`; other text may stand beside
//! it (`--comment "exp42 min_runtime=2h30m"`). The word `unallocated` (or
//! `free`) opts the job into the free tier. `checkpoint=30m` declares that the
//! job saves its state at least that often, so a preemption loses at most that
//! much of its work: the cost-aware preemption rule ([`crate::rebalance`])
//! prefers such victims. Tokens are separated by white space, commas or
//! semicolons. The submit plugin, the preempt plugin and the simulator all read
//! comments through [`parse_comment`], so they agree on what a job declared.

use crate::duration::{DurationError, parse_duration};

/// The key users write in `--comment`.
pub const MIN_RUNTIME_KEY: &str = "min_runtime";
/// The key that declares a checkpoint interval.
pub const CHECKPOINT_KEY: &str = "checkpoint";

/// What a comment asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommentRequest {
    /// The declared minimum runtime in seconds, if any.
    pub min_runtime: Option<i64>,
    /// The job opted into the free (unallocated, always preemptable) tier.
    pub free_tier: bool,
    /// Declared checkpoint interval in seconds (> 0), if any.
    pub checkpoint: Option<i64>,
}

/// Why a comment could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommentError {
    #[error("min_runtime given more than once")]
    Repeated,
    #[error("min_runtime: {0}")]
    Duration(#[from] DurationError),
    #[error("checkpoint given more than once")]
    CheckpointRepeated,
    #[error("checkpoint: {0}")]
    CheckpointDuration(DurationError),
    #[error(
        "checkpoint=0: a checkpoint interval must be longer than 0 (leave the word out if the job does not checkpoint)"
    )]
    CheckpointZero,
}

/// Extracts `min_runtime=`, `checkpoint=` and the free-tier flag from a comment.
pub fn parse_comment(comment: &str) -> Result<CommentRequest, CommentError> {
    let mut req = CommentRequest::default();
    for token in comment.split(|c: char| c.is_whitespace() || c == ',' || c == ';') {
        if token.is_empty() {
            continue;
        }
        if let Some((key, value)) = token.split_once('=') {
            if key.eq_ignore_ascii_case(MIN_RUNTIME_KEY) {
                if req.min_runtime.is_some() {
                    return Err(CommentError::Repeated);
                }
                req.min_runtime = Some(parse_duration(value)?);
            } else if key.eq_ignore_ascii_case(CHECKPOINT_KEY) {
                if req.checkpoint.is_some() {
                    return Err(CommentError::CheckpointRepeated);
                }
                match parse_duration(value).map_err(CommentError::CheckpointDuration)? {
                    0 => return Err(CommentError::CheckpointZero),
                    secs => req.checkpoint = Some(secs),
                }
            }
        } else if token.eq_ignore_ascii_case("unallocated") || token.eq_ignore_ascii_case("free") {
            req.free_tier = true;
        }
    }
    Ok(req)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_contract_among_other_text() {
        let r = parse_comment("exp42 min_runtime=2h30m, note").unwrap();
        assert_eq!(r.min_runtime, Some(9000));
        assert!(!r.free_tier);
        assert_eq!(parse_comment("").unwrap(), CommentRequest::default());
        assert!(parse_comment("unallocated").unwrap().free_tier);
    }

    #[test]
    fn reads_a_declared_checkpoint_interval() {
        let r = parse_comment("min_runtime=4h checkpoint=30m").unwrap();
        assert_eq!((r.min_runtime, r.checkpoint), (Some(14_400), Some(1_800)));
        assert_eq!(
            parse_comment("Checkpoint=1h;free").unwrap().checkpoint,
            Some(3_600)
        );
        assert_eq!(parse_comment("exp42").unwrap().checkpoint, None);
        assert_eq!(
            parse_comment("checkpoint=0m"),
            Err(CommentError::CheckpointZero)
        );
        assert_eq!(
            parse_comment("checkpoint=1h checkpoint=2h"),
            Err(CommentError::CheckpointRepeated)
        );
        assert!(matches!(
            parse_comment("checkpoint=soon"),
            Err(CommentError::CheckpointDuration(DurationError::Invalid(_)))
        ));
        // The error names the key, so the user knows which word to fix.
        let e = parse_comment("min_runtime=2h checkpoint=x").unwrap_err();
        assert!(e.to_string().starts_with("checkpoint: "), "{e}");
    }

    #[test]
    fn reports_bad_values() {
        assert!(matches!(
            parse_comment("min_runtime=4x"),
            Err(CommentError::Duration(_))
        ));
        assert!(matches!(
            parse_comment("min_runtime="),
            Err(CommentError::Duration(DurationError::Empty))
        ));
        assert!(matches!(
            parse_comment("min_runtime=-5m"),
            Err(CommentError::Duration(DurationError::Negative(_)))
        ));
        assert_eq!(
            parse_comment("min_runtime=1h min_runtime=2h"),
            Err(CommentError::Repeated)
        );
    }
}
