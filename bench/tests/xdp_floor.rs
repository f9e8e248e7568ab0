//! `xdp-floor`: argument errors exit 2 with the reason; as root, one short
//! run across a veth receives frames and prints a numeric row. No timing
//! thresholds.

use std::process::Command;

fn xdp_floor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xdp-floor"))
        .args(args)
        .output()
        .expect("run xdp-floor")
}

#[test]
fn bad_arguments_exit_2_with_the_reason() {
    for (args, why) in [
        (&["--mtu", "20"][..], "20 is not in 68..=65000"),
        (&["--secs", "0"][..], "--secs"),
        (&["--frobnicate"][..], "unexpected argument '--frobnicate'"),
        (
            &["--pingpong", "--link", "carrier-pigeon"][..],
            "carrier-pigeon",
        ),
        (&["--netns-prefix", "toolong"][..], "1 to 4 characters"),
    ] {
        let o = xdp_floor(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let o = xdp_floor(&["--help"]);
    assert!(o.status.success());
    let help = String::from_utf8_lossy(&o.stdout);
    assert!(
        help.contains("Usage: xdp-floor") && help.contains("--pingpong"),
        "{help}"
    );
    let o = xdp_floor(&["--version"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).starts_with("xdp-floor "));
}

/// `--pingpong` over our memif and DPDK's (no root needed) and AF_XDP
/// (root): a numeric row per link, every round trip back.
#[test]
fn pingpong_prints_a_row_per_link() {
    let mut links = vec![("memif", "our memif")];
    if iwarp::dpdk::AVAILABLE {
        links.push(("dpdk-memif", "DPDK memif"));
    } else {
        assert!(std::env::var_os("CI").is_none(), "CI without DPDK");
    }
    if netns_harness::skip_reason().is_none() {
        links.push(("xdp", "AF_XDP (copy mode) veth"));
    }
    for (link, label) in links {
        let o = xdp_floor(&["--pingpong", "-n", "2000", "--link", link]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let row = out
            .lines()
            .find_map(|l| l.trim_start().strip_prefix(label))
            .unwrap_or_else(|| panic!("no {label} row in\n{out}"));
        let nums: Vec<f64> = row
            .split_whitespace()
            .map(|v| v.parse().expect("numbers"))
            .collect();
        // samples, p50, p99, p99.9, max, lost
        assert_eq!(nums.len(), 6, "{out}");
        assert_eq!(nums[0], 2000.0, "{out}");
        assert!(
            nums[1] > 0.0 && nums[1] <= nums[2] && nums[2] <= nums[3],
            "{out}"
        );
    }
}

#[test]
fn one_run_across_a_veth_receives_frames() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let o = xdp_floor(&["--secs", "1", "--mtu", "1500"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A line on the window, the header, then one row per run: MTU, run,
    // frames sent, frames got, dropped, Mpps, Gb/s, MB/s of payload, and
    // the sending thread's CPU ns per octet as "TOTAL (USER+KERNEL)".
    let rows: Vec<Vec<&str>> = out
        .lines()
        .skip(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    let runs: Vec<&str> = rows
        .iter()
        .map(|r| r.get(1).copied().unwrap_or(""))
        .collect();
    assert_eq!(runs, ["frames", "copy+crc"], "{out}");
    for r in &rows {
        assert_eq!(r.len(), 10, "{out}");
        let num = |i: usize| -> f64 { r[i].parse().expect("numbers") };
        assert_eq!(num(0), 1500.0);
        assert!(num(3) > 0.0 && num(3) <= num(2), "{out}");
        assert!(num(6) > 0.0 && num(7) > 0.0, "{out}");
        // The sender spun for a second: some CPU per octet, and the total
        // is its two parts.
        let split = r[9].trim_matches(|c| c == '(' || c == ')');
        let (u, k) = split.split_once('+').expect("USER+KERNEL");
        let (u, k): (f64, f64) = (u.parse().expect("user"), k.parse().expect("kernel"));
        assert!(num(8) > 0.0 && u >= 0.0 && k >= 0.0, "{out}");
        assert!((u + k - num(8)).abs() < 0.02, "{out}");
    }
}
