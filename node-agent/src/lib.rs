//! budget-agent (placeholder until its crate is written).
