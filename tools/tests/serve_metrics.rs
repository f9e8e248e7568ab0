//! `iwarp-serve --sim`: the server and its built-in client in one process;
//! scrape `/metrics` over kernel TCP, check that the counters move and that
//! a Prometheus/OpenMetrics parser reads the names we mean; and that slow,
//! idle and surplus clients of the endpoint neither block a scrape nor stay
//! connected past the deadline.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use openmetrics_parser::{OpenMetricsType, PrometheusType};

/// Kills the server when the test ends, passing or not.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Start `iwarp-serve --sim` with a stats endpoint on a free port (and
/// `extra` arguments); wait for the built-in client's connection. Returns
/// the server and the endpoint's address.
fn start(extra: &[&str]) -> (Server, String) {
    let child = Command::new(env!("CARGO_BIN_EXE_iwarp-serve"))
        .args([
            "--sim",
            "--region-mib",
            "1",
            "--stats-addr",
            "127.0.0.1:0",
            "--seconds",
            "240",
        ])
        .args(extra)
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
    // Keep reading stdout so that the server never blocks on a full pipe.
    std::thread::spawn(move || std::io::copy(&mut out, &mut std::io::sink()));
    (server, addr)
}

/// One request with `headers`; the response's head and body (read to the
/// end: the server closes after each response).
fn request(addr: &str, path: &str, headers: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).expect("connect to the stats endpoint");
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("read timeout");
    write!(s, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{headers}\r\n").expect("send the request");
    let mut resp = String::new();
    s.read_to_string(&mut resp).expect("read the response");
    let (head, body) = resp.split_once("\r\n\r\n").expect("a header end");
    (head.to_owned(), body.to_owned())
}

