//! The one stack of the process: an [`iwarp::Context`] on the interface
//! the environment names, started by the first call that needs it (a
//! protection domain, a bound or resolved CM id) and kept for the life of
//! the process, as a kernel RNIC outlives the programs that use it.
//!
//! With `IWARP_BACKEND=dpdk` the library starts DPDK's EAL, once per
//! process, with no hugepages, no PCI scan and no shared runtime files
//! (`iwarp::dpdk::floating_vdev_args`: `--no-huge -m 256 --no-pci
//! --no-shconf`), so a program that starts an EAL of its own cannot use
//! it. The device is still `iwarp0`.
//!
//! Environment (read once):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `IWARP_BACKEND` | `xdp` (AF_XDP on a kernel interface), `memif` (one end of a kernel-free memif link, our own memif: no DPDK; `IWARP_MEMIF` names it) or `dpdk` (a DPDK port, such as DPDK's memif) | `xdp` |
//! | `IWARP_IFACE` | `xdp`: interface the stack takes over | required with `xdp`; not used with `dpdk` |
//! | `IWARP_IP` | our address/prefix, e.g. `10.0.0.1/24` (not the kernel's) | required |
//! | `IWARP_MEMIF` | `memif`: one end of our memif link, `server:/path/to/socket` or `client:/path/to/socket`; both ends name the same socket file; the server listens at once (a stale socket file is replaced, a live server's refused) and its link comes up when a client connects; a client waits up to 60 s for its server. The other end may be DPDK's or VPP's memif. MAC `02:00:A:B:C:D` from `IWARP_IP`'s octets. A queue pair per poll loop (`IWARP_QUEUES`) | required with `memif` |
//! | `IWARP_MEMIF` | `dpdk`: one end of a memif link, `server:/path/to/socket` or `client:/path/to/socket`; both ends name the same socket file, the server creates it (start the server first; a socket file an ended server left is removed, one a live server listens on is refused). Made into the devargs `net_memif0,role=…,id=…,socket=PATH,socket-abstract=no,mac=02:00:A:B:C:D` (`iwarp::dpdk::memif_devargs`, and a MAC from `IWARP_IP`'s octets) | `IWARP_MEMIF` or `IWARP_DPDK_VDEV` required with `dpdk` |
//! | `IWARP_MEMIF_ID` | `memif`, or `dpdk` with `IWARP_MEMIF`: the link id, the same at both ends (several links may share one socket) | `0` |
//! | `IWARP_DPDK_VDEV` | `dpdk`: the port's full devargs instead of `IWARP_MEMIF`, hot-plugged, e.g. `net_memif0,role=server,id=0,socket=/run/iwarp/memif.sock,socket-abstract=no`; its `mac=`, if any, is the device's MAC (node GUID, GID), else the one made from `IWARP_IP` is reported (the port keeps its driver's own; iWARP peers find each other by IP and ARP, not by GID) | see `IWARP_MEMIF` |
//! | `IWARP_MTU` | IP MTU the stack uses | `xdp`: the interface's; `dpdk`: 1500 (the port is opened with it) |
//! | `IWARP_POLL` | `inline` (the application's thread runs the stack when it polls a CQ or posts), `busy` or `adaptive` (a poll-loop thread) | `inline` |
//! | `IWARP_CORE` | CPU of the poll-loop thread (`busy`, `adaptive`); with `IWARP_QUEUES` above 1, of the first loop (loop `i` on `IWARP_CORE + i`) | none |
//! | `IWARP_QUEUES` | poll loops of the device, one per receive queue (1 to 128): each connection is owned by one loop, new connections go to the loops in turn, and an accepted one to the loop its frames reach. Above 1: any `IWARP_POLL` (inline: the program's threads drive the loops of the QPs they poll), not with `IWARP_SHARE_ADDRESS=yes`; `xdp`: the interface needs that many queues (from queue 0); memif (ours or DPDK's): both ends give the same number. A DPDK port of several queues has rings of 256 descriptors per queue | `1` |
//! | `IWARP_TRUSTED_LINK` | `memif` and `dpdk` only: `yes`: the link is shared memory between two processes of ours (memif) that both set it: TCP checksums and SCTP's CRC32c are neither computed nor checked ([`iwarp::HostOptions::trusted_link`], as Linux skips them between the two ends of a veth); an end that does not set it drops the other's segments and counts them as partial checksums. `no`: computed and checked | `no` |
//! | `IWARP_STATS` | `yes`: at exit, one line per poll loop on standard error: the QPs connected on it, frames received and sent, octets TCP delivered | `no` |
//! | `IWARP_LINGER_MS` | how long, at exit, the process waits in all for its connections to finish closing, TCP included (what it sent before still arrives, and the peer gets our FIN): those the program closed with `rdma_disconnect`, and those it left open, which exit closes as a kernel closes an exiting process's QPs | `2000` |
//! | `IWARP_CONNECT_RETRY_MS` | how long `rdma_connect` retries a connection the peer refused (no listener yet) before `REJECTED`: for clients that race their server's re-listen, such as Debian's perftest 0.17, whose own retry after a refusal reuses the ids it destroyed | `0` |
//! | `IWARP_SHARE_ADDRESS` | `xdp` only: `yes`: the kernel owns `IWARP_IP` too (a program such as qperf reaches its peer's kernel at the same address for its own TCP control connection); only TCP to the stack's ports reaches the stack: those in `IWARP_LISTEN_PORTS` and `IWARP_LOCAL_PORTS_FROM..=65535`. ARP stays with the kernel. `no`: the address is the stack's alone | `no` |
//! | `IWARP_LISTEN_PORTS` | with `IWARP_SHARE_ADDRESS=yes`: the ports `rdma_listen` may listen on besides the local range, comma-separated (at most 64); `rdma_listen` on any other fails with `EADDRNOTAVAIL` | none |
//! | `IWARP_LOCAL_PORTS_FROM` | with `IWARP_SHARE_ADDRESS=yes`: first port of the range from which outgoing connections and `rdma_bind_addr` to port 0 take theirs (keep the kernel off it: `sysctl net.ipv4.ip_local_reserved_ports`); unshared, that range is 49152..=65535 | `61440` |
//! | `IWARP_MPA` | MPA profile for connections: `default` ([`iwarp::default_mpa`]: Rev 2, CRC, no markers), `siw` ([`iwarp::siw_mpa`]: as default, plus a 50 ms hold on our first FPDU as initiator, which Linux siw 6.1 as responder needs, and 100 ms between `rdma_disconnect` and our FIN, so that siw retires its last work request first), `nocrc` (default without CRC) | `default` |

