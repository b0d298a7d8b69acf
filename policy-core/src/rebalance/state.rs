//! The period state ([`PreemptState`]): per-side entitlements, holdings and
//! demand ([`SideState`]), the turnover forecast from time limits ([`Release`]),
//! the window's past preemptions and site totals, and the entitlement-first
//! ranks (`priority_place`), computed once per period outside the job lock.

use std::borrow::Cow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};

use super::jobs::{
    PastPreemption, PendingJob, RunningJob, billing_weight, tidy, weighted_lost_gpu_secs,
};
use super::policy::RebalancePolicy;
use crate::fairshare::{FairShare, NodeKind, Tier};

/// The GPUs below which a side counts as below its entitlement for the
/// entitlement-first order ([`RebalancePolicy::balance_band`]): its entitled
/// GPUs plus its window balance, `entitled - usage / window` (the entitled
/// GPU-seconds of the window it did not receive, spread over one window),
/// the balance within `band x entitled` either way. `usage` in weighted
/// GPU-seconds of the window, `window` in seconds. Without a band, or for a
/// side entitled to nothing or with a usage that is not a finite number: the
/// entitlement itself.
pub fn entitled_with_balance(entitled: f64, usage: f64, window: f64, band: Option<f64>) -> f64 {
    match band {
        Some(b) if b > 0.0 && entitled > 0.0 && usage.is_finite() && window > 0.0 => {
            let room = b * entitled;
            entitled + (entitled - usage / window).clamp(-room, room)
        }
        _ => entitled,
    }
}

/// GPUs a side will get back from a sibling above its entitlement, at a time limit.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Release {
    /// The instant the GPUs are free at the latest.
    pub at: i64,
    pub job_id: u32,
    /// Weighted GPUs (the part of the job's that covers the deficit).
    pub gpus: f64,
}

/// Per tree node, what the period state knows (indices are [`FairShare::nodes`]').
/// Every amount is in weighted GPUs ([`weighted_gpus`]), the unit of `entitled`.
///
/// [`weighted_gpus`]: super::weighted_gpus
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SideState {
    /// Weighted GPUs held by running non-free jobs beneath.
    pub held: f64,
    /// Weighted GPUs of running and pending non-free jobs beneath.
    pub demand: f64,
    /// Entitled GPUs (allocation as a rate, scaled to what the parent has).
    pub entitled: f64,
    /// `min(entitled, demand) - held`, floored at 0.
    pub deficit: f64,
    /// Part of the deficit that the forecast says must be preempted for
    /// (filled by [`PreemptState::side`]).
    pub uncovered: f64,
    /// GPU-seconds the forecast says the side will still miss if nothing is
    /// preempted (over the next window).
    pub forecast_shortfall: f64,
    /// Work destroyed by this side's preemptions in the last window (weighted
    /// GPU-s: [`weighted_lost_gpu_secs`]).
    pub lost_spent: f64,
    /// Its lost-work budget per window (weighted GPU-s; infinite without one).
    pub lost_budget: f64,
}

/// Everything global the callback needs, computed once per period.
#[derive(Debug, Clone, PartialEq)]
pub struct PreemptState {
    /// When it was computed.
    pub at: i64,
    pub policy: RebalancePolicy,
    /// `None`: computed without a snapshot (safe mode).
    pub(super) fair_share_at: Option<i64>,
    pub(super) window: i64,
    pub(super) nodes: Vec<SideState>,
    /// Running non-free jobs: (end at time limit, job, weighted GPUs, index into `paths`).
    pub(super) runs: Vec<(i64, u32, f64, usize)>,
    /// Root-first paths of the leaves seen, and which path each node has.
    pub(super) paths: Paths,
    pub(super) path_of: Vec<Option<usize>>,
    /// The turnover forecast, computed on first need: most decisions are
    /// refused by cheaper checks first.
    pub(super) forecast: OnceLock<Forecast>,
    /// `(a, b)`: a job under side `a` preempted one under its sibling `b` in the window.
    pub(super) took_from: HashMap<(usize, usize), i64, NodeHash>,
    pub(super) site_preemptions: u32,
    pub(super) site_lost_gpu_secs: f64,
    /// The priority ranks, computed on first need: only the recalculation
    /// reads them ([`PreemptState::priority_place`]), never the callback.
    pub(super) ranks: OnceLock<Ranks>,
    /// Some non-free job's GPUs weigh other than 1: messages say "weighted GPUs".
    pub(super) weighted: bool,
}

/// The entitlement-first ranks of a state ([`PreemptState::priority_place`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Ranks {
    /// Per node: leaf rank with entitlement first (inner nodes: their worst leaf).
    pub(super) order_rank: Vec<u32>,
    /// Per node: the tier jobs placed there rank in, with the tier band
    /// applied (empty without a band: the snapshot's tier).
    pub(super) band_tier: Vec<Tier>,
}

/// What the turnover forecast found, per node.
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Forecast {
    pub(super) uncovered: Vec<f64>,
    pub(super) shortfall: Vec<f64>,
    /// Releases that cover each deficit side, in time order.
    pub(super) releases: HashMap<usize, Vec<Release>, NodeHash>,
}

/// A small, fixed hasher for the placer's memo of `(account, user)` keys and
/// the state's maps by tree node: the keys come from the caller or the
/// snapshot, are looked up many times per computation, and need no
/// protection from collisions chosen by an attacker (a bad key only costs
/// time here). FNV-1a over the bytes, with a separator between parts. No
/// map hashed with it is iterated where its order could show.
#[derive(Default)]
pub(super) struct KeyHasher(u64);

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

/// Root-first paths of tree nodes, stored one after the other in one vector
/// (a state places a few hundred leaves: one allocation, not one per path).
#[derive(Debug, Clone, Default, PartialEq)]
pub(super) struct Paths {
    nodes: Vec<usize>,
    /// Per path: where it ends in `nodes` (it starts where the previous ends).
    ends: Vec<usize>,
}

impl Paths {
    /// Appends the root-first path of `node` in `fs` (as [`FairShare::path`]);
    /// returns its index.
    fn push(&mut self, fs: &FairShare, node: usize) -> usize {
        let start = self.nodes.len();
        self.nodes.push(node);
        let mut cur = fs.nodes.get(node).and_then(|n| n.parent);
        while let Some(p) = cur {
            if self.nodes.len() - start > fs.nodes.len() {
                break;
            }
            self.nodes.push(p);
            cur = fs.nodes[p].parent;
        }
        self.nodes[start..].reverse();
        self.ends.push(self.nodes.len());
        self.ends.len() - 1
    }
}

impl std::ops::Index<usize> for Paths {
    type Output = [usize];

    fn index(&self, i: usize) -> &[usize] {
        let start = if i == 0 { 0 } else { self.ends[i - 1] };
        &self.nodes[start..self.ends[i]]
    }
}

/// Maps keyed by tree node indices ([`KeyHasher`]).
pub(super) type NodeHash = BuildHasherDefault<KeyHasher>;

/// Places jobs once per (account, user) while the state is computed; paths are
/// kept once each and referred to by index. The memo borrows the callers'
/// names (no copies).
struct Placer<'f, 'a> {
    fs: &'f FairShare,
    index: HashMap<(&'a str, &'a str), Option<usize>, BuildHasherDefault<KeyHasher>>,
    /// Path index by leaf node, for callers that placed their jobs already.
    by_node: Vec<Option<usize>>,
    paths: Paths,
}

impl<'f, 'a> Placer<'f, 'a> {
    fn new(fs: &'f FairShare) -> Self {
        Placer {
            fs,
            index: HashMap::default(),
            by_node: vec![None; fs.nodes.len()],
            paths: Paths::default(),
        }
    }

    /// Index (into `paths`) of the root-first path of leaf node `n`.
    fn at_node(&mut self, n: usize) -> usize {
        match self.by_node[n] {
            Some(p) => p,
            None => {
                let p = self.paths.push(self.fs, n);
                self.by_node[n] = Some(p);
                p
            }
        }
    }

