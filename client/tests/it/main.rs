//! Integration tests of `budget-client` against tiny `std::thread` servers on
//! a temporary Unix socket and on `127.0.0.1:0`, each replying with a canned
//! (sometimes deliberately broken) response. One test binary, grouped by
//! topic: `support` owns the servers, `exchange` the happy paths and what the
//! client puts on the wire, `failures` timeouts, limits and malformed peers.

#![allow(clippy::unwrap_used)]

mod exchange;
mod failures;
mod support;
