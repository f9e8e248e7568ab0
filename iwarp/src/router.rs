//! The application side of the poll loops: [`Inner`] posts commands and
//! waits for answers, and the [`Router`] sorts the loops'
//! connection-level outputs per connection or listener. A context has one
//! loop, or one per receive queue ([`Context::sim_pair_queues`]): a
//! connection belongs to one loop, which its id names (ids are given out
//! apart, loop `i` of `n` taking `i`, `i + n`, ..., over either
//! transport), and a command for a
//! connection goes to that loop; the loops share one output bell, so a
//! wait sleeps on all of them at once.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{mpsc, Mutex};
use std::time::{Duration, Instant};

use iwarp_datapath::over_tcp::{CmEvent, HostOutput};
use iwarp_datapath::runtime::LoopHandle;
use iwarp_datapath::stack::{Command, InspectOp, ListenError, MemoryOp, Output, SockId, Stack};
use iwarp_datapath::ConnError;
use iwarp_proto::mem::MemoryTable;
use tcp_lite::wire::Ipv4Address;

use crate::cq::SHARED_PAUSE;
#[cfg(doc)]
use crate::{Context, Polling, Qp};
use crate::{Error, QpEvent};

/// Connection-level outputs of the loop, sorted per connection or listener.
#[derive(Debug, Default)]
pub(crate) struct Router {
    pub(crate) opening: HashMap<u64, SockId>,
    /// Answers to `Listen` and `Unlisten`, by loop and port.
    pub(crate) listening: HashMap<(usize, u16), Result<(), ListenError>>,
    pub(crate) unlistened: HashSet<(usize, u16)>,
    /// Connections an application object (connect in progress, pending
    /// request, `Qp`) still stands for: events of others are dropped, so
    /// the per-connection queues below do not outlive their connection.
    pub(crate) live: HashSet<SockId>,
    pub(crate) connects: HashMap<u64, Result<SockId, ConnError>>,
    /// Connections accepted per listening port, in the order the loops
    /// accepted them: `Output::Accepted`'s `order`, which the loops of a
    /// context take from one counter (0, 1, 2, ...), whatever the order
    /// their outputs are pumped in ([`Inner::pump`] takes each loop's in
    /// turn, so an accept of loop 1 could be pumped before an earlier one
    /// of loop 0): one whose predecessor has not come waits in `held`.
    pub(crate) accepted: HashMap<u16, VecDeque<Accepted>>,
    /// The `order` of the next accepted connection to queue.
    pub(crate) next_accept: u64,
    /// Accepted connections pumped before their predecessor, by `order`,
    /// with their port; and since when the router has held any (without
    /// a pause). After [`ACCEPT_HOLD`] they are queued anyway (a predecessor lost with
    /// outputs a full output queue dropped never comes).
    pub(crate) held: BTreeMap<u64, (u16, Accepted)>,
    pub(crate) held_since: Option<Instant>,
    pub(crate) cm: HashMap<SockId, VecDeque<CmEvent>>,
    pub(crate) qp_events: HashMap<SockId, VecDeque<QpEvent>>,
    /// Connections whose TCP is finished (TIME-WAIT or CLOSED: our FIN
    /// acknowledged and the peer's received, or a reset):
    /// [`Qp::wait_closed`].
    pub(crate) finished: HashSet<SockId>,
}

/// How long an accepted connection pumped before its predecessor waits
/// for it ([`Router::held`]).
pub(crate) const ACCEPT_HOLD: Duration = Duration::from_millis(100);

/// A connection a listener accepted, until its application takes its
/// request.
#[derive(Debug)]
pub(crate) struct Accepted {
    pub(crate) sock: SockId,
    pub(crate) remote: Ipv4Address,
    /// `Output::Accepted`'s `order`.
    pub(crate) order: u64,
}

/// One poll loop of a context.
#[derive(Debug)]
pub(crate) struct Loop {
    pub(crate) lp: LoopHandle<Stack>,
    /// The loop's thread: calls that wait on the loop refuse to run
    /// there (a loop hook calling them would wait forever).
    pub(crate) thread: Option<std::thread::ThreadId>,
}

