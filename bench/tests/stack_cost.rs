//! `stack-cost`: argument errors exit 2 with the reason; a short run moves
//! its Writes and prints both rows and the ratio. No timing thresholds.

use std::process::Command;

fn stack_cost(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_stack-cost"))
        .args(args)
        .output()
        .expect("run stack-cost")
}

#[test]
fn bad_arguments_exit_2_with_the_reason() {
    for (args, why) in [
        (
            &["--mtu", "100"][..],
            "'--mtu <N>': 100 is not in 576..=9000",
        ),
        (&["--window", "0"][..], "'--window <W>': 0 is not in 1..=64"),
        (&["-s", "x"][..], "invalid digit"),
    ] {
        let o = stack_cost(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(why), "{args:?}: {err}");
    }
}

#[test]
fn a_short_run_moves_every_write_at_both_mtus() {
    for mtu in ["1500", "9000"] {
        let o = stack_cost(&["--mib", "2", "--mtu", mtu]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("32 Writes of 65536 B"), "{out}");
        assert!(out.contains(&format!("MTU {mtu}")), "{out}");
        for row in ["ours:", "floor:", "ratio ours/floor"] {
            assert!(out.contains(row), "{out}");
        }
    }
}

/// `--pingpong` completes its round trips: two frames per round trip when
/// an ACK waits a round for the reply (a context with a loop thread), four
/// with `--ack-at-once` (an inline context). The virtual link is
/// deterministic, so the counts are exact.
#[test]
fn a_ping_pong_carries_its_acks_unless_told_to_ack_at_once() {
    for (extra, frames) in [
        (None, "2.00 frames"),
        (Some("--ack-at-once"), "4.00 frames"),
    ] {
        let mut args = vec!["-s", "64", "--mib", "1", "--mtu", "1500", "--pingpong"];
        args.extend(extra);
        let o = stack_cost(&args);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("pingpong: 16384 round trips"), "{out}");
        assert!(out.contains(frames), "{args:?}: {out}");
        // A ping-pong prints its own line, not the stream's rows.
        assert!(!out.contains("floor:"), "{out}");
    }
}

/// `--pingpong --watch`: a Write alone each way, each end answering once
/// the peer's last octet is in its region: every round trip completes (the
/// harness counts one only when the octet it waits for is there), in the
/// same two frames per round trip as the doorbell's, whose Write and Send
/// share one segment.
#[test]
fn a_watched_ping_pong_completes_each_round_trip_on_the_peers_octet() {
    let o = stack_cost(&[
        "-s",
        "64",
        "--mib",
        "1",
        "--mtu",
        "1500",
        "--pingpong",
        "--watch",
    ]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("pingpong: 16384 round trips of a 64-octet Write each way, the last octet watched: 2.00 frames"),
        "{out}"
    );
    // --watch only with --pingpong.
    let o = stack_cost(&["--watch"]);
    assert_eq!(o.status.code(), Some(2), "{o:?}");
}

/// clap's convention: `--help` and `--version` exit 0 on stdout; an unknown
/// flag exits 2 naming it.
#[test]
fn help_version_and_unknown_flag() {
    let o = stack_cost(&["--help"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: stack-cost"));
    let o = stack_cost(&["--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        concat!("stack-cost ", env!("CARGO_PKG_VERSION"), "\n")
    );
    let o = stack_cost(&["--frobnicate"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--frobnicate'"), "{err}");
}
