//! Link floors: what no protocol can beat on a link.
//!
//! [`pingpong`] bounces one frame between two frame devices, each driven by
//! its own pinned, spinning thread, with no protocol at all: the initiator
//! sends, the echo side hands every frame it receives straight back, the
//! initiator times the round trip. Half of it is the latency floor of the
//! link (AF_XDP on a veth, DPDK memif, the in-memory link): the figure a
//! 64-octet `write_lat` (RTT/2) on that link is divided by.
//!

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use iwarp_datapath::runtime::FrameDevice;

/// A frame to bounce (or to flood, as `xdp-floor` does): Ethernet to `dst_mac` from `src_mac`, IPv4 from
/// `src` to `dst`, protocol 253 (RFC 3692 experimentation), `len` octets
/// in all (at least 34), with a valid header checksum. An XDP program that
/// steers IPv4 for `dst` to its socket passes it up.
pub fn frame(
    len: usize,
    src_mac: [u8; 6],
    src: [u8; 4],
    dst_mac: [u8; 6],
    dst: [u8; 4],
) -> Vec<u8> {
    let len = len.max(34);
    let mut f = vec![0u8; len];
    f[0..6].copy_from_slice(&dst_mac);
    f[6..12].copy_from_slice(&src_mac);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&((len - 14) as u16).to_be_bytes());
    ip[6] = 0x40; // don't fragment
    ip[8] = 64;
    ip[9] = 253;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let mut sum: u32 = ip
        .chunks_exact(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    f
}

/// Pin the calling thread to CPU `core` (by number); false where refused.
pub fn pin(core: usize) -> bool {
    core_affinity::set_for_current(core_affinity::CoreId { id: core })
}

/// What a ping-pong run measured.
#[derive(Debug)]
pub struct PingPong {
    /// Half of each round trip, in nanoseconds (RTT/2, as `write_lat`).
    pub half_rtt: Histogram<u64>,
    /// Round trips that did not come back within 50 ms (sent again; not
    /// recorded).
    pub lost: u64,
}

/// What to bounce, where, and how long.
#[derive(Debug, Clone, Copy)]
pub struct Bounce<'f> {
    /// The frame the initiator sends.
    pub a_to_b: &'f [u8],
    /// The frame the echo side answers each received frame with.
    pub b_to_a: &'f [u8],
    /// CPUs of the initiator and of the echo side.
    pub cores: (usize, usize),
    /// Round trips run first and not recorded.
    pub warmup: u64,
    /// Round trips recorded.
    pub iters: u64,
    /// The whole run stops after this long.
    pub limit: Duration,
}

impl<'f> Bounce<'f> {
    /// `a_to_b` and `b_to_a` on `cores`: 1000 warm-up round trips, `iters`
    /// recorded, at most 60 s.
    pub fn new(a_to_b: &'f [u8], b_to_a: &'f [u8], cores: (usize, usize), iters: u64) -> Self {
        Bounce {
            a_to_b,
            b_to_a,
            cores,
            warmup: 1000,
            iters,
            limit: Duration::from_secs(60),
        }
    }
}

