//! Where and how a context runs: the poll loop's idle behaviour
//! ([`Polling`]), the host's address and TCP settings ([`HostOptions`],
//! [`TcpOptions`]), the backends' options ([`XdpOptions`], [`DpdkOptions`]),
//! and the stack's configuration made from them on a real interface.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use iwarp_datapath::runtime::Mode;
use iwarp_datapath::stack::StackConfig;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

#[cfg(feature = "dpdk")]
use crate::dpdk;
#[cfg(feature = "xdp")]
use crate::xdp;
use crate::Error;
#[cfg(all(doc, feature = "xdp"))]
use crate::XdpDeviceStats;
#[cfg(feature = "xdp")]
use crate::{AttachMode, BusyPoll, SharedPorts, XskMode};
#[cfg(doc)]
use crate::{Context, ContextStats, Cq};

/// How the poll loop waits when idle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Polling {
    /// Spin forever: lowest latency, one core fully used.
    Busy,
    /// Spin a while, then yield, then sleep up to 200 µs (never past the
    /// next timer; on AF_XDP an arriving frame or a post ends the sleep):
    /// for shared cores.
    Adaptive,
    /// Run to completion on the application's threads: no loop thread
    /// spins. The thread that polls a CQ ([`Cq::poll_one`], [`Cq::poll`],
    /// [`Cq::wait`]), posts, or waits for a setup call moves frames,
    /// runs the stack and fills the CQ itself, with no hand-off, so a
    /// process pinned to one core with one thread works (and nothing
    /// spins beside it to starve it). A keeper thread sleeps while
    /// application threads call in and takes over as an
    /// [`Adaptive`](Polling::Adaptive) loop after 500 µs without one
    /// (timers, acknowledgements, a thread asleep on
    /// [`Cq::notify_fd`]), handing back at the next call.
    ///
    /// On a context of several loops (one per receive queue,
    /// [`Context::sim_pair_queues`], `XdpOptions::queue_count`,
    /// `DpdkOptions::queue_count`) each loop is inline, with a keeper of
    /// its own, and never runs on two threads at once (each is behind a
    /// try-lock: a thread that finds a loop held moves on, and never
    /// spins on it). A post runs a round of its queue pair's loop. A poll
    /// of an empty CQ runs a round of each loop whose queue pairs
    /// complete on it (every loop while it has none, and on a context
    /// that steers in software, where a connection's frames may arrive on
    /// any loop's queue). A wait ([`Cq::wait`]) does the same, also runs
    /// a round of one other loop per step when free (in turn), and
    /// sleeps in one of its loops' devices, at most 50 µs at a time when
    /// it has several. A setup call (connect, listen, `get_request`,
    /// accept, registration, [`Context::stats`]) runs a round of every
    /// loop while it waits and sleeps in their devices in turn (50 µs
    /// at most each), so the loop that owns the connection, loop 0 (ARP)
    /// and the loops that pass frames on all make progress. So two
    /// application threads, each polling its own CQ whose queue pairs
    /// are on its own loop, drive their loops apart, and a loop no
    /// application thread polls is driven whenever someone waits, or by
    /// its keeper after the grace.
    Inline,
}

/// How long an inline context ([`Polling::Inline`]) goes without an
/// application thread's round before its keeper drives.
pub const INLINE_GRACE: Duration = Duration::from_micros(500);

/// How long a received segment's ACK may wait for
/// data going the other way (TCP's delayed ACK, RFC 9293 §3.8.6.3 and RFC
/// 1122 §4.2.3.2: under 500 ms; a second segment arriving before the ACK
/// went, and out-of-order data, are ACKed at once, RFC 5681 §4.2). One
/// nanosecond of the loop's clock is one round:
/// the ACK leaves with the next round's transmit, so a reply the
/// application posts from the completion (a hook, or a thread polling the
/// CQ) carries it, and a ping-pong sends two frames per round trip, not
/// four (`stack-cost --pingpong`). A segment nobody answers is ACKed one
/// round later; the loop does not sleep past the deadline.
///
/// Every mode uses it. Inline ([`Polling::Inline`]), the next round is the
/// application thread's next call: a post carries the ACK on its data; an
/// empty poll, a wait, or [`Cq::wait_notify`] runs a round that sends it.
/// A thread that stops calling leaves it to the keeper, at most
/// [`INLINE_GRACE`] later (TCP allows 500 ms).
pub(crate) const ACK_ROUND: u64 = 1;

