//! budget-service (placeholder until its crate is written).
