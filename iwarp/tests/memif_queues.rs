//! A context of several poll loops on a real backend: two DPDK memif
//! ports of two queues each, on one socket in this process
//! (`DpdkOptions::queue_count`). memif has no RSS: a frame sent on queue
//! `i` arrives on the peer's queue `i`, and with software steering at
//! both ends each flow is sent on its owner's queue, so nothing needs
//! passing between loops. Without DPDK in the build the test
//! says so and passes, except under CI (`scripts/deps.sh --test`
//! installs it).
#![cfg(feature = "dpdk")]

mod memif_common;

use std::net::{Ipv4Addr, SocketAddrV4};

use iwarp::dpdk::MemifRole;
use iwarp::{
    Access, ConnectOptions, Context, DpdkOptions, Error, ListenOptions, Polling, Qp, WcOpcode,
    WorkRequest,
};
use memif_common::{eal_or_skip, T};
const CONNS: usize = 6;
const PIECE: usize = 8192;

#[test]
fn connections_over_two_memif_queues_land_on_both_loops() {
    let Some(eal) = eal_or_skip() else {
        return;
    };
    let sock = std::env::temp_dir().join(format!("iwarp-mq-{}.sock", std::process::id()));
    let opts = |index: u32, role, last: u8| {
        let ip = Ipv4Addr::new(10, 77, 9, last);
        let mut o = DpdkOptions::memif(index, role, 0, &sock, ip, 24);
        o.queue_count = 2;
        // Each queue's rings count in the port's mbuf pool: smaller rings
        // keep two ports of two queues within the EAL's 256 MiB.
        o.queues = iwarp::dpdk::Queues {
            rx_desc: 256,
            tx_desc: 256,
        };
        o.host.polling = Polling::Adaptive;
        o
    };
    let server = Context::dpdk(&eal, &opts(0, MemifRole::Server, 1)).expect("memif server");
    let client = Context::dpdk(&eal, &opts(1, MemifRole::Client, 2)).expect("memif client");
    assert_eq!((server.loops(), client.loops()), (2, 2));

    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(
            vec![0; CONNS * PIECE],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let listener = server.listen(7400, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), 7400);
    let (c, cpd2, ccq2) = (client.clone(), cpd.clone(), ccq.clone());
    let t = std::thread::spawn(move || {
        (0..CONNS)
            .map(|_| c.connect(to, &ConnectOptions::new(&cpd2, &ccq2)))
            .collect::<Result<Vec<Qp>, Error>>()
    });
    let sqps: Vec<Qp> = (0..CONNS)
        .map(|_| {
            let req = listener.get_request(T).expect("a request");
            req.accept(&Default::default(), &scq).expect("accepted")
        })
        .collect();
    let cqps = t.join().unwrap().expect("connected");
    // The client's connections went to its loops in turn, and each
    // arrived on the server's loop of the same number (memif pairs the
    // queues).
    let cl: Vec<usize> = cqps.iter().map(Qp::loop_index).collect();
    assert_eq!(cl, [0, 1, 0, 1, 0, 1]);
    let mut sl: Vec<usize> = sqps.iter().map(Qp::loop_index).collect();
    sl.sort_unstable();
    assert_eq!(sl, [0, 0, 0, 1, 1, 1]);

    // A Write from every connection into its piece of one region.
    let src = cpd
        .register(vec![0; CONNS * PIECE], Access::LOCAL_WRITE)
        .unwrap();
    for (k, q) in cqps.iter().enumerate() {
        let piece: Vec<u8> = (0..PIECE).map(|i| (i as u8) ^ (k as u8 * 31)).collect();
        src.write(k * PIECE, &piece).unwrap();
        q.post_send(WorkRequest::Write {
            wr_id: k as u64,
            signaled: true,
            local: src.sge((k * PIECE) as u64, PIECE as u32).into(),
            remote_stag: target.stag(),
            remote_to: (k * PIECE) as u64,
        })
        .unwrap();
    }
    for _ in 0..CONNS {
        let w = ccq.wait(T).expect("a Write completion");
        assert!(
            w.status.is_ok() && w.opcode == Some(WcOpcode::Write),
            "{w:?}"
        );
    }
    // Placed once a Send behind each Write has arrived (RFC 5040 §5.5).
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    for q in &sqps {
        q.post_recv(9, inbox.sge(0, 0)).unwrap();
    }
    for q in &cqps {
        q.post_send(WorkRequest::Send {
            wr_id: 100,
            signaled: false,
            local: src.sge(0, 0).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    }
    for _ in 0..CONNS {
        let w = scq.wait(T).expect("a Recv completion");
        assert!(w.status.is_ok(), "{w:?}");
    }
    assert_eq!(
        target.read(0, CONNS * PIECE).unwrap(),
        src.read(0, CONNS * PIECE).unwrap()
    );
    // Both loops of each end carried frames.
    for ctx in [&server, &client] {
        let s = ctx.stats().unwrap();
        assert_eq!(s.loops.len(), 2);
        for l in &s.loops {
            assert_eq!(l.connections, CONNS / 2, "{:?}", s.loops);
            assert!(l.poll_loop.rx_frames > 0 && l.poll_loop.tx_frames > 0);
            // Each end sends a flow on its owner's queue: software
            // steering (memif has no RSS) had nothing to pass on.
            assert_eq!(l.poll_loop.steered_out, 0, "{:?}", l.poll_loop);
        }
    }
    drop((cqps, sqps, listener, server, client));
    let _ = std::fs::remove_file(&sock);

    // A port without RSS and without memif's pairing (a ring) runs its
    // loops with software steering: the context opens with two loops.
    let ring = "net_ring_mq,nodeaction=net_ring_mq:0:CREATE";
    let mut o = DpdkOptions::new(ring, Ipv4Addr::new(10, 77, 10, 1), 24);
    o.queue_count = 2;
    let two = Context::dpdk(&eal, &o).expect("a two-queue ring port");
    assert_eq!(two.loops(), 2);
}
