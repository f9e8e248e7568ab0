//! ARP packets (RFC 826, "Packet format").
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |       Hardware type (hrd)     |      Protocol type (pro)      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |   hln (6)     |    pln (4)    |        Operation (op)         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Sender hardware address (sha, hln octets) ...
//! |  Sender protocol address (spa, pln octets) ...
//! |  Target hardware address (tha, hln octets) ...
//! |  Target protocol address (tpa, pln octets) ...
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The [`Packet`] view reads any hardware and protocol type: the address
//! fields are placed by `hln` and `pln`. [`Repr`] is Ethernet/IPv4 only
//! (hrd 1, pro 0x0800, hln 6, pln 4, op request or reply); anything else is
//! reported as an [`Error`] carrying the value found. Octets after the last
//! address (Ethernet padding to 60 octets) are ignored.

use core::fmt;

use super::ethernet::{Address as EthernetAddress, EtherType};
use super::ipv4::Address as Ipv4Address;
use super::{read_u16, write_u16};

/// Length of the fixed part (hrd, pro, hln, pln, op).
pub const FIXED_LEN: usize = 8;
/// Length of an Ethernet/IPv4 ARP packet: 8 + 2 × (6 + 4).
pub const PACKET_LEN: usize = 28;

mod field {
    pub const HTYPE: usize = 0;
    pub const PTYPE: usize = 2;
    pub const HLEN: usize = 4;
    pub const PLEN: usize = 5;
    pub const OPER: usize = 6;
    pub const SHA: usize = 8;
}

/// The hardware type field, ar$hrd (IANA "Hardware Types"). Values this
/// crate does not know are kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Hardware(pub u16);

impl Hardware {
    /// Ethernet (10 Mb and every later speed).
    pub const ETHERNET: Hardware = Hardware(1);
}

impl fmt::Debug for Hardware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Hardware::ETHERNET => f.write_str("Hardware(Ethernet)"),
            Hardware(v) => write!(f, "Hardware({v})"),
        }
    }
}

/// The operation field, ar$op. Values this crate does not know are kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Operation(pub u16);

impl Operation {
    /// ares_op$REQUEST (RFC 826).
    pub const REQUEST: Operation = Operation(1);
    /// ares_op$REPLY (RFC 826).
    pub const REPLY: Operation = Operation(2);

    /// The operation's name, when it is one of the constants above.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            1 => Some("request"),
            2 => Some("reply"),
            _ => None,
        }
    }
}

impl fmt::Debug for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Operation({n})"),
            None => write!(f, "Operation({})", self.0),
        }
    }
}

impl fmt::Display for Operation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.0),
        }
    }
}

/// Why an ARP packet could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the fixed part, than the addresses that
    /// `hln` and `pln` declare, or than what `emit` needs.
    Truncated {
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
    /// ar$hrd is not Ethernet.
    UnsupportedHardware(Hardware),
    /// ar$pro is not IPv4.
    UnsupportedProtocol(EtherType),
    /// ar$hln is not 6 or ar$pln is not 4, for Ethernet/IPv4.
    BadAddressLength {
        /// `"hln"` or `"pln"`.
        field: &'static str,
        /// Length found.
        value: u8,
        /// Length Ethernet/IPv4 requires.
        expected: u8,
    },
    /// ar$op is neither request nor reply (RARP, InARP, ...).
    UnsupportedOperation(Operation),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { needed, got } => {
                write!(f, "ARP: truncated, need {needed} octets, got {got}")
            }
            Error::UnsupportedHardware(h) => write!(f, "ARP: hardware type {} unsupported", h.0),
            Error::UnsupportedProtocol(p) => write!(f, "ARP: protocol type {p} unsupported"),
            Error::BadAddressLength {
                field,
                value,
                expected,
            } => write!(f, "ARP: {field} is {value}, expected {expected}"),
            Error::UnsupportedOperation(op) => write!(f, "ARP: operation {op} unsupported"),
        }
    }
}

impl std::error::Error for Error {}

