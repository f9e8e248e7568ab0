//! One-copy transmit: FPDUs kept as descriptors, not octets.
//!
//! Over a transport that can ask for a segment's payload when it builds the
//! frame (tcp-lite's external send mode), an FPDU need not be framed into
//! a send buffer first. [`Qp::poll_record`](crate::qp::Qp::poll_record) queues
//! an [`FpduDesc`]: the MPA length, the DDP/RDMAP header and any inline
//! body (a Read Request, a Terminate) as octets, at most 64, and the
//! payload as checked
//! [`Range`]s of registered memory. [`FpduDesc::fill`] writes any span of
//! the FPDU's wire octets straight from those ranges into the frame
//! (through the loop thread's bounce buffer when MPA's CRC is on, below):
//! the one read of a payload octet out of registered memory, on the first
//! transmission and on every retransmission alike.
//!
//! **The CRC** (RFC 5044 §4.4: over the whole FPDU, length field to PAD) is
//! computed as a fill that covers the whole FPDU writes it, the usual case
//! (a sender puts whole FPDUs in segments, RFC 5044 §8), from our own
//! copies of the octets: the head, the payload on its way through the loop
//! thread's bounce buffer, the PAD. Reading the frame back instead stalled
//! on lines another core read last (a memif ring's buffer). It is
//! remembered; a fill of part of an FPDU that reaches its CRC and has none
//! remembered reads the FPDU once more, from registered memory, to compute
//! it (a read, not a copy).
//!
//! **Completions** (RFC 5040 §5.5 rule 9 lets a completion mean more than
//! hand-off to the LLP): the memory of a Send or Write is read again until
//! TCP has the FPDU acknowledged, so the request completes then, not when
//! it is handed to TCP ([`FpduDesc::completes`],
//! [`Qp::fpdu_acked`](crate::qp::Qp::fpdu_acked)). An application may reuse
//! its buffer once the completion arrives, as it always could.
//!
//! **A source that goes away**: a range is re-checked at every fill
//! ([`MemoryTable::read`] refuses one whose region or window was
//! deregistered, invalidated or rebound since); such a fill fails and the
//! connection must end (the transport cannot retransmit what it no longer
//! has).
//!
//! [`TxQueue`] keeps the records a connection has queued, by stream offset,
//! until the transport acknowledges them.

use std::collections::VecDeque;

use crate::crc::Crc32c;
use crate::mem::{MemoryTable, Range, RegionSlice};
use crate::qp::MAX_SGE;

/// Octets before an FPDU's payload a descriptor holds: MPA length (2),
/// the longest DDP/RDMAP header (18) and an inline body of up to 44 octets
/// (a Terminate's is at most 40). An FPDU with a longer inline body (inline
/// Send or Write data) is framed as octets instead.
pub(crate) const HEAD_MAX: usize = 64;

/// The payload's ranges: one in the common case, kept inline, so a
/// descriptor stays small (it is moved into the queue once per FPDU).
#[derive(Clone)]
enum Src {
    None,
    One(Range),
    Many(Box<[Range]>),
}

impl Src {
    fn as_slice(&self) -> &[Range] {
        match self {
            Src::None => &[],
            Src::One(r) => core::slice::from_ref(r),
            Src::Many(b) => b,
        }
    }
}

/// One FPDU as the octets before its payload, the payload's ranges of
/// registered memory, and its PAD and CRC (no markers: RFC 5044 markers
/// depend on the stream position and are framed as octets instead).
#[derive(Clone)]
pub struct FpduDesc {
    head: [u8; HEAD_MAX],
    head_len: u8,
    src: Src,
    payload_len: u32,
    pad: u8,
    /// CRC negotiated (else the field is 0, RFC 5044 §4.4).
    crc_on: bool,
    /// An MPA FPDU; else a bare DDP Segment (over SCTP).
    mpa: bool,
    /// The CRC, once computed.
    crc: Option<u32>,
    /// The CRC so far of fills that went on in order from the FPDU's first
    /// octet, and the offset the next one must start at to go on: an FPDU
    /// spread over several device buffers gets its CRC from the same copy.
    run: Option<(usize, Crc32c)>,
    /// The send queue entry this FPDU ends, completed once acknowledged.
    completes: Option<u64>,
}

impl core::fmt::Debug for FpduDesc {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("FpduDesc")
            .field("head_len", &self.head_len)
            .field("payload_len", &self.payload_len)
            .field("ranges", &self.src.as_slice().len())
            .field("crc", &self.crc)
            .field("completes", &self.completes)
            .finish()
    }
}

const CRC_LEN: usize = 4;

