//! Reading a [`PluginSnapshot`] from outside input: the JSON is decoded, then
//! every number is checked to be finite and within the bounds budgetd itself
//! enforces, and every node index to point inside the tree, so nothing that
//! uses the snapshot later can panic or compute with a non-finite value.
//! Errors name the field and the value.

use policy_core::HOUR;
use policy_core::tree::MAX_ALLOCATION_GPU_HOURS;
use policy_core::weights::MAX_WEIGHT;

use crate::PluginSnapshot;

/// Why a snapshot was refused.
#[derive(Debug, thiserror::Error)]
pub enum SnapshotError {
    /// Not JSON of the snapshot's shape (a non-finite number arrives as `null`).
    #[error("snapshot is not valid: {path}: {source}")]
    Json {
        path: String,
        source: serde_json::Error,
    },
    /// Well-formed, but a value is out of range.
    #[error("snapshot is not valid: {field} {reason}")]
    OutOfRange { field: String, reason: String },
}

fn bad(field: impl Into<String>, reason: impl Into<String>) -> SnapshotError {
    SnapshotError::OutOfRange {
        field: field.into(),
        reason: reason.into(),
    }
}

/// `x` finite and within `lo..=hi`.
fn number(field: impl FnOnce() -> String, x: f64, lo: f64, hi: f64) -> Result<(), SnapshotError> {
    if x.is_finite() && (lo..=hi).contains(&x) {
        Ok(())
    } else {
        Err(bad(
            field(),
            format!("must be a number between {lo} and {hi:e}, got {x}"),
        ))
    }
}

impl PluginSnapshot {
    /// Decodes and checks a snapshot body ([`PluginSnapshot::check`]).
    pub fn decode(body: &[u8]) -> Result<PluginSnapshot, SnapshotError> {
        let de = &mut serde_json::Deserializer::from_slice(body);
        let snap: PluginSnapshot =
            serde_path_to_error::deserialize(de).map_err(|e| SnapshotError::Json {
                path: e.path().to_string(),
                source: e.into_inner(),
            })?;
        snap.check()?;
        Ok(snap)
    }

    /// Checks that every number is finite and in range and that the tree's
    /// node indices are consistent.
    pub fn check(&self) -> Result<(), SnapshotError> {
        let p = &self.policy;
        if p.window_secs < 1 {
            return Err(bad(
                "policy.window_secs",
                format!("must be > 0, got {}", p.window_secs),
            ));
        }
        if let Some(h) = p.site_max_lost_gpu_hours {
            number(
                || "policy.site_max_lost_gpu_hours".into(),
                h,
                0.0,
                MAX_ALLOCATION_GPU_HOURS,
            )?;
        }
        number(
            || "weights.default".into(),
            self.weights.default,
            f64::MIN_POSITIVE,
            MAX_WEIGHT,
        )?;
        for (t, &w) in &self.weights.by_type {
            number(
                || format!("weights.by_type.{t}"),
                w,
                f64::MIN_POSITIVE,
                MAX_WEIGHT,
            )?;
        }
        if let Some(w) = self.cluster_weighted_gpus {
            number(|| "cluster_weighted_gpus".into(), w, 0.0, f64::MAX)?;
        }
        let fs = &self.fair_share;
        if fs.window_secs < 1 {
            return Err(bad(
                "fair_share.window_secs",
                format!("must be > 0, got {}", fs.window_secs),
            ));
        }
        let len = fs.nodes.len();
        let max_alloc = MAX_ALLOCATION_GPU_HOURS * HOUR as f64;
        for (i, n) in fs.nodes.iter().enumerate() {
            let field = |f: &str| format!("fair_share.nodes[{i}] ({:?}).{f}", n.name);
            // The root's allocation may be the sum of its children's.
            let hi = if i == 0 { f64::MAX } else { max_alloc };
            number(|| field("allocation"), n.allocation, 0.0, hi)?;
            number(|| field("usage"), n.usage, 0.0, f64::MAX)?;
            number(|| field("ratio"), n.ratio, 0.0, f64::MAX)?;
            match n.parent {
                None if i == 0 => {}
                Some(p) if i > 0 && p < len && p != i => {}
                other => {
                    return Err(bad(
                        field("parent"),
                        format!("must be another node's index (none for the root), got {other:?}"),
                    ));
                }
            }
            if let Some(&c) = n.children.iter().find(|&&c| c >= len || c == 0 || c == i) {
                return Err(bad(
                    field("children"),
                    format!("must be indices of other nodes below {len}, got {c}"),
                ));
            }
            if let Some(r) = n.leaf_rank
                && r >= fs.num_leaves
            {
                return Err(bad(
                    field("leaf_rank"),
                    format!(
                        "must be below the number of leaves ({}), got {r}",
                        fs.num_leaves
                    ),
                ));
            }
        }
        Ok(())
    }
}
