//! What our protocol code costs per octet, without the kernel: two host
//! `Stack`s on the virtual-time link (`iwarp_datapath::virtual_link`, no
//! threads, no sockets, no clock), one iWARP connection, RDMA Writes of
//! `-s` octets with `--window` outstanding until `--mib` MiB have moved.
//! Beside it, in the same run, the floor every iWARP stack pays: one copy
//! and one CRC32c per octet at each end (the sender gathering from the
//! region, the receiver placing into it).
//!
//! Both are timed in CPU seconds of this (single-threaded) process, not
//! wall time, so a busy machine that keeps us off the CPU moves them less.
//! Ours includes the link's own copy of each frame into its queue. Run it
//! under `perf record` to see where the time goes.
//!
//! ```text
//! stack-cost [--mtu N] [-s SIZE] [--window W] [--mib M] [--copy-tx] [--transport mpa|sctp]
//!            [--pingpong [--watch]] [--ack-at-once] [--mpa-crc]
//! ```
//!
//! `--transport sctp` runs the same Writes over DDP/SCTP (RFC 5043): the
//! stacks' SCTP part, one association, one DDP Stream Session.
//!
//! `--pingpong` answers each Write + doorbell with one (as `iwarp-perf
//! write_lat`) and prints frames, link steps and rounds left out
//! (`StackStats::idle_rounds`) per round trip; under
//! callgrind, instructions per round trip. By default an ACK waits one
//! step for data going back, as every `iwarp` context does (`ACK_ROUND`);
//! `--ack-at-once` ACKs every segment at once, as every context did
//! before the delayed ACK (and inline contexts until 2026-11-28).
//! `--pingpong --watch` sends a Write alone each way, each end watching
//! the last octet of the peer's Write in its own region, as `iwarp-perf
//! write_lat` does (its `--doorbell` is the plain `--pingpong`).
//!
//! `--mpa-crc` has both ends ask for MPA's CRC (RFC 5044 §4.3; off by
//! default, as both ends may agree): MPA then checks every FPDU as SCTP
//! checks every packet (RFC 9260 §6.8, always on), for a comparison
//! where both transports pay for an integrity check.
//!
//! `--copy-tx` frames FPDUs into TCP's send buffer (`StackConfig::copy_tx`)
//! instead of one-copy transmit: run both to see what the copy costs.

