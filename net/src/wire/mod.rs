//! Wire formats of Ethernet II, ARP (RFC 826), IPv4 (RFC 791), ICMPv4
//! (RFC 792) and UDP (RFC 768), with the RFC 1071 checksum and the error
//! type the transports' headers share (tcp-lite's TCP header uses it too).
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
//! Code points (`EtherType`, IP `Protocol`) are newtypes that keep values
//! this crate does not know. Errors say which layer and field failed and
//! the lengths involved, without heap data.
//!
//! A received frame is peeled layer by layer (or in one call, by
//! [`crate::ingress::parse`]):
//!
//! ```
//! use iwarp_net::wire::{EthernetFrame, EtherType, IpProtocol, Ipv4Packet, Ipv4Repr};
//!
//! fn ip_payload_len(bytes: &[u8]) -> Result<usize, iwarp_net::wire::Error> {
//!     let eth = EthernetFrame::new_checked(bytes)?;
//!     if eth.ethertype() != EtherType::IPV4 {
//!         return Ok(0);
//!     }
//!     let ip = Ipv4Packet::new_checked(eth.payload())?;
//!     let ip_repr = Ipv4Repr::parse(&ip)?;
//!     if ip_repr.protocol != IpProtocol::SCTP {
//!         return Ok(0);
//!     }
//!     Ok(ip.payload().len())
//! }
//! # let _ = ip_payload_len(&[]);
//! ```

use core::fmt;

pub mod arp;
pub mod ethernet;
pub mod icmpv4;
pub mod ipv4;
pub mod udp;

pub use arp::{
    Error as ArpError, Hardware as ArpHardware, Operation as ArpOperation, Packet as ArpPacket,
    Repr as ArpRepr, PACKET_LEN as ARP_PACKET_LEN,
};
pub use ethernet::{
    Address as EthernetAddress, EtherType, Frame as EthernetFrame, Repr as EthernetRepr,
    HEADER_LEN as ETHERNET_HEADER_LEN,
};
pub use icmpv4::{
    Error as Icmpv4Error, Message as Icmpv4Message, Packet as Icmpv4Packet, Repr as Icmpv4Repr,
    HEADER_LEN as ICMPV4_HEADER_LEN,
};
pub use ipv4::{
    Address as Ipv4Address, Packet as Ipv4Packet, Protocol as IpProtocol, Repr as Ipv4Repr,
    HEADER_LEN as IPV4_HEADER_LEN,
};
pub use udp::{Packet as UdpPacket, Repr as UdpRepr, HEADER_LEN as UDP_HEADER_LEN};

/// The header an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Layer {
    /// Ethernet II header.
    Ethernet,
    /// IPv4 header.
    Ipv4,
    /// TCP header, options included.
    Tcp,
    /// UDP header.
    Udp,
}

impl fmt::Display for Layer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Layer::Ethernet => "Ethernet",
            Layer::Ipv4 => "IPv4",
            Layer::Tcp => "TCP",
            Layer::Udp => "UDP",
        })
    }
}

/// Why bytes could not be parsed, or a `Repr` could not be emitted.
///
/// Each variant names the layer, the field where one applies, and the
/// lengths or values involved. Field names are the RFC's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header, or than a length the header
    /// itself declares (IPv4 Total Length, TCP Data Offset), or than what
    /// `emit` needs.
    Truncated {
        /// Header concerned.
        layer: Layer,
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
    /// A length field holds a value outside what the format allows
    /// (IHL below 5, Total Length below the header length, Data Offset below 5).
    BadLength {
        /// Header concerned.
        layer: Layer,
        /// The length field, by its RFC name.
        field: &'static str,
        /// The length it declares, in octets.
        value: usize,
        /// Smallest acceptable length, in octets.
        min: usize,
    },
    /// The IP version field is not 4.
    BadVersion {
        /// Header concerned.
        layer: Layer,
        /// Version found.
        version: u8,
    },
    /// The checksum does not verify.
    BadChecksum {
        /// Header concerned.
        layer: Layer,
        /// Checksum field as received.
        found: u16,
        /// Checksum the contents call for.
        computed: u16,
    },
    /// A TCP option with an impossible length (RFC 9293 §3.2 MUST-7), or a
    /// known option whose length is not the one its RFC fixes.
    BadOption {
        /// Option kind.
        kind: u8,
        /// Offset of the option's kind octet from the start of the TCP header.
        offset: usize,
        /// The option's length octet (0 when the header ends before it).
        len: u8,
        /// Octets of option space left at `offset`.
        room: usize,
    },
    /// `emit` was given a value that does not fit its field.
    TooLarge {
        /// Header concerned.
        layer: Layer,
        /// The field, by its RFC name.
        field: &'static str,
        /// The value given.
        value: usize,
        /// The largest value the field holds.
        max: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { layer, needed, got } => {
                write!(f, "{layer}: truncated, need {needed} octets, got {got}")
            }
            Error::BadLength {
                layer,
                field,
                value,
                min,
            } => write!(
                f,
                "{layer}: {field} declares {value} octets, at least {min} required"
            ),
            Error::BadVersion { layer, version } => {
                write!(f, "{layer}: version {version} is not 4")
            }
            Error::BadChecksum {
                layer,
                found,
                computed,
            } => write!(
                f,
                "{layer}: checksum {found:#06x} does not verify, expected {computed:#06x}"
            ),
            Error::BadOption {
                kind,
                offset,
                len,
                room,
            } => write!(
                f,
                "TCP: option kind {kind} at offset {offset} has length {len} ({room} octets of options left)"
            ),
            Error::TooLarge {
                layer,
                field,
                value,
                max,
            } => write!(f, "{layer}: {field} {value} exceeds {max}"),
        }
    }
}

