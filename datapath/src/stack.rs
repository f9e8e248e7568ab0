//! A host stack on real frames: one Ethernet/IPv4 interface, TCP listeners
//! and connections, and on each connection either a plain byte stream (for
//! `tlnc` and tests against Linux) or an iWARP stream.
//!
//! [`Stack`] is an [`Engine`](crate::runtime::Engine): a poll loop feeds it
//! received frames and application commands and takes frames and outputs
//! back. Byte streams talk to the application through a pair of bounded
//! lock-free rings per connection ([`StreamShared`]), so the application
//! reads and writes without a command round trip and without a syscall.
//!
//! Receive flow control for byte streams: tcp-lite offers a constant window
//! and delivers in-order payload straight from the frame, so when the
//! application stops draining its ring, the stack stops taking that
//! connection's data segments (they are dropped before TCP sees them, so
//! they are neither acknowledged nor lost: the peer retransmits). ACK-only
//! segments still pass, so the other direction keeps moving.
//!
//! iWARP over SCTP (RFC 5043) shares the interface: the first `Connect` or
//! `Listen` whose [`Transport`] is SCTP makes an SCTP part
//! ([`crate::over_sctp::conn`]). The interface parses each frame once and
//! dispatches it by IP protocol ([`Interface::receive_ip`]): TCP segments
//! to the connections here, SCTP packets (IPv4 protocol 132, or UDP to the
//! encapsulation port) to the SCTP part; ARP is answered and learned once,
//! in the one cache both parts send through. SCTP connections are reached
//! by id through the same commands and CQ rings.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{fence, AtomicBool, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use iwarp_control::MpaConfig;
use iwarp_net::iface::{FrameSink, IfaceConfig, Interface, IpIngress, SctpIngress, SctpServed};
use iwarp_proto::mem::{MemoryTable, STag};
use iwarp_proto::qp::{Completion, DisconnectCause};
use tcp_lite::iface::TcpInterface;
use tcp_lite::listen::{IsnGenerator, Listener};
use tcp_lite::tcp::{self, Connection as Tcp, State as TcpState};

use crate::ConnError;
use tcp_lite::wire::{Ipv4Address, TcpRepr};

use crate::budget::{Holder, MemBudget};
use crate::latency::{CompletionLatency, Histogram};
use crate::over_sctp::conn::{SctpConns, SctpUlp};
use crate::over_tcp::{CmEvent, HostCommand, HostOutput, IwarpOverTcp, Role};
use crate::ready::{ReadySet, Slot};
use crate::StreamParams;
use iwarp_control::SetupError;

mod commands;

/// Identifies a connection inside one [`Stack`].
pub type SockId = usize;

/// [`StackConfig::unaccepted_window`]'s default: the longest MPA Request
/// (532 octets) and `MpaConfig::max_early_data` (4096), rounded up.
pub const UNACCEPTED_WINDOW: u32 = 8 << 10;

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
    /// A safety net (ns): every iWARP connection is polled at least this
    /// often. A round polls only the connections in the ready set (a
    /// segment or a command arrived, or their last poll stopped at its
    /// segment limit, reported a CM event or moved posts held until full
    /// operation to the queue pair) and those whose next deadline
    /// ([`IwarpOverTcp::poll_timeout`]: retransmission, probe, MPA, hold
    /// and close timers) has passed, so an idle connection costs a round
    /// nothing; the sweep only bounds how late a deadline missing from
    /// `poll_timeout` could fire. Byte streams are polled every round
    /// (their application side is a ring).
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
        }
    }
}

/// What runs over a connection.
#[derive(Debug, Clone)]
pub enum Ulp {
    /// A plain byte stream.
    Stream,
    /// iWARP: MPA, then DDP/RDMAP (responder on accepted connections).
    Iwarp {
        /// MPA settings.
        mpa: MpaConfig,
        /// Queue pair parameters (the EMSS is taken from TCP).
        params: StreamParams,
        /// Listeners: hand each Request to the application
        /// ([`CmEvent::ConnectRequest`]) instead of accepting it with `mpa`.
        manual: bool,
        /// Where completions go (`None`: as [`Output::Iwarp`] outputs).
        cq: Option<QpCqs>,
        /// Shared receive queue for the connection(s).
        srq: Option<iwarp_proto::qp::Srq>,
    },
}

/// What carries a connection: one endpoint state machine above, two
/// lower layers below.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Transport {
    /// TCP (tcp-lite): a byte stream, or iWARP over MPA (RFC 5044).
    #[default]
    Tcp,
    /// SCTP (RFC 9260) in raw IPv4 (protocol 132): iWARP over DDP Stream
    /// Sessions (RFC 5043).
    Sctp,
    /// [`Sctp`](Self::Sctp) inside UDP (RFC 6951) to the peer's port 9899.
    /// Listening, the same as `Sctp`.
    SctpOverUdp,
}

impl Transport {
    /// Whether SCTP carries it (raw or inside UDP).
    pub fn is_sctp(self) -> bool {
        !matches!(self, Transport::Tcp)
    }
}

/// Work on the stack's memory table, run on the loop thread between
/// frames (registration, deregistration, windows, reading or writing a
/// region): the memory table is owned by the loop, so the application
/// reaches it only this way. The closure answers through whatever channel
/// it captured.
pub struct MemoryOp(pub Box<dyn FnOnce(&mut MemoryTable) + Send>);

impl std::fmt::Debug for MemoryOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("MemoryOp(..)")
    }
}

/// A look at the stack from the loop thread, between frames (a snapshot of
/// counters, say): the closure answers through whatever channel it
/// captured. It must not block.
pub struct InspectOp(pub Box<dyn FnOnce(&Stack) + Send>);

impl std::fmt::Debug for InspectOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("InspectOp(..)")
    }
}

/// What a [`LoopHook`] reports after a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookStatus {
    /// It did work (the loop does not back off).
    Busy,
    /// Nothing to do this round.
    Idle,
    /// Finished: remove it.
    Done,
}

/// Application code run inside the poll loop after every round
/// (run-to-completion): it may post and poll (queue operations) but must
/// not block.
pub struct LoopHook(pub Box<dyn FnMut() -> HookStatus + Send>);

impl std::fmt::Debug for LoopHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LoopHook(..)")
    }
}

/// Work for a [`Stack`].
#[derive(Debug)]
pub enum Command {
    /// Open a connection to `remote:port` over `transport`: answered with
    /// `Opening` (the connection's id), then `Connected` or `Failed`
    /// carrying `token`, then (iWARP) CM events. Over SCTP the `ulp` must
    /// be iWARP: its `mpa` gives the Initiate's private data (at most 508
    /// octets), IRD/ORD and the setup and close timers; CRC, markers and
    /// RTR do not apply (RFC 5043 §4, SCTP's CRC32c covers every packet).
    Connect {
        /// Caller's tag for the answer.
        token: u64,
        /// Peer address.
        remote: Ipv4Address,
        /// Peer port (TCP or SCTP, as `transport` says).
        port: u16,
        /// What carries it.
        transport: Transport,
        /// What runs over it.
        ulp: Ulp,
    },
    /// Listen on `port` over `transport`; accepted connections come out as
    /// `Accepted`. One listener per port number over both transports (the
    /// answers name the port alone); a listener over SCTP accepts
    /// associations that arrive raw and inside UDP alike.
    Listen {
        /// Port.
        port: u16,
        /// What carries accepted connections.
        transport: Transport,
        /// What runs over accepted connections.
        ulp: Ulp,
    },
    /// Stop listening on a port, whichever transport it listens over
    /// (connections already accepted stay; those still in the handshake
    /// are dropped). Answered by `Unlistened`.
    Unlisten(u16),
    /// Run `hook` after every round until it reports `Done`.
    Hook(LoopHook),
    /// Post iWARP work on a connection.
    Iwarp(SockId, HostCommand),
    /// Post iWARP work on the connection opened by the `Connect` with this
    /// token (posted right behind it, before its id is known: receives in
    /// place before the peer can send).
    IwarpOpening(u64, HostCommand),
    /// Disconnect an iWARP connection gracefully: outstanding work completes,
    /// then TCP closes and what is still posted is flushed (byte streams close
    /// through their handle).
    Close(SockId),
    /// Abort an iWARP connection: Terminate, then RST; posted work is flushed.
    Abort(SockId),
    /// Accept a pending connect request with our private data and IRD/ORD.
    Accept {
        /// The connection.
        sock: SockId,
        /// Our private data (at most 512 octets, less 4 in Rev 2 enhanced mode).
        private_data: Vec<u8>,
        /// Our inbound RDMA Read limit.
        ird: u16,
        /// Our outbound RDMA Read limit.
        ord: u16,
        /// Where the connection's completions go (`None`: the listener's).
        cq: Option<QpCqs>,
        /// The queue pair's protection domain (`None`: the listener's),
        /// as verbs creates the QP in its own PD before accepting.
        pd: Option<iwarp_proto::mem::PdId>,
    },
    /// Reject a pending connect request, explaining in `private_data`.
    Reject {
        /// The connection.
        sock: SockId,
        /// Why (at most 512 octets).
        private_data: Vec<u8>,
    },
    /// Copy `len` octets of a registered region out (answered with `Memory`).
    ReadMem {
        /// Caller's tag.
        token: u64,
        /// Region.
        stag: STag,
        /// Offset in the region.
        offset: usize,
        /// Octets.
        len: usize,
    },
    /// Run a closure on the memory table.
    Memory(MemoryOp),
    /// Run a closure that reads the stack (counters, connection state).
    Inspect(InspectOp),
    /// Overwrite part of a registered region (a local store, no access check).
    WriteMem {
        /// Region.
        stag: STag,
        /// Offset.
        offset: usize,
        /// Data.
        data: Vec<u8>,
    },
}

/// What a [`Stack`] hands back.
#[derive(Debug)]
pub enum Output {
    /// An active open started: the connection's id, before it completes
    /// (so it can be aborted).
    Opening {
        /// The `Connect` token.
        token: u64,
        /// The connection.
        sock: SockId,
    },
    /// An active open completed.
    Connected {
        /// The `Connect` token.
        token: u64,
        /// The connection.
        sock: SockId,
        /// The byte-stream ends (for `Ulp::Stream`).
        stream: Option<Arc<StreamShared>>,
    },
    /// An active open failed.
    Failed {
        /// The `Connect` token.
        token: u64,
        /// Why.
        error: ConnError,
    },
    /// Answer to `Listen`: the port listens from now on (a SYN handled
    /// after this output finds it), or why not.
    Listening {
        /// The port.
        port: u16,
        /// `Err(PortInUse)` if the port already has a listener (kept as it was).
        result: Result<(), ListenError>,
    },
    /// Answer to `Unlisten`: the port no longer listens (`false`: it did not).
    Unlistened {
        /// The port.
        port: u16,
        /// Whether a listener was removed.
        removed: bool,
    },
    /// A listener accepted a connection.
    Accepted {
        /// Local port.
        port: u16,
        /// The connection.
        sock: SockId,
        /// Peer address.
        remote: Ipv4Address,
        /// The byte-stream ends (for `Ulp::Stream`).
        stream: Option<Arc<StreamShared>>,
    },
    /// A connection ended (after a clean close: `error` is `None`).
    Closed {
        /// The connection.
        sock: SockId,
        /// Why, if not clean.
        error: Option<ConnError>,
    },
    /// Completions and events of an iWARP connection.
    Iwarp(SockId, HostOutput),
    /// Connection-manager events of an iWARP connection.
    Cm(SockId, CmEvent),
    /// An `Accept` or `Reject` that could not be done.
    CmRefused(SockId, SetupError),
    /// Answer to `ReadMem` (`None`: no such region or range).
    Memory {
        /// The token.
        token: u64,
        /// The octets.
        data: Option<Vec<u8>>,
    },
}

/// Why a `Listen` was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenError {
    /// The port already has a listener.
    PortInUse,
    /// The transport cannot carry the ULP (a byte stream over SCTP), or
    /// this stack has no SCTP part.
    Unsupported(&'static str),
}

impl core::fmt::Display for ListenError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ListenError::PortInUse => f.write_str("port already has a listener"),
            ListenError::Unsupported(why) => f.write_str(why),
        }
    }
}

/// One entry of a [`CqRing`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqEntry {
    /// A work completion.
    Done(Completion),
    /// A post the queue pair refused (queue full, bad local buffer, not
    /// connected): verbs would fail the post call; here the post is
    /// asynchronous, so the refusal arrives on the CQ with the request's id.
    Refused {
        /// The request's id.
        wr_id: u64,
        /// Why.
        error: iwarp_proto::qp::PostError,
    },
}

/// A completion queue the stack fills directly: one lock-free ring shared by
/// the poll loop (producer) and the application (consumer), so polling a CQ
/// is a queue operation, never a command round trip or a syscall.
pub struct CqRing {
    /// Completions, each with the connection it belongs to.
    pub ring: ArrayQueue<(SockId, CqEntry)>,
    /// Set when a completion found the ring full (verbs' CQ overrun: the
    /// completion is lost, so the application must size the CQ for its
    /// queues).
    pub overrun: AtomicBool,
    /// Armed by [`CqRing::arm`]: the next entry pushed calls the notifier
    /// and disarms (one shot, as `ibv_req_notify_cq`).
    armed: AtomicBool,
    /// Called (on the loop thread) when an entry arrives on an armed ring.
    notifier: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>>,
    /// A thread is parked in [`CqRing::park`] (or about to be).
    parked: AtomicBool,
    /// The thread that parked last (the one a push unparks).
    waiter: std::sync::Mutex<Option<std::thread::Thread>>,
}

