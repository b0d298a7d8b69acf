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
    budgets: Budgets,
    key: String,
    _global: tokio::sync::OwnedSemaphorePermit,
}

impl Drop for ReadPermit {
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
        let permit = ReadPermit {
            budgets: self.budgets.clone(),
            key,
            // Closed never: the semaphore lives as long as the throttle.
            _global: match self.slots.clone().acquire_owned().await {
                Ok(p) => p,
                Err(e) => return Err(AppError::Internal(format!("read slots closed: {e}"))),
            },
        };
        Ok(Some(permit))
    }
}
