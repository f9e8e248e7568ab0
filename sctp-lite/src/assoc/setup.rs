//! Setup (RFC 9260 §5): the State Cookie (MAC'd, bound to addresses,
//! checked for age), the tags and initial TSNs derived from the secret,
//! the INIT-ACK, and what an association does with INIT, INIT-ACK and
//! COOKIE-ECHO, collisions included (§5.2).

use super::*;

/// What the peer told us in its INIT / INIT-ACK, and what we agreed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Cookie {
    pub(super) created: u64,
    pub(super) local_tag: u32,
    pub(super) peer_tag: u32,
    pub(super) local_tsn: u32,
    pub(super) peer_tsn: u32,
    pub(super) peer_rwnd: u32,
    pub(super) out_streams: u16,
    pub(super) in_streams: u16,
    pub(super) local_port: u16,
    pub(super) peer_port: u16,
    pub(super) peer_adaptation: Option<u32>,
    /// Tie-Tags (RFC 9260 §5.2.2): nonces standing for an existing
    /// association's tags, never the tags themselves; 0 when none.
    pub(super) local_tie_tag: u32,
    pub(super) peer_tie_tag: u32,
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

    pub(super) fn encode(&self, key: &Key, addrs: Addrs<'_>) -> [u8; COOKIE_LEN] {
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
    pub(super) fn decode(
        b: &[u8],
        key: &Key,
        addrs: Addrs<'_>,
        now: u64,
        lifetime: u64,
    ) -> Option<Cookie> {
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

pub(super) fn tag_key(secret: &Key) -> Key {
    mac::derive(secret, b"sctp-lite tags and TSNs")
}

pub(super) fn random_pair(key: &Key, now: u64, nonce: u64, ports: (u16, u16)) -> (u32, u32) {
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

#[allow(clippy::too_many_arguments)]
pub(super) fn build_init_ack(
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

pub(super) fn adaptation_cause(got: Option<u32>) -> ([u8; 16], usize) {
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

impl Association {
    pub(super) fn from_cookie(cfg: Config, c: &Cookie, now: u64) -> Self {
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

    pub(super) fn on_init(&mut self, now: u64, h: &HeaderRepr, init: &InitRepr<'_>) {
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

    pub(super) fn on_init_ack(&mut self, now: u64, i: &InitRepr<'_>) {
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

    pub(super) fn on_cookie_echo(&mut self, now: u64, vt: u32, cookie: &[u8]) {
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
}
