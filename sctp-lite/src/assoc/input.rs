//! A received packet: checked (checksum, ports, verification tags
//! RFC 9260 §8.5.1, INIT never bundled §6.10), its chunks handed to their
//! handlers in order, unknown ones by their upper two bits (§3.2), and the
//! SACK its DATA calls for (§6.2).

use super::*;

impl Association {
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
        let Some(h) = parse_into(bytes, &mut chunks, self.cfg.trusted_link) else {
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
