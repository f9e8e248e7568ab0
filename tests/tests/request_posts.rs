//! Receives posted on a connection while it is a connection request the
//! application holds (`CmEvent::ConnectRequest`, before its Accept) all
//! complete on the CQ the Accept names when the accept fails, as every
//! posted work request completes in error when its queue pair goes away
//! (verbs' IBV_WC_WR_FLUSH_ERR). A manual listener has no CQ of its own
//! (the API's `Listener` gives none), and the refusals of such receives
//! used to go to the stack's outputs when the connection failed before
//! the application answered, where nobody looks for them: the accept
//! failed, and the receives never completed anywhere. Over MPA/TCP with a
//! raw peer that resets after its Request, and over SCTP with a raw peer
//! that aborts its association after its Session Initiate; virtual time.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;

use iwarp_control::MpaConfig;
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{
    Command, CqEntry, CqRing, Output, QpCqs, SockId, Stack, StackConfig, Transport, Ulp,
};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{Access, MemoryTable, STag};
use iwarp_proto::qp::{PostError, Sge};
use iwarp_tests::raw_sctp::{ulp, RawSctpPeer};
use iwarp_tests::raw_tcp::RawPeer;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x78, 1]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 7, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 7, 0, 2);
const PORT: u16 = 7000;
/// Virtual time per step: 1 ms.
const TICK: u64 = 1_000_000;
/// The receives the application posts to the request.
const RECVS: [u64; 3] = [71, 72, 73];

/// The application's receives on `sock`, posted before it answers.
fn post_recvs(stack: &mut Stack, sock: SockId, stag: STag, now: u64) {
    for (k, wr_id) in RECVS.into_iter().enumerate() {
        let sge = Sge {
            stag,
            to: 64 * k as u64,
            len: 64,
        };
        stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostRecv(wr_id, sge.into())),
            now,
        );
    }
}

/// The Accept the application answers with, completions to `ring`.
fn accept(sock: SockId, ring: &Arc<CqRing>) -> Command {
    accept_with(sock, ring, Vec::new())
}

/// [`accept`] with `private_data`.
fn accept_with(sock: SockId, ring: &Arc<CqRing>, private_data: Vec<u8>) -> Command {
    Command::Accept {
        sock,
        private_data,
        ird: 4,
        ord: 4,
        cq: Some(QpCqs::one(ring.clone())),
        pd: None,
    }
}

/// Each of [`RECVS`] once on `ring`, refused with a disconnect (the
/// connection ended before it had a queue pair), and nothing else; `outputs`
/// for the message.
fn assert_all_refused(ring: &CqRing, sock: SockId, outputs: &[Output]) {
    let mut got = Vec::new();
    while let Some((s, e)) = ring.ring.pop() {
        assert_eq!(s, sock);
        match e {
            CqEntry::Refused { wr_id, error } => {
                assert!(matches!(error, PostError::Disconnected(_)), "{error:?}");
                got.push(wr_id);
            }
            other => panic!("{other:?}"),
        }
    }
    got.sort_unstable();
    assert_eq!(
        got,
        RECVS,
        "on the CQ; the outputs for the connection: {:?}",
        outputs
            .iter()
            .filter(|o| matches!(o, Output::Iwarp(s, _) if *s == sock))
            .collect::<Vec<_>>()
    );
}

fn memory() -> (MemoryTable, iwarp_proto::mem::PdId, STag) {
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; 4096], Access::LOCAL_WRITE, 0)
        .unwrap();
    (mem, pd, stag)
}

/// A stack whose manual listener (no CQ) has a raw TCP peer's Request,
/// handed to the application as `sock`, with [`RECVS`] posted to it.
fn tcp_request() -> (RawPeer, usize, SockId) {
    const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
    let (mem, pd, stag) = memory();
    let mut stack = Stack::new(StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24)), mem);
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
    let i = p.open(40_000);
    p.run(20);
    p.send_at(i, 0, REQUEST);
    let mut sock = None;
    for _ in 0..100 {
        p.step();
        sock = p.outputs.iter().find_map(|o| match o {
            Output::Cm(s, CmEvent::ConnectRequest(_)) => Some(*s),
            _ => None,
        });
        if sock.is_some() {
            break;
        }
    }
    let sock = sock.expect("request seen");
    let now = p.now();
    post_recvs(&mut p.stack, sock, stag, now);
    p.run(5);
    (p, i, sock)
}

#[test]
fn receives_posted_on_a_tcp_request_complete_on_the_cq_of_the_failed_accept() {
    let (mut p, i, sock) = tcp_request();
    // The peer goes away before the application answers: the connection
    // fails and is freed.
    p.reset(i);
    p.run(20);
    assert_eq!(p.stack.connections(), 0, "reset and freed");
    let ring = Arc::new(CqRing::new(16));
    let now = p.now();
    p.stack.handle_command(accept(sock, &ring), now);
    p.run(5);
    assert_all_refused(&ring, sock, &p.outputs);
}

/// A stack listening for SCTP (no CQ) that has a raw peer's Session
/// Initiate, handed to the application as `sock`, with [`RECVS`] posted
/// to it.
fn sctp_request() -> (RawSctpPeer, usize, SockId) {
    let (mem, pd, stag) = memory();
    let cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    let ulp = ulp(pd, None, SetupTimeouts::default());
    let mut p = RawSctpPeer::listening(cfg, mem, PORT, ulp, IP_B, 2, TICK);
    let i = p.open_connected(40_000, 10_000);
    let initiate = iwarp_control::sctp::initiate(4, 4, b"").unwrap();
    p.assocs[i].ddp.initiate(0, &initiate).unwrap();
    let mut sock = None;
    assert!(
        p.run_until(10_000, |p| {
            sock = p.outputs.iter().find_map(|o| match o {
                Output::Cm(s, CmEvent::ConnectRequest(_)) => Some(*s),
                _ => None,
            });
            sock.is_some()
        }),
        "request seen"
    );
    let sock = sock.unwrap();
    let now = p.now();
    post_recvs(&mut p.stack, sock, stag, now);
    p.run(5);
    (p, i, sock)
}

