//! Ports with several queues (`Port::open_queues`), in one process: a
//! memif server and client with two queue pairs each (memif pairs TX queue
//! `i` of one end with RX queue `i` of the other), RSS on `net_null` (the
//! one driver at hand that offers it), and the limits. Without DPDK in the
//! build, or an EAL that will not start, the tests print `SKIP:` and pass,
//! except under `CI`, where they fail (`scripts/deps.sh --test` installs
//! DPDK there).
//!
//! DPDK's EAL starts once per process: every test here shares one
//! ([`eal`]). Every wait is bounded in time.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use iwarp_dpdk::{
    allowed_cpus, floating_vdev_args, memif_devargs, Eal, Error, MemifRole, Port, PortQueue,
    Queues, DEFAULT_MTU, RSS_KEY_LEN,
};
use iwarp_frame::FrameDevice;

/// The process's EAL, or None (with the reason printed) where DPDK is not
/// there; under CI that is a failure.
fn eal() -> Option<Eal> {
    static EAL: OnceLock<Result<Eal, String>> = OnceLock::new();
    let r = EAL
        .get_or_init(|| {
            if !iwarp_dpdk::AVAILABLE {
                return Err(Error::Unavailable.to_string());
            }
            Eal::init(floating_vdev_args(&[], &allowed_cpus())).map_err(|e| e.to_string())
        })
        .clone();
    match r {
        Ok(e) => Some(e),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "the DPDK tests must run in CI, but: {why}"
            );
            eprintln!("SKIP: {why}");
            None
        }
    }
}

/// Small rings: two memif ends of two queue pairs each fit the EAL's
/// 256 MiB without hugepages.
const RINGS: Queues = Queues {
    rx_desc: 256,
    tx_desc: 256,
};

/// Frames per queue each way.
const FRAMES: u32 = 1000;

/// The workspace's symmetric Toeplitz key: the 40 octets of
/// `iwarp_net::rss::SYMMETRIC_KEY` (0x6d, 0x5a repeated), copied here as
/// this crate does not depend on `iwarp-net`.
const SYMMETRIC_KEY: [u8; RSS_KEY_LEN] = {
    let mut k = [0u8; RSS_KEY_LEN];
    let mut i = 0;
    while i < RSS_KEY_LEN {
        k[i] = if i % 2 == 0 { 0x6d } else { 0x5a };
        i += 1;
    }
    k
};

/// Frame `seq` sent in direction `dir` (0: client to server) on queue
/// `queue`: Ethernet header (ethertype 0x88b5, local experimental), then
/// dir, queue and seq, then octets that depend on all three; 60 to 1499
/// octets long.
fn frame(dst: [u8; 6], src: [u8; 6], dir: u8, queue: u16, seq: u32) -> Vec<u8> {
    let len = 60 + (seq as usize * 37) % 1440;
    let mut f = Vec::with_capacity(len);
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&[0x88, 0xb5, dir]);
    f.extend_from_slice(&queue.to_be_bytes());
    f.extend_from_slice(&seq.to_be_bytes());
    while f.len() < len {
        let i = f.len() as u32;
        f.push((i.wrapping_mul(31) ^ seq ^ (u32::from(dir) << 3) ^ (u32::from(queue) << 5)) as u8);
    }
    f
}

