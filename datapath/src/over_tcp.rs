//! An iWARP connection over a tcp-lite TCP connection: the receive side hands
//! each in-order TCP payload slice straight to the MPA deframer (and so to DDP
//! placement) without a stream buffer; the send side moves whole FPDUs into
//! TCP's send buffer, never more than it has room for.

use iwarp_control::{MpaConfig, Negotiated, PeerRequest, SetupError};
use iwarp_proto::mem::MemoryTable;
use iwarp_proto::mpa::TxBuf;
use iwarp_proto::qp::{DisconnectCause, PostError, QpState};
use iwarp_proto::txq::TxQueue;
use iwarp_proto::wire::TermCode;
use tcp_lite::tcp::{Connection as Tcp, PayloadFill, RecordRoom, State as TcpState, TcpError};
use tcp_lite::wire::{Ipv4Address, TcpPacket, TcpRepr};

use crate::early::EarlyWork;
use crate::endpoint::{Lifecycle, LowerLayer, QpFacts};
pub use crate::endpoint::{Role, State};
use crate::latency::CompletionLatency;
use crate::timers::{earliest, Timer};
use crate::{Connection, StreamParams};

/// Connection-manager events of one iWARP connection (what rdma_cm
/// reports), in the order they happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmEvent {
    /// A manual responder holds the peer's Request: accept or reject it.
    ConnectRequest(PeerRequest),
    /// The MPA exchange finished: full operation with these settings.
    Established(Negotiated),
    /// Setup failed: rejected (by the peer, whose private data is in the
    /// error, or by us), timed out, or incompatible.
    SetupFailed(SetupError),
    /// The stream is closed (either side, gracefully or not); posted work has
    /// completed as flushed and nothing is placed any more.
    Disconnected,
}

/// TCP's send-buffer room as the QP's transmit buffer.
struct SendRoom<'r, 'b>(&'r mut RecordRoom<'b>);

impl TxBuf for SendRoom<'_, '_> {
    fn len(&self) -> usize {
        self.0.written()
    }
    fn append(&mut self, max: usize) -> &mut [u8] {
        self.0.append(max)
    }
}

/// The engine of one iWARP connection over tcp-lite: it owns the TCP
/// connection and, once TCP is established, the MPA exchange and the queue
/// pair ([`Connection`]); one [`State`] and one timer table cover the whole
/// life. I/O-free: segments and commands in, segments, completions and
/// [`CmEvent`]s out, the clock passed in.
#[derive(Debug)]
pub struct IwarpOverTcp {
    /// The TCP connection.
    pub tcp: Tcp,
    /// The iWARP connection, created once TCP is established.
    pub iwarp: Option<Connection>,
    /// Its state, timers, CM events and the rules of its close: the one
    /// state machine both transports drive ([`Lifecycle`]).
    life: Lifecycle,
    mpa: MpaConfig,
    params: StreamParams,
    /// Work posted before the MPA exchange finished waits here, with the
    /// time of its post (receives move into the MPA connection once it
    /// exists, and count against the receive queue's depth there).
    pub(crate) pending: EarlyWork,
    manual: bool,
    srq: Option<iwarp_proto::qp::Srq>,
    /// Closes that ran out of `MpaConfig::close_timeout` and reset the
    /// connection: waiting for Read responses, or in FIN-WAIT-2 for the
    /// peer's FIN (0 or 1).
    pub close_timeouts: u64,
    /// One-copy transmit (the default): TCP in external send mode, the
    /// records it has not had acknowledged here ([`TxQueue`]), each
    /// segment's payload written from them into the frame.
    one_copy: bool,
    /// Sends and Writes shorter than this are copied all the same, and
    /// complete without waiting for their ACK ([`Qp::poll_record`]).
    ///
    /// [`Qp::poll_record`]: iwarp_proto::qp::Qp::poll_record
    copy_below: u64,
    txq: TxQueue,
    /// Segments whose payload could not be written (a source region
    /// deregistered or invalidated while TCP still needed its octets): the
    /// connection was reset (0 or 1).
    pub tx_source_lost: u64,
}

impl IwarpOverTcp {
    /// Wrap a TCP connection (opening or accepted).
    pub fn new(tcp: Tcp, role: Role, mpa: MpaConfig, params: StreamParams) -> Self {
        IwarpOverTcp {
            tcp,
            iwarp: None,
            life: Lifecycle::new(role),
            mpa,
            params,
            pending: EarlyWork::new(params.sq_depth, params.rq_depth),
            manual: false,
            srq: None,
            close_timeouts: 0,
            one_copy: true,
            copy_below: COPY_BELOW,
            txq: TxQueue::new(0),
            tx_source_lost: 0,
        }
    }

    /// The connection began at `now` (the loop's clock): what
    /// [`setup_time`](Self::setup_time) counts from (0 if never set).
    pub fn opened_at(mut self, now: u64) -> Self {
        self.life.opened(now);
        self
    }

    /// Nanoseconds from [`opened_at`](Self::opened_at) to full operation
    /// ([`CmEvent::Established`]), once it was reached.
    pub fn setup_time(&self) -> Option<u64> {
        self.life.setup_time()
    }

    /// Which side opens MPA.
    pub fn role(&self) -> Role {
        self.life.role()
    }

    /// Frame FPDUs into TCP's send buffer (one more copy per octet, and a
    /// Send or Write completes once handed to TCP) instead of one-copy
    /// transmit: the baseline `iwarp-perf --copy-tx` measures against.
    pub fn copy_transmit(mut self) -> Self {
        self.one_copy = false;
        self
    }

    /// Copy Sends and Writes shorter than `octets` in one-copy transmit
    /// (default [`COPY_BELOW`]; 0: none).
    pub fn copy_below(mut self, octets: u64) -> Self {
        self.copy_below = octets;
        self
    }

    /// Records (setup octets, FPDUs) handed to TCP and not yet
    /// acknowledged, in one-copy transmit.
    pub fn unacked_records(&self) -> usize {
        self.txq.len()
    }

    /// Where the connection is.
    pub fn state(&self) -> State {
        self.life.state()
    }

    /// Receive into buffers from a shared receive queue.
    pub fn with_srq(mut self, srq: iwarp_proto::qp::Srq) -> Self {
        self.srq = Some(srq);
        self
    }

    /// A responder that lets the application accept or reject the Request
    /// ([`CmEvent::ConnectRequest`], then [`accept`](Self::accept) or
    /// [`reject`](Self::reject)).
    pub fn manual_accept(mut self) -> Self {
        self.manual = true;
        self
    }

    /// Accept the pending Request.
    pub fn accept(
        &mut self,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
        mem: &mut MemoryTable,
    ) -> Result<(), SetupError> {
        match &mut self.iwarp {
            Some(c) => c.accept(private_data, ird, ord, mem),
            None => Err(crate::no_request()),
        }
    }

    /// Put the queue pair the pending Request becomes in `pd` (before
    /// [`accept`](Self::accept); no effect once it exists).
    pub fn set_pd(&mut self, pd: iwarp_proto::mem::PdId) {
        if let Some(c) = &mut self.iwarp {
            c.set_pd(pd);
        }
    }

    /// Make the queue pair the pending Request becomes take its receive
    /// buffers from `srq` (before [`accept`](Self::accept); no effect once
    /// it exists).
    pub fn set_srq(&mut self, srq: iwarp_proto::qp::Srq) {
        if let Some(c) = &mut self.iwarp {
            if c.qp_ref().is_none() {
                c.set_srq(srq.clone());
            }
        }
        self.srq = Some(srq);
    }