/// Idle rounds an adaptive or inline loop spins before it yields, and
/// polls [`Cq::wait`](crate::Cq::wait) makes before it sleeps.
pub(crate) const IDLE_SPINS: u32 = 200;

impl Polling {
    pub(crate) fn mode(self) -> Mode {
        match self {
            Polling::Busy => Mode::BusyPoll,
            Polling::Adaptive => Mode::Adaptive {
                spins: IDLE_SPINS,
                max_sleep: Duration::from_micros(200),
            },
            Polling::Inline => Mode::Inline {
                grace: INLINE_GRACE,
                spins: IDLE_SPINS,
                max_sleep: Duration::from_micros(200),
            },
        }
    }
}

/// Where and how a context on a device runs: our address, the poll loop's
/// core and idle behaviour, the namespace to open the device in. Given to
/// [`Context::with_device`], and part of `XdpOptions` and `DpdkOptions`.
#[derive(Debug, Clone)]
pub struct HostOptions {
    /// Our address (not configured in the kernel).
    pub ip: Ipv4Addr,
    /// Prefix length of our subnet.
    pub prefix_len: u8,
    /// Router for off-link peers.
    pub gateway: Option<Ipv4Addr>,
    /// Core for the poll loop.
    pub core: Option<usize>,
    /// Idle behaviour of the poll loop.
    pub polling: Polling,
    /// Open the device inside this network namespace (`/var/run/netns/NAME`;
    /// AF_XDP and DPDK: [`Context::with_device`] takes a device already
    /// open and ignores it).
    pub netns: Option<PathBuf>,
    /// Largest IP datagram to send (`None`: the interface's MTU; a larger
    /// value is refused, [`Error::MtuAboveInterface`]). The TCP MSS
    /// follows it. On DPDK it is the
    /// MTU the port is configured with (`None`: 1500), up to what its
    /// driver takes.
    pub mtu: Option<usize>,
    /// TCP timers and buffer sizes.
    pub tcp: TcpOptions,
    /// Take TCP segments whose checksum holds only the pseudo-header sum
    /// (a veth peer with TX checksum offload on sends them so; the other
    /// fix is `ethtool -K <peer> tx off`). [`ContextStats::iface`] counts
    /// them either way.
    pub accept_partial_checksum: bool,
    /// The link cannot alter a frame and the peer is ours, set the same
    /// way: memif between two processes on this host (ours or DPDK's; shared memory,
    /// as Linux's veth, whose two ends skip TCP checksums and SCTP's
    /// CRC32c). Sent TCP segments carry only the pseudo-header sum in
    /// their Checksum field, as a sender with TX checksum offload leaves
    /// it, SCTP packets a zero Checksum field, and received ones are taken
    /// without being summed: no octet is summed at either end
    /// (`IfaceConfig::trusted_link`, `sctp_lite::assoc::Config::trusted_link`).
    /// A peer that verifies drops such segments and counts TCP's
    /// ([`ContextStats::iface`]'s `rx_partial_checksum`). Default false: a
    /// wire, or a peer that is not ours (VPP, a NIC), needs the checksums
    /// (RFC 9293 §3.1, RFC 9260 §6.8). MPA's own CRC is negotiated per
    /// connection, apart from this.
    pub trusted_link: bool,
    /// Testing: drop this many received frames per million at random
    /// (seeded), before the stack sees them: loss for benchmarks and tests
    /// of loss recovery on AF_XDP, where netfilter cannot drop what the
    /// XDP program steers to the socket. Set it on both ends to lose
    /// frames both ways. Every context on a device (AF_XDP, DPDK,
    /// [`Context::with_device`]), not the simulated pair; default 0.
    pub rx_drop_ppm: u32,
    /// Frame FPDUs into TCP's send buffer instead of one-copy transmit
    /// (one more copy per sent octet, and a Send or Write completes once
    /// handed to TCP rather than once TCP has it acknowledged): a baseline
    /// for benchmarks. Default false.
    pub copy_tx: bool,
    /// Octets one connection may make the stack hold for its peer
    /// (out-of-order data, reassembly, early data); one more aborts it
    /// (Terminate and RST, or SCTP ABORT). Default 4 MiB
    /// (`StackConfig::max_held_per_conn`).
    pub max_held_per_conn: usize,
    /// Octets all connections together may hold; beyond it the connection
    /// holding the most is aborted. Default 256 MiB
    /// (`StackConfig::max_held_total`). [`ContextStats`]'s `stack` reports
    /// both figures and the aborts.
    pub max_held_total: usize,
}

