//! What an iWARP connection is, whatever carries it: one state machine
//! for both lower layers. An iWARP connection over TCP
//! ([`crate::over_tcp::IwarpOverTcp`]) and one over SCTP
//! ([`crate::over_sctp`]'s connections) each hold one `Lifecycle`: the
//! same states and transitions, the same timer table (`timers`), the
//! same [`CmEvent`]s and the same bounds on a
//! close (a close waiting for our Reads' answers, a close left to the
//! lower layer, an abort's Terminate), and both queue work posted before
//! full operation in one [`crate::early::EarlyWork`]. Teardown is one
//! sequence (`Lifecycle::teardown`) over a `LowerLayer`: what is the
//! lower layer's are the facts each step reads (the peer's FIN or
//! SHUTDOWN, a Terminate delivered, the stream over, progress) and what
//! each verdict does to it (FIN or SHUTDOWN, RST or ABORT).
//!
//! | state | over MPA/TCP (RFC 5044) | over SCTP (RFC 5043) |
//! |---|---|---|
//! | [`State::Opening`] | TCP's three-way handshake | SCTP's four-way handshake |
//! | [`State::AwaitingSetup`] | MPA Request and Reply (§7.1) | DDP Stream Session Initiate and Accept (§6) |
//! | [`State::AwaitingDecision`] | a manual responder holds the Request | a manual responder holds the Initiate |
//! | [`State::Operational`] | FPDUs flow | DDP segments flow |
//! | [`State::Closing`] | outstanding work finishes, then FIN | outstanding work finishes, then SHUTDOWN |
//! | [`State::Aborting`] | a Terminate, then RST | a Terminate, then SHUTDOWN or ABORT |
//! | [`State::Closed`] | the stream is over (TCP may linger) | the association is gone |

use std::collections::VecDeque;

use iwarp_control::{Negotiated, PeerRequest, SetupError};
use iwarp_proto::qp::{DisconnectCause, Qp, QpState};
use iwarp_proto::wire::TermCode;

use crate::over_tcp::CmEvent;
use crate::timers::{Timer, Timers};

/// Which side opens the iWARP session: it sends the MPA Request (over
/// TCP) or the DDP Stream Session Initiate (over SCTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Sends the Request or Initiate (the active side, `Connect`).
    Initiator,
    /// Answers it (the passive side, a listener's connection).
    Responder,
}

/// Where one iWARP connection is in its life: one state for the lower
/// layer's handshake, the session setup exchange, full operation and
/// teardown together, over either transport (the table in
/// [this module](self)). Each transition that an application sees emits a
/// [`CmEvent`].
///
/// ```text
/// Opening ─► AwaitingSetup ─┬──────────────────────► Operational ─► Closing ─┐
///                           └─► AwaitingDecision ─┘       │  ▲        │       │
///          (setup failure: SetupFailed, then Closing)     ▼  └ Aborting ◄┘    │
///                                            any state ─► Closed ◄─────────────┘
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// The lower layer's handshake (TCP's or SCTP's).
    Opening,
    /// The setup exchange: the initiator waits for the MPA Reply or the
    /// Session Accept, the responder for the MPA Request or the Session
    /// Initiate (`MpaConfig::reply_timeout` / `request_timeout`).
    AwaitingSetup,
    /// A manual responder holds the request
    /// ([`CmEvent::ConnectRequest`]):
    /// the application accepts or rejects it
    /// (`MpaConfig::decision_timeout`).
    AwaitingDecision,
    /// Full operation
    /// ([`CmEvent::Established`]):
    /// DDP segments flow.
    Operational,
    /// A graceful close: outstanding work (and the answers to our Reads)
    /// finishes, then the lower layer closes (TCP's FIN, SCTP's
    /// SHUTDOWN). Entered on the application's close, on the peer's close,
    /// and after a setup failure
    /// ([`CmEvent::SetupFailed`],
    /// the rejection going out first).
    Closing,
    /// An abortive close: a Terminate, then RST (TCP) or SHUTDOWN/ABORT
    /// (SCTP) once it is sent (or [`crate::ABORT_GRACE_NS`] later).
    Aborting,
    /// The iWARP stream is over
    /// ([`CmEvent::Disconnected`]):
    /// the queue pair is flushed and places nothing more. TCP may linger
    /// (TIME-WAIT, LAST-ACK, FIN-WAIT-2 under its own timer); an SCTP
    /// association is gone.
    Closed,
}

impl State {
    /// A close has begun or is over: new work is refused.
    pub fn is_closing(self) -> bool {
        matches!(self, State::Closing | State::Aborting | State::Closed)
    }

    /// Before full operation: the lower layer's handshake or the setup
    /// exchange (posts wait in the early-work queue).
    pub fn is_setting_up(self) -> bool {
        matches!(
            self,
            State::Opening | State::AwaitingSetup | State::AwaitingDecision
        )
    }
}

