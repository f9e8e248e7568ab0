//! A manual listener's undecided MPA Request (issue 13, finding 6), on
//! literal bytes: octets a peer sends after its Request while our
//! application decides are bounded (`MpaConfig::max_early_data`; RFC 5044
//! §7.1: the initiator sends no FPDU before the Reply), and a Request left
//! unanswered is rejected on the wire once `MpaConfig::decision_timeout`
//! runs out. Both end with a Reply carrying R = 1, so the peer gets a clear
//! answer, and a `SetupFailed` event here.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::{MpaConfig, SetupFailure};
use iwarp_datapath::over_tcp::{encode_segment, CmEvent, IwarpOverTcp, Role};
use iwarp_datapath::{ConnState, Connection, StreamParams};
use iwarp_proto::mem::MemoryTable;
use tcp_lite::tcp::{Config, Connection as Tcp, State};
use tcp_lite::wire::{Ipv4Address, TcpPacket, TcpRepr};

/// A Rev 2 Request as Linux siw sends it: no flags but Enhanced, PD_Length
/// 4 (the RFC 6581 words), IRD 16, ORD 16.
const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
/// The rejecting Reply: R + Enhanced, Rev 2, PD_Length 4, IRD/ORD 0.
const REJECT: &[u8] = b"MPA ID Rep Frame\x30\x02\x00\x04\x00\x00\x00\x00";

fn params(mem: &mut MemoryTable) -> StreamParams {
    StreamParams {
        pd: mem.alloc_pd(),
        emss: 1460,
        sq_depth: 8,
        rq_depth: 8,
    }
}

fn sent(c: &mut Connection, mem: &MemoryTable) -> Vec<u8> {
    let mut out = Vec::new();
    while c.poll_transmit(mem, &mut out, 4096, 1) > 0 {}
    out
}

#[test]
fn octets_after_the_request_are_held_up_to_the_bound_then_the_request_is_rejected() {
    let mut mem = MemoryTable::new();
    let p = params(&mut mem);
    let cfg = MpaConfig {
        max_early_data: 16,
        ..Default::default()
    };
    let mut c = Connection::responder_manual(cfg, p);
    // The Request and 10 octets behind it in one segment.
    let mut seg = REQUEST.to_vec();
    seg.extend_from_slice(&[0xee; 10]);
    c.receive(&seg, &mut mem);
    assert!(c.pending_request().is_some());
    assert_eq!(c.early_len(), 10);
    // Up to the bound: still held, nothing sent.
    c.receive(&[0xee; 6], &mut mem);
    assert_eq!((c.early_len(), c.state()), (16, ConnState::Connecting));
    assert!(sent(&mut c, &mem).is_empty());
    // One octet more: rejected, the held octets dropped.
    c.receive(&[0xee], &mut mem);
    assert_eq!(c.state(), ConnState::Failed);
    assert_eq!(c.setup_error().unwrap().reason, SetupFailure::EarlyData);
    assert_eq!(c.early_len(), 0);
    assert!(c.pending_request().is_none());
    assert_eq!(sent(&mut c, &mem), REJECT);
    // What the peer goes on sending is neither held nor answered, and the
    // application can no longer accept.
    c.receive(&[0xee; 100_000], &mut mem);
    assert_eq!(c.early_len(), 0);
    assert!(sent(&mut c, &mem).is_empty());
    assert!(c.accept(Vec::new(), 1, 1, &mut mem).is_err());
}

#[test]
fn the_default_bound_takes_a_request_followed_by_more_than_4096_octets_as_an_attack() {
    let mut mem = MemoryTable::new();
    let p = params(&mut mem);
    let mut c = Connection::responder_manual(MpaConfig::default(), p);
    let mut seg = REQUEST.to_vec();
    seg.extend_from_slice(&[0; 4096]);
    c.receive(&seg, &mut mem);
    assert_eq!((c.early_len(), c.state()), (4096, ConnState::Connecting));
    c.receive(&[0], &mut mem);
    assert_eq!(c.setup_error().unwrap().reason, SetupFailure::EarlyData);
    assert_eq!(sent(&mut c, &mem), REJECT);
}

#[test]
fn the_decision_timer_only_runs_while_a_request_waits_for_the_application() {
    let mut mem = MemoryTable::new();
    let p = params(&mut mem);
    let cfg = MpaConfig {
        request_timeout: 1_000,
        decision_timeout: 2_000,
        ..Default::default()
    };
    let mut c = Connection::responder_manual(cfg, p);
    assert_eq!(c.setup_timeout(), Some(1_000));
    c.receive(REQUEST, &mut mem);
    assert_eq!(c.setup_timeout(), Some(2_000));
    c.setup_timed_out();
    assert_eq!(c.setup_error().unwrap().reason, SetupFailure::TimedOut);
    assert_eq!(sent(&mut c, &mem), REJECT);
    assert_eq!(c.setup_timeout(), None);
}

const IP_A: Ipv4Address = Ipv4Address([10, 9, 0, 1]);
const IP_B: Ipv4Address = Ipv4Address([10, 9, 0, 2]);

/// Something that emits segments to a callback (a `poll_transmit`).
type Emitter<'a> = dyn FnMut(&mut dyn FnMut(&TcpRepr<'_>)) + 'a;

