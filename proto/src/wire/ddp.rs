//! DDP segment headers (RFC 5041 §4) with the RDMAP control octet and
//! Invalidate STag carried in RsvdULP (RFC 5040 §4.1).
//!
//! ```text
//! tagged   (14): ctrl | rdmap ctrl | STag(4) | TO(8)
//! untagged (18): ctrl | rdmap ctrl | Inval STag(4) | QN(4) | MSN(4) | MO(4)
//! ctrl: T(0x80) L(0x40) rsvd(0x3c) DV(0x03)   rdmap ctrl: RV(0xc0) rsvd(0x30) opcode(0x0f)
//! ```

use super::{be32, be64, need, put32, put64, WireError};

/// Tagged header length (RFC 5041 §4.2).
pub const TAGGED_HEADER_LEN: usize = 14;
/// Untagged header length (RFC 5041 §4.3).
pub const UNTAGGED_HEADER_LEN: usize = 18;
/// DDP version this implementation speaks (RFC 5041 §4.1: DV MUST be one).
pub const DDP_VERSION: u8 = 1;
/// RDMAP version this implementation speaks (RFC 5040 §4.1: RV 01b).
pub const RDMAP_VERSION: u8 = 1;

mod field {
    pub const DDP_CTRL: usize = 0;
    pub const RDMAP_CTRL: usize = 1;
    pub const STAG: usize = 2; // tagged
    pub const TO: usize = 6; // tagged
    pub const INVAL_STAG: usize = 2; // untagged RsvdULP[8:39]
    pub const QN: usize = 6;
    pub const MSN: usize = 10;
    pub const MO: usize = 14;
}

/// The DDP control octet (RFC 5041 §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DdpControl(pub u8);

impl DdpControl {
    /// Tagged flag.
    pub const T: u8 = 0x80;
    /// Last flag.
    pub const L: u8 = 0x40;

    /// Build with DV = 1 and reserved bits zero.
    pub fn new(tagged: bool, last: bool) -> Self {
        let mut v = DDP_VERSION;
        if tagged {
            v |= Self::T;
        }
        if last {
            v |= Self::L;
        }
        DdpControl(v)
    }
    /// T flag.
    pub fn tagged(self) -> bool {
        self.0 & Self::T != 0
    }
    /// L flag.
    pub fn last(self) -> bool {
        self.0 & Self::L != 0
    }
    /// Reserved bits (RFC 5041 §4.1: not checked on receive).
    pub fn reserved(self) -> u8 {
        (self.0 >> 2) & 0x0f
    }
    /// DV.
    pub fn version(self) -> u8 {
        self.0 & 0x03
    }
    /// Header length this control octet announces.
    pub fn header_len(self) -> usize {
        if self.tagged() {
            TAGGED_HEADER_LEN
        } else {
            UNTAGGED_HEADER_LEN
        }
    }
}

/// RDMAP opcodes (RFC 5040 §4.1 figure 4, RFC 7306 §4 for 1000b-1011b).
/// Unknown values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opcode {
    /// 0000b RDMA Write (tagged).
    Write,
    /// 0001b RDMA Read Request (untagged, QN 1).
    ReadRequest,
    /// 0010b RDMA Read Response (tagged).
    ReadResponse,
    /// 0011b Send (QN 0).
    Send,
    /// 0100b Send with Invalidate.
    SendInvalidate,
    /// 0101b Send with Solicited Event.
    SendSe,
    /// 0110b Send with Solicited Event and Invalidate.
    SendSeInvalidate,
    /// 0111b Terminate (QN 2).
    Terminate,
    /// 1000b Immediate Data (RFC 7306, untagged, QN 0).
    ImmediateData,
    /// 1001b Immediate Data with Solicited Event (RFC 7306, untagged, QN 0).
    ImmediateDataSe,
    /// 1010b Atomic Request (RFC 7306, untagged, QN 1).
    AtomicRequest,
    /// 1011b Atomic Response (RFC 7306, untagged, QN 3).
    AtomicResponse,
    /// 1100b-1111b: reserved; kept as received.
    Reserved(u8),
}

