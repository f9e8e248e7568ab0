//! DATA received (RFC 9260 §6.2, §6.5, §6.6, §6.9): TSNs and duplicates,
//! the receive buffer and TSN window, whole chunks offered in place,
//! reassembly in runs of held fragments with the pruning of those that can
//! never complete, delivery in SSN order; and what our SACKs report
//! (cumulative TSN, gap blocks, a_rwnd).

use super::*;

#[derive(Debug)]
pub(super) struct InChunk {
    stream: u16,
    ssn: u16,
    ppid: u32,
    flags: DataFlags,
    data: Vec<u8>,
}

impl Association {
    pub(super) fn a_rwnd(&self) -> u32 {
        (self.cfg.recv_buffer as usize).saturating_sub(self.rx_bytes) as u32
    }

    pub(super) fn unwrap_rx(&self, tsn: u32) -> u64 {
        let d = tsn.wrapping_sub(self.rx_cum as u32) as i32;
        self.rx_cum.wrapping_add_signed(i64::from(d))
    }

    /// Handles one DATA chunk; returns whether a SACK is due at once.
    pub(super) fn on_data(
        &mut self,
        d: &DataRepr<'_>,
        rx: &mut dyn FnMut(MessageRef<'_>) -> bool,
    ) -> bool {
        let t = self.unwrap_rx(d.tsn);
        if t <= self.rx_cum || self.rx_received.contains(&t) {
            self.stats.dup_data_received += 1;
            if self.dups.len() < MAX_DUP_TSNS {
                self.dups.push(d.tsn);
            }
            return true;
        }
        if t - self.rx_cum > u64::from(self.cfg.max_tsn_window) {
            return false; // outside the window: dropped, not acknowledged
        }
        let len = d.payload.len();
        // Keep room for the next in-sequence chunk so a full buffer of
        // out-of-order data cannot stall the association.
        let limit = if t == self.rx_cum + 1 {
            self.cfg.recv_buffer as usize
        } else {
            (self.cfg.recv_buffer as usize).saturating_sub(self.cfg.max_packet + RX_CHUNK_OVERHEAD)
        };
        // Each held chunk costs its bookkeeping too, not only its octets.
        if self.rx_bytes.saturating_add(len + RX_CHUNK_OVERHEAD) > limit {
            return true; // dropped: tell the peer our window at once
        }
        if t != self.rx_cum + 1 {
            self.stats.out_of_order_data += 1;
        }
        if t == self.rx_cum + 1 && self.rx_received.is_empty() {
            // In sequence with no gap behind it (nearly every chunk): the
            // cumulative TSN moves on with no set to touch.
            self.rx_cum = t;
        } else {
            self.rx_received.insert(t);
            while self.rx_received.remove(&(self.rx_cum + 1)) {
                self.rx_cum += 1;
            }
        }
        if d.stream_id >= self.in_streams {
            // §6.5: acknowledge the TSN, report Invalid Stream Identifier,
            // discard the data.
            if self.pending.error.is_none() {
                let mut v = [0u8; 4];
                v[0..2].copy_from_slice(&d.stream_id.to_be_bytes());
                let (b, n) = wire::error_cause(cause_code::INVALID_STREAM_IDENTIFIER, &v);
                self.pending.error = Some(b[..n].to_vec());
            }
            // Received, never held: fragments beside it cannot join it.
            self.prune_beside(t);
            return true;
        }
        if self.offer_in_place(d, rx) {
            // Received and delivered; nothing held. Fragments beside it
            // cannot join a B+E chunk (§6.9).
            self.prune_beside(t);
            return false;
        }
        self.rx_bytes += len + RX_CHUNK_OVERHEAD;
        self.rx_chunks.insert(
            t,
            InChunk {
                stream: d.stream_id,
                ssn: d.ssn,
                ppid: d.ppid,
                flags: d.flags,
                data: d.payload.to_vec(),
            },
        );
        self.try_deliver(t, len);
        self.prune_beside(t);
        false
    }

    /// Offers a whole chunk to `rx` when its delivery is due now: B and E
    /// set (one-chunk message, §6.9), unordered or carrying its stream's
    /// next SSN (§6.6), and no event waiting before it (so it cannot
    /// overtake an earlier message, or the Connected event).
    /// True when `rx` took it (the stream's next SSN then moves on, and
    /// messages that waited for it are delivered as events).
    fn offer_in_place(
        &mut self,
        d: &DataRepr<'_>,
        rx: &mut dyn FnMut(MessageRef<'_>) -> bool,
    ) -> bool {
        let s = usize::from(d.stream_id);
        let due = d.flags.begin
            && d.flags.end
            && (d.flags.unordered || self.next_ssn_in.get(s) == Some(&d.ssn));
        if !due || !self.events.is_empty() {
            return false;
        }
        let m = MessageRef {
            stream: d.stream_id,
            ppid: d.ppid,
            unordered: d.flags.unordered,
            data: d.payload,
        };
        if !rx(m) {
            return false;
        }
        self.stats.data_in_place += 1;
        if !d.flags.unordered {
            let stream = d.stream_id;
            self.next_ssn_in[s] = d.ssn.wrapping_add(1);
            while let Some((f, l)) = self.ready.remove(&(stream, self.next_ssn_in[s])) {
                self.deliver(f, l);
                self.next_ssn_in[s] = self.next_ssn_in[s].wrapping_add(1);
            }
        }
        true
    }

    fn same_message(a: &InChunk, b: &InChunk) -> bool {
        a.stream == b.stream
            && a.flags.unordered == b.flags.unordered
            && (a.flags.unordered || a.ssn == b.ssn)
    }

    /// Whether the held chunk at `a` may be directly followed by the one
    /// at `a + 1` in one message (RFC 9260 §6.9: a message's fragments
    /// take consecutive TSNs, B on the first, E on the last).
    fn joins(&mut self, a: u64) -> bool {
        self.rx_work += 2;
        match (self.rx_chunks.get(&a), self.rx_chunks.get(&(a + 1))) {
            (Some(p), Some(n)) => !p.flags.end && !n.flags.begin && Self::same_message(p, n),
            _ => false,
        }
    }

    /// Files the chunk just stored at TSN `t` into the runs of held
    /// fragments (`rx_runs`: consecutive TSNs, each joining the next), and
    /// returns the run it is now part of. A few map operations: no chain
    /// is walked, so the work per chunk is O(log n) whatever the length
    /// of the chain it extends.
    fn file_chunk(&mut self, t: u64, len: usize) -> (u64, u64) {
        let (mut first, mut last, mut bytes) = (t, t, len);
        if self.joins(t - 1) {
            // The run holding t - 1 ends there: t was not held before.
            self.rx_work += 1;
            if let Some((&f, &(l, b))) = self.rx_runs.range(..t).next_back() {
                if l == t - 1 {
                    self.rx_runs.remove(&f);
                    first = f;
                    bytes += b;
                }
            }
        }
        if self.joins(t) {
            self.rx_work += 1;
            if let Some((l, b)) = self.rx_runs.remove(&(t + 1)) {
                last = l;
                bytes += b;
            }
        }
        self.rx_runs.insert(first, (last, bytes));
        (first, last)
    }

    /// Whether TSN `t` has arrived (whether held, delivered or discarded).
    fn received(&self, t: u64) -> bool {
        t <= self.rx_cum || self.rx_received.contains(&t)
    }

    /// Drops the run starting at `first` if it can never become a whole
    /// message: its first chunk lacks B and the TSN before it arrived
    /// without joining it, or its last chunk lacks E and the TSN after it
    /// arrived without joining it (§6.9: a message's fragments take
    /// consecutive TSNs). Such chunks would otherwise stay held for the
    /// life of the association, the cumulative TSN long past them.
    fn prune_if_dead(&mut self, first: u64) {
        self.rx_work += 1;
        let Some(&(last, _)) = self.rx_runs.get(&first) else {
            return;
        };
        self.rx_work += 2;
        let (Some(f), Some(l)) = (self.rx_chunks.get(&first), self.rx_chunks.get(&last)) else {
            return;
        };
        let dead = (!f.flags.begin && self.received(first - 1))
            || (!l.flags.end && self.received(last + 1));
        if dead {
            self.rx_runs.remove(&first);
            self.drop_chunks(first, last);
        }
    }

    /// After TSN `t` arrived: the runs just before and after it, and its
    /// own, may have lost the neighbour they waited for.
    fn prune_beside(&mut self, t: u64) {
        self.rx_work += 1;
        if self.rx_runs.is_empty() {
            return; // nothing held, nothing to lose a neighbour
        }
        if let Some((&f, &(l, _))) = self.rx_runs.range(..t).next_back() {
            if l + 1 >= t {
                // The run ending at t - 1, or one holding t from before it.
                self.prune_if_dead(f);
            }
        }
        self.prune_if_dead(t);
        self.prune_if_dead(t + 1);
    }

    /// Forgets held chunks `first..=last` (linear in what is dropped,
    /// each chunk once).
    fn drop_chunks(&mut self, first: u64, last: u64) {
        for t in first..=last {
            self.rx_work += 1;
            if let Some(c) = self.rx_chunks.remove(&t) {
                self.rx_bytes = self
                    .rx_bytes
                    .saturating_sub(c.data.len() + RX_CHUNK_OVERHEAD);
                self.stats.pruned_chunks += 1;
            }
        }
    }

    fn too_big(&mut self) {
        // A message beyond our reassembly limits: abort (§3.3.10.4 Out of
        // Resource), as it could never be delivered.
        self.abort_with(
            cause_code::OUT_OF_RESOURCE,
            CloseReason::ProtocolError(cause_code::OUT_OF_RESOURCE),
        );
    }

    fn deliver(&mut self, first: u64, last: u64) {
        let mut data = Vec::new();
        let mut head = None;
        for t in first..=last {
            self.rx_work += 1;
            if let Some(c) = self.rx_chunks.remove(&t) {
                // The message keeps its octets charged until the user
                // takes it; the chunk's bookkeeping is gone.
                self.rx_bytes = self.rx_bytes.saturating_sub(RX_CHUNK_OVERHEAD);
                if head.is_none() {
                    head = Some((c.stream, c.ppid, c.flags.unordered));
                }
                data.extend_from_slice(&c.data);
            }
        }
        if let Some((stream, ppid, unordered)) = head {
            // rx_bytes keeps counting these octets until the user takes them.
            self.events.push_back(Event::Message(Message {
                stream,
                ppid,
                unordered,
                data,
            }));
        }
    }

    fn try_deliver(&mut self, t: u64, len: usize) {
        let (first, last) = self.file_chunk(t, len);
        let Some(&(_, bytes)) = self.rx_runs.get(&first) else {
            return;
        };
        // A message beyond our reassembly limits can never be delivered.
        if last - first >= self.cfg.max_fragments as u64 || bytes > self.cfg.max_message {
            self.too_big();
            return;
        }
        self.rx_work += 2;
        let (Some(c), Some(e)) = (self.rx_chunks.get(&first), self.rx_chunks.get(&last)) else {
            return;
        };
        if !c.flags.begin || !e.flags.end {
            return; // not complete (yet)
        }
        self.rx_runs.remove(&first);
        if c.flags.unordered {
            self.deliver(first, last);
            return;
        }
        let (stream, ssn) = (c.stream, c.ssn);
        let s = usize::from(stream);
        if ssn != self.next_ssn_in[s] {
            // A stream sequence number already delivered (behind the next
            // one expected) or already waiting is a repeat that would
            // never be delivered: dropped, not held (§6.5, §6.6).
            let behind = ssn.wrapping_sub(self.next_ssn_in[s]) >= 0x8000;
            if behind || self.ready.contains_key(&(stream, ssn)) {
                self.drop_chunks(first, last);
                return;
            }
            self.ready.insert((stream, ssn), (first, last));
            return;
        }
        self.deliver(first, last);
        self.next_ssn_in[s] = ssn.wrapping_add(1);
        while let Some((f, l)) = self.ready.remove(&(stream, self.next_ssn_in[s])) {
            self.deliver(f, l);
            self.next_ssn_in[s] = self.next_ssn_in[s].wrapping_add(1);
        }
    }

    pub(super) fn sack_parts(&self) -> (u32, Vec<(u16, u16)>) {
        let cum = self.rx_cum as u32;
        let mut gaps: Vec<(u16, u16)> = Vec::new();
        for &t in &self.rx_received {
            let off = (t - self.rx_cum).min(u64::from(u16::MAX)) as u16;
            match gaps.last_mut() {
                Some(g) if g.1.wrapping_add(1) == off => g.1 = off,
                _ => {
                    if gaps.len() == MAX_GAP_BLOCKS {
                        break;
                    }
                    gaps.push((off, off));
                }
            }
        }
        (cum, gaps)
    }

    pub(super) fn after_sack_sent(&mut self) {
        self.stop_timer(Timer::Sack);
        self.data_packets_unacked = 0;
        self.dups.clear();
    }
}
