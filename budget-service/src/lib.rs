//! budget-service: `budgetd`, the slurm-budget service, and `budgetctl`, its admin CLI.
//!
//! The service owns the account tree, budgets, GPU weights, policy, the
//! append-only audit log and the run ledger (SQLite), computes window usage
//! and the fair-share tree with `policy-core`, and serves it all over HTTP on
//! a Unix socket (peer-credential auth) and optionally TCP (bearer tokens).
//! It is the only component that speaks SQL (architecture invariant 4).
//!
//! Module map:
//! - [`db`]: opening SQLite, versioned migrations;
//! - [`ledger`]: the run ledger's merge rule and in-memory mirror;
//! - [`store`]: the state behind the lock and every mutation;
//! - [`policy`], [`config`]: policy validation, the config file;
//! - [`error`]: `AppError` and its HTTP mapping.

pub mod config;
pub mod db;
pub mod error;
pub mod ledger;
pub mod policy;
pub mod sacct;
pub mod store;
pub mod timefmt;
