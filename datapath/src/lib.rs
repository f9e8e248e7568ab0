//! The per-connection iWARP engine of the fast path.
//!
//! A [`Connection`] sits on one reliable byte stream (tcp-lite today in the
//! simulator, AF_XDP/DPDK-fed tcp-lite later): it runs the MPA Request/Reply
//! exchange through `iwarp-control`, then hands every received octet straight
//! to the queue pair's deframer, which places payload into registered memory
//! as it arrives. [`over_tcp`] runs it over tcp-lite's TCP; [`runtime`] holds
//! the core-pinned poll loops that drive engines from frame devices, with
//! lock-free queues to application threads; [`link`] holds the links tests
//! run them over (in memory, with seeded faults, or in virtual time).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod budget;
mod conn_error;
pub mod early;
pub mod endpoint;
pub mod latency;
pub mod link;
pub mod over_sctp;
pub mod over_tcp;
pub mod ready;
pub mod runtime;
pub mod stack;
pub mod stages;
mod stats_fmt;
mod timers;

pub use conn_error::ConnError;

/// How long an abort waits for its Terminate to reach the peer before the
/// transport's own reset (ns), over either transport: over TCP until the
/// Terminate is acknowledged, then RST; over SCTP until it has left, then
/// ABORT (RFC 5040 §5.4: after sending a Terminate the local peer MUST NOT
/// send more Messages on the stream, so it is the last one the peer gets).
pub const ABORT_GRACE_NS: u64 = 100_000_000;

use early::EarlyData;
use iwarp_control::setup::{Answer, Exchange, Incoming, Progress};
use iwarp_control::{MpaConfig, Negotiated, PeerRequest, SetupError, SetupFailure};
use iwarp_proto::mem::{MemoryTable, PdId};
use iwarp_proto::mpa::{mulpdu, put_all, TxBuf};
use iwarp_proto::qp::{Qp, QpConfig, QpState};
use iwarp_proto::txq::{TxQueue, TxRecord};

/// Per-stream parameters that do not come from the MPA exchange.
#[derive(Debug, Clone, Copy)]
pub struct StreamParams {
    /// Protection domain of the queue pair.
    pub pd: PdId,
    /// Effective MSS of the TCP connection (sizes FPDUs).
    pub emss: u16,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

#[derive(Debug)]
enum Phase {
    /// The MPA Request/Reply exchange (`iwarp_control::setup`, the one
    /// exchange both lower layers step): the initiator awaits the Reply,
    /// the responder the Request, or the application decides on it.
    Setup(Exchange),
    /// Full operation, with what the exchange settled.
    Rdma(Box<Qp>, Negotiated),
    /// Setup failed, and why.
    Failed(SetupError),
}

/// The setup error for a call or event that does not fit the phase (no request pending, an unexpected session message).
fn no_request() -> SetupError {
    SetupError {
        code: iwarp_proto::wire::TermCode::MPA_BAD_REQ_REP,
        reason: SetupFailure::WrongKind,
        peer_private_data: Vec::new(),
    }
}

/// Connection phase as seen from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConnState {
    /// MPA exchange in progress.
    Connecting,
    /// Full operation (or terminated: see the QP's state).
    Rdma(QpState),
    /// Setup failed; close the transport.
    Failed,
}

/// One iWARP connection over a byte stream.
#[derive(Debug)]
pub struct Connection {
    phase: Phase,
    params: StreamParams,
    out: Vec<u8>,
    /// Hold FPDUs until the peer's first FPDU arrived (RFC 6581 responder waits
    /// for the RTR; RFC 5044 Rev 1: the initiator sends first).
    hold_until_rx: bool,
    /// Let the application accept or reject the Request.
    manual: bool,
    /// Octets that followed the Request while the application decides
    /// (at most `MpaConfig::max_early_data`).
    early: EarlyData,
    timeout: u64,
    /// How long the application may take to answer a Request.
    decision_timeout: u64,
    srq: Option<iwarp_proto::qp::Srq>,
    /// Initiator: how long FPDUs wait after the Reply (ns); 0 once released.
    tx_hold: u64,
    /// The configured hold, armed when full operation starts.
    first_fpdu_delay: u64,
    /// Receives posted before full operation: posted to the new queue pair
    /// before it processes a single received octet (an initiator's peer
    /// may send right behind its Reply, in the same segment).
    pre_posted: Vec<(u64, iwarp_proto::qp::SgList)>,
    /// Pre-posted receives the new queue pair refused.
    refused: Vec<(u64, iwarp_proto::qp::PostError)>,
}

