//! RDMAP message bodies after the untagged DDP header: the RDMA Read Request
//! header (RFC 5040 §4.4, 28 octets) and the RFC 7306 bodies: Atomic Request
//! (52 octets), Atomic Response (12 octets) and Immediate Data (8 octets).
//!
//! ```text
//! Atomic Request  (QN 1): rsvd(28 bits) | AtomicOp(4 bits) | Request Identifier(4)
//!                         | Remote STag(4) | Remote TO(8) | Add-or-Swap Data(8)
//!                         | Add-or-Swap Mask(8) | Compare Data(8) | Compare Mask(8)
//! Atomic Response (QN 3): Original Request Identifier(4) | Original Remote Data Value(8)
//! Immediate Data  (QN 0): Immediate Data(8)
//! ```
//!
//! Sources of these layouts are recorded in docs/rfc7306.md, "RFC 7306":
//! the atomic bodies and sub-opcodes are the ones Wireshark's
//! `packet-iwarp-ddp-rdmap.c` decodes (`iwarp_rdma.atomic.*`), with the
//! same offsets as urdma's `rdmap_atomicreq_packet`; the queue numbers
//! are urdma's. The RFC's text itself could not be read, so the `§`
//! numbers beside this code are unchecked.

use super::{be32, be64, need, put32, put64, WireError};

/// Read Request body length.
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    pub const SINK_STAG: usize = 0;
    pub const SINK_TO: usize = 4;
    pub const SIZE: usize = 12;
    pub const SRC_STAG: usize = 16;
    pub const SRC_TO: usize = 20;
}

/// RDMA Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRequest {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Parse the 28-octet body.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("RDMA Read Request header", buf, READ_REQUEST_LEN)?;
        Ok(ReadRequest {
            sink_stag: be32(buf, field::SINK_STAG),
            sink_to: be64(buf, field::SINK_TO),
            size: be32(buf, field::SIZE),
            src_stag: be32(buf, field::SRC_STAG),
            src_to: be64(buf, field::SRC_TO),
        })
    }
    /// Octets [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }
    /// Write the 28-octet body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        need("RDMA Read Request header (emit)", buf, READ_REQUEST_LEN)?;
        put32(buf, field::SINK_STAG, self.sink_stag);
        put64(buf, field::SINK_TO, self.sink_to);
        put32(buf, field::SIZE, self.size);
        put32(buf, field::SRC_STAG, self.src_stag);
        put64(buf, field::SRC_TO, self.src_to);
        Ok(READ_REQUEST_LEN)
    }
    /// As a fixed array.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut a = [0u8; READ_REQUEST_LEN];
        let _ = self.emit(&mut a);
        a
    }
}

/// Atomic Request body length (RFC 7306 §5.2.1, the layout Wireshark 4.0 decodes).
pub const ATOMIC_REQUEST_LEN: usize = 52;
/// Atomic Response body length (RFC 7306 §5.2.2).
pub const ATOMIC_RESPONSE_LEN: usize = 12;
/// Immediate Data body length (RFC 7306 §6: 8 octets of data).
pub const IMMEDIATE_DATA_LEN: usize = 8;

mod atomic_field {
    pub const OPCODE: usize = 0; // low 4 bits of the first word; the 28 above are reserved
    pub const REQ_ID: usize = 4;
    pub const STAG: usize = 8;
    pub const TO: usize = 12;
    pub const ADD_SWAP: usize = 20;
    pub const ADD_SWAP_MASK: usize = 28;
    pub const COMPARE: usize = 36;
    pub const COMPARE_MASK: usize = 44;
    // Atomic Response
    pub const ORIG_REQ_ID: usize = 0;
    pub const ORIG_VALUE: usize = 4;
}

/// Atomic operation code point of an Atomic Request (4 bits). Unknown
/// values are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// 0000b Fetch and Add.
    FetchAdd,
    /// 0001b Swap (unconditional, masked).
    Swap,
    /// 0010b Compare and Swap.
    CmpSwap,
    /// Any other value, as received.
    Unknown(u8),
}

