//! budgetd's REST API as the suites use it, through `budget-client` over the
//! testbed's Unix socket, with typed requests and responses.
//!
//! Response types come from `budget-protocol` where they exist there
//! ([`RunState`], [`PeerReason`]); the others are small local structs holding
//! only the fields the suites read (serde ignores the rest), until budgetd's
//! response types move into `budget-protocol`. Every API call of the harness is in
//! this module, so such a move changes only this file.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use budget_client::{Client, ClientError, Endpoint};
use budget_protocol::RunState;
use budget_protocol::why::PeerReason;
use serde::de::{DeserializeOwned, IgnoredAny};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::slurm::JobId;

/// How long [`Budgetd::drains`] waits for budgetd's first read of Slurm.
pub const DRAINS_READ_WAIT: Duration = Duration::from_secs(30);

/// `POST /v1/accounts` body.
#[derive(Debug, Serialize)]
struct NewAccount<'a> {
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<&'a str>,
    allocation_gpu_hours: f64,
}

/// `POST /v1/members` body.
#[derive(Debug, Serialize)]
struct NewMember<'a> {
    user: &'a str,
    account: &'a str,
}

/// `PATCH /v1/accounts/{name}` body.
#[derive(Debug, Serialize)]
struct AccountPatch {
    allocation_gpu_hours: f64,
}

/// `PATCH /v1/policy` body: the fields to change.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PolicyPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub default_min_runtime_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_min_runtime_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snapshot_max_age_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_secs: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub site_max_preemptions: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_requeues: Option<u32>,
    /// `gentle`, `default` or `aggressive` (the rule's other numbers are
    /// constants of it, which budgetd refuses in a patch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub preemption: Option<budget_protocol::PreemptionPreset>,
}

/// `POST /v1/usage/import` answer (the fields the suites read).
#[derive(Debug, Clone, Deserialize)]
pub struct ImportReport {
    pub runs: usize,
    pub inserted: u64,
    pub invalid: Vec<IgnoredAny>,
}

/// One recorded preemption (`GET /v1/preemptions` row).
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct Preemption {
    /// The victim.
    pub job_id: JobId,
    /// The victim's lost run.
    pub run: u32,
    pub account: String,
    pub preemptor: Option<JobId>,
    pub preemptor_account: Option<String>,
    /// `free_tier`, `over_budget`, `rebalance`, `drain`.
    pub reason: String,
    pub at: i64,
    pub gpu_hours: f64,
    /// `plugin` or `drain`.
    pub source: String,
}

#[derive(Debug, Deserialize)]
struct PreemptionReport {
    rows: Vec<Preemption>,
}

/// One row of `GET /v1/share`.
#[derive(Debug, Clone, Deserialize)]
pub struct ShareRow {
    pub account: String,
    /// `None` for account rows.
    pub user: Option<String>,
    pub ratio: f64,
}

#[derive(Debug, Deserialize)]
struct ShareReport {
    rows: Vec<ShareRow>,
}

/// One row of `GET /v1/usage?by=user`.
#[derive(Debug, Clone, Deserialize)]
pub struct UsageRow {
    pub account: String,
    pub user: Option<String>,
    /// Unweighted GPU-hours charged.
    pub raw_gpu_hours: f64,
}

#[derive(Debug, Deserialize)]
struct UsageReport {
    rows: Vec<UsageRow>,
}

/// A job another may preempt, from when (`why` → `preemption.may_preempt`).
#[derive(Debug, Clone, Deserialize)]
pub struct Outlook {
    pub job_id: JobId,
    pub account: String,
    /// First instant the rule allows it (its window end, or now).
    pub at: i64,
    pub reason: PeerReason,
}

/// The timing part of `why`.
#[derive(Debug, Clone, Deserialize)]
pub struct WhyPreemption {
    pub may_preempt: Vec<Outlook>,
    /// The preemption of the previous (or this requeued) run.
    pub preempted: Option<Preemption>,
}

/// `GET /v1/jobs/{id}/why` (the fields the suites read).
#[derive(Debug, Clone, Deserialize)]
pub struct Why {
    pub job_id: JobId,
    pub run: u32,
    pub account: String,
    pub state: RunState,
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// `budget_protocol::Tier` as text (`budgeted`, `over_budget`, `free`).
    pub tier: String,
    /// Global rank of the job's leaf (1 = best).
    pub rank: Option<u32>,
    /// The priority budgetd computes, as priority/budget does.
    pub priority: u32,
    pub preemption: WhyPreemption,
}

/// A job still on a draining node.
#[derive(Debug, Clone, Deserialize)]
pub struct HoldingJob {
    pub job_id: JobId,
    /// When it leaves the node (requeued, or its end for `leaves: time_limit`).
    pub requeue_at: i64,
    /// `requeue`, or `time_limit` (a `PreemptMode=OFF` partition's job).
    #[serde(default)]
    pub leaves: String,
}

/// `GET /v1/drains` item.
#[derive(Debug, Clone, Deserialize)]
pub struct DrainStatus {
    pub node: String,
    /// When the node will be empty (the latest instant one of its jobs leaves).
    pub empty_at: i64,
    pub jobs: Vec<HoldingJob>,
}

/// A testbed's budgetd.
#[derive(Debug, Clone)]
pub struct Budgetd {
    client: Client,
    socket: PathBuf,
}

impl Budgetd {
    /// budgetd on the Unix socket `socket`.
    pub fn new(socket: &Path) -> Budgetd {
        Budgetd {
            client: Client::new(Endpoint::Unix(socket.to_path_buf())),
            socket: socket.to_path_buf(),
        }
    }

