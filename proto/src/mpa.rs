//! MPA full-operation framing (RFC 5044 §4-§6, summarised in wire-facts.md).
//!
//! [`Framer`] turns ULPDUs (DDP segments) into FPDUs: ULPDU_LENGTH, PAD, CRC32c
//! and — when negotiated for that direction — markers every 512 octets of the
//! stream. [`Deframer`] does the reverse over a byte stream cut at any points:
//! it removes and checks markers, checks the CRC, and hands each DDP header and
//! each payload piece to an [`UlpduSink`] as soon as it has arrived, so DDP can
//! place payload straight into registered memory without a reassembly buffer.
//!
//! Marker semantics (RFC 5044 §4.3, wire-facts.md): markers sit at stream
//! offsets that are multiples of 512 counted from the first octet of the first
//! FPDU. FPDUPTR is the distance from the current FPDU's ULPDU_LENGTH field to
//! the marker; a marker that falls exactly where an FPDU begins precedes that
//! FPDU's length field, carries FPDUPTR 0, and is covered by that FPDU's CRC
//! (Wireshark's `iwarp_mpa` computes the CRC the same way). A marker can fall
//! between PAD and CRC; it never splits a field because FPDUs are 4-aligned.

use crate::crc::Crc32c;
use crate::mem::RegionSlice;
use crate::wire::ddp::DdpControl;
use crate::wire::fpdu::{pad_len, CRC_LEN, LEN_FIELD, MARKER_INTERVAL, MARKER_LEN};

/// FPDUs up to this many octets on the wire are framed in one piece
/// ([`Framer::emit_parts`]): a Send or Write of a few dozen octets, a
/// Read Request, a Terminate.
const SMALL_FPDU: usize = 256;
use crate::wire::{Marker, TermCode, WireError};

/// Largest ULPDU that fits an FPDU in one TCP segment of `emss` octets
/// (wire-facts.md "Size"): without markers `EMSS - 6 - (EMSS mod 4)`, with
/// markers `EMSS - (6 + 4 * ceil(EMSS / 512) + EMSS mod 4)`.
pub fn mulpdu(emss: u16, markers: bool) -> u16 {
    let e = emss as usize;
    let overhead = if markers {
        6 + 4 * e.div_ceil(MARKER_INTERVAL as usize) + e % 4
    } else {
        6 + e % 4
    };
    e.saturating_sub(overhead) as u16
}

/// Octets of the stream an FPDU carrying `ulpdu_len` occupies when it starts at
/// stream offset `pos` (markers counted when `markers` is on).
pub fn wire_len_at(pos: u64, ulpdu_len: usize, markers: bool) -> usize {
    let body = LEN_FIELD + ulpdu_len + pad_len(ulpdu_len);
    if !markers {
        return body + CRC_LEN;
    }
    // Walk the marker positions the framer would insert.
    let mut p = pos;
    let mut n = 0usize;
    if p.is_multiple_of(MARKER_INTERVAL) {
        p += MARKER_LEN as u64;
        n += MARKER_LEN;
    }
    let mut left = body;
    while left > 0 {
        let room = (MARKER_INTERVAL - p % MARKER_INTERVAL) as usize;
        let k = room.min(left);
        p += k as u64;
        n += k;
        left -= k;
        if left > 0 && p.is_multiple_of(MARKER_INTERVAL) {
            p += MARKER_LEN as u64;
            n += MARKER_LEN;
        }
    }
    if p.is_multiple_of(MARKER_INTERVAL) {
        n += MARKER_LEN; // between PAD and CRC
    }
    n + CRC_LEN
}

/// Transmit-side framing state for one direction of a connection.
#[derive(Debug, Clone)]
pub struct Framer {
    crc: bool,
    markers: bool,
    /// Octets emitted since the first FPDU (marker phase).
    pos: u64,
}

impl Framer {
    /// A framer at the start of full operation.
    pub fn new(crc: bool, markers: bool) -> Self {
        Framer {
            crc,
            markers,
            pos: 0,
        }
    }

    /// Stream offset of the next octet (since the first FPDU).
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// Whether markers are inserted.
    pub fn markers(&self) -> bool {
        self.markers
    }

    /// Whether the CRC is computed (else its field is 0).
    pub fn crc(&self) -> bool {
        self.crc
    }

    /// Count `n` octets framed elsewhere (an FPDU sent from its descriptor,
    /// [`crate::txq`]; only without markers, whose phase it would move).
    pub fn skip(&mut self, n: usize) {
        debug_assert!(!self.markers);
        self.pos += n as u64;
    }

    /// Octets the next FPDU will take for a ULPDU of `ulpdu_len`.
    pub fn next_wire_len(&self, ulpdu_len: usize) -> usize {
        wire_len_at(self.pos, ulpdu_len, self.markers)
    }

