//! `budgetctl account|user|coordinator|budget|weights`: the account tree,
//! memberships, coordinators, allocations and GPU weights.

use anyhow::bail;
use budget_protocol::tree::{
    AccountDetail, AccountPatch, Coordinator, MemberPatch, NewAccount, NewMember, WeightsPatch,
};
use policy_core::{AccountSpec, GpuWeights, MemberSpec};
use serde_json::json;

use crate::api::{Api, enc};
use crate::args::{AccountCmd, BudgetCmd, CoordinatorCmd, UsageError, UserCmd, WeightsCmd};
use crate::output::{Out, num, render};

fn parent_name(a: &AccountSpec) -> &str {
    a.parent.as_deref().unwrap_or("root")
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.into()
}

/// Items joined by ", ", or `-` for none.
fn list(items: &[String]) -> String {
    if items.is_empty() {
        "-".into()
    } else {
        items.join(", ")
    }
}

pub fn account(api: &Api, out: Out, c: &AccountCmd) -> anyhow::Result<()> {
    match c {
        AccountCmd::Add {
            name,
            parent,
            allocation,
            overcommit,
        } => {
            let req = NewAccount {
                name: name.clone(),
                parent: parent.clone(),
                allocation_gpu_hours: *allocation,
                overcommit: *overcommit,
            };
            let a: AccountSpec = api.send_json("POST", "/v1/accounts", &req)?;
            out.print(&a, |a| {
                format!(
                    "account {} added under {}\n",
                    a.name,
                    parent.as_deref().unwrap_or("root")
                )
            })
        }
        AccountCmd::Modify {
            name,
            allocation,
            parent,
            overcommit,
        } => {
            let patch = AccountPatch {
                allocation_gpu_hours: *allocation,
                parent: parent.clone(),
                overcommit: *overcommit,
            };
            if patch.allocation_gpu_hours.is_none()
                && patch.parent.is_none()
                && patch.overcommit.is_none()
            {
                bail!(UsageError(
                    "account modify: give --allocation, --parent or --overcommit".into()
                ));
            }
            let a: AccountSpec =
                api.send_json("PATCH", &format!("/v1/accounts/{}", enc(name)), &patch)?;
            out.print(&a, |a| {
                format!(
                    "account {}: parent {}, allocation {} GPU-h, overcommit {}\n",
                    a.name,
                    parent_name(a),
                    num(a.allocation_gpu_hours, 3),
                    a.overcommit
                )
            })
        }
        AccountCmd::Delete { name } => {
            api.delete(&format!("/v1/accounts/{}", enc(name)))?;
            out.print(&json!({ "deleted": name }), |_| {
                format!("account {name} deleted\n")
            })
        }
        AccountCmd::Show { name: None } => {
            let accounts: Vec<AccountSpec> = api.get("/v1/accounts")?;
            out.print(&accounts, |accounts| {
                let rows: Vec<Vec<String>> = accounts
                    .iter()
                    .map(|a| {
                        vec![
                            a.name.clone(),
                            parent_name(a).to_string(),
                            num(a.allocation_gpu_hours, 3),
                            yes_no(a.overcommit),
                        ]
                    })
                    .collect();
                render(&["ACCOUNT", "PARENT", "ALLOC_GPUH", "OVERCOMMIT"], &rows)
            })
        }
        AccountCmd::Show { name: Some(n) } => {
            let d: AccountDetail = api.get(&format!("/v1/accounts/{}", enc(n)))?;
            out.print(&d, |d| {
                let members: Vec<String> = d.members.iter().map(|m| m.user.clone()).collect();
                format!(
                    "account:      {}\nparent:       {}\nallocation:   {} GPU-h per window\novercommit:   {}\nchildren:     {}\nmembers:      {}\ncoordinators: {}\n",
                    d.account.name,
                    parent_name(&d.account),
                    num(d.account.allocation_gpu_hours, 3),
                    d.account.overcommit,
                    list(&d.children),
                    list(&members),
                    list(&d.coordinators),
                )
            })
        }
    }
}