impl FpduDesc {
    /// An FPDU whose ULPDU is `hdr` (DDP/RDMAP header), `inline` (body)
    /// and the octets of `src`, in order. `None` if header and body pass
    /// [`HEAD_MAX`] or the ULPDU passes 65535 octets. `mpa`: framed as an
    /// MPA FPDU (length, PAD, CRC); else the bare DDP Segment a DDP/SCTP
    /// DATA chunk carries (RFC 5043 §5.2.2: no length, PAD or CRC).
    pub(crate) fn new(
        hdr: &[u8],
        inline: &[u8],
        src: &[Range],
        crc_on: bool,
        completes: Option<u64>,
        mpa: bool,
    ) -> Option<FpduDesc> {
        let payload_len: usize = src.iter().map(|r| r.len).sum();
        let len_field = if mpa { 2 } else { 0 };
        let head_len = len_field + hdr.len() + inline.len();
        let ulpdu_len = head_len - len_field + payload_len;
        if head_len > HEAD_MAX || ulpdu_len > u16::MAX as usize || src.len() > MAX_SGE {
            return None;
        }
        let mut head = [0u8; HEAD_MAX];
        if mpa {
            head[..2].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
        }
        head[len_field..len_field + hdr.len()].copy_from_slice(hdr);
        head[len_field + hdr.len()..head_len].copy_from_slice(inline);
        let src = match src {
            [] => Src::None,
            [r] => Src::One(*r),
            more => Src::Many(more.into()),
        };
        Some(FpduDesc {
            head,
            head_len: head_len as u8,
            src,
            payload_len: payload_len as u32,
            pad: if mpa {
                ((4 - (2 + ulpdu_len) % 4) % 4) as u8
            } else {
                0
            },
            crc_on: crc_on && mpa,
            mpa,
            crc: None,
            run: None,
            completes,
        })
    }

    /// Octets on the wire: length, ULPDU, PAD, CRC (a bare DDP Segment:
    /// the ULPDU alone).
    pub fn wire_len(&self) -> usize {
        let tail = if self.mpa {
            usize::from(self.pad) + CRC_LEN
        } else {
            0
        };
        usize::from(self.head_len) + self.payload_len as usize + tail
    }

    /// The send queue entry (by sequence) that completes once this FPDU is
    /// acknowledged: the last FPDU of a Send or Write.
    pub fn completes(&self) -> Option<u64> {
        self.completes
    }

    /// Write wire octets `at .. at + dst.len()` of the FPDU into `dst`,
    /// payload straight from registered memory. False if a source range is
    /// no longer live or the span leaves the FPDU (`dst` then holds
    /// garbage and must not be sent).
    pub fn fill(&mut self, mem: &MemoryTable, at: usize, dst: &mut [u8]) -> bool {
        let wire = self.wire_len();
        let Some(end) = at.checked_add(dst.len()) else {
            return false;
        };
        if end > wire {
            return false;
        }
        let head = usize::from(self.head_len);
        let body_end = head + self.payload_len as usize;
        let crc_at = body_end + usize::from(self.pad);
        if at == 0 {
            self.run = Some((0, Crc32c::new()));
            // The whole FPDU before its CRC field in this fill: framed in
            // the bounce buffer behind zeros, summed in one call, copied
            // out.
            if self.crc_on
                && self.crc.is_none()
                && dst.len() >= crc_at
                && crc_at >= iwarp_crc::ZERO_LEAD_BLOCK
            {
                match self.frame_summed(mem, crc_at, &mut dst[..crc_at]) {
                    Some(Some(v)) => {
                        self.crc = Some(v);
                        self.run = None;
                        let n = dst.len() - crc_at;
                        dst[crc_at..].copy_from_slice(&Crc32c::to_wire(v)[..n]);
                        return true;
                    }
                    Some(None) => return false,
                    // Too long for the bounce buffer: piece by piece below.
                    None => {}
                }
            }
        }
        // The running CRC goes on over what this fill writes, if it starts
        // where the last one ended. It reads our own copies of the octets
        // (the head, the payload on its way through a bounce buffer, the
        // PAD), never `dst`: a frame buffer is often memory another core
        // read last (a memif ring's), whose lines the stores are still
        // waiting for when the CRC would read them back.
        let mut run = match self.run {
            Some((p, c)) if self.crc_on && p == at => Some(c),
            _ => None,
        };
        // Head octets.
        let mut pos = at;
        let mut d = 0;
        if pos < head {
            let n = (head - pos).min(dst.len());
            let h = &self.head[pos..pos + n];
            dst[..n].copy_from_slice(h);
            if let Some(c) = run.as_mut() {
                c.update(h);
            }
            pos += n;
            d += n;
        }
        // Payload, range by range: the one copy (through the bounce
        // buffer when the CRC runs over it).
        let mut base = head;
        for r in self.src.as_slice() {
            let r_end = base + r.len;
            if pos < r_end && d < dst.len() {
                let off = pos - base;
                let n = (r_end - pos).min(dst.len() - d);
                let Some(s) = mem.read(r, off, n) else {
                    return false;
                };
                let ok = match run.as_mut() {
                    Some(c) => copy_summed(&s, &mut dst[d..d + n], c),
                    None => s.copy_to(0, &mut dst[d..d + n]),
                };
                if !ok {
                    return false;
                }
                pos += n;
                d += n;
            }
            base = r_end;
        }
        // PAD.
        if pos < crc_at && d < dst.len() {
            let n = (crc_at - pos).min(dst.len() - d);
            dst[d..d + n].fill(0);
            if let Some(c) = run.as_mut() {
                c.update(&[0u8; 3][..n.min(3)]);
            }
            pos += n;
            d += n;
        }
        if self.crc_on && d > 0 {
            self.run = run.map(|c| (at + d, c));
        }
        if d == dst.len() {
            return true;
        }
        // The CRC: over the copies just written when they went in order
        // from the first octet, else the one remembered, else read again.
        let value = if !self.crc_on {
            0
        } else if let Some(v) = self
            .run
            .filter(|(p, _)| *p == crc_at)
            .map(|(_, c)| c.value())
        {
            self.crc = Some(v);
            v
        } else if let Some(v) = self.crc {
            v
        } else {
            match self.compute_crc(mem) {
                Some(v) => {
                    self.crc = Some(v);
                    v
                }
                None => return false,
            }
        };
        let wire_crc = Crc32c::to_wire(value);
        let from = pos - crc_at;
        let n = dst.len() - d;
        dst[d..].copy_from_slice(&wire_crc[from..from + n]);
        true
    }

