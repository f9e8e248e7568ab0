//! Loss recovery: RFC 6675 SACK-based recovery (pipe, NextSeg, rescue
//! retransmission) paced by RFC 6937 PRR, RFC 3042 limited transmit and
//! RFC 8985 RACK loss marking and tail loss probes.

use super::*;

impl Connection {
    /// Mark losses: RFC 6675 §5 step 4 (DupThresh duplicate ACKs) and §4
    /// IsLost, lost retransmissions (RFC 8985 §6.2), and arm the RACK
    /// reordering timer for holes the rules cannot decide yet.
    pub(super) fn detect_losses(&mut self, now: u64) {
        let una = self.snd_una;
        let seg = self.mss() as u32;
        let raise = |p: &mut u32, to: u32| {
            if lt(*p, to) {
                *p = to;
            }
        };
        if self.dupacks >= DUP_THRESH {
            // RFC 6675 §5 step 4: DupThresh duplicate ACKs: the first
            // unacknowledged segment is lost.
            let first = una.wrapping_add(seg);
            let end = if lt(self.snd_max, first) {
                self.snd_max
            } else {
                first
            };
            raise(&mut self.lost_end, end);
        }
        // RFC 6675 §4 IsLost: more than (DupThresh - 1) * SMSS octets, or
        // DupThresh discontiguous ranges, SACKed above.
        if let Some(f) = self
            .sacked
            .lost_frontier((DUP_THRESH - 1) * seg, DUP_THRESH as usize)
        {
            raise(&mut self.lost_end, f);
        }
        // A retransmission is lost when data sent after it (above the
        // round's SND.MAX) is SACKed by the same rule while the first
        // retransmitted octet is still missing (RFC 8985 §6.2; RFC 6675
        // would leave it to the RTO).
        if self.rxt_mark.is_some() {
            if !lt(una, self.high_rxt) {
                self.rxt_mark = None;
                self.rescue_sent = None;
            } else if self.sent_after_rxt_sacked() > (DUP_THRESH - 1) * seg {
                self.high_rxt = una;
                self.rxt_mark = None;
                self.rescue_sent = None;
                self.stats.lost_retransmits += 1;
            }
        }
        // RFC 8985 §6.2: holes below SACKed data that the rules above do
        // not yet call lost are lost once the reordering window passes.
        let undecided = self
            .sacked
            .highest()
            .is_some_and(|(l, _)| lt(self.lost_end, l));
        let rxt_undecided = lt(una, self.high_rxt) && self.sent_after_rxt_sacked() > 0;
        if undecided || rxt_undecided {
            if self.t_rack.is_none() {
                self.t_rack = Some(now + self.reo_wnd());
            }
        } else {
            self.t_rack = None;
        }
    }

    /// Octets SACKed that were sent after the first retransmission of the
    /// current round: new data above the round's SND.MAX, and octets
    /// retransmitted after the first one (between its end and HighRxt).
    /// Retransmissions go in sequence order, so this is RACK's "sent
    /// later" (RFC 8985 §6.2) without a timestamp per segment.
    fn sent_after_rxt_sacked(&self) -> u32 {
        let Some((max, first_end)) = self.rxt_mark else {
            return 0;
        };
        let una = self.snd_una;
        let later_new = self.sacked.sacked_in(una, max, self.snd_max);
        let from = if lt(first_end, una) { una } else { first_end };
        let later_rxt = if lt(from, self.high_rxt) && le(self.high_rxt, max) {
            self.sacked.sacked_in(una, from, self.high_rxt)
        } else {
            0
        };
        // The rescue, where it lies outside both (between HighRxt and the
        // round's SND.MAX): RACK's "sent later" by time, which sequence
        // order alone misses (issue 12's audit: 10% loss, seed 476).
        let rescue = match self.rescue_sent {
            Some((l, r)) => {
                let l = if lt(l, self.high_rxt) {
                    self.high_rxt
                } else {
                    l
                };
                let r = if lt(max, r) { max } else { r };
                if lt(l, r) && lt(una, r) {
                    self.sacked.sacked_in(una, l, r)
                } else {
                    0
                }
            }
            None => 0,
        };
        later_new.saturating_add(later_rxt).saturating_add(rescue)
    }

