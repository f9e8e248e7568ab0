//! DDP over SCTP (RFC 5043) on a frame device: `ddp_sctp` associations
//! over Ethernet II / IPv4 protocol 132 (or UDP), on the one Ethernet/IPv4
//! interface ([`iwarp_net::iface::Interface`]) that TCP
//! uses too: one parse of each frame, one ARP cache, one IPv4
//! identification, one hold queue.
//!
//! `sctp-lite` and `ddp-sctp` stay I/O-free; this module is the glue that
//! moves their packets in and out of the interface:
//!
//! * receive: the interface parses the frame once and dispatches it by IP
//!   protocol ([`Interface::receive_ip`]: ARP answered and learned there;
//!   IPv4 to our address, unfragmented, protocol 132 or UDP to our
//!   encapsulation port): we send with DF and reassemble nothing; an SCTP
//!   packet never needs it at our `max_packet`. The packet goes to the
//!   association of (peer address, peer port, our port), else the
//!   [`Listener`] of our port (INIT, COOKIE-ECHO), else the out-of-the-blue
//!   answer of RFC 9260 §8.4. Verification tags are checked by the
//!   association (§8.5).
//! * transmit: each association's packets are built in place in a frame
//!   the device lends, behind the IPv4 header (DF, the interface's TTL) and
//!   Ethernet header to the next hop's MAC the interface writes
//!   ([`Interface::send_ipv4_upto`]). Packets to an address still being
//!   resolved wait, as whole frames, in the interface's bounded ARP queue
//!   beside TCP's (SCTP retransmits what is dropped).
//!
//! A [`SctpHost`] made by [`SctpHost::new`] has an interface and a ready
//! set ([`crate::ready`]) of its own and is an [`Engine`]; in a
//! [`Stack`](crate::stack::Stack) ([`SctpHost::new_shared`]) the stack's
//! interface receives, and the interface and the stack's one ready set
//! (which holds the associations beside the TCP and SCTP connections) are
//! lent to each call.
//!
//! UDP encapsulation (RFC 6951): with [`SctpHostConfig::udp_port`] set,
//! SCTP packets also arrive inside UDP datagrams to that port; an
//! association created from one (or a [`SctpCommand::Connect`] with
//! `udp_port`) sends its packets inside UDP from our port to the peer's,
//! and follows the UDP source port of the peer's latest packet that its
//! association accepted (RFC 6951 §5.4, updated only after the
//! verification tag check, which is the association's). The SCTP CRC32c is
//! unchanged inside UDP; the UDP checksum is computed on send and, when
//! non-zero, verified on receive (RFC 768; zero means none for IPv4). Set
//! `sctp.max_packet` to MTU − 28 when UDP is in use (the UDP header takes 8 octets).
//!
//! [`qp::SctpQp`] puts a queue pair (`proto::qp::Qp` over its segment
//! lower layer) on one DDP stream of an association.
//!
//! Only directly attached peers (one subnet, no gateway) and one address per
//! association (RFC 5043 §7.2 allows one) are handled. Application work
//! arrives as [`SctpCommand`]s; everything `ddp_sctp` reports goes out as
//! [`SctpOutput`]s.

pub mod conn;
pub mod qp;

use std::collections::{BTreeMap, HashMap, VecDeque};

use ddp_sctp::{listener, DdpAssociation, DdpError, DdpEvent};
use iwarp_net::arp;
use iwarp_net::iface::{IfaceConfig, Interface, IpIngress, SctpIngress, SctpServed};
use iwarp_net::wire::{
    EthernetAddress, IpProtocol, Ipv4Address, UdpRepr, IPV4_HEADER_LEN, UDP_HEADER_LEN,
};
use sctp_lite::assoc::{out_of_the_blue, Addrs, Config as SctpConfig, ListenOutcome, Listener};

use crate::ready::{Ready, ReadySet, Slot};
use crate::runtime::{Engine, FrameSink};

/// Names one association of a [`SctpHost`].
pub type AssocId = u64;

/// Settings of a [`SctpHost`].
#[derive(Debug, Clone)]
pub struct SctpHostConfig {
    /// Our MAC address.
    pub mac: [u8; 6],
    /// Our IPv4 address.
    pub ip: [u8; 4],
    /// SCTP settings of every association (`ddp_sctp` adds the adaptation
    /// indication). `max_packet` must fit the link: MTU − 20.
    pub sctp: SctpConfig,
    /// ARP settings of a host on its own interface ([`SctpHost::new`]);
    /// a shared interface has its own.
    pub arp: arp::Config,
    /// Most live associations; INITs and COOKIE-ECHOs beyond it are
    /// dropped (the Listener holds nothing per INIT).
    pub max_assocs: usize,
    /// Our UDP encapsulation port (RFC 6951; IANA's is 9899), or `None`
    /// for raw IPv4 only.
    pub udp_port: Option<u16>,
}

/// Out-of-the-blue answers (RFC 9260 §8.4 ABORT / SHUTDOWN COMPLETE):
/// at most this many at once, refilled at [`OOTB_PER_SEC`]. §8.4 lets an
/// endpoint not answer; without a limit every spoofed packet drew one
/// reply, a 1:1 reflector.
pub const OOTB_BURST: u32 = 32;
/// Out-of-the-blue answers per second, sustained (one every 10 ms).
pub const OOTB_PER_SEC: u64 = 100;

/// [`SctpHost::set_idle_sweep`]'s default (on its own interface), as
/// `StackConfig::idle_sweep`'s.
pub const IDLE_SWEEP: u64 = 100_000_000;

/// The UDP port IANA registered for SCTP over UDP (sctp-tunneling, RFC 6951).
pub const SCTP_UDP_PORT: u16 = 9899;
/// Packets one association sends in one pass; one that sends this many
/// stays in the ready set for the next round.
const SEND_BURST: usize = 256;

impl SctpHostConfig {
    /// Defaults for `mac` / `ip`; `secret` keys cookies, tags and TSNs.
    pub fn new(mac: [u8; 6], ip: [u8; 4], secret: [u8; 16]) -> Self {
        SctpHostConfig {
            mac,
            ip,
            sctp: SctpConfig {
                secret,
                ..SctpConfig::default()
            },
            arp: arp::Config::default(),
            max_assocs: 1024,
            udp_port: None,
        }
    }
}