impl HostOptions {
    /// `ip/prefix_len`, no gateway, adaptive polling, no pinning, this
    /// namespace, the interface's MTU, [`TcpOptions::default`].
    pub fn new(ip: Ipv4Addr, prefix_len: u8) -> Self {
        HostOptions {
            ip,
            prefix_len,
            gateway: None,
            core: None,
            polling: Polling::Adaptive,
            netns: None,
            mtu: None,
            tcp: TcpOptions::default(),
            accept_partial_checksum: false,
            trusted_link: false,
            rx_drop_ppm: 0,
            copy_tx: false,
            max_held_per_conn: iwarp_datapath::budget::MAX_HELD_PER_CONN,
            max_held_total: iwarp_datapath::budget::MAX_HELD_TOTAL,
        }
    }
}

impl HostOptions {
    /// Refuse bad values before a device is opened.
    pub(crate) fn check(&self) -> Result<(), Error> {
        if self.mtu.is_some_and(|m| m < 576) {
            return Err(Error::InvalidArgument("MTU below 576"));
        }
        if self.rx_drop_ppm > 1_000_000 {
            return Err(Error::InvalidArgument(
                "rx_drop_ppm above 1,000,000 (one million per million)",
            ));
        }
        self.tcp.apply(&mut tcp_lite::tcp::Config::default())
    }
}

/// TCP timers and buffers of a context's connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpOptions {
    /// Lower bound of the retransmission timeout (RFC 6298 says 1 s; LANs
    /// use less). Default 5 ms.
    pub rto_min: Duration,
    /// Retransmission timeout before the first RTT sample (RFC 6298 §2.1).
    /// Default 1 s.
    pub rto_initial: Duration,
    /// How long a closed connection lingers in TIME-WAIT (2 MSL). Default 60 s.
    pub time_wait: Duration,
    /// Receive window offered, in octets. Default 1 MiB.
    pub rcv_buf: u32,
    /// Send buffer, in octets. Default 4 MiB.
    pub snd_buf: usize,
}

impl Default for TcpOptions {
    fn default() -> Self {
        let d = tcp_lite::tcp::Config::default();
        TcpOptions {
            rto_min: Duration::from_millis(5),
            rto_initial: Duration::from_nanos(d.rto_initial),
            time_wait: Duration::from_nanos(d.time_wait),
            rcv_buf: d.rcv_buf,
            snd_buf: d.snd_buf,
        }
    }
}

impl TcpOptions {
    /// Check the values and apply them to `cfg`.
    fn apply(&self, cfg: &mut tcp_lite::tcp::Config) -> Result<(), Error> {
        let ns = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        if self.rto_min.is_zero() || self.rto_initial.is_zero() {
            return Err(Error::InvalidArgument("TCP RTO bounds must be above zero"));
        }
        if self.rto_min > self.rto_initial || ns(self.rto_initial) > cfg.rto_max {
            return Err(Error::InvalidArgument(
                "TCP rto_min must not exceed rto_initial, nor rto_initial 60 s",
            ));
        }
        if self.rcv_buf < 1024 || self.snd_buf < 1024 {
            return Err(Error::InvalidArgument("TCP buffers must be at least 1 KiB"));
        }
        cfg.rto_min = ns(self.rto_min);
        cfg.rto_initial = ns(self.rto_initial);
        cfg.time_wait = ns(self.time_wait);
        cfg.rcv_buf = self.rcv_buf;
        cfg.snd_buf = self.snd_buf;
        Ok(())
    }
}

