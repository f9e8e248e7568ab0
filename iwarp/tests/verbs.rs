//! The API's verbs over the simulated link: ORD enforcement, refusals on the
//! CQ, Terminate surfaced as an event, teardown flushing.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Cq, Error, ListenOptions, Mr, Qp, QpEvent,
    Status, WcOpcode, WcStatus, WorkRequest,
};

const T: Duration = Duration::from_secs(10);

struct Pair {
    client: Qp,
    server: Qp,
    ccq: Cq,
    scq: Cq,
    // Server memory: a readable/writable target and a receive inbox.
    target: Mr,
    inbox: Mr,
    // Client memory: a source and a sink.
    src: Mr,
    sink: Mr,
    /// The protection domains the server's and the client's QPs are in.
    spd: iwarp::Pd,
    cpd: iwarp::Pd,
    _ctx: (Context, Context),
}

fn pair(port: u16, client_ord: u16, server_ird: u16, recvs: u64) -> Pair {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(1024), client.create_cq(1024));
    let target = spd
        .register(
            (0..1 << 20).map(|i| (i % 251) as u8).collect(),
            Access::REMOTE_READ | Access::REMOTE_WRITE,
        )
        .unwrap();
    let inbox = spd
        .register(vec![0xee; 64 * 16], Access::LOCAL_WRITE)
        .unwrap();
    let src = cpd.register(vec![7; 4096], Access::LOCAL_READ).unwrap();
    let sink = cpd.register(vec![0; 1 << 20], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.mpa.ord = client_ord;
    let addr = SocketAddrV4::new(server.addr(), port);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    assert_eq!(req.peer().ord, Some(client_ord));
    for i in 0..recvs {
        req.post_recv(i, inbox.sge(i * 64, 64)).unwrap();
    }
    let server_qp = req
        .accept(
            &AcceptOptions {
                ird: server_ird,
                ..Default::default()
            },
            &scq,
        )
        .unwrap();
    let client_qp = t.join().unwrap().unwrap();
    Pair {
        client: client_qp,
        server: server_qp,
        ccq,
        scq,
        target,
        inbox,
        src,
        sink,
        spd,
        cpd,
        _ctx: (server, client),
    }
}

#[test]
fn ord_queues_excess_reads_and_all_complete_in_order() {
    // The client asks ORD 8, the server grants IRD 2: the client's ORD is 2.
    let p = pair(9100, 8, 2, 0);
    assert_eq!(p.client.negotiated().ord, 2);
    assert_eq!(p.server.negotiated().ird, 2);
    // Sixteen Reads posted at once: the QP keeps two in flight and queues
    // the rest (a peer would Terminate a third, RFC 5040 §6.6).
    for i in 0..16u64 {
        p.client
            .post_send(WorkRequest::Read {
                wr_id: i,
                signaled: true,
                local: p.sink.sge(i * 65536, 65536).into(),
                remote_stag: p.target.stag(),
                remote_to: i * 65536,
            })
            .unwrap();
    }
    for i in 0..16u64 {
        let wc = p.ccq.wait(T).unwrap();
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.status),
            (i, Some(WcOpcode::Read), Status::Wc(WcStatus::Success))
        );
    }
    assert_eq!(
        p.sink.read(0, 1 << 20).unwrap(),
        p.target.read(0, 1 << 20).unwrap()
    );
    assert!(
        p.server.poll_event().is_none(),
        "no Terminate at the server"
    );
}

