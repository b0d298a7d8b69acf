//! Logging into slurmctld's log through `log_var`.
//!
//! Slurm's `info()`/`error()` are C macros; the exported function is
//! `log_var(level, fmt, ...)`. We always pass `"%s"` as the format and our text as the
//! argument so a `%` in job names or account names cannot be read as a conversion.
//! Messages are prefixed with the plugin type (`priority/budget: ...`) set once by
//! [`set_prefix`].

use std::ffi::CString;
use std::sync::OnceLock;

use slurm_ffi::sys;

static PREFIX: OnceLock<&'static str> = OnceLock::new();

/// Set the prefix (the plugin type) for every message; later calls are ignored.
pub fn set_prefix(prefix: &'static str) {
    let _ = PREFIX.set(prefix);
}

/// The prefix set by [`set_prefix`] (the plugin type), if any.
pub fn prefix() -> Option<&'static str> {
    PREFIX.get().copied()
}

/// The line a plugin logs when `init` is done: this build's version (one for the whole
/// workspace) and the Slurm release it was built for.
pub fn loaded() {
    info(&format!(
        "loaded: slurm-budget {} for Slurm {}",
        env!("CARGO_PKG_VERSION"),
        slurm_ffi::version::version_string(slurm_ffi::SLURM_VERSION_NUMBER)
    ));
}

/// Slurm log levels we use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Level {
    Error,
    Info,
    Verbose,
    Debug,
    Debug2,
}

impl Level {
    fn raw(self) -> sys::log_level_t {
        match self {
            Level::Error => sys::LOG_LEVEL_ERROR,
            Level::Info => sys::LOG_LEVEL_INFO,
            Level::Verbose => sys::LOG_LEVEL_VERBOSE,
            Level::Debug => sys::LOG_LEVEL_DEBUG,
            Level::Debug2 => sys::LOG_LEVEL_DEBUG2,
        }
    }
}

/// Turn arbitrary text into a C string: interior NULs become `\0` so nothing is lost.
fn to_cstring(text: &str) -> CString {
    match CString::new(text) {
        Ok(c) => c,
        Err(_) => CString::new(text.replace('\0', "\\0")).unwrap_or_default(),
    }
}

/// Write one message to Slurm's log at `level`.
pub fn log(level: Level, msg: &str) {
    let text = match PREFIX.get() {
        Some(p) => format!("{p}: {msg}"),
        None => msg.to_string(),
    };
    let c = to_cstring(&text);
    // SAFETY: log_var is a variadic C function from libslurmfull, present in every
    // process that loads a Slurm plugin; "%s" consumes exactly one `char *` argument.
    unsafe { sys::log_var(level.raw(), c"%s".as_ptr(), c.as_ptr()) }
}

/// `info()`.
pub fn info(msg: &str) {
    log(Level::Info, msg);
}

/// `error()`.
pub fn error(msg: &str) {
    log(Level::Error, msg);
}

/// `verbose()`.
pub fn verbose(msg: &str) {
    log(Level::Verbose, msg);
}

/// `debug()`.
pub fn debug(msg: &str) {
    log(Level::Debug, msg);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cstring_keeps_text_with_nul() {
        assert_eq!(to_cstring("a\0b").to_str().ok(), Some("a\\0b"));
        assert_eq!(to_cstring("100%s").to_str().ok(), Some("100%s"));
    }
}