    /// Append one FPDU whose ULPDU is the concatenation of `parts` to `out`.
    /// Returns the octets appended.
    pub fn emit(&mut self, parts: &[&[u8]], out: &mut Vec<u8>) -> Result<usize, WireError> {
        let mut p: [Part<'_>; 8] = [Part::Bytes(&[]); 8];
        if parts.len() > p.len() {
            let joined: Vec<u8> = parts.concat();
            return self.emit_parts(&[Part::Bytes(&joined)], out);
        }
        for (d, s) in p.iter_mut().zip(parts) {
            *d = Part::Bytes(s);
        }
        self.emit_parts(&p[..parts.len()], out)
    }

    /// [`emit`](Self::emit) with parts that may be slices of registered
    /// memory: those are copied once, straight from the region into `out`,
    /// and the CRC runs over the copy (so it covers exactly what goes out).
    pub fn emit_parts(
        &mut self,
        parts: &[Part<'_>],
        out: &mut dyn TxBuf,
    ) -> Result<usize, WireError> {
        let ulpdu_len: usize = parts.iter().map(Part::len).sum();
        if ulpdu_len > u16::MAX as usize {
            return Err(WireError::Malformed {
                what: "MPA FPDU",
                field: "ULPDU_LENGTH",
                value: ulpdu_len as u32,
            });
        }
        // Without markers, a small FPDU is assembled whole on the stack and
        // summed once: one CRC pass and one append instead of one per part.
        let wire = LEN_FIELD + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN;
        if !self.markers && wire <= SMALL_FPDU {
            let mut buf = [0u8; SMALL_FPDU];
            let mut at = LEN_FIELD;
            for p in parts {
                let dst = &mut buf[at..at + p.len()];
                match p {
                    Part::Bytes(b) => dst.copy_from_slice(b),
                    // Cannot fail: the slice's length was checked when it
                    // was made.
                    Part::Region(r) => {
                        let _ = r.copy_to(0, dst);
                    }
                }
                at += p.len();
            }
            self.seal(&mut buf[..wire], ulpdu_len);
            out.put(&buf[..wire]);
            return Ok(wire);
        }
        let start = out.len();
        let mut crc = Crc32c::new();
        // A marker that falls where this FPDU begins precedes its length field
        // and carries FPDUPTR 0 (RFC 5044 §4.3).
        if self.markers && self.pos.is_multiple_of(MARKER_INTERVAL) {
            self.put_marker(out, &mut crc, 0);
        }
        let len_pos = self.pos;
        let len_field = (ulpdu_len as u16).to_be_bytes();
        self.put(out, &mut crc, Part::Bytes(&len_field), len_pos);
        for p in parts {
            self.put(out, &mut crc, *p, len_pos);
        }
        let pad = [0u8; 3];
        self.put(
            out,
            &mut crc,
            Part::Bytes(&pad[..pad_len(ulpdu_len)]),
            len_pos,
        );
        // A marker can fall between PAD and CRC; it is inside this FPDU.
        if self.markers && self.pos.is_multiple_of(MARKER_INTERVAL) {
            let ptr = (self.pos - len_pos) as u16;
            self.put_marker(out, &mut crc, ptr);
        }
        let value = if self.crc { crc.value() } else { 0 };
        put_all(out, &Crc32c::to_wire(value));
        self.pos += CRC_LEN as u64;
        Ok(out.len() - start)
    }

    /// Frame in place an FPDU laid out whole in `fpdu` (no markers): room
    /// for the length field, the ULPDU of `ulpdu_len` octets, PAD (zero)
    /// and room for the CRC. Writes ULPDU_LENGTH and the CRC over all
    /// before it (RFC 5044 §4.1; 0 when not in use) and counts the FPDU
    /// as sent.
    pub(crate) fn seal(&mut self, fpdu: &mut [u8], ulpdu_len: usize) {
        debug_assert!(!self.markers);
        // Cannot truncate: callers keep the ULPDU within MULPDU, a u16.
        fpdu[..LEN_FIELD].copy_from_slice(&(ulpdu_len as u16).to_be_bytes());
        let body = fpdu.len() - CRC_LEN;
        let value = if self.crc {
            let mut crc = Crc32c::new();
            crc.update(&fpdu[..body]);
            crc.value()
        } else {
            0
        };
        fpdu[body..].copy_from_slice(&Crc32c::to_wire(value));
        self.pos += fpdu.len() as u64;
    }

    fn put(&mut self, out: &mut dyn TxBuf, crc: &mut Crc32c, data: Part<'_>, len_pos: u64) {
        let (len, mut done) = (data.len(), 0);
        while done < len {
            if self.markers && self.pos.is_multiple_of(MARKER_INTERVAL) {
                let ptr = (self.pos - len_pos) as u16;
                self.put_marker(out, crc, ptr);
            }
            let room = if self.markers {
                (MARKER_INTERVAL - self.pos % MARKER_INTERVAL) as usize
            } else {
                len - done
            };
            let n = room.min(len - done);
            // The buffer may hand the n octets over in pieces (a ring that
            // wraps); each is filled, then summed where it lies.
            let mut k = 0;
            while k < n {
                let dst = out.append(n - k);
                if dst.is_empty() {
                    // The caller sized the FPDU against the room it gave;
                    // a buffer that runs out anyway gets a short FPDU, not
                    // a loop.
                    debug_assert!(false, "TxBuf ran out inside an FPDU");
                    return;
                }
                let at = done + k;
                match data {
                    Part::Bytes(b) => dst.copy_from_slice(&b[at..at + dst.len()]),
                    Part::Region(r) => {
                        // Cannot fail: at + dst.len() <= r.len(), checked
                        // when the slice was made.
                        let _ = r.copy_to(at, dst);
                    }
                }
                if self.crc {
                    crc.update(dst);
                }
                k += dst.len();
            }
            self.pos += n as u64;
            done += n;
        }
    }

    fn put_marker(&mut self, out: &mut dyn TxBuf, crc: &mut Crc32c, fpduptr: u16) {
        let m = Marker {
            reserved: 0,
            fpduptr,
        }
        .to_bytes();
        put_all(out, &m);
        if self.crc {
            crc.update(&m);
        }
        self.pos += MARKER_LEN as u64;
    }
}

/// Where a [`Framer`] (and a queue pair's transmit side) writes: a `Vec`,
/// or room a transport lends in its own send buffer, so that an FPDU is
/// built where it will be sent from and never copied again before the
/// frame.
pub trait TxBuf {
    /// Octets written so far.
    fn len(&self) -> usize;
    /// Nothing written so far.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The next piece to fill: at least one and at most `max` octets (fewer
    /// only where the buffer is not contiguous), counted as written; the
    /// caller fills all of it. Empty only when `max` is 0 or the buffer
    /// has no room left.
    fn append(&mut self, max: usize) -> &mut [u8];
    /// Write all of `data` (as many pieces as it takes); a buffer that can
    /// take it whole without filling a piece first says so here.
    fn put(&mut self, data: &[u8]) {
        put_pieces(self, data);
    }
}

impl TxBuf for Vec<u8> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    fn append(&mut self, max: usize) -> &mut [u8] {
        let at = Vec::len(self);
        self.resize(at + max, 0);
        &mut self[at..]
    }
    /// Appended in one copy (no zero fill of the piece first).
    fn put(&mut self, data: &[u8]) {
        self.extend_from_slice(data);
    }
}

/// Write all of `data` to `out` (as many pieces as it takes).
pub fn put_all(out: &mut dyn TxBuf, data: &[u8]) {
    put_pieces(out, data);
}

/// [`put_all`] and [`TxBuf::put`]'s default: piece by piece.
fn put_pieces<B: TxBuf + ?Sized>(out: &mut B, mut data: &[u8]) {
    while !data.is_empty() {
        let dst = out.append(data.len());
        if dst.is_empty() {
            debug_assert!(false, "TxBuf ran out");
            return;
        }
        let n = dst.len();
        dst.copy_from_slice(&data[..n]);
        data = &data[n..];
    }
}

/// One piece of an outbound ULPDU.
#[derive(Debug, Clone, Copy)]
pub enum Part<'a> {
    /// Octets the caller holds (headers, inline data).
    Bytes(&'a [u8]),
    /// Octets of a registered region, copied from it as the FPDU is built.
    Region(RegionSlice<'a>),
}

impl Part<'_> {
    /// Length in octets.
    pub fn len(&self) -> usize {
        match self {
            Part::Bytes(b) => b.len(),
            Part::Region(r) => r.len(),
        }
    }

    /// Zero length.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Receives the ULPDUs a [`Deframer`] recovers, piece by piece.
///
/// Call order per FPDU: `segment_begin` once (with the DDP header, or fewer
/// octets if the ULPDU is shorter than the header its control octet announces),
/// `segment_data` zero or more times with consecutive payload pieces, then
/// `segment_end` — only if the CRC (when negotiated) matched. If the CRC fails,
/// the deframer returns [`MpaError::Crc`] instead of calling `segment_end`.
pub trait UlpduSink {
    /// A new ULPDU of `ulpdu_len` octets begins; `header` holds its DDP header.
    fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]);
    /// The next piece of the ULPDU's payload (after the header).
    fn segment_data(&mut self, data: &[u8]);
    /// The FPDU ended and its CRC checked out.
    fn segment_end(&mut self);
    /// A whole ULPDU at once, its CRC already checked: `header` then
    /// `payload` (possibly empty). The same as `segment_begin`, then
    /// `segment_data` if `payload` is not empty, then `segment_end`, which
    /// is what it does unless a sink has a shorter way.
    fn segment_whole(&mut self, ulpdu_len: u16, header: &[u8], payload: &[u8]) {
        self.segment_begin(ulpdu_len, header);
        if !payload.is_empty() {
            self.segment_data(payload);
        }
        self.segment_end();
    }
}

