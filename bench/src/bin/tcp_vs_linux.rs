//! tcp-lite on AF_XDP against the Linux kernel's TCP, on the same veth pair
//! and namespaces, in one run: 64-octet ping-pong round trips and one-way
//! bulk throughput, first with Linux at both ends (the baselines: the
//! Linux client spinning on a non-blocking socket in the ping-pong, as our
//! client thread spins on its ring, then blocking in `read`), then with
//! our stack as the client and Linux as the server. Prints all three and
//! the ratios ours/Linux, spinning first (like for like). Needs root.
//!
//! With `--loss`, it measures loss recovery instead: nftables in the Linux
//! end's namespace (the listener's, for the two transfers to Linux)
//! drops packets at random both ways (`numgen random mod 1000 < N`) at 0,
//! 0.1, 1, 2 and 5% (or the per-mille rates listed after
//! `--loss-permille`), with TSO, GSO and GRO off on both ends so both stacks
//! send 1500-octet frames, and prints bulk throughput Linux -> Linux,
//! tcp-lite -> Linux and Linux -> tcp-lite, the ratios to Linux -> Linux,
//! and our sender's retransmission timeouts, recoveries, probes (all, and
//! those sent in recovery), rescue retransmissions and undos, frames our
//! AF_XDP device refused while sending (`tx refd`) and frames our receiving
//! end dropped (`rx drops`: the kernel's before our loop saw them, RX ring
//! full or fill ring empty, and the stack's for a full byte-stream
//! backlog), losses that no nftables rule made. The Linux senders use
//! the host's default congestion control (printed; often BBR, which does
//! not slow down for random loss) unless `--linux-cc NAME` sets one for
//! them through a per-route `congctl`. `--ack-every N` makes our receiver
//! acknowledge every N full-sized segments (`tcp::Config::ack_every`)
//! instead of once per poll round. Under each rate's row, a line gives
//! the time our sender was cwnd-limited and application-limited
//! (`tcp::Stats`) as a share of its transfer; `--cwv on|off` turns RFC
//! 7661 congestion window validation on or off in our stack; the line
//! also gives how many of the sender's segments the Linux receiver
//! answered with one of its own (mostly ACKs), for our sender and for
//! Linux's, and a line the Linux -> Linux sender's own RTOs, SACK
//! recoveries, tail loss probes and undos (its namespace's `TcpExt`
//! counters). `--linux-gso-max-segs N` sets `gso_max_segs` on both veth
//! ends: with offloads off Linux still builds 64 KiB packets (software
//! GSO) and cuts them into frames just before the device; with 1 its TCP
//! runs once per frame, as ours does. Our application threads use the
//! blocking `send`/`recv` (they sleep while the ring is full or empty, as
//! the Linux ends do in the kernel) so that they take no CPU from the
//! Linux end on this two-CPU machine.
//!
//! ```text
//! cargo run --release -p iwarp-bench --bin tcp-vs-linux -- [--iters N] [--bulk-mib M]
//! cargo run --release -p iwarp-bench --bin tcp-vs-linux -- --loss [--bulk-mib M] [--loss-permille 0,1,10,20,50] [--newreno] [--linux-cc cubic] [--ack-every 2] [--cwv on|off] [--linux-gso-max-segs 1]
//! cargo run --release -p iwarp-bench --bin tcp-vs-linux -- --cleanup [--netns-prefix P]
//! ```
//!
//! The namespaces are `<P>o…` and `<P>l…`, the veth `<P>v…` (`P`: `bv`
//! unless `--netns-prefix`); they go on exit, error, SIGINT and SIGTERM.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use iwarp_datapath::runtime::{spawn, spawn_probed, LoopStats, Mode};
use iwarp_datapath::stack::{
    flags, Command, Output, Stack, StackConfig, StreamShared, Transport, Ulp,
};
use iwarp_proto::mem::MemoryTable;
use iwarp_xdp::{Config as XdpConfig, XdpDevice};
use netns_harness::{run_in, End, Netns, VethPair};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MSG: usize = 64;

