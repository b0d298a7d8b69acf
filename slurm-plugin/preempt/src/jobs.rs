//! Reading what the preemption rule needs out of `job_record_t`, and the small pure
//! helpers behind it (TRES GPU counts, hostlists, the uid -> name cache).
//!
//! Every pointer is checked; strings are read lossily; nothing panics on Slurm data.
//! Callers hold the job lock (Slurm calls every preempt hook under it).

use std::collections::{HashMap, HashSet};
use std::ffi::{CStr, c_char};
use std::sync::{Arc, Mutex, RwLock};

use slurm_ffi::sys::job_record_t;
use slurm_ffi::{NO_VAL, job_state};
use slurm_plugin_common::contract::{Contract, effective_contract, is_free_name};

/// What the rule needs to know about one job, owned (so it can be cached per pass).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobFacts {
    pub job_id: u32,
    pub account: String,
    /// Empty when the name is not known yet: the job is then placed at its account.
    pub user: String,
    pub contract: Contract,
    /// Start of the current run (0 if not running).
    pub run_start: i64,
    pub gpus: u32,
    pub running: bool,
    /// Allocated nodes (hostlist expression), if any.
    pub nodes: Option<String>,
}

impl JobFacts {
    /// The policy core's view of this job.
    pub fn view(&self) -> policy_core::preempt::JobView<'_> {
        policy_core::preempt::JobView {
            job_id: self.job_id,
            account: &self.account,
            user: &self.user,
            free_tier: self.contract.free_tier,
            run_start: self.run_start,
            min_runtime: self.contract.min_runtime,
            gpus: self.gpus,
        }
    }
}

