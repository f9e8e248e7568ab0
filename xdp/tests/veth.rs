//! AF_XDP on a veth pair between two network namespaces (needs root and
//! `ping`; prints SKIP otherwise, fails under `CI`).
//!
//! Namespace A holds our end (no kernel IPv4 address at first), namespace B
//! the Linux end with 10.X.Y.2/24. An XdpDevice opened inside A with address
//! 10.X.Y.1 answers ARP and ICMP echo by hand; `ping` in B must get every
//! reply. Then A's kernel gets 10.X.Y.3 and a ping to it must be answered by
//! the kernel, the program passing it by, while our socket sees none of it.

use std::process::Output;
use std::time::{Duration, Instant};

use iwarp_frame::FrameDevice;
use iwarp_xdp::{in_netns, AttachMode, BusyPoll, Config, Error, Program, XdpDevice, XskMode};
use netns_harness::{
    command_available, link_exists, list_netns, skip_reason, skip_test, skip_test_without_root,
    spawn_in, End, Netns, Spawned, VethPair,
};
use tcp_lite::wire::{
    ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr,
    Icmpv4Message, Icmpv4Packet, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr,
};

/// `true` (after printing `SKIP`, or a panic under CI) when the tests
/// cannot run here.
fn skip() -> bool {
    if skip_test_without_root() {
        return true;
    }
    if !command_available("ping") {
        skip_test("`ping` (iputils-ping) is not installed");
        return true;
    }
    false
}

/// Fields drop in order: the device, then the veth, then the namespaces.
struct Lab {
    dev: XdpDevice,
    veth: VethPair,
    b: Netns,
    a: Netns,
    net: [u8; 3],
}

impl Lab {
    fn ip(&self, host: u8) -> [u8; 4] {
        [self.net[0], self.net[1], self.net[2], host]
    }

    fn ip_str(&self, host: u8) -> String {
        let [a, b, c, d] = self.ip(host);
        format!("{a}.{b}.{c}.{d}")
    }
}

fn lab(tag: &str, tweak: impl FnOnce(&mut Config)) -> Lab {
    lab_mtu(tag, None, tweak)
}

fn lab_mtu(tag: &str, mtu: Option<u32>, tweak: impl FnOnce(&mut Config)) -> Lab {
    let a = Netns::new(tag).expect("netns A");
    let b = Netns::new(tag).expect("netns B");
    let id = a.id();
    let net = [10, (id >> 8) as u8, id as u8];
    let mut veth = VethPair::new(tag).expect("veth");
    veth.move_to(End::A, &a).expect("move A");
    veth.move_to(End::B, &b).expect("move B");
    veth.disable_ipv6(End::A).expect("ipv6 A");
    veth.disable_ipv6(End::B).expect("ipv6 B");
    let peer = format!("{}.{}.{}.2/24", net[0], net[1], net[2]);
    veth.add_addr(End::B, &peer).expect("addr B");
    if let Some(m) = mtu {
        veth.set_mtu(End::A, m).expect("mtu A");
        veth.set_mtu(End::B, m).expect("mtu B");
    }
    veth.set_up(End::A).expect("up A");
    veth.set_up(End::B).expect("up B");
    let mut cfg = Config::new(veth.name(End::A), [net[0], net[1], net[2], 1]);
    tweak(&mut cfg);
    let dev = in_netns(&a.ns_path(), || XdpDevice::open(&cfg))
        .expect("enter A")
        .unwrap_or_else(|e| panic!("open {}: {e}", cfg.iface));
    println!(
        "{}: asked {:?}/{:?}, got attach mode {:?}, bind mode {:?}, mac {:02x?}, mtu {}, \
         warnings {:?}",
        cfg.iface,
        cfg.attach,
        cfg.mode,
        dev.attach_mode(),
        dev.xsk_mode(),
        dev.mac_address(),
        dev.mtu(),
        dev.warnings()
    );
    Lab {
        dev,
        veth,
        b,
        a,
        net,
    }
}

#[derive(Debug, Default)]
struct Seen {
    frames: u32,
    arp_for_us: u32,
    echo_for_us: u32,
    /// IPv4 or ARP frames that were not for our address.
    not_ours: u32,
}