use clap::builder::TypedValueParser as _;
use iwarp_control::MpaConfig;
use iwarp_datapath::link::virtual_link::{LinkConfig, Side, VirtualLink};
use iwarp_datapath::over_tcp::{CmEvent, HostCommand, HostOutput};
use iwarp_datapath::stack::{Command, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_datapath::StreamParams;
use iwarp_memreg::Region;
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use iwarp_proto::qp::{Sge, WorkRequest};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

/// What our protocol code costs per octet without the kernel (two stacks on
/// a virtual-time link, one iWARP connection, RDMA Writes), beside the
/// copy + CRC32c floor, in CPU time.
#[derive(Debug, clap::Parser)]
#[command(name = "stack-cost", version)]
struct Args {
    /// Link MTU.
    #[arg(long, value_name = "N", default_value_t = 9000,
          value_parser = clap::value_parser!(u16).range(576..=9000).map(usize::from))]
    mtu: usize,
    /// RDMA Write size in octets.
    #[arg(short = 's', long = "size", value_name = "SIZE", default_value_t = 65536,
          value_parser = clap::value_parser!(u32).range(1..=1 << 20).map(|v| v as usize))]
    size: usize,
    /// Writes outstanding.
    #[arg(long, value_name = "W", default_value_t = 16,
          value_parser = clap::value_parser!(u64).range(1..=64))]
    window: u64,
    /// MiB to move.
    #[arg(long, value_name = "M", default_value_t = 1024,
          value_parser = clap::value_parser!(u64).range(1..=65536))]
    mib: u64,
    /// Frame FPDUs into TCP's send buffer (the path before one-copy
    /// transmit).
    #[arg(long)]
    copy_tx: bool,
    /// Lower layer: `mpa` (MPA/TCP) or `sctp` (DDP over SCTP, RFC 5043).
    #[arg(long, value_name = "T", default_value = "mpa",
          value_parser = ["mpa", "sctp"])]
    transport: String,
    /// A ping-pong instead of a stream: each end answers the other's
    /// Write + 0-octet Send doorbell with its own, as `iwarp-perf
    /// write_lat` does; reports frames and link steps per round trip.
    /// Under callgrind, instructions per round trip are the latency
    /// path's software cost (both ends, no clock, no threads).
    #[arg(long)]
    pingpong: bool,
    /// With --pingpong: a Write alone each way, each end watching the last
    /// octet of the peer's Write in its own region (`iwarp-perf
    /// write_lat`; without it, `write_lat --doorbell`).
    #[arg(long, requires = "pingpong")]
    watch: bool,
    /// ACK every segment at once, as an inline context does (default: one
    /// round later unless data goes back first, as a context with a loop
    /// thread does).
    #[arg(long)]
    ack_at_once: bool,
    /// Both ends ask for MPA's CRC32c on every FPDU (`MpaConfig::crc`;
    /// SCTP's CRC32c on every packet is always on).
    #[arg(long)]
    mpa_crc: bool,
    /// Both ends trust the link (`IfaceConfig::trusted_link`, as an
    /// `iwarp` simulated pair and `iwarp-perf`'s memif pair): no TCP
    /// checksum or SCTP CRC32c computed or checked.
    #[arg(long)]
    trusted_link: bool,
}

/// One end: a stack with one region of `len` octets, remotely writable;
/// with `shared`, the region is an `iwarp_memreg::Region` whose clone
/// comes back (the harness watches it), else a `Vec` as before.
fn stack(
    last: u8,
    mtu: usize,
    len: usize,
    copy_tx: bool,
    ack_at_once: bool,
    shared: bool,
    trusted: bool,
) -> (Stack, PdId, STag, Option<Region>) {
    let mut iface = IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        Ipv4Address::new(10, 5, 0, last),
        24,
    );
    iface.mtu = mtu;
    iface.trusted_link = trusted;
    let mut c = StackConfig::new(iface);
    c.tcp.rto_min = 5_000_000;
    c.tcp.rto_initial = 50_000_000;
    // As an `iwarp` context: a received segment's ACK waits one round
    // (one step of the link) for data going back (`iwarp`'s `ACK_ROUND`);
    // `--ack-at-once` as before that.
    c.tcp.delayed_ack = (!ack_at_once).then_some(1);
    c.copy_tx = copy_tx;
    // The MSS follows the MTU, as on a real interface (`iwarp`'s
    // `device_config`): FPDUs are sized to it. (Until 2026-11-26 it stayed
    // at tcp-lite's default 1460 here, so `--mtu 9000` moved 1460-octet
    // segments.)
    c.tcp.mss = (mtu - 40) as u16;
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let data: Vec<u8> = (0..len)
        .map(|i| (i * 7 + usize::from(last)) as u8)
        .collect();
    let access = Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (stag, region) = if shared {
        let r = Region::from_vec(data);
        let stag = mem.register(pd, r.clone(), access, 0).expect("register");
        (stag, Some(r))
    } else {
        (mem.register(pd, data, access, 0).expect("register"), None)
    };
    (Stack::new(c, mem), pd, stag, region)
}

fn ulp(pd: PdId, mtu: usize, crc: bool) -> Ulp {
    Ulp::Iwarp {
        mpa: MpaConfig {
            crc,
            ..MpaConfig::default()
        },
        params: StreamParams {
            pd,
            emss: (mtu - 40) as u16,
            sq_depth: 128,
            rq_depth: 16,
        },
        manual: false,
        cq: None,
        srq: None,
    }
}