    /// Reject the pending Request with `private_data`; the TCP stream
    /// closes once the Reply is out.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), SetupError> {
        match &mut self.iwarp {
            Some(c) => c.reject(private_data),
            None => Err(crate::no_request()),
        }
    }

    /// Graceful disconnect: outstanding work completes, then TCP closes;
    /// what is still posted then completes as flushed.
    pub fn disconnect(&mut self) {
        if !self.life.state().is_closing() {
            self.life.note_cause(DisconnectCause::LocalClose);
            self.life.begin_close();
        }
    }

    /// Abortive disconnect: a Terminate (RDMAP local catastrophic error,
    /// RFC 5040 §7.1 — the application gave up on the stream), then RST;
    /// posted work completes as flushed. Once the stream is over
    /// ([`State::Closed`]) what is left of TCP (FIN-WAIT-2, TIME-WAIT) is
    /// reset at once.
    pub fn abort(&mut self, now: u64) {
        self.abort_with(now, TermCode::RDMAP_LOCAL_CATASTROPHIC);
    }

    /// [`abort`](Self::abort) with the Terminate carrying `code` (the
    /// stack's memory budget uses RDMAP catastrophic error localized to
    /// the stream, [`TermCode::RDMAP_CATASTROPHIC_STREAM`]).
    pub fn abort_with(&mut self, now: u64, code: TermCode) {
        if self.life.state() == State::Closed {
            if self.tcp.state() != TcpState::Closed {
                self.tcp.abort();
            }
            self.life.clear_linger();
            return;
        }
        let qp = self.iwarp.as_mut().and_then(|c| c.qp());
        self.life.begin_abort(now, code, qp);
    }

    /// Octets a peer makes this connection hold now: TCP's out-of-order
    /// buffer, MPA early data kept while the application decides, and the
    /// CM events not taken yet (see [`crate::budget`]).
    pub fn held_octets(&self) -> usize {
        let early = self.iwarp.as_ref().map_or(0, |c| c.early_len());
        self.tcp.ooo_held() + early + self.life.events_len() * core::mem::size_of::<CmEvent>()
    }

    /// After a segment: whether a poll now would do nothing that the poll
    /// at [`poll_timeout`](Self::poll_timeout) (or the one a post brings)
    /// would not do as well; if so, `Some` of that deadline (`Some(None)`:
    /// no deadline at all). So in full operation with TCP established
    /// and idle ([`Tcp::transmit_idle`]: nothing to send or owed at once),
    /// nothing out of order held, no CM event or held post, a connection
    /// with nothing to hand up or send ([`Connection::idle`]) and no
    /// deadline passed. A segment that carried only in-order data to
    /// place (a Write) and acknowledged what we sent is such: the host
    /// leaves the connection to its deadline (the delayed ACK's, next
    /// round) instead of polling it this round, and the reply the
    /// application posts from the same round carries the ACK.
    pub fn idle_after_input(&self, now: u64) -> Option<Option<u64>> {
        let idle = self.tcp.transmit_idle()
            && self.life.state() == State::Operational
            && self.pending.is_empty()
            && self.life.events_len() == 0
            && self.iwarp.as_ref().is_some_and(|c| c.idle())
            && self.tcp.ooo_held() == 0;
        if !idle {
            return None;
        }
        let t = self.poll_timeout();
        t.is_none_or(|t| t > now).then_some(t)
    }

    /// Next connection-manager event.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.life.poll_event()
    }

    #[inline]
    fn ensure_iwarp(&mut self) {
        // Every segment and poll asks; the connection exists after the
        // first few.
        if self.iwarp.is_none() {
            self.make_iwarp();
        }
    }

    #[cold]
    fn make_iwarp(&mut self) {
        if self.iwarp.is_some()
            || !matches!(
                self.tcp.state(),
                TcpState::Established | TcpState::CloseWait
            )
        {
            return;
        }
        let params = StreamParams {
            emss: self.tcp.mss().min(usize::from(u16::MAX)) as u16,
            ..self.params
        };
        // Nothing is queued on TCP before the connection exists.
        if self.one_copy && self.tcp.set_external_send() {
            self.txq = TxQueue::new(self.tcp.queued_offset());
        }
        self.iwarp = match self.life.role() {
            Role::Initiator => Connection::initiator(self.mpa.clone(), params).ok(),
            Role::Responder if self.manual => {
                Some(Connection::responder_manual(self.mpa.clone(), params))
            }
            Role::Responder => Some(Connection::responder(self.mpa.clone(), params)),
        };
        if let (Some(c), Some(srq)) = (&mut self.iwarp, &self.srq) {
            c.set_srq(srq.clone());
        }
        // Receives posted while TCP was still connecting.
        if let Some(c) = &mut self.iwarp {
            for (cmd, _) in self.pending.take_recvs() {
                if let HostCommand::PostRecv(id, sgl) = cmd {
                    c.pre_post_recv(id, sgl);
                }
            }
        }
    }

    /// A received TCP segment for this connection.
    pub fn handle_segment(&mut self, seg: &TcpRepr<'_>, now: u64, mem: &mut MemoryTable) {
        self.ensure_iwarp();
        let IwarpOverTcp { tcp, iwarp, .. } = self;
        match iwarp {
            Some(c) => {
                tcp.handle_segment(seg, now, &mut |d| c.receive(d, mem));
                self.release_acked();
            }
            None => {
                // The segment that completes the handshake may carry data
                // already (the MPA Request): keep it until the connection exists.
                let mut early = Vec::new();
                tcp.handle_segment(seg, now, &mut |d| early.extend_from_slice(d));
                self.ensure_iwarp();
                if let Some(c) = &mut self.iwarp {
                    if !early.is_empty() {
                        c.receive(&early, mem);
                    }
                }
            }
        }
    }

    /// Drop the records TCP has had acknowledged; the Sends and Writes
    /// they end complete.
    fn release_acked(&mut self) {
        let acked = self.tcp.acked_offset();
        let IwarpOverTcp { txq, iwarp, .. } = self;
        let mut qp = iwarp.as_mut().and_then(|c| c.qp());
        txq.release(acked, &mut |seq| {
            if let Some(q) = qp.as_mut() {
                q.fpdu_acked(seq);
            }
        });
    }

    /// Stream octets that arrived before this connection existed (with the
    /// handshake's last ACK, taken by a listener).
    pub fn receive_early(&mut self, data: &[u8], mem: &mut MemoryTable) {
        self.ensure_iwarp();
        if let Some(c) = &mut self.iwarp {
            c.receive(data, mem);
        }
    }

    /// Who ended the stream and how, if that is known: our own close or
    /// abort first, then a Terminate either way, then the peer's FIN, RST
    /// or silence.
    pub fn disconnect_cause(&self) -> Option<DisconnectCause> {
        let terminate = self
            .iwarp
            .as_ref()
            .and_then(|c| c.qp_ref())
            .and_then(|q| q.disconnect_cause());
        let tcp = self.tcp.error().map(|e| match e {
            TcpError::Refused | TcpError::Reset => DisconnectCause::PeerReset,
            TcpError::TimedOut => DisconnectCause::TimedOut,
        });
        match self.life.cause() {
            Some(c @ (DisconnectCause::LocalClose | DisconnectCause::LocalAbort)) => Some(c),
            peer => terminate.or(peer).or(tcp),
        }
    }

    /// What a post on a stream that is over is refused with.
    fn closed_refusal(&self) -> PostError {
        self.disconnect_cause()
            .map_or(PostError::NotReady(QpState::Error), PostError::Disconnected)
    }

    /// Post `cmd` now if the queue pair is in full operation (refusals go to
    /// `out`), else hold it until it is. `now` (the loop's clock) is the
    /// post's time, which a send-queue request's latency counts from
    /// ([`drain`](Self::drain)).
    pub fn post(
        &mut self,
        cmd: HostCommand,
        now: u64,
        mem: &MemoryTable,
        out: &mut dyn FnMut(HostOutput),
    ) {
        if self.life.state().is_closing() {
            out(HostOutput::refused(&cmd, self.closed_refusal()));
            return;
        }
        match (self.iwarp.as_mut(), cmd) {
            (Some(c), cmd) if c.qp_ref().is_some() && self.pending.is_empty() => {
                if let Some(qp) = c.qp() {
                    if let Err(e) = cmd.post_to(qp, mem, now) {
                        out(HostOutput::refused(&cmd, e));
                    }
                }
            }
            // Before full operation a receive goes to the connection, which
            // posts it to the queue pair before any octet is processed.
            // (Held against the receive queue's depth, as in `pending`.)
            (Some(c), HostCommand::PostRecv(id, sgl)) if c.qp_ref().is_none() => {
                if c.pre_posted() < self.params.rq_depth {
                    c.pre_post_recv(id, sgl)
                } else {
                    out(HostOutput::refused(&cmd, PostError::QueueFull));
                }
            }
            (_, cmd) => {
                if let Err(e) = self.pending.push(cmd, now) {
                    out(HostOutput::refused(&cmd, e));
                }
            }
        }
    }

    /// Whether posts wait here for full operation (or for their refusal
    /// once closing): [`drain`](Self::drain) moves them on.
    #[inline]
    pub fn holds_posts(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Post work that waited for full operation, and hand completions,
    /// events and refusals to `out`; the latency of each successful
    /// send-queue completion (from its post to `now`, the loop's clock)
    /// goes to `latency`. Returns true if it did anything.
    pub fn drain(
        &mut self,
        now: u64,
        mem: &MemoryTable,
        latency: &mut CompletionLatency,
        out: &mut dyn FnMut(HostOutput),
    ) -> bool {
        let mut busy = false;
        if self.life.state().is_closing() {
            // After a disconnect request nothing new goes on the wire.
            let refusal = self.closed_refusal();
            while let Some((cmd, _)) = self.pending.pop_front() {
                out(HostOutput::refused(&cmd, refusal));
                busy = true;
            }
            if let Some(c) = self.iwarp.as_mut().filter(|c| c.qp_ref().is_none()) {
                for (id, _) in c.take_pre_posted() {
                    out(HostOutput::RefusedRecv(id, refusal));
                    busy = true;
                }
            }
        }
        if let Some(c) = &mut self.iwarp {
            for (id, e) in c.take_refused() {
                out(HostOutput::RefusedRecv(id, e));
                busy = true;
            }
        }
        if let Some(qp) = self.iwarp.as_mut().and_then(|c| c.qp()) {
            while let Some((cmd, at)) = self.pending.pop_front() {
                if let Err(e) = cmd.post_to(qp, mem, at) {
                    out(HostOutput::refused(&cmd, e));
                }
                busy = true;
            }
            while let Some((c, posted)) = qp.poll_completion_tagged() {
                latency.record(&c, posted, now);
                out(HostOutput::Completion(c));
                busy = true;
            }
            while let Some(e) = qp.poll_event() {
                out(HostOutput::Event(e));
                busy = true;
            }
        }
        busy
    }

    /// Run timers, move FPDUs into TCP, and hand up to `max` segments to `emit`.
    pub fn poll(
        &mut self,
        now: u64,
        mem: &MemoryTable,
        max: usize,
        emit: &mut dyn FnMut(&TcpRepr<'_>, Option<PayloadFill<'_>>),
    ) -> usize {
        self.tcp.handle_timeout(now);
        self.ensure_iwarp();
        self.setup_progress(now);
        if let Some(c) = &mut self.iwarp {
            if self.life.timers.due(Timer::Hold, now) {
                self.life.timers.clear(Timer::Hold);
                c.release_tx_hold();
            }
            // One FPDU (or the MPA Request/Reply) per record, so TCP puts
            // whole FPDUs in segments (RFC 5044 §8) and a receiver, or
            // Wireshark, finds an FPDU header at the start of each segment.
            //
            // One-copy transmit: TCP keeps each record's length only, and
            // the FPDU is written from registered memory into the frame
            // (`iwarp_proto::txq`), each time TCP sends it.
            if self.tcp.is_external_send() {
                loop {
                    let room = self.tcp.send_room();
                    if room == 0 {
                        break;
                    }
                    debug_assert_eq!(self.txq.end(), self.tcp.queued_offset());
                    let before = self.txq.end();
                    if !c.poll_transmit_record(mem, room, self.copy_below, &mut self.txq) {
                        break;
                    }
                    let len = (self.txq.end() - before) as usize;
                    if !self.tcp.send_record_external(len) {
                        // Cannot happen (the record fits the room and is
                        // not empty); a record TCP does not carry would
                        // corrupt the stream, so the connection ends instead.
                        self.tx_source_lost += 1;
                        self.tcp.abort();
                        break;
                    }
                }
            } else {
                // `copy_transmit`: each FPDU is framed (with its CRC)
                // straight into TCP's send buffer, which keeps it for
                // retransmission.
                loop {
                    let n = self.tcp.send_record_with(usize::MAX, |room| {
                        let max = room.remaining();
                        c.poll_transmit(mem, &mut SendRoom(room), max, 1);
                    });
                    if n == 0 {
                        break;
                    }
                }
            }
        }
        self.teardown_progress(now);
        let IwarpOverTcp { tcp, txq, .. } = self;
        let n = tcp.poll_transmit_ext(now, max, &mut |r, ext| match ext {
            None => emit(r, None),
            Some(e) => {
                let mut write =
                    |at: usize, dst: &mut [u8]| txq.fill(mem, e.offset + at as u64, dst);
                emit(
                    r,
                    Some(PayloadFill {
                        len: e.len,
                        write: &mut write,
                    }),
                )
            }
        });
        if self.txq.take_failed() {
            // TCP cannot retransmit what it no longer has: reset, and the
            // queue pair's outstanding work completes flushed.
            self.tx_source_lost += 1;
            self.tcp.abort();
            self.teardown_progress(now);
        }
        if self.tcp.state() == TcpState::Closed {
            self.txq.clear();
        }
        n
    }

    /// The setup transitions (Opening → AwaitingSetup → AwaitingDecision →
    /// Operational, or a failure → Closing) and their timer.
    fn setup_progress(&mut self, now: u64) {
        let Some(c) = &mut self.iwarp else {
            return;
        };
        let life = &mut self.life;
        if life.state() == State::Opening {
            // TCP is established and the MPA exchange has begun.
            life.setup_begins(now, c.setup_timeout().unwrap_or(0));
        }
        if !matches!(life.state(), State::AwaitingSetup | State::AwaitingDecision) {
            return;
        }
        if life.timers.due(Timer::Setup, now) {
            // An undecided Request is rejected on the wire.
            life.timers.clear(Timer::Setup);
            c.setup_timed_out();
        }
        if let Some(e) = c.setup_error() {
            // The rejecting Reply (if any) goes out before the FIN.
            life.setup_failed(e.clone());
        } else if let Some(n) = c.negotiated() {
            life.established(now, n.clone());
            life.timers.arm(Timer::Hold, now, c.tx_hold());
        } else if life.state() == State::AwaitingSetup {
            if let Some(r) = c.pending_request() {
                // The timer restarts for our application's decision
                // (MpaConfig::decision_timeout).
                life.decision_awaited(now, r.clone(), c.setup_timeout().unwrap_or(0));
            }
        }
    }

    /// Give back memory an idle connection does not need: the record
    /// queue's and the event queue's, when empty (a connection set up and
    /// then idle kept about 1 KiB of their capacity). The stack calls it
    /// from its idle sweep.
    pub fn trim(&mut self) {
        self.txq.trim();
        self.tcp.trim();
        self.life.trim();
    }

    /// Close and abort sequencing, and the flush once TCP is done.
    #[inline]
    fn teardown_progress(&mut self, now: u64) {
        if self.tcp.state() == TcpState::Established
            && self.life.state() == State::Operational
            && !self.stream_ended()
        {
            // Every poll of a connection in full operation: nothing to
            // sequence (FIN-WAIT-2's timer is armed only once Closed).
            return;
        }
        self.teardown_sequence(now);
    }

    /// The queue pair's stream ended with a Terminate, sent or received
    /// ([`Lifecycle::stream_ended`]).
    #[inline]
    fn stream_ended(&self) -> bool {
        self.iwarp
            .as_ref()
            .and_then(|c| c.qp_ref())
            .is_some_and(|q| q.state() == QpState::Error)
    }

    /// [`teardown_progress`](Self::teardown_progress) outside full
    /// operation: the endpoint's one teardown ([`Lifecycle::teardown`])
    /// over TCP ([`TcpLower`]).
    fn teardown_sequence(&mut self, now: u64) {
        let qp = self.qp_facts();
        let mut lower = TcpLower {
            tcp: &mut self.tcp,
            records: !self.txq.is_empty(),
        };
        let done = self
            .life
            .teardown(now, &qp, &mut lower, self.mpa.close_timeout);
        if done.closed {
            // The stream is over: the queue pair is flushed.
            if let Some(qp) = self.iwarp.as_mut().and_then(|c| c.qp()) {
                qp.llp_lost();
            }
        }
        if done.reads_timed_out || done.linger_timed_out {
            self.close_timeouts += 1;
        }
        if done.reads_timed_out {
            // The close becomes abortive (Terminate, RST) and the Reads
            // complete flushed.
            self.abort(now);
            self.teardown_progress(now);
        }
    }

    /// What a close needs to know of the MPA connection and its queue
    /// pair.
    fn qp_facts(&self) -> QpFacts {
        let Some(c) = &self.iwarp else {
            return QpFacts::NONE;
        };
        let qp = c.qp_ref();
        QpFacts {
            exists: qp.is_some(),
            ended: qp.is_some_and(|q| q.state() == QpState::Error),
            tx_idle: c.tx_idle(),
            reads_outstanding: qp.is_some_and(|q| q.outstanding_reads() > 0),
            fpdus_rx: qp.map_or(0, |q| q.stats().fpdus_rx),
            setup_failed: c.setup_error().is_some(),
        }
    }

    /// Next deadline: TCP's timers and the connection's own (the MPA setup
    /// or decision timer, the first-FPDU hold, a close's wait for the
    /// answers to our Reads, FIN-WAIT-2, an abort's wait for its
    /// Terminate). The host polls the connection when it passes (a deadline
    /// first set inside [`poll`](Self::poll) is in this once that poll
    /// returns).
    pub fn poll_timeout(&self) -> Option<u64> {
        earliest(self.tcp.poll_timeout(), self.life.timers.next())
    }
}

