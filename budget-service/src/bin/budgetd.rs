//! `budgetd`: the slurm-budget service. Thin: parses arguments, opens the
//! store, binds the sockets and serves until SIGTERM/SIGINT; or, with
//! `--restore BACKUP`, replaces the database with a backup and exits.

use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use budget_service::{AppState, Config, Listeners, Store, bind_unix, run, shutdown_signal};
use clap::Parser;

/// GPU-time budgets and hierarchical fair share for Slurm: the service.
#[derive(Debug, Parser)]
#[command(version)]
struct Args {
    /// SQLite database file (created and migrated if needed).
    #[arg(long, env = "BUDGET_DB")]
    db: PathBuf,
    /// Unix socket to listen on (callers identified by peer credentials).
    #[arg(long, env = "BUDGET_SOCKET")]
    socket: PathBuf,
    /// Also listen on TCP (callers need a bearer token from the config).
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Config file (TOML): admins, tokens, policy defaults.
    #[arg(long)]
    config: Option<PathBuf>,
    /// `scontrol` used by drains (needs SLURM_CONF of the cluster in the environment).
    #[arg(long, env = "BUDGET_SCONTROL", default_value = "scontrol")]
    scontrol: String,
    /// Replace the database with this backup (from `budgetctl backup`) and exit.
    /// budgetd must be stopped (the socket must not answer); the replaced database
    /// is kept as DB.before-restore-UNIXTIME. Run as budgetd's user.
    #[arg(long, value_name = "BACKUP")]
    restore: Option<PathBuf>,
    /// `squeue` used by drains to read jobs (`--json`); default: next to `scontrol`.
    #[arg(long, env = "BUDGET_SQUEUE")]
    squeue: Option<String>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("BUDGET_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Some(file) = &args.restore {
        let now = budget_service::clock::now();
        let r = budget_service::backup::restore(&args.db, &args.socket, file, now)
            .with_context(|| format!("restoring {} from {}", args.db.display(), file.display()))?;
        println!(
            "restored {} from {}: generation {}, last audit id {}, {} runs, schema version {}{}",
            args.db.display(),
            file.display(),
            r.generation,
            r.audit_id,
            r.runs,
            r.schema_version,
            match &r.previous {
                Some(p) => format!("; the replaced database is kept as {}", p.display()),
                None => String::new(),
            }
        );
        println!("start budgetd (systemctl start budgetd)");
        return Ok(());
    }
    let config = match &args.config {
        Some(p) => {
            let c = Config::load(p)?;
            // Warned, not refused: sites and scripts that wrote it 0644 keep
            // working, and the log says what to fix.
            if let Some(w) = budget_service::config::permission_warning(p, &c) {
                tracing::warn!("{w}");
            }
            c
        }
        None => Config::default(),
    };
    // Before SQLite opens it: 0600 when new, and refused when another budgetd has it.
    let _db_lock = budget_service::db::claim(&args.db)?;
    budget_service::raise_fd_limit();
    let store = Store::open(&args.db, &config.policy)
        .with_context(|| format!("opening {}", args.db.display()))?;
    tracing::info!(db = %args.db.display(), runs = store.ledger().len(), accounts = store.tree().accounts.len(), "store loaded");
    let state = AppState::new(store, config);
    budget_service::scontrol::set_tools(budget_service::scontrol::SlurmTools {
        squeue: args
            .squeue
            .clone()
            .unwrap_or_else(|| budget_service::scontrol::squeue_beside(&args.scontrol)),
        scontrol: args.scontrol.clone(),
        timeout: budget_service::scontrol::CALL_TIMEOUT,
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let unix = bind_unix(&args.socket).with_context(|| format!("binding {}", args.socket.display()))?;
        let tcp = match args.listen {
            Some(addr) => Some(tokio::net::TcpListener::bind(addr).await.with_context(|| format!("binding {addr}"))?),
            None => None,
        };
        tracing::info!(socket = %args.socket.display(), tcp = ?tcp.as_ref().and_then(|l| l.local_addr().ok()), "budgetd listening");
        // Drains (docs/design.md §7): requeue jobs on drained nodes as their contracts allow.
        let drainer = budget_service::drain_worker::spawn(state.clone());
        // The cluster's GPUs, for the snapshot's `cluster_gpus` (read once a minute).
        let capacity = {
            let state = state.clone();
            budget_service::capacity::spawn(move |gpus| state.set_capacity(gpus))
        };
        // The partitions' PriorityTiers and PreemptMode=OFF, for why, shadow mode
        // and the drain worker (read once a minute).
        let partitions = {
            let state = state.clone();
            budget_service::partitions::spawn(move |p| state.set_partitions(p))
        };
        run(state, Listeners { unix: Some(unix), tcp }, shutdown_signal()).await?;
        drainer.abort();
        capacity.abort();
        partitions.abort();
        let _ = std::fs::remove_file(&args.socket);
        tracing::info!("budgetd stopped");
        anyhow::Ok(())
    })
}