impl Connection {
    /// Active side: the Request is queued for transmission at once.
    pub fn initiator(cfg: MpaConfig, params: StreamParams) -> Result<Self, SetupError> {
        let timeout = cfg.reply_timeout;
        let first_fpdu_delay = cfg.first_fpdu_delay;
        let (ex, req) = Exchange::mpa_initiator(cfg)?;
        Ok(Connection {
            phase: Phase::Setup(ex),
            params,
            out: req,
            hold_until_rx: false,
            manual: false,
            early: EarlyData::new(0),
            timeout,
            decision_timeout: 0,
            srq: None,
            tx_hold: 0,
            first_fpdu_delay,
            pre_posted: Vec::new(),
            refused: Vec::new(),
        })
    }

    /// Passive side: waits for the Request and accepts it with `cfg`.
    pub fn responder(cfg: MpaConfig, params: StreamParams) -> Self {
        let timeout = cfg.request_timeout;
        let (early, decision_timeout) = (EarlyData::new(cfg.max_early_data), cfg.decision_timeout);
        Connection {
            phase: Phase::Setup(Exchange::mpa_responder(cfg)),
            params,
            out: Vec::new(),
            hold_until_rx: false,
            manual: false,
            early,
            timeout,
            decision_timeout,
            srq: None,
            tx_hold: 0,
            first_fpdu_delay: 0,
            pre_posted: Vec::new(),
            refused: Vec::new(),
        }
    }

    /// Post a receive before full operation (it goes to the queue pair as it
    /// is created). In full operation, post to [`qp`](Self::qp) instead.
    pub fn pre_post_recv(&mut self, wr_id: u64, sgl: iwarp_proto::qp::SgList) {
        self.pre_posted.push((wr_id, sgl));
    }

    /// Receives pre-posted and not yet on a queue pair.
    pub fn pre_posted(&self) -> usize {
        self.pre_posted.len()
    }

    /// Pre-posted receives that never reached a queue pair (the connection
    /// is going away before full operation).
    pub fn take_pre_posted(&mut self) -> Vec<(u64, iwarp_proto::qp::SgList)> {
        std::mem::take(&mut self.pre_posted)
    }

    /// In full operation with nothing for its host to take or send: no
    /// refused receive, no early data, and a queue pair with no
    /// completion or event waiting and nothing queued to transmit.
    pub fn idle(&self) -> bool {
        self.refused.is_empty()
            && self.early_len() == 0
            && self
                .qp_ref()
                .is_some_and(|q| !q.has_output() && q.tx_idle())
    }

    /// Pre-posted receives that the queue pair refused, with why.
    pub fn take_refused(&mut self) -> Vec<(u64, iwarp_proto::qp::PostError)> {
        std::mem::take(&mut self.refused)
    }

    /// Take receive buffers from `srq` instead of a receive queue of its own
    /// (call before full operation).
    pub fn set_srq(&mut self, srq: iwarp_proto::qp::Srq) {
        self.srq = Some(srq);
    }

    /// Passive side that stops at the Request:
    /// [`pending_request`](Self::pending_request) shows it, then [`accept`](Self::accept) or
    /// [`reject`](Self::reject) answers it.
    pub fn responder_manual(cfg: MpaConfig, params: StreamParams) -> Self {
        Connection {
            manual: true,
            ..Connection::responder(cfg, params)
        }
    }

    /// The peer's Request, while the application has not answered it.
    pub fn pending_request(&self) -> Option<&PeerRequest> {
        match &self.phase {
            Phase::Setup(ex) => ex.pending_request(),
            _ => None,
        }
    }

