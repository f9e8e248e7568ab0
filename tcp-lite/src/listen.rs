//! Passive opens: a listener with a bounded backlog and a bound on half-open
//! connections, and RFC 6528 initial sequence numbers.
//!
//! SYN floods (RFC 4987): a half-open connection costs one [`Connection`]
//! until its handshake completes or its SYN-ACK retries run out — 5 by
//! default, about 63 s with a one-second initial RTO, where a full
//! connection's limit would keep it some 7 minutes. When the half-open table
//! (or the backlog) is full, a new SYN evicts the oldest half-open
//! connection that has already had its SYN-ACK retransmitted: RFC 4987 §3.4
//! ("SYN cache"), oldest-first eviction. A client that answers within one RTO
//! is never evicted, while a flood of spoofed SYNs recycles its own entries
//! once each has waited one RTO unanswered; only while every entry is
//! younger than that are new SYNs refused.
//!
//! Then, if [`Listener::enable_syn_cookies`] was called, a SYN that finds no
//! room is answered with a stateless SYN cookie (RFC 4987 §3.6, see
//! [`Listener::on_syn_at`]): the SYN-ACK's ISN is a keyed hash of the
//! 4-tuple, the peer's ISN, a 64-second time counter and a 2-bit MSS index,
//! and the listener keeps nothing. An ACK that acknowledges such an ISN
//! ([`Listener::on_cookie_ack`]) rebuilds the connection. The MSS survives
//! a cookie from a table of four values. When the peer's SYN carried the
//! timestamps option (and ours are on), the other options survive too, as
//! in Linux: the cookie SYN-ACK offers window scaling, SACK and timestamps
//! as a half-open connection would, and the low 5 bits of its TSval carry
//! the peer's window shift (4 bits, 15 for none) and SACK-permitted (1
//! bit); the peer echoes the TSval in the TSecr of its ACK (RFC 7323 §3),
//! which rebuilds them. Without timestamps in the SYN there is nowhere to
//! keep them: the cookie SYN-ACK then offers none of them, so the peer uses
//! none either (RFC 7323 §2.2, §3.2; RFC 2018 §2) and the connection runs
//! with a 64 KiB window. The option bits are not covered by the cookie's
//! hash: a peer that alters them can only give its own connection options
//! it could have asked for in its SYN. The TSval is moved back by up to 31
//! ticks (ms) to carry them, so an RTT sample taken from its echo can read
//! up to 31 ms long (Linux's cookies have the same skew).

use std::collections::VecDeque;
use std::hash::{Hash, Hasher};

use crate::tcp::{Config, Connection, State};
use crate::wire::{Ipv4Address, TcpFlags, TcpRepr, TcpTimestamp};

/// RFC 6528 §3: ISN = M + F(localip, localport, remoteip, remoteport, secretkey),
/// M a 4-microsecond timer. F here is SipHash (std's `DefaultHasher`) keyed
/// by hashing the secret first; the caller draws the secret at start-up.
#[derive(Debug, Clone)]
pub struct IsnGenerator {
    secret: [u8; 16],
}

impl IsnGenerator {
    /// A generator with a secret the caller drew from a good random source.
    pub fn new(secret: [u8; 16]) -> Self {
        IsnGenerator { secret }
    }

    /// The ISN for a connection at `now` (nanoseconds).
    pub fn isn(&self, local: (Ipv4Address, u16), remote: (Ipv4Address, u16), now: u64) -> u32 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.secret.hash(&mut h);
        local.0 .0.hash(&mut h);
        local.1.hash(&mut h);
        remote.0 .0.hash(&mut h);
        remote.1.hash(&mut h);
        let f = h.finish() as u32;
        ((now / 4_000) as u32).wrapping_add(f)
    }
}

/// Why a SYN was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Too many half-open connections (SYN flood bound).
    HalfOpenFull,
    /// The accept queue is full.
    BacklogFull,
    /// Not a SYN.
    NotSyn,
}

/// What [`Listener::on_cookie_ack`] made of an ACK for no half-open
/// connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CookieAck {
    /// It acknowledged a valid cookie: the connection is made and waits in
    /// the accept queue.
    Accepted,
    /// It acknowledged a valid cookie, but the accept queue and the owner's
    /// unaccepted connections fill the backlog: nothing is made. Linux
    /// drops such a segment without an answer (`ListenOverflows`,
    /// `tcp_abort_on_overflow` off), as it drops the ACK that would
    /// complete a half-open handshake then ([`Listener::accept_queue_full`]):
    /// the peer, established on its side, retransmits what it sends, and
    /// gets in once there is room while the cookie is valid.
    Overflow,
    /// Not a valid cookie (cookies off, RST or SYN set, a wrong or old
    /// cookie, a segment the rebuilt connection does not take): nothing is
    /// made; the owner answers as for a segment to no connection (RST,
    /// RFC 9293 §3.10.7.2).
    Invalid,
}

/// One listening port.
#[derive(Debug)]
pub struct Listener {
    cfg: Config,
    port: u16,
    backlog: usize,
    max_half_open: usize,
    syn_ack_retries: u32,
    /// Half-open connections, oldest first.
    half_open: Vec<(Ipv4Address, Connection)>,
    ready: VecDeque<(Ipv4Address, Connection)>,
    /// Connections the owner took from the accept queue and still counts
    /// against the backlog ([`set_unaccepted`](Self::set_unaccepted)).
    unaccepted: usize,
    /// Window cap of the connections made here (`set_rcv_cap`).
    rcv_cap: Option<u32>,
    /// SYNs refused for a full half-open table.
    pub refused_half_open: u64,
    /// SYNs refused for a full backlog.
    pub refused_backlog: u64,
    /// Half-open connections evicted to make room for a new SYN.
    pub evicted_half_open: u64,
    /// Key of the SYN cookie hash (`None`: no cookies).
    cookie_secret: Option<[u8; 16]>,
    /// SYN-ACKs sent with a cookie instead of a half-open entry.
    pub syn_cookies_sent: u64,
    /// Connections created from a valid cookie.
    pub syn_cookies_accepted: u64,
    /// ACKs for no half-open connection whose cookie did not check (forged,
    /// too old, or a stray ACK), or that found the accept queue full.
    pub syn_cookies_rejected: u64,
}

