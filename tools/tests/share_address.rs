//! One address shared by the kernel and our stack (`tlnc --share-address`),
//! as in a Kubernetes pod: namespace "ours" has 10.x.y.1/24 configured in
//! its kernel, and `tlnc` runs on AF_XDP on the same interface with the
//! same address. A peer in another namespace reaches, at that one address,
//! a kernel TCP server on one port and our listener on another; and our
//! stack connects out (local port from the reserved range) to a kernel
//! server in the peer. The kernel keeps ARP: our stack's neighbours come
//! from the kernel's table.
//!
//! Needs root (namespaces, XDP); without it each test prints `SKIP:` and
//! passes, except under `CI`, where it fails.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddrV4, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use netns_harness::{End, Netns, VethPair};

/// Namespaces with the branch's prefix; one lab at a time.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The port range our stack takes its local ports from.
const LOCAL_FROM: u16 = 61440;

struct Lab {
    // Field order: the veth goes before the namespaces.
    veth: VethPair,
    ours: Netns,
    peer: Netns,
    shared_ip: Ipv4Addr,
    peer_ip: Ipv4Addr,
    _turn: std::sync::MutexGuard<'static, ()>,
}

impl Lab {
    fn new() -> Option<Lab> {
        if netns_harness::skip_test_without_root() {
            return None;
        }
        let turn = ONE_AT_A_TIME.lock().unwrap_or_else(|p| p.into_inner());
        let ours = Netns::new("opssha").unwrap();
        let peer = Netns::new("opsshb").unwrap();
        let mut veth = VethPair::new("opsv").unwrap();
        veth.move_to(End::A, &ours).unwrap();
        veth.move_to(End::B, &peer).unwrap();
        let id = ours.id();
        let (x, y) = ((id >> 8) as u8, id as u8);
        let shared_ip = Ipv4Addr::new(10, x, y, 1);
        let peer_ip = Ipv4Addr::new(10, x, y, 2);
        for end in [End::A, End::B] {
            veth.disable_ipv6(end).unwrap();
            // Full checksums on the wire (tcp-lite checks every one).
            veth.disable_tx_offload(end).unwrap();
            veth.set_up(end).unwrap();
        }
        // The shared address is the kernel's own, as a pod's is.
        veth.add_addr(End::A, &format!("{shared_ip}/24")).unwrap();
        veth.add_addr(End::B, &format!("{peer_ip}/24")).unwrap();
        // Keep the kernels' ephemeral ports out of our range (the peer's
        // too: the iWARP test runs our stack there on its kernel's address).
        for ns in [&ours, &peer] {
            netns_harness::run_in(
                ns,
                &[
                    "sysctl",
                    "-q",
                    "-w",
                    &format!("net.ipv4.ip_local_reserved_ports={LOCAL_FROM}-65535"),
                ],
                Duration::from_secs(20),
            )
            .unwrap();
        }
        Some(Lab {
            veth,
            ours,
            peer,
            shared_ip,
            peer_ip,
            _turn: turn,
        })
    }

    /// `tlnc --share-address` in our namespace on the shared address.
    fn tlnc(&self, extra: &[&str]) -> Child {
        let ip = format!("{}/24", self.shared_ip);
        let mut args = vec![
            "netns",
            "exec",
            self.ours.name(),
            env!("CARGO_BIN_EXE_tlnc"),
            "--iface",
            self.veth.name(End::A),
            "--ip",
            &ip,
            "--share-address",
            "--timeout",
            "60",
            "--stats",
        ];
        args.extend_from_slice(extra);
        Command::new("ip")
            .args(&args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    }

    /// A kernel TCP listener on `port` in namespace `ns`.
    fn kernel_listener(ns: &Netns, ip: Ipv4Addr, port: u16) -> TcpListener {
        iwarp_xdp::in_netns(&ns.ns_path(), || {
            TcpListener::bind(SocketAddrV4::new(ip, port))
        })
        .unwrap()
        .unwrap()
    }

    /// A kernel TCP connection from the peer's namespace, retried (bounded)
    /// while the listener is not up yet.
    fn peer_connect(&self, port: u16) -> TcpStream {
        let to = SocketAddrV4::new(self.shared_ip, port);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let r = iwarp_xdp::in_netns(&self.peer.ns_path(), || {
                TcpStream::connect_timeout(&to.into(), Duration::from_secs(5))
            })
            .unwrap();
            match r {
                Ok(s) => {
                    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    return s;
                }
                Err(e) if Instant::now() < deadline => {
                    eprintln!("connect {to}: {e}; again");
                    std::thread::sleep(Duration::from_millis(200));
                }
                Err(e) => panic!("connect {to}: {e}"),
            }
        }
    }