/// Work for a [`SctpHost`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SctpCommand {
    /// Accept associations on `port`.
    Listen {
        /// Our SCTP port.
        port: u16,
    },
    /// Open an association to `remote:port` from `local_port`; answered
    /// by [`SctpOutput::Opening`] with `token`.
    Connect {
        /// The caller's name for the answer.
        token: u64,
        /// Peer address.
        remote: [u8; 4],
        /// Peer port.
        port: u16,
        /// Our port.
        local_port: u16,
        /// The peer's UDP encapsulation port (RFC 6951), or `None` for raw
        /// IPv4. Needs [`SctpHostConfig::udp_port`].
        udp_port: Option<u16>,
    },
    /// DDP Stream Session Initiate (RFC 5043 §6.2).
    Initiate {
        /// Association.
        assoc: AssocId,
        /// DDP stream.
        stream: u16,
        /// Private Data.
        private_data: Vec<u8>,
    },
    /// Accept a requested session.
    Accept {
        /// Association.
        assoc: AssocId,
        /// DDP stream.
        stream: u16,
        /// Private Data.
        private_data: Vec<u8>,
    },
    /// Reject a requested session.
    Reject {
        /// Association.
        assoc: AssocId,
        /// DDP stream.
        stream: u16,
        /// Private Data.
        private_data: Vec<u8>,
    },
    /// Send one DDP Segment (PPID 16).
    Segment {
        /// Association.
        assoc: AssocId,
        /// DDP stream.
        stream: u16,
        /// The segment.
        segment: Vec<u8>,
    },
    /// DDP Stream Session Terminate.
    Terminate {
        /// Association.
        assoc: AssocId,
        /// DDP stream.
        stream: u16,
    },
    /// Graceful SCTP shutdown.
    Shutdown(AssocId),
    /// SCTP ABORT.
    Abort(AssocId),
}

/// What a [`SctpHost`] reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SctpOutput {
    /// Answer to [`SctpCommand::Listen`].
    Listening {
        /// The port.
        port: u16,
        /// False when the port was taken already.
        ok: bool,
    },
    /// Answer to [`SctpCommand::Connect`]: the association's id, or the
    /// configuration error.
    Opening {
        /// The caller's token.
        token: u64,
        /// The new association.
        result: Result<AssocId, &'static str>,
    },
    /// A peer's COOKIE-ECHO made an association on a listening port.
    Accepted {
        /// The new association.
        assoc: AssocId,
        /// Peer address.
        remote: [u8; 4],
        /// Peer port.
        port: u16,
    },
    /// Something `ddp_sctp` reported (`Connected`, session events,
    /// segments, `Closed`). After `Closed` the id is gone.
    Event(AssocId, DdpEvent),
    /// A command was refused.
    Refused(AssocId, DdpError),
    /// A command named no live association.
    NoSuchAssoc(AssocId),
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SctpHostStats {
    /// SCTP packets handed to an association or listener.
    pub rx_packets: u64,
    /// SCTP packets sent (ARP-held ones counted when held).
    pub tx_packets: u64,
    /// Frames dropped on receive: not for us, malformed, fragmented, not
    /// IPv4/ARP, or TCP (on a host with its own interface: the
    /// interface's refusals; a stack's interface counts them itself), or
    /// SCTP packets shorter than their ports.
    pub rx_dropped: u64,
    /// UDP datagrams with a bad checksum (a host on its own interface;
    /// a stack's counts them as `IfaceStats::rx_udp_bad_checksum`).
    pub udp_bad_checksum: u64,
    /// SCTP packets received inside UDP (RFC 6951), of `rx_packets`'s.
    pub rx_udp: u64,
    /// SCTP packets framed inside UDP (RFC 6951).
    pub tx_udp: u64,
    /// Out-of-the-blue answers sent (RFC 9260 §8.4).
    pub ootb_replies: u64,
    /// Out-of-the-blue packets left unanswered by the rate limit.
    pub ootb_limited: u64,
    /// SCTP packets dropped for want of a route or of ARP resolution
    /// (those the interface's full hold queue drops are its `tx_dropped`).
    pub arp_drops: u64,
    /// DATA chunks retransmitted (T3 or fast retransmit), summed over the
    /// associations that have closed.
    pub closed_retransmits: u64,
    /// Packets the closed associations discarded (checksum, malformed,
    /// wrong tag or ports), summed.
    pub closed_discarded: u64,
}

struct Entry {
    remote: Ipv4Address,
    /// The peer's UDP encapsulation port when the association runs over UDP.
    udp: Option<u16>,
    ddp: DdpAssociation,
    /// Its place in the ready and deadline sets (`Ready::assoc`).
    slot: Slot,
}

impl std::fmt::Debug for Entry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Entry")
            .field("remote", &self.remote)
            .field("udp", &self.udp)
            .field("state", &self.ddp.sctp().state())
            .finish()
    }
}

/// Where [`SctpHost::handle_packet_with`] offers segments to place in
/// place: `(association, DDP stream, DDP-SSN, segment)`, true if taken.
pub type Placer<'a> = dyn FnMut(AssocId, u16, u16, &[u8]) -> bool + 'a;

/// An [`SctpHost`]'s IP side apart from the associations: its address,
/// encapsulation port and counters, so that `poll` sends each
/// association's packets while it holds the association (no association
/// moves out of the map for its turn). The ARP cache, the IPv4
/// identification and the hold queue are the interface's
/// ([`Interface::send_ipv4_upto`]): one for TCP and SCTP alike.
#[derive(Debug)]
struct Net {
    udp_port: Option<u16>,
    ip: Ipv4Address,
    stats: SctpHostStats,
}

impl Net {
    /// The IP protocol and the UDP header's length of a packet to a peer
    /// whose encapsulation port is `udp` (RFC 6951), or raw.
    #[inline]
    fn encapsulation(&self, udp: Option<u16>) -> (IpProtocol, usize) {
        match (udp, self.udp_port) {
            (Some(_), Some(_)) => (IpProtocol::UDP, UDP_HEADER_LEN),
            _ => (IpProtocol::SCTP, 0),
        }
    }

