//! iWARP control plane, I/O-free: the MPA Request/Reply exchange that turns a
//! connected TCP stream into an RDMAP stream (RFC 5044 §7.1, RFC 6581).
//!
//! [`Initiator`] builds the Request and digests the Reply; [`Responder`]
//! digests the Request and builds the Reply (accepting or rejecting). Both
//! take stream octets in any cut and report how many they consumed, so octets
//! that follow the frame in the same segment go on to the FPDU deframer. The
//! result, [`Negotiated`], says what full operation uses in each direction:
//! CRC, markers, IRD/ORD and the peer-to-peer RTR.
//!
//! [`setup::Exchange`] is one setup exchange over either lower layer: it
//! steps these MPA frames over TCP, or the DDP Stream Session messages of
//! [`sctp`] over SCTP, to the same [`PeerRequest`], [`Negotiated`] and
//! [`SetupError`].
//!
//! TCP connection handling, timers and teardown live with the transport.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod sctp;
pub mod setup;

use iwarp_proto::qp::RtrKind;
use iwarp_proto::wire::mpa_frame::{HEADER_LEN, MAX_PRIVATE_DATA};
use iwarp_proto::wire::{EnhancedParams, FrameKind, MpaFlags, MpaFrameRepr, TermCode, WireError};

/// What the RTR types an initiator offers (RFC 6581 §3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RtrOffer {
    /// Zero-length FPDU.
    pub zero_length_fpdu: bool,
    /// Zero-length RDMA Write.
    pub write: bool,
    /// Zero-length RDMA Read.
    pub read: bool,
}

/// Local settings for the exchange.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MpaConfig {
    /// MPA revision to speak: 1 (RFC 5044) or 2 (RFC 6581).
    pub rev: u8,
    /// Ask for CRC (it is used if either side asks).
    pub crc: bool,
    /// Ask the peer to put markers into what it sends us.
    pub markers_rx: bool,
    /// Whether we agree to send markers when the peer asks (Linux siw refuses).
    pub allow_markers_tx: bool,
    /// Our inbound RDMA Read limit.
    pub ird: u16,
    /// Our outbound RDMA Read limit.
    pub ord: u16,
    /// Peer-to-peer mode (RFC 6581): initiator asks for it; responder accepts it.
    pub peer_to_peer: bool,
    /// RTR types: offered (initiator) or acceptable (responder).
    pub rtr: RtrOffer,
    /// Application private data.
    pub private_data: Vec<u8>,
    /// How long the initiator waits for the Reply (nanoseconds; Linux
    /// waits 10 s, wire-facts.md). The caller's clock runs the timer.
    pub reply_timeout: u64,
    /// How long the responder waits for the Request (Linux: 5 s).
    pub request_timeout: u64,
    /// How long a responder whose application decides (a manual listener)
    /// holds a peer's Request unanswered (nanoseconds; default 10 s, the
    /// time Linux's initiator waits for the Reply). Then the Request is
    /// rejected (a Reply with R = 1, RFC 5044 §7.1.2) and the stream
    /// closes; locally the setup fails with [`SetupFailure::TimedOut`].
    pub decision_timeout: u64,
    /// Octets after the Request a responder holds while its application
    /// decides (default 4096). RFC 5044 §7.1: the initiator sends no FPDU
    /// before it has the Reply, so a conforming peer sends none; one more
    /// octet than this rejects the Request (R = 1) with
    /// [`SetupFailure::EarlyData`], so a peer cannot make us buffer what
    /// it streams while the application is slow.
    pub max_early_data: usize,
    /// How long a graceful close waits for the answers to our RDMA Reads
    /// while the peer sends no FPDU at all (nanoseconds; default 5 s; 0
    /// waits for ever). Then the close becomes abortive: a Terminate, then
    /// RST, and the Reads complete flushed. (A peer FIN ends the wait at
    /// once; our own queued FPDUs drain under TCP's timers, not this one.)
    /// The same limit applies after our FIN is acknowledged (TCP
    /// FIN-WAIT-2, which RFC 9293 does not bound): a peer whose FIN has not
    /// come by then gets RST. Used by the transport
    /// (`iwarp_datapath::over_tcp`), not by the exchange.
    pub close_timeout: u64,
    /// Initiator only: hold the first FPDU (the RTR included) this long
    /// after the Reply (nanoseconds; 0: send at once). Linux siw 6.1 as
    /// responder hooks its receive path to the QP only after sending the
    /// Reply, so an FPDU arriving in between sits unread until more data
    /// comes (interop README, finding 2); 50 ms avoids it.
    pub first_fpdu_delay: u64,
}

