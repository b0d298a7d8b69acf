//! Panic containment at the FFI boundary (docs/design.md §9.2).
//!
//! An unwinding panic through an `extern "C"` function aborts `slurmctld` (measured:
//! SIGABRT and lost state). Every export runs its body in [`ffi_guard`], which turns a
//! panic into a logged error and a caller-chosen default. The default panic hook writes
//! to a stderr nobody reads and may symbolise a backtrace under the job write lock, so
//! [`install_panic_hook`] replaces it with one line through `log_var`.

use std::panic::{self, AssertUnwindSafe};
use std::sync::Once;

use crate::log;

/// Run `f`, returning `default` if it panics (the panic is logged by the hook).
pub fn ffi_guard<T>(default: T, f: impl FnOnce() -> T) -> T {
    match panic::catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(_) => default,
    }
}

static HOOK: Once = Once::new();

/// Install a panic hook that logs the message and location at error level, without a
/// backtrace. Idempotent. The hook lives in this plugin's own copy of `std`, so it does
/// not affect other plugins.
pub fn install_panic_hook() {
    HOOK.call_once(|| {
        panic::set_hook(Box::new(|info| {
            let msg = if let Some(s) = info.payload().downcast_ref::<&str>() {
                (*s).to_string()
            } else if let Some(s) = info.payload().downcast_ref::<String>() {
                s.clone()
            } else {
                "(non-string panic payload)".to_string()
            };
            let place = info
                .location()
                .map(|l| format!(" at {}:{}", l.file(), l.line()))
                .unwrap_or_default();
            let thread = std::thread::current();
            let name = thread.name().unwrap_or("slurmctld thread");
            log::error(&format!(
                "panic in {name}{place}: {msg} (contained; using a safe default)"
            ));
        }));
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_returns_default_on_panic() {
        // No hook here: log_var is not linked into the test binary.
        let prev = panic::take_hook();
        panic::set_hook(Box::new(|_| {}));
        assert_eq!(ffi_guard(7, || -> i32 { panic!("boom") }), 7);
        assert_eq!(ffi_guard(7, || 3), 3);
        panic::set_hook(prev);
    }
}
