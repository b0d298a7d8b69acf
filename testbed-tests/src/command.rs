//! Running a child process and turning its failure into an [`Error`] that names the
//! command line and quotes its error output.

use std::process::{Command, Output};

use crate::error::{Error, Result};

/// The command line of `cmd`, for messages.
pub fn describe(cmd: &Command) -> String {
    let mut s = cmd.get_program().to_string_lossy().into_owned();
    for a in cmd.get_args() {
        let a = a.to_string_lossy();
        if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '\'') {
            s.push_str(&format!(" {a:?}"));
        } else {
            s.push(' ');
            s.push_str(&a);
        }
    }
    s
}

/// Runs `cmd` to completion, whatever its exit status.
pub fn output(cmd: &mut Command) -> Result<Output> {
    cmd.output().map_err(|source| Error::Spawn {
        command: describe(cmd),
        source,
    })
}

/// Runs `cmd`; its standard output if it succeeded, else [`Error::Failed`].
pub fn stdout(cmd: &mut Command) -> Result<String> {
    let out = output(cmd)?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(failed(cmd, &out))
    }
}

/// The [`Error::Failed`] for `cmd` that ended with `out`.
pub fn failed(cmd: &Command, out: &Output) -> Error {
    let mut stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
    if stderr.is_empty() {
        stderr = String::from_utf8_lossy(&out.stdout).trim().to_string();
    }
    Error::Failed {
        command: describe(cmd),
        status: out.status.to_string(),
        stderr,
    }
}

/// Standard output and error of `out`, joined (for messages a user reads).
pub fn combined(out: &Output) -> String {
    let mut s = String::from_utf8_lossy(&out.stdout).into_owned();
    s.push_str(&String::from_utf8_lossy(&out.stderr));
    s.trim().to_string()
}
