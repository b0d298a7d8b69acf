//! GPU placement, identical for every policy so that only the policy differs.
//!
//! Nodes have `gpus_per_node` GPUs each. A job of at most one node's GPUs goes
//! to the lowest-numbered node with enough free GPUs (first fit). A bigger job
//! takes `ceil(gpus / gpus_per_node)` nodes that are entirely free (lowest
//! numbers first): full on all but the last, the rest of the last node stays
//! usable by others, as Slurm's `cons_tres` does for a whole-GPU request.
//! A per-free-count histogram answers "does it fit?" in O(gpus_per_node)
//! without scanning nodes, which the backfill scan asks thousands of times.

/// GPUs taken on one node: `(node index, gpus)`.
pub type Alloc = Vec<(u32, u32)>;

/// Free GPUs per node.
#[derive(Debug, Clone)]
pub struct Cluster {
    gpus_per_node: u32,
    free: Vec<u32>,
    /// `by_free[k]`: number of nodes with exactly `k` free GPUs.
    by_free: Vec<u32>,
    free_total: u64,
}

impl Cluster {
    pub fn new(nodes: u32, gpus_per_node: u32) -> Cluster {
        let mut by_free = vec![0; gpus_per_node as usize + 1];
        by_free[gpus_per_node as usize] = nodes;
        Cluster {
            gpus_per_node,
            free: vec![gpus_per_node; nodes as usize],
            by_free,
            free_total: u64::from(nodes) * u64::from(gpus_per_node),
        }
    }

    pub fn gpus_per_node(&self) -> u32 {
        self.gpus_per_node
    }

    pub fn num_nodes(&self) -> u32 {
        self.free.len() as u32
    }

    pub fn capacity(&self) -> u64 {
        self.free.len() as u64 * u64::from(self.gpus_per_node)
    }

    pub fn free_total(&self) -> u64 {
        self.free_total
    }

    /// Nodes a job of `gpus` GPUs spans.
    pub fn nodes_needed(&self, gpus: u32) -> u32 {
        gpus.div_ceil(self.gpus_per_node).max(1)
    }

    /// Whether a job of `gpus` GPUs could be placed now.
    pub fn fits(&self, gpus: u32) -> bool {
        if u64::from(gpus) > self.free_total {
            return false;
        }
        if gpus <= self.gpus_per_node {
            self.by_free[gpus as usize..].iter().any(|&n| n > 0)
        } else {
            self.by_free[self.gpus_per_node as usize] >= self.nodes_needed(gpus)
        }
    }

    fn set_free(&mut self, node: usize, value: u32) {
        let old = self.free[node];
        self.by_free[old as usize] -= 1;
        self.by_free[value as usize] += 1;
        self.free_total = self.free_total - u64::from(old) + u64::from(value);
        self.free[node] = value;
    }

    /// Places a job (first fit); `None` if it does not fit.
    pub fn place(&mut self, gpus: u32) -> Option<Alloc> {
        let alloc = plan(&self.free, self.gpus_per_node, gpus)?;
        for &(n, g) in &alloc {
            let v = self.free[n as usize] - g;
            self.set_free(n as usize, v);
        }
        Some(alloc)
    }

    /// Places a job (first fit) on the nodes that are `usable` (outside a
    /// backfill reservation's nodes); `None` if it does not fit there.
    pub fn place_where(&mut self, gpus: u32, usable: impl Fn(usize) -> bool) -> Option<Alloc> {
        let g = self.gpus_per_node;
        let alloc = if gpus <= g {
            let n = (0..self.free.len()).find(|&n| self.free[n] >= gpus && usable(n))?;
            vec![(n as u32, gpus)]
        } else {
            let need = gpus.div_ceil(g) as usize;
            let whole: Vec<u32> = (0..self.free.len())
                .filter(|&n| self.free[n] == g && usable(n))
                .map(|n| n as u32)
                .take(need)
                .collect();
            if whole.len() < need {
                return None;
            }
            let mut left = gpus;
            whole
                .into_iter()
                .map(|n| {
                    let k = left.min(g);
                    left -= k;
                    (n, k)
                })
                .collect()
        };
        for &(n, k) in &alloc {
            let v = self.free[n as usize] - k;
            self.set_free(n as usize, v);
        }
        Some(alloc)
    }

    /// Gives a job's GPUs back.
    pub fn release(&mut self, alloc: &[(u32, u32)]) {
        for &(n, g) in alloc {
            let v = self.free[n as usize] + g;
            assert!(
                v <= self.gpus_per_node,
                "node {n} released above its size: GPU accounting broken"
            );
            self.set_free(n as usize, v);
        }
    }

    /// Free GPUs per node (for trial placements during preemption).
    pub fn free_per_node(&self) -> &[u32] {
        &self.free
    }
}

/// First-fit plan for `gpus` on nodes with `free` GPUs each.
pub fn plan(free: &[u32], gpus_per_node: u32, gpus: u32) -> Option<Alloc> {
    if gpus <= gpus_per_node {
        let n = free.iter().position(|&f| f >= gpus)?;
        return Some(vec![(n as u32, gpus)]);
    }
    let need = gpus.div_ceil(gpus_per_node) as usize;
    let whole: Vec<u32> = free
        .iter()
        .enumerate()
        .filter(|(_, f)| **f == gpus_per_node)
        .map(|(i, _)| i as u32)
        .take(need)
        .collect();
    if whole.len() < need {
        return None;
    }
    let mut left = gpus;
    Some(
        whole
            .into_iter()
            .map(|n| {
                let g = left.min(gpus_per_node);
                left -= g;
                (n, g)
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_fit_and_whole_nodes() {
        let mut c = Cluster::new(3, 8);
        let a = c.place(6).unwrap();
        assert_eq!(a, vec![(0, 6)]);
        assert_eq!(c.place(4).unwrap(), vec![(1, 4)]);
        let small = c.place(2).unwrap();
        assert_eq!(small, vec![(0, 2)]);
        // 12 GPUs need two whole nodes: only node 2 is whole.
        assert!(!c.fits(12));
        assert!(c.place(12).is_none());
        c.release(&a);
        c.release(&small);
        assert!(c.fits(12));
        let b = c.place(12).unwrap();
        assert_eq!(b, vec![(0, 8), (2, 4)]);
        assert_eq!(c.free_total(), 24 - 4 - 12);
        // The last node's remaining GPUs stay usable.
        assert_eq!(c.place(4).unwrap(), vec![(1, 4)]);
        c.release(&b);
        assert_eq!(c.free_total(), 24 - 8);
    }

    #[test]
    fn placing_outside_held_nodes() {
        let mut c = Cluster::new(3, 8);
        let held = [true, false, false];
        // First fit would take node 0; it is held.
        assert_eq!(c.place_where(2, |n| !held[n]).unwrap(), vec![(1, 2)]);
        // 16 GPUs need two whole nodes outside node 0: node 1 is no longer whole.
        assert!(c.place_where(16, |n| !held[n]).is_none());
        assert_eq!(c.place_where(8, |n| !held[n]).unwrap(), vec![(2, 8)]);
        assert!(c.place_where(7, |n| !held[n]).is_none());
        assert_eq!(c.free_total(), 24 - 10);
        // Without the hold, node 0 is used again.
        assert_eq!(c.place(7).unwrap(), vec![(0, 7)]);
    }
}
