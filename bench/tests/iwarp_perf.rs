//! `iwarp-perf` over the simulated link: the perftest header, numeric rows,
//! and the .hgrm / JSON / PNG files. No timing thresholds.

use std::path::{Path, PathBuf};
use std::process::Command;

fn run(args: &[&str], out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_iwarp-perf"))
        .args(args)
        .arg("--out")
        .arg(out)
        .output()
        .expect("run iwarp-perf");
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "iwarp-perf {args:?} failed\nstdout:\n{stdout}\nstderr:\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

fn out_dir(name: &str) -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The row after `header`: `cols` numbers, the first equal to `bytes`.
fn row_after(stdout: &str, header: &str, cols: usize, bytes: f64) -> Vec<f64> {
    let mut lines = stdout.lines().skip_while(|l| *l != header);
    assert!(lines.next().is_some(), "no header {header:?} in\n{stdout}");
    let row = lines.next().expect("a row after the header");
    let nums: Vec<f64> = row
        .split_whitespace()
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("not a number: {v:?} in {row:?}"))
        })
        .collect();
    assert_eq!(nums.len(), cols, "row {row:?}");
    assert_eq!(nums[0], bytes);
    assert!(nums.iter().all(|v| v.is_finite() && *v >= 0.0), "{row:?}");
    nums
}

/// Data lines of an .hgrm: value, percentile, cumulative count, ending at `count`.
fn check_hgrm(path: &Path, count: u64) {
    let text = std::fs::read_to_string(path).expect("hgrm file");
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().expect("header").split_whitespace().collect();
    assert_eq!(
        head,
        ["Value", "Percentile", "TotalCount", "1/(1-Percentile)"]
    );
    let rows: Vec<(f64, f64, u64)> = lines
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (
                f[0].parse().expect("a number"),
                f[1].parse().expect("a number"),
                f[2].parse().expect("a number"),
            )
        })
        .collect();
    assert!(rows.len() > 2, "{text}");
    assert!(rows
        .windows(2)
        .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1 && w[0].2 <= w[1].2));
    let last = rows.last().expect("a row");
    assert_eq!((last.1, last.2), (1.0, count), "{text}");
    assert!(text.contains("#[Max     ="), "{text}");
}

#[test]
fn send_lat_on_the_simulated_link() {
    let out = out_dir("perf_send_lat");
    let stdout = run(&["send_lat", "--sim", "-n", "200"], &out);
    let header = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";
    let row = row_after(&stdout, header, 9, 2.0);
    assert_eq!(row[1], 200.0);
    assert!(
        row[2] <= row[4] && row[4] <= row[3],
        "min <= typical <= max: {row:?}"
    );
    assert!(stdout.contains("no Linux baseline"), "{stdout}");
    check_hgrm(&out.join("send_lat_2_iwarp.hgrm"), 200);
    let png = std::fs::read(out.join("send_lat_2.png")).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let doc = json_file(&out.join("send_lat.json"));
    let r = &doc["results"][0];
    assert_eq!(r["test"], "send_lat");
    assert_eq!(r["iwarp"]["iterations"], 200);
    assert!(r["iwarp"]["p99_us"].as_f64().is_some());
    // In-loop is the default, and the title line says so.
    assert_eq!(doc["latency_path"], "in_loop");
    assert_eq!(r["path"], "in_loop");
    assert!(title(&stdout, "send_lat").contains("in-loop"), "{stdout}");
    // The plot lists the curves it draws (ours and the link's floor; no
    // Linux curve without a Linux run) on a log axis, and the run ends
    // with a one-line summary.
    let labels: Vec<&str> = r["png"]["curves"]
        .as_array()
        .expect("curves")
        .iter()
        .map(|c| c["label"].as_str().expect("label"))
        .collect();
    assert_eq!(
        labels,
        ["iWARP (ours, in-loop)", "floor of the link (no protocol)"]
    );
    assert!(r["png"]["y"].as_str().expect("y").contains("log10"), "{r}");
    assert!(r["floor"]["p50_us"].as_f64().expect("floor") > 0.0, "{r}");
    assert!(
        stdout.contains("summary: send_lat 2 B over sim: p50 "),
        "{stdout}"
    );
}

