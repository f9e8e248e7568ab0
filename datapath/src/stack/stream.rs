//! Byte streams: the rings the application and the stack share per
//! connection ([`StreamShared`]), its state bits ([`flags`]), and the
//! parking of application threads that wait on them.

use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;

use crate::ConnError;

/// Byte-stream state bits in [`StreamShared::state`].
pub mod flags {
    /// The peer closed its direction and every octet is in the ring.
    pub const RX_EOF: u8 = 1;
    /// Both directions closed cleanly.
    pub const CLOSED: u8 = 2;
    /// The connection failed (reset or timed out).
    pub const FAILED: u8 = 4;
}

/// The application's and the stack's shared ends of one byte stream.
///
/// A busy-polling application uses the rings directly (`tx.push`,
/// `rx.pop`, [`flags`](Self::flags)); one that would rather sleep than
/// spin uses [`send`](Self::send), [`recv`](Self::recv) and
/// [`wait_closed`](Self::wait_closed), which park the calling thread until
/// the poll loop has room, data or news for it (like a blocking socket,
/// and without taking CPU from the peer or the poll loop while waiting).
/// Each of the three wakes one thread: one may send while another
/// receives and a third waits for the close, but two threads in the same
/// call at once may sleep until their timeout. A loop that is stopped
/// wakes nobody: the timeout bounds every wait.
#[derive(Debug)]
pub struct StreamShared {
    /// Received data, in order.
    pub rx: ArrayQueue<Vec<u8>>,
    /// Data to send, in order.
    pub tx: ArrayQueue<Vec<u8>>,
    /// Set by the application after its last `tx` push: send FIN when drained.
    pub close: AtomicBool,
    /// Set by the application to reset the connection.
    pub abort: AtomicBool,
    /// [`flags`] bits set by the stack.
    pub state: AtomicU8,
    /// Why the connection failed, set once before [`flags::FAILED`].
    pub(super) error: std::sync::OnceLock<ConnError>,
    /// A thread parked in `send`.
    tx_waiter: Waiter,
    /// A thread parked in `recv`.
    rx_waiter: Waiter,
    /// A thread parked in `wait_closed` (apart from the other two, so
    /// that one thread may wait for the close while another still sends).
    close_waiter: Waiter,
}

/// One parked application thread and what would wake it: the [`flags`]
/// bits in the low nibble, [`Waiter::RING`] for ring progress (room in
/// `tx`, data in `rx`). Zero: nobody waits.
#[derive(Debug, Default)]
struct Waiter {
    want: AtomicU8,
    thread: std::sync::Mutex<Option<std::thread::Thread>>,
    /// Times a thread parked here (tests check that waits happened).
    parks: std::sync::atomic::AtomicU64,
}

impl Waiter {
    /// Ring progress: room in the send ring, data in the receive ring.
    const RING: u8 = 0x80;

    /// Parks the calling thread until `ready()` holds or `deadline`
    /// passes; `want` says what the stack should wake it for. Returns
    /// whether `ready()` held.
    fn wait(&self, want: u8, deadline: Instant, mut ready: impl FnMut() -> bool) -> bool {
        loop {
            if ready() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
            self.want.store(want, Ordering::SeqCst);
            // Pairs with the fence in `StreamShared::wake`: either the
            // stack sees `want`, or this check sees what it did.
            fence(Ordering::SeqCst);
            if ready() {
                self.want.store(0, Ordering::Relaxed);
                return true;
            }
            self.parks.fetch_add(1, Ordering::Relaxed);
            std::thread::park_timeout(deadline - now);
            self.want.store(0, Ordering::Relaxed);
        }
    }

    /// Unparks the waiting thread (if one still waits).
    fn wake(&self) {
        if self.want.swap(0, Ordering::AcqRel) != 0 {
            if let Some(t) = self
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                t.unpark();
            }
        }
    }
}

/// Why [`StreamShared::send`] gave the data back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The send ring stayed full until the timeout.
    TimedOut(Vec<u8>),
    /// The application already closed its direction, or the connection is
    /// closed.
    Closed(Vec<u8>),
    /// The connection failed.
    Failed(ConnError, Vec<u8>),
}

impl SendError {
    /// The data that was not queued.
    pub fn into_data(self) -> Vec<u8> {
        match self {
            SendError::TimedOut(v) | SendError::Closed(v) | SendError::Failed(_, v) => v,
        }
    }
}

/// Why [`StreamShared::recv`] or [`StreamShared::wait_closed`] returned
/// without what it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// Nothing happened before the timeout.
    TimedOut,
    /// The connection failed.
    Failed(ConnError),
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SendError::TimedOut(_) => f.write_str("send ring full until the timeout"),
            SendError::Closed(_) => f.write_str("stream closed for sending"),
            SendError::Failed(e, _) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for SendError {}

impl core::fmt::Display for WaitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WaitError::TimedOut => f.write_str("timed out"),
            WaitError::Failed(e) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for WaitError {}