impl std::fmt::Debug for CqRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CqRing")
            .field("len", &self.ring.len())
            .field("capacity", &self.ring.capacity())
            .field("overrun", &self.overrun)
            .field("armed", &self.armed)
            .field("notifier", &self.notifier.get().is_some())
            .finish()
    }
}

impl CqRing {
    /// A ring of `depth` completions.
    pub fn new(depth: usize) -> Self {
        CqRing {
            ring: ArrayQueue::new(depth.max(1)),
            overrun: AtomicBool::new(false),
            armed: AtomicBool::new(false),
            notifier: std::sync::OnceLock::new(),
            parked: AtomicBool::new(false),
            waiter: std::sync::Mutex::new(None),
        }
    }

    /// Park the calling thread until an entry arrives or `timeout` passes
    /// (or spuriously): the loop unparks the thread that parked last when
    /// it pushes. Returns at once if an entry is waiting. Other threads
    /// parked on the same ring at the same time wake at their timeout.
    pub fn park(&self, timeout: std::time::Duration) {
        match self.waiter.lock() {
            Ok(mut w) => *w = Some(std::thread::current()),
            Err(p) => *p.into_inner() = Some(std::thread::current()),
        }
        self.parked.store(true, Ordering::Relaxed);
        // Pairs with the fence in `push`: either the loop sees `parked` or
        // we see its entry (and an unpark before our park makes the park
        // return).
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.ring.is_empty() {
            std::thread::park_timeout(timeout);
        }
        self.parked.store(false, Ordering::Relaxed);
    }

    /// Install the function called when an entry arrives on an armed ring
    /// (once; false if one is installed already). It runs on the poll
    /// loop's thread and must not block (write to an eventfd, say).
    pub fn set_notifier(&self, f: Box<dyn Fn() + Send + Sync>) -> bool {
        self.notifier.set(f).is_ok()
    }

    /// Arm: the next entry pushed calls the notifier once, then the ring
    /// disarms. Entries already in the ring do not fire it, so poll once
    /// more after arming (as with `ibv_req_notify_cq`).
    pub fn arm(&self) {
        self.armed.store(true, Ordering::Release);
        // Pairs with the fence in `push`: the caller polls the ring next,
        // and a store followed by a load may be reordered (x86's store
        // buffer). Without both fences the loop could push, read `armed`
        // as false, while the caller's poll misses the entry: no wake-up
        // and an empty poll, and a thread asleep on the CQ's descriptor
        // sleeps on (seen with fio's rdma engine under load).
        std::sync::atomic::fence(Ordering::SeqCst);
    }

    /// Push one entry; a full ring records an overrun.
    fn push(&self, id: SockId, e: CqEntry) {
        if self.ring.push((id, e)).is_err() {
            if !self.overrun.swap(true, Ordering::AcqRel) {
                tracing::warn!(
                    qp = id,
                    capacity = self.ring.capacity(),
                    "CQ overrun: a completion found the completion queue full and was lost \
                     (size the CQ for every queue that completes on it)"
                );
            }
        } else {
            // Pairs with the fences in `arm` and `park`: either the
            // consumer sees this entry or we see its flag.
            std::sync::atomic::fence(Ordering::SeqCst);
            if self.armed.load(Ordering::Relaxed) && self.armed.swap(false, Ordering::AcqRel) {
                if let Some(f) = self.notifier.get() {
                    f();
                }
            }
            if self.parked.load(Ordering::Relaxed) {
                let w = match self.waiter.lock() {
                    Ok(w) => w,
                    Err(p) => p.into_inner(),
                };
                if let Some(t) = w.as_ref() {
                    t.unpark();
                }
            }
        }
    }
}

/// The completion rings of one queue pair, as verbs gives a QP a send CQ
/// and a receive CQ (`ibv_qp_init_attr.send_cq`, `recv_cq`): completions
/// of receives ([`WcOpcode::Recv`](iwarp_proto::qp::WcOpcode::Recv) and
/// `RecvRdmaWithImm`, the flushed ones included) and refused receive posts
/// go to `recv`; those of the send queue (Send, Write, Read) and refused
/// send posts ([`CqEntry::Refused`]) go to `send`. One CQ for both is the same ring
/// twice ([`QpCqs::one`], or `From<Arc<CqRing>>`).
///
/// A clone is the same queue pair's (see [`for_connection`](Self::for_connection)):
/// whoever keeps one (the API's `Qp`) keeps the stack answering posts to
/// the connection on these rings after it has freed the connection
/// ([`Gone`]).
#[derive(Debug, Clone)]
pub struct QpCqs {
    /// Send-queue completions and refused send posts.
    pub send: Arc<CqRing>,
    /// Receive completions and refused receive posts.
    pub recv: Arc<CqRing>,
    /// Shared by the clones of one connection's `QpCqs`: more than one
    /// reference after the stack freed the connection means a handle
    /// that can still post to it exists.
    owner: Arc<()>,
}

impl QpCqs {
    /// One ring for everything.
    pub fn one(cq: Arc<CqRing>) -> Self {
        QpCqs {
            recv: cq.clone(),
            send: cq,
            owner: Arc::new(()),
        }
    }

    /// Send-queue completions to `send`, receive completions to `recv`.
    pub fn new(send: Arc<CqRing>, recv: Arc<CqRing>) -> Self {
        QpCqs {
            send,
            recv,
            owner: Arc::new(()),
        }
    }

    /// The same rings for another connection (a listener's rings for each
    /// connection it accepts): clones of the result do not keep this
    /// one's connections answered.
    pub fn for_connection(&self) -> Self {
        Self::new(self.send.clone(), self.recv.clone())
    }

    /// Whether a clone other than this one exists.
    fn shared(&self) -> bool {
        Arc::strong_count(&self.owner) > 1
    }

    /// Push one of the connection's outputs to the ring it belongs on;
    /// give back what goes to no ring (events).
    fn push(&self, id: SockId, o: HostOutput) -> Option<HostOutput> {
        match o {
            HostOutput::Completion(c)
                if matches!(
                    c.opcode,
                    iwarp_proto::qp::WcOpcode::Recv | iwarp_proto::qp::WcOpcode::RecvRdmaWithImm
                ) =>
            {
                self.recv.push(id, CqEntry::Done(c))
            }
            HostOutput::Completion(c) => self.send.push(id, CqEntry::Done(c)),
            HostOutput::RefusedRecv(wr_id, error) => {
                self.recv.push(id, CqEntry::Refused { wr_id, error })
            }
            HostOutput::Refused(wr_id, error) => {
                self.send.push(id, CqEntry::Refused { wr_id, error })
            }
            o => return Some(o),
        }
        None
    }
}

impl From<Arc<CqRing>> for QpCqs {
    fn from(cq: Arc<CqRing>) -> Self {
        QpCqs::one(cq)
    }
}

/// Connections a stack (or its SCTP part) has freed, kept so that a post
/// made after the free is still refused on the connection's CQ with why
/// it ended (as verbs flushes a post to a QP in the error state) rather
/// than vanishing: the newest [`GONE_KEPT`], and beyond those every one
/// whose [`QpCqs`] someone still holds a clone of (the API's `Qp` does,
/// until it is dropped), so a handle's post is never dropped. Those are
/// bounded by the application's own handles, not by what a peer does.
#[derive(Debug, Default)]
pub(crate) struct Gone {
    map: std::collections::BTreeMap<SockId, (Option<QpCqs>, Option<DisconnectCause>)>,
    /// Prune when the map reaches this size (amortised: at least twice
    /// what the last pruning left, [`GONE_KEPT`] at least).
    prune_at: usize,
}

impl Gone {
    /// Keep freed connection `id` (ids only grow).
    pub(crate) fn insert(&mut self, id: SockId, cq: Option<QpCqs>, cause: Option<DisconnectCause>) {
        self.map.insert(id, (cq, cause));
        if self.map.len() > self.prune_at.max(GONE_KEPT) {
            // The oldest first, those a handle holds excepted.
            let mut excess = self.map.len() - GONE_KEPT;
            self.map.retain(|_, (cq, _)| {
                let drop = excess > 0 && !cq.as_ref().is_some_and(QpCqs::shared);
                excess -= usize::from(drop);
                !drop
            });
            self.prune_at = 2 * self.map.len();
        }
    }

    /// The CQs and end cause of freed connection `id`, if kept.
    pub(crate) fn get(&self, id: SockId) -> Option<&(Option<QpCqs>, Option<DisconnectCause>)> {
        self.map.get(&id)
    }

    /// Connections kept.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Freed iWARP connections whose posts are answered whatever holds their
/// CQs (see [`Gone`]): a CQ reference and a cause each, a few dozen octets.
pub(crate) const GONE_KEPT: usize = 1024;

/// Connections handed to the application as a request
/// (`CmEvent::ConnectRequest`) that it has not answered yet (Accept,
/// Reject, Close or Abort), and the completions and refusals of their
/// posts that had no CQ to go to. A manual listener may have no CQ (the
/// API's `Listener` has none): the receives the application posts to a
/// request before accepting it are refused when the connection fails
/// first, and those refusals wait here for the CQ the Accept names — every
/// posted work request completes, in error when its queue pair goes away
/// (verbs' IBV_WC_WR_FLUSH_ERR) — or go to the outputs at any other
/// answer. Held outputs come from the application's own posts; an entry
/// with none whose connection is freed is pruned (amortised, as
/// [`Gone`]), so a peer's requests that nobody answers keep nothing.
#[derive(Debug, Default)]
pub(crate) struct Requests {
    /// A B-tree (our own ids): taken out of the stack and put back every
    /// round, where a new `HashMap` would seed its hasher each time, and an
    /// empty one is looked up without hashing.
    map: BTreeMap<SockId, Vec<HostOutput>>,
    /// Prune when the map reaches this size (at least twice what the last
    /// pruning left, [`GONE_KEPT`] at least).
    prune_at: usize,
}

impl Requests {
    /// Pass an output on to `out`, noting the requests it announces and
    /// holding the completions and refusals of those unanswered.
    #[inline]
    fn pass(&mut self, o: Output, out: &mut dyn FnMut(Output)) {
        // Nearly always: no request unanswered, and this is not one.
        if self.map.is_empty() && !matches!(o, Output::Cm(_, CmEvent::ConnectRequest(_))) {
            return out(o);
        }
        match o {
            Output::Cm(id, CmEvent::ConnectRequest(_)) => {
                self.map.entry(id).or_default();
                out(o);
            }
            Output::Iwarp(id, ho) if !matches!(ho, HostOutput::Event(_)) => {
                match self.map.get_mut(&id) {
                    Some(held) => held.push(ho),
                    None => out(Output::Iwarp(id, ho)),
                }
            }
            o => out(o),
        }
    }

    /// Forget the requests with nothing held whose connection is freed
    /// (`alive` says which the stack still has), once there are more than
    /// the last pruning left.
    fn prune(&mut self, alive: &dyn Fn(SockId) -> bool) {
        if self.map.len() > self.prune_at.max(GONE_KEPT) {
            self.map.retain(|id, held| !held.is_empty() || alive(*id));
            self.prune_at = 2 * self.map.len();
        }
    }

    /// The application answered request `id`: what was held for it goes
    /// to `cq` (an Accept's) when there is one, else to `out`.
    fn answered(&mut self, id: SockId, cq: Option<&QpCqs>, out: &mut dyn FnMut(Output)) {
        if let Some(held) = self.map.remove(&id) {
            for o in held {
                route(id, o, cq, out);
            }
        }
    }

