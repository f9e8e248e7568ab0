//! perftest compatibility: our stack as the client or the server of
//! rdma-core's perftest tools (`ib_{write,read,send}_{lat,bw} -R`), speaking
//! their rdma_cm connection and buffer-exchange protocol.
//!
//! What goes on the wire is written down, with the captures and sources it
//! was taken from, in `interop/PERFTEST.md`; the section numbers below (§)
//! refer to it. In short:
//!
//! - Two connections to the same port, both opened by the client: C1, the
//!   "comm" channel (MPA IRD/ORD 0/0), carries lock-step Sends of at most
//!   56 octets, client first, each answered with one of the same length
//!   (§2); C2 carries the test (IRD/ORD = out_reads for Read tests, else
//!   0/0) (§1).
//! - On C1: version "6.06", page size, cache line, MTU, a zero sync, then
//!   (after C2 is up) a zero sync and the test's `pingpong_dest` messages,
//!   big-endian, whose `rkey`/`vaddr` name the peer's buffer (§2.3, §2.4, §3).
//! - The test itself on C2 (§4), then the closing messages and FINs (§5).
//!
//! Our side of a Write or Read targets the peer's `vaddr` exactly as
//! perftest does; the `vaddr` we advertise is a tagged offset into our own
//! region (our regions are zero-based), which perftest only ever adds to.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, Error, InlineData, ListenOptions, Listener,
    Mr, Qp, STag, Status, Wc, WcOpcode, WorkRequest,
};

/// The version we announce (perftest 4.5-0.17 in Debian 12 sends "6.06";
/// perftest refuses peers older than 5.70).
pub const VERSION: &str = "6.06";
/// perftest's default port.
pub const DEFAULT_PORT: u16 = 18515;
/// `sizeof(struct pingpong_dest)`: the comm channel's receive size.
pub const DEST_LEN: usize = 56;
/// The page size we announce (perftest's `cycle_buffer`).
pub const CYCLE_BUFFER: u64 = 4096;
/// The cache line we announce.
pub const CACHE_LINE: u64 = 64;
/// perftest's minimum iteration count.
pub const MIN_ITERS: u64 = 5;
/// Largest size of `-a` (2^23).
pub const MAX_ALL_SIZE: u32 = 1 << 23;
/// Outstanding Reads we offer by default (siw's `max_qp_rd_atom`).
pub const DEFAULT_OUT_READS: u16 = 128;

/// One of the six perftest tools.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `ib_write_lat`
    WriteLat,
    /// `ib_read_lat`
    ReadLat,
    /// `ib_send_lat`
    SendLat,
    /// `ib_write_bw`
    WriteBw,
    /// `ib_read_bw`
    ReadBw,
    /// `ib_send_bw`
    SendBw,
}

impl Kind {
    /// From `write_lat`, `ib_write_lat`, ...
    pub fn parse(s: &str) -> Option<Kind> {
        Some(match s.strip_prefix("ib_").unwrap_or(s) {
            "write_lat" => Kind::WriteLat,
            "read_lat" => Kind::ReadLat,
            "send_lat" => Kind::SendLat,
            "write_bw" => Kind::WriteBw,
            "read_bw" => Kind::ReadBw,
            "send_bw" => Kind::SendBw,
            _ => return None,
        })
    }

    /// `write_lat`, ...
    pub fn name(self) -> &'static str {
        match self {
            Kind::WriteLat => "write_lat",
            Kind::ReadLat => "read_lat",
            Kind::SendLat => "send_lat",
            Kind::WriteBw => "write_bw",
            Kind::ReadBw => "read_bw",
            Kind::SendBw => "send_bw",
        }
    }

    /// A latency test.
    pub fn is_lat(self) -> bool {
        matches!(self, Kind::WriteLat | Kind::ReadLat | Kind::SendLat)
    }

    fn is_read(self) -> bool {
        matches!(self, Kind::ReadLat | Kind::ReadBw)
    }

    fn title(self) -> &'static str {
        match self {
            Kind::WriteLat => "RDMA_Write Latency Test",
            Kind::ReadLat => "RDMA_Read Latency Test",
            Kind::SendLat => "Send Latency Test",
            Kind::WriteBw => "RDMA_Write BW Test",
            Kind::ReadBw => "RDMA_Read BW Test",
            Kind::SendBw => "Send BW Test",
        }
    }

    /// Comm messages between the sync after C2 and the test (§3): the
    /// test's `pingpong_dest` exchanges. For send_lat the last one is sent
    /// per size, after the receives are posted.
    fn pre_test_dests(self) -> u32 {
        match self {
            Kind::WriteLat | Kind::ReadLat | Kind::SendBw => 4,
            Kind::SendLat => 3,
            Kind::WriteBw | Kind::ReadBw => 3,
        }
    }
}

/// A perftest command line, as our stack runs it.
#[derive(Debug, Clone)]
pub struct Options {
    /// Which tool.
    pub kind: Kind,
    /// The server's address: we are the client. `None`: we are the server.
    pub server: Option<Ipv4Addr>,
    /// `-p`: port of both connections.
    pub port: u16,
    /// `-s`: message size (perftest's default: 2 for latency, 65536 for
    /// bandwidth).
    pub size: u32,
    /// `-a`: sizes 2, 4, ..., 2^23.
    pub all: bool,
    /// `-n`: iterations (default 1000; 5000 for write_bw).
    pub iters: u64,
    /// `-t`: outstanding work requests (1 for latency, 128 for bandwidth).
    pub tx_depth: u32,
    /// `-r`: receives kept posted in send tests (512, at most `iters`).
    pub rx_depth: u32,
    /// `-o`: outstanding Reads (the MPA IRD/ORD of C2 in Read tests).
    pub out_reads: u16,
    /// `--report_gbits`: bandwidth in Gb/s instead of MiB/s.
    pub report_gbits: bool,
    /// How long one protocol step may take (a connect, a comm message, a
    /// completion).
    pub step_timeout: Duration,
    /// How long the server waits for the client to finish a bandwidth test.
    pub run_timeout: Duration,
    /// MPA CRC (our default: on; siw follows the initiator's choice).
    pub crc: bool,
    /// Busy-poll the completion queue instead of spin-then-sleep.
    pub busy: bool,
}

impl Options {
    /// perftest's defaults for `kind`, server role.
    pub fn new(kind: Kind) -> Options {
        Options {
            kind,
            server: None,
            port: DEFAULT_PORT,
            size: if kind.is_lat() { 2 } else { 65536 },
            all: false,
            iters: if kind == Kind::WriteBw { 5000 } else { 1000 },
            tx_depth: if kind.is_lat() { 1 } else { 128 },
            rx_depth: 512,
            out_reads: DEFAULT_OUT_READS,
            report_gbits: false,
            step_timeout: Duration::from_secs(30),
            run_timeout: Duration::from_secs(3600),
            crc: true,
            busy: false,
        }
    }

    /// The sizes this run covers.
    pub fn sizes(&self) -> Vec<u32> {
        if self.all {
            (1..=23).map(|i| 1u32 << i).collect()
        } else {
            vec![self.size]
        }
    }

    fn rx_depth(&self) -> u64 {
        u64::from(self.rx_depth).min(self.iters).max(1)
    }

    fn tx_depth(&self) -> u64 {
        u64::from(self.tx_depth).min(self.iters).max(1)
    }

    /// `BUFF_SIZE`: each half of the test buffer (§2.4).
    fn half(&self) -> u64 {
        let largest = if self.all { MAX_ALL_SIZE } else { self.size };
        u64::from(largest).max(CYCLE_BUFFER)
    }

    /// Check the combination (perftest's own limits, and what we support).
    pub fn validate(&self) -> Result<(), String> {
        if self.iters < MIN_ITERS {
            return Err(format!(
                "-n {}: perftest needs at least {MIN_ITERS} iterations",
                self.iters
            ));
        }
        if self.size == 0 {
            return Err("-s 0: perftest sizes start at 1".into());
        }
        if self.all && self.kind == Kind::SendBw {
            return Err(
                "send_bw -a is not supported (its per-size handshakes were never captured)".into(),
            );
        }
        if self.kind.is_read() && self.out_reads == 0 {
            return Err("-o 0: a Read test needs at least one outstanding Read".into());
        }
        Ok(())
    }
}

