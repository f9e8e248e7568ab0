//! A program that ends with a connection open closes it, as a kernel
//! RNIC closes an exiting process's QPs (`tests/c/exit_open.c`, both
//! ends on our library in two namespaces, as `tools.rs` runs them).
//! Debian's `ib_atomic_lat` server leaves so: its client, under load,
//! waited ~40 s for `DISCONNECTED` (until its own FIN's retransmissions
//! gave up): the test's two runs once took more than its 90 s.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use netns_harness::{End, NsPair};

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn a_program_that_leaves_with_its_connection_open_disconnects_its_peer() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new(root.join("scripts/verbs-build.sh"))
        .output()
        .unwrap();
    assert!(out.status.success(), "verbs-build.sh: {}", text(&out));
    let libs = PathBuf::from(String::from_utf8(out.stdout).unwrap().trim());
    let dir = std::env::temp_dir().join(format!("iwarp-exit-open-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let exe = dir.join("exit_open");
    let out = Command::new("gcc")
        .arg("-O1")
        .arg("-o")
        .arg(&exe)
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/c/exit_open.c"))
        .args(["-lrdmacm", "-libverbs"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
    let exe = exe.to_str().unwrap().to_owned();

    let net = NsPair::new("vxo").unwrap();
    for end in [End::A, End::B] {
        net.veth.disable_tx_offload(end).unwrap();
    }
    let (sip, cip) = (net.addr(1), net.addr(2));
    let cmd = |end: End, ip: std::net::Ipv4Addr, role: &str| -> Vec<String> {
        vec![
            "env".to_owned(),
            format!("LD_LIBRARY_PATH={}", libs.display()),
            format!("IWARP_IFACE={}", net.veth.name(end)),
            format!("IWARP_IP={ip}/24"),
            exe.clone(),
            role.to_owned(),
            sip.to_string(),
            "7520".to_owned(),
        ]
    };
    let (s, c) = (cmd(End::A, sip, "server"), cmd(End::B, cip, "client"));
    let sref: Vec<&str> = s.iter().map(String::as_str).collect();
    let cref: Vec<&str> = c.iter().map(String::as_str).collect();
    let server = netns_harness::spawn_in(&net.a, &sref).unwrap();
    std::thread::sleep(Duration::from_millis(500));
    let client = netns_harness::run_in(&net.b, &cref, Duration::from_secs(30)).unwrap();
    let server = server.wait_timeout(Duration::from_secs(20)).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    let (ct, st) = (text(&client), text(&server));
    assert!(
        client.status.success() && server.status.success(),
        "--- client ({}):\n{ct}\n--- server ({}):\n{st}",
        client.status,
        server.status
    );
    assert!(ct.contains("client: disconnected"), "{ct}");
    assert!(st.contains("server: leaving"), "{st}");
}