const LAT_HEADER: &str = " #bytes #iterations    t_min[usec]    t_max[usec]  t_typical[usec]    t_avg[usec]    t_stdev[usec]   99% percentile[usec]   99.9% percentile[usec]";

/// The title line of `test` (" TEST (...)").
fn title<'a>(stdout: &'a str, test: &str) -> &'a str {
    let head = format!(" {test} (");
    stdout
        .lines()
        .find(|l| l.starts_with(&head))
        .unwrap_or_else(|| panic!("no title line for {test} in\n{stdout}"))
}

/// A latency run: its row, .hgrm and JSON agree on `iters`; returns the
/// JSON summary.
fn check_lat(stdout: &str, out: &Path, test: &str, size: u32, iters: u64) -> serde_json::Value {
    let row = row_after(stdout, LAT_HEADER, 9, f64::from(size));
    assert_eq!(row[1], iters as f64);
    assert!(
        row[2] <= row[4] && row[4] <= row[3],
        "min <= typical <= max: {row:?}"
    );
    check_hgrm(&out.join(format!("{test}_{size}_iwarp.hgrm")), iters);
    let png = std::fs::read(out.join(format!("{test}_{size}.png"))).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    let doc = json_file(&out.join(format!("{test}.json")));
    assert_eq!(doc["results"][0]["test"], test);
    assert_eq!(doc["results"][0]["iwarp"]["iterations"], iters);
    doc
}

#[test]
fn write_and_read_lat_in_loop_on_the_simulated_link() {
    for test in ["write_lat", "read_lat"] {
        let out = out_dir(&format!("perf_{test}_in_loop"));
        let stdout = run(&[test, "--sim", "-n", "150", "-s", "256"], &out);
        let doc = check_lat(&stdout, &out, test, 256, 150);
        assert_eq!(doc["latency_path"], "in_loop");
        assert!(title(&stdout, test).contains("in-loop"), "{stdout}");
        if test == "write_lat" {
            // As perftest's: each end watches the last octet of the
            // peer's Write (the run fails unless the server answered
            // every iteration).
            assert_eq!(doc["results"][0]["write_lat"], "last_octet");
            assert!(
                title(&stdout, test).contains("watching the last octet"),
                "{stdout}"
            );
        }
    }
    // --doorbell: a 0-octet Send after each Write instead.
    let out = out_dir("perf_write_lat_doorbell");
    let stdout = run(
        &["write_lat", "--sim", "-n", "150", "-s", "1", "--doorbell"],
        &out,
    );
    let doc = check_lat(&stdout, &out, "write_lat", 1, 150);
    assert_eq!(doc["results"][0]["write_lat"], "doorbell");
    assert!(
        title(&stdout, "write_lat").contains("0-octet-Send doorbell"),
        "{stdout}"
    );
}

#[test]
fn write_lat_with_threads_on_the_simulated_link() {
    let out = out_dir("perf_write_lat_threads");
    let stdout = run(&["write_lat", "--sim", "-n", "150", "--threads"], &out);
    let doc = check_lat(&stdout, &out, "write_lat", 2, 150);
    assert_eq!(doc["latency_path"], "threads");
    assert_eq!(doc["results"][0]["path"], "threads");
    // Application threads drive their contexts (run to completion).
    assert_eq!(doc["polling"], "Inline");
    let t = title(&stdout, "write_lat");
    assert!(t.contains("threads") && !t.contains("in-loop"), "{t}");
    // Threads may sleep on the CQ: the Send doorbell tells them.
    assert_eq!(doc["results"][0]["write_lat"], "doorbell");
    // Spinning threads (--busy) watch the last octet, as the loops do.
    let out = out_dir("perf_write_lat_threads_busy");
    let stdout = run(
        &["write_lat", "--sim", "-n", "150", "--threads", "--busy"],
        &out,
    );
    let doc = check_lat(&stdout, &out, "write_lat", 2, 150);
    assert_eq!(doc["results"][0]["write_lat"], "last_octet");
    assert_eq!(doc["results"][0]["path"], "threads");
    // --loop-thread: the threads hand work to loop threads instead.
    let out = out_dir("perf_write_lat_threads_loop");
    let stdout = run(
        &[
            "write_lat",
            "--sim",
            "-n",
            "150",
            "--threads",
            "--loop-thread",
        ],
        &out,
    );
    let doc = check_lat(&stdout, &out, "write_lat", 2, 150);
    assert_eq!(doc["polling"], "Adaptive");
}

