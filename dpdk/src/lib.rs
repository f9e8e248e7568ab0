//! DPDK frame device for the iWARP stack, over Debian's DPDK 22.11.
//!
//! [`Eal::init`] starts DPDK's environment abstraction layer (once per
//! process); [`Port::open`] opens an ethdev port — a `--vdev` given to the
//! EAL, a PCI device, or devargs such as `net_af_packet0,iface=veth0` that it
//! hot-plugs — with one RX and one TX queue and an mbuf pool of its own, and
//! starts it. [`Port`] implements
//! [`iwarp_frame::FrameDevice`]: `rx_burst` hands each mbuf's
//! octets to the sink and frees it; `tx` copies the frame into a fresh mbuf
//! and queues it; `flush` (or a full batch of 32) calls `rte_eth_tx_burst`,
//! and whatever the driver does not take is freed and counted in
//! [`Counters::tx_dropped`].
//!
//! # Queues
//!
//! [`Port::open_queues`] opens a port with `n` RX and `n` TX queues and
//! returns `n` [`PortQueue`]s: handle `i` owns RX queue `i` and TX queue `i`,
//! with its own transmit batch and [`Counters`], and is a `FrameDevice` of
//! its own, `Send` but not `Sync`, so that one poll loop per queue (and
//! core) can own one. The port is started once; it is stopped and closed,
//! and its one mbuf pool (sized for every queue, shared by them: DPDK's
//! default mempool is multi-producer/multi-consumer) freed, when the last
//! handle drops. The pool has a per-lcore cache of 64 mbufs, and a thread
//! that runs a queue's data path is given an lcore id the first time
//! (`rte_thread_register`, handed back when the thread exits;
//! [`thread_lcore_id`]): our poll loops are not EAL lcores, and without an
//! id every mbuf allocated or freed, by us or by the driver (memif frees
//! each frame it sent and allocates each it receives), was a
//! compare-and-swap on the pool's ring. [`Port`] is the one queue of a port opened with `n` = 1.
//! A device that `open_queues` hot-plugged from devargs is removed again
//! when its port closes, so the same devargs open it again. Opening and
//! closing ports is serialised within the process (DPDK's control path is
//! not thread-safe).
//!
//! Which queue a received frame lands on is the driver's business:
//!
//! - **RSS**, where the driver offers it for IPv4, TCP over IPv4 or SCTP
//!   over IPv4 and `n` > 1: the port is configured with `RTE_ETH_MQ_RX_RSS`
//!   hashing those of IPv4, TCP/IPv4 and SCTP/IPv4 it offers
//!   ([`PortQueue::rss_hashes_sctp`] says whether SCTP is among them), with the 40-octet Toeplitz key passed to `open_queues`
//!   (the workspace's symmetric key, `iwarp_net::rss::SYMMETRIC_KEY`, makes
//!   a flow and its reverse hash alike) or the driver's own without one;
//!   the key is also set with `rte_eth_dev_rss_hash_update` after the start,
//!   for drivers that take it only that way. [`PortQueue::rss`] says
//!   whether RSS is on; [`PortQueue::rss_conf`] reads back the key and hash
//!   types the driver reports. `net_null` has RSS (the tests use it);
//!   `net_memif`, `net_af_packet` and `net_ring` do not, and are opened
//!   without it.
//! - **memif** has no RSS: its queues come in pairs across the link, so a
//!   frame sent on TX queue `i` of one end arrives on RX queue `i` of the
//!   other (both ends opened with the same `n`). A sender that puts each
//!   connection's frames on that connection's queue steers them itself.
//!   A memif end of `n` > 1 queues is hot-plugged with its count in
//!   memif's secret, so that a server refuses a client of another count,
//!   and a client's open fails with [`Error::MemifRefused`], naming both
//!   counts, when its server's count differs (`memif_queue_secret` says
//!   why; [`Port::open_queues`] when it waits).
//!
//! # Why a C shim, not `dpdk-sys` or bindgen
//!
//! `dpdk-sys` 0.1.5 targets DPDK 16.07 and is unmaintained. bindgen against
//! 22.11 would not help where it matters: the per-packet calls
//! (`rte_eth_rx_burst`, `rte_eth_tx_burst`, `rte_pktmbuf_alloc`,
//! `rte_pktmbuf_mtod`, `rte_pktmbuf_append`) are `static inline` functions in
//! DPDK's headers, with no symbol to link against, and port setup goes through
//! large structs (`rte_eth_conf`, `rte_eth_dev_info`) whose layout changes
//! between releases. `shim/shim.c` wraps exactly what this crate needs in 28
//! small functions over integers, byte pointers and two opaque handles
//! (`shim/shim.h` is the binding; [`sys`] mirrors it by hand), compiled by
//! `build.rs` with the flags `pkg-config --cflags libdpdk` gives. The Rust
//! side never sees a DPDK struct.
//!
//! # Drivers
//!
//! Debian's DPDK is a shared build: `rte_eal_init` loads every poll-mode
//! driver in `/usr/lib/x86_64-linux-gnu/dpdk/pmds-23.0` by itself, so
//! `net_af_packet`, `net_af_xdp`, `net_tap` and `net_ring` work with no `-d`
//! argument and no `--whole-archive` linking.
//!
//! # Without DPDK
//!
//! When `pkg-config libdpdk` finds nothing at build time, `build.rs` sets
//! `cfg(iwarp_dpdk_missing)`: the crate still compiles, [`AVAILABLE`] is
//! false, and [`Eal::init`], [`Port::open`] and [`Port::open_queues`] return
//! [`Error::Unavailable`].
//!
//! # Dependencies and tests
//!
//! The crate depends on `iwarp-frame` alone in the workspace (plus its shim
//! and `core_affinity` for [`allowed_cpus`]): no stack. Its end-to-end
//! check against a Linux host needs one, so it lives in `iwarp-tools`: the
//! `iwarp-dpdk-check` binary (ARP and ICMP echo, tcp-lite's stack in a
//! poll loop) and `tools/tests/dpdk_af_packet.rs`, which runs it in
//! network namespaces. `tests/queues.rs` runs ports of several queues in
//! one process, with no namespaces: a memif server and client, and
//! `net_null` for RSS. The API opens a context on a port with
//! `iwarp::Context::dpdk` (the `iwarp` crate's `dpdk` feature).
//!
//! Only this crate (with `iwarp-xdp` and `iwarp-memreg`, and the C ABI in
//! `iwarp-verbs`) of the workspace uses `unsafe`; every block says why it
//! is sound.
#![deny(unsafe_op_in_unsafe_fn)]

