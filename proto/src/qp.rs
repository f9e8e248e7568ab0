//! One RDMAP stream (a queue pair): DDP placement and RDMAP semantics over an
//! MPA byte stream or over DDP/SCTP's whole segments ([`llp`]), I/O-free.
//!
//! Call order, per the style of quinn-proto: feed received stream octets with
//! [`Qp::receive`] (MPA) or whole DDP Segments with [`Qp::receive_segment`]
//! (SCTP); post work with [`Qp::post_send`] / [`Qp::post_recv`]; pull
//! octets to transmit with [`Qp::poll_transmit`] (FPDUs) or
//! [`Qp::poll_segment`] (one DDP Segment); drain [`Qp::poll_completion`]
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
//! * RFC 5040 §4.8, §7.1 Terminate contents: `TermInfo` builders;
//! * RFC 5040 §6.1 ORD/IRD limits: `Tx::next_job` and the QN 1 buffer check.
//! * RFC 7306 Immediate Data and Atomics: [`WorkRequest::WriteImm`],
//!   [`WorkRequest::FetchAdd`], [`WorkRequest::CmpSwap`]; the responder's
//!   checks and execution at delivery of the Atomic Request (`Rx::end`),
//!   its Atomic Response queued with the Read Responses and bounded with
//!   them by the IRD;
//! * RFC 5043 §9 MULPDU over SCTP (set by the caller), §10 DDP-SSN
//!   validity check and ordering of unordered segments: [`llp::SegmentOrder`],
//!   [`Qp::receive_segment`].
//!
//! Verbs features on top of the RFC model:
//! * scatter/gather lists ([`SgList`], up to [`MAX_SGE`] entries) for the local
//!   side of every work request and for receive buffers;
//! * signaled and unsignaled send-queue requests ([`WorkRequest`]);
//! * a shared receive queue ([`Srq`], [`Qp::with_srq`]);
//! * memory windows (in [`crate::mem`]), usable wherever an STag is checked;
//! * completion statuses mapped from local errors and from the peer's
//!   Terminate ([`WcStatus`]).

use std::collections::VecDeque;

use crate::mem::{Access, AccessError, MemoryTable, PdId, Range, STag};
use crate::mpa::{Deframer, Framer, MpaError, Part, TxBuf, UlpduSink};
use crate::txq::{TxQueue, TxRecord};
use crate::wire::ddp::{
    DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader, UntaggedHeader, DDP_VERSION,
    RDMAP_VERSION, TAGGED_HEADER_LEN, UNTAGGED_HEADER_LEN,
};
use crate::wire::rdmap::{
    AtomicOp, AtomicRequest, AtomicResponse, ImmediateData, ATOMIC_REQUEST_LEN,
    ATOMIC_RESPONSE_LEN, IMMEDIATE_DATA_LEN, READ_REQUEST_LEN,
};
use crate::wire::terminate::{layer, MAX_TERMINATE_LEN};
use crate::wire::ReadRequest;
use crate::wire::{TermCode, TerminateRepr, WireError};
use llp::{Arrival, Lower, LowerLayer, OrderError, SegmentStats};

pub use crate::srq::Srq;

pub mod llp;

/// Untagged queue numbers (RFC 5040 §4.1 figure 4).
pub mod queue {
    /// Send family.
    pub const SEND: u32 = 0;
    /// RDMA Read Request.
    pub const READ_REQUEST: u32 = 1;
    /// Terminate.
    pub const TERMINATE: u32 = 2;
    /// Atomic Response (RFC 7306 §4; IANA "RDMAP DDP Untagged Queue Numbers").
    pub const ATOMIC_RESPONSE: u32 = 3;
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

/// Size of a job's inline body: a Terminate or inline data.
pub(crate) const INLINE_BODY: usize = if MAX_INLINE > MAX_TERMINATE_LEN {
    MAX_INLINE
} else {
    MAX_TERMINATE_LEN
};

/// Most octets a work request can carry inline (verbs' `IBV_SEND_INLINE`):
/// they are copied into the send-queue entry at post time, so the caller's
/// buffer is free at once and needs no registration.
pub const MAX_INLINE: usize = 128;

/// Octets carried in a work request itself ([`WorkRequest::SendInline`],
/// [`WorkRequest::WriteInline`]). Fixed size, no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct InlineData {
    len: u8,
    bytes: [u8; MAX_INLINE],
}

impl InlineData {
    /// Copy `data` (at most [`MAX_INLINE`] octets).
    pub fn new(data: &[u8]) -> Result<InlineData, PostError> {
        if data.len() > MAX_INLINE {
            return Err(PostError::InlineTooLong);
        }
        let mut bytes = [0u8; MAX_INLINE];
        bytes[..data.len()].copy_from_slice(data);
        Ok(InlineData {
            len: data.len() as u8,
            bytes,
        })
    }

    /// The octets.
    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for InlineData {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "InlineData({} octets)", self.len)
    }
}

/// Most entries in one [`SgList`].
pub const MAX_SGE: usize = 4;

/// A scatter/gather list: up to [`MAX_SGE`] local buffers, used in order.
///
/// As a source (Send, RDMA Write) the message is the concatenation of the
/// entries; as a sink (receive buffer, RDMA Read) incoming data fills them in
/// order. Zero-length entries are skipped and never validated (RFC 5041
/// §5.2). Every list has at most [`MAX_SGE`] entries and a total length that
/// fits the 32-bit message sizes of RDMAP (RFC 5040 §4.4 RDMA Read Message
/// Size), which [`SgList::new`] and [`SgList::push`] enforce.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SgList {
    sges: [Sge; MAX_SGE],
    count: u8,
}

impl SgList {
    /// No buffers: a zero-length message.
    pub const EMPTY: SgList = SgList {
        sges: [Sge::EMPTY; MAX_SGE],
        count: 0,
    };

    /// A list of `sges`, in order. Refuses more than [`MAX_SGE`] entries
    /// ([`PostError::TooManySge`]) and a total above `u32::MAX`
    /// ([`PostError::TooLong`]).
    pub fn new(sges: &[Sge]) -> Result<SgList, PostError> {
        if sges.len() > MAX_SGE {
            return Err(PostError::TooManySge);
        }
        let mut l = SgList::EMPTY;
        for s in sges {
            l.push(*s)?;
        }
        Ok(l)
    }

    /// Append one entry.
    pub fn push(&mut self, sge: Sge) -> Result<(), PostError> {
        let n = self.count as usize;
        if n >= MAX_SGE {
            return Err(PostError::TooManySge);
        }
        if self.total_len().checked_add(sge.len).is_none() {
            return Err(PostError::TooLong);
        }
        self.sges[n] = sge;
        self.count += 1;
        Ok(())
    }

    /// The entries.
    pub fn as_slice(&self) -> &[Sge] {
        &self.sges[..self.count as usize]
    }

    /// Number of entries.
    pub fn num_sge(&self) -> usize {
        self.count as usize
    }

    /// Sum of the entries' lengths: the message length.
    pub fn total_len(&self) -> u32 {
        // Cannot saturate: push refuses totals above u32::MAX.
        self.as_slice()
            .iter()
            .fold(0u32, |t, s| t.saturating_add(s.len))
    }

    /// STag and TO a Read Request advertises as its Data Sink: those of the
    /// first non-empty entry (or of the first entry, or of [`Sge::EMPTY`]).
    fn advertised(&self) -> Sge {
        let first = self.as_slice().first().copied().unwrap_or(Sge::EMPTY);
        self.as_slice()
            .iter()
            .copied()
            .find(|s| s.len > 0)
            .unwrap_or(first)
    }

    /// Validate `len` octets at message offset `off` against the memory
    /// table, entry by entry, and return the pieces in order.
    fn locate(
        &self,
        mem: &MemoryTable,
        pd: PdId,
        need: Access,
        off: u64,
        len: u64,
    ) -> Result<Pieces, AccessError> {
        let mut p = Pieces::EMPTY;
        self.locate_into(mem, pd, need, off, len, &mut p)?;
        Ok(p)
    }

    /// [`locate`](Self::locate) into `p` (transmit builds its plan in
    /// place rather than moving it).
    fn locate_into(
        &self,
        mem: &MemoryTable,
        pd: PdId,
        need: Access,
        off: u64,
        len: u64,
        p: &mut Pieces,
    ) -> Result<(), AccessError> {
        p.n = 0;
        let mut skip = off;
        let mut left = len;
        for sge in self.as_slice() {
            if left == 0 {
                break;
            }
            let l = sge.len as u64;
            if skip >= l {
                skip -= l;
                continue;
            }
            let take = (l - skip).min(left);
            let to = sge.to.checked_add(skip).ok_or(AccessError::ToWrap)?;
            p.r[p.n] = mem.check(sge.stag, pd, need, to, take)?;
            p.n += 1;
            skip = 0;
            left -= take;
        }
        if left > 0 {
            return Err(AccessError::Bounds);
        }
        Ok(())
    }
}

impl Default for SgList {
    fn default() -> Self {
        SgList::EMPTY
    }
}

impl From<Sge> for SgList {
    fn from(sge: Sge) -> Self {
        let mut l = SgList::EMPTY;
        l.sges[0] = sge;
        l.count = 1;
        l
    }
}

/// Validated ranges of one segment's payload, in order (at most one per SGE).
#[derive(Debug, Clone, Copy)]
struct Pieces {
    r: [Range; MAX_SGE],
    n: usize,
}

impl Pieces {
    const EMPTY: Pieces = Pieces {
        r: [Range::EMPTY; MAX_SGE],
        n: 0,
    };
    fn as_slice(&self) -> &[Range] {
        &self.r[..self.n]
    }
}

/// Work for the send queue.
///
/// Every variant carries `wr_id`, `signaled` and its local [`SgList`]. An
/// enum with the common fields repeated (rather than `struct { wr_id,
/// signaled, op }`) keeps each request one flat literal at call sites and
/// lets existing patterns like `WorkRequest::Send { local, .. }` stay as
/// they are; [`wr_id`](Self::wr_id), [`signaled`](Self::signaled) and
/// [`local`](Self::local) read the common fields.
///
/// `signaled: false` asks for no completion when the request succeeds. The
/// request still holds its place in the send queue until it is done, so a
/// later signaled completion still implies every earlier request finished
/// (RFC 5040 §5.5 rule 15). A request that fails or is flushed completes
/// whatever `signaled` says, as verbs do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WorkRequest {
    /// Send, Send with SE, Send with Invalidate, Send with SE and Invalidate.
    Send {
        /// Caller's id, returned in the completion.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Source buffers (gathered in order).
        local: SgList,
        /// Solicited Event.
        solicited: bool,
        /// STag for the peer to invalidate.
        invalidate: Option<STag>,
    },
    /// RDMA Write.
    Write {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Source buffers (gathered in order).
        local: SgList,
        /// Peer's STag.
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
    },
    /// A Send (any of the four kinds) whose payload travels in the request
    /// ([`InlineData`]): one FPDU, no local buffer.
    SendInline {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// The payload.
        data: InlineData,
        /// Solicited Event.
        solicited: bool,
        /// STag for the peer to invalidate.
        invalidate: Option<STag>,
    },
    /// An RDMA Write whose payload travels in the request.
    WriteInline {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// The payload.
        data: InlineData,
        /// Peer's STag.
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
    },
    /// RDMA Read: `local` is the data sink. The Read Request advertises the
    /// STag and TO of its first non-empty entry with the list's total size;
    /// Read Response segments at TO `sink TO + k` are placed at offset `k` of
    /// the list (scatter). That STag is ours, so how we map its TOs is the
    /// Data Sink's own business; a one-entry Read is the plain RFC 5040
    /// §4.4 Read Request.
    Read {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Sink buffers (scattered in order).
        local: SgList,
        /// Peer's source STag.
        remote_stag: STag,
        /// Peer's source tagged offset.
        remote_to: u64,
    },
    /// RDMA Write with Immediate (RFC 7306 §6): the RDMA Write of `local`
    /// (none when `local` is empty) followed by an Immediate Data message
    /// (with Solicited Event if `solicited`) carrying `imm`. The Immediate
    /// Data consumes one receive buffer at the peer, which completes as
    /// [`WcOpcode::RecvRdmaWithImm`] with `imm`. Takes two send-queue slots
    /// when `local` is not empty.
    WriteImm {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Source buffers (gathered in order).
        local: SgList,
        /// Peer's STag.
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
        /// The 32-bit immediate.
        imm: u32,
        /// Immediate Data with Solicited Event.
        solicited: bool,
    },
    /// Fetch and Add (RFC 7306 §5): the peer adds `add` to the 8 octets at
    /// `remote_to` (8-octet aligned) and returns their value before the
    /// add, which is placed in `local` (8 octets, local write).
    FetchAdd {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Where the original value goes (8 octets).
        local: Sge,
        /// Peer's STag (remote atomic access).
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
        /// Added to the target.
        add: u64,
    },
    /// Compare and Swap (RFC 7306 §5): if the 8 octets at `remote_to` equal
    /// `compare`, the peer stores `swap` there; either way it returns their
    /// original value, which is placed in `local` (8 octets).
    CmpSwap {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Where the original value goes (8 octets).
        local: Sge,
        /// Peer's STag (remote atomic access).
        remote_stag: STag,
        /// Peer's tagged offset.
        remote_to: u64,
        /// Compared with the target.
        compare: u64,
        /// Stored when the comparison holds.
        swap: u64,
    },
}

