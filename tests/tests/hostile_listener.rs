//! Hostile peers against an iWARP listener (issue 27, item 5): connections
//! that finished the TCP handshake but that the application has not
//! accepted count against the listener's backlog, on a virtual link (two
//! stacks, virtual time, no threads).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::MpaConfig;
use iwarp_datapath::link::virtual_link::{LinkConfig, Side, VirtualLink};
use iwarp_datapath::over_tcp::CmEvent;
use iwarp_datapath::stack::{Command, Output, SockId, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{MemoryTable, PdId};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const IP_A: Ipv4Address = Ipv4Address::new(10, 5, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 5, 0, 2);
const PORT: u16 = 5001;
const BACKLOG: usize = 4;
/// Virtual time per step: 100 µs.
const TICK: u64 = 100_000;
const SECOND: u64 = 1_000_000_000 / TICK;

fn stack(ip: Ipv4Address, last: u8) -> (Stack, PdId) {
    let mut c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        ip,
        24,
    ));
    c.tcp.rto_min = 5_000_000;
    c.tcp.rto_initial = 50_000_000;
    c.backlog = BACKLOG;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    (Stack::new(c, mem), pd)
}

fn iwarp(pd: PdId, manual: bool) -> Ulp {
    Ulp::Iwarp {
        mpa: MpaConfig::default(),
        params: StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 16,
        },
        manual,
        cq: None,
        srq: None,
    }
}

/// A listening on `PORT` (manual iWARP, backlog 4), B its client.
fn link() -> (VirtualLink<Stack>, PdId) {
    let (a, pd_a) = stack(IP_A, 1);
    let (b, pd_b) = stack(IP_B, 2);
    let cfg = LinkConfig {
        tick_ns: TICK,
        ..LinkConfig::default()
    };
    let mut link = VirtualLink::new(a, b, cfg);
    link.command(
        Side::A,
        Command::Listen {
            transport: Transport::Tcp,
            port: PORT,
            ulp: iwarp(pd_a, true),
        },
    );
    (link, pd_b)
}

/// What the listening stack holds for connections its application has
/// not accepted: connections handed out, half-open handshakes, its accept
/// queue.
fn held(link: &mut VirtualLink<Stack>) -> usize {
    let a = link.engine(Side::A);
    let (half_open, ready) = a.listener_holds();
    a.unaccepted() + half_open + ready
}

/// Run `steps`, checking the bound after each; returns the connections A
/// handed out (`Accepted`) and the connection requests it reported.
fn run(link: &mut VirtualLink<Stack>, steps: u64) -> (Vec<SockId>, Vec<SockId>) {
    run_with(link, steps, |_| {})
}

/// [`run`], handing B's outputs to `on_b`.
fn run_with(
    link: &mut VirtualLink<Stack>,
    steps: u64,
    mut on_b: impl FnMut(Output),
) -> (Vec<SockId>, Vec<SockId>) {
    let (mut accepted, mut requests) = (Vec::new(), Vec::new());
    for _ in 0..steps {
        link.step();
        while let Some(o) = link.outputs(Side::A).pop_front() {
            match o {
                Output::Accepted { sock, .. } => accepted.push(sock),
                Output::Cm(sock, CmEvent::ConnectRequest(_)) => requests.push(sock),
                _ => {}
            }
        }
        while let Some(o) = link.outputs(Side::B).pop_front() {
            on_b(o);
        }
        let h = held(link);
        assert!(h <= BACKLOG, "A holds {h} unaccepted connections");
    }
    (accepted, requests)
}

/// Open silent byte streams (nothing sent on them) from B to A's port
/// with tokens `tokens`.
fn connect(link: &mut VirtualLink<Stack>, tokens: std::ops::Range<u64>) {
    for token in tokens {
        link.command(
            Side::B,
            Command::Connect {
                transport: Transport::Tcp,
                token,
                remote: IP_A,
                port: PORT,
                ulp: Ulp::Stream,
            },
        );
    }
}

