//! The lower layer under a [`Qp`](super::Qp): how DDP Segments reach the
//! wire and come back.
//!
//! * [`LowerLayer::Mpa`]: MPA framing on a byte stream (RFC 5044): the QP
//!   emits FPDUs with [`Framer`] and takes stream octets, cut anywhere,
//!   through [`Deframer`] ([`Qp::receive`](super::Qp::receive),
//!   [`Qp::poll_transmit`](super::Qp::poll_transmit)).
//! * [`LowerLayer::Segments`]: an LLP that keeps message boundaries and
//!   numbers them, DDP over SCTP (RFC 5043): whole DDP Segments out, at most
//!   MULPDU octets each (the caller sets [`QpConfig::mulpdu`](super::QpConfig)
//!   from `ddp_sctp::mulpdu`, RFC 5043 §9), and whole DDP Segments in, each
//!   with its DDP-SSN ([`Qp::receive_segment`](super::Qp::receive_segment),
//!   [`Qp::poll_segment`](super::Qp::poll_segment)). There is no MPA CRC or
//!   marker (SCTP's CRC32c covers the chunk); `crc` and the marker flags of
//!   the configuration are ignored.
//!
//! # Unordered arrival
//!
//! RFC 5043 §10 sends every DDP Segment unordered: segments arrive in any
//! order, and the DDP-SSN (consecutive, no gaps within a session, §6) is the
//! order the peer's DDP submitted them in. [`SegmentOrder`] puts them back in
//! that order before the QP sees them: a segment whose DDP-SSN is the next
//! one expected is processed at once, straight from the caller's buffer;
//! one ahead of it is copied and held until the gap before it fills. So the
//! QP's receive path sees exactly the sequence an MPA stream would give it,
//! and every in-order rule it checks keeps holding: untagged MSN and MO
//! (RFC 5041 §7.1 checks 3-5), contiguous RDMA Read Responses (RFC 5040
//! §5.2.2), delivery and completion order (RFC 5040 §5.5: a Send is
//! delivered only after every earlier message, tagged ones included, was
//! placed; rules 1-9). Placement waits for the gap: RFC 5041 §5 allows
//! out-of-order placement but does not require it.
//!
//! What a peer can make the QP hold: at most [`SegmentConfig::window`]
//! DDP-SSNs ahead of the next expected one (RFC 5043 §10: check a DDP-SSN
//! before allocating anything for it), and at most
//! [`SegmentConfig::max_held`] octets of held segments. A DDP-SSN outside the
//! window, one already received, a segment over the held-octet bound, a
//! segment longer than 65535 octets or an empty one ends the stream with an
//! RDMAP Terminate "catastrophic error, localized to RDMAP Stream" (RFC 5040
//! §4.8 0x0/0x2/0x07; RFC 5043 §10: "An invalid DDP-SSN MAY result in
//! termination of the DDP stream"; RFC 5043 defines no LLP error codes of its
//! own). `ddp_sctp::DdpAssociation` already drops duplicates and DDP-SSNs
//! outside its own window of 4096 before the QP sees them; these checks make
//! the QP safe on its own.

use std::collections::VecDeque;

use crate::mpa::{put_all, Deframer, Framer, Part, TxBuf};
use crate::wire::WireError;

/// Which lower layer a QP runs over, with its settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LowerLayer {
    /// MPA framing on a byte stream (RFC 5044): today's TCP path.
    Mpa,
    /// Whole DDP Segments numbered by DDP-SSN (DDP over SCTP, RFC 5043).
    Segments(SegmentConfig),
}

/// Settings of the segment lower layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// DDP-SSN of the first DDP Segment the peer sends. Over RFC 5043 the
    /// session's first chunk each way is its Initiate or Accept (DDP-SSN 0,
    /// §6.1, §6.2), so segments start at 1.
    pub first_ssn: u16,
    /// Most DDP-SSNs accepted ahead of the next expected one (below 32768,
    /// RFC 5043 §10).
    pub window: u16,
    /// Most octets of segments held while waiting for an earlier one.
    pub max_held: usize,
}

impl SegmentConfig {
    /// The default window: 4096 DDP-SSNs, as `ddp_sctp::DDP_SSN_WINDOW`.
    pub const DEFAULT_WINDOW: u16 = 4096;

    /// Defaults for a session whose segments start at DDP-SSN 1: the
    /// default window, and `max_held` = window × `mulpdu` (what a peer
    /// within the window can make us hold at most anyway).
    pub fn rfc5043(mulpdu: u16) -> SegmentConfig {
        SegmentConfig {
            first_ssn: 1,
            window: Self::DEFAULT_WINDOW,
            max_held: usize::from(Self::DEFAULT_WINDOW) * usize::from(mulpdu),
        }
    }
}