    /// RFC 8985 §6.2.1: min_RTT / 4 times the D-SACK multiplier, at most
    /// SRTT, and not below the timer granularity.
    fn reo_wnd(&self) -> u64 {
        let base = self.min_rtt.unwrap_or(0) / 4 * u64::from(self.reo_wnd_mult);
        base.min(self.fine_srtt.or(self.srtt).unwrap_or(u64::MAX))
            .max(TIMER_GRANULARITY)
    }

    /// The RACK timer expired: every unSACKed octet below the highest SACK
    /// was sent before data that arrived a reordering window ago: lost.
    pub(super) fn rack_timeout(&mut self, now: u64) {
        self.t_rack = None;
        if !self.sack_on || !self.established_data_state() {
            return;
        }
        let una = self.snd_una;
        let mut marked = false;
        if let Some((l, _)) = self.sacked.highest() {
            if lt(self.lost_end, l) {
                self.lost_end = l;
                marked = true;
            }
        }
        if self.rxt_mark.is_some() && lt(una, self.high_rxt) && self.sent_after_rxt_sacked() > 0 {
            self.high_rxt = una;
            self.rxt_mark = None;
            self.rescue_sent = None;
            self.stats.lost_retransmits += 1;
            marked = true;
        }
        if marked {
            self.stats.rack_losses += 1;
            if !self.in_recovery && lt(una, self.lost_end) && le(self.recover, una) {
                self.enter_recovery(0, now);
            } else if self.in_recovery {
                // Let PRR send what the marking freed (at least one segment,
                // as on entry, RFC 6675 §5 step 4.3).
                self.prr_allow = self.prr_allow.max(self.snd_mss);
            }
        }
    }

    /// RFC 6675 §5 step 4 with RFC 6937 §3.1's initialization.
    pub(super) fn enter_recovery(&mut self, delivered: usize, now: u64) {
        self.in_recovery = true;
        self.stats.sack_recoveries += 1;
        // Step 4.1: RecoveryPoint = HighData.
        self.recover = self.snd_max;
        let flight = self.flight();
        self.cwv_on_loss(flight, now);
        // Step 4.2: ssthresh from FlightSize (RFC 5681 eq. 4), or CUBIC's beta.
        self.cc.on_loss(flight, self.snd_mss, now);
        self.prr_delivered = 0;
        self.prr_out = 0;
        self.recover_fs = flight;
        self.episode_rxt = 0;
        self.episode_lost = 0;
        self.episode_dsacked = 0;
        self.undo_armed = true;
        self.tlp_high = None;
        self.tlp_out = false;
        self.t_tlp = None;
        self.prr_update(delivered);
        // Step 4.3: the first lost segment goes out now, whatever the window.
        self.prr_allow = self.prr_allow.max(self.snd_mss);
    }

    /// RFC 6937 §3.1, on every ACK in recovery.
    pub(super) fn prr_update(&mut self, delivered: usize) {
        self.prr_delivered = self.prr_delivered.saturating_add(delivered);
        let pipe = self.pipe();
        let ssthresh = self.cc.ssthresh();
        let sndcnt = if pipe > ssthresh {
            // Proportional rate reduction.
            let num = (self.prr_delivered as u128) * (ssthresh as u128);
            let fs = self.recover_fs.max(1) as u128;
            let target = num.div_ceil(fs).min(usize::MAX as u128) as usize;
            target.saturating_sub(self.prr_out)
        } else {
            // PRR-SSRB: slow start back to ssthresh.
            let limit = self
                .prr_delivered
                .saturating_sub(self.prr_out)
                .max(delivered)
                .saturating_add(self.snd_mss);
            (ssthresh - pipe).min(limit)
        };
        self.prr_allow = sndcnt;
        self.cc.set_cwnd(pipe.saturating_add(sndcnt));
    }