/// TCP under an iWARP connection, as its teardown sees it
/// ([`LowerLayer`]): a close is a FIN, a reset an RST.
struct TcpLower<'a> {
    tcp: &'a mut Tcp,
    /// One-copy transmit still has FPDUs TCP has not had acknowledged.
    records: bool,
}

impl LowerLayer for TcpLower<'_> {
    #[inline]
    fn steady(&self) -> bool {
        self.tcp.state() == TcpState::Established
    }

    #[inline]
    fn peer_closed(&self) -> bool {
        self.tcp.state() == TcpState::CloseWait
    }

    fn can_close(&self) -> bool {
        matches!(
            self.tcp.state(),
            TcpState::SynReceived | TcpState::Established | TcpState::CloseWait
        )
    }

    fn can_reset(&self) -> bool {
        self.tcp.state() != TcpState::Closed
    }

    fn terminate_delivered(&self, qp: &QpFacts) -> bool {
        qp.tx_idle && self.tcp.unacked() == 0
    }

    fn close(&mut self) {
        self.tcp.close();
    }

    fn end_abort(&mut self) {
        self.tcp.abort();
    }

    fn reset(&mut self) {
        self.tcp.abort();
    }

    fn over(&self, state: State) -> bool {
        let tcp = self.tcp.state();
        // In one-copy transmit, FPDUs still unacknowledged in LAST-ACK or
        // CLOSING complete when TCP has them acknowledged (or flushed if
        // it gives up), not flushed while TCP still delivers them.
        let draining = self.records && matches!(tcp, TcpState::LastAck | TcpState::Closing);
        matches!(
            tcp,
            TcpState::LastAck | TcpState::Closing | TcpState::TimeWait | TcpState::Closed
        ) && !draining
            || (state.is_closing() && tcp == TcpState::FinWait2)
    }

    /// RFC 9293 puts no limit on FIN-WAIT-2: a peer that acknowledges our
    /// FIN but never sends its own would hold the connection for ever
    /// (Linux bounds it with `tcp_fin_timeout`). The iWARP stream is over
    /// once our FIN is out, so the close timeout bounds it. FIN-WAIT-2
    /// shows no progress of the peer's (its FIN is all it still owes), so
    /// the bound runs from our FIN's ACK.
    fn lingering(&self, state: State, _: &QpFacts) -> Option<(u64, usize)> {
        (state == State::Closed && self.tcp.state() == TcpState::FinWait2).then_some((0, 0))
    }
}

