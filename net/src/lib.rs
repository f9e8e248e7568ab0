#![forbid(unsafe_code)]
//! I/O-free Ethernet II, ARP, IPv4, ICMPv4 and UDP: the network layer of
//! one interface, which the transports (`tcp-lite`, `sctp-lite` through
//! the datapath's glue) sit beside.
//!
//! Like the transports, the crate never touches a socket, a clock or a
//! device: callers hand it bytes and `now` and take bytes back.
//!
//! * [`wire`]: the headers (smoltcp-style views and `Repr`s), the RFC 1071
//!   checksum and the error type the transports' headers share;
//! * [`arp`]: the neighbour cache (RFC 826, RFC 1122 §2.3.2) with its
//!   bounded hold queue of packets waiting for resolution;
//! * [`ingress`]: a received frame parsed once, Ethernet → ARP or IPv4 →
//!   dispatched by IP protocol (TCP, SCTP, UDP, ICMP), as smoltcp's
//!   `process_ipv4` matches `next_header`;
//! * [`egress`]: the Ethernet and IPv4 headers of what an interface sends;
//! * [`iface`]: the interface itself ([`iface::Interface`]): one ARP cache,
//!   one IPv4 identification and one send path for every transport; ARP
//!   and ICMP Echo answered, TCP datagrams and SCTP packets (raw or inside
//!   UDP, RFC 6951) handed up, and datagrams of any protocol sent, their
//!   payload gathered or written in place in the device's buffer
//!   ([`iface::FrameSink`]). `tcp-lite` checks and frames TCP segments
//!   over it; it depends on neither transport;
//! * [`rss`]: receive-side scaling: the Toeplitz hash, the 128-entry
//!   indirection table from flow to receive queue, and the local port
//!   whose reply flow reaches a given queue.
#![warn(missing_docs)]

pub mod arp;
pub mod egress;
#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;
pub mod iface;
pub mod ingress;
pub mod rss;
mod stats_fmt;
pub mod wire;
