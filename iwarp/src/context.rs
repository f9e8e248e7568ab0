//! [`Context`]: one stack instance, its constructors (the simulated pair,
//! any frame device, AF_XDP, DPDK), its counters, and what it makes:
//! protection domains, CQs, shared receive queues, listeners, connections.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use iwarp_datapath::link::MemDevice;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::runtime::{
    spawn_probed, spawn_steered, DeviceReader, Group, Mode, OutputBell, SoftSteering,
};
use iwarp_datapath::stack::{
    add_tcp_stats, Command, CqRing, ListenError, LoopHook, QpCqs, SockId, Stack, StackConfig,
    Steering, Ulp,
};
use iwarp_net::arp::SharedNeighbours;
use iwarp_net::rss::Rss;
use iwarp_proto::mem::MemoryTable;
use iwarp_testlink::{MultiQueuePair, QueueDevice};
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

use crate::cq::CqLoops;
#[cfg(any(feature = "xdp", feature = "dpdk"))]
use crate::host::in_netns;
use crate::host::{device_config, ACK_ROUND};
use crate::router::{Inner, Loop, Router};
#[cfg(feature = "dpdk")]
use crate::{dpdk, DpdkDeviceStats, DpdkOptions};
#[cfg(feature = "xdp")]
use crate::{xdp, XdpDeviceStats, XdpOptions};
use crate::{
    ConnectOptions, ContextStats, Cq, DeviceStats, Error, FrameDevice, HookStatus, HostOptions,
    ListenOptions, Listener, LoopSplit, Pd, Polling, Qp, SctpCounters, Srq, Transport,
};

/// How long [`Context::connect_start`] on a context of several loops waits
/// for the peer's stack to accept a connection before it returns anyway
/// (so that connections started in turn reach a server in that order): a
/// peer of ours acknowledges the MPA Request within a round, a Linux peer
/// within its delayed-ACK timer (40 ms) or with its MPA Reply; a silent
/// peer costs each call this long at most, not the connection's timeout.
pub const ORDER_WAIT: Duration = Duration::from_millis(200);
/// The memory tables of a context's loops: replicas of one table
/// ([`MemoryTable::replicas`]), one per loop. The same seed and the same
/// operations in the same order give the same STags on every loop, and a
/// remote invalidation on one loop refuses the STag on all of them. Every
/// table of a context is made here.
fn loop_tables(seed: u64, loops: usize) -> Vec<MemoryTable> {
    MemoryTable::replicas(seed, loops)
}

/// An AF_XDP device's counters for [`ContextStats::device`].
#[cfg(feature = "xdp")]
fn xdp_reader() -> DeviceReader<xdp::XdpDevice> {
    Box::new(|d| {
        let (socket, kernel) = match d.stats() {
            Ok(s) => (s.ours, Some(s.kernel)),
            Err(_) => (Default::default(), None),
        };
        Box::new(DeviceStats::Xdp(XdpDeviceStats {
            iface: d.iface().to_owned(),
            queue: d.queue(),
            bind: d.xsk_mode(),
            attach: d.attach_mode(),
            multi_buffer: d.multi_buffer(),
            socket,
            kernel,
        }))
    })
}

/// The simulated link's stack settings for host 10.0.0.`last`. The link
/// is memory between two contexts of this process, which nothing can
/// alter: TCP checksums and SCTP's CRC32c are neither computed nor
/// checked (`IfaceConfig::trusted_link`, as between the two ends of a
/// veth).
fn sim_config(last: u8) -> StackConfig {
    let mut icfg = IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0, last]),
        Ipv4Address::new(10, 0, 0, last),
        24,
    );
    icfg.trusted_link = true;
    let mut c = StackConfig::new(icfg);
    c.tcp.rto_min = 5_000_000;
    c.tcp.time_wait = 10_000_000;
    c
}

/// How each frame of a context of several loops reaches the loop that
/// owns its connection.
#[derive(Debug, Clone)]
pub(crate) enum QueueSteering {
    /// The device or link puts each flow on its owner's queue: by RSS
    /// with this key (`Some`: active opens pick ports the RSS brings back
    /// to their loop), or by pairing queues (memif: `None`).
    Link(Option<Rss>),
    /// The sender picks the queue (a veth, a one-queue peer): the loops
    /// pass each frame to the loop this RSS names
    /// ([`SoftSteering`]), and active opens pick ports by it.
    Software(Rss),
}

/// What a backend's context of `n` loops needs checked and made alike:
/// refused with a clear error what several loops cannot do (more than
/// 128 queues, `rx_drop_ppm`), the RSS over the `n`
/// queues with the symmetric key, and loop `i`'s core `host.core + i`.
#[cfg(any(feature = "xdp", feature = "dpdk", feature = "memif"))]
fn several_loops(host: &HostOptions, n: u16) -> Result<(Rss, Option<Vec<usize>>), Error> {
    if n > 128 {
        return Err(Error::InvalidArgument("queue_count must be 1 to 128"));
    }
    if host.rx_drop_ppm != 0 {
        return Err(Error::Unsupported(
            "rx_drop_ppm on a context of several poll loops",
        ));
    }
    let rss =
        Rss::symmetric(n).map_err(|_| Error::InvalidArgument("queue_count must be 1 to 128"))?;
    let cores = host
        .core
        .map(|c| (0..usize::from(n)).map(|i| c + i).collect());
    Ok((rss, cores))
}

/// The memif secret of a link of `n` > 1 queue pairs, as DPDK's memif
/// ports of ours are plugged with ([`iwarp_dpdk::memif_queue_secret`]; a
/// test pins that the two agree where both are built).
#[cfg(feature = "memif")]
pub(crate) fn memif_queue_secret(n: u16) -> Vec<u8> {
    format!("iwarp-queues-{n}").into_bytes()
}

#[cfg(all(test, feature = "memif", feature = "dpdk"))]
#[test]
fn our_memif_queue_secret_is_dpdks() {
    for n in [2, 3, 128] {
        assert_eq!(
            memif_queue_secret(n),
            iwarp_dpdk::memif_queue_secret(n).into_bytes()
        );
    }
}

/// One queue pair of our memif link, as one loop's device: a client's, or
/// a server's (up when a client connects).
#[cfg(feature = "memif")]
#[derive(Debug)]
pub(crate) enum MemifQueue {
    Server(iwarp_memif::MemifServer),
    Client(iwarp_memif::Memif),
}

#[cfg(feature = "memif")]
impl MemifQueue {
    fn device_stats(&self) -> DeviceStats {
        match self {
            MemifQueue::Server(d) => memif_server_stats(d),
            MemifQueue::Client(d) => memif_client_stats(d),
        }
    }
}

/// A memif server end's counters, as [`Context::stats`] reports them.
#[cfg(feature = "memif")]
fn memif_server_stats(d: &iwarp_memif::MemifServer) -> DeviceStats {
    let c = d.connection();
    DeviceStats::Memif(crate::stats::MemifDeviceStats {
        role: iwarp_memif::Role::Server,
        peer: c.map(|c| c.peer_name().to_owned()).unwrap_or_default(),
        ring_size: c.map_or(0, |c| c.ring_size()),
        broken: d.status(),
        counters: d.stats(),
    })
}

/// A memif client end's counters, as [`Context::stats`] reports them.
#[cfg(feature = "memif")]
fn memif_client_stats(d: &iwarp_memif::Memif) -> DeviceStats {
    DeviceStats::Memif(crate::stats::MemifDeviceStats {
        role: iwarp_memif::Role::Client,
        peer: d.peer_name().to_owned(),
        ring_size: d.ring_size(),
        broken: d.broken().map(str::to_owned),
        counters: d.stats(),
    })
}

