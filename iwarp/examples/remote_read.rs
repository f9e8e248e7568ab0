//! Storage-style remote read service: the server registers a buffer of
//! blocks for remote reading and sends its STag and size in the accept's
//! private data; the client reads every block with RDMA Read and checks it.
//!
//! ```text
//! cargo run --release --example remote_read              # simulated link, no root
//! sudo cargo run --release --example remote_read -- --netns   # AF_XDP across two namespaces
//! ```

mod common;

use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, Access, ConnectOptions, ListenOptions, STag, WcOpcode, WorkRequest};

const BLOCK: usize = 64 << 10;
const BLOCKS: usize = 64;
const T: Duration = Duration::from_secs(20);

fn block_byte(i: usize) -> u8 {
    ((i / BLOCK) as u8).wrapping_mul(37) ^ (i as u8)
}

fn main() -> Result<(), iwarp::Error> {
    let (server, client, _lab, how) = common::contexts();
    let spd = server.alloc_pd()?;
    let scq = server.create_cq(64);
    let store: Vec<u8> = (0..BLOCK * BLOCKS).map(block_byte).collect();
    let store = spd.register(store, Access::REMOTE_READ | Access::LOCAL_READ)?;
    let listener = server.listen(9001, &ListenOptions::new(&spd))?;
    let addr = SocketAddrV4::new(server.addr(), 9001);

    let serve = std::thread::spawn(move || -> Result<(), iwarp::Error> {
        let req = listener.get_request(T)?;
        // Tell the client where the blocks are: STag (4 octets), size (8).
        let mut pd = store.stag().0.to_be_bytes().to_vec();
        pd.extend_from_slice(&(store.len() as u64).to_be_bytes());
        let qp = req.accept(
            &AcceptOptions {
                private_data: pd,
                ..Default::default()
            },
            &scq,
        )?;
        qp.wait_disconnected(T).map(|_| ())
    });

    let cpd = client.alloc_pd()?;
    let ccq = client.create_cq(256);
    let sink = cpd.register(vec![0; BLOCK * BLOCKS], Access::LOCAL_WRITE)?;
    let qp = client.connect(addr, &ConnectOptions::new(&cpd, &ccq))?;
    let pd = &qp.negotiated().peer_private_data;
    assert_eq!(pd.len(), 12, "server's private data");
    let stag = STag(u32::from_be_bytes([pd[0], pd[1], pd[2], pd[3]]));
    let size = u64::from_be_bytes([pd[4], pd[5], pd[6], pd[7], pd[8], pd[9], pd[10], pd[11]]);
    assert_eq!(size as usize, BLOCK * BLOCKS);
    let started = Instant::now();
    // Post every Read at once: the queue pair keeps at most ORD in flight.
    for b in 0..BLOCKS {
        let off = (b * BLOCK) as u64;
        qp.post_send(WorkRequest::Read {
            wr_id: b as u64,
            signaled: true,
            local: sink.sge(off, BLOCK as u32).into(),
            remote_stag: stag,
            remote_to: off,
        })?;
    }
    for want in 0..BLOCKS as u64 {
        let wc = ccq.wait(T).ok_or(iwarp::Error::TimedOut)?;
        assert!(wc.status.is_ok(), "{wc:?}");
        // RFC 5040 §5.5: Reads complete in the order they were posted.
        assert_eq!((wc.wr_id, wc.opcode), (want, Some(WcOpcode::Read)));
    }
    let secs = started.elapsed().as_secs_f64();
    let got = sink.read(0, BLOCK * BLOCKS)?;
    let bad = got
        .iter()
        .enumerate()
        .filter(|&(i, &x)| x != block_byte(i))
        .count();
    assert_eq!(bad, 0, "{bad} octets differ");
    qp.disconnect()?;
    qp.wait_disconnected(T)?;
    serve.join().expect("server thread")?;
    println!(
        "remote_read over {how}: {BLOCKS} blocks of {} KiB read with RDMA Read and verified, {:.1} MB/s",
        BLOCK >> 10,
        (BLOCK * BLOCKS) as f64 / secs / 1e6
    );
    Ok(())
}
