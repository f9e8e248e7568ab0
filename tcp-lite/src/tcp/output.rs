//! The transmit path (after BSD's `tcp_output`): building segments and
//! choosing what goes out in one [`Connection::poll_transmit_ext`] pass.

use super::*;

impl Connection {
    /// Header fields common to every non-SYN segment. Pure ACKs are sent with
    /// `snd_max`, not `snd_nxt`: after a timeout rewinds `snd_nxt`, an ACK
    /// carrying the rewound number would fall left of the peer's window and
    /// be dropped unprocessed (RFC 9293 §3.10.7.4), and both sides would stall.
    pub(super) fn base(&self, now: u64, seq: u32, flags: Flags) -> TcpRepr<'static> {
        let mut r = TcpRepr::new(self.local_port, self.remote_port, seq, flags);
        if flags.contains(Flags::ACK) {
            r.ack_number = self.rcv_nxt;
        }
        r.window = self.window_field();
        if self.ts_on {
            r.timestamp = Some(TcpTimestamp {
                tsval: self.ts_now(now),
                tsecr: self.ts_recent,
            });
        }
        if self.sack_on
            && flags.contains(Flags::ACK)
            && (self.dsack.is_some() || !self.ooo.is_empty())
        {
            // RFC 2018 §4: report the out-of-order data we hold, the block
            // with the latest arrival first.
            let (nxt, base) = (self.rcv_nxt, self.rcv_off);
            let seq_of = |off: u64| nxt.wrapping_add((off - base) as u32);
            let mut blocks = self
                .ooo
                .sack_blocks(base)
                .map(|(a, b)| (seq_of(a), seq_of(b)));
            // RFC 2883 §4: a D-SACK block goes first, once.
            let mut slots = r.sack_ranges.iter_mut();
            if let Some(d) = self.dsack {
                if let Some(slot) = slots.next() {
                    *slot = Some(d);
                }
            }
            for slot in slots {
                *slot = blocks.next();
            }
        }
        r
    }

    /// Option octets a data segment carries now (an upper bound: SACK
    /// blocks are counted before merging).
    pub(super) fn data_options_len(&self) -> usize {
        let mut len = if self.ts_on { 12 } else { 0 };
        if self.sack_on && (!self.ooo.is_empty() || self.dsack.is_some()) {
            let fit = crate::wire::tcp::MAX_OPTIONS_LEN.saturating_sub(len + 4) / 8;
            let blocks = (self.ooo.sack_len() + usize::from(self.dsack.is_some())).min(fit);
            if blocks > 0 {
                len += 4 + 8 * blocks;
            }
        }
        len
    }

    /// Hand up to `max` segments to `emit`, in order. Returns how many.
    /// Not for a connection in external send mode (its segments would go
    /// without their payload): use [`poll_transmit_ext`](Self::poll_transmit_ext).
    pub fn poll_transmit(
        &mut self,
        now: u64,
        max: usize,
        emit: &mut dyn FnMut(&TcpRepr<'_>),
    ) -> usize {
        debug_assert!(
            !self.snd_buf.external,
            "poll_transmit in external send mode"
        );
        self.poll_transmit_ext(now, max, &mut |r, _| emit(r))
    }

    /// [`poll_transmit`](Self::poll_transmit), with each segment's
    /// [`ExtPayload`] in external send mode (`None` for segments without
    /// payload, and always in the usual mode, where `payload` holds it).
    pub fn poll_transmit_ext(&mut self, now: u64, max: usize, emit: Emit<'_>) -> usize {
        let mut n = self.send_rst(emit);
        if self.state == State::Closed || n >= max {
            return n;
        }
        if self.syn_unsent {
            self.send_syn(now, emit);
            return n + 1;
        }
        if matches!(
            self.state,
            State::SynSent | State::SynReceived | State::TimeWait
        ) {
            if self.ack_now && self.state == State::TimeWait {
                self.ack_now = false;
                let r = self.base(now, self.snd_max, Flags::ACK);
                emit(&r, None);
                n += 1;
            }
            return n;
        }
        self.ack_if_window_reopened();
        // With SACK: what is deemed lost goes first (RFC 6675 §5 (C),
        // NextSeg rule 1), then a tail loss probe if one is due, then new
        // data, all within what the window (or PRR) allows.
        let sack_mode = self.sack_on;
        let mut pipe = if sack_mode { self.pipe() } else { 0 };
        let sent_before = n;
        if sack_mode {
            n += self.send_lost(now, max - n, &mut pipe, emit);
        }
        let mut probe_new = false;
        if sack_mode && self.tlp_due && n < max {
            self.tlp_due = false;
            match self.send_probe(now, emit) {
                Some(true) => {
                    n += 1;
                    self.tlp_out = true;
                    if self.in_recovery {
                        self.stats.recovery_probes += 1;
                    }
                }
                Some(false) => probe_new = true,
                None => {}
            }
        }
        let new_from = self.snd_max;
        if self.cfg.cwv {
            self.cwv_check(now);
        }
        // What stopped the loop below (the caller's `max`: nothing).
        let mut limit = Limit::Other;
        // Data and FIN, limited by the peer's window and cwnd; no Nagle delay.
        while n < max {
            // When resending, skip what the peer reported holding (SACK).
            if lt(self.snd_nxt, self.snd_max) {
                if let Some(r) = self.sacked.covering(self.snd_una, self.snd_nxt) {
                    self.snd_nxt = if lt(self.snd_max, r) { self.snd_max } else { r };
                    self.stats.sack_skipped += 1;
                    continue;
                }
            }
            let sent = self.snd_nxt.wrapping_sub(self.buf_seq) as usize;
            let avail = self.snd_buf.len().saturating_sub(sent);
            // RFC 9293 §3.7.1 / RFC 6691: the MSS counts data only, so
            // the options this segment carries come off it.
            let seg_max = self.snd_mss.saturating_sub(self.data_options_len()).max(1);
            let wnd_end = self.snd_una.wrapping_add(self.snd_wnd);
            let wnd_room = if lt(wnd_end, self.snd_nxt) {
                0
            } else {
                wnd_end.wrapping_sub(self.snd_nxt) as usize
            };
            let cc_room = if sack_mode {
                if probe_new {
                    // RFC 8985 §7.3: a probe of new data goes whatever cwnd says.
                    seg_max
                } else if self.in_recovery {
                    self.prr_allow
                } else {
                    self.cc
                        .cwnd()
                        .saturating_add(self.limited_transmit_room())
                        .saturating_sub(pipe)
                }
            } else {
                let cc_end = self
                    .snd_una
                    .wrapping_add(self.cc.cwnd().min(u32::MAX as usize) as u32);
                if lt(cc_end, self.snd_nxt) {
                    0
                } else {
                    cc_end.wrapping_sub(self.snd_nxt) as usize
                }
            };
            let room = wnd_room.min(cc_room);
            let mut len = avail.min(seg_max).min(room);
            if sack_mode && len < seg_max.min(avail) && pipe > 0 && !self.persist_probe {
                // The window has room for part of a segment only: wait for
                // ACKs to open it to a whole one (RFC 9293 §3.8.6.2.1's
                // sender-side silly window avoidance), rather than send
                // runts that SACK and loss detection count as segments.
                len = 0;
            }
            // (Nothing to cut when nothing goes: the pass that finds the
            // queue empty skips the walk; acknowledged records leave at
            // the next cut.)
            match if len == 0 {
                Some(0)
            } else {
                self.record_cut(self.snd_nxt, len, seg_max)
            } {
                Some(cut) => len = cut,
                // The window, not the segment size, cuts a record: wait for
                // ACKs to open it rather than split the record, unless
                // nothing is in flight (then no ACK is coming).
                None if len < seg_max.min(avail) && self.flight() > 0 => len = 0,
                None => {}
            }
            if len == 0 && avail > 0 && self.persist_probe {
                len = 1; // window probe (RFC 9293 §3.8.6.1)
            }
            // One slice of the ring per segment: where the unsent data
            // wraps, the segment ends (once per trip round the ring).
            len = len.min(self.snd_buf.contiguous(sent));
            // The FIN goes with (or right after) the last data octet, once per pass.
            let fin_now = self.fin_queued && sent + len == self.snd_buf.len();
            if len == 0 && !fin_now {
                // Stats::cwnd_limited_ns / app_limited_ns.
                let want = avail.min(seg_max);
                // Once the application has closed (FIN queued), the
                // sender is done, not waiting for the application.
                limit = if avail == 0 {
                    if cc_room >= seg_max && !self.fin_queued {
                        Limit::App
                    } else {
                        Limit::Other
                    }
                } else if cc_room < want && wnd_room >= want {
                    Limit::Cwnd
                } else if wnd_room < want && cc_room >= want {
                    Limit::Rwnd
                } else {
                    Limit::Other
                };
                if avail > 0
                    && self.snd_wnd == 0
                    && self.t_persist.is_none()
                    && self.t_rtx.is_none()
                {
                    let since = *self.zero_wnd_since.get_or_insert(now);
                    let deadline = since.saturating_add(self.cfg.persist_timeout);
                    self.t_persist = Some((now + self.rto).min(deadline));
                }
                break;
            }
            self.persist_probe = false;
            if probe_new {
                probe_new = false;
                self.stats.tlp_probes += 1;
                self.tlp_out = true;
                if self.in_recovery {
                    self.stats.recovery_probes += 1;
                }
            }
            let mut flags = Flags::ACK;
            if len > 0 {
                flags |= Flags::PSH;
            }
            if fin_now {
                flags |= Flags::FIN;
            }
            let seq = self.snd_nxt;
            let mut r = self.base(now, seq, flags);
            r.payload = self.snd_buf.get(sent, len);
            emit(&r, self.ext(sent, len));
            n += 1;
            self.ack_now = false;
            self.t_ack = None;
            self.dsack = None;
            // The segment acknowledges everything: no ACK points owed.
            self.ack_points.clear();
            self.ack_count = 0;
            let adv = len as u32 + u32::from(fin_now);
            pipe += adv as usize;
            if self.in_recovery && sack_mode {
                self.prr_allow = self.prr_allow.saturating_sub(adv as usize);
                self.prr_out = self.prr_out.saturating_add(adv as usize);
            }
            self.snd_nxt = self.snd_nxt.wrapping_add(adv);
            if lt(self.snd_max, self.snd_nxt) {
                self.snd_max = self.snd_nxt;
                self.max_ts = self.ts_now(now);
                if self.rtt_probe.is_none() {
                    self.rtt_probe = Some((seq, now));
                }
            }
            if self.t_rtx.is_none() {
                self.t_rtx = Some(now + self.rto);
            }
            if fin_now {
                break;
            }
        }
        self.set_limit(limit, now);
        if sack_mode && self.in_recovery && n == sent_before && n < max {
            n += self.send_rescue(now, emit);
        }
        // RFC 8985 §7.2: (re)start the probe timer after sending new data;
        // in recovery after any send (see `arm_tlp`).
        if sack_mode && n > sent_before && (lt(new_from, self.snd_max) || self.in_recovery) {
            self.arm_tlp(now);
        }
        if self.ack_now && n < max {
            n += self.send_acks(now, max - n, emit);
        }
        self.dupacks_owed = 0;
        if n > 0 {
            // What every segment of this call advertised (one edge for
            // both: the window is the edge's, rounded to the scale).
            let edge = self.rcv_edge();
            self.wnd_sent = u32::from(self.window_field_to(edge)) << self.rcv_shift;
            self.rcv_adv = Some(edge);
        }
        n
    }

    /// The RST queued by the receive path, if any. Returns segments sent.
    fn send_rst(&mut self, emit: Emit<'_>) -> usize {
        let Some((seq, ack, with_ack)) = self.rst.take() else {
            return 0;
        };
        let mut r = TcpRepr::new(
            self.local_port,
            self.remote_port,
            seq,
            if with_ack {
                Flags::RST | Flags::ACK
            } else {
                Flags::RST
            },
        );
        r.ack_number = ack;
        emit(&r, None);
        1
    }

    /// Our SYN (active open) or SYN-ACK (passive), with the options we
    /// offer, and the retransmission timer started.
    fn send_syn(&mut self, now: u64, emit: Emit<'_>) {
        self.syn_unsent = false;
        let flags = if self.state == State::SynReceived {
            Flags::SYN | Flags::ACK
        } else {
            Flags::SYN
        };
        let mut r = TcpRepr::new(self.local_port, self.remote_port, self.iss, flags);
        if flags.contains(Flags::ACK) {
            r.ack_number = self.rcv_nxt;
        }
        // RFC 7323 §2.2: unscaled in SYNs.
        r.window = self
            .rcv_cap
            .map_or(self.cfg.rcv_buf, |c| c.min(self.cfg.rcv_buf))
            .min(65535) as u16;
        r.max_seg_size = Some(self.cfg.mss);
        let offer_ws = self.state == State::SynSent || self.rcv_shift > 0 || self.snd_shift > 0;
        r.window_scale = offer_ws.then_some(self.cfg.window_shift.min(14));
        r.sack_permitted = self.cfg.sack && (self.state == State::SynSent || self.sack_on);
        if self.cfg.timestamps && (self.state == State::SynSent || self.ts_on) {
            r.timestamp = Some(TcpTimestamp {
                tsval: self.ts_now(now),
                tsecr: self.ts_recent,
            });
        }
        emit(&r, None);
        self.snd_nxt = self.iss.wrapping_add(1);
        if lt(self.snd_max, self.snd_nxt) {
            self.snd_max = self.snd_nxt;
        }
        if self.rtt_probe.is_none() && self.retries == 0 {
            self.rtt_probe = Some((self.iss, now));
        }
        self.t_rtx.get_or_insert(now + self.rto);
    }

    /// A window below half the buffer that reopens (the application
    /// caught up) by a step of the offer (a sixteenth of the buffer), or
    /// to half, is announced at once (RFC 9293 §3.8.6.2.2: an update
    /// once the window can grow by a good part of the buffer, not by a
    /// few octets); a sender facing a closed window learns of it
    /// without waiting to probe.
    fn ack_if_window_reopened(&mut self) {
        if self.window_reopened() {
            self.ack_now = true;
        }
    }

    /// Whether the window we advertised last has grown enough to be
    /// announced at once (see [`ack_if_window_reopened`](Self::ack_if_window_reopened)).
    fn window_reopened(&self) -> bool {
        if self.rcv_adv.is_none() {
            return false;
        }
        let half = self.cfg.rcv_buf / 2;
        let step = (self.cfg.rcv_buf / 16).max(1 << self.rcv_shift);
        self.wnd_sent < half && self.rcv_wnd() >= self.wnd_sent.saturating_add(step).min(half)
    }

    /// Whether [`poll_transmit`](Self::poll_transmit) would send nothing
    /// now: established, no reset or SYN to send, no ACK owed at once
    /// (nor an `ack_every` point, a D-SACK block or a window update),
    /// nothing unsent, lost, to probe or to recover, no FIN queued. Timers
    /// are not looked at: [`poll_timeout`](Self::poll_timeout) says when
    /// they want a poll (a delayed ACK's among them). A host may leave
    /// such a connection unpolled after a segment until that deadline or
    /// until data is queued.
    pub fn transmit_idle(&self) -> bool {
        // What is false most often first: an ACK owed (every second
        // segment of a stream), data unsent (a sender's ACKs).
        !self.ack_now
            && self.snd_max == self.snd_una.wrapping_add(self.snd_buf.len() as u32)
            && self.snd_nxt == self.snd_max
            && self.state == State::Established
            && self.error.is_none()
            && self.rst.is_none()
            && !self.syn_unsent
            && self.ack_points.is_empty()
            && self.dsack.is_none()
            && !self.tlp_due
            && !self.persist_probe
            && !self.fin_queued
            && !self.in_recovery
            && !lt(self.snd_una, self.lost_end)
            && !self.window_reopened()
    }

    /// The ACKs owed, at most `max`: `Config::ack_every`'s points first, in
    /// order, then the one for all that arrived, repeated once per
    /// out-of-order arrival (at most 4). Returns how many went.
    fn send_acks(&mut self, now: u64, max: usize, emit: Emit<'_>) -> usize {
        let mut n = 0;
        // `Config::ack_every`: one ACK per point first, in order, the
        // last one (for all that arrived) below.
        // A D-SACK block goes once (RFC 2883 §4), on the last.
        let mut points = std::mem::take(&mut self.ack_points);
        let dsack = self.dsack.take();
        for &p in &points {
            if n >= max.saturating_sub(1) || p == self.rcv_nxt {
                break;
            }
            let mut r = self.base(now, self.snd_max, Flags::ACK);
            r.ack_number = p;
            emit(&r, None);
            n += 1;
        }
        self.dsack = dsack;
        points.clear();
        self.ack_points = points;
        self.ack_count = 0;
        self.ack_now = false;
        self.t_ack = None;
        let r = self.base(now, self.snd_max, Flags::ACK);
        self.dsack = None;
        // One ACK per out-of-order arrival (at most 4 at once).
        let copies = self.dupacks_owed.clamp(1, 4) as usize;
        for _ in 0..copies.min(max - n) {
            emit(&r, None);
            n += 1;
        }
        n
    }
}
