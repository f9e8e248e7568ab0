//! Property tests: every header round-trips through emit/parse, every
//! truncation of a valid encoding is an error (never a panic), and the MPA
//! framer/deframer pair recovers any ULPDU sequence over any stream cut.

#![allow(clippy::unwrap_used)] // a failed unwrap is a failed property

use iwarp_proto::mpa::{Deframer, Framer, UlpduSink};
use iwarp_proto::wire::ddp::{DdpControl, DdpHeader, RdmapControl, TaggedHeader, UntaggedHeader};
use iwarp_proto::wire::{
    AtomicOp, AtomicRequest, AtomicResponse, EnhancedParams, FrameKind, ImmediateData, MpaFlags,
    MpaFrameRepr, ReadRequest, TermCode, TerminateRepr,
};
use proptest::prelude::*;

fn ddp_header() -> impl Strategy<Value = DdpHeader> {
    prop_oneof![
        (any::<u8>(), any::<u8>(), any::<u32>(), any::<u64>()).prop_map(|(d, r, stag, to)| {
            DdpHeader::Tagged(TaggedHeader {
                ddp: DdpControl(d | 0x80),
                rdmap: RdmapControl(r),
                stag,
                to,
            })
        }),
        (
            any::<u8>(),
            any::<u8>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>(),
            any::<u32>()
        )
            .prop_map(|(d, r, i, qn, msn, mo)| {
                DdpHeader::Untagged(UntaggedHeader {
                    ddp: DdpControl(d & 0x7f),
                    rdmap: RdmapControl(r),
                    inval_stag: i,
                    qn,
                    msn,
                    mo,
                })
            }),
    ]
}

fn read_request() -> impl Strategy<Value = ReadRequest> {
    (
        any::<u32>(),
        any::<u64>(),
        any::<u32>(),
        any::<u32>(),
        any::<u64>(),
    )
        .prop_map(|(a, b, c, d, e)| ReadRequest {
            sink_stag: a,
            sink_to: b,
            size: c,
            src_stag: d,
            src_to: e,
        })
}

fn terminate() -> impl Strategy<Value = TerminateRepr> {
    (
        0u8..16,
        0u8..16,
        any::<u8>(),
        any::<bool>(),
        proptest::option::of(ddp_header()),
        proptest::option::of(read_request()),
        any::<u16>(),
    )
        .prop_map(|(l, t, c, m, h, r, len)| {
            let m = m || h.is_some();
            TerminateRepr {
                code: TermCode::new(l, t, c),
                flag_m: m,
                ddp_segment_len: m.then_some(len),
                ddp_header: h,
                rdma_header: r,
                reserved: 0,
            }
        })
}

