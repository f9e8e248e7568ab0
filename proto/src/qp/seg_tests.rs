//! The QP over the segment lower layer (DDP over SCTP, RFC 5043): whole
//! DDP Segments out of [`Qp::poll_segment`], whole segments with their
//! DDP-SSN into [`Qp::receive_segment`], in any order.

use super::llp::{LowerLayer, SegmentConfig};
use super::*;
use crate::mem::{Access, MemoryTable, PdId, STag};
use proptest::prelude::*;

fn cfg(pd: PdId, mulpdu: u16) -> QpConfig {
    QpConfig {
        pd,
        ird: 4,
        ord: 4,
        mulpdu,
        crc: true,
        markers_tx: true,
        markers_rx: true,
        sq_depth: 64,
        rq_depth: 64,
    }
}

struct End {
    mem: MemoryTable,
    pd: PdId,
    qp: Qp,
    /// DDP-SSN of the next segment this end sends.
    tx_ssn: u16,
}

impl End {
    fn new(mulpdu: u16) -> End {
        Self::with(mulpdu, SegmentConfig::rfc5043(mulpdu))
    }
    fn with(mulpdu: u16, s: SegmentConfig) -> End {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        End {
            qp: Qp::with_lower(cfg(pd, mulpdu), None, LowerLayer::Segments(s)),
            mem,
            pd,
            tx_ssn: 1,
        }
    }
    fn reg(&mut self, buf: Vec<u8>, access: Access) -> STag {
        self.mem.register(self.pd, buf, access, 0).unwrap()
    }
    /// Every segment this end has to send, numbered.
    fn segments(&mut self) -> Vec<(u16, Vec<u8>)> {
        let mut v = Vec::new();
        loop {
            let mut out = Vec::new();
            let Some(n) = self.qp.poll_segment(&self.mem, &mut out) else {
                break;
            };
            assert_eq!(n, out.len());
            assert!(n <= usize::from(self.qp.config().mulpdu));
            v.push((self.tx_ssn, out));
            self.tx_ssn = self.tx_ssn.wrapping_add(1);
        }
        v
    }
    fn read(&self, stag: STag, len: usize) -> Vec<u8> {
        self.mem.snapshot(stag).unwrap()[..len].to_vec()
    }
}

fn comps(q: &mut Qp) -> Vec<Completion> {
    core::iter::from_fn(|| q.poll_completion()).collect()
}

fn events(q: &mut Qp) -> Vec<QpEvent> {
    core::iter::from_fn(|| q.poll_event()).collect()
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

fn sge(stag: STag, len: u32) -> Sge {
    Sge { stag, to: 0, len }
}

/// Deliver `segs` to `to` in the order `order` gives (indices into `segs`).
fn deliver(to: &mut End, segs: &[(u16, Vec<u8>)], order: &[usize]) {
    for &i in order {
        let (ssn, s) = &segs[i];
        to.qp.receive_segment(*ssn, s, &mut to.mem);
    }
}

/// Move segments both ways until both are idle; each batch is delivered
/// reversed when `reverse`.
fn pump(a: &mut End, b: &mut End, reverse: bool) {
    for _ in 0..10_000 {
        let sa = a.segments();
        let sb = b.segments();
        if sa.is_empty() && sb.is_empty() {
            return;
        }
        let oa: Vec<usize> = if reverse {
            (0..sa.len()).rev().collect()
        } else {
            (0..sa.len()).collect()
        };
        let ob: Vec<usize> = if reverse {
            (0..sb.len()).rev().collect()
        } else {
            (0..sb.len()).collect()
        };
        deliver(b, &sa, &oa);
        deliver(a, &sb, &ob);
    }
    panic!("no quiescence");
}

#[test]
fn send_goes_out_as_one_bare_segment() {
    let mut a = End::new(1000);
    let src = a.reg(b"abcd".to_vec(), Access::LOCAL_READ);
    a.qp.post_send(
        &a.mem,
        WorkRequest::Send {
            wr_id: 7,
            signaled: true,
            local: sge(src, 4).into(),
            solicited: false,
            invalidate: None,
        },
    )
    .unwrap();
    let segs = a.segments();
    assert_eq!(segs.len(), 1);
    // RFC 5041 §4.3 untagged header, no MPA length, PAD or CRC.
    #[rustfmt::skip]
    let want: &[u8] = &[
        0x41, 0x43,             // L, DV 1; RV 1, opcode Send
        0, 0, 0, 0,             // Invalidate STag
        0, 0, 0, 0,             // QN 0
        0, 0, 0, 1,             // MSN 1
        0, 0, 0, 0,             // MO 0
        b'a', b'b', b'c', b'd',
    ];
    assert_eq!(segs[0], (1, want.to_vec()));
    // RFC 5040 §5.5 rule 14: complete once handed to the LLP.
    let c = comps(&mut a.qp);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (7, WcStatus::Success));
    assert_eq!(a.qp.mpa_error(), None);
}

