//! `iwarp-serve`: an RDMA Read/Write target service with a Prometheus
//! statistics endpoint.
//!
//! ```text
//! iwarp-serve (--sim | --iface IF --ip ADDR/PREFIX [--netns PATH])
//!             [--port PORT] [--region-mib N] [--stats-addr ADDR:PORT] [--seconds N]
//! ```
//!
//! Listens for iWARP connections on `--port`, registers one memory region
//! of `--region-mib` MiB that every connected client may RDMA Read and
//! Write, and accepts any number of clients until `--seconds` have passed
//! (or, without it, until the process is killed: SIGINT and SIGTERM end it
//! with the default action, there is no handler).
//!
//! The client learns the region from the MPA Reply's private data, 16
//! octets: `IWSV`, the STag (u32, big endian) and the length (u64, big
//! endian). Tagged offsets are zero-based: offset 0 is the region's first
//! octet.
//!
//! With `--stats-addr`, a plain HTTP/1.1 responder on a kernel TCP socket
//! serves `GET /metrics` in the Prometheus text format (0.0.4): the
//! context's counters and each connection's queue pair counters; other
//! paths get 404. Port 0 picks a free port; the bound address is printed as
//! `stats: http://ADDR/metrics`.
//!
//! `--sim` runs the server on the simulated link (10.0.0.1) with a built-in
//! client (10.0.0.2) in the same process that writes and reads back blocks
//! of the region until the end, checking every block (a self-test; needs
//! no privileges).
//!
//! Exit status: 0 at the end of `--seconds`; 1 if the built-in client saw
//! a failed or wrong Read; 2 for a usage or setup error.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpListener, TcpStream};
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use clap::Parser;
use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Error, ListenOptions, Mr, Qp, STag,
    WorkRequest, XdpOptions,
};
use iwarp_tools::prom::{self, ConnStats};
use iwarp_tools::Cidr;

