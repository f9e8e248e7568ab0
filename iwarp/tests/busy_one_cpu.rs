//! A busy poll loop never starves the application it serves: with the
//! process confined to one CPU, the loops' threads and the application's
//! share it, so an idle round of a busy loop and an empty poll of a CQ
//! give the CPU up (`sched_yield`) instead of spinning out their time
//! slices. Over the simulated link.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, Context, ListenOptions, Polling, WcOpcode, WorkRequest,
};

/// Send ping-pong between two contexts with busy loop threads, this
/// thread posting and polling both ends, every thread of the process on
/// one CPU. Before busy loops and polls yielded a shared CPU, each
/// message waited for the spinning threads' time slices to run out
/// (perftest mode over memif, `write_lat -R --loop-thread --busy` with
/// each process on one CPU: 2,000 iterations did not finish in 25 s).
#[test]
fn busy_loops_on_the_applications_only_cpu_do_not_starve_it() {
    // Pinned before the contexts exist: their loop threads inherit the
    // mask.
    assert!(core_affinity::set_for_current(core_affinity::CoreId {
        id: 0
    }));
    assert_eq!(std::thread::available_parallelism().unwrap().get(), 1);
    let (server, client) = Context::sim_pair_with(Polling::Busy, None);
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(256), client.create_cq(256));
    let inbox = spd.register(vec![0; 4096], Access::LOCAL_WRITE).unwrap();
    let sbuf = spd.register(vec![9; 64], Access::LOCAL_READ).unwrap();
    let src = cpd
        .register(vec![0; 4096], Access::LOCAL_READ | Access::LOCAL_WRITE)
        .unwrap();
    let listener = server.listen(9411, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9411);
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(Duration::from_secs(10)).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();

    let send = |qp: &iwarp::Qp, mr: &iwarp::Mr, wr_id: u64| {
        qp.post_send(WorkRequest::Send {
            wr_id,
            signaled: true,
            local: mr.sge(0, 64).into(),
            solicited: false,
            invalidate: None,
        })
        .unwrap();
    };
    // The whole run within one bound. Before the loops and polls
    // yielded, a round trip here took 36 ms (debug build, this 2-vCPU
    // VM): 2,000 of them 72 s. Yielding, 18 µs: 2,000 in under 0.1 s.
    const N: u64 = 2_000;
    let bound = Duration::from_secs(20);
    let since = Instant::now();
    let spin = |cq: &iwarp::Cq| loop {
        if let Some(wc) = cq.poll_one() {
            return wc;
        }
        assert!(
            since.elapsed() < bound,
            "starved: no completion within {bound:?} of the start"
        );
    };
    for i in 0..N {
        sqp.post_recv(i, inbox.sge(0, 64)).unwrap();
        send(&cqp, &src, i);
        let wc = spin(&scq);
        assert_eq!(
            (wc.wr_id, wc.opcode, wc.byte_len),
            (i, Some(WcOpcode::Recv), 64)
        );
        assert!(spin(&ccq).status.is_ok());
        cqp.post_recv(i, src.sge(0, 64)).unwrap();
        send(&sqp, &sbuf, i);
        let wc = spin(&ccq);
        assert_eq!((wc.wr_id, wc.opcode), (i, Some(WcOpcode::Recv)));
        assert!(spin(&scq).status.is_ok());
    }
    assert_eq!(src.read(0, 64).unwrap(), vec![9; 64]);
    for ctx in [&server, &client] {
        let st = ctx.stats().unwrap().poll_loop;
        assert!(
            st.yields > 0,
            "a busy loop on the shared CPU yields: {st:?}"
        );
    }
    eprintln!(
        "{N} round trips on one CPU with two busy loops: {:?} ({:?} each)",
        since.elapsed(),
        since.elapsed() / N as u32
    );
}