#[test]
fn a_bad_local_buffer_is_refused_on_the_cq() {
    let p = pair(9101, 4, 4, 1);
    // The source ends 8 octets in: a Send of 16 from there is refused.
    p.client
        .post_send(WorkRequest::Send {
            wr_id: 5,
            signaled: true,
            local: p.src.sge(4088, 16).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!(wc.wr_id, 5);
    assert!(
        matches!(
            wc.status,
            Status::Refused(_) | Status::Wc(WcStatus::LocalProtection(_))
        ),
        "{wc:?}"
    );
    // The connection still works.
    p.client
        .post_send(WorkRequest::Send {
            wr_id: 6,
            signaled: true,
            local: p.src.sge(0, 16).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    let wc = p.scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (0, Some(WcOpcode::Recv), 16)
    );
}

#[test]
fn a_write_outside_the_region_draws_a_terminate_and_flushes() {
    let p = pair(9102, 4, 4, 3);
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: p.src.sge(0, 64).into(),
            remote_stag: p.target.stag(),
            remote_to: (1 << 20) - 16, // runs 48 octets past the end
        })
        .unwrap();
    // The server's three receives flush, the client hears the Terminate.
    for i in 0..3 {
        let wc = p.scq.wait(T).unwrap();
        assert_eq!((wc.wr_id, wc.status), (i, Status::Wc(WcStatus::Flushed)));
    }
    let term = terminate_of(&p.client);
    // RFC 5041 §7.2: DDP layer, tagged buffer error, base or bounds violation.
    assert_eq!(
        (term.code.layer, term.code.etype, term.code.ecode),
        (1, 1, 1)
    );
    // Nothing landed outside the region, and the in-range part was not
    // placed either (the segment failed its check first).
    assert_eq!(
        p.target.read((1 << 20) - 16, 16).unwrap(),
        (0..16)
            .map(|i| (((1 << 20) - 16 + i) % 251) as u8)
            .collect::<Vec<_>>()
    );
    assert_eq!(p.inbox.read(0, 64).unwrap(), vec![0xee; 64]);
}

#[test]
fn connect_to_a_closed_port_is_refused_and_a_reject_carries_private_data() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let ccq = client.create_cq(16);
    let addr = SocketAddrV4::new(server.addr(), 9199);
    match client.connect(addr, &ConnectOptions::new(&cpd, &ccq)) {
        Err(Error::ConnectionRefused) => {}
        other => panic!("{other:?}"),
    }
    let listener = server.listen(9103, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9103);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(addr, &ConnectOptions::new(&cpd, &ccq)));
    let why = vec![0x42; 512];
    listener.get_request(T).unwrap().reject(&why).unwrap();
    match t.join().unwrap() {
        Err(Error::Rejected { private_data }) => assert_eq!(private_data, why),
        other => panic!("{other:?}"),
    }
}

#[test]
fn receives_given_to_connect_take_a_send_made_right_after_accept() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let src = spd.register((0..64).collect(), Access::LOCAL_READ).unwrap();
    let inbox = cpd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(9130, &ListenOptions::new(&spd)).unwrap();
    let mut o = ConnectOptions::new(&cpd, &ccq);
    o.recvs = vec![(5, inbox.sge(0, 64).into())];
    let addr = SocketAddrV4::new(server.addr(), 9130);
    let c = client.clone();
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let sqp = listener
        .get_request(T)
        .unwrap()
        .accept(&AcceptOptions::default(), &scq)
        .unwrap();
    // The responder sends at once, racing the client's return from connect.
    sqp.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, 64).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let cqp = t.join().unwrap().unwrap();
    let wc = ccq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len, wc.qp),
        (5, Some(WcOpcode::Recv), 64, cqp.id())
    );
    assert!(wc.status.is_ok(), "{wc:?}");
    assert_eq!(inbox.read(0, 64).unwrap(), (0..64).collect::<Vec<u8>>());
    assert!(scq.wait(T).unwrap().status.is_ok());
}