/// Each call to the queue pair's own device (static dispatch: the loop
/// makes these per frame).
#[cfg(feature = "memif")]
macro_rules! each_end {
    ($q:expr, $d:ident => $e:expr) => {
        match $q {
            MemifQueue::Server($d) => $e,
            MemifQueue::Client($d) => $e,
        }
    };
}

#[cfg(feature = "memif")]
impl FrameDevice for MemifQueue {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        each_end!(self, d => d.rx_burst(max, sink))
    }
    fn tx(&mut self, frame: &[u8]) -> bool {
        each_end!(self, d => d.tx(frame))
    }
    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        each_end!(self, d => d.tx_parts(parts))
    }
    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        each_end!(self, d => d.tx_build(len, build))
    }
    fn tx_build_sg(&mut self, len: usize, build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool) -> bool {
        each_end!(self, d => d.tx_build_sg(len, build))
    }
    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        each_end!(self, d => d.tx_build_upto(max, build))
    }
    fn flush(&mut self) {
        each_end!(self, d => d.flush())
    }
    fn doorbell(&self) -> Option<std::sync::Arc<dyn iwarp_frame::Doorbell>> {
        each_end!(self, d => d.doorbell())
    }
    fn wait(&mut self, timeout: std::time::Duration) {
        each_end!(self, d => d.wait(timeout))
    }
}

/// Frames each loop's software steering inbox holds
/// ([`QueueSteering::Software`]).
const STEER_INBOX: usize = 1024;

/// One stack instance: an interface, an address, a poll loop (or one per
/// receive queue, [`Context::sim_pair_queues`]).
#[derive(Debug, Clone)]
pub struct Context {
    pub(crate) inner: Arc<Inner>,
}

