//! What a running stack shows an operator: `tracing` events (connect,
//! accept, reject, Terminate sent and received, flushed work, CQ overrun,
//! retransmission timeouts) and live counters ([`iwarp::Context::stats`],
//! [`iwarp::Qp::stats`]).
//!
//! ```text
//! cargo run --example stats                           # simulated link, no root
//! RUST_LOG=debug cargo run --example stats            # also per-request flush events
//! sudo cargo run --example stats -- --netns           # AF_XDP across two namespaces
//! ```
//!
//! The client is refused once (reject with private data), then connects,
//! sends 1000 messages and makes an RDMA Write; both sides print their
//! counters; then the client writes past the end of the server's region:
//! the server sends a Terminate, its posted receives flush onto a CQ too
//! small for them (an overrun), and the counters are printed again.

mod common;

use std::net::SocketAddrV4;
use std::time::Duration;

use iwarp::{AcceptOptions, Access, ConnectOptions, Error, ListenOptions, WorkRequest};

const T: Duration = Duration::from_secs(20);
const MSGS: u64 = 1000;

fn main() -> Result<(), Error> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal (https://no-color.org).
        .with_ansi(
            std::io::IsTerminal::is_terminal(&std::io::stderr())
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        )
        .init();
    let (server, client, _lab, how) = common::contexts();
    println!("stats example over the {how}");
    let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
    let inbox = spd.register(vec![0; 64 * 64], Access::LOCAL_WRITE)?;
    let target = spd.register(vec![0; 4096], Access::REMOTE_WRITE)?;
    let src = cpd.register(vec![7; 4096], Access::LOCAL_READ)?;
    // The server's CQ holds 32: enough for the traffic (one completion at
    // a time), not for the flush at the end (64 receives outstanding).
    let (scq, ccq) = (server.create_cq(32), client.create_cq(1024));
    let listener = server.listen(9500, &ListenOptions::new(&spd))?;
    let addr = SocketAddrV4::new(server.addr(), 9500);

    // 1. Refused.
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    listener.get_request(T)?.reject(b"come back later")?;
    match t.join().expect("connect thread") {
        Err(Error::Rejected { private_data }) => println!(
            "first connect rejected: {:?}",
            String::from_utf8_lossy(&private_data)
        ),
        other => panic!("expected a reject, got {other:?}"),
    }

    // 2. Accepted; traffic.
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T)?;
    for i in 0..64 {
        req.post_recv(i, inbox.sge(i * 64, 64))?;
    }
    let sqp = req.accept(&AcceptOptions::default(), &scq)?;
    let cqp = t.join().expect("connect thread")?;
    for i in 0..MSGS {
        cqp.post_send(WorkRequest::Send {
            wr_id: i,
            signaled: true,
            local: src.sge(0, 64).into(),
            solicited: false,
            invalidate: None,
        })?;
        let wc = scq.wait(T).expect("a receive");
        assert!(wc.status.is_ok(), "{wc:?}");
        sqp.post_recv(64 + i, inbox.sge((wc.wr_id % 64) * 64, 64))?;
        assert!(ccq.wait(T).expect("a send").status.is_ok());
    }
    cqp.post_send(WorkRequest::Write {
        wr_id: 5000,
        signaled: true,
        local: src.sge(0, 4096).into(),
        remote_stag: target.stag(),
        remote_to: 0,
    })?;
    assert!(ccq.wait(T).expect("the write").status.is_ok());
    println!("\nafter {MSGS} Sends of 64 octets and a 4 KiB RDMA Write:");
    println!("server QP: {:?}", sqp.stats()?);
    println!("client QP: {:?}", cqp.stats()?);
    println!("server context:\n{}", server.stats()?);
    println!("client context:\n{}", client.stats()?);

    // 3. A Write past the end of the region: Terminate, flush, overrun.
    cqp.post_send(WorkRequest::Write {
        wr_id: 5001,
        signaled: true,
        local: src.sge(0, 64).into(),
        remote_stag: target.stag(),
        remote_to: 4096 - 16,
    })?;
    let deadline = std::time::Instant::now() + T;
    while !scq.overrun() {
        assert!(std::time::Instant::now() < deadline, "no overrun");
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut flushed = 0;
    while scq.poll_one().is_some() {
        flushed += 1;
    }
    println!(
        "\nafter a Write out of bounds: {flushed} completions on the server's CQ, overrun {}",
        scq.overrun()
    );
    println!("server context:\n{}", server.stats()?);
    Ok(())
}
