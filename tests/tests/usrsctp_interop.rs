//! DDP over SCTP (RFC 5043) between our `SctpHost` on AF_XDP and an
//! independent SCTP stack, usrsctp (Debian `libusrsctp-dev`), over raw
//! IPv4 protocol 132, and inside UDP (RFC 6951, port 9899 both sides), on a veth pair between two namespaces the test makes
//! (removed on drop, failure included).
//!
//! `interop/sctp/usrsctp_ddp_peer.c` is built here with `cc` and run in
//! namespace B on the kernel's address; our engine owns namespace A's veth
//! end through AF_XDP. Both roles:
//!
//! * `usrsctp_associates_with_us` (raw) and `..._in_udp`: usrsctp
//!   connects, we accept;
//! * `we_associate_with_usrsctp` (raw) and `..._in_udp`: we connect,
//!   usrsctp accepts.
//!
//! And refusal (RFC 5043 §7.1, §11.1) against a usrsctp that leaves the
//! indication out: `usrsctp_without_adaptation_is_refused` (its connect
//! fails on our ABORT) and `we_refuse_usrsctp_without_adaptation` (we
//! ABORT on its INIT-ACK and report `AdaptationRefused`).
//!
//! Over UDP the kernel of namespace B checks our UDP checksums (a bad one
//! is dropped before usrsctp sees it) and usrsctp our CRC32c.
//!
//! Each side offers and checks the Adaptation Layer Indication 1 (our side
//! reports `Connected` only once the peer indicated it, RFC 5043 §7.1; the
//! C side checks `SCTP_ADAPTATION_INDICATION`), the initiator opens a DDP
//! Stream Session (PPID 17), 64 segments of 1000 octets go each way (PPID
//! 16, unordered, every DDP-SSN and octet checked on both sides), a
//! Terminate, and a graceful SHUTDOWN.
//!
//! tcpdump captures B's veth during each run and tshark (CRC32c checking
//! on, UDP checksums checked) must find every SCTP packet's checksum good
//! in both directions — ours and usrsctp's — every UDP checksum good in the
//! UDP runs, DATA with PPIDs 16 and 17, and the Adaptation Layer Indication
//! 1 in the INIT and the INIT-ACK (skipped, with a line saying so, where
//! tcpdump or tshark is missing).
//!
//! Prints `SKIP:` and passes without root, `cc`, `ethtool` or `usrsctp.h`
//! (and skips the capture checks without tcpdump or tshark), except under
//! `CI`, where each of these fails.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

mod sctp_util;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ddp_sctp::{DdpEvent, SessionEnd};
use iwarp_datapath::over_sctp::{SctpCommand, SctpOutput, SCTP_UDP_PORT};
use iwarp_xdp::{in_netns, Config as XdpConfig, XdpDevice};
use netns_harness::{spawn_in, End, Netns, VethPair};
use sctp_lite::assoc::CloseReason;
use sctp_util::{receive, segment, start, Host};

const N: usize = 64;

/// `true` (after printing `SKIP`, or a panic under CI, where
/// scripts/deps.sh --test installs all of it) when the test cannot run here.
fn skip() -> bool {
    let why = if let Some(why) = netns_harness::skip_reason() {
        why
    } else if !Path::new("/usr/include/usrsctp.h").exists() {
        "usrsctp.h missing (apt-get install libusrsctp-dev)".into()
    } else if !netns_harness::command_available("cc") {
        "no C compiler `cc`".into()
    } else if !netns_harness::command_available("ethtool") {
        "`ethtool` missing (UDP checksum offload must go off)".into()
    } else {
        return false;
    };
    netns_harness::skip_test(&why);
    true
}

/// The built C peer in a directory of its own (with the capture), removed
/// on drop, failure included.
struct Prog {
    dir: PathBuf,
    bin: PathBuf,
}

impl Prog {
    fn bin(&self) -> &str {
        self.bin.to_str().unwrap()
    }
}