/// tcp-lite on AF_XDP against the Linux kernel's TCP on one veth pair:
/// ping-pong and bulk (default), or bulk under random loss (`--loss`).
/// Root only: creates two namespaces and a veth pair, removed on exit,
/// error, SIGINT and SIGTERM.
#[derive(Debug, clap::Parser)]
#[command(name = "tcp-vs-linux", version)]
struct Cli {
    /// 64-octet ping-pong round trips.
    #[arg(long, value_name = "N", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    iters: u64,
    /// MiB of one-way bulk per transfer (default 512; 64 with --loss).
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u64).range(1..=65_536))]
    bulk_mib: Option<u64>,
    /// Loss recovery instead: bulk under random loss at each rate of
    /// --loss-permille.
    #[arg(long)]
    loss: bool,
    /// Loss rates per thousand packets, both ways (with --loss).
    #[arg(long, value_name = "N[,N...]", value_delimiter = ',', default_value = "0,1,10,20,50",
          value_parser = clap::value_parser!(u32).range(0..=1000))]
    loss_permille: Vec<u32>,
    /// NewReno instead of CUBIC in our stack.
    #[arg(long)]
    newreno: bool,
    /// The Linux senders' congestion control (a per-route congctl), e.g.
    /// cubic; the host's default otherwise (with --loss).
    #[arg(long, value_name = "NAME")]
    linux_cc: Option<String>,
    /// Our receiver acknowledges every N full-sized segments (with --loss).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64))]
    ack_every: Option<u32>,
    /// RFC 7661 congestion window validation in our stack on or off (its
    /// default otherwise).
    #[arg(long, value_name = "on|off", value_parser = on_off)]
    cwv: Option<bool>,
    /// gso_max_segs of both veth ends (with --loss).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65_535))]
    linux_gso_max_segs: Option<u32>,
    #[command(flatten)]
    netns: iwarp_bench::netns_cli::NetnsArgs,
}

fn on_off(v: &str) -> Result<bool, String> {
    match v {
        "on" => Ok(true),
        "off" => Ok(false),
        _ => Err(format!("on or off, not {v:?}")),
    }
}

static CLI: std::sync::OnceLock<Cli> = std::sync::OnceLock::new();

/// The parsed command line (set first thing in `main`).
fn cli() -> &'static Cli {
    CLI.get_or_init(<Cli as clap::Parser>::parse)
}

struct Summary {
    p50: f64,
    p99: f64,
    p999: f64,
    mean: f64,
}

fn summarize(mut ns: Vec<u64>) -> Summary {
    ns.sort_unstable();
    let pick = |q: f64| ns[((ns.len() as f64 * q) as usize).min(ns.len() - 1)] as f64 / 1000.0;
    Summary {
        p50: pick(0.50),
        p99: pick(0.99),
        p999: pick(0.999),
        mean: ns.iter().sum::<u64>() as f64 / ns.len() as f64 / 1000.0,
    }
}

/// Linux server in its namespace: echo `iters` 64-octet messages on the
/// first connection, then sink the second connection to EOF and report
/// how many octets it got.
fn linux_server(
    ns: &Netns,
    addr: SocketAddrV4,
    iters: usize,
) -> (mpsc::Receiver<()>, std::thread::JoinHandle<u64>) {
    let (ready_tx, ready_rx) = mpsc::channel();
    let path = ns.ns_path();
    let h = std::thread::spawn(move || {
        iwarp_xdp::in_netns(&path, move || {
            let l = TcpListener::bind(addr).expect("bind");
            ready_tx.send(()).expect("ready");
            let (mut s, _) = l.accept().expect("accept");
            s.set_nodelay(true).expect("nodelay");
            let mut buf = [0u8; MSG];
            for _ in 0..iters {
                if s.read_exact(&mut buf).is_err() {
                    break;
                }
                if s.write_all(&buf).is_err() {
                    break;
                }
            }
            drop(s);
            let (mut s, _) = l.accept().expect("accept bulk");
            // Bounded: a stalled transfer ends the read with an error.
            s.set_read_timeout(Some(Duration::from_secs(60)))
                .expect("read timeout");
            let mut big = vec![0u8; 1 << 20];
            let mut n = 0u64;
            loop {
                match s.read(&mut big) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k as u64,
                }
            }
            n
        })
        .expect("enter namespace")
    });
    (ready_rx, h)
}