impl Default for MpaConfig {
    /// What Linux siw sends: Rev 2, no CRC, no markers, no peer-to-peer.
    fn default() -> Self {
        MpaConfig {
            rev: 2,
            crc: false,
            markers_rx: false,
            allow_markers_tx: true,
            ird: 16,
            ord: 16,
            peer_to_peer: false,
            rtr: RtrOffer {
                zero_length_fpdu: true,
                write: true,
                read: true,
            },
            private_data: Vec::new(),
            reply_timeout: 10_000_000_000,
            request_timeout: 5_000_000_000,
            decision_timeout: 10_000_000_000,
            max_early_data: 4096,
            close_timeout: 5_000_000_000,
            first_fpdu_delay: 0,
        }
    }
}

/// The outcome of a successful exchange: what full operation uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Negotiated {
    /// Revision in force.
    pub rev: u8,
    /// CRC in both directions.
    pub crc: bool,
    /// We insert markers in what we send.
    pub markers_tx: bool,
    /// The peer inserts markers in what it sends.
    pub markers_rx: bool,
    /// Our inbound Read limit in force.
    pub ird: u16,
    /// Our outbound Read limit in force.
    pub ord: u16,
    /// Peer-to-peer RTR in force (initiator sends it, responder waits for it).
    pub rtr: Option<RtrKind>,
    /// The peer's private data (without the RFC 6581 words).
    pub peer_private_data: Vec<u8>,
}

/// Why setup failed; `code` is the MPA Terminate code that describes it
/// (RFC 5044 §8, RFC 6581 §4: 0x04-0x07).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetupError {
    /// Terminate code.
    pub code: TermCode,
    /// What went wrong.
    pub reason: SetupFailure,
    /// The private data of a rejecting Reply (RFC 5044 §7.1.2: a rejecting
    /// responder may explain itself there).
    pub peer_private_data: Vec<u8>,
}

/// Kinds of setup failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetupFailure {
    /// The frame does not parse (wrong key, PD_Length over 512, ...).
    Malformed(WireError),
    /// A frame of the wrong kind (Reply where a Request belongs, or the reverse).
    WrongKind,
    /// Revision not 1 or 2.
    BadRevision(u8),
    /// The peer rejected us (R flag); its private data explains.
    Rejected,
    /// The peer asked for markers and we do not send them.
    MarkersRefused,
    /// The peer asks for more inbound Reads than we allow.
    InsufficientIrd,
    /// No common RTR type.
    NoMatchingRtr,
    /// Our own configuration cannot be encoded (private data too long).
    BadConfig,
    /// The peer's Request or Reply did not arrive in time.
    TimedOut,
    /// Our application rejected the peer's Request.
    RejectedByUs,
    /// The peer sent more than [`MpaConfig::max_early_data`] octets after
    /// its Request before our Reply (RFC 5044 §7.1: no FPDU before the
    /// Reply); we rejected the Request.
    EarlyData,
}

impl core::fmt::Display for SetupError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "MPA setup failed: {:?} ({})", self.reason, self.code)
    }
}

impl std::error::Error for SetupError {}

fn fail(code: TermCode, reason: SetupFailure) -> SetupError {
    SetupError {
        code,
        reason,
        peer_private_data: Vec::new(),
    }
}

/// Collects one Request/Reply frame from a stream cut anywhere.
#[derive(Debug, Default, Clone)]
struct FrameBuf {
    buf: Vec<u8>,
}

