//! Two contexts over our own memif link (`Context::memif`, no DPDK) in
//! this process: TCP connects, a Write of several segments lands whole,
//! over MTU 1500 and 9000, trusting and verifying checksums, and the
//! device's counters say what crossed. Then a context of ours against
//! DPDK's `net_memif` at the other end (DPDK's server, our client).
#![cfg(feature = "memif")]

mod memif_common;

use std::net::Ipv4Addr;
use std::path::PathBuf;

use iwarp::memif::Role;
use iwarp::{Context, DeviceStats, MemifOptions, Polling};
use memif_common::connect;

fn socket(name: &str) -> PathBuf {
    let sock =
        std::env::temp_dir().join(format!("iwarp-native-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    sock
}

fn opts(sock: &std::path::Path, role: Role, last: u8, mtu: usize, trusted: bool) -> MemifOptions {
    let mut o = MemifOptions::new(role, sock, 3, Ipv4Addr::new(10, 77, 14, last), 24);
    o.host.polling = Polling::Adaptive;
    o.host.mtu = Some(mtu);
    o.host.trusted_link = trusted;
    o
}

fn pair(name: &str, mtu: usize, trusted: bool) -> (Context, Context) {
    let sock = socket(name);
    let s = opts(&sock, Role::Server, 1, mtu, trusted);
    let c = opts(&sock, Role::Client, 2, mtu, trusted);
    // The server listens at once; the client connects.
    let server = Context::memif(&s).expect("memif server");
    let client = Context::memif(&c).expect("memif client");
    (server, client)
}

fn memif_counters(ctx: &Context) -> iwarp::memif::Stats {
    match ctx.stats().expect("stats").device {
        DeviceStats::Memif(m) => {
            assert!(m.broken.is_none(), "{m:?}");
            m.counters
        }
        d => panic!("not a memif device: {d:?}"),
    }
}

#[test]
fn writes_land_over_our_memif_at_mtu_1500_and_9000_trusted_or_not() {
    for (mtu, trusted, len) in [
        (1500, true, 64 * 1024),
        (1500, false, 8192),
        (9000, true, 256 * 1024),
    ] {
        let (server, client) = pair(&format!("w{mtu}{trusted}"), mtu, trusted);
        let p = connect(&server, &client, 7700, len);
        p.write_lands((0..len as u32).map(|i| (i * 13 + i / 512) as u8).collect());
        let (s, c) = (memif_counters(&server), memif_counters(&client));
        // The Write's segments went client to server as whole frames.
        assert!(s.rx_frames as usize > len / mtu, "{s:?}");
        assert!(c.tx_frames >= s.rx_frames, "{c:?} {s:?}");
        assert_eq!((s.rx_bad_desc, s.rx_chained, c.tx_refused), (0, 0, 0));
        let i = server.stats().expect("stats").iface;
        assert_eq!((i.rx_bad_checksum, i.rx_partial_checksum), (0, 0));
        let text = server.stats().expect("stats").to_string();
        assert!(text.contains("device: memif Server"), "{text}");
        drop(p);
    }
}

#[cfg(feature = "dpdk")]
#[test]
fn a_context_on_our_memif_talks_to_one_on_dpdks_memif() {
    let Some(eal) = memif_common::eal_or_skip() else {
        return;
    };
    let sock = socket("dpdk");
    let mut d = iwarp::DpdkOptions::memif(
        40,
        iwarp::dpdk::MemifRole::Server,
        3,
        &sock,
        Ipv4Addr::new(10, 77, 14, 1),
        24,
    );
    d.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    d.host.polling = Polling::Adaptive;
    let server = Context::dpdk(&eal, &d).expect("DPDK memif server");
    let client = Context::memif(&opts(&sock, Role::Client, 2, 1500, false)).expect("our client");
    let p = connect(&server, &client, 7701, 32 * 1024);
    p.write_lands((0..32 * 1024u32).map(|i| (i * 5) as u8).collect());
    assert!(memif_counters(&client).tx_frames > 20);
    match client.stats().expect("stats").device {
        DeviceStats::Memif(m) => assert_eq!(
            m.peer, "net_memif40",
            "CONNECTED names the server's interface"
        ),
        d => panic!("{d:?}"),
    }
}

#[test]
fn a_server_context_is_up_before_its_client_and_serves_the_next_after_one_leaves() {
    let sock = socket("next");
    let server = Context::memif(&opts(&sock, Role::Server, 1, 1500, true)).expect("server");
    match server.stats().expect("stats").device {
        DeviceStats::Memif(m) => {
            let why = m.broken.unwrap_or_default();
            assert!(why.starts_with("waiting for a client"), "{why}");
        }
        d => panic!("{d:?}"),
    }
    for (round, port) in [(0u8, 7710), (1, 7711)] {
        let client = Context::memif(&opts(&sock, Role::Client, 2, 1500, true)).expect("client");
        let p = connect(&server, &client, port, 4096);
        p.write_lands(vec![round + 1; 4096]);
        drop(p);
        drop(client);
        // The server's link notices its client left.
        let end = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let DeviceStats::Memif(m) = server.stats().expect("stats").device else {
                panic!("not memif");
            };
            if m.broken.is_some_and(|b| b.contains("broke")) {
                break;
            }
            assert!(std::time::Instant::now() < end, "the server did not notice");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
