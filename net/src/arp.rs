//! ARP resolution and cache for one Ethernet/IPv4 interface (RFC 826,
//! RFC 1122 §2.3.2).
//!
//! I/O-free and clock-free: every call takes `now` in nanoseconds from any
//! monotonic origin, and the cache hands back [`ArpRepr`]s to send (use
//! [`emit_frame`] to put one in an Ethernet frame).
//!
//! Call order, for a host that sends IPv4 packets:
//!
//! 1. [`ArpCache::resolve`] the next hop. `Known(mac)`: send now.
//!    `SendRequest(repr)`: send the request, then [`enqueue`](ArpCache::enqueue)
//!    the packet. `Pending`: enqueue it. `Failed`: drop it (the host is
//!    unreachable for now).
//! 2. Hand every received ARP packet to [`ArpCache::process`]; send the reply
//!    it returns, then drain [`ArpCache::pop_ready`] and send each packet to
//!    the MAC that comes with it.
//! 3. At [`ArpCache::poll_timeout`], loop on [`ArpCache::poll_request`] for
//!    retransmitted requests. Calling it early or twice is harmless.
//!
//! Entries live in a `BTreeMap`, so iteration, and with it the order of
//! retransmissions, is deterministic (the simulator depends on it).
//!
//! # Queue policy
//!
//! Each unresolved address holds at most [`Config::max_queued`] packets
//! and [`Config::max_queued_octets`] octets, and all of them together at
//! most [`Config::max_queued_octets_total`] octets. A packet is charged
//! the octets its caller names ([`ArpCache::enqueue`]: a frame's buffer)
//! plus the slot it takes here. When a new packet would pass a bound, the
//! **oldest** packets are dropped until it fits (of its own address for
//! the per-address bounds, of any address for the total) and handed back
//! to the caller (to recycle their buffers): RFC 1122 §2.3.2.2 says the
//! link layer SHOULD save "at least one (the latest) packet" of those sent
//! to an unresolved address, and a TCP retransmission is newer and more
//! useful than what it repeats. A packet larger than a bound by itself is
//! dropped. Drops are counted in [`Stats::queue_overflow_drops`]; packets
//! dropped because resolution failed, or because their entry was evicted,
//! in [`Stats::unresolved_drops`].
//!
//! The defaults hold a burst of connections to a new neighbour whole and
//! in order: each sends a SYN before the first ARP reply, and a SYN
//! dropped here would follow a SYN retransmission timeout later, behind
//! the others (a server that pairs connections by accept order, as
//! perftest's `-q N` does, then pairs them wrongly). What a peer can make
//! us hold here (SYN-ACKs, RSTs and ICMP replies to addresses it names)
//! is bounded by the total.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr,
    Ipv4Address, ARP_PACKET_LEN, ETHERNET_HEADER_LEN,
};

/// One second in nanoseconds.
pub const SECOND: u64 = 1_000_000_000;

/// Tunables of an [`ArpCache`]. Times are in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long a resolved entry stays valid after it was last learned,
    /// even while in use (RFC 1122 §2.3.2.1: cache entries MUST time out).
    pub entry_lifetime: u64,
    /// Time between requests for the same address. RFC 1122 §2.3.2.1: a
    /// mechanism MUST prevent ARP flooding; the recommended rate is at most
    /// one request per second per destination.
    pub retry_interval: u64,
    /// Requests sent for one address before resolution fails (at least 1).
    pub max_requests: u32,
    /// How long a failed address answers `Failed` before a new resolution
    /// may start (rate limit against flooding, as above).
    pub failure_holdoff: u64,
    /// Packets held per unresolved address (0: hold none).
    pub max_queued: usize,
    /// Octets held per unresolved address, each packet charged what the
    /// caller names plus its slot ([`ArpCache::enqueue`]).
    pub max_queued_octets: usize,
    /// Octets held for all unresolved addresses together, charged as for
    /// `max_queued_octets`.
    pub max_queued_octets_total: usize,
    /// Entries in the table, resolved, pending and failed together (at
    /// least 1).
    pub max_entries: usize,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            entry_lifetime: 60 * SECOND,
            retry_interval: SECOND,
            max_requests: 3,
            failure_holdoff: 3 * SECOND,
            // Linux holds up to `unres_qlen_bytes` (212992) of buffer per
            // neighbour, about 100 small packets. 128 SYN frames (74
            // octets each, plus their buffers' and slots' bookkeeping) are
            // some 17 KiB here; 64 KiB holds 40-odd full-sized frames.
            max_queued: 128,
            max_queued_octets: 64 << 10,
            max_queued_octets_total: 256 << 10,
            max_entries: 256,
        }
    }
}

/// Counters; they only go up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Requests handed out by `resolve` and `poll_request`.
    pub requests_sent: u64,
    /// Replies handed out by `process`.
    pub replies_sent: u64,
    /// Addresses whose resolution failed after `max_requests` requests.
    pub resolution_failures: u64,
    /// Queued packets dropped to make room for a newer one, and packets
    /// not held because they were larger than a bound by themselves.
    pub queue_overflow_drops: u64,
    /// Queued packets dropped because their address failed or was evicted.
    pub unresolved_drops: u64,
    /// Entries evicted to make room (`max_entries`).
    pub evictions: u64,
    /// Packets whose sender claimed our own IP address (not learned).
    pub address_conflicts: u64,
    /// Packets ignored for a sender we must not learn (multicast or
    /// broadcast hardware address).
    pub bad_sender: u64,
}

/// What [`ArpCache::resolve`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// The address is resolved: send to this MAC.
    Known(EthernetAddress),
    /// Resolution started or is due for a retry: broadcast this request
    /// (see [`emit_frame`]), then queue the packet.
    SendRequest(ArpRepr),
    /// A request is out; queue the packet.
    Pending,
    /// Resolution failed recently; drop the packet.
    Failed,
}

/// What [`ArpCache::enqueue`] did with a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueue<P> {
    /// Held until the address resolves.
    Queued,
    /// Held; to make room, the oldest packets held (for this address, or
    /// for any under the total bound) were dropped and are handed back,
    /// oldest first.
    DroppedOldest(Vec<P>),
    /// Not held: larger by itself than `max_queued_octets` or
    /// `max_queued_octets_total`; dropped and handed back (what was held
    /// stays).
    TooLarge(P),
    /// Not held (no resolution under way for the address, or
    /// `max_queued` is 0); the packet is handed back.
    Refused(P),
}

/// A packet held for an unresolved address.
#[derive(Debug)]
struct Held<P> {
    /// Order of arrival over all addresses (the total bound drops the
    /// oldest first).
    seq: u64,
    /// Octets charged: the caller's count plus this slot.
    octets: usize,
    packet: P,
}

#[derive(Debug)]
enum State<P> {
    Resolved {
        mac: EthernetAddress,
        expires_at: u64,
    },
    Pending {
        /// Requests sent so far.
        sent: u32,
        /// When the next request (or, after the last, failure) is due.
        next_at: u64,
        queue: VecDeque<Held<P>>,
        /// Octets charged for `queue`.
        octets: usize,
    },
    Failed {
        until: u64,
    },
}

