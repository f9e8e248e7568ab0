//! Hostile peers against the memory budget (issue 27, round two, part A):
//! a peer finishes the handshake and the MPA exchange on many iWARP
//! connections and then sends only data above a gap, which TCP must hold
//! out of order. What the connections hold counts against
//! `StackConfig::max_held_total` and `max_held_per_conn`; over either,
//! the offending connection is aborted (RDMAP Terminate, then RST) and the
//! stack goes on serving the others. Virtual time, no threads.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::MpaConfig;
use iwarp_datapath::over_tcp::CmEvent;
use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::MemoryTable;
use iwarp_tests::raw_tcp::RawPeer;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const IP_A: Ipv4Address = Ipv4Address::new(10, 6, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 6, 0, 2);
const PORT: u16 = 5002;
/// Virtual time per step: 100 µs.
const TICK: u64 = 100_000;
/// A Rev 2 Request as Linux siw sends it: no flags but Enhanced, PD_Length
/// 4 (the RFC 6581 words), IRD 16, ORD 16.
const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";
const REPLY_LEN: usize = REQUEST.len();
const SEG: usize = 1400;

/// A listening on `PORT` (iWARP, accepting on its own) with these limits,
/// and the hostile peer B.
fn peer(per_conn: usize, total: usize) -> RawPeer {
    let mut c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, 1]),
        IP_A,
        24,
    ));
    c.max_held_per_conn = per_conn;
    c.max_held_total = total;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut stack = Stack::new(c, mem);
    iwarp_datapath::runtime::Engine::handle_command(
        &mut stack,
        Command::Listen {
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
                manual: false,
                cq: None,
                srq: None,
            },
        },
        0,
    );
    RawPeer::new(stack, IP_A, PORT, IP_B, 2, TICK)
}

/// `n` connections through the handshake and the MPA exchange: each has
/// had its Reply.
fn open(p: &mut RawPeer, n: usize) {
    for k in 0..n {
        p.open(40_000 + k as u16);
        // The first SYN waits for ARP (whose hold queue is short).
        p.run(if k == 0 { 10 } else { 1 });
    }
    p.run(20);
    for i in 0..n {
        p.send_at(i, 0, REQUEST);
    }
    p.run(20);
    let up = p
        .outputs
        .iter()
        .filter(|o| matches!(o, Output::Cm(_, CmEvent::Established(_))))
        .count();
    assert_eq!(up, n, "every connection reached full operation");
    assert!(p.conns.iter().all(|c| c.rx_octets >= REPLY_LEN && !c.reset));
}

/// `octets` of data one octet above connection `i`'s next sequence
/// number: held out of order, never delivered.
fn above_gap(p: &mut RawPeer, i: usize, octets: usize) {
    let data = vec![0x5a; SEG];
    for k in 0..octets.div_ceil(SEG) {
        let off = 1 + (k * SEG) as u32;
        p.send_at(i, off, &data[..SEG.min(octets - k * SEG)]);
        if k % 32 == 31 {
            p.step();
        }
    }
    p.step();
}

/// Eight connections hold 64 KiB out of order each and one 640 KiB: over
/// a context budget of 1 MiB, the largest is aborted (a Terminate, then
/// RST), the other seven keep going, and the stats say so.
#[test]
fn over_the_context_budget_the_largest_holder_is_aborted() {
    const LIMIT: usize = 1 << 20;
    let mut p = peer(4 << 20, LIMIT);
    open(&mut p, 8);
    above_gap(&mut p, 0, 640 << 10);
    for i in 1..8 {
        above_gap(&mut p, i, 64 << 10);
    }
    // The abort's Terminate waits up to 100 ms for its ACK, then RST.
    p.run(2_000);
    let s = p.stack.stats();
    assert!(p.conns[0].reset, "the largest holder was reset");
    assert!(
        p.conns[0].rx_octets > REPLY_LEN,
        "a Terminate went out before the RST"
    );
    assert!(
        p.conns[1..].iter().all(|c| !c.reset),
        "only the largest was aborted"
    );
    assert_eq!(s.budget_aborts, 1, "{s:?}");
    assert!(s.held_octets as usize <= LIMIT, "{s:?}");
    assert!(s.held_octets >= 7 * (64 << 10), "{s:?}");
    assert_eq!(p.stack.connections(), 7);
}

/// One connection that holds more than `max_held_per_conn` is aborted
/// even though the context has room.
#[test]
fn over_its_own_budget_a_connection_is_aborted() {
    let mut p = peer(256 << 10, 256 << 20);
    open(&mut p, 2);
    above_gap(&mut p, 1, 128 << 10);
    above_gap(&mut p, 0, 400 << 10);
    p.run(2_000);
    let s = p.stack.stats();
    assert!(p.conns[0].reset && !p.conns[1].reset);
    assert_eq!(s.budget_aborts, 1, "{s:?}");
    assert!(s.held_max_conn as usize <= 256 << 10, "{s:?}");
    assert_eq!(p.stack.connections(), 1);
}
