//! Debian's unmodified perftest on our libibverbs and librdmacm, both ends:
//! two namespaces joined by a veth, each end's stack on AF_XDP with its
//! own address, connected through librdmacm (`-R`), as a user runs it:
//!
//! ```text
//! IWARP_IFACE=veth0 IWARP_IP=10.0.0.1/24 scripts/verbs-run.sh ib_write_lat -R
//! IWARP_IFACE=veth1 IWARP_IP=10.0.0.2/24 scripts/verbs-run.sh ib_write_lat -R 10.0.0.1
//! ```

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use netns_harness::{End, NsPair};

/// The libraries, built once for all tests of this file.
fn libs() -> &'static PathBuf {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let out = Command::new(root.join("scripts/verbs-build.sh"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "verbs-build.sh: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        PathBuf::from(String::from_utf8(out.stdout).unwrap().trim())
    })
}

fn ready(tool: &str) -> bool {
    if netns_harness::skip_test_without_root() {
        return false;
    }
    if !Path::new(&format!("/usr/bin/{tool}")).exists() {
        netns_harness::skip_test(&format!(
            "/usr/bin/{tool} missing (apt-get install perftest)"
        ));
        return false;
    }
    true
}

/// Run `tool args` as server in one namespace and client in the other;
/// both must succeed. Returns the client's output.
fn pair(tool: &str, args: &[&str], port: u16) -> String {
    let net = NsPair::new("vpt").unwrap();
    for end in [End::A, End::B] {
        net.veth.disable_tx_offload(end).unwrap();
    }
    let (sip, cip) = (net.addr(1), net.addr(2));
    let lib = format!("LD_LIBRARY_PATH={}", libs().display());
    let port = port.to_string();
    let env = |end: End, ip: std::net::Ipv4Addr| {
        vec![
            "env".to_owned(),
            lib.clone(),
            format!("IWARP_IFACE={}", net.veth.name(end)),
            format!("IWARP_IP={ip}/24"),
        ]
    };
    let mut s: Vec<String> = env(End::A, sip);
    s.push(tool.into());
    s.extend(args.iter().map(|a| a.to_string()));
    s.extend(["-p".into(), port.clone()]);
    let mut c: Vec<String> = env(End::B, cip);
    c.push(tool.into());
    c.extend(args.iter().map(|a| a.to_string()));
    c.extend(["-p".into(), port, sip.to_string()]);
    let sref: Vec<&str> = s.iter().map(String::as_str).collect();
    let cref: Vec<&str> = c.iter().map(String::as_str).collect();
    let server = netns_harness::spawn_in(&net.a, &sref).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let client = netns_harness::run_in(&net.b, &cref, Duration::from_secs(60)).unwrap();
    let server = server.wait_timeout(Duration::from_secs(20)).unwrap();
    let text = |o: &std::process::Output| {
        format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        )
    };
    let (ct, st) = (text(&client), text(&server));
    assert!(
        client.status.success() && server.status.success(),
        "{tool} {args:?}\n--- client ({}):\n{ct}\n--- server ({}):\n{st}",
        client.status,
        server.status
    );
    ct
}

/// perftest's result line: `#bytes #iterations …` then one row of
/// numbers starting with the message size.
fn result_row(out: &str, size: &str) -> Vec<f64> {
    out.lines()
        .map(str::split_whitespace)
        .map(|w| w.collect::<Vec<_>>())
        .find(|w| {
            w.first() == Some(&size) && w.len() >= 3 && w.iter().all(|x| x.parse::<f64>().is_ok())
        })
        .unwrap_or_else(|| panic!("no result row for {size} B in\n{out}"))
        .iter()
        .map(|x| x.parse().unwrap())
        .collect()
}

#[test]
fn ib_write_lat_runs_unmodified_on_both_ends() {
    if !ready("ib_write_lat") {
        return;
    }
    let out = pair("ib_write_lat", &["-R", "-s", "64", "-n", "2000"], 18515);
    let row = result_row(&out, "64");
    // #bytes #iterations t_min t_max t_typical ...: every iteration ran
    // and took a positive time.
    assert_eq!(row[1], 2000.0, "{out}");
    assert!(row[2] > 0.0 && row[4] >= row[2], "{out}");
}
