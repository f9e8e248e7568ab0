//! Two ends of our own memif in one process (a thread each side of the
//! handshake): frames both ways, frames longer than the client's buffers,
//! a full ring, refusals, a peer that leaves, and a sleeping receiver.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::path::PathBuf;
use std::time::{Duration, Instant};

use iwarp_frame::FrameDevice;
use iwarp_memif::{Config, Listener, Memif, Role};

fn sock(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iwarp-memif-test-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn pair(server: Config, client: Config) -> (Memif, Memif) {
    let l = Listener::bind(server).unwrap();
    let c = std::thread::spawn(move || Memif::connect(&client));
    let s = l.accept().unwrap();
    (s, c.join().unwrap().unwrap())
}

fn recv_all(d: &mut dyn FrameDevice, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let end = Instant::now() + Duration::from_secs(5);
    while got.len() < want && Instant::now() < end {
        d.rx_burst(64, &mut |f| got.push(f.to_vec()));
    }
    got
}

fn frame(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| (k * 7 + i) as u8).collect()
}

#[test]
fn frames_cross_both_ways_in_order() {
    let p = sock("both");
    let (mut s, mut c) = pair(Config::new(&p, 3), Config::new(&p, 3));
    assert_eq!((s.role(), c.role()), (Role::Server, Role::Client));
    assert_eq!(c.peer_name(), "iwarp-memif");
    for i in 0..300 {
        assert!(c.tx(&frame(i, 60 + i)), "client frame {i}");
        if i % 7 == 0 {
            c.flush();
        }
    }
    c.flush();
    let got = recv_all(&mut s, 300);
    assert_eq!(got.len(), 300);
    for (i, f) in got.iter().enumerate() {
        assert_eq!(f, &frame(i, 60 + i));
    }
    // Server to client, built in place, through more than a ring's worth.
    for round in 0..3 {
        for i in 0..1000 {
            let f = frame(i + round, 1514);
            assert!(s.tx_build(f.len(), &mut |b| {
                b.copy_from_slice(&f);
                true
            }));
            if i % 50 == 49 {
                s.flush();
                assert_eq!(recv_all(&mut c, 50).len(), 50);
            }
        }
        s.flush();
    }
    assert_eq!(s.stats().tx_frames, 3000);
    assert_eq!(c.stats().rx_frames, 3000);
    assert_eq!(s.stats().kicks, 0, "the client polls: no eventfd writes");
}

#[test]
fn a_full_ring_refuses_until_the_receiver_reads() {
    let p = sock("full");
    let mut cfg = Config::new(&p, 0);
    cfg.log2_ring_size = 4;
    let (mut s, mut c) = pair(Config::new(&p, 0), cfg);
    assert_eq!(c.ring_size(), 16);
    for i in 0..16 {
        assert!(c.tx(&frame(i, 64)));
    }
    assert!(!c.tx(&frame(16, 64)), "17th frame on a ring of 16");
    c.flush();
    assert_eq!(recv_all(&mut s, 16).len(), 16);
    assert!(c.tx(&frame(17, 64)), "room again once read");
    // A cancelled build takes no slot.
    assert!(!c.tx_build(64, &mut |_| false));
    c.flush();
    assert_eq!(recv_all(&mut s, 1), vec![frame(17, 64)]);
    assert_eq!(c.stats().tx_refused, 1);
}

#[test]
fn frames_longer_than_the_clients_buffers_are_chained() {
    let p = sock("chain");
    // The client lends 2048-octet buffers; the server sends 9014-octet
    // frames over 5 slots each, and its client gathers them.
    let server = Config::new(&p, 1).with_mtu(9000);
    let mut client = Config::new(&p, 1);
    client.max_frame = 9014;
    client.buffer_size = 2048;
    let (mut s, mut c) = pair(server, client);
    for i in 0..40 {
        assert!(s.tx(&frame(i, 9014)), "frame {i}");
        assert!(s.tx_build_upto(9014, &mut |b| {
            b[..100].copy_from_slice(&frame(i, 100));
            Some(100)
        }));
    }
    s.flush();
    let got = recv_all(&mut c, 80);
    assert_eq!(got.len(), 80);
    for i in 0..40 {
        assert_eq!(got[2 * i], frame(i, 9014));
        assert_eq!(got[2 * i + 1], frame(i, 100));
    }
    // A frame over max_frame is refused at the sender.
    assert!(!c.tx(&vec![0; 9015]));
}

