//! The iWARP side: one connection per test between a server context and a
//! client context (same process).
//!
//! Latency tests run in-loop by default: the client's and the server's
//! ping-pong logic are [`Qp::run_in_loop`] hooks (on the poll loop that
//! owns each end, loop 0 on a context of one loop), so a round trip has
//! no thread hand-off between the application and the poll loop. The hooks
//! only post and [`Cq::poll_one`]; the result comes back through a channel.
//! With `--threads` (and always for bandwidth tests) the client posts from
//! the calling thread and waits on the CQ, and the server answers on its own
//! thread.
//!
//! What is timed (`Instant` around post and poll; the same definitions on
//! both paths):
//! - `send_lat`: Send of SIZE, the server answers with a Send of SIZE from
//!   its own buffer as soon as the Recv completes; RTT = post of our Send to
//!   our Recv completion; recorded RTT/2.
//! - `write_lat` (in-loop, and `--threads --busy`): RDMA Write of SIZE
//!   into the server's region, whose last octet is the iteration number
//!   (mod 256); the server's hook (or thread) watches that octet in its
//!   own memory ([`Mr::load`]) and answers with a Write of SIZE into our
//!   region, whose last octet we watch, as perftest's ib_write_lat does.
//!   RTT = post of our Write to the server's octet in our memory;
//!   recorded RTT/2.
//! - `write_lat` with `--doorbell` (and with `--threads` unless `--busy`:
//!   threads that sleep on the CQ need a completion): the Write, then a
//!   0-octet Send as doorbell (RFC 5040 §5.5: its Recv completes only
//!   after the Write is placed); the server answers the same way. RTT =
//!   post of our Write to the Recv of the server's doorbell; recorded
//!   RTT/2.
//! - `read_lat`: one RDMA Read of SIZE; post to Read completion, full RTT.
//! - with `--rate`: message *i* is due at start + *i*/rate; the value is the
//!   completion time minus the due time, not halved.
//! - `*_bw`: up to WINDOW operations outstanding, ITERS in all, then a
//!   0-octet Send that the server answers (so every octet has arrived);
//!   the whole span is timed.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Sender};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, Error, HookStatus, ListenOptions, Mr, Qp,
    Wc, WcOpcode, WorkRequest,
};

use crate::{BwResult, LatRun, Plan, Test};

const T: Duration = Duration::from_secs(10);
/// Receives the server keeps posted (send_bw) and credit batch size.
const SRV_RECVS: u64 = 512;
const CREDIT_BATCH: u64 = 64;
const CLIENT_RECVS: u64 = 64;
/// In-loop `--rate`: how long before a message is due the client hook keeps
/// its loop spinning (reports Busy), so that an adaptive loop's sleep (at
/// most 200 µs) does not make the send late.
const SPIN_AHEAD: Duration = Duration::from_micros(300);

fn fail(what: &str, wc: &Wc) -> Error {
    eprintln!("iwarp-perf: {what}: {wc:?}");
    Error::InvalidArgument("work completion failed")
}

fn poll(cq: &Cq, busy: bool) -> Result<Wc, Error> {
    if !busy {
        return cq.wait(T).ok_or(Error::TimedOut);
    }
    let deadline = Instant::now() + T;
    let mut n = 0u32;
    loop {
        if let Some(wc) = cq.poll_one() {
            return Ok(wc);
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(4096) && Instant::now() >= deadline {
            return Err(Error::TimedOut);
        }
        std::hint::spin_loop();
    }
}

fn send(qp: &Qp, wr_id: u64, mr: &Mr, len: u32) -> Result<(), Error> {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: mr.sge(0, len).into(),
        solicited: false,
        invalidate: None,
    })
}

fn write(qp: &Qp, wr_id: u64, mr: &Mr, len: u32, to: &Mr) -> Result<(), Error> {
    qp.post_send(WorkRequest::Write {
        wr_id,
        signaled: true,
        local: mr.sge(0, len).into(),
        remote_stag: to.stag(),
        remote_to: 0,
    })
}

/// A Write of `len` from `mr` into `to`, then a 0-octet Send from
/// `doorbell` as its doorbell, posted as one list (one round on an inline
/// context).
fn write_and_doorbell(
    qp: &Qp,
    (write_id, send_id): (u64, u64),
    mr: &Mr,
    len: u32,
    to: &Mr,
    doorbell: &Mr,
) -> Result<(), Error> {
    let wrs = [
        WorkRequest::Write {
            wr_id: write_id,
            signaled: true,
            local: mr.sge(0, len).into(),
            remote_stag: to.stag(),
            remote_to: 0,
        },
        WorkRequest::Send {
            wr_id: send_id,
            signaled: true,
            local: doorbell.sge(0, 0).into(),
            solicited: false,
            invalidate: None,
        },
    ];
    qp.post_send_list(wrs).map(|_| ()).map_err(|(_, e)| e)
}

fn read(qp: &Qp, wr_id: u64, mr: &Mr, len: u32, from: &Mr) -> Result<(), Error> {
    qp.post_send(WorkRequest::Read {
        wr_id,
        signaled: true,
        local: mr.sge(0, len).into(),
        remote_stag: from.stag(),
        remote_to: 0,
    })
}

/// The server's end of one connection.
#[derive(Clone)]
struct Server {
    qp: Arc<Qp>,
    cq: Cq,
    /// Data region (target of Writes, source of Reads and of write_lat's
    /// answer).
    buf: Mr,
    /// `SRV_RECVS` receive slots of `len` octets.
    slots: Mr,
    /// Source of the answering Sends.
    reply: Mr,
    len: u32,
}

