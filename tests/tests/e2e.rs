//! End-to-end operations through the simulator: every opcode, sizes from 0 B
//! to 1 MiB, CRC on and off, markers off, on and one-way.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::{MpaConfig, RtrOffer};
use iwarp_proto::mem::{Access, STag};
use iwarp_proto::qp::{Completion, QpEvent, QpState, Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_sim::{Sim, SimConfig};

fn sim(seed: u64, crc: bool, m_a: bool, m_b: bool) -> Sim {
    let cfg = SimConfig {
        seed,
        initiator: MpaConfig {
            crc,
            markers_rx: m_a,
            ..Default::default()
        },
        responder: MpaConfig {
            markers_rx: m_b,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    s.connect().expect("connect");
    assert!(s.connected());
    s
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(salt))
        .collect()
}

#[test]
fn negotiation_reaches_both_queue_pairs() {
    let s = sim(1, true, true, false);
    let na = s.a.conn.negotiated().unwrap().clone();
    let nb = s.b.conn.negotiated().unwrap().clone();
    assert!(na.crc && nb.crc);
    assert!(na.markers_rx && !na.markers_tx);
    assert!(nb.markers_tx && !nb.markers_rx);
}

#[test]
fn write_then_send_signals_delivery() {
    for (crc, ma, mb) in [
        (false, false, false),
        (true, false, false),
        (true, true, true),
        (false, true, false),
        (true, false, true),
    ] {
        let mut s = sim(7, crc, ma, mb);
        let data = pattern(100_000, 3);
        let src = s.a.register_buf(data.clone(), Access::LOCAL_READ, 0);
        let dst =
            s.b.register_buf(vec![0; 100_016], Access::REMOTE_WRITE, 0x1000_0000);
        let msg = s.a.register_buf(b"done".to_vec(), Access::LOCAL_READ, 0);
        let rbuf = s.b.register(64, Access::LOCAL_WRITE);
        s.b.post_recv(
            9,
            Sge {
                stag: rbuf,
                to: 0,
                len: 64,
            },
        )
        .unwrap();
        s.a.post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: src,
                to: 0,
                len: data.len() as u32,
            }
            .into(),
            remote_stag: dst,
            remote_to: 0x1000_0008,
        })
        .unwrap();
        s.a.post_send(WorkRequest::Send {
            wr_id: 2,
            signaled: true,
            local: Sge {
                stag: msg,
                to: 0,
                len: 4,
            }
            .into(),
            solicited: true,
            invalidate: None,
        })
        .unwrap();
        s.run_until_idle(100_000).unwrap();
        let got = s.b.mem.snapshot(dst).unwrap();
        assert_eq!(&got[8..100_008], &data[..], "crc {crc} markers {ma}/{mb}");
        assert!(got[..8].iter().all(|b| *b == 0) && got[100_008..].iter().all(|b| *b == 0));
        assert_eq!(
            s.a.completions
                .iter()
                .map(|c| (c.wr_id, c.opcode, c.status))
                .collect::<Vec<_>>(),
            vec![
                (1, WcOpcode::Write, WcStatus::Success),
                (2, WcOpcode::Send, WcStatus::Success)
            ]
        );
        let r: &Completion = &s.b.completions[0];
        assert_eq!(
            (r.wr_id, r.opcode, r.status, r.byte_len, r.solicited),
            (9, WcOpcode::Recv, WcStatus::Success, 4, true)
        );
        assert_eq!(&s.b.mem.snapshot(rbuf).unwrap()[..4], b"done");
        assert!(s.a.events.is_empty() && s.b.events.is_empty());
    }
}

#[test]
fn rdma_read_of_one_mebibyte_with_markers() {
    let mut s = sim(11, true, true, true);
    let data = pattern(1 << 20, 9);
    let src =
        s.b.register_buf(data.clone(), Access::REMOTE_READ, 0xdead_0000);
    let sink = s.a.register((1 << 20) + 10, Access::LOCAL_WRITE);
    s.a.post_send(WorkRequest::Read {
        wr_id: 5,
        signaled: true,
        local: Sge {
            stag: sink,
            to: 10,
            len: 1 << 20,
        }
        .into(),
        remote_stag: src,
        remote_to: 0xdead_0000,
    })
    .unwrap();
    s.run_until_idle(1_000_000).unwrap();
    assert_eq!(&s.a.mem.snapshot(sink).unwrap()[10..], &data[..]);
    assert_eq!(s.a.completions.len(), 1);
    assert_eq!(
        (s.a.completions[0].opcode, s.a.completions[0].status),
        (WcOpcode::Read, WcStatus::Success)
    );
    assert_eq!(s.a.completions[0].byte_len, 1 << 20);
}

