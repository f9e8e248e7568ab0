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
//!
//! One ready set ([`crate::ready`]) holds the connections of both
//! transports and the SCTP associations: one ready list, one deadline
//! set, one idle sweep and one idle check. A round fires what is due and
//! sweeps once, then each owner takes its marks at its turn: the TCP
//! connections, then (lent the set) the SCTP part's associations and
//! connections.
//!
//! # Layout
//!
//! This file holds the [`Stack`] itself, [`Stack::new`] and the
//! [`Engine`](crate::runtime::Engine) glue; the rest is in `stack/`:
//!
//! - `messages.rs`: the [`Command`]s the stack takes and the [`Output`]s
//!   it hands back;
//! - `config.rs`: its settings ([`StackConfig`]);
//! - `commands.rs`: each command taken apart by concern (what every
//!   command does first, connection setup, posts, teardown);
//! - `sock.rs`: the TCP socket types (a connection, byte stream or iWARP;
//!   a listener);
//! - `tcp_conns.rs`: TCP connections made (ISN, ephemeral port), found by
//!   their 4-tuple for each segment, and handed over by listeners (passive
//!   open, backlog);
//! - `round.rs`: one round of the poll loop, and the reports of each
//!   connection's state changes;
//! - `stream.rs`: byte streams' rings shared with the application
//!   ([`StreamShared`]);
//! - `cq.rs`: the completion rings ([`CqRing`], [`QpCqs`]) and how
//!   outputs reach them;
//! - `requests.rs`: connection requests the application has not answered
//!   yet, and what their posts produced meanwhile;
//! - `held.rs`: what connections and listeners hold for peers, and the
//!   context's memory limit;
//! - `sctp.rs`: the SCTP part, and what reaches it;
//! - `stats.rs`: counters ([`StackStats`]) and per-connection reports;
//! - `tests.rs`: unit tests.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use iwarp_net::iface::{FrameSink, Interface, IpIngress, SctpIngress, SctpServed};
use iwarp_proto::mem::MemoryTable;
use tcp_lite::iface::TcpInterface;
use tcp_lite::listen::{CookieAck, IsnGenerator, Listener};
use tcp_lite::tcp::{self, Connection as Tcp, State as TcpState};

use crate::ConnError;
use tcp_lite::wire::{Ipv4Address, TcpRepr};

use crate::budget::{Holder, MemBudget};
use crate::latency::{CompletionLatency, Histogram};
use crate::over_sctp::conn::{SctpConns, SctpUlp};
use crate::over_tcp::{CmEvent, HostCommand, HostOutput, IwarpOverTcp, Role};
use crate::ready::{Ready, ReadySet};

mod commands;
mod config;
mod cq;
mod held;
mod messages;
mod requests;
mod round;
mod sctp;
mod sock;
mod stats;
mod stream;
mod tcp_conns;

pub use config::{StackConfig, Steering, UNACCEPTED_WINDOW};
pub(crate) use cq::{route, Gone, GONE_KEPT};
pub use cq::{CqEntry, CqRing, QpCqs};
pub use messages::{
    Command, HookStatus, InspectOp, ListenError, LoopHook, MemoryOp, Output, Transport, Ulp,
};
use requests::Requests;
use sock::{mark_ready, Sock, SockKind, StreamSock, TcpListening};
pub(crate) use sock::{ConnHead, Connection, Connections, ListenOn, Listening};
pub use stats::add_tcp_stats;
pub use stats::StackStats;
pub use stream::{flags, SendError, StreamShared, WaitError};

/// The stack's listening ports over both transports, one per port number
/// (the SCTP part is lent it for its rounds).
pub(crate) type Listeners = HashMap<u16, Listening>;

/// Identifies a connection inside one [`Stack`], over either transport.
pub type SockId = usize;

/// The connection ids a stack gives out, over both transports from one
/// counter: `first`, then `step` apart (`StackConfig::sock_ids`), never
/// reused, so a stale id finds nothing. Shared between the stack's TCP
/// connections and its SCTP part (an atomic: a connection made costs one
/// uncontended add).
#[derive(Debug)]
pub struct SockIds {
    next: AtomicUsize,
    step: SockId,
}