#[test]
fn send_lat_open_loop_in_loop_on_the_simulated_link() {
    let out = out_dir("perf_send_lat_rate");
    let stdout = run(&["send_lat", "--sim", "-n", "100", "--rate", "2000"], &out);
    let doc = check_lat(&stdout, &out, "send_lat", 2, 100);
    assert_eq!(doc["latency_path"], "in_loop");
    assert_eq!(doc["rate"], 2000.0);
    let t = title(&stdout, "send_lat");
    assert!(
        t.contains("open loop at 2000") && t.contains("in-loop"),
        "{t}"
    );
}

#[test]
fn write_bw_on_the_simulated_link() {
    let out = out_dir("perf_write_bw");
    // Long enough (~100 ms) for process CPU time, counted in 10 ms ticks,
    // to register: Gb/s per core is 0 for runs shorter than a tick.
    let stdout = run(&["write_bw", "--sim", "-n", "2000", "-s", "16384"], &out);
    let header = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   Gb/s per core";
    let row = row_after(&stdout, header, 6, 16384.0);
    assert_eq!(row[1], 2000.0);
    assert!(
        row[3] > 0.0 && row[2] >= row[3],
        "peak >= average > 0: {row:?}"
    );
    assert!(row[5] > 0.0, "Gb/s per core: {row:?}");
    check_hgrm(&out.join("write_bw_16384_iwarp.hgrm"), 2000);
    let doc = json_file(&out.join("write_bw.json"));
    let r = &doc["results"][0];
    assert_eq!(r["bytes"], 16384);
    assert_eq!(r["iwarp"]["iterations"], 2000);
    assert!(r["iwarp"]["bw_avg_mib_s"].as_f64().expect("number") > 0.0);
    assert_eq!(r["path"], "in_loop", "bandwidth runs in-loop by default");
    // MPA's CRC: asked for by both ends, and in force.
    assert_eq!(doc["mpa_crc"], true);
    assert_eq!(r["mpa_crc_negotiated"], true);
    assert!(stdout.contains("MPA CRC32c on each FPDU: on"), "{stdout}");
    // A bar chart of what ran (ours only here), compressed.
    let png = std::fs::read(out.join("write_bw_16384.png")).expect("png");
    assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
    assert!(png.len() < 100_000, "{} octets", png.len());
    assert_eq!(r["png"]["bars"].as_array().expect("bars").len(), 1, "{r}");
    assert!(
        stdout.contains("summary: write_bw 16384 B over sim: "),
        "{stdout}"
    );
}

/// `--no-crc`: neither end asks for MPA's CRC, and the MPA exchange
/// settles without it.
#[test]
fn no_crc_connects_without_mpa_crc() {
    let out = out_dir("perf_no_crc");
    let stdout = run(
        &["write_bw", "--sim", "-n", "100", "-s", "8192", "--no-crc"],
        &out,
    );
    assert!(stdout.contains("MPA CRC32c on each FPDU: off"), "{stdout}");
    let doc = json_file(&out.join("write_bw.json"));
    assert_eq!(doc["mpa_crc"], false);
    assert_eq!(doc["results"][0]["mpa_crc_negotiated"], false);
    assert_eq!(doc["results"][0]["iwarp"]["iterations"], 100);
}

#[test]
fn write_bw_with_threads_on_the_simulated_link() {
    let out = out_dir("perf_write_bw_threads");
    let stdout = run(
        &["write_bw", "--sim", "--threads", "-n", "100", "-s", "8192"],
        &out,
    );
    let header = " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]   Gb/s per core";
    let row = row_after(&stdout, header, 6, 8192.0);
    assert_eq!(row[1], 100.0);
    let doc = json_file(&out.join("write_bw.json"));
    assert_eq!(doc["results"][0]["path"], "threads");
}

/// The JSON document `iwarp-perf` wrote at `path`.
fn json_file(path: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("json")).expect("json file")
}

