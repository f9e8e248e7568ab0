//! SCTP wire formats (RFC 9260 §3): the common header, its CRC32c checksum
//! (§6.8, Appendix A) and the chunks this stack speaks.
//!
//! * [`SctpPacket`] is a zero-copy view of one SCTP packet (the IP payload).
//!   [`SctpPacket::new_checked`] validates that the common header is present;
//!   [`SctpPacket::chunks`] walks the chunks, each checked against the bytes
//!   that are there, and stops at the first malformed one.
//! * [`Chunk`] is one raw chunk (type, flags, value); [`ChunkRepr::parse`]
//!   turns it into a typed representation borrowing from the packet, and
//!   [`ChunkRepr::emit`] writes one back.
//! * [`emit_packet`] writes a whole packet and fills in the checksum.
//!
//! Unknown chunk types come back as [`ChunkRepr::Unknown`]; what to do with
//! them is decided by the upper two bits of the type (RFC 9260 §3.2), see
//! [`UnknownAction`]. Unknown INIT/INIT-ACK parameters likewise
//! (§3.2.1, [`UnknownAction`] again).
//!
//! Nothing here panics on any input: every read is bounds-checked and every
//! length computation is checked arithmetic.

use core::fmt;

/// Length of the SCTP common header (RFC 9260 §3.1).
pub const COMMON_HEADER_LEN: usize = 12;
/// Length of a chunk header (type, flags, length; RFC 9260 §3.2).
pub const CHUNK_HEADER_LEN: usize = 4;
/// Length of a DATA chunk header up to the user data (RFC 9260 §3.3.1).
pub const DATA_HEADER_LEN: usize = 16;

/// Chunk type codes (RFC 9260 §3.2; I-DATA etc. are not supported).
pub mod chunk_type {
    /// Payload Data.
    pub const DATA: u8 = 0;
    /// Initiation.
    pub const INIT: u8 = 1;
    /// Initiation Acknowledgement.
    pub const INIT_ACK: u8 = 2;
    /// Selective Acknowledgement.
    pub const SACK: u8 = 3;
    /// Heartbeat Request.
    pub const HEARTBEAT: u8 = 4;
    /// Heartbeat Acknowledgement.
    pub const HEARTBEAT_ACK: u8 = 5;
    /// Abort.
    pub const ABORT: u8 = 6;
    /// Shutdown.
    pub const SHUTDOWN: u8 = 7;
    /// Shutdown Acknowledgement.
    pub const SHUTDOWN_ACK: u8 = 8;
    /// Operation Error.
    pub const ERROR: u8 = 9;
    /// State Cookie.
    pub const COOKIE_ECHO: u8 = 10;
    /// Cookie Acknowledgement.
    pub const COOKIE_ACK: u8 = 11;
    /// Shutdown Complete.
    pub const SHUTDOWN_COMPLETE: u8 = 14;
}

/// INIT / INIT-ACK parameter types (RFC 9260 §3.3.2, §3.3.3; RFC 5061 §4.2.7).
pub mod param_type {
    /// Heartbeat Info (inside HEARTBEAT / HEARTBEAT-ACK, RFC 9260 §3.3.5).
    pub const HEARTBEAT_INFO: u16 = 1;
    /// IPv4 Address.
    pub const IPV4_ADDRESS: u16 = 5;
    /// IPv6 Address.
    pub const IPV6_ADDRESS: u16 = 6;
    /// State Cookie (INIT-ACK only).
    pub const STATE_COOKIE: u16 = 7;
    /// Unrecognized Parameter (INIT-ACK only).
    pub const UNRECOGNIZED_PARAMETER: u16 = 8;
    /// Cookie Preservative.
    pub const COOKIE_PRESERVATIVE: u16 = 9;
    /// Host Name Address (deprecated by RFC 9260).
    pub const HOST_NAME_ADDRESS: u16 = 11;
    /// Supported Address Types.
    pub const SUPPORTED_ADDRESS_TYPES: u16 = 12;
    /// Adaptation Layer Indication (RFC 5061 §4.2.7).
    pub const ADAPTATION_LAYER_INDICATION: u16 = 0xC006;
}

/// Error cause codes (RFC 9260 §3.3.10).
pub mod cause_code {
    /// Invalid Stream Identifier.
    pub const INVALID_STREAM_IDENTIFIER: u16 = 1;
    /// Missing Mandatory Parameter.
    pub const MISSING_MANDATORY_PARAMETER: u16 = 2;
    /// Stale Cookie Error.
    pub const STALE_COOKIE: u16 = 3;
    /// Out of Resource.
    pub const OUT_OF_RESOURCE: u16 = 4;
    /// Unrecognized Chunk Type.
    pub const UNRECOGNIZED_CHUNK_TYPE: u16 = 6;
    /// Invalid Mandatory Parameter.
    pub const INVALID_MANDATORY_PARAMETER: u16 = 7;
    /// Unrecognized Parameters.
    pub const UNRECOGNIZED_PARAMETERS: u16 = 8;
    /// No User Data.
    pub const NO_USER_DATA: u16 = 9;
    /// User-Initiated Abort.
    pub const USER_INITIATED_ABORT: u16 = 12;
    /// Protocol Violation.
    pub const PROTOCOL_VIOLATION: u16 = 13;
}

/// Which structure an [`Error`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    /// The SCTP common header (RFC 9260 §3.1).
    CommonHeader,
    /// A chunk header or chunk value (RFC 9260 §3.2, §3.3), by chunk type.
    Chunk(u8),
    /// A TLV parameter inside a chunk (RFC 9260 §3.2.1), by parameter type.
    Parameter(u16),
}

