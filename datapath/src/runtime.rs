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
//!
//! The loops of one context may share a [`SoftSteering`]: each received
//! frame whose RSS queue ([`Rss::queue_of_frame`]; ARP and non-IPv4:
//! queue 0) is another loop's is copied into that loop's inbox and the
//! loop woken; each loop takes its inbox before its own receive burst.
//! This serves links whose queue choice is the sender's (a veth).

use std::any::Any;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::stages::Mark;
use crossbeam_queue::ArrayQueue;
use iwarp_net::rss::Rss;

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
    /// `sent` at the last [`FrameSink::publish`] that flushed.
    published: u64,
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

    fn send_built_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.send_upto(max, build)
    }

    /// Flushes the device when a frame went out since the last publish
    /// (the round's own flush still follows, for completions and kicks
    /// owed).
    fn publish(&mut self) {
        if self.sent != self.published {
            self.published = self.sent;
            self.dev.flush();
            crate::stages::mark(Mark::Published);
        }
    }
}

impl<D: FrameDevice> DeviceSink<'_, D> {
    fn send_upto(&mut self, max: usize, build: &mut dyn FnMut(&mut [u8]) -> Option<usize>) -> bool {
        let mut cancelled = false;
        let ok = self.dev.tx_build_upto(max, &mut |buf| {
            let n = build(buf);
            cancelled = n.is_none();
            n
        });
        self.count(ok, cancelled)
    }

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
    /// Run to completion on the application's threads: no thread polls.
    /// A thread that polls, waits or posts through the handle
    /// ([`LoopHandle::drive`], [`Drive`]) runs the round itself, so one
    /// thread on one core posts, moves frames and reaps completions with
    /// no hand-off. A keeper thread, asleep while application threads
    /// drive, takes over as an [`Adaptive`](Mode::Adaptive) loop (with
    /// these `spins` and `max_sleep`) once none has for `grace` — timers,
    /// acknowledgements and a peer's frames go on while the application
    /// computes or sleeps on a descriptor — and hands back as soon as one
    /// calls again.
    Inline {
        /// How long without an application round before the keeper drives.
        grace: Duration,
        /// The keeper's idle rounds before yielding.
        spins: u32,
        /// The keeper's (and a waiting application thread's) longest sleep.
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
    /// Whether the thread was pinned to the requested core (an inline
    /// loop's keeper, [`Mode::Inline`]).
    pub pinned: bool,
    /// Rounds run by application threads ([`Mode::Inline`]).
    pub app_rounds: u64,
    /// Times an inline loop's keeper took over because no application
    /// thread had run a round for the grace period.
    pub keeper_takeovers: u64,
    /// Idle rounds after which a busy loop yielded its CPU, which it
    /// shares with the application ([`shares_cpu`]).
    pub yields: u64,
    /// Received frames this loop copied to another loop's inbox
    /// ([`SoftSteering`]: the frame's queue is the other loop's).
    pub steered_out: u64,
    /// Frames other loops copied into this loop's inbox that it handled.
    pub steered_in: u64,
    /// Frames this loop meant for another loop's inbox that found it full
    /// (dropped; a retransmission recovers them).
    pub steer_dropped: u64,
}

