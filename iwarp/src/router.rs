//! The application side of the poll loop: [`Inner`] posts commands and
//! waits for answers, and the [`Router`] sorts the loop's
//! connection-level outputs per connection or listener.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::AtomicU64;
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use iwarp_datapath::over_tcp::{CmEvent, HostOutput};
use iwarp_datapath::runtime::LoopHandle;
use iwarp_datapath::stack::{Command, InspectOp, ListenError, MemoryOp, Output, SockId, Stack};
use iwarp_datapath::ConnError;
use iwarp_proto::mem::MemoryTable;
use tcp_lite::wire::Ipv4Address;

#[cfg(doc)]
use crate::{Context, Polling, Qp};
use crate::{Error, QpEvent};

/// Connection-level outputs of the loop, sorted per connection or listener.
#[derive(Debug, Default)]
pub(crate) struct Router {
    pub(crate) opening: HashMap<u64, SockId>,
    pub(crate) listening: HashMap<u16, Result<(), ListenError>>,
    pub(crate) unlistened: HashSet<u16>,
    /// Connections an application object (connect in progress, pending
    /// request, `Qp`) still stands for: events of others are dropped, so
    /// the per-connection queues below do not outlive their connection.
    pub(crate) live: HashSet<SockId>,
    pub(crate) connects: HashMap<u64, Result<SockId, ConnError>>,
    pub(crate) accepted: HashMap<u16, VecDeque<(SockId, Ipv4Address)>>,
    pub(crate) cm: HashMap<SockId, VecDeque<CmEvent>>,
    pub(crate) qp_events: HashMap<SockId, VecDeque<QpEvent>>,
    /// Connections whose TCP is finished (TIME-WAIT or CLOSED: our FIN
    /// acknowledged and the peer's received, or a reset):
    /// [`Qp::wait_closed`].
    pub(crate) finished: HashSet<SockId>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) lp: LoopHandle<Stack>,
    pub(crate) router: Mutex<Router>,
    pub(crate) addr: Ipv4Addr,
    pub(crate) tokens: AtomicU64,
    /// The poll loop's thread: calls that wait on the loop refuse to run
    /// there (a loop hook calling them would wait forever).
    pub(crate) loop_thread: Option<std::thread::ThreadId>,
    /// One [`Context::stats`] at a time (the loop publishes one snapshot
    /// per request).
    pub(crate) stats_lock: Mutex<()>,
}

impl Inner {
    /// Move the loop's outputs into the router (and wake the other
    /// threads waiting on it if any moved).
    pub(crate) fn pump(&self) {
        // An inline loop runs a round here (a no-op otherwise).
        self.lp.drive();
        let mut r = match self.router.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        let mut moved = false;
        while let Some(o) = self.lp.poll() {
            moved = true;
            match o {
                Output::Opening { token, sock } => {
                    r.opening.insert(token, sock);
                    r.live.insert(sock);
                }
                Output::Connected { token, sock, .. } => {
                    r.opening.remove(&token);
                    r.connects.insert(token, Ok(sock));
                }
                Output::Failed { token, error } => {
                    if let Some(sock) = r.opening.remove(&token) {
                        r.forget(sock);
                    }
                    r.connects.insert(token, Err(error));
                }
                Output::Listening { port, result } => {
                    r.listening.insert(port, result);
                }
                Output::Unlistened { port, .. } => {
                    r.unlistened.insert(port);
                }
                Output::Accepted {
                    port, sock, remote, ..
                } => {
                    r.live.insert(sock);
                    r.accepted
                        .entry(port)
                        .or_default()
                        .push_back((sock, remote))
                }
                Output::Cm(sock, e) if r.live.contains(&sock) => {
                    r.cm.entry(sock).or_default().push_back(e)
                }
                Output::CmRefused(sock, e) if r.live.contains(&sock) => {
                    r.cm.entry(sock)
                        .or_default()
                        .push_back(CmEvent::SetupFailed(e))
                }
                Output::Iwarp(sock, HostOutput::Event(e)) if r.live.contains(&sock) => {
                    r.qp_events.entry(sock).or_default().push_back(e)
                }
                Output::Closed { sock, error } if r.live.contains(&sock) => {
                    r.finished.insert(sock);
                    if error.is_some() {
                        r.cm.entry(sock)
                            .or_default()
                            .push_back(CmEvent::Disconnected)
                    }
                }
                // Completions go to CQ rings; the rest is not used here.
                _ => {}
            }
        }
        drop(r);
        if moved {
            self.lp.outputs_moved();
        }
    }

