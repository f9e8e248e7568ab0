//! Latency histograms the stack keeps on its loop thread: how long a
//! send-queue work request took from its post to its completion, and how
//! long a connection took to set up. Fixed buckets doubling from 1 µs to
//! about 16.8 s (and one above), counted in place: recording a sample is a
//! division by a constant, a leading-zero count and two additions, with no
//! allocation, no search and no clock read (the stack passes the times of
//! the loop's rounds, which it has already).

/// How many buckets have a bound (the overflow bucket is one more).
pub const BOUNDED: usize = 25;

/// The buckets' upper bounds in nanoseconds (inclusive): 1 µs × 2^i for
/// i in 0..25, 1 µs to 16.777216 s; a sample above the last counts in the
/// overflow bucket.
pub const BOUNDS_NS: [u64; BOUNDED] = {
    let mut b = [0; BOUNDED];
    let mut i = 0;
    while i < BOUNDED {
        b[i] = 1_000 << i;
        i += 1;
    }
    b
};

/// Samples (nanoseconds) counted per bucket of [`BOUNDS_NS`], with their
/// sum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Histogram {
    /// `counts[i]`: samples at most `BOUNDS_NS[i]` and above the bound
    /// before; the last: samples above every bound.
    counts: [u64; BOUNDED + 1],
    sum_ns: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: [0; BOUNDED + 1],
            sum_ns: 0,
        }
    }
}

impl Histogram {
    /// Count one sample of `ns` nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        // The least i with ns <= 1000 << i: the bit length of
        // (ns - 1) / 1000 (0 for ns up to 1 µs).
        let q = ns.saturating_sub(1) / 1_000;
        let i = ((u64::BITS - q.leading_zeros()) as usize).min(BOUNDED);
        self.counts[i] += 1;
        self.sum_ns = self.sum_ns.saturating_add(ns);
    }

    /// Samples counted.
    pub fn count(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// Their sum in nanoseconds.
    pub fn sum_ns(&self) -> u64 {
        self.sum_ns
    }

    /// Each bucket's upper bound in nanoseconds (`None` for the overflow
    /// bucket) and the samples in it (not cumulative).
    pub fn buckets(&self) -> impl Iterator<Item = (Option<u64>, u64)> + '_ {
        BOUNDS_NS
            .iter()
            .map(|&b| Some(b))
            .chain(std::iter::once(None))
            .zip(self.counts.iter().copied())
    }

    /// Add `other`'s samples to these.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.sum_ns = self.sum_ns.saturating_add(other.sum_ns);
    }
}

/// Post-to-completion latency of successful send-queue work requests, per
/// kind of request. Receives are not counted: a receive waits for the
/// peer's Send, which is the peer's timing, not the stack's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompletionLatency {
    /// Sends (with or without invalidate, inline or not).
    pub send: Histogram,
    /// RDMA Writes.
    pub write: Histogram,
    /// RDMA Reads (to the arrival of the whole response).
    pub read: Histogram,
}

impl CompletionLatency {
    /// The histogram of `opcode` (`None` for a receive).
    #[inline]
    pub fn of(&mut self, opcode: iwarp_proto::qp::WcOpcode) -> Option<&mut Histogram> {
        use iwarp_proto::qp::WcOpcode;
        match opcode {
            WcOpcode::Send => Some(&mut self.send),
            WcOpcode::Write => Some(&mut self.write),
            WcOpcode::Read => Some(&mut self.read),
            _ => None,
        }
    }

    /// Count completion `c` of a request posted at `posted`, taken at
    /// `now` (the loop's clock): successful send-queue completions only.
    #[inline]
    pub fn record(&mut self, c: &iwarp_proto::qp::Completion, posted: u64, now: u64) {
        if c.status == iwarp_proto::qp::WcStatus::Success {
            if let Some(h) = self.of(c.opcode) {
                h.record(now.saturating_sub(posted));
            }
        }
    }

    /// Add `other`'s samples to these (another loop's, or the SCTP
    /// part's).
    pub fn merge(&mut self, other: &CompletionLatency) {
        self.send.merge(&other.send);
        self.write.merge(&other.write);
        self.read.merge(&other.read);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_land_in_their_bucket_and_the_sum() {
        assert_eq!(BOUNDS_NS[..4], [1_000, 2_000, 4_000, 8_000]);
        assert_eq!(BOUNDS_NS[BOUNDED - 1], 16_777_216_000);
        let samples = [
            0,
            1_000,
            1_001,
            2_000,
            2_001,
            40_000,
            16_777_216_000,
            16_777_216_001,
            u64::MAX,
        ];
        let mut h = Histogram::default();
        for ns in samples {
            h.record(ns);
        }
        let b: Vec<_> = h.buckets().filter(|&(_, n)| n > 0).collect();
        assert_eq!(
            b,
            [
                (Some(1_000), 2),
                (Some(2_000), 2),
                (Some(4_000), 1),
                (Some(64_000), 1),
                (Some(16_777_216_000), 1),
                (None, 2)
            ]
        );
        // Against the definition: each sample in the first bucket whose
        // bound holds it.
        for ns in (0..5_000_000u64).step_by(997).chain(samples) {
            let mut one = Histogram::default();
            one.record(ns);
            let (bound, _) = one.buckets().find(|&(_, n)| n == 1).unwrap();
            let want = BOUNDS_NS.iter().copied().find(|&b| ns <= b);
            assert_eq!(bound, want, "{ns} ns");
        }
        assert_eq!(h.count(), samples.len() as u64);
        assert_eq!(h.sum_ns(), u64::MAX, "the sum saturates");
        let mut m = Histogram::default();
        m.record(5);
        m.merge(&m.clone());
        assert_eq!((m.count(), m.sum_ns()), (2, 10));
    }
}