/// CPU seconds to move `a.mib` MiB of Writes, and the number of Writes.
/// Not inlined, so that `valgrind --tool=callgrind
/// --toggle-collect='stack_cost::ours'` counts this part alone.
#[inline(never)]
fn ours(a: &Args) -> Result<(f64, u64), String> {
    let end = |last| {
        stack(
            last,
            a.mtu,
            a.size,
            a.copy_tx,
            a.ack_at_once,
            a.watch,
            a.trusted_link,
        )
    };
    let (sa, pd_a, stag_a, region_a) = end(1);
    let (sb, pd_b, stag_b, region_b) = end(2);
    let mut link = VirtualLink::new(sa, sb, LinkConfig::default());
    let sctp = a.transport == "sctp";
    let remote = Ipv4Address::new(10, 5, 0, 1);
    // The same ULP over either transport (over SCTP the MPA settings
    // but IRD/ORD, private data and timers do not apply); the listener
    // accepts by itself.
    let transport = if sctp {
        Transport::Sctp
    } else {
        Transport::Tcp
    };
    let (ulp_a, ulp_b) = (ulp(pd_a, a.mtu, a.mpa_crc), ulp(pd_b, a.mtu, a.mpa_crc));
    link.command(
        Side::A,
        Command::Listen {
            port: 7000,
            transport,
            ulp: ulp_a,
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            token: 1,
            remote,
            port: 7000,
            transport,
            ulp: ulp_b,
        },
    );
    // Both ends in full operation.
    let (mut sock_b, mut up_a) = (None, false);
    let mut accepted = None;
    let ok = link.run_until(10_000_000, |l| {
        while let Some(o) = l.outputs(Side::A).pop_front() {
            if let Output::Cm(id, CmEvent::Established(_)) = o {
                up_a = true;
                accepted = Some(id);
            }
        }
        while let Some(o) = l.outputs(Side::B).pop_front() {
            if let Output::Cm(id, CmEvent::Established(_)) = o {
                sock_b = Some(id);
            }
        }
        up_a && sock_b.is_some()
    });
    let sock = match (ok, sock_b) {
        (true, Some(s)) => s,
        _ => return Err("the connection did not come up".into()),
    };
    let total = (a.mib << 20) / a.size as u64;
    if a.pingpong {
        let sock_a = accepted.ok_or("no accepted connection")?;
        if let (Some(ra), Some(rb)) = (region_a, region_b) {
            return pingpong_watch(
                &mut link,
                (sock_a, sock),
                (stag_a, stag_b),
                (&ra, &rb),
                a.size,
                total,
            );
        }
        return pingpong(&mut link, (sock_a, sock), (stag_a, stag_b), a.size, total);
    }
    let (mut posted, mut done) = (0u64, 0u64);
    let write = |wr_id: u64| WorkRequest::Write {
        wr_id,
        signaled: true,
        local: Sge {
            stag: stag_b,
            to: 0,
            len: a.size as u32,
        }
        .into(),
        remote_stag: stag_a,
        remote_to: 0,
    };
    let cpu0 = iwarp_bench::cpu_time();
    let mut steps = 0u64;
    while done < total {
        while posted < total && posted - done < a.window {
            link.command(
                Side::B,
                Command::Iwarp(sock, HostCommand::PostSend(write(posted))),
            );
            posted += 1;
        }
        link.step();
        steps += 1;
        while let Some(o) = link.outputs(Side::B).pop_front() {
            match o {
                Output::Iwarp(_, HostOutput::Completion(c))
                    if c.status == iwarp_proto::qp::WcStatus::Success =>
                {
                    done += 1
                }
                Output::Iwarp(_, other) => return Err(format!("sender: {other:?}")),
                _ => {}
            }
        }
        link.outputs(Side::A).clear();
        if steps > 1_000_000_000 {
            return Err(format!("stuck after {done} of {total} Writes"));
        }
    }
    // Until the peer has every octet: a Write that completed when handed
    // to SCTP (copied into the association, shorter than `COPY_BELOW`)
    // may still wait in its send buffer. (Over MPA a 64 KiB Write
    // completes once TCP has it acknowledged.)
    let queued =
        |l: &mut VirtualLink<Stack>| l.engine(Side::B).sctp().map_or(0, |s| s.send_buffered());
    while queued(&mut link) > 0 {
        link.step();
        steps += 1;
        if steps > 1_000_000_000 {
            return Err("the last Writes never left".into());
        }
    }
    Ok((iwarp_bench::cpu_time() - cpu0, total))
}

