//! The receive side's out-of-order store: data that arrived above a gap,
//! held until the gap fills.
//!
//! Octets live in one buffer indexed by stream offset (a copy per octet,
//! never a move of what is already held), and which octets are held is a
//! set of coalesced ranges: overlapping and adjacent arrivals merge, so a
//! peer holds at most `max_ranges` ranges (a segment that would open one
//! more is dropped — it is unacknowledged, the peer sends it again) and at
//! most a receive window of octets. A segment costs O(log n) in the range
//! set plus its own length; SACK blocks (RFC 2018 §4) come from a short
//! most-recently-received list, not from a walk of the store.

use std::collections::{BTreeMap, VecDeque};

/// SACK blocks remembered for reporting (RFC 2018 §3: at most four fit).
const REPORTED: usize = 4;

/// Out-of-order data by stream offset (offsets count octets from the first
/// data octet; the caller's `base` is its RCV.NXT as such an offset).
#[derive(Debug, Default)]
pub(crate) struct Reassembly {
    /// Octets from stream offset `buf_base` on; octets in gaps are filler.
    buf: VecDeque<u8>,
    buf_base: u64,
    /// Held ranges, start → end (exclusive): disjoint, not adjacent, all
    /// ending above the caller's `base` once [`sync`](Self::sync) ran.
    ranges: BTreeMap<u64, u64>,
    /// One offset inside each range to report in SACK, the range of the
    /// most recent arrival first (RFC 2018 §4). Ranges only grow until they
    /// are delivered, so an offset stays inside its (possibly merged) range.
    reported: [Option<u64>; REPORTED],
    /// Range-set entries visited (a bounded number per segment, whatever
    /// a peer sends: the tests' and the invariant fuzzer's cost bound).
    pub(crate) steps: u64,
}

/// What [`Reassembly::insert`] did with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Insert {
    /// Held (alone or merged with held data).
    Held,
    /// Dropped: it would have opened a range beyond the bound.
    Dropped,
}

impl Reassembly {
    /// Nothing held.
    pub(crate) fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Distinct ranges held.
    #[cfg(test)]
    pub(crate) fn ranges(&self) -> usize {
        self.ranges.len()
    }

    /// Octets of buffer allocated: what a peer makes us hold out of order
    /// (held octets, the gaps between them, and room reserved to grow).
    pub(crate) fn allocated(&self) -> usize {
        self.buf.capacity()
    }

    /// Give the buffer back when nothing is held (a filled gap keeps its
    /// capacity for the next loss until then).
    pub(crate) fn trim(&mut self) {
        if self.ranges.is_empty() {
            self.buf = VecDeque::new();
        }
    }

    /// Octets of buffer in use (held octets and the gaps between them).
    #[cfg(test)]
    pub(crate) fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Octets the buffer can hold before it reallocates.
    #[cfg(test)]
    pub(crate) fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Forget what lies below `base` (delivered in order meanwhile).
    fn sync(&mut self, base: u64) {
        if base <= self.buf_base {
            return;
        }
        let k = usize::try_from(base - self.buf_base).unwrap_or(usize::MAX);
        self.buf.drain(..k.min(self.buf.len()));
        self.buf_base = base;
        while let Some((_, &end)) = self.ranges.first_key_value() {
            if end > base {
                break;
            }
            self.ranges.pop_first();
            self.steps += 1;
        }
        if self.ranges.is_empty() {
            self.buf.clear();
        }
        self.reported = compact(self.reported.map(|o| o.filter(|&o| o >= base)));
    }