#[test]
fn zero_length_operations() {
    let mut s = sim(3, true, false, false);
    let rbuf = s.b.register(8, Access::LOCAL_WRITE);
    s.b.post_recv(
        1,
        Sge {
            stag: rbuf,
            to: 0,
            len: 8,
        },
    )
    .unwrap();
    s.a.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: Sge::EMPTY.into(),
        remote_stag: STag(0x1234),
        remote_to: 99,
    })
    .unwrap();
    s.a.post_send(WorkRequest::Read {
        wr_id: 2,
        signaled: true,
        local: Sge::EMPTY.into(),
        remote_stag: STag(0x777),
        remote_to: 5,
    })
    .unwrap();
    s.a.post_send(WorkRequest::Send {
        wr_id: 3,
        signaled: true,
        local: Sge::EMPTY.into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    s.run_until_idle(10_000).unwrap();
    // RFC 5041 §5.2: STag/TO of zero-length tagged messages are not checked; a
    // zero-length Send still consumes a buffer (RFC 5040 §5.3).
    let ids: Vec<_> =
        s.a.completions
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect();
    assert_eq!(
        ids,
        vec![
            (1, WcStatus::Success),
            (2, WcStatus::Success),
            (3, WcStatus::Success)
        ]
    );
    assert_eq!(s.b.completions.len(), 1);
    assert_eq!(s.b.completions[0].byte_len, 0);
    assert!(s.b.events.is_empty());
}

#[test]
fn send_with_invalidate_invalidates_before_completion() {
    let mut s = sim(5, false, false, false);
    let victim = s.b.register(64, Access::REMOTE_WRITE | Access::REMOTE_READ);
    let rbuf = s.b.register(16, Access::LOCAL_WRITE);
    s.b.post_recv(
        1,
        Sge {
            stag: rbuf,
            to: 0,
            len: 16,
        },
    )
    .unwrap();
    s.b.post_recv(
        2,
        Sge {
            stag: rbuf,
            to: 0,
            len: 16,
        },
    )
    .unwrap();
    let m = s.a.register_buf(b"bye".to_vec(), Access::LOCAL_READ, 0);
    s.a.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: Sge {
            stag: m,
            to: 0,
            len: 3,
        }
        .into(),
        solicited: true,
        invalidate: Some(victim),
    })
    .unwrap();
    s.run_until_idle(10_000).unwrap();
    let c = s.b.completions[0];
    assert_eq!(
        (c.status, c.solicited, c.invalidated),
        (WcStatus::Success, true, Some(victim))
    );
    assert!(!s.b.mem.is_valid(victim));
    // A later RDMA Write to the invalidated STag is refused with DDP tagged "invalid STag".
    let src = s.a.register(8, Access::LOCAL_READ);
    s.a.post_send(WorkRequest::Write {
        wr_id: 2,
        signaled: true,
        local: Sge {
            stag: src,
            to: 0,
            len: 8,
        }
        .into(),
        remote_stag: victim,
        remote_to: 0,
    })
    .unwrap();
    s.run_until_idle(10_000).unwrap();
    let t = s.a.events.iter().find_map(|e| match e {
        QpEvent::TerminateReceived(t) => Some(*t),
        _ => None,
    });
    assert_eq!(
        t.unwrap().code,
        iwarp_proto::wire::TermCode::DDP_T_INVALID_STAG
    );
    assert_eq!(s.b.qp().state(), QpState::Error);
    assert_eq!(s.a.qp().state(), QpState::Error);
    // The pending receive of b was flushed.
    assert!(s
        .b
        .completions
        .iter()
        .any(|c| c.wr_id == 2 && c.status == WcStatus::Flushed));
}

