//! One SCTP association (RFC 9260), single path, and the [`Listener`] that
//! answers INITs without keeping state (§5.1.3).
//!
//! Sans-IO, in the style of quinn-proto: feed received packets with
//! [`Association::handle_packet`], take packets to send with
//! [`Association::poll_transmit`], events with [`Association::poll_event`],
//! and call [`Association::handle_timeout`] once `now` reaches
//! [`Association::poll_timeout`]. Time is `now: u64` in nanoseconds from any
//! origin the caller likes, never read from a clock here.
//!
//! # What is implemented
//!
//! * Setup with INIT / INIT-ACK / COOKIE-ECHO / COOKIE-ACK (§5.1), the
//!   State Cookie MAC'd with SipHash-2-4 under the caller's secret
//!   ([`crate::mac`]) and checked for lifetime and ports (§5.1.5);
//!   T1-init / T1-cookie retransmission with back-off (§5.1.6).
//! * Verification tags (§8.5, §8.5.1): every received packet must carry
//!   our tag, except INIT (tag 0, alone in its packet), ABORT and
//!   SHUTDOWN COMPLETE (ours, or the peer's with the T bit).
//! * INIT collision, simplified (§5.2): an INIT in COOKIE-WAIT /
//!   COOKIE-ECHOED is answered with an INIT-ACK carrying our existing tag
//!   (§5.2.1); an INIT in ESTABLISHED with one carrying a new random tag
//!   and, in its cookie, Tie-Tags that are nonces rather than the
//!   association's tags (§5.2.2), so an INIT learns nothing that lets it
//!   ABORT the association. A COOKIE-ECHO whose cookie holds our tag is accepted in
//!   COOKIE-WAIT / COOKIE-ECHOED (case B) and answered with COOKIE-ACK
//!   in ESTABLISHED when both tags match (case D). **Not implemented:**
//!   peer restart (case A) and case C; such cookies are discarded.
//! * DATA / SACK (§6): TSNs, per-stream SSNs, ordered and unordered
//!   delivery, fragmentation and reassembly (§6.9) of messages up to
//!   [`Config::max_message`], gap ack blocks and duplicate TSNs, delayed
//!   SACK (every second packet or after [`Config::sack_delay`]) and
//!   immediate SACK on gaps, duplicates and the I bit (RFC 7053).
//! * Retransmission timer with RFC 9260 §6.3 RTO estimation (Karn), T3
//!   back-off, fast retransmit on the third miss indication with the HTNA
//!   rule (§7.2.4), and congestion control (§7.2: cwnd, ssthresh, slow
//!   start, congestion avoidance with partial_bytes_acked, fast recovery).
//! * HEARTBEAT (§8.3) on an idle path with RTT sampling, HEARTBEAT-ACK.
//! * Graceful SHUTDOWN (§9.2) with T2-shutdown, and ABORT (§9.1).
//! * Unknown chunk types handled by their upper two bits (§3.2): stop or
//!   skip, with an ERROR "Unrecognized Chunk Type" when asked.
//! * The Adaptation Layer Indication (RFC 5061 §4.2.7) offered with
//!   [`Config::adaptation`], and associations refused without the value
//!   [`Config::require_adaptation`] (RFC 5043 §7.1, §11.1).
//!
//! Not implemented: multi-homing and path management (one path),
//! PR-SCTP, I-DATA, stream reconfiguration, ECN, the T5 shutdown guard
//! timer, PMTU discovery (the caller gives [`Config::max_packet`]),
//! reneging (gap-acked data is never dropped), Stale Cookie recovery.
//!
//! # What a peer can make us hold
//!
//! * Received data not yet read: at most [`Config::recv_buffer`] octets,
//!   each chunk held for reassembly charged [`RX_CHUNK_OVERHEAD`] more
//!   (DATA beyond it is dropped unacknowledged); TSNs accepted at most
//!   [`Config::max_tsn_window`] above the cumulative TSN; a message being
//!   reassembled at most [`Config::max_message`] octets and
//!   [`Config::max_fragments`] chunks, beyond which the association is
//!   aborted (Out of Resource). Fragments that can never complete (the
//!   TSN before or after them arrived without joining them, §6.9) and
//!   repeated stream sequence numbers are dropped as soon as that is
//!   known, so nothing held outlives the cumulative TSN passing it
//!   except parts of messages that can still complete.
//! * One pending HEARTBEAT-ACK (at most one packet), one pending ERROR,
//!   at most [`MAX_DUP_TSNS`] duplicate TSNs per SACK, at most
//!   [`MAX_GAP_BLOCKS`] gap blocks per SACK, events: at most the messages
//!   the receive buffer holds plus a handful of state events.
//! * The Listener holds nothing per INIT. Its State Cookies are MAC'd
//!   with the addresses the INIT came between
//!   ([`Listener::handle_packet_from`]) and live
//!   [`Config::cookie_lifetime`]: a COOKIE-ECHO from another address is
//!   refused. A replay from the same address while the association lives
//!   reaches the association (the caller demultiplexes first) and is
//!   answered as §5.2.4 case D, or discarded; after it has closed, a
//!   replay within the cookie's lifetime makes a new association, as
//!   §5.1.5 allows.
//! * An association accepted from a cookie whose peer then goes silent
//!   holds its slot until [`Config::max_retransmits`] + 1 heartbeats go
//!   unanswered: the first at [`Config::heartbeat_interval`] + RTO, then
//!   backing off to [`Config::rto_max`] (about six minutes with the
//!   defaults). Callers that cap associations should expect that.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::mac::{self, Key};
use crate::wire::{
    self, cause_code, chunk_type, param_type, ChunkRepr, DataFlags, DataRepr, DupTsns, GapBlocks,
    HeaderRepr, InitParams, InitRepr, Params, SackRepr, SctpPacket, UnknownAction,
    COMMON_HEADER_LEN, DATA_HEADER_LEN,
};

/// Most duplicate TSNs reported in one SACK.
pub const MAX_DUP_TSNS: usize = 16;
/// Most gap ack blocks sent in one SACK.
pub const MAX_GAP_BLOCKS: usize = 64;
/// Longest address bound into a State Cookie (IPv6).
pub const MAX_ADDR_LEN: usize = 16;

/// `addrs` copied out (each cut to [`MAX_ADDR_LEN`]).
fn owned_addrs(addrs: Addrs<'_>) -> (u8, [u8; MAX_ADDR_LEN], u8, [u8; MAX_ADDR_LEN]) {
    let copy = |a: &[u8]| {
        let a = &a[..a.len().min(MAX_ADDR_LEN)];
        let mut b = [0u8; MAX_ADDR_LEN];
        b[..a.len()].copy_from_slice(a);
        (a.len() as u8, b)
    };
    let (ln, l) = copy(addrs.local);
    let (pn, p) = copy(addrs.peer);
    (ln, l, pn, p)
}

/// The IP addresses a packet travelled between, as the caller's
/// demultiplexer saw them: 4 octets for IPv4, 16 for IPv6 (longer ones
/// are cut to [`MAX_ADDR_LEN`]). A [`Listener`] binds the State Cookies it
/// issues to them and refuses a COOKIE-ECHO from other addresses.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Addrs<'a> {
    /// Our address (the packet's destination).
    pub local: &'a [u8],
    /// The peer's address (the packet's source).
    pub peer: &'a [u8],
}

/// Length of the State Cookie this crate issues.
pub const COOKIE_LEN: usize = 64;

/// What the receive buffer is charged for each DATA chunk held for
/// reassembly, beyond its payload: the chunk's map entry, and a share of
/// the tree nodes, the run bookkeeping and the allocator's slack. Without
/// it, one-octet fragments held ~120 octets of heap per octet counted.
pub const RX_CHUNK_OVERHEAD: usize = core::mem::size_of::<(u64, InChunk)>() + 64;

/// A floor for RTO.Min on fast paths, ns (250 ms). RFC 9260 §16 asks for
/// 1 s; LAN deployments go lower, but an RTO below the peer's delayed
/// SACK makes every lone message (nothing after it to trigger a SACK)
/// time out and be resent: Linux and usrsctp delay SACKs 200 ms, so with
/// TCP's 5 ms minimum a lone message went five times. 250 ms stays above
/// those 200 ms plus a LAN round trip. (§6.2 allows peers up to 500 ms;
/// against such a peer a lone message may still be resent once.)
pub const RTO_MIN_ABOVE_DELAYED_SACK: u64 = 250 * MS;

const MS: u64 = 1_000_000;
const SEC: u64 = 1_000_000_000;

/// Association parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// Secret key for the State Cookie MAC and the derivation of tags and
    /// initial TSNs ([`crate::mac`]). Must be secret and random.
    pub secret: Key,
    /// Number of outbound streams offered, and of inbound streams accepted.
    pub streams: u16,
    /// Receive buffer, octets: the a_rwnd we start with.
    pub recv_buffer: u32,
    /// Send buffer, octets of user data queued and not yet acknowledged.
    pub send_buffer: usize,
    /// Largest user message, octets (both directions).
    pub max_message: usize,
    /// Most DATA chunks one received message may take.
    pub max_fragments: usize,
    /// Largest SCTP packet (path MTU less the IP header), octets.
    pub max_packet: usize,
    /// Most TSNs accepted above the cumulative TSN (at most 65535, so gap
    /// block offsets fit their 16 bits).
    pub max_tsn_window: u32,
    /// RTO.Initial (§6.3.1, §16: 1 s).
    pub rto_initial: u64,
    /// RTO.Min (1 s).
    pub rto_min: u64,
    /// RTO.Max (60 s).
    pub rto_max: u64,
    /// Max.Init.Retransmits (8).
    pub max_init_retransmits: u32,
    /// Association.Max.Retrans (10).
    pub max_retransmits: u32,
    /// HB.interval (30 s); 0 turns heartbeats off.
    pub heartbeat_interval: u64,
    /// Delayed SACK timeout (§6.2: at most 500 ms, 200 ms default).
    pub sack_delay: u64,
    /// Valid.Cookie.Life (60 s).
    pub cookie_lifetime: u64,
    /// Adaptation Layer Indication to send in INIT / INIT-ACK.
    pub adaptation: Option<u32>,
    /// When set, associations whose peer does not indicate this value
    /// are refused (RFC 5043 §7.1, §11.1).
    pub require_adaptation: Option<u32>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            secret: [0; 16],
            streams: 16,
            recv_buffer: 1 << 20,
            send_buffer: 1 << 20,
            max_message: 256 * 1024,
            max_fragments: 1024,
            max_packet: 1480,
            max_tsn_window: 8192,
            rto_initial: SEC,
            rto_min: SEC,
            rto_max: 60 * SEC,
            max_init_retransmits: 8,
            max_retransmits: 10,
            heartbeat_interval: 30 * SEC,
            sack_delay: 200 * MS,
            cookie_lifetime: 60 * SEC,
            adaptation: None,
            require_adaptation: None,
        }
    }
}

impl Config {
    /// Checks the limits hang together; returns the offending field.
    pub fn validate(&self) -> Result<(), &'static str> {
        if self.streams == 0 {
            return Err("streams must be at least 1");
        }
        if self.max_packet < 256 || self.max_packet > 65_535 {
            return Err("max_packet must be within 256..=65535");
        }
        if self.max_tsn_window == 0 || self.max_tsn_window > 65_535 {
            return Err("max_tsn_window must be within 1..=65535");
        }
        if self.max_fragments == 0 {
            return Err("max_fragments must be at least 1");
        }
        // A whole message in chunks of the size we send, plus the room
        // kept for the next in-sequence chunk, each chunk charged its
        // bookkeeping. (A peer that cuts its messages smaller may find a
        // message of max_message octets does not fit: its own stall.)
        let reserve = self.max_packet + RX_CHUNK_OVERHEAD;
        let chunks = self
            .max_message
            .div_ceil(self.max_chunk_payload().max(1))
            .min(self.max_fragments);
        let message = self
            .max_message
            .saturating_add(chunks.saturating_mul(RX_CHUNK_OVERHEAD));
        if self.max_message == 0 || message.saturating_add(reserve) > self.recv_buffer as usize {
            return Err("max_message in max_packet chunks, each charged RX_CHUNK_OVERHEAD, plus max_packet must fit in recv_buffer");
        }
        if self.max_message > self.send_buffer {
            return Err("max_message must fit in send_buffer");
        }
        if self.rto_min == 0 || self.rto_min > self.rto_max {
            return Err("rto_min must be within 1..=rto_max");
        }
        Ok(())
    }

    /// User data octets one DATA chunk carries in a packet of
    /// [`Config::max_packet`] octets.
    pub fn max_chunk_payload(&self) -> usize {
        self.max_packet
            .saturating_sub(COMMON_HEADER_LEN + DATA_HEADER_LEN)
    }
}

/// Association state (RFC 9260 §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// INIT sent.
    CookieWait,
    /// COOKIE-ECHO sent.
    CookieEchoed,
    /// Data flows both ways.
    Established,
    /// Local shutdown asked for; waiting for our data to be acknowledged.
    ShutdownPending,
    /// SHUTDOWN sent.
    ShutdownSent,
    /// SHUTDOWN received; sending what is left.
    ShutdownReceived,
    /// SHUTDOWN-ACK sent.
    ShutdownAckSent,
    /// Finished.
    Closed,
}

/// Why an association ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseReason {
    /// SHUTDOWN sequence completed.
    Shutdown,
    /// We sent ABORT at the user's request.
    LocalAbort,
    /// The peer sent ABORT; its first error cause code, if any.
    PeerAbort(Option<u16>),
    /// Too many retransmissions of INIT / COOKIE-ECHO / DATA / SHUTDOWN /
    /// HEARTBEAT (§8.1, §5.1.6).
    Timeout,
    /// The peer did not indicate the adaptation layer we require
    /// (RFC 5043 §11.1); we sent ABORT.
    AdaptationRefused,
    /// We aborted on a peer's protocol violation or resource exhaustion;
    /// the cause code we sent.
    ProtocolError(u16),
}

