//! The frame device: UMEM + socket + attached program, from a [`Config`].

use std::os::fd::{AsFd, AsRawFd};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp_frame::{Doorbell, FrameDevice};

use crate::bpf::SharedPorts;
use crate::error::{Error, Warning};
use crate::neigh::{self, KernelNeighbours};
use crate::program::{AttachMode, Program, XdpAttachment};
use crate::socket::{Counters, SocketConfig, XskSocket};
use crate::sys;
use crate::umem::Umem;
use iwarp_frame::notify::{self, EventFd};

/// Octets of an Ethernet header (no VLAN tag): a frame is MTU + this.
const ETHERNET_HEADER: usize = 14;
/// Room the kernel keeps before received data in each chunk.
const XDP_PACKET_HEADROOM: usize = 256;

/// How the socket binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XskMode {
    /// Let the kernel try zero-copy and fall back to copy (bind flags 0);
    /// [`XdpDevice::xsk_mode`] says which it got.
    #[default]
    Auto,
    /// Copy mode (`XDP_COPY`): works on every driver.
    Copy,
    /// Zero-copy (`XDP_ZEROCOPY`): the NIC DMAs into the UMEM; needs driver
    /// support and driver-mode XDP.
    ZeroCopy,
}

/// Busy-poll settings (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL`,
/// `SO_BUSY_POLL_BUDGET`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BusyPoll {
    /// Microseconds to busy-poll per call.
    pub usecs: u32,
    /// Packets per busy-poll round.
    pub budget: u32,
}

/// What to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Interface name (looked up in the calling thread's network namespace).
    pub iface: String,
    /// Queue id.
    pub queue: u32,
    /// Frame (chunk) size: 2048 or 4096 (the default: a 1500-octet MTU fits
    /// one chunk, a 9000-octet one three).
    pub frame_size: u32,
    /// Number of frames in the UMEM.
    pub frame_count: u32,
    /// Frames given to the fill ring (RX) at start; the rest are for TX.
    /// Must be ≤ `ring_size` and < `frame_count`.
    pub rx_frames: u32,
    /// Size of each ring (power of two).
    pub ring_size: u32,
    /// Bind mode.
    pub mode: XskMode,
    /// Where the XDP program runs.
    pub attach: AttachMode,
    /// Use `XDP_USE_NEED_WAKEUP` (syscalls only when the kernel asks).
    pub need_wakeup: bool,
    /// Busy polling; failures to set it are warnings.
    pub busy_poll: Option<BusyPoll>,
    /// Try huge pages for the UMEM.
    pub hugepages: bool,
    /// Size of the XSKMAP (queue ids must be below it).
    pub max_queues: u32,
    /// Our IPv4 address: ARP for it and IPv4 to it come to the socket.
    pub our_ip: [u8; 4],
    /// Share `our_ip` with the kernel (it is the interface's own address):
    /// only TCP to these ports comes to the socket, ARP stays with the
    /// kernel, and the device resolves the stack's neighbours through the
    /// kernel's table ([`crate::bpf::xdp_shared_program`]).
    pub share: Option<SharedPorts>,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            iface: String::new(),
            queue: 0,
            frame_size: 4096,
            frame_count: 4096,
            rx_frames: 2048,
            ring_size: 2048,
            mode: XskMode::Auto,
            attach: AttachMode::Auto,
            need_wakeup: true,
            busy_poll: None,
            hugepages: false,
            max_queues: 64,
            our_ip: [0; 4],
            share: None,
        }
    }
}

impl Config {
    /// The defaults for interface `iface` and address `our_ip`.
    pub fn new(iface: &str, our_ip: [u8; 4]) -> Config {
        Config {
            iface: iface.to_owned(),
            our_ip,
            ..Config::default()
        }
    }
}

/// Counters: ours and the kernel's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Kept by the socket.
    pub ours: Counters,
    /// `XDP_STATISTICS`.
    pub kernel: sys::XdpStatistics,
}

/// How long [`XdpDevice::open`] keeps trying while the queue is busy: the
/// kernel releases the AF_XDP socket (and the XDP link) of a process that
/// just exited a moment later, so a second run straight after a first one
/// would otherwise fail with EBUSY.
const BUSY_RETRY: Duration = Duration::from_secs(2);

