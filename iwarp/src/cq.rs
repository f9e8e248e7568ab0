//! Completion queues ([`Cq`]) and their work completions ([`Wc`]).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use iwarp_datapath::runtime::Drive;
use iwarp_datapath::stack::{CqEntry, CqRing};

#[cfg(doc)]
use crate::{host::ACK_ROUND, Polling, Qp};
use crate::{Error, EventFd, PostError, STag, WcOpcode, WcStatus};

/// A work completion.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// The queue pair it belongs to ([`Qp::id`]).
    pub qp: usize,
    /// What completed.
    pub opcode: Option<WcOpcode>,
    /// How.
    pub status: Status,
    /// Octets (received, for receives).
    pub byte_len: u32,
    /// A receive of a Send with Solicited Event.
    pub solicited: bool,
    /// The STag a Send with Invalidate invalidated here.
    pub invalidated: Option<STag>,
    /// The 32-bit immediate of an RDMA Write with Immediate received here
    /// ([`WcOpcode::RecvRdmaWithImm`], RFC 7306 Immediate Data).
    pub imm: Option<u32>,
}

/// How a work request ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Status {
    /// As the queue pair reports it (success, local protection, flushed, ...).
    Wc(WcStatus),
    /// The post itself was refused (queue full, bad local buffer, not
    /// connected): the request never started.
    Refused(PostError),
}

impl Status {
    /// Success.
    pub fn is_ok(&self) -> bool {
        *self == Status::Wc(WcStatus::Success)
    }
}

/// A completion queue: a lock-free ring the poll loop fills.
///
/// # Waiting from an event loop
///
/// [`notify_fd`](Self::notify_fd) gives an eventfd to put in an epoll set
/// (or a tokio `AsyncFd`). It follows `ibv_req_notify_cq`: notification is
/// one-shot and must be armed.
///
/// 1. [`req_notify`](Self::req_notify) arms the CQ: the next completion
///    that arrives makes the descriptor readable, and disarms.
/// 2. Poll the CQ once more after arming: completions that arrived before
///    the arm do not fire it.
/// 3. When the descriptor is readable, [`ack_notify`](Self::ack_notify)
///    (reads the eventfd back to zero), then poll the CQ until empty, then
///    arm again.
///
/// The descriptor stays readable until acknowledged, so a level-triggered
/// epoll set wakes until then. Polling never needs the descriptor: it is
/// for callers that sleep.
///
/// # Example
///
/// One CQ serves any number of queue pairs ([`Wc::qp`] tells which);
/// a refused post completes on it too, with [`Status::Refused`].
///
/// ```
/// use std::net::SocketAddrV4;
/// use std::time::Duration;
/// use iwarp::{Access, ConnectOptions, Context, ListenOptions, Status, WcOpcode, WcStatus, WorkRequest};
/// # fn main() -> Result<(), iwarp::Error> {
/// let (server, client) = Context::sim_pair();
/// let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
/// let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
/// let listener = server.listen(7000, &ListenOptions::new(&spd))?;
/// let to = SocketAddrV4::new(server.addr(), 7000);
/// let (c, opts) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
/// let t = std::thread::spawn(move || c.connect(to, &opts));
/// let _sqp = listener.get_request(Duration::from_secs(5))?.accept(&Default::default(), &scq)?;
/// let qp = t.join().expect("connect thread")?;
///
/// let target = spd.register(vec![0; 64], Access::LOCAL_WRITE | Access::REMOTE_WRITE)?;
/// let src = cpd.register(vec![7; 16], Access::LOCAL_WRITE)?;
/// for wr_id in 0..4 {
///     qp.post_send(WorkRequest::Write {
///         wr_id,
///         signaled: true,
///         local: src.sge(0, 16).into(),
///         remote_stag: target.stag(),
///         remote_to: wr_id * 16,
///     })?;
/// }
/// // Busy-poll a batch, or wait (spin, then park) for one.
/// let mut wcs = Vec::new();
/// while wcs.len() < 4 {
///     if ccq.poll(&mut wcs, 4) == 0 {
///         wcs.extend(ccq.wait(Duration::from_secs(5)));
///     }
/// }
/// for (i, wc) in wcs.iter().enumerate() {
///     assert_eq!((wc.wr_id, wc.qp), (i as u64, qp.id()));
///     assert_eq!((wc.opcode, wc.status), (Some(WcOpcode::Write), Status::Wc(WcStatus::Success)));
/// }
/// // A Write's completion says the data left, not that it was placed: the
/// // target sees it in place once its last octet is there.
/// let since = std::time::Instant::now();
/// while target.load(63)? != 7 {
///     assert!(since.elapsed() < Duration::from_secs(5));
///     std::thread::yield_now();
/// }
/// assert_eq!(target.read(0, 64)?, vec![7; 64]);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Cq {
    pub(crate) ring: Arc<CqRing>,
    /// The notification eventfd, created by the first `notify_fd`.
    pub(crate) notify: Arc<OnceLock<Arc<EventFd>>>,
    /// The loops to drive when the ring is empty, on an inline context
    /// ([`Polling::Inline`]); `None` on a context with loop threads.
    pub(crate) drive: Option<Arc<CqLoops>>,
    /// The context's loop thread shares the one CPU this process may use
    /// (`iwarp_datapath::runtime::shares_cpu`): an empty poll yields the
    /// CPU to it.
    pub(crate) yields: bool,
}