/// A received user message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Stream Identifier.
    pub stream: u16,
    /// Payload Protocol Identifier.
    pub ppid: u32,
    /// Delivered unordered.
    pub unordered: bool,
    /// The message.
    pub data: Vec<u8>,
}

/// A whole user message offered in place, borrowed from the received
/// packet ([`Association::handle_packet_with`]): one DATA chunk with B and
/// E set whose delivery is due now (unordered, or the next SSN of its
/// stream) and with no event still waiting before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRef<'a> {
    /// Stream Identifier.
    pub stream: u16,
    /// Payload Protocol Identifier.
    pub ppid: u32,
    /// Delivered unordered.
    pub unordered: bool,
    /// The message: the chunk's User Data, in the caller's packet.
    pub data: &'a [u8],
}

/// Something the user should know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The association is established.
    Connected,
    /// A user message arrived.
    Message(Message),
    /// The peer sent an ERROR chunk; its first cause code.
    PeerError(u16),
    /// The peer started a shutdown: it sends no new data.
    ShutdownReceived,
    /// The association is closed.
    Closed(CloseReason),
}

/// Counters, for tests and monitoring.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// DATA chunks sent for the first time.
    pub data_chunks_sent: u64,
    /// DATA chunks retransmitted (T3 or fast retransmit).
    pub retransmits: u64,
    /// Times fast retransmit marked chunks (§7.2.4).
    pub fast_retransmits: u64,
    /// T3-rtx expiries (§6.3.3).
    pub t3_expiries: u64,
    /// Duplicate DATA chunks received.
    pub dup_data_received: u64,
    /// Received packets discarded (checksum, malformed, wrong tag or ports).
    pub packets_discarded: u64,
    /// DATA chunks delivered out of TSN order (a gap existed).
    pub out_of_order_data: u64,
    /// HEARTBEATs sent (§8.3).
    pub heartbeats_sent: u64,
    /// HEARTBEAT-ACKs matching our outstanding HEARTBEAT.
    pub heartbeat_acks: u64,
    /// Held DATA chunks dropped because they can never be part of a
    /// whole message (§6.9), or repeat a stream sequence number.
    pub pruned_chunks: u64,
    /// Received packets that passed the verification tag check with one
    /// of the association's tags (§8.5, §8.5.1): every accepted packet but
    /// an INIT, whose tag is 0 and proves nothing. RFC 6951 §5.4: the
    /// caller moves a UDP-encapsulated association's remote port only
    /// for a packet that this counter counted.
    pub tag_verified_packets: u64,
    /// DATA chunks taken in place by [`Association::handle_packet_with`]'s
    /// receiver: whole messages delivered from the packet, never held,
    /// reassembled or queued as an event.
    pub data_in_place: u64,
}

/// `name value` per line, the values aligned.
impl core::fmt::Display for Stats {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        let rows = [
            ("data_chunks_sent", self.data_chunks_sent),
            ("retransmits", self.retransmits),
            ("fast_retransmits", self.fast_retransmits),
            ("t3_expiries", self.t3_expiries),
            ("dup_data_received", self.dup_data_received),
            ("packets_discarded", self.packets_discarded),
            ("out_of_order_data", self.out_of_order_data),
            ("heartbeats_sent", self.heartbeats_sent),
            ("heartbeat_acks", self.heartbeat_acks),
            ("pruned_chunks", self.pruned_chunks),
            ("tag_verified_packets", self.tag_verified_packets),
            ("data_in_place", self.data_in_place),
        ];
        let w = rows.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (name, value) in rows {
            writeln!(f, "{name:<w$} {value}")?;
        }
        Ok(())
    }
}

/// Why [`Association::send`] refused a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendError {
    /// Not in ESTABLISHED (or shutting down).
    NotEstablished,
    /// Stream number at or above the negotiated outbound stream count.
    InvalidStream {
        /// Stream asked for.
        stream: u16,
        /// Negotiated outbound streams.
        streams: u16,
    },
    /// Empty message (SCTP carries no empty DATA chunks, §3.3.1).
    Empty,
    /// Larger than [`Config::max_message`].
    TooLarge {
        /// Message length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Send buffer full; try again after acknowledgements.
    BufferFull,
}

/// Timers (RFC 9260 §5.1.6, §6.3, §6.2, §8.3, §9.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Timer {
    /// T1-init / T1-cookie.
    T1 = 0,
    /// T2-shutdown.
    T2 = 1,
    /// T3-rtx.
    T3 = 2,
    /// Delayed SACK.
    Sack = 3,
    /// Heartbeat.
    Heartbeat = 4,
}

const TIMERS: [Timer; 5] = [
    Timer::T1,
    Timer::T2,
    Timer::T3,
    Timer::Sack,
    Timer::Heartbeat,
];

/// Most capacity an association keeps in acknowledged payload vectors
/// for reuse ([`Association::take_spare`]) once its send queue is empty,
/// and at most a quarter of [`Config::send_buffer`]. While data is queued
/// the spares may fill the room the queue does not use (queue and spares
/// together within `send_buffer`), so that a stream reuses every vector
/// instead of allocating and zeroing most of them (at MTU 9000 the zeroing
/// was 8 % of a DDP Write stream's instructions with the spares held to
/// this bound throughout). Our own memory, which a moment ago was in the
/// send queue; freed with the association.
pub const SPARE_CAPACITY: usize = 256 * 1024;
/// Smaller payload vectors are not kept: too small to reuse for a segment.
const SPARE_MIN: usize = 512;

/// Octets of its own an external chunk may carry before its tail
/// ([`Association::send_ext`]).
pub const EXT_PREFIX_MAX: usize = 4;

/// The payload of a chunk the caller writes at each transmission
/// ([`Association::send_ext`]): a few octets of its own, then `len`
/// octets the caller's fill writes (key `key`).
#[derive(Debug, Clone, Copy)]
struct ExtTail {
    prefix: [u8; EXT_PREFIX_MAX],
    prefix_len: u8,
    key: u64,
    len: u32,
}

#[derive(Debug)]
struct OutChunk {
    tsn: u32,
    stream: u16,
    ssn: u16,
    ppid: u32,
    flags: DataFlags,
    /// The payload, or nothing when `ext` describes it.
    data: Vec<u8>,
    ext: Option<ExtTail>,
    sent_count: u32,
    in_flight: bool,
    gap_acked: bool,
    needs_rtx: bool,
    missing: u8,
    fast_rtx_done: bool,
}

impl OutChunk {
    /// Payload octets.
    #[inline]
    fn len(&self) -> usize {
        match &self.ext {
            None => self.data.len(),
            Some(e) => usize::from(e.prefix_len) + e.len as usize,
        }
    }

    /// Write the DATA chunk (§3.3.1) into `buf`, padded; `None` when it
    /// does not fit or the fill of an external payload fails (`*failed`).
    #[inline(always)]
    fn emit<F: FnMut(u64, &mut [u8]) -> bool>(
        &self,
        buf: &mut [u8],
        fill: &mut F,
        failed: &mut bool,
    ) -> Option<usize> {
        let Some(e) = &self.ext else {
            let r = DataRepr {
                flags: self.flags,
                tsn: self.tsn,
                stream_id: self.stream,
                ssn: self.ssn,
                ppid: self.ppid,
                payload: &self.data,
            };
            return r.emit(buf).ok();
        };
        let total = DATA_HEADER_LEN + self.len();
        let padded = (total + 3) & !3;
        if padded > buf.len() || total > usize::from(u16::MAX) {
            return None;
        }
        let prefix = &e.prefix[..usize::from(e.prefix_len)];
        let r = DataRepr {
            flags: self.flags,
            tsn: self.tsn,
            stream_id: self.stream,
            ssn: self.ssn,
            ppid: self.ppid,
            payload: prefix,
        };
        r.emit(buf).ok()?;
        // The Chunk Length covers the tail the fill writes (§3.3.1: the
        // header and the user data, without padding).
        buf[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let at = DATA_HEADER_LEN + prefix.len();
        if !fill(e.key, &mut buf[at..total]) {
            *failed = true;
            return None;
        }
        buf[total..padded].fill(0);
        Some(padded)
    }
}

#[derive(Debug)]
struct InChunk {
    stream: u16,
    ssn: u16,
    ppid: u32,
    flags: DataFlags,
    data: Vec<u8>,
}

/// What the peer told us in its INIT / INIT-ACK, and what we agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Cookie {
    created: u64,
    local_tag: u32,
    peer_tag: u32,
    local_tsn: u32,
    peer_tsn: u32,
    peer_rwnd: u32,
    out_streams: u16,
    in_streams: u16,
    local_port: u16,
    peer_port: u16,
    peer_adaptation: Option<u32>,
    /// Tie-Tags (RFC 9260 §5.2.2): nonces standing for an existing
    /// association's tags, never the tags themselves; 0 when none.
    local_tie_tag: u32,
    peer_tie_tag: u32,
}

impl Cookie {
    /// The MAC over the cookie's body and the addresses it was issued
    /// between (§5.1.3: the cookie is bound to what the INIT came on, so
    /// a cookie issued to one address is refused from another).
    fn mac(key: &Key, body: &[u8], addrs: Addrs<'_>) -> u64 {
        let mut m = [0u8; 56 + 2 * (1 + MAX_ADDR_LEN)];
        let mut n = body.len().min(56);
        m[..n].copy_from_slice(&body[..n]);
        for a in [addrs.local, addrs.peer] {
            let a = &a[..a.len().min(MAX_ADDR_LEN)];
            m[n] = a.len() as u8;
            m[n + 1..n + 1 + a.len()].copy_from_slice(a);
            n += 1 + a.len();
        }
        mac::siphash24(key, &m[..n])
    }

    fn encode(&self, key: &Key, addrs: Addrs<'_>) -> [u8; COOKIE_LEN] {
        let mut b = [0u8; COOKIE_LEN];
        b[0..4].copy_from_slice(b"SLC2");
        b[4..12].copy_from_slice(&self.created.to_be_bytes());
        b[12..16].copy_from_slice(&self.local_tag.to_be_bytes());
        b[16..20].copy_from_slice(&self.peer_tag.to_be_bytes());
        b[20..24].copy_from_slice(&self.local_tsn.to_be_bytes());
        b[24..28].copy_from_slice(&self.peer_tsn.to_be_bytes());
        b[28..32].copy_from_slice(&self.peer_rwnd.to_be_bytes());
        b[32..34].copy_from_slice(&self.out_streams.to_be_bytes());
        b[34..36].copy_from_slice(&self.in_streams.to_be_bytes());
        b[36..38].copy_from_slice(&self.local_port.to_be_bytes());
        b[38..40].copy_from_slice(&self.peer_port.to_be_bytes());
        b[40] = u8::from(self.peer_adaptation.is_some());
        b[44..48].copy_from_slice(&self.peer_adaptation.unwrap_or(0).to_be_bytes());
        b[48..52].copy_from_slice(&self.local_tie_tag.to_be_bytes());
        b[52..56].copy_from_slice(&self.peer_tie_tag.to_be_bytes());
        let m = Self::mac(key, &b[..56], addrs);
        b[56..64].copy_from_slice(&m.to_be_bytes());
        b
    }

    /// RFC 9260 §5.1.5 steps 1-3: MAC, then lifetime.
    fn decode(b: &[u8], key: &Key, addrs: Addrs<'_>, now: u64, lifetime: u64) -> Option<Cookie> {
        if b.len() != COOKIE_LEN || &b[0..4] != b"SLC2" {
            return None;
        }
        let m = Self::mac(key, &b[..56], addrs);
        // Not constant time in the comparison of two u64, which is a single
        // instruction: no timing channel worth the name.
        if m.to_be_bytes() != b[56..64] {
            return None;
        }
        let u32_at = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let u16_at = |i: usize| u16::from_be_bytes([b[i], b[i + 1]]);
        let mut c8 = [0u8; 8];
        c8.copy_from_slice(&b[4..12]);
        let created = u64::from_be_bytes(c8);
        // RFC 9260 §5.1.5 step 3: a cookie older than its lifespan is stale.
        if created > now || now - created > lifetime {
            return None;
        }
        Some(Cookie {
            created,
            local_tag: u32_at(12),
            peer_tag: u32_at(16),
            local_tsn: u32_at(20),
            peer_tsn: u32_at(24),
            peer_rwnd: u32_at(28),
            out_streams: u16_at(32),
            in_streams: u16_at(34),
            local_port: u16_at(36),
            peer_port: u16_at(38),
            peer_adaptation: if b[40] != 0 { Some(u32_at(44)) } else { None },
            local_tie_tag: u32_at(48),
            peer_tie_tag: u32_at(52),
        })
    }
}

fn tag_key(secret: &Key) -> Key {
    mac::derive(secret, b"sctp-lite tags and TSNs")
}

fn random_pair(key: &Key, now: u64, nonce: u64, ports: (u16, u16)) -> (u32, u32) {
    let mut m = [0u8; 20];
    m[..8].copy_from_slice(&now.to_be_bytes());
    m[8..16].copy_from_slice(&nonce.to_be_bytes());
    m[16..18].copy_from_slice(&ports.0.to_be_bytes());
    m[18..20].copy_from_slice(&ports.1.to_be_bytes());
    let h = mac::siphash24(key, &m);
    let tag = (h >> 32) as u32;
    // RFC 9260 §5.3.1: the tag MUST NOT be 0.
    (if tag == 0 { 1 } else { tag }, h as u32)
}

/// Serial-number comparison of TSNs (RFC 9260 §1.6, RFC 1982).
fn tsn_lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}
fn tsn_le(a: u32, b: u32) -> bool {
    a == b || tsn_lt(a, b)
}

