#![forbid(unsafe_code)]
//! Minimal I/O-free userspace Ethernet/IPv4/TCP for the iWARP fast path.
//!
//! The crate never touches a socket, a clock or a device: callers hand it
//! bytes (and, later, `now`) and take bytes back, so one core serves an
//! AF_XDP loop, a DPDK loop and the deterministic simulator alike.
//!
//! * [`wire`]: Ethernet II, IPv4, TCP with its options, and the RFC 1071 checksum;
//! * [`tcp`]: one TCP connection (RFC 9293) with RFC 6298 timers, NewReno,
//!   window scaling and timestamps, RFC 5961 challenge ACKs, and in-order
//!   payload handed straight from the received frame to the caller.
#![warn(missing_docs)]

pub mod arp;
pub mod iface;
pub mod listen;
mod reasm;
mod sack;
pub mod tcp;
pub mod wire;
