//! `iwarp-perf`: perftest-style latency and bandwidth tests of the iWARP
//! stack, with Linux TCP over the same namespaces and veth as the baseline
//! in the same run (see `bench/README.md`).
//!
//! ```text
//! iwarp-perf TEST [-s SIZE | -a] [-n ITERS | --duration SECS] [--rate MSGS_PER_SEC]
//!                 [--threads] [--busy] [--core N] [--link sim|veth|memif]
//!                 [--memif-driver ours|dpdk] [--window W]
//!                 [--mtu N] [--out DIR] [--stats] [--transport mpa|sctp]
//!                 [AF_XDP and TCP tuning flags]
//! TEST: write_lat read_lat send_lat write_bw read_bw send_bw demo
//! ```
//!
//! `iwarp-perf --help` lists every flag.
//!
//! Server and client run in this one process: two contexts (the simulated
//! link, AF_XDP on the two ends of a veth pair in two namespaces, or
//! memif, ours or DPDK's: two ends on one socket, shared-memory rings and
//! no kernel).
//!
//! Every latency figure is printed beside the floor of its link (one frame
//! bounced between two pinned, spinning threads with no protocol,
//! `iwarp_bench::floor`) and beside Linux TCP across the veth, the kernel
//! waiting the way our side waits (`baseline_wait`); the other way of
//! waiting is printed as a labelled second line.
//! Latency tests run both ends inside their poll loops (`run_in_loop`);
//! `--threads` runs them from application threads instead.

#[path = "iwarp_perf/linux.rs"]
mod linux;
#[path = "iwarp_perf/ours.rs"]
mod ours;
#[path = "iwarp_perf/output.rs"]
mod output;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// One test kind (perftest's six tools; shared with perftest mode).
pub use iwarp_bench::perftest::Kind as Test;

/// How long and how to run.
#[derive(Debug, Clone)]
pub struct Plan {
    pub iters: u64,
    pub duration: Duration,
    pub rate: Option<f64>,
    pub busy: bool,
    /// Latency tests from application threads (`--threads`) instead of
    /// in-loop hooks.
    pub threads: bool,
    /// write_lat as a Write and a 0-octet Send doorbell each way
    /// (`--doorbell`, and with `--threads` unless `--busy`), not a Write
    /// whose last octet the receiver watches in its own memory.
    pub doorbell: bool,
    pub window: u64,
    pub label: String,
}

/// Latency samples of one run (nanoseconds).
#[derive(Debug)]
pub struct LatRun {
    pub hist: Histogram<u64>,
}

impl Default for LatRun {
    fn default() -> Self {
        Self::new()
    }
}

impl LatRun {
    pub fn new() -> Self {
        LatRun {
            hist: Histogram::new_with_bounds(1, 60_000_000_000, 3).expect("histogram bounds"),
        }
    }

    pub fn record(&mut self, ns: u64) {
        self.hist.saturating_record(ns.max(1));
    }

    fn json(&self) -> Value {
        let h = &self.hist;
        let us = |v: u64| v as f64 / 1000.0;
        json!({
            "iterations": h.len(),
            "t_min_us": us(h.min()),
            "t_max_us": us(h.max()),
            "t_typical_us": us(h.value_at_quantile(0.5)),
            "t_avg_us": h.mean() / 1000.0,
            "t_stdev_us": h.stdev() / 1000.0,
            "p50_us": us(h.value_at_quantile(0.5)),
            "p99_us": us(h.value_at_quantile(0.99)),
            "p999_us": us(h.value_at_quantile(0.999)),
        })
    }
}

/// A bandwidth run.
#[derive(Debug)]
pub struct BwResult {
    pub size: u32,
    pub iters: u64,
    pub secs: f64,
    pub peak_mbs: f64,
    pub avg_mbs: f64,
    pub mpps: f64,
    pub cpu_ns_per_byte: f64,
    /// Throughput per core of CPU spent: Gb/s divided by the cores busy
    /// (process CPU seconds over wall seconds).
    pub gbps_per_core: f64,
    /// Time between consecutive completions (ns).
    pub gaps: LatRun,
    /// The sending poll loop's own thread (in-loop runs): CPU ns per
    /// payload octet in user space and in the kernel (where copy-mode
    /// AF_XDP transmit, veth and the peer's XDP run, inside `sendto`).
    pub sender_ns_per_byte: Option<(f64, f64)>,
}

const MIB: f64 = 1_048_576.0;

impl BwResult {
    /// Peak: the best rate over any run of `max(4 × window, iters / 10)`
    /// consecutive completions (completions arrive in bursts, so shorter
    /// spans measure the burst, not the link); the average when there are
    /// fewer completions than that.
    pub fn new(
        size: u32,
        iters: u64,
        secs: f64,
        stamps: &[Instant],
        start: Instant,
        window: u64,
        cpu: f64,
    ) -> Self {
        let bytes = iters as f64 * f64::from(size);
        let avg = bytes / secs / MIB;
        let w = (window.max(1) as usize * 4).max(stamps.len() / 10);
        let mut peak = avg;
        for i in w..stamps.len() {
            let dt = stamps[i].duration_since(stamps[i - w]).as_secs_f64();
            if dt > 0.0 {
                peak = peak.max(w as f64 * f64::from(size) / dt / MIB);
            }
        }
        let mut gaps = LatRun::new();
        let mut prev = start;
        for &s in stamps {
            gaps.record(s.duration_since(prev).as_nanos() as u64);
            prev = s;
        }
        BwResult {
            size,
            iters,
            secs,
            peak_mbs: peak,
            avg_mbs: avg,
            mpps: iters as f64 / secs / 1e6,
            cpu_ns_per_byte: if bytes > 0.0 { cpu * 1e9 / bytes } else { 0.0 },
            gbps_per_core: if cpu > 0.0 {
                bytes * 8.0 / cpu / 1e9
            } else {
                0.0
            },
            gaps,
            sender_ns_per_byte: None,
        }
    }

    /// The sending loop's CPU seconds (user, kernel) over the run, as ns
    /// per payload octet.
    pub fn set_sender_cpu(&mut self, cpu: Option<(f64, f64)>) {
        let bytes = self.iters as f64 * f64::from(self.size);
        self.sender_ns_per_byte = cpu
            .filter(|_| bytes > 0.0)
            .map(|(u, k)| (u * 1e9 / bytes, k * 1e9 / bytes));
    }

    fn json(&self) -> Value {
        let mut v = json!({
            "bytes": self.size, "iterations": self.iters, "seconds": self.secs,
            "bw_peak_mib_s": self.peak_mbs, "bw_avg_mib_s": self.avg_mbs,
            "msg_rate_mpps": self.mpps, "cpu_ns_per_byte": self.cpu_ns_per_byte,
            "gbit_s_per_core": self.gbps_per_core,
            "completion_gap": self.gaps.json(),
        });
        if let Some((u, k)) = self.sender_ns_per_byte {
            v["sender_loop_cpu_ns_per_byte"] = json!({ "user": u, "kernel": k });
        }
        v
    }
}

/// Sleep, then spin, until `t` (for `--rate`).
pub fn wait_until(t: Instant) {
    loop {
        let now = Instant::now();
        if now >= t {
            return;
        }
        let left = t - now;
        if left > Duration::from_micros(200) {
            std::thread::sleep(left - Duration::from_micros(100));
        } else {
            std::hint::spin_loop();
        }
    }
}

/// Progress on stderr every 65536 operations.
pub fn progress(i: u64, plan: &Plan) {
    if i.is_multiple_of(65_536) {
        eprintln!("  {}: {i} done", plan.label);
    }
}

struct Args {
    tests: Vec<(Test, Vec<u32>)>,
    iters: Option<u64>,
    duration: Option<f64>,
    rate: Option<f64>,
    busy: bool,
    copy_tx: bool,
    /// Over memif: TCP checksums computed and checked (`--verify-checksums`).
    verify_checksums: bool,
    /// Whose memif (`--memif-driver`).
    memif_driver: MemifDriver,
    /// MPA's CRC asked for by neither end (`--no-crc`).
    no_crc: bool,
    threads: bool,
    /// `--threads --loop-thread`: loop threads, not inline contexts.
    loop_thread: bool,
    /// write_lat with a Send doorbell after each Write (`--doorbell`).
    doorbell: bool,
    core: Option<usize>,
    netns: bool,
    /// The link our two contexts use.
    link: Link,
    window: u64,
    /// MTU of both veth ends (our stack and the Linux baseline alike).
    mtu: Option<u32>,
    out: PathBuf,
    demo: bool,
    /// Print both contexts' counters at the end.
    stats: bool,
    /// Print where each loop's hops spent their time (`stages` builds).
    stages: bool,
    /// Also run each test over SCTP (RFC 5043), right after MPA/TCP.
    sctp: bool,
    /// Packets per thousand dropped at random both ways (`--netns`), with
    /// segmentation offloads off; `None`: no loss rule, offloads as the
    /// veth has them.
    loss_permille: Option<u32>,
    /// `--queues`: receive queues (poll loops) per end, and connections.
    queues: Option<(u16, u32)>,
    /// AF_XDP and TCP settings of our contexts (`--netns`).
    tuning: Tuning,
}

/// The link between our two contexts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Link {
    /// The in-memory link (no kernel, no root, no Linux baseline).
    Sim,
    /// AF_XDP on a veth pair across two namespaces (root).
    Veth,
    /// memif: two ends on one socket in this process (shared-memory
    /// rings, no kernel; ours, or DPDK's with `--memif-driver dpdk`); the
    /// Linux baseline runs across a veth (root).
    Memif,
}

/// Whose memif implementation `--link memif` runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum MemifDriver {
    /// Ours (`iwarp-memif`): frames built and read in the ring buffers.
    Ours,
    /// DPDK's `net_memif` PMD (copies through mbufs).
    Dpdk,
}

impl MemifDriver {
    fn name(self) -> &'static str {
        match self {
            MemifDriver::Ours => "ours",
            MemifDriver::Dpdk => "dpdk",
        }
    }
}

impl Link {
    fn name(self) -> &'static str {
        match self {
            Link::Sim => "sim",
            Link::Veth => "veth",
            Link::Memif => "memif",
        }
    }
}

