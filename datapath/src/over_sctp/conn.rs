//! iWARP connections over SCTP inside a [`Stack`](crate::stack::Stack)'s
//! poll loop: the SCTP part of the stack, beside its TCP connections.
//!
//! One connection is one SCTP association carrying one DDP Stream
//! Session on DDP stream 0 (RFC 5043 §6), with one queue pair
//! ([`SctpQp`]) on it. The stack's interface parses each frame once and
//! hands this part the SCTP packets (IPv4 protocol 132, or UDP to the
//! encapsulation port: [`Interface::receive_ip`]); it answers ARP for both
//! parts, and SCTP sends through it (one ARP cache, one hold queue). Connections take their ids
//! from the stack's one counter ([`SockIds`]), so the stack's commands (`Iwarp`, `Close`,
//! `Abort`, `Accept`, `Reject`) reach them by id like TCP connections,
//! and completions go to the same CQ rings.
//!
//! Setup is the DDP Stream Session exchange ([`iwarp_control::sctp`]):
//!
//! * active side: the association comes up (`Output::Connected`), we send
//!   Session Initiate with our IRD/ORD and private data; the peer's
//!   Accept makes the queue pair (with the negotiated ORD) and reports
//!   `CmEvent::Established`; its Reject reports `CmEvent::SetupFailed`
//!   with its private data. Segments the peer sent behind its Accept can
//!   arrive before it (every chunk is unordered, RFC 5043 §10): they are
//!   held, up to [`MAX_EARLY`] octets, and given to the queue pair first.
//! * passive side: an association on a listening port waits for the
//!   peer's Initiate on stream 0 (one on another stream is rejected);
//!   then `Output::Accepted` and `CmEvent::ConnectRequest` go to the
//!   application, which accepts (Session Accept, the queue pair starts)
//!   or rejects (Session Reject with its private data).
//!
//! Setup timers ([`SetupTimeouts`], MPA's values by default): no Accept
//! in time fails the active side; no Initiate in time aborts the
//! association (SCTP ABORT: a SHUTDOWN to a silent peer would keep its
//! slot for minutes); no decision in time rejects the request.
//!
//! Teardown: a graceful close waits until the queue pair has sent
//! everything and has no RDMA Read outstanding, then shuts the
//! association down (SCTP delivers what it holds first, RFC 9260 §9.2);
//! a peer that leaves our Reads unanswered and sends no segment for
//! [`SetupTimeouts::close`] turns the close into an abort, as over MPA;
//! an abort queues an RDMAP Terminate (local catastrophic error) and
//! shuts down once it is out, or sends SCTP ABORT after 100 ms. Any close
//! the peer stops taking part in (nothing acknowledged, no FPDU) for
//! [`SetupTimeouts::close`] ends with SCTP ABORT, so a silent peer does
//! not hold the association for SCTP's failure detection (minutes). A queue
//! pair in error ends its session with a DDP Stream Session Terminate
//! (RFC 5043 §6.2, in [`SctpQp`]), then the association is shut down. The
//! association's end flushes the queue pair and reports
//! `CmEvent::Disconnected`.
//!
//! A connection is driven only when something happened to it, as the
//! stack's TCP connections are polled, and from the same ready set
//! ([`crate::ready`]: the stack's one, lent to each call here that marks
//! or visits, its key `Ready::sctp`): its association was visited (a
//! packet for it arrived, one of its timers ran, it had events), a
//! command or post reached it, one of its own deadlines came (setup,
//! close, linger, abort), or the idle sweep came round. The associations
//! likewise, in the same set (`Ready::assoc`). So an idle connection
//! costs a round nothing.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ddp_sctp::{DdpEvent, SessionEnd};
use iwarp_control::setup::{Answer, Exchange, Incoming, Progress};
use iwarp_control::{Negotiated, SetupError, SetupFailure};
use iwarp_net::iface::{Interface, SctpIngress};
use iwarp_proto::mem::MemoryTable;
use iwarp_proto::qp::{DisconnectCause, PostError, QpConfig, QpState, Srq};
use iwarp_proto::wire::TermCode;
use sctp_lite::assoc::{CloseReason, State as AssocState};
use tcp_lite::wire::Ipv4Address;

use super::qp::{AssocRefSink, AssocSink, SctpQp};
use super::{AssocId, SctpHost, SctpHostConfig, SctpOutput};
use crate::early::{EarlyData, EarlyWork};
use crate::endpoint::{Lifecycle, LowerLayer, QpFacts, Role, State};
use crate::latency::{CompletionLatency, Histogram};
use crate::over_tcp::{CmEvent, HostCommand, HostOutput};
use crate::ready::{Ready, ReadySet};
use crate::runtime::FrameSink;
use crate::stack::{
    route, ConnHead, Connection, Connections, ListenOn, Listeners, Listening, Output, QpCqs,
    SockId, SockIds,
};
use crate::timers::{earliest, Timer};
use crate::ConnError;
use crate::StreamParams;

/// Octets of segments an initiator holds that arrived before the Accept.
pub const MAX_EARLY: usize = 1 << 20;

/// [`SctpConns::set_max_held`]'s default: octets a queue pair holds out of
/// DDP-SSN order, as much as a TCP connection's out-of-order buffer (its
/// 1 MiB receive window) and ddp-sctp's own hold (`max_held`), instead
/// of the DDP-SSN window × MULPDU (about 5.9 MB) a peer could otherwise
/// make each connection hold.
pub const MAX_HELD: usize = 1 << 20;

/// The DDP stream the API's connections use.
const STREAM: u16 = 0;

/// Counters of the SCTP part of a stack.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SctpCounters {
    /// Connections held (any phase).
    pub connections: usize,
    /// The engine's (frames, out-of-the-blue answers, ARP drops; the
    /// retransmissions and discards of associations that have closed).
    pub host: super::SctpHostStats,
    /// The live associations' counters, summed.
    pub assoc: sctp_lite::assoc::Stats,
    /// Octets the queue pairs hold now out of DDP-SSN order, summed.
    pub qp_held_octets: usize,
    /// The most any one queue pair holds now.
    pub qp_held_max: usize,
    /// DDP Segments the live queue pairs gave SCTP by reference
    /// (written into each packet from registered memory), summed.
    pub segments_by_reference: u64,
    /// DDP Segments that overtook their Session Accept and were held
    /// until it came (active side), since the part started.
    pub early_segments: u64,
}