/// `--pingpong`: `total` round trips; B starts each, A answers. Every
/// message is a Write of `size` octets into the peer's region and a
/// 0-octet Send behind it (its doorbell), both signaled; a receive is
/// re-posted for each Send received. Returns CPU seconds and round trips,
/// and prints frames and link steps per round trip.
#[inline(never)]
fn pingpong(
    link: &mut VirtualLink<Stack>,
    (sock_a, sock_b): (usize, usize),
    (stag_a, stag_b): (STag, STag),
    size: usize,
    total: u64,
) -> Result<(f64, u64), String> {
    const RECVS: u64 = 8;
    let empty = |stag: STag| Sge {
        stag,
        to: 0,
        len: 0,
    };
    let post_recv = |link: &mut VirtualLink<Stack>, side, sock, id, stag| {
        link.command(
            side,
            Command::Iwarp(sock, HostCommand::PostRecv(id, empty(stag).into())),
        );
    };
    // Write from our region into the peer's, then the doorbell.
    let ping = |link: &mut VirtualLink<Stack>, side, sock, stags: (STag, STag)| {
        post_write(link, side, sock, stags, size);
        let from = stags.0;
        link.command(
            side,
            Command::Iwarp(
                sock,
                HostCommand::PostSend(WorkRequest::Send {
                    wr_id: 2,
                    signaled: true,
                    local: empty(from).into(),
                    solicited: false,
                    invalidate: None,
                }),
            ),
        );
    };
    for id in 0..RECVS {
        post_recv(link, Side::A, sock_a, id, stag_a);
        post_recv(link, Side::B, sock_b, id, stag_b);
    }
    let meter = Meter::start(link);
    let (mut done, mut steps) = (0u64, 0u64);
    // Receive completions of one end in one step (kept: the harness
    // allocates nothing per round trip, so callgrind counts the stacks).
    let mut rang = Vec::with_capacity(RECVS as usize);
    ping(link, Side::B, sock_b, (stag_b, stag_a));
    while done < total {
        link.step();
        steps += 1;
        // Each end: a Recv completion is the peer's doorbell.
        for (side, sock, stags) in [
            (Side::A, sock_a, (stag_a, stag_b)),
            (Side::B, sock_b, (stag_b, stag_a)),
        ] {
            rang.clear();
            while let Some(o) = link.outputs(side).pop_front() {
                match o {
                    Output::Iwarp(_, HostOutput::Completion(c)) => {
                        if c.status != iwarp_proto::qp::WcStatus::Success {
                            return Err(format!("{side:?}: {c:?}"));
                        }
                        if c.opcode == iwarp_proto::qp::WcOpcode::Recv {
                            rang.push(c.wr_id);
                        }
                    }
                    Output::Iwarp(_, other) => return Err(format!("{side:?}: {other:?}")),
                    _ => {}
                }
            }
            for &id in &rang {
                post_recv(link, side, sock, id, stags.0);
                if side == Side::B {
                    done += 1;
                    if done == total {
                        break;
                    }
                }
                ping(link, side, sock, stags);
            }
        }
        if steps > 1_000_000_000 {
            return Err(format!("stuck after {done} of {total} round trips"));
        }
    }
    let secs = meter.report(
        link,
        done,
        steps,
        &format!("{size}-octet Write + doorbell each way"),
    );
    Ok((secs, total))
}

