//! Two contexts on one memif socket, in this process, whose queue counts
//! differ (`DpdkOptions::queue_count`): the client's `Context::dpdk` fails
//! with an error that names both counts, in either direction, and the
//! server context is unharmed: a client of its own count then connects
//! and a Write lands. Without DPDK in the build the test says so and
//! passes, except under CI.
#![cfg(feature = "dpdk")]

mod memif_common;

use std::net::Ipv4Addr;

use iwarp::dpdk::MemifRole;
use iwarp::{Context, DpdkOptions, Error, Polling};
use memif_common::{connect, eal_or_skip};

fn opts(sock: &std::path::Path, index: u32, role: MemifRole, last: u8, n: u16) -> DpdkOptions {
    let mut o = DpdkOptions::memif(index, role, 0, sock, Ipv4Addr::new(10, 77, 11, last), 24);
    o.queue_count = n;
    // Small rings: several ports within the EAL's 256 MiB.
    o.queues = iwarp::dpdk::Queues {
        rx_desc: 256,
        tx_desc: 256,
    };
    o.host.polling = Polling::Adaptive;
    o
}

#[test]
fn memif_contexts_of_different_queue_counts_fail_at_the_clients_open() {
    let Some(eal) = eal_or_skip() else {
        return;
    };
    for (k, (ns, nc)) in [(2u16, 1u16), (1, 2)].into_iter().enumerate() {
        let sock = std::env::temp_dir().join(format!("iwarp-mm{k}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let index = 10 * k as u32;
        let server = Context::dpdk(&eal, &opts(&sock, index, MemifRole::Server, 1, ns))
            .expect("memif server");
        assert_eq!(server.loops(), usize::from(ns));
        let e = Context::dpdk(&eal, &opts(&sock, index + 1, MemifRole::Client, 2, nc))
            .expect_err("a client of another queue count");
        assert!(
            matches!(
                &e,
                Error::Dpdk(iwarp::dpdk::Error::MemifRefused { queues, server_queues: Some(s), .. })
                    if (*queues, *s) == (nc, ns)
            ),
            "{e:?}"
        );
        let m = e.to_string();
        assert!(
            m.contains(&format!("has {nc} queue(s)"))
                && m.contains(&format!("has {ns}, and refuses a client of another count"))
                && m.contains("same queue count"),
            "{m}"
        );

        // The server works on: a client of its count connects (the
        // refused one's devargs hot-plug again) and a Write lands.
        let client = Context::dpdk(&eal, &opts(&sock, index + 1, MemifRole::Client, 2, ns))
            .expect("a client of the server's queue count");
        let pair = connect(&server, &client, 7500, 4096);
        pair.write_lands(vec![0x5a; 4096]);
        drop((pair, client, server));
        let _ = std::fs::remove_file(&sock);
    }
}
