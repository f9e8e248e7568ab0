//! What an arriving ACK does on the sending side: the send window, RTT
//! samples, snd.una's advance and the congestion response to it, with
//! NewReno or SACK, and D-SACK undo.

use super::*;

impl Connection {
    /// SND.WND, and MAX.SND.WND with it (RFC 5961 §5.2).
    pub(super) fn set_snd_wnd(&mut self, w: u32) {
        self.snd_wnd = w;
        self.max_snd_wnd = self.max_snd_wnd.max(w);
    }

    /// The timed segment (Karn: never a retransmitted one) is
    /// acknowledged: its RTT in nanoseconds. It also feeds the fine RTT
    /// estimates RACK and TLP run on (RFC 8985 §6.2, §7.2): timestamps
    /// tick in milliseconds, coarser than a LAN's RTT.
    pub(super) fn sample_rtt_probe(&mut self, ack: u32, now: u64) -> Option<u64> {
        let (seq, t) = self.rtt_probe?;
        if !lt(seq, ack) {
            return None;
        }
        self.rtt_probe = None;
        let r = now.saturating_sub(t).max(1);
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        self.fine_srtt = Some(self.fine_srtt.map_or(r, |s| (7 * s + r) / 8));
        Some(r)
    }

    /// RFC 6298 §2.2-2.3.
    pub(super) fn rtt_sample(&mut self, r: u64) {
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let d = s.abs_diff(r);
                self.rttvar = (3 * self.rttvar + d) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = (s + (4 * self.rttvar).max(1_000_000)).clamp(self.cfg.rto_min, self.cfg.rto_max);
    }

    pub(super) fn flight(&self) -> usize {
        self.snd_nxt.wrapping_sub(self.snd_una) as usize
    }

