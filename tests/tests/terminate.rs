//! One test per receive-side Terminate condition (RFC 5040 §7, RFC 5041 §7,
//! RFC 5044 §8). A hostile peer (`a`) sends the offending segment; the victim
//! (`b`) must answer with a Terminate whose layer, type, code and optional
//! headers are right, move the stream to error, place nothing anywhere, and
//! drop everything that follows.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::MpaConfig;
use iwarp_proto::mem::{Access, STag};
use iwarp_proto::qp::{QpEvent, QpState, Sge, WcStatus, WorkRequest};
use iwarp_proto::wire::ddp::{
    DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader, UntaggedHeader,
};
use iwarp_proto::wire::{ReadRequest, TermCode, TerminateRepr};
use iwarp_sim::{Sim, SimConfig};
use iwarp_tests::{ctrl, snapshot, Hostile};

struct Victim {
    s: Sim,
    w: STag,
    r: STag,
    wo: STag,
    foreign: STag,
    rbuf: STag,
    all: Vec<STag>,
    hostile: Hostile,
}

fn victim(crc: bool, markers_to_b: bool, post_recv: bool, ird: u16) -> Victim {
    let cfg = SimConfig {
        seed: 99,
        initiator: MpaConfig {
            crc,
            ird: 8,
            ord: 8,
            ..Default::default()
        },
        responder: MpaConfig {
            markers_rx: markers_to_b,
            ird,
            ord: 8,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    s.connect().unwrap();
    let w =
        s.b.register_buf(vec![0x11; 4096], Access::REMOTE_WRITE, 0x10000);
    let r = s.b.register_buf(vec![0x22; 4096], Access::REMOTE_READ, 0);
    let wo = s.b.register_buf(vec![0x33; 256], Access::REMOTE_WRITE, 0);
    let other_pd = s.b.mem.alloc_pd();
    let foreign =
        s.b.mem
            .register(other_pd, vec![0x44; 256], Access::ALL, 0)
            .unwrap();
    let rbuf = s.b.register_buf(vec![0x55; 64], Access::LOCAL_WRITE, 0);
    if post_recv {
        s.b.post_recv(
            1,
            Sge {
                stag: rbuf,
                to: 0,
                len: 64,
            },
        )
        .unwrap();
    }
    let all = vec![w, r, wo, foreign, rbuf];
    Victim {
        s,
        w,
        r,
        wo,
        foreign,
        rbuf,
        all,
        hostile: Hostile::new(crc, markers_to_b),
    }
}

/// Inject, run, and return the Terminate `a` received, after checking that b
/// reported the same one, moved to error, and changed no memory.
fn provoke(v: &mut Victim, bytes: &[u8]) -> TerminateRepr {
    let before = snapshot(&v.s.b.mem, &v.all);
    v.s.inject(true, bytes);
    v.s.run_until_idle(100_000).unwrap();
    let after = snapshot(&v.s.b.mem, &v.all);
    assert_eq!(before, after, "memory changed");
    let got = v.s.a.events.iter().find_map(|e| match e {
        QpEvent::TerminateReceived(t) => Some(*t),
        _ => None,
    });
    let got =
        got.unwrap_or_else(|| panic!("no Terminate reached the peer; b events {:?}", v.s.b.events));
    let local = v.s.b.events.iter().find_map(|e| match e {
        QpEvent::LocalError(t) => Some(*t),
        _ => None,
    });
    assert_eq!(local, Some(got));
    assert!(v.s.b.events.contains(&QpEvent::TerminateSent(got)));
    assert_eq!(v.s.b.qp().state(), QpState::Error);
    // RFC 5041 §7.1: later segments are silently dropped.
    let (d, r) = ctrl(true, Opcode::Write);
    let late = v.hostile.tagged(d, r, v.w.0, 0x10000, &[0xee; 16]);
    v.s.inject(true, &late);
    v.s.run_until_idle(10_000).unwrap();
    assert_eq!(
        snapshot(&v.s.b.mem, &v.all),
        before,
        "a segment after the error was placed"
    );
    got
}

fn tagged_hdr(ddp: u8, rdmap: u8, stag: u32, to: u64) -> DdpHeader {
    DdpHeader::Tagged(TaggedHeader {
        ddp: DdpControl(ddp),
        rdmap: RdmapControl(rdmap),
        stag,
        to,
    })
}

fn untagged_hdr(ddp: u8, rdmap: u8, inval: u32, qn: u32, msn: u32, mo: u32) -> DdpHeader {
    DdpHeader::Untagged(UntaggedHeader {
        ddp: DdpControl(ddp),
        rdmap: RdmapControl(rdmap),
        inval_stag: inval,
        qn,
        msn,
        mo,
    })
}

fn expect_ddp(t: &TerminateRepr, code: TermCode, hdr: DdpHeader, seg_len: usize) {
    assert_eq!(t.code, code, "{}", t.code);
    assert!(t.flag_m);
    assert_eq!(t.ddp_segment_len, Some(seg_len as u16));
    assert_eq!(t.ddp_header, Some(hdr));
    assert_eq!(t.rdma_header, None);
}

fn tagged_case(code: TermCode, pick: impl Fn(&Victim) -> (u8, u8, u32, u64), len: usize) {
    let mut v = victim(true, false, true, 4);
    let (d, r, stag, to) = pick(&v);
    let bytes = v.hostile.tagged(d, r, stag, to, &vec![0xab; len]);
    let t = provoke(&mut v, &bytes);
    expect_ddp(&t, code, tagged_hdr(d, r, stag, to), 14 + len);
}

#[test]
fn ddp_tagged_invalid_stag() {
    let (d, r) = ctrl(true, Opcode::Write);
    tagged_case(TermCode::DDP_T_INVALID_STAG, |_| (d, r, 0x00ab_cd00, 0), 10);
}

#[test]
fn ddp_tagged_invalid_stag_for_missing_remote_write_right() {
    // RFC 5041 has no access code; like Linux siw we send Invalid STag.
    let (d, r) = ctrl(true, Opcode::Write);
    tagged_case(TermCode::DDP_T_INVALID_STAG, |v| (d, r, v.r.0, 0), 10);
}

#[test]
fn ddp_tagged_base_or_bounds() {
    let (d, r) = ctrl(true, Opcode::Write);
    tagged_case(
        TermCode::DDP_T_BASE_BOUNDS,
        |v| (d, r, v.w.0, 0x10000 + 4090),
        10,
    );
    tagged_case(TermCode::DDP_T_BASE_BOUNDS, |v| (d, r, v.w.0, 0xffff), 10);
}

#[test]
fn ddp_tagged_stag_not_associated() {
    let (d, r) = ctrl(true, Opcode::Write);
    tagged_case(
        TermCode::DDP_T_STAG_NOT_ASSOC,
        |v| (d, r, v.foreign.0, 0),
        10,
    );
}

#[test]
fn ddp_tagged_to_wrap() {
    let (d, r) = ctrl(true, Opcode::Write);
    tagged_case(TermCode::DDP_T_TO_WRAP, |v| (d, r, v.w.0, u64::MAX - 3), 10);
}

#[test]
fn ddp_tagged_invalid_version() {
    let (_, r) = ctrl(true, Opcode::Write);
    tagged_case(
        TermCode::DDP_T_INVALID_VERSION,
        |v| (0xc2, r, v.wo.0, 0),
        10,
    );
}

fn untagged_case(code: TermCode, post_recv: bool, hdr: (u8, u8, u32, u32, u32, u32), len: usize) {
    let mut v = victim(false, false, post_recv, 4);
    let (d, r, inval, qn, msn, mo) = hdr;
    let bytes = v
        .hostile
        .untagged(d, r, inval, qn, msn, mo, &vec![0xcd; len]);
    let t = provoke(&mut v, &bytes);
    expect_ddp(&t, code, untagged_hdr(d, r, inval, qn, msn, mo), 18 + len);
    if post_recv {
        // The posted buffer is flushed, not completed (a Send too long for
        // it completes it with a length error).
        let too_long = [TermCode::DDP_U_INVALID_MO, TermCode::DDP_U_TOO_LONG].contains(&code);
        let want = if too_long {
            WcStatus::LocalLength
        } else {
            WcStatus::Flushed
        };
        assert!(v.s.b.completions.iter().all(|c| c.status == want));
        let _ = v.rbuf;
    }
}

#[test]
fn ddp_untagged_invalid_qn() {
    let (d, r) = ctrl(false, Opcode::Send);
    // QN 0-2 are RFC 5040's, QN 3 RFC 7306's (Atomic Response).
    untagged_case(TermCode::DDP_U_INVALID_QN, true, (d, r, 0, 4, 1, 0), 8);
}

#[test]
fn ddp_untagged_no_buffer() {
    let (d, r) = ctrl(false, Opcode::Send);
    untagged_case(TermCode::DDP_U_NO_BUFFER, false, (d, r, 0, 0, 1, 0), 8);
    // RFC 5040 §5.3: a zero-length Send consumes a buffer too.
    untagged_case(TermCode::DDP_U_NO_BUFFER, false, (d, r, 0, 0, 1, 0), 0);
}

#[test]
fn ddp_untagged_no_buffer_beyond_ird() {
    let mut v = victim(false, false, true, 1);
    let (d, r) = ctrl(false, Opcode::ReadRequest);
    let rr = ReadRequest {
        sink_stag: 0x100,
        sink_to: 0,
        size: 16,
        src_stag: v.r.0,
        src_to: 0,
    }
    .to_bytes();
    let mut bytes = v.hostile.untagged(d, r, 0, 1, 1, 0, &rr);
    bytes.extend(v.hostile.untagged(d, r, 0, 1, 2, 0, &rr));
    let t = provoke(&mut v, &bytes);
    expect_ddp(
        &t,
        TermCode::DDP_U_NO_BUFFER,
        untagged_hdr(d, r, 0, 1, 2, 0),
        18 + 28,
    );
}

#[test]
fn ddp_untagged_msn_range() {
    let (d, r) = ctrl(false, Opcode::Send);
    untagged_case(TermCode::DDP_U_MSN_RANGE, true, (d, r, 0, 0, 5, 0), 8);
    untagged_case(TermCode::DDP_U_MSN_RANGE, true, (d, r, 0, 0, 0, 0), 8);
}

#[test]
fn ddp_untagged_invalid_mo() {
    let (d, r) = ctrl(false, Opcode::Send);
    untagged_case(TermCode::DDP_U_INVALID_MO, true, (d, r, 0, 0, 1, 65), 1);
}

#[test]
fn ddp_untagged_message_too_long() {
    let (d, r) = ctrl(false, Opcode::Send);
    untagged_case(TermCode::DDP_U_TOO_LONG, true, (d, r, 0, 0, 1, 0), 65);
    untagged_case(TermCode::DDP_U_TOO_LONG, true, (d, r, 0, 0, 1, 60), 5);
}

#[test]
fn ddp_untagged_invalid_version() {
    let (_, r) = ctrl(false, Opcode::Send);
    untagged_case(
        TermCode::DDP_U_INVALID_VERSION,
        true,
        (0x40, r, 0, 0, 1, 0),
        8,
    );
}

#[test]
fn rdmap_invalid_version() {
    let (d, _) = ctrl(false, Opcode::Send);
    untagged_case(
        TermCode::RDMAP_INVALID_VERSION,
        true,
        (d, 0x83, 0, 0, 1, 0),
        8,
    );
    let (d, _) = ctrl(true, Opcode::Write);
    tagged_case(
        TermCode::RDMAP_INVALID_VERSION,
        |v| (d, 0x00, v.w.0, 0x10000),
        8,
    );
}

#[test]
fn rdmap_unexpected_opcode() {
    let (d, _) = ctrl(false, Opcode::Send);
    // reserved opcode 1100b on QN 0 (1000b-1011b are RFC 7306's)
    untagged_case(
        TermCode::RDMAP_UNEXPECTED_OPCODE,
        true,
        (d, 0x4c, 0, 0, 1, 0),
        8,
    );
    // a Send on QN 1
    let (_, r) = ctrl(false, Opcode::Send);
    untagged_case(
        TermCode::RDMAP_UNEXPECTED_OPCODE,
        true,
        (d, r, 0, 1, 1, 0),
        8,
    );
    // a Send with T = 1
    let (dt, _) = ctrl(true, Opcode::Write);
    tagged_case(
        TermCode::RDMAP_UNEXPECTED_OPCODE,
        |v| (dt, r, v.w.0, 0x10000),
        8,
    );
    // a Read Response with no Read outstanding
    let (_, rr) = ctrl(true, Opcode::ReadResponse);
    tagged_case(
        TermCode::RDMAP_UNEXPECTED_OPCODE,
        |v| (dt, rr, v.w.0, 0x10000),
        8,
    );
}

fn read_case(code: TermCode, pick: impl Fn(&Victim) -> (u32, u64, u32)) {
    let mut v = victim(true, true, true, 4);
    let (src_stag, src_to, size) = pick(&v);
    let req = ReadRequest {
        sink_stag: 0x0102_0300,
        sink_to: 0x40,
        size,
        src_stag,
        src_to,
    };
    let (d, r) = ctrl(false, Opcode::ReadRequest);
    let bytes = v.hostile.untagged(d, r, 0, 1, 1, 0, &req.to_bytes());
    let t = provoke(&mut v, &bytes);
    assert_eq!(t.code, code, "{}", t.code);
    // RFC 5040 §7.1 case 3: length, DDP header and RDMA header all present.
    assert!(t.flag_m);
    assert_eq!(t.ddp_segment_len, Some(46));
    assert_eq!(t.ddp_header, Some(untagged_hdr(d, r, 0, 1, 1, 0)));
    assert_eq!(t.rdma_header, Some(req));
}

#[test]
fn rdmap_read_invalid_stag() {
    read_case(TermCode::RDMAP_INVALID_STAG, |_| (0x0077_7700, 0, 16));
}

#[test]
fn rdmap_read_base_or_bounds() {
    read_case(TermCode::RDMAP_BASE_BOUNDS, |v| (v.r.0, 4000, 100));
}

#[test]
fn rdmap_read_access_rights() {
    read_case(TermCode::RDMAP_ACCESS, |v| (v.w.0, 0x10000, 16));
}

#[test]
fn rdmap_read_stag_not_associated() {
    read_case(TermCode::RDMAP_STAG_NOT_ASSOC, |v| (v.foreign.0, 0, 16));
}

#[test]
fn rdmap_read_to_wrap() {
    read_case(TermCode::RDMAP_TO_WRAP, |v| (v.r.0, u64::MAX - 1, 16));
}

#[test]
fn rdmap_zero_length_read_is_not_validated() {
    let mut v = victim(false, false, true, 4);
    let req = ReadRequest {
        sink_stag: 1,
        sink_to: 0,
        size: 0,
        src_stag: 0xdead_beef,
        src_to: u64::MAX,
    };
    let (d, r) = ctrl(false, Opcode::ReadRequest);
    let bytes = v.hostile.untagged(d, r, 0, 1, 1, 0, &req.to_bytes());
    v.s.inject(true, &bytes);
    v.s.run_until_idle(10_000).unwrap();
    // b answered with a zero-length Read Response to sink STag 1 / TO 0 ...
    assert!(
        !v.s.b
            .events
            .iter()
            .any(|e| matches!(e, QpEvent::LocalError(_))),
        "{:?}",
        v.s.b.events
    );
    // ... which a, whose QP never asked for it, refuses as an unexpected opcode,
    // quoting the header b sent.
    let t = v.s.a.events.iter().find_map(|e| match e {
        QpEvent::LocalError(t) => Some(*t),
        _ => None,
    });
    let t = t.unwrap();
    assert_eq!(t.code, TermCode::RDMAP_UNEXPECTED_OPCODE);
    assert_eq!(t.ddp_header, Some(tagged_hdr(0xc1, 0x42, 1, 0)));
    assert_eq!(t.ddp_segment_len, Some(14));
}

fn invalidate_case(code: TermCode, pick: impl Fn(&Victim) -> u32) {
    let mut v = victim(false, false, true, 4);
    let stag = pick(&v);
    let (d, r) = ctrl(false, Opcode::SendInvalidate);
    let bytes = v.hostile.untagged(d, r, stag, 0, 1, 0, b"inv");
    // The Send's payload lands in the posted buffer before the invalidation is
    // checked at delivery; that buffer is the target region here.
    let rbuf = v.rbuf;
    v.all.retain(|s| *s != rbuf);
    let t = provoke(&mut v, &bytes);
    assert_eq!(t.code, code, "{}", t.code);
    assert_eq!(t.ddp_header, Some(untagged_hdr(d, r, stag, 0, 1, 0)));
    assert_eq!(t.ddp_segment_len, Some(21));
    assert!(v.s.b.mem.snapshot(rbuf).unwrap()[3..]
        .iter()
        .all(|b| *b == 0x55));
    // No successful receive completion became visible.
    assert!(v
        .s
        .b
        .completions
        .iter()
        .all(|c| c.status == WcStatus::Flushed));
}

#[test]
fn rdmap_stag_cannot_be_invalidated() {
    invalidate_case(TermCode::RDMAP_CANNOT_INVALIDATE, |v| v.foreign.0);
    assert_eq!(TermCode::RDMAP_CANNOT_INVALIDATE.ecode, 0x09);
}

#[test]
fn rdmap_invalidate_of_unknown_stag() {
    invalidate_case(TermCode::RDMAP_INVALID_STAG, |_| 0x0055_5500);
}

#[test]
fn rdmap_truncated_ddp_header_is_catastrophic_for_the_stream() {
    let mut v = victim(false, false, true, 4);
    let bytes = v.hostile.raw(&[0xc1, 0x40, 0, 0, 1]);
    let t = provoke(&mut v, &bytes);
    assert_eq!(t, TerminateRepr::bare(TermCode::RDMAP_CATASTROPHIC_STREAM));
}

#[test]
fn rdmap_short_read_request_body() {
    let mut v = victim(false, false, true, 4);
    let (d, r) = ctrl(false, Opcode::ReadRequest);
    let bytes = v.hostile.untagged(d, r, 0, 1, 1, 0, &[0u8; 20]);
    let t = provoke(&mut v, &bytes);
    expect_ddp(
        &t,
        TermCode::RDMAP_OP_UNSPECIFIED,
        untagged_hdr(d, r, 0, 1, 1, 0),
        38,
    );
}

#[test]
fn mpa_crc_error_is_llp_0x02_without_headers() {
    let mut v = victim(true, false, true, 4);
    let (d, r) = ctrl(true, Opcode::Write);
    let mut bytes = v.hostile.tagged(d, r, v.w.0, 0x10000, &[0x99; 100]);
    bytes[50] ^= 0x04; // inside the payload
    let w = v.w;
    // The payload of a segment with a bad CRC may already be placed inside its
    // (validated) target before the CRC arrives; everything else is untouched.
    v.all.retain(|s| *s != w);
    let t = provoke(&mut v, &bytes);
    assert_eq!(t, TerminateRepr::bare(TermCode::MPA_CRC));
    let wb = v.s.b.mem.snapshot(w).unwrap();
    assert!(wb[100..].iter().all(|b| *b == 0x11));
}

#[test]
fn mpa_marker_mismatch_is_llp_0x03() {
    let mut v = victim(false, true, true, 4);
    let (d, r) = ctrl(true, Opcode::Write);
    let mut bytes = v.hostile.tagged(d, r, v.w.0, 0x10000, &[0x99; 700]);
    // marker at stream offset 512 carries FPDUPTR 508
    assert_eq!(&bytes[512..516], &[0, 0, 0x01, 0xfc]);
    bytes[515] = 0xf8;
    let w = v.w;
    v.all.retain(|s| *s != w);
    let t = provoke(&mut v, &bytes);
    assert_eq!(t, TerminateRepr::bare(TermCode::MPA_MARKER));
    assert!(v.s.b.mem.snapshot(w).unwrap()[700..]
        .iter()
        .all(|b| *b == 0x11));
}

#[test]
fn local_build_error_sends_rdmap_local_catastrophic() {
    let mut v = victim(false, false, true, 4);
    let src = v.s.a.register(64, Access::LOCAL_READ);
    v.s.a
        .post_send(WorkRequest::Write {
            wr_id: 7,
            signaled: true,
            local: Sge {
                stag: src,
                to: 0,
                len: 64,
            }
            .into(),
            remote_stag: v.w,
            remote_to: 0x10000,
        })
        .unwrap();
    // The source goes away before the message is built (RFC 5040 §7.1 case 1).
    v.s.a.mem.deregister(src).unwrap();
    v.s.run_until_idle(10_000).unwrap();
    let t = v.s.b.events.iter().find_map(|e| match e {
        QpEvent::TerminateReceived(t) => Some(*t),
        _ => None,
    });
    assert_eq!(
        t,
        Some(TerminateRepr::bare(TermCode::RDMAP_LOCAL_CATASTROPHIC))
    );
    assert!(matches!(
        v.s.a.completions[0].status,
        WcStatus::LocalProtection(_)
    ));
    assert!(v.s.b.mem.snapshot(v.w).unwrap().iter().all(|b| *b == 0x11));
}

#[test]
fn llp_lost_flushes_everything_without_a_terminate() {
    // RFC 5044 LLP code 0x01 (connection lost) cannot travel on the lost
    // connection; the stream flushes and reports it locally.
    let mut v = victim(false, false, true, 4);
    let src = v.s.a.register(64, Access::LOCAL_READ);
    v.s.a
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: src,
                to: 0,
                len: 64,
            }
            .into(),
            remote_stag: v.w,
            remote_to: 0x10000,
        })
        .unwrap();
    v.s.b.qp().llp_lost();
    v.s.a.qp().llp_lost();
    v.s.step();
    assert_eq!(v.s.a.completions.len(), 1);
    assert_eq!(v.s.a.completions[0].status, WcStatus::Flushed);
    assert_eq!(v.s.b.completions[0].status, WcStatus::Flushed);
    assert_eq!(
        TermCode::MPA_CONN_LOST.describe(),
        "MPA: TCP connection closed, terminated or lost"
    );
}

