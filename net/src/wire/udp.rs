//! UDP header (RFC 768), as SCTP over UDP (RFC 6951) uses it.
//!
//! ```text
//!  0      7 8     15 16    23 24    31
//! +--------+--------+--------+--------+
//! |     Source      |   Destination   |
//! |      Port       |      Port       |
//! +--------+--------+--------+--------+
//! |                 |                 |
//! |     Length      |    Checksum     |
//! +--------+--------+--------+--------+
//! |          data octets ...
//! +---------------- ...
//! ```
//!
//! The view is over the IP payload; a checked view's payload ends at the
//! Length field (the IP payload may be longer only by Ethernet padding,
//! which IPv4's Total Length already cut).

use core::fmt;

use super::ipv4::{Address, Protocol};
use super::{checksum, read_u16, write_u16, Error, Layer};

/// Octets of the UDP header.
pub const HEADER_LEN: usize = 8;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const LENGTH: usize = 4;
    pub const CHECKSUM: usize = 6;
}

/// A view of a UDP datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// A view without checks: getters panic on a buffer shorter than the
    /// header.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// A view whose header is in the buffer and whose Length field is at
    /// least the header and at most the buffer.
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let p = Packet { buffer };
        p.check_len()?;
        Ok(p)
    }

    /// The checks of [`new_checked`](Self::new_checked).
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::Udp,
                needed: HEADER_LEN,
                got,
            });
        }
        let len = usize::from(self.len());
        if len < HEADER_LEN {
            return Err(Error::BadLength {
                layer: Layer::Udp,
                field: "Length",
                value: len,
                min: HEADER_LEN,
            });
        }
        if len > got {
            return Err(Error::Truncated {
                layer: Layer::Udp,
                needed: len,
                got,
            });
        }
        Ok(())
    }

    /// Source Port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination Port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Length: header and data, in octets.
    pub fn len(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::LENGTH)
    }

    /// Whether the Length field says there is no data.
    pub fn is_empty(&self) -> bool {
        usize::from(self.len()) <= HEADER_LEN
    }

    /// Checksum (0: none was computed, RFC 768).
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Whether the checksum verifies over the pseudo-header, the header
    /// and the data (RFC 768); an all-zero field (none sent) verifies.
    /// Call on a checked view.
    pub fn verify_checksum(&self, src: &Address, dst: &Address) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len();
        let d = self.buffer.as_ref();
        let dgram = &d[..usize::from(len).min(d.len())];
        checksum::combine(&[
            checksum::pseudo_header(src, dst, Protocol::UDP, len),
            checksum::data(dgram),
        ]) == 0xffff
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The data, up to the Length field (cut to the buffer).
    pub fn payload(&self) -> &'a [u8] {
        let d = self.buffer.as_ref();
        let end = usize::from(self.len()).min(d.len());
        d.get(HEADER_LEN..end).unwrap_or(&[])
    }
}

/// A UDP header's ports; the length is the data's, the checksum computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr {
    /// Source Port.
    pub src_port: u16,
    /// Destination Port.
    pub dst_port: u16,
}

impl Repr {
    /// Parse a checked view, verifying a non-zero checksum (RFC 768).
    pub fn parse<T: AsRef<[u8]>>(
        packet: &Packet<T>,
        src: &Address,
        dst: &Address,
    ) -> Result<Repr, Error> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            let found = packet.checksum();
            let d = packet.buffer.as_ref();
            let sum = checksum::combine(&[
                checksum::pseudo_header(src, dst, Protocol::UDP, packet.len()),
                checksum::data(&d[..usize::from(packet.len())]),
            ]);
            return Err(Error::BadChecksum {
                layer: Layer::Udp,
                found,
                computed: checksum::expected(sum, found),
            });
        }
        Ok(Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
        })
    }

    /// Write the header into `header` (at least [`HEADER_LEN`] octets) for
    /// `data`, which follows it: ports, length, and the checksum over the
    /// pseudo-header, the header and `data`, an all-zero result sent as
    /// all ones (RFC 768). `data` may lie elsewhere (a frame built in
    /// place passes the octets it wrote behind the header).
    pub fn emit_header(
        &self,
        header: &mut [u8],
        data: &[u8],
        src: &Address,
        dst: &Address,
    ) -> Result<(), Error> {
        let got = header.len();
        let Some(h) = header.get_mut(..HEADER_LEN) else {
            return Err(Error::Truncated {
                layer: Layer::Udp,
                needed: HEADER_LEN,
                got,
            });
        };
        let len = HEADER_LEN + data.len();
        let Ok(len16) = u16::try_from(len) else {
            return Err(Error::TooLarge {
                layer: Layer::Udp,
                field: "Length",
                value: len,
                max: usize::from(u16::MAX),
            });
        };
        write_u16(h, field::SRC_PORT, self.src_port);
        write_u16(h, field::DST_PORT, self.dst_port);
        write_u16(h, field::LENGTH, len16);
        write_u16(h, field::CHECKSUM, 0);
        let sum = checksum::combine(&[
            checksum::pseudo_header(src, dst, Protocol::UDP, len16),
            checksum::data(h),
            checksum::data(data),
        ]);
        // RFC 768: "If the computed checksum is zero, it is transmitted as
        // all ones."
        let c = match !sum {
            0 => 0xffff,
            c => c,
        };
        write_u16(h, field::CHECKSUM, c);
        Ok(())
    }
}