    /// Write the FPDU's first `crc_at` octets (all but the CRC field) into
    /// `dst` through this thread's bounce buffer, framed there behind the
    /// zeros [`iwarp_crc::crc32c_after_zeros`] wants, and return their
    /// CRC: `None` if the FPDU does not fit in the bounce buffer, `Some(None)`
    /// if a source range is no longer live.
    fn frame_summed(
        &self,
        mem: &MemoryTable,
        crc_at: usize,
        dst: &mut [u8],
    ) -> Option<Option<u32>> {
        let lead = iwarp_crc::zero_lead(crc_at);
        BOUNCE_BUF.with(|b| {
            let mut b = b.try_borrow_mut().ok()?;
            bounce_ready(&mut b);
            let start = b.as_ptr().align_offset(iwarp_crc::ZERO_LEAD_ALIGN);
            let end = start.checked_add(lead + crc_at)?;
            let buf = b.get_mut(start..end)?;
            let (zeros, fpdu) = buf.split_at_mut(lead);
            zeros.fill(0);
            let head = usize::from(self.head_len);
            fpdu[..head].copy_from_slice(&self.head[..head]);
            let mut at = head;
            for r in self.src.as_slice() {
                let ok = mem
                    .read(r, 0, r.len)
                    .is_some_and(|s| s.copy_to(0, &mut fpdu[at..at + r.len]));
                if !ok {
                    return Some(None);
                }
                at += r.len;
            }
            fpdu[at..].fill(0);
            dst.copy_from_slice(fpdu);
            Some(Some(iwarp_crc::crc32c_after_zeros(buf, lead)))
        })
    }

    /// The CRC over the FPDU as registered memory holds it now.
    fn compute_crc(&self, mem: &MemoryTable) -> Option<u32> {
        let mut c = Crc32c::new();
        c.update(&self.head[..usize::from(self.head_len)]);
        let mut buf = [0u8; 512];
        for r in self.src.as_slice() {
            let mut off = 0;
            while off < r.len {
                let n = (r.len - off).min(buf.len());
                let s = mem.read(r, off, n)?;
                if !s.copy_to(0, &mut buf[..n]) {
                    return None;
                }
                c.update(&buf[..n]);
                off += n;
            }
        }
        c.update(&[0u8; 3][..usize::from(self.pad)]);
        Some(c.value())
    }
}

/// Octets a loop thread's bounce buffer holds ([`copy_summed`],
/// [`FpduDesc::frame_summed`]): a whole FPDU at MTU 9000 in one piece, a
/// 64 KiB one in four.
const BOUNCE: usize = 16 * 1024;

std::thread_local! {
    /// Each loop thread's bounce buffer: one per thread, not one per
    /// connection.
    static BOUNCE_BUF: core::cell::RefCell<Vec<u8>> = const { core::cell::RefCell::new(Vec::new()) };
    /// Where it lies ([`bounce_span`]).
    static BOUNCE_AT: core::cell::Cell<(usize, usize)> = const { core::cell::Cell::new((0, 0)) };
}

/// The addresses of this thread's bounce buffer (empty before its first
/// use): the transmit path reads registered memory into it, and only into
/// it, when it is not reading straight into a frame (`tests/one_copy.rs`
/// follows every octet).
pub fn bounce_span() -> core::ops::Range<usize> {
    let (a, b) = BOUNCE_AT.with(|c| c.get());
    a..b
}

