//! ICMPv4 messages (RFC 792): Echo and Echo Reply; other types are read by
//! the view and reported as [`Error::Unsupported`] by [`Repr::parse`].
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Type      |     Code      |          Checksum             |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Identifier          |        Sequence Number        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |     Data ...
//! +-+-+-+-+-
//! ```
//!
//! The second word is "Identifier / Sequence Number" for echo messages and
//! type-specific (unused, pointer, gateway address) for others; the view
//! reads it as identifier and sequence number whatever the type.
//! The view is over the IP payload: the checksum covers every octet of it.

use core::fmt;

use super::{checksum, read_u16, write_u16};

/// Length of the ICMP header (type, code, checksum and the second word).
pub const HEADER_LEN: usize = 8;

mod field {
    pub const TYPE: usize = 0;
    pub const CODE: usize = 1;
    pub const CHECKSUM: usize = 2;
    pub const IDENT: usize = 4;
    pub const SEQ_NO: usize = 6;
    pub const DATA: usize = 8;
}

/// The Type field (IANA "ICMP Type Numbers"). Values this crate does not
/// know are kept.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Message(pub u8);

impl Message {
    /// Echo Reply.
    pub const ECHO_REPLY: Message = Message(0);
    /// Destination Unreachable.
    pub const DST_UNREACHABLE: Message = Message(3);
    /// Redirect.
    pub const REDIRECT: Message = Message(5);
    /// Echo.
    pub const ECHO_REQUEST: Message = Message(8);
    /// Time Exceeded.
    pub const TIME_EXCEEDED: Message = Message(11);
    /// Parameter Problem.
    pub const PARAM_PROBLEM: Message = Message(12);

    /// The message's name, when it is one of the constants above.
    pub const fn name(self) -> Option<&'static str> {
        match self.0 {
            0 => Some("echo reply"),
            3 => Some("destination unreachable"),
            5 => Some("redirect"),
            8 => Some("echo request"),
            11 => Some("time exceeded"),
            12 => Some("parameter problem"),
            _ => None,
        }
    }
}

impl fmt::Debug for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => write!(f, "Message({n})"),
            None => write!(f, "Message({})", self.0),
        }
    }
}

impl fmt::Display for Message {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.name() {
            Some(n) => f.write_str(n),
            None => write!(f, "type {}", self.0),
        }
    }
}