/// A stream-fatal MPA receive error; each maps to one LLP Terminate code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MpaError {
    /// CRC mismatch (RFC 5044 §6: LLP Terminate code 0x02).
    Crc {
        /// Value in the FPDU.
        received: u32,
        /// Value computed.
        computed: u32,
        /// Stream offset of the CRC field.
        at: u64,
    },
    /// A marker's FPDUPTR disagrees with the FPDU boundaries that ULPDU_LENGTH
    /// implies (LLP Terminate code 0x03).
    Marker {
        /// Stream offset of the marker.
        at: u64,
        /// FPDUPTR received.
        fpduptr: u16,
        /// FPDUPTR expected.
        expected: u16,
    },
}

impl MpaError {
    /// The Terminate code this error is reported with.
    pub fn term_code(&self) -> TermCode {
        match self {
            MpaError::Crc { .. } => TermCode::MPA_CRC,
            MpaError::Marker { .. } => TermCode::MPA_MARKER,
        }
    }
}

impl core::fmt::Display for MpaError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            MpaError::Crc { received, computed, at } => write!(
                f,
                "MPA CRC mismatch at stream offset {at}: received {received:#010x}, computed {computed:#010x}"
            ),
            MpaError::Marker { at, fpduptr, expected } => write!(
                f,
                "MPA marker at stream offset {at} has FPDUPTR {fpduptr}, expected {expected}"
            ),
        }
    }
}

