//! The send buffer ([`SendBuf`], a ring) and the application's side of it:
//! queueing octets and records, external send mode, and where records
//! may be cut into segments.

use super::*;

/// The send buffer: unacknowledged and unsent octets in a ring, so an ACK
/// only moves the head and no octet is ever moved inside the buffer (the
/// earlier contiguous buffer moved what was left on the ACKs that crossed
/// its half: up to one extra copy per octet sent, 9% of a bulk transfer's
/// time in `stack-cost`). A segment's payload is one slice, so where the
/// unsent data wraps around the ring's end a segment ends there
/// ([`SendBuf::contiguous`]): once per trip round the ring.
#[derive(Debug, Default)]
pub(super) struct SendBuf {
    /// The ring; its length is the capacity, grown on demand.
    ring: Vec<u8>,
    /// Index of the oldest octet.
    head: usize,
    /// Octets held.
    len: usize,
    /// Stream offset of the oldest octet held: octets acknowledged so far.
    pub(super) base: u64,
    /// External send mode ([`Connection::set_external_send`]): the buffer
    /// counts octets but holds none; their owner writes them into each
    /// segment's frame ([`ExtPayload`]).
    pub(super) external: bool,
}

impl SendBuf {
    pub(super) fn len(&self) -> usize {
        self.len
    }
    /// Ring index of stream offset `off` (from the oldest octet).
    fn at(&self, off: usize) -> usize {
        let i = self.head + off;
        if i >= self.ring.len() {
            i - self.ring.len()
        } else {
            i
        }
    }
    /// Make room for `need` octets beyond the first `held` (the octets
    /// held, plus any a [`RecordRoom`] has written and not yet committed).
    fn reserve(&mut self, held: usize, need: usize) {
        if held + need > self.ring.len() {
            // Grow (rarely: to the largest amount ever queued), laying the
            // octets held out from index 0.
            let cap = (held + need).next_power_of_two();
            let mut ring = vec![0u8; cap];
            let first = held.min(self.ring.len() - self.head);
            ring[..first].copy_from_slice(&self.ring[self.head..self.head + first]);
            ring[first..held].copy_from_slice(&self.ring[..held - first]);
            self.ring = ring;
            self.head = 0;
        }
    }
    fn extend(&mut self, d: &[u8]) {
        self.reserve(self.len, d.len());
        let tail = self.at(self.len);
        let first = d.len().min(self.ring.len() - tail);
        self.ring[tail..tail + first].copy_from_slice(&d[..first]);
        self.ring[..d.len() - first].copy_from_slice(&d[first..]);
        self.len += d.len();
    }
    pub(super) fn consume(&mut self, n: usize) {
        let n = n.min(self.len);
        self.base += n as u64;
        if self.external {
            self.len -= n;
            return;
        }
        self.head = self.at(n);
        self.len -= n;
        if self.len == 0 {
            self.head = 0;
        }
    }
    /// Octets from offset `off` on that are contiguous in the ring.
    pub(super) fn contiguous(&self, off: usize) -> usize {
        match self.len.saturating_sub(off) {
            0 => 0,
            avail if self.external => avail,
            avail => avail.min(self.ring.len() - self.at(off)),
        }
    }
    /// `len` octets from offset `off`; `len` must be within
    /// [`contiguous`](Self::contiguous)`(off)`.
    pub(super) fn get(&self, off: usize, len: usize) -> &[u8] {
        if len == 0 || self.external {
            return &[];
        }
        let i = self.at(off);
        &self.ring[i..i + len]
    }
}

/// Room for one record written in place in a connection's send buffer
/// ([`Connection::send_record_with`]): the writer asks for pieces with
/// [`append`](Self::append) and fills each one whole; nothing is copied
/// again before the octets go into a frame.
#[derive(Debug)]
pub struct RecordRoom<'a> {
    buf: &'a mut SendBuf,
    /// Most octets this record may take.
    limit: usize,
    written: usize,
}

impl RecordRoom<'_> {
    /// Octets written so far.
    pub fn written(&self) -> usize {
        self.written
    }

    /// Octets that may still be written.
    pub fn remaining(&self) -> usize {
        self.limit - self.written
    }

    /// Take the next piece of the record: at least one and at most `max`
    /// octets, contiguous in the buffer (fewer where the ring wraps), to be
    /// filled whole by the caller; empty only when `max` is 0 or the
    /// record's limit is reached.
    pub fn append(&mut self, max: usize) -> &mut [u8] {
        let n = max.min(self.remaining());
        if n == 0 {
            return &mut [];
        }
        let held = self.buf.len + self.written;
        self.buf.reserve(held, n);
        let i = self.buf.at(held);
        let n = n.min(self.buf.ring.len() - i);
        self.written += n;
        &mut self.buf.ring[i..i + n]
    }
}

