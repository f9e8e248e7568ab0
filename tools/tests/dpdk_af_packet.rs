//! The DPDK port (`net_af_packet` on one end of a veth pair) against the
//! Linux kernel on the other end. Needs root and DPDK: prints `SKIP:` and
//! passes otherwise, except under `CI`, where it must run.
//!
//! DPDK's EAL can be initialised once per process, so every scenario runs
//! `iwarp-dpdk-check` as a child process under `ip netns exec`; the test
//! builds the namespaces (deleted on drop, also on panic) and checks the
//! child's exit status and report.
//!
//! Namespace A holds the DPDK end (no kernel IPv4 address), namespace B the
//! Linux end with 10.X.Y.2/24.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns_harness::{link_exists, list_netns, End, Netns, VethPair};

const CHECK: &str = env!("CARGO_BIN_EXE_iwarp-dpdk-check");

/// None when the tests can run; otherwise why not (a panic under CI).
fn skip() -> Option<String> {
    let why = if !iwarp_dpdk::AVAILABLE {
        Some(iwarp_dpdk::Error::Unavailable.to_string())
    } else {
        netns_harness::skip_reason()
    };
    match why {
        Some(r) if std::env::var_os("CI").is_some() => {
            panic!("the DPDK tests must run in CI, but: {r}")
        }
        other => other,
    }
}

/// Fields drop in order: the veth, then the namespaces.
struct Lab {
    veth: VethPair,
    dpdk: Netns,
    linux: Netns,
    net: [u8; 3],
}

impl Lab {
    /// Two namespaces and a veth between them, at `mtu` when given.
    fn new(tag: &str, mtu: Option<u32>) -> Lab {
        let dpdk = Netns::new(tag).unwrap();
        let linux = Netns::new(tag).unwrap();
        let id = linux.id();
        let net = [10, (id >> 8) as u8, id as u8];
        let mut veth = VethPair::new(tag).unwrap();
        veth.move_to(End::A, &dpdk).unwrap();
        veth.move_to(End::B, &linux).unwrap();
        for end in [End::A, End::B] {
            veth.disable_ipv6(end).unwrap();
            // Full checksums on the wire: AF_PACKET hands DPDK the frame as
            // the kernel built it, partial checksum and all.
            veth.disable_tx_offload(end).unwrap();
            if let Some(m) = mtu {
                veth.set_mtu(end, m).unwrap();
            }
            veth.set_up(end).unwrap();
        }
        veth.add_addr(End::B, &format!("{}/24", ip_str(net, 2)))
            .unwrap();
        linux.ip(&["link", "set", "lo", "up"]).unwrap();
        Lab {
            veth,
            dpdk,
            linux,
            net,
        }
    }

    fn ip(&self, host: u8) -> String {
        ip_str(self.net, host)
    }

    fn devargs(&self, driver: &str) -> String {
        format!("{driver},iface={}", self.veth.name(End::A))
    }

    /// Run the checker in the DPDK namespace; killed after `limit`.
    fn check(&self, args: &[&str], limit: Duration) -> Output {
        let mut cmd = vec!["netns", "exec", self.dpdk.name(), CHECK];
        cmd.extend_from_slice(args);
        let mut child = Command::new("ip")
            .args(&cmd)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + limit;
        while child.try_wait().unwrap().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let out = child.wait_with_output().unwrap();
        println!(
            "--- {} ({})\n{}--- stderr\n{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Names of everything the lab created, to check they are gone later.
    fn names(&self) -> Vec<String> {
        vec![
            self.dpdk.name().to_owned(),
            self.linux.name().to_owned(),
            self.veth.name(End::A).to_owned(),
            self.veth.name(End::B).to_owned(),
        ]
    }
}

fn ip_str(net: [u8; 3], host: u8) -> String {
    format!("{}.{}.{}.{host}", net[0], net[1], net[2])
}

fn assert_cleaned_up(names: &[String]) {
    let left = list_netns().unwrap();
    for n in &names[..2] {
        assert!(!left.contains(n), "namespace {n} left behind");
    }
    for i in &names[2..] {
        assert!(!link_exists(i), "interface {i} left behind");
    }
}

/// ARP request and ICMP echo requests built with tcp-lite's wire module go
/// out through rte_eth_tx_burst; the kernel's replies must come back through
/// rte_eth_rx_burst, data intact.
#[test]
fn arp_and_echo_answered_by_linux() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let names;
    {
        let lab = Lab::new("dpp", None);
        names = lab.names();
        let (dev, ours, peer) = (lab.devargs("net_af_packet0"), lab.ip(1), lab.ip(2));
        let out = lab.check(&["ping", &dev, &ours, &peer, "5"], Duration::from_secs(60));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "iwarp-dpdk-check ping failed");
        assert!(text.contains(&format!("arp: {peer} is at ")), "{text}");
        assert!(text.contains("echo: 5/5 replies"), "{text}");
        // Requests 1 and 3 were built in place in mbufs, each after a
        // cancelled build.
        assert!(
            text.contains("tx_built: 2, tx_build_cancelled: 2 }"),
            "{text}"
        );
        // The kernel's MAC, as ARP reported it, is B's.
        let link = lab
            .linux
            .ip(&["-o", "link", "show", lab.veth.name(End::B)])
            .unwrap();
        let link = String::from_utf8_lossy(&link.stdout).into_owned();
        let reported = text
            .lines()
            .find_map(|l| l.strip_prefix(&format!("arp: {peer} is at ")))
            .unwrap()
            .trim()
            .to_owned();
        assert!(
            link.contains(&format!("link/ether {reported}")),
            "ARP said {reported}, B is {link}"
        );
    }
    assert_cleaned_up(&names);
}