impl AtomicOp {
    /// From the 4-bit field.
    pub fn from_bits(v: u8) -> Self {
        match v & 0x0f {
            0 => AtomicOp::FetchAdd,
            1 => AtomicOp::Swap,
            2 => AtomicOp::CmpSwap,
            x => AtomicOp::Unknown(x),
        }
    }
    /// The 4-bit field.
    pub fn bits(self) -> u8 {
        match self {
            AtomicOp::FetchAdd => 0,
            AtomicOp::Swap => 1,
            AtomicOp::CmpSwap => 2,
            AtomicOp::Unknown(x) => x & 0x0f,
        }
    }
}

/// RFC 7306 Atomic Request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AtomicRequest {
    /// Atomic operation.
    pub op: AtomicOp,
    /// Request Identifier, echoed by the Atomic Response.
    pub req_id: u32,
    /// Remote STag of the 8-octet target.
    pub stag: u32,
    /// Remote Tagged Offset of the target (8-octet aligned, RFC 7306 §5.2.1).
    pub to: u64,
    /// Add Data (Fetch and Add) or Swap Data (Swap, Compare and Swap).
    pub add_swap: u64,
    /// Add Mask or Swap Mask.
    pub add_swap_mask: u64,
    /// Compare Data (Compare and Swap).
    pub compare: u64,
    /// Compare Mask (Compare and Swap).
    pub compare_mask: u64,
}

impl AtomicRequest {
    /// Parse the 52-octet body. The 28 reserved bits are ignored.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("RDMAP Atomic Request", buf, ATOMIC_REQUEST_LEN)?;
        Ok(AtomicRequest {
            op: AtomicOp::from_bits(buf[atomic_field::OPCODE + 3]),
            req_id: be32(buf, atomic_field::REQ_ID),
            stag: be32(buf, atomic_field::STAG),
            to: be64(buf, atomic_field::TO),
            add_swap: be64(buf, atomic_field::ADD_SWAP),
            add_swap_mask: be64(buf, atomic_field::ADD_SWAP_MASK),
            compare: be64(buf, atomic_field::COMPARE),
            compare_mask: be64(buf, atomic_field::COMPARE_MASK),
        })
    }
    /// Octets [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_REQUEST_LEN
    }
    /// Write the 52-octet body (reserved bits zero).
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        need("RDMAP Atomic Request (emit)", buf, ATOMIC_REQUEST_LEN)?;
        put32(buf, atomic_field::OPCODE, u32::from(self.op.bits()));
        put32(buf, atomic_field::REQ_ID, self.req_id);
        put32(buf, atomic_field::STAG, self.stag);
        put64(buf, atomic_field::TO, self.to);
        put64(buf, atomic_field::ADD_SWAP, self.add_swap);
        put64(buf, atomic_field::ADD_SWAP_MASK, self.add_swap_mask);
        put64(buf, atomic_field::COMPARE, self.compare);
        put64(buf, atomic_field::COMPARE_MASK, self.compare_mask);
        Ok(ATOMIC_REQUEST_LEN)
    }
    /// As a fixed array.
    pub fn to_bytes(&self) -> [u8; ATOMIC_REQUEST_LEN] {
        let mut a = [0u8; ATOMIC_REQUEST_LEN];
        let _ = self.emit(&mut a);
        a
    }
    /// Execute the operation on `orig`, the target's value: the value to
    /// store, or `None` when nothing is stored (a Compare and Swap whose
    /// comparison failed). `None` also for an unknown operation (callers
    /// reject those first).
    ///
    /// Fetch and Add with a mask: each set mask bit ends a field, and the
    /// carry out of that bit is dropped (a zero mask is one 64-bit add).
    /// Swap and Compare and Swap replace the bits set in the swap mask;
    /// Compare and Swap compares the bits set in the compare mask.
    pub fn apply(&self, orig: u64) -> Option<u64> {
        match self.op {
            AtomicOp::FetchAdd => Some(masked_add(orig, self.add_swap, self.add_swap_mask)),
            AtomicOp::Swap => Some(swap(orig, self.add_swap, self.add_swap_mask)),
            AtomicOp::CmpSwap => ((orig ^ self.compare) & self.compare_mask == 0)
                .then(|| swap(orig, self.add_swap, self.add_swap_mask)),
            AtomicOp::Unknown(_) => None,
        }
    }
}

