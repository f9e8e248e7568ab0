#![forbid(unsafe_code)]
//! Minimal I/O-free userspace TCP for the iWARP fast path, beside the other
//! transports over `iwarp-net`'s Ethernet/IPv4 interface.
//!
//! The crate never touches a socket, a clock or a device: callers hand it
//! bytes (and, later, `now`) and take bytes back, so one core serves an
//! AF_XDP loop, a DPDK loop and the deterministic simulator alike.
//!
//! * [`wire`]: TCP with its options; Ethernet II, ARP, IPv4, ICMP, UDP and
//!   the RFC 1071 checksum are `iwarp-net`'s, re-exported here (as is
//!   [`arp`], the neighbour cache);
//! * [`iface`]: TCP's part of `iwarp-net`'s interface
//!   ([`iface::TcpInterface`]): the checksum check of a received segment
//!   (the partial-checksum diagnosis included) and the framing of one to
//!   send, its payload gathered from the send buffer or written in place
//!   in the device's buffer; the interface's types are re-exported there;
//! * [`tcp`]: one TCP connection (RFC 9293) with RFC 6298 timers, SACK loss
//!   recovery (RFC 6675, RFC 6937, RFC 8985 RACK-TLP, RFC 2883 D-SACK),
//!   window scaling and timestamps, RFC 5961 challenge ACKs, and in-order
//!   payload handed straight from the received frame to the caller;
//! * [`cc`]: congestion control behind a trait, NewReno and CUBIC (RFC 9438).
//!
//! # What a peer can make us hold
//!
//! Every store a remote peer can fill is bounded, and no per-segment work
//! walks a list the peer grows:
//!
//! * **Out-of-order data** (per connection): at most
//!   [`tcp::Config::max_ooo_ranges`] (default 64) coalesced ranges, in a
//!   buffer of at most one receive window (at most [`tcp::Config::rcv_buf`],
//!   default 1 MiB). A segment that would open one more range is dropped
//!   unacknowledged (the peer sends it again). A segment costs O(log ranges)
//!   plus its length; SACK blocks come from a four-entry list.
//! * **SACK scoreboard** (per connection): at most
//!   [`tcp::Config::max_sack_ranges`] (default 32) merged ranges, all inside
//!   (SND.UNA, SND.MAX]; blocks outside are ignored, and when full the
//!   shortest range is forgotten (we may resend data the peer holds). A
//!   retransmission timeout keeps it (what SACK shows arrived is not resent)
//!   unless the peer reneged. Lookups are a binary search; loss marking and
//!   pipe are one pass over it.
//! * **Half-open connections** (per listener): at most `max_half_open`, and
//!   with the accept queue at most `backlog`; each is one
//!   [`tcp::Connection`] with no data buffered, alive at most through
//!   [`listen::Listener::SYN_ACK_RETRIES`] (default 5) SYN-ACK
//!   retransmissions, about 63 s with the default 1 s initial RTO. When full,
//!   a new SYN evicts the oldest one whose SYN-ACK was already retransmitted
//!   (RFC 4987 §3.4); while all are younger than one RTO, new SYNs are
//!   refused. Lookups are linear in `max_half_open`.
//! * **Established, not yet accepted connections** (per listener): within
//!   `backlog`.
//! * **A closed receive window** (per connection): while the peer keeps
//!   its window at zero with our data or FIN waiting, we probe; the
//!   connection is aborted ([`tcp::TcpError::TimedOut`]) after
//!   [`tcp::Config::max_retransmits`] probes in a row without any ACK, or
//!   once the window has stayed closed for [`tcp::Config::persist_timeout`]
//!   (default 120 s) however the peer answers, so a graceful close ends.
//!
//! What the application queues ([`tcp::Config::snd_buf`]) and the in-order
//! data it is handed are its own to bound.
#![warn(missing_docs)]

pub use iwarp_net::arp;
pub mod cc;
pub mod iface;
pub mod listen;
mod reasm;
mod sack;
mod stats_fmt;
pub mod tcp;
pub mod wire;
