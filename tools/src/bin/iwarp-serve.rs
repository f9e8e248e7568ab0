//! `iwarp-serve`: an RDMA Read/Write target service with a Prometheus
//! statistics endpoint.
//!
//! ```text
//! iwarp-serve (--sim | --iface IF --ip ADDR/PREFIX [--netns PATH])
//!             [--transport mpa|sctp|sctp-udp] [--port PORT] [--region-mib N]
//!             [--stats-addr ADDR:PORT] [--seconds N]
//! iwarp-serve --connect SERVER --iface IF --ip ADDR/PREFIX [--netns PATH]
//!             [--transport mpa|sctp|sctp-udp] [--port PORT] [--blocks N]
//! ```
//!
//! `--transport` picks what carries iWARP: MPA over TCP (the default), DDP
//! over SCTP (RFC 5043, raw IPv4), or SCTP inside UDP (RFC 6951; a server
//! listening over either SCTP answers both). Server and client must agree.
//!
//! Listens for iWARP connections on `--port`, registers one memory region
//! of `--region-mib` MiB that every connected client may RDMA Read and
//! Write, and accepts any number of clients until `--seconds` have passed
//! (or, without it, until SIGINT or SIGTERM). At the end, by either, it
//! stops accepting, closes every client connection gracefully (waiting up
//! to 5 s in all for the closes to finish), prints its final statistics
//! and exits 0.
//!
//! The client learns the region from the private data of the MPA Reply
//! (or, over SCTP, of the DDP Stream Session Accept), 16 octets: `IWSV`, the STag (u32, big endian) and the length (u64, big
//! endian). Tagged offsets are zero-based: offset 0 is the region's first
//! octet.
//!
//! With `--stats-addr`, an HTTP/1.1 server (hyper, on a kernel TCP socket
//! and a thread of its own) serves `GET /metrics`: the context's counters,
//! each connection's queue pair counters, accept and scrape times,
//! the SCTP part's (`iwarp_sctp_*`, over SCTP),
//! `iwarp_build_info` and the `process_*` metrics, in the Prometheus text
//! format (0.0.4) or OpenMetrics 1.0 as the `Accept` header asks; other
//! paths get 404. Clients are served concurrently; each connection has 5 s
//! to send its request and 15 s in all, and at most
//! `--stats-max-connections` (64) are open at once (more get 503). Port 0
//! picks a free port; the bound address is printed as
//! `stats: http://ADDR/metrics` once it is bound (a port in use is a setup
//! error, exit 2, before the server says it listens).
//!
//! `--sim` runs the server on the simulated link (10.0.0.1) with a built-in
//! client (10.0.0.2) in the same process that writes and reads back blocks
//! of the region until the end, checking every block (a self-test; needs
//! no privileges).
//!
//! `--connect SERVER` is the client of a server elsewhere (another host,
//! container or namespace): it connects to SERVER:`--port`, takes the
//! region from the Reply's (or Accept's) private data, writes `--blocks` blocks of
//! 16 KiB into it, Reads each back into another buffer and compares, then
//! disconnects and exits (0 when every block came back equal).
//!
//! Exit status: 0 at the end of `--seconds`, or when every `--connect`
//! block came back equal; 1 if a client (built-in or `--connect`) saw a
//! failed or wrong Read; 2 for a usage or setup error.

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener};
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Error, ListenOptions, Mr, Qp, STag, Transport,
    WorkRequest, XdpOptions,
};
use iwarp_tools::http;
use iwarp_tools::prom::{self, ConnStats, ServeMetrics, Snapshot};
use iwarp_tools::Cidr;

