//! Ping-pong with both ends running inside their poll loops
//! ([`Context::run_in_loop`](iwarp::Context::run_in_loop)): no application
//! thread between the wire and the code that answers. The client Sends
//! message i (64 octets, prepared in slot i), the server echoes it from the
//! slot it landed in, the client times the round trip inside its loop and
//! posts the next. Every echo is checked afterwards, slot by slot.
//!
//! ```text
//! cargo run --release --example pingpong_in_loop                       # simulated link
//! sudo cargo run --release --example pingpong_in_loop -- --netns --busy # AF_XDP, spinning loops
//! ```

mod common;

use std::net::SocketAddrV4;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp::{
    AcceptOptions, Access, ConnectOptions, HookStatus, ListenOptions, WcOpcode, WorkRequest,
};

const ITERS: u64 = 20_000;
const LEN: u32 = 64;
const SLOTS: u64 = 64;
const T: Duration = Duration::from_secs(10);

fn msg(i: u64) -> Vec<u8> {
    (0..u64::from(LEN))
        .map(|k| (i * 31 + k * 7) as u8)
        .collect()
}

fn main() -> Result<(), iwarp::Error> {
    let (server, client, _lab, how) = common::contexts();
    let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
    let (scq, ccq) = (server.create_cq(1024), client.create_cq(1024));
    let l = u64::from(LEN);
    let slots = spd.register(
        vec![0; (SLOTS * l) as usize],
        Access::LOCAL_WRITE | Access::LOCAL_READ,
    )?;
    let out = cpd.register((0..ITERS).flat_map(msg).collect(), Access::LOCAL_READ)?;
    let back = cpd.register(vec![0; (ITERS * l) as usize], Access::LOCAL_WRITE)?;
    let listener = server.listen(9001, &ListenOptions::new(&spd))?;
    let addr = SocketAddrV4::new(server.addr(), 9001);
    let mut o = ConnectOptions::new(&cpd, &ccq);
    o.recvs = vec![(0, back.sge(0, LEN).into())];
    let c = client.clone();
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let req = listener.get_request(T)?;
    for s in 0..SLOTS {
        req.post_recv(s, slots.sge(s * l, LEN))?;
    }
    let sqp = Arc::new(req.accept(&AcceptOptions::default(), &scq)?);
    let cqp = Arc::new(t.join().expect("connect thread")?);

    // Server, in its loop: echo each message from its slot; re-post the
    // slot once the echo has left.
    let (q, cq, sl) = (sqp.clone(), scq.clone(), slots.clone());
    server.run_in_loop(move || {
        let mut st = HookStatus::Idle;
        while let Some(wc) = cq.poll_one() {
            st = HookStatus::Busy;
            if wc.status == iwarp::Status::Wc(iwarp::WcStatus::Flushed) {
                // The client disconnected: the posted slots are flushed.
                return HookStatus::Done;
            }
            assert!(wc.status.is_ok(), "server: {wc:?}");
            match wc.opcode {
                Some(WcOpcode::Recv) => q
                    .post_send(WorkRequest::Send {
                        wr_id: wc.wr_id,
                        signaled: true,
                        local: sl.sge(wc.wr_id * l, wc.byte_len).into(),
                        solicited: false,
                        invalidate: None,
                    })
                    .expect("echo"),
                _ => q
                    .post_recv(wc.wr_id, sl.sge(wc.wr_id * l, LEN))
                    .expect("re-post"),
            }
        }
        st
    })?;

    // Client, in its loop: send i, wait for its echo, time it, next.
    let (done_tx, done_rx) = mpsc::channel();
    let (q, cq, ob, bk) = (cqp.clone(), ccq.clone(), out.clone(), back.clone());
    let mut i = 0u64;
    let mut t0: Option<Instant> = None;
    let mut rtts = Vec::with_capacity(ITERS as usize);
    client.run_in_loop(move || {
        let send = |i: u64| {
            q.post_send(WorkRequest::Send {
                wr_id: i,
                signaled: false,
                local: ob.sge(i * l, LEN).into(),
                solicited: false,
                invalidate: None,
            })
            .expect("send")
        };
        let Some(start) = t0 else {
            t0 = Some(Instant::now());
            send(0);
            return HookStatus::Busy;
        };
        let mut st = HookStatus::Idle;
        while let Some(wc) = cq.poll_one() {
            st = HookStatus::Busy;
            assert!(wc.status.is_ok(), "client: {wc:?}");
            if wc.opcode == Some(WcOpcode::Recv) {
                rtts.push(start.elapsed().as_nanos() as u64);
                i += 1;
                if i == ITERS {
                    let _ = done_tx.send(std::mem::take(&mut rtts));
                    return HookStatus::Done;
                }
                q.post_recv(i, bk.sge(i * l, LEN)).expect("recv");
                t0 = Some(Instant::now());
                send(i);
            }
        }
        st
    })?;
    let mut rtts = done_rx
        .recv_timeout(Duration::from_secs(120))
        .map_err(|_| iwarp::Error::TimedOut)?;
    // Every echo, checked outside the loops.
    let all = back.read(0, (ITERS * l) as usize)?;
    for i in 0..ITERS {
        let at = (i * l) as usize;
        assert_eq!(all[at..at + LEN as usize], msg(i)[..], "echo {i} differs");
    }
    cqp.disconnect()?;
    cqp.wait_disconnected(T)?;
    sqp.wait_disconnected(T)?;
    rtts.sort_unstable();
    println!(
        "pingpong_in_loop over {how}: {ITERS} round trips of {LEN} B, every echo verified; RTT p50 {:.1} µs, p99 {:.1} µs, p99.9 {:.1} µs, max {:.1} µs",
        common::pct(&rtts, 0.50),
        common::pct(&rtts, 0.99),
        common::pct(&rtts, 0.999),
        common::pct(&rtts, 1.0),
    );
    Ok(())
}
