//! A context delays a received segment's ACK by one round (TCP's delayed
//! ACK, `iwarp`'s `ACK_ROUND`): a reply posted from the completion
//! carries it, so a ping-pong costs two frames per round trip instead of
//! four, with a loop thread and inline alike. Over the simulated link;
//! frames are the poll loops' own counters.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, HookStatus, ListenOptions, Polling, WcOpcode,
    WorkRequest,
};

const T: Duration = Duration::from_secs(10);
const N: u64 = 500;

struct Pair {
    server: Context,
    client: Context,
    sqp: Arc<iwarp::Qp>,
    cqp: Arc<iwarp::Qp>,
    scq: iwarp::Cq,
    ccq: iwarp::Cq,
    s_buf: iwarp::Mr,
    c_buf: iwarp::Mr,
}

fn connected(polling: Polling, port: u16) -> Pair {
    let (server, client) = Context::sim_pair_with(polling, None);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let rw = Access::LOCAL_READ | Access::LOCAL_WRITE;
    let s_buf = spd.register(vec![0; 64], rw).unwrap();
    let c_buf = cpd.register(vec![0; 64], rw).unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    let sqp = Arc::new(req.accept(&AcceptOptions::default(), &scq).unwrap());
    let cqp = Arc::new(t.join().unwrap().unwrap());
    Pair {
        server,
        client,
        sqp,
        cqp,
        scq,
        ccq,
        s_buf,
        c_buf,
    }
}