mod error;
pub use error::Error;

#[cfg(not(iwarp_dpdk_missing))]
mod eal;
#[cfg(not(iwarp_dpdk_missing))]
mod port;
#[cfg(not(iwarp_dpdk_missing))]
pub mod sys;
#[cfg(not(iwarp_dpdk_missing))]
pub use eal::Eal;
#[cfg(not(iwarp_dpdk_missing))]
pub use port::{thread_lcore_id, Port, PortQueue, DEFAULT_MTU, MAX_FRAME};

#[cfg(iwarp_dpdk_missing)]
mod stub;
#[cfg(iwarp_dpdk_missing)]
pub use stub::{thread_lcore_id, Eal, Port, PortQueue, DEFAULT_MTU, MAX_FRAME};

/// Whether this build has DPDK (false: everything returns
/// [`Error::Unavailable`]).
pub const AVAILABLE: bool = cfg!(not(iwarp_dpdk_missing));

/// The DPDK version built against (`pkg-config --modversion libdpdk`), if any.
pub const DPDK_VERSION: Option<&str> = option_env!("IWARP_DPDK_VERSION");

/// See `Eal::vdev_args`.
fn vdev_args(vdevs: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = [
        "-l",
        "0",
        "--no-huge",
        "-m",
        "256",
        "--no-pci",
        "--no-shconf",
        "--no-telemetry",
        "--log-level=lib.eal:warning",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    for d in vdevs {
        v.push(format!("--vdev={d}"));
    }
    v
}

/// EAL arguments as [`Eal::vdev_args`], but with the main lcore floating
/// over `cpus` (`--lcores 0@(a,b,...)`) instead of pinned to CPU 0:
/// `rte_eal_init` pins the thread that calls it to its main lcore's CPUs,
/// and threads spawned later inherit that mask, so a process that pins its
/// own poll loops (and runs application threads beside them) keeps its
/// CPUs this way. Pass [`allowed_cpus`]: a process confined by `taskset
/// -c 1` must not have its thread moved to CPU 0 (an empty list: CPU 0).
pub fn floating_vdev_args(vdevs: &[&str], cpus: &[usize]) -> Vec<String> {
    let mut v = vdev_args(vdevs);
    let list = if cpus.is_empty() {
        "0".to_owned()
    } else {
        cpus.iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(",")
    };
    if let Some(i) = v.iter().position(|a| a == "-l") {
        v.splice(i..i + 2, ["--lcores".to_owned(), format!("0@({list})")]);
    }
    v
}

/// The CPUs the calling thread may run on (its affinity mask), in order;
/// empty if it cannot be read.
pub fn allowed_cpus() -> Vec<usize> {
    core_affinity::get_core_ids()
        .map(|ids| ids.into_iter().map(|c| c.id).collect())
        .unwrap_or_default()
}

/// Which end of a DPDK memif link (`net_memif`: shared-memory rings
/// between two ports, in one process or two, with no kernel in the path).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemifRole {
    /// Listens on the socket and owns the shared memory regions; its
    /// transmit waits until the client has polled its receive once (the
    /// client supplies the buffers).
    Server,
    /// Connects to the socket.
    Client,
}

