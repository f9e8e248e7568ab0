#![forbid(unsafe_code)]
//! The DDP adaptation of SCTP (RFC 5043) over `sctp-lite`.
//!
//! * [`wire`]: DDP Segment Chunks (PPID 16) and DDP Stream Session Control
//!   messages (PPID 17), §5.2.
//! * [`DdpAssociation`]: an SCTP association that carries only DDP (§5.1),
//!   with one DDP Stream Session state machine per DDP stream (§6), each
//!   DDP stream being the pair of SCTP streams with the same number (§8).
//! * [`config`] turns an `sctp-lite` configuration into one that offers and
//!   requires the DDP Adaptation Layer Indication (§5.1, §7.1, §11.1), and
//!   [`mulpdu`] gives the largest DDP Segment for a path MTU (§9).
//!
//! Sans-IO like `sctp-lite`: the caller moves packets and time.
//!
//! # Simplifications (documented, not hidden)
//!
//! * §6.6 "A DDP Stream Identifier MUST NOT be reused ... while any Data
//!   Chunk from a prior session might be outstanding": we refuse a new
//!   Initiate on a stream until every chunk *we* sent in the prior session
//!   is acknowledged by SCTP; chunks the peer sent that are still in the
//!   network are not tracked.
//! * DDP Segments are handed up as received (unordered, §10), each with
//!   its DDP-SSN; placing them is DDP's job, not this crate's.

pub mod wire;

use std::collections::{BTreeSet, VecDeque};

use sctp_lite::assoc::{self, Association, CloseReason, Listener};
pub use wire::{
    ControlMessage, FunctionCode, SegmentChunk, ADAPTATION_DDP, MAX_PRIVATE_DATA, MIN_MULPDU,
    PPID_DDP_SEGMENT, PPID_SESSION_CONTROL,
};

/// Octets kept free in each packet so a SACK can be bundled with a full
/// DDP Segment (§9: "SHOULD set the maximum DDP Segment size below the
/// theoretical maximum in order to allow bundling of Control Chunks").
pub const BUNDLING_RESERVE: usize = 16;

/// Most DDP-SSNs a receiver accepts ahead of the lowest not yet received
/// (§10: DDP-SSN validity check before allocating anything; well under
/// the 32768 of §10).
pub const DDP_SSN_WINDOW: u16 = 4096;

/// The largest DDP Segment for an SCTP packet size (path MTU less the IP
/// header), RFC 5043 §9: what fits one DATA chunk with the DDP-SSN, less
/// [`BUNDLING_RESERVE`], or 516 octets, whichever is larger.
pub fn mulpdu(max_packet: usize) -> usize {
    let theoretical = max_packet.saturating_sub(12 + 16 + wire::SSN_LEN);
    theoretical.saturating_sub(BUNDLING_RESERVE).max(MIN_MULPDU)
}

/// An `sctp-lite` configuration for DDP: offers the DDP Adaptation Layer
/// Indication (RFC 5043 §5.1: it MUST appear in the INIT or INIT-ACK;
/// §11.1: a DDP/SCTP adaptation layer MUST include it) and refuses peers
/// without it (§7.1 SHOULD terminate; §11.1 MUST NOT perform DDP
/// procedures). One `streams` value serves inbound and outbound, as §8
/// requires ("MUST initialize all of its SCTP associations with the same
/// number of inbound and outbound streams").
pub fn config(mut c: assoc::Config) -> assoc::Config {
    c.adaptation = Some(ADAPTATION_DDP);
    c.require_adaptation = Some(ADAPTATION_DDP);
    c
}

/// A listener for DDP associations.
pub fn listener(c: assoc::Config) -> Result<Listener, &'static str> {
    Listener::new(config(c))
}

/// State of one DDP Stream Session (RFC 5043 §6.2 - §6.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionState {
    /// No session on this DDP stream.
    Idle,
    /// Active side: Initiate sent, waiting for Accept or Reject.
    InitiateSent,
    /// Passive side: Initiate received, waiting for the ULP's decision.
    InitiateReceived,
    /// Accept sent or received: DDP Segments flow.
    Established,
    /// Terminate received; the session ends once every DDP-SSN before it
    /// has arrived.
    Terminating,
    /// We sent (or hold) Terminate: what the peer sent before seeing it
    /// is discarded quietly, and a new Initiate may start a session.
    Terminated,
}

/// Why a session ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEnd {
    /// The peer rejected our Initiate (§6.3).
    Rejected,
    /// The peer sent Terminate (§6.2, §6.4).
    PeerTerminated,
    /// We sent Terminate at the ULP's request.
    LocalTerminated,
    /// The peer broke the legal sequences of §6; we sent Terminate
    /// (§6.1: "the DDP Stream Session MUST be terminated").
    IllegalSequence(&'static str),
    /// Too many Initiates pending a ULP decision; we answered Terminate
    /// (§5.2.3, §6.4).
    TooManyPending,
}