impl Opcode {
    /// From the 4-bit field.
    pub fn from_bits(v: u8) -> Self {
        match v & 0x0f {
            0 => Opcode::Write,
            1 => Opcode::ReadRequest,
            2 => Opcode::ReadResponse,
            3 => Opcode::Send,
            4 => Opcode::SendInvalidate,
            5 => Opcode::SendSe,
            6 => Opcode::SendSeInvalidate,
            7 => Opcode::Terminate,
            8 => Opcode::ImmediateData,
            9 => Opcode::ImmediateDataSe,
            10 => Opcode::AtomicRequest,
            11 => Opcode::AtomicResponse,
            x => Opcode::Reserved(x),
        }
    }
    /// The 4-bit field.
    pub fn bits(self) -> u8 {
        match self {
            Opcode::Write => 0,
            Opcode::ReadRequest => 1,
            Opcode::ReadResponse => 2,
            Opcode::Send => 3,
            Opcode::SendInvalidate => 4,
            Opcode::SendSe => 5,
            Opcode::SendSeInvalidate => 6,
            Opcode::Terminate => 7,
            Opcode::ImmediateData => 8,
            Opcode::ImmediateDataSe => 9,
            Opcode::AtomicRequest => 10,
            Opcode::AtomicResponse => 11,
            Opcode::Reserved(x) => x & 0x0f,
        }
    }
    /// RFC 5040 figure 4: the Tagged flag the message must carry (`None` for reserved).
    pub fn tagged(self) -> Option<bool> {
        match self {
            Opcode::Write | Opcode::ReadResponse => Some(true),
            Opcode::Reserved(_) => None,
            _ => Some(false),
        }
    }
    /// RFC 5040 figure 4 (and RFC 7306 §4): the untagged queue number the
    /// message must use.
    pub fn queue(self) -> Option<u32> {
        match self {
            Opcode::Send
            | Opcode::SendInvalidate
            | Opcode::SendSe
            | Opcode::SendSeInvalidate
            | Opcode::ImmediateData
            | Opcode::ImmediateDataSe => Some(0),
            Opcode::ReadRequest | Opcode::AtomicRequest => Some(1),
            Opcode::Terminate => Some(2),
            Opcode::AtomicResponse => Some(3),
            _ => None,
        }
    }
    /// Send with Invalidate or Send with SE and Invalidate.
    pub fn invalidates(self) -> bool {
        matches!(self, Opcode::SendInvalidate | Opcode::SendSeInvalidate)
    }
    /// Send with SE, Send with SE and Invalidate, Immediate Data with SE.
    pub fn solicited(self) -> bool {
        matches!(
            self,
            Opcode::SendSe | Opcode::SendSeInvalidate | Opcode::ImmediateDataSe
        )
    }
}

/// The RDMAP control octet (RFC 5040 §4.1): RV, reserved, opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RdmapControl(pub u8);

impl RdmapControl {
    /// RV = 1, reserved zero.
    pub fn new(op: Opcode) -> Self {
        RdmapControl((RDMAP_VERSION << 6) | op.bits())
    }
    /// RV.
    pub fn version(self) -> u8 {
        self.0 >> 6
    }
    /// Reserved bits (RFC 5040 §4.1: ignored by the receiver).
    pub fn reserved(self) -> u8 {
        (self.0 >> 4) & 0x03
    }
    /// Opcode.
    pub fn opcode(self) -> Opcode {
        Opcode::from_bits(self.0)
    }
}

/// Tagged buffer model header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TaggedHeader {
    /// DDP control octet.
    pub ddp: DdpControl,
    /// RDMAP control octet (RsvdULP).
    pub rdmap: RdmapControl,
    /// Data sink STag.
    pub stag: u32,
    /// Tagged offset.
    pub to: u64,
}

/// Untagged buffer model header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UntaggedHeader {
    /// DDP control octet.
    pub ddp: DdpControl,
    /// RDMAP control octet (RsvdULP\[0:7\]).
    pub rdmap: RdmapControl,
    /// Invalidate STag (RsvdULP\[8:39\]); zero unless Send with Invalidate.
    pub inval_stag: u32,
    /// Queue number.
    pub qn: u32,
    /// Message sequence number.
    pub msn: u32,
    /// Message offset.
    pub mo: u32,
}