impl SockIds {
    /// Ids `first`, `first + step`, ... (`step` 0 counts as 1).
    pub fn new(first: SockId, step: SockId) -> Self {
        SockIds {
            next: AtomicUsize::new(first),
            step: step.max(1),
        }
    }

    /// The next id.
    pub fn take(&self) -> SockId {
        self.next.fetch_add(self.step, Ordering::Relaxed)
    }
}

/// The host stack. See the [module docs](self).
#[derive(Debug)]
pub struct Stack {
    cfg: StackConfig,
    iface: Interface,
    isn: IsnGenerator,
    /// Registered memory of every iWARP connection on this stack.
    pub mem: MemoryTable,
    /// Connections by id over both transports ([`Connections`]); ids are
    /// never reused, so a stale id finds nothing. The SCTP part is lent it.
    conns: Connections,
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
    /// A frame or a command came in since the last round ran
    /// ([`Engine::poll`](crate::runtime::Engine::poll)'s idle check).
    input: bool,
    /// Connection ids, TCP's and SCTP's ([`SockIds`]).
    ids_given: Arc<SockIds>,
    /// The TCP connections polled this round (scratch).
    ids: Vec<Ready>,
    /// The listening ports visited this round (scratch: no allocation
    /// per round).
    ports: Vec<u16>,
    /// A TCP listener may hold half-open handshakes (their timers) or
    /// connections to hand over: set when a segment reaches one, cleared
    /// by a round's pass over the listeners that finds none. Without it
    /// every round, and every idle check, walked the map of listening
    /// ports (over SCTP too, whose handshakes are the SCTP part's).
    listeners_pending: bool,
    /// The one ready set (`crate::ready`) of every TCP connection
    /// (`Ready::tcp`), SCTP connection (`Ready::sctp`) and SCTP
    /// association (`Ready::assoc`): those to visit next round, each once
    /// (their slots; byte streams are always in it), and their deadlines,
    /// at most two entries each, set when a visited one leaves the ready
    /// list (one in it looks at its deadlines when visited next round);
    /// and when every one was last swept into it. The SCTP part is lent
    /// it at each call.
    ready: ReadySet<Ready>,
    by_tuple: HashMap<(Ipv4Address, u16, u16), SockId>,
    /// The connection the last received segment went to, by its 4-tuple:
    /// tried before `by_tuple`, whose SipHash of the tuple per segment was
    /// 3.4% of a bulk transfer's instructions (`stack-cost`). Checked
    /// against the socket's own tuple at every use, so it is never
    /// trusted stale (a socket removed, an id reused).
    last_rx: Option<((Ipv4Address, u16, u16), SockId)>,
    listeners: Listeners,
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
    /// Numbers accepted connections (`StackConfig::accept_order`, or
    /// this stack's own).
    accept_order: Arc<AtomicU64>,
}

impl Stack {
    /// A stack with `cfg` and the memory its iWARP connections use.
    pub fn new(mut cfg: StackConfig, mem: MemoryTable) -> Self {
        let mss = cfg.iface.mtu.saturating_sub(40).min(usize::from(u16::MAX)) as u16;
        cfg.tcp.mss = cfg.tcp.mss.min(mss);
        let mut iface = Interface::new(cfg.iface);
        if let Some(n) = &cfg.neighbours {
            iface.share_neighbours(n.clone());
        }
        Stack {
            iface,
            isn: IsnGenerator::new(cfg.isn_secret),
            mem,
            conns: Connections::new(),
            gone: Gone::default(),
            requests: Some(Box::default()),
            by_token: HashMap::new(),
            hooks: Vec::new(),
            input: false,
            ids_given: Arc::new(SockIds::new(cfg.sock_ids.0, cfg.sock_ids.1)),
            ids: Vec::new(),
            ports: Vec::new(),
            listeners_pending: false,
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
            accept_order: cfg.accept_order.clone().unwrap_or_default(),
            cfg,
        }
    }
}

impl Stack {
    /// Nothing queued and nothing visited every round, beside the ready
    /// set: no hooks, no frame, output, reset or over-budget connection
    /// waiting, no half-open or unaccepted connection at a listener (their
    /// timers are not in the timer set).
    fn quiet(&self) -> bool {
        self.hooks.is_empty() && self.quiet_but_hooks()
    }