/// perftest's `struct pingpong_dest` (§2.4), all integers big-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Dest {
    /// Outstanding Reads (print only).
    pub out_reads: u32,
    /// Queue pair number (print only).
    pub qpn: u32,
    /// Packet sequence number (print only; 24 bits).
    pub psn: u32,
    /// The STag the peer's Writes and Reads use.
    pub rkey: u32,
    /// The tagged offset they start at.
    pub vaddr: u64,
}

impl Dest {
    /// The 56 octets on the wire; the GID, SRQ number and GID index are 0.
    pub fn encode(&self) -> [u8; DEST_LEN] {
        let mut b = [0u8; DEST_LEN];
        b[4..8].copy_from_slice(&self.out_reads.to_be_bytes());
        b[8..12].copy_from_slice(&self.qpn.to_be_bytes());
        b[12..16].copy_from_slice(&self.psn.to_be_bytes());
        b[16..20].copy_from_slice(&self.rkey.to_be_bytes());
        b[24..32].copy_from_slice(&self.vaddr.to_be_bytes());
        b
    }

    /// Read one; padding, GID, SRQ number and GID index are ignored (perftest
    /// leaves its struct padding uninitialised).
    pub fn decode(b: &[u8]) -> Option<Dest> {
        if b.len() != DEST_LEN {
            return None;
        }
        let u32_at = |o: usize| u32::from_be_bytes([b[o], b[o + 1], b[o + 2], b[o + 3]]);
        let mut v = [0u8; 8];
        v.copy_from_slice(&b[24..32]);
        Some(Dest {
            out_reads: u32_at(4),
            qpn: u32_at(8),
            psn: u32_at(12),
            rkey: u32_at(16),
            vaddr: u64::from_be_bytes(v),
        })
    }

    fn line(&self, who: &str) -> String {
        format!(
            " {who} address: LID 0000 QPN {:#06x} PSN {:#08x} RKey {:#010x} VAddr {:#016x}",
            self.qpn, self.psn, self.rkey, self.vaddr
        )
    }
}

/// The version message: ASCII, NUL padded to 16 octets.
pub fn version_msg() -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..VERSION.len()].copy_from_slice(VERSION.as_bytes());
    b
}

/// The peer's version from its message (up to the first NUL).
pub fn parse_version(b: &[u8]) -> String {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

/// A latency result as perftest computes it (§6): `iters − 1` gaps between
/// consecutive posts, sorted, the two largest dropped, divided by 2 for
/// write_lat and send_lat (perftest reports half the round trip) and by 1
/// for read_lat. Times in microseconds.
#[derive(Debug, Clone, PartialEq)]
pub struct LatReport {
    /// Message size.
    pub bytes: u32,
    /// Iterations.
    pub iters: u64,
    /// Smallest gap.
    pub t_min: f64,
    /// perftest's t_max: the gap just above the kept ones (`delta[n]`, the
    /// second largest of all).
    pub t_max: f64,
    /// Median of the kept gaps.
    pub t_typical: f64,
    /// Mean of the kept gaps.
    pub t_avg: f64,
    /// Standard deviation of the kept gaps.
    pub t_stdev: f64,
    /// Gap at index ceil(0.99 n).
    pub p99: f64,
    /// Gap at index ceil(0.999 n).
    pub p999: f64,
}

/// Samples perftest drops from the top (`LAT_MEASURE_TAIL`).
const LAT_MEASURE_TAIL: usize = 2;

impl LatReport {
    /// From the post times of one side (at least [`MIN_ITERS`] of them).
    pub fn from_posts(bytes: u32, posts: &[Instant], divisor: f64) -> Option<LatReport> {
        if posts.len() < MIN_ITERS as usize {
            return None;
        }
        let mut d: Vec<f64> = posts
            .windows(2)
            .map(|w| w[1].duration_since(w[0]).as_secs_f64() * 1e6 / divisor)
            .collect();
        d.sort_by(f64::total_cmp);
        let n = d.len() - LAT_MEASURE_TAIL;
        let kept = &d[..n];
        let avg = kept.iter().sum::<f64>() / n as f64;
        let var = kept.iter().map(|x| (x - avg) * (x - avg)).sum::<f64>() / n as f64;
        let median = if n.is_multiple_of(2) {
            (d[n / 2 - 1] + d[n / 2]) / 2.0
        } else {
            d[n / 2]
        };
        let at = |q: f64| d[((n as f64 * q).ceil() as usize).min(d.len() - 1)];
        Some(LatReport {
            bytes,
            iters: posts.len() as u64,
            t_min: d[0],
            t_max: d[n],
            t_typical: median,
            t_avg: avg,
            t_stdev: var.sqrt(),
            p99: at(0.99),
            p999: at(0.999),
        })
    }

    /// perftest's header line.
    pub const HEADER: &'static str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec] ";

    /// perftest's row (`RESULT_FMT_LAT` with its tabs).
    pub fn row(&self) -> String {
        format!(
            " {:<7} {}          {:<7.2}        {:<7.2}      {:<7.2}  \t       {:<7.2}     \t{:<7.2}\t\t{:<7.2} \t\t{:<7.2}",
            self.bytes,
            self.iters,
            self.t_min,
            self.t_max,
            self.t_typical,
            self.t_avg,
            self.t_stdev,
            self.p99,
            self.p999
        )
    }
}

/// A bandwidth result (§2.5, §6): what the client sends the server in the
/// R messages and both print.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BwReport {
    /// Message size.
    pub size: u64,
    /// Iterations.
    pub iters: u64,
    /// Peak, MiB/s.
    pub bw_peak: f64,
    /// Average, MiB/s.
    pub bw_avg: f64,
    /// Messages per second / 10^6.
    pub msg_rate: f64,
}

/// Posts whose peak rate is searched exhaustively (the search is quadratic).
const PEAK_WINDOW: usize = 20_000;

impl BwReport {
    /// perftest's computation: average = size·iters / (last completion −
    /// first post); peak = size / the smallest (completion j − post i) /
    /// (j − i + 1) over i ≤ j, searched over the first 20 000 operations.
    pub fn compute(size: u64, posted: &[Instant], completed: &[Instant]) -> BwReport {
        let iters = completed.len() as u64;
        let secs = match (posted.first(), completed.last()) {
            (Some(a), Some(b)) => b.duration_since(*a).as_secs_f64(),
            _ => 0.0,
        };
        let mib = 1_048_576.0;
        let (bw_avg, msg_rate) = if secs > 0.0 {
            (
                (size * iters) as f64 / secs / mib,
                iters as f64 / secs / 1e6,
            )
        } else {
            (0.0, 0.0)
        };
        let n = posted.len().min(completed.len()).min(PEAK_WINDOW);
        let mut best = f64::INFINITY;
        for i in 0..n {
            for (k, c) in completed[i..n].iter().enumerate() {
                let t = c.saturating_duration_since(posted[i]).as_secs_f64() / (k + 1) as f64;
                if t > 0.0 && t < best {
                    best = t;
                }
            }
        }
        let bw_peak = if best.is_finite() {
            size as f64 / best / mib
        } else {
            bw_avg
        };
        BwReport {
            size,
            iters,
            bw_peak,
            bw_avg,
            msg_rate,
        }
    }