/// Devargs of one memif end, to hot-plug with `Port::open` (or give the
/// EAL as `--vdev`): vdev `net_memif{index}` (unique in the process), the
/// `role`, the link `id` (both ends of one link share it; several links may
/// share one socket with different ids) and the socket file `socket` — a
/// path, not an abstract socket, so that two containers reach each other
/// through a shared volume. `Port::open_mtu` hot-plugs it with ring
/// buffers that hold one frame of its MTU (`bsize`, when above memif's
/// 2048-octet default), up to MTU 9000.
pub fn memif_devargs(index: u32, role: MemifRole, id: u32, socket: &std::path::Path) -> String {
    let role = match role {
        MemifRole::Server => "server",
        MemifRole::Client => "client",
    };
    format!(
        "net_memif{index},role={role},id={id},socket={},socket-abstract=no",
        socket.display()
    )
}

/// How long [`Port::open_queues`] waits for a memif client's link to its
/// server to come up before it gives up with [`Error::MemifRefused`].
pub const MEMIF_CONNECT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// A memif end as its devargs describe it, with DPDK 22.11's defaults for
/// what they leave out (`role=client`, `id=0`,
/// `socket=/run/memif.sock`, `socket-abstract=no`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[cfg_attr(iwarp_dpdk_missing, allow(dead_code))]
pub(crate) struct MemifEnd {
    /// `role=client` (or `slave`), not `server` (or `master`).
    pub(crate) client: bool,
    /// The link id.
    pub(crate) id: u32,
    /// The socket as given.
    pub(crate) socket: String,
    /// Whether the socket is abstract (`socket-abstract=yes`): no file.
    pub(crate) abstract_socket: bool,
    /// Whether the devargs give a secret of their own.
    pub(crate) secret: bool,
}

#[cfg_attr(iwarp_dpdk_missing, allow(dead_code))]
impl MemifEnd {
    /// The memif end `devargs` describe, if they name a memif device
    /// (`net_memif...,key=value,...`).
    pub(crate) fn parse(devargs: &str) -> Option<MemifEnd> {
        let mut parts = devargs.split(',');
        if !parts.next()?.starts_with("net_memif") {
            return None;
        }
        let mut end = MemifEnd {
            client: true,
            id: 0,
            socket: "/run/memif.sock".to_owned(),
            abstract_socket: false,
            secret: false,
        };
        for kv in parts {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k.trim() {
                // memif matches these as substrings (strstr), in this order.
                "role" if v.contains("server") => end.client = false,
                "role" if v.contains("client") => end.client = true,
                "role" if v.contains("master") => end.client = false,
                "role" if v.contains("slave") => end.client = true,
                "id" => end.id = v.trim().parse().unwrap_or(0),
                "socket" => end.socket = v.to_owned(),
                "socket-abstract" if v.contains("yes") => end.abstract_socket = true,
                "socket-abstract" if v.contains("no") => end.abstract_socket = false,
                "secret" => end.secret = true,
                _ => {}
            }
        }
        Some(end)
    }

