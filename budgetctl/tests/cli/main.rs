//! Integration tests of the real `budgetctl` binary against an in-process
//! budgetd (`budgetd-testkit`: the real service on a temp Unix socket, a real
//! SQLite file): the acceptance scenario (a sacct import and `share --at T`
//! against a window computed by hand), errors and exit codes, callers
//! identified by uid, the idle report, the shadow report, the policy's ranking knobs, and
//! `--json` printing exactly the service's answer.

mod support;

mod idle;
mod json;
mod policy;
mod scenario;
mod shadow;
mod site;
mod wait;
mod whatif;
