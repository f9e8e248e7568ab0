//! A post made with the handle of a connection the stack has freed is
//! refused on the connection's CQ however many connections were freed
//! after it: the stack keeps a freed connection's CQs while a handle (the
//! API's `Qp`: a clone of its `QpCqs`) holds them, beyond the newest
//! `GONE_KEPT` (1024) it keeps anyway. It used to keep only those 1024,
//! and a post to an older one was dropped: no completion anywhere, and an
//! application waiting for it waited forever. Over SCTP with a raw peer
//! in virtual time (the connections that churn after ours are
//! associations that never send their Initiate, aborted at the request
//! timeout), and over TCP with a raw peer (connections reset after their
//! handshake); `stack::tests` pins the keeping and the refusal of a post
//! to an id the stack forgot (TCP's and SCTP's alike).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;

use ddp_sctp::DdpEvent;
use iwarp_control::MpaConfig;
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{
    Command, CqEntry, CqRing, Output, QpCqs, Stack, StackConfig, Transport, Ulp,
};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::qp::{DisconnectCause, PostError, Sge};
use iwarp_tests::raw_sctp::{ulp, RawSctpPeer};
use iwarp_tests::raw_tcp::RawPeer;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x77, 1]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 6, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 6, 0, 2);
const PORT: u16 = 7000;
/// Virtual time per step: 1 ms.
const TICK: u64 = 1_000_000;
/// Connections freed after ours: more than the stack keeps anyway.
const CHURN: usize = 1200;

#[test]
fn a_post_to_a_long_freed_sctp_connection_is_refused_on_its_cq() {
    let mut cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    cfg.backlog = 4096;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; 4096], Access::LOCAL_WRITE, 0)
        .unwrap();
    // The listener's ring (the churning connections') and ours.
    let listener_cq = Arc::new(CqRing::new(16));
    let timeouts = SetupTimeouts {
        request: 20 * TICK,
        ..SetupTimeouts::default()
    };
    let ulp = ulp(pd, Some(&listener_cq), timeouts);
    let mut p = RawSctpPeer::listening(cfg, mem, PORT, ulp, IP_B, 2, TICK);

    // Ours: accepted with its own CQs, a clone of which we keep (as the
    // API's `Qp` does), then closed gracefully with the peer.
    let ring = Arc::new(CqRing::new(16));
    let handle = QpCqs::one(ring.clone());
    let i = p.open_connected(40_000, 10_000);
    let initiate = iwarp_control::sctp::initiate(4, 4, b"").unwrap();
    p.assocs[i].ddp.initiate(0, &initiate).unwrap();
    let mut sock = None;
    assert!(p.run_until(10_000, |p| {
        sock = p.outputs.iter().find_map(|o| match o {
            Output::Accepted { sock, .. } => Some(*sock),
            _ => None,
        });
        sock.is_some()
    }));
    let sock = sock.unwrap();
    let now = p.now();
    p.stack.handle_command(
        Command::Accept {
            sock,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: Some(handle.clone()),
            pd: None,
        },
        now,
    );
    assert!(p.run_until(10_000, |p| p.assocs[i]
        .events
        .iter()
        .any(|e| matches!(e, DdpEvent::SessionAccepted { stream: 0, .. }))));
    let now = p.now();
    p.stack.handle_command(Command::Close(sock), now);
    assert!(
        p.run_until(10_000, |p| p.stack.sctp_connections() == 0),
        "ours closed and freed"
    );
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock)));

    // CHURN connections freed after ours, in batches within max_assocs.
    let mut port = 41_000;
    for _ in 0..CHURN / 200 {
        for _ in 0..200 {
            p.open(port);
            port += 1;
        }
        assert!(
            p.run_until(10_000, |p| p.stack.sctp().unwrap().host().assoc_count()
                == 0
                && p.assocs.iter().skip(1).all(|a| a
                    .events
                    .iter()
                    .any(|e| matches!(e, DdpEvent::Closed(_))))),
            "a batch aborted at the request timeout"
        );
        p.run(5);
    }
    assert_eq!(p.stack.sctp_connections(), 0);

    // A receive posted with our old handle: refused on our ring, with
    // why the connection ended.
    let now = p.now();
    let sge = Sge {
        stag,
        to: 0,
        len: 64,
    };
    p.stack.handle_command(
        Command::Iwarp(sock, HostCommand::PostRecv(77, sge.into())),
        now,
    );
    p.run(2);
    match ring.ring.pop() {
        Some((s, CqEntry::Refused { wr_id, error })) => assert_eq!(
            (s, wr_id, error),
            (
                sock,
                77,
                PostError::Disconnected(DisconnectCause::LocalClose)
            )
        ),
        other => panic!(
            "no refusal on our CQ: {other:?}; outputs for it: {:?}",
            p.outputs
                .iter()
                .filter(|o| matches!(o, Output::Iwarp(s, _) if *s == sock))
                .collect::<Vec<_>>()
        ),
    }
    drop(handle);
}