impl std::error::Error for Error {}

/// Big-endian field access for views (here and in the transports'
/// headers). The caller (a checked view) has validated the length; an
/// unchecked view panics here, as documented.
#[doc(hidden)]
#[inline]
pub fn read_u16(data: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([data[at], data[at + 1]])
}

#[doc(hidden)]
#[inline]
pub fn read_u32(data: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([data[at], data[at + 1], data[at + 2], data[at + 3]])
}

#[doc(hidden)]
#[inline]
pub fn write_u16(data: &mut [u8], at: usize, value: u16) {
    data[at..at + 2].copy_from_slice(&value.to_be_bytes());
}

/// `start..end` limited to a buffer of `len` octets: the header-derived
/// ranges of a view (options, payload) yield short slices instead of
/// panicking when an unchecked view's buffer is short.
#[doc(hidden)]
#[inline]
pub fn clamp(start: usize, end: usize, len: usize) -> core::ops::Range<usize> {
    let end = end.min(len);
    start.min(end)..end
}

#[doc(hidden)]
#[inline]
pub fn write_u32(data: &mut [u8], at: usize, value: u32) {
    data[at..at + 4].copy_from_slice(&value.to_be_bytes());
}

/// The Internet checksum (RFC 1071).
///
/// [`data`](checksum::data) returns the folded one's complement *sum*, not its complement;
/// a header's checksum field holds `!sum` computed with the field zeroed, and
/// a header verifies when the sum over it, checksum field included, is
/// `0xffff` (RFC 1071 §1, step 3).
pub mod checksum {
    use super::ipv4::{Address, Protocol};

    /// Fold a wide one's complement accumulator to 16 bits
    /// (RFC 1071 §2 (C): "end-around carry").
    #[inline]
    fn fold(mut acc: u64) -> u16 {
        while acc > 0xffff {
            acc = (acc & 0xffff) + (acc >> 16);
        }
        acc as u16
    }

    /// One's complement sum of `data` as big-endian 16-bit words, an odd last
    /// octet padded with a zero octet on the right (RFC 1071 §1, step 2).
    ///
    /// This is on the per-octet path (every segment sent and received), so
    /// it sums 32-bit words in the machine's own byte order into 64-bit
    /// lanes (no byte swap per word; the loop vectorises) and swaps the
    /// folded 16-bit result once: RFC 1071 §2 (B) byte order independence
    /// and (C) parallel summation. The last 0–3 octets are added as
    /// big-endian words.
    pub fn data(data: &[u8]) -> u16 {
        if data.len() <= SMALL {
            return small(data);
        }
        let (body, tail) = data.split_at(data.len() & !3);
        // Each word is below 2^32: 2^32 words (16 GiB) before a lane could
        // overflow, far past any frame.
        let mut lanes = [0u64; 8];
        let mut blocks = body.chunks_exact(32);
        for b in &mut blocks {
            for (lane, w) in lanes.iter_mut().zip(b.chunks_exact(4)) {
                *lane += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
            }
        }
        let mut native: u64 = lanes.iter().sum();
        for w in blocks.remainder().chunks_exact(4) {
            native += u64::from(u32::from_ne_bytes([w[0], w[1], w[2], w[3]]));
        }
        let folded = fold(native);
        let mut acc = u64::from(if cfg!(target_endian = "little") {
            folded.swap_bytes()
        } else {
            folded
        });
        // The tail after the last whole 32-bit word starts at an even
        // offset, so its 16-bit words line up with the ones summed above.
        let mut pairs = tail.chunks_exact(2);
        for p in &mut pairs {
            acc += u64::from(u16::from_be_bytes([p[0], p[1]]));
        }
        if let [last] = pairs.remainder() {
            acc += u64::from(*last) << 8;
        }
        fold(acc)
    }

    /// Up to this many octets (headers: IPv4's 20, TCP's 20 to 60, a
    /// small segment), [`data`] sums plain big-endian 32-bit words: the
    /// eight-lane loop's setup and reduction cost more than it saves.
    const SMALL: usize = 64;