/// The checker's FNV-1a over what it sent / received, for comparison with
/// what the Linux end computed.
fn fnv(data: &[u8], mut h: u64) -> u64 {
    for &b in data {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}
const FNV_INIT: u64 = 0xcbf2_9ce4_8422_2325;

/// tcp-lite's TCP over the DPDK port against a Linux listener: both
/// directions at once, checksummed at both ends.
#[test]
fn tcp_lite_over_dpdk_against_linux() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    tcp_against_linux("dpt", "net_af_packet0", None);
}

/// The same over `net_af_xdp` with MTU 3000 on the veth and the port
/// (`Port::open_mtu`): frames longer than the 2048-octet default data room
/// go out and come in whole, one mbuf each.
#[test]
fn tcp_lite_over_dpdk_af_xdp_with_3000_octet_frames() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let text = tcp_against_linux("dpj", "net_af_xdp0", Some(3000));
    assert!(text.contains("mtu 3000, max frame 3328"), "{text}");
    // 8 MiB in segments of MSS 2960: about 2850 data frames, where
    // 1500-octet frames would take about 5750.
    let tx: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("loop: rounds "))
        .and_then(|l| l.split_whitespace().nth(4))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no loop line in:\n{text}"));
    assert!(tx < (8 << 20) / 2048, "{tx} frames sent for 8 MiB");
}

/// An MTU the driver does not take is refused before anything is set up,
/// with the range it does take (`net_af_packet` receives at most 1518
/// octets here).
#[test]
fn an_mtu_the_driver_refuses_is_a_clear_error() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let names;
    {
        let lab = Lab::new("dpm", None);
        names = lab.names();
        let (dev, ours) = (lab.devargs("net_af_packet0"), format!("{}/24", lab.ip(1)));
        let peer = format!("{}:5001", lab.ip(2));
        let out = lab.check(
            &["tcp", &dev, &ours, &peer, "1", "5", "3000"],
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains(
                "DPDK port \"net_af_packet0\" does not take MTU 3000: its driver takes 576..=1504"
            ),
            "{err}"
        );
    }
    assert_cleaned_up(&names);
}

