//! Errors, each with what to do about it.

use std::fmt;

/// What failed. `errno` fields hold the positive error number DPDK returned
/// (a Linux errno, or one of DPDK's own codes from 1000 up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// This build has no DPDK: `pkg-config libdpdk` found nothing when the
    /// crate was compiled.
    Unavailable,
    /// `Eal::init` was already called in this process (successfully or not);
    /// DPDK's EAL can be initialised once per process.
    AlreadyInitialised,
    /// An argument cannot work.
    InvalidArgument {
        /// Which rule it breaks.
        reason: &'static str,
    },
    /// `rte_eal_init` failed (see DPDK's log on stderr for details).
    EalInit {
        /// Its rte_errno.
        errno: i32,
    },
    /// Creating the mbuf pool failed (usually too little `-m` memory).
    Mempool {
        /// Mbufs asked for.
        mbufs: u32,
        /// Its rte_errno.
        errno: i32,
    },
    /// Hot-plugging a virtual device from its devargs failed.
    Probe {
        /// The devargs string.
        devargs: String,
        /// What rte_dev_probe returned: a negative errno, or −1 when the
        /// driver gave no reason (DPDK's log on stderr has it).
        code: i32,
    },
    /// No ethdev port has this name.
    NoSuchPort {
        /// The name asked for.
        name: String,
    },
    /// Configuring, setting up the queues of, or starting the port failed.
    PortInit {
        /// The port's name.
        name: String,
        /// What failed.
        errno: i32,
    },
    /// The driver does not take this MTU.
    Mtu {
        /// The port's name.
        name: String,
        /// The MTU asked for.
        asked: u16,
        /// The smallest it takes (576 at least: IPv4's minimum datagram).
        min: u16,
        /// The largest it takes (its `max_mtu`, or what its longest
        /// received frame allows).
        max: u16,
    },
    /// The driver has fewer queues than asked for.
    Queues {
        /// The port's name.
        name: String,
        /// RX and TX queues asked for.
        asked: u16,
        /// Its `max_rx_queues`.
        max_rx: u16,
        /// Its `max_tx_queues`.
        max_tx: u16,
    },
    /// An RSS key was given, but the driver's key has another length.
    RssKey {
        /// The port's name.
        name: String,
        /// The length of the driver's key (its `hash_key_size`).
        len: u8,
    },
    /// A memif client's link to its server did not come up while
    /// [`Port::open_queues`](crate::Port::open_queues) waited: the server
    /// refused it, most often because the two ends have different queue
    /// counts (memif's two ends need the same).
    MemifRefused {
        /// The client port's name.
        name: String,
        /// The socket it connected to.
        socket: String,
        /// The link id.
        id: u32,
        /// The client's queue count.
        queues: u16,
        /// The server's, where it says (a server of this crate writes it
        /// beside its socket, see `Port::open_queues`).
        server_queues: Option<u16>,
    },
    /// Another DPDK call failed.
    Dpdk {
        /// Which.
        op: &'static str,
        /// Its error number.
        errno: i32,
    },
}

impl Error {
    /// The error number, if there is one.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Unavailable
            | Error::AlreadyInitialised
            | Error::InvalidArgument { .. }
            | Error::Mtu { .. }
            | Error::Queues { .. }
            | Error::RssKey { .. } => None,
            Error::MemifRefused { .. } => Some(111), // ECONNREFUSED
            Error::NoSuchPort { .. } => Some(19),    // ENODEV
            Error::Probe { code, .. } => (*code < -1).then_some(-*code),
            Error::EalInit { errno }
            | Error::Mempool { errno, .. }
            | Error::PortInit { errno, .. }
            | Error::Dpdk { errno, .. } => Some(*errno),
        }
    }
}

/// An error number as text: Linux's for errno values, DPDK's for its own.
struct Errno(i32);

