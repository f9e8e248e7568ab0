//! One Ethernet/IPv4 interface: the layer between frames and the
//! transports, with one ARP cache, one IPv4 identification and one send
//! path for all of them.
//!
//! I/O-free and clock-free like the rest of the crate:
//! [`Interface::receive_ip`] takes a received frame, parses it once
//! ([`ingress::parse`]) and dispatches it by IP protocol (as smoltcp's
//! `process_ipv4` matches `next_header`): a TCP datagram (its segment
//! borrowed from the frame, not parsed yet: `tcp-lite` checks and parses
//! it, so the payload still goes straight to the MPA deframer) or an SCTP
//! packet, raw or inside UDP to the encapsulation port (RFC 6951), comes
//! back to the caller; ARP and ICMP Echo are answered here through the
//! `tx` callback.
//!
//! Sending: every transport's datagram takes the same routing, size and
//! ARP steps, the same IPv4 identification and the same hold queue while
//! the next hop resolves. [`Interface::send_ipv4_parts`] sends a datagram
//! whose transport header a callback writes, its payload gathered from
//! where it lies; [`Interface::send_ipv4_sg`] one of known length whose
//! whole payload a callback writes in place, in a buffer the device lends
//! ([`FrameSink::send_built_sg`], in pieces where the device's buffers
//! are smaller than the frame); [`Interface::send_ipv4_upto`] one whose
//! length is known only once built ([`FrameSink::send_built_upto`]).
//! `tcp-lite` frames TCP segments through the first two (its
//! `iface::TcpInterface`), the SCTP glue through the third.
//! [`Interface::poll`] retransmits ARP requests.
//!
//! What it refuses, counted in [`IfaceStats`] and never a panic:
//! frames for another MAC, IPv4 datagrams for another address, fragments
//! (RFC 791 §2.3: a host must reassemble, but an iWARP peer sends with DF and
//! within the path MTU, so reassembly is left out and each fragment is
//! dropped and counted), datagrams with IP options (RFC 1122 §3.2.1.8 lets a
//! host ignore options it does not implement; we implement none and drop the
//! datagram so nothing slips past a source route), bad header checksums
//! (RFC 1122 §3.2.1.2 MUST silently discard), UDP datagrams whose
//! checksum fails (RFC 768), and protocols other than TCP, ICMP and the
//! SCTP the caller serves.
//!
//! The counters of the TCP checks ([`IfaceStats::rx_tcp`],
//! [`IfaceStats::rx_bad_checksum`], [`IfaceStats::rx_partial_checksum`],
//! [`IfaceStats::tx_fill_failed`]) and [`IfaceConfig::accept_partial_checksum`]
//! live here so that one interface keeps one set of counters; `tcp-lite`
//! counts into them ([`Interface::stats_mut`]).

use std::sync::Arc;

use crate::arp::{self, ArpCache, Enqueue, Resolve, SharedNeighbours};
use crate::egress::{self, Source};
use crate::ingress::{self, Ingress, Refused};
use crate::wire::{
    ArpRepr, EthernetAddress, Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address,
    ETHERNET_HEADER_LEN, IPV4_HEADER_LEN,
};

/// Octets of the Ethernet and IPv4 headers in front of every datagram the
/// interface sends (no IP options).
const L3: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;

/// Interface settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IfaceConfig {
    /// Our MAC address.
    pub mac: EthernetAddress,
    /// Our IPv4 address.
    pub ip: Ipv4Address,
    /// Prefix length of our subnet (0..=32).
    pub prefix_len: u8,
    /// Router for destinations outside the subnet.
    pub gateway: Option<Ipv4Address>,
    /// Largest IP datagram we send (the link MTU).
    pub mtu: usize,
    /// Time to live of what we send.
    pub ttl: u8,
    /// ARP cache tunables.
    pub arp: arp::Config,
    /// Take TCP segments whose Checksum field holds only the pseudo-header
    /// sum: that is what a Linux sender with TX checksum offload leaves
    /// for the NIC to finish (`CHECKSUM_PARTIAL`), and a veth peer hands
    /// such frames to an XDP program unfinished (the kernel trusts them
    /// too: they never left the host). `tcp-lite`'s check of a received
    /// segment reads it. Off by default: on a wire, such a segment is as
    /// corrupt as any other.
    pub accept_partial_checksum: bool,
    /// The link cannot alter a frame, and the peer is set the same way:
    /// shared memory between two stacks on one host (DPDK memif, an
    /// in-memory link), as a Linux veth is, whose two ends skip TCP
    /// checksums (`CHECKSUM_PARTIAL` in, taken as verified out). Sent TCP
    /// segments then carry only the pseudo-header sum in their Checksum
    /// field, as a sender with TX checksum offload leaves it for the NIC,
    /// and received ones are taken without being summed (the SCTP part
    /// of a stack skips its CRC32c the same way). A peer that verifies
    /// counts such segments in
    /// [`IfaceStats::rx_partial_checksum`] and drops them unless it
    /// accepts partial checksums. Off by default: on a wire, or with a
    /// peer that is not ours, RFC 9293 §3.1 MUST-2 and MUST-3 (generate
    /// and check the checksum) hold.
    pub trusted_link: bool,
}

impl IfaceConfig {
    /// An interface with a /24 subnet, MTU 1500, TTL 64, default ARP tunables.
    pub fn new(mac: EthernetAddress, ip: Ipv4Address, prefix_len: u8) -> Self {
        IfaceConfig {
            mac,
            ip,
            prefix_len,
            gateway: None,
            mtu: 1500,
            ttl: 64,
            arp: arp::Config::default(),
            accept_partial_checksum: false,
            trusted_link: false,
        }
    }
}

/// Counters; they only go up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IfaceStats {
    /// Frames handed to [`Interface::receive_ip`].
    pub rx_frames: u64,
    /// Frames that failed to parse at the Ethernet, ARP, IPv4, ICMP, UDP or TCP layer.
    pub rx_malformed: u64,
    /// Frames addressed to another MAC.
    pub rx_not_for_us_mac: u64,
    /// IPv4 datagrams addressed to another host.
    pub rx_not_for_us_ip: u64,
    /// IPv4 fragments, dropped.
    pub rx_fragments: u64,
    /// IPv4 datagrams with options, dropped.
    pub rx_options: u64,
    /// IPv4 datagrams of protocols we do not serve (SCTP and UDP
    /// included when the caller serves no SCTP, or the UDP port is not
    /// its encapsulation port).
    pub rx_other_protocol: u64,
    /// Frames of EtherTypes we do not serve.
    pub rx_other_ethertype: u64,
    /// TCP segments that passed `tcp-lite`'s check (checksum and header).
    pub rx_tcp: u64,
    /// SCTP packets returned to the caller, raw or from inside UDP.
    pub rx_sctp: u64,
    /// UDP datagrams dropped because their (non-zero) checksum did not
    /// verify (RFC 768).
    pub rx_udp_bad_checksum: u64,
    /// TCP segments dropped because their checksum did not verify (partial
    /// checksums included, unless accepted).
    pub rx_bad_checksum: u64,
    /// TCP segments whose Checksum field held only the pseudo-header sum
    /// (TX checksum offload on the sender): dropped (and also counted in
    /// `rx_bad_checksum`), or taken with
    /// [`IfaceConfig::accept_partial_checksum`].
    pub rx_partial_checksum: u64,
    /// ICMP Echo requests answered.
    pub icmp_echo_replies: u64,
    /// Frames handed to `tx`.
    pub tx_frames: u64,
    /// Frames held while ARP resolved their next hop.
    pub tx_queued: u64,
    /// Frames dropped: no route, resolution failed, or the hold queue overflowed.
    pub tx_dropped: u64,
    /// Segments too large for the MTU, refused.
    pub tx_too_big: u64,
    /// Filled TCP segments (`tcp-lite`'s `send_tcp_filled`) whose
    /// payload could not be written: nothing sent.
    pub tx_fill_failed: u64,
}