/// Send frames `from..to` of direction `dir` on `tx` (queue `q`), flush,
/// and receive them on `rx`: each must be the frame expected next, sent on
/// this queue (not another), within 10 s.
fn send_and_check(
    tx: &mut PortQueue,
    rx: &mut PortQueue,
    dir: u8,
    from: u32,
    to: u32,
) -> Result<(), String> {
    let q = tx.queue();
    let (dst, src) = (rx.mac_address(), tx.mac_address());
    for seq in from..to {
        if !tx.tx(&frame(dst, src, dir, q, seq)) {
            return Err(format!("dir {dir} queue {q}: tx refused frame {seq}"));
        }
    }
    tx.flush();
    let mut next = from;
    let mut bad = None;
    let t0 = Instant::now();
    while next < to && bad.is_none() {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!(
                "dir {dir} queue {q}: frames {next}..{to} did not arrive in 10 s"
            ));
        }
        let n = rx.rx_burst(64, &mut |f| {
            if bad.is_some() {
                return;
            }
            if f.len() < 21 || f[12..14] != [0x88, 0xb5] {
                bad = Some(format!("queue {q}: a frame not ours: {f:02x?}"));
                return;
            }
            let (d, fq) = (f[14], u16::from_be_bytes([f[15], f[16]]));
            let seq = u32::from_be_bytes([f[17], f[18], f[19], f[20]]);
            if fq != q || d != dir {
                bad = Some(format!(
                    "RX queue {q} (dir {dir}) got frame {seq} sent on queue {fq} (dir {d})"
                ));
            } else if seq != next {
                bad = Some(format!("queue {q} dir {dir}: frame {seq}, expected {next}"));
            } else if f != frame(dst, src, dir, q, seq).as_slice() {
                bad = Some(format!("queue {q} dir {dir}: frame {seq} differs"));
            } else {
                next += 1;
            }
        });
        if n == 0 {
            std::thread::yield_now();
        }
    }
    match bad {
        Some(b) => Err(b),
        None => Ok(()),
    }
}

