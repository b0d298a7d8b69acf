//! Running budgetd at a site: `backup FILE`, and whether a change is in effect in
//! slurmctld (`status`, the note after every change, `--wait`).
//!
//! A change is in effect in slurmctld once every plugin that fetched a snapshot
//! recently holds a generation at least the store's generation right after the
//! change (budgetd records what each plugin fetched: `GET /v1/plugins`). Until
//! then, e.g., `sbatch` to a just-created account is refused.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::anyhow;
use budget_protocol::service::{
    BACKUP_PATH, BackupReport, BackupRequest, Health, PLUGINS_PATH, PluginsState,
};

use crate::api::Api;
use crate::args::{
    AccountCmd, Command, CoordinatorCmd, PolicyCmd, UsageCmd, UsageError, WeightsCmd,
};
use crate::output::{Out, render};

/// Whether `cmd` changes what the plugins' snapshot holds (tree, budgets, weights,
/// policy, usage), so budgetctl says when it is in effect.
pub fn changes_budget_state(cmd: &Command) -> bool {
    match cmd {
        Command::Account(c) => !matches!(c, AccountCmd::Show { .. }),
        Command::User(_) | Command::Budget(_) => true,
        Command::Coordinator(c) => !matches!(c, CoordinatorCmd::Show),
        Command::Weights(c) => matches!(c, WeightsCmd::Set { .. }),
        Command::Policy(c) => matches!(c, PolicyCmd::Set { .. }),
        Command::Usage(u) => matches!(u.command, Some(UsageCmd::Import { .. })),
        _ => false,
    }
}

/// `budgetctl backup FILE [--force]`.
pub fn backup(api: &Api, out: Out, remote: bool, file: &Path, force: bool) -> anyhow::Result<()> {
    let path: PathBuf = if file.is_absolute() {
        file.to_path_buf()
    } else if remote {
        return Err(UsageError(format!(
            "with --url, FILE must be absolute: budgetd writes it on its own host (got {})",
            file.display()
        ))
        .into());
    } else {
        std::env::current_dir()
            .map_err(|e| anyhow!("current folder: {e}"))?
            .join(file)
    };
    let path = path
        .to_str()
        .ok_or_else(|| UsageError(format!("{} is not UTF-8", path.display())))?
        .to_string();
    let r: BackupReport = api.send_json(
        "POST",
        BACKUP_PATH,
        &BackupRequest {
            path,
            overwrite: force,
        },
    )?;
    out.print(&r, |r| {
        format!(
            "backup written: {} ({} bytes, {} ms)\nholds generation {}, audit log up to id {}, {} runs, schema version {}\nrestore: systemctl stop budgetd; budgetd --db DB --socket SOCKET --restore FILE (as budgetd's user); systemctl start budgetd\n",
            r.path, r.bytes, r.took_ms, r.generation, r.audit_id, r.runs, r.schema_version
        )
    })
}

/// One line on whether generation `target` is in effect in slurmctld.
fn describe(p: &PluginsState, target: u64) -> (bool, String) {
    if p.plugins.is_empty() {
        return (
            false,
            format!(
                "not yet in effect in slurmctld: no plugin fetched a snapshot in the last {} s \
                 (slurmctld down or not using the budget plugins?); it takes effect at their next fetch",
                p.horizon_secs
            ),
        );
    }
    if p.applied_generation >= target {
        return (
            true,
            format!(
                "in effect in slurmctld (its plugins hold generation {})",
                p.applied_generation
            ),
        );
    }
    let period = p.plugins.iter().filter_map(|f| f.period_secs).max();
    (
        false,
        format!(
            "not yet in effect in slurmctld: its plugins hold generation {}, the change is {}{} (--wait waits for it)",
            p.applied_generation,
            target,
            match period {
                Some(s) => format!("; they fetch every {s} s"),
                None => String::new(),
            }
        ),
    )
}

/// Waits (up to `timeout`) until `target` is in effect; the last state seen.
fn wait_for(api: &Api, target: u64, timeout: Duration) -> anyhow::Result<(bool, PluginsState)> {
    let deadline = Instant::now() + timeout;
    loop {
        let p: PluginsState = api.get(PLUGINS_PATH)?;
        if !p.plugins.is_empty() && p.applied_generation >= target {
            return Ok((true, p));
        }
        if Instant::now() >= deadline {
            return Ok((false, p));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn timed_out(p: &PluginsState, target: u64, secs: u64) -> anyhow::Error {
    let (_, line) = describe(p, target);
    anyhow!(
        "timed out after {secs} s waiting for slurmctld to load generation {target}: {}",
        line.trim_start_matches("not yet in effect in slurmctld: ")
    )
}

/// After a change: says on stderr whether it is in effect in slurmctld, or with
/// `wait` waits until it is (an error after `timeout_secs`).
pub fn in_effect(api: &Api, wait: bool, timeout_secs: u64) -> anyhow::Result<()> {
    // The generation right after the change (later ones include it).
    let h: Health = api.get("/v1/health")?;
    if wait {
        let (ok, p) = wait_for(api, h.generation, Duration::from_secs(timeout_secs))?;
        if !ok {
            return Err(timed_out(&p, h.generation, timeout_secs));
        }
        eprintln!("{}", describe(&p, h.generation).1);
        return Ok(());
    }
    let p: PluginsState = api.get(PLUGINS_PATH)?;
    eprintln!("{}", describe(&p, h.generation).1);
    Ok(())
}

/// `budgetctl status [--wait]`: budgetd's generation and what each plugin holds.
pub fn status(api: &Api, out: Out, wait: bool, timeout_secs: u64) -> anyhow::Result<()> {
    let h: Health = api.get("/v1/health")?;
    let p = if wait {
        let (ok, p) = wait_for(api, h.generation, Duration::from_secs(timeout_secs))?;
        if !ok {
            return Err(timed_out(&p, h.generation, timeout_secs));
        }
        p
    } else {
        api.get(PLUGINS_PATH)?
    };
    let now = crate::output::now();
    out.print(&p, |p| {
        let rows: Vec<Vec<String>> = p
            .plugins
            .iter()
            .map(|f| {
                vec![
                    f.plugin.clone(),
                    f.generation.to_string(),
                    format!("{} s ago", now - f.fetched_at),
                    f.period_secs.map(|s| format!("{s} s")).unwrap_or_default(),
                ]
            })
            .collect();
        format!(
            "budgetd generation {}\n{}{}\n",
            h.generation,
            if rows.is_empty() {
                String::new()
            } else {
                render(&["PLUGIN", "GENERATION", "FETCHED", "PERIOD"], &rows)
            },
            describe(p, h.generation).1
        )
    })
}