/// One iWARP connection's life, whatever carries it: the one state
/// machine both transports drive ([`crate::over_tcp::IwarpOverTcp`] over
/// TCP, `over_sctp::conn`'s connections over SCTP). It owns the
/// [`State`], the connection's timer table ([`crate::timers`]), the
/// [`CmEvent`]s not yet taken, the first reason the connection ended for,
/// and the rules every close follows whatever the lower layer: a close
/// waiting for our Reads' answers and a close left to linger are bounded
/// by time since the peer's last progress
/// ([`watch_reads`](Self::watch_reads), [`watch_linger`](Self::watch_linger)),
/// an abort's Terminate by [`crate::ABORT_GRACE_NS`]
/// ([`begin_abort`](Self::begin_abort)). The transport supplies the facts
/// only it knows (is the lower layer open, has the peer made progress, are
/// our Reads answered) and does what each verdict asks of its lower layer
/// (FIN or SHUTDOWN, RST or ABORT).
#[derive(Debug)]
pub(crate) struct Lifecycle {
    state: State,
    role: Role,
    /// The connection's own deadlines.
    pub(crate) timers: Timers,
    events: VecDeque<CmEvent>,
    /// Why the connection ended or is ending, the first reason noted
    /// ([`note_cause`](Self::note_cause)).
    cause: Option<DisconnectCause>,
    /// While [`Timer::CloseReads`] is armed: the FPDUs received when it
    /// was last armed.
    reads_seen: Option<u64>,
    /// While [`Timer::Linger`] is armed: the peer's progress when it was
    /// last armed.
    linger_seen: Option<(u64, usize)>,
    /// When the connection began, on the loop's clock (the `Connect`, or
    /// the lower layer's handshake done on the passive side).
    opened_at: u64,
    /// Nanoseconds from `opened_at` to full operation, once there.
    setup_ns: Option<u64>,
}

impl Lifecycle {
    /// A connection in [`State::Opening`] on `role`'s side.
    pub(crate) fn new(role: Role) -> Self {
        Lifecycle {
            state: State::Opening,
            role,
            timers: Timers::default(),
            events: VecDeque::new(),
            cause: None,
            reads_seen: None,
            linger_seen: None,
            opened_at: 0,
            setup_ns: None,
        }
    }

    /// The connection began at `now` (the loop's clock): what
    /// [`setup_time`](Self::setup_time) counts from (0 if never set).
    pub(crate) fn opened(&mut self, now: u64) {
        self.opened_at = now;
    }

    /// Nanoseconds from [`opened`](Self::opened) to full operation, once
    /// it was reached (what the stack's `setup_active` and
    /// `setup_passive` histograms count, over either transport).
    pub(crate) fn setup_time(&self) -> Option<u64> {
        self.setup_ns
    }

    /// Where the connection is.
    #[inline]
    pub(crate) fn state(&self) -> State {
        self.state
    }

    /// Which side of the setup exchange it is.
    #[inline]
    pub(crate) fn role(&self) -> Role {
        self.role
    }

    /// The setup exchange, on `role`'s side of it.
    pub(crate) fn awaiting_setup(&self, role: Role) -> bool {
        self.state == State::AwaitingSetup && self.role == role
    }

    /// Move to `next`: the old state's timers go (a state takes its
    /// deadlines with it), [`State::Closed`] is final and reported once
    /// ([`CmEvent::Disconnected`]), and nothing else is armed in it but
    /// [`Timer::Linger`] (the lower layer's leftovers). Returns true when
    /// this call closed the connection (the caller flushes its queue
    /// pair).
    pub(crate) fn enter(&mut self, next: State) -> bool {
        if next == self.state || self.state == State::Closed {
            return false;
        }
        match self.state {
            State::AwaitingSetup | State::AwaitingDecision => self.timers.clear(Timer::Setup),
            State::Closing => self.clear_reads(),
            State::Aborting => self.timers.clear(Timer::Abort),
            _ => {}
        }
        self.state = next;
        if next == State::Closed {
            for t in [Timer::Setup, Timer::Hold, Timer::Abort] {
                self.timers.clear(t);
            }
            self.clear_reads();
            self.events.push_back(CmEvent::Disconnected);
            return true;
        }
        false
    }

    /// Remember `why` the connection ends, unless a reason is known
    /// already (the first one stays).
    #[inline]
    pub(crate) fn note_cause(&mut self, why: DisconnectCause) {
        self.cause.get_or_insert(why);
    }

    /// The first reason noted.
    #[inline]
    pub(crate) fn cause(&self) -> Option<DisconnectCause> {
        self.cause
    }

    /// The lower layer's handshake is done and the setup exchange begins:
    /// [`State::AwaitingSetup`], [`Timer::Setup`] armed for `timeout` ns
    /// (0: none; the Reply or Accept wait on the initiator's side, the
    /// Request or Initiate wait on the responder's).
    pub(crate) fn setup_begins(&mut self, now: u64, timeout: u64) {
        if self.state == State::Opening {
            self.enter(State::AwaitingSetup);
            self.timers.arm(Timer::Setup, now, timeout);
        }
    }