impl FrameBuf {
    /// Take octets until a whole frame is held; returns octets consumed and
    /// whether the frame is complete.
    fn take(&mut self, data: &[u8]) -> Result<(usize, bool), SetupError> {
        let mut used = 0;
        if self.buf.len() < HEADER_LEN {
            let n = (HEADER_LEN - self.buf.len()).min(data.len());
            self.buf.extend_from_slice(&data[..n]);
            used = n;
            if self.buf.len() < HEADER_LEN {
                return Ok((used, false));
            }
        }
        let pd = u16::from_be_bytes([self.buf[18], self.buf[19]]) as usize;
        if pd > MAX_PRIVATE_DATA {
            return Err(fail(
                TermCode::MPA_BAD_REQ_REP,
                SetupFailure::Malformed(WireError::Malformed {
                    what: "MPA frame",
                    field: "PD_Length",
                    value: pd as u32,
                }),
            ));
        }
        let total = HEADER_LEN + pd;
        let n = (total - self.buf.len()).min(data.len() - used);
        self.buf.extend_from_slice(&data[used..used + n]);
        used += n;
        Ok((used, self.buf.len() == total))
    }
}

fn parse(buf: &[u8], want: FrameKind) -> Result<MpaFrameRepr<'_>, SetupError> {
    let (r, _) = MpaFrameRepr::parse_bytes(buf)
        .map_err(|e| fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::Malformed(e)))?;
    if r.kind != want {
        return Err(fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::WrongKind));
    }
    if !(1..=2).contains(&r.rev) {
        return Err(fail(
            TermCode::MPA_BAD_REQ_REP,
            SetupFailure::BadRevision(r.rev),
        ));
    }
    Ok(r)
}

fn rtr_of(e: &EnhancedParams) -> RtrOffer {
    RtrOffer {
        zero_length_fpdu: e.rtr_zero_len_fpdu,
        write: e.rtr_write,
        read: e.rtr_read,
    }
}

/// The active side: sends the Request, waits for the Reply.
#[derive(Debug, Clone)]
pub struct Initiator {
    cfg: MpaConfig,
    frame: FrameBuf,
}

impl Initiator {
    /// Start; returns the state and the Request octets to send.
    pub fn new(cfg: MpaConfig) -> Result<(Self, Vec<u8>), SetupError> {
        let enhanced = (cfg.rev >= 2).then_some(EnhancedParams {
            ird: cfg.ird,
            ord: cfg.ord,
            peer_to_peer: cfg.peer_to_peer,
            rtr_zero_len_fpdu: cfg.peer_to_peer && cfg.rtr.zero_length_fpdu,
            rtr_write: cfg.peer_to_peer && cfg.rtr.write,
            rtr_read: cfg.peer_to_peer && cfg.rtr.read,
        });
        let req = MpaFrameRepr {
            kind: FrameKind::Request,
            flags: MpaFlags::new(cfg.markers_rx, cfg.crc, false, false),
            rev: cfg.rev,
            enhanced,
            ulp_data: &cfg.private_data,
        };
        let bytes = req
            .to_vec()
            .map_err(|_| fail(TermCode::MPA_LOCAL_CATASTROPHIC, SetupFailure::BadConfig))?;
        Ok((
            Initiator {
                cfg,
                frame: FrameBuf::default(),
            },
            bytes,
        ))
    }