/// A DDP header of either model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpHeader {
    /// Tagged.
    Tagged(TaggedHeader),
    /// Untagged.
    Untagged(UntaggedHeader),
}

impl DdpHeader {
    /// Parse the header at the start of `buf` (the ULPDU); returns it and its length.
    pub fn parse(buf: &[u8]) -> Result<(Self, usize), WireError> {
        need("DDP header", buf, 1)?;
        let ddp = DdpControl(buf[field::DDP_CTRL]);
        let len = ddp.header_len();
        need(
            if ddp.tagged() {
                "DDP tagged header"
            } else {
                "DDP untagged header"
            },
            buf,
            len,
        )?;
        let rdmap = RdmapControl(buf[field::RDMAP_CTRL]);
        let h = if ddp.tagged() {
            DdpHeader::Tagged(TaggedHeader {
                ddp,
                rdmap,
                stag: be32(buf, field::STAG),
                to: be64(buf, field::TO),
            })
        } else {
            DdpHeader::Untagged(UntaggedHeader {
                ddp,
                rdmap,
                inval_stag: be32(buf, field::INVAL_STAG),
                qn: be32(buf, field::QN),
                msn: be32(buf, field::MSN),
                mo: be32(buf, field::MO),
            })
        };
        Ok((h, len))
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        match self {
            DdpHeader::Tagged(_) => TAGGED_HEADER_LEN,
            DdpHeader::Untagged(_) => UNTAGGED_HEADER_LEN,
        }
    }

    /// Write into `buf`; returns the length written.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        need("DDP header (emit)", buf, len)?;
        match self {
            DdpHeader::Tagged(t) => {
                buf[field::DDP_CTRL] = t.ddp.0;
                buf[field::RDMAP_CTRL] = t.rdmap.0;
                put32(buf, field::STAG, t.stag);
                put64(buf, field::TO, t.to);
            }
            DdpHeader::Untagged(u) => {
                buf[field::DDP_CTRL] = u.ddp.0;
                buf[field::RDMAP_CTRL] = u.rdmap.0;
                put32(buf, field::INVAL_STAG, u.inval_stag);
                put32(buf, field::QN, u.qn);
                put32(buf, field::MSN, u.msn);
                put32(buf, field::MO, u.mo);
            }
        }
        Ok(len)
    }

    /// DDP control.
    pub fn ddp(&self) -> DdpControl {
        match self {
            DdpHeader::Tagged(t) => t.ddp,
            DdpHeader::Untagged(u) => u.ddp,
        }
    }
    /// RDMAP control.
    pub fn rdmap(&self) -> RdmapControl {
        match self {
            DdpHeader::Tagged(t) => t.rdmap,
            DdpHeader::Untagged(u) => u.rdmap,
        }
    }
    /// The header as a fixed array plus its length (for Terminate copies).
    pub fn to_array(&self) -> ([u8; UNTAGGED_HEADER_LEN], usize) {
        let mut a = [0u8; UNTAGGED_HEADER_LEN];
        let n = self.emit(&mut a).unwrap_or(0);
        (a, n)
    }
}