impl Connection {
    /// Octets [`send`](Self::send) would accept now.
    pub fn send_room(&self) -> usize {
        if self.fin_queued
            || !matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return 0;
        }
        self.cfg.snd_buf.saturating_sub(self.snd_buf.len())
    }

    /// Queue data; returns octets accepted (bounded by the send buffer).
    /// Nothing in external send mode.
    pub fn send(&mut self, data: &[u8]) -> usize {
        if self.snd_buf.external
            || self.fin_queued
            || !matches!(
                self.state,
                State::SynSent | State::SynReceived | State::Established | State::CloseWait
            )
        {
            return 0;
        }
        let n = data
            .len()
            .min(self.cfg.snd_buf.saturating_sub(self.snd_buf.len()));
        self.snd_buf.extend(&data[..n]);
        n
    }

    /// Queue `data` as one record, all or nothing: segments end on record
    /// boundaries where they can, so a record no longer than a segment
    /// travels whole in one segment (RFC 5044 §8: an MPA-aware sender puts
    /// whole FPDUs in segments). Several records may share a segment; a
    /// record longer than a segment is cut at the segment size. Returns
    /// false, queueing nothing, when the send buffer lacks room.
    pub fn send_record(&mut self, data: &[u8]) -> bool {
        if data.len() > self.send_room() {
            return false;
        }
        let n = self.send(data);
        debug_assert_eq!(n, data.len());
        if n > 0 {
            self.records.push_back(self.data_end());
        }
        true
    }

    /// [`send_record`](Self::send_record) with the record written in place:
    /// `write` fills a [`RecordRoom`] of at most `max` octets (bounded by
    /// the send buffer's room too) and whatever it wrote is queued as one
    /// record. Saves the copy from a caller's buffer into the send buffer.
    /// Returns the octets queued (0: no room, or nothing written).
    pub fn send_record_with(
        &mut self,
        max: usize,
        write: impl FnOnce(&mut RecordRoom<'_>),
    ) -> usize {
        let limit = max.min(self.send_room());
        if limit == 0 || self.snd_buf.external {
            return 0;
        }
        let mut room = RecordRoom {
            buf: &mut self.snd_buf,
            limit,
            written: 0,
        };
        write(&mut room);
        let n = room.written;
        self.snd_buf.len += n;
        if n > 0 {
            self.records.push_back(self.data_end());
        }
        n
    }

    /// Switch to external send mode: the send buffer counts the octets of
    /// each record ([`send_record_external`](Self::send_record_external))
    /// but holds none, and [`poll_transmit_ext`](Self::poll_transmit_ext)
    /// says where each segment's payload lies in the stream for the owner
    /// of the octets to write, first time and on every retransmission. The
    /// owner keeps them until [`acked_offset`](Self::acked_offset) passes
    /// them. Only before anything is queued; false (no change) after.
    pub fn set_external_send(&mut self) -> bool {
        if self.snd_buf.len() > 0 || self.snd_buf.base > 0 {
            return false;
        }
        self.snd_buf.external = true;
        true
    }

    /// In external send mode.
    pub fn is_external_send(&self) -> bool {
        self.snd_buf.external
    }

    /// External send mode: queue a record of `len` octets (segmented as
    /// [`send_record`](Self::send_record) segments). Its octets are at
    /// stream offsets [`queued_offset`](Self::queued_offset) before the
    /// call, onwards. False (nothing queued) when not in external mode,
    /// `len` is 0 or the send buffer lacks room.
    pub fn send_record_external(&mut self, len: usize) -> bool {
        if !self.snd_buf.external || len == 0 || len > self.send_room() {
            return false;
        }
        self.snd_buf.len += len;
        self.records.push_back(self.data_end());
        true
    }

    /// Stream offset below which every octet is acknowledged (and is no
    /// longer needed for retransmission).
    pub fn acked_offset(&self) -> u64 {
        self.snd_buf.base
    }

    /// Stream offset just past the last octet queued.
    pub fn queued_offset(&self) -> u64 {
        self.snd_buf.base + self.snd_buf.len() as u64
    }

    /// Where a segment of at most `len` octets from `snd_nxt` should end:
    /// `Some(l)` with `l` the longest prefix ending on a record boundary, or
    /// with `len` itself when no boundary falls inside and the record runs
    /// past a full segment. `None`: the segment would end inside a record
    /// that a longer segment could finish. `seg_max`: the most data this
    /// segment may carry (the MSS less its options).
    pub(super) fn record_cut(
        &mut self,
        from_seq: u32,
        len: usize,
        seg_max: usize,
    ) -> Option<usize> {
        let una = self.snd_una;
        while let Some(&b) = self.records.front() {
            if le(b, una) {
                self.records.pop_front();
            } else {
                break;
            }
        }
        if self.records.is_empty() || len == 0 {
            return Some(len);
        }
        let from = from_seq.wrapping_sub(una);
        let to = from.wrapping_add(len as u32);
        // Offsets from snd_una grow along the queue.
        let records = &self.records;
        let n = records.len();
        let (first_after, last_within) = if n <= 8 {
            // A few records: two binary searches cost less than the hint.
            (
                records.partition_point(|&b| b.wrapping_sub(una) <= from),
                records.partition_point(|&b| b.wrapping_sub(una) <= to),
            )
        } else {
            let off = |i: usize| records[i].wrapping_sub(una);
            // A segment usually starts where the last cut ended: the hint
            // is the first record past `from` if the records around it
            // say so, else (a retransmission, or records acknowledged and
            // dropped from the front since) a binary search finds it.
            let h = self.cut_hint.min(n);
            let first_after = if (h == 0 || off(h - 1) <= from) && (h == n || off(h) > from) {
                h
            } else {
                records.partition_point(|&b| b.wrapping_sub(una) <= from)
            };
            // The records ending within the segment follow it, each at
            // least one octet long: a walk of at most `len` steps (one or
            // two for FPDUs of about a segment).
            let mut last_within = first_after;
            while last_within < n && off(last_within) <= to {
                last_within += 1;
            }
            self.cut_hint = last_within;
            (first_after, last_within)
        };
        if last_within > first_after {
            let end = self.records[last_within - 1].wrapping_sub(una);
            return Some((end - from) as usize);
        }
        match self.records.get(first_after) {
            // Unrecorded data (plain `send`) beyond the last record.
            None => Some(len),
            Some(&b) => {
                let rec_end = b.wrapping_sub(una);
                if (rec_end - from) as usize > seg_max {
                    Some(len)
                } else {
                    None
                }
            }
        }
    }

    pub(super) fn data_end(&self) -> u32 {
        self.buf_seq.wrapping_add(self.snd_buf.len() as u32)
    }

    fn fin_seq(&self) -> Option<u32> {
        self.fin_queued.then(|| self.data_end())
    }

    pub(super) fn fin_acked(&self) -> bool {
        self.fin_seq().is_some_and(|f| lt(f, self.snd_una))
    }

    /// Where `len` payload octets from buffer offset `off` lie, in external
    /// send mode.
    pub(super) fn ext(&self, off: usize, len: usize) -> Option<ExtPayload> {
        (self.snd_buf.external && len > 0).then(|| ExtPayload {
            offset: self.snd_buf.base + off as u64,
            len,
        })
    }

    /// Our FIN was sent (it lies below SND.MAX).
    pub(super) fn fin_queued_sent(&self) -> bool {
        self.fin_queued && lt(self.data_end(), self.snd_max)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The send ring against a plain queue: random appends, acknowledgements
    /// and reads at every offset, across many trips round the ring and its
    /// growth; every read is one slice that ends at the wrap at the latest
    /// and holds the model's octets.
    #[test]
    fn send_ring_matches_a_queue_across_wraps() {
        use std::collections::VecDeque;
        let mut ring = SendBuf::default();
        let mut model: VecDeque<u8> = VecDeque::new();
        let mut x: u32 = 7;
        let mut next = |m: u32| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 8) % m
        };
        let mut octet = 0u8;
        let mut wraps = 0;
        for _ in 0..20_000 {
            if next(3) > 0 && model.len() < 9000 {
                let n = next(1500) as usize;
                let d: Vec<u8> = (0..n)
                    .map(|_| {
                        octet = octet.wrapping_add(1);
                        octet
                    })
                    .collect();
                if next(2) == 0 {
                    ring.extend(&d);
                } else {
                    // In place, as `send_record_with` writes: pieces of
                    // random size, each filled whole, committed at the end.
                    let mut room = RecordRoom {
                        buf: &mut ring,
                        limit: n,
                        written: 0,
                    };
                    while room.remaining() > 0 {
                        let at = room.written();
                        let piece = room.append(next(700) as usize + 1);
                        assert!(!piece.is_empty());
                        let k = piece.len();
                        piece.copy_from_slice(&d[at..at + k]);
                    }
                    assert!(room.append(1).is_empty(), "past the record's limit");
                    let w = room.written();
                    ring.len += w;
                }
                model.extend(&d);
            } else {
                let n = next(2000) as usize;
                ring.consume(n);
                model.drain(..n.min(model.len()));
            }
            assert_eq!(ring.len(), model.len());
            let off = next(model.len() as u32 + 1) as usize;
            let c = ring.contiguous(off);
            assert!(c <= model.len() - off);
            assert_eq!(c == 0, off == model.len(), "only the end is empty");
            if c < model.len() - off {
                wraps += 1;
            }
            let got = ring.get(off, c);
            assert!(got.iter().eq(model.range(off..off + c)));
        }
        assert!(wraps > 100, "the ring wrapped only {wraps} times");
    }
}
