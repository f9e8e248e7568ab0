//! What the tests' simulated links share: one seeded generator ([`Rng`]),
//! one description of link faults ([`Faults`], parts per million) and one
//! datagram link between two endpoints in virtual time ([`DatagramLink`]);
//! and one frame link with several queues per end ([`multiqueue`]).
//!
//! No unsafe; beside std it depends only on the frame-device trait
//! (`iwarp-frame`) and `crossbeam-queue`, so a protocol crate can take it
//! as a dev-dependency. [`Rng`], [`Faults`] and [`DatagramLink`] read no
//! clock: a run over them is a pure function of its seed and of what the
//! test does. The frame-level links of the host stack (with Ethernet, poll
//! loops and loss bursts) stay in `iwarp-datapath`'s `link` module; they
//! draw from the same generator (`iwarp_frame::SplitMix64`, whose outputs
//! [`Rng`] reproduces).
//!
//! [`MultiQueuePair`] is the exception to both: a frame link in memory
//! whose ends have `n` queues each, every queue a
//! [`FrameDevice`](iwarp_frame::FrameDevice) of its own that a thread can
//! own, and a steering function (RSS's `Rss::queue_of_frame` from
//! `iwarp-net`, or any closure) that picks the receiving queue of each
//! frame; frames it does not steer (ARP) go to queue 0, as on RSS NICs.
//! Its devices can sleep until a frame arrives, which waits on the wall
//! clock.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod multiqueue;

pub use multiqueue::{MultiQueuePair, QueueDevice};

use std::collections::BTreeMap;

/// SplitMix64: small, seeded, deterministic; the same sequence as
/// `iwarp_frame::SplitMix64` for the same seed. Not for anything that needs
/// unpredictability.
///
/// Every draw but [`below`](Rng::below)`(0)` and
/// [`range`](Rng::range) over one value takes exactly one value
/// ([`fill`](Rng::fill) one per eight octets), so a change of rates keeps
/// the sequence of draws.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rng(u64);

impl Rng {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `num / den` (always draws; `den` 0 counts as 1).
    pub fn chance(&mut self, num: u64, den: u64) -> bool {
        self.next_u64() % den.max(1) < num
    }

    /// True with probability `per_mille` / 1000 (always draws).
    pub fn chance_per_mille(&mut self, per_mille: u64) -> bool {
        self.chance(per_mille, 1000)
    }

    /// True with probability `ppm` / 1,000,000 (always draws).
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        self.chance(u64::from(ppm), 1_000_000)
    }

    /// A value below `n` (0 for `n` = 0, without a draw).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.next_u64() % n,
        }
    }

    /// A value in `lo..=hi` (`lo` when `hi <= lo`, without a draw).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        if hi <= lo {
            return lo;
        }
        lo + self.next_u64() % (hi - lo + 1)
    }

    /// Fill `buf` with random octets (one draw per eight, little-endian).
    pub fn fill(&mut self, buf: &mut [u8]) {
        for c in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
    }
}

/// Seeded link faults, each in parts per million of the packets sent (the
/// unit of `iwarp_datapath::link::virtual_link::LinkFaults`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Packets dropped.
    pub loss: u32,
    /// Packets delivered twice.
    pub dup: u32,
    /// Copies delayed by an extra random time (below
    /// [`LinkConfig::reorder_max`]), so later packets overtake them.
    pub reorder: u32,
    /// Packets with one bit flipped.
    pub corrupt: u32,
}

impl Faults {
    /// No faults.
    pub const NONE: Faults = Faults {
        loss: 0,
        dup: 0,
        reorder: 0,
        corrupt: 0,
    };

    /// Faults given in per mille (as the older test links had them).
    pub const fn per_mille(loss: u32, dup: u32, reorder: u32, corrupt: u32) -> Faults {
        Faults {
            loss: loss * 1000,
            dup: dup * 1000,
            reorder: reorder * 1000,
            corrupt: corrupt * 1000,
        }
    }