impl SctpCounters {
    /// Add `other`'s counters to these (a context of several loops sums
    /// its loops' SCTP parts): every count summed, `qp_held_max` the
    /// larger.
    pub fn add(&mut self, other: &SctpCounters) {
        self.connections += other.connections;
        // Destructured: a counter added later must be summed here too.
        let super::SctpHostStats {
            rx_packets,
            tx_packets,
            rx_dropped,
            udp_bad_checksum,
            rx_udp,
            tx_udp,
            ootb_replies,
            ootb_limited,
            arp_drops,
            closed_retransmits,
            closed_discarded,
        } = other.host;
        let h = &mut self.host;
        h.rx_packets += rx_packets;
        h.tx_packets += tx_packets;
        h.rx_dropped += rx_dropped;
        h.udp_bad_checksum += udp_bad_checksum;
        h.rx_udp += rx_udp;
        h.tx_udp += tx_udp;
        h.ootb_replies += ootb_replies;
        h.ootb_limited += ootb_limited;
        h.arp_drops += arp_drops;
        h.closed_retransmits += closed_retransmits;
        h.closed_discarded += closed_discarded;
        add_assoc_stats(&mut self.assoc, &other.assoc);
        self.qp_held_octets += other.qp_held_octets;
        self.qp_held_max = self.qp_held_max.max(other.qp_held_max);
        self.segments_by_reference += other.segments_by_reference;
        self.early_segments += other.early_segments;
    }
}

/// Add an association's counters to a sum (destructured: a counter
/// added later must be summed here too).
fn add_assoc_stats(sum: &mut sctp_lite::assoc::Stats, t: &sctp_lite::assoc::Stats) {
    let sctp_lite::assoc::Stats {
        data_chunks_sent,
        retransmits,
        fast_retransmits,
        t3_expiries,
        dup_data_received,
        packets_discarded,
        out_of_order_data,
        heartbeats_sent,
        heartbeat_acks,
        pruned_chunks,
        tag_verified_packets,
        data_in_place,
    } = *t;
    sum.data_chunks_sent += data_chunks_sent;
    sum.retransmits += retransmits;
    sum.fast_retransmits += fast_retransmits;
    sum.t3_expiries += t3_expiries;
    sum.dup_data_received += dup_data_received;
    sum.packets_discarded += packets_discarded;
    sum.out_of_order_data += out_of_order_data;
    sum.heartbeats_sent += heartbeats_sent;
    sum.heartbeat_acks += heartbeat_acks;
    sum.pruned_chunks += pruned_chunks;
    sum.tag_verified_packets += tag_verified_packets;
    sum.data_in_place += data_in_place;
}

/// What an SCTP connection or listener runs with.
#[derive(Debug, Clone)]
pub struct SctpUlp {
    /// Our inbound RDMA Read limit (offered in the Initiate; the
    /// responder gives its own at accept time).
    pub ird: u16,
    /// Our outbound RDMA Read limit.
    pub ord: u16,
    /// Initiate private data (at most 508 octets).
    pub private_data: Vec<u8>,
    /// Queue pair parameters (the EMSS is not used: MULPDU comes from
    /// the association, RFC 5043 §9).
    pub params: StreamParams,
    /// Where completions go (`None`: as `Output::Iwarp` outputs): receive
    /// completions to the receive ring, the rest to the send ring.
    pub cq: Option<QpCqs>,
    /// Shared receive queue.
    pub srq: Option<Srq>,
    /// Setup timers (ns; 0: none), as over MPA: how long the active side
    /// waits for the Accept once the Initiate is out (`reply_timeout`),
    /// the passive side for the Initiate once the association is up
    /// (`request_timeout`), and our application for its decision
    /// (`decision_timeout`; the request is then rejected on the wire).
    pub timeouts: SetupTimeouts,
    /// Listeners: hand each Initiate to the application
    /// ([`CmEvent::ConnectRequest`]) instead of accepting it at once with
    /// `private_data`, `ird` and `ord` (as `Ulp::Iwarp`'s `manual`).
    pub manual: bool,
}

impl SctpUlp {
    /// The settings of an iWARP ULP over SCTP: of the MPA settings only
    /// the private data, IRD/ORD and the setup and close timers apply
    /// (CRC, markers and RTR are MPA's; RFC 5043 §4 needs neither). A
    /// byte stream cannot run over SCTP here, and the Initiate's private
    /// data holds at most 508 octets (the IRD/ORD word takes 4).
    pub fn from_ulp(ulp: &crate::stack::Ulp) -> Result<SctpUlp, &'static str> {
        let crate::stack::Ulp::Iwarp {
            mpa,
            params,
            manual,
            cq,
            srq,
        } = ulp
        else {
            return Err("a byte stream needs TCP: SCTP carries iWARP only");
        };
        if mpa.private_data.len() > iwarp_control::sctp::MAX_ULP_PRIVATE_DATA {
            return Err("private data over 508 octets (SCTP: the IRD/ORD word takes 4)");
        }
        Ok(SctpUlp {
            ird: mpa.ird,
            ord: mpa.ord,
            private_data: mpa.private_data.clone(),
            params: *params,
            cq: cq.clone(),
            srq: srq.clone(),
            timeouts: SetupTimeouts {
                reply: mpa.reply_timeout,
                request: mpa.request_timeout,
                decision: mpa.decision_timeout,
                close: mpa.close_timeout,
            },
            manual: *manual,
        })
    }
}

/// Setup and close timers of an SCTP connection (nanoseconds; 0 turns
/// one off).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetupTimeouts {
    /// Active side: Initiate sent, until the Accept or Reject.
    pub reply: u64,
    /// Passive side: association up, until the Initiate (then SCTP ABORT).
    pub request: u64,
    /// Passive side: the application's answer to a request.
    pub decision: u64,
    /// A graceful close waiting for the answers to our RDMA Reads: once
    /// the peer has sent no segment for this long, the close becomes
    /// abortive and the Reads complete flushed (`MpaConfig::close_timeout`,
    /// as over MPA). Any other close (our last segments, then SHUTDOWN)
    /// whose peer makes no progress for this long ends with SCTP ABORT.
    pub close: u64,
}

impl Default for SetupTimeouts {
    /// MPA's defaults (`iwarp_control::MpaConfig`): 10 s, 5 s, 10 s, and
    /// a close timeout of 5 s.
    fn default() -> Self {
        let m = iwarp_control::MpaConfig::default();
        SetupTimeouts {
            reply: m.reply_timeout,
            request: m.request_timeout,
            decision: m.decision_timeout,
            close: m.close_timeout,
        }
    }
}