/// How the Linux baseline waits, like for like with ours: our poll loops
/// spin when they busy-poll, and when the test runs inside them they spin
/// between messages too (an adaptive loop yields only after 200 idle
/// rounds and parks after 400, some tens of microseconds, longer than a
/// ping-pong's gap on an idle machine), and so does an application thread
/// with `--busy`, and one that drives its context itself (`--threads`,
/// inline: `Cq::wait` runs 200 rounds before it sleeps, as an adaptive
/// loop spins); only application threads of adaptive loop threads
/// (`--threads --loop-thread` without `--busy`) sleep on the CQ after a
/// short spin, and the kernel then blocks too.
fn baseline_wait(busy: bool, threads: bool, loop_thread: bool) -> linux::Wait {
    if threads && loop_thread && !busy {
        linux::Wait::Block
    } else {
        linux::Wait::Spin
    }
}

/// AF_XDP and TCP settings applied to both of our contexts under `--netns`.
#[derive(Debug, Clone, clap::Args)]
struct Tuning {
    /// AF_XDP bind mode (--netns).
    #[arg(long, value_enum, default_value_t = BindMode::Auto)]
    xdp_mode: BindMode,
    /// Entries of each AF_XDP ring, a power of two from 64 to 32768 (--netns).
    #[arg(long, value_name = "N", value_parser = parse_ring)]
    ring_size: Option<u32>,
    /// UMEM chunk size, 2048 or 4096 (--netns).
    #[arg(long, value_name = "OCTETS", value_parser = parse_frame_size)]
    frame_size: Option<u32>,
    /// UMEM chunks, more than the ring size (--netns).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(128..=1 << 20))]
    frame_count: Option<u32>,
    /// Kick the kernel on every transmit (XDP_USE_NEED_WAKEUP off) (--netns).
    #[arg(long)]
    no_need_wakeup: bool,
    /// Interface queue the AF_XDP sockets bind, 0 to 63 (default 0; the
    /// lab's veths deliver everything on queue 0) (--netns).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..64))]
    queue: Option<u32>,
    /// Busy-poll the AF_XDP sockets for this many microseconds per call
    /// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL; refusals are warnings) (--netns).
    #[arg(long, value_name = "USECS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    busy_poll_usecs: Option<u32>,
    /// Packets per busy-poll round (SO_BUSY_POLL_BUDGET, default 64), with
    /// --busy-poll-usecs (--netns).
    #[arg(long, value_name = "PACKETS", requires = "busy_poll_usecs",
          value_parser = clap::value_parser!(u32).range(1..=65_535))]
    busy_poll_budget: Option<u32>,
    /// Minimum TCP retransmission timeout in ms (default 5) (--netns).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    rto_min_ms: Option<u64>,
    /// Initial TCP retransmission timeout in ms (default 1000) (--netns).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(1..=60_000))]
    rto_initial_ms: Option<u64>,
    /// TIME-WAIT duration in ms (default 60000) (--netns).
    #[arg(long, value_name = "MS", value_parser = clap::value_parser!(u64).range(0..=600_000))]
    time_wait_ms: Option<u64>,
    /// TCP receive window in octets (default 1 MiB) (--netns).
    #[arg(long, value_name = "OCTETS", value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)))]
    rcv_buf: Option<u32>,
    /// TCP send buffer in octets (default 4 MiB) (--netns).
    #[arg(long, value_name = "OCTETS", value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)))]
    snd_buf: Option<u32>,
}

/// `--xdp-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum BindMode {
    /// Zero-copy where the driver can, copy otherwise.
    Auto,
    /// Copy mode (every driver).
    Copy,
    /// Zero-copy only (fails where the driver cannot).
    Zerocopy,
}

impl Tuning {
    /// Apply to one context's options.
    fn apply(&self, o: &mut iwarp::XdpOptions) -> Result<(), String> {
        o.bind = match self.xdp_mode {
            BindMode::Auto => iwarp::XskMode::Auto,
            BindMode::Copy => iwarp::XskMode::Copy,
            BindMode::Zerocopy => iwarp::XskMode::ZeroCopy,
        };
        if let Some(n) = self.ring_size {
            o.ring_size = n;
            o.rx_frames = o.rx_frames.min(n);
        }
        if let Some(n) = self.frame_size {
            o.frame_size = n;
        }
        if let Some(n) = self.frame_count {
            o.frame_count = n;
        }
        if o.frame_count <= o.ring_size {
            return Err("--frame-count must exceed --ring-size".into());
        }
        o.rx_frames = o.rx_frames.min(o.frame_count / 2);
        o.need_wakeup = !self.no_need_wakeup;
        if let Some(q) = self.queue {
            o.queue = q;
        }
        if let Some(usecs) = self.busy_poll_usecs {
            o.busy_poll = Some(iwarp::BusyPoll {
                usecs,
                budget: self.busy_poll_budget.unwrap_or(64),
            });
        }
        let t = &mut o.host.tcp;
        let ms = Duration::from_millis;
        if let Some(v) = self.rto_min_ms {
            t.rto_min = ms(v);
        }
        if let Some(v) = self.rto_initial_ms {
            t.rto_initial = ms(v);
        }
        if let Some(v) = self.time_wait_ms {
            t.time_wait = ms(v);
        }
        if let Some(v) = self.rcv_buf {
            t.rcv_buf = v;
        }
        if let Some(v) = self.snd_buf {
            t.snd_buf = v as usize;
        }
        if t.rto_min > t.rto_initial {
            return Err("--rto-min-ms must not exceed --rto-initial-ms".into());
        }
        Ok(())
    }
}

fn parse_ring(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("not a number: {s:?}"))?;
    if !n.is_power_of_two() || !(64..=32_768).contains(&n) {
        return Err(format!("{n} is not a power of two from 64 to 32768"));
    }
    Ok(n)
}

fn parse_frame_size(s: &str) -> Result<u32, String> {
    match s {
        "2048" => Ok(2048),
        "4096" => Ok(4096),
        _ => Err(format!("{s:?}: the UMEM chunk size is 2048 or 4096")),
    }
}

/// `TEST`: one of perftest's six, or `demo`.
fn parse_test(s: &str) -> Result<String, String> {
    if s == "demo" || Test::parse(s).is_some() {
        Ok(s.to_owned())
    } else {
        Err(format!(
            "unknown test {s:?}: one of write_lat read_lat send_lat write_bw read_bw send_bw demo"
        ))
    }
}

/// A positive number of seconds or messages per second.
fn positive(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v.is_finite() => Ok(v),
        _ => Err(format!("{s:?} is not a positive number")),
    }
}

const AFTER_HELP: &str =
    "-a: sizes 2 B .. 64 KiB, powers of two. Default -n: 1000 (lat), 5000 (bw).
Latency tests run both ends inside their poll loops (run_in_loop hooks);
bandwidth tests also run in-loop; --threads: from application threads that
post and wait on the CQ instead (both kinds of test).
--netns (root; default as root): two namespaces + veth + AF_XDP, Linux TCP baseline.
--sim: the simulated link, no root, no baseline.
The stack's tracing events go to stderr (RUST_LOG, default warn).
With -R: perftest mode, the client or server of rdma-core's perftest (iwarp-perf TEST -R --help).";

