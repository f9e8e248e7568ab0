//! One queue pair on one DDP stream of a DDP/SCTP association (RFC 5043):
//! the glue between `proto::qp::Qp` over its segment lower layer and
//! `ddp_sctp`, I/O-free like both.
//!
//! * Segments the QP gives ([`Qp::poll_segment`]) go to the association's
//!   DDP stream as DDP Segment Chunks (PPID 16); one the association cannot
//!   take yet (SCTP send buffer full) waits here and goes first next time.
//! * [`DdpEvent::Segment`]s of our stream go to [`Qp::receive_segment`]
//!   with their DDP-SSN, in whatever order SCTP delivered them (RFC 5043
//!   §10); the QP orders them.
//! * Errors (RFC 5043 §6.2, §11.3): once the QP is in error — it sent its
//!   RDMAP Terminate, received the peer's, or lost the LLP — and has
//!   nothing more to send, we end the DDP Stream Session with a DDP Stream
//!   Session Terminate, which follows any RDMAP Terminate ("Note that this
//!   would follow any RDMAP Terminate message"). The session ending under
//!   us (the peer's Session Terminate with no RDMAP Terminate before it)
//!   or the association closing (§11.3: every consumer of a DDP stream is
//!   told) is a lost LLP for the QP: everything outstanding is flushed.
//!   A stream's termination does not end the association.

use ddp_sctp::{DdpAssociation, DdpError, DdpEvent};
use std::collections::VecDeque;

use iwarp_proto::mem::MemoryTable;
use iwarp_proto::mpa::TxBuf;
use iwarp_proto::qp::llp::{LowerLayer, SegmentConfig};
use iwarp_proto::qp::{Qp, QpConfig, QpState, Srq};
use iwarp_proto::txq::TxQueue;

/// Octets before the DDP Segment in the vectors given to
/// [`SegmentSink::send_segment_chunk`]: the DDP-SSN's (RFC 5043 §5.2.2).
pub const SSN_ROOM: usize = 2;

/// Where the QP's segments go: a [`DdpAssociation`], or a host's command
/// queue.
pub trait SegmentSink {
    /// Send one DDP Segment on `stream`.
    fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<(), DdpError>;
    /// Send one DDP Segment given as a DDP Segment Chunk to be: two
    /// octets of room for the DDP-SSN, then the segment (RFC 5043
    /// §5.2.2). A sink that can take the vector as it is (an association:
    /// [`DdpAssociation::send_segment_chunk`]) saves the copies; on
    /// refusal the vector comes back. By default, [`Self::send_segment`].
    fn send_segment_chunk(
        &mut self,
        stream: u16,
        chunk: Vec<u8>,
    ) -> Result<(), (DdpError, Vec<u8>)> {
        match self.send_segment(stream, chunk.get(SSN_ROOM..).unwrap_or_default()) {
            Ok(()) => Ok(()),
            Err(e) => Err((e, chunk)),
        }
    }
    /// Send DDP Stream Session Terminate on `stream`.
    fn terminate_session(&mut self, stream: u16) -> Result<(), DdpError>;
    /// Whether the sink takes segments by reference
    /// ([`send_segment_ext`](Self::send_segment_ext)), written into the
    /// packet from the queue pair's records whenever SCTP sends them
    /// ([`SctpQp::fill`]). False by default.
    fn takes_ext(&self) -> bool {
        false
    }
    /// Send the `len`-octet DDP Segment that record `key` of the queue
    /// pair's transmit queue holds, by reference
    /// ([`DdpAssociation::send_segment_ext`]); the chunk's TSN.
    fn send_segment_ext(&mut self, stream: u16, key: u64, len: usize) -> Result<u32, DdpError> {
        let _ = (stream, key, len);
        Err(DdpError::Sctp(sctp_lite::assoc::SendError::NotEstablished))
    }
    /// Whether SCTP has the chunk of TSN `tsn` cumulatively acknowledged
    /// (its source may go).
    fn acked(&self, tsn: u32) -> bool {
        let _ = tsn;
        false
    }
    /// An empty vector to build the next segment in, if the sink has one
    /// to reuse (an association's acknowledged chunks). None by default.
    fn spare(&mut self) -> Option<Vec<u8>> {
        None
    }
}

