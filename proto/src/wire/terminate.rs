//! Terminate message body (RFC 5040 §4.8): control word, then — each only when
//! its flag is set — the DDP segment length, the terminated DDP header and the
//! terminated RDMA (Read Request) header.
//!
//! ```text
//! Layer(4) EType(4) ErrorCode(8) M D R Reserved(13)
//! [DDP Segment Length (2)]   present if M or D (RFC 5040 §4.8: MUST be present when D is set)
//! [DDP header (14 | 18)]     present if D
//! [RDMA Read Request header (28)]  present if R
//! ```
//!
//! Linux siw 6.1 sends this control word bit-swapped (shared/interop README,
//! finding 1); [`TerminateRepr::siw_swapped`] recognises that form.

use super::ddp::{DdpControl, DdpHeader};
use super::rdmap::{ReadRequest, READ_REQUEST_LEN};
use super::{be16, be32, need, put16, WireError};

/// Terminate layers (RFC 5040 figure 9).
pub mod layer {
    /// RDMAP.
    pub const RDMAP: u8 = 0;
    /// DDP.
    pub const DDP: u8 = 1;
    /// LLP (MPA).
    pub const LLP: u8 = 2;
}

/// A (layer, error type, error code) triple, as the Terminate carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TermCode {
    /// Layer (0 RDMAP, 1 DDP, 2 LLP; other values kept).
    pub layer: u8,
    /// Error type.
    pub etype: u8,
    /// Error code.
    pub ecode: u8,
}

#[allow(missing_docs)]
impl TermCode {
    pub const fn new(layer: u8, etype: u8, ecode: u8) -> Self {
        TermCode {
            layer,
            etype,
            ecode,
        }
    }
    // RDMAP (RFC 5040 §4.8 figure 9)
    pub const RDMAP_LOCAL_CATASTROPHIC: Self = Self::new(0, 0, 0);
    pub const RDMAP_INVALID_STAG: Self = Self::new(0, 1, 0x00);
    pub const RDMAP_BASE_BOUNDS: Self = Self::new(0, 1, 0x01);
    pub const RDMAP_ACCESS: Self = Self::new(0, 1, 0x02);
    pub const RDMAP_STAG_NOT_ASSOC: Self = Self::new(0, 1, 0x03);
    pub const RDMAP_TO_WRAP: Self = Self::new(0, 1, 0x04);
    pub const RDMAP_CANNOT_INVALIDATE: Self = Self::new(0, 1, 0x09);
    pub const RDMAP_PROT_UNSPECIFIED: Self = Self::new(0, 1, 0xff);
    pub const RDMAP_INVALID_VERSION: Self = Self::new(0, 2, 0x05);
    pub const RDMAP_UNEXPECTED_OPCODE: Self = Self::new(0, 2, 0x06);
    pub const RDMAP_CATASTROPHIC_STREAM: Self = Self::new(0, 2, 0x07);
    pub const RDMAP_CATASTROPHIC_GLOBAL: Self = Self::new(0, 2, 0x08);
    pub const RDMAP_OP_UNSPECIFIED: Self = Self::new(0, 2, 0xff);
    // DDP (RFC 5041 §7.2)
    pub const DDP_LOCAL_CATASTROPHIC: Self = Self::new(1, 0, 0);
    pub const DDP_T_INVALID_STAG: Self = Self::new(1, 1, 0x00);
    pub const DDP_T_BASE_BOUNDS: Self = Self::new(1, 1, 0x01);
    pub const DDP_T_STAG_NOT_ASSOC: Self = Self::new(1, 1, 0x02);
    pub const DDP_T_TO_WRAP: Self = Self::new(1, 1, 0x03);
    pub const DDP_T_INVALID_VERSION: Self = Self::new(1, 1, 0x04);
    pub const DDP_U_INVALID_QN: Self = Self::new(1, 2, 0x01);
    pub const DDP_U_NO_BUFFER: Self = Self::new(1, 2, 0x02);
    pub const DDP_U_MSN_RANGE: Self = Self::new(1, 2, 0x03);
    pub const DDP_U_INVALID_MO: Self = Self::new(1, 2, 0x04);
    pub const DDP_U_TOO_LONG: Self = Self::new(1, 2, 0x05);
    pub const DDP_U_INVALID_VERSION: Self = Self::new(1, 2, 0x06);
    // LLP = MPA (RFC 5044 §8, RFC 6581 §4)
    pub const MPA_CONN_LOST: Self = Self::new(2, 0, 0x01);
    pub const MPA_CRC: Self = Self::new(2, 0, 0x02);
    pub const MPA_MARKER: Self = Self::new(2, 0, 0x03);
    pub const MPA_BAD_REQ_REP: Self = Self::new(2, 0, 0x04);
    pub const MPA_LOCAL_CATASTROPHIC: Self = Self::new(2, 0, 0x05);
    pub const MPA_INSUFFICIENT_IRD: Self = Self::new(2, 0, 0x06);
    pub const MPA_NO_MATCHING_RTR: Self = Self::new(2, 0, 0x07);

