//! Interop with DPDK's own `net_memif` (Debian's DPDK 22.11): our server
//! with DPDK's client, and DPDK's server with our client, in one process;
//! frames of every length each way, and jumbo frames that DPDK chains
//! over its 2048-octet buffers; links of two queue pairs each way round
//! (queue i to queue i). Without DPDK in the build the tests print
//! `SKIP:` and pass, except under `CI`, where they fail.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use iwarp_dpdk::{allowed_cpus, floating_vdev_args, memif_devargs, Eal, MemifRole, Port, Queues};
use iwarp_frame::FrameDevice;
use iwarp_memif::{Config, Listener, Memif};

/// The process's EAL (DPDK starts once per process), or None where DPDK
/// is not in the build; under CI that is a failure.
fn eal() -> Option<Eal> {
    static EAL: OnceLock<Result<Eal, String>> = OnceLock::new();
    let r = EAL
        .get_or_init(|| {
            if !iwarp_dpdk::AVAILABLE {
                return Err("built without DPDK".to_owned());
            }
            Eal::init(floating_vdev_args(&[], &allowed_cpus())).map_err(|e| e.to_string())
        })
        .clone();
    match r {
        Ok(e) => Some(e),
        Err(why) => {
            assert!(
                std::env::var_os("CI").is_none(),
                "DPDK must run in CI: {why}"
            );
            eprintln!("SKIP: {why}");
            None
        }
    }
}

/// Hot-plugging ports is one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

const RINGS: Queues = Queues {
    rx_desc: 256,
    tx_desc: 256,
};

fn sock(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iwarp-memif-dpdk-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

fn frame(dir: u8, seq: usize, len: usize) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, dir]);
    f.extend_from_slice(&[0x88, 0xb5]);
    f.extend((14..len).map(|k| (k * 13 + seq * 7 + usize::from(dir)) as u8));
    f
}

/// Send `frames` from `a` and read them all at `b`, polling both
/// (a DPDK memif server's TX waits for its client's first RX poll).
fn cross(a: &mut dyn FrameDevice, b: &mut dyn FrameDevice, frames: &[Vec<u8>]) {
    let mut sent = 0;
    let mut got: Vec<Vec<u8>> = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while got.len() < frames.len() && Instant::now() < end {
        while sent < frames.len() && sent < got.len() + 64 && a.tx(&frames[sent]) {
            sent += 1;
        }
        a.flush();
        a.rx_burst(32, &mut |_| {});
        b.rx_burst(32, &mut |f| got.push(f.to_vec()));
    }
    assert_eq!(got.len(), frames.len(), "{sent} sent");
    for (i, (g, w)) in got.iter().zip(frames).enumerate() {
        assert_eq!(g, w, "frame {i}");
    }
}

fn frames(dir: u8, n: usize, max: usize) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| frame(dir, i, 60 + (i * 37) % (max - 59)))
        .collect()
}

#[test]
fn our_server_carries_frames_with_dpdks_client() {
    let Some(eal) = eal() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let p = sock("ours-serve");
    let l = Listener::bind(Config::new(&p, 4)).unwrap();
    let dev = memif_devargs(20, MemifRole::Client, 4, &p);
    let t = std::thread::spawn(move || l.accept().map(|m| (m, l)));
    let mut dpdk = Port::open(&eal, &dev, RINGS).unwrap();
    let (mut ours, _l) = t.join().unwrap().unwrap();
    assert!(ours.peer_name().starts_with("DPDK"), "{}", ours.peer_name());
    cross(&mut dpdk, &mut ours, &frames(0, 2000, 1514));
    cross(&mut ours, &mut dpdk, &frames(1, 2000, 1514));
    assert_eq!(ours.stats().rx_bad_desc, 0);
}

#[test]
fn our_client_carries_frames_with_dpdks_server() {
    let Some(eal) = eal() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let p = sock("dpdk-serve");
    let dev = memif_devargs(21, MemifRole::Server, 9, &p);
    let mut dpdk = Port::open(&eal, &dev, RINGS).unwrap();
    let mut ours = Memif::connect(&Config::new(&p, 9)).unwrap();
    cross(&mut ours, &mut dpdk, &frames(0, 2000, 1514));
    cross(&mut dpdk, &mut ours, &frames(1, 2000, 1514));
}

