//! Every RDMAP operation over SCTP (RFC 5043) through the public API:
//! two `iwarp::Context`s, `Transport::Sctp` on both sides, the queue
//! pairs inside the poll loops (placement there, completions on the CQ
//! rings), the DDP Stream Session exchange carrying private data and
//! IRD/ORD. Once over `Context::sim_pair` (no privileges), once over
//! AF_XDP on a veth pair between two network namespaces (needs root;
//! prints `SKIP:` without it, fails under `CI`).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, DisconnectCause, Error, ListenOptions,
    PostError, QpEvent, STag, Status, Transport, WcOpcode, WcStatus, WorkRequest, XdpOptions,
};
use netns_harness::{End, Netns, NsPair};

mod sctp_util;

const T: Duration = Duration::from_secs(10);

/// The listener settings of the tests that drive a `Stack` directly:
/// IRD/ORD 8, 16-deep queues in `pd`, completions as outputs, the
/// application deciding each request.
fn sctp_ulp(
    pd: iwarp_proto::mem::PdId,
    timeouts: iwarp_datapath::over_sctp::conn::SetupTimeouts,
) -> iwarp_datapath::stack::Ulp {
    let mut ulp = iwarp_tests::raw_sctp::ulp(pd, None, timeouts);
    if let iwarp_datapath::stack::Ulp::Iwarp { mpa, params, .. } = &mut ulp {
        (mpa.ird, mpa.ord) = (8, 8);
        params.emss = 1460;
    }
    ulp
}

fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        v.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    v.truncate(len);
    v
}

fn wait(cq: &iwarp::Cq, what: &str) -> iwarp::Wc {
    cq.wait(T)
        .unwrap_or_else(|| panic!("no completion for {what}"))
}

/// [`wait`], and when nothing comes, both contexts' SCTP counters in the
/// failure (retransmissions, drops, held data: what was lost where).
fn wait_or_tell(cq: &iwarp::Cq, what: &str, ctxs: [&Context; 2]) -> iwarp::Wc {
    cq.wait(T).unwrap_or_else(|| {
        let [s, c] = ctxs.map(|x| format!("{:?}", x.sctp_stats()));
        panic!("no completion for {what}\nserver SCTP: {s}\nclient SCTP: {c}")
    })
}