proptest! {
    #[test]
    fn ddp_header_roundtrip_and_truncation(h in ddp_header()) {
        let (a, n) = h.to_array();
        let (back, m) = DdpHeader::parse(&a[..n]).unwrap();
        prop_assert_eq!(back, h);
        prop_assert_eq!(m, n);
        for k in 0..n {
            prop_assert!(DdpHeader::parse(&a[..k]).is_err());
        }
    }

    /// RFC 7306's masked operations against a bit-serial oracle: Fetch and
    /// Add is a ripple-carry add whose carry is dropped after every bit set
    /// in the Add Mask (mask 0: the plain 64-bit add); Swap and Compare and
    /// Swap store the swap bits the Swap Mask selects, Compare and Swap only
    /// when the bits the Compare Mask selects are equal.
    #[test]
    fn rfc7306_masked_operations_match_a_bit_serial_oracle(
        orig in any::<u64>(), data in any::<u64>(), mask in any::<u64>(),
        compare in any::<u64>(), cmask in any::<u64>(), sparse in any::<bool>(),
    ) {
        // Sparse masks too: few fields, so carries run across many bits.
        let mask = if sparse { mask & mask.rotate_left(17) & mask.rotate_left(39) } else { mask };
        let mut want = 0u64;
        let mut carry = 0u64;
        for i in 0..64 {
            let s = ((orig >> i) & 1) + ((data >> i) & 1) + carry;
            want |= (s & 1) << i;
            carry = if (mask >> i) & 1 == 1 { 0 } else { s >> 1 };
        }
        let req = |op, compare, compare_mask| AtomicRequest {
            op,
            req_id: 0,
            stag: 0,
            to: 0,
            add_swap: data,
            add_swap_mask: mask,
            compare,
            compare_mask,
        };
        prop_assert_eq!(req(AtomicOp::FetchAdd, 0, 0).apply(orig), Some(want));
        let mut swapped = orig;
        for i in 0..64 {
            if (mask >> i) & 1 == 1 {
                swapped = (swapped & !(1 << i)) | (data & (1 << i));
            }
        }
        prop_assert_eq!(req(AtomicOp::Swap, 0, 0).apply(orig), Some(swapped));
        let equal = (0..64).all(|i| (cmask >> i) & 1 == 0 || (orig >> i) & 1 == (compare >> i) & 1);
        prop_assert_eq!(
            req(AtomicOp::CmpSwap, compare, cmask).apply(orig),
            equal.then_some(swapped)
        );
        // A comparison of the target with itself always holds.
        prop_assert_eq!(req(AtomicOp::CmpSwap, orig, cmask).apply(orig), Some(swapped));
    }

    /// RFC 7306 bodies: any field values round-trip (the 4-bit AtomicOp
    /// included, unknown ones kept), every truncation is an error, and the
    /// first 28 bits (reserved) never change what is parsed.
    #[test]
    fn rfc7306_bodies_roundtrip_and_truncation(
        op in 0u8..16, ids in any::<(u32, u32)>(), to in any::<u64>(),
        data in any::<(u64, u64, u64, u64)>(), rsvd in any::<u32>(), orig in any::<u64>(),
        imm in any::<[u8; 8]>(),
    ) {
        let r = AtomicRequest {
            op: AtomicOp::from_bits(op),
            req_id: ids.0,
            stag: ids.1,
            to,
            add_swap: data.0,
            add_swap_mask: data.1,
            compare: data.2,
            compare_mask: data.3,
        };
        let mut b = r.to_bytes();
        prop_assert_eq!(AtomicRequest::parse(&b).unwrap(), r);
        for k in 0..b.len() {
            prop_assert!(AtomicRequest::parse(&b[..k]).is_err());
        }
        let w = (rsvd << 4) | u32::from(op);
        b[..4].copy_from_slice(&w.to_be_bytes());
        prop_assert_eq!(AtomicRequest::parse(&b).unwrap(), r);
        let a = AtomicResponse { orig_req_id: ids.0, orig_value: orig };
        let b = a.to_bytes();
        prop_assert_eq!(AtomicResponse::parse(&b).unwrap(), a);
        for k in 0..b.len() {
            prop_assert!(AtomicResponse::parse(&b[..k]).is_err());
        }
        let d = ImmediateData(imm);
        let mut out = [0u8; 8];
        d.emit(&mut out).unwrap();
        prop_assert_eq!(ImmediateData::parse(&out).unwrap(), d);
        for k in 0..8 {
            prop_assert!(ImmediateData::parse(&out[..k]).is_err());
        }
    }

    #[test]
    fn read_request_roundtrip_and_truncation(r in read_request()) {
        let b = r.to_bytes();
        prop_assert_eq!(ReadRequest::parse(&b).unwrap(), r);
        for k in 0..b.len() {
            prop_assert!(ReadRequest::parse(&b[..k]).is_err());
        }
    }

    #[test]
    fn terminate_roundtrip_and_truncation(t in terminate()) {
        let (a, n) = t.to_array();
        prop_assert_eq!(TerminateRepr::parse(&a[..n]).unwrap(), t);
        for k in 0..n {
            prop_assert!(TerminateRepr::parse(&a[..k]).is_err());
        }
    }

    #[test]
    fn mpa_frame_roundtrip_and_truncation(
        reply in any::<bool>(), m in any::<bool>(), c in any::<bool>(), r in any::<bool>(),
        rev in 1u8..=2, enh in proptest::option::of((0u16..0x4000, 0u16..0x4000, any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>())),
        pd in proptest::collection::vec(any::<u8>(), 0..300),
    ) {
        let enhanced = enh.filter(|_| rev == 2).map(|(ird, ord, p, z, w, rd)| EnhancedParams {
            ird, ord, peer_to_peer: p, rtr_zero_len_fpdu: z, rtr_write: w, rtr_read: rd,
        });
        let f = MpaFrameRepr {
            kind: if reply { FrameKind::Reply } else { FrameKind::Request },
            flags: MpaFlags::new(m, c, r, false),
            rev,
            enhanced,
            ulp_data: &pd,
        };
        let v = f.to_vec().unwrap();
        let (mut back, len) = MpaFrameRepr::parse_bytes(&v).unwrap();
        prop_assert_eq!(len, v.len());
        back.flags = MpaFlags(back.flags.0 & !MpaFlags::ENHANCED);
        prop_assert_eq!(back, f);
        for k in 0..v.len() {
            prop_assert!(MpaFrameRepr::parse_bytes(&v[..k]).is_err());
        }
    }

    #[test]
    fn framer_deframer_any_cut(
        crc in any::<bool>(), markers in any::<bool>(),
        ulpdus in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1500), 1..12),
        cuts in proptest::collection::vec(1usize..700, 1..20),
    ) {
        let mut f = Framer::new(crc, markers);
        let mut stream = Vec::new();
        for u in &ulpdus {
            f.emit(&[u], &mut stream).unwrap();
        }
        #[derive(Default)]
        struct Got(Vec<Vec<u8>>, usize);
        impl UlpduSink for Got {
            fn segment_begin(&mut self, _l: u16, h: &[u8]) { self.0.push(h.to_vec()); }
            fn segment_data(&mut self, d: &[u8]) { if let Some(l) = self.0.last_mut() { l.extend_from_slice(d) } }
            fn segment_end(&mut self) { self.1 += 1; }
        }
        let mut d = Deframer::new(crc, markers);
        let mut g = Got::default();
        let mut at = 0;
        let mut i = 0;
        while at < stream.len() {
            let n = cuts[i % cuts.len()].min(stream.len() - at);
            d.feed(&stream[at..at + n], &mut g).unwrap();
            at += n;
            i += 1;
        }
        prop_assert_eq!(g.1, ulpdus.len());
        prop_assert_eq!(&g.0, &ulpdus);
        prop_assert_eq!(d.position(), f.position());
    }
}