use std::net::Ipv4Addr;
use std::sync::OnceLock;

/// The process's stack.
pub(crate) struct Engine {
    pub ctx: iwarp::Context,
    pub ip: Ipv4Addr,
    /// MPA settings of the connections the CM makes.
    pub mpa: iwarp::MpaConfig,
    /// How long `rdma_connect` retries a refused connection.
    pub connect_retry: std::time::Duration,
    /// How long a closing connection may hold up `ibv_destroy_qp`, and
    /// all of them the process's exit.
    pub linger: std::time::Duration,
    /// The ports the stack owns on an address it shares with the kernel.
    pub share: Option<iwarp::SharedPorts>,
    /// How long `rdma_disconnect` waits before our FIN (`IWARP_MPA=siw`:
    /// 100 ms). siw retires a work request a little after its last octet
    /// has left, and a FIN arriving in that window flushes it with a local
    /// QP operation error (interop/PERFTEST.md): perftest then fails its
    /// last comm Send.
    pub fin_grace: std::time::Duration,
    /// QPs connected on each poll loop in the life of the process
    /// (`IWARP_STATS`).
    pub qps_per_loop: Vec<std::sync::atomic::AtomicU64>,
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub link: Link,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: Option<usize>,
    pub polling: iwarp::Polling,
    pub core: Option<usize>,
    /// Poll loops (`IWARP_QUEUES`).
    pub queues: u16,
    /// Per-loop lines at exit (`IWARP_STATS=yes`).
    pub stats: bool,
    /// No checksums on a DPDK link of ours (`IWARP_TRUSTED_LINK=yes`).
    pub trusted_link: bool,
    pub mpa: iwarp::MpaConfig,
    pub connect_retry: std::time::Duration,
    pub linger: std::time::Duration,
    pub share: Option<iwarp::SharedPorts>,
}

/// First port of the stack's ephemeral range on an address of its own
/// (the datapath's default `ephemeral_base`, IANA's dynamic ports).
pub(crate) const EPHEMERAL_FROM: u16 = 49152;

/// Most poll loops a context runs (`IWARP_QUEUES`; the stack's limit).
const MAX_QUEUES: u16 = 128;

/// Descriptors of each RX and TX ring of a DPDK port of several queues:
/// every queue's rings count in the port's one mbuf pool, which must fit
/// in the EAL's 256 MiB (`floating_vdev_args`) with the rest.
const MULTI_QUEUE_DESC: u16 = 256;

impl Engine {
    /// Where `rdma_bind_addr` to port 0 picks a port: the range the
    /// stack's own outgoing connections use, which on a shared address is
    /// the range the XDP program steers to us.
    pub fn ephemeral_from(&self) -> u16 {
        self.share.as_ref().map_or(EPHEMERAL_FROM, |p| p.local_from)
    }

    /// Whether TCP to `port` at our address reaches the stack.
    pub fn port_is_ours(&self, port: u16) -> bool {
        steered(self.share.as_ref(), port)
    }

    /// A connection was made on poll loop `lp` (counted for
    /// `IWARP_STATS`).
    pub fn count_qp(&self, lp: usize) {
        if let Some(c) = self.qps_per_loop.get(lp) {
            c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

impl Config {
    /// From the variables, through `get` (the environment, or a test's map).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let link = Link::from_vars(&get)?;
        let (ip, prefix_len) = ip_from_vars(&get)?;
        let mtu = mtu_from_vars(&get)?;
        let polling = match get("IWARP_POLL").as_deref() {
            None | Some("") | Some("inline") => iwarp::Polling::Inline,
            Some("busy") => iwarp::Polling::Busy,
            Some("adaptive") => iwarp::Polling::Adaptive,
            Some(other) => {
                return Err(format!(
                    "IWARP_POLL={other}: expected inline, busy or adaptive"
                ))
            }
        };
        let core = match get("IWARP_CORE") {
            None => None,
            Some(c) => Some(
                c.parse()
                    .map_err(|_| format!("IWARP_CORE={c}: expected a CPU number"))?,
            ),
        };
        let mpa = match get("IWARP_MPA").as_deref() {
            None | Some("") | Some("default") => iwarp::default_mpa(),
            Some("siw") => iwarp::siw_mpa(),
            Some("nocrc") => iwarp::MpaConfig {
                crc: false,
                ..iwarp::default_mpa()
            },
            Some(other) => {
                return Err(format!("IWARP_MPA={other}: expected default, siw or nocrc"))
            }
        };
        let connect_retry = match get("IWARP_CONNECT_RETRY_MS") {
            None => std::time::Duration::ZERO,
            Some(v) => std::time::Duration::from_millis(
                v.parse()
                    .map_err(|_| format!("IWARP_CONNECT_RETRY_MS={v}: expected milliseconds"))?,
            ),
        };
        let linger = std::time::Duration::from_millis(match get("IWARP_LINGER_MS") {
            None => 2000,
            Some(v) => v
                .parse()
                .map_err(|_| format!("IWARP_LINGER_MS={v}: expected milliseconds"))?,
        });
        let share = match get("IWARP_SHARE_ADDRESS").as_deref() {
            None | Some("") | Some("no") => None,
            Some("yes") if !matches!(link, Link::Xdp { .. }) => {
                return Err(
                    "IWARP_SHARE_ADDRESS=yes: only with IWARP_BACKEND=xdp (a DPDK \
                            port has no kernel to share the address with); unset it"
                        .into(),
                )
            }
            Some("yes") => {
                let mut p = iwarp::SharedPorts::new(&[]);
                if let Some(list) = get("IWARP_LISTEN_PORTS") {
                    for w in list.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                        p.listen.push(w.parse().map_err(|_| {
                            format!("IWARP_LISTEN_PORTS={list}: expected ports, comma-separated")
                        })?);
                    }
                }
                if let Some(v) = get("IWARP_LOCAL_PORTS_FROM") {
                    p.local_from = v
                        .parse()
                        .map_err(|_| format!("IWARP_LOCAL_PORTS_FROM={v}: expected a port"))?;
                }
                p.check()
                    .map_err(|e| format!("IWARP_SHARE_ADDRESS=yes: {e}"))?;
                Some(p)
            }
            Some(other) => return Err(format!("IWARP_SHARE_ADDRESS={other}: expected yes or no")),
        };
        let queues = match get("IWARP_QUEUES") {
            None => 1,
            Some(v) => v
                .parse::<u16>()
                .ok()
                .filter(|n| (1..=MAX_QUEUES).contains(n))
                .ok_or_else(|| {
                    format!(
                        "IWARP_QUEUES={v}: expected the number of poll loops, 1 to {MAX_QUEUES}"
                    )
                })?,
        };
        if queues > 1 && share.is_some() {
            return Err(format!(
                "IWARP_QUEUES={queues} with IWARP_SHARE_ADDRESS=yes: an address shared with \
                 the kernel takes one poll loop; set IWARP_QUEUES=1 or unset IWARP_SHARE_ADDRESS"
            ));
        }
        let stats = match get("IWARP_STATS").as_deref() {
            None | Some("") | Some("no") => false,
            Some("yes") => true,
            Some(other) => return Err(format!("IWARP_STATS={other}: expected yes or no")),
        };
        let trusted_link = match get("IWARP_TRUSTED_LINK").as_deref() {
            None | Some("") | Some("no") => false,
            Some("yes") if matches!(link, Link::Xdp { .. }) => {
                return Err(
                    "IWARP_TRUSTED_LINK=yes: only with IWARP_BACKEND=memif or dpdk (shared \
                            memory between two of our processes; AF_XDP reaches a wire); \
                            unset it"
                        .into(),
                )
            }
            Some("yes") => true,
            Some(other) => return Err(format!("IWARP_TRUSTED_LINK={other}: expected yes or no")),
        };
        Ok(Config {
            queues,
            stats,
            trusted_link,
            share,
            linger,
            connect_retry,
            mpa,
            link,
            ip,
            prefix_len,
            mtu,
            polling,
            core,
        })
    }
}

/// Whether the XDP program steers TCP to `port` to the stack: always on
/// an address of its own; on a shared one, its listening ports and its
/// local range only.
fn steered(share: Option<&iwarp::SharedPorts>, port: u16) -> bool {
    share.is_none_or(|p| port >= p.local_from || p.listen.contains(&port))
}

/// Where the stack's frames go: the device the environment names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Link {
    /// `IWARP_BACKEND=xdp`: AF_XDP on the kernel interface `IWARP_IFACE`.
    Xdp { iface: String },
    /// `IWARP_BACKEND=memif`: one end of our own memif link.
    Memif {
        /// `IWARP_MEMIF=server:PATH` (else `client:PATH`).
        server: bool,
        /// The socket file both ends name.
        socket: std::path::PathBuf,
        /// `IWARP_MEMIF_ID`.
        id: u32,
        /// [`dpdk_mac`] of `IWARP_IP`.
        mac: [u8; 6],
        /// `IWARP_MTU`, or 1500.
        mtu: usize,
    },
    /// `IWARP_BACKEND=dpdk`: the DPDK port these devargs name
    /// (`IWARP_DPDK_VDEV`, or `IWARP_MEMIF` made into memif devargs),
    /// hot-plugged into the process's one EAL.
    Dpdk {
        devargs: String,
        /// The MAC the device reports (node GUID, GID): the `mac=` of the
        /// devargs, which the memif shorthand sets to
        /// [`dpdk_mac`] of `IWARP_IP`; that address too for devargs
        /// without one.
        mac: [u8; 6],
        /// The MTU the port is opened with (`IWARP_MTU`, or DPDK's 1500).
        mtu: usize,
        /// `IWARP_MEMIF=server:PATH`: the socket file this end creates,
        /// which a server process before it may have left behind
        /// ([`clear_stale_socket`]).
        server_socket: Option<std::path::PathBuf>,
    },
}