    /// Requests tracked (tests: bounded).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }
}

/// Send a connection's output on: completions and refusals to its CQs when
/// it has them (receive completions to the receive ring, the rest to the
/// send ring), everything else (and everything without CQs) to `out`.
pub(crate) fn route(id: SockId, o: HostOutput, cq: Option<&QpCqs>, out: &mut dyn FnMut(Output)) {
    trace_output(id, &o);
    let o = match cq {
        Some(cq) => cq.push(id, o),
        None => Some(o),
    };
    if let Some(o) = o {
        out(Output::Iwarp(id, o));
    }
}

/// `tracing` events for what a connection reports: Terminates sent and
/// received, local errors, flushed work requests.
fn trace_output(id: SockId, o: &HostOutput) {
    use iwarp_proto::qp::{QpEvent, WcStatus};
    match o {
        HostOutput::Event(QpEvent::TerminateSent(t)) => {
            tracing::info!(qp = id, terminate = %t, "Terminate sent")
        }
        HostOutput::Event(QpEvent::TerminateReceived(t)) => {
            tracing::info!(qp = id, terminate = %t, "Terminate received")
        }
        HostOutput::Event(QpEvent::LocalError(t)) => {
            tracing::info!(qp = id, terminate = %t, "local error: Terminate queued")
        }
        HostOutput::Event(QpEvent::MalformedTerminate(e)) => {
            tracing::info!(qp = id, error = %e, "malformed Terminate received")
        }
        HostOutput::Completion(c) if c.status == WcStatus::Flushed => {
            tracing::debug!(qp = id, wr_id = c.wr_id, opcode = ?c.opcode, "work request flushed")
        }
        _ => {}
    }
}

/// Add the counters of `t` to `sum`.
fn add_tcp_stats(sum: &mut tcp::Stats, t: &tcp::Stats) {
    sum.rto_retransmits += t.rto_retransmits;
    sum.rescue_retransmits += t.rescue_retransmits;
    sum.recovery_probes += t.recovery_probes;
    sum.fast_retransmits += t.fast_retransmits;
    sum.ooo_segments += t.ooo_segments;
    sum.challenge_acks += t.challenge_acks;
    sum.challenge_acks_suppressed += t.challenge_acks_suppressed;
    sum.delivered += t.delivered;
    sum.sack_skipped += t.sack_skipped;
    sum.spurious_rto_undone += t.spurious_rto_undone;
    sum.ooo_dropped += t.ooo_dropped;
    sum.no_timestamp_drops += t.no_timestamp_drops;
    sum.persist_aborts += t.persist_aborts;
    sum.sack_recoveries += t.sack_recoveries;
    sum.reasm_steps += t.reasm_steps;
    sum.rack_losses += t.rack_losses;
    sum.lost_retransmits += t.lost_retransmits;
    sum.tlp_probes += t.tlp_probes;
    sum.dsacks_received += t.dsacks_received;
    sum.dsack_undos += t.dsack_undos;
    sum.cwnd_limited_ns += t.cwnd_limited_ns;
    sum.app_limited_ns += t.app_limited_ns;
    sum.cwv_nvp_reductions += t.cwv_nvp_reductions;
    sum.cwv_loss_reductions += t.cwv_loss_reductions;
    sum.rto_sacked_above += t.rto_sacked_above;
    sum.rto_hole_resent += t.rto_hole_resent;
    sum.rto_after_probe += t.rto_after_probe;
    sum.rto_repeated += t.rto_repeated;
}

/// Byte-stream state bits in [`StreamShared::state`].
pub mod flags {
    /// The peer closed its direction and every octet is in the ring.
    pub const RX_EOF: u8 = 1;
    /// Both directions closed cleanly.
    pub const CLOSED: u8 = 2;
    /// The connection failed (reset or timed out).
    pub const FAILED: u8 = 4;
}

/// The application's and the stack's shared ends of one byte stream.
///
/// A busy-polling application uses the rings directly (`tx.push`,
/// `rx.pop`, [`flags`](Self::flags)); one that would rather sleep than
/// spin uses [`send`](Self::send), [`recv`](Self::recv) and
/// [`wait_closed`](Self::wait_closed), which park the calling thread until
/// the poll loop has room, data or news for it (like a blocking socket,
/// and without taking CPU from the peer or the poll loop while waiting).
/// Each of the three wakes one thread: one may send while another
/// receives and a third waits for the close, but two threads in the same
/// call at once may sleep until their timeout. A loop that is stopped
/// wakes nobody: the timeout bounds every wait.
#[derive(Debug)]
pub struct StreamShared {
    /// Received data, in order.
    pub rx: ArrayQueue<Vec<u8>>,
    /// Data to send, in order.
    pub tx: ArrayQueue<Vec<u8>>,
    /// Set by the application after its last `tx` push: send FIN when drained.
    pub close: AtomicBool,
    /// Set by the application to reset the connection.
    pub abort: AtomicBool,
    /// [`flags`] bits set by the stack.
    pub state: AtomicU8,
    /// Why the connection failed, set once before [`flags::FAILED`].
    error: std::sync::OnceLock<ConnError>,
    /// A thread parked in `send`.
    tx_waiter: Waiter,
    /// A thread parked in `recv`.
    rx_waiter: Waiter,
    /// A thread parked in `wait_closed` (apart from the other two, so
    /// that one thread may wait for the close while another still sends).
    close_waiter: Waiter,
}

/// One parked application thread and what would wake it: the [`flags`]
/// bits in the low nibble, [`Waiter::RING`] for ring progress (room in
/// `tx`, data in `rx`). Zero: nobody waits.
#[derive(Debug, Default)]
struct Waiter {
    want: AtomicU8,
    thread: std::sync::Mutex<Option<std::thread::Thread>>,
    /// Times a thread parked here (tests check that waits happened).
    parks: std::sync::atomic::AtomicU64,
}

impl Waiter {
    /// Ring progress: room in the send ring, data in the receive ring.
    const RING: u8 = 0x80;

    /// Parks the calling thread until `ready()` holds or `deadline`
    /// passes; `want` says what the stack should wake it for. Returns
    /// whether `ready()` held.
    fn wait(&self, want: u8, deadline: Instant, mut ready: impl FnMut() -> bool) -> bool {
        loop {
            if ready() {
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            *self.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(std::thread::current());
            self.want.store(want, Ordering::SeqCst);
            // Pairs with the fence in `StreamShared::wake`: either the
            // stack sees `want`, or this check sees what it did.
            fence(Ordering::SeqCst);
            if ready() {
                self.want.store(0, Ordering::Relaxed);
                return true;
            }
            self.parks.fetch_add(1, Ordering::Relaxed);
            std::thread::park_timeout(deadline - now);
            self.want.store(0, Ordering::Relaxed);
        }
    }

    /// Unparks the waiting thread (if one still waits).
    fn wake(&self) {
        if self.want.swap(0, Ordering::AcqRel) != 0 {
            if let Some(t) = self
                .thread
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .as_ref()
            {
                t.unpark();
            }
        }
    }
}

/// Why [`StreamShared::send`] gave the data back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SendError {
    /// The send ring stayed full until the timeout.
    TimedOut(Vec<u8>),
    /// The application already closed its direction, or the connection is
    /// closed.
    Closed(Vec<u8>),
    /// The connection failed.
    Failed(ConnError, Vec<u8>),
}

impl SendError {
    /// The data that was not queued.
    pub fn into_data(self) -> Vec<u8> {
        match self {
            SendError::TimedOut(v) | SendError::Closed(v) | SendError::Failed(_, v) => v,
        }
    }
}

/// Why [`StreamShared::recv`] or [`StreamShared::wait_closed`] returned
/// without what it waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WaitError {
    /// Nothing happened before the timeout.
    TimedOut,
    /// The connection failed.
    Failed(ConnError),
}

impl core::fmt::Display for SendError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            SendError::TimedOut(_) => f.write_str("send ring full until the timeout"),
            SendError::Closed(_) => f.write_str("stream closed for sending"),
            SendError::Failed(e, _) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for SendError {}

impl core::fmt::Display for WaitError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WaitError::TimedOut => f.write_str("timed out"),
            WaitError::Failed(e) => write!(f, "connection failed: {e}"),
        }
    }
}

impl std::error::Error for WaitError {}

impl StreamShared {
    fn new(chunks: usize) -> Self {
        StreamShared {
            rx: ArrayQueue::new(chunks.max(1)),
            tx: ArrayQueue::new(chunks.max(1)),
            close: AtomicBool::new(false),
            abort: AtomicBool::new(false),
            state: AtomicU8::new(0),
            error: std::sync::OnceLock::new(),
            tx_waiter: Waiter::default(),
            rx_waiter: Waiter::default(),
            close_waiter: Waiter::default(),
        }
    }

    /// Current [`flags`] bits.
    pub fn flags(&self) -> u8 {
        self.state.load(Ordering::Acquire)
    }

    /// Why the connection failed, once [`flags::FAILED`] is set.
    pub fn error(&self) -> Option<ConnError> {
        self.error.get().copied()
    }

    fn failed(&self) -> Option<ConnError> {
        if self.flags() & flags::FAILED != 0 {
            // Set before the flag (Release/Acquire).
            Some(self.error().unwrap_or(ConnError::Reset))
        } else {
            None
        }
    }

    /// Queues `data` for sending, parking the calling thread for up to
    /// `timeout` while the send ring is full. A parked sender is woken
    /// once the ring is half empty (so it refills it in one go rather
    /// than one chunk per wake-up), or when the connection fails or
    /// closes. On error the data comes back.
    pub fn send(&self, data: Vec<u8>, timeout: Duration) -> Result<(), SendError> {
        let deadline = Instant::now() + timeout;
        let mut data = Some(data);
        let ended = self.tx_waiter.wait(
            Waiter::RING | flags::FAILED | flags::CLOSED,
            deadline,
            || {
                if self.close.load(Ordering::Acquire)
                    || self.flags() & (flags::FAILED | flags::CLOSED) != 0
                {
                    return true;
                }
                match data.take().map(|v| self.tx.push(v)) {
                    Some(Err(v)) => {
                        data = Some(v);
                        false
                    }
                    _ => true,
                }
            },
        );
        match data {
            None => Ok(()),
            Some(v) => {
                if let Some(e) = self.failed() {
                    Err(SendError::Failed(e, v))
                } else if ended {
                    Err(SendError::Closed(v))
                } else {
                    Err(SendError::TimedOut(v))
                }
            }
        }
    }

    /// The next received chunk, parking the calling thread for up to
    /// `timeout` while none is there. `Ok(None)`: the peer closed its
    /// direction and everything it sent has been returned.
    pub fn recv(&self, timeout: Duration) -> Result<Option<Vec<u8>>, WaitError> {
        let deadline = Instant::now() + timeout;
        let mut got = None;
        let done = self.rx_waiter.wait(
            Waiter::RING | flags::RX_EOF | flags::FAILED,
            deadline,
            || {
                let f = self.flags();
                // Pop after reading the flags: RX_EOF is set only once
                // every octet is in the ring, so an empty ring seen after
                // it means the end of the stream.
                got = self.rx.pop();
                got.is_some() || f & (flags::RX_EOF | flags::FAILED) != 0
            },
        );
        if let Some(v) = got {
            return Ok(Some(v));
        }
        if let Some(e) = self.failed() {
            return Err(WaitError::Failed(e));
        }
        if done {
            Ok(None)
        } else {
            Err(WaitError::TimedOut)
        }
    }

    /// Parks the calling thread until both directions are closed
    /// ([`flags::CLOSED`]), for up to `timeout`. Received data is left in
    /// the ring; an application that stops reading may hold the close up
    /// (the stack stops taking the peer's data once the ring is full).
    pub fn wait_closed(&self, timeout: Duration) -> Result<(), WaitError> {
        let deadline = Instant::now() + timeout;
        self.close_waiter
            .wait(flags::CLOSED | flags::FAILED, deadline, || {
                self.flags() & (flags::CLOSED | flags::FAILED) != 0
            });
        if let Some(e) = self.failed() {
            Err(WaitError::Failed(e))
        } else if self.flags() & flags::CLOSED != 0 {
            Ok(())
        } else {
            Err(WaitError::TimedOut)
        }
    }

    /// How many times `send` and `recv` parked their thread.
    pub fn parks(&self) -> (u64, u64) {
        (
            self.tx_waiter.parks.load(Ordering::Relaxed),
            self.rx_waiter.parks.load(Ordering::Relaxed),
        )
    }

    /// The stack's side, once per round: unpark a waiting application
    /// thread if what it waits for has happened.
    fn wake(&self) {
        // Pairs with the fence in `Waiter::wait` (see there).
        fence(Ordering::SeqCst);
        let tx = self.tx_waiter.want.load(Ordering::Relaxed);
        let rx = self.rx_waiter.want.load(Ordering::Relaxed);
        let close = self.close_waiter.want.load(Ordering::Relaxed);
        if tx | rx | close == 0 {
            return;
        }
        let st = self.state.load(Ordering::Acquire);
        if st & close != 0 {
            self.close_waiter.wake();
        }
        let room = tx & Waiter::RING != 0 && self.tx.len() <= self.tx.capacity() / 2;
        if room || st & tx != 0 {
            self.tx_waiter.wake();
        }
        let data = rx & Waiter::RING != 0 && !self.rx.is_empty();
        if data || st & rx != 0 {
            self.rx_waiter.wake();
        }
    }
}

#[derive(Debug)]
struct StreamSock {
    tcp: Tcp,
    shared: Arc<StreamShared>,
    /// Received octets not yet in the ring.
    rx_backlog: VecDeque<Vec<u8>>,
    rx_backlog_len: usize,
    /// A chunk partly moved into TCP's send buffer.
    tx_partial: Option<(Vec<u8>, usize)>,
    fin_sent: bool,
}

#[derive(Debug)]
enum SockKind {
    Stream(Box<StreamSock>),
    Iwarp(Box<IwarpOverTcp>),
}

#[derive(Debug)]
struct Sock {
    remote: Ipv4Address,
    cq: Option<QpCqs>,
    kind: SockKind,
    /// `Connect` token until established.
    token: Option<u64>,
    reported_closed: bool,
    /// RTO retransmissions already reported as `tracing` events.
    rto_seen: u64,
    /// Its place in the ready set (polled next round: a segment or
    /// command arrived, or the last poll left work for the next; see
    /// `StackConfig::idle_sweep`) and in the deadline set (the earliest
    /// deadline it had when it left the ready set; a later one only wakes
    /// it early).
    slot: Slot,
    /// The listener (port) whose backlog this connection counts against
    /// until the application accepts it (`StackConfig::backlog`).
    backlog_of: Option<u16>,
    /// Octets it held for its peer when last polled ([`crate::budget`]).
    held: usize,
    /// Aborted for the memory budget.
    over_budget: bool,
}

