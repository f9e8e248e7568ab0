//! Inline contexts of several loops (`Polling::Inline` over
//! `sim_pair_queues`) whose keepers never take over
//! (`Context::sim_pair_queues_keeperless`): every round is an application
//! thread's, so each test stalls, and fails at its timeout, if the
//! threads it runs do not drive a loop that its work needs.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, ListenOptions, Listener, Mr, Qp, Wc,
    WcOpcode, WorkRequest,
};

const T: Duration = Duration::from_secs(20);
const PIECE: usize = 256;

fn wait(cq: &Cq) -> Wc {
    let wc = cq.wait(T).expect("a completion within the timeout");
    assert!(wc.status.is_ok(), "{wc:?}");
    wc
}

/// Busy-poll `cq` with [`Cq::poll_one`] alone (which drives only the
/// loops whose queue pairs complete on it, no other) until a completion.
fn spin(cq: &Cq) -> Wc {
    let since = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one() {
            assert!(wc.status.is_ok(), "{wc:?}");
            return wc;
        }
        assert!(since.elapsed() < T, "no completion within {T:?}");
    }
}

fn pattern(k: usize, salt: u8) -> Vec<u8> {
    (0..PIECE)
        .map(|i| (i as u8).wrapping_mul(13) ^ (k as u8) ^ salt)
        .collect()
}

fn write(qp: &Qp, src: &Mr, at: usize, dst: &Mr, to: usize, wr_id: u64) {
    qp.post_send(WorkRequest::Write {
        wr_id,
        signaled: true,
        local: src.sge(at as u64, PIECE as u32).into(),
        remote_stag: dst.stag(),
        remote_to: to as u64,
    })
    .unwrap();
}