/// The ARP table and resolver of one interface, holding queued packets of
/// type `P` (an owned frame, a buffer index, ...).
#[derive(Debug)]
pub struct ArpCache<P = Vec<u8>> {
    mac: EthernetAddress,
    ip: Ipv4Address,
    config: Config,
    entries: BTreeMap<Ipv4Address, State<P>>,
    ready: VecDeque<(EthernetAddress, P)>,
    stats: Stats,
    /// The last address [`resolve`](Self::resolve) found resolved, with
    /// its MAC and expiry: asked again at once, without the table's
    /// search (every frame to a peer resolves its next hop). Cleared by
    /// every change of an entry (learned, failed, evicted, restarted).
    last: Option<(Ipv4Address, EthernetAddress, u64)>,
    /// No pending entry is due before this (a lower bound on their
    /// `next_at`; `u64::MAX` with none): [`poll_request`] skips its scan
    /// of the table until then, as it runs every poll.
    ///
    /// [`poll_request`]: Self::poll_request
    next_due: u64,
    /// Octets charged for every queue together.
    held_octets: usize,
    /// Arrival number of the next packet held.
    next_seq: u64,
}

impl<P> ArpCache<P> {
    /// What a held packet's slot here costs on top of the caller's count.
    const SLOT: usize = std::mem::size_of::<Held<P>>();

    /// An empty cache for the interface with `my_mac` and `my_ip`. A
    /// `max_requests` or `max_entries` of 0 is taken as 1.
    pub fn new(my_mac: EthernetAddress, my_ip: Ipv4Address, config: Config) -> Self {
        let config = Config {
            max_requests: config.max_requests.max(1),
            max_entries: config.max_entries.max(1),
            ..config
        };
        ArpCache {
            mac: my_mac,
            ip: my_ip,
            config,
            entries: BTreeMap::new(),
            next_due: u64::MAX,
            ready: VecDeque::new(),
            stats: Stats::default(),
            last: None,
            held_octets: 0,
            next_seq: 0,
        }
    }

    /// Our MAC address.
    pub fn mac(&self) -> EthernetAddress {
        self.mac
    }

    /// Our IPv4 address.
    pub fn ip(&self) -> Ipv4Address {
        self.ip
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Entries in the table (resolved, pending and failed).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Packets queued for `ip`.
    pub fn queued(&self, ip: Ipv4Address) -> usize {
        match self.entries.get(&ip) {
            Some(State::Pending { queue, .. }) => queue.len(),
            _ => 0,
        }
    }

    /// Octets charged for the packets queued for `ip`.
    pub fn queued_octets(&self, ip: Ipv4Address) -> usize {
        match self.entries.get(&ip) {
            Some(State::Pending { octets, .. }) => *octets,
            _ => 0,
        }
    }

    /// Octets charged for the packets queued for every address.
    pub fn queued_octets_total(&self) -> usize {
        self.held_octets
    }

    /// The MAC of `ip`, if resolved and not expired at `now`. Never sends
    /// anything.
    pub fn lookup(&self, ip: Ipv4Address, now: u64) -> Option<EthernetAddress> {
        if let Some(mac) = self.recent(ip, now) {
            return Some(mac);
        }
        match self.entries.get(&ip) {
            Some(&State::Resolved { mac, expires_at }) if now < expires_at => Some(mac),
            _ => None,
        }
    }

    /// Insert or overwrite a resolved entry (static configuration, tests).
    /// Packets queued for `ip` become ready.
    pub fn insert(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: u64) {
        self.learn(ip, mac, now);
    }

    /// Insert or overwrite a resolved entry that expires at `expires_at`
    /// (a neighbour another interface learned, [`SharedNeighbours`]).
    /// Packets queued for `ip` become ready. Nothing if `expires_at` is
    /// not after `now`.
    pub fn insert_until(
        &mut self,
        ip: Ipv4Address,
        mac: EthernetAddress,
        expires_at: u64,
        now: u64,
    ) {
        if expires_at <= now || ip == self.ip || mac.is_multicast() {
            return;
        }
        self.learn(ip, mac, now);
        if let Some(State::Resolved { expires_at: e, .. }) = self.entries.get_mut(&ip) {
            *e = expires_at;
        }
    }

    /// The addresses whose resolution is under way (a request out, no
    /// answer yet), in address order.
    pub fn pending(&self) -> impl Iterator<Item = Ipv4Address> + '_ {
        self.entries.iter().filter_map(|(ip, s)| match s {
            State::Pending { .. } => Some(*ip),
            _ => None,
        })
    }

    /// The resolved entry of `ip` with its expiry, if it has not expired
    /// at `now` (what an interface publishes to [`SharedNeighbours`]).
    pub fn resolved(&self, ip: Ipv4Address, now: u64) -> Option<(EthernetAddress, u64)> {
        match self.entries.get(&ip) {
            Some(&State::Resolved { mac, expires_at }) if now < expires_at => {
                Some((mac, expires_at))
            }
            _ => None,
        }
    }