impl WorkRequest {
    /// The caller's id.
    pub fn wr_id(&self) -> u64 {
        match *self {
            WorkRequest::Send { wr_id, .. }
            | WorkRequest::Write { wr_id, .. }
            | WorkRequest::SendInline { wr_id, .. }
            | WorkRequest::WriteInline { wr_id, .. }
            | WorkRequest::Read { wr_id, .. }
            | WorkRequest::WriteImm { wr_id, .. }
            | WorkRequest::FetchAdd { wr_id, .. }
            | WorkRequest::CmpSwap { wr_id, .. } => wr_id,
        }
    }
    /// Whether success produces a completion.
    pub fn signaled(&self) -> bool {
        match *self {
            WorkRequest::Send { signaled, .. }
            | WorkRequest::Write { signaled, .. }
            | WorkRequest::SendInline { signaled, .. }
            | WorkRequest::WriteInline { signaled, .. }
            | WorkRequest::Read { signaled, .. }
            | WorkRequest::WriteImm { signaled, .. }
            | WorkRequest::FetchAdd { signaled, .. }
            | WorkRequest::CmpSwap { signaled, .. } => signaled,
        }
    }
    /// The local buffers (empty for inline requests).
    pub fn local(&self) -> SgList {
        match *self {
            WorkRequest::Send { local, .. }
            | WorkRequest::Write { local, .. }
            | WorkRequest::Read { local, .. }
            | WorkRequest::WriteImm { local, .. } => local,
            WorkRequest::FetchAdd { local, .. } | WorkRequest::CmpSwap { local, .. } => {
                SgList::from(local)
            }
            WorkRequest::SendInline { .. } | WorkRequest::WriteInline { .. } => SgList::EMPTY,
        }
    }
    /// The same request, signaled or not.
    pub fn with_signaled(mut self, on: bool) -> WorkRequest {
        match &mut self {
            WorkRequest::Send { signaled, .. }
            | WorkRequest::Write { signaled, .. }
            | WorkRequest::SendInline { signaled, .. }
            | WorkRequest::WriteInline { signaled, .. }
            | WorkRequest::Read { signaled, .. }
            | WorkRequest::WriteImm { signaled, .. }
            | WorkRequest::FetchAdd { signaled, .. }
            | WorkRequest::CmpSwap { signaled, .. } => *signaled = on,
        }
        self
    }
    /// Octets the request moves.
    pub fn len(&self) -> u32 {
        match *self {
            WorkRequest::SendInline { data, .. } | WorkRequest::WriteInline { data, .. } => {
                data.as_slice().len() as u32
            }
            _ => self.local().total_len(),
        }
    }
    /// Moves no octets.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Kind of a completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcOpcode {
    /// A Send variant left.
    Send,
    /// An RDMA Write left.
    Write,
    /// An RDMA Read's response was delivered.
    Read,
    /// A Send variant was delivered into a posted receive buffer.
    Recv,
    /// An RDMA Write with Immediate left (RFC 7306).
    WriteImm,
    /// An RFC 7306 Immediate Data message consumed a posted receive buffer
    /// (verbs' "RDMA Write with immediate" at the receiver); the immediate
    /// is in [`Completion::imm`], nothing is placed in the buffer.
    RecvRdmaWithImm,
    /// A Fetch and Add's original value was placed (RFC 7306).
    FetchAdd,
    /// A Compare and Swap's original value was placed (RFC 7306).
    CmpSwap,
}

/// Outcome of a work request.
///
/// | status | send queue (Send, Write, Read) | receive (`Recv`) |
/// |---|---|---|
/// | `Success` | handed to the LLP (Send, Write: RFC 5040 §5.5 rule 14) or response delivered (Read: rule 19) | Send delivered |
/// | `LocalProtection(e)` | a local SGE failed its re-check while the message was built; RDMAP local catastrophic Terminate sent instead (RFC 5040 §7.1 case 1) | the buffer failed its check at placement, or an SRQ buffer failed the post checks when this QP took it; DDP local catastrophic Terminate sent (RFC 5041 §7.2 0x0/0x00) |
/// | `LocalLength` | — | the incoming Send is longer than the buffer; DDP untagged *invalid MO* (0x04) or *message too long* (0x05) Terminate sent (RFC 5041 §7.1 checks 3-4) |
/// | `RemoteAccess` | the peer's Terminate quotes this request's message with an RDMAP remote protection error (layer 0, type 1: invalid STag, bounds, access rights, not associated, TO wrap, cannot invalidate; RFC 5040 §7.2) | — |
/// | `RemoteOperation` | the peer's Terminate quotes this request's message with an RDMAP remote operation error (layer 0, type 2: version, unexpected opcode, unspecified) | — |
/// | `BadResponse` | a Read whose response ended short of the requested length (a zero-length response to a non-zero Read included) or skipped or repeated octets; RDMAP remote operation *unspecified* Terminate sent (RFC 5040 §5.2.2, §7.1 case 2) | — |
/// | `RemoteInvalidRequest` | the peer's Terminate quotes this request's message with a DDP untagged buffer error (layer 1, type 2, RFC 5041 §7.2: e.g. no buffer — a Read beyond the peer's IRD — MSN, MO, too long) | — |
/// | `Flushed` | the stream went to error before the request finished, and the error is not attributable to it | the stream went to error before a Send filled it |
///
/// A peer Terminate is attributed when its Terminated DDP Header is an
/// untagged header whose QN and MSN are those of a message of a request
/// still in the send queue. Sends and Writes leave the queue when handed to
/// the LLP (rule 14), so in practice this is an RDMA Read — the one
/// operation the sender can tie to an error (RFC 5040 §7) — or a Send held
/// behind an outstanding Read. Requests after it are `Flushed`, also those
/// already handed to the LLP: the peer dropped everything after the message
/// in error (RFC 5041 §7.1). A tagged
/// header (an RDMA Write's) does not name one request and is not attributed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum WcStatus {
    /// Done.
    Success,
    /// A local buffer failed its checks.
    LocalProtection(AccessError),
    /// A received Send did not fit the receive buffer.
    LocalLength,
    /// The peer refused the request's message with a remote protection error.
    RemoteAccess,
    /// The peer refused the request's message with a remote operation error.
    RemoteOperation,
    /// The peer's DDP refused the request's untagged message.
    RemoteInvalidRequest,
    /// The peer's RDMA Read Response did not match the Read Request (it
    /// ended short of the requested length, or its segments were not
    /// contiguous); we sent an RDMAP remote operation Terminate.
    BadResponse,
    /// The stream went to error before this request finished.
    Flushed,
}

impl WcStatus {
    /// The status of a send-queue request whose message the peer's
    /// Terminate quotes with `code` (see the table above).
    fn from_peer_terminate(code: TermCode) -> Option<WcStatus> {
        match (code.layer, code.etype) {
            (layer::RDMAP, 1) => Some(WcStatus::RemoteAccess),
            (layer::RDMAP, 2) => Some(WcStatus::RemoteOperation),
            (layer::DDP, 2) => Some(WcStatus::RemoteInvalidRequest),
            _ => None,
        }
    }
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
    /// The 32-bit immediate of an RFC 7306 Immediate Data message
    /// ([`WcOpcode::RecvRdmaWithImm`]).
    pub imm: Option<u32>,
}

/// Stream-level events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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
    /// This QP took a buffer from its shared receive queue, which then held
    /// fewer buffers than the limit armed with [`Srq::arm_limit`] (verbs'
    /// SRQ limit event; fires once per arming).
    SrqLimitReached,
}

impl core::fmt::Display for QpEvent {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            QpEvent::LocalError(t) => write!(f, "local error, Terminate queued: {t}"),
            QpEvent::TerminateSent(t) => write!(f, "Terminate sent: {t}"),
            QpEvent::TerminateReceived(t) => write!(f, "Terminate received: {t}"),
            QpEvent::MalformedTerminate(e) => write!(f, "malformed Terminate received: {e}"),
            QpEvent::SrqLimitReached => f.write_str("shared receive queue below its limit"),
        }
    }
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

/// Who ended a stream, and how: what a post on it is refused with
/// ([`PostError::Disconnected`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DisconnectCause {
    /// We closed it gracefully (a disconnect, or the queue pair dropped).
    LocalClose,
    /// We aborted it (an abort, or a graceful close that timed out).
    LocalAbort,
    /// The peer closed it gracefully (its FIN, or its SHUTDOWN).
    PeerClosed,
    /// The peer reset the connection (RST, or ABORT).
    PeerReset,
    /// The transport gave up: the peer stopped answering.
    TimedOut,
    /// The peer's Terminate arrived (RFC 5040 §5.4), with this code.
    TerminateReceived(TermCode),
    /// We sent a Terminate (an error on incoming data, RFC 5040 §7.1).
    TerminateSent(TermCode),
}

impl core::fmt::Display for DisconnectCause {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            DisconnectCause::LocalClose => f.write_str("closed here"),
            DisconnectCause::LocalAbort => f.write_str("aborted here"),
            DisconnectCause::PeerClosed => f.write_str("peer closed the connection"),
            DisconnectCause::PeerReset => f.write_str("peer reset the connection"),
            DisconnectCause::TimedOut => f.write_str("peer stopped answering (timed out)"),
            DisconnectCause::TerminateReceived(c) => write!(f, "Terminate received: {c}"),
            DisconnectCause::TerminateSent(c) => write!(f, "Terminate sent: {c}"),
        }
    }
}

/// Why a post was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PostError {
    /// The stream is not in full operation.
    NotReady(QpState),
    /// The stream is over: the connection was closed, reset or terminated
    /// (by whom and why).
    Disconnected(DisconnectCause),
    /// The queue is full.
    QueueFull,
    /// The local buffer is not usable (STag, PD, rights, bounds).
    Local(AccessError),
    /// An RDMA Read with ORD 0.
    NoOrd,
    /// More than [`MAX_SGE`] entries in a scatter/gather list.
    TooManySge,
    /// The entries of a scatter/gather list add up to more than `u32::MAX`.
    TooLong,
    /// The QP takes its receive buffers from a shared receive queue: post there.
    UsesSrq,
    /// Inline data longer than [`MAX_INLINE`], or than one FPDU holds.
    InlineTooLong,
    /// An atomic's local buffer is not 8 octets long.
    AtomicLength,
}