/// Copy a C string (lossy); `None` for NULL.
pub fn text(p: *const c_char) -> Option<String> {
    if p.is_null() {
        return None;
    }
    // SAFETY: Slurm string fields are NULL or NUL-terminated while the lock is held.
    Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Whether a job is running now (suspended jobs hold no GPUs for the rule).
pub fn is_running(job: &job_record_t) -> bool {
    job_state::is_running(job.job_state)
}

/// Read a job record.
pub fn facts(job: &job_record_t, users: &UserCache, default_min_runtime: i64) -> JobFacts {
    let partition = text(job.partition);
    // SAFETY: qos_ptr is NULL or a valid QOS record under the job lock.
    let qos = unsafe { job.qos_ptr.as_ref() }.and_then(|q| text(q.name));
    let free_by_name = is_free_name(partition.as_deref()) || is_free_name(qos.as_deref());
    let contract = effective_contract(
        text(job.admin_comment).as_deref(),
        text(job.comment).as_deref(),
        free_by_name,
        default_min_runtime,
    );
    let user = match text(job.user_name) {
        Some(n) if !n.is_empty() => n,
        _ => users
            .get(job.user_id)
            .map(|n| n.to_string())
            .unwrap_or_default(),
    };
    let running = is_running(job);
    let nodes = if job.node_cnt > 0 && job.node_cnt != NO_VAL {
        job.node_cnt
    } else {
        1
    };
    let gpus = text(job.tres_per_job)
        .as_deref()
        .and_then(parse_tres_gpus)
        .or_else(|| {
            text(job.tres_per_node)
                .as_deref()
                .and_then(parse_tres_gpus)
                .map(|g| g.saturating_mul(nodes))
        })
        .unwrap_or(0);
    JobFacts {
        job_id: job.job_id,
        account: text(job.account).unwrap_or_default().to_lowercase(),
        user,
        contract,
        run_start: if running { job.start_time } else { 0 },
        gpus,
        running,
        nodes: text(job.nodes),
    }
}

/// GPUs in a TRES string such as `gres:gpu:2`, `gres:gpu:h100:4`, `gres/gpu=2` or
/// `gres/gpu:h100=1,gres/shard:3`; `None` if it names no GPU.
pub fn parse_tres_gpus(s: &str) -> Option<u32> {
    let mut total: Option<u32> = None;
    for item in s.split(',') {
        let item = item.trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let fields: Vec<&str> = item.split([':', '=']).collect();
        if fields.first() != Some(&"gpu") {
            continue;
        }
        // The count is the last field when numeric (`gpu:2`, `gpu:h100:2`); `gpu` or
        // `gpu:h100` alone means one.
        let n = fields
            .last()
            .and_then(|c| c.parse::<u32>().ok())
            .filter(|_| fields.len() > 1)
            .unwrap_or(1);
        total = Some(total.unwrap_or(0).saturating_add(n));
    }
    total
}

/// Expand a Slurm hostlist (`gpu[1-3,5],login1`) into names. Malformed ranges are kept
/// literally rather than guessed.
pub fn expand_hostlist(s: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut start = 0;
    let bytes = s.as_bytes();
    let mut items = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'[' => depth += 1,
            b']' => depth -= 1,
            b',' if depth == 0 => {
                items.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(&s[start..]);
    for item in items.into_iter().map(str::trim).filter(|i| !i.is_empty()) {
        let (Some(open), Some(close)) = (item.find('['), item.rfind(']')) else {
            out.push(item.to_string());
            continue;
        };
        if close < open {
            out.push(item.to_string());
            continue;
        }
        let (prefix, ranges, suffix) = (&item[..open], &item[open + 1..close], &item[close + 1..]);
        for r in ranges.split(',') {
            match r.split_once('-') {
                Some((a, b)) => match (a.parse::<u64>(), b.parse::<u64>()) {
                    (Ok(x), Ok(y)) if x <= y && y - x < 100_000 => {
                        for n in x..=y {
                            out.push(format!("{prefix}{n:0width$}{suffix}", width = a.len()));
                        }
                    }
                    _ => out.push(format!("{prefix}{r}{suffix}")),
                },
                None => out.push(format!("{prefix}{r}{suffix}")),
            }
        }
    }
    out
}

/// uid -> user name. `job_record->user_name` is NULL in 22.05 until a job is read back
/// from state, and `getpwuid_r` may do network I/O (LDAP, SSSD), forbidden under the
/// job lock: callbacks only read here and record misses; a background thread resolves
/// them. Until then the job is placed at its account node (conservative: same-account
/// jobs are never rebalanced against each other).
#[derive(Debug, Default)]
pub struct UserCache {
    names: RwLock<HashMap<u32, Arc<str>>>,
    misses: Mutex<HashSet<u32>>,
}

impl UserCache {
    /// The cached name, recording a miss otherwise. Never blocks on I/O.
    pub fn get(&self, uid: u32) -> Option<Arc<str>> {
        if let Ok(n) = self.names.read()
            && let Some(v) = n.get(&uid)
        {
            return Some(Arc::clone(v));
        }
        if let Ok(mut m) = self.misses.lock() {
            m.insert(uid);
        }
        None
    }

    /// Resolve recorded misses (may block: background thread only). Returns how many.
    pub fn resolve_misses(&self, resolve: impl Fn(u32) -> Option<String>) -> usize {
        let misses: Vec<u32> = match self.misses.lock() {
            Ok(mut m) => m.drain().collect(),
            Err(_) => return 0,
        };
        let mut added = 0;
        for uid in misses {
            if let Some(name) = resolve(uid)
                && let Ok(mut n) = self.names.write()
            {
                n.insert(uid, Arc::from(name.as_str()));
                added += 1;
            }
        }
        added
    }
}

pub use slurm_plugin_common::users::lookup_uid;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tres_gpu_counts() {
        assert_eq!(parse_tres_gpus("gres:gpu:2"), Some(2));
        assert_eq!(parse_tres_gpus("gres:gpu:h100:4"), Some(4));
        assert_eq!(parse_tres_gpus("gres/gpu=3"), Some(3));
        assert_eq!(parse_tres_gpus("gres/gpu:h100=1,gres/shard:3"), Some(1));
        assert_eq!(parse_tres_gpus("gres:gpu"), Some(1));
        assert_eq!(parse_tres_gpus("gres:gpu:h100"), Some(1));
        assert_eq!(parse_tres_gpus("gres:shard:2"), None);
    }

    #[test]
    fn hostlists() {
        assert_eq!(
            expand_hostlist("gpu[1-3,5],login1"),
            vec!["gpu1", "gpu2", "gpu3", "gpu5", "login1"]
        );
        assert_eq!(expand_hostlist("n[08-10]"), vec!["n08", "n09", "n10"]);
        assert_eq!(expand_hostlist("gpu1"), vec!["gpu1"]);
        assert_eq!(expand_hostlist("bad[x-1]"), vec!["badx-1"]);
        assert!(expand_hostlist("").is_empty());
    }

    #[test]
    fn users() {
        let c = UserCache::default();
        assert_eq!(c.get(0), None);
        assert_eq!(c.resolve_misses(lookup_uid), 1);
        assert_eq!(c.get(0).as_deref(), Some("root"));
    }
}