impl IfaceStats {
    /// Add the counters of `o` (another loop's interface of one context).
    pub fn add(&mut self, o: &IfaceStats) {
        let IfaceStats {
            rx_frames,
            rx_malformed,
            rx_not_for_us_mac,
            rx_not_for_us_ip,
            rx_fragments,
            rx_options,
            rx_other_protocol,
            rx_other_ethertype,
            rx_tcp,
            rx_sctp,
            rx_udp_bad_checksum,
            rx_bad_checksum,
            rx_partial_checksum,
            icmp_echo_replies,
            tx_frames,
            tx_queued,
            tx_dropped,
            tx_too_big,
            tx_fill_failed,
        } = *o;
        self.rx_frames += rx_frames;
        self.rx_malformed += rx_malformed;
        self.rx_not_for_us_mac += rx_not_for_us_mac;
        self.rx_not_for_us_ip += rx_not_for_us_ip;
        self.rx_fragments += rx_fragments;
        self.rx_options += rx_options;
        self.rx_other_protocol += rx_other_protocol;
        self.rx_other_ethertype += rx_other_ethertype;
        self.rx_tcp += rx_tcp;
        self.rx_sctp += rx_sctp;
        self.rx_udp_bad_checksum += rx_udp_bad_checksum;
        self.rx_bad_checksum += rx_bad_checksum;
        self.rx_partial_checksum += rx_partial_checksum;
        self.icmp_echo_replies += icmp_echo_replies;
        self.tx_frames += tx_frames;
        self.tx_queued += tx_queued;
        self.tx_dropped += tx_dropped;
        self.tx_too_big += tx_too_big;
        self.tx_fill_failed += tx_fill_failed;
    }

    /// When most TCP segments dropped for a bad checksum carried a partial
    /// one (and none was accepted), the likely cause and the fix; `None`
    /// otherwise.
    pub fn checksum_diagnosis(&self) -> Option<String> {
        let bad = self.rx_bad_checksum;
        let partial = self.rx_partial_checksum;
        if bad == 0 || partial == 0 || partial > bad || partial * 2 < bad {
            return None;
        }
        Some(format!(
            "{partial} of {bad} TCP segments dropped for a bad checksum carried only the \
             pseudo-header sum: the sender has TX checksum offload on and the frames never \
             reached a NIC that would finish the checksum (typically the peer end of a veth \
             pair), or the sender trusts the link and this end does not. Fix: turn the \
             offload off on the sending interface (`ethtool -K <peer> tx off`), accept such \
             segments (IfaceConfig::accept_partial_checksum), or, on shared memory between \
             two of our stacks, trust the link at both ends (IfaceConfig::trusted_link)"
        ))
    }
}

/// Why the interface did not send a datagram now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// The datagram would exceed the MTU.
    TooBig,
    /// The destination is off-link and there is no gateway.
    NoRoute,
    /// ARP resolution of the next hop failed recently; the datagram was
    /// dropped (the transport's retransmission will try again).
    Unreachable,
    /// The payload of a filled segment could not be written (`tcp-lite`'s
    /// `PayloadFill::write` returned false): nothing was sent or held.
    FillFailed,
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            SendError::TooBig => "datagram larger than the MTU",
            SendError::NoRoute => "no route to host",
            SendError::Unreachable => "host unreachable (ARP resolution failed)",
            SendError::FillFailed => "the segment's payload could not be written",
        })
    }
}

/// Where an interface's frames go: a device's transmit path.
///
/// A frame is handed over either as consecutive parts
/// ([`send_parts`](Self::send_parts): headers built here, payload where it
/// lies), which the device copies into its buffer in one pass, or built in
/// place ([`send_built`](Self::send_built)): the device lends a buffer of
/// the frame's length and the interface writes the whole frame into it,
/// payload included, so the payload is written once, straight into the
/// device's memory.
///
/// Any `FnMut(&[&[u8]])` closure is a sink (a built frame is built into a
/// `Vec` first and handed over as one part). Where a `&mut dyn FrameSink`
/// is expected, a closure needs its argument type written:
/// `&mut |f: &[&[u8]]| ...`.
pub trait FrameSink {
    /// Send one frame given as consecutive parts. Whether the device took
    /// it (false: dropped, as a full NIC queue drops; TCP retransmits).
    fn send_parts(&mut self, parts: &[&[u8]]) -> bool;
    /// Send one frame of exactly `len` octets that `build` writes into a
    /// buffer the device lends (of exactly `len` octets). `build` returning
    /// false cancels: nothing is sent and the buffer goes back. A device
    /// with no buffer free does not call `build`. Whether the frame was
    /// sent.
    fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool;
    /// [`send_built`](Self::send_built) for a device whose buffers may be
    /// smaller than the frame: `build` gets the frame as consecutive
    /// pieces (`len` octets in all, each but the last a whole device
    /// buffer; the first at least 2048 octets or the whole frame). The
    /// default lends one piece through `send_built`. AF_XDP lends the UMEM
    /// chunks of a multi-buffer frame, so a jumbo frame too is built in
    /// place.
    fn send_built_sg(
        &mut self,
        len: usize,
        build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
    ) -> bool {
        self.send_built(len, &mut |b| build(&mut [b]))
    }
    /// Send one frame whose length is known only once built: `build`
    /// writes it into a buffer of `max` octets the device lends and
    /// returns its length (at most `max`), or `None` to cancel. A device
    /// with no buffer free does not call `build`. Whether the frame was
    /// sent. The default builds in a scratch buffer and sends it as one
    /// part (one extra copy); sinks over devices that lend buffers
    /// override it.
    fn send_built_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        let mut frame = vec![0u8; max];
        match build(&mut frame) {
            Some(n) if n <= max => self.send_parts(&[&frame[..n]]),
            _ => false,
        }
    }
    /// Make the frames sent so far visible to the peer now, where the
    /// device holds them until its flush (memif publishes its ring's head,
    /// AF_XDP kicks the kernel). The loop flushes at the end of each round
    /// anyway; the engine calls this where a round's remaining work would
    /// otherwise hold back a reply it already sent. The default does
    /// nothing (a sink whose frames leave as they are sent).
    fn publish(&mut self) {}
}

impl<F: FnMut(&[&[u8]]) + ?Sized> FrameSink for F {
    fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
        self(parts);
        true
    }

    fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        let mut frame = vec![0u8; len];
        if !build(&mut frame) {
            return false;
        }
        self(&[&frame]);
        true
    }
}

/// Write Ethernet and IPv4 headers for a `payload_len`-octet datagram from
/// `cfg` into the start of `buf` (at least `ETHERNET_HEADER_LEN +
/// IPV4_HEADER_LEN` octets): [`egress::write_eth_ipv4`].
#[inline]
fn write_l2_l3(
    cfg: &IfaceConfig,
    ident: u16,
    buf: &mut [u8],
    dst_mac: EthernetAddress,
    dst: Ipv4Address,
    protocol: IpProtocol,
    payload_len: usize,
) {
    // The callers size `buf` and bound `payload_len` by the MTU.
    let _ = egress::write_eth_ipv4(
        &Source {
            mac: cfg.mac,
            ip: cfg.ip,
            ttl: cfg.ttl,
        },
        ident,
        buf,
        dst_mac,
        dst,
        protocol,
        payload_len,
    );
}

/// An SCTP packet received for our address, raw (IPv4 protocol 132) or
/// inside UDP to the encapsulation port (RFC 6951).
#[derive(Debug, Clone, Copy)]
pub struct SctpIngress<'a> {
    /// Sender's address.
    pub src: Ipv4Address,
    /// The sender's MAC (answers made while receiving go straight back).
    pub src_mac: EthernetAddress,
    /// The UDP source port when it came inside UDP, `None` when raw.
    pub udp: Option<u16>,
    /// The SCTP packet, borrowed from the frame (not parsed yet).
    pub packet: &'a [u8],
}

/// A TCP segment received for our address, borrowed from the frame, not
/// yet parsed: what TCP needs of the datagram (the addresses of its
/// pseudo-header, RFC 9293 §3.1) and the segment.
#[derive(Debug, Clone, Copy)]
pub struct TcpDatagram<'a> {
    /// Sender's address.
    pub src: Ipv4Address,
    /// Our address, the datagram's destination.
    pub dst: Ipv4Address,
    /// The sender's MAC (for diagnostics; replies go through ARP).
    pub src_mac: EthernetAddress,
    /// The TCP segment (the IP payload).
    pub segment: &'a [u8],
}

/// What [`Interface::receive_ip`] hands the transports.
#[derive(Debug)]
pub enum IpIngress<'a> {
    /// A TCP segment for our address; `tcp-lite` checks and parses it.
    Tcp(TcpDatagram<'a>),
    /// An SCTP packet.
    Sctp(SctpIngress<'a>),
}

/// Which SCTP packets [`Interface::receive_ip`] hands up; the rest are
/// counted as [`IfaceStats::rx_other_protocol`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SctpServed {
    /// IPv4 protocol 132.
    pub raw: bool,
    /// UDP datagrams to this port (RFC 6951; IANA's is 9899).
    pub udp_port: Option<u16>,
}