/// An iWARP connection over SCTP, as the stack's one table of
/// connections holds it ([`Connection::Sctp`]): its association, its
/// state machine, its queue pair.
#[derive(Debug)]
pub(crate) struct SctpConn {
    assoc: AssocId,
    /// Local port of a passive connection (for `Output::Accepted`).
    port: u16,
    /// What every connection of the stack has ([`ConnHead`]: the peer,
    /// the `Connect` token until the association is up or failed, its
    /// place in the ready and deadline sets, the listening port whose
    /// backlog it counts against until the application accepts it, and
    /// whether its end was reported or it was aborted for the memory
    /// budget).
    head: ConnHead,
    ulp: SctpUlp,
    /// Its state (the active side sends the Session Initiate, the
    /// passive side answers it), timers, CM events and the rules of its
    /// close: the one state machine both transports drive
    /// ([`Lifecycle`]).
    life: Lifecycle,
    /// The Session Initiate/Accept exchange (`iwarp_control::setup`, the
    /// one exchange both lower layers step): ours from the Initiate we
    /// sent until the Accept, or the peer's Initiate held while the
    /// application decides ([`State::AwaitingDecision`]).
    setup: Option<Exchange>,
    /// A close began (the application's close or abort, an abort of
    /// ours, a failed setup): the connection goes once its association
    /// has ended and that is reported. One whose association ended first
    /// stays, refusing posts, until the application closes it (a queue
    /// pair it holds).
    goes_when_closed: bool,
    qp: Option<SctpQp>,
    /// Posts made before full operation.
    pending: EarlyWork,
    /// Segments that overtook the Accept (active side).
    early: EarlyData,
    outputs: VecDeque<HostOutput>,
    /// SHUTDOWN or ABORT was asked of the association.
    shutdown_sent: bool,
}

impl SctpConn {
    fn new(assoc: AssocId, port: u16, remote: Ipv4Address, ulp: SctpUlp, role: Role) -> Self {
        let pending = EarlyWork::new(ulp.params.sq_depth, ulp.params.rq_depth);
        SctpConn {
            assoc,
            port,
            head: ConnHead::new(remote),
            ulp,
            life: Lifecycle::new(role),
            setup: None,
            goes_when_closed: false,
            qp: None,
            pending,
            early: EarlyData::new(MAX_EARLY),
            outputs: VecDeque::new(),
            shutdown_sent: false,
        }
    }

    /// What every connection of the stack has.
    #[inline]
    pub(crate) fn head(&self) -> &ConnHead {
        &self.head
    }

    /// (See [`head`](Self::head).)
    #[inline]
    pub(crate) fn head_mut(&mut self) -> &mut ConnHead {
        &mut self.head
    }

    /// Put it (id `id`) in the ready set unless it is there already.
    #[inline]
    pub(crate) fn mark(&mut self, ready: &mut ReadySet<Ready>, id: SockId) {
        ready.mark(&mut self.head.slot, Ready::sctp(id));
    }

    /// Where it is in its life.
    pub(crate) fn state(&self) -> State {
        self.life.state()
    }

    /// Work posted on it (id `id`) at `now` (a send-queue request's
    /// completion latency counts from there): to the queue pair in full
    /// operation, held until then, refused with why once it is closing.
    /// It is marked for the next round.
    pub(crate) fn post(
        &mut self,
        id: SockId,
        ready: &mut ReadySet<Ready>,
        cmd: HostCommand,
        mem: &MemoryTable,
        now: u64,
        out: &mut dyn FnMut(Output),
    ) {
        self.mark(ready, id);
        let cq = self.ulp.cq.as_ref();
        let mut refuse = |e: PostError| route(id, HostOutput::refused(&cmd, e), cq, out);
        if self.life.state().is_closing() {
            refuse(self.refusal());
            return;
        }
        match (self.life.state(), self.qp.as_mut()) {
            // Straight to the queue pair (the common case: no list of
            // outputs in between).
            (State::Operational, Some(qp)) => {
                let r = match cmd {
                    HostCommand::PostSend(wr) => qp.qp().post_send_tagged(mem, wr, now),
                    HostCommand::PostRecv(wr_id, sgl) => qp.qp().post_recv(mem, wr_id, sgl),
                };
                if let Err(e) = r {
                    refuse(e);
                }
            }
            _ => {
                if let Err(e) = self.pending.push(cmd, now) {
                    refuse(e);
                }
            }
        }
    }

    /// Whether posts wait here for full operation.
    pub(crate) fn holds_posts(&self) -> bool {
        !self.pending.is_empty()
    }

    /// Its queue pair's counters, once in full operation.
    pub(crate) fn qp_stats(&self) -> Option<iwarp_proto::qp::QpStats> {
        self.qp.as_ref().map(|q| q.qp_ref().stats())
    }

    /// Make a pending request's queue pair take its receive buffers from
    /// `srq` (no effect once the queue pair exists).
    pub(crate) fn set_srq(&mut self, srq: Srq) {
        if self.life.state() == State::AwaitingDecision {
            self.ulp.srq = Some(srq);
        }
    }

    /// A drive now would do nothing: in full operation, nothing queued to
    /// send or hand up (work held before full operation, outputs, events,
    /// the queue pair's segments, completions and events), the session
    /// not over, none of its own deadlines due. A packet that leaves it so
    /// (a Write placed, our segments acknowledged) need not mark it: what
    /// the packet left its association to do marks the association, and a
    /// visit to the association drives the connection.
    fn idle_after_packet(&self, now: u64) -> bool {
        self.life.state() == State::Operational
            && !self.holds_posts()
            && self.outputs.is_empty()
            && self.life.events_len() == 0
            && self
                .qp
                .as_ref()
                .is_some_and(|q| q.tx_idle() && !q.session_over() && !q.qp_ref().has_output())
            && self.deadline().is_none_or(|t| t > now)
    }

    /// The earliest of its own deadlines, as [`SctpConns::drive`] reads
    /// them: setup, a close waiting for Read answers, a close's linger,
    /// an abort's wait for its Terminate (until the association is
    /// aborted or closing).
    #[inline]
    fn deadline(&self) -> Option<u64> {
        let t = &self.life.timers;
        // None of them, in full operation (asked after every drive).
        if t.none_armed() {
            return None;
        }
        let abort = (!self.closed() && !self.shutdown_sent)
            .then(|| t.get(Timer::Abort))
            .flatten();
        // No first-FPDU hold over SCTP.
        earliest(
            earliest(t.get(Timer::Setup), t.get(Timer::CloseReads)),
            earliest(t.get(Timer::Linger), abort),
        )
    }

    /// Why the connection ended or is ending: a Terminate sent or received
    /// (the queue pair's record) before anything else, then the first of
    /// our close or abort and the association's end.
    pub(crate) fn cause(&self) -> Option<DisconnectCause> {
        let qp = self.qp.as_ref().and_then(|q| q.qp_ref().disconnect_cause());
        match qp {
            Some(
                c @ (DisconnectCause::TerminateReceived(_) | DisconnectCause::TerminateSent(_)),
            ) => Some(c),
            _ => self.life.cause().or(qp),
        }
    }

