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
//!   [`WorkRequest::FetchAdd`], [`WorkRequest::CmpSwap`], the masked
//!   forms and Swap in [`WorkRequest::Atomic`]; the responder's
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
//!
//! Layout (as Linux siw's `siw_qp_rx.c` / `siw_qp_tx.c`): this file holds
//! the types, the queue pair's shared state, its constructors, completions
//! and the error path common to both directions; `qp/rx.rs` the receive
//! path (placement, delivery, the responder's side of Reads and Atomics, the
//! Terminate raised for an inbound error); `qp/tx.rs` posting and the
//! transmit path (choosing the next message and building its FPDUs).

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
mod rx;
mod tx;

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
    /// An RFC 7306 atomic with the masks the Atomic Request carries
    /// ([`Atomic`]: Fetch and Add by fields, Swap, Compare and Swap on
    /// selected bits). Like [`FetchAdd`](Self::FetchAdd) otherwise: the
    /// target's value before the operation is placed in `local` (8
    /// octets), and the request counts against ORD.
    Atomic {
        /// Caller's id.
        wr_id: u64,
        /// Complete on success too (failures always complete).
        signaled: bool,
        /// Where the original value goes (8 octets).
        local: Sge,
        /// Peer's STag (remote atomic access).
        remote_stag: STag,
        /// Peer's tagged offset (8-octet aligned).
        remote_to: u64,
        /// The operation and its masks.
        op: Atomic,
    },
}

/// An RFC 7306 atomic operation with its masks, as the Atomic Request's
/// Add-or-Swap Data/Mask and Compare Data/Mask fields carry them
/// ([`crate::wire::AtomicRequest`]; executed by
/// [`AtomicRequest::apply`](crate::wire::AtomicRequest::apply)). `T` is
/// the target's 64-bit value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Atomic {
    /// Fetch and Add by fields (AtomicOp 0000b): each set bit of
    /// `field_mask` is the most significant bit of a field, and no carry
    /// leaves a field; `field_mask` 0 is one 64-bit add (what
    /// [`WorkRequest::FetchAdd`] sends).
    FetchAdd {
        /// Added to the target, field by field.
        add: u64,
        /// Field boundaries (the Add Mask).
        field_mask: u64,
    },
    /// Swap (AtomicOp 0001b): `T = (T & !swap_mask) | (swap & swap_mask)`,
    /// unconditionally.
    Swap {
        /// The bits stored.
        swap: u64,
        /// Which bits are stored (the Swap Mask).
        swap_mask: u64,
    },
    /// Compare and Swap (AtomicOp 0010b): when `(T ^ compare) &
    /// compare_mask == 0`, `T = (T & !swap_mask) | (swap & swap_mask)`.
    /// All-ones masks are [`WorkRequest::CmpSwap`].
    CmpSwap {
        /// Compared with the target.
        compare: u64,
        /// Which bits are compared (the Compare Mask).
        compare_mask: u64,
        /// The bits stored when the comparison holds.
        swap: u64,
        /// Which bits are stored (the Swap Mask).
        swap_mask: u64,
    },
}

impl Atomic {
    /// The completion opcode of a request carrying this operation.
    pub fn wc_opcode(&self) -> WcOpcode {
        match self {
            Atomic::FetchAdd { .. } => WcOpcode::FetchAdd,
            Atomic::Swap { .. } => WcOpcode::Swap,
            Atomic::CmpSwap { .. } => WcOpcode::CmpSwap,
        }
    }
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
            | WorkRequest::CmpSwap { wr_id, .. }
            | WorkRequest::Atomic { wr_id, .. } => wr_id,
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
            | WorkRequest::CmpSwap { signaled, .. }
            | WorkRequest::Atomic { signaled, .. } => signaled,
        }
    }
    /// The local buffers (empty for inline requests).
    pub fn local(&self) -> SgList {
        match *self {
            WorkRequest::Send { local, .. }
            | WorkRequest::Write { local, .. }
            | WorkRequest::Read { local, .. }
            | WorkRequest::WriteImm { local, .. } => local,
            WorkRequest::FetchAdd { local, .. }
            | WorkRequest::CmpSwap { local, .. }
            | WorkRequest::Atomic { local, .. } => SgList::from(local),
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
            | WorkRequest::CmpSwap { signaled, .. }
            | WorkRequest::Atomic { signaled, .. } => *signaled = on,
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
    /// A Swap's original value was placed (RFC 7306, [`Atomic::Swap`]).
    Swap,
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

/// A whole small Send or Write planned as one FPDU
/// ([`Qp::small_next`]): where its entry lies, its header and lengths.
#[derive(Debug, Clone, Copy)]
struct Small {
    idx: usize,
    hdr: [u8; UNTAGGED_HEADER_LEN],
    hdr_len: usize,
    inline_len: usize,
    ulpdu_len: usize,
    wire: usize,
    /// A Send (untagged, on QN 0 with `msn`); else a Write.
    send: bool,
    msn: u32,
    /// Its payload in registered memory, checked (length 0: none).
    src: Range,
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
    /// Length of the inline body (Read Request, Terminate, Atomic
    /// Response, or inline Send/Write data), repeated in every FPDU of the
    /// job (so only one-FPDU jobs carry data this way). Its octets are
    /// `Tx::job_inline`'s first: they stay out of the job, which is copied
    /// as it is made, taken up and finished.
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
    /// The inline body of `job` (its first `Job::inline_len` octets).
    job_inline: [u8; INLINE_BODY],
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
                job_inline: [0; INLINE_BODY],
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

    /// Whether completions or stream events wait to be taken
    /// ([`poll_completion_tagged`](Self::poll_completion_tagged),
    /// [`poll_event`](Self::poll_event)).
    pub fn has_output(&self) -> bool {
        !self.completions.is_empty() || !self.events.is_empty()
    }

    /// True when nothing is queued to transmit.
    pub fn tx_idle(&self) -> bool {
        self.tx.job.is_none()
            && self.tx.terminate.is_none()
            && self.tx.resp.is_empty()
            && (self.state != QpState::Rts
                || self.tx.next_seq == self.tx.head_seq + self.tx.sq.len() as u64)
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
            // The completion is read from the entry where it lies (an
            // entry is large; most of it is not needed here).
            let done = match &e.work {
                // Unsignaled: done, in order, silently.
                SqWork::Wr(wr) if status == WcStatus::Success && !wr.signaled() => None,
                SqWork::Wr(wr) => {
                    let opcode = match wr {
                        WorkRequest::Send { .. } | WorkRequest::SendInline { .. } => WcOpcode::Send,
                        WorkRequest::Write { .. } | WorkRequest::WriteInline { .. } => {
                            WcOpcode::Write
                        }
                        WorkRequest::Read { .. } => WcOpcode::Read,
                        WorkRequest::WriteImm { .. } => WcOpcode::WriteImm,
                        WorkRequest::FetchAdd { .. } => WcOpcode::FetchAdd,
                        WorkRequest::CmpSwap { .. } => WcOpcode::CmpSwap,
                        WorkRequest::Atomic { op, .. } => op.wc_opcode(),
                    };
                    let len = wr.len();
                    Some((
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
                    ))
                }
                _ => None,
            };
            self.tx.sq.pop_front();
            self.tx.head_seq += 1;
            if let Some(c) = done {
                self.completions.push_back(c);
            }
        }
        if self.tx.next_seq < self.tx.head_seq {
            self.tx.next_seq = self.tx.head_seq;
        }
    }
}

#[cfg(test)]
mod seg_tests;
#[cfg(test)]
mod tests;
