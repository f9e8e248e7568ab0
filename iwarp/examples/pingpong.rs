//! Ping-pong latency probe: the client Sends a 64-octet message, the server
//! echoes it back from the buffer it landed in, the client times the round
//! trip and checks every echo.
//!
//! ```text
//! cargo run --release --example pingpong              # simulated link, no root
//! sudo cargo run --release --example pingpong -- --netns   # AF_XDP across two namespaces
//! ```

mod common;

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, Access, ConnectOptions, ListenOptions, WcOpcode, WorkRequest};

const ITERS: u64 = 2_000;
const LEN: u32 = 64;
const T: Duration = Duration::from_secs(10);

fn main() -> Result<(), iwarp::Error> {
    let (server, client, _lab, how) = common::contexts();
    let spd = server.alloc_pd()?;
    let scq = server.create_cq(1024);
    let slots = spd.register(
        vec![0; 64 * LEN as usize],
        Access::LOCAL_WRITE | Access::LOCAL_READ,
    )?;
    let listener = server.listen(9000, &ListenOptions::new(&spd))?;
    let addr = SocketAddrV4::new(server.addr(), 9000);

    // Server: echo every message from the slot it arrived in.
    let echo = std::thread::spawn(move || -> Result<(), iwarp::Error> {
        let req = listener.get_request(T)?;
        for i in 0..64 {
            req.post_recv(i, slots.sge(i * u64::from(LEN), LEN))?;
        }
        let qp = req.accept(&AcceptOptions::default(), &scq)?;
        let mut echoed = 0;
        while echoed < ITERS {
            let wc = scq.wait(T).ok_or(iwarp::Error::TimedOut)?;
            assert!(wc.status.is_ok(), "server: {wc:?}");
            if wc.opcode == Some(WcOpcode::Recv) {
                let slot = wc.wr_id;
                qp.post_send(WorkRequest::Send {
                    wr_id: 1_000_000 + slot,
                    signaled: true,
                    local: slots.sge(slot * u64::from(LEN), wc.byte_len).into(),
                    solicited: false,
                    invalidate: None,
                })?;
                echoed += 1;
            } else if wc.opcode == Some(WcOpcode::Send) {
                // The echo left: the slot takes the next message.
                let slot = wc.wr_id - 1_000_000;
                qp.post_recv(slot, slots.sge(slot * u64::from(LEN), LEN))?;
            }
        }
        // The client disconnects gracefully: we learn who ended it.
        let why = qp.wait_disconnected(T)?;
        assert_eq!(why, Some(iwarp::DisconnectCause::PeerClosed), "server");
        Ok(())
    });

    let cpd = client.alloc_pd()?;
    let ccq = client.create_cq(1024);
    let out = cpd.register(
        vec![0; LEN as usize],
        Access::LOCAL_READ | Access::LOCAL_WRITE,
    )?;
    let back = cpd.register(vec![0; LEN as usize], Access::LOCAL_WRITE)?;
    let qp = client.connect(addr, &ConnectOptions::new(&cpd, &ccq))?;
    let mut rtts = Vec::with_capacity(ITERS as usize);
    for i in 0..ITERS {
        let msg: Vec<u8> = (0..LEN as u64).map(|k| (i * 31 + k) as u8).collect();
        out.write(0, &msg)?;
        qp.post_recv(i, back.sge(0, LEN))?;
        let t = Instant::now();
        qp.post_send(WorkRequest::Send {
            wr_id: i,
            signaled: true,
            local: out.sge(0, LEN).into(),
            solicited: false,
            invalidate: None,
        })?;
        // Two completions: our Send and the echo's Recv.
        let mut got_echo = false;
        let mut sent = false;
        while !(got_echo && sent) {
            let wc = ccq.wait(T).ok_or(iwarp::Error::TimedOut)?;
            assert!(wc.status.is_ok(), "client: {wc:?}");
            match wc.opcode {
                Some(WcOpcode::Recv) => got_echo = true,
                Some(WcOpcode::Send) => sent = true,
                other => panic!("unexpected {other:?}"),
            }
        }
        rtts.push(t.elapsed().as_nanos() as u64);
        assert_eq!(back.read(0, LEN as usize)?, msg, "echo {i} differs");
    }
    qp.disconnect()?;
    let why = qp.wait_disconnected(T)?;
    assert_eq!(why, Some(iwarp::DisconnectCause::LocalClose), "client");
    echo.join().expect("server thread")?;
    rtts.sort_unstable();
    println!(
        "pingpong over {how}: {ITERS} round trips of {LEN} B, every echo verified; RTT p50 {:.1} µs, p99 {:.1} µs, max {:.1} µs",
        common::pct(&rtts, 0.50),
        common::pct(&rtts, 0.99),
        common::pct(&rtts, 1.0),
    );
    Ok(())
}