    /// Hold `data`, found at stream offset `off` above `base`; the caller has
    /// trimmed it to the window, and `limit` is the window in octets (the
    /// most buffer the store grows to).
    pub(crate) fn insert(
        &mut self,
        base: u64,
        off: u64,
        data: &[u8],
        max_ranges: usize,
        limit: usize,
    ) -> Insert {
        debug_assert!(off > base && !data.is_empty());
        self.sync(base);
        if self.ranges.is_empty() {
            self.buf_base = base;
        }
        let end = off + data.len() as u64;
        // The ranges this one touches are a run: the last one starting at or
        // before `off` (if it reaches `off`), and those starting in (off, end].
        let pred = self
            .ranges
            .range(..=off)
            .next_back()
            .filter(|&(_, &e)| e >= off)
            .map(|(&s, &e)| (s, e));
        let touches = pred.is_some() || self.ranges.range(off..=end).next().is_some();
        if !touches && self.ranges.len() >= max_ranges {
            return Insert::Dropped;
        }
        // Copy the octets in.
        let (at, need) = (
            (off - self.buf_base) as usize,
            (end - self.buf_base) as usize,
        );
        // (`>=` for the first `>` is an equivalent mutant: a resize to the
        // same length does nothing, and `need` then fits the capacity.)
        if need > self.buf.len() {
            if need > self.buf.capacity() {
                let want = (2 * self.buf.capacity()).clamp(need, limit.max(need));
                self.buf.reserve_exact(want - self.buf.len());
            }
            self.buf.resize(need, 0);
        }
        let (a, b) = self.buf.as_mut_slices();
        if at < a.len() {
            let k = (a.len() - at).min(data.len());
            a[at..at + k].copy_from_slice(&data[..k]);
            b[..data.len() - k].copy_from_slice(&data[k..]);
        } else {
            let at = at - a.len();
            b[at..at + data.len()].copy_from_slice(data);
        }
        // Merge the run into one range.
        let (mut start, mut stop) = (off, end);
        if let Some((s, e)) = pred {
            self.ranges.remove(&s);
            (start, stop) = (s, stop.max(e));
        }
        while let Some((&s, &e)) = self.ranges.range(off..=end).next() {
            self.ranges.remove(&s);
            stop = stop.max(e);
            self.steps += 1;
        }
        self.ranges.insert(start, stop);
        self.steps += 1;
        // RFC 2018 §4: the block holding the newest segment first, then the
        // most recently reported others that are not part of it.
        let mut reported = [None; REPORTED];
        reported[0] = Some(off);
        let others = self
            .reported
            .into_iter()
            .flatten()
            .filter(|&o| !(start..stop).contains(&o));
        for (slot, o) in reported[1..].iter_mut().zip(others) {
            *slot = Some(o);
        }
        self.reported = reported;
        Insert::Held
    }

    /// Whether every octet of `[off, end)` is held already (a duplicate,
    /// to be reported in a D-SACK block, RFC 2883 §4).
    pub(crate) fn holds(&self, off: u64, end: u64) -> bool {
        self.ranges
            .range(..=off)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }

    /// Hand `deliver` the held octets that now continue the stream at
    /// `base`, if any; returns how many.
    pub(crate) fn pop(&mut self, base: u64, deliver: &mut dyn FnMut(&[u8])) -> usize {
        self.sync(base);
        let Some((&start, &end)) = self.ranges.first_key_value() else {
            return 0;
        };
        if start > base {
            return 0;
        }
        let n = (end - base) as usize;
        let (a, b) = self.buf.as_slices();
        if a.len() >= n {
            deliver(&a[..n]);
        } else {
            deliver(a);
            deliver(&b[..n - a.len()]);
        }
        self.sync(end);
        n
    }

    /// The blocks to report in SACK as (start, end) stream offsets, the one
    /// holding the most recent arrival first (RFC 2018 §4). The caller
    /// passes its `base` as it stands (ranges below it were delivered).
    pub(crate) fn sack_blocks(&self, base: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        let mut seen: [Option<u64>; REPORTED] = [None; REPORTED];
        self.reported
            .into_iter()
            .flatten()
            .filter(move |&o| o >= base)
            .filter_map(|o| {
                let (&s, &e) = self.ranges.range(..=o).next_back()?;
                // Always true: a reported offset starts a held segment,
                // and its range only grows until delivered (then `o` is
                // below `base`); so `<=` here is an equivalent mutant.
                (o < e).then_some((s, e))
            })
            .enumerate()
            .filter_map(move |(i, (s, e))| {
                if seen.contains(&Some(s)) {
                    return None;
                }
                seen[i] = Some(s);
                Some((s.max(base), e))
            })
    }

    /// How many SACK blocks [`sack_blocks`](Self::sack_blocks) gives at most.
    pub(crate) fn sack_len(&self) -> usize {
        self.reported.iter().flatten().count()
    }
}

