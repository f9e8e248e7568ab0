//! memif, the kernel-free link: `iwarp-perf --link memif` (both contexts
//! in one process, with the link's ping-pong floor printed beside ours) on
//! our own memif and on DPDK's `net_memif` (`--memif-driver dpdk`), and
//! perftest mode across two processes sharing one memif socket. No timing
//! thresholds. Where the build has no DPDK, the DPDK cases say so and
//! pass, except under CI, where `scripts/deps.sh --test` installs it.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn dpdk_or_skip() -> bool {
    if iwarp::dpdk::AVAILABLE {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "CI without DPDK: scripts/deps.sh --test installs libdpdk-dev"
    );
    eprintln!("SKIP: built without DPDK (install libdpdk-dev)");
    false
}

fn perf() -> Command {
    Command::new(env!("CARGO_BIN_EXE_iwarp-perf"))
}

/// `iwarp-perf ARGS [--out OUT]`, which must succeed: its standard output.
fn run_ok(args: &[&str], out: Option<&std::path::Path>) -> String {
    let mut c = perf();
    c.args(args);
    if let Some(dir) = out {
        c.arg("--out").arg(dir);
    }
    let o = c.output().expect("run iwarp-perf");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "iwarp-perf {} failed\n{stdout}\n{}",
        args.join(" "),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// The numbers of the first row after the perftest-style header.
fn first_row(stdout: &str) -> Vec<f64> {
    let mut lines = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("#bytes"));
    assert!(lines.next().is_some(), "no header in\n{stdout}");
    let row = lines.next().expect("a row after the header");
    row.split_whitespace()
        .take_while(|v| !v.starts_with("<-"))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("not a number: {v:?} in {row:?}"))
        })
        .collect()
}

/// The drivers this build can run: ours always, DPDK's where it is in.
fn drivers() -> Vec<&'static str> {
    let mut v = vec!["ours"];
    if dpdk_or_skip() {
        v.push("dpdk");
    }
    v
}

#[test]
fn iwarp_perf_write_lat_and_write_bw_over_memif() {
    for driver in drivers() {
        write_lat_and_write_bw_over_memif(driver);
    }
}

fn write_lat_and_write_bw_over_memif(driver: &str) {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("memif_perf");
    for (test, cols) in [("write_lat", 9), ("write_bw", 6)] {
        let stdout = run_ok(
            &[
                test,
                "--link",
                "memif",
                "--memif-driver",
                driver,
                "-n",
                "2000",
            ],
            Some(&out),
        );
        let over = if driver == "ours" {
            "over our memif"
        } else {
            "over DPDK memif"
        };
        assert!(stdout.contains(over), "{stdout}");
        // Both ends are ours on shared memory: the link is trusted.
        assert!(
            stdout.contains("link checksums (TCP, SCTP CRC32c): not computed"),
            "{stdout}"
        );
        let row = first_row(&stdout);
        assert_eq!(row.len(), cols, "{stdout}");
        assert_eq!(row[1], 2000.0, "every iteration done: {stdout}");
        if test == "write_lat" {
            // The floor of the same link, and our ratio to it.
            assert!(stdout.contains("<- floor of this link (memif"), "{stdout}");
            assert!(stdout.contains("ours over the floor: p50"), "{stdout}");
            let json: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(out.join("write_lat.json")).expect("json"),
            )
            .expect("valid JSON");
            assert_eq!(json["link"], "memif");
            assert_eq!(json["memif_driver"], driver);
            assert_eq!(json["link_checksums"], "trusted");
            let r = &json["results"][0];
            assert!(
                r["floor"]["p50_us"].as_f64().expect("floor p50") > 0.0,
                "{r}"
            );
            assert!(r["ratio_ours_over_floor"]["p50"].as_f64().expect("ratio") > 0.0);
        }
    }
}

/// The demo's memif part (`./demo.sh` runs `iwarp-perf demo --link
/// memif`): both tests, their summaries, and the JSON naming the link.
#[test]
fn the_demo_runs_over_memif() {
    // Our memif: no DPDK needed.
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("memif_demo");
    let stdout = run_ok(&["demo", "--link", "memif", "-n", "300"], Some(&out));
    for line in [
        "summary: write_lat 64 B over memif: ",
        "summary: write_bw 65536 B over memif: ",
    ] {
        assert!(stdout.contains(line), "{line} in\n{stdout}");
    }
    let json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("demo.json")).expect("demo.json"))
            .expect("valid JSON");
    assert_eq!(json["link"], "memif");
    assert_eq!(json["memif_driver"], "ours");
    let tests: Vec<&str> = json["results"]
        .as_array()
        .expect("results")
        .iter()
        .filter_map(|r| r["test"].as_str())
        .collect();
    assert_eq!(tests, ["write_lat", "write_bw"]);
}

