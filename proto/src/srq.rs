//! Shared receive queue: receive buffers that several queue pairs take from.
//!
//! An [`Srq`] is a handle (cheap to clone) to a bounded lock-free queue
//! (`crossbeam_queue::ArrayQueue`). Queue pairs created with
//! [`Qp::with_srq`](crate::qp::Qp::with_srq) take the buffer for each
//! incoming Send (untagged QN 0, RFC 5040 §5.3) from it in post order,
//! instead of from their own receive queue. Any thread may post to it at
//! any time, without locks, while the QPs that use it run in one engine
//! thread.
//!
//! An SRQ has no protection domain, so [`Srq::post_recv`] cannot check the
//! buffers against the memory table; the QP that takes a buffer checks every
//! entry then (local write, in its own PD), and a buffer that fails completes
//! on that QP with [`WcStatus::LocalProtection`](crate::qp::WcStatus) and
//! ends the stream (see [`crate::qp::WcStatus`]). A Send that finds the SRQ
//! empty is answered like one that finds an empty receive queue: DDP
//! untagged *no buffer* (RFC 5041 §7.1 check 2, §7.2 0x2/0x02).
//!
//! When a QP goes to error it completes (flushes) only the buffer it had
//! taken; the others stay in the SRQ for the remaining QPs.
//!
//! The limit ([`Srq::arm_limit`]) fires once per arming, in the thread of
//! the QP whose take left fewer buffers than the limit: that QP reports
//! [`QpEvent::SrqLimitReached`](crate::qp::QpEvent::SrqLimitReached), and
//! the SRQ's own notifier ([`Srq::on_limit`]), if set, is called then, so
//! that an owner that does not read the QPs' events (verbs' asynchronous
//! event queue) learns it at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_queue::ArrayQueue;

use crate::qp::{PostError, RecvWr, SgList};

/// What [`Srq::on_limit`] calls.
type LimitNotify = Arc<dyn Fn() + Send + Sync>;

struct Inner {
    queue: ArrayQueue<RecvWr>,
    /// Armed limit (0: disarmed).
    limit: AtomicUsize,
    /// Called when the armed limit fires.
    notify: Mutex<Option<LimitNotify>>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inner")
            .field("queue", &self.queue)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

/// Shared receive queue handle. Clones share the same queue.
#[derive(Debug, Clone)]
pub struct Srq {
    inner: Arc<Inner>,
}

impl Srq {
    /// An SRQ that holds up to `depth` buffers (at least one).
    pub fn new(depth: usize) -> Self {
        Srq {
            inner: Arc::new(Inner {
                queue: ArrayQueue::new(depth.max(1)),
                limit: AtomicUsize::new(0),
                notify: Mutex::new(None),
            }),
        }
    }

    /// Post a receive buffer (an [`Sge`](crate::qp::Sge) or an [`SgList`]).
    /// Its entries are checked by the QP that takes it, not here.
    pub fn post_recv(&self, wr_id: u64, sgl: impl Into<SgList>) -> Result<(), PostError> {
        self.inner
            .queue
            .push(RecvWr {
                wr_id,
                sgl: sgl.into(),
            })
            .map_err(|_| PostError::QueueFull)
    }

    /// Buffers posted and not yet taken.
    pub fn len(&self) -> usize {
        self.inner.queue.len()
    }

    /// No buffers posted.
    pub fn is_empty(&self) -> bool {
        self.inner.queue.is_empty()
    }

    /// Most buffers it holds.
    pub fn capacity(&self) -> usize {
        self.inner.queue.capacity()
    }

    /// Arm the limit (verbs' `srq_limit`): the next time a QP takes a buffer
    /// and fewer than `limit` remain, that QP reports
    /// [`QpEvent::SrqLimitReached`](crate::qp::QpEvent::SrqLimitReached)
    /// once and the limit disarms. `0` disarms.
    pub fn arm_limit(&self, limit: usize) {
        self.inner.limit.store(limit, Ordering::Release);
    }

    /// The armed limit (0: none).
    pub fn limit(&self) -> usize {
        self.inner.limit.load(Ordering::Acquire)
    }

    /// Call `f` each time the armed limit fires (once per arming), in the
    /// thread of the QP whose take fired it, after the take; `None` stops
    /// calling the one set before. `f` must not block: that thread runs
    /// the QPs.
    pub fn on_limit(&self, f: Option<Arc<dyn Fn() + Send + Sync>>) {
        *self.inner.notify.lock().unwrap_or_else(|p| p.into_inner()) = f;
    }

    /// Take the oldest buffer; also says whether this take fired the limit.
    pub(crate) fn take(&self) -> (Option<RecvWr>, bool) {
        let wr = self.inner.queue.pop();
        let limit = self.inner.limit.load(Ordering::Acquire);
        let fired = limit > 0
            && self.inner.queue.len() < limit
            && self
                .inner
                .limit
                .compare_exchange(limit, 0, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        if fired {
            let f = self
                .inner
                .notify
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            if let Some(f) = f {
                f();
            }
        }
        (wr, fired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qp::Sge;

    #[test]
    fn limit_notifier_is_called_once_per_arming() {
        let srq = Srq::new(8);
        for i in 0..6 {
            srq.post_recv(i, Sge::EMPTY).unwrap();
        }
        let calls = Arc::new(AtomicUsize::new(0));
        let c = calls.clone();
        srq.on_limit(Some(Arc::new(move || {
            c.fetch_add(1, Ordering::SeqCst);
        })));
        srq.arm_limit(4);
        // 5 left, then 4: not below the limit.
        assert!(!srq.take().1);
        assert!(!srq.take().1);
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        // 3 left: fires, once; the limit disarms.
        assert!(srq.take().1);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(srq.limit(), 0);
        assert!(!srq.take().1);
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        // Armed again above what is left (2): the next take fires.
        srq.arm_limit(3);
        assert!(srq.take().1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        // Without a notifier the limit still fires (the QP's event).
        srq.on_limit(None);
        srq.post_recv(9, Sge::EMPTY).unwrap();
        srq.arm_limit(2);
        assert!(srq.take().1);
        assert_eq!(calls.load(Ordering::SeqCst), 2);
    }
}