/// An RDMA Read/Write target: serves one registered memory region to any
/// number of iWARP clients, with a Prometheus endpoint.
///
/// The private data of the MPA Reply (over SCTP, the Session Accept) tells
/// the client the region: "IWSV", STag (u32 BE), length (u64 BE); tagged
/// offsets start at 0.
///
/// With --connect SERVER it is a client instead: it writes --blocks blocks
/// of 16 KiB into the server's region, Reads each back and compares.
///
/// Exit status: 0 at the end of --seconds, or when every --connect block
/// came back equal; 1 if a client saw a failed or wrong Read; 2 for a
/// usage or setup error. SIGINT/SIGTERM end the server gracefully: it
/// closes every client connection, prints its final statistics and exits 0.
#[derive(Debug, Parser)]
#[command(name = "iwarp-serve", version)]
struct Args {
    /// Run on the simulated link with a built-in client (self-test).
    #[arg(long, conflicts_with_all = ["iface", "ip", "netns", "connect"])]
    sim: bool,
    /// Be a client of the iwarp-serve at SERVER:--port: write, read back
    /// and compare --blocks blocks of its region, then exit.
    #[arg(long, value_name = "SERVER", conflicts_with_all = ["stats_addr", "seconds", "region_mib"])]
    connect: Option<Ipv4Addr>,
    /// Blocks of 16 KiB the --connect client writes and reads back (1-1000000).
    #[arg(long, value_name = "N", default_value_t = 256, requires = "connect",
          value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    blocks: u64,
    /// Interface to take over through AF_XDP (its XDP hook and queue 0).
    #[arg(long, required_unless_present = "sim", requires = "ip")]
    iface: Option<String>,
    /// Our address and prefix, e.g. 10.0.0.1/24.
    #[arg(long, value_name = "ADDR/PREFIX", value_parser = parse_ip)]
    ip: Option<Cidr>,
    /// Network namespace to open the interface in (a path such as
    /// /var/run/netns/NAME).
    #[arg(long, value_name = "PATH")]
    netns: Option<std::path::PathBuf>,
    /// What carries iWARP: MPA over TCP, DDP over SCTP (RFC 5043), or SCTP
    /// inside UDP (RFC 6951). Server and client must agree (a server over
    /// either SCTP takes both).
    #[arg(long, value_enum, default_value_t = Carrier::Mpa)]
    transport: Carrier,
    /// Port to listen on (1-65535).
    #[arg(long, default_value_t = 7471, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Size of the served region in MiB (1-4096).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    region_mib: u32,
    /// Serve Prometheus metrics on ADDR:PORT (port 0: any free port).
    #[arg(long, value_name = "ADDR:PORT")]
    stats_addr: Option<SocketAddr>,
    /// Connections open at once to the metrics endpoint (1-4096); more are
    /// answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 64, requires = "stats_addr",
          value_parser = clap::value_parser!(u32).range(1..=4096))]
    stats_max_connections: u32,
    /// --ip is the interface's own address, which the kernel keeps: only
    /// TCP to --port (server) or to --local-ports-from and up (client)
    /// comes to the stack; ARP and all else stays with the kernel.
    #[arg(long, requires = "iface")]
    share_address: bool,
    /// With --share-address: local ports of outgoing connections are
    /// PORT..=65535 (reserve them: sysctl
    /// net.ipv4.ip_local_reserved_ports=PORT-65535).
    #[arg(long, value_name = "PORT", default_value_t = iwarp::SharedPorts::DEFAULT_LOCAL_FROM,
          requires = "share_address", value_parser = clap::value_parser!(u16).range(1024..))]
    local_ports_from: u16,
    /// Stop after N seconds (default: run until SIGINT or SIGTERM).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    seconds: Option<u64>,
}

/// `--transport`'s values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Carrier {
    /// MPA over TCP (RFC 5044).
    Mpa,
    /// DDP over SCTP in raw IPv4 (RFC 5043).
    Sctp,
    /// DDP over SCTP inside UDP to port 9899 (RFC 6951).
    SctpUdp,
}

impl Carrier {
    fn transport(self) -> Transport {
        match self {
            Carrier::Mpa => Transport::Mpa,
            Carrier::Sctp => Transport::Sctp,
            Carrier::SctpUdp => Transport::SctpOverUdp,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Carrier::Mpa => "MPA/TCP",
            Carrier::Sctp => "SCTP",
            Carrier::SctpUdp => "SCTP over UDP",
        }
    }
}

fn parse_ip(s: &str) -> Result<Cidr, String> {
    s.parse::<Cidr>().map_err(|e| e.to_string())
}

/// The connections the server holds.
type Conns = Arc<Mutex<Vec<(Ipv4Addr, Qp)>>>;

/// Private data of the MPA Reply: magic, STag, length.
fn advert(stag: STag, len: u64) -> Vec<u8> {
    let mut v = b"IWSV".to_vec();
    v.extend_from_slice(&stag.0.to_be_bytes());
    v.extend_from_slice(&len.to_be_bytes());
    v
}