    /// A manual responder holds the peer's request: the application is
    /// asked ([`CmEvent::ConnectRequest`]) and [`Timer::Setup`] restarts
    /// for its decision (`timeout` ns, 0: none).
    pub(crate) fn decision_awaited(&mut self, now: u64, request: PeerRequest, timeout: u64) {
        self.events.push_back(CmEvent::ConnectRequest(request));
        self.enter(State::AwaitingDecision);
        self.timers.arm(Timer::Setup, now, timeout);
    }

    /// The setup exchange finished at `now`: full operation
    /// ([`CmEvent::Established`]), and the setup time is known.
    pub(crate) fn established(&mut self, now: u64, n: Negotiated) {
        self.setup_ns = Some(now.saturating_sub(self.opened_at));
        self.events.push_back(CmEvent::Established(n));
        self.enter(State::Operational);
    }

    /// Setup failed: the application learns why ([`CmEvent::SetupFailed`])
    /// and the connection closes (what the failure sends, a rejection or a
    /// Terminate, goes out first).
    pub(crate) fn setup_failed(&mut self, e: SetupError) {
        self.events.push_back(CmEvent::SetupFailed(e));
        self.begin_close();
    }

    /// A graceful close begins (ours, the peer's, or after a failure):
    /// [`State::Closing`] unless a close is already under way.
    pub(crate) fn begin_close(&mut self) {
        if !self.state.is_closing() {
            self.enter(State::Closing);
        }
    }

    /// The RDMAP stream ended with a Terminate, sent or received (the
    /// queue pair is in error): RFC 5040 §7 tears the LLP stream down
    /// with it, and §6.2.1 asks for a graceful teardown so that the
    /// Terminate is delivered. So a connection in full operation begins a
    /// graceful close (the lower layer closes once the Terminate is
    /// handed to it); the Terminate stays the cause the application is
    /// told.
    pub(crate) fn stream_ended(&mut self) {
        if self.state == State::Operational {
            self.enter(State::Closing);
        }
    }

    /// An abortive close begins: [`State::Aborting`], its Terminate
    /// (`code`, when the queue pair is in full operation) and
    /// [`crate::ABORT_GRACE_NS`] for it before the lower layer is reset
    /// or aborted anyway. Returns false, doing nothing, when the
    /// connection is aborting already or closed.
    pub(crate) fn begin_abort(&mut self, now: u64, code: TermCode, qp: Option<&mut Qp>) -> bool {
        if matches!(self.state, State::Aborting | State::Closed) {
            return false;
        }
        self.note_cause(DisconnectCause::LocalAbort);
        self.enter(State::Aborting);
        self.timers
            .set(Timer::Abort, now.saturating_add(crate::ABORT_GRACE_NS));
        if let Some(qp) = qp {
            if qp.state() == QpState::Rts {
                qp.terminate(code);
            }
        }
        true
    }

    /// The bound on a graceful close that waits only for the answers to
    /// our Reads, over either transport: `seen` is the FPDUs received so
    /// far while the close waits so (None: it waits for nothing of the
    /// peer's), `timeout` the close timeout (0: unbounded). The wait may
    /// last `timeout` after the last FPDU; true when it ran out (the
    /// caller makes the close abortive and the Reads complete flushed).
    pub(crate) fn watch_reads(&mut self, now: u64, seen: Option<u64>, timeout: u64) -> bool {
        let t = &mut self.timers;
        watch(
            t,
            Timer::CloseReads,
            &mut self.reads_seen,
            now,
            seen,
            timeout,
        )
    }

    fn clear_reads(&mut self) {
        self.reads_seen = None;
        self.timers.clear(Timer::CloseReads);
    }

    /// The bound on a close left to the lower layer (our side done, the
    /// peer's answer outstanding), over either transport: `progress` is
    /// what shows the peer is still there while the close lingers so
    /// (None: it does not linger), `timeout` the close timeout (0:
    /// unbounded). The close may last `timeout` after the progress last
    /// changed; true when it ran out (the caller resets or aborts the
    /// lower layer).
    pub(crate) fn watch_linger(
        &mut self,
        now: u64,
        progress: Option<(u64, usize)>,
        timeout: u64,
    ) -> bool {
        let t = &mut self.timers;
        watch(
            t,
            Timer::Linger,
            &mut self.linger_seen,
            now,
            progress,
            timeout,
        )
    }

    /// Disarm [`Timer::Linger`].
    #[inline]
    pub(crate) fn clear_linger(&mut self) {
        self.linger_seen = None;
        self.timers.clear(Timer::Linger);
    }

    /// Next event for the application.
    #[inline]
    pub(crate) fn poll_event(&mut self) -> Option<CmEvent> {
        self.events.pop_front()
    }

    /// Events not taken yet.
    #[inline]
    pub(crate) fn events_len(&self) -> usize {
        self.events.len()
    }

    /// The event queue's capacity (what [`trim`](Self::trim) gives back).
    #[cfg(test)]
    pub(crate) fn events_capacity(&self) -> usize {
        self.events.capacity()
    }

