//! The baseline: Linux TCP sockets in the same two namespaces, over the same
//! veth pair (kernel addresses on its ends), same sizes and counts.
//!
//! How each side waits ([`Wait`]): like for like with ours. `Spin`:
//! non-blocking sockets, each call retried at once on `EAGAIN` (the thread
//! never sleeps, as a busy loop never does and an in-loop test spins
//! between messages); `Block`:
//! blocking sockets (the thread sleeps in the kernel until data or room,
//! as our application threads sleep on the CQ).
//!
//! What is timed (client thread, TCP_NODELAY):
//! - `send_lat`/`write_lat`: write SIZE, the server reads SIZE and writes
//!   SIZE back, read SIZE; recorded RTT/2 (a TCP ping-pong stands in for
//!   both: the kernel has no one-sided Write).
//! - `read_lat`: write an 8-octet request, read the SIZE answer; full RTT.
//! - `write_bw`/`send_bw`: ITERS writes of SIZE, shutdown, wait for the
//!   server's 1-octet "all received". `read_bw`: an 8-octet request, then
//!   read ITERS × SIZE that the server writes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::{BwResult, LatRun, Plan, Test};

type Res<T> = Result<T, String>;

fn io<T>(r: std::io::Result<T>, what: &str) -> Res<T> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// How the baseline's two threads wait for the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wait {
    /// Non-blocking sockets, retried at once on `EAGAIN`.
    Spin,
    /// Blocking sockets.
    Block,
}

impl Wait {
    /// How it reads in the output.
    pub fn label(self) -> &'static str {
        match self {
            Wait::Spin => "spinning (non-blocking sockets, retried on EAGAIN)",
            Wait::Block => "blocking (the thread sleeps in read/write)",
        }
    }

    /// One word, for the JSON.
    pub fn word(self) -> &'static str {
        match self {
            Wait::Spin => "spin",
            Wait::Block => "block",
        }
    }

    /// Its name in plots.
    pub fn plot_label(self) -> &'static str {
        match self {
            Wait::Spin => "Linux TCP, spinning",
            Wait::Block => "Linux TCP, blocking",
        }
    }
}

/// A TCP stream that waits as [`Wait`] says.
struct Sock {
    s: TcpStream,
    wait: Wait,
    /// A read or write that made no progress for this long fails.
    limit: Duration,
}

impl Sock {
    fn new(s: TcpStream, wait: Wait) -> Res<Sock> {
        io(s.set_nodelay(true), "nodelay")?;
        let limit = Duration::from_secs(30);
        match wait {
            Wait::Spin => io(s.set_nonblocking(true), "nonblocking")?,
            Wait::Block => io(s.set_read_timeout(Some(limit)), "timeout")?,
        }
        Ok(Sock { s, wait, limit })
    }

    /// Retry `op` while it would block (spinning), for at most `limit`
    /// without progress.
    fn retry<T>(
        &mut self,
        mut op: impl FnMut(&mut TcpStream) -> std::io::Result<T>,
    ) -> std::io::Result<T> {
        let mut since: Option<Instant> = None;
        loop {
            match op(&mut self.s) {
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock && self.wait == Wait::Spin => {
                    let t = *since.get_or_insert_with(Instant::now);
                    if t.elapsed() > self.limit {
                        return Err(std::io::Error::new(
                            std::io::ErrorKind::TimedOut,
                            "no progress in 30 s",
                        ));
                    }
                    std::hint::spin_loop();
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => return r,
            }
        }
    }

    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.retry(|s| s.read(buf))
    }

    fn read_exact(&mut self, mut buf: &mut [u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.read(buf)? {
                0 => return Err(std::io::ErrorKind::UnexpectedEof.into()),
                n => buf = &mut buf[n..],
            }
        }
        Ok(())
    }

    fn write_all(&mut self, mut buf: &[u8]) -> std::io::Result<()> {
        while !buf.is_empty() {
            match self.retry(|s| s.write(buf))? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => buf = &buf[n..],
            }
        }
        Ok(())
    }

    fn shutdown(&self, how: Shutdown) -> std::io::Result<()> {
        self.s.shutdown(how)
    }
}

