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

/// A connection in full operation: the application accepted the
/// request with its CQ, a Send of the peer's and one of ours went
/// through. Then the peer takes nothing more and says nothing more, and
/// our application posts one more Send and closes gracefully. The close
/// cannot complete (the Send's DATA and then the SHUTDOWN go
/// unanswered); the association is aborted `SetupTimeouts::close` after
/// the close began (one ABORT, cause User-Initiated Abort), not after
/// SCTP's retransmissions run out (minutes), and what the application
/// posted completes: the receive it had left flushed, the Send handed to
/// SCTP done. Then the connection is freed.
#[test]
fn a_peer_silent_during_the_close_of_an_operating_connection_is_let_go_at_the_close_timeout() {
    silent_during_the_close(Closer::UsAfterASend);
}

/// The same with nothing unacknowledged when the close begins: the
/// SHUTDOWN goes at once and is never answered (SHUTDOWN-SENT, RFC 9260
/// §9.2); ABORT at the close timeout.
#[test]
fn a_shutdown_nobody_answers_ends_at_the_close_timeout() {
    silent_during_the_close(Closer::Us);
}

/// The peer closes: its SHUTDOWN (RFC 5043 §11.3 needs no session
/// Terminate for it), then silence. Our SHUTDOWN-ACK goes unanswered
/// (SHUTDOWN-ACK-SENT, RFC 9260 §9.2); ABORT at the close timeout.
#[test]
fn a_peer_silent_after_its_shutdown_is_let_go_at_the_close_timeout() {
    silent_during_the_close(Closer::Peer);
}

/// Who closes, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closer {
    /// Our application, after posting a last Send.
    UsAfterASend,
    /// Our application.
    Us,
    /// The peer (SHUTDOWN), before it goes silent.
    Peer,
}

/// See the tests above.
fn silent_during_the_close(closer: Closer) {
    use std::sync::Arc;

    use ddp_sctp::DdpEvent;
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
    use iwarp_datapath::runtime::Engine;
    use iwarp_datapath::stack::{Command, CqEntry, CqRing};
    use iwarp_proto::mem::Access;
    use iwarp_proto::qp::{Sge, WcOpcode, WcStatus, WorkRequest};

    let timeouts = SetupTimeouts::default();
    assert_eq!(timeouts.close, 5_000_000_000);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0x33; 4096], Access::LOCAL_WRITE, 0)
        .unwrap();
    let cq = Arc::new(CqRing::new(64));
    let cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    let mut p = RawSctpPeer::listening(cfg, mem, PORT, ulp(pd, Some(&cq), timeouts), IP_B, 2, TICK);
    let i = p.open_connected(40_000, 10 * SEC);
    let initiate = iwarp_control::sctp::initiate(4, 4, b"").unwrap();
    p.assocs[i].ddp.initiate(0, &initiate).unwrap();
    let mut sock = None;
    assert!(
        p.run_until(10 * SEC, |p| {
            sock = p.outputs.iter().find_map(|o| match o {
                Output::Accepted { sock, .. } => Some(*sock),
                _ => None,
            });
            sock.is_some()
        }),
        "request seen"
    );
    let sock = sock.unwrap();
    let now = p.now();
    p.stack.handle_command(
        Command::Accept {
            sock,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: Some(cq.clone().into()),
            pd: None,
        },
        now,
    );
    let sge = |to: u64, len: u32| Sge { stag, to, len };
    for (wr_id, to) in [(1, 0), (2, 1024)] {
        p.stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostRecv(wr_id, sge(to, 1024).into())),
            now,
        );
    }
    assert!(
        p.run_until(10 * SEC, |p| p.assocs[i]
            .events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionAccepted { stream: 0, .. }))),
        "session accepted"
    );
    // Operating: the peer's Send (untagged, QN 0, MSN 1) fills receive 1;
    // ours reaches the peer.
    let mut send = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    send.extend_from_slice(b"hello");
    p.assocs[i].ddp.send_segment(0, &send).unwrap();
    let mut got = Vec::new();
    let take = |got: &mut Vec<_>| {
        while let Some((s, e)) = cq.ring.pop() {
            assert_eq!(s, sock);
            let CqEntry::Done(c) = e else { panic!("{e:?}") };
            got.push((c.wr_id, c.opcode, c.status, c.byte_len));
        }
    };
    let send_wr = |wr_id| WorkRequest::Send {
        wr_id,
        signaled: true,
        local: sge(2048, 100).into(),
        solicited: false,
        invalidate: None,
    };
    let now = p.now();
    p.stack.handle_command(
        Command::Iwarp(sock, HostCommand::PostSend(send_wr(10))),
        now,
    );
    assert!(
        p.run_until(5 * SEC, |p| {
            take(&mut got);
            got.len() == 2
                && p.assocs[i]
                    .events
                    .iter()
                    .any(|e| matches!(e, DdpEvent::Segment { stream: 0, .. }))
        }),
        "operating: {got:?}"
    );
    got.sort_by_key(|g| g.0);
    assert_eq!(
        got,
        [
            (1, WcOpcode::Recv, WcStatus::Success, 5),
            (10, WcOpcode::Send, WcStatus::Success, 100)
        ]
    );
    got.clear();
    p.run(SEC);

    // The peer goes away (after its SHUTDOWN, if it closes); our
    // application sends once more and closes, if it does.
    let closed = p.now();
    if closer == Closer::Peer {
        p.assocs[i].ddp.shutdown(closed);
        p.step();
    }
    p.assocs[i].silent = true;
    let sent_before = p.assocs[i].chunk_types.len();
    if closer == Closer::UsAfterASend {
        p.stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostSend(send_wr(11))),
            closed,
        );
    }
    if closer != Closer::Peer {
        p.stack.handle_command(Command::Close(sock), closed);
    }
    p.run(4 * SEC);
    assert_eq!(associations(&p), 1, "held until the close timeout");
    let gone = p.run_until(900 * SEC, |p| associations(p) == 0);
    let after = (p.now() - closed) / TICK;
    let sent = p.assocs[i].chunk_types[sent_before..].to_vec();
    assert!(
        gone && after <= 6 * SEC as u64,
        "held {after} ms after the close; the stack sent it chunks {sent:?}"
    );
    assert_eq!(sent.last(), Some(&chunk_type::ABORT), "{sent:?}");
    assert_eq!(sent.iter().filter(|&&t| t == chunk_type::ABORT).count(), 1);
    assert_eq!(p.stack.sctp().map(|s| s.linger_aborts()), Some(1));
    p.run(10);
    take(&mut got);
    got.sort_by_key(|g| g.0);
    let mut want = vec![(2, WcOpcode::Recv, WcStatus::Flushed, 0)];
    match closer {
        Closer::UsAfterASend => want.push((11, WcOpcode::Send, WcStatus::Success, 100)),
        Closer::Us => assert!(sent.contains(&chunk_type::SHUTDOWN), "{sent:?}"),
        Closer::Peer => {
            assert!(sent.contains(&chunk_type::SHUTDOWN_ACK), "{sent:?}");
            // The application closes its queue pair: then it is freed.
            let now = p.now();
            p.stack.handle_command(Command::Close(sock), now);
            p.run(10);
        }
    }
    assert_eq!(got, want);
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock)));
    assert_eq!(p.stack.sctp().map(|s| s.connections()), Some(0));
}
