//! A memif link of our own: the shared-memory packet interface of VPP,
//! libmemif and DPDK's `net_memif`, spoken natively, as a
//! [`FrameDevice`] that lends the ring buffers themselves.
//!
//! DPDK's `net_memif` copies every frame twice on its way through: the
//! sender's mbuf into a ring buffer, the ring buffer into the receiver's
//! mbuf; and our stack copies into and out of those mbufs as well. Here
//! the stack builds a frame straight in the ring buffer
//! ([`FrameDevice::tx_build`]) and parses and places it from there
//! ([`FrameDevice::rx_burst`]): a payload is copied once, from registered
//! memory to registered memory, as on any zero-copy NIC.
//!
//! **Protocol** (memif 2.0, as DPDK 22.11's `drivers/net/memif` and
//! libmemif speak it): the server listens on a `SOCK_SEQPACKET` Unix
//! socket and greets each client with HELLO; the client sends INIT (the
//! interface id and secret), ADD_REGION (a memfd it created, holding
//! rings and buffers), ADD_RING for its client-to-server (S2M) and
//! server-to-client (M2S) rings, each with an eventfd, then CONNECT; the
//! server ACKs each and answers CONNECTED. The client owns the memory. On
//! the S2M ring the client produces at `head` and the server consumes
//! up to it, returning slots at `tail`; on the M2S ring the client lends
//! empty buffers by moving `head`, and the server fills them and moves
//! `tail`. A receiver that polls sets `MEMIF_RING_FLAG_MASK_INT` on its
//! ring; while it is clear a sender signals the ring's eventfd.
//!
//! **Queue pairs.** A link has one queue pair, or several
//! ([`Memif::connect_queues`], [`Listener::bind_queues`],
//! [`MemifServer::bind_queues`]): ring `i` of each direction is queue pair
//! `i`, a device of its own for a poll loop of its own, with its own
//! mapping of the shared region (so each moves to its thread alone). The
//! two ends need the same count: a server refuses a client that brings
//! another, and a client one that takes fewer, naming both counts. The
//! queue pairs share the control socket: a peer that leaves, or a ring a
//! peer corrupts, takes the whole link down, each queue pair at its next
//! look, and DISCONNECT goes out when the last of one end's queue pairs
//! drops. Interoperates with DPDK's `net_memif` in either role
//! (`tests/dpdk.rs`).
//!
//! **Ends.** [`Memif::connect`] is a client (it retries while no server
//! listens); [`MemifServer::bind`] a server that is a device at once and
//! accepts its client on a thread of its own (the next one after a client
//! leaves); [`Listener::accept`] takes one client, blocking. A busy end
//! looks at the control socket every 65,536 empty polls, so a peer that
//! left is noticed.
//!
//! **Per frame.** The sender reads the consumer's index once per 32
//! frames (its cache line is the receiver's), a client hands its transmit
//! slots the buffers freed last (few buffers in use while few frames are
//! in flight), and both ends map the regions populated, so no frame pays a
//! page fault on its buffer's first use (docs/backends.md, "Our own
//! memif"). `tests/hostile.rs` is a hand-made client that writes what it
//! likes into the shared memory.
//!
//! **Trust and bounds.** The two ends share memory, so each can corrupt
//! what the other reads there, as with any memif peer; but a peer cannot
//! make us touch memory outside what was shared: a region must be a
//! memfd sealed against shrinking and at least as long as announced, a
//! ring must lie inside its region, and every descriptor's buffer is
//! checked against its region before it is read or written. A bad
//! descriptor drops its frame ([`Stats::rx_bad_desc`]); a ring index that
//! moves by more than the ring holds breaks the link ([`Memif::broken`]).
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod control;
pub mod msg;
mod server;
mod shm;

pub use server::MemifServer;

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp_frame::notify::{wait_readable, EventFd};
use iwarp_frame::{Doorbell, FrameDevice};
use rustix::net::{AddressFamily, SocketAddrUnix, SocketFlags, SocketType};

use control::Control;
use msg::{Msg, RING_S2M, VERSION};
use shm::{buffer, ring_bytes, Desc, Region, Ring, DESC_NEXT, RING_MASK_INT};

/// Which end of the link: the server listens and maps; the client
/// connects and owns the shared memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Listens on the socket (DPDK `role=server`, VPP `master`).
    Server,
    /// Connects to it (DPDK `role=client`, VPP `slave`).
    Client,
}

/// One end's settings.
#[derive(Debug, Clone)]
pub struct Config {
    /// The control socket's path (a file; abstract sockets are not used).
    pub socket: PathBuf,
    /// The interface id both ends must share.
    pub id: u32,
    /// A secret both ends must share (at most 24 octets; empty: none).
    pub secret: Vec<u8>,
    /// Ring slots as log2 (client: asked for, capped at the server's
    /// limit; default 10: 1024 slots each way).
    pub log2_ring_size: u8,
    /// The longest frame sent or taken (Ethernet header on, no FCS);
    /// [`with_mtu`](Self::with_mtu) sets it from an IP MTU. Default 1514.
    pub max_frame: usize,
    /// Client: octets per ring buffer (default: 2048, or the next
    /// multiple of 128 that holds `max_frame`, so a frame takes one
    /// slot). A server takes what its client lends, and chains slots
    /// where a frame is longer.
    pub buffer_size: u32,
    /// Our application's name, sent to the peer.
    pub name: String,
    /// How long connecting (client) or the handshake (server) may take.
    pub timeout: Duration,
}

impl Config {
    /// Socket `socket`, interface `id`, no secret, 1024 slots, MTU 1500.
    pub fn new(socket: impl Into<PathBuf>, id: u32) -> Config {
        Config {
            socket: socket.into(),
            id,
            secret: Vec::new(),
            log2_ring_size: 10,
            max_frame: 1514,
            buffer_size: 2048,
            name: "iwarp-memif".to_owned(),
            timeout: Duration::from_secs(10),
        }
    }

    /// Frames of IP MTU `mtu` (max_frame = mtu + 14), and client buffers
    /// that hold one whole.
    pub fn with_mtu(mut self, mtu: usize) -> Config {
        self.max_frame = mtu + 14;
        self.buffer_size = (self.max_frame.div_ceil(128) * 128).max(2048) as u32;
        self
    }
}