/// A receive posted, then a Send made to land on it at once, 2000 times:
/// the loop must apply the post before the frame (it drains commands
/// before each frame, not only once per round).
#[test]
fn a_receive_posted_just_before_the_peer_sends_is_always_in_place() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let src = cpd.register(vec![3; 8], Access::LOCAL_READ).unwrap();
    let inbox = spd.register(vec![0; 8], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(9140, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9140);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let sqp = listener
        .get_request(T)
        .unwrap()
        .accept(&AcceptOptions::default(), &scq)
        .unwrap();
    let cqp = t.join().unwrap().unwrap();
    for i in 0..2000u64 {
        sqp.post_recv(i, inbox.sge(0, 8)).unwrap();
        cqp.post_send(WorkRequest::Send {
            wr_id: i,
            signaled: true,
            local: src.sge(0, 8).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
        let r = scq.wait(T).unwrap();
        assert_eq!((r.wr_id, r.status.is_ok()), (i, true), "{r:?}");
        let s = ccq.wait(T).unwrap();
        assert_eq!((s.wr_id, s.status.is_ok()), (i, true), "{s:?}");
    }
}

/// Per-connection state on the application side goes with the
/// connection: after 30 connections accepted and closed, 5 rejected, 5
/// requests dropped unanswered and 5 refused connects, nothing is tracked.
#[test]
fn no_per_connection_state_outlives_its_connection() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let listener = server.listen(9150, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9150);
    for round in 0..40 {
        let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
        let t = std::thread::spawn(move || c.connect(addr, &o));
        let req = listener
            .get_request(T)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        match round % 8 {
            // Rejected: the client sees why.
            6 => {
                req.reject(b"no").unwrap();
                assert!(matches!(t.join().unwrap(), Err(Error::Rejected { .. })));
            }
            // Dropped unanswered: rejected too.
            7 => {
                drop(req);
                assert!(matches!(t.join().unwrap(), Err(Error::Rejected { .. })));
            }
            _ => {
                let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
                let cqp = t.join().unwrap().unwrap();
                if round % 2 == 0 {
                    cqp.disconnect().unwrap();
                    cqp.wait_disconnected(T).unwrap();
                    sqp.wait_disconnected(T).unwrap();
                } else {
                    // Dropping the QP closes it.
                    drop(cqp);
                    sqp.wait_disconnected(T).unwrap();
                }
            }
        }
    }
    for _ in 0..5 {
        let o = ConnectOptions::new(&cpd, &ccq);
        let closed = SocketAddrV4::new(server.addr(), 9151);
        assert!(matches!(
            client.connect(closed, &o),
            Err(Error::ConnectionRefused)
        ));
    }
    drop(listener);
    assert_eq!(server.tracked_connections(), 0, "server");
    assert_eq!(client.tracked_connections(), 0, "client");
}

/// Both ends of a ping-pong run inside their poll loops (no application
/// thread in the path): 1000 round trips of an 8-octet Send, each
/// completion checked and counted in order; a blocking call from inside a
/// loop is refused.
#[test]
fn a_ping_pong_runs_inside_the_poll_loops() {
    use iwarp::HookStatus;
    use std::sync::{mpsc, Arc};
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let s_in = spd
        .register(vec![0; 8], Access::LOCAL_WRITE | Access::LOCAL_READ)
        .unwrap();
    let c_in = cpd.register(vec![0; 8], Access::LOCAL_WRITE).unwrap();
    let c_out = cpd.register(vec![0; 8], Access::LOCAL_READ).unwrap();
    let listener = server.listen(9160, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9160);
    let mut o = ConnectOptions::new(&cpd, &ccq);
    o.recvs = vec![(0, c_in.sge(0, 8).into())];
    let c = client.clone();
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let req = listener.get_request(T).unwrap();
    req.post_recv(0, s_in.sge(0, 8)).unwrap();
    let sqp = Arc::new(req.accept(&AcceptOptions::default(), &scq).unwrap());
    let cqp = Arc::new(t.join().unwrap().unwrap());

    // Server: echo every receive back from the same buffer.
    let (q, cq, sge, ctx) = (sqp.clone(), scq.clone(), s_in.sge(0, 8), server.clone());
    let (in_loop_tx, in_loop_rx) = mpsc::channel();
    let mut asked = false;
    server
        .run_in_loop(move || {
            if !asked {
                asked = true;
                let _ = in_loop_tx.send(matches!(ctx.alloc_pd(), Err(Error::InLoop)));
            }
            let mut st = HookStatus::Idle;
            while let Some(wc) = cq.poll_one() {
                st = HookStatus::Busy;
                if wc.opcode == Some(WcOpcode::Recv) {
                    q.post_recv(0, sge).unwrap();
                    q.post_send(WorkRequest::Send {
                        wr_id: 1,
                        signaled: true,
                        local: sge.into(),
                        solicited: false,
                        invalidate: None,
                    })
                    .unwrap();
                }
            }
            st
        })
        .unwrap();
    assert!(
        in_loop_rx.recv_timeout(T).unwrap(),
        "alloc_pd in a hook is refused"
    );

    // Client: send i, wait for its echo, check it, next.
    const N: u64 = 1000;
    let (done_tx, done_rx) = mpsc::channel();
    let (q, cq, out, inb) = (cqp.clone(), ccq.clone(), c_out.clone(), c_in.clone());
    let mut i = 0u64;
    let mut started = false;
    client
        .run_in_loop(move || {
            let send = |i: u64| {
                q.post_send(WorkRequest::Send {
                    wr_id: i,
                    signaled: false,
                    local: out.sge(0, 8).into(),
                    solicited: false,
                    invalidate: None,
                })
                .unwrap()
            };
            if !started {
                started = true;
                // The payload is written from outside the loop below.
                send(i);
                return HookStatus::Busy;
            }
            let mut st = HookStatus::Idle;
            while let Some(wc) = cq.poll_one() {
                st = HookStatus::Busy;
                assert!(wc.status.is_ok(), "{wc:?}");
                if wc.opcode == Some(WcOpcode::Recv) {
                    let _ = done_tx.send(i);
                    i += 1;
                    if i == N {
                        return HookStatus::Done;
                    }
                    q.post_recv(0, inb.sge(0, 8)).unwrap();
                    send(i);
                }
            }
            st
        })
        .unwrap();
    for want in 0..N {
        let got = done_rx.recv_timeout(T).unwrap();
        assert_eq!(got, want);
    }
}

/// Inline Send and Write: no registered source on the client at all.
#[test]
fn inline_send_and_write_need_no_registered_source() {
    use iwarp::InlineData;
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let inbox = spd.register(vec![0; 128], Access::LOCAL_WRITE).unwrap();
    let target = spd.register(vec![0; 128], Access::REMOTE_WRITE).unwrap();
    let listener = server.listen(9170, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9170);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(0, 128)).unwrap();
    let _sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    cqp.post_send(WorkRequest::WriteInline {
        wr_id: 1,
        signaled: true,
        data: InlineData::new(b"written inline").unwrap(),
        remote_stag: target.stag(),
        remote_to: 100,
    })
    .unwrap();
    let msg = [0x5a; 128];
    cqp.post_send(WorkRequest::SendInline {
        wr_id: 2,
        signaled: true,
        data: InlineData::new(&msg).unwrap(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    for want in [(1, WcOpcode::Write, 14), (2, WcOpcode::Send, 128)] {
        let wc = ccq.wait(T).unwrap();
        assert!(wc.status.is_ok(), "{wc:?}");
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (want.0, Some(want.1), want.2)
        );
    }
    let wc = scq.wait(T).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (1, 128));
    assert_eq!(inbox.read(0, 128).unwrap(), msg.to_vec());
    assert_eq!(target.read(100, 14).unwrap(), b"written inline".to_vec());
}

#[test]
fn a_port_listens_from_listen_until_the_listener_is_dropped() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let addr = SocketAddrV4::new(server.addr(), 9120);
    // Repeatedly: listen, then connect at once (no sleep between them).
    // `listen` returns once the loop listens, so the SYN is never refused.
    for round in 0..20 {
        let listener = server.listen(9120, &ListenOptions::new(&spd)).unwrap();
        match server.listen(9120, &ListenOptions::new(&spd)) {
            Err(Error::AddrInUse) => {}
            other => panic!("round {round}: second listen: {other:?}"),
        }
        let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
        let t = std::thread::spawn(move || c.connect(addr, &o));
        let sqp = listener
            .get_request(T)
            .unwrap()
            .accept(&AcceptOptions::default(), &scq)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        let cqp = t
            .join()
            .unwrap()
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        drop(listener);
        // The accepted connection outlives its listener ...
        cqp.disconnect().unwrap();
        cqp.wait_disconnected(T).unwrap();
        sqp.wait_disconnected(T).unwrap();
        // ... and the port is closed.
        match client.connect(addr, &ConnectOptions::new(&cpd, &ccq)) {
            Err(Error::ConnectionRefused) => {}
            other => panic!("round {round}: connect after drop: {other:?}"),
        }
    }
}