    /// perftest's header line.
    pub fn header(gbits: bool) -> &'static str {
        if gbits {
            " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]"
        } else {
            " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]"
        }
    }

    /// perftest's row (`RESULT_FMT`, or `RESULT_FMT_G` in Gb/s).
    pub fn row(&self, gbits: bool) -> String {
        let f = if gbits { 1_048_576.0 * 8.0 / 1e9 } else { 1.0 };
        format!(
            " {:<7}    {:<10}       {:<7.2}            {:<7.2}\t\t   {:<7.6}",
            self.size,
            self.iters,
            self.bw_peak * f,
            self.bw_avg * f,
            self.msg_rate
        )
    }

    /// The five 8-octet R messages, big-endian (§2.5).
    pub fn encode(&self) -> [[u8; 8]; 5] {
        [
            self.size.to_be_bytes(),
            self.iters.to_be_bytes(),
            self.bw_peak.to_be_bytes(),
            self.bw_avg.to_be_bytes(),
            self.msg_rate.to_be_bytes(),
        ]
    }

    /// From the five R messages.
    pub fn decode(m: &[[u8; 8]; 5]) -> BwReport {
        BwReport {
            size: u64::from_be_bytes(m[0]),
            iters: u64::from_be_bytes(m[1]),
            bw_peak: f64::from_be_bytes(m[2]),
            bw_avg: f64::from_be_bytes(m[3]),
            msg_rate: f64::from_be_bytes(m[4]),
        }
    }
}

/// What a run produced (what it printed, as values).
#[derive(Debug, Clone, Default)]
pub struct Outcome {
    /// The peer's version string.
    pub peer_version: String,
    /// Our test queue pair's dest as we sent it.
    pub local: Dest,
    /// The peer's.
    pub remote: Dest,
    /// Latency rows (one per size).
    pub lat: Vec<LatReport>,
    /// Bandwidth rows (ours, or the client's as the server prints them).
    pub bw: Vec<BwReport>,
    /// MPA IRD/ORD of C2 as negotiated.
    pub ird_ord: (u16, u16),
}

fn err(what: &str) -> impl Fn(Error) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Completions of one queue pair, waited for by id.
struct Waiter {
    /// "comm" or "test", for error messages.
    name: &'static str,
    /// The queue pair whose completions count ([`Qp::id`]).
    qp: usize,
    cq: Cq,
    busy: bool,
    step: Duration,
}

impl Waiter {
    /// The next completion of our queue pair. A connect attempt that was
    /// refused leaves its pre-posted receive on the CQ as refused: that
    /// queue pair is gone, so completions of other queue pairs are skipped.
    fn next(&self, timeout: Duration) -> Result<Wc, String> {
        let deadline = Instant::now() + timeout;
        let wc = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wc = if self.busy {
                self.cq.poll_one()
            } else {
                self.cq.wait(left)
            };
            match wc {
                Some(wc) if wc.qp == self.qp => break wc,
                Some(_) => {}
                None if left.is_zero() || !self.busy => {
                    return Err(format!("{}: no completion in {timeout:?}", self.name))
                }
                None => std::hint::spin_loop(),
            }
        };
        if wc.status != Status::Wc(iwarp::WcStatus::Success) {
            return Err(format!(
                "{}: work request {} failed: {:?}",
                self.name, wc.wr_id, wc.status
            ));
        }
        Ok(wc)
    }
}

const COMM_SEND: u64 = 1;
const COMM_RECV: u64 = 2;

/// The comm channel (C1): lock-step Sends, client first (§2.1).
struct Comm {
    qp: Qp,
    w: Waiter,
    send: Mr,
    recv: Mr,
    client: bool,
    /// Messages exchanged so far (for error messages).
    count: u32,
    /// Completions that arrived before they were asked for.
    held: Vec<Wc>,
}

impl Comm {
    /// One exchange: the client sends `msg` and receives the server's
    /// message of the same length; the server the other way round. The
    /// receive is re-posted before our message leaves, so the peer's next
    /// message always finds it. `wait` bounds the wait for the peer.
    fn exchange_within(&mut self, msg: &[u8], wait: Duration) -> Result<Vec<u8>, String> {
        self.count += 1;
        let n = self.count;
        if self.client {
            self.send_msg(msg)?;
            self.recv_msg(msg.len(), wait)
        } else {
            let got = self.recv_msg(msg.len(), wait)?;
            self.send_msg(msg)?;
            Ok(got)
        }
        .map_err(|e| format!("comm message {n}: {e}"))
    }

    fn exchange(&mut self, msg: &[u8]) -> Result<Vec<u8>, String> {
        let step = self.w.step;
        self.exchange_within(msg, step)
    }

    fn send_msg(&mut self, msg: &[u8]) -> Result<(), String> {
        self.send.write(0, msg).map_err(err("comm buffer"))?;
        self.qp
            .post_send(WorkRequest::Send {
                wr_id: COMM_SEND,
                signaled: true,
                local: self.send.sge(0, msg.len() as u32).into(),
                solicited: false,
                invalidate: None,
            })
            .map_err(err("post comm Send"))?;
        // The receive of the peer's answer may complete first (client).
        self.expect(COMM_SEND).map(|_| ())
    }

    fn recv_msg(&mut self, len: usize, wait: Duration) -> Result<Vec<u8>, String> {
        let wc = self.expect_within(COMM_RECV, wait)?;
        if wc.byte_len as usize != len {
            return Err(format!(
                "peer sent {} octets where perftest sends {len} (a different test or version on the other side?)",
                wc.byte_len
            ));
        }
        let got = self.recv.read(0, len).map_err(err("comm buffer"))?;
        self.qp
            .post_recv(COMM_RECV, self.recv.sge(0, DEST_LEN as u32))
            .map_err(err("re-post comm receive"))?;
        Ok(got)
    }

    fn expect(&mut self, id: u64) -> Result<Wc, String> {
        let step = self.w.step;
        self.expect_within(id, step)
    }

    /// C1 carries one Send and one receive at a time; a completion of the
    /// other kind is held until asked for.
    fn expect_within(&mut self, id: u64, wait: Duration) -> Result<Wc, String> {
        if let Some(i) = self.held.iter().position(|w| w.wr_id == id) {
            return Ok(self.held.remove(i));
        }
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let wc = self.w.next(left)?;
            if wc.wr_id == id {
                return Ok(wc);
            }
            self.held.push(wc);
        }
    }

    fn dest(&mut self, d: &Dest) -> Result<Dest, String> {
        let got = self.exchange(&d.encode())?;
        Dest::decode(&got).ok_or_else(|| "short pingpong_dest".into())
    }

    fn sync(&mut self) -> Result<(), String> {
        self.dest(&Dest::default()).map(|_| ())
    }
}

/// The test connection (C2) and its buffers.
struct Test {
    qp: Qp,
    w: Waiter,
    /// `2 × BUFF_SIZE`: we send from the first half, the peer targets the
    /// second (at `vaddr` = BUFF_SIZE).
    buf: Mr,
    half: u64,
    /// send_bw's credit word: the peer's receive count, little-endian, at
    /// offset 4 (where our msg-7 dest points).
    credit: Mr,
    /// The context's loop thread shares our one CPU
    /// ([`iwarp::Context::shares_cpu`]).
    shares_cpu: bool,
}

const CREDIT_OFF: u64 = 4;

/// How long the peer gets to retire its last work request before our FIN.
const TEARDOWN_GRACE: Duration = Duration::from_millis(100);

fn connect_retry(
    ctx: &Context,
    to: SocketAddrV4,
    o: &ConnectOptions,
    step: Duration,
) -> Result<Qp, String> {
    // perftest's server re-listens for C2 only after the sync before it,
    // and its client retries refused connects (§1): so do we.
    let deadline = Instant::now() + step;
    loop {
        match ctx.connect(to, o) {
            Ok(qp) => return Ok(qp),
            Err(Error::ConnectionRefused) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => return Err(format!("connect to {to}: {e}")),
        }
    }
}

fn psn() -> u32 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    (t ^ (t >> 7)) & 0x00ff_ffff
}