fn arp_reply(mac: [u8; 6], ip: [u8; 4], req: &ArpRepr) -> Vec<u8> {
    let mut buf = vec![0u8; 14 + 28];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    EthernetRepr {
        src_addr: EthernetAddress(mac),
        dst_addr: req.source_hardware_addr,
        ethertype: EtherType::ARP,
    }
    .emit(&mut f)
    .expect("eth");
    ArpRepr {
        operation: ArpOperation::REPLY,
        source_hardware_addr: EthernetAddress(mac),
        source_protocol_addr: Ipv4Address(ip),
        target_hardware_addr: req.source_hardware_addr,
        target_protocol_addr: req.source_protocol_addr,
    }
    .emit(&mut ArpPacket::new_unchecked(f.payload_mut()))
    .expect("arp");
    buf
}

/// Answer what is ours; note everything.
fn handle(frame: &[u8], mac: [u8; 6], ip: [u8; 4], seen: &mut Seen) -> Option<Vec<u8>> {
    seen.frames += 1;
    let eth = EthernetFrame::new_checked(frame).ok()?;
    match eth.ethertype() {
        EtherType::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
            if arp.target_protocol_addr.0 != ip {
                seen.not_ours += 1;
                return None;
            }
            if arp.operation != ArpOperation::REQUEST {
                return None;
            }
            seen.arp_for_us += 1;
            Some(arp_reply(mac, ip, &arp))
        }
        EtherType::IPV4 => {
            let pkt = Ipv4Packet::new_checked(eth.payload()).ok()?;
            if pkt.dst_addr().0 != ip {
                seen.not_ours += 1;
                return None;
            }
            if pkt.protocol() != IpProtocol::ICMP {
                return None;
            }
            let icmp = Icmpv4Packet::new_checked(pkt.payload()).ok()?;
            if icmp.msg_type() != Icmpv4Message::ECHO_REQUEST {
                return None;
            }
            seen.echo_for_us += 1;
            let mut out = frame[..14 + pkt.total_len() as usize].to_vec();
            let mut f = EthernetFrame::new_unchecked(&mut out[..]);
            let (src, dst) = (f.src_addr(), f.dst_addr());
            f.set_src_addr(dst);
            f.set_dst_addr(src);
            let mut ip4 = Ipv4Packet::new_unchecked(f.payload_mut());
            let (s, d) = (ip4.src_addr(), ip4.dst_addr());
            ip4.set_src_addr(d);
            ip4.set_dst_addr(s);
            ip4.fill_checksum();
            let mut ic = Icmpv4Packet::new_unchecked(ip4.payload_mut());
            ic.set_msg_type(Icmpv4Message::ECHO_REPLY);
            ic.fill_checksum();
            Some(out)
        }
        _ => None,
    }
}

/// Serve ARP/echo on `dev` until `child` exits or `limit` passes; returns
/// the child's output (killed at the limit) and what the socket saw.
fn serve(dev: &mut XdpDevice, ip: [u8; 4], child: Spawned, limit: Duration) -> (Output, Seen) {
    let mac = dev.mac_address();
    let deadline = Instant::now() + limit;
    let mut seen = Seen::default();
    let mut child = child;
    let mut replies = Vec::new();
    loop {
        dev.rx_burst(64, &mut |f| {
            if let Some(r) = handle(f, mac, ip, &mut seen) {
                replies.push(r);
            }
        });
        for r in replies.drain(..) {
            // Sent as parts, the way the stack gathers headers and payload:
            // cut at the Ethernet header, and for jumbo frames across a
            // chunk boundary (4096) too, with an empty part between.
            let cuts = [14, 4000.min(r.len()), 4100.min(r.len())];
            let parts = [
                &r[..cuts[0]],
                &r[cuts[0]..cuts[1]],
                &[][..],
                &r[cuts[1]..cuts[2]],
                &r[cuts[2]..],
            ];
            assert!(dev.tx_parts(&parts), "tx refused");
        }
        dev.flush();
        if child.try_wait().expect("try_wait").is_some() || Instant::now() >= deadline {
            break;
        }
        std::thread::sleep(Duration::from_micros(200));
    }
    let out = child
        .wait_timeout(Duration::from_secs(2))
        .expect("collect ping");
    (out, seen)
}

