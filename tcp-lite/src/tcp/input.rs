//! The receive path (after BSD's `tcp_input`): an arriving segment's
//! checks and state changes, the receive window, in-order delivery and
//! out-of-order reassembly, and when an ACK is owed.

use super::*;

impl Connection {
    /// What the receive buffer can take from RCV.NXT on: `rcv_buf` less
    /// the octets the owner still holds for the application
    /// ([`set_rcv_held`](Self::set_rcv_held)), counted in steps of a
    /// sixteenth of the buffer, so that small changes of the backlog leave
    /// the offer as it was and duplicate ACKs keep the same window, as fast
    /// retransmit needs (RFC 5681 §2). A step partly held counts as held:
    /// rounded down, the offer would exceed what is free by up to a step,
    /// and an owner whose backlog may hold `rcv_buf` (the stack's
    /// `rx_backlog_limit`) would have to drop data inside the window it
    /// offered. Rounded up, the right edge stays where it was while the
    /// application takes nothing, so the backlog never passes `rcv_buf`.
    /// In-order data leaves at once (inline delivery) and the buffer only
    /// ever holds out-of-order data inside the window: with nothing held,
    /// the offer is `rcv_buf`.
    fn rcv_offer(&self) -> u32 {
        let buf = self.cfg.rcv_buf;
        let held = self.rcv_held.min(buf);
        // Nothing held (in order, taken at once): the whole buffer,
        // without the division by a step that is not a constant.
        let offer = if held == 0 {
            buf
        } else {
            let step = (buf / 16).max(1 << self.rcv_shift).max(1);
            buf - (held.div_ceil(step).saturating_mul(step)).min(buf)
        };
        self.rcv_cap.map_or(offer, |cap| offer.min(cap))
    }

    /// The window we offer: up to RCV.NXT + the offer, but never left of
    /// the edge already advertised (RFC 9293 §3.8.6.2.2: the window SHOULD
    /// NOT shrink), so a growing backlog closes it as data arrives.
    pub(super) fn window_field(&self) -> u16 {
        self.window_field_to(self.rcv_edge())
    }

    /// [`window_field`](Self::window_field) for an `edge` the caller has
    /// from [`rcv_edge`](Self::rcv_edge).
    pub(super) fn window_field_to(&self, edge: u32) -> u16 {
        let w = edge.wrapping_sub(self.rcv_nxt);
        // Rounded up to the scale: rounding down would pull the edge left.
        w.div_ceil(1 << self.rcv_shift).min(65535) as u16
    }

    /// The right edge of the window (before the scale's rounding, which
    /// must not carry the edge right from one ACK to the next).
    pub(super) fn rcv_edge(&self) -> u32 {
        let edge = self.rcv_nxt.wrapping_add(self.rcv_offer());
        match self.rcv_adv {
            Some(adv) if lt(edge, adv) => adv,
            _ => edge,
        }
    }

    /// Octets allocated for out-of-order data (above a gap, waiting for
    /// it to fill): at most about one receive window. What the owner
    /// counts against a memory budget.
    pub fn ooo_held(&self) -> usize {
        self.ooo.allocated()
    }

    /// Free the out-of-order buffer if it holds nothing (it keeps its
    /// capacity after a gap fills, for the next loss): for an owner's idle
    /// sweep.
    pub fn trim(&mut self) {
        self.ooo.trim();
    }

    /// The owner's queue toward the application holds `octets` delivered
    /// in order and not taken yet: the offered window leaves room for
    /// them (flow control, RFC 9293 §3.8.6.2), so a sender faster than the
    /// application meets a closing window, not a full queue that drops.
    /// When the application catches up and a window below half the buffer
    /// reopens by a step (a sixteenth of the buffer), the next
    /// [`poll_transmit`](Self::poll_transmit) sends a window update.
    pub fn set_rcv_held(&mut self, octets: usize) {
        self.rcv_held = u32::try_from(octets).unwrap_or(u32::MAX);
    }