fn send(qp: &Qp, src: &Mr, at: usize, wr_id: u64) {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: src.sge(at as u64, 16).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

/// `n` requests taken on a thread of the server's (its only driver while
/// it waits), each accepted with the CQ of the loop it reached.
fn accept_on(listener: Listener, n: usize, cqs: Vec<Cq>) -> std::thread::JoinHandle<Vec<Qp>> {
    std::thread::spawn(move || {
        (0..n)
            .map(|_| {
                let req = listener.get_request(T).unwrap();
                let cq = cqs[req.loop_index()].clone();
                req.accept(&AcceptOptions::default(), &cq).unwrap()
            })
            .collect()
    })
}

/// No keeper ran a round on any loop of `ctx`, and every loop ran some
/// (application threads drove them all).
fn driven_by_applications(ctx: &Context) {
    let s = ctx.stats().unwrap();
    for (i, l) in s.loops.iter().enumerate() {
        assert_eq!(
            l.poll_loop.keeper_takeovers, 0,
            "loop {i}: {:?}",
            l.poll_loop
        );
        assert!(l.poll_loop.app_rounds > 0, "loop {i}: {:?}", l.poll_loop);
        assert_eq!(l.poll_loop.app_rounds, l.poll_loop.rounds, "loop {i}");
    }
}

/// Two connections, one per loop at each end, each end's queue pairs on
/// a CQ of their loop; at each end a thread per loop, all four at once,
/// ping-pongs a Write followed by a Send both ways, 50 times, each
/// thread waiting on its own CQ. With software steering every frame for
/// the server arrives on its loop 0 and its loop 1's thread drives loop 0
/// too (a CQ there drives every loop).
fn two_threads_a_side_on_their_own_loops(soft: bool, port: u16) {
    const ROUNDS: usize = 50;
    let (server, client) = Context::sim_pair_queues_keeperless(2, soft).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let scqs = vec![server.create_cq(64), server.create_cq(64)];
    let ccqs = [client.create_cq(64), client.create_cq(64)];
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    // Pieces of each end's region: loop l's source at l, what the peer
    // Writes at 2 + l, its receive buffer at 4 + l.
    let (src, dst, rcv) = (
        |l: usize| l * PIECE,
        |l: usize| (2 + l) * PIECE,
        |l: usize| ((4 + l) * PIECE) as u64,
    );
    let (sreg, creg) = (
        spd.register(vec![0; 6 * PIECE], rw).unwrap(),
        cpd.register(vec![0; 6 * PIECE], rw).unwrap(),
    );
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let accepting = accept_on(listener, 2, scqs.clone());
    let to = SocketAddrV4::new(server.addr(), port);
    let cqps: Vec<Qp> = ccqs
        .iter()
        .map(|cq| client.connect(to, &ConnectOptions::new(&cpd, cq)).unwrap())
        .collect();
    let mut sqps = accepting.join().unwrap();
    sqps.sort_by_key(|q| q.loop_index());
    // The client's connections go to its loops in turn; the server's
    // land on the same loop numbers.
    assert_eq!(cqps.iter().map(Qp::loop_index).collect::<Vec<_>>(), [0, 1]);
    assert_eq!(sqps.iter().map(Qp::loop_index).collect::<Vec<_>>(), [0, 1]);
    // One receive posted ahead on each end, before any thread sends.
    for (l, (c, s)) in cqps.iter().zip(&sqps).enumerate() {
        c.post_recv(0, creg.sge(rcv(l), 16)).unwrap();
        s.post_recv(0, sreg.sge(rcv(l), 16)).unwrap();
    }
    let mut threads = Vec::new();
    for (l, (cqp, sqp)) in cqps.into_iter().zip(sqps).enumerate() {
        // The client's side of loop `l`: Write its pattern into the
        // server's region, then Send; take the server's answer.
        let (cq, mine, peer) = (ccqs[l].clone(), creg.clone(), sreg.clone());
        threads.push(std::thread::spawn(move || {
            for r in 0..ROUNDS {
                mine.write(src(l), &pattern(r, l as u8)).unwrap();
                write(&cqp, &mine, src(l), &peer, dst(l), 1);
                send(&cqp, &mine, src(l), 2);
                // Its Write, its Send, and the server's answer.
                let got: Vec<Wc> = (0..3).map(|_| wait(&cq)).collect();
                assert!(got.iter().all(|w| w.qp == cqp.id()), "{got:?}");
                let mut ops: Vec<_> = got.iter().map(|w| w.opcode).collect();
                ops.sort_by_key(|o| format!("{o:?}"));
                assert_eq!(
                    ops,
                    [
                        Some(WcOpcode::Recv),
                        Some(WcOpcode::Send),
                        Some(WcOpcode::Write)
                    ]
                );
                // The server's Write came before its Send.
                assert_eq!(
                    mine.read(dst(l), PIECE).unwrap(),
                    pattern(r, 0x80 | l as u8)
                );
                cqp.post_recv(0, mine.sge(rcv(l), 16)).unwrap();
            }
            (cqp, l)
        }));
        // The server's side: wait for the Send, check the Write before
        // it, answer alike.
        let (cq, mine, peer) = (scqs[l].clone(), sreg.clone(), creg.clone());
        threads.push(std::thread::spawn(move || {
            let mut own = 0;
            for r in 0..ROUNDS {
                loop {
                    let wc = wait(&cq);
                    assert_eq!(wc.qp, sqp.id(), "{wc:?}");
                    if wc.opcode == Some(WcOpcode::Recv) {
                        break;
                    }
                    own += 1;
                }
                assert_eq!(mine.read(dst(l), PIECE).unwrap(), pattern(r, l as u8));
                sqp.post_recv(0, mine.sge(rcv(l), 16)).unwrap();
                mine.write(src(l), &pattern(r, 0x80 | l as u8)).unwrap();
                write(&sqp, &mine, src(l), &peer, dst(l), 1);
                send(&sqp, &mine, src(l), 2);
            }
            while own < 2 * ROUNDS {
                let wc = wait(&cq);
                assert_ne!(wc.opcode, Some(WcOpcode::Recv), "{wc:?}");
                own += 1;
            }
            (sqp, l)
        }));
    }
    let held: Vec<(Qp, usize)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    driven_by_applications(&server);
    driven_by_applications(&client);
    drop(held);
}

#[test]
fn two_threads_a_side_on_their_own_loops_link_steering() {
    two_threads_a_side_on_their_own_loops(false, 7600);
}

#[test]
fn two_threads_a_side_on_their_own_loops_software_steering() {
    two_threads_a_side_on_their_own_loops(true, 7601);
}

/// One CQ at each end for two queue pairs on different loops: a thread
/// busy-polling it ([`Cq::poll_one`], which drives only the CQ's own
/// loops) sees the completions of both, Writes and Sends from the
/// client, Receives at the server.
#[test]
fn a_cq_shared_by_queue_pairs_on_two_loops_drives_both() {
    let (server, client) = Context::sim_pair_queues_keeperless(2, false).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let (sreg, creg) = (
        spd.register(vec![0; 4 * PIECE], rw).unwrap(),
        cpd.register(vec![0; 4 * PIECE], rw).unwrap(),
    );
    let listener = server.listen(7602, &ListenOptions::new(&spd)).unwrap();
    let accepting = accept_on(listener, 2, vec![scq.clone(), scq.clone()]);
    let to = SocketAddrV4::new(server.addr(), 7602);
    let o = ConnectOptions::new(&cpd, &ccq);
    let cqps = [
        client.connect(to, &o).unwrap(),
        client.connect(to, &o).unwrap(),
    ];
    let sqps = accepting.join().unwrap();
    let mut loops: Vec<usize> = sqps.iter().map(Qp::loop_index).collect();
    loops.sort_unstable();
    assert_eq!(loops, [0, 1]);
    assert_ne!(cqps[0].loop_index(), cqps[1].loop_index());
    for (k, s) in sqps.iter().enumerate() {
        s.post_recv(k as u64, sreg.sge((2 + k) as u64 * PIECE as u64, 16))
            .unwrap();
    }
    let server_side = std::thread::spawn(move || {
        let mut from: Vec<usize> = (0..2).map(|_| spin(&scq).qp).collect();
        from.sort_unstable();
        let mut ids: Vec<usize> = sqps.iter().map(Qp::id).collect();
        ids.sort_unstable();
        assert_eq!(from, ids, "a Receive from each queue pair");
        (sqps, scq)
    });
    for (k, q) in cqps.iter().enumerate() {
        creg.write(k * PIECE, &pattern(k, 7)).unwrap();
        write(q, &creg, k * PIECE, &sreg, k * PIECE, 10 + k as u64);
        send(q, &creg, k * PIECE, 20 + k as u64);
    }
    let mut done: Vec<(usize, u64)> = (0..4)
        .map(|_| spin(&ccq))
        .map(|w| (w.qp, w.wr_id))
        .collect();
    done.sort_unstable();
    let mut want: Vec<(usize, u64)> = cqps
        .iter()
        .enumerate()
        .flat_map(|(k, q)| [(q.id(), 10 + k as u64), (q.id(), 20 + k as u64)])
        .collect();
    want.sort_unstable();
    assert_eq!(done, want);
    let (_sqps, _scq) = server_side.join().unwrap();
    for k in 0..2 {
        assert_eq!(sreg.read(k * PIECE, PIECE).unwrap(), pattern(k, 7));
    }
    driven_by_applications(&server);
    driven_by_applications(&client);
}

/// The server's one thread accepts both connections (the one on loop 1
/// too: its wait drives every loop), then waits on the CQ of its loop-0
/// queue pair only. A Write the client makes on the loop-1 connection,
/// and a Read of what it wrote, complete only once the server's loop 1
/// has placed the Write and answered the Read: that loop is driven by
/// the waiting thread in passing, though no thread polls a CQ of it.
#[test]
fn a_waiting_thread_drives_the_loop_nobody_polls() {
    let (server, client) = Context::sim_pair_queues_keeperless(2, false).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq0, scq1) = (server.create_cq(16), server.create_cq(16));
    let (ccq0, ccq1) = (client.create_cq(16), client.create_cq(16));
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ;
    let (sreg, creg) = (
        spd.register(vec![0; 4 * PIECE], rw).unwrap(),
        cpd.register(vec![0; 4 * PIECE], rw).unwrap(),
    );
    let listener = server.listen(7603, &ListenOptions::new(&spd)).unwrap();
    let (sreg2, scq0b) = (sreg.clone(), scq0.clone());
    let server_side = std::thread::spawn(move || {
        let mut qps: Vec<Qp> = (0..2)
            .map(|_| {
                let req = listener.get_request(T).unwrap();
                let cq = if req.loop_index() == 0 { &scq0b } else { &scq1 };
                req.accept(&AcceptOptions::default(), cq).unwrap()
            })
            .collect();
        qps.sort_by_key(|q| q.loop_index());
        qps[0]
            .post_recv(1, sreg2.sge(3 * PIECE as u64, 16))
            .unwrap();
        // Only this CQ (loop 0's) from here on.
        let wc = scq0b.wait(T).expect("the client's Send on loop 0");
        assert_eq!((wc.opcode, wc.qp), (Some(WcOpcode::Recv), qps[0].id()));
        (qps, scq1)
    });
    let to = SocketAddrV4::new(server.addr(), 7603);
    client.inner.next_loop.store(0, Ordering::Relaxed);
    let q0 = client
        .connect(to, &ConnectOptions::new(&cpd, &ccq0))
        .unwrap();
    let q1 = client
        .connect(to, &ConnectOptions::new(&cpd, &ccq1))
        .unwrap();
    assert_eq!((q0.loop_index(), q1.loop_index()), (0, 1));
    // Give the server's thread time to post its receive and sit in its
    // wait on loop 0's CQ.
    std::thread::sleep(Duration::from_millis(50));
    creg.write(0, &pattern(1, 3)).unwrap();
    write(&q1, &creg, 0, &sreg, PIECE, 5);
    // Read it back: the response comes from the server's loop 1, after
    // the Write is placed (one connection, in order).
    q1.post_send(WorkRequest::Read {
        wr_id: 6,
        signaled: true,
        local: creg.sge(PIECE as u64, PIECE as u32).into(),
        remote_stag: sreg.stag(),
        remote_to: PIECE as u64,
    })
    .unwrap();
    let mut done: Vec<_> = (0..2)
        .map(|_| wait(&ccq1))
        .map(|w| (w.wr_id, w.opcode))
        .collect();
    done.sort_unstable_by_key(|d| d.0);
    assert_eq!(
        done,
        [(5, Some(WcOpcode::Write)), (6, Some(WcOpcode::Read))]
    );
    assert_eq!(creg.read(PIECE, PIECE).unwrap(), pattern(1, 3));
    assert_eq!(sreg.read(PIECE, PIECE).unwrap(), pattern(1, 3));
    send(&q0, &creg, 0, 7);
    assert_eq!(wait(&ccq0).wr_id, 7);
    let (sqps, _scq1) = server_side.join().unwrap();
    assert_eq!(sqps[1].loop_index(), 1);
    driven_by_applications(&server);
    driven_by_applications(&client);
}

