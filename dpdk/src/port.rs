//! One ethdev port with `n` RX and `n` TX queues; each pair of queues is a
//! [`PortQueue`], a [`FrameDevice`] of its own, and [`Port`] is the one
//! queue of a port opened with one.

use std::ffi::CString;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use iwarp_frame::FrameDevice;

use crate::eal::Eal;
use crate::sys::{self, RteMbuf, RteMempool};
use crate::{
    memif_queue_secret, Counters, Error, MemifEnd, PortStats, Queues, RssConf, MEMIF_CONNECT_WAIT,
    RSS_KEY_LEN,
};

/// Mbufs handled per rx/tx burst call.
const BURST: usize = 32;
/// Parts a gathered frame may have (headers and payload take 2).
const TX_PARTS: usize = 8;
/// Data room of one mbuf after DPDK's 128-octet headroom
/// (RTE_MBUF_DEFAULT_DATAROOM) at the default MTU: the largest frame a
/// port opened with [`Port::open`] sends. A larger MTU
/// ([`Port::open_mtu`]) gets mbufs with room for its frames.
pub const MAX_FRAME: usize = 2048;
const HEADROOM: u16 = 128;
/// The MTU [`Port::open`] configures (Ethernet's, DPDK's default).
pub const DEFAULT_MTU: u16 = 1500;
/// Room a frame of MTU `mtu` needs in one mbuf: Ethernet header, one VLAN
/// tag and CRC a driver may leave in, and the 256 octets
/// (XDP_PACKET_HEADROOM) the kernel keeps in front of each received frame
/// inside the data room for a driver that receives into mbufs through
/// AF_XDP (`net_af_xdp`: a 2048-octet data room takes frames of at most
/// about 1790 octets, measured), rounded up to a cache line; never less
/// than [`MAX_FRAME`].
fn frame_room(mtu: u16) -> usize {
    (usize::from(mtu) + 14 + 4 + 4 + 256)
        .next_multiple_of(64)
        .max(MAX_FRAME)
}
/// memif's default ring buffer (RTE_ETH_MEMIF_DEFAULT_PKT_BUFFER_SIZE).
/// Its ethdev `max_rx_pktlen` is 1518 in DPDK 22.11, but its data path
/// copies a frame of any length between our mbufs and its shared-memory
/// ring buffers (`eth_memif_tx`, `eth_memif_rx`): a memif end that
/// [`Port::open_mtu`] hot-plugs with a larger MTU gets buffers that hold
/// one whole frame (`bsize`) and ethdev is told the MTU it validates, so
/// jumbo frames cross memif. Both ends of a memif link must agree on the
/// MTU, as on any link.
const MEMIF_BUFFER: usize = 2048;
/// The largest MTU a memif end is opened with: the usual jumbo
/// frame's (a larger one would still fit the 16-bit data room of one
/// mbuf, but no test runs it).
const MAX_MEMIF_MTU: u16 = 9000;
/// Whether port `id`'s link is up within `wait` (polled every
/// millisecond).
fn link_comes_up(id: u16, wait: std::time::Duration) -> bool {
    let t0 = std::time::Instant::now();
    loop {
        // SAFETY: id is a port this crate opened and started, not closed
        // yet (the caller holds it); no pointers.
        if unsafe { sys::shim_port_link_up(id) } == 1 {
            return true;
        }
        if t0.elapsed() >= wait {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// The driver's name (`net_memif`), if DPDK tells it.
fn driver_name(id: u16) -> Option<String> {
    let mut buf = [0u8; 64];
    // SAFETY: buf is a writable array of buf.len() octets, which the shim
    // fills with a NUL-terminated string of at most that length.
    let rc = unsafe { sys::shim_port_driver(id, buf.as_mut_ptr().cast(), buf.len()) };
    if rc != 0 {
        return None;
    }
    let end = buf.iter().position(|&b| b == 0)?;
    String::from_utf8(buf[..end].to_vec()).ok()
}
/// Mbufs in each lcore's cache of a pool (`rte_pktmbuf_pool_create`'s
/// `cache_size`): twice a burst, so that a burst's allocations and frees
/// (ours and the driver's, such as memif's one free per frame sent and one
/// allocation per frame received) go to the calling thread's cache instead
/// of the pool's multi-producer/multi-consumer ring (a compare-and-swap
/// each). Only threads with an lcore id have such a cache:
/// [`thread_lcore`] gives one to each thread that runs a queue's data path.
const POOL_CACHE: u32 = 2 * BURST as u32;
/// Lcores whose caches a pool's size allows for beyond its queues' own
/// threads (application threads that drive an inline loop's rounds, or
/// threads gone since, whose caches still hold mbufs): each may keep up to
/// 1.5 × [`POOL_CACHE`] mbufs (DPDK's flush threshold).
const POOL_CACHE_LCORES: u64 = 8;

/// Gives the calling thread an lcore id (`rte_thread_register`), once per
/// thread, released again when the thread exits: the threads of our poll
/// loops are not EAL lcores, and without an id DPDK gives them no mempool
/// cache. A thread that cannot get one (every id taken) goes on without a
/// cache, as before: correct, only slower.
fn thread_lcore() {
    /// Releases the id at thread exit.
    struct Registered;
    impl Drop for Registered {
        fn drop(&mut self) {
            if crate::eal::cleaned_up() {
                return; // no EAL to hand the id back to
            }
            // SAFETY: runs on the thread that registered, at its exit,
            // while the EAL is up; releases its lcore id (mbufs in its
            // caches stay there, for the next thread given the id).
            unsafe { sys::shim_thread_unregister() };
        }
    }
    thread_local! {
        static LCORE: std::cell::OnceCell<Option<Registered>> =
            const { std::cell::OnceCell::new() };
    }
    let _ = LCORE.try_with(|c| {
        c.get_or_init(|| {
            let mut registered = 0i32;
            // SAFETY: the EAL is initialised (a port exists); registers the
            // calling thread unless it has an id already (an EAL lcore,
            // such as the thread that initialised the EAL); `registered`
            // is a valid place for the answer.
            let id = unsafe { sys::shim_thread_lcore(&mut registered) };
            // Only a registration of ours is undone at exit.
            (id >= 0 && registered == 1).then_some(Registered)
        });
    });
}

/// The calling thread's DPDK lcore id, if it has one: an EAL lcore's, or
/// the one a thread is given when it first runs a queue's data path
/// ([`FrameDevice::rx_burst`] and the transmit calls), which it hands back
/// when it exits. A thread with an id allocates and frees mbufs through a
/// cache of its own in each pool.
pub fn thread_lcore_id() -> Option<u32> {
    // SAFETY: reads the calling thread's lcore id (a thread-local).
    u32::try_from(unsafe { sys::shim_lcore_id() }).ok()
}

/// tx_burst attempts per flush before the rest is dropped.
const TX_TRIES: usize = 4;

static POOLS: AtomicU32 = AtomicU32::new(0);

/// Serialises opening (hot-plug, configuration, start) and closing (and
/// removal) of ports in the process: DPDK's control path is not
/// thread-safe. Two memif ends hot-plugged at once from two threads failed
/// (`rte_dev_probe`: ENODEV, 1 run in 6 of `tests/queues.rs`): the driver
/// sets up its process-wide socket table in its probe.
static CONTROL: Mutex<()> = Mutex::new(());

/// Holds [`CONTROL`] (a panic elsewhere while holding it left nothing half
/// done that the next user must know about: every step is one DPDK call).
fn control() -> std::sync::MutexGuard<'static, ()> {
    CONTROL.lock().unwrap_or_else(|e| e.into_inner())
}

/// What `Shared::open` undoes when it fails after finding the port: a
/// port it hot-plugged or configured is closed (and a hot-plugged one
/// removed again), then the pool it created is freed.
struct Undo {
    id: u16,
    plugged: bool,
    pool: Option<NonNull<RteMempool>>,
    /// False once the port is handed over.
    armed: bool,
}

impl Drop for Undo {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if self.plugged || self.pool.is_some() {
            // SAFETY: the port id is valid (looked up before Undo was made)
            // and no handle of it exists yet; nothing else uses it.
            unsafe { sys::shim_port_close(self.id, i32::from(self.plugged)) };
        }
        if let Some(pool) = self.pool {
            // SAFETY: created by Shared::open and not handed over; the port
            // was closed above, so no mbuf of the pool is in use.
            unsafe { sys::shim_pool_free(pool.as_ptr()) };
        }
    }
}

/// The port itself, shared by its queue handles: opened and started once,
/// stopped and closed (and its pool freed) when the last handle drops.
#[derive(Debug)]
struct Shared {
    name: String,
    id: u16,
    pool: NonNull<RteMempool>,
    mac: [u8; 6],
    mtu: u16,
    /// The largest frame one mbuf holds (its data room).
    max_frame: usize,
    /// RX and TX queues the port was configured with.
    queues: u16,
    /// Whether RX is spread over the queues by RSS.
    rss: bool,
    /// Whether that RSS hashes SCTP over IPv4 by its ports.
    rss_sctp: bool,
    /// The file in which a memif server wrote its queue count (removed
    /// when the port closes).
    queues_file: Option<std::path::PathBuf>,
    /// Whether `Port::open_queues` hot-plugged the device (from devargs):
    /// it is removed again once the port is closed, so that the same
    /// devargs open it again.
    plugged: bool,
    /// Serialises control-path calls (statistics, RSS read-back) made
    /// from the handles' threads.
    control: Mutex<()>,
    /// The RSS key ethdev was configured with: it keeps a pointer to it in
    /// the port's configuration, so it lives until the port is closed
    /// (fields drop after `Drop::drop`, which closes the port).
    _rss_key: Option<Box<[u8; RSS_KEY_LEN]>>,
    /// Dropped last: the EAL outlives the port.
    _eal: Eal,
}

// SAFETY: Shared holds the port id, immutable facts about the port and a
// pointer to its mbuf pool, which lives in DPDK's shared memory, not in any
// thread's state. Through a shared reference it is used only to allocate and
// free mbufs (the pool is created with DPDK's default multi-producer/
// multi-consumer ring, so any thread may do so at any time: a thread with an
// lcore id through that id's cache, which DPDK gives one thread at a time,
// any other straight on the ring), to count the pool's free mbufs (a read of the
// ring's counters) and for control-path calls (statistics, RSS read-back)
// that `control` serialises; DPDK lets such calls run beside the data path
// on other threads. Each queue is used by the one handle that owns it (see
// `PortQueue`). Closing the port happens in Drop, when no handle is left.
unsafe impl Send for Shared {}
// SAFETY: as for Send: every use through `&Shared` is one of those above.
unsafe impl Sync for Shared {}

/// One RX and one TX queue of a port opened with [`Port::open_queues`]:
/// queue `i` of each, with its own transmit batch and [`Counters`]. A
/// [`FrameDevice`] like [`Port`] (which is the one queue of a port opened
/// with one). `Send`, not `Sync`: a poll loop owns it. Dropping it flushes
/// its batch; the port is stopped and closed, and its pool freed, when the
/// last handle of the port drops.
#[derive(Debug)]
pub struct PortQueue {
    port: Arc<Shared>,
    /// The RX and TX queue this handle owns.
    queue: u16,
    /// Frames copied into mbufs, waiting for `flush` (≤ BURST).
    pending: Vec<*mut RteMbuf>,
    /// For frames spread over several mbuf segments.
    scratch: Vec<u8>,
    counters: Counters,
}

// SAFETY: a PortQueue owns RX and TX queue `queue` of its port outright:
// `Port::open_queues` makes one handle per queue index and no other handle
// for the port (ports are opened by this crate only, and DPDK refuses a
// second hot-plug of the same name), and its raw pointers are mbufs of the
// pool it alone holds until they are sent or freed. DPDK's rule is that one
// thread uses a queue at a time; moving the handle to another thread (the
// poll loop) moves that single user with it, and PortQueue is not Sync, so
// two threads never use one queue at once. Shared is Send + Sync (above).
unsafe impl Send for PortQueue {}

/// An ethdev port opened by name (`net_af_packet0`) or hot-plugged from
/// devargs (`net_af_packet0,iface=veth0`), started with one RX and one TX
/// queue and an mbuf pool of its own: the one [`PortQueue`] of
/// [`Port::open_queues`] with `n` = 1. Dropping it stops and closes the port
/// and frees the pool.
#[derive(Debug)]
pub struct Port {
    queue: PortQueue,
}

impl Port {
    /// Open and start a port. `name_or_vdev` is either an existing port's
    /// name (from `--vdev` or a PCI device) or devargs with a comma
    /// (`net_af_packet0,iface=veth0`), which hot-plug the virtual device
    /// first; its port name is the part before the comma.
    pub fn open(eal: &Eal, name_or_vdev: &str, queues: Queues) -> Result<Port, Error> {
        Self::open_mtu(eal, name_or_vdev, queues, DEFAULT_MTU)
    }

    /// [`open`](Self::open) with MTU `mtu` (IP packet size) instead of
    /// 1500: the port is configured with it and its mbufs hold one whole
    /// frame of that size, so jumbo frames go in one segment each way. An
    /// MTU the driver does not take (outside its `min_mtu..=max_mtu`, or
    /// frames longer than it receives) is [`Error::Mtu`], before anything
    /// is allocated. The link's own MTU is not known here (a driver over a
    /// kernel interface, like `net_af_xdp`, takes larger frames than the
    /// interface passes): ask for what the link carries.
    pub fn open_mtu(
        eal: &Eal,
        name_or_vdev: &str,
        queues: Queues,
        mtu: u16,
    ) -> Result<Port, Error> {
        let mut v = Self::open_queues(eal, name_or_vdev, 1, queues, mtu, None)?;
        match v.pop() {
            Some(queue) => Ok(Port { queue }),
            None => Err(Error::InvalidArgument {
                reason: "no queue opened",
            }),
        }
    }

    /// [`open_mtu`](Self::open_mtu) with `n` RX and `n` TX queues: the
    /// port is configured and started once, and the `n` handles returned,
    /// in queue order, each own RX queue `i` and TX queue `i` (each with
    /// `queues` descriptors). One mbuf pool serves them all, sized for
    /// every queue.
    ///
    /// `n` above the driver's `max_rx_queues` or `max_tx_queues` is
    /// [`Error::Queues`]; `n` = 0 is [`Error::InvalidArgument`]; both
    /// before anything is allocated.
    ///
    /// RSS: when `n` > 1 and the driver offers RSS for IPv4, TCP over IPv4
    /// or SCTP over IPv4, RX is configured as `RTE_ETH_MQ_RX_RSS` hashing
    /// those of the three types it offers,
    /// with `rss_key` as the Toeplitz key (`None`: the driver's own key; a
    /// driver whose key is not 40 octets long refuses one with
    /// [`Error::RssKey`]), so that the driver steers each flow to one
    /// queue; [`PortQueue::rss`] says whether it is on. A driver without
    /// RSS (memif, af_packet, ring) is configured without it: what arrives
    /// on which queue is then the driver's own rule. memif has no RSS: a
    /// frame sent on a memif end's TX queue `i` arrives on its peer's RX
    /// queue `i`.
    ///
    /// memif: both ends need the same `n`. A memif end hot-plugged here
    /// with `n` > 1 gets `secret=iwarp-queues-n` (devargs with a secret
    /// of their own are [`Error::InvalidArgument`], and so is a memif
    /// port of several queues given to the EAL as `--vdev`), so that its
    /// server refuses a client of another count.
    /// A server writes its `n` to `SOCKET.queues-ID` beside a socket file
    /// (removed when the port closes): a client that finds another count
    /// there fails at once with [`Error::MemifRefused`], naming both; one
    /// that finds its own, or a client of several queues that finds none,
    /// waits up to [`MEMIF_CONNECT_WAIT`] for its link and fails so if it
    /// does not come up. A client of one queue that finds none does not
    /// wait (it may start before its server).
    pub fn open_queues(
        eal: &Eal,
        name_or_vdev: &str,
        n: u16,
        queues: Queues,
        mtu: u16,
        rss_key: Option<[u8; RSS_KEY_LEN]>,
    ) -> Result<Vec<PortQueue>, Error> {
        let shared = Arc::new(Shared::open(eal, name_or_vdev, n, queues, mtu, rss_key)?);
        Ok((0..n)
            .map(|queue| PortQueue {
                port: Arc::clone(&shared),
                queue,
                pending: Vec::with_capacity(BURST),
                scratch: Vec::new(),
                counters: Counters::default(),
            })
            .collect())
    }

    /// The port's name.
    pub fn name(&self) -> &str {
        self.queue.name()
    }

    /// DPDK's port id.
    pub fn port_id(&self) -> u16 {
        self.queue.port_id()
    }

    /// The port's MAC address.
    pub fn mac_address(&self) -> [u8; 6] {
        self.queue.mac_address()
    }

    /// The port's MTU (IP packet size).
    pub fn mtu(&self) -> u16 {
        self.queue.mtu()
    }

    /// The largest frame this port sends: one mbuf's data room.
    pub fn max_frame(&self) -> usize {
        self.queue.max_frame()
    }

    /// What this side counted.
    pub fn counters(&self) -> Counters {
        self.queue.counters()
    }

    /// Mbufs free in the port's pool.
    pub fn pool_available(&self) -> u32 {
        self.queue.pool_available()
    }

    /// The driver's counters (`rte_eth_stats_get`).
    pub fn stats(&self) -> Result<PortStats, Error> {
        self.queue.stats()
    }
}

impl Shared {
    /// Look the port up (hot-plugging devargs), check `n` and `mtu`
    /// against the driver, create the pool, configure and start it.
    fn open(
        eal: &Eal,
        name_or_vdev: &str,
        n: u16,
        queues: Queues,
        mtu: u16,
        rss_key: Option<[u8; RSS_KEY_LEN]>,
    ) -> Result<Shared, Error> {
        // Declared before `undo` (below), so dropped after it: ethdev keeps
        // a pointer to the key until the port is closed.
        let mut rss_key = rss_key.map(Box::new);
        // Held to the end: `undo` (declared later, dropped earlier) closes
        // under it too.
        let _control = control();
        if n == 0 {
            return Err(Error::InvalidArgument {
                reason: "a port needs at least one queue",
            });
        }
        if queues.rx_desc == 0 || queues.tx_desc == 0 {
            return Err(Error::InvalidArgument {
                reason: "descriptor counts must be positive",
            });
        }
        let name = name_or_vdev
            .split(',')
            .next()
            .unwrap_or(name_or_vdev)
            .to_owned();
        let cname = CString::new(name.as_str()).map_err(|_| Error::InvalidArgument {
            reason: "the port name contains a NUL byte",
        })?;
        let mut id = 0u16;
        // SAFETY: cname is NUL-terminated and outlives the call; id is a
        // valid u16 to write to.
        let mut rc = unsafe { sys::shim_port_by_name(cname.as_ptr(), &mut id) };
        // A memif end we hot-plug gets ring buffers that hold a whole
        // frame of `mtu` (`bsize`, RTE_ETH_MEMIF_DEFAULT_PKT_BUFFER_SIZE
        // 2048 otherwise), so that no frame is spread over chained
        // descriptors: DPDK 22.11's receiver counted such chains as 2.5 to
        // 27 times as many frames as were sent (9000-octet frames, two
        // runs; `jumbo_frames_cross_memif_whole`); with whole-frame buffers
        // the counts match.
        let jumbo_memif = rc != 0
            && name.starts_with("net_memif")
            && !name_or_vdev.contains("bsize=")
            && mtu > DEFAULT_MTU;
        let need = usize::from(mtu) + 14;
        let mut vdev = if jumbo_memif && need > MEMIF_BUFFER {
            format!("{name_or_vdev},bsize={}", need.next_multiple_of(128))
        } else {
            name_or_vdev.to_owned()
        };
        // A memif end we hot-plug: with several queues, its queue count
        // goes into memif's secret, so that it connects only to a peer
        // with as many (see `memif_queue_secret`).
        let memif = if rc != 0 && name_or_vdev.contains(',') {
            MemifEnd::parse(name_or_vdev)
        } else {
            None
        };
        if let Some(end) = memif.as_ref().filter(|_| n > 1) {
            if end.secret {
                return Err(Error::InvalidArgument {
                    reason: "a memif end of several queues carries its queue count in \
                             memif's secret: leave secret= out of its devargs",
                });
            }
            vdev = format!("{vdev},secret={}", memif_queue_secret(n));
        }
        // A client whose server (one of ours) has another queue count would
        // be refused: it fails before anything is plugged (a memif client
        // unplugged at once, while DPDK's interrupt thread is still taking
        // its connection, made that thread panic: "Error adding fd ...
        // epoll_ctl, Bad file descriptor").
        if let Some(end) = memif.as_ref().filter(|e| e.client) {
            if let Some(theirs) = end.server_queues().filter(|&q| q != n) {
                return Err(Error::MemifRefused {
                    name,
                    socket: end.socket.clone(),
                    id: end.id,
                    queues: n,
                    server_queues: Some(theirs),
                });
            }
        }
        let name_or_vdev = vdev.as_str();
        let mut plugged = false;
        if rc != 0 && name_or_vdev.contains(',') {
            let dev = CString::new(name_or_vdev).map_err(|_| Error::InvalidArgument {
                reason: "the devargs contain a NUL byte",
            })?;
            // SAFETY: dev is a NUL-terminated string that outlives the call;
            // the EAL is initialised (we hold an Eal).
            let p = unsafe { sys::shim_dev_probe(dev.as_ptr()) };
            plugged = p == 0;
            if p != 0 {
                return Err(Error::Probe {
                    devargs: name_or_vdev.to_owned(),
                    code: p,
                });
            }
            // SAFETY: as for the first lookup.
            rc = unsafe { sys::shim_port_by_name(cname.as_ptr(), &mut id) };
        }
        if rc != 0 {
            return Err(Error::NoSuchPort { name });
        }
        // Until the port is handed over, a failure undoes what was done
        // here (see `Undo`).
        let mut undo = Undo {
            id,
            plugged,
            pool: None,
            armed: true,
        };
        // A memif port we did not hot-plug (an EAL --vdev) has no queue
        // count in its secret: with several queues it could be connected
        // to a peer with fewer (see `memif_queue_secret`).
        if !plugged && n > 1 && driver_name(id).is_some_and(|d| d == "net_memif") {
            return Err(Error::InvalidArgument {
                reason: "a memif port of several queues is hot-plugged from its devargs \
                         (Port::open_queues adds its queue count to them), not given to the \
                         EAL with --vdev",
            });
        }
        let (mut min_mtu, mut max_mtu, mut max_rx) = (0u16, 0u16, 0u32);
        // SAFETY: id is a valid port (looked up above); the three pointers
        // are to distinct locals the shim writes.
        let rc = unsafe { sys::shim_port_limits(id, &mut min_mtu, &mut max_mtu, &mut max_rx) };
        if rc != 0 {
            return Err(Error::Dpdk {
                op: "rte_eth_dev_info_get",
                errno: -rc,
            });
        }
        // A memif end with whole-frame buffers (above) carries a frame as
        // long as one of our mbufs holds, whatever its ethdev limit says:
        // configured with the largest MTU ethdev validates for it, its
        // mbufs sized for the MTU asked for ([`MEMIF_BUFFER`]).
        let jumbo = jumbo_memif && driver_name(id).is_some_and(|d| d == "net_memif");
        // The frame: MTU plus the 14-octet Ethernet header (the driver's
        // max_rx_pktlen counts it; a 4-octet CRC too on some drivers, but
        // not on the software ones here, whose limit is MTU + 18).
        let driver_max = max_mtu.min(max_rx.saturating_sub(14).min(u32::from(u16::MAX)) as u16);
        let max = if jumbo { MAX_MEMIF_MTU } else { driver_max };
        if mtu < min_mtu.max(576) || mtu > max {
            return Err(Error::Mtu {
                name,
                asked: mtu,
                min: min_mtu.max(576),
                max,
            });
        }
        let (mut max_rx_q, mut max_tx_q, mut rss_hf, mut key_size) = (0u16, 0u16, 0u64, 0u8);
        // SAFETY: id is a valid port; the four pointers are to distinct
        // locals the shim writes.
        let rc = unsafe {
            sys::shim_port_queue_limits(
                id,
                &mut max_rx_q,
                &mut max_tx_q,
                &mut rss_hf,
                &mut key_size,
            )
        };
        if rc != 0 {
            return Err(Error::Dpdk {
                op: "rte_eth_dev_info_get",
                errno: -rc,
            });
        }
        if n > max_rx_q || n > max_tx_q {
            return Err(Error::Queues {
                name,
                asked: n,
                max_rx: max_rx_q,
                max_tx: max_tx_q,
            });
        }
        // RSS with more than one queue, where the driver hashes IPv4, TCP
        // or SCTP over IPv4; the key only if it is the length the driver
        // takes (0: the driver does not say, and ethdev does not check).
        let rss = n > 1 && rss_hf != 0;
        // SAFETY: a function returning a constant.
        let rss_sctp = rss && rss_hf & unsafe { sys::shim_rss_hf_ipv4_sctp() } != 0;
        if !rss {
            rss_key = None;
        } else if rss_key.is_some() && key_size != 0 && usize::from(key_size) != RSS_KEY_LEN {
            return Err(Error::RssKey {
                name,
                len: key_size,
            });
        }
        // What ethdev is told: the MTU itself, or for a jumbo memif end
        // asked for more than ethdev validates, that limit (frame + Ethernet
        // header and CRC within max_rx_pktlen, rte_eth_dev_configure).
        let configured = if jumbo && mtu > driver_max {
            max_mtu.min(max_rx.saturating_sub(18).min(u32::from(u16::MAX)) as u16)
        } else {
            mtu
        };
        let link_mtu = mtu;
        let max_frame = frame_room(mtu);

        // Four times the RX and TX rings (a driver may hold that many of
        // our mbufs at once: `net_af_xdp` keeps fill, RX, TX and completion
        // rings of them, and with twice the rings a 4 MiB transfer stalled
        // on an empty pool), one burst in flight each way and our pending
        // batch, plus slack; 2^n − 1 is the size DPDK's ring likes best.
        // A jumbo memif end copies into its own ring buffers and
        // holds none of our mbufs: a frame received is one allocated as it
        // arrives, one sent is freed once copied. One set of rings is
        // plenty there, and keeps a pool of jumbo mbufs within the EAL's
        // memory (16383 mbufs of 9.5 KiB would be 155 MiB per port).
        // Each queue pair counts.
        let rings = if jumbo { 1 } else { 4 };
        let want = u64::from(n)
            * (rings * (u64::from(queues.rx_desc) + u64::from(queues.tx_desc)) + 4 * BURST as u64)
            + 512
            + (u64::from(n) + POOL_CACHE_LCORES) * u64::from(POOL_CACHE) * 3 / 2;
        let mbufs =
            u32::try_from(want.next_power_of_two() - 1).map_err(|_| Error::InvalidArgument {
                reason: "too many queues and descriptors for one mbuf pool",
            })?;
        let pool_name = CString::new(format!("iwd{}", POOLS.fetch_add(1, Ordering::Relaxed)))
            .map_err(|_| Error::InvalidArgument {
                reason: "pool name",
            })?;
        // SAFETY: pool_name is NUL-terminated and outlives the call (DPDK
        // copies it); the EAL is initialised.
        let pool = unsafe {
            sys::shim_pool_create(
                pool_name.as_ptr(),
                mbufs,
                POOL_CACHE,
                max_frame as u16 + HEADROOM,
            )
        };
        let Some(pool) = NonNull::new(pool) else {
            // SAFETY: reads the calling thread's rte_errno; no arguments.
            let errno = unsafe { sys::shim_errno() };
            return Err(Error::Mempool { mbufs, errno });
        };
        // From here on, a failure closes the port and frees the pool.
        undo.pool = Some(pool);
        let fail = |errno: i32, what: Option<&'static str>| match what {
            None => Error::PortInit {
                name: name.clone(),
                errno,
            },
            Some(op) => Error::Dpdk { op, errno },
        };
        let (hf, key_ptr) = match (&rss_key, rss) {
            (_, false) => (0, std::ptr::null()),
            (None, true) => (rss_hf, std::ptr::null()),
            (Some(k), true) => (rss_hf, k.as_ptr()),
        };
        // SAFETY: id is a valid port, pool a live mbuf pool whose mbufs
        // hold a whole frame of `mtu`, sized for n queues; the port is not
        // started yet. key_ptr is null or points at RSS_KEY_LEN octets in a
        // Box that Shared keeps until after the port is closed (or that
        // outlives the close by `undo`).
        let rc = unsafe {
            sys::shim_port_init(
                id,
                pool.as_ptr(),
                n,
                queues.rx_desc,
                queues.tx_desc,
                configured,
                hf,
                key_ptr,
                RSS_KEY_LEN as u8,
            )
        };
        if rc != 0 {
            return Err(fail(-rc, None));
        }
        let mut mac = [0u8; 6];
        // SAFETY: mac has the 6 octets the shim writes.
        let rc = unsafe { sys::shim_port_mac(id, mac.as_mut_ptr()) };
        if rc != 0 {
            return Err(fail(-rc, Some("rte_eth_macaddr_get")));
        }
        let mut mtu = 0u16;
        // SAFETY: mtu is a valid u16 to write to.
        let rc = unsafe { sys::shim_port_mtu(id, &mut mtu) };
        if rc != 0 {
            return Err(fail(-rc, Some("rte_eth_dev_get_mtu")));
        }
        // A jumbo memif link carries the MTU asked for, not the one
        // ethdev was told.
        if jumbo {
            mtu = mtu.max(link_mtu);
        }
        // A server refuses a client whose queue count differs (the count
        // is in memif's secret), and the client's link would never come
        // up: the open fails with both counts instead. A server of this
        // crate writes its count beside its socket; a client that finds
        // another count there fails at once, one that finds its own waits
        // for its link (taken on the EAL's interrupt thread, here or in
        // the server's process) up to `MEMIF_CONNECT_WAIT`. So does a
        // client of several queues that finds no count (a server not up
        // yet, or not ours); a client of one queue that finds none does
        // not wait, so that it may still start before its server.
        let mut queues_file = None;
        if let Some(end) = memif.as_ref().filter(|_| plugged) {
            if end.client {
                // (Another count was refused before the plug.)
                let server_queues = end.server_queues();
                let wait = server_queues.is_some() || n > 1;
                if wait && !link_comes_up(id, MEMIF_CONNECT_WAIT) {
                    return Err(Error::MemifRefused {
                        name,
                        socket: end.socket.clone(),
                        id: end.id,
                        queues: n,
                        server_queues,
                    });
                }
            } else if let Some(p) = end.queues_file() {
                // Only for the message above: a server that cannot write
                // it works all the same.
                if std::fs::write(&p, format!("{n}\n")).is_ok() {
                    queues_file = Some(p);
                }
            }
        }
        undo.armed = false;
        Ok(Shared {
            plugged,
            name,
            id,
            pool,
            mac,
            mtu,
            max_frame,
            queues: n,
            rss,
            rss_sctp,
            queues_file,
            control: Mutex::new(()),
            _rss_key: rss_key,
            _eal: eal.clone(),
        })
    }
}

