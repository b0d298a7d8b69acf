//! An authenticated caller and its role: who is asking, as every handler and
//! the read throttle see it. How a caller is authenticated and what it may
//! change are `auth.rs`'s.

/// The caller's role. Matched exactly: a token's role is its `role`, never
/// derived from its `user` (a `user` token named like an admin is a user).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Admin,
    /// slurmctld's plugins (`[controller]` uids/users, `controller` tokens):
    /// the snapshot, job syncs and preemption records, and reads.
    Controller,
    Reader,
    User,
    /// A node agent's token: posts reports for its nodes, nothing else.
    Agent,
}

/// An authenticated caller.
#[derive(Debug, Clone)]
pub struct Caller {
    pub user: String,
    pub uid: Option<u32>,
    pub role: Role,
    /// May use the controller's routes: the `Controller` role, and uid 0 and
    /// budgetd's own uid (the package runs budgetd as `SlurmUser`), which
    /// are admins too.
    pub controller: bool,
    /// For agents: the nodes they may report for (empty: any, for admins).
    pub agent_nodes: Vec<String>,
    /// `"unix"`, `"tcp"` (bearer token) or `"ui"` (the web view's cookie).
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

    pub fn is_controller(&self) -> bool {
        self.controller
    }

    /// Reads everything (admins, the controller and readers).
    pub fn reads_all(&self) -> bool {
        matches!(self.role, Role::Admin | Role::Controller | Role::Reader)
    }

    /// Neither admin nor controller: small bodies, rate-limited expensive reads.
    pub fn is_unprivileged(&self) -> bool {
        !self.is_admin() && !self.is_controller()
    }
}
