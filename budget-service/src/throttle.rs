//! Admission of expensive reads (whole-ledger scans: share, usage, why, idle,
//! audit). Admins and the controller pass freely; anyone else gets at most
//! `expensive_reads_per_minute` per minute and one at a time (429 otherwise),
//! and waits for the one global slot, so looping reads cannot occupy the store
//! or the blocking pool, and a controller operation waits behind at most one
//! user read (with two slots, the second queued at the store lock ahead of
//! syncs).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::caller::Caller;
use crate::error::{AppError, AppResult};

/// Per-caller bookkeeping of expensive reads.
#[derive(Debug, Default)]
struct ReadBudget {
    /// Start of the current one-minute window.
    window_start: Option<Instant>,
    /// Reads started in that window.
    count: u32,
    /// Reads running now.
    in_flight: u32,
}

type Budgets = Arc<Mutex<HashMap<String, ReadBudget>>>;

/// The expensive-read slots and every unprivileged caller's budget.
#[derive(Debug)]
pub struct ReadThrottle {
    per_minute: u32,
    /// Expensive reads of unprivileged callers running at once, all callers
    /// together: one.
    slots: Arc<tokio::sync::Semaphore>,
    budgets: Budgets,
}

/// Held while an unprivileged caller's expensive read runs.
#[derive(Debug)]
pub struct ReadPermit {
    _in_flight: InFlight,
    _global: tokio::sync::OwnedSemaphorePermit,
}

/// One of a caller's reads counted in `in_flight`, from the moment it is
/// counted (before it waits for the global slot) until it is dropped: when
/// the read finishes, fails, or its request is cancelled (the client gave
/// up) at any await, the waiting for the slot included. Counting by hand
/// instead left a cancelled wait counted for good, and the caller refused
/// every expensive read until budgetd restarted.
#[derive(Debug)]
struct InFlight {
    budgets: Budgets,
    key: String,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut m = self.budgets.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = m.get_mut(&self.key) {
            b.in_flight = b.in_flight.saturating_sub(1);
        }
    }
}

impl ReadThrottle {
    /// At most `per_minute` expensive reads per unprivileged caller and minute.
    pub fn new(per_minute: u32) -> ReadThrottle {
        ReadThrottle {
            per_minute,
            slots: Arc::new(tokio::sync::Semaphore::new(1)),
            budgets: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// Admits an expensive read of `caller` (`None`: admins and the
    /// controller, who hold no permit); a refusal is counted in `refused`.
    pub async fn admit(
        &self,
        caller: &Caller,
        refused: &AtomicU64,
    ) -> AppResult<Option<ReadPermit>> {
        if !caller.is_unprivileged() {
            return Ok(None);
        }
        let key = match caller.uid {
            Some(uid) => format!("uid:{uid}"),
            None => format!("token:{}", caller.user),
        };
        {
            let mut m = self.budgets.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let b = m.entry(key.clone()).or_default();
            if b.window_start
                .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(60))
            {
                b.window_start = Some(now);
                b.count = 0;
            }
            let refusal = if b.in_flight > 0 {
                Some("one expensive read (share, usage, why, idle, audit) at a time per caller")
            } else if b.count >= self.per_minute {
                Some("too many expensive reads (share, usage, why, idle, audit) this minute")
            } else {
                None
            };
            if let Some(why) = refusal {
                refused.fetch_add(1, Ordering::Relaxed);
                return Err(AppError::TooMany(format!("{why}; try again shortly")));
            }
            b.count += 1;
            b.in_flight += 1;
        }
        // Counted from here on: a cancellation while waiting for the slot
        // drops `in_flight` and so uncounts the read.
        let in_flight = InFlight {
            budgets: self.budgets.clone(),
            key,
        };
        // Closed never: the semaphore lives as long as the throttle.
        let global = match self.slots.clone().acquire_owned().await {
            Ok(p) => p,
            Err(e) => return Err(AppError::Internal(format!("read slots closed: {e}"))),
        };
        Ok(Some(ReadPermit {
            _in_flight: in_flight,
            _global: global,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::caller::Role;

    fn user(name: &str) -> Caller {
        Caller {
            user: name.into(),
            uid: None,
            role: Role::User,
            controller: false,
            agent_nodes: Vec::new(),
            via: "tcp",
        }
    }

    /// A read cancelled while it waits for the slot held by another caller
    /// is uncounted: the caller's next read is admitted.
    #[test]
    fn a_read_cancelled_while_waiting_for_the_slot_is_uncounted() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("runtime");
        rt.block_on(async {
            let throttle = ReadThrottle::new(100);
            let refused = AtomicU64::new(0);
            let held = throttle
                .admit(&user("alice"), &refused)
                .await
                .expect("alice admitted");
            let waited = tokio::time::timeout(
                Duration::from_millis(5),
                throttle.admit(&user("carol"), &refused),
            )
            .await;
            assert!(waited.is_err(), "carol's read did not wait for the slot");
            drop(held);
            let again = throttle.admit(&user("carol"), &refused).await;
            assert!(again.is_ok(), "carol locked out: {again:?}");
            assert_eq!(refused.load(Ordering::Relaxed), 0);
        });
    }
}
