//! How to connect, listen and accept ([`ConnectOptions`],
//! [`ListenOptions`], [`AcceptOptions`]), what carries DDP
//! ([`Transport`]), and the MPA profiles ([`default_mpa`], [`siw_mpa`],
//! [`chelsio_mpa`]).

use std::time::Duration;

use iwarp_datapath::stack::QpCqs;
use iwarp_datapath::StreamParams;

#[cfg(doc)]
use crate::{ConnectRequest, Context};
use crate::{Cq, MpaConfig, Pd, RtrOffer, SgList, Srq};

fn params(pd: &Pd, sq_depth: usize, rq_depth: usize) -> StreamParams {
    StreamParams {
        pd: pd.id,
        emss: 1460,
        sq_depth,
        rq_depth,
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// MPA settings: revision, CRC, markers, IRD/ORD, peer-to-peer and RTR
    /// types, private data. Default: what Linux siw does (Rev 2 enhanced,
    /// no markers, no peer-to-peer) but with CRC on.
    pub mpa: MpaConfig,
    /// Protection domain of the queue pair.
    pub pd: Pd,
    /// Where completions go: those of the send queue and refused posts,
    /// and receive completions too unless `recv_cq` is set.
    pub cq: Cq,
    /// Where receive completions go (flushed receives included), as verbs'
    /// `ibv_qp_init_attr.recv_cq`; `None` (the default): to `cq`.
    pub recv_cq: Option<Cq>,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
    /// Take receive buffers from this shared receive queue.
    pub srq: Option<Srq>,
    /// How long to wait for TCP and the MPA exchange.
    pub timeout: Duration,
    /// Receives (id, buffer) posted before the connection exists, as verbs
    /// posts to a QP before `rdma_connect`: a peer may Send right behind
    /// its MPA Reply, before [`Context::connect`] returns.
    pub recvs: Vec<(u64, SgList)>,
    /// The lower layer: MPA over TCP (default) or SCTP (RFC 5043).
    pub transport: Transport,
    /// On a context of several poll loops ([`Context::loops`]), the loop
    /// that opens and owns the connection; `None` (the default): the loops
    /// in turn. The local port is picked so that the peer's answers land
    /// on that loop's receive queue either way. A loop the context does
    /// not have is refused ([`Error::InvalidArgument`]). A refused attempt
    /// made again on the loop of the first ([`Connecting::loop_index`])
    /// keeps the queue pairs where they were.
    ///
    /// [`Context::loops`]: crate::Context::loops
    /// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
    /// [`Connecting::loop_index`]: crate::Connecting::loop_index
    pub loop_index: Option<usize>,
}

/// What carries DDP.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Transport {
    /// MPA over TCP (RFC 5044, RFC 6581): `mpa` settings apply.
    #[default]
    Mpa,
    /// SCTP (RFC 5043): one association per connection, one DDP Stream
    /// Session on stream 0 whose Initiate/Accept carry the RFC 6581
    /// IRD/ORD word then the private data (`iwarp_control::sctp`). Of
    /// the `mpa` settings only `private_data` (at most 508 octets), `ird`,
    /// `ord` and the setup timers (`reply_timeout`, `request_timeout`,
    /// `decision_timeout`) apply; CRC, markers and RTR do not (SCTP's CRC32c covers
    /// every packet). A connection's SCTP port and TCP port are separate
    /// spaces, but one context listens on a port number over one
    /// transport at a time. A listener over SCTP accepts associations
    /// that arrive raw and inside UDP alike.
    Sctp,
    /// [`Sctp`](Self::Sctp) inside UDP (RFC 6951), for paths where raw
    /// SCTP (IPv4 protocol 132) cannot pass: connections go to the peer's
    /// UDP port 9899 (IANA's `sctp-tunneling`), and our SCTP part takes
    /// UDP to our port 9899. Listening, it is the same as `Sctp`.
    SctpOverUdp,
}

impl Transport {
    /// The stack's name for it (`Mpa` is iWARP over TCP).
    pub(crate) fn lower(self) -> iwarp_datapath::stack::Transport {
        use iwarp_datapath::stack::Transport as T;
        match self {
            Transport::Mpa => T::Tcp,
            Transport::Sctp => T::Sctp,
            Transport::SctpOverUdp => T::SctpOverUdp,
        }
    }
}

/// Our defaults: Rev 2 enhanced, no markers, no peer-to-peer, CRC on (what
/// Linux siw asks for), and no hold on the first FPDU: nothing taxes the
/// first message of a connection. Against Linux siw as responder use
/// [`siw_mpa`].
pub fn default_mpa() -> MpaConfig {
    MpaConfig {
        crc: true,
        ..MpaConfig::default()
    }
}