impl Server {
    fn slot(&self, i: u64) -> iwarp::Sge {
        self.slots.sge(i * u64::from(self.len), self.len)
    }

    /// Answer one Recv completion as the test asks, then re-post its slot.
    /// `got`: Recv completions so far, this one included.
    fn answer(&self, test: Test, size: u32, wc: &Wc, got: u64, peer: &Mr) -> Result<(), Error> {
        match test {
            Test::SendLat => send(&self.qp, 1 << 40, &self.reply, size)?,
            Test::WriteLat => write_and_doorbell(
                &self.qp,
                (1 << 40, 1 << 41),
                &self.buf,
                size,
                peer,
                &self.reply,
            )?,
            Test::SendBw if wc.byte_len > 0 => {
                if got.is_multiple_of(CREDIT_BATCH) {
                    send(&self.qp, 1 << 41, &self.reply, 4.min(size))?;
                }
            }
            // A 0-octet Send: the end of a bandwidth run; answer it.
            _ => send(&self.qp, 1 << 41, &self.reply, 0)?,
        }
        self.qp.post_recv(wc.wr_id, self.slot(wc.wr_id))
    }
}

/// Both ends of one test's connection.
pub struct Pair {
    qp: Arc<Qp>,
    cq: Cq,
    /// Client buffers: data source/sink of SIZE, and small receive slots.
    buf: Mr,
    small: Mr,
    /// The source of write_lat's Writes when the ends watch memory (`buf`
    /// is where the server's Writes land).
    wsrc: Mr,
    slot_len: u32,
    /// The server's end; `srv.buf` is the remote region of Writes and Reads.
    srv: Server,
    /// The answering thread (`--threads` and bandwidth tests).
    server: Option<std::thread::JoinHandle<Result<(), Error>>>,
    done: Arc<AtomicBool>,
}

/// What a connection runs over: the transport, and whether this end asks
/// for MPA's CRC (over MPA/TCP; RFC 5044 uses it when either end asks).
#[derive(Debug, Clone, Copy)]
pub struct Lower {
    pub transport: iwarp::Transport,
    pub mpa_crc: bool,
}

/// Connect a client to a fresh server on `port` for `test` with SIZE `size`.
/// With `answer_thread` the server answers on a thread of its own (the
/// `--threads` path and bandwidth tests), pinned to `answer_core` when
/// given; without, [`Pair::latency`] runs both ends in their poll loops.
/// `watch` (write_lat, answer thread): the thread spins on the last octet
/// of the client's Write in its region instead of waiting for a doorbell.
#[allow(clippy::too_many_arguments)] // one call site; the settings of one run
pub fn connect(
    server: &Context,
    client: &Context,
    port: u16,
    test: Test,
    size: u32,
    busy: bool,
    answer_thread: bool,
    answer_core: Option<usize>,
    lower: Lower,
    watch: bool,
) -> Result<Pair, Error> {
    let len = size.max(1);
    let spd = server.alloc_pd()?;
    let scq = server.create_cq(8192);
    let rw = Access::LOCAL_WRITE | Access::LOCAL_READ | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let sbuf = spd.register(vec![0x5a; len as usize], rw)?;
    let slots = spd.register(
        vec![0; len as usize * SRV_RECVS as usize],
        Access::LOCAL_WRITE,
    )?;
    let sreply = spd.register(vec![0; len as usize], Access::LOCAL_READ)?;
    let mut lopts = ListenOptions::new(&spd);
    lopts.rq_depth = 1024;
    lopts.sq_depth = 1024;
    lopts.transport = lower.transport;
    lopts.mpa.crc = lower.mpa_crc;
    let listener = server.listen(port, &lopts)?;
    let addr = SocketAddrV4::new(server.addr(), port);

    let cpd = client.alloc_pd()?;
    let ccq = client.create_cq(8192);
    let cbuf = cpd.register(vec![0xa5; len as usize], rw)?;
    let slot_len = len.max(64);
    let small = cpd.register(
        vec![0; slot_len as usize * CLIENT_RECVS as usize],
        Access::LOCAL_WRITE | Access::LOCAL_READ,
    )?;
    let wsrc = cpd.register(vec![0; len as usize], Access::LOCAL_READ)?;

    // The server accepts on a thread while this one connects.
    let (acq, aslots) = (scq.clone(), slots.clone());
    let accept = std::thread::spawn(move || -> Result<Qp, Error> {
        let req = listener.get_request(T)?;
        for i in 0..SRV_RECVS {
            req.post_recv(i, aslots.sge(i * u64::from(len), len))?;
        }
        req.accept(&AcceptOptions::default(), &acq)
    });
    let mut copts = ConnectOptions::new(&cpd, &ccq);
    copts.rq_depth = 1024;
    copts.sq_depth = 1024;
    copts.transport = lower.transport;
    copts.mpa.crc = lower.mpa_crc;
    let qp = client.connect(addr, &copts)?;
    for i in 0..CLIENT_RECVS {
        qp.post_recv(i, small.sge(i * u64::from(slot_len), slot_len))?;
    }
    let sqp = accept.join().map_err(|_| Error::Stopped)??;
    let srv = Server {
        qp: Arc::new(sqp),
        cq: scq,
        buf: sbuf,
        slots,
        reply: sreply,
        len,
    };

    let done = Arc::new(AtomicBool::new(false));
    let handle = answer_thread.then(|| {
        let (s, sdone, peer) = (srv.clone(), done.clone(), cbuf.clone());
        std::thread::spawn(move || -> Result<(), Error> {
            if let Some(id) = answer_core {
                core_affinity::set_for_current(core_affinity::CoreId { id });
            }
            if watch {
                return watch_and_answer(&s, &sdone, &peer);
            }
            let mut got = 0u64;
            while !sdone.load(Ordering::Acquire) {
                let wc = match if busy {
                    poll(&s.cq, true).ok()
                } else {
                    s.cq.wait(Duration::from_millis(50))
                } {
                    Some(wc) => wc,
                    None => continue,
                };
                if !wc.status.is_ok() {
                    if sdone.load(Ordering::Acquire) {
                        break;
                    }
                    return Err(fail("server", &wc));
                }
                if wc.opcode != Some(WcOpcode::Recv) {
                    continue;
                }
                got += 1;
                s.answer(test, size, &wc, got, &peer)?;
            }
            s.qp.wait_disconnected(T).map(|_| ())
        })
    });
    Ok(Pair {
        qp: Arc::new(qp),
        cq: ccq,
        buf: cbuf,
        small,
        wsrc,
        slot_len,
        srv,
        server: handle,
        done,
    })
}

