//! `PrioritySiteFactorParameters`: how the budget order combines with multifactor's
//! own factors, and the sum of multifactor's weights that `dominant` must exceed.
//!
//! Accepted (comma separated, case of keys and values as written):
//! - empty or unset: `mode=dominant`;
//! - `mode=dominant`: tiers, then ranks, above every other factor;
//! - `mode=factor,weight=N`: the budget order as one factor of weight N
//!   (`1..=2147483647`, as multifactor's own `PriorityWeight*`);
//! - `mode=shadow`: the budget order is computed and reported to budgetd with
//!   Slurm's priority of each pending job, usage still reaches the ledger, and no
//!   site factor is written: every priority stays what multifactor made it.
//!
//! Anything else is an error naming the parameter: at `init` the plugin logs it and
//! runs in shadow mode (no site factor; slurmctld and multifactor run on), and
//! `site_factor_p_reconfig` (before 24.05) keeps the mode in force. From 24.05
//! `scontrol reconfigure` re-executes slurmctld, so a bad value there is an `init`'s. The budgetd settings
//! (`budget_socket`, `budget_period`, ...) stay in `PriorityParameters`, read by
//! `slurm_plugin_common::settings` as for the other plugins.

use crate::term::{MAX_TERM, Mode};

/// A bad `PrioritySiteFactorParameters`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParamsError {
    #[error(
        "PrioritySiteFactorParameters: unknown key {0:?} (expected mode=dominant, mode=factor,weight=N or mode=shadow)"
    )]
    UnknownKey(String),
    #[error(
        "PrioritySiteFactorParameters: {0:?} is not key=value (expected mode=dominant, mode=factor,weight=N or mode=shadow)"
    )]
    NotKeyValue(String),
    #[error("PrioritySiteFactorParameters: {0} given twice")]
    Repeated(&'static str),
    #[error("PrioritySiteFactorParameters: bad mode {0:?} (expected dominant, factor or shadow)")]
    BadMode(String),
    #[error(
        "PrioritySiteFactorParameters: bad weight {0:?} (expected a whole number from 1 to 2147483647)"
    )]
    BadWeight(String),
    #[error("PrioritySiteFactorParameters: mode=factor needs weight=N (1 to 2147483647)")]
    MissingWeight,
    #[error("PrioritySiteFactorParameters: weight= applies to mode=factor only")]
    WeightWithoutFactor,
}

/// Parse `PrioritySiteFactorParameters` (`None` or empty: `mode=dominant`).
pub fn parse(params: Option<&str>) -> Result<Mode, ParamsError> {
    let mut mode: Option<String> = None;
    let mut weight: Option<u32> = None;
    for item in params.unwrap_or("").split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let Some((key, value)) = item.split_once('=') else {
            return Err(ParamsError::NotKeyValue(item.to_string()));
        };
        let value = value.trim();
        match key.trim() {
            "mode" => {
                if mode.replace(value.to_string()).is_some() {
                    return Err(ParamsError::Repeated("mode"));
                }
            }
            "weight" => {
                let w = value
                    .parse::<u32>()
                    .ok()
                    .filter(|w| (1..=MAX_TERM).contains(w))
                    .ok_or_else(|| ParamsError::BadWeight(value.to_string()))?;
                if weight.replace(w).is_some() {
                    return Err(ParamsError::Repeated("weight"));
                }
            }
            other => return Err(ParamsError::UnknownKey(other.to_string())),
        }
    }
    match mode.as_deref().unwrap_or("dominant") {
        "dominant" if weight.is_some() => Err(ParamsError::WeightWithoutFactor),
        "dominant" => Ok(Mode::Dominant),
        "shadow" if weight.is_some() => Err(ParamsError::WeightWithoutFactor),
        "shadow" => Ok(Mode::Shadow),
        "factor" => weight
            .map(|weight| Mode::Factor { weight })
            .ok_or(ParamsError::MissingWeight),
        other => Err(ParamsError::BadMode(other.to_string())),
    }
}

