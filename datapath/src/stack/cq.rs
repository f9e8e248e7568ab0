//! The completion rings the stack fills directly ([`CqRing`], a queue
//! pair's send and receive rings [`QpCqs`]), how a connection's outputs
//! reach them ([`route`]), and the freed connections whose posts are still
//! answered on them ([`Gone`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crossbeam_queue::ArrayQueue;
use iwarp_proto::qp::{Completion, DisconnectCause};

use super::{Output, SockId};
use crate::over_tcp::HostOutput;

/// One entry of a [`CqRing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqEntry {
    /// A work completion.
    Done(Completion),
    /// A post the queue pair refused (queue full, bad local buffer, not
    /// connected): verbs would fail the post call; here the post is
    /// asynchronous, so the refusal arrives on the CQ with the request's id.
    Refused {
        /// The request's id.
        wr_id: u64,
        /// Why.
        error: iwarp_proto::qp::PostError,
    },
}

/// A completion queue the stack fills directly: one lock-free ring shared by
/// the poll loop (producer) and the application (consumer), so polling a CQ
/// is a queue operation, never a command round trip or a syscall.
pub struct CqRing {
    /// Completions, each with the connection it belongs to.
    pub ring: ArrayQueue<(SockId, CqEntry)>,
    /// Set when a completion found the ring full (verbs' CQ overrun: the
    /// completion is lost, so the application must size the CQ for its
    /// queues).
    pub overrun: AtomicBool,
    /// Armed by [`CqRing::arm`]: the next entry pushed calls the notifier
    /// and disarms (one shot, as `ibv_req_notify_cq`).
    armed: AtomicBool,
    /// Called (on the loop thread) when an entry arrives on an armed ring.
    notifier: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// A thread is parked in [`CqRing::park`] (or about to be).
    parked: AtomicBool,
    /// The thread that parked last (the one a push unparks).
    waiter: std::sync::Mutex<Option<std::thread::Thread>>,
}

impl std::fmt::Debug for CqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqRing")
            .field("len", &self.ring.len())
            .field("capacity", &self.ring.capacity())
            .field("overrun", &self.overrun)
            .field("armed", &self.armed)
            .field("notifier", &self.notifier.get().is_some())
            .finish()
    }
}

impl CqRing {
    /// A ring of `depth` completions.
    pub fn new(depth: usize) -> Self {
        CqRing {
            ring: ArrayQueue::new(depth.max(1)),
            overrun: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            notifier: std::sync::OnceLock::new(),
            parked: AtomicBool::new(false),
            waiter: std::sync::Mutex::new(None),
        }
    }

    /// Park the calling thread until an entry arrives or `timeout` passes
    /// (or spuriously): the loop unparks the thread that parked last when
    /// it pushes. Returns at once if an entry is waiting. Other threads
    /// parked on the same ring at the same time wake at their timeout.
    pub fn park(&self, timeout: std::time::Duration) {
        match self.waiter.lock() {
            Ok(mut w) => *w = Some(std::thread::current()),
            Err(p) => *p.into_inner() = Some(std::thread::current()),
        }
        self.parked.store(true, Ordering::Relaxed);
        // Pairs with the fence in `push`: either the loop sees `parked` or
        // we see its entry (and an unpark before our park makes the park
        // return).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.ring.is_empty() {
            std::thread::park_timeout(timeout);
        }
        self.parked.store(false, Ordering::Relaxed);
    }

    /// Install the function called when an entry arrives on an armed ring
    /// (once; false if one is installed already). It runs on the poll
    /// loop's thread and must not block (write to an eventfd, say).
    pub fn set_notifier(&self, f: Box<dyn Fn() + Send + Sync>) -> bool {
        self.notifier.set(f).is_ok()
    }

    /// Arm: the next entry pushed calls the notifier once, then the ring
    /// disarms. Entries already in the ring do not fire it, so poll once
    /// more after arming (as with `ibv_req_notify_cq`).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
        // Pairs with the fence in `push`: the caller polls the ring next,
        // and a store followed by a load may be reordered (x86's store
        // buffer). Without both fences the loop could push, read `armed`
        // as false, while the caller's poll misses the entry: no wake-up
        // and an empty poll, and a thread asleep on the CQ's descriptor
        // sleeps on (seen with fio's rdma engine under load).
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Push one entry; a full ring records an overrun.
    /// The oldest entry, if any: an empty ring costs two loads (see
    /// `runtime::pop`), not crossbeam's fence.
    #[inline]
    pub fn pop(&self) -> Option<(SockId, CqEntry)> {
        crate::runtime::pop(&self.ring)
    }

    pub(super) fn push(&self, id: SockId, e: CqEntry) {
        if self.ring.push((id, e)).is_err() {
            if !self.overrun.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    qp = id,
                    capacity = self.ring.capacity(),
                    "CQ overrun: a completion found the completion queue full and was lost \
                     (size the CQ for every queue that completes on it)"
                );
            }
        } else {
            // Pairs with the fences in `arm` and `park`: either the
            // consumer sees this entry or we see its flag.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
                if let Some(f) = self.notifier.get() {
                    f();
                }
            }
            if self.parked.load(Ordering::Relaxed) {
                let w = match self.waiter.lock() {
                    Ok(w) => w,
                    Err(p) => p.into_inner(),
                };
                if let Some(t) = w.as_ref() {
                    t.unpark();
                }
            }
        }
    }
}

