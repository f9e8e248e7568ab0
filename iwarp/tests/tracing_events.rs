//! The stack's `tracing` events, captured by a subscriber installed for
//! this test binary (events come from the poll loops' threads, so the
//! subscriber is the global one; hence one test in this file).

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::io::Write;
use std::net::SocketAddrV4;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iwarp::{AcceptOptions, Access, ConnectOptions, Context, Error, ListenOptions, WorkRequest};

const T: Duration = Duration::from_secs(10);

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
    /// Wait (bounded) until the log holds `what`.
    fn wait_for(&self, what: &str) {
        let deadline = Instant::now() + T;
        while !self.text().contains(what) {
            assert!(Instant::now() < deadline, "no {what:?} in\n{}", self.text());
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

#[test]
fn connect_accept_reject_terminate_flush_overrun_and_rto_are_traced() {
    let log = Log::default();
    let w = log.clone();
    let sub = tracing_subscriber::fmt()
        .with_writer(move || w.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    tracing::subscriber::set_global_default(sub).unwrap();

    let (server, client) = Context::sim_pair();
    let (spd, cpd) = (server.alloc_pd().unwrap(), client.alloc_pd().unwrap());
    // A CQ of one entry: the flush below overruns it.
    let (scq, ccq) = (server.create_cq(1), client.create_cq(64));
    let listener = server.listen(9401, &ListenOptions::new(&spd)).unwrap();
    let addr = SocketAddrV4::new(server.addr(), 9401);

    // Rejected.
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    listener.get_request(T).unwrap().reject(b"no").unwrap();
    assert!(matches!(t.join().unwrap(), Err(Error::Rejected { .. })));
    log.wait_for("connection request rejected");

    // Accepted; then a Write outside the region draws a Terminate, and the
    // server's three receives flush onto a CQ that holds one.
    let target = spd.register(vec![0; 4096], Access::REMOTE_WRITE).unwrap();
    let inbox = spd.register(vec![0; 256], Access::LOCAL_WRITE).unwrap();
    let src = cpd.register(vec![1; 64], Access::LOCAL_READ).unwrap();
    let (c2, co) = (client.clone(), ConnectOptions::new(&cpd, &ccq));
    let t = std::thread::spawn(move || c2.connect(addr, &co));
    let req = listener.get_request(T).unwrap();
    for i in 0..3 {
        req.post_recv(i, inbox.sge(i * 64, 64)).unwrap();
    }
    let _sqp = req.accept(&AcceptOptions::default(), &scq).unwrap();
    let cqp = t.join().unwrap().unwrap();
    log.wait_for("connecting");
    log.wait_for("TCP connection accepted");
    log.wait_for("connection request accepted");
    log.wait_for("connected (TCP established)");
    cqp.post_send(WorkRequest::Write {
        wr_id: 9,
        signaled: true,
        local: src.sge(0, 64).into(),
        remote_stag: target.stag(),
        remote_to: 4096 - 16,
    })
    .unwrap();
    log.wait_for("Terminate sent");
    log.wait_for("Terminate received");
    log.wait_for("work request flushed");
    log.wait_for("CQ overrun");
    assert!(scq.overrun());

    // A SYN to an address nobody has is retransmitted on timeout.
    let nobody = SocketAddrV4::new(std::net::Ipv4Addr::new(10, 0, 0, 9), 9402);
    let mut co = ConnectOptions::new(&cpd, &ccq);
    co.timeout = Duration::from_secs(8);
    let c2 = client.clone();
    // (Not joined: it would wait out its timeout.)
    let _ = std::thread::spawn(move || c2.connect(nobody, &co));
    log.wait_for("TCP retransmission timeout");
}