    /// [`data`] for short inputs: big-endian 32-bit words into one 64-bit
    /// accumulator (a 32-bit word folds to the sum of its two 16-bit
    /// halves, RFC 1071 §2 (C)), then the last 0–3 octets.
    #[inline]
    fn small(data: &[u8]) -> u16 {
        let mut words = data.chunks_exact(4);
        let mut acc: u64 = 0;
        for w in &mut words {
            acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
        }
        acc += match *words.remainder() {
            [a, b, c] => u64::from(u16::from_be_bytes([a, b])) + (u64::from(c) << 8),
            [a, b] => u64::from(u16::from_be_bytes([a, b])),
            [a] => u64::from(a) << 8,
            _ => 0,
        };
        fold(acc)
    }

    /// One's complement sum of partial sums.
    #[inline]
    pub fn combine(sums: &[u16]) -> u16 {
        fold(sums.iter().map(|&s| u64::from(s)).sum())
    }

    /// Sum of the IPv4 pseudo-header: source, destination, zero, protocol and
    /// the upper-layer length (RFC 9293 §3.1, "Checksum"; RFC 768 for UDP).
    #[inline]
    ///
    /// The three 32-bit words (source, destination, then zero, protocol
    /// and length) are added as such and folded once (RFC 1071 §2 (C)):
    /// no call to [`data`] for twelve octets on every segment.
    pub fn pseudo_header(src: &Address, dst: &Address, protocol: Protocol, length: u16) -> u16 {
        fold(
            u64::from(u32::from_be_bytes(src.0))
                + u64::from(u32::from_be_bytes(dst.0))
                + (u64::from(protocol.0) << 16)
                + u64::from(length),
        )
    }

    /// The checksum a header should carry, from `sum`, the sum over its
    /// octets with the checksum field as received (`found`) still in them:
    /// `sum - found` in one's complement arithmetic, complemented.
    #[inline]
    pub fn expected(sum: u16, found: u16) -> u16 {
        !combine(&[sum, !found])
    }
}

#[cfg(test)]
mod tests {
    use super::checksum;

    #[test]
    fn rfc1071_example() {
        // RFC 1071 §3: the sum of 00 01 f2 03 f4 f5 f6 f7 is ddf2.
        let bytes = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(checksum::data(&bytes), 0xddf2);
        // Any split point gives the same sum (RFC 1071 §2 (B)).
        assert_eq!(
            checksum::combine(&[checksum::data(&bytes[..4]), checksum::data(&bytes[4..])]),
            0xddf2
        );
    }

    #[test]
    fn odd_length_pads_right() {
        assert_eq!(checksum::data(&[0xab]), 0xab00);
        assert_eq!(checksum::data(&[0x12, 0x34, 0xab]), 0x12_34 + 0xab00);
        assert_eq!(checksum::data(&[]), 0);
    }

    #[test]
    fn wide_and_narrow_sums_agree() {
        // Reference: plain 16-bit summation, as written in RFC 1071 §4.1.
        fn narrow(d: &[u8]) -> u16 {
            let mut acc: u32 = 0;
            for c in d.chunks(2) {
                let hi = u32::from(c[0]) << 8;
                let lo = c.get(1).map_or(0, |&b| u32::from(b));
                acc += hi | lo;
                acc = (acc & 0xffff) + (acc >> 16);
            }
            acc as u16
        }
        let mut buf = [0u8; 1031];
        let mut x: u32 = 0x1234_5678;
        for b in buf.iter_mut() {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *b = (x >> 24) as u8;
        }
        // Every length, at several starting offsets (alignment), across
        // the 128-octet blocks of the wide loop and their tails.
        for start in 0..8 {
            for len in 0..=buf.len() - start {
                let d = &buf[start..start + len];
                assert_eq!(checksum::data(d), narrow(d), "start {start} len {len}");
            }
        }
        assert_eq!(checksum::data(&[0xff; 64]), 0xffff);
        // Carries out of every lane: all ones, jumbo-frame sized.
        assert_eq!(checksum::data(&[0xff; 9001]), narrow(&[0xff; 9001]));
        assert_eq!(checksum::data(&[0xff; 65536]), 0xffff);
    }

    #[test]
    fn the_pseudo_header_sums_as_its_twelve_octets() {
        let (src, dst) = (
            super::Ipv4Address::new(192, 168, 10, 1),
            super::Ipv4Address::new(255, 254, 10, 2),
        );
        for (proto, len) in [(6, 40), (17, 0xffff), (132, 0), (255, 0xfffe)] {
            let mut ph = [0u8; 12];
            ph[0..4].copy_from_slice(&src.0);
            ph[4..8].copy_from_slice(&dst.0);
            ph[9] = proto;
            ph[10..12].copy_from_slice(&u16::to_be_bytes(len));
            assert_eq!(
                checksum::pseudo_header(&src, &dst, super::IpProtocol(proto), len),
                checksum::data(&ph),
                "{proto} {len}"
            );
        }
    }

    #[test]
    fn expected_recovers_the_field() {
        let mut hdr = [
            0x45, 0x00, 0x00, 0x1c, 0, 0, 0, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        let good = !checksum::data(&hdr);
        hdr[10..12].copy_from_slice(&0x1234u16.to_be_bytes());
        assert_eq!(checksum::expected(checksum::data(&hdr), 0x1234), good);
    }
}
