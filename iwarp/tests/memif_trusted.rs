//! `HostOptions::trusted_link` over DPDK memif, in this process: two
//! trusting ends connect and a Write lands whole (nothing at either end
//! counted as a bad or partial checksum); a trusting server and a
//! verifying client do not connect, and the client counts the server's
//! segments as partial checksums and names the cause. Without DPDK in the
//! build the test says so and passes, except under CI.
#![cfg(feature = "dpdk")]

mod memif_common;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

use iwarp::dpdk::{Eal, MemifRole};
use iwarp::{ConnectOptions, Context, DpdkOptions, ListenOptions, Polling};
use memif_common::{connect, eal_or_skip};

fn open(eal: &Eal, sock: &Path, index: u32, role: MemifRole, last: u8, trusted: bool) -> Context {
    let mut o = DpdkOptions::memif(index, role, 0, sock, Ipv4Addr::new(10, 77, 12, last), 24);
    // Small rings: four ports within the EAL's 256 MiB.
    o.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    o.host.polling = Polling::Adaptive;
    o.host.trusted_link = trusted;
    Context::dpdk(eal, &o).expect("memif context")
}

fn socket(name: &str) -> std::path::PathBuf {
    let sock = std::env::temp_dir().join(format!("iwarp-{name}-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    sock
}

#[test]
fn a_trusted_memif_link_carries_writes_and_a_verifying_peer_names_the_mismatch() {
    let Some(eal) = eal_or_skip() else {
        return;
    };

    // Both ends trust the link.
    let sock = socket("trusted");
    let server = open(&eal, &sock, 0, MemifRole::Server, 1, true);
    let client = open(&eal, &sock, 1, MemifRole::Client, 2, true);
    let pair = connect(&server, &client, 7600, 8192);
    // Several segments' worth, each octet telling its place.
    pair.write_lands((0..8192u32).map(|i| (i * 7 + i / 256) as u8).collect());
    for (who, ctx) in [("server", &server), ("client", &client)] {
        // The client's third segment in is the server's ACK of the Write
        // or the Send, which may still be on its way when the Send
        // completes (the server's ACK waits a round for a reply to carry
        // it): wait for it, within a bound.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let i = loop {
            let i = ctx.stats().expect("stats").iface;
            if i.rx_tcp >= 3 || std::time::Instant::now() > deadline {
                break i;
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        assert!(i.rx_tcp >= 3, "{who}: {i:?}");
        assert_eq!((i.rx_bad_checksum, i.rx_partial_checksum), (0, 0), "{who}");
    }
    drop((pair, client, server));
    let _ = std::fs::remove_file(&sock);

    // A trusting server, a client that verifies: the server's SYN-ACKs
    // carry the pseudo-header sum alone, which the client drops and
    // counts, and says why.
    let sock = socket("mixed");
    let server = open(&eal, &sock, 10, MemifRole::Server, 1, true);
    let client = open(&eal, &sock, 11, MemifRole::Client, 2, false);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let ccq = client.create_cq(8);
    let listener = server.listen(7601, &ListenOptions::new(&spd)).unwrap();
    let mut o = ConnectOptions::new(&cpd, &ccq);
    o.timeout = Duration::from_millis(1500);
    let to = SocketAddrV4::new(server.addr(), 7601);
    assert!(
        client.connect(to, &o).is_err(),
        "connected across a mismatch"
    );
    let st = client.stats().expect("stats");
    assert!(st.iface.rx_partial_checksum >= 1, "{:?}", st.iface);
    assert_eq!(st.iface.rx_tcp, 0, "{:?}", st.iface);
    let why = st.checksum_diagnosis().expect("a diagnosis");
    assert!(why.contains("pseudo-header"), "{why}");
    // The server took the client's SYNs (fully summed) without summing.
    let s = server.stats().expect("stats").iface;
    assert!(s.rx_tcp >= 1, "{s:?}");
    assert_eq!((s.rx_bad_checksum, s.rx_partial_checksum), (0, 0));
    drop((listener, client, server));
    let _ = std::fs::remove_file(&sock);
}
