//! The service's clock: every "now" budgetd uses comes from here (the policy
//! core never reads a clock; it is given the time).
//!
//! TIME values in requests are read with [`budget_protocol::time`], the
//! format budgetctl shares.

/// Now in Unix seconds.
pub fn now() -> i64 {
    jiff::Timestamp::now().as_second()
}