/// Segments one poll of an iWARP connection may send; one that sends this
/// many is polled again next round.
const POLL_SEGMENTS: usize = 64;

/// Put `sock` (id `id`) in the ready set unless it is there already.
#[inline]
fn mark_ready(ready: &mut ReadySet<SockId>, sock: &mut Sock, id: SockId) {
    ready.mark(&mut sock.slot, id);
}

impl Sock {
    fn tcp(&self) -> &Tcp {
        match &self.kind {
            SockKind::Stream(s) => &s.tcp,
            SockKind::Iwarp(i) => &i.tcp,
        }
    }

    /// Octets its peer makes it hold now: out-of-order data, and what
    /// waits for the application (a byte stream's backlog beyond its
    /// ring; iWARP early data and CM events).
    fn held_now(&self) -> usize {
        match &self.kind {
            SockKind::Stream(s) => s.tcp.ooo_held() + s.rx_backlog_len,
            SockKind::Iwarp(i) => i.held_octets(),
        }
    }

    /// Refresh [`held`](Self::held) and the running total; whether it is
    /// now over the per-connection limit (and not aborted for it yet).
    fn account(&mut self, total: &mut usize, budget: &MemBudget) -> bool {
        let h = self.held_now();
        *total = total.saturating_sub(self.held).saturating_add(h);
        self.held = h;
        !self.over_budget && budget.over_conn(h)
    }

    /// End the connection for the memory budget: an iWARP connection
    /// sends an RDMAP Terminate (catastrophic error localized to the
    /// stream) and then RST; a byte stream RST at once, dropping what
    /// waited for its application.
    fn abort_over_budget(&mut self, now: u64) {
        self.over_budget = true;
        match &mut self.kind {
            SockKind::Iwarp(i) => {
                i.abort_with(now, iwarp_proto::wire::TermCode::RDMAP_CATASTROPHIC_STREAM)
            }
            SockKind::Stream(s) => {
                s.tcp.abort();
                s.rx_backlog = VecDeque::new();
                s.rx_backlog_len = 0;
            }
        }
    }
}

#[derive(Debug)]
struct Listening {
    listener: Listener,
    ulp: Ulp,
    /// Payload that arrived with the handshake's last ACK, per (peer, port).
    early: HashMap<(Ipv4Address, u16), Vec<u8>>,
    /// Connections handed out that still count against the backlog
    /// (`Sock::backlog_of`).
    unaccepted: usize,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StackStats {
    /// Segments for no connection or listener (answered with RST).
    pub rx_no_socket: u64,
    /// Data segments dropped because the application was not reading.
    pub rx_backpressure_drops: u64,
    /// Segments the interface refused to send.
    pub tx_errors: u64,
    /// ACKs that would have completed a handshake at a listener whose
    /// backlog was full, dropped (Linux's `ListenOverflows`).
    pub listen_overflows: u64,
    /// TCP counters summed over connections that have ended.
    pub tcp_closed: tcp::Stats,
    /// Octets held now for peers, over every connection (TCP and SCTP)
    /// and listener ([`crate::budget`]; against
    /// `StackConfig::max_held_total`).
    pub held_octets: u64,
    /// The most one connection holds now (against
    /// `StackConfig::max_held_per_conn`).
    pub held_max_conn: u64,
    /// Connections aborted for going over either limit.
    pub budget_aborts: u64,
    /// From the post of each successful send-queue request of an iWARP
    /// connection over TCP to its completion, as the loop saw them (the
    /// times of the rounds that took the post and produced the
    /// completion: one that completes in the round that took it, a short
    /// Write copied into TCP's buffer, counts 0), per kind of request.
    pub completion_latency: CompletionLatency,
    /// From a `Connect` to full operation (the MPA exchange done), per
    /// connection over TCP that got there.
    pub setup_active: Histogram,
    /// From the listener handing over the accepted TCP connection (the
    /// handshake done) to full operation, the application's decision
    /// included.
    pub setup_passive: Histogram,
}

/// The host stack. See the [module docs](self).
#[derive(Debug)]
pub struct Stack {
    cfg: StackConfig,
    iface: Interface,
    isn: IsnGenerator,
    /// Registered memory of every iWARP connection on this stack.
    pub mem: MemoryTable,
    /// Connections by id; ids are never reused, so a stale id finds nothing.
    socks: std::collections::BTreeMap<SockId, Sock>,
    /// iWARP connections already freed ([`Gone`]).
    gone: Gone,
    /// Requests the application has not answered ([`Requests`]).
    /// Out of the stack for the round's output closure and back (an
    /// `Option` of a box: one pointer moved each way, no placeholder record
    /// made and dropped every round).
    requests: Option<Box<Requests>>,
    /// `Connect` tokens of sockets that still exist (for `IwarpOpening`).
    by_token: HashMap<u64, SockId>,
    /// Application code run after every round.
    hooks: Vec<LoopHook>,
    next_id: SockId,
    /// The connections polled this round (scratch).
    ids: Vec<SockId>,
    /// The listening ports visited this round (scratch: no allocation
    /// per round).
    ports: Vec<u16>,
    /// The ready set: connections to poll next round, each once (their
    /// `Sock::slot`; byte streams are always in it), and their deadlines,
    /// one entry per connection, set when a polled connection leaves the
    /// ready set (one in it looks at its deadlines when polled next
    /// round); and when every connection was last swept into it.
    ready: ReadySet<SockId>,
    by_tuple: HashMap<(Ipv4Address, u16, u16), SockId>,
    /// The connection the last received segment went to, by its 4-tuple:
    /// tried before `by_tuple`, whose SipHash of the tuple per segment was
    /// 3.4% of a bulk transfer's instructions (`stack-cost`). Checked
    /// against the socket's own tuple at every use, so it is never
    /// trusted stale (a socket removed, an id reused).
    last_rx: Option<((Ipv4Address, u16, u16), SockId)>,
    listeners: HashMap<u16, Listening>,
    next_port: u16,
    pending_tx: Vec<Vec<u8>>,
    pending_out: VecDeque<Output>,
    resets: Vec<(Ipv4Address, TcpRepr<'static>)>,
    stats: StackStats,
    /// The partial-checksum diagnosis was logged.
    checksum_warned: bool,
    /// iWARP over SCTP on the same interface, made by the first SCTP
    /// command ([`crate::over_sctp::conn`]).
    sctp: Option<Box<SctpConns>>,
    /// The memory budget's limits and aborts ([`crate::budget`]).
    budget: MemBudget,
    /// Octets TCP connections hold, as of their last poll (`Sock::held`).
    tcp_held: usize,
    /// Connections over their own limit this round (scratch).
    over: Vec<SockId>,
}

impl Stack {
    /// A stack with `cfg` and the memory its iWARP connections use.
    pub fn new(mut cfg: StackConfig, mem: MemoryTable) -> Self {
        let mss = cfg.iface.mtu.saturating_sub(40).min(usize::from(u16::MAX)) as u16;
        cfg.tcp.mss = cfg.tcp.mss.min(mss);
        Stack {
            iface: Interface::new(cfg.iface),
            isn: IsnGenerator::new(cfg.isn_secret),
            mem,
            socks: std::collections::BTreeMap::new(),
            gone: Gone::default(),
            requests: Some(Box::default()),
            by_token: HashMap::new(),
            hooks: Vec::new(),
            next_id: 0,
            ids: Vec::new(),
            ports: Vec::new(),
            ready: ReadySet::new(cfg.idle_sweep),
            by_tuple: HashMap::new(),
            last_rx: None,
            listeners: HashMap::new(),
            next_port: cfg.ephemeral_base,
            pending_tx: Vec::new(),
            pending_out: VecDeque::new(),
            resets: Vec::new(),
            stats: StackStats::default(),
            checksum_warned: false,
            sctp: None,
            budget: MemBudget::new(cfg.max_held_per_conn, cfg.max_held_total),
            tcp_held: 0,
            over: Vec::new(),
            cfg,
        }
    }

    /// Counters, with what connections hold now ([`crate::budget`]).
    pub fn stats(&self) -> StackStats {
        let mut s = self.stats;
        let mut max = 0;
        let total = self.held_total(&mut |h| max = max.max(h.held));
        s.held_octets = total as u64;
        s.held_max_conn = max as u64;
        s.budget_aborts = self.budget.aborts;
        s
    }

    /// Octets listeners keep for handshakes not handed out yet.
    fn listeners_held(&self) -> usize {
        let early = self.listeners.values().flat_map(|l| l.early.values());
        early.map(Vec::capacity).sum()
    }

    /// Octets held in the context: TCP connections as of their last poll,
    /// SCTP connections now, listeners' handshake payload. `each` sees
    /// every connection's figure.
    fn held_total(&self, each: &mut dyn FnMut(Holder)) -> usize {
        for (&id, s) in &self.socks {
            each(Holder {
                id,
                held: s.held,
                releasing: s.over_budget,
            });
        }
        let mut total = self.tcp_held + self.listeners_held();
        if let Some(sc) = self.sctp.as_deref() {
            for h in sc.holders() {
                total += h.held;
                each(h);
            }
        }
        total
    }

    /// Enforce the context limit: while the connections not already
    /// being aborted hold more than it, abort the one holding the most
    /// (one per round). Scans every connection only when over the limit.
    /// `sctp_held`: what SCTP connections hold now.
    fn enforce_context_budget(&mut self, now: u64, sctp_held: usize) {
        let quick = self.tcp_held + self.listeners_held() + sctp_held;
        if quick <= self.budget.context {
            return;
        }
        let mut all = Vec::new();
        let total = self.held_total(&mut |h| all.push(h));
        let Some(id) = self.budget.victim(total, all.into_iter()) else {
            return;
        };
        self.abort_over_budget(id, now, "context");
    }

    /// Abort connection `id` for the memory budget (`which` limit).
    fn abort_over_budget(&mut self, id: SockId, now: u64, which: &'static str) {
        let limit = if which == "context" {
            self.budget.context
        } else {
            self.budget.per_conn
        };
        if let Some(sc) = self.sctp.as_deref_mut().filter(|sc| sc.owns(id)) {
            if sc.abort_over_budget(id) {
                self.budget.aborts += 1;
                tracing::warn!(
                    sock = id,
                    limit,
                    which,
                    "SCTP association over the memory budget: ABORT"
                );
            }
            return;
        }
        if let Some(sock) = self.socks.get_mut(&id).filter(|s| !s.over_budget) {
            tracing::warn!(
                sock = id,
                remote = %sock.remote,
                held = sock.held,
                limit,
                which,
                "connection over the memory budget: aborted"
            );
            sock.abort_over_budget(now);
            mark_ready(&mut self.ready, sock, id);
            self.budget.aborts += 1;
        }
    }

    /// The interface (for its counters).
    pub fn iface(&self) -> &Interface {
        &self.iface
    }

    /// Why iWARP connection `sock` ended or is ending, over TCP or SCTP;
    /// also for one already freed (the newest [`GONE_KEPT`] of each).
    /// `None` while it runs, or when nothing recorded why.
    pub fn disconnect_cause(&self, sock: SockId) -> Option<iwarp_proto::qp::DisconnectCause> {
        if let Some(sc) = self.sctp.as_deref().filter(|sc| sc.owns(sock)) {
            return sc.disconnect_cause(sock);
        }
        match self.socks.get(&sock) {
            Some(Sock {
                kind: SockKind::Iwarp(i),
                ..
            }) => i.disconnect_cause(),
            Some(_) => None,
            None => self.gone.get(sock).and_then(|g| g.1),
        }
    }

    /// TCP counters of a connection.
    pub fn tcp_stats(&self, sock: SockId) -> Option<tcp::Stats> {
        self.socks.get(&sock).map(|s| s.tcp().stats())
    }

    /// TCP counters summed over every connection: those still open and
    /// those that have ended ([`StackStats::tcp_closed`]).
    pub fn tcp_totals(&self) -> tcp::Stats {
        let mut sum = self.stats.tcp_closed;
        for s in self.socks.values() {
            add_tcp_stats(&mut sum, &s.tcp().stats());
        }
        sum
    }

    /// Connections the stack holds (opening, open, closing, in TIME-WAIT).
    pub fn connections(&self) -> usize {
        self.socks.len()
    }

    /// Ports with a listener.
    pub fn listening_ports(&self) -> usize {
        self.listeners.len()
    }

    /// What listeners hold for connections not handed out yet: half-open
    /// handshakes, and established connections in their accept queues
    /// plus the payload kept for them (entries), summed over listeners.
    pub fn listener_holds(&self) -> (usize, usize) {
        let l = self.listeners.values();
        let half_open = l.clone().map(|l| l.listener.half_open_len()).sum();
        let ready = l.map(|l| l.listener.ready_len() + l.early.len()).sum();
        (half_open, ready)
    }

    /// Connections listeners handed out that the application has not
    /// accepted yet, summed over listeners (each listener's count is
    /// within its backlog).
    pub fn unaccepted(&self) -> usize {
        self.listeners.values().map(|l| l.unaccepted).sum()
    }