/// The message for a queue still busy after `BUSY_RETRY`.
const STILL_BUSY: &str = "binding the AF_XDP socket: the interface queue was still busy after \
     retrying for 2 s (another AF_XDP socket is bound to it; one closed a moment ago is \
     released well within that time)";

/// Errors that a socket or link closed a moment ago causes, and that go
/// away by themselves.
fn is_busy(e: &Error) -> bool {
    matches!(e, Error::Bind { errno, .. } if *errno == libc::EBUSY)
        || matches!(e, Error::AttachBusy { .. })
}

/// How long one neighbour waits for the kernel before the device stops
/// asking (the stack's own ARP retries ask again).
const NEIGH_WAIT: Duration = Duration::from_secs(3);
/// Least time between two looks at the kernel's table while a neighbour
/// is pending.
const NEIGH_POLL: Duration = Duration::from_millis(1);

/// Neighbour resolution through the kernel, on a shared address.
#[derive(Debug)]
struct SharedNeigh {
    kernel: KernelNeighbours,
    /// Addresses the stack asked for, and since when.
    pending: Vec<([u8; 4], Instant)>,
    last_look: Instant,
    our_ip: [u8; 4],
    resolved: u64,
    errors: u64,
}

impl SharedNeigh {
    /// The stack sent `frame`: an ARP request starts a kernel resolution;
    /// no ARP frame goes out (the kernel answers for the address).
    /// Whether `frame` was ARP (and so consumed).
    fn take_tx(&mut self, frame: &[u8]) -> bool {
        if !neigh::is_arp(frame) {
            return false;
        }
        if let Some(ip) = neigh::arp_request_target(frame) {
            if !self.pending.iter().any(|(p, _)| *p == ip) {
                if self.kernel.resolve(ip).is_err() {
                    self.errors += 1;
                }
                self.pending.push((ip, Instant::now()));
            }
        }
        true
    }

    /// Hand the stack a reply for every pending address the kernel has
    /// resolved; forget those waited on too long. Frames handed over.
    fn poll(&mut self, mac: [u8; 6], sink: &mut dyn FnMut(&[u8])) -> usize {
        let now = Instant::now();
        if self.pending.is_empty() || now.duration_since(self.last_look) < NEIGH_POLL {
            return 0;
        }
        self.last_look = now;
        let mut n = 0;
        let mut i = 0;
        while i < self.pending.len() {
            let (ip, since) = self.pending[i];
            match self.kernel.lookup(ip) {
                Ok(Some(peer)) => {
                    sink(&neigh::arp_reply(peer, ip, mac, self.our_ip));
                    self.resolved += 1;
                    n += 1;
                    self.pending.swap_remove(i);
                    continue;
                }
                Ok(None) => {}
                Err(_) => self.errors += 1,
            }
            if now.duration_since(since) > NEIGH_WAIT {
                self.pending.swap_remove(i);
            } else {
                i += 1;
            }
        }
        n
    }
}

/// An AF_XDP device on one queue of one interface.
#[derive(Debug)]
pub struct XdpDevice {
    // The link first: detach before the socket closes. Shared by the
    // devices of one [`XdpDevice::open_queues`]: the program stays attached
    // until the last of them goes.
    attachment: Arc<XdpAttachment>,
    socket: XskSocket,
    iface: String,
    ifindex: u32,
    queue: u32,
    mac: [u8; 6],
    mtu: u32,
    multi_buffer: bool,
    shared: Option<SharedNeigh>,
    /// Rung to end a [`FrameDevice::wait`] early (`None` on a shared
    /// address, whose neighbour frames arrive outside the socket, or if
    /// the eventfd could not be made: the loop then sleeps bounded times).
    bell: Option<Arc<EventFd>>,
    /// The socket's warnings and the device's own.
    warnings: Vec<Warning>,
}

impl XdpDevice {
    /// Open: look up the interface, map the UMEM, create and bind the
    /// socket, load and attach the program, and steer the queue to the
    /// socket. Interface lookups, the socket and the link belong to the
    /// calling thread's network namespace (see [`in_netns`]); afterwards the
    /// device works from any thread.
    ///
    /// While the queue is busy (bind EBUSY) or the interface still carries
    /// an XDP program, `open` retries with backoff for up to
    /// 2 s (`BUSY_RETRY`); a queue that stays busy is reported as an
    /// [`Error::Sys`] with EBUSY whose message says so.
    pub fn open(cfg: &Config) -> Result<XdpDevice, Error> {
        let mut devs = Self::open_queues(cfg, 1)?;
        devs.pop().ok_or(Error::InvalidConfig {
            reason: "no queue opened",
        })
    }

