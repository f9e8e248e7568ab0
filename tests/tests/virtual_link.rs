//! Two host stacks (Ethernet, ARP, IPv4, TCP, byte streams and iWARP) on a simulated
//! link in virtual time (`iwarp_datapath::link::virtual_link`): no threads, no
//! clock, so every run is a pure function of its seed and a failure replays
//! exactly. Seeded loss, loss bursts, reordering, duplication and
//! corruption; every octet checked both ways.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::atomic::Ordering;
use std::sync::Arc;

use iwarp_datapath::link::virtual_link::{LinkConfig, LinkFaults, LinkStats, Side, VirtualLink};
use iwarp_datapath::stack::{
    flags, Command, Output, Stack, StackConfig, StreamShared, Transport, Ulp,
};
use iwarp_proto::mem::MemoryTable;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const IP_A: Ipv4Address = Ipv4Address::new(10, 4, 0, 1);
const IP_B: Ipv4Address = Ipv4Address::new(10, 4, 0, 2);

/// A host at `ip` with short TCP timers for the virtual link.
fn config(ip: Ipv4Address, last: u8) -> StackConfig {
    let mut c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        ip,
        24,
    ));
    c.tcp.rto_min = 5_000_000;
    c.tcp.rto_initial = 50_000_000;
    c.tcp.time_wait = 2_000_000_000;
    c
}

fn stack(ip: Ipv4Address, last: u8) -> Stack {
    Stack::new(config(ip, last), MemoryTable::new())
}

fn pattern(i: usize) -> u8 {
    (i.wrapping_mul(2_654_435_761) >> 13) as u8
}

/// The application's end of one stream: sends `len` octets of the pattern
/// from `offset`, then closes; keeps what arrives.
struct App {
    s: Arc<StreamShared>,
    len: usize,
    offset: usize,
    sent: usize,
    got: Vec<u8>,
}

impl App {
    fn new(s: Arc<StreamShared>, len: usize, offset: usize) -> App {
        App {
            s,
            len,
            offset,
            sent: 0,
            got: Vec::new(),
        }
    }

    /// One turn; true once the stream ended cleanly both ways.
    fn turn(&mut self) -> bool {
        while self.sent < self.len {
            let n = (self.len - self.sent).min(16 << 10);
            let chunk = (self.sent..self.sent + n)
                .map(|i| pattern(i + self.offset))
                .collect();
            if self.s.tx.push(chunk).is_err() {
                break;
            }
            self.sent += n;
        }
        if self.sent == self.len {
            self.s.close.store(true, Ordering::Release);
        }
        while let Some(v) = self.s.rx.pop() {
            self.got.extend_from_slice(&v);
        }
        let f = self.s.flags();
        assert_eq!(f & flags::FAILED, 0, "stream failed: {:?}", self.s.error());
        f & flags::CLOSED != 0 && f & flags::RX_EOF != 0 && self.s.rx.is_empty()
    }
}

/// Virtual-time limit of one transfer: 120 s of simulated time.
const MAX_STEPS: u64 = 12_000_000;

fn take<T>(link: &mut VirtualLink<Stack>, side: Side, f: impl Fn(Output) -> Option<T>) -> T {
    let mut found = None;
    assert!(
        link.run_until(MAX_STEPS, |l| {
            while let Some(o) = l.outputs(side).pop_front() {
                if let Some(t) = f(o) {
                    found = Some(t);
                    return true;
                }
            }
            false
        }),
        "no such output on {side:?}"
    );
    found.unwrap()
}

/// Two stacks on a link with `cfg`, A listening, B connected to it: the
/// link and the stream ends of A and B.
fn open(cfg: LinkConfig) -> (VirtualLink<Stack>, Arc<StreamShared>, Arc<StreamShared>) {
    let mut link = VirtualLink::new(stack(IP_A, 1), stack(IP_B, 2), cfg);
    link.command(
        Side::A,
        Command::Listen {
            transport: Transport::Tcp,
            port: 5001,
            ulp: Ulp::Stream,
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: IP_A,
            port: 5001,
            ulp: Ulp::Stream,
        },
    );
    let sb = take(&mut link, Side::B, |o| match o {
        Output::Connected {
            stream: Some(s), ..
        } => Some(s),
        _ => None,
    });
    let sa = take(&mut link, Side::A, |o| match o {
        Output::Accepted {
            stream: Some(s), ..
        } => Some(s),
        _ => None,
    });
    (link, sa, sb)
}

fn streams_both_ways(cfg: LinkConfig, len: usize) -> LinkStats {
    let (mut link, sa, sb) = open(cfg);
    let (mut a, mut b) = (App::new(sa, len, 7), App::new(sb, len, 0));
    let done = link.run_until(MAX_STEPS, |_| {
        let (x, y) = (a.turn(), b.turn());
        x && y
    });
    let stats = link.stats();
    let (sa, sb) = link.into_engines();
    let why = || {
        format!(
            "seed {}: link {stats:?}\na {:?}\nb {:?}",
            cfg.seed,
            sa.stats(),
            sb.stats()
        )
    };
    assert!(done, "not finished in virtual time: {}", why());
    if std::env::var_os("VLINK_DEBUG").is_some() {
        eprintln!("{} at {} ms", why(), link_ms(stats, cfg));
    }

    let first_bad = |got: &[u8], offset: usize| {
        got.iter()
            .enumerate()
            .position(|(i, &x)| x != pattern(i + offset))
    };
    assert_eq!(
        (a.got.len(), first_bad(&a.got, 0)),
        (len, None),
        "{}",
        why()
    );
    assert_eq!(
        (b.got.len(), first_bad(&b.got, 7)),
        (len, None),
        "{}",
        why()
    );
    stats
}