fn parse_advert(p: &[u8]) -> Option<(STag, u64)> {
    if p.len() != 16 || &p[..4] != b"IWSV" {
        return None;
    }
    let stag = u32::from_be_bytes(p[4..8].try_into().ok()?);
    let len = u64::from_be_bytes(p[8..16].try_into().ok()?);
    Some((STag(stag), len))
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        // Colour only for a person at a terminal (https://no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    let args = Args::parse();
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("iwarp-serve: {e}");
            ExitCode::from(2)
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    match m.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    }
}

/// The name of a signal this program handles.
fn signal_name(sig: usize) -> &'static str {
    match i32::try_from(sig) {
        Ok(signal_hook::consts::SIGINT) => "SIGINT",
        Ok(signal_hook::consts::SIGTERM) => "SIGTERM",
        _ => "a signal",
    }
}

fn run(args: &Args) -> Result<ExitCode, String> {
    // SIGINT and SIGTERM store their number here; the loops below check it
    // (the handler does nothing else, so it is async-signal-safe).
    let signalled = Arc::new(AtomicUsize::new(0));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        let s = usize::try_from(sig).map_err(|e| e.to_string())?;
        signal_hook::flag::register_usize(sig, signalled.clone(), s)
            .map_err(|e| format!("installing the {} handler: {e}", signal_name(s)))?;
    }
    // The stats port first: one in use is a setup error before the device
    // is opened and before anything says it listens.
    let stats_listener = match args.stats_addr {
        Some(addr) => {
            let l = TcpListener::bind(addr).map_err(|e| format!("stats endpoint {addr}: {e}"))?;
            let bound = l.local_addr().map_err(|e| e.to_string())?;
            Some((l, bound))
        }
        None => None,
    };
    // The kernel-shared address steers TCP to our ports, nothing else.
    if args.share_address && args.transport != Carrier::Mpa {
        return Err(format!(
            "--share-address steers TCP only; --transport {} needs an address of its own",
            args.transport.name()
        ));
    }
    let transport = args.transport.transport();
    let (ctx, client_ctx) = if args.sim {
        let (a, b) = Context::sim_pair();
        (a, Some(b))
    } else {
        let (Some(iface), Some(ip)) = (&args.iface, args.ip) else {
            return Err("--iface and --ip are required without --sim".into());
        };
        let mut o = XdpOptions::new(iface, ip.addr, ip.prefix);
        o.host.netns = args.netns.clone();
        if args.share_address {
            o.share_address = Some(iwarp::SharedPorts {
                // A client listens on nothing.
                listen: if args.connect.is_some() {
                    Vec::new()
                } else {
                    vec![args.port]
                },
                local_from: args.local_ports_from,
            });
        }
        (
            Context::af_xdp(&o).map_err(|e| format!("opening {iface}: {e}"))?,
            None,
        )
    };
    if let Some(server) = args.connect {
        let to = SocketAddrV4::new(server, args.port);
        return match client(&ctx, to, transport, &signalled, Some(args.blocks)) {
            Ok(n) if n < args.blocks => {
                eprintln!("client: interrupted after {n} blocks");
                Ok(ExitCode::from(1))
            }
            Ok(n) => {
                println!("client: {n} blocks written and read back");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => {
                eprintln!("client: {e}");
                Ok(ExitCode::from(1))
            }
        };
    }
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let len = (args.region_mib as usize) << 20;
    let mr = pd
        .register(
            vec![0; len],
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE,
        )
        .map_err(|e| format!("registering {} MiB: {e}", args.region_mib))?;
    let mut listen = ListenOptions::new(&pd);
    listen.transport = transport;
    let listener = ctx
        .listen(args.port, &listen)
        .map_err(|e| format!("listening on port {}: {e}", args.port))?;
    let cq = ctx.create_cq(1024);
    let conns: Conns = Arc::new(Mutex::new(Vec::new()));
    let metrics = ServeMetrics::default();
    let stats = match stats_listener {
        Some((l, bound)) => {
            let limits = http::Limits {
                max_connections: args.stats_max_connections as usize,
                ..http::Limits::default()
            };
            let (ctx, conns, m) = (ctx.clone(), conns.clone(), metrics.clone());
            let scrape = Arc::new(move |format| {
                snapshot(&ctx, &conns).map(|snap| prom::render(snap, &m, format))
            });
            http::spawn(l, limits, metrics.clone(), scrape)
                .map_err(|e| format!("stats endpoint {bound}: {e}"))?;
            Some(bound)
        }
        None => None,
    };
    println!(
        "iwarp-serve: listening on {}:{} over {}, region {} MiB stag {:#010x}",
        ctx.addr(),
        args.port,
        args.transport.name(),
        args.region_mib,
        mr.stag().0
    );
    if let Some(bound) = stats {
        println!("stats: http://{bound}/metrics");
    }
    let _ = std::io::stdout().flush();

    let stop = Arc::new(AtomicUsize::new(0));
    let client = client_ctx.map(|c| {
        let (stop, to) = (stop.clone(), SocketAddrV4::new(ctx.addr(), args.port));
        std::thread::spawn(move || client(&c, to, transport, &stop, None))
    });

    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let advert = advert(mr.stag(), len as u64);
    let started = Instant::now();
    let mut accepted = 0u64;
    while deadline.is_none_or(|d| Instant::now() < d) && signalled.load(Ordering::Relaxed) == 0 {
        match listener.get_request(Duration::from_millis(200)) {
            Ok(req) => {
                let asked = Instant::now();
                let peer = req.remote();
                let opts = AcceptOptions {
                    private_data: advert.clone(),
                    ..AcceptOptions::default()
                };
                match req.accept(&opts, &cq) {
                    Ok(qp) => {
                        metrics
                            .accept_seconds
                            .observe(asked.elapsed().as_secs_f64());
                        let id = qp.id();
                        // In the metrics before the line that announces it.
                        lock(&conns).push((peer, qp));
                        accepted += 1;
                        println!("iwarp-serve: accepted {peer} (qp {id})");
                    }
                    Err(e) => {
                        metrics.accept_failures.inc();
                        eprintln!("iwarp-serve: accepting {peer}: {e}");
                    }
                }
            }
            Err(Error::TimedOut) => {}
            Err(e) => eprintln!("iwarp-serve: connection request: {e}"),
        }
        // Forget connections that are gone from the stack.
        lock(&conns).retain(|(_, qp)| !matches!(qp.stats(), Err(Error::Stopped)));
        let _ = std::io::stdout().flush();
    }
    let why = match signalled.load(Ordering::Relaxed) {
        0 => "at the end of --seconds".to_owned(),
        sig => format!("by {}", signal_name(sig)),
    };
    println!(
        "iwarp-serve: stopping {why} after {:.1} s",
        started.elapsed().as_secs_f64()
    );
    // No new clients; the built-in client finishes its block and leaves.
    drop(listener);
    stop.store(1, Ordering::Relaxed);
    let mut code = ExitCode::SUCCESS;
    if let Some(t) = client {
        match t.join() {
            Ok(Ok(n)) => println!("client: {n} blocks written and read back"),
            Ok(Err(e)) => {
                eprintln!("client: {e}");
                code = ExitCode::from(1);
            }
            Err(_) => {
                eprintln!("client: panicked");
                code = ExitCode::from(1);
            }
        }
    }
    // Close every client connection gracefully: all at once, then wait for
    // the closes, 5 s in all (a peer that does not answer is left to the
    // stack, which ends with the process).
    let conns: Vec<(Ipv4Addr, Qp)> = std::mem::take(&mut *lock(&conns));
    let live: Vec<&(Ipv4Addr, Qp)> = conns
        .iter()
        .filter(|(_, qp)| qp.disconnect().is_ok())
        .collect();
    let close_by = Instant::now() + Duration::from_secs(5);
    let mut closed = 0;
    for (peer, qp) in &live {
        match qp.wait_disconnected(close_by.saturating_duration_since(Instant::now())) {
            Ok(_) | Err(Error::Stopped) => closed += 1,
            Err(e) => eprintln!("iwarp-serve: closing {peer}: {e}"),
        }
    }
    println!(
        "iwarp-serve: closed {closed} of {} client connections",
        live.len()
    );
    match ctx.stats() {
        Ok(st) => {
            // Closed connections stay in the stack a while (FIN exchange,
            // TIME-WAIT): say so, rather than "left" open.
            let held = st.connections;
            println!(
                "iwarp-serve: final stats: {accepted} clients accepted, {held} connection{} \
                 still held by the stack (closing or in TIME-WAIT), TCP {} octets delivered, \
                 {} RTO retransmits; stack:",
                if held == 1 { "" } else { "s" },
                st.tcp.delivered,
                st.tcp.rto_retransmits
            );
            for line in st.stack.to_string().lines() {
                println!("  {line}");
            }
        }
        Err(e) => eprintln!("iwarp-serve: final stats: {e}"),
    }
    if let Ok(Some(c)) = ctx.sctp_stats() {
        println!(
            "iwarp-serve: SCTP: {} packets in, {} out, {} DATA chunks retransmitted, \
             {} connection{} still held",
            c.host.rx_packets,
            c.host.tx_packets,
            c.assoc.retransmits + c.host.closed_retransmits,
            c.connections,
            if c.connections == 1 { "" } else { "s" },
        );
    }
    drop(conns);
    drop(mr);
    let _ = std::io::stdout().flush();
    Ok(code)
}

