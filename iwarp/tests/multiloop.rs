//! Contexts of several poll loops, one per receive queue of the in-memory
//! multi-queue link (`Context::sim_pair_queues`): connections spread over
//! the loops, each owned by one; one listener takes the requests of all;
//! memory registered on every loop; CQs shared.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

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
        Context::sim_pair_queues(2, Polling::Adaptive, Some(&[0, 1, 0])),
        Err(Error::InvalidArgument(_))
    ));
    // Over SCTP a context of several loops listens, and connects raw;
    // an active open inside UDP is refused (RSS hashes the outer UDP
    // ports, 9899 both ways, alike for every association).
    let (a, b) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let mut lo = ListenOptions::new(&apd);
    lo.transport = Transport::SctpOverUdp;
    let sctp_listener = a.listen(7200, &lo).expect("SCTP listens on every loop");
    let cq = b.create_cq(4);
    let mut co = ConnectOptions::new(&bpd, &cq);
    co.transport = Transport::SctpOverUdp;
    let to = SocketAddrV4::new(a.addr(), 7200);
    match b.connect(to, &co) {
        Err(Error::Unsupported(why)) => assert!(why.contains("9899"), "{why}"),
        other => panic!("SCTP over UDP from several loops: {other:?}"),
    }
    drop(sctp_listener);
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

/// `n` connections over SCTP from `from` to `to:port` (a listener
/// there), as (the active ends, the passive ends).
fn connect_sctp(
    (from, fpd, fcq): (&Context, &iwarp::Pd, &Cq),
    (to, tpd, tcq): (&Context, &iwarp::Pd, &Cq),
    port: u16,
    n: usize,
) -> (Vec<Qp>, Vec<Qp>) {
    let mut lo = ListenOptions::new(tpd);
    lo.transport = Transport::Sctp;
    let listener = to.listen(port, &lo).expect("SCTP listens on every loop");
    let addr = SocketAddrV4::new(to.addr(), port);
    let (c, pd, cq) = (from.clone(), fpd.clone(), fcq.clone());
    let t = std::thread::spawn(move || {
        let mut co = ConnectOptions::new(&pd, &cq);
        co.transport = Transport::Sctp;
        (0..n)
            .map(|_| c.connect(addr, &co))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let passive = (0..n)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            let lp = req.loop_index();
            let qp = req.accept(&Default::default(), tcq).expect("accepted");
            assert_eq!(qp.loop_index(), lp);
            qp
        })
        .collect();
    (t.join().unwrap().expect("connected"), passive)
}

/// Queue pairs per loop of a 2-loop context.
fn per_loop(qps: &[Qp]) -> [usize; 2] {
    let mut per = [0; 2];
    for q in qps {
        per[q.loop_index()] += 1;
    }
    per
}

/// A constructor of two contexts of `queues` loops each
/// (`Context::sim_pair_queues`, `Context::sim_pair_queues_soft`).
type Link = fn(u16, Polling, Option<&[usize]>) -> Result<(Context, Context), Error>;

