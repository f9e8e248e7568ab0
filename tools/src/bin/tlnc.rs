//! `tlnc`: netcat over tcp-lite on AF_XDP.
//!
//! ```text
//! tlnc --iface IF --ip ADDR/PREFIX (--connect ADDR:PORT | --listen PORT)
//!      [--input FILE] [--output FILE] [--share-address [--local-ports-from PORT]]
//! ```
//!
//! Sends the input (default stdin) and writes what arrives to the output
//! (default stdout) until both directions are closed. Exit status 0 only
//! after a clean close; 1 for a connection error (refused, reset, timed
//! out); 2 for a usage or setup error (no interface, no privileges). Usage
//! errors (clap's) name the flag and the reason; `--help` and `--version`
//! exit 0.
//!
//! The stack's `tracing` events (connect, accept, retransmission timeouts,
//! a checksum-offload diagnosis) go to stderr, filtered by `RUST_LOG`
//! (default `warn`).

use std::fs::File;
use std::io::{self, BufWriter, Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use iwarp_datapath::runtime::{spawn_probed, DeviceReader, LoopHandle, Mode};
use iwarp_datapath::stack::{
    Command, Output, SendError, Stack, StackConfig, StreamShared, Transport, Ulp, WaitError,
};
use iwarp_proto::mem::MemoryTable;
use iwarp_tools::Cidr;
use iwarp_xdp::{Config as XdpConfig, XdpDevice, XskMode};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

/// Netcat over tcp-lite on AF_XDP: sends stdin (or --input) and writes what
/// arrives to stdout (or --output) until both directions are closed.
///
/// Exit status: 0 after a clean close; 1 for a connection error (refused,
/// reset, timed out); 2 for a usage or setup error (no such interface, no
/// privileges, memlock).
#[derive(Debug, Parser)]
#[command(name = "tlnc", version)]
struct Args {
    /// Interface to take over (its XDP hook and queue 0).
    #[arg(long)]
    iface: String,
    /// Our address and prefix, e.g. 10.0.0.1/24 (not configured in the kernel).
    #[arg(long, value_name = "ADDR/PREFIX", value_parser = parse_ip)]
    ip: Cidr,
    /// Connect to ADDR:PORT.
    #[arg(
        long,
        value_name = "ADDR:PORT",
        conflicts_with = "listen",
        required_unless_present = "listen",
        value_parser = parse_peer
    )]
    connect: Option<SocketAddrV4>,
    /// Accept one connection on PORT (1-65535).
    #[arg(long, value_name = "PORT", value_parser = clap::value_parser!(u16).range(1..))]
    listen: Option<u16>,
    /// Send this file instead of stdin.
    #[arg(long)]
    input: Option<PathBuf>,
    /// Write what arrives here instead of stdout.
    #[arg(long)]
    output: Option<PathBuf>,
    /// Router for off-link destinations.
    #[arg(long)]
    gateway: Option<Ipv4Addr>,
    /// Pin the poll loop to this core.
    #[arg(long)]
    core: Option<usize>,
    /// Busy-poll (never sleep) instead of backing off when idle.
    #[arg(long)]
    busy: bool,
    /// AF_XDP bind mode.
    #[arg(long, value_enum, default_value_t = XdpMode::Auto)]
    xdp_mode: XdpMode,
    /// Give up after this many seconds (0: never).
    #[arg(long, default_value_t = 0)]
    timeout: u64,
    /// Minimum retransmission timeout in milliseconds, 1 to 60000 (RFC 6298
    /// says 1000; LANs use less).
    #[arg(long, value_name = "MS", default_value_t = 200,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    rto_min_ms: u64,
    /// Initial sequence number to use instead of RFC 6528's (to test sequence wrap).
    #[arg(long)]
    isn: Option<u32>,
    /// Initial retransmission timeout in milliseconds (before an RTT
    /// sample; RFC 6298: 1000).
    #[arg(long, value_name = "MS", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=60_000))]
    rto_initial_ms: u64,
    /// TIME-WAIT duration in milliseconds (2 MSL).
    #[arg(long, value_name = "MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    time_wait_ms: u64,
    /// TCP receive window offered, in octets (1 KiB to 1 GiB).
    #[arg(long, value_name = "OCTETS", default_value_t = 1 << 20,
          value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)))]
    rcv_buf: u32,
    /// TCP send buffer, in octets (1 KiB to 1 GiB).
    #[arg(long, value_name = "OCTETS", default_value_t = 4 << 20,
          value_parser = clap::value_parser!(u32).range(1024..=(1 << 30)))]
    snd_buf: u32,
    /// Largest IP datagram to send (default: the interface's MTU; a larger
    /// value is refused).
    #[arg(long, value_parser = clap::value_parser!(u32).range(576..=65_535))]
    mtu: Option<u32>,
    /// Interface queue to bind.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..64))]
    queue: u32,
    /// Entries of each AF_XDP ring (a power of two, 64 to 32768).
    #[arg(long, default_value_t = 2048, value_parser = parse_ring)]
    ring_size: u32,
    /// UMEM chunk size.
    #[arg(long, default_value_t = 4096, value_parser = parse_frame_size)]
    frame_size: u32,
    /// UMEM chunks (more than --ring-size).
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(128..=1 << 20))]
    frame_count: u32,
    /// Kick the kernel on every transmit instead of only when it asks
    /// (turns XDP_USE_NEED_WAKEUP off).
    #[arg(long)]
    no_need_wakeup: bool,
    /// Busy-poll the socket for this many microseconds per call
    /// (SO_PREFER_BUSY_POLL, SO_BUSY_POLL; refusals are warnings).
    #[arg(long, value_name = "USECS", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    busy_poll_usecs: Option<u32>,
    /// Packets per busy-poll round (SO_BUSY_POLL_BUDGET), with --busy-poll-usecs.
    #[arg(long, value_name = "PACKETS", default_value_t = 64, requires = "busy_poll_usecs",
          value_parser = clap::value_parser!(u32).range(1..=65_535))]
    busy_poll_budget: u32,
    /// Take TCP segments whose checksum holds only the pseudo-header sum
    /// (a veth peer with TX checksum offload on; the other fix is
    /// `ethtool -K <peer> tx off`).
    #[arg(long)]
    accept_partial_checksum: bool,
    /// Print counters (stack, TCP, interface, poll loop, AF_XDP socket and
    /// kernel, bind mode obtained) and throughput to stderr at the end.
    #[arg(long)]
    stats: bool,
    /// --ip is the interface's own address, which the kernel keeps: only
    /// TCP to our port (--listen, or --local-ports-from and up for
    /// --connect) comes to us; ARP and all else stays with the kernel,
    /// which also resolves our neighbours.
    #[arg(long)]
    share_address: bool,
    /// With --share-address: our connections' local ports are
    /// PORT..=65535 (reserve them: sysctl
    /// net.ipv4.ip_local_reserved_ports=PORT-65535).
    #[arg(long, value_name = "PORT", default_value_t = iwarp_xdp::SharedPorts::DEFAULT_LOCAL_FROM,
          requires = "share_address", value_parser = clap::value_parser!(u16).range(1024..))]
    local_ports_from: u16,
}

