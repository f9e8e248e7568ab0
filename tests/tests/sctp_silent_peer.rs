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
//! its request was refused. A close of an operating connection ends the
//! close timeout after the peer last made progress, and no sooner: a slow
//! peer that keeps acknowledging is not cut short. Virtual time, no
//! threads.

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
    assert_eq!(p.stack.sctp().map(|_| p.stack.sctp_connections()), Some(0));
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

/// A slow peer is not cut short: the close timeout runs from the peer's
/// last progress, not from the close. The peer takes its received data
/// only every 2.5 s (its receive window, 8 KiB, closes in between), so our
/// 48 KiB of Sends posted before a graceful close drain a window at a
/// time and the SHUTDOWN waits for the last of them (RFC 9260 §9.2: the
/// SHUTDOWN goes once all outstanding DATA is acknowledged): the close
/// takes far longer than `SetupTimeouts::close`, but each window
/// acknowledged is progress, so it completes gracefully (SHUTDOWN,
/// SHUTDOWN-ACK, SHUTDOWN-COMPLETE, no ABORT) with every octet delivered.
#[test]
fn a_slow_peer_that_keeps_acknowledging_is_not_cut_short_during_the_close() {
    use ddp_sctp::DdpEvent;
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
    use iwarp_datapath::runtime::Engine;
    use iwarp_datapath::stack::Command;
    use iwarp_proto::qp::{WcOpcode, WcStatus};
    use sctp_lite::assoc::CloseReason;

    const SENDS: u64 = 6;
    const LEN: usize = 8192;
    let mut o = operating(|c| {
        c.recv_buffer = 8192;
        c.max_message = 2048;
    });
    let (i, sock) = (o.i, o.sock);
    let p = &mut o.p;
    // What DDP takes out of SCTP while the peer does not read: the rest
    // waits in SCTP and its window closes.
    p.assocs[i].ddp.set_max_held(2048);
    p.assocs[i].stalled = true;
    let closed = p.now();
    let from = |k: u64| 4096 + k * LEN as u64;
    for k in 0..SENDS {
        let wr = send_wr(o.stag, 20 + k, from(k), LEN as u32);
        p.stack
            .handle_command(Command::Iwarp(sock, HostCommand::PostSend(wr)), closed);
    }
    p.stack.handle_command(Command::Close(sock), closed);
    let sent_before = p.assocs[i].chunk_types.len();
    // The peer reads everything it holds once every 2.5 s.
    let mut reads = 0;
    while associations(p) == 1 && p.now() - closed < 120 * SEC as u64 * TICK {
        p.assocs[i].stalled = true;
        p.run(SEC * 5 / 2);
        p.assocs[i].stalled = false;
        p.step();
        reads += 1;
    }
    p.run(10);
    let took = (p.now() - closed) / TICK;
    let sent = p.assocs[i].chunk_types[sent_before..].to_vec();
    assert_eq!(associations(p), 0, "still up {took} ms after the close");
    // Meaningful only if the close outlasted the close timeout by far.
    assert!(
        took > 2 * 5 * SEC as u64,
        "the close took {took} ms ({reads} reads)"
    );
    assert_eq!(p.stack.sctp().map(|s| s.linger_aborts()), Some(0));
    assert!(!sent.contains(&chunk_type::ABORT), "{sent:?}");
    assert_eq!(
        sent.iter()
            .filter(|&&t| t == chunk_type::SHUTDOWN_COMPLETE)
            .count(),
        1,
        "{sent:?}"
    );
    assert!(
        p.assocs[i]
            .events
            .contains(&DdpEvent::Closed(CloseReason::Shutdown)),
        "the peer saw {:?}",
        p.assocs[i].events.last()
    );
    // Every octet arrived: each Send's segments (untagged, QN 0, MSN 2
    // on; RFC 5041 §4.3) placed at their Message Offsets.
    let mut msgs = vec![Vec::new(); SENDS as usize];
    for e in &p.assocs[i].events {
        let DdpEvent::Segment { segment: s, .. } = e else {
            continue;
        };
        let word = |at: usize| u32::from_be_bytes(s[at..at + 4].try_into().unwrap()) as usize;
        let (msn, mo) = (word(10), word(14));
        if msn < 2 {
            continue;
        }
        let m: &mut Vec<u8> = &mut msgs[msn - 2];
        let data = &s[18..];
        if m.len() < mo + data.len() {
            m.resize(mo + data.len(), 0);
        }
        m[mo..mo + data.len()].copy_from_slice(data);
    }
    for (k, m) in msgs.iter().enumerate() {
        let want: Vec<u8> = (0..LEN)
            .map(|j| pattern(from(k as u64) as usize + j))
            .collect();
        assert!(*m == want, "Send {k}: {} octets of {LEN} right", m.len());
    }
    let mut got = take(&o);
    got.sort_by_key(|g| g.0);
    let mut want = vec![(2, WcOpcode::Recv, WcStatus::Flushed, 0)];
    want.extend((0..SENDS).map(|k| (20 + k, WcOpcode::Send, WcStatus::Success, LEN as u32)));
    assert_eq!(got, want);
    let p = &o.p;
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock)));
    assert_eq!(p.stack.sctp().map(|_| p.stack.sctp_connections()), Some(0));
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