    /// The request that asks for `ip`: broadcast, with a zero target
    /// hardware address (what Linux sends; RFC 826 leaves it unspecified).
    pub fn request_for(&self, ip: Ipv4Address) -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::REQUEST,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.ip,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: ip,
        }
    }

    /// The MAC of `ip` if it is the address [`resolve`](Self::resolve)
    /// last found resolved and that has not expired at `now`: no table
    /// search (a sender's fast path; `None` says only "ask `resolve`").
    #[inline]
    pub fn recent(&self, ip: Ipv4Address, now: u64) -> Option<EthernetAddress> {
        match self.last {
            Some((last, mac, expires_at)) if last == ip && now < expires_at => Some(mac),
            _ => None,
        }
    }

    /// Find the MAC of `ip` for sending, starting or advancing resolution.
    /// See the [module docs](self) for what to do with each answer.
    #[inline]
    pub fn resolve(&mut self, ip: Ipv4Address, now: u64) -> Resolve {
        match self.recent(ip, now) {
            Some(mac) => Resolve::Known(mac),
            None => self.resolve_in_table(ip, now),
        }
    }

    #[inline(never)]
    fn resolve_in_table(&mut self, ip: Ipv4Address, now: u64) -> Resolve {
        let max_requests = self.config.max_requests;
        let retry = self.config.retry_interval;
        match self.entries.get_mut(&ip) {
            Some(&mut State::Resolved { mac, expires_at }) if now < expires_at => {
                self.last = Some((ip, mac, expires_at));
                return Resolve::Known(mac);
            }
            Some(&mut State::Failed { until }) if now < until => return Resolve::Failed,
            Some(State::Pending { sent, next_at, .. }) => {
                if now < *next_at {
                    return Resolve::Pending;
                }
                if *sent < max_requests {
                    *sent += 1;
                    *next_at = now.saturating_add(retry);
                    self.next_due = self.next_due.min(*next_at);
                    self.stats.requests_sent += 1;
                    return Resolve::SendRequest(self.request_for(ip));
                }
                self.fail(ip, now);
                return Resolve::Failed;
            }
            // Expired, failed long enough ago, or absent: start over.
            Some(_) | None => {}
        }
        self.last = None;
        self.make_room(ip);
        self.entries.insert(
            ip,
            State::Pending {
                sent: 1,
                next_at: now.saturating_add(retry),
                queue: VecDeque::new(),
                octets: 0,
            },
        );
        self.next_due = self.next_due.min(now.saturating_add(retry));
        self.stats.requests_sent += 1;
        Resolve::SendRequest(self.request_for(ip))
    }

    /// Hold `packet` until `ip` resolves (after `resolve` answered
    /// `SendRequest` or `Pending`), charging it `octets` (what it holds:
    /// a frame's buffer) plus its slot here. See the [module docs](self)
    /// for the queue policy.
    pub fn enqueue(&mut self, ip: Ipv4Address, packet: P, octets: usize) -> Enqueue<P> {
        let cfg = self.config;
        if cfg.max_queued == 0 || !matches!(self.entries.get(&ip), Some(State::Pending { .. })) {
            return Enqueue::Refused(packet);
        }
        let charge = octets.saturating_add(Self::SLOT);
        if charge > cfg.max_queued_octets || charge > cfg.max_queued_octets_total {
            self.stats.queue_overflow_drops += 1;
            return Enqueue::TooLarge(packet);
        }
        let mut dropped = Vec::new();
        // This address's bounds: its own oldest packets go.
        if let Some(State::Pending { queue, octets, .. }) = self.entries.get_mut(&ip) {
            while queue.len() >= cfg.max_queued || *octets + charge > cfg.max_queued_octets {
                let Some(old) = queue.pop_front() else { break };
                *octets -= old.octets;
                self.held_octets -= old.octets;
                dropped.push(old.packet);
            }
        }
        // The total bound: the oldest packets of any address go.
        while self.held_octets + charge > cfg.max_queued_octets_total {
            let Some(old) = self.pop_oldest() else { break };
            dropped.push(old);
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some(State::Pending { queue, octets, .. }) = self.entries.get_mut(&ip) {
            queue.push_back(Held {
                seq,
                octets: charge,
                packet,
            });
            *octets += charge;
            self.held_octets += charge;
        }
        if dropped.is_empty() {
            Enqueue::Queued
        } else {
            self.stats.queue_overflow_drops += dropped.len() as u64;
            Enqueue::DroppedOldest(dropped)
        }
    }

    /// Drop the packet held longest, of any address.
    fn pop_oldest(&mut self) -> Option<P> {
        let (_, queue, octets) = self
            .entries
            .values_mut()
            .filter_map(|s| match s {
                State::Pending { queue, octets, .. } => {
                    queue.front().map(|h| h.seq).map(|seq| (seq, queue, octets))
                }
                _ => None,
            })
            .min_by_key(|(seq, _, _)| *seq)?;
        let old = queue.pop_front()?;
        *octets -= old.octets;
        self.held_octets -= old.octets;
        Some(old.packet)
    }

    /// The next packet whose address has resolved, with the MAC to send
    /// it to, in the order they were queued per address.
    pub fn pop_ready(&mut self) -> Option<(EthernetAddress, P)> {
        self.ready.pop_front()
    }

    /// Handle a received ARP packet (RFC 826, "Packet Reception"), already
    /// checked by [`ArpRepr::parse`] to be Ethernet/IPv4. Returns the reply
    /// to send when it is a request for our address.
    ///
    /// The merge rule: an existing entry for the sender protocol address is
    /// updated from any request or reply, whoever it targets (this is how
    /// gratuitous ARP moves an address); a new entry is made only when we
    /// are the target. Packets the update resolves become ready.
    pub fn process(&mut self, arp: &ArpRepr, now: u64) -> Option<ArpRepr> {
        let sender_ip = arp.source_protocol_addr;
        let sender_mac = arp.source_hardware_addr;
        let for_us = arp.target_protocol_addr == self.ip;
        if sender_ip == self.ip {
            // Someone else claims our address: never learn it (it would
            // send our own traffic away), and do not answer.
            self.stats.address_conflicts += 1;
            return None;
        }
        if sender_mac.is_multicast() {
            // A group address cannot own an IP address.
            self.stats.bad_sender += 1;
            return None;
        }
        // RFC 5227 §2.1.1: a probe has sender protocol address 0.0.0.0 and
        // must not enter the cache; it is still answered below.
        let learnable = sender_ip != Ipv4Address::UNSPECIFIED;
        // RFC 826: "If the pair <protocol type, sender protocol address> is
        // already in my translation table, update the sender hardware
        // address field of the entry with the new information in the packet
        // and set Merge_flag to true."
        let merged = learnable
            && match self.entries.get(&sender_ip) {
                Some(State::Resolved { .. }) | Some(State::Pending { .. }) => true,
                Some(State::Failed { .. }) | None => false,
            };
        if merged {
            self.learn(sender_ip, sender_mac, now);
        }
        if !for_us {
            return None;
        }
        // RFC 826: "Am I the target protocol address? Yes: If Merge_flag is
        // false, add the triplet ... to the translation table."
        if learnable && !merged {
            self.learn(sender_ip, sender_mac, now);
        }
        // RFC 826: "Is the opcode ares_op$REQUEST? (NOW look at the
        // opcode!!) Yes: Swap hardware and protocol fields, putting the local
        // hardware and protocol addresses in the sender fields. Set the ar$op
        // field to ares_op$REPLY."
        if arp.operation != ArpOperation::REQUEST {
            return None;
        }
        self.stats.replies_sent += 1;
        Some(ArpRepr {
            operation: ArpOperation::REPLY,
            source_hardware_addr: self.mac,
            source_protocol_addr: self.ip,
            target_hardware_addr: sender_mac,
            target_protocol_addr: sender_ip,
        })
    }

    /// Whether [`poll_request`](Self::poll_request) may have a request at
    /// `now` (false: it has none).
    #[inline]
    pub fn request_due(&self, now: u64) -> bool {
        now >= self.next_due
    }

    /// Make [`request_due`](Self::request_due) true from `at` on (until
    /// the next [`poll_request`](Self::poll_request), which recomputes it):
    /// an interface that has its own work at `at` ([`SharedNeighbours`])
    /// rides on the one check its poll makes every round.
    #[inline]
    pub fn wake_at(&mut self, at: u64) {
        self.next_due = self.next_due.min(at);
    }

    /// The next retransmitted request due at `now`, if any; also fails the
    /// addresses whose last request went unanswered. Loop until `None`.
    pub fn poll_request(&mut self, now: u64) -> Option<ArpRepr> {
        if now < self.next_due {
            return None;
        }
        let max_requests = self.config.max_requests;
        let retry = self.config.retry_interval;
        let mut failed = Vec::new();
        let mut found = None;
        let mut next_due = u64::MAX;
        for (&ip, state) in self.entries.iter_mut() {
            if let State::Pending { sent, next_at, .. } = state {
                if now < *next_at {
                    next_due = next_due.min(*next_at);
                    continue;
                }
                if *sent < max_requests {
                    *sent += 1;
                    *next_at = now.saturating_add(retry);
                    found = Some(ip);
                    // Entries after this one were not looked at: scan
                    // again next time.
                    next_due = now;
                    break;
                }
                failed.push(ip);
            }
        }
        self.next_due = next_due;
        for ip in failed {
            self.fail(ip, now);
        }
        let ip = found?;
        self.stats.requests_sent += 1;
        Some(self.request_for(ip))
    }

    /// When [`poll_request`](Self::poll_request) next has work: the
    /// earliest retry or failure deadline of a pending address.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.entries
            .values()
            .filter_map(|s| match s {
                State::Pending { next_at, .. } => Some(*next_at),
                _ => None,
            })
            .min()
    }

    /// Record `ip` at `mac`, releasing packets queued for it.
    fn learn(&mut self, ip: Ipv4Address, mac: EthernetAddress, now: u64) {
        self.last = None;
        let state = State::Resolved {
            mac,
            expires_at: now.saturating_add(self.config.entry_lifetime),
        };
        if !self.entries.contains_key(&ip) {
            self.make_room(ip);
        }
        if let Some(State::Pending { queue, octets, .. }) = self.entries.insert(ip, state) {
            self.held_octets -= octets;
            self.ready
                .extend(queue.into_iter().map(|h| (mac, h.packet)));
        }
    }

    /// Mark `ip` failed, dropping what was queued for it.
    fn fail(&mut self, ip: Ipv4Address, now: u64) {
        self.last = None;
        let until = now.saturating_add(self.config.failure_holdoff);
        if let Some(State::Pending { queue, octets, .. }) =
            self.entries.insert(ip, State::Failed { until })
        {
            self.held_octets -= octets;
            self.stats.unresolved_drops += queue.len() as u64;
        }
        self.stats.resolution_failures += 1;
    }

    /// Evict one entry if the table is full and `ip` is not in it: a failed
    /// entry first, else the resolved entry closest to expiry, else the
    /// pending entry closest to its next deadline (its queue is dropped).
    /// Its callers (`learn`, `resolve` starting over) have cleared `last`.
    fn make_room(&mut self, ip: Ipv4Address) {
        if self.entries.len() < self.config.max_entries || self.entries.contains_key(&ip) {
            return;
        }
        let victim = self
            .entries
            .iter()
            .min_by_key(|(_, s)| match s {
                State::Failed { until } => (0, *until),
                State::Resolved { expires_at, .. } => (1, *expires_at),
                State::Pending { next_at, .. } => (2, *next_at),
            })
            .map(|(&ip, _)| ip);
        if let Some(victim) = victim {
            if let Some(State::Pending { queue, octets, .. }) = self.entries.remove(&victim) {
                self.held_octets -= octets;
                self.stats.unresolved_drops += queue.len() as u64;
            }
            self.stats.evictions += 1;
        }
    }
}