    pub(super) fn process_ack(&mut self, seg: &TcpRepr<'_>, now: u64) {
        let ack = seg.ack_number;
        let sacked_before = self.sacked.total() as usize;
        let mut dsack = None;
        if self.sack_on {
            // SND.UNA as this ACK leaves it (it is acceptable: at most SND.MAX).
            let una = if lt(self.snd_una, ack) {
                ack
            } else {
                self.snd_una
            };
            self.sacked.advance(una);
            // RFC 2883 §4: a D-SACK block is the first one, and lies below
            // the cumulative ACK or inside the second block.
            if let Some((l, r)) = seg.sack_ranges[0] {
                let in_second = seg.sack_ranges[1].is_some_and(|(l2, r2)| le(l2, l) && le(r, r2));
                // Only blocks inside what we could have sent twice: at most
                // SND.MAX, at least SND.UNA - MAX.SND.WND (RFC 5961 §5.2's
                // bound on old ACKs).
                let oldest = self.snd_una.wrapping_sub(self.max_snd_wnd);
                if lt(l, r) && (le(r, ack) || in_second) && le(r, self.snd_max) && le(oldest, l) {
                    dsack = Some((l, r));
                }
            }
            for (i, block) in seg.sack_ranges.iter().enumerate() {
                let Some((l, r)) = *block else { continue };
                if i == 0 && dsack.is_some() {
                    continue;
                }
                // RFC 2018 §3: only blocks above the cumulative ACK and at
                // most SND.MAX mean anything; the scoreboard drops the rest.
                self.sacked
                    .add(una, self.snd_max, l, r, self.cfg.max_sack_ranges);
            }
        }
        if lt(ack, self.snd_una) {
            // RFC 9293 §3.10.7.4: an old ACK (SEG.ACK < SND.UNA) is ignored,
            // window included; the segment's text is still processed.
            return;
        }
        if let Some((l, r)) = dsack {
            self.on_dsack(l, r);
        }
        // The peer answers: the probes so far were not lost (Linux resets
        // icsk_probes_out on every ACK).
        self.persist_probes = 0;
        let new_wnd = u32::from(seg.window) << self.snd_shift;
        let advanced = lt(self.snd_una, ack);
        let acked = ack.wrapping_sub(self.snd_una) as usize;
        if advanced {
            // New data acknowledged.
            let data_acked = ack
                .wrapping_sub(self.buf_seq)
                .min(self.snd_buf.len() as u32) as usize;
            if lt(self.buf_seq, ack) {
                self.snd_buf.consume(data_acked);
                self.buf_seq = self.buf_seq.wrapping_add(data_acked as u32);
            }
            self.snd_una = ack;
            if lt(self.snd_nxt, ack) {
                self.snd_nxt = ack;
            }
            for p in [&mut self.lost_end, &mut self.high_rxt] {
                if lt(*p, ack) {
                    *p = ack;
                }
            }
            // Eifel detection (RFC 3522 §3.2): the first ACK after a
            // timeout echoes a timestamp older than the retransmission, so
            // it acknowledges the original: the timeout was spurious (a
            // stalled peer or a descheduled loop, not loss). Undo its
            // window reduction (RFC 4015 §4) and go on with new data.
            if let Some(rto_ts) = self.rto_undo.take() {
                if let (true, Some(ts)) = (self.ts_on, seg.timestamp) {
                    if (ts.tsecr.wrapping_sub(rto_ts) as i32) < 0 {
                        self.cc.undo();
                        self.snd_nxt = self.snd_max;
                        // Nothing was lost: stop resending.
                        self.lost_end = self.snd_una;
                        self.high_rxt = self.snd_una;
                        self.rxt_mark = None;
                        self.rescue_sent = None;
                        // And the timeout's episode is over: its
                        // RecoveryPoint (RFC 6675 §5.1: no new recovery
                        // until it is acknowledged) goes with it, as if the
                        // timeout had not fired (RFC 4015's response goes
                        // on with new data as before it; Linux's undo
                        // returns to the Open state). A loss that SACK
                        // finds next below the old SND.MAX then starts a
                        // recovery (RFC 6675 §5 step 4); with the old
                        // RecoveryPoint kept, it waited for the next RTO
                        // once cwnd was full (issue 12's audit).
                        self.recover = self.snd_una;
                        self.stats.spurious_rto_undone += 1;
                    }
                }
            }
            self.sacked.advance(ack);
            self.retries = 0;
            self.tlp_out = false;
            let fine = self.sample_rtt_probe(ack, now);
            if let (true, Some(ts)) = (self.ts_on, seg.timestamp) {
                // RFC 7323 §4.1: RTT = now - TSecr; an echo from our future
                // is forged or stale (wrapped) and would only inflate the RTO.
                let ts_now = self.ts_now(now);
                if le(ts.tsecr, ts_now) {
                    let r = u64::from(ts_now.wrapping_sub(ts.tsecr)) * 1_000_000;
                    self.rtt_sample(r.max(1));
                }
            } else if let Some(r) = fine {
                self.rtt_sample(r);
            }
            // RFC 8985 §7.4: the ACK of a retransmitted tail probe. If the
            // probe repaired a loss, the window comes down as for one. A
            // D-SACK says it did not; with timestamps, an ACK echoing an
            // original transmission (older than the probe) says so too
            // (the D-SACK for the probe comes after it); without them, or
            // when the clock did not tick in between, assume a loss.
            if let Some(h) = self.tlp_high {
                if le(h, ack) {
                    self.tlp_high = None;
                    let for_original = match (self.tlp_ts, seg.timestamp) {
                        (Some(p), Some(ts)) if self.ts_on => lt(ts.tsecr, p),
                        _ => false,
                    };
                    if !self.tlp_dsacked && !for_original && !self.in_recovery {
                        let flight = self.flight();
                        self.cc.on_loss(flight, self.snd_mss, now);
                        let ss = self.cc.ssthresh();
                        self.cc.set_cwnd(ss);
                    }
                }
            }
            self.dupacks = 0;
        } else if ack == self.snd_una
            && seg.payload.is_empty()
            && !seg.flags.contains(Flags::FIN)
            && new_wnd == self.snd_wnd
            && self.snd_una != self.snd_max
        {
            // Duplicate ACK (RFC 5681 §2).
            // The peer decides how many duplicate ACKs come: saturate.
            self.dupacks = self.dupacks.saturating_add(1);
        }
        if self.sack_on {
            // RFC 6937 §3: DeliveredData = change in SND.UNA plus change
            // in SACKed octets.
            let sacked_after = self.sacked.total() as usize;
            let delivered = (acked + sacked_after).saturating_sub(sacked_before);
            self.sack_ack(advanced, acked, delivered, now);
        } else {
            self.newreno_ack(advanced, acked, now);
        }
        if advanced {
            // RFC 6298 §5.2/5.3: restart or stop the timer.
            self.t_rtx = if self.snd_una == self.snd_max {
                None
            } else {
                Some(now + self.rto)
            };
            self.arm_tlp(now);
            match self.state {
                State::FinWait1 if self.fin_acked() => self.state = State::FinWait2,
                State::Closing if self.fin_acked() => self.state = self.enter_time_wait(now),
                State::LastAck if self.fin_acked() => {
                    self.enter_closed();
                    return;
                }
                _ => {}
            }
        }
        // Window update (RFC 9293 §3.10.7.4).
        if lt(self.snd_wl1, seg.seq_number)
            || (self.snd_wl1 == seg.seq_number && le(self.snd_wl2, ack))
        {
            self.set_snd_wnd(new_wnd);
            self.snd_wl1 = seg.seq_number;
            self.snd_wl2 = ack;
            if self.snd_wnd > 0 {
                self.t_persist = None;
                self.zero_wnd_since = None;
            }
        }
    }