/// Why bytes could not be parsed, or a `Repr` could not be emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// The buffer is shorter than a header, or than a length a header
    /// declares, or than what `emit` needs.
    Truncated {
        /// Structure concerned.
        layer: Layer,
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
    /// A length field holds a value the format does not allow.
    BadLength {
        /// Structure concerned.
        layer: Layer,
        /// The field, by its RFC name.
        field: &'static str,
        /// The value found.
        value: usize,
        /// Smallest acceptable value.
        min: usize,
    },
    /// The CRC32c does not verify (RFC 9260 §6.8).
    BadChecksum {
        /// Checksum field as received.
        found: u32,
        /// Checksum the contents call for.
        computed: u32,
    },
    /// A field holds a value the RFC forbids.
    BadValue {
        /// Structure concerned.
        layer: Layer,
        /// The field, by its RFC name.
        field: &'static str,
        /// The value found (widened).
        value: u32,
    },
    /// A value is too large to be encoded (emit only).
    TooLong {
        /// Structure concerned.
        layer: Layer,
        /// Octets asked for.
        len: usize,
        /// Largest encodable.
        max: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { layer, needed, got } => {
                write!(
                    f,
                    "sctp {layer:?}: truncated, needs {needed} octets, has {got}"
                )
            }
            Error::BadLength {
                layer,
                field,
                value,
                min,
            } => {
                write!(f, "sctp {layer:?}: {field} = {value} below minimum {min}")
            }
            Error::BadChecksum { found, computed } => {
                write!(
                    f,
                    "sctp common header: checksum {found:#010x}, computed {computed:#010x}"
                )
            }
            Error::BadValue {
                layer,
                field,
                value,
            } => {
                write!(f, "sctp {layer:?}: {field} = {value} not allowed")
            }
            Error::TooLong { layer, len, max } => {
                write!(f, "sctp {layer:?}: {len} octets exceed maximum {max}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// Result of parsing or emitting.
pub type Result<T> = core::result::Result<T, Error>;

fn be16(b: &[u8], at: usize, layer: Layer) -> Result<u16> {
    let end = at.checked_add(2).ok_or(Error::Truncated {
        layer,
        needed: usize::MAX,
        got: b.len(),
    })?;
    match b.get(at..end) {
        Some(s) => Ok(u16::from_be_bytes([s[0], s[1]])),
        None => Err(Error::Truncated {
            layer,
            needed: end,
            got: b.len(),
        }),
    }
}

fn be32(b: &[u8], at: usize, layer: Layer) -> Result<u32> {
    let end = at.checked_add(4).ok_or(Error::Truncated {
        layer,
        needed: usize::MAX,
        got: b.len(),
    })?;
    match b.get(at..end) {
        Some(s) => Ok(u32::from_be_bytes([s[0], s[1], s[2], s[3]])),
        None => Err(Error::Truncated {
            layer,
            needed: end,
            got: b.len(),
        }),
    }
}

/// Rounds `n` up to a multiple of four (chunk and parameter padding,
/// RFC 9260 §3.2, §3.2.1), `None` on overflow.
pub fn pad4(n: usize) -> Option<usize> {
    n.checked_add(3).map(|v| v & !3)
}

/// What the upper two bits of an unknown chunk or parameter type ask for
/// (RFC 9260 §3.2 for chunks, §3.2.1 for parameters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UnknownAction {
    /// `00`: stop processing (chunk: discard the packet; parameter: ignore
    /// this and all later parameters of the chunk), report nothing.
    Stop,
    /// `01`: as `Stop`, and report it (chunk: ERROR with "Unrecognized Chunk
    /// Type"; parameter: "Unrecognized Parameter").
    StopAndReport,
    /// `10`: skip it and go on with the rest.
    Skip,
    /// `11`: skip it, go on, and report it.
    SkipAndReport,
}

impl UnknownAction {
    /// Action for an unknown chunk type (RFC 9260 §3.2).
    pub fn for_chunk(ty: u8) -> Self {
        Self::from_bits(ty >> 6)
    }
    /// Action for an unknown parameter type (RFC 9260 §3.2.1).
    pub fn for_param(ty: u16) -> Self {
        Self::from_bits((ty >> 14) as u8)
    }
    fn from_bits(b: u8) -> Self {
        match b & 3 {
            0 => UnknownAction::Stop,
            1 => UnknownAction::StopAndReport,
            2 => UnknownAction::Skip,
            _ => UnknownAction::SkipAndReport,
        }
    }
    /// Whether processing continues after the unknown item.
    pub fn continues(self) -> bool {
        matches!(self, UnknownAction::Skip | UnknownAction::SkipAndReport)
    }
    /// Whether the unknown item is to be reported to the peer.
    pub fn reports(self) -> bool {
        matches!(
            self,
            UnknownAction::StopAndReport | UnknownAction::SkipAndReport
        )
    }
}

/// The CRC32c of an SCTP packet, computed with the checksum field taken as
/// zero (RFC 9260 §6.8, Appendix A). The result is the value to be stored
/// with [`SctpPacket::set_checksum`]: on the wire its least significant
/// octet comes first (Appendix A: the CRC is transmitted reflected, which
/// for the usual CRC32c value means little-endian octet order).
pub fn checksum(packet: &[u8]) -> u32 {
    let (Some(head), Some(rest)) = (packet.get(..8), packet.get(COMMON_HEADER_LEN..)) else {
        return iwarp_crc::crc32c(packet);
    };
    // The header (ports and tag, then the checksum field as four zero
    // octets) a table octet at a time, then the chunks in one call of the
    // library: a call has a fixed cost (some 160 instructions) that
    // dominates a small packet's, and twelve octets cost less by table.
    let mut crc = !0u32;
    for &b in head {
        crc = CRC32C_TABLE[usize::from(crc as u8 ^ b)] ^ (crc >> 8);
    }
    for _ in 0..4 {
        crc = CRC32C_TABLE[usize::from(crc as u8)] ^ (crc >> 8);
    }
    iwarp_crc::append(!crc, rest)
}

/// CRC32c (Castagnoli, reflected polynomial 0x82F63B78: RFC 9260
/// Appendix A) of each octet value, for [`checksum`]'s header.
const CRC32C_TABLE: [u32; 256] = {
    let mut t = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u32;
        let mut k = 0;
        while k < 8 {
            c = if c & 1 != 0 {
                (c >> 1) ^ 0x82f6_3b78
            } else {
                c >> 1
            };
            k += 1;
        }
        t[i] = c;
        i += 1;
    }
    t
};

/// A read/write view of one SCTP packet (RFC 9260 §3.1).
#[derive(Debug, Clone)]
pub struct SctpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> SctpPacket<T> {
    /// Wraps a buffer without checks; getters panic on a buffer shorter
    /// than [`COMMON_HEADER_LEN`].
    pub fn new_unchecked(buffer: T) -> Self {
        SctpPacket { buffer }
    }

    /// Wraps a buffer that holds at least the common header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let len = buffer.as_ref().len();
        if len < COMMON_HEADER_LEN {
            return Err(Error::Truncated {
                layer: Layer::CommonHeader,
                needed: COMMON_HEADER_LEN,
                got: len,
            });
        }
        Ok(SctpPacket { buffer })
    }

    /// Gives the buffer back.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Source Port Number.
    pub fn src_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[0], self.b()[1]])
    }
    /// Destination Port Number.
    pub fn dst_port(&self) -> u16 {
        u16::from_be_bytes([self.b()[2], self.b()[3]])
    }
    /// Verification Tag.
    pub fn verification_tag(&self) -> u32 {
        let b = self.b();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
    /// Checksum field, as the value [`checksum`] computes (little-endian
    /// octets on the wire, RFC 9260 Appendix A).
    pub fn checksum(&self) -> u32 {
        let b = self.b();
        u32::from_le_bytes([b[8], b[9], b[10], b[11]])
    }
    /// Checks the CRC32c (RFC 9260 §6.8: a packet with a bad checksum MUST
    /// be silently discarded; the caller does that on `Err`).
    pub fn verify_checksum(&self) -> Result<()> {
        let computed = checksum(self.b());
        let found = self.checksum();
        if computed == found {
            Ok(())
        } else {
            Err(Error::BadChecksum { found, computed })
        }
    }
    /// The chunk area (everything after the common header).
    pub fn chunk_bytes(&self) -> &[u8] {
        self.b().get(COMMON_HEADER_LEN..).unwrap_or(&[])
    }
    /// Iterates over the chunks.
    pub fn chunks(&self) -> Chunks<'_> {
        Chunks {
            rest: self.chunk_bytes(),
            failed: false,
        }
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> SctpPacket<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Sets Source Port Number.
    pub fn set_src_port(&mut self, v: u16) {
        self.bm()[0..2].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets Destination Port Number.
    pub fn set_dst_port(&mut self, v: u16) {
        self.bm()[2..4].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets Verification Tag.
    pub fn set_verification_tag(&mut self, v: u32) {
        self.bm()[4..8].copy_from_slice(&v.to_be_bytes());
    }
    /// Sets the checksum field (little-endian octets, RFC 9260 Appendix A).
    pub fn set_checksum(&mut self, v: u32) {
        self.bm()[8..12].copy_from_slice(&v.to_le_bytes());
    }
    /// Computes and stores the checksum over the whole buffer.
    pub fn fill_checksum(&mut self) {
        // The field zeroed in place, then one pass over the whole packet.
        self.set_checksum(0);
        let c = iwarp_crc::crc32c(self.b());
        self.set_checksum(c);
    }
}

/// One raw chunk: its type, flags and value (the octets after the chunk
/// header, up to Chunk Length, padding excluded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Chunk Type.
    pub ty: u8,
    /// Chunk Flags.
    pub flags: u8,
    /// Chunk Value.
    pub value: &'a [u8],
    /// The whole chunk as it came, header included, padding excluded.
    pub raw: &'a [u8],
}

/// Iterator over the chunks of a packet; yields an error once and stops
/// when a chunk header is truncated or declares an impossible length.
#[derive(Debug, Clone)]
pub struct Chunks<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Iterator for Chunks<'a> {
    type Item = Result<Chunk<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = parse_chunk(self.rest);
        match r {
            Ok((c, used)) => {
                self.rest = self.rest.get(used..).unwrap_or(&[]);
                Some(Ok(c))
            }
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}

/// Parses one chunk at the start of `b`; returns it and the octets it
/// takes, padding included (the final chunk's padding may be missing).
pub fn parse_chunk(b: &[u8]) -> Result<(Chunk<'_>, usize)> {
    let ty = *b.first().ok_or(Error::Truncated {
        layer: Layer::Chunk(0),
        needed: CHUNK_HEADER_LEN,
        got: 0,
    })?;
    let layer = Layer::Chunk(ty);
    if b.len() < CHUNK_HEADER_LEN {
        return Err(Error::Truncated {
            layer,
            needed: CHUNK_HEADER_LEN,
            got: b.len(),
        });
    }
    let len = usize::from(be16(b, 2, layer)?);
    if len < CHUNK_HEADER_LEN {
        return Err(Error::BadLength {
            layer,
            field: "Chunk Length",
            value: len,
            min: CHUNK_HEADER_LEN,
        });
    }
    let raw = b.get(..len).ok_or(Error::Truncated {
        layer,
        needed: len,
        got: b.len(),
    })?;
    let padded = pad4(len).unwrap_or(len).min(b.len());
    Ok((
        Chunk {
            ty,
            flags: b[1],
            value: &raw[CHUNK_HEADER_LEN..],
            raw,
        },
        padded,
    ))
}

/// A TLV parameter (RFC 9260 §3.2.1) or error cause (§3.3.10): both share
/// the layout type(16) length(16) value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Param<'a> {
    /// Parameter Type (or Cause Code).
    pub ty: u16,
    /// Parameter Value.
    pub value: &'a [u8],
    /// The whole parameter, header included, padding excluded.
    pub raw: &'a [u8],
}

/// Iterator over TLV parameters or error causes.
#[derive(Debug, Clone)]
pub struct Params<'a> {
    rest: &'a [u8],
    failed: bool,
}

impl<'a> Params<'a> {
    /// Iterates over the TLVs in `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Params {
            rest: b,
            failed: false,
        }
    }
}

impl<'a> Iterator for Params<'a> {
    type Item = Result<Param<'a>>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let b = self.rest;
        let ty = match be16(b, 0, Layer::Parameter(0)) {
            Ok(t) => t,
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        let layer = Layer::Parameter(ty);
        let len = match be16(b, 2, layer) {
            Ok(l) => usize::from(l),
            Err(e) => {
                self.failed = true;
                return Some(Err(e));
            }
        };
        if len < 4 {
            self.failed = true;
            return Some(Err(Error::BadLength {
                layer,
                field: "Parameter Length",
                value: len,
                min: 4,
            }));
        }
        let Some(raw) = b.get(..len) else {
            self.failed = true;
            return Some(Err(Error::Truncated {
                layer,
                needed: len,
                got: b.len(),
            }));
        };
        let padded = pad4(len).unwrap_or(len).min(b.len());
        self.rest = b.get(padded..).unwrap_or(&[]);
        Some(Ok(Param {
            ty,
            value: &raw[4..],
            raw,
        }))
    }
}

/// Flags of a DATA chunk (RFC 9260 §3.3.1, RFC 7053 for I).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct DataFlags {
    /// I bit: the receiver should SACK without delay (RFC 7053 §3).
    pub immediate: bool,
    /// U bit: unordered.
    pub unordered: bool,
    /// B bit: first fragment of a user message.
    pub begin: bool,
    /// E bit: last fragment of a user message.
    pub end: bool,
}

impl DataFlags {
    fn from_bits(f: u8) -> Self {
        DataFlags {
            immediate: f & 8 != 0,
            unordered: f & 4 != 0,
            begin: f & 2 != 0,
            end: f & 1 != 0,
        }
    }
    fn bits(self) -> u8 {
        (u8::from(self.immediate) << 3)
            | (u8::from(self.unordered) << 2)
            | (u8::from(self.begin) << 1)
            | u8::from(self.end)
    }
}

/// A DATA chunk (RFC 9260 §3.3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataRepr<'a> {
    /// I/U/B/E.
    pub flags: DataFlags,
    /// Transmission Sequence Number.
    pub tsn: u32,
    /// Stream Identifier S.
    pub stream_id: u16,
    /// Stream Sequence Number n.
    pub ssn: u16,
    /// Payload Protocol Identifier (carried in network byte order).
    pub ppid: u32,
    /// User Data.
    pub payload: &'a [u8],
}

