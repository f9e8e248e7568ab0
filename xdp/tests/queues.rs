//! Several queues of one interface (issue 26 item 3, the device side of
//! one poll loop per queue): `XdpDevice::open_queues` on both ends of a
//! two-queue veth between two namespaces (root; SKIP otherwise, a failure
//! under `CI`). A frame sent on queue *i* of one end arrives on the device
//! of queue *i* at the other, and only there: veth keeps the sender's
//! queue mapping, and the one program steers each RX queue to its socket.

use std::time::{Duration, Instant};

use iwarp_frame::FrameDevice;
use iwarp_xdp::{in_netns, Config, Error, XdpDevice};
use netns_harness::{skip_test_without_root, End, Netns, VethPair};

const PER_QUEUE: u8 = 50;

/// An IPv4/UDP frame from `src` to `dst` whose payload names the queue it
/// was sent on and its sequence number (checksums are not checked on the
/// way: the XDP program looks at the addresses only).
fn frame(src: ([u8; 6], [u8; 4]), dst: ([u8; 6], [u8; 4]), queue: u8, seq: u8) -> Vec<u8> {
    let mut f = Vec::with_capacity(64);
    f.extend_from_slice(&dst.0);
    f.extend_from_slice(&src.0);
    f.extend_from_slice(&[0x08, 0x00]);
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&(20u16 + 8 + 2).to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src.1);
    ip[16..20].copy_from_slice(&dst.1);
    let sum = ip
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    ip[10..12].copy_from_slice(&(!((sum & 0xffff) + (sum >> 16)) as u16).to_be_bytes());
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x30, 0x39, 0x30, 0x39, 0, 10, 0, 0]);
    f.extend_from_slice(&[queue, seq]);
    f
}

/// The (queue, seq) marks of the test frames `dev` receives within `limit`.
fn marks(dev: &mut XdpDevice, want: usize, limit: Duration) -> Vec<(u8, u8)> {
    let mut got = Vec::new();
    let end = Instant::now() + limit;
    while got.len() < want && Instant::now() < end {
        dev.rx_burst(64, &mut |f| {
            // Ethernet 14 + IPv4 20 + UDP 8, then the two marks.
            if f.len() >= 44 && f[23] == 17 && f[34..36] == [0x30, 0x39] {
                got.push((f[42], f[43]));
            }
        });
        std::thread::yield_now();
    }
    got
}

#[test]
fn each_queue_gets_what_was_sent_on_its_queue() {
    if skip_test_without_root() {
        return;
    }
    let a = Netns::new("xq").expect("netns A");
    let b = Netns::new("xq").expect("netns B");
    let id = a.id();
    let net = [10, (id >> 8) as u8, id as u8];
    let mut veth = VethPair::with_queues("xq", 2).expect("veth with two queues");
    veth.move_to(End::A, &a).expect("move A");
    veth.move_to(End::B, &b).expect("move B");
    veth.disable_ipv6(End::A).expect("ipv6 A");
    veth.disable_ipv6(End::B).expect("ipv6 B");
    veth.set_up(End::A).expect("up A");
    veth.set_up(End::B).expect("up B");
    let ip_a = [net[0], net[1], net[2], 1];
    let ip_b = [net[0], net[1], net[2], 2];
    let open = |ns: &Netns, iface: &str, ip: [u8; 4]| {
        let cfg = Config::new(iface, ip);
        in_netns(&ns.ns_path(), || XdpDevice::open_queues(&cfg, 2))
            .expect("enter namespace")
            .unwrap_or_else(|e| panic!("open two queues of {iface}: {e}"))
    };
    let mut ours = open(&a, veth.name(End::A), ip_a);
    let mut theirs = open(&b, veth.name(End::B), ip_b);
    assert_eq!(ours.iter().map(|d| d.queue()).collect::<Vec<_>>(), [0, 1]);
    let (mac_a, mac_b) = (ours[0].mac_address(), theirs[0].mac_address());
    assert_eq!(ours[1].mac_address(), mac_a, "one interface, one MAC");
    // The one program serves both queues: a third open of the same
    // interface finds it busy.
    let third = in_netns(&a.ns_path(), || {
        let mut c = Config::new(veth.name(End::A), ip_a);
        c.queue = 0;
        XdpDevice::open(&c)
    })
    .expect("enter A");
    assert!(
        matches!(
            third,
            Err(Error::AttachBusy { .. } | Error::Sys { .. } | Error::Bind { .. })
        ),
        "a second program on a steered interface: {third:?}"
    );
    for seq in 0..PER_QUEUE {
        for (q, dev) in theirs.iter_mut().enumerate() {
            let f = frame((mac_b, ip_b), (mac_a, ip_a), q as u8, seq);
            let deadline = Instant::now() + Duration::from_secs(2);
            while !dev.tx(&f) {
                assert!(
                    Instant::now() < deadline,
                    "TX ring of queue {q} stayed full"
                );
                dev.flush();
                std::thread::yield_now();
            }
            // One kick per frame, as a poll loop kicks each round (copy
            // mode sends at most 32 frames per kick).
            dev.flush();
        }
    }
    for dev in &mut theirs {
        dev.flush();
    }
    for (q, dev) in ours.iter_mut().enumerate() {
        let got = marks(dev, PER_QUEUE as usize, Duration::from_secs(5));
        let want: Vec<(u8, u8)> = (0..PER_QUEUE).map(|s| (q as u8, s)).collect();
        assert_eq!(
            got, want,
            "queue {q} gets its own frames, in order, and no others"
        );
    }
    // Nothing more arrives late on the other queue.
    for (q, dev) in ours.iter_mut().enumerate() {
        let late = marks(dev, 1, Duration::from_millis(200));
        assert!(late.is_empty(), "queue {q} got more: {late:?}");
    }
    drop(ours);
    drop(theirs);
}

#[test]
fn open_queues_checks_its_arguments() {
    let cfg = Config::new("lo", [127, 0, 0, 1]);
    assert!(matches!(
        XdpDevice::open_queues(&cfg, 0),
        Err(Error::InvalidConfig { .. })
    ));
    let mut c = cfg.clone();
    c.max_queues = 4;
    c.queue = 3;
    assert!(matches!(
        XdpDevice::open_queues(&c, 2),
        Err(Error::InvalidConfig { .. })
    ));
    c.queue = u32::MAX;
    assert!(matches!(
        XdpDevice::open_queues(&c, 2),
        Err(Error::InvalidConfig { .. })
    ));
}