#[test]
fn literal_send_segment_is_delivered() {
    let mut b = End::new(1000);
    let dst = b.reg(vec![0; 16], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 9, sge(dst, 16)).unwrap();
    #[rustfmt::skip]
    let seg: &[u8] = &[
        0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0,
        1, 2, 3,
    ];
    b.qp.receive_segment(1, seg, &mut b.mem);
    let c = comps(&mut b.qp);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
        (9, WcOpcode::Recv, WcStatus::Success, 3)
    );
    assert_eq!(b.read(dst, 4), vec![1, 2, 3, 0]);
}

#[test]
fn reversed_segments_are_placed_and_delivered_in_ddp_ssn_order() {
    // A Write of 3 segments, then a Send of 3 segments, delivered last
    // segment first: nothing completes until the first arrives, and then
    // the Send is delivered after the Write was placed (RFC 5040 §5.5).
    let mut a = End::new(100);
    let mut b = End::new(100);
    let wdata = pattern(200, 1);
    let sdata = pattern(180, 2);
    let wsrc = a.reg(wdata.clone(), Access::LOCAL_READ);
    let ssrc = a.reg(sdata.clone(), Access::LOCAL_READ);
    let wdst = b.reg(vec![0; 200], Access::ALL);
    let rdst = b.reg(vec![0; 180], Access::LOCAL_WRITE);
    b.qp.post_recv(&b.mem, 1, sge(rdst, 180)).unwrap();
    a.qp.post_send(
        &a.mem,
        WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: sge(wsrc, 200).into(),
            remote_stag: wdst,
            remote_to: 0,
        },
    )
    .unwrap();
    a.qp.post_send(
        &a.mem,
        WorkRequest::Send {
            wr_id: 2,
            signaled: true,
            local: sge(ssrc, 180).into(),
            solicited: true,
            invalidate: None,
        },
    )
    .unwrap();
    let segs = a.segments();
    assert_eq!(segs.len(), 6); // 200 / (100 - 14) -> 3; 180 / (100 - 18) -> 3
    let order: Vec<usize> = (0..6).rev().collect();
    deliver(&mut b, &segs, &order[..5]);
    assert!(comps(&mut b.qp).is_empty());
    assert_eq!(
        b.read(wdst, 200),
        vec![0; 200],
        "placement waits for the gap"
    );
    assert_eq!(b.qp.segments_held().0, 5);
    deliver(&mut b, &segs, &order[5..]);
    assert_eq!(b.read(wdst, 200), wdata);
    assert_eq!(b.read(rdst, 180), sdata);
    let c = comps(&mut b.qp);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].status, c[0].byte_len, c[0].solicited),
        (1, WcStatus::Success, 180, true)
    );
    assert_eq!(b.qp.segments_held(), (0, 0));
    assert_eq!(b.qp.segment_stats().unwrap().held, 5);
    assert_eq!(b.qp.state(), QpState::Rts);
}

#[test]
fn read_response_out_of_order_completes_the_read() {
    let mut a = End::new(64);
    let mut b = End::new(64);
    let data = pattern(300, 3);
    let src = b.reg(data.clone(), Access::ALL);
    let sink = a.reg(vec![0; 300], Access::LOCAL_WRITE);
    a.qp.post_send(
        &a.mem,
        WorkRequest::Read {
            wr_id: 5,
            signaled: true,
            local: sge(sink, 300).into(),
            remote_stag: src,
            remote_to: 0,
        },
    )
    .unwrap();
    pump(&mut a, &mut b, true);
    assert_eq!(a.read(sink, 300), data);
    let c = comps(&mut a.qp);
    assert_eq!(c.len(), 1);
    assert_eq!(
        (c[0].wr_id, c[0].opcode, c[0].status, c[0].byte_len),
        (5, WcOpcode::Read, WcStatus::Success, 300)
    );
    assert!(a.qp.segment_stats().unwrap().held >= 4);
}

