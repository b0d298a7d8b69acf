//! Who is calling, and what they may do (docs/design.md §11).
//!
//! AuthN: on the Unix socket the caller's uid comes from the kernel
//! (`SO_PEERCRED`, captured per connection by [`Peer`]) and is mapped to a
//! user name with `getpwuid_r`; on TCP the caller must send
//! `Authorization: Bearer <token>` with a token from the config file.
//!
//! AuthZ: admins (uid 0, budgetd's own uid, configured uids/users, admin
//! tokens) may do anything but the controller's routes; the controller (uid
//! 0, budgetd's own uid, `[controller]` uids/users, controller tokens) alone
//! reads the plugin snapshot, syncs jobs and records preemptions; roles are
//! matched exactly (a token's role is its `role`); agent tokens may only post node-agent reports
//! for the nodes their token lists, every other route is refused to them
//! (by the API's first middleware; their caller is named `agent:<user>`, a
//! name no Unix user, member or coordinator can have); readers (tokens for dashboards) read everything;
//! a coordinator of account C may create accounts under any account of C's
//! subtree, modify or delete accounts strictly below C, and manage members of
//! C's subtree; a user reads the accounts they belong to (and their ancestors,
//! to see their rank path) and the subtrees they coordinate, but per-user
//! figures only of their own accounts and coordinated subtrees. Every refusal is
//! logged with the caller and what was refused, and nothing is changed.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;

use axum::extract::connect_info::Connected;
use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use axum::serve::IncomingStream;
use policy_core::TreeSpec;
use policy_core::tree::ROOT;
use tokio::net::{TcpListener, UnixListener};

pub use crate::caller::{Caller, Role};
use crate::config::{TokenRole, TokenSpec};
use crate::error::AppError;
use crate::state::AppState;
use budget_protocol::tree::Coordinator;

/// Where a connection came from, captured when it is accepted.
#[derive(Debug, Clone)]
pub enum Peer {
    /// Unix socket; `uid` is `None` if the kernel would not tell.
    Unix {
        uid: Option<u32>,
        pid: Option<i32>,
    },
    Tcp(SocketAddr),
}

impl Connected<IncomingStream<'_, UnixListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, UnixListener>) -> Self {
        match stream.io().peer_cred() {
            Ok(c) => Peer::Unix {
                uid: Some(c.uid()),
                pid: c.pid(),
            },
            Err(_) => Peer::Unix {
                uid: None,
                pid: None,
            },
        }
    }
}

impl Connected<IncomingStream<'_, TcpListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TcpListener>) -> Self {
        Peer::Tcp(*stream.remote_addr())
    }
}

impl Caller {
    /// A refusal, logged.
    pub fn refuse(&self, state: &AppState, what: &str) -> AppError {
        state.counters.auth_refusals.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(caller = %self.actor(), via = self.via, refused = what, "permission denied");
        AppError::Forbidden(format!("permission denied: {} may not {what}", self.user))
    }

    /// Fails with a logged refusal to do `what` unless `allowed`.
    pub fn require(&self, state: &AppState, allowed: bool, what: &str) -> Result<(), AppError> {
        if allowed {
            Ok(())
        } else {
            Err(self.refuse(state, what))
        }
    }

    /// Fails unless the caller is an admin.
    pub fn require_admin(&self, state: &AppState, what: &str) -> Result<(), AppError> {
        self.require(state, self.is_admin(), what)
    }

    /// Fails unless the caller is the controller (slurmctld's plugins).
    pub fn require_controller(&self, state: &AppState, what: &str) -> Result<(), AppError> {
        self.require(state, self.is_controller(), what)
    }

    /// Fails unless the caller may post a report for `node`: an admin, or an
    /// agent whose token lists `node`.
    pub fn require_agent_for(
        &self,
        state: &AppState,
        node: &str,
        what: &str,
    ) -> Result<(), AppError> {
        let ok = match self.role {
            Role::Admin => true,
            Role::Agent => self.agent_nodes.iter().any(|n| n == node),
            _ => false,
        };
        self.require(state, ok, &format!("{what} for node {node:?}"))
    }

    /// Fails unless the caller reads everything.
    pub fn require_reader(&self, state: &AppState, what: &str) -> Result<(), AppError> {
        self.require(state, self.reads_all(), what)
    }
}

/// Accounts a (non-admin) user coordinates, with their subtrees.
fn coordinated_subtrees(
    user: &str,
    tree: &TreeSpec,
    coords: &BTreeSet<Coordinator>,
) -> BTreeSet<String> {
    coords
        .iter()
        .filter(|c| c.user == user)
        .flat_map(|c| tree.subtree(&c.account))
        .collect()
}