/// Counters of the segment lower layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SegmentStats {
    /// Segments that arrived ahead of an earlier one and were held.
    pub held: u64,
    /// Most segments held at once.
    pub max_held_segments: usize,
    /// Most octets held at once.
    pub max_held_octets: usize,
}

/// Why a received segment was refused by the ordering stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OrderError {
    /// DDP-SSN outside the window ahead of the next expected (an old one
    /// included).
    OutOfWindow {
        /// The segment's DDP-SSN.
        ssn: u16,
        /// The next expected.
        next: u16,
    },
    /// A DDP-SSN already held.
    Duplicate(u16),
    /// Holding it would pass [`SegmentConfig::max_held`].
    TooMuchHeld,
    /// Empty, or longer than 65535 octets.
    BadLength(usize),
}

/// Puts DDP Segments back in DDP-SSN order (see the module docs).
#[derive(Debug)]
pub struct SegmentOrder {
    cfg: SegmentConfig,
    next: u16,
    /// `slots[i]` holds DDP-SSN `next + i` once it arrived (`slots[0]` only
    /// between an [`advance`](Self::advance) and the
    /// [`pop_ready`](Self::pop_ready) that takes it).
    slots: VecDeque<Option<Vec<u8>>>,
    held_octets: usize,
    held_segments: usize,
    stats: SegmentStats,
}

/// What to do with a segment just received.
#[derive(Debug, PartialEq, Eq)]
pub enum Arrival {
    /// It is the next one: process it now, then [`SegmentOrder::pop_ready`].
    InOrder,
    /// Held until the gap before it fills.
    Held,
}

impl SegmentOrder {
    /// An empty ordering stage.
    pub fn new(cfg: SegmentConfig) -> Self {
        SegmentOrder {
            cfg,
            next: cfg.first_ssn,
            slots: VecDeque::new(),
            held_octets: 0,
            held_segments: 0,
            stats: SegmentStats::default(),
        }
    }

    /// The next DDP-SSN expected.
    pub fn next_ssn(&self) -> u16 {
        self.next
    }

    /// Segments and octets held.
    pub fn held(&self) -> (usize, usize) {
        (self.held_segments, self.held_octets)
    }

    /// Counters.
    pub fn stats(&self) -> SegmentStats {
        self.stats
    }

    /// Take segment `ssn`: the validity check of RFC 5043 §10 comes before
    /// anything is stored.
    pub fn arrive(&mut self, ssn: u16, segment: &[u8]) -> Result<Arrival, OrderError> {
        if segment.is_empty() || segment.len() > usize::from(u16::MAX) {
            return Err(OrderError::BadLength(segment.len()));
        }
        let off = ssn.wrapping_sub(self.next);
        if off >= self.cfg.window {
            return Err(OrderError::OutOfWindow {
                ssn,
                next: self.next,
            });
        }
        if off == 0 {
            return Ok(Arrival::InOrder);
        }
        let i = usize::from(off);
        if self.slots.get(i).is_some_and(Option::is_some) {
            return Err(OrderError::Duplicate(ssn));
        }
        let octets = self.held_octets.saturating_add(segment.len());
        if octets > self.cfg.max_held {
            return Err(OrderError::TooMuchHeld);
        }
        if self.slots.len() <= i {
            self.slots.resize(i + 1, None);
        }
        self.slots[i] = Some(segment.to_vec());
        self.held_octets = octets;
        self.held_segments += 1;
        self.stats.held += 1;
        self.stats.max_held_segments = self.stats.max_held_segments.max(self.held_segments);
        self.stats.max_held_octets = self.stats.max_held_octets.max(self.held_octets);
        Ok(Arrival::Held)
    }

    /// The in-order segment was processed: move past it.
    pub fn advance(&mut self) {
        self.next = self.next.wrapping_add(1);
        self.slots.pop_front();
    }

    /// The next segment, if it was held: it is now in order (call
    /// [`advance`](Self::advance) after processing it).
    pub fn pop_ready(&mut self) -> Option<Vec<u8>> {
        let s = self.slots.get_mut(0)?.take()?;
        self.held_octets -= s.len();
        self.held_segments -= 1;
        Some(s)
    }

    /// Drop everything held (the stream went to error).
    pub fn clear(&mut self) {
        self.slots.clear();
        self.held_octets = 0;
        self.held_segments = 0;
    }
}