/// Move the `Some`s to the front, keeping their order.
fn compact<const N: usize>(a: [Option<u64>; N]) -> [Option<u64>; N] {
    let mut out = [None; N];
    for (slot, v) in out.iter_mut().zip(a.into_iter().flatten()) {
        *slot = Some(v);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn collect(r: &mut Reassembly, base: u64) -> Vec<u8> {
        let mut got = Vec::new();
        r.pop(base, &mut |d| got.extend_from_slice(d));
        got
    }

    #[test]
    fn merges_overlapping_and_adjacent_arrivals() {
        let mut r = Reassembly::default();
        assert_eq!(r.insert(0, 10, b"klm", 8, 100), Insert::Held);
        assert_eq!(r.insert(0, 13, b"no", 8, 100), Insert::Held); // adjacent
        assert_eq!(r.insert(0, 5, b"fgh", 8, 100), Insert::Held); // apart
        assert_eq!(r.ranges(), 2);
        assert_eq!(r.insert(0, 7, b"hijk", 8, 100), Insert::Held); // bridges both
        assert_eq!(r.ranges(), 1);
        assert_eq!(r.sack_blocks(0).collect::<Vec<_>>(), vec![(5, 15)]);
        assert_eq!(collect(&mut r, 3), b"");
        assert_eq!(collect(&mut r, 5), b"fghijklmno");
        assert!(r.is_empty());
        assert_eq!(r.buffered(), 0);
    }

    #[test]
    fn bound_on_ranges_drops_what_would_open_one_more() {
        let mut r = Reassembly::default();
        for i in 0..4 {
            assert_eq!(r.insert(0, 2 + 2 * i, b"x", 4, 100), Insert::Held);
        }
        assert_eq!(r.insert(0, 20, b"y", 4, 100), Insert::Dropped);
        // Extending a held range is still fine.
        assert_eq!(r.insert(0, 9, b"z", 4, 100), Insert::Held);
        assert_eq!(r.ranges(), 4);
    }

    /// A segment that ends exactly at the buffer's capacity fits: the
    /// buffer does not grow (what a peer makes us hold is what it sent,
    /// plus the doubling room of an earlier growth, not a second doubling).
    #[test]
    fn a_segment_ending_at_the_capacity_does_not_grow_the_buffer() {
        let mut r = Reassembly::default();
        assert_eq!(r.insert(0, 1, &[1; 10], 8, 1000), Insert::Held);
        // Past the capacity: it grows, doubling (to at least 2 × 11).
        assert_eq!(r.insert(0, 12, &[2; 2], 8, 1000), Insert::Held);
        let cap = r.capacity();
        assert!(cap > r.buffered(), "room to grow: {cap} > {}", r.buffered());
        // A segment ending exactly at the capacity (in buffer offsets, the
        // buffer starting at base 0).
        let off = cap as u64 - 2;
        assert!(off > 14, "a gap before it");
        assert_eq!(r.insert(0, off, &[3; 2], 8, 1000), Insert::Held);
        assert_eq!(r.buffered(), cap);
        assert_eq!(r.capacity(), cap, "no growth for a segment that fits");
    }

    #[test]
    fn sack_blocks_newest_first_then_recently_reported() {
        let mut r = Reassembly::default();
        for off in [10, 20, 30, 40, 50] {
            r.insert(0, off, b"ab", 8, 100);
        }
        let blocks: Vec<_> = r.sack_blocks(0).collect();
        assert_eq!(blocks, vec![(50, 52), (40, 42), (30, 32), (20, 22)]);
        // An arrival extending an older range brings it to the front.
        r.insert(0, 22, b"c", 8, 100);
        let blocks: Vec<_> = r.sack_blocks(0).collect();
        assert_eq!(blocks, vec![(20, 23), (50, 52), (40, 42), (30, 32)]);
        // One joining two reported ranges reports the merged range once.
        r.insert(0, 32, b"12345678", 8, 100);
        let blocks: Vec<_> = r.sack_blocks(0).collect();
        assert_eq!(blocks, vec![(30, 42), (20, 23), (50, 52)]);
        // Delivered ranges are no longer reported.
        assert_eq!(collect(&mut r, 20), b"abc");
        let blocks: Vec<_> = r.sack_blocks(23).collect();
        assert_eq!(blocks, vec![(30, 42), (50, 52)]);
    }

    #[test]
    fn wraps_in_the_ring_and_copes_with_in_order_overlap() {
        let mut r = Reassembly::default();
        let mut base = 0;
        let mut out = Vec::new();
        // Keep the buffer busy across many bases so its ring wraps.
        for round in 0..50u64 {
            let chunk: Vec<u8> = (0..7).map(|i| (round * 7 + i) as u8).collect();
            r.insert(base, base + 3, &chunk[3..], 4, 64);
            // In-order data covering part of the held range arrives inline.
            out.extend_from_slice(&chunk[..4]);
            base += 4;
            let mut got = Vec::new();
            base += r.pop(base, &mut |d| got.extend_from_slice(d)) as u64;
            out.extend_from_slice(&got);
            assert!(r.is_empty());
        }
        let want: Vec<u8> = (0..350u64).map(|i| i as u8).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn buffer_spans_from_the_base_not_from_offset_zero() {
        // Far into the stream, a hole of 10 octets then 4 held: the buffer
        // covers the hole and the data, nothing below the base.
        let mut r = Reassembly::default();
        assert_eq!(r.insert(1000, 1010, b"abcd", 8, 100), Insert::Held);
        assert_eq!(r.buffered(), 14);
        assert!(r.capacity() <= 100, "{}", r.capacity());
        // In-order data moved the base to 1005: the five octets below it go,
        // the held ones stay where they were.
        assert_eq!(collect(&mut r, 1005), b"");
        assert_eq!(r.buffered(), 9);
        assert_eq!(r.insert(1005, 1014, b"efg", 8, 100), Insert::Held);
        assert_eq!(r.buffered(), 12);
        assert_eq!(collect(&mut r, 1010), b"abcdefg");
        assert!(r.is_empty());
    }

    #[test]
    fn buffer_doubles_up_to_the_limit_then_grows_only_as_needed() {
        // One octet at a time after a one-octet hole: the buffer needs
        // `off + 1` octets, and its capacity doubles (amortised O(1) per
        // octet) from the first need, is cut to the limit, and past the
        // limit is exactly what is needed.
        const LIMIT: usize = 100;
        let mut r = Reassembly::default();
        let mut caps = Vec::new();
        for off in 1..=110u64 {
            assert_eq!(r.insert(0, off, b"x", 8, LIMIT), Insert::Held);
            caps.push(r.capacity());
        }
        let want: Vec<usize> = (2..=111usize)
            .map(|need| {
                if need <= LIMIT {
                    need.next_power_of_two().min(LIMIT)
                } else {
                    need
                }
            })
            .collect();
        assert_eq!(caps, want);
        // Delivered, the store keeps its capacity, and data that fits it
        // again (here 4 octets in 4) does not reallocate.
        let mut r = Reassembly::default();
        r.insert(0, 1, b"a", 8, LIMIT);
        r.insert(0, 2, b"b", 8, LIMIT);
        assert_eq!(collect(&mut r, 1), b"ab");
        assert_eq!((r.buffered(), r.capacity()), (0, 4));
        assert_eq!(r.insert(3, 4, b"cde", 8, LIMIT), Insert::Held);
        assert_eq!((r.buffered(), r.capacity()), (4, 4));
    }

    #[test]
    fn allocated_is_the_buffer_capacity_and_trim_frees_it_only_when_empty() {
        // Nothing held, nothing allocated.
        let mut r = Reassembly::default();
        assert_eq!(r.allocated(), 0);
        // Three octets after a two-octet hole: five octets of buffer, the
        // first need allocated exactly (doubling starts from zero).
        assert_eq!(r.insert(0, 2, b"abc", 8, 100), Insert::Held);
        assert_eq!((r.buffered(), r.allocated()), (5, 5));
        // Something is held: trim keeps the buffer and what it holds.
        r.trim();
        assert_eq!((r.buffered(), r.allocated()), (5, 5));
        // Delivered, the capacity stays for the next loss...
        assert_eq!(collect(&mut r, 2), b"abc");
        assert!(r.is_empty());
        assert_eq!((r.buffered(), r.allocated()), (0, 5));
        // ...until trim gives it back.
        r.trim();
        assert_eq!(r.allocated(), 0);
    }

    #[test]
    fn steps_count_each_range_set_entry_visited() {
        let mut r = Reassembly::default();
        // A range on its own: one entry written.
        r.insert(0, 10, b"ab", 8, 100);
        assert_eq!(r.steps, 1);
        r.insert(0, 20, b"cd", 8, 100);
        assert_eq!(r.steps, 2);
        // Bridging both: the successor removed (one), the merged range
        // written (one); the predecessor is found by one lookup, uncounted.
        r.insert(0, 12, b"xxxxxxxx", 8, 100);
        assert_eq!((r.ranges(), r.steps), (1, 4));
        // Delivery drops the one range below the new base (one).
        assert_eq!(collect(&mut r, 10), b"abxxxxxxxxcd");
        assert_eq!(r.steps, 5);
        // Two ranges passed by in-order data are dropped one step each
        // when the next segment comes in above them.
        r.insert(22, 30, b"e", 8, 100);
        r.insert(22, 40, b"f", 8, 100);
        assert_eq!(r.steps, 7);
        r.insert(45, 50, b"g", 8, 100);
        assert_eq!((r.ranges(), r.steps), (1, 10));
    }
}
