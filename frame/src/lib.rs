//! The frame-device interface: what a poll loop needs from a backend.
//!
//! A backend (AF_XDP in `iwarp-xdp`, DPDK in `iwarp-dpdk`, the in-memory
//! links in `iwarp-datapath`) implements [`FrameDevice`]; this crate is all
//! a backend depends on to plug into the poll loops, so backends and the
//! protocol stack build independently. The interface is batch-first:
//!
//! - **receive**: [`FrameDevice::rx_burst`] hands up to `max` frames to a
//!   sink as slices of the device's own buffers (UMEM chunks, mbufs); the
//!   buffers go back to the device once the sink returns, so the caller
//!   copies out only what it keeps.
//! - **transmit**: [`FrameDevice::tx`] queues a frame (copied into a device
//!   buffer), [`FrameDevice::tx_parts`] one given as consecutive parts
//!   (headers built on the stack's side, payload where it lies), copied in
//!   one pass; [`FrameDevice::tx_build`] lends a buffer of the frame's
//!   length for the caller to write the whole frame into in place (the
//!   AF_XDP backend lends a UMEM chunk, so a payload written there is
//!   written once); [`FrameDevice::flush`] publishes the batch with one
//!   kick.
//!
//! Beside the trait, what the API and every backend share without
//! depending on each other: [`notify`] (an eventfd that is a
//! [`Doorbell`], a small epoll set, waiting on several descriptors) and
//! [`in_netns`] (open a device inside another network namespace).
//!
//! This crate holds no `unsafe` (its system calls go through `rustix`'s
//! safe functions); lending device memory safely is each backend's job.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod bell;
mod netns;
pub mod notify;

pub use bell::MemBell;
pub use netns::in_netns;

/// A frame device (AF_XDP rings, DPDK, or an in-memory link), batch-first.
pub trait FrameDevice: Send {
    /// Hand up to `max` received frames to `sink`; returns how many.
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize;
    /// Queue one frame for transmission (Ethernet header on, no FCS); false
    /// if the device is full or the frame too long (dropped, as a full NIC
    /// queue drops it; TCP retransmits).
    fn tx(&mut self, frame: &[u8]) -> bool;
    /// Queue one frame given as consecutive parts (for example Ethernet,
    /// IPv4 and TCP headers, then the payload from the TCP send buffer),
    /// copied straight into a device buffer. The default joins the parts
    /// first and calls [`tx`](Self::tx); backends with their own buffers
    /// copy each part in place and save that copy.
    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        match parts {
            [frame] => self.tx(frame),
            _ => self.tx(&parts.concat()),
        }
    }
    /// Queue one frame of exactly `len` octets that `build` writes in
    /// place, into a buffer of exactly `len` octets the device lends;
    /// `build` returning false cancels (nothing is sent, the buffer goes
    /// back). A device with no buffer free, or a frame too long, is refused
    /// without calling `build`. Whether the frame was queued.
    ///
    /// The default is for devices without buffers of their own to lend: it
    /// builds into a scratch `Vec` and calls [`tx`](Self::tx), which costs
    /// one extra copy of the frame. Backends with their own buffers (UMEM
    /// chunks) override it and hand `build` the buffer itself.
    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        let mut frame = vec![0u8; len];
        build(&mut frame) && self.tx(&frame)
    }
    /// [`tx_build`](Self::tx_build) with the frame lent as consecutive
    /// pieces, where the device's buffers are smaller than the frame
    /// (AF_XDP multi-buffer: one UMEM chunk per piece, each but the last
    /// whole, the first at least 2048 octets). The default lends one piece
    /// through [`tx_build`](Self::tx_build).
    fn tx_build_sg(&mut self, len: usize, build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool) -> bool {
        self.tx_build(len, &mut |b| build(&mut [b]))
    }
    /// Queue one frame whose length is known only once it is built (an
    /// SCTP packet bundles what fits): `build` writes it in place into a
    /// buffer of `max` octets the device lends and returns its length (at
    /// most `max`), or `None` to cancel (nothing is sent, the buffer goes
    /// back). A device with no buffer free, or `max` beyond its frames, is
    /// refused without calling `build`. Whether the frame was queued.
    ///
    /// The default builds into a scratch `Vec` and calls [`tx`](Self::tx)
    /// (one extra copy). Backends with buffers of their own lend one and
    /// set the frame's length after the build.
    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        let mut frame = vec![0u8; max];
        match build(&mut frame) {
            Some(n) if n <= max => self.tx(&frame[..n]),
            _ => false,
        }
    }
    /// Publish the frames queued since the last flush, with one kick where
    /// the device needs one, and reclaim completed transmit buffers.
    fn flush(&mut self) {}
    /// The doorbell of a device that can sleep until a frame arrives
    /// ([`wait`](Self::wait)): whoever must wake the sleeping loop (a
    /// thread posting a command) rings it. `None` (the default): the device
    /// cannot wait for frames, and an idle loop sleeps a bounded time
    /// instead. Asked once, when a loop starts on the device.
    fn doorbell(&self) -> Option<std::sync::Arc<dyn Doorbell>> {
        None
    }
    /// Sleep until a received frame is ready for
    /// [`rx_burst`](Self::rx_burst), the [`doorbell`](Self::doorbell) has
    /// rung since the last `wait`, or `timeout` passes, whichever is first.
    /// Only called on a device whose doorbell is `Some`; the default
    /// returns at once.
    fn wait(&mut self, timeout: std::time::Duration) {
        let _ = timeout;
    }
}

