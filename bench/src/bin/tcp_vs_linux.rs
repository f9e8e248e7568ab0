//! tcp-lite on AF_XDP against the Linux kernel's TCP, on the same veth pair
//! and namespaces, in one run: 64-octet ping-pong round trips and one-way
//! bulk throughput, first with Linux at both ends (the baseline), then with
//! our stack as the client and Linux as the server. Prints both and the
//! ratios ours/Linux. Needs root.
//!
//! ```text
//! cargo run --release -p iwarp-bench --bin tcp-vs-linux -- [--iters N] [--bulk-mib M]
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddrV4, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use iwarp_datapath::runtime::{spawn, Mode};
use iwarp_datapath::stack::{flags, Command, Output, Stack, StackConfig, StreamShared, Ulp};
use iwarp_proto::mem::MemoryTable;
use iwarp_xdp::{Config as XdpConfig, XdpDevice};
use netns_harness::{End, Netns, VethPair};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const MSG: usize = 64;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
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

fn linux_client(ns: &Netns, addr: SocketAddrV4, iters: usize, bulk: usize) -> (Vec<u64>, f64) {
    let path = ns.ns_path();
    iwarp_xdp::in_netns(&path, move || {
        let mut s = TcpStream::connect(addr).expect("connect");
        s.set_nodelay(true).expect("nodelay");
        let msg = [7u8; MSG];
        let mut buf = [0u8; MSG];
        let mut rtts = Vec::with_capacity(iters);
        for _ in 0..iters {
            let t = Instant::now();
            s.write_all(&msg).expect("write");
            s.read_exact(&mut buf).expect("read");
            rtts.push(t.elapsed().as_nanos() as u64);
        }
        drop(s);
        let mut s = TcpStream::connect(addr).expect("connect bulk");
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

fn connect_ours(
    h: &iwarp_datapath::runtime::LoopHandle<Stack>,
    to: SocketAddrV4,
    token: u64,
) -> Arc<StreamShared> {
    h.post(Command::Connect {
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
) -> (Vec<u64>, f64, f64) {
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
    let cpu0 = cpu_time();
    let t = Instant::now();
    let mut left = bulk;
    while left > 0 {
        let n = left.min(64 << 10);
        let mut v = vec![0x5au8; n];
        loop {
            match s.tx.push(v) {
                Ok(()) => break,
                Err(back) => {
                    v = back;
                    std::thread::yield_now();
                }
            }
        }
        left -= n;
    }
    s.close.store(true, Ordering::Release);
    let deadline = Instant::now() + Duration::from_secs(120);
    while s.flags() & (flags::CLOSED | flags::FAILED) == 0 && Instant::now() < deadline {
        while s.rx.pop().is_some() {}
        std::thread::sleep(Duration::from_micros(50));
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = cpu_time() - cpu0;
    assert!(
        s.flags() & flags::CLOSED != 0,
        "bulk connection did not close cleanly"
    );
    drop(h);
    (rtts, bulk as f64 / secs / 1e6, cpu / bulk as f64 * 1e9)
}

/// This process's CPU time in seconds (user + system), from /proc.
fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

fn main() {
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("tcp-vs-linux: {why}");
        std::process::exit(2);
    }
    let iters = arg("--iters", 20_000);
    let bulk = arg("--bulk-mib", 512) << 20;
    let ours_ns = Netns::new("bvo").expect("netns");
    let linux_ns = Netns::new("bvl").expect("netns");
    let mut veth = VethPair::new("bvv").expect("veth");
    veth.move_to(End::A, &ours_ns).expect("move");
    veth.move_to(End::B, &linux_ns).expect("move");
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).expect("ipv6");
        veth.disable_tx_offload(end).expect("offload");
        veth.set_up(end).expect("up");
    }
    let server_ip = Ipv4Addr::new(10, 211, 0, 2);
    veth.add_addr(End::B, "10.211.0.2/24").expect("addr");

    // Baseline: the kernel at both ends, same veth, same namespaces.
    veth.add_addr(End::A, "10.211.0.3/24").expect("addr");
    let addr = SocketAddrV4::new(server_ip, 5301);
    let (ready, server) = linux_server(&linux_ns, addr, iters);
    ready.recv().expect("server ready");
    let (lin_rtt, lin_bw) = linux_client(&ours_ns, addr, iters, bulk);
    let lin_rx = server.join().expect("server");
    assert_eq!(lin_rx as usize, bulk);
    ours_ns
        .ip(&["addr", "del", "10.211.0.3/24", "dev", veth.name(End::A)])
        .expect("addr del");

    // Ours: tcp-lite on AF_XDP at the client end.
    let addr = SocketAddrV4::new(server_ip, 5302);
    let (ready, server) = linux_server(&linux_ns, addr, iters);
    ready.recv().expect("server ready");
    let (our_rtt, our_bw, our_cpu) = our_client(
        &ours_ns,
        veth.name(End::A),
        Ipv4Addr::new(10, 211, 0, 1),
        addr,
        iters,
        bulk,
    );
    let our_rx = server.join().expect("server");
    assert_eq!(our_rx as usize, bulk);

    let l = summarize(lin_rtt);
    let o = summarize(our_rtt);
    println!("64-octet TCP ping-pong, {iters} round trips (full round trip, microseconds), and {} MiB one-way bulk", bulk >> 20);
    println!(
        "{:<28} {:>8} {:>8} {:>8} {:>8} {:>10}",
        "client", "p50", "p99", "p99.9", "mean", "bulk MB/s"
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.0}",
        "Linux -> Linux", l.p50, l.p99, l.p999, l.mean, lin_bw
    );
    println!(
        "{:<28} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>10.0}",
        "tcp-lite/AF_XDP -> Linux", o.p50, o.p99, o.p999, o.mean, our_bw
    );
    println!(
        "ratio ours/Linux: p50 {:.2}  p99 {:.2}  p99.9 {:.2}  bulk {:.2}",
        o.p50 / l.p50,
        o.p99 / l.p99,
        o.p999 / l.p999,
        our_bw / lin_bw
    );
    println!("our process CPU during bulk: {our_cpu:.2} ns/octet (poll loop busy-polls one core)");
}
