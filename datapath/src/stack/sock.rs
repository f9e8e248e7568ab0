//! The stack's connections and listening ports, over either transport:
//! its one table of connections ([`Connections`]: a TCP connection,
//! [`Sock`], a byte stream or an iWARP stream on TCP; or an iWARP
//! connection over SCTP, the SCTP part's `SctpConn`) and its one map of
//! listening ports ([`Listening`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use tcp_lite::listen::Listener;
use tcp_lite::tcp::Connection as Tcp;
use tcp_lite::wire::Ipv4Address;

use super::{QpCqs, SockId, StreamShared, Ulp};
use crate::budget::MemBudget;
use crate::over_sctp::conn::{SctpConn, SctpUlp};
use crate::over_tcp::IwarpOverTcp;
use crate::ready::{Ready, ReadySet, Slot};

#[derive(Debug)]
pub(super) struct StreamSock {
    pub(super) tcp: Tcp,
    pub(super) shared: Arc<StreamShared>,
    /// Received octets not yet in the ring.
    pub(super) rx_backlog: VecDeque<Vec<u8>>,
    pub(super) rx_backlog_len: usize,
    /// A chunk partly moved into TCP's send buffer.
    pub(super) tx_partial: Option<(Vec<u8>, usize)>,
    pub(super) fin_sent: bool,
}

#[derive(Debug)]
pub(super) enum SockKind {
    Stream(Box<StreamSock>),
    Iwarp(Box<IwarpOverTcp>),
}

/// The stack's one table of connections over both transports, by id
/// (ids are never reused, so a stale id finds nothing): the SCTP part is
/// lent it at each call that reaches its connections, as it is lent the
/// map of listening ports.
pub(crate) type Connections = BTreeMap<SockId, Connection>;

/// One connection of the stack: over TCP (its socket here) or over SCTP
/// (the SCTP part's record of it; its association lives in the SCTP
/// part's association host).
#[derive(Debug)]
pub(crate) enum Connection {
    Tcp(Sock),
    Sctp(Box<SctpConn>),
}

impl Connection {
    /// Its TCP socket, if it runs over TCP.
    #[inline]
    pub(crate) fn tcp(&self) -> Option<&Sock> {
        match self {
            Connection::Tcp(s) => Some(s),
            Connection::Sctp(_) => None,
        }
    }

    /// (See [`tcp`](Self::tcp).)
    #[inline]
    pub(crate) fn tcp_mut(&mut self) -> Option<&mut Sock> {
        match self {
            Connection::Tcp(s) => Some(s),
            Connection::Sctp(_) => None,
        }
    }

    /// What every connection has, whichever transport carries it.
    #[inline]
    pub(crate) fn head(&self) -> &ConnHead {
        match self {
            Connection::Tcp(s) => &s.head,
            Connection::Sctp(c) => c.head(),
        }
    }

    /// (See [`head`](Self::head).)
    #[inline]
    pub(crate) fn head_mut(&mut self) -> &mut ConnHead {
        match self {
            Connection::Tcp(s) => &mut s.head,
            Connection::Sctp(c) => c.head_mut(),
        }
    }

    /// Its place in the ready and deadline sets.
    #[inline]
    pub(crate) fn slot_mut(&mut self) -> &mut Slot {
        &mut self.head_mut().slot
    }

    /// The SCTP part's record of it, if it runs over SCTP.
    #[inline]
    pub(crate) fn sctp(&self) -> Option<&SctpConn> {
        match self {
            Connection::Sctp(c) => Some(c),
            Connection::Tcp(_) => None,
        }
    }

    /// (See [`sctp`](Self::sctp).)
    #[inline]
    pub(crate) fn sctp_mut(&mut self) -> Option<&mut SctpConn> {
        match self {
            Connection::Sctp(c) => Some(c),
            Connection::Tcp(_) => None,
        }
    }
}