/// With software steering every frame for the first context arrives on
/// its loop 0's queue: a thread busy-polling ([`Cq::poll_one`]) the CQ of
/// a connection on loop 1 drives loop 0 too, which passes the frames on.
#[test]
fn with_software_steering_a_cq_drives_the_loop_its_frames_arrive_on() {
    let (server, client) = Context::sim_pair_queues_keeperless(2, true).unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let (sreg, creg) = (
        spd.register(vec![0; PIECE], Access::LOCAL_WRITE).unwrap(),
        cpd.register(pattern(2, 9), Access::LOCAL_WRITE).unwrap(),
    );
    let listener = server.listen(7604, &ListenOptions::new(&spd)).unwrap();
    let server_side = std::thread::spawn(move || {
        let req = listener.get_request(T).unwrap();
        let qp = req.accept(&AcceptOptions::default(), &scq).unwrap();
        qp.post_recv(1, sreg.sge(0, 16)).unwrap();
        // Only this CQ, whose one queue pair is on loop 1, from here on.
        let wc = spin(&scq);
        assert_eq!((wc.opcode, wc.qp), (Some(WcOpcode::Recv), qp.id()));
        assert_eq!(sreg.read(0, 16).unwrap(), pattern(2, 9)[..16]);
        qp
    });
    client.inner.next_loop.store(1, Ordering::Relaxed);
    let to = SocketAddrV4::new(server.addr(), 7604);
    let q = client
        .connect(to, &ConnectOptions::new(&cpd, &ccq))
        .unwrap();
    assert_eq!(q.loop_index(), 1);
    // Give the server's thread time to post its receive.
    std::thread::sleep(Duration::from_millis(50));
    send(&q, &creg, 0, 3);
    assert_eq!(spin(&ccq).wr_id, 3);
    let sqp = server_side.join().unwrap();
    assert_eq!(sqp.loop_index(), 1);
    let s = server.stats().unwrap();
    // Loop 1 received nothing from its own queue: all through loop 0.
    assert!(s.loops[1].poll_loop.steered_in > 0, "{:?}", s.loops[1]);
    assert_eq!(s.loops[1].poll_loop.rx_frames, 0, "{:?}", s.loops[1]);
    driven_by_applications(&server);
    driven_by_applications(&client);
}

/// A connect refused for its arguments (here private data too long for
/// SCTP) takes no loop: the CQ it named drives no loop for it, and the
/// next connection still goes to loop 0.
#[test]
fn a_refused_connect_leaves_its_cq_and_the_loop_turn_alone() {
    let (server, client) = Context::sim_pair_queues_keeperless(2, false).unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(16);
    let mut opts = ConnectOptions::new(&cpd, &ccq);
    opts.transport = crate::Transport::Sctp;
    opts.mpa.private_data = vec![0; 510];
    let to = SocketAddrV4::new(server.addr(), 7605);
    let err = client.connect_start(to, &opts).unwrap_err();
    assert!(err.to_string().contains("508"), "{err}");
    let drive = ccq
        .drive
        .as_ref()
        .expect("an inline context's CQ drives loops");
    assert_eq!(drive.marked(), [0, 0], "{drive:?}");
    assert_eq!(client.inner.next_loop.load(Ordering::Relaxed), 0);
}