/// Counters of one end.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Frames handed to the stack.
    pub rx_frames: u64,
    /// Frames published to the peer.
    pub tx_frames: u64,
    /// Received frames dropped: a descriptor naming memory outside the
    /// shared regions.
    pub rx_bad_desc: u64,
    /// Received frames dropped: longer than `max_frame`.
    pub rx_too_long: u64,
    /// Received frames that came chained over several slots.
    pub rx_chained: u64,
    /// Sent frames chained over several slots (longer than the client's
    /// buffers).
    pub tx_chained: u64,
    /// Frames refused: the ring was full (or the frame longer than
    /// `max_frame`).
    pub tx_refused: u64,
    /// Eventfd signals sent to a peer that sleeps.
    pub kicks: u64,
}

impl std::ops::AddAssign for Stats {
    /// Counters of two connections, summed (a [`MemifServer`]'s clients).
    fn add_assign(&mut self, o: Stats) {
        let Stats {
            rx_frames,
            tx_frames,
            rx_bad_desc,
            rx_too_long,
            rx_chained,
            tx_chained,
            tx_refused,
            kicks,
        } = o;
        self.rx_frames += rx_frames;
        self.tx_frames += tx_frames;
        self.rx_bad_desc += rx_bad_desc;
        self.rx_too_long += rx_too_long;
        self.rx_chained += rx_chained;
        self.tx_chained += tx_chained;
        self.tx_refused += tx_refused;
        self.kicks += kicks;
    }
}

/// A memif server socket, waiting for clients.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    cfg: Config,
    /// Queue pairs each client must bring.
    queues: u16,
}

impl Listener {
    /// Listen on `cfg.socket`. A stale socket file (nobody accepting) is
    /// replaced; a live one is `AddrInUse`.
    pub fn bind(cfg: Config) -> io::Result<Listener> {
        Self::bind_queues(cfg, 1)
    }

    /// [`bind`](Self::bind) for links of `queues` queue pairs (1 to
    /// [`MAX_QUEUES`]): a client must bring exactly that many (its rings
    /// 0 to `queues` - 1 each way), and is refused otherwise, naming both
    /// counts.
    pub fn bind_queues(cfg: Config, queues: u16) -> io::Result<Listener> {
        check_queues(queues)?;
        let addr = SocketAddrUnix::new(cfg.socket.as_path())?;
        if cfg.socket.exists() {
            let probe = seqpacket()?;
            if rustix::net::connect(&probe, &addr).is_ok() {
                return Err(io::Error::new(
                    io::ErrorKind::AddrInUse,
                    format!("a memif server already listens on {}", cfg.socket.display()),
                ));
            }
            std::fs::remove_file(&cfg.socket)?;
        }
        let fd = seqpacket()?;
        rustix::net::bind(&fd, &addr)?;
        rustix::net::listen(&fd, 4)?;
        Ok(Listener { fd, cfg, queues })
    }

    /// Wait (up to `cfg.timeout`) for a client and connect it. A client
    /// with another id, secret or version, or one that breaks the
    /// protocol, is sent DISCONNECT with the reason and is this call's
    /// error; the listener stays open for the next.
    pub fn accept(&self) -> io::Result<Memif> {
        self.accept_within(self.cfg.timeout)
    }

    /// [`accept`](Self::accept), waiting `wait` for a client to come (its
    /// handshake then has `cfg.timeout`).
    pub fn accept_within(&self, wait: Duration) -> io::Result<Memif> {
        if self.queues != 1 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a listener of several queue pairs: accept_queues",
            ));
        }
        let mut q = self.accept_queues_within(wait)?;
        q.pop().ok_or_else(|| proto("a link of no queue pair"))
    }

    /// [`accept`](Self::accept) on a listener of several queue pairs
    /// ([`bind_queues`](Self::bind_queues)): the link's queue pairs, one
    /// device each, in order.
    pub fn accept_queues(&self) -> io::Result<Vec<Memif>> {
        self.accept_queues_within(self.cfg.timeout)
    }

    /// [`accept_queues`](Self::accept_queues), waiting `wait` for a
    /// client to come.
    pub fn accept_queues_within(&self, wait: Duration) -> io::Result<Vec<Memif>> {
        if !wait_readable(&[self.fd.as_fd()], wait)? {
            return Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("no memif client on {} in time", self.cfg.socket.display()),
            ));
        }
        let deadline = Instant::now() + self.cfg.timeout;
        let c = rustix::net::accept_with(&self.fd, SocketFlags::CLOEXEC)?;
        let control = Control::new(c);
        match serve(&control, &self.cfg, self.queues, deadline) {
            Ok(parts) => Memif::server(control, parts, &self.cfg),
            Err(e) => {
                let _ = control.send(&disconnect(&e.to_string()), None);
                Err(e)
            }
        }
    }

    /// The socket's path.
    pub fn path(&self) -> &Path {
        &self.cfg.socket
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cfg.socket);
    }
}

fn seqpacket() -> io::Result<OwnedFd> {
    Ok(rustix::net::socket_with(
        AddressFamily::UNIX,
        SocketType::SEQPACKET,
        SocketFlags::CLOEXEC,
        None,
    )?)
}

fn eventfd() -> io::Result<OwnedFd> {
    use rustix::event::EventfdFlags;
    Ok(rustix::event::eventfd(
        0,
        EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC,
    )?)
}

fn disconnect(reason: &str) -> Msg {
    Msg::Disconnect {
        code: 1,
        reason: reason.as_bytes().to_vec(),
    }
}

fn refused(what: String) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionRefused, what)
}

fn proto(what: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.into())
}

/// The most queue pairs a link may have (memif numbers rings in 16 bits;
/// a poll loop per queue makes more than this pointless).
pub const MAX_QUEUES: u16 = 128;

/// "1 queue pair", "2 queue pairs".
fn pairs(n: u32) -> String {
    format!("{n} queue pair{}", if n == 1 { "" } else { "s" })
}

