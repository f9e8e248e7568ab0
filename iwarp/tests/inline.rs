//! Run to completion from the application's thread ([`Polling::Inline`]):
//! the thread that posts and polls drives the stack, a process confined
//! to one CPU works, and the keeper carries on while the application
//! does not call in. Over the simulated link.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Error, HookStatus, ListenOptions, Polling,
    WcOpcode, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

struct Pair {
    server: Context,
    client: Context,
    sqp: iwarp::Qp,
    cqp: iwarp::Qp,
    scq: iwarp::Cq,
    ccq: iwarp::Cq,
    inbox: iwarp::Mr,
    src: iwarp::Mr,
    /// The server's source: readable by the peer (RDMA Read).
    sbuf: iwarp::Mr,
}

/// Two inline contexts, connected (setup from two threads: connect waits
/// for the server application's accept).
fn connected(port: u16) -> Pair {
    let (server, client) = Context::sim_pair_with(Polling::Inline, None);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let inbox = spd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let sbuf = spd
        .register(vec![9; 64], Access::LOCAL_READ | Access::REMOTE_READ)
        .unwrap();
    let src = cpd
        .register(vec![0; 4096], Access::LOCAL_READ | Access::LOCAL_WRITE)
        .unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    Pair {
        server,
        client,
        sqp,
        cqp,
        scq,
        ccq,
        inbox,
        src,
        sbuf,
    }
}

fn send(qp: &iwarp::Qp, mr: &iwarp::Mr, wr_id: u64, len: u32) {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: mr.sge(0, len).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

/// Busy-poll `cq` (each empty poll runs a round on this thread) until a
/// completion, within `T`.
fn spin(cq: &iwarp::Cq) -> iwarp::Wc {
    let since = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one() {
            return wc;
        }
        assert!(since.elapsed() < T, "no completion within {T:?}");
    }
}

/// Send ping-pong, both ends on one thread, the process's threads (this
/// one and both keepers, which inherit its CPU mask) on one CPU. Inline,
/// the thread that polls is the one that moves the frames (with loop
/// threads, each message needs the CPU handed over: `busy_one_cpu.rs`).
#[test]
fn one_thread_on_one_cpu_runs_both_ends() {
    // Pinned before the contexts exist: their keepers inherit the mask.
    assert!(core_affinity::set_for_current(core_affinity::CoreId {
        id: 0
    }));
    let p = connected(9401);
    const N: u64 = 2_000;
    for i in 0..N {
        p.sqp.post_recv(i, p.inbox.sge(0, 64)).unwrap();
        send(&p.cqp, &p.src, i, 64);
        let wc = spin(&p.scq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (i, Some(WcOpcode::Recv), 64)
        );
        assert!(spin(&p.ccq).status.is_ok());
        // And back.
        p.cqp.post_recv(i, p.src.sge(0, 64)).unwrap();
        send(&p.sqp, &p.sbuf, i, 64);
        let wc = spin(&p.ccq);
        assert_eq!((wc.wr_id, wc.opcode), (i, Some(WcOpcode::Recv)));
        assert!(spin(&p.scq).status.is_ok());
    }
    assert_eq!(p.src.read(0, 64).unwrap(), vec![9; 64]);
    for ctx in [&p.server, &p.client] {
        let st = ctx.stats().unwrap().poll_loop;
        // Per round trip each end runs a round for its Send (a receive
        // post runs none) and one more from a poll that found its CQ
        // empty (the peer's message was still on the link): 2N when
        // nothing else runs. A keeper takes over while this thread is
        // preempted for its grace (500 µs) and runs some of those rounds
        // (with builds running beside it: 39 takeovers and 3,985
        // application rounds in one run, 866 and 3,266 in another). Most
        // rounds still ran on this thread: the polls drive.
        assert!(st.app_rounds >= N, "{st:?}");
        assert!(st.app_rounds <= st.rounds, "{st:?}");
    }
}

