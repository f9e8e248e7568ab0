//! TCP segment headers (RFC 9293 §3.1) and options: MSS (RFC 9293 §3.2),
//! Window Scale and Timestamps (RFC 7323 §2-3), SACK-Permitted and SACK
//! (RFC 2018 §2-3).
//!
//! ```text
//!  0                   1                   2                   3
//!  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |          Source Port          |       Destination Port        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                        Sequence Number                        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                    Acknowledgment Number                      |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |  Data |       |C|E|U|A|P|R|S|F|                               |
//! | Offset| Rsrvd |W|C|R|C|S|S|Y|I|            Window             |
//! |       |       |R|E|G|K|H|T|N|N|                               |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |           Checksum            |         Urgent Pointer        |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                           [Options]                           |
//! +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
//! |                             Data ...
//! ```
//!
//! The checksum covers the IPv4 pseudo-header, so [`Repr::parse`],
//! [`Repr::emit`], [`Packet::verify_checksum`] and [`Packet::fill_checksum`]
//! take the source and destination addresses. A TCP view spans exactly the
//! segment: take it from [`Ipv4Packet::payload`](super::Ipv4Packet::payload),
//! which Total Length bounds.

use core::fmt;
use core::ops;

use super::ipv4::{Address, Protocol};
use super::{checksum, clamp, read_u16, read_u32, write_u16, write_u32, Error, Layer};

/// Length of a TCP header without options.
pub const HEADER_LEN: usize = 20;
/// Longest TCP header: Data Offset is four bits of 32-bit words.
pub const MAX_HEADER_LEN: usize = 60;
/// Most option octets a header holds.
pub const MAX_OPTIONS_LEN: usize = MAX_HEADER_LEN - HEADER_LEN;
/// Most SACK blocks one option holds (RFC 2018 §3: 40 option octets allow 4).
pub const MAX_SACK_BLOCKS: usize = 4;
/// Largest Window Scale shift (RFC 7323 §2.3).
pub const MAX_WINDOW_SHIFT: u8 = 14;

mod field {
    pub const SRC_PORT: usize = 0;
    pub const DST_PORT: usize = 2;
    pub const SEQ_NUM: usize = 4;
    pub const ACK_NUM: usize = 8;
    pub const DATA_OFF: usize = 12;
    pub const FLAGS: usize = 13;
    pub const WINDOW: usize = 14;
    pub const CHECKSUM: usize = 16;
    pub const URGENT: usize = 18;
    pub const OPTIONS: usize = 20;
}

/// Option kinds (IANA "TCP Option Kind Numbers").
mod kind {
    pub const END: u8 = 0;
    pub const NOP: u8 = 1;
    pub const MSS: u8 = 2;
    pub const WINDOW_SCALE: u8 = 3;
    pub const SACK_PERMITTED: u8 = 4;
    pub const SACK: u8 = 5;
    pub const TIMESTAMP: u8 = 8;
}

/// The eight control bits (RFC 9293 §3.1; ECE and CWR from RFC 3168 §6.1).
/// Any combination is representable, including ones a stack must reject.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Flags(pub u8);

impl Flags {
    /// No more data from sender.
    pub const FIN: Flags = Flags(0x01);
    /// Synchronize sequence numbers.
    pub const SYN: Flags = Flags(0x02);
    /// Reset the connection.
    pub const RST: Flags = Flags(0x04);
    /// Push function.
    pub const PSH: Flags = Flags(0x08);
    /// Acknowledgment field is significant.
    pub const ACK: Flags = Flags(0x10);
    /// Urgent pointer field is significant.
    pub const URG: Flags = Flags(0x20);
    /// ECN-Echo (RFC 3168).
    pub const ECE: Flags = Flags(0x40);
    /// Congestion Window Reduced (RFC 3168).
    pub const CWR: Flags = Flags(0x80);

    const NAMES: [(Flags, &'static str); 8] = [
        (Flags::FIN, "FIN"),
        (Flags::SYN, "SYN"),
        (Flags::RST, "RST"),
        (Flags::PSH, "PSH"),
        (Flags::ACK, "ACK"),
        (Flags::URG, "URG"),
        (Flags::ECE, "ECE"),
        (Flags::CWR, "CWR"),
    ];

    /// No bit set.
    pub const fn empty() -> Flags {
        Flags(0)
    }

    /// The raw octet.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: Flags) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether any bit of `other` is set in `self`.
    pub const fn intersects(self, other: Flags) -> bool {
        self.0 & other.0 != 0
    }

    /// Whether no bit is set.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }
}

impl ops::BitOr for Flags {
    type Output = Flags;
    fn bitor(self, rhs: Flags) -> Flags {
        Flags(self.0 | rhs.0)
    }
}

impl ops::BitOrAssign for Flags {
    fn bitor_assign(&mut self, rhs: Flags) {
        self.0 |= rhs.0;
    }
}

impl ops::BitAnd for Flags {
    type Output = Flags;
    fn bitand(self, rhs: Flags) -> Flags {
        Flags(self.0 & rhs.0)
    }
}

impl ops::Not for Flags {
    type Output = Flags;
    fn not(self) -> Flags {
        Flags(!self.0)
    }
}

impl fmt::Display for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        let mut first = true;
        for (flag, name) in Self::NAMES {
            if self.contains(flag) {
                if !first {
                    f.write_str("|")?;
                }
                f.write_str(name)?;
                first = false;
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Flags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Flags({self})")
    }
}

/// The Timestamps option's values (RFC 7323 §3.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Timestamp {
    /// TSval: the sender's timestamp clock.
    pub tsval: u32,
    /// TSecr: the TSval echoed back; valid only with ACK set (RFC 7323 §3.2).
    pub tsecr: u32,
}

/// One TCP option as found in a header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TcpOption<'a> {
    /// Kind 0: End of Option List; what follows is padding.
    EndOfList,
    /// Kind 1: No-Operation, for alignment.
    NoOperation,
    /// Kind 2: Maximum Segment Size (RFC 9293 §3.7.1).
    MaxSegmentSize(u16),
    /// Kind 3: Window Scale shift count, as received (RFC 7323 §2.2).
    WindowScale(u8),
    /// Kind 4: SACK-Permitted (RFC 2018 §2).
    SackPermitted,
    /// Kind 5: SACK blocks, left and right edge each (RFC 2018 §3); the
    /// first `n` entries are `Some`.
    SackRange([Option<(u32, u32)>; MAX_SACK_BLOCKS]),
    /// Kind 8: Timestamps (RFC 7323 §3.2).
    Timestamp(Timestamp),
    /// Any other kind, with the octets after its length octet.
    Unknown {
        /// Option kind.
        kind: u8,
        /// Option data (length minus two octets).
        data: &'a [u8],
    },
}

impl<'a> TcpOption<'a> {
    /// Parse the option at the start of `buffer`, returning what follows it.
    /// Error offsets are counted from the start of `buffer`.
    pub fn parse(buffer: &'a [u8]) -> Result<(&'a [u8], TcpOption<'a>), Error> {
        Self::parse_at(buffer, 0)
    }

    /// [`parse`](Self::parse), with `offset` the position of `buffer` within
    /// the TCP header, for errors.
    fn parse_at(buffer: &'a [u8], offset: usize) -> Result<(&'a [u8], TcpOption<'a>), Error> {
        let room = buffer.len();
        let bad = |kind, len| Error::BadOption {
            kind,
            offset,
            len,
            room,
        };
        let (&kind, rest) = buffer.split_first().ok_or(Error::Truncated {
            layer: Layer::Tcp,
            needed: offset + 1,
            got: offset,
        })?;
        match kind {
            kind::END => return Ok((rest, TcpOption::EndOfList)),
            kind::NOP => return Ok((rest, TcpOption::NoOperation)),
            _ => {}
        }
        // RFC 9293 §3.2 MUST-68: every other option has a length octet,
        // counting the kind and length octets. MUST-7: an implementation must
        // be prepared for an illegal length (zero, one, or past the header)
        // and not loop or read beyond the header; such a header is rejected.
        let len = rest.first().copied().ok_or(bad(kind, 0))?;
        if len < 2 || usize::from(len) > room {
            return Err(bad(kind, len));
        }
        let (this, rest) = buffer.split_at(usize::from(len));
        let data = this.get(2..).unwrap_or_default();
        let option = match (kind, data) {
            // RFC 9293 §3.2: MSS is kind 2, length 4.
            (kind::MSS, &[a, b]) => TcpOption::MaxSegmentSize(u16::from_be_bytes([a, b])),
            // RFC 7323 §2.2: Window Scale is kind 3, length 3.
            (kind::WINDOW_SCALE, &[shift]) => TcpOption::WindowScale(shift),
            // RFC 2018 §2: SACK-Permitted is kind 4, length 2.
            (kind::SACK_PERMITTED, &[]) => TcpOption::SackPermitted,
            // RFC 2018 §3: SACK is kind 5, length 2 + 8n; at most four blocks fit.
            (kind::SACK, blocks)
                if !blocks.is_empty()
                    && blocks.len() % 8 == 0
                    && blocks.len() / 8 <= MAX_SACK_BLOCKS =>
            {
                let mut ranges = [None; MAX_SACK_BLOCKS];
                for (slot, block) in ranges.iter_mut().zip(blocks.chunks_exact(8)) {
                    let left = u32::from_be_bytes([block[0], block[1], block[2], block[3]]);
                    let right = u32::from_be_bytes([block[4], block[5], block[6], block[7]]);
                    *slot = Some((left, right));
                }
                TcpOption::SackRange(ranges)
            }
            // RFC 7323 §3.2: Timestamps is kind 8, length 10.
            (kind::TIMESTAMP, &[a, b, c, d, e, f, g, h]) => TcpOption::Timestamp(Timestamp {
                tsval: u32::from_be_bytes([a, b, c, d]),
                tsecr: u32::from_be_bytes([e, f, g, h]),
            }),
            // A known kind with another length is malformed.
            (
                kind::MSS
                | kind::WINDOW_SCALE
                | kind::SACK_PERMITTED
                | kind::SACK
                | kind::TIMESTAMP,
                _,
            ) => return Err(bad(kind, len)),
            // RFC 9293 §3.2 MUST-6: options not implemented are skipped by
            // their length, without error.
            (kind, data) => TcpOption::Unknown { kind, data },
        };
        Ok((rest, option))
    }