fn check_queues(queues: u16) -> io::Result<()> {
    if (1..=MAX_QUEUES).contains(&queues) {
        Ok(())
    } else {
        Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("memif queue pairs: 1 to {MAX_QUEUES}, not {queues}"),
        ))
    }
}

/// Where a client put one ring (checked inside its region when
/// announced, mapped per queue pair once the link connects).
#[derive(Debug, Clone, Copy)]
struct RingAt {
    region: u16,
    offset: usize,
    log2: u8,
}

impl RingAt {
    fn view(&self, regions: &[Region]) -> io::Result<Ring> {
        let r = regions
            .get(usize::from(self.region))
            .ok_or_else(|| proto(format!("a ring in region {}, not announced", self.region)))?;
        Ring::at(r, self.offset, self.log2)
    }
}

/// What the server learnt from its client.
struct Served {
    regions: Vec<Region>,
    /// Per queue pair: the S2M ring and its eventfd, the M2S ring and its.
    rings: Vec<((RingAt, OwnedFd), (RingAt, OwnedFd))>,
    peer: String,
}

/// The server's side of the handshake, for a link of `queues` queue pairs.
fn serve(c: &Control, cfg: &Config, queues: u16, deadline: Instant) -> io::Result<Served> {
    /// Regions a client may announce (DPDK's zero-copy client uses
    /// several).
    const MAX_REGIONS: u16 = 16;
    const MAX_LOG2: u8 = 14;
    c.send(
        &Msg::Hello {
            name: cfg.name.as_bytes().to_vec(),
            min_version: VERSION,
            max_version: VERSION,
            max_region: MAX_REGIONS - 1,
            max_m2s_ring: queues - 1,
            max_s2m_ring: queues - 1,
            max_log2_ring_size: MAX_LOG2,
        },
        None,
    )?;
    let mut regions: Vec<Region> = Vec::new();
    let n = usize::from(queues);
    let mut s2m: Vec<Option<(RingAt, OwnedFd)>> = (0..n).map(|_| None).collect();
    let mut m2s: Vec<Option<(RingAt, OwnedFd)>> = (0..n).map(|_| None).collect();
    let mut peer = String::new();
    let mut init = false;
    loop {
        let (m, fd) = c.recv(deadline)?;
        match m {
            Msg::Init {
                version,
                id,
                mode,
                secret,
                name,
            } => {
                if version != VERSION {
                    return Err(refused(format!(
                        "memif version {}.{}, not 2.0",
                        version >> 8,
                        version & 0xff
                    )));
                }
                if id != cfg.id {
                    return Err(refused(format!("interface id {id}, not {}", cfg.id)));
                }
                if mode != 0 {
                    return Err(refused(format!("mode {mode}, not Ethernet")));
                }
                if secret != cfg.secret {
                    // The count in the reason: two ends of ours whose
                    // counts differ differ in their secret (see
                    // `iwarp::MemifOptions::queue_count`).
                    return Err(refused(format!(
                        "a wrong secret (the server's link has {})",
                        pairs(queues.into())
                    )));
                }
                peer = String::from_utf8_lossy(&name).into_owned();
                init = true;
            }
            _ if !init => return Err(proto("a message before INIT")),
            Msg::AddRegion { index, size } => {
                let fd = fd.ok_or_else(|| proto("ADD_REGION without its memfd"))?;
                if usize::from(index) != regions.len() || index >= MAX_REGIONS {
                    return Err(proto(format!(
                        "region {index} out of order or over the limit"
                    )));
                }
                regions.push(Region::map(fd, size)?);
            }
            Msg::AddRing {
                flags,
                index,
                region,
                offset,
                log2_ring_size,
                private_hdr_size,
            } => {
                let fd = fd.ok_or_else(|| proto("ADD_RING without its eventfd"))?;
                if index >= queues {
                    return Err(refused(format!(
                        "ring {index}: the server's link has {}",
                        pairs(queues.into())
                    )));
                }
                if private_hdr_size != 0 || log2_ring_size > MAX_LOG2 {
                    return Err(proto("a ring with a private header or over 2^14 slots"));
                }
                let at = RingAt {
                    region,
                    offset: offset as usize,
                    log2: log2_ring_size,
                };
                // Checked now (inside an announced region), viewed per
                // queue pair at CONNECT.
                at.view(&regions)?;
                let slot = if flags & RING_S2M != 0 {
                    &mut s2m[usize::from(index)]
                } else {
                    &mut m2s[usize::from(index)]
                };
                if slot.is_some() {
                    return Err(proto("a ring announced twice"));
                }
                *slot = Some((at, fd));
            }
            Msg::Connect { .. } => {
                let whole = s2m
                    .iter()
                    .zip(&m2s)
                    .filter(|(a, b)| a.is_some() && b.is_some())
                    .count();
                if whole != n {
                    return Err(refused(format!(
                        "the client brought {} (both rings), the server's link has {}",
                        pairs(whole as u32),
                        pairs(queues.into())
                    )));
                }
                let mut rings = Vec::with_capacity(n);
                for (a, b) in s2m.into_iter().zip(m2s) {
                    let (Some(a), Some(b)) = (a, b) else {
                        return Err(proto("CONNECT before both rings"));
                    };
                    if a.0.view(&regions)?.cookie() != shm::COOKIE
                        || b.0.view(&regions)?.cookie() != shm::COOKIE
                    {
                        return Err(proto("a ring without memif's cookie"));
                    }
                    rings.push((a, b));
                }
                c.send(
                    &Msg::Connected {
                        if_name: cfg.name.as_bytes().to_vec(),
                    },
                    None,
                )?;
                return Ok(Served {
                    regions,
                    rings,
                    peer,
                });
            }
            Msg::Disconnect { reason, .. } => {
                return Err(refused(format!(
                    "the client disconnected: {}",
                    String::from_utf8_lossy(&reason)
                )))
            }
            m => return Err(proto(format!("unexpected {m:?}"))),
        }
        c.send(&Msg::Ack, None)?;
    }
}