    /// [`quiet`](Self::quiet) but for the hooks, which an idle round runs
    /// too.
    fn quiet_but_hooks(&self) -> bool {
        self.pending_tx.is_empty()
            && self.resets.is_empty()
            && self.pending_out.is_empty()
            && self.over.is_empty()
            && !self.listeners_pending
    }

    /// A round at `now` would do nothing but ARP's look: [`quiet`](Self::quiet),
    /// no connection or association ready, no deadline or sweep due (one
    /// check of the one ready set), nothing waiting in the SCTP part.
    /// (The caller knows no frame or command came in since the last
    /// round: those are what mark connections.)
    #[inline]
    fn idle_at(&self, now: u64) -> bool {
        self.ready.is_empty()
            && !self.ready.due(now)
            && self.sctp.as_ref().is_none_or(|s| s.quiescent())
            && self.quiet_but_hooks()
    }

    /// Run-to-completion application code, after a round: each hook once;
    /// one that is done is dropped. True if one was busy.
    fn run_hooks(&mut self) -> bool {
        let mut busy = false;
        self.hooks.retain_mut(|h| match (h.0)() {
            HookStatus::Busy => {
                busy = true;
                true
            }
            HookStatus::Idle => true,
            HookStatus::Done => false,
        });
        busy
    }
}

impl crate::runtime::Engine for Stack {
    type Command = Command;
    type Output = Output;

    /// The earliest of the deadline set's entries (TCP and SCTP
    /// connections' and associations'; an entry a deadline moved past
    /// only wakes the loop early), the interface's (ARP) and the idle
    /// sweep's.
    fn poll_timeout(&self) -> Option<u64> {
        let conns = self.ready.next_deadline();
        let sweep = self.ready.next_sweep();
        [conns, self.iface.poll_timeout(), Some(sweep)]
            .into_iter()
            .flatten()
            .min()
    }

    /// Nothing queued, nothing visited every round: no connection or
    /// association in the ready set (byte streams always are), no hooks,
    /// no half-open or unaccepted connections at a listener (their timers
    /// are not in the timer set), no frame or output waiting (the SCTP
    /// part's among them).
    fn quiescent(&self) -> bool {
        self.ready.is_empty() && self.sctp.as_ref().is_none_or(|s| s.quiescent()) && self.quiet()
    }

    fn handle_frame(&mut self, frame: &[u8], now: u64) {
        // A frame brings the next round back, unless it was a segment that
        // left nothing to do (below).
        let input_before = std::mem::replace(&mut self.input, true);
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
                // As a TCP segment (below): what the packet left to do,
                // if anything, is its association's, in the ready set.
                if self.sctp_packet(&pkt, now) {
                    self.input = input_before;
                }
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
        if self.segment(ing.src, &ing.seg, now) {
            self.input = input_before;
        }
    }

    fn handle_command(&mut self, cmd: Command, now: u64) {
        self.input = true;
        // A post (the data path's command) reaches its connection through
        // one lookup of the one table, whichever transport carries it.
        if let Command::Iwarp(id, c) = cmd {
            return self.cmd_post(id, c, now);
        }
        self.command_arrived(&cmd);
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
            Command::Iwarp(id, cmd) => self.cmd_post(id, cmd, now), // (taken above)
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
            Command::SetSrq { sock, srq } => self.cmd_set_srq(sock, srq),
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
        // A round with nothing to do (no frame or command since the last,
        // nothing ready, nothing due) is left out after ARP's look, its
        // own early return: a ping-pong's loop runs most rounds idle
        // while the message is on the link.
        if !std::mem::take(&mut self.input) && self.idle_at(now) {
            self.iface.poll(now, &mut |f| {
                tx.send_parts(&[f]);
            });
            self.stats.idle_rounds += 1;
            // A run-to-completion hook still looks every round (a
            // ping-pong's watches its memory): what it posts brings the
            // next round back.
            return !self.hooks.is_empty() && self.run_hooks();
        }
        // Every output passes the requests' record ([`Requests`]).
        let mut requests = self.requests.take().unwrap_or_default();
        let busy = self.poll_round(now, tx, &mut |o| requests.pass(o, out));
        requests.prune(&|id| self.conns.contains_key(&id));
        self.requests = Some(requests);
        busy
    }
}

#[cfg(test)]
mod tests;