/// Wakes a poll loop sleeping in [`FrameDevice::wait`] from another thread.
/// A ring with nobody waiting is kept: the next `wait` returns at once, so
/// a ring between a loop's last look at its queues and its sleep is never
/// lost.
pub trait Doorbell: Send + Sync + std::fmt::Debug {
    /// Wake the sleeper (or the next one).
    fn ring(&self);
}

/// A device whose received frames are dropped at random, before the stack
/// sees them: loss injection for benchmarks and tests of loss recovery on
/// real devices, where netfilter cannot help (an XDP program steers frames
/// to an AF_XDP socket before any netfilter hook runs). Each frame is
/// dropped with probability `ppm` / 1,000,000, drawn from a seeded
/// SplitMix64, so a seed gives the same pattern for the same frame
/// sequence. Transmission is untouched: wrap both ends to lose frames both
/// ways.
#[derive(Debug)]
pub struct RxLoss<D> {
    inner: D,
    ppm: u32,
    rng: SplitMix64,
    dropped: u64,
}

impl<D: FrameDevice> RxLoss<D> {
    /// Wrap `inner`, dropping `ppm` received frames per million (capped at
    /// 1,000,000).
    pub fn new(inner: D, ppm: u32, seed: u64) -> Self {
        RxLoss {
            inner,
            ppm: ppm.min(1_000_000),
            rng: SplitMix64::new(seed),
            dropped: 0,
        }
    }

    /// The wrapped device.
    pub fn inner(&self) -> &D {
        &self.inner
    }

    /// Frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

/// SplitMix64: the seeded generator behind every fault decision of the
/// test links (here, `iwarp-datapath`'s `link` module, the tests), so a
/// seed replays the same pattern for the same frame sequence. Not for
/// anything that needs unpredictability.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator starting from `seed`.
    pub const fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// True with probability `ppm` / 1,000,000 (never for 0, and then no
    /// value is drawn).
    pub fn chance_ppm(&mut self, ppm: u32) -> bool {
        ppm > 0 && self.next_u64() % 1_000_000 < u64::from(ppm)
    }

    /// A value below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        match n {
            0 => 0,
            n => self.next_u64() % n,
        }
    }
}