/// Run `o` on `ctx`, printing perftest's output to stdout. The server
/// side listens for exactly one run.
pub fn run(ctx: &Context, o: &Options) -> Result<Outcome, String> {
    o.validate()?;
    let pd = ctx.alloc_pd().map_err(err("protection domain"))?;
    let comm_cq = ctx.create_cq(16);
    let test_cq = ctx.create_cq(4096);
    let depth = (o.rx_depth().max(o.tx_depth()) as usize + 16).max(64);
    let mut out = Outcome::default();
    let comm_send = pd
        .register(vec![0; DEST_LEN], Access::LOCAL_READ)
        .map_err(err("register"))?;
    let comm_recv = pd
        .register(vec![0; DEST_LEN], Access::LOCAL_WRITE)
        .map_err(err("register"))?;
    // perftest's peers are Linux siw (the interop lab): its profile, with
    // the hold on our first FPDU as initiator.
    let mut mpa = iwarp::siw_mpa();
    mpa.crc = o.crc;
    // C2's IRD/ORD: out_reads for Read tests, 0/0 otherwise (§1).
    let c2_rd = if o.kind.is_read() { o.out_reads } else { 0 };
    let comm_waiter = |cq: &Cq, qp: &Qp| Waiter {
        name: "comm",
        qp: qp.id(),
        cq: cq.clone(),
        busy: false,
        step: o.step_timeout,
    };

    let listener: Option<Listener>;
    let (mut comm, test_qp) = match o.server {
        Some(server) => {
            listener = None;
            let to = SocketAddrV4::new(server, o.port);
            let mut co = ConnectOptions::new(&pd, &comm_cq);
            co.mpa = mpa.clone();
            co.mpa.ird = 0;
            co.mpa.ord = 0;
            co.timeout = o.step_timeout;
            co.sq_depth = depth;
            co.rq_depth = depth;
            co.recvs = vec![(COMM_RECV, comm_recv.sge(0, DEST_LEN as u32).into())];
            let c1 = connect_retry(ctx, to, &co, o.step_timeout)?;
            let w = comm_waiter(&comm_cq, &c1);
            let mut comm = Comm {
                qp: c1,
                w,
                send: comm_send,
                recv: comm_recv,
                client: true,
                count: 0,
                held: Vec::new(),
            };
            out.peer_version = prefix(&mut comm)?;
            let mut co2 = ConnectOptions::new(&pd, &test_cq);
            co2.mpa = mpa;
            co2.mpa.ird = c2_rd;
            co2.mpa.ord = c2_rd;
            co2.timeout = o.step_timeout;
            co2.sq_depth = depth;
            co2.rq_depth = depth;
            let c2 = connect_retry(ctx, to, &co2, o.step_timeout)?;
            comm.sync()?;
            (comm, c2)
        }
        None => {
            let mut lo = ListenOptions::new(&pd);
            lo.mpa = mpa;
            lo.sq_depth = depth;
            lo.rq_depth = depth;
            let l = ctx.listen(o.port, &lo).map_err(err("listen"))?;
            println!(
                "\n************************************\n* Waiting for client to connect... *\n************************************"
            );
            let req = l.get_request(o.run_timeout).map_err(err("C1 request"))?;
            req.post_recv(COMM_RECV, comm_recv.sge(0, DEST_LEN as u32))
                .map_err(err("C1 receive"))?;
            let c1 = req
                .accept(
                    &AcceptOptions {
                        ird: 0,
                        ord: 0,
                        timeout: o.step_timeout,
                        ..AcceptOptions::default()
                    },
                    &comm_cq,
                )
                .map_err(err("accept C1"))?;
            let w = comm_waiter(&comm_cq, &c1);
            let mut comm = Comm {
                qp: c1,
                w,
                send: comm_send,
                recv: comm_recv,
                client: false,
                count: 0,
                held: Vec::new(),
            };
            out.peer_version = prefix(&mut comm)?;
            let req = l.get_request(o.step_timeout).map_err(err("C2 request"))?;
            // Reply IRD/ORD no higher than asked (§1): the stack caps ours
            // by the peer's.
            let c2 = req
                .accept(
                    &AcceptOptions {
                        ird: c2_rd,
                        ord: c2_rd,
                        timeout: o.step_timeout,
                        ..AcceptOptions::default()
                    },
                    &test_cq,
                )
                .map_err(err("accept C2"))?;
            listener = Some(l);
            comm.sync()?;
            (comm, c2)
        }
    };
    drop(listener);
    let n = test_qp.negotiated();
    out.ird_ord = (n.ird, n.ord);
    let half = o.half();
    let t = Test {
        w: Waiter {
            name: "test",
            qp: test_qp.id(),
            cq: test_cq,
            busy: o.busy,
            step: o.step_timeout,
        },
        buf: pd
            .register(
                vec![0; 2 * half as usize],
                Access::LOCAL_READ
                    | Access::LOCAL_WRITE
                    | Access::REMOTE_READ
                    | Access::REMOTE_WRITE,
            )
            .map_err(err("register test buffer"))?,
        credit: pd
            .register(
                vec![0; 8],
                Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            )
            .map_err(err("register credit buffer"))?,
        half,
        qp: test_qp,
        shares_cpu: ctx.shares_cpu(),
    };
    let local = Dest {
        out_reads: if o.kind.is_read() {
            u32::from(o.out_reads)
        } else {
            1
        },
        qpn: t.qp.id() as u32,
        psn: psn(),
        rkey: t.buf.stag().0,
        vaddr: half,
    };
    out.local = local;
    banner(o, &t);
    let result = run_test(o, &mut comm, &t, local, &mut out).map_err(|e| {
        // What the stack saw (a Terminate, a protection error) says why.
        let mut ev = Vec::new();
        while let Some(x) = t.qp.poll_event() {
            ev.push(format!("test QP: {x}"));
        }
        while let Some(x) = comm.qp.poll_event() {
            ev.push(format!("comm QP: {x}"));
        }
        if ev.is_empty() {
            e
        } else {
            format!("{e} ({})", ev.join("; "))
        }
    });
    // Teardown (§5): as perftest's destroy_ctx, the test connection first,
    // then the comm channel, each a graceful close. siw retires a work
    // request a little after its last octet has left, and a FIN arriving
    // in that window makes it flush the request with a local QP operation
    // error (perftest then reports "status 2" for its last Write of a
    // write_lat, or its last comm Send): so the peer gets a grace to retire
    // its last request first.
    std::thread::sleep(TEARDOWN_GRACE);
    let _ = t.qp.disconnect();
    let _ = t.qp.wait_disconnected(Duration::from_secs(5));
    let _ = comm.qp.disconnect();
    let _ = comm.qp.wait_disconnected(Duration::from_secs(5));
    result?;
    Ok(out)
}

/// Messages 1–5 (§3): version, page size, cache line, MTU, sync.
fn prefix(comm: &mut Comm) -> Result<String, String> {
    let v = comm.exchange(&version_msg())?;
    let peer = parse_version(&v);
    match peer.parse::<f64>() {
        Ok(x) if x >= 5.33 => {}
        _ => {
            return Err(format!(
                "peer perftest version {peer:?}: only versions 5.33 and later are spoken here"
            ))
        }
    }
    comm.exchange(&(CYCLE_BUFFER as u32).to_be_bytes())?;
    comm.exchange(&(CACHE_LINE as u32).to_be_bytes())?;
    // IBV_MTU_1024, as siw reports it.
    comm.exchange(b"3\0")?;
    comm.sync()?;
    Ok(peer)
}

fn banner(o: &Options, t: &Test) {
    let n = t.qp.negotiated();
    println!("{}", RULE);
    println!("                    {}", o.kind.title());
    println!(
        " Connection type : RC\t\tUsing SRQ      : OFF\n TX depth        : {}\n Mtu             : 1024[B]\n Link type       : Ethernet (iWARP, our stack over AF_XDP)\n Outstand reads  : {}\n rdma_cm QPs\t : ON\n Data ex. method : rdma_cm\n MPA             : rev {} CRC {} IRD {} ORD {}",
        o.tx_depth(),
        o.out_reads,
        n.rev,
        if n.crc { "on" } else { "off" },
        n.ird,
        n.ord
    );
}

const RULE: &str =
    "---------------------------------------------------------------------------------------";