    /// As [`Placer::place`], with the caller's leaf node when it has one.
    fn place_hinted(
        &mut self,
        leaf: Option<usize>,
        account: &'a str,
        user: &'a str,
    ) -> Option<usize> {
        match leaf {
            Some(n) if n < self.by_node.len() => Some(self.at_node(n)),
            _ => self.place(account, user),
        }
    }

    /// Index (into `paths`) of the root-first path of a job of `(account, user)`.
    fn place(&mut self, account: &'a str, user: &'a str) -> Option<usize> {
        if let Some(hit) = self.index.get(&(account, user)) {
            return *hit;
        }
        let found = self.fs.place(account, user).map(|p| self.at_node(p.node));
        self.index.insert((account, user), found);
        found
    }
}

/// Index of the first position where two root-first paths differ, if both go on.
pub(super) fn split_at(a: &[usize], b: &[usize]) -> Option<usize> {
    let k = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    (k > 0 && k < a.len() && k < b.len()).then_some(k)
}

impl PreemptState {
    /// Computes the period state. `capacity_gpus`: the cluster's weighted
    /// GPUs (each node's GPUs x their type's billing weight: the top level's
    /// entitlement, in the unit of the allocations), `None` to take the
    /// top-level allocations as they are. Jobs count as their
    /// [`RunningJob::weighted_gpus`] / [`PendingJob::weighted_gpus`]. Without
    /// a snapshot the state is safe mode.
    pub fn compute<'a>(
        fs: Option<&FairShare>,
        running: impl IntoIterator<Item = RunningJob<'a>>,
        pending: impl IntoIterator<Item = PendingJob<'a>>,
        history: impl IntoIterator<Item = PastPreemption<'a>>,
        capacity_gpus: Option<f64>,
        policy: RebalancePolicy,
        now: i64,
    ) -> PreemptState {
        let st = Self::compute_hinted(
            fs,
            running,
            pending,
            history.into_iter().map(|h| (h, [None, None])),
            capacity_gpus,
            policy,
            now,
        );
        // The ranks with the rest, where the caller computes the state
        // (outside any lock): `priority_place` then only reads them.
        if let Some(fs) = fs {
            st.ranks(fs);
        }
        st
    }

    /// [`PreemptState::compute`] for a caller that placed the past
    /// preemptions already: each comes with the leaf nodes of its preemptor
    /// and its victim in `fs` (`[preemptor, victim]`, as
    /// [`RunningJob::leaf`]: the node `FairShare::place` gives their account
    /// and user; `None` to have it placed here). The same state as
    /// `compute`, without looking names up, and with the priority ranks
    /// computed when first read ([`PreemptState::priority_place`]) rather
    /// than here: a caller that only judges preemptions never needs them.
    pub fn compute_hinted<'a>(
        fs: Option<&FairShare>,
        running: impl IntoIterator<Item = RunningJob<'a>>,
        pending: impl IntoIterator<Item = PendingJob<'a>>,
        history: impl IntoIterator<Item = (PastPreemption<'a>, [Option<usize>; 2])>,
        capacity_gpus: Option<f64>,
        policy: RebalancePolicy,
        now: i64,
    ) -> PreemptState {
        let mut st = PreemptState {
            at: now,
            policy,
            fair_share_at: None,
            window: 0,
            nodes: Vec::new(),
            runs: Vec::new(),
            paths: Paths::default(),
            path_of: Vec::new(),
            forecast: OnceLock::new(),
            took_from: HashMap::default(),
            site_preemptions: 0,
            site_lost_gpu_secs: 0.0,
            ranks: OnceLock::new(),
            weighted: false,
        };
        let Some(fs) = fs else { return st };
        let window = fs.window_secs.max(1);
        st.fair_share_at = Some(fs.at);
        st.window = window;
        let n = fs.nodes.len();
        st.nodes = vec![SideState::default(); n];
        let mut placer = Placer::new(fs);
        // Holdings, demand, and each running job's path (for the forecast),
        // in weighted GPUs.
        let mut runs: Vec<(i64, u32, f64, usize)> = Vec::new();
        for r in running.into_iter().filter(|r| !r.free_tier) {
            let Some(path) = placer.place_hinted(r.leaf, r.account, r.user) else {
                continue;
            };
            let g = r.weighted_gpus();
            st.weighted |= g != f64::from(r.gpus);
            for &i in &placer.paths[path] {
                st.nodes[i].held += g;
                st.nodes[i].demand += g;
            }
            runs.push((r.limit_end().max(now), r.job_id, g, path));
        }
        for p in pending.into_iter().filter(|p| !p.free_tier) {
            if let Some(path) = placer.place_hinted(p.leaf, p.account, p.user) {
                let g = p.weighted_gpus();
                st.weighted |= g != f64::from(p.gpus);
                for &i in &placer.paths[path] {
                    st.nodes[i].demand += g;
                }
            }
        }
        for s in &mut st.nodes {
            s.held = tidy(s.held);
            s.demand = tidy(s.demand);
        }
        // Entitlements, top-down.
        if let Some(root) = fs.nodes.iter().position(|x| x.parent.is_none()) {
            let top: f64 = fs.nodes[root]
                .children
                .iter()
                .map(|&c| fs.nodes[c].allocation)
                .sum::<f64>()
                / window as f64;
            st.nodes[root].entitled = capacity_gpus.unwrap_or(top).max(0.0);
            let mut stack = vec![root];
            while let Some(p) = stack.pop() {
                let kids = &fs.nodes[p].children;
                let sum: f64 = kids.iter().map(|&c| fs.nodes[c].allocation).sum();
                for &c in kids {
                    let own = fs.nodes[c].allocation / window as f64;
                    let scaled = if sum > 0.0 {
                        st.nodes[p].entitled * fs.nodes[c].allocation / sum
                    } else {
                        0.0
                    };
                    st.nodes[c].entitled = own.min(scaled).max(0.0);
                    stack.push(c);
                }
            }
        }
        for s in &mut st.nodes {
            s.deficit = (s.entitled.min(s.demand) - s.held).max(0.0);
            s.lost_budget = match policy.lost_budget {
                Some(b) => b * s.entitled * window as f64,
                None => f64::INFINITY,
            };
        }
        // History: reverse locks, spent budgets, site totals.
        for (h, [p_leaf, v_leaf]) in history {
            if h.at <= now - window || h.at > now {
                continue;
            }
            st.site_preemptions = st.site_preemptions.saturating_add(1);
            st.site_lost_gpu_secs += h.lost_gpu_secs.max(0.0);
            let pp = placer.place_hinted(p_leaf, h.preemptor_account, h.preemptor_user);
            let vp = placer.place_hinted(v_leaf, h.victim_account, h.victim_user);
            // A weighted site's budgets are spoken of in weighted GPU-hours.
            st.weighted |= billing_weight(h.weight) != 1.0;
            if let Some(pp) = pp {
                let lost = weighted_lost_gpu_secs(h.lost_gpu_secs, h.weight);
                for &i in placer.paths[pp].iter().skip(1) {
                    st.nodes[i].lost_spent += lost;
                }
            }
            if let (Some(pp), Some(vp)) = (pp, vp)
                && let (pp, vp) = (&placer.paths[pp], &placer.paths[vp])
                && let Some(k) = split_at(pp, vp)
            {
                let e = st.took_from.entry((pp[k], vp[k])).or_insert(h.at);
                *e = (*e).max(h.at);
            }
        }
        st.runs = runs;
        st.paths = placer.paths;
        st.path_of = placer.by_node;
        st
    }

    /// Root-first path of `node`: kept from the computation when a job was
    /// placed there, else walked in `fs`.
    pub(super) fn path<'s>(&'s self, fs: &FairShare, node: usize) -> Cow<'s, [usize]> {
        match self.path_of.get(node).copied().flatten() {
            Some(p) => Cow::Borrowed(&self.paths[p]),
            None => Cow::Owned(fs.path(node)),
        }
    }

    /// The forecast (computed once, on first need; `fs` is the snapshot the
    /// state was computed from, checked by the callers).
    pub(super) fn forecast(&self, fs: &FairShare) -> &Forecast {
        self.forecast.get_or_init(|| self.compute_forecast(fs))
    }

    /// For every parent with a side short of its entitlement: which releases of
    /// siblings above theirs (at time limits, capped at each sibling's excess)
    /// cover it, in sibling rank order, and how much must be preempted for.
    fn compute_forecast(&self, fs: &FairShare) -> Forecast {
        let (window, now) = (self.window, self.at);
        let (runs, paths) = (&self.runs, &self.paths);
        let mut out = Forecast {
            uncovered: vec![0.0; self.nodes.len()],
            shortfall: vec![0.0; self.nodes.len()],
            releases: HashMap::default(),
        };
        // Parents with a deficit child.
        let mut parents: Vec<usize> = Vec::new();
        let mut is_parent = vec![false; fs.nodes.len()];
        for (i, node) in fs.nodes.iter().enumerate() {
            if node.children.iter().any(|&c| self.nodes[c].deficit > 0.0) {
                parents.push(i);
                is_parent[i] = true;
            }
        }
        // Releases by side (a child of such a parent, above its entitlement),
        // in the order of `runs`: one walk over the runs for all parents.
        let mut by_side: Vec<Vec<(i64, u32, f64)>> = vec![Vec::new(); fs.nodes.len()];
        for (end, job, gpus, path) in runs.iter() {
            let path = &paths[*path];
            for k in 1..path.len() {
                let side = path[k];
                if is_parent[path[k - 1]] && self.nodes[side].held > self.nodes[side].entitled {
                    by_side[side].push((*end, *job, *gpus));
                }
            }
        }
        for parent in parents {
            // Releases of the sides above their entitlement, time order, each
            // side's capped at its excess.
            let mut merged: Vec<(i64, u32, f64)> = Vec::new();
            for &side in &fs.nodes[parent].children {
                let rel = &mut by_side[side];
                if rel.is_empty() {
                    continue;
                }
                rel.sort_by_key(|r| (r.0, r.1));
                let mut left = self.nodes[side].held - self.nodes[side].entitled;
                for &(t, j, g) in rel.iter() {
                    if left <= 0.0 {
                        break;
                    }
                    let take = g.min(left);
                    left -= take;
                    merged.push((t, j, take));
                }
            }
            merged.sort_by_key(|a| (a.0, a.1));
            let mut needy: Vec<usize> = fs.nodes[parent]
                .children
                .iter()
                .copied()
                .filter(|&c| self.nodes[c].deficit > 0.0)
                .collect();
            needy.sort_by_key(|&c| (fs.nodes[c].sibling_rank, c));
            let mut need: Vec<f64> = needy.iter().map(|&c| self.nodes[c].deficit).collect();
            let mut got: Vec<Vec<Release>> = vec![Vec::new(); needy.len()];
            for (t, j, mut g) in merged {
                for (k, n) in need.iter_mut().enumerate() {
                    if g <= 0.0 {
                        break;
                    }
                    if *n > 0.0 {
                        let take = g.min(*n);
                        *n -= take;
                        g -= take;
                        got[k].push(Release {
                            at: t,
                            job_id: j,
                            gpus: take,
                        });
                    }
                }
            }
            for (k, &c) in needy.iter().enumerate() {
                let s = &self.nodes[c];
                let tolerance =
                    self.policy.shortfall_tolerance.max(0.0) * s.entitled * window as f64;
                let (deficit, rel) = (s.deficit, &got[k]);
                let short = |x: f64| shortfall(deficit - x, rel, now, now + window);
                let forecast = short(0.0);
                // Smallest whole number of GPUs that brings the forecast within tolerance.
                let (mut lo, mut hi) = (0u32, deficit.ceil() as u32);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if short(f64::from(mid)) <= tolerance {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                out.shortfall[c] = forecast;
                out.uncovered[c] = f64::from(lo).min(deficit);
                out.releases.insert(c, std::mem::take(&mut got[k]));
            }
        }
        out
    }

    /// Leaf ranks with entitlement first: a depth-first walk like Fair-Tree's,
    /// but siblings below their entitled GPUs (with `balance_band`, their
    /// entitlement plus their window balance: [`entitled_with_balance`]) come
    /// before the others (smallest
    /// share of it first with `share_order`, then by ratio, as Fair-Tree orders
    /// them).
    fn entitled_order(&self, fs: &FairShare) -> Vec<u32> {
        let n = fs.nodes.len();
        let mut order_rank = vec![0; n];
        let Some(root) = fs.nodes.iter().position(|x| x.parent.is_none()) else {
            return order_rank;
        };
        let band = self.policy.balance_band;
        let window = self.window.max(1) as f64;
        // Once per node: the sort below reads it O(siblings log siblings) times.
        let under: Vec<bool> = self
            .nodes
            .iter()
            .zip(&fs.nodes)
            .map(|(s, node)| s.held < entitled_with_balance(s.entitled, node.usage, window, band))
            .collect();
        // Share of its entitlement a side below it holds, in millionths (0 for the
        // others, and without `share_order`, the default): serving the side
        // furthest below its entitlement first spreads what placement cannot give
        // over the sides in proportion, but lets small sides overshoot by whole
        // jobs (see `RebalancePolicy::share_order`).
        let share_order = self.policy.share_order;
        let share = |i: usize| -> u64 {
            let s = &self.nodes[i];
            if share_order && under[i] && s.entitled > 0.0 {
                (s.held / s.entitled * 1e6) as u64
            } else {
                0
            }
        };
        let mut next = 0u32;
        // (node, children visited): post-order gives inner nodes their worst leaf.
        let mut stack = vec![(root, false)];
        while let Some((i, done)) = stack.pop() {
            let kids = &fs.nodes[i].children;
            if kids.is_empty() {
                order_rank[i] = next;
                next += 1;
                continue;
            }
            if done {
                order_rank[i] = kids.iter().map(|&c| order_rank[c]).max().unwrap_or(0);
                continue;
            }
            stack.push((i, true));
            let mut sorted: Vec<usize> = kids.clone();
            sorted.sort_by_key(|&c| (!under[c], share(c), fs.nodes[c].sibling_rank, c));
            for &c in sorted.iter().rev() {
                stack.push((c, false));
            }
        }
        order_rank
    }

    /// Tiers with the band (`tier_band`), top-down in one pass over the nodes
    /// (parents come before children in [`FairShare::nodes`]): a node stays
    /// within the band while its parent does and it is either not over budget
    /// itself (not budget-bearing, or `r < 1`) or over by less than the band
    /// while holding fewer GPUs than its entitlement. A node within the band
    /// ranks in the budgeted tier whatever the snapshot's tier. With
    /// `tier_projection`, `r` is the projected ratio and a node outside ranks
    /// over budget whatever the snapshot's tier (both ways).
    fn band_tiers(&self, fs: &FairShare) -> Vec<Tier> {
        let projection = self.policy.tier_projection;
        if self.policy.tier_band.is_none() && projection.is_none() {
            return Vec::new();
        }
        let band = self.policy.tier_band.unwrap_or(0.0);
        let n = fs.nodes.len();
        let mut within = vec![false; n];
        let mut band_tier = vec![Tier::OverBudget; n];
        for (i, node) in fs.nodes.iter().enumerate() {
            let parent_ok = match node.parent {
                Some(p) if p < i => within[p],
                Some(_) => false,
                None => true,
            };
            let s = &self.nodes[i];
            // The ratio's own unit: GPUs held against the allocation's rate, not
            // against the entitlement (smaller where allocations exceed the cluster).
            let rate = node.allocation / self.window.max(1) as f64;
            let ratio = match projection {
                Some(a) if rate > 0.0 && node.ratio.is_finite() => {
                    node.ratio + a * (s.held / rate - node.ratio)
                }
                _ => node.ratio,
            };
            let own_ok =
                !node.budget_bearing || ratio < 1.0 || (ratio < 1.0 + band && s.held < s.entitled);
            within[i] = parent_ok && own_ok;
            band_tier[i] = if within[i] {
                Tier::Budgeted
            } else if projection.is_some() {
                // Projected to 1 or more: over budget, whatever the snapshot says.
                Tier::OverBudget
            } else {
                node.tier
            };
        }
        band_tier
    }

    /// The ranks (computed once, on first need; `fs` is the snapshot the
    /// state was computed from, checked by the callers).
    pub(super) fn ranks(&self, fs: &FairShare) -> &Ranks {
        self.ranks.get_or_init(|| Ranks {
            order_rank: self.entitled_order(fs),
            band_tier: self.band_tiers(fs),
        })
    }

    /// Where a pending job of `(account, user)` ranks, as `(tier, rank)` for
    /// [`crate::priority::job_priority`]: its tier as [`FairShare::place`] says,
    /// and with `entitled_first` a rank from a Fair-Tree walk in which siblings
    /// holding fewer GPUs than their entitlement come before the others (with
    /// `share_order` the one holding the smallest share of it first; then by
    /// ratio, as Fair-Tree orders them). Without `entitled_first`, or with a
    /// state from another snapshot: exactly [`FairShare::place`].
    ///
    /// Why: ordering by window ratio alone hands every released GPU to the side
    /// with the lowest ratio until the ratios cross, a feedback delayed by the
    /// window that swings whole clusters between teams under sustained
    /// overload; serving sides below their entitled GPUs first is what makes
    /// turnover deliver entitlements, which this rule's forecast counts on.
    /// The tier is kept: an over-budget team (it already received its
    /// allocation in the window) still gets only what budgeted teams leave
    /// (docs/simulator-results.md measures the variant that promoted it),
    /// except with a `tier_projection` (the default) or a `tier_band`: with the
    /// projection a job ranks budgeted exactly when every budget-bearing node on
    /// its path is projected below 1 (both ways: a side heading past 1 ranks
    /// over budget early); with a band, a job whose over-budget nodes are all
    /// over by less than the band and below their entitled GPUs ranks in the
    /// budgeted tier. The rank is the one it has in the same walk (ranks form
    /// one order over all leaves, compared only within a tier, so moving a side
    /// needs no other rank). Its tier for the preemption rule stays the
    /// snapshot's.
    pub fn priority_place(&self, fs: &FairShare, account: &str, user: &str) -> Option<(Tier, u32)> {
        let place = fs.place(account, user)?;
        if !self.matches(fs) {
            return Some((place.tier, place.rank));
        }
        let ranks = self.ranks(fs);
        let tier = match (place.tier, ranks.band_tier.get(place.node)) {
            (Tier::OverBudget, Some(&t)) => t,
            (Tier::Budgeted, Some(&t)) if self.policy.tier_projection.is_some() => t,
            (t, _) => t,
        };
        if !self.policy.entitled_first {
            return Some((tier, place.rank));
        }
        Some((
            tier,
            ranks
                .order_rank
                .get(place.node)
                .copied()
                .unwrap_or(place.rank),
        ))
    }

    /// What the state knows about a node (`fs`: the snapshot it was computed
    /// from; `None` for another one).
    pub fn side(&self, fs: &FairShare, node: usize) -> Option<SideState> {
        if !self.matches(fs) {
            return None;
        }
        let f = self.forecast(fs);
        self.nodes.get(node).map(|s| SideState {
            uncovered: f.uncovered[node],
            forecast_shortfall: f.shortfall[node],
            ..s.clone()
        })
    }

    /// Releases expected to cover a side's deficit, in time order (empty for
    /// another snapshot than the state's).
    pub fn releases(&self, fs: &FairShare, node: usize) -> &[Release] {
        if !self.matches(fs) {
            return &[];
        }
        self.forecast(fs)
            .releases
            .get(&node)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Rebalancing preemptions and lost GPU-seconds in the last window (site totals).
    pub fn site_totals(&self) -> (u32, f64) {
        (self.site_preemptions, self.site_lost_gpu_secs)
    }

    /// Whether the site cap is reached (shown in `/metrics` when it bites).
    pub fn site_cap_reached(&self, extra_lost_gpu_secs: f64) -> bool {
        self.site_cap_reached_with(0, extra_lost_gpu_secs)
    }

    /// [`PreemptState::site_cap_reached`] with `extra_preemptions` not yet in
    /// the record (victims in flight).
    pub fn site_cap_reached_with(&self, extra_preemptions: u32, extra_lost_gpu_secs: f64) -> bool {
        let p = &self.policy;
        p.site_max_preemptions
            .is_some_and(|m| self.site_preemptions.saturating_add(extra_preemptions) >= m)
            || p.site_max_lost_gpu_hours.is_some_and(|m| {
                (self.site_lost_gpu_secs + extra_lost_gpu_secs) / crate::HOUR as f64 > m
            })
    }

    /// Whether the state was computed from `fs`.
    pub(super) fn matches(&self, fs: &FairShare) -> bool {
        self.fair_share_at == Some(fs.at) && self.nodes.len() == fs.nodes.len()
    }
}

/// Printable name of a node (`account` or `account/user`).
pub fn node_name(fs: &FairShare, node: usize) -> String {
    match fs.nodes.get(node) {
        Some(n) => match &n.kind {
            NodeKind::Account => n.name.clone(),
            NodeKind::User { account } => format!("{account}/{}", n.name),
        },
        None => String::new(),
    }
}

/// GPU-seconds missing over `[now, horizon)` when `need` GPUs are missing at
/// `now` and `releases` arrive in time order.
pub(super) fn shortfall(need: f64, releases: &[Release], now: i64, horizon: i64) -> f64 {
    let mut level = need;
    let mut t = now;
    let mut total = 0.0;
    for r in releases {
        if level <= 0.0 {
            return total;
        }
        let at = r.at.clamp(now, horizon);
        total += level * (at - t) as f64;
        t = at;
        level -= r.gpus;
    }
    if level > 0.0 {
        total += level * (horizon - t) as f64;
    }
    total
}

#[cfg(test)]
mod tests {
    use super::super::testkit::*;
    use super::super::*;
    use super::*;

    #[test]
    fn entitlements_and_deficits() {
        let (fs, running) = starved(48 * H);
        let st = PreemptState::compute(
            Some(&fs),
            running.iter().copied(),
            [pend(9, "a", "ua", 8)],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            2 * H,
        );
        let a = fs.account("a").unwrap();
        let b = fs.account("b").unwrap();
        let sa = st.side(&fs, a).unwrap();
        assert_eq!((sa.held, sa.demand), (4.0, 12.0));
        assert!((sa.entitled - 8.0).abs() < 1e-9);
        assert!((sa.deficit - 4.0).abs() < 1e-9);
        // b is 4 above its 8: its releases at 48 h cover a's 4 only after 46 h:
        // forecast 4 x 46 h, far above 2.5% x 8 GPUs x 168 h = 33.6 GPU-h: all 4 uncovered.
        assert!((sa.forecast_shortfall - 4.0 * 46.0 * 3600.0).abs() < 1e-6);
        assert!((sa.uncovered - 4.0).abs() < 1e-9);
        assert_eq!(st.side(&fs, b).unwrap().deficit, 0.0);
        assert_eq!(st.releases(&fs, a).len(), 1);
        assert_eq!(st.releases(&fs, a)[0].at, 48 * H);
    }

    #[test]
    fn scaled_entitlements_when_allocations_exceed_the_cluster() {
        let fs = two(16.0, 0.0, 0.0);
        let st = PreemptState::compute(
            Some(&fs),
            [],
            [],
            [],
            Some(16.0),
            RebalancePolicy::default(),
            0,
        );
        assert!((st.side(&fs, fs.account("a").unwrap()).unwrap().entitled - 8.0).abs() < 1e-9);
        let st = PreemptState::compute(Some(&fs), [], [], [], None, RebalancePolicy::default(), 0);
        assert!((st.side(&fs, fs.account("a").unwrap()).unwrap().entitled - 16.0).abs() < 1e-9);
    }

    #[test]
    fn among_teams_below_their_entitlement_the_smallest_share_ranks_first() {
        // Both below their 8 entitled GPUs; a has the lower ratio (Fair-Tree puts it
        // first) but holds 6 of 8, b holds 2 of 8: with share_order b comes first.
        let fs = two(8.0, 100.0, 500.0);
        let running = [
            run(1, "a", "ua", 6, 0, 48 * H),
            run(2, "b", "ub", 2, 0, 48 * H),
        ];
        assert!(!RebalancePolicy::default().share_order);
        let policy = RebalancePolicy {
            share_order: true,
            ..RebalancePolicy::default()
        };
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), policy, H);
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 0)));
        assert_eq!(st.priority_place(&fs, "a", "ua"), Some((Tier::Budgeted, 1)));
        // Off (the default): by ratio among the sides below their entitlement.
        let off = RebalancePolicy::default();
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), off, H);
        assert_eq!(st.priority_place(&fs, "a", "ua"), Some((Tier::Budgeted, 0)));
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 1)));
        // A side at its entitlement comes after one below it, whatever the shares.
        let running = [
            run(1, "a", "ua", 8, 0, 48 * H),
            run(2, "b", "ub", 7, 0, 48 * H),
        ];
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), policy, H);
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 0)));
        let mut p = RebalancePolicy::default();
        p.set("share_order", "on").unwrap();
        assert!(p.share_order);
        assert!(p.set("share_order", "maybe").is_err());
        assert!(p.share_order);
        p.set("share_order", "off").unwrap();
        assert!(!p.share_order);
    }

    #[test]
    fn teams_below_their_entitlement_rank_first() {
        // b used more of its window (ranks second by ratio) and holds 4 of 8
        // entitled; a holds 12: b's jobs rank first, in their own tier.
        let fs = two(8.0, 100.0, 500.0);
        let running = [
            run(1, "a", "ua", 12, 0, 48 * H),
            run(2, "b", "ub", 4, 0, 48 * H),
        ];
        let policy = RebalancePolicy::default();
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), policy, H);
        let (a, b) = (fs.place("a", "ua").unwrap(), fs.place("b", "ub").unwrap());
        assert_eq!((a.rank, b.rank, b.tier), (0, 1, Tier::Budgeted));
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 0)));
        assert_eq!(st.priority_place(&fs, "a", "ua"), Some((Tier::Budgeted, 1)));
        // Non-members rank at their account's worst leaf.
        assert_eq!(
            st.priority_place(&fs, "b", "stranger"),
            Some((Tier::Budgeted, 0))
        );
        // An over-budget team below its entitlement ranks first but keeps its
        // tier (the snapshot's, without the projected tier)...
        let over = two(8.0, 100.0, 2000.0);
        let snapshot_tier = RebalancePolicy {
            tier_projection: None,
            ..policy
        };
        let st_over =
            PreemptState::compute(Some(&over), running, [], [], Some(16.0), snapshot_tier, H);
        assert_eq!(
            st_over.priority_place(&over, "b", "ub"),
            Some((Tier::OverBudget, 0))
        );
        // ...and with the default projection (r = 1.49 holding 4 of 8 heads for
        // 1.49 + 0.6 x (0.5 - 1.49) = 0.89) it ranks budgeted.
        let st_over = PreemptState::compute(Some(&over), running, [], [], Some(16.0), policy, H);
        assert_eq!(
            st_over.priority_place(&over, "b", "ub"),
            Some((Tier::Budgeted, 0))
        );
        // Off: Fair-Tree's own order.
        let off = RebalancePolicy {
            entitled_first: false,
            ..policy
        };
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), off, H);
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 1)));
        assert_eq!(st.priority_place(&fs, "nobody", "x"), None);
        // A state computed from another snapshot gives Fair-Tree's own order.
        let other = FairShare::from_nodes(9, W, fs.nodes.clone());
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), policy, H);
        assert_eq!(
            st.priority_place(&other, "b", "ub"),
            Some((Tier::Budgeted, 1))
        );
    }

    #[test]
    fn tier_band_promotes_over_budget_sides_below_their_entitlement() {
        // 8 GPUs entitled each (1344 GPU-h per window); a holds 12, b holds 4.
        let alloc = 8.0 * 168.0;
        let running = [
            run(1, "a", "ua", 12, 0, 48 * H),
            run(2, "b", "ub", 4, 0, 48 * H),
        ];
        let band = |b: Option<f64>| RebalancePolicy {
            tier_band: b,
            tier_projection: None,
            ..RebalancePolicy::default()
        };
        let place = |fs: &FairShare, running: &[RunningJob<'_>], b: Option<f64>, who: &str| {
            ranked(fs, running, band(b), who)
        };
        // b at r = 1.05, holding 4 of 8: inside a 0.1 band it ranks in the
        // budgeted tier, first (below its entitlement, as before).
        let fs = two(8.0, 100.0, 1.05 * alloc);
        assert_eq!(fs.place("b", "ub").unwrap().tier, Tier::OverBudget);
        assert_eq!(
            place(&fs, &running, Some(0.1), "b"),
            Some((Tier::Budgeted, 0))
        );
        assert_eq!(
            place(&fs, &running, Some(0.1), "a"),
            Some((Tier::Budgeted, 1))
        );
        // A non-member of b goes with b's account.
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), band(Some(0.1)), H);
        assert_eq!(
            st.priority_place(&fs, "b", "stranger"),
            Some((Tier::Budgeted, 0))
        );
        // Off (the default since the projected tier replaced the band): the
        // snapshot's tier.
        assert_eq!(RebalancePolicy::default().tier_band, None);
        assert_eq!(place(&fs, &running, None, "b"), Some((Tier::OverBudget, 0)));
        // A state from another snapshot: Fair-Tree's own place, tier included.
        let other = FairShare::from_nodes(9, W, fs.nodes.clone());
        assert_eq!(
            st.priority_place(&other, "b", "ub"),
            Some((Tier::OverBudget, 1))
        );
        // Band too narrow: r = 1.05 is not below 1 + 0.05; r = 1.1 not below 1.1.
        assert_eq!(
            place(&fs, &running, Some(0.05), "b"),
            Some((Tier::OverBudget, 0))
        );
        let at_edge = two(8.0, 100.0, 1.1 * alloc);
        assert_eq!(
            place(&at_edge, &running, Some(0.1), "b"),
            Some((Tier::OverBudget, 0))
        );
        assert_eq!(
            place(&at_edge, &running, Some(0.2), "b"),
            Some((Tier::Budgeted, 0))
        );
        // Holding its entitlement (8 of 8) or more: not promoted.
        let full = [
            run(1, "a", "ua", 8, 0, 48 * H),
            run(2, "b", "ub", 8, 0, 48 * H),
        ];
        assert_eq!(
            place(&fs, &full, Some(0.1), "b"),
            Some((Tier::OverBudget, 1))
        );
        let more = [run(2, "b", "ub", 12, 0, 48 * H)];
        assert_eq!(
            place(&fs, &more, Some(0.1), "b"),
            Some((Tier::OverBudget, 1))
        );
        // Without entitled_first the band still sets the tier, the rank is Fair-Tree's.
        let plain = RebalancePolicy {
            entitled_first: false,
            ..band(Some(0.1))
        };
        let st = PreemptState::compute(Some(&fs), running, [], [], Some(16.0), plain, H);
        assert_eq!(st.priority_place(&fs, "b", "ub"), Some((Tier::Budgeted, 1)));
        // The preemption rule still reads the snapshot's tier: b's jobs do not
        // preempt as budgeted.
        assert_eq!(
            b_takes(&fs, &running, &running[0], band(Some(0.1))),
            Err(Denied::PreemptorNotBudgeted {
                tier: Tier::OverBudget
            })
        );
    }

    #[test]
    fn tier_projection_ranks_by_the_ratio_a_side_is_heading_for() {
        // 8 GPUs entitled each (1344 GPU-h per window).
        let alloc = 8.0 * 168.0;
        let proj = |a: Option<f64>| RebalancePolicy {
            tier_band: None,
            tier_projection: a,
            ..RebalancePolicy::default()
        };
        let place = |fs: &FairShare, running: &[RunningJob<'_>], a: Option<f64>, who: &str| {
            ranked(fs, running, proj(a), who)
        };
        // b used 1.5 allocations of its window and now holds 2 of 8 GPUs:
        // projected 0.6 of a window ahead, 1.5 + 0.6 x (0.25 - 1.5) = 0.75.
        // a is at r = 0.8 holding 14 of 8: 0.8 + 0.6 x (1.75 - 0.8) = 1.37.
        let running = [
            run(1, "a", "ua", 14, 0, 48 * H),
            run(2, "b", "ub", 2, 0, 48 * H),
        ];
        let fs = two(8.0, 0.8 * alloc, 1.5 * alloc);
        assert_eq!(fs.place("a", "ua").unwrap().tier, Tier::Budgeted);
        assert_eq!(fs.place("b", "ub").unwrap().tier, Tier::OverBudget);
        assert_eq!(
            place(&fs, &running, Some(0.6), "b").map(|p| p.0),
            Some(Tier::Budgeted)
        );
        assert_eq!(
            place(&fs, &running, Some(0.6), "a").map(|p| p.0),
            Some(Tier::OverBudget)
        );
        // A shorter look ahead: b at 1.5 + 0.2 x (0.25 - 1.5) = 1.25 stays over
        // budget, a at 0.8 + 0.2 x 0.95 = 0.99 stays budgeted.
        assert_eq!(
            place(&fs, &running, Some(0.2), "b").map(|p| p.0),
            Some(Tier::OverBudget)
        );
        assert_eq!(
            place(&fs, &running, Some(0.2), "a").map(|p| p.0),
            Some(Tier::Budgeted)
        );
        // Allocations above the cluster (8 GPUs for two allocations of 8): each
        // side is entitled to 4, but its ratio is against its allocation, and so
        // is the projection. a at r = 0.5 holding 6 GPUs heads for
        // 0.5 + 0.6 x (6/8 - 0.5) = 0.65: budgeted (against the entitlement it
        // would read 6/4 and project 1.1).
        let half = two(8.0, 0.5 * alloc, 0.5 * alloc);
        let six = [run(1, "a", "ua", 6, 0, 48 * H)];
        let st = PreemptState::compute(Some(&half), six, [], [], Some(8.0), proj(Some(0.6)), H);
        assert_eq!(
            st.side(&half, half.place("a", "ua").unwrap().node)
                .map(|x| x.entitled),
            Some(4.0)
        );
        assert_eq!(
            st.priority_place(&half, "a", "ua").map(|p| p.0),
            Some(Tier::Budgeted)
        );
        // The default looks 0.6 of a window ahead, without a band; off: the
        // snapshot's tiers.
        assert_eq!(RebalancePolicy::default().tier_projection, Some(0.6));
        assert_eq!(RebalancePolicy::default().tier_band, None);
        assert_eq!(
            place(&fs, &running, Some(0.6), "b"),
            ranked(&fs, &running, RebalancePolicy::default(), "b")
        );
        assert_eq!(
            place(&fs, &running, None, "b").map(|p| p.0),
            Some(Tier::OverBudget)
        );
        assert_eq!(
            place(&fs, &running, None, "a").map(|p| p.0),
            Some(Tier::Budgeted)
        );
        // The preemption rule reads the snapshot's tier: b does not preempt as budgeted.
        assert_eq!(
            b_takes(&fs, &running, &running[0], proj(Some(0.6))),
            Err(Denied::PreemptorNotBudgeted {
                tier: Tier::OverBudget
            })
        );
        // Parsing: a fraction of a window.
        let mut p = RebalancePolicy::default();
        p.set("tier_projection", "0.6").unwrap();
        assert_eq!(p.tier_projection, Some(0.6));
        assert!(p.set("tier_projection", "1.5").is_err());
        assert!(p.set("tier_projection", "-0.1").is_err());
        assert_eq!(p.tier_projection, Some(0.6));
        p.set("tier_projection", "none").unwrap();
        assert_eq!(p.tier_projection, None);
    }

    #[test]
    fn tier_band_needs_every_over_budget_node_on_the_path() {
        // Sub-account c under p: both bear budgets. p over by 5%, c over by
        // 30%: c is outside a 0.1 band, so its jobs are not promoted even
        // though p is inside it; with c below 1, p alone decides.
        let tree = TreeSpec {
            root_allocation_gpu_hours: None,
            accounts: vec![
                AccountSpec {
                    name: "p".into(),
                    parent: None,
                    allocation_gpu_hours: 8.0 * 168.0,
                    overcommit: false,
                },
                AccountSpec {
                    name: "c".into(),
                    parent: Some("p".into()),
                    allocation_gpu_hours: 4.0 * 168.0,
                    overcommit: false,
                },
                AccountSpec {
                    name: "q".into(),
                    parent: None,
                    allocation_gpu_hours: 8.0 * 168.0,
                    overcommit: false,
                },
            ],
            members: vec![
                MemberSpec {
                    user: "uc".into(),
                    account: "c".into(),
                    allocation_gpu_hours: None,
                },
                MemberSpec {
                    user: "up".into(),
                    account: "p".into(),
                    allocation_gpu_hours: None,
                },
                MemberSpec {
                    user: "uq".into(),
                    account: "q".into(),
                    allocation_gpu_hours: None,
                },
            ],
        };
        let fs_with = |c_used: f64, p_used: f64| {
            let usage: UsageByLeaf = [
                (("c".to_string(), "uc".to_string()), c_used * 3600.0),
                (
                    ("p".to_string(), "up".to_string()),
                    (p_used - c_used) * 3600.0,
                ),
                (("q".to_string(), "uq".to_string()), 100.0 * 3600.0),
            ]
            .into_iter()
            .collect();
            FairShare::compute(&tree, &usage, 0, W)
        };
        let running = [
            run(1, "c", "uc", 2, 0, 48 * H),
            run(2, "q", "uq", 14, 0, 48 * H),
        ];
        let policy = RebalancePolicy {
            tier_band: Some(0.1),
            tier_projection: None,
            ..RebalancePolicy::default()
        };
        let tier = |fs: &FairShare, who: (&str, &str)| {
            let st = PreemptState::compute(Some(fs), running, [], [], Some(16.0), policy, H);
            st.priority_place(fs, who.0, who.1).map(|p| p.0)
        };
        let alloc = 8.0 * 168.0;
        let fs = fs_with(1.3 * 4.0 * 168.0, 1.05 * alloc);
        assert_eq!(tier(&fs, ("c", "uc")), Some(Tier::OverBudget));
        assert_eq!(tier(&fs, ("p", "up")), Some(Tier::Budgeted));
        let fs = fs_with(0.5 * 4.0 * 168.0, 1.05 * alloc);
        assert_eq!(fs.place("c", "uc").unwrap().tier, Tier::OverBudget);
        assert_eq!(tier(&fs, ("c", "uc")), Some(Tier::Budgeted));
        // p past the band: nobody under it is promoted.
        let fs = fs_with(0.5 * 4.0 * 168.0, 1.2 * alloc);
        assert_eq!(tier(&fs, ("c", "uc")), Some(Tier::OverBudget));
        assert_eq!(tier(&fs, ("p", "up")), Some(Tier::OverBudget));
    }

    #[test]
    fn the_window_balance_moves_the_entitlement_test_by_what_the_window_owes() {
        // Entitled to 64 GPUs over a 168 h window (hand-computed): having received
        // 90% of its 64 x 168 GPU-hours, a side is owed 6.4 GPUs over one window
        // and counts as below its entitlement up to 70.4; with 110%, up to 57.6;
        // with nothing, up to the band (0.15 x 64 = 9.6 above: 73.6); 200%, 9.6
        // below (54.4).
        let w = 168.0 * 3600.0;
        let used = |share: f64| share * 64.0 * w;
        let e = |u: f64| entitled_with_balance(64.0, u, w, Some(0.15));
        assert!((e(used(0.9)) - 70.4).abs() < 1e-9, "{}", e(used(0.9)));
        assert!((e(used(1.1)) - 57.6).abs() < 1e-9, "{}", e(used(1.1)));
        assert!((e(0.0) - 73.6).abs() < 1e-9);
        assert!((e(used(2.0)) - 54.4).abs() < 1e-9);
        assert!((e(used(1.0)) - 64.0).abs() < 1e-9);
        // No band, a band of 0, nothing entitled, or a usage that is no number:
        // the entitlement itself.
        assert_eq!(entitled_with_balance(64.0, 0.0, w, None), 64.0);
        assert_eq!(entitled_with_balance(64.0, 0.0, w, Some(0.0)), 64.0);
        assert_eq!(entitled_with_balance(0.0, 0.0, w, Some(0.15)), 0.0);
        assert_eq!(entitled_with_balance(64.0, f64::NAN, w, Some(0.15)), 64.0);
        assert_eq!(entitled_with_balance(64.0, 1.0, 0.0, Some(0.15)), 64.0);
    }

    #[test]
    fn a_side_the_window_owes_gpus_keeps_ranking_first_past_its_entitlement() {
        // a received 90% of its window and holds 66 of its 64 GPUs (one lumpy job
        // over); b received 95% and holds 60. Both rank budgeted. By the GPUs held
        // alone b is the one below its entitlement and comes first; with the
        // window balance a, owed 6.4 GPUs (below 70.4), is still below its
        // entitlement and comes first by ratio: the window pays it back.
        let fs = sixty_four(0.9, 0.95);
        let running = [
            jobs_of("a", "ua", 1, 11, 6, 1.0),
            jobs_of("b", "ub", 100, 10, 6, 1.0),
        ]
        .concat();
        let rank = |policy: RebalancePolicy| {
            let st = state_under(policy, &fs, &running, &[], H);
            let (pa, pb) = (
                st.priority_place(&fs, "a", "ua").unwrap(),
                st.priority_place(&fs, "b", "ub").unwrap(),
            );
            assert_eq!((pa.0, pb.0), (Tier::Budgeted, Tier::Budgeted));
            pa.1 < pb.1
        };
        assert_eq!(RebalancePolicy::default().balance_band, Some(0.15));
        assert!(rank(RebalancePolicy::default()), "a first with the balance");
        assert!(
            !rank(RebalancePolicy {
                balance_band: None,
                ..RebalancePolicy::default()
            }),
            "b first by the GPUs held alone"
        );
        // The knob as a site sets it: a fraction 0..1 or none; refused otherwise,
        // the policy unchanged.
        let mut p = RebalancePolicy::default();
        p.set("balance_band", "0.3").unwrap();
        assert_eq!(p.balance_band, Some(0.3));
        for bad in ["1.5", "-0.1", "lots", "NaN"] {
            assert!(p.set("balance_band", bad).is_err(), "{bad}");
        }
        assert_eq!(p.balance_band, Some(0.3));
        p.set("balance_band", "none").unwrap();
        assert_eq!(p.balance_band, None);
    }

    #[test]
    fn a_team_on_heavy_gpus_is_at_its_entitlement_and_ranks_after_one_below_its_own() {
        // a (the lower ratio: Fair-Tree's first) holds 32 GPUs of weight 2 = 64
        // weighted GPUs, its whole entitlement; b holds 40 GPUs of weight 1. The
        // GPUs held alone decide (no window balance: a, having used 1% of its
        // window, would rank first up to 15% past its entitlement).
        let fs = sixty_four(0.01, 0.2);
        let b = jobs_of("b", "ub", 100, 10, 4, 1.0);
        let running = [jobs_of("a", "ua", 1, 8, 4, 2.0), b.clone()].concat();
        let instantaneous = RebalancePolicy {
            balance_band: None,
            ..RebalancePolicy::default()
        };
        let st = state_under(instantaneous, &fs, &running, &[], H);
        let a_side = st.side(&fs, fs.account("a").unwrap()).unwrap();
        assert_eq!(
            (a_side.held, a_side.entitled, a_side.deficit),
            (64.0, 64.0, 0.0)
        );
        assert_eq!(st.side(&fs, fs.account("b").unwrap()).unwrap().held, 40.0);
        let (pa, pb) = (
            st.priority_place(&fs, "a", "ua").unwrap(),
            st.priority_place(&fs, "b", "ub").unwrap(),
        );
        assert_eq!((pa.0, pb.0), (Tier::Budgeted, Tier::Budgeted));
        assert!(pb.1 < pa.1, "a {pa:?} b {pb:?}");
        // Counted in raw GPUs (what the rule did before weights), a's 32 would
        // be half its entitlement and rank first, ahead of b's 40 of 64.
        let raw = [jobs_of("a", "ua", 1, 8, 4, 1.0), b].concat();
        let st = state_under(instantaneous, &fs, &raw, &[], H);
        assert!(
            st.priority_place(&fs, "a", "ua").unwrap().1
                < st.priority_place(&fs, "b", "ub").unwrap().1
        );
    }

    #[test]
    fn the_share_order_and_the_projected_tier_read_weighted_holdings() {
        // Share order (a site knob, off by default): both below 64; a holds 20
        // GPUs of weight 2 (40, 62% of it), b 30 of weight 1 (47%): b, further
        // below, first. Raw, a's 20 would be 31% and come first.
        let fs = sixty_four(0.1, 0.2);
        let b = jobs_of("b", "ub", 100, 10, 3, 1.0);
        let by_share = |running: &[RunningJob<'_>]| {
            PreemptState::compute(
                Some(&fs),
                running.iter().copied(),
                [],
                [],
                Some(128.0),
                RebalancePolicy {
                    share_order: true,
                    ..RebalancePolicy::default()
                },
                H,
            )
        };
        let st = by_share(&[jobs_of("a", "ua", 1, 5, 4, 2.0), b.clone()].concat());
        assert_eq!(st.priority_place(&fs, "b", "ub").map(|p| p.1), Some(0));
        let st = by_share(&[jobs_of("a", "ua", 1, 5, 4, 1.0), b].concat());
        assert_eq!(st.priority_place(&fs, "a", "ua").map(|p| p.1), Some(0));
        // Projected tier: a at r = 0.8 holding 40 GPUs of weight 2 (80 weighted
        // GPUs against an allocation rate of 64) heads for
        // 0.8 + 0.6 x (1.25 - 0.8) = 1.07: over budget. Raw, 40 / 64 would
        // project 0.8 + 0.6 x (0.625 - 0.8) = 0.695: budgeted.
        let fs = sixty_four(0.8, 0.2);
        let st = state(&fs, &jobs_of("a", "ua", 1, 10, 4, 2.0), &[], H);
        assert_eq!(fs.place("a", "ua").unwrap().tier, Tier::Budgeted);
        assert_eq!(
            st.priority_place(&fs, "a", "ua").map(|p| p.0),
            Some(Tier::OverBudget)
        );
        let st = state(&fs, &jobs_of("a", "ua", 1, 10, 4, 1.0), &[], H);
        assert_eq!(
            st.priority_place(&fs, "a", "ua").map(|p| p.0),
            Some(Tier::Budgeted)
        );
    }

    #[test]
    fn shortfall_integrates_steps() {
        let rel = [
            Release {
                at: 10,
                job_id: 1,
                gpus: 2.0,
            },
            Release {
                at: 20,
                job_id: 2,
                gpus: 2.0,
            },
        ];
        // 4 missing for 10 s, 2 for 10 s, then none.
        assert_eq!(shortfall(4.0, &rel, 0, 100), 60.0);
        // 5 missing: 1 stays missing until the horizon.
        assert_eq!(shortfall(5.0, &rel, 0, 100), 50.0 + 30.0 + 80.0);
        assert_eq!(shortfall(0.0, &rel, 0, 100), 0.0);
    }

    /// The forecast as it was first written (one walk over the runs per
    /// parent, releases grouped in a map): the reference the faster one in
    /// `compute_forecast` is held to.
    fn forecast_reference(st: &PreemptState, fs: &FairShare) -> Forecast {
        fn depth(fs: &FairShare, mut node: usize) -> usize {
            let mut d = 0;
            while let Some(p) = fs.nodes.get(node).and_then(|n| n.parent) {
                d += 1;
                node = p;
            }
            d
        }
        let (window, now) = (st.window, st.at);
        let mut out = Forecast {
            uncovered: vec![0.0; st.nodes.len()],
            shortfall: vec![0.0; st.nodes.len()],
            releases: HashMap::default(),
        };
        let mut parents: Vec<(usize, usize)> = Vec::new();
        for (i, node) in fs.nodes.iter().enumerate() {
            if node.children.iter().any(|&c| st.nodes[c].deficit > 0.0) {
                parents.push((i, depth(fs, i) + 1));
            }
        }
        for (parent, d) in parents {
            let mut by_side: HashMap<usize, Vec<(i64, u32, f64)>> = HashMap::new();
            for (end, job, gpus, path) in st.runs.iter() {
                let path = &st.paths[*path];
                if path.len() > d && path[d - 1] == parent {
                    let side = path[d];
                    if st.nodes[side].held > st.nodes[side].entitled {
                        by_side.entry(side).or_default().push((*end, *job, *gpus));
                    }
                }
            }
            let mut merged: Vec<(i64, u32, f64)> = Vec::new();
            for (side, mut rel) in by_side {
                rel.sort_by_key(|r| (r.0, r.1));
                let mut left = st.nodes[side].held - st.nodes[side].entitled;
                for (t, j, g) in rel {
                    if left <= 0.0 {
                        break;
                    }
                    let take = g.min(left);
                    left -= take;
                    merged.push((t, j, take));
                }
            }
            merged.sort_by_key(|a| (a.0, a.1));
            let mut needy: Vec<usize> = fs.nodes[parent]
                .children
                .iter()
                .copied()
                .filter(|&c| st.nodes[c].deficit > 0.0)
                .collect();
            needy.sort_by_key(|&c| (fs.nodes[c].sibling_rank, c));
            let mut need: Vec<f64> = needy.iter().map(|&c| st.nodes[c].deficit).collect();
            let mut got: Vec<Vec<Release>> = vec![Vec::new(); needy.len()];
            for (t, j, mut g) in merged {
                for (k, n) in need.iter_mut().enumerate() {
                    if g <= 0.0 {
                        break;
                    }
                    if *n > 0.0 {
                        let take = g.min(*n);
                        *n -= take;
                        g -= take;
                        got[k].push(Release {
                            at: t,
                            job_id: j,
                            gpus: take,
                        });
                    }
                }
            }
            for (k, &c) in needy.iter().enumerate() {
                let s = &st.nodes[c];
                let tolerance = st.policy.shortfall_tolerance.max(0.0) * s.entitled * window as f64;
                let (deficit, rel) = (s.deficit, &got[k]);
                let short = |x: f64| shortfall(deficit - x, rel, now, now + window);
                let forecast = short(0.0);
                let (mut lo, mut hi) = (0u32, deficit.ceil() as u32);
                while lo < hi {
                    let mid = lo + (hi - lo) / 2;
                    if short(f64::from(mid)) <= tolerance {
                        hi = mid;
                    } else {
                        lo = mid + 1;
                    }
                }
                out.shortfall[c] = forecast;
                out.uncovered[c] = f64::from(lo).min(deficit);
                out.releases.insert(c, std::mem::take(&mut got[k]));
            }
        }
        out
    }

    /// (account 0..4, user 0..3, free, run start, gpus, limit, running)
    type JobGen = (usize, usize, bool, i64, u32, i64, bool);
    /// (at, preemptor account, preemptor user, victim account, victim user, lost, hinted)
    type PastGen = (i64, usize, usize, usize, usize, f64, bool);

    proptest::proptest! {
        /// The placed history (`compute_hinted`) gives the same state as
        /// placing it by name, and the forecast (one walk over the runs) the
        /// same as the reference (one walk per parent), on nested trees
        /// (sub-accounts: deficits under several parents).
        #[test]
        fn hinted_state_and_forecast_equal_the_reference(
            allocs in proptest::collection::vec((0u32..4_000, 0u32..6_000), 4),
            jobs in proptest::collection::vec(
                (0usize..4, 0usize..4, proptest::bool::ANY, 0i64..20_000, 1u32..9, 1i64..300_000, proptest::bool::ANY),
                0..40,
            ),
            past in proptest::collection::vec(
                (0i64..40_000, 0usize..4, 0usize..4, 0usize..4, 0usize..4, 0.0f64..1e6, proptest::bool::ANY),
                0..20,
            ),
            now in 20_000i64..40_000,
            capacity in proptest::option::of(8.0f64..96.0),
        ) {
            let jobs: Vec<JobGen> = jobs;
            let past: Vec<PastGen> = past;
            let tree = crate::testkit::nested_tree(
                &allocs.iter().map(|&(a, u)| (a, u, 0)).collect::<Vec<_>>(),
            );
            let mut usage = UsageByLeaf::new();
            for (i, &(_, used)) in allocs.iter().enumerate() {
                usage.insert((format!("a{i}"), "u0".into()), f64::from(used) * 3600.0);
            }
            let fs = FairShare::compute(&tree, &usage, now, W);
            // User u3 is no member: placed at its account.
            let names: Vec<(String, String)> = (0..4)
                .flat_map(|a| (0..4).map(move |u| (format!("a{a}"), format!("u{u}"))))
                .collect();
            let name = |a: usize, u: usize| (&names[a * 4 + u].0, &names[a * 4 + u].1);
            let leaf = |a: usize, u: usize| {
                let (a, u) = name(a, u);
                fs.place(a, u).map(|p| p.node)
            };
            let running = || {
                jobs.iter().enumerate().filter(|(_, j)| j.6).map(|(i, j)| {
                    let (account, user) = name(j.0, j.1);
                    RunningJob {
                        job_id: i as u32,
                        account,
                        user,
                        free_tier: j.2,
                        gpus: j.4,
                        weight: 1.0,
                        run_start: j.3,
                        time_limit: Some(j.5),
                        min_runtime: 0,
                        checkpoint: None,
                        grace: 0,
                        requeues: 0,
                        leaf: leaf(j.0, j.1),
                        partition_tier: None,
                        partition_preempt_off: None,
                        qos: None,
                    }
                })
            };
            let pending = || {
                jobs.iter().enumerate().filter(|(_, j)| !j.6).map(|(i, j)| {
                    let (account, user) = name(j.0, j.1);
                    PendingJob {
                        job_id: i as u32,
                        account,
                        user,
                        free_tier: j.2,
                        gpus: j.4,
                        weight: 1.0,
                        leaf: None,
                        partition_tier: None,
                        qos: None,
                    }
                })
            };
            let history = || {
                past.iter().map(|h| {
                    let (pa, pu) = name(h.1, h.2);
                    let (va, vu) = name(h.3, h.4);
                    PastPreemption {
                        at: h.0,
                        preemptor_account: pa,
                        preemptor_user: pu,
                        victim_account: va,
                        victim_user: vu,
                        lost_gpu_secs: h.5,
                        weight: 1.0,
                    }
                })
            };
            for policy in [RebalancePolicy::default(), RebalancePolicy { benefit_factor: None, shortfall_tolerance: 0.0, ..RebalancePolicy::default() }] {
                let by_name = PreemptState::compute(Some(&fs), running(), pending(), history(), capacity, policy, now);
                let hinted = PreemptState::compute_hinted(
                    Some(&fs),
                    running(),
                    pending(),
                    history().zip(&past).map(|(h, g)| {
                        let hint = |a, u| if g.6 { leaf(a, u) } else { None };
                        (h, [hint(g.1, g.2), hint(g.3, g.4)])
                    }),
                    capacity,
                    policy,
                    now,
                );
                // The ranks wait for their first reader, and are then the same.
                proptest::prop_assert!(hinted.ranks.get().is_none());
                hinted.ranks(&fs);
                proptest::prop_assert_eq!(&by_name, &hinted);
                let want = forecast_reference(&by_name, &fs);
                proptest::prop_assert_eq!(by_name.forecast(&fs), &want);
                proptest::prop_assert_eq!(hinted.forecast(&fs), &want);
            }
        }
    }
}