/// Bounce `plan.a_to_b` from `a` (on CPU `cores.0`) to `b` (on `cores.1`),
/// which answers each frame it receives with `plan.b_to_a`: `warmup` round
/// trips unrecorded, then `iters` recorded, both threads spinning. A round
/// trip not back within 50 ms counts as lost and is tried again; the run
/// stops after `limit` in all. Err when nothing came back at all.
pub fn pingpong<A: FrameDevice, B: FrameDevice>(
    a: &mut A,
    b: &mut B,
    plan: &Bounce<'_>,
) -> Result<PingPong, String> {
    let Bounce {
        a_to_b,
        b_to_a,
        cores,
        warmup,
        iters,
        limit,
    } = *plan;
    let stop = AtomicBool::new(false);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)
        .map_err(|e| format!("histogram: {e}"))?;
    let mut lost = 0u64;
    std::thread::scope(|s| {
        let echo = s.spawn(|| {
            pin(cores.1);
            let mut echoed = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mut n = 0;
                b.rx_burst(32, &mut |_| n += 1);
                for _ in 0..n {
                    b.tx(b_to_a);
                }
                if n > 0 {
                    b.flush();
                    echoed += n as u64;
                }
            }
            echoed
        });
        // The initiator runs on a thread of its own too, so that the
        // caller's CPU affinity is left as it was (threads it spawns later
        // inherit it).
        let initiator = s.spawn(|| {
            pin(cores.0);
            let end = Instant::now() + limit;
            let mut done = 0u64;
            'outer: while done < warmup + iters {
                let t0 = Instant::now();
                if t0 > end {
                    break;
                }
                if !a.tx(a_to_b) {
                    a.flush();
                    continue;
                }
                a.flush();
                loop {
                    let mut got = 0;
                    a.rx_burst(32, &mut |_| got += 1);
                    if got > 0 {
                        let ns = t0.elapsed().as_nanos() as u64;
                        if done >= warmup {
                            hist.saturating_record((ns / 2).max(1));
                        }
                        done += 1;
                        break;
                    }
                    let waited = t0.elapsed();
                    if waited > Duration::from_millis(50) {
                        lost += 1;
                        continue 'outer;
                    }
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        let _ = initiator.join();
        stop.store(true, Ordering::Relaxed);
        let _ = echo.join();
    });
    if hist.is_empty() {
        return Err(format!(
            "no round trip came back ({lost} lost in {limit:?})"
        ));
    }
    Ok(PingPong {
        half_rtt: hist,
        lost,
    })
}

impl PingPong {
    /// One table row: `label`, samples, p50, p99, p99.9 and max in µs, lost.
    pub fn row(&self, label: &str) -> String {
        let h = &self.half_rtt;
        let us = |v: u64| v as f64 / 1000.0;
        format!(
            " {label:<24} {:>8} {:>8.3} {:>8.3} {:>8.3} {:>8.1} {:>6}",
            h.len(),
            us(h.value_at_quantile(0.5)),
            us(h.value_at_quantile(0.99)),
            us(h.value_at_quantile(0.999)),
            us(h.max()),
            self.lost
        )
    }

    /// Median RTT/2 in nanoseconds.
    pub fn p50_ns(&self) -> f64 {
        self.half_rtt.value_at_quantile(0.5) as f64
    }
}

/// The process's DPDK EAL for memif links (no hugepages, no PCI, main
/// lcore floating over the CPUs this thread may use), started on first use and shared
/// after: DPDK starts its EAL once per process.
pub fn memif_eal() -> Result<iwarp::dpdk::Eal, String> {
    static EAL: std::sync::OnceLock<Result<iwarp::dpdk::Eal, String>> = std::sync::OnceLock::new();
    EAL.get_or_init(|| {
        let cpus = iwarp::dpdk::allowed_cpus();
        iwarp::dpdk::Eal::init(iwarp::dpdk::floating_vdev_args(&[], &cpus))
            .map_err(|e| format!("DPDK EAL: {e}"))
    })
    .clone()
}

/// A socket path for memif link `id` of this process, in the temporary
/// directory; any stale file of that name is removed first.
pub fn memif_socket(id: u32) -> std::path::PathBuf {
    let p = std::env::temp_dir().join(format!("iwarp-memif-{}-{id}.sock", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

/// The ping-pong floor of a DPDK memif link between two ports of this
/// process (vdevs `net_memif{2id+100}` and the next, link `id`).
pub fn memif_pingpong(
    eal: &iwarp::dpdk::Eal,
    id: u32,
    frame_len: usize,
    cores: (usize, usize),
    iters: u64,
) -> Result<PingPong, String> {
    use iwarp::dpdk::{memif_devargs, MemifRole, Port, Queues};
    let sock = memif_socket(id);
    let open = |index: u32, role| {
        Port::open(
            eal,
            &memif_devargs(index, role, id, &sock),
            Queues::default(),
        )
        .map_err(|e| format!("memif {role:?}: {e}"))
    };
    let mut server = open(100 + 2 * id, MemifRole::Server)?;
    let mut client = open(101 + 2 * id, MemifRole::Client)?;
    let f = frame(
        frame_len,
        client.mac_address(),
        [10, 79, 1, 2],
        server.mac_address(),
        [10, 79, 1, 1],
    );
    let g = frame(
        frame_len,
        server.mac_address(),
        [10, 79, 1, 1],
        client.mac_address(),
        [10, 79, 1, 2],
    );
    // The client initiates: its receive polling supplies the server's
    // transmit buffers from the first round on.
    let r = pingpong(&mut client, &mut server, &Bounce::new(&f, &g, cores, iters));
    drop((client, server));
    let _ = std::fs::remove_file(&sock);
    r
}

/// The ping-pong floor of our own memif link (`iwarp-memif`) between two
/// ends of this process, on socket `memif_socket(id)`: the frame written
/// into and read from the ring buffers in place, as our stack does.
pub fn native_memif_pingpong(
    id: u32,
    frame_len: usize,
    cores: (usize, usize),
    iters: u64,
) -> Result<PingPong, String> {
    use iwarp::memif::{Config, Listener, Memif};
    let sock = memif_socket(id);
    let listener =
        Listener::bind(Config::new(&sock, id)).map_err(|e| format!("memif server: {e}"))?;
    let cfg = Config::new(&sock, id);
    let t = std::thread::spawn(move || Memif::connect(&cfg));
    let mut server = listener
        .accept()
        .map_err(|e| format!("memif server: {e}"))?;
    let mut client = t
        .join()
        .map_err(|_| "memif client: the thread panicked".to_owned())?
        .map_err(|e| format!("memif client: {e}"))?;
    let (smac, cmac) = ([2, 0x6d, 0, 0, 0, 1], [2, 0x6d, 0, 0, 0, 2]);
    let f = frame(frame_len, cmac, [10, 79, 1, 2], smac, [10, 79, 1, 1]);
    let g = frame(frame_len, smac, [10, 79, 1, 1], cmac, [10, 79, 1, 2]);
    let r = pingpong(&mut client, &mut server, &Bounce::new(&f, &g, cores, iters));
    drop((client, server, listener));
    r
}

/// The ping-pong floor of copy-mode AF_XDP across a veth between two
/// namespaces (created here, removed on return; named after
/// `netns_cli::prefix`, `xp` by default).
pub fn xdp_pingpong(
    frame_len: usize,
    cores: (usize, usize),
    iters: u64,
) -> Result<PingPong, String> {
    use netns_harness::{End, Netns, VethPair};
    if let Some(why) = netns_harness::skip_reason() {
        return Err(format!("AF_XDP floor needs namespaces: {why}"));
    }
    let e = |e: netns_harness::Error| e.to_string();
    let p = crate::netns_cli::prefix("xp");
    let na = Netns::new(&format!("{p}a")).map_err(e)?;
    let nb = Netns::new(&format!("{p}b")).map_err(e)?;
    let mut veth = VethPair::new(&format!("{p}v")).map_err(e)?;
    veth.move_to(End::A, &na).map_err(e)?;
    veth.move_to(End::B, &nb).map_err(e)?;
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).map_err(e)?;
        veth.set_up(end).map_err(e)?;
    }
    let (ip_a, ip_b) = ([10, 79, 2, 1], [10, 79, 2, 2]);
    let open = |ns: &Netns, end: End, ip: [u8; 4]| {
        let cfg = iwarp_xdp::Config::new(veth.name(end), ip);
        iwarp_xdp::in_netns(&ns.ns_path(), || iwarp_xdp::XdpDevice::open(&cfg))
            .and_then(|r| r)
            .map_err(|err| format!("AF_XDP on {}: {err}", veth.name(end)))
    };
    let mut a = open(&na, End::A, ip_a)?;
    let mut b = open(&nb, End::B, ip_b)?;
    let f = frame(frame_len, a.mac_address(), ip_a, b.mac_address(), ip_b);
    let g = frame(frame_len, b.mac_address(), ip_b, a.mac_address(), ip_a);
    let r = pingpong(&mut a, &mut b, &Bounce::new(&f, &g, cores, iters));
    drop((a, b));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_has_valid_ipv4_header() {
        let f = frame(64, [2; 6], [10, 0, 0, 1], [4; 6], [10, 0, 0, 2]);
        assert_eq!(f.len(), 64);
        assert_eq!(&f[12..14], &[0x08, 0x00]);
        assert_eq!(u16::from_be_bytes([f[16], f[17]]), 50);
        let mut sum: u32 = f[14..34]
            .chunks_exact(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff, "header checksum");
    }

    /// The ping-pong over the in-memory link: every recorded sample is a
    /// round trip that came back.
    #[test]
    fn pingpong_over_the_memory_link() {
        let (mut a, mut b) = iwarp_datapath::link::MemDevice::pair(64);
        let f = frame(64, [2; 6], [10, 0, 0, 1], [4; 6], [10, 0, 0, 2]);
        let plan = Bounce {
            warmup: 10,
            ..Bounce::new(&f, &f, (0, 1), 200)
        };
        let r = pingpong(&mut a, &mut b, &plan).expect("ping-pong");
        assert_eq!(r.half_rtt.len(), 200);
        assert_eq!(r.lost, 0);
    }
}