/// What the stack keeps of every connection, whichever transport
/// carries it (the head of both records: [`Sock`] over TCP, `SctpConn`
/// over SCTP): the peer, the `Connect` token, its place in the ready and
/// deadline sets, the listener whose backlog it counts against, and the
/// two flags of its end.
#[derive(Debug)]
pub(crate) struct ConnHead {
    /// The peer's address.
    pub(crate) remote: Ipv4Address,
    /// The `Connect` token until the connection is up or failed.
    pub(crate) token: Option<u64>,
    /// Its place in the ready set (polled next round: a packet or
    /// command arrived, or the last poll left work for the next; see
    /// `StackConfig::idle_sweep`) and in the deadline set (the earliest
    /// deadline it had when it left the ready set, and at most one later
    /// entry, which only wakes it early: `crate::ready`).
    pub(crate) slot: Slot,
    /// The listener (port) whose backlog this connection counts against
    /// until the application accepts it (`StackConfig::backlog`).
    pub(crate) backlog_of: Option<u16>,
    /// Its end was reported (`CmEvent::Disconnected`, or a byte
    /// stream's close).
    pub(crate) reported_closed: bool,
    /// Aborted for the memory budget ([`crate::budget`]).
    pub(crate) over_budget: bool,
}

impl ConnHead {
    /// The head of a new connection with `remote`.
    pub(crate) fn new(remote: Ipv4Address) -> Self {
        ConnHead {
            remote,
            token: None,
            slot: Slot::default(),
            backlog_of: None,
            reported_closed: false,
            over_budget: false,
        }
    }
}

/// A TCP connection: a byte stream or an iWARP stream.
#[derive(Debug)]
pub(crate) struct Sock {
    /// What every connection has ([`ConnHead`]).
    pub(super) head: ConnHead,
    pub(super) cq: Option<QpCqs>,
    pub(super) kind: SockKind,
    /// RTO retransmissions already reported as `tracing` events.
    pub(super) rto_seen: u64,
    /// Octets it held for its peer when last polled ([`crate::budget`]).
    pub(super) held: usize,
}

/// Put `sock` (id `id`) in the ready set unless it is there already.
#[inline]
pub(super) fn mark_ready(ready: &mut ReadySet<Ready>, sock: &mut Sock, id: SockId) {
    ready.mark(&mut sock.head.slot, Ready::tcp(id));
}

impl Sock {
    pub(super) fn tcp(&self) -> &Tcp {
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
    pub(super) fn account(&mut self, total: &mut usize, budget: &MemBudget) -> bool {
        let h = self.held_now();
        *total = total.saturating_sub(self.held).saturating_add(h);
        self.held = h;
        !self.head.over_budget && budget.over_conn(h)
    }

    /// End the connection for the memory budget: an iWARP connection
    /// sends an RDMAP Terminate (catastrophic error localized to the
    /// stream) and then RST; a byte stream RST at once, dropping what
    /// waited for its application.
    pub(super) fn abort_over_budget(&mut self, now: u64) {
        self.head.over_budget = true;
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

/// A listening port, over either transport: the stack's one map of them
/// (`Stack::listeners`) holds one per port number, so the answers
/// (`Output::Listening`, `Accepted`) name the port alone and a port
/// listens over one transport at a time.
#[derive(Debug)]
pub(crate) struct Listening {
    /// Connections handed out that still count against the backlog
    /// (`StackConfig::backlog`) until the application accepts them:
    /// `Sock::backlog_of` over TCP, the connection's own over SCTP.
    pub(crate) unaccepted: usize,
    pub(crate) on: ListenOn,
}

/// What a listening port runs over.
#[derive(Debug)]
pub(crate) enum ListenOn {
    /// TCP: the handshakes live here, in the stack's [`Listener`].
    Tcp(Box<TcpListening>),
    /// SCTP: the handshakes live in the SCTP part's association host
    /// (`SctpHost::listen`); the connections it hands over run `SctpUlp`.
    Sctp(SctpUlp),
}

#[derive(Debug)]
pub(crate) struct TcpListening {
    pub(super) listener: Listener,
    pub(super) ulp: Ulp,
    /// Payload that arrived with the handshake's last ACK, per (peer, port).
    pub(super) early: HashMap<(Ipv4Address, u16), Vec<u8>>,
}

impl Listening {
    /// Its TCP listener, if it listens over TCP.
    pub(super) fn tcp(&self) -> Option<&TcpListening> {
        match &self.on {
            ListenOn::Tcp(t) => Some(t),
            ListenOn::Sctp(_) => None,
        }
    }
}
