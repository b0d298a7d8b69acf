//! The usage sums' memory is linear in runs + accounts + users.
//!
//! Its own test binary: the counting allocator below sees every allocation of
//! the process, so no other test may run beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use budget_protocol::RunState;
use budget_service::ledger::{Ledger, RunRecord};

/// The system allocator, counting live bytes and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

// SAFETY: forwards to `System` unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: same contract as the caller's.
        let p = unsafe { System.alloc(l) };
        if !p.is_null() {
            let now = LIVE.fetch_add(l.size(), Ordering::Relaxed) + l.size();
            PEAK.fetch_max(now, Ordering::Relaxed);
        }
        p
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(p, l) };
        LIVE.fetch_sub(l.size(), Ordering::Relaxed);
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn usage_sums_memory_is_linear_in_runs_not_users_squared() {
    // 3,000 users in 3,000 accounts, each with its own partition name (every
    // interned string counts): the old slot table was leaves x strings =
    // 3,000 x ~9,000 x 2 x 16 bytes = ~860 MB.
    const USERS: u32 = 3_000;
    let mut l = Ledger::default();
    for i in 0..USERS {
        l.put(&RunRecord {
            job_id: i + 1,
            run: 0,
            submit: 0,
            rerun: 0,
            account: format!("acct{i}"),
            user: format!("user{i}"),
            partition: Some(format!("part{i}")),
            gpus: 2,
            gpu_type: Some("h100".into()),
            start: Some(1_000),
            end: Some(2_000),
            free_tier: i % 2 == 0,
            min_runtime_secs: 0,
            nodes: None,
            state: RunState::Ended,
            first_seen: 1,
            time_limit_secs: None,
            checkpoint_secs: None,
        });
    }
    let base = LIVE.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let u = l.usage(3_000, 10_000);
    let extra = PEAK.load(Ordering::Relaxed).saturating_sub(base);
    assert_eq!(u.charged.len() + u.free.len(), USERS as usize);
    assert!(u.charged.iter().all(|r| r.3 == 2_000));
    // The output itself is ~3,000 rows of three short strings; allow 1 KiB a run.
    let bound = 1024 * USERS as usize;
    println!("usage(): {extra} bytes at peak for {USERS} runs (bound {bound})");
    assert!(
        extra < bound,
        "usage() allocated {extra} bytes at peak for {USERS} runs (bound {bound})"
    );
}