impl std::error::Error for MpaError {}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Len,
    Header,
    Payload,
    Pad,
    Crc,
}

/// Receive-side deframing state for one direction of a connection.
#[derive(Debug, Clone)]
pub struct Deframer {
    crc_on: bool,
    markers: bool,
    pos: u64,
    phase: Phase,
    /// Whether the current FPDU has begun (its leading marker or first length octet seen).
    open: bool,
    len_pos: u64,
    crc: Crc32c,
    /// Length field (2) then DDP header (up to 18).
    buf: [u8; 20],
    have: usize,
    ulpdu_len: usize,
    hdr_len: usize,
    ulpdu_done: usize,
    pad_left: usize,
    crc_buf: [u8; 4],
    crc_have: usize,
    marker_buf: [u8; 4],
    marker_have: usize,
    failed: Option<MpaError>,
    fpdus: u64,
}

impl Deframer {
    /// A deframer at the start of full operation.
    pub fn new(crc: bool, markers: bool) -> Self {
        Deframer {
            crc_on: crc,
            markers,
            pos: 0,
            phase: Phase::Len,
            open: false,
            len_pos: 0,
            crc: Crc32c::new(),
            buf: [0; 20],
            have: 0,
            ulpdu_len: 0,
            hdr_len: 0,
            ulpdu_done: 0,
            pad_left: 0,
            crc_buf: [0; 4],
            crc_have: 0,
            marker_buf: [0; 4],
            marker_have: 0,
            failed: None,
            fpdus: 0,
        }
    }

    /// Octets consumed since the first FPDU.
    pub fn position(&self) -> u64 {
        self.pos
    }

    /// FPDUs completed.
    pub fn fpdus(&self) -> u64 {
        self.fpdus
    }

    /// True between FPDUs (nothing of a next FPDU consumed yet).
    pub fn at_boundary(&self) -> bool {
        self.phase == Phase::Len && !self.open && self.marker_have == 0
    }

    /// The error that stopped this deframer, if any (errors are sticky).
    pub fn error(&self) -> Option<MpaError> {
        self.failed
    }

    /// Consume stream octets, driving `sink`. After an error every call returns it again.
    pub fn feed<S: UlpduSink + ?Sized>(
        &mut self,
        mut data: &[u8],
        sink: &mut S,
    ) -> Result<(), MpaError> {
        if let Some(e) = self.failed {
            return Err(e);
        }
        while !data.is_empty() {
            if let Some(used) = self.whole_fpdu(data, sink) {
                data = &data[used?..];
                continue;
            }
            if self.markers && (self.marker_have > 0 || self.pos.is_multiple_of(MARKER_INTERVAL)) {
                let n = (MARKER_LEN - self.marker_have).min(data.len());
                self.marker_buf[self.marker_have..self.marker_have + n].copy_from_slice(&data[..n]);
                self.marker_have += n;
                self.pos += n as u64;
                data = &data[n..];
                if self.marker_have == MARKER_LEN {
                    self.marker_have = 0;
                    self.finish_marker()?;
                }
                continue;
            }
            let run = if self.markers {
                ((MARKER_INTERVAL - self.pos % MARKER_INTERVAL) as usize).min(data.len())
            } else {
                data.len()
            };
            let used = self.step(&data[..run], sink)?;
            self.pos += used as u64;
            data = &data[used..];
        }
        Ok(())
    }

