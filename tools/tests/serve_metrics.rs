//! `iwarp-serve --sim`: the server and its built-in client in one process;
//! scrape `/metrics` over kernel TCP and check that the counters move.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Kills the server when the test ends, passing or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn get(addr: &str, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the stats endpoint");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").expect("send the request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read the response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("a header end");
    (head.to_owned(), body.to_owned())
}

/// The value of the sample line that starts with `prefix` (name and labels).
fn value(body: &str, prefix: &str) -> u64 {
    body.lines()
        .find(|l| l.starts_with(prefix) && !l.starts_with('#'))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no sample {prefix} in:\n{body}"))
}

#[test]
fn sim_server_serves_metrics_that_move() {
    let child = Command::new(env!("CARGO_BIN_EXE_iwarp-serve"))
        .args([
            "--sim",
            "--region-mib",
            "1",
            "--stats-addr",
            "127.0.0.1:0",
            "--seconds",
            "120",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start iwarp-serve");
    let mut server = Server(child);
    let mut out = BufReader::new(server.0.stdout.take().expect("piped stdout"));
    let mut addr = None;
    let mut accepted = false;
    let mut line = String::new();
    // The banner, the stats address and the accept come first (bounded).
    for _ in 0..10 {
        line.clear();
        if out.read_line(&mut line).expect("read stdout") == 0 {
            break;
        }
        if let Some(a) = line.trim().strip_prefix("stats: http://") {
            addr = Some(a.trim_end_matches("/metrics").to_owned());
        }
        if line.contains("accepted 10.0.0.2") {
            accepted = true;
            break;
        }
    }
    let addr = addr.expect("the server prints its stats address");
    assert!(accepted, "the built-in client connected");

    let (head, first) = get(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert_eq!(value(&first, "iwarp_listeners "), 1);
    assert_eq!(value(&first, "iwarp_qps "), 1);
    assert!(
        first.contains("iwarp_device_info{kind=\"sim\"} 1"),
        "{first}"
    );

    // Scrape until the QP's placed octets and the interface's frames have
    // grown past the first scrape (bounded: at most 50 scrapes).
    let placed = "iwarp_qp_bytes_placed_total{qp=";
    let mut moved = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let (_, now) = get(&addr, "/metrics");
        if value(&now, placed) > value(&first, placed)
            && value(&now, "iwarp_iface_rx_frames_total ")
                > value(&first, "iwarp_iface_rx_frames_total ")
            && value(&now, "iwarp_qp_fpdus_tx_total{qp=")
                > value(&first, "iwarp_qp_fpdus_tx_total{qp=")
        {
            moved = true;
            break;
        }
    }
    assert!(moved, "counters did not move in 50 scrapes");

    let (head, _) = get(&addr, "/nothing");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    let (head, _) = get(&addr, "/metricsx");
    assert!(head.starts_with("HTTP/1.1 404"), "{head}");
    // `server` drops here: the test stops the server itself.
}

#[test]
fn usage_errors_exit_2_and_help_exits_0() {
    let bin = env!("CARGO_BIN_EXE_iwarp-serve");
    let code = |args: &[&str]| {
        Command::new(bin)
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("run iwarp-serve")
            .code()
    };
    assert_eq!(code(&["--help"]), Some(0));
    assert_eq!(code(&["-V"]), Some(0));
    assert_eq!(code(&[]), Some(2));
    assert_eq!(code(&["--sim", "--port", "0"]), Some(2));
    assert_eq!(code(&["--sim", "--region-mib", "0"]), Some(2));
    assert_eq!(code(&["--sim", "--iface", "eth0"]), Some(2));
    assert_eq!(code(&["--iface", "eth0"]), Some(2));
}