/// The answer thread of a write_lat that watches memory: spin on the last
/// octet of the client's next Write in `s.buf` (driving the loops through
/// the CQ on an inline context) and answer each with a Write into `peer`,
/// until told to stop.
fn watch_and_answer(s: &Server, done: &AtomicBool, peer: &Mr) -> Result<(), Error> {
    let at = s.len as usize - 1;
    let mut got = 0u64;
    let mut n = 0u32;
    while !done.load(Ordering::Acquire) {
        while let Some(wc) = s.cq.poll_one() {
            if !wc.status.is_ok() {
                if done.load(Ordering::Acquire) {
                    break;
                }
                return Err(fail("server", &wc));
            }
        }
        if s.buf.load(at)? == tag(got) {
            watched_write(&s.qp, got, &s.reply, s.len, peer)?;
            got += 1;
            continue;
        }
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) {
            // Let a loop thread on this CPU (or the closing thread) in.
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    s.qp.wait_disconnected(T).map(|_| ())
}

/// The completion that ends an iteration of a latency test.
fn wanted(test: Test) -> WcOpcode {
    if test == Test::ReadLat {
        WcOpcode::Read
    } else {
        WcOpcode::Recv
    }
}

/// Post iteration `i` of a latency test.
fn post_lat(test: Test, qp: &Qp, i: u64, buf: &Mr, size: u32, remote: &Mr) -> Result<(), Error> {
    match test {
        Test::SendLat => send(qp, i, buf, size),
        Test::WriteLat => write_and_doorbell(qp, (i, i), buf, size, remote, buf),
        Test::ReadLat => read(qp, i, buf, size, remote),
        _ => unreachable!("not a latency test"),
    }
}

/// The client's ping-pong as a poll-loop hook: one iteration in flight at a
/// time; stops by itself after `plan.iters` iterations, at `plan.duration`,
/// or when a reply is `T` late.
struct ClientLoop {
    qp: Arc<Qp>,
    cq: Cq,
    buf: Mr,
    small: Mr,
    /// write_lat watching memory: the Writes' source (`buf` is watched).
    wsrc: Mr,
    slot_len: u32,
    remote: Mr,
    test: Test,
    size: u32,
    plan: Plan,
    stop: Arc<AtomicBool>,
    start: Option<Instant>,
    /// The iteration in flight: its start (the intended send time with
    /// `--rate`) and when it was posted.
    in_flight: Option<(Instant, Instant)>,
    /// Steps in a row without an answer: the reply's timeout is checked
    /// every [`CLOCK_EVERY`] of them, not with a clock read every round.
    idle_steps: u32,
    i: u64,
    run: LatRun,
}

impl ClientLoop {
    /// One run of the hook: `Ok(Some(status))` while running, `Ok(None)`
    /// when finished.
    fn step(&mut self) -> Result<Option<HookStatus>, String> {
        if self.stop.load(Ordering::Acquire) {
            return Err(
                "stopped from outside (the server hook failed or the run timed out)".into(),
            );
        }
        let mut busy = false;
        let watch = self.test == Test::WriteLat && !self.plan.doorbell;
        if let Some((t0, posted)) = self.in_flight {
            let want = wanted(self.test);
            // Bounded: the CQ holds at most its depth.
            while let Some(wc) = self.cq.poll_one() {
                busy = true;
                if !wc.status.is_ok() {
                    return Err(format!(
                        "client: work completion failed in iteration {}: {wc:?}",
                        self.i
                    ));
                }
                if wc.opcode == Some(WcOpcode::Recv) {
                    let at = wc.wr_id * u64::from(self.slot_len);
                    self.qp
                        .post_recv(wc.wr_id, self.small.sge(at, self.slot_len))
                        .map_err(|e| format!("client: re-post receive: {e}"))?;
                }
                if !watch && wc.opcode == Some(want) {
                    self.done_one(t0);
                    break;
                }
            }
            // The server's answer: its Write's last octet in our memory,
            // checked after this round placed what arrived.
            if watch {
                let at = self.size as usize - 1;
                let got = self
                    .buf
                    .load(at)
                    .map_err(|e| format!("client: watch the answer: {e}"))?;
                if got == tag(self.i) {
                    busy = true;
                    self.done_one(t0);
                }
            }
            if self.in_flight.is_some() {
                // No clock read while an answer is awaited (it would
                // lengthen every round of the loop that must see it),
                // but every CLOCK_EVERY rounds, for the timeout.
                self.idle_steps = if busy { 0 } else { self.idle_steps + 1 };
                let check = busy || self.idle_steps >= CLOCK_EVERY;
                if self.idle_steps >= CLOCK_EVERY {
                    self.idle_steps = 0;
                }
                if check && posted.elapsed() > T {
                    return Err(format!(
                        "timed out: no {want:?} completion for iteration {} within {T:?} of its post (a lost message?); {} of {} iterations done",
                        self.i, self.i, self.plan.iters
                    ));
                }
                return Ok(Some(if busy {
                    HookStatus::Busy
                } else {
                    HookStatus::Idle
                }));
            }
        }
        let now = Instant::now();
        let start = *self.start.get_or_insert(now);
        if self.i >= self.plan.iters || now.duration_since(start) >= self.plan.duration {
            return Ok(None);
        }
        let t0 = match self.plan.rate {
            Some(r) => {
                let due = start + Duration::from_secs_f64(self.i as f64 / r);
                if now < due {
                    // Keep the loop awake just before the due time.
                    return Ok(Some(if busy || due - now <= SPIN_AHEAD {
                        HookStatus::Busy
                    } else {
                        HookStatus::Idle
                    }));
                }
                due
            }
            None => now,
        };
        if watch {
            watched_write(&self.qp, self.i, &self.wsrc, self.size, &self.remote)
        } else {
            post_lat(
                self.test,
                &self.qp,
                self.i,
                &self.buf,
                self.size,
                &self.remote,
            )
        }
        .map_err(|e| format!("client: post iteration {}: {e}", self.i))?;
        // Posted at `now`, as near as the timeout needs (a clock read
        // here would delay the round that sends it).
        self.in_flight = Some((t0, now));
        self.idle_steps = 0;
        Ok(Some(HookStatus::Busy))
    }

    /// Iteration `self.i`, started at `t0`, is over.
    fn done_one(&mut self, t0: Instant) {
        let ns = t0.elapsed().as_nanos() as u64;
        let half = self.test != Test::ReadLat && self.plan.rate.is_none();
        self.run.record(if half { ns / 2 } else { ns });
        self.i += 1;
        crate::progress(self.i, &self.plan);
        self.in_flight = None;
    }
}

/// The last octet of write_lat's Write for iteration `i` (0-based) when
/// the ends watch memory: `i + 1` mod 256, so the first differs from the
/// buffers' initial octets and each from the one before.
fn tag(i: u64) -> u8 {
    (i + 1) as u8
}

/// write_lat watching memory: `len` octets of `src` into `to`, the last one
/// set to [`tag`]`(i)` first. Signaled, as perftest's; a small Write
/// completes once handed to TCP.
fn watched_write(qp: &Qp, i: u64, src: &Mr, len: u32, to: &Mr) -> Result<(), Error> {
    src.store(len as usize - 1, tag(i))?;
    write(qp, i, src, len, to)
}

/// The server's answers as a poll-loop hook: stops when told to, after
/// answering `limit` messages, or at `deadline`.
struct ServerLoop {
    srv: Server,
    peer: Mr,
    test: Test,
    size: u32,
    /// write_lat: watch the last octet of the client's Write in `srv.buf`
    /// (not `--doorbell`).
    watch: bool,
    limit: u64,
    /// Bandwidth runs: stop after answering the 0-octet end marker.
    until_marker: bool,
    deadline: Instant,
    stop: Arc<AtomicBool>,
    got: u64,
    /// Steps since the clock was last read.
    idle_steps: u32,
}

/// Hook steps without a completion between two clock reads: the hooks
/// run once per poll-loop round, and a clock read (`clock_gettime`, about
/// 20 ns here) every round was a fifth of an idle round's time in the
/// loops; the deadlines these reads serve are seconds away.
const CLOCK_EVERY: u32 = 256;

impl ServerLoop {
    /// write_lat watching memory: answer the client's next Write once its
    /// last octet is in `srv.buf`. Whether it answered.
    fn watch_step(&mut self) -> Result<bool, String> {
        let at = self.size as usize - 1;
        let got = self
            .srv
            .buf
            .load(at)
            .map_err(|e| format!("server: watch the client's Write: {e}"))?;
        if got != tag(self.got) {
            return Ok(false);
        }
        watched_write(
            &self.srv.qp,
            self.got,
            &self.srv.reply,
            self.size,
            &self.peer,
        )
        .map_err(|e| format!("server: answer {}: {e}", self.got + 1))?;
        self.got += 1;
        Ok(true)
    }

    fn step(&mut self) -> Result<Option<HookStatus>, String> {
        if self.stop.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut busy = false;
        if self.watch && self.watch_step()? {
            if self.got >= self.limit {
                return Ok(None);
            }
            busy = true;
        }
        // Bounded: the CQ holds at most its depth.
        while let Some(wc) = self.srv.cq.poll_one() {
            busy = true;
            if !wc.status.is_ok() {
                return Err(format!(
                    "server: work completion failed after {} answers: {wc:?}",
                    self.got
                ));
            }
            if wc.opcode != Some(WcOpcode::Recv) {
                continue;
            }
            self.got += 1;
            self.srv
                .answer(self.test, self.size, &wc, self.got, &self.peer)
                .map_err(|e| format!("server: answer {}: {e}", self.got))?;
            if self.got >= self.limit || (self.until_marker && wc.byte_len == 0) {
                return Ok(None);
            }
        }
        // The deadline every CLOCK_EVERY steps, answering or not: a clock
        // read in a step that answered would lie between the frame in and
        // the answer out, where the Linux baseline's echo reads no clock.
        self.idle_steps += 1;
        if self.idle_steps >= CLOCK_EVERY {
            self.idle_steps = 0;
            if Instant::now() >= self.deadline {
                return Err(format!(
                    "server: deadline passed after {} answers",
                    self.got
                ));
            }
        }
        Ok(Some(if busy {
            HookStatus::Busy
        } else {
            HookStatus::Idle
        }))
    }
}

/// Upper bound of an in-loop run, as a span and a deadline: the hooks stop
/// by themselves well before (no new operation after `plan.duration`, each
/// reply or completion within `T`).
fn run_bound(plan: &Plan) -> (Duration, Instant) {
    let bound = plan.duration.saturating_add(T * 3);
    let deadline = Instant::now()
        .checked_add(bound)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
    (bound, deadline)
}

/// Wrap a stepping state machine as a hook that reports its end on `tx`.
fn hook<S: Send + 'static, R: Send + 'static>(
    mut state: S,
    mut step: impl FnMut(&mut S) -> Result<Option<HookStatus>, String> + Send + 'static,
    mut finish: impl FnMut(&mut S) -> R + Send + 'static,
    tx: Sender<Result<R, String>>,
) -> impl FnMut() -> HookStatus + Send + 'static {
    move || match step(&mut state) {
        Ok(Some(st)) => st,
        Ok(None) => {
            let _ = tx.send(Ok(finish(&mut state)));
            HookStatus::Done
        }
        Err(e) => {
            let _ = tx.send(Err(e));
            HookStatus::Done
        }
    }
}