#[test]
fn a_shared_receive_queue_serves_three_queue_pairs() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let scq = server.create_cq(256);
    let srq = server.create_srq(64);
    let inbox = spd.register(vec![0; 30 * 32], Access::LOCAL_WRITE).unwrap();
    for i in 0..30u64 {
        srq.post_recv(i, inbox.sge(i * 32, 32)).unwrap();
    }
    let mut lo = ListenOptions::new(&spd);
    lo.srq = Some(srq.clone());
    let listener = server.listen(9110, &lo).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9110);
    let src = cpd
        .register(
            (0..3 * 10 * 32).map(|i| (i / 32) as u8).collect(),
            Access::LOCAL_READ,
        )
        .unwrap();
    let ccq = client.create_cq(256);
    let mut clients = Vec::new();
    let mut servers = Vec::new();
    for _ in 0..3 {
        let (c2, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
        let t = std::thread::spawn(move || c2.connect(addr, &ConnectOptions::new(&cpd2, &ccq2)));
        servers.push(
            listener
                .get_request(T)
                .unwrap()
                .accept(&AcceptOptions::default(), &scq)
                .unwrap(),
        );
        clients.push(t.join().unwrap().unwrap());
    }
    // Each client sends ten 32-octet messages; message k of client q carries
    // the byte 10q + k.
    for (q, qp) in clients.iter().enumerate() {
        for k in 0..10u64 {
            let m = q as u64 * 10 + k;
            qp.post_send(WorkRequest::Send {
                wr_id: m,
                signaled: false,
                local: src.sge(m * 32, 32).into(),
                solicited: false,
                invalidate: None,
            })
            .unwrap();
        }
    }
    let mut per_qp = std::collections::HashMap::new();
    let mut seen = Vec::new();
    for _ in 0..30 {
        let wc = scq.wait(T).unwrap();
        assert_eq!(
            (wc.opcode, wc.status, wc.byte_len),
            (Some(WcOpcode::Recv), Status::Wc(WcStatus::Success), 32)
        );
        *per_qp.entry(wc.qp).or_insert(0) += 1;
        seen.push(wc.wr_id);
    }
    // Every SRQ buffer used once, ten receives completed on each QP's behalf.
    seen.sort_unstable();
    assert_eq!(seen, (0..30).collect::<Vec<_>>());
    let ids: std::collections::HashSet<usize> = servers.iter().map(|s| s.id()).collect();
    assert_eq!(per_qp.len(), 3);
    assert!(
        per_qp.iter().all(|(qp, n)| ids.contains(qp) && *n == 10),
        "{per_qp:?}"
    );
    assert!(srq.is_empty());
    // Every message landed whole in some buffer: the 30 buffers hold the
    // 30 distinct messages.
    let got = inbox.read(0, 30 * 32).unwrap();
    let mut msgs: Vec<u8> = got
        .chunks(32)
        .map(|c| {
            assert!(c.iter().all(|&b| b == c[0]), "a buffer mixes messages");
            c[0]
        })
        .collect();
    msgs.sort_unstable();
    assert_eq!(msgs, (0..30).collect::<Vec<u8>>());
    // Unsignaled Sends that succeeded left nothing on the client's CQ.
    assert!(ccq.poll_one().is_none());
}