impl DataRepr<'_> {
    /// Writes the DATA chunk (RFC 9260 §3.3.1: Chunk Length counts the
    /// header and the user data, not the padding), zero-padded to four
    /// octets (§3.2), at the start of `out`; returns the octets written.
    /// What [`ChunkRepr::emit`] writes for it, without asking each of
    /// the other chunk types' questions (every packet of a stream has
    /// DATA in it).
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let layer = Layer::Chunk(chunk_type::DATA);
        let len = DATA_HEADER_LEN + self.payload.len();
        if len > usize::from(u16::MAX) {
            return Err(Error::TooLong {
                layer,
                len,
                max: usize::from(u16::MAX),
            });
        }
        let padded = (len + 3) & !3;
        if out.len() < padded {
            return Err(Error::Truncated {
                layer,
                needed: padded,
                got: out.len(),
            });
        }
        // The padding first: the chunk's last four octets zeroed (one
        // store), then everything before the padding written over them.
        out[padded - 4..padded].copy_from_slice(&[0; 4]);
        out[0] = chunk_type::DATA;
        out[1] = self.flags.bits();
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        out[4..8].copy_from_slice(&self.tsn.to_be_bytes());
        out[8..10].copy_from_slice(&self.stream_id.to_be_bytes());
        out[10..12].copy_from_slice(&self.ssn.to_be_bytes());
        out[12..16].copy_from_slice(&self.ppid.to_be_bytes());
        out[DATA_HEADER_LEN..len].copy_from_slice(self.payload);
        Ok(padded)
    }
}

/// Parameters of INIT and INIT-ACK this stack understands, plus what the
/// unknown ones asked for (RFC 9260 §3.3.2, §3.3.3, §3.2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct InitParams<'a> {
    /// State Cookie (INIT-ACK only; RFC 9260 §3.3.3 makes it mandatory there).
    pub state_cookie: Option<&'a [u8]>,
    /// Adaptation Layer Indication (RFC 5061 §4.2.7).
    pub adaptation: Option<u32>,
    /// Cookie Preservative: suggested lifespan increment, in ms.
    pub cookie_preservative: Option<u32>,
    /// The first unknown parameter whose type asks for a report; only the
    /// first is kept (bounded), and reported back in the INIT-ACK
    /// "Unrecognized Parameter" (§3.3.3) or an ERROR.
    pub unrecognized: Option<&'a [u8]>,
    /// Count of unknown parameters whose type asks for a report.
    pub unrecognized_count: u16,
    /// Contents of an "Unrecognized Parameter" parameter (type 8, INIT-ACK
    /// only): the peer reports one of ours it did not know. Emitted when set.
    pub unrecognized_reported: Option<&'a [u8]>,
}

/// INIT or INIT-ACK (RFC 9260 §3.3.2, §3.3.3); the fixed part is identical.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InitRepr<'a> {
    /// Initiate Tag: the tag the sender wants in every packet sent to it.
    pub initiate_tag: u32,
    /// Advertised Receiver Window Credit.
    pub a_rwnd: u32,
    /// Number of Outbound Streams.
    pub num_outbound_streams: u16,
    /// Number of Inbound Streams.
    pub num_inbound_streams: u16,
    /// Initial TSN.
    pub initial_tsn: u32,
    /// Parameters.
    pub params: InitParams<'a>,
}

const INIT_FIXED_LEN: usize = 16;

impl<'a> InitRepr<'a> {
    fn parse(ty: u8, v: &'a [u8]) -> Result<Self> {
        let layer = Layer::Chunk(ty);
        if v.len() < INIT_FIXED_LEN {
            return Err(Error::Truncated {
                layer,
                needed: CHUNK_HEADER_LEN + INIT_FIXED_LEN,
                got: CHUNK_HEADER_LEN + v.len(),
            });
        }
        let initiate_tag = be32(v, 0, layer)?;
        let num_outbound_streams = be16(v, 8, layer)?;
        let num_inbound_streams = be16(v, 10, layer)?;
        // RFC 9260 §3.3.2: Initiate Tag 0, or zero streams, MUST be treated
        // as a protocol error (the caller ABORTs).
        if initiate_tag == 0 {
            return Err(Error::BadValue {
                layer,
                field: "Initiate Tag",
                value: 0,
            });
        }
        if num_outbound_streams == 0 {
            return Err(Error::BadValue {
                layer,
                field: "Number of Outbound Streams",
                value: 0,
            });
        }
        if num_inbound_streams == 0 {
            return Err(Error::BadValue {
                layer,
                field: "Number of Inbound Streams",
                value: 0,
            });
        }
        let mut params = InitParams::default();
        for p in Params::new(&v[INIT_FIXED_LEN..]) {
            let p = p?;
            match p.ty {
                param_type::STATE_COOKIE if ty == chunk_type::INIT_ACK => {
                    params.state_cookie = Some(p.value)
                }
                param_type::ADAPTATION_LAYER_INDICATION => {
                    params.adaptation = Some(be32(p.value, 0, Layer::Parameter(p.ty))?);
                }
                param_type::COOKIE_PRESERVATIVE => {
                    params.cookie_preservative = Some(be32(p.value, 0, Layer::Parameter(p.ty))?);
                }
                // Known, and meaningless for a single-homed association:
                // addresses are taken from the IP header (RFC 9260 §5.1.2).
                param_type::IPV4_ADDRESS
                | param_type::IPV6_ADDRESS
                | param_type::SUPPORTED_ADDRESS_TYPES
                | param_type::HOST_NAME_ADDRESS => {}
                param_type::UNRECOGNIZED_PARAMETER => {
                    if params.unrecognized_reported.is_none() {
                        params.unrecognized_reported = Some(p.value);
                    }
                }
                other => {
                    let act = UnknownAction::for_param(other);
                    if act.reports() {
                        params.unrecognized_count = params.unrecognized_count.saturating_add(1);
                        if params.unrecognized.is_none() {
                            params.unrecognized = Some(p.raw);
                        }
                    }
                    if !act.continues() {
                        break;
                    }
                }
            }
        }
        // RFC 9260 §3.3.3: the State Cookie is mandatory in INIT-ACK.
        if ty == chunk_type::INIT_ACK && params.state_cookie.is_none() {
            return Err(Error::BadValue {
                layer,
                field: "State Cookie (missing)",
                value: 0,
            });
        }
        Ok(InitRepr {
            initiate_tag,
            a_rwnd: be32(v, 4, layer)?,
            num_outbound_streams,
            num_inbound_streams,
            initial_tsn: be32(v, 12, layer)?,
            params,
        })
    }

    fn value_len(&self) -> Option<usize> {
        let mut n = INIT_FIXED_LEN;
        if let Some(c) = self.params.state_cookie {
            n = n.checked_add(pad4(c.len().checked_add(4)?)?)?;
        }
        if self.params.adaptation.is_some() {
            n = n.checked_add(8)?;
        }
        if self.params.cookie_preservative.is_some() {
            n = n.checked_add(8)?;
        }
        if let Some(u) = self.params.unrecognized_reported {
            n = n.checked_add(pad4(u.len().checked_add(4)?)?)?;
        }
        Some(n)
    }

    fn emit_value(&self, out: &mut [u8]) -> usize {
        out[0..4].copy_from_slice(&self.initiate_tag.to_be_bytes());
        out[4..8].copy_from_slice(&self.a_rwnd.to_be_bytes());
        out[8..10].copy_from_slice(&self.num_outbound_streams.to_be_bytes());
        out[10..12].copy_from_slice(&self.num_inbound_streams.to_be_bytes());
        out[12..16].copy_from_slice(&self.initial_tsn.to_be_bytes());
        let mut at = INIT_FIXED_LEN;
        if let Some(c) = self.params.state_cookie {
            at += emit_param(&mut out[at..], param_type::STATE_COOKIE, c);
        }
        if let Some(a) = self.params.adaptation {
            at += emit_param(
                &mut out[at..],
                param_type::ADAPTATION_LAYER_INDICATION,
                &a.to_be_bytes(),
            );
        }
        if let Some(c) = self.params.cookie_preservative {
            at += emit_param(
                &mut out[at..],
                param_type::COOKIE_PRESERVATIVE,
                &c.to_be_bytes(),
            );
        }
        if let Some(u) = self.params.unrecognized_reported {
            at += emit_param(&mut out[at..], param_type::UNRECOGNIZED_PARAMETER, u);
        }
        at
    }
}

/// Writes a TLV (type, length, value, zero padding); `out` must be long
/// enough (callers size it with `pad4(4 + value.len())`). Returns the
/// padded length.
fn emit_param(out: &mut [u8], ty: u16, value: &[u8]) -> usize {
    let len = 4 + value.len();
    out[0..2].copy_from_slice(&ty.to_be_bytes());
    out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
    out[4..len].copy_from_slice(value);
    let padded = (len + 3) & !3;
    out[len..padded].fill(0);
    padded
}