/// A zero-copy view of an ARP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it. Getters and setters panic if the
    /// buffer is shorter than the field they touch.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Check that the fixed part and the four addresses that `hln` and
    /// `pln` declare fit in the buffer.
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < FIXED_LEN {
            return Err(Error::Truncated {
                needed: FIXED_LEN,
                got,
            });
        }
        let needed = self.packet_len();
        if got < needed {
            return Err(Error::Truncated { needed, got });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Octets the packet declares: 8 + 2 × (hln + pln).
    pub fn packet_len(&self) -> usize {
        FIXED_LEN + 2 * (usize::from(self.hardware_len()) + usize::from(self.protocol_len()))
    }

    /// ar$hrd.
    pub fn hardware_type(&self) -> Hardware {
        Hardware(read_u16(self.buffer.as_ref(), field::HTYPE))
    }

    /// ar$pro (an EtherType).
    pub fn protocol_type(&self) -> EtherType {
        EtherType(read_u16(self.buffer.as_ref(), field::PTYPE))
    }

    /// ar$hln.
    pub fn hardware_len(&self) -> u8 {
        self.buffer.as_ref()[field::HLEN]
    }

    /// ar$pln.
    pub fn protocol_len(&self) -> u8 {
        self.buffer.as_ref()[field::PLEN]
    }

    /// ar$op.
    pub fn operation(&self) -> Operation {
        Operation(read_u16(self.buffer.as_ref(), field::OPER))
    }

    fn spa_at(&self) -> usize {
        field::SHA + usize::from(self.hardware_len())
    }

    fn tha_at(&self) -> usize {
        self.spa_at() + usize::from(self.protocol_len())
    }

    fn tpa_at(&self) -> usize {
        self.tha_at() + usize::from(self.hardware_len())
    }

    /// ar$sha, `hln` octets.
    pub fn source_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[field::SHA..self.spa_at()]
    }

    /// ar$spa, `pln` octets.
    pub fn source_protocol_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.spa_at()..self.tha_at()]
    }

    /// ar$tha, `hln` octets.
    pub fn target_hardware_addr(&self) -> &[u8] {
        &self.buffer.as_ref()[self.tha_at()..self.tpa_at()]
    }

    /// ar$tpa, `pln` octets.
    pub fn target_protocol_addr(&self) -> &[u8] {
        let at = self.tpa_at();
        &self.buffer.as_ref()[at..at + usize::from(self.protocol_len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set ar$hrd.
    pub fn set_hardware_type(&mut self, value: Hardware) {
        write_u16(self.buffer.as_mut(), field::HTYPE, value.0);
    }

    /// Set ar$pro.
    pub fn set_protocol_type(&mut self, value: EtherType) {
        write_u16(self.buffer.as_mut(), field::PTYPE, value.0);
    }

    /// Set ar$hln.
    pub fn set_hardware_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::HLEN] = value;
    }

    /// Set ar$pln.
    pub fn set_protocol_len(&mut self, value: u8) {
        self.buffer.as_mut()[field::PLEN] = value;
    }

    /// Set ar$op.
    pub fn set_operation(&mut self, value: Operation) {
        write_u16(self.buffer.as_mut(), field::OPER, value.0);
    }

    /// Set ar$sha (`value` must be `hln` octets long).
    pub fn set_source_hardware_addr(&mut self, value: &[u8]) {
        let (a, b) = (field::SHA, self.spa_at());
        self.buffer.as_mut()[a..b].copy_from_slice(value);
    }

    /// Set ar$spa (`value` must be `pln` octets long).
    pub fn set_source_protocol_addr(&mut self, value: &[u8]) {
        let (a, b) = (self.spa_at(), self.tha_at());
        self.buffer.as_mut()[a..b].copy_from_slice(value);
    }

    /// Set ar$tha (`value` must be `hln` octets long).
    pub fn set_target_hardware_addr(&mut self, value: &[u8]) {
        let (a, b) = (self.tha_at(), self.tpa_at());
        self.buffer.as_mut()[a..b].copy_from_slice(value);
    }

    /// Set ar$tpa (`value` must be `pln` octets long).
    pub fn set_target_protocol_addr(&mut self, value: &[u8]) {
        let a = self.tpa_at();
        let b = a + usize::from(self.protocol_len());
        self.buffer.as_mut()[a..b].copy_from_slice(value);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An Ethernet/IPv4 ARP packet, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// ar$op: [`Operation::REQUEST`] or [`Operation::REPLY`] after `parse`.
    pub operation: Operation,
    /// ar$sha.
    pub source_hardware_addr: EthernetAddress,
    /// ar$spa.
    pub source_protocol_addr: Ipv4Address,
    /// ar$tha (zero in a request, as Linux sends it).
    pub target_hardware_addr: EthernetAddress,
    /// ar$tpa.
    pub target_protocol_addr: Ipv4Address,
}

impl Repr {
    /// Parse an Ethernet/IPv4 request or reply. Checks, in order: lengths,
    /// hrd, pro, hln, pln, op (RFC 826, "Packet Reception": a packet whose
    /// hardware or protocol type we do not speak is discarded).
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, Error> {
        packet.check_len()?;
        if packet.hardware_type() != Hardware::ETHERNET {
            return Err(Error::UnsupportedHardware(packet.hardware_type()));
        }
        if packet.protocol_type() != EtherType::IPV4 {
            return Err(Error::UnsupportedProtocol(packet.protocol_type()));
        }
        if packet.hardware_len() != 6 {
            return Err(Error::BadAddressLength {
                field: "hln",
                value: packet.hardware_len(),
                expected: 6,
            });
        }
        if packet.protocol_len() != 4 {
            return Err(Error::BadAddressLength {
                field: "pln",
                value: packet.protocol_len(),
                expected: 4,
            });
        }
        let operation = packet.operation();
        if operation != Operation::REQUEST && operation != Operation::REPLY {
            return Err(Error::UnsupportedOperation(operation));
        }
        // The lengths were checked above, so the conversions cannot fail;
        // they fail safe (as a truncation) rather than panic all the same.
        let trunc = Error::Truncated {
            needed: PACKET_LEN,
            got: packet.buffer.as_ref().len(),
        };
        Ok(Repr {
            operation,
            source_hardware_addr: EthernetAddress::from_bytes(packet.source_hardware_addr())
                .ok_or(trunc)?,
            source_protocol_addr: Ipv4Address::from_bytes(packet.source_protocol_addr())
                .ok_or(trunc)?,
            target_hardware_addr: EthernetAddress::from_bytes(packet.target_hardware_addr())
                .ok_or(trunc)?,
            target_protocol_addr: Ipv4Address::from_bytes(packet.target_protocol_addr())
                .ok_or(trunc)?,
        })
    }

    /// Octets the packet takes ([`PACKET_LEN`]).
    pub const fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Write the packet into the start of `packet`'s buffer. Fails, writing
    /// nothing, when the buffer is shorter than [`PACKET_LEN`].
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        let got = packet.buffer.as_ref().len();
        if got < PACKET_LEN {
            return Err(Error::Truncated {
                needed: PACKET_LEN,
                got,
            });
        }
        packet.set_hardware_type(Hardware::ETHERNET);
        packet.set_protocol_type(EtherType::IPV4);
        packet.set_hardware_len(6);
        packet.set_protocol_len(4);
        packet.set_operation(self.operation);
        packet.set_source_hardware_addr(&self.source_hardware_addr.0);
        packet.set_source_protocol_addr(&self.source_protocol_addr.0);
        packet.set_target_hardware_addr(&self.target_hardware_addr.0);
        packet.set_target_protocol_addr(&self.target_protocol_addr.0);
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.operation {
            Operation::REQUEST => write!(
                f,
                "ARP who-has {} tell {} ({})",
                self.target_protocol_addr, self.source_protocol_addr, self.source_hardware_addr
            ),
            Operation::REPLY => write!(
                f,
                "ARP {} is-at {} (to {} {})",
                self.source_protocol_addr,
                self.source_hardware_addr,
                self.target_protocol_addr,
                self.target_hardware_addr
            ),
            op => write!(f, "ARP op {op}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{EthernetFrame, ETHERNET_HEADER_LEN};

    /// Frame 1 of tests/fixtures/siw/crc-rping.pcap (Linux 6.1 guest):
    /// who has 192.168.177.2? tell 192.168.177.3.
    static REQUEST_FRAME: [u8; 42] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0x08,
        0x06, // Ethernet
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // hrd pro hln pln op
        0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0xc0, 0xa8, 0xb1, 0x03, // sha spa
        0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0xc0, 0xa8, 0xb1, 0x02, // tha tpa
    ];

    /// Frame 2 of the same capture: 192.168.177.2 is at 52:54:00:17:77:02.
    static REPLY_FRAME: [u8; 42] = [
        0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0x52, 0x54, 0x00, 0x17, 0x77, 0x02, 0x08,
        0x06, // Ethernet
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x02, // hrd pro hln pln op
        0x52, 0x54, 0x00, 0x17, 0x77, 0x02, 0xc0, 0xa8, 0xb1, 0x02, // sha spa
        0x52, 0x54, 0x00, 0x17, 0x77, 0x03, 0xc0, 0xa8, 0xb1, 0x03, // tha tpa
    ];

    const MAC2: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x17, 0x77, 0x02]);
    const MAC3: EthernetAddress = EthernetAddress([0x52, 0x54, 0x00, 0x17, 0x77, 0x03]);
    const IP2: Ipv4Address = Ipv4Address::new(192, 168, 177, 2);
    const IP3: Ipv4Address = Ipv4Address::new(192, 168, 177, 3);

    fn request() -> Repr {
        Repr {
            operation: Operation::REQUEST,
            source_hardware_addr: MAC3,
            source_protocol_addr: IP3,
            target_hardware_addr: EthernetAddress([0; 6]),
            target_protocol_addr: IP2,
        }
    }

    fn reply() -> Repr {
        Repr {
            operation: Operation::REPLY,
            source_hardware_addr: MAC2,
            source_protocol_addr: IP2,
            target_hardware_addr: MAC3,
            target_protocol_addr: IP3,
        }
    }

    fn arp_of(frame: &[u8]) -> &[u8] {
        EthernetFrame::new_checked(frame).unwrap().payload()
    }

    #[test]
    fn parse_request_literal() {
        let p = Packet::new_checked(arp_of(&REQUEST_FRAME)).unwrap();
        assert_eq!(p.hardware_type(), Hardware::ETHERNET);
        assert_eq!(p.protocol_type(), EtherType::IPV4);
        assert_eq!((p.hardware_len(), p.protocol_len()), (6, 4));
        assert_eq!(p.operation(), Operation::REQUEST);
        assert_eq!(p.packet_len(), PACKET_LEN);
        assert_eq!(p.source_hardware_addr(), &MAC3.0);
        assert_eq!(p.source_protocol_addr(), &IP3.0);
        assert_eq!(p.target_hardware_addr(), &[0; 6]);
        assert_eq!(p.target_protocol_addr(), &IP2.0);
        assert_eq!(Repr::parse(&p), Ok(request()));
        assert_eq!(
            request().to_string(),
            "ARP who-has 192.168.177.2 tell 192.168.177.3 (52:54:00:17:77:03)"
        );
    }

    #[test]
    fn parse_reply_literal() {
        let p = Packet::new_checked(arp_of(&REPLY_FRAME)).unwrap();
        assert_eq!(Repr::parse(&p), Ok(reply()));
        assert_eq!(
            reply().to_string(),
            "ARP 192.168.177.2 is-at 52:54:00:17:77:02 (to 192.168.177.3 52:54:00:17:77:03)"
        );
    }

    #[test]
    fn emit_literals() {
        for (repr, frame) in [(request(), &REQUEST_FRAME), (reply(), &REPLY_FRAME)] {
            let mut buf = [0xa5u8; PACKET_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            assert_eq!(buf[..], frame[ETHERNET_HEADER_LEN..]);
            assert_eq!(repr.buffer_len(), PACKET_LEN);
        }
    }

    #[test]
    fn padding_is_ignored() {
        let mut padded = [0u8; 46];
        padded[..PACKET_LEN].copy_from_slice(arp_of(&REPLY_FRAME));
        padded[PACKET_LEN..].fill(0xee);
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(Repr::parse(&p), Ok(reply()));
    }

    #[test]
    fn unknown_code_points_are_kept_and_refused() {
        let base = arp_of(&REQUEST_FRAME);
        let mut b = [0u8; PACKET_LEN];

        b.copy_from_slice(base);
        b[6..8].copy_from_slice(&3u16.to_be_bytes()); // RARP request (RFC 903)
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.operation(), Operation(3));
        assert_eq!(format!("{:?}", p.operation()), "Operation(3)");
        assert_eq!(
            Repr::parse(&p),
            Err(Error::UnsupportedOperation(Operation(3)))
        );

        b.copy_from_slice(base);
        b[0..2].copy_from_slice(&6u16.to_be_bytes()); // IEEE 802
        let p = Packet::new_checked(&b[..]).unwrap();
        assert_eq!(p.hardware_type(), Hardware(6));
        assert_eq!(
            Repr::parse(&p),
            Err(Error::UnsupportedHardware(Hardware(6)))
        );

        b.copy_from_slice(base);
        b[2..4].copy_from_slice(&0x86ddu16.to_be_bytes());
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::UnsupportedProtocol(EtherType::IPV6))
        );

        b.copy_from_slice(base);
        b[4] = 8; // hln 8: the view still places the fields, parse refuses
        let long = [&b[..], &[0u8; 4][..]].concat();
        let p = Packet::new_checked(&long[..]).unwrap();
        assert_eq!(p.packet_len(), 32);
        assert_eq!(p.source_hardware_addr().len(), 8);
        assert_eq!(
            Repr::parse(&p),
            Err(Error::BadAddressLength {
                field: "hln",
                value: 8,
                expected: 6
            })
        );

        b.copy_from_slice(base);
        b[5] = 3;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadAddressLength {
                field: "pln",
                value: 3,
                expected: 4
            })
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = arp_of(&REPLY_FRAME);
        for len in 0..PACKET_LEN {
            let want = Error::Truncated {
                needed: if len < FIXED_LEN {
                    FIXED_LEN
                } else {
                    PACKET_LEN
                },
                got: len,
            };
            assert_eq!(Packet::new_checked(&full[..len]), Err(want));
            assert_eq!(Repr::parse(&Packet::new_unchecked(&full[..len])), Err(want));
            let mut buf = [0u8; PACKET_LEN];
            assert_eq!(
                reply().emit(&mut Packet::new_unchecked(&mut buf[..len])),
                Err(Error::Truncated {
                    needed: PACKET_LEN,
                    got: len
                })
            );
            assert_eq!(buf, [0u8; PACKET_LEN], "a failed emit writes nothing");
        }
        // Huge declared lengths are a truncation, not a panic.
        let mut b = [0u8; PACKET_LEN];
        b.copy_from_slice(full);
        b[4] = 255;
        b[5] = 255;
        assert_eq!(
            Packet::new_checked(&b[..]),
            Err(Error::Truncated {
                needed: 8 + 2 * 510,
                got: PACKET_LEN
            })
        );
    }

    #[test]
    fn round_trip_any_addresses() {
        let mut x: u32 = 7;
        for _ in 0..200 {
            let mut bytes = [0u8; 20];
            for b in bytes.iter_mut() {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                *b = (x >> 24) as u8;
            }
            let repr = Repr {
                operation: if bytes[0] & 1 == 0 {
                    Operation::REQUEST
                } else {
                    Operation::REPLY
                },
                source_hardware_addr: EthernetAddress::from_bytes(&bytes[0..6]).unwrap(),
                source_protocol_addr: Ipv4Address::from_bytes(&bytes[6..10]).unwrap(),
                target_hardware_addr: EthernetAddress::from_bytes(&bytes[10..16]).unwrap(),
                target_protocol_addr: Ipv4Address::from_bytes(&bytes[16..20]).unwrap(),
            };
            let mut buf = [0u8; PACKET_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
            assert_eq!(
                Repr::parse(&Packet::new_checked(&buf[..]).unwrap()),
                Ok(repr)
            );
        }
    }
}
