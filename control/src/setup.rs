//! One setup exchange for both lower layers: what turns a new transport
//! connection into an RDMAP stream, whichever carries it.
//!
//! | step | over MPA/TCP (RFC 5044 §7.1, RFC 6581) | over SCTP (RFC 5043 §6) |
//! |---|---|---|
//! | the initiator asks | MPA Request, framed in the byte stream | DDP Stream Session Initiate, a message of its own |
//! | the responder holds the request | [`Exchange::pending_request`] | the same |
//! | the responder accepts | MPA Reply | Session Accept |
//! | the responder rejects | MPA Reply with R = 1 | Session Reject |
//! | the initiator takes the answer | the Reply, then FPDUs in the same octets | the Accept or the Reject |
//!
//! An [`Exchange`] is one connection's side of it: the initiator's
//! ([`mpa_initiator`](Exchange::mpa_initiator),
//! [`session_initiator`](Exchange::session_initiator)) returns its first
//! message; the responder's ([`mpa_responder`](Exchange::mpa_responder),
//! [`session_responder`](Exchange::session_responder)) takes the request,
//! holds it ([`pending_request`](Exchange::pending_request)) and answers it
//! with the application's settings ([`accept`](Exchange::accept),
//! [`reject`](Exchange::reject)), with its own
//! ([`accept_own`](Exchange::accept_own): a listener that does not ask
//! its application), or gives up on it ([`give_up`](Exchange::give_up):
//! a decision that never came). The messages go in as the lower layer
//! delivers them ([`Incoming`]); what the exchange settles comes out the
//! same for both: [`PeerRequest`], [`Negotiated`], [`SetupError`]. Each
//! step happens at most once: after the answer, a failure or a decision,
//! every further message or call is refused ([`SetupFailure::WrongKind`]),
//! never a panic.
//!
//! What differs stays in the two wire modules: [`crate::Initiator`] and
//! [`crate::Responder`] (MPA frames, in any cut of the stream), and
//! [`crate::sctp`] (the IRD/ORD word in the Session messages' Private
//! Data). I/O-free: bytes in, bytes and settlements out.

use iwarp_proto::wire::mpa_frame::MAX_PRIVATE_DATA;
use iwarp_proto::wire::TermCode;

use crate::{
    fail, sctp, Initiator, MpaConfig, Negotiated, PeerRequest, Responder, ResponderOutcome,
    SetupError, SetupFailure,
};