/// One end of a connected memif link: a [`FrameDevice`] over its two
/// rings. The buffers the stack reads and writes are the ring buffers in
/// shared memory. Dropping it sends DISCONNECT.
#[derive(Debug)]
pub struct Memif {
    role: Role,
    /// What the link's queue pairs share: the control socket, and whether
    /// the link is down.
    link: Arc<Shared>,
    /// This queue pair's index on the link.
    queue: u16,
    /// The mapped regions (this queue pair's own mappings); the ring
    /// views and lent buffers point into them (nothing reads a ring once
    /// the device drops).
    regions: Vec<Region>,
    tx: Ring,
    rx: Ring,
    tx_evt: OwnedFd,
    rx_evt: OwnedFd,
    bell: Arc<EventFd>,
    /// Client: buffer octets, and each direction's buffers, handed out
    /// last freed first.
    buf: u32,
    tx_pool: Pool,
    rx_pool: Pool,
    /// Client: the transmit ring's `tail` as last read, and frames queued
    /// since (the buffers of slots the server has returned go back to
    /// the pool at each read).
    tx_seen_tail: u16,
    tx_since_read: u16,
    /// Next slot to fill (free-running), and the last published.
    tx_next: u16,
    /// Slots known free from `tx_next` on, as of the last read of the
    /// consumer's index (read again when this runs out, and by a client
    /// every `TX_READ_EVERY` frames: that index's cache line is the
    /// receiver's).
    tx_free: u16,
    tx_published: u16,
    /// Next slot to read.
    rx_next: u16,
    /// Client: the M2S ring's head as we last stored it.
    rx_head: u16,
    max_frame: usize,
    scratch: Vec<u8>,
    broken: Option<String>,
    peer: String,
    stats: Stats,
    /// Empty receive polls since the control socket was last looked at.
    empty_polls: u32,
}

impl Memif {
    /// Connect to the server on `cfg.socket` as a client, retrying while
    /// no server listens there, up to `cfg.timeout`.
    pub fn connect(cfg: &Config) -> io::Result<Memif> {
        let mut q = Self::connect_queues(cfg, 1)?;
        q.pop().ok_or_else(|| proto("a link of no queue pair"))
    }

