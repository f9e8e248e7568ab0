//! Core-pinned, run-to-completion poll loops.
//!
//! One thread per configured core runs: commands from application threads →
//! receive burst (commands again, then each frame through the engine: TCP →
//! MPA → DDP/RDMAP) → engine poll (timers, transmissions) → transmit. Application threads talk to the loop only
//! through bounded lock-free queues (`crossbeam_queue::ArrayQueue`), so a post
//! or a poll is a queue operation, never a syscall. Two modes: busy polling,
//! and an adaptive mode that spins a while, then yields, then sleeps with a
//! growing (bounded) timeout when idle — this machine has two cores to
//! share. A sleep never runs past the engine's next deadline
//! ([`Engine::poll_timeout`]). On a device that can wait for frames
//! ([`FrameDevice::doorbell`]: AF_XDP, [`MemDevice`](crate::link::MemDevice)) the loop sleeps in
//! [`FrameDevice::wait`], so an arriving frame wakes it; elsewhere it parks
//! and a frame waits out the pause. A post to a sleeping loop wakes it (one
//! `futex` wake or doorbell ring, only when the loop sleeps), so a command
//! does not wait out the pause.

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

pub use iwarp_frame::FrameDevice;
pub use tcp_lite::iface::FrameSink;

/// What runs inside a loop.
pub trait Engine: Send + 'static {
    /// Work posted by application threads.
    type Command: Send + 'static;
    /// Results handed back (completions, events).
    type Output: Send + 'static;
    /// One received frame.
    fn handle_frame(&mut self, frame: &[u8], now: u64);
    /// One command from an application thread.
    fn handle_command(&mut self, cmd: Self::Command, now: u64);
    /// The engine's next deadline on the loop's clock (ns), if it knows
    /// one: an idle loop sleeps no longer than until then. `None` (the
    /// default): the loop's own bound alone.
    fn poll_timeout(&self) -> Option<u64> {
        None
    }
    /// Nothing but a frame, a command or the [`poll_timeout`](Self::poll_timeout)
    /// deadline needs a round (no work queued, nothing polled every round,
    /// every deadline in `poll_timeout`). A loop whose device can wait for
    /// frames then sleeps until that deadline (at most [`QUIESCENT_MAX`])
    /// instead of its usual bounded pause. `false` (the default): never.
    fn quiescent(&self) -> bool {
        false
    }
    /// Run timers, emit frames through `tx` and outputs through `out`.
    /// A frame goes to `tx` as consecutive parts (headers, then the payload
    /// where it lies), which the device copies into its buffer in one pass
    /// ([`FrameDevice::tx_parts`]), or is built in place in a buffer the
    /// device lends ([`FrameSink::send_built`], [`FrameDevice::tx_build`]).
    /// Returns true if it did anything.
    fn poll(&mut self, now: u64, tx: &mut dyn FrameSink, out: &mut dyn FnMut(Self::Output))
        -> bool;
}

/// The loop's [`FrameSink`] over its device: parts go to
/// [`FrameDevice::tx_parts`], built frames to [`FrameDevice::tx_build`];
/// it counts frames the device took and those it refused (a build the
/// engine cancelled is neither).
struct DeviceSink<'a, D: FrameDevice> {
    dev: &'a mut D,
    sent: u64,
    refused: u64,
}

impl<D: FrameDevice> FrameSink for DeviceSink<'_, D> {
    fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
        let ok = self.dev.tx_parts(parts);
        if ok {
            self.sent += 1;
        } else {
            self.refused += 1;
        }
        ok
    }

    fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        let mut cancelled = false;
        let ok = self.dev.tx_build(len, &mut |buf| {
            cancelled = !build(buf);
            !cancelled
        });
        self.count(ok, cancelled)
    }

    fn send_built_sg(
        &mut self,
        len: usize,
        build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool,
    ) -> bool {
        let mut cancelled = false;
        let ok = self.dev.tx_build_sg(len, &mut |pieces| {
            cancelled = !build(pieces);
            !cancelled
        });
        self.count(ok, cancelled)
    }
}

impl<D: FrameDevice> DeviceSink<'_, D> {
    /// Count a build: sent, or refused by the device (a build the engine
    /// cancelled is neither).
    fn count(&mut self, ok: bool, cancelled: bool) -> bool {
        if ok {
            self.sent += 1;
        } else if !cancelled {
            self.refused += 1;
        }
        ok
    }
}

