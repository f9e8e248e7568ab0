//! What an iWARP connection is, whatever carries it: one vocabulary of
//! states and roles for both lower layers. An iWARP connection over TCP
//! ([`crate::over_tcp::IwarpOverTcp`]) and one over SCTP
//! ([`crate::over_sctp`]'s connections) go through the same states, with
//! the same timer table (`timers`), the same queue for work posted
//! before full operation ([`crate::early::EarlyWork`]) and the same
//! [`CmEvent`](crate::over_tcp::CmEvent)s; only what drives each step is
//! the lower layer's.
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
/// [`CmEvent`](crate::over_tcp::CmEvent).
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
    /// ([`CmEvent::ConnectRequest`](crate::over_tcp::CmEvent::ConnectRequest)):
    /// the application accepts or rejects it
    /// (`MpaConfig::decision_timeout`).
    AwaitingDecision,
    /// Full operation
    /// ([`CmEvent::Established`](crate::over_tcp::CmEvent::Established)):
    /// DDP segments flow.
    Operational,
    /// A graceful close: outstanding work (and the answers to our Reads)
    /// finishes, then the lower layer closes (TCP's FIN, SCTP's
    /// SHUTDOWN). Entered on the application's close, on the peer's close,
    /// and after a setup failure
    /// ([`CmEvent::SetupFailed`](crate::over_tcp::CmEvent::SetupFailed),
    /// the rejection going out first).
    Closing,
    /// An abortive close: a Terminate, then RST (TCP) or SHUTDOWN/ABORT
    /// (SCTP) once it is sent (or [`crate::ABORT_GRACE_NS`] later).
    Aborting,
    /// The iWARP stream is over
    /// ([`CmEvent::Disconnected`](crate::over_tcp::CmEvent::Disconnected)):
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
