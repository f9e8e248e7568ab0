//! What an operator or an event loop sees of a running context: live
//! counters ([`Context::stats`], [`Qp::stats`]) and the CQ notification
//! descriptor. Over the simulated link.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, DeviceStats, ListenOptions, Status, WcOpcode,
    WorkRequest,
};

const T: Duration = Duration::from_secs(10);

/// A connected pair: (server ctx, client ctx, server qp, client qp, server
/// cq, client cq, server inbox, client source).
#[allow(clippy::type_complexity)]
fn connected(
    port: u16,
    recvs: u64,
) -> (
    Context,
    Context,
    iwarp::Qp,
    iwarp::Qp,
    iwarp::Cq,
    iwarp::Cq,
    iwarp::Mr,
    iwarp::Mr,
) {
    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let inbox = spd.register(vec![0; 64 * 64], Access::LOCAL_WRITE).unwrap();
    let src = cpd.register(vec![5; 4096], Access::LOCAL_READ).unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), port);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    for i in 0..recvs {
        req.post_recv(i, inbox.sge(i * 64, 64)).unwrap();
    }
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    (server, client, sqp, cqp, scq, ccq, inbox, src)
}

fn send(qp: &iwarp::Qp, src: &iwarp::Mr, wr_id: u64, len: u32) {
    qp.post_send(WorkRequest::Send {
        wr_id,
        signaled: true,
        local: src.sge(0, len).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
}

#[test]
fn live_counters_follow_the_traffic() {
    let (server, client, sqp, cqp, scq, ccq, _inbox, src) = connected(9301, 16);
    let before = server.stats().unwrap();
    assert_eq!(before.connections, 1);
    assert_eq!(before.listeners, 0, "the listener was dropped");
    assert!(matches!(before.device, DeviceStats::Sim));
    let q0 = sqp.stats().unwrap();
    assert_eq!(q0.qp.unwrap().fpdus_rx, 0);
    for i in 0..10 {
        send(&cqp, &src, 100 + i, 40);
    }
    for _ in 0..10 {
        assert!(ccq.wait(T).unwrap().status.is_ok());
        let wc = scq.wait(T).unwrap();
        assert_eq!((wc.opcode, wc.byte_len), (Some(WcOpcode::Recv), 40));
    }
    let q = sqp.stats().unwrap();
    let qs = q.qp.unwrap();
    assert_eq!(qs.fpdus_rx, 10, "{q:?}");
    assert_eq!(qs.bytes_placed, 400, "{q:?}");
    assert!(
        q.tcp.delivered >= qs.stream_rx && qs.stream_rx > 400,
        "{q:?}"
    );
    let c = cqp.stats().unwrap().qp.unwrap();
    assert_eq!(c.fpdus_tx, 10, "{c:?}");
    let after = server.stats().unwrap();
    // (Several FPDUs may share a segment.)
    assert!(after.iface.rx_tcp > before.iface.rx_tcp, "{after:?}");
    assert!(after.tcp.delivered > before.tcp.delivered, "{after:?}");
    assert!(after.poll_loop.rx_frames > before.poll_loop.rx_frames);
    assert!(after.poll_loop.rounds > before.poll_loop.rounds);
    assert_eq!(after.iface.rx_bad_checksum, 0);
    let text = after.to_string();
    for line in [
        "stack: connections 1",
        "tcp: delivered",
        "iface: rx_frames",
        "loop: rounds",
        "device: simulated link",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
    // Ended connections stay in the TCP sums.
    let delivered = client.stats().unwrap().tcp.delivered;
    drop((sqp, cqp));
    let deadline = std::time::Instant::now() + T;
    loop {
        let s = client.stats().unwrap();
        if s.connections == 0 {
            assert!(s.tcp.delivered >= delivered, "{s:?}");
            assert_eq!(s.stack.tcp_closed.delivered, s.tcp.delivered);
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "connection never freed: {s:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn the_notify_fd_fires_once_per_arming_and_only_for_new_completions() {
    let (_server, _client, _sqp, cqp, scq, _ccq, _inbox, src) = connected(9302, 16);
    // Armed and empty: not readable.
    scq.req_notify().unwrap();
    assert!(scq.poll_one().is_none());
    assert!(!scq.wait_notify(Duration::ZERO).unwrap());
    // A completion on the armed CQ makes it readable.
    send(&cqp, &src, 1, 8);
    assert!(scq.wait_notify(T).unwrap());
    assert_eq!(scq.ack_notify(), 1);
    assert_eq!(scq.wait(T).unwrap().wr_id, 0);
    // Not armed again: the next completion arrives without a notification.
    send(&cqp, &src, 2, 8);
    assert_eq!(scq.wait(T).unwrap().wr_id, 1);
    assert!(!scq.wait_notify(Duration::ZERO).unwrap());
    // Arming does not fire for a completion already in the ring: poll
    // after arming.
    send(&cqp, &src, 3, 8);
    let deadline = std::time::Instant::now() + T;
    while scq.is_empty() {
        assert!(std::time::Instant::now() < deadline, "no completion");
        std::thread::sleep(Duration::from_millis(1));
    }
    scq.req_notify().unwrap();
    assert!(!scq.wait_notify(Duration::ZERO).unwrap());
    assert_eq!(scq.poll_one().unwrap().wr_id, 2);
    // The clone shares the descriptor and the arming.
    let clone = scq.clone();
    send(&cqp, &src, 4, 8);
    assert!(clone.wait_notify(T).unwrap());
    assert!(clone.notify_fd().unwrap().try_clone_to_owned().is_ok());
    assert_eq!(scq.ack_notify(), 1);
    let wc = scq.wait(T).unwrap();
    assert_eq!(
        (wc.wr_id, wc.status),
        (3, Status::Wc(iwarp::WcStatus::Success))
    );
}

#[cfg(feature = "xdp")]
#[test]
fn bad_host_options_are_refused_before_a_device_is_opened() {
    // No such interface either: the options are checked first.
    let base = iwarp::XdpOptions::new("nosuchif0", std::net::Ipv4Addr::new(10, 0, 0, 1), 24);
    let mut o = base.clone();
    o.host.tcp.rto_min = Duration::from_secs(2);
    o.host.tcp.rto_initial = Duration::from_secs(1);
    let mut z = base.clone();
    z.host.tcp.rto_min = Duration::ZERO;
    let mut b = base.clone();
    b.host.tcp.rcv_buf = 10;
    let mut m = base.clone();
    m.host.mtu = Some(500);
    for bad in [o, z, b, m] {
        match Context::af_xdp(&bad) {
            Err(iwarp::Error::InvalidArgument(_)) => {}
            other => panic!("{:?}: {other:?}", bad.host),
        }
    }
    // The defaults pass the check and fail at the interface.
    assert!(matches!(
        Context::af_xdp(&base),
        Err(iwarp::Error::Backend(_))
    ));
}

/// AF_XDP on a veth pair across two namespaces (root): the options reach
/// the device, and the stats say what the bind obtained.
#[cfg(feature = "xdp")]
#[test]
fn af_xdp_options_apply_and_stats_report_the_bind_obtained() {
    use netns_harness::{End, Netns, VethPair};
    if netns_harness::skip_test_without_root() {
        return;
    }
    // Locals drop in reverse order: the veth (declared last) goes first,
    // then the namespaces, also when an assertion fails.
    let (a, b) = (Netns::new("opsa").unwrap(), Netns::new("opsb").unwrap());
    let mut veth = VethPair::new("opsv").unwrap();
    veth.move_to(End::A, &a).unwrap();
    veth.move_to(End::B, &b).unwrap();
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).unwrap();
        veth.disable_tx_offload(end).unwrap();
        veth.set_up(end).unwrap();
    }
    let opts = |end: End, ns: &Netns, last: u8| {
        let mut o =
            iwarp::XdpOptions::new(veth.name(end), std::net::Ipv4Addr::new(10, 79, 0, last), 24);
        o.host.netns = Some(ns.ns_path());
        o.bind = iwarp::XskMode::Copy;
        o.ring_size = 512;
        o.rx_frames = 512;
        o.frame_count = 2048;
        o.host.mtu = Some(1400);
        o.host.tcp.rto_min = Duration::from_millis(20);
        o
    };
    let server = Context::af_xdp(&opts(End::A, &a, 1)).unwrap();
    let client = Context::af_xdp(&opts(End::B, &b, 2)).unwrap();
    // An option the stack refuses.
    let mut bad = opts(End::A, &a, 3);
    bad.host.tcp.rto_min = Duration::from_secs(2);
    bad.host.tcp.rto_initial = Duration::from_secs(1);
    assert!(matches!(
        Context::af_xdp(&bad),
        Err(iwarp::Error::InvalidArgument(_))
    ));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let src = cpd.register(vec![3; 64], Access::LOCAL_READ).unwrap();
    let listener = server.listen(9303, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9303);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(0, 64)).unwrap();
    let _sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    send(&cqp, &src, 7, 64);
    assert!(scq.wait(T).unwrap().status.is_ok());
    let st = server.stats().unwrap();
    let DeviceStats::Xdp(x) = &st.device else {
        panic!("{st:?}")
    };
    assert_eq!(x.bind, iwarp::XskMode::Copy);
    assert_eq!((x.iface.as_str(), x.queue), (veth.name(End::A), 0));
    assert!(!x.multi_buffer);
    assert!(x.socket.rx_frames > 0 && x.socket.tx_frames > 0, "{x:?}");
    assert!(x.kernel.is_some());
    assert!(st.to_string().contains("bind Copy"), "{st}");
    drop((cqp, _sqp, listener, server, client));
}
