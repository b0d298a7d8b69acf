//! budget-sim (placeholder until its crate is written).
