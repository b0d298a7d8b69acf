//! Slurm's will-run test for backfill reservations ([`crate::engine`]'s
//! `--backfill nodes`), answered from an index instead of a walk over the
//! running jobs.
//!
//! The test releases running jobs' GPUs in the order of their time-limit ends
//! (then job index) until the blocked job can be placed first fit, on the
//! nodes no earlier reservation of the pass holds. Walking every running job
//! for every blocked job made that test most of a replay's time. The index
//! gives the same answer without the walk:
//! - per node, the running jobs on it, sorted by `(limit end, job)`, and for
//!   each size `s` of one node's GPUs the release after which the node has
//!   `s` GPUs free (its *key*: `NOW` if it has them now, `NEVER` if not even
//!   when every job on it has ended);
//! - per size, a min tree over the nodes of `(key, node)`. A node a
//!   reservation of the pass holds leaves a tree only when it comes out on
//!   top of it (its leaf set to `NEVER` then), and comes back when the pass
//!   ends: a plan then costs a tree's depth, not a tree per size.
//!
//! For a one-node job of `s` GPUs the walk stops at the first release that
//! gives some node `s` free GPUs, and first fit takes the lowest such node:
//! that is the tree's minimum `(key, node)`. For a job of `k` whole nodes it
//! stops at the `k`-th smallest "node whole" key and takes the `k` lowest
//! nodes whole by then: one pass over the nodes' keys. A plan beyond the
//! backfill window is `None`, as the walk's early stop makes it. Nodes whose
//! jobs change are re-keyed lazily, before the next plan.

/// The release `(limit end, job)` after which a node has enough GPUs free.
type Key = (i64, u32);
/// The node has them free now.
const NOW: Key = (i64::MIN, 0);
/// Not even when every running job on it has ended (or the node is held).
const NEVER: Key = (i64::MAX, u32::MAX);

/// `(key, node)` as one integer of the same order, so that a tree's `min`
/// is one comparison.
fn pack(key: Key, node: u32) -> u128 {
    let end = (key.0 as u64) ^ (1 << 63);
    (u128::from(end) << 64) | (u128::from(key.1) << 32) | u128::from(node)
}

fn unpack(x: u128) -> (Key, u32) {
    let end = ((x >> 64) as u64 ^ (1 << 63)) as i64;
    ((end, (x >> 32) as u32), x as u32)
}

/// The will-run index of one cluster: kept in step with the running jobs by
/// [`WillRun::add`] and [`WillRun::remove`]; [`WillRun::hold`] takes nodes out
/// for the rest of a scheduling pass, [`WillRun::end_pass`] puts them back.
#[derive(Debug, Clone)]
pub(crate) struct WillRun {
    gpus_per_node: u32,
    nodes: usize,
    /// Leaves of each tree: a power of two at least `nodes`.
    width: usize,
    /// Running jobs' GPUs on each node: `(limit end, job, gpus)`, sorted.
    node_jobs: Vec<Vec<(i64, u32, u32)>>,
    /// `keys[node * gpus_per_node + s - 1]`: the node's key for `s` GPUs.
    keys: Vec<Key>,
    /// `trees[s - 1]`: a min tree (root at 1, leaves from `width`) of
    /// `(key, node)` ([`pack`]); a held node's leaf may be `NEVER` until the
    /// pass ends.
    trees: Vec<Vec<u128>>,
    /// Nodes to re-key before the next plan.
    dirty: Vec<bool>,
    dirty_list: Vec<u32>,
    /// Nodes held by a reservation of the current pass.
    held: Vec<bool>,
    held_list: Vec<u32>,
    /// `taken_out[s - 1]`: the nodes whose leaf in that tree was set to
    /// `NEVER` because the node is held.
    taken_out: Vec<Vec<u32>>,
    /// Scratch for whole-node plans.
    whole: Vec<Key>,
}

impl WillRun {
    /// An index of an idle cluster.
    pub fn new(nodes: u32, gpus_per_node: u32) -> WillRun {
        let n = nodes as usize;
        let g = gpus_per_node as usize;
        let width = n.max(1).next_power_of_two();
        let mut w = WillRun {
            gpus_per_node,
            nodes: n,
            width,
            node_jobs: vec![Vec::new(); n],
            keys: vec![NOW; n * g],
            trees: vec![vec![pack(NEVER, u32::MAX); 2 * width]; g],
            dirty: vec![false; n],
            dirty_list: Vec::new(),
            held: vec![false; n],
            held_list: Vec::new(),
            taken_out: vec![Vec::new(); g],
            whole: Vec::new(),
        };
        for s in 0..g {
            for node in 0..n {
                w.trees[s][width + node] = pack(NOW, node as u32);
            }
        }
        w.rebuild();
        w
    }

    /// A run of `job` started on `alloc`, ending at its time limit `limit_end`.
    pub fn add(&mut self, alloc: &[(u32, u32)], limit_end: i64, job: u32) {
        for &(n, k) in alloc {
            let list = &mut self.node_jobs[n as usize];
            let at = list.partition_point(|&(e, j, _)| (e, j) < (limit_end, job));
            list.insert(at, (limit_end, job, k));
            self.mark(n);
        }
    }

    /// The run of `job` on `alloc` (added with `limit_end`) stopped.
    pub fn remove(&mut self, alloc: &[(u32, u32)], limit_end: i64, job: u32) {
        for &(n, _) in alloc {
            let list = &mut self.node_jobs[n as usize];
            if let Some(at) = list
                .iter()
                .position(|&(e, j, _)| (e, j) == (limit_end, job))
            {
                list.remove(at);
            }
            self.mark(n);
        }
    }