    /// Connection `id` stops counting against its listener's backlog:
    /// accepted (its window opens to `rcv_buf`), failed or gone.
    fn leave_backlog(&mut self, id: SockId, accepted: bool) {
        let Some(sock) = self.socks.get_mut(&id) else {
            return;
        };
        let Some(port) = sock.backlog_of.take() else {
            return;
        };
        if accepted {
            if let SockKind::Iwarp(i) = &mut sock.kind {
                i.tcp.set_rcv_cap(None);
            }
        }
        if let Some(l) = self.listeners.get_mut(&port) {
            l.unaccepted = l.unaccepted.saturating_sub(1);
            l.listener.set_unaccepted(l.unaccepted);
        }
    }

    /// Counters of an iWARP connection's queue pair (`None`: no such
    /// connection, a byte stream, or the MPA exchange has not finished).
    pub fn qp_stats(&self, sock: SockId) -> Option<iwarp_proto::qp::QpStats> {
        if let Some(sc) = self.sctp.as_ref().filter(|sc| sc.owns(sock)) {
            return sc.qp_stats(sock);
        }
        match &self.socks.get(&sock)?.kind {
            SockKind::Iwarp(i) => i.iwarp.as_ref()?.qp_ref().map(|q| q.stats()),
            SockKind::Stream(_) => None,
        }
    }

    /// The SCTP part, once an SCTP command made it.
    pub fn sctp(&self) -> Option<&SctpConns> {
        self.sctp.as_deref()
    }

    /// The SCTP part, made on first use: the interface's MAC and address,
    /// SCTP packets of MTU − 20 octets, the TCP RTO bounds, a secret
    /// derived from the ISN secret (cookies, tags and TSNs).
    fn sctp_part(&mut self) -> Option<&mut SctpConns> {
        if self.sctp.is_none() {
            let i = &self.cfg.iface;
            let mut c = crate::over_sctp::SctpHostConfig::new(
                i.mac.0,
                i.ip.0,
                self.cfg.isn_secret.map(|b| b ^ 0xa5),
            );
            // SCTP packets arrive raw (IPv4 protocol 132) or inside UDP
            // to IANA's encapsulation port (RFC 6951); the UDP header
            // takes 8 octets of every packet's room, raw or not.
            c.udp_port = Some(crate::over_sctp::SCTP_UDP_PORT);
            c.sctp.max_packet = i.mtu.saturating_sub(28).min(65_535);
            // The retransmission timer follows the stack's TCP settings
            // (RFC 9260 §6.3.1 suggests RTO.Min 1 s, as RFC 6298 does for
            // TCP), but never below the peer's delayed SACK: TCP's LAN
            // minimum (5 ms) made Linux SCTP's 200 ms delayed SACK time
            // out every lone message (see RTO_MIN_ABOVE_DELAYED_SACK).
            let floor = sctp_lite::assoc::RTO_MIN_ABOVE_DELAYED_SACK;
            c.sctp.rto_min = self.cfg.tcp.rto_min.max(floor);
            c.sctp.rto_initial = self.cfg.tcp.rto_initial.max(c.sctp.rto_min);
            c.sctp.rto_max = self.cfg.tcp.rto_max.max(c.sctp.rto_min);
            match SctpConns::new(c, self.cfg.ephemeral_base) {
                Ok(mut p) => {
                    p.set_backlog(self.cfg.backlog);
                    p.set_max_held(self.cfg.sctp_max_held);
                    p.set_idle_sweep(self.cfg.idle_sweep);
                    self.sctp = Some(Box::new(p))
                }
                Err(why) => tracing::warn!(why, "cannot start SCTP"),
            }
        }
        self.sctp.as_deref_mut()
    }

    fn isn_for(&self, remote: Ipv4Address, rport: u16, lport: u16, now: u64) -> u32 {
        self.cfg.fixed_isn.unwrap_or_else(|| {
            self.isn
                .isn((self.cfg.iface.ip, lport), (remote, rport), now)
        })
    }

    fn insert(&mut self, mut sock: Sock) -> SockId {
        let key = (
            sock.remote,
            sock.tcp().remote_port(),
            sock.tcp().local_port(),
        );
        let id = self.next_id;
        self.next_id += 1;
        mark_ready(&mut self.ready, &mut sock, id);
        self.socks.insert(id, sock);
        self.by_tuple.insert(key, id);
        id
    }

    fn make_sock(
        &self,
        tcp: Tcp,
        remote: Ipv4Address,
        ulp: &Ulp,
        role: Role,
        now: u64,
    ) -> (Sock, Option<Arc<StreamShared>>) {
        let (kind, shared) = match ulp {
            Ulp::Stream => {
                let shared = Arc::new(StreamShared::new(self.cfg.ring_chunks));
                (
                    SockKind::Stream(Box::new(StreamSock {
                        tcp,
                        shared: shared.clone(),
                        rx_backlog: VecDeque::new(),
                        rx_backlog_len: 0,
                        tx_partial: None,
                        fin_sent: false,
                    })),
                    Some(shared),
                )
            }
            Ulp::Iwarp {
                mpa,
                params,
                manual,
                srq,
                ..
            } => {
                let mut i = IwarpOverTcp::new(tcp, role, mpa.clone(), *params).opened_at(now);
                if let Some(srq) = srq {
                    i = i.with_srq(srq.clone());
                }
                if *manual && role == Role::Responder {
                    i = i.manual_accept();
                }
                if self.cfg.copy_tx {
                    i = i.copy_transmit();
                }
                (SockKind::Iwarp(Box::new(i)), None)
            }
        };
        (
            Sock {
                remote,
                cq: match ulp {
                    Ulp::Iwarp { cq, .. } => cq.clone(),
                    Ulp::Stream => None,
                },
                kind,
                token: None,
                reported_closed: false,
                rto_seen: 0,
                slot: Slot::default(),
                backlog_of: None,
                held: 0,
                over_budget: false,
            },
            shared,
        )
    }