/// Frames sent, as virtual milliseconds of one 10 µs tick each: a rough
/// size of the run for the debug line.
fn link_ms(stats: LinkStats, cfg: LinkConfig) -> u64 {
    stats.sent * cfg.tick_ns / 1_000_000
}

fn lossy(seed: u64, loss_ppm: u32) -> LinkConfig {
    LinkConfig {
        seed,
        faults: LinkFaults {
            loss: loss_ppm,
            burst: loss_ppm / 10,
            burst_len: 8,
            reorder: loss_ppm,
            dup: loss_ppm / 5,
            corrupt: loss_ppm / 20,
        },
        ..LinkConfig::default()
    }
}

#[test]
fn clean_link() {
    streams_both_ways(LinkConfig::default(), 2 << 20);
}

#[test]
fn lossy_links_many_seeds() {
    // 0.1%, 1%, 2% and 5% loss, with bursts of 8, reordering, duplication
    // and corruption in proportion.
    for (i, loss) in [1_000, 10_000, 20_000, 50_000].into_iter().enumerate() {
        let mut dropped = 0;
        for seed in 0..4 {
            let s = streams_both_ways(lossy(seed * 10 + i as u64, loss), 1 << 20);
            dropped += s.lost + s.burst_lost;
        }
        // The faults configured were suffered (and recovered from).
        assert!(dropped > 0, "{loss} ppm: nothing dropped");
    }
}

#[test]
fn the_same_seed_replays_the_same_run() {
    let run = || {
        let (mut link, sa, sb) = open(lossy(99, 20_000));
        let (mut a, mut b) = (App::new(sa, 128 << 10, 7), App::new(sb, 128 << 10, 0));
        assert!(link.run_until(MAX_STEPS, |_| {
            let (x, y) = (a.turn(), b.turn());
            x && y
        }));
        (link.now(), link.stats())
    };
    let first = run();
    assert!(first.1.lost > 0, "{first:?}");
    assert_eq!(run(), first);
}

/// An iWARP end with one 1 MiB region (`fill` gives its octets), remotely
/// writable; `sweep` is its `StackConfig::idle_sweep`.
fn iwarp_end(
    ip: Ipv4Address,
    last: u8,
    sweep: u64,
    fill: impl Fn(usize) -> u8,
) -> (Stack, iwarp_proto::mem::PdId, iwarp_proto::mem::STag) {
    use iwarp_proto::mem::Access;
    let mut c = config(ip, last);
    c.idle_sweep = sweep;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let data: Vec<u8> = (0..1 << 20).map(fill).collect();
    let access = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let stag = mem.register(pd, data, access, 0).unwrap();
    (Stack::new(c, mem), pd, stag)
}