/// The Linux siw profile: [`default_mpa`] plus, as initiator, a 50 ms hold
/// on the first FPDU after the MPA Reply. siw 6.1 as responder can leave an
/// FPDU that arrives right after its Reply unread (its race right after the
/// MPA Reply, see [`MpaConfig::first_fpdu_delay`]); the hold costs the
/// first message of each connection 50 ms, so it is off elsewhere.
pub fn siw_mpa() -> MpaConfig {
    MpaConfig {
        first_fpdu_delay: 50_000_000,
        ..default_mpa()
    }
}

/// The Chelsio profile: CRC on, peer-to-peer with a Read RTR.
pub fn chelsio_mpa() -> MpaConfig {
    MpaConfig {
        crc: true,
        peer_to_peer: true,
        rtr: RtrOffer {
            zero_length_fpdu: false,
            write: false,
            read: true,
        },
        ..MpaConfig::default()
    }
}

impl ConnectOptions {
    /// Defaults: [`default_mpa`], queues of 256, 15 s.
    pub fn new(pd: &Pd, cq: &Cq) -> Self {
        ConnectOptions {
            mpa: default_mpa(),
            pd: pd.clone(),
            cq: cq.clone(),
            recv_cq: None,
            sq_depth: 256,
            rq_depth: 256,
            srq: None,
            timeout: Duration::from_secs(15),
            recvs: Vec::new(),
            transport: Transport::Mpa,
            loop_index: None,
        }
    }

    pub(crate) fn params(&self) -> StreamParams {
        params(&self.pd, self.sq_depth, self.rq_depth)
    }

    pub(crate) fn cqs(&self) -> QpCqs {
        qp_cqs(&self.cq, self.recv_cq.as_ref())
    }
}

/// The rings of a queue pair's send CQ and receive CQ (`cq` for both
/// without a receive CQ).
pub(crate) fn qp_cqs(cq: &Cq, recv_cq: Option<&Cq>) -> QpCqs {
    QpCqs::new(cq.ring.clone(), recv_cq.unwrap_or(cq).ring.clone())
}

/// How to listen.
#[derive(Debug, Clone)]
pub struct ListenOptions {
    /// MPA settings for accepted connections (private data, IRD/ORD are
    /// given at accept time).
    pub mpa: MpaConfig,
    /// Protection domain of accepted queue pairs.
    pub pd: Pd,
    /// Send queue depth.
    pub sq_depth: usize,
    /// Receive queue depth.
    pub rq_depth: usize,
    /// Accepted queue pairs take receive buffers from this shared queue.
    pub srq: Option<Srq>,
    /// The lower layer to listen on: MPA over TCP (default) or SCTP.
    pub transport: Transport,
}

impl ListenOptions {
    /// Defaults: [`default_mpa`], queues of 256.
    pub fn new(pd: &Pd) -> Self {
        ListenOptions {
            mpa: default_mpa(),
            pd: pd.clone(),
            sq_depth: 256,
            rq_depth: 256,
            srq: None,
            transport: Transport::Mpa,
        }
    }

    pub(crate) fn params(&self) -> StreamParams {
        params(&self.pd, self.sq_depth, self.rq_depth)
    }
}

/// What to answer a connection request with.
#[derive(Debug, Clone)]
pub struct AcceptOptions {
    /// Our private data (at most 508 octets with Rev 2 enhanced setup).
    pub private_data: Vec<u8>,
    /// Our inbound RDMA Read limit (capped by the peer's ORD).
    pub ird: u16,
    /// Our outbound RDMA Read limit (capped by the peer's IRD).
    pub ord: u16,
    /// How long to wait for full operation.
    pub timeout: Duration,
    /// Where the queue pair's receive completions go (flushed receives
    /// included), as verbs' `ibv_qp_init_attr.recv_cq`; `None` (the
    /// default): to the CQ given to [`ConnectRequest::accept`], which
    /// always takes the send queue's completions and refused posts.
    pub recv_cq: Option<Cq>,
    /// The queue pair's protection domain; `None` (the default): the
    /// listener's ([`ListenOptions::pd`]). Verbs programs create the QP in
    /// a PD of their choosing after the request arrives.
    pub pd: Option<Pd>,
    /// A shared receive queue the queue pair takes its receive buffers
    /// from; `None` (the default): the listener's
    /// ([`ListenOptions::srq`]). Verbs programs create the QP with an SRQ
    /// after the request arrives.
    pub srq: Option<Srq>,
}

impl Default for AcceptOptions {
    fn default() -> Self {
        AcceptOptions {
            private_data: Vec::new(),
            ird: 16,
            ord: 16,
            timeout: Duration::from_secs(15),
            recv_cq: None,
            pd: None,
            srq: None,
        }
    }
}