/// The Linux client: `iters` ping-pong round trips, then `bulk` octets
/// one way. `spin`: the ping-pong reads a non-blocking socket in a loop,
/// as our client thread spins on its ring (like for like); else it
/// blocks in `read` (the other way of waiting, printed beside). The bulk
/// phase blocks in both, as our client's bulk sends do.
fn linux_client(
    ns: &Netns,
    addr: SocketAddrV4,
    iters: usize,
    bulk: usize,
    spin: bool,
) -> (Vec<u64>, f64) {
    let path = ns.ns_path();
    iwarp_xdp::in_netns(&path, move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let msg = [7u8; MSG];
        let mut buf = [0u8; MSG];
        let mut rtts = Vec::with_capacity(iters);
        if spin {
            s.set_nonblocking(true).expect("nonblocking");
        }
        // Bounded: a peer that stops answering fails the run.
        let give_up = Instant::now() + Duration::from_secs(120);
        for _ in 0..iters {
            let t = Instant::now();
            if spin {
                spin_write_all(&mut s, &msg, give_up);
                spin_read_exact(&mut s, &mut buf, give_up);
            } else {
                s.write_all(&msg).expect("write");
                s.read_exact(&mut buf).expect("read");
            }
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        drop(s);
        let mut s = TcpStream::connect(addr).expect("connect bulk");
        s.set_nonblocking(false).expect("blocking");
        s.set_write_timeout(Some(Duration::from_secs(60)))
            .expect("write timeout");
        s.set_read_timeout(Some(Duration::from_secs(60)))
            .expect("read timeout");
        let chunk = vec![0x5au8; 1 << 20];
        let t = Instant::now();
        let mut left = bulk;
        while left > 0 {
            let n = left.min(chunk.len());
            s.write_all(&chunk[..n]).expect("bulk write");
            left -= n;
        }
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
        let mut b = [0u8; 16];
        let _ = s.read(&mut b); // the server's close
        (rtts, bulk as f64 / t.elapsed().as_secs_f64() / 1e6)
    })
    .expect("enter namespace")
}

/// All of `b` out on a non-blocking socket, spinning while it would
/// block (panics on an error, or after `give_up`).
fn spin_write_all(s: &mut TcpStream, mut b: &[u8], give_up: Instant) {
    while !b.is_empty() {
        match s.write(b) {
            Ok(n) => b = &b[n..],
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < give_up, "write: no room for 120 s");
                std::hint::spin_loop();
            }
            Err(e) => panic!("write: {e}"),
        }
    }
}

/// `b` filled from a non-blocking socket, spinning while it would block
/// (panics on an error or EOF, or after `give_up`).
fn spin_read_exact(s: &mut TcpStream, b: &mut [u8], give_up: Instant) {
    let mut got = 0;
    while got < b.len() {
        match s.read(&mut b[got..]) {
            Ok(0) => panic!("read: EOF"),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(Instant::now() < give_up, "read: nothing for 120 s");
                std::hint::spin_loop();
            }
            Err(e) => panic!("read: {e}"),
        }
    }
}

fn connect_ours(
    h: &iwarp_datapath::runtime::LoopHandle<Stack>,
    to: SocketAddrV4,
    token: u64,
) -> Arc<StreamShared> {
    h.post(Command::Connect {
        transport: Transport::Tcp,
        token,
        remote: Ipv4Address(to.ip().octets()),
        port: to.port(),
        ulp: Ulp::Stream,
    })
    .expect("post");
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        match h.poll() {
            Some(Output::Connected {
                stream: Some(s), ..
            }) => return s,
            Some(Output::Failed { error, .. }) => panic!("connect: {error}"),
            _ => std::hint::spin_loop(),
        }
    }
    panic!("connect timed out");
}