/// Sends and Writes shorter than this are framed into a copy even in
/// one-copy transmit, and complete once handed to TCP: copying a few KiB
/// takes a microsecond or so, less than the round trip a completion on
/// ACK would wait for (tens of microseconds on a veth, up to a delayed-ACK
/// timeout with a peer that delays its ACKs). Linux documents
/// `MSG_ZEROCOPY` as paying off from about 10 KB on, for the same reason.
pub const COPY_BELOW: u64 = 16 * 1024;

/// A segment from [`IwarpOverTcp::poll`] as wire octets (TCP header and
/// payload, checksum over `src` and `dst`), its payload written by `fill`
/// where it has one: for links that carry segments rather than frames
/// (the simulators, tests). `None` if the segment cannot be encoded or its
/// payload not written.
pub fn encode_segment(
    r: &TcpRepr<'_>,
    fill: Option<PayloadFill<'_>>,
    src: &Ipv4Address,
    dst: &Ipv4Address,
) -> Option<Vec<u8>> {
    let payload = match fill {
        Some(f) => {
            let mut p = vec![0u8; f.len];
            if !(f.write)(0, &mut p) {
                return None;
            }
            Some(p)
        }
        None => None,
    };
    let mut seg = *r;
    if let Some(p) = &payload {
        seg.payload = p;
    }
    let mut buf = vec![0u8; seg.buffer_len()];
    seg.emit(&mut TcpPacket::new_unchecked(&mut buf[..]), src, dst)
        .ok()?;
    Some(buf)
}

/// Work an application thread hands to a [`TcpHost`](crate::link::TcpHost) running in a poll loop.
#[derive(Debug, Clone, Copy)]
pub enum HostCommand {
    /// Post to the send queue.
    PostSend(iwarp_proto::qp::WorkRequest),
    /// Post a receive buffer.
    PostRecv(u64, iwarp_proto::qp::SgList),
}

impl HostCommand {
    /// The work request's id.
    pub fn wr_id(&self) -> u64 {
        match *self {
            HostCommand::PostSend(wr) => wr.wr_id(),
            HostCommand::PostRecv(wr_id, _) => wr_id,
        }
    }

    /// Post to `qp`, a send-queue request tagged with `at`, its post's time.
    pub(crate) fn post_to(
        &self,
        qp: &mut iwarp_proto::qp::Qp,
        mem: &MemoryTable,
        at: u64,
    ) -> Result<(), PostError> {
        match *self {
            HostCommand::PostSend(wr) => qp.post_send_tagged(mem, wr, at),
            HostCommand::PostRecv(id, sge) => qp.post_recv(mem, id, sge),
        }
    }
}

/// What a [`TcpHost`](crate::link::TcpHost) hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOutput {
    /// A work completion.
    Completion(iwarp_proto::qp::Completion),
    /// A stream event.
    Event(iwarp_proto::qp::QpEvent),
    /// A send-queue post the QP refused: the work request's id and why.
    Refused(u64, iwarp_proto::qp::PostError),
    /// A receive post the QP refused: the work request's id and why. It
    /// goes to the receive CQ, where verbs would report the receive.
    RefusedRecv(u64, iwarp_proto::qp::PostError),
}

impl HostOutput {
    /// The refusal of `cmd`: [`Refused`](Self::Refused) for a send-queue
    /// post, [`RefusedRecv`](Self::RefusedRecv) for a receive.
    pub fn refused(cmd: &HostCommand, e: iwarp_proto::qp::PostError) -> HostOutput {
        match *cmd {
            HostCommand::PostSend(wr) => HostOutput::Refused(wr.wr_id(), e),
            HostCommand::PostRecv(id, _) => HostOutput::RefusedRecv(id, e),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // test: a failed unwrap is a failed test

    use super::*;
    use iwarp_proto::mem::Access;
    use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
    use tcp_lite::tcp::Config;
    use tcp_lite::wire::{Ipv4Address, TcpPacket};

    const IP_A: Ipv4Address = Ipv4Address([10, 9, 0, 1]);
    const IP_B: Ipv4Address = Ipv4Address([10, 9, 0, 2]);

    /// Segments `from` sends at `now`, as owned frames.
    fn take(
        from: &mut IwarpOverTcp,
        now: u64,
        mem: &MemoryTable,
        src: Ipv4Address,
        dst: Ipv4Address,
    ) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        // A segment whose payload cannot be written is not sent.
        from.poll(now, mem, 64, &mut |r, fill| {
            out.extend(encode_segment(r, fill, &src, &dst));
        });
        out
    }

    fn give(
        to: &mut IwarpOverTcp,
        f: &[u8],
        now: u64,
        mem: &mut MemoryTable,
        src: Ipv4Address,
        dst: Ipv4Address,
    ) {
        let r = TcpRepr::parse(&TcpPacket::new_checked(f).unwrap(), &src, &dst).unwrap();
        to.handle_segment(&r, now, mem);
    }

    fn reads(s: &IwarpOverTcp) -> usize {
        s.iwarp
            .as_ref()
            .and_then(|c| c.qp_ref())
            .map_or(0, |q| q.outstanding_reads())
    }

    /// A (port 40000) has sent its SYN to B (port 7174), which took it.
    fn tcp_pair(cfg: Config) -> (Tcp, Tcp) {
        let mut tcp_a = Tcp::connect(cfg, 40000, 7174, 1234);
        let mut syn = Vec::new();
        tcp_a.poll_transmit(0, 1, &mut |r| {
            syn = vec![0; r.buffer_len()];
            r.emit(&mut TcpPacket::new_unchecked(&mut syn[..]), &IP_A, &IP_B)
                .unwrap();
        });
        let syn_r =
            TcpRepr::parse(&TcpPacket::new_checked(&syn[..]).unwrap(), &IP_A, &IP_B).unwrap();
        let tcp_b = Tcp::accept(cfg, &syn_r, 99);
        (tcp_a, tcp_b)
    }

    fn payload_len(f: &[u8]) -> usize {
        f.len() - usize::from(f[12] >> 4) * 4
    }

    /// What the peer B does about A's Read.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Peer {
        /// Every segment gets through; A disconnects right after posting.
        Answers,
        /// B never sees A's data after the Read is posted (so never
        /// answers) and disconnects while the Read is out.
        Closes,
        /// B's TCP acknowledges A's data but its RDMAP layer never sees
        /// it, and B never closes; A disconnects right after posting.
        Silent,
    }