/// Settings of an AF_XDP context (feature `xdp`).
#[cfg(feature = "xdp")]
#[derive(Debug, Clone)]
pub struct XdpOptions {
    /// Interface to take over.
    pub iface: String,
    /// Its queue whose traffic the socket takes (default 0; steer the
    /// stack's flows there, e.g. with `ethtool -N` or a single queue).
    /// With [`queue_count`](Self::queue_count) above 1, the first of the
    /// queues.
    pub queue: u32,
    /// Receive queues to take, one AF_XDP socket and one poll loop each
    /// (default 1): queues `queue .. queue + queue_count`, loop `i` on
    /// core `host.core + i` when `host.core` is set. The queue a frame
    /// arrives on is the sender's or the NIC's choice, so above 1 the
    /// loops steer in software: each frame goes to the loop that RSS with
    /// the symmetric key ([`iwarp_net::rss::SYMMETRIC_KEY`]) names for its
    /// flow (ARP and non-IPv4: loop 0), passed between loops when it
    /// arrived elsewhere. Refused above 1: `host.rx_drop_ppm`,
    /// `share_address`, more than 128, and more queues than the interface
    /// has (the socket's bind fails). With inline polling
    /// ([`Polling::Inline`]) the application's threads drive the loops.
    pub queue_count: u16,
    /// Bind mode to ask for: `Auto` (zero-copy where the driver can, the
    /// default), `Copy` or `ZeroCopy` (fails where the driver cannot).
    /// [`XdpDeviceStats::bind`] says what was obtained.
    pub bind: XskMode,
    /// Where the XDP program runs (`Auto`: driver mode where supported).
    pub attach: AttachMode,
    /// `XDP_USE_NEED_WAKEUP`: syscalls only when the kernel asks (default on).
    pub need_wakeup: bool,
    /// Busy polling on the socket (`SO_BUSY_POLL` and budget); refusals are
    /// warnings, not errors.
    pub busy_poll: Option<BusyPoll>,
    /// Entries of each of the four rings (power of two; default 2048).
    pub ring_size: u32,
    /// UMEM chunk size: 2048 or 4096 (default 4096).
    pub frame_size: u32,
    /// UMEM chunks (default 4096).
    pub frame_count: u32,
    /// Chunks given to the fill ring at start (≤ `ring_size`, <
    /// `frame_count`; default 2048); the rest are for transmission.
    pub rx_frames: u32,
    /// Try huge pages for the UMEM.
    pub hugepages: bool,
    /// Address, core, polling, namespace, MTU, TCP.
    pub host: HostOptions,
    /// Share `host.ip` with the kernel, which owns it (default `None`: the
    /// address must be one the kernel does not have). Only TCP to these
    /// ports reaches the stack: its listening ports (list every port it
    /// will listen on) and `local_from..=65535`, from which it picks the
    /// local ports of its connections (reserve them from the kernel with
    /// `sysctl net.ipv4.ip_local_reserved_ports`). ARP stays with the
    /// kernel; the stack resolves neighbours through the kernel's table.
    pub share_address: Option<SharedPorts>,
}

#[cfg(feature = "xdp")]
impl XdpOptions {
    /// `iface` (queue 0, the backend's default rings and UMEM) with
    /// `ip/prefix_len`, adaptive polling, no pinning.
    pub fn new(iface: &str, ip: Ipv4Addr, prefix_len: u8) -> Self {
        let d = xdp::Config::default();
        XdpOptions {
            iface: iface.to_owned(),
            queue: d.queue,
            queue_count: 1,
            bind: d.mode,
            attach: d.attach,
            need_wakeup: d.need_wakeup,
            busy_poll: d.busy_poll,
            ring_size: d.ring_size,
            frame_size: d.frame_size,
            frame_count: d.frame_count,
            rx_frames: d.rx_frames,
            hugepages: d.hugepages,
            host: HostOptions::new(ip, prefix_len),
            share_address: None,
        }
    }