    /// Open `queues` devices on queues `cfg.queue .. cfg.queue + queues` of
    /// one interface, each with its own UMEM and socket, all steered by one
    /// program and XSKMAP (an interface carries one XDP program: a second
    /// [`XdpDevice::open`] on the same interface would find it busy). Frames
    /// arrive on the device of the queue the interface received them on
    /// (`rx_queue_index`): a NIC's RSS, or on a veth the queue the peer
    /// sent on. Each device is a [`FrameDevice`] for one poll loop; the
    /// program stays attached until the last of them is dropped.
    pub fn open_queues(cfg: &Config, queues: u32) -> Result<Vec<XdpDevice>, Error> {
        if queues == 0 {
            return Err(Error::InvalidConfig {
                reason: "at least one queue must be opened",
            });
        }
        if cfg
            .queue
            .checked_add(queues)
            .is_none_or(|end| end > cfg.max_queues)
        {
            return Err(Error::InvalidConfig {
                reason: "queue must be below max_queues",
            });
        }
        let ifindex = sys::if_nametoindex(&cfg.iface).ok_or_else(|| Error::NoInterface {
            name: cfg.iface.clone(),
        })?;
        let (mac, mtu) = sys::if_hwaddr_mtu(&cfg.iface)
            .map_err(|e| Error::sys("reading the interface's MAC address and MTU", e))?;
        let deadline = Instant::now() + BUSY_RETRY;
        let mut pause = Duration::from_millis(10);
        loop {
            match Self::open_once(cfg, queues, ifindex, mac, mtu) {
                Err(e) if is_busy(&e) && Instant::now() + pause < deadline => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(250));
                }
                Err(Error::Bind { errno, .. }) if errno == libc::EBUSY => {
                    return Err(Error::Sys {
                        op: STILL_BUSY,
                        errno,
                    })
                }
                r => return r,
            }
        }
    }

    /// One attempt of [`XdpDevice::open_queues`] after the interface lookups.
    fn open_once(
        cfg: &Config,
        queues: u32,
        ifindex: u32,
        mac: [u8; 6],
        mtu: u32,
    ) -> Result<Vec<XdpDevice>, Error> {
        // A frame (MTU + Ethernet header) longer than a chunk needs
        // multi-buffer descriptors, and a program that declares it handles
        // them (veth caps the MTU under a single-buffer program).
        // In copy mode the kernel keeps XDP_PACKET_HEADROOM (256 octets) at
        // the start of each receive chunk.
        let max_frame = mtu as usize + ETHERNET_HEADER;
        let multi_buffer = max_frame > cfg.frame_size as usize - XDP_PACKET_HEADROOM;
        if multi_buffer && max_frame > cfg.frame_size as usize * crate::socket::MAX_TX_PARTS {
            return Err(Error::InvalidConfig {
                reason: "the interface's MTU needs more than 17 UMEM chunks per frame",
            });
        }
        let mut sockets = Vec::with_capacity(queues as usize);
        for q in cfg.queue..cfg.queue + queues {
            let umem = Umem::new(cfg.frame_count, cfg.frame_size, cfg.hugepages)?;
            sockets.push(XskSocket::new(
                umem,
                &SocketConfig {
                    iface: cfg.iface.clone(),
                    ifindex,
                    queue: q,
                    ring_size: cfg.ring_size,
                    rx_frames: cfg.rx_frames,
                    mode: cfg.mode,
                    need_wakeup: cfg.need_wakeup,
                    busy_poll: cfg.busy_poll,
                    multi_buffer,
                },
            )?);
        }
        let attachment = Arc::new(
            Program::load(cfg.our_ip, cfg.max_queues, multi_buffer, cfg.share.as_ref())?
                .attach(&cfg.iface, ifindex, cfg.attach)?,
        );
        let mut devs = Vec::with_capacity(sockets.len());
        for (q, socket) in (cfg.queue..).zip(sockets) {
            let c = Config {
                queue: q,
                ..cfg.clone()
            };
            devs.push(Self::on_queue(
                &c,
                ifindex,
                mac,
                mtu,
                multi_buffer,
                attachment.clone(),
                socket,
            )?);
        }
        Ok(devs)
    }

    /// The device on `socket` (bound to `cfg.queue`), steered to it through
    /// `attachment`'s XSKMAP.
    fn on_queue(
        cfg: &Config,
        ifindex: u32,
        mac: [u8; 6],
        mtu: u32,
        multi_buffer: bool,
        attachment: Arc<XdpAttachment>,
        socket: XskSocket,
    ) -> Result<XdpDevice, Error> {
        // On a shared address, the rtnetlink socket for neighbours is made
        // here, in the namespace the device opens in.
        let shared = match &cfg.share {
            Some(_) => Some(SharedNeigh {
                kernel: KernelNeighbours::open(ifindex)?,
                pending: Vec::new(),
                last_look: Instant::now(),
                our_ip: cfg.our_ip,
                resolved: 0,
                errors: 0,
            }),
            None => None,
        };
        attachment.insert(cfg.queue, socket.as_fd())?;
        let mut warnings = socket.warnings().to_vec();
        if shared.is_some() && !crate::caps::effective_net_admin() {
            warnings.push(Warning::ShareWithoutNetAdmin);
        }
        Ok(XdpDevice {
            warnings,
            attachment,
            socket,
            iface: cfg.iface.clone(),
            ifindex,
            queue: cfg.queue,
            mac,
            mtu,
            multi_buffer,
            bell: if shared.is_none() {
                EventFd::new().ok().map(Arc::new)
            } else {
                None
            },
            shared,
        })
    }

    /// Whether the address is shared with the kernel ([`Config::share`]).
    pub fn shares_address(&self) -> bool {
        self.shared.is_some()
    }

    /// On a shared address: neighbours resolved through the kernel, and
    /// failed rtnetlink calls. `(0, 0)` otherwise.
    pub fn kernel_neighbour_counts(&self) -> (u64, u64) {
        self.shared
            .as_ref()
            .map_or((0, 0), |s| (s.resolved, s.errors))
    }

    /// The interface's MAC address (read when opened).
    pub fn mac_address(&self) -> [u8; 6] {
        self.mac
    }

    /// The interface's MTU (read when opened).
    pub fn mtu(&self) -> u32 {
        self.mtu
    }

    /// Whether frames span several UMEM chunks (`XDP_USE_SG`): chosen when
    /// MTU + 14 exceeds the chunk size.
    pub fn multi_buffer(&self) -> bool {
        self.multi_buffer
    }

    /// Interface name.
    pub fn iface(&self) -> &str {
        &self.iface
    }

    /// Interface index.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Queue id.
    pub fn queue(&self) -> u32 {
        self.queue
    }

    /// Bind mode obtained (`Copy` or `ZeroCopy`).
    pub fn xsk_mode(&self) -> XskMode {
        self.socket.mode()
    }

    /// Attach mode obtained (`Driver` or `Skb`).
    pub fn attach_mode(&self) -> AttachMode {
        self.attachment.mode()
    }

    /// Non-fatal problems met while opening (busy-poll options refused, a
    /// shared address without CAP_NET_ADMIN).
    pub fn warnings(&self) -> &[Warning] {
        &self.warnings
    }

    /// Our counters and the kernel's.
    pub fn stats(&self) -> Result<Stats, Error> {
        Ok(Stats {
            ours: self.socket.counters(),
            kernel: self.socket.kernel_stats()?,
        })
    }

    /// The socket.
    pub fn socket(&mut self) -> &mut XskSocket {
        &mut self.socket
    }

    /// The socket's file descriptor (for poll(2)).
    pub fn raw_fd(&self) -> i32 {
        self.socket.as_fd().as_raw_fd()
    }
}