/// Run `serve` on a connection accepted in `ns` while `client` runs in
/// `cns`; returns the client's result.
fn session<C: Send>(
    ns: PathBuf,
    cns: PathBuf,
    addr: SocketAddrV4,
    cores: (usize, usize),
    wait: Wait,
    serve: impl FnOnce(Sock) -> Res<()> + Send + 'static,
    client: impl FnOnce(Sock) -> Res<C> + Send,
) -> Res<C> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let h = std::thread::spawn(move || -> Res<()> {
        iwarp_xdp::in_netns(&ns, move || -> Res<()> {
            pin(cores.0)?;
            let l = io(TcpListener::bind(addr), "bind")?;
            let _ = ready_tx.send(());
            let (s, _) = io(l.accept(), "accept")?;
            serve(Sock::new(s, wait)?)
        })
        .map_err(|e| format!("enter namespace: {e}"))?
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .map_err(|_| "server not ready".to_string())?;
    let r = iwarp_xdp::in_netns(&cns, move || -> Res<C> {
        pin(cores.1)?;
        let s = io(TcpStream::connect(addr), "connect")?;
        client(Sock::new(s, wait)?)
    })
    .map_err(|e| format!("enter namespace: {e}"))?;
    h.join().map_err(|_| "server panicked".to_string())??;
    r
}

/// Pin the calling thread to `core`, as our poll loops are.
fn pin(core: usize) -> Res<()> {
    if core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        Ok(())
    } else {
        Err(format!("could not pin a baseline thread to CPU {core}"))
    }
}

pub struct Where {
    pub server_ns: PathBuf,
    pub client_ns: PathBuf,
    pub addr: SocketAddrV4,
    /// CPUs of the server's and the client's socket thread.
    pub cores: (usize, usize),
    /// How both threads wait.
    pub wait: Wait,
}

pub fn latency(w: &Where, test: Test, size: u32, plan: &Plan, iters: u64) -> Res<LatRun> {
    let size = size as usize;
    let req = if test == Test::ReadLat { 8 } else { size };
    let plan = plan.clone();
    session(
        w.server_ns.clone(),
        w.client_ns.clone(),
        w.addr,
        w.cores,
        w.wait,
        move |mut s| {
            let (mut a, b) = (vec![0u8; req], vec![0x5au8; size]);
            for _ in 0..iters {
                if s.read_exact(&mut a).is_err() {
                    break;
                }
                io(s.write_all(&b), "echo")?;
            }
            Ok(())
        },
        move |mut s| {
            let (a, mut b) = (vec![0xa5u8; req], vec![0u8; size]);
            let mut run = LatRun::new();
            let interval = plan.rate.map(|r| Duration::from_secs_f64(1.0 / r));
            let start = Instant::now();
            for i in 0..iters {
                if start.elapsed() >= plan.duration {
                    break; // --duration; dropping the socket ends the echo side
                }
                let t0 = match interval {
                    Some(iv) => {
                        let due = start + iv * i as u32;
                        crate::wait_until(due);
                        due
                    }
                    None => Instant::now(),
                };
                io(s.write_all(&a), "write")?;
                io(s.read_exact(&mut b), "read")?;
                let ns = t0.elapsed().as_nanos() as u64;
                let half = test != Test::ReadLat && interval.is_none();
                run.record(if half { ns / 2 } else { ns });
                crate::progress(i + 1, &plan);
            }
            Ok(run)
        },
    )
}

