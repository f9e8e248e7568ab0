//! A hostile memif client against our server: a hand-made client that
//! speaks the control protocol itself and then writes what it likes into
//! the shared memory. The server refuses regions it could fault on and
//! rings outside their region, drops frames whose descriptors point
//! outside the shared memory (counted), and breaks the link when the ring
//! index jumps past the ring (on a link of two queue pairs, for both); it
//! refuses a ring beyond its queue pairs and a pair without both rings;
//! it never reads outside what was shared.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::io::{IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use iwarp_frame::FrameDevice;
use iwarp_memif::msg::{Msg, MSG_LEN, RING_S2M, VERSION};
use iwarp_memif::{Config, Listener};
use rustix::fs::{MemfdFlags, SealFlags};
use rustix::net::{
    RecvAncillaryBuffer, RecvFlags, SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

const LOG2: u8 = 4;
const SLOTS: usize = 1 << LOG2;
const RING: usize = 128 + 16 * SLOTS;
const BUF: usize = 2048;
const BUFS_AT: usize = 4096;
const LEN: usize = BUFS_AT + 2 * SLOTS * BUF;

fn sock(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("iwarp-memif-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d.join(name)
}

struct Evil {
    fd: OwnedFd,
}

impl Evil {
    fn connect(p: &std::path::Path) -> Evil {
        let fd = rustix::net::socket(
            rustix::net::AddressFamily::UNIX,
            rustix::net::SocketType::SEQPACKET,
            None,
        )
        .unwrap();
        let addr = rustix::net::SocketAddrUnix::new(p).unwrap();
        rustix::net::connect(&fd, &addr).unwrap();
        Evil { fd }
    }

    fn send(&self, m: &Msg, fd: Option<std::os::fd::BorrowedFd<'_>>) {
        let b = m.encode();
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = SendAncillaryBuffer::new(&mut space);
        let fds;
        if let Some(fd) = fd {
            fds = [fd];
            assert!(anc.push(SendAncillaryMessage::ScmRights(&fds)));
        }
        rustix::net::sendmsg(&self.fd, &[IoSlice::new(&b)], &mut anc, SendFlags::empty()).unwrap();
    }

    fn recv(&self) -> Msg {
        let mut b = [0u8; MSG_LEN];
        let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut anc = RecvAncillaryBuffer::new(&mut space);
        let r = rustix::net::recvmsg(
            &self.fd,
            &mut [IoSliceMut::new(&mut b)],
            &mut anc,
            RecvFlags::empty(),
        )
        .unwrap();
        Msg::decode(&b[..r.bytes]).unwrap()
    }

    /// ADD_REGION (`fd`, LEN octets), the S2M ring at 0 and the M2S ring
    /// after it, each ACKed, then CONNECT (its answer left to the caller).
    fn announce(&self, fd: &OwnedFd) {
        self.region(fd, LEN);
        assert_eq!(self.recv(), Msg::Ack);
        for (flags, off) in [(RING_S2M, 0), (0, RING)] {
            let ev = eventfd();
            self.send(
                &Msg::AddRing {
                    flags,
                    index: 0,
                    region: 0,
                    offset: off as u32,
                    log2_ring_size: LOG2,
                    private_hdr_size: 0,
                },
                Some(ev.as_fd()),
            );
            assert_eq!(self.recv(), Msg::Ack);
        }
        self.send(
            &Msg::Connect {
                if_name: b"evil".to_vec(),
            },
            None,
        );
    }

    /// ADD_REGION 0 of `size` octets with `fd` (its answer left to the
    /// caller).
    fn region(&self, fd: &OwnedFd, size: usize) {
        self.send(
            &Msg::AddRegion {
                index: 0,
                size: size as u64,
            },
            Some(fd.as_fd()),
        );
    }

    /// HELLO in, INIT out, ACK in.
    fn init(&self, id: u32) {
        assert!(matches!(self.recv(), Msg::Hello { .. }));
        self.send(
            &Msg::Init {
                version: VERSION,
                id,
                mode: 0,
                secret: vec![],
                name: b"evil".to_vec(),
            },
            None,
        );
        assert_eq!(self.recv(), Msg::Ack);
    }
}

fn memfd(len: usize, seal: bool) -> OwnedFd {
    let fd =
        rustix::fs::memfd_create("evil", MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING).unwrap();
    rustix::fs::ftruncate(&fd, len as u64).unwrap();
    if seal {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK).unwrap();
    }
    fd
}

fn eventfd() -> OwnedFd {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
}

/// The peer's shared memory, as the hostile client writes it.
struct Shared {
    p: *mut u8,
}

impl Shared {
    fn map(fd: &OwnedFd) -> Shared {
        // SAFETY: a new shared mapping of the test's own memfd of LEN
        // octets (sealed against shrinking), used only through `put` and
        // never unmapped while the test runs.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                LEN,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
                fd.as_fd(),
                0,
            )
            .unwrap()
        };
        Shared { p: p.cast() }
    }

    fn put(&self, at: usize, bytes: &[u8]) {
        assert!(at + bytes.len() <= LEN);
        for (i, b) in bytes.iter().enumerate() {
            // SAFETY: inside the LEN-octet mapping (asserted above).
            unsafe { std::ptr::write_volatile(self.p.add(at + i), *b) };
        }
    }

    fn ring_init(&self, at: usize) {
        self.put(at, &0x03E3_1F20u32.to_le_bytes());
    }

    fn desc(&self, ring: usize, slot: usize, flags: u16, region: u16, len: u32, off: u32) {
        let mut d = [0u8; 16];
        d[0..2].copy_from_slice(&flags.to_le_bytes());
        d[2..4].copy_from_slice(&region.to_le_bytes());
        d[4..8].copy_from_slice(&len.to_le_bytes());
        d[8..12].copy_from_slice(&off.to_le_bytes());
        self.put(ring + 128 + 16 * slot, &d);
    }

    fn head(&self, ring: usize, v: u16) {
        std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
        self.put(ring + 6, &v.to_le_bytes());
    }
}

