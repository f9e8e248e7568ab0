//! The sender's SACK scoreboard: what the peer reported holding above
//! SND.UNA (RFC 2018 §3), merged into a bounded set of ranges.
//!
//! Blocks are taken only when they lie in (SND.UNA, SND.MAX] (RFC 2018 §3
//! and RFC 6675 §5: others mean nothing or are forged), overlapping and
//! adjacent ones merge, and at most `cap` ranges are kept: when full, the
//! shortest range goes (the highest of equals). Forgetting a block only makes the sender resend data
//! the peer has, so the bound costs a hostile peer bandwidth, never us
//! memory or time. Lookups are a binary search; an insertion moves at most
//! `cap` entries.

/// RFC 9293 §3.4: `a` before `b`, modulo 2^32.
fn lt(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// Sequence-space ranges `[left, right)` above SND.UNA, sorted, disjoint
/// and not adjacent. Ordered by distance from the SND.UNA each call passes:
/// every range lies within (SND.UNA, SND.MAX], less than 2^31 apart, so the
/// order stays the same as SND.UNA advances.
#[derive(Debug, Default)]
pub(crate) struct Scoreboard {
    ranges: Vec<(u32, u32)>,
}

impl Scoreboard {
    /// Ranges held.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ranges.len()
    }

    /// Forget everything (RFC 2018 §8: the receiver may renege; the sender
    /// calls this on a retransmission timeout when it did).
    pub(crate) fn clear(&mut self) {
        self.ranges.clear();
    }

    /// SND.UNA moved to `una`: drop what it covers, cut what it splits.
    pub(crate) fn advance(&mut self, una: u32) {
        // Ranges left below `una` have right edges at "negative" distance,
        // which wrap to the top: they are a prefix in the old order.
        let gone = self
            .ranges
            .iter()
            .take_while(|&&(_, r)| !lt(una, r))
            .count();
        self.ranges.drain(..gone);
        if let Some(first) = self.ranges.first_mut() {
            if lt(first.0, una) {
                first.0 = una;
            }
        }
    }

    /// Take one reported block `[l, r)`, given SND.UNA and SND.MAX. Returns
    /// whether it was valid.
    pub(crate) fn add(&mut self, una: u32, max: u32, l: u32, r: u32, cap: usize) -> bool {
        let d = |x: u32| x.wrapping_sub(una);
        // RFC 2018 §3 / RFC 6675 §5: only blocks above SND.UNA, at most SND.MAX.
        let dr = d(r);
        if dr == 0 || dr > d(max) || !lt(l, r) {
            return false;
        }
        // A left edge below SND.UNA (a D-SACK, RFC 2883, or a block
        // straddling it) is cut to SND.UNA.
        let dl = if lt(l, una) { 0 } else { d(l) };
        if cap == 0 {
            return true;
        }
        // The run of ranges touching [dl, dr].
        let i = self.ranges.partition_point(|&(_, b)| d(b) < dl);
        let j = self.ranges.partition_point(|&(a, _)| d(a) <= dr);
        if i == j {
            self.ranges
                .insert(i, (una.wrapping_add(dl), una.wrapping_add(dr)));
            if self.ranges.len() > cap {
                // Forget the range saying least: the shortest, the highest
                // of equals (the last to be resent).
                let k = (0..self.ranges.len())
                    .min_by_key(|&k| {
                        let (a, b) = self.ranges[k];
                        (b.wrapping_sub(a), core::cmp::Reverse(k))
                    })
                    .unwrap_or(0);
                self.ranges.remove(k);
            }
        } else {
            let lo = dl.min(d(self.ranges[i].0));
            let hi = dr.max(d(self.ranges[j - 1].1));
            self.ranges[i] = (una.wrapping_add(lo), una.wrapping_add(hi));
            self.ranges.drain(i + 1..j);
        }
        true
    }

    /// The right edge of the range holding `seq`, if the peer reported it.
    pub(crate) fn covering(&self, una: u32, seq: u32) -> Option<u32> {
        let d = |x: u32| x.wrapping_sub(una);
        let ds = d(seq);
        let i = self.ranges.partition_point(|&(_, b)| d(b) <= ds);
        self.ranges
            .get(i)
            .filter(|&&(a, _)| d(a) <= ds)
            .map(|&(_, b)| b)
    }

    /// Octets SACKed in all (every range lies in (SND.UNA, SND.MAX]).
    pub(crate) fn total(&self) -> u32 {
        self.ranges
            .iter()
            .fold(0u32, |t, &(a, b)| t.saturating_add(b.wrapping_sub(a)))
    }

    /// Octets SACKed in `[a, b)`, both at or above `una`.
    pub(crate) fn sacked_in(&self, una: u32, a: u32, b: u32) -> u32 {
        let d = |x: u32| x.wrapping_sub(una);
        let (da, db) = (d(a), d(b));
        self.ranges
            .iter()
            .map(|&(l, r)| {
                let (l, r) = (d(l).max(da), d(r).min(db));
                r.saturating_sub(l)
            })
            .fold(0u32, u32::saturating_add)
    }

    /// The highest range, if any.
    pub(crate) fn highest(&self) -> Option<(u32, u32)> {
        self.ranges.last().copied()
    }

    /// The right edge of the last range ending at or below `seq`, if any.
    pub(crate) fn last_end_before(&self, una: u32, seq: u32) -> Option<u32> {
        let d = |x: u32| x.wrapping_sub(una);
        let ds = d(seq);
        let i = self.ranges.partition_point(|&(_, b)| d(b) <= ds);
        i.checked_sub(1).map(|k| self.ranges[k].1)
    }

    /// The left edge of the first range starting above `seq`, if any.
    pub(crate) fn next_start_after(&self, una: u32, seq: u32) -> Option<u32> {
        let d = |x: u32| x.wrapping_sub(una);
        let ds = d(seq);
        let i = self.ranges.partition_point(|&(a, _)| d(a) <= ds);
        self.ranges.get(i).map(|&(a, _)| a)
    }

    /// RFC 6675 §4 IsLost as a frontier: every unSACKed octet below the
    /// returned sequence number has more than `bytes` octets, or at least
    /// `count` discontiguous SACKed ranges, above it, so it is deemed lost.
    /// `None`: no octet is lost by that rule. One pass over the (bounded)
    /// ranges, from the top.
    pub(crate) fn lost_frontier(&self, bytes: u32, count: usize) -> Option<u32> {
        let mut above = 0u32;
        for (k, &(a, b)) in self.ranges.iter().rev().enumerate() {
            above = above.saturating_add(b.wrapping_sub(a));
            if above > bytes || k + 1 >= count {
                return Some(a);
            }
        }
        None
    }

    /// Ranges in order, for tests.
    #[cfg(test)]
    pub(crate) fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_validates_and_bounds() {
        let una = u32::MAX - 100; // across the wrap
        let at = |x: u32| una.wrapping_add(x);
        let mut s = Scoreboard::default();
        let max = at(10_000);
        assert!(s.add(una, max, at(200), at(300), 3));
        assert!(s.add(una, max, at(300), at(400), 3)); // adjacent: merged
        assert!(s.add(una, max, at(600), at(700), 3));
        assert_eq!(s.ranges(), &[(at(200), at(400)), (at(600), at(700))]);
        // Invalid: at or below SND.UNA, above SND.MAX, empty or inverted.
        assert!(!s.add(una, max, at(0).wrapping_sub(50), at(0), 3));
        assert!(!s.add(una, max, at(9_000), at(10_001), 3));
        assert!(!s.add(una, max, at(500), at(500), 3));
        assert!(!s.add(una, max, at(550), at(500), 3));
        // Straddling SND.UNA: cut to it.
        assert!(s.add(una, max, at(0).wrapping_sub(10), at(50), 3));
        assert_eq!(s.ranges()[0], (at(0), at(50)));
        // Full: the shortest goes.
        assert!(s.add(una, max, at(100), at(130), 3));
        assert_eq!(s.len(), 3);
        assert_eq!(
            s.ranges(),
            &[(at(0), at(50)), (at(200), at(400)), (at(600), at(700))]
        );
        assert!(s.add(una, max, at(100), at(199), 3));
        assert_eq!(
            s.ranges(),
            &[(at(100), at(199)), (at(200), at(400)), (at(600), at(700))]
        );
        // Bridging two.
        assert!(s.add(una, max, at(0), at(250), 3));
        assert_eq!(s.ranges(), &[(at(0), at(400)), (at(600), at(700))]);
        assert_eq!(s.covering(una, at(0)), Some(at(400)));
        assert_eq!(s.covering(una, at(399)), Some(at(400)));
        assert_eq!(s.covering(una, at(400)), None);
        assert_eq!(s.covering(una, at(650)), Some(at(700)));
        s.advance(at(150));
        assert_eq!(s.ranges(), &[(at(150), at(400)), (at(600), at(700))]);
        s.advance(at(400));
        assert_eq!(s.ranges(), &[(at(600), at(700))]);
    }

    #[test]
    fn totals_holes_and_the_rfc6675_lost_frontier() {
        let una = u32::MAX - 1000; // across the wrap
        let at = |x: u32| una.wrapping_add(x);
        let max = at(100_000);
        let mut s = Scoreboard::default();
        assert_eq!(s.lost_frontier(2000, 3), None);
        for (l, r) in [(1000, 2000), (3000, 4000), (5000, 5500), (6000, 6100)] {
            assert!(s.add(una, max, at(l), at(r), 8));
        }
        assert_eq!(s.total(), 2600);
        assert_eq!(s.sacked_in(una, at(1500), at(3500)), 1000);
        assert_eq!(s.sacked_in(una, at(0), at(1000)), 0);
        assert_eq!(s.highest(), Some((at(6000), at(6100))));
        assert_eq!(s.next_start_after(una, at(0)), Some(at(1000)));
        assert_eq!(s.next_start_after(una, at(1000)), Some(at(3000)));
        assert_eq!(s.next_start_after(una, at(6000)), None);
        assert_eq!(s.last_end_before(una, at(999)), None);
        assert_eq!(s.last_end_before(una, at(2000)), Some(at(2000)));
        assert_eq!(s.last_end_before(una, at(5999)), Some(at(5500)));
        assert_eq!(s.last_end_before(una, at(9000)), Some(at(6100)));
        // RFC 6675 §4 IsLost: more than (DupThresh - 1) * SMSS octets
        // above, or DupThresh discontiguous ranges above.
        // Three ranges from the top: 6000, 5000, 3000 -> frontier 3000.
        assert_eq!(s.lost_frontier(10_000, 3), Some(at(3000)));
        // More than 1500 octets from the top: 100 + 500 + 1000 at 3000.
        assert_eq!(s.lost_frontier(1500, 10), Some(at(3000)));
        assert_eq!(s.lost_frontier(500, 10), Some(at(5000)));
        assert_eq!(s.lost_frontier(10_000, 10), None);
    }
}
