//! `Context::connect_start` hands each connection to its poll loop in the
//! order of the calls, so a server accepts them in that order (perftest's
//! `-q N` pairs queue pairs by it; the C library's `rdma_connect` starts
//! its connections here); `Connecting::finish` waits for each; a
//! `Connecting` dropped unfinished aborts its connection. Over the
//! simulated link, with one poll loop at each end and with two.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, ConnectOptions, Context, Cq, ListenOptions, Listener, Pd, Polling, Qp};

const T: Duration = Duration::from_secs(10);

/// Start eight connections to `addr` one after the other, nobody waiting
/// yet, each naming its place in its private data; the server must take
/// their requests in that order. Returns both ends' queue pairs.
fn eight_in_order(
    client: &Context,
    cpd: &Pd,
    ccq: &Cq,
    addr: SocketAddrV4,
    listener: &Listener,
    scq: &Cq,
) -> (Vec<Qp>, Vec<Qp>) {
    let started: Vec<_> = (0..8u8)
        .map(|i| {
            let mut o = ConnectOptions::new(cpd, ccq);
            o.mpa.private_data = vec![i];
            o.timeout = T;
            client.connect_start(addr, &o).unwrap()
        })
        .collect();
    let mut sqps = Vec::new();
    for i in 0..8u8 {
        let req = listener.get_request(T).unwrap();
        assert_eq!(req.peer().private_data, [i], "request {i} out of order");
        sqps.push(req.accept(&AcceptOptions::default(), scq).unwrap());
    }
    let cqps = started.into_iter().map(|c| c.finish().unwrap()).collect();
    (cqps, sqps)
}

#[test]
fn connections_started_in_turn_reach_the_server_in_that_order() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let port = 7301;
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    // One connection first, so that the server's MAC is known: the eight
    // below find their next hop resolved (the test after this one starts
    // them to a neighbour ARP has not resolved yet).
    // It stays open to the end, so the client's connection count below
    // is this one plus what the test opens.
    let warm = {
        let o = ConnectOptions::new(&cpd, &ccq);
        std::thread::scope(|s| {
            let t = s.spawn(|| client.connect(addr, &o));
            let req = listener.get_request(T).unwrap();
            let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
            (t.join().unwrap().unwrap(), sqp)
        })
    };
    let base = client.stats().unwrap().connections;
    assert_eq!(base, 1);
    let (cqps, sqps) = eight_in_order(&client, &cpd, &ccq, addr, &listener, &scq);
    assert_eq!(cqps.len(), 8);
    assert_eq!(client.stats().unwrap().connections, base + 8);

    // One more, dropped before anyone waits for it: aborted, it leaves
    // the client's stack.
    let o = ConnectOptions::new(&cpd, &ccq);
    drop(client.connect_start(addr, &o).unwrap());
    let since = Instant::now();
    while client.stats().unwrap().connections != base + 8 {
        assert!(since.elapsed() < T, "the dropped connection stayed");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop((cqps, sqps, warm));
}

/// Eight connections started at once to a server whose MAC the client
/// has not resolved: ARP holds every SYN until the reply comes and sends
/// them in the order they came, so the server sees the connections in
/// the order they were started (a SYN dropped there would follow a SYN
/// retransmission timeout later, behind the others).
#[test]
fn connections_started_at_once_to_an_unresolved_neighbour_reach_the_server_in_order() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let port = 7302;
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    assert_eq!(client.stats().unwrap().connections, 0, "nothing sent yet");
    let (cqps, sqps) = eight_in_order(&client, &cpd, &ccq, addr, &listener, &scq);
    assert_eq!(cqps.len(), 8);
    let stats = client.stats().unwrap();
    assert_eq!(stats.connections, 8);
    // The neighbour was unresolved when they started (at least the first
    // SYN waited for ARP), and ARP dropped nothing.
    assert!(stats.iface.tx_queued >= 1, "{:?}", stats.iface);
    assert_eq!(stats.iface.tx_dropped, 0, "{:?}", stats.iface);
    drop((cqps, sqps));
}

/// Both ends of two poll loops (`Context::sim_pair_queues`): the
/// client's connections go out from its loops in turn and reach the
/// server's loops on the queues their flows hash to, yet the server
/// takes their requests in the order they were started. `connect_start`
/// returns once the server's stack has accepted the connection (its MPA
/// Request acknowledged), and the server's router hands its loops'
/// accepted connections out in the order the loops accepted them, which
/// they number together.
#[test]
fn connections_started_in_turn_over_two_loops_at_both_ends_reach_the_server_in_that_order() {
    let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let port = 7303;
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let (cqps, sqps) = eight_in_order(&client, &cpd, &ccq, addr, &listener, &scq);
    // Both loops of each end carried connections (in turn: 4 each).
    let on = |qps: &[Qp], l| qps.iter().filter(|q| q.loop_index() == l).count();
    assert_eq!((on(&cqps, 0), on(&cqps, 1)), (4, 4));
    assert_eq!((on(&sqps, 0), on(&sqps, 1)), (4, 4));
    drop((cqps, sqps));
}