#[test]
fn a_client_of_another_id_or_secret_is_refused_with_the_reason() {
    let p = sock("refuse");
    let mut scfg = Config::new(&p, 5);
    scfg.secret = b"right".to_vec();
    scfg.timeout = Duration::from_secs(5);
    let l = Listener::bind(scfg).unwrap();
    for (id, secret, why) in [
        (6, &b"right"[..], "interface id 6"),
        (5, b"wrong", "secret"),
    ] {
        let mut cfg = Config::new(&p, id);
        cfg.secret = secret.to_vec();
        let c = std::thread::spawn(move || Memif::connect(&cfg));
        let e = l.accept().unwrap_err();
        assert!(e.to_string().contains(why), "{e}");
        let ce = c.join().unwrap().unwrap_err();
        assert!(ce.to_string().contains(why), "client sees: {ce}");
    }
    // The listener still serves a right client.
    let mut cfg = Config::new(&p, 5);
    cfg.secret = b"right".to_vec();
    let c = std::thread::spawn(move || Memif::connect(&cfg));
    assert!(l.accept().is_ok());
    assert!(c.join().unwrap().is_ok());
}

#[test]
fn a_live_server_keeps_its_socket_and_a_stale_one_is_replaced() {
    let p = sock("stale");
    let l = Listener::bind(Config::new(&p, 0)).unwrap();
    let e = Listener::bind(Config::new(&p, 0)).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AddrInUse);
    drop(l);
    assert!(!p.exists(), "a listener removes its socket file");
    let p2 = sock("stale2");
    {
        let _l = Listener::bind(Config::new(&p2, 0)).unwrap();
    }
    // A socket file nobody listens on: left by a process that died.
    let fd = rustix::net::socket(
        rustix::net::AddressFamily::UNIX,
        rustix::net::SocketType::SEQPACKET,
        None,
    )
    .unwrap();
    rustix::net::bind(
        &fd,
        &rustix::net::SocketAddrUnix::new(p2.as_path()).unwrap(),
    )
    .unwrap();
    drop(fd);
    assert!(p2.exists());
    assert!(Listener::bind(Config::new(&p2, 0)).is_ok());
}

#[test]
fn a_peer_that_leaves_breaks_the_link() {
    let p = sock("leave");
    let (mut s, c) = pair(Config::new(&p, 0), Config::new(&p, 0));
    assert!(s.check_link());
    drop(c);
    let end = Instant::now() + Duration::from_secs(5);
    while s.check_link() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        s.broken().unwrap_or("").contains("disconnected"),
        "{:?}",
        s.broken()
    );
    assert!(!s.tx(&frame(0, 64)));
}

#[test]
fn a_sleeping_receiver_is_woken_by_a_frame_or_its_doorbell() {
    let p = sock("sleep");
    let (mut s, mut c) = pair(Config::new(&p, 0), Config::new(&p, 0));
    let t = std::thread::spawn(move || {
        let t0 = Instant::now();
        s.wait(Duration::from_secs(5));
        let woke = t0.elapsed();
        let got = recv_all(&mut s, 1);
        (woke, got, s)
    });
    std::thread::sleep(Duration::from_millis(50));
    assert!(c.tx(&frame(1, 64)));
    c.flush();
    let (woke, got, mut s) = t.join().unwrap();
    assert!(woke < Duration::from_secs(4), "woke after {woke:?}");
    assert_eq!(got, vec![frame(1, 64)]);
    assert_eq!(c.stats().kicks, 1, "the sleeping server was signalled");
    // The doorbell wakes it with nothing to read.
    let bell = s.doorbell().unwrap();
    bell.ring();
    let t0 = Instant::now();
    s.wait(Duration::from_secs(5));
    assert!(t0.elapsed() < Duration::from_secs(4));
    // Polling again: no more kicks.
    assert!(c.tx(&frame(2, 64)));
    c.flush();
    assert_eq!(c.stats().kicks, 1);
    assert_eq!(recv_all(&mut s, 1), vec![frame(2, 64)]);
}

#[test]
fn a_client_reuses_few_buffers_while_few_frames_are_in_flight() {
    // One frame in flight at a time: the client sends from the buffers it
    // got back last, so its frames land in a handful of buffers, not in
    // one per ring slot (few pages, warm in the caches).
    let p = sock("lifo");
    let (mut s, mut c) = pair(Config::new(&p, 0), Config::new(&p, 0));
    let mut seen = std::collections::HashSet::new();
    for i in 0..3000 {
        assert!(c.tx(&frame(i, 100)));
        c.flush();
        let end = Instant::now() + Duration::from_secs(5);
        let mut n = 0;
        while n == 0 && Instant::now() < end {
            n = s.rx_burst(1, &mut |f| {
                seen.insert(f.as_ptr() as usize);
            });
        }
        assert_eq!(n, 1, "frame {i}");
    }
    // At most the frames sent between two reads of the server's tail
    // (32), and the one in flight.
    assert!(seen.len() <= 33, "{} buffers for 3000 frames", seen.len());
    assert!(seen.len() > 1);
}

