//! `iwarp-dpdk-check`: exercise a DPDK port against a Linux host.
//!
//! ```text
//! iwarp-dpdk-check ping DEVARGS OUR_IP PEER_IP COUNT
//! iwarp-dpdk-check tcp  DEVARGS OUR_IP/PREFIX PEER_IP:PORT BYTES TIMEOUT_S [MTU]
//! iwarp-dpdk-check eal-twice
//! ```
//!
//! `ping` and `tcp` initialise the EAL for virtual devices only (no hugepages, no PCI)
//! and hot-plug DEVARGS (e.g. `net_af_packet0,iface=veth0`).
//!
//! `ping` resolves PEER_IP with an ARP request built with tcp-lite's wire
//! module, then sends COUNT ICMP echo requests and waits for each reply;
//! it prints `arp: PEER_IP is at MAC` and `echo: N/COUNT replies` and exits
//! 0 only when every reply came back with the data sent.
//!
//! `tcp` runs tcp-lite's host stack on the port in a poll loop, connects to
//! PEER_IP:PORT, sends BYTES of a fixed pseudo-random pattern, reads until
//! the peer closes, and prints `sent N fnv1a64 X received M fnv1a64 Y`.
//!
//! `eal-twice` initialises the EAL (no devices), then calls `Eal::init`
//! twice more, which must fail with `AlreadyInitialised` while the first
//! handle keeps working; prints `second: ERROR` and `third: ERROR`.
//!
//! Exit status: 0 success, 1 the check failed, 2 usage or setup error. A
//! separate process per run because DPDK's EAL can be initialised once per
//! process (`tools/tests/dpdk_af_packet.rs` runs this binary under `ip
//! netns exec`). Here in `iwarp-tools`, not in `iwarp-dpdk`, so that the
//! backend crate depends on the frame trait alone: this check brings its
//! own host stack (`iwarp-datapath`, `tcp-lite`).

use std::net::{Ipv4Addr, SocketAddrV4};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use iwarp_dpdk::{Eal, Port, Queues};
use iwarp_frame::FrameDevice;

/// Exercise a DPDK port against a Linux host (one check per process: the
/// EAL can be initialised once).
#[derive(clap::Parser, Debug)]
#[command(version)]
struct Cli {
    #[command(subcommand)]
    check: Check,
}

#[derive(clap::Subcommand, Debug)]
enum Check {
    /// Resolve PEER_IP by ARP, then COUNT ICMP echoes; exit 0 when every
    /// reply came back with the data sent.
    Ping {
        /// Devargs to hot-plug (`net_af_packet0,iface=veth0`).
        devargs: String,
        /// Our address.
        our_ip: Ipv4Addr,
        /// The Linux host's address.
        peer_ip: Ipv4Addr,
        /// Echo requests to send.
        count: u16,
    },
    /// tcp-lite's host stack in a poll loop: connect, send BYTES, read
    /// until the peer closes; print both checksums.
    Tcp {
        /// Devargs to hot-plug.
        devargs: String,
        /// Our address and prefix (`10.0.0.1/24`).
        our_ip: String,
        /// The Linux listener (`10.0.0.2:5001`).
        peer: SocketAddrV4,
        /// Octets to send.
        bytes: u64,
        /// Seconds before giving up.
        timeout_s: u64,
        /// The port's MTU.
        #[arg(default_value_t = 1500)]
        mtu: u16,
    },
    /// Initialise the EAL, then twice more: both must fail with
    /// AlreadyInitialised while the first handle keeps working.
    EalTwice,
}

