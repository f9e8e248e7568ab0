//! The stack's settings ([`StackConfig`]).

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use iwarp_net::arp::SharedNeighbours;
use iwarp_net::iface::IfaceConfig;
use iwarp_net::rss::Rss;
use tcp_lite::tcp;

use super::SockId;

#[cfg(doc)]
use crate::over_tcp::IwarpOverTcp;
#[cfg(doc)]
use tcp_lite::listen::Listener;

/// [`StackConfig::unaccepted_window`]'s default: the longest MPA Request
/// (532 octets) and `MpaConfig::max_early_data` (4096), rounded up.
pub const UNACCEPTED_WINDOW: u32 = 8 << 10;

/// Where a stack sits among the poll loops of one multi-queue context:
/// the queue its loop receives, and the RSS that steers frames to queues
/// (the same at both ends of the link when the key is symmetric).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Steering {
    /// The receive steering of the context's device.
    pub rss: Rss,
    /// This stack's queue.
    pub queue: u16,
}

/// Stack settings.
#[derive(Debug, Clone)]
pub struct StackConfig {
    /// The interface.
    pub iface: IfaceConfig,
    /// TCP tunables (the MSS is clamped to what the MTU allows).
    pub tcp: tcp::Config,
    /// Secret for RFC 6528 initial sequence numbers.
    pub isn_secret: [u8; 16],
    /// Use this initial sequence number instead (tests of sequence wrap).
    pub fixed_isn: Option<u32>,
    /// Accept queue length per listener. An iWARP connection counts
    /// against it from its handshake until the application accepts it
    /// (`Accept`; for a listener that is not manual, until the MPA
    /// exchange ends): awaiting the MPA Request or holding it for the
    /// application's decision. Beyond it a SYN is dropped, and so is the
    /// ACK that would complete a handshake, as Linux does with a full
    /// accept queue ([`Listener::accept_queue_full`]).
    pub backlog: usize,
    /// Window (octets) an iWARP connection not accepted yet offers, from
    /// its SYN-ACK on: what its peer can make it hold out of order. A
    /// legitimate peer sends the MPA Request (at most 532 octets) and
    /// nothing more before the Reply; `MpaConfig::max_early_data` (4096)
    /// more are tolerated. The window opens to `tcp.rcv_buf` once the
    /// connection is accepted.
    pub unaccepted_window: u32,
    /// Half-open connections per listener.
    pub max_half_open: usize,
    /// Chunks a byte stream's receive and send rings hold.
    pub ring_chunks: usize,
    /// Octets a byte stream buffers inside the stack, beyond its ring,
    /// before it stops taking data segments.
    pub rx_backlog_limit: usize,
    /// First ephemeral port for active opens.
    pub ephemeral_base: u16,
    /// Octets an iWARP-over-SCTP queue pair holds out of DDP-SSN order
    /// (`SctpConns::set_max_held`, 1 MiB by default); beyond it the
    /// stream ends with an RDMAP Terminate and the association closes.
    pub sctp_max_held: usize,
    /// A safety net (ns): every iWARP connection, over TCP or SCTP, and
    /// every SCTP association is visited at least this often (one sweep
    /// of the stack's one ready set, `crate::ready`). A round polls only
    /// the connections in the ready set (a segment or a command arrived,
    /// or their last poll stopped at its segment limit, reported a CM
    /// event or moved posts held until full operation to the queue pair)
    /// and those whose next deadline ([`IwarpOverTcp::poll_timeout`]:
    /// retransmission, probe, MPA, hold and close timers; an SCTP
    /// connection's or association's own) has passed, so an idle
    /// connection costs a round nothing; the sweep only bounds how late
    /// a deadline missing from `poll_timeout` could fire. Byte streams
    /// are polled every round (their application side is a ring).
    pub idle_sweep: u64,
    /// iWARP connections frame FPDUs into TCP's send buffer
    /// ([`IwarpOverTcp::copy_transmit`]) instead of one-copy transmit.
    pub copy_tx: bool,
    /// Octets one connection (TCP or SCTP) may hold for its peer
    /// ([`crate::budget`]: out-of-order data, reassembly with its chunk
    /// overhead, early data, held segments and events); one more aborts
    /// it. Default [`crate::budget::MAX_HELD_PER_CONN`] (4 MiB).
    pub max_held_per_conn: usize,
    /// Octets all connections together may hold (plus listeners'
    /// handshake payload); beyond it the connection holding the most is
    /// aborted. Default [`crate::budget::MAX_HELD_TOTAL`] (256 MiB).
    pub max_held_total: usize,
    /// This stack is the loop of one receive queue of several
    /// ([`Steering`]): an active open, TCP or SCTP, takes a local port
    /// whose answers the RSS steers to this queue (`Rss::port_for_queue`),
    /// or fails (`ConnError::Local`) when no free port does; SCTP over UDP
    /// is refused (`SctpConns::set_steering`). `None` (the default): the
    /// next free port.
    pub steering: Option<Steering>,
    /// The first connection id this stack gives out and the step between
    /// ids (default 0 and 1): the loops of one context take ids apart
    /// (loop `i` of `n`: `i` and `n`), so an id names one connection in
    /// the whole context (a shared CQ's completions, its router). TCP and
    /// SCTP connections take ids from this one sequence
    /// ([`SockIds`](super::SockIds)).
    pub sock_ids: (SockId, SockId),
    /// Neighbours shared with the context's other loops
    /// (`Interface::share_neighbours`): ARP reaches one queue only.
    pub neighbours: Option<Arc<SharedNeighbours>>,
    /// The counter that numbers accepted connections
    /// ([`Output::Accepted`]'s `order`), shared by the loops of one
    /// context, so that the numbers give the order in which all of them
    /// accepted (an application takes its requests in that order).
    /// `None` (the default): the stack counts alone.
    ///
    /// [`Output::Accepted`]: super::Output::Accepted
    pub accept_order: Option<Arc<AtomicU64>>,
}

impl StackConfig {
    /// Defaults for `iface`.
    pub fn new(iface: IfaceConfig) -> Self {
        StackConfig {
            iface,
            tcp: tcp::Config::default(),
            isn_secret: [0x5a; 16],
            fixed_isn: None,
            backlog: 64,
            unaccepted_window: UNACCEPTED_WINDOW,
            max_half_open: 64,
            ring_chunks: 1024,
            rx_backlog_limit: 1 << 20,
            ephemeral_base: 49152,
            sctp_max_held: crate::over_sctp::conn::MAX_HELD,
            idle_sweep: 100_000_000,
            copy_tx: false,
            max_held_per_conn: crate::budget::MAX_HELD_PER_CONN,
            max_held_total: crate::budget::MAX_HELD_TOTAL,
            steering: None,
            sock_ids: (0, 1),
            neighbours: None,
            accept_order: None,
        }
    }
}
