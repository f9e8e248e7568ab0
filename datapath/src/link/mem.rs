//! Frame links in memory, driven by real poll loops on the wall clock:
//! [`MemDevice`] (two connected ends) and [`FaultyDevice`] (one end with
//! seeded faults).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use iwarp_frame::{FrameDevice, MemBell, SplitMix64};

/// One end of an in-memory frame link (for tests and examples without
/// privileges): frames cross in bounded lock-free queues. An end can sleep
/// until a frame arrives ([`FrameDevice::wait`]): a transmission rings the
/// other end's doorbell while that end sleeps. A received frame's buffer
/// goes back to the sender for a later frame (up to 256 of them, each of
/// at most 16 KiB), as a NIC's ring buffers do: no allocation and no free
/// per frame in the steady state.
#[derive(Debug)]
pub struct MemDevice {
    rx: Arc<ArrayQueue<Vec<u8>>>,
    tx: Arc<ArrayQueue<Vec<u8>>>,
    /// Buffers for this end's transmissions (the peer's received ones).
    spare_tx: Arc<ArrayQueue<Vec<u8>>>,
    /// Where this end's received buffers go: the peer's `spare_tx`.
    spare_rx: Arc<ArrayQueue<Vec<u8>>>,
    bell: Arc<MemBell>,
    peer_bell: Arc<MemBell>,
}

/// Buffers kept for reuse in each direction of a [`MemDevice`] link.
const RECYCLED: usize = 256;

/// The largest buffer a [`MemDevice`] keeps for reuse (a jumbo frame's;
/// larger ones are freed): at most `RECYCLED * RECYCLED_MAX` octets held
/// each way.
const RECYCLED_MAX: usize = 16 * 1024;

impl MemDevice {
    /// Two connected ends, each direction holding up to `depth` frames.
    pub fn pair(depth: usize) -> (MemDevice, MemDevice) {
        let ab = Arc::new(ArrayQueue::new(depth.max(1)));
        let ba = Arc::new(ArrayQueue::new(depth.max(1)));
        let spare_a = Arc::new(ArrayQueue::new(RECYCLED));
        let spare_b = Arc::new(ArrayQueue::new(RECYCLED));
        let (bell_a, bell_b) = (Arc::new(MemBell::default()), Arc::new(MemBell::default()));
        (
            MemDevice {
                rx: ba.clone(),
                tx: ab.clone(),
                spare_tx: spare_a.clone(),
                spare_rx: spare_b.clone(),
                bell: bell_a.clone(),
                peer_bell: bell_b.clone(),
            },
            MemDevice {
                rx: ab,
                tx: ba,
                spare_tx: spare_b,
                spare_rx: spare_a,
                bell: bell_b,
                peer_bell: bell_a,
            },
        )
    }

    /// An empty buffer for a frame: a recycled one if any.
    fn spare(&mut self) -> Vec<u8> {
        let mut b = self.spare_tx.pop().unwrap_or_default();
        b.clear();
        b
    }

    /// Queue `frame` to the other end, waking it if it sleeps.
    fn send(&mut self, frame: Vec<u8>) -> bool {
        if self.tx.push(frame).is_err() {
            return false;
        }
        self.peer_bell.ring_if_sleeping();
        true
    }
}

impl FrameDevice for MemDevice {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let mut n = 0;
        while n < max {
            match self.rx.pop() {
                Some(f) => {
                    sink(&f);
                    n += 1;
                    if f.capacity() <= RECYCLED_MAX {
                        // Full: this one is freed.
                        let _ = self.spare_rx.push(f);
                    }
                }
                None => break,
            }
        }
        n
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        if self.tx.is_full() {
            return false;
        }
        let mut b = self.spare();
        b.extend_from_slice(frame);
        self.send(b)
    }
    /// Builds straight into the `Vec` that crosses the link (no second
    /// copy); refused unbuilt while the link is full.
    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.tx_build_upto(len, &mut |b| build(b).then_some(len))
    }
    /// As [`tx_build`](Self::tx_build), cut to the length `build` returns.
    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.tx.is_full() {
            return false;
        }
        let mut frame = self.spare();
        frame.resize(max, 0);
        match build(&mut frame) {
            Some(n) if n <= max => {
                frame.truncate(n);
                self.send(frame)
            }
            _ => false,
        }
    }
    fn doorbell(&self) -> Option<Arc<dyn iwarp_frame::Doorbell>> {
        Some(self.bell.clone())
    }
    fn wait(&mut self, timeout: Duration) {
        let rx = &self.rx;
        self.bell.wait(timeout, || !rx.is_empty());
    }
}