    /// RFC 6675 §4 SetPipe: octets outstanding, less those SACKed and those
    /// deemed lost and not yet retransmitted (a retransmitted lost octet
    /// counts once, for its retransmission).
    pub(super) fn pipe(&self) -> usize {
        let out = self.snd_max.wrapping_sub(self.snd_una);
        let out = out.saturating_sub(self.sacked.total());
        out.saturating_sub(self.lost_unsent()) as usize
    }

    /// Octets deemed lost, not SACKed and not yet retransmitted: those in
    /// [max(HighRxt, SND.UNA), `lost_end`) that the scoreboard lacks.
    fn lost_unsent(&self) -> u32 {
        let una = self.snd_una;
        let from = if lt(self.high_rxt, una) {
            una
        } else {
            self.high_rxt
        };
        if lt(from, self.lost_end) {
            let span = self.lost_end.wrapping_sub(from);
            span - self.sacked.sacked_in(una, from, self.lost_end).min(span)
        } else {
            0
        }
    }

    /// RFC 8985 §7.2: arm the probe timeout when data is outstanding, no
    /// loss is known and no probe is outstanding.
    ///
    /// In recovery too, once every octet deemed lost has been resent
    /// (RFC 8985 §7.2 arms it only outside recovery; our extension). A
    /// recovery whose last ACK is lost otherwise waits for the RTO: after
    /// the hole-filling retransmission, with PRR allowing nothing more, the
    /// receiver's one cumulative ACK is all that can come back (Linux sends
    /// the SACKs of later segments compressed, so that ACK carries them
    /// too). At 2% loss both ways that ended about 2% of recoveries with a
    /// 5 ms RTO (bench/README.md, "Loss recovery"). A probe elicits an ACK
    /// that ends the recovery; it is not a loss signal, so its ACK changes
    /// no window (the §7.4 response runs outside recovery only).
    pub(super) fn arm_tlp(&mut self, now: u64) {
        self.t_tlp = None;
        if !self.sack_on
            || self.tlp_high.is_some()
            || self.tlp_out
            || self.snd_una == self.snd_max
            || self.snd_wnd == 0
            || !self.established_data_state()
        {
            return;
        }
        if self.in_recovery {
            if self.lost_unsent() > 0 {
                return;
            }
        } else if lt(self.snd_una, self.lost_end) {
            return;
        }
        let Some(srtt) = self.fine_srtt.or(self.srtt) else {
            return;
        };
        // RFC 8985 §7.2: 2 SRTT, plus the worst-case delayed ACK with one
        // segment out; else plus a slack for ACKs the receiver's own timing
        // spreads. Linux adds TCP_TIMEOUT_MIN (2 ms, two jiffies) the same
        // way, and so did we until 2026-11-26: with a LAN's SRTT of tens
        // of microseconds that is a hundred RTTs, and at 2-5% loss, where
        // the window is a few segments and a lost ACK leaves nothing in
        // flight to clock the sender, a Linux receiver's capture showed
        // our sender waiting out the 2 ms for 43% of a 5% transfer. With
        // 200 µs: +10% at 1%, +22% at 2%, +60% at 5% (bench/README.md,
        // "The probe timeout"), no more probes at 0%. The probe storm
        // the 2 ms once stopped (each early probe's ACK cut the window) is
        // handled where it arose: an ACK for the original is no loss.
        let mut pto = 2 * srtt;
        pto = pto.saturating_add(if self.flight() <= self.mss() {
            WC_DEL_ACK
        } else {
            PTO_SLACK
        });
        // RFC 8985 §7.2: never later than the RTO would fire; a probe due
        // then goes instead of the timeout (which is re-armed after it).
        let t = now.saturating_add(pto);
        self.t_tlp = Some(match self.t_rtx {
            Some(r) if r <= t => r,
            _ => t,
        });
    }