    /// Whether any fault is possible.
    pub fn any(&self) -> bool {
        *self != Faults::NONE
    }
}

/// One direction of a [`DatagramLink`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Dir {
    /// From endpoint A to endpoint B.
    AtoB,
    /// From endpoint B to endpoint A.
    BtoA,
}

impl Dir {
    /// The direction from A to B when `to_b`.
    pub fn to_b(to_b: bool) -> Dir {
        if to_b {
            Dir::AtoB
        } else {
            Dir::BtoA
        }
    }

    /// The other direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::AtoB => Dir::BtoA,
            Dir::BtoA => Dir::AtoB,
        }
    }

    fn index(self) -> usize {
        match self {
            Dir::AtoB => 0,
            Dir::BtoA => 1,
        }
    }
}

/// Settings of a [`DatagramLink`]; times in the caller's unit (the tests
/// use nanoseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LinkConfig {
    /// Seed of every fault decision.
    pub seed: u64,
    /// Faults, the same both ways.
    pub faults: Faults,
    /// One-way delay.
    pub latency: u64,
    /// A reordered copy arrives up to this much (exclusive) after its time.
    pub reorder_max: u64,
}

impl LinkConfig {
    /// A lossless link with one-way delay `latency`.
    pub fn clean(latency: u64) -> LinkConfig {
        LinkConfig {
            seed: 0,
            faults: Faults::NONE,
            latency,
            reorder_max: 0,
        }
    }
}

/// What a [`DatagramLink`] did, both ways together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets handed to [`send`](DatagramLink::send).
    pub sent: u64,
    /// Packets dropped while the link was down.
    pub down: u64,
    /// Packets lost to the `loss` fault.
    pub lost: u64,
    /// Packets sent twice.
    pub duplicated: u64,
    /// Copies given an extra delay.
    pub reordered: u64,
    /// Packets with a bit flipped.
    pub corrupted: u64,
    /// Copies handed out by [`pop_due`](DatagramLink::pop_due).
    pub delivered: u64,
}

/// Two endpoints, A and B, joined by a datagram link in virtual time: each
/// packet sent at `now` arrives at `now + latency` unless a fault drops,
/// corrupts, duplicates or delays it. The link has no clock: the caller
/// sends with its time and takes what is due by its time, earliest first
/// (equal times in the order sent, whatever the direction).
///
/// Each packet sent draws, in order: loss; corruption (then the octet and
/// the bit); duplication; for each copy, reordering (then the extra delay).
/// Nothing is drawn while the link is down.
#[derive(Debug, Clone)]
pub struct DatagramLink {
    cfg: LinkConfig,
    rng: Rng,
    /// Per direction: (arrival time, order sent) -> packet.
    q: [BTreeMap<(u64, u64), Vec<u8>>; 2],
    seq: u64,
    up: bool,
    stats: LinkStats,
}

