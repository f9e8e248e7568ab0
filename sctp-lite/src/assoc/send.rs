//! The send queue and the user's side of it: messages queued as DATA
//! chunks (cut into fragments, RFC 9260 §6.9), chunks whose payload the
//! caller writes at each transmission ([`Association::send_ext`]), the
//! acknowledged payload vectors kept for reuse
//! ([`Association::take_spare`]), and the counts that let the per-packet
//! and per-SACK work skip the queue.

use super::*;

/// The payload of a chunk the caller writes at each transmission
/// ([`Association::send_ext`]): a few octets of its own, then `len`
/// octets the caller's fill writes (key `key`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ExtTail {
    prefix: [u8; EXT_PREFIX_MAX],
    prefix_len: u8,
    key: u64,
    len: u32,
}

#[derive(Debug)]
pub(super) struct OutChunk {
    pub(super) tsn: u32,
    pub(super) stream: u16,
    pub(super) ssn: u16,
    pub(super) ppid: u32,
    pub(super) flags: DataFlags,
    /// The payload, or nothing when `ext` describes it.
    pub(super) data: Vec<u8>,
    pub(super) ext: Option<ExtTail>,
    pub(super) sent_count: u32,
    pub(super) in_flight: bool,
    pub(super) gap_acked: bool,
    pub(super) needs_rtx: bool,
    pub(super) missing: u8,
    pub(super) fast_rtx_done: bool,
}

impl OutChunk {
    /// Payload octets.
    #[inline]
    pub(super) fn len(&self) -> usize {
        match &self.ext {
            None => self.data.len(),
            Some(e) => usize::from(e.prefix_len) + e.len as usize,
        }
    }

    /// Write the DATA chunk (§3.3.1) into `buf`, padded; `None` when it
    /// does not fit or the fill of an external payload fails (`*failed`).
    #[inline(always)]
    pub(super) fn emit<F: FnMut(u64, &mut [u8]) -> bool>(
        &self,
        buf: &mut [u8],
        fill: &mut F,
        failed: &mut bool,
    ) -> Option<usize> {
        let Some(e) = &self.ext else {
            let r = DataRepr {
                flags: self.flags,
                tsn: self.tsn,
                stream_id: self.stream,
                ssn: self.ssn,
                ppid: self.ppid,
                payload: &self.data,
            };
            return r.emit(buf).ok();
        };
        let total = DATA_HEADER_LEN + self.len();
        let padded = (total + 3) & !3;
        if padded > buf.len() || total > usize::from(u16::MAX) {
            return None;
        }
        let prefix = &e.prefix[..usize::from(e.prefix_len)];
        let r = DataRepr {
            flags: self.flags,
            tsn: self.tsn,
            stream_id: self.stream,
            ssn: self.ssn,
            ppid: self.ppid,
            payload: prefix,
        };
        r.emit(buf).ok()?;
        // The Chunk Length covers the tail the fill writes (§3.3.1: the
        // header and the user data, without padding).
        buf[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        let at = DATA_HEADER_LEN + prefix.len();
        if !fill(e.key, &mut buf[at..total]) {
            *failed = true;
            return None;
        }
        buf[total..padded].fill(0);
        Some(padded)
    }
}

impl Association {
    /// Queues a user message; returns the TSN of its last chunk.
    pub fn send(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: &[u8],
    ) -> Result<u32, SendError> {
        self.check_send(stream, data.len())?;
        Ok(self.queue_message(stream, ppid, unordered, data, None))
    }

    /// [`send`](Self::send) of a message the caller gives away: one that
    /// fits one DATA chunk (the common case for DDP Segments, RFC 5043
    /// §9) becomes the chunk's payload without a copy. On refusal the
    /// message comes back with the reason.
    pub fn send_owned(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: Vec<u8>,
    ) -> Result<u32, (SendError, Vec<u8>)> {
        if let Err(e) = self.check_send(stream, data.len()) {
            return Err((e, data));
        }
        if data.len() > self.cfg.max_chunk_payload().max(1) {
            return Ok(self.queue_message(stream, ppid, unordered, &data, None));
        }
        Ok(self.queue_message(stream, ppid, unordered, &[], Some(data)))
    }

    /// Queues a one-chunk message whose payload is `prefix` (at most
    /// [`EXT_PREFIX_MAX`] octets) and then `len` octets the caller writes
    /// whenever the chunk is sent, first time and retransmissions alike
    /// (`fill(key, dst)` of [`poll_transmit_with`](Self::poll_transmit_with)):
    /// the caller keeps what the octets come from until the chunk's TSN,
    /// returned here, is acknowledged ([`is_acked`](Self::is_acked)). It
    /// counts against the send buffer like any message.
    pub fn send_ext(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        prefix: &[u8],
        key: u64,
        len: usize,
    ) -> Result<u32, SendError> {
        let total = prefix.len().saturating_add(len);
        self.check_send(stream, total)?;
        let max = self.cfg.max_chunk_payload().max(1);
        if prefix.len() > EXT_PREFIX_MAX || total > max || len > u32::MAX as usize {
            return Err(SendError::TooLarge { len: total, max });
        }
        let mut p = [0u8; EXT_PREFIX_MAX];
        p[..prefix.len()].copy_from_slice(prefix);
        let tsn = self.queue_message(stream, ppid, unordered, &[], Some(Vec::new()));
        if let Some(c) = self.out.back_mut() {
            c.ext = Some(ExtTail {
                prefix: p,
                prefix_len: prefix.len() as u8,
                key,
                len: len as u32,
            });
        }
        self.out_bytes += total;
        Ok(tsn)
    }