impl PortQueue {
    /// The port's name.
    pub fn name(&self) -> &str {
        &self.port.name
    }

    /// DPDK's port id.
    pub fn port_id(&self) -> u16 {
        self.port.id
    }

    /// The RX and TX queue this handle owns.
    pub fn queue(&self) -> u16 {
        self.queue
    }

    /// How many RX (and TX) queues the port has.
    pub fn queue_count(&self) -> u16 {
        self.port.queues
    }

    /// Whether the driver spreads received frames over the queues by RSS
    /// (see [`Port::open_queues`]); false with one queue.
    pub fn rss(&self) -> bool {
        self.port.rss
    }

    /// Whether that RSS hashes SCTP over IPv4 by its ports
    /// (`RTE_ETH_RSS_NONFRAG_IPV4_SCTP`, asked for where the driver offers
    /// it), as TCP's: false without RSS.
    pub fn rss_hashes_sctp(&self) -> bool {
        self.port.rss_sctp
    }

    /// The RSS hash configuration the driver reports
    /// (`rte_eth_dev_rss_hash_conf_get`): its key and which of the hash
    /// types asked for it hashes. An error from a driver that cannot say
    /// (memif: `ENOTSUP`).
    pub fn rss_conf(&self) -> Result<RssConf, Error> {
        let mut key = [0u8; 255];
        let (mut len, mut hf) = (0u8, 0u64);
        let rc = {
            let _g = self.port.control.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: key has 255 writable octets (the cap given); len and
            // hf are distinct locals; the port is open (we hold it).
            unsafe {
                sys::shim_port_rss_conf(self.port.id, key.as_mut_ptr(), 255, &mut len, &mut hf)
            }
        };
        if rc != 0 {
            return Err(Error::Dpdk {
                op: "rte_eth_dev_rss_hash_conf_get",
                errno: -rc,
            });
        }
        // SAFETY: three functions returning constants.
        let (ipv4, tcp, sctp) = unsafe {
            (
                sys::shim_rss_hf_ipv4(),
                sys::shim_rss_hf_ipv4_tcp(),
                sys::shim_rss_hf_ipv4_sctp(),
            )
        };
        Ok(RssConf {
            key: key[..usize::from(len)].to_vec(),
            ipv4: hf & ipv4 != 0,
            ipv4_tcp: hf & tcp != 0,
            ipv4_sctp: hf & sctp != 0,
        })
    }