fn run_test(
    o: &Options,
    comm: &mut Comm,
    t: &Test,
    local: Dest,
    out: &mut Outcome,
) -> Result<(), String> {
    let client = o.server.is_some();
    let mut remote = Dest::default();
    // send_bw: msg 7 carries the credit word instead of the buffer (§4.6).
    let credit_dest = Dest {
        rkey: t.credit.stag().0,
        vaddr: CREDIT_OFF,
        ..local
    };
    let pre = o.kind.pre_test_dests();
    let mut peer_credit = Dest::default();
    for i in 0..pre {
        let last = i + 1 == pre;
        if o.kind == Kind::SendBw && last && !client {
            post_recvs(t, o.size, o.rx_depth())?;
        }
        if o.kind == Kind::SendBw && i == 0 {
            peer_credit = comm.dest(&credit_dest)?;
        } else {
            remote = comm.dest(&local)?;
        }
    }
    out.remote = remote;
    println!("{RULE}");
    println!("{}", local.line("local"));
    println!("{}", remote.line("remote"));
    println!("{RULE}");
    if o.kind.is_lat() {
        println!("{}", LatReport::HEADER);
    } else {
        println!("{}", BwReport::header(o.report_gbits));
    }
    match o.kind {
        Kind::WriteLat => {
            for size in o.sizes() {
                let posts = write_lat(o, t, &remote, size, client)?;
                lat_print(out, size, &posts, 2.0);
            }
        }
        Kind::ReadLat => {
            if client {
                for size in o.sizes() {
                    let posts = read_lat(o, t, &remote, size)?;
                    lat_print(out, size, &posts, 1.0);
                }
            }
            // The perftest server runs no verbs: it waits in msg 11.
            comm.exchange_within(&local.encode(), o.run_timeout)?;
        }
        Kind::SendLat => {
            for size in o.sizes() {
                post_recvs(t, size, o.rx_depth())?;
                comm.dest(&local)?;
                let posts = send_lat(o, t, size, client)?;
                lat_print(out, size, &posts, 2.0);
            }
            comm.exchange_within(&local.encode(), o.run_timeout)?;
        }
        Kind::WriteBw | Kind::ReadBw => {
            if client {
                let mut last = None;
                for size in o.sizes() {
                    let r = bw_client(o, t, &remote, size)?;
                    println!("{}", r.row(o.report_gbits));
                    out.bw.push(r);
                    last = Some(r);
                }
                comm.dest(&local)?;
                let r = last.ok_or("no sizes")?;
                for m in r.encode() {
                    comm.exchange(&m)?;
                }
            } else {
                // The server idles until the client's msg 10, then prints
                // the client's report (§2.5).
                comm.exchange_within(&local.encode(), o.run_timeout)?;
                let mut m = [[0u8; 8]; 5];
                for slot in m.iter_mut() {
                    let got = comm.exchange(&[0u8; 8])?;
                    slot.copy_from_slice(&got);
                }
                let r = BwReport::decode(&m);
                println!("{}", r.row(o.report_gbits));
                out.bw.push(r);
            }
            comm.dest(&local)?;
        }
        Kind::SendBw => {
            let r = if client {
                send_bw_client(o, t, o.size)?
            } else {
                send_bw_server(o, t, &peer_credit, o.size)?
            };
            println!("{}", r.row(o.report_gbits));
            out.bw.push(r);
            comm.exchange_within(&local.encode(), o.run_timeout)?;
        }
    }
    println!("{RULE}");
    Ok(())
}

fn lat_print(out: &mut Outcome, size: u32, posts: &[Instant], divisor: f64) {
    if let Some(r) = LatReport::from_posts(size, posts, divisor) {
        println!("{}", r.row());
        out.lat.push(r);
    }
}

const TEST_RECV: u64 = 10;

fn post_recvs(t: &Test, size: u32, n: u64) -> Result<(), String> {
    for _ in 0..n {
        t.qp.post_recv(TEST_RECV, t.buf.sge(t.half, size))
            .map_err(err("post receive"))?;
    }
    Ok(())
}

/// §4.2: Writes ping-pong, the server first; the last octet of Write k is
/// k mod 256 and the receiver watches that octet in its own buffer.
fn write_lat(
    o: &Options,
    t: &Test,
    remote: &Dest,
    size: u32,
    client: bool,
) -> Result<Vec<Instant>, String> {
    let watch = (t.half + u64::from(size) - 1) as usize;
    let mut posts = Vec::with_capacity(o.iters as usize);
    for k in 1..=o.iters {
        let tag = k as u8;
        if client || k > 1 {
            // The client waits for the server's Write k before its own;
            // the server, which went first, for the client's Write k − 1.
            let want = if client { tag } else { (k - 1) as u8 };
            wait_octet(o, t, watch, want)?;
        }
        t.buf
            .store(size as usize - 1, tag)
            .map_err(err("test buffer"))?;
        posts.push(Instant::now());
        t.qp.post_send(WorkRequest::Write {
            wr_id: k,
            signaled: true,
            local: t.buf.sge(0, size).into(),
            remote_stag: STag(remote.rkey),
            remote_to: remote.vaddr,
        })
        .map_err(err("post Write"))?;
        let wc = t.w.next(o.step_timeout)?;
        if wc.opcode != Some(WcOpcode::Write) {
            return Err(format!("unexpected completion {wc:?}"));
        }
    }
    if !client {
        // The client's last Write.
        wait_octet(o, t, watch, o.iters as u8)?;
    }
    Ok(posts)
}

/// Checks of the octet a waiting (not `--busy`) test makes before it
/// starts yielding its CPU between them: as long as an adaptive loop spins
/// before it yields (`Polling::Adaptive`, 200 rounds).
const WAIT_SPINS: u32 = 200;