impl Cq {
    /// One completion, if any (no syscall, no lock). On an inline context
    /// ([`Polling::Inline`]) an empty ring makes this thread run one
    /// round of the loop (receive, stack, transmit) and look again; of a
    /// context of several loops, one round of each loop whose queue pairs
    /// complete here that no other thread holds (every loop while none
    /// does, and on a context that steers in software). When
    /// the context's loop thread shares the one CPU this process may use
    /// (a process confined with `taskset -c N`), an empty poll yields the
    /// CPU (`sched_yield`) so that a thread spinning here does not keep
    /// the loop from making the completion.
    pub fn poll_one(&self) -> Option<Wc> {
        match self.ring.pop() {
            Some(e) => Some(Self::wc(e)),
            None if self.drive() => self.ring.pop().map(Self::wc),
            None => {
                self.yield_if_shared();
                None
            }
        }
    }

    /// After an empty poll: give the CPU up when the context's loop
    /// thread shares this process's one CPU, where spinning on would keep
    /// the thread that fills the ring waiting for its time slice (a loop
    /// with a core of its own, or an inline context, costs nothing here).
    #[inline]
    fn yield_if_shared(&self) {
        if self.yields {
            std::thread::yield_now();
        }
    }

    /// Run a round of each loop this CQ drives on an inline context
    /// ([`CqLoops::drive`]); false if none ran.
    fn drive(&self) -> bool {
        self.drive.as_ref().is_some_and(|d| d.drive())
    }

    /// Queue pairs of loop `i` complete here: an inline context's polls
    /// and waits on this CQ drive loop `i` from now on.
    pub(crate) fn serve_loop(&self, i: usize) {
        if let Some(d) = &self.drive {
            d.mark(i);
        }
    }

    fn wc((qp, e): (usize, CqEntry)) -> Wc {
        match e {
            CqEntry::Done(c) => Wc {
                wr_id: c.wr_id,
                qp,
                opcode: Some(c.opcode),
                status: Status::Wc(c.status),
                byte_len: c.byte_len,
                solicited: c.solicited,
                invalidated: c.invalidated,
                imm: c.imm,
            },
            CqEntry::Refused { wr_id, error } => Wc {
                wr_id,
                qp,
                opcode: None,
                status: Status::Refused(error),
                byte_len: 0,
                solicited: false,
                invalidated: None,
                imm: None,
            },
        }
    }

    /// Up to `max` completions appended to `out`; returns how many. On an
    /// inline context an empty ring makes this thread run one round first
    /// (as [`poll_one`](Self::poll_one)).
    pub fn poll(&self, out: &mut Vec<Wc>, max: usize) -> usize {
        let mut n = self.drain(out, max);
        if n == 0 && max > 0 && self.drive() {
            n = self.drain(out, max);
        }
        if n == 0 && max > 0 {
            self.yield_if_shared();
        }
        n
    }

    fn drain(&self, out: &mut Vec<Wc>, max: usize) -> usize {
        let mut n = 0;
        while n < max {
            match self.ring.pop() {
                Some(e) => {
                    out.push(Self::wc(e));
                    n += 1;
                }
                None => break,
            }
        }
        n
    }

