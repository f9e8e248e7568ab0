//! One RDMAP stream (a queue pair): DDP placement and RDMAP semantics over an
//! MPA byte stream, I/O-free.
//!
//! Call order, per the style of quinn-proto: feed received stream octets with
//! [`Qp::receive`]; post work with [`Qp::post_send`] / [`Qp::post_recv`]; pull
//! octets to transmit with [`Qp::poll_transmit`]; drain [`Qp::poll_completion`]
//! and [`Qp::poll_event`]. Nothing here reads a clock or does I/O.
//!
//! Where each RFC rule lives:
//! * RFC 5041 §5.2 segmentation to MULPDU: [`Qp::poll_transmit`];
//! * RFC 5041 §7.1 checks before placement and the §7.2 error numbers:
//!   `Rx::segment_begin`;
//! * RFC 5040 §5.1-§5.4 message semantics and §7.2 checks at delivery:
//!   `Rx::segment_end`;
//! * RFC 5040 §5.5 completion ordering (rules 14, 15, 19): the send queue
//!   completes strictly from its head;
//! * RFC 5040 §4.8, §7.1 Terminate contents: [`TermInfo`] builders;
//! * RFC 5040 §6.1 ORD/IRD limits: `Tx::next_job` and the QN 1 buffer check.

use std::collections::VecDeque;

use crate::mem::{Access, AccessError, MemoryTable, PdId, STag};
use crate::mpa::{Deframer, Framer, MpaError, UlpduSink};
use crate::wire::ddp::{
    DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader, UntaggedHeader, DDP_VERSION,
    RDMAP_VERSION, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::wire::rdmap::{ReadRequest, READ_REQUEST_LEN};
use crate::wire::terminate::MAX_TERMINATE_LEN;
use crate::wire::{TermCode, TerminateRepr, WireError};

/// Untagged queue numbers (RFC 5040 §4.1 figure 4).
pub mod queue {
    /// Send family.
    pub const SEND: u32 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
}

/// Parameters fixed at connection setup.
#[derive(Debug, Clone, Copy)]
pub struct QpConfig {
    /// Protection domain of this stream.
    pub pd: PdId,
    /// Inbound RDMA Read Requests we accept at once (negotiated IRD).
    pub ird: u16,
    /// Outbound RDMA Read Requests we may have outstanding (negotiated ORD).
    pub ord: u16,
    /// Largest ULPDU we send (from the EMSS, see [`crate::mpa::mulpdu`]).
    pub mulpdu: u16,
    /// CRC negotiated (both directions).
    pub crc: bool,
    /// We insert markers in what we send.
    pub markers_tx: bool,
    /// The peer inserts markers in what it sends.
    pub markers_rx: bool,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
}

impl QpConfig {
    /// Smallest MULPDU accepted: a Terminate with every optional part must fit.
    pub const MIN_MULPDU: u16 = (UNTAGGED_HEADER_LEN + MAX_TERMINATE_LEN) as u16;
}

/// A local buffer: STag (lkey), tagged offset and length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Local STag.
    pub stag: STag,
    /// Tagged offset within it.
    pub to: u64,
    /// Length.
    pub len: u32,
}

impl Sge {
    /// A zero-length buffer (never validated, RFC 5041 §5.2).
    pub const EMPTY: Sge = Sge {
        stag: STag(0),
        to: 0,
        len: 0,
    };
}

/// Work for the send queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkRequest {
    /// Send, Send with SE, Send with Invalidate, Send with SE and Invalidate.
    Send {
        /// Caller's id, returned in the completion.
        wr_id: u64,
        /// Source buffer.
        local: Sge,
        /// Solicited Event.
        solicited: bool,
        /// STag for the peer to invalidate.
        invalidate: Option<STag>,
    },
    /// RDMA Write.
    Write {
        /// Caller's id.
        wr_id: u64,
        /// Source buffer.
        local: Sge,
        /// Peer's STag.
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
    },
    /// RDMA Read: `local` is the data sink (its STag is advertised to the peer).
    Read {
        /// Caller's id.
        wr_id: u64,
        /// Sink buffer.
        local: Sge,
        /// Peer's source STag.
        remote_stag: STag,
        /// Peer's source tagged offset.
        remote_to: u64,
    },
}

impl WorkRequest {
    fn wr_id(&self) -> u64 {
        match *self {
            WorkRequest::Send { wr_id, .. }
            | WorkRequest::Write { wr_id, .. }
            | WorkRequest::Read { wr_id, .. } => wr_id,
        }
    }
    fn local(&self) -> Sge {
        match *self {
            WorkRequest::Send { local, .. }
            | WorkRequest::Write { local, .. }
            | WorkRequest::Read { local, .. } => local,
        }
    }
}

/// Kind of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcOpcode {
    /// A Send variant left.
    Send,
    /// An RDMA Write left.
    Write,
    /// An RDMA Read's response was delivered.
    Read,
    /// A Send variant was delivered into a posted receive buffer.
    Recv,
}

/// Outcome of a work request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WcStatus {
    /// Done.
    Success,
    /// The local buffer failed its checks when the message was built.
    LocalProtection(AccessError),
    /// The stream went to error before this request finished.
    Flushed,
}

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Completion {
    /// The request's id.
    pub wr_id: u64,
    /// What completed.
    pub opcode: WcOpcode,
    /// Outcome.
    pub status: WcStatus,
    /// Octets transferred (received length for `Recv`).
    pub byte_len: u32,
    /// A Send with Solicited Event was received.
    pub solicited: bool,
    /// The STag the peer invalidated with this Send (already invalid when seen).
    pub invalidated: Option<STag>,
}

