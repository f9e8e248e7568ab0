//! What the memif tests share: the process's EAL (or a skip where DPDK is
//! not in the build, refused under CI), a Write that must land, and
//! connections over a memif link of two queue pairs (ours or DPDK's).
#![allow(dead_code)] // each test file uses what it needs
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::Duration;

#[cfg(feature = "dpdk")]
use iwarp::dpdk::Eal;
use iwarp::{Access, ConnectOptions, Context, Cq, ListenOptions, Mr, Pd, Qp, WorkRequest};

/// How long a completion may take.
pub const T: Duration = Duration::from_secs(10);

/// The EAL for memif ports in this process; `None` (the test passes,
/// saying so) where the build has no DPDK, except under CI.
#[cfg(feature = "dpdk")]
pub fn eal_or_skip() -> Option<Eal> {
    if !iwarp::dpdk::AVAILABLE {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI without DPDK: scripts/deps.sh --test installs libdpdk-dev"
        );
        eprintln!("SKIP: built without DPDK (install libdpdk-dev)");
        return None;
    }
    Some(
        Eal::init(iwarp::dpdk::floating_vdev_args(
            &[],
            &iwarp::dpdk::allowed_cpus(),
        ))
        .expect("EAL"),
    )
}

/// One end of a connection: its protection domain, queue pair and CQ.
pub type End<'a> = (&'a Pd, &'a Qp, &'a Cq);

/// A signaled Write of `data` from `client` into `target` at offset 0,
/// then a 0-octet Send behind it (the Write is placed once the Send has
/// arrived, RFC 5040 §5.5): both complete, and `target` holds `data`.
pub fn write_lands(client: End<'_>, server: End<'_>, target: &Mr, data: Vec<u8>) {
    let ((cpd, cqp, ccq), (spd, sqp, scq)) = (client, server);
    let len = data.len() as u32;
    let src = cpd
        .register(data.clone(), Access::LOCAL_WRITE)
        .expect("register the source");
    cqp.post_send(WorkRequest::Write {
        wr_id: 1,
        signaled: true,
        local: src.sge(0, len).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })
    .expect("post the Write");
    let w = ccq.wait(T).expect("the Write's completion");
    assert!(w.status.is_ok(), "{w:?}");
    let inbox = spd
        .register(vec![0; 64], Access::LOCAL_WRITE)
        .expect("register the inbox");
    sqp.post_recv(9, inbox.sge(0, 0)).expect("post a receive");
    cqp.post_send(WorkRequest::Send {
        wr_id: 2,
        signaled: false,
        local: src.sge(0, 0).into(),
        solicited: false,
        invalidate: None,
    })
    .expect("post the Send");
    let w = scq.wait(T).expect("the Send's completion");
    assert!(w.status.is_ok(), "{w:?}");
    assert_eq!(target.read(0, data.len()).expect("read the target"), data);
}

/// A connection between two contexts, each end's objects, and a remotely
/// writable region at the server.
pub struct Pair {
    pub spd: Pd,
    pub cpd: Pd,
    pub scq: Cq,
    pub ccq: Cq,
    pub sqp: Qp,
    pub cqp: Qp,
    pub target: Mr,
    pub listener: iwarp::Listener,
}

/// `client` connects to `server` on `port` (the server listening and
/// accepting), with `target_len` octets at the server for Writes.
pub fn connect(server: &Context, client: &Context, port: u16, target_len: usize) -> Pair {
    let spd = server.alloc_pd().expect("server PD");
    let cpd = client.alloc_pd().expect("client PD");
    let (scq, ccq) = (server.create_cq(8), client.create_cq(8));
    let target = spd
        .register(
            vec![0; target_len],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .expect("register the target");
    let listener = server
        .listen(port, &ListenOptions::new(&spd))
        .expect("listen");
    let to = SocketAddrV4::new(server.addr(), port);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(to, &o));
    let sqp = listener
        .get_request(T)
        .expect("a request")
        .accept(&Default::default(), &scq)
        .expect("accepted");
    let cqp = t.join().expect("the connecting thread").expect("connected");
    Pair {
        spd,
        cpd,
        scq,
        ccq,
        sqp,
        cqp,
        target,
        listener,
    }
}

impl Pair {
    /// [`write_lands`] from the client into the target.
    pub fn write_lands(&self, data: Vec<u8>) {
        write_lands(
            (&self.cpd, &self.cqp, &self.ccq),
            (&self.spd, &self.sqp, &self.scq),
            &self.target,
            data,
        );
    }
}

/// Connections between two contexts of two loops each on a memif link
/// of two queue pairs (ours or DPDK's): the client's go to its loops in
/// turn and each arrives on the server's loop of the same number (memif
/// pairs the queues); a Write from each lands whole, and both loops of
/// each end carried frames with nothing steered between them.
pub fn connections_land_on_both_loops(server: &Context, client: &Context, port: u16) {
    use iwarp::{Error, WcOpcode};
    const CONNS: usize = 6;
    const PIECE: usize = 8192;
    assert_eq!((server.loops(), client.loops()), (2, 2));
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(
            vec![0; CONNS * PIECE],
            Access::LOCAL_WRITE | Access::REMOTE_WRITE,
        )
        .unwrap();
    let listener = server.listen(port, &ListenOptions::new(&spd)).unwrap();
    let to = SocketAddrV4::new(server.addr(), port);
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
}
