//! Integration tests of budgetd and budgetctl: a real SQLite file in a temp
//! dir, a real HTTP server on a temp Unix socket and on 127.0.0.1:0, and (in
//! `scenario` and `crash`) the real `budgetd` and `budgetctl` binaries.

mod common;
mod daemon;

mod api;
mod auth;
mod crash;
mod idle;
mod import;
mod scenario;
mod sync;
mod tree;
