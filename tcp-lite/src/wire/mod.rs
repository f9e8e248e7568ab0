//! Wire formats of Ethernet II, IPv4 (RFC 791) and TCP (RFC 9293).
//!
//! The TCP header lives here; Ethernet, ARP, IPv4, ICMPv4, UDP, the
//! checksum and the shared error type are `iwarp_net::wire`'s, re-exported
//! at their old paths.
//!
//! Each header has two faces, as in smoltcp:
//!
//! - a zero-copy view (`Frame<T>` / `Packet<T>` over `T: AsRef<[u8]>`) with
//!   getters named after the RFC fields and setters when `T: AsMut<[u8]>`.
//!   `new_checked` validates the lengths the header declares, so that every
//!   getter of a checked view is in bounds; `new_unchecked` does not, and its
//!   field getters panic on a buffer too short for the field they read
//!   (options and payload are cut short to the buffer instead);
//! - a plain `Repr` with `parse` (validates the lengths, version and
//!   checksum), `buffer_len` and `emit` (checks the buffer and the field
//!   ranges and fills in the checksum; never panics).
//!
//! Code points (`EtherType`, IP `Protocol`, TCP `Flags`) are newtypes that keep
//! values this crate does not know. Errors say which layer and field failed
//! and the lengths involved, without heap data.
//!
//! A received frame is peeled layer by layer:
//!
//! ```
//! use tcp_lite::wire::{EthernetFrame, EtherType, IpProtocol, Ipv4Packet, Ipv4Repr, TcpPacket, TcpRepr};
//!
//! fn tcp_payload_len(bytes: &[u8]) -> Result<usize, tcp_lite::wire::Error> {
//!     let eth = EthernetFrame::new_checked(bytes)?;
//!     if eth.ethertype() != EtherType::IPV4 {
//!         return Ok(0);
//!     }
//!     let ip = Ipv4Packet::new_checked(eth.payload())?;
//!     let ip_repr = Ipv4Repr::parse(&ip)?;
//!     if ip_repr.protocol != IpProtocol::TCP {
//!         return Ok(0);
//!     }
//!     let tcp = TcpPacket::new_checked(ip.payload())?;
//!     let tcp_repr = TcpRepr::parse(&tcp, &ip_repr.src_addr, &ip_repr.dst_addr)?;
//!     Ok(tcp_repr.payload.len())
//! }
//! # let _ = tcp_payload_len(&[]);
//! ```

pub use iwarp_net::wire::{arp, checksum, ethernet, icmpv4, ipv4, udp, Error, Layer};
use iwarp_net::wire::{clamp, read_u16, read_u32, write_u16, write_u32};
pub use iwarp_net::wire::{
    ArpError, ArpHardware, ArpOperation, ArpPacket, ArpRepr, EtherType, EthernetAddress,
    EthernetFrame, EthernetRepr, Icmpv4Error, Icmpv4Message, Icmpv4Packet, Icmpv4Repr, IpProtocol,
    Ipv4Address, Ipv4Packet, Ipv4Repr, UdpPacket, UdpRepr, ARP_PACKET_LEN, ETHERNET_HEADER_LEN,
    ICMPV4_HEADER_LEN, IPV4_HEADER_LEN, UDP_HEADER_LEN,
};

pub mod tcp;

pub use tcp::{
    Flags as TcpFlags, Packet as TcpPacket, Repr as TcpRepr, TcpOption, Timestamp as TcpTimestamp,
    HEADER_LEN as TCP_HEADER_LEN,
};