#[test]
fn a_post_to_a_long_freed_tcp_connection_is_refused_on_its_cq() {
    const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
    let mut cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    cfg.backlog = 4096;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; 4096], Access::LOCAL_WRITE, 0)
        .unwrap();
    let mut stack = Stack::new(cfg, mem);
    let listen = Command::Listen {
        transport: Transport::Tcp,
        port: PORT,
        ulp: Ulp::Iwarp {
            mpa: MpaConfig::default(),
            params: StreamParams {
                pd,
                emss: 1460,
                sq_depth: 16,
                rq_depth: 16,
            },
            manual: true,
            cq: None,
            srq: None,
        },
    };
    stack.handle_command(listen, 0);
    let mut p = RawPeer::new(stack, IP_A, PORT, IP_B, 2, TICK);

    // Ours: its Request accepted with CQs we keep a clone of, then reset
    // by the peer: freed.
    let ring = Arc::new(CqRing::new(16));
    let handle = QpCqs::one(ring.clone());
    let i = p.open(40_000);
    p.run(20);
    p.send_at(i, 0, REQUEST);
    let mut sock = None;
    for _ in 0..100 {
        p.step();
        sock = p.outputs.iter().find_map(|o| match o {
            Output::Accepted { sock, .. } => Some(*sock),
            _ => None,
        });
        if sock.is_some() {
            break;
        }
    }
    let sock = sock.expect("request seen");
    p.run(5);
    let now = p.now();
    p.stack.handle_command(
        Command::Accept {
            sock,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: Some(handle.clone()),
            pd: None,
        },
        now,
    );
    p.run(20);
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Cm(s, CmEvent::Established(_)) if *s == sock)));
    p.reset(i);
    p.run(20);
    assert_eq!(p.stack.connections(), 0, "ours reset and freed");

    // CHURN connections freed after ours: handshake, then RST.
    let mut port = 41_000;
    for _ in 0..CHURN / 200 {
        let first = p.conns.len();
        for _ in 0..200 {
            p.open(port);
            port += 1;
        }
        p.run(20);
        for c in first..p.conns.len() {
            p.reset(c);
        }
        p.run(20);
        assert_eq!(p.stack.connections(), 0, "a batch reset and freed");
    }

    let now = p.now();
    let sge = Sge {
        stag,
        to: 0,
        len: 64,
    };
    p.stack.handle_command(
        Command::Iwarp(sock, HostCommand::PostRecv(77, sge.into())),
        now,
    );
    p.run(2);
    match ring.ring.pop() {
        Some((s, CqEntry::Refused { wr_id, error })) => {
            assert_eq!((s, wr_id), (sock, 77));
            assert!(matches!(error, PostError::Disconnected(_)), "{error:?}");
        }
        other => panic!(
            "no refusal on our CQ: {other:?}; outputs for it: {:?}",
            p.outputs
                .iter()
                .filter(|o| matches!(o, Output::Iwarp(s, _) if *s == sock))
                .collect::<Vec<_>>()
        ),
    }
    drop(handle);
}