/// The client's bandwidth run as a poll-loop hook: keeps `plan.window`
/// operations outstanding, `plan.iters` in all (or until `plan.duration`),
/// then sends the 0-octet end marker and waits for the server's answer, so
/// every octet has arrived when the clock stops. One clock read per run of
/// the hook that brings completions (every completion of a burst gets the
/// same stamp), and one per [`CLOCK_EVERY`] runs without any.
/// What [`ClientBw::finish`] hands back.
type ClientBwDone = (u64, f64, Vec<Instant>, Instant, Option<(f64, f64)>);

struct ClientBw {
    qp: Arc<Qp>,
    cq: Cq,
    buf: Mr,
    small: Mr,
    slot_len: u32,
    remote: Mr,
    test: Test,
    size: u32,
    plan: Plan,
    stop: Arc<AtomicBool>,
    start: Option<Instant>,
    /// The last time a completion arrived (stall detection).
    last_progress: Option<Instant>,
    posted: u64,
    completed: u64,
    outstanding: u64,
    /// send_bw: receives the server has posted for us.
    credits: u64,
    /// Operations in the run (cut to `posted` at `plan.duration`).
    n: u64,
    stamps: Vec<Instant>,
    marker_sent: bool,
    /// Steps without a completion since the clock was last read.
    idle_steps: u32,
    /// This (the sending loop's) thread's CPU seconds, user and kernel,
    /// at the first step.
    cpu0: Option<(f64, f64)>,
}