/// One memif link of two queue pairs: opened, carried 1000 frames per
/// queue each way on a thread per queue pair, counted, closed.
fn memif_round(eal: &Eal, sock: &std::path::Path, round: u32) {
    let open = |index, role| {
        Port::open_queues(
            eal,
            &memif_devargs(index, role, 1, sock),
            2,
            RINGS,
            DEFAULT_MTU,
            Some(SYMMETRIC_KEY),
        )
        .unwrap_or_else(|e| panic!("round {round}: memif {role:?} with 2 queues: {e}"))
    };
    let mut server = open(40, MemifRole::Server);
    let mut client = open(41, MemifRole::Client);
    assert_eq!(server.len(), 2);
    for (i, q) in server.iter().chain(&client).enumerate() {
        assert_eq!(usize::from(q.queue()), i % 2);
        assert_eq!(q.queue_count(), 2);
        // memif has no RSS, whatever key is given.
        assert!(!q.rss(), "memif reports no RSS");
    }
    assert_eq!(server[0].name(), "net_memif40");
    assert_eq!(server[0].port_id(), server[1].port_id());

    // The client connects on DPDK's interrupt thread; its receive polling
    // supplies the server's transmit buffers, so both of its queues are
    // polled until both ends are up, and a few times more.
    let t0 = Instant::now();
    let mut stray = 0;
    loop {
        for q in &mut client {
            stray += q.rx_burst(32, &mut |_| {});
        }
        if server[0].link_up().unwrap() && client[0].link_up().unwrap() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "round {round}: memif did not come up in 10 s"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
    for _ in 0..10 {
        for q in &mut client {
            stray += q.rx_burst(32, &mut |_| {});
        }
    }
    assert_eq!(stray, 0, "nothing was sent yet");

    // One thread per queue pair, as one poll loop per queue would run:
    // client queue i and server queue i, batches of 50 frames each way.
    let pairs: Vec<(PortQueue, PortQueue)> = client.drain(..).zip(server.drain(..)).collect();
    let threads: Vec<_> = pairs
        .into_iter()
        .map(|(mut c, mut s)| {
            std::thread::spawn(move || {
                for b in (0..FRAMES).step_by(50) {
                    let end = (b + 50).min(FRAMES);
                    send_and_check(&mut c, &mut s, 0, b, end)?;
                    send_and_check(&mut s, &mut c, 1, b, end)?;
                }
                // The thread was given an lcore id (a mempool cache).
                if iwarp_dpdk::thread_lcore_id().is_none() {
                    return Err("the queue thread has no lcore id".to_owned());
                }
                Ok::<_, String>((c, s))
            })
        })
        .collect();
    let mut back = Vec::new();
    for t in threads {
        match t.join() {
            Ok(Ok(pair)) => back.push(pair),
            Ok(Err(e)) => panic!("round {round}: {e}"),
            Err(_) => panic!("round {round}: a queue thread panicked"),
        }
    }
    for (c, s) in &back {
        for (who, q) in [("client", c), ("server", s)] {
            let k = q.counters();
            assert_eq!(
                (k.tx_frames, k.rx_frames),
                (u64::from(FRAMES), u64::from(FRAMES)),
                "round {round}: {who} queue {}: {k:?}",
                q.queue()
            );
            assert_eq!(
                (k.tx_dropped, k.rx_dropped, k.tx_no_mbuf, k.tx_too_big),
                (0, 0, 0, 0),
                "round {round}: {who} queue {}: {k:?}",
                q.queue()
            );
        }
    }
    // The driver's count for the whole port: both queues.
    for (who, q) in [("client", &back[0].0), ("server", &back[0].1)] {
        let st = q.stats().unwrap();
        assert_eq!(
            (st.ipackets, st.opackets),
            (2 * u64::from(FRAMES), 2 * u64::from(FRAMES)),
            "round {round}: {who} port: {st:?}"
        );
    }
    // Dropping every handle stops and closes both ports and frees their
    // pools; the next round opens the same vdev names again.
    drop(back);
}

#[test]
fn memif_queues_pair_up_each_way_and_the_port_closes_with_its_last_queue() {
    let Some(eal) = eal() else { return };
    let sock = std::env::temp_dir().join(format!("iwarp-dpdk-mq-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    for round in 0..2 {
        memif_round(&eal, &sock, round);
    }
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn more_queues_than_the_driver_has_is_a_clear_error() {
    let Some(eal) = eal() else { return };
    let sock = std::env::temp_dir().join(format!("iwarp-dpdk-mqx-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&sock);
    let dev = memif_devargs(50, MemifRole::Server, 3, &sock);
    // memif has at most 255 queue pairs (ETH_MEMIF_MAX_NUM_Q_PAIRS).
    let e = Port::open_queues(&eal, &dev, 256, RINGS, DEFAULT_MTU, None).unwrap_err();
    match &e {
        Error::Queues {
            name,
            asked,
            max_rx,
            max_tx,
        } => {
            assert_eq!((name.as_str(), *asked), ("net_memif50", 256), "{e}");
            assert!(*max_rx < 256 && *max_tx < 256, "{e:?}");
        }
        other => panic!("expected Error::Queues, got {other:?}"),
    }
    let m = e.to_string();
    assert!(m.contains("at most") && m.contains("256 asked for"), "{m}");
    assert_eq!(e.errno(), None);
    let e = Port::open_queues(&eal, &dev, 0, RINGS, DEFAULT_MTU, None).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    // Nothing was left behind: the same devargs hot-plug it again and it
    // opens with 2 queues.
    let qs = Port::open_queues(&eal, &dev, 2, RINGS, DEFAULT_MTU, None).unwrap();
    assert_eq!(qs.len(), 2);
    drop(qs);
    let _ = std::fs::remove_file(&sock);
}

#[test]
fn rss_is_on_where_the_driver_has_it_with_the_key_given() {
    let Some(eal) = eal() else { return };
    // net_null offers RSS (and makes up 64-octet frames on every RX poll).
    let mut qs = Port::open_queues(
        &eal,
        "net_null60,size=64",
        2,
        RINGS,
        DEFAULT_MTU,
        Some(SYMMETRIC_KEY),
    )
    .unwrap();
    for q in &qs {
        assert!(q.rss(), "net_null has RSS");
    }
    let conf = qs[0].rss_conf().unwrap();
    assert_eq!(conf.key, SYMMETRIC_KEY.to_vec(), "the driver's key is ours");
    assert!(conf.ipv4 && conf.ipv4_tcp && conf.ipv4_sctp, "{conf:?}");
    assert!(
        qs.iter().all(|q| q.rss_hashes_sctp()),
        "net_null hashes SCTP"
    );
    // Each queue is a device of its own.
    for q in &mut qs {
        let got = q.rx_burst(8, &mut |f| assert_eq!(f.len(), 64));
        assert_eq!(got, 8, "queue {}", q.queue());
        assert_eq!(q.counters().rx_frames, 8);
        assert!(q.tx(&[0u8; 60]));
        q.flush();
        assert_eq!(q.counters().tx_frames, 1);
    }
    drop(qs);
    // One queue: no RSS, whatever the driver offers.
    let one = Port::open_queues(&eal, "net_null61,size=64", 1, RINGS, DEFAULT_MTU, None).unwrap();
    assert!(!one[0].rss());
    drop(one);
    // Port::open is that one queue.
    let mut p = Port::open(&eal, "net_null62,size=64", RINGS).unwrap();
    assert_eq!(p.rx_burst(4, &mut |f| assert_eq!(f.len(), 64)), 4);
    assert_eq!(p.counters().rx_frames, 4);
}

#[test]
fn a_queue_thread_gets_an_lcore_id_and_hands_it_back_when_it_exits() {
    let Some(eal) = eal() else { return };
    let port = std::sync::Arc::new(std::sync::Mutex::new(
        Port::open(&eal, "net_null63,size=64", RINGS).unwrap(),
    ));
    let before = port.lock().unwrap().pool_available();
    // More threads, one after another, than DPDK has lcore ids
    // (RTE_MAX_LCORE, 128 in Debian's build): each gets one while it runs
    // the queue and gives it back when it exits, or the later ones would
    // find none left.
    for i in 0..300 {
        let port = std::sync::Arc::clone(&port);
        let id = std::thread::spawn(move || {
            assert_eq!(iwarp_dpdk::thread_lcore_id(), None, "a new thread has none");
            let mut p = port.lock().unwrap();
            assert_eq!(p.rx_burst(4, &mut |f| assert_eq!(f.len(), 64)), 4);
            assert!(p.tx(&[0u8; 60]));
            p.flush();
            iwarp_dpdk::thread_lcore_id()
        })
        .join()
        .unwrap();
        assert!(id.is_some(), "thread {i} got no lcore id");
    }
    // Every mbuf is back: in the pool's ring or in the caches of the ids
    // the threads had (DPDK's count includes both).
    let p = port.lock().unwrap();
    assert_eq!(p.pool_available(), before);
    assert_eq!(p.counters().rx_frames, 1200);
    assert_eq!(p.counters().tx_frames, 300);
}

/// Opens memif client `index` with `n` queues on `sock`, polls its RX
/// queues until both links are up (its receive polling supplies the
/// server's transmit buffers) and carries 100 frames each way on every
/// queue pair.
fn connect_and_carry(eal: &Eal, server: &mut [PortQueue], index: u32, sock: &std::path::Path) {
    let n = server.len() as u16;
    let mut client = Port::open_queues(
        eal,
        &memif_devargs(index, MemifRole::Client, 0, sock),
        n,
        RINGS,
        DEFAULT_MTU,
        None,
    )
    .unwrap_or_else(|e| panic!("a client of {n} queues: {e}"));
    // The open waited for the client's link.
    assert!(client[0].link_up().unwrap());
    let t0 = Instant::now();
    while !server[0].link_up().unwrap() {
        assert!(t0.elapsed() < Duration::from_secs(10), "server link down");
        std::thread::sleep(Duration::from_millis(2));
    }
    for _ in 0..10 {
        for q in &mut client {
            assert_eq!(q.rx_burst(32, &mut |_| {}), 0, "nothing was sent yet");
        }
    }
    for (c, s) in client.iter_mut().zip(server.iter_mut()) {
        send_and_check(c, s, 0, 0, 100).unwrap();
        send_and_check(s, c, 1, 0, 100).unwrap();
    }
}

/// memif ends of different queue counts, in every direction: the client's
/// open fails at once with both counts (the server's count is in the file
/// beside its socket; the server would refuse it: memif's secret carries
/// the count), the server
/// never connects (so its queues beyond the client's are never polled
/// without a ring of their own), and a client of the server's count then
/// connects and carries frames on every queue.
#[test]
fn memif_ends_of_different_queue_counts_are_refused_at_the_clients_open() {
    let Some(eal) = eal() else { return };
    for (k, (ns, nc)) in [(2u16, 1u16), (1, 2), (3, 2)].into_iter().enumerate() {
        let index = 70 + 2 * k as u32;
        let sock =
            std::env::temp_dir().join(format!("iwarp-dpdk-mm{k}-{}.sock", std::process::id()));
        let _ = std::fs::remove_file(&sock);
        let mut server = Port::open_queues(
            &eal,
            &memif_devargs(index, MemifRole::Server, 0, &sock),
            ns,
            RINGS,
            DEFAULT_MTU,
            None,
        )
        .unwrap();
        // The server's count, beside its socket.
        let file = format!("{}.queues-0", sock.display());
        assert_eq!(std::fs::read_to_string(&file).unwrap(), format!("{ns}\n"));

        let t0 = Instant::now();
        let e = Port::open_queues(
            &eal,
            &memif_devargs(index + 1, MemifRole::Client, 0, &sock),
            nc,
            RINGS,
            DEFAULT_MTU,
            None,
        )
        .unwrap_err();
        // At once: the server's file names its count, no wait for a link.
        assert!(
            t0.elapsed() < iwarp_dpdk::MEMIF_CONNECT_WAIT,
            "{:?}",
            t0.elapsed()
        );
        match &e {
            Error::MemifRefused {
                queues,
                server_queues,
                id,
                ..
            } => assert_eq!((*queues, *server_queues, *id), (nc, Some(ns), 0), "{e}"),
            other => panic!("server {ns}, client {nc}: expected MemifRefused, got {other:?}"),
        }
        let m = e.to_string();
        assert!(
            m.contains(&format!("has {nc} queue(s)"))
                && m.contains(&format!("has {ns}, and refuses a client of another count"))
                && m.contains(&format!("Open both ends with {ns} or both with {nc}")),
            "{m}"
        );
        assert!(!server[0].link_up().unwrap(), "server {ns}, client {nc}");
        for q in &mut server {
            assert_eq!(q.rx_burst(32, &mut |_| {}), 0);
        }
        // The refused client left nothing behind (its devargs hot-plug
        // again), and the server takes a client of its own count.
        connect_and_carry(&eal, &mut server, index + 1, &sock);
        drop(server);
        assert!(
            !std::path::Path::new(&file).exists(),
            "the server's count goes with it"
        );
        let _ = std::fs::remove_file(&sock);
    }
}

#[test]
fn a_memif_end_of_several_queues_takes_no_secret_of_its_own() {
    let Some(eal) = eal() else { return };
    let sock = std::env::temp_dir().join(format!("iwarp-dpdk-ms-{}.sock", std::process::id()));
    let dev = format!(
        "{},secret=mine",
        memif_devargs(80, MemifRole::Server, 0, &sock)
    );
    let e = Port::open_queues(&eal, &dev, 2, RINGS, DEFAULT_MTU, None).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { .. }) && e.to_string().contains("secret"),
        "{e:?}"
    );
    // One queue keeps the secret given.
    let one = Port::open_queues(&eal, &dev, 1, RINGS, DEFAULT_MTU, None).unwrap();
    drop(one);
    let _ = std::fs::remove_file(&sock);
}