pub fn user(api: &Api, out: Out, c: &UserCmd) -> anyhow::Result<()> {
    match c {
        UserCmd::Add {
            user,
            account,
            allocation,
        } => {
            let req = NewMember {
                user: user.clone(),
                account: account.clone(),
                allocation_gpu_hours: *allocation,
            };
            let m: MemberSpec = api.send_json("POST", "/v1/members", &req)?;
            out.print(&m, |_| format!("user {user} added to account {account}\n"))
        }
        UserCmd::Remove { user, account } => {
            api.delete(&format!("/v1/members/{}/{}", enc(account), enc(user)))?;
            out.print(&json!({"removed": user, "account": account}), |_| {
                format!("user {user} removed from account {account}\n")
            })
        }
    }
}

pub fn coordinator(api: &Api, out: Out, c: &CoordinatorCmd) -> anyhow::Result<()> {
    match c {
        CoordinatorCmd::Add { user, account } => {
            let req = Coordinator {
                user: user.clone(),
                account: account.clone(),
            };
            let c: Coordinator = api.send_json("POST", "/v1/coordinators", &req)?;
            out.print(&c, |_| {
                format!("user {user} now coordinates account {account}\n")
            })
        }
        CoordinatorCmd::Remove { user, account } => {
            api.delete(&format!("/v1/coordinators/{}/{}", enc(account), enc(user)))?;
            out.print(&json!({"removed": user, "account": account}), |_| {
                format!("user {user} no longer coordinates account {account}\n")
            })
        }
        CoordinatorCmd::Show => {
            let all: Vec<Coordinator> = api.get("/v1/coordinators")?;
            out.print(&all, |all| {
                let rows: Vec<Vec<String>> = all
                    .iter()
                    .map(|c| vec![c.account.clone(), c.user.clone()])
                    .collect();
                render(&["ACCOUNT", "COORDINATOR"], &rows)
            })
        }
    }
}

pub fn budget(api: &Api, out: Out, c: &BudgetCmd) -> anyhow::Result<()> {
    let BudgetCmd::Set {
        account,
        gpu_hours,
        user,
    } = c;
    let value: Option<f64> =
        if gpu_hours.eq_ignore_ascii_case("none") {
            None
        } else {
            Some(gpu_hours.parse().map_err(|_| {
                UsageError(format!("GPUH must be a number or none, got {gpu_hours:?}"))
            })?)
        };
    match (user, value) {
        (None, None) => bail!(UsageError("an account's allocation cannot be none".into())),
        (None, Some(v)) => {
            let patch = AccountPatch {
                allocation_gpu_hours: Some(v),
                ..AccountPatch::default()
            };
            let a: AccountSpec =
                api.send_json("PATCH", &format!("/v1/accounts/{}", enc(account)), &patch)?;
            out.print(&a, |a| {
                format!(
                    "account {}: {} GPU-h per window\n",
                    a.name,
                    num(a.allocation_gpu_hours, 3)
                )
            })
        }
        (Some(u), v) => {
            let patch = MemberPatch {
                allocation_gpu_hours: v,
            };
            let m: MemberSpec = api.send_json(
                "PATCH",
                &format!("/v1/members/{}/{}", enc(account), enc(u)),
                &patch,
            )?;
            out.print(&m, |m| match m.allocation_gpu_hours {
                Some(h) => format!("user {u} in {account}: {} GPU-h per window\n", num(h, 3)),
                None => format!("user {u} in {account}: an equal share of the account\n"),
            })
        }
    }
}

pub fn weights(api: &Api, out: Out, c: &WeightsCmd) -> anyhow::Result<()> {
    let w: GpuWeights = match c {
        WeightsCmd::Set { pairs } => {
            let mut patch = WeightsPatch::default();
            for p in pairs {
                let (k, w) = p
                    .split_once('=')
                    .ok_or_else(|| UsageError(format!("expected TYPE=WEIGHT, got {p:?}")))?;
                let w: f64 = w.trim().parse().map_err(|_| {
                    UsageError(format!("weight of {k:?} must be a number, got {w:?}"))
                })?;
                if k.eq_ignore_ascii_case("default") {
                    patch.default = Some(w);
                } else {
                    patch.set.insert(k.to_string(), w);
                }
            }
            api.send_json("PATCH", "/v1/weights", &patch)?
        }
        WeightsCmd::Show => api.get("/v1/weights")?,
    };
    out.print(&w, |w| {
        let mut rows = vec![vec!["(default)".to_string(), num(w.default, 3)]];
        rows.extend(w.by_type.iter().map(|(k, v)| vec![k.clone(), num(*v, 3)]));
        render(&["GPU_TYPE", "WEIGHT"], &rows)
    })
}
