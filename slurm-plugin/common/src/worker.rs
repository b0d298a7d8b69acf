//! A background thread owned by a plugin: started in `init` (or `priority_p_thread_start`)
//! and stopped + joined in `fini`, because Slurm `dlclose`s the library right after
//! `fini` and a thread still running our code would then crash the controller.
//!
//! The thread runs `tick` every `period`; [`Worker::stop`] wakes it at once (a condition
//! variable, not a sleep) so `fini` never waits a whole period.

use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::guard::ffi_guard;

#[derive(Debug, Default)]
struct StopFlag {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl StopFlag {
    /// Sleep until `deadline` or until stopped; true when stopped.
    fn wait_until(&self, deadline: Instant) -> bool {
        let mut stopped = match self.stopped.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        loop {
            if *stopped {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            stopped = match self.cv.wait_timeout(stopped, deadline - now) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }

    fn stop(&self) {
        let mut stopped = match self.stopped.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        *stopped = true;
        self.cv.notify_all();
    }
}

/// Handle of a running background thread.
#[derive(Debug)]
pub struct Worker {
    flag: Arc<StopFlag>,
    handle: Option<JoinHandle<()>>,
}

impl Worker {
    /// Spawn `name` running `tick` now and then every `period` until stopped.
    /// A panic inside `tick` is contained (logged by the panic hook) and the loop goes on.
    pub fn spawn(
        name: &str,
        period: Duration,
        mut tick: impl FnMut() + Send + 'static,
    ) -> std::io::Result<Worker> {
        let flag = Arc::new(StopFlag::default());
        let f2 = Arc::clone(&flag);
        let handle = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                loop {
                    let started = Instant::now();
                    ffi_guard((), &mut tick);
                    if f2.wait_until(started + period) {
                        break;
                    }
                }
            })?;
        Ok(Worker {
            flag,
            handle: Some(handle),
        })
    }

    /// Ask the thread to stop and wait for it, at most [`JOIN_BOUND`]. Idempotent.
    /// Returns false when the thread did not stop in time (see [`Worker::stop_within`]).
    pub fn stop(&mut self) -> bool {
        self.stop_within(JOIN_BOUND)
    }

    /// Ask the thread to stop and wait for it at most `bound`.
    ///
    /// Every step of a tick has its own deadline (budgetd requests, Unix-socket
    /// connect included), so the thread normally stops within one request
    /// timeout. If it does not (a Slurm lock it waits for is held by our caller,
    /// a step without a deadline we did not foresee), `fini` must not hang
    /// `slurmctld`'s shutdown or reconfigure: the thread is left to finish on
    /// its own, the library is pinned in memory (`RTLD_NODELETE`) so Slurm's
    /// `dlclose` cannot unmap code it still runs, and false is returned (the
    /// caller logs it: [`crate::log`] needs slurmctld, and unit tests have none).
    pub fn stop_within(&mut self, bound: Duration) -> bool {
        self.flag.stop();
        let Some(h) = self.handle.take() else {
            return true;
        };
        let deadline = Instant::now() + bound;
        while !h.is_finished() {
            if Instant::now() >= deadline {
                pin_library();
                return false;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        let _ = h.join();
        true
    }
}

/// What `fini` does with a plugin's background threads before Slurm `dlclose`s it: take
/// them out of `slot` (poisoned or not), stop and join each ([`Worker::stop`]), and log
/// each that did not stop within [`JOIN_BOUND`]. Returns how many stopped in time.
pub fn stop_all<W>(slot: &Mutex<W>) -> usize
where
    W: Default + IntoIterator<Item = Worker>,
{
    let workers = match slot.lock() {
        Ok(mut g) => std::mem::take(&mut *g),
        Err(p) => std::mem::take(&mut *p.into_inner()),
    };
    let mut stopped = 0;
    for mut w in workers {
        if w.stop() {
            stopped += 1;
        } else {
            crate::log::error(&format!(
                "background thread did not stop within {JOIN_BOUND:?}; left to finish on its own"
            ));
        }
    }
    stopped
}

/// Longest `fini` waits for a background thread (above the plugins' default
/// request timeout of 1 s, so a thread inside a request normally finishes).
pub const JOIN_BOUND: Duration = Duration::from_secs(5);

/// Keeps the shared object holding this code loaded for the life of the
/// process: `dlopen` of itself with `RTLD_NOLOAD | RTLD_NODELETE` makes later
/// `dlclose` calls leave it mapped. Best effort (nothing to do on failure).
fn pin_library() {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    let here = pin_library as *const () as *const libc::c_void;
    // SAFETY: dladdr fills `info` for an address inside a loaded object; it
    // returns 0 (and we stop) otherwise.
    let found = unsafe { libc::dladdr(here, info.as_mut_ptr()) };
    if found == 0 {
        return;
    }
    // SAFETY: dladdr returned non-zero, so `info` is initialised.
    let fname = unsafe { info.assume_init() }.dli_fname;
    if fname.is_null() {
        return;
    }
    // SAFETY: `fname` is the loader's NUL-terminated path of a loaded object;
    // RTLD_NOLOAD never loads anything new. The handle is deliberately never
    // closed: that reference is what keeps the object mapped.
    let _ = unsafe {
        libc::dlopen(
            fname,
            libc::RTLD_NOW | libc::RTLD_NOLOAD | libc::RTLD_NODELETE,
        )
    };
}

impl Drop for Worker {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[test]
    fn ticks_and_stops_promptly() {
        let n = Arc::new(AtomicU32::new(0));
        let n2 = Arc::clone(&n);
        let mut w = Worker::spawn("t", Duration::from_secs(60), move || {
            n2.fetch_add(1, Ordering::SeqCst);
        })
        .expect("spawn");
        std::thread::sleep(Duration::from_millis(50));
        let t = Instant::now();
        w.stop();
        assert!(t.elapsed() < Duration::from_secs(1));
        assert_eq!(n.load(Ordering::SeqCst), 1);
    }

    /// A tick stuck far longer than the bound: `fini` must still return, or a
    /// stuck budgetd call would hang slurmctld's shutdown.
    #[test]
    fn stop_is_bounded_when_a_tick_is_stuck() {
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        let mut w = Worker::spawn("stuck", Duration::from_secs(60), move || {
            let _ = started_tx.send(());
            std::thread::sleep(Duration::from_secs(3));
        })
        .expect("spawn");
        started_rx
            .recv_timeout(Duration::from_secs(5))
            .expect("tick started");
        let t = Instant::now();
        let stopped = w.stop_within(Duration::from_millis(200));
        let took = t.elapsed();
        assert!(!stopped, "the stuck thread cannot have stopped");
        assert!(took < Duration::from_secs(1), "{took:?}");
    }
}