/// A client opens 40 TCP connections and sends nothing on them: A holds
/// at most its backlog of them, and once they time out in MPA setup
/// (`MpaConfig::request_timeout`, 5 s), retried SYNs get in.
///
/// The first 4 open first, the other 36 once A holds those 4: a SYN that
/// finds the backlog full of connections A holds is dropped unanswered
/// (no SYN-ACK, no cookie) and the client retries it. This order used to
/// come from ARP, which held 4 packets per unresolved neighbour: of 40
/// SYNs sent together it kept the last 4, and the other 36 came again
/// 50 ms later, to a full backlog. ARP now keeps the whole burst, and 40
/// SYNs arriving together find A's first 4 still half-open, so the other
/// 36 get SYN cookies rather than retrying their SYNs: that case is
/// `a_burst_of_forty_silent_connections_holds_at_most_the_backlog`.
#[test]
fn forty_silent_connections_hold_at_most_the_backlog() {
    let (mut link, _) = link();
    connect(&mut link, 0..4);
    let (first, _) = run(&mut link, SECOND / 100);
    assert_eq!(first.len(), BACKLOG, "the backlog fills");
    assert_eq!(link.engine(Side::A).unaccepted(), BACKLOG);
    connect(&mut link, 4..40);
    let (more, _) = run(&mut link, 2 * SECOND);
    assert!(more.is_empty(), "{} more got in", more.len());
    // Every connection A has is one of them.
    assert_eq!(link.engine(Side::A).connections(), BACKLOG);
    assert_eq!(link.engine(Side::A).stats().listen_overflows, 0);
    // The first ones time out awaiting their Request (5 s) and leave;
    // B's retried SYNs (50 ms backed off: 3.15 s, 6.35 s) take their place.
    let (later, _) = run(&mut link, 6 * SECOND);
    assert!(
        !later.is_empty() && later.len() <= BACKLOG,
        "{} connections got in after the first ones timed out",
        later.len()
    );
    assert!(first.iter().all(|s| !later.contains(s)));
}

/// 40 silent connections whose SYNs reach A together (ARP held them all
/// while it resolved A): A holds at most its backlog of them. The 36 SYNs
/// beyond it find the first 4 half-open, the accept queue not yet full,
/// and are answered with SYN cookies (RFC 4987 §3.6; Linux does the same
/// while its SYN queue is full); their ACKs then find the backlog full
/// and are dropped without an answer, as Linux drops them
/// (`ListenOverflows`): B's ends stay established, none is reset. Once
/// the first 4 have timed out, what such a client sends gets in on its
/// cookie.
#[test]
fn a_burst_of_forty_silent_connections_holds_at_most_the_backlog() {
    let (mut link, _) = link();
    connect(&mut link, 0..40);
    let (mut streams, mut closed) = (Vec::new(), 0);
    let (first, _) = run_with(&mut link, 2 * SECOND, |o| match o {
        Output::Connected {
            token,
            stream: Some(s),
            ..
        } => streams.push((token, s)),
        Output::Closed { .. } | Output::Failed { .. } => closed += 1,
        _ => {}
    });
    assert_eq!(first.len(), BACKLOG, "the backlog fills, no more");
    assert_eq!(link.engine(Side::A).connections(), BACKLOG);
    let a = link.engine(Side::A).stats();
    assert_eq!(a.listen_overflows, 36, "every cookie's ACK found it full");
    assert_eq!((streams.len(), closed), (40, 0), "B: all up, none reset");
    // The first 4 time out (5 s) and leave; the other 36 stay silent, so
    // nothing comes to take their place.
    let (later, _) = run(&mut link, 4 * SECOND);
    assert!(later.is_empty());
    assert_eq!(held(&mut link), 0, "the backlog is empty");
    // The last client sends: its segment carries the ACK of its cookie
    // (valid for 64 to 128 s) and makes its connection at A.
    let (token, s) = streams.last().unwrap();
    assert_eq!(*token, 39);
    assert!(s.tx.push(b"hello".to_vec()).is_ok());
    let (late, _) = run(&mut link, SECOND / 10);
    assert_eq!(late.len(), 1, "the cookie connection got in");
    assert!(first.iter().all(|s| !late.contains(s)));
}

/// Four connection requests wait for the application's decision and fill
/// the backlog; a fifth connection gets in only once one is accepted.
#[test]
fn accepting_a_request_makes_room_for_the_next() {
    let (mut link, pd_b) = link();
    for token in 0..4 {
        link.command(
            Side::B,
            Command::Connect {
                transport: Transport::Tcp,
                token,
                remote: IP_A,
                port: PORT,
                ulp: iwarp(pd_b, false),
            },
        );
    }
    let (_, requests) = run(&mut link, SECOND / 2);
    assert_eq!(requests.len(), BACKLOG);
    link.command(
        Side::B,
        Command::Connect {
            transport: Transport::Tcp,
            token: 4,
            remote: IP_A,
            port: PORT,
            ulp: iwarp(pd_b, false),
        },
    );
    let (accepted, more) = run(&mut link, 2 * SECOND);
    assert!(accepted.is_empty() && more.is_empty(), "a fifth got in");
    link.command(
        Side::A,
        Command::Accept {
            sock: requests[0],
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: None,
            pd: None,
        },
    );
    // The fifth SYN's retries (50 ms backed off) find room within 4 s.
    let (accepted, more) = run(&mut link, 4 * SECOND);
    assert_eq!((accepted.len(), more.len()), (1, 1), "the fifth got in");
    assert_eq!(link.engine(Side::A).unaccepted(), BACKLOG);
}