/// The lower layer of one QP.
#[derive(Debug)]
pub(super) enum Lower {
    Mpa { framer: Framer, deframer: Deframer },
    Segments(SegmentOrder),
}

impl Lower {
    /// Octets `ulpdu_len` takes on the wire (the whole FPDU for MPA).
    pub(super) fn wire_len(&self, ulpdu_len: usize) -> usize {
        match self {
            Lower::Mpa { framer, .. } => framer.next_wire_len(ulpdu_len),
            Lower::Segments(_) => ulpdu_len,
        }
    }

    /// Append one FPDU (MPA) or one bare DDP Segment whose octets are the
    /// concatenation of `parts`.
    pub(super) fn emit_parts(
        &mut self,
        parts: &[Part<'_>],
        out: &mut dyn TxBuf,
    ) -> Result<usize, WireError> {
        match self {
            Lower::Mpa { framer, .. } => framer.emit_parts(parts, out),
            Lower::Segments(_) => {
                let start = out.len();
                for p in parts {
                    match p {
                        Part::Bytes(b) => put_all(out, b),
                        Part::Region(r) => {
                            let mut at = 0;
                            while at < r.len() {
                                let dst = out.append(r.len() - at);
                                if dst.is_empty() {
                                    debug_assert!(false, "TxBuf ran out inside a segment");
                                    break;
                                }
                                // Cannot fail: at + dst.len() <= r.len().
                                let _ = r.copy_to(at, dst);
                                at += dst.len();
                            }
                        }
                    }
                }
                Ok(out.len() - start)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(window: u16, max_held: usize) -> SegmentConfig {
        SegmentConfig {
            first_ssn: 1,
            window,
            max_held,
        }
    }

    #[test]
    fn in_order_is_not_held() {
        let mut o = SegmentOrder::new(cfg(8, 100));
        assert_eq!(o.arrive(1, b"a"), Ok(Arrival::InOrder));
        o.advance();
        assert_eq!(o.next_ssn(), 2);
        assert_eq!(o.pop_ready(), None);
        assert_eq!(o.held(), (0, 0));
    }

    #[test]
    fn held_until_the_gap_fills() {
        let mut o = SegmentOrder::new(cfg(8, 100));
        assert_eq!(o.arrive(3, b"ccc"), Ok(Arrival::Held));
        assert_eq!(o.arrive(2, b"bb"), Ok(Arrival::Held));
        assert_eq!(o.held(), (2, 5));
        assert_eq!(o.arrive(1, b"a"), Ok(Arrival::InOrder));
        o.advance();
        assert_eq!(o.pop_ready().as_deref(), Some(&b"bb"[..]));
        o.advance();
        assert_eq!(o.pop_ready().as_deref(), Some(&b"ccc"[..]));
        o.advance();
        assert_eq!(o.pop_ready(), None);
        assert_eq!(o.next_ssn(), 4);
        assert_eq!(o.held(), (0, 0));
        assert_eq!(o.stats().held, 2);
        assert_eq!(o.stats().max_held_segments, 2);
    }

    #[test]
    fn refusals() {
        let mut o = SegmentOrder::new(cfg(4, 3));
        assert_eq!(
            o.arrive(5, b"x"),
            Err(OrderError::OutOfWindow { ssn: 5, next: 1 })
        );
        // An old DDP-SSN wraps to far ahead.
        assert_eq!(
            o.arrive(0, b"x"),
            Err(OrderError::OutOfWindow { ssn: 0, next: 1 })
        );
        assert_eq!(o.arrive(2, b"xy"), Ok(Arrival::Held));
        assert_eq!(o.arrive(2, b"xy"), Err(OrderError::Duplicate(2)));
        assert_eq!(o.arrive(3, b"zz"), Err(OrderError::TooMuchHeld));
        assert_eq!(o.arrive(1, b""), Err(OrderError::BadLength(0)));
        let big = vec![0u8; 65536];
        assert_eq!(o.arrive(1, &big), Err(OrderError::BadLength(65536)));
        assert_eq!(o.held(), (1, 2));
    }

    #[test]
    fn wraps_around_the_ddp_ssn_space() {
        let mut o = SegmentOrder::new(SegmentConfig {
            first_ssn: u16::MAX,
            window: 8,
            max_held: 100,
        });
        assert_eq!(o.arrive(0, b"b"), Ok(Arrival::Held));
        assert_eq!(o.arrive(u16::MAX, b"a"), Ok(Arrival::InOrder));
        o.advance();
        assert_eq!(o.pop_ready().as_deref(), Some(&b"b"[..]));
        o.advance();
        assert_eq!(o.next_ssn(), 1);
    }
}