fn get(addr: &str, path: &str) -> (String, String) {
    request(addr, path, "")
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
    let (_server, addr) = start(&[]);
    let (head, first) = get(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    assert_eq!(value(&first, "iwarp_listeners "), 1);
    assert_eq!(value(&first, "iwarp_qps "), 1);
    assert!(
        first.contains("iwarp_device_info{kind=\"sim\"} 1"),
        "{first}"
    );

    // Scrape until the QP's placed bytes and the interface's frames have
    // grown past the first scrape (bounded: at most 50 scrapes).
    let placed = "iwarp_qp_placed_bytes_total{qp=";
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

/// Families every scrape of `--sim` holds, with their type, as named in
/// the Prometheus text format (counters with `_total`, the device's and
/// the build's `_info` as gauges).
const FAMILIES: &[(&str, &str)] = &[
    ("iwarp_build_info", "gauge"),
    ("iwarp_connections", "gauge"),
    ("iwarp_listeners", "gauge"),
    ("iwarp_stack_rx_no_socket_total", "counter"),
    ("iwarp_tcp_delivered_bytes_total", "counter"),
    ("iwarp_tcp_rto_retransmits_total", "counter"),
    ("iwarp_iface_rx_frames_total", "counter"),
    ("iwarp_loop_rounds_total", "counter"),
    ("iwarp_loop_pinned", "gauge"),
    ("iwarp_device_info", "gauge"),
    ("iwarp_qps", "gauge"),
    ("iwarp_qp_fpdus_tx_total", "counter"),
    ("iwarp_qp_fpdus_rx_total", "counter"),
    ("iwarp_qp_placed_bytes_total", "counter"),
    ("iwarp_qp_stream_tx_bytes_total", "counter"),
    ("iwarp_qp_stream_rx_bytes_total", "counter"),
    ("iwarp_qp_tcp_delivered_bytes_total", "counter"),
    ("iwarp_serve_accept_duration_seconds", "histogram"),
    ("iwarp_serve_scrape_duration_seconds", "histogram"),
    ("iwarp_completion_latency_seconds", "histogram"),
    ("iwarp_connection_setup_duration_seconds", "histogram"),
    ("iwarp_serve_http_connections", "gauge"),
    ("process_cpu_seconds_total", "counter"),
    ("process_resident_memory_bytes", "gauge"),
    ("process_open_fds", "gauge"),
    ("process_start_time_seconds", "gauge"),
];

#[test]
fn a_prometheus_parser_reads_both_formats() {
    let (_server, addr) = start(&[]);

    // The Prometheus text format (what curl gets).
    let (head, text) = get(&addr, "/metrics");
    assert!(head.contains("text/plain; version=0.0.4"), "{head}");
    let parsed = openmetrics_parser::prometheus::parse_prometheus(&text)
        .unwrap_or_else(|e| panic!("{e:?} in:\n{text}"));
    let types: HashMap<&str, String> = parsed
        .families
        .iter()
        .map(|(name, f)| {
            let t = match f.family_type {
                PrometheusType::Counter => "counter",
                PrometheusType::Gauge => "gauge",
                PrometheusType::Histogram => "histogram",
                PrometheusType::Summary => "summary",
                PrometheusType::Unknown => "untyped",
            };
            (name.as_str(), t.to_owned())
        })
        .collect();
    for &(name, kind) in FAMILIES {
        assert_eq!(
            types.get(name).map(String::as_str),
            Some(kind),
            "{name} in:\n{text}"
        );
    }
    for (name, kind) in &types {
        assert!(!name.contains("octets"), "{name}: octets are bytes");
        assert_eq!(kind == "counter", name.ends_with("_total"), "{name}");
        assert!(name.starts_with("iwarp_") || name.starts_with("process_"));
    }
    let accept = &parsed.families["iwarp_serve_accept_duration_seconds"];
    assert_eq!(accept.iter_samples().count(), 1, "one histogram");

    // OpenMetrics, as Prometheus asks for it.
    let (head, om) = request(
        &addr,
        "/metrics",
        "Accept: application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5\r\n",
    );
    assert!(head.contains("application/openmetrics-text"), "{head}");
    // openmetrics-parser 0.5 refuses a UNIT on histograms, which OpenMetrics
    // 1.0 allows (its own examples have one): check those lines here and
    // parse the rest.
    let histograms = [
        "iwarp_serve_accept_duration_seconds",
        "iwarp_serve_scrape_duration_seconds",
        "iwarp_completion_latency_seconds",
        "iwarp_connection_setup_duration_seconds",
    ];
    for h in histograms {
        let unit = format!("# UNIT {h} seconds\n");
        assert!(
            om.contains(&format!("# TYPE {h} histogram\n{unit}")),
            "{om}"
        );
    }
    let strict: String = om
        .split_inclusive('\n')
        .filter(|l| {
            !histograms
                .iter()
                .any(|h| l.starts_with(&format!("# UNIT {h} ")))
        })
        .collect();
    let parsed = openmetrics_parser::openmetrics::parse_openmetrics(&strict)
        .unwrap_or_else(|e| panic!("{e:?} in:\n{om}"));
    for (name, unit, kind) in [
        ("iwarp_qp_placed_bytes", "bytes", OpenMetricsType::Counter),
        (
            "iwarp_tcp_delivered_bytes",
            "bytes",
            OpenMetricsType::Counter,
        ),
        (
            "iwarp_serve_accept_duration_seconds",
            "", // stripped above
            OpenMetricsType::Histogram,
        ),
        ("process_cpu_seconds", "seconds", OpenMetricsType::Counter),
        ("iwarp_device", "", OpenMetricsType::Info),
        ("iwarp_build", "", OpenMetricsType::Info),
    ] {
        let f = parsed
            .families
            .get(name)
            .unwrap_or_else(|| panic!("no {name} in:\n{om}"));
        assert_eq!(f.family_type, kind, "{name}");
        assert_eq!(f.unit, unit, "{name}");
    }
}

/// Bounds that a loaded two-core machine keeps: a scrape of a healthy
/// endpoint takes milliseconds; the server's deadline is 15 s.
const PROMPT: Duration = Duration::from_secs(10);
const CLOSED_BY: Duration = Duration::from_secs(45);

/// Whether the server has closed `s` (EOF, after a response if it sent
/// one, or a reset), reading for up to `wait`.
fn closed(s: &mut TcpStream, wait: Duration) -> bool {
    s.set_read_timeout(Some(wait)).expect("read timeout");
    match s.read_to_end(&mut Vec::new()) {
        Ok(_) => true,
        Err(e) => !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
    }
}

#[test]
fn a_slow_client_blocks_no_scrape_and_is_cut_off() {
    let (_server, addr) = start(&[]);
    // A slow-loris: one byte of a request head a second, never done.
    let slow_addr = addr.clone();
    let slow = std::thread::spawn(move || {
        let mut s = TcpStream::connect(&slow_addr).expect("connect");
        let started = Instant::now();
        let head = b"GET /metrics HTTP/1.1\r\nHost: slow\r\nX-Slow: ";
        for &b in head.iter().chain(std::iter::repeat(&b'a')) {
            if s.write_all(&[b]).is_err() || closed(&mut s, Duration::from_secs(1)) {
                return Some(started.elapsed());
            }
            if started.elapsed() > CLOSED_BY {
                return None;
            }
        }
        None
    });
    std::thread::sleep(Duration::from_millis(2500));
    let t = Instant::now();
    let (head, body) = get(&addr, "/metrics");
    let took = t.elapsed();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("iwarp_qps 1"), "{body}");
    assert!(took < PROMPT, "a scrape beside a slow client took {took:?}");
    let cut = slow.join().expect("the slow client");
    let cut = cut.unwrap_or_else(|| panic!("the slow client still connected after {CLOSED_BY:?}"));
    // Cut by the header timeout (5 s) or the deadline (15 s), not at once.
    assert!(cut >= Duration::from_secs(3), "cut after {cut:?}");
}

#[test]
fn idle_clients_up_to_the_cap_block_no_scrape() {
    const CAP: usize = 16;
    let cap = CAP.to_string();
    let (_server, addr) = start(&["--stats-max-connections", &cap]);
    let opened = Instant::now();
    // All slots but one taken by clients that send nothing.
    let mut idle: Vec<TcpStream> = (0..CAP - 1)
        .map(|_| TcpStream::connect(&addr).expect("connect"))
        .collect();
    let t = Instant::now();
    let (head, body) = get(&addr, "/metrics");
    let took = t.elapsed();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(body.contains("iwarp_qps 1"), "{body}");
    assert!(
        took < PROMPT,
        "a scrape beside {} idle clients took {took:?}",
        CAP - 1
    );

    // The cap: one more idle client fills it, the next is refused at once
    // (unless the machine stalled long enough for the header timeout to
    // free slots meanwhile).
    idle.push(TcpStream::connect(&addr).expect("connect"));
    std::thread::sleep(Duration::from_millis(300));
    let mut over = TcpStream::connect(&addr).expect("connect");
    over.set_read_timeout(Some(PROMPT)).expect("read timeout");
    let mut resp = String::new();
    let _ = over.read_to_string(&mut resp);
    if opened.elapsed() < Duration::from_secs(4) {
        assert!(resp.starts_with("HTTP/1.1 503"), "over the cap: {resp:?}");
    }

    // The idle clients are closed by the deadline, and the endpoint serves
    // again.
    for s in &mut idle {
        let until = CLOSED_BY
            .saturating_sub(opened.elapsed())
            .max(Duration::from_millis(100));
        assert!(
            closed(s, until),
            "an idle client still connected after {CLOSED_BY:?}"
        );
    }
    let (head, _) = get(&addr, "/metrics");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    let (_, body) = get(&addr, "/metrics");
    assert!(
        value(&body, "iwarp_serve_http_refused_total ") >= 1,
        "{body}"
    );
}

#[test]
fn a_stats_port_in_use_is_a_setup_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("address").port();
    let out = Command::new(env!("CARGO_BIN_EXE_iwarp-serve"))
        .args(["--sim", "--region-mib", "1", "--seconds", "30"])
        .args(["--stats-addr", &format!("127.0.0.1:{port}")])
        .output()
        .expect("run iwarp-serve");
    assert_eq!(out.status.code(), Some(2));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!stdout.contains("listening"), "{stdout}");
    assert!(
        stderr.contains(&format!("stats endpoint 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(stderr.contains("in use"), "{stderr}");
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
    assert_eq!(code(&["--sim", "--transport", "udp"]), Some(2));
    // The kernel-shared address steers TCP alone: refused before the
    // interface is opened (so no such interface is needed).
    let shared = [
        "--iface",
        "no-such-if0",
        "--ip",
        "10.0.0.1/24",
        "--share-address",
        "--transport",
        "sctp",
    ];
    let out = Command::new(bin)
        .args(shared)
        .output()
        .expect("run iwarp-serve");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--share-address steers TCP only"),
        "{stderr}"
    );
}

/// `--transport sctp`: the built-in client Writes and Reads over DDP over
/// SCTP (RFC 5043), and `/metrics` carries the SCTP part's families, whose
/// packet counters move, beside the queue pair's.
#[test]
fn an_sctp_server_serves_its_sctp_metrics() {
    let (_server, addr) = start(&["--transport", "sctp"]);
    let (_, first) = get(&addr, "/metrics");
    assert_eq!(value(&first, "iwarp_qps "), 1);
    assert_eq!(value(&first, "iwarp_sctp_connections "), 1);
    assert_eq!(value(&first, "iwarp_connections "), 1);
    let parsed = openmetrics_parser::prometheus::parse_prometheus(&first)
        .unwrap_or_else(|e| panic!("{e:?} in:\n{first}"));
    for (name, kind) in [
        ("iwarp_sctp_rx_packets_total", PrometheusType::Counter),
        ("iwarp_sctp_tx_packets_total", PrometheusType::Counter),
        ("iwarp_sctp_retransmits_total", PrometheusType::Counter),
        ("iwarp_sctp_connections", PrometheusType::Gauge),
        ("iwarp_sctp_live_data_chunks_sent", PrometheusType::Gauge),
        ("iwarp_sctp_qp_held_bytes", PrometheusType::Gauge),
    ] {
        let f = parsed.families.get(name);
        assert_eq!(
            f.map(|f| &f.family_type),
            Some(&kind),
            "{name} in:\n{first}"
        );
    }
    let rx = "iwarp_sctp_rx_packets_total ";
    let placed = "iwarp_qp_placed_bytes_total{qp=";
    let mut moved = false;
    for _ in 0..50 {
        std::thread::sleep(Duration::from_millis(100));
        let (_, now) = get(&addr, "/metrics");
        if value(&now, rx) > value(&first, rx) && value(&now, placed) > value(&first, placed) {
            moved = true;
            break;
        }
    }
    assert!(
        moved,
        "SCTP packets and placed bytes did not move in 50 scrapes"
    );
    // Over MPA/TCP no SCTP part is made: no family of it.
    let (_mpa, addr) = start(&[]);
    let (_, text) = get(&addr, "/metrics");
    assert!(!text.contains("iwarp_sctp_"), "{text}");
}
