//! A queue pair with a send CQ and a receive CQ (`ConnectOptions::recv_cq`,
//! `AcceptOptions::recv_cq`, as verbs' `ibv_qp_init_attr.send_cq` and
//! `recv_cq`): Sends, Writes, Reads and refused send posts complete on the
//! send CQ only, receives and refused receive posts on the receive CQ
//! only, and the receives still posted
//! when the connection ends (disconnect or abort) are flushed to the
//! receive CQ. Over MPA and over SCTP on the simulated link, with loop
//! threads and inline (the thread that polls either CQ drives the loop).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, ListenOptions, Polling, Status, Transport,
    Wc, WcOpcode, WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

/// How the connection ends.
#[derive(Debug, Clone, Copy)]
enum End {
    Disconnect,
    Abort,
}

/// The next completion on `cq`, within `T`.
fn next(cq: &Cq, what: &str) -> Wc {
    cq.wait(T)
        .unwrap_or_else(|| panic!("no completion for {what}"))
}

/// `cq` holds nothing (polling it runs a round on an inline context).
fn assert_empty(cq: &Cq, which: &str) {
    let mut left = Vec::new();
    while let Some(wc) = cq.poll_one() {
        left.push(wc);
    }
    assert!(left.is_empty(), "{which} should be empty, holds {left:?}");
}

/// (wr_id, opcode, status) of a completion.
fn key(wc: &Wc) -> (u64, Option<WcOpcode>, Status) {
    (wc.wr_id, wc.opcode, wc.status)
}

fn ok(wr_id: u64, op: WcOpcode) -> (u64, Option<WcOpcode>, Status) {
    (wr_id, Some(op), Status::Wc(WcStatus::Success))
}

fn flushed(wr_id: u64) -> (u64, Option<WcOpcode>, Status) {
    (wr_id, Some(WcOpcode::Recv), Status::Wc(WcStatus::Flushed))
}

