//! A stop signal that blocking code can sleep on: set once, wakes every sleeper at once.

use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Shared by the control thread, the job threads and the signal handler.
#[derive(Debug, Default)]
pub struct Shutdown {
    stopped: Mutex<bool>,
    cv: Condvar,
}

impl Shutdown {
    /// A signal that has not fired.
    pub fn new() -> Shutdown {
        Shutdown::default()
    }

    /// Fires the signal.
    pub fn stop(&self) {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner()) = true;
        self.cv.notify_all();
    }

    /// Whether the signal fired.
    pub fn is_stopped(&self) -> bool {
        *self.stopped.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sleeps for `d` unless the signal fires first; true when it fired.
    pub fn sleep(&self, d: Duration) -> bool {
        let deadline = Instant::now() + d;
        let mut stopped = self.stopped.lock().unwrap_or_else(|e| e.into_inner());
        while !*stopped {
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            stopped = self
                .cv
                .wait_timeout(stopped, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn sleep_returns_early_when_stopped() {
        let s = Arc::new(Shutdown::new());
        assert!(!s.sleep(Duration::from_millis(10)));
        let s2 = s.clone();
        let t = std::thread::spawn(move || s2.sleep(Duration::from_secs(60)));
        std::thread::sleep(Duration::from_millis(50));
        s.stop();
        assert!(t.join().unwrap());
        assert!(s.is_stopped());
    }
}