/// Gap Ack Blocks or Duplicate TSNs of a SACK: as received (raw octets) or
/// as built by the sender (a slice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GapBlocks<'a> {
    /// Received: 4 octets per block (start, end offsets from the cumulative TSN ack).
    Wire(&'a [u8]),
    /// To send: (start, end) offsets.
    List(&'a [(u16, u16)]),
}

impl<'a> GapBlocks<'a> {
    /// Number of blocks.
    pub fn len(&self) -> usize {
        match self {
            GapBlocks::Wire(b) => b.len() / 4,
            GapBlocks::List(l) => l.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The blocks as (start, end) offsets.
    pub fn iter(&self) -> impl Iterator<Item = (u16, u16)> + 'a {
        let (w, l): (&'a [u8], &'a [(u16, u16)]) = match *self {
            GapBlocks::Wire(b) => (b, &[]),
            GapBlocks::List(l) => (&[], l),
        };
        w.chunks_exact(4)
            .map(|c| {
                (
                    u16::from_be_bytes([c[0], c[1]]),
                    u16::from_be_bytes([c[2], c[3]]),
                )
            })
            .chain(l.iter().copied())
    }
}

/// Duplicate TSNs of a SACK, as received or to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DupTsns<'a> {
    /// Received: 4 octets each.
    Wire(&'a [u8]),
    /// To send.
    List(&'a [u32]),
}

impl<'a> DupTsns<'a> {
    /// Number of TSNs.
    pub fn len(&self) -> usize {
        match self {
            DupTsns::Wire(b) => b.len() / 4,
            DupTsns::List(l) => l.len(),
        }
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The TSNs.
    pub fn iter(&self) -> impl Iterator<Item = u32> + 'a {
        let (w, l): (&'a [u8], &'a [u32]) = match *self {
            DupTsns::Wire(b) => (b, &[]),
            DupTsns::List(l) => (&[], l),
        };
        w.chunks_exact(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .chain(l.iter().copied())
    }
}

/// A SACK chunk (RFC 9260 §3.3.4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SackRepr<'a> {
    /// Cumulative TSN Ack.
    pub cum_tsn_ack: u32,
    /// Advertised Receiver Window Credit.
    pub a_rwnd: u32,
    /// Gap Ack Blocks.
    pub gap_blocks: GapBlocks<'a>,
    /// Duplicate TSNs.
    pub dup_tsns: DupTsns<'a>,
}

impl SackRepr<'_> {
    /// Writes the SACK chunk (RFC 9260 §3.3.4: Cumulative TSN Ack,
    /// a_rwnd, the numbers of Gap Ack Blocks and Duplicate TSNs, then
    /// each; always a multiple of four octets) at the start of `out`;
    /// returns the octets written. What [`ChunkRepr::emit`] writes for
    /// it, without asking the other chunk types' questions (most packets
    /// of a stream carry one).
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        let layer = Layer::Chunk(chunk_type::SACK);
        let (gaps, dups) = (self.gap_blocks.len(), self.dup_tsns.len());
        let len = gaps
            .checked_add(dups)
            .and_then(|n| n.checked_mul(4))
            .and_then(|n| n.checked_add(16))
            .unwrap_or(usize::MAX);
        // (`len` is a multiple of 4 and 65535 is not: the `>=` mutant is
        // equivalent.)
        if len > usize::from(u16::MAX) {
            return Err(Error::TooLong {
                layer,
                len,
                max: usize::from(u16::MAX),
            });
        }
        if out.len() < len {
            return Err(Error::Truncated {
                layer,
                needed: len,
                got: out.len(),
            });
        }
        out[0] = chunk_type::SACK;
        out[1] = 0;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        out[4..8].copy_from_slice(&self.cum_tsn_ack.to_be_bytes());
        out[8..12].copy_from_slice(&self.a_rwnd.to_be_bytes());
        out[12..14].copy_from_slice(&(gaps as u16).to_be_bytes());
        out[14..16].copy_from_slice(&(dups as u16).to_be_bytes());
        let mut at = 16;
        // The guards only skip building an empty iterator (most SACKs
        // carry neither): the loops would write nothing either way, so
        // cargo-mutants' `>` → `>=` mutants of them are equivalent.
        if gaps > 0 {
            for (a, b) in self.gap_blocks.iter() {
                out[at..at + 2].copy_from_slice(&a.to_be_bytes());
                out[at + 2..at + 4].copy_from_slice(&b.to_be_bytes());
                at += 4;
            }
        }
        if dups > 0 {
            for t in self.dup_tsns.iter() {
                out[at..at + 4].copy_from_slice(&t.to_be_bytes());
                at += 4;
            }
        }
        Ok(len)
    }
}

/// A typed chunk, borrowing from the packet (RFC 9260 §3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChunkRepr<'a> {
    /// DATA.
    Data(DataRepr<'a>),
    /// INIT.
    Init(InitRepr<'a>),
    /// INIT ACK.
    InitAck(InitRepr<'a>),
    /// SACK.
    Sack(SackRepr<'a>),
    /// HEARTBEAT with its Heartbeat Information TLV (the whole TLV).
    Heartbeat {
        /// Heartbeat Info parameter, header included.
        info: &'a [u8],
    },
    /// HEARTBEAT ACK, echoing the Heartbeat Information TLV.
    HeartbeatAck {
        /// Heartbeat Info parameter, header included.
        info: &'a [u8],
    },
    /// ABORT.
    Abort {
        /// T bit: the verification tag is the sender's own (reflected).
        t_bit: bool,
        /// Error causes, raw (iterate with [`Params`]).
        causes: &'a [u8],
    },
    /// SHUTDOWN.
    Shutdown {
        /// Cumulative TSN Ack.
        cum_tsn_ack: u32,
    },
    /// SHUTDOWN ACK.
    ShutdownAck,
    /// ERROR.
    Error {
        /// Error causes, raw (iterate with [`Params`]).
        causes: &'a [u8],
    },
    /// COOKIE ECHO.
    CookieEcho {
        /// The State Cookie, as received in the INIT-ACK.
        cookie: &'a [u8],
    },
    /// COOKIE ACK.
    CookieAck,
    /// SHUTDOWN COMPLETE.
    ShutdownComplete {
        /// T bit, as for ABORT.
        t_bit: bool,
    },
    /// Any other chunk type; see [`UnknownAction::for_chunk`].
    Unknown {
        /// Chunk Type.
        ty: u8,
        /// Chunk Flags.
        flags: u8,
        /// Chunk Value.
        value: &'a [u8],
    },
}

fn exact_len(ty: u8, v: &[u8], want: usize) -> Result<()> {
    if v.len() < want {
        return Err(Error::Truncated {
            layer: Layer::Chunk(ty),
            needed: CHUNK_HEADER_LEN + want,
            got: CHUNK_HEADER_LEN + v.len(),
        });
    }
    Ok(())
}

impl<'a> ChunkRepr<'a> {
    /// Parses a raw chunk.
    pub fn parse(c: &Chunk<'a>) -> Result<Self> {
        use chunk_type as t;
        let v = c.value;
        let layer = Layer::Chunk(c.ty);
        Ok(match c.ty {
            t::DATA => {
                exact_len(c.ty, v, DATA_HEADER_LEN - CHUNK_HEADER_LEN)?;
                let payload = &v[12..];
                // RFC 9260 §3.3.1: a DATA chunk with no user data is a
                // protocol error (the caller ABORTs with "No User Data").
                if payload.is_empty() {
                    return Err(Error::BadLength {
                        layer,
                        field: "Chunk Length",
                        value: DATA_HEADER_LEN,
                        min: DATA_HEADER_LEN + 1,
                    });
                }
                ChunkRepr::Data(DataRepr {
                    flags: DataFlags::from_bits(c.flags),
                    tsn: be32(v, 0, layer)?,
                    stream_id: be16(v, 4, layer)?,
                    ssn: be16(v, 6, layer)?,
                    ppid: be32(v, 8, layer)?,
                    payload,
                })
            }
            t::INIT => ChunkRepr::Init(InitRepr::parse(c.ty, v)?),
            t::INIT_ACK => ChunkRepr::InitAck(InitRepr::parse(c.ty, v)?),
            t::SACK => {
                exact_len(c.ty, v, 12)?;
                let ngap = usize::from(be16(v, 8, layer)?);
                let ndup = usize::from(be16(v, 10, layer)?);
                let gap_end = 12 + ngap * 4;
                let dup_end = gap_end + ndup * 4;
                exact_len(c.ty, v, dup_end)?;
                ChunkRepr::Sack(SackRepr {
                    cum_tsn_ack: be32(v, 0, layer)?,
                    a_rwnd: be32(v, 4, layer)?,
                    gap_blocks: GapBlocks::Wire(&v[12..gap_end]),
                    dup_tsns: DupTsns::Wire(&v[gap_end..dup_end]),
                })
            }
            t::HEARTBEAT | t::HEARTBEAT_ACK => {
                // RFC 9260 §3.3.5: one Heartbeat Info TLV.
                let p = Params::new(v).next().unwrap_or(Err(Error::Truncated {
                    layer,
                    needed: CHUNK_HEADER_LEN + 4,
                    got: CHUNK_HEADER_LEN,
                }))?;
                if p.ty != param_type::HEARTBEAT_INFO {
                    return Err(Error::BadValue {
                        layer: Layer::Parameter(p.ty),
                        field: "Heartbeat Info Type",
                        value: u32::from(p.ty),
                    });
                }
                if c.ty == t::HEARTBEAT {
                    ChunkRepr::Heartbeat { info: p.raw }
                } else {
                    ChunkRepr::HeartbeatAck { info: p.raw }
                }
            }
            t::ABORT => ChunkRepr::Abort {
                t_bit: c.flags & 1 != 0,
                causes: v,
            },
            t::SHUTDOWN => {
                exact_len(c.ty, v, 4)?;
                ChunkRepr::Shutdown {
                    cum_tsn_ack: be32(v, 0, layer)?,
                }
            }
            t::SHUTDOWN_ACK => ChunkRepr::ShutdownAck,
            t::ERROR => ChunkRepr::Error { causes: v },
            t::COOKIE_ECHO => ChunkRepr::CookieEcho { cookie: v },
            t::COOKIE_ACK => ChunkRepr::CookieAck,
            t::SHUTDOWN_COMPLETE => ChunkRepr::ShutdownComplete {
                t_bit: c.flags & 1 != 0,
            },
            ty => ChunkRepr::Unknown {
                ty,
                flags: c.flags,
                value: v,
            },
        })
    }

    /// Chunk Type of this chunk.
    pub fn chunk_type(&self) -> u8 {
        use chunk_type as t;
        match self {
            ChunkRepr::Data(_) => t::DATA,
            ChunkRepr::Init(_) => t::INIT,
            ChunkRepr::InitAck(_) => t::INIT_ACK,
            ChunkRepr::Sack(_) => t::SACK,
            ChunkRepr::Heartbeat { .. } => t::HEARTBEAT,
            ChunkRepr::HeartbeatAck { .. } => t::HEARTBEAT_ACK,
            ChunkRepr::Abort { .. } => t::ABORT,
            ChunkRepr::Shutdown { .. } => t::SHUTDOWN,
            ChunkRepr::ShutdownAck => t::SHUTDOWN_ACK,
            ChunkRepr::Error { .. } => t::ERROR,
            ChunkRepr::CookieEcho { .. } => t::COOKIE_ECHO,
            ChunkRepr::CookieAck => t::COOKIE_ACK,
            ChunkRepr::ShutdownComplete { .. } => t::SHUTDOWN_COMPLETE,
            ChunkRepr::Unknown { ty, .. } => *ty,
        }
    }

    /// Chunk Length (header included, padding excluded), `None` if it
    /// overflows.
    pub fn chunk_len(&self) -> Option<usize> {
        let v = match self {
            ChunkRepr::Data(d) => {
                (DATA_HEADER_LEN - CHUNK_HEADER_LEN).checked_add(d.payload.len())?
            }
            ChunkRepr::Init(i) | ChunkRepr::InitAck(i) => i.value_len()?,
            ChunkRepr::Sack(s) => 12usize
                .checked_add(s.gap_blocks.len().checked_mul(4)?)?
                .checked_add(s.dup_tsns.len().checked_mul(4)?)?,
            ChunkRepr::Heartbeat { info } | ChunkRepr::HeartbeatAck { info } => info.len(),
            ChunkRepr::Abort { causes, .. } | ChunkRepr::Error { causes } => causes.len(),
            ChunkRepr::Shutdown { .. } => 4,
            ChunkRepr::CookieEcho { cookie } => cookie.len(),
            ChunkRepr::Unknown { value, .. } => value.len(),
            ChunkRepr::ShutdownAck | ChunkRepr::CookieAck | ChunkRepr::ShutdownComplete { .. } => 0,
        };
        v.checked_add(CHUNK_HEADER_LEN)
    }

    /// Octets this chunk takes in a packet, padding included.
    #[inline]
    pub fn buffer_len(&self) -> Option<usize> {
        pad4(self.chunk_len()?)
    }

    /// Writes the chunk (with padding) at the start of `out`; returns the
    /// octets written.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize> {
        match self {
            ChunkRepr::Data(d) => return d.emit(out),
            ChunkRepr::Sack(s) => return s.emit(out),
            _ => {}
        }
        let layer = Layer::Chunk(self.chunk_type());
        let len = self.chunk_len().ok_or(Error::TooLong {
            layer,
            len: usize::MAX,
            max: usize::from(u16::MAX),
        })?;
        if len > usize::from(u16::MAX) {
            return Err(Error::TooLong {
                layer,
                len,
                max: usize::from(u16::MAX),
            });
        }
        // The check below cannot fail while `chunk_len` counts every
        // parameter octet: an INIT parameter over 65531 octets makes a
        // chunk over 65535 octets, refused above. It stays in case that
        // changes; cargo-mutants' mutants of it are equivalent.
        if let ChunkRepr::Init(i) | ChunkRepr::InitAck(i) = self {
            for p in [i.params.state_cookie, i.params.unrecognized_reported]
                .into_iter()
                .flatten()
            {
                if p.len() > usize::from(u16::MAX) - 4 {
                    return Err(Error::TooLong {
                        layer,
                        len: p.len(),
                        max: usize::from(u16::MAX) - 4,
                    });
                }
            }
        }
        let padded = (len + 3) & !3;
        if out.len() < padded {
            return Err(Error::Truncated {
                layer,
                needed: padded,
                got: out.len(),
            });
        }
        let out = &mut out[..padded];
        let flags = match self {
            ChunkRepr::Abort { t_bit, .. } | ChunkRepr::ShutdownComplete { t_bit } => {
                u8::from(*t_bit)
            }
            ChunkRepr::Unknown { flags, .. } => *flags,
            _ => 0,
        };
        out[0] = self.chunk_type();
        out[1] = flags;
        out[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        let v = &mut out[CHUNK_HEADER_LEN..];
        match self {
            // Written by `DataRepr::emit` and `SackRepr::emit` above.
            ChunkRepr::Data(_) | ChunkRepr::Sack(_) => {}
            ChunkRepr::Init(i) | ChunkRepr::InitAck(i) => {
                let n = i.emit_value(v);
                // What was written is what `chunk_len` sized.
                debug_assert_eq!(Some(n), i.value_len());
            }
            ChunkRepr::Heartbeat { info } | ChunkRepr::HeartbeatAck { info } => {
                v[..info.len()].copy_from_slice(info)
            }
            ChunkRepr::Abort { causes, .. } | ChunkRepr::Error { causes } => {
                v[..causes.len()].copy_from_slice(causes)
            }
            ChunkRepr::Shutdown { cum_tsn_ack } => {
                v[0..4].copy_from_slice(&cum_tsn_ack.to_be_bytes())
            }
            ChunkRepr::CookieEcho { cookie } => v[..cookie.len()].copy_from_slice(cookie),
            ChunkRepr::Unknown { value, .. } => v[..value.len()].copy_from_slice(value),
            ChunkRepr::ShutdownAck | ChunkRepr::CookieAck | ChunkRepr::ShutdownComplete { .. } => {}
        }
        out[len..padded].fill(0);
        Ok(padded)
    }
}

/// The common header of a packet to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HeaderRepr {
    /// Source Port Number.
    pub src_port: u16,
    /// Destination Port Number.
    pub dst_port: u16,
    /// Verification Tag.
    pub verification_tag: u32,
}

impl HeaderRepr {
    /// Reads the header of a checked packet.
    pub fn parse<T: AsRef<[u8]>>(p: &SctpPacket<T>) -> Self {
        HeaderRepr {
            src_port: p.src_port(),
            dst_port: p.dst_port(),
            verification_tag: p.verification_tag(),
        }
    }
}

/// Writes a packet (header, chunks, checksum) into `out`; returns its length.
pub fn emit_packet(h: &HeaderRepr, chunks: &[ChunkRepr<'_>], out: &mut [u8]) -> Result<usize> {
    if out.len() < COMMON_HEADER_LEN {
        return Err(Error::Truncated {
            layer: Layer::CommonHeader,
            needed: COMMON_HEADER_LEN,
            got: out.len(),
        });
    }
    let mut at = COMMON_HEADER_LEN;
    for c in chunks {
        at += c.emit(&mut out[at..])?;
    }
    let mut p = SctpPacket::new_unchecked(&mut out[..at]);
    p.set_src_port(h.src_port);
    p.set_dst_port(h.dst_port);
    p.set_verification_tag(h.verification_tag);
    p.fill_checksum();
    Ok(at)
}

/// Writes one error cause TLV (RFC 9260 §3.3.10) into a small fixed
/// buffer: cause code plus up to 12 octets of value (enough for every cause
/// this stack sends). Returns the buffer and the padded length.
pub fn error_cause(code: u16, value: &[u8]) -> ([u8; 16], usize) {
    let mut b = [0u8; 16];
    let v = &value[..value.len().min(12)];
    let n = emit_param(&mut b, code, v);
    (b, n)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An INIT packet laid out by hand from RFC 9260 §3.1 and §3.3.2, with
    /// the RFC 5061 Adaptation Layer Indication (value 1, RFC 5043 §5.1)
    /// and an unknown "skip and report" parameter.
    fn init_bytes() -> Vec<u8> {
        let mut b = vec![
            0x13, 0x88, 0x00, 0x50, // src 5000, dst 80
            0x00, 0x00, 0x00, 0x00, // verification tag 0 (INIT)
            0, 0, 0, 0, // checksum, filled below
            0x01, 0x00, 0x00, 0x20, // INIT, flags 0, length 32
            0xde, 0xad, 0xbe, 0xef, // initiate tag
            0x00, 0x01, 0x00, 0x00, // a_rwnd 65536
            0x00, 0x0a, 0x00, 0x0b, // OS 10, MIS 11
            0x00, 0x00, 0x00, 0x07, // initial TSN 7
            0xc0, 0x06, 0x00, 0x08, // adaptation layer indication
            0x00, 0x00, 0x00, 0x01, // DDP
            0xc0, 0x00, 0x00,
            0x04, // Forward-TSN-Supported: unknown here, 11 = skip and report
        ];
        let c = checksum(&b);
        b[8..12].copy_from_slice(&c.to_le_bytes());
        b
    }

    #[test]
    fn crc32c_matches_rfc3720_vector() {
        // RFC 3720 Appendix B.4: 32 octets of zeros -> CRC 0x8a9136aa
        // (the same CRC32c RFC 9260 Appendix A specifies).
        assert_eq!(crc32c::crc32c(&[0u8; 32]), 0x8a91_36aa);
        // And the checksum octet order: least significant first, as Linux
        // writes it (net/sctp/checksum.h: `cpu_to_le32(~crc32)` into an
        // `__le32` field) and as RFC 4960 Appendix B's sample code does.
        let mut p = [0u8; 12];
        let mut v = SctpPacket::new_unchecked(&mut p[..]);
        v.set_checksum(0x8a91_36aa);
        assert_eq!(&p[8..12], &[0xaa, 0x36, 0x91, 0x8a]);
    }

    #[test]
    fn parses_hand_built_init() {
        let b = init_bytes();
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        p.verify_checksum().unwrap();
        assert_eq!(
            (p.src_port(), p.dst_port(), p.verification_tag()),
            (5000, 80, 0)
        );
        let chunks: Vec<_> = p.chunks().collect::<Result<_>>().unwrap();
        assert_eq!(chunks.len(), 1);
        let ChunkRepr::Init(i) = ChunkRepr::parse(&chunks[0]).unwrap() else {
            panic!("not INIT")
        };
        assert_eq!(i.initiate_tag, 0xdead_beef);
        assert_eq!(i.a_rwnd, 65536);
        assert_eq!((i.num_outbound_streams, i.num_inbound_streams), (10, 11));
        assert_eq!(i.initial_tsn, 7);
        assert_eq!(i.params.adaptation, Some(1));
        assert_eq!(i.params.unrecognized, Some(&[0xc0, 0x00, 0x00, 0x04][..]));
        assert_eq!(i.params.unrecognized_count, 1);
    }

    /// A SACK with neither Gap Ack Blocks nor Duplicate TSNs (RFC 9260
    /// §3.3.4) has empty lists. (cargo-mutants: `is_empty` made `false`.)
    #[test]
    fn a_bare_sack_has_empty_lists() {
        let b = [
            0x03, 0x00, 0x00, 0x10, // SACK, length 16
            0x00, 0x00, 0x00, 0x29, // cum TSN ack 41
            0x00, 0x00, 0x10, 0x00, // a_rwnd 4096
            0x00, 0x00, 0x00, 0x00, // no gap blocks, no dups
        ];
        let (c, _) = parse_chunk(&b).unwrap();
        let ChunkRepr::Sack(s) = ChunkRepr::parse(&c).unwrap() else {
            panic!("not SACK")
        };
        assert_eq!((s.cum_tsn_ack, s.a_rwnd), (41, 4096));
        assert_eq!((s.gap_blocks.len(), s.gap_blocks.is_empty()), (0, true));
        assert_eq!((s.dup_tsns.len(), s.dup_tsns.is_empty()), (0, true));
    }

    /// A peer's chunk of a type we do not know, as the Unrecognized Chunk
    /// Type cause (RFC 9260 §3.3.10.6) copies it: its Chunk Length counts
    /// no padding, its buffer length does (§3.2), and it re-emits to the
    /// same octets. (cargo-mutants: `buffer_len` made `Some(0)`,
    /// `Some(1)`: the cause then carried an empty chunk.)
    #[test]
    fn an_unknown_chunk_takes_its_padded_length_and_re_emits() {
        let b = [
            0xc1, 0x05, 0x00, 0x07, // type 0xc1 (skip and report), flags 5, length 7
            0xaa, 0xbb, 0xcc, 0x00, // three octets of value, one of padding
        ];
        let (c, n) = parse_chunk(&b).unwrap();
        assert_eq!(n, 8);
        let r = ChunkRepr::parse(&c).unwrap();
        assert_eq!(
            r,
            ChunkRepr::Unknown {
                ty: 0xc1,
                flags: 5,
                value: &[0xaa, 0xbb, 0xcc]
            }
        );
        assert_eq!((r.chunk_len(), r.buffer_len()), (Some(7), Some(8)));
        let mut out = [0xffu8; 8];
        assert_eq!(r.emit(&mut out), Ok(8));
        assert_eq!(out, b);
    }

    /// Chunk Length is 16 bits (RFC 9260 §3.2): a chunk of 65535 octets
    /// is emitted, one of 65536 or more is refused as too long, whatever
    /// room `out` has. (cargo-mutants: the `len > u16::MAX` boundary.)
    #[test]
    fn a_chunk_of_65535_octets_is_emitted_and_no_longer() {
        let mut out = vec![0u8; 80_000];
        let value = vec![0x5a; 65_535 - CHUNK_HEADER_LEN];
        let r = ChunkRepr::Unknown {
            ty: 0xc1,
            flags: 0,
            value: &value,
        };
        assert_eq!(r.emit(&mut out), Ok(65_536));
        assert_eq!(out[..4], [0xc1, 0, 0xff, 0xff]);
        for len in [65_536, 70_004] {
            let value = vec![0x5a; len - CHUNK_HEADER_LEN];
            let r = ChunkRepr::Unknown {
                ty: 0xc1,
                flags: 0,
                value: &value,
            };
            assert_eq!(
                r.emit(&mut out),
                Err(Error::TooLong {
                    layer: Layer::Chunk(0xc1),
                    len,
                    max: 65_535
                })
            );
        }
    }

    /// A DATA chunk on literal octets (RFC 9260 §3.3.1): type 0, the
    /// U/B/E flags, Chunk Length 16 plus the user data (padding not
    /// counted), TSN, Stream Identifier, Stream Sequence Number and PPID
    /// in network order, then the data zero-padded to four octets (§3.2)
    /// over whatever the buffer held, for each padding length; a buffer
    /// one octet short of the padded chunk, and a chunk over 65535
    /// octets, refused.
    #[test]
    fn a_data_chunk_on_literal_octets() {
        for (data, pad) in [(&b"abcd"[..], 0), (b"abc", 1), (b"ab", 2), (b"a", 3)] {
            let d = DataRepr {
                flags: DataFlags {
                    unordered: true,
                    begin: true,
                    end: true,
                    immediate: false,
                },
                tsn: 0x0102_0304,
                stream_id: 0x0506,
                ssn: 0x0708,
                ppid: 0x090a_0b0c,
                payload: data,
            };
            let mut want = vec![0x00, 0x07, 0x00, 16 + data.len() as u8];
            want.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]);
            want.extend_from_slice(data);
            want.extend(std::iter::repeat_n(0, pad));
            let mut out = [0xee; 24];
            assert_eq!(d.emit(&mut out), Ok(20));
            assert_eq!(&out[..20], &want[..]);
            assert_eq!(out[20..], [0xee; 4], "wrote past the chunk");
            // The same through `ChunkRepr`.
            let mut again = [0x11; 20];
            assert_eq!(ChunkRepr::Data(d).emit(&mut again), Ok(20));
            assert_eq!(again, out[..20]);
            assert_eq!(
                d.emit(&mut out[..19]),
                Err(Error::Truncated {
                    layer: Layer::Chunk(0),
                    needed: 20,
                    got: 19
                })
            );
        }
        let mut out = vec![0u8; 70_000];
        let value = vec![0x5a; 65_535 - DATA_HEADER_LEN];
        let mut d = DataRepr {
            flags: DataFlags::default(),
            tsn: 1,
            stream_id: 0,
            ssn: 0,
            ppid: 0,
            payload: &value,
        };
        assert_eq!(d.emit(&mut out), Ok(65_536));
        assert_eq!(out[..4], [0, 0, 0xff, 0xff]);
        let value = vec![0x5a; 65_536 - DATA_HEADER_LEN];
        d.payload = &value;
        assert_eq!(
            d.emit(&mut out),
            Err(Error::TooLong {
                layer: Layer::Chunk(0),
                len: 65_536,
                max: 65_535
            })
        );
    }

    /// A SACK on literal octets (RFC 9260 §3.3.4) from the lists a
    /// sender builds: type 3, flags 0, Chunk Length 16 + 4 per block and
    /// per TSN, the cumulative TSN ack, a_rwnd, the two counts, the
    /// blocks' start and end offsets, the duplicate TSNs; with none of
    /// either, 16 octets; a buffer one octet short, and a chunk over
    /// 65535 octets, refused.
    #[test]
    fn a_sack_on_literal_octets() {
        let gaps = [(2u16, 3u16), (0x0105, 0x0206)];
        // Two of each: the second block and the second duplicate TSN
        // each follow the one before.
        let dups = [0x0a0b_0c0du32, 0x1122_3344];
        let s = SackRepr {
            cum_tsn_ack: 0x0102_0304,
            a_rwnd: 0x0506_0708,
            gap_blocks: GapBlocks::List(&gaps),
            dup_tsns: DupTsns::List(&dups),
        };
        let want = [
            3, 0, 0, 32, // SACK, flags, Chunk Length 32
            1, 2, 3, 4, // Cumulative TSN Ack
            5, 6, 7, 8, // a_rwnd
            0, 2, 0, 2, // 2 Gap Ack Blocks, 2 Duplicate TSNs
            0, 2, 0, 3, // block 1: start 2, end 3
            1, 5, 2, 6, // block 2
            10, 11, 12, 13, // duplicate TSN 1
            0x11, 0x22, 0x33, 0x44, // duplicate TSN 2
        ];
        let mut out = [0xee; 36];
        assert_eq!(s.emit(&mut out), Ok(32));
        assert_eq!(out[..32], want);
        assert_eq!(out[32..], [0xee; 4], "wrote past the chunk");
        let mut again = [0x11; 32];
        assert_eq!(ChunkRepr::Sack(s).emit(&mut again), Ok(32));
        assert_eq!(again, want);
        assert_eq!(
            s.emit(&mut out[..31]),
            Err(Error::Truncated {
                layer: Layer::Chunk(3),
                needed: 32,
                got: 31
            })
        );
        let bare = SackRepr {
            gap_blocks: GapBlocks::List(&[]),
            dup_tsns: DupTsns::List(&[]),
            ..s
        };
        assert_eq!(bare.emit(&mut out), Ok(16));
        assert_eq!(out[..16], [3, 0, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0]);
        // 16 + 4 * 16380 = 65536: one block too many for 16 bits.
        let many = vec![(1u16, 1u16); 16_380];
        let big = SackRepr {
            gap_blocks: GapBlocks::List(&many),
            ..bare
        };
        let mut room = vec![0u8; 70_000];
        assert_eq!(
            big.emit(&mut room),
            Err(Error::TooLong {
                layer: Layer::Chunk(3),
                len: 65_536,
                max: 65_535
            })
        );
        let fits = SackRepr {
            gap_blocks: GapBlocks::List(&many[1..]),
            ..bare
        };
        assert_eq!(fits.emit(&mut room), Ok(65_532));
    }

    /// An INIT ACK with a State Cookie of 40000 octets (a Chunk Length
    /// within 16 bits, RFC 9260 §3.2) is emitted and parses back with it.
    /// (cargo-mutants: the parameter length limit `u16::MAX - 4` made
    /// `u16::MAX / 4`.)
    #[test]
    fn an_init_ack_takes_a_long_cookie() {
        let cookie = vec![0xc5; 40_000];
        let r = ChunkRepr::InitAck(InitRepr {
            initiate_tag: 1,
            a_rwnd: 65_536,
            num_outbound_streams: 1,
            num_inbound_streams: 1,
            initial_tsn: 1,
            params: InitParams {
                state_cookie: Some(&cookie),
                ..InitParams::default()
            },
        });
        let mut out = vec![0u8; 70_000];
        let n = r.emit(&mut out).unwrap();
        assert_eq!(n, CHUNK_HEADER_LEN + INIT_FIXED_LEN + 4 + 40_000);
        let (c, m) = parse_chunk(&out[..n]).unwrap();
        assert_eq!(m, n);
        let ChunkRepr::InitAck(i) = ChunkRepr::parse(&c).unwrap() else {
            panic!("not INIT ACK")
        };
        assert_eq!(i.params.state_cookie, Some(&cookie[..]));
    }

    /// A packet of no chunks is the common header alone (RFC 9260 §3): it
    /// fits 12 octets, and 11 are refused, not a panic. (cargo-mutants: the
    /// `out.len() < COMMON_HEADER_LEN` boundary in `emit_packet`.)
    #[test]
    fn a_packet_of_no_chunks_fits_its_common_header() {
        let h = HeaderRepr {
            src_port: 5000,
            dst_port: 80,
            verification_tag: 0x0102_0304,
        };
        let mut out = [0u8; 12];
        assert_eq!(emit_packet(&h, &[], &mut out), Ok(12));
        let p = SctpPacket::new_checked(&out[..]).unwrap();
        p.verify_checksum().unwrap();
        assert_eq!(HeaderRepr::parse(&p), h);
        assert_eq!(
            emit_packet(&h, &[], &mut out[..11]),
            Err(Error::Truncated {
                layer: Layer::CommonHeader,
                needed: 12,
                got: 11
            })
        );
    }

    /// A State Cookie is a parameter of INIT ACK only (RFC 9260 §3.3.3,
    /// §5.1: the INIT's receiver makes one; it is not taken from an INIT):
    /// one in an INIT is not the chunk's cookie. (cargo-mutants: the
    /// `ty == INIT_ACK` guard made `true`.)
    #[test]
    fn a_state_cookie_in_an_init_is_not_taken() {
        let b = [
            0x01, 0x00, 0x00, 0x24, // INIT, flags 0, length 36
            0xde, 0xad, 0xbe, 0xef, // initiate tag
            0x00, 0x01, 0x00, 0x00, // a_rwnd 65536
            0x00, 0x0a, 0x00, 0x0b, // OS 10, MIS 11
            0x00, 0x00, 0x00, 0x07, // initial TSN 7
            0x00, 0x07, 0x00, 0x08, // State Cookie, length 8
            0x01, 0x02, 0x03, 0x04, // the cookie
            0xc0, 0x06, 0x00, 0x08, // adaptation layer indication
            0x00, 0x00, 0x00, 0x01, // DDP
        ];
        let (c, n) = parse_chunk(&b).unwrap();
        assert_eq!(n, b.len());
        let ChunkRepr::Init(i) = ChunkRepr::parse(&c).unwrap() else {
            panic!("not INIT")
        };
        assert_eq!(i.params.state_cookie, None);
        // The same parameter in an INIT ACK is its cookie.
        let mut b = b;
        b[0] = chunk_type::INIT_ACK;
        let (c, _) = parse_chunk(&b).unwrap();
        let ChunkRepr::InitAck(i) = ChunkRepr::parse(&c).unwrap() else {
            panic!("not INIT ACK")
        };
        assert_eq!(i.params.state_cookie, Some(&[1, 2, 3, 4][..]));
        assert_eq!(i.params.adaptation, Some(1));
    }

    #[test]
    fn flipped_bit_fails_checksum() {
        let mut b = init_bytes();
        b[20] ^= 1;
        let p = SctpPacket::new_checked(&b[..]).unwrap();
        assert!(matches!(
            p.verify_checksum(),
            Err(Error::BadChecksum { .. })
        ));
    }

    #[test]
    fn parses_hand_built_data_and_sack() {
        let b = [
            0x00, 0x0b, 0x00, 0x05, // DATA, flags U|B|E = 0b0111, length 21
            0x00, 0x00, 0x00, 0x2a, // TSN 42
            0x00, 0x03, 0x00, 0x09, // stream 3, SSN 9
            0x00, 0x00, 0x00, 0x10, // PPID 16
            0x61, 0x62, 0x63, 0x64, 0x65, 0, 0, 0, 0x03, 0x00, 0x00, 0x1c, // SACK, length 28
            0x00, 0x00, 0x00, 0x29, // cum TSN ack 41
            0x00, 0x00, 0x10, 0x00, // a_rwnd 4096
            0x00, 0x02, 0x00, 0x01, // 2 gap blocks, 1 dup
            0x00, 0x02, 0x00, 0x03, // gap 2..3
            0x00, 0x05, 0x00, 0x05, // gap 5..5
            0x00, 0x00, 0x00, 0x28, // dup 40
        ];
        // Length field of the DATA chunk is 21 = 0x15, fix the literal.
        let mut b = b.to_vec();
        b[1] = 0x07;
        b[2] = 0x00;
        b[3] = 0x15;
        let mut it = Chunks {
            rest: &b,
            failed: false,
        };
        let d = ChunkRepr::parse(&it.next().unwrap().unwrap()).unwrap();
        let ChunkRepr::Data(d) = d else {
            panic!("not DATA")
        };
        assert_eq!(
            d.flags,
            DataFlags {
                immediate: false,
                unordered: true,
                begin: true,
                end: true
            }
        );
        assert_eq!((d.tsn, d.stream_id, d.ssn, d.ppid), (42, 3, 9, 16));
        assert_eq!(d.payload, b"abcde");
        let s = ChunkRepr::parse(&it.next().unwrap().unwrap()).unwrap();
        let ChunkRepr::Sack(s) = s else {
            panic!("not SACK")
        };
        assert_eq!((s.cum_tsn_ack, s.a_rwnd), (41, 4096));
        assert_eq!(
            s.gap_blocks.iter().collect::<Vec<_>>(),
            vec![(2, 3), (5, 5)]
        );
        assert_eq!((s.gap_blocks.len(), s.gap_blocks.is_empty()), (2, false));
        assert_eq!(s.dup_tsns.iter().collect::<Vec<_>>(), vec![40]);
        assert_eq!((s.dup_tsns.len(), s.dup_tsns.is_empty()), (1, false));
        assert!(it.next().is_none());
        // Re-emitting gives the same octets.
        let mut out = vec![0u8; b.len()];
        let n1 = ChunkRepr::Data(d).emit(&mut out).unwrap();
        let n2 = ChunkRepr::Sack(s).emit(&mut out[n1..]).unwrap();
        assert_eq!(&out[..n1 + n2], &b[..]);
    }

    fn all_reprs() -> Vec<ChunkRepr<'static>> {
        static GAPS: [(u16, u16); 2] = [(2, 4), (9, 9)];
        static DUPS: [u32; 1] = [77];
        let init = InitRepr {
            initiate_tag: 9,
            a_rwnd: 1 << 20,
            num_outbound_streams: 4,
            num_inbound_streams: 4,
            initial_tsn: u32::MAX,
            params: InitParams {
                adaptation: Some(1),
                cookie_preservative: Some(1000),
                ..Default::default()
            },
        };
        let init_ack = InitRepr {
            params: InitParams {
                state_cookie: Some(b"cookie!"),
                unrecognized_reported: Some(&[0xc0, 0, 0, 4]),
                ..init.params
            },
            ..init
        };
        vec![
            ChunkRepr::Data(DataRepr {
                flags: DataFlags {
                    immediate: true,
                    unordered: false,
                    begin: true,
                    end: false,
                },
                tsn: 1,
                stream_id: 2,
                ssn: 3,
                ppid: 17,
                payload: b"xyz",
            }),
            ChunkRepr::Init(init),
            ChunkRepr::InitAck(init_ack),
            ChunkRepr::Sack(SackRepr {
                cum_tsn_ack: 5,
                a_rwnd: 6,
                gap_blocks: GapBlocks::List(&GAPS),
                dup_tsns: DupTsns::List(&DUPS),
            }),
            ChunkRepr::Heartbeat {
                info: &[0, 1, 0, 7, 1, 2, 3],
            },
            ChunkRepr::HeartbeatAck {
                info: &[0, 1, 0, 5, 9],
            },
            ChunkRepr::Abort {
                t_bit: true,
                causes: &[0, 12, 0, 4],
            },
            ChunkRepr::Shutdown { cum_tsn_ack: 99 },
            ChunkRepr::ShutdownAck,
            ChunkRepr::Error {
                causes: &[0, 1, 0, 8, 0, 3, 0, 0],
            },
            ChunkRepr::CookieEcho {
                cookie: b"0123456789",
            },
            ChunkRepr::CookieAck,
            ChunkRepr::ShutdownComplete { t_bit: false },
            ChunkRepr::Unknown {
                ty: 0xc1,
                flags: 3,
                value: b"ab",
            },
        ]
    }

    fn same(a: &ChunkRepr<'_>, b: &ChunkRepr<'_>) -> bool {
        match (a, b) {
            (ChunkRepr::Sack(x), ChunkRepr::Sack(y)) => {
                x.cum_tsn_ack == y.cum_tsn_ack
                    && x.a_rwnd == y.a_rwnd
                    && x.gap_blocks.iter().eq(y.gap_blocks.iter())
                    && x.dup_tsns.iter().eq(y.dup_tsns.iter())
            }
            _ => a == b,
        }
    }

    #[test]
    fn every_chunk_round_trips_in_one_packet() {
        let reprs = all_reprs();
        let h = HeaderRepr {
            src_port: 1,
            dst_port: 2,
            verification_tag: 3,
        };
        let mut buf = vec![0u8; 2048];
        let n = emit_packet(&h, &reprs, &mut buf).unwrap();
        let p = SctpPacket::new_checked(&buf[..n]).unwrap();
        p.verify_checksum().unwrap();
        assert_eq!(HeaderRepr::parse(&p), h);
        let back: Vec<_> = p
            .chunks()
            .map(|c| ChunkRepr::parse(&c.unwrap()).unwrap())
            .collect();
        assert_eq!(back.len(), reprs.len());
        for (a, b) in reprs.iter().zip(&back) {
            assert!(same(a, b), "{a:?} != {b:?}");
        }
    }

    #[test]
    fn every_truncation_is_an_error_not_a_panic() {
        let reprs = all_reprs();
        for r in &reprs {
            let mut buf = vec![0u8; 512];
            let n = r.emit(&mut buf).unwrap();
            let full_len = r.chunk_len().unwrap();
            for cut in 0..full_len {
                let res = parse_chunk(&buf[..cut]).and_then(|(c, _)| ChunkRepr::parse(&c));
                assert!(res.is_err(), "{r:?} cut at {cut} parsed");
            }
            // Chunk lengths that lie (shorter than the value needs) are errors
            // or parse to something shorter, never a panic.
            for fake in 0..full_len {
                let mut b = buf[..n].to_vec();
                b[2..4].copy_from_slice(&(fake as u16).to_be_bytes());
                let _ = parse_chunk(&b).and_then(|(c, _)| ChunkRepr::parse(&c));
            }
            // Emitting into a buffer too short is an error.
            assert!(r.emit(&mut buf[..n - 1]).is_err());
        }
        for cut in 0..COMMON_HEADER_LEN {
            assert!(SctpPacket::new_checked(&[0u8; 12][..cut]).is_err());
        }
    }

    #[test]
    fn init_rejects_zero_tag_and_zero_streams() {
        for (at, field) in [
            (4, "Initiate Tag"),
            (12, "Number of Outbound Streams"),
            (14, "Number of Inbound Streams"),
        ] {
            let mut b = init_bytes()[12..].to_vec();
            let w = if at == 4 { 4 } else { 2 };
            b[at..at + w].fill(0);
            let (c, _) = parse_chunk(&b).unwrap();
            match ChunkRepr::parse(&c) {
                Err(Error::BadValue { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{other:?}"),
            }
        }
    }

    /// An INIT whose value is one octet short of the fixed part: the
    /// error names the chunk and the lengths with its header counted.
    #[test]
    fn a_short_init_is_truncated_with_its_lengths() {
        let mut b = init_bytes()[12..12 + 4 + 15].to_vec();
        b[2..4].copy_from_slice(&19u16.to_be_bytes());
        b.push(0);
        let (c, _) = parse_chunk(&b).unwrap();
        assert_eq!(
            ChunkRepr::parse(&c).err(),
            Some(Error::Truncated {
                layer: Layer::Chunk(chunk_type::INIT),
                needed: 20,
                got: 19
            })
        );
    }

    #[test]
    fn init_ack_without_cookie_is_refused() {
        let mut b = init_bytes()[12..].to_vec();
        b[0] = chunk_type::INIT_ACK;
        let (c, _) = parse_chunk(&b).unwrap();
        assert!(matches!(
            ChunkRepr::parse(&c),
            Err(Error::BadValue {
                field: "State Cookie (missing)",
                ..
            })
        ));
    }

    #[test]
    fn unknown_types_act_by_upper_bits() {
        assert_eq!(UnknownAction::for_chunk(0x3f), UnknownAction::Stop);
        assert_eq!(UnknownAction::for_chunk(0x40), UnknownAction::StopAndReport);
        assert_eq!(UnknownAction::for_chunk(0x80), UnknownAction::Skip);
        assert_eq!(UnknownAction::for_chunk(0xc0), UnknownAction::SkipAndReport);
        assert_eq!(UnknownAction::for_param(0x8000), UnknownAction::Skip);
        assert_eq!(
            UnknownAction::for_param(0x4001),
            UnknownAction::StopAndReport
        );
        // A "stop" parameter ends parameter processing: the adaptation
        // indication after it is not seen.
        let mut b = init_bytes()[12..].to_vec();
        b.truncate(20);
        b.extend_from_slice(&[0x00, 0x33, 0x00, 0x04, 0xc0, 0x06, 0x00, 0x08, 0, 0, 0, 1]);
        let len = b.len() as u16;
        b[2..4].copy_from_slice(&len.to_be_bytes());
        let (c, _) = parse_chunk(&b).unwrap();
        let ChunkRepr::Init(i) = ChunkRepr::parse(&c).unwrap() else {
            panic!()
        };
        assert_eq!(i.params.adaptation, None);
        assert_eq!(i.params.unrecognized, None);
    }

    #[test]
    fn data_without_user_data_is_refused() {
        let b = [0, 3, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16];
        let (c, _) = parse_chunk(&b).unwrap();
        assert!(matches!(
            ChunkRepr::parse(&c),
            Err(Error::BadLength {
                field: "Chunk Length",
                ..
            })
        ));
    }

    /// A chunk too short for its fixed part is refused with the lengths it
    /// needs and has, counting the chunk header (RFC 9260 §3.2: Chunk
    /// Length covers it); an empty DATA with the least length that would
    /// do (§3.3.1). (cargo-mutants: `+` made `*` or `-` in `exact_len`
    /// and in `ChunkRepr::parse`'s DATA and HEARTBEAT errors.)
    #[test]
    fn short_chunks_are_refused_with_their_lengths() {
        let cases: [(&[u8], Error); 3] = [
            (
                // SHUTDOWN, length 6: two octets of its four.
                &[0x07, 0, 0, 6, 0, 0, 0, 0],
                Error::Truncated {
                    layer: Layer::Chunk(chunk_type::SHUTDOWN),
                    needed: 8,
                    got: 6,
                },
            ),
            (
                // DATA, length 16: the header alone.
                &[0, 3, 0, 16, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 16],
                Error::BadLength {
                    layer: Layer::Chunk(chunk_type::DATA),
                    field: "Chunk Length",
                    value: 16,
                    min: 17,
                },
            ),
            (
                // HEARTBEAT, length 4: no Heartbeat Info.
                &[0x04, 0, 0, 4],
                Error::Truncated {
                    layer: Layer::Chunk(chunk_type::HEARTBEAT),
                    needed: 8,
                    got: 4,
                },
            ),
        ];
        for (b, want) in cases {
            let (c, _) = parse_chunk(b).unwrap();
            assert_eq!(ChunkRepr::parse(&c), Err(want), "{b:02x?}");
        }
    }

    /// A packet of exactly the common header (no chunks) is a packet
    /// (RFC 9260 §3: zero or more chunks follow), one octet less is not;
    /// its checksum covers the header with the checksum field as zero
    /// (§6.8), and a buffer too short for a header still gets one, no
    /// panic.
    #[test]
    fn the_common_header_alone_is_a_packet_and_has_a_checksum() {
        let mut h = [0x13, 0x88, 0x00, 0x50, 1, 2, 3, 4, 0xaa, 0xbb, 0xcc, 0xdd];
        assert!(SctpPacket::new_checked(&h[..]).is_ok());
        assert_eq!(
            SctpPacket::new_checked(&h[..11]).err(),
            Some(Error::Truncated {
                layer: Layer::CommonHeader,
                needed: 12,
                got: 11
            })
        );
        let mut zeroed = h;
        zeroed[8..].fill(0);
        let c = checksum(&h);
        assert_eq!(c, crc32c::crc32c(&zeroed));
        assert_ne!(c, crc32c::crc32c(&h), "the field is taken as zero");
        h[8..].copy_from_slice(&c.to_le_bytes());
        assert_eq!(
            SctpPacket::new_checked(&h[..]).unwrap().verify_checksum(),
            Ok(())
        );
        for n in 0..COMMON_HEADER_LEN {
            assert_eq!(checksum(&h[..n]), crc32c::crc32c(&h[..n]), "{n} octets");
        }
    }

    /// The checksum is the library's CRC32c of the packet with the field
    /// zeroed (RFC 9260 §6.8), whatever the field holds and for every
    /// length from the bare header up (the header's twelve octets go
    /// through [`CRC32C_TABLE`], the rest through the library).
    #[test]
    fn checksum_is_crc32c_with_the_field_zeroed() {
        let bytes: Vec<u8> = (0..300u32).map(|i| (i * 151 + 7) as u8).collect();
        for n in [12, 13, 15, 16, 17, 40, 64, 65, 255, 300] {
            let p = &bytes[..n];
            let mut zeroed = p.to_vec();
            zeroed[8..12].fill(0);
            assert_eq!(checksum(p), crc32c::crc32c(&zeroed), "{n} octets");
        }
        // The table is CRC32c's: each single octet's CRC.
        for b in [0u8, 1, 0x80, 0xff] {
            let want = crc32c::crc32c(&[b]);
            let got = !(CRC32C_TABLE[usize::from(0xff ^ b)] ^ (!0u32 >> 8));
            assert_eq!(got, want, "{b:#x}");
        }
    }

    /// Each error names its layer, field and values.
    #[test]
    fn errors_say_what_and_where() {
        let cases = [
            (
                Error::Truncated {
                    layer: Layer::Chunk(0),
                    needed: 16,
                    got: 9,
                },
                "sctp Chunk(0): truncated, needs 16 octets, has 9",
            ),
            (
                Error::BadLength {
                    layer: Layer::Parameter(5),
                    field: "Length",
                    value: 3,
                    min: 4,
                },
                "sctp Parameter(5): Length = 3 below minimum 4",
            ),
            (
                Error::BadChecksum {
                    found: 1,
                    computed: 0xdead_beef,
                },
                "sctp common header: checksum 0x00000001, computed 0xdeadbeef",
            ),
            (
                Error::BadValue {
                    layer: Layer::CommonHeader,
                    field: "Destination Port",
                    value: 0,
                },
                "sctp CommonHeader: Destination Port = 0 not allowed",
            ),
            (
                Error::TooLong {
                    layer: Layer::Chunk(3),
                    len: 70_000,
                    max: 65_535,
                },
                "sctp Chunk(3): 70000 octets exceed maximum 65535",
            ),
        ];
        for (e, text) in cases {
            assert_eq!(e.to_string(), text);
        }
    }
}