#[test]
fn memory_window_bounds_remote_access_and_invalidation_revokes_it() {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let region = spd
        .register(vec![0x11; 16384], Access::LOCAL_WRITE | Access::MW_BIND)
        .unwrap();
    let mut mw = spd.alloc_mw().unwrap();
    let wstag = mw
        .bind(
            &region,
            4096,
            4096,
            Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .unwrap();
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let listener = server.listen(9111, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9111);
    let src = cpd.register(vec![0xab; 8192], Access::LOCAL_READ).unwrap();
    let sink = cpd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let (c2, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
    let t = std::thread::spawn(move || c2.connect(addr, &ConnectOptions::new(&cpd2, &ccq2)));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(0, 64)).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    // A Write through the window lands at the window's octets of the region.
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, 1000).into(),
        remote_stag: wstag,
        remote_to: 4096 + 100,
    })
    .unwrap();
    cqp.post_send(WorkRequest::Read {
        wr_id: 2,
        signaled: true,
        local: sink.sge(0, 4096).into(),
        remote_stag: wstag,
        remote_to: 4096,
    })
    .unwrap();
    for want in 1..=2 {
        let wc = ccq.wait(T).unwrap();
        assert_eq!((wc.wr_id, wc.status), (want, Status::Wc(WcStatus::Success)));
    }
    let mem = region.read(0, 16384).unwrap();
    assert!(mem[..4196].iter().all(|&b| b == 0x11));
    assert!(mem[4196..5196].iter().all(|&b| b == 0xab));
    assert!(mem[5196..].iter().all(|&b| b == 0x11));
    assert_eq!(sink.read(0, 4096).unwrap(), mem[4096..8192]);
    // Remote invalidation: a Send with Invalidate names the window.
    cqp.post_send(WorkRequest::Send {
        wr_id: 3,
        signaled: true,
        local: src.sge(0, 8).into(),
        solicited: false,
        invalidate: Some(wstag),
    })
    .unwrap();
    let wc = scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.invalidated),
        (1, Some(WcOpcode::Recv), Some(wstag))
    );
    assert_eq!(ccq.wait(T).unwrap().wr_id, 3);
    // Now the window's STag is dead: a Write with it draws a Terminate and
    // nothing changes in the region.
    cqp.post_send(WorkRequest::Write {
        wr_id: 4,
        signaled: true,
        local: src.sge(0, 16).into(),
        remote_stag: wstag,
        remote_to: 4096,
    })
    .unwrap();
    let term = terminate_of(&cqp);
    // RFC 5041 §7.2: tagged buffer error, invalid STag.
    assert_eq!(
        (term.code.layer, term.code.etype, term.code.ecode),
        (1, 1, 0)
    );
    assert_eq!(region.read(0, 16384).unwrap(), mem);
    drop(sqp);
    // Rebinding gives a new key for the same window.
    let new = mw.bind(&region, 0, 512, Access::REMOTE_READ).unwrap();
    assert_ne!(new, wstag);
    assert_eq!(new.0 >> 8, wstag.0 >> 8, "same window index");
    assert!(
        region.clone().deregister().is_err(),
        "a region with a bound window cannot go"
    );
    // Invalidating the window unbinds it; then the region can go.
    mw.invalidate().unwrap();
    let mem = region.deregister().unwrap();
    assert_eq!(mem.len(), 16384);
    assert_eq!(mem.into_vec().expect("the last handle").len(), 16384);
}

