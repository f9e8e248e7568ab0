//! [`MemBell`]: the doorbell of a frame link in memory, for the in-memory
//! devices (`iwarp_datapath::link::MemDevice`, the test links'
//! `MultiQueuePair`): the receiving end sleeps in its device's
//! [`FrameDevice::wait`](crate::FrameDevice::wait) on it, and the sending
//! end rings it after queueing a frame, only while the receiver sleeps.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Whether its end sleeps, and a rung flag under a mutex with a
/// condition variable.
#[derive(Debug, Default)]
pub struct MemBell {
    sleeping: AtomicBool,
    rung: Mutex<bool>,
    cv: Condvar,
}

impl MemBell {
    /// After queueing a frame for this bell's end: ring it if that end
    /// sleeps. Pairs with the fence in [`wait`](Self::wait): either the
    /// sleeper sees the frame before it sleeps, or this sees it sleeping
    /// and rings.
    pub fn ring_if_sleeping(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            crate::Doorbell::ring(self);
        }
    }

    /// Sleep until the bell rings, `pending()` holds (a frame is queued)
    /// or `timeout` has passed; a ring is consumed.
    pub fn wait(&self, timeout: Duration, pending: impl Fn() -> bool) {
        self.sleeping.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        let end = Instant::now() + timeout;
        let mut rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        while !*rung && !pending() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            rung = match self.cv.wait_timeout(rung, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
        *rung = false;
        drop(rung);
        self.sleeping.store(false, Ordering::Relaxed);
    }
}

impl crate::Doorbell for MemBell {
    fn ring(&self) {
        let mut rung = self.rung.lock().unwrap_or_else(|p| p.into_inner());
        *rung = true;
        drop(rung);
        self.cv.notify_one();
    }
}