/// `--ring-size`: a power of two the kernel accepts.
fn parse_ring(s: &str) -> Result<u32, String> {
    let n: u32 = s.parse().map_err(|_| format!("not a number: {s:?}"))?;
    if !n.is_power_of_two() || !(64..=32_768).contains(&n) {
        return Err(format!("{n} is not a power of two from 64 to 32768"));
    }
    Ok(n)
}

/// `--frame-size`: 2048 or 4096.
fn parse_frame_size(s: &str) -> Result<u32, String> {
    match s {
        "2048" => Ok(2048),
        "4096" => Ok(4096),
        _ => Err(format!("{s:?}: the UMEM chunk size is 2048 or 4096")),
    }
}

/// `--xdp-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum XdpMode {
    /// Zero-copy where the driver can, copy otherwise.
    Auto,
    /// Copy mode (every driver).
    Copy,
    /// Zero-copy only (fails where the driver cannot).
    Zerocopy,
}

/// `--ip`: an address we may own (not 0.0.0.0, multicast or broadcast).
fn parse_ip(s: &str) -> Result<Cidr, String> {
    let c: Cidr = s.parse().map_err(|e| format!("{e}"))?;
    if c.addr.is_unspecified() || c.addr.is_multicast() || c.addr.is_broadcast() {
        return Err(format!("{} cannot be an interface address", c.addr));
    }
    Ok(c)
}