    /// Its socket.
    pub fn socket(&self) -> &Path {
        &self.socket
    }

    fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T> {
        self.client
            .get_json(path)
            .map_err(|e| api_error("GET", path, e))
    }

    fn post<B: Serialize>(&self, path: &str, body: &B) -> Result<()> {
        self.client
            .post_json::<B, IgnoredAny>(path, body)
            .map(|_| ())
            .map_err(|e| api_error("POST", path, e))
    }

    fn patch<B: Serialize>(&self, path: &str, body: &B) -> Result<()> {
        let body = serde_json::to_vec(body).map_err(|e| Error::parse(path, e))?;
        self.client
            .request(
                "PATCH",
                path,
                &[("Content-Type", "application/json")],
                Some(&body),
            )
            .and_then(|r| r.error_for_status())
            .map(|_| ())
            .map_err(|e| api_error("PATCH", path, e))
    }

    /// The plugins' snapshot (`GET /v1/snapshot`: the suites run as budgetd's own
    /// user, which budgetd serves as the controller).
    pub fn snapshot(&self) -> Result<budget_protocol::PluginSnapshot> {
        self.get(budget_protocol::SNAPSHOT_PATH)
    }

    /// Whether budgetd answers `GET /v1/health`.
    pub fn healthy(&self) -> bool {
        self.get::<IgnoredAny>("/v1/health").is_ok()
    }

    /// Creates account `name` under `parent` (the root when `None`).
    pub fn create_account(&self, name: &str, parent: Option<&str>, gpu_hours: f64) -> Result<()> {
        self.post(
            "/v1/accounts",
            &NewAccount {
                name,
                parent,
                allocation_gpu_hours: gpu_hours,
            },
        )
    }

    /// Makes `user` a member of `account`.
    pub fn add_member(&self, user: &str, account: &str) -> Result<()> {
        self.post("/v1/members", &NewMember { user, account })
    }

    /// Sets `account`'s allocation.
    pub fn set_allocation(&self, account: &str, gpu_hours: f64) -> Result<()> {
        self.patch(
            &format!("/v1/accounts/{account}"),
            &AccountPatch {
                allocation_gpu_hours: gpu_hours,
            },
        )
    }

    /// Changes the site policy.
    pub fn set_policy(&self, patch: &PolicyPatch) -> Result<()> {
        self.patch("/v1/policy", patch)
    }

    /// `GET /metrics` (Prometheus text).
    pub fn metrics(&self) -> Result<String> {
        self.client
            .request("GET", "/metrics", &[], None)
            .and_then(|r| r.error_for_status())
            .map(|r| String::from_utf8_lossy(&r.body).into_owned())
            .map_err(|e| api_error("GET", "/metrics", e))
    }

    /// Imports sacct-format history (`--tz UTC` times).
    pub fn import_sacct(&self, text: &str) -> Result<ImportReport> {
        let path = "/v1/usage/import?tz=UTC";
        self.client
            .request(
                "POST",
                path,
                &[("Content-Type", "text/plain")],
                Some(text.as_bytes()),
            )
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .map_err(|e| api_error("POST", path, e))
    }

    /// The preemption record.
    pub fn preemptions(&self) -> Result<Vec<Preemption>> {
        Ok(self.get::<PreemptionReport>("/v1/preemptions")?.rows)
    }

    /// The rebalancing preemptions recorded (reasons `rebalance` and
    /// `over_budget`: what the site caps count).
    pub fn rebalancing_preemptions(&self) -> Result<Vec<Preemption>> {
        let mut rows = self.preemptions()?;
        rows.retain(|r| matches!(r.reason.as_str(), "rebalance" | "over_budget"));
        Ok(rows)
    }

    /// The fair-share table.
    pub fn share(&self) -> Result<Vec<ShareRow>> {
        Ok(self.get::<ShareReport>("/v1/share")?.rows)
    }

    /// The usage ratio of account `account` (its account row).
    pub fn ratio(&self, account: &str) -> Result<f64> {
        self.share()?
            .into_iter()
            .find(|r| r.account == account && r.user.is_none())
            .map(|r| r.ratio)
            .ok_or_else(|| Error::parse("GET /v1/share", format!("no row for account {account}")))
    }

    /// Usage by (account, user) over the window.
    pub fn usage_by_user(&self) -> Result<Vec<UsageRow>> {
        Ok(self.get::<UsageReport>("/v1/usage?by=user")?.rows)
    }

    /// `why` for job `job`.
    pub fn why(&self, job: JobId) -> Result<Why> {
        self.get(&format!("/v1/jobs/{job}/why"))
    }

    /// Every drain with its live status. Until its first read of Slurm after it
    /// starts, budgetd answers 503 ("has not read Slurm yet; try again in a second"),
    /// for longer on a loaded machine: that answer is waited out, up to
    /// [`DRAINS_READ_WAIT`], as a client told to try again would.
    pub fn drains(&self) -> Result<Vec<DrainStatus>> {
        let deadline = Instant::now() + DRAINS_READ_WAIT;
        loop {
            match self.get("/v1/drains") {
                Err(Error::Api {
                    source: ClientError::Status { status: 503, .. },
                    ..
                }) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(250)),
                answer => return answer,
            }
        }
    }

    /// Ends the drain of `nodes`.
    pub fn undrain(&self, nodes: &str) -> Result<()> {
        let path = format!("/v1/drains/{nodes}");
        self.client
            .delete(&path)
            .map(|_| ())
            .map_err(|e| api_error("DELETE", &path, e))
    }
}

fn api_error(method: &str, path: &str, source: ClientError) -> Error {
    Error::Api {
        request: format!("{method} {path}"),
        source,
    }
}
