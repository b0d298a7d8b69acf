//! GPU counts from Slurm's per-job and per-node TRES request strings.
//!
//! Owns the one reading of `tres_per_job` / `tres_per_node` (`scontrol`'s `TresPerJob`
//! and `TresPerNode`) that every part of the product uses: `priority/budget` reports a
//! job's GPUs to budgetd's ledger, `preempt/budget` weighs holdings with them, and
//! budgetd's drain view shows them. Slurm writes these strings in several spellings
//! across releases and commands: `gres:gpu:2`, `gres:gpu:h100:4` (22.05),
//! `gres/gpu=2`, `gres/gpu:h100=1` (23.02+), and other GRES beside the GPUs
//! (`gres/gpu:2,gres/shard:3`). Items naming GPUs are summed.
//!
//! Not for `AllocTRES` accounting strings (`gres/gpu:h100=4,gres/gpu=4`), which list
//! the typed count *and* the total: summing those would count twice.

/// GPUs named by a TRES string, with the first GPU type named, if any.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GpuRequest<'a> {
    pub count: u32,
    pub gpu_type: Option<&'a str>,
}

/// GPUs in a TRES request string; `None` when it names no GPU.
///
/// In each comma-separated item (after an optional `gres:` or `gres/` prefix), fields
/// are separated by `:` or `=`; the first must be `gpu`. The count is the last field
/// when there are several and it is a number, else 1 (`gpu`, `gpu:h100`); the type is
/// the field after `gpu` when it is not the count.
pub fn gpus(s: &str) -> Option<GpuRequest<'_>> {
    let mut found: Option<GpuRequest<'_>> = None;
    for item in gpu_items(s) {
        let g = found.get_or_insert_with(GpuRequest::default);
        g.count = g.count.saturating_add(item.count);
        if g.gpu_type.is_none() {
            g.gpu_type = item.gpu_type;
        }
    }
    found
}

/// The items of a TRES string that name GPUs, each with its own count and
/// type, as [`gpus`] reads them.
fn gpu_items(s: &str) -> impl Iterator<Item = GpuRequest<'_>> {
    s.split(',').filter_map(|item| {
        let item = item.trim();
        let item = item
            .strip_prefix("gres:")
            .or_else(|| item.strip_prefix("gres/"))
            .unwrap_or(item);
        let mut fields = item.split([':', '=']);
        if fields.next() != Some("gpu") {
            return None;
        }
        let second = fields.next();
        let last = fields.next_back().or(second);
        let count = last.and_then(|c| c.parse::<u32>().ok());
        // `gpu:2`: the second field is the count; `gpu:h100` / `gpu:h100:2`: the type.
        let gpu_type = second.filter(|t| !t.is_empty() && t.parse::<u32>().is_err());
        Some(GpuRequest {
            count: count.unwrap_or(1),
            gpu_type,
        })
    })
}

/// A node's `Gres=` without its parenthesized socket or index lists (whose
/// commas are not item separators).
fn without_lists(gres: &str) -> String {
    let mut plain = String::with_capacity(gres.len());
    let mut depth = 0usize;
    for c in gres.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            _ if depth == 0 => plain.push(c),
            _ => {}
        }
    }
    plain
}

/// GPUs a node offers, from its `Gres=` as `scontrol show node` prints it:
/// `gpu:4`, `gpu:a100:4(S:0-1)`, `gpu:a100:2(S:0),gpu:v100:2(S:1)`, `gpu:h100:8,shard:16`,
/// `(null)`. The parenthesized socket or index lists (whose commas are not item
/// separators) are dropped, then the items are read as [`gpus`] reads a request.
/// 0 when it names no GPU (`(null)`, empty, only other GRES, unreadable text).
pub fn node_gpus(gres: &str) -> u32 {
    gpus(&without_lists(gres)).map_or(0, |g| g.count)
}

/// A node's GPUs by type (lower-cased; `None`: untyped), read as [`node_gpus`]
/// reads the total (which they add up to): `gpu:a100:2(S:0),gpu:v100:2(S:1)`
/// is 2 `a100` and 2 `v100`, `gpu:4` is 4 untyped. For the cluster's weighted
/// capacity (each type x its billing weight). Types with no GPU are left out.
pub fn node_gpus_by_type(gres: &str) -> Vec<(Option<String>, u32)> {
    let mut out: Vec<(Option<String>, u32)> = Vec::new();
    for item in gpu_items(&without_lists(gres)) {
        let t = item.gpu_type.map(str::to_ascii_lowercase);
        match out.iter_mut().find(|(k, _)| *k == t) {
            Some((_, n)) => *n = n.saturating_add(item.count),
            None => out.push((t, item.count)),
        }
    }
    out.retain(|(_, n)| *n > 0);
    out
}