    /// The common case in one pass: a whole FPDU at the start of `data`,
    /// between FPDUs, without markers (an MPA-aware sender puts one or more
    /// whole FPDUs in each segment, RFC 5044 §8). The CRC is computed over
    /// the whole FPDU in one call and checked *before* DDP sees the
    /// segment, so a corrupted FPDU that arrives whole is never placed
    /// (RFC 5044 §6: a CRC mismatch fails the stream). Returns `None`
    /// (nothing consumed) where the octet-by-octet path must run: a
    /// partial FPDU, markers, a zero-length ULPDU.
    fn whole_fpdu<S: UlpduSink + ?Sized>(
        &mut self,
        data: &[u8],
        sink: &mut S,
    ) -> Option<Result<usize, MpaError>> {
        if self.markers || self.phase != Phase::Len || self.open || data.len() < LEN_FIELD + 1 {
            return None;
        }
        let ulpdu_len = usize::from(u16::from_be_bytes([data[0], data[1]]));
        let body = LEN_FIELD + ulpdu_len + pad_len(ulpdu_len);
        if ulpdu_len == 0 || data.len() < body + CRC_LEN {
            return None;
        }
        if self.crc_on {
            let received =
                Crc32c::from_wire([data[body], data[body + 1], data[body + 2], data[body + 3]]);
            let computed = crate::crc::crc32c(&data[..body]);
            if received != computed {
                let at = self.pos + body as u64;
                self.pos += (body + CRC_LEN) as u64;
                return Some(
                    self.fail(MpaError::Crc {
                        received,
                        computed,
                        at,
                    })
                    .map(|()| 0),
                );
            }
        }
        // The control octet says which header follows.
        let hdr_len = DdpControl(data[LEN_FIELD]).header_len().min(ulpdu_len);
        let end = LEN_FIELD + ulpdu_len;
        sink.segment_whole(
            ulpdu_len as u16,
            &data[LEN_FIELD..LEN_FIELD + hdr_len],
            &data[LEN_FIELD + hdr_len..end],
        );
        self.fpdus += 1;
        self.pos += (body + CRC_LEN) as u64;
        Some(Ok(body + CRC_LEN))
    }

    fn fail(&mut self, e: MpaError) -> Result<(), MpaError> {
        self.failed = Some(e);
        Err(e)
    }

    fn finish_marker(&mut self) -> Result<(), MpaError> {
        let at = self.pos - MARKER_LEN as u64;
        let m = match Marker::parse(&self.marker_buf) {
            Ok(m) => m,
            Err(_) => return Ok(()), // cannot happen: four octets are present
        };
        let leading = self.phase == Phase::Len && !self.open;
        let expected = if leading {
            // The marker precedes this FPDU's length field (RFC 5044 §4.3).
            self.crc = Crc32c::new();
            self.open = true;
            0u16
        } else {
            (at - self.len_pos) as u16
        };
        if self.crc_on {
            self.crc.update(&self.marker_buf);
        }
        if m.fpduptr != expected {
            return self.fail(MpaError::Marker {
                at,
                fpduptr: m.fpduptr,
                expected,
            });
        }
        Ok(())
    }

    fn enter_pad(&mut self) {
        self.pad_left = pad_len(self.ulpdu_len);
        self.phase = if self.pad_left == 0 {
            Phase::Crc
        } else {
            Phase::Pad
        };
    }