/// What a ping-pong run reports per round trip: frames, link steps,
/// rounds left out (both stacks) and CPU time, from its start.
struct Meter {
    sent: u64,
    idle: u64,
    cpu: f64,
}

impl Meter {
    fn idle_rounds(l: &mut VirtualLink<Stack>) -> u64 {
        l.engine(Side::A).stats().idle_rounds + l.engine(Side::B).stats().idle_rounds
    }

    fn start(link: &mut VirtualLink<Stack>) -> Meter {
        Meter {
            sent: link.stats().sent,
            idle: Self::idle_rounds(link),
            cpu: iwarp_bench::cpu_time(),
        }
    }

    /// Print the line for `done` round trips of `what` each way in
    /// `steps` link steps; CPU seconds since the start.
    fn report(&self, link: &mut VirtualLink<Stack>, done: u64, steps: u64, what: &str) -> f64 {
        let secs = iwarp_bench::cpu_time() - self.cpu;
        let rt = done as f64;
        println!(
            "pingpong: {done} round trips of a {what}: {:.2} frames, {:.2} link steps and {:.2} rounds left out (both stacks) per round trip, {:.3} us CPU per round trip",
            (link.stats().sent - self.sent) as f64 / rt,
            steps as f64 / rt,
            (Self::idle_rounds(link) - self.idle) as f64 / rt,
            secs * 1e6 / rt
        );
        secs
    }
}

/// A signaled Write of `size` octets from region `from` into the peer's
/// region `to`, on socket `sock` of `side`.
fn post_write(
    link: &mut VirtualLink<Stack>,
    side: Side,
    sock: usize,
    (from, to): (STag, STag),
    size: usize,
) {
    link.command(
        side,
        Command::Iwarp(
            sock,
            HostCommand::PostSend(WorkRequest::Write {
                wr_id: 1,
                signaled: true,
                local: Sge {
                    stag: from,
                    to: 0,
                    len: size as u32,
                }
                .into(),
                remote_stag: to,
                remote_to: 0,
            }),
        ),
    );
}

/// `--pingpong --watch`: `total` round trips of a Write alone each way; B
/// starts each, A answers once the last octet of B's Write is in its
/// region. B's Writes end in odd octets (2k + 1 mod 256), A's in even ones
/// (2k + 2), so neither end ever takes its own octet for the peer's. The
/// Writes are signaled (as `iwarp-perf write_lat`'s); their completions
/// are drained each step.
fn pingpong_watch(
    link: &mut VirtualLink<Stack>,
    (sock_a, sock_b): (usize, usize),
    (stag_a, stag_b): (STag, STag),
    (region_a, region_b): (&Region, &Region),
    size: usize,
    total: u64,
) -> Result<(f64, u64), String> {
    let last = size - 1;
    let write = |link: &mut VirtualLink<Stack>, side, sock, stags| {
        post_write(link, side, sock, stags, size);
    };
    let store = |r: &Region, v: u8| r.store(last, v).map_err(|e| format!("store: {e:?}"));
    let load = |r: &Region| r.load(last).map_err(|e| format!("load: {e:?}"));
    let meter = Meter::start(link);
    let (mut done, mut steps) = (0u64, 0u64);
    // B's octet for round trip `k`, and A's answer.
    let b_tag = |k: u64| (2 * k + 1) as u8;
    let a_tag = |k: u64| (2 * k + 2) as u8;
    store(region_b, b_tag(0))?;
    write(link, Side::B, sock_b, (stag_b, stag_a));
    // Whether A has answered round trip `done` yet.
    let mut answered = false;
    while done < total {
        link.step();
        steps += 1;
        for side in [Side::A, Side::B] {
            while let Some(o) = link.outputs(side).pop_front() {
                match o {
                    Output::Iwarp(_, HostOutput::Completion(c))
                        if c.status != iwarp_proto::qp::WcStatus::Success =>
                    {
                        return Err(format!("{side:?}: {c:?}"));
                    }
                    Output::Iwarp(_, HostOutput::Completion(_)) => {}
                    Output::Iwarp(_, other) => return Err(format!("{side:?}: {other:?}")),
                    _ => {}
                }
            }
        }
        if !answered && load(region_a)? == b_tag(done) {
            store(region_a, a_tag(done))?;
            write(link, Side::A, sock_a, (stag_a, stag_b));
            answered = true;
        }
        if answered && load(region_b)? == a_tag(done) {
            done += 1;
            answered = false;
            if done < total {
                store(region_b, b_tag(done))?;
                write(link, Side::B, sock_b, (stag_b, stag_a));
            }
        }
        if steps > 1_000_000_000 {
            return Err(format!("stuck after {done} of {total} round trips"));
        }
    }
    let secs = meter.report(
        link,
        done,
        steps,
        &format!("{size}-octet Write each way, the last octet watched"),
    );
    Ok((secs, total))
}