/// One transfer both ways between the checker on `driver` and a Linux
/// listener, checksummed at both ends; the veth and the port at `mtu`
/// when given. Returns the checker's output.
fn tcp_against_linux(tag: &str, driver: &str, mtu: Option<u32>) -> String {
    const TO_LINUX: u64 = 8 << 20;
    const FROM_LINUX: u64 = 4 << 20;
    let names;
    let text;
    {
        let lab = Lab::new(tag, mtu);
        names = lab.names();
        let path = lab.linux.ns_path();
        let listen_ip = lab.ip(2);
        // The Linux end: accept one connection, send FROM_LINUX octets of
        // its own pattern while reading to EOF; report both checksums.
        let (tx, rx) = std::sync::mpsc::channel();
        let linux = std::thread::spawn(move || {
            iwarp_xdp::in_netns(&path, move || {
                let l = TcpListener::bind((listen_ip.as_str(), 5001)).unwrap();
                tx.send(()).unwrap();
                l.set_nonblocking(true).unwrap();
                let deadline = Instant::now() + Duration::from_secs(60);
                let (mut s, _) = loop {
                    match l.accept() {
                        Ok(c) => break c,
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                            assert!(Instant::now() < deadline, "no connection");
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        Err(e) => panic!("accept: {e}"),
                    }
                };
                s.set_nonblocking(false).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
                s.set_write_timeout(Some(Duration::from_secs(60))).unwrap();
                let mut w = s.try_clone().unwrap();
                let writer = std::thread::spawn(move || {
                    let mut h = FNV_INIT;
                    let mut sent = 0u64;
                    let mut buf = vec![0u8; 64 << 10];
                    while sent < FROM_LINUX {
                        let n = (FROM_LINUX - sent).min(buf.len() as u64) as usize;
                        for (i, b) in buf[..n].iter_mut().enumerate() {
                            *b = ((sent + i as u64) % 251) as u8;
                        }
                        w.write_all(&buf[..n]).unwrap();
                        h = fnv(&buf[..n], h);
                        sent += n as u64;
                    }
                    w.shutdown(Shutdown::Write).unwrap();
                    (sent, h)
                });
                let mut h = FNV_INIT;
                let mut got = 0u64;
                let mut buf = vec![0u8; 64 << 10];
                loop {
                    let n = s.read(&mut buf).unwrap();
                    if n == 0 {
                        break;
                    }
                    h = fnv(&buf[..n], h);
                    got += n as u64;
                }
                (writer.join().unwrap(), (got, h))
            })
            .unwrap()
        });
        rx.recv_timeout(Duration::from_secs(20))
            .expect("Linux listener did not start");
        let (dev, ours, peer) = (
            lab.devargs(driver),
            format!("{}/24", lab.ip(1)),
            format!("{}:5001", lab.ip(2)),
        );
        let bytes = TO_LINUX.to_string();
        let mtu = mtu.unwrap_or(1500).to_string();
        let out = lab.check(
            &["tcp", &dev, &ours, &peer, &bytes, "90", &mtu],
            Duration::from_secs(120),
        );
        text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "iwarp-dpdk-check tcp failed");
        let ((l_sent, l_sent_sum), (l_got, l_got_sum)) = linux.join().unwrap();
        let line = text
            .lines()
            .find(|l| l.starts_with("sent "))
            .unwrap_or_else(|| panic!("no summary line in:\n{text}"));
        let f: Vec<&str> = line.split_whitespace().collect();
        // sent N fnv1a64 X received M fnv1a64 Y
        assert_eq!(f.len(), 8, "{line}");
        let d_sent: u64 = f[1].parse().unwrap();
        let d_sent_sum = u64::from_str_radix(f[3], 16).unwrap();
        let d_got: u64 = f[5].parse().unwrap();
        let d_got_sum = u64::from_str_radix(f[7], 16).unwrap();
        assert_eq!(d_sent, TO_LINUX, "{line}");
        assert_eq!(l_got, TO_LINUX, "Linux received {l_got}");
        assert_eq!(l_got_sum, d_sent_sum, "data DPDK → Linux differs");
        assert_eq!(l_sent, FROM_LINUX);
        assert_eq!(d_got, FROM_LINUX, "{line}");
        assert_eq!(d_got_sum, l_sent_sum, "data Linux → DPDK differs");
    }
    assert_cleaned_up(&names);
    text
}

/// A port that does not exist and devargs for a missing interface give
/// typed errors, and the exit status says "setup".
#[test]
fn bad_device_is_a_clear_error() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let names;
    {
        let lab = Lab::new("dpe", None);
        names = lab.names();
        let out = lab.check(
            &[
                "ping",
                "net_af_packet7,iface=nosuchif0",
                "10.0.0.1",
                "10.0.0.2",
                "1",
            ],
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(
            err.contains("probing device \"net_af_packet7,iface=nosuchif0\" failed"),
            "{err}"
        );
        let out = lab.check(
            &["ping", "net_ring9", "10.0.0.1", "10.0.0.2", "1"],
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("no DPDK port named \"net_ring9\""), "{err}");
    }
    assert_cleaned_up(&names);
}

/// A second and third `Eal::init` in one process fail with
/// `AlreadyInitialised` instead of reaching DPDK (no network needed).
#[test]
fn eal_initialises_once_per_process() {
    if let Some(why) = skip() {
        println!("SKIP: {why}");
        return;
    }
    let out = Command::new(CHECK).arg("eal-twice").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    for which in ["second", "third"] {
        assert!(
            text.contains(&format!("{which}: the DPDK EAL was already initialised")),
            "{text}"
        );
    }
}