    /// Record why the connection ends from an event of its association
    /// (the first reason stays: our own close or abort came first if it
    /// is already there).
    fn note_end(&mut self, ev: &DdpEvent) {
        let why = match ev {
            // The peer ended our session (RFC 5043 §6.2: its graceful
            // close), or we did at the ULP's request.
            DdpEvent::SessionEnded { stream, why, .. } if *stream == STREAM => match why {
                SessionEnd::PeerTerminated => DisconnectCause::PeerClosed,
                SessionEnd::LocalTerminated => DisconnectCause::LocalClose,
                SessionEnd::IllegalSequence(_) | SessionEnd::TooManyPending => {
                    DisconnectCause::LocalAbort
                }
                SessionEnd::Rejected => return,
            },
            DdpEvent::Closed(reason) => match reason {
                // The SHUTDOWN exchange finished and we had not asked for
                // it: the peer closed.
                CloseReason::Shutdown => DisconnectCause::PeerClosed,
                CloseReason::PeerAbort(_) => DisconnectCause::PeerReset,
                CloseReason::Timeout => DisconnectCause::TimedOut,
                // We sent ABORT (asked to, a protocol error of the peer's,
                // the memory budget, a missing adaptation layer
                // indication).
                CloseReason::LocalAbort
                | CloseReason::AdaptationRefused
                | CloseReason::ProtocolError(_) => DisconnectCause::LocalAbort,
            },
            _ => return,
        };
        self.life.note_cause(why);
    }

    /// A post this connection cannot take any more: refused with why it
    /// ended when that is known (as over TCP).
    fn refusal(&self) -> PostError {
        self.cause()
            .map_or(PostError::NotReady(QpState::Error), PostError::Disconnected)
    }

    /// The association is gone.
    #[inline]
    fn closed(&self) -> bool {
        self.life.state() == State::Closed
    }

    /// A graceful close begins ([`Lifecycle::begin_close`]), and the
    /// connection goes once it is over (`goes_when_closed`).
    fn begin_close(&mut self) {
        if !self.life.state().is_closing() {
            self.goes_when_closed = true;
            self.life.begin_close();
        }
    }

    /// The setup exchange, on `role`'s side of it.
    fn awaiting_setup(&self, role: Role) -> bool {
        self.life.awaiting_setup(role)
    }

    /// Setup failed: the application learns why
    /// ([`CmEvent::SetupFailed`]) and the connection closes.
    fn fail(&mut self, e: SetupError) {
        self.setup = None;
        if !self.life.state().is_closing() {
            self.goes_when_closed = true;
        }
        self.life.setup_failed(e);
    }

    /// Make the queue pair (session accepted), post what waited, and
    /// report full operation.
    fn start(
        &mut self,
        now: u64,
        n: Negotiated,
        mulpdu: usize,
        max_held: usize,
        mem: &mut MemoryTable,
    ) {
        let cfg = QpConfig {
            pd: self.ulp.params.pd,
            ird: n.ird,
            ord: n.ord,
            mulpdu: 0,
            crc: false,
            markers_tx: false,
            markers_rx: false,
            sq_depth: self.ulp.params.sq_depth,
            rq_depth: self.ulp.params.rq_depth,
        };
        let mut qp = SctpQp::bounded(cfg, self.ulp.srq.clone(), STREAM, mulpdu, true, max_held);
        // Receives first, so the segments held and those behind them find
        // their buffers; sends after.
        for (cmd, at) in self.pending.take_recvs() {
            post_to(&cmd, at, qp.qp(), mem, &mut self.outputs);
        }
        for (ssn, seg) in self.early.take() {
            qp.qp().receive_segment(ssn, &seg, mem);
        }
        while let Some((cmd, at)) = self.pending.pop_front() {
            post_to(&cmd, at, qp.qp(), mem, &mut self.outputs);
        }
        self.qp = Some(qp);
        self.setup = None;
        self.life.established(now, n);
    }
}

/// Post `cmd`, made at `at` (its completion's latency counts from
/// there), to `qp`; a refusal goes to `out`.
fn post_to(
    cmd: &HostCommand,
    at: u64,
    qp: &mut iwarp_proto::qp::Qp,
    mem: &MemoryTable,
    out: &mut VecDeque<HostOutput>,
) {
    if let Err(e) = cmd.post_to(qp, mem, at) {
        out.push_back(HostOutput::refused(cmd, e));
    }
}

/// Why an association that ended with `r` failed a connection still
/// opening (a clean SHUTDOWN before setup finished counts as a reset).
fn close_error(r: &CloseReason) -> ConnError {
    ConnError::from_sctp(r).unwrap_or(ConnError::Reset)
}

/// The SCTP part of a stack. See the [module docs](self).
#[derive(Debug)]
pub struct SctpConns {
    host: SctpHost,
    // (Its connections are in the stack's one table of connections over
    // both transports, `Connections`, lent to each call that reaches
    // them.)
    /// Association → connection. Our own ids (never a peer's choice), so
    /// a B-tree: no SipHash per received segment (1.5 % of an SCTP Write
    /// stream's instructions).
    by_assoc: BTreeMap<AssocId, SockId>,
    /// The ids of this part's connections in the stack's table (an index
    /// into it, kept as they are inserted and freed): the walk over what
    /// they hold, after each active round, visits them alone, not every
    /// TCP connection of the table too.
    members: BTreeSet<SockId>,
    /// `poll`'s list of the connections it drives (their marks taken
    /// from the stack's ready set), kept for its capacity.
    ids: Vec<Ready>,
    /// Listening ports whose backlog count a connection left since the
    /// stack last took them ([`take_left_backlog`](Self::take_left_backlog)):
    /// accepted, failed or freed. The count itself is the stack's, in its
    /// one map of listening ports over both transports.
    left_backlog: Vec<u16>,
    /// Connections freed, their CQs and causes, not yet handed to the
    /// stack's record ([`take_freed`](Self::take_freed)).
    freed: Vec<(SockId, Option<QpCqs>, Option<DisconnectCause>)>,
    /// Where connection ids come from: the stack's one counter
    /// (`set_ids`).
    id_source: Arc<SockIds>,
    next_port: u16,
    ephemeral_base: u16,
    /// Our address and, on a loop of several, the receive steering its
    /// active opens pick local ports by (`set_steering`).
    local: Ipv4Address,
    steering: Option<crate::stack::Steering>,
    host_out: Vec<SctpOutput>,
    /// Graceful closes that ran out of `SetupTimeouts::close` waiting for
    /// the answers to our Reads and became abortive.
    close_timeouts: u64,
    /// DDP Segments held ahead of their Accept ([`SctpCounters::early_segments`]).
    early_segments: u64,
    /// Closes whose peer made no progress for `SetupTimeouts::close`:
    /// their associations were aborted.
    linger_aborts: u64,
    /// Connections per listening port its application has not accepted
    /// yet (`set_backlog`).
    backlog: usize,
    /// Associations aborted at a listener whose backlog was full.
    backlog_aborts: u64,
    /// Octets a queue pair holds out of DDP-SSN order (`set_max_held`).
    max_held: usize,
    /// Numbers accepted associations (`set_accept_order`).
    accept_order: Arc<AtomicU64>,
    /// Connections driven, in all.
    drives: u64,
    /// The last poll visited an association or drove a connection.
    active: bool,
    /// What the connections held after the last active poll
    /// ([`set_held_total`](Self::set_held_total)).
    held_total: usize,
    /// From the post of each successful send-queue request to its
    /// completion, as over TCP (`StackStats::completion_latency`).
    completion_latency: CompletionLatency,
    /// From the `Connect` to full operation (the Session Accept in).
    setup_active: Histogram,
    /// From the association accepted to full operation (the Session
    /// Accept out), the application's decision included.
    setup_passive: Histogram,
}

