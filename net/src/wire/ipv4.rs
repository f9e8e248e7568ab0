//! IPv4 headers (RFC 791 §3.1).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |Version|  IHL  |   DSCP    |ECN|          Total Length         |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |         Identification        |Flags|      Fragment Offset    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Time to Live |    Protocol   |         Header Checksum       |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                       Source Address                          |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Destination Address                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Options                    |    Padding    |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! ```
//!
//! The Type of Service octet is read as DSCP and ECN (RFC 2474 §3,
//! RFC 3168 §5). Flags: bit 0 reserved, bit 1 DF, bit 2 MF.
//!
//! Options are not interpreted: [`Repr::parse`] accepts a header that has
//! them and reports their length in [`Repr::options_len`]; [`Repr::emit`]
//! always writes a 20-octet header. Fragments are reported, not reassembled.

use core::fmt;

use super::{checksum, clamp, read_u16, write_u16, Error, Layer};

/// Length of an IPv4 header without options.
pub const HEADER_LEN: usize = 20;
/// Longest IPv4 header: IHL is four bits of 32-bit words.
pub const MAX_HEADER_LEN: usize = 60;
/// Largest Total Length.
pub const MAX_PACKET_LEN: usize = 65535;

mod field {
    use core::ops::Range;

    pub const VER_IHL: usize = 0;
    pub const DSCP_ECN: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLG_OFF: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTOCOL: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC_ADDR: Range<usize> = 12..16;
    pub const DST_ADDR: Range<usize> = 16..20;
}

const FLAG_RESERVED: u16 = 0x8000;
const FLAG_DF: u16 = 0x4000;
const FLAG_MF: u16 = 0x2000;
const OFFSET_MASK: u16 = 0x1fff;

/// An IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Address(pub [u8; 4]);

impl Address {
    /// 0.0.0.0.
    pub const UNSPECIFIED: Address = Address([0; 4]);
    /// 255.255.255.255.
    pub const BROADCAST: Address = Address([255; 4]);

    /// From four octets.
    #[inline]
    pub const fn new(a: u8, b: u8, c: u8, d: u8) -> Address {
        Address([a, b, c, d])
    }

    /// The address from the first four octets of `data`, if there are four.
    #[inline]
    pub fn from_bytes(data: &[u8]) -> Option<Address> {
        data.get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map(Address)
    }

    /// The octets.
    #[inline]
    pub const fn as_bytes(&self) -> &[u8; 4] {
        &self.0
    }
}

impl From<[u8; 4]> for Address {
    fn from(octets: [u8; 4]) -> Self {
        Address(octets)
    }
}

impl From<std::net::Ipv4Addr> for Address {
    fn from(addr: std::net::Ipv4Addr) -> Self {
        Address(addr.octets())
    }
}

impl From<Address> for std::net::Ipv4Addr {
    fn from(addr: Address) -> Self {
        std::net::Ipv4Addr::from(addr.0)
    }
}

impl fmt::Display for Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [a, b, c, d] = self.0;
        write!(f, "{a}.{b}.{c}.{d}")
    }
}

/// The Protocol field (IANA "Assigned Internet Protocol Numbers"). Values
/// this crate does not know are kept as they are.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Protocol(pub u8);

impl Protocol {
    /// ICMP (RFC 792).
    pub const ICMP: Protocol = Protocol(1);
    /// TCP (RFC 9293).
    pub const TCP: Protocol = Protocol(6);
    /// UDP (RFC 768).
    pub const UDP: Protocol = Protocol(17);
    /// SCTP (RFC 9260).
    pub const SCTP: Protocol = Protocol(132);

    /// The protocol's name, when it is one of the constants above.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            1 => Some("ICMP"),
            6 => Some("TCP"),
            17 => Some("UDP"),
            132 => Some("SCTP"),
            _ => None,
        }
    }
}

impl From<u8> for Protocol {
    fn from(value: u8) -> Self {
        Protocol(value)
    }
}

impl From<Protocol> for u8 {
    fn from(value: Protocol) -> Self {
        value.0
    }
}

impl fmt::Debug for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Protocol({n})"),
            None => write!(f, "Protocol({})", self.0),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "{}", self.0),
        }
    }
}