#[test]
fn scatter_gather_and_unsignaled_writes() {
    let p = pair(9112, 4, 4, 0);
    // Gather: two pieces of the source become one Send; scatter: the inbox
    // takes it in two places.
    p.src.write(0, b"hello, ").unwrap();
    p.src.write(100, b"world").unwrap();
    let recv = iwarp::SgList::new(&[p.inbox.sge(0, 4), p.inbox.sge(500, 60)]).unwrap();
    p.server.post_recv_list(7, recv).unwrap();
    let gather = iwarp::SgList::new(&[p.src.sge(0, 7), p.src.sge(100, 5)]).unwrap();
    p.client
        .post_send(WorkRequest::Send {
            wr_id: 8,
            signaled: true,
            local: gather,
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    let wc = p.scq.wait(T).unwrap();
    assert_eq!((wc.wr_id, wc.byte_len), (7, 12));
    assert_eq!(p.inbox.read(0, 4).unwrap(), b"hell");
    assert_eq!(p.inbox.read(500, 8).unwrap(), b"o, world");
    assert_eq!(p.ccq.wait(T).unwrap().wr_id, 8);
    // Three unsignaled Writes and a signaled one: one completion, all placed.
    for i in 0..4u64 {
        p.client
            .post_send(WorkRequest::Write {
                wr_id: 20 + i,
                signaled: i == 3,
                local: p.src.sge(0, 12).into(),
                remote_stag: p.target.stag(),
                remote_to: i * 100,
            })
            .unwrap();
    }
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (23, Status::Wc(WcStatus::Success)));
    std::thread::sleep(Duration::from_millis(20));
    assert!(p.ccq.poll_one().is_none());
    for i in 0..4 {
        assert_eq!(&p.target.read(i * 100, 12).unwrap()[..7], b"hello, ");
    }
}

#[test]
fn connecting_to_nobody_times_out_when_asked() {
    let (_server, client) = Context::sim_pair();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(16);
    let mut opts = ConnectOptions::new(&cpd, &ccq);
    opts.timeout = Duration::from_millis(300);
    let started = std::time::Instant::now();
    // Nobody answers ARP for 10.0.0.99.
    let addr = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 99), 7000);
    match client.connect(addr, &opts) {
        Err(Error::TimedOut) => {}
        other => panic!("{other:?}"),
    }
    // The 300 ms asked for, not the 15 s default (the upper bound leaves
    // a loaded machine room and still tells the two apart).
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(300) && waited < Duration::from_secs(10),
        "{waited:?}"
    );
}