#[test]
fn received_terminate_is_surfaced_decoded() {
    let mut v = victim(false, false, true, 4);
    let (d, r) = ctrl(false, Opcode::Terminate);
    let body = TerminateRepr {
        code: TermCode::DDP_T_BASE_BOUNDS,
        flag_m: true,
        ddp_segment_len: Some(24),
        ddp_header: Some(tagged_hdr(0xc1, 0x40, 0x1234, 0x99)),
        rdma_header: None,
        reserved: 0,
    };
    let (b, n) = body.to_array();
    let bytes = v.hostile.untagged(d, r, 0, 2, 1, 0, &b[..n]);
    v.s.inject(true, &bytes);
    v.s.run_until_idle(10_000).unwrap();
    assert_eq!(v.s.b.events, vec![QpEvent::TerminateReceived(body)]);
    assert_eq!(v.s.b.qp().state(), QpState::Error);
    // b does not answer a Terminate with a Terminate.
    assert!(v.s.a.events.is_empty());
}

#[test]
fn ddp_local_catastrophic_when_the_posted_buffer_vanished() {
    let mut v = victim(false, false, true, 4);
    // The application deregisters the buffer it had posted for receive.
    let rbuf = v.rbuf;
    v.s.b.mem.deregister(rbuf).unwrap();
    v.all.retain(|s| *s != rbuf);
    let (d, r) = ctrl(false, Opcode::Send);
    let bytes = v.hostile.untagged(d, r, 0, 0, 1, 0, b"data");
    let t = provoke(&mut v, &bytes);
    // RFC 5040 §4.8 figure 10: local catastrophic errors carry no headers.
    assert_eq!(t, TerminateRepr::bare(TermCode::DDP_LOCAL_CATASTROPHIC));
}