fn main() -> ExitCode {
    // Misuse exits 2 through clap, as with the other tools.
    let cli = <Cli as clap::Parser>::parse();
    let result = match cli.check {
        Check::Ping {
            devargs,
            our_ip,
            peer_ip,
            count,
        } => ping_check(&devargs, our_ip, peer_ip, count),
        Check::Tcp {
            devargs,
            our_ip,
            peer,
            bytes,
            timeout_s,
            mtu,
        } => tcp_check(&devargs, &our_ip, peer, bytes, timeout_s, mtu),
        Check::EalTwice => eal_twice(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(Failure::Check(e)) => {
            eprintln!("iwarp-dpdk-check: FAILED: {e}");
            ExitCode::from(1)
        }
        Err(Failure::Setup(e)) => {
            eprintln!("iwarp-dpdk-check: {e}");
            ExitCode::from(2)
        }
    }
}

enum Failure {
    Setup(String),
    Check(String),
}

fn setup<E: std::fmt::Display>(e: E) -> Failure {
    Failure::Setup(e.to_string())
}

fn open(dev: &str) -> Result<Port, Failure> {
    open_mtu(dev, iwarp_dpdk::DEFAULT_MTU)
}

fn open_mtu(dev: &str, mtu: u16) -> Result<Port, Failure> {
    let eal = Eal::init(Eal::vdev_args(&[])).map_err(setup)?;
    let port = Port::open_mtu(&eal, dev, Queues::default(), mtu).map_err(setup)?;
    println!(
        "port {} (id {}): mac {}, mtu {}, max frame {}, DPDK {}",
        port.name(),
        port.port_id(),
        mac_str(port.mac_address()),
        port.mtu(),
        port.max_frame(),
        iwarp_dpdk::DPDK_VERSION.unwrap_or("?")
    );
    Ok(port)
}

fn eal_twice() -> Result<(), Failure> {
    let eal = Eal::init(Eal::vdev_args(&[])).map_err(setup)?;
    for which in ["second", "third"] {
        match Eal::init(Eal::vdev_args(&[])) {
            Err(e @ iwarp_dpdk::Error::AlreadyInitialised) => println!("{which}: {e}"),
            Err(e) => return Err(Failure::Check(format!("{which} Eal::init: {e:?}"))),
            Ok(_) => return Err(Failure::Check(format!("{which} Eal::init succeeded"))),
        }
    }
    // The first handle still works: a port on it fails for the right reason.
    match Port::open(&eal, "net_ring_none", Queues::default()) {
        Err(iwarp_dpdk::Error::NoSuchPort { .. }) => {}
        other => return Err(Failure::Check(format!("Port::open: {other:?}"))),
    }
    println!("parsed {} EAL arguments", eal.parsed_args());
    Ok(())
}

fn mac_str(m: [u8; 6]) -> String {
    m.map(|b| format!("{b:02x}")).join(":")
}

fn ping_check(dev: &str, ours: Ipv4Addr, peer: Ipv4Addr, count: u16) -> Result<(), Failure> {
    let mut port = open(dev)?;
    let r = ping::run(&mut port, ours.octets(), peer.octets(), count);
    println!("counters {:?}", port.counters());
    if let Ok(s) = port.stats() {
        println!("stats {s:?}");
    }
    r
}

mod ping {
    use super::*;
    use tcp_lite::wire::{
        ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress, EthernetFrame, EthernetRepr,
        Icmpv4Packet, Icmpv4Repr, IpProtocol, Ipv4Address, Ipv4Packet, Ipv4Repr,
    };

    const WAIT: Duration = Duration::from_secs(3);

    pub(super) fn run(
        port: &mut Port,
        ours: [u8; 4],
        peer: [u8; 4],
        count: u16,
    ) -> Result<(), Failure> {
        let mac = port.mac_address();
        // ARP: up to 3 requests, each waited on for a second.
        let mut peer_mac = None;
        for _ in 0..3 {
            if !port.tx(&arp_request(mac, ours, peer)) {
                return Err(Failure::Check("tx refused the ARP request".into()));
            }
            port.flush();
            peer_mac = wait(port, Duration::from_secs(1), |f| {
                arp_reply_from(f, ours, peer)
            });
            if peer_mac.is_some() {
                break;
            }
        }
        let Some(peer_mac) = peer_mac else {
            return Err(Failure::Check("no ARP reply".into()));
        };
        println!("arp: {} is at {}", Ipv4Addr::from(peer), mac_str(peer_mac));
        let ident = (std::process::id() & 0xffff) as u16;
        let mut replies = 0u16;
        for seq in 0..count {
            let data: Vec<u8> = (0..56u16).map(|i| (i as u8) ^ (seq as u8)).collect();
            let frame = echo_request(mac, peer_mac, ours, peer, ident, seq, &data);
            // Odd requests are built in place in an mbuf, after a build
            // that is cancelled (and must send nothing).
            let taken = if seq % 2 == 1 {
                if port.tx_build(frame.len(), &mut |b| {
                    b.fill(0xee);
                    false
                }) {
                    return Err(Failure::Check("a cancelled build was sent".into()));
                }
                port.tx_build(frame.len(), &mut |b| {
                    b.copy_from_slice(&frame);
                    true
                })
            } else {
                port.tx(&frame)
            };
            if !taken {
                return Err(Failure::Check(format!("tx refused echo {seq}")));
            }
            port.flush();
            let got = wait(port, WAIT, |f| echo_reply(f, ours, peer, ident, seq, &data));
            match got {
                Some(()) => replies += 1,
                None => println!("echo {seq}: no reply"),
            }
        }
        println!("echo: {replies}/{count} replies");
        if replies == count {
            Ok(())
        } else {
            Err(Failure::Check(format!("{replies}/{count} echo replies")))
        }
    }

    /// Receive until `check` accepts a frame or `limit` passes.
    fn wait<T>(
        port: &mut Port,
        limit: Duration,
        mut check: impl FnMut(&[u8]) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + limit;
        let mut found = None;
        while found.is_none() && Instant::now() < deadline {
            port.rx_burst(32, &mut |f| {
                if found.is_none() {
                    found = check(f);
                }
            });
            std::thread::sleep(Duration::from_micros(200));
        }
        found
    }

    fn arp_request(mac: [u8; 6], ours: [u8; 4], peer: [u8; 4]) -> Vec<u8> {
        let mut buf = vec![0u8; 14 + 28];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        EthernetRepr {
            src_addr: EthernetAddress(mac),
            dst_addr: EthernetAddress([0xff; 6]),
            ethertype: EtherType::ARP,
        }
        .emit(&mut f)
        .expect("ethernet header fits");
        ArpRepr {
            operation: ArpOperation::REQUEST,
            source_hardware_addr: EthernetAddress(mac),
            source_protocol_addr: Ipv4Address(ours),
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: Ipv4Address(peer),
        }
        .emit(&mut ArpPacket::new_unchecked(f.payload_mut()))
        .expect("ARP fits");
        buf
    }

    fn arp_reply_from(frame: &[u8], ours: [u8; 4], peer: [u8; 4]) -> Option<[u8; 6]> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != EtherType::ARP {
            return None;
        }
        let arp = ArpRepr::parse(&ArpPacket::new_checked(eth.payload()).ok()?).ok()?;
        (arp.operation == ArpOperation::REPLY
            && arp.source_protocol_addr.0 == peer
            && arp.target_protocol_addr.0 == ours)
            .then_some(arp.source_hardware_addr.0)
    }

    fn echo_request(
        mac: [u8; 6],
        peer_mac: [u8; 6],
        ours: [u8; 4],
        peer: [u8; 4],
        ident: u16,
        seq_no: u16,
        data: &[u8],
    ) -> Vec<u8> {
        let icmp = Icmpv4Repr::EchoRequest {
            ident,
            seq_no,
            data,
        };
        let mut buf = vec![0u8; 14 + 20 + icmp.buffer_len()];
        let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
        EthernetRepr {
            src_addr: EthernetAddress(mac),
            dst_addr: EthernetAddress(peer_mac),
            ethertype: EtherType::IPV4,
        }
        .emit(&mut f)
        .expect("ethernet header fits");
        let mut ip = Ipv4Packet::new_unchecked(f.payload_mut());
        Ipv4Repr {
            src_addr: Ipv4Address(ours),
            dst_addr: Ipv4Address(peer),
            protocol: IpProtocol::ICMP,
            payload_len: icmp.buffer_len(),
            ttl: 64,
            dscp: 0,
            ecn: 0,
            identification: seq_no,
            dont_frag: true,
            more_frags: false,
            fragment_offset: 0,
            options_len: 0,
        }
        .emit(&mut ip)
        .expect("IPv4 header fits");
        ip.fill_checksum();
        icmp.emit(&mut Icmpv4Packet::new_unchecked(ip.payload_mut()))
            .expect("ICMP fits");
        buf
    }

    fn echo_reply(
        frame: &[u8],
        ours: [u8; 4],
        peer: [u8; 4],
        ident: u16,
        seq: u16,
        data: &[u8],
    ) -> Option<()> {
        let eth = EthernetFrame::new_checked(frame).ok()?;
        if eth.ethertype() != EtherType::IPV4 {
            return None;
        }
        let ip = Ipv4Packet::new_checked(eth.payload()).ok()?;
        let ipr = Ipv4Repr::parse(&ip).ok()?;
        if ipr.protocol != IpProtocol::ICMP || ipr.src_addr.0 != peer || ipr.dst_addr.0 != ours {
            return None;
        }
        match Icmpv4Repr::parse(&Icmpv4Packet::new_checked(ip.payload()).ok()?).ok()? {
            Icmpv4Repr::EchoReply {
                ident: i,
                seq_no,
                data: d,
            } if i == ident && seq_no == seq && d == data => Some(()),
            _ => None,
        }
    }
}