/// This thread's bounce buffer, at least [`BOUNCE`] octets long.
fn bounce_ready(b: &mut Vec<u8>) {
    if b.len() < BOUNCE {
        b.resize(BOUNCE, 0);
        let at = b.as_ptr() as usize;
        BOUNCE_AT.with(|c| c.set((at, at + b.len())));
    }
}

/// Copy `src` into `dst` (the same length) through this thread's bounce
/// buffer, feeding the CRC from the bounce buffer, where the octets are
/// our own and in the cache, rather than from `dst`.
fn copy_summed(src: &RegionSlice<'_>, dst: &mut [u8], crc: &mut Crc32c) -> bool {
    BOUNCE_BUF.with(|b| {
        let Ok(mut b) = b.try_borrow_mut() else {
            // Cannot happen (nothing here re-enters); copy and sum `dst`.
            if !src.copy_to(0, dst) {
                return false;
            }
            crc.update(dst);
            return true;
        };
        bounce_ready(&mut b);
        let mut k = 0;
        while k < dst.len() {
            let m = (dst.len() - k).min(BOUNCE);
            let piece = &mut b[..m];
            if !src.copy_to(k, piece) {
                return false;
            }
            crc.update(piece);
            dst[k..k + m].copy_from_slice(piece);
            k += m;
        }
        true
    })
}

/// What a connection queued on its transport: octets (MPA Request or
/// Reply, FPDUs framed with markers) or an FPDU descriptor.
#[derive(Debug, Clone)]
pub enum TxRecord {
    /// Octets, sent as they are.
    Bytes(Vec<u8>),
    /// An FPDU written from registered memory.
    Fpdu(FpduDesc),
}

impl TxRecord {
    /// Octets on the wire.
    pub fn wire_len(&self) -> usize {
        match self {
            TxRecord::Bytes(b) => b.len(),
            TxRecord::Fpdu(f) => f.wire_len(),
        }
    }

    fn fill(&mut self, mem: &MemoryTable, at: usize, dst: &mut [u8]) -> bool {
        match self {
            TxRecord::Bytes(b) => match b.get(at..at + dst.len()) {
                Some(s) => {
                    dst.copy_from_slice(s);
                    true
                }
                None => false,
            },
            TxRecord::Fpdu(f) => f.fill(mem, at, dst),
        }
    }
}

/// The records of one connection's send stream, by stream offset, kept
/// until acknowledged.
#[derive(Debug, Default)]
pub struct TxQueue {
    /// (stream offset of the first octet, record), in stream order.
    recs: VecDeque<(u64, TxRecord)>,
    /// Stream offset just past the last record.
    end: u64,
    /// A fill failed since the last [`take_failed`](Self::take_failed).
    failed: bool,
    /// Records released so far, and the number (counted from the first
    /// ever pushed) of the record the last fill ended in: fills mostly go
    /// on from there, so it is tried before a search.
    released: u64,
    hint: u64,
    /// Buffers of acknowledged small records, kept for the next ones
    /// ([`buffer`](Self::buffer)): at most [`SPARE_BUFFERS`] of at most
    /// [`SPARE_MAX`] octets each, so a connection keeps at most 8 KiB.
    spare: Vec<Vec<u8>>,
}

/// Buffers a queue keeps for reuse.
pub const SPARE_BUFFERS: usize = 4;
/// The largest buffer a queue keeps for reuse (octets of capacity).
pub const SPARE_MAX: usize = 2048;

impl TxQueue {
    /// An empty queue whose first record starts at stream offset `start`.
    pub fn new(start: u64) -> TxQueue {
        TxQueue {
            recs: VecDeque::new(),
            end: start,
            failed: false,
            released: 0,
            hint: 0,
            spare: Vec::new(),
        }
    }

    /// An empty buffer of at least `cap` octets for a [`TxRecord::Bytes`]:
    /// one an acknowledged record left (no allocation) when one is big
    /// enough.
    pub fn buffer(&mut self, cap: usize) -> Vec<u8> {
        match self.spare.iter().position(|b| b.capacity() >= cap) {
            Some(i) => self.spare.swap_remove(i),
            None => Vec::with_capacity(cap),
        }
    }

    /// Append an FPDU descriptor built in place (see [`FpduDesc::new`]);
    /// returns its length on the wire, or `None` (nothing queued) if it
    /// cannot be described.
    pub(crate) fn push_fpdu(
        &mut self,
        hdr: &[u8],
        inline: &[u8],
        src: &[Range],
        crc_on: bool,
        completes: Option<u64>,
        mpa: bool,
    ) -> Option<usize> {
        let d = FpduDesc::new(hdr, inline, src, crc_on, completes, mpa)?;
        let len = d.wire_len();
        self.recs.push_back((self.end, TxRecord::Fpdu(d)));
        self.end += len as u64;
        Some(len)
    }