#[derive(Debug)]
pub(crate) struct Inner {
    /// The context's loops (at least one), loop `i` on receive queue `i`.
    pub(crate) loops: Vec<Loop>,
    pub(crate) router: Mutex<Router>,
    pub(crate) addr: Ipv4Addr,
    pub(crate) tokens: AtomicU64,
    /// The loop the next active open goes to (round robin).
    pub(crate) next_loop: AtomicUsize,
    /// One memory operation at a time for the whole context: each is
    /// applied to every loop's table in loop order
    /// ([`memory`](Inner::memory)).
    pub(crate) mem_lock: Mutex<()>,
    /// One [`Context::stats`] at a time (the loop publishes one snapshot
    /// per request).
    pub(crate) stats_lock: Mutex<()>,
    /// Why iWARP over SCTP is refused on this context of several loops
    /// (its device's RSS does not hash SCTP's ports), if it is.
    pub(crate) no_sctp: Option<&'static str>,
    /// The loops pass frames between them (`QueueSteering::Software`):
    /// a connection's frames may arrive on any loop's queue.
    pub(crate) soft_steering: bool,
}

impl Inner {
    /// Move the loop's outputs into the router (and wake the other
    /// threads waiting on it if any moved).
    pub(crate) fn pump(&self) {
        // An inline loop runs a round here (a no-op otherwise). Of
        // several, one another thread holds is left to it (it drives).
        match &*self.loops {
            [one] => {
                one.lp.drive();
            }
            loops => {
                for l in loops {
                    l.lp.help();
                }
            }
        }
        let mut r = match self.router.lock() {
            Ok(r) => r,
            Err(p) => p.into_inner(),
        };
        let mut moved = false;
        for (i, l) in self.loops.iter().enumerate() {
            moved |= Self::pump_loop(&mut r, i, &l.lp);
        }
        if r.held_since.is_some() {
            moved |= r.release_overdue(Instant::now());
        }
        drop(r);
        if moved {
            self.loops[0].lp.outputs_moved();
        }
    }

