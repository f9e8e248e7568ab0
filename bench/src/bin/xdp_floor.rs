//! The frame floor: how fast copy-mode AF_XDP moves frames across a veth
//! between two of our sockets, with no protocol, and with only the work no
//! iWARP stack can avoid. One pinned thread transmits full-MTU IPv4 frames
//! through one `XdpDevice`, another receives them through the other end's
//! device; the receiver's count is the figure. Two runs per MTU:
//!
//! * `frames`: the frame is built once and only handed to `FrameDevice::tx`
//!   (its one copy into the transmit UMEM); the receiver counts. What the
//!   kernel does per frame and per octet in copy mode (an skb per frame, the
//!   copies into it and into the receiving UMEM, veth, the XDP program) is
//!   in it, and nothing else.
//! * `copy+crc`: what an iWARP sender and receiver must add at the least:
//!   the sender gathers each frame's payload from a 16 MiB source buffer
//!   (the registered region) into the UMEM and computes its CRC32c; the
//!   receiver computes the CRC32c of each payload and copies it into a
//!   16 MiB destination buffer (DDP placement).
//!
//! The sender keeps at most `--window` frames in flight (sent and not yet
//! counted by the receiver, read from a shared counter: an acknowledgement
//! that costs nothing), so frames are not sent only to be dropped at a full
//! receive ring; drops are still counted and printed.
//! `iwarp-perf write_bw` at the same MTU, divided by the `copy+crc` rate,
//! says how much of the ceiling our TCP, MPA, DDP and RDMAP leave unused.
//!
//! Root only: it creates two namespaces and a veth pair (removed on exit, on
//! error and on SIGINT/SIGTERM; `--netns-prefix` names them, `--cleanup`
//! removes those of dead runs).
//!
//! ```text
//! xdp-floor [--mtu N[,N...]] [--secs S] [--core C] [--window W]
//! xdp-floor --pingpong [--link xdp,memif,dpdk-memif] [-n ITERS] [--frame OCTETS] [--core C]
//! ```
//!
//! `--pingpong` measures the latency floor instead: one frame bounced
//! between two pinned, spinning threads over AF_XDP on a veth, over our
//! memif and over DPDK's memif, RTT/2 percentiles (`iwarp_bench::floor`).

use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp_datapath::runtime::FrameDevice;
use iwarp_xdp::{in_netns, Config, XdpDevice};
use netns_harness::{End, Netns, VethPair};

/// The frame floor of copy-mode AF_XDP on a veth (bandwidth), and the
/// ping-pong latency floor of AF_XDP and memif, ours and DPDK's (`--pingpong`).
#[derive(Debug, clap::Parser)]
#[command(name = "xdp-floor", version)]
struct Cli {
    /// MTUs of both veth ends, one run each (bandwidth mode).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_value = "1500,9000",
          value_parser = clap::value_parser!(u32).range(68..=65_000))]
    mtu: Vec<u32>,
    /// Seconds of transmission per run (bandwidth mode).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u64).range(1..=30))]
    secs: u64,
    /// First CPU: the sender (or ping-pong initiator) there, the receiver
    /// (or echo side) on the next.
    #[arg(long, default_value_t = 0)]
    core: usize,
    /// Frames in flight at most (bandwidth mode).
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u64).range(1..=512))]
    window: u64,
    /// Latency instead of bandwidth: bounce one frame of --frame octets
    /// between two pinned, spinning threads, no protocol; prints RTT/2.
    #[arg(long)]
    pingpong: bool,
    /// Ping-pong round trips recorded (after 1000 unrecorded).
    #[arg(short = 'n', long, default_value_t = 100_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    iters: u64,
    /// Ping-pong frame length in octets, Ethernet header included.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(34..=1514))]
    frame: u32,
    /// Ping-pong links: xdp (AF_XDP on a veth, root), memif (our memif,
    /// two ends in this process), dpdk-memif (DPDK's, two ports in this
    /// process), or several.
    #[arg(long, value_delimiter = ',', default_value = "xdp,memif,dpdk-memif")]
    link: Vec<FloorLink>,
    #[command(flatten)]
    netns: iwarp_bench::netns_cli::NetnsArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum FloorLink {
    Xdp,
    Memif,
    DpdkMemif,
}