    /// The file beside the socket in which a server of this crate writes
    /// its queue count (`SOCKET.queues-ID`), so that a client it refuses
    /// can name both counts; none for an abstract socket.
    pub(crate) fn queues_file(&self) -> Option<std::path::PathBuf> {
        (!self.abstract_socket).then(|| format!("{}.queues-{}", self.socket, self.id).into())
    }

    /// The queue count its server wrote there, if any.
    pub(crate) fn server_queues(&self) -> Option<u16> {
        self.queues_file()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|s| s.trim().parse().ok())
    }
}

/// The memif secret (`secret=`) a memif end of `n` > 1 queues is
/// hot-plugged with: memif's server refuses a client whose secret differs
/// (or that gives none), so two ends of ours connect only with the same
/// queue count.
///
/// Why. memif negotiates its rings when the client connects, and DPDK
/// 22.11's server accepts a client with fewer queues than its own
/// (`memif_msg_receive_add_ring` counts the client's rings) but leaves its
/// queues beyond the client's count without a ring: their ring offset and
/// size stay 0, so `rte_eth_rx_burst` and `rte_eth_tx_burst` on one of
/// them work on the client's first ring as a ring of one slot, beside
/// queue 0 (measured: in 10 s the two queues of a two-queue server
/// received 26.5 million frames of the 14.8 million a one-queue client
/// sent, and none of the 6.5 million its queue 1 sent reached the
/// client), reading and writing descriptors that the client and queue 0
/// own. A client with
/// more queues than its server is refused by it (`Invalid ring index`),
/// and its link never comes up. With the secret, every queue of a
/// connected memif port of ours has a ring of its own, which the data
/// path's `unsafe` bursts rely on; a client waits for its link
/// ([`MEMIF_CONNECT_WAIT`]) and fails with [`Error::MemifRefused`] when it
/// does not come up. (A peer that gives the secret of another count
/// defeats this, as any memif peer can corrupt the rings it shares: the
/// two ends of a memif link trust each other.)
pub fn memif_queue_secret(n: u16) -> String {
    format!("iwarp-queues-{n}")
}

/// Descriptor ring sizes of each of the port's RX and TX queues (the
/// driver may round them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Queues {
    /// RX descriptors.
    pub rx_desc: u16,
    /// TX descriptors.
    pub tx_desc: u16,
}

impl Default for Queues {
    fn default() -> Queues {
        Queues {
            rx_desc: 1024,
            tx_desc: 1024,
        }
    }
}

/// The length of the RSS hash key [`Port::open_queues`] takes: a Toeplitz
/// key of 40 octets, as most NICs use.
pub const RSS_KEY_LEN: usize = 40;

/// A port's RSS hash configuration as its driver reports it
/// ([`PortQueue::rss_conf`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RssConf {
    /// The hash key (as long as the driver's `hash_key_size`).
    pub key: Vec<u8>,
    /// IPv4 addresses are hashed (`RTE_ETH_RSS_IPV4`).
    pub ipv4: bool,
    /// TCP over IPv4 is hashed, addresses and ports
    /// (`RTE_ETH_RSS_NONFRAG_IPV4_TCP`).
    pub ipv4_tcp: bool,
    /// SCTP over IPv4 is hashed, addresses and ports
    /// (`RTE_ETH_RSS_NONFRAG_IPV4_SCTP`).
    pub ipv4_sctp: bool,
}

