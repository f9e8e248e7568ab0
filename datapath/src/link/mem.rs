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
/// other end's doorbell while that end sleeps.
#[derive(Debug)]
pub struct MemDevice {
    rx: Arc<ArrayQueue<Vec<u8>>>,
    tx: Arc<ArrayQueue<Vec<u8>>>,
    bell: Arc<MemBell>,
    peer_bell: Arc<MemBell>,
}

impl MemDevice {
    /// Two connected ends, each direction holding up to `depth` frames.
    pub fn pair(depth: usize) -> (MemDevice, MemDevice) {
        let ab = Arc::new(ArrayQueue::new(depth.max(1)));
        let ba = Arc::new(ArrayQueue::new(depth.max(1)));
        let (bell_a, bell_b) = (Arc::new(MemBell::default()), Arc::new(MemBell::default()));
        (
            MemDevice {
                rx: ba.clone(),
                tx: ab.clone(),
                bell: bell_a.clone(),
                peer_bell: bell_b.clone(),
            },
            MemDevice {
                rx: ab,
                tx: ba,
                bell: bell_b,
                peer_bell: bell_a,
            },
        )
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
                }
                None => break,
            }
        }
        n
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        self.send(frame.to_vec())
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
        let mut frame = vec![0u8; max];
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