struct Args {
    mtus: Vec<u32>,
    secs: u64,
    core: usize,
    window: u64,
    /// CPUs this process may use, read before any thread is pinned (a
    /// pinned thread's own count is 1).
    ncpu: usize,
}

struct Run {
    sent: u64,
    got: u64,
    octets: u64,
    secs: f64,
    /// Frames the receiving socket's kernel side dropped (ring full, no
    /// fill buffer, other).
    dropped: u64,
    /// The sending thread's CPU ns per payload octet sent, user and kernel.
    sender_ns: Option<(f64, f64)>,
}

/// CPU seconds (user, kernel) of the calling thread so far, from
/// `/proc/thread-self/stat` (10 ms ticks); `None` where it cannot be read.
fn thread_cpu() -> Option<(f64, f64)> {
    let stat = std::fs::read_to_string("/proc/thread-self/stat").ok()?;
    // After the command name (in parentheses, which may hold spaces):
    // field 3 onwards; utime and stime are fields 14 and 15.
    let after = stat.rsplit(')').next()?;
    let f: Vec<&str> = after.split_whitespace().collect();
    let secs = |i: usize| f.get(i)?.parse::<f64>().ok().map(|t| t / 100.0);
    Some((secs(11)?, secs(12)?))
}

/// Pin the calling thread to CPU `core`, by number (`get_core_ids` lists
/// only the calling thread's own mask).
fn pin(core: usize) {
    if !core_affinity::set_for_current(core_affinity::CoreId { id: core }) {
        eprintln!("xdp-floor: could not pin a thread to CPU {core}");
    }
}

/// CRC32c as the stack computes it.
fn crc(p: &[u8]) -> u32 {
    let mut c = iwarp_proto::crc::Crc32c::new();
    c.update(p);
    c.value()
}

/// The source and destination buffers of a `copy+crc` run (the registered
/// regions of an iWARP transfer).
const REGION: usize = 16 << 20;
/// Ethernet + IPv4 header octets in each frame.
const HEADERS: usize = 34;