fn event(qp: &iwarp::Qp, what: &str, f: impl Fn(&QpEvent) -> bool) -> QpEvent {
    let deadline = Instant::now() + T;
    loop {
        if let Some(e) = qp.poll_event() {
            if f(&e) {
                return e;
            }
            continue;
        }
        assert!(Instant::now() < deadline, "no {what} event");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A rejected request: the initiator gets the responder's private data.
fn reject(server: &Context, client: &Context, port: u16) {
    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let ccq = client.create_cq(16);
    let mut lo = ListenOptions::new(&spd);
    lo.transport = Transport::Sctp;
    let listener = server.listen(port, &lo).unwrap();
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.transport = Transport::Sctp;
    co.mpa.private_data = b"may I".to_vec();
    let to = SocketAddrV4::new(server.addr(), port);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    assert_eq!(req.peer().private_data, b"may I");
    req.reject(b"busy").unwrap();
    match t.join().unwrap() {
        Err(Error::Rejected { private_data }) => assert_eq!(private_data, b"busy"),
        other => panic!("expected a rejection, got {other:?}"),
    }
}

/// Every operation between `server` and `client` over SCTP on `port`.
fn every_operation(server: &Context, client: &Context, port: u16, transport: Transport) {
    const BIG: usize = 100 << 10;
    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    // Server: an inbox for Sends, a region the client writes and reads,
    // two regions for the client to invalidate, and one Send buffer.
    let inbox = spd
        .register(vec![0; 16 * 4096], Access::LOCAL_WRITE)
        .unwrap();
    let target = spd
        .register(vec![0; BIG], Access::LOCAL_WRITE | Access::REMOTE)
        .unwrap();
    let source = pattern(7, BIG);
    let readable = spd
        .register(source.clone(), Access::LOCAL_READ | Access::REMOTE_READ)
        .unwrap();
    let inv1 = spd
        .register(vec![0; 64], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let inv2 = spd
        .register(vec![0; 64], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    // Client: what it sends and writes, where it reads to.
    let out = pattern(1, BIG);
    let src = cpd
        .register(out.clone(), Access::LOCAL_READ | Access::LOCAL_WRITE)
        .unwrap();
    let sink = cpd.register(vec![0; BIG], Access::LOCAL_WRITE).unwrap();
    let cinbox = cpd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();

    let mut lo = ListenOptions::new(&spd);
    lo.transport = Transport::Sctp;
    let listener = server.listen(port, &lo).unwrap();
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.transport = transport;
    co.mpa.private_data = b"hello over SCTP".to_vec();
    co.mpa.ird = 8;
    co.mpa.ord = 4;
    co.recvs = vec![(900, cinbox.sge(0, 4096).into())];
    let to = SocketAddrV4::new(server.addr(), port);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    assert_eq!(req.remote(), client.addr());
    assert_eq!(req.peer().private_data, b"hello over SCTP");
    assert_eq!((req.peer().ird, req.peer().ord), (Some(8), Some(4)));
    for i in 0..16u64 {
        req.post_recv(i, inbox.sge(i * 4096, 4096)).unwrap();
    }
    let sqp = req
        .accept(
            &AcceptOptions {
                private_data: b"welcome".to_vec(),
                ird: 16,
                ord: 16,
                timeout: T,
                recv_cq: None,
                pd: None,
                srq: None,
            },
            &scq,
        )
        .unwrap();
    let cqp = t.join().unwrap().unwrap();
    // RFC 6581 caps: the responder's IRD by the initiator's ORD, its ORD
    // by the initiator's IRD; the initiator's ORD by the responder's IRD.
    assert_eq!((sqp.negotiated().ird, sqp.negotiated().ord), (4, 8));
    assert_eq!((cqp.negotiated().ird, cqp.negotiated().ord), (8, 4));
    assert_eq!(cqp.negotiated().peer_private_data, b"welcome");
    assert_eq!(sqp.negotiated().peer_private_data, b"hello over SCTP");

    // The server Sends first: the client's receive was given to connect.
    sqp.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: readable.sge(0, 3000).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = wait_or_tell(&scq, "server Send", [server, client]);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (1, Status::Wc(WcStatus::Success), Some(WcOpcode::Send))
    );
    let wc = wait_or_tell(&ccq, "client Recv", [server, client]);
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.byte_len),
        (900, Some(WcOpcode::Recv), 3000)
    );
    assert_eq!(cinbox.read(0, 3000).unwrap(), &source[..3000]);

    // The four Sends (plain, SE, Invalidate, SE + Invalidate), each of
    // several segments.
    let sends: [(u64, usize, bool, Option<STag>); 4] = [
        (10, 4096, false, None),
        (11, 2500, true, None),
        (12, 1800, false, Some(inv1.stag())),
        (13, 3333, true, Some(inv2.stag())),
    ];
    for (k, &(wr_id, len, solicited, invalidate)) in sends.iter().enumerate() {
        cqp.post_send(WorkRequest::Send {
            wr_id,
            signaled: true,
            local: src.sge((k * 5000) as u64, len as u32).into(),
            solicited,
            invalidate,
        })
        .unwrap();
    }
    for (k, &(wr_id, len, solicited, invalidate)) in sends.iter().enumerate() {
        let wc = wait(&ccq, "client Send");
        assert_eq!(
            (wc.wr_id, wc.status, wc.opcode),
            (wr_id, Status::Wc(WcStatus::Success), Some(WcOpcode::Send))
        );
        let wc = wait(&scq, "server Recv");
        assert_eq!(wc.wr_id, k as u64, "receives complete in order");
        assert_eq!(
            (wc.opcode, wc.status),
            (Some(WcOpcode::Recv), Status::Wc(WcStatus::Success))
        );
        assert_eq!(wc.byte_len, len as u32);
        assert_eq!(wc.solicited, solicited, "send {wr_id}");
        assert_eq!(wc.invalidated, invalidate, "send {wr_id}");
        assert_eq!(
            inbox.read(k * 4096, len).unwrap(),
            &out[k * 5000..k * 5000 + len],
            "send {wr_id}"
        );
    }
    // The invalidated STags are invalid now: inv1 is tried below.

    // RDMA Write of 100 KiB, then a Send behind it: once the Send is
    // delivered every written octet is placed (RFC 5040 §5.5).
    cqp.post_send(WorkRequest::Write {
        wr_id: 20,
        signaled: true,
        local: src.sge(0, BIG as u32).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    cqp.post_send(WorkRequest::Send {
        wr_id: 21,
        signaled: true,
        local: src.sge(0, 8).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = wait(&scq, "Recv behind the Write");
    assert_eq!((wc.wr_id, wc.byte_len), (4, 8));
    assert_eq!(target.read(0, BIG).unwrap(), out, "written octets");
    for id in [20, 21] {
        let wc = wait(&ccq, "Write/Send");
        assert_eq!((wc.wr_id, wc.status), (id, Status::Wc(WcStatus::Success)));
    }

    // RDMA Read of 100 KiB from the server's region.
    cqp.post_send(WorkRequest::Read {
        wr_id: 30,
        signaled: true,
        local: sink.sge(0, BIG as u32).into(),
        remote_stag: readable.stag(),
        remote_to: 0,
    })
    .unwrap();
    let wc = wait(&ccq, "Read");
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode, wc.byte_len),
        (
            30,
            Status::Wc(WcStatus::Success),
            Some(WcOpcode::Read),
            BIG as u32
        )
    );
    assert_eq!(sink.read(0, BIG).unwrap(), source, "read octets");
    let counters = cqp.stats().unwrap().qp.unwrap();
    assert!(counters.bytes_placed >= BIG as u64, "{counters:?}");
    // The Write's segments and the Read Response's were placed straight
    // from the received DATA chunks (whole, unordered, nothing waiting),
    // not reassembled and queued as events.
    for (who, c) in [("server", server), ("client", client)] {
        let st = c.sctp_stats().unwrap().unwrap().assoc;
        assert!(
            st.data_in_place > 0,
            "{who}: nothing placed in place: {st:?}"
        );
    }

    // Terminate: a Write to an STag the server invalidated (Send with
    // Invalidate above). The server refuses it with an RDMAP Terminate
    // (invalid STag); the client's Write
    // is handed over, what the server still has posted is flushed, and the
    // DDP Stream Session and then the association end on both sides.
    cqp.post_send(WorkRequest::Write {
        wr_id: 40,
        signaled: true,
        local: src.sge(0, 64).into(),
        remote_stag: inv1.stag(),
        remote_to: 0,
    })
    .unwrap();
    // A Write completes once handed to the lower layer (as over TCP):
    // the Terminate comes after it, as an event.
    let wc = wait(&ccq, "Write to a bad STag");
    assert_eq!((wc.wr_id, wc.status), (40, Status::Wc(WcStatus::Success)));
    let sent = event(&sqp, "TerminateSent", |e| {
        matches!(e, QpEvent::TerminateSent(_))
    });
    let got = event(&cqp, "TerminateReceived", |e| {
        matches!(e, QpEvent::TerminateReceived(_))
    });
    match (sent, got) {
        (QpEvent::TerminateSent(a), QpEvent::TerminateReceived(b)) => {
            assert_eq!(a, b, "the Terminate arrives as sent");
            // RFC 5041 §7.2: DDP layer, tagged buffer error, invalid STag,
            // quoting the Write's DDP header.
            let c = a.code;
            assert_eq!((c.layer, c.etype, c.ecode), (1, 1, 0), "{a:?}");
            match a.ddp_header {
                Some(iwarp_proto::wire::DdpHeader::Tagged(h)) => {
                    assert_eq!((h.stag, h.to), (inv1.stag().0, 0))
                }
                other => panic!("{other:?}"),
            }
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(inv1.read(0, 64).unwrap(), vec![0; 64], "nothing placed");
    // Receives 5..16 were still posted: flushed, in order.
    for i in 5..16u64 {
        let wc = wait(&scq, "flushed receive");
        assert_eq!((wc.wr_id, wc.status), (i, Status::Wc(WcStatus::Flushed)));
    }
    sqp.wait_disconnected(T).unwrap();
    cqp.wait_disconnected(T).unwrap();
    assert!(matches!(
        cqp.post_send(WorkRequest::Send {
            wr_id: 50,
            signaled: true,
            local: src.sge(0, 8).into(),
            solicited: false,
            invalidate: None,
        }),
        Ok(())
    ));
    let wc = wait(&ccq, "post after the end");
    assert_eq!(wc.wr_id, 50);
    assert!(!wc.status.is_ok(), "{wc:?}");
    assert!(scq.poll_one().is_none() && ccq.poll_one().is_none());
    assert!(!scq.overrun() && !ccq.overrun());
}

/// An MPA/TCP connection on the same contexts: (server qp, client qp,
/// server cq, client cq, server inbox, client source).
#[allow(clippy::type_complexity)]
fn mpa_pair(
    server: &Context,
    client: &Context,
    port: u16,
) -> (
    iwarp::Qp,
    iwarp::Qp,
    iwarp::Cq,
    iwarp::Cq,
    iwarp::Mr,
    iwarp::Mr,
) {
    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let inbox = spd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let src = cpd.register(pattern(3, 4096), Access::LOCAL_READ).unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let co = ConnectOptions::new(&cpd, &ccq);
    let to = SocketAddrV4::new(server.addr(), port);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    for i in 0..4u64 {
        req.post_recv(i, inbox.sge(i * 1024, 1024)).unwrap();
    }
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    (sqp, cqp, scq, ccq, inbox, src)
}

fn mpa_send(qp: &iwarp::Qp, src: &iwarp::Mr, scq: &iwarp::Cq, inbox: &iwarp::Mr, k: u64) {
    qp.post_send(WorkRequest::Send {
        wr_id: 100 + k,
        signaled: true,
        local: src.sge(k * 1024, 1000).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = wait(scq, "MPA Recv");
    assert_eq!((wc.wr_id, wc.byte_len), (k, 1000));
    let want = pattern(3, 4096);
    assert_eq!(
        inbox.read(k as usize * 1024, 1000).unwrap(),
        &want[k as usize * 1024..k as usize * 1024 + 1000]
    );
}

#[test]
fn every_rdmap_operation_over_sctp_on_the_simulated_link() {
    let (server, client) = Context::sim_pair();
    // An MPA/TCP connection stays up on the same contexts throughout.
    let (_sqp, mqp, mscq, _mccq, minbox, msrc) = mpa_pair(&server, &client, 7000);
    mpa_send(&mqp, &msrc, &mscq, &minbox, 0);
    every_operation(&server, &client, 7100, Transport::Sctp);
    mpa_send(&mqp, &msrc, &mscq, &minbox, 1);
    reject(&server, &client, 7101);
    every_operation(&server, &client, 7102, Transport::SctpOverUdp);
    mpa_send(&mqp, &msrc, &mscq, &minbox, 2);
}

/// Graceful close from the client: posted receives on both sides flush,
/// both see the disconnect; an abort: the peer gets the Terminate (RDMAP
/// local catastrophic error, RFC 5040 §7.1) and both disconnect.
#[test]
fn disconnect_and_abort_over_sctp() {
    let (server, client) = Context::sim_pair();
    for (port, abort) in [(7400u16, false), (7401, true)] {
        let spd = server.alloc_pd().unwrap();
        let cpd = client.alloc_pd().unwrap();
        let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
        let sbuf = spd.register(vec![0; 1024], Access::LOCAL_WRITE).unwrap();
        let cbuf = cpd.register(vec![0; 1024], Access::LOCAL_WRITE).unwrap();
        let mut lo = ListenOptions::new(&spd);
        lo.transport = Transport::Sctp;
        let listener = server.listen(port, &lo).unwrap();
        let mut co = ConnectOptions::new(&cpd, &ccq);
        co.transport = Transport::Sctp;
        let to = SocketAddrV4::new(server.addr(), port);
        let c2 = client.clone();
        let t = std::thread::spawn(move || c2.connect(to, &co));
        let req = listener.get_request(T).unwrap();
        req.post_recv(1, sbuf.sge(0, 1024)).unwrap();
        let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
        let cqp = t.join().unwrap().unwrap();
        cqp.post_recv(2, cbuf.sge(0, 1024)).unwrap();
        if abort {
            cqp.abort().unwrap();
            let e = event(&sqp, "TerminateReceived", |e| {
                matches!(e, QpEvent::TerminateReceived(_))
            });
            match e {
                QpEvent::TerminateReceived(t) => {
                    let c = t.code;
                    assert_eq!((c.layer, c.etype, c.ecode), (0, 0, 0), "{t:?}");
                }
                other => panic!("{other:?}"),
            }
        } else {
            cqp.disconnect().unwrap();
        }
        // Who ended it, as over TCP: our close and the peer's, or the
        // Terminate our abort sent and the peer received.
        let (ours, theirs) = (
            cqp.wait_disconnected(T).unwrap(),
            sqp.wait_disconnected(T).unwrap(),
        );
        if abort {
            assert!(
                matches!(ours, Some(DisconnectCause::TerminateSent(_))),
                "{ours:?}"
            );
            assert!(
                matches!(theirs, Some(DisconnectCause::TerminateReceived(_))),
                "{theirs:?}"
            );
        } else {
            assert_eq!(ours, Some(DisconnectCause::LocalClose));
            assert_eq!(theirs, Some(DisconnectCause::PeerClosed));
        }
        let wc = wait(&scq, "server receive flushed");
        assert_eq!((wc.wr_id, wc.status), (1, Status::Wc(WcStatus::Flushed)));
        let wc = wait(&ccq, "client receive flushed");
        assert_eq!((wc.wr_id, wc.status), (2, Status::Wc(WcStatus::Flushed)));
        // A post after the end completes refused, with the cause (the
        // connection may already be freed: the cause is kept for it).
        cqp.post_send(WorkRequest::Send {
            wr_id: 3,
            signaled: true,
            local: cbuf.sge(0, 8).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
        let wc = wait(&ccq, "post after the end refused");
        assert_eq!(wc.wr_id, 3);
        assert_eq!(
            wc.status,
            Status::Refused(PostError::Disconnected(ours.unwrap())),
            "{wc:?}"
        );
        drop((sqp, cqp));
    }
    // Every connection freed once the queue pairs are dropped.
    let deadline = Instant::now() + T;
    while server.sctp_stats().unwrap().map(|s| s.connections) != Some(0)
        || client.sctp_stats().unwrap().map(|s| s.connections) != Some(0)
    {
        assert!(Instant::now() < deadline, "SCTP connections not freed");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(server.tracked_connections(), 0);
    assert_eq!(client.tracked_connections(), 0);
}

#[test]
fn mpa_and_sctp_listeners_share_no_port_number() {
    let (server, _client) = Context::sim_pair();
    let pd = server.alloc_pd().unwrap();
    let mut lo = ListenOptions::new(&pd);
    let _tcp = server.listen(7200, &lo).unwrap();
    lo.transport = Transport::Sctp;
    assert!(matches!(server.listen(7200, &lo), Err(Error::AddrInUse)));
    let _sctp = server.listen(7201, &lo).unwrap();
    lo.transport = Transport::Mpa;
    assert!(matches!(server.listen(7201, &lo), Err(Error::AddrInUse)));
}

#[test]
fn every_rdmap_operation_over_sctp_on_af_xdp_in_namespaces() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let lab = NsPair::new("sc").unwrap();
    let ctx = |end: End, ns: &Netns, ip: Ipv4Addr| {
        let mut o = XdpOptions::new(lab.veth.name(end), ip, 24);
        o.host.netns = Some(ns.ns_path());
        Context::af_xdp(&o).unwrap()
    };
    let server = ctx(End::A, &lab.a, lab.addr(1));
    let client = ctx(End::B, &lab.b, lab.addr(2));
    every_operation(&server, &client, 7300, Transport::Sctp);
    let udp = |c: &Context| {
        let h = c.sctp_stats().unwrap().unwrap().host;
        (h.rx_udp, h.tx_udp)
    };
    assert_eq!(udp(&server), (0, 0), "raw IPv4 only so far");
    // The same inside UDP (RFC 6951): the client connects to port 9899,
    // the server's listener takes the association as it arrives.
    every_operation(&server, &client, 7302, Transport::SctpOverUdp);
    for (who, c) in [("server", &server), ("client", &client)] {
        let (rx, tx) = udp(c);
        assert!(rx > 10 && tx > 10, "{who}: {rx} in, {tx} out inside UDP");
    }
    reject(&server, &client, 7301);
    drop((server, client));
}

/// A request our application leaves unanswered past `decision_timeout`
/// is rejected on the wire (as over MPA): the initiator sees a rejection,
/// accepting afterwards fails with `TimedOut`.
#[test]
fn an_unanswered_sctp_request_is_rejected_after_the_decision_timeout() {
    let (server, client) = Context::sim_pair();
    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let mut lo = ListenOptions::new(&spd);
    lo.transport = Transport::Sctp;
    lo.mpa.decision_timeout = 200_000_000;
    let listener = server.listen(7500, &lo).unwrap();
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.transport = Transport::Sctp;
    let to = SocketAddrV4::new(server.addr(), 7500);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    let started = Instant::now();
    match t.join().unwrap() {
        Err(Error::Rejected { private_data }) => assert!(private_data.is_empty()),
        other => panic!("expected a rejection, got {other:?}"),
    }
    assert!(started.elapsed() >= Duration::from_millis(150), "too early");
    assert!(matches!(
        req.accept(&AcceptOptions::default(), &scq),
        Err(Error::TimedOut)
    ));
}

/// A raw RFC 5043 peer (our `SctpHost` engine, driven by hand) against a
/// stack's SCTP part: what a peer must not send gets a clear answer, and
/// the loop keeps running.
///
/// * an Initiate whose Private Data lacks the IRD/ORD word: rejected, the
///   association shut down, nothing reported to the application;
/// * an Initiate on stream 1: rejected (one session, on stream 0); the
///   Initiate on stream 0 behind it: a connect request, accepted, the
///   Accept carrying the capped IRD/ORD word;
/// * a 3-octet DDP Segment: the queue pair sends an RDMAP Terminate (a
///   segment on stream 0), then the DDP Stream Session Terminate; the
///   association is shut down; the receive posted before is flushed and
///   the application sees the disconnect.
#[test]
fn a_raw_peer_gets_clear_answers() {
    use ddp_sctp::{DdpEvent, SessionEnd};
    use iwarp_datapath::link::MemDevice;
    use iwarp_datapath::over_sctp::conn::SetupTimeouts;
    use iwarp_datapath::over_sctp::{SctpCommand, SctpOutput};
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
    use iwarp_datapath::runtime::{spawn, Mode};
    use iwarp_datapath::stack::{Command, CqEntry, CqRing, Output, Stack, StackConfig};
    use iwarp_proto::mem::MemoryTable;
    use iwarp_proto::qp::Sge;
    use sctp_lite::assoc::CloseReason;
    use std::sync::Arc;
    use tcp_lite::iface::IfaceConfig;
    use tcp_lite::wire::{EthernetAddress, Ipv4Address};

    let (da, db) = MemDevice::pair(4096);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(
            pd,
            vec![0u8; 4096],
            iwarp_proto::mem::Access::LOCAL_WRITE,
            0,
        )
        .unwrap();
    let mut cfg = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x77, 1]),
        Ipv4Address::new(10, 0, 9, 1),
        24,
    ));
    cfg.tcp.rto_min = 5_000_000;
    let stack = spawn(
        Stack::new(cfg, mem),
        da,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    );
    let mut peer = sctp_util::Host::new(
        sctp_util::start([0x02, 0, 0, 0, 0x77, 2], [10, 0, 9, 2], db, false),
        "peer",
    );
    let ring = Arc::new(CqRing::new(64));
    let mut kept: Vec<Output> = Vec::new();
    let mut wait_stack = |what: &str, pick: &mut dyn FnMut(&Output) -> bool| {
        if let Some(i) = kept.iter().position(&mut *pick) {
            return kept.remove(i);
        }
        let end = Instant::now() + T;
        while Instant::now() < end {
            match stack.poll() {
                Some(o) if pick(&o) => return o,
                Some(o) => kept.push(o),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        panic!("stack: no {what}; outputs: {kept:?}");
    };
    stack
        .post(Command::Listen {
            port: 5000,
            transport: iwarp_datapath::stack::Transport::Sctp,
            ulp: sctp_ulp(pd, SetupTimeouts::default()),
        })
        .unwrap();
    wait_stack("Listening", &mut |o| {
        matches!(
            o,
            Output::Listening {
                port: 5000,
                result: Ok(())
            }
        )
    });
    let open = |peer: &mut sctp_util::Host, token: u64, local_port: u16| {
        peer.post(SctpCommand::Connect {
            token,
            remote: [10, 0, 9, 1],
            port: 5000,
            local_port,
            udp_port: None,
        });
        let id = peer.wait("Opening", |o| match o {
            SctpOutput::Opening { token: t, result } if *t == token => Some(result.unwrap()),
            _ => None,
        });
        peer.wait("Connected", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
            _ => None,
        });
        id
    };

    // 1. Private Data without the IRD/ORD word.
    let a1 = open(&mut peer, 1, 40_000);
    peer.post(SctpCommand::Initiate {
        assoc: a1,
        stream: 0,
        private_data: vec![1, 2],
    });
    peer.wait("Reject", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionEnded {
                stream: 0,
                why: SessionEnd::Rejected,
                ..
            },
        ) if *x == a1 => Some(()),
        _ => None,
    });
    peer.wait("shutdown", |o| match o {
        SctpOutput::Event(x, DdpEvent::Closed(CloseReason::Shutdown)) if *x == a1 => Some(()),
        _ => None,
    });

    // 2. Stream 1, then stream 0.
    let a2 = open(&mut peer, 2, 40_001);
    let word = iwarp_control::sctp::initiate(2, 1, b"raw").unwrap();
    peer.post(SctpCommand::Initiate {
        assoc: a2,
        stream: 1,
        private_data: word.clone(),
    });
    peer.wait("Reject on stream 1", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionEnded {
                stream: 1,
                why: SessionEnd::Rejected,
                ..
            },
        ) if *x == a2 => Some(()),
        _ => None,
    });
    peer.post(SctpCommand::Initiate {
        assoc: a2,
        stream: 0,
        private_data: word,
    });
    let sock = match wait_stack("Accepted", &mut |o| {
        matches!(o, Output::Accepted { port: 5000, .. })
    }) {
        Output::Accepted { sock, .. } => sock,
        _ => unreachable!(),
    };
    match wait_stack(
        "ConnectRequest",
        &mut |o| matches!(o, Output::Cm(s, CmEvent::ConnectRequest(_)) if *s == sock),
    ) {
        Output::Cm(_, CmEvent::ConnectRequest(r)) => {
            assert_eq!(
                (r.ird, r.ord, &r.private_data[..]),
                (Some(2), Some(1), &b"raw"[..])
            );
        }
        _ => unreachable!(),
    }
    stack
        .post(Command::Iwarp(
            sock,
            HostCommand::PostRecv(
                77,
                Sge {
                    stag,
                    to: 0,
                    len: 4096,
                }
                .into(),
            ),
        ))
        .unwrap();
    stack
        .post(Command::Accept {
            sock,
            private_data: b"fine".to_vec(),
            ird: 8,
            ord: 8,
            cq: Some(ring.clone().into()),
            pd: None,
        })
        .unwrap();
    let pd_back = peer.wait("SessionAccepted", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionAccepted {
                stream: 0,
                private_data,
            },
        ) if *x == a2 => Some(private_data.clone()),
        _ => None,
    });
    // Our IRD capped by its ORD (1), our ORD by its IRD (2).
    assert_eq!(pd_back, [0, 1, 0, 2, b'f', b'i', b'n', b'e']);
    wait_stack(
        "Established",
        &mut |o| matches!(o, Output::Cm(s, CmEvent::Established(n)) if *s == sock && (n.ird, n.ord) == (1, 2)),
    );

    // 3. A segment too short to hold a DDP header.
    peer.post(SctpCommand::Segment {
        assoc: a2,
        stream: 0,
        segment: vec![0xff; 3],
    });
    let term = peer.wait("the RDMAP Terminate", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::Segment {
                stream: 0, segment, ..
            },
        ) if *x == a2 => Some(segment.clone()),
        _ => None,
    });
    // An untagged DDP segment whose RDMAP opcode is Terminate (0x7).
    assert!(term.len() >= 18, "{term:?}");
    assert_eq!(term[1] & 0x0f, 0x7, "RDMAP opcode Terminate: {term:?}");
    peer.wait("Session Terminate", |o| match o {
        SctpOutput::Event(
            x,
            DdpEvent::SessionEnded {
                stream: 0,
                why: SessionEnd::PeerTerminated,
                ..
            },
        ) if *x == a2 => Some(()),
        _ => None,
    });
    peer.wait("shutdown", |o| match o {
        SctpOutput::Event(x, DdpEvent::Closed(CloseReason::Shutdown)) if *x == a2 => Some(()),
        _ => None,
    });
    wait_stack(
        "Disconnected",
        &mut |o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock),
    );
    match ring.ring.pop() {
        Some((s, CqEntry::Done(c))) => {
            assert_eq!((s, c.wr_id, c.status), (sock, 77, WcStatus::Flushed))
        }
        other => panic!("{other:?}"),
    }
    // The loop still answers; the connection stays (refusing posts) until
    // the application closes it, then it is freed.
    stack.post(Command::Close(sock)).unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    stack
        .post(Command::Inspect(iwarp_datapath::stack::InspectOp(
            Box::new(move |s| {
                let _ = tx.send(s.sctp_counters().map(|c| c.connections));
            }),
        )))
        .unwrap();
    assert_eq!(rx.recv_timeout(T).unwrap(), Some(0));
}