/// perftest-style latency and bandwidth tests of the iWARP stack, with
/// Linux TCP over the same namespaces and veth as the baseline in the same
/// run.
#[derive(Debug, clap::Parser)]
#[command(name = "iwarp-perf", version, after_help = AFTER_HELP)]
struct Cli {
    /// write_lat, read_lat, send_lat, write_bw, read_bw, send_bw or demo.
    #[arg(value_name = "TEST", value_parser = parse_test)]
    test: String,
    /// Message size in octets (1 .. 16 MiB; default 2 for latency, 65536 for bandwidth).
    #[arg(short = 's', long = "size", value_name = "SIZE", conflicts_with = "all",
          value_parser = clap::value_parser!(u32).range(1..=1 << 24))]
    size: Option<u32>,
    /// All sizes from 2 B to 64 KiB (powers of two).
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Iterations (at least 1).
    #[arg(short = 'n', long = "iters", value_name = "ITERS",
          value_parser = clap::value_parser!(u64).range(1..))]
    iters: Option<u64>,
    /// Run each test this many seconds instead of a number of iterations.
    #[arg(long, value_name = "SECS", value_parser = positive)]
    duration: Option<f64>,
    /// Latency tests: open loop at this many messages per second.
    #[arg(long, value_name = "MSGS_PER_SEC", value_parser = positive)]
    rate: Option<f64>,
    /// Run from application threads instead of inside the poll loops:
    /// each thread drives its context itself (run to completion,
    /// `Polling::Inline`), pinned where the loop would be.
    #[arg(long)]
    threads: bool,
    /// With --threads: application threads hand work to poll loop
    /// threads of their own instead of driving the stack.
    #[arg(long, requires = "threads")]
    loop_thread: bool,
    /// write_lat: each end answers a Write and a 0-octet Send doorbell
    /// (whose Recv completes once the Write is placed) instead of watching
    /// the last octet of the peer's Write in its own memory, as perftest's
    /// ib_write_lat does. Two FPDUs each way instead of one; always so
    /// with --threads unless --busy (threads that sleep on the CQ).
    #[arg(long)]
    doorbell: bool,
    /// Busy-poll (loops never sleep).
    #[arg(long)]
    busy: bool,
    /// Our stacks frame FPDUs into TCP's send buffer (the transmit path
    /// before one-copy transmit: one more copy per octet, and a Send or
    /// Write completes once handed to TCP): the baseline one-copy
    /// transmit is measured against (`HostOptions::copy_tx`).
    #[arg(long)]
    copy_tx: bool,
    /// Over memif, compute and check TCP checksums (and SCTP's CRC32c) at
    /// both ends. By default our two memif ends, both ours on shared
    /// memory, trust the link and sum nothing (`HostOptions::trusted_link`),
    /// as Linux's baseline skips the sum between the two ends of its veth;
    /// the simulated link is always trusted, AF_XDP never.
    #[arg(long)]
    verify_checksums: bool,
    /// With --link memif: whose memif carries the frames. `ours`
    /// (`Context::memif`): the stack builds and reads frames in the ring
    /// buffers themselves. `dpdk`: DPDK's net_memif PMD
    /// (`Context::dpdk`), which copies each frame between its mbufs and
    /// the rings at both ends. The floor is measured on the same one.
    /// `--queues` runs over either.
    #[arg(long, value_enum, default_value_t = MemifDriver::Ours)]
    memif_driver: MemifDriver,
    /// Neither end asks for MPA's CRC32c on its FPDUs (RFC 5044 §4.3:
    /// used when either end asks; our default, as siw's, asks). What the
    /// CRC costs; over SCTP, SCTP's own CRC32c is the link's (see
    /// --verify-checksums).
    #[arg(long)]
    no_crc: bool,
    /// First CPU of the placement (server end; the client end takes the
    /// next). With --queues N: the server's loops on CPUs B .. B+N-1, the
    /// client's on B+N .. B+2N-1, and the Linux baseline's flow i on the
    /// CPUs of loop i mod N alike (without it nothing is pinned).
    #[arg(long, value_name = "B")]
    core: Option<usize>,
    /// The simulated link (no root, no baseline); same as --link sim.
    #[arg(long, conflicts_with_all = ["netns", "link"])]
    sim: bool,
    /// Two namespaces + veth + AF_XDP, with the Linux TCP baseline (root);
    /// same as --link veth.
    #[arg(long, conflicts_with = "link")]
    netns: bool,
    /// Our link: sim (in-memory), veth (AF_XDP across two namespaces) or
    /// memif (two ends in this process, no kernel). The Linux baseline
    /// always runs across a veth between two namespaces (root). Default:
    /// veth as root, sim otherwise.
    #[arg(long, value_enum)]
    link: Option<Link>,
    /// Bandwidth tests: messages outstanding (at least 1).
    #[arg(long, value_name = "W", default_value_t = 64,
          value_parser = clap::value_parser!(u64).range(1..))]
    window: u64,
    /// With --netns: MTU of both veth ends, for our stack and the Linux
    /// baseline alike, 576 .. 65000 (default 1500; above 3826 our AF_XDP
    /// sockets use multi-buffer frames).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(576..=65_000))]
    mtu: Option<u32>,
    /// Directory for the .hgrm, .png and .json files.
    #[arg(long, value_name = "DIR", default_value = "target/iwarp-perf")]
    out: PathBuf,
    /// Print both contexts' counters (stack, TCP, interface, poll loop,
    /// device and bind mode) at the end.
    #[arg(long)]
    stats: bool,
    /// Print, per poll loop, where a ping-pong's hop spends its time:
    /// frame in, receive, the hooks' poll, the post taken, the transmit
    /// pass, the publish (median and 90th percentile, ns; latency tests
    /// in the loops). One report per loop for the whole run: with
    /// `--transport sctp` its hops over both transports together. Needs a
    /// build with the `stages` feature: `cargo build --release -p
    /// iwarp-bench --features stages --bin iwarp-perf`.
    #[arg(long)]
    stages: bool,
    /// sctp: after each test over MPA/TCP, run it over SCTP (RFC 5043) on
    /// the same contexts and print both, with the ratio SCTP/MPA (write_lat,
    /// write_bw and the others alike). mpa (default): MPA/TCP only.
    #[arg(long, value_name = "mpa|sctp", default_value = "mpa",
          value_parser = ["mpa", "sctp"])]
    transport: String,
    /// With --netns: drop this many packets per thousand at random, both
    /// ways. The Linux baseline loses them to an nftables `numgen random`
    /// rule on the server namespace's input and output hooks; our stacks,
    /// whose frames an XDP program steers past netfilter, drop received
    /// frames at both ends at the same rate (`HostOptions::rx_drop_ppm`).
    /// Bandwidth tests then print our sender's retransmission counters.
    /// Given at all (0 included), it also turns TSO, GSO and GRO off on
    /// both veth ends, so that Linux sends and loses MTU-sized packets.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(0..=500))]
    loss_permille: Option<u32>,
    /// write_bw with N receive queues per end, one poll loop each, the
    /// connections spread over the loops: over the simulated link
    /// (`Context::sim_pair_queues`, frames steered by RSS) or over memif
    /// (`--link memif`: `MemifOptions::queue_count` over ours,
    /// `DpdkOptions::queue_count` over DPDK's; queue i to the peer's queue
    /// i); the Linux baseline runs N parallel TCP flows over
    /// loopback in the same run (no root). Prints each connection's loop
    /// and each loop's share. With `--transport sctp` the connections are
    /// iWARP over SCTP (the baseline stays Linux TCP). With `--threads`
    /// each connection's client and server post and poll from application
    /// threads of their own, which drive the loops they use (inline
    /// contexts; `--loop-thread`: loop threads instead).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=128))]
    queues: Option<u16>,
    /// Which implementation sums MPA's (and SCTP's) CRC32c in this
    /// process: auto (default: crc-fast where the CPU has AVX-512 VL and
    /// VPCLMULQDQ, else crc32c; `iwarp_crc::backend`), crc32c or crc-fast.
    #[arg(long, value_name = "auto|crc32c|crc-fast", default_value = "auto",
          value_parser = ["auto", "crc32c", "crc-fast"])]
    crc_backend: String,
    /// With --queues: connections, given to the client's loops in turn
    /// (default: one per queue).
    #[arg(long, value_name = "C", requires = "queues",
          value_parser = clap::value_parser!(u32).range(1..=1000))]
    connections: Option<u32>,
    #[command(flatten)]
    tuning: Tuning,
    #[command(flatten)]
    netns_args: iwarp_bench::netns_cli::NetnsArgs,
}