/// Run with `args` only (no `--out`); (exit code, stdout, stderr).
fn run_raw(args: &[&str]) -> (Option<i32>, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_iwarp-perf"))
        .args(args)
        .output()
        .expect("run iwarp-perf");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn help_and_version_exit_0_and_usage_errors_exit_2_with_the_reason() {
    let (code, out, _) = run_raw(&["--help"]);
    assert_eq!(code, Some(0));
    for flag in [
        "--stats",
        "--iters",
        "--sim",
        "--ring-size",
        "--rto-min-ms",
        "--xdp-mode",
        "--queue",
        "--busy-poll-usecs",
        "--busy-poll-budget",
    ] {
        assert!(out.contains(flag), "{flag} in\n{out}");
    }
    let (code, out, _) = run_raw(&["-V"]);
    assert_eq!(code, Some(0));
    assert!(out.starts_with("iwarp-perf "), "{out}");
    for (args, reason) in [
        (&["write_lat", "--sim", "-n", "0"][..], "--iters"),
        (&["nosuchtest", "--sim"][..], "unknown test"),
        (&["write_bw", "--sim", "-s", "0"][..], "--size"),
        (&["send_lat", "--sim", "--rate=0"][..], "--rate"),
        (&["write_bw", "--sim", "--window", "0"][..], "--window"),
        (&["write_lat", "--sim", "--netns"][..], "--netns"),
        (
            &["write_lat", "--sim", "--verify-checksums"][..],
            "--verify-checksums is for --link memif",
        ),
        (&["write_lat", "--queue", "64"][..], "--queue"),
        (
            &["write_lat", "--busy-poll-budget", "8"][..],
            "--busy-poll-usecs",
        ),
        (
            &["write_lat", "--busy-poll-usecs", "0"][..],
            "--busy-poll-usecs",
        ),
        (&[][..], "TEST"),
    ] {
        let (code, out, err) = run_raw(args);
        assert_eq!(code, Some(2), "{args:?}: stdout {out} stderr {err}");
        assert!(err.contains(reason), "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?} ran: {out}");
    }
}

#[test]
fn stats_prints_both_contexts_counters() {
    let out = out_dir("stats");
    let stdout = run(&["send_lat", "--sim", "-n", "50", "--stats"], &out);
    let at = stdout.find("counters (--stats)").expect(&stdout);
    let tail = &stdout[at..];
    for part in [
        "server context (10.0.0.1):",
        "client context (10.0.0.2):",
        "tcp: delivered",
        "iface: rx_frames",
        "loop: rounds",
        "device: simulated link",
    ] {
        assert!(tail.contains(part), "{part:?} in\n{tail}");
    }
}

/// `write_bw --sim --queues 2 --connections 4 -n 300 -s 16384`, then `extra`.
fn queues_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "write_bw",
        "--sim",
        "--queues",
        "2",
        "--connections",
        "4",
        "-n",
        "300",
        "-s",
        "16384",
    ];
    a.extend_from_slice(extra);
    a
}

/// The per-connection table of a `--queues 2 --connections 4` run: each
/// connection on the loop `--queues` gives it at both ends (the client's
/// in turn, the server's on the same number), every one of its 300
/// messages done.
fn four_connections_on_two_loops(stdout: &str) {
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .skip_while(|l| !l.starts_with(" conn  client loop"))
        .skip(1)
        .take(4)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(rows.len(), 4, "{stdout}");
    for (k, r) in rows.iter().enumerate() {
        let loop_no = (k % 2).to_string();
        assert_eq!(r[0], k.to_string(), "{stdout}");
        assert_eq!(
            (r[1], r[2]),
            (loop_no.as_str(), loop_no.as_str()),
            "{stdout}"
        );
        assert_eq!(r[3], "300", "{stdout}");
    }
}