    /// [`connect`](Self::connect) with `queues` queue pairs (1 to
    /// [`MAX_QUEUES`]): one region holds every ring and buffer, and each
    /// queue pair is a device of its own (its own mapping of the region,
    /// so each can move to a thread of its own), in order. The server must
    /// take that many ([`Listener::bind_queues`]); one that takes fewer is
    /// refused here, naming both counts.
    pub fn connect_queues(cfg: &Config, queues: u16) -> io::Result<Vec<Memif>> {
        check_queues(queues)?;
        if cfg.secret.len() > msg::SECRET_LEN {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a memif secret is at most 24 octets",
            ));
        }
        if (cfg.buffer_size as usize) < cfg.max_frame.min(2048)
            || !cfg.buffer_size.is_multiple_of(64)
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memif buffers of at least 2048 octets (or max_frame), a multiple of 64",
            ));
        }
        let deadline = Instant::now() + cfg.timeout;
        loop {
            match Self::try_connect(cfg, queues, deadline) {
                // DPDK's server refuses an id it has not registered yet
                // (its socket is up before its port): try again. (The
                // reason as `client` words a refusal, our count after it.)
                Err(e)
                    if e.to_string().contains("the server refused: ID not found;")
                        && Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
                r => return r,
            }
        }
    }

    fn try_connect(cfg: &Config, queues: u16, deadline: Instant) -> io::Result<Vec<Memif>> {
        let addr = SocketAddrUnix::new(cfg.socket.as_path())?;
        let fd = loop {
            let fd = seqpacket()?;
            match rustix::net::connect(&fd, &addr) {
                Ok(()) => break fd,
                Err(e)
                    if Instant::now() < deadline
                        && (e == rustix::io::Errno::NOENT
                            || e == rustix::io::Errno::CONNREFUSED) =>
                {
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err(e) => {
                    return Err(io::Error::new(
                        io::Error::from(e).kind(),
                        format!("no memif server on {}: {e}", cfg.socket.display()),
                    ))
                }
            }
        };
        Self::client(Control::new(fd), cfg, queues, deadline)
    }

    fn client(c: Control, cfg: &Config, queues: u16, deadline: Instant) -> io::Result<Vec<Memif>> {
        let log2 = match c.recv(deadline)? {
            (
                Msg::Hello {
                    min_version,
                    max_version,
                    max_log2_ring_size,
                    max_m2s_ring,
                    max_s2m_ring,
                    ..
                },
                _,
            ) => {
                let e = if !(min_version..=max_version).contains(&VERSION) {
                    Some(refused(format!(
                        "the server speaks memif {min_version:#x}..{max_version:#x}, not 2.0"
                    )))
                } else if u32::from(max_m2s_ring.min(max_s2m_ring)) + 1 < u32::from(queues) {
                    Some(refused(format!(
                        "the server takes {}, this client has {}",
                        pairs(u32::from(max_m2s_ring.min(max_s2m_ring)) + 1),
                        pairs(queues.into())
                    )))
                } else {
                    None
                };
                if let Some(e) = e {
                    let _ = c.send(&disconnect(&e.to_string()), None);
                    return Err(e);
                }
                cfg.log2_ring_size.min(max_log2_ring_size).max(1)
            }
            (Msg::Disconnect { reason, .. }, _) => {
                return Err(refused(format!(
                    "the server disconnected: {}",
                    String::from_utf8_lossy(&reason)
                )))
            }
            (m, _) => return Err(proto(format!("{m:?} instead of HELLO"))),
        };
        let n = usize::from(queues);
        let slots = 1usize << log2;
        let rb = ring_bytes(log2);
        let buf = cfg.buffer_size as usize;
        // Rings first (S2M 0..n, then M2S 0..n), then each queue pair's
        // transmit and receive buffers.
        let bufs_off = (2 * n * rb).next_multiple_of(4096);
        let tx_buf_off = |q: usize| bufs_off + 2 * q * slots * buf;
        let rx_buf_off = |q: usize| bufs_off + (2 * q + 1) * slots * buf;
        let len = bufs_off + 2 * n * slots * buf;
        if u32::try_from(len).is_err() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "memif rings and buffers over 4 GiB",
            ));
        }
        let region = Region::create("iwarp-memif", len)?;
        let mut evts = Vec::with_capacity(n);
        for q in 0..n {
            let s2m = Ring::at(&region, q * rb, log2)?;
            let m2s = Ring::at(&region, (n + q) * rb, log2)?;
            // The receiver of each ring owns its flags: the server sets its
            // own; we poll ours.
            s2m.init(0);
            m2s.init(RING_MASK_INT);
            for i in 0..slots as u16 {
                s2m.set_desc(
                    i,
                    Desc {
                        flags: 0,
                        region: 0,
                        length: buf as u32,
                        offset: (tx_buf_off(q) + usize::from(i) * buf) as u32,
                    },
                );
                m2s.set_desc(
                    i,
                    Desc {
                        flags: 0,
                        region: 0,
                        length: buf as u32,
                        offset: (rx_buf_off(q) + usize::from(i) * buf) as u32,
                    },
                );
            }
            evts.push((eventfd()?, eventfd()?));
        }
        let mut steps: Vec<(Msg, Option<std::os::fd::BorrowedFd<'_>>)> = vec![
            (
                Msg::Init {
                    version: VERSION,
                    id: cfg.id,
                    mode: 0,
                    secret: cfg.secret.clone(),
                    name: cfg.name.as_bytes().to_vec(),
                },
                None,
            ),
            (
                Msg::AddRegion {
                    index: 0,
                    size: len as u64,
                },
                Some(region.fd().as_fd()),
            ),
        ];
        for (q, (s2m_evt, m2s_evt)) in evts.iter().enumerate() {
            // q < n <= MAX_QUEUES, and every offset < len < 4 GiB.
            let index = q as u16;
            steps.push((
                Msg::AddRing {
                    flags: RING_S2M,
                    index,
                    region: 0,
                    offset: (q * rb) as u32,
                    log2_ring_size: log2,
                    private_hdr_size: 0,
                },
                Some(s2m_evt.as_fd()),
            ));
            steps.push((
                Msg::AddRing {
                    flags: 0,
                    index,
                    region: 0,
                    offset: ((n + q) * rb) as u32,
                    log2_ring_size: log2,
                    private_hdr_size: 0,
                },
                Some(m2s_evt.as_fd()),
            ));
        }
        for (m, fd) in &steps {
            c.send(m, *fd)?;
            match c.recv(deadline)?.0 {
                Msg::Ack => {}
                Msg::Disconnect { reason, .. } => {
                    return Err(refused(format!(
                        "the server refused: {}; this client has {}",
                        String::from_utf8_lossy(&reason),
                        pairs(queues.into())
                    )))
                }
                m => return Err(proto(format!("{m:?} instead of ACK"))),
            }
        }
        drop(steps);
        c.send(
            &Msg::Connect {
                if_name: cfg.name.as_bytes().to_vec(),
            },
            None,
        )?;
        let peer = match c.recv(deadline)?.0 {
            Msg::Connected { if_name } => String::from_utf8_lossy(&if_name).into_owned(),
            Msg::Disconnect { reason, .. } => {
                return Err(refused(format!(
                    "the server refused: {}; this client has {}",
                    String::from_utf8_lossy(&reason),
                    pairs(queues.into())
                )))
            }
            m => return Err(proto(format!("{m:?} instead of CONNECTED"))),
        };
        let link = Shared::new(c);
        let mut out = Vec::with_capacity(n);
        let mut first = Some(region);
        for (q, (s2m_evt, m2s_evt)) in evts.into_iter().enumerate() {
            // Queue pair 0 keeps the region made; each other maps it anew.
            let region = match first.take() {
                Some(r) => r,
                None => out
                    .first()
                    .map(|m: &Memif| m.regions[0].remap())
                    .ok_or_else(|| proto("no first queue pair"))??,
            };
            let s2m = Ring::at(&region, q * rb, log2)?;
            let m2s = Ring::at(&region, (n + q) * rb, log2)?;
            let mut m = Memif {
                role: Role::Client,
                link: link.clone(),
                queue: q as u16,
                regions: vec![region],
                tx: s2m,
                rx: m2s,
                tx_evt: s2m_evt,
                rx_evt: m2s_evt,
                bell: Arc::new(EventFd::new()?),
                buf: buf as u32,
                tx_pool: Pool::new(tx_buf_off(q), slots),
                rx_pool: Pool::new(rx_buf_off(q), slots),
                tx_seen_tail: 0,
                tx_since_read: 0,
                tx_next: 0,
                tx_free: 0,
                tx_published: 0,
                rx_next: 0,
                rx_head: 0,
                max_frame: cfg.max_frame,
                scratch: Vec::new(),
                broken: None,
                peer: peer.clone(),
                stats: Stats::default(),
                empty_polls: 0,
            };
            // Lend the server its first M2S buffers.
            m.refill();
            out.push(m);
        }
        Ok(out)
    }

    fn server(control: Control, s: Served, cfg: &Config) -> io::Result<Vec<Memif>> {
        let link = Shared::new(control);
        let mut out = Vec::with_capacity(s.rings.len());
        let mut first = Some(s.regions);
        for (q, ((s2m_at, s2m_evt), (m2s_at, m2s_evt))) in s.rings.into_iter().enumerate() {
            // Queue pair 0 keeps the regions mapped; each other maps them anew.
            let regions = match first.take() {
                Some(r) => r,
                None => match out.first() {
                    Some(m0) => {
                        let m0: &Memif = m0;
                        m0.regions
                            .iter()
                            .map(Region::remap)
                            .collect::<io::Result<Vec<_>>>()?
                    }
                    None => return Err(proto("no first queue pair")),
                },
            };
            let s2m = s2m_at.view(&regions)?;
            let m2s = m2s_at.view(&regions)?;
            // We poll our receive ring.
            s2m.flags().fetch_or(RING_MASK_INT, Ordering::Relaxed);
            out.push(Memif {
                role: Role::Server,
                link: link.clone(),
                queue: q as u16,
                rx_next: s2m.tail().load(Ordering::Acquire),
                tx_next: m2s.tail().load(Ordering::Acquire),
                tx_free: 0,
                tx_published: m2s.tail().load(Ordering::Acquire),
                regions,
                tx: m2s,
                rx: s2m,
                tx_evt: m2s_evt,
                rx_evt: s2m_evt,
                bell: Arc::new(EventFd::new()?),
                buf: 0,
                tx_pool: Pool::default(),
                rx_pool: Pool::default(),
                tx_seen_tail: 0,
                tx_since_read: 0,
                rx_head: 0,
                max_frame: cfg.max_frame,
                scratch: Vec::new(),
                broken: None,
                peer: s.peer.clone(),
                stats: Stats::default(),
                empty_polls: 0,
            });
        }
        Ok(out)
    }

    /// Which end this is.
    pub fn role(&self) -> Role {
        self.role
    }

    /// The peer's name (its INIT's or CONNECTED's).
    pub fn peer_name(&self) -> &str {
        &self.peer
    }

    /// The counters.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// Slots in each ring.
    pub fn ring_size(&self) -> u16 {
        self.rx.size()
    }

    /// Why the link is broken (a corrupt ring, a peer that left), if it
    /// is: no frame moves after that.
    pub fn broken(&self) -> Option<&str> {
        self.broken.as_deref()
    }

    /// Look at the control socket (without blocking): a peer that sent
    /// DISCONNECT or closed it breaks the link. Whether it is up.
    pub fn check_link(&mut self) -> bool {
        if self.broken.is_none() {
            if let Some(why) = self.link.down() {
                self.broken = Some(why);
                return false;
            }
            let got = self
                .link
                .control
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .try_recv();
            match got {
                Ok(None) => {}
                Ok(Some((Msg::Disconnect { reason, .. }, _))) => self.fail(format!(
                    "the peer disconnected: {}",
                    String::from_utf8_lossy(&reason)
                )),
                Ok(Some((m, _))) => self.fail(format!("unexpected {m:?} once connected")),
                Err(e) => self.fail(e.to_string()),
            }
        }
        self.broken.is_none()
    }

    /// The link is broken (`why`): this queue pair stops, and so does
    /// every other of the link at its next look ([`check_link`](Self::check_link)).
    fn fail(&mut self, why: String) {
        self.link.set_down(&why);
        self.broken = Some(why);
    }

    /// This queue pair's index on its link (0 for a link of one).
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// Client: lend the server every M2S slot up to a ring ahead of the
    /// next to read (as DPDK's client does: a DPDK server drops what finds
    /// no lent slot), each with the buffer freed last.
    fn refill(&mut self) {
        let mut h = self.rx_head;
        while h.wrapping_sub(self.rx_next) < self.rx.size() {
            let Some(b) = self.rx_pool.take(self.rx.slot(h)) else {
                break;
            };
            self.rx.set_desc(
                h,
                Desc {
                    flags: 0,
                    region: 0,
                    length: self.buf,
                    offset: self.rx_pool.offset(b, self.buf),
                },
            );
            h = h.wrapping_add(1);
        }
        if h != self.rx_head {
            self.rx_head = h;
            self.rx.head().store(h, Ordering::Release);
        }
    }

    /// Free slots on the transmit ring from `tx_next` on: the cached count
    /// while it lasts (a client reads again every `TX_READ_EVERY` frames,
    /// to take back the buffers the server has returned while they are
    /// still warm), else the consumer's index read again.
    fn tx_free(&mut self) -> u16 {
        if self.tx_free == 0 || self.tx_since_read >= TX_READ_EVERY {
            self.tx_free = self.tx_free_now();
        }
        self.tx_free
    }

    /// Free slots on the transmit ring, counting those filled but not yet
    /// published, from the consumer's index. A client takes back the
    /// buffers of the slots returned since its last read.
    fn tx_free_now(&mut self) -> u16 {
        match self.role {
            Role::Client => {
                self.tx_since_read = 0;
                let tail = self.tx.tail().load(Ordering::Acquire);
                let back = tail.wrapping_sub(self.tx_seen_tail);
                if back > self.tx_published.wrapping_sub(self.tx_seen_tail) {
                    self.fail(format!(
                        "the server returned {back} transmit slots, more than were sent"
                    ));
                    return 0;
                }
                for k in 0..back {
                    let s = self.tx.slot(self.tx_seen_tail.wrapping_add(k));
                    self.tx_pool.give_back(s);
                }
                self.tx_seen_tail = tail;
                let used = self.tx_next.wrapping_sub(tail);
                self.tx.size().saturating_sub(used)
            }
            Role::Server => {
                let head = self.tx.head().load(Ordering::Acquire);
                let free = head.wrapping_sub(self.tx_next);
                if free > self.tx.size() {
                    0
                } else {
                    free
                }
            }
        }
    }

    /// The buffer of transmit slot `i`: where, and its room. A client
    /// gives the slot the buffer freed last (`tx_unslot` takes it back if
    /// the frame is cancelled).
    fn tx_slot(&mut self, i: u16) -> Option<(std::ptr::NonNull<u8>, usize)> {
        match self.role {
            Role::Client => {
                let b = self.tx_pool.take(self.tx.slot(i))?;
                let off = self.tx_pool.offset(b, self.buf) as usize;
                Some((
                    self.regions[0].range(off, self.buf as usize)?,
                    self.buf as usize,
                ))
            }
            Role::Server => {
                let d = self.tx.desc(i);
                match buffer(&self.regions, d.region, d.offset, d.length) {
                    Some(p) => Some((p, d.length as usize)),
                    None => {
                        self.fail("the client lent a buffer outside its regions".to_owned());
                        None
                    }
                }
            }
        }
    }

    /// A cancelled frame's slot `i` gives its buffer back (client).
    fn tx_unslot(&mut self, i: u16) {
        if self.role == Role::Client {
            self.tx_pool.give_back(self.tx.slot(i));
        }
    }

    /// Mark slot `i` as holding `len` octets (`more`: the frame goes on in
    /// the next slot).
    fn tx_fill(&mut self, i: u16, len: usize, more: bool) {
        let flags = if more { DESC_NEXT } else { 0 };
        match self.role {
            Role::Client => self.tx.set_desc(
                i,
                Desc {
                    flags,
                    region: 0,
                    length: len as u32,
                    offset: self
                        .tx_pool
                        .offset(self.tx_pool.of_slot[self.tx.slot(i)], self.buf),
                },
            ),
            Role::Server => self.tx.set_len(i, len as u32, flags),
        }
    }

    /// Queue `len` octets from `self.scratch` over as many slots as they
    /// need.
    fn tx_scatter(&mut self, len: usize) -> bool {
        // A chained frame (rare): the consumer's index read afresh.
        self.tx_free = self.tx_free_now();
        let free = self.tx_free;
        if self.role == Role::Client && len.div_ceil(self.buf as usize) > usize::from(free) {
            return false;
        }
        let start = self.tx_next;
        let mut i = start;
        let mut done = 0;
        let mut used = 0u16;
        while done < len {
            let slot = if used == free { None } else { self.tx_slot(i) };
            let Some((p, room)) = slot.filter(|&(_, room)| room > 0) else {
                if slot.is_some() {
                    self.fail("the client lent an empty buffer".to_owned());
                }
                // Nothing queued: the slots taken so far give their
                // buffers back.
                let mut k = start;
                while k != i {
                    self.tx_unslot(k);
                    k = k.wrapping_add(1);
                }
                if slot.is_some() {
                    self.tx_unslot(i);
                }
                return false;
            };
            let n = room.min(len - done);
            // SAFETY: p..p+room lies in a mapped region (checked by
            // tx_slot), n <= room; the slot is ours (between the consumer's
            // index and ours); scratch holds len octets.
            unsafe {
                std::ptr::copy_nonoverlapping(self.scratch.as_ptr().add(done), p.as_ptr(), n)
            };
            done += n;
            self.tx_fill(i, n, done < len);
            i = i.wrapping_add(1);
            used += 1;
        }
        self.tx_next = i;
        self.tx_free -= used;
        self.tx_since_read = self.tx_since_read.saturating_add(used);
        self.stats.tx_chained += u64::from(used > 1);
        true
    }

    fn rx_avail(&mut self) -> u16 {
        let prod = match self.role {
            Role::Client => self.rx.tail().load(Ordering::Acquire),
            Role::Server => self.rx.head().load(Ordering::Acquire),
        };
        let n = prod.wrapping_sub(self.rx_next);
        if n > self.rx.size() {
            self.fail(format!(
                "the peer moved its receive ring's index {} slots past ours (ring of {})",
                n,
                self.rx.size()
            ));
            return 0;
        }
        n
    }
}

