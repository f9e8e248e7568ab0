//! AF_XDP contexts of several poll loops (`XdpOptions::queue_count`):
//! a two-queue context in namespace A and a one-queue context in
//! namespace B, their veths joined by a bridge in a third namespace. The
//! queue a frame reaches at A is the kernel's choice (the bridge's
//! transmit queue on A's veth), not the RSS of A's loops, so A steers in
//! software: a loop passes the frames of connections the other loop owns
//! to it. Connections both ways (A's active opens go to its loops in
//! turn, so both own some), Writes both ways and Sends, every octet
//! checked; A's counters show frames passed between its loops. And a
//! two-queue context's `connect_start` against a Linux TCP listener: the
//! kernel acknowledges the MPA Request at once, not after a delayed ACK.
//! Needs
//! root (prints `SKIP:` without it, fails under `CI`); the refusals need
//! nothing.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp::{
    Access, ConnectOptions, Context, Cq, Error, ListenOptions, Pd, Polling, Qp, SharedPorts,
    Status, WcOpcode, WcStatus, WorkRequest, XdpOptions,
};
use netns_harness::{End, Netns, VethPair};

const T: Duration = Duration::from_secs(20);
const PIECE: usize = 256 << 10;
const EACH_WAY: usize = 4;

fn pattern(k: usize, salt: u64) -> Vec<u8> {
    let mut x = (k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ salt | 1;
    (0..PIECE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn several_queues_refuse_what_cannot_work() {
    let o = |f: &dyn Fn(&mut XdpOptions)| {
        let mut o = XdpOptions::new("nonexistent0", Ipv4Addr::new(10, 1, 2, 3), 24);
        o.queue_count = 2;
        f(&mut o);
        Context::af_xdp(&o)
    };
    // Inline polling is not refused: the (missing) interface is.
    assert!(!matches!(
        o(&|o| o.host.polling = Polling::Inline),
        Err(Error::Unsupported(_)) | Ok(_)
    ));
    assert!(matches!(
        o(&|o| o.host.rx_drop_ppm = 1000),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        o(&|o| o.share_address = Some(SharedPorts {
            listen: vec![7000],
            local_from: 50_000
        })),
        Err(Error::Unsupported(_))
    ));
    assert!(matches!(
        o(&|o| o.queue_count = 129),
        Err(Error::InvalidArgument(_))
    ));
}

/// `n` connections from `from` to `to:port`, as (active ends, passive ends).
fn connect(
    (from, fpd, fcq): (&Context, &Pd, &Cq),
    (to, tpd, tcq): (&Context, &Pd, &Cq),
    port: u16,
    n: usize,
) -> (Vec<Qp>, Vec<Qp>) {
    let listener = to.listen(port, &ListenOptions::new(tpd)).unwrap();
    let addr = SocketAddrV4::new(to.addr(), port);
    let (c, pd, cq) = (from.clone(), fpd.clone(), fcq.clone());
    let t = std::thread::spawn(move || {
        (0..n)
            .map(|_| c.connect(addr, &ConnectOptions::new(&pd, &cq)))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let passive = (0..n)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            req.accept(&Default::default(), tcq).expect("accepted")
        })
        .collect();
    (t.join().unwrap().expect("connected"), passive)
}

/// `n` successful completions of `op` from `cq`.
fn take(cq: &Cq, n: usize, op: WcOpcode) -> Vec<iwarp::Wc> {
    (0..n)
        .map(|i| {
            let w = cq
                .wait(T)
                .unwrap_or_else(|| panic!("completion {i} of {n} missing"));
            assert_eq!(
                (w.opcode, w.status),
                (Some(op), Status::Wc(WcStatus::Success)),
                "{w:?}"
            );
            w
        })
        .collect()
}

/// Writes of `PIECE` from each of `qps` (piece `k` of `src`, filled with
/// `pattern(k, salt)`) into piece `k` of `dst`.
fn writes(qps: &[Qp], cq: &Cq, src: &iwarp::Mr, dst: &iwarp::Mr, salt: u64) {
    for (k, q) in qps.iter().enumerate() {
        src.write(k * PIECE, &pattern(k, salt)).unwrap();
        q.post_send(WorkRequest::Write {
            wr_id: k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: dst.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    take(cq, qps.len(), WcOpcode::Write);
    for k in 0..qps.len() {
        assert!(
            dst.read(k * PIECE, PIECE).unwrap() == pattern(k, salt),
            "write {k} (salt {salt})"
        );
    }
}

#[test]
fn a_two_queue_context_and_a_one_queue_peer_across_a_bridge() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let a = Netns::new("xsa").unwrap();
    let b = Netns::new("xsb").unwrap();
    let br = Netns::new("xsr").unwrap();
    // Made after the namespaces, so dropped (deleted) before them.
    let mut va = VethPair::with_queues("xsva", 2).unwrap();
    let mut vb = VethPair::new("xsvb").unwrap();
    netns_harness::bridge(&a, &b, &br, &mut va, &mut vb).unwrap();
    let id = a.id();
    let ip = |host| Ipv4Addr::new(10, (id >> 8) as u8, id as u8, host);
    let opts = |iface: &str, ns: &Netns, host: u8, queues: u16| {
        let mut o = XdpOptions::new(iface, ip(host), 24);
        o.host.netns = Some(ns.ns_path());
        o.queue_count = queues;
        o
    };
    // More queues than B's veth has: refused, and nothing left attached.
    let two_on_one = Context::af_xdp(&opts(vb.name(End::A), &b, 2, 2));
    assert!(
        matches!(two_on_one, Err(Error::InvalidArgument(_))),
        "{two_on_one:?}"
    );
    let actx = Context::af_xdp(&opts(va.name(End::A), &a, 1, 2)).unwrap();
    let bctx = Context::af_xdp(&opts(vb.name(End::A), &b, 2, 1)).unwrap();
    assert_eq!((actx.loops(), bctx.loops()), (2, 1));

    let (apd, bpd) = (actx.alloc_pd().unwrap(), bctx.alloc_pd().unwrap());
    let (acq, bcq) = (actx.create_cq(256), bctx.create_cq(256));
    let n = 2 * EACH_WAY;
    let rw = Access::LOCAL_WRITE | Access::REMOTE_WRITE;
    let reg = |pd: &Pd, a| pd.register(vec![0; n * PIECE], a).unwrap();
    let (a_dst, a_src, a_inbox) = (
        reg(&apd, rw),
        reg(&apd, Access::LOCAL_WRITE),
        reg(&apd, Access::LOCAL_WRITE),
    );
    let (b_dst, b_src) = (reg(&bpd, rw), reg(&bpd, Access::LOCAL_WRITE));

    // B connects to A, then A to B.
    let (b_act, a_pas) = connect((&bctx, &bpd, &bcq), (&actx, &apd, &acq), 7400, EACH_WAY);
    let (a_act, b_pas) = connect((&actx, &apd, &acq), (&bctx, &bpd, &bcq), 7401, EACH_WAY);
    let a_act_loops: Vec<usize> = a_act.iter().map(Qp::loop_index).collect();
    assert_eq!(a_act_loops, [0, 1, 0, 1]);
    // Ends of one connection at the same index.
    let aqps: Vec<Qp> = a_pas.into_iter().chain(a_act).collect();
    let bqps: Vec<Qp> = b_act.into_iter().chain(b_pas).collect();
    let st = actx.stats().unwrap();
    assert_eq!(st.loops.len(), 2);
    assert!(
        st.loops.iter().all(|l| l.connections >= 2),
        "{:?}",
        st.loops
    );

    // Writes B to A and A to B over every connection.
    writes(&bqps, &bcq, &b_src, &a_dst, 1);
    writes(&aqps, &acq, &a_src, &b_dst, 2);

    // Sends from B into receives on every A connection.
    for (k, q) in aqps.iter().enumerate() {
        q.post_recv(
            100 + k as u64,
            a_inbox.sge((k * PIECE) as u64, PIECE as u32),
        )
        .unwrap();
    }
    for (k, q) in bqps.iter().enumerate() {
        b_src.write(k * PIECE, &pattern(k, 3)).unwrap();
        q.post_send(WorkRequest::Send {
            wr_id: 200 + k as u64,
            signaled: true,
            local: b_src.sge((k * PIECE) as u64, PIECE as u32).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    }
    take(&bcq, n, WcOpcode::Send);
    for w in take(&acq, n, WcOpcode::Recv) {
        assert_eq!(w.byte_len as usize, PIECE);
        assert_eq!(w.qp, aqps[(w.wr_id - 100) as usize].id(), "{w:?}");
    }
    let mut sent: Vec<Vec<u8>> = (0..n)
        .map(|k| a_inbox.read(k * PIECE, PIECE).unwrap())
        .collect();
    for (k, got) in sent.iter().enumerate() {
        assert!(
            (0..n).any(|j| *got == pattern(j, 3)),
            "receive {k} holds no Send's octets"
        );
    }
    sent.sort();
    sent.dedup();
    assert_eq!(sent.len(), n, "every Send landed once");

    // Frames reached a loop that does not own their connection, and
    // were passed on.
    let st = actx.stats().unwrap();
    let out: u64 = st.loops.iter().map(|l| l.poll_loop.steered_out).sum();
    let taken: u64 = st.loops.iter().map(|l| l.poll_loop.steered_in).sum();
    eprintln!(
        "A's loops: {:?}",
        st.loops
            .iter()
            .map(|l| (
                l.connections,
                l.poll_loop.rx_frames,
                l.poll_loop.steered_out,
                l.poll_loop.steered_in,
                l.poll_loop.steer_dropped
            ))
            .collect::<Vec<_>>()
    );
    assert!(out > 0 && taken > 0, "{:?}", st.loops);
    assert!(st.loops.iter().all(|l| l.rx_tcp > 0), "{:?}", st.loops);
    drop((aqps, bqps));
    drop((actx, bctx));
}

/// On a context of several loops `connect_start` returns once the peer's
/// stack has acknowledged the MPA Request (`ORDER_WAIT` at most). Against
/// a Linux peer (here a plain TCP listener in namespace B, whose ACKs are
/// the kernel's, as siw's are) that ACK comes at once: Linux acknowledges
/// the first data segments of a connection without delay (quick ACK mode),
/// so each start costs a round trip, not a delayed ACK's 40 ms or more.
/// A peer that delayed it would put every sample at 40 ms or above (and
/// one that never acknowledged, at `ORDER_WAIT`).
#[test]
fn a_linux_peer_acknowledges_the_mpa_request_at_once() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    let a = Netns::new("xqa").unwrap();
    let b = Netns::new("xqb").unwrap();
    let mut v = VethPair::with_queues("xqv", 2).unwrap();
    v.move_to(End::A, &a).unwrap();
    v.move_to(End::B, &b).unwrap();
    for end in [End::A, End::B] {
        v.disable_ipv6(end).unwrap();
        // Full checksums: what a NIC hands an AF_XDP socket.
        v.disable_tx_offload(end).unwrap();
    }
    let id = a.id();
    let ip = |host| Ipv4Addr::new(10, (id >> 8) as u8, id as u8, host);
    v.add_addr(End::B, &format!("{}/24", ip(2))).unwrap();
    v.set_up(End::A).unwrap();
    v.set_up(End::B).unwrap();
    let listener = iwarp_xdp::in_netns(&b.ns_path(), || {
        std::net::TcpListener::bind(SocketAddrV4::new(ip(2), 7500))
    })
    .unwrap()
    .unwrap();
    // Linux accepts and holds every connection, reading nothing: its
    // kernel still acknowledges what arrives.
    listener.set_nonblocking(true).unwrap();
    let held = std::thread::spawn(move || {
        let (mut held, end) = (Vec::new(), std::time::Instant::now() + T);
        while held.len() < 8 && std::time::Instant::now() < end {
            match listener.accept() {
                Ok((s, _)) => held.push(s),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(1))
                }
                Err(e) => panic!("accept: {e}"),
            }
        }
        held
    });
    let mut o = XdpOptions::new(v.name(End::A), ip(1), 24);
    o.host.netns = Some(a.ns_path());
    o.queue_count = 2;
    let ctx = Context::af_xdp(&o).unwrap();
    assert_eq!(ctx.loops(), 2);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64);
    let mut co = ConnectOptions::new(&pd, &cq);
    co.timeout = T;
    let to = SocketAddrV4::new(ip(2), 7500);
    let mut took = Vec::new();
    let mut starts = Vec::new();
    for _ in 0..8 {
        let t0 = std::time::Instant::now();
        let c = ctx.connect_start(to, &co).unwrap();
        took.push(t0.elapsed());
        starts.push(c);
    }
    eprintln!("connect_start to a Linux listener, two loops: {took:?}");
    let loops: Vec<usize> = starts.iter().map(iwarp::Connecting::loop_index).collect();
    assert_eq!(loops, [0, 1, 0, 1, 0, 1, 0, 1]);
    assert_eq!(held.join().unwrap().len(), 8);
    let mut sorted = took.clone();
    sorted.sort();
    assert!(
        sorted[sorted.len() / 2] < Duration::from_millis(20),
        "median start {:?}: the MPA Request's ACK waited (all: {took:?})",
        sorted[sorted.len() / 2]
    );
    assert!(
        sorted.iter().all(|d| *d < iwarp::ORDER_WAIT),
        "a start waited ORDER_WAIT: no ACK seen ({took:?})"
    );
    drop(starts);
    drop(ctx);
}