    /// Wait for one completion: poll a few times (20; on an inline context,
    /// where each poll is a round this thread runs, as many as an adaptive
    /// loop spins idle rounds before it yields, 200), then park with a growing
    /// timeout (for callers that do not busy-poll); the poll loop unparks
    /// the waiting thread when it pushes a completion (the last thread to
    /// park, if several wait on one CQ; the others wake at their timeout,
    /// at most 200 µs). On an inline context the waiting thread drives
    /// the loop, and sleeps in the device's wait (a frame or a post ends
    /// it) rather than parking. On an inline context of several loops it
    /// drives this CQ's loops (as [`poll_one`](Self::poll_one)), a round
    /// of one other loop per step when no thread holds it, and sleeps in
    /// the device of one of this CQ's loops at a time (at most 50 µs when
    /// there are several); it parks when other threads hold all of them.
    /// `None` on timeout.
    pub fn wait(&self, timeout: Duration) -> Option<Wc> {
        let deadline = Instant::now() + timeout;
        let mut spins = 0u32;
        // A loop thread fills the ring: spin short, since on a shared core
        // a spinning waiter holds the core from the thread it waits for
        // (docs/api.md, "Short spins on shared cores"). Inline, this
        // thread is the loop: it spins as an adaptive loop does.
        let spin_limit = if self.drive.is_some() {
            crate::host::IDLE_SPINS
        } else {
            WAIT_SPINS
        };
        let mut pause = Duration::from_micros(1);
        loop {
            if let Some(wc) = self.poll_one() {
                return Some(wc);
            }
            if Instant::now() >= deadline {
                return None;
            }
            if spins < spin_limit {
                spins += 1;
                std::hint::spin_loop();
            } else {
                let p = pause.min(deadline.saturating_duration_since(Instant::now()));
                // Inline: this thread drives and sleeps in the device's
                // wait; else (or when another thread drives) the loop
                // unparks us when it pushes a completion.
                let drove = self.drive.as_ref().is_some_and(|d| d.idle(p));
                if !drove {
                    self.ring.park(p);
                }
                pause = (pause * 2).min(Duration::from_micros(200));
            }
        }
    }

    /// Completions waiting to be polled.
    pub fn len(&self) -> usize {
        self.ring.ring.len()
    }

    /// No completion waiting.
    pub fn is_empty(&self) -> bool {
        self.ring.ring.is_empty()
    }

    /// Whether a completion was lost because the ring was full.
    pub fn overrun(&self) -> bool {
        self.ring.overrun.load(Ordering::Acquire)
    }

    /// The eventfd that becomes readable when a completion arrives on an
    /// armed CQ (see [the type's docs](Self#waiting-from-an-event-loop));
    /// created on first use, the same descriptor for every clone of this
    /// CQ. It stays open as long as the CQ (any clone) lives.
    pub fn notify_fd(&self) -> Result<std::os::fd::BorrowedFd<'_>, Error> {
        use std::os::fd::AsFd;
        Ok(self.event_fd()?.as_fd())
    }

    fn event_fd(&self) -> Result<&Arc<EventFd>, Error> {
        if let Some(e) = self.notify.get() {
            return Ok(e);
        }
        let fresh = Arc::new(EventFd::new().map_err(Error::Io)?);
        if self.notify.set(fresh.clone()).is_ok() {
            // Only the winner of the race installs its notifier.
            self.ring.set_notifier(Box::new(move || fresh.signal()));
        }
        self.notify.get().ok_or(Error::Stopped)
    }

    /// Arm the CQ: the next completion makes [`notify_fd`](Self::notify_fd)
    /// readable (once). Creates the descriptor if needed. Poll once more
    /// after arming.
    pub fn req_notify(&self) -> Result<(), Error> {
        self.event_fd()?;
        self.ring.arm();
        Ok(())
    }

    /// Acknowledge notifications: read the eventfd back to zero; returns
    /// how many were pending (0 if none, or no descriptor yet).
    pub fn ack_notify(&self) -> u64 {
        self.notify.get().map_or(0, |e| e.drain())
    }

    /// Sleep until the descriptor is readable (a completion arrived on the
    /// armed CQ) or `timeout` passes; true if readable. Does not
    /// acknowledge. For a thread that waits on one CQ without an epoll set.
    /// On an inline context it first runs a round, so that what the stack
    /// owes (an ACK held for a reply for one round) leaves before it sleeps.
    pub fn wait_notify(&self, timeout: Duration) -> Result<bool, Error> {
        let fd = self.event_fd()?;
        self.drive();
        fd.wait(Some(timeout)).map_err(Error::Io)
    }
}

/// Polls [`Cq::wait`] makes before it parks on a context with loop
/// threads (inline, [`IDLE_SPINS`](crate::host::IDLE_SPINS)): 20 measured
/// better than 200 and than 2000 with application threads and loops
/// sharing cores, and like none at all (bench/README.md, "Short spins on
/// shared cores").
const WAIT_SPINS: u32 = 20;

/// The longest a thread waiting on a CQ of several inline loops
/// ([`CqLoops`]), or for a setup call on a context of several inline
/// loops, sleeps in one loop's device before it drives the others again:
/// a frame for another loop waits at most this long for a round.
pub(crate) const SHARED_PAUSE: Duration = Duration::from_micros(50);