fn two_cqs(polling: Polling, transport: Transport, port: u16, end: End) {
    let (server, client) = Context::sim_pair_with(polling, None);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (s_send, s_recv) = (server.create_cq(64), server.create_cq(64));
    let (c_send, c_recv) = (client.create_cq(64), client.create_cq(64));
    let inbox = spd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let target = spd
        .register(
            vec![5; 4096],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let src = cpd
        .register(vec![7; 4096], Access::LOCAL_READ | Access::LOCAL_WRITE)
        .unwrap();
    let cbox = cpd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();

    let mut lo = ListenOptions::new(&spd);
    lo.transport = transport;
    let listener = server.listen(port, &lo).unwrap();
    let mut co = ConnectOptions::new(&cpd, &c_send);
    co.recv_cq = Some(c_recv.clone());
    co.transport = transport;
    // Four client receives (200..204), in place before the server sends.
    co.recvs = (0..4)
        .map(|i| (200 + i, cbox.sge(i * 64, 64).into()))
        .collect();
    let addr = SocketAddrV4::new(server.addr(), port);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    // Four server receives (100..104).
    for i in 0..4 {
        req.post_recv(100 + i, inbox.sge(i * 64, 64)).unwrap();
    }
    let sqp = req
        .accept(
            &AcceptOptions {
                recv_cq: Some(s_recv.clone()),
                ..AcceptOptions::default()
            },
            &s_send,
        )
        .unwrap();
    let cqp = t.join().unwrap().unwrap();

    // Client Send: its completion on the client's send CQ, the receive on
    // the server's receive CQ.
    src.write(0, b"to the server").unwrap();
    cqp.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, 13).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    assert_eq!(
        key(&next(&c_send, "the client's Send")),
        ok(1, WcOpcode::Send)
    );
    let wc = next(&s_recv, "the server's receive");
    assert_eq!(key(&wc), ok(100, WcOpcode::Recv));
    assert_eq!((wc.byte_len, wc.qp), (13, sqp.id()));
    assert_eq!(inbox.read(0, 13).unwrap(), b"to the server");

    // Client Write and Read: the send CQ.
    cqp.post_send(WorkRequest::Write {
        wr_id: 2,
        signaled: true,
        local: src.sge(0, 64).into(),
        remote_stag: target.stag(),
        remote_to: 128,
    })
    .unwrap();
    assert_eq!(key(&next(&c_send, "the Write")), ok(2, WcOpcode::Write));
    cqp.post_send(WorkRequest::Read {
        wr_id: 3,
        signaled: true,
        local: src.sge(1024, 256).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    let wc = next(&c_send, "the Read");
    assert_eq!((key(&wc), wc.qp), (ok(3, WcOpcode::Read), cqp.id()));
    let mut want = vec![5; 256];
    want[128..192].copy_from_slice(&src.read(0, 64).unwrap());
    assert_eq!(src.read(1024, 256).unwrap(), want);

    // Server Send: the server's send CQ, the client's receive CQ.
    target.write(0, b"to the client").unwrap();
    sqp.post_send(WorkRequest::Send {
        wr_id: 10,
        signaled: true,
        local: target.sge(0, 13).into(),
        solicited: true,
        invalidate: None,
    })
    .unwrap();
    assert_eq!(
        key(&next(&s_send, "the server's Send")),
        ok(10, WcOpcode::Send)
    );
    let wc = next(&c_recv, "the client's receive");
    assert_eq!((key(&wc), wc.byte_len), (ok(200, WcOpcode::Recv), 13));
    assert!(wc.solicited);
    assert_eq!(cbox.read(0, 13).unwrap(), b"to the client");

    // A refused Send (its buffer runs past the region): the send CQ.
    cqp.post_send(WorkRequest::Send {
        wr_id: 4,
        signaled: true,
        local: src.sge(4090, 16).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = next(&c_send, "the refused Send");
    assert_eq!(wc.wr_id, 4);
    assert!(
        matches!(
            wc.status,
            Status::Refused(_) | Status::Wc(WcStatus::LocalProtection(_))
        ),
        "{wc:?}"
    );

    // A refused receive (its buffer runs past the region): the receive
    // CQ, where verbs reports receives.
    cqp.post_recv(5, cbox.sge(4090, 16)).unwrap();
    let wc = next(&c_recv, "the refused receive");
    assert_eq!(wc.wr_id, 5);
    assert!(matches!(wc.status, Status::Refused(_)), "{wc:?}");

    // Nothing strayed onto the other CQ.
    assert_empty(&c_recv, "the client's receive CQ");
    assert_empty(&s_send, "the server's send CQ");
    assert_empty(&c_send, "the client's send CQ");
    assert_empty(&s_recv, "the server's receive CQ");

    // The end: the receives still posted on either side (three each) are
    // flushed to the receive CQs, in posting order, and nothing to the
    // send CQs.
    match end {
        End::Disconnect => cqp.disconnect().unwrap(),
        End::Abort => cqp.abort().unwrap(),
    }
    for (cq, first, side) in [(&c_recv, 201, "client"), (&s_recv, 101, "server")] {
        for wr_id in first..first + 3 {
            let wc = next(cq, &format!("the {side}'s flushed receive {wr_id}"));
            assert_eq!(key(&wc), flushed(wr_id), "{side}");
        }
    }
    cqp.wait_disconnected(T).unwrap();
    sqp.wait_disconnected(T).unwrap();
    assert_empty(&c_send, "the client's send CQ");
    assert_empty(&s_send, "the server's send CQ");
    assert_empty(&c_recv, "the client's receive CQ");
    assert_empty(&s_recv, "the server's receive CQ");
    drop((cqp, sqp));
}

#[test]
fn mpa_two_cqs_disconnect() {
    two_cqs(Polling::Adaptive, Transport::Mpa, 9400, End::Disconnect);
}

#[test]
fn mpa_two_cqs_abort() {
    two_cqs(Polling::Adaptive, Transport::Mpa, 9401, End::Abort);
}

#[test]
fn sctp_two_cqs_disconnect() {
    two_cqs(Polling::Adaptive, Transport::Sctp, 9402, End::Disconnect);
}

#[test]
fn sctp_two_cqs_abort() {
    two_cqs(Polling::Adaptive, Transport::Sctp, 9403, End::Abort);
}

/// Inline: waiting on the receive CQ drives the loop as waiting on the
/// send CQ does.
#[test]
fn mpa_two_cqs_inline() {
    two_cqs(Polling::Inline, Transport::Mpa, 9404, End::Disconnect);
}

#[test]
fn sctp_two_cqs_inline() {
    two_cqs(Polling::Inline, Transport::Sctp, 9405, End::Abort);
}

/// Without a receive CQ everything stays on the one CQ, as before.
#[test]
fn one_cq_takes_everything() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let inbox = spd.register(vec![0; 256], Access::LOCAL_WRITE).unwrap();
    let src = cpd.register(vec![3; 256], Access::LOCAL_READ).unwrap();
    let listener = server.listen(9406, &ListenOptions::new(&spd)).unwrap();
    let co = ConnectOptions::new(&cpd, &ccq);
    assert!(co.recv_cq.is_none() && AcceptOptions::default().recv_cq.is_none());
    let addr = SocketAddrV4::new(server.addr(), 9406);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(0, 64)).unwrap();
    req.post_recv(2, inbox.sge(64, 64)).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    cqp.post_send(WorkRequest::Send {
        wr_id: 9,
        signaled: true,
        local: src.sge(0, 8).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    assert_eq!(key(&next(&ccq, "the Send")), ok(9, WcOpcode::Send));
    assert_eq!(key(&next(&scq, "the receive")), ok(1, WcOpcode::Recv));
    // The server's receive 2, still posted, is flushed to the one CQ.
    cqp.abort().unwrap();
    assert_eq!(key(&next(&scq, "the flushed receive")), flushed(2));
    sqp.wait_disconnected(T).unwrap();
    assert_empty(&scq, "the server's CQ");
    assert_empty(&ccq, "the client's CQ");
}
