//! Ethernet II frames (IEEE 802.3 clause 3.2.6 "Length/Type" used as a type;
//! RFC 894 for IPv4 over Ethernet).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                 Destination Address (6 octets)                |
//! +                               +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                               |                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+                               +
//! |                   Source Address (6 octets)                   |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           EtherType           |  Payload ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The frame check sequence is not part of the view (devices strip it), and
//! 802.1Q tags are not interpreted: a tagged frame shows EtherType 0x8100.

use core::fmt;

use super::{clamp, read_u16, write_u16, Error, Layer};

/// Length of the Ethernet II header.
pub const HEADER_LEN: usize = 14;

mod field {
    use core::ops::Range;

    pub const DESTINATION: Range<usize> = 0..6;
    pub const SOURCE: Range<usize> = 6..12;
    pub const ETHERTYPE: usize = 12;
    pub const PAYLOAD: usize = 14;
}

/// A 48-bit MAC address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 6]);

impl Address {
    /// ff:ff:ff:ff:ff:ff.
    pub const BROADCAST: Address = Address([0xff; 6]);

    /// The address from the first six octets of `data`, if there are six.
    #[inline]
    pub fn from_bytes(data: &[u8]) -> Option<Address> {
        data.get(..6)
            .and_then(|b| <[u8; 6]>::try_from(b).ok())
            .map(Address)
    }

    /// The octets.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 6] {
        &self.0
    }

    /// I/G bit clear: an individual (unicast) address.
    #[inline]
    pub const fn is_unicast(&self) -> bool {
        self.0[0] & 0x01 == 0
    }

    /// All ones.
    #[inline]
    pub fn is_broadcast(&self) -> bool {
        *self == Self::BROADCAST
    }

    /// I/G bit set: a group address (broadcast included).
    #[inline]
    pub const fn is_multicast(&self) -> bool {
        self.0[0] & 0x01 != 0
    }

    /// U/L bit set: a locally administered address.
    #[inline]
    pub const fn is_local(&self) -> bool {
        self.0[0] & 0x02 != 0
    }
}

impl From<[u8; 6]> for Address {
    fn from(octets: [u8; 6]) -> Self {
        Address(octets)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// The EtherType field. Values this crate does not know are kept as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EtherType(pub u16);

impl EtherType {
    /// Internet Protocol version 4 (RFC 894).
    pub const IPV4: EtherType = EtherType(0x0800);
    /// Address Resolution Protocol (RFC 826).
    pub const ARP: EtherType = EtherType(0x0806);
    /// IEEE 802.1Q VLAN tag.
    pub const VLAN: EtherType = EtherType(0x8100);
    /// Internet Protocol version 6 (RFC 2464).
    pub const IPV6: EtherType = EtherType(0x86dd);

    /// The protocol's name, when it is one of the constants above.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0x0800 => Some("IPv4"),
            0x0806 => Some("ARP"),
            0x8100 => Some("802.1Q"),
            0x86dd => Some("IPv6"),
            _ => None,
        }
    }
}

impl From<u16> for EtherType {
    fn from(value: u16) -> Self {
        EtherType(value)
    }
}

impl From<EtherType> for u16 {
    fn from(value: EtherType) -> Self {
        value.0
    }
}

impl fmt::Debug for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "EtherType({n})"),
            None => write!(f, "EtherType({:#06x})", self.0),
        }
    }
}

impl fmt::Display for EtherType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{:#06x}", self.0),
        }
    }
}

/// A zero-copy view of an Ethernet II frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Frame<T> {
    /// Wrap a buffer without checking it. The address and EtherType getters
    /// and setters panic if the buffer is shorter than [`HEADER_LEN`]; the
    /// payload of such a buffer is empty.
    pub const fn new_unchecked(buffer: T) -> Frame<T> {
        Frame { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Frame<T>, Error> {
        let frame = Self::new_unchecked(buffer);
        frame.check_len()?;
        Ok(frame)
    }

    /// Whether the buffer holds the whole header.
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            Err(Error::Truncated {
                layer: Layer::Ethernet,
                needed: HEADER_LEN,
                got,
            })
        } else {
            Ok(())
        }
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Header length (always [`HEADER_LEN`]).
    pub const fn header_len() -> usize {
        HEADER_LEN
    }

    /// Destination Address.
    pub fn dst_addr(&self) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::DESTINATION]);
        Address(a)
    }

    /// Source Address.
    pub fn src_addr(&self) -> Address {
        let mut a = [0u8; 6];
        a.copy_from_slice(&self.buffer.as_ref()[field::SOURCE]);
        Address(a)
    }

    /// EtherType.
    pub fn ethertype(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::ETHERTYPE))
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Frame<&'a T> {
    /// The payload: everything after the header, padding included (an upper
    /// layer with a length field, such as IPv4, trims it).
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[clamp(field::PAYLOAD, data.len(), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Frame<T> {
    /// Set Destination Address.
    pub fn set_dst_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::DESTINATION].copy_from_slice(&value.0);
    }

    /// Set Source Address.
    pub fn set_src_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::SOURCE].copy_from_slice(&value.0);
    }

    /// Set EtherType.
    pub fn set_ethertype(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::ETHERTYPE, value.0);
    }

    /// The payload, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.buffer.as_ref().len();
        &mut self.buffer.as_mut()[clamp(field::PAYLOAD, len, len)]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Frame<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An Ethernet II header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source Address.
    pub src_addr: Address,
    /// Destination Address.
    pub dst_addr: Address,
    /// EtherType.
    pub ethertype: EtherType,
}

