//! Where the API follows verbs rather than the letter of the RFCs: local
//! read is implicit on every region, errors keep their chain, and a peer's
//! close is reported with its cause. Over the simulated link.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, AccessError, ConnectOptions, Context, Cq, ListenOptions, Pd, PostError,
    Qp, Status, WcOpcode, WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

struct Pair {
    server: Qp,
    client: Qp,
    scq: Cq,
    ccq: Cq,
    spd: Pd,
    cpd: Pd,
    _ctx: (Context, Context),
}

/// A connected pair.
fn pair() -> Pair {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let listener = server.listen(7000, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 7000);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    let server_qp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let client_qp = t.join().unwrap().unwrap();
    Pair {
        server: server_qp,
        client: client_qp,
        scq,
        ccq,
        spd,
        cpd,
        _ctx: (server, client),
    }
}

#[test]
fn local_read_is_implicit_as_in_verbs() {
    let p = pair();
    let target = p
        .spd
        .register(vec![0; 64], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let inbox = p.spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    p.server.post_recv(10, inbox.sge(0, 64)).unwrap();
    // A source registered for local write only (ibv_reg_mr with
    // IBV_ACCESS_LOCAL_WRITE) is a valid Write source; so is one
    // registered with no rights at all, for a Send.
    let rw = p.cpd.register(vec![0x5a; 32], Access::LOCAL_WRITE).unwrap();
    let bare = p
        .cpd
        .register(b"no flags".to_vec(), Access::default())
        .unwrap();
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: rw.sge(0, 32).into(),
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    p.client
        .post_send(WorkRequest::Send {
            wr_id: 2,
            signaled: true,
            local: bare.sge(0, 8).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    for (id, op) in [(1, WcOpcode::Write), (2, WcOpcode::Send)] {
        let wc = p.ccq.wait(T).unwrap();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (id, Some(op), Status::Wc(WcStatus::Success))
        );
    }
    let wc = p.scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.byte_len, wc.status),
        (10, 8, Status::Wc(WcStatus::Success))
    );
    assert_eq!(target.read(0, 32).unwrap(), vec![0x5a; 32]);
    assert_eq!(inbox.read(0, 8).unwrap(), b"no flags");
}

#[test]
fn local_write_still_needs_the_right() {
    let p = pair();
    // A receive buffer or a Read sink without LOCAL_WRITE is refused, as
    // verbs refuses it.
    let ro = p.spd.register(vec![0; 64], Access::REMOTE_READ).unwrap();
    p.server.post_recv(3, ro.sge(0, 64)).unwrap();
    let wc = p.scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status),
        (3, Status::Refused(PostError::Local(AccessError::Access)))
    );
    let remote = p.spd.register(vec![9; 64], Access::REMOTE_READ).unwrap();
    let sink = p.cpd.register(vec![0; 64], Access::default()).unwrap();
    p.client
        .post_send(WorkRequest::Read {
            wr_id: 4,
            signaled: true,
            local: sink.sge(0, 64).into(),
            remote_stag: remote.stag(),
            remote_to: 0,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status),
        (4, Status::Refused(PostError::Local(AccessError::Access)))
    );
    assert_eq!(sink.read(0, 64).unwrap(), vec![0; 64]);
}

#[test]
fn an_api_error_chains_to_the_layer_that_failed() {
    use std::error::Error as _;
    let (ctx, _peer) = Context::sim_pair();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let mut mw = pd.alloc_mw().unwrap();
    // The region was not registered with MW_BIND: the memory table says so.
    let e = mw.bind(&mr, 0, 8, Access::REMOTE_READ).unwrap_err();
    let cause = e.source().expect("the memory table's error");
    assert_eq!(
        cause.downcast_ref::<iwarp::MemError>(),
        Some(&iwarp::MemError::NoBindRight)
    );
    assert!(e.to_string().contains(&cause.to_string()), "{e}");
}

#[test]
fn a_post_after_the_peers_terminate_names_it() {
    let p = pair();
    let target = p.spd.register(vec![0; 64], Access::REMOTE_WRITE).unwrap();
    let src = p.cpd.register(vec![1; 128], Access::default()).unwrap();
    // 128 octets into a 64-octet target: the server Terminates.
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: src.sge(0, 128).into(),
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    let since = std::time::Instant::now();
    let term = loop {
        match p.client.poll_event() {
            Some(iwarp::QpEvent::TerminateReceived(t)) => break t,
            Some(_) => {}
            None => assert!(since.elapsed() < T, "no Terminate"),
        }
        std::thread::yield_now();
    };
    // The Write itself may complete before the Terminate arrives.
    while p.ccq.wait(Duration::from_millis(50)).is_some() {}
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 2,
            signaled: true,
            local: src.sge(0, 8).into(),
            remote_stag: target.stag(),
            remote_to: 0,
        })
        .unwrap();
    let wc = p.ccq.wait(T).expect("the refusal");
    let cause = iwarp::DisconnectCause::TerminateReceived(term.code);
    assert_eq!(
        (wc.wr_id, wc.status),
        (2, Status::Refused(PostError::Disconnected(cause)))
    );
    let text = PostError::Disconnected(cause).to_string();
    assert!(
        text.starts_with("disconnected: Terminate received: "),
        "{text}"
    );
    let _ = &p.server;
}

#[test]
fn a_post_after_the_peer_closed_names_the_close() {
    let p = pair();
    let src = p.cpd.register(vec![1; 8], Access::default()).unwrap();
    let Pair {
        server,
        client,
        ccq,
        ..
    } = p;
    drop(server);
    client.wait_disconnected(T).unwrap();
    client
        .post_send(WorkRequest::Send {
            wr_id: 9,
            signaled: true,
            local: src.sge(0, 8).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    let wc = ccq.wait(T).expect("the refusal");
    let closed = PostError::Disconnected(iwarp::DisconnectCause::PeerClosed);
    assert_eq!((wc.wr_id, wc.status), (9, Status::Refused(closed)));
    assert_eq!(
        closed.to_string(),
        "disconnected: peer closed the connection"
    );
}