impl Link {
    /// From `IWARP_BACKEND` and the variables of that backend (for DPDK
    /// also `IWARP_IP`, whose address makes the port's MAC, and
    /// `IWARP_MTU`): what the device list needs, before the stack starts.
    pub fn from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<Link, String> {
        match get("IWARP_BACKEND").as_deref() {
            None | Some("") | Some("xdp") => {
                let iface = get("IWARP_IFACE").filter(|s| !s.is_empty()).ok_or(
                    "set IWARP_IFACE to the interface our stack runs on (or IWARP_BACKEND=dpdk \
                     with IWARP_MEMIF or IWARP_DPDK_VDEV)",
                )?;
                Ok(Link::Xdp { iface })
            }
            Some("dpdk") => Self::dpdk_from_vars(get),
            Some("memif") => Self::memif_from_vars(get),
            Some(other) => Err(format!(
                "IWARP_BACKEND={other}: expected xdp, memif or dpdk"
            )),
        }
    }

    fn memif_from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<Link, String> {
        let (ip, _) = ip_from_vars(get)?;
        let mtu = mtu_from_vars(get)?.unwrap_or(1500);
        if get("IWARP_DPDK_VDEV").is_some_and(|v| !v.is_empty()) {
            return Err(
                "IWARP_DPDK_VDEV: only with IWARP_BACKEND=dpdk (our memif takes IWARP_MEMIF)"
                    .into(),
            );
        }
        let m = get("IWARP_MEMIF").filter(|s| !s.is_empty()).ok_or(
            "IWARP_BACKEND=memif: set IWARP_MEMIF=server:/path/to/socket (or \
             client:/path/to/socket; both ends name the same socket file)",
        )?;
        let (server, path) = match m.split_once(':') {
            Some(("server", p)) if !p.is_empty() => (true, p),
            Some(("client", p)) if !p.is_empty() => (false, p),
            _ => {
                return Err(format!(
                    "IWARP_MEMIF={m}: expected server:/path/to/socket or client:/path/to/socket \
                     (both ends name the same socket file)"
                ))
            }
        };
        let id = match get("IWARP_MEMIF_ID") {
            None => 0,
            Some(i) => i.parse::<u32>().map_err(|_| {
                format!(
                    "IWARP_MEMIF_ID={i}: expected the link id (a number, the same at both ends)"
                )
            })?,
        };
        Ok(Link::Memif {
            server,
            socket: path.into(),
            id,
            mac: dpdk_mac(ip),
            mtu,
        })
    }