    /// Write the UDP header (RFC 6951 §5.3: source port ours, destination
    /// the peer's encapsulation port, length covering the SCTP packet
    /// `pkt`, the checksum over it, RFC 768) into `head`, when `udp`
    /// names the peer's port.
    #[inline]
    fn udp_header(&self, head: &mut [u8], dst: Ipv4Address, udp: Option<u16>, pkt: &[u8]) {
        if let (Some(dst_port), Some(src_port)) = (udp, self.udp_port) {
            // Only fails on a short header or a packet past 65,527
            // octets; `head` is the header and `pkt` ≤ max_packet.
            let _ = UdpRepr { src_port, dst_port }.emit_header(head, pkt, &self.ip, &dst);
        }
    }

    /// Sends what `ddp` has to send now: at most [`SEND_BURST`] packets
    /// (the congestion and peer windows bound what it has anyway). How
    /// many went. Inlined into both rounds' sweeps (a call per association
    /// and pass cost 700 instructions per ping-pong round trip).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn send_all<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ddp: &mut DdpAssociation,
        dst: Ipv4Address,
        udp: Option<u16>,
        buf: &mut [u8],
        now: u64,
        tx: &mut dyn FrameSink,
        fill: &mut F,
    ) -> usize {
        let mut n = 0;
        while n < SEND_BURST {
            if !self.send_next(iface, ddp, dst, udp, buf, now, tx, fill) {
                break;
            }
            n += 1;
        }
        n
    }

    #[allow(clippy::too_many_arguments)]
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn send_next<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ddp: &mut DdpAssociation,
        dst: Ipv4Address,
        udp: Option<u16>,
        buf: &mut [u8],
        now: u64,
        tx: &mut dyn FrameSink,
        fill: &mut F,
    ) -> bool {
        if ddp.transmit_idle() {
            return false; // no buffer lent for nothing
        }
        self.send_packet(iface, ddp, dst, udp, buf, now, tx, fill)
    }

    /// Sends the next packet of `ddp` to `dst`; whether one went. The
    /// packet is built straight into the frame the interface has the
    /// device lend, behind the headers (no copy of the packet), or, while
    /// ARP resolves, into a frame the interface holds. `buf` is only the
    /// packet's room (and where a packet that cannot be routed is
    /// dropped). `fill` writes the segments given by reference
    /// ([`DdpAssociation::poll_transmit_with`]).
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    fn send_packet<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ddp: &mut DdpAssociation,
        dst: Ipv4Address,
        udp: Option<u16>,
        buf: &mut [u8],
        now: u64,
        tx: &mut dyn FrameSink,
        fill: &mut F,
    ) -> bool {
        let (protocol, hlen) = self.encapsulation(udp);
        let sent = iface.send_ipv4_upto(dst, protocol, hlen + buf.len(), now, tx, &mut |p| {
            let (head, pkt) = p.split_at_mut(hlen);
            let n = ddp.poll_transmit_with(now, pkt, fill)?;
            self.udp_header(head, dst, udp, &pkt[..n]);
            Some(hlen + n)
        });
        match sent {
            Ok(true) => {
                self.stats.tx_packets += 1;
                self.stats.tx_udp += u64::from(hlen != 0);
                true
            }
            Ok(false) => false,
            Err(_) => {
                // No route, or ARP failed for the peer: the packet is
                // made and lost (SCTP retransmits it), as before the
                // interface sent for SCTP.
                if ddp.poll_transmit(now, buf).is_none() {
                    return false;
                }
                self.stats.arp_drops += 1;
                true
            }
        }
    }

    /// A frame carrying the SCTP packet `pkt` to `dst` at `dst_mac`
    /// (an answer made while receiving, to the MAC the packet came from).
    fn reply_frame(
        &mut self,
        iface: &mut Interface,
        dst: Ipv4Address,
        dst_mac: EthernetAddress,
        udp: Option<u16>,
        pkt: &[u8],
    ) -> Vec<u8> {
        let (protocol, hlen) = self.encapsulation(udp);
        let mut h = [0u8; UDP_HEADER_LEN];
        self.udp_header(&mut h, dst, udp, pkt);
        self.stats.tx_udp += u64::from(hlen != 0);
        self.stats.tx_packets += 1;
        iface.ipv4_frame(dst_mac, dst, protocol, &[&h[..hlen], pkt])
    }
}

/// What a host that runs alone ([`SctpHost::new`]) has of its own, and a
/// host in a stack is lent by the stack at each call: the interface, and
/// the ready set its associations are in (`Ready::assoc` keys alone).
#[derive(Debug)]
struct Own {
    iface: Interface,
    ready: ReadySet<Ready>,
}

/// DDP-over-SCTP associations on one Ethernet/IPv4 interface.
#[derive(Debug)]
pub struct SctpHost {
    cfg: SctpHostConfig,
    net: Net,
    /// The interface and ready set of a host that runs alone (an
    /// [`Engine`]); `None` when it shares a stack's
    /// ([`new_shared`](Self::new_shared)), which the stack lends to each
    /// call.
    own: Option<Box<Own>>,
    listeners: HashMap<u16, Listener>,
    assocs: BTreeMap<AssocId, Entry>,
    /// (peer address, peer port, our port) → association.
    by_tuple: HashMap<(Ipv4Address, u16, u16), AssocId>,
    /// The last tuple `by_tuple` answered, checked before it: a stream of
    /// packets from one peer skips SipHash (2.7 % of an SCTP Write
    /// stream's instructions). Ids are never reused and the association
    /// is looked up by id after, so a stale entry finds nothing and the
    /// map is asked.
    last_tuple: Option<((Ipv4Address, u16, u16), AssocId)>,
    next_id: AssocId,
    /// Frames made while handling received frames, sent at the next poll.
    pending_tx: Vec<Vec<u8>>,
    pending_out: VecDeque<SctpOutput>,
    buf: Vec<u8>,
    /// The associations the last [`poll_with`](Self::poll_with) visited,
    /// in id order. An association is visited when it is marked in the
    /// ready set (a packet for it arrived, a command or
    /// [`assoc_mut`](Self::assoc_mut) reached it, its last visit left
    /// work, its deadline came, the idle sweep); its deadlines
    /// ([`DdpAssociation::poll_timeout`]) are in the deadline set.
    polled: Vec<AssocId>,
    /// The marks `poll_with` and [`transmit_with`](Self::transmit_with)
    /// take (kept between rounds: no allocation every round).
    marked: Vec<Ready>,
    /// Association visits by [`Engine::poll`], in all.
    visits: u64,
    /// Token bucket of out-of-the-blue answers: tokens, and when the last
    /// one was added.
    ootb_tokens: u32,
    ootb_at: u64,
}