    /// A short English name for logs.
    pub fn describe(self) -> &'static str {
        match (self.layer, self.etype, self.ecode) {
            (0, 0, _) => "RDMAP local catastrophic error",
            (0, 1, 0x00) => "RDMAP invalid STag",
            (0, 1, 0x01) => "RDMAP base or bounds violation",
            (0, 1, 0x02) => "RDMAP access rights violation",
            (0, 1, 0x03) => "RDMAP STag not associated with RDMAP stream",
            (0, 1, 0x04) => "RDMAP TO wrap",
            (0, _, 0x09) => "RDMAP STag cannot be invalidated",
            (0, 2, 0x05) => "RDMAP invalid RDMAP version",
            (0, 2, 0x06) => "RDMAP unexpected opcode",
            (0, 2, 0x07) => "RDMAP catastrophic error localized to stream",
            (0, 2, 0x08) => "RDMAP catastrophic error global",
            (0, _, 0xff) => "RDMAP unspecified error",
            (1, 0, _) => "DDP local catastrophic error",
            (1, 1, 0x00) => "DDP tagged: invalid STag",
            (1, 1, 0x01) => "DDP tagged: base or bounds violation",
            (1, 1, 0x02) => "DDP tagged: STag not associated with DDP stream",
            (1, 1, 0x03) => "DDP tagged: TO wrap",
            (1, 1, 0x04) => "DDP tagged: invalid DDP version",
            (1, 2, 0x01) => "DDP untagged: invalid QN",
            (1, 2, 0x02) => "DDP untagged: invalid MSN, no buffer available",
            (1, 2, 0x03) => "DDP untagged: invalid MSN, MSN range not valid",
            (1, 2, 0x04) => "DDP untagged: invalid MO",
            (1, 2, 0x05) => "DDP untagged: message too long for available buffer",
            (1, 2, 0x06) => "DDP untagged: invalid DDP version",
            (2, 0, 0x01) => "MPA: TCP connection closed, terminated or lost",
            (2, 0, 0x02) => "MPA: CRC error",
            (2, 0, 0x03) => "MPA: marker and ULPDU length mismatch",
            (2, 0, 0x04) => "MPA: invalid MPA Request or Reply",
            (2, 0, 0x05) => "MPA: local catastrophic",
            (2, 0, 0x06) => "MPA: insufficient IRD resources",
            (2, 0, 0x07) => "MPA: no matching RTR option",
            _ => "unknown terminate code",
        }
    }
}

impl TermCode {
    /// The layer's name (RFC 5040 §4.8): `RDMAP`, `DDP`, `MPA` (the LLP).
    pub fn layer_name(self) -> Option<&'static str> {
        match self.layer {
            layer::RDMAP => Some("RDMAP"),
            layer::DDP => Some("DDP"),
            layer::LLP => Some("MPA"),
            _ => None,
        }
    }

    /// The error type's name within its layer: RFC 5040 §7.2 (RDMAP),
    /// RFC 5041 §7.2 (DDP); MPA (RFC 5044 §8) has one type, 0.
    pub fn etype_name(self) -> Option<&'static str> {
        match (self.layer, self.etype) {
            (0 | 1, 0) => Some("local catastrophic error"),
            (0, 1) => Some("remote protection error"),
            (0, 2) => Some("remote operation error"),
            (1, 1) => Some("tagged buffer error"),
            (1, 2) => Some("untagged buffer error"),
            (2, 0) => Some("error"),
            _ => None,
        }
    }

    /// The error code's name within its layer and type.
    pub fn ecode_name(self) -> Option<&'static str> {
        Some(match (self.layer, self.etype, self.ecode) {
            (0 | 1, 0, _) => "local catastrophic",
            (0, 1, 0x00) | (1, 1, 0x00) => "invalid STag",
            (0, 1, 0x01) | (1, 1, 0x01) => "base or bounds violation",
            (0, 1, 0x02) => "access rights violation",
            (0, 1, 0x03) => "STag not associated with RDMAP stream",
            (1, 1, 0x02) => "STag not associated with DDP stream",
            (0, 1, 0x04) | (1, 1, 0x03) => "TO wrap",
            (0, _, 0x09) => "STag cannot be invalidated",
            (0, 2, 0x05) => "invalid RDMAP version",
            (0, 2, 0x06) => "unexpected opcode",
            (0, 2, 0x07) => "catastrophic error, localized to RDMAP stream",
            (0, 2, 0x08) => "catastrophic error, global",
            (0, _, 0xff) => "unspecified error",
            (1, 1, 0x04) | (1, 2, 0x06) => "invalid DDP version",
            (1, 2, 0x01) => "invalid QN",
            (1, 2, 0x02) => "invalid MSN, no buffer available",
            (1, 2, 0x03) => "invalid MSN, MSN range is not valid",
            (1, 2, 0x04) => "invalid MO",
            (1, 2, 0x05) => "DDP message too long for available buffer",
            (2, 0, 0x01) => "TCP connection closed, terminated or lost",
            (2, 0, 0x02) => "CRC error",
            (2, 0, 0x03) => "marker and ULPDU length field mismatch",
            (2, 0, 0x04) => "invalid MPA Request or Reply frame",
            (2, 0, 0x05) => "local catastrophic",
            (2, 0, 0x06) => "insufficient IRD resources",
            (2, 0, 0x07) => "no matching RTR option",
            _ => return None,
        })
    }
}