    /// The backend's configuration.
    pub(crate) fn config(&self) -> xdp::Config {
        xdp::Config {
            queue: self.queue,
            mode: self.bind,
            attach: self.attach,
            need_wakeup: self.need_wakeup,
            busy_poll: self.busy_poll,
            ring_size: self.ring_size,
            frame_size: self.frame_size,
            frame_count: self.frame_count,
            rx_frames: self.rx_frames,
            hugepages: self.hugepages,
            share: self.share_address.clone(),
            ..xdp::Config::new(&self.iface, self.host.ip.octets())
        }
    }
}

/// Settings of a DPDK context (feature `dpdk`).
#[cfg(feature = "dpdk")]
#[derive(Debug, Clone)]
pub struct DpdkOptions {
    /// Port name (`net_af_packet0`, a PCI address) or devargs to hot-plug
    /// (`net_af_packet0,iface=eth1`); with `host.netns`, hot-plugged inside
    /// that namespace, where `net_af_packet`/`net_af_xdp` find their interface.
    pub port: String,
    /// Descriptor ring sizes of each of the port's queues.
    pub queues: dpdk::Queues,
    /// Receive (and transmit) queues of the port, one poll loop each
    /// (default 1), loop `i` on queue `i` and on core `host.core + i` when
    /// `host.core` is set; each connection is owned by one loop. A driver
    /// with RSS is given the symmetric key
    /// ([`iwarp_net::rss::SYMMETRIC_KEY`]), so a flow and its answers
    /// reach one queue. On a port without RSS (memif, `net_af_packet`,
    /// `net_ring`) the sender picks the queue, so the loops pass each
    /// frame to the loop the same hash names (software steering): a memif
    /// peer of ours with as many queues sends each flow on its owner's
    /// queue already, and on the other drivers a peer that picks queues
    /// otherwise (one queue, a hash of its own) works too. The two ends of
    /// a memif link need the same count: a memif port of several queues
    /// is hot-plugged with its count in memif's secret, so its server
    /// refuses a client of another count and the client's open fails
    /// naming both ([`dpdk::Error::MemifRefused`], see
    /// [`memif`](Self::memif)).
    pub queue_count: u16,
    /// Address, core, polling, namespace, MTU, TCP.
    pub host: HostOptions,
}

#[cfg(feature = "dpdk")]
impl DpdkOptions {
    /// `port` with `ip/prefix_len`, default queues, adaptive polling, no pinning.
    pub fn new(port: &str, ip: Ipv4Addr, prefix_len: u8) -> Self {
        DpdkOptions {
            port: port.to_owned(),
            queues: dpdk::Queues::default(),
            queue_count: 1,
            host: HostOptions::new(ip, prefix_len),
        }
    }

    /// One end of a DPDK memif link (shared-memory rings, no kernel in the
    /// path): vdev `net_memif{index}` with `role` and link `id` on the
    /// socket file `socket`. Both ends of a link — two contexts in one
    /// process, two processes, or two containers sharing the socket's
    /// directory as a volume — name the same socket and id and opposite
    /// roles; the server creates the socket. Both ends need the same
    /// [`queue_count`](Self::queue_count): the server refuses a client of
    /// another count, and the client's [`Context::dpdk`](crate::Context::dpdk)
    /// fails with both counts ([`dpdk::Error::MemifRefused`]); a client
    /// whose server is up, or of several queues, waits (5 s at most) for
    /// its link there; a client of one queue may start before its server.
    /// Start the EAL with
    /// [`dpdk::floating_vdev_args`] (no hugepages, no PCI, loops pinned by
    /// [`HostOptions::core`]).
    ///
    /// ```no_run
    /// use iwarp::{dpdk::{self, Eal, MemifRole}, Context, DpdkOptions};
    /// # fn main() -> Result<(), iwarp::Error> {
    /// let eal = Eal::init(dpdk::floating_vdev_args(&[], &dpdk::allowed_cpus()))?;
    /// let sock = std::path::Path::new("/run/iwarp/memif.sock");
    /// let s = DpdkOptions::memif(0, MemifRole::Server, 0, sock, "10.0.0.1".parse().unwrap(), 24);
    /// let c = DpdkOptions::memif(1, MemifRole::Client, 0, sock, "10.0.0.2".parse().unwrap(), 24);
    /// let (server, client) = (Context::dpdk(&eal, &s)?, Context::dpdk(&eal, &c)?);
    /// # let _ = (server, client); Ok(()) }
    /// ```
    pub fn memif(
        index: u32,
        role: dpdk::MemifRole,
        id: u32,
        socket: &std::path::Path,
        ip: Ipv4Addr,
        prefix_len: u8,
    ) -> Self {
        Self::new(
            &dpdk::memif_devargs(index, role, id, socket),
            ip,
            prefix_len,
        )
    }
}