    /// Whether the port's link is up (`rte_eth_link_get_nowait`): for
    /// memif, whether its peer has connected.
    pub fn link_up(&self) -> Result<bool, Error> {
        let _g = self.port.control.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the port is open (we hold it); no pointers.
        match unsafe { sys::shim_port_link_up(self.port.id) } {
            1 => Ok(true),
            0 => Ok(false),
            rc => Err(Error::Dpdk {
                op: "rte_eth_link_get_nowait",
                errno: -rc,
            }),
        }
    }

    /// The port's MAC address.
    pub fn mac_address(&self) -> [u8; 6] {
        self.port.mac
    }

    /// The port's MTU (IP packet size).
    pub fn mtu(&self) -> u16 {
        self.port.mtu.min((self.port.max_frame - 14) as u16)
    }

    /// The largest frame this queue sends: one mbuf's data room.
    pub fn max_frame(&self) -> usize {
        self.port.max_frame
    }

    /// What this queue counted.
    pub fn counters(&self) -> Counters {
        self.counters
    }

    /// Mbufs free in the port's pool (shared by its queues).
    pub fn pool_available(&self) -> u32 {
        // SAFETY: the pool lives as long as self.port; counting its free
        // mbufs reads the ring's counters.
        unsafe { sys::shim_pool_avail(self.port.pool.as_ptr()) }
    }