/// A [`DdpAssociation`] with the current time, as a [`SegmentSink`].
#[derive(Debug)]
pub struct AssocSink<'a> {
    /// The association.
    pub assoc: &'a mut DdpAssociation,
    /// Now, in the association's clock.
    pub now: u64,
}

impl SegmentSink for AssocSink<'_> {
    fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<(), DdpError> {
        self.assoc.send_segment(stream, segment).map(|_| ())
    }
    fn send_segment_chunk(
        &mut self,
        stream: u16,
        chunk: Vec<u8>,
    ) -> Result<(), (DdpError, Vec<u8>)> {
        self.assoc.send_segment_chunk(stream, chunk).map(|_| ())
    }
    fn terminate_session(&mut self, stream: u16) -> Result<(), DdpError> {
        self.assoc.terminate(self.now, stream)
    }
    fn spare(&mut self) -> Option<Vec<u8>> {
        self.assoc.take_spare()
    }
}

/// An [`AssocSink`] that takes segments by reference
/// ([`SegmentSink::takes_ext`]): the association's packets must then be
/// sent with [`DdpAssociation::poll_transmit_with`] and a fill that calls
/// [`SctpQp::fill`]: a plain `poll_transmit` cannot write them, so the
/// association ends with an ABORT ([`DdpAssociation::ext_failed`] says
/// why).
#[derive(Debug)]
pub struct AssocRefSink<'a>(pub AssocSink<'a>);

impl SegmentSink for AssocRefSink<'_> {
    fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<(), DdpError> {
        self.0.send_segment(stream, segment)
    }
    fn send_segment_chunk(
        &mut self,
        stream: u16,
        chunk: Vec<u8>,
    ) -> Result<(), (DdpError, Vec<u8>)> {
        self.0.send_segment_chunk(stream, chunk)
    }
    fn terminate_session(&mut self, stream: u16) -> Result<(), DdpError> {
        self.0.terminate_session(stream)
    }
    fn spare(&mut self) -> Option<Vec<u8>> {
        self.0.spare()
    }
    fn takes_ext(&self) -> bool {
        true
    }
    fn send_segment_ext(&mut self, stream: u16, key: u64, len: usize) -> Result<u32, DdpError> {
        self.0
            .assoc
            .send_segment_ext(stream, key, len)
            .map(|(_, tsn)| tsn)
    }
    fn acked(&self, tsn: u32) -> bool {
        self.0.assoc.sctp().is_acked(tsn)
    }
}

/// A segment built in a reused vector without zeroing it first: the
/// octets below `v.len()` are already initialised (a segment built there
/// before), `len` counts what this build wrote, and the caller cuts the
/// vector to it. What [`TxBuf`] lends is written whole by its caller, so
/// nothing stale is left below `len`.
struct Reuse<'a> {
    v: &'a mut Vec<u8>,
    len: usize,
}

impl<'a> Reuse<'a> {
    /// Start after `room` octets (kept for the caller to fill).
    fn new(v: &'a mut Vec<u8>, room: usize) -> Self {
        if v.len() < room {
            v.resize(room, 0);
        }
        Reuse { v, len: room }
    }
}

impl TxBuf for Reuse<'_> {
    fn len(&self) -> usize {
        self.len
    }
    fn append(&mut self, max: usize) -> &mut [u8] {
        let at = self.len;
        let end = at.saturating_add(max);
        if self.v.len() < end {
            self.v.resize(end, 0);
        }
        self.len = end;
        &mut self.v[at..end]
    }
}

