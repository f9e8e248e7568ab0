//! RDMA Writes between two contexts on AF_XDP across a veth pair, with 2%
//! of the frames each end receives dropped at random
//! (`HostOptions::rx_drop_ppm`, the loss `iwarp-perf --loss-permille`
//! uses: netfilter never sees the frames an XDP program steers to an
//! AF_XDP socket). Every octet arrives, and the sender's TCP counted the
//! recovery (fast retransmits). Needs root for the AF_XDP part (prints
//! `SKIP:` without it, fails under `CI`); the bounds check needs nothing.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::Duration;

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, Error, ListenOptions, Status, WcOpcode,
    WcStatus, WorkRequest, XdpOptions,
};
use netns_harness::{End, Netns, NsPair};

const T: Duration = Duration::from_secs(20);

fn pattern(len: usize) -> Vec<u8> {
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

#[test]
fn a_drop_rate_above_one_million_per_million_is_refused() {
    let mut o = XdpOptions::new("nonexistent0", Ipv4Addr::new(10, 1, 2, 3), 24);
    o.host.rx_drop_ppm = 1_000_001;
    assert!(matches!(
        Context::af_xdp(&o),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn rdma_writes_arrive_whole_with_two_percent_loss_both_ways() {
    if netns_harness::skip_test_without_root() {
        return;
    }
    const CHUNK: usize = 64 << 10;
    const TOTAL: usize = 8 << 20;
    let lab = NsPair::new("xl").unwrap();
    let ctx = |end: End, ns: &Netns, ip: Ipv4Addr| {
        let mut o = XdpOptions::new(lab.veth.name(end), ip, 24);
        o.host.netns = Some(ns.ns_path());
        o.host.rx_drop_ppm = 20_000;
        Context::af_xdp(&o).unwrap()
    };
    let server = ctx(End::A, &lab.a, lab.addr(1));
    let client = ctx(End::B, &lab.b, lab.addr(2));

    let spd = server.alloc_pd().unwrap();
    let cpd = client.alloc_pd().unwrap();
    let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    let target = spd
        .register(vec![0; TOTAL], Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .unwrap();
    let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE).unwrap();
    let data = pattern(TOTAL);
    let src = cpd.register(data.clone(), Access::LOCAL_READ).unwrap();

    let listener = server.listen(7700, &ListenOptions::new(&spd)).unwrap();
    let co = ConnectOptions::new(&cpd, &ccq);
    let to = SocketAddrV4::new(server.addr(), 7700);
    let c2 = client.clone();
    let t = std::thread::spawn(move || c2.connect(to, &co));
    let req = listener.get_request(T).unwrap();
    req.post_recv(1, inbox.sge(0, 64)).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    let before = client.stats().unwrap().tcp;

    // 128 Writes of 64 KiB, at most 16 outstanding, then a Send: the
    // server's receive completes after every Write is placed (RFC 5040
    // §5.5 ordering).
    let (mut posted, mut done) = (0usize, 0usize);
    while done < TOTAL / CHUNK {
        while posted < TOTAL / CHUNK && posted - done < 16 {
            let off = posted * CHUNK;
            cqp.post_send(WorkRequest::Write {
                wr_id: posted as u64,
                signaled: true,
                local: src.sge(off as u64, CHUNK as u32).into(),
                remote_stag: target.stag(),
                remote_to: off as u64,
            })
            .unwrap();
            posted += 1;
        }
        let wc = ccq.wait(T).expect("a Write completion");
        assert_eq!(
            (wc.opcode, wc.status),
            (Some(WcOpcode::Write), Status::Wc(WcStatus::Success))
        );
        done += 1;
    }
    cqp.post_send(WorkRequest::Send {
        wr_id: 999,
        signaled: true,
        local: src.sge(0, 8).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let wc = scq.wait(T).expect("the Send's receive");
    assert_eq!((wc.wr_id, wc.status), (1, Status::Wc(WcStatus::Success)));
    assert!(
        target.read(0, TOTAL).unwrap() == data,
        "placed octets differ"
    );

    let after = client.stats().unwrap().tcp;
    let recovered = (after.fast_retransmits - before.fast_retransmits)
        + (after.rto_retransmits - before.rto_retransmits);
    // 8 MiB is about 5,800 segments at MTU 1500: 2% loss drops ~115.
    assert!(
        recovered >= 20,
        "only {recovered} retransmissions: no loss?"
    );
    drop((sqp, cqp));
    drop((server, client));
}