    /// Take the commands that are SCTP's (the SCTP ones, and those naming
    /// an SCTP connection); give the others back.
    fn sctp_command(&mut self, cmd: Command, now: u64) -> Option<Command> {
        let ours = |s: &Self, id: SockId| s.sctp.as_ref().is_some_and(|sc| sc.owns(id));
        match cmd {
            Command::Connect {
                token,
                remote,
                port,
                transport,
                ulp,
            } if transport.is_sctp() => {
                let mut outs = std::mem::take(&mut self.pending_out);
                let udp = (transport == Transport::SctpOverUdp)
                    .then_some(crate::over_sctp::SCTP_UDP_PORT);
                let why = match (SctpUlp::from_ulp(&ulp), self.sctp_part()) {
                    (Ok(ulp), Some(sc)) => {
                        sc.connect(token, remote, port, udp, ulp, now, &mut outs);
                        None
                    }
                    (Err(why), _) => Some(why),
                    (Ok(_), None) => Some("this stack has no SCTP part"),
                };
                if let Some(why) = why {
                    outs.push_back(Output::Failed {
                        token,
                        error: ConnError::Local(why),
                    });
                }
                self.pending_out = outs;
                None
            }
            // One listener per port number over both transports: the
            // answers (`Listening`, `Accepted`) name the port alone.
            Command::Listen {
                port,
                transport,
                ulp,
            } if transport.is_sctp() => {
                let result = if self.listeners.contains_key(&port) {
                    Err(ListenError::PortInUse)
                } else {
                    match (SctpUlp::from_ulp(&ulp), self.sctp_part()) {
                        (Err(why), _) => Err(ListenError::Unsupported(why)),
                        (Ok(_), None) => {
                            Err(ListenError::Unsupported("this stack has no SCTP part"))
                        }
                        (Ok(ulp), Some(sc)) => {
                            if sc.listen(port, ulp) {
                                Ok(())
                            } else {
                                Err(ListenError::PortInUse)
                            }
                        }
                    }
                };
                self.pending_out
                    .push_back(Output::Listening { port, result });
                None
            }
            Command::Unlisten(port) if self.sctp.as_ref().is_some_and(|sc| sc.listening(port)) => {
                let removed = self.sctp.as_deref_mut().is_some_and(|sc| sc.unlisten(port));
                self.pending_out
                    .push_back(Output::Unlistened { port, removed });
                None
            }
            Command::Listen { port, .. }
                if self.sctp.as_ref().is_some_and(|sc| sc.listening(port)) =>
            {
                self.pending_out.push_back(Output::Listening {
                    port,
                    result: Err(ListenError::PortInUse),
                });
                None
            }
            Command::IwarpOpening(token, c) => {
                match self.sctp.as_ref().and_then(|sc| sc.by_token(token)) {
                    Some(id) => self.sctp_command(Command::Iwarp(id, c), now),
                    None => Some(Command::IwarpOpening(token, c)),
                }
            }
            Command::Iwarp(id, c) if ours(self, id) => {
                let Stack {
                    sctp,
                    mem,
                    pending_out,
                    ..
                } = self;
                if let Some(sc) = sctp.as_deref_mut() {
                    sc.post(id, c, mem, &mut |o| pending_out.push_back(o));
                }
                None
            }
            Command::Close(id) if ours(self, id) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    sc.close(id);
                }
                None
            }
            Command::Abort(id) if ours(self, id) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    sc.abort(id, now);
                }
                None
            }
            Command::Accept {
                sock,
                private_data,
                ird,
                ord,
                cq,
                pd,
            } if ours(self, sock) => {
                let Stack {
                    sctp,
                    mem,
                    pending_out,
                    ..
                } = self;
                if let Some(sc) = sctp.as_deref_mut() {
                    if let Err(e) = sc.accept(
                        sock,
                        private_data,
                        ird,
                        ord,
                        crate::over_sctp::conn::AcceptQp { cq, pd },
                        mem,
                    ) {
                        pending_out.push_back(Output::CmRefused(sock, e));
                    }
                }
                None
            }
            Command::Reject { sock, private_data } if ours(self, sock) => {
                if let Some(sc) = self.sctp.as_deref_mut() {
                    if let Err(e) = sc.reject(sock, &private_data) {
                        self.pending_out.push_back(Output::CmRefused(sock, e));
                    }
                }
                None
            }
            other => Some(other),
        }
    }

    fn ephemeral_port(&mut self, remote: Ipv4Address, port: u16) -> u16 {
        let base = self.cfg.ephemeral_base;
        loop {
            let p = self.next_port;
            self.next_port = if p == u16::MAX { base } else { p + 1 };
            if !self.by_tuple.contains_key(&(remote, port, p)) && !self.listeners.contains_key(&p) {
                return p;
            }
        }
    }

    /// The connection of a segment from `key` (remote address, remote
    /// port, local port): the last one's, if it still has that tuple, or
    /// from `by_tuple`.
    fn lookup(&mut self, key: (Ipv4Address, u16, u16)) -> Option<SockId> {
        if let Some((k, id)) = self.last_rx {
            let same = |s: &Sock| (s.remote, s.tcp().remote_port(), s.tcp().local_port()) == key;
            if k == key && self.socks.get(&id).is_some_and(same) {
                return Some(id);
            }
        }
        let id = self.by_tuple.get(&key).copied();
        self.last_rx = id.map(|id| (key, id));
        id
    }

    fn segment(&mut self, src: Ipv4Address, seg: &TcpRepr<'_>, now: u64) {
        let key = (src, seg.src_port, seg.dst_port);
        if let Some(id) = self.lookup(key) {
            let Some(sock) = self.socks.get_mut(&id) else {
                return;
            };
            mark_ready(&mut self.ready, sock, id);
            if sock.over_budget && !seg.payload.is_empty() {
                // Aborted for the memory budget: it holds nothing more
                // while its Terminate waits for an ACK.
                return;
            }
            match &mut sock.kind {
                SockKind::Stream(s) => {
                    if !seg.payload.is_empty() && s.rx_backlog_len >= self.cfg.rx_backlog_limit {
                        self.stats.rx_backpressure_drops += 1;
                        return;
                    }
                    let StreamSock {
                        tcp,
                        shared,
                        rx_backlog,
                        rx_backlog_len,
                        ..
                    } = &mut **s;
                    // Flow control: the window leaves room for the backlog.
                    tcp.set_rcv_held(*rx_backlog_len);
                    tcp.handle_segment(seg, now, &mut |d| {
                        if rx_backlog.is_empty() {
                            if let Err(v) = shared.rx.push(d.to_vec()) {
                                *rx_backlog_len += v.len();
                                rx_backlog.push_back(v);
                            }
                        } else {
                            *rx_backlog_len += d.len();
                            rx_backlog.push_back(d.to_vec());
                        }
                    });
                }
                SockKind::Iwarp(i) => i.handle_segment(seg, now, &mut self.mem),
            }
            return;
        }
        let is_syn = seg.flags.contains(tcp_lite::wire::TcpFlags::SYN)
            && !seg.flags.contains(tcp_lite::wire::TcpFlags::ACK);
        // The ISN hash only for a SYN that may open a connection.
        let isn = if is_syn && self.listeners.contains_key(&seg.dst_port) {
            self.isn_for(src, seg.src_port, seg.dst_port, now)
        } else {
            0
        };
        if let Some(l) = self.listeners.get_mut(&seg.dst_port) {
            let full = l.listener.accept_queue_full();
            if let Some(c) = l.listener.half_open_mut(src, seg.src_port) {
                use tcp_lite::wire::TcpFlags;
                if full
                    && seg.flags.contains(TcpFlags::ACK)
                    && !seg.flags.intersects(TcpFlags::SYN | TcpFlags::RST)
                {
                    // The backlog is full: the handshake stays half-open
                    // (its SYN-ACK retransmitted, the peer's ACK retried),
                    // as Linux leaves it with a full accept queue.
                    self.stats.listen_overflows += 1;
                    return;
                }
                let mut early = Vec::new();
                c.handle_segment(seg, now, &mut |d| early.extend_from_slice(d));
                if !early.is_empty() {
                    l.early
                        .entry((src, seg.src_port))
                        .or_default()
                        .extend_from_slice(&early);
                }
            } else if is_syn {
                // Refusals (backlog or half-open bound) stay silent: the
                // peer retries its SYN. A full half-open table answers with
                // a stateless SYN cookie instead.
                if let Ok(Some(syn_ack)) = l.listener.on_syn_at(src, seg, isn, now) {
                    self.resets.push((src, syn_ack));
                }
            } else if l.listener.on_cookie_ack(src, seg, now, &mut |d| {
                l.early
                    .entry((src, seg.src_port))
                    .or_default()
                    .extend_from_slice(d)
            }) {
                // An ACK for a SYN cookie: established, in the accept queue.
            } else if let Some(rst) = tcp::reset_for(seg) {
                self.stats.rx_no_socket += 1;
                self.resets.push((src, rst));
            }
            self.accept_ready(seg.dst_port, now);
            return;
        }
        self.stats.rx_no_socket += 1;
        if let Some(rst) = tcp::reset_for(seg) {
            self.resets.push((src, rst));
        }
    }

    fn accept_ready(&mut self, port: u16, now: u64) {
        loop {
            let Some(l) = self.listeners.get_mut(&port) else {
                return;
            };
            let Some((remote, tcp)) = l.listener.accept() else {
                return;
            };
            let early = l.early.remove(&(remote, tcp.remote_port()));
            let ulp = l.ulp.clone();
            // An iWARP connection is the application's once it accepts
            // the Request; a byte stream once handed out.
            if matches!(ulp, Ulp::Iwarp { .. }) {
                l.unaccepted += 1;
                l.listener.set_unaccepted(l.unaccepted);
            }
            let (mut sock, stream) = self.make_sock(tcp, remote, &ulp, Role::Responder, now);
            // The listener's rings, this connection's own clone (`Gone`).
            sock.cq = sock.cq.as_ref().map(QpCqs::for_connection);
            if matches!(ulp, Ulp::Iwarp { .. }) {
                sock.backlog_of = Some(port);
            }
            if let Some(early) = early {
                match &mut sock.kind {
                    SockKind::Stream(s) => {
                        if let Err(v) = s.shared.rx.push(early) {
                            s.rx_backlog_len += v.len();
                            s.rx_backlog.push_back(v);
                        }
                    }
                    SockKind::Iwarp(i) => i.receive_early(&early, &mut self.mem),
                }
            }
            let sock_id = self.insert(sock);
            tracing::debug!(sock = sock_id, %remote, port, "TCP connection accepted");
            self.pending_out.push_back(Output::Accepted {
                port,
                sock: sock_id,
                remote,
                stream,
            });
        }
    }

    /// A post on connection `id`, if it is the SCTP part's: posted
    /// there (true). Out of `handle_command`, whose path over TCP alone
    /// stays as it was.
    #[inline(never)]
    fn sctp_post(&mut self, id: SockId, c: HostCommand) -> bool {
        let Stack {
            sctp,
            mem,
            pending_out,
            ..
        } = self;
        sctp.as_deref_mut()
            .is_some_and(|sc| sc.try_post(id, c, mem, &mut |o| pending_out.push_back(o)))
    }

    /// An SCTP packet the interface handed up, to the SCTP part (out of
    /// `handle_frame`, which TCP's segments inline).
    #[inline(never)]
    fn sctp_packet(&mut self, pkt: &SctpIngress<'_>, now: u64) {
        if let Some(sc) = self.sctp.as_deref_mut() {
            sc.handle_packet(&mut self.iface, pkt, now, &mut self.mem);
        }
    }

    fn emit(
        iface: &mut Interface,
        stats: &mut StackStats,
        dst: Ipv4Address,
        seg: &TcpRepr<'_>,
        now: u64,
        tx: &mut dyn FrameSink,
    ) {
        if iface.send_tcp(dst, seg, now, tx).is_err() {
            stats.tx_errors += 1;
        }
    }

    fn poll_stream(s: &mut StreamSock, now: u64) {
        // Drain the backlog into the ring as room appears.
        while let Some(v) = s.rx_backlog.pop_front() {
            let len = v.len();
            if let Err(v) = s.shared.rx.push(v) {
                s.rx_backlog.push_front(v);
                break;
            }
            s.rx_backlog_len -= len;
        }
        s.tcp.set_rcv_held(s.rx_backlog_len);
        if s.shared.abort.load(Ordering::Acquire) && s.tcp.state() != TcpState::Closed {
            s.tcp.abort();
        }
        // Move queued data into TCP's send buffer.
        loop {
            if s.tx_partial.is_none() {
                s.tx_partial = s.shared.tx.pop().map(|v| (v, 0));
            }
            let Some((buf, off)) = s.tx_partial.as_mut() else {
                break;
            };
            let took = s.tcp.send(&buf[*off..]);
            *off += took;
            if *off < buf.len() {
                break;
            }
            s.tx_partial = None;
        }
        // `close` first: the application sets it after its last push
        // (Release), so once it reads true (Acquire) every push is visible
        // and an empty ring means all was taken. Checking the ring first
        // would race: pushes and `close` could both land between the two
        // reads, and the FIN would go out ahead of data the application
        // was told was sent.
        if !s.fin_sent
            && s.shared.close.load(Ordering::Acquire)
            && s.tx_partial.is_none()
            && s.shared.tx.is_empty()
        {
            s.tcp.close();
            s.fin_sent = true;
        }
        s.tcp.handle_timeout(now);
    }

    /// Report state changes of connection `id`; frees it once closed.
    fn settle(&mut self, id: SockId) {
        // Out of MPA setup (accepted, failed or closed): out of the backlog.
        let setup_over = self.socks.get(&id).and_then(|s| match &s.kind {
            SockKind::Iwarp(i) if s.backlog_of.is_some() => {
                use crate::over_tcp::State;
                let st = i.state();
                (!matches!(
                    st,
                    State::Opening | State::AwaitingMpa | State::AwaitingDecision
                ))
                .then_some(st == State::Operational)
            }
            _ => None,
        });
        if let Some(accepted) = setup_over {
            self.leave_backlog(id, accepted);
        }
        let Some(sock) = self.socks.get_mut(&id) else {
            return;
        };
        let state = sock.tcp().state();
        let error = sock.tcp().error().map(ConnError::from);
        let rto = sock.tcp().stats().rto_retransmits;
        if rto > sock.rto_seen {
            tracing::info!(
                sock = id,
                remote = %sock.remote,
                new = rto - sock.rto_seen,
                total = rto,
                "TCP retransmission timeout"
            );
            sock.rto_seen = rto;
        }
        if let Some(token) = sock.token {
            if let Some(e) = error {
                tracing::info!(sock = id, remote = %sock.remote, error = %e, "connect failed");
                self.pending_out
                    .push_back(Output::Failed { token, error: e });
                sock.token = None;
                sock.reported_closed = true;
            } else if !matches!(
                state,
                TcpState::SynSent | TcpState::SynReceived | TcpState::Closed
            ) {
                sock.token = None;
                tracing::info!(sock = id, remote = %sock.remote, "connected (TCP established)");
                let stream = match &sock.kind {
                    SockKind::Stream(s) => Some(s.shared.clone()),
                    SockKind::Iwarp(_) => None,
                };
                self.pending_out.push_back(Output::Connected {
                    token,
                    sock: id,
                    stream,
                });
            }
        }
        if let SockKind::Stream(s) = &sock.kind {
            let rx_done = matches!(
                state,
                TcpState::CloseWait
                    | TcpState::LastAck
                    | TcpState::Closing
                    | TcpState::TimeWait
                    | TcpState::Closed
            );
            if rx_done && s.rx_backlog.is_empty() {
                s.shared.state.fetch_or(flags::RX_EOF, Ordering::AcqRel);
            }
            if let Some(e) = error {
                let _ = s.shared.error.set(e);
                s.shared.state.fetch_or(flags::FAILED, Ordering::AcqRel);
            } else if matches!(state, TcpState::TimeWait | TcpState::Closed) && s.fin_sent {
                s.shared.state.fetch_or(flags::CLOSED, Ordering::AcqRel);
            }
            s.shared.wake();
        }
        let finished = matches!(state, TcpState::TimeWait | TcpState::Closed);
        if finished && !sock.reported_closed {
            sock.reported_closed = true;
            match error {
                Some(e) => tracing::info!(sock = id, error = %e, "connection failed"),
                None => tracing::debug!(sock = id, "connection closed"),
            }
            self.pending_out
                .push_back(Output::Closed { sock: id, error });
        }
        if state == TcpState::Closed {
            let keep = matches!(&sock.kind, SockKind::Stream(s) if !s.rx_backlog.is_empty());
            if !keep {
                let t = sock.tcp().stats();
                add_tcp_stats(&mut self.stats.tcp_closed, &t);
                let key = (
                    sock.remote,
                    sock.tcp().remote_port(),
                    sock.tcp().local_port(),
                );
                self.by_tuple.remove(&key);
                self.by_token.retain(|_, s| *s != id);
                self.tcp_held = self.tcp_held.saturating_sub(sock.held);
                self.ready.forget(&mut sock.slot, id);
                if let SockKind::Iwarp(i) = &sock.kind {
                    self.gone.insert(id, sock.cq.clone(), i.disconnect_cause());
                }
                self.socks.remove(&id);
            }
        }
    }
}

impl crate::runtime::Engine for Stack {
    type Command = Command;
    type Output = Output;

    /// The earliest of the connections' deadlines (the timer set; an
    /// entry a connection's deadline moved past only wakes the loop
    /// early), the interface's (ARP), the idle sweep's and the SCTP
    /// part's (its connections', associations', ARP's and sweeps').
    fn poll_timeout(&self) -> Option<u64> {
        let conns = self.ready.next_deadline();
        let sweep = self.ready.next_sweep();
        let sctp = self.sctp.as_ref().and_then(|s| s.next_deadline());
        [conns, self.iface.poll_timeout(), Some(sweep), sctp]
            .into_iter()
            .flatten()
            .min()
    }

    /// Nothing queued, nothing visited every round: no connection in the
    /// ready set (byte streams always are), no hooks, no half-open or
    /// unaccepted connections at a listener (their timers are not in the
    /// timer set), no SCTP connection or association in its ready set,
    /// no frame or output waiting.
    fn quiescent(&self) -> bool {
        self.ready.is_empty()
            && self.hooks.is_empty()
            && self.pending_tx.is_empty()
            && self.resets.is_empty()
            && self.pending_out.is_empty()
            && self
                .listeners
                .values()
                .all(|l| l.listener.half_open_len() == 0 && l.listener.ready_len() == 0)
            && self.sctp.as_ref().is_none_or(|s| s.quiescent())
    }

    fn handle_frame(&mut self, frame: &[u8], now: u64) {
        // One parse, dispatched by IP protocol: SCTP (IPv4 protocol 132,
        // or UDP to its port) to the SCTP part once one exists, TCP here;
        // ARP and ICMP Echo answered by the interface.
        let served = match self.sctp {
            Some(_) => SctpServed {
                raw: true,
                udp_port: Some(crate::over_sctp::SCTP_UDP_PORT),
            },
            None => SctpServed::NONE,
        };
        let pending = &mut self.pending_tx;
        let ing = match self
            .iface
            .receive_ip(frame, now, served, &mut |f| pending.push(f.to_vec()))
        {
            Some(IpIngress::Tcp(d)) => self.iface.receive_tcp(&d),
            Some(IpIngress::Sctp(pkt)) => {
                self.sctp_packet(&pkt, now);
                return;
            }
            None => None,
        };
        let Some(ing) = ing else {
            if !self.checksum_warned && self.iface.stats().rx_partial_checksum >= 3 {
                if let Some(why) = self.iface.stats().checksum_diagnosis() {
                    tracing::warn!("{why}");
                    self.checksum_warned = true;
                }
            }
            return;
        };
        self.segment(ing.src, &ing.seg, now);
    }