impl DatagramLink {
    /// A link that is up, with its generator seeded from `cfg.seed`.
    pub fn new(cfg: LinkConfig) -> Self {
        DatagramLink {
            cfg,
            rng: Rng::new(cfg.seed),
            q: [BTreeMap::new(), BTreeMap::new()],
            seq: 0,
            up: true,
            stats: LinkStats::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &LinkConfig {
        &self.cfg
    }

    /// Change the faults from now on (packets in flight keep theirs).
    pub fn set_faults(&mut self, faults: Faults) {
        self.cfg.faults = faults;
    }

    /// Whether packets get through.
    pub fn is_up(&self) -> bool {
        self.up
    }

    /// Take the link down (every packet sent is dropped, nothing drawn) or
    /// bring it back; packets in flight stay in flight.
    pub fn set_up(&mut self, up: bool) {
        self.up = up;
    }

    /// What the link did so far.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The generator behind the faults (for a test's own draws, which then
    /// shift the link's).
    pub fn rng(&mut self) -> &mut Rng {
        &mut self.rng
    }

    /// Send `p` at `now` in direction `dir`.
    pub fn send(&mut self, now: u64, dir: Dir, mut p: Vec<u8>) {
        self.stats.sent += 1;
        let f = self.cfg.faults;
        if !self.up {
            self.stats.down += 1;
            return;
        }
        if self.rng.chance_ppm(f.loss) {
            self.stats.lost += 1;
            return;
        }
        if self.rng.chance_ppm(f.corrupt) && !p.is_empty() {
            let i = self.rng.below(p.len() as u64) as usize;
            p[i] ^= 1 << self.rng.below(8);
            self.stats.corrupted += 1;
        }
        let copies = if self.rng.chance_ppm(f.dup) {
            self.stats.duplicated += 1;
            2
        } else {
            1
        };
        for k in 0..copies {
            let extra = if self.rng.chance_ppm(f.reorder) {
                self.stats.reordered += 1;
                self.rng.below(self.cfg.reorder_max)
            } else {
                0
            };
            self.seq += 1;
            let at = now + self.cfg.latency + extra;
            let copy = if k + 1 == copies {
                std::mem::take(&mut p)
            } else {
                p.clone()
            };
            self.q[dir.index()].insert((at, self.seq), copy);
        }
    }

    /// When the next packet arrives, either way.
    pub fn next_arrival(&self) -> Option<u64> {
        self.next_key().map(|(_, k)| k.0)
    }

    fn next_key(&self) -> Option<(Dir, (u64, u64))> {
        let a = self.q[0].keys().next().map(|&k| (Dir::AtoB, k));
        let b = self.q[1].keys().next().map(|&k| (Dir::BtoA, k));
        match (a, b) {
            (Some(a), Some(b)) => Some(if a.1 <= b.1 { a } else { b }),
            (a, b) => a.or(b),
        }
    }

    /// The earliest packet due by `now`, either way, with its direction.
    pub fn pop_due(&mut self, now: u64) -> Option<(Dir, Vec<u8>)> {
        let (dir, k) = self.next_key()?;
        if k.0 > now {
            return None;
        }
        let p = self.q[dir.index()].remove(&k)?;
        self.stats.delivered += 1;
        Some((dir, p))
    }

    /// Packets in flight in direction `dir`.
    pub fn in_flight(&self, dir: Dir) -> usize {
        self.q[dir.index()].len()
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)] // a failed unwrap is a failed test
mod tests {
    use super::*;

    #[test]
    fn rng_is_splitmix64() {
        // SplitMix64's published first outputs for seed 0.
        let mut r = Rng::new(0);
        assert_eq!(r.next_u64(), 0xe220_a839_7b1d_cdaf);
        assert_eq!(r.next_u64(), 0x6e78_9e6a_a1b9_65f4);
        assert_eq!(r.next_u64(), 0x06c4_5d18_8009_454f);
        // And the test links' generator, seed for seed.
        for seed in [0, 1, 7, 0x5eed, u64::MAX] {
            let mut ours = Rng::new(seed);
            let mut theirs = iwarp_frame::SplitMix64::new(seed);
            for _ in 0..64 {
                assert_eq!(ours.next_u64(), theirs.next_u64(), "seed {seed}");
            }
            let mut ours = Rng::new(seed);
            let mut theirs = iwarp_frame::SplitMix64::new(seed);
            for n in [1, 2, 1000, 1 << 40] {
                assert_eq!(ours.below(n), theirs.below(n), "seed {seed}");
            }
            for ppm in [1, 1000, 500_000, 999_999] {
                assert_eq!(ours.chance_ppm(ppm), theirs.chance_ppm(ppm));
            }
        }
    }

    #[test]
    fn draws() {
        let mut r = Rng::new(3);
        let mut s = r.clone();
        assert_eq!(r.chance_per_mille(250), s.next_u64() % 1000 < 250);
        assert_eq!(r.below(0), 0);
        assert_eq!(r.range(5, 5), 5);
        assert_eq!(r, s, "no draw for below(0) or an empty range");
        for _ in 0..1000 {
            let v = r.range(3, 9);
            assert!((3..=9).contains(&v));
            assert!(r.below(7) < 7);
        }
        assert!(!r.chance_ppm(0));
        assert!(r.chance_ppm(1_000_000));
        let mut buf = [0u8; 13];
        let mut t = Rng::new(9);
        t.fill(&mut buf);
        let mut u = Rng::new(9);
        assert_eq!(buf[..8], u.next_u64().to_le_bytes());
        assert_eq!(buf[8..], u.next_u64().to_le_bytes()[..5]);
        // Rates near the asked ones.
        let mut r = Rng::new(11);
        let hits = (0..100_000).filter(|_| r.chance_ppm(50_000)).count();
        assert!((4_500..5_500).contains(&hits), "{hits}");
    }

    #[test]
    fn clean_link_delivers_in_order_after_the_latency() {
        let mut l = DatagramLink::new(LinkConfig::clean(10));
        l.send(0, Dir::AtoB, vec![1]);
        l.send(0, Dir::BtoA, vec![2]);
        l.send(5, Dir::AtoB, vec![3]);
        assert_eq!(l.next_arrival(), Some(10));
        assert_eq!(l.pop_due(9), None);
        assert_eq!(l.pop_due(10), Some((Dir::AtoB, vec![1])));
        assert_eq!(l.pop_due(10), Some((Dir::BtoA, vec![2])));
        assert_eq!(l.pop_due(10), None);
        assert_eq!(l.in_flight(Dir::AtoB), 1);
        assert_eq!(l.pop_due(100), Some((Dir::AtoB, vec![3])));
        assert_eq!(l.next_arrival(), None);
        let st = l.stats();
        assert_eq!((st.sent, st.delivered, st.lost), (3, 3, 0));
    }

    #[test]
    fn down_link_drops_without_drawing() {
        let mut l = DatagramLink::new(LinkConfig {
            seed: 5,
            faults: Faults::per_mille(500, 0, 0, 0),
            latency: 1,
            reorder_max: 0,
        });
        l.set_up(false);
        for _ in 0..10 {
            l.send(0, Dir::AtoB, vec![0]);
        }
        assert_eq!(l.rng().clone(), Rng::new(5));
        assert_eq!(l.stats().down, 10);
        assert_eq!(l.next_arrival(), None);
        l.set_up(true);
        l.send(0, Dir::AtoB, vec![0]);
        assert_eq!(l.stats().sent, 11);
    }

    #[test]
    fn faults_happen_at_their_rates_and_replay() {
        let cfg = LinkConfig {
            seed: 42,
            faults: Faults::per_mille(50, 30, 150, 10),
            latency: 1000,
            reorder_max: 20_000,
        };
        let run = || {
            let mut l = DatagramLink::new(cfg);
            for i in 0..20_000u64 {
                l.send(i * 10, Dir::to_b(i % 2 == 0), i.to_le_bytes().to_vec());
            }
            let mut out = Vec::new();
            let mut last = 0;
            while let Some(t) = l.next_arrival() {
                assert!(t >= last);
                last = t;
                out.push(l.pop_due(t).unwrap());
            }
            (l.stats(), out)
        };
        let (st, out) = run();
        assert_eq!(run().1, out, "same seed, same packets");
        assert!((800..1200).contains(&st.lost), "{st:?}");
        assert!((400..800).contains(&st.duplicated), "{st:?}");
        assert!((100..300).contains(&st.corrupted), "{st:?}");
        assert!((2_500..3_500).contains(&st.reordered), "{st:?}");
        assert_eq!(st.delivered, st.sent - st.lost + st.duplicated);
        assert_eq!(out.len() as u64, st.delivered);
        // Some packet overtook an earlier one of its direction.
        let seqs: Vec<u64> = out
            .iter()
            .filter(|(d, _)| *d == Dir::AtoB)
            .map(|(_, p)| u64::from_le_bytes(p[..8].try_into().unwrap_or([0; 8])))
            .collect();
        assert!(seqs.windows(2).any(|w| w[1] < w[0]));
    }
}