    /// Give back the event queue's memory when it is empty.
    pub(crate) fn trim(&mut self) {
        if self.events.is_empty() {
            self.events = VecDeque::new();
        }
    }
}

/// What a close needs to know of the queue pair, whatever carries it
/// (each transport reads it from its own: [`Lifecycle::teardown`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpFacts {
    /// There is a queue pair (the connection reached full operation).
    pub(crate) exists: bool,
    /// The RDMAP stream ended with a Terminate, sent or received (the
    /// queue pair is in error; over SCTP, or the DDP session is over).
    pub(crate) ended: bool,
    /// Everything the queue pair has to send is handed to the lower
    /// layer (over SCTP a session that is over sends nothing more, so it
    /// counts as idle).
    pub(crate) tx_idle: bool,
    /// Our RDMA Reads not answered yet.
    pub(crate) reads_outstanding: bool,
    /// FPDUs (DDP segments) received so far: the peer's progress while a
    /// close waits for those answers.
    pub(crate) fpdus_rx: u64,
    /// The setup exchange failed: what the failure sends (a rejecting
    /// Reply) is queued before anything else, so the close need not wait.
    pub(crate) setup_failed: bool,
}

impl QpFacts {
    /// No queue pair (yet, or any more): nothing to wait for.
    pub(crate) const NONE: QpFacts = QpFacts {
        exists: false,
        ended: false,
        tx_idle: true,
        reads_outstanding: false,
        fpdus_rx: 0,
        setup_failed: false,
    };

    /// A graceful close waits for nothing more of the queue pair's: its
    /// work is handed to the lower layer and our Reads are answered (or
    /// never will be: the stream ended, or the peer closed its direction,
    /// every octet it sent coming before its FIN or SHUTDOWN — RFC 9293
    /// §3.10.7.4, RFC 9260 §9.2), or setup failed.
    fn quiet(&self, peer_closed: bool) -> bool {
        self.setup_failed || self.tx_idle && (peer_closed || !self.reads_outstanding || self.ended)
    }
}

/// The lower layer under one iWARP connection, as a close sees it: TCP
/// (`over_tcp`) or an SCTP association (`over_sctp::conn`). It answers
/// the questions [`Lifecycle::teardown`] asks and carries out its
/// verdicts; the sequencing (when to close, when to reset, the bounds in
/// time) is the endpoint's, the same for both.
pub(crate) trait LowerLayer {
    /// Both directions open, nobody closing (TCP ESTABLISHED, an
    /// association ESTABLISHED): a connection in full operation whose
    /// stream goes on has nothing to sequence.
    fn steady(&self) -> bool;
    /// The peer closed its direction: TCP's FIN arrived (CLOSE-WAIT), the
    /// peer's SHUTDOWN did (SHUTDOWN-RECEIVED, SHUTDOWN-ACK-SENT).
    fn peer_closed(&self) -> bool;
    /// Our direction is still open: a graceful close (FIN, SHUTDOWN) can
    /// be sent and was not.
    fn can_close(&self) -> bool;
    /// Still there to reset: not closed by TCP, not yet aborted or shut
    /// down over SCTP.
    fn can_reset(&self) -> bool;
    /// An abortive close's Terminate is delivered (`qp` as it is now): TCP
    /// has it acknowledged, the SCTP session is over.
    fn terminate_delivered(&self, qp: &QpFacts) -> bool;
    /// Close our direction gracefully: FIN, SHUTDOWN.
    fn close(&mut self);
    /// End an abortive close once its Terminate is delivered: RST over
    /// TCP, SHUTDOWN over SCTP (the association may close gracefully: the
    /// session is over, RFC 5043 §6.2).
    fn end_abort(&mut self);
    /// Reset: RST, ABORT.
    fn reset(&mut self);
    /// The iWARP stream is over on the lower layer: TCP's FIN exchange is
    /// past the point where the stream can carry more (LAST-ACK, CLOSING,
    /// TIME-WAIT, CLOSED; FIN-WAIT-2 once closing), the association is
    /// gone.
    fn over(&self, state: State) -> bool;
    /// While the close is left to the lower layer (our side done, the
    /// peer's answer outstanding), in `state`: what shows the peer is
    /// still there (None: it does not linger).
    fn lingering(&self, state: State, qp: &QpFacts) -> Option<(u64, usize)>;
}

/// What one [`Lifecycle::teardown`] step did that its caller carries on.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Teardown {
    /// The connection entered [`State::Closed`] in this step: the caller
    /// flushes its queue pair.
    pub(crate) closed: bool,
    /// A graceful close waited the close timeout for the answers to our
    /// Reads in vain: the caller makes it abortive (a Terminate, its
    /// Reads flushed) and steps again.
    pub(crate) reads_timed_out: bool,
    /// A close left to the lower layer saw no progress of the peer's for
    /// the close timeout: the lower layer was reset.
    pub(crate) linger_timed_out: bool,
}

