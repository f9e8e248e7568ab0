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
//!
//! # Layout
//!
//! As quinn-proto's `connection/`: this file holds the types, the
//! [`Association`] state with its constructor, accessors and events, and
//! the packet parsing the others share; `assoc/setup.rs` the State Cookie
//! and the INIT / INIT-ACK / COOKIE-ECHO handshake (§5); `assoc/listener.rs`
//! the [`Listener`] and the out-of-the-blue answers (§8.4);
//! `assoc/input.rs` the checks on a received packet and the dispatch of its
//! chunks (§8.5); `assoc/recv.rs` DATA received, reassembly and what SACKs
//! report (§6.2, §6.9); `assoc/send.rs` the send queue; `assoc/ack.rs` what
//! a SACK does to the sender, fast retransmit and congestion control (§6.3,
//! §7.2); `assoc/timers.rs` the timers; `assoc/output.rs` the transmit
//! path and bundling; `assoc/shutdown.rs` ABORT and SHUTDOWN (§9). The unit
//! tests are in `assoc/tests.rs`, the hostile-peer ones in
//! `assoc/hostile.rs`.

use std::collections::{BTreeMap, BTreeSet, VecDeque};

use crate::mac::{self, Key};
use crate::wire::{
    self, cause_code, chunk_type, param_type, ChunkRepr, DataFlags, DataRepr, DupTsns, GapBlocks,
    HeaderRepr, InitParams, InitRepr, Params, SackRepr, SctpPacket, UnknownAction,
    COMMON_HEADER_LEN, DATA_HEADER_LEN,
};

mod ack;
mod input;
mod listener;
mod output;
mod recv;
mod send;
mod setup;
mod shutdown;
mod timers;

pub use listener::{out_of_the_blue, ListenOutcome, Listener};
use recv::InChunk;
use send::OutChunk;
use setup::{random_pair, tag_key, Cookie};

/// Most duplicate TSNs reported in one SACK.
pub const MAX_DUP_TSNS: usize = 16;
/// Most gap ack blocks sent in one SACK.
pub const MAX_GAP_BLOCKS: usize = 64;
/// Longest address bound into a State Cookie (IPv6).
pub const MAX_ADDR_LEN: usize = 16;

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
    /// The link cannot alter a packet and the peer is set the same way
    /// (shared memory between two of our stacks, as Linux's veth, which
    /// offloads the CRC32c: `NETIF_F_SCTP_CRC`): packets are sent with a
    /// zero Checksum field and taken without their CRC32c checked. Off
    /// by default: on a wire RFC 9260 §6.8 holds (compute it; discard a
    /// packet whose CRC32c is wrong).
    pub trusted_link: bool,
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
            trusted_link: false,
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
/// On a `trusted` link ([`Config::trusted_link`]) the CRC32c is not
/// checked.
fn parse_all(bytes: &[u8], trusted: bool) -> Option<(HeaderRepr, Chunks<'_>)> {
    let mut v = Chunks::new();
    let h = parse_into(bytes, &mut v, trusted)?;
    Some((h, v))
}

/// [`parse_all`] into the caller's `v` (empty): the chunks are not moved
/// again on the way out (the list is some hundreds of octets, copied
/// twice a packet when returned).
fn parse_into<'a>(bytes: &'a [u8], v: &mut Chunks<'a>, trusted: bool) -> Option<HeaderRepr> {
    let p = SctpPacket::new_checked(bytes).ok()?;
    if !trusted {
        p.verify_checksum().ok()?;
    }
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

    /// Earliest deadline, if any timer runs.
    #[inline]
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
}

#[cfg(test)]
mod hostile;

#[cfg(test)]
mod tests;