fn our_client(
    ns: &Netns,
    iface: &str,
    ip: Ipv4Addr,
    to: SocketAddrV4,
    iters: usize,
    bulk: usize,
    count_tcp: bool,
) -> (Vec<u64>, f64, f64, tcp_lite::tcp::Stats, u64) {
    let cfg = XdpConfig::new(iface, ip.octets());
    let dev = iwarp_xdp::in_netns(&ns.ns_path(), || XdpDevice::open(&cfg))
        .expect("enter namespace")
        .expect("open AF_XDP");
    let mut icfg = IfaceConfig::new(
        EthernetAddress(dev.mac_address()),
        Ipv4Address(ip.octets()),
        24,
    );
    icfg.mtu = dev.mtu() as usize;
    let mut scfg = StackConfig::new(icfg);
    scfg.tcp.rto_min = 5_000_000;
    scfg.tcp.congestion = congestion();
    if let Some(on) = cli().cwv {
        scfg.tcp.cwv = on;
    }
    if count_tcp {
        // A connection's counters are summed when it reaches CLOSED: keep
        // TIME-WAIT short so that the bulk connection gets there.
        scfg.tcp.time_wait = 1_000_000;
    }
    let h = spawn(
        Stack::new(scfg, MemoryTable::new()),
        dev,
        Some(0),
        Mode::BusyPoll,
        4096,
    );
    let s = connect_ours(&h, to, 1);
    let mut rtts = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        s.tx.push(vec![7u8; MSG]).expect("tx ring");
        let mut got = 0;
        while got < MSG {
            match s.rx.pop() {
                Some(v) => got += v.len(),
                None => std::hint::spin_loop(),
            }
        }
        rtts.push(t.elapsed().as_nanos() as u64);
    }
    s.close.store(true, Ordering::Release);
    let s = connect_ours(&h, to, 2);
    let cpu0 = iwarp_bench::cpu_time();
    let t = Instant::now();
    // Bounded: a transfer that stalls for two minutes fails the run.
    let give_up = t + Duration::from_secs(120);
    // Blocking sends, like the Linux client's: the thread sleeps while
    // the ring is full instead of taking CPU from the Linux receiver.
    let mut left = bulk;
    while left > 0 {
        let n = left.min(64 << 10);
        let wait = give_up.saturating_duration_since(Instant::now());
        if let Err(e) = s.send(vec![0x5au8; n], wait) {
            panic!("bulk send: {e}");
        }
        left -= n;
    }
    s.close.store(true, Ordering::Release);
    // The Linux server sends nothing: its FIN ends our receive side.
    let _ = s.wait_closed(Duration::from_secs(120));
    let secs = t.elapsed().as_secs_f64();
    let cpu = iwarp_bench::cpu_time() - cpu0;
    if count_tcp {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        s.flags() & flags::CLOSED != 0,
        "bulk connection did not close cleanly"
    );
    let (tcp, refused) = h
        .stop()
        .map(|(stack, ls)| (stack.stats().tcp_closed, ls.tx_dropped))
        .unwrap_or_default();
    (
        rtts,
        bulk as f64 / secs / 1e6,
        cpu / bulk as f64 * 1e9,
        tcp,
        refused,
    )
}

fn main() {
    let cli = cli();
    if let Some(code) = cli.netns.start("tcp-vs-linux", "bv") {
        std::process::exit(code.into());
    }
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("tcp-vs-linux: {why}");
        std::process::exit(2);
    }
    // A failed run panics (its message says why) and unwinds, which removes
    // the namespaces; it exits 1, the convention's runtime failure.
    if std::panic::catch_unwind(|| run(cli)).is_err() {
        std::process::exit(1);
    }
}

fn run(cli: &Cli) {
    let iters = cli.iters as usize;
    let loss = cli.loss;
    let bulk = (cli.bulk_mib.unwrap_or(if loss { 64 } else { 512 }) as usize) << 20;
    let p = iwarp_bench::netns_cli::prefix("bv");
    let ours_ns = Netns::new(&format!("{p}o")).expect("netns");
    let linux_ns = Netns::new(&format!("{p}l")).expect("netns");
    let mut veth = VethPair::new(&format!("{p}v")).expect("veth");
    veth.move_to(End::A, &ours_ns).expect("move");
    veth.move_to(End::B, &linux_ns).expect("move");
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).expect("ipv6");
        veth.disable_tx_offload(end).expect("offload");
        veth.set_up(end).expect("up");
    }
    let server_ip = Ipv4Addr::new(10, 211, 0, 2);
    veth.add_addr(End::B, "10.211.0.2/24").expect("addr");
    if loss {
        let rates = cli.loss_permille.clone();
        loss_table(&veth, &ours_ns, &linux_ns, server_ip, bulk, &rates);
        return;
    }

    // Baselines: the kernel at both ends, same veth, same namespaces; the
    // client spinning on a non-blocking socket (as our client thread
    // spins on its ring: like for like), then blocking in `read`.
    veth.add_addr(End::A, "10.211.0.3/24").expect("addr");
    let mut linux = Vec::new();
    for (port, spin) in [(5301, true), (5303, false)] {
        let addr = SocketAddrV4::new(server_ip, port);
        let (ready, server) = linux_server(&linux_ns, addr, iters);
        ready.recv().expect("server ready");
        let (rtt, bw) = linux_client(&ours_ns, addr, iters, bulk, spin);
        let rx = server.join().expect("server");
        assert_eq!(rx as usize, bulk);
        linux.push((rtt, bw));
    }
    let (blk_rtt, blk_bw) = linux.pop().expect("blocking run");
    let (lin_rtt, lin_bw) = linux.pop().expect("spinning run");
    ours_ns
        .ip(&["addr", "del", "10.211.0.3/24", "dev", veth.name(End::A)])
        .expect("addr del");

    // Ours: tcp-lite on AF_XDP at the client end.
    let addr = SocketAddrV4::new(server_ip, 5302);
    let (ready, server) = linux_server(&linux_ns, addr, iters);
    ready.recv().expect("server ready");
    let (our_rtt, our_bw, our_cpu, _, _) = our_client(
        &ours_ns,
        veth.name(End::A),
        Ipv4Addr::new(10, 211, 0, 1),
        addr,
        iters,
        bulk,
        false,
    );
    let our_rx = server.join().expect("server");
    assert_eq!(our_rx as usize, bulk);

    let l = summarize(lin_rtt);
    let b = summarize(blk_rtt);
    let o = summarize(our_rtt);
    println!("64-octet TCP ping-pong, {iters} round trips (full round trip, microseconds), and {} MiB one-way bulk", bulk >> 20);
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "client", "p50", "p99", "p99.9", "mean", "bulk MB/s"
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.0}",
        "Linux -> Linux, spin", l.p50, l.p99, l.p999, l.mean, lin_bw
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.0}   <- the client blocking in read (the other way of waiting)",
        "Linux -> Linux, block", b.p50, b.p99, b.p999, b.mean, blk_bw
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.0}",
        "tcp-lite/AF_XDP -> Linux", o.p50, o.p99, o.p999, o.mean, our_bw
    );
    println!(
        "ratio ours/Linux spinning (like for like: our client spins): p50 {:.2}  p99 {:.2}  p99.9 {:.2}  bulk {:.2}",
        o.p50 / l.p50,
        o.p99 / l.p99,
        o.p999 / l.p999,
        our_bw / lin_bw
    );
    println!(
        "ratio ours/Linux blocking: p50 {:.2}  p99 {:.2}  p99.9 {:.2}  bulk {:.2}",
        o.p50 / b.p50,
        o.p99 / b.p99,
        o.p999 / b.p999,
        our_bw / blk_bw
    );
    println!("our process CPU during bulk: {our_cpu:.2} ns/octet (poll loop busy-polls one core)");
}