/// 1 MiB of RDMA Writes (64 of 16 KiB, 8 outstanding) from B into A's
/// region over `cfg`; returns the virtual time taken (ns), after checking
/// every octet arrived.
fn iwarp_writes(cfg: LinkConfig, sweep: u64) -> u64 {
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand, HostOutput};
    use iwarp_datapath::StreamParams;
    use iwarp_proto::qp::{SgList, Sge, WcStatus, WorkRequest};
    let (a, pd_a, stag_a) = iwarp_end(IP_A, 1, sweep, |_| 0);
    let (b, pd_b, stag_b) = iwarp_end(IP_B, 2, sweep, pattern);
    let ulp = |pd| Ulp::Iwarp {
        mpa: iwarp_control::MpaConfig::default(),
        params: StreamParams {
            pd,
            emss: 1460,
            sq_depth: 16,
            rq_depth: 4,
        },
        manual: false,
        cq: None,
        srq: None,
    };
    let mut link = VirtualLink::new(a, b, cfg);
    link.command(
        Side::A,
        Command::Listen {
            transport: Transport::Tcp,
            port: 5002,
            ulp: ulp(pd_a),
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: IP_A,
            port: 5002,
            ulp: ulp(pd_b),
        },
    );
    let established = |o| match o {
        Output::Cm(id, CmEvent::Established(_)) => Some(id),
        _ => None,
    };
    let sock = take(&mut link, Side::B, established);
    let sock_a = take(&mut link, Side::A, established);
    // For the closing Send, which arrives after every Write is placed
    // (RFC 5040 §5.5): a Write's completion at its source means only that
    // its buffer may be reused.
    link.command(
        Side::A,
        Command::Iwarp(sock_a, HostCommand::PostRecv(1, SgList::EMPTY)),
    );
    let start = link.now();
    const N: u64 = 64;
    const LEN: u64 = 16 << 10;
    let (mut posted, mut done, mut placed) = (0u64, 0u64, false);
    let finished = link.run_until(MAX_STEPS, |l| {
        while let Some(o) = l.outputs(Side::B).pop_front() {
            match o {
                Output::Iwarp(_, HostOutput::Completion(c)) => {
                    assert_eq!(c.status, WcStatus::Success, "{c:?}");
                    done += 1;
                }
                Output::Iwarp(_, other) => panic!("sender: {other:?}"),
                _ => {}
            }
        }
        while let Some(o) = l.outputs(Side::A).pop_front() {
            match o {
                Output::Iwarp(_, HostOutput::Completion(c)) => {
                    assert_eq!((c.status, c.wr_id), (WcStatus::Success, 1), "{c:?}");
                    placed = true;
                }
                Output::Iwarp(_, other) => panic!("target: {other:?}"),
                _ => {}
            }
        }
        if done == N && posted == N {
            let send = WorkRequest::Send {
                wr_id: N,
                signaled: true,
                local: SgList::EMPTY,
                solicited: false,
                invalidate: None,
            };
            l.command(Side::B, Command::Iwarp(sock, HostCommand::PostSend(send)));
            posted += 1;
        }
        while posted < N && posted - done < 8 {
            let wr = WorkRequest::Write {
                wr_id: posted,
                signaled: true,
                local: Sge {
                    stag: stag_b,
                    to: posted * LEN,
                    len: LEN as u32,
                }
                .into(),
                remote_stag: stag_a,
                remote_to: posted * LEN,
            };
            l.command(Side::B, Command::Iwarp(sock, HostCommand::PostSend(wr)));
            posted += 1;
        }
        placed
    });
    assert!(
        finished,
        "seed {}: {done} of {N} Writes done, closing Send placed: {placed}",
        cfg.seed
    );
    let took = link.now() - start;
    let (a, _) = link.into_engines();
    let got = a.mem.snapshot(stag_a).unwrap();
    let bad = got.iter().enumerate().position(|(i, &x)| x != pattern(i));
    assert_eq!(bad, None, "seed {}: first wrong octet", cfg.seed);
    took
}

/// The stack polls an idle connection only when a deadline from its
/// `poll_timeout` is due: with the safety-net sweep off, loss on an iWARP
/// connection (whose recovery waits on retransmission and probe timers
/// when a tail is lost) is still recovered, every octet placed, in the same
/// virtual time as with the sweep on.
#[test]
fn iwarp_timers_fire_from_the_deadline_heap_alone() {
    for seed in 0..4 {
        let cfg = lossy(100 + seed, 20_000);
        let with_sweep = iwarp_writes(cfg, 100_000_000);
        let heap_only = iwarp_writes(cfg, u64::MAX);
        assert_eq!(heap_only, with_sweep, "seed {seed}");
    }
}

/// Seeds of `lossy`'s scenario that failed (issue 12) while a loss burst
/// counted frames only: near the end of a transfer one segment goes per
/// backed-off RTO, and a burst of eight took eight of them (or their ACKs)
/// in a row, tens of virtual seconds, until the connection timed out in
/// CLOSING, its peer reset it, or the SYN-ACK retries ran out. A burst now
/// also ends in time (`virtual_link::BURST_MAX_NS`).
#[test]
fn bursts_spread_over_backed_off_retransmissions_seeds() {
    for (seed, loss) in [
        (62, 50_000),  // not finished: 8 ACKs in CLOSING lost to two bursts
        (9, 50_000),   // TimedOut in CLOSING
        (6, 50_000),   // Reset: the peer timed out in CLOSING
        (347, 50_000), // SYN-ACK retries ran out
        (454, 20_000),
        (4, 100_000),
        (318, 10_000),
    ] {
        streams_both_ways(lossy(seed, loss), 1 << 20);
    }
}

/// `lossy_links_many_seeds`' scenario over many seeds (`SWEEP_N`, default
/// 2000, from `SWEEP_BASE`) at `SWEEP_LOSS` ppm (default 50 000); bounded
/// to 25 minutes of wall time. `cargo test --release -p iwarp-tests --test
/// virtual_link sweep -- --ignored --nocapture`.
#[test]
#[ignore]
fn lossy_links_seed_sweep() {
    let env = |k: &str, d: u64| {
        std::env::var(k)
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(d)
    };
    let (n, base, loss) = (
        env("SWEEP_N", 2000),
        env("SWEEP_BASE", 0),
        env("SWEEP_LOSS", 50_000),
    );
    let t0 = std::time::Instant::now();
    let mut failed = Vec::new();
    for seed in base..base + n {
        if t0.elapsed().as_secs() > 1500 {
            eprintln!("stopped at seed {seed}: time");
            break;
        }
        let r = std::panic::catch_unwind(|| streams_both_ways(lossy(seed, loss as u32), 1 << 20));
        if r.is_err() {
            failed.push(seed);
        }
    }
    eprintln!("{loss} ppm: {} failed: {failed:?}", failed.len());
    assert!(failed.is_empty(), "{loss} ppm: seeds {failed:?} failed");
}
