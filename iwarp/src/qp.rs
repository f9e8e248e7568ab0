//! Queue pairs: a connected [`Qp`] and its post, event and disconnect
//! calls, and the shared receive queue ([`Srq`]).

use std::time::Duration;

use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::stack::{Command, LoopHook, QpCqs, SockId};

#[cfg(doc)]
use crate::{ConnectRequest, Polling, PostError, Status, Wc};
use crate::{
    Context, DisconnectCause, Error, HookStatus, Negotiated, QpCounters, QpEvent, SgList, Sge,
    WorkRequest,
};

/// A connected queue pair. Dropping it closes the connection gracefully
/// (as closing a socket does; nothing happens if it is closed already)
/// and forgets its events.
///
/// The active side gets one from [`Context::connect`], the passive side
/// from [`ConnectRequest::accept`]. Posting is a push on the poll loop's
/// queue; what happened arrives on the CQ given at connect or accept.
///
/// ```
/// use std::net::SocketAddrV4;
/// use std::time::Duration;
/// use iwarp::{Access, ConnectOptions, Context, ListenOptions, WcOpcode, WorkRequest};
/// # fn main() -> Result<(), iwarp::Error> {
/// let t5 = Duration::from_secs(5);
/// let (server, client) = Context::sim_pair();
/// let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
/// let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
/// let listener = server.listen(7000, &ListenOptions::new(&spd))?;
/// let to = SocketAddrV4::new(server.addr(), 7000);
/// let (c, opts) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
/// let t = std::thread::spawn(move || c.connect(to, &opts));
/// let sqp = listener.get_request(t5)?.accept(&Default::default(), &scq)?;
/// let cqp = t.join().expect("connect thread")?;
///
/// // The server lends a region; the client reads it with an RDMA Read,
/// // then sends part of what it read into a posted receive.
/// let lent = spd.register(b"server data".to_vec(), Access::REMOTE_READ)?;
/// let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE)?;
/// sqp.post_recv(1, inbox.sge(0, 64))?;
/// let sink = cpd.register(vec![0; 11], Access::LOCAL_WRITE)?;
/// cqp.post_send(WorkRequest::Read {
///     wr_id: 2,
///     signaled: true,
///     local: sink.sge(0, 11).into(),
///     remote_stag: lent.stag(),
///     remote_to: 0,
/// })?;
/// let wc = ccq.wait(t5).expect("the Read's completion");
/// assert!(wc.status.is_ok() && wc.wr_id == 2, "{wc:?}");
/// assert_eq!(sink.read(0, 11)?, b"server data");
/// cqp.post_send(WorkRequest::Send {
///     wr_id: 3,
///     signaled: true,
///     local: sink.sge(0, 6).into(),
///     solicited: false,
///     invalidate: None,
/// })?;
/// let wc = scq.wait(t5).expect("the receive");
/// assert_eq!((wc.wr_id, wc.opcode, wc.byte_len), (1, Some(WcOpcode::Recv), 6));
/// assert_eq!(inbox.read(0, 6)?, b"server");
/// assert!(ccq.wait(t5).is_some_and(|wc| wc.status.is_ok() && wc.wr_id == 3));
///
/// // Either side closes; both see the disconnect.
/// cqp.disconnect()?;
/// cqp.wait_disconnected(t5)?;
/// sqp.wait_disconnected(t5)?;
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct Qp {
    pub(crate) ctx: Context,
    /// The loop that owns the connection.
    pub(crate) lp: usize,
    pub(crate) sock: SockId,
    pub(crate) negotiated: Negotiated,
    /// A clone of the CQs the stack routes this queue pair's completions
    /// to: while it is held, the stack keeps answering posts on them
    /// after it has freed the connection (`iwarp_datapath::stack::Gone`),
    /// so no post of ours is ever dropped unanswered.
    pub(crate) _cqs: QpCqs,
}

impl Drop for Qp {
    fn drop(&mut self) {
        let _ = self.ctx.inner.post_to(self.lp, Command::Close(self.sock));
        self.ctx.inner.forget(self.sock);
    }
}

impl Qp {
    /// This queue pair's id (as in [`Wc::qp`]).
    pub fn id(&self) -> usize {
        self.sock
    }

    /// The poll loop that owns this queue pair: 0, or on a context of
    /// several loops ([`Context::sim_pair_queues`]) the one its
    /// connection's frames reach.
    pub fn loop_index(&self) -> usize {
        self.lp
    }