    /// Move loop `i`'s outputs into the router; whether any moved.
    fn pump_loop(r: &mut Router, i: usize, lp: &LoopHandle<Stack>) -> bool {
        let mut moved = false;
        while let Some(o) = lp.poll() {
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
                    r.listening.insert((i, port), result);
                }
                Output::Unlistened { port, .. } => {
                    r.unlistened.insert((i, port));
                }
                Output::Accepted {
                    port,
                    sock,
                    remote,
                    order,
                    ..
                } => {
                    r.live.insert(sock);
                    r.accept(
                        port,
                        Accepted {
                            sock,
                            remote,
                            order,
                        },
                    );
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
        moved
    }

    /// The loop that owns connection `sock`: loop `i` of `n` gives out
    /// ids `i`, `i + n`, ..., TCP's and SCTP's from one counter
    /// (`StackConfig::sock_ids`).
    #[inline]
    pub(crate) fn loop_of(&self, sock: SockId) -> usize {
        match self.loops.len() {
            1 => 0,
            n => sock % n,
        }
    }

    /// The loop a command goes to: its connection's, else loop 0.
    #[inline]
    fn target(&self, cmd: &Command) -> usize {
        if self.loops.len() == 1 {
            return 0;
        }
        match cmd {
            Command::Iwarp(id, _)
            | Command::Close(id)
            | Command::Abort(id)
            | Command::Accept { sock: id, .. }
            | Command::SetSrq { sock: id, .. }
            | Command::Reject { sock: id, .. } => self.loop_of(*id),
            _ => 0,
        }
    }

    /// Post a command to the loop it concerns (its connection's, else
    /// loop 0); an inline loop ([`Polling::Inline`]) runs a round on this
    /// thread right away, so the work leaves now (a doorbell).
    pub(crate) fn post(&self, cmd: Command) -> Result<(), Error> {
        self.post_to(self.target(&cmd), cmd)
    }

    /// [`post`](Self::post) to loop `i`.
    #[inline]
    pub(crate) fn post_to(&self, i: usize, cmd: Command) -> Result<(), Error> {
        let lp = &self.loops[i].lp;
        lp.post(cmd).map_err(|_| Error::QueueFull)?;
        lp.drive();
        Ok(())
    }

    /// Post a command to loop `i` without running a round: for work that
    /// sends nothing by itself (a receive buffer). The next round handles
    /// it before any frame, so a frame that needs it finds it in place.
    #[inline]
    pub(crate) fn post_quiet_to(&self, i: usize, cmd: Command) -> Result<(), Error> {
        self.loops[i].lp.post(cmd).map_err(|_| Error::QueueFull)
    }

    /// Apply `f` to the memory table of every loop, in loop order, one
    /// operation at a time for the whole context, and return its result,
    /// which must be the same on every loop: the tables start alike (one
    /// seed) and take the same operations in the same order. Results that
    /// differ are an error ([`Error::LoopsDisagree`], logged), never one
    /// of them picked. `f` runs on every loop even after a result that
    /// differs, so that every replica takes the operation
    /// ([`MemoryTable::replicas`] refuses one run out of step). For an
    /// operation that creates something, [`memory_or_undo`](Self::memory_or_undo).
    pub(crate) fn memory<T, F>(&self, f: F) -> Result<T, Error>
    where
        T: Send + PartialEq + std::fmt::Debug + 'static,
        F: FnOnce(&mut MemoryTable) -> T + Clone + Send + 'static,
    {
        self.broadcast(f, None::<fn(&mut MemoryTable, T)>)
    }

    /// [`memory`](Self::memory) for an operation that creates something
    /// (a PD, a region, a window): when the loops' results differ, or a
    /// loop does not answer, `undo` runs on each loop that answered, with
    /// that loop's own result, to destroy what the operation created
    /// there; the error is returned after it. `undo` takes one control
    /// operation on every loop whatever its result (see [`keep_step`]),
    /// so that the replicas stay in step.
    pub(crate) fn memory_or_undo<T, F, U>(&self, f: F, undo: U) -> Result<T, Error>
    where
        T: Send + PartialEq + std::fmt::Debug + 'static,
        F: FnOnce(&mut MemoryTable) -> T + Clone + Send + 'static,
        U: FnOnce(&mut MemoryTable, T) + Clone + Send + 'static,
    {
        self.broadcast(f, Some(undo))
    }

    fn broadcast<T, F, U>(&self, f: F, undo: Option<U>) -> Result<T, Error>
    where
        T: Send + PartialEq + std::fmt::Debug + 'static,
        F: FnOnce(&mut MemoryTable) -> T + Clone + Send + 'static,
        U: FnOnce(&mut MemoryTable, T) + Clone + Send + 'static,
    {
        self.not_in_loop()?;
        let _one = match self.mem_lock.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut results: Vec<T> = Vec::with_capacity(self.loops.len());
        let mut failed = None;
        for i in 0..self.loops.len() {
            match self.on_table(i, f.clone()) {
                Ok(v) => results.push(v),
                Err(e) => {
                    failed = Some(e);
                    break;
                }
            }
        }
        let error = match failed {
            Some(e) => e,
            None if results.iter().all(|v| *v == results[0]) => {
                return results.into_iter().next().ok_or(Error::Stopped);
            }
            None => {
                tracing::error!(
                    results = ?results,
                    "a memory operation gave different results on the context's loops"
                );
                Error::LoopsDisagree
            }
        };
        if let Some(undo) = undo {
            for (i, v) in results.into_iter().enumerate() {
                let undo = undo.clone();
                if let Err(e) = self.on_table(i, move |m| undo(m, v)) {
                    tracing::warn!(
                        loop_index = i,
                        error = %e,
                        "could not undo a failed memory operation on a loop"
                    );
                }
            }
        }
        Err(error)
    }

    /// Run `f` on loop `i`'s memory table and wait for its answer.
    fn on_table<T, F>(&self, i: usize, f: F) -> Result<T, Error>
    where
        T: Send + 'static,
        F: FnOnce(&mut MemoryTable) -> T + Send + 'static,
    {
        let (tx, rx) = mpsc::sync_channel(1);
        self.post_to(
            i,
            Command::Memory(MemoryOp(Box::new(move |m| {
                let _ = tx.send(f(m));
            }))),
        )?;
        self.answer(i, &rx)
    }

    /// Loop `i`'s answer to a command, within 10 s (driving an inline
    /// loop meanwhile).
    fn answer<T>(&self, i: usize, rx: &mpsc::Receiver<T>) -> Result<T, Error> {
        let limit = Duration::from_secs(10);
        let lp = &self.loops[i].lp;
        if !lp.is_inline() {
            return rx.recv_timeout(limit).map_err(|_| Error::Stopped);
        }
        let deadline = Instant::now() + limit;
        // Of several inline loops, the others get a round too when free
        // (a loop may need another's: ARP replies reach loop 0, and with
        // software steering any loop's queue may bring its frames), and
        // this thread sleeps less long in loop `i`'s device.
        let pause = if self.loops.len() > 1 {
            SHARED_PAUSE
        } else {
            Duration::from_micros(200)
        };
        loop {
            match rx.try_recv() {
                Ok(v) => return Ok(v),
                Err(mpsc::TryRecvError::Disconnected) => return Err(Error::Stopped),
                Err(mpsc::TryRecvError::Empty) if Instant::now() >= deadline => {
                    return Err(Error::Stopped)
                }
                Err(mpsc::TryRecvError::Empty) => {
                    for (j, l) in self.loops.iter().enumerate() {
                        if j != i {
                            l.lp.help();
                        }
                    }
                    if !lp.idle(pause) {
                        std::thread::sleep(Duration::from_micros(20));
                    }
                }
            }
        }
    }

    /// Sleep about `d` between looks at a loop: on a context of several
    /// inline loops, drive them meanwhile (each when free, and a sleep
    /// of at most [`SHARED_PAUSE`] in one device at a time, in turn),
    /// since nobody else may.
    pub(crate) fn pause(&self, d: Duration) {
        if self.loops.len() == 1 || !self.loops[0].lp.is_inline() {
            std::thread::sleep(d);
            return;
        }
        let end = Instant::now() + d;
        let mut turn = 0;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            for l in &self.loops {
                l.lp.help();
            }
            let l = &self.loops[turn % self.loops.len()];
            turn += 1;
            if !l.lp.idle_if_free(left.min(SHARED_PAUSE)) {
                std::thread::sleep(left.min(Duration::from_micros(20)));
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
        let several_inline = self.loops.len() > 1 && self.loops[0].lp.is_inline();
        let mut turn = 0;
        loop {
            // Registered before looking: an output the loop hands over
            // after this is either pumped below or ends the wait.
            // The loops share one bell: loop 0's waiter wakes for any.
            let lp = &self.loops[0].lp;
            let waiter = lp.output_waiter();
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
            if several_inline {
                // Every loop had a round in the pump above (those no other
                // thread holds); now sleep in one loop's device, the next
                // in turn, a short while: a frame for another waits
                // at most SHARED_PAUSE. One held by another thread is left
                // to it: wait for outputs instead.
                let short = (deadline - now).min(SHARED_PAUSE);
                let l = &self.loops[turn % self.loops.len()].lp;
                turn += 1;
                if !l.idle_if_free(short) {
                    waiter.wait(short);
                }
            } else {
                lp.wait_outputs(waiter, (deadline - now).min(Duration::from_millis(100)));
            }
        }
    }

    fn not_in_loop(&self) -> Result<(), Error> {
        let me = std::thread::current().id();
        if self.loops.iter().any(|l| l.thread == Some(me)) || iwarp_datapath::runtime::in_round() {
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

    /// Run `f` on loop `i`'s stack in its thread and wait for its answer.
    pub(crate) fn inspect_on<T: Send + 'static>(
        &self,
        i: usize,
        f: impl FnOnce(&Stack) -> T + Send + 'static,
    ) -> Result<T, Error> {
        self.not_in_loop()?;
        let (tx, rx) = mpsc::sync_channel(1);
        self.post_to(
            i,
            Command::Inspect(InspectOp(Box::new(move |s| {
                let _ = tx.send(f(s));
            }))),
        )?;
        self.answer(i, &rx)
    }

    pub(crate) fn next_cm(&self, sock: SockId, timeout: Duration) -> Result<CmEvent, Error> {
        self.wait(timeout, |r| r.cm.get_mut(&sock).and_then(|q| q.pop_front()))
    }
}

/// A control operation that changes nothing: freeing a PD no table has
/// (ids are given out from 0, the lowest free first, so none reaches
/// `u32::MAX`). An undo ([`Inner::memory_or_undo`]) runs it on a loop
/// where the operation created nothing (it failed there), so that the
/// loop takes one control operation as the others do in theirs and the
/// replicas stay in step ([`MemoryTable::replicas`]).
pub(crate) fn keep_step(m: &mut MemoryTable) {
    let _ = m.dealloc_pd(iwarp_proto::mem::PdId(u32::MAX));
}

impl Router {
    /// Queue an accepted connection behind those accepted before it, or
    /// hold it until they have come (`held`).
    fn accept(&mut self, port: u16, a: Accepted) {
        if a.order > self.next_accept {
            self.held_since.get_or_insert_with(Instant::now);
            self.held.insert(a.order, (port, a));
            return;
        }
        // Its turn (or a late one, after its successors were queued).
        if a.order == self.next_accept {
            self.next_accept += 1;
        }
        self.accepted.entry(port).or_default().push_back(a);
        while let Some((port, a)) = self.held.remove(&self.next_accept) {
            self.next_accept += 1;
            self.accepted.entry(port).or_default().push_back(a);
        }
        if self.held.is_empty() {
            self.held_since = None;
        }
    }

    /// Queue every held connection, in order, if the oldest has waited
    /// [`ACCEPT_HOLD`] for its predecessor by `now` (which then never
    /// comes in its turn); whether it did.
    fn release_overdue(&mut self, now: Instant) -> bool {
        if self
            .held_since
            .is_none_or(|t| now.saturating_duration_since(t) < ACCEPT_HOLD)
        {
            return false;
        }
        tracing::warn!(
            held = self.held.len(),
            next = self.next_accept,
            "accepted connections queued without their predecessor"
        );
        for (order, (port, a)) in std::mem::take(&mut self.held) {
            self.next_accept = order + 1;
            self.accepted.entry(port).or_default().push_back(a);
        }
        self.held_since = None;
        true
    }

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

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Duration;

    use iwarp_datapath::stack::{Command, MemoryOp};
    use iwarp_proto::mem::MemoryTable;

    use tcp_lite::wire::Ipv4Address;

    use super::{Accepted, Router, ACCEPT_HOLD};
    use crate::{Access, Context, Error, MemError, Pd, PdId, Polling};

    /// Run `f` on loop `i`'s memory table alone (the tests' way to make
    /// the tables differ, or to look at one).
    fn on_loop<T: Send + 'static>(
        ctx: &Context,
        i: usize,
        f: impl FnOnce(&mut MemoryTable) -> T + Send + 'static,
    ) -> T {
        let (tx, rx) = mpsc::sync_channel(1);
        ctx.inner
            .post_to(
                i,
                Command::Memory(MemoryOp(Box::new(move |m| {
                    let _ = tx.send(f(m));
                }))),
            )
            .unwrap();
        rx.recv_timeout(Duration::from_secs(10)).unwrap()
    }

    /// Accepted connections pumped out of their order (an accept of loop
    /// 1 before an earlier one of loop 0) queue in the order the loops
    /// accepted them, each at its port; one whose predecessor does not
    /// come within `ACCEPT_HOLD` is queued then, and a late predecessor
    /// behind it.
    #[test]
    fn accepted_connections_queue_in_the_order_the_loops_accepted_them() {
        let mut r = Router::default();
        let a = |sock, order| Accepted {
            sock,
            remote: Ipv4Address::new(10, 0, 0, 2),
            order,
        };
        let socks = |r: &Router, port| -> Vec<usize> {
            r.accepted
                .get(&port)
                .map_or_else(Vec::new, |q| q.iter().map(|a| a.sock).collect())
        };
        r.accept(7, a(11, 1));
        assert_eq!(socks(&r, 7), [], "1 waits for 0");
        r.accept(7, a(10, 0));
        assert_eq!(socks(&r, 7), [10, 11]);
        r.accept(8, a(12, 2));
        assert_eq!(socks(&r, 8), [12]);
        assert!(r.held.is_empty() && r.held_since.is_none());
        // 3 does not come: 4 and 5 wait for it, then are queued.
        r.accept(7, a(14, 4));
        r.accept(7, a(15, 5));
        let since = r.held_since.unwrap();
        assert!(!r.release_overdue(since));
        assert_eq!(socks(&r, 7), [10, 11]);
        assert!(r.release_overdue(since + ACCEPT_HOLD));
        assert_eq!(socks(&r, 7), [10, 11, 14, 15]);
        assert!(r.held.is_empty() && r.held_since.is_none());
        // 3 comes late: behind them; 6 is next in turn.
        r.accept(7, a(13, 3));
        r.accept(7, a(16, 6));
        assert_eq!(socks(&r, 7), [10, 11, 14, 15, 13, 16]);
        assert!(r.held.is_empty());
    }

    /// Memory tables of a context's loops that no longer match: the
    /// operation that finds it fails with `LoopsDisagree`, naming no
    /// winner, and frees the PD it allocated on each loop; tables that
    /// match again agree again.
    #[test]
    fn loops_whose_tables_differ_are_an_error() {
        let (ctx, _peer) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        assert_eq!(pd.id(), PdId(0));
        // A PD allocated on loop 1's table alone.
        let only_one = on_loop(&ctx, 1, |m| m.alloc_pd());
        assert_eq!(only_one, PdId(1));
        // Loop 0 gives PD 1, loop 1 PD 2: no PD, and both freed again.
        assert!(matches!(ctx.alloc_pd(), Err(Error::LoopsDisagree)));
        // Loop 0 catches up: it gets PD 1 again (left behind, it would
        // have been 2) ...
        assert_eq!(on_loop(&ctx, 0, |m| m.alloc_pd()), PdId(1));
        // ... and the next PD is 2 on both loops (loop 1 kept the PD 2
        // of the failed allocation, it would say 3 and disagree).
        let pd3 = ctx.alloc_pd().unwrap();
        assert_eq!(pd3.id(), PdId(2));
    }

    /// A registration the loops do not agree on (a PD that only loop 1
    /// has: loop 0 refuses it, loop 1 registers) leaves no region behind
    /// on loop 1, and a window's allocation that disagrees the same way no
    /// window. (The tables differ, which is why the operations failed:
    /// later STags need not agree, and are not checked here.)
    #[test]
    fn a_registration_the_loops_disagree_on_is_undone() {
        let (ctx, _peer) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
        let _pd = ctx.alloc_pd().unwrap();
        let extra = on_loop(&ctx, 1, |m| m.alloc_pd());
        let ghost = Pd {
            ctx: ctx.clone(),
            id: extra,
        };
        let r = ghost.register(vec![0; 4096], Access::LOCAL_WRITE);
        assert!(matches!(r, Err(Error::LoopsDisagree)), "{r:?}");
        let r = ghost.alloc_mw();
        assert!(matches!(r, Err(Error::LoopsDisagree)), "{r:?}");
        // Loop 1's PD holds nothing: it frees (PdBusy had a region or a
        // window been left in it). Loop 0, which has no such PD, takes
        // the same control operation, as every replica takes each.
        assert_eq!(
            on_loop(&ctx, 0, move |m| m.dealloc_pd(extra)),
            Err(MemError::NoSuchPd)
        );
        assert_eq!(on_loop(&ctx, 1, move |m| m.dealloc_pd(extra)), Ok(()));
    }

    /// The first connection of a context from a loop other than 0: its
    /// ARP request goes out from that loop, the reply reaches loop 0 only
    /// (RSS puts ARP on queue 0), and the loop that asked takes the
    /// answer from the neighbours the loops share. (It never sees a reply
    /// of its own: without the shared table the connect would fail once
    /// its three requests went unanswered; with it looked at only on a
    /// miss, the SYN would wait for its retransmission.)
    #[test]
    fn a_loop_other_than_0_resolves_its_peer_through_loop_0() {
        use std::net::SocketAddrV4;
        use std::sync::atomic::Ordering;

        use crate::{ConnectOptions, ListenOptions};

        let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
        client.inner.next_loop.store(1, Ordering::Relaxed);
        let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
        let (scq, ccq) = (server.create_cq(8), client.create_cq(8));
        let listener = server.listen(7400, &ListenOptions::new(&spd)).unwrap();
        let to = SocketAddrV4::new(server.addr(), 7400);
        let c = client.clone();
        let o = ConnectOptions::new(&cpd, &ccq);
        let t = std::thread::spawn(move || c.connect(to, &o));
        let sqp = listener
            .get_request(Duration::from_secs(10))
            .unwrap()
            .accept(&Default::default(), &scq)
            .unwrap();
        let cqp = t.join().unwrap().unwrap();
        assert_eq!((cqp.loop_index(), sqp.loop_index()), (1, 1));
        // Loop 1 sent the only ARP request of the client; loop 0 took
        // the reply.
        let s = client.stats().unwrap();
        assert_eq!(s.loops[0].connections, 0);
        assert_eq!(s.loops[1].connections, 1);
        // Taken while the SYN waited for the address: not when the SYN's
        // retransmission (a second later) looked the address up again.
        assert_eq!(s.tcp.rto_retransmits, 0, "{:?}", s.tcp);
    }
}
