//! `tcp-vs-linux`: clap's argument handling (help, version, unknown flags
//! and bad values exit 2 before any namespace is made). Its runs need root
//! and minutes; `netns_cleanup.rs` starts and stops it.

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
