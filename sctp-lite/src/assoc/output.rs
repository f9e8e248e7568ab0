//! The transmit path: the next packet, control chunks first in their
//! bundling order (RFC 9260 §6.10), then a SACK, then DATA:
//! retransmissions first (§6.3.3 E3, §7.2.4), new chunks within cwnd and
//! the peer's window (§6.1).

use super::*;

impl Association {
    fn header(&self) -> HeaderRepr {
        HeaderRepr {
            src_port: self.local_port,
            dst_port: self.peer_port,
            verification_tag: self.peer_tag,
        }
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
        if self.cfg.trusted_link {
            // The link offloads it, as Linux leaves it for a veth (§6.8's
            // CRC32c over a zero field, not computed).
            p.set_checksum(0);
        } else {
            p.fill_checksum();
        }
        Some(at)
    }

    /// Whether DATA may be sent in this state (§6.1: once established, and
    /// while a shutdown waits for what is queued, §9.2).
    fn data_ok(&self) -> bool {
        matches!(
            self.state,
            State::Established | State::ShutdownPending | State::ShutdownReceived
        )
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
