//! Software steering between the loops of one context
//! (`Context::sim_pair_queues_soft`): the link delivers every frame for
//! the first context ("server") to its queue 0, as a peer that picks the
//! queue itself would, and the server's loop 0 passes the frames of
//! connections loop 1 owns to loop 1. The second context ("client")
//! gets its frames on the queue the RSS names, as in
//! `Context::sim_pair_queues`.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    Access, ConnectOptions, Context, Cq, Error, ListenOptions, Polling, Qp, Wc, WcOpcode,
    WorkRequest,
};

const T: Duration = Duration::from_secs(10);
const CONNS: usize = 6;
const PIECE: usize = 4096;

/// `n` completions from `cq`, each within `T`, all successful.
fn take(cq: &Cq, n: usize, op: WcOpcode) -> Vec<Wc> {
    (0..n)
        .map(|i| {
            let w = cq
                .wait(T)
                .unwrap_or_else(|| panic!("completion {i} of {n} missing"));
            assert!(w.status.is_ok() && w.opcode == Some(op), "{w:?}");
            w
        })
        .collect()
}

fn pattern(k: usize, salt: u8) -> Vec<u8> {
    (0..PIECE)
        .map(|i| (i as u8).wrapping_mul(13) ^ (k as u8) ^ salt.wrapping_mul(31))
        .collect()
}

/// `n` connections from `from` to `to:port` (a listener there), as
/// (the active ends, the passive ends).
fn connect(
    (from, fpd, fcq): (&Context, &iwarp::Pd, &Cq),
    (to, tpd, tcq): (&Context, &iwarp::Pd, &Cq),
    port: u16,
    n: usize,
) -> (Vec<Qp>, Vec<Qp>) {
    let listener = to.listen(port, &ListenOptions::new(tpd)).unwrap();
    let addr = SocketAddrV4::new(to.addr(), port);
    let (c, pd, cq) = (from.clone(), fpd.clone(), fcq.clone());
    let t = std::thread::spawn(move || {
        (0..n)
            .map(|_| c.connect(addr, &ConnectOptions::new(&pd, &cq)))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let passive = (0..n)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            req.accept(&Default::default(), tcq).expect("accepted")
        })
        .collect();
    (t.join().unwrap().expect("connected"), passive)
}

fn loops_of(qps: &[Qp]) -> Vec<usize> {
    let mut per = vec![0; 2];
    for q in qps {
        per[q.loop_index()] += 1;
    }
    per
}

/// Six connections, four opened by the client and two by the server:
/// each end's two loops own three. Writes both ways and Sends to the
/// server land whole. Every frame for the server arrived on its queue 0
/// (loop 1 received none from its device), and loop 0 passed loop 1's
/// to it.
#[test]
fn six_connections_over_a_link_that_delivers_on_queue_0() {
    let (server, client) = Context::sim_pair_queues_soft(2, Polling::Adaptive, None).expect("pair");
    assert_eq!((server.loops(), client.loops()), (2, 2));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let s_region = spd.register(vec![0; CONNS * PIECE], rw).unwrap();
    let s_inbox = spd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    let c_region = cpd.register(vec![0; CONNS * PIECE], rw).unwrap();

    let (c_act, s_pas) = connect((&client, &cpd, &ccq), (&server, &spd, &scq), 7200, 4);
    let (s_act, c_pas) = connect((&server, &spd, &scq), (&client, &cpd, &ccq), 7300, 2);
    let sqps: Vec<Qp> = s_pas.into_iter().chain(s_act).collect();
    let cqps: Vec<Qp> = c_act.into_iter().chain(c_pas).collect();
    assert_eq!(loops_of(&sqps), [3, 3]);
    assert_eq!(loops_of(&cqps), [3, 3]);

    // Writes from every client connection into its piece of the server's
    // region (checked after the Sends below, which arrive after them).
    let csrc = cpd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in cqps.iter().enumerate() {
        csrc.write(k * PIECE, &pattern(k, 1)).unwrap();
        q.post_send(WorkRequest::Write {
            wr_id: k as u64,
            signaled: true,
            local: csrc.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: s_region.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    take(&ccq, CONNS, WcOpcode::Write);

    // Sends into receives posted on every server connection.
    for (k, q) in sqps.iter().enumerate() {
        q.post_recv(
            100 + k as u64,
            s_inbox.sge((k * PIECE) as u64, PIECE as u32),
        )
        .unwrap();
    }
    for (k, q) in cqps.iter().enumerate() {
        csrc.write(k * PIECE, &pattern(k, 2)).unwrap();
        q.post_send(WorkRequest::Send {
            wr_id: 200 + k as u64,
            signaled: true,
            local: csrc.sge((k * PIECE) as u64, PIECE as u32).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    }
    for w in take(&scq, CONNS, WcOpcode::Recv) {
        assert_eq!(w.byte_len as usize, PIECE);
        assert_eq!(w.qp, sqps[(w.wr_id - 100) as usize].id(), "{w:?}");
    }
    take(&ccq, CONNS, WcOpcode::Send);

    // Writes from every server connection into the client's region.
    let ssrc = spd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in sqps.iter().enumerate() {
        ssrc.write(k * PIECE, &pattern(k, 3)).unwrap();
        q.post_send(WorkRequest::Write {
            wr_id: 300 + k as u64,
            signaled: true,
            local: ssrc.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: c_region.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    take(&scq, CONNS, WcOpcode::Write);

    let mut sent = Vec::new();
    for k in 0..CONNS {
        assert!(
            s_region.read(k * PIECE, PIECE).unwrap() == pattern(k, 1),
            "write {k} to the server"
        );
        // A Write this short completes when it is handed to TCP, not
        // when it is placed (docs/api.md, "Completion semantics"):
        // wait for the octets.
        let since = std::time::Instant::now();
        while c_region.read(k * PIECE, PIECE).unwrap() != pattern(k, 3) {
            assert!(since.elapsed() < T, "write {k} to the client");
            std::thread::sleep(Duration::from_millis(1));
        }
        let got = s_inbox.read(k * PIECE, PIECE).unwrap();
        assert!(
            (0..CONNS).any(|j| got == pattern(j, 2)),
            "receive {k} holds no Send's octets"
        );
        sent.push(got);
    }
    sent.sort();
    sent.dedup();
    assert_eq!(sent.len(), CONNS, "every Send landed once");

    // The server's frames all came in on queue 0; loop 0 passed loop 1
    // its share, which loop 1 handled.
    let ss = server.stats().unwrap();
    let (l0, l1) = (&ss.loops[0], &ss.loops[1]);
    assert_eq!(l1.poll_loop.rx_frames, 0, "{:?}", l1.poll_loop);
    assert!(l0.poll_loop.steered_out > 0, "{:?}", l0.poll_loop);
    assert!(l1.poll_loop.steered_in > 0, "{:?}", l1.poll_loop);
    assert!(l1.rx_tcp > 0 && l1.connections == 3, "{l1:?}");
    assert_eq!(l0.poll_loop.steered_in, 0);
    assert_eq!(l1.poll_loop.steered_out, 0);
    // The client's link steers: nothing to pass on.
    let cs = client.stats().unwrap();
    assert!(cs
        .loops
        .iter()
        .all(|l| l.poll_loop.steered_out == 0 && l.poll_loop.rx_frames > 0));
}