/// How a loop waits when idle.
#[derive(Debug, Clone, Copy)]
pub enum Mode {
    /// Never sleep (a core of its own).
    BusyPoll,
    /// Spin `spins` idle rounds, then yield, then park (a post wakes it),
    /// doubling the timeout up to `max_sleep`.
    Adaptive {
        /// Idle rounds before yielding.
        spins: u32,
        /// Longest sleep.
        max_sleep: Duration,
    },
}

/// The longest sleep of a quiescent loop on a device that can wait
/// ([`Engine::quiescent`]).
pub const QUIESCENT_MAX: Duration = Duration::from_secs(1);

/// Counters a loop returns when it stops.
#[derive(Debug, Clone, Copy, Default)]
pub struct LoopStats {
    /// Rounds run.
    pub rounds: u64,
    /// Frames received.
    pub rx_frames: u64,
    /// Frames sent.
    pub tx_frames: u64,
    /// Frames the device refused.
    pub tx_dropped: u64,
    /// Outputs dropped because the application did not drain the queue
    /// and the loop's own backlog ([`HELD_OUTPUTS_PER_SLOT`] × the queue
    /// depth) was full too (the newest are dropped).
    pub out_dropped: u64,
    /// Most outputs the loop held at once, waiting for room in the queue.
    pub out_held_max: u64,
    /// Times the loop slept.
    pub sleeps: u64,
    /// Of those, sleeps in the device's [`FrameDevice::wait`] (which a
    /// frame ends), not a bounded park.
    pub device_waits: u64,
    /// Whether the thread was pinned to the requested core.
    pub pinned: bool,
}

/// Reads a device's counters on the loop thread (see [`spawn_probed`]).
pub type DeviceReader<D> = Box<dyn FnMut(&D) -> Box<dyn Any + Send> + Send>;

/// What a running loop publishes when asked ([`LoopHandle::snapshot`]).
pub type Snapshot = (LoopStats, Box<dyn Any + Send>);

/// Requests for a snapshot and the latest one, shared by the loop and its
/// handle: the loop checks one counter per round and reads the device
/// only when asked.
#[derive(Default)]
struct Probe {
    requested: AtomicU64,
    served: AtomicU64,
    latest: Mutex<Option<Snapshot>>,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe")
            .field("requested", &self.requested)
            .field("served", &self.served)
            .finish()
    }
}

/// Threads waiting for the loop's outputs ([`LoopHandle::output_waiter`]):
/// how many, and a generation the loop bumps (with a broadcast) after a
/// round that handed over outputs while any waited.
#[derive(Debug, Default)]
struct OutputBell {
    waiters: std::sync::atomic::AtomicUsize,
    gen: Mutex<u64>,
    cv: std::sync::Condvar,
}

impl OutputBell {
    fn ring(&self) {
        // Pairs with the waiter's SeqCst registration: either it sees the
        // outputs in the queue, or we see it waiting.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.waiters.load(Ordering::Relaxed) > 0 {
            let mut g = self.gen.lock().unwrap_or_else(|p| p.into_inner());
            *g = g.wrapping_add(1);
            drop(g);
            self.cv.notify_all();
        }
    }
}

/// A registered wait for a loop's outputs ([`LoopHandle::output_waiter`]).
#[derive(Debug)]
pub struct OutputWaiter<'h> {
    bell: &'h OutputBell,
    mark: u64,
}

impl OutputWaiter<'_> {
    /// Sleep until the loop hands over outputs after this waiter was made
    /// (or another thread calls [`LoopHandle::outputs_moved`]), or
    /// `timeout` passes.
    pub fn wait(self, timeout: Duration) {
        let end = Instant::now() + timeout;
        let mut g = self.bell.gen.lock().unwrap_or_else(|p| p.into_inner());
        while *g == self.mark {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            g = match self.bell.cv.wait_timeout(g, left) {
                Ok((g, _)) => g,
                Err(p) => p.into_inner().0,
            };
        }
    }
}