/// Empty receive polls between two looks at the control socket.
const CHECK_EVERY: u32 = 1 << 16;

/// A client reads its transmit ring's `tail` at least every this many
/// frames, to take back the buffers the server returned.
const TX_READ_EVERY: u16 = 32;

/// A client's buffers of one direction, handed out last freed first (as
/// a mempool cache: the buffers in use stay few and warm in the cache and
/// the TLB).
#[derive(Debug, Default)]
struct Pool {
    /// Where buffer 0 starts in region 0.
    off: usize,
    /// The buffer each slot holds.
    of_slot: Vec<u16>,
    /// Free buffers, the one freed last at the end.
    free: Vec<u16>,
}

impl Pool {
    fn new(off: usize, n: usize) -> Pool {
        Pool {
            off,
            of_slot: vec![0; n],
            // Buffer 0 on top.
            free: (0..n as u16).rev().collect(),
        }
    }

    /// Give slot `slot` the buffer freed last.
    fn take(&mut self, slot: usize) -> Option<u16> {
        let b = self.free.pop()?;
        self.of_slot[slot] = b;
        Some(b)
    }

    /// Slot `slot`'s buffer is free again.
    fn give_back(&mut self, slot: usize) {
        self.free.push(self.of_slot[slot]);
    }

    /// Buffer `b`'s offset in region 0.
    fn offset(&self, b: u16, buf: u32) -> u32 {
        (self.off + usize::from(b) * buf as usize) as u32
    }
}