    /// An acknowledged chunk's payload vector, for the caller's next
    /// [`send_owned`](Self::send_owned): a sender of whole-chunk messages
    /// reuses its buffers instead of allocating one per chunk (a 1.4 KiB
    /// allocation and its free cost about 600 instructions, 6 % of a DDP
    /// Write stream's). It still holds the old payload, so that a caller
    /// that overwrites it need not zero it first (15 % of the stream's
    /// instructions at MTU 9000).
    pub fn take_spare(&mut self) -> Option<Vec<u8>> {
        let v = self.spare.pop()?;
        self.spare_capacity -= v.capacity();
        Some(v)
    }

    /// Keep an acknowledged chunk's payload vector for
    /// [`take_spare`](Self::take_spare), within the room the send queue
    /// does not use ([`SPARE_CAPACITY`]).
    pub(super) fn keep_spare(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        let room = self.cfg.send_buffer.saturating_sub(self.out_bytes);
        if cap >= SPARE_MIN && self.spare_capacity + cap <= room {
            self.spare_capacity += cap;
            self.spare.push(v);
        }
    }

    /// With the send queue empty, spares beyond [`SPARE_CAPACITY`] (and a
    /// quarter of the send buffer) are freed.
    pub(super) fn trim_spares(&mut self) {
        let bound = SPARE_CAPACITY.min(self.cfg.send_buffer / 4);
        while self.spare_capacity > bound {
            let Some(v) = self.spare.pop() else { break };
            self.spare_capacity -= v.capacity();
        }
    }

    /// The checks of [`send`](Self::send) for a message of `len` octets.
    fn check_send(&self, stream: u16, len: usize) -> Result<(), SendError> {
        if self.state != State::Established {
            return Err(SendError::NotEstablished);
        }
        if stream >= self.out_streams {
            return Err(SendError::InvalidStream {
                stream,
                streams: self.out_streams,
            });
        }
        if len == 0 {
            return Err(SendError::Empty);
        }
        if len > self.cfg.max_message {
            return Err(SendError::TooLarge {
                len,
                max: self.cfg.max_message,
            });
        }
        if self.out_bytes.saturating_add(len) > self.cfg.send_buffer {
            return Err(SendError::BufferFull);
        }
        Ok(())
    }

    /// Queues a message that passed [`Self::check_send`]: `data` cut into
    /// DATA chunks (§6.9), or `whole`, one chunk's payload taken as is.
    fn queue_message(
        &mut self,
        stream: u16,
        ppid: u32,
        unordered: bool,
        data: &[u8],
        whole: Option<Vec<u8>>,
    ) -> u32 {
        let ssn = if unordered {
            0
        } else {
            let s = &mut self.next_ssn_out[usize::from(stream)];
            let v = *s;
            *s = s.wrapping_add(1);
            v
        };
        let chunk = |tsn: u32, begin: bool, end: bool, data: Vec<u8>| OutChunk {
            tsn,
            stream,
            ssn,
            ppid,
            flags: DataFlags {
                immediate: false,
                unordered,
                begin,
                end,
            },
            data,
            ext: None,
            sent_count: 0,
            in_flight: false,
            gap_acked: false,
            needs_rtx: false,
            missing: 0,
            fast_rtx_done: false,
        };
        let last = self.next_tsn;
        if let Some(w) = whole {
            self.next_tsn = self.next_tsn.wrapping_add(1);
            self.out_bytes += w.len();
            self.out.push_back(chunk(last, true, true, w));
            return last;
        }
        let per = self.cfg.max_chunk_payload().max(1);
        let n = data.len().div_ceil(per);
        let mut last = self.next_tsn;
        for (i, part) in data.chunks(per).enumerate() {
            last = self.next_tsn;
            self.next_tsn = self.next_tsn.wrapping_add(1);
            self.out
                .push_back(chunk(last, i == 0, i + 1 == n, part.to_vec()));
        }
        self.out_bytes += data.len();
        last
    }

    pub(super) fn has_sendable(&self) -> bool {
        // Never-sent chunks are a suffix of `out`.
        self.rtx_marked > 0 || self.out.back().is_some_and(|c| c.sent_count == 0)
    }

    /// Debug builds (every test) recount what `rtx_marked`, `gap_acked_n`
    /// and [`Self::first_unsent`] stand for.
    pub(super) fn check_out_counts(&self) {
        if cfg!(debug_assertions) {
            let marked = self.out.iter().filter(|c| c.needs_rtx).count();
            let gapped = self.out.iter().filter(|c| c.gap_acked).count();
            let sent = self.out.iter().take_while(|c| c.sent_count > 0).count();
            debug_assert_eq!((marked, gapped), (self.rtx_marked, self.gap_acked_n));
            debug_assert!(self.out.iter().skip(sent).all(|c| c.sent_count == 0));
        }
    }

    /// Index in `out` of the first chunk never sent (`out.len()` if none):
    /// chunks go out in queue order, so those sent are a prefix.
    #[inline]
    pub(super) fn first_unsent(&self) -> usize {
        self.out.partition_point(|c| c.sent_count > 0)
    }
}