    /// Run `f` inside the poll loop that owns this queue pair after every
    /// round until it returns [`HookStatus::Done`], as
    /// [`Context::run_in_loop`] does on loop 0: on a context of several
    /// loops, this queue pair's posts and completions happen there.
    pub fn run_in_loop(&self, f: impl FnMut() -> HookStatus + Send + 'static) -> Result<(), Error> {
        self.ctx
            .inner
            .post_to(self.lp, Command::Hook(LoopHook(Box::new(f))))
    }

    /// What the MPA exchange settled (CRC, markers, IRD/ORD, RTR, the
    /// peer's private data).
    pub fn negotiated(&self) -> &Negotiated {
        &self.negotiated
    }

    /// Post to the send queue: one push on a lock-free queue, no syscall
    /// (on an inline context, [`Polling::Inline`], this thread then runs a
    /// round that sends it). A refusal by the queue pair arrives on the CQ ([`Status::Refused`]).
    /// The send queue holds `sq_depth` work requests that are posted and
    /// not yet completed; as in verbs, the application keeps within it
    /// (reaping completions), and one posted past it completes as
    /// `Refused(QueueFull)`.
    pub fn post_send(&self, wr: WorkRequest) -> Result<(), Error> {
        self.ctx.inner.post_to(
            self.lp,
            Command::Iwarp(self.sock, HostCommand::PostSend(wr)),
        )
    }

    /// Post several work requests to the send queue in order, as one
    /// doorbell (verbs' list of work requests): on an inline context one
    /// round sends them all. Stops at the first the command queue refuses
    /// and returns how many were posted with the error.
    pub fn post_send_list(
        &self,
        wrs: impl IntoIterator<Item = WorkRequest>,
    ) -> Result<usize, (usize, Error)> {
        let mut n = 0;
        for wr in wrs {
            if let Err(e) = self.ctx.inner.post_quiet_to(
                self.lp,
                Command::Iwarp(self.sock, HostCommand::PostSend(wr)),
            ) {
                self.ctx.inner.loops[self.lp].lp.drive();
                return Err((n, e));
            }
            n += 1;
        }
        self.ctx.inner.loops[self.lp].lp.drive();
        Ok(n)
    }

    /// Post a receive buffer made of several pieces (a scatter list).
    /// Never runs a round on an inline context: a receive sends nothing;
    /// it is in place before the next frame is handled.
    pub fn post_recv_list(&self, wr_id: u64, sgl: SgList) -> Result<(), Error> {
        self.ctx.inner.post_quiet_to(
            self.lp,
            Command::Iwarp(self.sock, HostCommand::PostRecv(wr_id, sgl)),
        )
    }

    /// Post a receive buffer (see [`post_recv_list`](Self::post_recv_list)).
    pub fn post_recv(&self, wr_id: u64, sge: Sge) -> Result<(), Error> {
        self.ctx.inner.post_quiet_to(
            self.lp,
            Command::Iwarp(self.sock, HostCommand::PostRecv(wr_id, sge.into())),
        )
    }

    /// The next stream event (Terminate received or sent, local error).
    pub fn poll_event(&self) -> Option<QpEvent> {
        self.ctx.inner.pump();
        let mut r = match self.ctx.inner.router.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        r.qp_events.get_mut(&self.sock).and_then(|q| q.pop_front())
    }

    /// This queue pair's counters (FPDUs, octets placed, stream octets) and
    /// its TCP connection's, read from the running loop. [`Error::Stopped`]
    /// once the connection is gone from the stack (closed and freed).
    pub fn stats(&self) -> Result<QpCounters, Error> {
        let sock = self.sock;
        self.ctx
            .inner
            .inspect_on(self.lp, move |s| {
                // Over SCTP there is no TCP connection: its counters read 0.
                let tcp = s
                    .tcp_stats(sock)
                    .or_else(|| s.is_sctp(sock).then(Default::default));
                tcp.map(|tcp| QpCounters {
                    qp: s.qp_stats(sock),
                    tcp,
                })
            })?
            .ok_or(Error::Stopped)
    }

    /// Graceful disconnect: outstanding work completes, TCP closes, what is
    /// still posted completes as flushed.
    pub fn disconnect(&self) -> Result<(), Error> {
        self.ctx.inner.post_to(self.lp, Command::Close(self.sock))
    }