/// The Terminate `b` sent and `a` received, after a pump.
fn terminate_between(a: &mut End, b: &mut End) -> TerminateRepr {
    let segs = b.segments();
    let ev = events(&mut b.qp);
    let sent = ev
        .iter()
        .find_map(|e| match e {
            QpEvent::TerminateSent(t) => Some(*t),
            _ => None,
        })
        .expect("Terminate sent");
    let all: Vec<usize> = (0..segs.len()).collect();
    deliver(a, &segs, &all);
    let got = events(&mut a.qp)
        .into_iter()
        .find_map(|e| match e {
            QpEvent::TerminateReceived(t) => Some(t),
            _ => None,
        })
        .expect("Terminate received");
    assert_eq!(got, sent);
    assert_eq!(a.qp.state(), QpState::Error);
    assert_eq!(b.qp.state(), QpState::Error);
    got
}

#[test]
fn duplicate_ddp_ssn_terminates_the_stream() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    let dst = b.reg(vec![0; 64], Access::ALL);
    let w = |to: u8| {
        let mut s = vec![0xc1, 0x40]; // T, L, DV 1; RV 1, opcode Write
        s.extend_from_slice(&dst.0.to_be_bytes());
        s.extend_from_slice(&u64::from(to).to_be_bytes());
        s.extend_from_slice(&[0xaa; 4]);
        s
    };
    b.qp.receive_segment(3, &w(8), &mut b.mem);
    b.qp.receive_segment(3, &w(16), &mut b.mem);
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::RDMAP_CATASTROPHIC_STREAM);
    assert_eq!(t.ddp_header, None);
    // The held segment was never placed.
    assert_eq!(b.read(dst, 64), vec![0; 64]);
    // Nothing more is placed, even the segment that would now be in order.
    b.qp.receive_segment(1, &w(0), &mut b.mem);
    assert_eq!(b.read(dst, 64), vec![0; 64]);
}

#[test]
fn ddp_ssn_outside_the_window_terminates_before_anything_is_held() {
    let mut a = End::new(200);
    let mut b = End::with(
        200,
        SegmentConfig {
            first_ssn: 1,
            window: 16,
            max_held: 1 << 16,
        },
    );
    b.qp.receive_segment(17, &[0x41, 0x43], &mut b.mem);
    assert_eq!(b.qp.segments_held(), (0, 0));
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::RDMAP_CATASTROPHIC_STREAM);
}

#[test]
fn held_octets_are_bounded() {
    let mut a = End::new(200);
    let mut b = End::with(
        200,
        SegmentConfig {
            first_ssn: 1,
            window: 100,
            max_held: 100,
        },
    );
    b.qp.receive_segment(2, &[0u8; 60], &mut b.mem);
    assert_eq!(b.qp.segments_held(), (1, 60));
    b.qp.receive_segment(3, &[0u8; 60], &mut b.mem);
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::RDMAP_CATASTROPHIC_STREAM);
    assert_eq!(b.qp.segments_held(), (0, 0), "dropped once in error");
}

#[test]
fn empty_and_truncated_segments_terminate() {
    for seg in [&[][..], &[0x41, 0x43, 0, 0][..], &[0xc0][..]] {
        let mut a = End::new(200);
        let mut b = End::new(200);
        b.qp.receive_segment(1, seg, &mut b.mem);
        let t = terminate_between(&mut a, &mut b);
        assert_eq!(t.code, TermCode::RDMAP_CATASTROPHIC_STREAM, "{seg:?}");
    }
}