/// Neighbours learned by any of several interfaces that share one address
/// and one link: the poll loops of one multi-queue context, where RSS
/// delivers every ARP frame to queue 0 only. The interface that receives
/// an ARP packet publishes what it learned from it here; the others look
/// here only when their own cache misses (and, while a resolution of
/// theirs is pending, every [`SHARED_RECHECK`] of their clock), so a
/// frame sent to a known neighbour never touches the lock. Only entries
/// learned from ARP packets are published, never copies, so an entry
/// nobody refreshes expires everywhere.
///
/// Expiry times are in the publishing interface's clock; the loops of one
/// context start their clocks within moments of each other, and an entry
/// lives a minute ([`Config::entry_lifetime`]).
#[derive(Debug, Default)]
pub struct SharedNeighbours {
    table: Mutex<HashMap<Ipv4Address, (EthernetAddress, u64)>>,
    /// Bumped by every publication (interfaces waiting for an address
    /// look again only when it moved).
    version: AtomicU64,
}

/// How often (ns) an interface with a pending resolution looks at the
/// [`SharedNeighbours`] for it: 200 µs.
pub const SHARED_RECHECK: u64 = 200_000;

impl SharedNeighbours {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Record that `ip` is at `mac` until `expires_at`.
    pub fn publish(&self, ip: Ipv4Address, mac: EthernetAddress, expires_at: u64) {
        let mut t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        if t.get(&ip) != Some(&(mac, expires_at)) {
            t.insert(ip, (mac, expires_at));
            self.version.fetch_add(1, Ordering::Release);
        }
    }

    /// The MAC of `ip` and its expiry, if published and not expired at `now`.
    pub fn get(&self, ip: Ipv4Address, now: u64) -> Option<(EthernetAddress, u64)> {
        let t = self.table.lock().unwrap_or_else(|p| p.into_inner());
        t.get(&ip).copied().filter(|&(_, e)| now < e)
    }

    /// Publications so far (it changes with every one).
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }
}

/// Octets of an Ethernet frame carrying ARP, without padding: 14 + 28.
/// Ethernet's 60-octet minimum is left to the device (NICs pad on
/// transmit).
pub const FRAME_LEN: usize = ETHERNET_HEADER_LEN + ARP_PACKET_LEN;