impl SctpServed {
    /// No SCTP: a TCP-only interface.
    pub const NONE: SctpServed = SctpServed {
        raw: false,
        udp_port: None,
    };
}

/// One Ethernet/IPv4 interface. See the [module docs](self).
#[derive(Debug)]
pub struct Interface {
    cfg: IfaceConfig,
    arp: ArpCache<Vec<u8>>,
    stats: IfaceStats,
    ident: u16,
    scratch: Vec<u8>,
    /// Neighbours shared with the other interfaces of a multi-queue
    /// context ([`Interface::share_neighbours`]).
    shared: Option<Arc<SharedNeighbours>>,
    /// The shared table's version when last looked at for pending
    /// resolutions.
    shared_seen: u64,
    /// When to look at the shared table next for a pending resolution
    /// (`u64::MAX`: none pending, or no shared table).
    shared_check_at: u64,
}

impl Interface {
    /// An interface with `cfg`.
    pub fn new(cfg: IfaceConfig) -> Self {
        Interface {
            arp: ArpCache::new(cfg.mac, cfg.ip, cfg.arp),
            cfg,
            stats: IfaceStats::default(),
            ident: 0,
            scratch: Vec::new(),
            shared: None,
            shared_seen: 0,
            shared_check_at: u64::MAX,
        }
    }

    /// Share neighbours with the other interfaces of one address and link
    /// ([`SharedNeighbours`]): publish what ARP packets received here
    /// teach, and look there when the own cache misses, and while a
    /// resolution is pending (ARP replies reach only one of the
    /// interfaces of a multi-queue context).
    pub fn share_neighbours(&mut self, shared: Arc<SharedNeighbours>) {
        self.shared = Some(shared);
    }

    /// Settings.
    pub fn config(&self) -> &IfaceConfig {
        &self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> &IfaceStats {
        &self.stats
    }

    /// Counters, for the transports beside the interface that count into
    /// them (`tcp-lite`'s check of a received segment and its filled
    /// sends).
    pub fn stats_mut(&mut self) -> &mut IfaceStats {
        &mut self.stats
    }

    /// The ARP cache (for counters and inspection).
    pub fn arp(&self) -> &ArpCache<Vec<u8>> {
        &self.arp
    }

    /// Largest IP payload (a transport's header and payload) that fits the
    /// MTU.
    #[inline]
    pub fn max_payload_len(&self) -> usize {
        self.cfg.mtu.saturating_sub(IPV4_HEADER_LEN)
    }

    /// Whether `ip` is on our subnet.
    pub fn on_link(&self, ip: Ipv4Address) -> bool {
        let bits = u32::from(self.cfg.prefix_len.min(32));
        let mask = if bits == 0 {
            0
        } else {
            u32::MAX << (32 - bits)
        };
        (u32::from_be_bytes(ip.0) & mask) == (u32::from_be_bytes(self.cfg.ip.0) & mask)
    }

    /// Handle one received frame, parsed once and dispatched by protocol
    /// (as smoltcp's `process_ipv4` matches `next_header`): ARP answered
    /// and learned here (one cache for every transport), ICMP Echo
    /// answered here, a TCP datagram or an SCTP packet `sctp` serves
    /// returned; everything else counted and dropped.
    #[inline]
    pub fn receive_ip<'a>(
        &mut self,
        frame: &'a [u8],
        now: u64,
        sctp: SctpServed,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Option<IpIngress<'a>> {
        self.stats.rx_frames += 1;
        match ingress::parse(frame, self.cfg.mac, self.cfg.ip) {
            Ingress::Tcp(d) => Some(IpIngress::Tcp(TcpDatagram {
                src: d.ip.src_addr,
                dst: d.ip.dst_addr,
                src_mac: d.src_mac,
                segment: d.payload,
            })),
            Ingress::Sctp(d) if sctp.raw => {
                self.stats.rx_sctp += 1;
                Some(IpIngress::Sctp(SctpIngress {
                    src: d.ip.src_addr,
                    src_mac: d.src_mac,
                    udp: None,
                    packet: d.payload,
                }))
            }
            Ingress::Udp(d, ports) if sctp.udp_port == Some(ports.dst_port) => {
                self.stats.rx_sctp += 1;
                Some(IpIngress::Sctp(SctpIngress {
                    src: d.ip.src_addr,
                    src_mac: d.src_mac,
                    udp: Some(ports.src_port),
                    packet: d.payload,
                }))
            }
            Ingress::Sctp(_) | Ingress::Udp(..) => {
                self.stats.rx_other_protocol += 1;
                None
            }
            Ingress::Icmp(d) => {
                self.receive_icmp(d.payload, d.ip.src_addr, d.src_mac, tx);
                None
            }
            Ingress::Arp(repr) => {
                self.receive_arp(&repr, now, tx);
                None
            }
            Ingress::Dropped(why) => {
                self.refused(why);
                None
            }
        }
    }

    /// Count a frame [`ingress::parse`] refused (out of the receive path
    /// that every frame inlines).
    #[cold]
    #[inline(never)]
    fn refused(&mut self, why: Refused) {
        let s = &mut self.stats;
        *match why {
            Refused::Malformed => &mut s.rx_malformed,
            Refused::NotForUsMac => &mut s.rx_not_for_us_mac,
            Refused::NotForUsIp => &mut s.rx_not_for_us_ip,
            Refused::Fragment => &mut s.rx_fragments,
            Refused::Options => &mut s.rx_options,
            Refused::OtherProtocol(_) => &mut s.rx_other_protocol,
            Refused::OtherEthertype(_) => &mut s.rx_other_ethertype,
            Refused::UdpBadChecksum => &mut s.rx_udp_bad_checksum,
        } += 1;
    }

    fn receive_arp(&mut self, repr: &ArpRepr, now: u64, tx: &mut dyn FnMut(&[u8])) {
        if let Some(reply) = self.arp.process(repr, now) {
            self.emit_arp(&reply, tx);
        }
        if let Some(sh) = &self.shared {
            let ip = repr.source_protocol_addr;
            if let Some((mac, expires_at)) = self.arp.resolved(ip, now) {
                sh.publish(ip, mac, expires_at);
            }
        }
        self.flush_ready(tx);
    }

    /// Adopt what the shared table knows of addresses pending here, and
    /// send the frames held for them.
    #[inline(never)]
    fn adopt_shared(&mut self, now: u64, tx: &mut dyn FnMut(&[u8])) {
        let Some(sh) = self.shared.clone() else {
            self.shared_check_at = u64::MAX;
            return;
        };
        let version = sh.version();
        if version != self.shared_seen {
            self.shared_seen = version;
            let pending: Vec<Ipv4Address> = self.arp.pending().collect();
            for ip in pending {
                if let Some((mac, expires_at)) = sh.get(ip, now) {
                    self.arp.insert_until(ip, mac, expires_at, now);
                }
            }
            self.flush_ready(tx);
        }
        self.shared_check_at = if self.arp.pending().next().is_some() {
            now.saturating_add(arp::SHARED_RECHECK)
        } else {
            u64::MAX
        };
    }

