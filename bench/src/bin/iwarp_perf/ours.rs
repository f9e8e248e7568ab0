//! The iWARP side: one connection per test between a server context and a
//! client context (same process), the server answering on its own thread.
//!
//! What is timed (client thread, `Instant` around post and poll):
//! - `send_lat`: Send of SIZE, the server answers with a Send of SIZE from
//!   its own buffer as soon as the Recv completes; RTT = post of our Send to
//!   our Recv completion; recorded RTT/2.
//! - `write_lat`: RDMA Write of SIZE into the server's region, then a
//!   0-octet Send as doorbell (RFC 5040 §5.5: its Recv completes only after
//!   the Write is placed); the server answers the same way (Write of SIZE into
//!   our region + 0-octet Send). RTT = post of our Write to the Recv of the
//!   server's doorbell; recorded RTT/2.
//! - `read_lat`: one RDMA Read of SIZE; post to Read completion, full RTT.
//! - `*_bw`: up to WINDOW operations outstanding, ITERS in all, then a
//!   0-octet Send that the server answers (so every octet has arrived);
//!   the whole span is timed.

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, Error, ListenOptions, Mr, Qp, Wc, WcOpcode,
    WorkRequest,
};

use crate::{BwResult, LatRun, Plan, Test};

const T: Duration = Duration::from_secs(10);
/// Receives the server keeps posted (send_bw) and credit batch size.
const SRV_RECVS: u64 = 512;
const CREDIT_BATCH: u64 = 64;
const CLIENT_RECVS: u64 = 64;

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

/// Both ends of one test's connection.
pub struct Pair {
    qp: Qp,
    cq: Cq,
    /// Client buffers: data source/sink of SIZE, and small receive slots.
    buf: Mr,
    small: Mr,
    slot_len: u32,
    /// The server's data region (target of Writes, source of Reads).
    remote: Mr,
    server: Option<std::thread::JoinHandle<Result<(), Error>>>,
    done: Arc<AtomicBool>,
}