    /// A posts a 64-octet RDMA Read once established; B behaves as `peer`
    /// says. A's close timer is 50 ms. Returns A's outputs, when A
    /// reported Disconnected (ns after the Read was posted), and A's sink
    /// contents.
    fn read_then_close(peer: Peer) -> (Vec<HostOutput>, Option<u64>, Vec<u8>, IwarpOverTcp) {
        let peer_closes = peer == Peer::Closes;
        let cfg = Config {
            rto_min: 5_000_000,
            rto_initial: 50_000_000,
            ..Config::default()
        };
        let (tcp_a, tcp_b) = tcp_pair(cfg);
        let mut mem_a = MemoryTable::new();
        let pd_a = mem_a.alloc_pd();
        let sink = mem_a
            .register(pd_a, vec![0; 64], Access::LOCAL_WRITE, 0)
            .unwrap();
        let mut mem_b = MemoryTable::new();
        let pd_b = mem_b.alloc_pd();
        let src = mem_b
            .register(pd_b, vec![7; 64], Access::REMOTE_READ, 0)
            .unwrap();
        let params = |pd| StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 16,
        };
        let mpa = MpaConfig {
            crc: true,
            close_timeout: 50_000_000,
            ..Default::default()
        };
        let mut a = IwarpOverTcp::new(tcp_a, Role::Initiator, mpa.clone(), params(pd_a));
        let mut b = IwarpOverTcp::new(tcp_b, Role::Responder, mpa, params(pd_b));
        let mut now = 1_000_000;
        let mut a_out = Vec::new();
        let mut established = false;
        let mut posted = false;
        let mut disconnected = None;
        let mut posted_at = 0;
        let mut acked_first = false;
        for _ in 0..400 {
            now += 1_000_000;
            for f in take(&mut a, now, &mem_a, IP_A, IP_B) {
                if peer == Peer::Silent && posted {
                    // B's TCP takes the Read Request; RDMAP never sees it.
                    let r = TcpRepr::parse(&TcpPacket::new_checked(&f[..]).unwrap(), &IP_A, &IP_B)
                        .unwrap();
                    b.tcp.handle_segment(&r, now, &mut |_| {});
                } else if !peer_closes || !posted || payload_len(&f) == 0 {
                    // Once the Read is posted, a closing peer never sees
                    // our data (so never answers), only our ACKs and FIN.
                    give(&mut b, &f, now, &mut mem_b, IP_A, IP_B);
                }
            }
            let mut slow_round = false;
            if peer == Peer::Answers && posted && !acked_first {
                acked_first = true;
                slow_round = true;
                // The peer's TCP acknowledges what it got before its RDMAP
                // layer answers (a busy peer): an ACK with no response.
                let mut acks = Vec::new();
                b.tcp.poll_transmit_ext(now, 4, &mut |r, ext| {
                    assert!(ext.is_none(), "B has nothing of its own to send yet");
                    let mut f = vec![0; r.buffer_len()];
                    r.emit(&mut TcpPacket::new_unchecked(&mut f[..]), &IP_B, &IP_A)
                        .unwrap();
                    acks.push(f);
                });
                for f in acks {
                    give(&mut a, &f, now, &mut mem_a, IP_B, IP_A);
                }
            }
            // In that round its answer waits.
            let from_b = if slow_round {
                Vec::new()
            } else {
                take(&mut b, now, &mem_b, IP_B, IP_A)
            };
            for f in from_b {
                give(&mut a, &f, now, &mut mem_a, IP_B, IP_A);
            }
            a.drain(now, &mem_a, &mut CompletionLatency::default(), &mut |o| {
                a_out.push(o)
            });
            b.drain(now, &mem_b, &mut CompletionLatency::default(), &mut |_| {});
            while let Some(e) = a.poll_cm_event() {
                match e {
                    CmEvent::Established(_) => established = true,
                    CmEvent::Disconnected => disconnected = Some(now - posted_at),
                    _ => {}
                }
            }
            while b.poll_cm_event().is_some() {}
            if established && !posted {
                posted = true;
                let wr = WorkRequest::Read {
                    wr_id: 5,
                    signaled: true,
                    local: Sge {
                        stag: sink,
                        to: 0,
                        len: 64,
                    }
                    .into(),
                    remote_stag: src,
                    remote_to: 0,
                };
                a.post(HostCommand::PostSend(wr), now, &mem_a, &mut |o| {
                    a_out.push(o)
                });
                posted_at = now;
                if !peer_closes {
                    a.disconnect();
                }
            } else if peer_closes && posted && reads(&a) == 1 && !b.state().is_closing() {
                // The peer closes gracefully while our Read is out.
                b.disconnect();
            }
            if disconnected.is_some() {
                break;
            }
        }
        assert!(established && posted);
        let got = mem_a.snapshot(sink).unwrap();
        (a_out, disconnected, got, a)
    }

    /// A fresh initiator/responder pair (A opens) with the given MPA
    /// settings; nothing exchanged yet.
    fn fresh_pair(
        mpa_a: MpaConfig,
        mpa_b: MpaConfig,
        manual_b: bool,
    ) -> (IwarpOverTcp, IwarpOverTcp, MemoryTable) {
        fresh_pair_tcp(Config::default(), mpa_a, mpa_b, manual_b)
    }

    /// [`fresh_pair`] with TCP's configuration `cfg` at both ends.
    fn fresh_pair_tcp(
        cfg: Config,
        mpa_a: MpaConfig,
        mpa_b: MpaConfig,
        manual_b: bool,
    ) -> (IwarpOverTcp, IwarpOverTcp, MemoryTable) {
        let tcp_a = Tcp::connect(cfg, 40000, 7174, 1234);
        let mut a = IwarpOverTcp::new(
            tcp_a,
            Role::Initiator,
            mpa_a,
            StreamParams {
                pd: MemoryTable::new().alloc_pd(),
                emss: 1460,
                sq_depth: 4,
                rq_depth: 4,
            },
        );
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let params = StreamParams {
            pd,
            emss: 1460,
            sq_depth: 4,
            rq_depth: 4,
        };
        a.params = params;
        let syn = take(&mut a, 0, &mem, IP_A, IP_B).remove(0);
        let syn_r =
            TcpRepr::parse(&TcpPacket::new_checked(&syn[..]).unwrap(), &IP_A, &IP_B).unwrap();
        let tcp_b = Tcp::accept(cfg, &syn_r, 99);
        let mut b = IwarpOverTcp::new(tcp_b, Role::Responder, mpa_b, params);
        if manual_b {
            b = b.manual_accept();
        }
        (a, b, mem)
    }

    /// One round at `now`: A's segments to B, then B's to A. Returns the
    /// frames each sent.
    fn round(
        a: &mut IwarpOverTcp,
        b: &mut IwarpOverTcp,
        mem: &mut MemoryTable,
        now: u64,
    ) -> (usize, usize) {
        let fa = take(a, now, mem, IP_A, IP_B);
        for f in &fa {
            give(b, f, now, mem, IP_A, IP_B);
        }
        let fb = take(b, now, mem, IP_B, IP_A);
        for f in &fb {
            give(a, f, now, mem, IP_B, IP_A);
        }
        (fa.len(), fb.len())
    }

    fn events(c: &mut IwarpOverTcp) -> Vec<CmEvent> {
        std::iter::from_fn(|| c.poll_cm_event()).collect()
    }

    /// Rounds (1 ms apart) until both ends are in full operation, their
    /// CM events taken; the clock after them.
    fn to_operation(a: &mut IwarpOverTcp, b: &mut IwarpOverTcp, mem: &mut MemoryTable) -> u64 {
        let mut now = 1_000;
        for _ in 0..50 {
            round(a, b, mem, now);
            now += 1_000_000;
        }
        assert_eq!(
            (a.state(), b.state()),
            (State::Operational, State::Operational)
        );
        let _ = (events(a), events(b));
        now
    }

    /// Set up and then idle, each end gives back the record and event
    /// queues' memory when trimmed (about 1 KiB per end otherwise), and
    /// still works afterwards.
    #[test]
    fn an_idle_connection_trims_its_queues() {
        let (mut a, mut b, mut mem) = fresh_pair(MpaConfig::default(), MpaConfig::default(), false);
        let mut now = to_operation(&mut a, &mut b, &mut mem);
        for c in [&mut a, &mut b] {
            assert!(c.txq.is_empty());
            assert!(
                c.txq.capacity() + c.life.events_capacity() > 0,
                "set-up left capacity"
            );
            c.trim();
            assert_eq!((c.txq.capacity(), c.life.events_capacity()), (0, 0));
        }
        a.disconnect();
        for _ in 0..50 {
            round(&mut a, &mut b, &mut mem, now);
            now += 1_000_000;
        }
        assert_eq!((a.state(), b.state()), (State::Closed, State::Closed));
    }

    /// An Accept whose settings cannot be sent (private data over MPA's
    /// 512 octets, RFC 5044 §7.1) is refused and answers nothing: the
    /// Request stays held for another answer (`iwarp_control::setup`,
    /// as over SCTP), which then brings both ends up.
    #[test]
    fn a_refused_accept_leaves_the_request_held() {
        let (mut a, mut b, mut mem) = fresh_pair(MpaConfig::default(), MpaConfig::default(), true);
        let mut now = 1_000;
        for _ in 0..20 {
            now += 1_000;
            round(&mut a, &mut b, &mut mem, now);
            if b.state() == State::AwaitingDecision {
                break;
            }
        }
        assert_eq!(b.state(), State::AwaitingDecision);
        let e = b
            .accept(vec![0; 600], 1, 1, &mut mem)
            .expect_err("too much private data");
        assert_eq!(e.reason, iwarp_control::SetupFailure::BadConfig);
        assert_eq!(b.state(), State::AwaitingDecision, "still held");
        b.accept(b"ok".to_vec(), 1, 1, &mut mem).expect("accepted");
        for _ in 0..20 {
            now += 1_000;
            round(&mut a, &mut b, &mut mem, now);
        }
        assert_eq!(
            (a.state(), b.state()),
            (State::Operational, State::Operational)
        );
        let est = events(&mut a).into_iter().find_map(|e| match e {
            CmEvent::Established(n) => Some(n),
            _ => None,
        });
        assert_eq!(est.map(|n| n.peer_private_data), Some(b"ok".to_vec()));
    }

    #[test]
    fn one_state_walks_setup_operation_and_close_with_an_event_per_transition() {
        let (mut a, mut b, mut mem) = fresh_pair(MpaConfig::default(), MpaConfig::default(), true);
        assert_eq!((a.state(), b.state()), (State::Opening, State::Opening));
        let mut now = 1_000;
        let mut seen_a = vec![a.state()];
        let mut seen_b = vec![b.state()];
        let (mut ev_a, mut ev_b) = (Vec::new(), Vec::new());
        for _ in 0..20 {
            now += 1_000;
            round(&mut a, &mut b, &mut mem, now);
            ev_a.extend(events(&mut a));
            ev_b.extend(events(&mut b));
            for (s, seen) in [(a.state(), &mut seen_a), (b.state(), &mut seen_b)] {
                if seen.last() != Some(&s) {
                    seen.push(s);
                }
            }
            if b.state() == State::AwaitingDecision {
                b.accept(Vec::new(), 1, 1, &mut mem).unwrap();
            }
            if a.state() == State::Operational && b.state() == State::Operational {
                a.disconnect();
                assert_eq!(a.state(), State::Closing, "disconnect is a transition");
            }
            if a.state() == State::Closed && b.state() == State::Closed {
                break;
            }
        }
        use State::*;
        assert_eq!(
            seen_a,
            [Opening, AwaitingSetup, Operational, Closing, Closed]
        );
        // B's handshake ends with A's Request in the same round: it passes
        // AwaitingSetup inside one poll.
        assert_eq!(seen_b, [Opening, AwaitingDecision, Operational, Closed]);
        assert!(
            matches!(ev_a[..], [CmEvent::Established(_), CmEvent::Disconnected]),
            "{ev_a:?}"
        );
        assert!(
            matches!(
                ev_b[..],
                [
                    CmEvent::ConnectRequest(_),
                    CmEvent::Established(_),
                    CmEvent::Disconnected
                ]
            ),
            "{ev_b:?}"
        );
    }

    #[test]
    fn poll_timeout_carries_the_setup_and_decision_timers() {
        let mpa_b = MpaConfig {
            request_timeout: 7_000_000,
            decision_timeout: 3_000_000,
            ..Default::default()
        };
        // A never sends its Request: B's handshake completes (A's ACK),
        // then B waits request_timeout for the Request.
        let (mut a, mut b, mut mem) = fresh_pair(MpaConfig::default(), mpa_b.clone(), true);
        let now = 10_000;
        let synack = take(&mut b, now, &mem, IP_B, IP_A);
        for f in &synack {
            give(&mut a, f, now, &mut mem, IP_B, IP_A);
        }
        let ack = take(&mut a, now, &mem, IP_A, IP_B);
        // The handshake's ACK alone: A's Request (with it, or after it)
        // is lost.
        let mut r =
            TcpRepr::parse(&TcpPacket::new_checked(&ack[0][..]).unwrap(), &IP_A, &IP_B).unwrap();
        r.payload = &[];
        b.handle_segment(&r, now, &mut mem);
        take(&mut b, now, &mem, IP_B, IP_A);
        assert_eq!(b.state(), State::AwaitingSetup);
        let deadline = now + 7_000_000;
        assert!(
            b.poll_timeout().is_some_and(|t| t <= deadline),
            "the Request timer is in poll_timeout: {:?}",
            b.poll_timeout()
        );
        take(&mut b, deadline - 1, &mem, IP_B, IP_A);
        assert_eq!(b.state(), State::AwaitingSetup, "not before its deadline");
        take(&mut b, deadline, &mem, IP_B, IP_A);
        assert_eq!(b.state(), State::Closing);
        assert!(
            matches!(&events(&mut b)[..], [CmEvent::SetupFailed(e)] if e.reason == iwarp_control::SetupFailure::TimedOut)
        );

        // The decision timer replaces it once the Request is in.
        let (mut a, mut b, mut mem) = fresh_pair(MpaConfig::default(), mpa_b, true);
        let mut now = 10_000;
        while b.state() != State::AwaitingDecision {
            now += 1_000;
            round(&mut a, &mut b, &mut mem, now);
            assert!(now < 1_000_000);
        }
        let decided_by = now + 3_000_000;
        assert!(
            b.poll_timeout().is_some_and(|t| t <= decided_by),
            "the decision timer is in poll_timeout: {:?}",
            b.poll_timeout()
        );
        take(&mut b, decided_by - 1, &mem, IP_B, IP_A);
        assert_eq!(
            b.state(),
            State::AwaitingDecision,
            "not before its deadline"
        );
        take(&mut b, decided_by, &mem, IP_B, IP_A);
        assert_eq!(b.state(), State::Closing, "an undecided Request fails");
    }

    #[test]
    fn the_first_fpdu_hold_is_a_timer_in_poll_timeout() {
        let hold = 20_000_000;
        let mpa_a = MpaConfig {
            first_fpdu_delay: hold,
            ..Default::default()
        };
        let (mut a, mut b, mut mem) = fresh_pair(mpa_a, MpaConfig::default(), false);
        let mut now = 10_000;
        while a.state() != State::Operational {
            now += 1_000;
            round(&mut a, &mut b, &mut mem, now);
            assert!(now < 1_000_000);
        }
        let held_from = now;
        let buf = mem
            .register(a.params.pd, vec![5; 16], Access::LOCAL_READ, 0)
            .unwrap();
        let wr = WorkRequest::Send {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: buf,
                to: 0,
                len: 16,
            }
            .into(),
            solicited: false,
            invalidate: None,
        };
        a.post(HostCommand::PostSend(wr), now, &mem, &mut |o| {
            panic!("refused: {o:?}")
        });
        // Let everything but the held FPDU settle: nothing with payload goes.
        for _ in 0..3 {
            now += 1_000;
            let sent = take(&mut a, now, &mem, IP_A, IP_B);
            assert!(
                sent.iter().all(|f| payload_len(f) == 0),
                "an FPDU left during the hold"
            );
        }
        assert_eq!(
            a.poll_timeout(),
            Some(held_from + hold),
            "the hold is the next deadline"
        );
        let sent = take(&mut a, held_from + hold, &mem, IP_A, IP_B);
        assert!(
            sent.iter().any(|f| payload_len(f) > 0),
            "the FPDU goes when the hold ends"
        );
    }

    fn read_status(out: &[HostOutput]) -> Option<WcStatus> {
        out.iter().find_map(|o| match o {
            HostOutput::Completion(c) if c.wr_id == 5 => Some(c.status),
            _ => None,
        })
    }

    #[test]
    fn graceful_disconnect_waits_for_the_read_response() {
        let (out, disconnected, got, a) = read_then_close(Peer::Answers);
        assert!(disconnected.is_some());
        assert_eq!(read_status(&out), Some(WcStatus::Success));
        assert_eq!(got, vec![7; 64]);
        assert_eq!(a.close_timeouts, 0);
    }

    #[test]
    fn peer_fin_with_our_read_outstanding_closes_and_flushes_the_read() {
        // Before the fix the close waited forever for the response.
        let (out, disconnected, got, a) = read_then_close(Peer::Closes);
        assert!(
            disconnected.is_some(),
            "a waits forever on a Read the peer can no longer answer"
        );
        assert_eq!(read_status(&out), Some(WcStatus::Flushed));
        assert_eq!(got, vec![0; 64], "nothing placed");
        assert_eq!(a.close_timeouts, 0, "the FIN ended the wait, not the timer");
    }

    #[test]
    fn fin_wait_2_without_the_peer_fin_ends_in_rst_after_the_close_timer() {
        // A (ours) opens MPA against a raw TCP peer B that answers with a
        // literal Reply, acknowledges A's FIN, and never sends its own.
        let cfg = Config::default();
        let (tcp_a, mut b) = tcp_pair(cfg);
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mpa = MpaConfig {
            close_timeout: 50_000_000,
            ..Default::default()
        };
        let params = StreamParams {
            pd,
            emss: 1460,
            sq_depth: 4,
            rq_depth: 4,
        };
        let mut a = IwarpOverTcp::new(tcp_a, Role::Initiator, mpa, params);
        let mut got = Vec::new();
        let mut replied = false;
        let (mut fin_wait2_at, mut rst) = (None, false);
        let mut now = 0;
        while now < 1_000_000_000 && a.tcp.state() != TcpState::Closed {
            now += 1_000_000;
            for f in take(&mut a, now, &mem, IP_A, IP_B) {
                let r =
                    TcpRepr::parse(&TcpPacket::new_checked(&f[..]).unwrap(), &IP_A, &IP_B).unwrap();
                rst |= r.flags.contains(tcp_lite::wire::TcpFlags::RST);
                b.handle_segment(&r, now, &mut |d| got.extend_from_slice(d));
            }
            if got.len() >= 24 && !replied {
                replied = true;
                assert!(b.send_record(b"MPA ID Rep Frame\x10\x02\x00\x04\x00\x10\x00\x10"));
            }
            let mut from_b = Vec::new();
            b.poll_transmit(now, 8, &mut |r| {
                let mut f = vec![0; r.buffer_len()];
                r.emit(&mut TcpPacket::new_unchecked(&mut f[..]), &IP_B, &IP_A)
                    .unwrap();
                from_b.push(f);
            });
            for f in from_b {
                give(&mut a, &f, now, &mut mem, IP_B, IP_A);
            }
            while let Some(e) = a.poll_cm_event() {
                if let CmEvent::Established(_) = e {
                    a.disconnect();
                }
            }
            if a.tcp.state() == TcpState::FinWait2 {
                fin_wait2_at.get_or_insert(now);
            }
        }
        let since = fin_wait2_at.expect("A never reached FIN-WAIT-2");
        assert_eq!(a.tcp.state(), TcpState::Closed, "still waiting for the FIN");
        assert!(
            (50_000_000..60_000_000).contains(&(now - since)),
            "reset {} ns into FIN-WAIT-2",
            now - since
        );
        assert!(rst, "the peer is told: RST");
        assert_eq!(a.close_timeouts, 1);
        assert_eq!(b.state(), tcp_lite::tcp::State::Closed, "B took the RST");
    }

    #[test]
    fn a_read_the_peer_neither_answers_nor_ends_with_a_fin_is_flushed_by_the_close_timer() {
        // Before the close timer, A's graceful close waited for ever here.
        let (out, disconnected, got, a) = read_then_close(Peer::Silent);
        let after = disconnected.expect("the close never ended");
        // Not before the 50 ms close timer; then abortive (Terminate, RST
        // within the 100 ms abort grace).
        assert!(
            (50_000_000..200_000_000).contains(&after),
            "disconnected {after} ns after the close began"
        );
        assert_eq!(a.close_timeouts, 1);
        assert_eq!(read_status(&out), Some(WcStatus::Flushed));
        assert_eq!(got, vec![0; 64], "nothing placed");
        assert_eq!(a.tcp.state(), TcpState::Closed, "RST, not FIN");
    }

    /// Two connected engines, A (initiator) and B, with a 64 KiB source
    /// region in A and a sink B lets A write, at 1 ms steps from `now`.
    struct Wired {
        a: IwarpOverTcp,
        b: IwarpOverTcp,
        mem_a: MemoryTable,
        mem_b: MemoryTable,
        src: iwarp_proto::mem::STag,
        sink: iwarp_proto::mem::STag,
        now: u64,
        /// Every segment B sent, in order.
        from_b: Vec<Vec<u8>>,
    }

    const BIG: usize = 64 * 1024;

    fn wired() -> Wired {
        let cfg = Config {
            rto_min: 5_000_000,
            rto_initial: 50_000_000,
            ..Config::default()
        };
        let (tcp_a, tcp_b) = tcp_pair(cfg);
        let mut mem_a = MemoryTable::new();
        let pd_a = mem_a.alloc_pd();
        let data: Vec<u8> = (0..BIG).map(|i| (i * 7 + i / 251) as u8).collect();
        let src = mem_a.register(pd_a, data, Access::LOCAL_READ, 0).unwrap();
        let mut mem_b = MemoryTable::new();
        let pd_b = mem_b.alloc_pd();
        let sink = mem_b
            .register(pd_b, vec![0; BIG], Access::REMOTE_WRITE, 0)
            .unwrap();
        let params = |pd| StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 16,
        };
        let mpa = MpaConfig {
            crc: true,
            ..Default::default()
        };
        let mut w = Wired {
            a: IwarpOverTcp::new(tcp_a, Role::Initiator, mpa.clone(), params(pd_a)),
            b: IwarpOverTcp::new(tcp_b, Role::Responder, mpa, params(pd_b)),
            mem_a,
            mem_b,
            src,
            sink,
            now: 1_000_000,
            from_b: Vec::new(),
        };
        for _ in 0..100 {
            w.step(true, &mut Vec::new());
            if w.a.state() == State::Operational && w.b.state() == State::Operational {
                return w;
            }
        }
        panic!("not established: {:?} {:?}", w.a.state(), w.b.state());
    }

    impl Wired {
        /// One step: A's segments to B (dropped unless `deliver`), B's to A.
        fn step(&mut self, deliver: bool, a_out: &mut Vec<HostOutput>) {
            self.now += 1_000_000;
            for f in take(&mut self.a, self.now, &self.mem_a, IP_A, IP_B) {
                if deliver {
                    give(&mut self.b, &f, self.now, &mut self.mem_b, IP_A, IP_B);
                }
            }
            for f in take(&mut self.b, self.now, &self.mem_b, IP_B, IP_A) {
                give(&mut self.a, &f, self.now, &mut self.mem_a, IP_B, IP_A);
                self.from_b.push(f);
            }
            let now = self.now;
            self.a.drain(
                now,
                &self.mem_a,
                &mut CompletionLatency::default(),
                &mut |o| a_out.push(o),
            );
            self.b.drain(
                now,
                &self.mem_b,
                &mut CompletionLatency::default(),
                &mut |_| {},
            );
        }

        fn post_write(&mut self, a_out: &mut Vec<HostOutput>) {
            let wr = WorkRequest::Write {
                wr_id: 9,
                signaled: true,
                local: Sge {
                    stag: self.src,
                    to: 0,
                    len: BIG as u32,
                }
                .into(),
                remote_stag: self.sink,
                remote_to: 0,
            };
            self.a
                .post(HostCommand::PostSend(wr), self.now, &self.mem_a, &mut |o| {
                    a_out.push(o)
                });
        }
    }

    fn write_status(out: &[HostOutput]) -> Option<WcStatus> {
        out.iter().find_map(|o| match o {
            HostOutput::Completion(c) if c.wr_id == 9 => Some(c.status),
            _ => None,
        })
    }

    /// RFC 5040 §7 and §6.2.1: a stream that ends with a Terminate takes
    /// its LLP stream with it, the Terminate delivered first. A writes to
    /// an STag B does not have: B sends the Terminate (DDP, invalid
    /// STag), then closes TCP; A takes it and closes too. Neither
    /// application asks, both end Closed with the Terminate as the cause,
    /// as over SCTP (its session's end shuts the association down).
    #[test]
    fn a_terminate_either_way_closes_the_tcp_stream() {
        let mut w = wired();
        let mut out = Vec::new();
        let _ = (events(&mut w.a), events(&mut w.b));
        w.from_b.clear();
        w.sink = iwarp_proto::mem::STag(w.sink.0 ^ 0x100);
        w.post_write(&mut out);
        let mut ev_a = Vec::new();
        let mut ev_b = Vec::new();
        for _ in 0..50 {
            w.step(true, &mut out);
            ev_a.extend(events(&mut w.a));
            ev_b.extend(events(&mut w.b));
        }
        assert!(
            matches!(
                w.b.disconnect_cause(),
                Some(DisconnectCause::TerminateSent(_))
            ),
            "B: {:?}",
            w.b.disconnect_cause()
        );
        assert!(
            matches!(
                w.a.disconnect_cause(),
                Some(DisconnectCause::TerminateReceived(_))
            ),
            "A: {:?}",
            w.a.disconnect_cause()
        );
        assert_eq!((w.a.state(), w.b.state()), (State::Closed, State::Closed));
        assert_eq!(ev_a, [CmEvent::Disconnected]);
        assert_eq!(ev_b, [CmEvent::Disconnected]);
        // Gracefully: FINs both ways, no reset.
        assert_eq!((w.a.tcp.error(), w.b.tcp.error()), (None, None));
        // B's only payload after the bad Write is its Terminate (an
        // untagged FPDU to queue 2, RDMAP opcode 0x7: RFC 5040 §4.8),
        // and its FIN comes with it or after it, never before.
        let fin = |f: &[u8]| f[13] & 0x01 != 0;
        let data: Vec<usize> = (0..w.from_b.len())
            .filter(|&i| payload_len(&w.from_b[i]) > 0)
            .collect();
        assert_eq!(data.len(), 1, "one segment of data from B: {data:?}");
        let t = &w.from_b[data[0]];
        let fpdu = &t[t.len() - payload_len(t)..];
        // MPA length (2), DDP control, RDMAP control, 4 reserved, QN.
        let qn = u32::from_be_bytes(fpdu[8..12].try_into().unwrap());
        assert_eq!(
            (fpdu[2] & 0x80, fpdu[3] & 0x0f, qn),
            (0, 0x7, 2),
            "untagged, Terminate, QN 2"
        );
        let first_fin = w
            .from_b
            .iter()
            .position(|f| fin(f))
            .expect("B sent its FIN");
        assert!(
            first_fin >= data[0],
            "FIN at {first_fin}, Terminate at {}",
            data[0]
        );
    }

    /// One-copy transmit: a 64 KiB Write goes out as descriptors of A's
    /// region (TCP's send buffer holds none of its octets) and completes
    /// once TCP has it acknowledged, not when it is handed over.
    #[test]
    fn a_large_write_completes_on_its_ack_not_on_hand_off() {
        let mut w = wired();
        let mut out = Vec::new();
        w.post_write(&mut out);
        // Handed to TCP and sent, but nothing reaches B: no ACK.
        w.step(false, &mut out);
        assert!(w.a.tcp.unacked() > 0, "the Write went out");
        assert!(w.a.unacked_records() > 0);
        assert_eq!(write_status(&out), None, "completed before its ACK");
        // Retransmitted from A's region (RTO 50 ms) and acknowledged.
        for _ in 0..200 {
            w.step(true, &mut out);
            if write_status(&out).is_some() {
                break;
            }
        }
        assert_eq!(write_status(&out), Some(WcStatus::Success));
        assert_eq!(w.a.unacked_records(), 0);
        let st = w.a.tcp.stats();
        assert!(
            st.rto_retransmits + st.fast_retransmits + st.tlp_probes > 0,
            "resent from A's region: {st:?}"
        );
        assert_eq!(
            w.mem_b.snapshot(w.sink),
            w.mem_a.snapshot(w.src),
            "B's sink holds A's region"
        );
    }

    /// A region deregistered while TCP still needs its octets (the
    /// application broke the contract: its Write had not completed): the
    /// retransmission cannot be written, so the connection is reset and
    /// the Write completes flushed; nothing is sent from freed memory.
    #[test]
    fn a_source_gone_before_its_retransmission_resets_the_connection() {
        let mut w = wired();
        let mut out = Vec::new();
        w.post_write(&mut out);
        w.step(false, &mut out);
        assert!(w.a.tcp.unacked() > 0);
        w.mem_a.deregister(w.src).unwrap();
        for _ in 0..200 {
            w.step(true, &mut out);
            if w.a.tcp.state() == TcpState::Closed {
                break;
            }
        }
        assert_eq!(w.a.tx_source_lost, 1);
        assert_eq!(w.a.tcp.state(), TcpState::Closed, "reset");
        assert_eq!(w.a.state(), State::Closed);
        assert_eq!(write_status(&out), Some(WcStatus::Flushed));
        assert_eq!(w.a.unacked_records(), 0);
        assert_eq!(
            w.mem_b.snapshot(w.sink),
            Some(vec![0; BIG]),
            "nothing placed"
        );
    }

    /// After a segment, `idle_after_input` says whether a poll now could
    /// do anything: a Write placed leaves the target idle until its
    /// delayed ACK's deadline (and a poll then sends nothing), while a
    /// Send (its receive completes), queued data of our own and a
    /// duplicate segment (an ACK owed at once) do not.
    #[test]
    fn a_placed_write_leaves_the_target_idle_until_its_ack_deadline() {
        // ACKs wait one nanosecond of the loop's clock, as every `iwarp`
        // context's (its `ACK_ROUND`: the next round).
        let cfg = Config {
            delayed_ack: Some(1),
            ..Config::default()
        };
        let (mut a, mut b, mut mem) =
            fresh_pair_tcp(cfg, MpaConfig::default(), MpaConfig::default(), false);
        let mut now = to_operation(&mut a, &mut b, &mut mem);
        let pd = a.params.pd;
        let src = mem
            .register(pd, vec![5; 64], Access::LOCAL_READ, 0)
            .unwrap();
        let dst = mem
            .register(
                pd,
                vec![0; 64],
                Access::LOCAL_WRITE | Access::REMOTE_WRITE,
                0,
            )
            .unwrap();
        let write = |wr_id| {
            HostCommand::PostSend(WorkRequest::Write {
                wr_id,
                signaled: false,
                local: Sge {
                    stag: src,
                    to: 0,
                    len: 64,
                }
                .into(),
                remote_stag: dst,
                remote_to: 0,
            })
        };
        let mut outs = Vec::new();
        // One Write: placed at B, nothing for B to hand up or send now.
        a.post(write(1), now, &mem, &mut |o| outs.push(o));
        let fa = take(&mut a, now, &mem, IP_A, IP_B);
        assert_eq!(fa.len(), 1);
        assert!(
            b.idle_after_input(now).is_some(),
            "idle before the segment too"
        );
        give(&mut b, &fa[0], now, &mut mem, IP_A, IP_B);
        assert_eq!(mem.snapshot(dst), Some(vec![5; 64]));
        let ack_at = b
            .idle_after_input(now)
            .expect("idle after a Write placed")
            .expect("the delayed ACK's deadline");
        assert!(ack_at > now);
        assert!(
            take(&mut b, now, &mem, IP_B, IP_A).is_empty(),
            "a poll now sends nothing"
        );
        // At the deadline it is not idle, and the ACK goes.
        assert!(b.idle_after_input(ack_at).is_none());
        assert_eq!(take(&mut b, ack_at, &mem, IP_B, IP_A).len(), 1);
        now = ack_at + 1;
        // A segment again (as if our ACK were lost): an ACK owed at once.
        a.post(write(2), now, &mem, &mut |o| outs.push(o));
        let fa = take(&mut a, now, &mem, IP_A, IP_B);
        assert_eq!(fa.len(), 1);
        give(&mut b, &fa[0], now, &mut mem, IP_A, IP_B);
        assert!(b.idle_after_input(now).is_some());
        give(&mut b, &fa[0], now, &mut mem, IP_A, IP_B);
        assert!(b.idle_after_input(now).is_none(), "an ACK owed at once");
        assert_eq!(take(&mut b, now, &mem, IP_B, IP_A).len(), 1);
        assert!(b.idle_after_input(now).is_some());
        // B's own data queued: not idle until it is sent.
        b.post(write(4), now, &mem, &mut |o| outs.push(o));
        assert!(b.idle_after_input(now).is_none());
        let fb = take(&mut b, now, &mem, IP_B, IP_A);
        assert_eq!(fb.len(), 1);
        give(&mut a, &fb[0], now, &mut mem, IP_B, IP_A);
        // A Send: its receive completes at B, to be handed up.
        let inbox = mem
            .register(pd, vec![0; 64], Access::LOCAL_WRITE, 0)
            .unwrap();
        let recv = Sge {
            stag: inbox,
            to: 0,
            len: 64,
        };
        b.post(HostCommand::PostRecv(7, recv.into()), now, &mem, &mut |o| {
            outs.push(o)
        });
        let send = WorkRequest::Send {
            wr_id: 8,
            signaled: false,
            local: Sge {
                stag: src,
                to: 0,
                len: 8,
            }
            .into(),
            solicited: false,
            invalidate: None,
        };
        a.post(HostCommand::PostSend(send), now, &mem, &mut |o| {
            outs.push(o)
        });
        now += 1;
        let fa = take(&mut a, now, &mem, IP_A, IP_B);
        assert_eq!(fa.len(), 1);
        give(&mut b, &fa[0], now, &mut mem, IP_A, IP_B);
        assert!(
            b.idle_after_input(now).is_none(),
            "a receive completion to hand up"
        );
        assert!(
            outs.iter()
                .all(|o| !matches!(o, HostOutput::Refused { .. })),
            "{outs:?}"
        );
    }
}
