//! What the host and a [`Stack`] say to each other: the [`Command`]s it
//! takes, the [`Output`]s it hands back, and what they carry (what runs
//! over a connection, [`Ulp`]; what carries it, [`Transport`]; work run on
//! the loop thread, [`MemoryOp`], [`InspectOp`], [`LoopHook`]).

use std::sync::Arc;

use iwarp_control::{MpaConfig, SetupError};
use iwarp_proto::mem::{MemoryTable, STag};
use tcp_lite::wire::Ipv4Address;

use super::{QpCqs, SockId, Stack, StreamShared};
use crate::over_tcp::{CmEvent, HostCommand, HostOutput};
use crate::{ConnError, StreamParams};

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
    /// Make a pending connect request's queue pair take its receive
    /// buffers from `srq` (verbs creates the QP, with its SRQ, after the
    /// request arrived); posted before its [`Command::Accept`]. No effect
    /// once the queue pair exists.
    SetSrq {
        /// The connection.
        sock: SockId,
        /// The shared receive queue.
        srq: iwarp_proto::qp::Srq,
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
        /// Its number in the order the stack's listeners accepted
        /// connections, over TCP and SCTP, taken from
        /// `StackConfig::accept_order` (shared by the loops of a
        /// context) as the stack emits this output: a later accept has a
        /// larger number.
        order: u64,
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