    /// The driver's counters for the whole port (`rte_eth_stats_get`).
    pub fn stats(&self) -> Result<PortStats, Error> {
        let mut s = PortStats::default();
        let _g = self.port.control.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: every pointer is to a distinct u64 field of `s`.
        let rc = unsafe {
            sys::shim_port_stats(
                self.port.id,
                &mut s.ipackets,
                &mut s.opackets,
                &mut s.imissed,
                &mut s.ierrors,
                &mut s.oerrors,
                &mut s.rx_nombuf,
            )
        };
        if rc != 0 {
            return Err(Error::Dpdk {
                op: "rte_eth_stats_get",
                errno: -rc,
            });
        }
        Ok(s)
    }

    /// Send the pending batch; what the driver does not take after a few
    /// tries is freed and counted in `tx_dropped`.
    fn send_pending(&mut self) {
        let n = self.pending.len();
        let mut sent = 0usize;
        for _ in 0..TX_TRIES {
            if sent == n {
                break;
            }
            // SAFETY: pending[sent..n] are mbufs we allocated and still own;
            // tx_burst takes ownership of the first k it returns. TX queue
            // `self.queue` is used by this handle only (see `impl Send`),
            // and has a ring of its own in the driver (a memif port of
            // several queues connects only to a peer with as many:
            // `memif_queue_secret`).
            let k = unsafe {
                sys::shim_tx_burst(
                    self.port.id,
                    self.queue,
                    self.pending.as_mut_ptr().add(sent),
                    (n - sent) as u16,
                )
            };
            sent += usize::from(k);
        }
        if sent < n {
            // SAFETY: pending[sent..n] are still ours (the driver did not
            // take them); freed here and forgotten below.
            unsafe {
                sys::shim_mbuf_free_bulk(self.pending.as_mut_ptr().add(sent), (n - sent) as u32)
            };
            self.counters.tx_dropped += (n - sent) as u64;
        }
        self.counters.tx_frames += sent as u64;
        self.pending.clear();
    }
}

