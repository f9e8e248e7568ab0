//! The end of a close that is over for the iWARP stream but not yet for
//! TCP: `Qp::wait_disconnected` returns once our FIN is out (LAST-ACK),
//! `Qp::wait_closed` once the peer has it. A process whose TCP lives in
//! the process (verbs' exit linger, `ibv_destroy_qp`) must wait for the
//! latter: left at the former, a lost FIN is never sent again and the
//! peer waits for it until its own FIN's retransmissions give up (Debian's
//! perftest under load: `ib_atomic_lat`'s client waited ~40 s for
//! `DISCONNECTED` after its server had left).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use iwarp::{
    AcceptOptions, ConnectOptions, Context, Error, FrameDevice, HostOptions, ListenOptions, Polling,
};
use iwarp_datapath::link::MemDevice;

const T: Duration = Duration::from_secs(20);

/// A device whose receive side drops every frame while `cut` is set.
struct Valve {
    dev: MemDevice,
    cut: Arc<AtomicBool>,
}

impl FrameDevice for Valve {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let cut = self.cut.load(Ordering::Acquire);
        self.dev.rx_burst(max, &mut |f| {
            if !cut {
                sink(f)
            }
        })
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        self.dev.tx(frame)
    }
    fn flush(&mut self) {
        self.dev.flush()
    }
}

fn host(last: u8, polling: Polling) -> HostOptions {
    let mut h = HostOptions::new(Ipv4Addr::new(10, 0, 11, last), 24);
    h.tcp.rto_min = Duration::from_millis(5);
    h.polling = polling;
    h
}

#[test]
fn a_stream_over_in_last_ack_is_closed_only_once_the_peer_has_our_fin() {
    let (da, db) = MemDevice::pair(4096);
    let cut = Arc::new(AtomicBool::new(false));
    // The server as verbs runs it (inline); the client's receive side
    // can lose what the server sends.
    let server =
        Context::with_device(da, [2, 0, 0, 0, 11, 1], 1500, &host(1, Polling::Inline)).unwrap();
    let client = Context::with_device(
        Valve {
            dev: db,
            cut: cut.clone(),
        },
        [2, 0, 0, 0, 11, 2],
        1500,
        &host(2, Polling::Adaptive),
    )
    .unwrap();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    let (scq, ccq) = (server.create_cq(16), client.create_cq(16));
    let listener = server.listen(9500, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9500);
    let (c, o) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c.connect(addr, &o));
    let req = listener.get_request(T).unwrap();
    let sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();

    // The client closes; what the server answers (its ACK, its FIN) is
    // lost on the way.
    cut.store(true, Ordering::Release);
    cqp.disconnect().unwrap();
    // The server took the client's FIN and sent its own: the stream is
    // over for it (LAST-ACK), not for the client, which has no FIN yet.
    sqp.wait_disconnected(T).unwrap();
    assert!(matches!(
        cqp.wait_disconnected(Duration::from_millis(100)),
        Err(Error::TimedOut)
    ));
    // Its TCP is not finished: the FIN is not acknowledged.
    assert!(matches!(
        sqp.wait_closed(Duration::from_millis(300)),
        Err(Error::TimedOut)
    ));
    assert!(matches!(
        sqp.wait_closed(Duration::ZERO),
        Err(Error::TimedOut)
    ));
    // Retransmitted, the FIN reaches the client: both ends are done.
    cut.store(false, Ordering::Release);
    sqp.wait_closed(T).unwrap();
    cqp.wait_disconnected(T).unwrap();
    cqp.wait_closed(T).unwrap();
    // Finished stays finished.
    sqp.wait_closed(Duration::ZERO).unwrap();
}