/// `--connect`: a unicast address and a port other than 0.
fn parse_peer(s: &str) -> Result<SocketAddrV4, String> {
    let a: SocketAddrV4 = s
        .parse()
        .map_err(|_| format!("expected ADDRESS:PORT such as 10.0.0.2:5201, got {s:?}"))?;
    if a.port() == 0 {
        return Err("port 0 cannot be connected to".into());
    }
    if a.ip().is_unspecified() || a.ip().is_multicast() || a.ip().is_broadcast() {
        return Err(format!("{} is not a unicast address", a.ip()));
    }
    Ok(a)
}

/// `tlnc: TITLE:` and the counters under it, `name value` per line,
/// indented.
fn section(title: &str, counters: &dyn std::fmt::Display) {
    eprintln!("tlnc: {title}:");
    for line in counters.to_string().lines() {
        eprintln!("  {line}");
    }
}

fn main() -> ExitCode {
    // File capabilities given without the effective bit (the container
    // image's: `setcap …+p`) become effective here, before any thread.
    if let Err(e) = iwarp_xdp::caps::raise_permitted() {
        eprintln!(
            "{}: making the permitted capabilities effective: {e}",
            env!("CARGO_BIN_NAME")
        );
    }
    let args = Args::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(io::stderr)
        // Colour only for a person at a terminal (https://no-color.org).
        .with_ansi(
            io::IsTerminal::is_terminal(&io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    if args.frame_count <= args.ring_size {
        eprintln!(
            "tlnc: --frame-count must exceed --ring-size (half the chunks are for receiving)"
        );
        return ExitCode::from(2);
    }
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Setup(e)) => {
            eprintln!("tlnc: {e}");
            ExitCode::from(2)
        }
        Err(Failure::Connection(e)) => {
            eprintln!("tlnc: {e}");
            ExitCode::from(1)
        }
    }
}

enum Failure {
    Setup(String),
    Connection(String),
}