#[test]
fn a_background_server_is_up_at_once_and_takes_a_new_client_after_one_leaves() {
    use iwarp_memif::MemifServer;
    let p = sock("bg");
    let mut s = MemifServer::bind(Config::new(&p, 4)).unwrap();
    assert!(s.status().unwrap().starts_with("waiting for a client"));
    assert!(!s.tx(&frame(0, 64)), "no client: the link is down");
    assert_eq!(s.rx_burst(8, &mut |_| {}), 0);
    for round in 0..2 {
        let mut c = Memif::connect(&Config::new(&p, 4)).unwrap();
        assert!(c.tx(&frame(round, 80)));
        c.flush();
        assert_eq!(recv_all(&mut s, 1), vec![frame(round, 80)], "round {round}");
        assert!(s.status().is_none());
        assert!(s.tx(&frame(round + 10, 90)));
        s.flush();
        assert_eq!(recv_all(&mut c, 1), vec![frame(round + 10, 90)]);
        drop(c);
        // Polling (as a busy loop does) notices the client left.
        let end = Instant::now() + Duration::from_secs(5);
        while s.status().is_none() && Instant::now() < end {
            s.rx_burst(8, &mut |_| {});
        }
        let why = s.status().unwrap_or_default();
        assert!(why.contains("broke"), "{why}");
    }
    assert_eq!(s.clients(), 2);
    let st = s.stats();
    assert_eq!((st.rx_frames, st.tx_frames), (2, 2));
}

/// A link of `n` queue pairs: the server's devices and the client's, in
/// queue order.
fn pairs(p: &std::path::Path, n: u16) -> (Vec<Memif>, Vec<Memif>) {
    let l = Listener::bind_queues(Config::new(p, 7), n).unwrap();
    let cfg = Config::new(p, 7);
    let c = std::thread::spawn(move || Memif::connect_queues(&cfg, n));
    let s = l.accept_queues().unwrap();
    (s, c.join().unwrap().unwrap())
}

#[test]
fn each_queue_pair_carries_its_own_frames_from_threads_of_their_own() {
    let p = sock("queues");
    let (s, c) = pairs(&p, 3);
    assert_eq!((s.len(), c.len()), (3, 3));
    for (q, (a, b)) in s.iter().zip(&c).enumerate() {
        assert_eq!((a.queue(), b.queue()), (q as u16, q as u16));
    }
    // Each client queue on a thread of its own sends frames tagged with
    // its number; each server queue, on its own thread, receives exactly
    // its own and answers them on the same queue pair.
    let per = 2000usize;
    let servers: Vec<_> = s
        .into_iter()
        .map(|mut d| {
            std::thread::spawn(move || {
                let q = d.queue() as u8;
                let got = recv_all(&mut d, per);
                assert_eq!(got.len(), per, "server queue {q}");
                for (i, f) in got.iter().enumerate() {
                    assert_eq!(f[0], q, "server queue {q} frame {i}: another queue's");
                    assert_eq!(&f[1..], &frame(i, 99)[1..], "server queue {q} frame {i}");
                    let mut back = f.clone();
                    back[1] = back[1].wrapping_add(1);
                    while !d.tx(&back) {
                        d.flush();
                    }
                }
                d.flush();
                d
            })
        })
        .collect();
    let clients: Vec<_> = c
        .into_iter()
        .map(|mut d| {
            std::thread::spawn(move || {
                let q = d.queue() as u8;
                for i in 0..per {
                    let mut f = frame(i, 99);
                    f[0] = q;
                    while !d.tx(&f) {
                        d.flush();
                        std::thread::yield_now();
                    }
                }
                d.flush();
                let got = recv_all(&mut d, per);
                assert_eq!(got.len(), per, "client queue {q}");
                for (i, f) in got.iter().enumerate() {
                    assert_eq!(f[0], q, "client queue {q} answer {i}");
                    assert_eq!(f[1], frame(i, 99)[1].wrapping_add(1));
                }
                d
            })
        })
        .collect();
    let s: Vec<Memif> = servers.into_iter().map(|h| h.join().unwrap()).collect();
    let c: Vec<Memif> = clients.into_iter().map(|h| h.join().unwrap()).collect();
    for d in s.iter().chain(&c) {
        let st = d.stats();
        assert_eq!(
            (st.rx_frames, st.tx_frames),
            (per as u64, per as u64),
            "queue {}",
            d.queue()
        );
    }
}