    /// Without SACK: RFC 5681 fast retransmit and RFC 6582 NewReno.
    fn newreno_ack(&mut self, advanced: bool, acked: usize, now: u64) {
        let mss = self.snd_mss;
        if advanced {
            if self.in_recovery {
                if le(self.recover, self.snd_una) {
                    // RFC 6582 §3.2 step 3: full acknowledgment.
                    self.in_recovery = false;
                    let w = self.cc.ssthresh().min(self.flight() + mss).max(mss);
                    self.cc.set_cwnd(w);
                    self.cwv_recovery_end();
                } else {
                    // Partial ACK: retransmit the next hole, deflate.
                    self.snd_nxt = self.snd_una;
                    self.stats.fast_retransmits += 1;
                    let w = self.cc.cwnd().saturating_sub(acked).saturating_add(mss);
                    self.cc.set_cwnd(w);
                }
            } else {
                self.grow(acked, now);
            }
        } else if self.dupacks == DUP_THRESH
            && !self.in_recovery
            && lt(self.recover, self.snd_una.wrapping_add(1))
        {
            let flight = self.flight();
            self.cwv_on_loss(flight, now);
            self.cc.on_loss(flight, mss, now);
            let w = self.cc.ssthresh().saturating_add(3 * mss);
            self.cc.set_cwnd(w);
            self.recover = self.snd_max;
            self.in_recovery = true;
            self.stats.fast_retransmits += 1;
            self.snd_nxt = self.snd_una; // resend from the hole
        } else if self.in_recovery && self.dupacks > DUP_THRESH {
            // RFC 5681 §3.2 step 4: inflate by one segment per duplicate ACK.
            let w = self.cc.cwnd().saturating_add(mss);
            self.cc.set_cwnd(w);
        }
    }

    /// With SACK: RFC 6675 loss recovery paced by RFC 6937 PRR.
    fn sack_ack(&mut self, advanced: bool, acked: usize, delivered: usize, now: u64) {
        if self.in_recovery && le(self.recover, self.snd_una) {
            // RFC 6675 §5: a cumulative ACK of RecoveryPoint ends recovery;
            // RFC 6937 §3.1: cwnd = ssthresh on exit.
            self.in_recovery = false;
            let ss = self.cc.ssthresh();
            self.cc.set_cwnd(ss);
            self.cwv_recovery_end();
            // RFC 8985 §6.2.4: the widened reordering window lasts 16
            // recoveries.
            self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
            if self.reo_wnd_persist == 0 {
                self.reo_wnd_mult = 1;
            }
            // Retransmissions still unacknowledged keep their mark: one
            // lost now is found as in recovery.
        } else if self.in_recovery {
            self.prr_update(delivered);
        } else if advanced {
            // Open, or after a timeout retransmitting what was deemed lost
            // (slow start, RFC 5681 §3.1).
            self.grow(acked, now);
        }
        self.detect_losses(now);
        // RFC 6675 §5 step 4 / §5.1: start recovery once a loss is known,
        // but not again until RecoveryPoint is acknowledged.
        if !self.in_recovery && lt(self.snd_una, self.lost_end) && le(self.recover, self.snd_una) {
            self.enter_recovery(delivered, now);
        }
    }

    /// A D-SACK block `[l, r)` (RFC 2883): data we sent twice arrived twice.
    fn on_dsack(&mut self, l: u32, r: u32) {
        self.stats.dsacks_received = self.stats.dsacks_received.saturating_add(1);
        let len = u64::from(r.wrapping_sub(l));
        if self.tlp_high == Some(r) {
            self.tlp_dsacked = true;
        }
        // RFC 8985 §6.2.4: reordering seen: widen the reordering window,
        // for the next 16 recoveries.
        self.reo_wnd_mult = self.reo_wnd_mult.saturating_add(1).min(16);
        self.reo_wnd_persist = 16;
        if self.undo_armed && self.episode_rxt > 0 {
            self.episode_dsacked = self.episode_dsacked.saturating_add(len);
            // RFC 3708 §3 (the D-SACK response of RFC 2883 §5): every
            // octet retransmitted in the episode came back as a
            // duplicate: nothing was lost, the reduction is undone.
            if self.episode_dsacked >= self.episode_rxt {
                self.undo_armed = false;
                if self.cc.undo() {
                    self.stats.dsack_undos += 1;
                }
                self.nvp_loss = None;
                if self.in_recovery {
                    self.in_recovery = false;
                    self.lost_end = self.snd_una;
                    self.high_rxt = self.snd_una;
                    self.rxt_mark = None;
                    self.rescue_sent = None;
                }
            }
        }
    }
}