/// Accounts strictly below the ones `user` coordinates.
fn strictly_below(user: &str, tree: &TreeSpec, coords: &BTreeSet<Coordinator>) -> BTreeSet<String> {
    coords
        .iter()
        .filter(|c| c.user == user)
        .flat_map(|c| {
            let mut s = tree.subtree(&c.account);
            s.remove(&c.account);
            s
        })
        .collect()
}

/// What a caller may see and change, computed from the tree once per request.
#[derive(Debug, Clone)]
pub struct Scope {
    /// `None`: everything.
    readable: Option<BTreeSet<String>>,
    /// Accounts under which the caller may create accounts and manage members.
    manage_below: BTreeSet<String>,
    /// Accounts the caller may modify or delete themselves.
    modify: BTreeSet<String>,
    /// Accounts whose jobs the caller may see: their memberships and
    /// coordinated subtrees, without the ancestors `readable` adds for the
    /// rank path (a member of a team must not see its parent's other jobs).
    jobs_of: BTreeSet<String>,
    /// The caller's user name: their own per-user rows are always theirs.
    user: String,
    admin: bool,
}

impl Scope {
    /// The scope of `caller` in the current tree.
    pub fn of(caller: &Caller, tree: &TreeSpec, coords: &BTreeSet<Coordinator>) -> Scope {
        if caller.reads_all() {
            return Scope {
                readable: None,
                manage_below: BTreeSet::new(),
                modify: BTreeSet::new(),
                jobs_of: BTreeSet::new(),
                user: caller.user.clone(),
                admin: caller.is_admin(),
            };
        }
        let manage_below = coordinated_subtrees(&caller.user, tree, coords);
        let modify = strictly_below(&caller.user, tree, coords);
        let mut readable: BTreeSet<String> = manage_below.clone();
        for m in tree.members.iter().filter(|m| m.user == caller.user) {
            readable.insert(m.account.clone());
        }
        let jobs_of = readable.clone();
        let with_ancestors: Vec<String> = readable.iter().flat_map(|a| tree.ancestors(a)).collect();
        readable.extend(with_ancestors);
        if !readable.is_empty() {
            readable.insert(ROOT.to_string());
        }
        Scope {
            readable: Some(readable),
            manage_below,
            modify,
            jobs_of,
            user: caller.user.clone(),
            admin: false,
        }
    }

    pub fn can_read(&self, account: &str) -> bool {
        self.readable.as_ref().is_none_or(|r| r.contains(account))
    }
    /// May see jobs charged to `account` (everyone sees their own jobs too).
    pub fn can_see_jobs_of(&self, account: &str) -> bool {
        self.readable.is_none() || self.jobs_of.contains(account)
    }
    /// May see `user`'s own figures in `account` (per-user rows of share
    /// and usage): the caller's own, and those of the accounts whose jobs
    /// the caller may see, not of ancestors read only for the rank path
    /// (the same line `why` draws).
    pub fn can_see_user_in(&self, account: &str, user: &str) -> bool {
        self.user == user || self.can_see_jobs_of(account)
    }
    /// May create child accounts of / manage members of `account`.
    pub fn can_manage_under(&self, account: &str) -> bool {
        self.admin || self.manage_below.contains(account)
    }
    /// Coordinates at least one account (admins: see [`Scope::can_manage_under`]).
    pub fn coordinates_any(&self) -> bool {
        !self.manage_below.is_empty()
    }
    /// May change or delete `account` itself.
    pub fn can_modify(&self, account: &str) -> bool {
        self.admin || self.modify.contains(account)
    }
}

/// What `getpwuid_r` said about a uid.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The uid's user name.
    Found(String),
    /// No such user (the name is then the uid as a number).
    Unknown,
    /// The lookup failed (NSS/LDAP down, interrupted): try again later.
    Failed(i32),
}