impl FrameDevice for Memif {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        if self.broken.is_some() {
            return 0;
        }
        let avail = self.rx_avail();
        if avail == 0 {
            // A busy loop never sleeps in `wait`: look at the control
            // socket every so many empty polls (a few milliseconds), so
            // that a peer that left is noticed.
            self.empty_polls += 1;
            if self.empty_polls >= CHECK_EVERY {
                self.empty_polls = 0;
                self.check_link();
            }
            return 0;
        }
        let start = self.rx_next;
        let end = self.rx_next.wrapping_add(avail);
        let mut i = self.rx_next;
        let mut n = 0;
        while n < max && i != end {
            let d = self.rx.desc(i);
            if d.flags & DESC_NEXT == 0 {
                i = i.wrapping_add(1);
                match buffer(&self.regions, d.region, d.offset, d.length) {
                    Some(_) if d.length as usize > self.max_frame => self.stats.rx_too_long += 1,
                    Some(p) => {
                        // SAFETY: p..p+length lies in a mapped region
                        // (checked by buffer); the slot is ours until we
                        // move our index past it, after the sink returns.
                        // The peer may write it anyway (memif shares
                        // memory): the stack reads it as untrusted octets.
                        let f =
                            unsafe { std::slice::from_raw_parts(p.as_ptr(), d.length as usize) };
                        sink(f);
                        self.stats.rx_frames += 1;
                        n += 1;
                    }
                    None => self.stats.rx_bad_desc += 1,
                }
                continue;
            }
            // A chained frame: gather it, if all of it has arrived.
            let mut j = i;
            let mut len = 0usize;
            let mut ok = true;
            let complete = loop {
                if j == end {
                    break false;
                }
                let d = self.rx.desc(j);
                j = j.wrapping_add(1);
                len += d.length as usize;
                if buffer(&self.regions, d.region, d.offset, d.length).is_none() {
                    ok = false;
                }
                if d.flags & DESC_NEXT == 0 {
                    break true;
                }
            };
            if !complete {
                break;
            }
            if !ok {
                self.stats.rx_bad_desc += 1;
            } else if len > self.max_frame {
                self.stats.rx_too_long += 1;
            } else {
                self.scratch.clear();
                let mut k = i;
                while k != j {
                    let d = self.rx.desc(k);
                    if let Some(p) = buffer(&self.regions, d.region, d.offset, d.length) {
                        // SAFETY: as above, checked by buffer.
                        let s =
                            unsafe { std::slice::from_raw_parts(p.as_ptr(), d.length as usize) };
                        self.scratch.extend_from_slice(s);
                    }
                    k = k.wrapping_add(1);
                }
                if self.scratch.len() <= self.max_frame {
                    sink(&self.scratch);
                    self.stats.rx_frames += 1;
                    self.stats.rx_chained += 1;
                    n += 1;
                }
            }
            i = j;
        }
        self.rx_next = i;
        match self.role {
            Role::Server => self.rx.tail().store(i, Ordering::Release),
            Role::Client => {
                let mut k = start;
                while k != i {
                    self.rx_pool.give_back(self.rx.slot(k));
                    k = k.wrapping_add(1);
                }
                self.refill();
            }
        }
        n
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.tx_build(frame.len(), &mut |b| {
            b.copy_from_slice(frame);
            true
        })
    }

    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        let len = parts.iter().map(|p| p.len()).sum();
        self.tx_build(len, &mut |b| {
            let mut at = 0;
            for p in parts {
                b[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            true
        })
    }

    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.tx_build_upto(len, &mut |b| build(b).then_some(b.len()))
    }

    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        if self.broken.is_some() || max == 0 || max > self.max_frame || self.tx_free() == 0 {
            self.stats.tx_refused += 1;
            return false;
        }
        let i = self.tx_next;
        let Some((p, room)) = self.tx_slot(i) else {
            self.stats.tx_refused += 1;
            return false;
        };
        if max <= room {
            // SAFETY: p..p+room lies in a mapped region (checked by
            // tx_slot) and max <= room; the slot is ours (the consumer's
            // index is behind it, read with acquire in tx_free) and no
            // other reference to it exists while build runs.
            let b = unsafe { std::slice::from_raw_parts_mut(p.as_ptr(), max) };
            return match build(b) {
                Some(n) if n > 0 && n <= max => {
                    self.tx_fill(i, n, false);
                    self.tx_next = i.wrapping_add(1);
                    self.tx_free -= 1;
                    self.tx_since_read = self.tx_since_read.saturating_add(1);
                    true
                }
                _ => {
                    self.tx_unslot(i);
                    false
                }
            };
        }
        // Longer than one buffer (a server whose client lends small ones):
        // build aside, then spread over several slots.
        self.tx_unslot(i);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        scratch.resize(max, 0);
        let r = build(&mut scratch);
        self.scratch = scratch;
        match r {
            Some(n) if n > 0 && n <= max => {
                let ok = self.tx_scatter(n);
                if !ok {
                    self.stats.tx_refused += 1;
                }
                ok
            }
            _ => false,
        }
    }

    fn flush(&mut self) {
        if self.tx_next == self.tx_published || self.broken.is_some() {
            return;
        }
        self.stats.tx_frames += u64::from(self.tx_next.wrapping_sub(self.tx_published));
        self.tx_published = self.tx_next;
        match self.role {
            Role::Client => self.tx.head().store(self.tx_next, Ordering::Release),
            Role::Server => self.tx.tail().store(self.tx_next, Ordering::Release),
        }
        // Pairs with the fence in `wait` at the receiver: either it sees
        // the frame before sleeping or we see it asleep (flag clear).
        fence(Ordering::SeqCst);
        if self.tx.flags().load(Ordering::Relaxed) & RING_MASK_INT == 0 {
            let _ = rustix::io::write(&self.tx_evt, &1u64.to_ne_bytes());
            self.stats.kicks += 1;
        }
    }

    fn doorbell(&self) -> Option<Arc<dyn Doorbell>> {
        Some(self.bell.clone() as Arc<dyn Doorbell>)
    }

    fn wait(&mut self, timeout: Duration) {
        if self.broken.is_some() || !self.check_link() {
            std::thread::sleep(timeout.min(Duration::from_millis(1)));
            return;
        }
        self.rx.flags().fetch_and(!RING_MASK_INT, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        if self.rx_avail() == 0 {
            let _ = wait_readable(&[self.rx_evt.as_fd(), self.bell_fd()], timeout);
        }
        self.rx.flags().fetch_or(RING_MASK_INT, Ordering::Relaxed);
        // The peer's eventfd may be blocking: read it only when readable.
        if wait_readable(&[self.rx_evt.as_fd()], Duration::ZERO).unwrap_or(false) {
            let mut v = [0u8; 8];
            let _ = rustix::io::read(&self.rx_evt, &mut v);
        }
        self.bell.drain();
    }
}