/// `LAYER: TYPE: CODE`, each named where known and numbered otherwise,
/// e.g. `RDMAP: remote protection error: invalid STag` or
/// `layer 5: type 10: code 0x33`.
impl core::fmt::Display for TermCode {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self.layer_name() {
            Some(l) => f.write_str(l)?,
            None => write!(f, "layer {}", self.layer)?,
        }
        match self.etype_name() {
            Some(t) => write!(f, ": {t}")?,
            None => write!(f, ": type {}", self.etype)?,
        }
        match self.ecode_name() {
            Some(c) => write!(f, ": {c}"),
            None => write!(f, ": code {:#04x}", self.ecode),
        }
    }
}

/// The cause, then what it quotes: `RDMAP: remote protection error:
/// invalid STag (terminated DDP header: tagged, STag 0x…, TO …)`.
impl core::fmt::Display for TerminateRepr {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{}", self.code)?;
        let mut parts = 0;
        let mut sep = |f: &mut core::fmt::Formatter<'_>| {
            parts += 1;
            f.write_str(if parts == 1 { " (" } else { "; " })
        };
        if let Some(h) = &self.ddp_header {
            sep(f)?;
            match h {
                DdpHeader::Tagged(t) => write!(
                    f,
                    "terminated DDP header: tagged, STag {:#010x}, TO {}",
                    t.stag, t.to
                )?,
                DdpHeader::Untagged(u) => write!(
                    f,
                    "terminated DDP header: untagged, QN {}, MSN {}, MO {}",
                    u.qn, u.msn, u.mo
                )?,
            }
        }
        if let Some(l) = self.ddp_segment_len {
            sep(f)?;
            write!(f, "DDP segment length {l}")?;
        }
        if let Some(r) = &self.rdma_header {
            sep(f)?;
            write!(
                f,
                "terminated Read Request: source STag {:#010x}, {} octets",
                r.src_stag, r.size
            )?;
        }
        if parts > 0 {
            f.write_str(")")?;
        }
        Ok(())
    }
}

/// Control word flag bits (in the third octet).
const FLAG_M: u8 = 0x80;
const FLAG_D: u8 = 0x40;
const FLAG_R: u8 = 0x20;

/// Largest Terminate body: control 4 + length 2 + untagged header 18 + Read Request 28.
pub const MAX_TERMINATE_LEN: usize = 4 + 2 + 18 + READ_REQUEST_LEN;

/// Plain representation of a Terminate body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TerminateRepr {
    /// Layer, type, code.
    pub code: TermCode,
    /// M flag as received/sent (the DDP segment length is valid).
    pub flag_m: bool,
    /// DDP Segment Length (present when M or D is set).
    pub ddp_segment_len: Option<u16>,
    /// Terminated DDP header (present when D is set).
    pub ddp_header: Option<DdpHeader>,
    /// Terminated RDMA header (present when R is set).
    pub rdma_header: Option<ReadRequest>,
    /// The 13 reserved bits as received (RFC 5040 §4.8: ignored on receive).
    pub reserved: u16,
}

impl TerminateRepr {
    /// A Terminate with no copied headers (LLP and local errors).
    pub fn bare(code: TermCode) -> Self {
        TerminateRepr {
            code,
            flag_m: false,
            ddp_segment_len: None,
            ddp_header: None,
            rdma_header: None,
            reserved: 0,
        }
    }