    fn dpdk_from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<Link, String> {
        let (ip, _) = ip_from_vars(get)?;
        let mtu = mtu_from_vars(get)?.unwrap_or(usize::from(iwarp::dpdk::DEFAULT_MTU));
        let vdev = get("IWARP_DPDK_VDEV").filter(|s| !s.is_empty());
        let memif = get("IWARP_MEMIF").filter(|s| !s.is_empty());
        let id = get("IWARP_MEMIF_ID");
        let mut server_socket = None;
        let devargs = match (vdev, memif) {
            (Some(_), Some(_)) => {
                return Err(
                    "IWARP_DPDK_VDEV and IWARP_MEMIF both set: give one (IWARP_MEMIF \
                            is the shorthand for a memif vdev)"
                        .into(),
                )
            }
            (None, None) => {
                return Err(
                    "IWARP_BACKEND=dpdk: set IWARP_MEMIF=server:/path/to/socket (or \
                            client:/path/to/socket), or IWARP_DPDK_VDEV to a DPDK device's \
                            devargs (e.g. net_memif0,role=server,id=0,socket=/run/iwarp/memif.sock,\
                            socket-abstract=no)"
                        .into(),
                )
            }
            (Some(v), None) => {
                if id.is_some() {
                    return Err("IWARP_MEMIF_ID: only with IWARP_MEMIF (put id= in \
                                IWARP_DPDK_VDEV instead)"
                        .into());
                }
                if v.contains(char::is_whitespace) {
                    return Err(format!(
                        "IWARP_DPDK_VDEV={v}: devargs contain no spaces \
                         (name,key=value,...)"
                    ));
                }
                v
            }
            (None, Some(m)) => {
                let role = match m.split_once(':') {
                    Some(("server", p)) if !p.is_empty() => (iwarp::dpdk::MemifRole::Server, p),
                    Some(("client", p)) if !p.is_empty() => (iwarp::dpdk::MemifRole::Client, p),
                    _ => {
                        return Err(format!(
                            "IWARP_MEMIF={m}: expected server:/path/to/socket or \
                             client:/path/to/socket (both ends name the same socket file)"
                        ))
                    }
                };
                // Devargs are split at commas: a path with one cannot be
                // given to the driver.
                if role.1.contains(',') || role.1.contains(char::is_whitespace) {
                    return Err(format!(
                        "IWARP_MEMIF={m}: the socket path may contain no comma or space"
                    ));
                }
                let id = match &id {
                    None => 0,
                    Some(i) => i.parse::<u32>().map_err(|_| {
                        format!("IWARP_MEMIF_ID={i}: expected the link id (a number, the same at both ends)")
                    })?,
                };
                if role.0 == iwarp::dpdk::MemifRole::Server {
                    server_socket = Some(std::path::PathBuf::from(role.1));
                }
                let mac = dpdk_mac(ip);
                format!(
                    "{},mac={}",
                    iwarp::dpdk::memif_devargs(0, role.0, id, std::path::Path::new(role.1)),
                    format_mac(mac)
                )
            }
        };
        let mac = match devargs.split(',').find_map(|kv| kv.strip_prefix("mac=")) {
            Some(m) => parse_mac(m).ok_or_else(|| {
                format!("IWARP_DPDK_VDEV={devargs}: mac={m} is not a MAC address")
            })?,
            None => dpdk_mac(ip),
        };
        Ok(Link::Dpdk {
            devargs,
            mac,
            mtu,
            server_socket,
        })
    }
}

/// The MAC of a DPDK port of ours whose devargs name none: locally
/// administered, unicast, from our address (`02:00:` and its four octets),
/// so that both ends of a link differ.
pub(crate) fn dpdk_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x02, 0x00, o[0], o[1], o[2], o[3]]
}

fn format_mac(m: [u8; 6]) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

/// `aa:bb:cc:dd:ee:ff`.
pub(crate) fn parse_mac(s: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = s.trim().split(':');
    for b in &mut mac {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

fn ip_from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<(Ipv4Addr, u8), String> {
    let ip_var = get("IWARP_IP").ok_or(
        "set IWARP_IP to our address and prefix (e.g. 10.0.0.1/24): an address the kernel \
         does not use",
    )?;
    parse_cidr(&ip_var).ok_or_else(|| format!("IWARP_IP={ip_var}: expected an IPv4 address/prefix"))
}

fn mtu_from_vars(get: &impl Fn(&str) -> Option<String>) -> Result<Option<usize>, String> {
    match get("IWARP_MTU") {
        None => Ok(None),
        Some(m) => Ok(Some(
            m.parse::<usize>()
                .ok()
                .filter(|m| (576..=65_000).contains(m))
                .ok_or_else(|| format!("IWARP_MTU={m}: expected 576..=65000"))?,
        )),
    }
}

fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.trim().split_once('/')?;
    let p: u8 = p.parse().ok()?;
    (p <= 32).then_some(())?;
    Some((a.parse().ok()?, p))
}

/// AF_XDP on `iface`.
fn open_xdp(cfg: &Config, iface: &str) -> Result<iwarp::Context, String> {
    let mut opts = iwarp::XdpOptions::new(iface, cfg.ip, cfg.prefix_len);
    opts.host.polling = cfg.polling;
    opts.host.mtu = cfg.mtu;
    opts.host.core = cfg.core;
    opts.queue_count = cfg.queues;
    opts.share_address = cfg.share.clone();
    // The kernel lets go of the AF_XDP socket and XDP program of a process
    // that just exited a moment later: a program started right after
    // another on the same interface waits for them (up to 2 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    loop {
        match iwarp::Context::af_xdp(&opts) {
            Ok(c) => return Ok(c),
            Err(iwarp::Error::Backend(
                iwarp_xdp::Error::Bind {
                    errno: libc::EBUSY, ..
                }
                | iwarp_xdp::Error::AttachBusy { .. },
            )) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => return Err(format!("AF_XDP on {iface}: {e}")),
        }
    }
}

/// A memif server's socket file left by a server process that has ended
/// (the stack lives as long as its process, and the port is never closed:
/// the file stays), removed so that this one can create it again; one
/// that a live server still listens on is refused, as is a path that is
/// not a socket.
fn clear_stale_socket(path: &std::path::Path) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let shown = path.display();
    if !meta.file_type().is_socket() {
        return Err(format!(
            "IWARP_MEMIF=server:{shown}: that path exists and is not a socket; name another \
             path or remove it"
        ));
    }
    // memif's sockets are SOCK_SEQPACKET: a stream connect to a live one
    // fails with EPROTOTYPE, to a file nothing is bound to any more with
    // ECONNREFUSED.
    match std::os::unix::net::UnixStream::connect(path) {
        Err(e) if e.raw_os_error() == Some(libc::EPROTOTYPE) => Err(format!(
            "IWARP_MEMIF=server:{shown}: another memif server listens on that socket; make \
             this end client:{shown}, or give it a socket of its own"
        )),
        Ok(_) => Err(format!(
            "IWARP_MEMIF=server:{shown}: another memif server listens on that socket; make \
             this end client:{shown}, or give it a socket of its own"
        )),
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => std::fs::remove_file(path)
            .map_err(|e| format!("IWARP_MEMIF=server:{shown}: removing the stale socket: {e}")),
        Err(e) => Err(format!("IWARP_MEMIF=server:{shown}: {e}")),
    }
}