fn run(args: &Args) -> Result<(), Failure> {
    let mode = match args.xdp_mode {
        XdpMode::Auto => XskMode::Auto,
        XdpMode::Copy => XskMode::Copy,
        XdpMode::Zerocopy => XskMode::ZeroCopy,
    };
    let mut xcfg = XdpConfig::new(&args.iface, args.ip.addr.octets());
    xcfg.mode = mode;
    xcfg.queue = args.queue;
    xcfg.ring_size = args.ring_size;
    xcfg.frame_size = args.frame_size;
    xcfg.frame_count = args.frame_count;
    xcfg.rx_frames = args.ring_size.min(args.frame_count / 2);
    xcfg.need_wakeup = !args.no_need_wakeup;
    xcfg.busy_poll = args.busy_poll_usecs.map(|usecs| iwarp_xdp::BusyPoll {
        usecs,
        budget: args.busy_poll_budget,
    });
    if args.share_address {
        xcfg.share = Some(iwarp_xdp::SharedPorts {
            listen: args.listen.into_iter().collect(),
            local_from: args.local_ports_from,
        });
    }
    let dev = XdpDevice::open(&xcfg).map_err(|e| Failure::Setup(e.to_string()))?;
    for w in dev.warnings() {
        eprintln!("tlnc: warning: {w}");
    }
    let mut icfg = IfaceConfig::new(
        EthernetAddress(dev.mac_address()),
        Ipv4Address(args.ip.addr.octets()),
        args.ip.prefix,
    );
    icfg.mtu = match args.mtu {
        // Frames above the interface's MTU would be dropped: refuse.
        Some(m) if m > dev.mtu() => {
            return Err(Failure::Setup(format!(
                "--mtu {m} is above {}'s MTU {}: ask for at most {}, or raise the \
                 interface's (`ip link set dev {} mtu {m}`, on both ends of the link)",
                args.iface,
                dev.mtu(),
                dev.mtu(),
                args.iface
            )))
        }
        Some(m) => m,
        None => dev.mtu(),
    } as usize;
    icfg.gateway = args.gateway.map(|g| Ipv4Address(g.octets()));
    icfg.accept_partial_checksum = args.accept_partial_checksum;
    let mut scfg = StackConfig::new(icfg);
    scfg.tcp.rto_min = args.rto_min_ms * 1_000_000;
    scfg.tcp.rto_initial = (args.rto_initial_ms * 1_000_000).max(scfg.tcp.rto_min);
    scfg.tcp.time_wait = args.time_wait_ms * 1_000_000;
    scfg.tcp.rcv_buf = args.rcv_buf;
    scfg.tcp.snd_buf = args.snd_buf as usize;
    scfg.tcp.delayed_ack = None;
    scfg.fixed_isn = args.isn;
    if args.share_address {
        // Our local ports are in the range the XDP program steers to us.
        scfg.ephemeral_base = args.local_ports_from;
    }
    let mut seed = [0u8; 16];
    if let Ok(mut f) = File::open("/dev/urandom") {
        let _ = f.read_exact(&mut seed);
    }
    scfg.isn_secret = seed;
    let loop_mode = if args.busy {
        Mode::BusyPoll
    } else {
        Mode::Adaptive {
            spins: 20_000,
            max_sleep: Duration::from_micros(500),
        }
    };
    let bind = format!(
        "{} queue {} bind {:?} attach {:?} multi_buffer {} shared_address {}",
        dev.iface(),
        dev.queue(),
        dev.xsk_mode(),
        dev.attach_mode(),
        dev.multi_buffer(),
        dev.shares_address()
    );
    let reader: DeviceReader<XdpDevice> = Box::new(|d| Box::new(d.stats().ok()));
    let h = spawn_probed(
        Stack::new(scfg, MemoryTable::new()),
        dev,
        args.core,
        loop_mode,
        1024,
        Some(reader),
    );
    let deadline = (args.timeout > 0).then(|| Instant::now() + Duration::from_secs(args.timeout));
    let start = Instant::now();
    let result = open(args, &h, deadline).and_then(|stream| transfer(args, &stream, deadline));
    let elapsed = start.elapsed();
    let device = h
        .snapshot(Duration::from_secs(2))
        .and_then(|(_, d)| d.downcast::<Option<iwarp_xdp::Stats>>().ok())
        .and_then(|d| *d);
    let stopped = h.stop();
    // Whatever the outcome: a checksum-offload peer is the likely reason
    // for a connection that never gets anywhere.
    if let Some(why) = stopped
        .as_ref()
        .and_then(|(stack, _)| stack.iface().stats().checksum_diagnosis())
    {
        eprintln!("tlnc: warning: {why}");
    }
    if args.stats {
        if let Ok((sent, received)) = &result {
            let secs = elapsed.as_secs_f64().max(1e-9);
            eprintln!(
                "tlnc: sent {sent} B, received {received} B in {secs:.3} s ({:.1} MB/s out, {:.1} MB/s in)",
                *sent as f64 / secs / 1e6,
                *received as f64 / secs / 1e6
            );
        }
        if let Some((stack, st)) = stopped {
            eprintln!(
                "tlnc: loop: rounds {} rx {} tx {} tx_dropped {} sleeps {} pinned {}",
                st.rounds, st.rx_frames, st.tx_frames, st.tx_dropped, st.sleeps, st.pinned
            );
            section("iface", stack.iface().stats());
            section("stack", &stack.stats());
            section("tcp", &stack.tcp_totals());
        }
        eprintln!("tlnc: device: {bind}");
        if let Some(d) = device {
            section("xsk", &d.ours);
            section("xsk kernel", &d.kernel);
        }
    }
    result.map(|_| ())
}

fn timed_out(deadline: Option<Instant>) -> bool {
    deadline.is_some_and(|d| Instant::now() >= d)
}