    /// Abortive disconnect: Terminate, then RST; posted work is flushed.
    pub fn abort(&self) -> Result<(), Error> {
        self.ctx.inner.post_to(self.lp, Command::Abort(self.sock))
    }

    /// Wait until the connection is closed (by either side); then why:
    /// who closed or reset it, a timeout, or a Terminate and its code
    /// (`None` when nothing recorded a reason). Over TCP and SCTP alike.
    pub fn wait_disconnected(&self, timeout: Duration) -> Result<Option<DisconnectCause>, Error> {
        loop {
            if let CmEvent::Disconnected = self.ctx.inner.next_cm(self.sock, timeout)? {
                return self.disconnect_cause();
            }
        }
    }

    /// Wait until the connection's TCP is finished (TIME-WAIT or CLOSED):
    /// our FIN acknowledged and the peer's received, or the connection
    /// reset or timed out. [`wait_disconnected`](Self::wait_disconnected)
    /// returns as soon as the iWARP stream is over, when the last segments
    /// of the close (our FIN in LAST-ACK or CLOSING, our ACK of the peer's
    /// data in FIN-WAIT-2) may still need retransmitting: a process that
    /// ends then takes its TCP with it (there is no kernel to finish the
    /// close), and the peer waits for a FIN or an ACK that never comes
    /// until its retransmissions give up. Once this returns, what the
    /// round that finished TCP sent has left the device too.
    /// [`Error::TimedOut`] if not finished within `timeout` (zero: just
    /// look). Over TCP (MPA) only: an SCTP association reports no such
    /// end, and this times out.
    pub fn wait_closed(&self, timeout: Duration) -> Result<(), Error> {
        let sock = self.sock;
        self.ctx
            .inner
            .wait(timeout, |r| r.finished.contains(&sock).then_some(()))?;
        // A round ends with its transmissions flushed to the device, and
        // the loop answers a command only at the start of a round: the
        // answer means the round that finished TCP (its last ACK, say)
        // is over, sent frames included.
        self.ctx.inner.inspect_on(self.lp, |_| ())
    }

    /// Why the connection ended or is ending (`None` while it runs): as
    /// [`wait_disconnected`](Self::wait_disconnected) reports it, and what
    /// a post is refused with ([`PostError::Disconnected`]).
    pub fn disconnect_cause(&self) -> Result<Option<DisconnectCause>, Error> {
        let sock = self.sock;
        self.ctx
            .inner
            .inspect_on(self.lp, move |s| s.disconnect_cause(sock))
    }
}

/// A shared receive queue: posting is a push on a lock-free ring that the
/// queue pairs using it pop when a Send arrives; the receive completes on
/// the receive CQ of the queue pair that took it.
#[derive(Debug, Clone)]
pub struct Srq {
    pub(crate) inner: iwarp_proto::qp::Srq,
}

impl Srq {
    /// Post a receive buffer (its SGEs are checked when a queue pair takes it).
    pub fn post_recv(&self, wr_id: u64, sgl: impl Into<SgList>) -> Result<(), Error> {
        self.inner.post_recv(wr_id, sgl).map_err(Error::Post)
    }

    /// Buffers posted and not yet taken.
    pub fn len(&self) -> usize {
        self.inner.len()
    }

    /// No buffer posted.
    pub fn is_empty(&self) -> bool {
        self.inner.is_empty()
    }

    /// Most buffers it holds (its depth).
    pub fn capacity(&self) -> usize {
        self.inner.capacity()
    }

    /// Arm the limit (verbs' `srq_limit`; 0 disarms): the first time a
    /// queue pair takes a buffer and fewer than `limit` remain, the limit
    /// fires once and disarms. The queue pair reports
    /// [`QpEvent::SrqLimitReached`] ([`Qp::poll_event`]) and the notifier
    /// set with [`on_limit`](Self::on_limit) is called.
    pub fn arm_limit(&self, limit: usize) {
        self.inner.arm_limit(limit);
    }

    /// The armed limit (0: none, or it fired).
    pub fn limit(&self) -> usize {
        self.inner.limit()
    }

    /// Call `f` when the armed limit fires, in the thread that runs the
    /// queue pair whose take fired it (a poll loop, or the application's
    /// own on an inline context): `f` must be quick and must not block.
    /// `None` removes it.
    pub fn on_limit(&self, f: Option<std::sync::Arc<dyn Fn() + Send + Sync>>) {
        self.inner.on_limit(f);
    }
}