fn wait_octet(o: &Options, t: &Test, at: usize, want: u8) -> Result<(), String> {
    let deadline = Instant::now() + o.step_timeout;
    let mut spins = 0u32;
    loop {
        // In place: an acquiring load of the octet, no trip to the loop.
        if t.buf.load(at).map_err(err("test buffer"))? == want {
            return Ok(());
        }
        if let Some(e) = t.qp.poll_event() {
            return Err(format!("waiting for the peer's Write: {e}"));
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the peer's Write (last octet {want}) did not arrive in {:?}",
                o.step_timeout
            ));
        }
        // A loop thread on this process's one CPU needs it to place the
        // Write: yield at once. Else spin (each check runs a round of an
        // inline context), as `--busy` does for good and a waiting test
        // for as long as an adaptive loop would, then yield.
        if t.shares_cpu {
            std::thread::yield_now();
        } else if !o.busy {
            if spins < WAIT_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// §4.3: one Read at a time, into our own first half.
fn read_lat(o: &Options, t: &Test, remote: &Dest, size: u32) -> Result<Vec<Instant>, String> {
    let mut posts = Vec::with_capacity(o.iters as usize);
    for k in 1..=o.iters {
        posts.push(Instant::now());
        t.qp.post_send(WorkRequest::Read {
            wr_id: k,
            signaled: true,
            local: t.buf.sge(0, size).into(),
            remote_stag: STag(remote.rkey),
            remote_to: remote.vaddr,
        })
        .map_err(err("post Read"))?;
        let wc = t.w.next(o.step_timeout)?;
        if wc.opcode != Some(WcOpcode::Read) {
            return Err(format!("unexpected completion {wc:?}"));
        }
    }
    Ok(posts)
}

/// §4.4: Sends ping-pong, the client first; receives re-posted while more
/// are to come.
fn send_lat(o: &Options, t: &Test, size: u32, client: bool) -> Result<Vec<Instant>, String> {
    let mut posts = Vec::with_capacity(o.iters as usize);
    let mut posted = o.rx_depth();
    let mut rcnt = 0u64;
    let recv_one = |rcnt: &mut u64, posted: &mut u64| -> Result<(), String> {
        loop {
            let wc = t.w.next(o.step_timeout)?;
            match wc.opcode {
                Some(WcOpcode::Recv) => break,
                Some(WcOpcode::Send) => continue,
                _ => return Err(format!("unexpected completion {wc:?}")),
            }
        }
        *rcnt += 1;
        if *posted < o.iters {
            post_recvs(t, size, 1)?;
            *posted += 1;
        }
        Ok(())
    };
    for k in 1..=o.iters {
        if !client {
            recv_one(&mut rcnt, &mut posted)?;
        }
        posts.push(Instant::now());
        t.qp.post_send(WorkRequest::Send {
            wr_id: k,
            signaled: true,
            local: t.buf.sge(0, size).into(),
            solicited: false,
            invalidate: None,
        })
        .map_err(err("post Send"))?;
        if client {
            recv_one(&mut rcnt, &mut posted)?;
        }
    }
    // Send completions not yet seen are drained with the connection.
    Ok(posts)
}

/// §4.5: up to tx_depth Writes or Reads outstanding; small messages walk
/// the cycle buffer one cache-line-rounded step at a time.
fn bw_client(o: &Options, t: &Test, remote: &Dest, size: u32) -> Result<BwReport, String> {
    let read = o.kind == Kind::ReadBw;
    let mut window = o.tx_depth();
    if read {
        window = window.min(u64::from(t.qp.negotiated().ord).max(1));
    }
    let inc = u64::from(size).div_ceil(CACHE_LINE).max(1) * CACHE_LINE;
    let slots = if u64::from(size) <= CYCLE_BUFFER / 2 {
        CYCLE_BUFFER / inc
    } else {
        1
    };
    let mut posted = Vec::with_capacity(o.iters as usize);
    let mut completed = Vec::with_capacity(o.iters as usize);
    let mut scnt = 0u64;
    while (completed.len() as u64) < o.iters {
        while scnt < o.iters && scnt - (completed.len() as u64) < window {
            let off = (scnt % slots) * inc;
            let wr = if read {
                WorkRequest::Read {
                    wr_id: scnt,
                    signaled: true,
                    local: t.buf.sge(off, size).into(),
                    remote_stag: STag(remote.rkey),
                    remote_to: remote.vaddr + off,
                }
            } else {
                WorkRequest::Write {
                    wr_id: scnt,
                    signaled: true,
                    local: t.buf.sge(off, size).into(),
                    remote_stag: STag(remote.rkey),
                    remote_to: remote.vaddr + off,
                }
            };
            posted.push(Instant::now());
            t.qp.post_send(wr).map_err(err("post"))?;
            scnt += 1;
        }
        t.w.next(o.step_timeout)?;
        completed.push(Instant::now());
    }
    Ok(BwReport::compute(u64::from(size), &posted, &completed))
}

/// perftest's send_bw receiver writes its receive count after receives
/// where `(rcnt mod rx_depth) mod (rx_depth / 3) == 0` (§4.6).
fn credit_due(rcnt: u64, rx_depth: u64) -> bool {
    let step = (rx_depth / 3).max(1);
    (rcnt % rx_depth).is_multiple_of(step)
}

/// §4.6, sender: never more Sends beyond the receiver's credit than its
/// receive queue holds (`min(512, iters)` by perftest's default).
fn send_bw_client(o: &Options, t: &Test, size: u32) -> Result<BwReport, String> {
    let peer_rx = o.rx_depth();
    let window = o.tx_depth();
    let mut posted = Vec::with_capacity(o.iters as usize);
    let mut completed = Vec::with_capacity(o.iters as usize);
    let mut scnt = 0u64;
    let mut credit = 0u64;
    let deadline_step = o.step_timeout;
    let mut stalled_since: Option<Instant> = None;
    while (completed.len() as u64) < o.iters {
        let mut progressed = false;
        while scnt < o.iters
            && scnt - (completed.len() as u64) < window
            && scnt + 1 - credit.min(scnt + 1) < peer_rx
        {
            posted.push(Instant::now());
            t.qp.post_send(WorkRequest::Send {
                wr_id: scnt,
                signaled: true,
                local: t.buf.sge(0, size).into(),
                solicited: false,
                invalidate: None,
            })
            .map_err(err("post Send"))?;
            scnt += 1;
            progressed = true;
        }
        if scnt > completed.len() as u64 {
            t.w.next(o.step_timeout)?;
            completed.push(Instant::now());
            progressed = true;
        }
        if scnt < o.iters && scnt + 1 - credit.min(scnt + 1) >= peer_rx {
            let c = t
                .credit
                .read(CREDIT_OFF as usize, 4)
                .map_err(err("credit word"))?;
            let v = u64::from(u32::from_le_bytes([c[0], c[1], c[2], c[3]]));
            if v > credit {
                credit = v;
                progressed = true;
            }
        }
        if progressed {
            stalled_since = None;
        } else {
            let s = *stalled_since.get_or_insert_with(Instant::now);
            if s.elapsed() > deadline_step {
                return Err(format!(
                    "no receive credit from the peer for {deadline_step:?} ({scnt} Sends, credit {credit})"
                ));
            }
            std::thread::yield_now();
        }
    }
    Ok(BwReport::compute(u64::from(size), &posted, &completed))
}

/// §4.6, receiver: receives re-posted as they complete, the receive count
/// written to the sender's credit word on perftest's cadence.
fn send_bw_server(
    o: &Options,
    t: &Test,
    peer_credit: &Dest,
    size: u32,
) -> Result<BwReport, String> {
    let rx = o.rx_depth();
    let mut posted_recvs = rx;
    let mut rcnt = 0u64;
    let mut times = Vec::with_capacity(o.iters as usize);
    let mut credit_id = 1u64 << 32;
    while rcnt < o.iters {
        let wait = if rcnt == 0 {
            o.run_timeout
        } else {
            o.step_timeout
        };
        let wc = t.w.next(wait)?;
        match wc.opcode {
            Some(WcOpcode::Recv) => {}
            Some(WcOpcode::Write) => continue,
            _ => return Err(format!("unexpected completion {wc:?}")),
        }
        rcnt += 1;
        times.push(Instant::now());
        if posted_recvs < o.iters {
            post_recvs(t, size, 1)?;
            posted_recvs += 1;
        }
        if credit_due(rcnt, rx) {
            let data = InlineData::new(&(rcnt as u32).to_le_bytes())
                .map_err(|e| format!("credit Write: {e:?}"))?;
            credit_id += 1;
            t.qp.post_send(WorkRequest::WriteInline {
                wr_id: credit_id,
                signaled: false,
                data,
                remote_stag: STag(peer_credit.rkey),
                remote_to: peer_credit.vaddr,
            })
            .map_err(err("post credit Write"))?;
        }
    }
    // A receiver sees no post times: its average runs from the first
    // receive to the last, and its peak is that average (receive
    // completions come in bursts, so a peak over them would measure the
    // burst, not the link).
    let mut r = BwReport::compute(u64::from(size), &times[..1], &times[1..]);
    r.iters = rcnt;
    r.bw_peak = r.bw_avg;
    Ok(r)
}

/// Parse a perftest command line (`args` without the program name):
/// perftest's own flags (`-R`, `-p`, `-s`, `-n`, `-a`, `-t`, `-r`, `-o`,
/// `--report_gbits`; `-d`, `-i`, `-F`, `-x`, `-m`, `-c`, `-Q`, `-I`, `-l`,
/// `-u`, `-S`, `--cpu_util`, `-V`... accepted and ignored where they make no
/// sense for us), the server address as the last argument, plus our
/// `--iface`, `--ip ADDR[/PREFIX]`, `--gateway`, `--core`, `--busy`,
/// `--loop-thread`, `--no-crc`, `--in-netns`, `--memif-socket`,
/// `--memif-driver`, `--trusted-link`.
pub fn parse(kind: Kind, args: &[String]) -> Result<(Options, StackArgs), String> {
    let mut o = Options::new(kind);
    let mut s = StackArgs::default();
    let mut i = 0;
    let val = |i: &mut usize| -> Result<&String, String> {
        *i += 1;
        args.get(*i)
            .ok_or_else(|| format!("{} needs a value", args[*i - 1]))
    };
    let num = |v: &str| -> Result<u64, String> {
        v.parse::<u64>().map_err(|_| format!("not a number: {v}"))
    };
    let mut size_given = false;
    while i < args.len() {
        let a = args[i].as_str();
        // --flag=value
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a, None),
        };
        let value = |i: &mut usize| -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => val(i).cloned(),
            }
        };
        match flag {
            "-R" | "--rdma_cm" => {}
            "-p" | "--port" => o.port = num(&value(&mut i)?)? as u16,
            "-s" | "--size" => {
                o.size = num(&value(&mut i)?)? as u32;
                size_given = true;
            }
            "-a" | "--all" => o.all = true,
            "-n" | "--iters" => o.iters = num(&value(&mut i)?)?,
            "-t" | "--tx-depth" => o.tx_depth = num(&value(&mut i)?)? as u32,
            "-r" | "--rx-depth" => o.rx_depth = num(&value(&mut i)?)? as u32,
            "-o" | "--outs" => o.out_reads = num(&value(&mut i)?)? as u16,
            "--report_gbits" => o.report_gbits = true,
            "-q" | "--qp" => {
                if num(&value(&mut i)?)? != 1 {
                    return Err("-q: one test QP only".into());
                }
            }
            "-D" | "--duration" | "-b" | "--bidirectional" | "-e" | "--events" => {
                return Err(format!(
                    "{flag} is not supported by iwarp-perf's perftest mode"
                ))
            }
            // Device, port, GID, MTU, connection type, CQ moderation, inline
            // size, post list, timeout, SL, cpu-freq warning: ours are fixed.
            "-d" | "--ib-dev" | "-i" | "--ib-port" | "-x" | "--gid-index" | "-m" | "--mtu"
            | "-c" | "--connection" | "-Q" | "--cq-mod" | "-I" | "--inline_size" | "-l"
            | "--post_list" | "-u" | "--qp-timeout" | "-S" | "--sl" => {
                value(&mut i)?;
            }
            "-F" | "--CPU-freq" | "--cpu_util" | "-z" | "--com_rdma_cm" => {}
            "--iface" => s.iface = Some(value(&mut i)?),
            "--ip" => s.ip = Some(value(&mut i)?),
            "--gateway" => s.gateway = Some(value(&mut i)?),
            "--in-netns" => s.netns = Some(value(&mut i)?),
            "--memif-socket" => s.memif_socket = Some(value(&mut i)?.into()),
            "--memif-driver" => {
                s.dpdk_memif = match value(&mut i)?.as_str() {
                    "ours" => false,
                    "dpdk" => true,
                    v => return Err(format!("--memif-driver {v}: ours or dpdk")),
                }
            }
            "--trusted-link" => s.trusted_link = true,
            "--core" => s.core = Some(num(&value(&mut i)?)? as usize),
            "--busy" => {
                s.busy = true;
                o.busy = true;
            }
            "--loop-thread" => s.loop_thread = true,
            "--no-crc" => o.crc = false,
            _ if !a.starts_with('-') && i + 1 == args.len() => {
                o.server = Some(
                    a.parse()
                        .map_err(|_| format!("server address {a:?}: an IPv4 address"))?,
                );
            }
            _ => return Err(format!("unknown or misplaced argument {a:?}")),
        }
        i += 1;
    }
    if o.all && size_given {
        return Err("-a and -s exclude each other".into());
    }
    o.validate()?;
    Ok((o, s))
}