    /// The kernel's neighbour table in our namespace.
    fn our_neighbours(&self) -> String {
        let out = self.ours.ip(&["neigh", "show"]).unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// A pattern of `len` octets for `tag`.
fn data(tag: u8, len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ tag).collect()
}

/// Feed `input` to a child's stdin, close it, and collect its output
/// (bounded: the child's own --timeout ends it).
fn finish(mut c: Child, input: &[u8]) -> Output {
    let mut stdin = c.stdin.take().unwrap();
    let input = input.to_vec();
    let w = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = c.wait_with_output().unwrap();
    w.join().unwrap();
    out
}

/// Read everything from `s` until the peer closes.
fn read_all(mut s: &TcpStream) -> Vec<u8> {
    let mut v = Vec::new();
    s.read_to_end(&mut v).unwrap();
    v
}

#[test]
fn kernel_server_and_our_listener_share_one_address() {
    let Some(lab) = Lab::new() else { return };
    let before = lab.our_neighbours();
    assert!(
        !before.contains(&lab.peer_ip.to_string()),
        "a fresh namespace knows no neighbour:\n{before}"
    );

    // Our listener on 5201 of the shared address; the kernel's on 8080.
    let ours = lab.tlnc(&["--listen", "5201"]);
    let kernel = Lab::kernel_listener(&lab.ours, lab.shared_ip, 8080);
    let kernel_side = std::thread::spawn(move || {
        let (s, from) = kernel.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let got = read_all(&s);
        (&s).write_all(&data(0x4b, 100_000)).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        (got, from)
    });

    // The peer talks to the kernel's server...
    let k = lab.peer_connect(8080);
    (&k).write_all(&data(0x11, 200_000)).unwrap();
    k.shutdown(Shutdown::Write).unwrap();
    let from_kernel = read_all(&k);
    let (kernel_got, kernel_from) = kernel_side.join().unwrap();
    assert_eq!(kernel_got, data(0x11, 200_000), "peer -> kernel server");
    assert_eq!(from_kernel, data(0x4b, 100_000), "kernel server -> peer");
    assert_eq!(kernel_from.ip(), std::net::IpAddr::V4(lab.peer_ip));

    // ...and to ours, at the same address.
    let s = lab.peer_connect(5201);
    let r = s.try_clone().unwrap();
    let reader = std::thread::spawn(move || read_all(&r));
    (&s).write_all(&data(0x22, 300_000)).unwrap();
    s.shutdown(Shutdown::Write).unwrap();
    let our_reply = data(0x33, 150_000);
    let out = finish(ours, &our_reply);
    let from_ours = reader.join().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tlnc --listen: {}\n{stderr}",
        out.status
    );
    assert_eq!(out.stdout, data(0x22, 300_000), "peer -> our listener");
    assert_eq!(from_ours, our_reply, "our listener -> peer");
    assert!(stderr.contains("shared_address true"), "{stderr}");

    // The kernel answered the ARP (ours never does on a shared address),
    // and still answers ping on the address.
    let ping = netns_harness::run_in(
        &lab.peer,
        &["ping", "-c", "1", "-W", "5", &lab.shared_ip.to_string()],
        Duration::from_secs(20),
    );
    assert!(ping.is_ok(), "ping the shared address: {ping:?}");
}