/// Seeded faults for [`FaultyDevice`], each in parts per million of
/// transmitted frames.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Faults {
    /// Frames dropped.
    pub loss: u32,
    /// Frames held back and sent after the next one (or a later one).
    pub reorder: u32,
    /// Frames sent twice.
    pub dup: u32,
    /// Frames with one bit flipped.
    pub corrupt: u32,
    /// Frames held for `delay` before they leave.
    pub delayed: u32,
    /// How long a delayed frame waits.
    pub delay: Duration,
}

/// A simulated link end: a [`MemDevice`] whose transmissions suffer seeded
/// loss, reordering, duplication, corruption and delay (SplitMix64, so a
/// seed gives the same fault pattern for the same frame sequence). Needs no
/// privileges; the host stack runs over it exactly as over AF_XDP.
#[derive(Debug)]
pub struct FaultyDevice {
    dev: MemDevice,
    faults: Faults,
    rng: SplitMix64,
    held: Option<Vec<u8>>,
    delayed: std::collections::VecDeque<(Instant, Vec<u8>)>,
}

impl FaultyDevice {
    /// Wrap `dev`.
    pub fn new(dev: MemDevice, faults: Faults, seed: u64) -> Self {
        FaultyDevice {
            dev,
            faults,
            rng: SplitMix64::new(seed),
            held: None,
            delayed: std::collections::VecDeque::new(),
        }
    }

    fn chance(&mut self, ppm: u32) -> bool {
        self.rng.chance_ppm(ppm)
    }

    fn release_due(&mut self) {
        let now = Instant::now();
        while let Some((at, _)) = self.delayed.front() {
            if *at > now {
                break;
            }
            if let Some((_, f)) = self.delayed.pop_front() {
                self.dev.tx(&f);
            }
        }
    }
}

impl FrameDevice for FaultyDevice {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        self.release_due();
        self.dev.rx_burst(max, sink)
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        if self.chance(self.faults.loss) {
            return true;
        }
        let mut f = frame.to_vec();
        if self.chance(self.faults.corrupt) && !f.is_empty() {
            let at = self.rng.below(f.len() as u64) as usize;
            f[at] ^= 1 << self.rng.below(8);
        }
        if self.chance(self.faults.delayed) {
            self.delayed
                .push_back((Instant::now() + self.faults.delay, f));
            return true;
        }
        if self.chance(self.faults.reorder) && self.held.is_none() {
            self.held = Some(f);
            return true;
        }
        if self.chance(self.faults.dup) {
            self.dev.tx(&f);
        }
        let ok = self.dev.tx(&f);
        // A held frame leaves after the one that overtook it.
        if let Some(h) = self.held.take() {
            self.dev.tx(&h);
        }
        ok
    }

    fn flush(&mut self) {
        self.release_due();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What one `rx_burst` of `dev` hands over: each frame's octets and
    /// where its buffer lies.
    fn take(dev: &mut MemDevice) -> Vec<(Vec<u8>, usize)> {
        let mut got = Vec::new();
        dev.rx_burst(8, &mut |f| got.push((f.to_vec(), f.as_ptr() as usize)));
        got
    }

    /// A received frame's buffer carries the sender's next frame (sent
    /// whole or built in place), with exactly that frame's octets; a
    /// buffer above `RECYCLED_MAX` is not kept.
    #[test]
    fn received_buffers_go_back_to_the_sender() {
        let (mut a, mut b) = MemDevice::pair(4);
        assert!(a.tx(&[7; 100]));
        let first = take(&mut b);
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0, vec![7; 100]);
        // Shorter, built in place: the same buffer, no stale tail.
        assert!(a.tx_build(60, &mut |f| {
            f.copy_from_slice(&[9; 60]);
            true
        }));
        let second = take(&mut b);
        assert_eq!(second[0].0, vec![9; 60]);
        assert_eq!(second[0].1, first[0].1, "the buffer came back");
        // The other way is apart: b's frames travel in buffers of its own.
        assert!(b.tx(&[1; 10]));
        assert_eq!(take(&mut a)[0].0, vec![1; 10]);
        // A buffer too large to keep.
        assert!(a.tx(&vec![3; RECYCLED_MAX + 1]));
        assert_eq!(take(&mut b)[0].0.len(), RECYCLED_MAX + 1);
        assert!(a.spare_tx.is_empty(), "{}", a.spare_tx.len());
        // A refused build leaves its buffer unsent.
        assert!(!a.tx_build(20, &mut |_| false));
        assert!(take(&mut b).is_empty());
    }
}