/// One end of our own memif link (feature `memif`, no DPDK): the
/// shared-memory packet interface of VPP, libmemif and DPDK's
/// `net_memif`, whose ring buffers the stack writes frames into and reads
/// them from in place ([`iwarp_memif`]). Both ends — two contexts in one
/// process, two processes, or two containers sharing the socket's
/// directory as a volume — name the same socket and id and opposite
/// roles; either end may be DPDK's `net_memif` or VPP's memif instead of
/// ours. One queue pair, or several with one poll loop each
/// ([`queue_count`](Self::queue_count)).
///
/// [`Context::memif`](crate::Context::memif) connects a client at once
/// (retrying while no server listens, up to `link.timeout`); a server
/// listens and returns at once, its link up when a client connects (the
/// next one, after a client leaves).
///
/// ```no_run
/// use iwarp::{memif::Role, Context, MemifOptions};
/// # fn main() -> Result<(), iwarp::Error> {
/// let sock = std::path::Path::new("/run/iwarp/memif.sock");
/// let s = MemifOptions::new(Role::Server, sock, 0, "10.0.0.1".parse().unwrap(), 24);
/// let c = MemifOptions::new(Role::Client, sock, 0, "10.0.0.2".parse().unwrap(), 24);
/// let server = Context::memif(&s)?;
/// let client = Context::memif(&c)?;
/// # let _ = (server, client); Ok(()) }
/// ```
#[cfg(feature = "memif")]
#[derive(Debug, Clone)]
pub struct MemifOptions {
    /// Which end.
    pub role: iwarp_memif::Role,
    /// The link: socket, interface id, secret, ring size, timeout (its
    /// `max_frame` and buffer size follow `host.mtu`, 1500 by default).
    pub link: iwarp_memif::Config,
    /// Our MAC address (`None`: locally administered, from the role and
    /// the id: `02:6d:IDhi:IDlo:00:01` for the server, `...:02` for the
    /// client).
    pub mac: Option<[u8; 6]>,
    /// Queue pairs of the link, one poll loop each (default 1): loop `i`
    /// on queue pair `i` and on core `host.core + i` when `host.core` is
    /// set; each connection is owned by one loop. memif has no RSS (a
    /// frame sent on queue `i` arrives on the peer's queue `i`), so the
    /// loops pass each frame to the loop the symmetric RSS hash names
    /// (software steering), as over DPDK's memif: a peer of ours with as
    /// many queues sends each flow on its owner's queue already. Both
    /// ends need the same count: with more than one, the link's secret
    /// (when `link.secret` is empty) is the one DPDK's memif ports of
    /// ours are plugged with for that count (`iwarp-queues-N`), so a
    /// DPDK `net_memif` end of ours with as many queues connects, and an
    /// end of another count is refused, naming both counts where the
    /// server is ours.
    pub queue_count: u16,
    /// Address, polling, core, TCP; `netns` does not apply (the socket
    /// is a file).
    pub host: HostOptions,
}

#[cfg(feature = "memif")]
impl MemifOptions {
    /// `role` on socket file `socket`, interface `id`, with `ip/prefix_len`,
    /// adaptive polling, no pinning, MTU 1500.
    pub fn new(
        role: iwarp_memif::Role,
        socket: &std::path::Path,
        id: u32,
        ip: Ipv4Addr,
        prefix_len: u8,
    ) -> Self {
        MemifOptions {
            role,
            link: iwarp_memif::Config::new(socket, id),
            mac: None,
            queue_count: 1,
            host: HostOptions::new(ip, prefix_len),
        }
    }