fn tcp_check(
    dev: &str,
    ours: &str,
    peer: SocketAddrV4,
    bytes: u64,
    timeout_s: u64,
    mtu: u16,
) -> Result<(), Failure> {
    let (ip, prefix) = ours
        .split_once('/')
        .ok_or_else(|| Failure::Setup(format!("expected ADDRESS/PREFIX, got {ours:?}")))?;
    let ip: Ipv4Addr = ip.parse().map_err(setup)?;
    let prefix: u8 = prefix.parse().map_err(setup)?;
    let timeout = Duration::from_secs(timeout_s);
    let port = open_mtu(dev, mtu)?;
    tcp::run(port, ip, prefix, peer, bytes, timeout)
}

/// FNV-1a, 64 bits: the checksum both ends compute.
#[derive(Debug, Clone, Copy)]
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn update(&mut self, data: &[u8]) {
        for &b in data {
            self.0 = (self.0 ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The pattern sent: octet i is a xorshift of i (the test's Linux end
/// computes only the checksum of what arrives).
fn pattern(offset: u64, out: &mut [u8]) {
    for (i, b) in out.iter_mut().enumerate() {
        let mut x = (offset + i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        x ^= x >> 29;
        *b = x as u8;
    }
}

mod tcp {
    use super::*;
    use iwarp_datapath::runtime::{spawn, Mode};
    use iwarp_datapath::stack::{flags, Command, Output, Stack, StackConfig, Transport, Ulp};
    use iwarp_proto::mem::MemoryTable;
    use std::sync::atomic::Ordering;
    use tcp_lite::iface::IfaceConfig;
    use tcp_lite::wire::{EthernetAddress, Ipv4Address};

    pub(super) fn run(
        port: Port,
        ip: Ipv4Addr,
        prefix: u8,
        peer: SocketAddrV4,
        bytes: u64,
        timeout: Duration,
    ) -> Result<(), Failure> {
        let mut icfg = IfaceConfig::new(
            EthernetAddress(port.mac_address()),
            Ipv4Address(ip.octets()),
            prefix,
        );
        icfg.mtu = usize::from(port.mtu());
        let mut scfg = StackConfig::new(icfg);
        // The MSS follows the port's MTU (IPv4 and TCP headers off).
        scfg.tcp.mss = port.mtu() - 40;
        scfg.tcp.rto_min = 200_000_000;
        scfg.tcp.delayed_ack = None;
        let h = spawn(
            Stack::new(scfg, MemoryTable::new()),
            port,
            None,
            Mode::Adaptive {
                spins: 2_000,
                max_sleep: Duration::from_micros(500),
            },
            1024,
        );
        let deadline = Instant::now() + timeout;
        let result = transfer(&h, peer, bytes, deadline);
        if let Some((stack, st)) = h.stop() {
            println!(
                "loop: rounds {} rx {} tx {} tx_dropped {}",
                st.rounds, st.rx_frames, st.tx_frames, st.tx_dropped
            );
            println!("stack: {:?}", stack.stats());
        }
        result
    }

    fn transfer(
        h: &iwarp_datapath::runtime::LoopHandle<Stack>,
        peer: SocketAddrV4,
        bytes: u64,
        deadline: Instant,
    ) -> Result<(), Failure> {
        h.post(Command::Connect {
            transport: Transport::Tcp,
            token: 1,
            remote: Ipv4Address(peer.ip().octets()),
            port: peer.port(),
            ulp: Ulp::Stream,
        })
        .map_err(|_| Failure::Setup("command queue full".into()))?;
        let s = loop {
            if Instant::now() >= deadline {
                return Err(Failure::Check("timed out connecting".into()));
            }
            match h.poll() {
                Some(Output::Connected {
                    stream: Some(s), ..
                }) => break s,
                Some(Output::Failed { error, .. }) => {
                    return Err(Failure::Check(format!("connect: {error}")))
                }
                Some(_) => {}
                None => std::thread::sleep(Duration::from_micros(200)),
            }
        };
        const CHUNK: usize = 16 << 10;
        let (mut sent, mut sent_sum) = (0u64, Fnv::new());
        let (mut received, mut recv_sum) = (0u64, Fnv::new());
        let mut pending: Option<Vec<u8>> = None;
        let mut closed_ours = false;
        loop {
            let mut idle = true;
            // Send.
            while !closed_ours {
                let item = match pending.take() {
                    Some(v) => v,
                    None if sent < bytes => {
                        let n = (bytes - sent).min(CHUNK as u64) as usize;
                        let mut v = vec![0u8; n];
                        pattern(sent, &mut v);
                        sent_sum.update(&v);
                        sent += n as u64;
                        v
                    }
                    None => {
                        s.close.store(true, Ordering::Release);
                        closed_ours = true;
                        break;
                    }
                };
                match s.tx.push(item) {
                    Ok(()) => idle = false,
                    Err(back) => {
                        pending = Some(back);
                        break;
                    }
                }
            }
            // Receive.
            while let Some(v) = s.rx.pop() {
                recv_sum.update(&v);
                received += v.len() as u64;
                idle = false;
            }
            let f = s.flags();
            if f & flags::FAILED != 0 {
                return Err(Failure::Check(format!(
                    "connection failed after sending {sent} and receiving {received}"
                )));
            }
            if closed_ours && f & flags::CLOSED != 0 && f & flags::RX_EOF != 0 && s.rx.is_empty() {
                break;
            }
            if Instant::now() >= deadline {
                s.abort.store(true, Ordering::Release);
                return Err(Failure::Check(format!(
                    "timed out after sending {sent} and receiving {received}"
                )));
            }
            if idle {
                std::thread::sleep(Duration::from_micros(100));
            }
        }
        println!(
            "sent {sent} fnv1a64 {:016x} received {received} fnv1a64 {:016x}",
            sent_sum.0, recv_sum.0
        );
        Ok(())
    }
}