impl SctpHost {
    /// A host with no associations and no listeners, on an interface of
    /// its own (`cfg`'s addresses and ARP settings; every peer on the
    /// link; an MTU that fits `max_packet` inside UDP): an [`Engine`].
    pub fn new(cfg: SctpHostConfig) -> Result<Self, &'static str> {
        let mut iface = IfaceConfig::new(EthernetAddress(cfg.mac), Ipv4Address(cfg.ip), 0);
        iface.arp = cfg.arp;
        iface.mtu = cfg.sctp.max_packet + IPV4_HEADER_LEN + UDP_HEADER_LEN;
        let mut h = Self::new_shared(cfg)?;
        h.own = Some(Box::new(Own {
            iface: Interface::new(iface),
            ready: ReadySet::new(IDLE_SWEEP),
        }));
        Ok(h)
    }

    /// A host on an interface it shares (a [`Stack`](crate::stack::Stack)'s):
    /// received packets come in through
    /// [`handle_packet_with`](Self::handle_packet_with), and
    /// [`poll_with`](Self::poll_with) and
    /// [`transmit_with`](Self::transmit_with) send through the interface
    /// they are lent; every call that marks or visits an association is
    /// lent the stack's ready set too. `cfg.arp` is not used (the
    /// interface's cache is).
    pub fn new_shared(cfg: SctpHostConfig) -> Result<Self, &'static str> {
        cfg.sctp.validate()?;
        Ok(SctpHost {
            net: Net {
                udp_port: cfg.udp_port,
                ip: Ipv4Address(cfg.ip),
                stats: SctpHostStats::default(),
            },
            own: None,
            buf: vec![0; cfg.sctp.max_packet],
            cfg,
            listeners: HashMap::new(),
            assocs: BTreeMap::new(),
            by_tuple: HashMap::new(),
            last_tuple: None,
            next_id: 1,
            pending_tx: Vec::new(),
            pending_out: VecDeque::new(),
            polled: Vec::new(),
            marked: Vec::new(),
            visits: 0,
            ootb_tokens: OOTB_BURST,
            ootb_at: 0,
        })
    }

    /// Counters. A host on its own interface counts the frames the
    /// interface refused as `rx_dropped` (and UDP checksum failures as
    /// `udp_bad_checksum`); a shared interface counts them itself.
    pub fn stats(&self) -> SctpHostStats {
        let mut s = self.net.stats;
        if let Some(o) = self.own.as_deref() {
            let t = o.iface.stats();
            s.rx_dropped += t.rx_malformed
                + t.rx_not_for_us_mac
                + t.rx_not_for_us_ip
                + t.rx_fragments
                + t.rx_options
                + t.rx_other_protocol
                + t.rx_other_ethertype
                + t.rx_udp_bad_checksum;
            s.udp_bad_checksum += t.rx_udp_bad_checksum;
        }
        s
    }

    /// The interface of a host on its own (`None` when shared).
    pub fn iface(&self) -> Option<&Interface> {
        self.own.as_deref().map(|o| &o.iface)
    }

    /// On its own interface: every association is visited at least this
    /// often (ns), whatever the ready and deadline sets say, the bound on
    /// how late a deadline missing from them would be noticed. In a stack
    /// nothing: the stack's sweep (`StackConfig::idle_sweep`) does it.
    pub fn set_idle_sweep(&mut self, every: u64) {
        if let Some(o) = self.own.as_deref_mut() {
            o.ready.set_sweep(every.max(1));
        }
    }

    /// Association visits [`poll_with`](Self::poll_with) made, in all
    /// (an idle association is not visited).
    pub fn visits(&self) -> u64 {
        self.visits
    }

    /// The associations the last [`poll_with`](Self::poll_with) visited,
    /// in id order.
    pub fn polled(&self) -> &[AssocId] {
        &self.polled
    }

    /// A round that leaves this host out: [`polled`](Self::polled) is
    /// emptied, as a poll that visited nothing would.
    pub fn skip_round(&mut self) {
        self.polled.clear();
    }

    /// On its own interface, the earliest of the associations' deadlines,
    /// the idle sweep's and the interface's (ARP); in a stack `None` (the
    /// stack's deadline set holds the associations' deadlines).
    pub fn next_deadline(&self) -> Option<u64> {
        let o = self.own.as_deref()?;
        [
            o.ready.next_deadline(),
            o.iface.poll_timeout(),
            Some(o.ready.next_sweep()),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Nothing to do until a frame, a command or
    /// [`next_deadline`](Self::next_deadline): no frame or output waiting
    /// ([`has_pending`](Self::has_pending)) and, on its own interface, no
    /// association marked (in a stack, the stack's ready set says).
    pub fn quiescent(&self) -> bool {
        !self.has_pending() && self.own.as_ref().is_none_or(|o| o.ready.is_empty())
    }

    /// Frames made while receiving, or outputs, wait for the next poll.
    #[inline]
    pub fn has_pending(&self) -> bool {
        !self.pending_tx.is_empty() || !self.pending_out.is_empty()
    }

    /// Live associations.
    pub fn assoc_count(&self) -> usize {
        self.assocs.len()
    }

    /// One association, for inspection.
    pub fn assoc(&self, id: AssocId) -> Option<&DdpAssociation> {
        self.assocs.get(&id).map(|e| &e.ddp)
    }

    /// Accept associations on `port` (what [`SctpCommand::Listen`] does);
    /// false if the port listens already.
    pub fn listen(&mut self, port: u16) -> bool {
        if self.listeners.contains_key(&port) {
            return false;
        }
        match listener(self.cfg.sctp.clone()) {
            Ok(l) => {
                self.listeners.insert(port, l);
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `port` accepts associations.
    pub fn listening(&self, port: u16) -> bool {
        self.listeners.contains_key(&port)
    }

    /// Stop accepting associations on `port` (live ones stay); false if
    /// it did not listen.
    pub fn unlisten(&mut self, port: u16) -> bool {
        self.listeners.remove(&port).is_some()
    }

    /// Whether an association with (peer address, peer port, our port)
    /// exists, or our port listens.
    pub fn port_taken(&self, remote: [u8; 4], port: u16, local_port: u16) -> bool {
        self.by_tuple
            .contains_key(&(Ipv4Address(remote), port, local_port))
            || self.listeners.contains_key(&local_port)
    }

    /// Open an association (what [`SctpCommand::Connect`] does), returning
    /// its id at once.
    pub fn connect(
        &mut self,
        ready: &mut ReadySet<Ready>,
        remote: [u8; 4],
        port: u16,
        local_port: u16,
        udp_port: Option<u16>,
        now: u64,
    ) -> Result<AssocId, &'static str> {
        let remote = Ipv4Address(remote);
        let key = (remote, port, local_port);
        if self.by_tuple.contains_key(&key) {
            Err("an association with this peer and ports exists")
        } else if self.assocs.len() >= self.cfg.max_assocs {
            Err("too many associations")
        } else if udp_port.is_some() && self.cfg.udp_port.is_none() {
            Err("UDP encapsulation asked for, but no local udp_port configured")
        } else {
            let id = self.next_id;
            // The nonce makes tags and initial TSNs differ per
            // association under one secret.
            let nonce = id ^ (u64::from(local_port) << 48) ^ now;
            DdpAssociation::connect(self.cfg.sctp.clone(), local_port, port, now, nonce).map(
                |ddp| {
                    self.next_id += 1;
                    let mut slot = Slot::default();
                    // Its INIT goes at the next poll.
                    ready.mark(&mut slot, Ready::assoc(id));
                    self.assocs.insert(
                        id,
                        Entry {
                            remote,
                            udp: udp_port,
                            ddp,
                            slot,
                        },
                    );
                    self.by_tuple.insert(key, id);
                    id
                },
            )
        }
    }

    /// One association, to drive it (send segments, answer sessions): it
    /// is marked in `ready`, so it is visited at the next poll, and its
    /// packets go at the next [`transmit_with`](Self::transmit_with) or
    /// poll.
    pub fn assoc_mut(
        &mut self,
        ready: &mut ReadySet<Ready>,
        id: AssocId,
    ) -> Option<&mut DdpAssociation> {
        let e = self.assocs.get_mut(&id)?;
        ready.mark(&mut e.slot, Ready::assoc(id));
        Some(&mut e.ddp)
    }

    /// One association, to offer it work that it may not take (a queue
    /// pair's segments when it has none): unlike
    /// [`assoc_mut`](Self::assoc_mut) it is not marked for the next poll,
    /// so the caller [`mark`](Self::mark)s it if it did give it work.
    pub fn assoc_unmarked(&mut self, id: AssocId) -> Option<&mut DdpAssociation> {
        self.assocs.get_mut(&id).map(|e| &mut e.ddp)
    }

    /// Association `id` is marked in `ready`: visited at the next poll
    /// (and its packets go at the next
    /// [`transmit_with`](Self::transmit_with)).
    pub fn mark(&mut self, ready: &mut ReadySet<Ready>, id: AssocId) {
        if let Some(e) = self.assocs.get_mut(&id) {
            ready.mark(&mut e.slot, Ready::assoc(id));
        }
    }

    /// The deadline entry `(at, Ready::assoc(id))` that the ready set's
    /// owner popped ([`ReadySet::pop_due`]): the association, if it is
    /// still here, is marked ([`ReadySet::fire`]).
    #[inline]
    pub fn fire(&mut self, ready: &mut ReadySet<Ready>, id: AssocId, at: u64) {
        if let Some(e) = self.assocs.get_mut(&id) {
            ready.fire(&mut e.slot, Ready::assoc(id), at);
        }
    }

    /// The idle sweep: every association is marked in `ready`.
    pub fn mark_all(&mut self, ready: &mut ReadySet<Ready>) {
        for (&id, e) in self.assocs.iter_mut() {
            ready.mark(&mut e.slot, Ready::assoc(id));
        }
    }

    /// Frame an SCTP packet made while receiving (sent at the next poll),
    /// back to the MAC the packet it answers came from.
    fn reply_later(
        &mut self,
        iface: &mut Interface,
        dst: Ipv4Address,
        dst_mac: EthernetAddress,
        udp: Option<u16>,
        pkt: &[u8],
    ) {
        let f = self.net.reply_frame(iface, dst, dst_mac, udp, pkt);
        self.pending_tx.push(f);
    }

    /// One SCTP packet from `src`, inside UDP from port `udp` or raw;
    /// the live association it went to, if any.
    #[allow(clippy::too_many_arguments)]
    fn handle_sctp(
        &mut self,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        src_mac: EthernetAddress,
        src: Ipv4Address,
        udp: Option<u16>,
        pkt: &[u8],
        now: u64,
        place: &mut Placer<'_>,
    ) -> Option<AssocId> {
        // RFC 9260 §3.1: Source Port, Destination Port, the first four
        // octets of the common header.
        let (Some(sp), Some(dp)) = (pkt.get(0..2), pkt.get(2..4)) else {
            self.net.stats.rx_dropped += 1;
            return None;
        };
        let peer_port = u16::from_be_bytes([sp[0], sp[1]]);
        let our_port = u16::from_be_bytes([dp[0], dp[1]]);
        self.net.stats.rx_packets += 1;
        let key = (src, peer_port, our_port);
        // The cached tuple first, then the map; a stale entry (its
        // association gone) finds nothing and the map is asked. One lookup
        // of the association a packet, not a check and then a lookup.
        let mut from_cache = matches!(self.last_tuple, Some((k, _)) if k == key);
        loop {
            let id = match self.last_tuple {
                Some((_, id)) if from_cache => Some(id),
                _ => self.by_tuple.get(&key).copied(),
            };
            if let Some((id, e)) = id.and_then(|id| self.assocs.get_mut(&id).map(|e| (id, e))) {
                self.last_tuple = Some((key, id));
                let verified = e.ddp.sctp().stats().tag_verified_packets;
                e.ddp.handle_packet_with(now, pkt, &mut |stream, ssn, seg| {
                    place(id, stream, ssn, seg)
                });
                // What a visit by the next poll would find to do: events
                // to give, a packet to send (a SACK due at once, RFC 9260
                // §6.2; DATA the peer's SACK let go), a deadline due, or
                // the end. Without any, the visit would only record the
                // deadline (the delayed SACK's, T3-rtx's): that is done
                // here, and the association stays out of the ready set.
                // The caller learns which association the packet reached.
                let deadline = e.ddp.poll_timeout();
                if e.ddp.has_events()
                    || !e.ddp.transmit_idle()
                    || e.ddp.sctp().is_closed()
                    || deadline.is_some_and(|t| t <= now)
                {
                    ready.mark(&mut e.slot, Ready::assoc(id));
                } else if let Some(t) = deadline {
                    ready.defer(&mut e.slot, Ready::assoc(id), t);
                }
                // RFC 6951 §5.4: the remote encapsulation port follows the
                // UDP source port of packets that passed the verification
                // tag check (§8.5) with one of the association's tags. An
                // INIT (tag 0) is accepted without passing it and so does
                // not count: anyone knowing the ports could send one. An
                // association keeps its encapsulation (raw or UDP) for
                // life here.
                if let (Some(p), Some(_)) = (udp, e.udp) {
                    if e.ddp.sctp().stats().tag_verified_packets != verified {
                        e.udp = Some(p);
                    }
                }
                return Some(id);
            }
            if !from_cache {
                break;
            }
            from_cache = false;
        }
        let mut out = std::mem::take(&mut self.buf);
        if let Some(l) = self.listeners.get_mut(&our_port) {
            // RFC 9260 §5.1.3: cookies bound to the addresses, so one
            // issued to an address is refused from any other.
            let addrs = Addrs {
                local: &self.net.ip.0,
                peer: &src.0,
            };
            match l.handle_packet_from(now, addrs, pkt, &mut out) {
                ListenOutcome::Reply(n) => {
                    if let Some(r) = out.get(..n) {
                        self.reply_later(iface, src, src_mac, udp, r);
                    }
                }
                ListenOutcome::Accept(a) if self.assocs.len() < self.cfg.max_assocs => {
                    let id = self.next_id;
                    self.next_id += 1;
                    let ddp = DdpAssociation::wrap(*a, self.cfg.sctp.max_packet);
                    let mut slot = Slot::default();
                    ready.mark(&mut slot, Ready::assoc(id));
                    self.assocs.insert(
                        id,
                        Entry {
                            remote: src,
                            udp,
                            ddp,
                            slot,
                        },
                    );
                    self.by_tuple.insert((src, peer_port, our_port), id);
                    self.pending_out.push_back(SctpOutput::Accepted {
                        assoc: id,
                        remote: src.0,
                        port: peer_port,
                    });
                }
                ListenOutcome::Accept(_) | ListenOutcome::Drop => {}
            }
        } else if let Some(n) = out_of_the_blue(pkt, self.cfg.sctp.trusted_link, &mut out) {
            // §8.4: an INIT to a port nobody listens on gets an ABORT
            // (item 3), a COOKIE-ECHO no answer; the rest as
            // `out_of_the_blue` says, within the rate limit (§8.4 allows
            // not answering).
            if !self.ootb_token(now) {
                self.net.stats.ootb_limited += 1;
            } else if let Some(r) = out.get(..n) {
                self.reply_later(iface, src, src_mac, udp, r);
                self.net.stats.ootb_replies += 1;
            }
        }
        self.buf = out;
        None
    }

    /// Takes one token of the out-of-the-blue answer bucket, if any.
    fn ootb_token(&mut self, now: u64) -> bool {
        let per = 1_000_000_000 / OOTB_PER_SEC;
        let add = now.saturating_sub(self.ootb_at) / per;
        if add > 0 {
            self.ootb_tokens =
                (u64::from(self.ootb_tokens) + add).min(u64::from(OOTB_BURST)) as u32;
            self.ootb_at = self.ootb_at.saturating_add(add.saturating_mul(per));
            if self.ootb_tokens == OOTB_BURST {
                self.ootb_at = now;
            }
        }
        if self.ootb_tokens == 0 {
            return false;
        }
        self.ootb_tokens -= 1;
        true
    }

    fn with_assoc(
        &mut self,
        ready: &mut ReadySet<Ready>,
        id: AssocId,
        f: impl FnOnce(&mut DdpAssociation) -> Result<(), DdpError>,
    ) {
        match self.assocs.get_mut(&id) {
            Some(e) => {
                ready.mark(&mut e.slot, Ready::assoc(id));
                if let Err(err) = f(&mut e.ddp) {
                    self.pending_out.push_back(SctpOutput::Refused(id, err));
                }
            }
            None => self.pending_out.push_back(SctpOutput::NoSuchAssoc(id)),
        }
    }

    /// One SCTP packet the interface `iface` received and dispatched
    /// ([`Interface::receive_ip`]: parsed once, IPv4 to our address,
    /// unfragmented, raw or from inside UDP to our encapsulation port with
    /// its checksum verified), offering `place(assoc, stream, ddp_ssn,
    /// segment)` each DDP Segment that can be placed straight from the
    /// frame ([`DdpAssociation::handle_packet_with`]): true when it took
    /// it, false to have it come out as a [`DdpEvent::Segment`]. Answers
    /// made here go out at the next poll, their IPv4 identification the
    /// interface's. The association is marked in `ready`, or its deadline
    /// recorded there. Returns the live association the packet reached: it
    /// is visited at the next poll only if it has something to do then
    /// (events, a packet to send, a deadline due), so a caller with work
    /// of its own per association (a connection to drive) looks there.
    pub fn handle_packet_with(
        &mut self,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        pkt: &SctpIngress<'_>,
        now: u64,
        place: &mut Placer<'_>,
    ) -> Option<AssocId> {
        self.net.stats.rx_udp += u64::from(pkt.udp.is_some());
        self.handle_sctp(
            iface,
            ready,
            pkt.src_mac,
            pkt.src,
            pkt.udp,
            pkt.packet,
            now,
            place,
        )
    }

    /// [`Engine::handle_frame`] on the host's own interface, offering
    /// `place` the segments it can place as
    /// [`handle_packet_with`](Self::handle_packet_with) does. Does
    /// nothing on a shared interface (the stack receives).
    pub fn handle_frame_with(&mut self, frame: &[u8], now: u64, place: &mut Placer<'_>) {
        let Some(mut own) = self.own.take() else {
            return;
        };
        let served = SctpServed {
            raw: true,
            udp_port: self.cfg.udp_port,
        };
        let pending = &mut self.pending_tx;
        let Own { iface, ready } = &mut *own;
        match iface.receive_ip(frame, now, served, &mut |f| pending.push(f.to_vec())) {
            Some(IpIngress::Sctp(p)) => {
                self.handle_packet_with(iface, ready, &p, now, place);
            }
            Some(IpIngress::Tcp(_)) => self.net.stats.rx_dropped += 1,
            None => {}
        }
        self.own = Some(own);
    }
}

impl SctpHost {
    /// Sends what the associations marked in `ready` have to send now
    /// through `iface` (those [`assoc_mut`](Self::assoc_mut) reached
    /// since the last poll took its marks, among them every one the queue
    /// pairs gave segments, and those the poll left marked), and nothing
    /// else: no timers or events. For the second pass of a round: it
    /// takes the associations' marks. An association left with nothing for a
    /// visit (no event to give, no deadline due, not closed, under the
    /// burst) leaves the ready set with its deadline recorded, as a
    /// visit by [`poll_with`](Self::poll_with) would leave it: the round
    /// after it sent a packet does not visit it (nor drive its
    /// connection) for nothing. The others stay marked for that visit.
    /// `fill(association, key, dst)` writes the segments given by
    /// reference. True when a packet went out.
    #[inline]
    pub fn transmit_with<F: FnMut(AssocId, u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        now: u64,
        tx: &mut dyn FrameSink,
        fill: &mut F,
    ) -> bool {
        // No association marked (a round that only took a packet's
        // completions): not even the call.
        if !ready.holds(&Ready::ASSOC) {
            return false;
        }
        self.transmit_marked(iface, ready, now, tx, fill)
    }

    /// [`transmit_with`](Self::transmit_with) with associations marked.
    #[inline(never)]
    fn transmit_marked<F: FnMut(AssocId, u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        now: u64,
        tx: &mut dyn FrameSink,
        fill: &mut F,
    ) -> bool {
        let mut busy = false;
        let SctpHost {
            assocs,
            net,
            buf,
            marked,
            ..
        } = self;
        marked.clear();
        ready.take(&Ready::ASSOC, marked);
        for &key in marked.iter() {
            let Some(id) = key.as_assoc() else {
                continue;
            };
            let Some(e) = assocs.get_mut(&id) else {
                continue; // gone since it was marked
            };
            e.slot.visited();
            let sent = net.send_all(
                iface,
                &mut e.ddp,
                e.remote,
                e.udp,
                buf,
                now,
                tx,
                &mut |k, d| fill(id, k, d),
            );
            busy |= sent > 0;
            let deadline = e.ddp.poll_timeout();
            if sent >= SEND_BURST
                || e.ddp.has_events()
                || e.ddp.sctp().is_closed()
                || deadline.is_some_and(|t| t <= now)
            {
                ready.mark(&mut e.slot, key);
            } else if let Some(t) = deadline {
                // T3-rtx started by the DATA just sent (RFC 9260 §6.3.2
                // R1), T2 by a SHUTDOWN, the delayed SACK's (§6.2): the
                // earliest, as `poll_with` records it.
                ready.defer(&mut e.slot, key, t);
            }
        }
        busy
    }

    /// [`transmit_with`](Self::transmit_with) on the host's own interface
    /// (nothing on a shared one).
    pub fn transmit(&mut self, now: u64, tx: &mut dyn FrameSink) -> bool {
        let Some(mut own) = self.own.take() else {
            return false;
        };
        let Own { iface, ready } = &mut *own;
        let busy = self.transmit_with(iface, ready, now, tx, &mut |_, _, _| false);
        self.own = Some(own);
        busy
    }

    /// One round on `iface`: the answers made while receiving go out,
    /// outputs are reported, and each association marked in `ready` (a
    /// packet came, a command reached it, a deadline passed, or the idle
    /// sweep; its mark taken, [`ReadySet::take`]) runs its timers, sends
    /// what it has and gives its events; closed associations leave. The
    /// deadlines due and the idle sweep are marked first by the ready
    /// set's owner ([`fire`](Self::fire), [`mark_all`](Self::mark_all):
    /// the stack's round, or [`Engine::poll`]'s here), as are ARP
    /// requests (the interface's poll). `fill(association, key, dst)`
    /// writes the segments given by reference
    /// ([`DdpAssociation::send_segment_ext`]).
    pub fn poll_with<F: FnMut(AssocId, u64, &mut [u8]) -> bool>(
        &mut self,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        now: u64,
        tx: &mut dyn FrameSink,
        out: &mut dyn FnMut(SctpOutput),
        fill: &mut F,
    ) -> bool {
        let mut busy = false;
        if !self.pending_tx.is_empty() {
            for f in self.pending_tx.drain(..) {
                tx.send_parts(&[&f]);
                busy = true;
            }
        }
        while let Some(o) = self.pending_out.pop_front() {
            out(o);
            busy = true;
        }
        let mut buf = std::mem::take(&mut self.buf);
        // The map is out of the host for the sweep, so that sending (which
        // borrows the host: counters) takes each packet straight from
        // `buf` into the device's frame, without a copy in between, and
        // no association moves (each used to be taken out of the map and
        // put back, every round: 3 % of an SCTP Write stream's
        // instructions).
        let SctpHost {
            assocs,
            by_tuple,
            last_tuple,
            net,
            polled,
            marked,
            visits,
            ..
        } = self;
        // This round visits the associations marked (in id order); marks
        // made from here on are for the transmit pass or the next round.
        polled.clear();
        marked.clear();
        ready.take(&Ready::ASSOC, marked);
        // Closed ones leave after the sweep (no allocation unless one did).
        let mut gone = Vec::new();
        for &key in marked.iter() {
            let Some(id) = key.as_assoc() else {
                continue;
            };
            let Some(e) = assocs.get_mut(&id) else {
                continue; // gone since it was marked
            };
            e.slot.visited();
            polled.push(id);
            *visits += 1;
            if e.ddp.poll_timeout().is_some_and(|t| t <= now) {
                e.ddp.handle_timeout(now);
            }
            let (remote, udp) = (e.remote, e.udp);
            let sent = net.send_all(
                iface,
                &mut e.ddp,
                remote,
                udp,
                &mut buf,
                now,
                tx,
                &mut |k, d| fill(id, k, d),
            );
            busy |= sent > 0;
            let mut closed = false;
            let mut events = false;
            while let Some(ev) = e.ddp.poll_event() {
                closed |= matches!(ev, DdpEvent::Closed(_));
                out(SctpOutput::Event(id, ev));
                events = true;
            }
            busy |= events;
            if closed || e.ddp.sctp().is_closed() {
                let (lp, pp) = (e.ddp.sctp().local_port(), e.ddp.sctp().peer_port());
                by_tuple.remove(&(remote, pp, lp));
                *last_tuple = None;
                let st = e.ddp.sctp().stats();
                net.stats.closed_retransmits += st.retransmits;
                net.stats.closed_discarded += st.packets_discarded;
                ready.forget(&mut e.slot, key);
                gone.push(id);
            } else if sent >= SEND_BURST || (events && !e.ddp.transmit_idle()) {
                // More to send at once: the burst limit, or what taking
                // its events made (a window update, RFC 9260 §6.2). What
                // else it holds waits for a packet (a SACK), a command or
                // a deadline, each of which marks it.
                ready.mark(&mut e.slot, key);
            } else if let Some(t) = e.ddp.poll_timeout() {
                // T1, T2, T3-rtx, delayed SACK, heartbeat (RFC 9260 §5.1,
                // §9.2, §6.3, §6.2, §8.3): the earliest.
                ready.defer(&mut e.slot, key, t);
            }
        }
        for id in gone {
            assocs.remove(&id);
        }
        self.buf = buf;
        busy
    }
}

impl Engine for SctpHost {
    type Command = SctpCommand;
    type Output = SctpOutput;

    fn poll_timeout(&self) -> Option<u64> {
        self.next_deadline()
    }

    fn handle_frame(&mut self, frame: &[u8], now: u64) {
        self.handle_frame_with(frame, now, &mut |_, _, _, _| false);
    }

    /// Commands reach a host on its own interface; one in a stack is
    /// driven by the stack's SCTP part and takes none.
    fn handle_command(&mut self, cmd: SctpCommand, now: u64) {
        let Some(mut own) = self.own.take() else {
            return;
        };
        let ready = &mut own.ready;
        match cmd {
            SctpCommand::Listen { port } => {
                let ok = self.listen(port);
                self.pending_out
                    .push_back(SctpOutput::Listening { port, ok });
            }
            SctpCommand::Connect {
                token,
                remote,
                port,
                local_port,
                udp_port,
            } => {
                let result = self.connect(ready, remote, port, local_port, udp_port, now);
                self.pending_out
                    .push_back(SctpOutput::Opening { token, result });
            }
            SctpCommand::Initiate {
                assoc,
                stream,
                private_data,
            } => self.with_assoc(ready, assoc, |d| d.initiate(stream, &private_data)),
            SctpCommand::Accept {
                assoc,
                stream,
                private_data,
            } => self.with_assoc(ready, assoc, |d| d.accept(stream, &private_data)),
            SctpCommand::Reject {
                assoc,
                stream,
                private_data,
            } => self.with_assoc(ready, assoc, |d| d.reject(stream, &private_data)),
            SctpCommand::Segment {
                assoc,
                stream,
                segment,
            } => self.with_assoc(ready, assoc, |d| {
                d.send_segment(stream, &segment).map(|_| ())
            }),
            SctpCommand::Terminate { assoc, stream } => {
                self.with_assoc(ready, assoc, |d| d.terminate(now, stream))
            }
            SctpCommand::Shutdown(assoc) => self.with_assoc(ready, assoc, |d| {
                d.shutdown(now);
                Ok(())
            }),
            SctpCommand::Abort(assoc) => self.with_assoc(ready, assoc, |d| {
                d.abort();
                Ok(())
            }),
        }
        self.own = Some(own);
    }

    fn poll(&mut self, now: u64, tx: &mut dyn FrameSink, out: &mut dyn FnMut(SctpOutput)) -> bool {
        let Some(mut own) = self.own.take() else {
            return false;
        };
        let Own { iface, ready } = &mut *own;
        let mut arp = false;
        iface.poll(now, &mut |f| {
            tx.send_parts(&[f]);
            arp = true;
        });
        // Associations whose deadline has passed join the ready set, and
        // every one now and then (the idle sweep).
        while let Some((at, key)) = ready.pop_due(now) {
            if let Some(id) = key.as_assoc() {
                self.fire(ready, id, at);
            }
        }
        if ready.sweep_due(now) {
            self.mark_all(ready);
        }
        let busy = self.poll_with(iface, ready, now, tx, out, &mut |_, _, _| false);
        self.own = Some(own);
        busy || arp
    }
}
