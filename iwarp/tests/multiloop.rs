//! Contexts of several poll loops, one per receive queue of the in-memory
//! multi-queue link (`Context::sim_pair_queues`): connections spread over
//! the loops, each owned by one; one listener takes the requests of all;
//! memory registered on every loop; CQs shared.

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{
    Access, ConnectOptions, Context, Cq, Error, ListenOptions, Mr, Polling, Qp, QpEvent, Transport,
    Wc, WcOpcode, WorkRequest,
};

const T: Duration = Duration::from_secs(10);
const CONNS: usize = 8;
const PIECE: usize = 4096;

/// `n` completions from `cq`, each within `T`.
fn take(cq: &Cq, n: usize) -> Vec<Wc> {
    (0..n)
        .map(|i| {
            cq.wait(T)
                .unwrap_or_else(|| panic!("completion {i} of {n} missing"))
        })
        .collect()
}

fn pattern(k: usize, salt: u8) -> Vec<u8> {
    (0..PIECE)
        .map(|i| (i as u8).wrapping_mul(7) ^ (k as u8) ^ salt)
        .collect()
}

/// Wait for an event of `qp` that `want` takes.
fn wait_event(qp: &Qp, want: impl Fn(&QpEvent) -> bool) {
    let since = Instant::now();
    loop {
        match qp.poll_event() {
            Some(e) if want(&e) => return,
            Some(_) => {}
            None => assert!(
                since.elapsed() < T,
                "no such event on loop {}",
                qp.loop_index()
            ),
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Per-loop connection counts from the stats.
fn split(ctx: &Context) -> Vec<usize> {
    let s = ctx.stats().expect("stats");
    assert_eq!(s.loops.len(), ctx.loops());
    assert_eq!(
        s.connections,
        s.loops.iter().map(|l| l.connections).sum::<usize>()
    );
    s.loops.iter().map(|l| l.connections).collect()
}

/// Eight connections between two 2-queue contexts: they land on both
/// loops of each end (the client's in turn, the server's where the RSS
/// brings their frames, which with the symmetric key is the same loop
/// number); Writes, Sends and Reads between them move the right octets,
/// into and out of one region that connections of both loops use and
/// through CQs both loops complete into; after the region is
/// deregistered a Write from the peer fails on connections of both
/// loops (the server's loop answers it with a Terminate); closing everything leaves nothing tracked.
#[test]
fn eight_connections_over_two_loops() {
    let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).expect("pair");
    assert_eq!((server.loops(), client.loops()), (2, 2));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let shared = spd
        .register(
            vec![0; CONNS * PIECE],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let inbox = spd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    let listener = server.listen(7100, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), 7100);
    let (c, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
    let t = std::thread::spawn(move || {
        (0..CONNS)
            .map(|_| c.connect(to, &ConnectOptions::new(&cpd2, &ccq2)))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let mut req_loops = Vec::new();
    let sqps: Vec<Qp> = (0..CONNS)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            req_loops.push(req.loop_index());
            req.accept(&Default::default(), &scq).expect("accepted")
        })
        .collect();
    let cqps = t.join().unwrap().expect("connected");
    // The listener took requests from both loops; the client's
    // connections went to its loops in turn.
    assert!(
        req_loops.contains(&0) && req_loops.contains(&1),
        "{req_loops:?}"
    );
    let cl: Vec<usize> = cqps.iter().map(Qp::loop_index).collect();
    assert_eq!(cl, [0, 1, 0, 1, 0, 1, 0, 1]);
    let sl: Vec<usize> = sqps.iter().map(Qp::loop_index).collect();
    assert_eq!(sl, req_loops);
    // The stats' per-loop split: both loops hold connections, four each
    // (the server's loop of a connection is the client's).
    assert_eq!(split(&client), [4, 4]);
    assert_eq!(split(&server), [4, 4]);
    let ss = server.stats().unwrap();
    assert!(ss
        .loops
        .iter()
        .all(|l| l.rx_tcp > 0 && l.poll_loop.rx_frames > 0));
    assert_eq!(ss.listeners, 1);

    // RDMA Writes from every client connection into its piece of the one
    // shared region.
    let src = cpd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in cqps.iter().enumerate() {
        src.write(k * PIECE, &pattern(k, 1)).unwrap();
        q.post_send(WorkRequest::Write {
            wr_id: k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: shared.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    let mut ids: Vec<u64> = take(&ccq, CONNS)
        .iter()
        .map(|w| {
            assert!(
                w.status.is_ok() && w.opcode == Some(WcOpcode::Write),
                "{w:?}"
            );
            w.wr_id
        })
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (0..CONNS as u64).collect::<Vec<_>>());

    // Sends into receives posted on every server connection; the
    // completions of both loops on one CQ, each naming its queue pair.
    // A Send arrives after the Writes posted before it on its
    // connection are placed.
    for (k, q) in sqps.iter().enumerate() {
        q.post_recv(100 + k as u64, inbox.sge((k * PIECE) as u64, PIECE as u32))
            .unwrap();
    }
    for (k, q) in cqps.iter().enumerate() {
        src.write(k * PIECE, &pattern(k, 2)).unwrap();
        q.post_send(WorkRequest::Send {
            wr_id: 200 + k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, PIECE as u32).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    }
    for w in take(&scq, CONNS) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Recv),
            "{w:?}"
        );
        assert_eq!(w.byte_len as usize, PIECE);
        let k = (w.wr_id - 100) as usize;
        assert_eq!(w.qp, sqps[k].id(), "{w:?}");
    }
    assert!(take(&ccq, CONNS).iter().all(|w| w.status.is_ok()));
    for k in 0..CONNS {
        assert!(
            shared.read(k * PIECE, PIECE).unwrap() == pattern(k, 1),
            "write {k}"
        );
        // Each Send reached the receive of the server's end of its own
        // connection: which one that is the octets say.
        let got = inbox.read(k * PIECE, PIECE).unwrap();
        assert!(
            (0..CONNS).any(|j| got == pattern(j, 2)),
            "receive {k} holds no Send's octets"
        );
    }
    let mut sent: Vec<Vec<u8>> = (0..CONNS)
        .map(|k| inbox.read(k * PIECE, PIECE).unwrap())
        .collect();
    sent.sort();
    sent.dedup();
    assert_eq!(sent.len(), CONNS, "every Send landed once");

    // RDMA Reads of every piece of the shared region.
    let sink = cpd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in cqps.iter().enumerate() {
        q.post_send(WorkRequest::Read {
            wr_id: 300 + k as u64,
            signaled: true,
            local: sink.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: shared.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    for w in take(&ccq, CONNS) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Read),
            "{w:?}"
        );
    }
    for k in 0..CONNS {
        assert!(
            sink.read(k * PIECE, PIECE).unwrap() == pattern(k, 1),
            "read {k}"
        );
    }

    // Deregistered on every loop: a Write to it fails on connections of
    // both loops.
    let stag = shared.stag();
    shared.deregister().unwrap();
    for (k, q) in cqps.iter().enumerate() {
        q.post_send(WorkRequest::Write {
            wr_id: 400 + k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, 64).into(),
            remote_stag: stag,
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    // The Write completes here once sent; the server's loops refuse it
    // (remote access error): a Terminate ends each connection, on
    // connections of both loops.
    let _ = take(&ccq, CONNS);
    let mut loops_failed = [false; 2];
    for (c, s) in cqps.iter().zip(&sqps) {
        wait_event(c, |e| matches!(e, QpEvent::TerminateReceived(_)));
        wait_event(s, |e| matches!(e, QpEvent::TerminateSent(_)));
        loops_failed[c.loop_index()] = true;
    }
    assert_eq!(loops_failed, [true, true]);

    // Closing everything: nothing tracked, no connection left on a loop
    // once TCP is done.
    drop(cqps);
    drop(sqps);
    drop(listener);
    assert_eq!(server.tracked_connections(), 0, "server");
    assert_eq!(client.tracked_connections(), 0, "client");
    let deadline = Instant::now() + T;
    while split(&client).iter().chain(&split(&server)).any(|&n| n > 0) {
        assert!(Instant::now() < deadline, "connections left");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(server.stats().unwrap().listeners, 0);
}

/// One registration shows the same STag on every loop, so a queue pair
/// of either loop uses it as a local buffer; windows too.
#[test]
fn memory_is_alike_on_every_loop() {
    let (a, b) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mrs: Vec<Mr> = (0..4)
        .map(|_| {
            apd.register(vec![0; 256], Access::LOCAL_WRITE | Access::MW_BIND)
                .unwrap()
        })
        .collect();
    let mut mw = apd.alloc_mw().unwrap();
    mw.bind(&mrs[0], 0, 64, Access::REMOTE_READ).unwrap();
    mw.invalidate().unwrap();
    mw.dealloc().unwrap();
    for m in mrs {
        m.deregister().unwrap();
    }
    let _ = bpd;
}

/// What a context of several loops refuses, clearly.
#[test]
fn refusals() {
    assert!(matches!(
        Context::sim_pair_queues(0, Polling::Adaptive, None),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        Context::sim_pair_queues(2, Polling::Inline, None),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        Context::sim_pair_queues(2, Polling::Adaptive, Some(&[0, 1, 0])),
        Err(Error::InvalidArgument(_))
    ));
    let (a, b) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mut lo = ListenOptions::new(&apd);
    lo.transport = Transport::Sctp;
    assert!(matches!(a.listen(7200, &lo), Err(Error::Unsupported(_))));
    let cq = b.create_cq(4);
    let mut co = ConnectOptions::new(&bpd, &cq);
    co.transport = Transport::Sctp;
    let to = SocketAddrV4::new(a.addr(), 7200);
    assert!(matches!(b.connect(to, &co), Err(Error::Unsupported(_))));
    // The port is free for TCP afterwards; one listener per port.
    let l = a.listen(7200, &ListenOptions::new(&apd)).unwrap();
    assert!(matches!(
        a.listen(7200, &ListenOptions::new(&apd)),
        Err(Error::AddrInUse)
    ));
    drop(l);
    let _l = a.listen(7200, &ListenOptions::new(&apd)).unwrap();
    // One queue is the one-loop pair.
    let (x, y) = Context::sim_pair_queues(1, Polling::Adaptive, None).unwrap();
    assert_eq!((x.loops(), y.loops()), (1, 1));
}

/// Four connections closed gracefully from either side: the close goes
/// to the loop that owns each, both ends see it and TCP finishes; a
/// hook run for a queue pair runs on its loop's thread, one thread per
/// loop.
#[test]
fn graceful_close_and_hooks_on_the_owning_loop() {
    let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let listener = server.listen(7300, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), 7300);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || {
        (0..4)
            .map(|_| c.connect(to, &o))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let sqps: Vec<Qp> = (0..4)
        .map(|_| {
            listener
                .get_request(T)
                .unwrap()
                .accept(&Default::default(), &scq)
                .unwrap()
        })
        .collect();
    let cqps = t.join().unwrap().unwrap();
    // Hooks: each runs once on the thread of its queue pair's loop.
    let (tx, rx) = std::sync::mpsc::channel();
    for q in &cqps {
        let (tx, lp) = (tx.clone(), q.loop_index());
        q.run_in_loop(move || {
            let _ = tx.send((lp, std::thread::current().id()));
            iwarp::HookStatus::Done
        })
        .unwrap();
    }
    let mut threads: Vec<Option<std::thread::ThreadId>> = vec![None; 2];
    for _ in 0..4 {
        let (lp, id) = rx.recv_timeout(T).expect("the hook ran");
        assert!(
            threads[lp].is_none_or(|t| t == id),
            "loop {lp} on two threads"
        );
        threads[lp] = Some(id);
    }
    assert!(threads[0].is_some() && threads[1].is_some() && threads[0] != threads[1]);
    assert_ne!(threads[0], Some(std::thread::current().id()));
    // Close: two from the client, two from the server.
    for (k, (c, s)) in cqps.iter().zip(&sqps).enumerate() {
        if k % 2 == 0 {
            c.disconnect().unwrap();
        } else {
            s.disconnect().unwrap();
        }
    }
    for q in cqps.iter().chain(&sqps) {
        q.wait_disconnected(T).unwrap();
    }
    for q in cqps.iter().chain(&sqps) {
        q.wait_closed(T).unwrap();
    }
    drop((cqps, sqps, listener));
    assert_eq!(server.tracked_connections(), 0);
    assert_eq!(client.tracked_connections(), 0);
}

/// A Send with Invalidate that one loop receives stops the region for
/// the connections of the other loop too, before its receive completes
/// (RFC 5040 §5.3, §7.2: the loops' tables are replicas sharing a state
/// word per STag): a Write that worked through the other loop's
/// connection a moment before is refused there afterwards.
#[test]
fn a_remote_invalidation_on_one_loop_stops_the_region_on_the_other() {
    let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).expect("pair");
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(vec![0; PIECE], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(7300, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), 7300);
    let (c, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
    let t = std::thread::spawn(move || {
        (0..2)
            .map(|_| c.connect(to, &ConnectOptions::new(&cpd2, &ccq2)))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let sqps: Vec<Qp> = (0..2)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            req.accept(&Default::default(), &scq).expect("accepted")
        })
        .collect();
    let cqps = t.join().unwrap().expect("connected");
    // One connection on each loop of the server.
    let on = |l: usize| {
        let k = sqps.iter().position(|q| q.loop_index() == l).expect("loop");
        // The server's end of a connection and the client's share the loop
        // number (the symmetric key), so the client's end is found alike.
        let c = cqps.iter().position(|q| q.loop_index() == l).expect("loop");
        (&sqps[k], &cqps[c])
    };
    let ((s0, c0), (_s1, c1)) = (on(0), on(1));
    let src = cpd.register(vec![9; 64], Access::LOCAL_WRITE).unwrap();
    let write = |q: &Qp, wr_id: u64| {
        q.post_send(WorkRequest::Write {
            wr_id,
            signaled: true,
            local: src.sge(0, 64).into(),
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    };
    // Through loop 1's connection the region takes a Write.
    write(c1, 1);
    let w = take(&ccq, 1);
    assert!(w[0].status.is_ok(), "{w:?}");
    let deadline = Instant::now() + T;
    while target.read(0, 64).unwrap() != [9; 64] {
        assert!(Instant::now() < deadline, "the first Write never landed");
        std::thread::sleep(Duration::from_millis(1));
    }
    // A Send with Invalidate arrives on loop 0's connection.
    s0.post_recv(7, inbox.sge(0, 64)).unwrap();
    c0.post_send(WorkRequest::Send {
        wr_id: 2,
        signaled: true,
        local: src.sge(0, 8).into(),
        solicited: false,
        invalidate: Some(target.stag()),
    })
    .unwrap();
    let r = take(&scq, 1);
    assert!(r[0].status.is_ok(), "{r:?}");
    assert_eq!(r[0].invalidated, Some(target.stag()));
    assert_eq!(r[0].qp, s0.id());
    let _ = take(&ccq, 1);
    // Loop 1 refuses the region now: the Write ends its connection with
    // a Terminate, and the memory stays as it was.
    target.write(0, &[0; 64]).unwrap();
    write(c1, 3);
    let _ = take(&ccq, 1);
    wait_event(c1, |e| matches!(e, QpEvent::TerminateReceived(_)));
    assert_eq!(target.read(0, 64).unwrap(), [0; 64]);
}