    /// Append a record: its octets follow the last record's.
    pub fn push(&mut self, rec: TxRecord) {
        let len = rec.wire_len() as u64;
        self.recs.push_back((self.end, rec));
        self.end += len;
    }

    /// Stream offset just past the last record.
    pub fn end(&self) -> u64 {
        self.end
    }

    /// Records held.
    pub fn len(&self) -> usize {
        self.recs.len()
    }

    /// Nothing held.
    pub fn is_empty(&self) -> bool {
        self.recs.is_empty()
    }

    /// Records the store holds room for without allocating.
    pub fn capacity(&self) -> usize {
        self.recs.capacity()
    }

    /// Give the record store's memory back if nothing is held (an idle
    /// connection keeps none; a busy one keeps its capacity between
    /// bursts). Called from the stack's idle sweep.
    pub fn trim(&mut self) {
        if self.recs.is_empty() {
            self.recs = VecDeque::new();
            self.spare = Vec::new();
        }
    }

    /// Write stream octets `offset .. offset + dst.len()` into `dst`. False
    /// (and the queue remembers it, [`take_failed`](Self::take_failed)) if
    /// a record is gone or a source range is no longer live.
    pub fn fill(&mut self, mem: &MemoryTable, offset: u64, dst: &mut [u8]) -> bool {
        let ok = self.fill_inner(mem, offset, dst);
        self.failed |= !ok;
        ok
    }

    fn fill_inner(&mut self, mem: &MemoryTable, offset: u64, dst: &mut [u8]) -> bool {
        // The record holding `offset`: the one the last fill ended in or
        // the next (a segment after the last one), else the last record
        // starting at or before it.
        let covers = |q: &Self, i: usize| {
            q.recs
                .get(i)
                .is_some_and(|(s, r)| *s <= offset && offset < s + r.wire_len() as u64)
        };
        let h = self.hint.saturating_sub(self.released) as usize;
        let first = if covers(self, h) {
            h
        } else if covers(self, h + 1) {
            h + 1
        } else {
            match self.recs.partition_point(|(s, _)| *s <= offset) {
                0 => return false,
                i => i - 1,
            }
        };
        // One record holds the whole range (a segment of one FPDU, the
        // common case): no iterator over the deque's two halves.
        if let Some((start, rec)) = self.recs.get_mut(first) {
            let at = offset - *start;
            if !dst.is_empty() && at + dst.len() as u64 <= rec.wire_len() as u64 {
                if !rec.fill(mem, at as usize, dst) {
                    return false;
                }
                self.hint = self.released + first as u64;
                return true;
            }
        }
        let mut pos = offset;
        let mut d = 0;
        let mut last = first;
        for (i, (start, rec)) in self.recs.range_mut(first..).enumerate() {
            if d == dst.len() {
                break;
            }
            let len = rec.wire_len() as u64;
            let at = (pos - *start) as usize;
            if pos >= *start + len {
                return false;
            }
            let n = ((*start + len - pos) as usize).min(dst.len() - d);
            if !rec.fill(mem, at, &mut dst[d..d + n]) {
                return false;
            }
            pos += n as u64;
            d += n;
            last = first + i;
        }
        self.hint = self.released + last as u64;
        d == dst.len()
    }

    /// Drop the records wholly below stream offset `acked` (acknowledged),
    /// handing `done` the send queue entry each completes.
    pub fn release(&mut self, acked: u64, done: &mut dyn FnMut(u64)) {
        while let Some((start, rec)) = self.recs.front() {
            if start + rec.wire_len() as u64 > acked {
                break;
            }
            if let TxRecord::Fpdu(f) = rec {
                if let Some(seq) = f.completes() {
                    done(seq);
                }
            }
            if let Some((_, TxRecord::Bytes(mut b))) = self.recs.pop_front() {
                if self.spare.len() < SPARE_BUFFERS && b.capacity() <= SPARE_MAX {
                    b.clear();
                    self.spare.push(b);
                }
            }
            self.released += 1;
        }
    }

    /// Whether a fill failed since the last call (then cleared).
    pub fn take_failed(&mut self) -> bool {
        std::mem::take(&mut self.failed)
    }