/// Accept while `evil` runs against the server on a thread; the server's
/// result and that thread (joined by the caller).
fn against_in(
    name: &str,
    evil: impl FnOnce(&PathBuf) + Send + 'static,
) -> (
    std::io::Result<iwarp_memif::Memif>,
    std::thread::JoinHandle<()>,
) {
    let p = sock(name);
    let mut cfg = Config::new(&p, 1);
    cfg.timeout = Duration::from_secs(5);
    let l = Listener::bind(cfg).unwrap();
    let p2 = p.clone();
    let t = std::thread::spawn(move || evil(&p2));
    (l.accept(), t)
}

/// [`against_in`], the thread joined.
fn against(
    name: &str,
    evil: impl FnOnce(&PathBuf) + Send + 'static,
) -> std::io::Result<iwarp_memif::Memif> {
    let (r, t) = against_in(name, evil);
    t.join().unwrap();
    r
}

#[test]
fn a_region_the_client_could_shrink_or_shorter_than_announced_is_refused() {
    let e = against("unsealed", |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, false);
        c.send(&Msg::AddRegion { index: 0, size: LEN as u64 }, Some(fd.as_fd()));
        let m = c.recv();
        assert!(matches!(&m, Msg::Disconnect { reason, .. } if String::from_utf8_lossy(reason).contains("F_SEAL_SHRINK")), "{m:?}");
    })
    .unwrap_err();
    assert!(e.to_string().contains("F_SEAL_SHRINK"), "{e}");
    let e = against("short", |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        c.region(&fd, 2 * LEN);
        assert!(matches!(c.recv(), Msg::Disconnect { .. }));
    })
    .unwrap_err();
    assert!(e.to_string().contains("shorter"), "{e}");
}