fn frames(f: &mut Emitter<'_>, src: Ipv4Address, dst: Ipv4Address) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    f(&mut |r| {
        let mut b = vec![0; r.buffer_len()];
        r.emit(&mut TcpPacket::new_unchecked(&mut b[..]), &src, &dst)
            .unwrap();
        out.push(b);
    });
    out
}

fn parse<'a>(f: &'a [u8], src: Ipv4Address, dst: Ipv4Address) -> TcpRepr<'a> {
    TcpRepr::parse(&TcpPacket::new_checked(f).unwrap(), &src, &dst).unwrap()
}

/// What a raw TCP peer A (sending `after_request` octets behind a literal
/// Request) sees from our manual responder B over tcp-lite, whose
/// application never answers. Virtual time in 1 ms steps up to `until`.
struct Run {
    /// Octets B sent A.
    to_peer: Vec<u8>,
    /// B's CM events with the time they came out (ns).
    events: Vec<(u64, CmEvent)>,
    /// B sent its FIN.
    fin: bool,
    /// The most octets B held after the Request.
    max_held: usize,
}

fn undecided(cfg: MpaConfig, request_at: u64, after_request: &[u8], until: u64) -> Run {
    let tcfg = Config::default();
    let mut a = Tcp::connect(tcfg, 40000, 7174, 1234);
    let syn = frames(
        &mut |e| {
            a.poll_transmit(0, 1, e);
        },
        IP_A,
        IP_B,
    );
    let tb = Tcp::accept(tcfg, &parse(&syn[0], IP_A, IP_B), 99);
    let mut mem = MemoryTable::new();
    let p = params(&mut mem);
    let mut b = IwarpOverTcp::new(tb, Role::Responder, cfg, p).manual_accept();
    let mut run = Run {
        to_peer: Vec::new(),
        events: Vec::new(),
        fin: false,
        max_held: 0,
    };
    let mut queued = false;
    let mut now = 0;
    while now < until {
        now += 1_000_000;
        if !queued && now >= request_at && a.state() == State::Established {
            queued = true;
            assert!(a.send_record(REQUEST));
            let mut rest = after_request;
            while !rest.is_empty() {
                let n = a.send(rest);
                assert!(n > 0, "the peer's send buffer is full");
                rest = &rest[n..];
            }
        }
        a.handle_timeout(now);
        for f in frames(
            &mut |e| {
                a.poll_transmit(now, 64, e);
            },
            IP_A,
            IP_B,
        ) {
            b.handle_segment(&parse(&f, IP_A, IP_B), now, &mut mem);
        }
        let mut from_b = Vec::new();
        b.poll(now, &mem, 64, &mut |r, fill| {
            from_b.push(encode_segment(r, fill, &IP_B, &IP_A).unwrap());
        });
        for f in from_b {
            let seg = parse(&f, IP_B, IP_A);
            run.fin |= seg.flags.contains(tcp_lite::wire::TcpFlags::FIN);
            let to_peer = &mut run.to_peer;
            a.handle_segment(&seg, now, &mut |d| to_peer.extend_from_slice(d));
        }
        if let Some(c) = &b.iwarp {
            run.max_held = run.max_held.max(c.early_len());
        }
        while let Some(e) = b.poll_cm_event() {
            run.events.push((now, e));
        }
    }
    run
}

const S: u64 = 1_000_000_000;

#[test]
fn an_unanswered_request_is_rejected_on_the_wire_when_the_decision_timer_runs_out() {
    let cfg = MpaConfig {
        request_timeout: S,
        decision_timeout: 2 * S,
        ..Default::default()
    };
    // The Request comes 0.5 s in: the request timer (1 s) is stopped by
    // it, and the decision timer runs 2 s from there.
    let r = undecided(cfg, S / 2, &[], 4 * S);
    let kinds: Vec<_> = r.events.iter().map(|(_, e)| e).collect();
    assert!(
        matches!(kinds[..], [CmEvent::ConnectRequest(_), CmEvent::SetupFailed(ref e), ..] if e.reason == SetupFailure::TimedOut),
        "{kinds:?}"
    );
    let failed_at = r.events[1].0;
    assert!(
        (5 * S / 2..5 * S / 2 + 20_000_000).contains(&failed_at),
        "timed out at {failed_at} ns"
    );
    assert_eq!(r.to_peer, REJECT, "the peer is told: R = 1");
    assert!(r.fin, "and the stream closes");
}

#[test]
fn a_peer_streaming_after_its_request_is_rejected_not_buffered() {
    let cfg = MpaConfig {
        max_early_data: 1000,
        ..Default::default()
    };
    let junk = vec![0x5a; 64 * 1024];
    let r = undecided(cfg, 0, &junk, S);
    assert!(r.max_held <= 1000, "held {}", r.max_held);
    let failed = r
        .events
        .iter()
        .find_map(|(_, e)| match e {
            CmEvent::SetupFailed(e) => Some(e.reason),
            _ => None,
        })
        .unwrap();
    assert_eq!(failed, SetupFailure::EarlyData);
    assert_eq!(r.to_peer, REJECT);
    assert!(r.fin);
}