    /// RFC 6675 §4 NextSeg rule 4, the rescue retransmission: in recovery,
    /// when nothing is deemed lost (rule 1), no new data can go (rule 2)
    /// and no rule 3 candidate is kept, one segment of up to SMSS octets
    /// holding the highest outstanding unSACKed octet goes, once per
    /// recovery episode (while HighACK > RescueRxt or RescueRxt is
    /// undefined), and within PRR's allowance (RFC 6675 §5 (C)). RescueRxt
    /// becomes RecoveryPoint; HighRxt MUST NOT be updated (§4 rule 4).
    /// It repairs a lost tail without waiting for the RTO. Returns the
    /// segments sent (0 or 1).
    pub(super) fn send_rescue(&mut self, now: u64, emit: Emit<'_>) -> usize {
        let una = self.snd_una;
        if self.rescue_rxt.is_some_and(|r| !lt(r, una)) {
            return 0;
        }
        // Rule 2 would send new data the window allows: not our turn.
        if lt(self.snd_nxt, self.snd_max) || lt(self.snd_max, self.data_end()) {
            return 0;
        }
        // The highest unSACKed data octet below SND.MAX (a FIN is left to
        // the RTO; its octet carries no data).
        let mut top = self.data_end();
        if lt(self.snd_max, top) {
            top = self.snd_max;
        }
        if let Some((l, r)) = self.sacked.highest() {
            if !lt(r, top) {
                top = l;
            }
        }
        if !lt(una, top) {
            return 0;
        }
        let seg_max = self.snd_mss.saturating_sub(self.data_options_len()).max(1);
        let mut start = una;
        if top.wrapping_sub(una) as usize > seg_max {
            start = top.wrapping_sub(seg_max as u32);
        }
        if let Some(e) = self.sacked.last_end_before(una, top) {
            if lt(start, e) {
                start = e;
            }
        }
        let len = top.wrapping_sub(start) as usize;
        if len == 0 || self.prr_allow < len {
            return 0;
        }
        let mut r = self.base(now, start, Flags::ACK | Flags::PSH);
        let off = start.wrapping_sub(self.buf_seq) as usize;
        // One slice of the ring per segment.
        let len = len.min(self.snd_buf.contiguous(off));
        r.payload = self.snd_buf.get(off, len);
        emit(&r, self.ext(off, len));
        self.ack_now = false;
        self.t_ack = None;
        self.dsack = None;
        self.rescue_rxt = Some(self.recover);
        if self.rxt_mark.is_some() {
            self.rescue_sent = Some((start, start.wrapping_add(len as u32)));
        }
        self.prr_allow = self.prr_allow.saturating_sub(len);
        self.prr_out = self.prr_out.saturating_add(len);
        self.episode_rxt = self.episode_rxt.saturating_add(len as u64);
        self.stats.rescue_retransmits += 1;
        self.rtt_probe = None; // Karn
        1
    }