impl<D: FrameDevice> FrameDevice for RxLoss<D> {
    /// Returns the frames received, dropped ones included (the caller sees
    /// the device was busy).
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let RxLoss {
            inner,
            ppm,
            rng,
            dropped,
        } = self;
        if *ppm == 0 {
            return inner.rx_burst(max, sink);
        }
        let ppm = *ppm;
        inner.rx_burst(max, &mut |f| {
            if rng.chance_ppm(ppm) {
                *dropped += 1;
            } else {
                sink(f);
            }
        })
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        self.inner.tx(frame)
    }
    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.inner.tx_parts(parts)
    }
    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.inner.tx_build(len, build)
    }
    fn tx_build_sg(&mut self, len: usize, build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool) -> bool {
        self.inner.tx_build_sg(len, build)
    }
    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.inner.tx_build_upto(max, build)
    }
    fn flush(&mut self) {
        self.inner.flush()
    }
    fn doorbell(&self) -> Option<std::sync::Arc<dyn Doorbell>> {
        self.inner.doorbell()
    }
    fn wait(&mut self, timeout: std::time::Duration) {
        self.inner.wait(timeout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The smallest device: a loopback that hands back what it sent.
    #[derive(Default)]
    struct Loopback {
        queued: Vec<Vec<u8>>,
        wire: Vec<Vec<u8>>,
    }

    impl FrameDevice for Loopback {
        fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
            let n = self.wire.len().min(max);
            for f in self.wire.drain(..n) {
                sink(&f);
            }
            n
        }
        fn tx(&mut self, frame: &[u8]) -> bool {
            self.queued.push(frame.to_vec());
            true
        }
        fn flush(&mut self) {
            self.wire.append(&mut self.queued);
        }
    }

    /// Frames 0..n through an `RxLoss` at `ppm`: which ones came through.
    fn survivors(ppm: u32, seed: u64, n: u32, burst: usize) -> (Vec<u32>, u64) {
        let mut d = RxLoss::new(Loopback::default(), ppm, seed);
        for i in 0..n {
            assert!(d.tx(&i.to_be_bytes()));
        }
        d.flush();
        let mut got = Vec::new();
        let mut seen = 0;
        while seen < n as usize {
            let k = d.rx_burst(burst, &mut |f| {
                got.push(u32::from_be_bytes(f.try_into().expect("4 octets")))
            });
            assert!(k > 0 && k <= burst);
            seen += k;
        }
        (got, d.dropped())
    }

    #[test]
    fn rx_loss_drops_the_share_asked_for_the_same_way_per_seed() {
        // None, all, and 2%: within 1.6-2.4% of 100,000 frames.
        let (all, d0) = survivors(0, 1, 1000, 64);
        assert_eq!((all.len(), d0), (1000, 0));
        let (none, d1) = survivors(1_000_000, 1, 1000, 64);
        assert_eq!((none.len(), d1), (0, 1000));
        let (got, dropped) = survivors(20_000, 7, 100_000, 64);
        assert_eq!(got.len() as u64 + dropped, 100_000);
        assert!((1600..=2400).contains(&dropped), "{dropped} dropped");
        // Survivors keep their order; the same seed drops the same frames
        // whatever the burst size; another seed drops others.
        assert!(got.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(survivors(20_000, 7, 100_000, 5).0, got);
        assert_ne!(survivors(20_000, 8, 100_000, 64).0, got);
    }

    #[test]
    fn frames_leave_on_flush_and_bursts_respect_max() {
        let mut d = Loopback::default();
        let dev: &mut dyn FrameDevice = &mut d;
        assert!(dev.tx(b"one") && dev.tx(b"two") && dev.tx(b"three"));
        assert_eq!(dev.rx_burst(8, &mut |_| panic!("nothing flushed yet")), 0);
        dev.flush();
        let mut got = Vec::new();
        assert_eq!(dev.rx_burst(2, &mut |f| got.push(f.to_vec())), 2);
        assert_eq!(dev.rx_burst(8, &mut |f| got.push(f.to_vec())), 1);
        assert_eq!(got, [&b"one"[..], b"two", b"three"]);
    }

    #[test]
    fn parts_are_one_frame_in_order() {
        let mut d = Loopback::default();
        assert!(d.tx_parts(&[b"head", b"", b"er", b"payload"]));
        assert!(d.tx_parts(&[b"whole"]));
        d.flush();
        let mut got = Vec::new();
        d.rx_burst(8, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, [&b"headerpayload"[..], b"whole"]);
    }

    #[test]
    fn a_built_frame_is_sent_once_and_a_cancelled_one_not_at_all() {
        let mut d = RxLoss::new(Loopback::default(), 0, 1);
        let mut lent = Vec::new();
        assert!(d.tx_build(5, &mut |b| {
            lent.push(b.len());
            b.copy_from_slice(b"built");
            true
        }));
        assert!(!d.tx_build(4, &mut |b| {
            lent.push(b.len());
            b.copy_from_slice(b"gone");
            false
        }));
        assert!(d.tx_build(0, &mut |b| b.is_empty()));
        assert_eq!(lent, [5, 4], "a buffer of exactly the length asked");
        d.flush();
        let mut got = Vec::new();
        d.rx_burst(8, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, [&b"built"[..], b""]);
    }
}
