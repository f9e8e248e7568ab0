#![forbid(unsafe_code)]
//! The DDP adaptation of SCTP (RFC 5043).