/// The completion rings of one queue pair, as verbs gives a QP a send CQ
/// and a receive CQ (`ibv_qp_init_attr.send_cq`, `recv_cq`): completions
/// of receives ([`WcOpcode::Recv`](iwarp_proto::qp::WcOpcode::Recv) and
/// `RecvRdmaWithImm`, the flushed ones included) and refused receive posts
/// go to `recv`; those of the send queue (Send, Write, Read) and refused
/// send posts ([`CqEntry::Refused`]) go to `send`. One CQ for both is the same ring
/// twice ([`QpCqs::one`], or `From<Arc<CqRing>>`).
///
/// A clone is the same queue pair's (see [`for_connection`](Self::for_connection)):
/// whoever keeps one (the API's `Qp`) keeps the stack answering posts to
/// the connection on these rings after it has freed the connection (the
/// stack's record of freed connections, `Gone`).
#[derive(Debug, Clone)]
pub struct QpCqs {
    /// Send-queue completions and refused send posts.
    pub send: Arc<CqRing>,
    /// Receive completions and refused receive posts.
    pub recv: Arc<CqRing>,
    /// Shared by the clones of one connection's `QpCqs`: more than one
    /// reference after the stack freed the connection means a handle
    /// that can still post to it exists.
    owner: Arc<()>,
}

impl QpCqs {
    /// One ring for everything.
    pub fn one(cq: Arc<CqRing>) -> Self {
        QpCqs {
            recv: cq.clone(),
            send: cq,
            owner: Arc::new(()),
        }
    }

    /// Send-queue completions to `send`, receive completions to `recv`.
    pub fn new(send: Arc<CqRing>, recv: Arc<CqRing>) -> Self {
        QpCqs {
            send,
            recv,
            owner: Arc::new(()),
        }
    }

    /// The same rings for another connection (a listener's rings for each
    /// connection it accepts): clones of the result do not keep this
    /// one's connections answered.
    pub fn for_connection(&self) -> Self {
        Self::new(self.send.clone(), self.recv.clone())
    }

    /// Whether a clone other than this one exists.
    fn shared(&self) -> bool {
        Arc::strong_count(&self.owner) > 1
    }

    /// Push one of the connection's outputs to the ring it belongs on;
    /// give back what goes to no ring (events).
    fn push(&self, id: SockId, o: HostOutput) -> Option<HostOutput> {
        match o {
            HostOutput::Completion(c)
                if matches!(
                    c.opcode,
                    iwarp_proto::qp::WcOpcode::Recv | iwarp_proto::qp::WcOpcode::RecvRdmaWithImm
                ) =>
            {
                self.recv.push(id, CqEntry::Done(c))
            }
            HostOutput::Completion(c) => self.send.push(id, CqEntry::Done(c)),
            HostOutput::RefusedRecv(wr_id, error) => {
                self.recv.push(id, CqEntry::Refused { wr_id, error })
            }
            HostOutput::Refused(wr_id, error) => {
                self.send.push(id, CqEntry::Refused { wr_id, error })
            }
            o => return Some(o),
        }
        None
    }
}