impl fmt::Display for Repr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UDP src={} dst={}", self.src_port, self.dst_port)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The length checks at their edges: an 8-octet datagram with Length 8
    /// is whole and empty; one octet short of the header, a Length below
    /// the header or past the buffer is refused (RFC 768: Length counts
    /// the header and the data).
    #[test]
    fn length_checks_hold_at_their_edges() {
        let dgram = |len: u16, buf: usize| {
            let mut v = vec![0u8; buf];
            if buf >= 6 {
                v[4..6].copy_from_slice(&len.to_be_bytes());
            }
            v
        };
        let whole = dgram(8, 8);
        let p = Packet::new_checked(&whole[..]).expect("a header alone is a datagram");
        assert!(p.is_empty());
        let one = dgram(9, 9);
        assert!(!Packet::new_checked(&one[..]).unwrap().is_empty());
        assert!(matches!(
            Packet::new_checked(&whole[..7]),
            Err(Error::Truncated {
                needed: 8,
                got: 7,
                ..
            })
        ));
        assert!(matches!(
            Packet::new_checked(&dgram(7, 8)[..]),
            Err(Error::BadLength {
                value: 7,
                min: 8,
                ..
            })
        ));
        assert!(matches!(
            Packet::new_checked(&dgram(9, 8)[..]),
            Err(Error::Truncated {
                needed: 9,
                got: 8,
                ..
            })
        ));
    }

    #[test]
    fn a_repr_reads_as_its_ports() {
        let r = Repr {
            src_port: 9899,
            dst_port: 5000,
        };
        assert_eq!(r.to_string(), "UDP src=9899 dst=5000");
    }

    const A: Address = Address::new(192, 168, 1, 1);
    const B: Address = Address::new(192, 168, 1, 2);

    /// Ports 9899 → 9899, length 12, data de ad be ef, from A to B. The
    /// checksum by hand (RFC 1071): pseudo-header c0a8 + 0101 + c0a8 +
    /// 0102 + 0011 + 000c, header 26ab + 26ab + 000c, data dead + beef
    /// sum to 0x3_6e6e, folded 0x6e71, complemented 0x918e.
    const DGRAM: [u8; 12] = [
        0x26, 0xab, 0x26, 0xab, 0x00, 0x0c, 0x91, 0x8e, 0xde, 0xad, 0xbe, 0xef,
    ];

    #[test]
    fn parses_the_literal_datagram() {
        let p = Packet::new_checked(&DGRAM[..]).unwrap();
        assert_eq!((p.src_port(), p.dst_port(), p.len()), (9899, 9899, 12));
        assert_eq!(p.payload(), &[0xde, 0xad, 0xbe, 0xef]);
        assert!(p.verify_checksum(&A, &B));
        assert_eq!(
            Repr::parse(&p, &A, &B).unwrap(),
            Repr {
                src_port: 9899,
                dst_port: 9899
            }
        );
    }

    #[test]
    fn emits_the_literal_datagram() {
        let mut h = [0u8; HEADER_LEN];
        Repr {
            src_port: 9899,
            dst_port: 9899,
        }
        .emit_header(&mut h, &DGRAM[8..], &A, &B)
        .unwrap();
        assert_eq!(h, DGRAM[..8]);
    }

    #[test]
    fn a_bad_checksum_names_the_right_one_and_zero_means_none() {
        let mut d = DGRAM;
        d[9] ^= 1;
        let p = Packet::new_checked(&d[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, &A, &B),
            Err(Error::BadChecksum {
                layer: Layer::Udp,
                found: 0x918e,
                computed: 0x918f,
            })
        );
        d[6..8].copy_from_slice(&[0, 0]);
        let p = Packet::new_checked(&d[..]).unwrap();
        assert!(Repr::parse(&p, &A, &B).is_ok());
    }

    #[test]
    fn lengths_are_checked() {
        for n in 0..HEADER_LEN {
            assert_eq!(
                Packet::new_checked(&DGRAM[..n]),
                Err(Error::Truncated {
                    layer: Layer::Udp,
                    needed: HEADER_LEN,
                    got: n
                })
            );
        }
        // Length beyond the buffer, and below the header.
        assert_eq!(
            Packet::new_checked(&DGRAM[..11]),
            Err(Error::Truncated {
                layer: Layer::Udp,
                needed: 12,
                got: 11
            })
        );
        let mut d = DGRAM;
        d[5] = 7;
        assert_eq!(
            Packet::new_checked(&d[..]),
            Err(Error::BadLength {
                layer: Layer::Udp,
                field: "Length",
                value: 7,
                min: HEADER_LEN
            })
        );
        // Ethernet padding past Length is not data.
        let mut padded = DGRAM.to_vec();
        padded.extend_from_slice(&[0; 6]);
        let p = Packet::new_checked(&padded[..]).unwrap();
        assert_eq!(p.payload().len(), 4);
        assert!(p.verify_checksum(&A, &B));
    }
}