/// Something for the ULP / DDP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DdpEvent {
    /// The association is up, with the DDP adaptation on both sides.
    Connected,
    /// The peer asks for a session on `stream` (§6.2); answer with
    /// [`DdpAssociation::accept`] or [`DdpAssociation::reject`].
    SessionRequested {
        /// DDP stream.
        stream: u16,
        /// The Initiate's Private Data (§5.2.3: available to the ULP).
        private_data: Vec<u8>,
    },
    /// Our Initiate was accepted.
    SessionAccepted {
        /// DDP stream.
        stream: u16,
        /// The Accept's Private Data.
        private_data: Vec<u8>,
    },
    /// A session ended; Private Data of a Reject where there was one.
    SessionEnded {
        /// DDP stream.
        stream: u16,
        /// Why.
        why: SessionEnd,
        /// Reject's Private Data, else empty.
        private_data: Vec<u8>,
    },
    /// A DDP Segment arrived.
    Segment {
        /// DDP stream.
        stream: u16,
        /// Its DDP-SSN: the order the peer's DDP submitted segments in.
        ddp_ssn: u16,
        /// The DDP Segment.
        segment: Vec<u8>,
    },
    /// The SCTP association ended (§11.3: every DDP stream with it).
    Closed(CloseReason),
}

/// Why a DDP operation was refused locally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DdpError {
    /// No such DDP stream (at or above the negotiated stream count).
    NoSuchStream(u16),
    /// The session is not in a state that allows this (§6).
    WrongState {
        /// Session state.
        state: SessionState,
        /// Operation attempted.
        op: &'static str,
    },
    /// Private Data above 512 octets (§5.2.3).
    PrivateDataTooLong(usize),
    /// A DDP Segment above the MULPDU (§9: "MUST reject DDP Segments that
    /// are larger than the maximum size specified").
    SegmentTooLarge {
        /// Segment length.
        len: usize,
        /// The MULPDU.
        max: usize,
    },
    /// 32767 DDP Segments unacknowledged on this stream (§10: the sender
    /// must refrain from sending more).
    TooManyInFlight,
    /// The stream's prior session may still have chunks outstanding (§6.6).
    StreamBusy,
    /// SCTP refused the message.
    Sctp(assoc::SendError),
}

#[derive(Debug)]
struct Session {
    state: SessionState,
    /// Next DDP-SSN to send (§6.1: reset to zero per session).
    tx_ssn: u16,
    /// TSNs of our chunks in this session, oldest first (bounded by §10).
    unacked: VecDeque<u32>,
    /// Last TSN of a control message we sent, and a control message held
    /// until it is acknowledged (§6.6).
    last_control_tsn: Option<u32>,
    held_terminate: bool,
    /// Lowest DDP-SSN not yet received, and those received above it.
    rx_next: u16,
    rx_above: BTreeSet<u16>,
    /// DDP-SSN of a received Terminate.
    terminate_at: Option<u16>,
}

impl Session {
    fn new() -> Self {
        Session {
            state: SessionState::Idle,
            tx_ssn: 0,
            unacked: VecDeque::new(),
            last_control_tsn: None,
            held_terminate: false,
            rx_next: 0,
            rx_above: BTreeSet::new(),
            terminate_at: None,
        }
    }
    /// §10: a DDP-SSN within the window above the lowest not yet
    /// received, and not received already.
    fn rx_ssn_valid(&self, ssn: u16) -> bool {
        ssn.wrapping_sub(self.rx_next) < DDP_SSN_WINDOW && !self.rx_above.contains(&ssn)
    }
    /// Records a valid DDP-SSN as received.
    fn rx_ssn_record(&mut self, ssn: u16) {
        if ssn == self.rx_next {
            self.rx_next = self.rx_next.wrapping_add(1);
            while self.rx_above.remove(&self.rx_next) {
                self.rx_next = self.rx_next.wrapping_add(1);
            }
        } else {
            self.rx_above.insert(ssn);
        }
    }
    fn reset_rx(&mut self) {
        self.rx_next = 0;
        self.rx_above.clear();
        self.terminate_at = None;
    }
}

/// An SCTP association carrying DDP (RFC 5043).
#[derive(Debug)]
pub struct DdpAssociation {
    sctp: Association,
    sessions: Vec<Session>,
    events: VecDeque<DdpEvent>,
    mulpdu: usize,
    pending_requests: usize,
    max_pending_requests: usize,
    connected: bool,
    early_terminates: u64,
    /// Some session may hold a Terminate (`Session::held_terminate`):
    /// raised with each, lowered by the sweep that finds none, so that the
    /// sweep before every packet sent looks at no session otherwise.
    held_any: bool,
    /// Octets of DDP Segments in `events`, and the most we pull from SCTP
    /// before the ULP takes some (beyond it, SCTP's receive window closes).
    held: usize,
    max_held: usize,
}