/// What a SYN cookie keeps in the low bits of the SYN-ACK's TSval when the
/// peer's SYN had timestamps (Linux's `cookie_init_timestamp` layout, less
/// the ECN bit: shift in bits 0-3, 15 for none; SACK-permitted in bit 4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CookieOptions {
    window_scale: Option<u8>,
    sack_permitted: bool,
    /// The TSval of the peer's SYN (or, rebuilt, of its ACK): TS.Recent.
    peer_tsval: u32,
}

/// Low TSval bits that carry [`CookieOptions`].
const COOKIE_TS_BITS: u32 = 5;
const COOKIE_TS_MASK: u32 = (1 << COOKIE_TS_BITS) - 1;
const COOKIE_NO_SHIFT: u32 = 0xf;
/// RFC 7323 §2.3: a shift above 14 is taken as 14.
const MAX_COOKIE_SHIFT: u8 = 14;
const COOKIE_SACK: u32 = 0x10;

impl CookieOptions {
    /// Our TSval `ts` with its low bits replaced by the options, moved back
    /// one step if that put it ahead of `ts`: the connection's later TSvals
    /// (its clock) never go below it (RFC 7323 §5.3, the peer's PAWS).
    fn encode(self, ts: u32) -> u32 {
        let bits = u32::from(self.window_scale.map_or(0xf, |s| s.min(MAX_COOKIE_SHIFT)))
            | if self.sack_permitted { COOKIE_SACK } else { 0 };
        let v = (ts & !COOKIE_TS_MASK) | bits;
        if (v.wrapping_sub(ts) as i32) > 0 {
            v.wrapping_sub(1 << COOKIE_TS_BITS)
        } else {
            v
        }
    }

    /// The options an echoed TSval (`tsecr`) carries; `peer_tsval` is the
    /// TSval of the segment that echoed it.
    fn decode(tsecr: u32, peer_tsval: u32) -> Self {
        let shift = tsecr & COOKIE_NO_SHIFT;
        CookieOptions {
            window_scale: (shift != COOKIE_NO_SHIFT).then(|| (shift as u8).min(MAX_COOKIE_SHIFT)),
            sack_permitted: tsecr & COOKIE_SACK != 0,
            peer_tsval,
        }
    }
}

/// The MSS values a cookie can carry (a 2-bit index): the largest not above
/// the peer's is chosen; 536 is RFC 9293 §3.7.1's default.
const COOKIE_MSS: [u16; 4] = [536, 1220, 1440, 1460];
/// Length of one step of the cookie's time counter (ns). A cookie is valid
/// in the step it was made in and the next: 64 to 128 s (Linux's counter is
/// the same 64 s, with MAX_SYNCOOKIE_AGE 2).
pub const COOKIE_PERIOD: u64 = 64_000_000_000;

impl Listener {
    /// Listen on `port`.
    pub fn new(cfg: Config, port: u16, backlog: usize, max_half_open: usize) -> Self {
        Listener {
            cfg,
            port,
            backlog,
            max_half_open,
            syn_ack_retries: Self::SYN_ACK_RETRIES,
            half_open: Vec::new(),
            ready: VecDeque::new(),
            unaccepted: 0,
            rcv_cap: None,
            refused_half_open: 0,
            refused_backlog: 0,
            evicted_half_open: 0,
            cookie_secret: None,
            syn_cookies_sent: 0,
            syn_cookies_accepted: 0,
            syn_cookies_rejected: 0,
        }
    }

    /// Answer SYNs that find no room with SYN cookies keyed by `secret`
    /// (drawn by the caller from a good random source).
    pub fn enable_syn_cookies(&mut self, secret: [u8; 16]) {
        self.cookie_secret = Some(secret);
    }

    /// The cookie hash: 30 bits over the secret, the peer's address and
    /// port, our port, the peer's ISN, the time counter and the MSS index.
    /// The local address is left out: a stack serves one address.
    fn cookie(
        &self,
        secret: &[u8; 16],
        src: Ipv4Address,
        syn: &TcpRepr<'_>,
        peer_isn: u32,
        t: u64,
        idx: u32,
    ) -> u32 {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        secret.hash(&mut h);
        src.0.hash(&mut h);
        syn.src_port.hash(&mut h);
        self.port.hash(&mut h);
        peer_isn.hash(&mut h);
        t.hash(&mut h);
        idx.hash(&mut h);
        ((h.finish() as u32) << 2) | idx
    }