/// Stream-level events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpEvent {
    /// We detected an error on incoming data (or while building a message)
    /// and queued this Terminate; the stream is going to error.
    LocalError(TerminateRepr),
    /// Our Terminate was handed to the LLP; nothing more will be sent.
    TerminateSent(TerminateRepr),
    /// The peer's Terminate arrived; decoded fields.
    TerminateReceived(TerminateRepr),
    /// The peer sent a Terminate message that does not decode.
    MalformedTerminate(WireError),
}

/// Stream state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QpState {
    /// Full operation.
    Rts,
    /// A Terminate is queued; only it will be sent.
    Terminating,
    /// Terminated (sent or received); nothing more is sent or placed.
    Error,
}

/// Why a post was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostError {
    /// The stream is not in full operation.
    NotReady(QpState),
    /// The queue is full.
    QueueFull,
    /// The local buffer is not usable (STag, PD, rights, bounds).
    Local(AccessError),
    /// An RDMA Read with ORD 0.
    NoOrd,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PostError::NotReady(s) => write!(f, "queue pair not ready ({s:?})"),
            PostError::QueueFull => f.write_str("queue full"),
            PostError::Local(e) => write!(f, "local buffer rejected: {e}"),
            PostError::NoOrd => f.write_str("RDMA Read posted but ORD is 0"),
        }
    }
}

impl std::error::Error for PostError {}

/// Peer-to-peer RTR message kinds (RFC 6581 §3; wire-facts.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RtrKind {
    /// A zero-length FPDU.
    ZeroLengthFpdu,
    /// A zero-length RDMA Write (Linux uses STag 1).
    Write,
    /// A zero-length RDMA Read Request (answered by a zero-length Read Response).
    Read,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpStats {
    /// FPDUs sent.
    pub fpdus_tx: u64,
    /// FPDUs received with a good CRC.
    pub fpdus_rx: u64,
    /// Payload octets placed into registered memory.
    pub bytes_placed: u64,
    /// Stream octets sent.
    pub stream_tx: u64,
    /// Stream octets received.
    pub stream_rx: u64,
}

/// What a Terminate should carry for an error on one incoming segment.
#[derive(Debug, Clone, Copy)]
struct TermInfo {
    code: TermCode,
    hdr: Option<DdpHeader>,
    seg_len: u16,
    rdma: Option<ReadRequest>,
}

impl TermInfo {
    fn repr(&self) -> TerminateRepr {
        // RFC 5040 §4.8 figure 10: LLP errors and local catastrophic errors carry
        // no headers; DDP and remote RDMAP errors carry the DDP header and the
        // segment length; Read Request errors also the RDMA header.
        let with_hdr = self.code.layer != 2 && self.code.etype != 0 && self.hdr.is_some();
        TerminateRepr {
            code: self.code,
            flag_m: with_hdr,
            ddp_segment_len: with_hdr.then_some(self.seg_len),
            ddp_header: if with_hdr { self.hdr } else { None },
            rdma_header: if with_hdr { self.rdma } else { None },
            reserved: 0,
        }
    }
}

fn ddp_tagged_code(e: AccessError) -> TermCode {
    match e {
        // RFC 5041 has no access-rights code; like Linux siw we report Invalid STag.
        AccessError::InvalidStag | AccessError::Access => TermCode::DDP_T_INVALID_STAG,
        AccessError::PdMismatch => TermCode::DDP_T_STAG_NOT_ASSOC,
        AccessError::ToWrap => TermCode::DDP_T_TO_WRAP,
        AccessError::Bounds => TermCode::DDP_T_BASE_BOUNDS,
    }
}