    /// Feed octets received. Returns `Ok(None)` while the Reply is incomplete,
    /// `Ok(Some((negotiated, consumed)))` once it is complete: octets after
    /// `consumed` are FPDUs.
    pub fn receive(&mut self, data: &[u8]) -> Result<Option<(Negotiated, usize)>, SetupError> {
        let (used, done) = self.frame.take(data)?;
        if !done {
            return Ok(None);
        }
        let rep = parse(&self.frame.buf, FrameKind::Reply)?;
        if rep.flags.reject() {
            let mut e = fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::Rejected);
            e.peer_private_data = rep.ulp_data.to_vec();
            return Err(e);
        }
        if rep.flags.marker() && !self.cfg.allow_markers_tx {
            return Err(fail(
                TermCode::MPA_BAD_REQ_REP,
                SetupFailure::MarkersRefused,
            ));
        }
        let mut n = Negotiated {
            rev: rep.rev.min(self.cfg.rev),
            crc: self.cfg.crc || rep.flags.crc(),
            markers_tx: rep.flags.marker(),
            markers_rx: self.cfg.markers_rx,
            ird: self.cfg.ird,
            ord: self.cfg.ord,
            rtr: None,
            peer_private_data: rep.ulp_data.to_vec(),
        };
        if let (Some(e), true) = (rep.enhanced, self.cfg.rev >= 2) {
            // RFC 6581: the responder's ORD must fit our IRD; our ORD is capped by its IRD.
            if e.ord > self.cfg.ird {
                return Err(fail(
                    TermCode::MPA_INSUFFICIENT_IRD,
                    SetupFailure::InsufficientIrd,
                ));
            }
            n.ord = self.cfg.ord.min(e.ird);
            if self.cfg.peer_to_peer {
                let offered = RtrOffer {
                    zero_length_fpdu: self.cfg.rtr.zero_length_fpdu,
                    write: self.cfg.rtr.write,
                    read: self.cfg.rtr.read,
                };
                n.rtr = Some(pick_one(rtr_of(&e), offered).ok_or(fail(
                    TermCode::MPA_NO_MATCHING_RTR,
                    SetupFailure::NoMatchingRtr,
                ))?);
                // The responder must choose exactly one type.
                let chosen = [e.rtr_zero_len_fpdu, e.rtr_write, e.rtr_read]
                    .iter()
                    .filter(|b| **b)
                    .count();
                if chosen != 1 || !e.peer_to_peer {
                    return Err(fail(
                        TermCode::MPA_NO_MATCHING_RTR,
                        SetupFailure::NoMatchingRtr,
                    ));
                }
            }
        }
        Ok(Some((n, used)))
    }
}

/// Pick one RTR type present in both sets; preference: Write, Read, zero-length FPDU.
fn pick_one(a: RtrOffer, b: RtrOffer) -> Option<RtrKind> {
    if a.write && b.write {
        Some(RtrKind::Write)
    } else if a.read && b.read {
        Some(RtrKind::Read)
    } else if a.zero_length_fpdu && b.zero_length_fpdu {
        Some(RtrKind::ZeroLengthFpdu)
    } else {
        None
    }
}

/// Outcome at the responder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponderOutcome {
    /// Accepted: send `reply`, then full operation per `negotiated`.
    Accepted {
        /// What full operation uses.
        negotiated: Negotiated,
        /// Reply octets to send.
        reply: Vec<u8>,
        /// Octets of the input that belonged to the Request.
        consumed: usize,
    },
    /// Rejected: send `reply` (R = 1), then close.
    Rejected {
        /// Why.
        error: SetupError,
        /// Reply octets to send.
        reply: Vec<u8>,
    },
}

/// What a peer's Request asks for, before we answer it (what an
/// rdma_cm-style connect request shows the application).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerRequest {
    /// Revision the peer speaks.
    pub rev: u8,
    /// The peer asks for CRC.
    pub crc: bool,
    /// The peer asks us to send markers.
    pub markers: bool,
    /// The peer's IRD (Rev 2 enhanced only).
    pub ird: Option<u16>,
    /// The peer's ORD (Rev 2 enhanced only).
    pub ord: Option<u16>,
    /// The peer asks for peer-to-peer mode.
    pub peer_to_peer: bool,
    /// RTR types the peer offers.
    pub rtr: RtrOffer,
    /// The peer's private data (without the RFC 6581 words).
    pub private_data: Vec<u8>,
}

/// The passive side: waits for the Request, answers with the Reply.
#[derive(Debug, Clone)]
pub struct Responder {
    cfg: MpaConfig,
    frame: FrameBuf,
}

impl Responder {
    /// Start waiting for a Request.
    pub fn new(cfg: MpaConfig) -> Self {
        Responder {
            cfg,
            frame: FrameBuf::default(),
        }
    }

    /// Its own settings (what [`receive`](Self::receive) accepts with).
    pub fn config(&self) -> &MpaConfig {
        &self.cfg
    }

    /// Feed octets. `Ok(None)` while the Request is incomplete. A malformed
    /// Request is an `Err` (close the connection: there is no frame to answer
    /// with); a well-formed one we cannot serve gets a rejecting Reply.
    /// Accepts with this responder's configuration; to let the application
    /// decide, use [`receive_request`](Self::receive_request) and then
    /// [`accept`](Self::accept) or [`reject`](Self::reject).
    pub fn receive(&mut self, data: &[u8]) -> Result<Option<ResponderOutcome>, SetupError> {
        let (used, done) = self.frame.take(data)?;
        if !done {
            return Ok(None);
        }
        self.decide(used, &self.cfg.clone()).map(Some)
    }

