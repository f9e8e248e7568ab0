//! What an arriving SACK does to the sender (RFC 9260 §6.2.1): chunks
//! acknowledged leave the queue, gap blocks mark and unmark, miss
//! indications lead to fast retransmit and fast recovery (§7.2.4), cwnd
//! grows in slow start or congestion avoidance (§7.2.1, §7.2.2), T3
//! restarts or stops (§6.3.2); and the RTO from RTT samples (§6.3.1).

use super::*;

impl Association {
    pub(super) fn on_sack(&mut self, now: u64, cum: u32, sack: Option<&SackRepr<'_>>) {
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

    pub(super) fn rtt_sample(&mut self, r: u64) {
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
}