impl Drop for Prog {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Builds the C peer into a fresh directory.
fn build_peer(tag: &str) -> Prog {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../interop/sctp/usrsctp_ddp_peer.c");
    let dir = std::env::temp_dir().join(format!("iwarp-usrsctp-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bin = dir.join("usrsctp_ddp_peer");
    let o = Command::new("cc")
        .args(["-O1", "-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&bin)
        .arg(&src)
        .args(["-lusrsctp", "-lpthread"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "cc failed: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    Prog { dir, bin }
}

/// Namespace A (ours, AF_XDP, .1) and B (kernel .2/24, usrsctp). Fields
/// drop in order: the veth, then the namespaces.
struct Lab {
    veth: VethPair,
    b: Netns,
    a: Netns,
    ip_a: [u8; 4],
    ip_b: [u8; 4],
}

fn lab(tag: &str) -> Lab {
    let a = Netns::new(tag).unwrap();
    let b = Netns::new(tag).unwrap();
    let mut veth = VethPair::new(tag).unwrap();
    veth.move_to(End::A, &a).unwrap();
    veth.move_to(End::B, &b).unwrap();
    let id = a.id();
    let net = [10, (id >> 8) as u8, id as u8];
    let (ip_a, ip_b) = ([net[0], net[1], net[2], 1], [net[0], net[1], net[2], 2]);
    veth.add_addr(End::B, &format!("{}.{}.{}.2/24", net[0], net[1], net[2]))
        .unwrap();
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).unwrap();
        veth.set_up(end).unwrap();
    }
    // B's kernel would leave UDP checksums partial (veth TX offload), and
    // our AF_XDP end receives the frames as they are: seen with tshark on a
    // capture of B's INIT-ACKs, which our engine rightly dropped.
    veth.disable_tx_offload(End::B).unwrap();
    Lab {
        veth,
        b,
        a,
        ip_a,
        ip_b,
    }
}

fn our_host(lab: &Lab, udp: bool) -> Host {
    let cfg = XdpConfig::new(lab.veth.name(End::A), lab.ip_a);
    let dev = in_netns(&lab.a.ns_path(), || XdpDevice::open(&cfg))
        .unwrap()
        .unwrap_or_else(|e| panic!("open {}: {e}", cfg.iface));
    let mac = dev.mac_address();
    Host::new(start(mac, lab.ip_a, dev, udp), "ours")
}

/// tcpdump on B's veth end, writing `dir/capture.pcap`; killed on drop.
struct Capture {
    dump: netns_harness::Spawned,
    path: PathBuf,
}

fn capture(lab: &Lab, dir: &Path) -> Option<Capture> {
    if !netns_harness::command_available("tcpdump") || !netns_harness::command_available("tshark") {
        netns_harness::skip_test("capture checks only: tcpdump or tshark missing");
        return None;
    }
    let path = dir.join("capture.pcap");
    let dump = spawn_in(
        &lab.b,
        &[
            "tcpdump",
            // Frames reach the file as they arrive (no ring-block timeout,
            // no stdio buffer): the capture is killed, not stopped.
            "--immediate-mode",
            "-B",
            "16384",
            "-U",
            "-n",
            "-i",
            lab.veth.name(End::B),
            "-w",
            path.to_str().unwrap(),
        ],
    )
    .unwrap();
    // tcpdump writes the file header before its capture is attached, so
    // readiness is a frame in the file: B pings our address (our engine
    // ignores ICMP; the echo request is on B's veth) until one is there.
    let target = ip_str(lab.ip_a);
    for _ in 0..50 {
        let _ = netns_harness::run_in(
            &lab.b,
            &["ping", "-c", "1", "-W", "1", &target],
            Duration::from_secs(3),
        );
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > 24) {
            return Some(Capture { dump, path });
        }
    }
    panic!("tcpdump did not start capturing");
}

fn tshark(path: &Path, args: &[&str]) -> String {
    let o = Command::new("tshark")
        .arg("-r")
        .arg(path)
        .args([
            "-o",
            "sctp.checksum:CRC 32c",
            "-o",
            "udp.check_checksum:TRUE",
        ])
        .args(args)
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

impl Capture {
    /// Stops the capture and checks it with tshark.
    fn check(mut self, lab: &Lab, udp: bool) {
        // Let tcpdump write the last frames. The checks below need none of
        // the last few (handshake, then > N packets each way).
        std::thread::sleep(Duration::from_millis(200));
        self.dump.kill();
        let rows = tshark(
            &self.path,
            &[
                "-Y",
                "sctp",
                "-T",
                "fields",
                "-e",
                "ip.src",
                "-e",
                "sctp.checksum.status",
                "-e",
                "udp.checksum.status",
                "-e",
                "sctp.chunk_type",
            ],
        );
        let rows: Vec<Vec<&str>> = rows.lines().map(|l| l.split('\t').collect()).collect();
        let (ours, theirs) = (ip_str(lab.ip_a), ip_str(lab.ip_b));
        let from = |ip: &str| rows.iter().filter(|r| r[0] == ip).count();
        assert!(
            from(&ours) > 0 && from(&theirs) > 0,
            "capture empty: {} from us, {} from usrsctp",
            from(&ours),
            from(&theirs)
        );
        for r in &rows {
            // Wireshark's PROTO_CHECKSUM_E_GOOD = 1.
            assert_eq!(r[1], "1", "SCTP checksum not good: {r:?}");
            if udp {
                assert_eq!(r[2], "1", "UDP checksum not good: {r:?}");
            } else {
                assert_eq!(r[2], "", "UDP in a raw IPv4 run: {r:?}");
            }
        }
        let ppids = tshark(
            &self.path,
            &[
                "-Y",
                "sctp.data_payload_proto_id",
                "-T",
                "fields",
                "-e",
                "ip.src",
                "-e",
                "sctp.data_payload_proto_id",
            ],
        );
        for src in [&ours, &theirs] {
            let mine: Vec<&str> = ppids
                .lines()
                .filter_map(|l| l.split_once('\t'))
                .filter(|(s, _)| s == src)
                .flat_map(|(_, p)| p.split(','))
                .collect();
            // Both PPIDs from each side. Not every segment: tcpdump was
            // seen to miss a burst of 36 DATA packets (TSNs 29-64) that
            // usrsctp never resent, so our engine had them; completeness is
            // the endpoints' check, not the capture's.
            assert!(
                mine.contains(&"16") && mine.contains(&"17"),
                "PPIDs from {src}: {mine:?}"
            );
            assert!(mine.iter().all(|p| *p == "16" || *p == "17"), "{mine:?}");
        }
        let adap = tshark(
            &self.path,
            &[
                "-Y",
                "sctp.adaptation_layer_indication",
                "-T",
                "fields",
                "-e",
                "sctp.chunk_type",
                "-e",
                "sctp.adaptation_layer_indication",
            ],
        );
        let adap: Vec<&str> = adap.lines().collect();
        for ty in ["1", "2"] {
            assert!(
                adap.iter().any(|l| *l == format!("{ty}\t0x00000001")),
                "no adaptation indication 1 in chunk type {ty}: {adap:?}"
            );
        }
        println!(
            "tshark: {} SCTP packets ({} ours, {} usrsctp's), all checksums good; \
             PPIDs 16 and 17 both ways; indication 1 in INIT and INIT-ACK",
            rows.len(),
            from(&ours),
            from(&theirs)
        );
    }
}

fn ip_str(ip: [u8; 4]) -> String {
    format!("{}.{}.{}.{}", ip[0], ip[1], ip[2], ip[3])
}

fn check_peer(p: netns_harness::Spawned, role: &str, udp: bool) {
    let o = p.wait_timeout(Duration::from_secs(30)).unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    println!(
        "usrsctp peer ({role}):\n{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "usrsctp peer failed: {out}");
    assert!(
        out.contains(&format!(
            "OK {role}: adaptation 0x00000001, {N} segments each way over {}",
            if udp { "UDP" } else { "raw IPv4" }
        )),
        "{out}"
    );
}

#[test]
fn usrsctp_associates_with_us() {
    usrsctp_client(false);
}

#[test]
fn usrsctp_associates_with_us_in_udp() {
    usrsctp_client(true);
}

#[test]
fn we_associate_with_usrsctp() {
    usrsctp_server(false);
}

#[test]
fn we_associate_with_usrsctp_in_udp() {
    usrsctp_server(true);
}

fn peer_args(mut v: Vec<&str>, udp: bool) -> Vec<&str> {
    if udp {
        v.push("udp");
    }
    v
}

/// usrsctp connects, we accept.
fn usrsctp_client(udp: bool) {
    if skip() {
        return;
    }
    let prog = build_peer(if udp { "cu" } else { "c" });
    let lab = lab(if udp { "usau" } else { "usa" });
    let mut us = our_host(&lab, udp);
    let cap = capture(&lab, &prog.dir);
    us.post(SctpCommand::Listen { port: 5002 });
    let ok = us.wait("Listening", |o| match o {
        SctpOutput::Listening { port: 5002, ok } => Some(*ok),
        _ => None,
    });
    assert!(ok);
    let (ip_a, n) = (ip_str(lab.ip_a), N.to_string());
    let args = peer_args(vec![prog.bin(), "client", &ip_a, "5002", &n], udp);
    let peer = spawn_in(&lab.b, &args).unwrap();
    let id = us.wait("Accepted", |o| match o {
        SctpOutput::Accepted { assoc, remote, .. } => {
            assert_eq!(*remote, lab.ip_b);
            Some(*assoc)
        }
        _ => None,
    });
    us.wait("Connected", |o| match o {
        SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
        _ => None,
    });
    let pd = us.wait("SessionRequested", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionRequested {
                stream: 0,
                private_data,
            },
        ) if *x == id => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd, b"from usrsctp");
    us.post(SctpCommand::Accept {
        assoc: id,
        stream: 0,
        private_data: b"welcome usrsctp".to_vec(),
    });
    let got = receive(&mut us, id, N);
    for (i, (ssn, seg)) in got.iter().enumerate() {
        assert_eq!(usize::from(*ssn), i + 1);
        assert_eq!(seg, &segment(0xc, i), "segment {i} from usrsctp");
    }
    for i in 0..N {
        us.post(SctpCommand::Segment {
            assoc: id,
            stream: 0,
            segment: segment(0xa, i),
        });
    }
    let why = us.wait("SessionEnded", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionEnded { stream: 0, why, .. }) if *x == id => {
            Some(*why)
        }
        _ => None,
    });
    assert_eq!(why, SessionEnd::PeerTerminated);
    let why = us.wait("Closed", |o| match o {
        SctpOutput::Event(x, DdpEvent::Closed(why)) if *x == id => Some(*why),
        _ => None,
    });
    assert_eq!(why, CloseReason::Shutdown);
    check_peer(peer, "client", udp);
    if let Some(c) = cap {
        c.check(&lab, udp);
    }
    assert!(
        !us.kept.iter().any(|o| matches!(o, SctpOutput::Refused(..))),
        "{:?}",
        us.kept
    );
}

/// We connect, usrsctp accepts.
fn usrsctp_server(udp: bool) {
    if skip() {
        return;
    }
    let prog = build_peer(if udp { "su" } else { "s" });
    let lab = lab(if udp { "usbu" } else { "usb" });
    let mut us = our_host(&lab, udp);
    let cap = capture(&lab, &prog.dir);
    let n = N.to_string();
    let args = peer_args(vec![prog.bin(), "server", "5003", &n], udp);
    let peer = spawn_in(&lab.b, &args).unwrap();
    // The INIT may reach B before usrsctp listens: B's kernel then answers
    // ICMP (T1-init resends the INIT, RFC 9260 §5.1), or usrsctp, up but
    // not yet listening, ABORTs it (§8.4): then connect again (bounded).
    let mut id = None;
    for token in 1..=50u64 {
        us.post(SctpCommand::Connect {
            token,
            remote: lab.ip_b,
            port: 5003,
            local_port: 40_003,
            udp_port: udp.then_some(SCTP_UDP_PORT),
        });
        let a = us.wait("Opening", |o| match o {
            SctpOutput::Opening { token: t, result } if *t == token => Some(result.unwrap()),
            _ => None,
        });
        let up = us.wait("Connected or Closed", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == a => Some(true),
            SctpOutput::Event(x, DdpEvent::Closed(CloseReason::PeerAbort(_))) if *x == a => {
                Some(false)
            }
            _ => None,
        });
        if up {
            id = Some(a);
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let id = id.expect("usrsctp never accepted the association");
    us.post(SctpCommand::Initiate {
        assoc: id,
        stream: 0,
        private_data: b"from SctpHost".to_vec(),
    });
    let pd = us.wait("SessionAccepted", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionAccepted {
                stream: 0,
                private_data,
            },
        ) if *x == id => Some(private_data.clone()),
        _ => None,
    });
    assert_eq!(pd, b"welcome SctpHost");
    for i in 0..N {
        us.post(SctpCommand::Segment {
            assoc: id,
            stream: 0,
            segment: segment(0xa, i),
        });
    }
    let got = receive(&mut us, id, N);
    for (i, (ssn, seg)) in got.iter().enumerate() {
        assert_eq!(usize::from(*ssn), i + 1);
        assert_eq!(seg, &segment(0xc, i), "segment {i} from usrsctp");
    }
    us.post(SctpCommand::Terminate {
        assoc: id,
        stream: 0,
    });
    us.post(SctpCommand::Shutdown(id));
    let why = us.wait("Closed", |o| match o {
        SctpOutput::Event(x, DdpEvent::Closed(why)) if *x == id => Some(*why),
        _ => None,
    });
    assert_eq!(why, CloseReason::Shutdown);
    check_peer(peer, "server", udp);
    if let Some(c) = cap {
        c.check(&lab, udp);
    }
    assert!(
        !us.kept.iter().any(|o| matches!(o, SctpOutput::Refused(..))),
        "{:?}",
        us.kept
    );
}

#[test]
fn usrsctp_without_adaptation_is_refused() {
    if skip() {
        return;
    }
    let prog = build_peer("cn");
    let lab = lab("usan");
    let mut us = our_host(&lab, false);
    us.post(SctpCommand::Listen { port: 5004 });
    let ok = us.wait("Listening", |o| match o {
        SctpOutput::Listening { port: 5004, ok } => Some(*ok),
        _ => None,
    });
    assert!(ok);
    let ip_a = ip_str(lab.ip_a);
    let peer = spawn_in(
        &lab.b,
        &[prog.bin(), "client", &ip_a, "5004", "1", "noadapt"],
    )
    .unwrap();
    let o = peer.wait_timeout(Duration::from_secs(30)).unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    println!("usrsctp peer (client, no indication):\n{out}");
    assert!(o.status.success(), "{out}");
    assert!(out.contains("OK refused: connect:"), "{out}");
    // The Listener answered the INIT with ABORT and made no association.
    let (host, _) = us.h.stop().unwrap();
    assert_eq!(host.assoc_count(), 0);
    assert!(
        !us.kept
            .iter()
            .any(|o| matches!(o, SctpOutput::Accepted { .. })),
        "{:?}",
        us.kept
    );
}

#[test]
fn we_refuse_usrsctp_without_adaptation() {
    if skip() {
        return;
    }
    let prog = build_peer("sn");
    let lab = lab("usbn");
    let mut us = our_host(&lab, false);
    let _peer = spawn_in(&lab.b, &[prog.bin(), "server", "5005", "1", "noadapt"]).unwrap();
    // As in we_associate_with_usrsctp: connect again while usrsctp is not
    // listening yet (bounded).
    for token in 1..=50u64 {
        us.post(SctpCommand::Connect {
            token,
            remote: lab.ip_b,
            port: 5005,
            local_port: 40_005,
            udp_port: None,
        });
        let a = us.wait("Opening", |o| match o {
            SctpOutput::Opening { token: t, result } if *t == token => Some(result.unwrap()),
            _ => None,
        });
        let why = us.wait("Closed", |o| match o {
            SctpOutput::Event(x, DdpEvent::Closed(why)) if *x == a => Some(*why),
            SctpOutput::Event(x, DdpEvent::Connected) if *x == a => {
                panic!("associated with a peer without the DDP indication")
            }
            _ => None,
        });
        match why {
            CloseReason::AdaptationRefused => {
                println!("refused after {token} attempt(s)");
                return;
            }
            CloseReason::PeerAbort(_) => std::thread::sleep(Duration::from_millis(20)),
            other => panic!("closed for {other:?}"),
        }
    }
    panic!("usrsctp never answered the INIT");
}