    fn handle_command(&mut self, cmd: Command, now: u64) {
        // An answer to a request releases what was held for it: to the
        // Accept's CQ, before anything the accept itself makes.
        match &cmd {
            Command::Accept { sock, cq, .. } => self.answered(*sock, cq.as_ref()),
            Command::Reject { sock: id, .. } | Command::Close(id) | Command::Abort(id) => {
                self.answered(*id, None)
            }
            _ => {}
        }
        // A command for a connection wakes it for the next round.
        let target = match &cmd {
            // Without an SCTP part a post is marked where it is posted
            // (one lookup of the connection).
            Command::Iwarp(..) if self.sctp.is_none() => None,
            // One of the SCTP part's (posted there below): no TCP socket.
            Command::Iwarp(id, _) if *id >= crate::over_sctp::conn::SCTP_SOCK_BASE => None,
            Command::Iwarp(id, _) | Command::Close(id) | Command::Abort(id) => Some(*id),
            Command::Accept { sock, .. } | Command::Reject { sock, .. } => Some(*sock),
            Command::IwarpOpening(token, _) => self.by_token.get(token).copied(),
            _ => None,
        };
        if let Some(id) = target {
            if let Some(s) = self.socks.get_mut(&id) {
                mark_ready(&mut self.ready, s, id);
            }
        }
        // Without an SCTP part only SCTP's own commands go there (every
        // other arm of `sctp_command` asks the part): no move of the
        // command through it.
        let sctp = self.sctp.is_some()
            || matches!(
                cmd,
                Command::Connect { transport, .. } | Command::Listen { transport, .. }
                    if transport.is_sctp()
            );
        let cmd = if sctp {
            // A post on one of its connections (the data path's commands)
            // straight to the SCTP part, the command not moved into
            // `sctp_command` and back.
            if let Command::Iwarp(id, c) = &cmd {
                if self.sctp_post(*id, *c) {
                    return;
                }
            }
            match self.sctp_command(cmd, now) {
                Some(c) => c,
                None => return,
            }
        } else {
            cmd
        };
        match cmd {
            // Connection setup.
            Command::Connect {
                token,
                remote,
                port,
                ulp,
                ..
            } => self.cmd_connect(token, remote, port, ulp, now),
            Command::Listen { port, ulp, .. } => self.cmd_listen(port, ulp),
            Command::Unlisten(port) => self.cmd_unlisten(port),
            Command::Hook(h) => self.hooks.push(h),
            // Posts.
            Command::IwarpOpening(token, cmd) => self.cmd_iwarp_opening(token, cmd, now),
            Command::Iwarp(id, cmd) => {
                let sock = self.socks.get_mut(&id);
                if let Some(sock) = sock {
                    mark_ready(&mut self.ready, sock, id);
                    if let Sock {
                        kind: SockKind::Iwarp(i),
                        cq,
                        ..
                    } = sock
                    {
                        let out = &mut self.pending_out;
                        i.post(cmd, now, &self.mem, &mut |o| {
                            route(id, o, cq.as_ref(), &mut |x| out.push_back(x))
                        });
                        return;
                    }
                }
                self.refuse_post(id, &cmd);
            }
            // Teardown.
            Command::Close(id) => self.cmd_close(id),
            Command::Abort(id) => self.cmd_abort(id, now),
            // The connection request's answer.
            Command::Accept {
                sock,
                private_data,
                ird,
                ord,
                cq,
                pd,
            } => self.cmd_accept(sock, private_data, ird, ord, cq, pd),
            Command::Reject { sock, private_data } => self.cmd_reject(sock, private_data),
            // Memory, and inspection of the stack.
            Command::ReadMem {
                token,
                stag,
                offset,
                len,
            } => {
                let data = self.mem.copy_out(stag, offset, len);
                self.pending_out.push_back(Output::Memory { token, data });
            }
            Command::Memory(op) => (op.0)(&mut self.mem),
            Command::Inspect(op) => (op.0)(self),
            Command::WriteMem { stag, offset, data } => {
                self.mem.write_at(stag, offset, &data);
            }
        }
    }

    fn poll(&mut self, now: u64, tx: &mut dyn FrameSink, out: &mut dyn FnMut(Output)) -> bool {
        // Every output passes the requests' record ([`Requests`]).
        let mut requests = self.requests.take().unwrap_or_default();
        let busy = self.poll_round(now, tx, &mut |o| requests.pass(o, out));
        let sctp = self.sctp.as_deref();
        requests.prune(&|id| {
            self.socks.contains_key(&id) || sctp.is_some_and(|sc| sc.has_connection(id))
        });
        self.requests = Some(requests);
        busy
    }
}

impl Stack {
    /// The application answered request `id` ([`Requests::answered`]):
    /// first what this round's commands made for it and have not passed
    /// the record yet (a receive posted to the request and refused in the
    /// same round as the Accept) joins what is held, then all of it goes
    /// to `cq`, else to the outputs.
    #[cold]
    fn answered(&mut self, id: SockId, cq: Option<&QpCqs>) {
        let requests = self.requests.get_or_insert_default();
        if requests.map.contains_key(&id) && !self.pending_out.is_empty() {
            let out = &mut self.pending_out;
            for o in std::mem::take(out) {
                requests.pass(o, &mut |x| out.push_back(x));
            }
        }
        let out = &mut self.pending_out;
        requests.answered(id, cq, &mut |x| out.push_back(x));
    }