/// Linux sends `bulk` octets from `ns` to `to` (the bulk phase of
/// [`linux_client`] alone, on a thread); returns octets per second.
fn linux_sender(ns: &Netns, to: SocketAddrV4, bulk: usize) -> std::thread::JoinHandle<Option<f64>> {
    let path = ns.ns_path();
    std::thread::spawn(move || {
        iwarp_xdp::in_netns(&path, move || {
            let mut s = TcpStream::connect_timeout(&to.into(), Duration::from_secs(10)).ok()?;
            s.set_write_timeout(Some(Duration::from_secs(60))).ok()?;
            s.set_read_timeout(Some(Duration::from_secs(60))).ok()?;
            let chunk = vec![0x5au8; 1 << 20];
            let t = Instant::now();
            let mut left = bulk;
            while left > 0 {
                let n = left.min(chunk.len());
                s.write_all(&chunk[..n]).ok()?;
                left -= n;
            }
            s.shutdown(std::net::Shutdown::Write).ok()?;
            let mut b = [0u8; 16];
            let _ = s.read(&mut b); // our close
            Some(bulk as f64 / t.elapsed().as_secs_f64() / 1e6)
        })
        .ok()
        .flatten()
    })
}

/// tcp-lite on AF_XDP listening on `port` at `ip`: Linux in `linux_ns`
/// sends `bulk` octets to it. Returns MB/s at our end (first octet
/// accepted to last octet received) and our counters.
fn our_server(
    ns: &Netns,
    linux_ns: &Netns,
    iface: &str,
    ip: Ipv4Addr,
    port: u16,
    bulk: usize,
) -> (f64, tcp_lite::tcp::Stats, LoopStats, u64) {
    let cfg = XdpConfig::new(iface, ip.octets());
    let dev = iwarp_xdp::in_netns(&ns.ns_path(), || XdpDevice::open(&cfg))
        .expect("enter namespace")
        .expect("open AF_XDP");
    let mut icfg = IfaceConfig::new(
        EthernetAddress(dev.mac_address()),
        Ipv4Address(ip.octets()),
        24,
    );
    icfg.mtu = dev.mtu() as usize;
    let mut scfg = StackConfig::new(icfg);
    scfg.tcp.rto_min = 5_000_000;
    scfg.tcp.congestion = congestion();
    if let Some(on) = cli().cwv {
        scfg.tcp.cwv = on;
    }
    scfg.tcp.time_wait = 1_000_000;
    if let Some(n) = cli().ack_every {
        scfg.tcp.ack_every = n;
    }
    // The kernel's AF_XDP counters, read on the loop thread: frames the
    // kernel dropped before our loop saw them (RX ring full, fill ring
    // empty) are losses no nftables rule made.
    let reader: iwarp_datapath::runtime::DeviceReader<XdpDevice> = Box::new(|d: &XdpDevice| {
        let k = d.stats().map(|s| s.kernel).unwrap_or_default();
        Box::new(k.rx_dropped + k.rx_ring_full + k.rx_fill_ring_empty_descs)
    });
    let h = spawn_probed(
        Stack::new(scfg, MemoryTable::new()),
        dev,
        Some(0),
        Mode::BusyPoll,
        4096,
        Some(reader),
    );
    h.post(Command::Listen {
        transport: Transport::Tcp,
        port,
        ulp: Ulp::Stream,
    })
    .expect("post");
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        assert!(Instant::now() < deadline, "listen timed out");
        match h.poll() {
            Some(Output::Listening { result, .. }) => {
                result.expect("listen");
                break;
            }
            _ => std::hint::spin_loop(),
        }
    }
    let sender = linux_sender(linux_ns, SocketAddrV4::new(ip, port), bulk);
    let deadline = Instant::now() + Duration::from_secs(10);
    let s = loop {
        assert!(Instant::now() < deadline, "accept timed out");
        match h.poll() {
            Some(Output::Accepted {
                stream: Some(s), ..
            }) => break s,
            _ => std::hint::spin_loop(),
        }
    };
    // A blocking reader, like the Linux server's: it sleeps while the
    // ring is empty instead of taking CPU from the Linux sender.
    let mut got = 0usize;
    let mut t = None;
    let deadline = Instant::now() + Duration::from_secs(120);
    while got < bulk {
        match s.recv(deadline.saturating_duration_since(Instant::now())) {
            Ok(Some(v)) => {
                t.get_or_insert_with(Instant::now);
                got += v.len();
            }
            Ok(None) | Err(_) => break,
        }
    }
    let secs = t.map_or(f64::NAN, |t| t.elapsed().as_secs_f64());
    assert_eq!(got, bulk, "Linux -> ours delivered {got} of {bulk} octets");
    let xdp_drops = h
        .snapshot(Duration::from_secs(5))
        .and_then(|(_, d)| d.downcast::<u64>().ok())
        .map_or(u64::MAX, |d| *d);
    s.close.store(true, Ordering::Release);
    let lin = sender.join().expect("sender");
    assert!(lin.is_some(), "Linux sender failed");
    while let Ok(Some(_)) = s.recv(Duration::from_secs(10)) {}
    let _ = s.wait_closed(Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(100));
    let (tcp, ls, bp) = h
        .stop()
        .map(|(stack, ls)| {
            let st = stack.stats();
            (st.tcp_closed, ls, st.rx_backpressure_drops)
        })
        .unwrap_or_default();
    (bulk as f64 / secs / 1e6, tcp, ls, xdp_drops + bp)
}

