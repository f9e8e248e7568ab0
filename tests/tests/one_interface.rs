//! One network interface per stack (issue 26): TCP and SCTP, raw and
//! inside UDP (RFC 6951), share one Ethernet/IPv4 interface, which parses
//! each frame once and dispatches it by IP protocol, answers ARP once and
//! keeps one neighbour cache for both. Two stacks in virtual time, no
//! threads; every frame between them is looked at.
//!
//! Before the interface was shared, the SCTP part of a stack had an ARP
//! cache of its own: its first packet to a peer TCP had already resolved
//! asked again (a second ARP request), and every SCTP frame was parsed
//! twice (once to be claimed, once to be taken).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_proto::mem::MemoryTable;
use iwarp_tests::raw_sctp::ulp;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, IpProtocol,
    Ipv4Address, Ipv4Packet,
};

const MAC_A: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x26, 1]);
const MAC_B: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0x26, 2]);
const IP_A: Ipv4Address = Ipv4Address::new(10, 26, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 26, 0, 2);
/// Virtual time per round: 1 ms.
const TICK: u64 = 1_000_000;

/// What one side sent, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
struct Sent {
    arp_requests: u32,
    arp_replies: u32,
    tcp: u32,
    sctp_raw: u32,
    sctp_udp: u32,
}

fn classify(f: &[u8], s: &mut Sent) {
    let eth = EthernetFrame::new_checked(f).unwrap();
    match eth.ethertype() {
        EtherType::ARP => {
            let a = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
            match a.operation {
                ArpOperation::REQUEST => s.arp_requests += 1,
                ArpOperation::REPLY => s.arp_replies += 1,
                op => panic!("ARP operation {op:?}"),
            }
        }
        EtherType::IPV4 => match Ipv4Packet::new_checked(eth.payload()).unwrap().protocol() {
            IpProtocol::TCP => s.tcp += 1,
            IpProtocol::SCTP => s.sctp_raw += 1,
            IpProtocol::UDP => s.sctp_udp += 1,
            p => panic!("IP protocol {p:?}"),
        },
        t => panic!("EtherType {t:?}"),
    }
}

struct Pair {
    a: Stack,
    b: Stack,
    now: u64,
    sent_a: Sent,
    sent_b: Sent,
    out_a: Vec<Output>,
    out_b: Vec<Output>,
}

impl Pair {
    fn new() -> Pair {
        let stack = |mac, ip| {
            Stack::new(
                StackConfig::new(IfaceConfig::new(mac, ip, 24)),
                MemoryTable::new(),
            )
        };
        Pair {
            a: stack(MAC_A, IP_A),
            b: stack(MAC_B, IP_B),
            now: 0,
            sent_a: Sent::default(),
            sent_b: Sent::default(),
            out_a: Vec::new(),
            out_b: Vec::new(),
        }
    }

    /// One round: each stack polls, and what it sent reaches the other.
    fn round(&mut self) {
        let mut fa: Vec<Vec<u8>> = Vec::new();
        let mut fb: Vec<Vec<u8>> = Vec::new();
        let (out_a, out_b) = (&mut self.out_a, &mut self.out_b);
        self.a
            .poll(self.now, &mut |p: &[&[u8]]| fa.push(p.concat()), &mut |o| {
                out_a.push(o)
            });
        self.b
            .poll(self.now, &mut |p: &[&[u8]]| fb.push(p.concat()), &mut |o| {
                out_b.push(o)
            });
        for f in &fa {
            classify(f, &mut self.sent_a);
            self.b.handle_frame(f, self.now);
        }
        for f in &fb {
            classify(f, &mut self.sent_b);
            self.a.handle_frame(f, self.now);
        }
        self.now += TICK;
    }

    /// Rounds until `done` holds of B's outputs (at most `n`).
    fn until_b(&mut self, n: usize, done: impl Fn(&Output) -> bool) {
        for _ in 0..n {
            self.round();
            if self.out_b.iter().any(&done) {
                return;
            }
        }
        panic!("not done in {n} rounds; B said {:?}", self.out_b);
    }
}