/// A queue pair on one DDP stream.
#[derive(Debug)]
pub struct SctpQp {
    stream: u16,
    qp: Qp,
    /// A segment the sink refused for now, as given to
    /// [`SegmentSink::send_segment_chunk`] ([`SSN_ROOM`] octets first).
    waiting: Option<Vec<u8>>,
    /// A vector the last transmit built nothing in, for the next one (a
    /// poll with nothing to send allocated and freed one, every round).
    spare: Option<Vec<u8>>,
    /// Capacity of the vectors segments are built in: the MULPDU and
    /// [`SSN_ROOM`].
    chunk_cap: usize,
    /// We sent (or tried to send) the Session Terminate, or the session
    /// already ended.
    session_over: bool,
    /// The sink's last refusal other than a full buffer.
    last_refusal: Option<DdpError>,
    /// The session is accepted: segments may go (RFC 5043 §6.6: the
    /// active side sends none before the Accept).
    established: bool,
    /// Segments given by reference ([`SegmentSink::takes_ext`]): records
    /// of registered memory (or of octets, for short messages), keyed by
    /// their offset, until SCTP has them acknowledged.
    txq: TxQueue,
    /// TSN of each record's chunk and the offset just past the record,
    /// in order.
    unacked: VecDeque<(u32, u64)>,
    /// A record the sink refused for now (offset, length): it goes first
    /// next time.
    waiting_ext: Option<(u64, usize)>,
    /// Give segments by reference to a sink that takes them
    /// ([`BY_REFERENCE_MIN_MULPDU`], [`set_by_reference`](Self::set_by_reference)).
    by_ref: bool,
    /// Segments given by reference so far.
    by_ref_sent: u64,
}

/// The smallest MULPDU at which segments go to SCTP by reference by
/// default. Measured (`stack-cost --transport sctp`, callgrind, 256
/// Writes of 64 KiB, instructions per octet, copied against by
/// reference): MTU 1500 4.88 against 5.22, 3000 3.18 against 3.23, 4500
/// 2.59 against 2.55, 9000 4.73 against 3.69. Describing a segment,
/// finding its record at every fill and re-checking its memory cost more
/// than copying fewer than about 4 KiB.
pub const BY_REFERENCE_MIN_MULPDU: usize = 4096;

/// Sends and Writes shorter than this are copied into their record when
/// described ([`Qp::poll_record`]) and complete when handed to SCTP; longer
/// ones are written into each packet from registered memory and complete
/// once SCTP has them acknowledged (as over MPA, [`crate::over_tcp::COPY_BELOW`]).
pub const COPY_BELOW: u64 = crate::over_tcp::COPY_BELOW;

impl SctpQp {
    /// A QP on DDP stream `stream` of an association whose MULPDU is
    /// `mulpdu` ([`DdpAssociation::mulpdu`], RFC 5043 §9): `cfg.mulpdu` is
    /// set from it; CRC and marker settings do not apply. `established`:
    /// the session is accepted already (the passive side, created when it
    /// accepts); the active side creates its QP when it sends the Initiate,
    /// so that the passive side's segments that overtake the Accept find
    /// it, and the QP sends once [`DdpEvent::SessionAccepted`] arrives.
    pub fn new(
        cfg: QpConfig,
        srq: Option<Srq>,
        stream: u16,
        mulpdu: usize,
        established: bool,
    ) -> Self {
        Self::bounded(cfg, srq, stream, mulpdu, established, usize::MAX)
    }