impl FrameDevice for XdpDevice {
    fn rx_burst(&mut self, max: usize, sink: &mut dyn FnMut(&[u8])) -> usize {
        let injected = match &mut self.shared {
            Some(s) => s.poll(self.mac, sink),
            None => 0,
        };
        injected + self.socket.rx_burst(max.saturating_sub(injected), sink)
    }

    fn tx(&mut self, frame: &[u8]) -> bool {
        if let Some(s) = &mut self.shared {
            if s.take_tx(frame) {
                return true;
            }
        }
        self.socket.tx(frame)
    }

    fn tx_parts(&mut self, parts: &[&[u8]]) -> bool {
        if let (Some(s), Some(first)) = (&mut self.shared, parts.first()) {
            // The Ethernet header is in the first part; ARP frames are
            // small, so gathering them costs nothing that matters.
            if neigh::is_arp(first) {
                return s.take_tx(&parts.concat());
            }
        }
        self.socket.tx_parts(parts)
    }

    /// Built in place in a UMEM chunk ([`XskSocket::tx_build`]; frames
    /// longer than a chunk are built in a scratch buffer first).
    /// A frame longer than one chunk is built in place across its chunks
    /// ([`XskSocket::tx_build_sg`]). On a shared address, through
    /// [`tx_build`](Self::tx_build) (which diverts ARP frames).
    fn tx_build_sg(&mut self, len: usize, build: &mut dyn FnMut(&mut [&mut [u8]]) -> bool) -> bool {
        if self.shared.is_some() {
            return self.tx_build(len, &mut |b| build(&mut [b]));
        }
        self.socket.tx_build_sg(len, build)
    }