/// Zero-copy view of a whole DDP segment (header + ULP payload), i.e. one ULPDU.
#[derive(Debug, Clone)]
pub struct DdpSegment<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DdpSegment<T> {
    /// Wrap without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        DdpSegment { buffer }
    }
    /// Wrap after checking the header the control octet announces is present.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let s = Self::new_unchecked(buffer);
        let b = s.buffer.as_ref();
        need("DDP segment", b, 1)?;
        need("DDP segment", b, s.control().header_len())?;
        Ok(s)
    }
    /// DDP control.
    pub fn control(&self) -> DdpControl {
        DdpControl(self.buffer.as_ref().first().copied().unwrap_or(0))
    }
    /// RDMAP control.
    pub fn rdmap_control(&self) -> RdmapControl {
        RdmapControl(self.buffer.as_ref().get(1).copied().unwrap_or(0))
    }
    /// STag (tagged only; 0 if untagged).
    pub fn stag(&self) -> u32 {
        if self.control().tagged() {
            be32(self.buffer.as_ref(), field::STAG)
        } else {
            0
        }
    }
    /// TO (tagged only).
    pub fn to(&self) -> u64 {
        if self.control().tagged() {
            be64(self.buffer.as_ref(), field::TO)
        } else {
            0
        }
    }
    /// Invalidate STag (untagged only).
    pub fn inval_stag(&self) -> u32 {
        if self.control().tagged() {
            0
        } else {
            be32(self.buffer.as_ref(), field::INVAL_STAG)
        }
    }
    /// QN (untagged only).
    pub fn qn(&self) -> u32 {
        if self.control().tagged() {
            0
        } else {
            be32(self.buffer.as_ref(), field::QN)
        }
    }
    /// MSN (untagged only).
    pub fn msn(&self) -> u32 {
        if self.control().tagged() {
            0
        } else {
            be32(self.buffer.as_ref(), field::MSN)
        }
    }
    /// MO (untagged only).
    pub fn mo(&self) -> u32 {
        if self.control().tagged() {
            0
        } else {
            be32(self.buffer.as_ref(), field::MO)
        }
    }
    /// The ULP payload after the header.
    pub fn payload(&self) -> &[u8] {
        self.buffer
            .as_ref()
            .get(self.control().header_len()..)
            .unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> DdpSegment<T> {
    /// Set the L flag.
    pub fn set_last(&mut self, last: bool) {
        if let Some(c) = self.buffer.as_mut().first_mut() {
            if last {
                *c |= DdpControl::L;
            } else {
                *c &= !DdpControl::L;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// siw's zero-length RTR Write (shared/interop README): 000e c140 00000001 0000000000000000
    #[test]
    fn parse_siw_rtr_write() {
        let b = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let (h, n) = DdpHeader::parse(&b).unwrap();
        assert_eq!(n, 14);
        match h {
            DdpHeader::Tagged(t) => {
                assert!(t.ddp.tagged() && t.ddp.last());
                assert_eq!(t.ddp.version(), 1);
                assert_eq!(t.rdmap.version(), 1);
                assert_eq!(t.rdmap.opcode(), Opcode::Write);
                assert_eq!((t.stag, t.to), (1, 0));
            }
            _ => panic!("tagged expected"),
        }
        let mut out = [0u8; 14];
        h.emit(&mut out).unwrap();
        assert_eq!(out, b);
    }

    /// Untagged last Send (siw control bytes 41 43), QN 0, MSN 1, MO 0.
    #[test]
    fn build_untagged_send() {
        let h = DdpHeader::Untagged(UntaggedHeader {
            ddp: DdpControl::new(false, true),
            rdmap: RdmapControl::new(Opcode::Send),
            inval_stag: 0,
            qn: 0,
            msn: 1,
            mo: 0,
        });
        let mut b = [0u8; 18];
        h.emit(&mut b).unwrap();
        assert_eq!(
            b,
            [0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0]
        );
        let seg = DdpSegment::new_checked(&b[..]).unwrap();
        assert_eq!((seg.qn(), seg.msn(), seg.mo()), (0, 1, 0));
        assert_eq!(seg.rdmap_control().opcode(), Opcode::Send);
    }

    /// Read Request control 41 41 on QN 1; Read Response c1 42.
    #[test]
    fn control_octets_from_captures() {
        assert_eq!(RdmapControl::new(Opcode::ReadRequest).0, 0x41);
        assert_eq!(DdpControl::new(false, true).0, 0x41);
        assert_eq!(RdmapControl::new(Opcode::ReadResponse).0, 0x42);
        assert_eq!(DdpControl::new(true, true).0, 0xc1);
        assert_eq!(RdmapControl::new(Opcode::SendSeInvalidate).0, 0x46);
    }

    #[test]
    fn reserved_opcode_and_versions_kept() {
        let c = RdmapControl(0x3c);
        assert_eq!(c.version(), 0);
        assert_eq!(c.reserved(), 3);
        assert_eq!(c.opcode(), Opcode::Reserved(0xc));
        assert_eq!(Opcode::Reserved(0xc).bits(), 0xc);
        // RFC 7306 code points, with the queue each must use: urdma's
        // `rdmap_opcode_{imm_data, imm_data_se, atomic_request,
        // atomic_response}` = 8..11 and its queues (requests on
        // `ddp_queue_read_request` 1, responses on
        // `ddp_queue_atomic_response` 3); Chelsio's `FW_RI_SEND_IMMEDIATE`
        // 0x8 .. `FW_RI_ATOMIC_RESPONSE` 0xb; Wireshark's 0x0A/0x0B
        // (docs/rfc7306.md, "RFC 7306").
        for (bits, op, qn) in [
            (8, Opcode::ImmediateData, 0),
            (9, Opcode::ImmediateDataSe, 0),
            (10, Opcode::AtomicRequest, 1),
            (11, Opcode::AtomicResponse, 3),
        ] {
            assert_eq!(Opcode::from_bits(bits), op);
            assert_eq!(op.bits(), bits);
            assert_eq!((op.tagged(), op.queue()), (Some(false), Some(qn)));
        }
        assert!(Opcode::ImmediateDataSe.solicited() && !Opcode::ImmediateData.solicited());
        assert_eq!(RdmapControl::new(Opcode::AtomicRequest).0, 0x4a);
        let d = DdpControl(0x3e);
        assert_eq!((d.reserved(), d.version()), (0xf, 2));
    }

    /// The reserved fields of both control octets read as received, zero
    /// when the sender left them zero, whatever the bits beside them hold.
    #[test]
    fn reserved_fields_read_only_their_own_bits() {
        for (octet, want) in [(0xc1, 0), (0x41, 0), (0xc5, 1), (0xa3, 8), (0x3c, 0xf)] {
            assert_eq!(
                DdpControl(octet).reserved(),
                want,
                "DDP control {octet:#04x}"
            );
        }
        for (octet, want) in [(0x40, 0), (0x43, 0), (0x4f, 0), (0x50, 1), (0xef, 2)] {
            assert_eq!(
                RdmapControl(octet).reserved(),
                want,
                "RDMAP control {octet:#04x}"
            );
        }
    }

    /// The header hands back the control octets it was parsed from, for
    /// both models.
    #[test]
    fn parsed_header_returns_its_control_octets() {
        let t = [0x81u8, 0x42, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let (h, _) = DdpHeader::parse(&t).unwrap();
        assert_eq!((h.ddp(), h.rdmap()), (DdpControl(0x81), RdmapControl(0x42)));
        assert!(h.ddp().tagged() && !h.ddp().last());
        assert_eq!(h.rdmap().opcode(), Opcode::ReadResponse);
        let u = [0x41u8, 0x45, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
        let (h, _) = DdpHeader::parse(&u).unwrap();
        assert_eq!((h.ddp(), h.rdmap()), (DdpControl(0x41), RdmapControl(0x45)));
        assert_eq!(h.rdmap().opcode(), Opcode::SendSe);
    }

    /// RFC 5040 figure 4 and RFC 7306 §4, column by column, for every value
    /// of the opcode field as it arrives in the RDMAP control octet (RV 01b).
    #[test]
    fn opcode_table_from_every_control_octet() {
        // (tagged, queue, invalidates, solicited) for opcodes 0..=11.
        let known = [
            (Some(true), None, false, false),     // Write
            (Some(false), Some(1), false, false), // Read Request
            (Some(true), None, false, false),     // Read Response
            (Some(false), Some(0), false, false), // Send
            (Some(false), Some(0), true, false),  // Send with Invalidate
            (Some(false), Some(0), false, true),  // Send with SE
            (Some(false), Some(0), true, true),   // Send with SE and Invalidate
            (Some(false), Some(2), false, false), // Terminate
            (Some(false), Some(0), false, false), // Immediate Data
            (Some(false), Some(0), false, true),  // Immediate Data with SE
            (Some(false), Some(1), false, false), // Atomic Request
            (Some(false), Some(3), false, false), // Atomic Response
        ];
        for bits in 0u8..16 {
            let op = RdmapControl(0x40 | bits).opcode();
            let got = (op.tagged(), op.queue(), op.invalidates(), op.solicited());
            // Reserved opcodes have no Tagged flag or queue of their own.
            let want = known
                .get(bits as usize)
                .copied()
                .unwrap_or((None, None, false, false));
            assert_eq!(got, want, "opcode {bits:#x} ({op:?})");
        }
    }

    #[test]
    fn send_invalidate_carries_stag() {
        let b = [
            0x41, 0x44, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 0, 0, 0, 0, 7, 0, 0, 1, 0,
        ];
        let (h, _) = DdpHeader::parse(&b).unwrap();
        let DdpHeader::Untagged(u) = h else { panic!() };
        assert_eq!(u.inval_stag, 0xdead_beef);
        assert_eq!(u.rdmap.opcode(), Opcode::SendInvalidate);
        assert_eq!((u.msn, u.mo), (7, 256));
    }

    #[test]
    fn every_truncation_is_an_error() {
        let t = [0xc1u8, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        for n in 0..t.len() {
            assert!(matches!(
                DdpHeader::parse(&t[..n]),
                Err(WireError::Truncated { .. })
            ));
            assert!(DdpSegment::new_checked(&t[..n]).is_err());
        }
        let u = [0x41u8; 18];
        for n in 0..u.len() {
            assert!(matches!(
                DdpHeader::parse(&u[..n]),
                Err(WireError::Truncated { .. })
            ));
        }
    }

    /// The zero-copy view on literal segments: each field at its offset,
    /// the other kind's fields zero, the payload after the header.
    #[test]
    fn segment_view_reads_every_field_from_literal_bytes() {
        // Tagged Write, not last: STag 0x01020304, TO 0x1122334455667788, "xyz".
        let mut t = [
            0x81, 0x40, 0x01, 0x02, 0x03, 0x04, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,
            b'x', b'y', b'z',
        ];
        let s = DdpSegment::new_checked(&t[..]).unwrap();
        assert!(s.control().tagged() && !s.control().last());
        assert_eq!(s.rdmap_control().opcode(), Opcode::Write);
        assert_eq!((s.stag(), s.to()), (0x0102_0304, 0x1122_3344_5566_7788));
        assert_eq!((s.inval_stag(), s.qn(), s.msn(), s.mo()), (0, 0, 0, 0));
        assert_eq!(s.payload(), b"xyz");
        let mut s = DdpSegment::new_unchecked(&mut t[..]);
        s.set_last(true);
        assert_eq!(t[0], 0xc1);
        DdpSegment::new_unchecked(&mut t[..]).set_last(false);
        assert_eq!(t[0], 0x81);
        // Untagged Send with Invalidate, last: Inval STag 0xdeadbeef, QN 1,
        // MSN 0x0a0b0c0d, MO 0x00000100, "pq".
        let u = [
            0x41, 0x44, 0xde, 0xad, 0xbe, 0xef, 0, 0, 0, 1, 0x0a, 0x0b, 0x0c, 0x0d, 0, 0, 1, 0,
            b'p', b'q',
        ];
        let s = DdpSegment::new_checked(&u[..]).unwrap();
        assert!(!s.control().tagged() && s.control().last());
        assert_eq!(s.rdmap_control().opcode(), Opcode::SendInvalidate);
        assert_eq!((s.stag(), s.to()), (0, 0));
        assert_eq!(
            (s.inval_stag(), s.qn(), s.msn(), s.mo()),
            (0xdead_beef, 1, 0x0a0b_0c0d, 0x100)
        );
        assert_eq!(s.payload(), b"pq");
        // A header alone has an empty payload; an untagged header cut to a
        // tagged header's length is refused with what it needs.
        assert_eq!(DdpSegment::new_checked(&u[..18]).unwrap().payload(), b"");
        assert_eq!(
            DdpSegment::new_checked(&u[..14]).unwrap_err(),
            WireError::Truncated {
                what: "DDP segment",
                needed: 18,
                have: 14
            }
        );
        // Unchecked on a short buffer: zeros and nothing, no panic.
        let s = DdpSegment::new_unchecked(&u[..12]);
        assert_eq!((s.msn(), s.mo(), s.payload()), (0, 0, &[][..]));
        let s = DdpSegment::new_unchecked(&[][..]);
        assert_eq!((s.control().0, s.rdmap_control().0), (0, 0));
    }
}