/// An RDMA Read/Write target: serves one registered memory region to any
/// number of iWARP clients, with a Prometheus endpoint.
///
/// The MPA Reply's private data tells the client the region: "IWSV", STag
/// (u32 BE), length (u64 BE); tagged offsets start at 0.
///
/// Exit status: 0 at the end of --seconds; 1 if the --sim client saw a
/// wrong Read; 2 for a usage or setup error. SIGINT/SIGTERM end it with
/// the default action.
#[derive(Debug, Parser)]
#[command(name = "iwarp-serve", version)]
struct Args {
    /// Run on the simulated link with a built-in client (self-test).
    #[arg(long, conflicts_with_all = ["iface", "ip", "netns"])]
    sim: bool,
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
    /// Port to listen on (1-65535).
    #[arg(long, default_value_t = 7471, value_parser = clap::value_parser!(u16).range(1..))]
    port: u16,
    /// Size of the served region in MiB (1-4096).
    #[arg(long, value_name = "N", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=4096))]
    region_mib: u32,
    /// Serve Prometheus metrics on ADDR:PORT (port 0: any free port).
    #[arg(long, value_name = "ADDR:PORT")]
    stats_addr: Option<SocketAddr>,
    /// Stop after N seconds (default: run until killed).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(1..))]
    seconds: Option<u64>,
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
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
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

fn run(args: &Args) -> Result<ExitCode, String> {
    let (ctx, client_ctx) = if args.sim {
        let (a, b) = Context::sim_pair();
        (a, Some(b))
    } else {
        let (Some(iface), Some(ip)) = (&args.iface, args.ip) else {
            return Err("--iface and --ip are required without --sim".into());
        };
        let mut o = XdpOptions::new(iface, ip.addr, ip.prefix);
        o.host.netns = args.netns.clone();
        (
            Context::af_xdp(&o).map_err(|e| format!("opening {iface}: {e}"))?,
            None,
        )
    };
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let len = (args.region_mib as usize) << 20;
    let mr = pd
        .register(
            vec![0; len],
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE,
        )
        .map_err(|e| format!("registering {} MiB: {e}", args.region_mib))?;
    let listener = ctx
        .listen(args.port, &ListenOptions::new(&pd))
        .map_err(|e| format!("listening on port {}: {e}", args.port))?;
    let cq = ctx.create_cq(1024);
    let conns: Conns = Arc::new(Mutex::new(Vec::new()));
    println!(
        "iwarp-serve: listening on {}:{}, region {} MiB stag {:#010x}",
        ctx.addr(),
        args.port,
        args.region_mib,
        mr.stag().0
    );
    if let Some(addr) = args.stats_addr {
        let l = TcpListener::bind(addr).map_err(|e| format!("stats endpoint {addr}: {e}"))?;
        let bound = l.local_addr().map_err(|e| e.to_string())?;
        println!("stats: http://{bound}/metrics");
        let (ctx, conns) = (ctx.clone(), conns.clone());
        std::thread::spawn(move || serve_stats(l, &ctx, &conns));
    }
    let _ = std::io::stdout().flush();

    let stop = Arc::new(AtomicBool::new(false));
    let client = client_ctx.map(|c| {
        let (stop, to) = (stop.clone(), SocketAddrV4::new(ctx.addr(), args.port));
        std::thread::spawn(move || sim_client(&c, to, &stop))
    });

    let deadline = args
        .seconds
        .map(|s| Instant::now() + Duration::from_secs(s));
    let advert = advert(mr.stag(), len as u64);
    while deadline.is_none_or(|d| Instant::now() < d) {
        match listener.get_request(Duration::from_millis(200)) {
            Ok(req) => {
                let peer = req.remote();
                let opts = AcceptOptions {
                    private_data: advert.clone(),
                    ..AcceptOptions::default()
                };
                match req.accept(&opts, &cq) {
                    Ok(qp) => {
                        println!("iwarp-serve: accepted {peer} (qp {})", qp.id());
                        lock(&conns).push((peer, qp));
                    }
                    Err(e) => eprintln!("iwarp-serve: accepting {peer}: {e}"),
                }
            }
            Err(Error::TimedOut) => {}
            Err(e) => eprintln!("iwarp-serve: connection request: {e}"),
        }
        // Forget connections that are gone from the stack.
        lock(&conns).retain(|(_, qp)| !matches!(qp.stats(), Err(Error::Stopped)));
        let _ = std::io::stdout().flush();
    }
    stop.store(true, Ordering::Relaxed);
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
    drop(listener);
    lock(&conns).clear();
    drop(mr);
    Ok(code)
}

/// The --sim client: Write a block, Read it back into another buffer,
/// compare; over the whole region, until `stop`. Returns the blocks done.
fn sim_client(ctx: &Context, to: SocketAddrV4, stop: &AtomicBool) -> Result<u64, String> {
    const BLOCK: u32 = 16 << 10;
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let cq = ctx.create_cq(64);
    let local: Mr = pd
        .register(
            vec![0; 2 * BLOCK as usize],
            Access::LOCAL_READ | Access::LOCAL_WRITE,
        )
        .map_err(|e| e.to_string())?;
    let qp = ctx
        .connect(to, &ConnectOptions::new(&pd, &cq))
        .map_err(|e| format!("connect {to}: {e}"))?;
    let (stag, len) = parse_advert(&qp.negotiated().peer_private_data)
        .ok_or("the server's private data is not an IWSV advert")?;
    let blocks = len / u64::from(BLOCK);
    let mut n = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let off = (n % blocks) * u64::from(BLOCK);
        let pattern: Vec<u8> = (0..BLOCK).map(|i| (i as u64 ^ n) as u8).collect();
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
    Ok(n)
}

/// Answer HTTP requests one at a time: `GET /metrics`, else 404.
fn serve_stats(l: TcpListener, ctx: &Context, conns: &Conns) {
    for s in l.incoming() {
        let Ok(mut s) = s else { continue };
        if let Err(e) = answer(&mut s, ctx, conns) {
            eprintln!("iwarp-serve: stats request: {e}");
        }
    }
}

fn answer(s: &mut TcpStream, ctx: &Context, conns: &Conns) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(5)))?;
    s.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 << 10 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        req.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&req);
    let mut parts = line.lines().next().unwrap_or("").split(' ');
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = if method != "GET" {
        (
            "405 Method Not Allowed",
            "text/plain",
            "only GET\n".to_owned(),
        )
    } else if path != "/metrics" {
        (
            "404 Not Found",
            "text/plain",
            "not found; try /metrics\n".to_owned(),
        )
    } else {
        match ctx.stats() {
            Ok(st) => {
                let cs: Vec<ConnStats> = lock(conns)
                    .iter()
                    .filter_map(|(peer, qp)| {
                        qp.stats().ok().map(|counters| ConnStats {
                            qp: qp.id(),
                            peer: *peer,
                            counters,
                        })
                    })
                    .collect();
                ("200 OK", prom::CONTENT_TYPE, prom::render(&st, &cs))
            }
            Err(e) => ("503 Service Unavailable", "text/plain", format!("{e}\n")),
        }
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    s.flush()
}