    /// Octets the option takes.
    pub fn buffer_len(&self) -> usize {
        match self {
            TcpOption::EndOfList | TcpOption::NoOperation => 1,
            TcpOption::MaxSegmentSize(_) => 4,
            TcpOption::WindowScale(_) => 3,
            TcpOption::SackPermitted => 2,
            TcpOption::SackRange(ranges) => 2 + 8 * ranges.iter().flatten().count(),
            TcpOption::Timestamp(_) => 10,
            TcpOption::Unknown { data, .. } => 2 + data.len(),
        }
    }

    /// Write the option at the start of `buffer`, returning what follows it.
    /// Fails when the buffer is too short or an unknown option's data does
    /// not fit its length octet.
    pub fn emit<'b>(&self, buffer: &'b mut [u8]) -> Result<&'b mut [u8], Error> {
        let len = self.buffer_len();
        let got = buffer.len();
        if got < len {
            return Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: len,
                got,
            });
        }
        let (this, rest) = buffer.split_at_mut(len);
        let len_octet = u8::try_from(len).map_err(|_| Error::TooLarge {
            layer: Layer::Tcp,
            field: "option length",
            value: len,
            max: usize::from(u8::MAX),
        })?;
        let mut put = |kind: u8, data: &[u8]| {
            this[0] = kind;
            if len > 1 {
                this[1] = len_octet;
                this[2..].copy_from_slice(data);
            }
        };
        match *self {
            TcpOption::EndOfList => put(kind::END, &[]),
            TcpOption::NoOperation => put(kind::NOP, &[]),
            TcpOption::MaxSegmentSize(mss) => put(kind::MSS, &mss.to_be_bytes()),
            TcpOption::WindowScale(shift) => put(kind::WINDOW_SCALE, &[shift]),
            TcpOption::SackPermitted => put(kind::SACK_PERMITTED, &[]),
            TcpOption::SackRange(ranges) => {
                let mut data = [0u8; 8 * MAX_SACK_BLOCKS];
                let mut n = 0;
                for (left, right) in ranges.iter().flatten() {
                    data[n..n + 4].copy_from_slice(&left.to_be_bytes());
                    data[n + 4..n + 8].copy_from_slice(&right.to_be_bytes());
                    n += 8;
                }
                put(kind::SACK, &data[..n]);
            }
            TcpOption::Timestamp(ts) => {
                let mut data = [0u8; 8];
                data[..4].copy_from_slice(&ts.tsval.to_be_bytes());
                data[4..].copy_from_slice(&ts.tsecr.to_be_bytes());
                put(kind::TIMESTAMP, &data);
            }
            TcpOption::Unknown { kind, data } => put(kind, data),
        }
        Ok(rest)
    }
}

/// Iterator over the options of a header; see [`Packet::options_iter`].
///
/// Yields each option, End of Option List included, and stops after End of
/// Option List, at the end of the option space, or after the first error.
#[derive(Debug, Clone)]
pub struct OptionsIter<'a> {
    rest: &'a [u8],
    offset: usize,
}

impl<'a> OptionsIter<'a> {
    /// Iterate over `options`, the octets from offset 20 of a TCP header.
    pub fn new(options: &'a [u8]) -> Self {
        OptionsIter {
            rest: options,
            offset: HEADER_LEN,
        }
    }
}

impl<'a> Iterator for OptionsIter<'a> {
    type Item = Result<TcpOption<'a>, Error>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        match TcpOption::parse_at(self.rest, self.offset) {
            Ok((rest, option)) => {
                self.offset += self.rest.len() - rest.len();
                // RFC 9293 §3.2: End of Option List marks the end of all
                // options; the rest is padding.
                self.rest = if option == TcpOption::EndOfList {
                    &[]
                } else {
                    rest
                };
                Some(Ok(option))
            }
            Err(e) => {
                self.rest = &[];
                Some(Err(e))
            }
        }
    }
}

/// A zero-copy view of a TCP segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wrap a buffer without checking it. Field getters and setters panic if
    /// the buffer is shorter than the field; the options and payload, whose
    /// bounds come from Data Offset, are cut short to the buffer.
    pub const fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wrap a buffer after [`check_len`](Self::check_len).
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Error> {
        let packet = Self::new_unchecked(buffer);
        packet.check_len()?;
        Ok(packet)
    }

    /// Check that the fixed header fits, that Data Offset is at least 5
    /// (RFC 9293 §3.1: "the TCP header ... is an integer multiple of 32 bits",
    /// 20 octets without options), and that the buffer holds Data Offset
    /// words. Options and checksum are checked by [`Repr::parse`].
    pub fn check_len(&self) -> Result<(), Error> {
        let got = self.buffer.as_ref().len();
        if got < HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: HEADER_LEN,
                got,
            });
        }
        let header_len = self.header_len();
        if header_len < HEADER_LEN {
            return Err(Error::BadLength {
                layer: Layer::Tcp,
                field: "Data Offset",
                value: header_len,
                min: HEADER_LEN,
            });
        }
        if got < header_len {
            return Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: header_len,
                got,
            });
        }
        Ok(())
    }

    /// The wrapped buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    /// Source Port.
    pub fn src_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::SRC_PORT)
    }

    /// Destination Port.
    pub fn dst_port(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::DST_PORT)
    }

    /// Sequence Number.
    pub fn seq_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::SEQ_NUM)
    }

    /// Acknowledgment Number (meaningful when ACK is set).
    pub fn ack_number(&self) -> u32 {
        read_u32(self.buffer.as_ref(), field::ACK_NUM)
    }

    /// Data Offset: header length in 32-bit words.
    pub fn data_offset(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] >> 4
    }

    /// Header length in octets (Data Offset × 4).
    pub fn header_len(&self) -> usize {
        usize::from(self.data_offset()) * 4
    }

    /// The four reserved bits after Data Offset (RFC 9293 §3.1: "must be
    /// ignored in received segments").
    pub fn reserved(&self) -> u8 {
        self.buffer.as_ref()[field::DATA_OFF] & 0x0f
    }

    /// The eight control bits.
    pub fn flags(&self) -> Flags {
        Flags(self.buffer.as_ref()[field::FLAGS])
    }

    /// FIN.
    pub fn fin(&self) -> bool {
        self.flags().contains(Flags::FIN)
    }

    /// SYN.
    pub fn syn(&self) -> bool {
        self.flags().contains(Flags::SYN)
    }

    /// RST.
    pub fn rst(&self) -> bool {
        self.flags().contains(Flags::RST)
    }

    /// PSH.
    pub fn psh(&self) -> bool {
        self.flags().contains(Flags::PSH)
    }

    /// ACK.
    pub fn ack(&self) -> bool {
        self.flags().contains(Flags::ACK)
    }

    /// URG.
    pub fn urg(&self) -> bool {
        self.flags().contains(Flags::URG)
    }

    /// ECE.
    pub fn ece(&self) -> bool {
        self.flags().contains(Flags::ECE)
    }

    /// CWR.
    pub fn cwr(&self) -> bool {
        self.flags().contains(Flags::CWR)
    }

    /// Window (unscaled).
    pub fn window(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::WINDOW)
    }

    /// Checksum.
    pub fn checksum(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::CHECKSUM)
    }

    /// Urgent Pointer (meaningful when URG is set).
    pub fn urgent_pointer(&self) -> u16 {
        read_u16(self.buffer.as_ref(), field::URGENT)
    }

    /// The options and padding octets (empty when Data Offset is 5).
    pub fn options(&self) -> &[u8] {
        let data = self.buffer.as_ref();
        &data[clamp(field::OPTIONS, self.header_len(), data.len())]
    }

    /// Iterate over the options.
    pub fn options_iter(&self) -> OptionsIter<'_> {
        OptionsIter::new(self.options())
    }

    /// Sequence space the segment occupies: data octets plus one for SYN and
    /// one for FIN (RFC 9293 §3.4, SEG.LEN).
    pub fn segment_len(&self) -> usize {
        let data = self.buffer.as_ref().len().saturating_sub(self.header_len());
        data + usize::from(self.syn()) + usize::from(self.fin())
    }

    /// One's complement sum over the pseudo-header and the whole buffer.
    fn sum(&self, src_addr: &Address, dst_addr: &Address) -> Option<u16> {
        let data = self.buffer.as_ref();
        let len = u16::try_from(data.len()).ok()?;
        Some(checksum::combine(&[
            checksum::pseudo_header(src_addr, dst_addr, Protocol::TCP, len),
            checksum::data(data),
        ]))
    }

    /// Whether the Checksum verifies over the IPv4 pseudo-header and the
    /// whole buffer (RFC 9293 §3.1, "Checksum"). False for a buffer longer
    /// than the 16-bit TCP length of the pseudo-header.
    pub fn verify_checksum(&self, src_addr: &Address, dst_addr: &Address) -> bool {
        self.sum(src_addr, dst_addr) == Some(!0)
    }
}