/// `--queues N`: write_bw over the simulated link with N poll loops per
/// end and `conns` connections spread over them (each connection's
/// client and server hooks in the loops that own its ends), after the
/// Linux baseline with N parallel TCP flows over loopback. Each
/// connection sends ITERS messages; the aggregate is all octets over the
/// wall time from the first start to the last end.
fn multi_queue(args: &Args, queues: u16, conns: usize) -> Result<(), String> {
    let sizes = match &args.tests[..] {
        [(Test::WriteBw, sizes)] if !args.demo => sizes.clone(),
        _ => return Err("--queues runs write_bw only".into()),
    };
    if !matches!(args.link, Link::Sim | Link::Memif) {
        return Err("--queues: over the simulated link or memif (--sim, --link memif)".into());
    }
    if args.loss_permille.is_some() {
        return Err("--queues: no --loss-permille (the links of --queues drop nothing)".into());
    }
    let (transport, carrier) = if args.sctp {
        (iwarp::Transport::Sctp, "SCTP")
    } else {
        (iwarp::Transport::Mpa, "MPA/TCP")
    };
    let iters = args.iters.unwrap_or(5000);
    let wait = baseline_wait(args.busy, args.threads, args.loop_thread);
    // --threads: each connection's two ends post and poll from application
    // threads of their own, which drive the loops their CQs' QPs are on
    // (inline contexts, unless --loop-thread).
    let polling = polling(args);
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    // --core B: the server's loop i on CPU B + i, the client's on
    // B + N + i; the Linux baseline's flow i on the CPUs of loop i mod N.
    let cores: Option<Vec<usize>> = match args.core {
        Some(b) if b + 2 * usize::from(queues) > ncpu => {
            return Err(format!(
                "--queues {queues} --core {b}: the two ends' {} loops need CPUs {b} to {}, this machine has {ncpu}",
                2 * queues,
                b + 2 * usize::from(queues) - 1
            ))
        }
        Some(b) => Some((b..b + 2 * usize::from(queues)).collect()),
        None => None,
    };
    let pinned = match &cores {
        Some(c) => format!(
            "server loops on CPUs {}..={}, client loops on {}..={}",
            c[0],
            c[usize::from(queues) - 1],
            c[usize::from(queues)],
            c[c.len() - 1]
        ),
        None => "nothing pinned".to_string(),
    };
    let over = match (args.link, args.memif_driver) {
        (Link::Memif, MemifDriver::Ours) => "our memif (queue pair i to the peer's queue pair i)",
        (Link::Memif, MemifDriver::Dpdk) => "DPDK memif (queue i to the peer's queue i)",
        _ => "the simulated link (RSS, symmetric key)",
    };
    let path = match (args.threads, args.loop_thread) {
        (false, _) => "in the poll loops",
        (true, false) => "from application threads that drive the loops themselves (inline)",
        (true, true) => "from application threads, handed to loop threads",
    };
    println!(
        "iwarp-perf --queues {queues}: write_bw over {carrier} over {over}, {queues} receive queue(s) and poll loop(s) per end, {conns} connection(s), {iters} messages each, window {}, {path}; {ncpu} CPUs, {pinned}",
        args.window
    );
    println!(
        "Linux TCP baseline: {queues} parallel flow(s) over loopback ({}), {iters} messages each (doubled, up to 16x, until a run lasts 0.5 s), {}",
        wait.label(),
        if cores.is_some() { "flow i's two threads on the CPUs of loop i" } else { "nothing pinned" }
    );
    let mut json_out = Vec::new();
    for size in sizes {
        let mib = |msgs: u64, secs: f64| msgs as f64 * f64::from(size) / secs / MIB;
        eprintln!("running linux loopback write_bw {size} B x{queues} ...");
        let (mut lmsgs, mut lsecs) =
            linux::loopback_flows(usize::from(queues), size, iters, wait, cores.as_deref())?;
        // A run under half a second gives no steady rate (it swung 3x
        // between two runs a minute apart): run it again with twice the
        // messages, up to 16 x ITERS.
        let mut n = iters;
        while lsecs < 0.5 && n < iters.saturating_mul(16) {
            n = n.saturating_mul(2);
            (lmsgs, lsecs) =
                linux::loopback_flows(usize::from(queues), size, n, wait, cores.as_deref())?;
        }
        // Ours, fresh contexts per size.
        let (server, client) = match args.link {
            Link::Memif => memif_queue_contexts(args, queues, polling, cores.as_deref())?,
            _ => iwarp::Context::sim_pair_queues(queues, polling, cores.as_deref())
                .map_err(|e| format!("sim_pair_queues: {e}"))?,
        };
        let plan = Plan {
            iters,
            duration: Duration::from_secs_f64(args.duration.unwrap_or(120.0)),
            rate: None,
            busy: args.busy,
            threads: args.threads,
            doorbell: args.doorbell,
            window: args.window,
            label: format!("write_bw {size} B"),
        };
        let pairs = (0..conns)
            .map(|k| {
                ours::connect(
                    &server,
                    &client,
                    9100 + k as u16,
                    Test::WriteBw,
                    size,
                    args.busy,
                    args.threads,
                    None,
                    ours::Lower {
                        transport,
                        mpa_crc: !args.no_crc,
                    },
                    false,
                )
                .map_err(|e| format!("connection {k}: {e}"))
            })
            .collect::<Result<Vec<_>, String>>()?;
        eprintln!("running iwarp write_bw {size} B x{conns} ...");
        let t0 = Instant::now();
        let results: Vec<Result<BwResult, String>> = std::thread::scope(|sc| {
            let hs: Vec<_> = pairs
                .iter()
                .map(|p| sc.spawn(|| p.bandwidth(Test::WriteBw, size, &plan)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or_else(|_| Err("panicked".into())))
                .collect()
        });
        let wall = t0.elapsed().as_secs_f64();
        let (cs, ss) = (
            client.stats().map_err(|e| e.to_string())?,
            server.stats().map_err(|e| e.to_string())?,
        );
        let mut total = 0u64;
        println!("{RULE}\n write_bw {size} B, --queues {queues}\n{RULE}");
        println!(" conn  client loop  server loop  #iterations  BW average[MB/sec]");
        let mut per_conn = Vec::new();
        for (k, (p, r)) in pairs.iter().zip(&results).enumerate() {
            let r = r.as_ref().map_err(|e| format!("connection {k}: {e}"))?;
            let (cl, sl) = p.loops();
            total += r.iters;
            println!(" {k:<5} {cl:<12} {sl:<12} {:<12} {:.2}", r.iters, r.avg_mbs);
            per_conn.push(json!({ "client_loop": cl, "server_loop": sl, "iterations": r.iters, "bw_avg_mib_s": r.avg_mbs }));
        }
        for (who, st, ctx) in [("client", &cs, &client), ("server", &ss, &server)] {
            for (i, l) in st.loops.iter().enumerate() {
                if args.sctp {
                    // The loop's TCP counters say nothing of SCTP.
                    println!(
                        " {who} loop {i}: tx_frames {} rounds {} rx_frames {}",
                        l.tx_frames, l.poll_loop.rounds, l.poll_loop.rx_frames
                    );
                } else {
                    println!(
                        " {who} loop {i}: connections {} rx_tcp {} tx_frames {} tcp_delivered {} rounds {} rx_frames {}",
                        l.connections, l.rx_tcp, l.tx_frames, l.tcp_delivered, l.poll_loop.rounds, l.poll_loop.rx_frames
                    );
                }
            }
            if args.sctp {
                let sc = ctx
                    .sctp_stats()
                    .map_err(|e| e.to_string())?
                    .unwrap_or_default();
                println!(
                    " {who} SCTP, all loops: connections {} rx_packets {} tx_packets {} retransmits {}",
                    sc.connections, sc.host.rx_packets, sc.host.tx_packets, sc.assoc.retransmits
                );
            }
        }
        let ours_mbs = mib(total, wall);
        let linux_mbs = mib(lmsgs, lsecs);
        println!(
            " iWARP (ours), {queues} loop(s) per end, {conns} connection(s): {ours_mbs:.2} MB/sec aggregate ({total} messages in {wall:.3} s), {:.3} M messages/s",
            total as f64 / wall / 1e6
        );
        println!(
            " Linux TCP over loopback, {queues} flow(s):                {linux_mbs:.2} MB/sec aggregate ({lmsgs} messages in {lsecs:.3} s), {:.3} M messages/s",
            lmsgs as f64 / lsecs / 1e6
        );
        println!(
            " ours / Linux: {:.2}",
            ours_mbs / linux_mbs.max(f64::MIN_POSITIVE)
        );
        json_out.push(json!({
            "test": "write_bw", "bytes": size, "queues": queues, "connections": conns, "transport": carrier,
            "path": path_name(args.threads), "polling": format!("{polling:?}"), "cores": cores,
            "iterations_per_connection": iters,
            "iwarp": { "bw_avg_mib_s": ours_mbs, "msgs_per_s": total as f64 / wall, "seconds": wall, "messages": total, "per_connection": per_conn,
                "client_loops": cs.loops.iter().map(|l| json!({"connections": l.connections, "rx_tcp": l.rx_tcp, "tcp_delivered": l.tcp_delivered})).collect::<Vec<_>>(),
                "server_loops": ss.loops.iter().map(|l| json!({"connections": l.connections, "rx_tcp": l.rx_tcp, "tcp_delivered": l.tcp_delivered})).collect::<Vec<_>>() },
            "linux_loopback": { "flows": queues, "bw_avg_mib_s": linux_mbs, "msgs_per_s": lmsgs as f64 / lsecs, "seconds": lsecs, "messages": lmsgs },
        }));
        if args.stats {
            println!("client:\n{cs}server:\n{ss}");
        }
        for p in pairs {
            p.close().map_err(|e| e.to_string())?;
        }
    }
    let path = args.out.join(format!("write_bw_queues{queues}.json"));
    std::fs::write(
        &path,
        serde_json::to_string_pretty(&json_out).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Parse the command line; usage errors exit 2 with the reason, `--help`
/// and `--version` exit 0 (clap's convention, as tlnc).
fn parse_args() -> Args {
    if let Some(code) = iwarp_bench::netns_cli::cleanup_only("iwarp-perf", "ipf") {
        std::process::exit(code.into());
    }
    let c = <Cli as clap::Parser>::parse();
    if let Some(code) = c.netns_args.start("iwarp-perf", "ipf") {
        std::process::exit(code.into());
    }
    // A setup error, as a usage error: exit 2 (README, "CLI convention").
    if c.netns || c.link == Some(Link::Veth) {
        if let Some(why) = netns_harness::skip_reason() {
            eprintln!("iwarp-perf: --netns: {why}");
            std::process::exit(2);
        }
    }
    if c.verify_checksums && c.link != Some(Link::Memif) {
        eprintln!(
            "iwarp-perf: --verify-checksums is for --link memif (the simulated link is always trusted, AF_XDP always computes them)"
        );
        std::process::exit(2);
    }
    if c.stages && !iwarp_datapath::stages::ENABLED {
        eprintln!(
            "iwarp-perf: --stages needs a build with the stages feature: cargo build --release -p iwarp-bench --features stages --bin iwarp-perf"
        );
        std::process::exit(2);
    }
    match c.crc_backend.as_str() {
        "crc32c" => iwarp_crc::force(iwarp_crc::Backend::Crc32c),
        "crc-fast" => iwarp_crc::force(iwarp_crc::Backend::CrcFast),
        _ => {}
    }
    let demo = c.test == "demo";
    let tests = if demo {
        vec![(Test::WriteLat, vec![64]), (Test::WriteBw, vec![65_536])]
    } else {
        // parse_test accepted it.
        let t = Test::parse(&c.test).unwrap_or(Test::WriteLat);
        let sizes = if c.all {
            (1..=16).map(|k| 1u32 << k).collect()
        } else {
            vec![c.size.unwrap_or(if t.is_lat() { 2 } else { 65_536 })]
        };
        vec![(t, sizes)]
    };
    Args {
        tests,
        iters: c.iters,
        duration: c.duration,
        rate: c.rate,
        busy: c.busy,
        copy_tx: c.copy_tx,
        verify_checksums: c.verify_checksums,
        memif_driver: c.memif_driver,
        no_crc: c.no_crc,
        threads: c.threads,
        doorbell: c.doorbell,
        loop_thread: c.loop_thread,
        core: c.core,
        link: match (c.link, c.sim, c.netns) {
            (Some(l), _, _) => l,
            (None, true, _) => Link::Sim,
            (None, false, true) => Link::Veth,
            (None, false, false) if netns_harness::skip_reason().is_none() => Link::Veth,
            _ => Link::Sim,
        },
        // The namespaces and veth: our link with --link veth (an error
        // where they cannot be made), the Linux baseline's wherever they
        // can be made.
        netns: match (c.sim, c.link) {
            (true, _) | (_, Some(Link::Sim)) => false,
            (_, Some(Link::Veth)) => true,
            (_, Some(Link::Memif)) => netns_harness::skip_reason().is_none(),
            (false, None) => c.netns || netns_harness::skip_reason().is_none(),
        },
        window: c.window,
        mtu: c.mtu,
        out: c.out,
        demo,
        stats: c.stats,
        stages: c.stages,
        sctp: c.transport == "sctp",
        loss_permille: c.loss_permille,
        queues: c.queues.map(|q| (q, c.connections.unwrap_or(u32::from(q)))),
        tuning: c.tuning,
    }
}

/// Namespaces, veth and the addresses of an AF_XDP run; removed on drop.
struct Lab {
    veth: netns_harness::VethPair,
    a: netns_harness::Netns,
    b: netns_harness::Netns,
}

fn lab(mtu: Option<u32>) -> Result<Lab, String> {
    use netns_harness::{End, Netns, VethPair};
    let e = |e: netns_harness::Error| e.to_string();
    let p = iwarp_bench::netns_cli::prefix("ipf");
    let a = Netns::new(&format!("{p}a")).map_err(e)?;
    let b = Netns::new(&format!("{p}b")).map_err(e)?;
    let mut veth = VethPair::new(&format!("{p}v")).map_err(e)?;
    veth.move_to(End::A, &a).map_err(e)?;
    veth.move_to(End::B, &b).map_err(e)?;
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).map_err(e)?;
        if let Some(m) = mtu {
            veth.set_mtu(end, m).map_err(e)?;
        }
        veth.set_up(end).map_err(e)?;
    }
    veth.add_addr(End::A, "10.78.0.1/24").map_err(e)?;
    veth.add_addr(End::B, "10.78.0.2/24").map_err(e)?;
    Ok(Lab { veth, a, b })
}

/// The CPUs of the server's and the client's end: our two poll loops and
/// the Linux baseline's two socket threads are pinned alike.
/// Inline contexts when application threads run the tests (`--threads`,
/// unless `--loop-thread`); else loop threads, busy or adaptive.
fn polling(args: &Args) -> iwarp::Polling {
    if args.threads && !args.loop_thread {
        iwarp::Polling::Inline
    } else if args.busy {
        iwarp::Polling::Busy
    } else {
        iwarp::Polling::Adaptive
    }
}

fn placement(args: &Args) -> (usize, usize) {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let first = args.core.unwrap_or(0) % ncpu;
    (first, (first + 1) % ncpu)
}

/// Whether our two ends trust the link (`HostOptions::trusted_link`):
/// the simulated link always, memif unless `--verify-checksums`, AF_XDP
/// never.
fn link_trusted(args: &Args) -> bool {
    match args.link {
        Link::Sim => true,
        Link::Memif => !args.verify_checksums,
        Link::Veth => false,
    }
}

/// The memif link our contexts use (link 0 of this process's sockets).
const MEMIF_LINK: u32 = 0;

fn contexts(lab: Option<&Lab>, args: &Args) -> Result<(iwarp::Context, iwarp::Context), String> {
    if args.link == Link::Memif {
        return match args.memif_driver {
            MemifDriver::Ours => native_memif_contexts(args),
            MemifDriver::Dpdk => memif_contexts(args),
        };
    }
    let Some(lab) = lab.filter(|_| args.link == Link::Veth) else {
        // The in-memory link, pinned and polled as the real ones are.
        let polling = polling(args);
        return Ok(iwarp::Context::sim_pair_with(
            polling,
            Some(placement(args)),
        ));
    };
    use netns_harness::End;
    let (first, second) = placement(args);
    let opts = |end: End, ns: &netns_harness::Netns, last: u8, core: usize| {
        let mut o = iwarp::XdpOptions::new(
            lab.veth.name(end),
            std::net::Ipv4Addr::new(10, 78, 0, last),
            24,
        );
        o.host.netns = Some(ns.ns_path());
        o.host.core = Some(core);
        o.host.rx_drop_ppm = args.loss_permille.unwrap_or(0) * 1000;
        o.host.copy_tx = args.copy_tx;
        o.host.polling = polling(args);
        args.tuning.apply(&mut o).map(|()| o)
    };
    let s = iwarp::Context::af_xdp(&opts(End::A, &lab.a, 11, first)?)
        .map_err(|e| format!("AF_XDP server: {e}"))?;
    let c = iwarp::Context::af_xdp(&opts(End::B, &lab.b, 12, second)?)
        .map_err(|e| format!("AF_XDP client: {e}"))?;
    Ok((s, c))
}

/// What our two memif contexts (ours or DPDK's) take from the arguments:
/// core, MTU, copying transmit, polling, trust in the link.
fn memif_host(args: &Args, host: &mut iwarp::HostOptions, core: usize) {
    host.core = Some(core);
    host.mtu = args.mtu.map(|m| m as usize);
    host.copy_tx = args.copy_tx;
    host.polling = polling(args);
    host.trusted_link = link_trusted(args);
}

/// Our two contexts on our own memif link in this process (one socket:
/// the server listens, the client connects), pinned and polled as on
/// AF_XDP.
fn native_memif_contexts(args: &Args) -> Result<(iwarp::Context, iwarp::Context), String> {
    use iwarp::memif::Role;
    let sock = iwarp_bench::floor::memif_socket(MEMIF_LINK);
    let (first, second) = placement(args);
    let opts = |role, last: u8, core: usize| {
        let mut o = iwarp::MemifOptions::new(
            role,
            &sock,
            MEMIF_LINK,
            std::net::Ipv4Addr::new(10, 79, 3, last),
            24,
        );
        memif_host(args, &mut o.host, core);
        o
    };
    let s = iwarp::Context::memif(&opts(Role::Server, 11, first))
        .map_err(|e| format!("memif server: {e}"))?;
    let c = iwarp::Context::memif(&opts(Role::Client, 12, second))
        .map_err(|e| format!("memif client: {e}"))?;
    Ok((s, c))
}

/// Our two contexts on a memif link in this process: ports `net_memif0`
/// (server) and `net_memif1` (client) on one socket, pinned and polled as
/// on AF_XDP.
fn memif_contexts(args: &Args) -> Result<(iwarp::Context, iwarp::Context), String> {
    use iwarp::dpdk::MemifRole;
    let eal = iwarp_bench::floor::memif_eal()?;
    let sock = iwarp_bench::floor::memif_socket(MEMIF_LINK);
    let (first, second) = placement(args);
    let opts = |index: u32, role, last: u8, core: usize| {
        let mut o = iwarp::DpdkOptions::memif(
            index,
            role,
            MEMIF_LINK,
            &sock,
            std::net::Ipv4Addr::new(10, 79, 3, last),
            24,
        );
        memif_host(args, &mut o.host, core);
        o
    };
    let s = iwarp::Context::dpdk(&eal, &opts(0, MemifRole::Server, 11, first))
        .map_err(|e| format!("memif server: {e}"))?;
    let c = iwarp::Context::dpdk(&eal, &opts(1, MemifRole::Client, 12, second))
        .map_err(|e| format!("memif client: {e}"))?;
    Ok((s, c))
}

/// Our two contexts on a memif link of `queues` queue pairs in this
/// process (ours, or DPDK's with `--memif-driver dpdk`), a poll loop per
/// queue, not pinned (as `--queues` over the simulated link). Each size
/// gets fresh contexts on a link of its own.
fn memif_queue_contexts(
    args: &Args,
    queues: u16,
    polling: iwarp::Polling,
    cores: Option<&[usize]>,
) -> Result<(iwarp::Context, iwarp::Context), String> {
    // Loop i of a context runs on its `host.core` + i.
    let first_core = |server: bool| cores.map(|c| c[if server { 0 } else { usize::from(queues) }]);
    use iwarp::dpdk::MemifRole;
    use std::sync::atomic::{AtomicU32, Ordering};
    static LINKS: AtomicU32 = AtomicU32::new(0);
    let link = MEMIF_LINK + 10 + LINKS.fetch_add(1, Ordering::Relaxed);
    if args.memif_driver == MemifDriver::Ours {
        use iwarp::memif::Role;
        let sock = iwarp_bench::floor::memif_socket(link);
        let opts = |role, last: u8| {
            let ip = std::net::Ipv4Addr::new(10, 79, 4, last);
            let mut o = iwarp::MemifOptions::new(role, &sock, link, ip, 24);
            o.queue_count = queues;
            o.host.core = first_core(role == Role::Server);
            o.host.mtu = args.mtu.map(|m| m as usize);
            o.host.polling = polling;
            o.host.trusted_link = link_trusted(args);
            o
        };
        let s = iwarp::Context::memif(&opts(Role::Server, 11))
            .map_err(|e| format!("memif server: {e}"))?;
        let c = iwarp::Context::memif(&opts(Role::Client, 12))
            .map_err(|e| format!("memif client: {e}"))?;
        return Ok((s, c));
    }
    let eal = iwarp_bench::floor::memif_eal()?;
    let sock = iwarp_bench::floor::memif_socket(link);
    let opts = |index: u32, role, last: u8| {
        let mut o = iwarp::DpdkOptions::memif(
            index,
            role,
            link,
            &sock,
            std::net::Ipv4Addr::new(10, 79, 4, last),
            24,
        );
        o.queue_count = queues;
        // Each queue's rings count in the port's mbuf pool, which must
        // fit the EAL's memory with the other port's.
        o.queues = iwarp::dpdk::Queues {
            rx_desc: 256,
            tx_desc: 256,
        };
        o.host.core = first_core(role == MemifRole::Server);
        o.host.mtu = args.mtu.map(|m| m as usize);
        o.host.polling = polling;
        o.host.trusted_link = link_trusted(args);
        o
    };
    let s = iwarp::Context::dpdk(&eal, &opts(2 * link, MemifRole::Server, 11))
        .map_err(|e| format!("memif server: {e}"))?;
    let c = iwarp::Context::dpdk(&eal, &opts(2 * link + 1, MemifRole::Client, 12))
        .map_err(|e| format!("memif client: {e}"))?;
    Ok((s, c))
}

/// The latency floor of `link`: a `frame`-octet frame bounced between two
/// pinned, spinning threads with no protocol, on the CPUs our loops use.
fn link_floor(link: Link, args: &Args, iters: u64) -> Result<iwarp_bench::floor::PingPong, String> {
    use iwarp_bench::floor;
    let cores = placement(args);
    let iters = iters.clamp(1000, 100_000);
    match link {
        Link::Veth => floor::xdp_pingpong(64, cores, iters),
        Link::Memif if args.memif_driver == MemifDriver::Ours => {
            floor::native_memif_pingpong(MEMIF_LINK + 1, 64, cores, iters)
        }
        Link::Memif => {
            let eal = floor::memif_eal()?;
            floor::memif_pingpong(&eal, MEMIF_LINK + 1, 64, cores, iters)
        }
        Link::Sim => {
            let (mut a, mut b) = iwarp_datapath::link::MemDevice::pair(256);
            let f = floor::frame(
                64,
                [2, 0, 0, 0, 0, 1],
                [10, 0, 0, 1],
                [2, 0, 0, 0, 0, 2],
                [10, 0, 0, 2],
            );
            floor::pingpong(&mut a, &mut b, &floor::Bounce::new(&f, &f, cores, iters))
        }
    }
}

const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";
const BW_HEADER: &str =
    " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   Gb/s per core";
const RULE: &str =
    "---------------------------------------------------------------------------------------";

fn lat_row(size: u32, r: &LatRun) -> String {
    let h = &r.hist;
    let us = |v: u64| v as f64 / 1000.0;
    format!(
        " {:<6} {:<11} {:<14.2} {:<14.2} {:<16.2} {:<14.2} {:<15.2} {:<22.2} {:.2}",
        size,
        h.len(),
        us(h.min()),
        us(h.max()),
        us(h.value_at_quantile(0.5)),
        h.mean() / 1000.0,
        h.stdev() / 1000.0,
        us(h.value_at_quantile(0.99)),
        us(h.value_at_quantile(0.999)),
    )
}

fn bw_row(r: &BwResult) -> String {
    format!(
        " {:<10} {:<14} {:<18.2} {:<20.2} {:<15.6} {:.2}",
        r.size, r.iters, r.peak_mbs, r.avg_mbs, r.mpps, r.gbps_per_core
    )
}

/// What the latency path is called in the JSON summary.
fn path_name(threads: bool) -> &'static str {
    if threads {
        "threads"
    } else {
        "in_loop"
    }
}