/// Issue 27, item 6: a graceful close over SCTP that waits for the answer
/// to our RDMA Read ends once the peer has sent nothing for the close
/// timeout (`SetupTimeouts::close`, MPA's `close_timeout`), as over MPA:
/// the close becomes abortive, the Read completes flushed and the
/// application sees the disconnect. The peer is a raw RFC 5043 peer that
/// keeps the association up (SCTP acknowledges) but never answers the
/// Read Request. Without the timer the close waited for ever.
#[test]
fn a_graceful_close_waiting_for_an_unanswered_read_ends_after_the_close_timeout() {
    use ddp_sctp::DdpEvent;
    use iwarp_datapath::link::MemDevice;
    use iwarp_datapath::over_sctp::conn::SetupTimeouts;
    use iwarp_datapath::over_sctp::{SctpCommand, SctpOutput};
    use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
    use iwarp_datapath::runtime::{spawn, Mode};
    use iwarp_datapath::stack::{Command, CqEntry, CqRing, Output, Stack, StackConfig};
    use iwarp_proto::mem::MemoryTable;
    use iwarp_proto::qp::Sge;
    use std::sync::Arc;
    use tcp_lite::iface::IfaceConfig;
    use tcp_lite::wire::{EthernetAddress, Ipv4Address};

    const CLOSE: Duration = Duration::from_millis(300);
    let (da, db) = MemDevice::pair(4096);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(
            pd,
            vec![0u8; 4096],
            iwarp_proto::mem::Access::LOCAL_WRITE,
            0,
        )
        .unwrap();
    let mut cfg = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x78, 1]),
        Ipv4Address::new(10, 0, 10, 1),
        24,
    ));
    cfg.tcp.rto_min = 5_000_000;
    let stack = spawn(
        Stack::new(cfg, mem),
        da,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    );
    let mut peer = sctp_util::Host::new(
        sctp_util::start([0x02, 0, 0, 0, 0x78, 2], [10, 0, 10, 2], db, false),
        "peer",
    );
    let ring = Arc::new(CqRing::new(64));
    let mut kept: Vec<Output> = Vec::new();
    // A generous bound: the close must end, not end quickly.
    let mut wait_stack = |what: &str, limit: Duration, pick: &mut dyn FnMut(&Output) -> bool| {
        if let Some(i) = kept.iter().position(&mut *pick) {
            return kept.remove(i);
        }
        let end = Instant::now() + limit;
        while Instant::now() < end {
            match stack.poll() {
                Some(o) if pick(&o) => return o,
                Some(o) => kept.push(o),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        panic!("stack: no {what}; outputs: {kept:?}");
    };
    let timeouts = SetupTimeouts {
        close: CLOSE.as_nanos() as u64,
        ..SetupTimeouts::default()
    };
    stack
        .post(Command::Listen {
            port: 5000,
            transport: iwarp_datapath::stack::Transport::Sctp,
            ulp: sctp_ulp(pd, timeouts),
        })
        .unwrap();
    wait_stack("Listening", T, &mut |o| {
        matches!(
            o,
            Output::Listening {
                port: 5000,
                result: Ok(())
            }
        )
    });
    peer.post(SctpCommand::Connect {
        token: 1,
        remote: [10, 0, 10, 1],
        port: 5000,
        local_port: 40_000,
        udp_port: None,
    });
    let a = peer.wait("Opening", |o| match o {
        SctpOutput::Opening { token: 1, result } => Some(result.unwrap()),
        _ => None,
    });
    peer.wait("Connected", |o| match o {
        SctpOutput::Event(x, DdpEvent::Connected) if *x == a => Some(()),
        _ => None,
    });
    // The peer offers IRD 4: our ORD may be 4.
    peer.post(SctpCommand::Initiate {
        assoc: a,
        stream: 0,
        private_data: iwarp_control::sctp::initiate(4, 4, b"").unwrap(),
    });
    let sock = match wait_stack("Accepted", T, &mut |o| {
        matches!(o, Output::Accepted { port: 5000, .. })
    }) {
        Output::Accepted { sock, .. } => sock,
        _ => unreachable!(),
    };
    stack
        .post(Command::Accept {
            sock,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: Some(ring.clone().into()),
            pd: None,
        })
        .unwrap();
    peer.wait("SessionAccepted", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionAccepted { stream: 0, .. }) if *x == a => Some(()),
        _ => None,
    });
    wait_stack(
        "Established",
        T,
        &mut |o| matches!(o, Output::Cm(s, CmEvent::Established(_)) if *s == sock),
    );
    // A Read the peer will never answer, then a graceful close.
    let read = iwarp_proto::qp::WorkRequest::Read {
        wr_id: 9,
        signaled: true,
        local: Sge {
            stag,
            to: 0,
            len: 64,
        }
        .into(),
        remote_stag: iwarp_proto::mem::STag(0x1234_5600),
        remote_to: 0,
    };
    // The stopwatch starts before the Read is posted, not when the close
    // is: the loop handles a command with the clock reading taken at the
    // start of its round (`runtime`), and the round that takes our Close
    // may have begun before we saw the Read Request (but after the round
    // that sent it, which took the Read we post now). So the stack's
    // close timer starts no earlier than this instant; from a later one
    // a loaded machine saw "ended before the close timeout: 298.7 ms".
    let anchor = Instant::now();
    stack
        .post(Command::Iwarp(sock, HostCommand::PostSend(read)))
        .unwrap();
    peer.wait("the Read Request", |o| match o {
        SctpOutput::Event(x, DdpEvent::Segment { stream: 0, .. }) if *x == a => Some(()),
        _ => None,
    });
    stack.post(Command::Close(sock)).unwrap();
    wait_stack(
        "Disconnected after the close timeout",
        Duration::from_secs(30),
        &mut |o| matches!(o, Output::Cm(s, CmEvent::Disconnected) if *s == sock),
    );
    assert!(
        anchor.elapsed() >= CLOSE,
        "ended before the close timeout: {:?} after the Read was posted",
        anchor.elapsed()
    );
    match ring.ring.pop() {
        Some((s, CqEntry::Done(c))) => {
            assert_eq!((s, c.wr_id, c.status), (sock, 9, WcStatus::Flushed))
        }
        other => panic!("{other:?}"),
    }
    let (tx, rx) = std::sync::mpsc::channel();
    stack
        .post(Command::Inspect(iwarp_datapath::stack::InspectOp(
            Box::new(move |s| {
                let _ = tx.send(s.sctp().map(|c| c.close_timeouts()));
            }),
        )))
        .unwrap();
    assert_eq!(rx.recv_timeout(T).unwrap(), Some(1));
}

