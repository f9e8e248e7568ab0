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
        link.outputs(Side::B).clear();
        let h = held(link);
        assert!(h <= BACKLOG, "A holds {h} unaccepted connections");
    }
    (accepted, requests)
}

/// A client opens 40 TCP connections and sends nothing on them: A holds
/// at most its backlog of them, and once they time out in MPA setup
/// (`MpaConfig::request_timeout`, 5 s), retried SYNs get in.
#[test]
fn forty_silent_connections_hold_at_most_the_backlog() {
    let (mut link, _) = link();
    for token in 0..40 {
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
    let (first, _) = run(&mut link, 2 * SECOND);
    assert_eq!(first.len(), BACKLOG, "the backlog fills, no more");
    // Every connection A has is one of them.
    assert_eq!(link.engine(Side::A).connections(), BACKLOG);
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
