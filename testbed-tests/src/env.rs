//! The environment a testbed's clients need ([`TestbedEnv`]): what
//! `eval "$(scripts/testbed env)"` changes in a shell's exported variables, captured by
//! the testbed's lifecycle (`testbed.rs`) and applied to every Slurm command `slurm.rs`
//! runs.

use std::ffi::{OsStr, OsString};
use std::process::Command;

use crate::error::{Error, Result};

/// The environment a testbed's clients need: what `eval "$(scripts/testbed env)"`
/// changes in a shell's exported variables (set or removed).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TestbedEnv {
    vars: Vec<(OsString, Option<OsString>)>,
}

impl TestbedEnv {
    /// Applies the changes to `cmd`.
    pub fn apply(&self, cmd: &mut Command) {
        for (k, v) in &self.vars {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
    }

    /// The value set for `name`, if the testbed sets it.
    pub fn get(&self, name: &str) -> Option<&OsStr> {
        self.vars
            .iter()
            .find(|(k, _)| k == name)
            .and_then(|(_, v)| v.as_deref())
    }

    /// Names of the variables set or removed (for messages).
    pub fn names(&self) -> Vec<String> {
        self.vars
            .iter()
            .map(|(k, _)| k.to_string_lossy().into_owned())
            .collect()
    }

    /// From `env -0` before, an empty record, and `env -0` after the `eval`.
    pub fn from_dumps(out: &[u8]) -> Result<TestbedEnv> {
        // Every record ends with a NUL: drop the last one, and the separator is the
        // first empty record.
        let out = out.strip_suffix(&[0]).unwrap_or(out);
        let records: Vec<&[u8]> = out.split(|b| *b == 0).collect();
        let sep = records.iter().position(|r| r.is_empty()).ok_or_else(|| {
            Error::parse(
                "scripts/testbed env",
                "no separator between the two env dumps",
            )
        })?;
        let parse = |rs: &[&[u8]]| -> Vec<(OsString, OsString)> {
            use std::os::unix::ffi::OsStrExt;
            rs.iter()
                .filter(|r| !r.is_empty())
                .filter_map(|r| {
                    let eq = r.iter().position(|b| *b == b'=')?;
                    Some((
                        OsStr::from_bytes(&r[..eq]).to_os_string(),
                        OsStr::from_bytes(&r[eq + 1..]).to_os_string(),
                    ))
                })
                .collect()
        };
        let before = parse(&records[..sep]);
        let after = parse(&records[sep + 1..]);
        let mut vars: Vec<(OsString, Option<OsString>)> = after
            .iter()
            .filter(|(k, v)| !before.iter().any(|(bk, bv)| bk == k && bv == v))
            .map(|(k, v)| (k.clone(), Some(v.clone())))
            .collect();
        vars.extend(
            before
                .iter()
                .filter(|(k, _)| !after.iter().any(|(ak, _)| ak == k))
                .map(|(k, _)| (k.clone(), None)),
        );
        Ok(TestbedEnv { vars })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_diff_from_dumps() {
        let mut dump = Vec::new();
        for r in ["PATH=/usr/bin", "HOME=/root", "GONE=1", "SAME=x=y"] {
            dump.extend_from_slice(r.as_bytes());
            dump.push(0);
        }
        dump.push(0);
        for r in [
            "PATH=/tb/bin:/usr/bin",
            "HOME=/root",
            "SAME=x=y",
            "SLURM_CONF=/tb/etc/slurm.conf",
            "EMPTY=",
        ] {
            dump.extend_from_slice(r.as_bytes());
            dump.push(0);
        }
        let env = TestbedEnv::from_dumps(&dump).unwrap();
        assert_eq!(env.get("PATH"), Some(OsStr::new("/tb/bin:/usr/bin")));
        assert_eq!(
            env.get("SLURM_CONF"),
            Some(OsStr::new("/tb/etc/slurm.conf"))
        );
        assert_eq!(env.get("EMPTY"), Some(OsStr::new("")));
        assert_eq!(env.get("HOME"), None);
        assert_eq!(env.names(), vec!["PATH", "SLURM_CONF", "EMPTY", "GONE"]);
        let mut cmd = Command::new("true");
        env.apply(&mut cmd);
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(envs.contains(&(OsStr::new("GONE"), None)));
        assert!(TestbedEnv::from_dumps(b"A=1\0").is_err());
    }
}