    /// [`new`](Self::new), holding at most `max_held` octets of segments
    /// that arrived ahead of an earlier one (and never more than the
    /// DDP-SSN window × MULPDU, [`SegmentConfig::rfc5043`]): one more
    /// ends the stream with an RDMAP Terminate (catastrophic error
    /// localized to the stream), then the session's Terminate.
    pub fn bounded(
        mut cfg: QpConfig,
        srq: Option<Srq>,
        stream: u16,
        mulpdu: usize,
        established: bool,
        max_held: usize,
    ) -> Self {
        cfg.mulpdu = u16::try_from(mulpdu).unwrap_or(u16::MAX);
        let mut seg = SegmentConfig::rfc5043(cfg.mulpdu);
        seg.max_held = seg.max_held.min(max_held);
        SctpQp {
            stream,
            qp: Qp::with_lower(cfg, srq, LowerLayer::Segments(seg)),
            waiting: None,
            spare: None,
            chunk_cap: SSN_ROOM + mulpdu,
            session_over: false,
            last_refusal: None,
            established,
            txq: TxQueue::new(0),
            unacked: VecDeque::new(),
            waiting_ext: None,
            by_ref: mulpdu >= BY_REFERENCE_MIN_MULPDU,
            by_ref_sent: 0,
        }
    }

    /// Give segments to a sink that takes them by reference
    /// ([`SegmentSink::takes_ext`]) that way (`on`), or copy each into the
    /// association. By default from [`BY_REFERENCE_MIN_MULPDU`]. Takes
    /// effect for segments not yet described.
    pub fn set_by_reference(&mut self, on: bool) {
        self.by_ref = on;
    }

    /// The DDP stream.
    pub fn stream(&self) -> u16 {
        self.stream
    }
    /// The queue pair (post work, poll completions and events here).
    pub fn qp(&mut self) -> &mut Qp {
        &mut self.qp
    }
    /// The queue pair, read-only.
    pub fn qp_ref(&self) -> &Qp {
        &self.qp
    }
    /// True once the DDP Stream Session is over (our Terminate sent, or
    /// the peer's received).
    pub fn session_over(&self) -> bool {
        self.session_over
    }
    /// Nothing waits to be sent: no segment held back by a full SCTP send
    /// buffer and none in the queue pair.
    pub fn tx_idle(&self) -> bool {
        self.waiting.is_none() && self.waiting_ext.is_none() && self.qp.tx_idle()
    }

    /// Write octets `dst.len()` of the segment record at `key` (the
    /// association's fill, [`DdpAssociation::poll_transmit_with`]): from
    /// registered memory, re-checked now. False if the record is gone or
    /// its memory no longer registered: sctp-lite then ends the
    /// association with an ABORT in the packet's place.
    #[inline]
    pub fn fill(&mut self, mem: &MemoryTable, key: u64, dst: &mut [u8]) -> bool {
        self.txq.fill(mem, key, dst)
    }

    /// Segments given by reference that SCTP has not acknowledged yet.
    pub fn unacked_records(&self) -> usize {
        self.txq.len()
    }

    /// Segments given by reference so far.
    pub fn segments_by_reference(&self) -> u64 {
        self.by_ref_sent
    }
    /// The sink's last refusal other than a full send buffer (a segment
    /// over MULPDU, a session in the wrong state): the QP went to error.
    pub fn last_refusal(&self) -> Option<DdpError> {
        self.last_refusal
    }

    /// Place one segment of our stream straight from the received packet
    /// ([`DdpAssociation::handle_packet_with`]): what
    /// [`handle_event`](Self::handle_event) does with a
    /// [`DdpEvent::Segment`], without the event. False (not taken) for
    /// another stream.
    pub fn place_segment(
        &mut self,
        stream: u16,
        ddp_ssn: u16,
        segment: &[u8],
        mem: &mut MemoryTable,
    ) -> bool {
        if stream != self.stream {
            return false;
        }
        self.qp.receive_segment(ddp_ssn, segment, mem);
        true
    }