/// Issue 27, item 5 over SCTP: associations whose Initiate (or whose
/// request's answer) is still awaited count against the listener's
/// backlog; one more is aborted as it comes up (Linux answers the COOKIE
/// ECHO with ABORT when the accept queue is full), and once a request is
/// accepted there is room again.
#[test]
fn sctp_associations_nobody_accepted_hold_at_most_the_backlog() {
    use ddp_sctp::DdpEvent;
    use iwarp_datapath::link::MemDevice;
    use iwarp_datapath::over_sctp::conn::SetupTimeouts;
    use iwarp_datapath::over_sctp::{SctpCommand, SctpOutput};
    use iwarp_datapath::over_tcp::CmEvent;
    use iwarp_datapath::runtime::{spawn, Mode};
    use iwarp_datapath::stack::{Command, Output, Stack, StackConfig};
    use iwarp_proto::mem::MemoryTable;
    use tcp_lite::iface::IfaceConfig;
    use tcp_lite::wire::{EthernetAddress, Ipv4Address};

    const BACKLOG: usize = 4;
    let (da, db) = MemDevice::pair(4096);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let mut cfg = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x79, 1]),
        Ipv4Address::new(10, 0, 11, 1),
        24,
    ));
    cfg.tcp.rto_min = 5_000_000;
    cfg.backlog = BACKLOG;
    let stack = spawn(
        Stack::new(cfg, mem),
        da,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    );
    let mut peer = sctp_util::Host::new(
        sctp_util::start([0x02, 0, 0, 0, 0x79, 2], [10, 0, 11, 2], db, false),
        "peer",
    );
    let mut kept: Vec<Output> = Vec::new();
    let mut wait_stack = |what: &str, pick: &mut dyn FnMut(&Output) -> bool| {
        if let Some(i) = kept.iter().position(&mut *pick) {
            return kept.remove(i);
        }
        let end = Instant::now() + T;
        while Instant::now() < end {
            match stack.poll() {
                Some(o) if pick(&o) => return o,
                Some(o) => kept.push(o),
                None => std::thread::sleep(Duration::from_micros(100)),
            }
        }
        panic!("stack: no {what}; outputs: {kept:?}");
    };
    stack
        .post(Command::Listen {
            port: 5000,
            transport: iwarp_datapath::stack::Transport::Sctp,
            // The silent ones must not time out during the test.
            ulp: sctp_ulp(
                pd,
                SetupTimeouts {
                    request: 600_000_000_000,
                    ..SetupTimeouts::default()
                },
            ),
        })
        .unwrap();
    wait_stack("Listening", &mut |o| {
        matches!(
            o,
            Output::Listening {
                port: 5000,
                result: Ok(())
            }
        )
    });
    // Open an association; true if it stays up, false if it is aborted.
    let open = |peer: &mut sctp_util::Host, token: u64| {
        peer.post(SctpCommand::Connect {
            token,
            remote: [10, 0, 11, 1],
            port: 5000,
            local_port: 41_000 + token as u16,
            udp_port: None,
        });
        let id = peer.wait("Opening", |o| match o {
            SctpOutput::Opening { token: t, result } if *t == token => Some(result.unwrap()),
            _ => None,
        });
        peer.wait("Connected", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
            _ => None,
        });
        id
    };
    // Aborted right after it came up (a generous bound: it must come).
    let aborted = |peer: &mut sctp_util::Host, id| {
        peer.wait("ABORT", |o| match o {
            SctpOutput::Event(x, DdpEvent::Closed(_)) if *x == id => Some(()),
            _ => None,
        })
    };
    // The first sends its Initiate: a request the application holds.
    let first = open(&mut peer, 0);
    peer.post(SctpCommand::Initiate {
        assoc: first,
        stream: 0,
        private_data: iwarp_control::sctp::initiate(4, 4, b"").unwrap(),
    });
    let sock = match wait_stack("ConnectRequest", &mut |o| {
        matches!(o, Output::Cm(_, CmEvent::ConnectRequest(_)))
    }) {
        Output::Cm(sock, _) => sock,
        _ => unreachable!(),
    };
    // Three silent ones fill the backlog; the next two are aborted.
    for token in 1..BACKLOG as u64 {
        open(&mut peer, token);
    }
    for token in BACKLOG as u64..BACKLOG as u64 + 2 {
        let id = open(&mut peer, token);
        aborted(&mut peer, id);
    }
    // Accepting the request makes room for one more.
    stack
        .post(Command::Accept {
            sock,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: None,
            pd: None,
        })
        .unwrap();
    wait_stack(
        "Established",
        &mut |o| matches!(o, Output::Cm(s, CmEvent::Established(_)) if *s == sock),
    );
    // Room for one more, and no more.
    open(&mut peer, 10);
    let id = open(&mut peer, 11);
    aborted(&mut peer, id);
    let (tx, rx) = std::sync::mpsc::channel();
    stack
        .post(Command::Inspect(iwarp_datapath::stack::InspectOp(
            Box::new(move |s| {
                let _ = tx.send(s.sctp().map(|c| (s.sctp_connections(), c.backlog_aborts())));
            }),
        )))
        .unwrap();
    assert_eq!(rx.recv_timeout(T).unwrap(), Some((BACKLOG + 1, 3)));
}