/// A packet's chunks, parsed: on the stack up to four (a DATA chunk and
/// a SACK, say), no allocation per packet (it was 1.4 % of a DDP Write
/// stream's instructions).
type Chunks<'a> = smallvec::SmallVec<[ChunkRepr<'a>; 4]>;

/// Checks a packet and returns its chunks, parsed. `None` when it is to
/// be silently discarded (bad checksum, malformed chunk, §6.8, §3.2).
fn parse_all(bytes: &[u8]) -> Option<(HeaderRepr, Chunks<'_>)> {
    let mut v = Chunks::new();
    let h = parse_into(bytes, &mut v)?;
    Some((h, v))
}

/// [`parse_all`] into the caller's `v` (empty): the chunks are not moved
/// again on the way out (the list is some hundreds of octets, copied
/// twice a packet when returned).
fn parse_into<'a>(bytes: &'a [u8], v: &mut Chunks<'a>) -> Option<HeaderRepr> {
    let p = SctpPacket::new_checked(bytes).ok()?;
    p.verify_checksum().ok()?;
    let h = HeaderRepr::parse(&p);
    // Chunks borrow the original slice, not the view.
    let mut rest = bytes.get(COMMON_HEADER_LEN..)?;
    while !rest.is_empty() {
        let (c, used) = wire::parse_chunk(rest).ok()?;
        v.push(ChunkRepr::parse(&c).ok()?);
        rest = rest.get(used..)?;
        // Bound the per-packet work a peer can ask for.
        if v.len() > 4096 {
            return None;
        }
    }
    Some(h)
}

fn emit_one(h: HeaderRepr, c: &ChunkRepr<'_>, out: &mut [u8]) -> Option<usize> {
    wire::emit_packet(&h, core::slice::from_ref(c), out).ok()
}

#[allow(clippy::too_many_arguments)]
fn build_init_ack(
    cfg: &Config,
    now: u64,
    local_tag: u32,
    local_tsn: u32,
    tie_tags: (u32, u32),
    init: &InitRepr<'_>,
    h: &HeaderRepr,
    addrs: Addrs<'_>,
    out: &mut [u8],
) -> Option<usize> {
    let cookie = Cookie {
        created: now,
        local_tag,
        peer_tag: init.initiate_tag,
        local_tsn,
        peer_tsn: init.initial_tsn,
        peer_rwnd: init.a_rwnd,
        // RFC 9260 §5.1.1: each side uses min(own OS, peer MIS).
        out_streams: cfg.streams.min(init.num_inbound_streams),
        in_streams: cfg.streams.min(init.num_outbound_streams),
        local_port: h.dst_port,
        peer_port: h.src_port,
        peer_adaptation: init.params.adaptation,
        local_tie_tag: tie_tags.0,
        peer_tie_tag: tie_tags.1,
    }
    .encode(&cfg.secret, addrs);
    let ack = InitRepr {
        initiate_tag: local_tag,
        a_rwnd: cfg.recv_buffer,
        num_outbound_streams: cfg.streams,
        num_inbound_streams: cfg.streams,
        initial_tsn: local_tsn,
        params: InitParams {
            state_cookie: Some(&cookie),
            adaptation: cfg.adaptation,
            // §3.3.3: report unknown INIT parameters whose type asks for it.
            unrecognized_reported: init.params.unrecognized,
            ..Default::default()
        },
    };
    // §8.5.1: the INIT-ACK carries the INIT's Initiate Tag.
    let rh = HeaderRepr {
        src_port: h.dst_port,
        dst_port: h.src_port,
        verification_tag: init.initiate_tag,
    };
    // The report of unrecognized parameters is the peer's to size: when it
    // would not fit the packet, the INIT-ACK goes without it.
    emit_one(rh, &ChunkRepr::InitAck(ack), out).or_else(|| {
        let mut bare = ack;
        bare.params.unrecognized_reported = None;
        emit_one(rh, &ChunkRepr::InitAck(bare), out)
    })
}

/// Answers INITs with a State Cookie and turns valid COOKIE-ECHOs into
/// associations (RFC 9260 §5.1.3, §5.1.5). Keeps no per-INIT state.
///
/// The caller demultiplexes first: a packet whose ports (and verification
/// tag) belong to a live association goes to that association, and only
/// the rest to the listener. Otherwise a retransmitted COOKIE-ECHO (its
/// COOKIE-ACK lost) would make a second association.
#[derive(Debug)]
pub struct Listener {
    cfg: Config,
    key: Key,
    counter: u64,
}

/// What a [`Listener`] made of a packet.
#[derive(Debug)]
pub enum ListenOutcome {
    /// Nothing to do (discarded, §8.4).
    Drop,
    /// Send the first `n` octets of `out` back to the packet's source.
    Reply(usize),
    /// A valid COOKIE-ECHO: the new association, already fed the whole
    /// packet (COOKIE-ACK and any bundled DATA are in it).
    Accept(Box<Association>),
}

impl Listener {
    /// A listener; `cfg` must pass [`Config::validate`].
    pub fn new(cfg: Config) -> Result<Self, &'static str> {
        cfg.validate()?;
        let key = tag_key(&cfg.secret);
        Ok(Listener {
            cfg,
            key,
            counter: 0,
        })
    }

    /// Handles a packet that belongs to no association, binding cookies to
    /// no address: for simulations and tests. Network glue calls
    /// [`Listener::handle_packet_from`].
    pub fn handle_packet(&mut self, now: u64, bytes: &[u8], out: &mut [u8]) -> ListenOutcome {
        self.handle_packet_from(now, Addrs::default(), bytes, out)
    }

    /// Handles a packet that belongs to no association and travelled
    /// between `addrs`. The State Cookie of an INIT-ACK is MAC'd together
    /// with them, and a COOKIE-ECHO is accepted only between the same
    /// addresses: a cookie issued to one address cannot make associations
    /// from spoofed others.
    pub fn handle_packet_from(
        &mut self,
        now: u64,
        addrs: Addrs<'_>,
        bytes: &[u8],
        out: &mut [u8],
    ) -> ListenOutcome {
        let Some((h, chunks)) = parse_all(bytes) else {
            return ListenOutcome::Drop;
        };
        let Some(first) = chunks.first() else {
            return ListenOutcome::Drop;
        };
        match first {
            ChunkRepr::Init(init) => {
                // §8.5.1 A, §6.10: INIT has tag 0 and is alone in its packet.
                if h.verification_tag != 0 || chunks.len() != 1 {
                    return ListenOutcome::Drop;
                }
                if let Some(want) = self.cfg.require_adaptation {
                    if init.params.adaptation != Some(want) {
                        // RFC 5043 §7.1, §11.1: refuse, with ABORT carrying
                        // the INIT's Initiate Tag (§8.4, §5.1 note).
                        let (cause, n) = adaptation_cause(init.params.adaptation);
                        let rh = HeaderRepr {
                            src_port: h.dst_port,
                            dst_port: h.src_port,
                            verification_tag: init.initiate_tag,
                        };
                        return match emit_one(
                            rh,
                            &ChunkRepr::Abort {
                                t_bit: false,
                                causes: &cause[..n],
                            },
                            out,
                        ) {
                            Some(n) => ListenOutcome::Reply(n),
                            None => ListenOutcome::Drop,
                        };
                    }
                }
                self.counter = self.counter.wrapping_add(1);
                let (tag, tsn) =
                    random_pair(&self.key, now, self.counter, (h.dst_port, h.src_port));
                match build_init_ack(&self.cfg, now, tag, tsn, (0, 0), init, &h, addrs, out) {
                    Some(n) => ListenOutcome::Reply(n),
                    None => ListenOutcome::Drop,
                }
            }
            ChunkRepr::CookieEcho { cookie } => {
                let Some(c) = Cookie::decode(
                    cookie,
                    &self.cfg.secret,
                    addrs,
                    now,
                    self.cfg.cookie_lifetime,
                ) else {
                    return ListenOutcome::Drop;
                };
                // §5.1.5 / §8.5.1: tag and ports must be the cookie's.
                if h.verification_tag != c.local_tag
                    || h.dst_port != c.local_port
                    || h.src_port != c.peer_port
                {
                    return ListenOutcome::Drop;
                }
                let mut a = Association::from_cookie(self.cfg.clone(), &c, now);
                a.cookie_addrs = Some(owned_addrs(addrs));
                a.handle_packet(now, bytes);
                ListenOutcome::Accept(Box::new(a))
            }
            _ => match out_of_the_blue(bytes, out) {
                Some(n) => ListenOutcome::Reply(n),
                None => ListenOutcome::Drop,
            },
        }
    }
}

/// The answer to an out-of-the-blue packet (RFC 9260 §8.4), one that
/// belongs to no association (or to one already closed): SHUTDOWN COMPLETE
/// to a SHUTDOWN ACK (item 5), nothing to ABORT, SHUTDOWN COMPLETE, COOKIE
/// ACK (items 2, 6, 7) or COOKIE ECHO (left to a [`Listener`]), and ABORT
/// to anything else (item 8); both with the packet's tag reflected and the
/// T bit set. An INIT reaches here only when no [`Listener`] takes it (no
/// one listens on its port): it cannot be processed normally, so it gets
/// an ABORT whose Verification Tag is the INIT's Initiate Tag, T bit clear
/// (item 3, §5.1), and the initiator learns at once that nobody listens
/// (as from Linux) instead of retrying its INIT until Max.Init.Retransmits.
/// An INIT whose own tag is not 0 is discarded (§8.5.1 A). Returns the
/// reply's length in `out`.
pub fn out_of_the_blue(bytes: &[u8], out: &mut [u8]) -> Option<usize> {
    let (h, chunks) = parse_all(bytes)?;
    if let Some(ChunkRepr::Init(init)) = chunks.first() {
        // §6.10: an INIT is bundled with nothing; a packet that bundles
        // one is not answered.
        if h.verification_tag != 0 || chunks.len() != 1 {
            return None;
        }
        let rh = HeaderRepr {
            src_port: h.dst_port,
            dst_port: h.src_port,
            verification_tag: init.initiate_tag,
        };
        return emit_one(
            rh,
            &ChunkRepr::Abort {
                t_bit: false,
                causes: &[],
            },
            out,
        );
    }
    let has = |t: u8| chunks.iter().any(|c| c.chunk_type() == t);
    if chunks.is_empty()
        || has(chunk_type::ABORT)
        || has(chunk_type::SHUTDOWN_COMPLETE)
        || has(chunk_type::COOKIE_ACK)
        || has(chunk_type::INIT)
        || has(chunk_type::COOKIE_ECHO)
    {
        return None;
    }
    let rh = HeaderRepr {
        src_port: h.dst_port,
        dst_port: h.src_port,
        verification_tag: h.verification_tag,
    };
    let reply = if has(chunk_type::SHUTDOWN_ACK) {
        ChunkRepr::ShutdownComplete { t_bit: true }
    } else {
        ChunkRepr::Abort {
            t_bit: true,
            causes: &[],
        }
    };
    emit_one(rh, &reply, out)
}

fn adaptation_cause(got: Option<u32>) -> ([u8; 16], usize) {
    match got {
        // Missing Mandatory Parameter: count 1, the missing type.
        None => {
            let mut v = [0u8; 6];
            v[0..4].copy_from_slice(&1u32.to_be_bytes());
            v[4..6].copy_from_slice(&param_type::ADAPTATION_LAYER_INDICATION.to_be_bytes());
            wire::error_cause(cause_code::MISSING_MANDATORY_PARAMETER, &v)
        }
        Some(_) => wire::error_cause(cause_code::INVALID_MANDATORY_PARAMETER, &[]),
    }
}

#[derive(Debug, Default)]
struct Pending {
    init: bool,
    cookie_echo: bool,
    cookie_ack: bool,
    sack: bool,
    shutdown: bool,
    shutdown_ack: bool,
    shutdown_complete: bool,
    heartbeat: bool,
    abort: Option<([u8; 16], usize)>,
    heartbeat_ack: Option<Vec<u8>>,
    error: Option<Vec<u8>>,
    init_ack: Option<Vec<u8>>,
}

impl Pending {
    /// Whether any control chunk waits to be sent: one test for the idle
    /// poll instead of one per kind.
    fn any(&self) -> bool {
        self.init
            || self.cookie_echo
            || self.cookie_ack
            || self.sack
            || self.shutdown
            || self.shutdown_ack
            || self.shutdown_complete
            || self.heartbeat
            || self.abort.is_some()
            || self.heartbeat_ack.is_some()
            || self.error.is_some()
            || self.init_ack.is_some()
    }
}