/// A connection in full operation (see the tests above): the stack at
/// `MAC_A` accepted association `i`'s request (IRD, ORD 4) as `sock`,
/// with the CQ `cq`; receive 1 took the peer's "hello", Send 10 (100
/// octets) reached the peer, receive 2 (1024 octets) is left posted.
/// `stag`'s 64 KiB hold `pattern`.
struct Operating {
    p: RawSctpPeer,
    i: usize,
    sock: iwarp_datapath::stack::SockId,
    cq: std::sync::Arc<iwarp_datapath::stack::CqRing>,
    stag: iwarp_proto::mem::STag,
}

/// Octet `k` of the stack's registered memory.
fn pattern(k: usize) -> u8 {
    (k % 251) as u8
}

/// A Send of `len` octets from offset `to` of `stag`, signaled.
fn send_wr(
    stag: iwarp_proto::mem::STag,
    wr_id: u64,
    to: u64,
    len: u32,
) -> iwarp_proto::qp::WorkRequest {
    use iwarp_proto::qp::{Sge, WorkRequest};
    WorkRequest::Send {
        wr_id,
        signaled: true,
        local: Sge { stag, to, len }.into(),
        solicited: false,
        invalidate: None,
    }
}

/// A completion: (wr_id, opcode, status, byte_len).
type Wc = (
    u64,
    iwarp_proto::qp::WcOpcode,
    iwarp_proto::qp::WcStatus,
    u32,
);

/// The completions on `o.cq` so far (all `o.sock`'s).
fn take(o: &Operating) -> Vec<Wc> {
    take_from(&o.cq, o.sock)
}

/// The completions on `cq` so far (all `sock`'s).
fn take_from(cq: &iwarp_datapath::stack::CqRing, sock: iwarp_datapath::stack::SockId) -> Vec<Wc> {
    use iwarp_datapath::stack::CqEntry;
    let mut got = Vec::new();
    while let Some((s, e)) = cq.ring.pop() {
        assert_eq!(s, sock);
        let CqEntry::Done(c) = e else { panic!("{e:?}") };
        got.push((c.wr_id, c.opcode, c.status, c.byte_len));
    }
    got
}

/// See [`Operating`]; the peer's association configured by `adjust`.
fn operating(adjust: impl FnOnce(&mut sctp_lite::assoc::Config)) -> Operating {
    use std::sync::Arc;

    use ddp_sctp::DdpEvent;
    use iwarp_datapath::over_tcp::HostCommand;
    use iwarp_datapath::runtime::Engine;
    use iwarp_datapath::stack::{Command, CqRing};
    use iwarp_proto::mem::Access;
    use iwarp_proto::qp::{Sge, WcOpcode, WcStatus};

    let timeouts = SetupTimeouts::default();
    assert_eq!(timeouts.close, 5_000_000_000);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(
            pd,
            (0..65_536).map(pattern).collect::<Vec<u8>>(),
            Access::LOCAL_WRITE,
            0,
        )
        .unwrap();
    let cq = Arc::new(CqRing::new(64));
    let cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    let mut p = RawSctpPeer::listening(cfg, mem, PORT, ulp(pd, Some(&cq), timeouts), IP_B, 2, TICK);
    let i = p.open_with(40_000, adjust);
    assert!(
        p.run_until(10 * SEC, |p| p.assocs[i]
            .events
            .contains(&DdpEvent::Connected)),
        "association up"
    );
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
    for (wr_id, to) in [(1, 0), (2, 1024)] {
        let sge = Sge {
            stag,
            to,
            len: 1024,
        };
        p.stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostRecv(wr_id, sge.into())),
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
    let now = p.now();
    p.stack.handle_command(
        Command::Iwarp(sock, HostCommand::PostSend(send_wr(stag, 10, 2048, 100))),
        now,
    );
    let mut got = Vec::new();
    assert!(
        p.run_until(5 * SEC, |p| {
            got.extend(take_from(&cq, sock));
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
    p.run(SEC);
    Operating {
        p,
        i,
        sock,
        cq,
        stag,
    }
}

/// See the tests above.
fn silent_during_the_close(closer: Closer) {
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
    use iwarp_datapath::runtime::Engine;
    use iwarp_datapath::stack::Command;
    use iwarp_proto::qp::{WcOpcode, WcStatus};

    let mut o = operating(|_| {});
    let (i, sock) = (o.i, o.sock);
    let p = &mut o.p;

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
            Command::Iwarp(sock, HostCommand::PostSend(send_wr(o.stag, 11, 2048, 100))),
            closed,
        );
    }
    if closer != Closer::Peer {
        p.stack.handle_command(Command::Close(sock), closed);
    }
    p.run(4 * SEC);
    assert_eq!(associations(p), 1, "held until the close timeout");
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
    let mut got = take(&o);
    got.sort_by_key(|g| g.0);
    assert_eq!(got, want);
    let p = &o.p;
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock)));
    assert_eq!(p.stack.sctp().map(|_| p.stack.sctp_connections()), Some(0));
}