/// The DPDK port `devargs`, hot-plugged into an EAL this starts: one per
/// process, with no hugepages, no PCI scan and no shared runtime files
/// (several such programs run side by side), its main lcore floating over
/// the CPUs the program may use. A program that started DPDK's EAL itself
/// cannot have a second: that is refused.
fn open_dpdk(cfg: &Config, devargs: &str) -> Result<iwarp::Context, String> {
    use iwarp::dpdk;
    if !dpdk::AVAILABLE {
        return Err(
            "IWARP_BACKEND=dpdk: this library was built without DPDK (install \
                    libdpdk-dev and pkg-config, then rebuild with scripts/verbs-build.sh)"
                .into(),
        );
    }
    let eal = dpdk::Eal::init(dpdk::floating_vdev_args(&[], &dpdk::allowed_cpus()))
        .map_err(|e| format!("IWARP_BACKEND=dpdk: starting DPDK's EAL: {e}"))?;
    let mut opts = iwarp::DpdkOptions::new(devargs, cfg.ip, cfg.prefix_len);
    opts.host.polling = cfg.polling;
    opts.host.mtu = cfg.mtu;
    opts.host.core = cfg.core;
    opts.host.trusted_link = cfg.trusted_link;
    opts.queue_count = cfg.queues;
    if cfg.queues > 1 {
        opts.queues = dpdk::Queues {
            rx_desc: MULTI_QUEUE_DESC,
            tx_desc: MULTI_QUEUE_DESC,
        };
    }
    iwarp::Context::dpdk(&eal, &opts).map_err(|e| format!("DPDK port {devargs}: {e}"))
}

/// One end of our memif link.
fn open_memif(
    cfg: &Config,
    server: bool,
    socket: &std::path::Path,
    id: u32,
    mac: [u8; 6],
) -> Result<iwarp::Context, String> {
    let role = if server {
        iwarp::memif::Role::Server
    } else {
        iwarp::memif::Role::Client
    };
    let mut opts = iwarp::MemifOptions::new(role, socket, id, cfg.ip, cfg.prefix_len);
    opts.mac = Some(mac);
    opts.link.timeout = std::time::Duration::from_secs(60);
    opts.host.polling = cfg.polling;
    opts.host.mtu = cfg.mtu;
    opts.host.core = cfg.core;
    opts.host.trusted_link = cfg.trusted_link;
    opts.queue_count = cfg.queues;
    let side = if server { "server" } else { "client" };
    iwarp::Context::memif(&opts)
        .map_err(|e| format!("IWARP_MEMIF={side}:{}: {e}", socket.display()))
}

/// The stack, started on first use; the error (also printed once on
/// standard error) says what is missing.
pub(crate) fn engine() -> Result<&'static Engine, &'static str> {
    static ENGINE: OnceLock<Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let r = start();
            if let Err(e) = &r {
                eprintln!("iwarp verbs: cannot start the stack: {e}");
            }
            r
        })
        .as_ref()
        .map_err(|e| e.as_str())
}

fn start() -> Result<Engine, String> {
    let cfg = Config::from_vars(|k| std::env::var(k).ok())?;
    let ctx = match &cfg.link {
        Link::Xdp { iface } => open_xdp(&cfg, iface)?,
        Link::Memif {
            server,
            socket,
            id,
            mac,
            ..
        } => open_memif(&cfg, *server, socket, *id, *mac)?,
        Link::Dpdk {
            devargs,
            server_socket,
            ..
        } => {
            if let Some(p) = server_socket {
                clear_stale_socket(p)?;
            }
            open_dpdk(&cfg, devargs)?
        }
    };
    if cfg.stats {
        // Registered first, so run after the linger below (atexit runs
        // its functions in reverse order): the counters then include the
        // connections' closes.
        // SAFETY: registers a plain `extern "C"` function, run once at exit.
        unsafe { libc::atexit(report_at_exit) };
    }
    // SAFETY: registers a plain `extern "C"` function, run once at exit.
    unsafe { libc::atexit(crate::objects::linger_at_exit) };
    let qps_per_loop = (0..ctx.loops())
        .map(|_| std::sync::atomic::AtomicU64::new(0))
        .collect();
    Ok(Engine {
        qps_per_loop,
        ctx,
        ip: cfg.ip,
        fin_grace: if cfg.mpa.first_fpdu_delay > 0 {
            std::time::Duration::from_millis(100)
        } else {
            std::time::Duration::ZERO
        },
        mpa: cfg.mpa,
        connect_retry: cfg.connect_retry,
        linger: cfg.linger,
        share: cfg.share,
    })
}

/// `IWARP_STATS=yes`: the per-loop lines, at exit.
extern "C" fn report_at_exit() {
    let Ok(e) = engine() else { return };
    let qps: Vec<u64> = e
        .qps_per_loop
        .iter()
        .map(|c| c.load(std::sync::atomic::Ordering::Relaxed))
        .collect();
    match e.ctx.stats() {
        Ok(s) => eprint!("{}", loop_lines(&qps, &s.loops)),
        Err(err) => eprintln!("iwarp verbs: the poll loops' counters: {err}"),
    }
}