/// CPU seconds (user, kernel) of the calling thread so far, from
/// `/proc/thread-self/stat` (10 ms ticks); `None` where it cannot be read.
pub fn thread_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // After the command name (in parentheses, which may hold spaces):
    // field 3 onwards; utime and stime are fields 14 and 15.
    let after = stat.rsplit(')').next()?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let secs = |i: usize| f.get(i)?.parse::<f64>().ok().map(|t| t / 100.0);
    Some((secs(11)?, secs(12)?))
}

impl ClientBw {
    fn step(&mut self) -> Result<Option<HookStatus>, String> {
        if self.stop.load(Ordering::Acquire) {
            return Err("stopped from outside (the server hook failed)".into());
        }
        if self.start.is_none() {
            self.cpu0 = thread_cpu();
            let now = Instant::now();
            self.start = Some(now);
            self.last_progress = Some(now);
        }
        if !self.marker_sent {
            while self.outstanding < self.plan.window && self.posted < self.n && self.credits > 0 {
                let (qp, i, buf, size, remote) =
                    (&self.qp, self.posted, &self.buf, self.size, &self.remote);
                match self.test {
                    Test::WriteBw => write(qp, i, buf, size, remote),
                    Test::SendBw => send(qp, i, buf, size.max(1)),
                    Test::ReadBw => read(qp, i, buf, size, remote),
                    _ => unreachable!("not a bandwidth test"),
                }
                .map_err(|e| format!("client: post {i}: {e}"))?;
                self.posted += 1;
                self.outstanding += 1;
                if self.test == Test::SendBw {
                    self.credits -= 1;
                }
            }
        }
        let mut got = 0u64;
        let mut marker_back = false;
        // Bounded: the CQ holds at most its depth.
        while let Some(wc) = self.cq.poll_one() {
            if !wc.status.is_ok() {
                return Err(format!(
                    "client: work completion failed after {} completions: {wc:?}",
                    self.completed
                ));
            }
            if wc.opcode == Some(WcOpcode::Recv) {
                let at = wc.wr_id * u64::from(self.slot_len);
                self.qp
                    .post_recv(wc.wr_id, self.small.sge(at, self.slot_len))
                    .map_err(|e| format!("client: re-post receive: {e}"))?;
                if wc.byte_len == 0 && self.marker_sent {
                    marker_back = true;
                } else {
                    self.credits += CREDIT_BATCH;
                }
                continue;
            }
            if wc.wr_id == u64::MAX {
                continue; // the marker's own Send completion
            }
            self.outstanding -= 1;
            self.completed += 1;
            got += 1;
            crate::progress(self.completed, &self.plan);
        }
        // The clock is read when completions came (their stamp) and
        // otherwise every CLOCK_EVERY steps, for the duration and the
        // stall check.
        let now = if got > 0 {
            let t = Instant::now();
            self.stamps
                .extend(std::iter::repeat_n(t, got.min(1 << 22) as usize));
            self.last_progress = Some(t);
            self.idle_steps = 0;
            Some(t)
        } else {
            self.idle_steps += 1;
            (self.idle_steps >= CLOCK_EVERY).then(|| {
                self.idle_steps = 0;
                Instant::now()
            })
        };
        if marker_back {
            return Ok(None);
        }
        let (start, last) = (
            self.start.unwrap_or_else(Instant::now),
            self.last_progress.unwrap_or_else(Instant::now),
        );
        if let Some(now) = now {
            if now.duration_since(start) >= self.plan.duration && self.n == self.plan.iters {
                self.n = self.posted; // --duration: finish what is in flight
            }
        }
        if !self.marker_sent && self.completed >= self.n {
            send(&self.qp, u64::MAX, &self.buf, 0)
                .map_err(|e| format!("client: post end marker: {e}"))?;
            self.marker_sent = true;
        }
        if got == 0 && now.is_some_and(|now| now.duration_since(last) > T) {
            return Err(format!(
                "timed out: no completion within {T:?} ({} of {} done, {} outstanding)",
                self.completed, self.n, self.outstanding
            ));
        }
        Ok(Some(HookStatus::Busy))
    }