#[test]
fn our_stack_connects_out_from_the_reserved_range() {
    let Some(lab) = Lab::new() else { return };
    // A kernel server in the peer namespace.
    let server = Lab::kernel_listener(&lab.peer, lab.peer_ip, 9000);
    let server_side = std::thread::spawn(move || {
        let (s, from) = server.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let got = read_all(&s);
        (&s).write_all(&data(0x55, 250_000)).unwrap();
        s.shutdown(Shutdown::Write).unwrap();
        (got, from)
    });
    let peer = format!("{}:9000", lab.peer_ip);
    let ours = lab.tlnc(&[
        "--connect",
        &peer,
        "--local-ports-from",
        &LOCAL_FROM.to_string(),
    ]);
    let out = finish(ours, &data(0x44, 400_000));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "tlnc --connect: {}\n{stderr}",
        out.status
    );
    let (got, from) = server_side.join().unwrap();
    assert_eq!(got, data(0x44, 400_000), "ours -> peer's kernel server");
    assert_eq!(
        out.stdout,
        data(0x55, 250_000),
        "peer's kernel server -> ours"
    );
    // From the shared address, from a port in the range.
    assert_eq!(from.ip(), std::net::IpAddr::V4(lab.shared_ip));
    assert!(from.port() >= LOCAL_FROM, "local port {}", from.port());
    // Our stack learned the peer's MAC from the kernel, which resolved it:
    // the kernel's table in our namespace has the peer.
    let neigh = lab.our_neighbours();
    assert!(
        neigh.contains(&format!("{} ", lab.peer_ip)) && neigh.contains("lladdr"),
        "{neigh}"
    );
}

/// `iwarp-serve` in namespace `ns` on `iface` with `args`.
fn serve(ns: &Netns, iface: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args([
        "netns",
        "exec",
        ns.name(),
        env!("CARGO_BIN_EXE_iwarp-serve"),
    ])
    .args(["--iface", iface, "--share-address"])
    .args(args);
    c
}

#[test]
fn iwarp_server_and_client_each_on_their_kernels_address() {
    let Some(lab) = Lab::new() else { return };
    let server_ip = format!("{}/24", lab.shared_ip);
    let mut server = serve(
        &lab.ours,
        lab.veth.name(End::A),
        &["--ip", &server_ip, "--region-mib", "1", "--seconds", "60"],
    )
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()
    .unwrap();
    // The client: our stack on the peer kernel's own address too.
    let client_ip = format!("{}/24", lab.peer_ip);
    let shared = lab.shared_ip.to_string();
    let mut client = None;
    for _ in 0..40 {
        let out = serve(
            &lab.peer,
            lab.veth.name(End::B),
            &["--ip", &client_ip, "--connect", &shared, "--blocks", "128"],
        )
        .output()
        .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        // Refused: the server's XDP program is not attached yet and the
        // kernel answered the SYN with a RST.
        if !out.status.success() && err.contains("refused") {
            std::thread::sleep(Duration::from_millis(250));
            continue;
        }
        client = Some((
            out.status,
            String::from_utf8_lossy(&out.stdout).into_owned(),
            err,
        ));
        break;
    }
    let (status, stdout, stderr) = client.expect("the client connected within 40 tries");
    // Stop the server (SIGTERM) before judging, so that it never outlives
    // the test.
    let _ = Command::new("kill")
        .args(["-s", "TERM", &server.id().to_string()])
        .status();
    let deadline = Instant::now() + Duration::from_secs(30);
    while server.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = server.kill();
    let out = server.wait_with_output().unwrap();
    let server_out = String::from_utf8_lossy(&out.stdout);
    assert!(
        status.success(),
        "client: {status}
{stdout}
{stderr}
server:
{server_out}"
    );
    assert!(
        stdout.contains("client: 128 blocks written and read back"),
        "{stdout}"
    );
    assert!(
        server_out.contains(&format!("accepted {}", lab.peer_ip)),
        "{server_out}"
    );
    // `ip netns exec` passes the exit status on.
    assert_eq!(
        out.status.code(),
        Some(0),
        "server:
{server_out}"
    );
}

#[test]
fn share_address_flags_are_checked() {
    let bin = env!("CARGO_BIN_EXE_tlnc");
    let code = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap()
            .code()
    };
    let base = ["--iface", "lo", "--ip", "10.0.0.1/24", "--listen", "1"];
    // --local-ports-from needs --share-address and a port from 1024.
    let mut a = base.to_vec();
    a.extend_from_slice(&["--local-ports-from", "2000"]);
    assert_eq!(code(&a), Some(2));
    let mut a = base.to_vec();
    a.extend_from_slice(&["--share-address", "--local-ports-from", "80"]);
    assert_eq!(code(&a), Some(2));
}

