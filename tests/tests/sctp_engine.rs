//! `iwarp_datapath::over_sctp::SctpHost` — DDP over SCTP (RFC 5043) on
//! Ethernet/IPv4 protocol 132 — between two of our engines, each on its own
//! poll loop:
//!
//! * `sctp_engines_over_memory_link`: over an in-memory frame link
//!   (`MemDevice`), no privileges needed;
//! * `sctp_engines_over_af_xdp_veth`: over AF_XDP (`XdpDevice`) on a veth
//!   pair between two network namespaces made by the test and removed on
//!   drop, failure included. Needs root; prints `SKIP:` otherwise (fails
//!   under `CI`).
//!
//! Both run the same exchange: ARP, the association with the DDP
//! adaptation indication on both sides (`DdpEvent::Connected` is only
//! reported when both sides indicated it, RFC 5043 §7.1), a DDP Stream
//! Session Initiate/Accept, segments both ways with every DDP-SSN and
//! every octet checked, a Terminate, a graceful shutdown.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

mod sctp_util;

use ddp_sctp::{DdpEvent, SessionEnd};
use iwarp_datapath::link::{Faults, FaultyDevice, MemDevice};
use iwarp_datapath::over_sctp::SctpHostStats;
use iwarp_datapath::over_sctp::{SctpCommand, SctpHost, SctpOutput, SCTP_UDP_PORT};
use iwarp_datapath::runtime::LoopHandle;
use sctp_lite::assoc::CloseReason;
use sctp_util::{receive, segment, start, Host};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x5c, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x5c, 0x0b];
const PORT_A: u16 = 40_001;
const PORT_B: u16 = 5_001;
/// Segments A→B and B→A, and their size.
const A_TO_B: usize = 200;
const B_TO_A: usize = 50;

/// The whole exchange between `a` (initiator) and `b` (listener at `ip_b`).
/// `udp`: the peer's UDP encapsulation port, when both run over UDP.
fn exchange(
    a: LoopHandle<SctpHost>,
    b: LoopHandle<SctpHost>,
    ip_b: [u8; 4],
    udp: Option<u16>,
) -> (SctpHostStats, SctpHostStats) {
    let mut a = Host::new(a, "A");
    let mut b = Host::new(b, "B");
    b.post(SctpCommand::Listen { port: PORT_B });
    let ok = b.wait("Listening", |o| match o {
        SctpOutput::Listening { port, ok } if *port == PORT_B => Some(*ok),
        _ => None,
    });
    assert!(ok);
    a.post(SctpCommand::Connect {
        token: 7,
        remote: ip_b,
        port: PORT_B,
        local_port: PORT_A,
        udp_port: udp,
    });
    let ia = a.wait("Opening", |o| match o {
        SctpOutput::Opening { token: 7, result } => Some(result.unwrap()),
        _ => None,
    });
    let ib = b.wait("Accepted", |o| match o {
        SctpOutput::Accepted { assoc, port, .. } => {
            assert_eq!(*port, PORT_A);
            Some(*assoc)
        }
        _ => None,
    });
    // Connected only once both sides indicated adaptation 1 (§7.1): a peer
    // without it is refused with ABORT instead.
    for (h, id) in [(&mut a, ia), (&mut b, ib)] {
        h.wait("Connected", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
            _ => None,
        });
    }

    // DDP Stream Session on stream 0 (§6.2).
    a.post(SctpCommand::Initiate {
        assoc: ia,
        stream: 0,
        private_data: b"iwarp over sctp".to_vec(),
    });
    let pd = b.wait("SessionRequested", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionRequested {
                stream: 0,
                private_data,
            },
        ) if *x == ib => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd, b"iwarp over sctp");
    b.post(SctpCommand::Accept {
        assoc: ib,
        stream: 0,
        private_data: b"ok".to_vec(),
    });
    let pd = a.wait("SessionAccepted", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionAccepted {
                stream: 0,
                private_data,
            },
        ) if *x == ia => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd, b"ok");

    // Segments both ways (PPID 16), every DDP-SSN once with its bytes.
    for i in 0..A_TO_B {
        a.post(SctpCommand::Segment {
            assoc: ia,
            stream: 0,
            segment: segment(0xa, i),
        });
    }
    for i in 0..B_TO_A {
        b.post(SctpCommand::Segment {
            assoc: ib,
            stream: 0,
            segment: segment(0xb, i),
        });
    }
    let at_b = receive(&mut b, ib, A_TO_B);
    let at_a = receive(&mut a, ia, B_TO_A);
    for (got, from, n) in [(&at_b, 0xa, A_TO_B), (&at_a, 0xb, B_TO_A)] {
        assert_eq!(got.len(), n);
        for (i, (ssn, seg)) in got.iter().enumerate() {
            // §5.2.1, §6.1: DDP-SSNs count every chunk of the session in
            // submission order from 0, with no gaps; the Initiate (A) and
            // the Accept (B) took 0.
            assert_eq!(usize::from(*ssn), i + 1);
            assert_eq!(seg, &segment(from, i), "segment {i} from {from:x}");
        }
    }
    for h in [&a, &b] {
        assert!(
            !h.kept.iter().any(|o| matches!(o, SctpOutput::Refused(..))),
            "{}: a command was refused: {:?}",
            h.name,
            h.kept
        );
    }

    // Terminate (PPID 17), then the SCTP shutdown (RFC 9260 §9.2).
    a.post(SctpCommand::Terminate {
        assoc: ia,
        stream: 0,
    });
    b.wait("SessionEnded", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionEnded { stream: 0, why, .. }) if *x == ib => {
            assert_eq!(*why, SessionEnd::PeerTerminated);
            Some(())
        }
        _ => None,
    });
    a.post(SctpCommand::Shutdown(ia));
    for (h, id) in [(&mut a, ia), (&mut b, ib)] {
        let why = h.wait("Closed", |o| match o {
            SctpOutput::Event(x, DdpEvent::Closed(why)) if *x == id => Some(*why),
            _ => None,
        });
        assert_eq!(why, CloseReason::Shutdown, "{}", h.name);
    }
    let (ea, sa) = a.h.stop().unwrap();
    let (eb, sb) = b.h.stop().unwrap();
    assert_eq!(ea.assoc_count(), 0);
    assert_eq!(eb.assoc_count(), 0);
    println!(
        "A: {:?} {} frames out; B: {:?} {} frames out",
        ea.stats(),
        sa.tx_frames,
        eb.stats(),
        sb.tx_frames
    );
    (ea.stats(), eb.stats())
}