/// A zero-copy view of an IPv4 packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it. Field getters and setters panic if
    /// the buffer is shorter than the field; the options and payload, whose
    /// bounds come from IHL and Total Length, are cut short to the buffer.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Check that the fixed header fits, that IHL is at least 5
    /// (RFC 791 §3.1: "the minimum value for a correct header is 5"), that
    /// Total Length covers the header, and that the buffer holds Total Length
    /// octets. Octets past Total Length (Ethernet padding) are allowed and
    /// are not part of the payload. The version and checksum are checked by
    /// [`Repr::parse`].
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::Ipv4,
                needed: HEADER_LEN,
                got,
            });
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::BadLength {
                layer: Layer::Ipv4,
                field: "IHL",
                value: header_len,
                min: HEADER_LEN,
            });
        }
        let total_len = usize::from(self.total_len());
        if total_len < header_len {
            return Err(Error::BadLength {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: total_len,
                min: header_len,
            });
        }
        if got < total_len {
            return Err(Error::Truncated {
                layer: Layer::Ipv4,
                needed: total_len,
                got,
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Version (4 for IPv4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] >> 4
    }

    /// IHL: header length in 32-bit words.
    pub fn ihl(&self) -> u8 {
        self.buffer.as_ref()[field::VER_IHL] & 0x0f
    }

    /// Header length in octets (IHL × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.ihl()) * 4
    }

    /// Differentiated Services Code Point (RFC 2474 §3).
    pub fn dscp(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] >> 2
    }

    /// Explicit Congestion Notification codepoint (RFC 3168 §5).
    pub fn ecn(&self) -> u8 {
        self.buffer.as_ref()[field::DSCP_ECN] & 0x03
    }

    /// Total Length: header and data, in octets.
    pub fn total_len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::TOTAL_LEN)
    }

    /// Identification.
    pub fn identification(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// The reserved flag (RFC 791 §3.1: "must be zero").
    pub fn reserved_flag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_RESERVED != 0
    }

    /// DF: Don't Fragment.
    pub fn dont_frag(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_DF != 0
    }

    /// MF: More Fragments.
    pub fn more_frags(&self) -> bool {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & FLAG_MF != 0
    }

    /// Fragment Offset, in units of 8 octets.
    pub fn fragment_offset(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::FLG_OFF) & OFFSET_MASK
    }

    /// Time to Live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[field::TTL]
    }

    /// Protocol.
    pub fn protocol(&self) -> Protocol {
        Protocol(self.buffer.as_ref()[field::PROTOCOL])
    }

    /// Header Checksum.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Source Address.
    pub fn src_addr(&self) -> Address {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::SRC_ADDR]);
        Address(a)
    }

    /// Destination Address.
    pub fn dst_addr(&self) -> Address {
        let mut a = [0u8; 4];
        a.copy_from_slice(&self.buffer.as_ref()[field::DST_ADDR]);
        Address(a)
    }

    /// Whether the Header Checksum verifies: the one's complement sum over
    /// the whole header, options included, is all ones (RFC 791 §3.1,
    /// "Header Checksum"; RFC 1071).
    pub fn verify_checksum(&self) -> bool {
        let data = self.buffer.as_ref();
        checksum::data(&data[clamp(0, self.header_len(), data.len())]) == !0
    }

    /// The options and padding octets (empty when IHL is 5).
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(HEADER_LEN, self.header_len(), data.len())]
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The data: octets from the end of the header to Total Length.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[clamp(self.header_len(), self.total_len().into(), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set Version.
    pub fn set_version(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Set IHL, in 32-bit words (only the low four bits are used).
    pub fn set_ihl(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::VER_IHL];
        *b = (*b & 0xf0) | (value & 0x0f);
    }

    /// Set DSCP (only the low six bits are used).
    pub fn set_dscp(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0x03) | (value << 2);
    }

    /// Set ECN (only the low two bits are used).
    pub fn set_ecn(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DSCP_ECN];
        *b = (*b & 0xfc) | (value & 0x03);
    }

    /// Set Total Length.
    pub fn set_total_len(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::TOTAL_LEN, value);
    }

    /// Set Identification.
    pub fn set_identification(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    fn set_flag(&mut self, mask: u16, on: bool) {
        let old = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let new = if on { old | mask } else { old & !mask };
        write_u16(self.buffer.as_mut(), field::FLG_OFF, new);
    }

    /// Set the reserved flag (RFC 791 §3.1: must be zero; for tests).
    pub fn set_reserved_flag(&mut self, value: bool) {
        self.set_flag(FLAG_RESERVED, value);
    }

    /// Set DF.
    pub fn set_dont_frag(&mut self, value: bool) {
        self.set_flag(FLAG_DF, value);
    }

    /// Set MF.
    pub fn set_more_frags(&mut self, value: bool) {
        self.set_flag(FLAG_MF, value);
    }

    /// Set Fragment Offset, in units of 8 octets (only the low 13 bits are used).
    pub fn set_fragment_offset(&mut self, value: u16) {
        let old = read_u16(self.buffer.as_ref(), field::FLG_OFF);
        let new = (old & !OFFSET_MASK) | (value & OFFSET_MASK);
        write_u16(self.buffer.as_mut(), field::FLG_OFF, new);
    }

    /// Set Time to Live.
    pub fn set_ttl(&mut self, value: u8) {
        self.buffer.as_mut()[field::TTL] = value;
    }

    /// Set Protocol.
    pub fn set_protocol(&mut self, value: Protocol) {
        self.buffer.as_mut()[field::PROTOCOL] = value.0;
    }

    /// Set Header Checksum.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Set Source Address.
    pub fn set_src_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::SRC_ADDR].copy_from_slice(&value.0);
    }

    /// Set Destination Address.
    pub fn set_dst_addr(&mut self, value: Address) {
        self.buffer.as_mut()[field::DST_ADDR].copy_from_slice(&value.0);
    }

    /// Compute the Header Checksum over the header (as IHL gives it) with
    /// the field zeroed, and store it (RFC 791 §3.1: "the checksum field is
    /// the 16 bit one's complement of the one's complement sum of all 16 bit
    /// words in the header"; RFC 1071).
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let data = self.buffer.as_ref();
        let sum = checksum::data(&data[clamp(0, self.header_len(), data.len())]);
        self.set_checksum(!sum);
    }

    /// The data, mutably: octets from the end of the header to Total Length.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let range = clamp(
            self.header_len(),
            self.total_len().into(),
            self.buffer.as_ref().len(),
        );
        &mut self.buffer.as_mut()[range]
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An IPv4 header, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Repr {
    /// Source Address.
    pub src_addr: Address,
    /// Destination Address.
    pub dst_addr: Address,
    /// Protocol of the payload.
    pub protocol: Protocol,
    /// Octets of data after the header (Total Length minus the header length).
    pub payload_len: usize,
    /// Time to Live.
    pub ttl: u8,
    /// DSCP, six bits.
    pub dscp: u8,
    /// ECN, two bits.
    pub ecn: u8,
    /// Identification.
    pub identification: u16,
    /// DF.
    pub dont_frag: bool,
    /// MF.
    pub more_frags: bool,
    /// Fragment Offset in units of 8 octets, 13 bits.
    pub fragment_offset: u16,
    /// Octets of options and padding the parsed header carried (IHL × 4 − 20).
    /// [`emit`](Self::emit) writes no options and ignores this field.
    pub options_len: usize,
}