    /// The SYN as the cookie remembers it: its sequence number, ports, the
    /// MSS from the table, and `opts` when timestamps carried them.
    fn cookie_syn(
        syn: &TcpRepr<'_>,
        peer_isn: u32,
        idx: u32,
        opts: Option<CookieOptions>,
    ) -> TcpRepr<'static> {
        let mut r = TcpRepr::new(syn.src_port, syn.dst_port, peer_isn, TcpFlags::SYN);
        r.window = syn.window;
        r.max_seg_size = Some(COOKIE_MSS[idx as usize & 3]);
        if let Some(o) = opts {
            r.window_scale = o.window_scale;
            r.sack_permitted = o.sack_permitted;
            r.timestamp = Some(TcpTimestamp {
                tsval: o.peer_tsval,
                tsecr: 0,
            });
        }
        r
    }

    /// [`on_syn`](Self::on_syn), then, when SYN cookies are enabled and the
    /// SYN found no room (half-open table or backlog) while the accept queue
    /// itself has room, a stateless SYN-ACK carrying a cookie
    /// (RFC 4987 §3.6): `Ok(Some(syn_ack))` for the caller to send.
    /// `Ok(None)`: the SYN took a half-open entry as with `on_syn`.
    pub fn on_syn_at(
        &mut self,
        src: Ipv4Address,
        syn: &TcpRepr<'_>,
        isn: u32,
        now: u64,
    ) -> Result<Option<TcpRepr<'static>>, Refusal> {
        let why = match self.on_syn(src, syn, isn) {
            Ok(()) => return Ok(None),
            Err(Refusal::NotSyn) => return Err(Refusal::NotSyn),
            Err(why) => why,
        };
        let Some(secret) = self.cookie_secret else {
            return Err(why);
        };
        if self.accept_queue_full() {
            return Err(why);
        }
        let peer_mss = syn.max_seg_size.unwrap_or(536);
        let idx = COOKIE_MSS.iter().rposition(|&m| m <= peer_mss).unwrap_or(0) as u32;
        let t = now / COOKIE_PERIOD;
        let iss = self.cookie(&secret, src, syn, syn.seq_number, t, idx);
        // RFC 7323 §3.2: the peer echoes our TSval only if its SYN had
        // timestamps and we answer with them; only then can options ride
        // in the TSval.
        let opts = match (self.cfg.timestamps, syn.timestamp) {
            (true, Some(ts)) => Some(CookieOptions {
                window_scale: syn.window_scale.map(|s| s.min(MAX_COOKIE_SHIFT)),
                sack_permitted: syn.sack_permitted,
                peer_tsval: ts.tsval,
            }),
            _ => None,
        };
        // The SYN-ACK a half-open connection would send for the SYN as the
        // cookie remembers it; the connection is then dropped.
        let mut c = Connection::accept(
            self.cfg,
            &Self::cookie_syn(syn, syn.seq_number, idx, opts),
            iss,
        );
        c.set_rcv_cap(self.rcv_cap);
        let mut out = None;
        c.poll_transmit(now, 1, &mut |r| {
            let mut s = TcpRepr::new(r.src_port, r.dst_port, r.seq_number, r.flags);
            s.ack_number = r.ack_number;
            s.window = r.window;
            s.max_seg_size = r.max_seg_size;
            s.window_scale = r.window_scale;
            s.sack_permitted = r.sack_permitted;
            s.timestamp = match (r.timestamp, opts) {
                (Some(ts), Some(o)) => Some(TcpTimestamp {
                    tsval: o.encode(ts.tsval),
                    tsecr: ts.tsecr,
                }),
                (ts, _) => ts,
            };
            out = Some(s);
        });
        match out {
            Some(s) => {
                self.syn_cookies_sent += 1;
                Ok(Some(s))
            }
            None => Err(why),
        }
    }

    /// An ACK from `src` for no half-open connection: if it acknowledges a
    /// SYN cookie made in this or the previous time step (RFC 4987 §3.6),
    /// the connection is created established, its payload passed to
    /// `deliver`, and it waits in the accept queue
    /// ([`CookieAck::Accepted`]). A valid cookie that finds the accept
    /// queue full creates nothing ([`CookieAck::Overflow`]); anything else
    /// (cookies off, RST or SYN set, a wrong or old cookie) creates
    /// nothing either ([`CookieAck::Invalid`]).
    pub fn on_cookie_ack(
        &mut self,
        src: Ipv4Address,
        seg: &TcpRepr<'_>,
        now: u64,
        deliver: &mut dyn FnMut(&[u8]),
    ) -> CookieAck {
        let Some(secret) = self.cookie_secret else {
            return CookieAck::Invalid;
        };
        if !seg.flags.contains(TcpFlags::ACK) || seg.flags.intersects(TcpFlags::SYN | TcpFlags::RST)
        {
            return CookieAck::Invalid;
        }
        let iss = seg.ack_number.wrapping_sub(1);
        let peer_isn = seg.seq_number.wrapping_sub(1);
        let idx = iss & 3;
        let t = now / COOKIE_PERIOD;
        let valid = [t, t.wrapping_sub(1)]
            .iter()
            .any(|&t| self.cookie(&secret, src, seg, peer_isn, t, idx) == iss);
        if !valid {
            self.syn_cookies_rejected += 1;
            return CookieAck::Invalid;
        }
        if self.accept_queue_full() {
            self.syn_cookies_rejected += 1;
            return CookieAck::Overflow;
        }
        // The options the SYN-ACK's TSval kept, echoed in the TSecr. An
        // ACK without timestamps gets the MSS-only connection (its SYN had
        // none, or the peer dropped them, RFC 7323 §3.2).
        let opts = match (self.cfg.timestamps, seg.timestamp) {
            (true, Some(ts)) => Some(CookieOptions::decode(ts.tsecr, ts.tsval)),
            _ => None,
        };
        let syn = Self::cookie_syn(seg, peer_isn, idx, opts);
        let mut c = Connection::accept(self.cfg, &syn, iss);
        c.set_rcv_cap(self.rcv_cap);
        // The SYN-ACK went out already (statelessly): mark it sent.
        c.poll_transmit(now, 1, &mut |_| {});
        c.handle_segment(seg, now, deliver);
        if c.state() == State::SynReceived || c.state() == State::Closed {
            self.syn_cookies_rejected += 1;
            return CookieAck::Invalid;
        }
        self.syn_cookies_accepted += 1;
        self.ready.push_back((src, c));
        CookieAck::Accepted
    }

    /// SYN-ACK retransmissions before a half-open connection is dropped,
    /// unless [`set_syn_ack_retries`](Self::set_syn_ack_retries) says
    /// otherwise (Linux's `tcp_synack_retries` default).
    pub const SYN_ACK_RETRIES: u32 = 5;

    /// Retransmit a half-open connection's SYN-ACK at most `n` times (the
    /// RTO doubling each time) before dropping it; applies to SYNs taken
    /// from now on.
    pub fn set_syn_ack_retries(&mut self, n: u32) {
        self.syn_ack_retries = n;
    }

    /// Port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Take a SYN for this port from `src`. On refusal the caller answers
    /// with nothing (half-open bound: let the peer retry) or RST.
    pub fn on_syn(&mut self, src: Ipv4Address, syn: &TcpRepr<'_>, isn: u32) -> Result<(), Refusal> {
        if !syn.flags.contains(TcpFlags::SYN) || syn.flags.contains(TcpFlags::ACK) {
            return Err(Refusal::NotSyn);
        }
        // A retransmitted SYN for a half-open connection we already have.
        if self
            .half_open
            .iter()
            .any(|(a, c)| *a == src && c.remote_port() == syn.src_port)
        {
            return Ok(());
        }
        let room = |half_open: usize| {
            if half_open >= self.max_half_open {
                Err(Refusal::HalfOpenFull)
            } else if self.ready.len() + self.unaccepted + half_open >= self.backlog {
                Err(Refusal::BacklogFull)
            } else {
                Ok(())
            }
        };
        if let Err(why) = room(self.half_open.len()) {
            // RFC 4987 §3.4: make room by dropping the oldest half-open
            // connection whose SYN-ACK already went unanswered for an RTO,
            // if that is enough.
            let victim = self
                .half_open
                .iter()
                .position(|(_, c)| c.stats().rto_retransmits > 0);
            match victim {
                Some(i) if room(self.half_open.len() - 1).is_ok() => {
                    self.half_open.remove(i);
                    self.evicted_half_open += 1;
                }
                _ => {
                    match why {
                        Refusal::HalfOpenFull => self.refused_half_open += 1,
                        _ => self.refused_backlog += 1,
                    }
                    return Err(why);
                }
            }
        }
        let mut c = Connection::accept(self.cfg, syn, isn);
        c.set_syn_ack_retries(self.syn_ack_retries);
        c.set_rcv_cap(self.rcv_cap);
        self.half_open.push((src, c));
        Ok(())
    }

    /// The half-open connection a segment belongs to, if any.
    pub fn half_open_mut(&mut self, src: Ipv4Address, src_port: u16) -> Option<&mut Connection> {
        self.half_open
            .iter_mut()
            .find(|(a, c)| *a == src && c.remote_port() == src_port)
            .map(|(_, c)| c)
    }

    /// Iterate half-open connections (to poll their transmissions and timers).
    pub fn half_open_iter_mut(&mut self) -> impl Iterator<Item = &mut (Ipv4Address, Connection)> {
        self.half_open.iter_mut()
    }

    /// Move established connections to the accept queue; drop dead ones
    /// (those whose SYN-ACK retries ran out, or that were reset).
    pub fn settle(&mut self) {
        if self.half_open.is_empty() {
            return; // every poll of an idle listener
        }
        // Keep the half-open ones in order (oldest first), in place.
        let mut keep = 0;
        for i in 0..self.half_open.len() {
            if self.half_open[i].1.state() == State::SynReceived {
                self.half_open.swap(keep, i);
                keep += 1;
            }
        }
        for (a, c) in self.half_open.drain(keep..) {
            if c.state() != State::Closed {
                self.ready.push_back((a, c));
            }
        }
    }

    /// Next established connection.
    pub fn accept(&mut self) -> Option<(Ipv4Address, Connection)> {
        self.settle();
        self.ready.pop_front()
    }

    /// Half-open connections.
    pub fn half_open_len(&self) -> usize {
        self.half_open.len()
    }

    /// Established connections waiting in the accept queue.
    pub fn ready_len(&self) -> usize {
        self.ready.len()
    }

    /// The owner's count of connections it took with
    /// [`accept`](Self::accept) whose application has not accepted them
    /// yet (an iWARP stack's connections awaiting the MPA Request or the
    /// application's decision). They stay in the backlog: a SYN finds
    /// room only while the accept queue, these and the half-open
    /// connections together are below it, and neither a SYN cookie nor
    /// the ACK completing a handshake makes a connection beyond it
    /// ([`accept_queue_full`](Self::accept_queue_full)).
    pub fn set_unaccepted(&mut self, n: usize) {
        self.unaccepted = n;
    }

    /// The accept queue and the owner's unaccepted connections fill the
    /// backlog: Linux (`sk_acceptq_is_full`) then drops a new SYN, and
    /// drops the ACK that would complete a half-open handshake (the
    /// SYN-ACK is retransmitted, the peer's ACK or data retried), without
    /// answering RST (`tcp_abort_on_overflow` off, its default). The
    /// owner drops such ACKs before they reach the half-open connection.
    pub fn accept_queue_full(&self) -> bool {
        self.ready.len() + self.unaccepted >= self.backlog
    }

    /// Connections made from now on offer at most `cap` octets of window
    /// ([`Connection::set_rcv_cap`]; `None`: their `rcv_buf`), so that a
    /// connection nobody accepted yet holds at most that much
    /// out-of-order data; the owner lifts it once accepted.
    pub fn set_rcv_cap(&mut self, cap: Option<u32>) {
        self.rcv_cap = cap;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::TcpTimestamp;

    const PEER: Ipv4Address = Ipv4Address([10, 0, 0, 9]);

    fn syn(port: u16) -> TcpRepr<'static> {
        let mut r = TcpRepr::new(port, 80, 1000, TcpFlags::SYN);
        r.window = 65535;
        r.max_seg_size = Some(1460);
        r
    }

    #[test]
    fn isn_depends_on_tuple_secret_and_time() {
        let g = IsnGenerator::new([7; 16]);
        let l = (Ipv4Address([10, 0, 0, 1]), 80);
        let a = g.isn(l, (PEER, 1000), 0);
        assert_ne!(a, g.isn(l, (PEER, 1001), 0));
        assert_ne!(a, IsnGenerator::new([8; 16]).isn(l, (PEER, 1000), 0));
        assert_eq!(g.isn(l, (PEER, 1000), 4_000_000).wrapping_sub(a), 1000); // M ticks every 4 µs
    }

    /// What a stack does each round: run the half-open connections' timers,
    /// send their SYN-ACKs, settle. Returns the SYN-ACKs sent, by port.
    fn drive(l: &mut Listener, now: u64) -> Vec<(u16, u32)> {
        let mut out = Vec::new();
        for (_, c) in l.half_open_iter_mut() {
            c.handle_timeout(now);
            let port = c.remote_port();
            c.poll_transmit(now, 4, &mut |r| {
                if r.flags.contains(TcpFlags::SYN | TcpFlags::ACK) {
                    out.push((port, r.seq_number));
                }
            });
        }
        l.settle();
        out
    }

    const MS: u64 = 1_000_000;

    #[test]
    fn syn_flood_is_bounded_and_a_late_client_gets_in() {
        let mut l = Listener::new(Config::default(), 80, 64, 64);
        let mut now = 0;
        // 1000 SYNs from distinct ports, one every 10 ms.
        for i in 0..1000u16 {
            let _ = l.on_syn(PEER, &syn(2000 + i), u32::from(i) * 7919);
            assert!(l.half_open_len() <= 64);
            drive(&mut l, now);
            assert!(l.half_open_len() <= 64);
            now += 10 * MS;
        }
        assert_eq!(l.half_open_len(), 64);
        // Until the first SYN-ACK timer ran out (1 s), SYNs were refused;
        // after that each new SYN pushed out the oldest unanswered one.
        assert!(l.refused_half_open > 0 && l.evicted_half_open > 0);
        assert_eq!(l.refused_half_open + l.evicted_half_open + 64, 1000);
        let (refused, evicted) = (l.refused_half_open, l.evicted_half_open);
        // A legitimate client now: every entry is younger than an RTO, so
        // its SYN is refused; its own SYN retransmission one second later
        // (RFC 6298 §2.1) finds them all stale, gets in, and its handshake
        // completes.
        let client = syn(1000);
        assert_eq!(l.on_syn(PEER, &client, 555), Err(Refusal::HalfOpenFull));
        while now < 10_000 * MS + 1000 * MS {
            drive(&mut l, now);
            now += 10 * MS;
        }
        assert_eq!(l.on_syn(PEER, &client, 555), Ok(()));
        assert_eq!(l.half_open_len(), 64);
        let sent = drive(&mut l, now);
        assert!(sent.contains(&(1000, 555)), "the client's SYN-ACK");
        let mut ack = TcpRepr::new(1000, 80, 1001, TcpFlags::ACK);
        ack.ack_number = 556;
        ack.window = 100;
        l.half_open_mut(PEER, 1000)
            .unwrap()
            .handle_segment(&ack, now, &mut |_| {});
        let (a, c) = l.accept().unwrap();
        assert_eq!(
            (a, c.remote_port(), c.state()),
            (PEER, 1000, State::Established)
        );
        assert_eq!(l.half_open_len(), 63);
        assert_eq!(
            (l.refused_half_open, l.evicted_half_open),
            (refused + 1, evicted + 1)
        );
    }

    #[test]
    fn half_open_connections_expire_after_the_syn_ack_retries() {
        for (retries, lifetime_s) in [(Listener::SYN_ACK_RETRIES, 63), (2, 7)] {
            let mut l = Listener::new(Config::default(), 80, 64, 64);
            l.set_syn_ack_retries(retries);
            for i in 0..10 {
                assert_eq!(l.on_syn(PEER, &syn(3000 + i), 1), Ok(()));
            }
            let mut syn_acks = 0;
            let mut now = 0;
            // Initial RTO 1 s, doubling: gone after 1 + 2 + ... + 2^retries s.
            while now < (lifetime_s - 1) * 1000 * MS {
                syn_acks += drive(&mut l, now).len();
                now += 100 * MS;
            }
            assert_eq!(l.half_open_len(), 10, "alive at {} s", now / (1000 * MS));
            while now <= (lifetime_s + 1) * 1000 * MS {
                syn_acks += drive(&mut l, now).len();
                now += 100 * MS;
            }
            assert_eq!(l.half_open_len(), 0, "retries {retries}");
            // The first SYN-ACK and `retries` retransmissions of it, each.
            assert_eq!(syn_acks, 10 * (1 + retries as usize));
        }
    }

    #[test]
    fn half_open_bound_and_backlog() {
        let mut l = Listener::new(Config::default(), 80, 3, 2);
        assert_eq!(l.on_syn(PEER, &syn(1), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(1), 1), Ok(()), "retransmitted SYN");
        assert_eq!(l.half_open_len(), 1);
        assert_eq!(l.on_syn(PEER, &syn(2), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(3), 1), Err(Refusal::HalfOpenFull));
        assert_eq!(l.refused_half_open, 1);
        for (_, c) in l.half_open_iter_mut() {
            c.poll_transmit(0, 1, &mut |r| {
                assert!(r.flags.contains(TcpFlags::SYN | TcpFlags::ACK))
            });
        }
        let mut ack = TcpRepr::new(1, 80, 1001, TcpFlags::ACK);
        ack.ack_number = 2; // ISN 1 + 1
        ack.window = 100;
        l.half_open_mut(PEER, 1)
            .unwrap()
            .handle_segment(&ack, 0, &mut |_| {});
        let (a, c) = l.accept().unwrap();
        assert_eq!((a, c.state()), (PEER, State::Established));
        assert_eq!(l.on_syn(PEER, &syn(4), 1), Ok(()));
        assert_eq!(l.on_syn(PEER, &syn(5), 1), Err(Refusal::HalfOpenFull));
        assert_eq!(
            l.on_syn(PEER, &TcpRepr::new(6, 80, 0, TcpFlags::ACK), 1),
            Err(Refusal::NotSyn)
        );
    }

    /// A listener with cookies on and its half-open table (2) full.
    fn full_with_cookies() -> Listener {
        let mut l = Listener::new(Config::default(), 80, 8, 2);
        l.enable_syn_cookies([3; 16]);
        assert_eq!(l.on_syn_at(PEER, &syn(1), 1, 0), Ok(None));
        assert_eq!(l.on_syn_at(PEER, &syn(2), 1, 0), Ok(None));
        l
    }

    /// The peer's SYN, with MSS 1400, window shift 7, SACK-permitted and
    /// (if `ts`) timestamps, and the cookie SYN-ACK for it.
    fn cookie_syn_ack_ts(l: &mut Listener, port: u16, now: u64, ts: bool) -> TcpRepr<'static> {
        let mut s = syn(port);
        s.max_seg_size = Some(1400);
        s.window_scale = Some(7);
        s.sack_permitted = true;
        s.timestamp = ts.then_some(TcpTimestamp { tsval: 5, tsecr: 0 });
        l.on_syn_at(PEER, &s, 1, now)
            .unwrap()
            .expect("a cookie SYN-ACK")
    }

    /// The same SYN without timestamps: the MSS-only cookie.
    fn cookie_syn_ack(l: &mut Listener, port: u16, now: u64) -> TcpRepr<'static> {
        cookie_syn_ack_ts(l, port, now, false)
    }

    fn ack_for(sa: &TcpRepr<'_>, payload: &'static [u8]) -> TcpRepr<'static> {
        let mut ack = TcpRepr::new(sa.dst_port, 80, 1001, TcpFlags::ACK | TcpFlags::PSH);
        ack.ack_number = sa.seq_number.wrapping_add(1);
        ack.window = 1000;
        ack.payload = payload;
        ack
    }

    #[test]
    fn syn_cookie_completes_the_handshake_when_half_open_is_full() {
        let mut l = full_with_cookies();
        let sa = cookie_syn_ack(&mut l, 7000, 10 * MS);
        // Stateless: no entry was taken (RFC 4987 §3.6).
        assert_eq!((l.half_open_len(), l.syn_cookies_sent), (2, 1));
        assert_eq!(sa.flags, TcpFlags::SYN | TcpFlags::ACK);
        assert_eq!((sa.src_port, sa.dst_port, sa.ack_number), (80, 7000, 1001));
        // Only the MSS survives, rounded down to the table (1400 -> 1220);
        // the other options are not offered.
        assert_eq!(sa.max_seg_size, Some(Config::default().mss));
        assert_eq!(
            (sa.window_scale, sa.sack_permitted, sa.timestamp),
            (None, false, None)
        );
        // The peer's ACK, with data, some time later.
        let mut got = Vec::new();
        let ack = ack_for(&sa, b"hello");
        assert_eq!(
            l.on_cookie_ack(PEER, &ack, 900 * MS, &mut |d| got.extend_from_slice(d)),
            CookieAck::Accepted
        );
        assert_eq!(got, b"hello");
        let (a, c) = l.accept().unwrap();
        assert_eq!(
            (a, c.remote_port(), c.state(), c.mss()),
            (PEER, 7000, State::Established, 1220)
        );
        assert_eq!((l.syn_cookies_accepted, l.half_open_len()), (1, 2));
    }

    /// The segments `c` sends at `now`, as (seq, ack, window, SACK blocks,
    /// timestamp).
    #[allow(clippy::type_complexity)]
    fn sent_by(
        c: &mut Connection,
        now: u64,
    ) -> Vec<(u32, u32, u16, Vec<(u32, u32)>, Option<TcpTimestamp>)> {
        let mut out = Vec::new();
        c.poll_transmit(now, 8, &mut |r| {
            let blocks = r.sack_ranges.iter().flatten().copied().collect();
            out.push((r.seq_number, r.ack_number, r.window, blocks, r.timestamp));
        });
        out
    }

    #[test]
    fn syn_cookie_keeps_window_scale_and_sack_in_the_timestamp() {
        let mut l = full_with_cookies();
        // 1000 ms: our TSval clock (1 ms ticks) reads 1000 = 0x3e8.
        let sa = cookie_syn_ack_ts(&mut l, 7000, 1000 * MS, true);
        assert_eq!(l.half_open_len(), 2, "stateless");
        // Offered as a half-open connection would (RFC 7323 §2.2, §3.2,
        // RFC 2018 §2)...
        assert_eq!(
            (sa.max_seg_size, sa.window_scale, sa.sack_permitted),
            (Some(1460), Some(7), true)
        );
        // ...and the TSval keeps the peer's shift 7 and SACK-permitted:
        // 0x3e0 | 0x17 = 0x3f7 is ahead of 0x3e8, so one step back: 0x3d7.
        assert_eq!(
            sa.timestamp,
            Some(TcpTimestamp {
                tsval: 0x3d7,
                tsecr: 5
            })
        );
        // The peer's ACK echoes it, with data.
        let mut ack = ack_for(&sa, b"hello");
        ack.timestamp = Some(TcpTimestamp {
            tsval: 9,
            tsecr: 0x3d7,
        });
        let mut got = Vec::new();
        assert_eq!(
            l.on_cookie_ack(PEER, &ack, 1100 * MS, &mut |d| got.extend_from_slice(d)),
            CookieAck::Accepted
        );
        assert_eq!(got, b"hello");
        let (_, mut c) = l.accept().unwrap();
        assert_eq!(c.state(), State::Established);
        // Timestamps on: the 1220 of the MSS table less the option's 12.
        assert_eq!(c.mss(), 1208);
        // Our window is scaled by our shift (7): 1 MiB >> 7.
        let acks = sent_by(&mut c, 1100 * MS);
        let (_, ack_no, wnd, _, ts) = acks.last().unwrap().clone();
        assert_eq!((ack_no, wnd), (1006, ((1 << 20) >> 7) as u16));
        assert_eq!(ts.map(|t| t.tsecr), Some(9));
        // SACK is on: an out-of-order segment draws a SACK block.
        let mut ooo = TcpRepr::new(7000, 80, 1016, TcpFlags::ACK | TcpFlags::PSH);
        ooo.ack_number = ack.ack_number;
        ooo.window = 1000;
        ooo.payload = b"world";
        ooo.timestamp = Some(TcpTimestamp {
            tsval: 10,
            tsecr: 1100,
        });
        c.handle_segment(&ooo, 1101 * MS, &mut |_| panic!("out of order"));
        let dup = sent_by(&mut c, 1101 * MS);
        assert!(
            dup.iter().any(|s| s.1 == 1006 && s.3 == vec![(1016, 1021)]),
            "{dup:?}"
        );
    }

    #[test]
    fn syn_cookie_without_shift_or_sack_says_so_in_the_timestamp() {
        let mut l = full_with_cookies();
        let mut s = syn(7000);
        s.timestamp = Some(TcpTimestamp { tsval: 5, tsecr: 0 });
        let sa = l.on_syn_at(PEER, &s, 1, 1000 * MS).unwrap().unwrap();
        assert_eq!((sa.window_scale, sa.sack_permitted), (None, false));
        // Shift 15 (none), no SACK: 0x3e0 | 0x0f = 0x3ef, ahead: 0x3cf.
        assert_eq!(
            sa.timestamp,
            Some(TcpTimestamp {
                tsval: 0x3cf,
                tsecr: 5
            })
        );
        let mut ack = ack_for(&sa, b"");
        ack.timestamp = Some(TcpTimestamp {
            tsval: 9,
            tsecr: 0x3cf,
        });
        assert_eq!(
            l.on_cookie_ack(PEER, &ack, 1100 * MS, &mut |_| {}),
            CookieAck::Accepted
        );
        let (_, mut c) = l.accept().unwrap();
        // No scaling: the window field is the buffer capped at 65535.
        let mut data = ack_for(&sa, b"x");
        data.timestamp = Some(TcpTimestamp {
            tsval: 10,
            tsecr: 1100,
        });
        c.handle_segment(&data, 1101 * MS, &mut |_| {});
        let acks = sent_by(&mut c, 1101 * MS);
        assert_eq!(acks.last().map(|a| (a.1, a.2)), Some((1002, 65535)));
    }

    #[test]
    fn syn_cookie_without_timestamps_keeps_only_the_mss() {
        let mut l = full_with_cookies();
        let sa = cookie_syn_ack(&mut l, 7000, 1000 * MS);
        assert_eq!(
            (sa.window_scale, sa.sack_permitted, sa.timestamp),
            (None, false, None)
        );
        assert_eq!(
            l.on_cookie_ack(PEER, &ack_for(&sa, b""), 1100 * MS, &mut |_| {}),
            CookieAck::Accepted
        );
        let (_, c) = l.accept().unwrap();
        assert_eq!(c.mss(), 1220);
    }

    #[test]
    fn forged_cookie_ack_creates_nothing() {
        let mut l = full_with_cookies();
        let sa = cookie_syn_ack(&mut l, 7000, 0);
        let never = &mut |_: &[u8]| panic!("delivered");
        // A wrong cookie: one bit off in the hash, or in the MSS index.
        for flip in [1u32 << 20, 1, 2] {
            let mut ack = ack_for(&sa, b"evil");
            ack.ack_number ^= flip;
            assert_eq!(l.on_cookie_ack(PEER, &ack, 0, never), CookieAck::Invalid);
        }
        // The right cookie for another port, address or peer ISN.
        let mut ack = ack_for(&sa, b"evil");
        ack.src_port = 7001;
        assert_eq!(l.on_cookie_ack(PEER, &ack, 0, never), CookieAck::Invalid);
        let ack = ack_for(&sa, b"evil");
        assert_eq!(
            l.on_cookie_ack(Ipv4Address([10, 0, 0, 8]), &ack, 0, never),
            CookieAck::Invalid
        );
        let mut ack = ack_for(&sa, b"evil");
        ack.seq_number = 5001;
        assert_eq!(l.on_cookie_ack(PEER, &ack, 0, never), CookieAck::Invalid);
        // A RST carrying the right cookie creates nothing either.
        let mut ack = ack_for(&sa, b"");
        ack.flags = TcpFlags::RST | TcpFlags::ACK;
        assert_eq!(l.on_cookie_ack(PEER, &ack, 0, never), CookieAck::Invalid);
        assert!(l.accept().is_none());
        assert_eq!((l.syn_cookies_accepted, l.syn_cookies_rejected), (0, 6));
        // Another listener's secret: no cookies at all without one.
        let mut other = Listener::new(Config::default(), 80, 8, 2);
        assert_eq!(
            other.on_cookie_ack(PEER, &ack_for(&sa, b""), 0, never),
            CookieAck::Invalid
        );
        // The genuine ACK still works.
        assert_eq!(
            l.on_cookie_ack(PEER, &ack_for(&sa, b""), 0, never),
            CookieAck::Accepted
        );
    }

    #[test]
    fn old_cookie_is_refused() {
        let mut l = full_with_cookies();
        // Made late in one time step: valid through the next step...
        let made = COOKIE_PERIOD - 1;
        let sa = cookie_syn_ack(&mut l, 7000, made);
        let ok = |l: &mut Listener, at| {
            l.on_cookie_ack(PEER, &ack_for(&sa, b""), at, &mut |_| {}) == CookieAck::Accepted
        };
        assert!(!ok(&mut l, 2 * COOKIE_PERIOD), "two steps later");
        assert!(!ok(&mut l, 100 * COOKIE_PERIOD));
        assert_eq!(l.syn_cookies_rejected, 2);
        assert!(ok(&mut l, 2 * COOKIE_PERIOD - 1), "the next step");
        assert_eq!(l.syn_cookies_accepted, 1);
    }

    #[test]
    fn no_cookie_while_the_accept_queue_is_full() {
        let mut l = Listener::new(Config::default(), 80, 1, 1);
        l.enable_syn_cookies([3; 16]);
        let sa = {
            assert_eq!(l.on_syn_at(PEER, &syn(1), 1, 0), Ok(None));
            cookie_syn_ack(&mut l, 7000, 0)
        };
        // Complete the half-open one: the accept queue (1) is full.
        for (_, c) in l.half_open_iter_mut() {
            c.poll_transmit(0, 1, &mut |_| {});
        }
        let mut ack = TcpRepr::new(1, 80, 1001, TcpFlags::ACK);
        ack.ack_number = 2;
        ack.window = 100;
        l.half_open_mut(PEER, 1)
            .unwrap()
            .handle_segment(&ack, 0, &mut |_| {});
        l.settle();
        assert_eq!(l.on_syn_at(PEER, &syn(3), 1, 0), Err(Refusal::BacklogFull));
        assert_eq!(
            l.on_cookie_ack(PEER, &ack_for(&sa, b""), 0, &mut |_| {}),
            CookieAck::Overflow
        );
        assert_eq!(l.syn_cookies_sent, 1);
        assert_eq!(l.ready_len(), 1, "nothing made");
        // The owner takes the waiting connection: the same ACK,
        // retransmitted, finds room and makes its connection.
        assert_eq!(l.accept().map(|(_, c)| c.remote_port()), Some(1));
        assert_eq!(
            l.on_cookie_ack(PEER, &ack_for(&sa, b""), 0, &mut |_| {}),
            CookieAck::Accepted
        );
        assert_eq!(l.accept().map(|(_, c)| c.remote_port()), Some(7000));
    }

    /// Connections the owner took but still counts fill the backlog as
    /// the accept queue does: no SYN, no cookie, and `accept_queue_full`
    /// tells the owner to drop handshake-completing ACKs.
    #[test]
    fn unaccepted_connections_count_against_the_backlog() {
        let mut l = Listener::new(Config::default(), 80, 2, 8);
        l.enable_syn_cookies([3; 16]);
        assert_eq!(l.on_syn_at(PEER, &syn(1), 1, 0), Ok(None));
        l.set_unaccepted(1);
        assert!(!l.accept_queue_full());
        // Half-open (1) + unaccepted (1) fill a backlog of 2; the accept
        // queue still has room, so a cookie answers.
        assert!(matches!(l.on_syn_at(PEER, &syn(2), 1, 0), Ok(Some(_))));
        l.set_unaccepted(2);
        assert!(l.accept_queue_full());
        assert_eq!(l.on_syn_at(PEER, &syn(3), 1, 0), Err(Refusal::BacklogFull));
        assert_eq!(l.syn_cookies_sent, 1, "no cookie with the queue full");
        l.set_unaccepted(0);
        assert!(!l.accept_queue_full());
        assert_eq!(l.on_syn_at(PEER, &syn(3), 1, 0), Ok(None));
    }

    /// A capped listener's connections offer the cap from the SYN-ACK on
    /// and hold no out-of-order octet beyond it; lifting the cap opens the
    /// window with an update.
    #[test]
    fn capped_connections_offer_and_hold_at_most_the_cap() {
        let mut l = Listener::new(Config::default(), 80, 4, 4);
        l.set_rcv_cap(Some(8192));
        let mut s = syn(1);
        s.window_scale = Some(7);
        assert_eq!(l.on_syn(PEER, &s, 1), Ok(()));
        let mut windows = Vec::new();
        for (_, c) in l.half_open_iter_mut() {
            c.poll_transmit(0, 1, &mut |r| windows.push(r.window));
        }
        assert_eq!(windows, [8192]);
        let mut ack = TcpRepr::new(1, 80, 1001, TcpFlags::ACK);
        ack.ack_number = 2;
        ack.window = 100;
        l.half_open_mut(PEER, 1)
            .unwrap()
            .handle_segment(&ack, 0, &mut |_| {});
        let (_, mut c) = l.accept().unwrap();
        static DATA: [u8; 1000] = [7; 1000];
        // Out of order: inside the cap it is held, beyond it dropped (as
        // outside the window, RFC 9293 §3.10.7.4).
        for (seq, held) in [(1001 + 4000, true), (1001 + 8192, false)] {
            let before = c.stats();
            let mut d = TcpRepr::new(1, 80, seq, TcpFlags::ACK);
            d.ack_number = 2;
            d.window = 100;
            d.payload = &DATA;
            c.handle_segment(&d, MS, &mut |_| panic!("out of order"));
            assert_eq!(
                c.stats().ooo_segments - before.ooo_segments,
                u64::from(held)
            );
        }
        let mut wnd = Vec::new();
        c.poll_transmit(MS, 8, &mut |r| wnd.push(u32::from(r.window) << 7));
        assert!(wnd.iter().all(|&w| w <= 8192), "{wnd:?}");
        c.set_rcv_cap(None);
        wnd.clear();
        c.poll_transmit(2 * MS, 8, &mut |r| wnd.push(u32::from(r.window) << 7));
        assert!(
            wnd.last().is_some_and(|&w| w > 512 << 10),
            "a window update: {wnd:?}"
        );
    }
}