impl LoopStats {
    /// Add the counters of `o` (another loop of one context): sums, the
    /// largest `out_held_max`, and `pinned` only if both were.
    pub fn add(&mut self, o: &LoopStats) {
        let LoopStats {
            rounds,
            rx_frames,
            tx_frames,
            tx_dropped,
            out_dropped,
            out_held_max,
            sleeps,
            device_waits,
            pinned,
            app_rounds,
            keeper_takeovers,
            yields,
            steered_out,
            steered_in,
            steer_dropped,
        } = *o;
        self.rounds += rounds;
        self.rx_frames += rx_frames;
        self.tx_frames += tx_frames;
        self.tx_dropped += tx_dropped;
        self.out_dropped += out_dropped;
        self.out_held_max = self.out_held_max.max(out_held_max);
        self.sleeps += sleeps;
        self.device_waits += device_waits;
        self.pinned &= pinned;
        self.app_rounds += app_rounds;
        self.keeper_takeovers += keeper_takeovers;
        self.yields += yields;
        self.steered_out += steered_out;
        self.steered_in += steered_in;
        self.steer_dropped += steer_dropped;
    }
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
/// round that handed over outputs while any waited. Several loops may
/// share one ([`spawn_with_bell`]): a thread waiting for the outputs of
/// any of them then wakes for each.
#[derive(Debug, Default)]
pub struct OutputBell {
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

thread_local! {
    /// This thread is inside a round (a loop thread, the keeper, or an
    /// application thread driving inline): engine hooks run here.
    static IN_ROUND: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Whether the calling thread is running a loop's round right now (an
/// engine hook, say): a call that would wait for the loop must refuse.
pub fn in_round() -> bool {
    IN_ROUND.with(|f| f.get())
}

/// Driving an inline loop ([`Mode::Inline`]) from an application thread,
/// without the loop's types: what a completion queue keeps to drive the
/// loop that fills it.
pub trait Drive: Send + Sync {
    /// Run one round on this thread unless another thread is running one
    /// (or this one is, from inside a round); true if it ran.
    fn drive(&self) -> bool;
    /// Wait for work as an idle loop does, on this thread: run a round,
    /// and when it found nothing sleep until a frame, a post or the
    /// engine's next deadline, at most `pause`; true. False at once when
    /// another thread holds the loop (it does the work; the caller waits
    /// its own way for the outcome) or this thread is inside a round.
    fn idle(&self, pause: Duration) -> bool;
    /// [`drive`](Self::drive), but a loop another thread holds (an
    /// application thread, or the keeper) is left to it: false at once,
    /// without asking for it back. For a thread that drives loops other
    /// than its own in passing (an inline context of several loops): the
    /// loop is being driven already, and a thread asleep holding it is
    /// not woken.
    fn help(&self) -> bool;
    /// [`idle`](Self::idle), leaving a loop another thread holds to it
    /// as [`help`](Self::help) does.
    fn idle_if_free(&self, pause: Duration) -> bool;
}

impl std::fmt::Debug for dyn Drive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Drive")
    }
}

/// Software steering shared by the loops of one context: loop `i` owns
/// the frames that RSS with the steering's [`Rss`] sends to queue `i`
/// ([`Rss::queue_of_frame`]; ARP and frames RSS does not hash go to queue
/// 0, the loop that answers ARP), whichever queue of the device they
/// arrived on. A loop that receives a frame another loop owns copies it
/// into that loop's inbox, a bounded lock-free queue (full: the frame is
/// dropped and counted in [`LoopStats::steer_dropped`], never queued
/// without bound), and wakes the owner when it sleeps (its device's
/// doorbell and an unpark, as a post does). Every loop takes up to 64
/// frames from its inbox at the start of each round, before its own
/// receive burst. Copies are made into buffers that return to a shared
/// spare list once handled, so a steady flow allocates nothing.
///
/// For links whose queue choice is not ours (a veth: the sender picks
/// the queue). With the symmetric key a flow and its answers have one
/// owner, and active opens pick ports whose answers the same RSS sends
/// to their loop (the stack's `StackConfig::steering` with this `Rss`).
pub struct SoftSteering {
    rss: Rss,
    inboxes: Box<[Inbox]>,
    spare: ArrayQueue<Vec<u8>>,
}

impl std::fmt::Debug for SoftSteering {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SoftSteering")
            .field("queues", &self.inboxes.len())
            .field(
                "queued",
                &self
                    .inboxes
                    .iter()
                    .map(|i| i.frames.len())
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// A loop's sleep flag and its device's doorbell (`None`: it parks).
type LoopWaker = (Arc<AtomicBool>, Option<Arc<dyn iwarp_frame::Doorbell>>);

/// One loop's inbox and how to wake the loop.
struct Inbox {
    frames: ArrayQueue<Vec<u8>>,
    /// A loop has taken this queue ([`SoftSteering::queue`]).
    taken: AtomicBool,
    /// The loop's sleep flag and device doorbell, set when it is spawned.
    waker: std::sync::OnceLock<LoopWaker>,
    /// The thread that sleeps in the loop's rounds (its own thread, or an
    /// inline loop's keeper), set by that thread before its first round.
    thread: std::sync::OnceLock<std::thread::Thread>,
}

impl Inbox {
    /// A frame was queued: wake the loop if it sleeps (pairs with the
    /// fence in [`Core::sleep_once`], as [`LoopHandle::post`] does).
    fn wake(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        let Some((sleeping, bell)) = self.waker.get() else {
            return;
        };
        if sleeping.load(Ordering::Relaxed) {
            if let Some(b) = bell {
                b.ring();
            }
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

impl SoftSteering {
    /// Steering by `rss` over `rss.queues()` loops, each inbox holding up
    /// to `depth` frames (at least 1).
    pub fn new(rss: Rss, depth: usize) -> Arc<SoftSteering> {
        let depth = depth.max(1);
        let queues = usize::from(rss.queues());
        Arc::new(SoftSteering {
            inboxes: (0..queues)
                .map(|_| Inbox {
                    frames: ArrayQueue::new(depth),
                    taken: AtomicBool::new(false),
                    waker: std::sync::OnceLock::new(),
                    thread: std::sync::OnceLock::new(),
                })
                .collect(),
            spare: ArrayQueue::new(depth.saturating_mul(queues).max(1)),
            rss,
        })
    }

    /// The RSS that names each frame's owner.
    pub fn rss(&self) -> &Rss {
        &self.rss
    }

    /// Queue `queue`'s place in the steering, for the loop that will own
    /// it ([`spawn_steered`]); `None` when `queue` is not below the queue
    /// count or another loop has it already.
    pub fn queue(self: &Arc<Self>, queue: u16) -> Option<SteeredQueue> {
        let inbox = self.inboxes.get(usize::from(queue))?;
        if inbox.taken.swap(true, Ordering::AcqRel) {
            return None;
        }
        Some(SteeredQueue {
            steering: self.clone(),
            queue,
        })
    }

    /// Frames waiting in `queue`'s inbox.
    pub fn pending(&self, queue: u16) -> usize {
        self.inboxes
            .get(usize::from(queue))
            .map_or(0, |i| i.frames.len())
    }
}

/// One loop's place in a [`SoftSteering`] ([`SoftSteering::queue`]).
#[derive(Debug)]
pub struct SteeredQueue {
    steering: Arc<SoftSteering>,
    queue: u16,
}

impl SteeredQueue {
    /// The queue this loop owns.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    fn inbox(&self) -> &Inbox {
        // `queue` was checked against the inboxes when this was made.
        &self.steering.inboxes[usize::from(self.queue)]
    }

    /// Pass a received frame on if another loop owns it: copied into that
    /// loop's inbox (counted in `out`) or, the inbox full, dropped
    /// (counted in `dropped`). False: the frame is this loop's.
    fn forward(&self, frame: &[u8], out: &mut u64, dropped: &mut u64) -> bool {
        let s = &*self.steering;
        let owner = s.rss.queue_of_frame(frame).unwrap_or(0);
        if owner == self.queue {
            return false;
        }
        let Some(inbox) = s.inboxes.get(usize::from(owner)) else {
            // Not reachable (the RSS table names queues below its count);
            // handling the frame here is the safe answer.
            return false;
        };
        let mut buf = s.spare.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(frame);
        match inbox.frames.push(buf) {
            Ok(()) => {
                *out += 1;
                inbox.wake();
            }
            Err(buf) => {
                *dropped += 1;
                let _ = s.spare.push(buf);
            }
        }
        true
    }

    /// Handle up to 64 frames of this loop's inbox (commands drained
    /// before each, as before each frame of a receive burst); how many.
    fn take<E: Engine>(&self, c: &ArrayQueue<E::Command>, engine: &mut E, now: u64) -> u64 {
        let (inbox, spare) = (self.inbox(), &self.steering.spare);
        let mut n = 0;
        while n < 64 {
            let Some(f) = pop(&inbox.frames) else { break };
            drain_commands(c, engine, now);
            engine.handle_frame(&f, now);
            let _ = spare.push(f);
            n += 1;
        }
        n
    }
}

/// One loop's state and its side of the queues: what a round needs.
struct Core<E: Engine, D: FrameDevice> {
    engine: E,
    dev: D,
    commands: Arc<ArrayQueue<E::Command>>,
    outputs: Arc<ArrayQueue<E::Output>>,
    probe: Arc<Probe>,
    served: u64,
    reader: Option<DeviceReader<D>>,
    outputs_bell: Arc<OutputBell>,
    st: LoopStats,
    start: Instant,
    /// Outputs waiting for room in the queue, oldest first.
    held: std::collections::VecDeque<E::Output>,
    held_limit: usize,
    /// The device can wait for frames ([`FrameDevice::doorbell`]).
    waits: bool,
    /// Idle rounds in a row, and the next sleep (adaptive waiting).
    idle: u32,
    sleep: Duration,
    /// The clock reading of the last round's start (ns).
    last_now: u64,
    /// This loop's place in a software steering ([`spawn_steered`]).
    steer: Option<SteeredQueue>,
}

impl<E: Engine, D: FrameDevice> Core<E, D> {
    /// Name the calling thread as the one that sleeps in this loop's
    /// rounds, for loops that pass it frames ([`SoftSteering`]).
    fn register_thread(&self) {
        if let Some(q) = &self.steer {
            let _ = q.inbox().thread.set(std::thread::current());
        }
    }

    fn now(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    /// One round: commands, a receive burst, the engine's poll (timers,
    /// transmissions, outputs), a device flush, a probe. True if it did
    /// anything (then the idle count starts again).
    fn round(&mut self) -> bool {
        IN_ROUND.with(|f| f.set(true));
        let busy = self.round_inner();
        IN_ROUND.with(|f| f.set(false));
        if busy {
            self.idle = 0;
            self.sleep = Duration::from_micros(1);
        }
        busy
    }

    fn round_inner(&mut self) -> bool {
        crate::stages::round_start();
        let st = &mut self.st;
        st.rounds += 1;
        let now = self.start.elapsed().as_nanos() as u64;
        self.last_now = now;
        let (c, engine) = (&*self.commands, &mut self.engine);
        let mut busy = false;
        // Commands before frames: work an application posted before a
        // frame arrived (a receive buffer, say) is in place when the
        // frame is processed, as with a synchronous post. Drained again
        // before each frame: a frame taken from the device now may have
        // been sent after a post that came in after the drain above (the
        // application posts, then makes the peer send).
        busy |= drain_commands(c, engine, now);
        let mut late = false;
        let n = match &self.steer {
            None => self.dev.rx_burst(64, &mut |f| {
                late |= drain_commands(c, engine, now);
                crate::stages::mark_first(Mark::FrameIn);
                engine.handle_frame(f, now);
                crate::stages::mark(Mark::FramesHandled);
            }),
            Some(s) => {
                // Frames other loops passed on first: they arrived
                // before this burst's.
                let taken = s.take(c, engine, now);
                st.steered_in += taken;
                busy |= taken > 0;
                let (mut out, mut dropped) = (0, 0);
                let n = self.dev.rx_burst(64, &mut |f| {
                    late |= drain_commands(c, engine, now);
                    if !s.forward(f, &mut out, &mut dropped) {
                        crate::stages::mark_first(Mark::FrameIn);
                        engine.handle_frame(f, now);
                        crate::stages::mark(Mark::FramesHandled);
                    }
                });
                st.steered_out += out;
                st.steer_dropped += dropped;
                n
            }
        };
        busy |= late;
        st.rx_frames += n as u64;
        busy |= n > 0;
        // Frames go straight from the engine to the device (no copy in
        // between, no allocation per frame).
        let mut lost = 0u64;
        let mut handed = false;
        let mut sink = DeviceSink {
            dev: &mut self.dev,
            sent: 0,
            refused: 0,
            published: 0,
        };
        let (o, held, held_limit) = (&*self.outputs, &mut self.held, self.held_limit);
        let mut output = |out| {
            // In order: nothing passes what is already held; past the
            // bound the newest is dropped (counted), as a full completion
            // queue overruns.
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
        };
        busy |= engine.poll(now, &mut sink, &mut output);
        crate::stages::mark(Mark::FirstPoll);
        // What was posted during the poll (a run-to-completion hook's
        // answer to what this round received, an application thread's
        // post) goes out in this round: its commands, then one more poll,
        // instead of waiting for the end of this round and the start of
        // the next.
        if drain_commands(c, engine, now) {
            crate::stages::mark(Mark::PostsTaken);
            busy = true;
            engine.poll(now, &mut sink, &mut output);
        }
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
            self.outputs_bell.ring();
        }
        let (sent, refused) = (sink.sent, sink.refused);
        st.tx_frames += sent;
        st.tx_dropped += refused;
        st.out_dropped += lost;
        busy |= sent + refused > 0;
        self.dev.flush();
        crate::stages::round_end();
        let asked = self.probe.requested.load(Ordering::Acquire);
        if asked != self.served {
            let d: Box<dyn Any + Send> = match self.reader.as_mut() {
                Some(r) => r(&self.dev),
                None => Box::new(()),
            };
            match self.probe.latest.lock() {
                Ok(mut g) => *g = Some((*st, d)),
                Err(p) => *p.into_inner() = Some((*st, d)),
            }
            self.served = asked;
            self.probe.served.store(asked, Ordering::Release);
        }
        busy
    }

    /// After an idle round, wait as an adaptive loop does: spin `spins`
    /// rounds, then yield, then sleep (doubling, at most `max_sleep`,
    /// never past the engine's next deadline; until it when nothing else
    /// can need a round). The sleep is in the device's wait (a frame ends
    /// it) or a park; `sleeping` is raised around it so that a post wakes
    /// it (see [`LoopHandle::post`] for the ordering).
    fn idle_step(
        &mut self,
        spins: u32,
        max_sleep: Duration,
        sleeping: &AtomicBool,
        stop: &AtomicBool,
    ) {
        self.idle += 1;
        if self.idle > spins * 2 {
            self.sleep_once(self.sleep, true, sleeping, stop);
            self.sleep = (self.sleep * 2).min(max_sleep);
        } else if self.idle > spins {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// Sleep at most `bound` (see [`idle_step`](Self::idle_step)); with
    /// `extend`, up to [`QUIESCENT_MAX`] when only a frame, a post or the
    /// engine's deadline can need a round and a frame ends the sleep.
    fn sleep_once(
        &mut self,
        bound: Duration,
        extend: bool,
        sleeping: &AtomicBool,
        stop: &AtomicBool,
    ) {
        let bound = if extend && self.waits && self.held.is_empty() && self.engine.quiescent() {
            bound.max(QUIESCENT_MAX)
        } else {
            bound
        };
        let pause = match self.engine.poll_timeout() {
            Some(at) => bound.min(Duration::from_nanos(at.saturating_sub(self.now()))),
            None => bound,
        };
        sleeping.store(true, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::SeqCst);
        if !pause.is_zero()
            && self.commands.is_empty()
            && self
                .steer
                .as_ref()
                .is_none_or(|s| s.inbox().frames.is_empty())
            && !stop.load(Ordering::Acquire)
        {
            if self.waits {
                self.dev.wait(pause);
                self.st.device_waits += 1;
            } else {
                std::thread::park_timeout(pause);
            }
            self.st.sleeps += 1;
        }
        sleeping.store(false, Ordering::Relaxed);
    }
}

/// What the handle, the application threads and the keeper of an inline
/// loop ([`Mode::Inline`]) share.
struct InlineLoop<E: Engine, D: FrameDevice> {
    /// The loop; `None` once stopped.
    core: Mutex<Option<Core<E, D>>>,
    /// When an application thread last ran a round (ns on the loop's clock).
    last_app: AtomicU64,
    /// An application thread found the keeper holding the loop: the
    /// keeper hands it back at the end of its round.
    want: AtomicBool,
    /// The thread asleep holding the loop (unparked by a post when the
    /// device has no doorbell).
    sleeper: Mutex<Option<std::thread::Thread>>,
    sleeping: Arc<AtomicBool>,
    bell: Option<Arc<dyn iwarp_frame::Doorbell>>,
    stop: Arc<AtomicBool>,
    keeper: OnceLockThread,
    start: Instant,
    max_sleep: Duration,
}

/// The keeper thread's handle, set once it is spawned.
type OnceLockThread = std::sync::OnceLock<std::thread::Thread>;

impl<E: Engine, D: FrameDevice> InlineLoop<E, D> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Core<E, D>>> {
        self.core.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn try_lock(&self) -> Option<std::sync::MutexGuard<'_, Option<Core<E, D>>>> {
        match self.core.try_lock() {
            Ok(g) => Some(g),
            Err(std::sync::TryLockError::Poisoned(p)) => Some(p.into_inner()),
            Err(std::sync::TryLockError::WouldBlock) => None,
        }
    }

    /// Wake whoever sleeps holding the loop, and the keeper.
    fn wake(&self) {
        if let Some(b) = &self.bell {
            b.ring();
        }
        if let Some(t) = &*self.sleeper.lock().unwrap_or_else(|p| p.into_inner()) {
            t.unpark();
        }
        if let Some(t) = self.keeper.get() {
            t.unpark();
        }
    }

    /// Someone else holds the loop: ask for it back (the keeper lets go
    /// after its round; a sleeper is woken to run one).
    fn ask(&self) {
        self.want.store(true, Ordering::Release);
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.wake();
        }
    }

    /// The keeper: asleep while application threads drive; after `grace`
    /// without one, an adaptive loop until one asks for the loop back.
    fn keep(&self, grace: Duration, spins: u32, max_sleep: Duration) -> Option<(E, LoopStats)> {
        let grace_ns = grace.as_nanos() as u64;
        while !self.stop.load(Ordering::Acquire) {
            let now = self.start.elapsed().as_nanos() as u64;
            let since = now.saturating_sub(self.last_app.load(Ordering::Relaxed));
            if since < grace_ns {
                std::thread::park_timeout(Duration::from_nanos(grace_ns - since));
                continue;
            }
            let Some(mut g) = self.try_lock() else {
                // An application thread holds it (asleep in a wait, say).
                std::thread::park_timeout(grace);
                continue;
            };
            let Some(core) = g.as_mut() else { break };
            core.st.keeper_takeovers += 1;
            self.want.store(false, Ordering::Relaxed);
            while !self.stop.load(Ordering::Acquire) && !self.want.load(Ordering::Acquire) {
                if !core.round() {
                    *self.sleeper.lock().unwrap_or_else(|p| p.into_inner()) =
                        Some(std::thread::current());
                    core.idle_step(spins, max_sleep, &self.sleeping, &self.stop);
                }
            }
            // One more round for the thread that asked: what it posted
            // before asking goes out now, not when it next calls in.
            core.round();
            // Handed back: the application thread that asked drives now.
            self.last_app.store(core.now(), Ordering::Relaxed);
        }
        self.lock().take().map(|c| (c.engine, c.st))
    }
}

impl<E: Engine, D: FrameDevice> InlineLoop<E, D> {
    /// The loop for a round on this thread: `None` inside a round, when
    /// stopped, or when another thread holds it (then, with `ask`, asked
    /// back, [`ask`](Self::ask)).
    fn take_round(&self, ask: bool) -> Option<std::sync::MutexGuard<'_, Option<Core<E, D>>>> {
        if in_round() {
            return None;
        }
        let Some(g) = self.try_lock() else {
            if ask {
                self.ask();
            }
            return None;
        };
        g.is_some().then_some(g)
    }

    fn round_here(&self, ask: bool) -> bool {
        let Some(mut g) = self.take_round(ask) else {
            return false;
        };
        let Some(core) = g.as_mut() else { return false };
        core.st.app_rounds += 1;
        core.round();
        // The round's own clock reading: no second one.
        self.last_app.store(core.last_now, Ordering::Relaxed);
        true
    }

    fn idle_here(&self, pause: Duration, ask: bool) -> bool {
        let Some(mut g) = self.take_round(ask) else {
            return false;
        };
        let Some(core) = g.as_mut() else { return false };
        core.st.app_rounds += 1;
        let busy = core.round();
        self.last_app.store(core.last_now, Ordering::Relaxed);
        if !busy {
            *self.sleeper.lock().unwrap_or_else(|p| p.into_inner()) = Some(std::thread::current());
            core.sleep_once(pause.min(self.max_sleep), false, &self.sleeping, &self.stop);
            self.last_app.store(core.now(), Ordering::Relaxed);
        }
        true
    }
}

impl<E: Engine, D: FrameDevice> Drive for InlineLoop<E, D> {
    fn drive(&self) -> bool {
        self.round_here(true)
    }

    fn idle(&self, pause: Duration) -> bool {
        self.idle_here(pause, true)
    }

    fn help(&self) -> bool {
        self.round_here(false)
    }

    fn idle_if_free(&self, pause: Duration) -> bool {
        self.idle_here(pause, false)
    }
}

/// Who runs the rounds.
enum Driver<E: Engine> {
    /// A loop thread of its own.
    Thread(Option<JoinHandle<(E, LoopStats)>>),
    /// Application threads, and a keeper ([`Mode::Inline`]).
    Inline {
        shared: Arc<dyn InlineControl<E>>,
        keeper: Option<JoinHandle<Option<(E, LoopStats)>>>,
    },
}

/// An inline loop as its handle sees it (without the device's type).
trait InlineControl<E: Engine>: Drive {
    fn wake_all(&self);
    fn take(&self) -> Option<(E, LoopStats)>;
    fn as_drive(self: Arc<Self>) -> Arc<dyn Drive>;
}

impl<E: Engine, D: FrameDevice + 'static> InlineControl<E> for InlineLoop<E, D> {
    fn wake_all(&self) {
        self.wake();
    }
    fn take(&self) -> Option<(E, LoopStats)> {
        self.lock().take().map(|c| (c.engine, c.st))
    }
    fn as_drive(self: Arc<Self>) -> Arc<dyn Drive> {
        self
    }
}

impl<E: Engine> std::fmt::Debug for Driver<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Driver::Thread(_) => f.write_str("Thread"),
            Driver::Inline { .. } => f.write_str("Inline"),
        }
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
    driver: Driver<E>,
    /// The loop's own thread shares the one CPU the application may run
    /// on ([`shares_cpu`]).
    shares_cpu: bool,
}

/// Whether a loop thread started now from this thread, pinned to `core`
/// if given, shares its CPU with this thread: this thread may run on one
/// CPU only (a process confined with `taskset -c N`, a one-CPU container)
/// and the loop runs there too (unpinned, it inherits the mask; pinned,
/// to that CPU). A busy loop there yields after each idle round instead
/// of spinning out its time slice, and an application that spins on an
/// empty completion queue should yield too ([`LoopHandle::shares_cpu`]):
/// spinning cannot make progress while the thread that would make it
/// waits for the CPU.
pub fn shares_cpu(core: Option<usize>) -> bool {
    match core_affinity::get_core_ids().as_deref() {
        Some([only]) => core.is_none_or(|c| c == only.id),
        _ => false,
    }
}

impl<E: Engine> LoopHandle<E> {
    /// The loop has a thread of its own on the one CPU the application
    /// thread that started it may use ([`shares_cpu`]): a thread that
    /// spins waiting for the loop's work should yield the CPU between
    /// looks (the `iwarp` crate's completion queues do).
    pub fn shares_cpu(&self) -> bool {
        self.shares_cpu
    }

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
        match &self.driver {
            Driver::Thread(j) => {
                if let Some(b) = &self.bell {
                    b.ring();
                }
                if let Some(j) = j {
                    j.thread().unpark();
                }
            }
            Driver::Inline { shared, .. } => shared.wake_all(),
        }
    }
    /// Run one round on the calling thread if the loop is inline
    /// ([`Mode::Inline`]) and no other thread is running one; true if it
    /// ran. A no-op returning false for a loop with its own thread.
    pub fn drive(&self) -> bool {
        match &self.driver {
            Driver::Thread(_) => false,
            Driver::Inline { shared, .. } => shared.drive(),
        }
    }
    /// On an inline loop, wait for its work on the calling thread, at most
    /// `pause` ([`Drive::idle`]); false at once for a loop with its own
    /// thread, or when another thread holds the inline loop (the caller
    /// waits its own way).
    pub fn idle(&self, pause: Duration) -> bool {
        match &self.driver {
            Driver::Thread(_) => false,
            Driver::Inline { shared, .. } => shared.idle(pause),
        }
    }
    /// [`drive`](Self::drive), but a loop another thread holds is left
    /// to it, not asked back ([`Drive::help`]).
    pub fn help(&self) -> bool {
        match &self.driver {
            Driver::Thread(_) => false,
            Driver::Inline { shared, .. } => shared.help(),
        }
    }
    /// [`idle`](Self::idle), but a loop another thread holds is left to
    /// it, not asked back ([`Drive::idle_if_free`]).
    pub fn idle_if_free(&self, pause: Duration) -> bool {
        match &self.driver {
            Driver::Thread(_) => false,
            Driver::Inline { shared, .. } => shared.idle_if_free(pause),
        }
    }
    /// The inline loop's driver, for objects that drive it from
    /// application threads (a completion queue); `None` for a loop with
    /// its own thread. Weak: it does not keep the loop alive.
    pub fn driver(&self) -> Option<std::sync::Weak<dyn Drive>> {
        match &self.driver {
            Driver::Thread(_) => None,
            Driver::Inline { shared, .. } => Some(Arc::downgrade(&shared.clone().as_drive())),
        }
    }
    /// Whether application threads run the rounds ([`Mode::Inline`]).
    pub fn is_inline(&self) -> bool {
        matches!(self.driver, Driver::Inline { .. })
    }
    /// Take one output, if any.
    pub fn poll(&self) -> Option<E::Output> {
        pop(&self.outputs)
    }
    /// Register to wait for outputs: make the waiter, then [`poll`](Self::poll)
    /// (an output handed over after this call is either found there or
    /// ends [`OutputWaiter::wait`]), then wait. The loop pays for this
    /// only while someone waits: a fence and a load per round that handed
    /// over outputs. On an inline loop, [`OutputWaiter::wait`] is not
    /// enough (nothing may be driving): use [`wait_outputs`](Self::wait_outputs).
    pub fn output_waiter(&self) -> OutputWaiter<'_> {
        let bell = &*self.outputs_bell;
        bell.waiters.fetch_add(1, Ordering::SeqCst);
        let mark = *bell.gen.lock().unwrap_or_else(|p| p.into_inner());
        OutputWaiter { bell, mark }
    }
    /// Wait with a registered `waiter` for at most `timeout`: on an
    /// inline loop by driving it on this thread (one idle step), else on
    /// the waiter.
    pub fn wait_outputs(&self, waiter: OutputWaiter<'_>, timeout: Duration) {
        match &self.driver {
            // The loop thread rings the waiter: sleep until it does.
            Driver::Thread(_) => waiter.wait(timeout),
            // Drive here; when another thread holds the loop, wait for
            // its outputs a short while and look again (it may let go).
            Driver::Inline { shared, .. } => {
                let short = timeout.min(Duration::from_micros(200));
                if !shared.idle(short) {
                    waiter.wait(short);
                }
            }
        }
    }
    /// Another thread moved outputs from the queue somewhere its peers
    /// look (a shared router): wake every waiter, as the loop would.
    pub fn outputs_moved(&self) {
        self.outputs_bell.ring();
    }
    /// The loop's thread (for refusing calls that would wait on the loop
    /// from inside it); an inline loop's keeper. See also [`in_round`].
    pub fn thread_id(&self) -> Option<std::thread::ThreadId> {
        match &self.driver {
            Driver::Thread(j) => j.as_ref().map(|j| j.thread().id()),
            Driver::Inline { keeper, .. } => keeper.as_ref().map(|j| j.thread().id()),
        }
    }
    /// The loop's counters so far and what its device reader returned
    /// (`()` without one), read by the loop at the end of its next round;
    /// `None` if that takes longer than `timeout` (the loop stopped or
    /// stalls). One caller at a time: two racing callers share one
    /// published snapshot, and the second may get `None`. An inline loop
    /// is driven by the caller meanwhile.
    pub fn snapshot(&self, timeout: Duration) -> Option<Snapshot> {
        let want = self.probe.requested.fetch_add(1, Ordering::AcqRel) + 1;
        self.wake();
        let deadline = Instant::now() + timeout;
        let mut pause = Duration::from_micros(5);
        while self.probe.served.load(Ordering::Acquire) < want {
            if Instant::now() >= deadline {
                return None;
            }
            if !self.drive() {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(1));
            }
        }
        match self.probe.latest.lock() {
            Ok(mut g) => g.take(),
            Err(p) => p.into_inner().take(),
        }
    }

    /// Stop the loop and get the engine back (with its memory) and the counters.
    pub fn stop(mut self) -> Option<(E, LoopStats)> {
        self.halt()
    }

    fn halt(&mut self) -> Option<(E, LoopStats)> {
        self.stop.store(true, Ordering::Release);
        self.wake();
        match &mut self.driver {
            Driver::Thread(j) => j.take().and_then(|j| j.join().ok()),
            Driver::Inline { shared, keeper } => {
                let kept = keeper.take().and_then(|j| j.join().ok()).flatten();
                kept.or_else(|| shared.take())
            }
        }
    }
}