impl Context {
    fn start<D: FrameDevice + 'static>(
        cfg: StackConfig,
        dev: D,
        core: Option<usize>,
        polling: Polling,
        reader: Option<DeviceReader<D>>,
    ) -> Context {
        let cores = core.map(|c| vec![c]);
        let devs = vec![(dev, reader)];
        Self::start_queues(
            cfg,
            devs,
            QueueSteering::Link(None),
            None,
            cores.as_deref(),
            polling,
        )
    }

    /// Start one poll loop per device: loop `i` on `devs[i]` (receive
    /// queue `i` of the context's device, each frame brought to its
    /// owner as `steering` says; one device needs none), pinned to
    /// `cores[i]` when given. With several loops each stack takes its
    /// queue and the RSS, if any (its active opens pick local ports whose
    /// answers land on its queue; with [`QueueSteering::Software`] the
    /// loops pass each frame to the loop the RSS names), connection ids apart
    /// (`i`, `i + n`, ...), the neighbours the other loops learn, and a
    /// memory table like every other's ([`loop_tables`]); the loops
    /// share one output bell. A backend with queues of its own passes its
    /// queue devices here. With [`Polling::Inline`] every loop is inline
    /// (its keeper aside, no thread of its own): application threads
    /// drive them, each CQ the loops of its queue pairs
    /// ([`CqLoops`]). `no_sctp`: why iWARP over SCTP is refused on these loops
    /// (a device whose RSS does not hash SCTP's ports), if it is.
    pub(crate) fn start_queues<D: FrameDevice + 'static>(
        cfg: StackConfig,
        devs: Vec<(D, Option<DeviceReader<D>>)>,
        steering: QueueSteering,
        no_sctp: Option<&'static str>,
        cores: Option<&[usize]>,
        polling: Polling,
    ) -> Context {
        Self::start_queues_mode(cfg, devs, steering, no_sctp, cores, polling.mode())
    }

    /// [`start_queues`](Self::start_queues) with the loops' mode given
    /// as the runtime takes it (tests: an inline mode whose keepers never
    /// take over).
    fn start_queues_mode<D: FrameDevice + 'static>(
        mut cfg: StackConfig,
        devs: Vec<(D, Option<DeviceReader<D>>)>,
        steering: QueueSteering,
        no_sctp: Option<&'static str>,
        cores: Option<&[usize]>,
        mode: Mode,
    ) -> Context {
        let addr = Ipv4Addr::from(cfg.iface.ip.0);
        if cfg.tcp.delayed_ack.is_none() {
            cfg.tcp.delayed_ack = Some(ACK_ROUND);
        }
        // STag indexes and keys must not be guessable by a peer (RFC 5040
        // §8.1.1 item 8): seed the memory table from std's per-process
        // random hasher keys.
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            std::collections::hash_map::RandomState::new()
                .build_hasher()
                .finish()
        };
        let n = devs.len();
        let soft_steering = n > 1 && matches!(steering, QueueSteering::Software(_));
        let tables = loop_tables(seed, n);
        let core_of = |i: usize| cores.and_then(|c| c.get(i).copied());
        let loops: Vec<Loop> = if n == 1 {
            // One loop: exactly the single-queue stack (no steering, its
            // own output bell).
            devs.into_iter()
                .zip(tables)
                .map(|((dev, reader), mem)| {
                    let lp = spawn_probed(
                        Stack::new(cfg.clone(), mem),
                        dev,
                        core_of(0),
                        mode,
                        16_384,
                        reader,
                    );
                    let thread = lp.thread_id();
                    Loop { lp, thread }
                })
                .collect()
        } else {
            let bell = Arc::new(OutputBell::default());
            // The loops number their accepted connections together, so
            // that the router hands requests out in the order the loops
            // accepted them, not the order it pumps the loops in.
            let accept_order = Arc::new(AtomicU64::new(0));
            let neighbours = Arc::new(SharedNeighbours::new());
            let (rss, soft) = match steering {
                QueueSteering::Link(rss) => (rss, None),
                QueueSteering::Software(rss) => {
                    (Some(rss.clone()), Some(SoftSteering::new(rss, STEER_INBOX)))
                }
            };
            devs.into_iter()
                .zip(tables)
                .enumerate()
                .map(|(i, ((dev, reader), mem))| {
                    let mut c = cfg.clone();
                    // i < n <= u16::MAX (queues are numbered in u16).
                    c.steering = rss.clone().map(|rss| Steering {
                        rss,
                        queue: i as u16,
                    });
                    c.sock_ids = (i, n);
                    c.neighbours = Some(neighbours.clone());
                    c.accept_order = Some(accept_order.clone());
                    let group = Group {
                        outputs_bell: bell.clone(),
                        steering: soft.as_ref().and_then(|s| s.queue(i as u16)),
                    };
                    let lp = spawn_steered(
                        Stack::new(c, mem),
                        dev,
                        core_of(i),
                        mode,
                        16_384,
                        reader,
                        group,
                    );
                    let thread = lp.thread_id();
                    Loop { lp, thread }
                })
                .collect()
        };
        Context {
            inner: Arc::new(Inner {
                loops,
                router: Mutex::new(Router::default()),
                addr,
                tokens: AtomicU64::new(1),
                next_loop: AtomicUsize::new(0),
                mem_lock: Mutex::new(()),
                stats_lock: Mutex::new(()),
                no_sctp: if n > 1 { no_sctp } else { None },
                soft_steering,
            }),
        }
    }

    /// Run `f` inside the poll loop after every round until it returns
    /// [`HookStatus::Done`] (run-to-completion, as DPDK applications run):
    /// no thread hand-off between the application and the stack. `f` may
    /// post ([`Qp::post_send`], [`Qp::post_recv`]) and poll
    /// ([`Cq::poll_one`]), which are queue operations; a post is handled
    /// before the round ends (the loop takes what was posted during its
    /// poll and polls once more), so an answer leaves in the round that
    /// received what it answers. It must not block: calls that wait
    /// for the loop (connect, accept, register, ...) fail there with
    /// [`Error::InLoop`], and [`Cq::wait`] would stall the loop. With
    /// [`Polling::Busy`] the loop, and so `f`, runs without pause.
    ///
    /// On a context of several loops ([`sim_pair_queues`](Self::sim_pair_queues))
    /// this is loop 0's; [`Qp::run_in_loop`] runs a hook on the loop that
    /// owns a queue pair, where its posts and completions happen.
    pub fn run_in_loop(&self, f: impl FnMut() -> HookStatus + Send + 'static) -> Result<(), Error> {
        self.inner.post_to(0, Command::Hook(LoopHook(Box::new(f))))
    }

    /// The number of poll loops: 1, or one per receive queue
    /// ([`sim_pair_queues`](Self::sim_pair_queues)).
    pub fn loops(&self) -> usize {
        self.inner.loops.len()
    }

    /// Two contexts joined by the simulated link (10.0.0.1 and 10.0.0.2, an
    /// in-memory Ethernet link between two poll loops). Needs no privileges.
    /// Nothing can alter a frame on it, so TCP checksums and SCTP's CRC32c
    /// are neither computed nor checked, as on a trusted DPDK link
    /// ([`HostOptions::trusted_link`](crate::HostOptions::trusted_link)).
    pub fn sim_pair() -> (Context, Context) {
        Self::sim_pair_with(Polling::Adaptive, None)
    }

    /// [`sim_pair`](Self::sim_pair) with the loops' `polling` and, when
    /// `cores` is given, each loop pinned (the first context's on
    /// `cores.0`, the second's on `cores.1`): how benchmarks run the
    /// in-memory link like a real one.
    pub fn sim_pair_with(polling: Polling, cores: Option<(usize, usize)>) -> (Context, Context) {
        let (da, db) = MemDevice::pair(8192);
        (
            Context::start(sim_config(1), da, cores.map(|c| c.0), polling, None),
            Context::start(sim_config(2), db, cores.map(|c| c.1), polling, None),
        )
    }

    /// Two contexts joined by an in-memory link of `queues` receive queues
    /// per end (`iwarp_testlink::MultiQueuePair`, frames steered to a
    /// queue by the Toeplitz hash of their flow with the symmetric key,
    /// `iwarp_net::rss::Rss::symmetric`; ARP and anything else RSS does
    /// not hash to queue 0), each context with one poll loop per queue
    /// (loop `i` pinned to `cores[i]` when `cores` is given: the first
    /// context's loops on `cores[..queues]`, the second's on
    /// `cores[queues..2 * queues]`). Addresses as [`sim_pair`](Self::sim_pair).
    ///
    /// Each connection belongs to one loop: an active open goes to the
    /// loops in turn and takes a local port whose answers the RSS brings
    /// to its loop's queue; a passive one to the loop its SYN reached.
    /// Listening ports listen on every loop and one [`Listener`] takes
    /// the requests of all. A queue pair's posts, events and
    /// [`Qp::run_in_loop`] hooks go to its loop; CQs and SRQs may be
    /// shared by queue pairs of different loops. Memory (PDs, regions,
    /// windows) is registered in every loop's table, one operation at a
    /// time in loop order, and the results must agree
    /// ([`Error::LoopsDisagree`] otherwise, after what the operation
    /// created on the loops is destroyed again). Loops other than 0 learn
    /// their neighbours from loop 0's ARP through a table the loops
    /// share, looked at only when their own cache misses.
    /// [`Context::stats`] sums the loops and lists each
    /// ([`ContextStats::loops`]).
    ///
    /// iWARP over SCTP ([`Transport::Sctp`]) works as over TCP: SCTP's
    /// ports sit where TCP's do and the RSS hashes them alike. Not
    /// available: active opens over [`Transport::SctpOverUdp`]
    /// ([`connect`](Self::connect) refuses them, [`Error::Unsupported`]).
    /// With [`Polling::Inline`] no loop has a thread that spins: the
    /// application's threads drive them (which loops a poll, a wait or
    /// a setup call drives: [`Polling::Inline`]).
    /// Refused here:
    /// `queues` 0 or above 128, and fewer `cores` than `2 * queues`
    /// ([`Error::InvalidArgument`]). One queue is [`sim_pair_with`](Self::sim_pair_with).
    ///
    /// ```
    /// use std::net::SocketAddrV4;
    /// use std::time::Duration;
    /// use iwarp::{ConnectOptions, Context, ListenOptions, Polling};
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let (server, client) = Context::sim_pair_queues(2, Polling::Adaptive, None)?;
    /// assert_eq!((server.loops(), client.loops()), (2, 2));
    /// let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
    /// let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
    /// let listener = server.listen(7000, &ListenOptions::new(&spd))?;
    /// let to = SocketAddrV4::new(server.addr(), 7000);
    /// let t = std::thread::spawn(move || {
    ///     let a = client.connect(to, &ConnectOptions::new(&cpd, &ccq))?;
    ///     let b = client.connect(to, &ConnectOptions::new(&cpd, &ccq))?;
    ///     Ok::<_, iwarp::Error>((client, a, b))
    /// });
    /// let s1 = listener.get_request(Duration::from_secs(5))?.accept(&Default::default(), &scq)?;
    /// let s2 = listener.get_request(Duration::from_secs(5))?.accept(&Default::default(), &scq)?;
    /// let (client, a, b) = t.join().unwrap()?;
    /// // The client's two connections went to its two loops.
    /// assert_ne!(a.loop_index(), b.loop_index());
    /// assert_ne!(s1.loop_index(), s2.loop_index());
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn sim_pair_queues(
        queues: u16,
        polling: Polling,
        cores: Option<&[usize]>,
    ) -> Result<(Context, Context), Error> {
        Self::sim_pair_queues_with(queues, polling, cores, false)
    }

    /// [`sim_pair_queues`](Self::sim_pair_queues) over a link that
    /// delivers every frame for the first context to its queue 0, as a
    /// peer that picks the receiving queue itself would (a veth's sender
    /// does; a one-queue sender sends on one): the first context steers
    /// in software, each loop passing the frames of connections another
    /// loop owns to that loop (the RSS of `sim_pair_queues` names the
    /// owner; [`LoopStats`](crate::LoopStats)'s `steered_out`,
    /// `steered_in`, `steer_dropped`). The second context is as in
    /// `sim_pair_queues`. For tests of software steering; refusals as
    /// `sim_pair_queues`.
    pub fn sim_pair_queues_soft(
        queues: u16,
        polling: Polling,
        cores: Option<&[usize]>,
    ) -> Result<(Context, Context), Error> {
        Self::sim_pair_queues_with(queues, polling, cores, true)
    }

    fn sim_pair_queues_with(
        queues: u16,
        polling: Polling,
        cores: Option<&[usize]>,
        soft: bool,
    ) -> Result<(Context, Context), Error> {
        if queues == 0 || queues > 128 {
            return Err(Error::InvalidArgument("queues must be 1 to 128"));
        }
        let n = usize::from(queues);
        if cores.is_some_and(|c| c.len() < 2 * n) {
            return Err(Error::InvalidArgument(
                "cores must name a core for every loop of both contexts (2 × queues)",
            ));
        }
        if queues == 1 {
            let cores = cores.map(|c| (c[0], c[1]));
            return Ok(Self::sim_pair_with(polling, cores));
        }
        Self::sim_pair_queues_mode(queues, polling.mode(), cores, soft)
    }

    /// Inline contexts of `queues` loops (2 to 128) whose keepers never
    /// take over (a grace of a day): whatever the loops do, application
    /// threads drove them. For tests that fail when a loop is never
    /// driven; with `soft`, [`sim_pair_queues_soft`](Self::sim_pair_queues_soft)'s link.
    #[cfg(test)]
    pub(crate) fn sim_pair_queues_keeperless(
        queues: u16,
        soft: bool,
    ) -> Result<(Context, Context), Error> {
        if queues < 2 {
            return Err(Error::InvalidArgument("queues must be 2 to 128"));
        }
        let mode = Mode::Inline {
            grace: Duration::from_secs(86_400),
            spins: 200,
            max_sleep: Duration::from_micros(200),
        };
        Self::sim_pair_queues_mode(queues, mode, None, soft)
    }

    /// [`sim_pair_queues_with`](Self::sim_pair_queues_with) of 2 to 128
    /// queues (checked by the caller), the loops in `mode`.
    fn sim_pair_queues_mode(
        queues: u16,
        mode: Mode,
        cores: Option<&[usize]>,
        soft: bool,
    ) -> Result<(Context, Context), Error> {
        let n = usize::from(queues);
        let rss = Rss::symmetric(queues)
            .map_err(|_| Error::InvalidArgument("queues must be 1 to 128"))?;
        let steer = rss.clone();
        let (link, first) = if soft {
            let link = MultiQueuePair::with_steering(
                queues,
                8192,
                |_| None,
                move |f| steer.queue_of_frame(f),
            );
            (link, QueueSteering::Software(rss.clone()))
        } else {
            let link = MultiQueuePair::new(queues, 8192, move |f| steer.queue_of_frame(f));
            (link, QueueSteering::Link(Some(rss.clone())))
        };
        let devs = |d: Vec<QueueDevice>| -> Vec<(QueueDevice, Option<DeviceReader<QueueDevice>>)> {
            d.into_iter().map(|d| (d, None)).collect()
        };
        let (ca, cb) = match cores {
            Some(c) => (Some(&c[..n]), Some(&c[n..2 * n])),
            None => (None, None),
        };
        Ok((
            Context::start_queues_mode(sim_config(1), devs(link.a), first, None, ca, mode),
            Context::start_queues_mode(
                sim_config(2),
                devs(link.b),
                QueueSteering::Link(Some(rss)),
                None,
                cb,
                mode,
            ),
        ))
    }

    /// A context over `dev`, any frame device: one the application made
    /// (a backend of its own, a test link, a wrapper such as
    /// `iwarp_frame::RxLoss`), with its Ethernet address `mac` and `mtu`,
    /// the largest IP datagram it carries (`host.mtu` may ask for less,
    /// not more). `host.netns` does not apply (the device is open
    /// already); the rest of `host` does. `Context::af_xdp` and
    /// `Context::dpdk` (features `xdp`, `dpdk`) open their backend's
    /// device and start it the same way.
    /// [`ContextStats::device`] is [`DeviceStats::Other`].
    ///
    /// ```
    /// use std::sync::mpsc::{channel, Receiver, Sender};
    /// use std::time::Duration;
    /// use iwarp::{Context, FrameDevice, HostOptions, ListenOptions};
    ///
    /// /// One end of a point-to-point Ethernet link made of two channels.
    /// struct Wire {
    ///     tx: Sender<Vec<u8>>,
    ///     rx: Receiver<Vec<u8>>,
    /// }
    ///
    /// impl FrameDevice for Wire {
    ///     fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
    ///         let mut n = 0;
    ///         while n < max {
    ///             let Ok(frame) = self.rx.try_recv() else { break };
    ///             sink(&frame);
    ///             n += 1;
    ///         }
    ///         n
    ///     }
    ///     fn tx(&mut self, frame: &[u8]) -> bool {
    ///         self.tx.send(frame.to_vec()).is_ok()
    ///     }
    /// }
    ///
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let ((to_b, from_a), (to_a, from_b)) = (channel(), channel());
    /// let a = Wire { tx: to_b, rx: from_b };
    /// let b = Wire { tx: to_a, rx: from_a };
    /// let host = |ip: &str| HostOptions::new(ip.parse().unwrap(), 24);
    /// let server = Context::with_device(a, [2, 0, 0, 0, 0, 1], 1500, &host("10.0.0.1"))?;
    /// let client = Context::with_device(b, [2, 0, 0, 0, 0, 2], 1500, &host("10.0.0.2"))?;
    ///
    /// let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
    /// let listener = server.listen(7000, &ListenOptions::new(&spd))?;
    /// let scq = server.create_cq(16);
    /// let t = std::thread::spawn(move || {
    ///     let req = listener.get_request(Duration::from_secs(5))?;
    ///     req.accept(&Default::default(), &scq).map(|qp| (qp, scq))
    /// });
    /// let ccq = client.create_cq(16);
    /// let remote = std::net::SocketAddrV4::new(server.addr(), 7000);
    /// let qp = client.connect(remote, &iwarp::ConnectOptions::new(&cpd, &ccq))?;
    /// let (_sqp, _scq) = t.join().unwrap()?;
    /// # let _ = qp;
    /// # Ok(()) }
    /// ```
    pub fn with_device<D: FrameDevice + 'static>(
        dev: D,
        mac: [u8; 6],
        mtu: usize,
        host: &HostOptions,
    ) -> Result<Context, Error> {
        host.check()?;
        let cfg = device_config("the device", mac, mtu, host)?;
        let reader: DeviceReader<D> = Box::new(|_| Box::new(DeviceStats::Other));
        Ok(Self::launch(cfg, dev, host, reader))
    }

    /// Start the loop over an open device: with `host.rx_drop_ppm`, behind
    /// [`iwarp_frame::RxLoss`].
    fn launch<D: FrameDevice + 'static>(
        cfg: StackConfig,
        dev: D,
        host: &HostOptions,
        mut reader: DeviceReader<D>,
    ) -> Context {
        if host.rx_drop_ppm == 0 {
            return Context::start(cfg, dev, host.core, host.polling, Some(reader));
        }
        tracing::warn!(
            ppm = host.rx_drop_ppm,
            "dropping received frames at random (HostOptions::rx_drop_ppm)"
        );
        let seed = u64::from(u32::from(host.ip)) ^ 0x6c6f_7373;
        let dev = iwarp_frame::RxLoss::new(dev, host.rx_drop_ppm, seed);
        let reader: DeviceReader<iwarp_frame::RxLoss<D>> = Box::new(move |d| reader(d.inner()));
        Context::start(cfg, dev, host.core, host.polling, Some(reader))
    }

    /// A context on an interface through AF_XDP (feature `xdp`; needs
    /// root or CAP_NET_ADMIN + CAP_BPF + CAP_NET_RAW, and CAP_IPC_LOCK or
    /// a memlock limit above the UMEM).
    #[cfg(feature = "xdp")]
    pub fn af_xdp(opts: &XdpOptions) -> Result<Context, Error> {
        let host = &opts.host;
        host.check()?;
        if opts.queue_count > 1 {
            return Self::af_xdp_queues(opts);
        }
        let xcfg = opts.config();
        let dev = match &host.netns {
            Some(p) => in_netns(p, || xdp::XdpDevice::open(&xcfg))??,
            None => xdp::XdpDevice::open(&xcfg)?,
        };
        let mut cfg = device_config(dev.iface(), dev.mac_address(), dev.mtu() as usize, host)?;
        if let Some(p) = &opts.share_address {
            // Outgoing connections take their local ports from the range
            // the XDP program steers.
            cfg.ephemeral_base = p.local_from;
        }
        tracing::info!(
            iface = dev.iface(),
            shared_address = dev.shares_address(),
            queue = dev.queue(),
            bind = ?dev.xsk_mode(),
            attach = ?dev.attach_mode(),
            multi_buffer = dev.multi_buffer(),
            mtu = cfg.iface.mtu,
            ip = %host.ip,
            "AF_XDP device open"
        );
        for w in dev.warnings() {
            tracing::warn!("AF_XDP: {w}");
        }
        Ok(Self::launch(cfg, dev, host, xdp_reader()))
    }

    /// [`af_xdp`](Self::af_xdp) with [`XdpOptions::queue_count`] above 1:
    /// a socket and a poll loop per queue, software steering between them.
    #[cfg(feature = "xdp")]
    fn af_xdp_queues(opts: &XdpOptions) -> Result<Context, Error> {
        let host = &opts.host;
        let n = opts.queue_count;
        let (rss, cores) = several_loops(host, n)?;
        if opts.share_address.is_some() {
            return Err(Error::Unsupported(
                "share_address on an AF_XDP context of several poll loops",
            ));
        }
        let xcfg = opts.config();
        let open = || xdp::XdpDevice::open_queues(&xcfg, u32::from(n));
        let opened = match &host.netns {
            Some(p) => in_netns(p, open)?,
            None => open(),
        };
        let devs = match opened {
            // The first queues bound and a later one could not: the
            // interface has fewer queues (the kernel refuses a queue at
            // or past its count with EINVAL).
            Err(xdp::Error::Bind { queue, errno, .. })
                if queue > xcfg.queue
                    && std::io::Error::from_raw_os_error(errno).kind()
                        == std::io::ErrorKind::InvalidInput =>
            {
                return Err(Error::InvalidArgument(
                    "queue_count is above the interface's receive queues \
                     (an AF_XDP socket could not bind to a queue past them)",
                ));
            }
            r => r?,
        };
        let Some(first) = devs.first() else {
            return Err(Error::InvalidArgument("queue_count must be 1 to 128"));
        };
        let cfg = device_config(
            first.iface(),
            first.mac_address(),
            first.mtu() as usize,
            host,
        )?;
        tracing::info!(
            iface = first.iface(),
            queues = n,
            first_queue = first.queue(),
            bind = ?first.xsk_mode(),
            attach = ?first.attach_mode(),
            multi_buffer = first.multi_buffer(),
            mtu = cfg.iface.mtu,
            ip = %host.ip,
            "AF_XDP device open, software steering between its queues' loops"
        );
        for w in devs.iter().flat_map(|d| d.warnings()) {
            tracing::warn!("AF_XDP: {w}");
        }
        let devs = devs.into_iter().map(|d| (d, Some(xdp_reader()))).collect();
        Ok(Self::start_queues(
            cfg,
            devs,
            QueueSteering::Software(rss),
            None,
            cores.as_deref(),
            host.polling,
        ))
    }

    /// A context on a DPDK ethdev port (feature `dpdk`): a PCI device or
    /// `--vdev` the EAL knows, or devargs such as
    /// `net_af_packet0,iface=eth1` that are hot-plugged now. `eal` is the
    /// process's one EAL ([`dpdk::Eal::init`], once per process); several
    /// contexts (ports) share it.
    ///
    /// ```no_run
    /// use iwarp::{dpdk::Eal, Context, DpdkOptions};
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let eal = Eal::init(Eal::vdev_args(&[]))?;
    /// let opts = DpdkOptions::new("net_af_packet0,iface=eth1", "10.0.0.1".parse().unwrap(), 24);
    /// let ctx = Context::dpdk(&eal, &opts)?;
    /// # let _ = ctx; Ok(()) }
    /// ```
    #[cfg(feature = "dpdk")]
    pub fn dpdk(eal: &dpdk::Eal, opts: &DpdkOptions) -> Result<Context, Error> {
        let host = &opts.host;
        host.check()?;
        // A DPDK port has no MTU of its own to cap (its driver takes what
        // the port is configured with): `host.mtu` configures it, 1500 by
        // default, and its mbufs are sized to hold such a frame whole.
        let mtu = host
            .mtu
            .map_or(dpdk::DEFAULT_MTU, |m| u16::try_from(m).unwrap_or(u16::MAX));
        if opts.queue_count > 1 {
            return Self::dpdk_queues(eal, opts, mtu);
        }
        let open = || dpdk::Port::open_mtu(eal, &opts.port, opts.queues, mtu);
        let dev = match &host.netns {
            Some(p) => in_netns(p, open)??,
            None => open()?,
        };
        let cfg = device_config(dev.name(), dev.mac_address(), usize::from(dev.mtu()), host)?;
        tracing::info!(port = dev.name(), mtu = cfg.iface.mtu, ip = %host.ip, "DPDK port open");
        let reader: DeviceReader<dpdk::Port> = Box::new(|d| {
            Box::new(DeviceStats::Dpdk(DpdkDeviceStats {
                port: d.name().to_owned(),
                counters: d.counters(),
                driver: d.stats().ok(),
            }))
        });
        Ok(Self::launch(cfg, dev, host, reader))
    }

    /// A context on one end of our own memif link (feature `memif`; no
    /// DPDK, no kernel in the path): see [`MemifOptions`](crate::MemifOptions). A server
    /// listens and returns at once, its link up once a client connects
    /// (and again when another connects after it left); a client connects
    /// before it returns. The MTU is `host.mtu` (1500 if `None`) and both
    /// ends need the same.
    #[cfg(feature = "memif")]
    pub fn memif(opts: &crate::MemifOptions) -> Result<Context, Error> {
        use iwarp_memif::{Memif, MemifServer, Role};
        let host = &opts.host;
        host.check()?;
        let mtu = host.mtu.unwrap_or(1500);
        if !(576..=65_000).contains(&mtu) {
            return Err(Error::InvalidArgument("memif MTU outside 576..=65000"));
        }
        let mut link = opts.link.clone().with_mtu(mtu);
        let name = format!("memif:{}", opts.link.socket.display());
        let cfg = device_config(&name, opts.mac(), mtu, host)?;
        if opts.queue_count != 1 {
            if link.secret.is_empty() {
                link.secret = memif_queue_secret(opts.queue_count);
            }
            return Self::memif_queues(opts, link, cfg);
        }
        if opts.role == Role::Server {
            let dev = MemifServer::bind(link).map_err(Error::Memif)?;
            tracing::info!(socket = %opts.link.socket.display(), mtu, ip = %host.ip, "memif server listening");
            let reader: DeviceReader<MemifServer> = Box::new(|d| Box::new(memif_server_stats(d)));
            return Ok(Self::launch(cfg, dev, host, reader));
        }
        let dev = Memif::connect(&link).map_err(Error::Memif)?;
        tracing::info!(
            socket = %opts.link.socket.display(),
            peer = dev.peer_name(),
            ring = dev.ring_size(),
            mtu,
            ip = %host.ip,
            "memif client connected"
        );
        let reader: DeviceReader<Memif> = Box::new(|d| Box::new(memif_client_stats(d)));
        Ok(Self::launch(cfg, dev, host, reader))
    }

    /// [`memif`](Self::memif) with [`MemifOptions::queue_count`](crate::MemifOptions::queue_count)
    /// other than 1: a poll loop per queue pair, frames steered in
    /// software (memif has no RSS).
    #[cfg(feature = "memif")]
    fn memif_queues(
        opts: &crate::MemifOptions,
        link: iwarp_memif::Config,
        cfg: StackConfig,
    ) -> Result<Context, Error> {
        use iwarp_memif::{Memif, MemifServer, Role};
        let host = &opts.host;
        let n = opts.queue_count;
        if n == 0 {
            return Err(Error::InvalidArgument("queue_count must be 1 to 128"));
        }
        let (rss, cores) = several_loops(host, n)?;
        let socket = link.socket.display().to_string();
        let queues: Vec<MemifQueue> = match opts.role {
            Role::Server => MemifServer::bind_queues(link, n)
                .map_err(Error::Memif)?
                .into_iter()
                .map(MemifQueue::Server)
                .collect(),
            Role::Client => Memif::connect_queues(&link, n)
                .map_err(Error::Memif)?
                .into_iter()
                .map(MemifQueue::Client)
                .collect(),
        };
        let devs = queues
            .into_iter()
            .map(|d| {
                let reader: DeviceReader<MemifQueue> = Box::new(|d| Box::new(d.device_stats()));
                (d, Some(reader))
            })
            .collect();
        tracing::info!(%socket, queues = n, role = ?opts.role, mtu = cfg.iface.mtu, ip = %host.ip, "memif link of several queue pairs");
        Ok(Self::start_queues(
            cfg,
            devs,
            QueueSteering::Software(rss),
            None,
            cores.as_deref(),
            host.polling,
        ))
    }

    /// [`dpdk`](Self::dpdk) with [`DpdkOptions::queue_count`] above 1: a
    /// poll loop per queue of the port.
    #[cfg(feature = "dpdk")]
    fn dpdk_queues(eal: &dpdk::Eal, opts: &DpdkOptions, mtu: u16) -> Result<Context, Error> {
        let host = &opts.host;
        let n = opts.queue_count;
        let (rss, cores) = several_loops(host, n)?;
        let key = iwarp_net::rss::SYMMETRIC_KEY;
        let open = || dpdk::Port::open_queues(eal, &opts.port, n, opts.queues, mtu, Some(key));
        let devs = match &host.netns {
            Some(p) => in_netns(p, open)??,
            None => open()?,
        };
        let Some(first) = devs.first() else {
            return Err(Error::InvalidArgument("queue_count must be 1 to 128"));
        };
        // The driver's RSS brings each flow to its owner's queue. Without
        // it a flow's frames arrive on whatever queue the sender chose
        // (memif: the peer's queue of the same number; a one-queue peer:
        // queue 0), so the loops pass each frame on to the loop the same
        // hash names (software steering); a memif peer of ours with as
        // many queues sends each flow on that queue already.
        let steering = if first.rss() {
            QueueSteering::Link(Some(rss))
        } else {
            QueueSteering::Software(rss)
        };
        // A driver whose RSS hashes TCP but not SCTP over IPv4 puts an
        // association's frames on a queue that its ports do not choose:
        // SCTP is refused there (software steering would hash every
        // frame again, TCP's too).
        let no_sctp = (first.rss() && !first.rss_hashes_sctp()).then_some(
            "iWARP over SCTP on a DPDK port of several queues whose driver's RSS \
             does not hash SCTP over IPv4 (RTE_ETH_RSS_NONFRAG_IPV4_SCTP)",
        );
        let cfg = device_config(
            first.name(),
            first.mac_address(),
            usize::from(first.mtu()),
            host,
        )?;
        tracing::info!(
            port = first.name(),
            queues = n,
            rss = first.rss(),
            mtu = cfg.iface.mtu,
            ip = %host.ip,
            "DPDK port open"
        );
        let devs = devs
            .into_iter()
            .map(|d| {
                let reader: DeviceReader<dpdk::PortQueue> = Box::new(|d| {
                    Box::new(DeviceStats::Dpdk(DpdkDeviceStats {
                        port: format!("{} queue {}", d.name(), d.queue()),
                        counters: d.counters(),
                        driver: d.stats().ok(),
                    }))
                });
                (d, Some(reader))
            })
            .collect();
        Ok(Self::start_queues(
            cfg,
            devs,
            steering,
            no_sctp,
            cores.as_deref(),
            host.polling,
        ))
    }

    /// The context's poll loop has a thread of its own on the one CPU
    /// the application that created the context may use (a process
    /// confined with `taskset -c N`, a one-CPU container). A busy loop
    /// there yields after each idle round instead of spinning out its
    /// time slice, and [`Cq::poll_one`] and [`Cq::poll`] yield after an
    /// empty look; an application that waits by spinning on memory (a
    /// Write's last octet, as perftest's latency tests do) should yield
    /// between looks too, or each message waits for its time slice to end.
    /// Never true for [`Polling::Inline`]: the application's thread is
    /// the loop.
    pub fn shares_cpu(&self) -> bool {
        self.inner.loops[0].lp.shares_cpu()
    }

    /// Our address.
    pub fn addr(&self) -> Ipv4Addr {
        self.inner.addr
    }

    /// The running stack's counters: the host stack's, TCP's (summed over
    /// open and ended connections), the interface's, the poll loop's and
    /// the device's (with the bind mode obtained). Two round trips to the
    /// loop (a command, then a snapshot at the end of a round); nothing is
    /// reset. Not from inside the loop ([`Error::InLoop`]).
    pub fn stats(&self) -> Result<ContextStats, Error> {
        let _one = match self.inner.stats_lock.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        let mut sum: Option<ContextStats> = None;
        let mut loops = Vec::with_capacity(self.inner.loops.len());
        for (i, l) in self.inner.loops.iter().enumerate() {
            let (stack, tcp, iface, connections, listeners) = self.inner.inspect_on(i, |s| {
                (
                    s.stats(),
                    s.tcp_totals(),
                    *s.iface().stats(),
                    s.connections(),
                    s.listening_ports(),
                )
            })?;
            let (poll_loop, device) =
                l.lp.snapshot(Duration::from_secs(10))
                    .ok_or(Error::Stopped)?;
            let device = match device.downcast::<DeviceStats>() {
                Ok(d) => *d,
                Err(_) => DeviceStats::Sim,
            };
            loops.push(LoopSplit {
                connections,
                rx_tcp: iface.rx_tcp,
                tx_frames: iface.tx_frames,
                tcp_delivered: tcp.delivered,
                poll_loop,
            });
            match &mut sum {
                None => {
                    sum = Some(ContextStats {
                        stack,
                        tcp,
                        iface,
                        connections,
                        listeners,
                        poll_loop,
                        device,
                        loops: Vec::new(),
                    })
                }
                Some(t) => {
                    t.stack.add(&stack);
                    add_tcp_stats(&mut t.tcp, &tcp);
                    t.iface.add(&iface);
                    t.connections += connections;
                    // Every loop listens on every port.
                    t.listeners = t.listeners.max(listeners);
                    t.poll_loop.add(&poll_loop);
                }
            }
        }
        let mut s = sum.ok_or(Error::Stopped)?;
        s.loops = loops;
        Ok(s)
    }

    /// The counters of the stack's SCTP part (`None` until the first
    /// SCTP listen or connect): SCTP packets, retransmissions, T3
    /// expiries, discards, summed over live associations, and those of
    /// closed ones. Not from inside the loop ([`Error::InLoop`]).
    /// On a context of several loops, summed over the loops that have an
    /// SCTP part ([`SctpCounters::add`]: `qp_held_max` is the largest),
    /// as [`stats`](Self::stats) sums them; `None` if none has.
    pub fn sctp_stats(&self) -> Result<Option<SctpCounters>, Error> {
        let mut sum: Option<SctpCounters> = None;
        for i in 0..self.inner.loops.len() {
            let Some(c) = self.inner.inspect_on(i, |s| s.sctp_counters())? else {
                continue;
            };
            match &mut sum {
                None => sum = Some(c),
                Some(t) => t.add(&c),
            }
        }
        Ok(sum)
    }

    /// A protection domain.
    pub fn alloc_pd(&self) -> Result<Pd, Error> {
        // A PD the loops do not agree on is freed again on each.
        let id = self.inner.memory_or_undo(
            |m| m.alloc_pd(),
            |m, id| {
                let _ = m.dealloc_pd(id);
            },
        )?;
        Ok(Pd {
            ctx: self.clone(),
            id,
        })
    }

    /// A completion queue of `depth` entries (size it for every queue that
    /// completes on it: an overrun loses completions, see [`Cq::overrun`]).
    /// On an inline context of several loops its polls drive the loops of
    /// the queue pairs connected or accepted with it ([`Polling::Inline`]).
    pub fn create_cq(&self, depth: usize) -> Cq {
        Cq {
            ring: Arc::new(CqRing::new(depth)),
            notify: Arc::new(OnceLock::new()),
            drive: self.cq_loops(),
            yields: self.inner.loops[0].lp.shares_cpu(),
        }
    }

    /// What a new CQ drives on an inline context (`None` with loop
    /// threads): every loop's driver, all of them its owners when the
    /// loops steer in software ([`CqLoops`]).
    fn cq_loops(&self) -> Option<Arc<CqLoops>> {
        let loops: Option<Vec<_>> = self.inner.loops.iter().map(|l| l.lp.driver()).collect();
        Some(Arc::new(CqLoops::new(loops?, self.inner.soft_steering)))
    }

    /// A shared receive queue of `depth` buffers: queue pairs created with it
    /// ([`ConnectOptions::srq`], [`ListenOptions::srq`]) take their receive
    /// buffers from it.
    pub fn create_srq(&self, depth: usize) -> Srq {
        Srq {
            inner: iwarp_proto::qp::Srq::new(depth),
        }
    }

    /// Listen on `port`; connection requests come from
    /// [`Listener::get_request`]. The port listens once this returns (a
    /// connect made afterwards is not refused); dropping the [`Listener`]
    /// closes it. [`Error::AddrInUse`] if the port already listens.
    ///
    /// On a context of several loops the port listens on every loop
    /// (all or none: a refusal by one closes it on the others), over TCP
    /// or SCTP: an SCTP INIT is answered by the loop it reaches, which owns
    /// the association (all its packets hash there). Refused
    /// ([`Error::Unsupported`]) over SCTP on a DPDK port whose driver's
    /// RSS does not hash SCTP.
    pub fn listen(&self, port: u16, opts: &ListenOptions) -> Result<Listener, Error> {
        self.refuse_sctp_on_loops(opts.transport, false)?;
        let srq = opts.srq.as_ref().map(|s| s.inner.clone());
        let ulp = Ulp::Iwarp {
            mpa: opts.mpa.clone(),
            params: opts.params(),
            manual: true,
            cq: None,
            srq,
        };
        let n = self.inner.loops.len();
        let mut first_err = None;
        let mut listening = Vec::with_capacity(n);
        for i in 0..n {
            let posted = self.inner.post_to(
                i,
                Command::Listen {
                    port,
                    transport: opts.transport.lower(),
                    ulp: ulp.clone(),
                },
            );
            let r = posted.and_then(|()| {
                self.inner
                    .wait(Duration::from_secs(10), |r| r.listening.remove(&(i, port)))?
                    .map_err(|e| match e {
                        ListenError::PortInUse => Error::AddrInUse,
                        ListenError::Unsupported(why) => Error::LocalRefused(why),
                    })
            });
            match r {
                Ok(()) => listening.push(i),
                Err(e) => {
                    first_err = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = first_err {
            // Close it where it listens already.
            for i in listening {
                if self.inner.post_to(i, Command::Unlisten(port)).is_ok() {
                    let _ = self.inner.wait(Duration::from_secs(5), |r| {
                        r.unlistened.remove(&(i, port)).then_some(())
                    });
                }
            }
            return Err(e);
        }
        Ok(Listener {
            ctx: self.clone(),
            port,
        })
    }

    /// What a context of several loops refuses over SCTP: everything
    /// where its device's RSS does not hash SCTP's ports (`Inner::no_sctp`),
    /// and active opens over UDP (`connect`): their outer UDP ports, 9899
    /// both ways, are what RSS hashes, the same for every association, so
    /// no local port brings the answers to the loop that opens. (A
    /// listener takes associations that arrive inside UDP: all of one
    /// peer's packets hash alike, so the loop they reach owns it.)
    fn refuse_sctp_on_loops(&self, transport: Transport, connect: bool) -> Result<(), Error> {
        if self.inner.loops.len() == 1 || transport == Transport::Mpa {
            return Ok(());
        }
        if let Some(why) = self.inner.no_sctp {
            return Err(Error::Unsupported(why));
        }
        if connect && transport == Transport::SctpOverUdp {
            return Err(Error::Unsupported(
                "iWARP over SCTP over UDP from a context of several poll loops: the outer \
                 UDP ports (9899 both ways) are what RSS hashes, the same for every \
                 association, so no local port brings the answers to the opening loop \
                 (Transport::Sctp works there)",
            ));
        }
        Ok(())
    }

    /// Connect to `to` and run the MPA exchange; returns the connected
    /// queue pair once in full operation (or why not). On a context of
    /// several loops the connection goes to the next loop in turn, over
    /// TCP or SCTP alike: its local port is one whose answers RSS brings
    /// to that loop. Refused there ([`Error::Unsupported`]):
    /// [`Transport::SctpOverUdp`] (RSS hashes its outer UDP ports, 9899
    /// both ways, so no local port steers the answers), and SCTP on a
    /// DPDK port whose driver's RSS does not hash SCTP.
    pub fn connect(&self, to: SocketAddrV4, opts: &ConnectOptions) -> Result<Qp, Error> {
        self.connect_start(to, opts)?.finish()
    }

    /// [`connect`](Self::connect) in two halves: this one hands the
    /// connection to its poll loop, and [`Connecting::finish`] waits for
    /// the outcome. Programs that open several connections to one server
    /// and match them by order (perftest with `-q N` matches its queue
    /// pairs by the order the server accepts them) start them here one
    /// after the other and wait elsewhere: the SYNs (or INITs) go out in
    /// the order of these calls, as a kernel RNIC sends its connection
    /// requests in the order `rdma_connect` is called.
    ///
    /// On a context of one loop this returns at once: the loop sends the
    /// SYNs in the order it takes the calls. On a context of several the
    /// connections go to the loops in turn, each of which sends at its
    /// own pace, and a server of several loops takes them on the queues
    /// their flows hash to, each loop at its own pace too; so here this
    /// returns only once the server's stack has accepted the connection
    /// (the TCP handshake done and the MPA Request acknowledged; over
    /// SCTP, the association up), one round trip, or once the connection
    /// failed, or after [`ORDER_WAIT`] (a silent or slow peer: the order
    /// is then not kept) or `ConnectOptions::timeout` if shorter (the
    /// outcome is `finish`'s). A server of ours, one loop or several, then takes the
    /// requests ([`Listener::get_request`]) in the order of these calls.
    /// Called inside a loop, it does not wait.
    /// Dropping the [`Connecting`] unfinished aborts the connection.
    pub fn connect_start(
        &self,
        to: SocketAddrV4,
        opts: &ConnectOptions,
    ) -> Result<Connecting, Error> {
        if opts.mpa.private_data.len() > 512 {
            return Err(Error::InvalidArgument("private data over 512 octets"));
        }
        if opts.transport != Transport::Mpa
            && opts.mpa.private_data.len() > iwarp_control::sctp::MAX_ULP_PRIVATE_DATA
        {
            return Err(Error::InvalidArgument(
                "private data over 508 octets (SCTP: the IRD/ORD word takes 4)",
            ));
        }
        self.refuse_sctp_on_loops(opts.transport, true)?;
        let lp = match (opts.loop_index, self.inner.loops.len()) {
            (Some(i), n) if i >= n => {
                return Err(Error::InvalidArgument(
                    "ConnectOptions::loop_index: no such poll loop",
                ))
            }
            (Some(i), _) => i,
            (None, 1) => 0,
            (None, n) => self.inner.next_loop.fetch_add(1, Ordering::Relaxed) % n,
        };
        let token = self.inner.tokens.fetch_add(1, Ordering::Relaxed);
        let remote = Ipv4Address(to.ip().octets());
        let cqs = opts.cqs();
        // Inline: polls of its CQs drive its loop from now on.
        opts.cq.serve_loop(lp);
        if let Some(r) = &opts.recv_cq {
            r.serve_loop(lp);
        }
        self.inner.post_to(
            lp,
            Command::Connect {
                token,
                remote,
                port: to.port(),
                transport: opts.transport.lower(),
                ulp: Ulp::Iwarp {
                    mpa: opts.mpa.clone(),
                    params: opts.params(),
                    manual: false,
                    cq: Some(cqs.clone()),
                    srq: opts.srq.as_ref().map(|s| s.inner.clone()),
                },
            },
        )?;
        for (wr_id, sgl) in &opts.recvs {
            self.inner.post_to(
                lp,
                Command::IwarpOpening(token, HostCommand::PostRecv(*wr_id, *sgl)),
            )?;
        }
        let deadline = Instant::now() + opts.timeout;
        if self.inner.loops.len() > 1 {
            self.until_accepted(lp, token, deadline.min(Instant::now() + ORDER_WAIT));
        }
        Ok(Connecting {
            ctx: self.clone(),
            token: Some(token),
            deadline,
            cqs,
            lp,
        })
    }

    /// On a context of several loops, wait (until `deadline`) for the
    /// connection opened under `token` on loop `lp` to be accepted by the
    /// peer's stack: its TCP handshake done and the first octets it sent
    /// (the MPA Request) acknowledged ([`Stack::tcp_acked`]).
    ///
    /// Why: the next connection goes out from another loop, and a server
    /// of several loops takes each on the queue its flow hashes to, so
    /// neither the order the SYNs leave in nor the order the server's
    /// loops accept them follows the order of the calls by itself (a loop
    /// slow to take the ACK that completes one handshake accepts it after
    /// another loop has done the next one's). A peer that has
    /// acknowledged the Request has accepted the connection: it numbers
    /// it before anything the next connection brings.
    ///
    /// The outcome stays in the router for [`Connecting::finish`]. A
    /// connection that fails, over SCTP (no TCP stream: the association
    /// up is what this waits for), not acknowledged by `deadline`, or a
    /// call inside a loop ([`Error::InLoop`]) returns as it is.
    fn until_accepted(&self, lp: usize, token: u64, deadline: Instant) {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(Ok(sock)) = self.inner.wait(left, |r| {
            r.connects
                .get(&token)
                .map(|c| c.as_ref().copied().map_err(|_| ()))
        }) else {
            return;
        };
        // A round trip to the loop each time: the loop answers in its
        // next round.
        let mut pause = Duration::from_micros(20);
        while Instant::now() < deadline {
            match self.inner.inspect_on(lp, move |s| s.tcp_acked(sock)) {
                Ok(Some(0)) => {}
                // Acknowledged, not TCP, gone, or no answer.
                _ => return,
            }
            // Inline, this thread drives the loops meanwhile.
            self.inner.pause(pause);
            pause = (pause * 2).min(Duration::from_millis(1));
        }
    }

    /// How many connections the application side still keeps state for
    /// (queued CM and QP events); for leak checks.
    pub fn tracked_connections(&self) -> usize {
        self.inner.pump();
        match self.inner.router.lock() {
            Ok(r) => r.tracked(),
            Err(p) => p.into_inner().tracked(),
        }
    }

    /// Abort the connection opened under `token` whose outcome nobody will
    /// wait for ([`Connecting`] dropped unfinished): once its loop has
    /// named it (it may not have taken the command yet; at most a second),
    /// and its answer is forgotten.
    fn abandon(&self, token: u64) {
        let sock = self.inner.wait(Duration::from_secs(1), |r| {
            if let Some(s) = r.opening.remove(&token) {
                return Some(Some(s));
            }
            r.connects.remove(&token).map(|c| c.ok())
        });
        match sock {
            Ok(Some(sock)) => {
                let _ = self.inner.post(Command::Abort(sock));
                self.inner.forget(sock);
            }
            Ok(None) => {}
            // Not from here (inside the loop) or not named in time.
            Err(_) => self.cancel(token),
        }
    }

    /// Abort the connection opened under `token`, if it exists.
    fn cancel(&self, token: u64) {
        self.inner.pump();
        let sock = match self.inner.router.lock() {
            Ok(mut r) => r.opening.remove(&token),
            Err(p) => p.into_inner().opening.remove(&token),
        };
        if let Some(sock) = sock {
            let _ = self.inner.post(Command::Abort(sock));
            self.inner.forget(sock);
        }
    }

    /// Wait for the MPA outcome of `sock`.
    pub(crate) fn established(
        &self,
        sock: SockId,
        timeout: Duration,
        cqs: QpCqs,
    ) -> Result<Qp, Error> {
        loop {
            match self.inner.next_cm(sock, timeout)? {
                CmEvent::Established(n) => {
                    return Ok(Qp {
                        ctx: self.clone(),
                        lp: self.inner.loop_of(sock),
                        sock,
                        negotiated: n,
                        _cqs: cqs,
                    })
                }
                CmEvent::SetupFailed(e) => return Err(e.into()),
                CmEvent::Disconnected => return Err(Error::ConnectionReset),
                CmEvent::ConnectRequest(_) => {}
            }
        }
    }
}

/// A connection [`Context::connect_start`] handed to its poll loop, whose
/// outcome [`finish`](Self::finish) waits for. Dropped unfinished, it
/// aborts the connection.
#[must_use = "a connection is aborted when its Connecting is dropped unfinished"]
pub struct Connecting {
    ctx: Context,
    /// `None` once finished.
    token: Option<u64>,
    /// `ConnectOptions::timeout` from the start.
    deadline: Instant,
    cqs: QpCqs,
    /// The poll loop the connection was handed to.
    lp: usize,
}

impl std::fmt::Debug for Connecting {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connecting")
            .field("token", &self.token)
            .field("deadline", &self.deadline)
            .finish_non_exhaustive()
    }
}

impl Connecting {
    /// The poll loop the connection was handed to (0 on a context of one
    /// loop): give it as `ConnectOptions::loop_index` to make a refused
    /// attempt again on the same loop.
    pub fn loop_index(&self) -> usize {
        self.lp
    }

    /// Wait for the connection to be in full operation (or why not), until
    /// `ConnectOptions::timeout` after [`Context::connect_start`].
    pub fn finish(mut self) -> Result<Qp, Error> {
        let Some(token) = self.token.take() else {
            return Err(Error::InvalidArgument("connection already finished"));
        };
        let ctx = self.ctx.clone();
        let left = self.deadline.saturating_duration_since(Instant::now());
        let sock = match ctx.inner.wait(left, |r| r.connects.remove(&token)) {
            Ok(r) => r?,
            Err(e) => {
                // Give up on the half-open connection too, not just the wait.
                ctx.cancel(token);
                return Err(e);
            }
        };
        let left = self.deadline.saturating_duration_since(Instant::now());
        match ctx.established(sock, left, self.cqs.clone()) {
            Ok(qp) => Ok(qp),
            Err(e) => {
                if matches!(e, Error::TimedOut) {
                    let _ = ctx.inner.post(Command::Abort(sock));
                }
                ctx.inner.forget(sock);
                Err(e)
            }
        }
    }
}

impl Drop for Connecting {
    fn drop(&mut self) {
        if let Some(token) = self.token.take() {
            self.ctx.abandon(token);
        }
    }
}