/// One line per poll loop: QPs connected on it, its frames in and out,
/// the octets TCP delivered on its connections.
fn loop_lines(qps: &[u64], loops: &[iwarp::LoopSplit]) -> String {
    loops
        .iter()
        .enumerate()
        .map(|(i, l)| {
            format!(
                "iwarp verbs: loop {i}: {} QPs, {} frames in, {} frames out, {} octets \
                 delivered\n",
                qps.get(i).copied().unwrap_or(0),
                l.poll_loop.rx_frames,
                l.poll_loop.tx_frames,
                l.tcp_delivered
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn cfg(vars: &[(&str, &str)]) -> Result<Config, String> {
        let m: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Config::from_vars(|k| m.get(k).cloned())
    }

    #[test]
    fn a_shared_address_steers_only_the_listed_ports_and_the_local_range() {
        assert!(steered(None, 7471) && steered(None, 1));
        let p = iwarp::SharedPorts::new(&[7471]);
        assert!(steered(Some(&p), 7471));
        assert!(!steered(Some(&p), 7472));
        assert!(!steered(Some(&p), p.local_from - 1));
        assert!(steered(Some(&p), p.local_from) && steered(Some(&p), u16::MAX));
    }

    #[test]
    fn the_environment_configures_the_stack_and_says_what_is_missing() {
        let c = cfg(&[("IWARP_IFACE", "veth0"), ("IWARP_IP", "10.0.0.1/24")]).unwrap();
        assert_eq!(
            (&c.link, c.ip, c.prefix_len),
            (
                &Link::Xdp {
                    iface: "veth0".into()
                },
                Ipv4Addr::new(10, 0, 0, 1),
                24
            )
        );
        assert_eq!(
            (c.mtu, c.polling, c.core),
            (None, iwarp::Polling::Inline, None)
        );
        let c = cfg(&[
            ("IWARP_IFACE", "veth0"),
            ("IWARP_IP", "10.0.0.1/24"),
            ("IWARP_MTU", "9000"),
            ("IWARP_POLL", "busy"),
            ("IWARP_CORE", "1"),
        ])
        .unwrap();
        assert_eq!(
            (c.mtu, c.polling, c.core),
            (Some(9000), iwarp::Polling::Busy, Some(1))
        );
        assert_eq!(c.mpa, iwarp::default_mpa());
        let base = [("IWARP_IFACE", "v"), ("IWARP_IP", "10.0.0.1/24")];
        let with = |k, v| {
            let mut vars = base.to_vec();
            vars.push((k, v));
            cfg(&vars).unwrap()
        };
        assert_eq!(with("IWARP_MPA", "siw").mpa, iwarp::siw_mpa());
        assert!(!with("IWARP_MPA", "nocrc").mpa.crc);
        assert_eq!(c.linger, std::time::Duration::from_millis(2000));
        assert_eq!(
            with("IWARP_LINGER_MS", "250").linger,
            std::time::Duration::from_millis(250)
        );
        assert_eq!(
            with("IWARP_CONNECT_RETRY_MS", "1500").connect_retry,
            std::time::Duration::from_millis(1500)
        );
        assert_eq!(c.share, None);
        let shared = cfg(&[
            ("IWARP_IFACE", "v"),
            ("IWARP_IP", "10.0.0.1/24"),
            ("IWARP_SHARE_ADDRESS", "yes"),
            ("IWARP_LISTEN_PORTS", "7471, 19000"),
        ])
        .unwrap()
        .share
        .unwrap();
        assert_eq!(shared.listen, [7471, 19000]);
        assert_eq!(shared.local_from, iwarp::SharedPorts::DEFAULT_LOCAL_FROM);
        assert_eq!(
            with("IWARP_SHARE_ADDRESS", "yes").share,
            Some(iwarp::SharedPorts::new(&[]))
        );
        assert_eq!(
            cfg(&[
                ("IWARP_IFACE", "v"),
                ("IWARP_IP", "10.0.0.1/24"),
                ("IWARP_SHARE_ADDRESS", "yes"),
                ("IWARP_LOCAL_PORTS_FROM", "50000"),
            ])
            .unwrap()
            .share
            .unwrap()
            .local_from,
            50000
        );
        assert_eq!(with("IWARP_LISTEN_PORTS", "7471").share, None);
        for (k, v) in [
            ("IWARP_LISTEN_PORTS", "7471,x"),
            ("IWARP_LISTEN_PORTS", "0"),
            ("IWARP_LOCAL_PORTS_FROM", "80"),
            ("IWARP_LOCAL_PORTS_FROM", "70000"),
        ] {
            let e = cfg(&[
                ("IWARP_IFACE", "v"),
                ("IWARP_IP", "10.0.0.1/24"),
                ("IWARP_SHARE_ADDRESS", "yes"),
                (k, v),
            ])
            .unwrap_err();
            assert!(e.contains("IWARP_"), "{k}={v}: {e}");
        }
        assert!(cfg(&[("IWARP_IP", "10.0.0.1/24")])
            .unwrap_err()
            .contains("IWARP_IFACE"));
        assert!(cfg(&[("IWARP_IFACE", "veth0")])
            .unwrap_err()
            .contains("IWARP_IP"));
        for (k, v) in [
            ("IWARP_IP", "10.0.0.1"),
            ("IWARP_IP", "10.0.0.1/33"),
            ("IWARP_MTU", "100"),
            ("IWARP_POLL", "sometimes"),
            ("IWARP_BACKEND", "rxe"),
            ("IWARP_CORE", "x"),
            ("IWARP_MPA", "rev3"),
            ("IWARP_CONNECT_RETRY_MS", "soon"),
            ("IWARP_LINGER_MS", "-1"),
            ("IWARP_SHARE_ADDRESS", "maybe"),
        ] {
            let mut vars = vec![("IWARP_IFACE", "veth0"), ("IWARP_IP", "10.0.0.1/24")];
            vars.retain(|(n, _)| *n != k);
            vars.push((k, v));
            let e = cfg(&vars).unwrap_err();
            assert!(e.contains(k), "{k}={v}: {e}");
        }
    }

    #[test]
    fn several_poll_loops_need_a_loop_thread_and_an_address_of_their_own() {
        let xdp = [("IWARP_IFACE", "veth0"), ("IWARP_IP", "10.0.0.1/24")];
        let memif = [
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_MEMIF", "server:/s"),
            ("IWARP_IP", "10.80.0.1/24"),
        ];
        let with = |base: &[(&'static str, &'static str)],
                    extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            cfg(&v)
        };
        // One loop unless asked, and no exit report.
        let c = with(&xdp, &[]).unwrap();
        assert_eq!((c.queues, c.stats), (1, false));
        for base in [&xdp[..], &memif[..]] {
            for poll in ["busy", "adaptive"] {
                let c = with(
                    base,
                    &[
                        ("IWARP_QUEUES", "4"),
                        ("IWARP_POLL", poll),
                        ("IWARP_CORE", "2"),
                    ],
                )
                .unwrap();
                assert_eq!((c.queues, c.core), (4, Some(2)), "{base:?} {poll}");
            }
            // One loop is any polling's.
            let c = with(base, &[("IWARP_QUEUES", "1")]).unwrap();
            assert_eq!((c.queues, c.polling), (1, iwarp::Polling::Inline));
            // Several too: inline polling, named or the default, drives
            // each loop from the application's threads.
            for extra in [
                &[("IWARP_QUEUES", "2")][..],
                &[("IWARP_QUEUES", "2"), ("IWARP_POLL", "inline")][..],
            ] {
                let c = with(base, extra).unwrap();
                assert_eq!(
                    (c.queues, c.polling),
                    (2, iwarp::Polling::Inline),
                    "{extra:?}"
                );
            }
        }
        assert_eq!(
            with(&xdp, &[("IWARP_QUEUES", "128"), ("IWARP_POLL", "busy")])
                .unwrap()
                .queues,
            128
        );
        for v in ["0", "129", "two", "-1", ""] {
            let e = with(&xdp, &[("IWARP_QUEUES", v), ("IWARP_POLL", "busy")]).unwrap_err();
            assert!(
                e.contains(&format!("IWARP_QUEUES={v}:")) && e.contains("1 to 128"),
                "{v}: {e}"
            );
        }
        // An address shared with the kernel: one loop only.
        let shared = [
            ("IWARP_SHARE_ADDRESS", "yes"),
            ("IWARP_POLL", "adaptive"),
            ("IWARP_QUEUES", "2"),
        ];
        let e = with(&xdp, &shared).unwrap_err();
        assert!(
            e.contains("IWARP_QUEUES=2") && e.contains("IWARP_SHARE_ADDRESS=yes"),
            "{e}"
        );
        assert!(with(&xdp, &shared[..2]).unwrap().share.is_some());
        // The exit report.
        assert!(with(&xdp, &[("IWARP_STATS", "yes")]).unwrap().stats);
        assert!(!with(&xdp, &[("IWARP_STATS", "no")]).unwrap().stats);
        let e = with(&xdp, &[("IWARP_STATS", "1")]).unwrap_err();
        assert!(e.contains("IWARP_STATS=1"), "{e}");
        // A trusted link: memif (ours or DPDK's) only, and off unless asked.
        assert!(!with(&memif, &[]).unwrap().trusted_link);
        assert!(
            with(&memif, &[("IWARP_TRUSTED_LINK", "yes")])
                .unwrap()
                .trusted_link
        );
        let e = with(&xdp, &[("IWARP_TRUSTED_LINK", "yes")]).unwrap_err();
        assert!(e.contains("only with IWARP_BACKEND=memif or dpdk"), "{e}");
        let e = with(&memif, &[("IWARP_TRUSTED_LINK", "on")]).unwrap_err();
        assert!(e.contains("IWARP_TRUSTED_LINK=on"), "{e}");
    }

    #[test]
    fn the_exit_report_has_a_line_per_loop() {
        let split = |rx, tx, delivered| iwarp::LoopSplit {
            connections: 0,
            rx_tcp: rx,
            tx_frames: tx,
            tcp_delivered: delivered,
            poll_loop: iwarp::LoopStats {
                rx_frames: rx,
                tx_frames: tx,
                ..Default::default()
            },
        };
        assert_eq!(
            loop_lines(&[3, 2], &[split(10, 20, 300), split(40, 50, 600)]),
            "iwarp verbs: loop 0: 3 QPs, 10 frames in, 20 frames out, 300 octets delivered\n\
             iwarp verbs: loop 1: 2 QPs, 40 frames in, 50 frames out, 600 octets delivered\n"
        );
    }

    #[test]
    fn dpdk_takes_a_memif_shorthand_or_full_devargs() {
        let c = cfg(&[
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_MEMIF", "server:/run/iwarp/memif.sock"),
            ("IWARP_IP", "10.80.0.1/24"),
        ])
        .unwrap();
        let mac = [0x02, 0x00, 10, 80, 0, 1];
        assert_eq!(
            c.link,
            Link::Dpdk {
                devargs: format!(
                    "{},mac=02:00:0a:50:00:01",
                    iwarp::dpdk::memif_devargs(
                        0,
                        iwarp::dpdk::MemifRole::Server,
                        0,
                        std::path::Path::new("/run/iwarp/memif.sock")
                    )
                ),
                mac,
                mtu: 1500,
                server_socket: Some("/run/iwarp/memif.sock".into()),
            }
        );
        assert_eq!(
            (c.ip, c.prefix_len, c.mtu),
            (Ipv4Addr::new(10, 80, 0, 1), 24, None)
        );
        // The devargs the driver gets, spelled out once.
        let Link::Dpdk { devargs, .. } = &c.link else {
            unreachable!()
        };
        assert_eq!(
            devargs,
            "net_memif0,role=server,id=0,socket=/run/iwarp/memif.sock,socket-abstract=no,\
             mac=02:00:0a:50:00:01"
        );
        let c = cfg(&[
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_MEMIF", "client:/tmp/x.sock"),
            ("IWARP_MEMIF_ID", "7"),
            ("IWARP_IP", "10.80.0.2/24"),
            ("IWARP_MTU", "9000"),
        ])
        .unwrap();
        let Link::Dpdk {
            devargs,
            mac,
            mtu,
            server_socket,
        } = &c.link
        else {
            panic!("{c:?}")
        };
        // A client creates no socket: nothing of it to clear.
        assert_eq!(server_socket, &None);
        assert!(
            devargs.starts_with("net_memif0,role=client,id=7,socket=/tmp/x.sock,"),
            "{devargs}"
        );
        assert_eq!(
            (*mac, *mtu, c.mtu),
            ([2, 0, 10, 80, 0, 2], 9000, Some(9000))
        );
        // Full devargs pass through; their mac= is the device's.
        let vdev = "net_memif3,role=client,id=1,socket=/s,socket-abstract=no,mac=02:aa:bb:cc:dd:ee";
        let c = cfg(&[
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_DPDK_VDEV", vdev),
            ("IWARP_IP", "10.80.0.2/24"),
        ])
        .unwrap();
        assert_eq!(
            c.link,
            Link::Dpdk {
                devargs: vdev.into(),
                mac: [2, 0xaa, 0xbb, 0xcc, 0xdd, 0xee],
                mtu: 1500,
                server_socket: None,
            }
        );
        let c = cfg(&[
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_DPDK_VDEV", "net_af_packet0,iface=eth1"),
            ("IWARP_IP", "10.80.0.3/24"),
        ])
        .unwrap();
        assert!(
            matches!(
                c.link,
                Link::Dpdk {
                    mac: [2, 0, 10, 80, 0, 3],
                    ..
                }
            ),
            "{c:?}"
        );
        // IWARP_IFACE is not needed, nor looked at.
        assert!(cfg(&[
            ("IWARP_BACKEND", "dpdk"),
            ("IWARP_MEMIF", "server:/s"),
            ("IWARP_IP", "10.80.0.1/24"),
            ("IWARP_IFACE", "nonexistent0"),
        ])
        .is_ok());
    }

    #[test]
    fn our_memif_is_named_by_iwarp_memif_and_refuses_what_it_cannot_do() {
        let c = cfg(&[
            ("IWARP_BACKEND", "memif"),
            ("IWARP_MEMIF", "server:/run/iwarp/m.sock"),
            ("IWARP_MEMIF_ID", "3"),
            ("IWARP_IP", "10.80.0.1/24"),
            ("IWARP_TRUSTED_LINK", "yes"),
        ])
        .unwrap();
        assert_eq!(
            c.link,
            Link::Memif {
                server: true,
                socket: "/run/iwarp/m.sock".into(),
                id: 3,
                mac: [2, 0, 10, 80, 0, 1],
                mtu: 1500,
            }
        );
        assert!(c.trusted_link);
        let c = cfg(&[
            ("IWARP_BACKEND", "memif"),
            ("IWARP_MEMIF", "client:/tmp/x.sock"),
            ("IWARP_IP", "10.80.0.2/24"),
            ("IWARP_MTU", "9000"),
        ])
        .unwrap();
        assert!(
            matches!(
                &c.link,
                Link::Memif {
                    server: false,
                    id: 0,
                    mtu: 9000,
                    ..
                }
            ),
            "{c:?}"
        );
        let err = |extra: &[(&'static str, &'static str)]| {
            let mut v = vec![("IWARP_BACKEND", "memif"), ("IWARP_IP", "10.80.0.1/24")];
            v.extend_from_slice(extra);
            cfg(&v).unwrap_err()
        };
        assert!(err(&[]).contains("IWARP_MEMIF=server:"), "{}", err(&[]));
        let e = err(&[("IWARP_MEMIF", "both:/x")]);
        assert!(e.contains("expected server:"), "{e}");
        // Our memif of several queue pairs, one poll loop each.
        let mut v = vec![("IWARP_BACKEND", "memif"), ("IWARP_IP", "10.80.0.1/24")];
        v.extend_from_slice(&[("IWARP_MEMIF", "server:/x"), ("IWARP_QUEUES", "2")]);
        assert_eq!(cfg(&v).unwrap().queues, 2);
        let e = err(&[
            ("IWARP_MEMIF", "server:/x"),
            ("IWARP_DPDK_VDEV", "net_memif0"),
        ]);
        assert!(e.contains("only with IWARP_BACKEND=dpdk"), "{e}");
        let e = err(&[("IWARP_MEMIF", "server:/x"), ("IWARP_MEMIF_ID", "x")]);
        assert!(e.contains("IWARP_MEMIF_ID=x"), "{e}");
        let e = cfg(&[("IWARP_BACKEND", "nope"), ("IWARP_IP", "10.80.0.1/24")]).unwrap_err();
        assert!(e.contains("expected xdp, memif or dpdk"), "{e}");
    }

    #[test]
    fn dpdk_configuration_errors_name_the_variable_and_the_fix() {
        let base = [("IWARP_BACKEND", "dpdk"), ("IWARP_IP", "10.80.0.1/24")];
        let err = |extra: &[(&'static str, &'static str)]| {
            let mut v = base.to_vec();
            v.extend_from_slice(extra);
            cfg(&v).unwrap_err()
        };
        let e = err(&[]);
        assert!(
            e.contains("IWARP_MEMIF=server:") && e.contains("IWARP_DPDK_VDEV"),
            "{e}"
        );
        for (k, v, says) in [
            ("IWARP_MEMIF", "server", "server:/path/to/socket"),
            ("IWARP_MEMIF", "server:", "server:/path/to/socket"),
            ("IWARP_MEMIF", "master:/s", "client:/path/to/socket"),
            ("IWARP_MEMIF", "client:/a,b", "no comma"),
            ("IWARP_DPDK_VDEV", "net_memif0, role=server", "no spaces"),
            ("IWARP_DPDK_VDEV", "net_memif0,mac=zz", "mac=zz"),
        ] {
            let e = err(&[(k, v)]);
            assert!(e.contains(k) && e.contains(says), "{k}={v}: {e}");
        }
        let e = err(&[("IWARP_MEMIF", "server:/s"), ("IWARP_MEMIF_ID", "one")]);
        assert!(e.contains("IWARP_MEMIF_ID=one"), "{e}");
        let e = err(&[("IWARP_DPDK_VDEV", "net_null0"), ("IWARP_MEMIF_ID", "1")]);
        assert!(e.contains("IWARP_MEMIF_ID") && e.contains("id="), "{e}");
        let e = err(&[
            ("IWARP_DPDK_VDEV", "net_null0"),
            ("IWARP_MEMIF", "server:/s"),
        ]);
        assert!(
            e.contains("IWARP_DPDK_VDEV") && e.contains("IWARP_MEMIF"),
            "{e}"
        );
        let e = err(&[("IWARP_MEMIF", "server:/s"), ("IWARP_MTU", "10")]);
        assert!(e.contains("IWARP_MTU=10"), "{e}");
        let e = err(&[("IWARP_MEMIF", "server:/s"), ("IWARP_SHARE_ADDRESS", "yes")]);
        assert!(
            e.contains("IWARP_SHARE_ADDRESS") && e.contains("xdp"),
            "{e}"
        );
        let e = cfg(&[("IWARP_BACKEND", "dpdk"), ("IWARP_MEMIF", "server:/s")]).unwrap_err();
        assert!(e.contains("IWARP_IP"), "{e}");
        // xdp without an interface says how to get either backend.
        let e = cfg(&[("IWARP_IP", "10.0.0.1/24")]).unwrap_err();
        assert!(
            e.contains("IWARP_IFACE") && e.contains("IWARP_BACKEND=dpdk"),
            "{e}"
        );
    }

    #[test]
    fn a_memif_server_clears_a_socket_left_by_an_ended_server_only() {
        let dir = std::env::temp_dir().join(format!("iwarp-verbs-stale-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let sock = dir.join("memif.sock");
        // Nothing there: nothing to do.
        clear_stale_socket(&sock).unwrap();
        // A socket whose listener is gone (a server process that ended).
        drop(std::os::unix::net::UnixListener::bind(&sock).unwrap());
        assert!(sock.exists());
        clear_stale_socket(&sock).unwrap();
        assert!(!sock.exists());
        // A live listener: refused, and its file kept.
        let live = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let e = clear_stale_socket(&sock).unwrap_err();
        assert!(
            e.contains("another memif server") && e.contains("client:"),
            "{e}"
        );
        assert!(sock.exists());
        drop(live);
        std::fs::remove_file(&sock).unwrap();
        // Not a socket: refused, the file kept.
        std::fs::write(&sock, b"x").unwrap();
        let e = clear_stale_socket(&sock).unwrap_err();
        assert!(e.contains("not a socket"), "{e}");
        assert!(sock.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