fn lat_title(test: Test, rate: Option<f64>, threads: bool, doorbell: bool) -> String {
    let path = if threads {
        "threads (--threads): application threads post and wait on the CQ"
    } else {
        "in-loop: both ends run as run_in_loop hooks inside their poll loops"
    };
    let values = match (test, rate) {
        (_, Some(r)) => format!(
            "open loop at {r} msg/s: each value is the full response time from the message's scheduled send time (coordinated-omission corrected), not halved"
        ),
        (Test::ReadLat, None) => "values: full round trip of one RDMA Read (as perftest's read_lat)".into(),
        (Test::WriteLat, None) if doorbell => "values: half the round trip of Write+0-octet-Send doorbell each way (--doorbell, or --threads without --busy; RTT/2 as perftest's write_lat reports)".into(),
        (Test::WriteLat, None) => "values: half the round trip of a Write each way, each end watching the last octet of the peer's Write in its own memory (as perftest's write_lat; RTT/2)".into(),
        _ => "values: half the round trip of a Send ping-pong (as perftest's send_lat reports RTT/2)".into(),
    };
    format!("{path}; {values}")
}

struct Job {
    test: Test,
    size: u32,
    /// The Linux baseline waiting as ours does, then the other way.
    linux_lat: Option<LatRun>,
    linux_lat_other: Option<LatRun>,
    linux_bw: Option<BwResult>,
    linux_bw_other: Option<BwResult>,
}

