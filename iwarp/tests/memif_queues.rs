//! A context of several poll loops on a real backend: two DPDK memif
//! ports of two queues each, on one socket in this process
//! (`DpdkOptions::queue_count`). memif has no RSS: a frame sent on queue
//! `i` arrives on the peer's queue `i`, and with software steering at
//! both ends each flow is sent on its owner's queue, so nothing needs
//! passing between loops. Without DPDK in the build the test
//! says so and passes, except under CI (`scripts/deps.sh --test`
//! installs it).
#![cfg(feature = "dpdk")]

mod memif_common;

use std::net::Ipv4Addr;

use iwarp::dpdk::MemifRole;
use iwarp::{Context, DpdkOptions, Polling};
use memif_common::{connections_land_on_both_loops, eal_or_skip};

#[test]
fn connections_over_two_memif_queues_land_on_both_loops() {
    let Some(eal) = eal_or_skip() else {
        return;
    };
    let sock = std::env::temp_dir().join(format!("iwarp-mq-{}.sock", std::process::id()));
    let opts = |index: u32, role, last: u8| {
        let ip = Ipv4Addr::new(10, 77, 9, last);
        let mut o = DpdkOptions::memif(index, role, 0, &sock, ip, 24);
        o.queue_count = 2;
        // Each queue's rings count in the port's mbuf pool: smaller rings
        // keep two ports of two queues within the EAL's 256 MiB.
        o.queues = iwarp::dpdk::Queues {
            rx_desc: 256,
            tx_desc: 256,
        };
        o.host.polling = Polling::Adaptive;
        o
    };
    let server = Context::dpdk(&eal, &opts(0, MemifRole::Server, 1)).expect("memif server");
    let client = Context::dpdk(&eal, &opts(1, MemifRole::Client, 2)).expect("memif client");
    assert_eq!((server.loops(), client.loops()), (2, 2));

    connections_land_on_both_loops(&server, &client, 7400);
    drop((server, client));
    let _ = std::fs::remove_file(&sock);

    // A port without RSS and without memif's pairing (a ring) runs its
    // loops with software steering: the context opens with two loops.
    let ring = "net_ring_mq,nodeaction=net_ring_mq:0:CREATE";
    let mut o = DpdkOptions::new(ring, Ipv4Addr::new(10, 77, 10, 1), 24);
    o.queue_count = 2;
    let two = Context::dpdk(&eal, &o).expect("a two-queue ring port");
    assert_eq!(two.loops(), 2);
}
