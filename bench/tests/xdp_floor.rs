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
        (&["--mtu", "20"][..], "not an MTU"),
        (&["--secs", "0"][..], "--secs"),
        (&["--frobnicate"][..], "unknown argument"),
    ] {
        let o = xdp_floor(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
    let o = xdp_floor(&["--help"]);
    assert!(o.status.success());
    assert!(String::from_utf8_lossy(&o.stdout).contains("usage: xdp-floor"));
}

#[test]
fn one_run_across_a_veth_receives_frames() {
    if let Some(why) = netns_harness::skip_reason() {
        eprintln!("SKIP: {why}");
        return;
    }
    let o = xdp_floor(&["--secs", "1", "--mtu", "1500"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let row: Vec<f64> = out
        .lines()
        .nth(1)
        .expect("a row after the header")
        .split_whitespace()
        .map(|v| v.parse().expect("numbers"))
        .collect();
    // MTU, frames sent, frames got, Mpps, Gb/s.
    assert_eq!(row.len(), 5, "{out}");
    assert_eq!(row[0], 1500.0);
    assert!(row[2] > 0.0 && row[2] <= row[1], "{out}");
    assert!(row[4] > 0.0, "{out}");
}
