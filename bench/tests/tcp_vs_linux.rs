//! `tcp-vs-linux`: clap's argument handling (help, version, unknown flags
//! and bad values exit 2 before any namespace is made), and one short run
//! (root) for the order and labels of its baselines; `netns_cleanup.rs`
//! starts and stops it.

use std::process::Command;

fn tcp_vs_linux(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_tcp-vs-linux"))
        .args(args)
        .output()
        .expect("run tcp-vs-linux")
}

/// clap's convention: `--help` and `--version` exit 0 on stdout; an unknown
/// flag exits 2 naming it.
#[test]
fn help_version_and_unknown_flag() {
    let o = tcp_vs_linux(&["--help"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: tcp-vs-linux"));
    let o = tcp_vs_linux(&["--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        concat!("tcp-vs-linux ", env!("CARGO_PKG_VERSION"), "\n")
    );
    let o = tcp_vs_linux(&["--frobnicate"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--frobnicate'"), "{err}");
}

/// Bad values are refused with the reason, not taken as defaults.
#[test]
fn bad_values_exit_2_with_the_reason() {
    for (args, why) in [
        (&["--iters", "x"][..], "invalid digit"),
        (&["--cwv", "maybe"][..], "on or off"),
        (
            &["--loss-permille", "1,2000"][..],
            "2000 is not in 0..=1000",
        ),
        (&["--netns-prefix", "toolong"][..], "1 to 4 characters"),
        (
            &["--netns-prefix", "A-"][..],
            "lower-case letters and digits",
        ),
    ] {
        let o = tcp_vs_linux(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

/// The ping-pong's first baseline is the Linux client spinning on a
/// non-blocking socket, as ours spins (like for like), and the ratio
/// line names it; the blocking client is printed beside, labelled. A
/// short run (root: it makes and removes its namespaces).
#[test]
fn the_ping_pong_compares_against_a_spinning_linux_client_first() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let o = tcp_vs_linux(&["--iters", "300", "--bulk-mib", "8"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let rows: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("Linux -> Linux") || l.starts_with("tcp-lite/AF_XDP"))
        .collect();
    assert_eq!(rows.len(), 3, "{out}");
    assert!(rows[0].starts_with("Linux -> Linux, spin "), "{out}");
    assert!(rows[1].starts_with("Linux -> Linux, block "), "{out}");
    assert!(rows[1].contains("the other way of waiting"), "{out}");
    let first_ratio = out
        .lines()
        .find(|l| l.starts_with("ratio ours/Linux"))
        .unwrap_or_else(|| panic!("no ratio line in\n{out}"));
    assert!(
        first_ratio.starts_with("ratio ours/Linux spinning (like for like"),
        "{out}"
    );
    // Every row has a positive p50 and bulk rate.
    for r in rows {
        let nums: Vec<f64> = r
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        assert!(nums.len() >= 5 && nums[0] > 0.0 && nums[4] > 0.0, "{r}");
    }
}
