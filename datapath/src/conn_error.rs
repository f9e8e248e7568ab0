//! Why a connection failed: one type for both transports.
//!
//! The stack reports a failed open ([`Output::Failed`](crate::stack::Output::Failed)),
//! a connection that ended badly ([`Output::Closed`](crate::stack::Output::Closed))
//! and a failed byte stream with the same [`ConnError`], whatever carried
//! the connection. Each variant names the transport event behind it, so an
//! SCTP ABORT is no longer reported as a TCP RST, and a refusal made here
//! before anything reached the wire says why.

use sctp_lite::assoc::CloseReason;
use tcp_lite::tcp::TcpError;

/// Why a connection failed (TCP or SCTP).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ConnError {
    /// TCP: a RST answered our SYN (RFC 9293 §3.10.7.3): nothing listens
    /// on that port.
    Refused,
    /// TCP: the peer reset the connection (RST).
    Reset,
    /// The transport gave up retransmitting: TCP's R2 (RFC 9293 §3.8.3),
    /// or SCTP's Max.Init.Retransmits / Association.Max.Retrans
    /// (RFC 9260 §5.1, §8.1).
    TimedOut,
    /// SCTP: the peer sent ABORT (RFC 9260 §3.3.7), with its first error
    /// cause code if it gave one. In answer to our INIT it means nothing
    /// listens there (§8.4) or the peer has no room.
    PeerAbort(Option<u16>),
    /// SCTP: the peer's INIT or INIT ACK did not indicate the DDP
    /// adaptation layer (RFC 5043 §11.1), so we aborted the association.
    AdaptationRefused,
    /// SCTP: we aborted the association on the peer's protocol violation
    /// or on a bound it exceeded; the error cause code we sent.
    ProtocolError(u16),
    /// Refused here before anything was sent: the stack has no SCTP part,
    /// an association with that peer and those ports exists, or no
    /// association slot is free.
    Local(&'static str),
}

impl ConnError {
    /// Which transport reported it (`"TCP"` or `"SCTP"`; `None` for a
    /// refusal made here).
    pub fn transport(&self) -> Option<&'static str> {
        match self {
            ConnError::Refused | ConnError::Reset => Some("TCP"),
            ConnError::PeerAbort(_)
            | ConnError::AdaptationRefused
            | ConnError::ProtocolError(_) => Some("SCTP"),
            ConnError::TimedOut | ConnError::Local(_) => None,
        }
    }

    /// How an SCTP association that ended with `reason` failed its
    /// connection (`None`: it ended cleanly).
    pub fn from_sctp(reason: &CloseReason) -> Option<ConnError> {
        match *reason {
            CloseReason::Shutdown => None,
            // Our own abort of a connection that was still opening: the
            // user's abort, reported as the association's end.
            CloseReason::LocalAbort => Some(ConnError::Local("aborted here")),
            CloseReason::PeerAbort(cause) => Some(ConnError::PeerAbort(cause)),
            CloseReason::Timeout => Some(ConnError::TimedOut),
            CloseReason::AdaptationRefused => Some(ConnError::AdaptationRefused),
            CloseReason::ProtocolError(cause) => Some(ConnError::ProtocolError(cause)),
        }
    }
}

impl From<TcpError> for ConnError {
    fn from(e: TcpError) -> Self {
        match e {
            TcpError::Refused => ConnError::Refused,
            TcpError::Reset => ConnError::Reset,
            TcpError::TimedOut => ConnError::TimedOut,
        }
    }
}

impl core::fmt::Display for ConnError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            ConnError::Refused => f.write_str("connection refused (TCP RST)"),
            ConnError::Reset => f.write_str("connection reset by peer (TCP RST)"),
            ConnError::TimedOut => f.write_str("connection timed out (no answer)"),
            ConnError::PeerAbort(Some(c)) => {
                write!(f, "peer aborted the SCTP association (cause {c})")
            }
            ConnError::PeerAbort(None) => f.write_str("peer aborted the SCTP association"),
            ConnError::AdaptationRefused => {
                f.write_str("peer does not offer DDP over SCTP (no adaptation indication)")
            }
            ConnError::ProtocolError(c) => {
                write!(
                    f,
                    "SCTP association aborted here on a peer's error (cause {c})"
                )
            }
            ConnError::Local(why) => write!(f, "refused here: {why}"),
        }
    }
}

impl std::error::Error for ConnError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_transport_cause_keeps_its_name() {
        assert_eq!(ConnError::from(TcpError::Refused), ConnError::Refused);
        assert_eq!(ConnError::from(TcpError::Reset), ConnError::Reset);
        assert_eq!(ConnError::from(TcpError::TimedOut), ConnError::TimedOut);
        assert_eq!(ConnError::from_sctp(&CloseReason::Shutdown), None);
        assert_eq!(
            ConnError::from_sctp(&CloseReason::PeerAbort(Some(12))),
            Some(ConnError::PeerAbort(Some(12)))
        );
        assert_eq!(
            ConnError::from_sctp(&CloseReason::Timeout),
            Some(ConnError::TimedOut)
        );
        assert_eq!(
            ConnError::from_sctp(&CloseReason::AdaptationRefused),
            Some(ConnError::AdaptationRefused)
        );
        assert_eq!(
            ConnError::from_sctp(&CloseReason::ProtocolError(13)),
            Some(ConnError::ProtocolError(13))
        );
        assert_eq!(
            ConnError::from_sctp(&CloseReason::LocalAbort),
            Some(ConnError::Local("aborted here"))
        );
        assert_eq!(ConnError::Refused.transport(), Some("TCP"));
        assert_eq!(ConnError::PeerAbort(None).transport(), Some("SCTP"));
        assert_eq!(ConnError::Local("x").transport(), None);
        assert_eq!(
            ConnError::PeerAbort(Some(12)).to_string(),
            "peer aborted the SCTP association (cause 12)"
        );
        assert_eq!(
            ConnError::Local("too many associations").to_string(),
            "refused here: too many associations"
        );
    }
}