impl core::fmt::Display for PostError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            PostError::NotReady(s) => write!(f, "queue pair not ready ({s:?})"),
            PostError::Disconnected(c) => write!(f, "disconnected: {c}"),
            PostError::QueueFull => f.write_str("queue full"),
            PostError::Local(e) => write!(f, "local buffer rejected: {e}"),
            PostError::NoOrd => f.write_str("RDMA Read posted but ORD is 0"),
            PostError::TooManySge => write!(f, "more than {MAX_SGE} scatter/gather entries"),
            PostError::TooLong => f.write_str("scatter/gather list longer than 2^32 - 1 octets"),
            PostError::UsesSrq => {
                f.write_str("queue pair uses a shared receive queue; post receives there")
            }
            PostError::InlineTooLong => {
                write!(f, "inline data over {MAX_INLINE} octets or over one FPDU")
            }
            PostError::AtomicLength => f.write_str("atomic local buffer is not 8 octets"),
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

/// Check every non-empty entry of `sgl` for `need` (zero-length entries
/// are never validated, RFC 5041 §5.2).
fn check_sgl(mem: &MemoryTable, pd: PdId, need: Access, sgl: &SgList) -> Result<(), AccessError> {
    for sge in sgl.as_slice().iter().filter(|s| s.len > 0) {
        mem.check(sge.stag, pd, need, sge.to, sge.len as u64)?;
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SqState {
    Queued,
    Sending,
    AwaitResponse,
    /// Handed to the LLP as descriptors of registered memory
    /// ([`crate::txq`]): completes once the LLP acknowledges it.
    AwaitAck,
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
    /// QN and MSN of its untagged message once sent (Send, Read Request):
    /// what a peer Terminate's DDP header names it by.
    untagged: Option<(u32, u32)>,
    /// The poster's tag ([`Qp::post_send_tagged`]), handed back with the
    /// completion.
    tag: u64,
}

impl SqEntry {
    fn new(work: SqWork, tag: u64) -> Self {
        SqEntry {
            work,
            state: SqState::Queued,
            untagged: None,
            tag,
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct PendingRead {
    seq: u64,
    /// The Data Sink STag and TO the Read Request advertised.
    sink: Sge,
    /// Where the response goes: message offset k lands at offset k of the list.
    sgl: SgList,
    received: u64,
}

/// An Atomic Request sent and not yet answered (counted against ORD with
/// the outstanding Reads).
#[derive(Debug, Clone, Copy)]
struct PendingAtomic {
    seq: u64,
    req_id: u32,
    /// Where the original value goes.
    local: Sge,
}

/// A response the responder owes, in request order (RFC 5040 §5.2.2): a
/// Read Response, or (`atomic`) an RFC 7306 Atomic Response whose
/// operation already ran.
#[derive(Debug, Clone, Copy)]
struct ReadResp {
    req: ReadRequest,
    hdr: UntaggedHeader,
    atomic: Option<AtomicResponse>,
}

#[derive(Debug, Clone, Copy)]
enum JobOrigin {
    Sq(u64),
    ReadResp,
    Terminate,
}

/// The next FPDU of the current job (`tx.job`, which holds its inline
/// body), planned: header and source ranges.
#[derive(Debug, Clone, Copy)]
struct Plan {
    hdr: [u8; UNTAGGED_HEADER_LEN],
    hdr_len: usize,
    src: Pieces,
    chunk: u64,
    last: bool,
}

impl Plan {
    const EMPTY: Plan = Plan {
        hdr: [0; UNTAGGED_HEADER_LEN],
        hdr_len: 0,
        src: Pieces::EMPTY,
        chunk: 0,
        last: false,
    };
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
    /// Inline body (Read Request, Terminate, or inline Send/Write data),
    /// repeated in every FPDU of the job (so only one-FPDU jobs carry data
    /// this way).
    inline: [u8; INLINE_BODY],
    inline_len: usize,
    /// Memory source (gathered in order) and the right it needs.
    src: Option<(SgList, Access)>,
    len: u64,
    off: u64,
    zero_fpdu: bool,
}

/// A posted receive (on the QP's own queue or on a shared one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) sgl: SgList,
}

/// Where the payload of the current segment goes. `Scatter`: a Read
/// Response or Send payload spread over the sink's entries.
#[derive(Debug, Clone, Copy)]
enum Target {
    None,
    Discard,
    Tagged {
        range: Range,
    },
    Scatter(Pieces),
    ReadReq {
        mo: usize,
    },
    Term {
        mo: usize,
    },
    /// An Immediate Data or Atomic Response body (`Rx::small`).
    Small {
        mo: usize,
    },
}

#[derive(Debug)]
struct Rx {
    rq: VecDeque<RecvWr>,
    /// The buffer of the QN 0 message being received, taken from `rq` or the
    /// SRQ when its first segment arrived (RFC 5041 §7.1 check 2).
    cur: Option<RecvWr>,
    /// How `cur` completes if the stream goes to error (else `Flushed`).
    cur_status: Option<WcStatus>,
    /// Goes with `pending`: the status the error gives `cur`.
    pending_status: Option<WcStatus>,
    /// Goes with `pending`: the status the error gives the outstanding
    /// RDMA Read at the head of `Tx::reads` (else it is `Flushed`).
    pending_read: Option<WcStatus>,
    expected_msn: [u32; 4],
    hdr: Option<DdpHeader>,
    seg_len: u16,
    payload_len: usize,
    placed: usize,
    target: Target,
    pending: Option<TermInfo>,
    dead: bool,
    /// A QN 1 body: Read Request or Atomic Request.
    read_req: [u8; ATOMIC_REQUEST_LEN],
    read_req_len: usize,
    term: [u8; MAX_TERMINATE_LEN],
    term_len: usize,
    /// An Immediate Data (QN 0) or Atomic Response (QN 3) body.
    small: [u8; ATOMIC_RESPONSE_LEN],
    small_len: usize,
}

#[derive(Debug)]
struct Tx {
    sq: VecDeque<SqEntry>,
    /// Sequence number of `sq[0]`.
    head_seq: u64,
    /// Next SQ entry to transmit.
    next_seq: u64,
    msn: [u32; 4],
    reads: VecDeque<PendingRead>,
    atomics: VecDeque<PendingAtomic>,
    next_atomic_id: u32,
    resp: VecDeque<ReadResp>,
    job: Option<Job>,
    terminate: Option<TerminateRepr>,
}

/// One RDMAP stream over MPA or over DDP/SCTP segments.
#[derive(Debug)]
pub struct Qp {
    cfg: QpConfig,
    srq: Option<Srq>,
    state: QpState,
    llp: Lower,
    rx: Rx,
    tx: Tx,
    /// Each with its request's tag (send queue; 0 for receives).
    completions: VecDeque<(Completion, u64)>,
    events: VecDeque<QpEvent>,
    stats: QpStats,
    /// The Terminate that ended the stream, sent or received (the first).
    ended_by: Option<DisconnectCause>,
}

/// Everything the receive path needs, borrowed apart from the deframer.
struct RxCtx<'a> {
    cfg: &'a QpConfig,
    srq: Option<&'a Srq>,
    rx: &'a mut Rx,
    tx: &'a mut Tx,
    mem: &'a mut MemoryTable,
    completions: &'a mut VecDeque<(Completion, u64)>,
    events: &'a mut VecDeque<QpEvent>,
    stats: &'a mut QpStats,
    /// The first error raised while processing this call.
    raised: Option<TermInfo>,
    /// The peer's Terminate was delivered during this call.
    peer_terminated: bool,
    /// Its decoded contents, if it decoded.
    peer_terminate: Option<TerminateRepr>,
}

impl Qp {
    /// A stream in full operation (after the MPA exchange).
    pub fn new(cfg: QpConfig) -> Self {
        Self::build(cfg, None)
    }

    /// A stream in full operation that takes the buffers of incoming Sends
    /// (untagged QN 0) from `srq` instead of its own receive queue;
    /// [`post_recv`](Self::post_recv) then fails with [`PostError::UsesSrq`].
    /// Several QPs may share one SRQ. A buffer is validated against the
    /// memory table (local write, this QP's PD) when this QP takes it; its
    /// completion appears on this QP with the `wr_id` posted to the SRQ.
    ///
    /// The SRQ is a constructor argument rather than a [`QpConfig`] field so
    /// that `QpConfig` stays `Copy` and its literals elsewhere stay valid.
    pub fn with_srq(cfg: QpConfig, srq: Srq) -> Self {
        Self::build(cfg, Some(srq))
    }

    /// A stream in full operation over `lower`, with or without a shared
    /// receive queue. [`LowerLayer::Mpa`] is [`Qp::new`] / [`Qp::with_srq`];
    /// [`LowerLayer::Segments`] runs over DDP/SCTP (RFC 5043): segments go
    /// in through [`receive_segment`](Self::receive_segment) and out through
    /// [`poll_segment`](Self::poll_segment), and `cfg.crc` and the marker
    /// flags are ignored.
    pub fn with_lower(cfg: QpConfig, srq: Option<Srq>, lower: LowerLayer) -> Self {
        let mut qp = Self::build(cfg, srq);
        if let LowerLayer::Segments(s) = lower {
            qp.llp = Lower::Segments(llp::SegmentOrder::new(s));
        }
        qp
    }

    fn build(cfg: QpConfig, srq: Option<Srq>) -> Self {
        let mut cfg = cfg;
        cfg.mulpdu = cfg.mulpdu.max(QpConfig::MIN_MULPDU);
        Qp {
            llp: Lower::Mpa {
                framer: Framer::new(cfg.crc, cfg.markers_tx),
                deframer: Deframer::new(cfg.crc, cfg.markers_rx),
            },
            rx: Rx {
                rq: VecDeque::new(),
                cur: None,
                cur_status: None,
                pending_status: None,
                pending_read: None,
                // RFC 5041 §4.3: the first MSN on each queue is one.
                expected_msn: [1; 4],
                hdr: None,
                seg_len: 0,
                payload_len: 0,
                placed: 0,
                target: Target::None,
                pending: None,
                dead: false,
                read_req: [0; ATOMIC_REQUEST_LEN],
                read_req_len: 0,
                term: [0; MAX_TERMINATE_LEN],
                term_len: 0,
                small: [0; ATOMIC_RESPONSE_LEN],
                small_len: 0,
            },
            tx: Tx {
                sq: VecDeque::new(),
                head_seq: 0,
                next_seq: 0,
                msn: [1; 4],
                reads: VecDeque::new(),
                atomics: VecDeque::new(),
                next_atomic_id: 0,
                resp: VecDeque::new(),
                job: None,
                terminate: None,
            },
            cfg,
            srq,
            state: QpState::Rts,
            completions: VecDeque::new(),
            events: VecDeque::new(),
            stats: QpStats::default(),
            ended_by: None,
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
    /// Posted receive buffers not yet consumed (on this QP's own queue,
    /// counting one an incoming Send is filling).
    pub fn posted_recvs(&self) -> usize {
        self.rx.rq.len() + usize::from(self.rx.cur.is_some())
    }

    /// The shared receive queue this QP takes its buffers from.
    pub fn srq(&self) -> Option<&Srq> {
        self.srq.as_ref()
    }

    /// True when nothing is queued to transmit.
    pub fn tx_idle(&self) -> bool {
        self.tx.job.is_none()
            && self.tx.terminate.is_none()
            && self.tx.resp.is_empty()
            && (self.state != QpState::Rts
                || self.tx.next_seq == self.tx.head_seq + self.tx.sq.len() as u64)
    }

    /// Post a receive buffer: an [`Sge`] or an [`SgList`] that an incoming
    /// Send fills in order. Every non-empty entry needs local write; a Send
    /// longer than the list's total completes it with
    /// [`WcStatus::LocalLength`].
    pub fn post_recv(
        &mut self,
        mem: &MemoryTable,
        wr_id: u64,
        sgl: impl Into<SgList>,
    ) -> Result<(), PostError> {
        let sgl = sgl.into();
        if self.srq.is_some() {
            return Err(PostError::UsesSrq);
        }
        if self.state != QpState::Rts {
            return Err(self.not_ready());
        }
        if self.posted_recvs() >= self.cfg.rq_depth {
            return Err(PostError::QueueFull);
        }
        check_sgl(mem, self.cfg.pd, Access::LOCAL_WRITE, &sgl).map_err(PostError::Local)?;
        self.rx.rq.push_back(RecvWr { wr_id, sgl });
        Ok(())
    }

    /// Post a send-queue request. Every local entry is checked now (local
    /// read for Send and Write, local write for a Read sink) and again for
    /// each segment when the message is built.
    pub fn post_send(&mut self, mem: &MemoryTable, wr: WorkRequest) -> Result<(), PostError> {
        self.post_send_tagged(mem, wr, 0)
    }

    /// [`post_send`](Self::post_send) with a tag the queue pair keeps with
    /// the request and hands back with its completion
    /// ([`poll_completion_tagged`](Self::poll_completion_tagged)); it means
    /// nothing to the queue pair. The stack tags each request with the
    /// time of its post on the loop's clock, and so learns the request's
    /// latency when it completes without a table of its own.
    pub fn post_send_tagged(
        &mut self,
        mem: &MemoryTable,
        wr: WorkRequest,
        tag: u64,
    ) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(self.not_ready());
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
            WorkRequest::WriteImm { .. }
            | WorkRequest::FetchAdd { .. }
            | WorkRequest::CmpSwap { .. } => return self.post_rfc7306(mem, wr, tag),
            WorkRequest::SendInline { data, .. } | WorkRequest::WriteInline { data, .. } => {
                // One FPDU: header + payload within the MULPDU.
                if UNTAGGED_HEADER_LEN + data.as_slice().len() > usize::from(self.cfg.mulpdu) {
                    return Err(PostError::InlineTooLong);
                }
                Access::LOCAL_READ
            }
            _ => Access::LOCAL_READ,
        };
        check_sgl(mem, self.cfg.pd, need, &local).map_err(PostError::Local)?;
        self.tx.sq.push_back(SqEntry::new(SqWork::Wr(wr), tag));
        Ok(())
    }

    /// [`post_send_tagged`](Self::post_send_tagged) for the RFC 7306
    /// requests, out of line: the Send/Write/Read post path stays as it was.
    #[cold]
    #[inline(never)]
    fn post_rfc7306(
        &mut self,
        mem: &MemoryTable,
        wr: WorkRequest,
        tag: u64,
    ) -> Result<(), PostError> {
        match wr {
            WorkRequest::FetchAdd { local, .. } | WorkRequest::CmpSwap { local, .. } => {
                // RFC 7306 §5: requests count against ORD, as Reads do.
                if self.cfg.ord == 0 {
                    return Err(PostError::NoOrd);
                }
                if local.len != 8 {
                    return Err(PostError::AtomicLength);
                }
                check_sgl(mem, self.cfg.pd, Access::LOCAL_WRITE, &SgList::from(local))
                    .map_err(PostError::Local)?;
            }
            WorkRequest::WriteImm {
                wr_id,
                local,
                remote_stag,
                remote_to,
                ..
            } if local.total_len() > 0 => {
                // The RDMA Write goes first, as an unsignaled entry of its
                // own (a failure still completes it, with this wr_id); the
                // Immediate Data entry after it completes the request.
                if self.tx.sq.len() + 2 > self.cfg.sq_depth {
                    return Err(PostError::QueueFull);
                }
                check_sgl(mem, self.cfg.pd, Access::LOCAL_READ, &local)
                    .map_err(PostError::Local)?;
                let write = WorkRequest::Write {
                    wr_id,
                    signaled: false,
                    local,
                    remote_stag,
                    remote_to,
                };
                self.tx.sq.push_back(SqEntry::new(SqWork::Wr(write), tag));
            }
            _ => {}
        }
        self.tx.sq.push_back(SqEntry::new(SqWork::Wr(wr), tag));
        Ok(())
    }

    /// Queue the RFC 6581 ready-to-receive message (peer-to-peer mode initiator).
    /// It produces no completion.
    pub fn post_rtr(&mut self, kind: RtrKind) -> Result<(), PostError> {
        if self.state != QpState::Rts {
            return Err(self.not_ready());
        }
        self.tx.sq.push_back(SqEntry::new(SqWork::Rtr(kind), 0));
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

    /// What a post is refused with outside full operation: the Terminate
    /// that ended the stream if one did.
    fn not_ready(&self) -> PostError {
        match (self.state, self.ended_by) {
            (QpState::Error, Some(c)) => PostError::Disconnected(c),
            (s, _) => PostError::NotReady(s),
        }
    }

    /// The Terminate that ended the stream (sent or received), if one did.
    pub fn disconnect_cause(&self) -> Option<DisconnectCause> {
        self.ended_by
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
        self.completions.pop_front().map(|(c, _)| c)
    }

    /// Next completion with the tag its request was posted with
    /// ([`post_send_tagged`](Self::post_send_tagged); 0 for a request
    /// posted untagged and for a receive).
    pub fn poll_completion_tagged(&mut self) -> Option<(Completion, u64)> {
        self.completions.pop_front()
    }

    /// Next stream event.
    pub fn poll_event(&mut self) -> Option<QpEvent> {
        self.events.pop_front()
    }

    /// Feed octets received on the stream (any cut). Only for a QP over
    /// [`LowerLayer::Mpa`]; on one over segments this is a local error
    /// (RDMAP local catastrophic Terminate).
    pub fn receive(&mut self, data: &[u8], mem: &mut MemoryTable) {
        self.stats.stream_rx += data.len() as u64;
        if self.rx.dead || self.state == QpState::Error {
            // RFC 5041 §7.1: after an error DDP silently drops what follows.
            return;
        }
        let Lower::Mpa { deframer, .. } = &mut self.llp else {
            self.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
            return;
        };
        let mut ctx = RxCtx {
            cfg: &self.cfg,
            srq: self.srq.as_ref(),
            rx: &mut self.rx,
            tx: &mut self.tx,
            mem,
            completions: &mut self.completions,
            events: &mut self.events,
            stats: &mut self.stats,
            raised: None,
            peer_terminated: false,
            peer_terminate: None,
        };
        let r = deframer.feed(data, &mut ctx);
        if r.is_ok() && ctx.raised.is_none() && !ctx.peer_terminated {
            // The common case, kept short (it runs per segment): nothing
            // raised, no Terminate; only a Read this placed may complete.
            if !self.tx.sq.is_empty() {
                self.drain_sq();
            }
            return;
        }
        let raised = ctx.raised;
        let term_rx = ctx.peer_terminated;
        let peer_terminate = ctx.peer_terminate;
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
        self.after_receive(raised, term_rx, peer_terminate);
    }

    /// Feed one whole DDP Segment with its DDP-SSN, as DDP over SCTP
    /// delivers it (RFC 5043 §5.2.2, §10: unordered). Segments are
    /// processed in DDP-SSN order: one ahead of the next expected is held
    /// until the gap fills (see [`llp`]). Only for a QP over
    /// [`LowerLayer::Segments`]; on one over MPA this is a local error
    /// (RDMAP local catastrophic Terminate).
    pub fn receive_segment(&mut self, ddp_ssn: u16, segment: &[u8], mem: &mut MemoryTable) {
        self.stats.stream_rx += segment.len() as u64;
        if self.rx.dead || self.state == QpState::Error {
            // RFC 5041 §7.1: after an error DDP silently drops what follows.
            return;
        }
        let Lower::Segments(order) = &mut self.llp else {
            self.terminate(TermCode::RDMAP_LOCAL_CATASTROPHIC);
            return;
        };
        let mut ctx = RxCtx {
            cfg: &self.cfg,
            srq: self.srq.as_ref(),
            rx: &mut self.rx,
            tx: &mut self.tx,
            mem,
            completions: &mut self.completions,
            events: &mut self.events,
            stats: &mut self.stats,
            raised: None,
            peer_terminated: false,
            peer_terminate: None,
        };
        match order.arrive(ddp_ssn, segment) {
            Ok(Arrival::InOrder) => {
                ctx.whole_segment(segment);
                order.advance();
                while !ctx.rx.dead {
                    let Some(s) = order.pop_ready() else { break };
                    ctx.whole_segment(&s);
                    order.advance();
                }
            }
            Ok(Arrival::Held) => {}
            // RFC 5043 §10: an invalid DDP-SSN MAY terminate the DDP stream;
            // so do a duplicate, too much held and a length no DDP Segment
            // can have. RFC 5043 has no LLP error codes: RDMAP catastrophic,
            // localized to the stream (RFC 5040 §4.8).
            Err(OrderError::OutOfWindow { .. })
            | Err(OrderError::Duplicate(_))
            | Err(OrderError::TooMuchHeld)
            | Err(OrderError::BadLength(_)) => ctx.raise(TermInfo {
                code: TermCode::RDMAP_CATASTROPHIC_STREAM,
                hdr: None,
                seg_len: 0,
                rdma: None,
            }),
        }
        let raised = ctx.raised;
        let term_rx = ctx.peer_terminated;
        let peer_terminate = ctx.peer_terminate;
        if self.rx.dead {
            order.clear();
        }
        self.after_receive(raised, term_rx, peer_terminate);
    }

    /// Counters of the segment lower layer (`None` over MPA).
    pub fn segment_stats(&self) -> Option<SegmentStats> {
        match &self.llp {
            Lower::Segments(o) => Some(o.stats()),
            Lower::Mpa { .. } => None,
        }
    }

    /// Segments and octets held waiting for an earlier DDP-SSN (zero over MPA).
    pub fn segments_held(&self) -> (usize, usize) {
        match &self.llp {
            Lower::Segments(o) => o.held(),
            Lower::Mpa { .. } => (0, 0),
        }
    }

    /// The next DDP Segment to send, appended whole to `out` (no MPA
    /// framing): at most MULPDU octets (RFC 5043 §9, RFC 5041 §5.2). Returns
    /// its length, or `None` when there is nothing to send. Only for a QP
    /// over [`LowerLayer::Segments`] (`None` over MPA).
    pub fn poll_segment(&mut self, mem: &MemoryTable, out: &mut dyn TxBuf) -> Option<usize> {
        if !matches!(self.llp, Lower::Segments(_)) {
            return None;
        }
        // Nothing queued (most polls): no plan to build.
        if self.tx_idle() {
            self.drain_sq();
            return None;
        }
        match self.poll_transmit(mem, out, usize::MAX, 1) {
            0 => None,
            n => Some(n),
        }
    }

    /// Common end of [`receive`](Self::receive) and
    /// [`receive_segment`](Self::receive_segment).
    fn after_receive(
        &mut self,
        raised: Option<TermInfo>,
        term_rx: bool,
        peer_terminate: Option<TerminateRepr>,
    ) {
        if let Some(t) = raised {
            self.raise(t);
        } else if term_rx && self.state != QpState::Error {
            if let Some(t) = peer_terminate {
                self.attribute_terminate(&t);
                self.ended_by
                    .get_or_insert(DisconnectCause::TerminateReceived(t.code));
            }
            // RFC 5040 §5.4: after a Terminate the stream is done; we stop sending.
            self.state = QpState::Error;
            self.tx.terminate = None;
            self.flush();
        }
        self.drain_sq();
    }

    /// Give the send-queue request whose untagged message the peer's
    /// Terminate quotes the matching status (table at [`WcStatus`]).
    fn attribute_terminate(&mut self, t: &TerminateRepr) {
        let Some(DdpHeader::Untagged(u)) = t.ddp_header else {
            return;
        };
        let Some(status) = WcStatus::from_peer_terminate(t.code) else {
            return;
        };
        let Some(i) = self
            .tx
            .sq
            .iter()
            .position(|e| matches!(e.work, SqWork::Wr(_)) && e.untagged == Some((u.qn, u.msn)))
        else {
            return;
        };
        self.tx.sq[i].state = SqState::Done(status);
        // RFC 5041 §7.1: the peer dropped every segment after the one in error,
        // so what we handed to the LLP after it did not arrive either.
        for e in self.tx.sq.iter_mut().skip(i + 1) {
            if e.state == SqState::Done(WcStatus::Success) {
                e.state = SqState::Done(WcStatus::Flushed);
            }
        }
    }

    /// The MPA error that stopped reception, if any.
    pub fn mpa_error(&self) -> Option<MpaError> {
        match &self.llp {
            Lower::Mpa { deframer, .. } => deframer.error(),
            Lower::Segments(_) => None,
        }
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
        self.tx.atomics.clear();
        self.tx.resp.clear();
        self.tx.job = None;
        self.tx.next_seq = self.tx.head_seq + self.tx.sq.len() as u64;
        // The buffer a Send was filling goes first (it was posted first). With
        // an SRQ, only that one is this QP's: the rest stay for other QPs.
        if let Some(r) = self.rx.cur.take() {
            self.completions.push_back((
                Completion {
                    wr_id: r.wr_id,
                    opcode: WcOpcode::Recv,
                    status: self.rx.cur_status.take().unwrap_or(WcStatus::Flushed),
                    byte_len: 0,
                    solicited: false,
                    invalidated: None,
                    imm: None,
                },
                0,
            ));
        }
        while let Some(r) = self.rx.rq.pop_front() {
            self.completions.push_back((
                Completion {
                    wr_id: r.wr_id,
                    opcode: WcOpcode::Recv,
                    status: WcStatus::Flushed,
                    byte_len: 0,
                    solicited: false,
                    invalidated: None,
                    imm: None,
                },
                0,
            ));
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
                if status == WcStatus::Success && !wr.signaled() {
                    // Unsignaled: done, in order, silently.
                    continue;
                }
                let opcode = match wr {
                    WorkRequest::Send { .. } | WorkRequest::SendInline { .. } => WcOpcode::Send,
                    WorkRequest::Write { .. } | WorkRequest::WriteInline { .. } => WcOpcode::Write,
                    WorkRequest::Read { .. } => WcOpcode::Read,
                    WorkRequest::WriteImm { .. } => WcOpcode::WriteImm,
                    WorkRequest::FetchAdd { .. } => WcOpcode::FetchAdd,
                    WorkRequest::CmpSwap { .. } => WcOpcode::CmpSwap,
                };
                let len = wr.len();
                self.completions.push_back((
                    Completion {
                        wr_id: wr.wr_id(),
                        opcode,
                        status,
                        byte_len: if status == WcStatus::Success { len } else { 0 },
                        solicited: false,
                        invalidated: None,
                        imm: None,
                    },
                    e.tag,
                ));
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
            inline: [0; INLINE_BODY],
            inline_len: 0,
            src: None,
            len: 0,
            off: 0,
            zero_fpdu: false,
        };
        if let Some(t) = self.tx.terminate {
            let (body, n) = t.to_array();
            let mut inline = [0; INLINE_BODY];
            inline[..n].copy_from_slice(&body[..n]);
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
            if let Some(a) = r.atomic {
                // RFC 7306 §4: Atomic Responses go on QN 3, one MSN each.
                let msn = self.tx.msn[3];
                self.tx.msn[3] = msn.wrapping_add(1);
                let mut inline = [0; INLINE_BODY];
                let _ = a.emit(&mut inline);
                return Some(Job {
                    origin: JobOrigin::ReadResp,
                    opcode: Opcode::AtomicResponse,
                    qn: queue::ATOMIC_RESPONSE,
                    msn,
                    inline,
                    inline_len: ATOMIC_RESPONSE_LEN,
                    ..blank
                });
            }
            return Some(Job {
                origin: JobOrigin::ReadResp,
                opcode: Opcode::ReadResponse,
                stag: req.sink_stag,
                to: req.sink_to,
                src: (req.size > 0).then_some((
                    SgList::from(Sge {
                        stag: STag(req.src_stag),
                        to: req.src_to,
                        len: req.size,
                    }),
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
                    src: Some((local, Access::LOCAL_READ)),
                    len: local.total_len() as u64,
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::SendInline {
                data,
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
                let mut inline = [0; INLINE_BODY];
                inline[..data.as_slice().len()].copy_from_slice(data.as_slice());
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode,
                    qn: queue::SEND,
                    msn,
                    inval: invalidate.map_or(0, |s| s.0),
                    inline,
                    inline_len: data.as_slice().len(),
                    ..blank
                }
            }
            SqWork::Wr(WorkRequest::WriteInline {
                data,
                remote_stag,
                remote_to,
                ..
            }) => {
                let mut inline = [0; INLINE_BODY];
                inline[..data.as_slice().len()].copy_from_slice(data.as_slice());
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: Opcode::Write,
                    stag: remote_stag.0,
                    to: remote_to,
                    inline,
                    inline_len: data.as_slice().len(),
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
                src: Some((local, Access::LOCAL_READ)),
                len: local.total_len() as u64,
                ..blank
            },
            SqWork::Wr(WorkRequest::Read {
                local,
                remote_stag,
                remote_to,
                ..
            }) => {
                if self.ord_full() {
                    return None;
                }
                self.read_request_job(seq, local, remote_stag, remote_to, blank)
            }
            SqWork::Wr(
                wr @ (WorkRequest::WriteImm { .. }
                | WorkRequest::FetchAdd { .. }
                | WorkRequest::CmpSwap { .. }),
            ) => self.rfc7306_job(seq, wr, blank)?,
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
                    SgList::from(Sge {
                        stag: STag(1),
                        to: 0,
                        len: 0,
                    }),
                    STag(1),
                    0,
                    blank,
                )
            }
        };
        self.tx.next_seq += 1;
        if let Some(e) = self.sq_entry(seq) {
            e.state = SqState::Sending;
            if job.opcode.tagged() == Some(false) && !job.zero_fpdu {
                e.untagged = Some((job.qn, job.msn));
            }
        }
        Some(job)
    }

    /// [`next_job`](Self::next_job) for the RFC 7306 requests, out of
    /// line (`None`: an atomic held back by ORD).
    #[cold]
    #[inline(never)]
    fn rfc7306_job(&mut self, seq: u64, wr: WorkRequest, blank: Job) -> Option<Job> {
        Some(match wr {
            WorkRequest::WriteImm { imm, solicited, .. } => {
                // RFC 7306 §6: Immediate Data, untagged on QN 0 (after the
                // RDMA Write entry, if any, which went first).
                let msn = self.tx.msn[0];
                self.tx.msn[0] = msn.wrapping_add(1);
                let mut inline = [0; INLINE_BODY];
                let _ = ImmediateData::from_imm32(imm).emit(&mut inline);
                Job {
                    origin: JobOrigin::Sq(seq),
                    opcode: if solicited {
                        Opcode::ImmediateDataSe
                    } else {
                        Opcode::ImmediateData
                    },
                    qn: queue::SEND,
                    msn,
                    inline,
                    inline_len: IMMEDIATE_DATA_LEN,
                    ..blank
                }
            }
            WorkRequest::FetchAdd {
                local,
                remote_stag,
                remote_to,
                add,
                ..
            } => {
                if self.ord_full() {
                    return None;
                }
                let req = AtomicRequest {
                    op: AtomicOp::FetchAdd,
                    req_id: 0,
                    stag: remote_stag.0,
                    to: remote_to,
                    add_swap: add,
                    add_swap_mask: 0,
                    compare: 0,
                    compare_mask: 0,
                };
                self.atomic_request_job(seq, local, req, blank)
            }
            WorkRequest::CmpSwap {
                local,
                remote_stag,
                remote_to,
                compare,
                swap,
                ..
            } => {
                if self.ord_full() {
                    return None;
                }
                let req = AtomicRequest {
                    op: AtomicOp::CmpSwap,
                    req_id: 0,
                    stag: remote_stag.0,
                    to: remote_to,
                    add_swap: swap,
                    add_swap_mask: u64::MAX,
                    compare,
                    compare_mask: u64::MAX,
                };
                self.atomic_request_job(seq, local, req, blank)
            }
            _ => return None,
        })
    }

    /// Every ORD slot is taken by an outstanding Read or atomic (RFC 5040
    /// §6.1, RFC 7306 §4): the next one waits.
    fn ord_full(&self) -> bool {
        self.tx.reads.len() + self.tx.atomics.len() >= self.cfg.ord as usize
    }

    /// An Atomic Request on QN 1 (RFC 7306 §4), counted against ORD from
    /// the moment it is sent, as a Read Request is (RFC 5040 §6.1).
    fn atomic_request_job(&mut self, seq: u64, local: Sge, req: AtomicRequest, blank: Job) -> Job {
        let req_id = self.tx.next_atomic_id;
        self.tx.next_atomic_id = req_id.wrapping_add(1);
        let req = AtomicRequest { req_id, ..req };
        let msn = self.tx.msn[1];
        self.tx.msn[1] = msn.wrapping_add(1);
        let mut inline = [0u8; INLINE_BODY];
        let _ = req.emit(&mut inline);
        self.tx
            .atomics
            .push_back(PendingAtomic { seq, req_id, local });
        Job {
            origin: JobOrigin::Sq(seq),
            opcode: Opcode::AtomicRequest,
            qn: queue::READ_REQUEST,
            msn,
            inline,
            inline_len: ATOMIC_REQUEST_LEN,
            ..blank
        }
    }

    fn read_request_job(
        &mut self,
        seq: u64,
        local: SgList,
        remote_stag: STag,
        remote_to: u64,
        blank: Job,
    ) -> Job {
        let sink = local.advertised();
        let req = ReadRequest {
            sink_stag: sink.stag.0,
            sink_to: sink.to,
            size: local.total_len(),
            src_stag: remote_stag.0,
            src_to: remote_to,
        };
        let msn = self.tx.msn[1];
        self.tx.msn[1] = msn.wrapping_add(1);
        let mut inline = [0u8; INLINE_BODY];
        let _ = req.emit(&mut inline);
        // RFC 5040 §6.1: counted against ORD from the moment it is sent.
        self.tx.reads.push_back(PendingRead {
            seq,
            sink: Sge {
                len: req.size,
                ..sink
            },
            sgl: local,
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
    /// Over [`LowerLayer::Segments`] it appends bare DDP Segments whose
    /// boundaries the caller cannot see: use [`poll_segment`](Self::poll_segment).
    pub fn poll_transmit(
        &mut self,
        mem: &MemoryTable,
        out: &mut dyn TxBuf,
        max_bytes: usize,
        max_fpdus: usize,
    ) -> usize {
        let start = out.len();
        let mut fpdus = 0;
        while fpdus < max_fpdus {
            let mut plan = Plan::EMPTY;
            if !self.plan_fpdu(mem, max_bytes - (out.len() - start), &mut plan) {
                break;
            }
            match self.emit_plan(mem, &plan, out) {
                Some(true) => {}
                Some(false) => continue,
                None => break,
            }
            fpdus += 1;
            self.finish_fpdu(&plan, false);
        }
        let n = out.len() - start;
        self.stats.stream_tx += n as u64;
        self.drain_sq();
        n
    }

    /// Frame a planned FPDU into `out`, its payload copied from registered
    /// memory. `Some(false)`: a source is no longer readable (the job
    /// completed in error); `None`: the framer refused (cannot happen).
    fn emit_plan(&mut self, mem: &MemoryTable, plan: &Plan, out: &mut dyn TxBuf) -> Option<bool> {
        let job = self.tx.job.as_ref()?;
        // Source bytes, re-checked now, gathered from as many entries as
        // the segment spans.
        let mut payload: [Part<'_>; MAX_SGE] = [Part::Bytes(&[]); MAX_SGE];
        for (p, r) in payload.iter_mut().zip(plan.src.as_slice()) {
            match mem.read(r, 0, r.len) {
                Some(slice) => *p = Part::Region(slice),
                None => {
                    let job = *job;
                    self.local_build_error(job, AccessError::InvalidStag);
                    return Some(false);
                }
            }
        }
        let n = plan.src.n;
        let mut parts: [Part<'_>; 2 + MAX_SGE] = [Part::Bytes(&[]); 2 + MAX_SGE];
        parts[0] = Part::Bytes(&plan.hdr[..plan.hdr_len]);
        parts[1] = Part::Bytes(&job.inline[..job.inline_len]);
        parts[2..2 + n].copy_from_slice(&payload[..n]);
        // Cannot fail: ulpdu_len <= mulpdu <= u16::MAX.
        self.llp.emit_parts(&parts[..2 + n], out).ok()?;
        Some(true)
    }

    /// Whether [`poll_record`](Self::poll_record) can describe this QP's
    /// FPDUs: over MPA without markers (markers depend on the stream
    /// position, so those FPDUs are framed as octets by
    /// [`poll_transmit`](Self::poll_transmit)).
    pub fn can_describe(&self) -> bool {
        match &self.llp {
            Lower::Mpa { framer, .. } => !framer.markers(),
            Lower::Segments(_) => false,
        }
    }

    /// The next FPDU, if one fits in `max_bytes`, as a record for a
    /// transport that asks for each segment's octets when it builds the
    /// frame ([`crate::txq`]): one-copy transmit.
    ///
    /// An FPDU of a Send or Write shorter than `copy_below` octets is
    /// framed as octets ([`TxRecord::Bytes`], one copy more) and the
    /// request completes once handed over, as with
    /// [`poll_transmit`](Self::poll_transmit): a small message costs
    /// little to copy, and its completion then waits for no ACK. So is an
    /// FPDU whose inline body passes what a descriptor holds (inline data
    /// above 44 octets). Every other FPDU is a descriptor of registered
    /// memory ([`TxRecord::Fpdu`]), and the Send or Write it ends completes
    /// when the caller reports it acknowledged
    /// ([`fpdu_acked`](Self::fpdu_acked)). The record goes on `txq`;
    /// returns whether one did (false when nothing is ready, it does not
    /// fit, or [`can_describe`](Self::can_describe) is false).
    pub fn poll_record(
        &mut self,
        mem: &MemoryTable,
        max_bytes: usize,
        copy_below: u64,
        txq: &mut TxQueue,
    ) -> bool {
        // Nothing queued (most polls of a connection): no plan to build.
        if !self.can_describe() || self.tx_idle() {
            return false;
        }
        let crc_on = match &self.llp {
            Lower::Mpa { framer, .. } => framer.crc(),
            Lower::Segments(_) => false,
        };
        // Planned in place and described straight into the queue: a plan
        // and a descriptor are a few hundred octets, and moving them
        // through return values cost more than the copy of the payload
        // that one-copy transmit saves.
        let mut plan = Plan::EMPTY;
        let completes = loop {
            if !self.plan_fpdu(mem, max_bytes, &mut plan) {
                return false;
            }
            let Some(job) = self.tx.job.as_ref() else {
                return false;
            };
            let message = matches!(job.origin, JobOrigin::Sq(_))
                && job.opcode != Opcode::ReadRequest
                && job.opcode != Opcode::AtomicRequest;
            let copy = (message && job.len < copy_below)
                || 2 + plan.hdr_len + job.inline_len > crate::txq::HEAD_MAX;
            if !copy {
                break match job.origin {
                    JobOrigin::Sq(seq) if plan.last && message => Some(seq),
                    _ => None,
                };
            }
            // Sized for the whole FPDU (header, payload, pad, CRC) up front:
            // growing it piece by piece reallocated two or three times per
            // small message.
            let wire = self
                .llp
                .wire_len(plan.hdr_len + job.inline_len + plan.chunk as usize);
            // A buffer an acknowledged record left, when one fits.
            let mut v = txq.buffer(wire);
            match self.emit_plan(mem, &plan, &mut v) {
                Some(true) => {
                    self.stats.stream_tx += v.len() as u64;
                    self.finish_fpdu(&plan, false);
                    self.drain_sq();
                    txq.push(TxRecord::Bytes(v));
                    return true;
                }
                Some(false) => continue,
                None => return false,
            }
        };
        let Some(job) = self.tx.job.as_ref() else {
            return false;
        };
        // Cannot fail: the ULPDU is within MULPDU and the head was checked.
        let Some(wire) = txq.push_fpdu(
            &plan.hdr[..plan.hdr_len],
            &job.inline[..job.inline_len],
            plan.src.as_slice(),
            crc_on,
            completes,
        ) else {
            return false;
        };
        if let Lower::Mpa { framer, .. } = &mut self.llp {
            framer.skip(wire);
        }
        self.stats.stream_tx += wire as u64;
        self.finish_fpdu(&plan, true);
        self.drain_sq();
        true
    }

    /// The FPDU that ended send queue entry `seq` ([`FpduDesc::completes`](crate::txq::FpduDesc::completes))
    /// was acknowledged by the LLP: the request completes (in order, RFC
    /// 5040 §5.5 rule 15).
    pub fn fpdu_acked(&mut self, seq: u64) {
        if let Some(e) = self.sq_entry(seq) {
            if e.state == SqState::AwaitAck {
                e.state = SqState::Done(WcStatus::Success);
            }
        }
        self.drain_sq();
    }

    /// Plan the next FPDU of the current job (`tx.job`, taken from the
    /// queues if none) that fits in `room_left` octets on the wire: its
    /// header and source ranges. A job whose source fails its checks
    /// completes in error here (and the next one is tried).
    fn plan_fpdu(&mut self, mem: &MemoryTable, room_left: usize, plan: &mut Plan) -> bool {
        loop {
            if self.tx.job.is_none() {
                self.tx.job = self.next_job();
            }
            let Some(job) = self.tx.job.as_ref() else {
                return false;
            };
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
            if self.llp.wire_len(ulpdu_len) > room_left {
                return false;
            }
            let last = job.off + chunk == job.len;
            plan.src.n = 0;
            if let Some((sgl, need)) = &job.src {
                if chunk > 0 {
                    match sgl.locate_into(mem, self.cfg.pd, *need, job.off, chunk, &mut plan.src) {
                        Ok(()) => {}
                        Err(e) => {
                            let job = *job;
                            self.local_build_error(job, e);
                            continue;
                        }
                    }
                }
            }
            let hdr = &mut plan.hdr;
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
                let _ = h.emit(hdr);
            }
            plan.hdr_len = hdr_len;
            plan.chunk = chunk;
            plan.last = last;
            return true;
        }
    }

    /// The planned FPDU is on its way: advance the current job, and finish
    /// it after its last FPDU (`by_ref`: handed over as a descriptor, so a
    /// Send or Write completes on acknowledgement).
    fn finish_fpdu(&mut self, plan: &Plan, by_ref: bool) {
        self.stats.fpdus_tx += 1;
        if let Some(job) = &mut self.tx.job {
            job.off += plan.chunk;
        }
        if plan.last {
            if let Some(job) = self.tx.job.take() {
                self.job_done(job, by_ref);
            }
        }
    }

    fn job_done(&mut self, job: Job, by_ref: bool) {
        match job.origin {
            JobOrigin::Terminate => {
                let t = self.tx.terminate.take();
                self.state = QpState::Error;
                self.flush();
                if let Some(t) = t {
                    self.ended_by
                        .get_or_insert(DisconnectCause::TerminateSent(t.code));
                    self.events.push_back(QpEvent::TerminateSent(t));
                }
            }
            JobOrigin::ReadResp => {
                self.tx.resp.pop_front();
            }
            JobOrigin::Sq(seq) => {
                let is_read =
                    job.opcode == Opcode::ReadRequest || job.opcode == Opcode::AtomicRequest;
                if let Some(e) = self.sq_entry(seq) {
                    // RFC 5040 §5.5 rule 14: a Send or Write completes once DDP
                    // has handed it to the LLP; a Read waits for its response (rule 19).
                    // Handed over by reference, the LLP still reads the
                    // application's memory until it is acknowledged (rule 9
                    // allows the later completion).
                    e.state = if is_read {
                        SqState::AwaitResponse
                    } else if by_ref {
                        SqState::AwaitAck
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

    /// An error that also decides how the receive buffer being filled
    /// completes (once the error is raised).
    fn recv_error(&mut self, code: TermCode, status: WcStatus) {
        if self.rx.pending.is_none() {
            self.rx.pending_status = Some(status);
        }
        self.error(code, None);
    }

    /// An error that also decides how the outstanding RDMA Read whose
    /// response is arriving completes (once the error is raised).
    fn read_error(&mut self, code: TermCode, status: WcStatus) {
        if self.rx.pending.is_none() {
            self.rx.pending_read = Some(status);
        }
        self.error(code, None);
    }

    /// Complete the RDMA Read at the head of the outstanding list with
    /// `status`: `Success` when its response is delivered (RFC 5040 §5.5
    /// rule 19), else the stream is going to error and nothing more
    /// arrives for it.
    fn retire_read(&mut self, status: WcStatus) {
        let Some(p) = self.tx.reads.pop_front() else {
            return;
        };
        if let Some(i) = p.seq.checked_sub(self.tx.head_seq) {
            if let Some(e) = self.tx.sq.get_mut(i as usize) {
                e.state = SqState::Done(status);
            }
        }
    }

    /// The local buffer that the current segment's payload goes to (a
    /// receive buffer, or the sink of our RDMA Read) was deregistered or
    /// invalidated by the application after the segment's header was
    /// checked. Place nothing more (RFC 5041 §7.1: cease placing the rest of
    /// the segment; RFC 5040 §8.1.1 item 6). The buffer is ours, not the
    /// peer's, so this is a DDP local catastrophic error (RFC 5041 §7.2
    /// 0x0/0x00), as for a buffer found gone when a segment begins.
    fn local_sink_revoked(&mut self) {
        let status = WcStatus::LocalProtection(AccessError::InvalidStag);
        match self.rx.hdr {
            Some(DdpHeader::Tagged(_)) => self.read_error(TermCode::DDP_LOCAL_CATASTROPHIC, status),
            _ => self.recv_error(TermCode::DDP_LOCAL_CATASTROPHIC, status),
        }
    }

    /// The buffer for the next QN 0 message: the head of our receive queue,
    /// or one from the SRQ, checked now against the memory table (its post
    /// could not be: an SRQ has no PD of its own).
    fn take_recv(&mut self) -> Option<Result<RecvWr, (RecvWr, AccessError)>> {
        let Some(srq) = self.srq else {
            return self.rx.rq.pop_front().map(Ok);
        };
        let (wr, limit) = srq.take();
        if limit {
            self.events.push_back(QpEvent::SrqLimitReached);
        }
        let wr = wr?;
        Some(
            match check_sgl(self.mem, self.cfg.pd, Access::LOCAL_WRITE, &wr.sgl) {
                Ok(()) => Ok(wr),
                Err(e) => Err((wr, e)),
            },
        )
    }

    fn raise(&mut self, t: TermInfo) {
        if self.raised.is_none() {
            self.raised = Some(t);
        }
        self.rx.dead = true;
    }

    /// One whole DDP Segment (the segment lower layer): the same three
    /// steps the MPA deframer drives, with the header taken in place.
    fn whole_segment(&mut self, seg: &[u8]) {
        // `SegmentOrder::arrive` refused empty and over-long segments.
        let Ok(len) = u16::try_from(seg.len()) else {
            return;
        };
        // RFC 5041 §4.2, §4.3: the T bit of the first octet selects the
        // header length; a shorter segment gets what there is, and `begin`
        // reports it as malformed.
        let hlen = if seg.first().is_some_and(|c| c & DdpControl::T != 0) {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
        .min(seg.len());
        self.begin(len, &seg[..hlen]);
        self.data(&seg[hlen..]);
        self.end();
    }

    fn begin(&mut self, ulpdu_len: u16, header: &[u8]) {
        self.rx.hdr = None;
        self.rx.seg_len = ulpdu_len;
        self.rx.placed = 0;
        self.rx.pending = None;
        self.rx.pending_status = None;
        self.rx.pending_read = None;
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
                        if t.to < sink.to || end > sink.to.saturating_add(sink.len as u64) {
                            return self.error(TermCode::DDP_T_BASE_BOUNDS, None);
                        }
                        // RFC 5041 §5.2: each segment's TO is the message's first
                        // TO plus the segment's offset in the message, and MPA/TCP
                        // delivers the segments in order; so the next segment
                        // must start where the previous one ended. Anything else
                        // (a gap, or octets written twice) would let a response
                        // reach the requested length without filling the sink.
                        // The response does not match its request (RFC 5040
                        // §5.2.2): RDMAP remote operation error, and the Read
                        // fails.
                        if t.to - sink.to != pending.received {
                            return self
                                .read_error(TermCode::RDMAP_OP_UNSPECIFIED, WcStatus::BadResponse);
                        }
                        // Message offset t.to - sink.to, scattered over the sink list.
                        match pending.sgl.locate(
                            self.mem,
                            pd,
                            Access::LOCAL_WRITE,
                            t.to - sink.to,
                            payload as u64,
                        ) {
                            Ok(p) => self.rx.target = Target::Scatter(p),
                            // The sink was checked at post time and the peer named
                            // it correctly: the application revoked it since. Our
                            // fault, so DDP local catastrophic (RFC 5041 §7.2
                            // 0x0/0x00), as for a receive buffer that went away.
                            Err(e) => self.read_error(
                                TermCode::DDP_LOCAL_CATASTROPHIC,
                                WcStatus::LocalProtection(e),
                            ),
                        }
                    }
                    _ => self.error(TermCode::RDMAP_UNEXPECTED_OPCODE, None),
                }
            }
            DdpHeader::Untagged(u) => {
                if u.ddp.version() != DDP_VERSION {
                    return self.error(TermCode::DDP_U_INVALID_VERSION, None);
                }
                if u.qn > queue::ATOMIC_RESPONSE {
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
                if matches!(op, Opcode::ImmediateData | Opcode::ImmediateDataSe) {
                    return self.begin_immediate(mo, payload);
                }
                let capacity = match u.qn {
                    queue::SEND => {
                        if self.rx.cur.is_none() {
                            // RFC 5041 §7.1 check 2 (and RFC 5040 §5.3: even a
                            // zero-length Send consumes a buffer).
                            match self.take_recv() {
                                Some(Ok(r)) => self.rx.cur = Some(r),
                                None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                                Some(Err((r, e))) => {
                                    // An SRQ buffer that fails the post checks: our
                                    // fault, not the peer's, so DDP local catastrophic
                                    // (RFC 5041 §7.2 0x0/0x00), as for a posted buffer
                                    // that went away underneath us (below).
                                    self.rx.cur = Some(r);
                                    return self.recv_error(
                                        TermCode::DDP_LOCAL_CATASTROPHIC,
                                        WcStatus::LocalProtection(e),
                                    );
                                }
                            }
                        }
                        self.rx.cur.map_or(0, |r| r.sgl.total_len() as usize)
                    }
                    queue::READ_REQUEST => {
                        // The QN 1 buffers are the IRD we advertised (RFC 5040
                        // §5.2.2, §6.1: inbound Read Requests MUST NOT exceed
                        // it). Every QN 1 segment starts a Read Request (MO 0,
                        // below), so each one is counted, whatever else is
                        // wrong with it (RFC 5041 §7.1 check 2 before 3-4).
                        if self.tx.resp.len() >= self.cfg.ird as usize {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        }
                        // RFC 5040 §4.4, §5.2.1: a Read Request is one
                        // untagged message whose only content is the 28-octet
                        // Read Request Header, one QN 1 buffer each. We take
                        // it in one segment (MULPDU is never below 46 octets
                        // on a real stream), so the only legal MO is 0
                        // (RFC 5041 §7.1 check 3, §7.2 0x2/0x04).
                        if mo != 0 {
                            return self.error(TermCode::DDP_U_INVALID_MO, None);
                        }
                        // RFC 7306 §5: Atomic Requests share QN 1, its MSNs
                        // and its IRD-sized buffers with Read Requests.
                        if op == Opcode::AtomicRequest {
                            ATOMIC_REQUEST_LEN
                        } else {
                            READ_REQUEST_LEN
                        }
                    }
                    queue::ATOMIC_RESPONSE => {
                        // An Atomic Response answers our oldest outstanding
                        // Atomic Request; with none there is no QN 3 buffer
                        // (RFC 5041 §7.1 check 2).
                        if self.tx.atomics.is_empty() {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        }
                        if mo != 0 {
                            return self.error(TermCode::DDP_U_INVALID_MO, None);
                        }
                        ATOMIC_RESPONSE_LEN
                    }
                    _ => MAX_TERMINATE_LEN,
                };
                // RFC 5041 §7.1 checks 3 and 4 (`payload` < 2^16, so on any
                // target of 32 bits or more `mo + payload` cannot overflow;
                // checked anyway).
                if mo > capacity || mo.checked_add(payload).is_none_or(|end| end > capacity) {
                    let code = if mo > capacity {
                        TermCode::DDP_U_INVALID_MO
                    } else {
                        TermCode::DDP_U_TOO_LONG
                    };
                    if u.qn == queue::SEND {
                        return self.recv_error(code, WcStatus::LocalLength);
                    }
                    return self.error(code, None);
                }
                self.rx.target = match u.qn {
                    queue::SEND => {
                        let Some(r) = self.rx.cur else {
                            return self.error(TermCode::DDP_U_NO_BUFFER, None);
                        };
                        if payload == 0 {
                            Target::None
                        } else {
                            match r.sgl.locate(
                                self.mem,
                                pd,
                                Access::LOCAL_WRITE,
                                mo as u64,
                                payload as u64,
                            ) {
                                Ok(p) => Target::Scatter(p),
                                // The posted buffer went away underneath us.
                                Err(e) => {
                                    return self.recv_error(
                                        TermCode::DDP_LOCAL_CATASTROPHIC,
                                        WcStatus::LocalProtection(e),
                                    )
                                }
                            }
                        }
                    }
                    queue::READ_REQUEST => Target::ReadReq { mo },
                    queue::ATOMIC_RESPONSE => Target::Small { mo },
                    _ => Target::Term { mo },
                };
            }
        }
    }

    /// The bulk cases in one step: a whole tagged FPDU with payload (DV
    /// and RV one), an RDMA Write that its STag lets us place, or an RDMA
    /// Read Response that continues the Read at the head of the
    /// outstanding list into a one-element sink list, is placed with one
    /// table lookup, without the per-segment state `begin`, `data` and
    /// `end` keep for FPDUs cut across segments. Anything else, and every
    /// FPDU that fails a check, returns false having changed nothing, and
    /// takes the general path, which raises the error its checks find
    /// (RFC 5041 §7.1, RFC 5040 §5.2.2, §7.2).
    fn whole_tagged(&mut self, header: &[u8], payload: &[u8]) -> bool {
        let &[ddp, rdmap, s0, s1, s2, s3, t0, t1, t2, t3, t4, t5, t6, t7] = header else {
            return false;
        };
        let (ddp, rdmap) = (DdpControl(ddp), RdmapControl(rdmap));
        if self.rx.dead
            || payload.is_empty()
            || !ddp.tagged()
            || ddp.version() != DDP_VERSION
            || rdmap.version() != RDMAP_VERSION
        {
            return false;
        }
        let stag = u32::from_be_bytes([s0, s1, s2, s3]);
        let to = u64::from_be_bytes([t0, t1, t2, t3, t4, t5, t6, t7]);
        let placed = match rdmap.opcode() {
            Opcode::Write => self
                .mem
                .place(STag(stag), self.cfg.pd, Access::REMOTE_WRITE, to, payload)
                .is_ok(),
            Opcode::ReadResponse => self.whole_read_response(stag, to, ddp.last(), payload),
            _ => false,
        };
        if placed {
            self.stats.bytes_placed += payload.len() as u64;
            self.stats.fpdus_rx += 1;
        }
        placed
    }

    /// [`whole_tagged`](Self::whole_tagged)'s Read Response: the checks of
    /// `begin` (STag, TO and bounds against the request, contiguity) and of
    /// `end` (a last segment completes the requested length) first, then
    /// the placement, then what `end` does on success.
    fn whole_read_response(&mut self, stag: u32, to: u64, last: bool, payload: &[u8]) -> bool {
        let pd = self.cfg.pd;
        let Some(p) = self.tx.reads.front_mut() else {
            return false;
        };
        let &[sge] = p.sgl.as_slice() else {
            return false;
        };
        let (sink, len) = (p.sink, payload.len() as u64);
        let Some(end) = to.checked_add(len) else {
            return false;
        };
        if stag != sink.stag.0
            || to < sink.to
            || end > sink.to.saturating_add(u64::from(sink.len))
            || to - sink.to != p.received
        {
            return false;
        }
        let off = p.received;
        let received = off + len;
        if last && received != u64::from(sink.len) {
            return false;
        }
        if off + len > u64::from(sge.len) {
            return false;
        }
        let Some(at) = sge.to.checked_add(off) else {
            return false;
        };
        if self
            .mem
            .place(sge.stag, pd, Access::LOCAL_WRITE, at, payload)
            .is_err()
        {
            return false;
        }
        p.received = received;
        if last {
            self.retire_read(WcStatus::Success);
        }
        true
    }

    fn data(&mut self, data: &[u8]) {
        let at = self.rx.placed;
        self.rx.placed += data.len();
        match self.rx.target {
            Target::Tagged { range } => {
                // The range was validated when the segment began, possibly in
                // an earlier `receive` call: the application may have
                // deregistered or invalidated the STag since (RFC 5040 §8.1.1
                // item 6: no more placement once access is revoked). Stop
                // here and report the STag as invalid (RFC 5041 §7.1 tagged
                // check 1, §7.2 0x1/0x00) when the segment ends.
                // (`write` refuses a range that is no longer live: the
                // common case checks once.)
                if self.mem.write(&range, at, data) {
                    self.stats.bytes_placed += data.len() as u64;
                } else if !self.mem.is_live(&range) {
                    self.error(TermCode::DDP_T_INVALID_STAG, None);
                }
            }
            Target::Scatter(p) => {
                if !p.as_slice().iter().all(|r| self.mem.is_live(r)) {
                    return self.local_sink_revoked();
                }
                // `at` is the offset of `data` in this segment's payload.
                let (mut at, mut data) = (at, data);
                for r in p.as_slice() {
                    if data.is_empty() {
                        break;
                    }
                    if at >= r.len {
                        at -= r.len;
                        continue;
                    }
                    let n = (r.len - at).min(data.len());
                    if self.mem.write(r, at, &data[..n]) {
                        self.stats.bytes_placed += n as u64;
                    }
                    data = &data[n..];
                    at = 0;
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
            Target::Small { mo } => {
                if let Some(dst) = self.rx.small.get_mut(mo + at..mo + at + data.len()) {
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
            if let Some(st) = self.rx.pending_status.take() {
                self.rx.cur_status = Some(st);
            }
            if let Some(st) = self.rx.pending_read.take() {
                self.retire_read(st);
            }
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
                        // RFC 5040 §5.2.2: the Data Sink may check that the
                        // response's length is the one requested; we do, so a
                        // Read succeeds only when every requested octet was
                        // placed (segments are contiguous, checked at begin, and
                        // never pass the end). A short or zero-length response
                        // to a non-zero Read is an invalid Read Response
                        // (RFC 5040 §7.1 case 2: Terminate with the DDP header,
                        // RDMAP remote operation error) and the Read fails.
                        if p.received != u64::from(p.sink.len) {
                            self.retire_read(WcStatus::BadResponse);
                            return self.raise(TermInfo {
                                code: TermCode::RDMAP_OP_UNSPECIFIED,
                                hdr: Some(hdr),
                                seg_len: self.rx.seg_len,
                                rdma: None,
                            });
                        }
                        // RFC 5040 §5.5 rule 19: the Read completes on delivery of its response.
                        self.retire_read(WcStatus::Success);
                    }
                }
                // RDMA Write: placed, never delivered (RFC 5040 §5.1).
            }
            DdpHeader::Untagged(u) => {
                let mo = u.mo as usize;
                match u.qn {
                    queue::SEND => {
                        let op = u.rdmap.opcode();
                        if matches!(op, Opcode::ImmediateData | Opcode::ImmediateDataSe) {
                            return self.immediate_data(hdr, u, mo + payload);
                        }
                        if !u.ddp.last() {
                            return;
                        }
                        let mut invalidated = None;
                        if op.invalidates() {
                            // RFC 5040 §5.3, §7.2 items 4-5: verify and invalidate before
                            // the completion becomes visible.
                            let stag = STag(u.inval_stag);
                            if let Err(e) = self.mem.invalidate_remote(stag, self.cfg.pd) {
                                // RFC 5040 §7.2 items 4-5, §4.8: an STag that is
                                // not valid is Invalid STag (0x00); one that is
                                // valid but not ours to invalidate -- another
                                // PD's, or a local-only buffer never enabled
                                // for remote access (§8.1.1 item 7) -- is "STag
                                // cannot be invalidated" (0x09).
                                let code = match e {
                                    AccessError::PdMismatch | AccessError::Access => {
                                        TermCode::RDMAP_CANNOT_INVALIDATE
                                    }
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
                        let Some(r) = self.rx.cur.take() else {
                            return;
                        };
                        self.completions.push_back((
                            Completion {
                                wr_id: r.wr_id,
                                opcode: WcOpcode::Recv,
                                status: WcStatus::Success,
                                // RFC 5041 §5.4: length = MO + payload of the last segment.
                                byte_len: (mo + payload) as u32,
                                solicited: op.solicited(),
                                invalidated,
                                imm: None,
                            },
                            0,
                        ));
                    }
                    queue::READ_REQUEST => {
                        self.rx.read_req_len = self.rx.read_req_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.read_req_len);
                        self.rx.expected_msn[1] = self.rx.expected_msn[1].wrapping_add(1);
                        if u.rdmap.opcode() == Opcode::AtomicRequest {
                            return self.atomic_request(hdr, u, len);
                        }
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
                        self.tx.resp.push_back(ReadResp {
                            req,
                            hdr: u,
                            atomic: None,
                        });
                    }
                    queue::ATOMIC_RESPONSE => self.atomic_response(hdr, u, mo + payload),
                    _ => {
                        self.rx.term_len = self.rx.term_len.max(mo + payload);
                        if !u.ddp.last() {
                            return;
                        }
                        let len = core::mem::take(&mut self.rx.term_len);
                        self.rx.expected_msn[2] = self.rx.expected_msn[2].wrapping_add(1);
                        // RFC 5040 §5.4: deliver the Terminate to the ULP, then stop.
                        match TerminateRepr::parse(&self.rx.term[..len.min(MAX_TERMINATE_LEN)]) {
                            Ok(t) => {
                                self.peer_terminate = Some(t);
                                self.events.push_back(QpEvent::TerminateReceived(t));
                            }
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

impl RxCtx<'_> {
    /// An error found when a QN 0, 1 or 3 message of RFC 7306 is delivered:
    /// Terminate with its DDP header.
    fn raise_with_header(&mut self, code: TermCode, hdr: DdpHeader) {
        self.raise(TermInfo {
            code,
            hdr: Some(hdr),
            seg_len: self.rx.seg_len,
            rdma: None,
        });
    }

    /// `begin` for an Immediate Data segment (RFC 7306 §6; QN 0 and its MSN
    /// already checked): it takes a receive buffer as a Send does (RFC 5041
    /// §7.1 check 2), and its 8-octet body goes to `Rx::small`, not into
    /// the buffer.
    #[cold]
    #[inline(never)]
    fn begin_immediate(&mut self, mo: usize, payload: usize) {
        if self.rx.cur.is_none() {
            match self.take_recv() {
                Some(Ok(r)) => self.rx.cur = Some(r),
                None => return self.error(TermCode::DDP_U_NO_BUFFER, None),
                Some(Err((r, e))) => {
                    self.rx.cur = Some(r);
                    return self.recv_error(
                        TermCode::DDP_LOCAL_CATASTROPHIC,
                        WcStatus::LocalProtection(e),
                    );
                }
            }
        }
        // RFC 5041 §7.1 checks 3 and 4 against the 8-octet body.
        if mo > IMMEDIATE_DATA_LEN {
            return self.recv_error(TermCode::DDP_U_INVALID_MO, WcStatus::LocalLength);
        }
        if mo + payload > IMMEDIATE_DATA_LEN {
            return self.recv_error(TermCode::DDP_U_TOO_LONG, WcStatus::LocalLength);
        }
        self.rx.target = Target::Small { mo };
    }

    /// The last segment of an Immediate Data message (RFC 7306 §6) whose
    /// body ends at `end` octets: it consumed the receive buffer `begin`
    /// took; the buffer completes with the immediate, nothing placed in it.
    #[cold]
    #[inline(never)]
    fn immediate_data(&mut self, hdr: DdpHeader, u: UntaggedHeader, end: usize) {
        self.rx.small_len = self.rx.small_len.max(end);
        if !u.ddp.last() {
            return;
        }
        let len = core::mem::take(&mut self.rx.small_len);
        self.rx.expected_msn[0] = self.rx.expected_msn[0].wrapping_add(1);
        // Exactly 8 octets: a shorter body is a malformed message (longer
        // ones were refused as too long when the segment began).
        let Ok(d) = ImmediateData::parse(&self.rx.small[..len.min(IMMEDIATE_DATA_LEN)]) else {
            self.rx.cur_status = Some(WcStatus::LocalLength);
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        };
        let Some(r) = self.rx.cur.take() else {
            return;
        };
        self.completions.push_back((
            Completion {
                wr_id: r.wr_id,
                opcode: WcOpcode::RecvRdmaWithImm,
                status: WcStatus::Success,
                byte_len: 0,
                solicited: u.rdmap.opcode().solicited(),
                invalidated: None,
                imm: Some(d.imm32()),
            },
            0,
        ));
    }

    /// A whole Atomic Request of `len` octets (RFC 7306 §5) was delivered on
    /// QN 1: check it, run it on registered memory, and queue its Atomic
    /// Response behind the Read Responses already owed (the IRD bound of
    /// `begin` covers both).
    #[cold]
    #[inline(never)]
    fn atomic_request(&mut self, hdr: DdpHeader, u: UntaggedHeader, len: usize) {
        let Ok(req) = AtomicRequest::parse(&self.rx.read_req[..len.min(ATOMIC_REQUEST_LEN)]) else {
            // An Atomic Request without its 52-octet body.
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        };
        if matches!(req.op, AtomicOp::Unknown(_)) {
            // An operation RFC 7306 does not define.
            return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
        }
        // The target: 8 octets the STag grants remote atomic access to
        // (RFC 7306 §5; RFC 5040 §7.2 protection errors as for a Read
        // Request's source).
        let range = match self.mem.check(
            STag(req.stag),
            self.cfg.pd,
            Access::REMOTE_ATOMIC,
            req.to,
            8,
        ) {
            Ok(r) => r,
            Err(e) => return self.raise_with_header(rdmap_protection_code(e), hdr),
        };
        // RFC 7306 §5: the Remote Tagged Offset is 8-octet aligned. A
        // misaligned one is refused as a bounds violation (the target is
        // not a location the operation may use).
        if req.to % 8 != 0 {
            return self.raise_with_header(TermCode::RDMAP_BASE_BOUNDS, hdr);
        }
        let mut b = [0u8; 8];
        let read = self
            .mem
            .read(&range, 0, 8)
            .is_some_and(|s| s.copy_to(0, &mut b));
        if !read {
            return self.raise_with_header(TermCode::RDMAP_INVALID_STAG, hdr);
        }
        // The target holds a 64-bit integer in this host's byte order (as
        // verbs atomics do); it is exchanged on the wire big-endian.
        let orig = u64::from_ne_bytes(b);
        if let Some(new) = req.apply(orig) {
            if !self.mem.write(&range, 0, &new.to_ne_bytes()) {
                return self.raise_with_header(TermCode::RDMAP_INVALID_STAG, hdr);
            }
        }
        self.tx.resp.push_back(ReadResp {
            req: ReadRequest::default(),
            hdr: u,
            atomic: Some(AtomicResponse {
                orig_req_id: req.req_id,
                orig_value: orig,
            }),
        });
    }

    /// The last segment of an Atomic Response (RFC 7306 §5), body `len`
    /// octets: place the original value and complete the oldest outstanding
    /// atomic (responses come in request order).
    #[cold]
    #[inline(never)]
    fn atomic_response(&mut self, hdr: DdpHeader, u: UntaggedHeader, len: usize) {
        self.rx.small_len = self.rx.small_len.max(len);
        if !u.ddp.last() {
            return;
        }
        let len = core::mem::take(&mut self.rx.small_len);
        self.rx.expected_msn[3] = self.rx.expected_msn[3].wrapping_add(1);
        let Some(p) = self.tx.atomics.front().copied() else {
            return;
        };
        let resp = AtomicResponse::parse(&self.rx.small[..len.min(ATOMIC_RESPONSE_LEN)]);
        let resp = match resp {
            Ok(r) if r.orig_req_id == p.req_id => r,
            // Short, or not the answer to the request it must answer: it
            // does not match its request (as a Read Response that does not,
            // RFC 5040 §7.1 case 2).
            _ => {
                self.retire_atomic(WcStatus::BadResponse);
                return self.raise_with_header(TermCode::RDMAP_OP_UNSPECIFIED, hdr);
            }
        };
        let placed = self
            .mem
            .check(
                p.local.stag,
                self.cfg.pd,
                Access::LOCAL_WRITE,
                p.local.to,
                8,
            )
            .map(|r| self.mem.write(&r, 0, &resp.orig_value.to_ne_bytes()));
        match placed {
            Ok(true) => self.retire_atomic(WcStatus::Success),
            // The application revoked the buffer since the post.
            Ok(false) | Err(_) => {
                let e = placed.err().unwrap_or(AccessError::InvalidStag);
                self.retire_atomic(WcStatus::LocalProtection(e));
                self.raise(TermInfo {
                    code: TermCode::DDP_LOCAL_CATASTROPHIC,
                    hdr: None,
                    seg_len: 0,
                    rdma: None,
                });
            }
        }
    }

    /// Complete the oldest outstanding atomic with `status`.
    fn retire_atomic(&mut self, status: WcStatus) {
        let Some(p) = self.tx.atomics.pop_front() else {
            return;
        };
        if let Some(i) = p.seq.checked_sub(self.tx.head_seq) {
            if let Some(e) = self.tx.sq.get_mut(i as usize) {
                e.state = SqState::Done(status);
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
    fn segment_whole(&mut self, ulpdu_len: u16, header: &[u8], payload: &[u8]) {
        if self.whole_tagged(header, payload) {
            return;
        }
        self.begin(ulpdu_len, header);
        if !payload.is_empty() {
            self.data(payload);
        }
        self.end();
    }
}

#[cfg(test)]
mod seg_tests;
#[cfg(test)]
mod tests;