#[test]
fn tcp_and_sctp_share_one_arp_resolution_and_each_frame_is_parsed_once() {
    let mut p = Pair::new();
    let pd_a = p.a.mem.alloc_pd();
    let pd_b = p.b.mem.alloc_pd();
    let t = SetupTimeouts::default();
    // A listens on TCP and on SCTP before anything arrives: its SCTP
    // part exists when B's ARP request comes.
    p.a.handle_command(
        Command::Listen {
            transport: Transport::Tcp,
            port: 5001,
            ulp: Ulp::Stream,
        },
        0,
    );
    p.a.handle_command(
        Command::Listen {
            port: 7000,
            transport: Transport::Sctp,
            ulp: ulp(pd_a, None, t),
        },
        0,
    );
    // B: TCP first, which resolves A.
    p.b.handle_command(
        Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: IP_A,
            port: 5001,
            ulp: Ulp::Stream,
        },
        0,
    );
    p.until_b(100, |o| matches!(o, Output::Connected { token: 1, .. }));
    assert_eq!(p.sent_b.arp_requests, 1, "B asked for A once");
    assert_eq!(p.sent_a.arp_replies, 1, "A answered once");
    assert_eq!(p.sent_a.arp_requests, 0, "A learned B from its request");
    // Then SCTP, raw and inside UDP, to the peer TCP resolved: no ARP.
    for (token, transport) in [(2, Transport::Sctp), (3, Transport::SctpOverUdp)] {
        p.b.handle_command(
            Command::Connect {
                token,
                remote: IP_A,
                port: 7000,
                transport,
                ulp: ulp(pd_b, None, t),
            },
            p.now,
        );
        p.until_b(
            200,
            |o| matches!(o, Output::Connected { token: k, .. } if *k == token),
        );
    }
    for _ in 0..50 {
        p.round();
    }
    assert_eq!(p.sent_b.arp_requests, 1, "SCTP used the cache TCP filled");
    assert_eq!(p.sent_a.arp_replies, 1);
    assert_eq!(p.sent_a.arp_requests, 0);
    assert!(
        p.sent_b.sctp_raw > 0 && p.sent_b.sctp_udp > 0,
        "{:?}",
        p.sent_b
    );
    assert!(
        p.sent_a.sctp_raw > 0 && p.sent_a.sctp_udp > 0,
        "{:?}",
        p.sent_a
    );
    assert!(p.sent_a.tcp > 0 && p.sent_b.tcp > 0);
    for (s, sent_by_peer, sent) in [(&p.a, p.sent_b, p.sent_a), (&p.b, p.sent_a, p.sent_b)] {
        let i = s.iface().stats();
        let total = sent_by_peer.arp_requests
            + sent_by_peer.arp_replies
            + sent_by_peer.tcp
            + sent_by_peer.sctp_raw
            + sent_by_peer.sctp_udp;
        // Each frame went through the interface once, and each SCTP one
        // reached the SCTP part once, from that one parse.
        assert_eq!(i.rx_frames, u64::from(total));
        assert_eq!(
            i.rx_sctp,
            u64::from(sent_by_peer.sctp_raw + sent_by_peer.sctp_udp)
        );
        let h = s.sctp().unwrap().host().stats();
        assert_eq!(h.rx_packets, i.rx_sctp);
        assert_eq!(h.rx_udp, u64::from(sent_by_peer.sctp_udp));
        // What SCTP sent went out through the interface, with its IPv4
        // identification: one counter for every frame.
        assert_eq!(h.tx_packets, u64::from(sent.sctp_raw + sent.sctp_udp));
        assert_eq!(h.tx_udp, u64::from(sent.sctp_udp));
        assert_eq!(
            i.tx_frames,
            u64::from(
                sent.arp_requests + sent.arp_replies + sent.tcp + sent.sctp_raw + sent.sctp_udp
            )
        );
        assert_eq!(s.iface().arp().len(), 1, "one neighbour entry");
    }
}