/// Write `arp` in an Ethernet frame from `my_mac` into the start of `buf`
/// and return the frame's length ([`FRAME_LEN`]). A request goes to the
/// broadcast address; a reply to its target hardware address (RFC 826:
/// "Send the packet to the (new) target hardware address").
pub fn emit_frame(
    arp: &ArpRepr,
    my_mac: EthernetAddress,
    buf: &mut [u8],
) -> Result<usize, crate::wire::Error> {
    let got = buf.len();
    let buf = buf
        .get_mut(..FRAME_LEN)
        .ok_or(crate::wire::Error::Truncated {
            layer: crate::wire::Layer::Ethernet,
            needed: FRAME_LEN,
            got,
        })?;
    let dst_addr = if arp.operation == ArpOperation::REQUEST {
        EthernetAddress::BROADCAST
    } else {
        arp.target_hardware_addr
    };
    let mut frame = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: my_mac,
        dst_addr,
        ethertype: EtherType::ARP,
    }
    .emit(&mut frame)?;
    // The length was checked above; the ARP emit cannot fail.
    arp.emit(&mut ArpPacket::new_unchecked(frame.payload_mut()))
        .map_err(|_| crate::wire::Error::Truncated {
            layer: crate::wire::Layer::Ethernet,
            needed: FRAME_LEN,
            got,
        })?;
    Ok(FRAME_LEN)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MY_MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x17, 0x77, 0x03]);
    const MY_IP: Ipv4Address = Ipv4Address::new(192, 168, 177, 3);
    const PEER_MAC: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x17, 0x77, 0x02]);
    const PEER_IP: Ipv4Address = Ipv4Address::new(192, 168, 177, 2);
    const OTHER_MAC: EthernetAddress = EthernetAddress([0x02, 0, 0, 0, 0, 0x09]);
    const OTHER_IP: Ipv4Address = Ipv4Address::new(192, 168, 177, 9);
    const S: u64 = SECOND;

    /// Frames 1 and 2 of tests/fixtures/siw/crc-rping.pcap: the request
    /// 192.168.177.3 sent for .2 and the reply it got.
    static REQUEST_FRAME: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, 0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0xc0, 0xa8,
        0xb1, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0xb1, 0x02,
    ];
    static REPLY_FRAME: [u8; 42] = [
        0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0x52, 0x54, 0x00, 0x17, 0x77, 0x02, 0x08, 0x06, 0x00,
        0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, 0x52, 0x54, 0x00, 0x17, 0x77, 0x02, 0xc0, 0xa8,
        0xb1, 0x02, 0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0xc0, 0xa8, 0xb1, 0x03,
    ];

    fn parse_frame(frame: &[u8]) -> ArpRepr {
        let eth = EthernetFrame::new_checked(frame).unwrap();
        ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).unwrap()).unwrap()
    }

    fn cache(config: Config) -> ArpCache<u32> {
        ArpCache::new(MY_MAC, MY_IP, config)
    }

    fn reply_from(mac: EthernetAddress, ip: Ipv4Address) -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::REPLY,
            source_hardware_addr: mac,
            source_protocol_addr: ip,
            target_hardware_addr: MY_MAC,
            target_protocol_addr: MY_IP,
        }
    }

    fn request_from(mac: EthernetAddress, ip: Ipv4Address, target: Ipv4Address) -> ArpRepr {
        ArpRepr {
            operation: ArpOperation::REQUEST,
            source_hardware_addr: mac,
            source_protocol_addr: ip,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: target,
        }
    }

    #[test]
    fn resolution_flow_matches_the_capture() {
        let mut c = cache(Config::default());
        let t0 = 5 * S;
        let req = match c.resolve(PEER_IP, t0) {
            Resolve::SendRequest(r) => r,
            other => panic!("{other:?}"),
        };
        let mut buf = [0u8; 64];
        let n = emit_frame(&req, MY_MAC, &mut buf).unwrap();
        assert_eq!(buf[..n], REQUEST_FRAME);
        assert_eq!(c.enqueue(PEER_IP, 1, 0), Enqueue::Queued);
        assert_eq!(c.resolve(PEER_IP, t0 + 1), Resolve::Pending);
        assert_eq!(c.enqueue(PEER_IP, 2, 0), Enqueue::Queued);
        assert_eq!(c.queued(PEER_IP), 2);
        assert_eq!(c.pop_ready(), None);
        assert_eq!(c.lookup(PEER_IP, t0 + 1), None);

        assert_eq!(c.process(&parse_frame(&REPLY_FRAME), t0 + 1000), None);
        assert_eq!(c.lookup(PEER_IP, t0 + 1000), Some(PEER_MAC));
        assert_eq!(c.resolve(PEER_IP, t0 + 1000), Resolve::Known(PEER_MAC));
        assert_eq!(c.pop_ready(), Some((PEER_MAC, 1)));
        assert_eq!(c.pop_ready(), Some((PEER_MAC, 2)));
        assert_eq!(c.pop_ready(), None);
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.enqueue(PEER_IP, 3, 0), Enqueue::Refused(3));
        assert_eq!(c.stats().requests_sent, 1);
    }

    /// The last resolved address is answered without the table, and never
    /// stale: a new MAC, an expiry, an eviction each show at once.
    #[test]
    fn the_last_answer_follows_every_change_of_its_entry() {
        let mut c = cache(Config {
            max_entries: 2,
            ..Config::default()
        });
        c.insert(PEER_IP, PEER_MAC, 0);
        assert_eq!(c.resolve(PEER_IP, S), Resolve::Known(PEER_MAC));
        assert_eq!(c.resolve(PEER_IP, S), Resolve::Known(PEER_MAC));
        // The peer moves to another MAC (a gratuitous reply).
        c.process(&reply_from(OTHER_MAC, PEER_IP), 2 * S);
        assert_eq!(c.resolve(PEER_IP, 2 * S), Resolve::Known(OTHER_MAC));
        assert_eq!(c.lookup(PEER_IP, 2 * S), Some(OTHER_MAC));
        // Past its lifetime the entry is asked for again.
        let end = 2 * S + Config::default().entry_lifetime;
        assert_eq!(c.lookup(PEER_IP, end), None);
        assert!(matches!(c.resolve(PEER_IP, end), Resolve::SendRequest(_)));
        c.process(&reply_from(PEER_MAC, PEER_IP), end);
        assert_eq!(c.resolve(PEER_IP, end), Resolve::Known(PEER_MAC));
        // Two more addresses in a table of two: the peer's entry (closest
        // to expiry) is evicted, and no answer survives it.
        let third = Ipv4Address::new(192, 168, 177, 10);
        c.process(&reply_from(OTHER_MAC, OTHER_IP), end + 1);
        c.process(&reply_from(OTHER_MAC, third), end + 2);
        assert_eq!(c.lookup(PEER_IP, end + 3), None);
        assert!(matches!(
            c.resolve(PEER_IP, end + 3),
            Resolve::SendRequest(_)
        ));
    }

    #[test]
    fn answers_requests_for_our_ip_and_learns_the_sender() {
        // The peer's side of the capture: we are .2 and get .3's request.
        let mut c: ArpCache<u32> = ArpCache::new(PEER_MAC, PEER_IP, Config::default());
        let reply = c.process(&parse_frame(&REQUEST_FRAME), 0).unwrap();
        let mut buf = [0u8; FRAME_LEN];
        assert_eq!(emit_frame(&reply, PEER_MAC, &mut buf), Ok(FRAME_LEN));
        assert_eq!(buf, REPLY_FRAME);
        assert_eq!(c.lookup(MY_IP, 0), Some(MY_MAC));
        assert_eq!(c.stats().replies_sent, 1);
        assert!(emit_frame(&reply, PEER_MAC, &mut buf[..41]).is_err());
    }

    #[test]
    fn request_for_another_ip_is_ignored() {
        let mut c = cache(Config::default());
        let r = request_from(OTHER_MAC, OTHER_IP, PEER_IP);
        assert_eq!(c.process(&r, 0), None);
        assert_eq!(c.lookup(OTHER_IP, 0), None, "no new entry unless targeted");
        assert!(c.is_empty());
        // A reply between two other hosts is not learned either.
        let r = ArpRepr {
            operation: ArpOperation::REPLY,
            target_protocol_addr: PEER_IP,
            ..r
        };
        assert_eq!(c.process(&r, 0), None);
        assert!(c.is_empty());
        assert_eq!(c.stats().replies_sent, 0);
    }

    #[test]
    fn gratuitous_arp_updates_an_existing_entry() {
        let mut c = cache(Config::default());
        c.insert(PEER_IP, PEER_MAC, 0);
        // Gratuitous request: sender and target protocol address both the
        // peer's, broadcast. Not for us, but the merge rule updates.
        let garp = request_from(OTHER_MAC, PEER_IP, PEER_IP);
        assert_eq!(c.process(&garp, 10 * S), None);
        assert_eq!(c.lookup(PEER_IP, 10 * S), Some(OTHER_MAC));
        // The update refreshed the lifetime.
        assert_eq!(c.lookup(PEER_IP, 69 * S), Some(OTHER_MAC));
        // A gratuitous ARP for an address we do not know adds nothing.
        assert_eq!(
            c.process(&request_from(OTHER_MAC, OTHER_IP, OTHER_IP), 0),
            None
        );
        assert_eq!(c.lookup(OTHER_IP, 0), None);
        // And it resolves a pending entry, releasing its queue.
        let mut c = cache(Config::default());
        assert!(matches!(c.resolve(PEER_IP, 0), Resolve::SendRequest(_)));
        assert_eq!(c.enqueue(PEER_IP, 7, 0), Enqueue::Queued);
        c.process(&request_from(PEER_MAC, PEER_IP, PEER_IP), 1);
        assert_eq!(c.pop_ready(), Some((PEER_MAC, 7)));
    }

    #[test]
    fn entries_expire() {
        let config = Config {
            entry_lifetime: 60 * S,
            ..Config::default()
        };
        let mut c = cache(config);
        c.process(&reply_from(PEER_MAC, PEER_IP), 100 * S);
        assert_eq!(c.lookup(PEER_IP, 100 * S), Some(PEER_MAC));
        assert_eq!(c.lookup(PEER_IP, 160 * S - 1), Some(PEER_MAC));
        assert_eq!(c.lookup(PEER_IP, 160 * S), None);
        // Expired: resolve asks again rather than using the old MAC.
        assert_eq!(
            c.resolve(PEER_IP, 160 * S),
            Resolve::SendRequest(c.request_for(PEER_IP))
        );
    }

    #[test]
    fn retries_are_rate_limited_and_bounded() {
        let config = Config {
            retry_interval: S,
            max_requests: 3,
            failure_holdoff: 5 * S,
            ..Config::default()
        };
        let mut c = cache(config);
        let req = c.request_for(PEER_IP);
        assert_eq!(c.resolve(PEER_IP, 0), Resolve::SendRequest(req));
        assert_eq!(c.enqueue(PEER_IP, 1, 0), Enqueue::Queued);
        // RFC 1122 §2.3.2.1: no more than one request per interval.
        assert_eq!(c.resolve(PEER_IP, S - 1), Resolve::Pending);
        assert_eq!(c.poll_request(S - 1), None);
        assert_eq!(c.poll_timeout(), Some(S));
        assert_eq!(c.poll_request(S), Some(req));
        assert_eq!(c.poll_request(S), None, "twice at once is harmless");
        assert_eq!(c.resolve(PEER_IP, 2 * S), Resolve::SendRequest(req));
        assert_eq!(c.stats().requests_sent, 3);
        assert_eq!(c.poll_timeout(), Some(3 * S));
        // The third request went unanswered: fail, drop the queue.
        assert_eq!(c.poll_request(3 * S), None);
        assert_eq!(c.poll_timeout(), None);
        assert_eq!(c.stats().resolution_failures, 1);
        assert_eq!(c.stats().unresolved_drops, 1);
        assert_eq!(c.resolve(PEER_IP, 3 * S), Resolve::Failed);
        assert_eq!(c.enqueue(PEER_IP, 2, 0), Enqueue::Refused(2));
        assert_eq!(c.resolve(PEER_IP, 8 * S - 1), Resolve::Failed);
        // After the hold-off, a new round starts.
        assert_eq!(c.resolve(PEER_IP, 8 * S), Resolve::SendRequest(req));
        assert_eq!(c.stats().requests_sent, 4);
        // Failure declared by resolve itself, without poll_request.
        assert_eq!(c.resolve(PEER_IP, 9 * S), Resolve::SendRequest(req));
        assert_eq!(c.resolve(PEER_IP, 10 * S), Resolve::SendRequest(req));
        assert_eq!(c.resolve(PEER_IP, 11 * S), Resolve::Failed);
        assert_eq!(c.stats().resolution_failures, 2);
        // A late reply still resolves a failed address it targets us with.
        c.process(&reply_from(PEER_MAC, PEER_IP), 11 * S);
        assert_eq!(c.resolve(PEER_IP, 11 * S), Resolve::Known(PEER_MAC));
    }

    #[test]
    fn queue_is_bounded_drop_oldest() {
        let config = Config {
            max_queued: 2,
            ..Config::default()
        };
        let mut c = cache(config);
        assert_eq!(c.enqueue(PEER_IP, 0, 0), Enqueue::Refused(0), "not pending");
        assert!(matches!(c.resolve(PEER_IP, 0), Resolve::SendRequest(_)));
        assert_eq!(c.enqueue(PEER_IP, 1, 0), Enqueue::Queued);
        assert_eq!(c.enqueue(PEER_IP, 2, 0), Enqueue::Queued);
        assert_eq!(c.enqueue(PEER_IP, 3, 0), Enqueue::DroppedOldest(vec![1]));
        assert_eq!(c.enqueue(PEER_IP, 4, 0), Enqueue::DroppedOldest(vec![2]));
        assert_eq!(c.queued(PEER_IP), 2);
        assert_eq!(c.stats().queue_overflow_drops, 2);
        c.process(&reply_from(PEER_MAC, PEER_IP), 1);
        assert_eq!(c.pop_ready(), Some((PEER_MAC, 3)));
        assert_eq!(c.pop_ready(), Some((PEER_MAC, 4)));
        assert_eq!(c.pop_ready(), None);

        let mut none = cache(Config {
            max_queued: 0,
            ..Config::default()
        });
        assert!(matches!(none.resolve(PEER_IP, 0), Resolve::SendRequest(_)));
        assert_eq!(none.enqueue(PEER_IP, 9, 0), Enqueue::Refused(9));
    }

    #[test]
    fn table_is_bounded() {
        let mut c = cache(Config {
            max_entries: 2,
            ..Config::default()
        });
        c.insert(Ipv4Address::new(10, 0, 0, 1), OTHER_MAC, 0);
        c.insert(Ipv4Address::new(10, 0, 0, 2), OTHER_MAC, S);
        assert!(matches!(c.resolve(PEER_IP, 2 * S), Resolve::SendRequest(_)));
        assert_eq!(c.len(), 2);
        assert_eq!(c.stats().evictions, 1);
        assert_eq!(c.lookup(Ipv4Address::new(10, 0, 0, 1), 2 * S), None);
        assert_eq!(
            c.lookup(Ipv4Address::new(10, 0, 0, 2), 2 * S),
            Some(OTHER_MAC)
        );
    }

    #[test]
    fn never_learns_our_own_address_or_a_group_address() {
        let mut c = cache(Config::default());
        assert_eq!(c.process(&request_from(OTHER_MAC, MY_IP, MY_IP), 0), None);
        assert_eq!(c.stats().address_conflicts, 1);
        let bcast = request_from(EthernetAddress::BROADCAST, PEER_IP, MY_IP);
        assert_eq!(c.process(&bcast, 0), None);
        assert_eq!(c.stats().bad_sender, 1);
        assert!(c.is_empty());
        // An RFC 5227 probe (sender 0.0.0.0) is answered, not learned.
        let probe = request_from(PEER_MAC, Ipv4Address::UNSPECIFIED, MY_IP);
        let reply = c.process(&probe, 0).unwrap();
        assert_eq!(reply.target_hardware_addr, PEER_MAC);
        assert_eq!(reply.target_protocol_addr, Ipv4Address::UNSPECIFIED);
        assert!(c.is_empty());
    }

    #[test]
    fn zero_config_values_are_clamped() {
        let mut c = cache(Config {
            max_requests: 0,
            max_entries: 0,
            retry_interval: 0,
            failure_holdoff: 0,
            ..Config::default()
        });
        assert_eq!(c.config().max_requests, 1);
        assert!(matches!(c.resolve(PEER_IP, 0), Resolve::SendRequest(_)));
        assert_eq!(c.resolve(PEER_IP, 0), Resolve::Failed);
        assert!(matches!(c.resolve(OTHER_IP, 0), Resolve::SendRequest(_)));
        assert_eq!(c.len(), 1);
        assert_eq!(c.poll_request(u64::MAX), None);
        assert_eq!(c.stats().resolution_failures, 2);
        // Saturated deadlines do not wrap.
        assert!(matches!(
            c.resolve(OTHER_IP, u64::MAX),
            Resolve::SendRequest(_)
        ));
        assert_eq!(c.poll_timeout(), Some(u64::MAX));
    }

    /// Frame 3 of the same capture: .3's SYN to .2, from port 45380 to
    /// 7176 (74 octets: MSS, SACK-permitted, timestamps, window scale).
    static SYN_FRAME: [u8; 74] = [
        0x52, 0x54, 0x00, 0x17, 0x77, 0x02, 0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0x08, 0x00, 0x45,
        0x00, 0x00, 0x3c, 0xfc, 0x59, 0x40, 0x00, 0x40, 0x06, 0x5b, 0x0b, 0xc0, 0xa8, 0xb1, 0x03,
        0xc0, 0xa8, 0xb1, 0x02, 0xb1, 0x44, 0x1c, 0x08, 0x2c, 0xbf, 0xdc, 0x2f, 0x00, 0x00, 0x00,
        0x00, 0xa0, 0x02, 0xfa, 0xf0, 0xe3, 0x85, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02,
        0x08, 0x0a, 0x25, 0x77, 0xd9, 0xc2, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x06,
    ];

    /// The capture's SYN with source port 45380 + `i` (one connection of
    /// a burst; its checksum is left as captured: the cache reads nothing
    /// of a frame).
    fn syn(i: u16) -> Vec<u8> {
        let mut f = SYN_FRAME.to_vec();
        f[34..36].copy_from_slice(&0xb144u16.wrapping_add(i).to_be_bytes());
        f
    }

    /// A full-sized (1514-octet) frame: the SYN's headers, then octets
    /// that name `i`.
    fn full(i: u8) -> Vec<u8> {
        let mut f = SYN_FRAME.to_vec();
        f.resize(1514, i);
        f
    }

    /// What the cache charges for holding `f` the way the interface holds
    /// a frame (its buffer and the `Vec` that owns it).
    fn charged(f: &[u8]) -> usize {
        f.len() + std::mem::size_of::<Vec<u8>>() + ArpCache::<Vec<u8>>::SLOT
    }

    fn hold(c: &mut ArpCache<Vec<u8>>, ip: Ipv4Address, f: Vec<u8>) -> Enqueue<Vec<u8>> {
        let n = f.capacity() + std::mem::size_of::<Vec<u8>>();
        c.enqueue(ip, f, n)
    }

    fn frames(config: Config) -> ArpCache<Vec<u8>> {
        let mut c = ArpCache::new(MY_MAC, MY_IP, config);
        assert!(matches!(c.resolve(PEER_IP, 0), Resolve::SendRequest(_)));
        c
    }

    fn drain(c: &mut ArpCache<Vec<u8>>) -> Vec<Vec<u8>> {
        std::iter::from_fn(|| c.pop_ready().map(|(_, f)| f)).collect()
    }

    /// Connections started together to a new neighbour send one SYN each
    /// before the ARP reply: with the defaults, 128 of them are held
    /// whole and leave in the order they came.
    #[test]
    fn a_burst_of_syns_is_held_whole_and_in_order() {
        let mut c = frames(Config::default());
        for i in 0..128 {
            assert_eq!(hold(&mut c, PEER_IP, syn(i)), Enqueue::Queued, "SYN {i}");
        }
        assert_eq!(c.queued(PEER_IP), 128);
        assert_eq!(c.queued_octets(PEER_IP), 128 * charged(&SYN_FRAME));
        assert!(c.queued_octets(PEER_IP) <= c.config().max_queued_octets);
        assert_eq!(c.queued_octets_total(), c.queued_octets(PEER_IP));
        c.process(&reply_from(PEER_MAC, PEER_IP), 1);
        assert_eq!((c.queued(PEER_IP), c.queued_octets_total()), (0, 0));
        assert_eq!(drain(&mut c), (0..128).map(syn).collect::<Vec<_>>());
        assert_eq!(c.stats().queue_overflow_drops, 0);
    }

    /// At the count bound the oldest SYN goes, one per new one; the rest
    /// keep their order.
    #[test]
    fn at_the_count_bound_the_oldest_is_dropped() {
        let mut c = frames(Config::default());
        for i in 0..128 {
            assert_eq!(hold(&mut c, PEER_IP, syn(i)), Enqueue::Queued);
        }
        for i in 128..130 {
            let old = syn(i - 128);
            assert_eq!(
                hold(&mut c, PEER_IP, syn(i)),
                Enqueue::DroppedOldest(vec![old])
            );
            assert_eq!(c.queued(PEER_IP), 128);
        }
        assert_eq!(c.stats().queue_overflow_drops, 2);
        c.process(&reply_from(PEER_MAC, PEER_IP), 1);
        assert_eq!(drain(&mut c), (2..130).map(syn).collect::<Vec<_>>());
    }

    /// The octet bound: full-sized frames fill it long before the count
    /// does; a frame that would pass it pushes out as many of the oldest
    /// as it needs, and one larger than the bound by itself is dropped.
    #[test]
    fn at_the_octet_bound_the_oldest_are_dropped() {
        let bound = Config::default().max_queued_octets;
        let mut c = frames(Config::default());
        let fit = bound / charged(&full(0));
        assert!((8..128).contains(&fit), "{fit} full frames fit");
        for i in 0..fit {
            assert_eq!(hold(&mut c, PEER_IP, full(i as u8)), Enqueue::Queued);
        }
        let next = full(fit as u8);
        assert_eq!(
            hold(&mut c, PEER_IP, next),
            Enqueue::DroppedOldest(vec![full(0)])
        );
        assert_eq!(c.queued(PEER_IP), fit);
        assert!(c.queued_octets(PEER_IP) <= bound);

        // SYNs, then full frames, under a bound of 4 full frames: the
        // third full frame pushes out as many SYNs as it needs, oldest
        // first.
        let bound = 4 * charged(&full(0));
        let mut c = frames(Config {
            max_queued_octets: bound,
            ..Config::default()
        });
        for i in 0..20 {
            assert_eq!(hold(&mut c, PEER_IP, syn(i)), Enqueue::Queued);
        }
        for i in 0..2 {
            assert_eq!(hold(&mut c, PEER_IP, full(i)), Enqueue::Queued);
        }
        let held = c.queued_octets(PEER_IP);
        let need = held + charged(&full(2)) - bound;
        let k = need.div_ceil(charged(&SYN_FRAME));
        assert!(k > 1, "one frame pushes out several");
        assert_eq!(
            hold(&mut c, PEER_IP, full(2)),
            Enqueue::DroppedOldest((0..k as u16).map(syn).collect())
        );
        assert!(c.queued_octets(PEER_IP) <= bound);
        assert_eq!(c.stats().queue_overflow_drops, k as u64);

        // Larger than the bound by itself: dropped, the queue untouched.
        let mut c = frames(Config {
            max_queued_octets: charged(&full(0)) - 1,
            ..Config::default()
        });
        assert_eq!(hold(&mut c, PEER_IP, syn(0)), Enqueue::Queued);
        assert_eq!(hold(&mut c, PEER_IP, full(1)), Enqueue::TooLarge(full(1)));
        assert_eq!((c.queued(PEER_IP), c.stats().queue_overflow_drops), (1, 1));
        c.process(&reply_from(PEER_MAC, PEER_IP), 1);
        assert_eq!(drain(&mut c), [syn(0)]);
    }

    /// The total bound spans addresses: a packet for one pushes out the
    /// oldest held for any; what resolves, fails or is evicted gives its
    /// octets back.
    #[test]
    fn the_total_bound_drops_the_oldest_of_any_address() {
        let per = charged(&SYN_FRAME);
        let third = Ipv4Address::new(192, 168, 177, 10);
        let mut c = frames(Config {
            max_queued_octets_total: 10 * per,
            max_entries: 2,
            ..Config::default()
        });
        assert!(matches!(c.resolve(OTHER_IP, 0), Resolve::SendRequest(_)));
        for i in 0..6 {
            assert_eq!(hold(&mut c, PEER_IP, syn(i)), Enqueue::Queued);
        }
        for i in 100..104 {
            assert_eq!(hold(&mut c, OTHER_IP, syn(i)), Enqueue::Queued);
        }
        assert_eq!(c.queued_octets_total(), 10 * per);
        // Full: the peer's oldest go, whoever the new one is for.
        assert_eq!(
            hold(&mut c, OTHER_IP, syn(104)),
            Enqueue::DroppedOldest(vec![syn(0)])
        );
        assert_eq!(
            hold(&mut c, PEER_IP, syn(6)),
            Enqueue::DroppedOldest(vec![syn(1)])
        );
        assert_eq!(
            hold(&mut c, OTHER_IP, syn(105)),
            Enqueue::DroppedOldest(vec![syn(2)])
        );
        assert_eq!((c.queued(PEER_IP), c.queued(OTHER_IP)), (4, 6));
        assert_eq!(c.queued_octets_total(), 10 * per);
        assert_eq!(
            c.queued_octets(PEER_IP) + c.queued_octets(OTHER_IP),
            c.queued_octets_total()
        );
        // A third address evicts the peer's pending entry (the table holds
        // two): its octets are free.
        assert!(matches!(c.resolve(third, 2), Resolve::SendRequest(_)));
        assert_eq!(c.queued(PEER_IP), 0);
        assert_eq!(c.queued_octets_total(), 6 * per);
        assert_eq!(c.stats().unresolved_drops, 4);
        // The other address resolves: its SYNs leave in order, its octets
        // are free too.
        c.process(&reply_from(OTHER_MAC, OTHER_IP), 2);
        assert_eq!(drain(&mut c), (100..106).map(syn).collect::<Vec<_>>());
        assert_eq!(c.queued_octets_total(), 0);
        // And one that fails.
        assert_eq!(hold(&mut c, third, syn(7)), Enqueue::Queued);
        assert_eq!(c.queued_octets_total(), per);
        let mut t = 2;
        while c.queued(third) > 0 {
            t += S;
            while c.poll_request(t).is_some() {}
        }
        assert_eq!(c.queued_octets_total(), 0);
        assert_eq!(c.stats().resolution_failures, 1);
    }

    proptest::proptest! {
        /// Whatever is held, for whichever addresses, resolved, failed or
        /// evicted in whatever order: the bounds hold after every step,
        /// the totals add up, and each address's packets leave in the
        /// order they came.
        #[test]
        fn the_bounds_hold_and_order_is_kept(
            ops in proptest::collection::vec((0u8..4, 0u8..3, 0usize..3000), 1..300),
        ) {
            let config = Config {
                max_queued: 16,
                max_queued_octets: 8000,
                max_queued_octets_total: 12000,
                max_entries: 2,
                ..Config::default()
            };
            let addrs = [PEER_IP, OTHER_IP, Ipv4Address::new(192, 168, 177, 10)];
            let mut c: ArpCache<(u8, u32)> = ArpCache::new(MY_MAC, MY_IP, config);
            let mut last_out = [None::<u32>; 3];
            let mut t = 0;
            for (n, (op, a, octets)) in ops.into_iter().enumerate() {
                let ip = addrs[a as usize];
                t += S / 4;
                match op {
                    0 | 1 => {
                        if matches!(c.resolve(ip, t), Resolve::SendRequest(_) | Resolve::Pending) {
                            let _ = c.enqueue(ip, (a, n as u32), octets);
                        }
                    }
                    2 => {
                        c.process(&reply_from(OTHER_MAC, ip), t);
                    }
                    _ => while c.poll_request(t).is_some() {},
                }
                while let Some((_, (a, n))) = c.pop_ready() {
                    let last = &mut last_out[a as usize];
                    proptest::prop_assert!(last.is_none_or(|l| l < n), "out of order");
                    *last = Some(n);
                }
                let mut sum = 0;
                for ip in addrs {
                    proptest::prop_assert!(c.queued(ip) <= config.max_queued);
                    proptest::prop_assert!(c.queued_octets(ip) <= config.max_queued_octets);
                    sum += c.queued_octets(ip);
                }
                proptest::prop_assert_eq!(sum, c.queued_octets_total());
                proptest::prop_assert!(sum <= config.max_queued_octets_total);
            }
        }
    }
}