impl StreamShared {
    pub(super) fn new(chunks: usize) -> Self {
        StreamShared {
            rx: ArrayQueue::new(chunks.max(1)),
            tx: ArrayQueue::new(chunks.max(1)),
            close: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            state: AtomicU8::new(0),
            error: std::sync::OnceLock::new(),
            tx_waiter: Waiter::default(),
            rx_waiter: Waiter::default(),
            close_waiter: Waiter::default(),
        }
    }

    /// Current [`flags`] bits.
    pub fn flags(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Why the connection failed, once [`flags::FAILED`] is set.
    pub fn error(&self) -> Option<ConnError> {
        self.error.get().copied()
    }

    fn failed(&self) -> Option<ConnError> {
        if self.flags() & flags::FAILED != 0 {
            // Set before the flag (Release/Acquire).
            Some(self.error().unwrap_or(ConnError::Reset))
        } else {
            None
        }
    }

    /// Queues `data` for sending, parking the calling thread for up to
    /// `timeout` while the send ring is full. A parked sender is woken
    /// once the ring is half empty (so it refills it in one go rather
    /// than one chunk per wake-up), or when the connection fails or
    /// closes. On error the data comes back.
    pub fn send(&self, data: Vec<u8>, timeout: Duration) -> Result<(), SendError> {
        let deadline = Instant::now() + timeout;
        let mut data = Some(data);
        let ended = self.tx_waiter.wait(
            Waiter::RING | flags::FAILED | flags::CLOSED,
            deadline,
            || {
                if self.close.load(Ordering::Acquire)
                    || self.flags() & (flags::FAILED | flags::CLOSED) != 0
                {
                    return true;
                }
                match data.take().map(|v| self.tx.push(v)) {
                    Some(Err(v)) => {
                        data = Some(v);
                        false
                    }
                    _ => true,
                }
            },
        );
        match data {
            None => Ok(()),
            Some(v) => {
                if let Some(e) = self.failed() {
                    Err(SendError::Failed(e, v))
                } else if ended {
                    Err(SendError::Closed(v))
                } else {
                    Err(SendError::TimedOut(v))
                }
            }
        }
    }

    /// The next received chunk, parking the calling thread for up to
    /// `timeout` while none is there. `Ok(None)`: the peer closed its
    /// direction and everything it sent has been returned.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Vec<u8>>, WaitError> {
        let deadline = Instant::now() + timeout;
        let mut got = None;
        let done = self.rx_waiter.wait(
            Waiter::RING | flags::RX_EOF | flags::FAILED,
            deadline,
            || {
                let f = self.flags();
                // Pop after reading the flags: RX_EOF is set only once
                // every octet is in the ring, so an empty ring seen after
                // it means the end of the stream.
                got = self.rx.pop();
                got.is_some() || f & (flags::RX_EOF | flags::FAILED) != 0
            },
        );
        if let Some(v) = got {
            return Ok(Some(v));
        }
        if let Some(e) = self.failed() {
            return Err(WaitError::Failed(e));
        }
        if done {
            Ok(None)
        } else {
            Err(WaitError::TimedOut)
        }
    }

    /// Parks the calling thread until both directions are closed
    /// ([`flags::CLOSED`]), for up to `timeout`. Received data is left in
    /// the ring; an application that stops reading may hold the close up
    /// (the stack stops taking the peer's data once the ring is full).
    pub fn wait_closed(&self, timeout: Duration) -> Result<(), WaitError> {
        let deadline = Instant::now() + timeout;
        self.close_waiter
            .wait(flags::CLOSED | flags::FAILED, deadline, || {
                self.flags() & (flags::CLOSED | flags::FAILED) != 0
            });
        if let Some(e) = self.failed() {
            Err(WaitError::Failed(e))
        } else if self.flags() & flags::CLOSED != 0 {
            Ok(())
        } else {
            Err(WaitError::TimedOut)
        }
    }

    /// How many times `send` and `recv` parked their thread.
    pub fn parks(&self) -> (u64, u64) {
        (
            self.tx_waiter.parks.load(Ordering::Relaxed),
            self.rx_waiter.parks.load(Ordering::Relaxed),
        )
    }

    /// The stack's side, once per round: unpark a waiting application
    /// thread if what it waits for has happened.
    pub(super) fn wake(&self) {
        // Pairs with the fence in `Waiter::wait` (see there).
        fence(Ordering::SeqCst);
        let tx = self.tx_waiter.want.load(Ordering::Relaxed);
        let rx = self.rx_waiter.want.load(Ordering::Relaxed);
        let close = self.close_waiter.want.load(Ordering::Relaxed);
        if tx | rx | close == 0 {
            return;
        }
        let st = self.state.load(Ordering::Acquire);
        if st & close != 0 {
            self.close_waiter.wake();
        }
        let room = tx & Waiter::RING != 0 && self.tx.len() <= self.tx.capacity() / 2;
        if room || st & tx != 0 {
            self.tx_waiter.wake();
        }
        let data = rx & Waiter::RING != 0 && !self.rx.is_empty();
        if data || st & rx != 0 {
            self.rx_waiter.wake();
        }
    }
}