impl Lifecycle {
    /// One step of a connection's teardown, the same over either lower
    /// layer: `qp` is what the queue pair says now, `lower` the lower
    /// layer, `close_timeout` the bound on each wait (0: none).
    ///
    /// 1. A Terminate either way ends full operation
    ///    ([`stream_ended`](Self::stream_ended)); the peer's FIN or
    ///    SHUTDOWN begins our close.
    /// 2. A graceful close ([`State::Closing`]) closes the lower layer once
    ///    the queue pair is quiet ([`QpFacts`]); while it waits only for
    ///    our Reads' answers, for at most `close_timeout` after the peer's
    ///    last FPDU ([`watch_reads`](Self::watch_reads)).
    /// 3. An abortive close ([`State::Aborting`]) ends once its Terminate
    ///    is delivered, or resets the lower layer after
    ///    [`crate::ABORT_GRACE_NS`].
    /// 4. The lower layer's end ends the stream ([`State::Closed`]); what
    ///    the lower layer still does after ours is done lasts at most
    ///    `close_timeout` after the peer's last progress
    ///    ([`watch_linger`](Self::watch_linger)), then it is reset.
    #[inline]
    pub(crate) fn teardown<L: LowerLayer>(
        &mut self,
        now: u64,
        qp: &QpFacts,
        lower: &mut L,
        close_timeout: u64,
    ) -> Teardown {
        let mut done = Teardown::default();
        if self.state == State::Operational && !qp.ended && lower.steady() {
            // Every step of a connection in full operation: nothing to
            // sequence.
            return done;
        }
        if qp.ended {
            self.stream_ended();
        }
        let peer_closed = lower.peer_closed();
        if peer_closed && !self.state.is_closing() {
            self.note_cause(DisconnectCause::PeerClosed);
            self.begin_close();
        }
        let mut reads_wait = false;
        match self.state {
            State::Closing => {
                let quiet = qp.quiet(peer_closed);
                let open = lower.can_close();
                if quiet && open {
                    lower.close();
                }
                // What the close still waits for is only the peer's
                // answers to our Reads (our own segments drain under the
                // lower layer's timers): the FPDUs received, to see
                // progress.
                let seen = (!quiet && qp.tx_idle && open).then_some(qp.fpdus_rx);
                reads_wait = seen.is_some();
                if self.watch_reads(now, seen, close_timeout) {
                    done.reads_timed_out = true;
                    return done;
                }
            }
            State::Aborting if lower.can_reset() => {
                if self.timers.due(Timer::Abort, now) {
                    self.timers.clear(Timer::Abort);
                    lower.reset();
                } else if lower.terminate_delivered(qp) {
                    lower.end_abort();
                }
            }
            _ => {}
        }
        if lower.over(self.state) {
            done.closed = self.enter(State::Closed);
        }
        let progress = if reads_wait {
            None
        } else {
            lower.lingering(self.state, qp)
        };
        if self.watch_linger(now, progress, close_timeout) {
            lower.reset();
            done.linger_timed_out = true;
        }
        done
    }
}