impl From<Arc<CqRing>> for QpCqs {
    fn from(cq: Arc<CqRing>) -> Self {
        QpCqs::one(cq)
    }
}

/// Connections a stack (or its SCTP part) has freed, kept so that a post
/// made after the free is still refused on the connection's CQ with why
/// it ended (as verbs flushes a post to a QP in the error state) rather
/// than vanishing: the newest [`GONE_KEPT`], and beyond those every one
/// whose [`QpCqs`] someone still holds a clone of (the API's `Qp` does,
/// until it is dropped), so a handle's post is never dropped. Those are
/// bounded by the application's own handles, not by what a peer does.
#[derive(Debug, Default)]
pub(crate) struct Gone {
    map: std::collections::BTreeMap<SockId, (Option<QpCqs>, Option<DisconnectCause>)>,
    /// Prune when the map reaches this size (amortised: at least twice
    /// what the last pruning left, [`GONE_KEPT`] at least).
    prune_at: usize,
}

impl Gone {
    /// Keep freed connection `id` (ids only grow).
    pub(crate) fn insert(&mut self, id: SockId, cq: Option<QpCqs>, cause: Option<DisconnectCause>) {
        self.map.insert(id, (cq, cause));
        if self.map.len() > self.prune_at.max(GONE_KEPT) {
            // The oldest first, those a handle holds excepted.
            let mut excess = self.map.len() - GONE_KEPT;
            self.map.retain(|_, (cq, _)| {
                let drop = excess > 0 && !cq.as_ref().is_some_and(QpCqs::shared);
                excess -= usize::from(drop);
                !drop
            });
            self.prune_at = 2 * self.map.len();
        }
    }

    /// The CQs and end cause of freed connection `id`, if kept.
    pub(crate) fn get(&self, id: SockId) -> Option<&(Option<QpCqs>, Option<DisconnectCause>)> {
        self.map.get(&id)
    }

    /// Connections kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Freed iWARP connections whose posts are answered whatever holds their
/// CQs (see [`Gone`]): a CQ reference and a cause each, a few dozen octets.
pub(crate) const GONE_KEPT: usize = 1024;

/// Send a connection's output on: completions and refusals to its CQs when
/// it has them (receive completions to the receive ring, the rest to the
/// send ring), everything else (and everything without CQs) to `out`.
pub(crate) fn route(id: SockId, o: HostOutput, cq: Option<&QpCqs>, out: &mut dyn FnMut(Output)) {
    trace_output(id, &o);
    let o = match cq {
        Some(cq) => cq.push(id, o),
        None => Some(o),
    };
    if let Some(o) = o {
        out(Output::Iwarp(id, o));
    }
}

/// `tracing` events for what a connection reports: Terminates sent and
/// received, local errors, flushed work requests.
fn trace_output(id: SockId, o: &HostOutput) {
    use iwarp_proto::qp::{QpEvent, WcStatus};
    match o {
        HostOutput::Event(QpEvent::TerminateSent(t)) => {
            tracing::info!(qp = id, terminate = %t, "Terminate sent")
        }
        HostOutput::Event(QpEvent::TerminateReceived(t)) => {
            tracing::info!(qp = id, terminate = %t, "Terminate received")
        }
        HostOutput::Event(QpEvent::LocalError(t)) => {
            tracing::info!(qp = id, terminate = %t, "local error: Terminate queued")
        }
        HostOutput::Event(QpEvent::MalformedTerminate(e)) => {
            tracing::info!(qp = id, error = %e, "malformed Terminate received")
        }
        HostOutput::Completion(c) if c.status == WcStatus::Flushed => {
            tracing::debug!(qp = id, wr_id = c.wr_id, opcode = ?c.opcode, "work request flushed")
        }
        _ => {}
    }
}
