//! Waiting for completions from an event loop: each CQ's notification
//! eventfd ([`iwarp::Cq::notify_fd`]) in one plain epoll set.
//!
//! ```text
//! cargo run --example cq_epoll                        # simulated link, no root
//! sudo cargo run --example cq_epoll -- --netns        # AF_XDP across two namespaces
//! ```
//!
//! The server accepts two connections, each with a CQ of its own, and
//! sleeps in `epoll_wait` until either has completions: arm
//! (`req_notify`), poll once more, wait, acknowledge (`ack_notify`), poll
//! until empty, arm again. Two client threads send messages at a slow
//! pace, so the server really sleeps between them.

mod common;

use std::net::SocketAddrV4;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, Access, ConnectOptions, Epoll, Error, ListenOptions, WorkRequest};

const T: Duration = Duration::from_secs(20);
const PER_CLIENT: u64 = 50;

fn main() -> Result<(), Error> {
    let (server, client, _lab, how) = common::contexts();
    println!("cq_epoll example over the {how}");
    let spd = server.alloc_pd()?;
    let inbox = spd.register(vec![0; 2 * 64 * 64], Access::LOCAL_WRITE)?;
    let listener = server.listen(9510, &ListenOptions::new(&spd))?;
    let addr = SocketAddrV4::new(server.addr(), 9510);

    let mut senders = Vec::new();
    let mut qps = Vec::new();
    let mut cqs = Vec::new();
    for k in 0..2u64 {
        let c = client.clone();
        senders.push(std::thread::spawn(move || -> Result<(), Error> {
            let pd = c.alloc_pd()?;
            let cq = c.create_cq(64);
            let msg = pd.register(vec![k as u8; 32], Access::LOCAL_READ)?;
            let qp = c.connect(addr, &ConnectOptions::new(&pd, &cq))?;
            for i in 0..PER_CLIENT {
                std::thread::sleep(Duration::from_millis(2 + 3 * k));
                qp.post_send(WorkRequest::Send {
                    wr_id: i,
                    signaled: true,
                    local: msg.sge(0, 32).into(),
                    solicited: false,
                    invalidate: None,
                })?;
                assert!(cq.wait(T).expect("send completion").status.is_ok());
            }
            qp.wait_disconnected(T).map(|_| ())
        }));
        let req = listener.get_request(T)?;
        let cq = server.create_cq(128);
        for i in 0..64 {
            req.post_recv(i, inbox.sge((k * 64 + i) * 64, 64))?;
        }
        qps.push(req.accept(&AcceptOptions::default(), &cq)?);
        cqs.push(cq);
    }

    let ep = Epoll::new().map_err(Error::Io)?;
    for (k, cq) in cqs.iter().enumerate() {
        ep.add(cq.notify_fd()?.as_fd(), k as u64)
            .map_err(Error::Io)?;
        cq.req_notify()?;
    }
    let mut got = [0u64; 2];
    let mut wakeups = 0u64;
    let mut ready = Vec::new();
    let mut next = [64u64; 2];
    let started = Instant::now();
    // Completions that arrived before arming do not fire: drain them first.
    let mut pending: Vec<usize> = vec![0, 1];
    while got.iter().sum::<u64>() < 2 * PER_CLIENT {
        for k in pending.drain(..) {
            let (cq, qp) = (&cqs[k], &qps[k]);
            cq.ack_notify();
            // Poll until empty, arm, poll once more (a completion between
            // the last poll and the arm would not fire).
            loop {
                while let Some(wc) = cq.poll_one() {
                    assert!(wc.status.is_ok(), "{wc:?}");
                    got[k] += 1;
                    let slot = wc.wr_id % 64;
                    qp.post_recv(next[k], inbox.sge((k as u64 * 64 + slot) * 64, 64))?;
                    next[k] += 1;
                }
                cq.req_notify()?;
                if cq.is_empty() {
                    break;
                }
            }
        }
        if got.iter().sum::<u64>() >= 2 * PER_CLIENT {
            break;
        }
        ready.clear();
        let n = ep.wait(&mut ready, Some(T)).map_err(Error::Io)?;
        assert!(n > 0, "no completion within {T:?}");
        wakeups += 1;
        pending.extend(ready.iter().map(|&k| k as usize));
    }
    println!(
        "received {} + {} messages in {:.0} ms with {wakeups} epoll wakeups (the thread slept in between)",
        got[0],
        got[1],
        started.elapsed().as_secs_f64() * 1000.0
    );
    drop(qps);
    for s in senders {
        s.join().expect("client thread")?;
    }
    Ok(())
}