fn send(qp: &iwarp::Qp, mr: &iwarp::Mr, wr_id: u64) {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: mr.sge(0, 8).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

/// Frames both loops sent so far.
fn frames(p: &Pair) -> u64 {
    [&p.server, &p.client]
        .iter()
        .map(|c| c.stats().unwrap().poll_loop.tx_frames)
        .sum()
}

/// Wait for one completion on `cq` (each empty poll of an inline context
/// runs a round on this thread).
fn spin(cq: &iwarp::Cq) -> iwarp::Wc {
    let since = Instant::now();
    loop {
        if let Some(wc) = cq.poll_one() {
            assert!(wc.status.is_ok(), "{wc:?}");
            return wc;
        }
        assert!(since.elapsed() < T, "no completion within {T:?}");
        std::thread::yield_now();
    }
}

/// Send ping-pong run inside both poll loops (hooks answer from the
/// completion, as `iwarp-perf`'s in-loop tests do): each Send's ACK rides
/// on the answer.
#[test]
fn a_loop_threads_ping_pong_carries_its_acks_on_the_replies() {
    let p = connected(Polling::Adaptive, 9501);
    p.sqp.post_recv(0, p.s_buf.sge(0, 8)).unwrap();
    p.cqp.post_recv(0, p.c_buf.sge(0, 8)).unwrap();
    let before = frames(&p);
    // Server: answer every receive.
    let (q, cq, buf) = (p.sqp.clone(), p.scq.clone(), p.s_buf.clone());
    let mut answered = 0;
    p.server
        .run_in_loop(move || {
            while let Some(wc) = cq.poll_one() {
                assert!(wc.status.is_ok(), "{wc:?}");
                if wc.opcode == Some(WcOpcode::Recv) {
                    q.post_recv(0, buf.sge(0, 8)).unwrap();
                    send(&q, &buf, 1);
                    answered += 1;
                    if answered == N {
                        return HookStatus::Done;
                    }
                }
            }
            HookStatus::Busy
        })
        .unwrap();
    let (q, cq, buf) = (p.cqp.clone(), p.ccq.clone(), p.c_buf.clone());
    let (done_tx, done_rx) = mpsc::channel();
    let mut i = 0;
    send(&p.cqp, &p.c_buf, 0);
    p.client
        .run_in_loop(move || {
            while let Some(wc) = cq.poll_one() {
                assert!(wc.status.is_ok(), "{wc:?}");
                if wc.opcode == Some(WcOpcode::Recv) {
                    i += 1;
                    if i == N {
                        let _ = done_tx.send(());
                        return HookStatus::Done;
                    }
                    q.post_recv(0, buf.sge(0, 8)).unwrap();
                    send(&q, &buf, 0);
                }
            }
            HookStatus::Busy
        })
        .unwrap();
    done_rx.recv_timeout(T * 3).unwrap();
    // The last answer's ACK goes a round after it arrives.
    let since = Instant::now();
    while frames(&p) - before < 2 * N + 1 && since.elapsed() < T {
        std::thread::sleep(Duration::from_millis(1));
    }
    let sent = frames(&p) - before;
    // Two frames per round trip, the last ACK, and a few spare for an
    // answer posted after its round's transmit (a hook runs after it).
    assert!(
        (2 * N + 1..=2 * N + N / 10).contains(&sent),
        "{sent} frames for {N} round trips"
    );
}

/// Nobody answers: the ACK still goes (a round later) and the signaled
/// Send, which completes on its acknowledgement, completes. Inline, the
/// receiver's thread keeps polling its CQ (each empty poll is a round).
fn unanswered(polling: Polling, port: u16) {
    let p = connected(polling, port);
    for i in 0..20 {
        p.sqp.post_recv(i, p.s_buf.sge(0, 8)).unwrap();
        send(&p.cqp, &p.c_buf, i);
        assert_eq!(spin(&p.scq).opcode, Some(WcOpcode::Recv));
        // Inline: the client's loop runs only when this thread polls its
        // CQ, the server's only when this thread polls the server's CQ.
        let since = Instant::now();
        let wc = loop {
            if let Some(wc) = p.ccq.poll_one() {
                break wc;
            }
            assert!(p.scq.poll_one().is_none());
            assert!(since.elapsed() < T, "the Send was never acknowledged");
        };
        assert!(wc.status.is_ok(), "{wc:?}");
        assert_eq!(wc.opcode, Some(WcOpcode::Send));
    }
}

#[test]
fn an_unanswered_message_is_still_acknowledged() {
    unanswered(Polling::Adaptive, 9502);
}

#[test]
fn an_unanswered_message_is_still_acknowledged_inline() {
    unanswered(Polling::Inline, 9504);
}

/// A receiver's thread that stops calling after its receive leaves the
/// owed ACK to the keeper: the sender's Send still completes, within the
/// keeper's grace and a round, with nothing else driving the receiver.
#[test]
fn an_inline_receiver_that_stops_calling_is_acknowledged_by_its_keeper() {
    let p = connected(Polling::Inline, 9505);
    for i in 0..5 {
        p.sqp.post_recv(i, p.s_buf.sge(0, 8)).unwrap();
        send(&p.cqp, &p.c_buf, i);
        assert_eq!(spin(&p.scq).opcode, Some(WcOpcode::Recv));
        // Only the client's CQ is polled from now on.
        assert_eq!(spin(&p.ccq).opcode, Some(WcOpcode::Send));
    }
}

/// Inline, each context's own thread answers from its CQ (as perftest's
/// `-R` mode and verbs programs do): the answer's post carries the ACK,
/// two frames per round trip. With the ACK at once it was four.
#[test]
fn an_inline_ping_pong_carries_its_acks_on_the_replies() {
    let p = connected(Polling::Inline, 9503);
    p.sqp.post_recv(0, p.s_buf.sge(0, 8)).unwrap();
    p.cqp.post_recv(0, p.c_buf.sge(0, 8)).unwrap();
    let before = frames(&p);
    let (q, cq, buf) = (p.sqp.clone(), p.scq.clone(), p.s_buf.clone());
    let server = std::thread::spawn(move || {
        let (mut answered, mut sends) = (0, 0);
        while answered < N {
            match spin(&cq).opcode {
                Some(WcOpcode::Recv) => {
                    q.post_recv(0, buf.sge(0, 8)).unwrap();
                    send(&q, &buf, 1);
                    answered += 1;
                }
                Some(WcOpcode::Send) => sends += 1,
                other => panic!("unexpected completion {other:?}"),
            }
        }
        // Keep this context's rounds going until the last answer is
        // acknowledged (its Send completes).
        let since = Instant::now();
        while sends < N {
            if let Some(wc) = cq.poll_one() {
                assert!(wc.status.is_ok(), "{wc:?}");
                sends += u64::from(wc.opcode == Some(WcOpcode::Send));
            }
            assert!(since.elapsed() < T, "{sends} answers acknowledged");
        }
    });
    let mut received = 0;
    let mut sends = 0;
    send(&p.cqp, &p.c_buf, 0);
    while received < N || sends < N {
        match spin(&p.ccq).opcode {
            Some(WcOpcode::Recv) => {
                received += 1;
                if received < N {
                    p.cqp.post_recv(0, p.c_buf.sge(0, 8)).unwrap();
                    send(&p.cqp, &p.c_buf, 0);
                } else {
                    // Nothing left to carry the last ACK: keep polling
                    // (each empty poll a round) until the server's last
                    // answer is acknowledged.
                }
            }
            Some(WcOpcode::Send) => sends += 1,
            other => panic!("unexpected completion {other:?}"),
        }
    }
    // The server's last Send completes on the client's lone ACK; keep the
    // client's rounds going until it does.
    let since = Instant::now();
    while !server.is_finished() {
        let _ = p.ccq.poll_one();
        assert!(since.elapsed() < T * 3);
    }
    server.join().unwrap();
    let sent = frames(&p) - before;
    // A thread preempted for the keeper's grace (500 µs) between its
    // receive and its answer has its keeper send the ACK alone: a frame
    // more per takeover, at most two (on a loaded machine, other tests of
    // this file run beside it).
    let takeovers: u64 = [&p.server, &p.client]
        .iter()
        .map(|c| c.stats().unwrap().poll_loop.keeper_takeovers)
        .sum();
    // Two frames per round trip and the last ACK; a few spare for a post
    // that found the other thread's round in flight (rare). With the ACK
    // at once it is four per round trip (2000 frames seen); one run
    // beside two other builds saw 442 takeovers.
    assert!(
        (2 * N + 1..=2 * N + N / 10 + 2 * takeovers).contains(&sent),
        "{sent} frames for {N} round trips, {takeovers} keeper takeovers"
    );
}