/// Why an ICMP message could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than the header or than what `emit` needs.
    Truncated {
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
    /// The checksum does not verify.
    BadChecksum {
        /// Checksum field as received.
        found: u16,
        /// Checksum the contents call for.
        computed: u16,
    },
    /// A well-formed message that is not an Echo or Echo Reply with code 0.
    Unsupported {
        /// Type.
        msg_type: Message,
        /// Code.
        code: u8,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Error::Truncated { needed, got } => {
                write!(f, "ICMP: truncated, need {needed} octets, got {got}")
            }
            Error::BadChecksum { found, computed } => write!(
                f,
                "ICMP: checksum {found:#06x} does not verify, expected {computed:#06x}"
            ),
            Error::Unsupported { msg_type, code } => {
                write!(f, "ICMP: {msg_type} code {code} unsupported")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A zero-copy view of an ICMPv4 message (the whole IP payload).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it. Header getters and setters panic
    /// if the buffer is shorter than [`HEADER_LEN`]; the data is then empty.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Whether the buffer holds the 8-octet header.
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            Err(Error::Truncated {
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

    /// Type.
    pub fn msg_type(&self) -> Message {
        Message(self.buffer.as_ref()[field::TYPE])
    }

    /// Code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[field::CODE]
    }

    /// Checksum.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Identifier (echo messages).
    pub fn echo_ident(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::IDENT)
    }

    /// Sequence Number (echo messages).
    pub fn echo_seq_no(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SEQ_NO)
    }

    /// Whether the checksum verifies: the one's complement sum over the
    /// whole message is all ones (RFC 792, "Checksum"; RFC 1071).
    pub fn verify_checksum(&self) -> bool {
        checksum::data(self.buffer.as_ref()) == !0
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The octets after the 8-octet header.
    pub fn data(&self) -> &'a [u8] {
        self.buffer.as_ref().get(field::DATA..).unwrap_or(&[])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set Type.
    pub fn set_msg_type(&mut self, value: Message) {
        self.buffer.as_mut()[field::TYPE] = value.0;
    }

    /// Set Code.
    pub fn set_msg_code(&mut self, value: u8) {
        self.buffer.as_mut()[field::CODE] = value;
    }

    /// Set Checksum.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Set Identifier.
    pub fn set_echo_ident(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::IDENT, value);
    }

    /// Set Sequence Number.
    pub fn set_echo_seq_no(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SEQ_NO, value);
    }

    /// The data, mutably.
    pub fn data_mut(&mut self) -> &mut [u8] {
        self.buffer
            .as_mut()
            .get_mut(field::DATA..)
            .unwrap_or(&mut [])
    }

    /// Compute the checksum over the whole buffer with the field zeroed and
    /// store it (RFC 792: "the 16-bit one's complement of the one's
    /// complement sum of the ICMP message starting with the ICMP Type").
    pub fn fill_checksum(&mut self) {
        self.set_checksum(0);
        let sum = checksum::data(self.buffer.as_ref());
        self.set_checksum(!sum);
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// An Echo or Echo Reply message, parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Repr<'a> {
    /// Echo (type 8, code 0).
    EchoRequest {
        /// Identifier.
        ident: u16,
        /// Sequence Number.
        seq_no: u16,
        /// Data, borrowed from the packet.
        data: &'a [u8],
    },
    /// Echo Reply (type 0, code 0).
    EchoReply {
        /// Identifier.
        ident: u16,
        /// Sequence Number.
        seq_no: u16,
        /// Data, borrowed from the packet.
        data: &'a [u8],
    },
}

impl<'a> Repr<'a> {
    /// Parse a message: length, checksum, then type and code. Messages
    /// other than Echo / Echo Reply with code 0 are
    /// [`Error::Unsupported`], never a panic.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        if !packet.verify_checksum() {
            let sum = checksum::data(packet.buffer.as_ref());
            return Err(Error::BadChecksum {
                found: packet.checksum(),
                computed: checksum::expected(sum, packet.checksum()),
            });
        }
        let (ident, seq_no, data) = (packet.echo_ident(), packet.echo_seq_no(), packet.data());
        match (packet.msg_type(), packet.msg_code()) {
            (Message::ECHO_REQUEST, 0) => Ok(Repr::EchoRequest {
                ident,
                seq_no,
                data,
            }),
            (Message::ECHO_REPLY, 0) => Ok(Repr::EchoReply {
                ident,
                seq_no,
                data,
            }),
            (msg_type, code) => Err(Error::Unsupported { msg_type, code }),
        }
    }

    /// The message's type.
    pub const fn msg_type(&self) -> Message {
        match self {
            Repr::EchoRequest { .. } => Message::ECHO_REQUEST,
            Repr::EchoReply { .. } => Message::ECHO_REPLY,
        }
    }

    /// Octets the message takes: header and data.
    pub const fn buffer_len(&self) -> usize {
        match self {
            Repr::EchoRequest { data, .. } | Repr::EchoReply { data, .. } => {
                HEADER_LEN + data.len()
            }
        }
    }

    /// Write the message, data included, into the start of `packet`'s
    /// buffer and fill the checksum over [`buffer_len`](Self::buffer_len)
    /// octets. Fails, writing nothing, when the buffer is too short.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Packet<T>) -> Result<(), Error> {
        let needed = self.buffer_len();
        let got = packet.buffer.as_ref().len();
        if got < needed {
            return Err(Error::Truncated { needed, got });
        }
        let (Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }
        | Repr::EchoReply {
            ident,
            seq_no,
            data,
        }) = *self;
        let mut p = Packet::new_unchecked(&mut packet.buffer.as_mut()[..needed]);
        p.set_msg_type(self.msg_type());
        p.set_msg_code(0);
        p.set_echo_ident(ident);
        p.set_echo_seq_no(seq_no);
        p.data_mut().copy_from_slice(data);
        p.fill_checksum();
        Ok(())
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (Repr::EchoRequest {
            ident,
            seq_no,
            data,
        }
        | Repr::EchoReply {
            ident,
            seq_no,
            data,
        }) = *self;
        write!(
            f,
            "ICMP {} id={ident:#06x} seq={seq_no} len={}",
            self.msg_type(),
            data.len()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ICMP part of an echo request sent over a veth pair to Linux 6.18
    /// (10.9.0.1 → 10.9.0.2, id 0x1234, seq 1, data "abcdefgh").
    static ECHO_REQUEST: [u8; 16] = [
        0x08, 0x00, 0x54, 0x35, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    /// Linux's echo reply to it.
    static ECHO_REPLY: [u8; 16] = [
        0x00, 0x00, 0x5c, 0x35, 0x12, 0x34, 0x00, 0x01, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66, 0x67,
        0x68,
    ];

    /// Linux's port unreachable (type 3 code 3) for a UDP datagram to port
    /// 9, quoting the datagram's IP header and first octets.
    static PORT_UNREACHABLE: [u8; 38] = [
        0x03, 0x03, 0xf4, 0xed, 0x00, 0x00, 0x00, 0x00, 0x45, 0x00, 0x00, 0x1e, 0x0c, 0xa5, 0x40,
        0x00, 0x40, 0x11, 0x1a, 0x16, 0x0a, 0x09, 0x00, 0x01, 0x0a, 0x09, 0x00, 0x02, 0x8b, 0x62,
        0x00, 0x09, 0x00, 0x0a, 0x14, 0x30, 0x68, 0x69,
    ];

    #[test]
    fn parse_echo_request_literal() {
        let p = Packet::new_checked(&ECHO_REQUEST[..]).unwrap();
        assert_eq!(p.msg_type(), Message::ECHO_REQUEST);
        assert_eq!(p.msg_code(), 0);
        assert_eq!(p.checksum(), 0x5435);
        assert_eq!(p.echo_ident(), 0x1234);
        assert_eq!(p.echo_seq_no(), 1);
        assert_eq!(p.data(), b"abcdefgh");
        assert!(p.verify_checksum());
        let repr = Repr::parse(&p).unwrap();
        assert_eq!(
            repr,
            Repr::EchoRequest {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcdefgh"
            }
        );
        assert_eq!(repr.to_string(), "ICMP echo request id=0x1234 seq=1 len=8");
    }

    #[test]
    fn emit_echo_reply_literal() {
        let repr = Repr::parse(&Packet::new_checked(&ECHO_REPLY[..]).unwrap()).unwrap();
        assert_eq!(
            repr,
            Repr::EchoReply {
                ident: 0x1234,
                seq_no: 1,
                data: b"abcdefgh"
            }
        );
        let mut buf = [0xa5u8; 20];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(buf[..16], ECHO_REPLY);
        assert_eq!(buf[16..], [0xa5; 4], "emit writes buffer_len octets only");
        let req = Repr::EchoRequest {
            ident: 0x1234,
            seq_no: 1,
            data: b"abcdefgh",
        };
        let mut buf = [0u8; 16];
        req.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(buf, ECHO_REQUEST);
    }

    #[test]
    fn other_types_are_unsupported() {
        let p = Packet::new_checked(&PORT_UNREACHABLE[..]).unwrap();
        assert!(p.verify_checksum());
        assert_eq!(p.msg_type(), Message::DST_UNREACHABLE);
        assert_eq!(
            Repr::parse(&p),
            Err(Error::Unsupported {
                msg_type: Message::DST_UNREACHABLE,
                code: 3
            })
        );
        // An echo with a non-zero code, and an unknown type, checksums fixed.
        for (t, c) in [(8u8, 1u8), (42, 0), (255, 255)] {
            let mut b = ECHO_REQUEST;
            let mut p = Packet::new_unchecked(&mut b[..]);
            p.set_msg_type(Message(t));
            p.set_msg_code(c);
            p.fill_checksum();
            assert_eq!(
                Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
                Err(Error::Unsupported {
                    msg_type: Message(t),
                    code: c
                })
            );
        }
        assert_eq!(format!("{:?}", Message(42)), "Message(42)");
    }

    #[test]
    fn bad_checksum() {
        let mut b = ECHO_REQUEST;
        b[15] ^= 0x01;
        assert_eq!(
            Repr::parse(&Packet::new_checked(&b[..]).unwrap()),
            Err(Error::BadChecksum {
                found: 0x5435,
                computed: 0x5434
            })
        );
    }

    #[test]
    fn odd_length_data() {
        let repr = Repr::EchoRequest {
            ident: 7,
            seq_no: 9,
            data: b"abc",
        };
        let mut buf = [0u8; 11];
        repr.emit(&mut Packet::new_unchecked(&mut buf[..])).unwrap();
        assert_eq!(
            Repr::parse(&Packet::new_checked(&buf[..]).unwrap()),
            Ok(repr)
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        for len in 0..HEADER_LEN {
            let want = Error::Truncated {
                needed: HEADER_LEN,
                got: len,
            };
            assert_eq!(Packet::new_checked(&ECHO_REQUEST[..len]), Err(want));
            assert_eq!(
                Repr::parse(&Packet::new_unchecked(&ECHO_REQUEST[..len])),
                Err(want)
            );
        }
        // A cut in the data is a checksum failure (the IP layer knows the
        // real length), not a panic.
        for len in HEADER_LEN..ECHO_REQUEST.len() {
            assert!(matches!(
                Repr::parse(&Packet::new_checked(&ECHO_REQUEST[..len]).unwrap()),
                Err(Error::BadChecksum { .. })
            ));
        }
        let repr = Repr::EchoReply {
            ident: 0x1234,
            seq_no: 1,
            data: b"abcdefgh",
        };
        for len in 0..16 {
            let mut buf = [0u8; 16];
            assert_eq!(
                repr.emit(&mut Packet::new_unchecked(&mut buf[..len])),
                Err(Error::Truncated {
                    needed: 16,
                    got: len
                })
            );
            assert_eq!(buf, [0u8; 16]);
        }
        assert!(Packet::new_unchecked(&ECHO_REQUEST[..3]).data().is_empty());
    }
}