/// multifactor's weights, as `slurm.conf` sets them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Weights {
    pub age: u32,
    pub assoc: u32,
    pub fair_share: u32,
    pub job_size: u32,
    pub partition: u32,
    pub qos: u32,
    /// `PriorityWeightTRES` (`CPU=1000,Mem=2000,GRES/gpu=3000`).
    pub tres: Option<String>,
}

impl Weights {
    /// The most multifactor's weighted factors can add up to for one job (each factor
    /// is at most 1 times its weight; TRES weights are summed, a value that does not
    /// parse counts as 0, as multifactor reads it). Partition factors of
    /// `PriorityFlags=NO_NORMAL_PART` are not normalised and are not bounded by this.
    pub fn sum(&self) -> u64 {
        let fixed = [
            self.age,
            self.assoc,
            self.fair_share,
            self.job_size,
            self.partition,
            self.qos,
        ]
        .iter()
        .map(|w| u64::from(*w))
        .sum::<u64>();
        let tres: f64 = self
            .tres
            .as_deref()
            .unwrap_or("")
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .filter_map(|(_, v)| v.trim().parse::<f64>().ok())
            .filter(|v| v.is_finite() && *v > 0.0)
            .sum();
        fixed.saturating_add(tres.ceil().min(u64::MAX as f64) as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_modes_parse() {
        assert_eq!(parse(None), Ok(Mode::Dominant));
        assert_eq!(parse(Some("")), Ok(Mode::Dominant));
        assert_eq!(parse(Some("mode=dominant")), Ok(Mode::Dominant));
        assert_eq!(
            parse(Some(" mode=factor , weight=5000 ")),
            Ok(Mode::Factor { weight: 5000 })
        );
        assert_eq!(parse(Some("mode=shadow")), Ok(Mode::Shadow));
        assert_eq!(
            parse(Some("weight=2147483647,mode=factor")),
            Ok(Mode::Factor { weight: MAX_TERM })
        );
    }

    #[test]
    fn every_bad_value_is_named() {
        let cases = [
            ("mode=dominat", ParamsError::BadMode("dominat".into())),
            ("mode=factor", ParamsError::MissingWeight),
            ("mode=factor,weight=0", ParamsError::BadWeight("0".into())),
            (
                "mode=factor,weight=2147483648",
                ParamsError::BadWeight("2147483648".into()),
            ),
            ("mode=factor,weight=-5", ParamsError::BadWeight("-5".into())),
            ("mode=dominant,weight=10", ParamsError::WeightWithoutFactor),
            ("weight=10", ParamsError::WeightWithoutFactor),
            ("mode=shadow,weight=10", ParamsError::WeightWithoutFactor),
            ("mode=Shadow", ParamsError::BadMode("Shadow".into())),
            ("mode=factor,mode=dominant", ParamsError::Repeated("mode")),
            (
                "mode=factor,weight=1,weight=2",
                ParamsError::Repeated("weight"),
            ),
            ("dominant", ParamsError::NotKeyValue("dominant".into())),
            (
                "budget_socket=/x",
                ParamsError::UnknownKey("budget_socket".into()),
            ),
        ];
        for (text, want) in cases {
            let got = parse(Some(text));
            assert_eq!(got, Err(want), "{text}");
            let msg = got.err().map(|e| e.to_string()).unwrap_or_default();
            assert!(msg.starts_with("PrioritySiteFactorParameters: "), "{msg}");
        }
    }

    #[test]
    fn weights_add_up_with_tres() {
        let w = Weights {
            age: 1000,
            fair_share: 1000,
            qos: 1000,
            tres: Some("CPU=1000,Mem=0.5,GRES/gpu=2000,bad=x".into()),
            ..Weights::default()
        };
        assert_eq!(w.sum(), 6001);
        assert_eq!(Weights::default().sum(), 0);
    }
}
