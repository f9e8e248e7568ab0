//! An iWARP connection over a tcp-lite TCP connection: the receive side hands
//! each in-order TCP payload slice straight to the MPA deframer (and so to DDP
//! placement) without a stream buffer; the send side moves whole FPDUs into
//! TCP's send buffer, never more than it has room for.

use std::collections::VecDeque;

use iwarp_control::{MpaConfig, Negotiated, PeerRequest, SetupError};
use iwarp_proto::mem::MemoryTable;
use iwarp_proto::mpa::TxBuf;
use iwarp_proto::qp::{PostError, QpState};
use iwarp_proto::wire::TermCode;
use tcp_lite::tcp::{Connection as Tcp, RecordRoom, State as TcpState};
use tcp_lite::wire::TcpRepr;

use crate::{Connection, StreamParams};

/// Which side opens MPA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the MPA Request.
    Initiator,
    /// Answers it.
    Responder,
}

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

/// How we are closing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closing {
    /// Let outstanding work finish, then close TCP.
    Graceful,
    /// Terminate, then RST once it is out (or at `deadline`).
    Abort { deadline: u64 },
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

/// iWARP over tcp-lite.
#[derive(Debug)]
pub struct IwarpOverTcp {
    /// The TCP connection.
    pub tcp: Tcp,
    /// The iWARP connection, created once TCP is established.
    pub iwarp: Option<Connection>,
    role: Role,
    mpa: MpaConfig,
    params: StreamParams,
    /// Work posted before the MPA exchange finished waits here.
    pub(crate) pending: VecDeque<HostCommand>,
    manual: bool,
    /// The setup timer: whether it runs for our application's decision
    /// (else for the peer's Request or Reply), and when it fires.
    setup_deadline: Option<(bool, u64)>,
    /// When the hold on FPDUs after the Reply ends.
    hold_deadline: Option<u64>,
    closing: Option<Closing>,
    /// While a graceful close waits for the peer's answers to our Reads:
    /// the FPDUs received when the wait (or the last progress) began, and
    /// when the close gives up and aborts (`MpaConfig::close_timeout`
    /// later).
    close_deadline: Option<(u64, u64)>,
    /// When FIN-WAIT-2 gives up on the peer's FIN and resets.
    fin_wait2_deadline: Option<u64>,
    llp_done: bool,
    reported_request: bool,
    reported_established: bool,
    reported_failure: bool,
    events: VecDeque<CmEvent>,
    srq: Option<iwarp_proto::qp::Srq>,
    /// Closes that ran out of `MpaConfig::close_timeout` and reset the
    /// connection: waiting for Read responses, or in FIN-WAIT-2 for the
    /// peer's FIN (0 or 1).
    pub close_timeouts: u64,
}

impl IwarpOverTcp {
    /// Wrap a TCP connection (opening or accepted).
    pub fn new(tcp: Tcp, role: Role, mpa: MpaConfig, params: StreamParams) -> Self {
        IwarpOverTcp {
            tcp,
            iwarp: None,
            role,
            mpa,
            params,
            pending: VecDeque::new(),
            manual: false,
            setup_deadline: None,
            hold_deadline: None,
            closing: None,
            close_deadline: None,
            fin_wait2_deadline: None,
            llp_done: false,
            reported_request: false,
            reported_established: false,
            reported_failure: false,
            events: VecDeque::new(),
            srq: None,
            close_timeouts: 0,
        }
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
        if self.closing.is_none() {
            self.closing = Some(Closing::Graceful);
        }
    }

    /// Abortive disconnect: a Terminate (RDMAP local catastrophic error,
    /// RFC 5040 §7.1 — the application gave up on the stream), then RST;
    /// posted work completes as flushed.
    pub fn abort(&mut self, now: u64) {
        if matches!(self.closing, Some(Closing::Abort { .. })) {
            return;
        }
        self.closing = Some(Closing::Abort {
            deadline: now.saturating_add(100_000_000),
        });
        if let Some(qp) = self.iwarp.as_mut().and_then(|c| c.qp()) {
            if qp.state() == QpState::Rts {
                qp.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
            }
        }
    }