/// perftest mode's server and client in two processes on one memif socket:
/// both finish every iteration and print their row, with TCP checksums
/// (write_lat) and on a trusted link (write_bw, `--trusted-link`). Both
/// on our memif, then a server on DPDK's with a client on ours.
#[test]
fn perftest_mode_across_two_processes_over_memif() {
    let mut pairs = vec![("ours", "ours")];
    if dpdk_or_skip() {
        pairs.push(("dpdk", "ours"));
    }
    for (server, client) in pairs {
        perftest_mode_across_two_processes(server, client);
    }
}

fn perftest_mode_across_two_processes(server_driver: &str, client_driver: &str) {
    let dir = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("memif_two");
    let _ = std::fs::create_dir_all(&dir);
    let sock = dir.join("link.sock");
    let _ = std::fs::remove_file(&sock);
    for (test, size) in [("write_lat", "64"), ("write_bw", "65536")] {
        let common = |ip: &str, driver: &str| {
            let mut c = perf();
            c.args([
                test, "-R", "-n", "500", "-s", size, "-p", "18515", "--ip", ip,
            ])
            .arg("--memif-socket")
            .arg(&sock)
            .args(["--memif-driver", driver])
            // write_bw with checksums neither computed nor checked
            // (`--trusted-link`, both sides), write_lat with them.
            .args((test == "write_bw").then_some("--trusted-link"))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
            c
        };
        let server = common("10.80.0.1/24", server_driver)
            .spawn()
            .expect("server");
        // The server creates the socket; the client connects to it.
        let t0 = Instant::now();
        while !sock.exists() && t0.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(20));
        }
        let client = common("10.80.0.2/24", client_driver)
            .arg("10.80.0.1")
            .spawn()
            .expect("client");
        // Both reaped (bounded) before any assertion: a failed client
        // must not leave its server waiting.
        let outputs = [("client", client), ("server", server)]
            .map(|(who, child)| (who, wait_bounded(child, Duration::from_secs(120))));
        for (who, o) in outputs {
            let stdout = String::from_utf8_lossy(&o.stdout);
            assert!(
                o.status.success(),
                "{test} {who} ({server_driver} server, {client_driver} client) failed\n{stdout}\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
            let row = first_row(&stdout);
            assert_eq!(row[0], size.parse::<f64>().expect("size"), "{stdout}");
            assert!(row.iter().all(|v| v.is_finite() && *v >= 0.0), "{stdout}");
        }
        let _ = std::fs::remove_file(&sock);
    }
}