/// Wait for `qp`'s Terminate-received event (decoded).
fn terminate_of(qp: &Qp) -> iwarp::TerminateRepr {
    let deadline = std::time::Instant::now() + T;
    loop {
        if let Some(QpEvent::TerminateReceived(t)) = qp.poll_event() {
            return t;
        }
        assert!(std::time::Instant::now() < deadline, "no Terminate");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn a_peers_write_is_seen_in_place_by_polling_its_last_octet() {
    // The server application watches its registered memory directly, from
    // its own thread, without completions or any call into the poll loop:
    // when the last octet of the client's Write shows up (acquire), all
    // 64 KiB before it are there too.
    let p = pair(9110, 4, 4, 0);
    let mem = p.target.memory().clone();
    let (at, len) = (4096usize, 65536usize);
    let old_last = mem.load(at + len - 1).unwrap();
    let data: Vec<u8> = (0..len).map(|i| (i % 13) as u8 + 100).collect();
    assert_ne!(data[len - 1], old_last);
    let src = p.cpd.register(data.clone(), Access::LOCAL_READ).unwrap();
    let watcher = std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + T;
        while mem.load(at + len - 1).unwrap() != 100 + ((len - 1) % 13) as u8 {
            assert!(
                std::time::Instant::now() < deadline,
                "the Write never arrived"
            );
            std::hint::spin_loop();
        }
        mem.to_vec(at, len).unwrap()
    });
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: false,
            local: src.sge(0, len as u32).into(),
            remote_stag: p.target.stag(),
            remote_to: at as u64,
        })
        .unwrap();
    assert_eq!(watcher.join().unwrap(), data);
    // The octets around it are untouched.
    assert_eq!(p.target.read(at - 1, 1).unwrap(), [((at - 1) % 251) as u8]);
    assert_eq!(
        p.target.read(at + len, 1).unwrap(),
        [((at + len) % 251) as u8]
    );
}

#[test]
fn caller_memory_is_sent_from_in_place_and_comes_back_unmoved() {
    // Memory the application keeps a handle to (here a leaked static
    // buffer), registered as is: what the application writes through its
    // handle is what the peer's RDMA Read gets, with no copy into the stack.
    let p = pair(9111, 4, 4, 0);
    let buf: &'static mut [u8] = Box::leak(vec![0u8; 8192].into_boxed_slice());
    let addr = buf.as_ptr();
    let mem = iwarp::Region::from_static(buf);
    let mr = p
        .spd
        .register_region(mem.clone(), Access::REMOTE_READ)
        .unwrap();
    assert_eq!(
        mr.memory().as_ptr().cast_const(),
        addr,
        "registered in place"
    );
    let data: Vec<u8> = (0..8192).map(|i| (i * 7 % 256) as u8).collect();
    mem.write(0, &data).unwrap();
    p.client
        .post_send(WorkRequest::Read {
            wr_id: 5,
            signaled: true,
            local: p.sink.sge(0, 8192).into(),
            remote_stag: mr.stag(),
            remote_to: 0,
        })
        .unwrap();
    let wc = p.ccq.wait(T).unwrap();
    assert_eq!((wc.wr_id, wc.status), (5, Status::Wc(WcStatus::Success)));
    assert_eq!(p.sink.read(0, 8192).unwrap(), data);
    let back = mr.deregister().unwrap();
    assert_eq!(back.as_ptr().cast_const(), addr);
    assert!(back.into_vec().is_err(), "static memory is not a Vec");
}