/// Write record `key` of the queue pair of association `assoc` into
/// `dst` (a DATA chunk being built): false if there is none any more, or
/// its memory went away.
#[inline]
fn fill_segment(
    by_assoc: &BTreeMap<AssocId, SockId>,
    conns: &mut Connections,
    mem: &MemoryTable,
    assoc: AssocId,
    key: u64,
    dst: &mut [u8],
) -> bool {
    by_assoc
        .get(&assoc)
        .and_then(|&id| conn_mut(conns, id))
        .and_then(|c| c.qp.as_mut())
        .is_some_and(|qp| qp.fill(mem, key, dst))
}

/// Connection `id` of the stack's table, if it runs over SCTP.
#[inline]
fn conn_mut(conns: &mut Connections, id: SockId) -> Option<&mut SctpConn> {
    conns.get_mut(&id).and_then(Connection::sctp_mut)
}

/// An association under one iWARP connection, as its teardown sees it
/// ([`LowerLayer`]): a close is a SHUTDOWN, a reset an ABORT; the
/// association's `Closed` event ends the stream ([`SctpConns::event`]).
struct AssocLower<'a> {
    host: &'a mut SctpHost,
    ready: &'a mut ReadySet<Ready>,
    assoc: AssocId,
    /// Its state when the step began (None: gone).
    state: Option<AssocState>,
    /// SHUTDOWN or ABORT was asked of it.
    shutdown_sent: &'a mut bool,
    now: u64,
    /// A verdict was carried out.
    acted: bool,
}

impl LowerLayer for AssocLower<'_> {
    #[inline]
    fn steady(&self) -> bool {
        self.state == Some(AssocState::Established)
    }

    /// The peer's SHUTDOWN arrived: it sends nothing new (RFC 9260 §9.2),
    /// and had every DATA of its own acknowledged first.
    #[inline]
    fn peer_closed(&self) -> bool {
        matches!(
            self.state,
            Some(AssocState::ShutdownReceived | AssocState::ShutdownAckSent)
        )
    }

    fn can_close(&self) -> bool {
        !*self.shutdown_sent
    }

    fn can_reset(&self) -> bool {
        !*self.shutdown_sent
    }

    /// The session is over: its Terminate went to the association (no
    /// queue pair: there was none to send).
    fn terminate_delivered(&self, qp: &QpFacts) -> bool {
        !qp.exists || qp.ended
    }

    fn close(&mut self) {
        if let Some(a) = self.host.assoc_mut(self.ready, self.assoc) {
            a.shutdown(self.now);
        }
        *self.shutdown_sent = true;
        self.acted = true;
    }

    fn end_abort(&mut self) {
        self.close();
    }

    fn reset(&mut self) {
        if let Some(a) = self.host.assoc_mut(self.ready, self.assoc) {
            a.abort();
        }
        *self.shutdown_sent = true;
        self.acted = true;
    }

    /// Its `Closed` event, not a step, ends the stream: it reports why
    /// (`SctpConns::event`).
    fn over(&self, _: State) -> bool {
        false
    }

    /// A close (graceful or abortive, ours or the peer's SHUTDOWN) sends
    /// what is queued — our last segments, a Terminate, a Reject — then
    /// SHUTDOWN or SHUTDOWN-ACK. To a peer gone silent SCTP would
    /// retransmit them with back-off up to Association.Max.Retrans times
    /// (RFC 9260 §6.3.3, §9.2, §8.1: about six minutes at RTO.Max 60 s),
    /// the association keeping its `max_assocs` slot and what it holds all
    /// that time. Progress: FPDUs received, and the octets our association
    /// holds to send (they change as the peer acknowledges them; during a
    /// close nothing new is posted), so a slow peer that keeps
    /// acknowledging is not cut short. The ABORT carries User-Initiated
    /// Abort (§9.1, §3.3.10.12) and flushes the queue pair.
    fn lingering(&self, state: State, qp: &QpFacts) -> Option<(u64, usize)> {
        let lingering = state != State::Closed
            && (matches!(state, State::Closing | State::Aborting)
                || *self.shutdown_sent
                || self.peer_closed());
        lingering.then(|| {
            let sent = self.host.assoc(self.assoc);
            (qp.fpdus_rx, sent.map_or(0, |a| a.sctp().send_buffered()))
        })
    }
}

/// What an accepted queue pair takes from the application rather than
/// from its listener.
#[derive(Debug, Clone, Default)]
pub struct AcceptQp {
    /// Where its completions go.
    pub cq: Option<QpCqs>,
    /// Its protection domain.
    pub pd: Option<iwarp_proto::mem::PdId>,
}

/// The application's answer to a connection request: its private data
/// and IRD/ORD (each capped by the peer's, RFC 6581 §3).
#[derive(Debug, Clone, Default)]
pub struct AppAnswer {
    /// Private data for the Session Accept.
    pub private_data: Vec<u8>,
    /// Its inbound RDMA Read queue depth.
    pub ird: u16,
    /// Its outbound RDMA Read queue depth.
    pub ord: u16,
}