/// GPUs of a job from its per-job request, else its per-node request times `nodes`
/// (how `scontrol show job` and the job record both carry them). 0 when neither
/// names a GPU.
pub fn job_gpus<'a>(
    per_job: Option<&'a str>,
    per_node: Option<&'a str>,
    nodes: u32,
) -> GpuRequest<'a> {
    if let Some(g) = per_job.and_then(gpus) {
        return g;
    }
    match per_node.and_then(gpus) {
        Some(mut g) => {
            g.count = g.count.saturating_mul(nodes.max(1));
            g
        }
        None => GpuRequest::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn g(count: u32, gpu_type: Option<&str>) -> Option<GpuRequest<'_>> {
        Some(GpuRequest { count, gpu_type })
    }

    #[test]
    fn node_gres() {
        assert_eq!(node_gpus("gpu:4"), 4);
        assert_eq!(node_gpus("gpu:a100:4(S:0-1)"), 4);
        assert_eq!(node_gpus("gpu:a100:2,gpu:v100:2"), 4);
        assert_eq!(node_gpus("gpu:a100:2(S:0,1),gpu:v100:2(S:1)"), 4);
        assert_eq!(node_gpus("gpu:h100:8(S:0-1),shard:h100:32(S:0-1)"), 8);
        assert_eq!(node_gpus("gpu:a100:4(IDX:0-3)"), 4);
        assert_eq!(node_gpus("(null)"), 0);
        assert_eq!(node_gpus(""), 0);
        assert_eq!(node_gpus("mps:400"), 0);
        assert_eq!(node_gpus("gpu:0"), 0);
        // Garbage never panics: unbalanced parentheses, overflow saturates.
        assert_eq!(node_gpus("gpu:2)(S:0"), 2);
        assert_eq!(node_gpus("))gpu:3"), 3);
        assert_eq!(node_gpus("gpu:4000000000,gpu:4000000000"), u32::MAX);
        assert_eq!(node_gpus("\u{0}::,,=(("), 0);
    }

    #[test]
    fn node_gres_by_type() {
        let own = |v: &[(Option<&str>, u32)]| -> Vec<(Option<String>, u32)> {
            v.iter().map(|(t, n)| (t.map(str::to_string), *n)).collect()
        };
        assert_eq!(node_gpus_by_type("gpu:4"), own(&[(None, 4)]));
        assert_eq!(
            node_gpus_by_type("gpu:a100:2(S:0,1),gpu:V100:2(S:1)"),
            own(&[(Some("a100"), 2), (Some("v100"), 2)])
        );
        assert_eq!(
            node_gpus_by_type("gpu:b300:4(S:0),gpu:b300:4(S:1),shard:b300:32"),
            own(&[(Some("b300"), 8)])
        );
        assert_eq!(node_gpus_by_type("gpu:0"), own(&[]));
        assert_eq!(node_gpus_by_type("(null)"), own(&[]));
    }

    #[test]
    fn every_spelling_slurm_writes() {
        assert_eq!(gpus("gres:gpu:2"), g(2, None));
        assert_eq!(gpus("gres:gpu:h100:4"), g(4, Some("h100")));
        assert_eq!(gpus("gres/gpu=3"), g(3, None));
        assert_eq!(gpus("gres/gpu:h100=1"), g(1, Some("h100")));
        assert_eq!(gpus("gres:gpu"), g(1, None));
        assert_eq!(gpus("gres:gpu:b200"), g(1, Some("b200")));
        assert_eq!(gpus("gpu:1"), g(1, None));
        assert_eq!(gpus("gres/gpu:h100=1,gres/shard:3"), g(1, Some("h100")));
        assert_eq!(gpus("gres:shard:3,gres:gpu:1"), g(1, None));
        assert_eq!(gpus("gres:gpu:a100:2, gres:gpu:h100:1"), g(3, Some("a100")));
        assert_eq!(gpus("gres:shard:2"), None);
        assert_eq!(gpus("gres:gpus:2"), None);
        assert_eq!(gpus(""), None);
    }

    #[test]
    fn per_job_wins_else_per_node_times_nodes() {
        assert_eq!(job_gpus(Some("gres:gpu:2"), Some("gres:gpu:8"), 4).count, 2);
        assert_eq!(
            job_gpus(Some("(null)"), Some("gres:gpu:h100:2"), 2),
            GpuRequest {
                count: 4,
                gpu_type: Some("h100")
            }
        );
        assert_eq!(job_gpus(None, Some("gres/gpu=2"), 0).count, 2);
        assert_eq!(job_gpus(None, None, 3), GpuRequest::default());
        assert_eq!(
            job_gpus(None, Some("gres:gpu:4000000000"), 2).count,
            u32::MAX
        );
    }

    proptest! {
        /// Counts of GPU items add up whatever else stands beside them.
        #[test]
        fn sums_gpu_items(counts in proptest::collection::vec(0u32..64, 1..5), other in 0u32..9) {
            let mut items: Vec<String> = counts.iter().map(|c| format!("gres/gpu={c}")).collect();
            items.insert(items.len() / 2, format!("gres/shard:{other}"));
            let total: u32 = counts.iter().sum();
            prop_assert_eq!(gpus(&items.join(",")).map(|g| g.count), Some(total));
        }

        /// Any `Gres=` text reads as a count (no panic), and its GPUs by type
        /// add up to it.
        #[test]
        fn node_gres_any_text(s in "\\PC*") {
            let by_type: u64 = node_gpus_by_type(&s).iter().map(|(_, n)| u64::from(*n)).sum();
            prop_assert_eq!(by_type.min(u64::from(u32::MAX)), u64::from(node_gpus(&s)));
        }
    }
}