    /// The protection domain of the queue pair this connection will make
    /// (no effect once it exists: a PD is fixed for a QP's life).
    pub fn set_pd(&mut self, pd: PdId) {
        if self.qp_ref().is_none() {
            self.params.pd = pd;
        }
    }

    /// Accept the pending Request with our private data and IRD/ORD.
    /// Octets that followed the Request are processed at once. Settings
    /// that cannot be sent (too much private data) are refused and leave
    /// the Request held.
    pub fn accept(
        &mut self,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
        mem: &mut MemoryTable,
    ) -> Result<(), SetupError> {
        let Phase::Setup(ex) = &mut self.phase else {
            return Err(no_request());
        };
        if ex.pending_request().is_none() {
            return Err(no_request());
        }
        // An error here answered nothing (settings that cannot be sent):
        // the Request stays held for another answer, as over SCTP.
        let answer = ex.accept(private_data, ird, ord)?;
        self.answered(answer, mem)?;
        for (_, octets) in self.early.take() {
            self.receive(&octets, mem);
        }
        Ok(())
    }

    /// The responder's answer to the Request, by the application's
    /// Accept or the listener's own settings: the Reply goes out first;
    /// then full operation, or the failure a rejecting Reply reports.
    fn answered(&mut self, answer: Answer, mem: &mut MemoryTable) -> Result<(), SetupError> {
        match answer {
            Answer::Accepted {
                negotiated,
                message,
            } => {
                self.out.extend_from_slice(&message);
                self.enter_rdma(negotiated, false, mem);
                Ok(())
            }
            Answer::Rejected { error, message } => {
                self.out.extend_from_slice(&message);
                self.phase = Phase::Failed(error.clone());
                Err(error)
            }
        }
    }