impl<'a, T: AsRef<[u8]> + ?Sized> Packet<&'a T> {
    /// The data: octets after the header, to the end of the buffer.
    pub fn payload(&self) -> &'a [u8] {
        let data = self.buffer.as_ref();
        &data[clamp(self.header_len(), data.len(), data.len())]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    /// Set Source Port.
    pub fn set_src_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::SRC_PORT, value);
    }

    /// Set Destination Port.
    pub fn set_dst_port(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::DST_PORT, value);
    }

    /// Set Sequence Number.
    pub fn set_seq_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::SEQ_NUM, value);
    }

    /// Set Acknowledgment Number.
    pub fn set_ack_number(&mut self, value: u32) {
        write_u32(self.buffer.as_mut(), field::ACK_NUM, value);
    }

    /// Set Data Offset, in 32-bit words (only the low four bits are used).
    pub fn set_data_offset(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0x0f) | (value << 4);
    }

    /// Set Data Offset from a header length in octets (rounded down to a
    /// multiple of four).
    pub fn set_header_len(&mut self, value: usize) {
        self.set_data_offset((value / 4).min(15) as u8);
    }

    /// Set the reserved bits (only the low four bits are used).
    pub fn set_reserved(&mut self, value: u8) {
        let b = &mut self.buffer.as_mut()[field::DATA_OFF];
        *b = (*b & 0xf0) | (value & 0x0f);
    }

    /// Set all eight control bits.
    pub fn set_flags(&mut self, value: Flags) {
        self.buffer.as_mut()[field::FLAGS] = value.0;
    }

    fn set_flag(&mut self, flag: Flags, on: bool) {
        let old = self.flags();
        self.set_flags(if on { old | flag } else { old & !flag });
    }

    /// Set FIN.
    pub fn set_fin(&mut self, value: bool) {
        self.set_flag(Flags::FIN, value);
    }

    /// Set SYN.
    pub fn set_syn(&mut self, value: bool) {
        self.set_flag(Flags::SYN, value);
    }

    /// Set RST.
    pub fn set_rst(&mut self, value: bool) {
        self.set_flag(Flags::RST, value);
    }

    /// Set PSH.
    pub fn set_psh(&mut self, value: bool) {
        self.set_flag(Flags::PSH, value);
    }

    /// Set ACK.
    pub fn set_ack(&mut self, value: bool) {
        self.set_flag(Flags::ACK, value);
    }

    /// Set URG.
    pub fn set_urg(&mut self, value: bool) {
        self.set_flag(Flags::URG, value);
    }

    /// Set ECE.
    pub fn set_ece(&mut self, value: bool) {
        self.set_flag(Flags::ECE, value);
    }

    /// Set CWR.
    pub fn set_cwr(&mut self, value: bool) {
        self.set_flag(Flags::CWR, value);
    }

    /// Set Window.
    pub fn set_window(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::WINDOW, value);
    }

    /// Set Checksum.
    pub fn set_checksum(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::CHECKSUM, value);
    }

    /// Set Urgent Pointer.
    pub fn set_urgent_pointer(&mut self, value: u16) {
        write_u16(self.buffer.as_mut(), field::URGENT, value);
    }

    /// The options and padding octets, mutably.
    pub fn options_mut(&mut self) -> &mut [u8] {
        let range = clamp(
            field::OPTIONS,
            self.header_len(),
            self.buffer.as_ref().len(),
        );
        &mut self.buffer.as_mut()[range]
    }

    /// The data, mutably.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.buffer.as_ref().len();
        let range = clamp(self.header_len(), len, len);
        &mut self.buffer.as_mut()[range]
    }

    /// Compute the Checksum over the IPv4 pseudo-header and the whole buffer
    /// with the field zeroed, and store it (RFC 9293 §3.1 MUST-2: the sender
    /// generates it). Leaves the field zero for a buffer longer than the
    /// pseudo-header's 16-bit TCP length can describe.
    pub fn fill_checksum(&mut self, src_addr: &Address, dst_addr: &Address) {
        self.set_checksum(0);
        if let Some(sum) = self.sum(src_addr, dst_addr) {
            self.set_checksum(!sum);
        }
    }
}

impl<T: AsRef<[u8]>> AsRef<[u8]> for Packet<T> {
    fn as_ref(&self) -> &[u8] {
        self.buffer.as_ref()
    }
}

/// A TCP segment, parsed: the header fields, the options this crate knows,
/// and the payload borrowed from the packet.
///
/// Fields are as on the wire: `ack_number` and `urgent_pointer` are kept
/// even when ACK or URG is clear, and `window_scale` is not clamped (a
/// receiver MUST use 14 for a larger value, RFC 7323 §2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repr<'a> {
    /// Source Port.
    pub src_port: u16,
    /// Destination Port.
    pub dst_port: u16,
    /// Sequence Number.
    pub seq_number: u32,
    /// Acknowledgment Number.
    pub ack_number: u32,
    /// The control bits.
    pub flags: Flags,
    /// Window (unscaled).
    pub window: u16,
    /// Urgent Pointer.
    pub urgent_pointer: u16,
    /// Maximum Segment Size option.
    pub max_seg_size: Option<u16>,
    /// Window Scale option: the shift count.
    pub window_scale: Option<u8>,
    /// SACK-Permitted option present.
    pub sack_permitted: bool,
    /// SACK option blocks (left edge, right edge), first blocks first.
    pub sack_ranges: [Option<(u32, u32)>; MAX_SACK_BLOCKS],
    /// Timestamps option.
    pub timestamp: Option<Timestamp>,
    /// The data.
    pub payload: &'a [u8],
}