fn rdmap_protection_code(e: AccessError) -> TermCode {
    match e {
        AccessError::InvalidStag => TermCode::RDMAP_INVALID_STAG,
        AccessError::Bounds => TermCode::RDMAP_BASE_BOUNDS,
        AccessError::Access => TermCode::RDMAP_ACCESS,
        AccessError::PdMismatch => TermCode::RDMAP_STAG_NOT_ASSOC,
        AccessError::ToWrap => TermCode::RDMAP_TO_WRAP,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SqState {
    Queued,
    Sending,
    AwaitResponse,
    Done(WcStatus),
}

#[derive(Debug, Clone, Copy)]
enum SqWork {
    Wr(WorkRequest),
    Rtr(RtrKind),
}

#[derive(Debug, Clone, Copy)]
struct SqEntry {
    work: SqWork,
    state: SqState,
}

#[derive(Debug, Clone, Copy)]
struct PendingRead {
    seq: u64,
    sink: Sge,
    received: u64,
}

#[derive(Debug, Clone, Copy)]
struct ReadResp {
    req: ReadRequest,
    hdr: UntaggedHeader,
}

#[derive(Debug, Clone, Copy)]
enum JobOrigin {
    Sq(u64),
    ReadResp,
    Terminate,
}

/// A message being segmented onto the wire.
#[derive(Debug, Clone, Copy)]
struct Job {
    origin: JobOrigin,
    opcode: Opcode,
    /// Tagged: sink STag and base TO. Untagged: QN, MSN, Invalidate STag.
    stag: u32,
    to: u64,
    qn: u32,
    msn: u32,
    inval: u32,
    /// Inline body (Read Request or Terminate).
    inline: [u8; MAX_TERMINATE_LEN],
    inline_len: usize,
    /// Memory source: STag, TO, needed right.
    src: Option<(STag, u64, Access)>,
    len: u64,
    off: u64,
    zero_fpdu: bool,
}

#[derive(Debug, Clone, Copy)]
struct RecvWr {
    wr_id: u64,
    sge: Sge,
}

#[derive(Debug, Clone, Copy)]
enum Target {
    None,
    Discard,
    Tagged { range: crate::mem::Range },
    ReadResp { range: crate::mem::Range },
    Recv { range: crate::mem::Range },
    ReadReq { mo: usize },
    Term { mo: usize },
}

#[derive(Debug)]
struct Rx {
    rq: VecDeque<RecvWr>,
    expected_msn: [u32; 3],
    hdr: Option<DdpHeader>,
    seg_len: u16,
    payload_len: usize,
    placed: usize,
    target: Target,
    pending: Option<TermInfo>,
    dead: bool,
    read_req: [u8; READ_REQUEST_LEN],
    read_req_len: usize,
    term: [u8; MAX_TERMINATE_LEN],
    term_len: usize,
}

#[derive(Debug)]
struct Tx {
    sq: VecDeque<SqEntry>,
    /// Sequence number of `sq[0]`.
    head_seq: u64,
    /// Next SQ entry to transmit.
    next_seq: u64,
    msn: [u32; 3],
    reads: VecDeque<PendingRead>,
    resp: VecDeque<ReadResp>,
    job: Option<Job>,
    terminate: Option<TerminateRepr>,
}

/// One RDMAP stream over MPA.
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    state: QpState,
    framer: Framer,
    deframer: Deframer,
    rx: Rx,
    tx: Tx,
    completions: VecDeque<Completion>,
    events: VecDeque<QpEvent>,
    stats: QpStats,
}

/// Everything the receive path needs, borrowed apart from the deframer.
struct RxCtx<'a> {
    cfg: &'a QpConfig,
    rx: &'a mut Rx,
    tx: &'a mut Tx,
    mem: &'a mut MemoryTable,
    completions: &'a mut VecDeque<Completion>,
    events: &'a mut VecDeque<QpEvent>,
    stats: &'a mut QpStats,
    /// The first error raised while processing this call.
    raised: Option<TermInfo>,
    /// The peer's Terminate was delivered during this call.
    peer_terminated: bool,
}

impl Qp {
    /// A stream in full operation (after the MPA exchange).
    pub fn new(cfg: QpConfig) -> Self {
        let mut cfg = cfg;
        cfg.mulpdu = cfg.mulpdu.max(QpConfig::MIN_MULPDU);
        Qp {
            framer: Framer::new(cfg.crc, cfg.markers_tx),
            deframer: Deframer::new(cfg.crc, cfg.markers_rx),
            rx: Rx {
                rq: VecDeque::new(),
                // RFC 5041 §4.3: the first MSN on each queue is one.
                expected_msn: [1; 3],
                hdr: None,
                seg_len: 0,
                payload_len: 0,
                placed: 0,
                target: Target::None,
                pending: None,
                dead: false,
                read_req: [0; READ_REQUEST_LEN],
                read_req_len: 0,
                term: [0; MAX_TERMINATE_LEN],
                term_len: 0,
            },
            tx: Tx {
                sq: VecDeque::new(),
                head_seq: 0,
                next_seq: 0,
                msn: [1; 3],
                reads: VecDeque::new(),
                resp: VecDeque::new(),
                job: None,
                terminate: None,
            },
            cfg,
            state: QpState::Rts,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            stats: QpStats::default(),
        }
    }

    /// Configuration in force.
    pub fn config(&self) -> &QpConfig {
        &self.cfg
    }
    /// Current state.
    pub fn state(&self) -> QpState {
        self.state
    }
    /// Counters.
    pub fn stats(&self) -> QpStats {
        self.stats
    }
    /// RDMA Reads we sent that await a response.
    pub fn outstanding_reads(&self) -> usize {
        self.tx.reads.len()
    }
    /// Inbound RDMA Read Requests queued or being answered.
    pub fn inbound_reads(&self) -> usize {
        self.tx.resp.len()
    }
    /// Posted receive buffers not yet consumed.
    pub fn posted_recvs(&self) -> usize {
        self.rx.rq.len()
    }

    /// True when nothing is queued to transmit.
    pub fn tx_idle(&self) -> bool {
        self.tx.job.is_none()
            && self.tx.terminate.is_none()
            && self.tx.resp.is_empty()
            && (self.state != QpState::Rts
                || self.tx.next_seq == self.tx.head_seq + self.tx.sq.len() as u64)
    }