#[test]
fn jumbo_frames_cross_as_multi_buffer_descriptors() {
    // MTU 9000 on both ends: an echo request of 8000 octets (DF set) spans
    // three 4096-octet chunks. It must reach us gathered into one frame,
    // and our reply of the same size must leave as chained descriptors.
    if skip() {
        return;
    }
    let mut lab = lab_mtu("xdj", Some(9000), |_| {});
    assert!(lab.dev.multi_buffer(), "MTU 9000 needs multi-buffer frames");
    let ours = lab.ip(1);
    let to = lab.ip_str(1);
    let child = spawn_in(
        &lab.b,
        &[
            "ping", "-n", "-c", "3", "-i", "0.2", "-w", "8", "-s", "8000", "-M", "do", &to,
        ],
    )
    .expect("spawn ping");
    let (out, seen) = serve(&mut lab.dev, ours, child, Duration::from_secs(12));
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{seen:?}");
    assert!(out.status.success(), "jumbo ping via AF_XDP failed: {text}");
    assert!(text.contains("3 received"), "{text}");
    assert!(
        text.contains("8008 bytes from"),
        "full-size replies: {text}"
    );
    let stats = lab.dev.stats().expect("stats");
    println!("{stats:?}");
    assert!(stats.ours.rx_multi_buffer >= 3, "{stats:?}");
    assert_eq!(stats.kernel.tx_invalid_descs, 0, "{stats:?}");
}

fn ping(ns: &Netns, count: u32, to: &str) -> Spawned {
    let c = count.to_string();
    spawn_in(ns, &["ping", "-n", "-c", &c, "-i", "0.2", "-w", "8", to]).expect("spawn ping")
}

fn ping_through_us_then_kernel(tag: &str, tweak: impl FnOnce(&mut Config)) {
    if skip() {
        return;
    }
    let (ns_names, ifnames);
    {
        let mut lab = lab(tag, tweak);
        ns_names = [lab.a.name().to_owned(), lab.b.name().to_owned()];
        ifnames = [
            lab.veth.name(End::A).to_owned(),
            lab.veth.name(End::B).to_owned(),
        ];
        let ours = lab.ip(1);

        // 1. ping 10.X.Y.1: ARP and echo answered by us.
        let child = ping(&lab.b, 3, &lab.ip_str(1));
        let (out, seen) = serve(&mut lab.dev, ours, child, Duration::from_secs(12));
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{text}{seen:?}");
        assert!(out.status.success(), "ping via AF_XDP failed: {text}");
        assert!(text.contains("3 received"), "{text}");
        assert!(seen.arp_for_us >= 1, "{seen:?}");
        assert!(seen.echo_for_us >= 3, "{seen:?}");
        assert_eq!(seen.not_ours, 0, "{seen:?}");
        let stats = lab.dev.stats().expect("stats");
        println!("{stats:?}");
        assert!(stats.ours.tx_completed >= 4, "{stats:?}");

        // 2. A's kernel gets 10.X.Y.3: traffic for it passes our program.
        let kernel_addr = format!("{}/24", lab.ip_str(3));
        lab.veth.add_addr(End::A, &kernel_addr).expect("addr A");
        let child = ping(&lab.b, 2, &lab.ip_str(3));
        let (out, seen) = serve(&mut lab.dev, ours, child, Duration::from_secs(12));
        let text = String::from_utf8_lossy(&out.stdout);
        println!("{text}{seen:?}");
        assert!(out.status.success(), "ping via the kernel failed: {text}");
        assert!(text.contains("2 received"), "{text}");
        assert_eq!(
            seen.frames, 0,
            "the socket saw the kernel's traffic: {seen:?}"
        );
    }
    // Everything is gone.
    let left = list_netns().expect("ip netns list");
    for n in &ns_names {
        assert!(!left.contains(n), "namespace {n} left behind");
    }
    for i in &ifnames {
        assert!(!link_exists(i), "interface {i} left behind");
    }
}

