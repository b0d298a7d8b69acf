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

    /// Ask the thread to stop and wait for it. Idempotent.
    pub fn stop(&mut self) {
        self.flag.stop();
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
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
}