#[test]
fn a_client_of_another_queue_count_is_refused_naming_both() {
    // Fewer than the server's: the server refuses at CONNECT.
    let p = sock("fewer");
    let l = Listener::bind_queues(Config::new(&p, 2), 2).unwrap();
    let cfg = Config::new(&p, 2);
    let c = std::thread::spawn(move || Memif::connect_queues(&cfg, 1));
    let e = l.accept_queues().unwrap_err().to_string();
    assert!(
        e.contains("brought 1 queue pair (both rings), the server's link has 2 queue pairs"),
        "{e}"
    );
    let e = c.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("has 2 queue pairs") && e.contains("this client has 1 queue pair"),
        "{e}"
    );
    // More than the server takes: the client refuses after HELLO.
    let p = sock("more");
    let l = Listener::bind_queues(Config::new(&p, 2), 2).unwrap();
    let cfg = Config::new(&p, 2);
    let c = std::thread::spawn(move || Memif::connect_queues(&cfg, 4));
    assert!(l.accept_queues().is_err());
    let e = c.join().unwrap().unwrap_err().to_string();
    assert!(
        e.contains("takes 2 queue pairs, this client has 4 queue pairs"),
        "{e}"
    );
    // Out of range, before any socket.
    assert!(Memif::connect_queues(&Config::new(&p, 2), 0).is_err());
    assert!(Listener::bind_queues(Config::new(sock("none"), 2), 129).is_err());
    // One listener of two: `accept` (one queue pair) is refused.
    let l = Listener::bind_queues(Config::new(sock("acc1"), 2), 2).unwrap();
    assert!(l.accept_within(Duration::from_millis(1)).is_err());
}

#[test]
fn a_peer_that_leaves_breaks_every_queue_pair_and_the_last_to_go_says_disconnect() {
    let p = sock("qleave");
    let (mut s, c) = pairs(&p, 2);
    drop(c);
    for d in s.iter_mut() {
        let end = Instant::now() + Duration::from_secs(5);
        while d.check_link() && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            d.broken().unwrap_or("").contains("disconnected"),
            "queue {}: {:?}",
            d.queue(),
            d.broken()
        );
    }
    // One end's queue pairs leave together: DISCONNECT goes out when the
    // last of them drops, not before.
    let p = sock("qleave2");
    let (mut s, mut c) = pairs(&p, 2);
    let s1 = s.pop().unwrap();
    drop(s);
    let mut c0 = c.remove(0);
    let end = Instant::now() + Duration::from_millis(50);
    while Instant::now() < end {
        assert!(
            c0.check_link(),
            "a server queue pair still lives: {:?}",
            c0.broken()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    drop(s1);
    let end = Instant::now() + Duration::from_secs(5);
    while c0.check_link() && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        c0.broken().unwrap_or("").contains("disconnected"),
        "{:?}",
        c0.broken()
    );
    // Its other queue pair learns it from the link, not its own socket.
    let c1 = &mut c[0];
    assert!(!c1.check_link());
    assert!(
        c1.broken().unwrap_or("").contains("disconnected"),
        "{:?}",
        c1.broken()
    );
}

#[test]
fn a_background_server_of_two_queue_pairs_takes_each_client_on_both() {
    use iwarp_memif::MemifServer;
    let p = sock("bgq");
    let mut s = MemifServer::bind_queues(Config::new(&p, 5), 2).unwrap();
    assert_eq!(s.iter().map(|d| d.queue()).collect::<Vec<_>>(), vec![0, 1]);
    for round in 0..2usize {
        let mut c = Memif::connect_queues(&Config::new(&p, 5), 2).unwrap();
        for (q, (sd, cd)) in s.iter_mut().zip(c.iter_mut()).enumerate() {
            let f = frame(round * 10 + q, 70 + q);
            assert!(cd.tx(&f));
            cd.flush();
            assert_eq!(recv_all(sd, 1), vec![f], "round {round} queue {q}");
            let b = frame(round * 10 + q + 100, 80);
            assert!(sd.tx(&b));
            sd.flush();
            assert_eq!(recv_all(cd, 1), vec![b], "round {round} queue {q} back");
        }
        drop(c);
        // Every queue's device notices (queue 0's asks for the next client).
        for d in s.iter_mut() {
            let end = Instant::now() + Duration::from_secs(5);
            while d.status().is_none() && Instant::now() < end {
                d.rx_burst(8, &mut |_| {});
            }
            assert!(
                d.status().unwrap_or_default().contains("broke"),
                "queue {}",
                d.queue()
            );
        }
    }
    for d in &s {
        assert_eq!(d.clients(), 2, "queue {}", d.queue());
        let st = d.stats();
        assert_eq!((st.rx_frames, st.tx_frames), (2, 2), "queue {}", d.queue());
    }
}