    /// Completions, seconds, their stamps, the start, and the sending
    /// loop's CPU seconds (user, kernel) over the run.
    fn finish(&mut self) -> ClientBwDone {
        let start = self.start.unwrap_or_else(Instant::now);
        let cpu = match (self.cpu0, thread_cpu()) {
            (Some((u0, k0)), Some((u1, k1))) => Some((u1 - u0, k1 - k0)),
            _ => None,
        };
        (
            self.completed,
            start.elapsed().as_secs_f64(),
            std::mem::take(&mut self.stamps),
            start,
            cpu,
        )
    }
}

impl Pair {
    /// Whether the connection's FPDUs carry MPA's CRC (what its MPA
    /// exchange settled).
    pub fn mpa_crc(&self) -> bool {
        self.qp.negotiated().crc
    }

    /// The poll loops that own the client's and the server's end (0 and 0
    /// on contexts of one loop).
    pub fn loops(&self) -> (usize, usize) {
        (self.qp.loop_index(), self.srv.qp.loop_index())
    }

    /// The client's next completion on the thread path: an error ends the
    /// test; a Recv's slot is posted again.
    fn next_wc(&self, busy: bool) -> Result<Wc, Error> {
        let wc = poll(&self.cq, busy)?;
        if !wc.status.is_ok() {
            return Err(fail("client", &wc));
        }
        if wc.opcode == Some(WcOpcode::Recv) {
            self.repost(&wc)?;
        }
        Ok(wc)
    }

    fn repost(&self, wc: &Wc) -> Result<(), Error> {
        self.qp.post_recv(
            wc.wr_id,
            self.small
                .sge(wc.wr_id * u64::from(self.slot_len), self.slot_len),
        )
    }

    /// Run the server's answers as a hook in its poll loop (see
    /// [`ServerLoop`]); its answer count (or error) arrives on the returned
    /// channel. On an error it sets `stop`, so the client hook ends now,
    /// not at its timeout.
    #[allow(clippy::too_many_arguments)] // the settings of one hook, two call sites
    fn server_hook(
        &self,
        test: Test,
        size: u32,
        limit: u64,
        until_marker: bool,
        watch: bool,
        deadline: Instant,
        stop: &Arc<AtomicBool>,
    ) -> Result<mpsc::Receiver<Result<u64, String>>, String> {
        let (tx, rx) = mpsc::channel();
        let st = ServerLoop {
            srv: self.srv.clone(),
            peer: self.buf.clone(),
            test,
            size,
            watch,
            limit,
            until_marker,
            deadline,
            stop: stop.clone(),
            got: 0,
            idle_steps: 0,
        };
        let f = hook(
            st,
            |s: &mut ServerLoop| {
                let r = s.step();
                if r.is_err() {
                    s.stop.store(true, Ordering::Release);
                }
                r
            },
            |s: &mut ServerLoop| s.got,
            tx,
        );
        self.srv
            .qp
            .run_in_loop(f)
            .map_err(|e| format!("server run_in_loop: {e}"))?;
        Ok(rx)
    }

    /// Ping-pong (or one Read) per iteration, `plan.iters` times or until
    /// `plan.duration`. Values are RTT/2 for send/write, RTT for read; with
    /// `plan.rate` each is measured from its scheduled start instead.
    /// In-loop unless `plan.threads`.
    pub fn latency(&self, test: Test, size: u32, plan: &Plan) -> Result<LatRun, String> {
        if plan.threads {
            self.latency_threads(test, size, plan)
                .map_err(|e| e.to_string())
        } else {
            self.latency_in_loop(test, size, plan)
        }
    }