#[test]
fn a_ring_outside_its_region_or_without_its_cookie_is_refused() {
    let e = against("ring-out", |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        c.region(&fd, LEN);
        assert_eq!(c.recv(), Msg::Ack);
        let ev = eventfd();
        c.send(
            &Msg::AddRing {
                flags: RING_S2M,
                index: 0,
                region: 0,
                offset: (LEN - 64) as u32,
                log2_ring_size: LOG2,
                private_hdr_size: 0,
            },
            Some(ev.as_fd()),
        );
        assert!(matches!(c.recv(), Msg::Disconnect { .. }));
    })
    .unwrap_err();
    assert!(e.to_string().contains("outside its region"), "{e}");
    let e = against("cookie", |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        c.announce(&fd);
        assert!(matches!(c.recv(), Msg::Disconnect { .. }));
    })
    .unwrap_err();
    assert!(e.to_string().contains("cookie"), "{e}");
}

#[test]
fn descriptors_outside_the_region_are_dropped_and_a_ring_index_past_the_ring_breaks_the_link() {
    let (tx, rx) = std::sync::mpsc::channel::<u16>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let (r, evil) = against_in("descs", move |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        let m = Shared::map(&fd);
        m.ring_init(0);
        m.ring_init(RING);
        c.announce(&fd);
        assert!(matches!(c.recv(), Msg::Connected { .. }));
        // Frames: outside the region, in a region that does not exist,
        // overflowing u32, a chain whose second part is outside, then one
        // good frame.
        let good = BUFS_AT as u32;
        m.put(BUFS_AT, &[0xab; 60]);
        m.desc(0, 0, 0, 0, 64, (LEN - 10) as u32);
        m.desc(0, 1, 0, 3, 64, 0);
        m.desc(0, 2, 0, 0, u32::MAX, u32::MAX);
        m.desc(0, 3, 1, 0, 64, good);
        m.desc(0, 4, 0, 0, 64, LEN as u32);
        m.desc(0, 5, 0, 0, 60, good);
        m.head(0, 6);
        tx.send(6).unwrap();
        // Then the head far past the ring: 6 + 1000 slots "filled" of 16.
        done_rx.recv().unwrap();
        m.head(0, 1006);
        tx.send(1006).unwrap();
        done_rx.recv().unwrap();
        drop(c);
    });
    let mut s = r.unwrap();
    assert_eq!(rx.recv().unwrap(), 6);
    let mut got = Vec::new();
    let end = std::time::Instant::now() + Duration::from_secs(5);
    while got.is_empty() && std::time::Instant::now() < end {
        s.rx_burst(16, &mut |f| got.push(f.to_vec()));
    }
    assert_eq!(got, vec![vec![0xab; 60]], "only the good frame");
    assert_eq!(s.stats().rx_bad_desc, 4, "{:?}", s.stats());
    assert!(s.broken().is_none());
    done_tx.send(()).unwrap();
    assert_eq!(rx.recv().unwrap(), 1006);
    assert_eq!(
        s.rx_burst(16, &mut |_| panic!("no frame from a corrupt ring")),
        0
    );
    let why = s.broken().unwrap_or_default().to_owned();
    assert!(why.contains("past ours"), "{why}");
    assert!(!s.tx(&[0; 64]), "a broken link sends nothing");
    done_tx.send(()).unwrap();
    evil.join().unwrap();
}

/// A server of `queues` queue pairs accepting while `evil` runs; its
/// result, the thread joined.
fn against_queues(
    name: &str,
    queues: u16,
    evil: impl FnOnce(&PathBuf) + Send + 'static,
) -> std::io::Result<Vec<iwarp_memif::Memif>> {
    let p = sock(name);
    let mut cfg = Config::new(&p, 1);
    cfg.timeout = Duration::from_secs(5);
    let l = Listener::bind_queues(cfg, queues).unwrap();
    let p2 = p.clone();
    let t = std::thread::spawn(move || evil(&p2));
    let r = l.accept_queues();
    t.join().unwrap();
    r
}