    /// Reject the pending Request; the rejecting Reply carries
    /// `private_data` (at most 512 octets). Close the transport once it is sent.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<(), SetupError> {
        let Phase::Setup(ex) = &mut self.phase else {
            return Err(no_request());
        };
        if ex.pending_request().is_none() {
            return Err(no_request());
        }
        let reply = ex.reject(private_data)?;
        self.out.extend_from_slice(&reply);
        self.phase = Phase::Failed(SetupError {
            code: iwarp_proto::wire::TermCode::MPA_BAD_REQ_REP,
            reason: SetupFailure::RejectedByUs,
            peer_private_data: Vec::new(),
        });
        Ok(())
    }

    /// How long the current setup phase may last (nanoseconds): the Reply
    /// timeout for an initiator, the Request timeout for a responder, the
    /// decision timeout ([`MpaConfig::decision_timeout`]) while our
    /// application holds a Request; `None` once there is nothing to wait
    /// for (running or failed). A caller re-arms its timer when
    /// [`pending_request`](Self::pending_request) appears.
    pub fn setup_timeout(&self) -> Option<u64> {
        match &self.phase {
            Phase::Setup(ex) if ex.pending_request().is_some() => Some(self.decision_timeout),
            Phase::Setup(_) => Some(self.timeout),
            _ => None,
        }
    }

    /// The setup timer ran out: fail the connection with `TimedOut`. A
    /// Request our application never answered is rejected on the wire (a
    /// Reply with R = 1, RFC 5044 §7.1.2), so the peer learns why.
    pub fn setup_timed_out(&mut self) {
        match &self.phase {
            Phase::Setup(ex) if ex.pending_request().is_some() => {
                self.fail_undecided(SetupFailure::TimedOut)
            }
            Phase::Setup(_) => {
                self.phase = Phase::Failed(SetupError {
                    code: iwarp_proto::wire::TermCode::MPA_BAD_REQ_REP,
                    reason: SetupFailure::TimedOut,
                    peer_private_data: Vec::new(),
                });
            }
            Phase::Rdma(..) | Phase::Failed(_) => {}
        }
    }

    /// While a Request waits for our application: queue a rejecting Reply,
    /// drop the held octets and record `why`.
    fn fail_undecided(&mut self, why: SetupFailure) {
        if let Phase::Setup(ex) = &mut self.phase {
            if ex.pending_request().is_none() {
                return;
            }
            if let Some(reply) = ex.give_up() {
                self.out.extend_from_slice(&reply);
            }
            self.early.clear();
            self.phase = Phase::Failed(SetupError {
                code: iwarp_proto::wire::TermCode::MPA_BAD_REQ_REP,
                reason: why,
                peer_private_data: Vec::new(),
            });
        }
    }

    /// Hold `data`, which followed the Request, until the application
    /// decides; past `max_early` octets reject the Request instead
    /// (RFC 5044 §7.1: the initiator sends no FPDU before the Reply).
    fn hold_early(&mut self, data: &[u8]) {
        if self.early.hold_stream(data).is_err() {
            self.fail_undecided(SetupFailure::EarlyData);
        }
    }

    /// Octets held after a Request while the application decides.
    pub fn early_len(&self) -> usize {
        self.early.octets()
    }

    /// Phase.
    pub fn state(&self) -> ConnState {
        match &self.phase {
            Phase::Setup(_) => ConnState::Connecting,
            Phase::Rdma(q, _) => ConnState::Rdma(q.state()),
            Phase::Failed(_) => ConnState::Failed,
        }
    }

    /// What the exchange settled, once in full operation.
    pub fn negotiated(&self) -> Option<&Negotiated> {
        match &self.phase {
            Phase::Rdma(_, n) => Some(n),
            _ => None,
        }
    }

    /// Why setup failed.
    pub fn setup_error(&self) -> Option<&SetupError> {
        match &self.phase {
            Phase::Failed(e) => Some(e),
            _ => None,
        }
    }

    /// The queue pair, once in full operation.
    pub fn qp(&mut self) -> Option<&mut Qp> {
        match &mut self.phase {
            Phase::Rdma(q, _) => Some(q),
            _ => None,
        }
    }

    /// The queue pair, read-only.
    pub fn qp_ref(&self) -> Option<&Qp> {
        match &self.phase {
            Phase::Rdma(q, _) => Some(q),
            _ => None,
        }
    }

    fn enter_rdma(&mut self, n: Negotiated, initiator: bool, mem: &MemoryTable) {
        let markers_tx = n.markers_tx;
        let cfg = QpConfig {
            pd: self.params.pd,
            ird: n.ird,
            ord: n.ord,
            mulpdu: mulpdu(self.params.emss, markers_tx),
            crc: n.crc,
            markers_tx,
            markers_rx: n.markers_rx,
            sq_depth: self.params.sq_depth,
            rq_depth: self.params.rq_depth,
        };
        let mut qp = match self.srq.clone() {
            Some(srq) => Qp::with_srq(cfg, srq),
            None => Qp::new(cfg),
        };
        if initiator {
            self.tx_hold = self.first_fpdu_delay;
            if let Some(kind) = n.rtr {
                // RFC 6581: the initiator sends the RTR right after the Reply.
                let _ = qp.post_rtr(kind);
            }
        } else {
            self.hold_until_rx = n.rtr.is_some() || n.rev < 2;
        }
        for (wr_id, sgl) in std::mem::take(&mut self.pre_posted) {
            if let Err(e) = qp.post_recv(mem, wr_id, sgl) {
                self.refused.push((wr_id, e));
            }
        }
        self.phase = Phase::Rdma(Box::new(qp), n);
    }

    /// Feed octets received from the transport.
    pub fn receive(&mut self, data: &[u8], mem: &mut MemoryTable) {
        let mut rest = data;
        if let Phase::Setup(ex) = &mut self.phase {
            if ex.pending_request().is_some() {
                self.hold_early(rest);
                return;
            }
            match ex.receive(Incoming::Stream(rest)) {
                Ok(Progress::Pending) => return,
                Ok(Progress::Established(n, used)) => {
                    rest = &rest[used..];
                    self.enter_rdma(n, true, mem);
                }
                Ok(Progress::Request(used)) if self.manual => {
                    self.hold_early(&rest[used..]);
                    return;
                }
                // A listener that does not ask its application accepts
                // with its own settings, as one over SCTP does.
                Ok(Progress::Request(used)) => {
                    rest = &rest[used..];
                    // (No application would answer again: an answer our
                    // own settings cannot give fails the connection.)
                    let answered = match ex.accept_own() {
                        Ok(answer) => self.answered(answer, mem),
                        Err(e) => {
                            self.phase = Phase::Failed(e.clone());
                            Err(e)
                        }
                    };
                    if answered.is_err() {
                        return;
                    }
                }
                Err(e) => {
                    self.phase = Phase::Failed(e);
                    return;
                }
            }
        }
        if let Phase::Rdma(qp, _) = &mut self.phase {
            if !rest.is_empty() {
                qp.receive(rest, mem);
                if qp.stats().fpdus_rx > 0 {
                    self.hold_until_rx = false;
                }
            }
        }
    }

    /// Append what should go on the wire next: pending setup frames (each
    /// returned alone, as a segment of its own), else FPDUs within
    /// `max_bytes` / `max_fpdus`. Returns octets appended.
    pub fn poll_transmit(
        &mut self,
        mem: &MemoryTable,
        out: &mut dyn TxBuf,
        max_bytes: usize,
        max_fpdus: usize,
    ) -> usize {
        if !self.out.is_empty() {
            let n = self.out.len().min(max_bytes);
            put_all(out, &self.out[..n]);
            self.out.drain(..n);
            return n;
        }
        if self.hold_until_rx || self.tx_hold > 0 {
            return 0;
        }
        match &mut self.phase {
            Phase::Rdma(qp, _) => qp.poll_transmit(mem, out, max_bytes, max_fpdus),
            _ => 0,
        }
    }

    /// Queue the next record on `txq` for a transport that keeps records,
    /// not octets (one-copy transmit, [`iwarp_proto::txq`]); false if there
    /// is none. The pending setup octets (MPA Request or Reply) as a record
    /// of their own, else the next FPDU
    /// within `max_bytes`, as a descriptor of registered memory where the
    /// queue pair can describe it, else framed as octets (markers, and
    /// Sends and Writes shorter than `copy_below`: see
    /// [`Qp::poll_record`](iwarp_proto::qp::Qp::poll_record)).
    pub fn poll_transmit_record(
        &mut self,
        mem: &MemoryTable,
        max_bytes: usize,
        copy_below: u64,
        txq: &mut TxQueue,
    ) -> bool {
        if !self.out.is_empty() {
            let n = self.out.len().min(max_bytes);
            if n == 0 {
                return false;
            }
            txq.push(TxRecord::Bytes(self.out.drain(..n).collect()));
            return true;
        }
        if self.hold_until_rx || self.tx_hold > 0 {
            return false;
        }
        let Phase::Rdma(qp, _) = &mut self.phase else {
            return false;
        };
        if qp.can_describe() {
            return qp.poll_record(mem, max_bytes, copy_below, txq);
        }
        let mut v = Vec::new();
        qp.poll_transmit(mem, &mut v, max_bytes, 1);
        if v.is_empty() {
            return false;
        }
        txq.push(TxRecord::Bytes(v));
        true
    }

    /// How long FPDUs are still held after the Reply (ns; 0: not held).
    /// The caller's clock runs it: call
    /// [`release_tx_hold`](Self::release_tx_hold) once that time has passed.
    pub fn tx_hold(&self) -> u64 {
        self.tx_hold
    }

    /// End the hold after the Reply.
    pub fn release_tx_hold(&mut self) {
        self.tx_hold = 0;
    }

    /// Setup octets (MPA Request/Reply) wait to be sent; the next
    /// [`poll_transmit`](Self::poll_transmit) returns them, not FPDUs.
    pub fn pending_setup(&self) -> bool {
        !self.out.is_empty()
    }

    /// Nothing waiting to be sent.
    pub fn tx_idle(&self) -> bool {
        self.out.is_empty()
            && match &self.phase {
                Phase::Rdma(q, _) => self.hold_until_rx || q.tx_idle(),
                _ => true,
            }
    }
}
