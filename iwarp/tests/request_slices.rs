//! `Listener::get_request` with a short timeout, called in a loop (what
//! the verbs library's rdma_cm listener thread does, 20 ms at a time, and
//! `iwarp-serve`, 200 ms): a connection whose TCP handshake is done but
//! whose MPA Request has not come yet must stay queued for a later call,
//! not be aborted when one call's time runs out. Before, the call took the
//! connection, waited out the rest of its slice for the Request and
//! aborted it: the peer saw its connect reset (Linux siw under a loaded
//! CI machine: "Failed to connect through RDMA CM. ERRNO: Connection reset
//! by peer"). Here the client is a bare TCP stream that sends its
//! Request 300 ms after the handshake.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp::{Context, Error, HostOptions, ListenOptions, Polling};
use iwarp_datapath::link::MemDevice;
use iwarp_datapath::runtime::{spawn, LoopHandle, Mode};
use iwarp_datapath::stack::{
    Command, Output, SockId, Stack, StackConfig, StreamShared, Transport, Ulp,
};
use iwarp_proto::mem::MemoryTable;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

/// An MPA Rev 2 Request with the enhanced IRD/ORD words (RFC 6581).
const REQUEST: &[u8] = b"MPA ID Req Frame\x10\x02\x00\x04\x00\x10\x00\x10";

fn host(last: u8) -> HostOptions {
    let mut h = HostOptions::new(Ipv4Addr::new(10, 0, 12, last), 24);
    h.tcp.rto_min = Duration::from_millis(5);
    h.polling = Polling::Adaptive;
    h
}

#[test]
fn a_request_late_for_one_short_wait_is_there_for_the_next() {
    let (da, db) = MemDevice::pair(4096);
    let server = Context::with_device(da, [2, 0, 0, 0, 12, 1], 1500, &host(1)).unwrap();
    let spd = server.alloc_pd().unwrap();
    let listener = server.listen(9600, &ListenOptions::new(&spd)).unwrap();
    // The client: a bare TCP byte stream, whose handshake completes with
    // a pure ACK (as Linux's does) and whose Request comes 300 ms later.
    let (client, _, stream, start) = client(db, server.addr(), 1);
    // Short waits, as verbs' listener thread makes them, with nothing to
    // find for 300 ms; then the Request.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut slices = 0;
    let mut sent = false;
    let req = loop {
        assert!(Instant::now() < deadline, "no request in 10 s");
        if !sent && start.elapsed() > Duration::from_millis(300) {
            stream
                .send(REQUEST.to_vec(), Duration::from_secs(1))
                .unwrap();
            sent = true;
        }
        match listener.get_request(Duration::from_millis(20)) {
            Ok(r) => break r,
            Err(Error::TimedOut) => slices += 1,
            Err(e) => panic!("get_request: {e}"),
        }
    };
    assert!(sent && slices >= 5, "{slices} empty waits");
    assert_eq!((req.peer().ird, req.peer().ord), (Some(16), Some(16)));
    // Not reset meanwhile: the client's stream is still open.
    assert!(
        stream.error().is_none(),
        "the client's connection ended: {:?}",
        stream.error()
    );
    drop(req);
    let _ = client.stop();
}

/// One peer that resets its connection before sending a Request does not
/// end a listener loop that stops on errors (verbs' does): the reset
/// connection is dropped on the way, and the next peer's Request is
/// returned.
#[test]
fn a_connection_reset_before_its_request_is_skipped() {
    let (da, db) = MemDevice::pair(4096);
    let server = Context::with_device(da, [2, 0, 0, 0, 12, 1], 1500, &host(1)).unwrap();
    let spd = server.alloc_pd().unwrap();
    let listener = server.listen(9600, &ListenOptions::new(&spd)).unwrap();
    let (client, sock, _, _) = client(db, server.addr(), 1);
    // Accepted by TCP, then reset by its peer before any Request.
    client.post(Command::Abort(sock)).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let r = listener.get_request(Duration::from_millis(100));
    assert!(matches!(r, Err(Error::TimedOut)), "{:?}", r.err());
    // A second connection from the same client, with its Request.
    client
        .post(Command::Connect {
            token: 2,
            remote: Ipv4Address(server.addr().octets()),
            port: 9600,
            transport: Transport::Tcp,
            ulp: Ulp::Stream,
        })
        .unwrap();
    let (_, stream) = connected(&client, 2);
    stream
        .send(REQUEST.to_vec(), Duration::from_secs(1))
        .unwrap();
    let req = listener.get_request(Duration::from_secs(10)).unwrap();
    assert_eq!(req.peer().ird, Some(16));
    drop(req);
    let _ = client.stop();
}

/// A client stack on `dev` with a byte stream (token `token`) connected
/// to the server's port 9600: its loop, the connection, the stream and
/// when it was opened.
fn client(
    dev: MemDevice,
    server: Ipv4Addr,
    token: u64,
) -> (LoopHandle<Stack>, SockId, Arc<StreamShared>, Instant) {
    let cfg = StackConfig::new(IfaceConfig::new(
        EthernetAddress([2, 0, 0, 0, 12, 2]),
        Ipv4Address::new(10, 0, 12, 2),
        24,
    ));
    let client = spawn(
        Stack::new(cfg, MemoryTable::new()),
        dev,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    );
    let start = Instant::now();
    client
        .post(Command::Connect {
            token,
            remote: Ipv4Address(server.octets()),
            port: 9600,
            transport: Transport::Tcp,
            ulp: Ulp::Stream,
        })
        .unwrap();
    let (sock, stream) = connected(&client, token);
    (client, sock, stream, start)
}

/// The connection the `Connect` with `token` opened, once up.
fn connected(client: &LoopHandle<Stack>, token: u64) -> (SockId, Arc<StreamShared>) {
    let start = Instant::now();
    loop {
        assert!(start.elapsed() < Duration::from_secs(10), "no connection");
        match client.poll() {
            Some(Output::Connected {
                token: t,
                sock,
                stream: Some(s),
            }) if t == token => return (sock, s),
            Some(Output::Failed { error, .. }) => panic!("connect: {error}"),
            _ => std::thread::sleep(Duration::from_micros(100)),
        }
    }
}