impl<'a> Repr<'a> {
    /// A segment with the given ports, sequence number and flags and
    /// everything else zero or absent.
    pub const fn new(src_port: u16, dst_port: u16, seq_number: u32, flags: Flags) -> Repr<'a> {
        Repr {
            src_port,
            dst_port,
            seq_number,
            ack_number: 0,
            flags,
            window: 0,
            urgent_pointer: 0,
            max_seg_size: None,
            window_scale: None,
            sack_permitted: false,
            sack_ranges: [None; MAX_SACK_BLOCKS],
            timestamp: None,
            payload: &[],
        }
    }

    /// Parse and validate a segment: lengths (see [`Packet::check_len`]),
    /// the Checksum over the pseudo-header of `src_addr` and `dst_addr`, and
    /// the options. Unknown options are skipped; a repeated option keeps its
    /// last value.
    pub fn parse<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        // RFC 9293 §3.1 MUST-3: the receiver checks the checksum, and a
        // segment that fails it is dropped.
        if !packet.verify_checksum(src_addr, dst_addr) {
            let computed = match packet.sum(src_addr, dst_addr) {
                Some(sum) => checksum::expected(sum, packet.checksum()),
                None => 0,
            };
            return Err(Error::BadChecksum {
                layer: Layer::Tcp,
                found: packet.checksum(),
                computed,
            });
        }
        Self::parse_fields(packet)
    }

    /// [`parse`](Self::parse) without summing the segment: lengths and
    /// options are checked, the Checksum is not read. Only for a link that
    /// cannot alter a frame and whose sender leaves the sum to it (the
    /// interface's `trusted_link`: shared memory between two stacks on one
    /// host, where Linux trusts a veth peer's `CHECKSUM_PARTIAL` segments
    /// the same way); on a wire RFC 9293 §3.1 MUST-3 needs
    /// [`parse`](Self::parse).
    pub fn parse_unverified<T: AsRef<[u8]> + ?Sized>(
        packet: &Packet<&'a T>,
    ) -> Result<Repr<'a>, Error> {
        packet.check_len()?;
        Self::parse_fields(packet)
    }

    fn parse_fields<T: AsRef<[u8]> + ?Sized>(packet: &Packet<&'a T>) -> Result<Repr<'a>, Error> {
        let mut repr = Repr {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            seq_number: packet.seq_number(),
            ack_number: packet.ack_number(),
            flags: packet.flags(),
            window: packet.window(),
            urgent_pointer: packet.urgent_pointer(),
            payload: packet.payload(),
            ..Repr::new(0, 0, 0, Flags::empty())
        };
        let options = packet.options();
        // The layout nearly every segment of an established connection
        // carries (RFC 7323 Appendix A's recommended one, as Linux and we
        // send it): NOP, NOP, Timestamps, nothing else. Read it in place,
        // as BSD's header prediction does, without walking the list.
        if let [kind::NOP, kind::NOP, kind::TIMESTAMP, 10, v0, v1, v2, v3, e0, e1, e2, e3] =
            *options
        {
            repr.timestamp = Some(Timestamp {
                tsval: u32::from_be_bytes([v0, v1, v2, v3]),
                tsecr: u32::from_be_bytes([e0, e1, e2, e3]),
            });
            return Ok(repr);
        }
        for option in OptionsIter::new(options) {
            match option? {
                TcpOption::EndOfList | TcpOption::NoOperation | TcpOption::Unknown { .. } => {}
                TcpOption::MaxSegmentSize(mss) => repr.max_seg_size = Some(mss),
                TcpOption::WindowScale(shift) => repr.window_scale = Some(shift),
                TcpOption::SackPermitted => repr.sack_permitted = true,
                TcpOption::SackRange(ranges) => repr.sack_ranges = ranges,
                TcpOption::Timestamp(ts) => repr.timestamp = Some(ts),
            }
        }
        Ok(repr)
    }

    /// How many of `sack_ranges` [`emit`](Self::emit) writes: as many as fit
    /// the option space after the other options (RFC 2018 §3: "the SACK
    /// option SHOULD be filled out by repeating the most recently reported
    /// SACK blocks", so the first blocks are kept).
    pub fn sack_blocks_emitted(&self) -> usize {
        let want = self.sack_ranges.iter().flatten().count();
        let room = MAX_OPTIONS_LEN.saturating_sub(self.options_len_without_sack());
        // NOP NOP kind length, then 8 octets a block.
        let fit = room.saturating_sub(4) / 8;
        want.min(fit)
    }

    fn options_len_without_sack(&self) -> usize {
        let mut len = 0;
        if self.max_seg_size.is_some() {
            len += 4;
        }
        // Timestamps with SACK-Permitted before it, or two NOPs: 12 either way.
        // SACK-Permitted alone: two NOPs and the option.
        len += match (self.timestamp.is_some(), self.sack_permitted) {
            (true, _) => 12,
            (false, true) => 4,
            (false, false) => 0,
        };
        if self.window_scale.is_some() {
            len += 4;
        }
        len
    }

    /// Octets of options [`emit`](Self::emit) writes, a multiple of four.
    pub fn options_len(&self) -> usize {
        let mut len = self.options_len_without_sack();
        let blocks = self.sack_blocks_emitted();
        if blocks > 0 {
            len += 4 + 8 * blocks;
        }
        len
    }

    /// Header length [`emit`](Self::emit) writes.
    pub fn header_len(&self) -> usize {
        HEADER_LEN + self.options_len()
    }

    /// Octets of the whole segment: header and payload.
    pub fn buffer_len(&self) -> usize {
        self.header_len() + self.payload.len()
    }

    /// Sequence space the segment occupies: payload octets plus one for SYN
    /// and one for FIN (RFC 9293 §3.4, SEG.LEN).
    pub fn segment_len(&self) -> usize {
        self.payload.len()
            + usize::from(self.flags.contains(Flags::SYN))
            + usize::from(self.flags.contains(Flags::FIN))
    }

    /// Write the segment, payload included, into the start of `packet`'s
    /// buffer and fill in the Checksum over the pseudo-header of `src_addr`
    /// and `dst_addr` and the [`buffer_len`](Self::buffer_len) octets
    /// written. The buffer should be exactly `buffer_len` octets long, as the
    /// checksum does not cover anything after that.
    ///
    /// Options go out in the order Linux uses, aligned with NOPs (RFC 9293
    /// §3.1 permits any order): MSS; SACK-Permitted and Timestamps; Window
    /// Scale; SACK blocks, as many as fit. Fails, writing nothing, when the
    /// buffer is too short or a field is out of range.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut Packet<T>,
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<(), Error> {
        let header_len = self.header_len();
        let len = self.buffer_len();
        let buf = packet.buffer.as_mut();
        let got = buf.len();
        let Some(segment) = buf.get_mut(..len) else {
            return Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: len,
                got,
            });
        };
        let (header, payload) = segment.split_at_mut(header_len);
        self.emit_header(header, src_addr, dst_addr)?;
        payload.copy_from_slice(self.payload);
        Ok(())
    }

    /// Write only the header ([`header_len`](Self::header_len) octets, into
    /// the start of `buffer`), with a Checksum that covers the payload where
    /// it lies: a sender that gathers header and payload into the frame
    /// (one copy of the data, not two) emits the header alone. Fails, writing
    /// nothing, as [`emit`](Self::emit) does.
    pub fn emit_header(
        &self,
        buffer: &mut [u8],
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<(), Error> {
        self.emit_header_over(buffer, self.payload, src_addr, dst_addr)
    }

    /// [`emit_header`](Self::emit_header) for a segment whose data is
    /// `payload`, not [`payload`](Self::payload) (which is ignored): the
    /// data was written in place (into a device's transmit buffer, after
    /// the header) and the Checksum covers it where it lies. The segment is
    /// `header_len() + payload.len()` octets.
    pub fn emit_header_over(
        &self,
        buffer: &mut [u8],
        payload: &[u8],
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<(), Error> {
        self.emit_header_sum(
            buffer,
            payload.len(),
            checksum::data(payload),
            src_addr,
            dst_addr,
        )
    }

    /// [`emit_header_sum`](Self::emit_header_sum) for a link that
    /// finishes the checksum itself, or needs none (the interface's
    /// `trusted_link`): the Checksum field holds only the folded sum of the
    /// IPv4 pseudo-header for a segment of `header_len() + payload_len`
    /// octets, not complemented, as a Linux sender with TX checksum
    /// offload leaves it for the NIC (`CHECKSUM_PARTIAL`). Neither the
    /// header nor the payload is summed. Fails, writing nothing, as
    /// [`emit`](Self::emit) does.
    pub fn emit_header_partial(
        &self,
        buffer: &mut [u8],
        payload_len: usize,
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<(), Error> {
        self.emit_header_with(buffer, payload_len, src_addr, dst_addr, None)
    }

    /// [`emit_header_over`](Self::emit_header_over) for a payload of
    /// `payload_len` octets given by its one's complement sum (RFC 1071,
    /// [`checksum::data`] over it, or partial sums combined): for a payload
    /// that lies in several buffers.
    pub fn emit_header_sum(
        &self,
        buffer: &mut [u8],
        payload_len: usize,
        payload_sum: u16,
        src_addr: &Address,
        dst_addr: &Address,
    ) -> Result<(), Error> {
        self.emit_header_with(buffer, payload_len, src_addr, dst_addr, Some(payload_sum))
    }

    /// The header, with a full Checksum over the payload whose sum is
    /// `payload_sum`, or (`None`) the pseudo-header's sum alone.
    fn emit_header_with(
        &self,
        buffer: &mut [u8],
        payload_len: usize,
        src_addr: &Address,
        dst_addr: &Address,
        payload_sum: Option<u16>,
    ) -> Result<(), Error> {
        let header_len = self.header_len();
        let len = header_len + payload_len;
        let got = buffer.len();
        // The pseudo-header's TCP length is 16 bits (RFC 9293 §3.1).
        let seg_len = u16::try_from(len).map_err(|_| Error::TooLarge {
            layer: Layer::Tcp,
            field: "TCP length",
            value: len,
            max: usize::from(u16::MAX),
        })?;
        if let Some(shift) = self.window_scale {
            // RFC 7323 §2.3: the shift count is limited to 14.
            if shift > MAX_WINDOW_SHIFT {
                return Err(Error::TooLarge {
                    layer: Layer::Tcp,
                    field: "Window Scale shift.cnt",
                    value: shift.into(),
                    max: MAX_WINDOW_SHIFT.into(),
                });
            }
        }
        let Some(header) = buffer.get_mut(..header_len) else {
            return Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: header_len,
                got,
            });
        };
        let mut packet = Packet::new_unchecked(header);
        packet.set_src_port(self.src_port);
        packet.set_dst_port(self.dst_port);
        packet.set_seq_number(self.seq_number);
        packet.set_ack_number(self.ack_number);
        packet.set_header_len(header_len);
        // RFC 9293 §3.1: reserved bits "must be zero in generated segments".
        packet.set_reserved(0);
        packet.set_flags(self.flags);
        packet.set_window(self.window);
        packet.set_urgent_pointer(self.urgent_pointer);
        self.emit_options(packet.options_mut())?;
        // RFC 9293 §3.1: the checksum covers the pseudo-header, the header
        // and the data, with the checksum field itself taken as zero. The
        // header is a whole number of 32-bit words, so the data's sum adds
        // in as it stands (RFC 1071 §2 (C)).
        let pseudo = checksum::pseudo_header(src_addr, dst_addr, Protocol::TCP, seg_len);
        let Some(payload_sum) = payload_sum else {
            packet.set_checksum(pseudo);
            return Ok(());
        };
        packet.set_checksum(0);
        let sum = checksum::combine(&[pseudo, checksum::data(packet.buffer), payload_sum]);
        packet.set_checksum(!sum);
        Ok(())
    }

    fn emit_options(&self, mut buf: &mut [u8]) -> Result<(), Error> {
        // An established connection's usual segment: NOP, NOP, Timestamps
        // and nothing else (the layout below writes the same octets).
        if let (Some(ts), None, false, None, true) = (
            self.timestamp,
            self.max_seg_size,
            self.sack_permitted,
            self.window_scale,
            self.sack_ranges.iter().all(Option::is_none),
        ) {
            if let Some(dst) = buf.get_mut(..12) {
                let (v, e) = (ts.tsval.to_be_bytes(), ts.tsecr.to_be_bytes());
                dst.copy_from_slice(&[
                    kind::NOP,
                    kind::NOP,
                    kind::TIMESTAMP,
                    10,
                    v[0],
                    v[1],
                    v[2],
                    v[3],
                    e[0],
                    e[1],
                    e[2],
                    e[3],
                ]);
                buf[12..].fill(kind::END);
                return Ok(());
            }
        }
        if let Some(mss) = self.max_seg_size {
            buf = TcpOption::MaxSegmentSize(mss).emit(buf)?;
        }
        match (self.timestamp, self.sack_permitted) {
            (Some(ts), true) => {
                buf = TcpOption::SackPermitted.emit(buf)?;
                buf = TcpOption::Timestamp(ts).emit(buf)?;
            }
            (Some(ts), false) => {
                buf = TcpOption::NoOperation.emit(buf)?;
                buf = TcpOption::NoOperation.emit(buf)?;
                buf = TcpOption::Timestamp(ts).emit(buf)?;
            }
            (None, true) => {
                buf = TcpOption::NoOperation.emit(buf)?;
                buf = TcpOption::NoOperation.emit(buf)?;
                buf = TcpOption::SackPermitted.emit(buf)?;
            }
            (None, false) => {}
        }
        if let Some(shift) = self.window_scale {
            buf = TcpOption::NoOperation.emit(buf)?;
            buf = TcpOption::WindowScale(shift).emit(buf)?;
        }
        let blocks = self.sack_blocks_emitted();
        if blocks > 0 {
            let mut ranges = [None; MAX_SACK_BLOCKS];
            for (slot, range) in ranges
                .iter_mut()
                .zip(self.sack_ranges.iter().flatten())
                .take(blocks)
            {
                *slot = Some(*range);
            }
            buf = TcpOption::NoOperation.emit(buf)?;
            buf = TcpOption::NoOperation.emit(buf)?;
            buf = TcpOption::SackRange(ranges).emit(buf)?;
        }
        // The layout above is a multiple of four; pad with End of Option
        // List should it ever not be (RFC 9293 §3.1, "Options").
        buf.fill(kind::END);
        Ok(())
    }
}