    /// Feed octets until the Request is whole; then return what the peer
    /// asks for (and octets consumed) without answering yet.
    pub fn receive_request(
        &mut self,
        data: &[u8],
    ) -> Result<Option<(PeerRequest, usize)>, SetupError> {
        let (used, done) = self.frame.take(data)?;
        if !done {
            return Ok(None);
        }
        let req = parse(&self.frame.buf, FrameKind::Request)?;
        let e = req.enhanced.filter(|_| req.rev >= 2);
        Ok(Some((
            PeerRequest {
                rev: req.rev,
                crc: req.flags.crc(),
                markers: req.flags.marker(),
                ird: e.map(|e| e.ird),
                ord: e.map(|e| e.ord),
                peer_to_peer: e.is_some_and(|e| e.peer_to_peer),
                rtr: e.map(|e| rtr_of(&e)).unwrap_or_default(),
                private_data: req.ulp_data.to_vec(),
            },
            used,
        )))
    }

    /// Answer a Request taken by [`receive_request`](Self::receive_request),
    /// accepting with `private_data` and our IRD/ORD (capped per RFC 6581 by
    /// the peer's). May still reject when the Request cannot be served
    /// (markers we do not send, no common RTR type).
    pub fn accept(
        &self,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
    ) -> Result<ResponderOutcome, SetupError> {
        let cfg = MpaConfig {
            private_data,
            ird,
            ord,
            ..self.cfg.clone()
        };
        self.decide(0, &cfg)
    }

    /// Reject a Request taken by [`receive_request`](Self::receive_request):
    /// the Reply octets (R = 1) carrying `private_data` (at most 512 octets,
    /// RFC 5044 §7.1).
    pub fn reject(&self, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
        let req = parse(&self.frame.buf, FrameKind::Request)?;
        let rev = req.rev.min(self.cfg.rev);
        let crc = self.cfg.crc || req.flags.crc();
        // The RFC 6581 words count against PD_Length's 512 (RFC 5044
        // §7.1); a rejection that needs all 512 octets for its reason goes
        // without them (the connection is over either way).
        let enhanced = req
            .enhanced
            .filter(|_| rev >= 2 && private_data.len() + 4 <= MAX_PRIVATE_DATA)
            .map(|_| EnhancedParams::default());
        MpaFrameRepr {
            kind: FrameKind::Reply,
            flags: MpaFlags::new(false, crc, true, false),
            rev,
            enhanced,
            ulp_data: private_data,
        }
        .to_vec()
        .map_err(|_| fail(TermCode::MPA_LOCAL_CATASTROPHIC, SetupFailure::BadConfig))
    }