    /// Drop everything (the connection is gone), without completions.
    pub fn clear(&mut self) {
        self.recs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_queue_trims_to_no_allocation_a_busy_one_keeps_it() {
        let mut q = TxQueue::new(0);
        q.push(TxRecord::Bytes(vec![1; 40]));
        q.push(TxRecord::Bytes(vec![2; 40]));
        q.trim();
        assert!(q.recs.capacity() >= 2, "records held: kept");
        q.release(80, &mut |_| {});
        assert!(q.is_empty());
        assert!(q.recs.capacity() > 0);
        q.trim();
        assert_eq!(q.recs.capacity(), 0);
        // Still a working queue after the trim.
        q.push(TxRecord::Bytes(vec![3; 8]));
        assert_eq!((q.len(), q.end()), (1, 88));
    }

    use crate::mem::{Access, PdId, STag};
    use crate::qp::{Completion, Qp, QpConfig, SgList, Sge, WcStatus, WorkRequest};

    fn qp(pd: PdId, crc: bool) -> Qp {
        Qp::new(QpConfig {
            pd,
            ird: 4,
            ord: 4,
            mulpdu: 1000,
            crc,
            markers_tx: false,
            markers_rx: false,
            sq_depth: 16,
            rq_depth: 16,
        })
    }

    fn pattern(len: usize, salt: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
            .collect()
    }

    /// A table with two source regions, and the Write + Send that gather
    /// from both (several FPDUs each at MULPDU 1000), posted to `q`.
    fn setup(q: &mut Qp, mem: &mut MemoryTable, pd: PdId) -> (STag, STag) {
        let a = mem
            .register(pd, pattern(3000, 1), Access::LOCAL_READ, 0)
            .unwrap();
        let b = mem
            .register(pd, pattern(700, 2), Access::LOCAL_READ, 0)
            .unwrap();
        let local = SgList::new(&[
            Sge {
                stag: a,
                to: 100,
                len: 2500,
            },
            Sge {
                stag: b,
                to: 0,
                len: 700,
            },
        ])
        .unwrap();
        q.post_send(
            mem,
            WorkRequest::Write {
                wr_id: 7,
                signaled: true,
                local,
                remote_stag: STag(0x1234_5600),
                remote_to: 0x10_0000,
            },
        )
        .unwrap();
        q.post_send(
            mem,
            WorkRequest::Send {
                wr_id: 8,
                signaled: true,
                local: SgList::from(Sge {
                    stag: b,
                    to: 10,
                    len: 600,
                }),
                solicited: false,
                invalidate: None,
            },
        )
        .unwrap();
        (a, b)
    }

    fn descs(q: &mut Qp, mem: &MemoryTable) -> Vec<FpduDesc> {
        let mut txq = TxQueue::new(0);
        while q.poll_record(mem, 1500, 0, &mut txq) {}
        txq.recs
            .into_iter()
            .map(|(_, r)| match r {
                TxRecord::Fpdu(d) => d,
                TxRecord::Bytes(_) => panic!("octets with copy_below 0"),
            })
            .collect()
    }

    /// The octets a twin QP frames the usual way (`poll_transmit`, tested
    /// against literal FPDUs in `mpa`): a descriptor filled whole, or in
    /// any pieces, must give exactly those.
    fn framed(crc: bool) -> Vec<u8> {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut q = qp(pd, crc);
        setup(&mut q, &mut mem, pd);
        let mut out = Vec::new();
        q.poll_transmit(&mem, &mut out, usize::MAX, usize::MAX);
        out
    }

    #[test]
    fn descriptors_fill_the_octets_the_framer_writes() {
        for crc in [true, false] {
            let want = framed(crc);
            let mut mem = MemoryTable::new();
            let pd = mem.alloc_pd();
            let mut q = qp(pd, crc);
            setup(&mut q, &mut mem, pd);
            let mut ds = descs(&mut q, &mem);
            assert_eq!(ds.len(), 5, "4 FPDUs of the Write, 1 of the Send: {ds:?}");
            let mut got = Vec::new();
            for d in &mut ds {
                let mut buf = vec![0xEE; d.wire_len()];
                assert!(d.fill(&mem, 0, &mut buf));
                got.extend_from_slice(&buf);
            }
            assert!(got == want, "crc {crc}: whole fills differ from the framer");
        }
    }

    /// A payload longer than the bounce buffer goes through it in pieces:
    /// the octets are the payload's, the CRC field the CRC of everything
    /// before it, whole or filled in two parts.
    #[test]
    fn a_payload_past_the_bounce_buffer_is_copied_and_summed_whole() {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let len = 2 * BOUNCE + 1000;
        let data = pattern(len, 9);
        let stag = mem
            .register(pd, data.clone(), Access::LOCAL_READ, 0)
            .unwrap();
        let range = mem
            .check(stag, pd, Access::LOCAL_READ, 0, len as u64)
            .unwrap();
        let mut d = FpduDesc::new(&[0xAB; 14], &[], &[range], true, None, true).unwrap();
        let wire = d.wire_len();
        let crc_at = wire - CRC_LEN;
        let mut whole = vec![0xEE; wire];
        assert!(d.fill(&mem, 0, &mut whole));
        assert_eq!(&whole[16..16 + len], &data[..]);
        let want = crate::crc::crc32c(&whole[..crc_at]);
        assert_eq!(whole[crc_at..], Crc32c::to_wire(want));
        // Two fills, the first ending inside the payload, in a fresh
        // descriptor (nothing remembered).
        let mut d = FpduDesc::new(&[0xAB; 14], &[], &[range], true, None, true).unwrap();
        let mut parts = vec![0xEE; wire];
        let cut = BOUNCE + 17;
        let (a, b) = parts.split_at_mut(cut);
        assert!(d.fill(&mem, 0, a));
        assert!(d.fill(&mem, cut, b));
        assert!(parts == whole);
    }

    #[test]
    fn pieces_give_the_same_octets_crc_running_or_remembered() {
        let want = framed(true);
        for step in [1usize, 3, 7, 64, 333] {
            // Pieces in order (the CRC runs over them as they are written).
            let mut mem = MemoryTable::new();
            let pd = mem.alloc_pd();
            let mut q = qp(pd, true);
            setup(&mut q, &mut mem, pd);
            let mut txq = TxQueue::new(1000);
            for d in descs(&mut q, &mem) {
                txq.push(TxRecord::Fpdu(d));
            }
            assert_eq!(txq.end() - 1000, want.len() as u64);
            let mut got = vec![0u8; want.len()];
            let mut at = 0;
            while at < got.len() {
                let n = step.min(got.len() - at);
                assert!(txq.fill(&mem, 1000 + at as u64, &mut got[at..at + n]));
                at += n;
            }
            assert!(got == want, "pieces of {step}");
            // Across record boundaries in one fill, CRCs now remembered.
            let mut again = vec![0u8; want.len()];
            assert!(txq.fill(&mem, 1000, &mut again));
            assert!(again == want);
            assert!(!txq.take_failed());
            // Outside the queue: refused.
            assert!(!txq.fill(&mem, 999, &mut [0u8; 1]));
            assert!(!txq.fill(&mem, txq.end(), &mut [0u8; 1]));
            assert!(txq.take_failed());
        }
    }

    /// The framer's octets of `setup`'s Write and Send (CRC on), and
    /// the queue their records went to: FPDUs of at most 1500 octets,
    /// messages below 1000 copied.
    fn queued() -> (Vec<u8>, MemoryTable, Qp, TxQueue) {
        let want = framed(true);
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut q = qp(pd, true);
        setup(&mut q, &mut mem, pd);
        let mut txq = TxQueue::new(0);
        while q.poll_record(&mem, 1500, 1000, &mut txq) {}
        (want, mem, q, txq)
    }

    /// Below `copy_below` a Send or Write is framed as octets (the
    /// framer's, exactly) and completes once handed over; at or above it,
    /// only once acknowledged.
    #[test]
    fn small_messages_are_copied_and_complete_at_once() {
        // The Write (3200 octets) by reference, the Send (600) copied.
        let (want, mem, mut q, mut txq) = queued();
        let kinds: Vec<bool> = txq
            .recs
            .iter()
            .map(|(_, r)| matches!(r, TxRecord::Bytes(_)))
            .collect();
        assert_eq!(kinds, [false, false, false, false, true]);
        let mut got = vec![0u8; want.len()];
        assert!(txq.fill(&mem, 0, &mut got));
        assert!(got == want);
        // The Send is done, but completes after the Write (RFC 5040 §5.5
        // rule 15), which waits for its ACK.
        assert!(q.poll_completion().is_none());
        let mut done = Vec::new();
        txq.release(txq.end(), &mut |s| done.push(s));
        assert_eq!(done.len(), 1, "only the Write waited for the ACK");
        q.fpdu_acked(done[0]);
        let ids: Vec<u64> = std::iter::from_fn(|| q.poll_completion())
            .map(|c| c.wr_id)
            .collect();
        assert_eq!(ids, [7, 8]);
    }

    /// Segments of any size, in order or not, inside one record or across
    /// several, fill the framer's octets.
    #[test]
    fn fills_inside_one_record_or_across_match_the_framer() {
        let (want, mem, _, mut txq) = queued();
        for seg in [1, 7, 100, 1460, want.len()] {
            let mut got = vec![0u8; want.len()];
            for at in (0..want.len()).step_by(seg) {
                let end = (at + seg).min(want.len());
                assert!(
                    txq.fill(&mem, at as u64, &mut got[at..end]),
                    "{seg} at {at}"
                );
            }
            assert!(got == want, "segments of {seg} in order");
            let mut got = vec![0u8; want.len()];
            for at in (0..want.len()).step_by(seg).rev() {
                let end = (at + seg).min(want.len());
                assert!(
                    txq.fill(&mem, at as u64, &mut got[at..end]),
                    "{seg} at {at}"
                );
            }
            assert!(got == want, "segments of {seg} last first");
        }
        assert!(txq.fill(&mem, 5, &mut []), "nothing to fill");
        assert!(
            !txq.fill(&mem, want.len() as u64 - 1, &mut [0; 2]),
            "past the end"
        );
    }

    /// A fill that starts past the FPDU's first octet and reaches its CRC
    /// (a partial retransmission, say) with no CRC known yet: it is read
    /// again from registered memory, and matches the framer's.
    #[test]
    fn a_crc_with_nothing_before_it_is_read_again() {
        let want = framed(true);
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut q = qp(pd, true);
        setup(&mut q, &mut mem, pd);
        let mut ds = descs(&mut q, &mem);
        let d = &mut ds[0];
        let w = d.wire_len();
        let mut tail = [0u8; 6];
        assert!(d.fill(&mem, w - 6, &mut tail));
        assert_eq!(tail, want[w - 6..w]);
        // Out of order pieces: the CRC remembered now.
        let mut got = vec![0u8; w];
        assert!(d.fill(&mem, 100, &mut got[100..]));
        assert!(d.fill(&mem, 0, &mut got[..100]));
        assert!(got[..] == want[..w]);
    }

    #[test]
    fn a_deregistered_source_fails_the_fill() {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut q = qp(pd, true);
        let (a, _) = setup(&mut q, &mut mem, pd);
        let mut ds = descs(&mut q, &mem);
        mem.deregister(a).unwrap();
        let d = &mut ds[0];
        let mut buf = vec![0u8; d.wire_len()];
        assert!(!d.fill(&mem, 0, &mut buf), "region a is gone");
        // The head alone needs no memory.
        assert!(d.fill(&mem, 0, &mut buf[..2]));
        // The Send reads region b only: still fine.
        let last = ds.last_mut().unwrap();
        let mut buf = vec![0u8; last.wire_len()];
        assert!(last.fill(&mem, 0, &mut buf));
    }

    #[test]
    fn requests_complete_once_acknowledged_in_order() {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let mut q = qp(pd, true);
        setup(&mut q, &mut mem, pd);
        let mut txq = TxQueue::new(0);
        for d in descs(&mut q, &mem) {
            txq.push(TxRecord::Fpdu(d));
        }
        assert!(q.poll_completion().is_none(), "nothing acknowledged yet");
        let ends: Vec<u64> = {
            let mut e = Vec::new();
            let mut off = 0;
            for (_, r) in &txq.recs {
                off += r.wire_len() as u64;
                e.push(off);
            }
            e
        };
        // All but the last octet of the Write's last FPDU.
        let mut done = Vec::new();
        txq.release(ends[3] - 1, &mut |s| done.push(s));
        assert!(done.is_empty());
        txq.release(ends[3], &mut |s| done.push(s));
        assert_eq!(done.len(), 1);
        for s in done.drain(..) {
            q.fpdu_acked(s);
        }
        let c: Completion = q.poll_completion().expect("the Write completes");
        assert_eq!(
            (c.wr_id, c.status, c.byte_len),
            (7, WcStatus::Success, 3200)
        );
        assert!(q.poll_completion().is_none());
        txq.release(ends[4], &mut |s| done.push(s));
        for s in done.drain(..) {
            q.fpdu_acked(s);
        }
        assert_eq!(q.poll_completion().map(|c| c.wr_id), Some(8));
        assert!(txq.is_empty());
    }

    /// Acknowledged small records leave their buffers for the next ones
    /// (no allocation per small message), at most `SPARE_BUFFERS` of at
    /// most `SPARE_MAX` octets; a trimmed idle queue keeps none.
    #[test]
    fn acknowledged_small_buffers_are_reused_within_a_bound() {
        let mut q = TxQueue::new(0);
        for i in 0..6u8 {
            let mut b = q.buffer(100);
            b.extend_from_slice(&[i; 100]);
            q.push(TxRecord::Bytes(b));
        }
        let mut big = q.buffer(SPARE_MAX + 1);
        big.resize(SPARE_MAX + 1, 7);
        q.push(TxRecord::Bytes(big));
        q.release(q.end(), &mut |_| {});
        assert!(q.is_empty());
        assert_eq!(q.spare.len(), SPARE_BUFFERS);
        assert!(q
            .spare
            .iter()
            .all(|b| b.is_empty() && b.capacity() <= SPARE_MAX));
        let reused = q.buffer(100);
        assert!(reused.is_empty() && reused.capacity() >= 100);
        assert_eq!(q.spare.len(), SPARE_BUFFERS - 1);
        // None big enough: a fresh one, the spares stay.
        let fresh = q.buffer(SPARE_MAX * 2);
        assert!(fresh.capacity() >= SPARE_MAX * 2);
        assert_eq!(q.spare.len(), SPARE_BUFFERS - 1);
        q.trim();
        assert!(q.spare.is_empty());
    }
}