/// Which loops of an inline context ([`Polling::Inline`]) a CQ's polls
/// and waits drive, shared by the CQ's clones.
///
/// One loop: that loop. Several: the loops that own queue pairs
/// completing on this CQ (marked when a queue pair is connected or
/// accepted with it, [`Cq::serve_loop`]; every loop while there is none
/// yet, and every loop on a context that steers in software, where a
/// connection's frames may arrive on any loop's queue). A poll that finds
/// the ring empty runs one round on each of them that no other thread
/// holds (a held one is asked back from the keeper, as with one loop, and
/// otherwise left to its holder: nobody waits for it). A wait also runs a
/// round of one other loop per step when free (in turn, never asking for
/// a held one), so that loops no application thread polls still answer
/// ARP and handshakes while someone waits, and sleeps in the device of
/// one of its loops (in turn) at most [`SHARED_PAUSE`] when it has
/// several.
pub(crate) struct CqLoops {
    /// Every loop of the context, loop `i` at `i` (weak: a CQ does not
    /// keep the loops alive).
    loops: Box<[Weak<dyn Drive>]>,
    /// Loops whose queue pairs complete here: bit `i % 64` of word
    /// `i / 64` for loop `i` (at most 128 loops).
    owners: [AtomicU64; 2],
    /// Turns: the next other loop a wait helps, and the next owner it
    /// sleeps on.
    turn: AtomicUsize,
}

impl std::fmt::Debug for CqLoops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqLoops")
            .field("loops", &self.loops.len())
            .field("owners", &self.owner_list().collect::<Vec<_>>())
            .finish()
    }
}

impl CqLoops {
    /// A CQ's view of an inline context's `loops`; with `all`, every
    /// loop is an owner from the start (software steering).
    pub(crate) fn new(loops: Vec<Weak<dyn Drive>>, all: bool) -> CqLoops {
        let d = CqLoops {
            loops: loops.into_boxed_slice(),
            owners: [AtomicU64::new(0), AtomicU64::new(0)],
            turn: AtomicUsize::new(0),
        };
        if all {
            for i in 0..d.loops.len() {
                d.mark(i);
            }
        }
        d
    }

    /// The loops marked so far, as bits (tests).
    #[cfg(test)]
    pub(crate) fn marked(&self) -> [u64; 2] {
        [
            self.owners[0].load(Ordering::Relaxed),
            self.owners[1].load(Ordering::Relaxed),
        ]
    }

    fn mark(&self, i: usize) {
        if let Some(w) = self.owners.get(i / 64) {
            w.fetch_or(1 << (i % 64), Ordering::Relaxed);
        }
    }

    fn is_owner(&self, i: usize) -> bool {
        let words = [
            self.owners[0].load(Ordering::Relaxed),
            self.owners[1].load(Ordering::Relaxed),
        ];
        words == [0, 0] || words.get(i / 64).is_some_and(|w| w >> (i % 64) & 1 == 1)
    }

    /// The owners, in loop order (every loop while none is marked).
    fn owner_list(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.loops.len()).filter(|&i| self.is_owner(i))
    }

    fn at(&self, i: usize) -> Option<Arc<dyn Drive>> {
        self.loops.get(i).and_then(Weak::upgrade)
    }

    /// A round of each owner no other thread holds; whether any ran.
    fn drive(&self) -> bool {
        if let [only] = &*self.loops {
            return only.upgrade().is_some_and(|d| d.drive());
        }
        let mut ran = false;
        for i in self.owner_list() {
            ran |= self.at(i).is_some_and(|d| d.drive());
        }
        ran
    }

    /// One step of a wait (after an empty poll drove the owners): a round
    /// of the next other loop if free, then a sleep of at most `pause` in
    /// an owner's device (the next in turn that this thread can hold).
    /// False if it could hold none (the caller parks on the ring).
    fn idle(&self, pause: Duration) -> bool {
        if let [only] = &*self.loops {
            return only.upgrade().is_some_and(|d| d.idle(pause));
        }
        let n = self.loops.len();
        let turn = self.turn.fetch_add(1, Ordering::Relaxed);
        if let Some(other) = (0..n).map(|k| (turn + k) % n).find(|&i| !self.is_owner(i)) {
            if let Some(d) = self.at(other) {
                d.help();
            }
        }
        let owners: usize = self.owner_list().count();
        let pause = if owners > 1 {
            pause.min(SHARED_PAUSE)
        } else {
            pause
        };
        (0..n)
            .map(|k| (turn + k) % n)
            .filter(|&i| self.is_owner(i))
            .any(|i| self.at(i).is_some_and(|d| d.idle(pause)))
    }
}