/// ADD_RING `index` (`flags`: S2M or not) at `offset` of region 0.
fn add_ring(c: &Evil, flags: u16, index: u16, offset: usize) -> Msg {
    let ev = eventfd();
    c.send(
        &Msg::AddRing {
            flags,
            index,
            region: 0,
            offset: offset as u32,
            log2_ring_size: LOG2,
            private_hdr_size: 0,
        },
        Some(ev.as_fd()),
    );
    c.recv()
}

#[test]
fn a_ring_beyond_the_queue_pairs_or_a_pair_without_both_rings_is_refused() {
    // Ring 1 of a one-pair server.
    let e = against_queues("ring-index", 1, |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        c.region(&fd, LEN);
        assert_eq!(c.recv(), Msg::Ack);
        let m = add_ring(&c, RING_S2M, 1, 0);
        assert!(matches!(m, Msg::Disconnect { .. }), "{m:?}");
    })
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("ring 1: the server's link has 1 queue pair"),
        "{e}"
    );
    // A two-pair server, pair 1 with its S2M ring only, then CONNECT.
    let e = against_queues("half-pair", 2, |p| {
        let c = Evil::connect(p);
        c.init(1);
        let fd = memfd(LEN, true);
        c.region(&fd, LEN);
        assert_eq!(c.recv(), Msg::Ack);
        for (flags, index, off) in [(RING_S2M, 0, 0), (0, 0, RING), (RING_S2M, 1, 2 * RING)] {
            assert_eq!(add_ring(&c, flags, index, off), Msg::Ack);
        }
        c.send(
            &Msg::Connect {
                if_name: b"evil".to_vec(),
            },
            None,
        );
        assert!(matches!(c.recv(), Msg::Disconnect { .. }));
    })
    .unwrap_err();
    assert!(
        e.to_string().contains("brought 1 queue pair (both rings)"),
        "{e}"
    );
}

#[test]
fn a_ring_index_past_the_ring_on_one_queue_pair_takes_the_whole_link_down() {
    let p = sock("qcorrupt");
    let mut cfg = Config::new(&p, 1);
    cfg.timeout = Duration::from_secs(5);
    let l = Listener::bind_queues(cfg, 2).unwrap();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let p2 = p.clone();
    let evil = std::thread::spawn(move || {
        let c = Evil::connect(&p2);
        c.init(1);
        let fd = memfd(LEN, true);
        let m = Shared::map(&fd);
        c.region(&fd, LEN);
        assert_eq!(c.recv(), Msg::Ack);
        // Pair 0: S2M at 0, M2S at RING; pair 1: S2M at 2 RING, M2S at 3.
        for (flags, index, at) in [
            (RING_S2M, 0, 0),
            (0, 0, RING),
            (RING_S2M, 1, 2 * RING),
            (0, 1, 3 * RING),
        ] {
            m.ring_init(at);
            assert_eq!(add_ring(&c, flags, index, at), Msg::Ack);
        }
        c.send(
            &Msg::Connect {
                if_name: b"evil".to_vec(),
            },
            None,
        );
        assert!(matches!(c.recv(), Msg::Connected { .. }));
        // Pair 1's S2M head far past its ring of 16 slots.
        m.head(2 * RING, 1000);
        tx.send(()).unwrap();
        // The control socket stays open until the server has looked.
        done_rx.recv().unwrap();
        drop(c);
    });
    let mut q = l.accept_queues().unwrap();
    rx.recv().unwrap();
    assert_eq!(
        q[1].rx_burst(16, &mut |_| panic!("no frame from a corrupt ring")),
        0
    );
    let why = q[1].broken().unwrap_or_default().to_owned();
    assert!(why.contains("past ours"), "{why}");
    // Pair 0's own rings are sound; the link is down for it all the same,
    // for the same reason, at its next look.
    assert!(!q[0].check_link());
    assert_eq!(q[0].broken(), Some(why.as_str()));
    assert!(!q[0].tx(&[0; 64]), "a broken link sends nothing");
    done_tx.send(()).unwrap();
    evil.join().unwrap();
}