    /// RFC 6675 §4 NextSeg rule 1: the first octet at or above HighRxt
    /// (and SND.UNA) that is deemed lost and not SACKed, with the length of
    /// its run (at most `seg_max`, cut at a record boundary where one
    /// falls, RFC 5044 §8) and whether the FIN is part of it.
    fn next_lost(&mut self, seg_max: usize) -> Option<(u32, usize, bool)> {
        let una = self.snd_una;
        let mut s = if lt(self.high_rxt, una) {
            una
        } else {
            self.high_rxt
        };
        // Each step passes one SACKed range: bounded by the scoreboard.
        for _ in 0..=self.cfg.max_sack_ranges + 1 {
            match self.sacked.covering(una, s) {
                Some(r) => {
                    s = r;
                    self.stats.sack_skipped += 1;
                }
                None => break,
            }
        }
        if !lt(s, self.lost_end) || self.sacked.covering(una, s).is_some() {
            self.high_rxt = self.lost_end;
            return None;
        }
        // The run ends where the loss marking ends, or at the next SACKed
        // range: that is a segment boundary with a receiver that SACKs what
        // it holds. A SACKed range starting less than half a segment in is
        // sent over instead, so that a peer SACKing scattered octets gets
        // whole segments back, not one segment per octet.
        let mut end = self.lost_end;
        if let Some(ns) = self.sacked.next_start_after(una, s) {
            if lt(ns, end) && ns.wrapping_sub(s) as usize >= seg_max.div_ceil(2) {
                end = ns;
            }
        }
        // Nothing goes beyond the peer's window (a closed window is the
        // persist timer's to probe).
        let wnd_end = una.wrapping_add(self.snd_wnd);
        if !lt(s, wnd_end) {
            return None;
        }
        if lt(wnd_end, end) {
            end = wnd_end;
        }
        let data_end = self.data_end();
        let mut len = if lt(s, data_end) {
            data_end
                .wrapping_sub(s)
                .min(end.wrapping_sub(s))
                .min(seg_max as u32) as usize
        } else {
            0
        };
        if len > 0 {
            len = self.record_cut(s, len, seg_max).unwrap_or(len);
            // One slice of the ring per segment.
            len = len.min(
                self.snd_buf
                    .contiguous(s.wrapping_sub(self.buf_seq) as usize),
            );
        }
        let fin = self.fin_queued && s.wrapping_add(len as u32) == data_end && lt(data_end, end);
        if len == 0 && !fin {
            self.high_rxt = self.lost_end;
            return None;
        }
        Some((s, len, fin))
    }

    /// RFC 3042 §2: the first two duplicate ACKs each let one segment go
    /// beyond cwnd (outside recovery).
    ///
    /// RFC 3042 sends new data there; with a segment known lost and not
    /// resent, NextSeg (RFC 6675 §4, rule 1 before rule 2) gives that room
    /// to the retransmission instead. That is the state after a timeout,
    /// where no recovery may start before RecoveryPoint (§5.1): a
    /// retransmission RACK finds lost, with cwnd a segment and a few
    /// octets, waited while new data took the room, and if that data was
    /// lost too nothing came back until the next RTO (the simulator's RTO
    /// audit at 5% loss, seed 72, once the probe slack was 200 µs).
    pub(super) fn limited_transmit_room(&self) -> usize {
        if self.dupacks < DUP_THRESH {
            self.dupacks.min(2) as usize * self.mss()
        } else {
            0
        }
    }

    /// Retransmit what is deemed lost while the window (PRR in recovery,
    /// cwnd - pipe otherwise, with the room limited transmit gives: RFC
    /// 6675 §5 (C)) allows. Returns how many segments went.
    pub(super) fn send_lost(
        &mut self,
        now: u64,
        max: usize,
        pipe: &mut usize,
        emit: Emit<'_>,
    ) -> usize {
        let mut n = 0;
        while n < max && lt(self.snd_una, self.lost_end) {
            let budget = if self.in_recovery {
                self.prr_allow
            } else {
                self.cc
                    .cwnd()
                    .saturating_add(self.limited_transmit_room())
                    .saturating_sub(*pipe)
            };
            let seg_max = self.snd_mss.saturating_sub(self.data_options_len()).max(1);
            let Some((seq, len, fin)) = self.next_lost(seg_max) else {
                break;
            };
            // RFC 6675 §5 (C): only while the window has room for it
            // (PRR's sndcnt in recovery, RFC 6937 §3.1).
            if budget < (len + usize::from(fin)).max(1) {
                break;
            }
            let mut flags = Flags::ACK;
            if len > 0 {
                flags |= Flags::PSH;
            }
            if fin {
                flags |= Flags::FIN;
            }
            let mut r = self.base(now, seq, flags);
            let off = seq.wrapping_sub(self.buf_seq) as usize;
            r.payload = self.snd_buf.get(off, len);
            emit(&r, self.ext(off, len));
            n += 1;
            self.ack_now = false;
            self.t_ack = None;
            self.dsack = None;
            let adv = len + usize::from(fin);
            self.high_rxt = seq.wrapping_add(adv as u32);
            *pipe += adv;
            if self.in_recovery {
                self.prr_allow = self.prr_allow.saturating_sub(adv);
                self.prr_out = self.prr_out.saturating_add(adv);
                self.stats.fast_retransmits += 1;
            }
            self.episode_rxt = self.episode_rxt.saturating_add(adv as u64);
            self.episode_lost = self.episode_lost.saturating_add(adv as u64);
            let max = self.snd_max;
            self.rxt_mark
                .get_or_insert((max, seq.wrapping_add(adv as u32)));
            self.rtt_probe = None; // Karn
            if self.t_rtx.is_none() {
                self.t_rtx = Some(now + self.rto);
            }
        }
        n
    }