fn run_one(mtu: u32, args: &Args, work: bool) -> Result<Run, String> {
    let e = |e: netns_harness::Error| e.to_string();
    let p = iwarp_bench::netns_cli::prefix("xf");
    let na = Netns::new(&format!("{p}a")).map_err(e)?;
    let nb = Netns::new(&format!("{p}b")).map_err(e)?;
    let mut veth = VethPair::new(&format!("{p}v")).map_err(e)?;
    veth.move_to(End::A, &na).map_err(e)?;
    veth.move_to(End::B, &nb).map_err(e)?;
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).map_err(e)?;
        veth.set_mtu(end, mtu).map_err(e)?;
        veth.set_up(end).map_err(e)?;
    }
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 79, 0, 1), Ipv4Addr::new(10, 79, 0, 2));
    let open = |ns: &Netns, end: End, ip: Ipv4Addr| {
        let cfg = Config::new(veth.name(end), ip.octets());
        in_netns(&ns.ns_path(), || XdpDevice::open(&cfg))
            .and_then(|r| r)
            .map_err(|err| format!("AF_XDP on {}: {err}", veth.name(end)))
    };
    let mut tx = open(&na, End::A, ip_a)?;
    let mut rx = open(&nb, End::B, ip_b)?;
    let f = iwarp_bench::floor::frame(
        14 + mtu as usize,
        tx.mac_address(),
        ip_a.octets(),
        rx.mac_address(),
        ip_b.octets(),
    );
    let payload = f.len() - HEADERS;
    let ncpu = args.ncpu;
    let (c_tx, c_rx) = (args.core % ncpu, (args.core + 1) % ncpu);
    let done = Arc::new(AtomicBool::new(false));
    // Frames the receiver has counted: the sender's (free) acknowledgement.
    let counted = Arc::new(AtomicU64::new(0));
    let (d, c) = (done.clone(), counted.clone());
    let receiver = std::thread::spawn(move || {
        pin(c_rx);
        let mut region = if work { vec![0u8; REGION] } else { Vec::new() };
        let (mut got, mut octets, mut at, mut crcs) = (0u64, 0u64, 0usize, 0u32);
        let mut first: Option<Instant> = None;
        let mut last = Instant::now();
        // Until the sender is done and nothing has come for 100 ms.
        loop {
            let n = rx.rx_burst(64, &mut |fr| {
                octets += fr.len() as u64;
                if work && fr.len() > HEADERS {
                    let p = &fr[HEADERS..];
                    crcs ^= crc(p);
                    if at + p.len() > region.len() {
                        at = 0;
                    }
                    region[at..at + p.len()].copy_from_slice(p);
                    at += p.len();
                }
            });
            if n > 0 {
                got += n as u64;
                c.store(got, Ordering::Release);
                last = Instant::now();
                first.get_or_insert(last);
            } else if d.load(Ordering::Acquire) && last.elapsed() > Duration::from_millis(100) {
                break;
            }
        }
        let secs = first.map_or(0.0, |t| last.duration_since(t).as_secs_f64());
        let k = rx.stats().map(|s| s.kernel).unwrap_or_default();
        let dropped = k.rx_dropped + k.rx_ring_full + k.rx_fill_ring_empty_descs;
        std::hint::black_box((crcs, &region));
        (got, octets, secs, dropped)
    });
    pin(c_tx);
    let source: Vec<u8> = if work {
        (0..REGION).map(|i| (i * 31 + 7) as u8).collect()
    } else {
        Vec::new()
    };
    let (mut sent, mut at, mut crcs) = (0u64, 0usize, 0u32);
    // Frames taken as lost (dropped by the kernel): a window that has not
    // moved for 20 ms is given back, as a retransmission timeout would.
    let (mut lost, mut moved, mut last_counted) = (0u64, Instant::now(), 0u64);
    let cpu0 = thread_cpu();
    let end = Instant::now() + Duration::from_secs(args.secs);
    let mut now = Instant::now();
    'run: while now < end {
        let c = counted.load(Ordering::Acquire);
        if c != last_counted {
            (last_counted, moved) = (c, now);
        } else if now.duration_since(moved) > Duration::from_millis(20) {
            (lost, moved) = (sent.saturating_sub(c), now);
        }
        for _ in 0..64 {
            // Frames taken as lost may still arrive late (and be counted):
            // then nothing is in flight, not less than nothing.
            let acked = lost.saturating_add(counted.load(Ordering::Acquire));
            if sent.saturating_sub(acked) >= args.window {
                break;
            }
            let ok = if work {
                if at + payload > source.len() {
                    at = 0;
                }
                let p = &source[at..at + payload];
                crcs ^= crc(p);
                at += payload;
                tx.tx_parts(&[&f[..HEADERS], p])
            } else {
                tx.tx(&f)
            };
            if !ok {
                break;
            }
            sent += 1;
        }
        tx.flush();
        // One clock read per burst.
        now = Instant::now();
        if receiver.is_finished() {
            break 'run;
        }
    }
    std::hint::black_box(crcs);
    let sent_octets = (sent * payload as u64) as f64;
    let sender_ns = match (cpu0, thread_cpu()) {
        (Some((u0, k0)), Some((u1, k1))) if sent_octets > 0.0 => {
            Some(((u1 - u0) * 1e9 / sent_octets, (k1 - k0) * 1e9 / sent_octets))
        }
        _ => None,
    };
    done.store(true, Ordering::Release);
    let (got, octets, secs, dropped) = receiver
        .join()
        .map_err(|_| "receiver panicked".to_string())?;
    Ok(Run {
        sent,
        got,
        octets,
        secs,
        dropped,
        sender_ns,
    })
}