    /// Offer at most `cap` octets of window (`None`: `rcv_buf`), the SYN
    /// or SYN-ACK's included; out-of-order data is held only inside the
    /// window offered, so this bounds what the peer can make us hold. A
    /// listener caps connections whose owner has not accepted them yet
    /// ([`Listener::set_rcv_cap`](crate::listen::Listener::set_rcv_cap)).
    /// The edge already advertised stays (RFC 9293 §3.8.6.2.2: the window
    /// SHOULD NOT shrink); lifting the cap opens the window, and the next
    /// [`poll_transmit`](Self::poll_transmit) announces it.
    pub fn set_rcv_cap(&mut self, cap: Option<u32>) {
        self.rcv_cap = cap;
    }

    pub(super) fn rcv_wnd(&self) -> u32 {
        u32::from(self.window_field()) << self.rcv_shift
    }

    /// Process one received segment addressed to this connection. In-order
    /// payload goes to `deliver` straight from `seg.payload`.
    pub fn handle_segment(&mut self, seg: &TcpRepr<'_>, now: u64, deliver: &mut dyn FnMut(&[u8])) {
        let f = seg.flags;
        match self.state {
            State::Closed => return,
            State::SynSent => return self.handle_syn_sent(seg, now),
            _ => {}
        }
        // RFC 7323 §3.2: once timestamps are in use, "if a non-<RST> segment
        // is received without a TSopt, a TCP SHOULD silently drop the
        // segment". A RST goes on to the RFC 5961 §3.2 checks below.
        if self.ts_on && seg.timestamp.is_none() && !f.contains(Flags::RST) {
            self.stats.no_timestamp_drops += 1;
            return;
        }
        // RFC 9293 §3.10.7.4 first: sequence number acceptability.
        let seg_len = u32::try_from(seg.payload.len())
            .unwrap_or(u32::MAX)
            .saturating_add(u32::from(f.contains(Flags::SYN)))
            .saturating_add(u32::from(f.contains(Flags::FIN)));
        let wnd = self.rcv_wnd();
        let seq = seg.seq_number;
        let acceptable = match (seg_len, wnd) {
            (0, 0) => seq == self.rcv_nxt,
            (0, _) => le(self.rcv_nxt, seq) && lt(seq, self.rcv_nxt.wrapping_add(wnd)),
            (_, 0) => false,
            (_, _) => {
                let end = seq.wrapping_add(seg_len - 1);
                (le(self.rcv_nxt, seq) && lt(seq, self.rcv_nxt.wrapping_add(wnd)))
                    || (le(self.rcv_nxt, end) && lt(end, self.rcv_nxt.wrapping_add(wnd)))
            }
        };
        // RFC 7323 §5: PAWS.
        if self.ts_on && !f.contains(Flags::RST) {
            if let Some(ts) = seg.timestamp {
                if lt(ts.tsval, self.ts_recent) && acceptable {
                    self.ack_now = true;
                    return;
                }
            }
        }
        if !acceptable {
            // RFC 2883 §4: data wholly below RCV.NXT arrived again: report
            // it in a D-SACK block.
            let end = seq.wrapping_add(seg.payload.len() as u32);
            if self.sack_on && !seg.payload.is_empty() && le(end, self.rcv_nxt) {
                self.dsack = Some((seq, end));
            }
            if self.state == State::TimeWait && f.contains(Flags::FIN) {
                self.t_tw = Some(now + self.cfg.time_wait);
            }
            if !f.contains(Flags::RST) {
                self.ack_now = true;
            }
            return;
        }
        // Second: RST (RFC 5961 §3.2: only an exact match resets).
        if f.contains(Flags::RST) {
            if seq == self.rcv_nxt {
                // RFC 9293 §3.10.7.4: in CLOSING, LAST-ACK and TIME-WAIT a
                // reset just closes. Both FINs have been exchanged; when
                // every octet we sent is acknowledged too (a peer whose
                // TIME-WAIT ended answers our retransmitted FIN with RST)
                // nothing was lost and the close is clean. Data still
                // unacknowledged is reported as a reset.
                let both_closed = matches!(
                    self.state,
                    State::Closing | State::LastAck | State::TimeWait
                );
                self.error = if both_closed && self.snd_buf.len() == 0 {
                    None
                } else if self.state == State::SynReceived {
                    Some(TcpError::Refused)
                } else {
                    Some(TcpError::Reset)
                };
                self.enter_closed();
            } else {
                self.challenge_ack(now);
            }
            return;
        }
        // Fourth: SYN in a synchronized state (RFC 5961 §4).
        if f.contains(Flags::SYN) {
            self.challenge_ack(now);
            return;
        }
        if self.ts_on {
            if let Some(ts) = seg.timestamp {
                // RFC 7323 §4.3: remember the timestamp of the left-most in-window segment.
                if le(seq, self.rcv_nxt) {
                    self.ts_recent = ts.tsval;
                }
            }
        }
        // Fifth: ACK.
        if !f.contains(Flags::ACK) {
            return;
        }
        let ack = seg.ack_number;
        if self.state == State::SynReceived {
            if lt(self.snd_una, ack) && le(ack, self.snd_nxt) {
                self.state = State::Established;
                self.set_snd_wnd(u32::from(seg.window) << self.snd_shift);
                self.snd_wl1 = seq;
                self.snd_wl2 = ack;
            } else {
                self.rst = Some((ack, 0, false));
                return;
            }
        }
        // RFC 5961 §5.2: the ACK is acceptable only if
        // SND.UNA - MAX.SND.WND =< SEG.ACK =< SND.NXT (SND.MAX here: after a
        // timeout rewinds SND.NXT the peer may still acknowledge up to
        // SND.MAX); any other segment MUST be discarded and an ACK sent back.
        if lt(self.snd_max, ack) || lt(ack, self.snd_una.wrapping_sub(self.max_snd_wnd)) {
            self.challenge_ack(now);
            return;
        }
        self.process_ack(seg, now);
        if self.state == State::Closed {
            return;
        }
        // Seventh: payload, trimmed to the window first, so that no octet
        // before RCV.NXT ever gets a stream offset. Octets before RCV.NXT
        // arrived twice: report them in a D-SACK block (RFC 2883 §4).
        if self.sack_on && !seg.payload.is_empty() && lt(seq, self.rcv_nxt) {
            let end = seq.wrapping_add(seg.payload.len() as u32);
            let end = if lt(self.rcv_nxt, end) {
                self.rcv_nxt
            } else {
                end
            };
            self.dsack = Some((seq, end));
        }
        // (The window is the one the acceptability check used: nothing
        // since moved RCV.NXT or what the buffer holds.)
        let (seq, payload, fin) =
            self.trim_to_window(seq, seg.payload, f.contains(Flags::FIN), wnd);
        if !payload.is_empty()
            && matches!(
                self.state,
                State::Established | State::FinWait1 | State::FinWait2
            )
        {
            self.receive_payload(seq, payload, now, deliver);
        }
        // Eighth: FIN.
        if fin {
            let fin_off = self.off_of(seq.wrapping_add(payload.len() as u32));
            self.peer_fin_off = Some(fin_off);
            self.ack_now = true;
        }
        self.try_peer_fin(now);
    }