/// Open the AF_XDP context, waiting up to `wait` while the interface's
/// queue is still held: the kernel lets go of an AF_XDP socket (and the XDP
/// program) of a process that just exited a moment later, so a benchmark
/// started right after another one would otherwise fail with EBUSY.
pub fn open_context(x: &iwarp::XdpOptions, wait: Duration) -> Result<Context, String> {
    const EBUSY: i32 = 16;
    let deadline = Instant::now() + wait;
    loop {
        match Context::af_xdp(x) {
            Ok(c) => return Ok(c),
            Err(Error::Backend(
                iwarp_xdp::Error::Bind { errno: EBUSY, .. } | iwarp_xdp::Error::AttachBusy { .. },
            )) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(100)),
            Err(e) => return Err(format!("AF_XDP on {}: {e}", x.iface)),
        }
    }
}

/// Where our stack runs (the flags perftest does not have).
#[derive(Debug, Clone, Default)]
pub struct StackArgs {
    /// `--iface`: the interface AF_XDP takes over.
    pub iface: Option<String>,
    /// `--ip ADDR[/PREFIX]`: our address (not the kernel's).
    pub ip: Option<String>,
    /// `--gateway`.
    pub gateway: Option<String>,
    /// `--in-netns NAME|PATH`: open the interface inside that namespace.
    pub netns: Option<String>,
    /// `--core`: the poll loop's core.
    pub core: Option<usize>,
    /// `--busy`: busy-poll (the CQ; and the loop thread, with
    /// `--loop-thread`).
    pub busy: bool,
    /// `--loop-thread`: the stack on a poll loop thread of its own. By
    /// default it runs inline ([`iwarp::Polling::Inline`]): the test's
    /// thread, which posts and polls, drives it, as a verbs program's
    /// thread does with a hardware queue.
    pub loop_thread: bool,
    /// `--memif-socket PATH`: a memif link on that socket file instead
    /// of AF_XDP (the server end creates it, the client end connects;
    /// both name the same path).
    pub memif_socket: Option<std::path::PathBuf>,
    /// `--memif-driver dpdk`: DPDK's `net_memif` for `--memif-socket`
    /// instead of our own memif (`--memif-driver ours`, the default).
    /// Either end may use either: they speak the same protocol.
    pub dpdk_memif: bool,
    /// `--trusted-link` (with `--memif-socket`, on both sides): TCP
    /// checksums and SCTP's CRC32c neither computed nor checked
    /// ([`iwarp::HostOptions::trusted_link`]).
    pub trusted_link: bool,
}

impl StackArgs {
    /// Open our context: memif with `--memif-socket` (role server when
    /// `server`; ours, or DPDK's with `--memif-driver dpdk`), AF_XDP on
    /// `--iface` otherwise. Our memif client waits up to a minute for its
    /// server.
    pub fn open(&self, server: bool, wait: Duration) -> Result<Context, String> {
        let Some(sock) = &self.memif_socket else {
            if self.trusted_link {
                return Err("--trusted-link is for --memif-socket (shared memory between two of our ends); AF_XDP computes TCP checksums".into());
            }
            return open_context(&self.xdp()?, wait);
        };
        if self.iface.is_some() || self.netns.is_some() {
            return Err("--memif-socket excludes --iface and --in-netns".into());
        }
        let (addr, prefix) = self.addr()?;
        let gateway = match &self.gateway {
            Some(g) => Some(g.parse().map_err(|_| format!("--gateway {g}: not IPv4"))?),
            None => None,
        };
        if !self.dpdk_memif {
            let role = if server {
                iwarp::memif::Role::Server
            } else {
                iwarp::memif::Role::Client
            };
            let mut o = iwarp::MemifOptions::new(role, sock, 0, addr, prefix);
            o.link.timeout = Duration::from_secs(60);
            o.host.core = self.core;
            o.host.polling = self.polling();
            o.host.trusted_link = self.trusted_link;
            o.host.gateway = gateway;
            return Context::memif(&o).map_err(|e| format!("memif on {}: {e}", sock.display()));
        }
        let role = if server {
            iwarp::dpdk::MemifRole::Server
        } else {
            iwarp::dpdk::MemifRole::Client
        };
        let mut o = iwarp::DpdkOptions::memif(0, role, 0, sock, addr, prefix);
        o.host.core = self.core;
        o.host.polling = self.polling();
        o.host.trusted_link = self.trusted_link;
        o.host.gateway = gateway;
        let eal = crate::floor::memif_eal()?;
        Context::dpdk(&eal, &o).map_err(|e| format!("memif on {}: {e}", sock.display()))
    }

