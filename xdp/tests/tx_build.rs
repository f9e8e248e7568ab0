//! Frames built in place in a UMEM chunk ([`FrameDevice::tx_build`]), on a
//! veth pair between two network namespaces with an AF_XDP socket on each
//! end (needs root; prints SKIP otherwise, fails under `CI`).
//!
//! A's device builds frames addressed to B's address; B's device (its XDP
//! program steers IPv4 for its address to its socket) must receive each one
//! intact, and none of the builds that were cancelled.

use std::time::{Duration, Instant};

use iwarp_frame::FrameDevice;
use iwarp_xdp::{in_netns, Config, XdpDevice};
use netns_harness::{skip_test_without_root, End, NsPair};
use tcp_lite::arp;
use tcp_lite::iface::{FrameSink, IfaceConfig, Interface, TcpInterface};
use tcp_lite::tcp::PayloadFill;
use tcp_lite::wire::{
    ArpOperation, ArpRepr, EthernetAddress, EthernetFrame, Ipv4Address, Ipv4Packet, Ipv4Repr,
    TcpFlags, TcpPacket, TcpRepr,
};

/// Fields drop in order: the devices, then the veth and namespaces.
struct Pair {
    a_dev: XdpDevice,
    b_dev: XdpDevice,
    ns: NsPair,
}

impl Pair {
    fn ip(&self, host: u8) -> [u8; 4] {
        self.ns.addr(host).octets()
    }
}

/// Two namespaces joined by a veth (`NsPair`), no kernel addresses; an
/// XdpDevice on each end: A as 10.X.Y.1 (configured by `tweak_a`), B as
/// 10.X.Y.2.
fn pair(tag: &str, mtu: Option<u32>, tweak_a: impl FnOnce(&mut Config)) -> Pair {
    let ns = NsPair::new(tag).expect("namespaces and veth");
    if let Some(m) = mtu {
        ns.veth.set_mtu(End::A, m).expect("mtu A");
        ns.veth.set_mtu(End::B, m).expect("mtu B");
    }
    let veth = &ns.veth;
    let (a, b) = (&ns.a, &ns.b);
    let net = ns.addr(0).octets();
    let mut cfg_a = Config::new(veth.name(End::A), [net[0], net[1], net[2], 1]);
    tweak_a(&mut cfg_a);
    let cfg_b = Config::new(veth.name(End::B), [net[0], net[1], net[2], 2]);
    let a_dev = in_netns(&a.ns_path(), || XdpDevice::open(&cfg_a))
        .expect("enter A")
        .unwrap_or_else(|e| panic!("open {}: {e}", cfg_a.iface));
    let b_dev = in_netns(&b.ns_path(), || XdpDevice::open(&cfg_b))
        .expect("enter B")
        .unwrap_or_else(|e| panic!("open {}: {e}", cfg_b.iface));
    println!(
        "A {}: attach {:?}, bind {:?}, multi-buffer {}; B {}: attach {:?}, bind {:?}",
        cfg_a.iface,
        a_dev.attach_mode(),
        a_dev.xsk_mode(),
        a_dev.multi_buffer(),
        cfg_b.iface,
        b_dev.attach_mode(),
        b_dev.xsk_mode(),
    );
    Pair { a_dev, b_dev, ns }
}

/// Frame number `n` of `len` octets from A to B: Ethernet, an IPv4 header
/// to B's address, then a pattern that depends on `n` (so a frame that
/// arrives with another's octets, or a stale chunk's, shows it).
fn frame(p: &Pair, n: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0u8; len];
    f[..6].copy_from_slice(&p.b_dev.mac_address());
    f[6..12].copy_from_slice(&p.a_dev.mac_address());
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let payload_len = len - 14 - 20;
    Ipv4Repr {
        src_addr: Ipv4Address(p.ip(1)),
        dst_addr: Ipv4Address(p.ip(2)),
        protocol: tcp_lite::wire::IpProtocol(253), // experimental (RFC 3692)
        payload_len,
        ttl: 64,
        dscp: 0,
        ecn: 0,
        identification: n as u16,
        dont_frag: true,
        more_frags: false,
        fragment_offset: 0,
        options_len: 0,
    }
    .emit(&mut Ipv4Packet::new_unchecked(&mut f[14..]))
    .expect("ipv4 header");
    for (i, b) in f[34..].iter_mut().enumerate() {
        *b = (i as u32).wrapping_mul(31).wrapping_add(n.wrapping_mul(7)) as u8;
    }
    f[34..38].copy_from_slice(&n.to_be_bytes());
    f
}