    /// One round of [`Engine::poll`](crate::runtime::Engine::poll).
    fn poll_round(
        &mut self,
        now: u64,
        tx: &mut dyn FrameSink,
        out: &mut dyn FnMut(Output),
    ) -> bool {
        let mut busy = false;
        // (Empty most rounds: a drain of nothing still costs its set-up.)
        if !self.pending_tx.is_empty() {
            for f in self.pending_tx.drain(..) {
                tx.send_parts(&[&f]);
                busy = true;
            }
        }
        self.iface.poll(now, &mut |f| {
            tx.send_parts(&[f]);
        });
        let Stack {
            iface,
            stats,
            resets,
            listeners,
            socks,
            mem,
            ready,
            budget,
            tcp_held,
            over,
            ..
        } = self;
        // Connections whose deadline has passed join the ready set.
        while let Some((at, id)) = ready.pop_due(now) {
            if let Some(sock) = socks.get_mut(&id) {
                ready.fire(&mut sock.slot, id, at);
            }
        }
        // The safety net (`StackConfig::idle_sweep`).
        if ready.sweep_due(now) {
            for (&id, sock) in socks.iter_mut() {
                mark_ready(ready, sock, id);
                if let SockKind::Iwarp(i) = &mut sock.kind {
                    i.trim();
                }
            }
        }
        if !resets.is_empty() {
            for (dst, rst) in resets.drain(..) {
                Self::emit(iface, stats, dst, &rst, now, tx);
                busy = true;
            }
        }
        // Listeners: half-open connections' timers and segments, then
        // those with an established connection to hand over (after the
        // connections' polls, which leave listeners alone), in one pass.
        let mut ports = std::mem::take(&mut self.ports);
        ports.clear();
        for (&port, l) in listeners.iter_mut() {
            if l.listener.half_open_len() > 0 {
                for (remote, c) in l.listener.half_open_iter_mut() {
                    c.handle_timeout(now);
                    let dst = *remote;
                    busy |= c.poll_transmit(now, 16, &mut |seg| {
                        Self::emit(iface, stats, dst, seg, now, tx)
                    }) > 0;
                }
                l.listener.settle();
            }
            if l.listener.ready_len() > 0 {
                ports.push(port);
            }
        }
        let mut ids = std::mem::take(&mut self.ids);
        ids.clear();
        // This round polls the ready set (in id order), which fills again
        // for the next round as it goes.
        ready.drain_into(&mut ids);
        // (Empty most rounds: a retain of nothing still costs its set-up.)
        let poll_one = |&id: &SockId| {
            let Some(sock) = socks.get_mut(&id) else {
                return false; // gone since it became ready
            };
            sock.slot.visited();
            let dst = sock.remote;
            match &mut sock.kind {
                SockKind::Stream(s) => {
                    Self::poll_stream(s, now);
                    busy |= s.tcp.poll_transmit(now, 64, &mut |seg| {
                        Self::emit(iface, stats, dst, seg, now, tx)
                    }) > 0;
                    // Its application side is a ring: look every round.
                    mark_ready(ready, sock, id);
                    if sock.account(tcp_held, budget) {
                        over.push(id);
                    }
                }
                SockKind::Iwarp(i) => {
                    // A segment with a payload fill is built in place in
                    // the device's buffer, its payload written there once.
                    let sent = i.poll(now, mem, POLL_SEGMENTS, &mut |seg, fill| match fill {
                        Some(fill) => {
                            if iface.send_tcp_filled(dst, seg, fill, now, tx).is_err() {
                                stats.tx_errors += 1;
                            }
                        }
                        None => Self::emit(iface, stats, dst, seg, now, tx),
                    });
                    busy |= sent > 0;
                    // What it did not send now waits for an ACK (a
                    // segment), a deadline or a post, each of which wakes
                    // it; only a poll cut short by the segment limit has
                    // more to send at once.
                    if sent >= POLL_SEGMENTS {
                        mark_ready(ready, sock, id);
                    }
                    // Its deadline goes in the timer set after its drain
                    // below, unless it is polled next round anyway.
                    if sock.account(tcp_held, budget) {
                        over.push(id);
                    }
                }
            }
            true
        };
        if !ids.is_empty() {
            ids.retain(poll_one);
        }
        // Listeners with an established connection to hand over (settled
        // above, each round).
        for &p in &ports {
            self.accept_ready(p, now);
        }
        self.ports = ports;
        // Opening/Accepted (and command answers) before any event of the
        // connections they announce: an application learns of a
        // connection before its first CM event.
        while let Some(o) = self.pending_out.pop_front() {
            out(o);
            busy = true;
        }
        // The connections polled this round (in id order): their events,
        // completions and state changes.
        for &id in &ids {
            if let Some(sock) = self.socks.get_mut(&id) {
                if let SockKind::Iwarp(i) = &mut sock.kind {
                    let cq = &sock.cq;
                    let mut did = false;
                    while let Some(e) = i.poll_cm_event() {
                        if let (CmEvent::Established(_), Some(ns)) = (&e, i.setup_time()) {
                            match i.role() {
                                Role::Initiator => self.stats.setup_active.record(ns),
                                Role::Responder => self.stats.setup_passive.record(ns),
                            }
                        }
                        out(Output::Cm(id, e));
                        did = true;
                    }
                    // Posts held until full operation go to the queue
                    // pair in this drain: their FPDUs next round.
                    let again = did || i.holds_posts();
                    let lat = &mut self.stats.completion_latency;
                    did |= i.drain(now, &self.mem, lat, &mut |o| route(id, o, cq.as_ref(), out));
                    // A CM event or posts moved: look again next round
                    // (completions and events of the queue pair need no
                    // poll of their own).
                    if again {
                        self.ready.mark(&mut sock.slot, id);
                    }
                    busy |= did;
                    // A connection polled next round (in the ready set)
                    // looks at its deadlines then: only one that waits
                    // needs its deadline in the timer set (most rounds of
                    // a busy connection touch it not at all).
                    if !sock.slot.is_ready() {
                        if let Some(t) = i.poll_timeout() {
                            self.ready.defer(&mut sock.slot, id, t);
                        }
                    }
                }
            }
            self.settle(id);
        }
        self.ids = ids;
        while let Some(o) = self.pending_out.pop_front() {
            out(o);
            busy = true;
        }
        let mut sctp_held = 0;
        if let Some(sc) = self.sctp.as_deref_mut() {
            busy |= sc.poll(now, &mut self.mem, &mut self.iface, tx, out);
            // What they hold changes only in a round that visited an
            // association or drove a connection (`SctpConns::was_active`).
            if sc.was_active() {
                for h in sc.holders() {
                    sctp_held += h.held;
                    if !h.releasing && self.budget.over_conn(h.held) {
                        self.over.push(h.id);
                    }
                }
                sc.set_held_total(sctp_held);
            } else {
                sctp_held = sc.held_total();
            }
        }
        // The memory budget: connections over their own limit, then the
        // context's (`crate::budget`).
        if !self.over.is_empty() {
            let mut over = std::mem::take(&mut self.over);
            for id in over.drain(..) {
                self.abort_over_budget(id, now, "connection");
                busy = true;
            }
            self.over = over;
        }
        let before = self.budget.aborts;
        self.enforce_context_budget(now, sctp_held);
        busy |= self.budget.aborts != before;
        // Run-to-completion application code, after this round's
        // completions reached their CQs; what it posts is handled at the
        // start of the next round.
        if !self.hooks.is_empty() {
            self.hooks.retain_mut(|h| match (h.0)() {
                HookStatus::Busy => {
                    busy = true;
                    true
                }
                HookStatus::Idle => true,
                HookStatus::Done => false,
            });
        }
        busy
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::Engine;
    use std::time::{Duration, Instant};

    /// A connection's socket id and its 4-tuple as `lookup` keys it.
    type Conn = (SockId, (Ipv4Address, u16, u16));

    /// A stack with two connections opened to 10.9.0.2:7000.
    fn two_connections() -> (Stack, [Conn; 2]) {
        let iface = iwarp_net::iface::IfaceConfig::new(
            tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, 1]),
            Ipv4Address::new(10, 9, 0, 1),
            24,
        );
        let mut st = Stack::new(StackConfig::new(iface), MemoryTable::new());
        for token in [1, 2] {
            let cmd = Command::Connect {
                transport: Transport::Tcp,
                token,
                remote: Ipv4Address::new(10, 9, 0, 2),
                port: 7000,
                ulp: Ulp::Stream,
            };
            st.handle_command(cmd, 0);
        }
        let mut conns: Vec<_> = st.by_tuple.iter().map(|(k, id)| (*id, *k)).collect();
        conns.sort_unstable();
        assert_eq!(conns.len(), 2);
        (st, [conns[0], conns[1]])
    }

    /// Freed connections are kept for their posts: the newest
    /// `GONE_KEPT`, and beyond them each whose CQs a handle still holds
    /// (the API's `Qp`), however many connections were freed after it;
    /// once the handle is dropped it goes like the others.
    #[test]
    fn a_freed_connection_whose_cqs_a_handle_holds_is_kept() {
        let ring = Arc::new(CqRing::new(4));
        let handle = QpCqs::one(ring.clone());
        let mut g = Gone::default();
        g.insert(0, Some(handle.clone()), Some(DisconnectCause::LocalClose));
        // A listener's rings: each connection its own clone, nobody
        // holding it; and connections without rings.
        let listener = QpCqs::one(ring);
        for id in 1..=3 * GONE_KEPT {
            let cq = (id % 2 == 0).then(|| listener.for_connection());
            g.insert(id, cq, None);
        }
        assert!(g.len() <= 2 * GONE_KEPT + 1, "{}", g.len());
        let kept = g.get(0).expect("held by a handle: kept");
        assert_eq!(kept.1, Some(DisconnectCause::LocalClose));
        assert!(kept.0.is_some());
        // The oldest without a handle went, the newest stayed.
        assert!(g.get(1).is_none() && g.get(2).is_none());
        assert!((2 * GONE_KEPT + 1..=3 * GONE_KEPT).all(|id| g.get(id).is_some()));
        drop(handle);
        for id in 3 * GONE_KEPT + 1..=8 * GONE_KEPT {
            g.insert(id, None, None);
        }
        assert!(g.get(0).is_none(), "the handle is gone: so is the entry");
        assert!(g.len() <= 2 * GONE_KEPT, "{}", g.len());
    }

    /// The record of requests nobody answered stays bounded whatever a
    /// peer's requests do: those freed with nothing held are pruned; one
    /// holding refusals of the application's posts is kept until it is
    /// answered, and then releases them.
    #[test]
    fn unanswered_requests_are_pruned_but_what_they_hold_is_kept() {
        use iwarp_proto::qp::{PostError, QpState};
        let req = || {
            CmEvent::ConnectRequest(iwarp_control::PeerRequest {
                rev: 2,
                crc: true,
                markers: false,
                ird: None,
                ord: None,
                peer_to_peer: false,
                rtr: iwarp_control::RtrOffer::default(),
                private_data: Vec::new(),
            })
        };
        let refused = HostOutput::RefusedRecv(7, PostError::NotReady(QpState::Error));
        let mut r = Requests::default();
        let mut passed = 0;
        r.pass(Output::Cm(0, req()), &mut |_| passed += 1);
        r.pass(Output::Iwarp(0, refused), &mut |_| passed += 1);
        assert_eq!((passed, r.len()), (1, 1), "the refusal is held");
        for id in 1..=8 * GONE_KEPT {
            r.pass(Output::Cm(id, req()), &mut |_| {});
            r.prune(&|_| false);
        }
        assert!(r.len() <= 2 * GONE_KEPT + 1, "{}", r.len());
        let mut got = Vec::new();
        r.answered(0, None, &mut |o| got.push(o));
        assert!(
            matches!(got[..], [Output::Iwarp(0, HostOutput::RefusedRecv(7, _))]),
            "{got:?}"
        );
    }

    /// A post to a connection the stack knows nothing of (never was, or
    /// freed and forgotten) is refused to the outputs, not dropped: over
    /// TCP's ids and SCTP's.
    #[test]
    fn a_post_to_an_unknown_connection_is_refused_not_dropped() {
        use crate::over_sctp::conn::SCTP_SOCK_BASE;
        use iwarp_proto::qp::{PostError, QpState};
        let (mut st, _) = two_connections();
        st.pending_out.clear();
        for id in [999, SCTP_SOCK_BASE + 999] {
            let sgl = iwarp_proto::qp::SgList::default();
            st.handle_command(Command::Iwarp(id, HostCommand::PostRecv(7, sgl)), 0);
            let got: Vec<_> = st.pending_out.drain(..).collect();
            assert!(
                matches!(
                    got.as_slice(),
                    [Output::Iwarp(
                        i,
                        HostOutput::RefusedRecv(7, PostError::NotReady(QpState::Error))
                    )] if *i == id
                ),
                "{id}: {got:?}"
            );
        }
    }

    /// The last segment's connection is found again without the map, and
    /// never once its socket is gone or the tuple belongs to another.
    #[test]
    fn the_last_connection_is_found_again_and_never_stale() {
        let (mut st, [(a, ka), (b, kb)]) = two_connections();
        assert_eq!(st.lookup(ka), Some(a));
        assert_eq!(st.last_rx, Some((ka, a)));
        assert_eq!(st.lookup(ka), Some(a));
        // Another tuple: the map answers, and it becomes the last.
        assert_eq!(st.lookup(kb), Some(b));
        assert_eq!(st.last_rx, Some((kb, b)));
        // A tuple of no connection.
        let none = (Ipv4Address::new(10, 9, 0, 3), 1, 2);
        assert_eq!(st.lookup(none), None);
        assert_eq!(st.last_rx, None);
        // The socket of the last tuple removed behind the cache's back
        // (as `settle` removes a closed one): not found any more.
        assert_eq!(st.lookup(ka), Some(a));
        st.socks.remove(&a);
        st.by_tuple.remove(&ka);
        assert_eq!(st.lookup(ka), None);
        // The remembered id now holds another connection (an id reused):
        // the tuple check refuses it.
        st.last_rx = Some((ka, b));
        assert_eq!(
            st.lookup(ka),
            None,
            "id {b} is not the connection of {ka:?}"
        );
        assert_eq!(st.lookup(kb), Some(b));
    }

    /// With a send ring and a receive ring, `route` puts receive
    /// completions (flushed ones included) on the receive ring, send-queue
    /// completions and refused posts on the send ring, and events on
    /// neither; with one ring (`QpCqs::one`) everything lands on it.
    #[test]
    fn receive_completions_go_to_the_receive_ring() {
        use iwarp_proto::qp::{Completion, PostError, QpEvent, WcOpcode, WcStatus};
        let wc = |wr_id, opcode, status| {
            HostOutput::Completion(Completion {
                wr_id,
                opcode,
                status,
                byte_len: 0,
                solicited: false,
                invalidated: None,
                imm: None,
            })
        };
        let outputs = || {
            [
                wc(1, WcOpcode::Send, WcStatus::Success),
                wc(2, WcOpcode::Recv, WcStatus::Success),
                wc(3, WcOpcode::Write, WcStatus::Success),
                wc(4, WcOpcode::Read, WcStatus::Flushed),
                wc(5, WcOpcode::Recv, WcStatus::Flushed),
                HostOutput::Refused(6, PostError::QueueFull),
                HostOutput::Event(QpEvent::SrqLimitReached),
            ]
        };
        let ids = |r: &CqRing| {
            std::iter::from_fn(|| r.ring.pop())
                .map(|(qp, e)| {
                    assert_eq!(qp, 9);
                    match e {
                        CqEntry::Done(c) => c.wr_id,
                        CqEntry::Refused { wr_id, .. } => wr_id,
                    }
                })
                .collect::<Vec<_>>()
        };
        let (send, recv) = (Arc::new(CqRing::new(16)), Arc::new(CqRing::new(16)));
        let cqs = QpCqs::new(send.clone(), recv.clone());
        let mut out = Vec::new();
        for o in outputs() {
            route(9, o, Some(&cqs), &mut |x| out.push(x));
        }
        assert_eq!(ids(&send), [1, 3, 4, 6]);
        assert_eq!(ids(&recv), [2, 5]);
        assert!(matches!(
            out[..],
            [Output::Iwarp(
                9,
                HostOutput::Event(QpEvent::SrqLimitReached)
            )]
        ));
        let one = QpCqs::from(send.clone());
        for o in outputs() {
            route(9, o, Some(&one), &mut |_| {});
        }
        assert_eq!(ids(&send), [1, 2, 3, 4, 5, 6]);
        assert!(recv.ring.is_empty());
    }

    /// On the virtual-time link (20 µs each way), each 64 KiB Write's
    /// latency counts once, from the round that took its post to the one
    /// that completed it after the ACK: at least a round trip (40 µs). The
    /// setup times count once per side; the active side's spans the TCP
    /// handshake and the MPA exchange, two round trips at least.
    #[test]
    fn completion_latency_and_setup_time_count_each_once() {
        use crate::link::virtual_link::{LinkConfig, Side, VirtualLink};
        use iwarp_proto::mem::Access;
        use iwarp_proto::qp::{Sge, WcStatus, WorkRequest};
        const LEN: usize = 64 << 10;
        let end = |last: u8| {
            let iface = iwarp_net::iface::IfaceConfig::new(
                tcp_lite::wire::EthernetAddress([0x02, 0, 0, 0, 0, last]),
                Ipv4Address::new(10, 5, 0, last),
                24,
            );
            let mut mem = MemoryTable::new();
            let pd = mem.alloc_pd();
            let access = Access::LOCAL_READ | Access::REMOTE_WRITE;
            let stag = mem.register(pd, vec![last; LEN], access, 0).unwrap();
            let ulp = Ulp::Iwarp {
                mpa: MpaConfig::default(),
                params: crate::StreamParams {
                    pd,
                    emss: 1460,
                    sq_depth: 16,
                    rq_depth: 16,
                },
                manual: false,
                cq: None,
                srq: None,
            };
            (Stack::new(StackConfig::new(iface), mem), stag, ulp)
        };
        let ((sa, stag_a, ulp_a), (sb, stag_b, ulp_b)) = (end(1), end(2));
        let cfg = LinkConfig::default();
        assert_eq!(cfg.latency_ns, 20_000);
        let mut link = VirtualLink::new(sa, sb, cfg);
        link.command(
            Side::A,
            Command::Listen {
                transport: Transport::Tcp,
                port: 7000,
                ulp: ulp_a,
            },
        );
        let remote = Ipv4Address::new(10, 5, 0, 1);
        link.command(
            Side::B,
            Command::Connect {
                transport: Transport::Tcp,
                token: 1,
                remote,
                port: 7000,
                ulp: ulp_b,
            },
        );
        let mut sock = None;
        assert!(link.run_until(1_000_000, |l| {
            l.outputs(Side::A).clear();
            while let Some(o) = l.outputs(Side::B).pop_front() {
                if let Output::Cm(id, CmEvent::Established(_)) = o {
                    sock = Some(id);
                }
            }
            sock.is_some()
        }));
        let sock = sock.unwrap();
        const N: u64 = 8;
        let mut done = 0;
        for wr_id in 0..N {
            let wr = WorkRequest::Write {
                wr_id,
                signaled: true,
                local: Sge {
                    stag: stag_b,
                    to: 0,
                    len: LEN as u32,
                }
                .into(),
                remote_stag: stag_a,
                remote_to: 0,
            };
            link.command(Side::B, Command::Iwarp(sock, HostCommand::PostSend(wr)));
            assert!(link.run_until(1_000_000, |l| {
                l.outputs(Side::A).clear();
                let mut ok = false;
                while let Some(o) = l.outputs(Side::B).pop_front() {
                    if let Output::Iwarp(_, HostOutput::Completion(c)) = o {
                        assert_eq!((c.wr_id, c.status), (wr_id, WcStatus::Success));
                        ok = true;
                    }
                }
                ok
            }));
            done += 1;
        }
        // The round after the last completion: the passive side's
        // Established was reported long ago.
        link.step();
        let b = link.engine(Side::B).stats();
        let w = &b.completion_latency.write;
        assert_eq!(w.count(), done);
        assert_eq!(
            b.completion_latency.send.count() + b.completion_latency.read.count(),
            0
        );
        for (bound, n) in w.buckets() {
            if bound.is_some_and(|b| b < 40_000) {
                assert_eq!(n, 0, "a Write completed within {bound:?} ns");
            }
        }
        assert!(w.sum_ns() >= N * 40_000, "{}", w.sum_ns());
        assert_eq!((b.setup_active.count(), b.setup_passive.count()), (1, 0));
        assert!(
            b.setup_active.sum_ns() >= 80_000,
            "{}",
            b.setup_active.sum_ns()
        );
        let a = link.engine(Side::A).stats();
        assert_eq!((a.setup_active.count(), a.setup_passive.count()), (0, 1));
        assert_eq!(
            a.completion_latency,
            Default::default(),
            "the target posted nothing"
        );
    }

    /// A completion pushed while a thread is parked on the ring unparks it:
    /// parked for up to 20 s, the waiter is back within 10 s of the push
    /// (in practice microseconds).
    #[test]
    fn a_push_unparks_the_waiting_thread() {
        let ring = Arc::new(CqRing::new(4));
        let pusher = {
            let ring = ring.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(200));
                ring.push(
                    7,
                    CqEntry::Refused {
                        wr_id: 1,
                        error: iwarp_proto::qp::PostError::QueueFull,
                    },
                );
                Instant::now()
            })
        };
        while ring.ring.is_empty() {
            ring.park(Duration::from_secs(20));
        }
        let back = Instant::now();
        let pushed = pusher.join().expect("pusher");
        assert!(
            back.saturating_duration_since(pushed) < Duration::from_secs(10),
            "the waiter slept out its park"
        );
        assert!(matches!(
            ring.ring.pop(),
            Some((7, CqEntry::Refused { wr_id: 1, .. }))
        ));
    }
}
