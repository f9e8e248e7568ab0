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
//! * [`egress`]: the Ethernet and IPv4 headers of what an interface sends.
//!
//! The interface that owns the cache, the IPv4 identification and the send
//! path is `tcp_lite::iface::Interface` for now (it frames TCP segments in
//! place); SCTP sends through its generic IPv4 path.
#![warn(missing_docs)]

pub mod arp;
pub mod egress;
pub mod ingress;
pub mod wire;