fn swap(orig: u64, data: u64, mask: u64) -> u64 {
    (orig & !mask) | (data & mask)
}

/// Field-wise addition: a set bit in `mask` marks the most significant bit
/// of a field; no carry leaves it.
fn masked_add(a: u64, b: u64, mask: u64) -> u64 {
    if mask == 0 {
        return a.wrapping_add(b);
    }
    let mut out = 0u64;
    let mut lo = 0u32;
    let mut m = mask;
    while lo < 64 {
        // The field runs from `lo` to the next set mask bit (or bit 63).
        let hi = if m == 0 { 63 } else { m.trailing_zeros() };
        if m != 0 {
            m &= m - 1;
        }
        let width = hi - lo + 1;
        let fmask = if width == 64 {
            u64::MAX
        } else {
            ((1u64 << width) - 1) << lo
        };
        out |= ((a & fmask).wrapping_add(b & fmask)) & fmask;
        lo = hi + 1;
    }
    out
}

/// RFC 7306 Atomic Response body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AtomicResponse {
    /// The Request Identifier of the Atomic Request answered.
    pub orig_req_id: u32,
    /// The target's value before the operation.
    pub orig_value: u64,
}

impl AtomicResponse {
    /// Parse the 12-octet body.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("RDMAP Atomic Response", buf, ATOMIC_RESPONSE_LEN)?;
        Ok(AtomicResponse {
            orig_req_id: be32(buf, atomic_field::ORIG_REQ_ID),
            orig_value: be64(buf, atomic_field::ORIG_VALUE),
        })
    }
    /// Octets [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        ATOMIC_RESPONSE_LEN
    }
    /// Write the 12-octet body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        need("RDMAP Atomic Response (emit)", buf, ATOMIC_RESPONSE_LEN)?;
        put32(buf, atomic_field::ORIG_REQ_ID, self.orig_req_id);
        put64(buf, atomic_field::ORIG_VALUE, self.orig_value);
        Ok(ATOMIC_RESPONSE_LEN)
    }
    /// As a fixed array.
    pub fn to_bytes(&self) -> [u8; ATOMIC_RESPONSE_LEN] {
        let mut a = [0u8; ATOMIC_RESPONSE_LEN];
        let _ = self.emit(&mut a);
        a
    }
}

/// RFC 7306 Immediate Data body: 8 octets the Data Sink delivers with the
/// completion of the receive buffer the message consumes. The verbs
/// 32-bit immediate travels as the first four octets (network order) and
/// the last four are zero, where Chelsio's iw_cxgb4 puts it: its Write
/// with Immediate work request and receive CQE hold the 64-bit field as
/// `union { struct { __be32 imm_data32; u32 reserved; } ib_imm_data;
/// __be64 imm_data64; }` ("iWARP protocol supports 64 bit immediate data
/// but rdma api limits it to 32bit"; docs/rfc7306.md, "RFC 7306").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ImmediateData(pub [u8; IMMEDIATE_DATA_LEN]);