/// The client (`--sim`'s built-in one, or `--connect`): Write a block, Read
/// it back into another buffer, compare; over the whole region, until
/// `stop` is set (nonzero) or `max` blocks. Returns the blocks done.
fn client(
    ctx: &Context,
    to: SocketAddrV4,
    transport: Transport,
    stop: &AtomicUsize,
    max: Option<u64>,
) -> Result<u64, String> {
    const BLOCK: u32 = 16 << 10;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(64);
    let local: Mr = pd
        .register(
            vec![0; 2 * BLOCK as usize],
            Access::LOCAL_READ | Access::LOCAL_WRITE,
        )
        .map_err(|e| e.to_string())?;
    let mut opts = ConnectOptions::new(&pd, &cq);
    opts.transport = transport;
    let qp = ctx
        .connect(to, &opts)
        .map_err(|e| format!("connect {to}: {e}"))?;
    let (stag, len) = parse_advert(&qp.negotiated().peer_private_data)
        .ok_or("the server's private data is not an IWSV advert")?;
    let blocks = len / u64::from(BLOCK);
    if blocks == 0 {
        return Err(format!("the server's region ({len} octets) holds no block"));
    }
    // The pattern differs between runs and clients: a block left over from
    // an earlier client cannot pass for this one's.
    let seed = u64::from(std::process::id()) << 32 ^ u64::from(ctx.addr().to_bits());
    let mut n = 0u64;
    while stop.load(Ordering::Relaxed) == 0 && max.is_none_or(|m| n < m) {
        let off = (n % blocks) * u64::from(BLOCK);
        let pattern: Vec<u8> = (0..BLOCK)
            .map(|i| (u64::from(i) ^ n ^ seed.rotate_left(i % 64)) as u8)
            .collect();
        local.write(0, &pattern).map_err(|e| e.to_string())?;
        qp.post_send(WorkRequest::Write {
            wr_id: 2 * n,
            signaled: true,
            local: local.sge(0, BLOCK).into(),
            remote_stag: stag,
            remote_to: off,
        })
        .map_err(|e| e.to_string())?;
        qp.post_send(WorkRequest::Read {
            wr_id: 2 * n + 1,
            signaled: true,
            local: local.sge(u64::from(BLOCK), BLOCK).into(),
            remote_stag: stag,
            remote_to: off,
        })
        .map_err(|e| e.to_string())?;
        for _ in 0..2 {
            let wc = cq
                .wait(Duration::from_secs(10))
                .ok_or("no completion within 10 s")?;
            if !wc.status.is_ok() {
                return Err(format!("work request {} failed: {:?}", wc.wr_id, wc.status));
            }
        }
        let back = local
            .read(BLOCK as usize, BLOCK as usize)
            .map_err(|e| e.to_string())?;
        if back != pattern {
            return Err(format!(
                "block {n} at offset {off}: Read returned other data"
            ));
        }
        n += 1;
    }
    let _ = qp.disconnect();
    let _ = qp.wait_disconnected(Duration::from_secs(5));
    Ok(n)
}

/// The counters of one scrape: the context's, and those of each connection
/// still in the stack.
fn snapshot(ctx: &Context, conns: &Conns) -> Result<Snapshot, String> {
    let stats = ctx.stats().map_err(|e| e.to_string())?;
    let conns = lock(conns)
        .iter()
        .filter_map(|(peer, qp)| {
            qp.stats().ok().map(|counters| ConnStats {
                qp: qp.id(),
                peer: *peer,
                counters,
            })
        })
        .collect();
    let sctp = ctx.sctp_stats().map_err(|e| e.to_string())?;
    Ok(Snapshot { stats, conns, sctp })
}