    fn receive_icmp(
        &mut self,
        body: &[u8],
        src: Ipv4Address,
        src_mac: EthernetAddress,
        tx: &mut dyn FnMut(&[u8]),
    ) {
        let Ok(pkt) = Icmpv4Packet::new_checked(body) else {
            self.stats.rx_malformed += 1;
            return;
        };
        let Ok(Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }) = Icmpv4Repr::parse(&pkt)
        else {
            // Echo replies and unsupported messages: nothing to do.
            return;
        };
        let reply = Icmpv4Repr::EchoReply {
            ident,
            seq_no,
            data,
        };
        let len = reply.buffer_len();
        if IPV4_HEADER_LEN + len > self.cfg.mtu {
            self.stats.tx_too_big += 1;
            return;
        }
        // RFC 1122 §3.2.2.6: the reply goes back the way the request came,
        // so answer the sender's MAC directly (no ARP round trip for a ping).
        let mut buf = std::mem::take(&mut self.scratch);
        let total = self.frame_header(&mut buf, src_mac, src, IpProtocol::ICMP, len, len);
        let ok = reply
            .emit(&mut Icmpv4Packet::new_unchecked(
                &mut buf[ETHERNET_HEADER_LEN + IPV4_HEADER_LEN..total],
            ))
            .is_ok();
        if ok {
            self.stats.icmp_echo_replies += 1;
            self.stats.tx_frames += 1;
            tx(&buf[..total]);
        }
        self.scratch = buf;
    }

    /// Write Ethernet and IPv4 headers for a `payload_len`-octet datagram
    /// into `buf`, resized to the headers plus `room` octets (the whole
    /// payload, or only the part written here when the rest is gathered
    /// from elsewhere), returning that length.
    fn frame_header(
        &mut self,
        buf: &mut Vec<u8>,
        dst_mac: EthernetAddress,
        dst: Ipv4Address,
        protocol: IpProtocol,
        payload_len: usize,
        room: usize,
    ) -> usize {
        let total = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + room;
        buf.clear();
        buf.resize(total, 0);
        self.ident = self.ident.wrapping_add(1);
        write_l2_l3(
            &self.cfg,
            self.ident,
            buf,
            dst_mac,
            dst,
            protocol,
            payload_len,
        );
        total
    }

    fn emit_arp(&mut self, repr: &ArpRepr, tx: &mut dyn FnMut(&[u8])) {
        let mut buf = [0u8; arp::FRAME_LEN];
        if let Ok(n) = arp::emit_frame(repr, self.cfg.mac, &mut buf) {
            self.stats.tx_frames += 1;
            tx(&buf[..n]);
        }
    }

    fn flush_ready(&mut self, tx: &mut dyn FnMut(&[u8])) {
        while let Some((mac, mut frame)) = self.arp.pop_ready() {
            if let Some(d) = frame.get_mut(..6) {
                d.copy_from_slice(&mac.0);
            }
            self.stats.tx_frames += 1;
            tx(&frame);
        }
    }

    /// The routing, size and ARP steps shared by
    /// [`send_ipv4_parts`](Self::send_ipv4_parts),
    /// [`send_ipv4_sg`](Self::send_ipv4_sg) and
    /// [`send_ipv4_upto`](Self::send_ipv4_upto) for a `len`-octet IP
    /// payload: the next hop and its MAC if known (`None`: resolution
    /// pending; an ARP request has gone out through `tx` if one was due).
    ///
    /// The fast path: `dst` is the address the ARP cache last found
    /// resolved, so it is its own next hop (it was resolved directly: on
    /// the link, or the gateway itself) and its MAC is known, without the
    /// route or the table.
    #[inline]
    fn route(
        &mut self,
        dst: Ipv4Address,
        len: usize,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(Ipv4Address, Option<EthernetAddress>), SendError> {
        if len <= self.max_payload_len() {
            if let Some(mac) = self.arp.recent(dst, now) {
                return Ok((dst, Some(mac)));
            }
        }
        self.route_resolve(dst, len, now, tx)
    }

    #[inline(never)]
    fn route_resolve(
        &mut self,
        dst: Ipv4Address,
        len: usize,
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(Ipv4Address, Option<EthernetAddress>), SendError> {
        if len > self.max_payload_len() {
            self.stats.tx_too_big += 1;
            return Err(SendError::TooBig);
        }
        let hop = if self.on_link(dst) {
            dst
        } else if let Some(gw) = self.cfg.gateway {
            gw
        } else {
            self.stats.tx_dropped += 1;
            return Err(SendError::NoRoute);
        };
        if let Some(sh) = &self.shared {
            // A miss here: another interface of the context may know it.
            if self.arp.lookup(hop, now).is_none() {
                if let Some((mac, expires_at)) = sh.get(hop, now) {
                    self.arp.insert_until(hop, mac, expires_at, now);
                    self.flush_ready(&mut |f| {
                        tx.send_parts(&[f]);
                    });
                }
            }
        }
        let (mac, request) = match self.arp.resolve(hop, now) {
            Resolve::Known(mac) => (Some(mac), None),
            Resolve::SendRequest(r) => (None, Some(r)),
            Resolve::Pending => (None, None),
            Resolve::Failed => {
                self.stats.tx_dropped += 1;
                return Err(SendError::Unreachable);
            }
        };
        if let Some(r) = request {
            self.emit_arp(&r, &mut |f| {
                tx.send_parts(&[f]);
            });
        }
        if mac.is_none() && self.shared.is_some() {
            self.shared_check_at = self
                .shared_check_at
                .min(now.saturating_add(arp::SHARED_RECHECK));
            self.arp.wake_at(self.shared_check_at);
        }
        Ok((hop, mac))
    }

    /// Hold `frame` for `hop` until ARP resolves it, charged its buffer
    /// (trimmed to the frame) and the `Vec` that owns it.
    fn hold(&mut self, hop: Ipv4Address, mut frame: Vec<u8>) -> Result<(), SendError> {
        self.stats.tx_queued += 1;
        frame.shrink_to_fit();
        let octets = frame.capacity() + std::mem::size_of::<Vec<u8>>();
        match self.arp.enqueue(hop, frame, octets) {
            Enqueue::Queued => Ok(()),
            Enqueue::DroppedOldest(old) => {
                self.stats.tx_dropped += old.len() as u64;
                Ok(())
            }
            Enqueue::TooLarge(_) => {
                self.stats.tx_dropped += 1;
                Ok(())
            }
            Enqueue::Refused(_) => {
                self.stats.tx_dropped += 1;
                Err(SendError::Unreachable)
            }
        }
    }

    /// Send one IPv4 datagram of `protocol` to `dst`: a transport header
    /// of `head_len` octets that `head` writes, then `payload` where it
    /// lies. Straight out through `tx` when the next hop's MAC is known,
    /// or held (and an ARP request sent) until it resolves. `Ok` means
    /// sent or held (a device that refuses the frame drops it as a full
    /// NIC queue would; the transport retransmits), or that `head` could
    /// not write the header (false): nothing sent, counted in
    /// [`IfaceStats::tx_dropped`].
    ///
    /// The frame goes to [`FrameSink::send_parts`] as consecutive parts,
    /// the headers and then the payload where it lies (a TCP send
    /// buffer): a device copies both into its own buffer in one pass, so
    /// the data is not first copied into a frame here.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn send_ipv4_parts(
        &mut self,
        dst: Ipv4Address,
        protocol: IpProtocol,
        head_len: usize,
        payload: &[u8],
        now: u64,
        tx: &mut dyn FrameSink,
        mut head: impl FnMut(&mut [u8]) -> bool,
    ) -> Result<(), SendError> {
        let len = head_len + payload.len();
        let (hop, mac) = self.route(dst, len, now, tx)?;
        let mut buf = std::mem::take(&mut self.scratch);
        let headers = self.frame_header(
            &mut buf,
            mac.unwrap_or(EthernetAddress([0; 6])),
            dst,
            protocol,
            len,
            head_len,
        );
        let result = if !head(&mut buf[L3..headers]) {
            self.stats.tx_dropped += 1;
            Ok(())
        } else if mac.is_some() {
            self.stats.tx_frames += 1;
            tx.send_parts(&[&buf[..headers], payload]);
            Ok(())
        } else {
            self.hold(hop, [&buf[..headers], payload].concat())
        };
        self.scratch = buf;
        result
    }

    /// Send one IPv4 datagram of `protocol` to `dst`, exactly `len`
    /// octets, all of which `build` writes in place: the same routing,
    /// size and ARP rules, IPv4 identification and hold queue as
    /// [`send_ipv4_parts`](Self::send_ipv4_parts).
    ///
    /// With the next hop's MAC known, the frame is built in a buffer the
    /// device lends ([`FrameSink::send_built_sg`]): `build(first, rest)`
    /// gets the IP payload as consecutive pieces, `first` behind the
    /// Ethernet and IPv4 headers in the device's first buffer and `rest`
    /// its further buffers (empty unless the frame is larger than one),
    /// so the payload is written once, straight into the device's memory;
    /// the headers are written after it. While ARP resolves, the frame is
    /// built the same way into a `Vec` (one piece) and held.
    ///
    /// `Ok(true)`: a datagram was built (sent, held, or refused by the
    /// device as a full NIC queue refuses: the transport retransmits).
    /// `Ok(false)`: nothing built: `build` returned false (nothing sent,
    /// held or counted: the caller counts why), the device had no buffer
    /// and did not call it (counted as a frame handed to `tx`), or the
    /// device lent a buffer of the wrong length (counted in
    /// [`IfaceStats::tx_dropped`]).
    #[inline]
    pub fn send_ipv4_sg(
        &mut self,
        dst: Ipv4Address,
        protocol: IpProtocol,
        len: usize,
        now: u64,
        tx: &mut dyn FrameSink,
        mut build: impl FnMut(&mut [u8], &mut [&mut [u8]]) -> bool,
    ) -> Result<bool, SendError> {
        /// How the device's part of one build ended.
        #[derive(Clone, Copy, PartialEq, Eq)]
        enum Lent {
            NotCalled,
            WrongLength,
            Cancelled,
            Built,
        }
        let (hop, mac) = self.route(dst, len, now, tx)?;
        let frame_len = L3 + len;
        let ident = self.ident.wrapping_add(1);
        let cfg = &self.cfg;
        let Some(dst_mac) = mac else {
            let mut f = vec![0u8; frame_len];
            let (head, payload) = f.split_at_mut(L3);
            if !build(payload, &mut []) {
                return Ok(false);
            }
            write_l2_l3(
                cfg,
                ident,
                head,
                EthernetAddress([0; 6]),
                dst,
                protocol,
                len,
            );
            self.ident = ident;
            return self.hold(hop, f).map(|()| true);
        };
        let mut lent = Lent::NotCalled;
        tx.send_built_sg(frame_len, &mut |pieces| {
            let total: usize = pieces.iter().map(|p| p.len()).sum();
            let Some((first, rest)) = pieces.split_first_mut() else {
                lent = Lent::WrongLength;
                return false;
            };
            if total != frame_len || first.len() < L3 {
                // A device that lent the wrong length: build nothing.
                lent = Lent::WrongLength;
                return false;
            }
            let (head, payload) = first.split_at_mut(L3);
            if !build(payload, rest) {
                lent = Lent::Cancelled;
                return false;
            }
            write_l2_l3(cfg, ident, head, dst_mac, dst, protocol, len);
            lent = Lent::Built;
            true
        });
        match lent {
            Lent::Built => {
                // Sent, or refused by the device (dropped as a full NIC
                // queue drops): handed to `tx` either way.
                self.ident = ident;
                self.stats.tx_frames += 1;
                Ok(true)
            }
            Lent::NotCalled => {
                self.stats.tx_frames += 1;
                Ok(false)
            }
            Lent::WrongLength => {
                self.stats.tx_dropped += 1;
                Ok(false)
            }
            Lent::Cancelled => Ok(false),
        }
    }

    /// Send one IPv4 datagram of `protocol` to `dst` whose payload `build`
    /// writes into the buffer it is lent (at most `max` octets) and
    /// measures, `None` to cancel: the same routing, size (`max` within
    /// the MTU) and ARP rules as [`send_ipv4_parts`](Self::send_ipv4_parts), the same
    /// IPv4 identification and the same hold queue. For SCTP, raw or
    /// inside UDP (the payload then starts with the UDP header `build`
    /// writes).
    ///
    /// With the next hop's MAC known the frame is built in place in a
    /// buffer the device lends ([`FrameSink::send_built_upto`]): the
    /// payload goes straight into the device's memory, behind the headers
    /// written here. While ARP resolves, the frame is built the same way
    /// into a `Vec` and held until the reply comes (and leaves with the
    /// frames TCP held, from [`receive_ip`](Self::receive_ip)).
    ///
    /// `Ok(true)`: a datagram was built (sent, held, or refused by the
    /// device as a full NIC queue refuses: the transport retransmits);
    /// `Ok(false)`: `build` cancelled, or the device had no buffer and
    /// did not call it.
    pub fn send_ipv4_upto(
        &mut self,
        dst: Ipv4Address,
        protocol: IpProtocol,
        max: usize,
        now: u64,
        tx: &mut dyn FrameSink,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> Result<bool, SendError> {
        let (hop, mac) = self.route(dst, max, now, tx)?;
        const L3: usize = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
        let src = Source {
            mac: self.cfg.mac,
            ip: self.cfg.ip,
            ttl: self.cfg.ttl,
        };
        let ident = self.ident.wrapping_add(1);
        let Some(dst_mac) = mac else {
            let mut f = vec![0u8; L3 + max];
            let (head, payload) = f.split_at_mut(L3);
            let Some(n) = build(payload) else {
                return Ok(false);
            };
            egress::write_eth_ipv4(&src, ident, head, EthernetAddress([0; 6]), dst, protocol, n);
            self.ident = ident;
            f.truncate(L3 + n);
            return self.hold(hop, f).map(|()| true);
        };
        let mut built = false;
        tx.send_built_upto(L3 + max, &mut |f| {
            // The device lends the `L3 + max` octets asked for.
            let (head, payload) = f.split_at_mut(L3);
            let n = build(payload)?;
            egress::write_eth_ipv4(&src, ident, head, dst_mac, dst, protocol, n);
            built = true;
            Some(L3 + n)
        });
        if built {
            self.ident = ident;
            self.stats.tx_frames += 1;
        }
        Ok(built)
    }

    /// A whole frame to `dst_mac` / `dst` carrying `parts` as one IPv4
    /// datagram of `protocol`, with the next IPv4 identification: for an
    /// answer made while receiving, sent back to the MAC the request came
    /// from (as ICMP Echo is, RFC 1122 §3.2.2.6) without asking ARP.
    pub fn ipv4_frame(
        &mut self,
        dst_mac: EthernetAddress,
        dst: Ipv4Address,
        protocol: IpProtocol,
        parts: &[&[u8]],
    ) -> Vec<u8> {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut f = Vec::with_capacity(ETHERNET_HEADER_LEN + IPV4_HEADER_LEN + len);
        self.frame_header(&mut f, dst_mac, dst, protocol, len, 0);
        for p in parts {
            f.extend_from_slice(p);
        }
        self.stats.tx_frames += 1;
        f
    }

    /// Retransmit due ARP requests (and fail addresses that never answered).
    #[inline]
    pub fn poll(&mut self, now: u64, tx: &mut dyn FnMut(&[u8])) {
        // Every round of a host asks; ARP rarely has anything due. A look
        // at the shared neighbours rides on the same check (`wake_at`).
        // The work is out of line: inlined, the check costs a round a
        // compare, where a call to all of it saved and restored registers
        // (docs/datapath.md, "Cold paths out of line").
        if self.arp.request_due(now) {
            self.poll_due(now, tx);
        }
    }

    #[cold]
    #[inline(never)]
    fn poll_due(&mut self, now: u64, tx: &mut dyn FnMut(&[u8])) {
        if now >= self.shared_check_at {
            self.adopt_shared(now, tx);
        }
        while let Some(r) = self.arp.poll_request(now) {
            self.emit_arp(&r, tx);
        }
        if self.shared_check_at != u64::MAX {
            self.arp.wake_at(self.shared_check_at);
        }
    }

    /// When [`poll`](Self::poll) next has work.
    pub fn poll_timeout(&self) -> Option<u64> {
        let shared = (self.shared_check_at != u64::MAX).then_some(self.shared_check_at);
        match (self.arp.poll_timeout(), shared) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{ArpOperation, ArpPacket, EtherType, EthernetFrame, Ipv4Packet};

    use crate::fixtures::{arp_frame, iface, ip_frame, parse_out, IP, MAC, PEER, PEER_MAC};

    /// A TCP header, 40000 → 80 (the interface does not look inside).
    const TCP_HEADER: [u8; 20] = [
        0x9c, 0x40, 0x00, 0x50, 0, 0, 0x03, 0xe8, 0, 0, 0, 0, 0x50, 0x18, 0x20, 0, 0, 0, 0, 0,
    ];

    /// [`Interface::receive_ip`] serving no SCTP.
    fn receive<'a>(
        i: &mut Interface,
        frame: &'a [u8],
        now: u64,
        tx: &mut dyn FnMut(&[u8]),
    ) -> Option<IpIngress<'a>> {
        i.receive_ip(frame, now, SctpServed::NONE, tx)
    }

    /// Send `head` then `payload` as one datagram of `protocol`.
    fn send_parts(
        i: &mut Interface,
        dst: Ipv4Address,
        protocol: IpProtocol,
        head: &[u8],
        payload: &[u8],
        now: u64,
        tx: &mut dyn FrameSink,
    ) -> Result<(), SendError> {
        i.send_ipv4_parts(dst, protocol, head.len(), payload, now, tx, |h| {
            h.copy_from_slice(head);
            true
        })
    }

    #[test]
    fn answers_arp_request_for_us_and_learns_sender() {
        let mut i = iface();
        let mut out = Vec::new();
        let req = arp_frame(ArpOperation::REQUEST, EthernetAddress([0; 6]));
        assert!(receive(&mut i, &req, 0, &mut |f| out.push(f.to_vec())).is_none());
        assert_eq!(out.len(), 1);
        let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
        assert_eq!(eth.dst_addr(), PEER_MAC);
        let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(r.operation, ArpOperation::REPLY);
        assert_eq!(r.source_hardware_addr, MAC);
        assert_eq!(r.source_protocol_addr, IP);
        assert_eq!(r.target_protocol_addr, PEER);
        assert_eq!(i.arp().lookup(PEER, 0), Some(PEER_MAC));
    }

    #[test]
    fn answers_echo_request_with_same_payload() {
        let mut i = iface();
        let req = Icmpv4Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 9,
            data: b"hello ping",
        };
        let mut body = vec![0u8; req.buffer_len()];
        req.emit(&mut Icmpv4Packet::new_unchecked(&mut body[..]))
            .unwrap();
        let mut out = Vec::new();
        let frame = ip_frame(IP, IpProtocol::ICMP, &body);
        assert!(receive(&mut i, &frame, 0, &mut |f| out.push(f.to_vec())).is_none());
        assert_eq!(out.len(), 1);
        let (e, r, payload) = parse_out(&out[0]);
        assert_eq!(e.dst_addr, PEER_MAC);
        assert_eq!((r.src_addr, r.dst_addr), (IP, PEER));
        assert!(r.dont_frag);
        let p = Icmpv4Packet::new_checked(&payload[..]).unwrap();
        assert_eq!(
            Icmpv4Repr::parse(&p).unwrap(),
            Icmpv4Repr::EchoReply {
                ident: 0x1234,
                seq_no: 9,
                data: b"hello ping"
            }
        );
        assert_eq!(i.stats().icmp_echo_replies, 1);
    }

    #[test]
    fn tcp_for_us_comes_back_borrowed_from_the_frame() {
        let mut i = iface();
        let body = [&TCP_HEADER[..], b"abc"].concat();
        let frame = ip_frame(IP, IpProtocol::TCP, &body);
        let Some(IpIngress::Tcp(d)) = receive(&mut i, &frame, 0, &mut |_| panic!("no output"))
        else {
            panic!("TCP not handed up")
        };
        assert_eq!((d.src_mac, d.src, d.dst), (PEER_MAC, PEER, IP));
        assert_eq!(d.segment, &body[..]);
        assert!(core::ptr::eq(d.segment, &frame[frame.len() - body.len()..]));
    }

    #[test]
    fn drops_and_counts_what_it_does_not_serve() {
        let mut i = iface();
        let body = TCP_HEADER;
        let mut none = |_: &[u8]| panic!("no output");
        // Another host.
        let other = Ipv4Address::new(10, 9, 0, 3);
        assert!(receive(
            &mut i,
            &ip_frame(other, IpProtocol::TCP, &body),
            0,
            &mut none
        )
        .is_none());
        assert_eq!(i.stats().rx_not_for_us_ip, 1);
        // A fragment (MF set; checksum refilled).
        let mut f = ip_frame(IP, IpProtocol::TCP, &body);
        {
            let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
            ip.set_more_frags(true);
            ip.fill_checksum();
        }
        assert!(receive(&mut i, &f, 0, &mut none).is_none());
        assert_eq!(i.stats().rx_fragments, 1);
        // A bad header checksum.
        let mut f = ip_frame(IP, IpProtocol::TCP, &body);
        f[ETHERNET_HEADER_LEN + 10] ^= 0xff;
        assert!(receive(&mut i, &f, 0, &mut none).is_none());
        assert_eq!(i.stats().rx_malformed, 1);
        // UDP to a port nobody serves (53 → 53, length 8, no checksum).
        let udp = [0, 53, 0, 53, 0, 8, 0, 0];
        assert!(receive(&mut i, &ip_frame(IP, IpProtocol(17), &udp), 0, &mut none).is_none());
        assert_eq!(i.stats().rx_other_protocol, 1);
        // Another MAC.
        let mut f = ip_frame(IP, IpProtocol::TCP, &body);
        f[5] = 0x77;
        assert!(receive(&mut i, &f, 0, &mut none).is_none());
        assert_eq!(i.stats().rx_not_for_us_mac, 1);
        // IP options: IHL 6 with a 4-octet NOP option.
        let mut f = ip_frame(IP, IpProtocol::TCP, &body);
        let at = ETHERNET_HEADER_LEN + IPV4_HEADER_LEN;
        f.splice(at..at, [1, 1, 1, 1]);
        {
            let total = (f.len() - ETHERNET_HEADER_LEN) as u16;
            let mut ip = Ipv4Packet::new_unchecked(&mut f[ETHERNET_HEADER_LEN..]);
            ip.set_ihl(6);
            ip.set_total_len(total);
            ip.fill_checksum();
        }
        assert!(receive(&mut i, &f, 0, &mut none).is_none());
        assert_eq!(i.stats().rx_options, 1);
        // Every truncation of a valid frame: never a panic, never a segment.
        let good = ip_frame(IP, IpProtocol::TCP, &body);
        for len in 0..good.len() {
            assert!(
                receive(&mut i, &good[..len], 0, &mut none).is_none(),
                "len {len}"
            );
        }
    }

    #[test]
    fn send_holds_until_arp_resolves_then_flushes() {
        let mut i = iface();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let head = [0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0];
        send_parts(
            &mut i,
            PEER,
            IpProtocol::UDP,
            &head,
            b"held",
            0,
            &mut |f: &[&[u8]]| out.push(f.concat()),
        )
        .unwrap();
        // Only the ARP request went out.
        assert_eq!(out.len(), 1);
        let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
        assert_eq!(eth.ethertype(), EtherType::ARP);
        assert!(eth.dst_addr().is_broadcast());
        // A retry after the interval, then the reply releases the segment.
        out.clear();
        i.poll(arp::SECOND, &mut |f| out.push(f.to_vec()));
        assert_eq!(out.len(), 1);
        out.clear();
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(receive(&mut i, &reply, arp::SECOND + 1, &mut |f| out
            .push(f.to_vec()))
        .is_none());
        assert_eq!(out.len(), 1);
        let (e, r, payload) = parse_out(&out[0]);
        assert_eq!(e.dst_addr, PEER_MAC);
        assert_eq!(r.dst_addr, PEER);
        assert_eq!((r.protocol, r.identification), (IpProtocol::UDP, 1));
        assert_eq!(payload, [&head[..], b"held"].concat());
        // Now known: sent at once, headers and payload as two parts.
        let mut parts = Vec::new();
        send_parts(
            &mut i,
            PEER,
            IpProtocol::UDP,
            &head,
            b"held",
            arp::SECOND + 2,
            &mut |f: &[&[u8]]| parts.push(f.iter().map(|p| p.to_vec()).collect::<Vec<_>>()),
        )
        .unwrap();
        assert_eq!(parts.len(), 1);
        assert_eq!(parts[0].len(), 2);
        assert_eq!(parts[0][1], b"held");
        let (_, r, payload) = parse_out(&parts[0].concat());
        assert_eq!((r.identification, r.payload_len), (2, 12));
        assert_eq!(payload, [&head[..], b"held"].concat());
        // A header that cannot be written: nothing sent, counted.
        let dropped = i.stats().tx_dropped;
        let sent = i.send_ipv4_parts(
            PEER,
            IpProtocol::UDP,
            8,
            b"x",
            arp::SECOND + 3,
            &mut |_: &[&[u8]]| panic!("nothing sent"),
            |_| false,
        );
        assert_eq!(sent, Ok(()));
        assert_eq!(i.stats().tx_dropped, dropped + 1);
    }

    /// Two interfaces of one address sharing neighbours: the reply reaches
    /// only the first (as RSS gives ARP to queue 0); the second, whose
    /// request it answered, adopts the address at its next look and sends
    /// what it held; a third, asking later, finds it at once (no request).
    #[test]
    fn shared_neighbours_resolve_for_the_interface_the_reply_missed() {
        let shared = Arc::new(SharedNeighbours::new());
        let (mut q0, mut q1, mut q2) = (iface(), iface(), iface());
        for i in [&mut q0, &mut q1, &mut q2] {
            i.share_neighbours(shared.clone());
        }
        let head = [0x13, 0x88, 0x13, 0x89, 0, 12, 0, 0];
        let mut out: Vec<Vec<u8>> = Vec::new();
        send_parts(
            &mut q1,
            PEER,
            IpProtocol::UDP,
            &head,
            b"held",
            0,
            &mut |f: &[&[u8]]| out.push(f.concat()),
        )
        .unwrap();
        assert_eq!(out.len(), 1, "the ARP request only");
        // Nothing published yet: q1 looks and still waits.
        out.clear();
        q1.poll(arp::SHARED_RECHECK, &mut |f| out.push(f.to_vec()));
        assert!(out.is_empty());
        assert_eq!(q1.poll_timeout(), Some(2 * arp::SHARED_RECHECK));
        // The reply lands on q0, which learns and publishes.
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(receive(&mut q0, &reply, 10, &mut |_| panic!("no output")).is_none());
        assert_eq!(q0.arp().lookup(PEER, 10), Some(PEER_MAC));
        // q1's next look sends the held datagram to the peer's MAC.
        q1.poll(2 * arp::SHARED_RECHECK, &mut |f| out.push(f.to_vec()));
        assert_eq!(out.len(), 1);
        let (e, r, payload) = parse_out(&out[0]);
        assert_eq!((e.dst_addr, r.dst_addr), (PEER_MAC, PEER));
        assert_eq!(payload, [&head[..], b"held"].concat());
        assert_eq!(q1.poll_timeout(), None, "nothing pending, no more looks");
        // q2 misses its own cache and finds the address shared: sent now.
        let mut sent = 0;
        send_parts(
            &mut q2,
            PEER,
            IpProtocol::UDP,
            &head,
            b"now",
            20,
            &mut |f: &[&[u8]]| {
                let (e, _, _) = parse_out(&f.concat());
                assert_eq!(e.dst_addr, PEER_MAC);
                sent += 1;
            },
        )
        .unwrap();
        assert_eq!(sent, 1);
        assert_eq!(q2.arp().stats().requests_sent, 0);
        // An interface without the table keeps to its own cache.
        let mut alone = iface();
        let mut n = 0;
        send_parts(
            &mut alone,
            PEER,
            IpProtocol::UDP,
            &head,
            b"x",
            30,
            &mut |_: &[&[u8]]| n += 1,
        )
        .unwrap();
        assert_eq!((n, alone.arp().stats().requests_sent), (1, 1));
        assert_eq!(alone.poll_timeout(), Some(30 + arp::SECOND));
    }

    /// SCTP goes up only where served, raw or from inside UDP to the
    /// encapsulation port; what the interface sends for it resolves through
    /// the same ARP cache, waits in the same queue and takes the same IPv4
    /// identification as TCP.
    #[test]
    fn sctp_is_dispatched_when_served_and_sent_through_the_one_arp_cache() {
        let mut i = iface();
        let mut none = |_: &[u8]| panic!("no output");
        let sctp = [0x13, 0x88, 0x13, 0x89, 0, 0, 0, 0, 0, 0, 0, 0];
        let raw = ip_frame(IP, IpProtocol::SCTP, &sctp);
        assert!(receive(&mut i, &raw, 0, &mut none).is_none());
        assert_eq!(i.stats().rx_other_protocol, 1, "not served by receive");
        let served = SctpServed {
            raw: true,
            udp_port: Some(9899),
        };
        let Some(IpIngress::Sctp(p)) = i.receive_ip(&raw, 0, served, &mut none) else {
            panic!("raw SCTP not handed up")
        };
        assert_eq!(
            (p.src, p.src_mac, p.udp, p.packet),
            (PEER, PEER_MAC, None, &sctp[..])
        );
        // Inside UDP 40000 → 9899, no checksum.
        let mut u = vec![0x9c, 0x40, 0x26, 0xab, 0, 20, 0, 0];
        u.extend_from_slice(&sctp);
        let in_udp = ip_frame(IP, IpProtocol::UDP, &u);
        let Some(IpIngress::Sctp(p)) = i.receive_ip(&in_udp, 0, served, &mut none) else {
            panic!("SCTP in UDP not handed up")
        };
        assert_eq!((p.udp, p.packet), (Some(40000), &sctp[..]));
        // Another destination port is not SCTP's.
        u[2..4].copy_from_slice(&53u16.to_be_bytes());
        let other = ip_frame(IP, IpProtocol::UDP, &u);
        assert!(i.receive_ip(&other, 0, served, &mut none).is_none());
        assert_eq!(i.stats().rx_other_protocol, 2);
        assert_eq!(i.stats().rx_sctp, 2);

        // Sending to the unresolved peer: one ARP request, the SCTP
        // datagram and then a TCP segment held behind it.
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut sink = |f: &[&[u8]]| out.push(f.concat());
        let sent = i.send_ipv4_upto(PEER, IpProtocol::SCTP, 100, 0, &mut sink, &mut |b| {
            b[..12].copy_from_slice(&sctp);
            Some(12)
        });
        assert_eq!(sent, Ok(true));
        let first = i.arp().queued_octets(PEER);
        send_parts(
            &mut i,
            PEER,
            IpProtocol::TCP,
            &TCP_HEADER,
            b"held",
            0,
            &mut sink,
        )
        .unwrap();
        assert_eq!(out.len(), 1, "one ARP request for both");
        assert_eq!(i.arp().queued(PEER), 2);
        // Each frame is charged its length plus the same bookkeeping: the
        // SCTP datagram's buffer was trimmed to its frame (34 + 12 octets),
        // not charged the 34 + 100 it was built in.
        let second = i.arp().queued_octets(PEER) - first;
        assert_eq!(second - first, TCP_HEADER.len() + 4 - 12);
        out.clear();
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(receive(&mut i, &reply, 1, &mut |f| out.push(f.to_vec())).is_none());
        assert_eq!(out.len(), 2);
        let (e, r, payload) = parse_out(&out[0]);
        assert_eq!(
            (e.dst_addr, r.protocol, r.identification),
            (PEER_MAC, IpProtocol::SCTP, 1)
        );
        assert!(r.dont_frag);
        assert_eq!(payload, sctp);
        let (e, r, _) = parse_out(&out[1]);
        assert_eq!(
            (e.dst_addr, r.protocol, r.identification),
            (PEER_MAC, IpProtocol::TCP, 2)
        );
        // Resolved: built in place at once; a cancelled build sends nothing.
        out.clear();
        let mut sink = |f: &[&[u8]]| out.push(f.concat());
        let sent = i.send_ipv4_upto(PEER, IpProtocol::UDP, 100, 2, &mut sink, &mut |_| None);
        assert_eq!(sent, Ok(false));
        let sent = i.send_ipv4_upto(PEER, IpProtocol::UDP, 100, 2, &mut sink, &mut |b| {
            b[..u.len()].copy_from_slice(&u);
            Some(u.len())
        });
        assert_eq!(sent, Ok(true));
        assert_eq!(out.len(), 1);
        let (_, r, payload) = parse_out(&out[0]);
        assert_eq!(
            (r.protocol, r.identification, r.payload_len),
            (IpProtocol::UDP, 3, 20)
        );
        assert_eq!(payload, u);
        assert_eq!(i.arp().stats().requests_sent, 1);
        // Larger than the MTU allows: refused before anything is built.
        let too_big = i.send_ipv4_upto(
            PEER,
            IpProtocol::SCTP,
            1481,
            2,
            &mut |_: &[&[u8]]| panic!("nothing sent"),
            &mut |_| panic!("not built"),
        );
        assert_eq!(too_big, Err(SendError::TooBig));
    }

    #[test]
    fn routing_and_size_errors() {
        let mut i = iface();
        let far = Ipv4Address::new(192, 0, 2, 1);
        let mut nothing = |_: &[&[u8]]| panic!("nothing sent");
        assert_eq!(
            send_parts(
                &mut i,
                far,
                IpProtocol::TCP,
                &TCP_HEADER,
                b"",
                0,
                &mut nothing
            ),
            Err(SendError::NoRoute)
        );
        // 20 + 1461 octets > MTU 1500 - 20.
        let big = vec![0u8; 1461];
        assert_eq!(
            send_parts(
                &mut i,
                PEER,
                IpProtocol::TCP,
                &TCP_HEADER,
                &big,
                0,
                &mut nothing
            ),
            Err(SendError::TooBig)
        );
        assert_eq!(i.stats().tx_too_big, 1);
        assert_eq!(i.max_payload_len(), 1480);
        // Off-link through a gateway: ARP asks for the gateway.
        let mut cfg = IfaceConfig::new(MAC, IP, 24);
        cfg.gateway = Some(Ipv4Address::new(10, 9, 0, 254));
        let mut i = Interface::new(cfg);
        let mut out = Vec::new();
        send_parts(
            &mut i,
            far,
            IpProtocol::TCP,
            &TCP_HEADER,
            b"",
            0,
            &mut |f: &[&[u8]]| out.push(f.concat()),
        )
        .unwrap();
        let eth = EthernetFrame::new_checked(&out[0][..]).unwrap();
        let r = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap();
        assert_eq!(r.target_protocol_addr, Ipv4Address::new(10, 9, 0, 254));
    }

    #[test]
    fn unanswered_arp_fails_and_reports_unreachable() {
        let mut i = iface();
        send_parts(
            &mut i,
            PEER,
            IpProtocol::TCP,
            &TCP_HEADER,
            b"",
            0,
            &mut |_: &[&[u8]]| (),
        )
        .unwrap();
        let mut now = 0;
        // Requests at 0, 1 s and 2 s (max_requests 3); at 3 s the address fails.
        for _ in 0..3 {
            now += arp::SECOND;
            i.poll(now, &mut |_| ());
        }
        assert_eq!(
            send_parts(
                &mut i,
                PEER,
                IpProtocol::TCP,
                &TCP_HEADER,
                b"",
                now,
                &mut |_: &[&[u8]]| ()
            ),
            Err(SendError::Unreachable)
        );
        assert!(i.stats().tx_dropped >= 1);
    }

    /// An interface that knows the peer's MAC (learnt from its ARP request).
    fn iface_knowing_peer() -> Interface {
        let mut i = iface();
        let req = arp_frame(ArpOperation::REQUEST, EthernetAddress([0; 6]));
        assert!(receive(&mut i, &req, 0, &mut |_| ()).is_none());
        assert_eq!(i.arp().lookup(PEER, 0), Some(PEER_MAC));
        i
    }

    /// A device that lends a frame as pieces of the given lengths (the
    /// last takes the rest) full of junk, or none at all (`None`), or
    /// `short` octets fewer than asked.
    #[derive(Default)]
    struct Pieces {
        cuts: Option<Vec<usize>>,
        short: usize,
        sent: Vec<Vec<u8>>,
    }

    impl FrameSink for Pieces {
        fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
            self.sent.push(parts.concat());
            true
        }
        fn send_built(&mut self, _: usize, _: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
            panic!("built in pieces")
        }
        fn send_built_sg(
            &mut self,
            len: usize,
            build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
        ) -> bool {
            let Some(cuts) = &self.cuts else {
                return false;
            };
            let mut left = len - self.short;
            let mut bufs: Vec<Vec<u8>> = Vec::new();
            for &n in cuts {
                let n = n.min(left);
                bufs.push(vec![0x5a; n]);
                left -= n;
            }
            bufs.push(vec![0x5a; left]);
            let mut pieces: Vec<&mut [u8]> = bufs.iter_mut().map(|b| &mut b[..]).collect();
            if !build(&mut pieces) {
                return false;
            }
            self.sent.push(bufs.concat());
            true
        }
    }

    /// The in-place path: the payload is lent as the rest of the first
    /// buffer and the device's further buffers, the headers written
    /// around it; a cancelled build, a device with no buffer and one that
    /// lends the wrong length send nothing, each counted as documented.
    #[test]
    fn a_datagram_built_in_place_in_pieces() {
        let mut i = iface_knowing_peer();
        let payload: Vec<u8> = (0..40u8).collect();
        // Headers are 34 octets: pieces of 35 (headers and one payload
        // octet), 10 and the rest (29).
        let mut dev = Pieces {
            cuts: Some(vec![35, 10]),
            ..Pieces::default()
        };
        let mut lent = Vec::new();
        let mut write = |first: &mut [u8], rest: &mut [&mut [u8]]| {
            let mut at = 0;
            for p in std::iter::once(first).chain(rest.iter_mut().map(|p| &mut **p)) {
                lent.push(p.len());
                p.copy_from_slice(&payload[at..at + p.len()]);
                at += p.len();
            }
            true
        };
        assert_eq!(
            i.send_ipv4_sg(PEER, IpProtocol::UDP, 40, 0, &mut dev, &mut write),
            Ok(true)
        );
        assert_eq!(lent, [1, 10, 29]);
        let (e, r, got) = parse_out(&dev.sent[0]);
        assert_eq!((e.src_addr, e.dst_addr), (MAC, PEER_MAC));
        assert_eq!(
            (
                r.src_addr,
                r.dst_addr,
                r.protocol,
                r.identification,
                r.payload_len
            ),
            (IP, PEER, IpProtocol::UDP, 1, 40)
        );
        assert!(r.dont_frag);
        assert_eq!(got, payload);
        assert_eq!(i.stats().tx_frames, 2, "the ARP reply and the datagram");
        // Cancelled: nothing sent, nothing counted, the identification kept.
        assert_eq!(
            i.send_ipv4_sg(PEER, IpProtocol::UDP, 40, 0, &mut dev, |_, _| false),
            Ok(false)
        );
        assert_eq!(dev.sent.len(), 1);
        assert_eq!((i.stats().tx_frames, i.stats().tx_dropped), (2, 0));
        // No buffer: build not called, the frame dropped as a full queue drops.
        let mut none = Pieces::default();
        let mut never = |_: &mut [u8], _: &mut [&mut [u8]]| panic!("not built");
        assert_eq!(
            i.send_ipv4_sg(PEER, IpProtocol::UDP, 40, 0, &mut none, &mut never),
            Ok(false)
        );
        assert_eq!(i.stats().tx_frames, 3);
        // The wrong length lent, or a first buffer shorter than the headers.
        for (cuts, short) in [(vec![35], 1), (vec![20], 0)] {
            let mut bad = Pieces {
                cuts: Some(cuts),
                short,
                ..Pieces::default()
            };
            assert_eq!(
                i.send_ipv4_sg(PEER, IpProtocol::UDP, 40, 0, &mut bad, &mut never),
                Ok(false)
            );
            assert!(bad.sent.is_empty());
        }
        assert_eq!(i.stats().tx_dropped, 2);
        // The next datagram built takes the next identification.
        i.send_ipv4_sg(PEER, IpProtocol::UDP, 40, 0, &mut dev, |f, rest| {
            f.fill(7);
            rest.iter_mut().for_each(|p| p.fill(7));
            true
        })
        .unwrap();
        let (_, r, got) = parse_out(&dev.sent[1]);
        assert_eq!((r.identification, got), (2, vec![7; 40]));
        // Too large for the MTU: refused before anything is lent.
        assert_eq!(
            i.send_ipv4_sg(PEER, IpProtocol::UDP, 1481, 0, &mut none, &mut never),
            Err(SendError::TooBig)
        );
    }

    /// While ARP resolves, the datagram is built in one piece and held;
    /// a cancelled build holds nothing.
    #[test]
    fn a_datagram_built_in_place_waits_for_arp() {
        let mut i = iface();
        let mut out: Vec<Vec<u8>> = Vec::new();
        let mut sink = |f: &[&[u8]]| out.push(f.concat());
        let cancelled = i.send_ipv4_sg(PEER, IpProtocol::UDP, 5, 0, &mut sink, |_, _| false);
        assert_eq!(cancelled, Ok(false));
        let held = i.send_ipv4_sg(PEER, IpProtocol::UDP, 5, 0, &mut sink, |f, rest| {
            assert!(rest.is_empty());
            f.copy_from_slice(b"later");
            true
        });
        assert_eq!(held, Ok(true));
        assert_eq!(out.len(), 1, "only the ARP request");
        assert_eq!((i.stats().tx_queued, i.arp().queued(PEER)), (1, 1));
        out.clear();
        let reply = arp_frame(ArpOperation::REPLY, MAC);
        assert!(receive(&mut i, &reply, 1, &mut |f| out.push(f.to_vec())).is_none());
        assert_eq!(out.len(), 1);
        let (e, r, got) = parse_out(&out[0]);
        assert_eq!(
            (e.dst_addr, r.identification, &got[..]),
            (PEER_MAC, 1, &b"later"[..])
        );
    }

    #[test]
    fn a_closure_sink_builds_into_a_vec() {
        let mut out = Vec::new();
        let mut sink = |f: &[&[u8]]| out.push(f.concat());
        assert!(sink.send_built(3, &mut |b| {
            b.copy_from_slice(b"abc");
            true
        }));
        assert!(!sink.send_built(3, &mut |_| false));
        assert!(sink.send_parts(&[b"d", b"ef"]));
        assert_eq!(out, [b"abc".to_vec(), b"def".to_vec()]);
    }
}
