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

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;

use iwarp_net::iface::{FrameSink, Interface, IpIngress, SctpIngress, SctpServed};
use iwarp_proto::mem::MemoryTable;
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

mod commands;
mod config;
mod cq;
mod held;
mod messages;
mod requests;
mod sctp;
mod stats;
mod stream;

pub use config::{StackConfig, UNACCEPTED_WINDOW};
pub(crate) use cq::{route, Gone, GONE_KEPT};
pub use cq::{CqEntry, CqRing, QpCqs};
pub use messages::{
    Command, HookStatus, InspectOp, ListenError, LoopHook, MemoryOp, Output, Transport, Ulp,
};
use requests::Requests;
use stats::add_tcp_stats;
pub use stats::StackStats;
pub use stream::{flags, SendError, StreamShared, WaitError};

/// Identifies a connection inside one [`Stack`].
pub type SockId = usize;

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
                    State::Opening | State::AwaitingSetup | State::AwaitingDecision
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
        if requests.holds(id) && !self.pending_out.is_empty() {
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
mod tests;