/// Six SCTP connections between two 2-loop contexts, four opened by the
/// client and two by the server, over `link` (`sim_pair_queues` or
/// `sim_pair_queues_soft`): each end's loops own three (an active open
/// goes to the loops in turn on a port whose answers come back there, an
/// INIT is answered by the loop it reaches); Writes both ways, Sends and
/// Reads move the right octets through one region and CQs both loops
/// complete into; `sctp_stats` sums both loops; a graceful close from
/// either side ends every association.
fn six_sctp_connections(link: Link) {
    const N: usize = 6;
    let (server, client) = link(2, Polling::Adaptive, None).expect("pair");
    assert_eq!((server.loops(), client.loops()), (2, 2));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let s_region = spd.register(vec![0; N * PIECE], rw).unwrap();
    let c_region = cpd.register(vec![0; N * PIECE], rw).unwrap();
    let s_inbox = spd
        .register(vec![0; N * PIECE], Access::LOCAL_WRITE)
        .unwrap();

    let (c_act, s_pas) = connect_sctp((&client, &cpd, &ccq), (&server, &spd, &scq), 7400, 4);
    let (s_act, c_pas) = connect_sctp((&server, &spd, &scq), (&client, &cpd, &ccq), 7500, 2);
    // Active opens go to the loops in turn.
    assert_eq!(
        c_act.iter().map(Qp::loop_index).collect::<Vec<_>>(),
        [0, 1, 0, 1]
    );
    assert_eq!(s_act.iter().map(Qp::loop_index).collect::<Vec<_>>(), [0, 1]);
    // Connection k is `sqps[k]` at the server and `cqps[k]` at the client.
    let sqps: Vec<Qp> = s_pas.into_iter().chain(s_act).collect();
    let cqps: Vec<Qp> = c_act.into_iter().chain(c_pas).collect();
    assert_eq!(per_loop(&sqps), [3, 3]);
    assert_eq!(per_loop(&cqps), [3, 3]);
    // The SCTP counters sum both loops' (three connections each), and
    // the context's count of connections has them too, per loop.
    for ctx in [&server, &client] {
        let st = ctx.sctp_stats().unwrap().expect("an SCTP part");
        assert_eq!(st.connections, N, "{st:?}");
        assert!(st.host.rx_packets > 0 && st.host.tx_packets > 0, "{st:?}");
        let s = ctx.stats().unwrap();
        assert_eq!(s.connections, N);
        assert_eq!(
            s.loops.iter().map(|l| l.connections).collect::<Vec<_>>(),
            [3, 3]
        );
    }

    // RDMA Writes from every client connection into its piece of the
    // server's region.
    let csrc = cpd
        .register(vec![0; N * PIECE], Access::LOCAL_WRITE)
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
    for w in take(&ccq, N) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Write),
            "{w:?}"
        );
    }
    // Sends into receives posted on every server connection; each
    // completion names its queue pair.
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
    for w in take(&scq, N) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Recv),
            "{w:?}"
        );
        assert_eq!(w.byte_len as usize, PIECE);
        assert_eq!(w.qp, sqps[(w.wr_id - 100) as usize].id(), "{w:?}");
    }
    for w in take(&ccq, N) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Send),
            "{w:?}"
        );
    }
    // Writes from every server connection into the client's region.
    let ssrc = spd
        .register(vec![0; N * PIECE], Access::LOCAL_WRITE)
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
    for w in take(&scq, N) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Write),
            "{w:?}"
        );
    }
    for k in 0..N {
        // The client's Write k was placed before its Send k arrived.
        assert!(
            s_region.read(k * PIECE, PIECE).unwrap() == pattern(k, 1),
            "write {k} to the server"
        );
        // Connection k's Send landed in receive k (the passive ends were
        // paired with the active ones by their order above; the Send's
        // octets say which connection carried it).
        assert!(
            s_inbox.read(k * PIECE, PIECE).unwrap() == pattern(k, 2),
            "send {k}"
        );
        // A Write completes once SCTP holds it, not once placed: wait.
        let since = Instant::now();
        while c_region.read(k * PIECE, PIECE).unwrap() != pattern(k, 3) {
            assert!(since.elapsed() < T, "write {k} to the client");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    // RDMA Reads of every piece of the server's region.
    let sink = cpd
        .register(vec![0; N * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in cqps.iter().enumerate() {
        q.post_send(WorkRequest::Read {
            wr_id: 400 + k as u64,
            signaled: true,
            local: sink.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: s_region.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    for w in take(&ccq, N) {
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Read),
            "{w:?}"
        );
    }
    for k in 0..N {
        assert!(
            sink.read(k * PIECE, PIECE).unwrap() == pattern(k, 1),
            "read {k}"
        );
    }

    // Graceful close, half from each side: both ends of every connection
    // see it, and every association ends on both loops of both contexts.
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
    drop((cqps, sqps));
    assert_eq!(server.tracked_connections(), 0, "server");
    assert_eq!(client.tracked_connections(), 0, "client");
    let deadline = Instant::now() + T;
    while [&server, &client]
        .iter()
        .any(|c| c.sctp_stats().unwrap().map(|s| s.connections) != Some(0))
    {
        assert!(Instant::now() < deadline, "SCTP connections left");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// [`six_sctp_connections`] over a link whose RSS steers every frame to
/// its owner's queue.
#[test]
fn six_sctp_connections_over_two_loops() {
    six_sctp_connections(Context::sim_pair_queues);
}

/// [`six_sctp_connections`] over a link that delivers every frame for the
/// server on its queue 0: the server's loop 0 passes loop 1 the SCTP
/// packets of its associations (software steering by SCTP's ports).
#[test]
fn six_sctp_connections_over_software_steering() {
    six_sctp_connections(Context::sim_pair_queues_soft);
    let (server, client) = Context::sim_pair_queues_soft(2, Polling::Adaptive, None).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let (cqps, sqps) = connect_sctp((&client, &cpd, &ccq), (&server, &spd, &scq), 7600, 2);
    assert_eq!(per_loop(&sqps), [1, 1]);
    assert_eq!(per_loop(&cqps), [1, 1]);
    let ss = server.stats().unwrap();
    let (l0, l1) = (&ss.loops[0], &ss.loops[1]);
    assert_eq!(l1.poll_loop.rx_frames, 0, "{:?}", l1.poll_loop);
    assert!(l0.poll_loop.steered_out > 0, "{:?}", l0.poll_loop);
    assert!(l1.poll_loop.steered_in > 0, "{:?}", l1.poll_loop);
}

/// A Send with Invalidate that one loop receives over SCTP stops the
/// region for the SCTP connections of the other loop too (as
/// `a_remote_invalidation_on_one_loop_stops_the_region_on_the_other`
/// over TCP).
#[test]
fn an_sctp_remote_invalidation_on_one_loop_stops_the_region_on_the_other() {
    let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None).expect("pair");
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(vec![0; PIECE], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let (cqps, sqps) = connect_sctp((&client, &cpd, &ccq), (&server, &spd, &scq), 7300, 2);
    // Connection k is cqps[k] and sqps[k]; the active opens went to loops
    // 0 and 1, and each passive end shares its loop number.
    assert_eq!(cqps.iter().map(Qp::loop_index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(sqps.iter().map(Qp::loop_index).collect::<Vec<_>>(), [0, 1]);
    let ((s0, c0), c1) = ((&sqps[0], &cqps[0]), &cqps[1]);
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

/// `ConnectOptions::loop_index` puts a connection on the loop it names:
/// a refused attempt reports its loop (`Connecting::loop_index`), the
/// attempt made again there lands there, the loops' turn is not used,
/// and a loop the context lacks is refused.
#[test]
fn a_connection_on_the_loop_it_names() {
    let (a, b) = Context::sim_pair_queues(2, Polling::Adaptive, None).unwrap();
    let (apd, bpd) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (acq, bcq) = (a.create_cq(16), b.create_cq(16));
    let to = SocketAddrV4::new(a.addr(), 7300);
    let mut co = ConnectOptions::new(&bpd, &bcq);
    co.timeout = T;
    co.loop_index = Some(2);
    assert!(matches!(
        b.connect_start(to, &co),
        Err(Error::InvalidArgument(why)) if why.contains("loop_index")
    ));
    // Nobody listens yet: refused, on the loop named.
    co.loop_index = Some(1);
    let refused = b.connect_start(to, &co).unwrap();
    assert_eq!(refused.loop_index(), 1);
    assert!(matches!(refused.finish(), Err(Error::ConnectionRefused)));
    let listener = a.listen(7300, &ListenOptions::new(&apd)).unwrap();
    let mut got = Vec::new();
    for want in [1, 1, 0, 1] {
        co.loop_index = Some(want);
        let started = b.connect_start(to, &co).unwrap();
        assert_eq!(started.loop_index(), want);
        let req = listener.get_request(T).unwrap();
        let server = req.accept(&Default::default(), &acq).unwrap();
        let client = started.finish().unwrap();
        assert_eq!(client.loop_index(), want, "the client's end");
        got.push((client, server));
    }
    assert_eq!(split(&b), vec![1, 3], "connections per client loop");
    // Without a loop named, the loops' turn goes on as before.
    co.loop_index = None;
    let turn: Vec<usize> = (0..2)
        .map(|_| {
            let started = b.connect_start(to, &co).unwrap();
            let i = started.loop_index();
            let req = listener.get_request(T).unwrap();
            let server = req.accept(&Default::default(), &acq).unwrap();
            got.push((started.finish().unwrap(), server));
            i
        })
        .collect();
    assert_ne!(turn[0], turn[1], "in turn: {turn:?}");
    // Every connection carries a Send on the loops it is on.
    let src = bpd
        .register(vec![0; got.len() * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    let inbox = apd
        .register(vec![0; got.len() * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, (c, s)) in got.iter().enumerate() {
        s.post_recv(k as u64, inbox.sge((k * PIECE) as u64, PIECE as u32))
            .unwrap();
        src.write(k * PIECE, &pattern(k, 3)).unwrap();
        c.post_send(WorkRequest::Send {
            wr_id: k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, PIECE as u32).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
        let w = &take(&acq, 1)[0];
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Recv),
            "{w:?}"
        );
        assert_eq!(w.qp, s.id());
        assert_eq!(inbox.read(k * PIECE, PIECE).unwrap(), pattern(k, 3));
        let w = &take(&bcq, 1)[0];
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Send),
            "{w:?}"
        );
    }
}