/// Connect or accept; returns the stream's shared rings.
fn open(
    args: &Args,
    h: &LoopHandle<Stack>,
    deadline: Option<Instant>,
) -> Result<Arc<StreamShared>, Failure> {
    let cmd = match (args.connect, args.listen) {
        (Some(to), _) => Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: Ipv4Address(to.ip().octets()),
            port: to.port(),
            ulp: Ulp::Stream,
        },
        (None, Some(port)) => Command::Listen {
            transport: Transport::Tcp,
            port,
            ulp: Ulp::Stream,
        },
        (None, None) => return Err(Failure::Setup("give --connect or --listen".into())),
    };
    h.post(cmd)
        .map_err(|_| Failure::Setup("command queue full".into()))?;
    loop {
        if timed_out(deadline) {
            return Err(Failure::Connection("timed out before connecting".into()));
        }
        // Registered before polling: an output handed over after this
        // ends the wait below (no sleep-and-poll while idle).
        let waiter = h.output_waiter();
        match h.poll() {
            Some(Output::Connected {
                stream: Some(s), ..
            })
            | Some(Output::Accepted {
                stream: Some(s), ..
            }) => return Ok(s),
            Some(Output::Failed { error, .. }) => {
                return Err(Failure::Connection(error.to_string()))
            }
            Some(_) => {}
            None => waiter.wait(Duration::from_millis(100)),
        }
    }
}

/// Pump input into the stream and the stream into the output until both
/// directions are closed. Returns (sent, received).
fn transfer(
    args: &Args,
    s: &Arc<StreamShared>,
    deadline: Option<Instant>,
) -> Result<(u64, u64), Failure> {
    const CHUNK: usize = 64 << 10;
    let input: Box<dyn Read + Send> = match &args.input {
        Some(p) => {
            Box::new(File::open(p).map_err(|e| Failure::Setup(format!("{}: {e}", p.display())))?)
        }
        None => Box::new(io::stdin()),
    };
    let mut output: Box<dyn Write> = match &args.output {
        Some(p) => Box::new(BufWriter::with_capacity(
            1 << 20,
            File::create(p).map_err(|e| Failure::Setup(format!("{}: {e}", p.display())))?,
        )),
        None => Box::new(BufWriter::with_capacity(1 << 20, io::stdout())),
    };
    // The reader runs on its own thread: stdin may block.
    let tx_side = s.clone();
    let reader = std::thread::spawn(move || -> io::Result<u64> {
        let mut input = input;
        let mut sent = 0u64;
        loop {
            let mut buf = vec![0u8; CHUNK];
            let n = input.read(&mut buf)?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            sent += n as u64;
            // Sleeps while the send ring is full; the stack wakes it.
            let mut item = buf;
            loop {
                match tx_side.send(item, Duration::from_millis(100)) {
                    Ok(()) => break,
                    Err(SendError::TimedOut(back)) => item = back,
                    // Failed (the main thread reports it) or closed.
                    Err(_) => return Ok(sent),
                }
            }
        }
        tx_side.close.store(true, Ordering::Release);
        Ok(sent)
    });
    let mut received = 0u64;
    let failed = |s: &StreamShared| {
        s.abort.store(true, Ordering::Release);
        Failure::Connection("connection reset or timed out".into())
    };
    // Sleeps until data arrives (the stack wakes it), in slices that let
    // the overall deadline be checked, also while data keeps coming.
    let slice = Duration::from_millis(100);
    loop {
        match s.recv(slice) {
            Ok(Some(v)) => {
                output
                    .write_all(&v)
                    .map_err(|e| Failure::Setup(format!("writing output: {e}")))?;
                received += v.len() as u64;
                if s.rx.is_empty() {
                    // Interactive use sees data as it arrives; a reader
                    // waiting for the peer's last octet gets it before
                    // the connection closes.
                    output
                        .flush()
                        .map_err(|e| Failure::Setup(format!("writing output: {e}")))?;
                }
            }
            // The peer closed its direction: wait for ours to close too.
            Ok(None) => match s.wait_closed(slice) {
                Ok(()) => break,
                Err(WaitError::Failed(_)) => return Err(failed(s)),
                Err(WaitError::TimedOut) => {}
            },
            Err(WaitError::Failed(_)) => return Err(failed(s)),
            Err(WaitError::TimedOut) => {}
        }
        if timed_out(deadline) {
            s.abort.store(true, Ordering::Release);
            return Err(Failure::Connection("timed out".into()));
        }
    }
    output
        .flush()
        .map_err(|e| Failure::Setup(format!("writing output: {e}")))?;
    let sent = match reader.join() {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return Err(Failure::Setup(format!("reading input: {e}"))),
        Err(_) => return Err(Failure::Setup("input thread panicked".into())),
    };
    Ok((sent, received))
}
