#![forbid(unsafe_code)]
//! Minimal I/O-free userspace SCTP (RFC 9260) for DDP over SCTP (RFC 5043).
//!
//! Like `tcp-lite`, the crate never touches a socket, a clock or a random
//! source: callers hand it packets (the IP payload) and `now` in
//! nanoseconds, and take packets, events and the next deadline back.
//!
//! * [`wire`]: the common header with its CRC32c, and the chunks
//!   DATA, INIT, INIT-ACK, SACK, HEARTBEAT(-ACK), ABORT, SHUTDOWN(-ACK,
//!   -COMPLETE), COOKIE-ECHO/-ACK and ERROR, as zero-copy views and `Repr`s.
//! * [`mac`]: SipHash-2-4, the keyed hash behind the State Cookie MAC and
//!   the verification tags / initial TSNs this crate derives.
//! * [`assoc`]: one association (single path) and the [`assoc::Listener`]
//!   that answers INITs statelessly with a State Cookie.
pub mod assoc;
pub mod mac;
pub mod wire;
