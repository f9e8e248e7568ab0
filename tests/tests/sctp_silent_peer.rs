//! A peer that completes the SCTP handshake with a listening stack (a
//! valid COOKIE-ECHO) and then goes silent holds one of the SCTP host's
//! association slots (`SctpHostConfig::max_assocs`, which our own
//! connects share) and a place in the listener's backlog until the
//! request timeout (`SetupTimeouts::request`), and no longer: the
//! association is then aborted. It used to be shut down gracefully, and
//! a SHUTDOWN nobody answers is retransmitted with back-off up to
//! Association.Max.Retrans times (RFC 9260 §9.2): about six minutes per
//! association, so a peer opening `backlog` associations every request
//! timeout kept thousands of slots. A peer that sends its Session
//! Initiate first and then goes silent is let go the close timeout after
//! its request was refused. Virtual time, no threads.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::stack::{Output, StackConfig};
use iwarp_proto::mem::MemoryTable;
use iwarp_tests::raw_sctp::{ulp, RawSctpPeer};
use sctp_lite::wire::chunk_type;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x74, 1]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 8, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 8, 0, 2);
const PORT: u16 = 7000;
/// Virtual time per step: 1 ms.
const TICK: u64 = 1_000_000;
/// Steps per second.
const SEC: usize = 1_000;

/// A stack at `MAC_A`/`IP_A` listening on `PORT` with `timeouts`, and
/// the peer at `IP_B`.
fn listening_peer(timeouts: SetupTimeouts) -> RawSctpPeer {
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    RawSctpPeer::listening(cfg, mem, PORT, ulp(pd, None, timeouts), IP_B, 2, TICK)
}

fn associations(p: &RawSctpPeer) -> usize {
    p.stack.sctp().map_or(0, |s| s.host().assoc_count())
}

#[test]
fn a_silent_peers_association_ends_at_the_request_timeout() {
    let timeouts = SetupTimeouts::default();
    assert_eq!(timeouts.request, 5_000_000_000);
    let mut p = listening_peer(timeouts);
    let i = p.open_connected(40_000, 10 * SEC);
    // The COOKIE-ACK is in: from now on the peer says nothing.
    p.assocs[i].silent = true;
    let up = p.now();
    assert_eq!(associations(&p), 1);
    p.run(4 * SEC);
    assert_eq!(associations(&p), 1, "held until the request timeout");
    assert!(
        p.run_until(2 * SEC, |p| associations(p) == 0),
        "still held {} ms after the association came up; the stack sent it chunks {:?}",
        (p.now() - up) / TICK,
        p.assocs[i].chunk_types
    );
    // Ended with one ABORT, no SHUTDOWN, and never offered to the
    // application; the connection is freed once the stack has seen the
    // association's end (a round later).
    p.run(10);
    let sent = &p.assocs[i].chunk_types;
    assert_eq!(sent.last(), Some(&chunk_type::ABORT), "{sent:?}");
    assert!(!sent.contains(&chunk_type::SHUTDOWN), "{sent:?}");
    assert!(!p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Accepted { .. })));
    assert_eq!(p.stack.sctp().map(|s| s.connections()), Some(0));
}

/// The same peer one step further: it sends its Session Initiate, then
/// nothing. The application never answers; at the decision timeout the
/// stack rejects the request and closes, and the Reject and the SHUTDOWN
/// go unanswered. The association is gone `SetupTimeouts::close` after
/// that close began (SCTP ABORT), not after the retransmissions run out.
#[test]
fn a_peer_silent_after_its_initiate_is_let_go_at_the_close_timeout() {
    let timeouts = SetupTimeouts::default();
    assert_eq!(
        (timeouts.decision, timeouts.close),
        (10_000_000_000, 5_000_000_000)
    );
    let mut p = listening_peer(timeouts);
    let i = p.open_connected(40_000, 10 * SEC);
    let initiate = iwarp_control::sctp::initiate(4, 4, b"").unwrap();
    p.assocs[i].ddp.initiate(0, &initiate).unwrap();
    assert!(
        p.run_until(10 * SEC, |p| p
            .outputs
            .iter()
            .any(|o| matches!(o, Output::Accepted { .. }))),
        "request seen"
    );
    // The stack has the Initiate (the application its request): the peer
    // takes nothing more and says nothing more.
    p.assocs[i].silent = true;
    let asked = p.now();
    p.run(14 * SEC);
    assert_eq!(associations(&p), 1, "held until decision + close");
    let gone = p.run_until(900 * SEC, |p| associations(p) == 0);
    let after = (p.now() - asked) / TICK;
    assert!(
        gone && after <= 16 * SEC as u64,
        "held {after} ms after the request; the stack sent it chunks {:?}",
        p.assocs[i].chunk_types
    );
    assert_eq!(
        p.assocs[i].chunk_types.last(),
        Some(&chunk_type::ABORT),
        "{:?}",
        p.assocs[i].chunk_types
    );
}