/// One SCTP association.
#[derive(Debug)]
pub struct Association {
    cfg: Config,
    state: State,
    local_port: u16,
    peer_port: u16,
    local_tag: u32,
    peer_tag: u32,
    tag_key: Key,
    nonce: u64,
    /// Tie-Tags (§5.2.2), made on the first unexpected INIT.
    tie_tags: (u32, u32),
    /// The addresses the Listener bound this association's State Cookie to
    /// (length and octets of ours, then the peer's), so that a retransmitted
    /// COOKIE-ECHO, whose COOKIE-ACK was lost, still decodes here and is
    /// acknowledged again (§5.2.4 case D).
    cookie_addrs: Option<(u8, [u8; MAX_ADDR_LEN], u8, [u8; MAX_ADDR_LEN])>,
    timers: [Option<u64>; 5],
    pending: Pending,
    events: VecDeque<Event>,
    init_retries: u32,
    cookie: Vec<u8>,
    init_tsn: u32,
    peer_adaptation: Option<u32>,
    out_streams: u16,
    in_streams: u16,
    // Sending.
    next_tsn: u32,
    /// Highest TSN the peer acknowledged cumulatively.
    peer_cum_ack: u32,
    out: VecDeque<OutChunk>,
    out_bytes: usize,
    /// Payload vectors of acknowledged chunks, kept for
    /// [`take_spare`](Association::take_spare) (at most
    /// [`SPARE_CAPACITY`] octets of capacity in all).
    spare: Vec<Vec<u8>>,
    /// Their capacity, in all.
    spare_capacity: usize,
    next_ssn_out: Vec<u16>,
    peer_rwnd: u32,
    cwnd: usize,
    ssthresh: usize,
    partial_bytes_acked: usize,
    flight: usize,
    fast_recovery_exit: Option<u32>,
    rto: u64,
    srtt: Option<(u64, u64)>,
    rtt_probe: Option<(u32, u64)>,
    error_count: u32,
    hb_outstanding: Option<(u64, u64)>,
    last_activity: u64,
    /// One packet of retransmissions may ignore cwnd (§6.3.3 E3, §7.2.4 3).
    rtx_burst: bool,
    /// A fill of an external payload failed ([`Association::ext_failed`]).
    ext_failed: bool,
    /// Chunks in `out` marked for retransmission (`needs_rtx`), and
    /// those gap-acknowledged (`gap_acked`): with them the per-packet and
    /// per-SACK work skips the queue when nothing is marked. (Chunks are
    /// sent in queue order, so the never-sent ones are a suffix of `out`,
    /// found by binary search: [`Association::first_unsent`].)
    rtx_marked: usize,
    gap_acked_n: usize,
    stats: Stats,
    // Receiving.
    rx_cum: u64,
    rx_received: BTreeSet<u64>,
    rx_chunks: BTreeMap<u64, InChunk>,
    /// Runs of held fragments: first TSN -> (last TSN, payload octets).
    /// Consecutive TSNs, each chunk joining the next (§6.9); a run from a
    /// B to an E chunk is a whole message.
    rx_runs: BTreeMap<u64, (u64, usize)>,
    rx_bytes: usize,
    next_ssn_in: Vec<u16>,
    ready: BTreeMap<(u16, u16), (u64, u64)>,
    dups: Vec<u32>,
    data_packets_unacked: u32,
    last_rwnd_sent: u32,
    /// Reassembly work: held entries looked up or visited (for tests
    /// that bound the work a peer can ask for per chunk).
    rx_work: u64,
}

