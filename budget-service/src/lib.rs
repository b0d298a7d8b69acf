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
//! - [`error`]: `AppError` and its HTTP mapping;
//! - [`auth`]: callers (peer credentials, tokens) and their scopes;
//! - [`state`]: shared state, the snapshot cache, counters;
//! - [`api`]: the router and handlers; [`report`]: share, usage, why;
//! - [`sacct`]: parsing sacct history; [`timefmt`]: TIME arguments;
//! - [`metrics`], [`openapi`]: `/metrics` and the OpenAPI document;
//! - [`server`]: listeners, serving, shutdown; [`ctl`]: `budgetctl`;
//! - [`drain`]: maintenance drains and their worker; [`preemptions`]: the preemption record;
//! - [`idle`]: node-agent reports, the idle ledger and idle-job flags (DESIGN 3.7).

pub mod api;
pub mod auth;
pub mod config;
pub mod ctl;
pub mod db;
pub mod drain;
pub mod error;
pub mod idle;
pub mod ledger;
pub mod metrics;
pub mod openapi;
pub mod policy;
pub mod preemptions;
pub mod report;
pub mod sacct;
pub mod server;
pub mod state;
pub mod store;
pub mod timefmt;

pub use api::app;
pub use config::Config;
pub use error::AppError;
pub use server::{Listeners, bind_unix, run, shutdown_signal};
pub use state::AppState;
pub use store::Store;
