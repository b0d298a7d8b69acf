//! GPU-type billing weights (docs/design.md §2): one hour on a B300 may cost more
//! budget than one hour on an H100. Types are matched case-insensitively;
//! a job with no type or an unknown type is charged the default weight.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The largest billing weight accepted: bounded so that GPUs x seconds x
/// weight stays finite however many runs a window holds.
pub const MAX_WEIGHT: f64 = 1e6;

/// Billing weight per GPU type.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWeights {
    /// Weight for GPUs without a (known) type.
    pub default: f64,
    /// Lower-cased type name -> weight.
    pub by_type: BTreeMap<String, f64>,
}

impl Default for GpuWeights {
    fn default() -> Self {
        Self {
            default: 1.0,
            by_type: BTreeMap::new(),
        }
    }
}

/// Why a weight was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum WeightError {
    #[error("weight for {0:?} must be a number > 0 and at most {max:e}, got {1}", max = MAX_WEIGHT)]
    NotPositive(String, f64),
    #[error("GPU type name {0:?} must be 1-64 characters of letters, digits, '-', '_' or '.'")]
    BadName(String),
}

impl GpuWeights {
    /// Weight of `gpu_type` (`None`: the default).
    pub fn weight(&self, gpu_type: Option<&str>) -> f64 {
        gpu_type
            .and_then(|t| self.by_type.get(&t.to_ascii_lowercase()))
            .copied()
            .unwrap_or(self.default)
    }

    /// Sets one weight after validating it.
    pub fn set(&mut self, gpu_type: &str, weight: f64) -> Result<(), WeightError> {
        validate_weight(gpu_type, weight)?;
        self.by_type.insert(gpu_type.to_ascii_lowercase(), weight);
        Ok(())
    }
}

/// Checks a type name and weight without changing anything.
pub fn validate_weight(gpu_type: &str, weight: f64) -> Result<(), WeightError> {
    let name_ok = !gpu_type.is_empty()
        && gpu_type.len() <= 64
        && gpu_type
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c));
    if !name_ok {
        return Err(WeightError::BadName(gpu_type.to_string()));
    }
    if !(weight.is_finite() && weight > 0.0 && weight <= MAX_WEIGHT) {
        return Err(WeightError::NotPositive(gpu_type.to_string(), weight));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_types_get_the_default() {
        let mut w = GpuWeights::default();
        w.set("B300", 2.0).unwrap();
        assert_eq!(w.weight(Some("b300")), 2.0);
        assert_eq!(w.weight(Some("h100")), 1.0);
        assert_eq!(w.weight(None), 1.0);
        assert!(w.set("h100", -1.0).is_err());
        assert!(w.set("bad name", 1.0).is_err());
        assert!(w.set("x", f64::NAN).is_err());
    }
}
