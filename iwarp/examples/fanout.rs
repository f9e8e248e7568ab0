//! Market-data fan-out: one publisher Sends every update to several
//! subscriber queue pairs; each subscriber checks it got every update, in
//! order, intact.
//!
//! ```text
//! cargo run --release --example fanout              # simulated link, no root
//! sudo cargo run --release --example fanout -- --netns   # AF_XDP across two namespaces
//! ```

mod common;

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, Access, ConnectOptions, ListenOptions, WcOpcode, WorkRequest};

const SUBSCRIBERS: usize = 3;
const UPDATES: usize = 500;
const LEN: usize = 128;
const T: Duration = Duration::from_secs(20);

fn update(seq: usize) -> Vec<u8> {
    let mut v = vec![0u8; LEN];
    v[..8].copy_from_slice(&(seq as u64).to_be_bytes());
    for (k, b) in v[8..].iter_mut().enumerate() {
        *b = (seq * 7 + k) as u8;
    }
    v
}

fn main() -> Result<(), iwarp::Error> {
    let (publisher, subs_ctx, _lab, how) = common::contexts();
    let ppd = publisher.alloc_pd()?;
    let pcq = publisher.create_cq(SUBSCRIBERS * UPDATES + 16);
    let feed: Vec<u8> = (0..UPDATES).flat_map(update).collect();
    let feed = ppd.register(feed, Access::LOCAL_READ)?;
    let listener = publisher.listen(9002, &ListenOptions::new(&ppd))?;
    let addr = SocketAddrV4::new(publisher.addr(), 9002);

    // Subscribers: one queue pair each, every receive posted up front.
    let spd = subs_ctx.alloc_pd()?;
    let mut subs = Vec::new();
    let connector = {
        let (spd, subs_ctx) = (spd.clone(), subs_ctx.clone());
        std::thread::spawn(move || -> Result<Vec<_>, iwarp::Error> {
            let mut v = Vec::new();
            for _ in 0..SUBSCRIBERS {
                let cq = subs_ctx.create_cq(UPDATES + 16);
                let mut opts = ConnectOptions::new(&spd, &cq);
                opts.rq_depth = UPDATES + 8;
                let qp = subs_ctx.connect(addr, &opts)?;
                v.push((qp, cq));
            }
            Ok(v)
        })
    };
    let mut qps = Vec::new();
    for _ in 0..SUBSCRIBERS {
        let req = listener.get_request(T)?;
        qps.push(req.accept(&AcceptOptions::default(), &pcq)?);
    }
    for (qp, cq) in connector.join().expect("connector")? {
        let inbox = spd.register(vec![0; UPDATES * LEN], Access::LOCAL_WRITE)?;
        for i in 0..UPDATES {
            qp.post_recv(i as u64, inbox.sge((i * LEN) as u64, LEN as u32))?;
        }
        subs.push((qp, cq, inbox));
    }
    // Let the receives reach the subscribers' queue pairs.
    std::thread::sleep(Duration::from_millis(50));

    // A send queue holds `sq_depth` work requests (256 by default); one
    // posted past that completes as `Refused(QueueFull)`. So the publisher
    // keeps at most WINDOW Sends outstanding per queue pair, as a verbs
    // application must, and reaps completions to make room.
    const WINDOW: usize = 128;
    let mut done = vec![0usize; SUBSCRIBERS];
    let reap = |done: &mut Vec<usize>| -> Result<(), iwarp::Error> {
        let wc = pcq.wait(T).ok_or(iwarp::Error::TimedOut)?;
        assert!(wc.status.is_ok(), "publisher: {wc:?}");
        let n = qps.iter().position(|q| q.id() == wc.qp).expect("our qp");
        done[n] += 1;
        Ok(())
    };
    let started = Instant::now();
    for seq in 0..UPDATES {
        while done.iter().any(|&d| seq - d >= WINDOW) {
            reap(&mut done)?;
        }
        for qp in &qps {
            qp.post_send(WorkRequest::Send {
                wr_id: seq as u64,
                signaled: true,
                local: feed.sge((seq * LEN) as u64, LEN as u32).into(),
                solicited: false,
                invalidate: None,
            })?;
        }
    }
    while done.iter().any(|&d| d < UPDATES) {
        reap(&mut done)?;
    }
    for (n, (_, cq, inbox)) in subs.iter().enumerate() {
        for want in 0..UPDATES as u64 {
            let wc = cq.wait(T).ok_or(iwarp::Error::TimedOut)?;
            assert!(wc.status.is_ok(), "subscriber {n}: {wc:?}");
            assert_eq!((wc.wr_id, wc.opcode), (want, Some(WcOpcode::Recv)));
        }
        let got = inbox.read(0, UPDATES * LEN)?;
        for seq in 0..UPDATES {
            assert_eq!(
                &got[seq * LEN..(seq + 1) * LEN],
                &update(seq)[..],
                "subscriber {n}, update {seq}"
            );
        }
    }
    let secs = started.elapsed().as_secs_f64();
    for qp in &qps {
        qp.disconnect()?;
    }
    for (qp, _, _) in &subs {
        qp.wait_disconnected(T)?;
    }
    println!(
        "fanout over {how}: {UPDATES} updates of {LEN} B to {SUBSCRIBERS} subscribers, all received in order and verified, {:.0} updates/s delivered",
        (UPDATES * SUBSCRIBERS) as f64 / secs
    );
    Ok(())
}