/// The child's output, killing it first if it runs past `limit` (a server
/// whose client never came would wait for ever).
fn wait_bounded(mut child: std::process::Child, limit: Duration) -> std::process::Output {
    let t0 = Instant::now();
    while child.try_wait().expect("try_wait").is_none() && t0.elapsed() < limit {
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    child.wait_with_output().expect("wait")
}

/// The `N` after `key ` in `line`.
fn field(line: &str, key: &str) -> u64 {
    let mut it = line.split_whitespace();
    while let Some(w) = it.next() {
        if w == key {
            if let Some(v) = it.next().and_then(|v| v.parse().ok()) {
                return v;
            }
        }
    }
    panic!("no {key} in {line:?}")
}

/// Jumbo frames over memif (`--mtu 9000`): the port is opened with ring
/// buffers that hold a whole frame, every frame one end sends arrives as
/// one frame at the other, and a Write stream travels in frames far
/// longer than memif's default 2048-octet buffers.
#[test]
fn jumbo_frames_cross_memif_whole() {
    for driver in drivers() {
        jumbo_frames_cross_whole(driver);
    }
}

fn jumbo_frames_cross_whole(driver: &str) {
    let stdout = run_ok(
        &[
            "write_bw",
            "--link",
            "memif",
            "--memif-driver",
            driver,
            "--mtu",
            "9000",
            "-n",
            "300",
            "--stats",
            // The checksums computed over each jumbo frame, built in
            // pieces, and checked at the other end.
            "--verify-checksums",
        ],
        None,
    );
    assert!(
        stdout.contains("link checksums (TCP, SCTP CRC32c): computed and checked"),
        "{stdout}"
    );
    let row = first_row(&stdout);
    assert_eq!(row[1], 300.0, "every iteration done: {stdout}");
    for l in stdout.lines().filter(|l| l.starts_with("iface: ")) {
        assert_eq!(field(l, "rx_bad_checksum"), 0, "{stdout}");
        assert!(field(l, "rx_tcp") > 0, "{stdout}");
    }
    // Counters: the server context's device first, then the client's.
    let prefix = if driver == "ours" {
        "device: memif "
    } else {
        "device: DPDK net_memif"
    };
    let devices: Vec<&str> = stdout.lines().filter(|l| l.starts_with(prefix)).collect();
    assert_eq!(devices.len(), 2, "{stdout}");
    let (server, client) = (devices[0], devices[1]);
    let first = if driver == "ours" {
        "memif Server"
    } else {
        "net_memif0"
    };
    assert!(server.contains(first), "{stdout}");
    // Each way, what one end sent is what the other received, frame for
    // frame (2048-octet ring buffers chained per frame once arrived as
    // 2.5 to 27 times as many).
    assert_eq!(
        field(server, "rx_frames"),
        field(client, "tx_frames"),
        "{stdout}"
    );
    assert_eq!(
        field(client, "rx_frames"),
        field(server, "tx_frames"),
        "{stdout}"
    );
    if driver == "ours" {
        // Our client lends buffers that hold a whole 9014-octet frame.
        for d in [server, client] {
            assert_eq!(field(d, "rx_bad_desc"), 0, "{stdout}");
            assert_eq!(field(d, "rx_chained"), 0, "{stdout}");
            assert_eq!(field(d, "tx_chained"), 0, "{stdout}");
        }
    } else {
        assert_eq!(field(server, "rx_dropped"), 0, "{stdout}");
    }
    // 300 Writes of 64 KiB: about 2400 frames of 8960-octet segments,
    // where 1500-octet frames would take about 13,500 and 2048-octet ones
    // about 9,900.
    let delivered = stdout
        .lines()
        .find(|l| l.starts_with("tcp: delivered"))
        .map(|l| field(l, "delivered"))
        .expect("the server's tcp line");
    assert!(delivered >= 300 * 65536, "{stdout}");
    let frames = field(server, "rx_frames");
    assert!(
        frames * 4096 < delivered,
        "{frames} frames for {delivered} octets: not jumbo\n{stdout}"
    );
}

/// `iwarp-perf write_bw --link memif --memif-driver DRIVER --queues 2`: a
/// poll loop per memif queue pair at each end, the connections spread
/// over them (memif pairs queue i with the peer's queue i), every message
/// delivered; the header names whose memif (`label`).
fn write_bw_over_two_memif_queues(driver: &str, label: &str) {
    let out = std::path::PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("memif_queues_{driver}"));
    let stdout = run_ok(
        &[
            "write_bw",
            "--link",
            "memif",
            "--memif-driver",
            driver,
            "--queues",
            "2",
            "--connections",
            "4",
            "-n",
            "300",
        ],
        Some(&out),
    );
    assert!(stdout.contains(label), "{stdout}");
    // Two connections on each loop of each end, all 4 x 300 messages.
    for who in ["client", "server"] {
        for l in 0..2 {
            assert!(
                stdout.contains(&format!("{who} loop {l}: connections 2 ")),
                "{who} loop {l}\n{stdout}"
            );
        }
    }
    let ours = stdout
        .lines()
        .find(|l| l.contains("iWARP (ours), 2 loop(s) per end, 4 connection(s): "))
        .unwrap_or_else(|| panic!("no line of ours in\n{stdout}"));
    assert!(ours.contains("(1200 messages in"), "{ours}");
}

#[test]
fn iwarp_perf_write_bw_over_two_queue_pairs_of_dpdks_memif() {
    if !dpdk_or_skip() {
        return;
    }
    write_bw_over_two_memif_queues("dpdk", "over DPDK memif");
}

#[test]
fn iwarp_perf_write_bw_over_two_queue_pairs_of_our_memif() {
    write_bw_over_two_memif_queues("ours", "over our memif");
}
