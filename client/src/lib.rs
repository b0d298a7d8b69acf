//! budget-client (placeholder until its crate is written).