    /// Post a command; an inline loop ([`Polling::Inline`]) runs a round
    /// on this thread right away, so the work leaves now (a doorbell).
    pub(crate) fn post(&self, cmd: Command) -> Result<(), Error> {
        self.post_quiet(cmd)?;
        self.lp.drive();
        Ok(())
    }

    /// Post a command without running a round: for work that sends
    /// nothing by itself (a receive buffer). The next round handles it
    /// before any frame, so a frame that needs it finds it in place.
    pub(crate) fn post_quiet(&self, cmd: Command) -> Result<(), Error> {
        self.lp.post(cmd).map_err(|_| Error::QueueFull)
    }

    /// Post a command and wait for its answer through a channel.
    pub(crate) fn memory<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut MemoryTable) -> T + Send + 'static,
    ) -> Result<T, Error> {
        self.not_in_loop()?;
        let (tx, rx) = mpsc::sync_channel(1);
        self.post(Command::Memory(MemoryOp(Box::new(move |m| {
            let _ = tx.send(f(m));
        }))))?;
        self.answer(&rx)
    }

    /// The loop's answer to a command, within 10 s (driving an inline
    /// loop meanwhile).
    fn answer<T>(&self, rx: &mpsc::Receiver<T>) -> Result<T, Error> {
        let limit = Duration::from_secs(10);
        if !self.lp.is_inline() {
            return rx.recv_timeout(limit).map_err(|_| Error::Stopped);
        }
        let deadline = Instant::now() + limit;
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(mpsc::TryRecvError::Disconnected) => return Err(Error::Stopped),
                Err(mpsc::TryRecvError::Empty) if Instant::now() >= deadline => {
                    return Err(Error::Stopped)
                }
                Err(mpsc::TryRecvError::Empty) => {
                    if !self.lp.idle(Duration::from_micros(200)) {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
            }
        }
    }

    /// Wait (pumping the loop's outputs) until `f` finds what it wants in
    /// the router, or `timeout` runs out.
    pub(crate) fn wait<T>(
        &self,
        timeout: Duration,
        mut f: impl FnMut(&mut Router) -> Option<T>,
    ) -> Result<T, Error> {
        self.not_in_loop()?;
        let deadline = Instant::now() + timeout;
        loop {
            // Registered before looking: an output the loop hands over
            // after this is either pumped below or ends the wait.
            let waiter = self.lp.output_waiter();
            self.pump();
            {
                let mut r = match self.router.lock() {
                    Ok(r) => r,
                    Err(p) => p.into_inner(),
                };
                if let Some(v) = f(&mut r) {
                    return Ok(v);
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::TimedOut);
            }
            // Woken by the loop's outputs (or another thread's pump); the
            // 100 ms bound is a safety net, not a poll. An inline loop is
            // driven here meanwhile.
            self.lp
                .wait_outputs(waiter, (deadline - now).min(Duration::from_millis(100)));
        }
    }

    fn not_in_loop(&self) -> Result<(), Error> {
        if self.loop_thread == Some(std::thread::current().id())
            || iwarp_datapath::runtime::in_round()
        {
            Err(Error::InLoop)
        } else {
            Ok(())
        }
    }

    pub(crate) fn forget(&self, sock: SockId) {
        match self.router.lock() {
            Ok(mut r) => r.forget(sock),
            Err(p) => p.into_inner().forget(sock),
        }
    }

    /// Run `f` on the stack in the loop thread and wait for its answer.
    pub(crate) fn inspect<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Stack) -> T + Send + 'static,
    ) -> Result<T, Error> {
        self.not_in_loop()?;
        let (tx, rx) = mpsc::sync_channel(1);
        self.post(Command::Inspect(InspectOp(Box::new(move |s| {
            let _ = tx.send(f(s));
        }))))?;
        self.answer(&rx)
    }

    pub(crate) fn next_cm(&self, sock: SockId, timeout: Duration) -> Result<CmEvent, Error> {
        self.wait(timeout, |r| r.cm.get_mut(&sock).and_then(|q| q.pop_front()))
    }
}

impl Router {
    /// Nothing stands for `sock` any more: drop its queues and its future
    /// events.
    fn forget(&mut self, sock: SockId) {
        self.live.remove(&sock);
        self.cm.remove(&sock);
        self.qp_events.remove(&sock);
        self.finished.remove(&sock);
    }

    /// Connections the router still keeps state for (tests: no leak).
    pub(crate) fn tracked(&self) -> usize {
        self.live
            .len()
            .max(self.cm.len())
            .max(self.qp_events.len())
            .max(self.finished.len())
    }
}
