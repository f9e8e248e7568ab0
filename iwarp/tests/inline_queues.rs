//! Inline polling ([`Polling::Inline`]) on contexts of several poll loops
//! (`Context::sim_pair_queues`, `sim_pair_queues_soft`): no loop thread,
//! the application's threads drive every loop. Keepers on, as a user
//! gets them (the crate's `inline_loops_tests` hold them off).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, ListenOptions, Polling, Qp, Wc, WcOpcode,
    WorkRequest,
};

const T: Duration = Duration::from_secs(20);
const CONNS: usize = 4;
const PIECE: usize = 1024;

fn wait(cq: &Cq) -> Wc {
    let wc = cq.wait(T).expect("a completion within the timeout");
    assert!(wc.status.is_ok(), "{wc:?}");
    wc
}

fn pattern(k: usize, salt: u8) -> Vec<u8> {
    (0..PIECE)
        .map(|i| (i as u8).wrapping_mul(31) ^ (k as u8) ^ salt)
        .collect()
}

fn write_then_send(qp: &Qp, src: &iwarp::Mr, at: usize, dst: &iwarp::Mr, to: usize) {
    qp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(at as u64, PIECE as u32).into(),
        remote_stag: dst.stag(),
        remote_to: to as u64,
    })
    .unwrap();
    qp.post_send(WorkRequest::Send {
        wr_id: 2,
        signaled: true,
        local: src.sge(at as u64, 32).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

/// Four connections between two inline contexts of two loops: two on
/// each loop at each end. The client Writes a piece into the server's
/// region and Sends on each; a server thread, waiting on its one CQ,
/// checks each piece when its Send arrives and answers alike; the client
/// waits on its CQ for the answers and checks them. Both ends' loops all
/// ran rounds on application threads.
fn four_connections(pair: (Context, Context), port: u16) {
    let (server, client) = pair;
    assert_eq!((server.loops(), client.loops()), (2, 2));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // Connection k's source at piece k, the peer's Write at CONNS + k,
    // its receive buffer at 2 * CONNS + k.
    let (src, dst, rcv) = (
        |k: usize| k * PIECE,
        |k: usize| (CONNS + k) * PIECE,
        |k: usize| ((2 * CONNS + k) * PIECE) as u64,
    );
    let sreg = spd.register(vec![0; 3 * CONNS * PIECE], rw).unwrap();
    let creg = cpd.register(vec![0; 3 * CONNS * PIECE], rw).unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let (s2, sr, sc) = (server.clone(), sreg.clone(), scq.clone());
    let server_side = std::thread::spawn(move || {
        let mut sqps = Vec::new();
        for _ in 0..CONNS {
            let req = listener.get_request(T).unwrap();
            let qp = req.accept(&AcceptOptions::default(), &sc).unwrap();
            // Requests come in the order of the client's connects.
            qp.post_recv(sqps.len() as u64, sr.sge(rcv(sqps.len()), 32))
                .unwrap();
            sqps.push(qp);
        }
        (s2, sqps)
    });
    let to = SocketAddrV4::new(server.addr(), port);
    let cqps: Vec<Qp> = (0..CONNS)
        .map(|_| {
            client
                .connect(to, &ConnectOptions::new(&cpd, &ccq))
                .unwrap()
        })
        .collect();
    let (server, sqps) = server_side.join().unwrap();
    for (k, q) in cqps.iter().enumerate() {
        q.post_recv(k as u64, creg.sge(rcv(k), 32)).unwrap();
    }
    let count = |qps: &[Qp], l: usize| qps.iter().filter(|q| q.loop_index() == l).count();
    assert_eq!((count(&cqps, 0), count(&cqps, 1)), (2, 2));
    assert_eq!((count(&sqps, 0), count(&sqps, 1)), (2, 2));

    let (sr, cr) = (sreg.clone(), creg.clone());
    let server_side = std::thread::spawn(move || {
        let (mut answered, mut own) = (0, 0);
        while answered < CONNS || own < 2 * CONNS {
            let wc = wait(&scq);
            if wc.opcode != Some(WcOpcode::Recv) {
                own += 1;
                continue;
            }
            let k = wc.wr_id as usize;
            assert_eq!(wc.qp, sqps[k].id());
            assert_eq!(sr.read(dst(k), PIECE).unwrap(), pattern(k, 1));
            sr.write(src(k), &pattern(k, 2)).unwrap();
            write_then_send(&sqps[k], &sr, src(k), &cr, dst(k));
            answered += 1;
        }
        (sqps, scq)
    });
    for (k, q) in cqps.iter().enumerate() {
        creg.write(src(k), &pattern(k, 1)).unwrap();
        write_then_send(q, &creg, src(k), &sreg, dst(k));
    }
    let (mut answers, mut own) = (0, 0);
    while answers < CONNS || own < 2 * CONNS {
        let wc = wait(&ccq);
        if wc.opcode != Some(WcOpcode::Recv) {
            own += 1;
            continue;
        }
        let k = wc.wr_id as usize;
        assert_eq!(wc.qp, cqps[k].id());
        assert_eq!(creg.read(dst(k), PIECE).unwrap(), pattern(k, 2));
        answers += 1;
    }
    let (_sqps, _scq) = server_side.join().unwrap();
    for ctx in [&server, &client] {
        let s = ctx.stats().unwrap();
        for (i, l) in s.loops.iter().enumerate() {
            assert!(l.poll_loop.app_rounds > 0, "loop {i}: {:?}", l.poll_loop);
            assert_eq!(l.connections, 2, "loop {i}");
        }
    }
}

#[test]
fn four_connections_over_two_inline_loops() {
    four_connections(
        Context::sim_pair_queues(2, Polling::Inline, None).unwrap(),
        7700,
    );
}

#[test]
fn four_connections_over_two_inline_loops_steered_in_software() {
    four_connections(
        Context::sim_pair_queues_soft(2, Polling::Inline, None).unwrap(),
        7701,
    );
}