    /// Next connection-manager event.
    pub fn poll_cm_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    fn ensure_iwarp(&mut self) {
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
        self.iwarp = match self.role {
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
            let mut sends = VecDeque::new();
            for cmd in self.pending.drain(..) {
                match cmd {
                    HostCommand::PostRecv(id, sgl) => c.pre_post_recv(id, sgl),
                    other => sends.push_back(other),
                }
            }
            self.pending = sends;
        }
    }

    /// A received TCP segment for this connection.
    pub fn handle_segment(&mut self, seg: &TcpRepr<'_>, now: u64, mem: &mut MemoryTable) {
        self.ensure_iwarp();
        let IwarpOverTcp { tcp, iwarp, .. } = self;
        match iwarp {
            Some(c) => tcp.handle_segment(seg, now, &mut |d| c.receive(d, mem)),
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

    /// Stream octets that arrived before this connection existed (with the
    /// handshake's last ACK, taken by a listener).
    pub fn receive_early(&mut self, data: &[u8], mem: &mut MemoryTable) {
        self.ensure_iwarp();
        if let Some(c) = &mut self.iwarp {
            c.receive(data, mem);
        }
    }

    /// Post `cmd` now if the queue pair is in full operation (refusals go to
    /// `out`), else hold it until it is.
    pub fn post(&mut self, cmd: HostCommand, mem: &MemoryTable, out: &mut dyn FnMut(HostOutput)) {
        if self.closing.is_some() || self.llp_done {
            out(HostOutput::Refused(
                cmd.wr_id(),
                PostError::NotReady(QpState::Error),
            ));
            return;
        }
        match (self.iwarp.as_mut(), cmd) {
            (Some(c), cmd) if c.qp_ref().is_some() && self.pending.is_empty() => {
                if let Some(qp) = c.qp() {
                    if let Err(e) = cmd.post_to(qp, mem) {
                        out(HostOutput::Refused(cmd.wr_id(), e));
                    }
                }
            }
            // Before full operation a receive goes to the connection, which
            // posts it to the queue pair before any octet is processed.
            (Some(c), HostCommand::PostRecv(id, sgl)) if c.qp_ref().is_none() => {
                c.pre_post_recv(id, sgl)
            }
            (_, cmd) => self.pending.push_back(cmd),
        }
    }

    /// Post work that waited for full operation, and hand completions,
    /// events and refusals to `out`. Returns true if it did anything.
    pub fn drain(&mut self, mem: &MemoryTable, out: &mut dyn FnMut(HostOutput)) -> bool {
        let mut busy = false;
        if self.closing.is_some() || self.llp_done {
            // After a disconnect request nothing new goes on the wire.
            while let Some(cmd) = self.pending.pop_front() {
                out(HostOutput::Refused(
                    cmd.wr_id(),
                    PostError::NotReady(QpState::Error),
                ));
                busy = true;
            }
            if let Some(c) = self.iwarp.as_mut().filter(|c| c.qp_ref().is_none()) {
                for (id, _) in c.take_pre_posted() {
                    out(HostOutput::Refused(id, PostError::NotReady(QpState::Error)));
                    busy = true;
                }
            }
        }
        if let Some(c) = &mut self.iwarp {
            for (id, e) in c.take_refused() {
                out(HostOutput::Refused(id, e));
                busy = true;
            }
        }
        if let Some(qp) = self.iwarp.as_mut().and_then(|c| c.qp()) {
            while let Some(cmd) = self.pending.pop_front() {
                if let Err(e) = cmd.post_to(qp, mem) {
                    out(HostOutput::Refused(cmd.wr_id(), e));
                }
                busy = true;
            }
            while let Some(c) = qp.poll_completion() {
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
        emit: &mut dyn FnMut(&TcpRepr<'_>),
    ) -> usize {
        self.tcp.handle_timeout(now);
        self.ensure_iwarp();
        self.setup_progress(now);
        if let Some(c) = &mut self.iwarp {
            if c.tx_hold() > 0 {
                let end = *self
                    .hold_deadline
                    .get_or_insert(now.saturating_add(c.tx_hold()));
                if now >= end {
                    c.release_tx_hold();
                }
            }
            // One FPDU (or the MPA Request/Reply) per record, so TCP puts
            // whole FPDUs in segments (RFC 5044 §8) and a receiver, or
            // Wireshark, finds an FPDU header at the start of each segment.
            // Each FPDU is framed (with its CRC) straight into TCP's send
            // buffer: the one copy out of registered memory before the
            // frame.
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
        self.teardown_progress(now);
        self.tcp.poll_transmit(now, max, emit)
    }

    /// Setup timer and setup events.
    fn setup_progress(&mut self, now: u64) {
        let Some(c) = &mut self.iwarp else {
            return;
        };
        // The timer restarts when the Request is in and the wait becomes
        // one for our application (MpaConfig::decision_timeout): an
        // undecided Request is rejected on the wire when it runs out.
        let deciding = c.pending_request().is_some();
        match c.setup_timeout() {
            Some(t) => {
                let (_, deadline) = match self.setup_deadline {
                    Some((d, at)) if d == deciding => (d, at),
                    _ => *self
                        .setup_deadline
                        .insert((deciding, now.saturating_add(t))),
                };
                if now >= deadline {
                    c.setup_timed_out();
                }
            }
            None => self.setup_deadline = None,
        }
        if !self.reported_request {
            if let Some(r) = c.pending_request() {
                self.reported_request = true;
                self.events.push_back(CmEvent::ConnectRequest(r.clone()));
            }
        }
        if !self.reported_established {
            if let Some(n) = c.negotiated() {
                self.reported_established = true;
                self.events.push_back(CmEvent::Established(n.clone()));
            }
        }
        if !self.reported_failure {
            if let Some(e) = c.setup_error() {
                self.reported_failure = true;
                self.events.push_back(CmEvent::SetupFailed(e.clone()));
                // The rejecting Reply (if any) goes out before the FIN.
                self.closing.get_or_insert(Closing::Graceful);
            }
        }
    }

    /// Close and abort sequencing, and the flush once TCP is done.
    fn teardown_progress(&mut self, now: u64) {
        let state = self.tcp.state();
        // The peer closed (FIN) or the stream died: close our side too.
        if state == TcpState::CloseWait {
            self.closing.get_or_insert(Closing::Graceful);
        }
        match self.closing {
            Some(Closing::Graceful) => {
                // A graceful close waits for the responses to our RDMA
                // Reads, but not once the peer's FIN arrived: every octet
                // it sent is before the FIN (RFC 9293 §3.10.7.4), so an
                // answer still missing never comes, and waiting would hold
                // the connection forever (the Read completes flushed).
                let peer_done = state == TcpState::CloseWait;
                let quiet = match &self.iwarp {
                    None => true,
                    Some(c) => {
                        c.tx_idle()
                            && (peer_done || c.qp_ref().is_none_or(|q| q.outstanding_reads() == 0))
                            || c.qp_ref().is_some_and(|q| q.state() == QpState::Error)
                            || c.setup_error().is_some()
                    }
                };
                let open = matches!(
                    state,
                    TcpState::SynReceived | TcpState::Established | TcpState::CloseWait
                );
                // What the close still waits for is only the peer's
                // answers to our Reads (our own FPDUs drain under TCP's
                // timers): FPDUs received so far, to see progress.
                let reads_wait = match &self.iwarp {
                    Some(c) if !quiet && c.tx_idle() => c.qp_ref().map(|q| q.stats().fpdus_rx),
                    _ => None,
                };
                if quiet && open {
                    self.tcp.close();
                } else if let (true, Some(seen), t @ 1..) =
                    (open, reads_wait, self.mpa.close_timeout)
                {
                    // A peer that neither answers our Reads nor sends its
                    // FIN would hold the close for ever: once it has sent
                    // no FPDU for MpaConfig::close_timeout the close
                    // becomes abortive (Terminate, RST) and the Reads
                    // complete flushed.
                    let end = match self.close_deadline {
                        Some((n, end)) if n == seen => end,
                        _ => self.close_deadline.insert((seen, now.saturating_add(t))).1,
                    };
                    if now >= end {
                        self.close_timeouts += 1;
                        self.abort(now);
                        return self.teardown_progress(now);
                    }
                } else {
                    self.close_deadline = None;
                }
            }
            Some(Closing::Abort { deadline }) => {
                let sent =
                    self.iwarp.as_ref().is_none_or(|c| c.tx_idle()) && self.tcp.unacked() == 0;
                if (sent || now >= deadline) && state != TcpState::Closed {
                    self.tcp.abort();
                }
            }
            None => {}
        }
        let llp_over = matches!(
            self.tcp.state(),
            TcpState::LastAck | TcpState::Closing | TcpState::TimeWait | TcpState::Closed
        ) || (self.closing.is_some() && self.tcp.state() == TcpState::FinWait2);
        // RFC 9293 puts no limit on FIN-WAIT-2: a peer that acknowledges
        // our FIN but never sends its own would hold the connection for
        // ever (Linux bounds it with tcp_fin_timeout). The iWARP stream is
        // over once our FIN is out, so after close_timeout more, RST.
        if self.llp_done && self.tcp.state() == TcpState::FinWait2 && self.mpa.close_timeout > 0 {
            let end = *self
                .fin_wait2_deadline
                .get_or_insert(now.saturating_add(self.mpa.close_timeout));
            if now >= end {
                self.close_timeouts += 1;
                self.tcp.abort();
            }
        }
        if llp_over && !self.llp_done {
            self.llp_done = true;
            if let Some(qp) = self.iwarp.as_mut().and_then(|c| c.qp()) {
                qp.llp_lost();
            }
            self.events.push_back(CmEvent::Disconnected);
        }
    }

    /// Next timer deadline: TCP's, the MPA setup timer's, the close
    /// timers' (Reads unanswered, FIN-WAIT-2, an abort's wait for its
    /// Terminate) and the first-FPDU hold's. The host polls the connection
    /// when it passes (a deadline first set inside [`poll`](Self::poll) is
    /// in this once that poll returns).
    pub fn poll_timeout(&self) -> Option<u64> {
        let setup = self.setup_deadline.map(|(_, at)| at);
        let close = self
            .close_deadline
            .filter(|_| self.closing == Some(Closing::Graceful))
            .map(|(_, at)| at);
        let fin_wait2 = self
            .fin_wait2_deadline
            .filter(|_| self.tcp.state() == TcpState::FinWait2);
        // The first-FPDU hold, while FPDUs are held.
        let hold = self
            .hold_deadline
            .filter(|_| self.iwarp.as_ref().is_some_and(|c| c.tx_hold() > 0));
        let abort = match self.closing {
            Some(Closing::Abort { deadline }) if self.tcp.state() != TcpState::Closed => {
                Some(deadline)
            }
            _ => None,
        };
        [
            self.tcp.poll_timeout(),
            setup,
            close,
            fin_wait2,
            hold,
            abort,
        ]
        .into_iter()
        .flatten()
        .min()
    }
}

/// Work an application thread hands to a [`TcpHost`] running in a poll loop.
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

    fn post_to(&self, qp: &mut iwarp_proto::qp::Qp, mem: &MemoryTable) -> Result<(), PostError> {
        match *self {
            HostCommand::PostSend(wr) => qp.post_send(mem, wr),
            HostCommand::PostRecv(id, sge) => qp.post_recv(mem, id, sge),
        }
    }
}

/// What a [`TcpHost`] hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostOutput {
    /// A work completion.
    Completion(iwarp_proto::qp::Completion),
    /// A stream event.
    Event(iwarp_proto::qp::QpEvent),
    /// A post the QP refused: the work request's id and why.
    Refused(u64, iwarp_proto::qp::PostError),
}

/// One host for a poll loop: an iWARP-over-TCP stack and its memory. Frames
/// are TCP segments with checksums over a fixed pseudo-header (the in-memory
/// link has no Ethernet/IPv4 layer yet).
#[derive(Debug)]
pub struct TcpHost {
    /// The stack.
    pub stack: IwarpOverTcp,
    /// Registered memory.
    pub mem: MemoryTable,
    local: tcp_lite::wire::Ipv4Address,
    remote: tcp_lite::wire::Ipv4Address,
}

impl TcpHost {
    /// A host with its stack, memory, and the addresses used for checksums.
    pub fn new(stack: IwarpOverTcp, mem: MemoryTable, local: [u8; 4], remote: [u8; 4]) -> Self {
        TcpHost {
            stack,
            mem,
            local: tcp_lite::wire::Ipv4Address(local),
            remote: tcp_lite::wire::Ipv4Address(remote),
        }
    }
}

impl crate::runtime::Engine for TcpHost {
    type Command = HostCommand;
    type Output = HostOutput;

    fn handle_frame(&mut self, frame: &[u8], now: u64) {
        use tcp_lite::wire::TcpPacket;
        let Ok(p) = TcpPacket::new_checked(frame) else {
            return;
        };
        let Ok(r) = TcpRepr::parse(&p, &self.remote, &self.local) else {
            return;
        };
        self.stack.handle_segment(&r, now, &mut self.mem);
    }

    fn handle_command(&mut self, cmd: HostCommand, _now: u64) {
        // Commands that arrive before the MPA exchange finished wait there.
        self.stack.pending.push_back(cmd);
    }

    fn poll(
        &mut self,
        now: u64,
        tx: &mut dyn FnMut(&[&[u8]]),
        out: &mut dyn FnMut(HostOutput),
    ) -> bool {
        let mut busy = false;
        let (local, remote) = (self.local, self.remote);
        let mut buf = Vec::new();
        let n = self.stack.poll(now, &self.mem, 64, &mut |r| {
            buf.clear();
            buf.resize(r.buffer_len(), 0);
            let mut p = tcp_lite::wire::TcpPacket::new_unchecked(&mut buf[..]);
            if r.emit(&mut p, &local, &remote).is_ok() {
                tx(&[&buf]);
            }
        });
        busy |= n > 0;
        busy |= self.stack.drain(&self.mem, out);
        busy
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
        from.poll(now, mem, 64, &mut |r| {
            let mut b = vec![0; r.buffer_len()];
            r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &src, &dst)
                .unwrap();
            out.push(b);
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
                b.tcp.poll_transmit(now, 4, &mut |r| {
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
            a.drain(&mem_a, &mut |o| a_out.push(o));
            b.drain(&mem_b, &mut |_| {});
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
                a.post(HostCommand::PostSend(wr), &mem_a, &mut |o| a_out.push(o));
                posted_at = now;
                if !peer_closes {
                    a.disconnect();
                }
            } else if peer_closes && posted && reads(&a) == 1 && b.closing.is_none() {
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
        let mut tcp_a = Tcp::connect(cfg, 40000, 7174, 1234);
        let mut syn = Vec::new();
        tcp_a.poll_transmit(0, 1, &mut |r| {
            syn = vec![0; r.buffer_len()];
            r.emit(&mut TcpPacket::new_unchecked(&mut syn[..]), &IP_A, &IP_B)
                .unwrap();
        });
        let syn_r =
            TcpRepr::parse(&TcpPacket::new_checked(&syn[..]).unwrap(), &IP_A, &IP_B).unwrap();
        let mut b = Tcp::accept(cfg, &syn_r, 99);
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
}
