//! tcp-lite against the Linux kernel's TCP over real frames: `tlnc` runs on
//! AF_XDP on one end of a veth pair in namespace A; the other end sits in
//! namespace B, where this test talks plain kernel sockets. Both directions
//! move at once and are checked with SHA-256 at both ends.
//!
//! Needs root (namespaces, XDP); without it each test prints `SKIP:` and
//! passes, except under `CI`, where it fails. Sizes: `TLNC_TEST_BYTES` overrides the 1 GiB (and the lossy
//! test's 256 MiB) for quick local runs.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use netns_harness::{End, Netns, VethPair};
use sha2::{Digest, Sha256};

const GIB: u64 = 1 << 30;

fn bytes_or(default: u64) -> u64 {
    std::env::var("TLNC_TEST_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The transfers saturate this machine's two cores: one at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Two namespaces joined by a veth pair; deleted on drop (even on panic).
struct Lab {
    // Field order: the veth goes before the namespaces.
    veth: VethPair,
    ours: Netns,
    linux: Netns,
    our_ip: Ipv4Addr,
    linux_ip: Ipv4Addr,
    // Last: released after the namespaces are gone.
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Lab {
    fn new() -> Option<Lab> {
        Lab::build(false)
    }

    /// With `linux_offload`, the Linux end keeps TX checksum offload on:
    /// its TCP segments reach our AF_XDP socket with partial checksums.
    fn build(linux_offload: bool) -> Option<Lab> {
        if netns_harness::skip_test_without_root() {
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let ours = Netns::new("tlo").unwrap();
        let linux = Netns::new("tll").unwrap();
        let mut veth = VethPair::new("tlv").unwrap();
        veth.move_to(End::A, &ours).unwrap();
        veth.move_to(End::B, &linux).unwrap();
        let id = linux.id();
        let (x, y) = ((id >> 8) as u8, id as u8);
        let our_ip = Ipv4Addr::new(10, x, y, 1);
        let linux_ip = Ipv4Addr::new(10, x, y, 2);
        for end in [End::A, End::B] {
            veth.disable_ipv6(end).unwrap();
            // Full checksums and no TSO on the wire: a frame that leaves a
            // veth with a partial checksum or as a 64 KiB super-segment is
            // not what a NIC would deliver to an AF_XDP socket.
            if !(linux_offload && end == End::B) {
                veth.disable_tx_offload(end).unwrap();
            }
            veth.set_up(end).unwrap();
        }
        veth.add_addr(End::B, &format!("{linux_ip}/24")).unwrap();
        linux.ip(&["link", "set", "lo", "up"]).unwrap();
        Some(Lab {
            _turn: turn,
            veth,
            ours,
            linux,
            our_ip,
            linux_ip,
        })
    }

    /// Run `f` on a thread inside the Linux namespace.
    fn in_linux<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<T> {
        let path = self.linux.ns_path();
        std::thread::spawn(move || iwarp_xdp::in_netns(&path, f).unwrap())
    }

    /// Start `tlnc` in our namespace with piped stdin/stdout.
    fn tlnc(&self, extra: &[&str]) -> Tlnc {
        let ip = format!("{}/24", self.our_ip);
        let mut args = vec![
            "netns",
            "exec",
            self.ours.name(),
            env!("CARGO_BIN_EXE_tlnc"),
            "--iface",
            self.veth.name(End::A),
            "--ip",
            &ip,
            "--stats",
        ];
        if !extra.contains(&"--timeout") {
            args.extend_from_slice(&["--timeout", "300"]);
        }
        args.extend_from_slice(extra);
        let child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        Tlnc { child: Some(child) }
    }
}

/// A running `tlnc`, killed on drop.
struct Tlnc {
    child: Option<Child>,
}

impl Drop for Tlnc {
    fn drop(&mut self) {
        if let Some(c) = &mut self.child {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A reproducible byte stream (xorshift64*), fed to `sink` in 64 KiB pieces.
fn generate(seed: u64, len: u64, mut sink: impl FnMut(&[u8]) -> bool) -> [u8; 32] {
    let mut h = Sha256::new();
    let mut x = seed | 1;
    let mut buf = vec![0u8; 64 << 10];
    let mut left = len;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        for c in buf[..n].chunks_mut(8) {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            let v = x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes();
            c.copy_from_slice(&v[..c.len()]);
        }
        h.update(&buf[..n]);
        if !sink(&buf[..n]) {
            break;
        }
        left -= n as u64;
    }
    h.finalize().into()
}

fn digest_of(seed: u64, len: u64) -> [u8; 32] {
    generate(seed, len, |_| true)
}

/// Read to end of stream; returns (length, SHA-256).
fn drain(mut r: impl Read) -> (u64, [u8; 32]) {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut n = 0u64;
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                h.update(&buf[..k]);
                n += k as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    (n, h.finalize().into())
}

/// Like [`drain`], and say so on `at_len` once `len` octets have arrived.
fn drain_notify(mut r: impl Read, len: u64, at_len: mpsc::Sender<()>) -> (u64, [u8; 32]) {
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 256 << 10];
    let mut n = 0u64;
    if len == 0 {
        let _ = at_len.send(());
    }
    loop {
        match r.read(&mut buf) {
            Ok(0) => break,
            Ok(k) => {
                h.update(&buf[..k]);
                let before = n;
                n += k as u64;
                if before < len && n >= len {
                    let _ = at_len.send(());
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    (n, h.finalize().into())
}

/// The kernel side of a transfer on a connected socket: send `len` bytes
/// of stream `seed` while reading to EOF. With `close_first`, shut down our
/// direction as soon as the data is written; otherwise only after the peer's
/// FIN. Returns what was read (length, SHA-256).
fn linux_side(s: TcpStream, seed: u64, len: u64, close_first: bool) -> (u64, [u8; 32]) {
    s.set_read_timeout(Some(Duration::from_secs(300))).unwrap();
    let (eof_tx, eof_rx) = mpsc::channel();
    let r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || {
        let out = drain(r);
        let _ = eof_tx.send(());
        out
    });
    let mut w = s.try_clone().unwrap();
    generate(seed, len, |b| w.write_all(b).is_ok());
    if !close_first {
        let _ = eof_rx.recv_timeout(Duration::from_secs(300));
    }
    s.shutdown(Shutdown::Write).unwrap();
    reader.join().unwrap()
}

/// Our side through tlnc's stdin/stdout: send stream `seed`, read to EOF.
/// With `close_first`, close stdin (tlnc sends FIN) right after the data;
/// otherwise only after all of the peer's data reached our stdout (the peer
/// sends its FIN right after it).
fn our_side(
    mut t: Tlnc,
    seed: u64,
    len: u64,
    close_first: bool,
) -> (u64, [u8; 32], ExitStatus, String) {
    let child = t.child.as_mut().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut stderr = child.stderr.take().unwrap();
    let (eof_tx, eof_rx) = mpsc::channel();
    let reader = std::thread::spawn(move || drain_notify(stdout, len, eof_tx));
    let err_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    generate(seed, len, |b| stdin.write_all(b).is_ok());
    if !close_first {
        let _ = eof_rx.recv_timeout(Duration::from_secs(300));
    }
    drop(stdin);
    let (n, sha) = reader.join().unwrap();
    let status = wait_bounded(child, Duration::from_secs(60));
    let err = err_reader.join().unwrap();
    (n, sha, status, err)
}

fn wait_bounded(c: &mut Child, limit: Duration) -> ExitStatus {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(s) = c.try_wait().unwrap() {
            return s;
        }
        if Instant::now() > deadline {
            let _ = c.kill();
            panic!("tlnc did not exit within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn check(
    label: &str,
    len: u64,
    ours: (u64, [u8; 32], ExitStatus, String),
    linux: (u64, [u8; 32]),
    started: Instant,
) {
    let (n, sha, status, err) = ours;
    eprintln!(
        "{label}: {} MiB each way in {:.2} s\n{err}",
        len >> 20,
        started.elapsed().as_secs_f64()
    );
    assert!(status.success(), "{label}: tlnc exit {status}: {err}");
    assert_eq!(n, len, "{label}: bytes tlnc received");
    assert_eq!(sha, digest_of(2, len), "{label}: SHA-256 at our end");
    assert_eq!(linux.0, len, "{label}: bytes Linux received");
    assert_eq!(
        linux.1,
        digest_of(1, len),
        "{label}: SHA-256 at the Linux end"
    );
}

/// Our stream is seed 1, Linux's is seed 2.
fn our_client_linux_server(lab: &Lab, len: u64, we_close_first: bool, extra: &[&str]) {
    let addr = SocketAddrV4::new(lab.linux_ip, 5201);
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = lab.in_linux(move || {
        let l = TcpListener::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        let (s, _) = l.accept().unwrap();
        linux_side(s, 2, len, !we_close_first)
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let started = Instant::now();
    let target = addr.to_string();
    let mut args = vec!["--connect", target.as_str()];
    args.extend_from_slice(extra);
    let ours = our_side(lab.tlnc(&args), 1, len, we_close_first);
    let linux = server.join().unwrap();
    check("our client -> Linux server", len, ours, linux, started);
}

fn linux_client_our_server(lab: &Lab, len: u64, we_close_first: bool, extra: &[&str]) {
    let mut args = vec!["--listen", "5202"];
    args.extend_from_slice(extra);
    let t = lab.tlnc(&args);
    let target = SocketAddrV4::new(lab.our_ip, 5202);
    let started = Instant::now();
    let client = lab.in_linux(move || {
        // tlnc needs a moment to attach; retry refused connects briefly.
        let deadline = Instant::now() + Duration::from_secs(20);
        let s = loop {
            match TcpStream::connect_timeout(&target.into(), Duration::from_secs(5)) {
                Ok(s) => break s,
                Err(e) if Instant::now() < deadline => {
                    let _ = e;
                    std::thread::sleep(Duration::from_millis(100));
                }
                Err(e) => panic!("connect: {e}"),
            }
        };
        linux_side(s, 2, len, !we_close_first)
    });
    let ours = our_side(t, 1, len, we_close_first);
    let linux = client.join().unwrap();
    check("Linux client -> our server", len, ours, linux, started);
}

#[test]
fn our_client_to_linux_server_one_gib_each_way_we_close_first() {
    let Some(lab) = Lab::new() else { return };
    our_client_linux_server(&lab, bytes_or(GIB), true, &[]);
}

#[test]
fn linux_client_to_our_server_one_gib_each_way_linux_closes_first() {
    let Some(lab) = Lab::new() else { return };
    linux_client_our_server(&lab, bytes_or(GIB), false, &[]);
}

#[test]
fn sequence_numbers_wrap_in_both_roles() {
    // Our ISN 64 KiB below 2^32: our sequence space wraps at once.
    let Some(lab) = Lab::new() else { return };
    let len = bytes_or(64 << 20).min(64 << 20);
    our_client_linux_server(&lab, len, false, &["--isn", "4294901760"]);
    linux_client_our_server(&lab, len, true, &["--isn", "4294901760"]);
}

#[test]
fn two_percent_loss_both_directions() {
    let Some(lab) = Lab::new() else { return };
    let rules = "table inet lossy {\n\
        chain in { type filter hook input priority 0; numgen random mod 100 < 2 counter drop; }\n\
        chain out { type filter hook output priority 0; numgen random mod 100 < 2 counter drop; }\n\
        }\n";
    let path = std::env::temp_dir().join(format!("tlnc-nft-{}.conf", lab.linux.id()));
    std::fs::write(&path, rules).unwrap();
    let out = Command::new("ip")
        .args(["netns", "exec", lab.linux.name(), "nft", "-f"])
        .arg(&path)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        out.status.success(),
        "nft: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let len = bytes_or(256 << 20).min(256 << 20);
    // A LAN-sized minimum RTO (RFC 6298 §2.4 allows a configurable floor):
    // with 2% loss each way, a 200 ms floor spends most of the run waiting.
    let rto = ["--rto-min-ms", "5"];
    our_client_linux_server(&lab, len, true, &rto);
    linux_client_our_server(&lab, len, false, &rto);
    // The rules did drop packets, in both directions.
    let out = Command::new("ip")
        .args(["netns", "exec", lab.linux.name(), "nft", "list", "ruleset"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let dropped: Vec<u64> = text
        .split("counter packets ")
        .skip(1)
        .filter_map(|t| t.split_whitespace().next()?.parse().ok())
        .collect();
    assert_eq!(dropped.len(), 2, "{text}");
    assert!(dropped.iter().all(|&n| n > 0), "no drops: {text}");
    eprintln!("nftables dropped {dropped:?} packets (input, output)");
}

#[test]
fn closed_port_is_connection_refused() {
    let Some(lab) = Lab::new() else { return };
    let target = SocketAddrV4::new(lab.linux_ip, 5999).to_string();
    let mut t = lab.tlnc(&["--connect", &target]);
    let child = t.child.as_mut().unwrap();
    drop(child.stdin.take());
    let status = wait_bounded(child, Duration::from_secs(30));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("connection refused"), "stderr: {err}");
}

#[test]
fn the_timeout_ends_a_transfer_that_keeps_flowing() {
    // `--timeout` bounds the whole run, also while data keeps arriving:
    // the Linux end sends for up to 30 s and our input never ends, so only
    // the 2 s timeout can stop tlnc.
    let Some(lab) = Lab::new() else { return };
    let addr = SocketAddrV4::new(lab.linux_ip, 5203);
    let (ready_tx, ready_rx) = mpsc::channel();
    let server = lab.in_linux(move || {
        let l = TcpListener::bind(addr).unwrap();
        ready_tx.send(()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let chunk = vec![0x5a; 64 << 10];
        let stop = Instant::now() + Duration::from_secs(30);
        while Instant::now() < stop && s.write_all(&chunk).is_ok() {}
    });
    ready_rx.recv_timeout(Duration::from_secs(10)).unwrap();
    let target = addr.to_string();
    let mut t = lab.tlnc(&["--connect", &target, "--timeout", "2"]);
    let started = Instant::now();
    let child = t.child.as_mut().unwrap();
    let _stdin = child.stdin.take(); // held open: our direction never ends
    let out = child.stdout.take().unwrap();
    let sink = std::thread::spawn(move || drain(out).0);
    let status = wait_bounded(child, Duration::from_secs(60));
    let elapsed = started.elapsed();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let got = sink.join().unwrap();
    assert_eq!(status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("timed out"), "stderr: {err}");
    assert!(got > 0, "no data arrived before the timeout");
    assert!(
        elapsed < Duration::from_secs(10),
        "tlnc ran {elapsed:?} with a 2 s timeout"
    );
    server.join().unwrap();
}

#[test]
fn missing_interface_is_a_clear_setup_error() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_tlnc"))
        .args([
            "--iface",
            "nosuchif0",
            "--ip",
            "10.0.0.1/24",
            "--listen",
            "1",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {err}");
    assert!(err.contains("nosuchif0"), "stderr: {err}");
}

/// A Linux peer with TX checksum offload on (the veth default): without
/// `--accept-partial-checksum` nothing gets through and tlnc says why and
/// what to do; with it, a transfer completes.
#[test]
fn a_checksum_offloading_peer_is_diagnosed_and_accepted_on_request() {
    let Some(lab) = Lab::build(true) else { return };
    let mut t = lab.tlnc(&["--listen", "5203", "--timeout", "4"]);
    let target = SocketAddrV4::new(lab.our_ip, 5203);
    let client = lab.in_linux(move || {
        // Give tlnc time to attach, then one connect attempt.
        std::thread::sleep(Duration::from_millis(500));
        TcpStream::connect_timeout(&target.into(), Duration::from_secs(3)).map(|_| ())
    });
    let child = t.child.as_mut().unwrap();
    drop(child.stdin.take());
    let status = wait_bounded(child, Duration::from_secs(30));
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert!(client.join().unwrap().is_err(), "stderr: {err}");
    assert_eq!(status.code(), Some(1), "stderr: {err}");
    assert!(err.contains("ethtool -K <peer> tx off"), "stderr: {err}");
    assert!(
        err.contains("rx_partial_checksum"),
        "--stats counters: {err}"
    );
    drop(t);
    linux_client_our_server(&lab, 1 << 20, false, &["--accept-partial-checksum"]);
}