/// The application posts an RDMA Read, then sleeps on the CQ's
/// descriptor without polling: nobody drives but the keepers, which carry
/// the exchange (the server's application never calls in; the client's
/// completion needs the server's answer) and fire the descriptor.
#[test]
fn the_keeper_drives_while_the_application_sleeps() {
    let p = connected(9402);
    let before = p.client.stats().unwrap().poll_loop.keeper_takeovers;
    p.ccq.req_notify().unwrap();
    p.cqp
        .post_send(WorkRequest::Read {
            wr_id: 7,
            signaled: true,
            local: p.src.sge(0, 64).into(),
            remote_stag: p.sbuf.stag(),
            remote_to: 0,
        })
        .unwrap();
    assert!(p.ccq.wait_notify(T).unwrap(), "no completion event");
    p.ccq.ack_notify();
    let wc = p.ccq.poll_one().unwrap();
    assert_eq!((wc.wr_id, wc.opcode), (7, Some(WcOpcode::Read)));
    assert!(wc.status.is_ok(), "{wc:?}");
    assert_eq!(p.src.read(0, 64).unwrap(), vec![9; 64]);
    assert!(p.server.stats().unwrap().poll_loop.keeper_takeovers > 0);
    assert!(p.client.stats().unwrap().poll_loop.keeper_takeovers > before);
    let _ = (&p.inbox, &p.scq, &p.sqp);
}

/// `Cq::wait` on an inline context sleeps in the device's wait while it
/// drives: a completion that needs the peer's answer (an RDMA Read)
/// arrives while this thread waits, and setup calls work from it too.
#[test]
fn wait_and_setup_calls_drive_the_loop() {
    let p = connected(9403);
    p.cqp
        .post_send(WorkRequest::Read {
            wr_id: 3,
            signaled: true,
            local: p.src.sge(100, 64).into(),
            remote_stag: p.sbuf.stag(),
            remote_to: 0,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!((wc.wr_id, wc.opcode), (3, Some(WcOpcode::Read)), "{wc:?}");
    assert!(wc.status.is_ok(), "{wc:?}");
    assert_eq!(p.src.read(100, 64).unwrap(), vec![9; 64]);
    // A setup call from this thread: registering waits for the loop's
    // answer, which this thread drives.
    let mr = p.client.alloc_pd().unwrap();
    let m = mr.register(vec![1; 16], Access::LOCAL_WRITE).unwrap();
    assert_eq!(m.len(), 16);
    let _ = (&p.inbox, &p.scq);
}

/// A hook runs inside a round on whatever thread drives: calls that
/// wait for the loop refuse there, as on a loop thread.
#[test]
fn calls_that_wait_refuse_inside_a_hook() {
    let (ctx, _peer) = Context::sim_pair_with(Polling::Inline, None);
    let pd = ctx.alloc_pd().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    ctx.run_in_loop(move || {
        let _ = tx.send(pd.register(vec![0; 8], Access::LOCAL_WRITE).err());
        HookStatus::Done
    })
    .unwrap();
    let since = Instant::now();
    let got = loop {
        // Drives the loop (an inline context's setup-free call).
        let _ = ctx.tracked_connections();
        if let Ok(e) = rx.try_recv() {
            break e;
        }
        assert!(since.elapsed() < T);
    };
    assert!(matches!(got, Some(Error::InLoop)), "{got:?}");
}

/// A list of work requests is posted in order as one doorbell; receive
/// posts, which run no round on an inline context, are in place before
/// the frames that need them all the same.
#[test]
fn a_list_of_work_requests_is_one_doorbell() {
    let p = connected(9404);
    for i in 0..3 {
        p.sqp.post_recv(i, p.inbox.sge(i * 64, 64)).unwrap();
    }
    let wr = |wr_id, len| WorkRequest::Send {
        wr_id,
        signaled: true,
        local: p.src.sge(0, len).into(),
        solicited: false,
        invalidate: None,
    };
    assert_eq!(
        p.cqp
            .post_send_list([wr(10, 8), wr(11, 16), wr(12, 24)])
            .unwrap(),
        3
    );
    for (id, len) in [(0, 8), (1, 16), (2, 24)] {
        let wc = p.scq.wait(T).unwrap();
        assert_eq!((wc.wr_id, wc.byte_len), (id, len));
    }
    for id in 10..13 {
        assert_eq!(p.ccq.wait(T).unwrap().wr_id, id);
    }
}