/// `tlnc --share-address --connect` as the image's user (uid 10001, file
/// capabilities permitted only, as in deploy/Dockerfile), with `caps` in
/// its bounding set as a container's `--cap-add` list puts them there;
/// the kernel's neighbour table in our namespace emptied first.
fn non_root_connect(lab: &Lab, tlnc: &Path, caps: &str, port: u16, timeout_s: u32) -> Output {
    lab.ours.ip(&["neigh", "flush", "all"]).unwrap();
    let bounding = format!("-all,{caps}");
    let ip = format!("{}/24", lab.shared_ip);
    let peer = format!("{}:{port}", lab.peer_ip);
    let timeout = timeout_s.to_string();
    let tlnc = tlnc.to_str().unwrap();
    let child = Command::new("ip")
        .args(["netns", "exec", lab.ours.name(), "setpriv"])
        .args(["--reuid", "10001", "--regid", "10001", "--clear-groups"])
        .args(["--bounding-set", &bounding, tlnc])
        .args(["--iface", lab.veth.name(End::A), "--ip", &ip])
        .args(["--share-address", "--connect", &peer, "--timeout", &timeout])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    finish(child, &data(0x66, 10_000))
}

/// The capability answer of deploy/README.md: on a shared address a
/// non-root process needs CAP_NET_ADMIN besides SYS_ADMIN, NET_RAW and
/// IPC_LOCK, for the neighbour requests (RTM_NEWNEIGH) the device makes
/// for the stack. Without it the device warns at open and a connection to
/// a neighbour the kernel does not know yet times out; with it the same
/// connection works.
#[test]
fn as_non_root_a_shared_address_needs_net_admin_to_reach_new_neighbours() {
    let Some(lab) = Lab::new() else { return };
    let setcap = ["/usr/sbin/setcap", "/sbin/setcap", "/usr/bin/setcap"]
        .into_iter()
        .find(|p| Path::new(p).exists());
    let Some(setcap) = setcap else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI without setcap (libcap2-bin)"
        );
        println!("SKIP: no setcap (libcap2-bin)");
        return;
    };
    // A copy of tlnc with the image's file capabilities, where uid 10001
    // can run it.
    let dir = std::env::temp_dir().join(format!("iwarp-caps-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    struct Gone(PathBuf);
    impl Drop for Gone {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
    let _gone = Gone(dir.clone());
    let tlnc = dir.join("tlnc");
    std::fs::copy(env!("CARGO_BIN_EXE_tlnc"), &tlnc).unwrap();
    use std::os::unix::fs::PermissionsExt;
    for p in [&dir, &tlnc] {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let st = Command::new(setcap)
        .args([
            "cap_net_admin,cap_net_raw,cap_bpf,cap_sys_admin,cap_ipc_lock+p",
            tlnc.to_str().unwrap(),
        ])
        .status()
        .unwrap();
    assert!(st.success(), "setcap: {st}");
    const THREE: &str = "+sys_admin,+net_raw,+ipc_lock";

    // Without NET_ADMIN: a warning that names it, and no connection (the
    // kernel never resolves the peer, so no SYN leaves).
    let _listening = Lab::kernel_listener(&lab.peer, lab.peer_ip, 9101);
    let out = non_root_connect(&lab, &tlnc, THREE, 9101, 5);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("without CAP_NET_ADMIN") && stderr.contains("timed out"),
        "{stderr}"
    );
    assert!(
        !lab.our_neighbours().contains("lladdr"),
        "{}",
        lab.our_neighbours()
    );

    // With NET_ADMIN: the same connection works, and no warning.
    let server = Lab::kernel_listener(&lab.peer, lab.peer_ip, 9102);
    let server_side = std::thread::spawn(move || {
        let (s, _) = server.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let got = read_all(&s);
        (&s).write_all(b"bye").unwrap();
        got
    });
    let out = non_root_connect(&lab, &tlnc, &format!("{THREE},+net_admin"), 9102, 30);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    assert!(!stderr.contains("CAP_NET_ADMIN"), "{stderr}");
    assert_eq!(server_side.join().unwrap(), data(0x66, 10_000));
    assert_eq!(out.stdout, b"bye");
}