/// `--newreno`: NewReno instead of the default CUBIC.
fn congestion() -> tcp_lite::cc::Algorithm {
    if cli().newreno {
        tcp_lite::cc::Algorithm::NewReno
    } else {
        tcp_lite::cc::Algorithm::Cubic
    }
}

/// Drop `permille`/1000 of the packets entering and leaving `ns` at random
/// (none: no rule). Replaces the previous rule.
fn set_loss(ns: &Netns, permille: u32) {
    if let Err(e) = ns.set_random_loss(permille) {
        panic!("nftables loss rule in {}: {e}", ns.name());
    }
}

/// The congestion control new connections get in `ns`.
fn linux_cc(ns: &Netns) -> String {
    run_in(
        ns,
        &["sysctl", "-n", "net.ipv4.tcp_congestion_control"],
        Duration::from_secs(10),
    )
    .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
    .unwrap_or_else(|e| format!("unknown ({e})"))
}

/// The namespace's TCP InSegs and OutSegs (`/proc/net/snmp`).
fn tcp_segs(ns: &Netns) -> (u64, u64) {
    let v = counters(ns, "/proc/net/snmp", "Tcp:", &["InSegs", "OutSegs"]);
    (v[0], v[1])
}

/// The Linux sender's loss recovery, from its namespace's `TcpExt`
/// counters (`/proc/net/netstat`): timeouts, spurious timeouts, SACK
/// recoveries, tail loss probes and undos.
const LINUX_RECOVERY: [&str; 8] = [
    "TCPTimeouts",
    "TCPSpuriousRTOs",
    "TCPSackRecovery",
    "TCPLossProbes",
    "TCPDSACKUndo",
    "TCPLossUndo",
    "TCPFullUndo",
    "TCPPartialUndo",
];