    pub(crate) fn mac(&self) -> [u8; 6] {
        self.mac.unwrap_or({
            let id = self.link.id.to_be_bytes();
            let end = match self.role {
                iwarp_memif::Role::Server => 1,
                iwarp_memif::Role::Client => 2,
            };
            [0x02, 0x6d, id[2], id[3], 0, end]
        })
    }
}

/// The stack's configuration on a real interface.
pub(crate) fn device_config(
    iface: &str,
    mac: [u8; 6],
    mtu: usize,
    host: &HostOptions,
) -> Result<StackConfig, Error> {
    let mtu = match host.mtu {
        Some(m) if m < 576 => return Err(Error::InvalidArgument("MTU below 576")),
        // Frames above the interface's MTU would be dropped by it (or by
        // the peer): refuse rather than shrink silently.
        Some(m) if m > mtu => {
            return Err(Error::MtuAboveInterface {
                requested: m,
                interface: mtu,
                iface: iface.to_owned(),
            })
        }
        Some(m) => m,
        None => mtu,
    };
    let mut icfg = IfaceConfig::new(
        EthernetAddress(mac),
        Ipv4Address(host.ip.octets()),
        host.prefix_len,
    );
    icfg.mtu = mtu;
    icfg.gateway = host.gateway.map(|g| Ipv4Address(g.octets()));
    icfg.accept_partial_checksum = host.accept_partial_checksum;
    icfg.trusted_link = host.trusted_link;
    let mut cfg = StackConfig::new(icfg);
    cfg.copy_tx = host.copy_tx;
    cfg.max_held_per_conn = host.max_held_per_conn;
    cfg.max_held_total = host.max_held_total;
    // The MSS follows the interface's MTU (IPv4 and TCP headers off), as
    // Linux's does: jumbo frames carry jumbo segments and FPDUs.
    cfg.tcp.mss = mtu.saturating_sub(40).clamp(536, usize::from(u16::MAX)) as u16;
    host.tcp.apply(&mut cfg.tcp)?;
    // RFC 6528: the ISN secret must be unguessable; the kernel's RNG.
    let mut seed = [0u8; 16];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut seed))
        .map_err(|_| Error::InvalidArgument("cannot read /dev/urandom for the ISN secret"))?;
    cfg.isn_secret = seed;
    Ok(cfg)
}

/// `f` run inside the network namespace at `path` (opening a backend's
/// device there).
#[cfg(any(feature = "xdp", feature = "dpdk"))]
pub(crate) fn in_netns<T: Send>(
    path: &std::path::Path,
    f: impl FnOnce() -> T + Send,
) -> Result<T, Error> {
    iwarp_frame::in_netns(path, f).map_err(|error| Error::Netns {
        path: path.to_owned(),
        error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(mtu: Option<usize>) -> HostOptions {
        HostOptions {
            mtu,
            ..HostOptions::new(Ipv4Addr::new(10, 0, 0, 1), 24)
        }
    }

    /// `--mtu 9000` on a 1500-octet interface is refused, naming both MTUs
    /// and the fix; at or below the interface's it is taken as asked.
    #[test]
    fn mtu_above_the_interface_is_refused() {
        let e = device_config("veth0", [2; 6], 1500, &host(Some(9000))).expect_err("refused");
        assert!(
            matches!(
                e,
                Error::MtuAboveInterface {
                    requested: 9000,
                    interface: 1500,
                    ..
                }
            ),
            "{e:?}"
        );
        let msg = e.to_string();
        assert!(msg.contains("MTU 9000 is above veth0's MTU 1500"), "{msg}");
        assert!(msg.contains("ip link set dev veth0 mtu 9000"), "{msg}");
        let cfg = device_config("veth0", [2; 6], 1500, &host(Some(1400))).expect("1400");
        assert_eq!(cfg.iface.mtu, 1400);
        assert_eq!(cfg.tcp.mss, 1360);
        let cfg = device_config("veth0", [2; 6], 1500, &host(None)).expect("default");
        assert_eq!(cfg.iface.mtu, 1500);
        assert!(matches!(
            device_config("veth0", [2; 6], 1500, &host(Some(500))),
            Err(Error::InvalidArgument(_))
        ));
    }
}