    /// Consume up to `chunk.len()` octets of the current phase (no marker inside).
    fn step<S: UlpduSink + ?Sized>(
        &mut self,
        chunk: &[u8],
        sink: &mut S,
    ) -> Result<usize, MpaError> {
        match self.phase {
            Phase::Len => {
                if !self.open {
                    self.crc = Crc32c::new();
                    self.open = true;
                }
                if self.have == 0 {
                    self.len_pos = self.pos;
                }
                let n = (LEN_FIELD - self.have).min(chunk.len());
                self.buf[self.have..self.have + n].copy_from_slice(&chunk[..n]);
                if self.crc_on {
                    self.crc.update(&chunk[..n]);
                }
                self.have += n;
                if self.have == LEN_FIELD {
                    self.ulpdu_len = u16::from_be_bytes([self.buf[0], self.buf[1]]) as usize;
                    self.ulpdu_done = 0;
                    if self.ulpdu_len == 0 {
                        sink.segment_begin(0, &[]);
                        self.enter_pad();
                    } else {
                        self.hdr_len = 0;
                        self.phase = Phase::Header;
                    }
                }
                Ok(n)
            }
            Phase::Header => {
                if self.hdr_len == 0 {
                    // The control octet says which header follows.
                    let want = DdpControl(chunk[0]).header_len();
                    self.hdr_len = want.min(self.ulpdu_len);
                }
                let got = self.have - LEN_FIELD;
                let n = (self.hdr_len - got).min(chunk.len());
                self.buf[self.have..self.have + n].copy_from_slice(&chunk[..n]);
                if self.crc_on {
                    self.crc.update(&chunk[..n]);
                }
                self.have += n;
                if self.have - LEN_FIELD == self.hdr_len {
                    sink.segment_begin(self.ulpdu_len as u16, &self.buf[LEN_FIELD..self.have]);
                    self.ulpdu_done = self.hdr_len;
                    if self.ulpdu_done == self.ulpdu_len {
                        self.enter_pad();
                    } else {
                        self.phase = Phase::Payload;
                    }
                }
                Ok(n)
            }
            Phase::Payload => {
                let n = (self.ulpdu_len - self.ulpdu_done).min(chunk.len());
                if self.crc_on {
                    self.crc.update(&chunk[..n]);
                }
                sink.segment_data(&chunk[..n]);
                self.ulpdu_done += n;
                if self.ulpdu_done == self.ulpdu_len {
                    self.enter_pad();
                }
                Ok(n)
            }
            Phase::Pad => {
                let n = self.pad_left.min(chunk.len());
                if self.crc_on {
                    self.crc.update(&chunk[..n]);
                }
                self.pad_left -= n;
                if self.pad_left == 0 {
                    self.phase = Phase::Crc;
                }
                Ok(n)
            }
            Phase::Crc => {
                let n = (CRC_LEN - self.crc_have).min(chunk.len());
                self.crc_buf[self.crc_have..self.crc_have + n].copy_from_slice(&chunk[..n]);
                self.crc_have += n;
                if self.crc_have == CRC_LEN {
                    self.crc_have = 0;
                    let received = Crc32c::from_wire(self.crc_buf);
                    let computed = self.crc.value();
                    // RFC 5044 §6: with CRC negotiated, a mismatch fails the stream.
                    if self.crc_on && received != computed {
                        let at = self.pos + n as u64 - CRC_LEN as u64;
                        self.pos += n as u64;
                        self.fail(MpaError::Crc {
                            received,
                            computed,
                            at,
                        })?;
                    }
                    sink.segment_end();
                    self.fpdus += 1;
                    self.phase = Phase::Len;
                    self.open = false;
                    self.have = 0;
                }
                Ok(n)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Collects what the deframer hands up.
    #[derive(Default, Debug)]
    struct Collect {
        segs: Vec<(u16, Vec<u8>, Vec<u8>, bool)>,
    }
    impl UlpduSink for Collect {
        fn segment_begin(&mut self, ulpdu_len: u16, header: &[u8]) {
            self.segs
                .push((ulpdu_len, header.to_vec(), Vec::new(), false));
        }
        fn segment_data(&mut self, data: &[u8]) {
            self.segs.last_mut().unwrap().2.extend_from_slice(data);
        }
        fn segment_end(&mut self) {
            self.segs.last_mut().unwrap().3 = true;
        }
    }

    fn ulpdu(i: usize, len: usize) -> Vec<u8> {
        // a tagged header (14) then payload
        let mut v = vec![0xc1, 0x40, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, i as u8];
        v.extend((0..len).map(|k| (k * 31 + i) as u8));
        v
    }

    #[test]
    fn mulpdu_matches_wire_facts() {
        assert_eq!(mulpdu(1448, false), 1442);
        assert_eq!(mulpdu(1460, false), 1454);
        assert_eq!(mulpdu(1450, false), 1442);
        assert_eq!(mulpdu(1448, true), 1448 - (6 + 12));
        // An FPDU of MULPDU octets never exceeds EMSS, wherever it starts.
        for emss in [536u16, 1024, 1448, 1460, 8960] {
            for markers in [false, true] {
                let m = mulpdu(emss, markers) as usize;
                for pos in (0..1024u64).step_by(4) {
                    assert!(
                        wire_len_at(pos, m, markers) <= emss as usize,
                        "emss {emss} pos {pos}"
                    );
                }
            }
        }
    }

    /// First FPDU of a marker stream: marker 00000000 precedes the length.
    #[test]
    fn leading_marker_literal() {
        let mut f = Framer::new(true, true);
        let mut out = Vec::new();
        let u = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let n = f.emit(&[&u], &mut out).unwrap();
        assert_eq!(n, 24);
        assert_eq!(&out[..6], &[0, 0, 0, 0, 0x00, 0x0e]);
        // CRC covers the marker too.
        let c = crate::crc::crc32c(&out[..20]);
        assert_eq!(&out[20..], &Crc32c::to_wire(c));
        assert_eq!(n, wire_len_at(0, 14, true));
    }

    /// A marker that lands between PAD and CRC.
    #[test]
    fn marker_between_pad_and_crc() {
        let mut f = Framer::new(true, true);
        let mut out = Vec::new();
        // First FPDU: 4 (marker) + 2 + 502 + 0 pad = 508, crc 4 -> ends at 512.
        f.emit(&[&vec![7u8; 502]], &mut out).unwrap();
        assert_eq!(out.len(), 512);
        // Second FPDU starts at 512 with a leading marker.
        let mut out2 = Vec::new();
        f.emit(&[&vec![9u8; 498]], &mut out2).unwrap();
        assert_eq!(&out2[..4], &[0, 0, 0, 0]);
        // Third FPDU sized so its PAD ends exactly at 1536.
        let start = f.position();
        assert_eq!(start, 512 + 4 + 2 + 498 + 4); // marker, length, ULPDU (no PAD), CRC
        let body = (1536 - start) as usize - 2; // len field + ulpdu (+pad) up to 1536
        let mut out3 = Vec::new();
        f.emit(&[&vec![1u8; body - 4]], &mut out3).unwrap(); // -4 for the marker at 1024
                                                             // marker at 1536 (between PAD and CRC) with FPDUPTR = 1536 - start
        let m_at = out3.len() - 8;
        let m = Marker::parse(&out3[m_at..m_at + 4]).unwrap();
        assert_eq!(m.fpduptr as u64, 1536 - start);
        let mut all = out;
        all.extend(out2);
        all.extend(out3);
        let mut d = Deframer::new(true, true);
        let mut c = Collect::default();
        d.feed(&all, &mut c).unwrap();
        assert_eq!(c.segs.len(), 3);
        assert!(c.segs.iter().all(|s| s.3));
        // 0x01 as control octet announces an untagged (18-octet) header.
        assert_eq!(c.segs[2].1.len(), 18);
        assert_eq!(c.segs[2].1.len() + c.segs[2].2.len(), body - 4);
    }

    fn roundtrip(crc: bool, markers: bool, sizes: &[usize], cuts: &[usize]) {
        let mut f = Framer::new(crc, markers);
        let mut stream = Vec::new();
        let mut want = Vec::new();
        for (i, &s) in sizes.iter().enumerate() {
            let u = ulpdu(i, s);
            let before = stream.len();
            let pos = f.position();
            f.emit(&[&u[..5], &u[5..]], &mut stream).unwrap();
            assert_eq!(stream.len() - before, wire_len_at(pos, u.len(), markers));
            want.push(u);
        }
        let mut d = Deframer::new(crc, markers);
        let mut c = Collect::default();
        let mut at = 0;
        let mut k = 0;
        while at < stream.len() {
            let n = cuts[k % cuts.len()].max(1).min(stream.len() - at);
            d.feed(&stream[at..at + n], &mut c).unwrap();
            at += n;
            k += 1;
        }
        assert_eq!(c.segs.len(), want.len());
        for (s, w) in c.segs.iter().zip(&want) {
            assert_eq!(s.0 as usize, w.len());
            let mut got = s.1.clone();
            got.extend_from_slice(&s.2);
            assert_eq!(&got, w);
            assert!(s.3);
        }
        assert!(d.at_boundary());
    }

    #[test]
    fn roundtrip_all_cuts() {
        let sizes = [
            0usize, 1, 2, 3, 4, 5, 100, 497, 498, 499, 500, 1000, 1430, 3,
        ];
        for crc in [false, true] {
            for markers in [false, true] {
                for cut in [1usize, 2, 3, 4, 5, 7, 13, 64, 511, 512, 513, 1500, 100000] {
                    roundtrip(crc, markers, &sizes, &[cut]);
                }
                roundtrip(crc, markers, &sizes, &[1, 9, 2, 700, 3, 5, 4]);
            }
        }
    }

    /// Small FPDUs are framed in one piece, larger ones part by part: both
    /// give RFC 5044 §4's octets (ULPDU_LENGTH, ULPDU, PAD, CRC over all of
    /// them), on both sides of the cut-over, with a Region part.
    #[test]
    fn small_and_large_fpdus_have_the_same_layout() {
        use crate::mem::{Access, MemoryTable};
        let mut table = MemoryTable::new();
        let pd = table.alloc_pd();
        let src: Vec<u8> = (0..400u32).map(|i| (i * 7 + 3) as u8).collect();
        let stag = table
            .register(pd, src.clone(), Access::LOCAL_READ, 0)
            .unwrap();
        for len in [
            0usize, 1, 14, 15, 64, 233, 234, 235, 236, 237, 238, 300, 386,
        ] {
            let mut f = Framer::new(true, false);
            let hdr = [0xa5u8; 14];
            let body = len.saturating_sub(14);
            let range = table
                .check(stag, pd, Access::LOCAL_READ, 0, body as u64)
                .unwrap();
            let region = table.read(&range, 0, body).unwrap();
            let h = &hdr[..len.min(14)];
            let mut out = Vec::new();
            let n = f
                .emit_parts(&[Part::Bytes(h), Part::Region(region)], &mut out)
                .unwrap();
            let mut want = (len as u16).to_be_bytes().to_vec();
            want.extend_from_slice(h);
            want.extend_from_slice(&src[..body]);
            want.resize(want.len() + pad_len(len), 0);
            let crc = crc32c::crc32c(&want);
            // The CRC field carries the reflected CRC32c least significant
            // octet first, as iSCSI does (RFC 3385; the zero-length FPDU's
            // 0x48674bc7 goes out as c7 4b 67 48).
            want.extend_from_slice(&crc.to_le_bytes());
            assert_eq!(out, want, "ULPDU of {len} octets");
            assert_eq!(n, want.len());
            assert_eq!(f.position(), want.len() as u64);
        }
    }

    #[test]
    fn zero_length_ulpdu() {
        let mut f = Framer::new(true, false);
        let mut s = Vec::new();
        f.emit(&[], &mut s).unwrap();
        assert_eq!(s.len(), 8);
        let mut d = Deframer::new(true, false);
        let mut c = Collect::default();
        d.feed(&s, &mut c).unwrap();
        assert_eq!(c.segs, vec![(0, vec![], vec![], true)]);
    }

    /// A whole FPDU in one piece goes the one-pass way: its CRC is checked
    /// before DDP sees anything, so a corrupted one reaches no sink; fed
    /// octet by octet the same stream fails with the same error (there the
    /// header and payload have already gone up).
    #[test]
    fn a_whole_corrupt_fpdu_reaches_no_sink() {
        let mut f = Framer::new(true, false);
        let mut s = Vec::new();
        f.emit(&[&ulpdu(1, 600)], &mut s).unwrap();
        let first = s.len();
        f.emit(&[&ulpdu(2, 300)], &mut s).unwrap();
        for i in [2, 20, 400, first - 1, first + 30] {
            let mut bad = s.clone();
            bad[i] ^= 0x04;
            let mut d = Deframer::new(true, false);
            let mut c = Collect::default();
            let whole = d.feed(&bad, &mut c);
            let Err(MpaError::Crc { at, .. }) = whole else {
                panic!("flip at {i}: {whole:?}");
            };
            // The FPDU before the corrupt one is delivered whole.
            let delivered = if i < first { 0 } else { 1 };
            assert_eq!(c.segs.len(), delivered, "flip at {i}");
            assert!(c.segs.iter().all(|s| s.3));
            let crc_at = if i < first { first - 4 } else { s.len() - 4 };
            assert_eq!(at, crc_at as u64);
            let mut d2 = Deframer::new(true, false);
            let mut c2 = Collect::default();
            let mut piecewise = Ok(());
            for b in bad.chunks(1) {
                piecewise = d2.feed(b, &mut c2);
                if piecewise.is_err() {
                    break;
                }
            }
            assert_eq!(piecewise, whole, "flip at {i}");
            assert!(c2.segs.len() > delivered, "piecewise, the segment began");
        }
    }

    #[test]
    fn crc_error_is_reported_and_sticky() {
        let mut f = Framer::new(true, true);
        let mut s = Vec::new();
        f.emit(&[&ulpdu(1, 600)], &mut s).unwrap();
        let good = s.clone();
        for i in 0..good.len() {
            let mut s = good.clone();
            s[i] ^= 0x80;
            let mut d = Deframer::new(true, true);
            let mut c = Collect::default();
            let r = d.feed(&s, &mut c);
            // Either the marker check or the CRC check catches every single-bit flip,
            // or the length field grew and the FPDU is still incomplete.
            match r {
                Err(MpaError::Crc { .. }) | Err(MpaError::Marker { .. }) => {
                    assert!(c.segs.iter().all(|s| !s.3));
                    assert_eq!(d.feed(&[0], &mut c), r);
                }
                Ok(()) => assert!(
                    !d.at_boundary() && c.segs.iter().all(|s| !s.3),
                    "flip at {i}"
                ),
            }
        }
        // Without CRC negotiated the field is not checked.
        let mut s = good.clone();
        let l = s.len();
        s[l - 1] ^= 0xff;
        let mut d = Deframer::new(false, true);
        let mut c = Collect::default();
        d.feed(&s, &mut c).unwrap();
        assert!(c.segs[0].3);
    }

    #[test]
    fn marker_mismatch_is_llp_0x03() {
        let mut f = Framer::new(false, true);
        let mut s = Vec::new();
        f.emit(&[&ulpdu(1, 600)], &mut s).unwrap();
        // the marker at 512 carries FPDUPTR 508; make it 512
        assert_eq!(&s[512..516], &[0, 0, 0x01, 0xfc]);
        s[514] = 0x02;
        s[515] = 0x00;
        let mut d = Deframer::new(false, true);
        let mut c = Collect::default();
        let e = d.feed(&s, &mut c).unwrap_err();
        assert_eq!(
            e,
            MpaError::Marker {
                at: 512,
                fpduptr: 512,
                expected: 508
            }
        );
        assert_eq!(e.term_code(), TermCode::MPA_MARKER);
        // A leading marker that is not 0
        let mut f = Framer::new(false, true);
        let mut s = Vec::new();
        f.emit(&[&ulpdu(1, 10)], &mut s).unwrap();
        s[3] = 4;
        let mut d = Deframer::new(false, true);
        assert!(matches!(
            d.feed(&s, &mut c),
            Err(MpaError::Marker {
                at: 0,
                fpduptr: 4,
                expected: 0
            })
        ));
    }

    #[test]
    fn short_ulpdu_hands_partial_header() {
        let mut f = Framer::new(true, false);
        let mut s = Vec::new();
        f.emit(&[&[0xc1, 0x40, 0, 0]], &mut s).unwrap();
        let mut d = Deframer::new(true, false);
        let mut c = Collect::default();
        d.feed(&s, &mut c).unwrap();
        assert_eq!(c.segs, vec![(4, vec![0xc1, 0x40, 0, 0], vec![], true)]);
    }
}