impl fmt::Display for Errno {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            1001 => write!(
                f,
                "operation not allowed in a secondary process (E_RTE_SECONDARY)"
            ),
            1002 => write!(f, "missing rte_config (E_RTE_NO_CONFIG)"),
            n => write!(f, "{}", std::io::Error::from_raw_os_error(n)),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Unavailable => write!(
                f,
                "built without DPDK: install libdpdk-dev (and pkg-config) and rebuild iwarp-dpdk"
            ),
            Error::AlreadyInitialised => write!(
                f,
                "the DPDK EAL was already initialised in this process (it can be, once): \
                 keep the first Eal and clone it"
            ),
            Error::InvalidArgument { reason } => write!(f, "invalid DPDK argument: {reason}"),
            Error::EalInit { errno } => {
                write!(f, "rte_eal_init failed: {}", Errno(*errno))?;
                if *errno == 13 || *errno == 1 {
                    write!(
                        f,
                        " (DPDK needs root, or at least CAP_NET_RAW/CAP_IPC_LOCK)"
                    )?;
                }
                write!(
                    f,
                    "; without hugepages pass --no-huge -m 256, and --no-shconf so that \
                     several processes can run at once"
                )
            }
            Error::Mempool { mbufs, errno } => write!(
                f,
                "creating a pool of {mbufs} mbufs failed: {}: give the EAL more memory (-m)",
                Errno(*errno)
            ),
            Error::Probe { devargs, code } => {
                write!(f, "probing device {devargs:?} failed")?;
                if *code < -1 {
                    write!(f, ": {}", Errno(-*code))?;
                }
                write!(
                    f,
                    " (see DPDK's log above): check the driver name (net_af_packet, \
                     net_af_xdp, net_tap, ...) and that the interface exists in this \
                     network namespace"
                )
            }
            Error::NoSuchPort { name } => write!(
                f,
                "no DPDK port named {name:?}: pass --vdev to the EAL, or give Port::open the \
                 devargs (\"net_af_packet0,iface=eth0\") to hot-plug it"
            ),
            Error::PortInit { name, errno } => {
                write!(f, "starting DPDK port {name:?} failed: {}", Errno(*errno))
            }
            Error::Mtu {
                name,
                asked,
                min,
                max,
            } => write!(
                f,
                "DPDK port {name:?} does not take MTU {asked}: its driver takes {min}..={max} \
                 (ask for what the link carries, within that)"
            ),
            Error::Queues {
                name,
                asked,
                max_rx,
                max_tx,
            } => write!(
                f,
                "DPDK port {name:?} has at most {max_rx} RX and {max_tx} TX queues, \
                 {asked} asked for: ask for at most {}",
                (*max_rx).min(*max_tx)
            ),
            Error::RssKey { name, len } => write!(
                f,
                "DPDK port {name:?} takes an RSS key of {len} octets, not {}: open it \
                 without a key (its driver's own is used)",
                crate::RSS_KEY_LEN
            ),
            Error::MemifRefused {
                name,
                socket,
                id,
                queues,
                server_queues: Some(theirs),
            } if theirs != queues => write!(
                f,
                "memif client {name:?} has {queues} queue(s), its server on {socket} (id {id}) \
                 has {theirs}, and refuses a client of another count: memif's two ends need \
                 the same queue count. Open both ends with {theirs} or both with {queues} \
                 (DpdkOptions::queue_count, iwarp-perf --queues, IWARP_QUEUES)"
            ),
            Error::MemifRefused {
                name,
                socket,
                id,
                queues,
                ..
            } => write!(
                f,
                "memif client {name:?} ({queues} queue(s)): its link to the server on \
                 {socket} (id {id}) did not come up within {} s: the server refused it or \
                 did not answer. Check that the server has {queues} queue(s) too (memif's \
                 two ends need the same queue count), that no other client holds link id \
                 {id} of that socket, and that both ends give the same secret, if any",
                crate::MEMIF_CONNECT_WAIT.as_secs()
            ),
            Error::Dpdk { op, errno } => write!(f, "{op}: {}", Errno(*errno)),
        }
    }
}

impl std::error::Error for Error {}