/// `--queues N --core B`: the server's loops on CPUs B .. B+N-1, the
/// client's on B+N .. B+2N-1, the Linux flows on the same CPUs, and the
/// placement in the JSON; a placement the machine has too few CPUs for is
/// refused with the CPUs it needs. Each aggregate line carries its
/// message rate.
#[test]
fn queues_pinned_from_a_first_core() {
    let ncpu = std::thread::available_parallelism().map_or(1, |n| n.get());
    let (code, _, err) = run_raw(&["write_bw", "--sim", "--queues", "100", "--core", "0"]);
    assert_ne!(code, Some(0));
    assert!(
        err.contains("--queues 100 --core 0: the two ends' 200 loops need CPUs 0 to 199"),
        "{err}"
    );
    if ncpu < 2 {
        return;
    }
    let out = out_dir("queues_core");
    let stdout = run(
        &[
            "write_bw",
            "--sim",
            "--queues",
            "1",
            "--connections",
            "2",
            "--core",
            "0",
            "-n",
            "200",
            "-s",
            "16384",
        ],
        &out,
    );
    assert!(
        stdout.contains("server loops on CPUs 0..=0, client loops on 1..=1"),
        "{stdout}"
    );
    assert!(
        stdout.contains("flow i's two threads on the CPUs of loop i"),
        "{stdout}"
    );
    let ours = stdout
        .lines()
        .find(|l| l.contains("iWARP (ours)"))
        .expect("our aggregate line");
    assert!(ours.contains("(400 messages in"), "{ours}");
    assert!(ours.contains(" M messages/s"), "{ours}");
    let json = std::fs::read_to_string(out.join("write_bw_queues1.json")).expect("json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    assert_eq!(v[0]["cores"], serde_json::json!([0, 1]));
    assert!(v[0]["iwarp"]["msgs_per_s"]
        .as_f64()
        .is_some_and(|r| r > 0.0));
}

/// `--queues 2 --connections 4`: four connections over two loops per end,
/// two on each (the client's in turn, the server's on the same loop
/// number), every message done, each loop's share printed, and the Linux
/// baseline with two flows over loopback in the same run.
#[test]
fn write_bw_over_two_queues_on_the_simulated_link() {
    let out = out_dir("queues");
    let stdout = run(&queues_args(&[]), &out);
    four_connections_on_two_loops(&stdout);
    for who in ["client", "server"] {
        for i in 0..2 {
            let l = format!(" {who} loop {i}: connections 2 ");
            assert!(stdout.contains(&l), "{l:?} in\n{stdout}");
        }
    }
    assert!(stdout.contains("(1200 messages in"), "{stdout}");
    assert!(
        stdout.contains("Linux TCP over loopback, 2 flow(s)"),
        "{stdout}"
    );
    // 300 messages per flow, doubled until a run lasts half a second
    // (at most 16 times as many).
    let linux = stdout
        .lines()
        .find(|l| l.contains("Linux TCP over loopback, 2 flow(s)"))
        .expect("the Linux line");
    let msgs: u64 = linux
        .split("aggregate (")
        .nth(1)
        .and_then(|t| t.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no message count in {linux:?}"));
    assert!(
        [600, 1200, 2400, 4800, 9600].contains(&msgs),
        "{msgs} in {linux:?}"
    );
    let json = std::fs::read_to_string(out.join("write_bw_queues2.json")).expect("json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    assert_eq!(v[0]["iwarp"]["messages"], 1200);
    assert_eq!(v[0]["iwarp"]["client_loops"][1]["connections"], 2);
    // Only write_bw.
    let (code, _, err) = run_raw(&["write_lat", "--sim", "--queues", "2"]);
    assert_ne!(code, Some(0));
    assert!(err.contains("write_bw only"), "{err}");
}

/// `--queues 2 --connections 4 --threads`: the same four connections over
/// two inline loops per end, each end on an application thread of its own
/// that drives the loop its QP is on: every message done, each connection
/// on the loops `--queues` gives it, both loops of each end used.
#[test]
fn write_bw_over_two_queues_from_application_threads() {
    let out = out_dir("queues_threads");
    let stdout = run(&queues_args(&["--threads"]), &out);
    assert!(
        stdout.contains("from application threads that drive the loops themselves (inline)"),
        "{stdout}"
    );
    four_connections_on_two_loops(&stdout);
    // Both loops of each end carried their two connections' frames.
    for who in ["client", "server"] {
        for i in 0..2 {
            let prefix = format!(" {who} loop {i}: connections 2 ");
            let line = stdout
                .lines()
                .find(|l| l.starts_with(&prefix))
                .unwrap_or_else(|| panic!("{prefix:?} in\n{stdout}"));
            let rx: u64 = line
                .split("rx_tcp ")
                .nth(1)
                .and_then(|t| t.split_whitespace().next())
                .and_then(|n| n.parse().ok())
                .unwrap_or_else(|| panic!("rx_tcp in {line:?}"));
            assert!(rx > 0, "{line}");
        }
    }
    assert!(stdout.contains("(1200 messages in"), "{stdout}");
    let json = std::fs::read_to_string(out.join("write_bw_queues2.json")).expect("json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    assert_eq!(v[0]["iwarp"]["messages"], 1200);
    assert_eq!(v[0]["path"], "threads");
    assert_eq!(v[0]["polling"], "Inline");
}

/// `--queues 2 --connections 4 --transport sctp`: four iWARP-over-SCTP
/// connections over two loops per end, two on each (the client's in
/// turn, the server's on the same loop number), every message done, the
/// SCTP counters of both loops summed.
#[test]
fn write_bw_over_sctp_on_two_queues_on_the_simulated_link() {
    let out = out_dir("queues_sctp");
    let stdout = run(&queues_args(&["--transport", "sctp"]), &out);
    assert!(
        stdout.contains("write_bw over SCTP over the simulated link"),
        "{stdout}"
    );
    four_connections_on_two_loops(&stdout);
    for who in ["client", "server"] {
        let l = format!(" {who} SCTP, all loops: connections 4 ");
        assert!(stdout.contains(&l), "{l:?} in\n{stdout}");
    }
    assert!(stdout.contains("(1200 messages in"), "{stdout}");
    let json = std::fs::read_to_string(out.join("write_bw_queues2.json")).expect("json");
    let v: serde_json::Value = serde_json::from_str(&json).expect("valid json");
    assert_eq!(v[0]["iwarp"]["messages"], 1200);
    assert_eq!(v[0]["transport"], "SCTP");
}

/// `--stages` in a build without the `stages` feature: refused with the
/// way to build one (exit 2), before any test runs.
#[cfg(not(feature = "stages"))]
#[test]
fn stages_without_the_feature_is_refused() {
    let (code, out, err) = run_raw(&["write_lat", "--sim", "-n", "100", "--stages"]);
    assert_eq!(code, Some(2), "stdout:\n{out}\nstderr:\n{err}");
    assert!(err.contains("--features stages"), "{err}");
    assert!(!out.contains("running"), "ran a test:\n{out}");
}

/// `--stages` (`cargo test -p iwarp-bench --features stages`): each of the
/// two loops times nearly every hop of a write_lat run (its first Write
/// and the setup's rounds aside), stage by stage in order, each stage's
/// median at most its 90th percentile and the hop's median above zero.
#[cfg(feature = "stages")]
#[test]
fn stages_times_each_loops_hops() {
    let out = out_dir("stages");
    let stdout = run(
        &[
            "write_lat",
            "-s",
            "64",
            "-n",
            "2000",
            "--sim",
            "--busy",
            "--stages",
        ],
        &out,
    );
    let report: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.starts_with("where a hop's time goes"))
        .collect();
    let loops: Vec<usize> = report
        .iter()
        .enumerate()
        .filter(|(_, l)| l.starts_with("loop thread"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(loops.len(), 2, "two loops in\n{stdout}");
    for &i in &loops {
        let hops: u64 = report[i]
            .split(" (")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no hop count in {:?}", report[i]));
        assert!(
            (1990..=2001).contains(&hops),
            "{hops} hops in {:?}",
            report[i]
        );
        let names: Vec<&str> = report[i + 1..i + 9]
            .iter()
            .map(|l| l.split("  ").find(|s| !s.is_empty()).unwrap_or("").trim())
            .collect();
        assert_eq!(
            names,
            [
                "round start to frame",
                "receive",
                "first poll",
                "posts taken",
                "to transmit",
                "transmit",
                "publish",
                "hop"
            ],
            "{stdout}"
        );
        for (k, l) in report[i + 1..i + 9].iter().enumerate() {
            let nums: Vec<u64> = l
                .split(|c: char| !c.is_ascii_digit())
                .filter(|s| !s.is_empty())
                .map(|s| s.parse().unwrap())
                .collect();
            let [p50, p90] = nums[..] else {
                panic!("not p50 / p90: {l:?}")
            };
            assert!(p50 <= p90, "{l:?}");
            if k == 7 {
                assert!(p50 > 0, "a hop of no time: {l:?}");
            }
        }
    }
}