impl<E: Engine> Drop for LoopHandle<E> {
    fn drop(&mut self) {
        let _ = self.halt();
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
        match pop(c) {
            Some(cmd) => {
                engine.handle_command(cmd, now);
                any = true;
            }
            None => break,
        }
    }
    any
}

/// `q.pop()`, but an empty queue is found by [`ArrayQueue::is_empty`] (two
/// loads): crossbeam's `pop` on an empty queue runs a sequentially
/// consistent fence (an `mfence`, which also waits for the store buffer to
/// drain: after a burst of frames copied out, hundreds of cycles) before
/// it looks at the tail, and the loop looks at its empty command queue
/// every round and before every frame received. A push that happened
/// before this call is seen either way (the loads are `SeqCst`); one racing
/// with it is found next time, as with `pop`.
#[inline]
pub(crate) fn pop<T>(q: &ArrayQueue<T>) -> Option<T> {
    if q.is_empty() {
        None
    } else {
        q.pop()
    }
}

/// Start a loop on its own thread, pinned to `core` when given (an
/// inline loop's keeper is pinned there).
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
    engine: E,
    dev: D,
    core: Option<usize>,
    mode: Mode,
    queue_depth: usize,
    reader: Option<DeviceReader<D>>,
) -> LoopHandle<E> {
    spawn_with_bell(engine, dev, core, mode, queue_depth, reader, Arc::default())
}

