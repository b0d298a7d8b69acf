//! Running the real budgetctl against an in-process budgetd.

#![allow(dead_code)]

use std::path::Path;
use std::process::{Command, Output, Stdio};

use budget_client::Client;
use serde_json::Value;

pub use budgetd_testkit::{Budgetd, call};

pub const BUDGETCTL: &str = env!("CARGO_BIN_EXE_budgetctl");

/// budgetd with the default config (the test, as root or as the service's
/// own uid, is an admin on the socket).
pub fn budgetd() -> Budgetd {
    Budgetd::start("")
}

/// Runs the real budgetctl against `socket`, in UTC.
pub fn ctl(socket: &Path, args: &[&str]) -> Output {
    Command::new(BUDGETCTL)
        .args(args)
        .env("BUDGET_SOCKET", socket)
        .env("TZ", "UTC")
        .env_remove("BUDGET_URL")
        .env_remove("BUDGET_TOKEN")
        .stdin(Stdio::null())
        .output()
        .expect("run budgetctl")
}

/// Runs budgetctl and asserts exit 0; returns stdout.
pub fn ctl_ok(socket: &Path, args: &[&str]) -> String {
    let out = ctl(socket, args);
    assert!(
        out.status.success(),
        "budgetctl {args:?} failed: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends a JSON request and asserts a 2xx answer.
pub fn call_ok(c: &Client, method: &str, path: &str, body: &Value) -> Value {
    let (st, b) = call(c, method, path, Some(body));
    assert!((200..300).contains(&st), "{method} {path}: {st} {b}");
    b
}
