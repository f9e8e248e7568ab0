//! A hostile SCTP peer of a [`Stack`], in virtual time: its own
//! Ethernet/IPv4 interface (ARP answered as any host does) and real
//! RFC 5043 associations (`ddp_sctp` over `sctp_lite`, I/O-free) whose
//! handshakes and DDP Stream Sessions it runs like any client, beside
//! which it can send hand-made chunks with an association's tag — DATA
//! above a TSN gap, say, that the stack must hold. No threads, no clock:
//! [`RawSctpPeer::step`] advances time by a fixed tick, delivers what each
//! side sent and polls the stack.

use std::sync::Arc;

use ddp_sctp::{DdpAssociation, DdpEvent};
use iwarp_control::MpaConfig;
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::runtime::Engine;
use iwarp_datapath::stack::{Command, CqRing, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{MemoryTable, PdId};
use sctp_lite::assoc::Config;
use sctp_lite::wire::{emit_packet, ChunkRepr, HeaderRepr, SctpPacket};
use tcp_lite::iface::{IfaceConfig, Interface, SctpServed};
use tcp_lite::wire::{
    EtherType, EthernetAddress, EthernetFrame, EthernetRepr, IpProtocol, Ipv4Address, Ipv4Packet,
    Ipv4Repr, ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

/// Largest SCTP packet the peer sends (fits the stack's MTU of 1500 with
/// room for UDP encapsulation, as the stack's own packets do).
pub const MAX_PACKET: usize = 1472;

/// What the SCTP tests listen and connect with: iWARP with IRD and ORD
/// 4, no private data, 16-deep send and receive queues in `pd`,
/// completions to `cq` (if any), no SRQ, the setup and close timers of
/// `timeouts`; listeners hand each request to the application.
pub fn ulp(pd: PdId, cq: Option<&Arc<CqRing>>, timeouts: SetupTimeouts) -> Ulp {
    Ulp::Iwarp {
        mpa: MpaConfig {
            ird: 4,
            ord: 4,
            reply_timeout: timeouts.reply,
            request_timeout: timeouts.request,
            decision_timeout: timeouts.decision,
            close_timeout: timeouts.close,
            ..MpaConfig::default()
        },
        params: StreamParams {
            pd,
            emss: 0,
            sq_depth: 16,
            rq_depth: 16,
        },
        manual: true,
        cq: cq.map(|c| c.clone().into()),
        srq: None,
    }
}

/// One association as the peer sees it.
#[derive(Debug)]
pub struct PeerAssoc {
    /// Our port.
    pub port: u16,
    /// The association.
    pub ddp: DdpAssociation,
    /// Everything it reported, in order.
    pub events: Vec<DdpEvent>,
    /// The TSN after the last DATA chunk it sent (hand-made ones aside).
    pub next_tsn: Option<u32>,
    /// The type of every chunk the stack sent it, in order (RFC 9260
    /// §3.2: 6 ABORT, 7 SHUTDOWN, ...).
    pub chunk_types: Vec<u8>,
    /// Gone silent: what arrives is not handed to the association, and
    /// it neither sends nor runs its timers (a peer that went away).
    pub silent: bool,
    /// Not reading: the association runs (it acknowledges what fits its
    /// receive window, sends, runs its timers) but its events are not
    /// taken, so what arrives waits in it and its window closes (a slow
    /// reader; [`DdpAssociation::set_max_held`] bounds what DDP takes
    /// from SCTP meanwhile).
    pub stalled: bool,
}

/// The peer and the stack it talks to. See the [module docs](self).
#[derive(Debug)]
pub struct RawSctpPeer {
    /// The stack under test.
    pub stack: Stack,
    /// Its outputs since the test last took them.
    pub outputs: Vec<Output>,
    /// Our associations, by index.
    pub assocs: Vec<PeerAssoc>,
    iface: Interface,
    mac: EthernetAddress,
    ip: Ipv4Address,
    stack_mac: EthernetAddress,
    stack_ip: Ipv4Address,
    server_port: u16,
    now: u64,
    tick: u64,
    ident: u16,
    to_stack: Vec<Vec<u8>>,
}

impl RawSctpPeer {
    /// A peer at `ip` (MAC ending in `last`) talking to `stack` (whose
    /// interface is `stack_mac` / `stack_ip`), which listens (or will)
    /// for SCTP on `server_port`; `tick` ns per step.
    pub fn new(
        stack: Stack,
        stack_mac: EthernetAddress,
        stack_ip: Ipv4Address,
        server_port: u16,
        ip: Ipv4Address,
        last: u8,
        tick: u64,
    ) -> Self {
        let mac = EthernetAddress([0x02, 0, 0, 0, 0x76, last]);
        RawSctpPeer {
            stack,
            outputs: Vec::new(),
            assocs: Vec::new(),
            iface: Interface::new(IfaceConfig::new(mac, ip, 24)),
            mac,
            ip,
            stack_mac,
            stack_ip,
            server_port,
            now: 1_000_000,
            tick,
            ident: 0,
            to_stack: Vec::new(),
        }
    }

    /// A stack made of `cfg` and `mem` that listens for SCTP on `port`
    /// with `ulp` (from time 0), and a peer at `ip` (MAC ending in `last`)
    /// talking to it; `tick` ns per step.
    pub fn listening(
        cfg: StackConfig,
        mem: MemoryTable,
        port: u16,
        ulp: Ulp,
        ip: Ipv4Address,
        last: u8,
        tick: u64,
    ) -> Self {
        let (stack_mac, stack_ip) = (cfg.iface.mac, cfg.iface.ip);
        let mut stack = Stack::new(cfg, mem);
        stack.handle_command(
            Command::Listen {
                port,
                transport: Transport::Sctp,
                ulp,
            },
            0,
        );
        Self::new(stack, stack_mac, stack_ip, port, ip, last, tick)
    }

    /// Virtual time now (ns).
    pub fn now(&self) -> u64 {
        self.now
    }

    /// [`open`](Self::open) an association from `port` and step until it
    /// is up ([`DdpEvent::Connected`]), at most `n` steps; its index.
    ///
    /// # Panics
    /// If it is not up by then ("association up").
    pub fn open_connected(&mut self, port: u16, n: usize) -> usize {
        let i = self.open(port);
        assert!(
            self.run_until(n, |p| p.assocs[i].events.contains(&DdpEvent::Connected)),
            "association up"
        );
        i
    }

    /// Open an association from `port` (four streams, the DDP adaptation
    /// indication); its index in [`assocs`](Self::assocs).
    pub fn open(&mut self, port: u16) -> usize {
        self.open_with(port, |_| {})
    }

    /// [`open`](Self::open) with the configuration `adjust` makes of the
    /// usual one (a small receive buffer, say).
    pub fn open_with(&mut self, port: u16, adjust: impl FnOnce(&mut Config)) -> usize {
        let mut cfg = Config {
            secret: [port as u8; 16],
            streams: 4,
            max_packet: MAX_PACKET,
            ..Config::default()
        };
        adjust(&mut cfg);
        let ddp = DdpAssociation::connect(cfg, port, self.server_port, self.now, u64::from(port))
            .expect("a valid configuration");
        self.assocs.push(PeerAssoc {
            port,
            ddp,
            events: Vec::new(),
            next_tsn: None,
            chunk_types: Vec::new(),
            silent: false,
            stalled: false,
        });
        self.assocs.len() - 1
    }

    /// One packet of hand-made `chunks` on association `i`, with its
    /// ports and the stack's verification tag.
    pub fn send_chunks(&mut self, i: usize, chunks: &[ChunkRepr<'_>]) {
        let a = &self.assocs[i];
        let h = HeaderRepr {
            src_port: a.port,
            dst_port: self.server_port,
            verification_tag: a.ddp.sctp().peer_tag(),
        };
        let mut pkt = vec![0u8; 65_535];
        let n = emit_packet(&h, chunks, &mut pkt).expect("the chunks fit a packet");
        self.frame(&pkt[..n]);
    }

    /// Ethernet + IPv4 around an SCTP packet, queued for the stack.
    fn frame(&mut self, pkt: &[u8]) {
        let mut f = vec![0u8; ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + pkt.len()];
        let _ = EthernetRepr {
            src_addr: self.mac,
            dst_addr: self.stack_mac,
            ethertype: EtherType::IPV4,
        }
        .emit(&mut EthernetFrame::new_unchecked(&mut f[..]));
        self.ident = self.ident.wrapping_add(1);
        Ipv4Repr {
            src_addr: self.ip,
            dst_addr: self.stack_ip,
            protocol: IpProtocol::SCTP,
            payload_len: pkt.len(),
            ttl: 64,
            dscp: 0,
            ecn: 0,
            identification: self.ident,
            dont_frag: true,
            more_frags: false,
            fragment_offset: 0,
            options_len: 0,
        }
        .emit(&mut Ipv4Packet::new_unchecked(
            &mut f[ETHERNET_HEADER_LEN..],
        ))
        .expect("an SCTP packet fits IPv4");
        f[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN..].copy_from_slice(pkt);
        self.to_stack.push(f);
    }

    /// One tick: frames to the stack, a stack round, its frames to us
    /// (ARP answered, SCTP to the association of its port), then our
    /// associations' timers, events and packets.
    pub fn step(&mut self) {
        self.now += self.tick;
        let now = self.now;
        let from_stack =
            crate::stack_round(&mut self.stack, &mut self.to_stack, &mut self.outputs, now);
        for f in &from_stack {
            let Ok(eth) = EthernetFrame::new_checked(&f[..]) else {
                continue;
            };
            if eth.ethertype() == EtherType::ARP {
                let to = &mut self.to_stack;
                let _ = self
                    .iface
                    .receive_ip(f, now, SctpServed::NONE, &mut |r| to.push(r.to_vec()));
                continue;
            }
            let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
                continue;
            };
            if ip.protocol() != IpProtocol::SCTP || ip.dst_addr() != self.ip {
                continue;
            }
            let sctp = ip.payload();
            let Ok(p) = SctpPacket::new_checked(sctp) else {
                continue;
            };
            if let Some(a) = self.assocs.iter_mut().find(|a| a.port == p.dst_port()) {
                a.chunk_types.extend(p.chunks().flatten().map(|c| c.ty));
                if !a.silent {
                    a.ddp.handle_packet(now, sctp);
                }
            }
        }
        let mut buf = vec![0u8; MAX_PACKET];
        let mut out = Vec::new();
        for a in self.assocs.iter_mut().filter(|a| !a.silent) {
            if a.ddp.poll_timeout().is_some_and(|t| t <= now) {
                a.ddp.handle_timeout(now);
            }
            while let Some(e) = if a.stalled { None } else { a.ddp.poll_event() } {
                a.events.push(e);
            }
            while let Some(n) = a.ddp.poll_transmit(now, &mut buf) {
                if let Ok(p) = SctpPacket::new_checked(&buf[..n]) {
                    for c in p.chunks().flatten() {
                        if let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c) {
                            let next = d.tsn.wrapping_add(1);
                            let later =
                                a.next_tsn.is_none_or(|t| (next.wrapping_sub(t) as i32) > 0);
                            if later {
                                a.next_tsn = Some(next);
                            }
                        }
                    }
                }
                out.push(buf[..n].to_vec());
            }
        }
        for p in out {
            self.frame(&p);
        }
        let to = &mut self.to_stack;
        self.iface.poll(now, &mut |f| to.push(f.to_vec()));
    }

    /// `n` steps.
    pub fn run(&mut self, n: usize) {
        for _ in 0..n {
            self.step();
        }
    }

    /// Steps until `done` holds, at most `n`; whether it did.
    pub fn run_until(&mut self, n: usize, mut done: impl FnMut(&mut Self) -> bool) -> bool {
        for _ in 0..n {
            if done(self) {
                return true;
            }
            self.step();
        }
        done(self)
    }
}
