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

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;

use crate::qp::{PostError, RecvWr, SgList};

#[derive(Debug)]
struct Inner {
    queue: ArrayQueue<RecvWr>,
    /// Armed limit (0: disarmed).
    limit: AtomicUsize,
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
        (wr, fired)
    }
}