#[test]
fn error_in_a_held_segment_comes_after_the_earlier_ones() {
    // DDP-SSN 2 names an STag that does not exist; it arrives first and
    // is held; DDP-SSN 1, a good Write, is placed before 2 is refused.
    let mut a = End::new(200);
    let mut b = End::new(200);
    let dst = b.reg(vec![0; 8], Access::ALL);
    let w = |stag: u32| {
        let mut s = vec![0xc1, 0x40];
        s.extend_from_slice(&stag.to_be_bytes());
        s.extend_from_slice(&0u64.to_be_bytes());
        s.extend_from_slice(&[7; 8]);
        s
    };
    b.qp.receive_segment(2, &w(dst.0 ^ 0x100), &mut b.mem);
    assert_eq!(b.qp.state(), QpState::Rts);
    b.qp.receive_segment(1, &w(dst.0), &mut b.mem);
    assert_eq!(b.read(dst, 8), vec![7; 8]);
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::DDP_T_INVALID_STAG);
    match t.ddp_header {
        Some(DdpHeader::Tagged(h)) => assert_eq!(h.stag, dst.0 ^ 0x100),
        other => panic!("{other:?}"),
    }
}

#[test]
fn wrong_entry_point_is_a_local_error() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    b.qp.receive(&[0, 0, 0, 0], &mut b.mem);
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::RDMAP_LOCAL_CATASTROPHIC);
    // And the MPA QP refuses segments the same way; it emits no segments.
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut q = Qp::new(cfg(pd, 200));
    let mut out = Vec::new();
    assert_eq!(q.poll_segment(&mem, &mut out), None);
    q.receive_segment(1, &[0x41, 0x43], &mut mem);
    assert_eq!(q.state(), QpState::Terminating);
    assert!(q.poll_transmit(&mem, &mut out, usize::MAX, usize::MAX) > 0);
}

#[test]
fn peer_terminate_over_segments() {
    let mut a = End::new(200);
    let mut b = End::new(200);
    b.qp.terminate(TermCode::RDMAP_CATASTROPHIC_GLOBAL);
    let t = terminate_between(&mut a, &mut b);
    assert_eq!(t.code, TermCode::RDMAP_CATASTROPHIC_GLOBAL);
    assert_eq!(comps(&mut a.qp), vec![]);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Sends, Writes and Reads both ways, every batch delivered in a random
    /// permutation: all data lands, every completion in posting order.
    #[test]
    fn any_permutation_gives_the_in_order_result(
        seed in any::<u64>(),
        lens in proptest::collection::vec(0u32..400, 1..8),
        mulpdu in 60u16..300,
    ) {
        let mut a = End::new(mulpdu);
        let mut b = End::new(mulpdu);
        let mut rng = seed | 1;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let total: u32 = lens.iter().sum();
        let src_a = a.reg(pattern(total as usize, 9), Access::ALL);
        let dst_b = b.reg(vec![0; total as usize], Access::ALL);
        let recv_b = b.reg(vec![0; total as usize], Access::LOCAL_WRITE);
        let sink_a = a.reg(vec![0; total as usize], Access::LOCAL_WRITE);
        let src_b = b.reg(pattern(total as usize, 77), Access::ALL);
        let mut off = 0u32;
        for (i, &l) in lens.iter().enumerate() {
            let s = Sge { stag: src_a, to: u64::from(off), len: l };
            let wr = match i % 3 {
                0 => {
                    b.qp.post_recv(&b.mem, i as u64, Sge { stag: recv_b, to: u64::from(off), len: l }).unwrap();
                    WorkRequest::Send { wr_id: i as u64, signaled: true, local: s.into(), solicited: false, invalidate: None }
                }
                1 => WorkRequest::Write { wr_id: i as u64, signaled: true, local: s.into(), remote_stag: dst_b, remote_to: u64::from(off) },
                _ => WorkRequest::Read { wr_id: i as u64, signaled: true, local: Sge { stag: sink_a, to: u64::from(off), len: l }.into(), remote_stag: src_b, remote_to: u64::from(off) },
            };
            a.qp.post_send(&a.mem, wr).unwrap();
            off += l;
        }
        for _ in 0..1000 {
            let sa = a.segments();
            let sb = b.segments();
            if sa.is_empty() && sb.is_empty() { break; }
            for (segs, to) in [(sa, &mut b), (sb, &mut a)] {
                let mut order: Vec<usize> = (0..segs.len()).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, (next() % (i as u64 + 1)) as usize);
                }
                deliver(to, &segs, &order);
            }
        }
        let want_a = pattern(total as usize, 9);
        let want_b = pattern(total as usize, 77);
        let ca = comps(&mut a.qp);
        let cb = comps(&mut b.qp);
        prop_assert_eq!(ca.iter().map(|c| c.wr_id).collect::<Vec<_>>(), (0..lens.len() as u64).collect::<Vec<_>>());
        prop_assert!(ca.iter().all(|c| c.status == WcStatus::Success));
        prop_assert!(cb.iter().all(|c| c.status == WcStatus::Success));
        let mut off = 0usize;
        let wb = b.read(dst_b, total as usize);
        let rb = b.read(recv_b, total as usize);
        let sa = a.read(sink_a, total as usize);
        for (i, &l) in lens.iter().enumerate() {
            let r = off..off + l as usize;
            match i % 3 {
                0 => prop_assert_eq!(&rb[r.clone()], &want_a[r]),
                1 => prop_assert_eq!(&wb[r.clone()], &want_a[r]),
                _ => prop_assert_eq!(&sa[r.clone()], &want_b[r]),
            }
            off += l as usize;
        }
        prop_assert_eq!(a.qp.state(), QpState::Rts);
        prop_assert_eq!(b.qp.state(), QpState::Rts);
    }
}

