//! The iWARP stack's public API, shaped after libibverbs and librdmacm.
//!
//! A [`Context`] is one stack instance: a frame device, an address, and a
//! core-pinned poll loop. The device is any [`FrameDevice`]
//! ([`Context::with_device`]); the backends are providers behind cargo
//! features, both on by default: `xdp` (AF_XDP, `Context::af_xdp`, its
//! crate as `iwarp::xdp`) and `dpdk` (DPDK ports and memif,
//! `Context::dpdk`, its crate as `iwarp::dpdk`); the
//! simulated link ([`Context::sim_pair`]) needs neither, nor root. A
//! context may also run one poll loop per receive queue, each connection
//! owned by one loop ([`Context::sim_pair_queues`], on an in-memory link
//! whose frames RSS steers to a queue; iWARP over MPA/TCP only).
//! From it come protection domains ([`Pd`]), memory
//! regions ([`Mr`]), completion queues ([`Cq`]), and connections: the
//! active side calls [`Context::connect`], the passive side
//! [`Context::listen`] and takes [`ConnectRequest`]s it accepts or rejects,
//! with private data both ways. A connected [`Qp`] posts work and its
//! completions arrive on its CQ.
//!
//! Posting and polling never make a syscall: a post is a push on the loop's
//! lock-free command queue, and a CQ is a lock-free ring the loop fills.
//! Setup calls (register, connect, accept) wait for the loop's answer.
//! With [`Polling::Inline`] no loop thread spins: the application thread
//! that posts or polls runs the loop's round itself (run to completion;
//! the device's own calls, such as an AF_XDP transmit kick, then happen
//! on that thread). On a context of several poll loops each thread drives
//! the loops its calls need (a CQ's, its queue pairs' loops).
//!
//! A running context shows what it does: [`Context::stats`] and
//! [`Qp::stats`] read live counters (stack, TCP, interface, poll loop,
//! device and the bind mode it obtained), and the stack emits `tracing`
//! events (connect, accept, reject, Terminate, flush, CQ overrun,
//! retransmission timeouts) to whatever subscriber the application
//! installs. A thread that sleeps rather than polls waits on a CQ's
//! eventfd ([`Cq::notify_fd`], armed by [`Cq::req_notify`]).
//!
//! ```
//! use std::net::SocketAddrV4;
//! use iwarp::{Access, ConnectOptions, Context, ListenOptions, WorkRequest, WcOpcode};
//! # fn main() -> Result<(), iwarp::Error> {
//! let (server, client) = Context::sim_pair();
//! let (spd, cpd) = (server.alloc_pd()?, client.alloc_pd()?);
//! let inbox = spd.register(vec![0; 64], Access::LOCAL_WRITE)?;
//! let hello = cpd.register(b"hello".to_vec(), Access::LOCAL_READ)?;
//! let (scq, ccq) = (server.create_cq(64), client.create_cq(64));
//! let listener = server.listen(7000, &ListenOptions::new(&spd))?;
//! let remote = server.addr();
//! let t = std::thread::spawn(move || {
//!     client
//!         .connect(SocketAddrV4::new(remote, 7000), &ConnectOptions::new(&cpd, &ccq))
//!         .map(|qp| (client, qp, hello, ccq))
//! });
//! let req = listener.get_request(std::time::Duration::from_secs(5))?;
//! assert_eq!(req.remote(), std::net::Ipv4Addr::new(10, 0, 0, 2));
//! // Receives posted before accepting are in place before the peer can send.
//! req.post_recv(1, inbox.sge(0, 64))?;
//! let _sqp = req.accept(&Default::default(), &scq)?;
//! let (_client, cqp, hello, ccq) = t.join().unwrap()?;
//! cqp.post_send(WorkRequest::Send { wr_id: 2, signaled: true, local: hello.sge(0, 5).into(), solicited: false, invalidate: None })?;
//! let wc = scq.wait(std::time::Duration::from_secs(5)).expect("a completion");
//! assert_eq!((wc.wr_id, wc.opcode, wc.byte_len), (1, Some(WcOpcode::Recv), 5));
//! assert_eq!(&inbox.read(0, 5)?, b"hello");
//! # let _ = ccq;
//! # Ok(()) }
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod context;
mod cq;
mod error;
mod host;
#[cfg(test)]
mod inline_loops_tests;
mod listener;
mod mr;
mod options;
mod qp;
mod router;
mod stats;

pub use context::{Connecting, Context, ORDER_WAIT};
pub use cq::{Cq, Status, Wc};
pub use error::Error;
#[cfg(feature = "dpdk")]
pub use host::DpdkOptions;
#[cfg(feature = "memif")]
pub use host::MemifOptions;
#[cfg(feature = "xdp")]
pub use host::XdpOptions;
pub use host::{HostOptions, Polling, TcpOptions, INLINE_GRACE};
pub use iwarp_control::{MpaConfig, Negotiated, PeerRequest, RtrOffer, SetupError, SetupFailure};
/// Counters of a context's SCTP connections ([`Context::sctp_stats`]).
pub use iwarp_datapath::over_sctp::conn::SctpCounters;
pub use iwarp_datapath::stack::HookStatus;
/// The DPDK backend (`iwarp-dpdk`, feature `dpdk`): [`dpdk::Eal`],
/// [`dpdk::Queues`], its errors.
#[cfg(feature = "dpdk")]
pub use iwarp_dpdk as dpdk;
/// A small epoll set and an eventfd (for waiting on [`Cq::notify_fd`] with
/// other descriptors); any epoll or reactor works as well.
pub use iwarp_frame::notify::{Epoll, EventFd};
/// The frame-device interface a context runs over ([`Context::with_device`]).
pub use iwarp_frame::{Doorbell, FrameDevice};
/// Our own memif link (`iwarp-memif`, feature `memif`): its
/// [`memif::Config`], [`memif::Role`] and counters.
#[cfg(feature = "memif")]
pub use iwarp_memif as memif;
pub use iwarp_memreg::{OutOfBounds, Region};
pub use iwarp_proto::mem::{Access, AccessError, MemError, PdId, STag};
pub use iwarp_proto::qp::{
    Atomic, DisconnectCause, InlineData, PostError, QpEvent, RtrKind, SgList, Sge, WcOpcode,
    WcStatus, WorkRequest, MAX_INLINE, MAX_SGE,
};
pub use iwarp_proto::wire::{TermCode, TerminateRepr};
/// The AF_XDP backend (`iwarp-xdp`, feature `xdp`): [`xdp::XskMode`],
/// [`xdp::SharedPorts`], its errors.
#[cfg(feature = "xdp")]
pub use iwarp_xdp as xdp;
/// [`xdp::BusyPoll`] and [`xdp::SharedPorts`], where [`XdpOptions`] names
/// them.
#[cfg(feature = "xdp")]
#[doc(no_inline)]
pub use iwarp_xdp::{BusyPoll, SharedPorts};
pub use listener::{ConnectRequest, Listener};
pub use mr::{Mr, Mw, Pd};
pub use options::{
    chelsio_mpa, default_mpa, siw_mpa, AcceptOptions, ConnectOptions, ListenOptions, Transport,
};
pub use qp::{Qp, Srq};
#[cfg(feature = "dpdk")]
pub use stats::DpdkDeviceStats;
#[cfg(feature = "memif")]
pub use stats::MemifDeviceStats;
#[cfg(feature = "xdp")]
pub use stats::{AttachMode, XdpDeviceStats, XskMode};
pub use stats::{
    ContextStats, DeviceStats, IfaceStats, LoopSplit, LoopStats, QpCounters, QpStats, StackStats,
    TcpStats,
};