/// Receive on B until `want` frames came or `limit` passed.
fn collect(dev: &mut XdpDevice, got: &mut Vec<Vec<u8>>, want: usize, limit: Duration) {
    let deadline = Instant::now() + limit;
    while got.len() < want && Instant::now() < deadline {
        if dev.rx_burst(64, &mut |f| got.push(f.to_vec())) == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[test]
fn frames_built_in_place_arrive_intact() {
    if skip_test_without_root() {
        return;
    }
    let mut p = pair("xtb", None, |_| {});
    assert!(!p.a_dev.multi_buffer());
    let sizes = [60usize, 61, 1000, 1514];
    let mut sent = Vec::new();
    for (n, &len) in sizes.iter().enumerate() {
        let want = frame(&p, n as u32, len);
        let mut lent = 0;
        assert!(p.a_dev.tx_build(len, &mut |buf| {
            lent = buf.len();
            buf.copy_from_slice(&want);
            true
        }));
        assert_eq!(lent, len, "a buffer of exactly the frame's length");
        sent.push(want);
    }
    // Longer than a chunk without multi-buffer: refused, never built.
    assert!(!p.a_dev.tx_build(5000, &mut |_| panic!("not built")));
    p.a_dev.flush();
    let mut got = Vec::new();
    collect(&mut p.b_dev, &mut got, sent.len(), Duration::from_secs(5));
    assert_eq!(got.len(), sent.len(), "frames received at B");
    for (g, s) in got.iter().zip(&sent) {
        assert!(g == s, "frame of {} octets arrived altered", s.len());
    }
    let c = p.a_dev.stats().expect("stats").ours;
    println!("A: {c:?}");
    assert_eq!((c.tx_built, c.tx_frames), (4, 4), "{c:?}");
    assert_eq!((c.tx_too_big, c.tx_build_cancelled), (1, 0), "{c:?}");

    // Through the interface: a filled TCP segment, its payload written
    // straight into the chunk, checksums verified at B.
    let mut iface = Interface::new(IfaceConfig::new(
        EthernetAddress(p.a_dev.mac_address()),
        Ipv4Address(p.ip(1)),
        24,
    ));
    // B's MAC, learnt from an ARP request "from B".
    let mut req = [0u8; arp::FRAME_LEN];
    arp::emit_frame(
        &ArpRepr {
            operation: ArpOperation::REQUEST,
            source_hardware_addr: EthernetAddress(p.b_dev.mac_address()),
            source_protocol_addr: Ipv4Address(p.ip(2)),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address(p.ip(1)),
        },
        EthernetAddress(p.b_dev.mac_address()),
        &mut req,
    )
    .expect("arp request");
    assert!(iface.receive(&req, 0, &mut |_| ()).is_none());
    let payload: Vec<u8> = (0..1460u32).map(|i| (i * 13 + 5) as u8).collect();
    let mut seg = TcpRepr::new(5000, 6000, 42, TcpFlags::ACK | TcpFlags::PSH);
    seg.window = 1024;
    let mut write = |_at: usize, b: &mut [u8]| {
        b.copy_from_slice(&payload);
        true
    };
    let fill = PayloadFill {
        len: payload.len(),
        write: &mut write,
    };
    iface
        .send_tcp_filled(
            Ipv4Address(p.ip(2)),
            &seg,
            fill,
            0,
            &mut Device(&mut p.a_dev),
        )
        .expect("sent");
    p.a_dev.flush();
    let mut got = Vec::new();
    collect(&mut p.b_dev, &mut got, 1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "the segment reached B");
    let eth = EthernetFrame::new_checked(&got[0][..]).expect("ethernet");
    let ip = Ipv4Packet::new_checked(eth.payload()).expect("ipv4");
    let ip = Ipv4Repr::parse(&ip).map(|_| ip).expect("ipv4 checksum");
    let tcp = TcpPacket::new_checked(ip.payload()).expect("tcp");
    let back =
        TcpRepr::parse(&tcp, &Ipv4Address(p.ip(1)), &Ipv4Address(p.ip(2))).expect("tcp checksum");
    assert_eq!((back.seq_number, back.window), (42, 1024));
    assert!(back.payload == &payload[..], "payload altered");
    assert_eq!(p.a_dev.stats().expect("stats").ours.tx_built, 5);
}

/// The interface's sink over a device (what the poll loop's adapter does).
struct Device<'a>(&'a mut XdpDevice);

impl FrameSink for Device<'_> {
    fn send_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.0.tx_parts(parts)
    }
    fn send_built(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.0.tx_build(len, build)
    }
}