/// RFC 7306 over DDP/SCTP segments (the same QP code): an RDMA Write with
/// Immediate and both atomics, segments delivered in reverse.
#[test]
fn rfc7306_over_segments() {
    let mut a = End::new(1000);
    let mut b = End::new(1000);
    let src = a.reg(pattern(100, 3), Access::LOCAL_READ);
    let res = a.reg(vec![0; 16], Access::LOCAL_WRITE);
    let dst = b.reg(vec![0; 100], Access::REMOTE_WRITE);
    let mut init = 40u64.to_ne_bytes().to_vec();
    init.extend(7u64.to_ne_bytes());
    let t = b.reg(init, Access::REMOTE_ATOMIC);
    b.qp.post_recv(&b.mem, 5, SgList::default()).unwrap();
    for wr in [
        WorkRequest::WriteImm {
            wr_id: 1,
            signaled: true,
            local: sge(src, 100).into(),
            remote_stag: dst,
            remote_to: 0,
            imm: 77,
            solicited: false,
        },
        WorkRequest::FetchAdd {
            wr_id: 2,
            signaled: true,
            local: Sge {
                stag: res,
                to: 0,
                len: 8,
            },
            remote_stag: t,
            remote_to: 0,
            add: 2,
        },
        WorkRequest::CmpSwap {
            wr_id: 3,
            signaled: true,
            local: Sge {
                stag: res,
                to: 8,
                len: 8,
            },
            remote_stag: t,
            remote_to: 8,
            compare: 7,
            swap: 9,
        },
    ] {
        a.qp.post_send(&a.mem, wr).unwrap();
    }
    pump(&mut a, &mut b, true);
    assert_eq!(b.read(dst, 100), pattern(100, 3));
    let rc = comps(&mut b.qp);
    assert_eq!(
        rc.iter()
            .map(|c| (c.wr_id, c.opcode, c.imm))
            .collect::<Vec<_>>(),
        vec![(5, WcOpcode::RecvRdmaWithImm, Some(77))]
    );
    let img = b.read(t, 16);
    assert_eq!(img[..8], 42u64.to_ne_bytes());
    assert_eq!(img[8..], 9u64.to_ne_bytes());
    let r = a.read(res, 16);
    assert_eq!(r[..8], 40u64.to_ne_bytes());
    assert_eq!(r[8..], 7u64.to_ne_bytes());
    assert_eq!(
        comps(&mut a.qp)
            .iter()
            .map(|c| (c.wr_id, c.opcode, c.status))
            .collect::<Vec<_>>(),
        vec![
            (1, WcOpcode::WriteImm, WcStatus::Success),
            (2, WcOpcode::FetchAdd, WcStatus::Success),
            (3, WcOpcode::CmpSwap, WcStatus::Success)
        ]
    );
}