#[test]
fn a_registered_vec_comes_back_as_the_same_buffer() {
    let (ctx, _peer) = Context::sim_pair();
    let pd = ctx.alloc_pd().unwrap();
    let v = vec![3u8; 1000];
    let addr = v.as_ptr();
    let mr = pd.register(v, Access::LOCAL_WRITE).unwrap();
    mr.write(10, b"abc").unwrap();
    let other = mr.clone();
    let mem = mr.deregister().unwrap();
    // Another handle (the clone) keeps the memory: no Vec yet.
    let mem = mem.into_vec().unwrap_err();
    drop(other);
    let v = mem.into_vec().unwrap();
    assert_eq!(v.as_ptr(), addr, "never copied or moved");
    assert_eq!(&v[9..14], &[3, b'a', b'b', b'c', 3]);
}

#[test]
fn nothing_is_placed_into_a_deregistered_region() {
    let p = pair(9112, 4, 4, 0);
    let (stag, before) = (p.target.stag(), p.target.read(0, 1 << 20).unwrap());
    let mem = p.target.clone().deregister().unwrap();
    p.client
        .post_send(WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: p.src.sge(0, 4096).into(),
            remote_stag: stag,
            remote_to: 0,
        })
        .unwrap();
    let term = terminate_of(&p.client);
    // RFC 5041 §7.2: DDP layer, tagged buffer error, invalid STag.
    assert_eq!(
        (term.code.layer, term.code.etype, term.code.ecode),
        (1, 1, 0)
    );
    assert_eq!(mem.to_vec(0, 1 << 20).unwrap(), before);
}

/// An idle connected pair on a link that can wait for frames sleeps until
/// its next deadline (the 100 ms idle sweep here) instead of waking every
/// 200 µs, and a Send posted after the idle time still arrives (the post
/// wakes the client's loop, the frame the server's). That the wakes cut
/// a sleep short is pinned without wall-clock bounds a loaded machine
/// could break by `runtime::tests::a_post_unparks_a_sleeping_loop` and
/// `a_frame_wakes_a_loop_sleeping_on_its_device` (sleeps of 8 s or more).
#[test]
fn an_idle_pair_sleeps_long_and_still_answers() {
    let p = pair(9113, 4, 4, 1);
    std::thread::sleep(Duration::from_millis(300));
    let (server, client) = (&p._ctx.0, &p._ctx.1);
    let before = (
        server.stats().unwrap().poll_loop.sleeps,
        client.stats().unwrap().poll_loop.sleeps,
    );
    std::thread::sleep(Duration::from_millis(1500));
    let after = (
        server.stats().unwrap().poll_loop.sleeps,
        client.stats().unwrap().poll_loop.sleeps,
    );
    let slept = (after.0 - before.0, after.1 - before.1);
    // 200 µs pauses would be about 7,500 each; sweeps every 100 ms, 15.
    assert!(
        slept.0 < 100 && slept.1 < 100,
        "sleeps in 1.5 s idle: {slept:?}"
    );
    p.client
        .post_send(WorkRequest::Send {
            wr_id: 1,
            signaled: true,
            local: p.src.sge(0, 16).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    let wc = p.scq.wait(T).unwrap();
    assert_eq!((wc.opcode, wc.byte_len), (Some(WcOpcode::Recv), 16));
}
