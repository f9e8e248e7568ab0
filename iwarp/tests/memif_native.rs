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
    let t = std::thread::spawn(move || Context::memif(&s));
    let client = Context::memif(&c).expect("memif client");
    let server = t.join().expect("server thread").expect("memif server");
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