impl Repr {
    /// Parse a frame's header.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(frame: &Frame<&T>) -> Result<Repr, Error> {
        frame.check_len()?;
        Ok(Repr {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            ethertype: frame.ethertype(),
        })
    }

    /// Octets the header takes (the payload is the caller's).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write the header into the start of `frame`'s buffer.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut Frame<T>) -> Result<(), Error> {
        frame.check_len()?;
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        frame.set_ethertype(self.ethertype);
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Ethernet II src={} dst={} type={}",
            self.src_addr, self.dst_addr, self.ethertype
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An ARP request captured from Linux 6.18 on a TAP device: who has
    /// 192.168.10.2? tell 192.168.10.1.
    static ARP_FRAME: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, // destination: broadcast
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, // source
        0x08, 0x06, // ARP
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // htype ptype hlen plen oper
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0xc0, 0xa8, 0x0a, 0x01, // sha spa
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0x0a, 0x02, // tha tpa
    ];

    #[test]
    fn parse_literal() {
        let frame = Frame::new_checked(&ARP_FRAME[..]).unwrap();
        assert_eq!(frame.dst_addr(), Address::BROADCAST);
        assert!(frame.dst_addr().is_broadcast() && frame.dst_addr().is_multicast());
        assert_eq!(frame.src_addr(), Address([0x02, 0, 0, 0, 0, 0x01]));
        assert!(frame.src_addr().is_unicast() && frame.src_addr().is_local());
        assert_eq!(frame.ethertype(), EtherType::ARP);
        assert_eq!(frame.payload(), &ARP_FRAME[14..]);
        let repr = Repr::parse(&frame).unwrap();
        assert_eq!(
            repr,
            Repr {
                src_addr: Address([0x02, 0, 0, 0, 0, 0x01]),
                dst_addr: Address::BROADCAST,
                ethertype: EtherType::ARP,
            }
        );
        assert_eq!(
            repr.to_string(),
            "Ethernet II src=02:00:00:00:00:01 dst=ff:ff:ff:ff:ff:ff type=ARP"
        );
    }

    #[test]
    fn emit_literal() {
        let repr = Repr {
            src_addr: Address([0x02, 0, 0, 0, 0, 0x01]),
            dst_addr: Address::BROADCAST,
            ethertype: EtherType::ARP,
        };
        let mut buf = [0u8; 42];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        repr.emit(&mut frame).unwrap();
        frame.payload_mut().copy_from_slice(&ARP_FRAME[14..]);
        assert_eq!(buf, ARP_FRAME);
    }

    #[test]
    fn setters() {
        let mut buf = [0u8; 14];
        let mut frame = Frame::new_unchecked(&mut buf[..]);
        frame.set_dst_addr(Address([1, 2, 3, 4, 5, 6]));
        frame.set_src_addr(Address([7, 8, 9, 10, 11, 12]));
        frame.set_ethertype(EtherType::IPV4);
        assert_eq!(buf, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x08, 0x00]);
    }

    #[test]
    fn unknown_ethertype_is_kept() {
        let mut buf = ARP_FRAME;
        buf[12..14].copy_from_slice(&[0x88, 0xb5]); // local experimental
        let repr = Repr::parse(&Frame::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(repr.ethertype, EtherType(0x88b5));
        assert_eq!(repr.ethertype.name(), None);
        assert_eq!(format!("{:?}", repr.ethertype), "EtherType(0x88b5)");
        let mut out = [0u8; 14];
        repr.emit(&mut Frame::new_unchecked(&mut out[..])).unwrap();
        assert_eq!(out, buf[..14]);
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..HEADER_LEN {
            assert_eq!(
                Frame::new_checked(&ARP_FRAME[..len]),
                Err(Error::Truncated {
                    layer: Layer::Ethernet,
                    needed: 14,
                    got: len
                })
            );
            let mut buf = [0u8; HEADER_LEN];
            let repr = Repr::parse(&Frame::new_unchecked(&ARP_FRAME[..])).unwrap();
            assert!(repr
                .emit(&mut Frame::new_unchecked(&mut buf[..len]))
                .is_err());
        }
        assert!(Frame::new_checked(&ARP_FRAME[..14]).is_ok());
        assert_eq!(Frame::new_checked(&ARP_FRAME[..14]).unwrap().payload(), &[]);
    }

    #[test]
    fn unchecked_short_buffer_has_empty_payload() {
        assert_eq!(Frame::new_unchecked(&ARP_FRAME[..3]).payload(), &[]);
        let mut short = [0u8; 5];
        assert!(Frame::new_unchecked(&mut short[..])
            .payload_mut()
            .is_empty());
    }

    #[test]
    fn address_from_bytes() {
        assert_eq!(Address::from_bytes(&[1, 2, 3, 4, 5]), None);
        assert_eq!(
            Address::from_bytes(&[1, 2, 3, 4, 5, 6, 7]),
            Some(Address([1, 2, 3, 4, 5, 6]))
        );
    }
}