impl SctpConns {
    /// The part for one interface; ephemeral ports from `ephemeral_base`.
    pub fn new(cfg: SctpHostConfig, ephemeral_base: u16) -> Result<Self, &'static str> {
        let local = Ipv4Address(cfg.ip);
        Ok(SctpConns {
            host: SctpHost::new_shared(cfg)?,
            by_assoc: BTreeMap::new(),
            members: BTreeSet::new(),
            ids: Vec::new(),
            left_backlog: Vec::new(),
            id_source: Arc::new(SockIds::new(0, 1)),
            freed: Vec::new(),
            next_port: ephemeral_base,
            ephemeral_base,
            local,
            steering: None,
            host_out: Vec::new(),
            close_timeouts: 0,
            early_segments: 0,
            linger_aborts: 0,
            backlog: usize::MAX,
            backlog_aborts: 0,
            max_held: MAX_HELD,
            accept_order: Arc::default(),
            active: false,
            held_total: 0,
            completion_latency: CompletionLatency::default(),
            setup_active: Histogram::default(),
            setup_passive: Histogram::default(),
            drives: 0,
        })
    }

    /// Whether the last `poll` visited an association or
    /// drove a connection. If not, what the connections hold
    /// (`holders`) has not changed since: segments are
    /// placed from frames whose association is then visited, and posts
    /// and events drive their connection.
    pub fn was_active(&self) -> bool {
        self.active
    }

    /// Octets the connections held at the last active poll, as the stack
    /// summed them ([`set_held_total`](Self::set_held_total)).
    pub fn held_total(&self) -> usize {
        self.held_total
    }

    /// Note what `holders` summed to after an active poll.
    pub fn set_held_total(&mut self, octets: usize) {
        self.held_total = octets;
    }

    /// Connections driven in all (an idle one is not).
    pub fn drives(&self) -> u64 {
        self.drives
    }

    /// Nothing waits here for the next round (no frame or output of the
    /// associations': [`SctpHost::has_pending`]). Whether a connection or
    /// association is marked or has a deadline is the stack's ready set's
    /// to say.
    pub fn quiescent(&self) -> bool {
        !self.host.has_pending()
    }

    /// The deadline entry `(at, key)` that the stack popped from its
    /// deadline set ([`ReadySet::pop_due`]), an association's: it is
    /// marked, if it is still here. (A connection's is the stack's to
    /// fire, in its table.)
    #[inline]
    pub fn fire(&mut self, ready: &mut ReadySet<Ready>, key: Ready, at: u64) {
        if let Some(a) = key.as_assoc() {
            self.host.fire(ready, a, at);
        }
    }

    /// The idle sweep: every association is marked (the connections, by
    /// the stack's sweep of its table).
    pub fn mark_all(&mut self, ready: &mut ReadySet<Ready>) {
        self.host.mark_all(ready);
    }

    /// Free connection `id`: its CQ and cause go to the stack's one
    /// record of freed connections, over both transports, when the stack
    /// next takes them ([`take_freed`](Self::take_freed)), so that a
    /// post to the id is refused there with why it ended; its token no
    /// longer names it then.
    fn forget(&mut self, conns: &mut Connections, ready: &mut ReadySet<Ready>, id: SockId) {
        // One lookup: an entry of the other transport stays where it is.
        let std::collections::btree_map::Entry::Occupied(e) = conns.entry(id) else {
            return;
        };
        if !matches!(e.get(), Connection::Sctp(_)) {
            return;
        }
        if let Connection::Sctp(mut c) = e.remove() {
            ready.forget(&mut c.head.slot, Ready::sctp(id));
            self.freed.push((id, c.ulp.cq.clone(), c.cause()));
            self.left_backlog.extend(c.head.backlog_of);
            self.members.remove(&id);
        }
    }

    /// Whether connections were freed, or left a listener's backlog,
    /// since the last [`take_freed`](Self::take_freed) and
    /// [`take_left_backlog`](Self::take_left_backlog), which hand them
    /// over for the stack's record of freed connections (`Stack::gone`),
    /// its map of tokens and its listeners' counts. The stack takes them
    /// after every call that may free one (a round, a close, an abort),
    /// before it takes its next command.
    #[inline]
    pub(crate) fn has_freed(&self) -> bool {
        !self.freed.is_empty() || !self.left_backlog.is_empty()
    }

    /// (See [`has_freed`](Self::has_freed).)
    pub(crate) fn take_freed(
        &mut self,
    ) -> std::vec::Drain<'_, (SockId, Option<QpCqs>, Option<DisconnectCause>)> {
        self.freed.drain(..)
    }

    /// The listening ports whose backlog a connection left (one entry
    /// each time), since the last call: the stack lowers their counts.
    /// Taken with [`take_freed`](Self::take_freed), after the same calls.
    pub(crate) fn take_left_backlog(&mut self) -> std::vec::Drain<'_, u16> {
        self.left_backlog.drain(..)
    }

    /// The engine underneath (counters, associations).
    pub fn host(&self) -> &SctpHost {
        &self.host
    }

    /// Graceful closes that waited `SetupTimeouts::close` for the answers
    /// to our Reads in vain and became abortive.
    pub fn close_timeouts(&self) -> u64 {
        self.close_timeouts
    }

    /// Closes that waited `SetupTimeouts::close` for a peer that made no
    /// progress (nothing acknowledged, no FPDU) and aborted its
    /// association.
    pub fn linger_aborts(&self) -> u64 {
        self.linger_aborts
    }

    /// Add this part's latencies to the stack's counters `s`: the post to
    /// completion of each successful send-queue request, and each
    /// connection's setup time, as over TCP.
    pub fn add_latencies(&self, s: &mut crate::stack::StackStats) {
        s.completion_latency.merge(&self.completion_latency);
        s.setup_active.merge(&self.setup_active);
        s.setup_passive.merge(&self.setup_passive);
    }

    /// A listening port holds at most `n` connections its application
    /// has not accepted (awaiting the peer's Initiate, or the
    /// application's answer to it); an association that completes its
    /// handshake beyond that is aborted at once, as Linux's SCTP answers
    /// a COOKIE ECHO with ABORT when the accept queue is full
    /// (`sctp_sf_do_5_1D_ce`). The stack sets its `StackConfig::backlog`.
    pub fn set_backlog(&mut self, n: usize) {
        self.backlog = n;
    }

    /// Queue pairs made from now on hold at most `octets` of segments
    /// that arrived ahead of an earlier DDP-SSN ([`SctpQp::bounded`];
    /// [`MAX_HELD`] by default); one more ends the connection's stream
    /// with an RDMAP Terminate and its association is shut down.
    pub fn set_max_held(&mut self, octets: usize) {
        self.max_held = octets;
    }

    /// The counter that numbers accepted associations
    /// (`Output::Accepted`'s `order`): the stack's, which its TCP
    /// listeners count with too (`StackConfig::accept_order`). Until
    /// set, this part counts alone.
    pub fn set_accept_order(&mut self, counter: Arc<AtomicU64>) {
        self.accept_order = counter;
    }

    /// Take connection ids from `ids` (the stack's counter, which its
    /// TCP connections take from too: one id names one connection over
    /// either transport, and the loops of one context count apart,
    /// `StackConfig::sock_ids`). Until set, this part counts alone from 0.
    /// Set before the first connection.
    pub fn set_ids(&mut self, ids: Arc<SockIds>) {
        self.id_source = ids;
    }

    /// This part is the loop of one receive queue of several
    /// (`StackConfig::steering`): an active open takes a local port whose
    /// answers the RSS brings to this queue (`Rss::port_for_queue`, SCTP's
    /// ports hashed as TCP's), or fails (`ConnError::Local`) when no free
    /// port does; and SCTP over UDP is refused (its outer ports, 9899 both
    /// ways, are all RSS hashes, so no local port choice steers it).
    pub fn set_steering(&mut self, steering: Option<crate::stack::Steering>) {
        self.steering = steering;
    }

    /// Associations aborted for a full backlog.
    pub fn backlog_aborts(&self) -> u64 {
        self.backlog_aborts
    }

    /// Octets queued in the associations' send buffers, not yet
    /// acknowledged by their peers, summed.
    pub fn send_buffered(&self) -> usize {
        self.by_assoc
            .keys()
            .filter_map(|id| self.host.assoc(*id))
            .map(|a| a.sctp().send_buffered())
            .sum()
    }

    /// Counters: the host's, the live associations' summed, and those of
    /// the connections over SCTP in the stack's table `conns`.
    pub(crate) fn counters(&self, conns: &Connections) -> SctpCounters {
        let sctp = || conns.values().filter_map(Connection::sctp);
        let mut assoc = sctp_lite::assoc::Stats::default();
        for id in self.by_assoc.keys() {
            if let Some(a) = self.host.assoc(*id) {
                add_assoc_stats(&mut assoc, &a.sctp().stats());
            }
        }
        let held = sctp().filter_map(|c| c.qp.as_ref());
        let held = held.map(|q| q.qp_ref().segments_held().1);
        let (qp_held_octets, qp_held_max) = held.fold((0, 0), |(s, m), h| (s + h, m.max(h)));
        let segments_by_reference = sctp()
            .filter_map(|c| c.qp.as_ref())
            .map(|q| q.segments_by_reference())
            .sum();
        SctpCounters {
            connections: self.members.len(),
            host: self.host.stats(),
            assoc,
            qp_held_octets,
            qp_held_max,
            segments_by_reference,
            early_segments: self.early_segments,
        }
    }

    /// What each connection holds that its peer sent (see
    /// [`crate::budget`]): the association's receive buffer as sctp-lite
    /// charges it (chunk overhead included), DDP Segments waiting for the
    /// queue pair, the queue pair's out-of-order hold, and segments that
    /// overtook the Accept; `releasing` once aborted for the budget or
    /// closed.
    /// (Those over SCTP in the stack's table `conns`.)
    pub(crate) fn holders<'a>(
        &'a self,
        conns: &'a Connections,
    ) -> impl Iterator<Item = crate::budget::Holder> + 'a {
        let conn = |id: &SockId| conns.get(id).and_then(Connection::sctp);
        self.members
            .iter()
            .filter_map(move |&id| Some(self.holder(id, conn(&id)?)))
    }

    /// The connections this part has in the stack's table (its index of
    /// them).
    pub(crate) fn members(&self) -> usize {
        self.members.len()
    }

    /// (One of [`holders`](Self::holders): connection `id`, `c`.)
    pub(crate) fn holder(&self, id: SockId, c: &SctpConn) -> crate::budget::Holder {
        let assoc = self.host.assoc(c.assoc).filter(|_| !c.closed());
        let assoc = assoc.map_or(0, |a| a.sctp().recv_buffered() + a.held());
        let qp = c.qp.as_ref().map_or(0, |q| q.qp_ref().segments_held().1);
        crate::budget::Holder {
            id,
            held: assoc + qp + c.early.octets(),
            releasing: c.head.over_budget || c.closed(),
        }
    }

    /// End connection `id` for the memory budget: SCTP ABORT with the
    /// error cause Out of Resource (RFC 9260 §3.3.10.4); the connection
    /// then reports `Disconnected` as for any ABORT. False if there is no
    /// such connection or it was already ended so.
    pub(crate) fn abort_over_budget(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        id: SockId,
    ) -> bool {
        let Some(c) = conn_mut(conns, id).filter(|c| !c.head.over_budget) else {
            return false;
        };
        c.head.over_budget = true;
        c.mark(ready, id);
        if let Some(a) = self.host.assoc_mut(ready, c.assoc) {
            a.abort_with_cause(sctp_lite::wire::cause_code::OUT_OF_RESOURCE);
        }
        true
    }

    /// An SCTP packet the stack's interface received
    /// ([`Interface::receive_ip`]).
    pub(crate) fn handle_packet(
        &mut self,
        conns: &mut Connections,
        iface: &mut Interface,
        ready: &mut ReadySet<Ready>,
        pkt: &SctpIngress<'_>,
        now: u64,
        mem: &mut MemoryTable,
    ) -> bool {
        // Segments of a running queue pair are placed from the frame
        // (no copy but the placement); the rest come out as events and
        // are dispatched at the next poll, as before.
        let SctpConns { host, by_assoc, .. } = self;
        // The association's connection, looked up once a packet (the
        // packet's segments all belong to one association).
        let mut seen: Option<(AssocId, SockId)> = None;
        let place = &mut |assoc, stream, ssn, seg: &[u8]| {
            let id = match seen {
                Some((a, id)) if a == assoc => id,
                _ => match by_assoc.get(&assoc) {
                    Some(&id) => {
                        seen = Some((assoc, id));
                        id
                    }
                    None => return false,
                },
            };
            let Some(c) = conn_mut(conns, id) else {
                return false;
            };
            let closed = c.closed();
            match c.qp.as_mut() {
                Some(qp) if !closed => qp.place_segment(stream, ssn, seg, mem),
                _ => false,
            }
        };
        let reached = host.handle_packet_with(iface, ready, pkt, now, place);
        // Its connection is driven next round (segments placed may have
        // completed a receive, a SACK may have made room for segments
        // waiting), whether or not the association itself is visited,
        // unless the packet left it nothing to do
        // ([`SctpConn::idle_after_packet`]): then what is left to do, if
        // anything, is the association's (marked by the host, its visit
        // drives the connection), and the caller learns it (true).
        let id = match (reached, seen) {
            (Some(a), Some((b, id))) if a == b => Some(id),
            (Some(a), _) => by_assoc.get(&a).copied(),
            (None, _) => None,
        };
        match id.and_then(|id| conn_mut(conns, id).map(|c| (id, c))) {
            Some((id, c)) => {
                if c.idle_after_packet(now) {
                    return true;
                }
                c.mark(ready, id);
                false
            }
            None => false,
        }
    }

    /// Accept associations on `port` (their handshakes here, in the
    /// association host); false if it listens already. The port's record
    /// (its ULP, its backlog count) is the stack's, in its one map of
    /// listening ports, which `poll` is lent.
    pub(crate) fn listen(&mut self, port: u16) -> bool {
        self.host.listen(port)
    }

    /// Whether `port` accepts associations.
    pub fn listening(&self, port: u16) -> bool {
        self.host.listening(port)
    }

    /// Stop accepting associations on `port`: false if it did not. (The
    /// stack lets its connections not accepted yet stop counting against
    /// it, over both transports: `ConnHead::backlog_of`.)
    pub(crate) fn unlisten(&mut self, port: u16) -> bool {
        self.host.unlisten(port)
    }

    /// A local port for an association to `remote:port`: the next one no
    /// association with that peer and port and no listener holds, or with
    /// [`set_steering`](Self::set_steering) the next such one whose
    /// answers reach this loop's queue (`None` if no free port does).
    fn ephemeral_port(&mut self, remote: [u8; 4], port: u16) -> Option<u16> {
        let base = self.ephemeral_base;
        if let Some(st) = &self.steering {
            let open = iwarp_net::rss::ActiveOpen {
                local: self.local,
                remote: Ipv4Address(remote),
                remote_port: port,
                proto: iwarp_net::wire::IpProtocol::SCTP,
            };
            let host = &self.host;
            let p =
                st.rss
                    .port_for_queue(st.queue, &open, base..=u16::MAX, self.next_port, |p| {
                        host.port_taken(remote, port, p)
                    })?;
            self.next_port = if p == u16::MAX { base } else { p + 1 };
            return Some(p);
        }
        for _ in 0..=u16::MAX {
            let p = self.next_port;
            self.next_port = if p == u16::MAX { base } else { p + 1 };
            if !self.host.port_taken(remote, port, p) {
                return Some(p);
            }
        }
        Some(base)
    }

    /// Open a connection to `(remote, port, udp)`, into the stack's table
    /// `conns`: `Output::Opening`, then `Connected` (or `Failed`) and CM
    /// events, through `out`. `udp`: the peer's UDP encapsulation port
    /// (RFC 6951), or `None` for raw IPv4. Returns the connection's
    /// id, which its `token` names in the stack's one map from tokens to
    /// connections until it is freed (None: refused locally, `Failed`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn connect(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        token: u64,
        (remote, port, udp): (Ipv4Address, u16, Option<u16>),
        ulp: SctpUlp,
        now: u64,
        out: &mut VecDeque<Output>,
    ) -> Option<SockId> {
        let lport = if udp.is_some() && self.steering.is_some() {
            Err(
                "SCTP over UDP on a loop of several: its outer UDP ports (9899 both ways) \
                 are what RSS hashes, the same for every association, so no local port \
                 brings the answers to this loop's queue",
            )
        } else {
            self.ephemeral_port(remote.0, port)
                .ok_or("no free local port whose answers RSS steers to this loop's queue")
        };
        match lport.and_then(|lport| {
            self.host
                .connect(ready, remote.0, port, lport, udp, now)
                .map(|a| (a, lport))
        }) {
            Ok((assoc, lport)) => {
                let id = self.id_source.take();
                let mut c = SctpConn::new(assoc, lport, remote, ulp, Role::Initiator);
                c.life.opened(now);
                c.head.token = Some(token);
                c.mark(ready, id);
                conns.insert(id, Connection::Sctp(Box::new(c)));
                self.members.insert(id);
                self.by_assoc.insert(assoc, id);
                tracing::debug!(sock = id, %remote, port, local_port = lport, "SCTP connecting");
                out.push_back(Output::Opening { token, sock: id });
                Some(id)
            }
            Err(why) => {
                tracing::info!(%remote, port, why, "SCTP connect refused locally");
                out.push_back(Output::Failed {
                    token,
                    error: ConnError::Local(why),
                });
                None
            }
        }
    }

    /// Accept a pending request with the application's `answer`, or
    /// (`None`) with the listener's own settings, as a listener that does
    /// not ask its application does (`Exchange::accept_own`, the same
    /// step an MPA listener takes); `qp` says where the queue pair's
    /// completions go and its PD (each `None`: the listener's).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn accept(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        id: SockId,
        answer: Option<AppAnswer>,
        qp: AcceptQp,
        mem: &mut MemoryTable,
        now: u64,
    ) -> Result<(), SetupError> {
        let AcceptQp { cq, pd } = qp;
        let Some(c) = conn_mut(conns, id) else {
            return Err(crate::no_request());
        };
        c.mark(ready, id);
        let (State::AwaitingDecision, Some(ex)) = (c.life.state(), c.setup.as_mut()) else {
            return Err(crate::no_request());
        };
        if ex.pending_request().is_none() {
            return Err(crate::no_request());
        }
        // The Accept's CQ from now on, even if the accept fails below:
        // what the application posted completes there when the
        // connection goes (as over TCP, `Stack`'s Accept).
        if cq.is_some() {
            c.ulp.cq = cq;
        }
        // (A Session Accept is never refused by the exchange itself.)
        let answer = match answer {
            Some(AppAnswer {
                private_data,
                ird,
                ord,
            }) => ex.accept(private_data, ird, ord)?,
            None => ex.accept_own()?,
        };
        let Answer::Accepted {
            message: bytes,
            negotiated: n,
        } = answer
        else {
            return Err(crate::no_request());
        };
        let Some(a) = self.host.assoc_mut(ready, c.assoc) else {
            return Err(crate::no_request());
        };
        if let Err(e) = a.accept(STREAM, &bytes) {
            tracing::info!(sock = id, error = ?e, "SCTP session accept refused");
            return Err(crate::no_request());
        }
        let mulpdu = a.mulpdu();
        if let Some(pd) = pd {
            c.ulp.params.pd = pd;
        }
        tracing::info!(
            sock = id,
            ird = n.ird,
            ord = n.ord,
            "SCTP connection request accepted"
        );
        c.start(now, n, mulpdu, self.max_held, mem);
        Ok(())
    }

    /// Reject a pending request with `private_data`.
    pub(crate) fn reject(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        id: SockId,
        private_data: &[u8],
    ) -> Result<(), SetupError> {
        let Some(c) = conn_mut(conns, id) else {
            return Err(crate::no_request());
        };
        c.mark(ready, id);
        let (State::AwaitingDecision, Some(ex)) = (c.life.state(), c.setup.as_mut()) else {
            return Err(crate::no_request());
        };
        let message = ex.reject(private_data)?;
        if let Some(a) = self.host.assoc_mut(ready, c.assoc) {
            let _ = a.reject(STREAM, &message);
        }
        c.fail(SetupError {
            code: TermCode::MPA_BAD_REQ_REP,
            reason: SetupFailure::RejectedByUs,
            peer_private_data: Vec::new(),
        });
        Ok(())
    }

    /// Graceful close (of a connection already over: forget it).
    pub(crate) fn close(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        id: SockId,
    ) {
        if let Some(c) = conn_mut(conns, id) {
            c.mark(ready, id);
            c.begin_close();
            c.life.note_cause(DisconnectCause::LocalClose);
            if c.head.reported_closed {
                self.forget(conns, ready, id);
            }
        }
    }

    /// Abortive close: RDMAP Terminate, then shutdown (or SCTP ABORT).
    pub(crate) fn abort(
        &mut self,
        conns: &mut Connections,
        ready: &mut ReadySet<Ready>,
        id: SockId,
        now: u64,
    ) {
        if let Some(c) = conn_mut(conns, id) {
            if c.head.reported_closed {
                self.forget(conns, ready, id);
                return;
            }
            c.mark(ready, id);
            c.life.note_cause(DisconnectCause::LocalAbort);
            // (Over already: nothing to abort, but it goes.)
            c.goes_when_closed = true;
            let qp = c.qp.as_mut().map(|q| q.qp());
            c.life
                .begin_abort(now, TermCode::RDMAP_LOCAL_CATASTROPHIC, qp);
        }
    }
}

mod round;

#[cfg(test)]
mod tests;