impl Drop for OutputWaiter<'_> {
    fn drop(&mut self) {
        self.bell.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The application's side of a running loop.
#[derive(Debug)]
pub struct LoopHandle<E: Engine> {
    commands: Arc<ArrayQueue<E::Command>>,
    outputs: Arc<ArrayQueue<E::Output>>,
    stop: Arc<AtomicBool>,
    probe: Arc<Probe>,
    /// The loop is (about to be) parked in an adaptive sleep.
    sleeping: Arc<AtomicBool>,
    /// The device's doorbell, when the loop sleeps in the device's wait.
    bell: Option<Arc<dyn iwarp_frame::Doorbell>>,
    outputs_bell: Arc<OutputBell>,
    join: Option<JoinHandle<(E, LoopStats)>>,
}

impl<E: Engine> LoopHandle<E> {
    /// Post a command; gives it back if the queue is full. A loop asleep
    /// in adaptive mode is woken (unparked), so a post does not wait out
    /// the loop's sleep.
    pub fn post(&self, cmd: E::Command) -> Result<(), E::Command> {
        self.commands.push(cmd)?;
        // Pairs with the loop's fence between raising `sleeping` and
        // looking at the queue: either it sees the command or we see the
        // flag (and an unpark before its park makes the park return).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.wake();
        }
        Ok(())
    }
    /// Wake the loop's thread: unpark it, and ring the device's doorbell
    /// when it sleeps in the device's wait.
    fn wake(&self) {
        if let Some(b) = &self.bell {
            b.ring();
        }
        if let Some(j) = &self.join {
            j.thread().unpark();
        }
    }
    /// Take one output, if any.
    pub fn poll(&self) -> Option<E::Output> {
        self.outputs.pop()
    }
    /// Register to wait for outputs: make the waiter, then [`poll`](Self::poll)
    /// (an output handed over after this call is either found there or
    /// ends [`OutputWaiter::wait`]), then wait. The loop pays for this
    /// only while someone waits: a fence and a load per round that handed
    /// over outputs.
    pub fn output_waiter(&self) -> OutputWaiter<'_> {
        let bell = &*self.outputs_bell;
        bell.waiters.fetch_add(1, Ordering::SeqCst);
        let mark = *bell.gen.lock().unwrap_or_else(|p| p.into_inner());
        OutputWaiter { bell, mark }
    }
    /// Another thread moved outputs from the queue somewhere its peers
    /// look (a shared router): wake every waiter, as the loop would.
    pub fn outputs_moved(&self) {
        self.outputs_bell.ring();
    }
    /// The loop's thread (for refusing calls that would wait on the loop
    /// from inside it).
    pub fn thread_id(&self) -> Option<std::thread::ThreadId> {
        self.join.as_ref().map(|j| j.thread().id())
    }
    /// The loop's counters so far and what its device reader returned
    /// (`()` without one), read by the loop at the end of its next round;
    /// `None` if that takes longer than `timeout` (the loop stopped or
    /// stalls). One caller at a time: two racing callers share one
    /// published snapshot, and the second may get `None`.
    pub fn snapshot(&self, timeout: Duration) -> Option<Snapshot> {
        let want = self.probe.requested.fetch_add(1, Ordering::AcqRel) + 1;
        self.wake();
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(5);
        while self.probe.served.load(Ordering::Acquire) < want {
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
        match self.probe.latest.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        }
    }

    /// Stop the loop and get the engine back (with its memory) and the counters.
    pub fn stop(mut self) -> Option<(E, LoopStats)> {
        self.stop.store(true, Ordering::Release);
        self.wake();
        self.join.take().and_then(|j| j.join().ok())
    }
}

impl<E: Engine> Drop for LoopHandle<E> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.wake();
        if let Some(j) = self.join.take() {
            let _ = j.join();
        }
    }
}

/// Outputs (connection events, answers to commands) the loop keeps, per slot
/// of the output queue, while the application is slow to drain it: they are
/// handed over in order as room appears. Only beyond this many is an output
/// dropped (and counted in [`LoopStats::out_dropped`]), so a burst of events
/// an application would act on is not lost to a short stall.
pub const HELD_OUTPUTS_PER_SLOT: usize = 16;