/// Resolves a uid with `getpwuid_r`, growing the buffer on `ERANGE` and
/// retrying `EINTR`/`EAGAIN`/`EIO`-style failures a few times. Blocking (NSS
/// may ask LDAP): call it off the async workers ([`resolve_user`]).
pub fn lookup_uid(uid: u32) -> Lookup {
    let mut size = 4096usize;
    let mut last = 0;
    for attempt in 0..4 {
        let mut buf = vec![0u8; size];
        // SAFETY: `passwd` is plain data that getpwuid_r fills in; `buf` outlives
        // the call and its length is passed; `result` is written by the call.
        let (rc, found) = unsafe {
            let mut pwd: libc::passwd = std::mem::zeroed();
            let mut result: *mut libc::passwd = std::ptr::null_mut();
            let rc = libc::getpwuid_r(
                uid,
                &mut pwd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                &mut result,
            );
            let name = if rc == 0 && !result.is_null() && !pwd.pw_name.is_null() {
                std::ffi::CStr::from_ptr(pwd.pw_name)
                    .to_str()
                    .ok()
                    .map(str::to_string)
            } else {
                None
            };
            (
                rc,
                if rc == 0 && result.is_null() {
                    Some(None)
                } else {
                    name.map(Some)
                },
            )
        };
        match (rc, found) {
            (0, Some(Some(name))) => return Lookup::Found(name),
            (0, Some(None)) => return Lookup::Unknown,
            // A name that is not UTF-8: treat as unknown (the uid names the caller).
            (0, None) => return Lookup::Unknown,
            (libc::ERANGE, _) if size < 1 << 20 => size *= 4,
            // POSIX lists these as "not found" for some NSS back ends.
            (libc::ENOENT | libc::ESRCH | libc::EBADF | libc::EPERM, _) => return Lookup::Unknown,
            (e, _) => {
                last = e;
                std::thread::sleep(std::time::Duration::from_millis(10 << attempt));
            }
        }
    }
    Lookup::Failed(last)
}

/// Resolves a uid to a user name with `getpwuid_r` (the uid itself if unknown).
pub fn user_name(uid: u32) -> String {
    match lookup_uid(uid) {
        Lookup::Found(n) => n,
        Lookup::Unknown | Lookup::Failed(_) => uid.to_string(),
    }
}

/// The user name of `uid`: from the cache, else looked up on the blocking
/// pool. Only names found are cached: an unknown uid or a failed lookup
/// is asked again next time (a user added later, NSS back again).
pub async fn resolve_user(state: &AppState, uid: u32) -> Result<String, AppError> {
    if let Some(n) = state
        .user_names
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&uid)
    {
        return Ok(n.clone());
    }
    let found = tokio::task::spawn_blocking(move || lookup_uid(uid))
        .await
        .map_err(|e| AppError::Internal(format!("user lookup failed: {e}")))?;
    match found {
        Lookup::Found(name) => {
            state
                .user_names
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .insert(uid, name.clone());
            Ok(name)
        }
        Lookup::Unknown => Ok(uid.to_string()),
        Lookup::Failed(errno) => {
            tracing::warn!(uid, errno, "getpwuid_r failed; refusing the request");
            Err(AppError::Unavailable(format!(
                "cannot resolve uid {uid} to a user name now (errno {errno}); try again"
            )))
        }
    }
}

/// Compares secrets in time independent of their contents and of where they
/// differ: both are hashed-free folded over the longer length, so neither the
/// first differing byte nor a length mismatch returns early.
pub fn same_secret(a: &[u8], b: &[u8]) -> bool {
    let n = a.len().max(b.len());
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..n {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    // Keep the compiler from turning the fold into an early exit.
    std::hint::black_box(diff) == 0
}

/// The outcome of authentication, stored in the request's extensions by the
/// API's first middleware (before any body byte is read).
#[derive(Debug, Clone)]
pub enum Authenticated {
    Ok(Caller),
    Refused(AppError),
}

/// The bearer token of a request head, if any.
fn bearer(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.strip_prefix("Bearer "))
        .map(str::trim)
}

/// The configured token `token` is. Every token is compared (no early exit
/// on a match), each in constant time.
fn token_spec<'a>(state: &'a AppState, token: Option<&str>) -> Option<&'a TokenSpec> {
    let t = token?;
    let mut hit = None;
    for spec in &state.config.tokens {
        if same_secret(spec.token.as_bytes(), t.as_bytes()) && hit.is_none() {
            hit = Some(spec);
        }
    }
    hit
}

/// The caller a configured token names (`None`: no such token), as it
/// reached budgetd (`via`: `tcp` for a bearer token, `ui` for the web
/// view's cookie).
pub fn token_caller(state: &AppState, token: Option<&str>, via: &'static str) -> Option<Caller> {
    let spec = token_spec(state, token)?;
    let role = match spec.role {
        TokenRole::Admin => Role::Admin,
        TokenRole::Controller => Role::Controller,
        TokenRole::Reader => Role::Reader,
        TokenRole::User => Role::User,
        TokenRole::Agent => Role::Agent,
    };
    Some(Caller {
        user: if role == Role::Agent {
            format!("agent:{}", spec.user)
        } else {
            spec.user.clone()
        },
        uid: None,
        role,
        controller: role == Role::Controller,
        agent_nodes: spec.nodes.clone(),
        via,
    })
}