/// A wait bounded by time since the peer's last progress: `timer` is
/// armed for `timeout` after `progress` last changed (`seen` keeps what
/// it was when armed); a `progress` of None, or a `timeout` of 0, disarms
/// it. True, disarming it, when it is due.
fn watch<P: Copy + PartialEq>(
    timers: &mut Timers,
    timer: Timer,
    seen: &mut Option<P>,
    now: u64,
    progress: Option<P>,
    timeout: u64,
) -> bool {
    let expired = match (progress, timeout) {
        (Some(p), 1..) => {
            if *seen != Some(p) || timers.get(timer).is_none() {
                *seen = Some(p);
                timers.arm(timer, now, timeout);
            }
            timers.due(timer, now)
        }
        _ => false,
    };
    if expired || progress.is_none() || timeout == 0 {
        *seen = None;
        timers.clear(timer);
    }
    expired
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn request() -> PeerRequest {
        PeerRequest {
            rev: 2,
            crc: true,
            markers: false,
            ird: Some(4),
            ord: Some(4),
            peer_to_peer: false,
            rtr: Default::default(),
            private_data: b"hello".to_vec(),
        }
    }

    fn negotiated() -> Negotiated {
        Negotiated {
            rev: 2,
            crc: true,
            markers_tx: false,
            markers_rx: false,
            ird: 4,
            ord: 4,
            rtr: None,
            peer_private_data: Vec::new(),
        }
    }

    fn events(l: &mut Lifecycle) -> Vec<CmEvent> {
        std::iter::from_fn(|| l.poll_event()).collect()
    }

    #[test]
    fn setup_arms_and_leaves_the_setup_timer_with_an_event_per_step() {
        let mut l = Lifecycle::new(Role::Responder);
        l.opened(4);
        l.setup_begins(10, 5 * MS);
        assert_eq!(l.state(), State::AwaitingSetup);
        assert_eq!(l.timers.get(Timer::Setup), Some(10 + 5 * MS));
        // Only from Opening.
        l.setup_begins(20, 7 * MS);
        assert_eq!(l.timers.get(Timer::Setup), Some(10 + 5 * MS));
        let req = request();
        l.decision_awaited(30, req.clone(), 2 * MS);
        assert_eq!(l.state(), State::AwaitingDecision);
        assert_eq!(
            l.timers.get(Timer::Setup),
            Some(30 + 2 * MS),
            "restarted for the decision"
        );
        l.established(40, negotiated());
        assert_eq!(l.state(), State::Operational);
        assert!(
            l.timers.none_armed(),
            "full operation has no setup deadline"
        );
        assert_eq!(l.setup_time(), Some(36), "from the open to full operation");
        assert_eq!(
            events(&mut l),
            [
                CmEvent::ConnectRequest(req),
                CmEvent::Established(negotiated())
            ]
        );
        // A setup timeout of 0 arms nothing.
        let mut l = Lifecycle::new(Role::Initiator);
        l.setup_begins(10, 0);
        assert!(l.timers.none_armed());
    }

    #[test]
    fn a_failed_setup_reports_it_and_closes() {
        let mut l = Lifecycle::new(Role::Initiator);
        l.setup_begins(0, MS);
        let e = crate::no_request();
        l.setup_failed(e.clone());
        assert_eq!(l.state(), State::Closing);
        assert!(l.timers.none_armed());
        assert_eq!(events(&mut l), [CmEvent::SetupFailed(e)]);
    }

    #[test]
    fn closed_is_final_reported_once_and_takes_the_deadlines_with_it() {
        let mut l = Lifecycle::new(Role::Initiator);
        l.setup_begins(0, MS);
        l.established(40, negotiated());
        l.timers.set(Timer::Hold, 5);
        assert!(l.begin_abort(100, TermCode::RDMAP_LOCAL_CATASTROPHIC, None));
        assert_eq!(l.state(), State::Aborting);
        assert_eq!(l.cause(), Some(DisconnectCause::LocalAbort));
        assert_eq!(
            l.timers.get(Timer::Abort),
            Some(100 + crate::ABORT_GRACE_NS)
        );
        assert!(
            !l.begin_abort(200, TermCode::RDMAP_LOCAL_CATASTROPHIC, None),
            "once"
        );
        assert!(!l.watch_linger(0, Some((1, 1)), MS));
        assert_eq!(l.timers.get(Timer::Linger), Some(MS));
        assert!(l.enter(State::Closed), "this call closed it");
        assert!(!l.enter(State::Closed));
        assert!(!l.enter(State::Closing), "nothing leaves Closed");
        assert_eq!(l.state(), State::Closed);
        for t in [Timer::Setup, Timer::Hold, Timer::CloseReads, Timer::Abort] {
            assert_eq!(l.timers.get(t), None, "{t:?}");
        }
        assert_eq!(
            l.timers.get(Timer::Linger),
            Some(MS),
            "the lower layer's leftovers keep their bound"
        );
        assert!(!l.begin_abort(300, TermCode::RDMAP_LOCAL_CATASTROPHIC, None));
        let ev = events(&mut l);
        assert_eq!(ev.last(), Some(&CmEvent::Disconnected));
        assert_eq!(
            ev.iter().filter(|e| **e == CmEvent::Disconnected).count(),
            1
        );
        // The first cause noted stays.
        l.note_cause(DisconnectCause::PeerClosed);
        assert_eq!(l.cause(), Some(DisconnectCause::LocalAbort));
    }

    #[test]
    fn a_close_waiting_for_reads_is_bounded_from_the_last_fpdu() {
        let mut l = Lifecycle::new(Role::Initiator);
        l.established(40, negotiated());
        l.begin_close();
        // No wait for Reads, or no timeout: nothing armed.
        assert!(!l.watch_reads(0, None, MS));
        assert!(!l.watch_reads(0, Some(3), 0));
        assert_eq!(l.timers.get(Timer::CloseReads), None);
        assert!(!l.watch_reads(10, Some(3), MS));
        assert_eq!(l.timers.get(Timer::CloseReads), Some(10 + MS));
        // An FPDU received: the bound runs from now.
        assert!(!l.watch_reads(500, Some(4), MS));
        assert_eq!(l.timers.get(Timer::CloseReads), Some(500 + MS));
        // No progress: the deadline stays.
        assert!(!l.watch_reads(600, Some(4), MS));
        assert!(
            !l.watch_reads(500 + MS - 1, Some(4), MS),
            "not a nanosecond early"
        );
        assert!(l.watch_reads(500 + MS, Some(4), MS));
        assert_eq!(l.timers.get(Timer::CloseReads), None);
        // The answers came: disarmed.
        assert!(!l.watch_reads(600, Some(5), MS));
        assert!(!l.watch_reads(700, None, MS));
        assert_eq!(l.timers.get(Timer::CloseReads), None);
        // Leaving Closing disarms it too.
        assert!(!l.watch_reads(800, Some(5), MS));
        assert!(l.begin_abort(900, TermCode::RDMAP_LOCAL_CATASTROPHIC, None));
        assert_eq!(l.timers.get(Timer::CloseReads), None);
    }

    #[test]
    fn a_lingering_close_is_bounded_from_the_peers_last_progress() {
        let mut l = Lifecycle::new(Role::Responder);
        l.begin_close();
        assert!(!l.watch_linger(0, Some((0, 100)), MS));
        assert_eq!(l.timers.get(Timer::Linger), Some(MS));
        // The peer acknowledged some: the bound runs from now.
        assert!(!l.watch_linger(MS - 1, Some((0, 40)), MS));
        assert!(!l.watch_linger(2 * MS - 2, Some((0, 40)), MS));
        assert!(l.watch_linger(2 * MS - 1, Some((0, 40)), MS));
        assert_eq!(l.timers.get(Timer::Linger), None);
        // Not lingering (or no timeout): disarmed.
        assert!(!l.watch_linger(3 * MS, Some((0, 40)), MS));
        assert!(!l.watch_linger(3 * MS, None, MS));
        assert_eq!(l.timers.get(Timer::Linger), None);
        assert!(!l.watch_linger(3 * MS, Some((0, 40)), 0));
        assert_eq!(l.timers.get(Timer::Linger), None);
    }

    #[test]
    fn closing_and_setting_up_split_the_states() {
        use State::*;
        for s in [
            Opening,
            AwaitingSetup,
            AwaitingDecision,
            Operational,
            Closing,
            Aborting,
            Closed,
        ] {
            assert!(
                !(s.is_closing() && s.is_setting_up()),
                "{s:?} is both setting up and closing"
            );
            assert_eq!(
                s == Operational,
                !s.is_closing() && !s.is_setting_up(),
                "{s:?}"
            );
        }
    }

    /// A lower layer for [`Lifecycle::teardown`] alone: its facts set by
    /// the test, its verdicts counted.
    #[derive(Debug, Default)]
    struct Fake {
        steady: bool,
        peer_closed: bool,
        closed_ours: bool,
        reset: bool,
        acked: bool,
        over: bool,
        progress: Option<(u64, usize)>,
        closes: u32,
        end_aborts: u32,
        resets: u32,
    }

    impl LowerLayer for Fake {
        fn steady(&self) -> bool {
            self.steady
        }
        fn peer_closed(&self) -> bool {
            self.peer_closed
        }
        fn can_close(&self) -> bool {
            !self.closed_ours && !self.reset
        }
        fn can_reset(&self) -> bool {
            !self.reset
        }
        fn terminate_delivered(&self, qp: &QpFacts) -> bool {
            qp.tx_idle && self.acked
        }
        fn close(&mut self) {
            self.closes += 1;
            self.closed_ours = true;
        }
        fn end_abort(&mut self) {
            self.end_aborts += 1;
            self.reset = true;
        }
        fn reset(&mut self) {
            self.resets += 1;
            self.reset = true;
        }
        fn over(&self, _: State) -> bool {
            self.over
        }
        fn lingering(&self, _: State, _: &QpFacts) -> Option<(u64, usize)> {
            self.progress
        }
    }

    fn operational() -> Lifecycle {
        let mut l = Lifecycle::new(Role::Initiator);
        l.setup_begins(0, 0);
        l.established(0, negotiated());
        let _ = events(&mut l);
        l
    }

    fn busy_qp() -> QpFacts {
        QpFacts {
            exists: true,
            tx_idle: false,
            ..QpFacts::NONE
        }
    }

    #[test]
    fn full_operation_goes_on_until_a_terminate_or_the_peers_close() {
        let mut l = operational();
        let mut f = Fake {
            steady: true,
            ..Fake::default()
        };
        let qp = QpFacts {
            exists: true,
            ..QpFacts::NONE
        };
        assert_eq!(l.teardown(1, &qp, &mut f, MS), Teardown::default());
        assert_eq!(l.state(), State::Operational);
        // A Terminate either way: a graceful close, the lower layer
        // closed once the Terminate is handed to it.
        let ended = QpFacts {
            ended: true,
            ..busy_qp()
        };
        l.teardown(2, &ended, &mut f, MS);
        assert_eq!((l.state(), f.closes), (State::Closing, 0));
        l.teardown(
            3,
            &QpFacts {
                tx_idle: true,
                ..ended
            },
            &mut f,
            MS,
        );
        assert_eq!(f.closes, 1);
        assert_eq!(l.cause(), None, "the queue pair knows the Terminate");
        // The peer's FIN or SHUTDOWN: our close, its cause the peer's.
        let mut l = operational();
        let mut f = Fake {
            peer_closed: true,
            ..Fake::default()
        };
        l.teardown(4, &qp, &mut f, MS);
        assert_eq!((l.state(), f.closes), (State::Closing, 1));
        assert_eq!(l.cause(), Some(DisconnectCause::PeerClosed));
    }

    #[test]
    fn a_graceful_close_waits_for_its_work_and_its_reads_answers_within_the_timeout() {
        let mut l = operational();
        l.begin_close();
        let mut f = Fake::default();
        // Our own work not handed over yet: nothing to watch either.
        l.teardown(0, &busy_qp(), &mut f, MS);
        assert_eq!(f.closes, 0);
        assert_eq!(l.timers.get(Timer::CloseReads), None);
        // Handed over, a Read unanswered: the close waits, bounded from
        // the peer's last FPDU.
        let reads = QpFacts {
            tx_idle: true,
            reads_outstanding: true,
            fpdus_rx: 3,
            ..busy_qp()
        };
        assert_eq!(l.teardown(10, &reads, &mut f, MS), Teardown::default());
        assert_eq!(f.closes, 0);
        assert_eq!(l.timers.get(Timer::CloseReads), Some(10 + MS));
        let more = QpFacts {
            fpdus_rx: 4,
            ..reads
        };
        l.teardown(20, &more, &mut f, MS);
        assert_eq!(l.timers.get(Timer::CloseReads), Some(20 + MS));
        assert!(!l.teardown(20 + MS - 1, &more, &mut f, MS).reads_timed_out);
        let done = l.teardown(20 + MS, &more, &mut f, MS);
        assert!(done.reads_timed_out && !done.closed);
        assert_eq!((f.closes, f.resets), (0, 0), "the caller aborts");
        // The peer closed its direction: no answer can come; close now.
        let mut l = operational();
        l.begin_close();
        let mut f = Fake::default();
        l.teardown(0, &reads, &mut f, MS);
        f.peer_closed = true;
        l.teardown(1, &reads, &mut f, MS);
        assert_eq!(f.closes, 1);
        assert_eq!(l.timers.get(Timer::CloseReads), None);
        // A setup failure closes at once (its rejection is queued first).
        let mut l = Lifecycle::new(Role::Responder);
        l.setup_begins(0, 0);
        l.begin_close();
        let mut f = Fake::default();
        let failed = QpFacts {
            setup_failed: true,
            ..busy_qp()
        };
        l.teardown(0, &failed, &mut f, MS);
        assert_eq!(f.closes, 1);
    }

    #[test]
    fn an_abort_ends_once_its_terminate_is_delivered_or_after_the_grace() {
        let mut l = operational();
        assert!(l.begin_abort(100, TermCode::RDMAP_LOCAL_CATASTROPHIC, None));
        let mut f = Fake::default();
        l.teardown(200, &busy_qp(), &mut f, MS);
        assert_eq!((f.end_aborts, f.resets), (0, 0));
        let idle = QpFacts {
            tx_idle: true,
            ..busy_qp()
        };
        f.acked = true;
        l.teardown(300, &idle, &mut f, MS);
        assert_eq!((f.end_aborts, f.resets), (1, 0));
        // Never delivered: reset at the grace's end, not a nanosecond
        // before, and once.
        let mut l = operational();
        l.begin_abort(100, TermCode::RDMAP_LOCAL_CATASTROPHIC, None);
        let mut f = Fake::default();
        l.teardown(100 + crate::ABORT_GRACE_NS - 1, &busy_qp(), &mut f, MS);
        assert_eq!(f.resets, 0);
        l.teardown(100 + crate::ABORT_GRACE_NS, &busy_qp(), &mut f, MS);
        l.teardown(200 + crate::ABORT_GRACE_NS, &busy_qp(), &mut f, MS);
        assert_eq!((f.end_aborts, f.resets), (0, 1));
    }

    /// A connection closing over a lower layer that is over and lingers
    /// (FIN-WAIT-2, say).
    fn closing_over_a_lingering_layer() -> (Lifecycle, Fake) {
        let mut l = operational();
        l.begin_close();
        let f = Fake {
            over: true,
            progress: Some((0, 0)),
            ..Fake::default()
        };
        (l, f)
    }

    #[test]
    fn the_lower_layers_end_closes_once_and_its_linger_is_bounded() {
        let (mut l, mut f) = closing_over_a_lingering_layer();
        let done = l.teardown(0, &QpFacts::NONE, &mut f, MS);
        assert!(done.closed);
        assert_eq!(l.state(), State::Closed);
        assert_eq!(events(&mut l), vec![CmEvent::Disconnected]);
        assert!(!l.teardown(1, &QpFacts::NONE, &mut f, MS).closed, "once");
        // Lingering: reset once the peer made no progress for the timeout.
        assert!(
            !l.teardown(MS - 1, &QpFacts::NONE, &mut f, MS)
                .linger_timed_out
        );
        let done = l.teardown(MS, &QpFacts::NONE, &mut f, MS);
        assert!(done.linger_timed_out);
        assert_eq!(f.resets, 1);
        // No timeout: unbounded.
        let (mut l, mut f) = closing_over_a_lingering_layer();
        l.teardown(0, &QpFacts::NONE, &mut f, 0);
        assert!(
            !l.teardown(u64::MAX / 2, &QpFacts::NONE, &mut f, 0)
                .linger_timed_out
        );
    }
}