impl fmt::Display for Repr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "TCP src={} dst={} [{}] seq={}",
            self.src_port, self.dst_port, self.flags, self.seq_number
        )?;
        if self.flags.contains(Flags::ACK) {
            write!(f, " ack={}", self.ack_number)?;
        }
        write!(f, " win={}", self.window)?;
        if self.flags.contains(Flags::URG) {
            write!(f, " urg={}", self.urgent_pointer)?;
        }
        write!(f, " len={}", self.payload.len())?;
        if let Some(mss) = self.max_seg_size {
            write!(f, " mss={mss}")?;
        }
        if self.sack_permitted {
            f.write_str(" sackOK")?;
        }
        if let Some(ts) = self.timestamp {
            write!(f, " ts={},{}", ts.tsval, ts.tsecr)?;
        }
        if let Some(shift) = self.window_scale {
            write!(f, " wscale={shift}")?;
        }
        for (left, right) in self.sack_ranges.iter().flatten() {
            write!(f, " sack={left}-{right}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::{
        EtherType, EthernetAddress, EthernetFrame, EthernetRepr, Ipv4Packet, Ipv4Repr,
    };
    use super::*;

    const A: Address = Address::new(192, 168, 10, 1);
    const B: Address = Address::new(192, 168, 10, 2);

    /// A SYN that Linux 6.18 sent from a TAP device (which has no checksum
    /// offload, so both checksums were computed by the kernel):
    /// 192.168.10.1:56348 → 192.168.10.2:4791, ISN 0xf86bed3e, window 64240,
    /// options MSS 1460, SACK-Permitted, Timestamps (TSval 0x0b21136f,
    /// TSecr 0), NOP, Window Scale 10.
    static SYN_FRAME: [u8; 74] = [
        0x02, 0x00, 0x00, 0x00, 0x00, 0x02, 0x02, 0x00, 0x00, 0x00, 0x00, 0x01, 0x08,
        0x00, // Ethernet
        0x45, 0x00, 0x00, 0x3c, 0x52, 0x3e, 0x40, 0x00, 0x40, 0x06, 0x53, 0x2a, 0xc0, 0xa8, 0x0a,
        0x01, 0xc0, 0xa8, 0x0a, 0x02, // IPv4
        0xdc, 0x1c, 0x12, 0xb7, 0xf8, 0x6b, 0xed, 0x3e, 0x00, 0x00, 0x00, 0x00, 0xa0, 0x02, 0xfa,
        0xf0, 0xc4, 0xa9, 0x00, 0x00, // TCP
        0x02, 0x04, 0x05, 0xb4, // MSS 1460
        0x04, 0x02, // SACK-Permitted
        0x08, 0x0a, 0x0b, 0x21, 0x13, 0x6f, 0x00, 0x00, 0x00, 0x00, // Timestamps
        0x01, // NOP
        0x03, 0x03, 0x0a, // Window Scale 10
    ];

    /// 192.168.10.2:4791 → 192.168.10.1:56348, PSH|ACK, NOP NOP Timestamps,
    /// "hello" (odd length). Checksum computed outside this crate.
    static DATA_SEGMENT: [u8; 37] = [
        0x12, 0xb7, 0xdc, 0x1c, 0x12, 0x34, 0x56, 0x78, 0xf8, 0x6b, 0xed, 0x3f, 0x80, 0x18, 0x01,
        0xf6, 0x71, 0x3d, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x00, 0xab, 0xcd, 0xef, 0x0b, 0x21,
        0x13, 0x6f, 0x68, 0x65, 0x6c, 0x6c, 0x6f,
    ];

    /// 192.168.10.1:56348 → 192.168.10.2:4791, ACK with NOP NOP Timestamps
    /// and NOP NOP SACK of two blocks. Checksum computed outside this crate.
    static SACK_SEGMENT: [u8; 52] = [
        0xdc, 0x1c, 0x12, 0xb7, 0xf8, 0x6b, 0xed, 0x3f, 0x12, 0x34, 0x56, 0x7d, 0xd0, 0x10, 0x01,
        0xf5, 0x35, 0x92, 0x00, 0x00, 0x01, 0x01, 0x08, 0x0a, 0x0b, 0x21, 0x14, 0x00, 0x00, 0xab,
        0xcd, 0xef, 0x01, 0x01, 0x05, 0x12, 0x12, 0x34, 0x5f, 0xff, 0x12, 0x34, 0x6f, 0xff, 0x12,
        0x34, 0x7f, 0xff, 0x12, 0x34, 0x8f, 0xff,
    ];

    fn syn_repr() -> Repr<'static> {
        Repr {
            window: 64240,
            max_seg_size: Some(1460),
            window_scale: Some(10),
            sack_permitted: true,
            timestamp: Some(Timestamp {
                tsval: 0x0b21_136f,
                tsecr: 0,
            }),
            ..Repr::new(56348, 4791, 0xf86b_ed3e, Flags::SYN)
        }
    }

    fn data_repr() -> Repr<'static> {
        Repr {
            ack_number: 0xf86b_ed3f,
            window: 502,
            timestamp: Some(Timestamp {
                tsval: 0x00ab_cdef,
                tsecr: 0x0b21_136f,
            }),
            payload: b"hello",
            ..Repr::new(4791, 56348, 0x1234_5678, Flags::PSH | Flags::ACK)
        }
    }

    fn sack_repr() -> Repr<'static> {
        Repr {
            ack_number: 0x1234_567d,
            window: 501,
            timestamp: Some(Timestamp {
                tsval: 0x0b21_1400,
                tsecr: 0x00ab_cdef,
            }),
            sack_ranges: [
                Some((0x1234_5fff, 0x1234_6fff)),
                Some((0x1234_7fff, 0x1234_8fff)),
                None,
                None,
            ],
            ..Repr::new(56348, 4791, 0xf86b_ed3f, Flags::ACK)
        }
    }

    #[test]
    fn parse_real_syn_every_field() {
        let eth = EthernetFrame::new_checked(&SYN_FRAME[..]).unwrap();
        assert_eq!(eth.dst_addr(), EthernetAddress([2, 0, 0, 0, 0, 2]));
        assert_eq!(eth.src_addr(), EthernetAddress([2, 0, 0, 0, 0, 1]));
        assert_eq!(eth.ethertype(), EtherType::IPV4);

        let ip = Ipv4Packet::new_checked(eth.payload()).unwrap();
        assert_eq!(ip.checksum(), 0x532a);
        assert!(ip.verify_checksum());
        let ip_repr = Ipv4Repr::parse(&ip).unwrap();
        assert_eq!((ip_repr.src_addr, ip_repr.dst_addr), (A, B));
        assert_eq!(ip_repr.protocol, Protocol::TCP);
        assert_eq!(ip_repr.payload_len, 40);
        assert_eq!((ip_repr.ttl, ip_repr.identification), (64, 0x523e));
        assert!(ip_repr.dont_frag && !ip_repr.more_frags);

        let tcp = Packet::new_checked(ip.payload()).unwrap();
        assert_eq!(tcp.src_port(), 56348);
        assert_eq!(tcp.dst_port(), 4791);
        assert_eq!(tcp.seq_number(), 0xf86b_ed3e);
        assert_eq!(tcp.ack_number(), 0);
        assert_eq!(tcp.data_offset(), 10);
        assert_eq!(tcp.header_len(), 40);
        assert_eq!(tcp.reserved(), 0);
        assert_eq!(tcp.flags(), Flags::SYN);
        assert!(tcp.syn());
        assert!(!(tcp.fin() || tcp.rst() || tcp.psh() || tcp.ack()));
        assert!(!(tcp.urg() || tcp.ece() || tcp.cwr()));
        assert_eq!(tcp.window(), 64240);
        assert_eq!(tcp.checksum(), 0xc4a9);
        assert!(tcp.verify_checksum(&A, &B));
        assert!(!tcp.verify_checksum(&B, &Address::new(192, 168, 10, 3)));
        assert_eq!(tcp.urgent_pointer(), 0);
        assert_eq!(tcp.options(), &SYN_FRAME[54..]);
        assert_eq!(tcp.payload(), &[]);
        assert_eq!(tcp.segment_len(), 1);
        let options: Vec<_> = tcp.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            options,
            [
                TcpOption::MaxSegmentSize(1460),
                TcpOption::SackPermitted,
                TcpOption::Timestamp(Timestamp {
                    tsval: 0x0b21_136f,
                    tsecr: 0
                }),
                TcpOption::NoOperation,
                TcpOption::WindowScale(10),
            ]
        );

        let repr = Repr::parse(&tcp, &A, &B).unwrap();
        assert_eq!(repr, syn_repr());
        assert_eq!(repr.segment_len(), 1);
        assert_eq!(
            repr.to_string(),
            "TCP src=56348 dst=4791 [SYN] seq=4167822654 win=64240 len=0 mss=1460 sackOK \
             ts=186717039,0 wscale=10"
        );
    }

    #[test]
    fn build_real_syn_byte_for_byte() {
        let tcp_repr = syn_repr();
        let ip_repr = Ipv4Repr {
            src_addr: A,
            dst_addr: B,
            protocol: Protocol::TCP,
            payload_len: tcp_repr.buffer_len(),
            ttl: 64,
            dscp: 0,
            ecn: 0,
            identification: 0x523e,
            dont_frag: true,
            more_frags: false,
            fragment_offset: 0,
            options_len: 0,
        };
        let eth_repr = EthernetRepr {
            src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
            dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
            ethertype: EtherType::IPV4,
        };
        assert_eq!(tcp_repr.header_len(), 40);
        let mut buf = [0xa5u8; 74];
        let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
        eth_repr.emit(&mut eth).unwrap();
        let mut ip = Ipv4Packet::new_unchecked(eth.payload_mut());
        ip_repr.emit(&mut ip).unwrap();
        let mut tcp = Packet::new_unchecked(ip.payload_mut());
        tcp_repr.emit(&mut tcp, &A, &B).unwrap();
        assert_eq!(buf, SYN_FRAME);
    }

    #[test]
    fn data_segment_literal() {
        let tcp = Packet::new_checked(&DATA_SEGMENT[..]).unwrap();
        assert_eq!(tcp.header_len(), 32);
        assert!(tcp.psh() && tcp.ack());
        assert_eq!(tcp.checksum(), 0x713d);
        assert_eq!(tcp.payload(), b"hello");
        assert_eq!(tcp.segment_len(), 5);
        assert_eq!(Repr::parse(&tcp, &B, &A), Ok(data_repr()));

        let mut buf = [0u8; 37];
        data_repr()
            .emit(&mut Packet::new_unchecked(&mut buf[..]), &B, &A)
            .unwrap();
        assert_eq!(buf, DATA_SEGMENT);
    }

    #[test]
    fn header_alone_carries_the_checksum_of_the_payload_where_it_lies() {
        // Gathered transmit: the header is written on its own, the payload
        // ("hello", odd length) stays in the caller's buffer; together they
        // are the literal segment, checksum included.
        let mut header = [0u8; 32];
        data_repr().emit_header(&mut header, &B, &A).unwrap();
        assert_eq!(header, DATA_SEGMENT[..32]);
        assert_eq!(&DATA_SEGMENT[32..], b"hello");
        // A buffer shorter than the header: an error, nothing written.
        let mut short = [0u8; 31];
        assert_eq!(
            data_repr().emit_header(&mut short, &B, &A),
            Err(Error::Truncated {
                layer: Layer::Tcp,
                needed: 32,
                got: 31
            })
        );
        assert_eq!(short, [0u8; 31]);
    }

    #[test]
    fn header_over_a_payload_written_in_place_matches_the_literal() {
        // The data already lies after the header in one buffer (as in a
        // device's transmit buffer); the Repr carries no payload of its own.
        let mut seg = [0u8; 37];
        seg[32..].copy_from_slice(b"hello");
        let mut repr = data_repr();
        repr.payload = &[];
        let (header, payload) = seg.split_at_mut(32);
        repr.emit_header_over(header, payload, &B, &A).unwrap();
        assert_eq!(seg, DATA_SEGMENT);
        // Other data, another checksum: it is computed over what lies there.
        let mut other = [0u8; 37];
        other[32..].copy_from_slice(b"hellp");
        let (header, payload) = other.split_at_mut(32);
        repr.emit_header_over(header, payload, &B, &A).unwrap();
        assert_ne!(other[16..18], DATA_SEGMENT[16..18]);
        assert_eq!(other[..16], DATA_SEGMENT[..16]);
    }

    #[test]
    fn sack_segment_literal() {
        let tcp = Packet::new_checked(&SACK_SEGMENT[..]).unwrap();
        assert_eq!(tcp.header_len(), 52);
        assert_eq!(tcp.checksum(), 0x3592);
        let repr = Repr::parse(&tcp, &A, &B).unwrap();
        assert_eq!(repr, sack_repr());
        assert_eq!(repr.sack_blocks_emitted(), 2);
        assert!(repr
            .to_string()
            .ends_with(" sack=305422335-305426431 sack=305430527-305434623"));

        let mut buf = [0u8; 52];
        sack_repr()
            .emit(&mut Packet::new_unchecked(&mut buf[..]), &A, &B)
            .unwrap();
        assert_eq!(buf, SACK_SEGMENT);
    }

    #[test]
    fn setters() {
        let mut buf = [0u8; 24];
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.set_src_port(1);
        p.set_dst_port(2);
        p.set_seq_number(3);
        p.set_ack_number(4);
        p.set_data_offset(6);
        p.set_reserved(0x0f);
        p.set_fin(true);
        p.set_syn(true);
        p.set_rst(true);
        p.set_psh(true);
        p.set_ack(true);
        p.set_urg(true);
        p.set_ece(true);
        p.set_cwr(true);
        p.set_syn(false);
        p.set_window(0x1234);
        p.set_urgent_pointer(0x5678);
        p.options_mut().copy_from_slice(&[1, 1, 1, 0]);
        p.fill_checksum(&A, &B);
        assert!(p.verify_checksum(&A, &B));
        assert_eq!(p.flags(), !Flags::SYN);
        assert_eq!(
            format!("{:?}", p.flags()),
            "Flags(FIN|RST|PSH|ACK|URG|ECE|CWR)"
        );
        assert_eq!(p.reserved(), 0x0f);
        let sum = !checksum::combine(&[
            checksum::pseudo_header(&A, &B, Protocol::TCP, 24),
            checksum::data(&{
                let mut z = [0u8; 24];
                z.copy_from_slice(p.as_ref());
                z[16] = 0;
                z[17] = 0;
                z
            }),
        ]);
        assert_eq!(
            &buf[..],
            &[
                0,
                1,
                0,
                2,
                0,
                0,
                0,
                3,
                0,
                0,
                0,
                4,
                0x6f,
                0xfd,
                0x12,
                0x34,
                (sum >> 8) as u8,
                sum as u8,
                0x56,
                0x78,
                1,
                1,
                1,
                0
            ][..]
        );
        // Reserved bits are ignored on receive (RFC 9293 §3.1).
        let repr = Repr::parse(&Packet::new_checked(&buf[..]).unwrap(), &A, &B).unwrap();
        assert_eq!(repr.flags, !Flags::SYN);
        assert_eq!(repr.urgent_pointer, 0x5678);
        assert_eq!(repr.segment_len(), 1);
    }

    #[test]
    fn flags_display() {
        assert_eq!(Flags::empty().to_string(), "none");
        assert_eq!((Flags::SYN | Flags::ACK).to_string(), "SYN|ACK");
        let mut f = Flags::FIN;
        f |= Flags::ACK;
        assert!(f.contains(Flags::ACK) && !f.contains(Flags::SYN | Flags::ACK));
        assert!(f.intersects(Flags::SYN | Flags::ACK));
        assert_eq!((f & Flags::ACK).bits(), 0x10);
    }

    #[test]
    fn unknown_options_are_skipped() {
        // MPTCP (kind 30, length 4), an experimental option (kind 254,
        // length 6), MSS, EOL and padding after it.
        let options = [
            30, 4, 0x00, 0x81, 254, 6, 0xf9, 0x89, 0xaa, 0xbb, 2, 4, 0x05, 0xb4, 0, 1, 2, 3, 4, 5,
        ];
        let mut buf = [0u8; 40];
        buf[12] = 10 << 4;
        buf[13] = Flags::SYN.bits();
        buf[20..].copy_from_slice(&options);
        let mut p = Packet::new_unchecked(&mut buf[..]);
        p.fill_checksum(&A, &B);
        let p = Packet::new_checked(&buf[..]).unwrap();
        let all: Vec<_> = p.options_iter().collect::<Result<_, _>>().unwrap();
        assert_eq!(
            all,
            [
                TcpOption::Unknown {
                    kind: 30,
                    data: &[0x00, 0x81]
                },
                TcpOption::Unknown {
                    kind: 254,
                    data: &[0xf9, 0x89, 0xaa, 0xbb]
                },
                TcpOption::MaxSegmentSize(1460),
                TcpOption::EndOfList,
            ]
        );
        let repr = Repr::parse(&p, &A, &B).unwrap();
        assert_eq!(repr.max_seg_size, Some(1460));
        assert_eq!(repr.window_scale, None);
    }

    #[test]
    fn bad_options() {
        let cases: [(&[u8], Error); 8] = [
            // Length zero (RFC 9293 §3.2 MUST-7).
            (
                &[30, 0, 0, 0],
                Error::BadOption {
                    kind: 30,
                    offset: 20,
                    len: 0,
                    room: 4,
                },
            ),
            // Length one.
            (
                &[1, 30, 1, 0],
                Error::BadOption {
                    kind: 30,
                    offset: 21,
                    len: 1,
                    room: 3,
                },
            ),
            // Length past the header.
            (
                &[1, 1, 30, 3],
                Error::BadOption {
                    kind: 30,
                    offset: 22,
                    len: 3,
                    room: 2,
                },
            ),
            // No room for the length octet.
            (
                &[1, 1, 1, 8],
                Error::BadOption {
                    kind: 8,
                    offset: 23,
                    len: 0,
                    room: 1,
                },
            ),
            // MSS must be length 4.
            (
                &[2, 3, 0, 1],
                Error::BadOption {
                    kind: 2,
                    offset: 20,
                    len: 3,
                    room: 4,
                },
            ),
            // Window Scale must be length 3.
            (
                &[3, 4, 7, 1],
                Error::BadOption {
                    kind: 3,
                    offset: 20,
                    len: 4,
                    room: 4,
                },
            ),
            // SACK-Permitted must be length 2.
            (
                &[4, 3, 0, 1],
                Error::BadOption {
                    kind: 4,
                    offset: 20,
                    len: 3,
                    room: 4,
                },
            ),
            // SACK needs whole blocks.
            (
                &[5, 4, 0, 0],
                Error::BadOption {
                    kind: 5,
                    offset: 20,
                    len: 4,
                    room: 4,
                },
            ),
        ];
        for (options, want) in cases {
            let mut buf = [0u8; 24];
            buf[12] = 6 << 4;
            buf[20..].copy_from_slice(options);
            Packet::new_unchecked(&mut buf[..]).fill_checksum(&A, &B);
            let p = Packet::new_checked(&buf[..]).unwrap();
            assert_eq!(Repr::parse(&p, &A, &B), Err(want), "{options:?}");
            assert_eq!(p.options_iter().last(), Some(Err(want)));
        }
        // Timestamps must be length 10.
        let mut buf = [0u8; 32];
        buf[12] = 8 << 4;
        buf[20..32].copy_from_slice(&[8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        Packet::new_unchecked(&mut buf[..]).fill_checksum(&A, &B);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&buf[..]).unwrap(), &A, &B),
            Err(Error::BadOption {
                kind: 8,
                offset: 20,
                len: 12,
                room: 12
            })
        );
        // TcpOption::parse on its own counts from the buffer start.
        assert_eq!(
            TcpOption::parse(&[2, 9]),
            Err(Error::BadOption {
                kind: 2,
                offset: 0,
                len: 9,
                room: 2
            })
        );
        assert!(TcpOption::parse(&[]).is_err());
    }

    #[test]
    fn bad_checksum_and_lengths() {
        let mut buf = DATA_SEGMENT;
        buf[36] ^= 0x01; // corrupt the payload
        let p = Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(
            Repr::parse(&p, &B, &A),
            Err(Error::BadChecksum {
                layer: Layer::Tcp,
                found: 0x713d,
                computed: 0x723d, // last octet of an odd payload is a high byte
            })
        );
        let mut buf = DATA_SEGMENT;
        buf[12] = 0x40;
        assert_eq!(
            Packet::new_checked(&buf[..]),
            Err(Error::BadLength {
                layer: Layer::Tcp,
                field: "Data Offset",
                value: 16,
                min: 20
            })
        );
    }

    #[test]
    fn every_truncation_of_a_segment_is_an_error() {
        for len in 0..SYN_FRAME.len() - 34 {
            let seg = &SYN_FRAME[34..34 + len];
            let want = Error::Truncated {
                layer: Layer::Tcp,
                needed: if len < 20 { 20 } else { 40 },
                got: len,
            };
            assert_eq!(Packet::new_checked(seg), Err(want));
            assert_eq!(Repr::parse(&Packet::new_unchecked(seg), &A, &B), Err(want));
        }
        // Past the header, TCP has no length of its own: the pseudo-header
        // length and the checksum catch a short payload.
        for len in 20..DATA_SEGMENT.len() {
            let p = Packet::new_checked(&DATA_SEGMENT[..len]);
            let r = p.and_then(|p| Repr::parse(&p, &B, &A));
            assert!(r.is_err(), "len {len}");
        }
    }

    #[test]
    fn every_truncation_of_a_frame_is_an_error() {
        fn parse(frame: &[u8]) -> Result<Repr<'_>, Error> {
            let eth = EthernetFrame::new_checked(frame)?;
            let ip = Ipv4Packet::new_checked(eth.payload())?;
            let ip_repr = Ipv4Repr::parse(&ip)?;
            let tcp = Packet::new_checked(ip.payload())?;
            Repr::parse(&tcp, &ip_repr.src_addr, &ip_repr.dst_addr)
        }
        assert_eq!(parse(&SYN_FRAME), Ok(syn_repr()));
        for len in 0..SYN_FRAME.len() {
            let want = match len {
                0..14 => Error::Truncated {
                    layer: Layer::Ethernet,
                    needed: 14,
                    got: len,
                },
                14..34 => Error::Truncated {
                    layer: Layer::Ipv4,
                    needed: 20,
                    got: len - 14,
                },
                _ => Error::Truncated {
                    layer: Layer::Ipv4,
                    needed: 60,
                    got: len - 14,
                },
            };
            assert_eq!(parse(&SYN_FRAME[..len]), Err(want), "len {len}");
        }
    }

    #[test]
    fn emit_errors() {
        let mut buf = [0u8; 40];
        for len in 0..40 {
            assert_eq!(
                syn_repr().emit(&mut Packet::new_unchecked(&mut buf[..len]), &A, &B),
                Err(Error::Truncated {
                    layer: Layer::Tcp,
                    needed: 40,
                    got: len
                })
            );
        }
        let bad_shift = Repr {
            window_scale: Some(15),
            ..syn_repr()
        };
        assert_eq!(
            bad_shift.emit(&mut Packet::new_unchecked(&mut buf[..]), &A, &B),
            Err(Error::TooLarge {
                layer: Layer::Tcp,
                field: "Window Scale shift.cnt",
                value: 15,
                max: 14
            })
        );
        assert_eq!(buf, [0u8; 40], "a failed emit writes nothing");
        let big = vec![0u8; 65536];
        let huge = Repr {
            payload: &big,
            ..Repr::new(1, 2, 3, Flags::ACK)
        };
        let mut out = vec![0u8; huge.buffer_len()];
        assert!(matches!(
            huge.emit(&mut Packet::new_unchecked(&mut out[..]), &A, &B),
            Err(Error::TooLarge {
                field: "TCP length",
                ..
            })
        ));
    }

    #[test]
    fn sack_blocks_are_cut_to_fit() {
        let four = [Some((1, 2)), Some((3, 4)), Some((5, 6)), Some((7, 8))];
        // Alone, four blocks fit: 4 + 32 = 36 octets.
        let r = Repr {
            sack_ranges: four,
            ..Repr::new(1, 2, 3, Flags::ACK)
        };
        assert_eq!((r.sack_blocks_emitted(), r.options_len()), (4, 36));
        // With Timestamps, three (RFC 2018 §3).
        let r = Repr {
            timestamp: Some(Timestamp::default()),
            ..r
        };
        assert_eq!((r.sack_blocks_emitted(), r.options_len()), (3, 40));
        // Everything at once: 20 octets of other options leave room for two.
        let r = Repr {
            max_seg_size: Some(1),
            window_scale: Some(0),
            sack_permitted: true,
            ..r
        };
        assert_eq!((r.sack_blocks_emitted(), r.options_len()), (2, 40));
        let mut buf = [0u8; 60];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), &A, &B)
            .unwrap();
        let back = Repr::parse(&Packet::new_checked(&buf[..]).unwrap(), &A, &B).unwrap();
        assert_eq!(back.sack_ranges, [Some((1, 2)), Some((3, 4)), None, None]);
        assert_eq!(
            Repr {
                sack_ranges: back.sack_ranges,
                ..r
            },
            back
        );
    }

    #[test]
    fn option_layouts() {
        // SACK-Permitted without Timestamps: NOP NOP SACK-Permitted.
        let r = Repr {
            sack_permitted: true,
            ..Repr::new(1, 2, 3, Flags::SYN)
        };
        let mut buf = [0u8; 24];
        r.emit(&mut Packet::new_unchecked(&mut buf[..]), &A, &B)
            .unwrap();
        assert_eq!(buf[20..], [1, 1, 4, 2]);
        assert_eq!(
            Repr::parse(&Packet::new_checked(&buf[..]).unwrap(), &A, &B),
            Ok(r)
        );
        // Unknown options round-trip through TcpOption::emit.
        let opt = TcpOption::Unknown {
            kind: 253,
            data: &[1, 2, 3],
        };
        let mut b = [0u8; 6];
        let rest = opt.emit(&mut b).unwrap();
        assert_eq!(rest.len(), 1);
        assert_eq!(b, [253, 5, 1, 2, 3, 0]);
        assert_eq!(TcpOption::parse(&b[..5]), Ok((&[][..], opt)));
        assert!(opt.emit(&mut b[..4]).is_err());
    }

    #[test]
    fn unchecked_views_cut_options_and_payload_short() {
        // Data Offset says 40 octets, the buffer has 30: no panic.
        let p = Packet::new_unchecked(&SYN_FRAME[34..64]);
        assert_eq!(p.options(), &SYN_FRAME[54..64]);
        assert_eq!(p.payload(), &[]);
        assert_eq!(p.segment_len(), 1);
        let ip = Ipv4Packet::new_unchecked(&SYN_FRAME[14..40]);
        assert_eq!(ip.payload(), &SYN_FRAME[34..40]);
        let mut buf = [0u8; 20];
        buf[12] = 0xf0;
        assert!(Packet::new_unchecked(&mut buf[..]).payload_mut().is_empty());
    }

    mod prop {
        use super::*;
        use proptest::prelude::*;

        /// A `Repr` with an owned payload, for strategies.
        #[derive(Debug, Clone)]
        struct Owned {
            repr: Repr<'static>,
            payload: Vec<u8>,
        }

        impl Owned {
            fn repr(&self) -> Repr<'_> {
                Repr {
                    payload: &self.payload,
                    ..self.repr
                }
            }
        }

        fn arb_repr() -> impl Strategy<Value = Owned> {
            (
                (any::<u16>(), any::<u16>(), any::<u32>(), any::<u32>()),
                (any::<u8>(), any::<u16>(), any::<u16>()),
                (
                    proptest::option::of(any::<u16>()),
                    proptest::option::of(0..=MAX_WINDOW_SHIFT),
                    any::<bool>(),
                    proptest::option::of(any::<(u32, u32)>()),
                ),
                proptest::collection::vec(any::<(u32, u32)>(), 0..=4),
                proptest::collection::vec(any::<u8>(), 0..64),
            )
                .prop_map(
                    |(
                        (sp, dp, seq, ack),
                        (flags, win, urg),
                        (mss, ws, sack_ok, ts),
                        sack,
                        payload,
                    )| {
                        let mut sack_ranges = [None; MAX_SACK_BLOCKS];
                        for (slot, r) in sack_ranges.iter_mut().zip(sack) {
                            *slot = Some(r);
                        }
                        let repr = Repr {
                            src_port: sp,
                            dst_port: dp,
                            seq_number: seq,
                            ack_number: ack,
                            flags: Flags(flags),
                            window: win,
                            urgent_pointer: urg,
                            max_seg_size: mss,
                            window_scale: ws,
                            sack_permitted: sack_ok,
                            sack_ranges,
                            timestamp: ts.map(|(tsval, tsecr)| Timestamp { tsval, tsecr }),
                            payload: &[],
                        };
                        Owned { repr, payload }
                    },
                )
        }

        fn build(repr: &Repr<'_>, src: Address, dst: Address) -> Vec<u8> {
            let ip = Ipv4Repr {
                src_addr: src,
                dst_addr: dst,
                protocol: Protocol::TCP,
                payload_len: repr.buffer_len(),
                ttl: 64,
                dscp: 0,
                ecn: 0,
                identification: 7,
                dont_frag: true,
                more_frags: false,
                fragment_offset: 0,
                options_len: 0,
            };
            let mut buf = vec![0u8; 14 + 20 + repr.buffer_len()];
            let mut eth = EthernetFrame::new_unchecked(&mut buf[..]);
            EthernetRepr {
                src_addr: EthernetAddress([2, 0, 0, 0, 0, 1]),
                dst_addr: EthernetAddress([2, 0, 0, 0, 0, 2]),
                ethertype: EtherType::IPV4,
            }
            .emit(&mut eth)
            .unwrap();
            let mut ipp = Ipv4Packet::new_unchecked(eth.payload_mut());
            ip.emit(&mut ipp).unwrap();
            repr.emit(&mut Packet::new_unchecked(ipp.payload_mut()), &src, &dst)
                .unwrap();
            buf
        }

        fn parse(frame: &[u8]) -> Result<Repr<'_>, Error> {
            let eth = EthernetFrame::new_checked(frame)?;
            let ip = Ipv4Packet::new_checked(eth.payload())?;
            let ip_repr = Ipv4Repr::parse(&ip)?;
            let tcp = Packet::new_checked(ip.payload())?;
            Repr::parse(&tcp, &ip_repr.src_addr, &ip_repr.dst_addr)
        }

        proptest! {
            #[test]
            fn round_trip(
                owned in arb_repr(),
                src in any::<[u8; 4]>(),
                dst in any::<[u8; 4]>(),
            ) {
                let repr = owned.repr();
                let frame = build(&repr, Address(src), Address(dst));
                let back = parse(&frame).unwrap();
                let mut want = repr;
                for slot in want.sack_ranges.iter_mut().skip(repr.sack_blocks_emitted()) {
                    *slot = None;
                }
                prop_assert_eq!(back, want);
                // Every truncation: the exact error, never a panic.
                for len in 0..frame.len() {
                    let want = match len {
                        0..14 => Error::Truncated { layer: Layer::Ethernet, needed: 14, got: len },
                        14..34 => Error::Truncated { layer: Layer::Ipv4, needed: 20, got: len - 14 },
                        _ => Error::Truncated { layer: Layer::Ipv4, needed: frame.len() - 14, got: len - 14 },
                    };
                    prop_assert_eq!(parse(&frame[..len]), Err(want));
                }
            }

            #[test]
            fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
                let _ = parse(&bytes);
                let p = Packet::new_unchecked(&bytes[..]);
                let _ = Repr::parse(&p, &A, &B);
                for option in OptionsIter::new(&bytes) {
                    let _ = option;
                }
            }

            #[test]
            fn arbitrary_options_never_panic(options in proptest::collection::vec(any::<u8>(), 0..=40usize)) {
                let mut buf = vec![0u8; 20 + options.len().div_ceil(4) * 4];
                buf[12] = ((buf.len() / 4) as u8) << 4;
                buf[20..20 + options.len()].copy_from_slice(&options);
                Packet::new_unchecked(&mut buf[..]).fill_checksum(&A, &B);
                let p = Packet::new_checked(&buf[..]).unwrap();
                let _ = Repr::parse(&p, &A, &B);
            }
        }
    }
}