/// Whether a request head carries a controller or agent token: the only
/// callers a TCP connection in the reserve over the connection caps is
/// served for (see `server.rs`).
pub fn may_use_connection_reserve(state: &AppState, headers: &axum::http::HeaderMap) -> bool {
    token_spec(state, bearer(headers))
        .is_some_and(|spec| matches!(spec.role, TokenRole::Controller | TokenRole::Agent))
}

/// Authenticates a request from its head alone: the connection's peer
/// credentials or its bearer token.
pub async fn authenticate(parts: &Parts, state: &AppState) -> Result<Caller, AppError> {
    let peer = parts
        .extensions
        .get::<ConnectInfo<Peer>>()
        .map(|c| c.0.clone());
    match peer {
        Some(Peer::Unix { uid: Some(uid), .. }) => {
            let name = resolve_user(state, uid).await?;
            let admin =
                state.admin_uids.contains(&uid) || state.config.admins.users.contains(&name);
            let controller = state.controller_uids.contains(&uid)
                || state.config.controller.users.contains(&name);
            let role = if admin {
                Role::Admin
            } else if controller {
                Role::Controller
            } else {
                Role::User
            };
            Ok(Caller {
                user: name,
                uid: Some(uid),
                role,
                controller,
                agent_nodes: Vec::new(),
                via: "unix",
            })
        }
        Some(Peer::Unix { uid: None, .. }) => {
            state.counters.auth_refusals.fetch_add(1, Ordering::Relaxed);
            Err(AppError::Unauthorized(
                "cannot read the caller's credentials on the socket".into(),
            ))
        }
        Some(Peer::Tcp(addr)) => {
            let token = bearer(&parts.headers);
            match token_caller(state, token, "tcp") {
                Some(caller) => Ok(caller),
                None => {
                    state.counters.auth_refusals.fetch_add(1, Ordering::Relaxed);
                    if let Some(left_out) = crate::loglimit::UNAUTHENTICATED.allow() {
                        tracing::warn!(%addr, with_token = token.is_some(), left_out, "unauthenticated TCP request refused (one line a second at most; left_out: refusals not logged since the last line)");
                    }
                    Err(AppError::Unauthorized(if token.is_some() {
                        "unknown bearer token".into()
                    } else {
                        "missing Authorization: Bearer <token> header".into()
                    }))
                }
            }
        }
        None => Err(AppError::Internal(
            "connection without peer information".into(),
        )),
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        match parts.extensions.get::<Authenticated>() {
            Some(Authenticated::Ok(c)) => Ok(c.clone()),
            Some(Authenticated::Refused(e)) => Err(e.clone()),
            // Not behind the API's middleware (a router built by hand).
            None => authenticate(parts, state).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use policy_core::{AccountSpec, MemberSpec};

    #[test]
    fn coordinator_and_user_scopes() {
        let a = |n: &str, p: Option<&str>| AccountSpec {
            name: n.into(),
            parent: p.map(Into::into),
            allocation_gpu_hours: 1.0,
            overcommit: true,
        };
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![
                a("org", None),
                a("ta", Some("org")),
                a("ta1", Some("ta")),
                a("tb", Some("org")),
            ],
            members: vec![MemberSpec {
                user: "ann".into(),
                account: "ta1".into(),
                allocation_gpu_hours: None,
            }],
        };
        let coords: BTreeSet<Coordinator> = [Coordinator {
            user: "cat".into(),
            account: "ta".into(),
        }]
        .into();
        let user = |n: &str| Caller {
            user: n.into(),
            uid: Some(1000),
            role: Role::User,
            controller: false,
            agent_nodes: Vec::new(),
            via: "unix",
        };
        let cat = Scope::of(&user("cat"), &tree, &coords);
        assert!(cat.can_manage_under("ta") && cat.can_manage_under("ta1"));
        assert!(cat.can_modify("ta1") && !cat.can_modify("ta") && !cat.can_modify("tb"));
        assert!(cat.can_read("org") && !cat.can_read("tb"));
        let ann = Scope::of(&user("ann"), &tree, &coords);
        assert!(ann.can_read("ta1") && ann.can_read("ta") && ann.can_read("root"));
        assert!(!ann.can_read("tb") && !ann.can_manage_under("ta1"));
        assert_eq!(user_name(0), "root");
        assert_eq!(lookup_uid(0), Lookup::Found("root".into()));
        assert_eq!(lookup_uid(4_000_000_000), Lookup::Unknown);
        assert!(same_secret(b"abcdefgh", b"abcdefgh"));
        assert!(!same_secret(b"abcdefgh", b"abcdefgi"));
        assert!(!same_secret(b"abcdefgh", b"abcdefghi"));
        assert!(!same_secret(b"", b"a"));
    }
}