    fn mark(&mut self, n: u32) {
        if !self.dirty[n as usize] {
            self.dirty[n as usize] = true;
            self.dirty_list.push(n);
        }
    }

    /// Holds `node` for the rest of the pass: no later plan uses it.
    pub fn hold(&mut self, node: u32) {
        let n = node as usize;
        if self.held[n] {
            return;
        }
        self.held[n] = true;
        self.held_list.push(node);
    }

    /// Whether a reservation of the current pass holds `node`.
    #[cfg(debug_assertions)]
    pub fn is_held(&self, node: usize) -> bool {
        self.held[node]
    }

    /// The pass is over: its held nodes count again.
    pub fn end_pass(&mut self) {
        for &n in &self.held_list {
            self.held[n as usize] = false;
        }
        self.held_list.clear();
        let g = self.gpus_per_node as usize;
        // Few leaves of a tree: update their paths; many: rebuild it.
        let depth = self.width.trailing_zeros() as usize + 1;
        for s in 0..g {
            let taken = std::mem::take(&mut self.taken_out[s]);
            if taken.len() * depth * 2 < self.width {
                for &n in &taken {
                    let key = self.keys[n as usize * g + s];
                    self.set_leaf(s, n as usize, key);
                }
            } else {
                let tree = &mut self.trees[s];
                for &n in &taken {
                    tree[self.width + n as usize] = pack(self.keys[n as usize * g + s], n);
                }
                for i in (1..self.width).rev() {
                    tree[i] = tree[2 * i].min(tree[2 * i + 1]);
                }
            }
            self.taken_out[s] = taken;
            self.taken_out[s].clear();
        }
    }

    /// The will-run test for a job of `gpus` on a cluster whose nodes have
    /// `free` GPUs free: the planned start (`now` if it fits now), with the
    /// nodes of its first-fit placement then, on nodes not held, written to
    /// `nodes`; `None` (and `nodes` empty) if that start lies beyond
    /// `horizon` or never comes.
    pub fn plan(
        &mut self,
        free: &[u32],
        gpus: u32,
        now: i64,
        horizon: i64,
        nodes: &mut Vec<u32>,
    ) -> Option<i64> {
        nodes.clear();
        self.refresh(free);
        let g = self.gpus_per_node;
        let at = |key: Key| match key {
            NOW => Some(now),
            NEVER => None,
            (end, _) if end > horizon => None,
            (end, _) => Some(end.max(now)),
        };
        if gpus <= g {
            let s = gpus.max(1) as usize - 1;
            loop {
                let (key, node) = unpack(self.trees[s][1]);
                if key != NEVER && self.held[node as usize] {
                    self.set_leaf(s, node as usize, NEVER);
                    self.taken_out[s].push(node);
                    continue;
                }
                let t = at(key)?;
                nodes.push(node);
                return Some(t);
            }
        }
        // Whole nodes: the k-th smallest "whole" key, then the k lowest
        // nodes whole by then.
        let k = gpus.div_ceil(g) as usize;
        let whole = |n: usize| {
            if self.held[n] {
                NEVER
            } else {
                self.keys[n * g as usize + g as usize - 1]
            }
        };
        let mut all = std::mem::take(&mut self.whole);
        all.clear();
        all.extend((0..self.nodes).map(whole));
        let kth = (all.len() >= k).then(|| *all.select_nth_unstable(k - 1).1);
        self.whole = all;
        let kth = kth?;
        let t = at(kth)?;
        nodes.extend(
            (0..self.nodes)
                .filter(|&n| whole(n) <= kth)
                .take(k)
                .map(|n| n as u32),
        );
        Some(t)
    }

    /// Re-keys the nodes whose jobs changed or whose hold ended.
    fn refresh(&mut self, free: &[u32]) {
        if self.dirty_list.is_empty() {
            return;
        }
        let g = self.gpus_per_node as usize;
        let list = std::mem::take(&mut self.dirty_list);
        for &node in &list {
            let n = node as usize;
            self.dirty[n] = false;
            let keys = &mut self.keys[n * g..(n + 1) * g];
            let mut f = free[n] as usize;
            let mut s = 0;
            while s < g && s < f {
                keys[s] = NOW;
                s += 1;
            }
            for &(end, j, k) in &self.node_jobs[n] {
                f += k as usize;
                while s < g && s < f {
                    keys[s] = (end, j);
                    s += 1;
                }
            }
            keys[s..].fill(NEVER);
        }
        // Few nodes: update their paths; many: rebuild every tree at once.
        let depth = self.width.trailing_zeros() as usize + 1;
        // A held node's new keys go in too: a plan takes it out when it
        // comes out on top.
        if list.len() * depth * 2 < self.width {
            for &node in &list {
                let n = node as usize;
                for s in 0..g {
                    self.set_leaf(s, n, self.keys[n * g + s]);
                }
            }
        } else {
            for &node in &list {
                let n = node as usize;
                for s in 0..g {
                    self.trees[s][self.width + n] = pack(self.keys[n * g + s], node);
                }
            }
            self.rebuild();
        }
        self.dirty_list = list;
        self.dirty_list.clear();
    }

    fn set_leaf(&mut self, s: usize, n: usize, key: Key) {
        let tree = &mut self.trees[s];
        let mut i = self.width + n;
        tree[i] = pack(key, n as u32);
        while i > 1 {
            i /= 2;
            tree[i] = tree[2 * i].min(tree[2 * i + 1]);
        }
    }

    fn rebuild(&mut self) {
        for tree in &mut self.trees {
            for i in (1..self.width).rev() {
                tree[i] = tree[2 * i].min(tree[2 * i + 1]);
            }
        }
    }
}
