//! Contexts of two poll loops on our own memif link of two queue pairs
//! (`MemifOptions::queue_count`, no DPDK), in this process: connections
//! land on both loops of each end and their Writes land whole; ends of
//! different counts are refused naming both; and a context of ours
//! against DPDK's `net_memif` of two queues.
#![cfg(feature = "memif")]

mod memif_common;

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

use iwarp::memif::Role;
use iwarp::{Context, MemifOptions, Polling};
use memif_common::connections_land_on_both_loops;

fn socket(name: &str) -> PathBuf {
    let sock = std::env::temp_dir().join(format!("iwarp-nq-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    sock
}

fn opts(sock: &Path, role: Role, last: u8, queues: u16) -> MemifOptions {
    let mut o = MemifOptions::new(role, sock, 4, Ipv4Addr::new(10, 77, 15, last), 24);
    o.host.polling = Polling::Adaptive;
    o.queue_count = queues;
    o
}

#[test]
fn connections_over_two_queue_pairs_of_our_memif_land_on_both_loops() {
    let sock = socket("two");
    let server = Context::memif(&opts(&sock, Role::Server, 1, 2)).expect("memif server");
    let client = Context::memif(&opts(&sock, Role::Client, 2, 2)).expect("memif client");
    connections_land_on_both_loops(&server, &client, 7500);
    // Each loop's device is its own queue pair, and says so.
    let text = client.stats().expect("stats").to_string();
    assert!(text.contains("device: memif Client"), "{text}");
}

#[test]
fn ends_of_different_queue_counts_are_refused_naming_both() {
    for (s, c) in [(2u16, 1u16), (1, 2), (2, 3)] {
        let sock = socket(&format!("mismatch{s}{c}"));
        let server = Context::memif(&opts(&sock, Role::Server, 1, s)).expect("memif server");
        let mut o = opts(&sock, Role::Client, 2, c);
        o.link.timeout = std::time::Duration::from_secs(2);
        let e = Context::memif(&o)
            .expect_err("a client of another count")
            .to_string();
        let (sp, cp) = (format!("{s} queue pair"), format!("{c} queue pair"));
        assert!(
            e.contains(&sp) && e.contains(&cp),
            "server {s}, client {c}: {e}"
        );
        drop(server);
    }
    // A count of 0 is refused before any socket.
    assert!(Context::memif(&opts(&socket("zero"), Role::Client, 2, 0)).is_err());
}

#[cfg(feature = "dpdk")]
#[test]
fn a_context_on_two_queue_pairs_of_our_memif_talks_to_dpdks_memif_of_two() {
    use iwarp::dpdk::MemifRole;
    use iwarp::DpdkOptions;
    let Some(eal) = memif_common::eal_or_skip() else {
        return;
    };
    let sock = socket("dpdk");
    let mut d = DpdkOptions::memif(
        30,
        MemifRole::Server,
        4,
        &sock,
        Ipv4Addr::new(10, 77, 15, 1),
        24,
    );
    d.queue_count = 2;
    d.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    d.host.polling = Polling::Adaptive;
    let server = Context::dpdk(&eal, &d).expect("DPDK memif server");
    let client = Context::memif(&opts(&sock, Role::Client, 2, 2)).expect("our memif client");
    connections_land_on_both_loops(&server, &client, 7600);
}
