//! A context with a loop thread delays a received segment's ACK by one
//! round (TCP's delayed ACK, `Polling::ack_delay`): a reply posted from
//! the completion carries it, so a ping-pong costs two frames per round
//! trip instead of four. Inline contexts ACK at once. Over the simulated
//! link; frames are the poll loops' own counters.

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
/// Send, which completes on its acknowledgement, completes.
#[test]
fn an_unanswered_message_is_still_acknowledged() {
    let p = connected(Polling::Adaptive, 9502);
    for i in 0..20 {
        p.sqp.post_recv(i, p.s_buf.sge(0, 8)).unwrap();
        send(&p.cqp, &p.c_buf, i);
        assert_eq!(spin(&p.ccq).opcode, Some(WcOpcode::Send));
        assert_eq!(spin(&p.scq).opcode, Some(WcOpcode::Recv));
    }
}

/// An inline context ACKs at once: its rounds stop when the application
/// stops calling. The same ping-pong from the application threads takes
/// four frames per round trip.
#[test]
fn an_inline_context_acknowledges_at_once() {
    let p = connected(Polling::Inline, 9503);
    let before = frames(&p);
    for i in 0..N {
        p.sqp.post_recv(i, p.s_buf.sge(0, 8)).unwrap();
        p.cqp.post_recv(i, p.c_buf.sge(0, 8)).unwrap();
        send(&p.cqp, &p.c_buf, i);
        assert_eq!(spin(&p.scq).opcode, Some(WcOpcode::Recv));
        send(&p.sqp, &p.s_buf, i);
        // The client's Send (completed by its ACK) and the answer, in
        // either order; then the server's Send.
        let mut got = [spin(&p.ccq).opcode, spin(&p.ccq).opcode];
        got.sort_by_key(|o| format!("{o:?}"));
        assert_eq!(got, [Some(WcOpcode::Recv), Some(WcOpcode::Send)]);
        assert_eq!(spin(&p.scq).opcode, Some(WcOpcode::Send));
    }
    let sent = frames(&p) - before;
    assert!(sent >= 4 * N, "{sent} frames for {N} round trips");
}