    /// The answer to the whole Request held in `self.frame` under `cfg`.
    fn decide(&self, used: usize, cfg: &MpaConfig) -> Result<ResponderOutcome, SetupError> {
        let req = parse(&self.frame.buf, FrameKind::Request)?;
        let rev = req.rev.min(cfg.rev);
        let crc = cfg.crc || req.flags.crc();
        let reject = |error: SetupError, rev: u8, enhanced: bool| {
            let r = MpaFrameRepr {
                kind: FrameKind::Reply,
                flags: MpaFlags::new(false, crc, true, false),
                rev,
                enhanced: enhanced.then_some(EnhancedParams::default()),
                ulp_data: &[],
            };
            ResponderOutcome::Rejected {
                error,
                reply: r.to_vec().unwrap_or_default(),
            }
        };
        let enhanced_in = req.enhanced.filter(|_| rev >= 2);
        // wire-facts.md: Linux siw answers a Request with M = 1 with R = 1.
        if req.flags.marker() && !cfg.allow_markers_tx {
            return Ok(reject(
                fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::MarkersRefused),
                rev,
                enhanced_in.is_some(),
            ));
        }
        let mut n = Negotiated {
            rev,
            crc,
            markers_tx: req.flags.marker(),
            markers_rx: cfg.markers_rx,
            ird: cfg.ird,
            ord: cfg.ord,
            rtr: None,
            peer_private_data: req.ulp_data.to_vec(),
        };
        let mut reply_enh = None;
        if let Some(e) = enhanced_in {
            // RFC 6581: our ORD from the peer's IRD, our IRD from the peer's ORD,
            // each capped by our own limits.
            n.ord = cfg.ord.min(e.ird);
            n.ird = cfg.ird.min(e.ord);
            let mut enh = EnhancedParams {
                ird: n.ird,
                ord: n.ord,
                ..Default::default()
            };
            if e.peer_to_peer {
                if !cfg.peer_to_peer {
                    return Ok(reject(
                        fail(TermCode::MPA_NO_MATCHING_RTR, SetupFailure::NoMatchingRtr),
                        rev,
                        true,
                    ));
                }
                match pick_one(rtr_of(&e), cfg.rtr) {
                    Some(k) => {
                        enh.peer_to_peer = true;
                        match k {
                            RtrKind::Write => enh.rtr_write = true,
                            RtrKind::Read => enh.rtr_read = true,
                            RtrKind::ZeroLengthFpdu => enh.rtr_zero_len_fpdu = true,
                        }
                        n.rtr = Some(k);
                    }
                    None => {
                        return Ok(reject(
                            fail(TermCode::MPA_NO_MATCHING_RTR, SetupFailure::NoMatchingRtr),
                            rev,
                            true,
                        ))
                    }
                }
            }
            reply_enh = Some(enh);
        }
        let r = MpaFrameRepr {
            kind: FrameKind::Reply,
            flags: MpaFlags::new(cfg.markers_rx, crc, false, false),
            rev,
            enhanced: reply_enh,
            ulp_data: &cfg.private_data,
        };
        let reply = r
            .to_vec()
            .map_err(|_| fail(TermCode::MPA_LOCAL_CATASTROPHIC, SetupFailure::BadConfig))?;
        Ok(ResponderOutcome::Accepted {
            negotiated: n,
            reply,
            consumed: used,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        ic: MpaConfig,
        rc: MpaConfig,
    ) -> (
        Result<Negotiated, SetupError>,
        Option<Negotiated>,
        Vec<u8>,
        Vec<u8>,
    ) {
        let (mut ini, req) = Initiator::new(ic).unwrap();
        let mut resp = Responder::new(rc);
        // byte at a time, to exercise every cut
        let mut out = None;
        for (i, b) in req.iter().enumerate() {
            match resp.receive(std::slice::from_ref(b)).unwrap() {
                None => assert!(i + 1 < req.len()),
                Some(o) => out = Some(o),
            }
        }
        match out.unwrap() {
            ResponderOutcome::Accepted {
                negotiated,
                reply,
                consumed,
            } => {
                assert_eq!(consumed, 1);
                let mut extra = reply.clone();
                extra.extend_from_slice(&[0xaa, 0xbb]);
                let (n, used) = ini.receive(&extra).unwrap().unwrap();
                assert_eq!(used, reply.len());
                (Ok(n), Some(negotiated), req, reply)
            }
            ResponderOutcome::Rejected { error: _, reply } => {
                let e = ini.receive(&reply).unwrap_err();
                (Err(e), None, req, reply)
            }
        }
    }

    #[test]
    fn application_decides_accept_with_its_private_data_and_limits() {
        let ic = MpaConfig {
            ird: 8,
            ord: 4,
            private_data: b"hello from the initiator".to_vec(),
            ..Default::default()
        };
        let (mut ini, req) = Initiator::new(ic).unwrap();
        let mut resp = Responder::new(MpaConfig::default());
        let (pr, used) = resp.receive_request(&req).unwrap().unwrap();
        assert_eq!(used, req.len());
        assert_eq!(pr.private_data, b"hello from the initiator");
        assert_eq!((pr.ird, pr.ord, pr.rev), (Some(8), Some(4), 2));
        let ResponderOutcome::Accepted {
            negotiated, reply, ..
        } = resp.accept(b"welcome".to_vec(), 2, 3).unwrap()
        else {
            panic!("rejected")
        };
        // RFC 6581: our IRD capped by the peer's ORD, our ORD by its IRD.
        assert_eq!((negotiated.ird, negotiated.ord), (2, 3));
        let (n, _) = ini.receive(&reply).unwrap().unwrap();
        assert_eq!(n.peer_private_data, b"welcome");
        // The initiator's ORD is capped by the responder's IRD (2).
        assert_eq!((n.ird, n.ord), (8, 2));
    }

    #[test]
    fn application_rejects_with_512_octets_of_private_data() {
        let (mut ini, req) = Initiator::new(MpaConfig::default()).unwrap();
        let mut resp = Responder::new(MpaConfig::default());
        resp.receive_request(&req).unwrap().unwrap();
        let why: Vec<u8> = (0..512u32).map(|i| (i * 7) as u8).collect();
        let reply = resp.reject(&why).unwrap();
        assert_eq!(reply.len(), 20 + 512);
        let e = ini.receive(&reply).unwrap_err();
        assert_eq!(e.reason, SetupFailure::Rejected);
        assert_eq!(e.peer_private_data, why);
        // 513 octets cannot be sent (RFC 5044 §7.1: PD_Length at most 512).
        assert!(resp.reject(&[0; 513]).is_err());
    }

    #[test]
    fn siw_default_exchange_bytes() {
        let cfg = MpaConfig {
            ird: 1,
            ord: 1,
            ..Default::default()
        };
        let (i, r, req, rep) = run(cfg.clone(), cfg);
        // shared/interop README: "MPA ID Req Frame" 10 02 0004 0001 0001 and the same Reply.
        assert_eq!(
            &req[16..],
            &[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]
        );
        assert_eq!(&rep[..16], b"MPA ID Rep Frame");
        assert_eq!(
            &rep[16..],
            &[0x10, 0x02, 0x00, 0x04, 0x00, 0x01, 0x00, 0x01]
        );
        let i = i.unwrap();
        let r = r.unwrap();
        assert_eq!((i.ird, i.ord, r.ird, r.ord), (1, 1, 1, 1));
        assert!(!i.crc && !i.markers_tx && !i.markers_rx && i.rtr.is_none());
    }

    #[test]
    fn crc_either_side_and_markers_per_direction() {
        let ic = MpaConfig {
            crc: false,
            markers_rx: true,
            ..Default::default()
        };
        let rc = MpaConfig {
            crc: true,
            markers_rx: false,
            ..Default::default()
        };
        let (i, r, _, rep) = run(ic, rc);
        let (i, r) = (i.unwrap(), r.unwrap());
        assert!(i.crc && r.crc);
        assert_eq!(rep[16], 0x50); // C + enhanced
        assert!(!i.markers_tx && i.markers_rx);
        assert!(r.markers_tx && !r.markers_rx);
    }

    #[test]
    fn markers_refused_like_siw() {
        let ic = MpaConfig {
            markers_rx: true,
            ..Default::default()
        };
        let rc = MpaConfig {
            allow_markers_tx: false,
            ..Default::default()
        };
        let (i, _, _, rep) = run(ic, rc);
        assert_eq!(i.unwrap_err().reason, SetupFailure::Rejected);
        // siw: reply flags 0x30 (R + enhanced) and IRD/ORD 0/0
        assert_eq!(&rep[16..], &[0x30, 0x02, 0x00, 0x04, 0, 0, 0, 0]);
    }

    #[test]
    fn ird_ord_negotiation() {
        let ic = MpaConfig {
            ird: 8,
            ord: 32,
            ..Default::default()
        };
        let rc = MpaConfig {
            ird: 4,
            ord: 128,
            ..Default::default()
        };
        let (i, r, _, _) = run(ic, rc);
        let (i, r) = (i.unwrap(), r.unwrap());
        // responder: ORD = min(128, ini IRD 8) = 8, IRD = min(4, ini ORD 32) = 4
        assert_eq!((r.ird, r.ord), (4, 8));
        // initiator: ORD capped by responder IRD 4
        assert_eq!((i.ird, i.ord), (8, 4));
    }

    #[test]
    fn p2p_rtr_selection_matches_siw_capture() {
        // siw p2p request PD 8001 c001; reply 8001 8001 (write RTR).
        let ic = MpaConfig {
            ird: 1,
            ord: 1,
            peer_to_peer: true,
            rtr: RtrOffer {
                zero_length_fpdu: false,
                write: true,
                read: true,
            },
            ..Default::default()
        };
        let rc = MpaConfig {
            ird: 1,
            ord: 1,
            peer_to_peer: true,
            ..Default::default()
        };
        let (i, r, req, rep) = run(ic, rc);
        assert_eq!(&req[20..24], &[0x80, 0x01, 0xc0, 0x01]);
        assert_eq!(&rep[20..24], &[0x80, 0x01, 0x80, 0x01]);
        assert_eq!(i.unwrap().rtr, Some(RtrKind::Write));
        assert_eq!(r.unwrap().rtr, Some(RtrKind::Write));
    }

    #[test]
    fn p2p_without_common_rtr_is_0x07() {
        let ic = MpaConfig {
            peer_to_peer: true,
            rtr: RtrOffer {
                zero_length_fpdu: true,
                write: false,
                read: false,
            },
            ..Default::default()
        };
        let rc = MpaConfig {
            peer_to_peer: true,
            rtr: RtrOffer {
                zero_length_fpdu: false,
                write: true,
                read: true,
            },
            ..Default::default()
        };
        let mut resp = Responder::new(rc);
        let (_, req) = Initiator::new(ic).unwrap();
        match resp.receive(&req).unwrap().unwrap() {
            ResponderOutcome::Rejected { error, .. } => {
                assert_eq!(error.code, TermCode::MPA_NO_MATCHING_RTR)
            }
            o => panic!("{o:?}"),
        }
    }

    #[test]
    fn rev1_has_no_enhanced_words() {
        let ic = MpaConfig {
            rev: 1,
            private_data: b"hello".to_vec(),
            ..Default::default()
        };
        let rc = MpaConfig {
            rev: 2,
            private_data: b"hi".to_vec(),
            ..Default::default()
        };
        let (i, r, req, rep) = run(ic, rc);
        assert_eq!(&req[16..20], &[0x00, 0x01, 0x00, 0x05]);
        assert_eq!(&rep[16..20], &[0x00, 0x01, 0x00, 0x02]);
        assert_eq!(i.unwrap().peer_private_data, b"hi");
        assert_eq!(r.unwrap().peer_private_data, b"hello");
    }

    #[test]
    fn malformed_requests() {
        let mut resp = Responder::new(MpaConfig::default());
        let mut bad = b"MPA ID Rep Frame".to_vec();
        bad.extend_from_slice(&[0, 1, 0, 0]);
        assert_eq!(
            resp.receive(&bad).unwrap_err().reason,
            SetupFailure::WrongKind
        );
        let mut resp = Responder::new(MpaConfig::default());
        let mut bad = b"MPA ID Req Frame".to_vec();
        bad.extend_from_slice(&[0, 3, 0, 0]);
        assert_eq!(
            resp.receive(&bad).unwrap_err().reason,
            SetupFailure::BadRevision(3)
        );
        let mut resp = Responder::new(MpaConfig::default());
        let mut bad = b"MPA ID Req Frame".to_vec();
        bad.extend_from_slice(&[0, 1, 0x02, 0x01]);
        assert_eq!(
            resp.receive(&bad).unwrap_err().code,
            TermCode::MPA_BAD_REQ_REP
        );
        let mut resp = Responder::new(MpaConfig::default());
        let e = resp
            .receive(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap_err();
        assert!(matches!(e.reason, SetupFailure::Malformed(_)));
    }

    #[test]
    fn responder_ord_above_our_ird_is_0x06() {
        let (mut ini, _) = Initiator::new(MpaConfig {
            ird: 2,
            ..Default::default()
        })
        .unwrap();
        let rep = MpaFrameRepr {
            kind: FrameKind::Reply,
            flags: MpaFlags::default(),
            rev: 2,
            enhanced: Some(EnhancedParams {
                ird: 4,
                ord: 9,
                ..Default::default()
            }),
            ulp_data: &[],
        }
        .to_vec()
        .unwrap();
        assert_eq!(
            ini.receive(&rep).unwrap_err().code,
            TermCode::MPA_INSUFFICIENT_IRD
        );
    }
}
