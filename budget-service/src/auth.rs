//! Who is calling, and what they may do (docs/design.md §11).
//!
//! AuthN: on the Unix socket the caller's uid comes from the kernel
//! (`SO_PEERCRED`, captured per connection by [`Peer`]) and is mapped to a
//! user name with `getpwuid_r`; on TCP the caller must send
//! `Authorization: Bearer <token>` with a token from the config file.
//!
//! AuthZ: admins (uid 0, budgetd's own uid, configured uids/users, admin
//! tokens) may do anything; agent tokens may only post node-agent reports
//! (their caller is named `agent:<user>`, a name no Unix user, member or
//! coordinator can have, so they read nothing else); readers (tokens for dashboards) read everything;
//! a coordinator of account C may create accounts under any account of C's
//! subtree, modify or delete accounts strictly below C, and manage members of
//! C's subtree; a user reads the accounts they belong to (and their ancestors,
//! to see their rank path) and the subtrees they coordinate. Every refusal is
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

use crate::config::TokenRole;
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

/// The caller's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    Reader,
    User,
    /// A node agent's token: posts reports, nothing else.
    Agent,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    pub uid: Option<u32>,
    pub role: Role,
    /// `"unix"` or `"tcp"`.
    pub via: &'static str,
}

impl Caller {
    /// How the caller is written in the audit log.
    pub fn actor(&self) -> String {
        match self.uid {
            Some(uid) => format!("{} (uid {uid})", self.user),
            None => format!("{} (token)", self.user),
        }
    }

    pub fn is_admin(&self) -> bool {
        self.role == Role::Admin
    }

    /// Reads everything (admins and readers).
    pub fn reads_all(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Reader)
    }

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

    /// Fails unless the caller is an admin or a node agent.
    pub fn require_agent(&self, state: &AppState, what: &str) -> Result<(), AppError> {
        self.require(state, matches!(self.role, Role::Admin | Role::Agent), what)
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
    /// May create child accounts of / manage members of `account`.
    pub fn can_manage_under(&self, account: &str) -> bool {
        self.admin || self.manage_below.contains(account)
    }
    /// May change or delete `account` itself.
    pub fn can_modify(&self, account: &str) -> bool {
        self.admin || self.modify.contains(account)
    }
}

/// Resolves a uid to a user name with `getpwuid_r` (the uid itself if unknown).
pub fn user_name(uid: u32) -> String {
    let mut buf = vec![0u8; 4096];
    // SAFETY: `passwd` is plain data that getpwuid_r fills in; `buf` outlives
    // the call and its length is passed; `result` is written by the call.
    unsafe {
        let mut pwd: libc::passwd = std::mem::zeroed();
        let mut result: *mut libc::passwd = std::ptr::null_mut();
        let rc = libc::getpwuid_r(
            uid,
            &mut pwd,
            buf.as_mut_ptr().cast(),
            buf.len(),
            &mut result,
        );
        if rc == 0
            && !result.is_null()
            && !pwd.pw_name.is_null()
            && let Ok(s) = std::ffi::CStr::from_ptr(pwd.pw_name).to_str()
        {
            return s.to_string();
        }
    }
    uid.to_string()
}

/// Compares secrets in time independent of where they differ.
fn same_secret(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = AppError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<Peer>>()
            .map(|c| c.0.clone());
        match peer {
            Some(Peer::Unix { uid: Some(uid), .. }) => {
                let name = {
                    let mut names = state.user_names.lock().unwrap_or_else(|p| p.into_inner());
                    names.entry(uid).or_insert_with(|| user_name(uid)).clone()
                };
                let admin =
                    state.admin_uids.contains(&uid) || state.config.admins.users.contains(&name);
                Ok(Caller {
                    user: name,
                    uid: Some(uid),
                    role: if admin { Role::Admin } else { Role::User },
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
                let header = parts
                    .headers
                    .get(axum::http::header::AUTHORIZATION)
                    .and_then(|h| h.to_str().ok());
                let token = header
                    .and_then(|h| h.strip_prefix("Bearer "))
                    .map(str::trim);
                let found = token.and_then(|t| {
                    state
                        .config
                        .tokens
                        .iter()
                        .find(|spec| same_secret(spec.token.as_bytes(), t.as_bytes()))
                });
                match found {
                    Some(spec) if spec.role == TokenRole::Agent => Ok(Caller {
                        user: format!("agent:{}", spec.user),
                        uid: None,
                        role: Role::Agent,
                        via: "tcp",
                    }),
                    Some(spec) => {
                        let admin = spec.role == TokenRole::Admin
                            || state.config.admins.users.contains(&spec.user);
                        let role = if admin {
                            Role::Admin
                        } else if spec.role == TokenRole::Reader {
                            Role::Reader
                        } else {
                            Role::User
                        };
                        Ok(Caller {
                            user: spec.user.clone(),
                            uid: None,
                            role,
                            via: "tcp",
                        })
                    }
                    None => {
                        state.counters.auth_refusals.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(%addr, with_token = token.is_some(), "unauthenticated TCP request refused");
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
    }
}