/// Default for [`DdpAssociation::set_max_held`]: 1 MiB.
pub const DEFAULT_MAX_HELD: usize = 1 << 20;

/// Most Initiates pending a ULP decision by default (§6.4: "There MUST be
/// a finite limit").
pub const DEFAULT_MAX_PENDING: usize = 16;

impl DdpAssociation {
    /// Opens an association that offers and requires DDP.
    pub fn connect(
        c: assoc::Config,
        local_port: u16,
        peer_port: u16,
        now: u64,
        nonce: u64,
    ) -> Result<Self, &'static str> {
        let mp = c.max_packet;
        Ok(Self::wrap(
            Association::connect(config(c), local_port, peer_port, now, nonce)?,
            mp,
        ))
    }

    /// Wraps an association from a [`listener`]'s `Accept`. `max_packet`
    /// is the one its configuration had.
    pub fn wrap(sctp: Association, max_packet: usize) -> Self {
        DdpAssociation {
            sctp,
            sessions: Vec::new(),
            events: VecDeque::new(),
            mulpdu: mulpdu(max_packet),
            pending_requests: 0,
            max_pending_requests: DEFAULT_MAX_PENDING,
            connected: false,
            early_terminates: 0,
            held_any: false,
            held: 0,
            max_held: DEFAULT_MAX_HELD,
        }
    }

    /// Sets the limit on Initiates pending a ULP decision (§6.4).
    pub fn set_max_pending_requests(&mut self, n: usize) {
        self.max_pending_requests = n;
    }

    /// How many received Terminates arrived before some DDP Segment with
    /// a lower DDP-SSN (and so waited for it, §6.1 normative order).
    pub fn early_terminates(&self) -> u64 {
        self.early_terminates
    }

    /// The SCTP association underneath.
    pub fn sctp(&self) -> &Association {
        &self.sctp
    }

    /// The largest DDP Segment [`DdpAssociation::send_segment`] takes (§9).
    pub fn mulpdu(&self) -> usize {
        self.mulpdu
    }

    /// Number of DDP streams: the streams usable both ways (§8).
    pub fn ddp_streams(&self) -> u16 {
        let (o, i) = self.sctp.streams();
        o.min(i)
    }

    /// State of a DDP stream's session.
    pub fn session_state(&self, stream: u16) -> Option<SessionState> {
        self.sessions.get(usize::from(stream)).map(|s| s.state)
    }

    /// Hands a received SCTP packet to the association.
    pub fn handle_packet(&mut self, now: u64, bytes: &[u8]) {
        self.sctp.handle_packet(now, bytes);
        self.drain(now);
    }

    /// [`handle_packet`](Self::handle_packet), offering `place` each DDP
    /// Segment that can be placed straight from `bytes`: `place(stream,
    /// ddp_ssn, segment)` returns true when it took the segment (no
    /// [`DdpEvent::Segment`] is made for it), false to have it queued as
    /// an event as usual.
    ///
    /// Offered only on the common path, where the event would have been
    /// the next thing the ULP saw anyway: a whole DATA chunk that SCTP can
    /// deliver now ([`Association::handle_packet_with`]), unordered
    /// (§10), PPID 16 (§5.1), a well-formed DDP Segment Chunk (§5.2.2) on
    /// an Established session (§6.2, §6.6), whose DDP-SSN passes the
    /// validity check (§10), with no event waiting for the ULP and the
    /// hold below its limit. Everything else — control messages, ordered
    /// chunks, segments outside a session, invalid DDP-SSNs — takes the
    /// usual way, where each is checked and answered as before.
    pub fn handle_packet_with(
        &mut self,
        now: u64,
        bytes: &[u8],
        place: &mut dyn FnMut(u16, u16, &[u8]) -> bool,
    ) {
        let DdpAssociation {
            sctp,
            sessions,
            events,
            held,
            max_held,
            ..
        } = self;
        sctp.handle_packet_with(now, bytes, &mut |m| {
            if !events.is_empty()
                || *held >= *max_held
                // §10: every chunk unordered; §5.1: PPID 16 for segments.
                || !m.unordered
                || m.ppid != PPID_DDP_SEGMENT
            {
                return false;
            }
            let Some(s) = sessions.get_mut(usize::from(m.stream)) else {
                return false;
            };
            if s.state != SessionState::Established {
                return false;
            }
            let Ok(sc) = SegmentChunk::parse(m.data) else {
                return false;
            };
            // §10: the DDP-SSN validity check before anything is placed.
            if !s.rx_ssn_valid(sc.ddp_ssn) || !place(m.stream, sc.ddp_ssn, sc.segment) {
                return false;
            }
            s.rx_ssn_record(sc.ddp_ssn);
            true
        });
        self.drain(now);
    }
    /// Next packet to send.
    #[inline]
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit_with(now, buf, &mut |_, _| false)
    }
    /// [`poll_transmit`](Self::poll_transmit) with the fill that writes
    /// the segments given by [`send_segment_ext`](Self::send_segment_ext)
    /// ([`Association::poll_transmit_with`]).
    #[inline]
    pub fn poll_transmit_with<F: FnMut(u64, &mut [u8]) -> bool>(
        &mut self,
        now: u64,
        buf: &mut [u8],
        fill: &mut F,
    ) -> Option<usize> {
        if self.held_any {
            self.flush_held(now);
        }
        self.sctp.poll_transmit_with(now, buf, fill)
    }
    /// A segment given by [`send_segment_ext`](Self::send_segment_ext)
    /// could not be written: the association must end.
    pub fn ext_failed(&self) -> bool {
        self.sctp.ext_failed()
    }
    /// True when [`poll_transmit`](Self::poll_transmit) now would give no
    /// packet ([`Association::idle`]): nothing held back to send either.
    #[inline]
    pub fn transmit_idle(&mut self) -> bool {
        !self.held_any && self.sctp.idle()
    }
    /// Earliest deadline.
    pub fn poll_timeout(&self) -> Option<u64> {
        self.sctp.poll_timeout()
    }
    /// Handles expired timers.
    pub fn handle_timeout(&mut self, now: u64) {
        self.sctp.handle_timeout(now);
        self.drain(now);
    }
    /// Whether [`poll_event`](Self::poll_event) may have an event to
    /// give: one waiting here, or one SCTP has not handed up yet.
    #[inline]
    pub fn has_events(&self) -> bool {
        !self.events.is_empty() || self.sctp.has_events()
    }
    /// Next event.
    pub fn poll_event(&mut self) -> Option<DdpEvent> {
        self.drain(0);
        let e = self.events.pop_front();
        if let Some(DdpEvent::Segment { segment, .. }) = &e {
            self.held = self.held.saturating_sub(segment.len());
        }
        e
    }

    /// Octets of received DDP Segments waiting in events for the ULP.
    pub fn held(&self) -> usize {
        self.held
    }

    /// Sets how many octets of received segments may wait for the ULP
    /// before SCTP is left to hold the rest (and close its window).
    pub fn set_max_held(&mut self, n: usize) {
        self.max_held = n;
    }
    /// Graceful SCTP shutdown (§11.3: association-level termination is
    /// SCTP's; no per-stream Terminate is sent for it).
    pub fn shutdown(&mut self, now: u64) {
        self.sctp.shutdown(now);
    }
    /// SCTP ABORT.
    pub fn abort(&mut self) {
        self.sctp.abort();
        self.drain(0);
    }

    /// SCTP ABORT with error cause `code` (RFC 9260 §3.3.10).
    pub fn abort_with_cause(&mut self, code: u16) {
        self.sctp.abort_with_cause(code);
        self.drain(0);
    }

    fn session(&mut self, stream: u16) -> Result<&mut Session, DdpError> {
        let n = self.ddp_streams();
        if stream >= n || !self.connected {
            return Err(DdpError::NoSuchStream(stream));
        }
        if self.sessions.len() < usize::from(n) {
            self.sessions.resize_with(usize::from(n), Session::new);
        }
        Ok(&mut self.sessions[usize::from(stream)])
    }

    fn prune_acked(&mut self, stream: u16) {
        let Some(s) = self.sessions.get_mut(usize::from(stream)) else {
            return;
        };
        while let Some(&t) = s.unacked.front() {
            if !self.sctp.is_acked(t) {
                break;
            }
            s.unacked.pop_front();
        }
    }

    /// Sends one DATA chunk, always unordered (§10: "MUST use the
    /// Unordered option on all Data Chunks").
    fn send_raw(&mut self, stream: u16, ppid: u32, data: &[u8]) -> Result<u32, DdpError> {
        let tsn = self
            .sctp
            .send(stream, ppid, true, data)
            .map_err(DdpError::Sctp)?;
        self.sent_raw(stream, tsn);
        Ok(tsn)
    }

    /// Bookkeeping of a DATA chunk sent on `stream` with `tsn`.
    fn sent_raw(&mut self, stream: u16, tsn: u32) {
        if let Some(s) = self.sessions.get_mut(usize::from(stream)) {
            s.unacked.push_back(tsn);
            s.tx_ssn = s.tx_ssn.wrapping_add(1);
        }
    }

    fn send_control(
        &mut self,
        stream: u16,
        function: FunctionCode,
        pd: &[u8],
    ) -> Result<(), DdpError> {
        if pd.len() > MAX_PRIVATE_DATA {
            return Err(DdpError::PrivateDataTooLong(pd.len()));
        }
        let ssn = self.session(stream)?.tx_ssn;
        let m = ControlMessage {
            ddp_ssn: ssn,
            function,
            private_data: pd,
        };
        let v = m
            .to_vec()
            .map_err(|_| DdpError::PrivateDataTooLong(pd.len()))?;
        let tsn = self.send_raw(stream, PPID_SESSION_CONTROL, &v)?;
        if let Some(s) = self.sessions.get_mut(usize::from(stream)) {
            s.last_control_tsn = Some(tsn);
        }
        Ok(())
    }

    /// Active side: sends DDP Stream Session Initiate (§6.2).
    pub fn initiate(&mut self, stream: u16, private_data: &[u8]) -> Result<(), DdpError> {
        self.prune_acked(stream);
        let s = self.session(stream)?;
        if !matches!(s.state, SessionState::Idle | SessionState::Terminated) {
            return Err(DdpError::WrongState {
                state: s.state,
                op: "initiate",
            });
        }
        // §6.6: no reuse while a prior session's chunk may be outstanding
        // (a Terminate still held counts).
        if !s.unacked.is_empty() || s.held_terminate {
            return Err(DdpError::StreamBusy);
        }
        if private_data.len() > MAX_PRIVATE_DATA {
            return Err(DdpError::PrivateDataTooLong(private_data.len()));
        }
        // §6.1: DDP-SSN reset to zero at the beginning of each session.
        s.tx_ssn = 0;
        s.reset_rx();
        s.held_terminate = false;
        self.send_control(stream, FunctionCode::Initiate, private_data)?;
        if let Some(s) = self.sessions.get_mut(usize::from(stream)) {
            s.state = SessionState::InitiateSent;
        }
        Ok(())
    }

    /// Passive side: accepts a requested session (§6.2).
    pub fn accept(&mut self, stream: u16, private_data: &[u8]) -> Result<(), DdpError> {
        let s = self.session(stream)?;
        if s.state != SessionState::InitiateReceived {
            return Err(DdpError::WrongState {
                state: s.state,
                op: "accept",
            });
        }
        self.send_control(stream, FunctionCode::Accept, private_data)?;
        self.pending_requests = self.pending_requests.saturating_sub(1);
        if let Some(s) = self.sessions.get_mut(usize::from(stream)) {
            s.state = SessionState::Established;
        }
        Ok(())
    }

    /// Passive side: rejects a requested session, at the ULP's direction
    /// only (§6.3: "MUST NOT be sent unless the rejection is at the
    /// direction of the ULP" - this is the only place one is sent).
    pub fn reject(&mut self, stream: u16, private_data: &[u8]) -> Result<(), DdpError> {
        let s = self.session(stream)?;
        if s.state != SessionState::InitiateReceived {
            return Err(DdpError::WrongState {
                state: s.state,
                op: "reject",
            });
        }
        self.send_control(stream, FunctionCode::Reject, private_data)?;
        self.pending_requests = self.pending_requests.saturating_sub(1);
        if let Some(s) = self.sessions.get_mut(usize::from(stream)) {
            s.state = SessionState::Idle;
        }
        Ok(())
    }

    /// Ends an established session with DDP Stream Session Terminate
    /// (§6.2). Held, if need be, until our previous control message is
    /// acknowledged (§6.6: a control message MUST NOT be sent if it may be
    /// received before a prior one of the same session).
    pub fn terminate(&mut self, now: u64, stream: u16) -> Result<(), DdpError> {
        let s = self.session(stream)?;
        if !matches!(
            s.state,
            SessionState::Established | SessionState::InitiateSent | SessionState::Terminating
        ) {
            return Err(DdpError::WrongState {
                state: s.state,
                op: "terminate",
            });
        }
        s.held_terminate = true;
        s.state = SessionState::Terminated;
        self.held_any = true;
        self.flush_held(now);
        self.events.push_back(DdpEvent::SessionEnded {
            stream,
            why: SessionEnd::LocalTerminated,
            private_data: Vec::new(),
        });
        Ok(())
    }

    fn flush_held(&mut self, _now: u64) {
        if !self.held_any {
            return;
        }
        let mut still = false;
        for i in 0..self.sessions.len() {
            let s = &self.sessions[i];
            if !s.held_terminate {
                continue;
            }
            if s.last_control_tsn.is_some_and(|t| !self.sctp.is_acked(t)) {
                still = true;
                continue;
            }
            let stream = i as u16;
            if self
                .send_control(stream, FunctionCode::Terminate, &[])
                .is_ok()
            {
                self.sessions[i].held_terminate = false;
            } else {
                still = true;
            }
        }
        self.held_any = still;
    }

    /// Sends a DDP Segment on an established session (§5.2.2).
    pub fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<u16, DdpError> {
        self.check_segment(stream, segment.len())?;
        let ssn = self.sessions[usize::from(stream)].tx_ssn;
        let mut v = vec![0u8; wire::SSN_LEN + segment.len()];
        SegmentChunk {
            ddp_ssn: ssn,
            segment,
        }
        .emit(&mut v)
        .map_err(|_| DdpError::SegmentTooLarge {
            len: segment.len(),
            max: self.mulpdu,
        })?;
        self.send_raw(stream, PPID_DDP_SEGMENT, &v)?;
        Ok(ssn)
    }

    /// [`send_segment`](Self::send_segment) of a DDP Segment Chunk built
    /// by the caller: `chunk` is two octets of room for the DDP-SSN, then
    /// the DDP Segment (§5.2.2). The DDP-SSN is written here and the
    /// vector becomes the DATA chunk's payload without a copy. On refusal
    /// the vector comes back with the reason.
    pub fn send_segment_chunk(
        &mut self,
        stream: u16,
        mut chunk: Vec<u8>,
    ) -> Result<u16, (DdpError, Vec<u8>)> {
        let Some(len) = chunk.len().checked_sub(wire::SSN_LEN) else {
            return Err((DdpError::Sctp(assoc::SendError::Empty), chunk));
        };
        if let Err(e) = self.check_segment(stream, len) {
            return Err((e, chunk));
        }
        let ssn = self.sessions[usize::from(stream)].tx_ssn;
        chunk[..wire::SSN_LEN].copy_from_slice(&ssn.to_be_bytes());
        // §10: every DATA chunk unordered.
        let tsn = self
            .sctp
            .send_owned(stream, PPID_DDP_SEGMENT, true, chunk)
            .map_err(|(e, c)| (DdpError::Sctp(e), c))?;
        self.sent_raw(stream, tsn);
        Ok(ssn)
    }

    /// [`send_segment`](Self::send_segment) of a DDP Segment of `len`
    /// octets that the caller writes whenever its DATA chunk is sent
    /// (`fill(key, dst)` of [`poll_transmit_with`](Self::poll_transmit_with),
    /// first transmission and retransmissions alike), so that it is
    /// copied once, from where it lies into the packet. The DDP-SSN is
    /// the chunk's own prefix (§5.2.2). Returns the DDP-SSN and the
    /// chunk's TSN: the caller keeps the segment's source until SCTP has
    /// it acknowledged ([`Association::is_acked`]).
    pub fn send_segment_ext(
        &mut self,
        stream: u16,
        key: u64,
        len: usize,
    ) -> Result<(u16, u32), DdpError> {
        self.check_segment(stream, len)?;
        let ssn = self.sessions[usize::from(stream)].tx_ssn;
        // §10: every DATA chunk unordered.
        let tsn = self
            .sctp
            .send_ext(stream, PPID_DDP_SEGMENT, true, &ssn.to_be_bytes(), key, len)
            .map_err(DdpError::Sctp)?;
        self.sent_raw(stream, tsn);
        Ok((ssn, tsn))
    }

    /// An empty vector to build the next Segment Chunk in, reused from one
    /// SCTP has acknowledged ([`Association::take_spare`]).
    pub fn take_spare(&mut self) -> Option<Vec<u8>> {
        self.sctp.take_spare()
    }

    /// What [`send_segment`](Self::send_segment) checks of a segment of
    /// `len` octets on `stream`.
    fn check_segment(&mut self, stream: u16, len: usize) -> Result<(), DdpError> {
        // §9: "MUST reject DDP Segments that are larger than the maximum size".
        if len > self.mulpdu {
            return Err(DdpError::SegmentTooLarge {
                len,
                max: self.mulpdu,
            });
        }
        self.prune_acked(stream);
        let s = self.session(stream)?;
        // §6.6: the active side sends no segment before its Initiate can
        // have arrived: we wait for the Accept (Established).
        if s.state != SessionState::Established {
            return Err(DdpError::WrongState {
                state: s.state,
                op: "send_segment",
            });
        }
        // §10: at most 32767 chunks unacknowledged per stream.
        if s.unacked.len() >= 32_767 {
            return Err(DdpError::TooManyInFlight);
        }
        Ok(())
    }

    fn drain(&mut self, now: u64) {
        // Bounded: a ULP that does not take its events stops the flow here,
        // and SCTP's receive window does the rest.
        while self.held < self.max_held {
            let Some(e) = self.sctp.poll_event() else {
                break;
            };
            match e {
                assoc::Event::Connected => {
                    // sctp-lite refuses peers without the indication
                    // (require_adaptation); checked again here (§11.1).
                    if self.sctp.peer_adaptation() == Some(ADAPTATION_DDP) {
                        self.connected = true;
                        self.events.push_back(DdpEvent::Connected);
                    } else {
                        self.sctp.abort();
                    }
                }
                assoc::Event::Message(m) => self.on_message(now, m),
                assoc::Event::Closed(r) => {
                    // §11.3: notify every consumer of a DDP stream.
                    self.events.push_back(DdpEvent::Closed(r));
                }
                assoc::Event::PeerError(_) | assoc::Event::ShutdownReceived => {}
            }
        }
    }

    fn illegal(&mut self, stream: u16, why: &'static str) {
        let Some(s) = self.sessions.get_mut(usize::from(stream)) else {
            return;
        };
        if s.state == SessionState::InitiateReceived {
            self.pending_requests = self.pending_requests.saturating_sub(1);
        }
        let state = s.state;
        let was_idle = matches!(state, SessionState::Idle | SessionState::Terminated);
        if !was_idle {
            s.state = SessionState::Terminated;
        }
        // §6.1: terminate the session.
        if !was_idle {
            s.held_terminate = true;
            self.held_any = true;
            self.flush_held(0);
        } else if state == SessionState::Idle {
            // An Idle stream has no session to end, but the peer believes
            // in one (or sends no DDP at all): without an answer it would
            // wait for one forever, its chunks merely SACKed. §6.1 "MUST
            // be terminated": we say so with a Terminate, as §6.4 answers
            // an Initiate we cannot take. At most one of ours
            // unacknowledged per stream, so a peer cannot make a stream of
            // stray chunks into a stream of Terminates. (After our own
            // Terminate, Terminated, the peer has been told already.)
            let acked = s.last_control_tsn.is_none_or(|t| self.sctp.is_acked(t));
            if acked && !s.held_terminate {
                let _ = self.send_control(stream, FunctionCode::Terminate, &[]);
            }
        }
        self.events.push_back(DdpEvent::SessionEnded {
            stream,
            why: SessionEnd::IllegalSequence(why),
            private_data: Vec::new(),
        });
    }

    /// §10 validity check and bookkeeping of a received DDP-SSN; false if
    /// invalid (outside the window, or a duplicate).
    fn rx_ssn(&mut self, stream: u16, ssn: u16) -> bool {
        let Some(s) = self.sessions.get_mut(usize::from(stream)) else {
            return false;
        };
        if !s.rx_ssn_valid(ssn) {
            return false;
        }
        s.rx_ssn_record(ssn);
        true
    }

    fn maybe_finish_terminate(&mut self, stream: u16) {
        let Some(s) = self.sessions.get_mut(usize::from(stream)) else {
            return;
        };
        if s.state == SessionState::Terminating
            && s.terminate_at
                .is_some_and(|t| s.rx_next == t.wrapping_add(1))
        {
            s.state = SessionState::Idle;
            s.reset_rx();
            self.events.push_back(DdpEvent::SessionEnded {
                stream,
                why: SessionEnd::PeerTerminated,
                private_data: Vec::new(),
            });
        }
    }

    fn on_message(&mut self, now: u64, m: assoc::Message) {
        let stream = m.stream;
        if self.session(stream).is_err() {
            return;
        }
        // §10: all DDP chunks are unordered; an ordered one is no legal
        // sequence (§6.1).
        if !m.unordered {
            self.illegal(stream, "ordered DATA chunk (RFC 5043 §10)");
            return;
        }
        match m.ppid {
            PPID_SESSION_CONTROL => match ControlMessage::parse(&m.data) {
                Ok(c) => self.on_control(now, stream, c),
                Err(_) => self.illegal(
                    stream,
                    "malformed DDP Stream Session Control (RFC 5043 §5.2.3)",
                ),
            },
            PPID_DDP_SEGMENT => match SegmentChunk::parse(&m.data) {
                Ok(sc) => {
                    let state = self.sessions[usize::from(stream)].state;
                    // §6.2: segments flow once a session is accepted. The
                    // active side may see the passive side's segments
                    // (DDP-SSN >= 1) before the Accept (DDP-SSN 0): they
                    // are legal in the normative DDP-SSN order.
                    if state == SessionState::Terminated {
                        return; // sent before the peer saw our Terminate
                    }
                    let legal = match state {
                        SessionState::Established => true,
                        SessionState::InitiateSent => sc.ddp_ssn != 0,
                        SessionState::Terminating => {
                            let s = &self.sessions[usize::from(stream)];
                            s.terminate_at.is_some_and(|t| {
                                sc.ddp_ssn.wrapping_sub(s.rx_next) < t.wrapping_sub(s.rx_next)
                            })
                        }
                        SessionState::Idle
                        | SessionState::InitiateReceived
                        | SessionState::Terminated => false,
                    };
                    if !legal {
                        self.illegal(
                            stream,
                            "DDP Segment outside an accepted session (RFC 5043 §6.2)",
                        );
                        return;
                    }
                    if !self.rx_ssn(stream, sc.ddp_ssn) {
                        self.illegal(stream, "DDP-SSN fails the validity check (RFC 5043 §10)");
                        return;
                    }
                    self.held += sc.segment.len();
                    self.events.push_back(DdpEvent::Segment {
                        stream,
                        ddp_ssn: sc.ddp_ssn,
                        segment: sc.segment.to_vec(),
                    });
                    self.maybe_finish_terminate(stream);
                }
                Err(_) => self.illegal(stream, "malformed DDP Segment Chunk (RFC 5043 §5.2.2)"),
            },
            // §5.1: a DDP association carries only the Data Chunks of RFC 5043.
            _ => self.illegal(stream, "PPID other than 16 or 17 (RFC 5043 §5.1, §5.2)"),
        }
    }

    fn on_control(&mut self, now: u64, stream: u16, c: ControlMessage<'_>) {
        let state = self.sessions[usize::from(stream)].state;
        match (state, c.function) {
            // §6.2 / §6.4: a new session request starts with DDP-SSN 0.
            // After our Terminate, the peer's own Terminate (or any control
            // message it sent before seeing ours) ends quietly.
            (SessionState::Terminated, f) if f != FunctionCode::Initiate || c.ddp_ssn != 0 => {}
            (SessionState::Idle | SessionState::Terminated, FunctionCode::Initiate)
                if c.ddp_ssn == 0 =>
            {
                let s = &mut self.sessions[usize::from(stream)];
                s.reset_rx();
                s.tx_ssn = 0;
                s.held_terminate = false;
                s.last_control_tsn = None;
                let _ = self.rx_ssn(stream, 0);
                if self.pending_requests >= self.max_pending_requests {
                    // §5.2.3, §6.4: over the limit, answer Terminate.
                    let _ = self.send_control(stream, FunctionCode::Terminate, &[]);
                    self.events.push_back(DdpEvent::SessionEnded {
                        stream,
                        why: SessionEnd::TooManyPending,
                        private_data: Vec::new(),
                    });
                    return;
                }
                self.pending_requests += 1;
                self.sessions[usize::from(stream)].state = SessionState::InitiateReceived;
                self.events.push_back(DdpEvent::SessionRequested {
                    stream,
                    private_data: c.private_data.to_vec(),
                });
            }
            (SessionState::InitiateSent, FunctionCode::Accept) if c.ddp_ssn == 0 => {
                if !self.rx_ssn(stream, 0) {
                    self.illegal(stream, "duplicate DDP-SSN 0");
                    return;
                }
                self.sessions[usize::from(stream)].state = SessionState::Established;
                self.events.push_back(DdpEvent::SessionAccepted {
                    stream,
                    private_data: c.private_data.to_vec(),
                });
            }
            // §6.3: Reject is the passive side's only message.
            (SessionState::InitiateSent, FunctionCode::Reject) if c.ddp_ssn == 0 => {
                let s = &mut self.sessions[usize::from(stream)];
                if s.rx_next != 0 || !s.rx_above.is_empty() {
                    self.illegal(stream, "Reject after DDP Segments (RFC 5043 §6.3)");
                    return;
                }
                s.state = SessionState::Idle;
                self.events.push_back(DdpEvent::SessionEnded {
                    stream,
                    why: SessionEnd::Rejected,
                    private_data: c.private_data.to_vec(),
                });
            }
            // §6.2: Terminate is the final chunk of a side; §6.4: it also
            // answers an Initiate over the pending limit.
            (
                SessionState::InitiateSent
                | SessionState::Established
                | SessionState::InitiateReceived,
                FunctionCode::Terminate,
            ) => {
                if state == SessionState::InitiateReceived {
                    self.pending_requests = self.pending_requests.saturating_sub(1);
                }
                if !self.rx_ssn(stream, c.ddp_ssn) {
                    self.illegal(
                        stream,
                        "Terminate DDP-SSN fails the validity check (RFC 5043 §10)",
                    );
                    return;
                }
                let s = &mut self.sessions[usize::from(stream)];
                s.terminate_at = Some(c.ddp_ssn);
                s.state = SessionState::Terminating;
                if s.rx_next != c.ddp_ssn.wrapping_add(1) {
                    self.early_terminates += 1;
                }
                self.maybe_finish_terminate(stream);
                let _ = now;
            }
            _ => self.illegal(
                stream,
                "DDP Stream Session Control out of sequence (RFC 5043 §6)",
            ),
        }
    }
}