    /// Take one association event; returns whether it was consumed (a
    /// segment or the end of this stream's session, or the association's;
    /// a [`DdpEvent::SessionAccepted`] is noted and left to the caller).
    pub fn handle_event(&mut self, ev: &DdpEvent, mem: &mut MemoryTable) -> bool {
        match ev {
            DdpEvent::SessionAccepted { stream, .. } if *stream == self.stream => {
                self.established = true;
                false
            }
            DdpEvent::Segment {
                stream,
                ddp_ssn,
                segment,
            } if *stream == self.stream => {
                self.qp.receive_segment(*ddp_ssn, segment, mem);
                true
            }
            DdpEvent::SessionEnded { stream, .. } if *stream == self.stream => {
                self.session_over = true;
                // The peer's RDMAP Terminate, if any, came before (the
                // session ends only once every lower DDP-SSN arrived).
                self.qp.llp_lost();
                self.waiting = None;
                self.waiting_ext = None;
                true
            }
            DdpEvent::Closed(_) => {
                self.session_over = true;
                self.qp.llp_lost();
                self.waiting = None;
                self.waiting_ext = None;
                true
            }
            _ => false,
        }
    }

    /// Hand the QP's segments to `sink` until it has none or the sink is
    /// full; then end the session if the QP is in error. Returns the
    /// segments sent.
    pub fn transmit<S: SegmentSink>(&mut self, mem: &MemoryTable, sink: &mut S) -> usize {
        if !self.established && !self.session_over {
            return 0;
        }
        // A record the sink refused goes first, even if the mode changed.
        if (self.by_ref || self.waiting_ext.is_some()) && sink.takes_ext() {
            return self.transmit_ext(mem, sink);
        }
        let mut sent = 0;
        loop {
            let seg = match self.waiting.take() {
                Some(s) => s,
                None => {
                    if self.session_over {
                        break;
                    }
                    // Built once, behind room for the DDP-SSN; the sink
                    // may keep the vector as the DATA chunk's payload.
                    // The vector comes from the last poll that had nothing
                    // to send, or the sink's acknowledged chunks, before a
                    // new allocation.
                    let mut out = match self.spare.take().or_else(|| sink.spare()) {
                        Some(v) => v,
                        None => Vec::with_capacity(self.chunk_cap),
                    };
                    let mut seg = Reuse::new(&mut out, SSN_ROOM);
                    if self.qp.poll_segment(mem, &mut seg).is_none() {
                        self.spare = Some(out);
                        break;
                    }
                    let len = seg.len;
                    out.truncate(len);
                    out
                }
            };
            match sink.send_segment_chunk(self.stream, seg) {
                Ok(()) => sent += 1,
                Err((DdpError::Sctp(sctp_lite::assoc::SendError::BufferFull), seg))
                | Err((DdpError::TooManyInFlight, seg)) => {
                    self.waiting = Some(seg);
                    return sent;
                }
                Err((e, _)) => {
                    // Cannot carry the stream any more: the QP's LLP is gone.
                    self.last_refusal = Some(e);
                    self.qp.llp_lost();
                    break;
                }
            }
        }
        if self.qp.state() == QpState::Error && self.waiting.is_none() && !self.session_over {
            // RFC 5043 §6.2: the DDP Stream Terminate follows any RDMAP
            // Terminate; at least one side MUST send one.
            self.session_over = true;
            let _ = sink.terminate_session(self.stream);
        }
        sent
    }
}