#[test]
fn ord_limits_outstanding_reads_and_completions_stay_in_order() {
    let cfg = SimConfig {
        seed: 21,
        initiator: MpaConfig {
            ird: 4,
            ord: 2,
            ..Default::default()
        },
        responder: MpaConfig {
            ird: 2,
            ord: 4,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    s.connect().unwrap();
    assert_eq!(s.a.qp().config().ord, 2);
    let src = s.b.register_buf(pattern(4096, 1), Access::REMOTE_READ, 0);
    let sink = s.a.register(8 * 4096, Access::LOCAL_WRITE);
    let m = s.a.register(16, Access::LOCAL_READ);
    let rb = s.b.register(16 * 8, Access::LOCAL_WRITE);
    for i in 0..8 {
        s.b.post_recv(
            100 + i,
            Sge {
                stag: rb,
                to: 16 * i,
                len: 16,
            },
        )
        .unwrap();
    }
    for i in 0..8u64 {
        s.a.post_send(WorkRequest::Read {
            wr_id: i,
            signaled: true,
            local: Sge {
                stag: sink,
                to: i * 4096,
                len: 4096,
            }
            .into(),
            remote_stag: src,
            remote_to: 0,
        })
        .unwrap();
        s.a.post_send(WorkRequest::Send {
            wr_id: 1000 + i,
            signaled: true,
            local: Sge {
                stag: m,
                to: 0,
                len: 16,
            }
            .into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    }
    let mut max_out = 0;
    for _ in 0..100_000 {
        s.step();
        max_out = max_out.max(s.a.qp().outstanding_reads());
        assert!(s.b.qp().inbound_reads() <= 2);
        if s.idle() {
            break;
        }
    }
    assert!(s.idle());
    assert_eq!(max_out, 2);
    // RFC 5040 §5.5 rule 15: completions in submission order, Reads included.
    let ids: Vec<u64> = s.a.completions.iter().map(|c| c.wr_id).collect();
    let want: Vec<u64> = (0..8).flat_map(|i| [i, 1000 + i]).collect();
    assert_eq!(ids, want);
    for i in 0..8 {
        assert_eq!(
            &s.a.mem.snapshot(sink).unwrap()[i * 4096..(i + 1) * 4096],
            &pattern(4096, 1)[..]
        );
    }
}

#[test]
fn peer_to_peer_rtr_each_kind() {
    for (offer, kind) in [
        (
            RtrOffer {
                zero_length_fpdu: false,
                write: true,
                read: false,
            },
            iwarp_proto::qp::RtrKind::Write,
        ),
        (
            RtrOffer {
                zero_length_fpdu: false,
                write: false,
                read: true,
            },
            iwarp_proto::qp::RtrKind::Read,
        ),
        (
            RtrOffer {
                zero_length_fpdu: true,
                write: false,
                read: false,
            },
            iwarp_proto::qp::RtrKind::ZeroLengthFpdu,
        ),
    ] {
        let cfg = SimConfig {
            seed: 2,
            initiator: MpaConfig {
                peer_to_peer: true,
                rtr: offer,
                ird: 1,
                ord: 1,
                ..Default::default()
            },
            responder: MpaConfig {
                peer_to_peer: true,
                ird: 1,
                ord: 1,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut s = Sim::new(cfg);
        // The responder queues a Send at once; it must wait for the RTR.
        s.run_until_idle(1000).unwrap();
        assert_eq!(s.b.conn.negotiated().unwrap().rtr, Some(kind));
        let m = s.b.register_buf(b"hello".to_vec(), Access::LOCAL_READ, 0);
        let r = s.a.register(8, Access::LOCAL_WRITE);
        s.a.post_recv(
            1,
            Sge {
                stag: r,
                to: 0,
                len: 8,
            },
        )
        .unwrap();
        s.b.post_send(WorkRequest::Send {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: m,
                to: 0,
                len: 5,
            }
            .into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
        s.run_until_idle(1000).unwrap();
        assert_eq!(s.a.completions.len(), 1, "{kind:?}");
        assert!(
            s.a.events.is_empty() && s.b.events.is_empty(),
            "{kind:?}: {:?} {:?}",
            s.a.events,
            s.b.events
        );
    }
}

#[test]
fn responder_holds_fpdus_until_rtr_arrives() {
    let cfg = SimConfig {
        seed: 4,
        initiator: MpaConfig {
            peer_to_peer: true,
            ..Default::default()
        },
        responder: MpaConfig {
            peer_to_peer: true,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    // Deliver the Request to b only (one step moves it across after the latency).
    while !matches!(s.b.conn.state(), iwarp_datapath::ConnState::Rdma(_)) {
        s.step();
    }
    let m = s.b.register_buf(b"x".to_vec(), Access::LOCAL_READ, 0);
    s.b.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: Sge {
            stag: m,
            to: 0,
            len: 1,
        }
        .into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    // Before anything from a arrives in full operation, b sends no FPDU.
    assert_eq!(s.b.qp().stats().fpdus_tx, 0);
}

#[test]
fn mpa_setup_failures_close_without_full_operation() {
    use iwarp_control::SetupFailure;
    use iwarp_datapath::ConnState;
    // A responder that does not send markers rejects a Request with M = 1 (as siw does).
    let cfg = SimConfig {
        initiator: MpaConfig {
            markers_rx: true,
            ..Default::default()
        },
        responder: MpaConfig {
            allow_markers_tx: false,
            ..Default::default()
        },
        ..Default::default()
    };
    let mut s = Sim::new(cfg);
    s.run_until_idle(1000).unwrap();
    assert_eq!(s.a.conn.state(), ConnState::Failed);
    assert_eq!(
        s.a.conn.setup_error().unwrap().reason,
        SetupFailure::Rejected
    );
    assert_eq!(
        s.b.conn.setup_error().unwrap().reason,
        SetupFailure::MarkersRefused
    );
    // Garbage instead of a Request: the responder fails with MPA code 0x04.
    let mut s = Sim::new(SimConfig::default());
    let mut b = iwarp_datapath::Connection::responder(
        MpaConfig::default(),
        iwarp_datapath::StreamParams {
            pd: s.b.pd,
            emss: 1448,
            sq_depth: 8,
            rq_depth: 8,
        },
    );
    b.receive(b"GET / HTTP/1.1\r\nHost: example\r\n\r\n", &mut s.b.mem);
    assert_eq!(b.state(), ConnState::Failed);
    assert_eq!(
        b.setup_error().unwrap().code,
        iwarp_proto::wire::TermCode::MPA_BAD_REQ_REP
    );
    let mut out = Vec::new();
    assert_eq!(
        b.poll_transmit(&s.b.mem, &mut out, 1448, 1),
        0,
        "nothing is sent on a malformed Request"
    );
}