fn main() {
    let cli = <Cli as clap::Parser>::parse();
    if let Some(code) = cli.netns.start("xdp-floor", "xf") {
        std::process::exit(code.into());
    }
    let args = Args {
        mtus: cli.mtu.clone(),
        secs: cli.secs,
        core: cli.core,
        window: cli.window,
        ncpu: std::thread::available_parallelism().map_or(1, |n| n.get()),
    };
    if cli.pingpong {
        std::process::exit(pingpong_main(&cli, &args));
    }
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("xdp-floor: needs namespaces and veth: {why}");
        std::process::exit(2);
    }
    println!(
        "window {} frames; frames: no protocol work; copy+crc: one copy and a CRC32c per payload at each end",
        args.window
    );
    println!(" MTU  run        frames sent  frames got  dropped   Mpps got  Gb/s got (frames)  MB/s payload  sender CPU ns/octet (user+kernel)");
    for &mtu in &args.mtus {
        for work in [false, true] {
            let name = if work { "copy+crc" } else { "frames" };
            match run_one(mtu, &args, work) {
                Ok(r) if r.secs > 0.0 => println!(
                    "{mtu:>5} {name:<9} {:>12} {:>11} {:>8} {:>10.3} {:>18.2} {:>13.0}  {}",
                    r.sent,
                    r.got,
                    r.dropped,
                    r.got as f64 / r.secs / 1e6,
                    r.octets as f64 * 8.0 / r.secs / 1e9,
                    (r.octets - r.got * HEADERS as u64) as f64 / r.secs / (1u64 << 20) as f64,
                    r.sender_ns.map_or("-".to_string(), |(u, k)| format!(
                        "{:.2} ({u:.2}+{k:.2})",
                        u + k
                    ))
                ),
                Ok(r) => {
                    eprintln!(
                        "xdp-floor: MTU {mtu}: {} frames sent, none received",
                        r.sent
                    );
                    std::process::exit(1);
                }
                Err(e) => {
                    eprintln!("xdp-floor: MTU {mtu}: {e}");
                    std::process::exit(1);
                }
            }
        }
    }
}

/// `--pingpong`: each link's RTT/2 floor; the exit status.
fn pingpong_main(cli: &Cli, args: &Args) -> i32 {
    let cores = (args.core % args.ncpu, (args.core + 1) % args.ncpu);
    println!(
        "ping-pong floor: one {}-octet frame, no protocol, initiator on CPU {} and echo on CPU {}, both spinning; RTT/2 in usec",
        cli.frame, cores.0, cores.1
    );
    println!(" link                      samples     p50      p99    p99.9      max   lost");
    let mut status = 0;
    for link in &cli.link {
        let r = match link {
            FloorLink::Xdp => {
                iwarp_bench::floor::xdp_pingpong(cli.frame as usize, cores, cli.iters)
            }
            FloorLink::Memif => {
                iwarp_bench::floor::native_memif_pingpong(9, cli.frame as usize, cores, cli.iters)
            }
            FloorLink::DpdkMemif => {
                let eal = match iwarp_bench::floor::memif_eal() {
                    Ok(e) => e,
                    Err(e) => {
                        eprintln!("xdp-floor: memif: {e}");
                        status = 1;
                        continue;
                    }
                };
                iwarp_bench::floor::memif_pingpong(&eal, 9, cli.frame as usize, cores, cli.iters)
            }
        };
        match r {
            Ok(p) => println!(
                "{}",
                p.row(match link {
                    FloorLink::Xdp => "AF_XDP (copy mode) veth",
                    FloorLink::Memif => "our memif",
                    FloorLink::DpdkMemif => "DPDK memif",
                })
            ),
            Err(e) => {
                eprintln!("xdp-floor: {link:?}: {e}");
                status = 1;
            }
        }
    }
    status
}