#[test]
fn jumbo_frames_cross_to_and_from_dpdk() {
    let Some(eal) = eal() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // DPDK's client at MTU 9000 lends buffers that hold a whole frame.
    let p = sock("jumbo");
    let l = Listener::bind(Config::new(&p, 2).with_mtu(9000)).unwrap();
    let dev = memif_devargs(22, MemifRole::Client, 2, &p);
    let t = std::thread::spawn(move || l.accept().map(|m| (m, l)));
    let mut dpdk = Port::open_mtu(&eal, &dev, RINGS, 9000).unwrap();
    let (mut ours, _l) = t.join().unwrap().unwrap();
    cross(&mut dpdk, &mut ours, &frames(0, 300, 9014));
    cross(&mut ours, &mut dpdk, &frames(1, 300, 9014));
}

#[test]
fn jumbo_frames_chain_over_small_buffers_between_our_client_and_dpdks_server() {
    let Some(eal) = eal() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Our client lends 2048-octet buffers: DPDK's server chains its
    // jumbo frames over them and we gather them; we chain ours and DPDK
    // gathers them.
    let p = sock("chain");
    let dev = memif_devargs(23, MemifRole::Server, 3, &p);
    let mut dpdk = Port::open_mtu(&eal, &dev, RINGS, 9000).unwrap();
    let mut cfg = Config::new(&p, 3);
    cfg.max_frame = 9014;
    let mut ours = Memif::connect(&cfg).unwrap();
    let (to_dpdk, to_us) = (frames(0, 300, 9014), frames(1, 300, 9014));
    cross(&mut ours, &mut dpdk, &to_dpdk);
    cross(&mut dpdk, &mut ours, &to_us);
    let long = |v: &[Vec<u8>]| v.iter().filter(|f| f.len() > 2048).count() as u64;
    assert!(long(&to_us) > 100, "{}", long(&to_us));
    assert_eq!(ours.stats().rx_chained, long(&to_us), "{:?}", ours.stats());
    assert_eq!(
        ours.stats().tx_chained,
        long(&to_dpdk),
        "{:?}",
        ours.stats()
    );
}

/// The secret a DPDK memif port of ours with `n` > 1 queues is plugged
/// with (`Port::open_queues`): our end of the same count gives it too.
fn queue_secret(n: u16) -> Vec<u8> {
    format!("iwarp-queues-{n}").into_bytes()
}

/// Each queue pair of a two-queue link carries its own frames, both
/// ways, between `ours` and `dpdk` (queue i to queue i).
fn cross_queues(ours: &mut [Memif], dpdk: &mut [iwarp_dpdk::PortQueue]) {
    assert_eq!((ours.len(), dpdk.len()), (2, 2));
    for (q, (o, d)) in ours.iter_mut().zip(dpdk.iter_mut()).enumerate() {
        let q = q as u8;
        cross(d, o, &frames(10 + q, 500, 1514));
        cross(o, d, &frames(20 + q, 500, 1514));
    }
    for o in ours.iter() {
        let st = o.stats();
        assert_eq!(
            (st.rx_frames, st.tx_frames, st.rx_bad_desc),
            (500, 500, 0),
            "queue {}",
            o.queue()
        );
    }
}

#[test]
fn two_queue_pairs_carry_frames_with_dpdks_client_and_server() {
    let Some(eal) = eal() else { return };
    let _g = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    // Our server of two with DPDK's client of two.
    let p = sock("ours-serve-q2");
    let mut cfg = Config::new(&p, 6);
    cfg.secret = queue_secret(2);
    let l = Listener::bind_queues(cfg, 2).unwrap();
    let t = std::thread::spawn(move || l.accept_queues().map(|m| (m, l)));
    let dev = memif_devargs(22, MemifRole::Client, 6, &p);
    let mut dpdk = Port::open_queues(&eal, &dev, 2, RINGS, 1500, None).unwrap();
    let (mut ours, _l) = t.join().unwrap().unwrap();
    cross_queues(&mut ours, &mut dpdk);
    drop((ours, dpdk));
    // DPDK's server of two with our client of two.
    let p = sock("dpdk-serve-q2");
    let dev = memif_devargs(23, MemifRole::Server, 8, &p);
    let mut dpdk = Port::open_queues(&eal, &dev, 2, RINGS, 1500, None).unwrap();
    let mut cfg = Config::new(&p, 8);
    cfg.secret = queue_secret(2);
    let mut ours = Memif::connect_queues(&cfg, 2).unwrap();
    cross_queues(&mut ours, &mut dpdk);
    // A client of ours with one queue pair is refused by it (the secret).
    drop(ours);
    let e = Memif::connect(&Config::new(&p, 8)).unwrap_err().to_string();
    assert!(e.contains("Secret required"), "{e}");
}