/// Over DDP/SCTP, `poll_record` describes bare DDP Segments
/// (RFC 5043 §5.2.2: no MPA length, PAD or CRC): what a record's fill
/// writes is what `poll_segment` builds for the same request, octet for
/// octet, and a Send described by reference completes only when its
/// segment is reported acknowledged (RFC 5040 §5.5 rule 9).
#[test]
fn described_segments_are_the_built_ones_and_complete_on_acknowledgement() {
    let data = pattern(2500, 3);
    let post = |e: &mut End| {
        let src = e.reg(data.clone(), Access::LOCAL_READ);
        e.qp.post_send(
            &e.mem,
            WorkRequest::Send {
                wr_id: 5,
                signaled: true,
                local: sge(src, 2500).into(),
                solicited: false,
                invalidate: None,
            },
        )
        .unwrap();
    };
    let mut built = End::new(1000);
    post(&mut built);
    let want: Vec<Vec<u8>> = built.segments().into_iter().map(|(_, s)| s).collect();
    assert_eq!(want.len(), 3, "2500 octets in segments of at most 1000");
    let mut described = End::new(1000);
    post(&mut described);
    assert!(described.qp.can_describe());
    let mut txq = crate::txq::TxQueue::new(0);
    let mut ends = Vec::new();
    while described
        .qp
        .poll_record(&described.mem, usize::MAX, 0, &mut txq)
    {
        ends.push(txq.end());
    }
    assert_eq!(ends.len(), 3);
    let mut start = 0;
    for (end, w) in ends.iter().zip(&want) {
        let mut got = vec![0u8; (end - start) as usize];
        assert!(txq.fill(&described.mem, start, &mut got));
        assert_eq!(&got, w);
        start = *end;
    }
    // By reference: no completion until acknowledged.
    assert!(comps(&mut described.qp).is_empty());
    let qp = &mut described.qp;
    txq.release(ends[2], &mut |seq| qp.fpdu_acked(seq));
    let c = comps(&mut described.qp);
    assert_eq!(c.len(), 1);
    assert_eq!((c[0].wr_id, c[0].status), (5, WcStatus::Success));
}

/// Over DDP/SCTP, `poll_segment` writes a small Send or Write straight
/// into `out` (`Qp::small_next`): octet for octet the bare DDP Segment
/// the general path describes and fills for it (RFC 5043 §5.2.2), MSNs
/// in order, each request complete once handed over.
#[test]
fn a_small_segment_is_the_one_the_general_path_builds() {
    let post = |e: &mut End| {
        let a = e.reg(pattern(100, 5), Access::LOCAL_READ);
        let wrs = [
            WorkRequest::Write {
                wr_id: 1,
                signaled: true,
                local: sge(a, 64).into(),
                remote_stag: STag(0x0a0b_0c0d),
                remote_to: 7,
            },
            WorkRequest::SendInline {
                wr_id: 2,
                signaled: true,
                data: InlineData::new(b"xyz").unwrap(),
                solicited: true,
                invalidate: None,
            },
            WorkRequest::Send {
                wr_id: 3,
                signaled: true,
                local: sge(a, 10).into(),
                solicited: false,
                invalidate: Some(STag(0x0500)),
            },
            WorkRequest::WriteInline {
                wr_id: 4,
                signaled: true,
                data: InlineData::new(b"12345").unwrap(),
                remote_stag: STag(0x0a0b_0c0d),
                remote_to: 70,
            },
        ];
        for wr in wrs {
            e.qp.post_send(&e.mem, wr).unwrap();
        }
    };
    let mut built = End::new(1000);
    post(&mut built);
    let got: Vec<Vec<u8>> = built.segments().into_iter().map(|(_, s)| s).collect();
    assert_eq!(
        comps(&mut built.qp)
            .iter()
            .map(|c| c.wr_id)
            .collect::<Vec<_>>(),
        vec![1, 2, 3, 4]
    );
    let mut described = End::new(1000);
    post(&mut described);
    let mut txq = crate::txq::TxQueue::new(0);
    let mut want = Vec::new();
    let mut start = 0;
    while described
        .qp
        .poll_record(&described.mem, usize::MAX, 0, &mut txq)
    {
        let mut w = vec![0u8; (txq.end() - start) as usize];
        assert!(txq.fill(&described.mem, start, &mut w));
        want.push(w);
        start = txq.end();
    }
    assert_eq!(got, want);
    // The Write, by the octet: tagged, last; RDMA Write; STag; TO; payload.
    assert_eq!(&got[0][..2], &[0xc1, 0x40]);
    assert_eq!(&got[0][2..6], &[0x0a, 0x0b, 0x0c, 0x0d]);
    assert_eq!(&got[0][6..14], &7u64.to_be_bytes());
    assert_eq!(&got[0][14..], &pattern(100, 5)[..64]);
}
