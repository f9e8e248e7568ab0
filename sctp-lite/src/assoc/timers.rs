//! The timers in their fixed array (RFC 9260 §5.1.6 T1-init/T1-cookie,
//! §9.2 T2-shutdown, §6.3 T3-rtx, §6.2 delayed SACK, §8.3 heartbeat), what
//! each expiry does, the error count that ends an association (§8.1), and
//! the HEARTBEAT-ACK that answers a heartbeat.

use super::*;

impl Association {
    pub(super) fn set_timer(&mut self, t: Timer, at: u64) {
        self.timers[t as usize] = Some(at);
    }
    pub(super) fn stop_timer(&mut self, t: Timer) {
        self.timers[t as usize] = None;
    }
    pub(super) fn arm_heartbeat(&mut self, now: u64) {
        if self.cfg.heartbeat_interval > 0 {
            self.set_timer(
                Timer::Heartbeat,
                now.saturating_add(self.cfg.heartbeat_interval)
                    .saturating_add(self.rto),
            );
        }
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

    pub(super) fn on_heartbeat_ack(&mut self, now: u64, info: &[u8]) {
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
}