#[test]
fn cancelled_builds_send_nothing_and_leak_no_chunk() {
    if skip_test_without_root() {
        return;
    }
    // 64 chunks for TX, a TX ring of 64.
    let mut p = pair("xtc", None, |c| {
        c.frame_count = 128;
        c.rx_frames = 64;
        c.ring_size = 64;
    });
    let free = p.a_dev.socket().free_frames();
    assert_eq!(free, 64);
    // Many cancels, each after writing a marker into the chunk.
    let marker = frame(&p, u32::MAX, 100);
    for _ in 0..10_000 {
        assert!(!p.a_dev.tx_build(100, &mut |b| {
            b.copy_from_slice(&marker);
            false
        }));
    }
    assert_eq!(
        p.a_dev.socket().free_frames(),
        free,
        "every chunk came back"
    );
    // Four rings' worth of frames: every one must be taken (flushing and
    // reaping as the ring fills) and arrive once, in order.
    let total = 4 * 64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut got = Vec::new();
    let mut n = 0u32;
    while (n as usize) < total && Instant::now() < deadline {
        let want = frame(&p, n, 200 + n as usize);
        if p.a_dev.tx_build(want.len(), &mut |b| {
            b.copy_from_slice(&want);
            true
        }) {
            n += 1;
            // A cancel between every two frames, too.
            assert!(!p.a_dev.tx_build(100, &mut |b| {
                b.copy_from_slice(&marker);
                false
            }));
        } else {
            p.a_dev.flush();
            p.b_dev.rx_burst(64, &mut |f| got.push(f.to_vec()));
        }
    }
    p.a_dev.flush();
    assert_eq!(n as usize, total, "all frames taken before the deadline");
    collect(&mut p.b_dev, &mut got, total, Duration::from_secs(5));
    let c = p.a_dev.stats().expect("stats").ours;
    println!("A: {c:?}");
    assert_eq!(got.len(), total, "frames received at B");
    for (i, g) in got.iter().enumerate() {
        assert!(*g != marker, "a cancelled build was sent");
        assert!(*g == frame(&p, i as u32, 200 + i), "frame {i} altered");
    }
    assert_eq!(c.tx_built, total as u64, "{c:?}");
    assert_eq!(c.tx_build_cancelled, 10_000 + total as u64, "{c:?}");
    // 256 frames through 64 chunks: each chunk went round several times.
    assert!(
        c.tx_completed >= (total - free) as u64,
        "chunks were reused: {c:?}"
    );
    // Once the kernel completes them all, every chunk is free again.
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.a_dev.socket().free_frames() < free && Instant::now() < deadline {
        p.a_dev.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(p.a_dev.socket().free_frames(), free, "no chunk leaked");
}

#[test]
fn frames_longer_than_a_chunk_are_built_aside_on_multi_buffer() {
    if skip_test_without_root() {
        return;
    }
    let mut p = pair("xtm", Some(9000), |_| {});
    assert!(p.a_dev.multi_buffer(), "MTU 9000 needs multi-buffer frames");
    let jumbo = frame(&p, 1, 9014);
    let small = frame(&p, 2, 1000);
    for f in [&jumbo, &small] {
        assert!(p.a_dev.tx_build(f.len(), &mut |b| {
            b.copy_from_slice(f);
            true
        }));
    }
    // A cancelled jumbo: nothing sent.
    assert!(!p.a_dev.tx_build(9014, &mut |_| false));
    p.a_dev.flush();
    let mut got = Vec::new();
    collect(&mut p.b_dev, &mut got, 2, Duration::from_secs(5));
    assert_eq!(got.len(), 2, "frames received at B");
    assert!(got[0] == jumbo, "jumbo frame altered");
    assert!(got[1] == small, "small frame altered");
    let c = p.a_dev.stats().expect("stats").ours;
    println!("A: {c:?}");
    // Only the frame that fits a chunk was built in place.
    assert_eq!((c.tx_built, c.tx_frames), (1, 2), "{c:?}");
    assert_eq!(c.tx_build_cancelled, 1, "{c:?}");
    let k = p.a_dev.stats().expect("stats").kernel;
    assert_eq!(k.tx_invalid_descs, 0, "{k:?}");
}

/// `tx_build_sg`: a jumbo frame built in place across its UMEM chunks,
/// handed over as pieces of a whole chunk each (the last shorter), arrives
/// intact; a cancelled one sends nothing and gives its chunks back.
#[test]
fn jumbo_frames_are_built_in_place_across_chunks() {
    if skip_test_without_root() {
        return;
    }
    let mut p = pair("xts", Some(9000), |_| {});
    assert!(p.a_dev.multi_buffer(), "MTU 9000 needs multi-buffer frames");
    let free = p.a_dev.socket().free_frames();
    let jumbo = frame(&p, 1, 9014);
    let mut lens = Vec::new();
    assert!(p.a_dev.tx_build_sg(jumbo.len(), &mut |pieces| {
        let mut at = 0;
        for piece in pieces.iter_mut() {
            lens.push(piece.len());
            piece.copy_from_slice(&jumbo[at..at + piece.len()]);
            at += piece.len();
        }
        at == jumbo.len()
    }));
    assert_eq!(lens, [4096, 4096, 822], "one whole chunk per piece");
    assert!(!p.a_dev.tx_build_sg(9014, &mut |_| false));
    p.a_dev.flush();
    let mut got = Vec::new();
    collect(&mut p.b_dev, &mut got, 1, Duration::from_secs(5));
    assert_eq!(got.len(), 1, "frames received at B");
    assert!(got[0] == jumbo, "jumbo frame altered");
    let c = p.a_dev.stats().expect("stats").ours;
    assert_eq!(
        (c.tx_built, c.tx_frames, c.tx_build_cancelled),
        (1, 1, 1),
        "{c:?}"
    );
    let k = p.a_dev.stats().expect("stats").kernel;
    assert_eq!(k.tx_invalid_descs, 0, "{k:?}");
    let deadline = Instant::now() + Duration::from_secs(2);
    while p.a_dev.socket().free_frames() < free && Instant::now() < deadline {
        p.a_dev.flush();
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(p.a_dev.socket().free_frames(), free, "no chunk leaked");
}