/// The floor: per octet, one copy and one CRC32c at each end, over the same
/// amount of data cut into frames of `payload` octets.
#[inline(never)]
fn floor(a: &Args, payload: usize) -> f64 {
    let src: Vec<u8> = (0..a.size).map(|i| (i * 13) as u8).collect();
    let mut wire = vec![0u8; payload];
    let mut dst = vec![0u8; a.size];
    let mut crcs = 0u32;
    let total = (a.mib << 20) as usize;
    let cpu0 = iwarp_bench::cpu_time();
    let mut moved = 0;
    while moved < total {
        let mut at = 0;
        while at < a.size {
            let n = payload.min(a.size - at);
            // Sender: gather from the region into the frame, CRC over it.
            wire[..n].copy_from_slice(&src[at..at + n]);
            let mut c = iwarp_proto::crc::Crc32c::new();
            c.update(&wire[..n]);
            // Receiver: CRC over the frame, place into the region.
            let mut r = iwarp_proto::crc::Crc32c::new();
            r.update(&wire[..n]);
            dst[at..at + n].copy_from_slice(&wire[..n]);
            crcs ^= c.value() ^ r.value();
            at += n;
        }
        moved += a.size;
    }
    std::hint::black_box((crcs, &dst));
    iwarp_bench::cpu_time() - cpu0
}

fn main() {
    let a = <Args as clap::Parser>::parse();
    // Under valgrind the CPU shows no AVX-512, so this is crc32c there.
    println!("CRC32c by {:?}", iwarp_crc::backend());
    let (secs, writes) = match ours(&a) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("stack-cost: {e}");
            std::process::exit(1);
        }
    };
    if a.pingpong {
        return; // `pingpong` printed its line
    }
    // FPDU payload per frame: EMSS less MPA/DDP headers and CRC (tagged).
    let payload = a.mtu - 40 - 2 - 14 - 4;
    let fsecs = floor(&a, payload);
    let octets = (writes * a.size as u64) as f64;
    println!(
        "stack-cost: {} Writes of {} B, window {}, MTU {}, {} (both ends on one thread, virtual link)",
        writes,
        a.size,
        a.window,
        a.mtu,
        if a.transport == "sctp" {
            "DDP over SCTP"
        } else if a.copy_tx {
            "FPDUs copied into TCP's send buffer (--copy-tx)"
        } else {
            "one-copy transmit"
        }
    );
    println!(
        "  ours:  {:>7.3} s  {:>7.2} ns/octet  {:>8.0} MB/s",
        secs,
        secs * 1e9 / octets,
        octets / secs / 1048576.0
    );
    println!(
        "  floor: {:>7.3} s  {:>7.2} ns/octet  {:>8.0} MB/s  (copy + CRC32c at each end)",
        fsecs,
        fsecs * 1e9 / octets,
        octets / fsecs / 1048576.0
    );
    println!("  ratio ours/floor (CPU time): {:.2}", secs / fsecs);
}
