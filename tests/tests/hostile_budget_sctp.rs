//! The memory budget over SCTP (issue 27, round two): a peer runs two
//! RFC 5043 associations to a listening stack, both with a DDP Stream
//! Session accepted by the application, then sends DATA above a TSN gap
//! on them — middle fragments of a message whose first fragment never
//! comes, which the association must hold. One holds more than
//! `StackConfig::max_held_per_conn`: its association is aborted with the
//! error cause Out of Resource (RFC 9260 §3.3.10.4), its application sees
//! the disconnect, and the other, holding less, goes on: a Send on it
//! completes. Virtual time, no threads.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;

use ddp_sctp::DdpEvent;
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{Command, CqEntry, CqRing, Output, StackConfig};
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::qp::{Sge, WcOpcode, WcStatus};
use iwarp_tests::raw_sctp::{ulp, RawSctpPeer};
use sctp_lite::assoc::CloseReason;
use sctp_lite::wire::{cause_code, ChunkRepr, DataFlags, DataRepr};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x75, 1]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 7, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 7, 0, 2);
const PORT: u16 = 7000;
/// Virtual time per step: 1 ms.
const TICK: u64 = 1_000_000;
/// The per-connection limit under test.
const PER_CONN: usize = 128 << 10;
/// Octets of each hand-made DATA chunk.
const CHUNK: usize = 1200;

/// `n` middle fragments (B and E clear, unordered, PPID 16: DDP Segment)
/// from TSN `first` on, on association `i`: none can be delivered, since
/// the message's first fragment never comes.
fn middle_fragments(p: &mut RawSctpPeer, i: usize, first: u32, n: u32) {
    let payload = [0x5a; CHUNK];
    for k in 0..n {
        let d = DataRepr {
            flags: DataFlags {
                immediate: false,
                unordered: true,
                begin: false,
                end: false,
            },
            tsn: first.wrapping_add(k),
            stream_id: 0,
            ssn: 0,
            ppid: 16,
            payload: &payload,
        };
        p.send_chunks(i, &[ChunkRepr::Data(d)]);
        if k % 16 == 15 {
            p.step();
        }
    }
    p.step();
}

#[test]
fn over_its_own_budget_an_sctp_association_is_aborted_with_out_of_resource() {
    let mut cfg = StackConfig::new(IfaceConfig::new(MAC_A, IP_A, 24));
    cfg.max_held_per_conn = PER_CONN;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; 4096], Access::LOCAL_WRITE, 0)
        .unwrap();
    let cq = Arc::new(CqRing::new(64));
    let ulp = ulp(pd, Some(&cq), SetupTimeouts::default());
    let mut p = RawSctpPeer::listening(cfg, mem, PORT, ulp, IP_B, 2, TICK);
    let (bad, good) = (p.open(40_000), p.open(40_001));
    assert!(
        p.run_until(10_000, |p| p
            .assocs
            .iter()
            .all(|a| a.events.contains(&DdpEvent::Connected))),
        "associations up"
    );
    let initiate = iwarp_control::sctp::initiate(4, 4, b"").unwrap();
    for i in [bad, good] {
        p.assocs[i].ddp.initiate(0, &initiate).unwrap();
    }
    // The application accepts both, with a receive posted on each (its
    // id is the connection's).
    let mut socks = Vec::new();
    assert!(
        p.run_until(10_000, |p| {
            for o in p.outputs.drain(..) {
                if let Output::Accepted { sock, .. } = o {
                    socks.push(sock);
                }
            }
            socks.len() == 2
        }),
        "both sessions requested"
    );
    for &sock in &socks {
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
        let sge = Sge {
            stag,
            to: 0,
            len: 4096,
        };
        p.stack.handle_command(
            Command::Iwarp(sock, HostCommand::PostRecv(sock as u64, sge.into())),
            now,
        );
    }
    assert!(
        p.run_until(10_000, |p| p.assocs.iter().all(|a| a
            .events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionAccepted { stream: 0, .. })))),
        "both sessions accepted"
    );

    // `bad` holds about 1.5 times the limit above a gap; `good` an eighth
    // of it, far above its next TSN (which it keeps using below).
    let tsn = p.assocs[bad].next_tsn.unwrap();
    middle_fragments(&mut p, bad, tsn.wrapping_add(1), 160);
    let tsn = p.assocs[good].next_tsn.unwrap();
    middle_fragments(&mut p, good, tsn.wrapping_add(1000), 14);
    assert!(
        p.run_until(2_000, |p| p.assocs[bad]
            .events
            .iter()
            .any(|e| matches!(e, DdpEvent::Closed(_)))),
        "the association over the budget was not ended; stack: {:?}",
        p.stack.stats()
    );
    p.run(200);
    assert_eq!(
        p.assocs[bad].events.last(),
        Some(&DdpEvent::Closed(CloseReason::PeerAbort(Some(
            cause_code::OUT_OF_RESOURCE
        ))))
    );
    let ended: Vec<_> = p
        .outputs
        .iter()
        .filter_map(|o| match o {
            Output::Cm(s, CmEvent::Disconnected) => Some(*s),
            _ => None,
        })
        .collect();
    assert_eq!(ended.len(), 1, "{:?}", p.outputs);
    let s = p.stack.stats();
    assert_eq!(s.budget_aborts, 1, "{s:?}");
    assert!(s.held_max_conn as usize <= PER_CONN, "{s:?}");
    assert!(s.held_octets as usize >= 14 * CHUNK, "{s:?}");

    // The other association goes on: a Send (untagged, QN 0, MSN 1) on
    // its session completes the receive posted on its connection.
    assert!(!p.assocs[good]
        .events
        .iter()
        .any(|e| matches!(e, DdpEvent::Closed(_))));
    let mut send = vec![0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0];
    send.extend_from_slice(b"still here");
    p.assocs[good].ddp.send_segment(0, &send).unwrap();
    // The aborted connection's receive completes flushed; the other's
    // with the Send.
    let mut got = Vec::new();
    assert!(
        p.run_until(2_000, |_| {
            while let Some(e) = cq.ring.pop() {
                got.push(e);
            }
            got.len() == 2
        }),
        "{got:?}"
    );
    for (sock, e) in got {
        let CqEntry::Done(c) = e else { panic!("{e:?}") };
        assert!(socks.contains(&sock));
        let want = if ended.contains(&sock) {
            (WcStatus::Flushed, 0)
        } else {
            (WcStatus::Success, 10)
        };
        assert_eq!(
            (c.wr_id, c.opcode, (c.status, c.byte_len)),
            (sock as u64, WcOpcode::Recv, want)
        );
    }
}