impl Repr {
    /// Parse and validate a packet's header: lengths (see
    /// [`Packet::check_len`]), version and Header Checksum. The reserved flag
    /// is ignored.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&T>) -> Result<Repr, Error> {
        packet.check_len()?;
        // RFC 791 §3.1: Version "indicates the format of the internet header";
        // anything but 4 is not this format.
        if packet.version() != 4 {
            return Err(Error::BadVersion {
                layer: Layer::Ipv4,
                version: packet.version(),
            });
        }
        // RFC 791 §3.1: "If the header checksum fails, the internet datagram
        // is discarded at once"; RFC 1122 §3.2.1.2: a host MUST verify it and
        // silently discard a datagram that fails.
        if !packet.verify_checksum() {
            let sum = checksum::data(&packet.buffer.as_ref()[..packet.header_len()]);
            return Err(Error::BadChecksum {
                layer: Layer::Ipv4,
                found: packet.checksum(),
                computed: checksum::expected(sum, packet.checksum()),
            });
        }
        let header_len = packet.header_len();
        Ok(Repr {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            protocol: packet.protocol(),
            payload_len: usize::from(packet.total_len()) - header_len,
            ttl: packet.ttl(),
            dscp: packet.dscp(),
            ecn: packet.ecn(),
            identification: packet.identification(),
            dont_frag: packet.dont_frag(),
            more_frags: packet.more_frags(),
            fragment_offset: packet.fragment_offset(),
            options_len: header_len - HEADER_LEN,
        })
    }

    /// Octets the header takes when emitted (always [`HEADER_LEN`]; the
    /// payload is the caller's).
    pub const fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Write a 20-octet header (IHL 5, no options) into the start of
    /// `packet`'s buffer, with Total Length `20 + payload_len` and the Header
    /// Checksum filled in. The payload is the caller's, before or after.
    ///
    /// Fails, writing nothing, when the buffer is shorter than the header or a
    /// field is out of range.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        let got = packet.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::Ipv4,
                needed: HEADER_LEN,
                got,
            });
        }
        let too_large = |field, value: usize, max: usize| Error::TooLarge {
            layer: Layer::Ipv4,
            field,
            value,
            max,
        };
        let total_len = HEADER_LEN.saturating_add(self.payload_len);
        let total_len = u16::try_from(total_len)
            .map_err(|_| too_large("Total Length", total_len, MAX_PACKET_LEN))?;
        if self.dscp > 0x3f {
            return Err(too_large("DSCP", self.dscp.into(), 0x3f));
        }
        if self.ecn > 0x03 {
            return Err(too_large("ECN", self.ecn.into(), 0x03));
        }
        if self.fragment_offset > OFFSET_MASK {
            return Err(too_large(
                "Fragment Offset",
                self.fragment_offset.into(),
                OFFSET_MASK.into(),
            ));
        }
        packet.set_version(4);
        packet.set_ihl((HEADER_LEN / 4) as u8);
        packet.set_dscp(self.dscp);
        packet.set_ecn(self.ecn);
        packet.set_total_len(total_len);
        packet.set_identification(self.identification);
        // RFC 791 §3.1: the reserved flag "must be zero".
        packet.set_reserved_flag(false);
        packet.set_dont_frag(self.dont_frag);
        packet.set_more_frags(self.more_frags);
        packet.set_fragment_offset(self.fragment_offset);
        packet.set_ttl(self.ttl);
        packet.set_protocol(self.protocol);
        packet.set_src_addr(self.src_addr);
        packet.set_dst_addr(self.dst_addr);
        packet.fill_checksum();
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "IPv4 src={} dst={} proto={} len={} ttl={} id={:#06x}",
            self.src_addr,
            self.dst_addr,
            self.protocol,
            self.payload_len,
            self.ttl,
            self.identification
        )?;
        if self.dont_frag {
            f.write_str(" DF")?;
        }
        if self.more_frags {
            f.write_str(" MF")?;
        }
        if self.fragment_offset != 0 {
            write!(f, " off={}", usize::from(self.fragment_offset) * 8)?;
        }
        if self.options_len != 0 {
            write!(f, " options={}", self.options_len)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 header of a SYN that Linux 6.18 sent (192.168.10.1 →
    /// 192.168.10.2, Total Length 60, DF, TTL 64), and its 40-octet TCP
    /// segment; see the TCP tests for the capture.
    static SYN_PACKET: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0x52, 0x3e, 0x40, 0x00, 0x40, 0x06, 0x53, 0x2a, 0xc0, 0xa8, 0x0a,
        0x01, 0xc0, 0xa8, 0x0a, 0x02, // IPv4 header
        0xdc, 0x1c, 0x12, 0xb7, 0xf8, 0x6b, 0xed, 0x3e, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0xc4, 0xa9, 0x00, 0x00, 0x02, 0x04, 0x05, 0xb4, 0x04, 0x02, 0x08, 0x0a, 0x0b, 0x21,
        0x13, 0x6f, 0x00, 0x00, 0x00, 0x00, 0x01, 0x03, 0x03, 0x0a, // TCP segment
    ];

    /// A header with a 4-octet Router Alert option (RFC 2113), IHL 6,
    /// protocol 2 (IGMP), 8 octets of data, checksum computed outside this crate.
    static WITH_OPTIONS: [u8; 32] = [
        0x46, 0xc0, 0x00, 0x20, 0x00, 0x00, 0x40, 0x00, 0x01, 0x02, 0x39, 0x58, 0xc0, 0xa8, 0x0a,
        0x01, 0xe0, 0x00, 0x00, 0x16, // fixed header
        0x94, 0x04, 0x00, 0x00, // Router Alert
        0x22, 0x00, 0xf9, 0x02, 0x00, 0x00, 0x00, 0x00, // data
    ];

    fn syn_repr() -> Repr {
        Repr {
            src_addr: Address::new(192, 168, 10, 1),
            dst_addr: Address::new(192, 168, 10, 2),
            protocol: Protocol::TCP,
            payload_len: 40,
            ttl: 64,
            dscp: 0,
            ecn: 0,
            identification: 0x523e,
            dont_frag: true,
            more_frags: false,
            fragment_offset: 0,
            options_len: 0,
        }
    }

    #[test]
    fn parse_literal() {
        let packet = Packet::new_checked(&SYN_PACKET[..]).unwrap();
        assert_eq!(packet.version(), 4);
        assert_eq!(packet.ihl(), 5);
        assert_eq!(packet.header_len(), 20);
        assert_eq!(packet.dscp(), 0);
        assert_eq!(packet.ecn(), 0);
        assert_eq!(packet.total_len(), 60);
        assert_eq!(packet.identification(), 0x523e);
        assert!(!packet.reserved_flag());
        assert!(packet.dont_frag());
        assert!(!packet.more_frags());
        assert_eq!(packet.fragment_offset(), 0);
        assert_eq!(packet.ttl(), 64);
        assert_eq!(packet.protocol(), Protocol::TCP);
        assert_eq!(packet.checksum(), 0x532a);
        assert!(packet.verify_checksum());
        assert_eq!(packet.src_addr(), Address::new(192, 168, 10, 1));
        assert_eq!(packet.dst_addr(), Address::new(192, 168, 10, 2));
        assert_eq!(packet.options(), &[]);
        assert_eq!(packet.payload(), &SYN_PACKET[20..]);
        assert_eq!(Repr::parse(&packet), Ok(syn_repr()));
        assert_eq!(
            syn_repr().to_string(),
            "IPv4 src=192.168.10.1 dst=192.168.10.2 proto=TCP len=40 ttl=64 id=0x523e DF"
        );
    }

    #[test]
    fn emit_literal() {
        let mut buf = [0xa5u8; 60];
        let mut packet = Packet::new_unchecked(&mut buf[..]);
        syn_repr().emit(&mut packet).unwrap();
        packet.payload_mut().copy_from_slice(&SYN_PACKET[20..]);
        assert_eq!(buf, SYN_PACKET);
    }

    #[test]
    fn setters_and_fill_checksum() {
        let mut buf = [0u8; 20];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_version(4);
        p.set_ihl(5);
        p.set_dscp(46);
        p.set_ecn(2);
        p.set_total_len(20);
        p.set_identification(0xbeef);
        p.set_reserved_flag(true);
        p.set_more_frags(true);
        p.set_fragment_offset(0x1abc);
        p.set_ttl(1);
        p.set_protocol(Protocol::UDP);
        p.set_src_addr(Address::new(1, 2, 3, 4));
        p.set_dst_addr(Address::new(5, 6, 7, 8));
        p.fill_checksum();
        assert!(p.verify_checksum());
        assert_eq!(p.dscp(), 46);
        assert_eq!(p.ecn(), 2);
        assert!(p.reserved_flag() && p.more_frags() && !p.dont_frag());
        assert_eq!(p.fragment_offset(), 0x1abc);
        assert_eq!(
            buf,
            [
                0x45, 0xba, 0x00, 0x14, 0xbe, 0xef, 0xba, 0xbc, 0x01, 0x11, 0x2f, 0x60, 1, 2, 3, 4,
                5, 6, 7, 8
            ]
        );
    }

    #[test]
    fn options_are_reported_not_rejected() {
        let packet = Packet::new_checked(&WITH_OPTIONS[..]).unwrap();
        assert_eq!(packet.ihl(), 6);
        assert_eq!(packet.options(), &[0x94, 0x04, 0x00, 0x00]);
        assert_eq!(packet.payload(), &WITH_OPTIONS[24..]);
        let repr = Repr::parse(&packet).unwrap();
        assert_eq!(repr.options_len, 4);
        assert_eq!(repr.payload_len, 8);
        assert_eq!(repr.dscp, 48); // CS6, network control
        assert_eq!(repr.ttl, 1);
        assert_eq!(repr.protocol, Protocol(2));
        assert_eq!(repr.dst_addr, Address::new(224, 0, 0, 22));
        assert_eq!(format!("{:?}", repr.protocol), "Protocol(2)");
        // Emitting drops the options: a 20-octet header with the same payload length.
        let mut out = [0u8; 28];
        let mut p = Packet::new_unchecked(&mut out[..]);
        repr.emit(&mut p).unwrap();
        assert_eq!(p.total_len(), 28);
        let again = Repr::parse(&Packet::new_checked(&out[..]).unwrap()).unwrap();
        assert_eq!(
            again,
            Repr {
                options_len: 0,
                ..repr
            }
        );
    }

    #[test]
    fn ethernet_padding_is_not_payload() {
        let mut padded = [0u8; 64];
        padded[..60].copy_from_slice(&SYN_PACKET);
        let packet = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(packet.payload().len(), 40);
        assert_eq!(Repr::parse(&packet).unwrap().payload_len, 40);
    }

    #[test]
    fn bad_checksum() {
        let mut buf = SYN_PACKET;
        buf[8] = 63; // TTL decremented without updating the checksum
        let packet = Packet::new_checked(&buf[..]).unwrap();
        assert!(!packet.verify_checksum());
        assert_eq!(
            Repr::parse(&packet),
            Err(Error::BadChecksum {
                layer: Layer::Ipv4,
                found: 0x532a,
                computed: 0x542a,
            })
        );
    }

    #[test]
    fn bad_version() {
        let mut buf = SYN_PACKET;
        buf[0] = 0x65;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&buf[..]).unwrap()),
            Err(Error::BadVersion {
                layer: Layer::Ipv4,
                version: 6
            })
        );
    }

    #[test]
    fn bad_lengths() {
        let mut buf = SYN_PACKET;
        buf[0] = 0x44;
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(Error::BadLength {
                layer: Layer::Ipv4,
                field: "IHL",
                value: 16,
                min: 20
            })
        );
        let mut buf = SYN_PACKET;
        buf[0] = 0x4f; // 60-octet header, but Total Length says 40
        buf[2..4].copy_from_slice(&40u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(Error::BadLength {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: 40,
                min: 60
            })
        );
        let mut buf = SYN_PACKET;
        buf[2..4].copy_from_slice(&19u16.to_be_bytes());
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(Error::BadLength {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: 19,
                min: 20
            })
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..SYN_PACKET.len() {
            let want = Error::Truncated {
                layer: Layer::Ipv4,
                needed: if len < 20 { 20 } else { 60 },
                got: len,
            };
            assert_eq!(Packet::new_checked(&SYN_PACKET[..len]), Err(want));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&SYN_PACKET[..len])),
                Err(want)
            );
        }
        for len in 0..HEADER_LEN {
            let mut buf = [0u8; HEADER_LEN];
            assert_eq!(
                syn_repr().emit(&mut Packet::new_unchecked(&mut buf[..len])),
                Err(Error::Truncated {
                    layer: Layer::Ipv4,
                    needed: 20,
                    got: len
                })
            );
        }
    }

    #[test]
    fn emit_rejects_out_of_range_fields() {
        let mut buf = [0u8; 20];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        let too_long = Repr {
            payload_len: 65516,
            ..syn_repr()
        };
        assert_eq!(
            too_long.emit(&mut p),
            Err(Error::TooLarge {
                layer: Layer::Ipv4,
                field: "Total Length",
                value: 65536,
                max: 65535
            })
        );
        assert!(Repr {
            payload_len: usize::MAX,
            ..syn_repr()
        }
        .emit(&mut p)
        .is_err());
        assert!(Repr {
            dscp: 64,
            ..syn_repr()
        }
        .emit(&mut p)
        .is_err());
        assert!(Repr {
            ecn: 4,
            ..syn_repr()
        }
        .emit(&mut p)
        .is_err());
        assert!(Repr {
            fragment_offset: 0x2000,
            ..syn_repr()
        }
        .emit(&mut p)
        .is_err());
        assert_eq!(buf, [0u8; 20], "a failed emit writes nothing");
        let max = Repr {
            payload_len: 65515,
            ..syn_repr()
        };
        assert!(max.emit(&mut Packet::new_unchecked(&mut buf[..])).is_ok());
    }
}
