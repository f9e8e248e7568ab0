//! One typed error for the API's operations.

use iwarp_control::{SetupError, SetupFailure};
use iwarp_datapath::ConnError;
use iwarp_proto::mem::MemError;

/// What went wrong in an API call. No strings: each variant says what
/// happened, and carries what the caller may need to react.
///
/// A variant that wraps another crate's error (AF_XDP, DPDK, I/O, memory
/// table, MPA setup, post, entering a namespace) gives it back as its
/// [`source`](std::error::Error::source), so a reporter can walk the chain
/// and a caller can downcast to the backend's own type. `Display` already
/// includes the wrapped error's text, so printing `{e}` alone says all;
/// a reporter that prints every link repeats that text once.
///
/// More variants may come: match with a `_` arm.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// The AF_XDP backend could not be opened (no interface, no privileges,
    /// memlock, ...): the backend's own error says which. Feature `xdp`.
    #[cfg(feature = "xdp")]
    Backend(iwarp_xdp::Error),
    /// The DPDK backend failed (EAL, port, pool; or this build has no
    /// DPDK): its own error says which. Feature `dpdk`.
    #[cfg(feature = "dpdk")]
    Dpdk(iwarp_dpdk::Error),
    /// Our memif link failed to connect (no server, refused, a broken
    /// handshake, shared memory). Feature `memif`.
    #[cfg(feature = "memif")]
    Memif(std::io::Error),
    /// Entering the network namespace to open a device in
    /// (`HostOptions::netns`) failed.
    Netns {
        /// The namespace's path.
        path: std::path::PathBuf,
        /// What `open(2)` or `setns(2)` said.
        error: std::io::Error,
    },
    /// A memory table operation failed (unknown PD or STag, PD busy, ...).
    Memory(MemError),
    /// A region access outside its bounds.
    OutOfBounds(iwarp_memreg::OutOfBounds),
    /// The peer rejected the connection; its private data says why.
    Rejected {
        /// The rejecting Reply's private data.
        private_data: Vec<u8>,
    },
    /// The port already has a listener in this context.
    AddrInUse,
    /// The peer refused the connection: a TCP RST to our SYN, or an SCTP
    /// ABORT during setup (nothing listens there, or the peer does not
    /// offer DDP over SCTP).
    ConnectionRefused,
    /// The transport gave up (TCP or SCTP: no answer to the open or to
    /// data): the peer is unreachable.
    Unreachable,
    /// The connection was reset (TCP RST, or SCTP ABORT for a protocol
    /// error).
    ConnectionReset,
    /// The stack refused the connection before anything was sent: why
    /// (the context has no SCTP part, an association with that peer and
    /// those ports exists, no association slot is free).
    LocalRefused(&'static str),
    /// The MPA exchange did not finish in time, or a wait ran out.
    TimedOut,
    /// MPA setup failed for another reason (bad frame, no common RTR type,
    /// markers refused, insufficient IRD).
    Setup(SetupError),
    /// The poll loop's command queue is full: retry after polling.
    QueueFull,
    /// A post refused at once (shared receive queue full, too many SGEs).
    Post(iwarp_proto::qp::PostError),
    /// The poll loop is gone (the context was dropped or stopped).
    Stopped,
    /// A call that waits for the poll loop (connect, accept, listen,
    /// register, ...) was made from inside it, in a loop hook: it would
    /// wait forever.
    InLoop,
    /// An argument out of range (private data over 512 octets, zero depth).
    InvalidArgument(&'static str),
    /// `HostOptions::mtu` asks for more than the interface carries.
    MtuAboveInterface {
        /// The MTU asked for.
        requested: usize,
        /// The interface's MTU.
        interface: usize,
        /// The interface's name.
        iface: String,
    },
    /// A system call of the API's own failed (creating a CQ's
    /// notification eventfd, waiting on it).
    Io(std::io::Error),
    /// Not available on this context: what (iWARP over SCTP on a context
    /// of several poll loops, inline polling over several loops).
    Unsupported(&'static str),
    /// A memory operation (register, deregister, allocate, bind,
    /// invalidate) gave different results on the loops of a context of
    /// several poll loops, whose memory tables must agree: the tables no
    /// longer match (logged as a `tracing` error). What an allocation or
    /// registration created on the loops (a PD, a window, a region) is
    /// destroyed again on each before this is returned.
    LoopsDisagree,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            #[cfg(feature = "xdp")]
            Error::Backend(e) => write!(f, "backend: {e}"),
            #[cfg(feature = "dpdk")]
            Error::Dpdk(e) => write!(f, "DPDK: {e}"),
            #[cfg(feature = "memif")]
            Error::Memif(e) => write!(f, "memif: {e}"),
            Error::Netns { path, error } => {
                write!(f, "entering network namespace {}: {error}", path.display())
            }
            Error::Memory(e) => write!(f, "memory: {e}"),
            Error::OutOfBounds(e) => write!(f, "{e}"),
            Error::Rejected { private_data } => {
                write!(
                    f,
                    "rejected by the peer ({} octets of private data)",
                    private_data.len()
                )
            }
            Error::AddrInUse => f.write_str("port already listening"),
            Error::ConnectionRefused => f.write_str("connection refused"),
            Error::Unreachable => f.write_str("peer unreachable"),
            Error::ConnectionReset => f.write_str("connection reset"),
            Error::LocalRefused(why) => write!(f, "connection refused here: {why}"),
            Error::TimedOut => f.write_str("timed out"),
            Error::Setup(e) => write!(f, "{e}"),
            Error::QueueFull => f.write_str("command queue full"),
            Error::Post(e) => write!(f, "post refused: {e}"),
            Error::Stopped => f.write_str("the poll loop has stopped"),
            Error::InvalidArgument(what) => write!(f, "invalid argument: {what}"),
            Error::MtuAboveInterface {
                requested,
                interface,
                iface,
            } => write!(
                f,
                "MTU {requested} is above {iface}'s MTU {interface}: ask for at most \
                 {interface}, or raise the interface's (`ip link set dev {iface} mtu \
                 {requested}`, on both ends of the link)"
            ),
            Error::InLoop => f.write_str("a call that waits for the poll loop, made inside it"),
            Error::Io(e) => write!(f, "CQ notification descriptor: {e}"),
            Error::Unsupported(what) => write!(f, "not supported: {what}"),
            Error::LoopsDisagree => {
                f.write_str("a memory operation gave different results on the context's poll loops")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            #[cfg(feature = "xdp")]
            Error::Backend(e) => Some(e),
            #[cfg(feature = "dpdk")]
            Error::Dpdk(e) => Some(e),
            #[cfg(feature = "memif")]
            Error::Memif(e) => Some(e),
            Error::Netns { error, .. } => Some(error),
            Error::Memory(e) => Some(e),
            Error::OutOfBounds(e) => Some(e),
            Error::Setup(e) => Some(e),
            Error::Post(e) => Some(e),
            Error::Io(e) => Some(e),
            Error::Rejected { .. }
            | Error::AddrInUse
            | Error::ConnectionRefused
            | Error::Unreachable
            | Error::ConnectionReset
            | Error::LocalRefused(_)
            | Error::TimedOut
            | Error::QueueFull
            | Error::Stopped
            | Error::InLoop
            | Error::InvalidArgument(_)
            | Error::MtuAboveInterface { .. }
            | Error::Unsupported(_)
            | Error::LoopsDisagree => None,
        }
    }
}

impl From<MemError> for Error {
    fn from(e: MemError) -> Self {
        Error::Memory(e)
    }
}

#[cfg(feature = "dpdk")]
impl From<iwarp_dpdk::Error> for Error {
    fn from(e: iwarp_dpdk::Error) -> Self {
        Error::Dpdk(e)
    }
}

impl From<iwarp_memreg::OutOfBounds> for Error {
    fn from(e: iwarp_memreg::OutOfBounds) -> Self {
        Error::OutOfBounds(e)
    }
}

#[cfg(feature = "xdp")]
impl From<iwarp_xdp::Error> for Error {
    fn from(e: iwarp_xdp::Error) -> Self {
        Error::Backend(e)
    }
}

impl From<ConnError> for Error {
    fn from(e: ConnError) -> Self {
        match e {
            ConnError::Refused | ConnError::PeerAbort(_) | ConnError::AdaptationRefused => {
                Error::ConnectionRefused
            }
            ConnError::Reset | ConnError::ProtocolError(_) => Error::ConnectionReset,
            ConnError::TimedOut => Error::Unreachable,
            ConnError::Local(why) => Error::LocalRefused(why),
            // `ConnError` may grow: a cause not known here is a reset.
            _ => Error::ConnectionReset,
        }
    }
}

impl From<SetupError> for Error {
    fn from(e: SetupError) -> Self {
        match e.reason {
            SetupFailure::Rejected => Error::Rejected {
                private_data: e.peer_private_data,
            },
            SetupFailure::TimedOut => Error::TimedOut,
            _ => Error::Setup(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    /// Every link of `e`'s chain, outermost first.
    fn chain(e: &(dyn std::error::Error + 'static)) -> Vec<String> {
        let mut out = vec![e.to_string()];
        let mut at = e.source();
        while let Some(s) = at {
            out.push(s.to_string());
            at = s.source();
        }
        out
    }

    #[test]
    fn wrapped_errors_are_the_source() {
        let e = Error::Io(std::io::Error::from_raw_os_error(24));
        let links = chain(&e);
        assert_eq!(links.len(), 2, "{links:?}");
        let io = e.source().and_then(|s| s.downcast_ref::<std::io::Error>());
        assert_eq!(io.and_then(std::io::Error::raw_os_error), Some(24));

        #[cfg(feature = "xdp")]
        {
            let xdp = iwarp_xdp::Error::NoInterface {
                name: "veth9".into(),
            };
            let e = Error::from(xdp.clone());
            let src = e
                .source()
                .and_then(|s| s.downcast_ref::<iwarp_xdp::Error>());
            assert_eq!(src, Some(&xdp));
        }

        #[cfg(feature = "dpdk")]
        {
            let e = Error::from(iwarp_dpdk::Error::Unavailable);
            assert!(matches!(
                e.source()
                    .and_then(|s| s.downcast_ref::<iwarp_dpdk::Error>()),
                Some(iwarp_dpdk::Error::Unavailable)
            ));
        }

        let e = Error::Netns {
            path: "/var/run/netns/gone".into(),
            error: std::io::Error::from_raw_os_error(2),
        };
        assert_eq!(chain(&e).len(), 2);
        assert!(e.to_string().contains("/var/run/netns/gone"), "{e}");

        let e = Error::from(MemError::NoSuchStag);
        let src = e.source().and_then(|s| s.downcast_ref::<MemError>());
        assert_eq!(src, Some(&MemError::NoSuchStag));

        let post = iwarp_proto::qp::PostError::QueueFull;
        assert!(Error::Post(post)
            .source()
            .and_then(|s| s.downcast_ref::<iwarp_proto::qp::PostError>())
            .is_some());

        for leaf in [Error::TimedOut, Error::Stopped, Error::ConnectionReset] {
            assert!(leaf.source().is_none(), "{leaf}");
        }
    }
}
