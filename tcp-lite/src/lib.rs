#![forbid(unsafe_code)]
//! Minimal I/O-free userspace Ethernet/IPv4/TCP for the iWARP fast path.
//!
//! The crate never touches a socket, a clock or a device: callers hand it
//! bytes (and, later, `now`) and take bytes back, so one core serves an
//! AF_XDP loop, a DPDK loop and the deterministic simulator alike. This
//! release has the wire formats only ([`wire`]: Ethernet II, IPv4, TCP with
//! its options, and the RFC 1071 checksum); the TCP state machine lands
//! later, on top of these types.
#![warn(missing_docs)]

pub mod wire;