/// Handle up to 64 queued commands; true if there were any.
fn drain_commands<E: Engine>(c: &ArrayQueue<E::Command>, engine: &mut E, now: u64) -> bool {
    let mut any = false;
    for _ in 0..64 {
        match c.pop() {
            Some(cmd) => {
                engine.handle_command(cmd, now);
                any = true;
            }
            None => break,
        }
    }
    any
}

/// Start a loop on its own thread, pinned to `core` when given.
pub fn spawn<E: Engine, D: FrameDevice + 'static>(
    engine: E,
    dev: D,
    core: Option<usize>,
    mode: Mode,
    queue_depth: usize,
) -> LoopHandle<E> {
    spawn_probed(engine, dev, core, mode, queue_depth, None)
}

/// [`spawn`], with a `reader` the loop calls on its device (between
/// rounds, on its own thread) when the application asks for a
/// [`LoopHandle::snapshot`]: live device counters without sharing the
/// device.
pub fn spawn_probed<E: Engine, D: FrameDevice + 'static>(
    mut engine: E,
    mut dev: D,
    core: Option<usize>,
    mode: Mode,
    queue_depth: usize,
    mut reader: Option<DeviceReader<D>>,
) -> LoopHandle<E> {
    let commands = Arc::new(ArrayQueue::new(queue_depth.max(1)));
    let outputs = Arc::new(ArrayQueue::new(queue_depth.max(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = Arc::new(Probe::default());
    let sleeping = Arc::new(AtomicBool::new(false));
    let bell = dev.doorbell();
    let waits = bell.is_some();
    let outputs_bell = Arc::new(OutputBell::default());
    let ob = outputs_bell.clone();
    let (c, o, s, pr, sl) = (
        commands.clone(),
        outputs.clone(),
        stop.clone(),
        probe.clone(),
        sleeping.clone(),
    );
    let join = std::thread::spawn(move || {
        let mut served = 0u64;
        let mut st = LoopStats::default();
        if let Some(id) = core {
            st.pinned = core_affinity::set_for_current(core_affinity::CoreId { id });
        }
        let start = Instant::now();
        let mut held: std::collections::VecDeque<E::Output> = std::collections::VecDeque::new();
        let held_limit = queue_depth.max(1) * HELD_OUTPUTS_PER_SLOT;
        let mut idle = 0u32;
        let mut sleep = Duration::from_micros(1);
        while !s.load(Ordering::Acquire) {
            st.rounds += 1;
            let now = start.elapsed().as_nanos() as u64;
            let mut busy = false;
            // Commands before frames: work an application posted before a
            // frame arrived (a receive buffer, say) is in place when the
            // frame is processed, as with a synchronous post. Drained again
            // before each frame: a frame taken from the device now may have
            // been sent after a post that came in after the drain above (the
            // application posts, then makes the peer send).
            busy |= drain_commands(&c, &mut engine, now);
            let mut late = false;
            let n = dev.rx_burst(64, &mut |f| {
                late |= drain_commands(&c, &mut engine, now);
                engine.handle_frame(f, now)
            });
            busy |= late;
            st.rx_frames += n as u64;
            busy |= n > 0;
            // Frames go straight from the engine to the device (no copy in
            // between, no allocation per frame).
            let mut lost = 0u64;
            let mut handed = false;
            let mut sink = DeviceSink {
                dev: &mut dev,
                sent: 0,
                refused: 0,
            };
            busy |= engine.poll(now, &mut sink, &mut |out| {
                // In order: nothing passes what is already held; past
                // the bound the newest is dropped (counted), as a full
                // completion queue overruns.
                let out = if held.is_empty() {
                    match o.push(out) {
                        Ok(()) => {
                            handed = true;
                            return;
                        }
                        Err(out) => out,
                    }
                } else {
                    out
                };
                if held.len() < held_limit {
                    held.push_back(out);
                } else {
                    lost += 1;
                }
            });
            st.out_held_max = st.out_held_max.max(held.len() as u64);
            // Hand over what was held as room appears.
            while let Some(out) = held.pop_front() {
                if let Err(out) = o.push(out) {
                    held.push_front(out);
                    break;
                }
                handed = true;
                busy = true;
            }
            if handed {
                ob.ring();
            }
            let (sent, refused) = (sink.sent, sink.refused);
            st.tx_frames += sent;
            st.tx_dropped += refused;
            st.out_dropped += lost;
            busy |= sent + refused > 0;
            dev.flush();
            let asked = pr.requested.load(Ordering::Acquire);
            if asked != served {
                let d: Box<dyn Any + Send> = match reader.as_mut() {
                    Some(r) => r(&dev),
                    None => Box::new(()),
                };
                match pr.latest.lock() {
                    Ok(mut g) => *g = Some((st, d)),
                    Err(p) => *p.into_inner() = Some((st, d)),
                }
                served = asked;
                pr.served.store(asked, Ordering::Release);
            }
            if busy {
                idle = 0;
                sleep = Duration::from_micros(1);
                continue;
            }
            if let Mode::Adaptive { spins, max_sleep } = mode {
                idle += 1;
                if idle > spins * 2 {
                    // Never past the engine's next deadline; until it when
                    // nothing else can need a round (a frame or a post
                    // ends the wait).
                    let bound = if waits && held.is_empty() && engine.quiescent() {
                        QUIESCENT_MAX
                    } else {
                        sleep
                    };
                    let pause = match engine.poll_timeout() {
                        Some(at) => {
                            let now = start.elapsed().as_nanos() as u64;
                            bound.min(Duration::from_nanos(at.saturating_sub(now)))
                        }
                        None => bound,
                    };
                    // Park (or wait on the device) rather than sleep: a
                    // post wakes us (see `LoopHandle::post` for the
                    // ordering; a doorbell rung before the wait ends it at
                    // once).
                    sl.store(true, Ordering::Relaxed);
                    std::sync::atomic::fence(Ordering::SeqCst);
                    if !pause.is_zero() && c.is_empty() && !s.load(Ordering::Acquire) {
                        if waits {
                            dev.wait(pause);
                            st.device_waits += 1;
                        } else {
                            std::thread::park_timeout(pause);
                        }
                        st.sleeps += 1;
                        sleep = (sleep * 2).min(max_sleep);
                    }
                    sl.store(false, Ordering::Relaxed);
                } else if idle > spins {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            } else {
                std::hint::spin_loop();
            }
        }
        (engine, st)
    });
    LoopHandle {
        commands,
        outputs,
        stop,
        probe,
        sleeping,
        bell,
        outputs_bell,
        join: Some(join),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::link::MemDevice;

    #[test]
    fn the_device_sink_counts_what_the_device_took_and_refused_not_cancels() {
        let (mut dev, mut peer) = MemDevice::pair(2);
        let mut sink = DeviceSink {
            dev: &mut dev,
            sent: 0,
            refused: 0,
        };
        let mut lent = 0;
        assert!(sink.send_built(5, &mut |b| {
            lent += 1;
            b.copy_from_slice(b"built");
            true
        }));
        // Cancelled by the engine: neither sent nor refused.
        assert!(!sink.send_built(3, &mut |_| {
            lent += 1;
            false
        }));
        assert!(sink.send_parts(&[b"pa", b"rts"]));
        // The link holds two frames: both ways refused, the build not run.
        assert!(!sink.send_built(4, &mut |_| {
            lent += 1;
            true
        }));
        assert!(!sink.send_parts(&[b"x"]));
        assert_eq!((sink.sent, sink.refused, lent), (2, 2, 2));
        let mut got = Vec::new();
        peer.rx_burst(8, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, [&b"built"[..], b"parts"]);
    }

    /// Emits `n` numbered outputs in one poll when told to.
    struct Burst {
        n: u32,
        go: bool,
    }

    impl Engine for Burst {
        type Command = ();
        type Output = u32;
        fn handle_frame(&mut self, _frame: &[u8], _now: u64) {}
        fn handle_command(&mut self, _cmd: (), _now: u64) {
            self.go = true;
        }
        fn poll(&mut self, _now: u64, _tx: &mut dyn FrameSink, out: &mut dyn FnMut(u32)) -> bool {
            if !std::mem::take(&mut self.go) {
                return false;
            }
            for i in 0..self.n {
                out(i);
            }
            true
        }
    }

    fn burst(n: u32, depth: usize) -> LoopHandle<Burst> {
        let (dev, _peer) = MemDevice::pair(1);
        let h = spawn(Burst { n, go: false }, dev, None, Mode::BusyPoll, depth);
        assert!(h.post(()).is_ok());
        h
    }

    #[test]
    fn outputs_beyond_the_queue_wait_in_order_for_a_slow_reader() {
        // 200 outputs at once into a queue of 16: the loop holds the rest
        // (within its bound of 16 × 16) and hands them over as the reader
        // makes room.
        let h = burst(200, 16);
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        // Nothing is read until the queue is full.
        while h.outputs.len() < 16 && Instant::now() < deadline {
            std::thread::yield_now();
        }
        while got.len() < 200 && Instant::now() < deadline {
            match h.poll() {
                Some(x) => got.push(x),
                None => std::thread::yield_now(),
            }
        }
        assert_eq!(got, (0..200).collect::<Vec<_>>());
        let (_, st) = h.stop().expect("loop");
        assert_eq!(st.out_dropped, 0);
        // At most all but the 16 that fit (fewer if the reader took some
        // while the loop was still emitting).
        assert!((1..=184).contains(&st.out_held_max), "{st:?}");
    }

    /// A [`MemDevice`] that cannot wait for frames (no doorbell): the loop
    /// parks its thread instead.
    struct NoWait(MemDevice);

    impl FrameDevice for NoWait {
        fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
            self.0.rx_burst(max, sink)
        }
        fn tx(&mut self, frame: &[u8]) -> bool {
            self.0.tx(frame)
        }
    }

    /// A [`MemDevice`] end that shows when its loop sleeps in `wait`, and
    /// for how long it asked to.
    struct Probed {
        inner: MemDevice,
        waiting: Arc<Mutex<Option<(Instant, Duration)>>>,
    }

    impl FrameDevice for Probed {
        fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
            self.inner.rx_burst(max, sink)
        }
        fn tx(&mut self, frame: &[u8]) -> bool {
            self.inner.tx(frame)
        }
        fn doorbell(&self) -> Option<Arc<dyn iwarp_frame::Doorbell>> {
            self.inner.doorbell()
        }
        fn wait(&mut self, timeout: Duration) {
            *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((Instant::now(), timeout));
            self.inner.wait(timeout);
            *self.waiting.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
    }

    /// Sends back every frame it receives.
    #[derive(Default)]
    struct Echo {
        got: Vec<Vec<u8>>,
    }

    impl Engine for Echo {
        type Command = ();
        type Output = ();
        fn handle_frame(&mut self, frame: &[u8], _now: u64) {
            self.got.push(frame.to_vec());
        }
        fn handle_command(&mut self, _cmd: (), _now: u64) {}
        fn poll(&mut self, _now: u64, tx: &mut dyn FrameSink, _out: &mut dyn FnMut(())) -> bool {
            let busy = !self.got.is_empty();
            for f in self.got.drain(..) {
                tx.send_parts(&[&f]);
            }
            busy
        }
    }

    /// A frame wakes a loop asleep in its device's `wait`: the loop is
    /// caught in a wait of at least 8 s with most of it left (its pause
    /// doubles from 1 µs, so about 8.4 s in), a frame is sent, and the echo
    /// must come back within 5 s (without the wake it would come when the
    /// wait ends, over 7.9 s later; the margin is for a loaded machine).
    #[test]
    fn a_frame_wakes_a_loop_sleeping_on_its_device() {
        let (dev, mut peer) = MemDevice::pair(4);
        let waiting = Arc::new(Mutex::new(None));
        let dev = Probed {
            inner: dev,
            waiting: waiting.clone(),
        };
        let mode = Mode::Adaptive {
            spins: 1,
            max_sleep: Duration::from_secs(20),
        };
        let h = spawn(Echo::default(), dev, None, mode, 4);
        let give_up = Instant::now() + Duration::from_secs(60);
        let sent = loop {
            assert!(Instant::now() < give_up, "the loop never slept 8 s");
            let w = *waiting.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((from, t)) = w {
                if t >= Duration::from_secs(8) && from.elapsed() < Duration::from_millis(100) {
                    assert!(peer.tx(b"ping"));
                    break Instant::now();
                }
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let mut back = Vec::new();
        while back.is_empty() {
            assert!(
                sent.elapsed() < Duration::from_secs(5),
                "the frame waited for the loop's sleep"
            );
            peer.rx_burst(1, &mut |f| back.push(f.to_vec()));
            std::thread::yield_now();
        }
        assert_eq!(back, [b"ping".to_vec()]);
        let (_, st) = h.stop().expect("loop");
        assert!(
            st.device_waits > 10 && st.device_waits == st.sleeps,
            "{st:?}"
        );
    }

    /// Counts polls and says when the first poll at or after `due` came.
    struct Due {
        due: u64,
        polled_at: Arc<Mutex<Option<u64>>>,
    }

    impl Engine for Due {
        type Command = ();
        type Output = ();
        fn handle_frame(&mut self, _frame: &[u8], _now: u64) {}
        fn handle_command(&mut self, _cmd: (), _now: u64) {}
        fn poll_timeout(&self) -> Option<u64> {
            Some(self.due)
        }
        fn poll(&mut self, now: u64, _tx: &mut dyn FrameSink, _out: &mut dyn FnMut(())) -> bool {
            if now >= self.due {
                let mut g = self.polled_at.lock().unwrap_or_else(|p| p.into_inner());
                if g.is_none() {
                    *g = Some(now);
                    // Next deadline far away: the loop may sleep again.
                    self.due = u64::MAX;
                }
            }
            false
        }
    }

    /// An idle loop does not sleep past the engine's deadline. Idle, the
    /// pause doubles from 1 µs: at 3 s into the loop it is in a sleep of
    /// about 2.1 s that began near 2.1 s, so without the clamp the engine
    /// would be polled about 1.2 s late; it must be within 500 ms.
    #[test]
    fn an_idle_loop_wakes_for_the_engines_deadline() {
        for wait in [true, false] {
            let (dev, _peer) = MemDevice::pair(1);
            let polled_at = Arc::new(Mutex::new(None));
            let due = 3_000_000_000;
            let e = Due {
                due,
                polled_at: polled_at.clone(),
            };
            let mode = Mode::Adaptive {
                spins: 1,
                max_sleep: Duration::from_secs(20),
            };
            let h = if wait {
                spawn(e, dev, None, mode, 4)
            } else {
                // Parked, not in the device's wait: the same bound.
                spawn(e, NoWait(dev), None, mode, 4)
            };
            let give_up = Instant::now() + Duration::from_secs(10);
            let at = loop {
                if let Some(at) = *polled_at.lock().unwrap_or_else(|p| p.into_inner()) {
                    break at;
                }
                assert!(Instant::now() < give_up, "never polled after the deadline");
                std::thread::sleep(Duration::from_millis(10));
            };
            assert!(
                at - due < 500_000_000,
                "polled {} ms late (device wait: {wait})",
                (at - due) / 1_000_000
            );
            drop(h);
        }
    }

    /// Idle, with a deadline far away and nothing else to do.
    struct Quiet {
        quiescent: bool,
    }

    impl Engine for Quiet {
        type Command = ();
        type Output = ();
        fn handle_frame(&mut self, _frame: &[u8], _now: u64) {}
        fn handle_command(&mut self, _cmd: (), _now: u64) {}
        fn poll_timeout(&self) -> Option<u64> {
            Some(3_600_000_000_000)
        }
        fn quiescent(&self) -> bool {
            self.quiescent
        }
        fn poll(&mut self, _now: u64, _tx: &mut dyn FrameSink, _out: &mut dyn FnMut(())) -> bool {
            false
        }
    }

    /// A quiescent engine on a device that can wait lets its loop sleep
    /// [`QUIESCENT_MAX`] at a time; one that is not, or on a device that
    /// cannot wait, keeps the bounded pause (200 µs here: thousands of
    /// sleeps in 1.5 s).
    #[test]
    fn a_quiescent_loop_sleeps_long_only_on_a_device_that_can_wait() {
        let mode = Mode::Adaptive {
            spins: 1,
            max_sleep: Duration::from_micros(200),
        };
        let sleeps = |h: LoopHandle<Quiet>| {
            std::thread::sleep(Duration::from_millis(1500));
            h.stop().expect("loop").1
        };
        let (dev, _peer) = MemDevice::pair(1);
        let st = sleeps(spawn(Quiet { quiescent: true }, dev, None, mode, 4));
        assert!(st.sleeps < 20 && st.device_waits == st.sleeps, "{st:?}");
        let (dev, _peer) = MemDevice::pair(1);
        let st = sleeps(spawn(Quiet { quiescent: false }, dev, None, mode, 4));
        assert!(st.sleeps > 500, "{st:?}");
        let (dev, _peer) = MemDevice::pair(1);
        let st = sleeps(spawn(Quiet { quiescent: true }, NoWait(dev), None, mode, 4));
        assert!(st.sleeps > 500 && st.device_waits == 0, "{st:?}");
    }

    /// A thread waiting for outputs is woken when the loop hands one
    /// over: registered, it finds the queue empty and waits up to 20 s; a
    /// post 200 ms later makes the loop emit, and the wait must end within
    /// 10 s of it (microseconds in practice; without the wake, 19.8 s).
    #[test]
    fn an_output_ends_a_registered_wait() {
        let (dev, _peer) = MemDevice::pair(1);
        let h = spawn(Burst { n: 1, go: false }, dev, None, Mode::BusyPoll, 4);
        let waiter = h.output_waiter();
        assert!(h.poll().is_none());
        let posted = std::thread::scope(|s| {
            let t = s.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                let at = Instant::now();
                assert!(h.post(()).is_ok());
                at
            });
            waiter.wait(Duration::from_secs(20));
            t.join().expect("poster")
        });
        assert!(
            posted.elapsed() < Duration::from_secs(10),
            "woken {:?} after the post",
            posted.elapsed()
        );
        assert_eq!(h.poll(), Some(0));
        // And outputs_moved wakes a waiter too (another thread pumped).
        let waiter = h.output_waiter();
        let t0 = Instant::now();
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                h.outputs_moved();
            });
            waiter.wait(Duration::from_secs(20));
        });
        assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    }

    /// A post wakes a loop parked in adaptive mode. Idle, the loop's pause
    /// doubles from 1 µs, so 8.8 s in it is in a park that began about
    /// 8.4 s in and lasts about as long: without the wake the command would
    /// wait about 8 s; it must be handled within 4 s (in practice
    /// microseconds; the margin is for a loaded machine).
    /// Once parked on its thread (a device that cannot wait), once asleep
    /// in the device's wait (rung by the post).
    #[test]
    fn a_post_unparks_a_sleeping_loop() {
        std::thread::scope(|s| {
            s.spawn(|| post_wakes(|| NoWait(MemDevice::pair(1).0), false));
            s.spawn(|| post_wakes(|| MemDevice::pair(1).0, true));
        });
    }

    fn post_wakes<D: FrameDevice + 'static>(dev: impl FnOnce() -> D, waits: bool) {
        let dev = dev();
        let mode = Mode::Adaptive {
            spins: 1,
            max_sleep: Duration::from_secs(20),
        };
        let h = spawn(Burst { n: 1, go: false }, dev, None, mode, 4);
        std::thread::sleep(Duration::from_millis(8_800));
        let posted = Instant::now();
        assert!(h.post(()).is_ok());
        while h.poll().is_none() {
            assert!(
                posted.elapsed() < Duration::from_secs(4),
                "the command waited for the loop's pause"
            );
            std::thread::yield_now();
        }
        let (_, st) = h.stop().expect("loop");
        assert!(st.sleeps > 10, "{st:?}");
        assert_eq!(st.device_waits > 0, waits, "{st:?}");
    }

    #[test]
    fn past_the_bound_the_newest_are_dropped_and_counted() {
        let depth = 2;
        let limit = depth * HELD_OUTPUTS_PER_SLOT;
        let n = (depth + limit + 10) as u32;
        let h = burst(n, depth);
        // The round that emits fills the queue; nothing reads until then.
        let deadline = Instant::now() + Duration::from_secs(30);
        while h.outputs.len() < depth && Instant::now() < deadline {
            std::thread::yield_now();
        }
        let outputs = h.outputs.clone();
        let (_, st) = h.stop().expect("loop");
        assert_eq!(st.out_dropped, 10);
        assert_eq!(st.out_held_max, limit as u64);
        let mut got = Vec::new();
        while let Some(x) = outputs.pop() {
            got.push(x);
        }
        // The queue holds the first ones, in order (the loop stopped with
        // the held ones still waiting).
        assert_eq!(got, (0..depth as u32).collect::<Vec<_>>());
    }
}