    /// Both ends as poll-loop hooks; this thread only waits for the result.
    fn latency_in_loop(&self, test: Test, size: u32, plan: &Plan) -> Result<LatRun, String> {
        if self.server.is_some() {
            return Err("in-loop latency needs a pair connected without an answer thread".into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (bound, deadline) = run_bound(plan);
        let watch = test == Test::WriteLat && !plan.doorbell;
        // Read is answered by the server's stack: no server hook.
        let srx = if test == Test::ReadLat {
            None
        } else {
            Some(self.server_hook(test, size, plan.iters, false, watch, deadline, &stop)?)
        };
        let (tx, crx) = mpsc::channel();
        let cl = ClientLoop {
            qp: self.qp.clone(),
            cq: self.cq.clone(),
            buf: self.buf.clone(),
            small: self.small.clone(),
            wsrc: self.wsrc.clone(),
            slot_len: self.slot_len,
            remote: self.srv.buf.clone(),
            test,
            size,
            plan: plan.clone(),
            stop: stop.clone(),
            start: None,
            in_flight: None,
            idle_steps: 0,
            i: 0,
            run: LatRun::new(),
        };
        let f = hook(
            cl,
            ClientLoop::step,
            |c: &mut ClientLoop| std::mem::take(&mut c.run),
            tx,
        );
        if let Err(e) = self.qp.run_in_loop(f) {
            stop.store(true, Ordering::Release);
            return Err(format!("client run_in_loop: {e}"));
        }
        let client = crx.recv_timeout(bound.saturating_add(T));
        // Whatever happened, the server hook ends now.
        stop.store(true, Ordering::Release);
        let server = match &srx {
            Some(rx) => rx
                .recv_timeout(T)
                .unwrap_or_else(|_| Err(format!("server hook did not stop within {T:?}"))),
            None => Ok(0),
        };
        match (client, server) {
            (_, Err(s)) => Err(format!("in-loop {s}")),
            // Each iteration ended on the server's answer to it.
            (Ok(Ok(run)), Ok(answered)) if watch && answered != run.hist.len() => Err(format!(
                "in-loop: the server answered {answered} Writes, the client counted {}",
                run.hist.len()
            )),
            (Ok(Ok(run)), Ok(_)) => Ok(run),
            (Ok(Err(c)), Ok(_)) => Err(format!("in-loop client: {c}")),
            (Err(_), Ok(_)) => Err(format!(
                "timed out: the in-loop client hook reported nothing within {:?} (poll loop stalled?)",
                bound.saturating_add(T)
            )),
        }
    }

    /// The thread path (`--threads`): this thread posts and waits on the CQ,
    /// the server answers on its thread.
    fn latency_threads(&self, test: Test, size: u32, plan: &Plan) -> Result<LatRun, Error> {
        if self.server.is_none() {
            return Err(Error::InvalidArgument(
                "--threads latency needs the server's answer thread",
            ));
        }
        let mut run = LatRun::new();
        let start = Instant::now();
        let interval = plan.rate.map(|r| Duration::from_secs_f64(1.0 / r));
        let mut i = 0u64;
        while i < plan.iters && start.elapsed() < plan.duration {
            let t0 = match interval {
                Some(iv) => {
                    let due = start + iv * i as u32;
                    crate::wait_until(due);
                    due
                }
                None => Instant::now(),
            };
            if test == Test::WriteLat && !plan.doorbell {
                watched_write(&self.qp, i, &self.wsrc, size, &self.srv.buf)?;
                self.wait_answer(i)?;
            } else {
                post_lat(test, &self.qp, i, &self.buf, size, &self.srv.buf)?;
                let want = wanted(test);
                while self.next_wc(plan.busy)?.opcode != Some(want) {}
            }
            let ns = t0.elapsed().as_nanos() as u64;
            let half = test != Test::ReadLat && interval.is_none();
            run.record(if half { ns / 2 } else { ns });
            i += 1;
            crate::progress(i, plan);
        }
        Ok(run)
    }

    /// write_lat watching memory from this thread: spin on the last octet
    /// of the server's answer to iteration `i` in our region, draining our
    /// Write completions (and driving the loops on an inline context).
    fn wait_answer(&self, i: u64) -> Result<(), Error> {
        let at = self.buf.len() - 1;
        let deadline = Instant::now() + T;
        let mut n = 0u32;
        loop {
            while let Some(wc) = self.cq.poll_one() {
                if !wc.status.is_ok() {
                    return Err(fail("client", &wc));
                }
            }
            if self.buf.load(at)? == tag(i) {
                return Ok(());
            }
            n = n.wrapping_add(1);
            if n.is_multiple_of(4096) && Instant::now() >= deadline {
                return Err(Error::TimedOut);
            }
            std::hint::spin_loop();
        }
    }

    /// Keep `window` operations outstanding; see the module comment.
    /// In-loop unless `plan.threads`.
    pub fn bandwidth(&self, test: Test, size: u32, plan: &Plan) -> Result<BwResult, String> {
        if plan.threads {
            self.bandwidth_threads(test, size, plan)
                .map_err(|e| e.to_string())
        } else {
            self.bandwidth_in_loop(test, size, plan)
        }
    }

    /// Both ends as poll-loop hooks (see [`ClientBw`]); this thread only
    /// waits for the result.
    fn bandwidth_in_loop(&self, test: Test, size: u32, plan: &Plan) -> Result<BwResult, String> {
        if self.server.is_some() {
            return Err("in-loop bandwidth needs a pair connected without an answer thread".into());
        }
        let stop = Arc::new(AtomicBool::new(false));
        let (bound, deadline) = run_bound(plan);
        let srx = self.server_hook(test, size, u64::MAX, true, false, deadline, &stop)?;
        let cpu0 = crate::cpu_time();
        let (tx, crx) = mpsc::channel();
        let cl = ClientBw {
            qp: self.qp.clone(),
            cq: self.cq.clone(),
            buf: self.buf.clone(),
            small: self.small.clone(),
            slot_len: self.slot_len,
            remote: self.srv.buf.clone(),
            test,
            size,
            plan: plan.clone(),
            stop: stop.clone(),
            start: None,
            last_progress: None,
            posted: 0,
            completed: 0,
            outstanding: 0,
            credits: if test == Test::SendBw {
                SRV_RECVS - 1
            } else {
                u64::MAX
            },
            n: plan.iters,
            stamps: Vec::with_capacity(plan.iters.min(1 << 22) as usize),
            marker_sent: false,
            idle_steps: 0,
            cpu0: None,
        };
        let f = hook(cl, ClientBw::step, ClientBw::finish, tx);
        if let Err(e) = self.qp.run_in_loop(f) {
            stop.store(true, Ordering::Release);
            return Err(format!("client run_in_loop: {e}"));
        }
        let client = crx.recv_timeout(bound.saturating_add(T));
        stop.store(true, Ordering::Release);
        let server = srx
            .recv_timeout(T)
            .unwrap_or_else(|_| Err(format!("server hook did not stop within {T:?}")));
        let cpu = crate::cpu_time() - cpu0;
        match (client, server) {
            (_, Err(s)) => Err(format!("in-loop {s}")),
            (Ok(Ok((completed, secs, stamps, start, sender))), Ok(_)) => {
                let mut r =
                    BwResult::new(size, completed, secs, &stamps, start, plan.window, cpu);
                r.set_sender_cpu(sender);
                Ok(r)
            }
            (Ok(Err(c)), Ok(_)) => Err(format!("in-loop client: {c}")),
            (Err(_), Ok(_)) => Err(format!(
                "timed out: the in-loop client hook reported nothing within {:?} (poll loop stalled?)",
                bound.saturating_add(T)
            )),
        }
    }

    /// The thread path (`--threads`): this thread posts and waits on the
    /// CQ, the server answers on its thread.
    fn bandwidth_threads(&self, test: Test, size: u32, plan: &Plan) -> Result<BwResult, Error> {
        let window = plan.window;
        let (mut posted, mut completed, mut outstanding) = (0u64, 0u64, 0u64);
        // send_bw: the server's posted receives, refilled in batches.
        // One receive stays free for the end marker.
        let mut credits = if test == Test::SendBw {
            SRV_RECVS - 1
        } else {
            u64::MAX
        };
        let mut stamps: Vec<Instant> = Vec::with_capacity(plan.iters.min(1 << 22) as usize);
        let cpu0 = crate::cpu_time();
        let start = Instant::now();
        let deadline = start + plan.duration;
        let mut n = plan.iters;
        while completed < n {
            while outstanding < window && posted < n && credits > 0 {
                match test {
                    Test::WriteBw => write(&self.qp, posted, &self.buf, size, &self.srv.buf)?,
                    Test::SendBw => send(&self.qp, posted, &self.buf, size.max(1))?,
                    Test::ReadBw => read(&self.qp, posted, &self.buf, size, &self.srv.buf)?,
                    _ => unreachable!("not a bandwidth test"),
                }
                posted += 1;
                outstanding += 1;
                credits = credits.saturating_sub(u64::from(test == Test::SendBw));
            }
            if self.next_wc(plan.busy)?.opcode == Some(WcOpcode::Recv) {
                credits += CREDIT_BATCH;
                continue;
            }
            outstanding -= 1;
            completed += 1;
            stamps.push(Instant::now());
            if Instant::now() >= deadline && n == plan.iters {
                n = posted; // --duration: finish what is in flight
            }
            crate::progress(completed, plan);
        }
        // End marker: a 0-octet Send the server answers with a 0-octet Send.
        send(&self.qp, u64::MAX, &self.buf, 0)?;
        loop {
            let wc = self.next_wc(plan.busy)?;
            if wc.opcode == Some(WcOpcode::Recv) && wc.byte_len == 0 {
                break;
            }
        }
        let secs = start.elapsed().as_secs_f64();
        let cpu = crate::cpu_time() - cpu0;
        Ok(BwResult::new(
            size, completed, secs, &stamps, start, window, cpu,
        ))
    }

    /// Disconnect and join the server.
    pub fn close(mut self) -> Result<(), Error> {
        self.done.store(true, Ordering::Release);
        self.qp.disconnect()?;
        let r = self.qp.wait_disconnected(T).map(|_| ());
        match self.server.take() {
            Some(h) => h.join().map_err(|_| Error::Stopped)??,
            None => {
                self.srv.qp.wait_disconnected(T)?;
            }
        }
        r
    }
}

#[cfg(test)]
mod tests {
    use super::thread_cpu;
    use std::time::{Duration, Instant};

    /// The calling thread's CPU time is read and grows while it computes
    /// (user time: the spin makes no system calls but the reads).
    #[test]
    fn thread_cpu_counts_this_threads_work() {
        let (u0, k0) = thread_cpu().expect("/proc/thread-self/stat");
        assert!(u0 >= 0.0 && k0 >= 0.0);
        let give_up = Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        loop {
            for i in 0..1_000_000u64 {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(i));
            }
            let (u, k) = thread_cpu().expect("/proc/thread-self/stat");
            assert!(u >= u0 && k >= k0, "CPU time went back");
            if u - u0 >= 0.05 {
                break;
            }
            assert!(Instant::now() < give_up, "no user CPU time counted in 20 s");
        }
        std::hint::black_box(x);
    }
}
