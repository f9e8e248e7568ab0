//! Many connections: what N iWARP connections (TCP + MPA, one QP each end)
//! cost our host stack, beside Linux TCP connections on loopback in the same
//! run. Two `Stack`s run on the virtual-time link
//! (`iwarp_datapath::virtual_link`), so wall time is our CPU time only.
//!
//! Prints, for N connections:
//! - setup: wall time to establish all N (SYN to MPA Reply, both ends on
//!   one thread), connections per second; Linux: `connect` + `accept` of
//!   the same number of TCP connections on 127.0.0.1 (no MPA), per second;
//! - memory: resident-set growth per connection end (`VmRSS`, so it
//!   includes allocator slack), with all N idle;
//! - idle cost: wall time of one poll round of a stack holding N idle
//!   connections, and per connection (today the stack visits every
//!   connection each round).
//!
//! ```text
//! qp-scale [-n N]
//! ```

use std::net::{TcpListener, TcpStream};
use std::time::Instant;

use iwarp_control::MpaConfig;
use iwarp_datapath::link::virtual_link::{LinkConfig, Side, VirtualLink};
use iwarp_datapath::over_tcp::CmEvent;
use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_proto::mem::{MemoryTable, PdId};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

/// What N iWARP connections cost our host stack (setup rate, memory per
/// connection, idle poll cost), beside Linux TCP connections on loopback.
#[derive(Debug, clap::Parser)]
#[command(name = "qp-scale", version)]
struct Cli {
    /// Connections.
    #[arg(short = 'n', value_name = "N", default_value_t = 1000,
          value_parser = clap::value_parser!(u64).range(1..=16_000))]
    n: u64,
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

fn stack(last: u8) -> (Stack, PdId) {
    let mut c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        Ipv4Address::new(10, 5, 0, last),
        24,
    ));
    c.tcp.rto_min = 5_000_000;
    c.tcp.rto_initial = 50_000_000;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    (Stack::new(c, mem), pd)
}

fn ulp(pd: PdId) -> Ulp {
    Ulp::Iwarp {
        mpa: MpaConfig::default(),
        params: StreamParams {
            pd,
            emss: 1460,
            sq_depth: 64,
            rq_depth: 64,
        },
        manual: false,
        cq: None,
        srq: None,
    }
}

/// Established connections seen on `side` so far (outputs drained).
fn count_established(link: &mut VirtualLink<Stack>, side: Side, failed: &mut u64) -> u64 {
    let mut n = 0;
    while let Some(o) = link.outputs(side).pop_front() {
        match o {
            Output::Cm(_, CmEvent::Established(_)) => n += 1,
            Output::Cm(_, CmEvent::SetupFailed(_)) | Output::Failed { .. } => *failed += 1,
            _ => {}
        }
    }
    n
}

struct Ours {
    setup_s: f64,
    rss_per_end_kib: f64,
    round_us: f64,
}

fn ours(n: u64) -> Result<Ours, String> {
    let rss0 = rss_kib();
    let (a, pd_a) = stack(1);
    let (b, pd_b) = stack(2);
    let mut link = VirtualLink::new(a, b, LinkConfig::default());
    link.command(
        Side::A,
        Command::Listen {
            transport: Transport::Tcp,
            port: 7000,
            ulp: ulp(pd_a),
        },
    );
    let start = Instant::now();
    let (mut est_a, mut est_b, mut failed, mut asked) = (0, 0, 0, 0);
    // Connect in waves the listener's SYN backlog takes at once.
    let mut steps = 0u64;
    while est_a < n || est_b < n {
        if asked < n && asked - est_b < 64 {
            for _ in 0..16.min(n - asked) {
                link.command(
                    Side::B,
                    Command::Connect {
                        transport: Transport::Tcp,
                        token: asked,
                        remote: Ipv4Address::new(10, 5, 0, 1),
                        port: 7000,
                        ulp: ulp(pd_b),
                    },
                );
                asked += 1;
            }
        }
        link.step();
        steps += 1;
        est_a += count_established(&mut link, Side::A, &mut failed);
        est_b += count_established(&mut link, Side::B, &mut failed);
        if failed > 0 {
            return Err(format!("{failed} connections failed"));
        }
        // 10 virtual minutes: something is stuck.
        if steps > 60_000_000 {
            return Err(format!("only {est_a}/{est_b} of {n} established"));
        }
    }
    let setup_s = start.elapsed().as_secs_f64();
    let rss1 = rss_kib();
    // Idle rounds: nothing to send, every connection visited.
    let rounds = 2000u64.min(20_000_000 / n.max(1)).max(10);
    let t = Instant::now();
    for _ in 0..rounds {
        link.step();
    }
    let round_us = t.elapsed().as_secs_f64() * 1e6 / rounds as f64 / 2.0;
    Ok(Ours {
        setup_s,
        rss_per_end_kib: rss1.saturating_sub(rss0) as f64 / (2 * n) as f64,
        round_us,
    })
}

/// Linux: `m` TCP connections on loopback, connect and accept on one
/// thread; seconds taken.
fn linux(m: u64) -> Result<f64, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind: {e}"))?;
    let addr = l.local_addr().map_err(|e| e.to_string())?;
    let mut keep = Vec::with_capacity(2 * m as usize);
    let start = Instant::now();
    for _ in 0..m {
        let c = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
        let (s, _) = l.accept().map_err(|e| format!("accept: {e}"))?;
        keep.push(c);
        keep.push(s);
    }
    Ok(start.elapsed().as_secs_f64())
}

fn main() {
    let n = <Cli as clap::Parser>::parse().n;
    let o = match ours(n) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("qp-scale: ours: {e}");
            std::process::exit(1);
        }
    };
    // Linux's file descriptors: at most 400 pairs, under the default limit.
    let m = n.min(400);
    let l = match linux(m) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("qp-scale: Linux baseline: {e}");
            std::process::exit(1);
        }
    };
    let ours_rate = n as f64 / o.setup_s;
    let linux_rate = m as f64 / l;
    println!("connections: {n} iWARP (TCP + MPA) between two of our stacks, virtual-time link");
    println!(
        "setup:  ours {ours_rate:.0} conn/s ({:.3} s for {n}); Linux TCP on loopback {linux_rate:.0} conn/s ({m} connections); ratio {:.2}",
        o.setup_s,
        ours_rate / linux_rate
    );
    println!(
        "memory: {:.1} KiB resident per connection end, all idle",
        o.rss_per_end_kib
    );
    println!(
        "idle:   {:.1} µs per poll round of one stack, {:.1} ns per connection",
        o.round_us,
        o.round_us * 1000.0 / n as f64
    );
}