    /// RFC 8985 §7.3: the tail loss probe. New data if the peer's window
    /// has room for it (`Some(false)`: the caller sends one segment beyond
    /// cwnd), else the last segment sent again (`Some(true)`: sent).
    pub(super) fn send_probe(&mut self, now: u64, emit: Emit<'_>) -> Option<bool> {
        let sent = self.snd_nxt.wrapping_sub(self.buf_seq) as usize;
        let avail = self.snd_buf.len().saturating_sub(sent);
        let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
        if avail > 0 && lt(self.snd_nxt, wnd_end) && !self.fin_queued_sent() {
            self.t_rtx = Some(now + self.rto);
            return Some(false);
        }
        if self.snd_una == self.snd_max {
            return None;
        }
        let seg_max = self.snd_mss.saturating_sub(self.data_options_len()).max(1) as u32;
        let fin = self.fin_queued_sent();
        let mut data_hi = if fin { self.data_end() } else { self.snd_max };
        let span = data_hi.wrapping_sub(self.snd_una);
        let mut start = data_hi.wrapping_sub(span.min(seg_max));
        if self.in_recovery {
            // In recovery the last segment is likely SACKed already: send
            // the first unacknowledged one again instead, up to the next
            // SACKed range. If its retransmission arrived and only the ACK
            // was lost, this one is a duplicate whose ACK (a D-SACK) ends
            // the recovery; if the retransmission was lost, this repairs it.
            let una = self.snd_una;
            start = una;
            let mut end = una.wrapping_add(span.min(seg_max));
            if let Some(ns) = self.sacked.next_start_after(una, una) {
                if lt(ns, end) {
                    end = ns;
                }
            }
            if lt(una, end) {
                data_hi = end;
            }
        }
        let off = start.wrapping_sub(self.buf_seq) as usize;
        // One slice of the ring; the FIN only with the last data octet.
        let len = (data_hi.wrapping_sub(start) as usize).min(self.snd_buf.contiguous(off));
        let fin = fin && start.wrapping_add(len as u32) == self.data_end();
        let mut flags = Flags::ACK;
        if fin {
            flags |= Flags::FIN;
        }
        let mut r = self.base(now, start, flags);
        r.payload = self.snd_buf.get(off, len);
        emit(&r, self.ext(off, len));
        self.ack_now = false;
        self.t_ack = None;
        self.dsack = None;
        self.stats.tlp_probes += 1;
        self.tlp_high = Some(self.snd_max);
        self.tlp_dsacked = false;
        let ts = self.ts_now(now);
        self.tlp_ts = lt(self.max_ts, ts).then_some(ts);
        self.rtt_probe = None;
        self.t_rtx = Some(now + self.rto);
        Some(true)
    }
}
