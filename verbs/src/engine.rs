//! The one stack of the process: an [`iwarp::Context`] on the interface
//! the environment names, started by the first call that needs it (a
//! protection domain, a bound or resolved CM id) and kept for the life of
//! the process, as a kernel RNIC outlives the programs that use it.
//!
//! Environment (read once):
//!
//! | variable | meaning | default |
//! |---|---|---|
//! | `IWARP_IFACE` | interface the stack takes over (AF_XDP) | required |
//! | `IWARP_IP` | our address/prefix, e.g. `10.0.0.1/24` (not the kernel's) | required |
//! | `IWARP_BACKEND` | `xdp` (AF_XDP) | `xdp` |
//! | `IWARP_MTU` | IP MTU the stack uses | the interface's |
//! | `IWARP_POLL` | `inline` (the application's thread runs the stack when it polls a CQ or posts), `busy` or `adaptive` (a poll-loop thread) | `inline` |
//! | `IWARP_CORE` | CPU of the poll-loop thread (`busy`, `adaptive`) | none |
//! | `IWARP_LINGER_MS` | how long, at exit, the process waits in all for its connections to finish closing, TCP included (what it sent before still arrives, and the peer gets our FIN): those the program closed with `rdma_disconnect`, and those it left open, which exit closes as a kernel closes an exiting process's QPs | `2000` |
//! | `IWARP_CONNECT_RETRY_MS` | how long `rdma_connect` retries a connection the peer refused (no listener yet) before `REJECTED`: for clients that race their server's re-listen, such as Debian's perftest 0.17, whose own retry after a refusal reuses the ids it destroyed | `0` |
//! | `IWARP_SHARE_ADDRESS` | `yes`: the kernel owns `IWARP_IP` too (a program such as qperf reaches its peer's kernel at the same address for its own TCP control connection); only TCP to the stack's ports reaches the stack: those in `IWARP_LISTEN_PORTS` and `IWARP_LOCAL_PORTS_FROM..=65535`. ARP stays with the kernel. `no`: the address is the stack's alone | `no` |
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
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Config {
    pub iface: String,
    pub ip: Ipv4Addr,
    pub prefix_len: u8,
    pub mtu: Option<usize>,
    pub polling: iwarp::Polling,
    pub core: Option<usize>,
    pub mpa: iwarp::MpaConfig,
    pub connect_retry: std::time::Duration,
    pub linger: std::time::Duration,
    pub share: Option<iwarp::SharedPorts>,
}

/// First port of the stack's ephemeral range on an address of its own
/// (the datapath's default `ephemeral_base`, IANA's dynamic ports).
pub(crate) const EPHEMERAL_FROM: u16 = 49152;

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
}

impl Config {
    /// From the variables, through `get` (the environment, or a test's map).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Config, String> {
        let iface = get("IWARP_IFACE")
            .filter(|s| !s.is_empty())
            .ok_or("set IWARP_IFACE to the interface our stack runs on")?;
        let ip_var = get("IWARP_IP").ok_or(
            "set IWARP_IP to our address and prefix (e.g. 10.0.0.1/24): an address the kernel \
             does not use",
        )?;
        let (ip, prefix_len) = parse_cidr(&ip_var)
            .ok_or_else(|| format!("IWARP_IP={ip_var}: expected an IPv4 address/prefix"))?;
        match get("IWARP_BACKEND").as_deref() {
            None | Some("") | Some("xdp") => {}
            Some("dpdk") => {
                return Err(
                    "IWARP_BACKEND=dpdk: this library opens AF_XDP contexts only so far; \
                     use xdp"
                        .into(),
                )
            }
            Some(other) => return Err(format!("IWARP_BACKEND={other}: expected xdp or dpdk")),
        }
        let mtu = match get("IWARP_MTU") {
            None => None,
            Some(m) => Some(
                m.parse::<usize>()
                    .ok()
                    .filter(|m| (576..=65_000).contains(m))
                    .ok_or_else(|| format!("IWARP_MTU={m}: expected 576..=65000"))?,
            ),
        };
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
        Ok(Config {
            share,
            linger,
            connect_retry,
            mpa,
            iface,
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

fn parse_cidr(s: &str) -> Option<(Ipv4Addr, u8)> {
    let (a, p) = s.trim().split_once('/')?;
    let p: u8 = p.parse().ok()?;
    (p <= 32).then_some(())?;
    Some((a.parse().ok()?, p))
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
    let mut opts = iwarp::XdpOptions::new(&cfg.iface, cfg.ip, cfg.prefix_len);
    opts.host.polling = cfg.polling;
    opts.host.mtu = cfg.mtu;
    opts.host.core = cfg.core;
    opts.share_address = cfg.share.clone();
    // The kernel lets go of the AF_XDP socket and XDP program of a process
    // that just exited a moment later: a program started right after
    // another on the same interface waits for them (up to 2 s).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
    let ctx = loop {
        match iwarp::Context::af_xdp(&opts) {
            Ok(c) => break c,
            Err(iwarp::Error::Backend(
                iwarp_xdp::Error::Bind {
                    errno: libc::EBUSY, ..
                }
                | iwarp_xdp::Error::AttachBusy { .. },
            )) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(100))
            }
            Err(e) => return Err(format!("AF_XDP on {}: {e}", cfg.iface)),
        }
    };
    // SAFETY: registers a plain `extern "C"` function, run once at exit.
    unsafe { libc::atexit(crate::objects::linger_at_exit) };
    Ok(Engine {
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
            (c.iface.as_str(), c.ip, c.prefix_len),
            ("veth0", Ipv4Addr::new(10, 0, 0, 1), 24)
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
            ("IWARP_BACKEND", "dpdk"),
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
}