    fn addr(&self) -> Result<(Ipv4Addr, u8), String> {
        let ip = self.ip.as_deref().ok_or("--ip ADDR[/PREFIX] is required")?;
        let (addr, prefix) = match ip.split_once('/') {
            Some((a, p)) => (
                a,
                p.parse::<u8>()
                    .map_err(|_| format!("--ip {ip}: bad prefix"))?,
            ),
            None => (ip, 24),
        };
        let addr: Ipv4Addr = addr.parse().map_err(|_| format!("--ip {ip}: not IPv4"))?;
        Ok((addr, prefix))
    }

    /// Inline unless `--loop-thread`; then busy or adaptive as `--busy`
    /// says.
    pub fn polling(&self) -> iwarp::Polling {
        if !self.loop_thread {
            iwarp::Polling::Inline
        } else if self.busy {
            iwarp::Polling::Busy
        } else {
            iwarp::Polling::Adaptive
        }
    }

    /// The AF_XDP settings these flags describe.
    pub fn xdp(&self) -> Result<iwarp::XdpOptions, String> {
        let iface = self
            .iface
            .as_deref()
            .ok_or("--iface IFACE (or --memif-socket PATH) is required")?;
        let (addr, prefix) = self.addr()?;
        let mut x = iwarp::XdpOptions::new(iface, addr, prefix);
        if let Some(g) = &self.gateway {
            x.host.gateway = Some(g.parse().map_err(|_| format!("--gateway {g}: not IPv4"))?);
        }
        x.host.core = self.core;
        x.host.polling = self.polling();
        if let Some(ns) = &self.netns {
            x.host.netns = Some(if ns.contains('/') {
                ns.into()
            } else {
                format!("/var/run/netns/{ns}").into()
            });
        }
        Ok(x)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dest_bytes_match_the_capture() {
        // std/write_lat#27 (client): out_reads 1, qpn 2, psn 00d8cd4f,
        // rkey eb471900, vaddr 000055ba84731000 (§2.4).
        let d = Dest {
            out_reads: 1,
            qpn: 2,
            psn: 0x00d8_cd4f,
            rkey: 0xeb47_1900,
            vaddr: 0x0000_55ba_8473_1000,
        };
        let b = d.encode();
        assert_eq!(
            &b[..20],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0x00, 0xd8, 0xcd, 0x4f, 0xeb, 0x47, 0x19, 0x00]
        );
        assert_eq!(&b[24..32], &[0, 0, 0x55, 0xba, 0x84, 0x73, 0x10, 0x00]);
        // Padding and GID as perftest leaves them must not matter.
        let mut wire = b;
        wire[20..24].copy_from_slice(&[0xd6, 0x55, 0, 0]);
        wire[32..38].copy_from_slice(&[0x52, 0x54, 0x00, 0x17, 0x77, 0x03]);
        assert_eq!(Dest::decode(&wire), Some(d));
        assert_eq!(Dest::decode(&wire[..55]), None);
    }

    #[test]
    fn version_message_is_sixteen_octets() {
        let v = version_msg();
        assert_eq!(&v[..], b"6.06\0\0\0\0\0\0\0\0\0\0\0\0");
        assert_eq!(parse_version(&v), "6.06");
    }

    #[test]
    fn bw_report_round_trips_the_capture() {
        // crc/write_bw#383..#391.
        let m = [
            [0, 0, 0, 0, 0, 1, 0, 0],
            [0, 0, 0, 0, 0, 0, 0, 5],
            0x4029_7cde_e940_f0f9u64.to_be_bytes(),
            0x4024_af57_8398_1023u64.to_be_bytes(),
            0x3f25_b091_8130_2734u64.to_be_bytes(),
        ];
        let r = BwReport::decode(&m);
        assert_eq!(r.size, 65536);
        assert_eq!(r.iters, 5);
        assert!((r.bw_peak - 12.744).abs() < 0.001, "{r:?}");
        assert!((r.bw_avg - 10.342).abs() < 0.001, "{r:?}");
        assert_eq!(r.encode(), m);
    }

    #[test]
    fn latency_report_follows_perftest() {
        // Posts 10 µs apart except one 100 µs and one 50 µs gap, the
        // dropped tail; perftest's t_max and 99% are `delta[n]`, the 50.
        let t0 = Instant::now();
        let gaps = [10u64, 10, 100, 10, 10, 50, 10, 10, 10];
        let mut posts = vec![t0];
        for g in gaps {
            let last = *posts.last().unwrap();
            posts.push(last + Duration::from_micros(g));
        }
        let r = LatReport::from_posts(64, &posts, 2.0).unwrap();
        assert_eq!(r.iters, 10);
        assert!((r.t_min - 5.0).abs() < 1e-9);
        assert!((r.t_max - 25.0).abs() < 1e-9);
        assert!((r.p99 - 25.0).abs() < 1e-9);
        assert!((r.t_typical - 5.0).abs() < 1e-9);
        assert!((r.t_avg - 5.0).abs() < 1e-9);
        // Read latency is the full round trip.
        let r = LatReport::from_posts(64, &posts, 1.0).unwrap();
        assert!((r.t_avg - 10.0).abs() < 1e-9);
        assert!(LatReport::from_posts(64, &posts[..4], 1.0).is_none());
    }

    #[test]
    fn bw_peak_is_the_best_span() {
        let t0 = Instant::now();
        let us = |x: u64| t0 + Duration::from_micros(x);
        // Four ops: posted at 0,0,0,0; completed at 10, 20, 30, 100.
        let posted = [us(0), us(0), us(0), us(0)];
        let completed = [us(10), us(20), us(30), us(100)];
        let r = BwReport::compute(1_048_576, &posted, &completed);
        // Best: (30 − 0) / 3 = 10 µs per MiB.
        assert!((r.bw_peak - 100_000.0).abs() < 1.0, "{r:?}");
        // Average: 4 MiB in 100 µs.
        assert!((r.bw_avg - 40_000.0).abs() < 1.0, "{r:?}");
        assert!((r.msg_rate - 0.04).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn credit_cadence() {
        // rx_depth 5: after every receive; 512: 170, 340, 510, 512, 682.
        assert!((1..=10).all(|r| credit_due(r, 5)));
        let due: Vec<u64> = (1..=700).filter(|&r| credit_due(r, 512)).collect();
        assert_eq!(due, vec![170, 340, 510, 512, 682]);
    }

    #[test]
    fn command_line_as_perftest_takes_it() {
        let a = |s: &str| s.split_whitespace().map(String::from).collect::<Vec<_>>();
        let (o, s) = parse(
            Kind::WriteLat,
            &a("-R -d siw0 -F -x 0 -p 18600 -s 64 -n 100 --iface veth0 --ip 10.0.0.1/24 10.0.0.2"),
        )
        .unwrap();
        assert_eq!(o.port, 18600);
        assert_eq!(o.size, 64);
        assert_eq!(o.iters, 100);
        assert_eq!(o.server, Some(Ipv4Addr::new(10, 0, 0, 2)));
        let x = s.xdp().unwrap();
        assert_eq!(x.iface, "veth0");
        assert_eq!(x.host.ip, Ipv4Addr::new(10, 0, 0, 1));
        let (o, _) = parse(Kind::WriteBw, &a("-R")).unwrap();
        assert_eq!(
            (o.size, o.iters, o.tx_depth, o.server),
            (65536, 5000, 128, None)
        );
        assert!(parse(Kind::WriteLat, &a("-n 3")).is_err());
        assert!(parse(Kind::WriteLat, &a("-a -s 8")).is_err());
        assert!(parse(Kind::WriteLat, &a("-Z")).is_err());
        assert!(parse(Kind::WriteLat, &a("10.0.0.2 -n 10")).is_err());
        assert!(parse(Kind::ReadLat, &a("-o 0")).is_err());
        assert!(parse(Kind::SendBw, &a("-a")).is_err());
        assert!(StackArgs::default().xdp().is_err());
    }
}