    /// Post a receive buffer (needs local write).
    pub fn post_recv(&mut self, mem: &MemoryTable, wr_id: u64, sge: Sge) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::NotReady(self.state));
        }
        if self.rx.rq.len() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        if sge.len > 0 {
            mem.check(
                sge.stag,
                self.cfg.pd,
                Access::LOCAL_WRITE,
                sge.to,
                sge.len as u64,
            )
            .map_err(PostError::Local)?;
        }
        self.rx.rq.push_back(RecvWr { wr_id, sge });
        Ok(())
    }

    /// Post a send-queue request. The local buffer is checked now and again
    /// when the message is built.
    pub fn post_send(&mut self, mem: &MemoryTable, wr: WorkRequest) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::NotReady(self.state));
        }
        if self.tx.sq.len() >= self.cfg.sq_depth {
            return Err(PostError::QueueFull);
        }
        let local = wr.local();
        let need = match wr {
            WorkRequest::Read { .. } => {
                if self.cfg.ord == 0 {
                    return Err(PostError::NoOrd);
                }
                Access::LOCAL_WRITE
            }
            _ => Access::LOCAL_READ,
        };
        if local.len > 0 {
            mem.check(local.stag, self.cfg.pd, need, local.to, local.len as u64)
                .map_err(PostError::Local)?;
        }
        self.tx.sq.push_back(SqEntry {
            work: SqWork::Wr(wr),
            state: SqState::Queued,
        });
        Ok(())
    }

    /// Queue the RFC 6581 ready-to-receive message (peer-to-peer mode initiator).
    /// It produces no completion.
    pub fn post_rtr(&mut self, kind: RtrKind) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(PostError::NotReady(self.state));
        }
        self.tx.sq.push_back(SqEntry {
            work: SqWork::Rtr(kind),
            state: SqState::Queued,
        });
        Ok(())
    }

    /// Abort the stream locally with a Terminate of `code` (no headers).
    pub fn terminate(&mut self, code: TermCode) {
        self.raise(TermInfo {
            code,
            hdr: None,
            seg_len: 0,
            rdma: None,
        });
    }

    /// The LLP failed underneath (connection lost): everything is flushed, no
    /// Terminate can be sent.
    pub fn llp_lost(&mut self) {
        if self.state != QpState::Error {
            self.state = QpState::Error;
            self.tx.terminate = None;
            self.flush();
        }
    }

    /// Next completion, in RFC 5040 §5.5 order.
    pub fn poll_completion(&mut self) -> Option<Completion> {
        self.completions.pop_front()
    }

    /// Next stream event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// Feed octets received on the stream (any cut).
    pub fn receive(&mut self, data: &[u8], mem: &mut MemoryTable) {
        self.stats.stream_rx += data.len() as u64;
        if self.rx.dead || self.state == QpState::Error {
            // RFC 5041 §7.1: after an error DDP silently drops what follows.
            return;
        }
        let mut ctx = RxCtx {
            cfg: &self.cfg,
            rx: &mut self.rx,
            tx: &mut self.tx,
            mem,
            completions: &mut self.completions,
            events: &mut self.events,
            stats: &mut self.stats,
            raised: None,
            peer_terminated: false,
        };
        let r = self.deframer.feed(data, &mut ctx);
        let raised = ctx.raised;
        let term_rx = ctx.peer_terminated;
        if let Err(e) = r {
            self.rx.dead = true;
            if raised.is_none() {
                self.raise(TermInfo {
                    code: e.term_code(),
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
        }
        if let Some(t) = raised {
            self.raise(t);
        } else if term_rx && self.state != QpState::Error {
            // RFC 5040 §5.4: after a Terminate the stream is done; we stop sending.
            self.state = QpState::Error;
            self.tx.terminate = None;
            self.flush();
        }
        self.drain_sq();
    }

    /// The MPA error that stopped reception, if any.
    pub fn mpa_error(&self) -> Option<MpaError> {
        self.deframer.error()
    }

    fn raise(&mut self, t: TermInfo) {
        if self.state != QpState::Rts {
            return; // RFC 5040 §7.1 rule 4: the first error is the one reported
        }
        let repr = t.repr();
        self.rx.dead = true;
        self.state = QpState::Terminating;
        self.tx.terminate = Some(repr);
        // RFC 5040 §5.4: operations not yet handed to DDP complete in error.
        self.events.push_back(QpEvent::LocalError(repr));
    }

    fn flush(&mut self) {
        for e in self.tx.sq.iter_mut() {
            if !matches!(e.state, SqState::Done(_)) {
                e.state = SqState::Done(WcStatus::Flushed);
            }
        }
        self.tx.reads.clear();
        self.tx.resp.clear();
        self.tx.job = None;
        self.tx.next_seq = self.tx.head_seq + self.tx.sq.len() as u64;
        while let Some(r) = self.rx.rq.pop_front() {
            self.completions.push_back(Completion {
                wr_id: r.wr_id,
                opcode: WcOpcode::Recv,
                status: WcStatus::Flushed,
                byte_len: 0,
                solicited: false,
                invalidated: None,
            });
        }
        self.drain_sq();
    }

    /// RFC 5040 §5.5 rule 15: complete strictly in submission order.
    fn drain_sq(&mut self) {
        while let Some(e) = self.tx.sq.front() {
            let SqState::Done(status) = e.state else {
                break;
            };
            let e = *e;
            self.tx.sq.pop_front();
            self.tx.head_seq += 1;
            if let SqWork::Wr(wr) = e.work {
                let (opcode, len) = match wr {
                    WorkRequest::Send { local, .. } => (WcOpcode::Send, local.len),
                    WorkRequest::Write { local, .. } => (WcOpcode::Write, local.len),
                    WorkRequest::Read { local, .. } => (WcOpcode::Read, local.len),
                };
                self.completions.push_back(Completion {
                    wr_id: wr.wr_id(),
                    opcode,
                    status,
                    byte_len: if status == WcStatus::Success { len } else { 0 },
                    solicited: false,
                    invalidated: None,
                });
            }
        }
        if self.tx.next_seq < self.tx.head_seq {
            self.tx.next_seq = self.tx.head_seq;
        }
    }

    fn sq_entry(&mut self, seq: u64) -> Option<&mut SqEntry> {
        let i = seq.checked_sub(self.tx.head_seq)?;
        self.tx.sq.get_mut(i as usize)
    }

    /// Pick the next message: Terminate first, then Read Responses (in request
    /// order, RFC 5040 §5.2.2), then the send queue in order (rule 13), holding
    /// Read Requests back while ORD are outstanding (RFC 5040 §6.1).
    fn next_job(&mut self) -> Option<Job> {
        let blank = Job {
            origin: JobOrigin::Terminate,
            opcode: Opcode::Terminate,
            stag: 0,
            to: 0,
            qn: 0,
            msn: 0,
            inval: 0,
            inline: [0; MAX_TERMINATE_LEN],
            inline_len: 0,
            src: None,
            len: 0,
            off: 0,
            zero_fpdu: false,
        };
        if let Some(t) = self.tx.terminate {
            let (inline, n) = t.to_array();
            let msn = self.tx.msn[2];
            self.tx.msn[2] = msn.wrapping_add(1);
            return Some(Job {
                qn: queue::TERMINATE,
                msn,
                inline,
                inline_len: n,
                ..blank
            });
        }
        if self.state != QpState::Rts {
            return None;
        }
        if let Some(r) = self.tx.resp.front() {
            let req = r.req;
            return Some(Job {
                origin: JobOrigin::ReadResp,
                opcode: Opcode::ReadResponse,
                stag: req.sink_stag,
                to: req.sink_to,
                src: (req.size > 0).then_some((
                    STag(req.src_stag),
                    req.src_to,
                    Access::REMOTE_READ,
                )),
                len: req.size as u64,
                ..blank
            });
        }
        let seq = self.tx.next_seq;
        let entry = *self.sq_entry(seq)?;
        let job = match entry.work {
            SqWork::Wr(WorkRequest::Send {
                local,
                solicited,
                invalidate,
                ..
            }) => {
                let opcode = match (solicited, invalidate.is_some()) {
                    (false, false) => Opcode::Send,
                    (true, false) => Opcode::SendSe,
                    (false, true) => Opcode::SendInvalidate,
                    (true, true) => Opcode::SendSeInvalidate,
                };
                let msn = self.tx.msn[0];
                self.tx.msn[0] = msn.wrapping_add(1);
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode,
                    qn: queue::SEND,
                    msn,
                    inval: invalidate.map_or(0, |s| s.0),
                    src: (local.len > 0).then_some((local.stag, local.to, Access::LOCAL_READ)),
                    len: local.len as u64,
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::Write {
                local,
                remote_stag,
                remote_to,
                ..
            }) => Job {
                origin: JobOrigin::Sq(seq),
                opcode: Opcode::Write,
                stag: remote_stag.0,
                to: remote_to,
                src: (local.len > 0).then_some((local.stag, local.to, Access::LOCAL_READ)),
                len: local.len as u64,
                ..blank
            },
            SqWork::Wr(WorkRequest::Read {
                local,
                remote_stag,
                remote_to,
                ..
            }) => {
                if self.tx.reads.len() >= self.cfg.ord as usize {
                    return None;
                }
                self.read_request_job(seq, local, remote_stag, remote_to, blank)
            }
            SqWork::Rtr(RtrKind::ZeroLengthFpdu) => Job {
                origin: JobOrigin::Sq(seq),
                zero_fpdu: true,
                ..blank
            },
            SqWork::Rtr(RtrKind::Write) => {
                // wire-facts.md: Linux uses STag 1 because Chelsio rejects STag 0.
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: Opcode::Write,
                    stag: 1,
                    ..blank
                }
            }
            SqWork::Rtr(RtrKind::Read) => {
                if self.tx.reads.len() >= self.cfg.ord.max(1) as usize {
                    return None;
                }
                self.read_request_job(
                    seq,
                    Sge {
                        stag: STag(1),
                        to: 0,
                        len: 0,
                    },
                    STag(1),
                    0,
                    blank,
                )
            }
        };
        self.tx.next_seq += 1;
        if let Some(e) = self.sq_entry(seq) {
            e.state = SqState::Sending;
        }
        Some(job)
    }

    fn read_request_job(
        &mut self,
        seq: u64,
        local: Sge,
        remote_stag: STag,
        remote_to: u64,
        blank: Job,
    ) -> Job {
        let req = ReadRequest {
            sink_stag: local.stag.0,
            sink_to: local.to,
            size: local.len,
            src_stag: remote_stag.0,
            src_to: remote_to,
        };
        let msn = self.tx.msn[1];
        self.tx.msn[1] = msn.wrapping_add(1);
        let mut inline = [0u8; MAX_TERMINATE_LEN];
        let _ = req.emit(&mut inline);
        // RFC 5040 §6.1: counted against ORD from the moment it is sent.
        self.tx.reads.push_back(PendingRead {
            seq,
            sink: local,
            received: 0,
        });
        Job {
            origin: JobOrigin::Sq(seq),
            opcode: Opcode::ReadRequest,
            qn: queue::READ_REQUEST,
            msn,
            inline,
            inline_len: READ_REQUEST_LEN,
            ..blank
        }
    }

    /// Append FPDUs to `out`: at most `max_fpdus`, and at most `max_bytes`
    /// octets (callers pass the EMSS to get one TCP segment's worth; every
    /// FPDU fits in one EMSS by construction of MULPDU). Returns the octets added.
    pub fn poll_transmit(
        &mut self,
        mem: &MemoryTable,
        out: &mut Vec<u8>,
        max_bytes: usize,
        max_fpdus: usize,
    ) -> usize {
        let start = out.len();
        let mut fpdus = 0;
        while fpdus < max_fpdus {
            if self.tx.job.is_none() {
                self.tx.job = self.next_job();
            }
            let Some(mut job) = self.tx.job else { break };
            let tagged = job.opcode.tagged() == Some(true);
            let hdr_len = if job.zero_fpdu {
                0
            } else if tagged {
                TAGGED_HEADER_LEN
            } else {
                UNTAGGED_HEADER_LEN
            };
            let room = (self.cfg.mulpdu as usize).saturating_sub(hdr_len + job.inline_len) as u64;
            let chunk = (job.len - job.off).min(room);
            let ulpdu_len = hdr_len + job.inline_len + chunk as usize;
            let wire = self.framer.next_wire_len(ulpdu_len);
            if out.len() - start + wire > max_bytes {
                break;
            }
            let last = job.off + chunk == job.len;
            // Source bytes, re-checked now (the region may have changed since posting).
            let mut payload: &[u8] = &[];
            if let Some((stag, to, need)) = job.src {
                if chunk > 0 {
                    let checked = to
                        .checked_add(job.off)
                        .ok_or(AccessError::ToWrap)
                        .and_then(|at| mem.check(stag, self.cfg.pd, need, at, chunk));
                    match checked.map(|r| mem.read(&r, 0, chunk as usize)) {
                        Ok(Some(b)) => payload = b,
                        Ok(None) | Err(_) => {
                            let e = checked.err().unwrap_or(AccessError::InvalidStag);
                            self.local_build_error(job, e);
                            continue;
                        }
                    }
                }
            }
            let mut hdr = [0u8; UNTAGGED_HEADER_LEN];
            if !job.zero_fpdu {
                let h = if tagged {
                    DdpHeader::Tagged(TaggedHeader {
                        ddp: DdpControl::new(true, last),
                        rdmap: RdmapControl::new(job.opcode),
                        stag: job.stag,
                        to: job.to.wrapping_add(job.off),
                    })
                } else {
                    DdpHeader::Untagged(UntaggedHeader {
                        ddp: DdpControl::new(false, last),
                        rdmap: RdmapControl::new(job.opcode),
                        inval_stag: job.inval,
                        qn: job.qn,
                        msn: job.msn,
                        mo: job.off as u32,
                    })
                };
                let _ = h.emit(&mut hdr);
            }
            let parts: [&[u8]; 3] = [&hdr[..hdr_len], &job.inline[..job.inline_len], payload];
            if self.framer.emit(&parts, out).is_err() {
                break; // cannot happen: ulpdu_len <= mulpdu <= u16::MAX
            }
            fpdus += 1;
            self.stats.fpdus_tx += 1;
            job.off += chunk;
            if last {
                self.tx.job = None;
                self.job_done(job);
            } else {
                self.tx.job = Some(job);
            }
        }
        let n = out.len() - start;
        self.stats.stream_tx += n as u64;
        self.drain_sq();
        n
    }

    fn job_done(&mut self, job: Job) {
        match job.origin {
            JobOrigin::Terminate => {
                let t = self.tx.terminate.take();
                self.state = QpState::Error;
                self.flush();
                if let Some(t) = t {
                    self.events.push_back(QpEvent::TerminateSent(t));
                }
            }
            JobOrigin::ReadResp => {
                self.tx.resp.pop_front();
            }
            JobOrigin::Sq(seq) => {
                let is_read = job.opcode == Opcode::ReadRequest;
                if let Some(e) = self.sq_entry(seq) {
                    // RFC 5040 §5.5 rule 14: a Send or Write completes once DDP
                    // has handed it to the LLP; a Read waits for its response (rule 19).
                    e.state = if is_read {
                        SqState::AwaitResponse
                    } else {
                        SqState::Done(WcStatus::Success)
                    };
                }
            }
        }
    }

    /// RFC 5040 §7.1 case 1: an error while building a message: the request
    /// completes in error and a Terminate goes out instead.
    fn local_build_error(&mut self, job: Job, e: AccessError) {
        self.tx.job = None;
        match job.origin {
            JobOrigin::Sq(seq) => {
                if let Some(entry) = self.sq_entry(seq) {
                    entry.state = SqState::Done(WcStatus::LocalProtection(e));
                }
                self.raise(TermInfo {
                    code: TermCode::RDMAP_LOCAL_CATASTROPHIC,
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
            JobOrigin::ReadResp => {
                // The source went away mid-response: report where we stopped
                // (RFC 5040 §4.8, Terminated RDMA Header updated to the current position).
                let Some(r) = self.tx.resp.front().copied() else {
                    return;
                };
                let mut req = r.req;
                req.sink_to = req.sink_to.wrapping_add(job.off);
                req.src_to = req.src_to.wrapping_add(job.off);
                req.size = req.size.saturating_sub(job.off as u32);
                self.raise(TermInfo {
                    code: rdmap_protection_code(e),
                    hdr: Some(DdpHeader::Untagged(r.hdr)),
                    seg_len: (UNTAGGED_HEADER_LEN + READ_REQUEST_LEN) as u16,
                    rdma: Some(req),
                });
            }
            JobOrigin::Terminate => {}
        }
    }
}

impl RxCtx<'_> {
    fn error(&mut self, code: TermCode, rdma: Option<ReadRequest>) {
        if self.rx.pending.is_none() {
            self.rx.pending = Some(TermInfo {
                code,
                hdr: self.rx.hdr,
                seg_len: self.rx.seg_len,
                rdma,
            });
        }
        self.rx.target = Target::Discard;
    }

    fn raise(&mut self, t: TermInfo) {
        if self.raised.is_none() {
            self.raised = Some(t);
        }
        self.rx.dead = true;
    }

    fn begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        self.rx.hdr = None;
        self.rx.seg_len = ulpdu_len;
        self.rx.placed = 0;
        self.rx.pending = None;
        self.rx.target = Target::Discard;
        if self.rx.dead {
            return;
        }
        if ulpdu_len == 0 {
            // A zero-length ULPDU is legal MPA (RFC 6581 uses it as an RTR).
            self.rx.target = Target::None;
            return;
        }
        let (hdr, hlen) = match DdpHeader::parse(header) {
            Ok(h) => h,
            Err(_) => {
                // Shorter than the header its control octet announces.
                self.error(TermCode::RDMAP_CATASTROPHIC_STREAM, None);
                return;
            }
        };
        self.rx.hdr = Some(hdr);
        let payload = ulpdu_len as usize - hlen;
        self.rx.payload_len = payload;
        let pd = self.cfg.pd;
        match hdr {
            DdpHeader::Tagged(t) => {
                // RFC 5041 §4.1: DV MUST be one.
                if t.ddp.version() != DDP_VERSION {
                    return self.error(TermCode::DDP_T_INVALID_VERSION, None);
                }
                // RFC 5040 §4.1 / §7.2 item 3.
                if t.rdmap.version() != RDMAP_VERSION {
                    return self.error(TermCode::RDMAP_INVALID_VERSION, None);
                }
                match t.rdmap.opcode() {
                    Opcode::Write => {
                        // RFC 5041 §5.2: STag and TO of a zero-length segment MUST NOT be checked.
                        if payload == 0 {
                            self.rx.target = Target::None;
                            return;
                        }
                        // RFC 5041 §7.1 tagged checks 1-5.
                        match self.mem.check(
                            STag(t.stag),
                            pd,
                            Access::REMOTE_WRITE,
                            t.to,
                            payload as u64,
                        ) {
                            Ok(range) => self.rx.target = Target::Tagged { range },
                            Err(e) => self.error(ddp_tagged_code(e), None),
                        }
                    }
                    Opcode::ReadResponse => {
                        let Some(pending) = self.tx.reads.front().copied() else {
                            // No RDMA Read outstanding.
                            return self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None);
                        };
                        if payload == 0 {
                            self.rx.target = Target::None;
                            return;
                        }
                        // RFC 5040 §5.2.2: the sink MAY check STag/TO/length against the request.
                        let sink = pending.sink;
                        if t.stag != sink.stag.0 {
                            return self.error(TermCode::DDP_T_INVALID_STAG, None);
                        }
                        let Some(end) = t.to.checked_add(payload as u64) else {
                            return self.error(TermCode::DDP_T_TO_WRAP, None);
                        };
                        if t.to < sink.to || end > sink.to + sink.len as u64 {
                            return self.error(TermCode::DDP_T_BASE_BOUNDS, None);
                        }
                        match self.mem.check(
                            sink.stag,
                            pd,
                            Access::LOCAL_WRITE,
                            t.to,
                            payload as u64,
                        ) {
                            Ok(range) => self.rx.target = Target::ReadResp { range },
                            Err(e) => self.error(ddp_tagged_code(e), None),
                        }
                    }
                    _ => self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None),
                }
            }
            DdpHeader::Untagged(u) => {
                if u.ddp.version() != DDP_VERSION {
                    return self.error(TermCode::DDP_U_INVALID_VERSION, None);
                }
                if u.qn > queue::TERMINATE {
                    return self.error(TermCode::DDP_U_INVALID_QN, None);
                }
                if u.rdmap.version() != RDMAP_VERSION {
                    return self.error(TermCode::RDMAP_INVALID_VERSION, None);
                }
                let op = u.rdmap.opcode();
                if op.queue() != Some(u.qn) {
                    return self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None);
                }
                let q = u.qn as usize;
                // RFC 5041 §7.1 untagged check 5: MSN within the legal range.
                if u.msn != self.rx.expected_msn[q] {
                    return self.error(TermCode::DDP_U_MSN_RANGE, None);
                }
                let mo = u.mo as usize;
                let capacity = match u.qn {
                    queue::SEND => match self.rx.rq.front() {
                        Some(r) => r.sge.len as usize,
                        // RFC 5041 §7.1 check 2 (and RFC 5040 §5.3: even a zero-length Send consumes a buffer).
                        None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                    },
                    queue::READ_REQUEST => {
                        // The QN 1 buffers are the IRD we advertised (RFC 5040 §5.2.2, §6.1).
                        if mo == 0 && self.tx.resp.len() >= self.cfg.ird as usize {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        }
                        READ_REQUEST_LEN
                    }
                    _ => MAX_TERMINATE_LEN,
                };
                // RFC 5041 §7.1 checks 3 and 4.
                if mo > capacity {
                    return self.error(TermCode::DDP_U_INVALID_MO, None);
                }
                if mo + payload > capacity {
                    return self.error(TermCode::DDP_U_TOO_LONG, None);
                }
                self.rx.target = match u.qn {
                    queue::SEND => {
                        let sge = match self.rx.rq.front() {
                            Some(r) => r.sge,
                            None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                        };
                        if payload == 0 {
                            Target::None
                        } else {
                            match self.mem.check(
                                sge.stag,
                                pd,
                                Access::LOCAL_WRITE,
                                sge.to + mo as u64,
                                payload as u64,
                            ) {
                                Ok(range) => Target::Recv { range },
                                // The posted buffer went away underneath us.
                                Err(_) => {
                                    return self.error(TermCode::DDP_LOCAL_CATASTROPHIC, None)
                                }
                            }
                        }
                    }
                    queue::READ_REQUEST => Target::ReadReq { mo },
                    _ => Target::Term { mo },
                };
            }
        }
    }

    fn data(&mut self, data: &[u8]) {
        let at = self.rx.placed;
        self.rx.placed += data.len();
        match self.rx.target {
            Target::Tagged { range } | Target::ReadResp { range } | Target::Recv { range } => {
                if self.mem.write(&range, at, data) {
                    self.stats.bytes_placed += data.len() as u64;
                }
            }
            Target::ReadReq { mo } => {
                if let Some(dst) = self.rx.read_req.get_mut(mo + at..mo + at + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Target::Term { mo } => {
                if let Some(dst) = self.rx.term.get_mut(mo + at..mo + at + data.len()) {
                    dst.copy_from_slice(data);
                }
            }
            Target::None | Target::Discard => {}
        }
    }

    fn end(&mut self) {
        self.stats.fpdus_rx += 1;
        if self.rx.dead {
            return;
        }
        if let Some(p) = self.rx.pending.take() {
            return self.raise(p);
        }
        let Some(hdr) = self.rx.hdr else { return };
        let payload = self.rx.payload_len;
        match hdr {
            DdpHeader::Tagged(t) => {
                if t.rdmap.opcode() == Opcode::ReadResponse {
                    let Some(p) = self.tx.reads.front_mut() else {
                        return;
                    };
                    p.received += payload as u64;
                    if t.ddp.last() {
                        // RFC 5040 §5.5 rule 19: the Read completes on delivery of its response.
                        let seq = p.seq;
                        self.tx.reads.pop_front();
                        if let Some(i) = seq.checked_sub(self.tx.head_seq) {
                            if let Some(e) = self.tx.sq.get_mut(i as usize) {
                                e.state = SqState::Done(WcStatus::Success);
                            }
                        }
                    }
                }
                // RDMA Write: placed, never delivered (RFC 5040 §5.1).
            }
            DdpHeader::Untagged(u) => {
                let mo = u.mo as usize;
                match u.qn {
                    queue::SEND => {
                        if !u.ddp.last() {
                            return;
                        }
                        let op = u.rdmap.opcode();
                        let mut invalidated = None;
                        if op.invalidates() {
                            // RFC 5040 §5.3, §7.2 items 4-5: verify and invalidate before
                            // the completion becomes visible.
                            let stag = STag(u.inval_stag);
                            if let Err(e) = self.mem.invalidate_remote(stag, self.cfg.pd) {
                                let code = match e {
                                    AccessError::PdMismatch => TermCode::RDMAP_CANNOT_INVALIDATE,
                                    _ => TermCode::RDMAP_INVALID_STAG,
                                };
                                return self.raise(TermInfo {
                                    code,
                                    hdr: Some(hdr),
                                    seg_len: self.rx.seg_len,
                                    rdma: None,
                                });
                            }
                            invalidated = Some(stag);
                        }
                        self.rx.expected_msn[0] = self.rx.expected_msn[0].wrapping_add(1);
                        let Some(r) = self.rx.rq.pop_front() else {
                            return;
                        };
                        self.completions.push_back(Completion {
                            wr_id: r.wr_id,
                            opcode: WcOpcode::Recv,
                            status: WcStatus::Success,
                            // RFC 5041 §5.4: length = MO + payload of the last segment.
                            byte_len: (mo + payload) as u32,
                            solicited: op.solicited(),
                            invalidated,
                        });
                    }
                    queue::READ_REQUEST => {
                        self.rx.read_req_len = self.rx.read_req_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.read_req_len);
                        self.rx.expected_msn[1] = self.rx.expected_msn[1].wrapping_add(1);
                        let Ok(req) =
                            ReadRequest::parse(&self.rx.read_req[..len.min(READ_REQUEST_LEN)])
                        else {
                            // A Read Request without its 28-octet header.
                            return self.raise(TermInfo {
                                code: TermCode::RDMAP_OP_UNSPECIFIED,
                                hdr: Some(hdr),
                                seg_len: self.rx.seg_len,
                                rdma: None,
                            });
                        };
                        // RFC 5040 §5.2.1 / §7.2: validate the source only for non-zero sizes.
                        if req.size > 0 {
                            if let Err(e) = self.mem.check(
                                STag(req.src_stag),
                                self.cfg.pd,
                                Access::REMOTE_READ,
                                req.src_to,
                                req.size as u64,
                            ) {
                                return self.raise(TermInfo {
                                    code: rdmap_protection_code(e),
                                    hdr: Some(hdr),
                                    seg_len: self.rx.seg_len,
                                    rdma: Some(req),
                                });
                            }
                        }
                        // RFC 5040 §5.5 rule 12/17: processing starts only now, on delivery.
                        self.tx.resp.push_back(ReadResp { req, hdr: u });
                    }
                    _ => {
                        self.rx.term_len = self.rx.term_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.term_len);
                        self.rx.expected_msn[2] = self.rx.expected_msn[2].wrapping_add(1);
                        // RFC 5040 §5.4: deliver the Terminate to the ULP, then stop.
                        match TerminateRepr::parse(&self.rx.term[..len.min(MAX_TERMINATE_LEN)]) {
                            Ok(t) => self.events.push_back(QpEvent::TerminateReceived(t)),
                            Err(e) => self.events.push_back(QpEvent::MalformedTerminate(e)),
                        }
                        self.rx.dead = true;
                        self.peer_terminated = true;
                    }
                }
            }
        }
    }
}

impl UlpduSink for RxCtx<'_> {
    fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        self.begin(ulpdu_len, header);
    }
    fn segment_data(&mut self, data: &[u8]) {
        self.data(data);
    }
    fn segment_end(&mut self) {
        self.end();
    }
}