#[test]
fn ping_auto_modes() {
    ping_through_us_then_kernel("xda", |_| {});
}

#[test]
fn ping_generic_xdp_copy_mode() {
    ping_through_us_then_kernel("xdg", |c| {
        c.mode = XskMode::Copy;
        c.attach = AttachMode::Skb;
    });
}

#[test]
fn ping_driver_mode_busy_poll_without_need_wakeup() {
    ping_through_us_then_kernel("xdb", |c| {
        c.attach = AttachMode::Driver;
        c.need_wakeup = false;
        c.busy_poll = Some(BusyPoll {
            usecs: 20,
            budget: 16,
        });
        c.frame_size = 4096;
        c.ring_size = 512;
        c.rx_frames = 256;
        c.frame_count = 1024;
    });
}

#[test]
fn busy_interface_and_zero_copy_errors() {
    if skip() {
        return;
    }
    let lab = lab("xde", |_| {});
    let iface = lab.veth.name(End::A).to_owned();
    let ifindex = lab.dev.ifindex();
    // A second program on the same interface: busy.
    let second = in_netns(&lab.a.ns_path(), || {
        Program::load([10, 0, 0, 1], 4, false, None)
            .and_then(|p| p.attach(&iface, ifindex, AttachMode::Auto))
    })
    .expect("enter A");
    match second {
        Err(e @ Error::AttachBusy { .. }) => println!("{e}"),
        other => panic!("expected AttachBusy, got {other:?}"),
    }
    drop(lab);

    // Zero-copy forced on a veth: veth has no zero-copy AF_XDP support.
    let a = Netns::new("xdz").expect("netns");
    let mut veth = VethPair::new("xdz").expect("veth");
    veth.move_to(End::A, &a).expect("move");
    veth.set_up(End::A).expect("up");
    let cfg = Config {
        mode: XskMode::ZeroCopy,
        ..Config::new(veth.name(End::A), [10, 9, 9, 1])
    };
    let r = in_netns(&a.ns_path(), || XdpDevice::open(&cfg)).expect("enter");
    match r {
        Err(e @ Error::ZeroCopyUnsupported { .. }) => println!("{e}"),
        Ok(d) => println!("zero-copy on veth worked: {:?}", d.xsk_mode()),
        Err(e) => panic!("expected ZeroCopyUnsupported, got {e:?}: {e}"),
    }
}

/// A TCP SYN from B reaches the socket with a valid checksum once B's
/// TX checksum offload is off (with it on, veth leaves it partial).
#[test]
fn tcp_syn_reaches_socket_with_valid_checksum() {
    if skip() {
        return;
    }
    for tool in ["ethtool", "bash"] {
        if !command_available(tool) {
            skip_test(&format!("`{tool}` is not installed"));
            return;
        }
    }
    let mut lab = lab("xdt", |_| {});
    lab.veth.disable_tx_offload(End::B).expect("ethtool");
    let ours = lab.ip(1);
    let mac = lab.dev.mac_address();
    let lladdr = mac.map(|b| format!("{b:02x}")).join(":");
    let (ip1, ifb) = (lab.ip_str(1), lab.veth.name(End::B).to_owned());
    lab.b
        .ip(&["neigh", "replace", &ip1, "lladdr", &lladdr, "dev", &ifb])
        .expect("static neighbour");
    let connect = format!("exec 3<>/dev/tcp/{ip1}/5000");
    let _syn = spawn_in(&lab.b, &["bash", "-c", &connect]).expect("bash");
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut syns = Vec::new();
    while syns.is_empty() && Instant::now() < deadline {
        lab.dev.rx_burst(16, &mut |f| {
            let Ok(eth) = EthernetFrame::new_checked(f) else {
                return;
            };
            let Ok(ip) = Ipv4Packet::new_checked(eth.payload()) else {
                return;
            };
            let Ok(ipr) = Ipv4Repr::parse(&ip) else {
                return;
            };
            if ipr.protocol == IpProtocol::TCP && ipr.dst_addr.0 == ours {
                let tcp = TcpPacket::new_checked(ip.payload()).expect("tcp header");
                syns.push(
                    TcpRepr::parse(&tcp, &ipr.src_addr, &ipr.dst_addr)
                        .map(|r| (r.dst_port, r.flags)),
                );
            }
        });
        std::thread::sleep(Duration::from_millis(1));
    }
    println!("{syns:?}");
    let first = syns.first().expect("no TCP segment reached the socket");
    let (port, _flags) = first.as_ref().expect("TCP checksum must verify");
    assert_eq!(*port, 5000);
}