fn run() -> Result<(), String> {
    let args = parse_args();
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    if let Some((queues, conns)) = args.queues {
        return multi_queue(&args, queues, conns as usize);
    }
    if args.link != Link::Veth && args.loss_permille.is_some() {
        return Err("--loss-permille needs --link veth (our loss is injected on AF_XDP)".into());
    }
    if args.link == Link::Memif && args.memif_driver == MemifDriver::Dpdk && !iwarp::dpdk::AVAILABLE
    {
        return Err(
            "--link memif: this build has no DPDK (install libdpdk-dev and rebuild)".into(),
        );
    }
    let lab = if args.netns {
        if let Some(why) = netns_harness::skip_reason() {
            return Err(format!("--netns: {why}"));
        }
        Some(lab(args.mtu)?)
    } else {
        None
    };
    let transport = match args.link {
        Link::Veth => "AF_XDP across two network namespaces over a veth pair",
        Link::Memif if args.memif_driver == MemifDriver::Ours => {
            "our memif (two ends on one socket in this process: shared-memory rings, frames built and read in the ring buffers, no kernel, no DPDK; --memif-driver dpdk for DPDK's net_memif)"
        }
        Link::Memif => {
            "DPDK memif (net_memif: two ports on one socket in this process: shared-memory rings, no kernel; --memif-driver ours for our own)"
        }
        Link::Sim => "the simulated link (in-memory Ethernet between two poll loops)",
    };
    println!("iwarp-perf over {transport}; server and client contexts in this one process");
    println!(
        "CRC32c (MPA's CRC, SCTP's checksum) by {:?} (--crc-backend)",
        iwarp_crc::backend()
    );
    let wait = baseline_wait(args.busy, args.threads, args.loop_thread);
    let other_wait = match wait {
        linux::Wait::Spin => linux::Wait::Block,
        linux::Wait::Block => linux::Wait::Spin,
    };
    if lab.is_some() {
        println!(
            "Linux TCP baseline across the veth: {} — like for like with ours ({}); the other way ({}) follows it as a labelled second line",
            wait.label(),
            match (args.threads, args.busy, args.loop_thread) {
                (false, _, _) => "tests run inside our poll loops, which spin between messages",
                (true, true, _) => "--busy: our loops and application threads spin",
                (true, false, false) => "--threads: our application threads drive their contexts and spin 200 rounds before they sleep, longer than a message's gap",
                (true, false, true) => "--threads --loop-thread: our application threads sleep on the CQ",
            },
            other_wait.word()
        );
        let (s, c) = placement(&args);
        println!(
            "placement: server end on CPU {s}, client end on CPU {c} (our poll loops, and the Linux baseline's socket threads); MTU {} on both veth ends",
            args.mtu.unwrap_or(1500)
        );
    }
    if lab.is_none() {
        println!(
            "no Linux baseline: it runs across a veth between two namespaces, which needs root"
        );
    }
    println!(
        "link checksums (TCP, SCTP CRC32c): {}",
        if link_trusted(&args) {
            "not computed (a trusted link: shared memory between our two ends, as Linux skips the sum on its veth; --verify-checksums computes them over memif)"
        } else {
            "computed and checked at both ends"
        }
    );
    println!(
        "MPA CRC32c on each FPDU: {}",
        if args.no_crc {
            "off (--no-crc: neither end asks for it)"
        } else {
            "on (both ends ask, as siw does; --no-crc turns it off)"
        }
    );
    let plan_for = |t: Test, size: u32| Plan {
        iters: args.iters.unwrap_or(match (args.duration, t.is_lat()) {
            (Some(_), _) => u64::MAX,
            (None, true) if args.demo => 5000,
            (None, false) if args.demo => 20_000,
            (None, true) => 1000,
            (None, false) => 5000,
        }),
        duration: Duration::from_secs_f64(args.duration.unwrap_or(120.0)),
        rate: if t.is_lat() { args.rate } else { None },
        busy: args.busy,
        threads: args.threads,
        // Threads that sleep on the CQ need a completion to wake them.
        doorbell: args.doorbell || (args.threads && !args.busy),
        window: args.window,
        label: format!("{} {size} B", t.name()),
    };
    let mut jobs: Vec<Job> = args
        .tests
        .iter()
        .flat_map(|(t, sizes)| {
            sizes.iter().map(|&s| Job {
                test: *t,
                size: s,
                linux_lat: None,
                linux_lat_other: None,
                linux_bw: None,
                linux_bw_other: None,
            })
        })
        .collect();

    if let Some(permille) = args.loss_permille {
        match &lab {
            Some(l) => {
                println!(
                    "loss: {permille} per thousand at random both ways (Linux: nftables in the server's namespace; ours: received frames dropped at both ends)",
                );
                l.a.set_random_loss(permille)
                    .map_err(|e| format!("--loss-permille: {e}"))?;
                // As tcp-vs-linux: Linux then sends (and loses) MTU-sized
                // packets, not 64 KiB GSO ones.
                for end in [netns_harness::End::A, netns_harness::End::B] {
                    l.veth
                        .disable_segmentation_offload(end)
                        .map_err(|e| format!("--loss-permille: {e}"))?;
                }
                println!("offloads: TSO, GSO and GRO off on both veth ends (the Linux baseline sends MTU-sized packets, as ours)");
                // The same RTO floor for both stacks: Linux's is 200 ms
                // (TCP_RTO_MIN), ours 5 ms unless --rto-min-ms says
                // otherwise; a per-route rto_min brings Linux's down.
                let rto_min = format!("{}ms", args.tuning.rto_min_ms.unwrap_or(5));
                for (ns, end, src) in [
                    (&l.a, netns_harness::End::A, "10.78.0.1"),
                    (&l.b, netns_harness::End::B, "10.78.0.2"),
                ] {
                    ns.ip(&[
                        "route",
                        "replace",
                        "10.78.0.0/24",
                        "dev",
                        l.veth.name(end),
                        "src",
                        src,
                        "rto_min",
                        &rto_min,
                    ])
                    .map_err(|e| format!("--loss-permille: rto_min route: {e}"))?;
                }
                println!(
                    "RTO floor: {rto_min} for both stacks (Linux through a per-route rto_min)"
                );
            }
            None => return Err("--loss-permille needs --netns".into()),
        }
    }
    // Phase 1, the baseline: Linux TCP before our AF_XDP sockets and poll
    // loops exist, so neither competes with the other for the 2 vCPUs.
    if let Some(l) = &lab {
        for (k, job) in jobs.iter_mut().enumerate() {
            for (n, how) in [wait, other_wait].into_iter().enumerate() {
                let w = linux::Where {
                    server_ns: l.a.ns_path(),
                    client_ns: l.b.ns_path(),
                    addr: std::net::SocketAddrV4::new(
                        std::net::Ipv4Addr::new(10, 78, 0, 1),
                        5400 + 2 * k as u16 + n as u16,
                    ),
                    cores: placement(&args),
                    wait: how,
                };
                let mut plan = plan_for(job.test, job.size);
                plan.label = format!("linux ({}) {}", how.word(), plan.label);
                eprintln!("running {} ...", plan.label);
                let iters = plan.iters;
                if job.test.is_lat() {
                    let r = linux::latency(&w, job.test, job.size, &plan, iters)?;
                    *if n == 0 {
                        &mut job.linux_lat
                    } else {
                        &mut job.linux_lat_other
                    } = Some(r);
                } else {
                    let r = linux::bandwidth(&w, job.test, job.size, &plan, iters)?;
                    *if n == 0 {
                        &mut job.linux_bw
                    } else {
                        &mut job.linux_bw_other
                    } = Some(r);
                }
            }
        }
    }
    // The floor of our link, before our loops exist (latency tests only).
    let floor = if jobs.iter().any(|j| j.test.is_lat()) && args.rate.is_none() {
        let iters = jobs
            .iter()
            .map(|j| plan_for(j.test, j.size).iters)
            .max()
            .unwrap_or(1000);
        eprintln!(
            "running the {} link floor (ping-pong, no protocol) ...",
            args.link.name()
        );
        match link_floor(args.link, &args, iters) {
            Ok(f) => Some(f),
            Err(e) => {
                eprintln!("iwarp-perf: link floor not measured: {e}");
                None
            }
        }
    } else {
        None
    };

    // Phase 2: ours.
    let (server, client) = contexts(lab.as_ref(), &args)?;
    // Inline contexts run on the application threads: this one (the
    // client's) and the server's answer thread are pinned where the
    // loops would be.
    let inline = polling(&args) == iwarp::Polling::Inline;
    let (server_cpu, client_cpu) = placement(&args);
    if inline {
        core_affinity::set_for_current(core_affinity::CoreId { id: client_cpu });
    }
    let server_pin = inline.then_some(server_cpu);
    let mut summary = Vec::new();
    let mut files = Vec::new();
    let mut last_test = None;
    for (k, job) in jobs.iter().enumerate() {
        let plan = plan_for(job.test, job.size);
        eprintln!("running iwarp {} ...", plan.label);
        let e = |e: iwarp::Error| format!("{}: {e}", plan.label);
        let pair = ours::connect(
            &server,
            &client,
            9100 + k as u16,
            job.test,
            job.size,
            args.busy,
            // The server answers on a thread only with --threads; otherwise
            // both ends run in their poll loops.
            args.threads,
            server_pin,
            ours::Lower {
                transport: iwarp::Transport::Mpa,
                mpa_crc: !args.no_crc,
            },
            job.test == Test::WriteLat && !plan.doorbell,
        )
        .map_err(e)?;
        // With --transport sctp: the same test over SCTP once the MPA/TCP
        // run is over, on the same contexts, printed beside it.
        let connect_sctp = || {
            ours::connect(
                &server,
                &client,
                9400 + k as u16,
                job.test,
                job.size,
                args.busy,
                args.threads,
                server_pin,
                ours::Lower {
                    transport: iwarp::Transport::Sctp,
                    mpa_crc: !args.no_crc,
                },
                job.test == Test::WriteLat && !plan.doorbell,
            )
            .map_err(|x| format!("{} over SCTP: {x}", plan.label))
        };
        let base = args.out.join(format!("{}_{}", job.test.name(), job.size));
        let hgrm = |suffix: &str| PathBuf::from(format!("{}_{suffix}.hgrm", base.display()));
        if last_test != Some(job.test) {
            println!(
                "{RULE}\n {} ({})",
                job.test.name(),
                if job.test.is_lat() {
                    lat_title(job.test, plan.rate, plan.threads, plan.doorbell)
                } else {
                    format!("window {} outstanding, MB = 2^20 octets; the time includes a final Send round trip confirming arrival", plan.window)
                }
            );
            println!(
                "{RULE}\n{}",
                if job.test.is_lat() {
                    LAT_HEADER
                } else {
                    BW_HEADER
                }
            );
            last_test = Some(job.test);
        }
        let mut entry = json!({
            "test": job.test.name(),
            "bytes": job.size,
            "transport": transport,
            // What the MPA exchange of our MPA/TCP connection settled.
            "mpa_crc_negotiated": pair.mpa_crc(),
        });
        if job.test.is_lat() {
            entry["path"] = json!(path_name(plan.threads));
            if job.test == Test::WriteLat {
                entry["write_lat"] = json!(if plan.doorbell {
                    "doorbell"
                } else {
                    "last_octet"
                });
            }
            let r = pair
                .latency(job.test, job.size, &plan)
                .map_err(|m| format!("{}: {m}", plan.label))?;
            pair.close().map_err(e)?;
            println!("{}", lat_row(job.size, &r));
            output::write_hgrm(&hgrm("iwarp"), &r.hist).map_err(|e| e.to_string())?;
            files.push(hgrm("iwarp"));
            entry["iwarp"] = r.json();
            let ours_label = if plan.threads {
                "iWARP (ours, threads)"
            } else {
                "iWARP (ours, in-loop)"
            };
            let mut curves = vec![output::Curve {
                label: ours_label,
                color: [20, 60, 200],
                hist: &r.hist,
            }];
            if let Some(f) = &floor {
                let h = &f.half_rtt;
                println!(
                    "{}   <- floor of this link ({}: a 64-octet frame bounced, no protocol)",
                    lat_row(64, &LatRun { hist: h.clone() }),
                    args.link.name()
                );
                let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64;
                println!(
                    "   ours over the floor: p50 {:.2}x ({:+.2} usec)  p99 {:.2}x  p99.9 {:.2}x",
                    q(&r.hist, 0.5) / q(h, 0.5).max(1.0),
                    (q(&r.hist, 0.5) - q(h, 0.5)) / 1000.0,
                    q(&r.hist, 0.99) / q(h, 0.99).max(1.0),
                    q(&r.hist, 0.999) / q(h, 0.999).max(1.0),
                );
                entry["floor"] = json!({
                    "link": args.link.name(), "frame_octets": 64,
                    "p50_us": q(h, 0.5) / 1000.0, "p99_us": q(h, 0.99) / 1000.0, "p999_us": q(h, 0.999) / 1000.0,
                    "lost": f.lost,
                });
                entry["ratio_ours_over_floor"] = json!({
                    "p50": q(&r.hist, 0.5) / q(h, 0.5).max(1.0),
                    "p99": q(&r.hist, 0.99) / q(h, 0.99).max(1.0),
                    "p999": q(&r.hist, 0.999) / q(h, 0.999).max(1.0),
                    "p50_above_us": (q(&r.hist, 0.5) - q(h, 0.5)) / 1000.0,
                });
            }
            if let Some(l) = &job.linux_lat {
                println!(
                    "{}   <- Linux TCP over the veth, {} (like for like)",
                    lat_row(job.size, l),
                    wait.word()
                );
                output::write_hgrm(&hgrm("linux"), &l.hist).map_err(|e| e.to_string())?;
                files.push(hgrm("linux"));
                entry["linux"] = l.json();
                let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64;
                let ratio = |p: f64| q(&r.hist, p) / q(&l.hist, p).max(1.0);
                println!(
                    "   ratio ours/Linux: p50 {:.2}  p99 {:.2}  p99.9 {:.2}",
                    ratio(0.5),
                    ratio(0.99),
                    ratio(0.999)
                );
                entry["linux_wait"] = json!(wait.word());
                entry["ratio_ours_over_linux"] =
                    json!({ "p50": ratio(0.5), "p99": ratio(0.99), "p999": ratio(0.999) });
                if let Some(o) = &job.linux_lat_other {
                    println!(
                        "{}   <- Linux TCP over the veth, {} (the other way of waiting; not like for like)",
                        lat_row(job.size, o),
                        other_wait.word()
                    );
                    let ratio = |p: f64| q(&r.hist, p) / q(&o.hist, p).max(1.0);
                    println!(
                        "   ratio ours/Linux ({}): p50 {:.2}  p99 {:.2}  p99.9 {:.2}",
                        other_wait.word(),
                        ratio(0.5),
                        ratio(0.99),
                        ratio(0.999)
                    );
                    entry["linux_other"] = o.json();
                    entry["linux_other_wait"] = json!(other_wait.word());
                }
                curves.push(output::Curve {
                    label: wait.plot_label(),
                    color: [210, 40, 40],
                    hist: &l.hist,
                });
            }
            if let Some(f) = &floor {
                curves.push(output::Curve {
                    label: "floor of the link (no protocol)",
                    color: [40, 150, 60],
                    hist: &f.half_rtt,
                });
            }
            // One line, as sockperf closes with.
            let p50 = r.hist.value_at_quantile(0.5) as f64 / 1000.0;
            let mut line = format!(
                "summary: {} {} B over {}: p50 {p50:.3} usec",
                job.test.name(),
                job.size,
                args.link.name()
            );
            if let Some(l) = &job.linux_lat {
                let lp = l.hist.value_at_quantile(0.5) as f64 / 1000.0;
                line += &format!(
                    ", {:.2}x Linux TCP {} ({lp:.3})",
                    p50 / lp.max(1e-9),
                    wait.word()
                );
            }
            if let Some(f) = &floor {
                let fp = f.p50_ns() / 1000.0;
                line += &format!(", {:+.3} usec over the link floor ({fp:.3})", p50 - fp);
            }
            if args.sctp {
                let sp = connect_sctp()?;
                let s = sp
                    .latency(job.test, job.size, &plan)
                    .map_err(|m| format!("{} over SCTP: {m}", plan.label))?;
                sp.close().map_err(e)?;
                println!("{}   <- iWARP over SCTP (ours)", lat_row(job.size, &s));
                let q = |h: &Histogram<u64>, p: f64| h.value_at_quantile(p) as f64;
                let ratio = |p: f64| q(&s.hist, p) / q(&r.hist, p).max(1.0);
                println!(
                    "   ratio SCTP/MPA (ours): p50 {:.2}  p99 {:.2}  p99.9 {:.2}",
                    ratio(0.5),
                    ratio(0.99),
                    ratio(0.999)
                );
                output::write_hgrm(&hgrm("sctp"), &s.hist).map_err(|e| e.to_string())?;
                files.push(hgrm("sctp"));
                entry["sctp"] = s.json();
                entry["ratio_sctp_over_mpa"] =
                    json!({ "p50": ratio(0.5), "p99": ratio(0.99), "p999": ratio(0.999) });
            }
            println!("{line}");
            let png = PathBuf::from(format!("{}.png", base.display()));
            let title = format!(
                "{} {} B over {}: latency by percentile",
                job.test.name(),
                job.size,
                args.link.name()
            );
            output::plot_percentiles(&png, &title, &curves).map_err(|e| e.to_string())?;
            entry["png"] = json!({
                "file": png.display().to_string(),
                "title": title,
                "curves": curves.iter().map(|c| json!({ "label": c.label, "rgb": c.color })).collect::<Vec<_>>(),
                "x": "percentile, log10(1/(1-percentile)): 0=0%, 1=90%, 2=99%, 3=99.9%, 4=99.99%, 5=99.999%",
                "y": "latency (usec), log10 scale, whole decades around the data",
            });
            files.push(png);
        } else {
            entry["path"] = json!(path_name(plan.threads));
            let tcp_before = client.stats().map(|s| s.tcp).ok();
            let r = pair
                .bandwidth(job.test, job.size, &plan)
                .map_err(|m| format!("{}: {m}", plan.label))?;
            pair.close().map_err(e)?;
            println!("{}", bw_row(&r));
            if let (Some(permille), Some(b), Ok(a)) = (
                args.loss_permille,
                tcp_before,
                client.stats().map(|s| s.tcp),
            ) {
                let rto = a.rto_retransmits - b.rto_retransmits;
                let fast = a.fast_retransmits - b.fast_retransmits;
                let undone = a.spurious_rto_undone - b.spurious_rto_undone;
                println!(
                    "   ours under loss (sender): RTOs {rto} ({undone} undone as spurious), fast retransmits {fast}"
                );
                entry["loss"] = json!({ "permille": permille, "rto_retransmits": rto, "spurious_rto_undone": undone, "fast_retransmits": fast });
            }
            output::write_hgrm(&hgrm("iwarp"), &r.gaps.hist).map_err(|e| e.to_string())?;
            files.push(hgrm("iwarp"));
            entry["iwarp"] = r.json();
            if let Some(l) = &job.linux_bw {
                println!(
                    "{}   <- Linux TCP over the veth, {} (like for like)",
                    bw_row(l),
                    wait.word()
                );
                if let Some(o) = &job.linux_bw_other {
                    println!(
                        "{}   <- Linux TCP over the veth, {} (the other way of waiting)",
                        bw_row(o),
                        other_wait.word()
                    );
                    entry["linux_other"] = o.json();
                    entry["linux_other_wait"] = json!(other_wait.word());
                }
                entry["linux_wait"] = json!(wait.word());
                output::write_hgrm(&hgrm("linux"), &l.gaps.hist).map_err(|e| e.to_string())?;
                files.push(hgrm("linux"));
                entry["linux"] = l.json();
                println!(
                    "   ratio ours/Linux: BW average {:.2}  BW peak {:.2}; CPU ns/octet ours {:.2}, Linux {:.2} (ratio {:.2})",
                    r.avg_mbs / l.avg_mbs,
                    r.peak_mbs / l.peak_mbs,
                    r.cpu_ns_per_byte,
                    l.cpu_ns_per_byte,
                    r.cpu_ns_per_byte / l.cpu_ns_per_byte
                );
                entry["ratio_ours_over_linux"] = json!({ "bw_avg": r.avg_mbs / l.avg_mbs, "bw_peak": r.peak_mbs / l.peak_mbs, "cpu_per_byte": r.cpu_ns_per_byte / l.cpu_ns_per_byte });
                // Where the other way of waiting moved more (a spinning
                // reader can starve the softirq work that feeds it on few
                // CPUs), ours is also set against that: no ratio stands
                // only against the weaker kernel.
                if let Some(o) = job
                    .linux_bw_other
                    .as_ref()
                    .filter(|o| o.avg_mbs > l.avg_mbs)
                {
                    println!(
                        "   ratio ours/Linux {} (the faster kernel here): BW average {:.2}; CPU ns/octet ratio {:.2}",
                        other_wait.word(),
                        r.avg_mbs / o.avg_mbs,
                        r.cpu_ns_per_byte / o.cpu_ns_per_byte
                    );
                    entry["ratio_ours_over_faster_linux"] = json!({ "wait": other_wait.word(), "bw_avg": r.avg_mbs / o.avg_mbs, "cpu_per_byte": r.cpu_ns_per_byte / o.cpu_ns_per_byte });
                }
            } else {
                println!("   CPU ns/octet ours {:.2}", r.cpu_ns_per_byte);
            }
            if let Some((u, k)) = r.sender_ns_per_byte {
                println!(
                    "   our sending loop alone: CPU ns/octet {:.2} (user {u:.2}, kernel {k:.2}; 10 ms ticks)",
                    u + k
                );
            }
            if args.sctp {
                let sp = connect_sctp()?;
                let s = sp
                    .bandwidth(job.test, job.size, &plan)
                    .map_err(|m| format!("{} over SCTP: {m}", plan.label))?;
                sp.close().map_err(e)?;
                println!("{}   <- iWARP over SCTP (ours)", bw_row(&s));
                println!(
                    "   ratio SCTP/MPA (ours): BW average {:.2}  BW peak {:.2}; CPU ns/octet {:.2} (ratio {:.2})",
                    s.avg_mbs / r.avg_mbs,
                    s.peak_mbs / r.peak_mbs,
                    s.cpu_ns_per_byte,
                    s.cpu_ns_per_byte / r.cpu_ns_per_byte
                );
                output::write_hgrm(&hgrm("sctp"), &s.gaps.hist).map_err(|e| e.to_string())?;
                files.push(hgrm("sctp"));
                entry["sctp"] = s.json();
                entry["ratio_sctp_over_mpa"] = json!({ "bw_avg": s.avg_mbs / r.avg_mbs, "bw_peak": s.peak_mbs / r.peak_mbs, "cpu_per_byte": s.cpu_ns_per_byte / r.cpu_ns_per_byte });
                entry["sctp_bw_avg"] = json!(s.avg_mbs);
            }
            // One line, as sockperf closes with, and the bars.
            let mut line = format!(
                "summary: {} {} B over {}: {:.0} MB/s",
                job.test.name(),
                job.size,
                args.link.name(),
                r.avg_mbs
            );
            let mut bars = vec![output::Bar {
                label: "ours (MPA/TCP)",
                value: r.avg_mbs,
                color: [20, 60, 200],
            }];
            if let Some(l) = &job.linux_bw {
                line += &format!(
                    ", {:.2}x Linux TCP {} ({:.0})",
                    r.avg_mbs / l.avg_mbs,
                    wait.word(),
                    l.avg_mbs
                );
                if let Some(o) = job
                    .linux_bw_other
                    .as_ref()
                    .filter(|o| o.avg_mbs > l.avg_mbs)
                {
                    line += &format!(
                        ", {:.2}x Linux TCP {} ({:.0})",
                        r.avg_mbs / o.avg_mbs,
                        other_wait.word(),
                        o.avg_mbs
                    );
                }
                bars.push(output::Bar {
                    label: wait.plot_label(),
                    value: l.avg_mbs,
                    color: [210, 40, 40],
                });
            }
            if let Some(o) = &job.linux_bw_other {
                bars.push(output::Bar {
                    label: other_wait.plot_label(),
                    value: o.avg_mbs,
                    color: [240, 150, 150],
                });
            }
            if let Some(v) = entry["sctp_bw_avg"].as_f64() {
                bars.push(output::Bar {
                    label: "ours (SCTP)",
                    value: v,
                    color: [110, 140, 230],
                });
            }
            println!("{line}");
            let png = PathBuf::from(format!("{}.png", base.display()));
            let title = format!(
                "{} {} B over {}: average bandwidth",
                job.test.name(),
                job.size,
                args.link.name()
            );
            output::plot_bars(&png, &title, "MB/s (MiB per second)", &bars)
                .map_err(|e| e.to_string())?;
            entry["png"] = json!({
                "file": png.display().to_string(),
                "title": title,
                "bars": bars.iter().map(|b| json!({ "label": b.label, "mb_s": b.value })).collect::<Vec<_>>(),
                "y": "average bandwidth, MB/s (2^20 octets per second), linear from 0",
            });
            files.push(png);
        }
        summary.push(entry);
    }
    if args.stats {
        println!("{RULE}\ncounters (--stats)");
        for (who, ctx) in [("server", &server), ("client", &client)] {
            let st = ctx.stats().map_err(|e| format!("{who} stats: {e}"))?;
            println!("{who} context ({}):", ctx.addr());
            print!("{st}");
            if let Some(sc) = ctx.sctp_stats().map_err(|e| format!("{who} stats: {e}"))? {
                println!("sctp:");
                for line in sc.to_string().lines() {
                    println!("  {line}");
                }
            }
        }
    }
    drop((server, client));
    if args.stages {
        print_stages();
    }
    let json_path = args.out.join(if args.demo {
        "demo.json".to_string()
    } else {
        format!("{}.json", args.tests[0].0.name())
    });
    let doc = json!({
        "tool": "iwarp-perf",
        "transport": transport,
        "busy_polling": args.busy,
        "polling": format!("{:?}", polling(&args)),
        "link": args.link.name(),
        "memif_driver": (args.link == Link::Memif).then(|| args.memif_driver.name()),
        "link_checksums": if link_trusted(&args) { "trusted" } else { "computed" },
        "mpa_crc": !args.no_crc,
        "linux_wait": wait.word(),
        "latency_path": path_name(args.threads),
        "latency_path_note": if args.threads { "latency tests from application threads that post and wait on the CQ (--threads)" } else { "latency tests with both ends inside their poll loops (run_in_loop hooks)" },
        "rate": args.rate,
        "cpu_note": "process CPU (user+system, all threads, /proc/self/stat) over the bandwidth run; ours: both poll loops (and both application threads with --threads); Linux: both socket threads' syscalls plus the softirq work the kernel charged to them (softirq run in ksoftirqd is not counted)",
        "results": summary,
    });
    std::fs::write(
        &json_path,
        serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?,
    )
    .map_err(|e| e.to_string())?;
    files.push(json_path);
    println!("{RULE}");
    if jobs.iter().any(|j| !j.test.is_lat()) {
        println!("CPU per octet and Gb/s per core: process CPU over the bandwidth run, both ends (ours: two poll loops, plus two application threads with --threads; Linux: both socket threads incl. softirq charged to them)");
    }
    for f in &files {
        println!("wrote {}", f.display());
    }
    drop(lab);
    Ok(())
}