impl Association {
    /// Starts an association: the first [`Association::poll_transmit`]
    /// gives the INIT. `nonce` makes tags differ between associations
    /// opened at the same `now`.
    pub fn connect(
        cfg: Config,
        local_port: u16,
        peer_port: u16,
        now: u64,
        nonce: u64,
    ) -> Result<Self, &'static str> {
        cfg.validate()?;
        let key = tag_key(&cfg.secret);
        let (tag, tsn) = random_pair(&key, now, nonce, (local_port, peer_port));
        let mut a = Self::blank(cfg, key, local_port, peer_port, tag, tsn, now);
        a.state = State::CookieWait;
        a.pending.init = true;
        a.set_timer(Timer::T1, now.saturating_add(a.rto));
        Ok(a)
    }

    #[allow(clippy::too_many_arguments)]
    fn blank(
        cfg: Config,
        tag_key: Key,
        local_port: u16,
        peer_port: u16,
        tag: u32,
        tsn: u32,
        now: u64,
    ) -> Self {
        let rto = cfg.rto_initial.clamp(cfg.rto_min, cfg.rto_max);
        let mtu = cfg.max_packet;
        let rwnd = cfg.recv_buffer;
        let streams = usize::from(cfg.streams);
        Association {
            state: State::Closed,
            local_port,
            peer_port,
            local_tag: tag,
            peer_tag: 0,
            tag_key,
            nonce: 0,
            tie_tags: (0, 0),
            cookie_addrs: None,
            timers: [None; 5],
            pending: Pending::default(),
            events: VecDeque::new(),
            init_retries: 0,
            cookie: Vec::new(),
            init_tsn: tsn,
            peer_adaptation: None,
            out_streams: cfg.streams,
            in_streams: cfg.streams,
            next_tsn: tsn,
            peer_cum_ack: tsn.wrapping_sub(1),
            out: VecDeque::new(),
            out_bytes: 0,
            spare: Vec::new(),
            spare_capacity: 0,
            next_ssn_out: vec![0; streams],
            peer_rwnd: 0,
            // §7.2.1: initial cwnd.
            cwnd: (4 * mtu).min((2 * mtu).max(4380)),
            ssthresh: usize::MAX,
            partial_bytes_acked: 0,
            flight: 0,
            fast_recovery_exit: None,
            rto,
            srtt: None,
            rtt_probe: None,
            error_count: 0,
            hb_outstanding: None,
            last_activity: now,
            rtx_burst: false,
            ext_failed: false,
            rtx_marked: 0,
            gap_acked_n: 0,
            stats: Stats::default(),
            rx_cum: 0,
            rx_received: BTreeSet::new(),
            rx_chunks: BTreeMap::new(),
            rx_runs: BTreeMap::new(),
            rx_bytes: 0,
            next_ssn_in: vec![0; streams],
            ready: BTreeMap::new(),
            dups: Vec::new(),
            data_packets_unacked: 0,
            last_rwnd_sent: rwnd,
            rx_work: 0,
            cfg,
        }
    }

    fn from_cookie(cfg: Config, c: &Cookie, now: u64) -> Self {
        let key = tag_key(&cfg.secret);
        let mut a = Self::blank(
            cfg,
            key,
            c.local_port,
            c.peer_port,
            c.local_tag,
            c.local_tsn,
            now,
        );
        a.adopt(c);
        a.state = State::Established;
        a.pending.cookie_ack = true;
        a.events.push_back(Event::Connected);
        a.arm_heartbeat(now);
        a
    }

    fn adopt(&mut self, c: &Cookie) {
        self.peer_tag = c.peer_tag;
        self.peer_rwnd = c.peer_rwnd;
        // §7.2.1: initial ssthresh may be arbitrarily high; we use a_rwnd.
        self.ssthresh = c.peer_rwnd as usize;
        self.out_streams = c.out_streams;
        self.in_streams = c.in_streams;
        self.next_ssn_out = vec![0; usize::from(c.out_streams)];
        self.next_ssn_in = vec![0; usize::from(c.in_streams)];
        // Unwrapped TSN space: start at 2^32 so that cum - 1 never underflows.
        self.rx_cum = (1u64 << 32) | u64::from(c.peer_tsn.wrapping_sub(1));
        self.peer_adaptation = c.peer_adaptation;
    }

    /// Counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }
    /// Current state.
    pub fn state(&self) -> State {
        self.state
    }
    /// Whether the association has ended.
    pub fn is_closed(&self) -> bool {
        self.state == State::Closed
    }
    /// Our verification tag (packets to us carry it).
    pub fn local_tag(&self) -> u32 {
        self.local_tag
    }
    /// The peer's verification tag (0 until known).
    pub fn peer_tag(&self) -> u32 {
        self.peer_tag
    }
    /// Local port.
    pub fn local_port(&self) -> u16 {
        self.local_port
    }
    /// Peer port.
    pub fn peer_port(&self) -> u16 {
        self.peer_port
    }
    /// The peer's Adaptation Layer Indication, once known.
    pub fn peer_adaptation(&self) -> Option<u32> {
        self.peer_adaptation
    }
    /// Negotiated (outbound, inbound) stream counts.
    pub fn streams(&self) -> (u16, u16) {
        (self.out_streams, self.in_streams)
    }
    /// Congestion window, octets.
    pub fn cwnd(&self) -> usize {
        self.cwnd
    }
    /// Current RTO, ns.
    pub fn rto(&self) -> u64 {
        self.rto
    }
    /// Octets charged against [`Config::recv_buffer`]: received user data
    /// in reassembly or in events the user has not taken yet, plus
    /// [`RX_CHUNK_OVERHEAD`] for each chunk in reassembly. At most
    /// [`Config::recv_buffer`].
    pub fn recv_buffered(&self) -> usize {
        self.rx_bytes
    }
    /// Reassembly work so far: held chunks and runs looked up or visited
    /// (joining runs, pruning, delivering). Each received chunk costs a
    /// bounded number of these, amortised, whatever a peer sends: the
    /// invariant fuzzer (`tests/tests/heap_bound.rs`) bounds it per chunk
    /// handed in.
    pub fn rx_work(&self) -> u64 {
        self.rx_work
    }
    /// User data octets queued and not yet acknowledged.
    pub fn send_buffered(&self) -> usize {
        self.out_bytes
    }
    /// User data one DATA chunk carries without fragmentation.
    pub fn max_chunk_payload(&self) -> usize {
        self.cfg.max_chunk_payload()
    }
    /// Whether a TSN we sent is still unacknowledged cumulatively. TSNs
    /// come from [`Association::send`]'s return value.
    pub fn is_acked(&self, tsn: u32) -> bool {
        tsn_le(tsn, self.peer_cum_ack)
    }

    fn set_timer(&mut self, t: Timer, at: u64) {
        self.timers[t as usize] = Some(at);
    }
    fn stop_timer(&mut self, t: Timer) {
        self.timers[t as usize] = None;
    }
    fn arm_heartbeat(&mut self, now: u64) {
        if self.cfg.heartbeat_interval > 0 {
            self.set_timer(
                Timer::Heartbeat,
                now.saturating_add(self.cfg.heartbeat_interval)
                    .saturating_add(self.rto),
            );
        }
    }

    /// Earliest deadline, if any timer runs.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.timers.iter().flatten().copied().min()
    }

    /// Whether [`poll_event`](Self::poll_event) has an event to give.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty()
    }

    /// Next event.
    pub fn poll_event(&mut self) -> Option<Event> {
        let e = self.events.pop_front()?;
        if let Event::Message(m) = &e {
            self.rx_bytes = self.rx_bytes.saturating_sub(m.data.len());
            // §6.2: tell the peer when the window opened a lot.
            if self.last_rwnd_sent < self.cfg.recv_buffer / 2
                && self.a_rwnd() >= self.cfg.recv_buffer / 2
            {
                self.pending.sack = true;
            }
        }
        Some(e)
    }

    fn a_rwnd(&self) -> u32 {
        (self.cfg.recv_buffer as usize).saturating_sub(self.rx_bytes) as u32
    }

    fn close(&mut self, r: CloseReason) {
        if self.state != State::Closed {
            self.state = State::Closed;
            self.timers = [None; 5];
            self.events.push_back(Event::Closed(r));
        }
    }

    /// Sends ABORT (§9.1) and closes.
    pub fn abort(&mut self) {
        if self.state == State::Closed {
            return;
        }
        self.pending.abort = Some(wire::error_cause(cause_code::USER_INITIATED_ABORT, &[]));
        self.close(CloseReason::LocalAbort);
    }

    /// Sends ABORT with error cause `code` (§3.3.10; e.g.
    /// [`cause_code::OUT_OF_RESOURCE`] when the owner's memory budget ends
    /// the association) and closes with [`CloseReason::ProtocolError`].
    pub fn abort_with_cause(&mut self, code: u16) {
        self.abort_with(code, CloseReason::ProtocolError(code));
    }

    fn abort_with(&mut self, code: u16, reason: CloseReason) {
        if self.state == State::Closed {
            return;
        }
        self.pending.abort = Some(wire::error_cause(code, &[]));
        self.close(reason);
    }

    /// Starts a graceful shutdown (§9.2): queued data is still delivered.
    pub fn shutdown(&mut self, now: u64) {
        match self.state {
            State::Established => {
                self.state = State::ShutdownPending;
                self.progress_shutdown(now);
            }
            State::CookieWait | State::CookieEchoed => self.close(CloseReason::Shutdown),
            _ => {}
        }
    }

    fn progress_shutdown(&mut self, now: u64) {
        if !self.out.is_empty() {
            return;
        }
        match self.state {
            State::ShutdownPending => {
                self.state = State::ShutdownSent;
                self.pending.shutdown = true;
                self.stop_timer(Timer::T3);
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            State::ShutdownReceived => {
                self.state = State::ShutdownAckSent;
                self.pending.shutdown_ack = true;
                self.stop_timer(Timer::T3);
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            _ => {}
        }
    }

    /// Queues a user message; returns the TSN of its last chunk.
    pub fn send(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: &[u8],
    ) -> Result<u32, SendError> {
        self.check_send(stream, data.len())?;
        Ok(self.queue_message(stream, ppid, unordered, data, None))
    }

    /// [`send`](Self::send) of a message the caller gives away: one that
    /// fits one DATA chunk (the common case for DDP Segments, RFC 5043
    /// §9) becomes the chunk's payload without a copy. On refusal the
    /// message comes back with the reason.
    pub fn send_owned(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: Vec<u8>,
    ) -> Result<u32, (SendError, Vec<u8>)> {
        if let Err(e) = self.check_send(stream, data.len()) {
            return Err((e, data));
        }
        if data.len() > self.cfg.max_chunk_payload().max(1) {
            return Ok(self.queue_message(stream, ppid, unordered, &data, None));
        }
        Ok(self.queue_message(stream, ppid, unordered, &[], Some(data)))
    }

    /// Queues a one-chunk message whose payload is `prefix` (at most
    /// [`EXT_PREFIX_MAX`] octets) and then `len` octets the caller writes
    /// whenever the chunk is sent, first time and retransmissions alike
    /// (`fill(key, dst)` of [`poll_transmit_with`](Self::poll_transmit_with)):
    /// the caller keeps what the octets come from until the chunk's TSN,
    /// returned here, is acknowledged ([`is_acked`](Self::is_acked)). It
    /// counts against the send buffer like any message.
    pub fn send_ext(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        prefix: &[u8],
        key: u64,
        len: usize,
    ) -> Result<u32, SendError> {
        let total = prefix.len().saturating_add(len);
        self.check_send(stream, total)?;
        let max = self.cfg.max_chunk_payload().max(1);
        if prefix.len() > EXT_PREFIX_MAX || total > max || len > u32::MAX as usize {
            return Err(SendError::TooLarge { len: total, max });
        }
        let mut p = [0u8; EXT_PREFIX_MAX];
        p[..prefix.len()].copy_from_slice(prefix);
        let tsn = self.queue_message(stream, ppid, unordered, &[], Some(Vec::new()));
        if let Some(c) = self.out.back_mut() {
            c.ext = Some(ExtTail {
                prefix: p,
                prefix_len: prefix.len() as u8,
                key,
                len: len as u32,
            });
        }
        self.out_bytes += total;
        Ok(tsn)
    }

    /// An acknowledged chunk's payload vector, for the caller's next
    /// [`send_owned`](Self::send_owned): a sender of whole-chunk messages
    /// reuses its buffers instead of allocating one per chunk (a 1.4 KiB
    /// allocation and its free cost about 600 instructions, 6 % of a DDP
    /// Write stream's). It still holds the old payload, so that a caller
    /// that overwrites it need not zero it first (15 % of the stream's
    /// instructions at MTU 9000).
    pub fn take_spare(&mut self) -> Option<Vec<u8>> {
        let v = self.spare.pop()?;
        self.spare_capacity -= v.capacity();
        Some(v)
    }

    /// Keep an acknowledged chunk's payload vector for
    /// [`take_spare`](Self::take_spare), within the room the send queue
    /// does not use ([`SPARE_CAPACITY`]).
    fn keep_spare(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        let room = self.cfg.send_buffer.saturating_sub(self.out_bytes);
        if cap >= SPARE_MIN && self.spare_capacity + cap <= room {
            self.spare_capacity += cap;
            self.spare.push(v);
        }
    }

    /// With the send queue empty, spares beyond [`SPARE_CAPACITY`] (and a
    /// quarter of the send buffer) are freed.
    fn trim_spares(&mut self) {
        let bound = SPARE_CAPACITY.min(self.cfg.send_buffer / 4);
        while self.spare_capacity > bound {
            let Some(v) = self.spare.pop() else { break };
            self.spare_capacity -= v.capacity();
        }
    }

    /// The checks of [`send`](Self::send) for a message of `len` octets.
    fn check_send(&self, stream: u16, len: usize) -> Result<(), SendError> {
        if self.state != State::Established {
            return Err(SendError::NotEstablished);
        }
        if stream >= self.out_streams {
            return Err(SendError::InvalidStream {
                stream,
                streams: self.out_streams,
            });
        }
        if len == 0 {
            return Err(SendError::Empty);
        }
        if len > self.cfg.max_message {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_message,
            });
        }
        if self.out_bytes.saturating_add(len) > self.cfg.send_buffer {
            return Err(SendError::BufferFull);
        }
        Ok(())
    }

    /// Queues a message that passed [`Self::check_send`]: `data` cut into
    /// DATA chunks (§6.9), or `whole`, one chunk's payload taken as is.
    fn queue_message(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: &[u8],
        whole: Option<Vec<u8>>,
    ) -> u32 {
        let ssn = if unordered {
            0
        } else {
            let s = &mut self.next_ssn_out[usize::from(stream)];
            let v = *s;
            *s = s.wrapping_add(1);
            v
        };
        let chunk = |tsn: u32, begin: bool, end: bool, data: Vec<u8>| OutChunk {
            tsn,
            stream,
            ssn,
            ppid,
            flags: DataFlags {
                immediate: false,
                unordered,
                begin,
                end,
            },
            data,
            ext: None,
            sent_count: 0,
            in_flight: false,
            gap_acked: false,
            needs_rtx: false,
            missing: 0,
            fast_rtx_done: false,
        };
        let last = self.next_tsn;
        if let Some(w) = whole {
            self.next_tsn = self.next_tsn.wrapping_add(1);
            self.out_bytes += w.len();
            self.out.push_back(chunk(last, true, true, w));
            return last;
        }
        let per = self.cfg.max_chunk_payload().max(1);
        let n = data.len().div_ceil(per);
        let mut last = self.next_tsn;
        for (i, part) in data.chunks(per).enumerate() {
            last = self.next_tsn;
            self.next_tsn = self.next_tsn.wrapping_add(1);
            self.out
                .push_back(chunk(last, i == 0, i + 1 == n, part.to_vec()));
        }
        self.out_bytes += data.len();
        last
    }

    /// Handles expired timers.
    pub fn handle_timeout(&mut self, now: u64) {
        for t in TIMERS {
            match self.timers[t as usize] {
                Some(at) if at <= now => {}
                _ => continue,
            }
            self.stop_timer(t);
            match t {
                Timer::T1 => {
                    // §5.1.6: retransmit INIT / COOKIE-ECHO, back off.
                    self.init_retries += 1;
                    if self.init_retries > self.cfg.max_init_retransmits {
                        self.close(CloseReason::Timeout);
                        return;
                    }
                    self.rto = self.rto.saturating_mul(2).min(self.cfg.rto_max);
                    match self.state {
                        State::CookieWait => self.pending.init = true,
                        State::CookieEchoed => self.pending.cookie_echo = true,
                        _ => continue,
                    }
                    self.set_timer(Timer::T1, now.saturating_add(self.rto));
                }
                Timer::T2 => {
                    // §9.2: resend SHUTDOWN / SHUTDOWN-ACK; counts as an error.
                    if self.count_error() {
                        return;
                    }
                    self.rto = self.rto.saturating_mul(2).min(self.cfg.rto_max);
                    match self.state {
                        State::ShutdownSent => self.pending.shutdown = true,
                        State::ShutdownAckSent => self.pending.shutdown_ack = true,
                        _ => continue,
                    }
                    self.set_timer(Timer::T2, now.saturating_add(self.rto));
                }
                Timer::T3 => self.t3_expired(now),
                Timer::Sack => self.pending.sack = true,
                Timer::Heartbeat => {
                    if self.state == State::CookieWait || self.state == State::CookieEchoed {
                        continue;
                    }
                    // §8.3: an unanswered heartbeat counts as an error.
                    if self.hb_outstanding.is_some() {
                        self.rto = self.rto.saturating_mul(2).min(self.cfg.rto_max);
                        if self.count_error() {
                            return;
                        }
                    }
                    if self.flight == 0 {
                        self.pending.heartbeat = true;
                    }
                    self.arm_heartbeat(now);
                }
            }
        }
    }

    /// §8.1: returns true when the association was closed.
    fn count_error(&mut self) -> bool {
        self.error_count += 1;
        if self.error_count > self.cfg.max_retransmits {
            self.abort_with(cause_code::PROTOCOL_VIOLATION, CloseReason::Timeout);
            // RFC 9260 §8.1 allows sending ABORT; the peer is likely gone,
            // but it costs one packet.
            return true;
        }
        false
    }

    fn t3_expired(&mut self, now: u64) {
        // §6.3.3 E1-E3.
        self.stats.t3_expiries += 1;
        let mtu = self.cfg.max_packet;
        self.ssthresh = (self.cwnd / 2).max(4 * mtu);
        self.cwnd = mtu;
        self.partial_bytes_acked = 0;
        self.rto = self.rto.saturating_mul(2).min(self.cfg.rto_max);
        self.fast_recovery_exit = None;
        self.rtt_probe = None;
        self.rtx_burst = true;
        for c in self.out.iter_mut() {
            if c.in_flight && !c.gap_acked {
                if !c.needs_rtx {
                    self.rtx_marked += 1;
                }
                c.needs_rtx = true;
                c.in_flight = false;
                self.flight = self.flight.saturating_sub(c.len());
            }
        }
        if self.count_error() {
            return;
        }
        self.check_out_counts();
        if self.first_unsent() > self.gap_acked_n {
            // Some chunk sent and not gap-acknowledged.
            self.set_timer(Timer::T3, now.saturating_add(self.rto));
        }
    }

    fn rtt_sample(&mut self, r: u64) {
        // §6.3.1 C2-C3, alpha 1/8, beta 1/4.
        let (srtt, rttvar) = match self.srtt {
            None => (r, r / 2),
            Some((s, v)) => {
                let d = s.abs_diff(r);
                let v = v - v / 4 + d / 4;
                let s = s - s / 8 + r / 8;
                (s, v)
            }
        };
        self.srtt = Some((srtt, rttvar));
        self.rto = srtt
            .saturating_add(rttvar.saturating_mul(4).max(1))
            .clamp(self.cfg.rto_min, self.cfg.rto_max);
    }

    /// RFC 9260 §8.5.1 verification tag rules, ports, and §6.10 (INIT is
    /// never bundled).
    fn packet_acceptable(&self, h: &HeaderRepr, chunks: &[ChunkRepr<'_>]) -> bool {
        if h.dst_port != self.local_port || h.src_port != self.peer_port {
            return false;
        }
        let Some(first) = chunks.first() else {
            return false;
        };
        let vt = h.verification_tag;
        let tag_ok = match first {
            ChunkRepr::Init(_) => vt == 0 && chunks.len() == 1,
            ChunkRepr::Abort { t_bit, .. } | ChunkRepr::ShutdownComplete { t_bit } => {
                if *t_bit {
                    vt == self.peer_tag && self.peer_tag != 0
                } else {
                    vt == self.local_tag
                }
            }
            // COOKIE-ECHO too: its tag is the one in our INIT-ACK (our own).
            _ => vt == self.local_tag,
        };
        tag_ok
            && !chunks
                .iter()
                .skip(1)
                .any(|c| matches!(c, ChunkRepr::Init(_)))
    }

    /// Handles one received SCTP packet (the IP payload).
    pub fn handle_packet(&mut self, now: u64, bytes: &[u8]) {
        self.handle_packet_with(now, bytes, &mut |_| false);
    }

    /// [`handle_packet`](Self::handle_packet), offering `rx` each whole
    /// message that can be delivered straight from `bytes`: a DATA chunk
    /// with B and E set (RFC 9260 §6.9: unfragmented), unordered or the
    /// next SSN of its stream (§6.6), while no event waits (so messages
    /// keep their delivery order). `rx` returns
    /// true when it took the message: it is then acknowledged like any
    /// other (its TSN counts as received, §6.2) but never held, never
    /// charged to the receive buffer beyond the check it passed, and no
    /// [`Event::Message`] is made for it. False: the chunk takes the usual
    /// way (held, delivered as an event). Fragmented, out-of-sequence
    /// ordered and blocked messages always take the usual way.
    pub fn handle_packet_with(
        &mut self,
        now: u64,
        bytes: &[u8],
        rx: &mut dyn FnMut(MessageRef<'_>) -> bool,
    ) {
        if self.state == State::Closed {
            return;
        }
        let mut chunks = Chunks::new();
        let Some(h) = parse_into(bytes, &mut chunks) else {
            self.stats.packets_discarded += 1;
            return;
        };
        if !self.packet_acceptable(&h, &chunks) {
            self.stats.packets_discarded += 1;
            return;
        }
        let vt = h.verification_tag;
        if !matches!(chunks.first(), Some(ChunkRepr::Init(_))) {
            // Passed the check with one of our tags, not INIT's 0.
            self.stats.tag_verified_packets += 1;
        }
        self.last_activity = now;
        let mut had_data = false;
        // §6.7: a SACK goes out at once when a gap is filled.
        let mut immediate = !self.rx_received.is_empty();
        for c in &chunks {
            if self.state == State::Closed {
                return;
            }
            match c {
                ChunkRepr::Data(d) => match self.state {
                    // §9.2: in SHUTDOWN-SENT the peer may still be
                    // sending; its DATA is taken (and answered below).
                    State::Established | State::ShutdownPending | State::ShutdownSent => {
                        had_data = true;
                        immediate |= d.flags.immediate;
                        immediate |= self.on_data(d, rx);
                    }
                    // §9.2: the peer sent SHUTDOWN only once all its DATA
                    // was acknowledged, and its user may send no more
                    // (SHUTDOWN-PENDING). A retransmission is a duplicate;
                    // new DATA is a protocol violation.
                    State::ShutdownReceived | State::ShutdownAckSent => {
                        let t = self.unwrap_rx(d.tsn);
                        if t > self.rx_cum && !self.rx_received.contains(&t) {
                            self.abort_with(
                                cause_code::PROTOCOL_VIOLATION,
                                CloseReason::ProtocolError(cause_code::PROTOCOL_VIOLATION),
                            );
                            return;
                        }
                        had_data = true;
                        immediate |= self.on_data(d, rx);
                    }
                    State::CookieWait | State::CookieEchoed | State::Closed => {}
                },
                ChunkRepr::Init(i) => self.on_init(now, &h, i),
                ChunkRepr::InitAck(i) => self.on_init_ack(now, i),
                ChunkRepr::CookieEcho { cookie } => self.on_cookie_echo(now, vt, cookie),
                ChunkRepr::CookieAck => {
                    if self.state == State::CookieEchoed {
                        self.stop_timer(Timer::T1);
                        self.state = State::Established;
                        self.rto = self
                            .cfg
                            .rto_initial
                            .clamp(self.cfg.rto_min, self.cfg.rto_max);
                        self.cookie = Vec::new();
                        self.events.push_back(Event::Connected);
                        self.arm_heartbeat(now);
                    }
                }
                ChunkRepr::Sack(s) => {
                    if !matches!(self.state, State::CookieWait | State::CookieEchoed) {
                        self.on_sack(now, s.cum_tsn_ack, Some(s));
                    }
                }
                ChunkRepr::Heartbeat { info } => {
                    // §8.3: echo the info unchanged; bounded to one packet.
                    if info.len() + COMMON_HEADER_LEN + 4 <= self.cfg.max_packet {
                        self.pending.heartbeat_ack = Some(info.to_vec());
                    }
                }
                ChunkRepr::HeartbeatAck { info } => self.on_heartbeat_ack(now, info),
                ChunkRepr::Abort { causes, .. } => {
                    let code = Params::new(causes)
                        .next()
                        .and_then(|p| p.ok())
                        .map(|p| p.ty);
                    self.close(CloseReason::PeerAbort(code));
                    return;
                }
                ChunkRepr::Shutdown { cum_tsn_ack } => self.on_shutdown(now, *cum_tsn_ack),
                ChunkRepr::ShutdownAck => {
                    if matches!(self.state, State::ShutdownSent | State::ShutdownAckSent) {
                        // §9.2: reply SHUTDOWN COMPLETE and close.
                        self.pending.shutdown_complete = true;
                        self.close(CloseReason::Shutdown);
                        return;
                    }
                }
                ChunkRepr::ShutdownComplete { .. } => {
                    if self.state == State::ShutdownAckSent {
                        self.close(CloseReason::Shutdown);
                        return;
                    }
                }
                ChunkRepr::Error { causes } => {
                    if let Some(Ok(p)) = Params::new(causes).next() {
                        if self.events.len() < 64 {
                            self.events.push_back(Event::PeerError(p.ty));
                        }
                    }
                }
                ChunkRepr::Unknown { ty, .. } => {
                    let act = UnknownAction::for_chunk(*ty);
                    if act.reports() && self.pending.error.is_none() {
                        // §3.2: "Unrecognized Chunk Type" with the chunk.
                        let max = self.cfg.max_packet.saturating_sub(COMMON_HEADER_LEN + 8);
                        self.pending.error = Some(unrecognized_chunk_cause(c, max));
                    }
                    if !act.continues() {
                        break;
                    }
                }
            }
        }
        if had_data {
            self.data_packets_unacked += 1;
            // §6.2: SACK at least every second packet, at once on gaps or
            // duplicates (§6.7), or when asked by the I bit (RFC 7053).
            if immediate
                || self.data_packets_unacked >= 2
                || !self.rx_received.is_empty()
                || !self.dups.is_empty()
            {
                self.pending.sack = true;
            } else if self.timers[Timer::Sack as usize].is_none() {
                self.set_timer(Timer::Sack, now.saturating_add(self.cfg.sack_delay));
            }
            if self.state == State::ShutdownSent {
                // §9.2: answer each DATA packet with SHUTDOWN, restart T2.
                self.pending.shutdown = true;
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
        }
    }

    fn on_init(&mut self, now: u64, h: &HeaderRepr, init: &InitRepr<'_>) {
        let (tag, tsn, tie_tags) = match self.state {
            // §5.2.1: INIT-ACK with our original tag and TSN; the peer's
            // tag stays unknown, and no association exists to tie to.
            State::CookieWait | State::CookieEchoed => (self.local_tag, self.init_tsn, (0, 0)),
            // §5.2.2: unexpected INIT. The INIT-ACK MUST carry a new
            // random Initiate Tag, and the cookie our Tie-Tags: nonces,
            // not the association's tags, which an INIT (tag 0, from
            // anyone who knows the ports) must never learn.
            State::Established
            | State::ShutdownPending
            | State::ShutdownReceived
            | State::ShutdownSent => {
                self.nonce = self.nonce.wrapping_add(1);
                let (tag, tsn) = random_pair(
                    &self.tag_key,
                    now,
                    self.nonce | 1 << 63,
                    (self.local_port, self.peer_port),
                );
                (tag, tsn, self.tie_tags(now))
            }
            // §9.2: in SHUTDOWN-ACK-SENT an INIT is answered with SHUTDOWN-ACK.
            State::ShutdownAckSent => {
                self.pending.shutdown_ack = true;
                return;
            }
            State::Closed => return,
        };
        if let Some(want) = self.cfg.require_adaptation {
            if init.params.adaptation != Some(want) {
                return;
            }
        }
        let mut buf = vec![0u8; self.cfg.max_packet.max(COMMON_HEADER_LEN + 128)];
        // Its packets reach us through the caller's demultiplexer, which
        // knows the peer's address: the cookie binds none (and so is
        // refused by a Listener, which binds them).
        let none = Addrs::default();
        if let Some(n) = build_init_ack(&self.cfg, now, tag, tsn, tie_tags, init, h, none, &mut buf)
        {
            buf.truncate(n);
            self.pending.init_ack = Some(buf);
        }
    }

    /// Our Tie-Tags (§5.2.2): two random nonces, made once, that a cookie
    /// carries in place of this association's tags.
    fn tie_tags(&mut self, now: u64) -> (u32, u32) {
        if self.tie_tags == (0, 0) {
            let (a, b) = random_pair(
                &self.tag_key,
                now,
                !self.nonce,
                (self.peer_port, self.local_port),
            );
            self.tie_tags = (a, b | 1);
        }
        self.tie_tags
    }

    fn on_init_ack(&mut self, now: u64, i: &InitRepr<'_>) {
        if self.state != State::CookieWait {
            return; // §5.2.3: discard.
        }
        let Some(cookie) = i.params.state_cookie else {
            return;
        };
        self.peer_tag = i.initiate_tag;
        if let Some(want) = self.cfg.require_adaptation {
            if i.params.adaptation != Some(want) {
                // RFC 5043 §11.1: the peer does not do DDP; no DDP
                // procedure may run on this association. We end it.
                let (cause, n) = adaptation_cause(i.params.adaptation);
                self.pending.abort = Some((cause, n));
                self.close(CloseReason::AdaptationRefused);
                return;
            }
        }
        // Bounded: the cookie goes back in one packet.
        if cookie.len() + COMMON_HEADER_LEN + 4 > self.cfg.max_packet {
            self.abort_with(
                cause_code::OUT_OF_RESOURCE,
                CloseReason::ProtocolError(cause_code::OUT_OF_RESOURCE),
            );
            return;
        }
        let c = Cookie {
            created: now,
            local_tag: self.local_tag,
            peer_tag: i.initiate_tag,
            local_tsn: self.init_tsn,
            peer_tsn: i.initial_tsn,
            peer_rwnd: i.a_rwnd,
            out_streams: self.cfg.streams.min(i.num_inbound_streams),
            in_streams: self.cfg.streams.min(i.num_outbound_streams),
            local_port: self.local_port,
            peer_port: self.peer_port,
            peer_adaptation: i.params.adaptation,
            local_tie_tag: 0,
            peer_tie_tag: 0,
        };
        self.adopt(&c);
        self.cookie = cookie.to_vec();
        self.state = State::CookieEchoed;
        self.pending.init = false;
        self.pending.cookie_echo = true;
        self.init_retries = 0;
        self.set_timer(Timer::T1, now.saturating_add(self.rto));
    }

    fn on_cookie_echo(&mut self, now: u64, vt: u32, cookie: &[u8]) {
        // A Listener's cookie (this association's, echoed again) is bound
        // to its addresses; one this association issued (an INIT
        // collision) to none.
        let bound = self.cookie_addrs.as_ref().map(|(ln, l, pn, p)| Addrs {
            local: &l[..usize::from(*ln)],
            peer: &p[..usize::from(*pn)],
        });
        let decode = |a: Addrs<'_>| {
            Cookie::decode(cookie, &self.cfg.secret, a, now, self.cfg.cookie_lifetime)
        };
        let Some(c) = bound.and_then(decode).or_else(|| decode(Addrs::default())) else {
            return;
        };
        if vt != c.local_tag
            || c.local_tag != self.local_tag
            || c.local_port != self.local_port
            || c.peer_port != self.peer_port
        {
            return;
        }
        match self.state {
            // §5.2.4 case B (and the simultaneous-open D): take the
            // peer's tag from the cookie, establish.
            State::CookieWait | State::CookieEchoed => {
                self.adopt(&c);
                self.stop_timer(Timer::T1);
                self.state = State::Established;
                self.cookie = Vec::new();
                self.pending.init = false;
                self.pending.cookie_echo = false;
                self.pending.cookie_ack = true;
                self.events.push_back(Event::Connected);
                self.arm_heartbeat(now);
            }
            // §5.2.4 case D: both tags match, ack again.
            State::Closed => {}
            _ => {
                if c.peer_tag == self.peer_tag {
                    self.pending.cookie_ack = true;
                }
                // Case A (peer restart) and C: not implemented, discarded.
            }
        }
    }

    fn on_heartbeat_ack(&mut self, now: u64, info: &[u8]) {
        let Some((nonce, sent)) = self.hb_outstanding else {
            return;
        };
        // Our info: type 1, length 20, nonce, send time.
        if info.len() != 20 || info[4..12] != nonce.to_be_bytes() {
            return;
        }
        self.hb_outstanding = None;
        self.stats.heartbeat_acks += 1;
        self.error_count = 0;
        if now >= sent {
            self.rtt_sample(now - sent);
        }
    }

    fn on_shutdown(&mut self, now: u64, cum: u32) {
        match self.state {
            State::Established | State::ShutdownPending => {
                self.on_sack(now, cum, None);
                if self.state == State::Closed {
                    return;
                }
                self.state = State::ShutdownReceived;
                self.events.push_back(Event::ShutdownReceived);
                self.progress_shutdown(now);
            }
            State::ShutdownReceived => self.on_sack(now, cum, None),
            State::ShutdownSent => {
                // §9.2: SHUTDOWN collision, answer with SHUTDOWN-ACK.
                self.on_sack(now, cum, None);
                self.state = State::ShutdownAckSent;
                self.pending.shutdown_ack = true;
                self.set_timer(Timer::T2, now.saturating_add(self.rto));
            }
            _ => {}
        }
    }

    fn unwrap_rx(&self, tsn: u32) -> u64 {
        let d = tsn.wrapping_sub(self.rx_cum as u32) as i32;
        self.rx_cum.wrapping_add_signed(i64::from(d))
    }

    /// Handles one DATA chunk; returns whether a SACK is due at once.
    fn on_data(&mut self, d: &DataRepr<'_>, rx: &mut dyn FnMut(MessageRef<'_>) -> bool) -> bool {
        let t = self.unwrap_rx(d.tsn);
        if t <= self.rx_cum || self.rx_received.contains(&t) {
            self.stats.dup_data_received += 1;
            if self.dups.len() < MAX_DUP_TSNS {
                self.dups.push(d.tsn);
            }
            return true;
        }
        if t - self.rx_cum > u64::from(self.cfg.max_tsn_window) {
            return false; // outside the window: dropped, not acknowledged
        }
        let len = d.payload.len();
        // Keep room for the next in-sequence chunk so a full buffer of
        // out-of-order data cannot stall the association.
        let limit = if t == self.rx_cum + 1 {
            self.cfg.recv_buffer as usize
        } else {
            (self.cfg.recv_buffer as usize).saturating_sub(self.cfg.max_packet + RX_CHUNK_OVERHEAD)
        };
        // Each held chunk costs its bookkeeping too, not only its octets.
        if self.rx_bytes.saturating_add(len + RX_CHUNK_OVERHEAD) > limit {
            return true; // dropped: tell the peer our window at once
        }
        if t != self.rx_cum + 1 {
            self.stats.out_of_order_data += 1;
        }
        if t == self.rx_cum + 1 && self.rx_received.is_empty() {
            // In sequence with no gap behind it (nearly every chunk): the
            // cumulative TSN moves on with no set to touch.
            self.rx_cum = t;
        } else {
            self.rx_received.insert(t);
            while self.rx_received.remove(&(self.rx_cum + 1)) {
                self.rx_cum += 1;
            }
        }
        if d.stream_id >= self.in_streams {
            // §6.5: acknowledge the TSN, report Invalid Stream Identifier,
            // discard the data.
            if self.pending.error.is_none() {
                let mut v = [0u8; 4];
                v[0..2].copy_from_slice(&d.stream_id.to_be_bytes());
                let (b, n) = wire::error_cause(cause_code::INVALID_STREAM_IDENTIFIER, &v);
                self.pending.error = Some(b[..n].to_vec());
            }
            // Received, never held: fragments beside it cannot join it.
            self.prune_beside(t);
            return true;
        }
        if self.offer_in_place(d, rx) {
            // Received and delivered; nothing held. Fragments beside it
            // cannot join a B+E chunk (§6.9).
            self.prune_beside(t);
            return false;
        }
        self.rx_bytes += len + RX_CHUNK_OVERHEAD;
        self.rx_chunks.insert(
            t,
            InChunk {
                stream: d.stream_id,
                ssn: d.ssn,
                ppid: d.ppid,
                flags: d.flags,
                data: d.payload.to_vec(),
            },
        );
        self.try_deliver(t, len);
        self.prune_beside(t);
        false
    }

    /// Offers a whole chunk to `rx` when its delivery is due now: B and E
    /// set (one-chunk message, §6.9), unordered or carrying its stream's
    /// next SSN (§6.6), and no event waiting before it (so it cannot
    /// overtake an earlier message, or the Connected event).
    /// True when `rx` took it (the stream's next SSN then moves on, and
    /// messages that waited for it are delivered as events).
    fn offer_in_place(
        &mut self,
        d: &DataRepr<'_>,
        rx: &mut dyn FnMut(MessageRef<'_>) -> bool,
    ) -> bool {
        let s = usize::from(d.stream_id);
        let due = d.flags.begin
            && d.flags.end
            && (d.flags.unordered || self.next_ssn_in.get(s) == Some(&d.ssn));
        if !due || !self.events.is_empty() {
            return false;
        }
        let m = MessageRef {
            stream: d.stream_id,
            ppid: d.ppid,
            unordered: d.flags.unordered,
            data: d.payload,
        };
        if !rx(m) {
            return false;
        }
        self.stats.data_in_place += 1;
        if !d.flags.unordered {
            let stream = d.stream_id;
            self.next_ssn_in[s] = d.ssn.wrapping_add(1);
            while let Some((f, l)) = self.ready.remove(&(stream, self.next_ssn_in[s])) {
                self.deliver(f, l);
                self.next_ssn_in[s] = self.next_ssn_in[s].wrapping_add(1);
            }
        }
        true
    }

    fn same_message(a: &InChunk, b: &InChunk) -> bool {
        a.stream == b.stream
            && a.flags.unordered == b.flags.unordered
            && (a.flags.unordered || a.ssn == b.ssn)
    }

    /// Whether the held chunk at `a` may be directly followed by the one
    /// at `a + 1` in one message (RFC 9260 §6.9: a message's fragments
    /// take consecutive TSNs, B on the first, E on the last).
    fn joins(&mut self, a: u64) -> bool {
        self.rx_work += 2;
        match (self.rx_chunks.get(&a), self.rx_chunks.get(&(a + 1))) {
            (Some(p), Some(n)) => !p.flags.end && !n.flags.begin && Self::same_message(p, n),
            _ => false,
        }
    }

    /// Files the chunk just stored at TSN `t` into the runs of held
    /// fragments (`rx_runs`: consecutive TSNs, each joining the next), and
    /// returns the run it is now part of. A few map operations: no chain
    /// is walked, so the work per chunk is O(log n) whatever the length
    /// of the chain it extends.
    fn file_chunk(&mut self, t: u64, len: usize) -> (u64, u64) {
        let (mut first, mut last, mut bytes) = (t, t, len);
        if self.joins(t - 1) {
            // The run holding t - 1 ends there: t was not held before.
            self.rx_work += 1;
            if let Some((&f, &(l, b))) = self.rx_runs.range(..t).next_back() {
                if l == t - 1 {
                    self.rx_runs.remove(&f);
                    first = f;
                    bytes += b;
                }
            }
        }
        if self.joins(t) {
            self.rx_work += 1;
            if let Some((l, b)) = self.rx_runs.remove(&(t + 1)) {
                last = l;
                bytes += b;
            }
        }
        self.rx_runs.insert(first, (last, bytes));
        (first, last)
    }

    /// Whether TSN `t` has arrived (whether held, delivered or discarded).
    fn received(&self, t: u64) -> bool {
        t <= self.rx_cum || self.rx_received.contains(&t)
    }

    /// Drops the run starting at `first` if it can never become a whole
    /// message: its first chunk lacks B and the TSN before it arrived
    /// without joining it, or its last chunk lacks E and the TSN after it
    /// arrived without joining it (§6.9: a message's fragments take
    /// consecutive TSNs). Such chunks would otherwise stay held for the
    /// life of the association, the cumulative TSN long past them.
    fn prune_if_dead(&mut self, first: u64) {
        self.rx_work += 1;
        let Some(&(last, _)) = self.rx_runs.get(&first) else {
            return;
        };
        self.rx_work += 2;
        let (Some(f), Some(l)) = (self.rx_chunks.get(&first), self.rx_chunks.get(&last)) else {
            return;
        };
        let dead = (!f.flags.begin && self.received(first - 1))
            || (!l.flags.end && self.received(last + 1));
        if dead {
            self.rx_runs.remove(&first);
            self.drop_chunks(first, last);
        }
    }

    /// After TSN `t` arrived: the runs just before and after it, and its
    /// own, may have lost the neighbour they waited for.
    fn prune_beside(&mut self, t: u64) {
        self.rx_work += 1;
        if self.rx_runs.is_empty() {
            return; // nothing held, nothing to lose a neighbour
        }
        if let Some((&f, &(l, _))) = self.rx_runs.range(..t).next_back() {
            if l + 1 >= t {
                // The run ending at t - 1, or one holding t from before it.
                self.prune_if_dead(f);
            }
        }
        self.prune_if_dead(t);
        self.prune_if_dead(t + 1);
    }

    /// Forgets held chunks `first..=last` (linear in what is dropped,
    /// each chunk once).
    fn drop_chunks(&mut self, first: u64, last: u64) {
        for t in first..=last {
            self.rx_work += 1;
            if let Some(c) = self.rx_chunks.remove(&t) {
                self.rx_bytes = self
                    .rx_bytes
                    .saturating_sub(c.data.len() + RX_CHUNK_OVERHEAD);
                self.stats.pruned_chunks += 1;
            }
        }
    }

    fn too_big(&mut self) {
        // A message beyond our reassembly limits: abort (§3.3.10.4 Out of
        // Resource), as it could never be delivered.
        self.abort_with(
            cause_code::OUT_OF_RESOURCE,
            CloseReason::ProtocolError(cause_code::OUT_OF_RESOURCE),
        );
    }

    fn deliver(&mut self, first: u64, last: u64) {
        let mut data = Vec::new();
        let mut head = None;
        for t in first..=last {
            self.rx_work += 1;
            if let Some(c) = self.rx_chunks.remove(&t) {
                // The message keeps its octets charged until the user
                // takes it; the chunk's bookkeeping is gone.
                self.rx_bytes = self.rx_bytes.saturating_sub(RX_CHUNK_OVERHEAD);
                if head.is_none() {
                    head = Some((c.stream, c.ppid, c.flags.unordered));
                }
                data.extend_from_slice(&c.data);
            }
        }
        if let Some((stream, ppid, unordered)) = head {
            // rx_bytes keeps counting these octets until the user takes them.
            self.events.push_back(Event::Message(Message {
                stream,
                ppid,
                unordered,
                data,
            }));
        }
    }

    fn try_deliver(&mut self, t: u64, len: usize) {
        let (first, last) = self.file_chunk(t, len);
        let Some(&(_, bytes)) = self.rx_runs.get(&first) else {
            return;
        };
        // A message beyond our reassembly limits can never be delivered.
        if last - first >= self.cfg.max_fragments as u64 || bytes > self.cfg.max_message {
            self.too_big();
            return;
        }
        self.rx_work += 2;
        let (Some(c), Some(e)) = (self.rx_chunks.get(&first), self.rx_chunks.get(&last)) else {
            return;
        };
        if !c.flags.begin || !e.flags.end {
            return; // not complete (yet)
        }
        self.rx_runs.remove(&first);
        if c.flags.unordered {
            self.deliver(first, last);
            return;
        }
        let (stream, ssn) = (c.stream, c.ssn);
        let s = usize::from(stream);
        if ssn != self.next_ssn_in[s] {
            // A stream sequence number already delivered (behind the next
            // one expected) or already waiting is a repeat that would
            // never be delivered: dropped, not held (§6.5, §6.6).
            let behind = ssn.wrapping_sub(self.next_ssn_in[s]) >= 0x8000;
            if behind || self.ready.contains_key(&(stream, ssn)) {
                self.drop_chunks(first, last);
                return;
            }
            self.ready.insert((stream, ssn), (first, last));
            return;
        }
        self.deliver(first, last);
        self.next_ssn_in[s] = ssn.wrapping_add(1);
        while let Some((f, l)) = self.ready.remove(&(stream, self.next_ssn_in[s])) {
            self.deliver(f, l);
            self.next_ssn_in[s] = self.next_ssn_in[s].wrapping_add(1);
        }
    }

    fn on_sack(&mut self, now: u64, cum: u32, sack: Option<&SackRepr<'_>>) {
        // §6.2.1 D i: a SACK older than the cumulative ack point is ignored.
        if tsn_lt(cum, self.peer_cum_ack) {
            return;
        }
        // A cum ack beyond anything we sent is a protocol violation.
        if !tsn_lt(cum, self.next_tsn) {
            self.abort_with(
                cause_code::PROTOCOL_VIOLATION,
                CloseReason::ProtocolError(cause_code::PROTOCOL_VIOLATION),
            );
            return;
        }
        let flight_before = self.flight;
        let mut bytes_acked = 0usize;
        let mut rtt = None;
        let advanced = cum != self.peer_cum_ack;
        // Cumulatively acknowledged chunks leave the queue.
        while let Some(c) = self.out.front() {
            if !tsn_le(c.tsn, cum) {
                break;
            }
            let Some(c) = self.out.pop_front() else { break };
            self.rtx_marked -= usize::from(c.needs_rtx);
            self.gap_acked_n -= usize::from(c.gap_acked);
            if c.in_flight {
                self.flight = self.flight.saturating_sub(c.len());
            }
            if !c.gap_acked {
                bytes_acked += c.len();
            }
            if let Some((pt, at)) = self.rtt_probe {
                if pt == c.tsn && c.sent_count == 1 {
                    rtt = Some(now.saturating_sub(at));
                    self.rtt_probe = None;
                }
            }
            self.out_bytes = self.out_bytes.saturating_sub(c.len());
            self.keep_spare(c.data);
        }
        if self.out.is_empty() {
            self.trim_spares();
        }
        self.peer_cum_ack = cum;
        if advanced {
            self.error_count = 0;
        }
        // Gap blocks: mark what they cover; unmark what they no longer do.
        let mut highest_newly_acked: Option<u32> = None;
        if let Some(s) = sack {
            let mut blocks = [(0u32, 0u32); MAX_GAP_BLOCKS];
            let mut nb = 0;
            for (a, b) in s.gap_blocks.iter().take(MAX_GAP_BLOCKS) {
                if a == 0 || a > b {
                    continue; // malformed block: ignored
                }
                blocks[nb] = (
                    cum.wrapping_add(u32::from(a)),
                    cum.wrapping_add(u32::from(b)),
                );
                nb += 1;
            }
            let blocks = &blocks[..nb];
            // Without blocks and with nothing gap-acknowledged there is
            // nothing to mark or unmark: skip the queue.
            let sent = if nb == 0 && self.gap_acked_n == 0 {
                0
            } else {
                self.first_unsent()
            };
            for c in self.out.iter_mut().take(sent) {
                let covered = blocks
                    .iter()
                    .any(|&(a, b)| tsn_le(a, c.tsn) && tsn_le(c.tsn, b));
                if covered && !c.gap_acked {
                    c.gap_acked = true;
                    self.gap_acked_n += 1;
                    self.rtx_marked -= usize::from(c.needs_rtx);
                    c.needs_rtx = false;
                    bytes_acked += c.len();
                    if c.in_flight {
                        c.in_flight = false;
                        self.flight = self.flight.saturating_sub(c.len());
                    }
                    highest_newly_acked = Some(c.tsn);
                    if let Some((pt, at)) = self.rtt_probe {
                        if pt == c.tsn && c.sent_count == 1 {
                            rtt = Some(now.saturating_sub(at));
                            self.rtt_probe = None;
                        }
                    }
                } else if !covered && c.gap_acked {
                    // Reneged (§6.2.1 D iii): back to outstanding.
                    c.gap_acked = false;
                    self.gap_acked_n -= 1;
                }
            }
            if advanced && highest_newly_acked.is_none() {
                highest_newly_acked = Some(cum);
            }
            // A SACK that shows the peer's window closed below one chunk
            // answers our zero window probe: the peer is alive and reading
            // is what it lacks, so it does not count toward
            // Association.Max.Retrans (§8.1 counts unanswered
            // retransmissions; §6.1 A asks us to keep probing).
            if (s.a_rwnd as usize) < self.cfg.max_packet {
                self.error_count = 0;
            }
            // §6.2.1 D iv / E: peer rwnd less what is still in flight.
            self.peer_rwnd = (s.a_rwnd as usize).saturating_sub(self.flight) as u32;
        }
        if let Some(r) = rtt {
            self.rtt_sample(r);
        }
        // §7.2.4: miss indications (HTNA), fast retransmit.
        let mut start_fr = false;
        if let Some(h) = highest_newly_acked {
            for c in self.out.iter_mut() {
                if !tsn_lt(c.tsn, h) {
                    break;
                }
                // Only chunks in flight: those T3 already marked are
                // being resent anyway.
                if c.in_flight && !c.gap_acked && !c.fast_rtx_done {
                    c.missing = c.missing.saturating_add(1);
                    if c.missing >= 3 {
                        self.stats.fast_retransmits += 1;
                        self.rtx_burst = true;
                        self.rtx_marked += usize::from(!c.needs_rtx);
                        c.needs_rtx = true;
                        c.fast_rtx_done = true;
                        start_fr = true;
                    }
                }
            }
        }
        let mtu = self.cfg.max_packet;
        if let Some(exit) = self.fast_recovery_exit {
            if tsn_le(exit, cum) {
                self.fast_recovery_exit = None;
            }
        }
        if start_fr && self.fast_recovery_exit.is_none() {
            // §7.2.4 step 1-2: enter fast recovery.
            self.ssthresh = (self.cwnd / 2).max(4 * mtu);
            self.cwnd = self.ssthresh;
            self.partial_bytes_acked = 0;
            self.fast_recovery_exit = Some(self.next_tsn.wrapping_sub(1));
        } else if bytes_acked > 0 && self.fast_recovery_exit.is_none() {
            // §7.2.1 / §7.2.2.
            if self.cwnd <= self.ssthresh {
                if advanced && flight_before >= self.cwnd.saturating_sub(mtu) {
                    self.cwnd += bytes_acked.min(mtu);
                }
            } else {
                self.partial_bytes_acked += bytes_acked;
                if self.partial_bytes_acked >= self.cwnd
                    && flight_before >= self.cwnd.saturating_sub(mtu)
                {
                    self.partial_bytes_acked -= self.cwnd;
                    self.cwnd += mtu;
                }
            }
        }
        if self.flight == 0 {
            self.partial_bytes_acked = 0;
        }
        // §6.3.2 R2 / R3: timer.
        self.check_out_counts();
        // Every chunk sent is gap-acknowledged (or none is outstanding).
        if self.first_unsent() == self.gap_acked_n {
            self.stop_timer(Timer::T3);
        } else if advanced {
            self.set_timer(Timer::T3, now.saturating_add(self.rto));
        }
        self.progress_shutdown(now);
    }

    fn header(&self) -> HeaderRepr {
        HeaderRepr {
            src_port: self.local_port,
            dst_port: self.peer_port,
            verification_tag: self.peer_tag,
        }
    }

    fn sack_parts(&self) -> (u32, Vec<(u16, u16)>) {
        let cum = self.rx_cum as u32;
        let mut gaps: Vec<(u16, u16)> = Vec::new();
        for &t in &self.rx_received {
            let off = (t - self.rx_cum).min(u64::from(u16::MAX)) as u16;
            match gaps.last_mut() {
                Some(g) if g.1.wrapping_add(1) == off => g.1 = off,
                _ => {
                    if gaps.len() == MAX_GAP_BLOCKS {
                        break;
                    }
                    gaps.push((off, off));
                }
            }
        }
        (cum, gaps)
    }

    /// Writes the next packet to send into `buf` (at least
    /// [`Config::max_packet`] octets make every packet fit); returns its
    /// length, or `None` when there is nothing to send now.
    #[inline]
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit_with(now, buf, &mut |_, _| false)
    }

    /// [`poll_transmit`](Self::poll_transmit) of an association whose
    /// queue holds chunks with external payload
    /// ([`send_ext`](Self::send_ext)): `fill(key, dst)` writes such a
    /// chunk's tail into the packet, at every transmission. A fill that
    /// fails ends the association: the chunk can be neither sent nor
    /// retransmitted, so an ABORT goes out instead of the packet (RFC 9260
    /// §9.1; closed with [`CloseReason::LocalAbort`]) and
    /// [`ext_failed`](Self::ext_failed) says why.
    #[inline]
    pub fn poll_transmit_with<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        now: u64,
        buf: &mut [u8],
        fill: &mut F,
    ) -> Option<usize> {
        if self.idle() {
            return None;
        }
        self.build_packet(now, buf, fill)
    }

    /// A fill of a chunk's external payload failed
    /// ([`poll_transmit_with`](Self::poll_transmit_with)).
    pub fn ext_failed(&self) -> bool {
        self.ext_failed
    }

    /// True when [`poll_transmit`](Self::poll_transmit) now would give no
    /// packet: no control chunk is due and no DATA waits to be sent or
    /// resent (the idle poll, most of them, inlined into the caller). A
    /// caller that lends a device's buffer asks first. Like an idle poll
    /// it ends a retransmission burst's licence, as `put_data` would.
    #[inline]
    pub fn idle(&mut self) -> bool {
        if self.pending.any() || self.has_sendable() {
            return false;
        }
        if self.data_ok() {
            self.rtx_burst = false;
        }
        true
    }

    #[inline(never)]
    fn build_packet<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        now: u64,
        buf: &mut [u8],
        fill: &mut F,
    ) -> Option<usize> {
        let cap = buf.len().min(self.cfg.max_packet);
        if cap < COMMON_HEADER_LEN + 64 {
            return None;
        }
        let buf = &mut buf[..cap];
        if let Some((cause, n)) = self.pending.abort.take() {
            // §8.5.1: ABORT carries the peer's tag; before it is known, the
            // T bit with our own.
            let (vt, t_bit) = if self.peer_tag != 0 {
                (self.peer_tag, false)
            } else {
                (self.local_tag, true)
            };
            let h = HeaderRepr {
                verification_tag: vt,
                ..self.header()
            };
            return emit_one(
                h,
                &ChunkRepr::Abort {
                    t_bit,
                    causes: &cause[..n],
                },
                buf,
            );
        }
        if self.pending.shutdown_complete {
            self.pending.shutdown_complete = false;
            return emit_one(
                self.header(),
                &ChunkRepr::ShutdownComplete { t_bit: false },
                buf,
            );
        }
        if let Some(p) = self.pending.init_ack.take() {
            if p.len() <= buf.len() {
                buf[..p.len()].copy_from_slice(&p);
                return Some(p.len());
            }
        }
        if self.state == State::Closed {
            return None;
        }
        if self.pending.init {
            self.pending.init = false;
            let init = InitRepr {
                initiate_tag: self.local_tag,
                a_rwnd: self.cfg.recv_buffer,
                num_outbound_streams: self.cfg.streams,
                num_inbound_streams: self.cfg.streams,
                initial_tsn: self.init_tsn,
                params: InitParams {
                    adaptation: self.cfg.adaptation,
                    ..Default::default()
                },
            };
            let h = HeaderRepr {
                verification_tag: 0,
                ..self.header()
            };
            return emit_one(h, &ChunkRepr::Init(init), buf);
        }
        let h = self.header();
        let mut at = COMMON_HEADER_LEN;
        let mut any = false;
        // Control chunks first (§6.10 bundling order: COOKIE-ECHO first).
        macro_rules! put {
            ($c:expr) => {{
                let c = $c;
                match c.buffer_len() {
                    Some(l) if at + l <= buf.len() => {
                        if let Ok(n) = c.emit(&mut buf[at..]) {
                            at += n;
                            any = true;
                            true
                        } else {
                            false
                        }
                    }
                    _ => false,
                }
            }};
        }
        if self.pending.cookie_echo {
            let cookie = core::mem::take(&mut self.cookie);
            if put!(ChunkRepr::CookieEcho { cookie: &cookie }) {
                self.pending.cookie_echo = false;
            }
            self.cookie = cookie;
        }
        if self.pending.cookie_ack && put!(ChunkRepr::CookieAck) {
            self.pending.cookie_ack = false;
        }
        if self.pending.shutdown_ack && put!(ChunkRepr::ShutdownAck) {
            self.pending.shutdown_ack = false;
        }
        if self.pending.shutdown
            && put!(ChunkRepr::Shutdown {
                cum_tsn_ack: self.rx_cum as u32
            })
        {
            self.pending.shutdown = false;
            // SHUTDOWN carries the cumulative ack (§9.2).
            self.after_sack_sent();
        }
        if let Some(e) = self.pending.error.take() {
            if !put!(ChunkRepr::Error { causes: &e }) {
                self.pending.error = Some(e);
            }
        }
        if let Some(i) = self.pending.heartbeat_ack.take() {
            if !put!(ChunkRepr::HeartbeatAck { info: &i }) {
                self.pending.heartbeat_ack = Some(i);
            }
        }
        if self.pending.heartbeat
            && matches!(
                self.state,
                State::Established | State::ShutdownPending | State::ShutdownReceived
            )
        {
            let nonce = mac::siphash24(&self.tag_key, &now.to_be_bytes()) ^ self.nonce;
            self.nonce = self.nonce.wrapping_add(1);
            let mut info = [0u8; 20];
            info[0..2].copy_from_slice(&param_type::HEARTBEAT_INFO.to_be_bytes());
            info[2..4].copy_from_slice(&20u16.to_be_bytes());
            info[4..12].copy_from_slice(&nonce.to_be_bytes());
            info[12..20].copy_from_slice(&now.to_be_bytes());
            if put!(ChunkRepr::Heartbeat { info: &info }) {
                self.pending.heartbeat = false;
                self.hb_outstanding = Some((nonce, now));
                self.stats.heartbeats_sent += 1;
            }
        }
        let data_ok = self.data_ok();
        let have_data = data_ok && self.has_sendable();
        // SACK: when due, or bundled with outgoing data when one is owed.
        let owe_sack = self.timers[Timer::Sack as usize].is_some() || self.pending.sack;
        if (self.pending.sack || (have_data && owe_sack))
            && !matches!(self.state, State::CookieWait | State::CookieEchoed)
        {
            let (cum, gaps) = self.sack_parts();
            let dups = core::mem::take(&mut self.dups);
            let rwnd = self.a_rwnd();
            let s = SackRepr {
                cum_tsn_ack: cum,
                a_rwnd: rwnd,
                gap_blocks: GapBlocks::List(&gaps),
                dup_tsns: DupTsns::List(&dups),
            };
            if put!(ChunkRepr::Sack(s)) {
                self.pending.sack = false;
                self.last_rwnd_sent = rwnd;
                self.after_sack_sent();
            } else {
                self.dups = dups;
            }
        }
        if data_ok {
            at = self.put_data(now, buf, at, &mut any, fill);
            if self.ext_failed && self.state != State::Closed {
                // A chunk whose payload can no longer be written cannot be
                // sent or retransmitted: the association ends (§9.1), its
                // ABORT in this packet's place.
                self.abort();
                return self.build_packet(now, buf, fill);
            }
        }
        if !any {
            return None;
        }
        let mut p = SctpPacket::new_unchecked(&mut buf[..at]);
        p.set_src_port(h.src_port);
        p.set_dst_port(h.dst_port);
        p.set_verification_tag(h.verification_tag);
        p.fill_checksum();
        Some(at)
    }

    fn after_sack_sent(&mut self) {
        self.stop_timer(Timer::Sack);
        self.data_packets_unacked = 0;
        self.dups.clear();
    }

    /// Whether DATA may be sent in this state (§6.1: once established, and
    /// while a shutdown waits for what is queued, §9.2).
    fn data_ok(&self) -> bool {
        matches!(
            self.state,
            State::Established | State::ShutdownPending | State::ShutdownReceived
        )
    }

    fn has_sendable(&self) -> bool {
        // Never-sent chunks are a suffix of `out`.
        self.rtx_marked > 0 || self.out.back().is_some_and(|c| c.sent_count == 0)
    }

    /// Debug builds (every test) recount what `rtx_marked`, `gap_acked_n`
    /// and [`Self::first_unsent`] stand for.
    fn check_out_counts(&self) {
        if cfg!(debug_assertions) {
            let marked = self.out.iter().filter(|c| c.needs_rtx).count();
            let gapped = self.out.iter().filter(|c| c.gap_acked).count();
            let sent = self.out.iter().take_while(|c| c.sent_count > 0).count();
            debug_assert_eq!((marked, gapped), (self.rtx_marked, self.gap_acked_n));
            debug_assert!(self.out.iter().skip(sent).all(|c| c.sent_count == 0));
        }
    }

    /// Index in `out` of the first chunk never sent (`out.len()` if none):
    /// chunks go out in queue order, so those sent are a prefix.
    #[inline]
    fn first_unsent(&self) -> usize {
        self.out.partition_point(|c| c.sent_count > 0)
    }

    fn put_data<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        now: u64,
        buf: &mut [u8],
        mut at: usize,
        any: &mut bool,
        fill: &mut F,
    ) -> usize {
        if !self.has_sendable() {
            // Nothing marked or never sent (most polls): no search for the
            // first unsent chunk. A retransmission burst's licence ends
            // here as it would below.
            self.rtx_burst = false;
            return at;
        }
        let mut sent_any = false;
        // Retransmissions first (§6.3.3 E3, §7.2.4 step 3): the first
        // packet regardless of cwnd, as those rules allow; later ones within it.
        let mut rtx_in_packet = false;
        let burst = core::mem::take(&mut self.rtx_burst);
        // Only while some chunk is marked; the scan ends at the last one.
        let mut i = 0;
        while self.rtx_marked > 0 && i < self.out.len() {
            let c = &self.out[i];
            i += 1;
            if !c.needs_rtx {
                continue;
            }
            if !burst && self.flight >= self.cwnd {
                break;
            }
            let l = DATA_HEADER_LEN + c.len();
            let lp = (l + 3) & !3;
            if at + lp > buf.len() {
                break;
            }
            let Some(n) = c.emit(&mut buf[at..], fill, &mut self.ext_failed) else {
                break;
            };
            at += n;
            let c = &mut self.out[i - 1];
            self.stats.retransmits += 1;
            self.rtx_marked -= 1;
            c.needs_rtx = false;
            c.sent_count += 1;
            c.missing = 0;
            if !c.in_flight {
                c.in_flight = true;
                self.flight += c.len();
            }
            if self.rtt_probe.is_some_and(|(t, _)| t == c.tsn) {
                self.rtt_probe = None; // Karn: no sample from a retransmission
            }
            rtx_in_packet = true;
            sent_any = true;
        }
        // New data within cwnd and the peer's window (§6.1 A, B).
        if !rtx_in_packet {
            for i in self.first_unsent()..self.out.len() {
                let c = &self.out[i];
                if c.sent_count > 0 {
                    continue;
                }
                let len = c.len();
                if self.flight >= self.cwnd {
                    break;
                }
                // §6.1 A: zero window probe when nothing is in flight.
                if (self.peer_rwnd as usize) < len && self.flight > 0 {
                    break;
                }
                let l = DATA_HEADER_LEN + len;
                let lp = (l + 3) & !3;
                if at + lp > buf.len() {
                    break;
                }
                let Some(n) = c.emit(&mut buf[at..], fill, &mut self.ext_failed) else {
                    break;
                };
                at += n;
                let tsn = c.tsn;
                let c = &mut self.out[i];
                self.stats.data_chunks_sent += 1;
                c.sent_count = 1;
                c.in_flight = true;
                self.flight += len;
                self.peer_rwnd = (self.peer_rwnd as usize).saturating_sub(len) as u32;
                if self.rtt_probe.is_none() {
                    self.rtt_probe = Some((tsn, now));
                }
                sent_any = true;
            }
        }
        self.check_out_counts();
        if sent_any {
            *any = true;
            self.last_activity = now;
            // §6.3.2 R1.
            if self.timers[Timer::T3 as usize].is_none() {
                self.set_timer(Timer::T3, now.saturating_add(self.rto));
            }
            self.arm_heartbeat(now);
        }
        at
    }
}

fn unrecognized_chunk_cause(c: &ChunkRepr<'_>, max: usize) -> Vec<u8> {
    // §3.3.10.6: the cause holds the unrecognized chunk; we cut it to
    // what fits one packet (bounded), keeping the chunk header.
    let n = c.buffer_len().unwrap_or(0);
    let mut chunk = vec![0u8; n];
    let n = c.emit(&mut chunk).unwrap_or(0);
    chunk.truncate(n.min(max & !3));
    let mut v = Vec::with_capacity(n + 4);
    v.extend_from_slice(&cause_code::UNRECOGNIZED_CHUNK_TYPE.to_be_bytes());
    v.extend_from_slice(&((chunk.len() + 4).min(usize::from(u16::MAX)) as u16).to_be_bytes());
    v.extend_from_slice(&chunk);
    v
}

#[cfg(test)]
mod hostile;

#[cfg(test)]
mod tests;
