//! Timers: the retransmission timeout (RFC 6298) with its classification,
//! persist, delayed ACK, TIME-WAIT, RACK and the tail loss probe.

use super::*;

impl Connection {
    /// Earliest timer deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        // Each unarmed timer as `u64::MAX`, then a plain minimum: no
        // branch per timer; a host asks after every poll (a fold of the
        // `Option`s cost 24 instructions more per watched round trip,
        // `flatten().min()` about 40 more per call). A deadline at
        // `u64::MAX` ns never comes, so it counts as none.
        let m = [
            self.t_rtx,
            self.t_persist,
            self.t_ack,
            self.t_tw,
            self.t_rack,
            self.t_tlp,
        ]
        .into_iter()
        .map(|t| t.unwrap_or(u64::MAX))
        .fold(u64::MAX, u64::min);
        (m != u64::MAX).then_some(m)
    }

    /// Run expired timers.
    ///
    /// The delayed ACK is the timer a busy connection meets every round
    /// trip; the others (TIME-WAIT, persist, RACK, TLP, retransmission)
    /// go through `handle_timeouts`, out of line, so that their code stays
    /// out of the instruction cache lines of the common path
    /// (docs/datapath.md, "Cold paths out of line").
    pub fn handle_timeout(&mut self, now: u64) {
        let due = |t: Option<u64>| t.is_some_and(|t| t <= now);
        if due(self.t_tw)
            || due(self.t_persist)
            || due(self.t_rack)
            || due(self.t_tlp)
            || due(self.t_rtx)
        {
            self.handle_timeouts(now);
        } else if due(self.t_ack) {
            self.t_ack = None;
            self.ack_now = true;
        }
    }

    /// Every expired timer, the delayed ACK's too, in their order.
    #[cold]
    #[inline(never)]
    fn handle_timeouts(&mut self, now: u64) {
        if self.t_tw.is_some_and(|t| t <= now) {
            self.t_tw = None;
            self.enter_closed();
            return;
        }
        if self.t_ack.is_some_and(|t| t <= now) {
            self.t_ack = None;
            self.ack_now = true;
        }
        if self.t_persist.is_some_and(|t| t <= now) {
            // Bounded zero-window wait (see `Config::persist_timeout`): give
            // up after `max_retransmits` probes in a row without any ACK, or
            // once the window has been closed for `persist_timeout`.
            let since = *self.zero_wnd_since.get_or_insert(now);
            let deadline = since.saturating_add(self.cfg.persist_timeout);
            if self.persist_probes >= self.cfg.max_retransmits || now >= deadline {
                self.stats.persist_aborts += 1;
                self.error = Some(TcpError::TimedOut);
                self.rst = Some((self.snd_nxt, 0, false));
                self.enter_closed();
                return;
            }
            self.persist_probes += 1;
            self.t_persist = Some((now + self.rto).min(deadline));
            self.rto = (self.rto * 2).min(self.cfg.rto_max);
            self.persist_probe = true;
        }
        if self.t_rack.is_some_and(|t| t <= now) {
            self.rack_timeout(now);
        }
        if self.t_tlp.is_some_and(|t| t <= now) {
            // RFC 8985 §7.3: send a probe; the RTO is re-armed after it.
            self.t_tlp = None;
            if self.sack_on
                && self.snd_una != self.snd_max
                && self.snd_wnd > 0
                && self.established_data_state()
            {
                self.tlp_due = true;
                self.t_rtx = Some(now + self.rto);
            }
        }
        if self.t_rtx.is_some_and(|t| t <= now) {
            // RFC 6298 §5.4-5.6.
            self.retries += 1;
            let limit = match (self.state, self.syn_ack_retries) {
                (State::SynReceived, Some(n)) => n,
                _ => self.cfg.max_retransmits,
            };
            if self.retries > limit {
                self.error = Some(TcpError::TimedOut);
                self.rst = Some((self.snd_nxt, 0, false));
                self.enter_closed();
                return;
            }
            self.stats.rto_retransmits += 1;
            self.classify_rto();
            self.rto = (self.rto * 2).min(self.cfg.rto_max);
            self.t_rtx = Some(now + self.rto);
            self.rtt_probe = None; // Karn
                                   // RFC 5681 §3.1 eq. 4 (RFC 9438 §4.8 for CUBIC): after a
                                   // timeout the window is one segment.
            let flight = self.flight();
            let synced = !matches!(self.state, State::SynSent | State::SynReceived);
            if synced && self.retries == 1 {
                if self.ts_on {
                    self.rto_undo = Some(self.ts_now(now));
                }
                self.cc.on_rto(flight, self.snd_mss, now);
            } else {
                // A repeated timeout backs off but keeps the threshold the
                // first one set (as Linux's tcp_enter_loss), so that undo
                // restores the window from before the first.
                self.cc.set_cwnd(self.snd_mss);
            }
            self.in_recovery = false;
            // RFC 7661 §4.4.1 applies to recovery by ACKs; the timeout's
            // own reduction (one segment) stands.
            self.nvp_loss = None;
            // What the path carried before the timeout says nothing now:
            // pipeACK undefined (validated) until measured again.
            self.pipeack_defined = false;
            self.pipeack_cur = None;
            self.nvp_since = None;
            self.dupacks = 0;
            self.t_rack = None;
            self.t_tlp = None;
            self.tlp_due = false;
            self.tlp_high = None;
            self.tlp_out = false;
            self.undo_armed = false;
            match self.state {
                State::SynSent | State::SynReceived => self.syn_unsent = true,
                _ if self.sack_on => {
                    // RFC 6675 §5.1: everything unSACKed is resent, and
                    // no new recovery starts before RecoveryPoint is
                    // acknowledged. What SACK shows arrived is not resent
                    // (the scoreboard stays), unless the peer reneged: a
                    // SACKed range at SND.UNA that the cumulative ACK
                    // should have covered (RFC 2018 §8).
                    if self.sacked.covering(self.snd_una, self.snd_una).is_some() {
                        self.sacked.clear();
                    }
                    self.recover = self.snd_max;
                    self.lost_end = self.snd_max;
                    self.high_rxt = self.snd_una;
                    self.rxt_mark = None;
                    self.rescue_sent = None;
                }
                _ => self.snd_nxt = self.snd_una, // go back to the first unacknowledged octet
            }
        }
    }

    /// Count what the sender knew when its retransmission timer fired
    /// (`Stats::{rto_sacked_above, rto_hole_resent, rto_after_probe,
    /// rto_repeated}`), before the timeout resets that state.
    fn classify_rto(&mut self) {
        if self.snd_una == self.snd_max || !self.established_data_state() {
            return;
        }
        if self.retries > 1 {
            self.stats.rto_repeated += 1;
        }
        if self.tlp_out || self.tlp_high.is_some() {
            self.stats.rto_after_probe += 1;
        }
        if self.sack_on && self.sacked.highest().is_some() {
            self.stats.rto_sacked_above += 1;
            if lt(self.snd_una, self.high_rxt) {
                self.stats.rto_hole_resent += 1;
            }
        }
    }
}