/// [`spawn_probed`], ringing `outputs_bell` after rounds that hand over
/// outputs while someone waits: the loops of one multi-queue context
/// share one, so a thread waiting for any of their outputs sleeps on it.
pub fn spawn_with_bell<E: Engine, D: FrameDevice + 'static>(
    engine: E,
    dev: D,
    core: Option<usize>,
    mode: Mode,
    queue_depth: usize,
    reader: Option<DeviceReader<D>>,
    outputs_bell: Arc<OutputBell>,
) -> LoopHandle<E> {
    let group = Group {
        outputs_bell,
        steering: None,
    };
    spawn_steered(engine, dev, core, mode, queue_depth, reader, group)
}

/// What the loops of one context share ([`spawn_steered`]).
#[derive(Debug)]
pub struct Group {
    /// Rung after rounds that hand over outputs while someone waits.
    pub outputs_bell: Arc<OutputBell>,
    /// This loop's place in the context's software steering, if any.
    pub steering: Option<SteeredQueue>,
}

/// [`spawn_with_bell`], and with `group.steering` this loop takes part in
/// a [`SoftSteering`]: it passes frames other loops own to their inboxes
/// and handles its own inbox every round. Without it the round is
/// [`spawn_with_bell`]'s (one branch more per round). An inline loop
/// ([`Mode::Inline`]) is woken for a passed frame through its device's
/// doorbell and its keeper; an application thread asleep driving it on a
/// device without one sees the frame when its pause ends.
pub fn spawn_steered<E: Engine, D: FrameDevice + 'static>(
    engine: E,
    dev: D,
    core: Option<usize>,
    mode: Mode,
    queue_depth: usize,
    reader: Option<DeviceReader<D>>,
    group: Group,
) -> LoopHandle<E> {
    let Group {
        outputs_bell,
        steering,
    } = group;
    let commands = Arc::new(ArrayQueue::new(queue_depth.max(1)));
    let outputs = Arc::new(ArrayQueue::new(queue_depth.max(1)));
    let stop = Arc::new(AtomicBool::new(false));
    let probe = Arc::new(Probe::default());
    let sleeping = Arc::new(AtomicBool::new(false));
    let bell = dev.doorbell();
    if let Some(q) = &steering {
        let _ = q.inbox().waker.set((sleeping.clone(), bell.clone()));
    }
    let start = Instant::now();
    let mut lp = Core {
        engine,
        waits: bell.is_some(),
        dev,
        commands: commands.clone(),
        outputs: outputs.clone(),
        probe: probe.clone(),
        served: 0,
        reader,
        outputs_bell: outputs_bell.clone(),
        st: LoopStats::default(),
        start,
        held: std::collections::VecDeque::new(),
        held_limit: queue_depth.max(1) * HELD_OUTPUTS_PER_SLOT,
        idle: 0,
        sleep: Duration::from_micros(1),
        last_now: 0,
        steer: steering,
    };
    let shares_cpu = !matches!(mode, Mode::Inline { .. }) && shares_cpu(core);
    let pin = move |st: &mut LoopStats| {
        if let Some(id) = core {
            st.pinned = core_affinity::set_for_current(core_affinity::CoreId { id });
        }
    };
    let driver = match mode {
        Mode::Inline {
            grace,
            spins,
            max_sleep,
        } => {
            let shared = Arc::new(InlineLoop {
                core: Mutex::new(None),
                last_app: AtomicU64::new(0),
                want: AtomicBool::new(false),
                sleeper: Mutex::new(None),
                sleeping: sleeping.clone(),
                bell: bell.clone(),
                stop: stop.clone(),
                keeper: OnceLockThread::new(),
                start,
                max_sleep,
            });
            *shared.lock() = Some(lp);
            let k = shared.clone();
            let keeper = std::thread::Builder::new()
                .name("iwarp-keeper".into())
                .spawn(move || {
                    // Pinned as a loop thread would be (the counters say
                    // whether it took); application threads stay where
                    // they are.
                    if let Some(c) = k.lock().as_mut() {
                        pin(&mut c.st);
                        c.register_thread();
                    }
                    k.keep(grace, spins, max_sleep)
                })
                .ok();
            if let Some(j) = &keeper {
                let _ = shared.keeper.set(j.thread().clone());
            }
            Driver::Inline { shared, keeper }
        }
        mode => {
            let (s, sl) = (stop.clone(), sleeping.clone());
            // Named for `top -H`, `perf` and the stages' report: the CPU
            // it is pinned to, if any.
            let name = match core {
                Some(c) => format!("iwarp-loop-cpu{c}"),
                None => "iwarp-loop".to_string(),
            };
            let spawn = std::thread::Builder::new().name(name);
            Driver::Thread(Some(
                spawn
                    .spawn(move || {
                        pin(&mut lp.st);
                        lp.register_thread();
                        while !s.load(Ordering::Acquire) {
                            if lp.round() {
                                continue;
                            }
                            match mode {
                                Mode::Adaptive { spins, max_sleep } => {
                                    lp.idle_step(spins, max_sleep, &sl, &s)
                                }
                                // A busy loop on the application's only CPU:
                                // spinning out the time slice would starve the
                                // application it serves (and the peer loop of a
                                // pair in one process).
                                _ if shares_cpu => {
                                    lp.st.yields += 1;
                                    std::thread::yield_now()
                                }
                                _ => std::hint::spin_loop(),
                            }
                        }
                        (lp.engine, lp.st)
                    })
                    .expect("failed to spawn a poll loop's thread"),
            ))
        }
    };
    LoopHandle {
        commands,
        outputs,
        stop,
        probe,
        sleeping,
        bell,
        outputs_bell,
        driver,
        shares_cpu,
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
            published: 0,
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

    /// A device that counts its flushes.
    struct Flushes(MemDevice, u32);

    impl FrameDevice for Flushes {
        fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
            self.0.rx_burst(max, sink)
        }
        fn tx(&mut self, frame: &[u8]) -> bool {
            self.0.tx(frame)
        }
        fn flush(&mut self) {
            self.1 += 1;
        }
    }

    /// `publish` flushes the device once per batch of frames sent since
    /// the last one, never for nothing.
    #[test]
    fn the_device_sink_publishes_only_what_is_new() {
        let (dev, _peer) = MemDevice::pair(8);
        let mut dev = Flushes(dev, 0);
        let mut sink = DeviceSink {
            dev: &mut dev,
            sent: 0,
            refused: 0,
            published: 0,
        };
        sink.publish();
        assert!(sink.send_parts(&[b"one"]));
        assert!(sink.send_parts(&[b"two"]));
        sink.publish();
        sink.publish();
        assert!(sink.send_parts(&[b"three"]));
        sink.publish();
        assert_eq!(dev.1, 2);
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

    /// An inline loop runs on the thread that drives it: with a keeper
    /// whose grace never ends, a frame waits until this thread drives,
    /// then comes back in that round.
    #[test]
    fn an_inline_loop_runs_on_the_thread_that_drives_it() {
        let (dev, mut peer) = MemDevice::pair(4);
        let mode = Mode::Inline {
            grace: Duration::from_secs(3600),
            spins: 1,
            max_sleep: Duration::from_millis(1),
        };
        let h = spawn(Echo::default(), dev, None, mode, 4);
        assert!(h.is_inline() && h.driver().is_some());
        assert!(peer.tx(b"ping"));
        std::thread::sleep(Duration::from_millis(20));
        let mut got = Vec::new();
        peer.rx_burst(4, &mut |f| got.push(f.to_vec()));
        assert!(got.is_empty(), "nobody drove, yet the frame was echoed");
        assert!(h.drive());
        peer.rx_burst(4, &mut |f| got.push(f.to_vec()));
        assert_eq!(got, [b"ping".to_vec()]);
        let (_, st) = h.stop().expect("the engine back");
        assert_eq!(
            (st.app_rounds, st.keeper_takeovers, st.rx_frames),
            (1, 0, 1)
        );
    }

    /// Nobody drives: after the grace the keeper does (a frame is echoed);
    /// a thread that calls in gets the loop back.
    #[test]
    fn the_keeper_drives_after_the_grace_and_hands_back() {
        let (dev, mut peer) = MemDevice::pair(4);
        let mode = Mode::Inline {
            grace: Duration::from_millis(2),
            spins: 1,
            max_sleep: Duration::from_millis(1),
        };
        let h = spawn(Echo::default(), dev, None, mode, 4);
        assert!(peer.tx(b"ping"));
        let since = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "the keeper never drove"
            );
            std::thread::sleep(Duration::from_millis(1));
            peer.rx_burst(4, &mut |f| got.push(f.to_vec()));
        }
        // Asked, the keeper lets go after a round (or is between its
        // watches): this thread drives within a few tries.
        let since = Instant::now();
        while !h.drive() {
            assert!(
                since.elapsed() < Duration::from_secs(10),
                "never handed back"
            );
            std::thread::yield_now();
        }
        let (_, st) = h.stop().expect("the engine back");
        assert!(st.keeper_takeovers >= 1 && st.app_rounds >= 1, "{st:?}");
    }

    /// A thread waiting on an inline loop ([`Drive::idle`]) runs its
    /// rounds and sleeps in the device's wait, which a frame ends.
    #[test]
    fn an_idle_wait_drives_and_a_frame_ends_its_sleep() {
        let (dev, mut peer) = MemDevice::pair(4);
        let mode = Mode::Inline {
            grace: Duration::from_secs(3600),
            spins: 1,
            max_sleep: Duration::from_secs(20),
        };
        let h = spawn(Echo::default(), dev, None, mode, 4);
        std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(50));
                assert!(peer.tx(b"wake"));
                let since = Instant::now();
                let mut got = Vec::new();
                while got.is_empty() {
                    assert!(since.elapsed() < Duration::from_secs(5), "no echo");
                    peer.rx_burst(4, &mut |f| got.push(f.to_vec()));
                }
            });
            // A 10 s sleep that the frame cuts short.
            let t = Instant::now();
            assert!(h.idle(Duration::from_secs(10)));
            assert!(h.idle(Duration::from_millis(1)));
            assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        });
        let (_, st) = h.stop().expect("the engine back");
        assert!(st.device_waits >= 1 && st.rx_frames == 1, "{st:?}");
    }

    /// An Ethernet frame of an IPv4 TCP segment from 10.0.0.2:`sport` to
    /// 10.0.0.1:`dport` (20 octets of TCP header, no payload).
    fn tcp_frame(sport: u16, dport: u16) -> Vec<u8> {
        let mut f = vec![0u8; 54];
        f[..6].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 2]);
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[16..18].copy_from_slice(&40u16.to_be_bytes());
        f[22] = 64;
        f[23] = 6;
        f[26..30].copy_from_slice(&[10, 0, 0, 2]);
        f[30..34].copy_from_slice(&[10, 0, 0, 1]);
        f[34..36].copy_from_slice(&sport.to_be_bytes());
        f[36..38].copy_from_slice(&dport.to_be_bytes());
        f
    }

    /// `count` frames of different flows that `rss` sends to `queue`.
    fn frames_for(rss: &Rss, queue: u16, count: usize) -> Vec<Vec<u8>> {
        (1000..u16::MAX)
            .map(|p| tcp_frame(p, 7000))
            .filter(|f| rss.queue_of_frame(f) == Some(queue))
            .take(count)
            .collect()
    }

    /// Frames arriving on loop 0's device that loop 1 owns are handled by
    /// loop 1 (its echo comes out of its own device), and a loop asleep in
    /// a long park is woken for them: loop 1 idles about 4.5 s, so it is
    /// in a park that began near 4.2 s and lasts as long; without the
    /// wake the echo would come about 3.9 s after the send, it must come
    /// within 3 s. Loop 0's own frames stay with loop 0.
    #[test]
    fn software_steering_passes_frames_to_their_owner_and_wakes_it() {
        let rss = Rss::symmetric(2).expect("two queues");
        let steering = SoftSteering::new(rss.clone(), 64);
        assert!(steering.queue(2).is_none());
        let (q0, q1) = (steering.queue(0), steering.queue(1));
        assert!(steering.queue(1).is_none(), "a queue is taken once");
        let (dev0, mut peer0) = MemDevice::pair(64);
        let (dev1, mut peer1) = MemDevice::pair(64);
        let mode = Mode::Adaptive {
            spins: 1,
            max_sleep: Duration::from_secs(30),
        };
        let group = |q| Group {
            outputs_bell: Arc::default(),
            steering: q,
        };
        let echo = || Echo { got: Vec::new() };
        let h0 = spawn_steered(echo(), dev0, None, Mode::BusyPoll, 16, None, group(q0));
        let h1 = spawn_steered(echo(), NoWait(dev1), None, mode, 16, None, group(q1));
        std::thread::sleep(Duration::from_millis(4500));
        let (mine, theirs) = (frames_for(&rss, 0, 3), frames_for(&rss, 1, 5));
        let sent = Instant::now();
        for f in theirs.iter().chain(&mine) {
            assert!(peer0.tx(f));
        }
        let (mut got0, mut got1) = (Vec::new(), Vec::new());
        while got1.len() < theirs.len() || got0.len() < mine.len() {
            assert!(sent.elapsed() < Duration::from_secs(3), "{got0:?} {got1:?}");
            peer0.rx_burst(16, &mut |f| got0.push(f.to_vec()));
            peer1.rx_burst(16, &mut |f| got1.push(f.to_vec()));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got1, theirs);
        assert_eq!(got0, mine);
        let (_, st0) = h0.stop().expect("loop 0's engine");
        let (_, st1) = h1.stop().expect("loop 1's engine");
        assert_eq!((st0.rx_frames, st0.steered_out, st0.steered_in), (8, 5, 0));
        assert_eq!((st1.rx_frames, st1.steered_out, st1.steered_in), (0, 0, 5));
        assert_eq!(st0.steer_dropped + st1.steer_dropped, 0);
        assert!(st1.sleeps > 0, "{st1:?}");
    }

    /// An inbox at its bound drops what comes next and counts it, and does
    /// not grow: loop 1's inbox (2 frames) is never drained (no loop runs
    /// queue 1), 5 frames for it arrive on loop 0's device.
    #[test]
    fn a_full_inbox_drops_and_counts() {
        let rss = Rss::symmetric(2).expect("two queues");
        let steering = SoftSteering::new(rss.clone(), 2);
        let _q1 = steering.queue(1).expect("queue 1");
        let (dev0, mut peer0) = MemDevice::pair(64);
        let group = Group {
            outputs_bell: Arc::default(),
            steering: steering.queue(0),
        };
        let h0 = spawn_steered(
            Echo { got: Vec::new() },
            dev0,
            None,
            Mode::BusyPoll,
            16,
            None,
            group,
        );
        let (theirs, mine) = (frames_for(&rss, 1, 5), frames_for(&rss, 0, 1));
        for f in theirs.iter().chain(&mine) {
            assert!(peer0.tx(f));
        }
        // Loop 0 echoes its own frame once it has taken the burst.
        let start = Instant::now();
        let mut got = Vec::new();
        while got.is_empty() {
            assert!(start.elapsed() < Duration::from_secs(10));
            peer0.rx_burst(16, &mut |f| got.push(f.to_vec()));
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, mine);
        let (_, st) = h0.stop().expect("loop 0's engine");
        assert_eq!((st.rx_frames, st.steered_out, st.steer_dropped), (6, 2, 3));
        assert_eq!(steering.pending(1), 2);
    }
}