pub fn bandwidth(w: &Where, test: Test, size: u32, plan: &Plan, iters: u64) -> Res<BwResult> {
    let len = size as usize;
    let window = plan.window;
    let plan = plan.clone();
    let cpu0 = crate::cpu_time();
    let read = test == Test::ReadBw;
    let (secs, stamps, start) = session(
        w.server_ns.clone(),
        w.client_ns.clone(),
        w.addr,
        w.cores,
        w.wait,
        move |mut s| {
            let mut buf = vec![0x5au8; len.max(1 << 16)];
            if read {
                let mut r = [0u8; 8];
                io(s.read_exact(&mut r), "request")?;
                for _ in 0..u64::from_le_bytes(r) {
                    match s.write_all(&buf[..len]) {
                        Ok(()) => {}
                        // --duration: the reader stops when time is up and
                        // closes its socket.
                        Err(e)
                            if matches!(
                                e.kind(),
                                std::io::ErrorKind::BrokenPipe
                                    | std::io::ErrorKind::ConnectionReset
                            ) =>
                        {
                            break
                        }
                        Err(e) => return Err(format!("write: {e}")),
                    }
                }
            } else {
                loop {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(_) => {}
                        Err(e) => return Err(format!("sink: {e}")),
                    }
                }
                io(s.write_all(&[1]), "ack")?;
            }
            Ok(())
        },
        move |mut s| {
            let mut buf = vec![0xa5u8; len];
            let mut stamps = Vec::with_capacity(iters.min(1 << 22) as usize);
            let start = Instant::now();
            if read {
                io(s.write_all(&iters.to_le_bytes()), "request")?;
                for i in 0..iters {
                    if start.elapsed() >= plan.duration {
                        break;
                    }
                    io(s.read_exact(&mut buf), "read")?;
                    stamps.push(Instant::now());
                    crate::progress(i + 1, &plan);
                }
            } else {
                for i in 0..iters {
                    if start.elapsed() >= plan.duration {
                        break;
                    }
                    io(s.write_all(&buf), "write")?;
                    stamps.push(Instant::now());
                    crate::progress(i + 1, &plan);
                }
                io(s.shutdown(Shutdown::Write), "shutdown")?;
                let mut a = [0u8; 1];
                io(s.read_exact(&mut a), "ack")?;
            }
            Ok((start.elapsed().as_secs_f64(), stamps, start))
        },
    )?;
    let cpu = crate::cpu_time() - cpu0;
    // With --duration the run ends early: count what was done.
    let done = stamps.len() as u64;
    Ok(BwResult::new(size, done, secs, &stamps, start, window, cpu))
}

/// Linux TCP over the loopback interface with `flows` parallel
/// connections (the `--queues` baseline of the simulated link, which
/// needs no root): each flow a server thread reading to the end and a
/// client thread writing `iters` messages of `size` octets, then
/// shutting down and waiting for the server's 1-octet "all received".
/// Returns the messages written in all and the seconds from the first
/// start to the last "all received". The kernel spreads the threads over
/// the CPUs itself (nothing pinned).
pub fn loopback_flows(
    flows: usize,
    size: u32,
    iters: u64,
    wait: Wait,
    cores: Option<&[usize]>,
) -> Res<(u64, f64)> {
    let len = size as usize;
    let mut servers = Vec::with_capacity(flows);
    let mut addrs = Vec::with_capacity(flows);
    // With `cores` (the server's loops' CPUs, then the client's, as many
    // of each), flow i's server thread runs on the CPU of the server's
    // loop i mod N, its client thread on the client's.
    let core_of = |i: usize, server: bool| {
        cores.map(|c| {
            let n = c.len() / 2;
            c[if server { i % n } else { n + i % n }]
        })
    };
    for i in 0..flows {
        let l = io(TcpListener::bind("127.0.0.1:0"), "bind")?;
        addrs.push(io(l.local_addr(), "local address")?);
        let core = core_of(i, true);
        servers.push(std::thread::spawn(move || -> Res<()> {
            if let Some(c) = core {
                pin(c)?;
            }
            let (s, _) = io(l.accept(), "accept")?;
            let mut s = Sock::new(s, wait)?;
            let mut buf = vec![0u8; len.max(1 << 16)];
            loop {
                match s.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) => return Err(format!("sink: {e}")),
                }
            }
            io(s.write_all(&[1]), "ack")
        }));
    }
    let start = Instant::now();
    let clients: Vec<_> = addrs
        .into_iter()
        .enumerate()
        .map(|(i, a)| {
            let core = core_of(i, false);
            std::thread::spawn(move || -> Res<u64> {
                if let Some(c) = core {
                    pin(c)?;
                }
                let mut s = Sock::new(io(TcpStream::connect(a), "connect")?, wait)?;
                let buf = vec![0xa5u8; len];
                for _ in 0..iters {
                    io(s.write_all(&buf), "write")?;
                }
                io(s.shutdown(Shutdown::Write), "shutdown")?;
                let mut a = [0u8; 1];
                io(s.read_exact(&mut a), "ack")?;
                Ok(iters)
            })
        })
        .collect();
    let mut done = 0;
    for c in clients {
        done += c.join().map_err(|_| "client panicked".to_string())??;
    }
    let secs = start.elapsed().as_secs_f64();
    for h in servers {
        h.join().map_err(|_| "server panicked".to_string())??;
    }
    Ok((done, secs))
}