#[test]
fn no_such_interface() {
    let e = XdpDevice::open(&Config::new("nonexist0xdp", [10, 0, 0, 1])).unwrap_err();
    assert_eq!(
        e,
        Error::NoInterface {
            name: "nonexist0xdp".into()
        }
    );
    let msg = e.to_string();
    assert!(msg.contains("no interface named \"nonexist0xdp\""), "{msg}");
    assert!(msg.contains("in this network namespace"), "{msg}");
}

#[test]
fn unprivileged_is_reported() {
    // As root, drop root on one thread only (the raw syscall, unlike glibc's
    // setresuid wrapper, changes just the calling thread), then open; as
    // another user, just open.
    let r = std::thread::spawn(|| {
        if skip_reason().is_none() {
            // SAFETY: setresuid takes integers only; it changes the
            // credentials of this thread, which ends right after the open.
            let rc = unsafe { libc::syscall(libc::SYS_setresuid, 65534, 65534, 65534) };
            assert_eq!(rc, 0, "setresuid");
        }
        XdpDevice::open(&Config::new("lo", [127, 0, 0, 9]))
    })
    .join()
    .expect("thread");
    match r {
        Err(e @ Error::Permission { .. }) => {
            let msg = e.to_string();
            println!("{msg}");
            assert!(msg.contains("CAP_NET_ADMIN+CAP_BPF+CAP_NET_RAW"), "{msg}");
        }
        other => panic!("expected a permission error, got {other:?}"),
    }
}

#[test]
fn wait_returns_for_a_frame_and_for_the_doorbell() {
    // An idle poll loop sleeps in `FrameDevice::wait`: a frame on the
    // socket's RX ring must end the sleep, and so must the doorbell rung
    // from another thread; with neither the sleep lasts its timeout.
    if skip() {
        return;
    }
    let mut lab = lab("xdw", |_| {});
    let bell = lab.dev.doorbell().expect("an AF_XDP device can wait");

    // Nothing comes: the whole timeout.
    let t = Instant::now();
    lab.dev.wait(Duration::from_millis(50));
    assert!(
        t.elapsed() >= Duration::from_millis(50),
        "{:?}",
        t.elapsed()
    );

    // The doorbell, 200 ms into a 60 s wait (woken within 30: room for a
    // loaded machine, and far from sleeping it out).
    let t = Instant::now();
    std::thread::scope(|s| {
        let b = bell.clone();
        s.spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            b.ring();
        });
        lab.dev.wait(Duration::from_secs(60));
    });
    let woke = t.elapsed();
    assert!(
        (Duration::from_millis(200)..Duration::from_secs(30)).contains(&woke),
        "the doorbell woke the wait after {woke:?}"
    );

    // A frame: B's ping asks for our address (ARP) about 300 ms in.
    let to = lab.ip_str(1);
    let _child = spawn_in(
        &lab.b,
        &["sh", "-c", &format!("sleep 0.3; ping -n -c 1 -w 3 {to}")],
    )
    .expect("spawn ping");
    let t = Instant::now();
    lab.dev.wait(Duration::from_secs(60));
    let woke = t.elapsed();
    let mut frames = 0;
    lab.dev.rx_burst(64, &mut |_| frames += 1);
    assert!(
        woke < Duration::from_secs(30),
        "a frame woke the wait after {woke:?}"
    );
    assert!(frames >= 1, "woken with no frame after {woke:?}");
    println!("woken by the doorbell and by a frame ({woke:?}, {frames} frame(s))");
}