/// Frees received mbufs when dropped, so a panicking sink leaks none.
struct RxBatch {
    mbufs: [*mut RteMbuf; BURST],
    n: usize,
}

impl Drop for RxBatch {
    fn drop(&mut self) {
        if self.n > 0 {
            // SAFETY: mbufs[..n] came from rx_burst and are ours; none was
            // freed before.
            unsafe { sys::shim_mbuf_free_bulk(self.mbufs.as_mut_ptr(), self.n as u32) };
        }
    }
}

impl FrameDevice for PortQueue {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        thread_lcore();
        let mut total = 0;
        while total < max {
            let want = (max - total).min(BURST);
            let mut batch = RxBatch {
                mbufs: [std::ptr::null_mut(); BURST],
                n: 0,
            };
            // SAFETY: the array has room for `want` ≤ BURST pointers; RX
            // queue `self.queue` is used by this handle only (see `impl
            // Send`), and the driver gave it a ring of its own: a memif
            // port of several queues is connected only to a peer with as
            // many (its queue count is in memif's secret, `memif_queue_secret`),
            // so none of its queues is one DPDK 22.11's memif leaves
            // without a ring, aliasing the peer's first.
            batch.n = usize::from(unsafe {
                sys::shim_rx_burst(
                    self.port.id,
                    self.queue,
                    batch.mbufs.as_mut_ptr(),
                    want as u16,
                )
            });
            for &m in &batch.mbufs[..batch.n] {
                let (mut seg, mut len) = (0u16, 0u32);
                // SAFETY: m is a received mbuf we own until the batch drops.
                let data = unsafe { sys::shim_mbuf_data(m, &mut seg, &mut len) };
                if u32::from(seg) == len {
                    // SAFETY: the first segment holds `seg` octets at `data`,
                    // valid and unchanged until the mbuf is freed when
                    // `batch` drops, after the sink has returned.
                    let frame = unsafe { std::slice::from_raw_parts(data, usize::from(seg)) };
                    sink(frame);
                } else {
                    // A chained mbuf: linearise it.
                    self.scratch.resize(len as usize, 0);
                    // SAFETY: scratch has `len` writable octets.
                    let got = unsafe { sys::shim_mbuf_copy(m, self.scratch.as_mut_ptr(), len) };
                    if got == len {
                        sink(&self.scratch);
                    } else {
                        self.counters.rx_dropped += 1;
                        continue;
                    }
                }
                self.counters.rx_frames += 1;
            }
            total += batch.n;
            let short = batch.n < want;
            drop(batch);
            if short {
                break;
            }
        }
        total
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.tx_parts(&[frame])
    }

    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        if len > self.port.max_frame {
            self.counters.tx_too_big += 1;
            return false;
        }
        thread_lcore();
        // The parts go straight into the mbuf, in order (one copy).
        let mut iov = [sys::ShimPart {
            data: std::ptr::null(),
            len: 0,
        }; TX_PARTS];
        if parts.len() > TX_PARTS {
            // More pieces than the table holds (no caller sends that
            // many): join them first.
            let joined = parts.concat();
            return self.tx_parts(&[&joined]);
        }
        for (slot, p) in iov.iter_mut().zip(parts) {
            *slot = sys::ShimPart {
                data: p.as_ptr(),
                len: p.len() as u32,
            };
        }
        // SAFETY: each of the first parts.len() entries points at a live
        // slice readable for its length (≤ max_frame in all); the pool
        // lives as long as self.port and is multi-producer/consumer.
        let m = unsafe {
            sys::shim_mbuf_from_parts(self.port.pool.as_ptr(), iov.as_ptr(), parts.len() as u32)
        };
        if m.is_null() {
            self.counters.tx_no_mbuf += 1;
            return false;
        }
        self.pending.push(m);
        if self.pending.len() == BURST {
            self.send_pending();
        }
        true
    }

    /// Built in place in a fresh mbuf's data room (one segment: frames up
    /// to [`max_frame`](PortQueue::max_frame)), freed again on cancel.
    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.tx_build_upto(len, &mut |b| build(b).then_some(len))
    }

    /// As [`tx_build`](Self::tx_build): `max` octets appended to a fresh
    /// mbuf, and what `build` did not use trimmed off its end.
    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        thread_lcore();
        let len = max;
        if len > self.port.max_frame {
            self.counters.tx_too_big += 1;
            return false;
        }
        let mut m: *mut RteMbuf = std::ptr::null_mut();
        // SAFETY: the pool lives as long as self.port; `m` is a valid place
        // for the shim to store the mbuf pointer; len ≤ max_frame fits u16.
        let data = unsafe { sys::shim_mbuf_alloc_len(self.port.pool.as_ptr(), len as u16, &mut m) };
        if data.is_null() || m.is_null() {
            self.counters.tx_no_mbuf += 1;
            return false;
        }
        // Frees the mbuf unless it is queued (a cancel, or a panicking
        // builder), so none leaks.
        struct Guard(*mut RteMbuf);
        impl Drop for Guard {
            fn drop(&mut self) {
                if !self.0.is_null() {
                    // SAFETY: an mbuf we allocated and never queued.
                    unsafe { sys::shim_mbuf_free_bulk(&mut self.0, 1) };
                }
            }
        }
        let mut guard = Guard(m);
        // SAFETY: `data` points at the `len` appended octets of the single
        // segment of `m`, which we alone own (just allocated, not queued);
        // the slice is dropped before the mbuf is queued or freed. The data
        // room is pool memory, zero-filled when the pool was mapped and
        // since written only with frame octets, so every u8 is initialised.
        let buf = unsafe { std::slice::from_raw_parts_mut(data, len) };
        let n = match build(buf) {
            Some(n) if n <= len => n,
            _ => {
                self.counters.tx_build_cancelled += 1;
                return false;
            }
        };
        if n < len {
            // SAFETY: `m` is our one-segment mbuf holding `len` data
            // octets (appended above), not queued; n < len, so the trim is
            // within them and fits u16.
            if unsafe { sys::shim_mbuf_trim(m, (len - n) as u16) } != 0 {
                self.counters.tx_build_cancelled += 1;
                return false; // not reached: the guard frees it
            }
        }
        guard.0 = std::ptr::null_mut();
        self.pending.push(m);
        self.counters.tx_built += 1;
        if self.pending.len() == BURST {
            self.send_pending();
        }
        true
    }

    fn flush(&mut self) {
        if !self.pending.is_empty() {
            self.send_pending();
        }
    }
}