impl ImmediateData {
    /// The verbs 32-bit immediate in the body.
    pub fn from_imm32(imm: u32) -> Self {
        let mut a = [0u8; IMMEDIATE_DATA_LEN];
        a[..4].copy_from_slice(&imm.to_be_bytes());
        ImmediateData(a)
    }
    /// The first four octets as the verbs 32-bit immediate (the last four
    /// are not delivered: verbs has 32 bits).
    pub fn imm32(&self) -> u32 {
        be32(&self.0, 0)
    }
    /// Parse the 8-octet body (exactly 8: RFC 7306 §6).
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("RDMAP Immediate Data", buf, IMMEDIATE_DATA_LEN)?;
        if buf.len() != IMMEDIATE_DATA_LEN {
            return Err(WireError::Malformed {
                what: "RDMAP Immediate Data",
                field: "length",
                value: buf.len() as u32,
            });
        }
        let mut a = [0u8; IMMEDIATE_DATA_LEN];
        a.copy_from_slice(buf);
        Ok(ImmediateData(a))
    }
    /// Write the 8-octet body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        need("RDMAP Immediate Data (emit)", buf, IMMEDIATE_DATA_LEN)?;
        buf[..IMMEDIATE_DATA_LEN].copy_from_slice(&self.0);
        Ok(IMMEDIATE_DATA_LEN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn atomic_request_literal_bytes() {
        let b: [u8; 52] = [
            0x00, 0x00, 0x00, 0x02, // reserved | AtomicOp 2 (Compare and Swap)
            0x00, 0x00, 0x00, 0x07, // request identifier
            0x00, 0x00, 0x12, 0x34, // remote STag
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x08, // remote TO
            0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, // swap data
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // swap mask
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, // compare data
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // compare mask
        ];
        let r = AtomicRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            AtomicRequest {
                op: AtomicOp::CmpSwap,
                req_id: 7,
                stag: 0x1234,
                to: 0x1008,
                add_swap: 0x1122_3344_5566_7788,
                add_swap_mask: u64::MAX,
                compare: 42,
                compare_mask: u64::MAX,
            }
        );
        assert_eq!(r.to_bytes(), b);
        for n in 0..52 {
            assert_eq!(
                AtomicRequest::parse(&b[..n]),
                Err(WireError::Truncated {
                    what: "RDMAP Atomic Request",
                    needed: 52,
                    have: n
                })
            );
        }
        // Reserved bits are ignored on receive and zero on send.
        let mut c = b;
        c[0] = 0xff;
        c[3] = 0xf0;
        let r2 = AtomicRequest::parse(&c).unwrap();
        assert_eq!(r2.op, AtomicOp::FetchAdd);
        assert_eq!(&r2.to_bytes()[..4], &[0, 0, 0, 0]);
        let mut c = b;
        c[3] = 0x0f;
        assert_eq!(AtomicRequest::parse(&c).unwrap().op, AtomicOp::Unknown(15));
    }

    /// A Swap (AtomicOp 0001b) of the low 16 bits and a masked Fetch and
    /// Add (0000b), at the offsets Wireshark's `dissect_iwarp_atomic` and
    /// urdma's `rdmap_atomicreq_packet` agree on.
    #[test]
    fn swap_and_masked_add_literal_bytes() {
        let b: [u8; 52] = [
            0x00, 0x00, 0x00, 0x01, // reserved | AtomicOp 1 (Swap)
            0x00, 0x00, 0x00, 0x03, // request identifier
            0x00, 0x00, 0x56, 0x78, // remote STag
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x70, 0x08, // remote TO
            0xaa, 0xaa, 0xbb, 0xbb, 0xcc, 0xcc, 0xdd, 0xdd, // swap data
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xff, 0xff, // swap mask
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // compare data
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, // compare mask
        ];
        let r = AtomicRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            AtomicRequest {
                op: AtomicOp::Swap,
                req_id: 3,
                stag: 0x5678,
                to: 0x7008,
                add_swap: 0xaaaa_bbbb_cccc_dddd,
                add_swap_mask: 0xffff,
                compare: 0,
                compare_mask: 0,
            }
        );
        assert_eq!(r.to_bytes(), b);
        assert_eq!(r.apply(0x1122_3344_5566_7788), Some(0x1122_3344_5566_dddd));
        let mut a = b;
        a[3] = 0x00; // AtomicOp 0 (Fetch and Add)
        a[20..28].copy_from_slice(&[0, 0, 0, 2, 0, 0, 0, 1]); // add data
        a[28..36].copy_from_slice(&[0x80, 0, 0, 0, 0x80, 0, 0, 0]); // add mask
        let r = AtomicRequest::parse(&a).unwrap();
        assert_eq!(
            (r.op, r.add_swap, r.add_swap_mask),
            (
                AtomicOp::FetchAdd,
                0x0000_0002_0000_0001,
                0x8000_0000_8000_0000
            )
        );
        assert_eq!(r.to_bytes(), a);
        // Two 32-bit fields: the low one wraps and does not carry.
        assert_eq!(r.apply(0x0000_0001_ffff_ffff), Some(0x0000_0003_0000_0000));
    }

    #[test]
    fn atomic_response_and_immediate_literal_bytes() {
        let b: [u8; 12] = [
            0x00, 0x00, 0x00, 0x07, // original request identifier
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x2a, // original value
        ];
        let r = AtomicResponse::parse(&b).unwrap();
        assert_eq!(
            r,
            AtomicResponse {
                orig_req_id: 7,
                orig_value: 42
            }
        );
        assert_eq!(r.to_bytes(), b);
        for n in 0..12 {
            assert_eq!(
                AtomicResponse::parse(&b[..n]),
                Err(WireError::Truncated {
                    what: "RDMAP Atomic Response",
                    needed: 12,
                    have: n
                })
            );
        }
        // The verbs immediate in the first four octets, the last four zero
        // (iw_cxgb4's `ib_imm_data { __be32 imm_data32; u32 reserved; }`).
        let i = [0xde, 0xad, 0xbe, 0xef, 0u8, 0, 0, 0];
        let d = ImmediateData::parse(&i).unwrap();
        assert_eq!(d.imm32(), 0xdead_beef);
        assert_eq!(ImmediateData::from_imm32(0xdead_beef), d);
        // What a peer puts in the last four is not the verbs immediate.
        assert_eq!(ImmediateData([0, 0, 0, 7, 1, 2, 3, 4]).imm32(), 7);
        let mut out = [0u8; 8];
        assert_eq!(d.emit(&mut out), Ok(8));
        assert_eq!(out, i);
        for n in 0..8 {
            assert_eq!(
                ImmediateData::parse(&i[..n]),
                Err(WireError::Truncated {
                    what: "RDMAP Immediate Data",
                    needed: 8,
                    have: n
                })
            );
        }
        assert!(matches!(
            ImmediateData::parse(&[0u8; 9]),
            Err(WireError::Malformed { .. })
        ));
    }

    #[test]
    fn atomic_semantics() {
        let mut r = AtomicRequest {
            op: AtomicOp::FetchAdd,
            req_id: 0,
            stag: 0,
            to: 0,
            add_swap: 5,
            add_swap_mask: 0,
            compare: 0,
            compare_mask: 0,
        };
        assert_eq!(r.apply(u64::MAX), Some(4));
        // Two 32-bit fields: no carry from the low field into the high one.
        r.add_swap = 1;
        r.add_swap_mask = 0x8000_0000_8000_0000;
        assert_eq!(r.apply(0x0000_0001_ffff_ffff), Some(0x0000_0001_0000_0000));
        r.op = AtomicOp::CmpSwap;
        r.add_swap = 9;
        r.add_swap_mask = u64::MAX;
        r.compare = 3;
        r.compare_mask = u64::MAX;
        assert_eq!(r.apply(3), Some(9));
        assert_eq!(r.apply(4), None);
        // Only the low octet compared and swapped.
        r.compare_mask = 0xff;
        r.add_swap_mask = 0xff;
        assert_eq!(r.apply(0xab03), Some(0xab09));
        r.op = AtomicOp::Swap;
        assert_eq!(r.apply(0xab77), Some(0xab09));
        r.op = AtomicOp::Unknown(7);
        assert_eq!(r.apply(1), None);
    }

    #[test]
    fn literal_bytes() {
        let b: [u8; 28] = [
            0x00, 0x00, 0x12, 0x00, // sink stag
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // sink TO 4096
            0x00, 0x01, 0x00, 0x00, // size 65536
            0x00, 0x00, 0x34, 0x07, // src stag
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0, // src TO
        ];
        let r = ReadRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            ReadRequest {
                sink_stag: 0x1200,
                sink_to: 4096,
                size: 65536,
                src_stag: 0x3407,
                src_to: 0xffff_ffff_ffff_fff0
            }
        );
        assert_eq!(r.to_bytes(), b);
        for n in 0..28 {
            assert!(ReadRequest::parse(&b[..n]).is_err());
        }
    }
}