/// `--stages`: each ended loop's hops by stage (`iwarp_datapath::stages`).
fn print_stages() {
    println!("{RULE}\nwhere a hop's time goes, per poll loop (--stages; ns, p50 / p90): a hop is a round that took a frame and published the answer its hook posted");
    for l in iwarp_datapath::stages::take() {
        if l.hops == 0 {
            continue;
        }
        println!(
            "loop thread {} ({} hops timed, {} other rounds that received and published):",
            l.thread, l.hops, l.other
        );
        for (name, p50, p90) in &l.stages {
            println!("  {name:<22} {p50:>6} / {p90:>6}");
        }
    }
}

/// perftest mode: `iwarp-perf TEST -R [perftest flags] --iface IF --ip ADDR
/// [SERVER]`, or the binary called (by a link) as `ib_write_lat` and so on.
/// `None` when the command line is not one.
fn perftest_mode() -> Option<Result<(), String>> {
    use iwarp_bench::perftest::{self, Kind};
    let argv: Vec<String> = std::env::args().collect();
    let prog = std::path::Path::new(argv.first()?)
        .file_name()?
        .to_string_lossy()
        .into_owned();
    let (kind, rest) = match Kind::parse(&prog) {
        Some(k) if prog.starts_with("ib_") => (k, &argv[1..]),
        _ => {
            let k = Kind::parse(argv.get(1)?)?;
            if !argv[2..].iter().any(|a| a == "-R" || a == "--rdma_cm") {
                return None;
            }
            (k, &argv[2..])
        }
    };
    Some((|| {
        let (o, stack) =
            perftest::parse(kind, rest).map_err(|e| format!("{e}\n{PERFTEST_USAGE}"))?;
        let ctx = stack
            .open(o.server.is_none(), Duration::from_secs(5))
            .map_err(|e| format!("{e}\n{PERFTEST_USAGE}"))?;
        perftest::run(&ctx, &o).map(|_| ())
    })())
}