    fn tx_build(&mut self, len: usize, build: &mut dyn FnMut(&mut [u8]) -> bool) -> bool {
        let XdpDevice { socket, shared, .. } = self;
        let Some(s) = shared else {
            return socket.tx_build(len, build);
        };
        // On a shared address ARP frames go to the kernel's resolver, never
        // out, as in `tx_parts`: one is recognised once built, handed over,
        // and its chunk goes back unsent.
        let mut diverted = false;
        let sent = socket.tx_build(len, &mut |frame| {
            if !build(frame) {
                return false;
            }
            if neigh::is_arp(frame) {
                diverted = s.take_tx(frame);
                return !diverted;
            }
            true
        });
        sent || diverted
    }

    fn tx_build_upto(
        &mut self,
        max: usize,
        build: &mut dyn FnMut(&mut [u8]) -> Option<usize>,
    ) -> bool {
        let XdpDevice { socket, shared, .. } = self;
        let Some(s) = shared else {
            return socket.tx_build_upto(max, build);
        };
        // ARP frames diverted as in `tx_build`.
        let mut diverted = false;
        let sent = socket.tx_build_upto(max, &mut |frame| {
            let n = build(frame)?;
            if neigh::is_arp(&frame[..n.min(frame.len())]) {
                diverted = s.take_tx(&frame[..n.min(frame.len())]);
                return (!diverted).then_some(n);
            }
            Some(n)
        });
        sent || diverted
    }

    fn flush(&mut self) {
        self.socket.flush()
    }

    fn doorbell(&self) -> Option<Arc<dyn Doorbell>> {
        self.bell.clone().map(|b| b as Arc<dyn Doorbell>)
    }

    /// Sleeps in `ppoll(2)` on the socket (readable once its RX ring holds
    /// a frame) and the doorbell's eventfd.
    fn wait(&mut self, timeout: Duration) {
        let Some(bell) = &self.bell else {
            return;
        };
        // An error (EINTR aside, which it retries) only ends the sleep
        // early: the loop looks at its rings and comes back.
        let _ = notify::wait_readable(&[self.socket.as_fd(), bell.as_fd()], timeout);
        bell.drain();
    }
}

/// Run `f` on a new thread that has entered the network namespace at `path`
/// (e.g. `/var/run/netns/NAME`) and return its result. Sockets, BPF links
/// and interface lookups made by `f` belong to that namespace; the objects
/// keep working from any thread afterwards. A panic in `f` is re-raised.
/// `iwarp_frame::in_netns` with this crate's error ([`Error::Netns`]).
pub fn in_netns<T, F>(path: &Path, f: F) -> Result<T, Error>
where
    F: FnOnce() -> T + Send,
    T: Send,
{
    iwarp_frame::in_netns(path, f).map_err(|e| Error::Netns {
        path: path.to_owned(),
        errno: e.raw_os_error().unwrap_or(libc::EINVAL),
    })
}
