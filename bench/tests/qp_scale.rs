//! `qp-scale`: a small run establishes every connection and prints its
//! three lines; bad arguments exit 2. No timing thresholds.

use std::process::Command;

fn qp_scale(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_qp-scale"))
        .args(args)
        .output()
        .expect("run qp-scale")
}

#[test]
fn a_small_run_establishes_every_connection() {
    let o = qp_scale(&["-n", "40"]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}\n{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.starts_with("connections: 40 iWARP"), "{out}");
    for key in ["setup:  ours ", "memory: ", "idle:   "] {
        assert!(out.lines().any(|l| l.starts_with(key)), "{key}: {out}");
    }
    assert!(out.contains("ratio "), "{out}");
}

#[test]
fn bad_arguments_exit_2() {
    for args in [&["-n", "0"][..], &["-n", "x"][..], &["--what"][..]] {
        let o = qp_scale(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
    }
}

/// clap's convention: `--help` and `--version` exit 0 on stdout; an unknown
/// flag exits 2 naming it.
#[test]
fn help_version_and_unknown_flag() {
    let o = qp_scale(&["--help"]);
    assert!(o.status.success(), "{o:?}");
    assert!(String::from_utf8_lossy(&o.stdout).contains("Usage: qp-scale"));
    let o = qp_scale(&["--version"]);
    assert!(o.status.success(), "{o:?}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        concat!("qp-scale ", env!("CARGO_PKG_VERSION"), "\n")
    );
    let o = qp_scale(&["--frobnicate"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("unexpected argument '--frobnicate'"), "{err}");
}