#[test]
fn receives_posted_on_an_sctp_request_complete_on_the_cq_of_the_failed_accept() {
    use ddp_sctp::DdpEvent;

    let (mut p, i, sock) = sctp_request();
    // The peer aborts its association before the application answers.
    p.assocs[i].ddp.abort();
    assert!(
        p.run_until(1_000, |p| p.stack.sctp().unwrap().host().assoc_count() == 0),
        "association gone"
    );
    p.run(5);
    assert!(p.assocs[i]
        .events
        .iter()
        .any(|e| matches!(e, DdpEvent::Closed(_))));
    let ring = Arc::new(CqRing::new(16));
    let now = p.now();
    p.stack.handle_command(accept(sock, &ring), now);
    p.run(5);
    assert_all_refused(&ring, sock, &p.outputs);
    // The application lets the connection go: it is freed.
    let now = p.now();
    p.stack.handle_command(Command::Abort(sock), now);
    assert!(p.run_until(100, |p| p.stack.sctp_connections() == 0));
}

/// The application's Accept is refused for its own arguments (private
/// data far over any limit: MPA's 512 octets, RFC 5044 §7.1; the SCTP
/// session's), and it gives the connection up: the receives complete on
/// that Accept's CQ.
fn refused_accept_then_abort(stack: &mut Stack, sock: SockId, ring: &Arc<CqRing>, now: u64) {
    stack.handle_command(accept_with(sock, ring, vec![0; 70_000]), now);
    stack.handle_command(Command::Abort(sock), now);
}

#[test]
fn receives_posted_on_a_tcp_request_complete_on_the_cq_of_a_refused_accept() {
    let (mut p, _, sock) = tcp_request();
    let ring = Arc::new(CqRing::new(16));
    let now = p.now();
    refused_accept_then_abort(&mut p.stack, sock, &ring, now);
    p.run(20);
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::CmRefused(s, _) if *s == sock)));
    assert_all_refused(&ring, sock, &p.outputs);
}

#[test]
fn receives_posted_on_an_sctp_request_complete_on_the_cq_of_a_refused_accept() {
    let (mut p, _, sock) = sctp_request();
    let ring = Arc::new(CqRing::new(16));
    let now = p.now();
    refused_accept_then_abort(&mut p.stack, sock, &ring, now);
    p.run(20);
    assert!(p
        .outputs
        .iter()
        .any(|o| matches!(o, Output::CmRefused(s, _) if *s == sock)));
    assert_all_refused(&ring, sock, &p.outputs);
}

/// Receives posted to a request hold at most the receive queue's depth
/// (16 here; the listener's queue pair settings), over either transport:
/// with [`RECVS`] already posted, 13 more fill it and the 14th after
/// them is refused with `QueueFull` (`datapath::early`), and the refusal
/// reaches the CQ the Accept names although it is posted in the same
/// round as the Accept, while the accept itself succeeds. Before, a
/// refusal made by a command of the Accept's round had not yet passed the
/// record of requests when the Accept released it, and went to the
/// outputs, where nobody looks: the receive never completed.
fn over_the_depth_then_accept(stack: &mut Stack, sock: SockId, now: u64) -> (u64, Arc<CqRing>) {
    let (_, _, stag) = memory();
    let last = 100 + 16 - RECVS.len() as u64;
    for wr_id in 100..=last {
        let sge = Sge {
            stag,
            to: 2048,
            len: 64,
        };
        stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostRecv(wr_id, sge.into())),
            now,
        );
    }
    let ring = Arc::new(CqRing::new(64));
    stack.handle_command(accept(sock, &ring), now);
    (last, ring)
}

fn assert_only_refused(ring: &CqRing, sock: SockId, want: u64, outputs: &[Output]) {
    let mut refused = Vec::new();
    while let Some((s, e)) = ring.ring.pop() {
        assert_eq!(s, sock);
        match e {
            CqEntry::Refused { wr_id, error } => refused.push((wr_id, error)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        refused,
        [(want, PostError::QueueFull)],
        "{:?}",
        outputs
            .iter()
            .filter(|o| matches!(o, Output::Iwarp(s, _) if *s == sock))
            .collect::<Vec<_>>()
    );
    assert!(
        outputs
            .iter()
            .any(|o| matches!(o, Output::Cm(s, CmEvent::Established(_)) if *s == sock)),
        "accepted: {outputs:?}"
    );
}

#[test]
fn receives_posted_on_a_tcp_request_hold_the_receive_depth() {
    let (mut p, _, sock) = tcp_request();
    let now = p.now();
    let (last, ring) = over_the_depth_then_accept(&mut p.stack, sock, now);
    p.run(5);
    assert_only_refused(&ring, sock, last, &p.outputs);
}

#[test]
fn receives_posted_on_an_sctp_request_hold_the_receive_depth() {
    let (mut p, _, sock) = sctp_request();
    let now = p.now();
    let (last, ring) = over_the_depth_then_accept(&mut p.stack, sock, now);
    p.run(5);
    assert_only_refused(&ring, sock, last, &p.outputs);
}