/// The values of `names` in the `prefix` rows (a row of names, then one
/// of values) of `file` in `ns`; 0 for a name the kernel lacks.
fn counters(ns: &Netns, file: &str, prefix: &str, names: &[&str]) -> Vec<u64> {
    let out = run_in(ns, &["cat", file], Duration::from_secs(10)).expect(file);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut rows = text.lines().filter(|l| l.starts_with(prefix));
    let (Some(keys), Some(values)) = (rows.next(), rows.next()) else {
        return vec![0; names.len()];
    };
    names
        .iter()
        .map(|name| {
            keys.split_whitespace()
                .position(|n| n == *name)
                .and_then(|i| values.split_whitespace().nth(i))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0)
        })
        .collect()
}

fn loss_table(
    veth: &VethPair,
    ours_ns: &Netns,
    linux_ns: &Netns,
    server_ip: Ipv4Addr,
    bulk: usize,
    rates: &[u32],
) {
    // Offloads that would let Linux send more than one MTU per packet off.
    for end in [End::A, End::B] {
        veth.disable_segmentation_offload(end).expect("ethtool");
    }
    // `--linux-gso-max-segs N`: at most N segments per GSO packet on
    // both ends. Offloads off does not stop Linux from building 64 KiB
    // packets: its TCP always does (software GSO), and cuts them into
    // MTU-sized frames just before the device, so its sender runs its
    // TCP/IP output once per up to 44 frames. With 1 it runs it per
    // frame, as ours does.
    if let Some(n) = cli().linux_gso_max_segs {
        let n = n.to_string();
        for (ns, end) in [(ours_ns, End::A), (linux_ns, End::B)] {
            ns.ip(&["link", "set", "dev", veth.name(end), "gso_max_segs", &n])
                .expect("gso_max_segs");
        }
    }
    // The kernel's congestion control, per namespace (the host's default
    // unless `--linux-cc` names one): the Linux sender of Linux -> Linux
    // is in `ours_ns`, that of Linux -> ours in `linux_ns`.
    // A per-route `congctl`: a namespace may only default to the
    // algorithms the host allows (tcp_allowed_congestion_control), a
    // route may name any the kernel has.
    // `--linux-cc NAME` (the host's default otherwise, often not CUBIC:
    // BBR does not reduce its rate on random loss).
    let cc = cli().linux_cc.clone();
    if let Some(cc) = &cc {
        for (ns, end, peer) in [
            (ours_ns, End::A, server_ip),
            (linux_ns, End::B, Ipv4Addr::new(10, 211, 0, 1)),
        ] {
            let dst = format!("{peer}/32");
            ns.ip(&[
                "route",
                "replace",
                &dst,
                "dev",
                veth.name(end),
                "congctl",
                cc,
            ])
            .unwrap_or_else(|e| panic!("route congctl {cc} in {}: {e}", ns.name()));
        }
    }
    println!(
        "{} MiB one-way bulk, random loss both ways in the Linux end's namespace (nftables numgen), MTU 1500, TSO/GSO/GRO off{}; Linux congestion control: {} (ours: {:?}, RFC 7661 cwv {})",
        bulk >> 20,
        cli()
            .linux_gso_max_segs
            .map_or(String::new(), |n| format!(", gso_max_segs {n}")),
        cc.unwrap_or_else(|| linux_cc(ours_ns)),
        congestion(),
        cli().cwv.unwrap_or(tcp_lite::tcp::Config::default().cwv)
    );
    println!(
        "{:>7} {:>11} {:>11} {:>6} {:>6} {:>10} {:>6} {:>9} {:>7} {:>12} {:>8} {:>13} {:>6} {:>9} {:>9} {:>9}",
        "loss %",
        "Linux MB/s",
        "ours->L",
        "ratio",
        "RTOs",
        "recoveries",
        "TLPs",
        "in recov",
        "rescues",
        "undos DS/RTO",
        "tx refd",
        "L->ours MB/s",
        "ratio",
        "segs/ACK",
        "Linux's",
        "rx drops"
    );
    struct Cleanup<'a>(&'a Netns);
    impl Drop for Cleanup<'_> {
        fn drop(&mut self) {
            set_loss(self.0, 0);
        }
    }
    let _cleanup = Cleanup(linux_ns);
    for (i, &permille) in rates.iter().enumerate() {
        set_loss(linux_ns, permille);
        let port = 5400 + 2 * i as u16;
        veth.add_addr(End::A, "10.211.0.3/24").expect("addr");
        let addr = SocketAddrV4::new(server_ip, port);
        let (ready, server) = linux_server(linux_ns, addr, 0);
        ready.recv().expect("server ready");
        let before = tcp_segs(linux_ns);
        let rec0 = counters(ours_ns, "/proc/net/netstat", "TcpExt:", &LINUX_RECOVERY);
        let (_, lin_bw) = linux_client(ours_ns, addr, 0, bulk, false);
        let lin_rx = server.join().expect("server");
        let after = tcp_segs(linux_ns);
        let rec1 = counters(ours_ns, "/proc/net/netstat", "TcpExt:", &LINUX_RECOVERY);
        let lin_rec: Vec<u64> = rec1.iter().zip(&rec0).map(|(a, b)| a - b).collect();
        // The Linux receiver's segments in per segment out.
        let lin_per_ack =
            (after.0 - before.0) as f64 / (after.1.saturating_sub(before.1)).max(1) as f64;
        assert_eq!(lin_rx as usize, bulk);
        ours_ns
            .ip(&["addr", "del", "10.211.0.3/24", "dev", veth.name(End::A)])
            .expect("addr del");
        let addr = SocketAddrV4::new(server_ip, port + 1);
        let (ready, server) = linux_server(linux_ns, addr, 0);
        ready.recv().expect("server ready");
        let before = tcp_segs(linux_ns);
        let (_, our_bw, _, st, tx_refused) = our_client(
            ours_ns,
            veth.name(End::A),
            Ipv4Addr::new(10, 211, 0, 1),
            addr,
            0,
            bulk,
            true,
        );
        let our_rx = server.join().expect("server");
        let after = tcp_segs(linux_ns);
        let lin_per_ack_ours =
            (after.0 - before.0) as f64 / (after.1.saturating_sub(before.1)).max(1) as f64;
        assert_eq!(our_rx as usize, bulk);
        // Linux -> ours: our stack listens at the same end.
        let (rx_bw, _, rx_loop, rx_drops) = our_server(
            ours_ns,
            linux_ns,
            veth.name(End::A),
            Ipv4Addr::new(10, 211, 0, 1),
            port + 1000,
            bulk,
        );
        println!(
            "{:>7.1} {:>11.0} {:>11.0} {:>6.2} {:>6} {:>10} {:>6} {:>9} {:>7} {:>12} {:>8} {:>13.0} {:>6.2} {:>9.1} {:>9.1} {:>9}",
            f64::from(permille) / 10.0,
            lin_bw,
            our_bw,
            our_bw / lin_bw,
            st.rto_retransmits,
            st.sack_recoveries,
            st.tlp_probes,
            st.recovery_probes,
            st.rescue_retransmits,
            format!("{}/{}", st.dsack_undos, st.spurious_rto_undone),
            tx_refused,
            rx_bw,
            rx_bw / lin_bw,
            // Our receiver's frames in per frame out (nearly all pure
            // ACKs): how many segments each ACK covers.
            rx_loop.rx_frames as f64 / rx_loop.tx_frames.max(1) as f64,
            lin_per_ack,
            rx_drops
        );
        // Our sender's limited time (tcp::Stats, summed over its
        // connections) as a share of its transfer time.
        let secs = bulk as f64 / our_bw / 1e6;
        let pct = |ns: u64| ns as f64 / 1e9 / secs * 100.0;
        println!(
            "{:>7} ours->L sender: cwnd-limited {:.0}%, app-limited {:.0}% of {:.2} s; RFC 7661 reductions {} NVP / {} loss; the Linux receiver sent a segment per {:.1} of ours ({:.1} of Linux's)",
            "",
            pct(st.cwnd_limited_ns),
            pct(st.app_limited_ns),
            secs,
            st.cwv_nvp_reductions,
            st.cwv_loss_reductions,
            lin_per_ack_ours,
            lin_per_ack
        );
        // The Linux -> Linux sender's own figures, for comparison.
        println!(
            "{:>7} Linux->L sender: RTOs {} ({} spurious), SACK recoveries {}, TLPs {}, undos {} (DSACK {}, after an RTO {})",
            "",
            lin_rec[0],
            lin_rec[1],
            lin_rec[2],
            lin_rec[3],
            lin_rec[4] + lin_rec[5] + lin_rec[6] + lin_rec[7],
            lin_rec[4],
            lin_rec[5]
        );
        // The RTO audit (issue 12): what the sender knew when each timeout
        // fired (tcp::Stats::rto_*).
        println!(
            "{:>7} ours->L RTOs: {} with SACKed data above SND.UNA ({} of them a resent hole), {} after a probe, {} repeated",
            "",
            st.rto_sacked_above,
            st.rto_hole_resent,
            st.rto_after_probe,
            st.rto_repeated
        );
    }
}
