//! budget-service: `budgetd`, the slurm-budget service (its CLI, `budgetctl`,
//! is a crate of its own and speaks to it over HTTP).
//!
//! The service owns the account tree, budgets, GPU weights, policy, the
//! append-only audit log and the run ledger (SQLite), computes window usage
//! and the fair-share tree with `policy-core`, and serves it all over HTTP on
//! a Unix socket (peer-credential auth) and optionally TCP (bearer tokens).
//! It is the only component that speaks SQL (architecture invariant 4).
//! Request and response bodies are `budget-protocol`'s types.
//!
//! Module map:
//! - [`db`]: opening SQLite, versioned migrations (all pending ones in one
//!   transaction, after a backup of the old file);
//! - [`backup`]: consistent copies of the database (online backup API) and restore;
//! - [`ledger`]: the run ledger's merge rule and in-memory mirror;
//! - [`store`]: the state behind the lock and every mutation (one `commit`;
//!   tree changes through `commit_tree`);
//! - [`policy`], [`config`]: policy validation, the config file;
//! - [`error`]: `AppError` and its HTTP mapping;
//! - [`caller`]: who is calling and in which role;
//! - [`auth`]: authenticating callers (peer credentials, tokens) and their scopes;
//! - [`state`]: shared live state (the store behind its lock, the cluster's GPUs), counters;
//! - [`snapshot`]: the plugin snapshot's assembly and cache; [`throttle`]: admission of expensive reads;
//! - [`api`]: the router and handlers; [`report`]: share and usage; [`why`]: the
//!   explanation of one job, every preemption answer by the cost-aware rule;
//! - [`sacct`]: parsing sacct history; [`clock`]: the service's "now";
//! - [`metrics`], [`openapi`]: `/metrics` and the OpenAPI document;
//! - [`server`]: listeners, serving, shutdown;
//! - [`scontrol`]: running Slurm's `scontrol` and reading its output;
//! - [`drains`]: the drain table and its rules; [`drain_worker`]: the 1 s
//!   worker that requeues jobs on drained nodes (docs/design.md §7);
//! - [`preemptions`]: the preemption record;
//! - [`idle`]: node-agent reports, the idle ledger and idle-job flags (docs/design.md §8);
//! - [`ui`]: the read-only web view; [`whatif`]: its what-if, `budgetctl whatif`
//!   run as a child process on an input budgetd assembles.

pub mod api;
pub mod auth;
pub mod backup;
pub mod caller;
pub mod capacity;
pub mod clock;
pub mod config;
pub mod db;
pub mod drain_worker;
pub mod drains;
pub mod error;
pub mod idle;
pub mod ledger;
pub mod loglimit;
pub mod metrics;
pub mod openapi;
pub mod partitions;
pub mod policy;
pub mod preemptions;
pub mod report;
pub mod sacct;
pub mod scontrol;
pub mod server;
pub mod shadow;
pub mod snapshot;
pub mod state;
pub mod store;
pub mod throttle;
pub mod ui;
pub mod whatif;
pub mod why;

pub use api::app;
pub use config::Config;
pub use error::AppError;
pub use server::{Listeners, bind_unix, raise_fd_limit, run, shutdown_signal};
pub use state::AppState;
pub use store::Store;