impl Memif {
    /// Ring `bell` instead of the device's own doorbell from now on (a
    /// [`MemifServer`] gives each connection its one bell).
    pub(crate) fn set_bell(&mut self, bell: Arc<EventFd>) {
        self.bell = bell;
    }

    fn bell_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.bell.as_fd()
    }
}

/// What the queue pairs of one link share: the control socket (the
/// link's DISCONNECT goes out when the last of them drops, unless the
/// link is down already) and the link's state.
#[derive(Debug)]
struct Shared {
    control: std::sync::Mutex<Control>,
    /// Why the link is down, once it is.
    down: std::sync::Mutex<Option<String>>,
    /// Whether `down` is set (read on the idle path without the lock).
    is_down: std::sync::atomic::AtomicBool,
}

impl Shared {
    fn new(control: Control) -> Arc<Shared> {
        Arc::new(Shared {
            control: std::sync::Mutex::new(control),
            down: std::sync::Mutex::new(None),
            is_down: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Why the link is down, if it is.
    fn down(&self) -> Option<String> {
        if !self.is_down.load(Ordering::Acquire) {
            return None;
        }
        self.down.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The link is down (the first reason stays).
    fn set_down(&self, why: &str) {
        let mut d = self.down.lock().unwrap_or_else(|p| p.into_inner());
        if d.is_none() {
            *d = Some(why.to_owned());
        }
        self.is_down.store(true, Ordering::Release);
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !*self.is_down.get_mut() {
            let c = self.control.get_mut().unwrap_or_else(|p| p.into_inner());
            let _ = c.send(&disconnect("closed"), None);
        }
    }
}