/// Connect a client to a fresh server on `port` for `test` with SIZE `size`.
pub fn connect(
    server: &Context,
    client: &Context,
    port: u16,
    test: Test,
    size: u32,
    busy: bool,
) -> Result<Pair, Error> {
    let len = size.max(1) as usize;
    let spd = server.alloc_pd()?;
    let scq = server.create_cq(8192);
    let rw = Access::LOCAL_WRITE | Access::LOCAL_READ | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let sbuf = spd.register(vec![0x5a; len], rw)?;
    let slots = spd.register(vec![0; len * SRV_RECVS as usize], Access::LOCAL_WRITE)?;
    let sreply = spd.register(vec![0; len], Access::LOCAL_READ)?;
    let mut lopts = ListenOptions::new(&spd);
    lopts.rq_depth = 1024;
    lopts.sq_depth = 1024;
    let listener = server.listen(port, &lopts)?;
    let addr = SocketAddrV4::new(server.addr(), port);

    let cpd = client.alloc_pd()?;
    let ccq = client.create_cq(8192);
    let cbuf = cpd.register(vec![0xa5; len], rw)?;
    let slot_len = len.max(64);
    let small = cpd.register(
        vec![0; slot_len * CLIENT_RECVS as usize],
        Access::LOCAL_WRITE | Access::LOCAL_READ,
    )?;
    let done = Arc::new(AtomicBool::new(false));

    let (tx, rx) = std::sync::mpsc::channel::<Mr>();
    let sdone = done.clone();
    let sremote = sbuf.clone();
    let h = std::thread::spawn(move || -> Result<(), Error> {
        let req = listener.get_request(T)?;
        let slot = |i: u64| slots.sge(i * len as u64, len as u32);
        for i in 0..SRV_RECVS {
            req.post_recv(i, slot(i))?;
        }
        let qp = req.accept(&AcceptOptions::default(), &scq)?;
        let peer = rx.recv_timeout(T).map_err(|_| Error::TimedOut)?;
        let mut got = 0u64;
        while !sdone.load(Ordering::Acquire) {
            let wc = match if busy {
                poll(&scq, true).ok()
            } else {
                scq.wait(Duration::from_millis(50))
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
            match test {
                Test::SendLat => send(&qp, 1 << 40, &sreply, size)?,
                Test::WriteLat => {
                    write(&qp, 1 << 40, &sbuf, size, &peer)?;
                    send(&qp, 1 << 41, &sreply, 0)?;
                }
                Test::SendBw if wc.byte_len > 0 => {
                    if got.is_multiple_of(CREDIT_BATCH) {
                        send(&qp, 1 << 41, &sreply, 4.min(size))?;
                    }
                }
                // A 0-octet Send: the end of a bandwidth run; answer it.
                _ => send(&qp, 1 << 41, &sreply, 0)?,
            }
            qp.post_recv(wc.wr_id, slot(wc.wr_id))?;
        }
        qp.wait_disconnected(T)
    });

    let mut copts = ConnectOptions::new(&cpd, &ccq);
    copts.rq_depth = 1024;
    copts.sq_depth = 1024;
    let qp = client.connect(addr, &copts)?;
    for i in 0..CLIENT_RECVS {
        qp.post_recv(i, small.sge(i * slot_len as u64, slot_len as u32))?;
    }
    tx.send(cbuf.clone()).map_err(|_| Error::Stopped)?;
    Ok(Pair {
        qp,
        cq: ccq,
        buf: cbuf,
        small,
        slot_len: slot_len as u32,
        remote: sremote,
        server: Some(h),
        done,
    })
}

impl Pair {
    fn repost(&self, wc: &Wc) -> Result<(), Error> {
        self.qp.post_recv(
            wc.wr_id,
            self.small
                .sge(wc.wr_id * u64::from(self.slot_len), self.slot_len),
        )
    }

    /// Ping-pong (or one Read) per iteration, `plan.iters` times or until
    /// `plan.duration`. Values are RTT/2 for send/write, RTT for read; with
    /// `plan.rate` each is measured from its scheduled start instead.
    pub fn latency(&self, test: Test, size: u32, plan: &Plan) -> Result<LatRun, Error> {
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
            match test {
                Test::SendLat => send(&self.qp, i, &self.buf, size)?,
                Test::WriteLat => {
                    write(&self.qp, i, &self.buf, size, &self.remote)?;
                    send(&self.qp, i, &self.buf, 0)?;
                }
                Test::ReadLat => self.qp.post_send(WorkRequest::Read {
                    wr_id: i,
                    signaled: true,
                    local: self.buf.sge(0, size).into(),
                    remote_stag: self.remote.stag(),
                    remote_to: 0,
                })?,
                _ => unreachable!("not a latency test"),
            }
            let want = if test == Test::ReadLat {
                WcOpcode::Read
            } else {
                WcOpcode::Recv
            };
            loop {
                let wc = poll(&self.cq, plan.busy)?;
                if !wc.status.is_ok() {
                    return Err(fail("client", &wc));
                }
                if wc.opcode == Some(WcOpcode::Recv) {
                    self.repost(&wc)?;
                }
                if wc.opcode == Some(want) {
                    break;
                }
            }
            let ns = t0.elapsed().as_nanos() as u64;
            let half = test != Test::ReadLat && interval.is_none();
            run.record(if half { ns / 2 } else { ns });
            i += 1;
            crate::progress(i, plan);
        }
        Ok(run)
    }

    /// Keep `window` operations outstanding; see the module comment.
    pub fn bandwidth(&self, test: Test, size: u32, plan: &Plan) -> Result<BwResult, Error> {
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
                    Test::WriteBw => write(&self.qp, posted, &self.buf, size, &self.remote)?,
                    Test::SendBw => send(&self.qp, posted, &self.buf, size.max(1))?,
                    Test::ReadBw => self.qp.post_send(WorkRequest::Read {
                        wr_id: posted,
                        signaled: true,
                        local: self.buf.sge(0, size).into(),
                        remote_stag: self.remote.stag(),
                        remote_to: 0,
                    })?,
                    _ => unreachable!("not a bandwidth test"),
                }
                posted += 1;
                outstanding += 1;
                credits = credits.saturating_sub(u64::from(test == Test::SendBw));
            }
            let wc = poll(&self.cq, plan.busy)?;
            if !wc.status.is_ok() {
                return Err(fail("client", &wc));
            }
            if wc.opcode == Some(WcOpcode::Recv) {
                credits += CREDIT_BATCH;
                self.repost(&wc)?;
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
            let wc = poll(&self.cq, plan.busy)?;
            if !wc.status.is_ok() {
                return Err(fail("client", &wc));
            }
            if wc.opcode == Some(WcOpcode::Recv) {
                self.repost(&wc)?;
                if wc.byte_len == 0 {
                    break;
                }
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
        let r = self.qp.wait_disconnected(T);
        if let Some(h) = self.server.take() {
            h.join().map_err(|_| Error::Stopped)??;
        }
        r
    }
}