    /// RFC 9293 §3.10.7.4: an acceptable segment is trimmed to the window —
    /// octets before RCV.NXT are old duplicates and go, and so do octets at
    /// or past RCV.NXT + RCV.WND (with a FIN after them). What is left
    /// starts at or after RCV.NXT, so [`off_of`](Self::off_of) never goes
    /// below the stream start: a segment starting at the SYN's sequence
    /// number (RCV.NXT - 1 before any data) loses its first octet here.
    fn trim_to_window<'p>(
        &self,
        seq: u32,
        payload: &'p [u8],
        fin: bool,
        wnd: u32,
    ) -> (u32, &'p [u8], bool) {
        let (mut seq, mut payload, mut fin) = (seq, payload, fin);
        if lt(seq, self.rcv_nxt) {
            let old = self.rcv_nxt.wrapping_sub(seq) as usize;
            if old > payload.len() {
                // Everything, FIN included, lies before RCV.NXT.
                return (self.rcv_nxt, &[], false);
            }
            payload = &payload[old..];
            seq = self.rcv_nxt;
        }
        let wnd_end = self.rcv_nxt.wrapping_add(wnd);
        let room = if lt(seq, wnd_end) {
            wnd_end.wrapping_sub(seq) as usize
        } else {
            0
        };
        if payload.len() > room {
            payload = &payload[..room];
            fin = false;
        }
        (seq, payload, fin)
    }

    /// The stream offset of `seq`, which must not lie before RCV.NXT
    /// (callers trim with [`trim_to_window`](Self::trim_to_window) first).
    fn off_of(&self, seq: u32) -> u64 {
        debug_assert!(le(self.rcv_nxt, seq), "offset of an octet before RCV.NXT");
        self.rcv_off + u64::from(seq.wrapping_sub(self.rcv_nxt))
    }

    fn try_peer_fin(&mut self, now: u64) {
        if self.peer_fin_off != Some(self.rcv_off) {
            return;
        }
        if !matches!(
            self.state,
            State::SynReceived | State::Established | State::FinWait1 | State::FinWait2
        ) {
            return;
        }
        self.peer_fin_off = None;
        self.rcv_off += 1;
        self.rcv_nxt = self.rcv_nxt.wrapping_add(1);
        self.ack_now = true;
        self.state = match self.state {
            State::Established | State::SynReceived => State::CloseWait,
            State::FinWait1 if self.fin_acked() => self.enter_time_wait(now),
            State::FinWait1 => State::Closing,
            State::FinWait2 => self.enter_time_wait(now),
            s => s,
        };
    }

    pub(super) fn enter_time_wait(&mut self, now: u64) -> State {
        self.t_rtx = None;
        self.t_persist = None;
        self.t_tw = Some(now + self.cfg.time_wait);
        State::TimeWait
    }

    /// Sends a challenge ACK unless this connection already sent
    /// `challenge_ack_limit` of them in the current interval (RFC 5961 §7:
    /// an ACK throttling mechanism SHOULD be used). The segment that drew
    /// it is discarded either way.
    fn challenge_ack(&mut self, now: u64) {
        if self.challenge_sent == 0
            || now.saturating_sub(self.challenge_since) >= self.cfg.challenge_ack_interval
        {
            self.challenge_since = now;
            self.challenge_sent = 0;
        }
        if self.challenge_sent >= self.cfg.challenge_ack_limit {
            self.stats.challenge_acks_suppressed += 1;
            return;
        }
        self.challenge_sent += 1;
        self.stats.challenge_acks += 1;
        self.ack_now = true;
    }

    fn handle_syn_sent(&mut self, seg: &TcpRepr<'_>, now: u64) {
        let f = seg.flags;
        let ack_ok = f.contains(Flags::ACK)
            && lt(self.iss, seg.ack_number)
            && le(seg.ack_number, self.snd_nxt);
        if f.contains(Flags::ACK) && !ack_ok {
            if !f.contains(Flags::RST) {
                self.rst = Some((seg.ack_number, 0, false));
            }
            return;
        }
        if f.contains(Flags::RST) {
            if ack_ok {
                self.error = Some(TcpError::Refused);
                self.enter_closed();
            }
            return;
        }
        if !f.contains(Flags::SYN) {
            return;
        }
        self.irs = seg.seq_number;
        self.rcv_nxt = seg.seq_number.wrapping_add(1);
        self.take_syn_options(seg);
        self.snd_wl1 = seg.seq_number;
        if ack_ok {
            self.snd_una = seg.ack_number;
            self.set_snd_wnd(u32::from(seg.window)); // RFC 7323 §2.2: a SYN's window is never scaled
            self.snd_wl2 = seg.ack_number;
            if let Some(r) = self.sample_rtt_probe(seg.ack_number, now) {
                self.rtt_sample(r);
            }
            self.t_rtx = None;
            self.retries = 0;
            self.state = State::Established;
            self.ack_now = true;
        } else {
            // Simultaneous open (RFC 9293 §3.5).
            self.set_snd_wnd(u32::from(seg.window));
            self.state = State::SynReceived;
            self.syn_unsent = true;
        }
    }

    /// `payload` starts at or after RCV.NXT and ends inside the window
    /// ([`trim_to_window`](Self::trim_to_window) saw to both).
    fn receive_payload(
        &mut self,
        seq: u32,
        payload: &[u8],
        now: u64,
        deliver: &mut dyn FnMut(&[u8]),
    ) {
        let off = self.off_of(seq);
        if off == self.rcv_off {
            // RFC 5681 §4.2: a segment that fills (part of) a gap is
            // acknowledged at once.
            let filled_gap = !self.ooo.is_empty();
            deliver(payload);
            self.advance(payload.len());
            // Only a store that held something can have more to deliver
            // (most in-order segments find it empty and skip its sync).
            if filled_gap {
                loop {
                    let n = self.ooo.pop(self.rcv_off, deliver);
                    if n == 0 {
                        break;
                    }
                    self.advance(n);
                }
            }
            self.count_for_ack(payload.len());
            self.schedule_ack(now, filled_gap);
        } else {
            // Out of order: hold a copy until the gap fills, in at most
            // `max_ooo_ranges` ranges and a window of octets.
            let wnd = self.rcv_wnd() as usize;
            let end = off + payload.len() as u64;
            if self.sack_on && self.ooo.holds(off, end) {
                // Held already: a duplicate (RFC 2883 §4).
                self.dsack = Some((seq, seq.wrapping_add(payload.len() as u32)));
            }
            match self
                .ooo
                .insert(self.rcv_off, off, payload, self.cfg.max_ooo_ranges, wnd)
            {
                Insert::Held => self.stats.ooo_segments += 1,
                Insert::Dropped => self.stats.ooo_dropped += 1,
            }
            self.ack_now = true; // immediate duplicate ACK (RFC 5681 §4.2)
            self.dupacks_owed = self.dupacks_owed.saturating_add(1);
        }
    }

    /// `Config::ack_every`: note an ACK point after every n-th full-sized
    /// in-order segment (RFC 5681 §4.2).
    fn count_for_ack(&mut self, len: usize) {
        let every = self.cfg.ack_every;
        if every == 0 {
            return;
        }
        self.rcv_seg_max = self.rcv_seg_max.max(len.min(usize::from(self.cfg.mss)));
        if len < self.rcv_seg_max {
            return;
        }
        self.ack_count += 1;
        if self.ack_count >= every {
            self.ack_count = 0;
            if self.ack_points.len() < MAX_ACK_POINTS {
                self.ack_points.push(self.rcv_nxt);
            }
        }
    }

    fn advance(&mut self, n: usize) {
        self.rcv_off += n as u64;
        self.rcv_nxt = self.rcv_nxt.wrapping_add(n as u32);
        self.stats.delivered += n as u64;
    }

    fn schedule_ack(&mut self, now: u64, immediate: bool) {
        match self.cfg.delayed_ack {
            Some(d) if !immediate => {
                if self.t_ack.is_some() {
                    self.ack_now = true; // every second segment (RFC 5681 §4.2)
                } else {
                    self.t_ack = Some(now + d);
                }
            }
            _ => self.ack_now = true,
        }
    }
}