/// The same device, queue 0 of a one-queue port.
impl FrameDevice for Port {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        self.queue.rx_burst(max, sink)
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        self.queue.tx(frame)
    }

    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        self.queue.tx_parts(parts)
    }

    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        self.queue.tx_build(len, build)
    }

    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        self.queue.tx_build_upto(max, build)
    }

    fn flush(&mut self) {
        self.queue.flush()
    }
}

impl Drop for PortQueue {
    fn drop(&mut self) {
        // Queued frames go out (or are freed and counted), never leak; the
        // port closes when the last handle's Arc goes.
        self.flush();
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // memif in DPDK 22.11 tears a link down on its interrupt thread:
        // when the peer port (in this process) closes, that thread runs the
        // disconnect of this port too, freeing its receive mbufs into this
        // port's pool. Closing this port and freeing the pool meanwhile
        // crashed that thread (SIGSEGV in eal-intr-thread, 5 runs in 12 of
        // xdp-floor --pingpong --link memif beside four busy loops). So a
        // memif port whose peer has gone waits (500 ms at most) until its
        // link is seen down, and its pool outlives the close by a moment.
        let memif = self.name.starts_with("net_memif");
        if memif {
            let t0 = std::time::Instant::now();
            // SAFETY: the port id is ours and valid until the close below.
            while unsafe { sys::shim_port_link_up(self.id) } == 1
                && t0.elapsed() < std::time::Duration::from_millis(500)
            {
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
        {
            let _control = control();
            // SAFETY: the port is ours and its last queue handle is gone
            // (this is the Arc's last reference); closing it returns its
            // RX/TX mbufs to the pool, and a device we hot-plugged is
            // removed. The RSS key and the EAL (fields) are dropped after
            // this.
            unsafe {
                sys::shim_port_close(self.id, i32::from(self.plugged));
            }
        }
        if memif {
            // What the interrupt thread was doing for this port finishes
            // before the pool it returns mbufs to is freed.
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // SAFETY: the port is closed and its mbufs are back in the pool,
        // which has no user left.
        unsafe {
            sys::shim_pool_free(self.pool.as_ptr());
        }
        if let Some(p) = &self.queues_file {
            let _ = std::fs::remove_file(p);
        }
    }
}