/// What a [`Port`] or one [`PortQueue`] counted itself.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Frames handed to the sink.
    pub rx_frames: u64,
    /// Chained frames that could not be linearised (dropped).
    pub rx_dropped: u64,
    /// Frames the driver took.
    pub tx_frames: u64,
    /// Frames the driver did not take within a few tries (freed).
    pub tx_dropped: u64,
    /// `tx` refusals: the pool had no free mbuf.
    pub tx_no_mbuf: u64,
    /// `tx` refusals: the frame exceeds the port's [`Port::max_frame`].
    pub tx_too_big: u64,
    /// Frames built in place in an mbuf (`FrameDevice::tx_build`).
    pub tx_built: u64,
    /// Builds their builder cancelled (the mbuf was freed unsent).
    pub tx_build_cancelled: u64,
}

/// The driver's counters (`struct rte_eth_stats`, in part).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PortStats {
    /// Packets received.
    pub ipackets: u64,
    /// Packets sent.
    pub opackets: u64,
    /// Packets the hardware (or kernel ring) dropped for lack of room.
    pub imissed: u64,
    /// Receive errors.
    pub ierrors: u64,
    /// Transmit errors.
    pub oerrors: u64,
    /// Receive failures for lack of mbufs.
    pub rx_nombuf: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_and_eal_can_move_to_the_poll_loop_thread() {
        fn send<T: Send>() {}
        fn frame_device<T: iwarp_frame::FrameDevice + 'static>() {}
        send::<Port>();
        send::<PortQueue>();
        send::<Eal>();
        frame_device::<Port>();
        frame_device::<PortQueue>();
    }

    /// Not Sync: one thread uses a queue at a time. (If PortQueue were
    /// Sync, the blanket impl below would make `<PortQueue as
    /// AmbiguousIfSync<_>>::some_item` ambiguous and this would not
    /// compile.)
    #[test]
    fn a_queue_is_not_sync() {
        trait AmbiguousIfSync<A> {
            fn some_item() {}
        }
        impl<T: ?Sized> AmbiguousIfSync<()> for T {}
        struct Invalid;
        impl<T: ?Sized + Sync> AmbiguousIfSync<Invalid> for T {}
        <PortQueue as AmbiguousIfSync<_>>::some_item();
        <Port as AmbiguousIfSync<_>>::some_item();
    }

    #[test]
    fn vdev_args_need_no_hugepages_or_pci() {
        let a = Eal::vdev_args(&["net_af_packet0,iface=v0"]);
        for must in ["--no-huge", "--no-pci", "--no-shconf"] {
            assert!(a.iter().any(|x| x == must), "{a:?}");
        }
        assert_eq!(
            a.last().map(String::as_str),
            Some("--vdev=net_af_packet0,iface=v0")
        );
    }

    #[cfg(iwarp_dpdk_missing)]
    #[test]
    fn stub_reports_unavailable() {
        const { assert!(!AVAILABLE) };
        let e = Eal::init(["--no-huge"]).unwrap_err();
        assert_eq!(e, Error::Unavailable);
        assert!(e.to_string().contains("install libdpdk-dev"), "{e}");
    }

    #[test]
    fn memif_devargs_name_both_ends_of_one_link() {
        let p = std::path::Path::new("/run/iwarp/m.sock");
        assert_eq!(
            memif_devargs(0, MemifRole::Server, 7, p),
            "net_memif0,role=server,id=7,socket=/run/iwarp/m.sock,socket-abstract=no"
        );
        assert_eq!(
            memif_devargs(1, MemifRole::Client, 7, p),
            "net_memif1,role=client,id=7,socket=/run/iwarp/m.sock,socket-abstract=no"
        );
    }

    #[test]
    fn memif_devargs_parse_as_the_driver_reads_them() {
        let p = std::path::Path::new("/run/iwarp/m.sock");
        let end = MemifEnd::parse(&memif_devargs(1, MemifRole::Client, 7, p)).unwrap();
        assert_eq!(
            end,
            MemifEnd {
                client: true,
                id: 7,
                socket: "/run/iwarp/m.sock".into(),
                abstract_socket: false,
                secret: false,
            }
        );
        assert_eq!(
            end.queues_file(),
            Some(std::path::PathBuf::from("/run/iwarp/m.sock.queues-7"))
        );
        let end = MemifEnd::parse(&memif_devargs(0, MemifRole::Server, 0, p)).unwrap();
        assert!(!end.client);
        // DPDK 22.11's defaults: a client, id 0, /run/memif.sock.
        let end = MemifEnd::parse("net_memif3").unwrap();
        assert!(end.client && end.id == 0 && end.socket == "/run/memif.sock");
        let end = MemifEnd::parse("net_memif3,role=master,secret=x,socket-abstract=yes").unwrap();
        assert!(!end.client && end.secret && end.abstract_socket);
        assert_eq!(end.queues_file(), None);
        assert_eq!(MemifEnd::parse("net_ring0,nodeaction=r:0:CREATE"), None);
    }

    #[test]
    fn the_queue_secret_fits_memif() {
        // ETH_MEMIF_SECRET_SIZE: 24 octets with the NUL.
        assert!(memif_queue_secret(u16::MAX).len() < 24);
        assert_ne!(memif_queue_secret(2), memif_queue_secret(1));
    }

    #[test]
    fn floating_args_keep_the_given_cpus() {
        let a = floating_vdev_args(&["net_memif0"], &[1, 3]);
        assert!(!a.iter().any(|x| x == "-l"), "{a:?}");
        let i = a.iter().position(|x| x == "--lcores").expect("--lcores");
        assert_eq!(a[i + 1], "0@(1,3)");
        let a = floating_vdev_args(&[], &[]);
        let i = a.iter().position(|x| x == "--lcores").expect("--lcores");
        assert_eq!(a[i + 1], "0@(0)");
    }

    #[test]
    fn allowed_cpus_are_this_threads_mask() {
        let cpus = allowed_cpus();
        let n = std::thread::available_parallelism().map_or(0, |n| n.get());
        assert_eq!(cpus.len(), n, "{cpus:?}");
    }

    #[test]
    fn errors_say_what_to_do() {
        let e = Error::Probe {
            devargs: "net_af_packet0,iface=x".into(),
            code: -1,
        };
        assert_eq!(e.errno(), None);
        let m = e.to_string();
        assert!(
            m.contains("net_af_packet0,iface=x") && m.contains("check the driver name"),
            "{m}"
        );
        let e = Error::Probe {
            devargs: "d".into(),
            code: -19,
        };
        assert_eq!(e.errno(), Some(19));
        assert!(Error::AlreadyInitialised.to_string().contains("once"));
        let e = Error::Mtu {
            name: "net_af_packet0".into(),
            asked: 9000,
            min: 576,
            max: 1504,
        };
        assert_eq!(e.errno(), None);
        assert!(e.to_string().contains("takes 576..=1504"), "{e}");
        let e = Error::Queues {
            name: "net_memif0".into(),
            asked: 4,
            max_rx: 2,
            max_tx: 1,
        };
        assert_eq!(e.errno(), None);
        assert!(
            e.to_string()
                .contains("at most 2 RX and 1 TX queues, 4 asked for: ask for at most 1"),
            "{e}"
        );
        let e = Error::MemifRefused {
            name: "net_memif1".into(),
            socket: "/tmp/m.sock".into(),
            id: 0,
            queues: 1,
            server_queues: Some(2),
        };
        assert_eq!(e.errno(), Some(111));
        let m = e.to_string();
        assert!(
            m.contains("has 1 queue(s), its server on /tmp/m.sock (id 0) has 2")
                && m.contains("Open both ends with 2 or both with 1"),
            "{m}"
        );
        let e = Error::MemifRefused {
            name: "net_memif1".into(),
            socket: "/tmp/m.sock".into(),
            id: 3,
            queues: 2,
            server_queues: None,
        };
        let m = e.to_string();
        assert!(
            m.contains("did not come up within 5 s") && m.contains("has 2 queue(s) too"),
            "{m}"
        );
        let e = Error::RssKey {
            name: "net_x".into(),
            len: 52,
        };
        assert!(
            e.to_string()
                .contains("RSS key of 52 octets, not 40: open it without a key"),
            "{e}"
        );
    }
}