impl SctpQp {
    /// [`transmit`](Self::transmit) to a sink that takes segments by
    /// reference: each is described in `txq` ([`Qp::poll_record`]) and
    /// handed over as its offset and length; SCTP writes it into each
    /// packet that carries it through [`fill`](Self::fill), the one copy
    /// of its payload. Acknowledged records are released first: the
    /// Sends and Writes they end complete (RFC 5040 §5.5 rule 9).
    fn transmit_ext<S: SegmentSink>(&mut self, mem: &MemoryTable, sink: &mut S) -> usize {
        while let Some(&(tsn, end)) = self.unacked.front() {
            if !sink.acked(tsn) {
                break;
            }
            self.unacked.pop_front();
            let qp = &mut self.qp;
            self.txq.release(end, &mut |seq| qp.fpdu_acked(seq));
        }
        let mut sent = 0;
        loop {
            let (key, len) = match self.waiting_ext.take() {
                Some(w) => w,
                None => {
                    if self.session_over {
                        break;
                    }
                    let start = self.txq.end();
                    if !self
                        .qp
                        .poll_record(mem, usize::MAX, COPY_BELOW, &mut self.txq)
                    {
                        break;
                    }
                    (start, (self.txq.end() - start) as usize)
                }
            };
            match sink.send_segment_ext(self.stream, key, len) {
                Ok(tsn) => {
                    self.unacked.push_back((tsn, key + len as u64));
                    self.by_ref_sent += 1;
                    sent += 1;
                }
                Err(DdpError::Sctp(sctp_lite::assoc::SendError::BufferFull))
                | Err(DdpError::TooManyInFlight) => {
                    self.waiting_ext = Some((key, len));
                    return sent;
                }
                Err(e) => {
                    self.last_refusal = Some(e);
                    self.qp.llp_lost();
                    break;
                }
            }
        }
        if self.qp.state() == QpState::Error && self.waiting_ext.is_none() && !self.session_over {
            // RFC 5043 §6.2, as in `transmit`.
            self.session_over = true;
            let _ = sink.terminate_session(self.stream);
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use iwarp_proto::mem::{Access, PdId};
    use iwarp_proto::qp::{QpEvent, Sge, WcStatus, WorkRequest};
    use iwarp_proto::wire::TermCode;
    use sctp_lite::assoc::SendError;

    /// What a sink was asked to do, in order.
    #[derive(Debug, PartialEq, Eq)]
    enum Sent {
        Segment(u16, Vec<u8>),
        SessionTerminate(u16),
    }

    #[derive(Default)]
    struct Fake {
        sent: Vec<Sent>,
        /// Refuse segments with this error.
        refuse: Option<DdpError>,
        /// Vectors to lend for building segments in.
        spares: Vec<Vec<u8>>,
    }

    impl SegmentSink for Fake {
        fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<(), DdpError> {
            if let Some(e) = self.refuse {
                return Err(e);
            }
            self.sent.push(Sent::Segment(stream, segment.to_vec()));
            Ok(())
        }
        fn terminate_session(&mut self, stream: u16) -> Result<(), DdpError> {
            self.sent.push(Sent::SessionTerminate(stream));
            Ok(())
        }
        fn spare(&mut self) -> Option<Vec<u8>> {
            self.spares.pop()
        }
    }

    fn cfg(pd: PdId) -> QpConfig {
        QpConfig {
            pd,
            ird: 1,
            ord: 1,
            mulpdu: 0,
            crc: true,
            markers_tx: true,
            markers_rx: true,
            sq_depth: 8,
            rq_depth: 8,
        }
    }

    fn setup(established: bool) -> (SctpQp, MemoryTable, Sge) {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let stag = mem
            .register(
                pd,
                (0..2000u32).map(|i| i as u8).collect::<Vec<u8>>(),
                Access::ALL,
                0,
            )
            .unwrap();
        let q = SctpQp::new(cfg(pd), None, 3, 600, established);
        (
            q,
            mem,
            Sge {
                stag,
                to: 0,
                len: 1500,
            },
        )
    }

    fn send(q: &mut SctpQp, mem: &MemoryTable, sge: Sge) {
        q.qp()
            .post_send(
                mem,
                WorkRequest::Send {
                    wr_id: 1,
                    signaled: true,
                    local: sge.into(),
                    solicited: false,
                    invalidate: None,
                },
            )
            .unwrap();
    }

    /// Message offset of an untagged segment.
    fn mo(s: &Sent) -> u32 {
        match s {
            Sent::Segment(_, b) => u32::from_be_bytes([b[14], b[15], b[16], b[17]]),
            Sent::SessionTerminate(_) => u32::MAX,
        }
    }

    /// Issue 27 item 8: a QP holds at most `max_held` octets out of
    /// DDP-SSN order (not window × MULPDU); one segment more ends the
    /// stream with an RDMAP Terminate and the session's Terminate.
    #[test]
    fn out_of_order_hold_is_bounded_by_max_held() {
        let (q, mut mem, _) = setup(true);
        let cfg = *q.qp_ref().config();
        let mut q = SctpQp::bounded(cfg, None, 3, 600, true, 2048);
        // DDP-SSN 1 never comes; 2, 3, ... are held, 500 octets each.
        for ssn in 2..6u16 {
            q.qp().receive_segment(ssn, &[0u8; 500], &mut mem);
            let held = 500 * usize::from(ssn - 1);
            assert_eq!(q.qp_ref().segments_held(), (usize::from(ssn - 1), held));
        }
        q.qp().receive_segment(6, &[0u8; 500], &mut mem);
        assert_eq!(q.qp_ref().state(), QpState::Terminating);
        assert_eq!(q.qp_ref().segments_held(), (0, 0), "dropped once in error");
        let mut sink = Fake::default();
        q.transmit(&mem, &mut sink);
        assert_eq!(q.qp_ref().state(), QpState::Error);
        assert!(
            matches!(sink.sent.last(), Some(Sent::SessionTerminate(3))),
            "{:?}",
            sink.sent
        );
    }

    /// Segments built in reused vectors (longer, full of stale octets,
    /// not zeroed) are the same octets as those built in new ones, and
    /// the vector a poll with nothing to send took is kept for the next.
    #[test]
    fn segments_built_in_reused_vectors_carry_nothing_stale() {
        let mut sent = Vec::new();
        for spares in [
            Vec::new(),
            vec![vec![0xEE; 2000], vec![0xDD; 700], vec![0xCC; 3]],
        ] {
            let (mut q, mem, sge) = setup(true);
            let mut sink = Fake {
                spares,
                ..Fake::default()
            };
            assert_eq!(q.transmit(&mem, &mut sink), 0, "nothing posted");
            send(&mut q, &mem, sge);
            assert_eq!(q.transmit(&mem, &mut sink), 3);
            sent.push(sink.sent);
        }
        assert_eq!(sent[0], sent[1]);
        assert!(
            matches!(&sent[0][0], Sent::Segment(3, b) if b.len() == 600),
            "{:?}",
            sent[0][0]
        );
    }

    #[test]
    fn segments_at_most_mulpdu_on_our_stream() {
        let (mut q, mem, sge) = setup(true);
        assert_eq!(q.qp_ref().config().mulpdu, 600);
        send(&mut q, &mem, sge);
        let mut sink = Fake::default();
        assert_eq!(q.transmit(&mem, &mut sink), 3); // 1500 / (600 - 18)
        for s in &sink.sent {
            match s {
                Sent::Segment(3, b) => assert!(b.len() <= 600),
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(
            sink.sent.iter().map(mo).collect::<Vec<_>>(),
            vec![0, 582, 1164]
        );
    }

    #[test]
    fn a_full_send_buffer_keeps_the_segment_for_later() {
        let (mut q, mem, sge) = setup(true);
        send(&mut q, &mem, sge);
        let mut sink = Fake {
            refuse: Some(DdpError::Sctp(SendError::BufferFull)),
            ..Fake::default()
        };
        assert_eq!(q.transmit(&mem, &mut sink), 0);
        assert!(sink.sent.is_empty());
        sink.refuse = None;
        assert_eq!(q.transmit(&mem, &mut sink), 3);
        // Nothing lost or repeated: offsets 0, 582, 1164 in order.
        assert_eq!(
            sink.sent.iter().map(mo).collect::<Vec<_>>(),
            vec![0, 582, 1164]
        );
        assert_eq!(q.qp_ref().state(), QpState::Rts);
    }

    #[test]
    fn nothing_goes_before_the_session_is_accepted() {
        let (mut q, mut mem, sge) = setup(false);
        send(&mut q, &mem, sge);
        let mut sink = Fake::default();
        assert_eq!(q.transmit(&mem, &mut sink), 0);
        let accepted = DdpEvent::SessionAccepted {
            stream: 3,
            private_data: Vec::new(),
        };
        // Another stream's Accept does not count; ours is left to the caller.
        let other = DdpEvent::SessionAccepted {
            stream: 2,
            private_data: Vec::new(),
        };
        assert!(!q.handle_event(&other, &mut mem));
        assert_eq!(q.transmit(&mem, &mut sink), 0);
        assert!(!q.handle_event(&accepted, &mut mem));
        assert_eq!(q.transmit(&mem, &mut sink), 3);
    }

    #[test]
    fn session_terminate_follows_the_rdmap_terminate() {
        let (mut q, mem, _) = setup(true);
        q.qp().terminate(TermCode::RDMAP_CATASTROPHIC_STREAM);
        let mut sink = Fake::default();
        assert_eq!(q.transmit(&mem, &mut sink), 1);
        assert_eq!(sink.sent.len(), 2);
        match &sink.sent[0] {
            // Untagged, QN 2, opcode Terminate.
            Sent::Segment(3, b) => assert_eq!((b[1] & 0x0f, b[9]), (7, 2)),
            other => panic!("{other:?}"),
        }
        assert_eq!(sink.sent[1], Sent::SessionTerminate(3));
        assert!(q.session_over());
        // Once only.
        assert_eq!(q.transmit(&mem, &mut sink), 0);
        assert_eq!(sink.sent.len(), 2);
        assert!(matches!(q.qp().poll_event(), Some(QpEvent::LocalError(_))));
    }

    #[test]
    fn session_end_and_association_close_flush_the_qp() {
        for ev in [
            DdpEvent::SessionEnded {
                stream: 3,
                why: ddp_sctp::SessionEnd::PeerTerminated,
                private_data: Vec::new(),
            },
            DdpEvent::Closed(sctp_lite::assoc::CloseReason::Shutdown),
        ] {
            let (mut q, mut mem, sge) = setup(true);
            q.qp().post_recv(&mem, 9, sge).unwrap();
            let other = DdpEvent::SessionEnded {
                stream: 1,
                why: ddp_sctp::SessionEnd::PeerTerminated,
                private_data: Vec::new(),
            };
            assert!(!q.handle_event(&other, &mut mem));
            assert_eq!(q.qp_ref().state(), QpState::Rts);
            assert!(q.handle_event(&ev, &mut mem));
            assert_eq!(q.qp_ref().state(), QpState::Error);
            let c = q.qp().poll_completion().unwrap();
            assert_eq!((c.wr_id, c.status), (9, WcStatus::Flushed));
            // No Session Terminate for a session already over.
            let mut sink = Fake::default();
            assert_eq!(q.transmit(&mem, &mut sink), 0);
            assert!(sink.sent.is_empty());
        }
    }

    #[test]
    fn a_refusal_that_cannot_pass_ends_the_qp() {
        let (mut q, mem, sge) = setup(true);
        send(&mut q, &mem, sge);
        let e = DdpError::SegmentTooLarge { len: 600, max: 500 };
        let mut sink = Fake {
            refuse: Some(e),
            ..Fake::default()
        };
        q.transmit(&mem, &mut sink);
        assert_eq!(q.last_refusal(), Some(e));
        assert_eq!(q.qp_ref().state(), QpState::Error);
        // The LLP is gone: the request is flushed, and the session ended.
        let c = q.qp().poll_completion().unwrap();
        assert_eq!(c.status, WcStatus::Flushed);
        assert_eq!(sink.sent, vec![Sent::SessionTerminate(3)]);
    }
}