/// Jumbo frames (MTU 9000, over the in-memory link given to
/// `Context::with_device`, 1% of frames lost and 1% late): the queue pairs
/// give their DDP Segments to SCTP by reference (MULPDU above
/// `BY_REFERENCE_MIN_MULPDU`), written into each packet from registered
/// memory, retransmissions included; every operation still checks out
/// byte for byte. Then a region deregistered while a Write from it is in
/// flight: what SCTP still has to send cannot be written, so the
/// association ends with an ABORT and the Write completes in error,
/// and nothing is read from the freed region.
#[test]
fn every_rdmap_operation_over_sctp_with_jumbo_frames_by_reference() {
    use iwarp::HostOptions;
    use iwarp_datapath::link::{Faults, FaultyDevice, MemDevice};
    let host = |last: u8| {
        let mut h = HostOptions::new(Ipv4Addr::new(10, 0, 19, last), 24);
        h.tcp.rto_min = Duration::from_millis(5);
        h
    };
    let mac = |last: u8| [0x02, 0, 0, 0, 19, last];
    let faults = Faults {
        loss: 10_000,
        reorder: 10_000,
        ..Faults::default()
    };
    let (da, db) = MemDevice::pair(4096);
    let server =
        Context::with_device(FaultyDevice::new(da, faults, 3), mac(1), 9000, &host(1)).unwrap();
    let client =
        Context::with_device(FaultyDevice::new(db, faults, 4), mac(2), 9000, &host(2)).unwrap();
    every_operation(&server, &client, 7300, Transport::Sctp);
    drop((server, client));

    // A Write whose source goes away under it (a clean link, so that the
    // one ABORT arrives: SCTP does not retransmit it).
    let (da, db) = MemDevice::pair(4096);
    let server = Context::with_device(da, mac(1), 9000, &host(1)).unwrap();
    let client = Context::with_device(db, mac(2), 9000, &host(2)).unwrap();
    let by_ref = |c: &Context| {
        c.sctp_stats()
            .unwrap()
            .map_or(0, |s| s.segments_by_reference)
    };
    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    // Long enough that the Write is still unacknowledged when the source
    // goes (about 13 ms at 5 GB/s): at 4 MiB a fast run finished it
    // between the look below and the deregistration (CI saw it once).
    const LEN: usize = 64 << 20;
    let target = spd.register(vec![0; LEN], Access::REMOTE_WRITE).unwrap();
    let src = cpd.register(pattern(3, LEN), Access::LOCAL_READ).unwrap();
    let mut lo = ListenOptions::new(&spd);
    lo.transport = Transport::Sctp;
    let listener = server.listen(7301, &lo).unwrap();
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.transport = Transport::Sctp;
    let to = SocketAddrV4::new(server.addr(), 7301);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, LEN as u32).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .unwrap();
    // Wait until some of it went by reference, then free the source.
    let deadline = Instant::now() + T;
    while by_ref(&client) == 0 {
        assert!(Instant::now() < deadline, "no segment went by reference");
        std::thread::yield_now();
    }
    let freed = src.deregister().unwrap();
    let wc = wait_or_tell(&ccq, "the Write from the freed region", [&server, &client]);
    assert_eq!(wc.wr_id, 1);
    assert!(!wc.status.is_ok(), "a Write whose source went away: {wc:?}");
    assert_eq!(wc.status, Status::Wc(WcStatus::Flushed), "{wc:?}");
    let (ours, theirs) = (
        cqp.wait_disconnected(T).unwrap(),
        sqp.wait_disconnected(T).unwrap(),
    );
    assert_eq!(ours, Some(DisconnectCause::LocalAbort));
    assert!(theirs.is_some(), "{theirs:?}");
    drop(freed);
}