/// A message of the exchange as the lower layer delivers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Incoming<'a> {
    /// Octets of the byte stream (MPA over TCP), in any cut: the
    /// exchange takes those of its frame ([`Progress`] says how many);
    /// the rest are FPDUs.
    Stream(&'a [u8]),
    /// A DDP Stream Session Initiate's Private Data (RFC 5043 §6.1).
    Initiate(&'a [u8]),
    /// A Session Accept's Private Data (RFC 5043 §6.2).
    Accept(&'a [u8]),
    /// A Session Reject's Private Data (RFC 5043 §6.3).
    Reject(&'a [u8]),
}

/// What a message moved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Progress {
    /// More of the stream is needed (an MPA frame is not whole yet).
    Pending,
    /// The responder has the request, `usize` octets of the input
    /// (0 for a whole message): [`Exchange::pending_request`] shows it
    /// until it is answered.
    Request(usize),
    /// The initiator has the answer, `usize` octets of the input: full
    /// operation, per what the exchange settled.
    Established(Negotiated, usize),
}

/// The responder's answer to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// Accepted: send `message` (the MPA Reply, or the Session Accept's
    /// Private Data), then full operation per `negotiated`.
    Accepted {
        /// What full operation uses.
        negotiated: Negotiated,
        /// The message to send.
        message: Vec<u8>,
    },
    /// The request cannot be served after all (over MPA: markers we do
    /// not send, no common RTR type): send `message` (a rejecting
    /// Reply), then close.
    Rejected {
        /// Why.
        error: SetupError,
        /// The message to send.
        message: Vec<u8>,
    },
}

/// One connection's side of the setup exchange, over either lower layer
/// ([the module](self)).
#[derive(Debug, Clone)]
pub struct Exchange {
    step: Step,
}

#[derive(Debug, Clone)]
enum Step {
    /// The initiator's request is out; the answer is awaited.
    Asked(Asker),
    /// The responder awaits the request.
    Listening(Answerer),
    /// The responder holds the request; the application decides.
    Deciding(Answerer, PeerRequest),
    /// Answered, settled or failed: no further step.
    Over,
}

#[derive(Debug, Clone)]
enum Asker {
    Mpa(Initiator),
    /// Our Initiate's IRD/ORD, which the Accept is checked against.
    Session {
        ird: u16,
        ord: u16,
    },
}

#[derive(Debug, Clone)]
enum Answerer {
    /// MPA: the responder, which holds the Request's frame and our own
    /// settings.
    Mpa(Responder),
    /// SCTP: our own settings (IRD, ORD, private data).
    Session {
        ird: u16,
        ord: u16,
        private_data: Vec<u8>,
    },
}

/// The refusal of a message or call the exchange's step has no place for.
fn out_of_step() -> SetupError {
    fail(TermCode::MPA_BAD_REQ_REP, SetupFailure::WrongKind)
}

impl Exchange {
    /// The initiator over MPA: the exchange and the Request's octets.
    pub fn mpa_initiator(cfg: MpaConfig) -> Result<(Self, Vec<u8>), SetupError> {
        let (ini, request) = Initiator::new(cfg)?;
        Ok((
            Exchange {
                step: Step::Asked(Asker::Mpa(ini)),
            },
            request,
        ))
    }

    /// The initiator over SCTP: the exchange and the Session Initiate's
    /// Private Data (our `ird`/`ord` word, then `private_data`, at most
    /// [`sctp::MAX_ULP_PRIVATE_DATA`] octets).
    pub fn session_initiator(
        ird: u16,
        ord: u16,
        private_data: &[u8],
    ) -> Result<(Self, Vec<u8>), SetupError> {
        let initiate = sctp::initiate(ird, ord, private_data)?;
        Ok((
            Exchange {
                step: Step::Asked(Asker::Session { ird, ord }),
            },
            initiate,
        ))
    }

    /// The responder over MPA, with `cfg` as its own settings.
    pub fn mpa_responder(cfg: MpaConfig) -> Self {
        Exchange {
            step: Step::Listening(Answerer::Mpa(Responder::new(cfg))),
        }
    }

    /// The responder over SCTP, with its own settings (what
    /// [`accept_own`](Self::accept_own) answers with).
    pub fn session_responder(ird: u16, ord: u16, private_data: Vec<u8>) -> Self {
        Exchange {
            step: Step::Listening(Answerer::Session {
                ird,
                ord,
                private_data,
            }),
        }
    }

    /// Whether this side asks (the initiator).
    pub fn is_initiator(&self) -> bool {
        matches!(self.step, Step::Asked(_))
    }

    /// The peer's request, while it waits for an answer.
    pub fn pending_request(&self) -> Option<&PeerRequest> {
        match &self.step {
            Step::Deciding(_, r) => Some(r),
            _ => None,
        }
    }

    /// Whether the exchange is over (answered, settled or failed).
    pub fn is_over(&self) -> bool {
        matches!(self.step, Step::Over)
    }

    /// Take a message from the peer. A message that does not fit the
    /// step (an Accept at the responder, a second request, anything once
    /// over) is refused with [`SetupFailure::WrongKind`]; a rejection or
    /// a malformed message ends the exchange with its error.
    pub fn receive(&mut self, msg: Incoming<'_>) -> Result<Progress, SetupError> {
        let r = self.step(msg);
        if r.is_err() {
            self.step = Step::Over;
        }
        r
    }

    fn step(&mut self, msg: Incoming<'_>) -> Result<Progress, SetupError> {
        match (&mut self.step, msg) {
            (Step::Asked(Asker::Mpa(ini)), Incoming::Stream(data)) => {
                Ok(match ini.receive(data)? {
                    None => Progress::Pending,
                    Some((n, used)) => {
                        self.step = Step::Over;
                        Progress::Established(n, used)
                    }
                })
            }
            (Step::Asked(Asker::Session { ird, ord }), Incoming::Accept(pd)) => {
                let n = sctp::parse_accept(pd, *ird, *ord)?;
                self.step = Step::Over;
                Ok(Progress::Established(n, 0))
            }
            (Step::Asked(Asker::Session { .. }), Incoming::Reject(pd)) => Err(sctp::rejected(pd)),
            (Step::Listening(Answerer::Mpa(resp)), Incoming::Stream(data)) => {
                let Some((req, used)) = resp.receive_request(data)? else {
                    return Ok(Progress::Pending);
                };
                self.decide_on(req);
                Ok(Progress::Request(used))
            }
            (Step::Listening(Answerer::Session { .. }), Incoming::Initiate(pd)) => {
                let req = sctp::parse_initiate(pd)?;
                self.decide_on(req);
                Ok(Progress::Request(0))
            }
            _ => Err(out_of_step()),
        }
    }

    /// Listening → Deciding with `req`.
    fn decide_on(&mut self, req: PeerRequest) {
        if let Step::Listening(a) = std::mem::replace(&mut self.step, Step::Over) {
            self.step = Step::Deciding(a, req);
        }
    }

    /// Accept the pending request with the application's `private_data`
    /// and `ird`/`ord` (each capped by the peer's, RFC 6581 §3). Over
    /// MPA the request may still be refused ([`Answer::Rejected`]).
    /// Without a pending request: refused. With settings that cannot be
    /// sent (too much private data): refused, and the request stays held
    /// for another answer.
    pub fn accept(
        &mut self,
        private_data: Vec<u8>,
        ird: u16,
        ord: u16,
    ) -> Result<Answer, SetupError> {
        let Step::Deciding(a, req) = std::mem::replace(&mut self.step, Step::Over) else {
            return Err(out_of_step());
        };
        let answer = match &a {
            Answerer::Mpa(resp) => resp.accept(private_data, ird, ord).map(|o| match o {
                ResponderOutcome::Accepted {
                    negotiated, reply, ..
                } => Answer::Accepted {
                    negotiated,
                    message: reply,
                },
                ResponderOutcome::Rejected { error, reply } => Answer::Rejected {
                    error,
                    message: reply,
                },
            }),
            Answerer::Session { .. } => {
                sctp::accept(&req, ird, ord, &private_data).map(|(message, negotiated)| {
                    Answer::Accepted {
                        negotiated,
                        message,
                    }
                })
            }
        };
        if answer.is_err() {
            // Nothing was answered (our own settings could not be
            // sent: too much private data): the request stays held.
            self.step = Step::Deciding(a, req);
        }
        answer
    }

    /// Accept the pending request with this responder's own settings (a
    /// listener that does not ask its application), as
    /// [`accept`](Self::accept).
    pub fn accept_own(&mut self) -> Result<Answer, SetupError> {
        let (private_data, ird, ord) = match &self.step {
            Step::Deciding(Answerer::Mpa(r), _) => {
                let c = r.config();
                (c.private_data.clone(), c.ird, c.ord)
            }
            Step::Deciding(
                Answerer::Session {
                    ird,
                    ord,
                    private_data,
                },
                _,
            ) => (private_data.clone(), *ird, *ord),
            _ => {
                self.step = Step::Over;
                return Err(out_of_step());
            }
        };
        self.accept(private_data, ird, ord)
    }

    /// Reject the pending request: the message to send (a rejecting MPA
    /// Reply, or the Session Reject's Private Data), carrying
    /// `private_data` (at most 512 octets, RFC 5044 §7.1, RFC 5043
    /// §6.1.1). Without a pending request: refused. With too much
    /// private data: refused, and the request stays held.
    pub fn reject(&mut self, private_data: &[u8]) -> Result<Vec<u8>, SetupError> {
        let Step::Deciding(a, req) = std::mem::replace(&mut self.step, Step::Over) else {
            return Err(out_of_step());
        };
        let message = match &a {
            Answerer::Mpa(resp) => resp.reject(private_data),
            Answerer::Session { .. } if private_data.len() > MAX_PRIVATE_DATA => Err(fail(
                TermCode::MPA_LOCAL_CATASTROPHIC,
                SetupFailure::BadConfig,
            )),
            Answerer::Session { .. } => Ok(private_data.to_vec()),
        };
        if message.is_err() {
            self.step = Step::Deciding(a, req);
        }
        message
    }

    /// Give up: a pending request nobody answered (the decision's time
    /// ran out, or the peer sent too much behind it) is rejected with no
    /// private data, whose message this returns (RFC 5044 §7.1.2: a
    /// Reply with R = 1; RFC 5043 §6.3: a Reject); at any other step
    /// `None`. The exchange is over either way.
    pub fn give_up(&mut self) -> Option<Vec<u8>> {
        let message = match self.step {
            Step::Deciding(..) => self.reject(&[]).ok(),
            _ => None,
        };
        self.step = Step::Over;
        message
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(private_data: &[u8]) -> MpaConfig {
        MpaConfig {
            ird: 8,
            ord: 4,
            private_data: private_data.to_vec(),
            ..MpaConfig::default()
        }
    }

    /// The literal bytes of an MPA Rev 2 Request without CRC or markers,
    /// IRD 8, ORD 4 and private data "hi" (RFC 5044 §7.1: key, M C R and
    /// RFC 6581's enhanced bit 0x10, Rev, PD_Length; RFC 6581 §3: the
    /// IRD/ORD word first).
    const MPA_REQUEST: [u8; 26] = [
        b'M', b'P', b'A', b' ', b'I', b'D', b' ', b'R', b'e', b'q', b' ', b'F', b'r', b'a', b'm',
        b'e', 0x10, 0x02, 0x00, 0x06, 0x00, 0x08, 0x00, 0x04, b'h', b'i',
    ];

    #[test]
    fn an_mpa_initiator_asks_with_the_request_bytes_then_takes_the_reply_in_any_cut() {
        let (mut ini, req) = Exchange::mpa_initiator(cfg(b"hi")).expect("request");
        assert_eq!(req, MPA_REQUEST);
        assert!(ini.is_initiator());
        // The peer's responder builds the Reply; FPDU octets follow it.
        let mut resp = Exchange::mpa_responder(cfg(b"ok"));
        assert_eq!(
            resp.receive(Incoming::Stream(&req)).expect("request"),
            Progress::Request(req.len())
        );
        let Answer::Accepted { message, .. } = resp.accept_own().expect("accept") else {
            panic!("rejected");
        };
        assert_eq!(&message[..16], b"MPA ID Rep Frame");
        let mut stream = message.clone();
        stream.extend_from_slice(&[0xAA; 3]);
        let cut = 10;
        assert_eq!(
            ini.receive(Incoming::Stream(&stream[..cut])),
            Ok(Progress::Pending)
        );
        let Ok(Progress::Established(n, used)) = ini.receive(Incoming::Stream(&stream[cut..]))
        else {
            panic!("no answer");
        };
        assert_eq!(
            used,
            message.len() - cut,
            "the FPDU octets are not the exchange's"
        );
        assert_eq!(n.peer_private_data, b"ok");
        assert_eq!((n.ird, n.ord), (8, 4));
        assert!(ini.is_over());
        // Nothing after the answer.
        let late = ini.receive(Incoming::Stream(&stream));
        assert_eq!(late.map_err(|e| e.reason), Err(SetupFailure::WrongKind));
    }

    #[test]
    fn a_session_exchange_carries_the_ird_ord_word_and_settles_as_mpa_does() {
        let (mut ini, initiate) = Exchange::session_initiator(8, 4, b"hi").expect("initiate");
        assert_eq!(initiate, [0x00, 0x08, 0x00, 0x04, b'h', b'i']);
        let mut resp = Exchange::session_responder(2, 16, b"ok".to_vec());
        assert_eq!(
            resp.receive(Incoming::Initiate(&initiate)),
            Ok(Progress::Request(0))
        );
        let req = resp.pending_request().expect("held").clone();
        assert_eq!((req.ird, req.ord), (Some(8), Some(4)));
        assert_eq!(req.private_data, b"hi");
        // Our IRD 2 (capped by its ORD 4), our ORD 16 capped by its IRD 8.
        let Answer::Accepted {
            message,
            negotiated,
        } = resp.accept_own().expect("accept")
        else {
            panic!("rejected");
        };
        assert_eq!(message, [0x00, 0x02, 0x00, 0x08, b'o', b'k']);
        assert_eq!((negotiated.ird, negotiated.ord), (2, 8));
        assert!(resp.pending_request().is_none());
        let Ok(Progress::Established(n, 0)) = ini.receive(Incoming::Accept(&message)) else {
            panic!("no answer");
        };
        assert_eq!((n.ird, n.ord), (8, 2), "our ORD 4 capped by its IRD 2");
        assert_eq!(n.peer_private_data, b"ok");
    }

    #[test]
    fn a_rejection_reaches_the_initiator_with_its_private_data_over_either_wire() {
        // MPA: a Reply with R = 1.
        let (mut ini, req) = Exchange::mpa_initiator(cfg(b"")).expect("request");
        let mut resp = Exchange::mpa_responder(cfg(b""));
        resp.receive(Incoming::Stream(&req)).expect("request");
        let reply = resp.reject(b"no").expect("reject");
        assert_eq!(reply[16] & 0x20, 0x20, "R = 1");
        let e = ini.receive(Incoming::Stream(&reply)).expect_err("rejected");
        assert_eq!(
            (e.reason, e.peer_private_data),
            (SetupFailure::Rejected, b"no".to_vec())
        );
        assert!(ini.is_over());
        // SCTP: a Session Reject of the private data alone.
        let (mut ini, initiate) = Exchange::session_initiator(1, 1, b"").expect("initiate");
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        resp.receive(Incoming::Initiate(&initiate))
            .expect("request");
        let pd = resp.reject(b"no").expect("reject");
        assert_eq!(pd, b"no");
        let e = ini.receive(Incoming::Reject(&pd)).expect_err("rejected");
        assert_eq!(
            (e.reason, e.peer_private_data),
            (SetupFailure::Rejected, b"no".to_vec())
        );
    }

    #[test]
    fn an_unanswered_request_is_rejected_when_given_up_and_nothing_else_is() {
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        assert_eq!(resp.give_up(), None, "no request yet");
        assert!(resp.is_over());
        let (_, initiate) = Exchange::session_initiator(1, 1, b"").expect("initiate");
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        resp.receive(Incoming::Initiate(&initiate))
            .expect("request");
        assert_eq!(
            resp.give_up(),
            Some(Vec::new()),
            "a Reject, no private data"
        );
        let (_, req) = Exchange::mpa_initiator(cfg(b"")).expect("request");
        let mut resp = Exchange::mpa_responder(cfg(b""));
        resp.receive(Incoming::Stream(&req)).expect("request");
        let reply = resp.give_up().expect("a rejecting Reply");
        assert_eq!(&reply[..16], b"MPA ID Rep Frame");
        assert_eq!(reply[16] & 0x20, 0x20, "R = 1");
        assert!(resp.is_over());
        assert_eq!(
            resp.accept(Vec::new(), 1, 1).map_err(|e| e.reason),
            Err(SetupFailure::WrongKind),
            "a decision after giving up"
        );
    }

    #[test]
    fn messages_out_of_step_are_refused_and_end_the_exchange() {
        let (_, initiate) = Exchange::session_initiator(1, 1, b"").expect("initiate");
        // A responder given an Accept; an initiator given an Initiate.
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        let e = resp
            .receive(Incoming::Accept(&initiate))
            .expect_err("refused");
        assert_eq!(e.reason, SetupFailure::WrongKind);
        assert!(resp.is_over());
        let (mut ini, _) = Exchange::session_initiator(1, 1, b"").expect("initiate");
        let e = ini
            .receive(Incoming::Initiate(&initiate))
            .expect_err("refused");
        assert_eq!(e.reason, SetupFailure::WrongKind);
        // A Session message to an MPA exchange, and a stream to a
        // Session exchange.
        let mut resp = Exchange::mpa_responder(cfg(b""));
        assert!(resp.receive(Incoming::Initiate(&initiate)).is_err());
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        assert!(resp.receive(Incoming::Stream(&MPA_REQUEST)).is_err());
        // A malformed Initiate (no IRD/ORD word).
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        let e = resp
            .receive(Incoming::Initiate(&[0x00]))
            .expect_err("malformed");
        assert!(matches!(e.reason, SetupFailure::Malformed(_)), "{e:?}");
        // A second request while one is held.
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        resp.receive(Incoming::Initiate(&initiate))
            .expect("request");
        assert!(resp.receive(Incoming::Initiate(&initiate)).is_err());
        assert!(resp.pending_request().is_none());
        // Private data over 512 octets in a Session Reject, or over 508
        // in an Accept: refused, and the request is still there to answer.
        let mut resp = Exchange::session_responder(1, 1, Vec::new());
        resp.receive(Incoming::Initiate(&initiate))
            .expect("request");
        assert!(resp.reject(&[0; 513]).is_err());
        assert!(resp.accept(vec![0; 509], 1, 1).is_err());
        assert!(resp.pending_request().is_some());
        assert_eq!(resp.reject(b"no"), Ok(b"no".to_vec()));
        assert!(resp.is_over());
    }
}