const PERFTEST_USAGE: &str = "perftest mode: iwarp-perf TEST -R [-p PORT] [-s SIZE | -a] [-n ITERS] [-t TX] [-r RX] [-o READS]
                  [--report_gbits] (--iface IFACE [--in-netns NS] |
                   --memif-socket PATH [--memif-driver ours|dpdk] [--trusted-link])
                  --ip ADDR[/PREFIX] [--gateway GW] [--core N] [--busy] [--loop-thread] [--no-crc] [SERVER]
  Client or server of rdma-core's ib_TEST -R (perftest's other flags, such as -d or -F, are accepted and
  ignored). Without SERVER it waits for a perftest client. --memif-socket: a memif link on that socket
  file instead of AF_XDP (no kernel; the server end creates the socket, the client connects), on our
  own memif or (--memif-driver dpdk) DPDK's net_memif; either end may use either;
  --trusted-link, on both sides: TCP checksums and SCTP's CRC32c neither computed nor checked there.
  The test's thread drives the stack (run to completion, one thread on one core works); --loop-thread
  runs it on a poll loop thread instead (--core N pins that loop; --busy: the loop and the CQ spin).";

fn main() -> ExitCode {
    // File capabilities given without the effective bit (the container
    // image's: `setcap …+p`) become effective here, before any thread.
    if let Err(e) = iwarp_xdp::caps::raise_permitted() {
        eprintln!(
            "{}: making the permitted capabilities effective: {e}",
            env!("CARGO_BIN_NAME")
        );
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    if let Some(r) = perftest_mode() {
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("iwarp-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("iwarp-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

pub use iwarp_bench::cpu_time;

#[cfg(test)]
mod tests {
    use super::*;

    /// The default latency comparison (in-loop, adaptive loops) is against
    /// a spinning kernel, and so is every busy one and every one whose
    /// application threads drive their contexts; only application threads
    /// that sleep on the CQ of a loop thread are compared with blocking
    /// sockets.
    #[test]
    fn default_latency_baseline_spins() {
        for loop_thread in [false, true] {
            assert_eq!(baseline_wait(false, false, loop_thread), linux::Wait::Spin);
            assert_eq!(baseline_wait(true, false, loop_thread), linux::Wait::Spin);
            assert_eq!(baseline_wait(true, true, loop_thread), linux::Wait::Spin);
        }
        assert_eq!(baseline_wait(false, true, false), linux::Wait::Spin);
        assert_eq!(baseline_wait(false, true, true), linux::Wait::Block);
    }
}