    /// Parse a Terminate body (the ULP payload of a QN 2 message).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("Terminate header", buf, 4)?;
        let w = be32(buf, 0);
        let code = TermCode::new(buf[0] >> 4, buf[0] & 0x0f, buf[1]);
        let m = buf[2] & FLAG_M != 0;
        let d = buf[2] & FLAG_D != 0;
        let r = buf[2] & FLAG_R != 0;
        let reserved = (w & 0x1fff) as u16;
        let mut at = 4;
        let ddp_segment_len = if m || d {
            need("Terminate DDP segment length", buf, at + 2)?;
            let l = be16(buf, at);
            at += 2;
            Some(l)
        } else {
            None
        };
        let ddp_header = if d {
            let rest = buf.get(at..).unwrap_or(&[]);
            let (h, n) = DdpHeader::parse(rest).map_err(|_| WireError::Truncated {
                what: "Terminate DDP header",
                needed: at + rest.first().map_or(1, |c| DdpControl(*c).header_len()),
                have: buf.len(),
            })?;
            at += n;
            Some(h)
        } else {
            None
        };
        let rdma_header = if r {
            need("Terminate RDMA header", buf, at + READ_REQUEST_LEN)?;
            let h = ReadRequest::parse(&buf[at..])?;
            Some(h)
        } else {
            None
        };
        Ok(TerminateRepr {
            code,
            flag_m: m,
            ddp_segment_len,
            ddp_header,
            rdma_header,
            reserved,
        })
    }

    /// Octets [`emit`](Self::emit) writes.
    pub fn buffer_len(&self) -> usize {
        let mut n = 4;
        if self.flag_m || self.ddp_header.is_some() {
            n += 2;
        }
        if let Some(h) = &self.ddp_header {
            n += h.buffer_len();
        }
        if self.rdma_header.is_some() {
            n += READ_REQUEST_LEN;
        }
        n
    }

    /// Write the body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        let len = self.buffer_len();
        need("Terminate (emit)", buf, len)?;
        let mut flags = 0u8;
        if self.flag_m {
            flags |= FLAG_M;
        }
        if self.ddp_header.is_some() {
            flags |= FLAG_D;
        }
        if self.rdma_header.is_some() {
            flags |= FLAG_R;
        }
        buf[0] = (self.code.layer << 4) | (self.code.etype & 0x0f);
        buf[1] = self.code.ecode;
        buf[2] = flags;
        buf[3] = 0;
        let mut at = 4;
        if self.flag_m || self.ddp_header.is_some() {
            put16(buf, at, self.ddp_segment_len.unwrap_or(0));
            at += 2;
        }
        if let Some(h) = &self.ddp_header {
            at += h.emit(&mut buf[at..])?;
        }
        if let Some(r) = &self.rdma_header {
            at += r.emit(&mut buf[at..])?;
        }
        debug_assert_eq!(at, len);
        Ok(len)
    }

    /// Emit into a fixed array; returns it and the length used.
    pub fn to_array(&self) -> ([u8; MAX_TERMINATE_LEN], usize) {
        let mut a = [0u8; MAX_TERMINATE_LEN];
        let n = self.emit(&mut a).unwrap_or(0);
        (a, n)
    }

    /// Read a control word the way Linux siw 6.1 writes it on x86 (little-endian
    /// bitfields: layer in the low nibble of octet 0, type in the high nibble,
    /// M/D/R in the low bits of octet 2). Returns the code siw meant.
    pub fn siw_swapped(buf: &[u8]) -> Option<TermCode> {
        let b = buf.get(..2)?;
        Some(TermCode::new(b[0] & 0x0f, b[0] >> 4, b[1]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ddp::{RdmapControl, TaggedHeader, UntaggedHeader};
    use crate::wire::Opcode;

    /// RFC 5040 form of an MPA CRC error: 20 02 00 00 (shared/interop README, finding 1).
    #[test]
    fn llp_crc_terminate_bytes() {
        let t = TerminateRepr::bare(TermCode::MPA_CRC);
        let (a, n) = t.to_array();
        assert_eq!(&a[..n], &[0x20, 0x02, 0x00, 0x00]);
        assert_eq!(TerminateRepr::parse(&a[..n]).unwrap(), t);
        // siw sends 02 02 00 00 for the same error.
        assert_eq!(
            TerminateRepr::siw_swapped(&[0x02, 0x02, 0, 0]),
            Some(TermCode::MPA_CRC)
        );
        // ...which an RFC reader decodes as RDMAP / remote operation / code 2.
        let misread = TerminateRepr::parse(&[0x02, 0x02, 0, 0]).unwrap();
        assert_eq!(misread.code, TermCode::new(0, 2, 2));
    }

    #[test]
    fn ddp_tagged_error_with_header() {
        let h = DdpHeader::Tagged(TaggedHeader {
            ddp: DdpControl::new(true, true),
            rdmap: RdmapControl::new(Opcode::Write),
            stag: 0x0000_0105,
            to: 0x1000,
        });
        let t = TerminateRepr {
            code: TermCode::DDP_T_BASE_BOUNDS,
            flag_m: true,
            ddp_segment_len: Some(14 + 100),
            ddp_header: Some(h),
            rdma_header: None,
            reserved: 0,
        };
        let (a, n) = t.to_array();
        let want: [u8; 20] = [
            0x11, 0x01, 0xc0, 0x00, 0x00, 0x72, 0xc1, 0x40, 0x00, 0x00, 0x01, 0x05, 0, 0, 0, 0, 0,
            0, 0x10, 0x00,
        ];
        assert_eq!(&a[..n], &want);
        assert_eq!(TerminateRepr::parse(&want).unwrap(), t);
        for k in 0..want.len() {
            assert!(TerminateRepr::parse(&want[..k]).is_err(), "len {k}");
        }
    }

    #[test]
    fn read_request_error_with_all_parts() {
        let h = DdpHeader::Untagged(UntaggedHeader {
            ddp: DdpControl::new(false, true),
            rdmap: RdmapControl::new(Opcode::ReadRequest),
            inval_stag: 0,
            qn: 1,
            msn: 3,
            mo: 0,
        });
        let rr = ReadRequest {
            sink_stag: 9,
            sink_to: 8,
            size: 7,
            src_stag: 6,
            src_to: 5,
        };
        let t = TerminateRepr {
            code: TermCode::RDMAP_ACCESS,
            flag_m: true,
            ddp_segment_len: Some(46),
            ddp_header: Some(h),
            rdma_header: Some(rr),
            reserved: 0,
        };
        let (a, n) = t.to_array();
        assert_eq!(n, MAX_TERMINATE_LEN);
        assert_eq!(&a[..4], &[0x01, 0x02, 0xe0, 0x00]);
        assert_eq!(TerminateRepr::parse(&a[..n]).unwrap(), t);
        for k in 0..n {
            assert!(TerminateRepr::parse(&a[..k]).is_err(), "len {k}");
        }
    }

    /// Layer, type and code named (RFC 5040 §7.2, RFC 5041 §7.2, RFC 5044
    /// §8), numbers where unknown, and what the Terminate quotes.
    #[test]
    fn display_names_layer_type_and_code() {
        assert_eq!(
            TermCode::RDMAP_INVALID_STAG.to_string(),
            "RDMAP: remote protection error: invalid STag"
        );
        assert_eq!(
            TermCode::DDP_U_NO_BUFFER.to_string(),
            "DDP: untagged buffer error: invalid MSN, no buffer available"
        );
        assert_eq!(TermCode::MPA_CRC.to_string(), "MPA: error: CRC error");
        assert_eq!(
            TermCode::new(5, 0xa, 0x33).to_string(),
            "layer 5: type 10: code 0x33"
        );
        assert_eq!(
            TermCode::new(0, 1, 0x42).to_string(),
            "RDMAP: remote protection error: code 0x42"
        );
        assert_eq!(
            TerminateRepr::bare(TermCode::MPA_INSUFFICIENT_IRD).to_string(),
            "MPA: error: insufficient IRD resources"
        );
        let t = TerminateRepr::parse(&[
            0x01, 0x00, 0xc0, 0x00, 0x00, 0x20, 0x81, 0x01, 0, 0, 0x12, 0x34, 0, 0, 0, 0, 0, 0,
            0x10, 0x00,
        ])
        .expect("tagged");
        assert_eq!(
            t.to_string(),
            "RDMAP: remote protection error: invalid STag (terminated DDP header: tagged, \
             STag 0x00001234, TO 4096; DDP segment length 32)"
        );
    }

    #[test]
    fn unknown_layer_and_reserved_kept() {
        let t = TerminateRepr::parse(&[0x5a, 0x33, 0x1f, 0xff]).unwrap();
        assert_eq!(t.code, TermCode::new(5, 0xa, 0x33));
        assert_eq!(t.reserved, 0x1fff);
        assert_eq!(t.code.describe(), "unknown terminate code");
    }
}