#[test]
fn sctp_engines_over_memory_link() {
    let (da, db) = MemDevice::pair(4096);
    let ip_a = [10, 77, 0, 1];
    let ip_b = [10, 77, 0, 2];
    exchange(
        start(MAC_A, ip_a, da, false),
        start(MAC_B, ip_b, db, false),
        ip_b,
        None,
    );
}

#[test]
fn sctp_engines_over_memory_link_in_udp() {
    // RFC 6951: the same exchange with every SCTP packet inside UDP
    // 9899 -> 9899; a frame that is raw SCTP would not reach an
    // association (each keeps its encapsulation for life).
    let (da, db) = MemDevice::pair(4096);
    let ip_a = [10, 77, 1, 1];
    let ip_b = [10, 77, 1, 2];
    exchange(
        start(MAC_A, ip_a, da, true),
        start(MAC_B, ip_b, db, true),
        ip_b,
        Some(SCTP_UDP_PORT),
    );
}

/// The same exchange over a link that loses 5 %, reorders 2 %, duplicates
/// 1 % and flips one bit in 2 % of the frames each way (seeded), raw and
/// in UDP: every segment still arrives once with its bytes, and the
/// associations did retransmit.
#[test]
fn sctp_engines_over_faulty_link() {
    let faults = Faults {
        loss: 50_000,
        reorder: 20_000,
        dup: 10_000,
        corrupt: 20_000,
        ..Faults::default()
    };
    for (udp, seed, net) in [(false, 1, 2), (true, 2, 3)] {
        let (da, db) = MemDevice::pair(4096);
        let da = FaultyDevice::new(da, faults, seed);
        let db = FaultyDevice::new(db, faults, seed ^ 0x5c7b);
        let ip_a = [10, 77, net, 1];
        let ip_b = [10, 77, net, 2];
        let (sa, sb) = exchange(
            start(MAC_A, ip_a, da, udp),
            start(MAC_B, ip_b, db, udp),
            ip_b,
            udp.then_some(SCTP_UDP_PORT),
        );
        // 5 % loss over some 270 frames: P(no retransmission) ~ e^-13.
        assert!(
            sa.closed_retransmits + sb.closed_retransmits > 0,
            "no retransmission under 5 % loss (udp {udp})"
        );
    }
}

#[test]
fn sctp_engines_over_af_xdp_veth() {
    use iwarp_xdp::{in_netns, Config as XdpConfig, XdpDevice};
    use netns_harness::{End, Netns, VethPair};

    if netns_harness::skip_test_without_root() {
        return;
    }
    // Dropped in reverse order of declaration: the veth before the
    // namespaces, each removed by its Drop, on failure too.
    let a = Netns::new("sca").unwrap();
    let b = Netns::new("scb").unwrap();
    let mut veth = VethPair::new("scv").unwrap();
    veth.move_to(End::A, &a).unwrap();
    veth.move_to(End::B, &b).unwrap();
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).unwrap();
        veth.set_up(end).unwrap();
    }
    let id = a.id();
    let ip_a = [10, (id >> 8) as u8, id as u8, 1];
    let ip_b = [10, (id >> 8) as u8, id as u8, 2];
    let open = |ns: &Netns, iface: &str, ip: [u8; 4]| {
        let cfg = XdpConfig::new(iface, ip);
        in_netns(&ns.ns_path(), || XdpDevice::open(&cfg))
            .unwrap()
            .unwrap_or_else(|e| panic!("open {iface}: {e}"))
    };
    let da = open(&a, veth.name(End::A), ip_a);
    let db = open(&b, veth.name(End::B), ip_b);
    let (ma, mb) = (da.mac_address(), db.mac_address());
    exchange(
        start(ma, ip_a, da, false),
        start(mb, ip_b, db, false),
        ip_b,
        None,
    );
}
