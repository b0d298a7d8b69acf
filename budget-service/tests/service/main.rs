//! Integration tests of budgetd: a real SQLite file in a temp dir, a real HTTP
//! server on a temp Unix socket and on 127.0.0.1:0 (`budgetd-testkit`), and
//! (in `crash`) the real `budgetd` binary. budgetctl's tests are in its crate.

mod common;
mod daemon;

mod api;
mod auth;
mod backup;
mod conformance;
mod crash;
mod drains;
mod hardening;
mod hostile;
mod idle;
mod import;
mod migrations;
mod runs;
mod shadow;
mod sync;
mod tree;
mod ui;
mod ui_browser;
mod whatif;
