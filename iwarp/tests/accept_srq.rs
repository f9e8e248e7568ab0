//! A shared receive queue given at accept time (`AcceptOptions::srq`, as
//! verbs creates the QP with its SRQ after the request arrived), on a
//! listener that has none: that queue pair's Sends take the SRQ's
//! buffers, another queue pair of the same listener accepted without one
//! keeps its own receive queue. Over MPA and over SCTP on the simulated
//! link.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, ListenOptions, Status, Transport, WcOpcode,
    WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

fn srq_at_accept(transport: Transport, port: u16) {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let inbox = spd.register(vec![0; 4 * 64], Access::LOCAL_WRITE).unwrap();
    let srq = server.create_srq(8);
    for i in 0..2u64 {
        srq.post_recv(i, inbox.sge(i * 64, 64)).unwrap();
    }
    let mut lo = ListenOptions::new(&spd);
    lo.transport = transport;
    let listener = server.listen(port, &lo).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for n in 0..2 {
        let (c2, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
        let t = std::thread::spawn(move || {
            let mut co = ConnectOptions::new(&cpd2, &ccq2);
            co.transport = transport;
            c2.connect(addr, &co)
        });
        let req = listener.get_request(T).unwrap();
        let opts = if n == 0 {
            AcceptOptions {
                srq: Some(srq.clone()),
                ..AcceptOptions::default()
            }
        } else {
            // Its own receive queue: one buffer, wr_id 100.
            req.post_recv(100, inbox.sge(3 * 64, 64)).unwrap();
            AcceptOptions::default()
        };
        servers.push(req.accept(&opts, &scq).unwrap());
        clients.push(t.join().unwrap().unwrap());
    }
    let src = cpd
        .register(
            (0..3 * 16).map(|i| (i / 16) as u8 + 1).collect(),
            Access::LOCAL_READ,
        )
        .unwrap();
    // Two Sends on the first connection, one on the second; message m
    // carries the byte m + 1.
    for (m, q) in [(0u64, 0usize), (1, 0), (2, 1)] {
        clients[q]
            .post_send(WorkRequest::Send {
                wr_id: m,
                signaled: false,
                local: src.sge(m * 16, 16).into(),
                solicited: false,
                invalidate: None,
            })
            .unwrap();
    }
    let mut got = Vec::new();
    for _ in 0..3 {
        let wc = scq.wait(T).unwrap();
        assert_eq!(
            (wc.opcode, wc.status, wc.byte_len),
            (Some(WcOpcode::Recv), Status::Wc(WcStatus::Success), 16),
            "{wc:?}"
        );
        got.push((wc.wr_id, wc.qp));
    }
    got.sort_unstable();
    // The first QP took the SRQ's two buffers (in post order), the second
    // its own.
    assert_eq!(
        got,
        vec![
            (0, servers[0].id()),
            (1, servers[0].id()),
            (100, servers[1].id())
        ]
    );
    assert!(srq.is_empty());
    let data = inbox.read(0, 4 * 64).unwrap();
    assert!(data[..16].iter().all(|&b| b == 1), "{:?}", &data[..16]);
    assert!(data[64..80].iter().all(|&b| b == 2), "{:?}", &data[64..80]);
    assert!(
        data[192..208].iter().all(|&b| b == 3),
        "{:?}",
        &data[192..208]
    );
    // Nothing went to the second QP's buffer slot of the SRQ's region.
    assert!(data[128..192].iter().all(|&b| b == 0));
}

#[test]
fn an_srq_given_at_accept_serves_that_queue_pair_over_mpa() {
    srq_at_accept(Transport::Mpa, 9460);
}

#[test]
fn an_srq_given_at_accept_serves_that_queue_pair_over_sctp() {
    srq_at_accept(Transport::Sctp, 9461);
}
