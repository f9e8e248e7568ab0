//! The two payload formats of RFC 5043 §5.2, carried as the user data of
//! SCTP DATA chunks: DDP Segment Chunks (PPID 16) and DDP Stream Session
//! Control messages (PPID 17). Both start with the 16-bit DDP-SSN (§5.2.1).

use core::fmt;

/// Adaptation Layer Indication value assigned to DDP (RFC 5043 §5.1, §12).
pub const ADAPTATION_DDP: u32 = 0x0000_0001;
/// PPID of a DDP Segment Chunk (RFC 5043 §5.2, §12).
pub const PPID_DDP_SEGMENT: u32 = 16;
/// PPID of a DDP Stream Session Control message (RFC 5043 §5.2, §12).
pub const PPID_SESSION_CONTROL: u32 = 17;
/// Largest Private Data (RFC 5043 §5.2.3: MUST NOT exceed 512 bytes).
pub const MAX_PRIVATE_DATA: usize = 512;
/// Smallest MULPDU an LLP may announce (RFC 5043 §9: 516 bytes, so a
/// control message with 512 bytes of Private Data fits).
pub const MIN_MULPDU: usize = 516;
/// Length of the DDP-SSN field.
pub const SSN_LEN: usize = 2;
/// Length of a control message header (DDP-SSN, Function Code).
pub const CONTROL_HEADER_LEN: usize = 4;

/// DDP Stream Session Control function codes (RFC 5043 §5.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionCode {
    /// DDP Stream Session Initiate (0x001).
    Initiate,
    /// DDP Stream Session Accept (0x002).
    Accept,
    /// DDP Stream Session Reject (0x003).
    Reject,
    /// DDP Stream Session Terminate (0x004).
    Terminate,
}

impl FunctionCode {
    /// The code on the wire.
    pub fn code(self) -> u16 {
        match self {
            FunctionCode::Initiate => 1,
            FunctionCode::Accept => 2,
            FunctionCode::Reject => 3,
            FunctionCode::Terminate => 4,
        }
    }
    /// From the wire.
    pub fn from_code(c: u16) -> Option<Self> {
        Some(match c {
            1 => FunctionCode::Initiate,
            2 => FunctionCode::Accept,
            3 => FunctionCode::Reject,
            4 => FunctionCode::Terminate,
            _ => return None,
        })
    }
}

/// Why an RFC 5043 payload could not be parsed or emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than its fixed header.
    Truncated {
        /// Which format: "DDP Segment Chunk" or "DDP Stream Session Control".
        what: &'static str,
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
    /// Function Code not one of §5.2.3's four.
    UnknownFunctionCode(u16),
    /// Private Data above 512 octets (§5.2.3).
    PrivateDataTooLong {
        /// Octets of Private Data.
        len: usize,
    },
    /// A Terminate with Private Data (§5.2.3: MUST NOT be included).
    TerminateWithPrivateData {
        /// Octets of Private Data.
        len: usize,
    },
    /// Output buffer too short.
    BufferTooShort {
        /// Octets needed.
        needed: usize,
        /// Octets present.
        got: usize,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { what, needed, got } => {
                write!(f, "rfc5043 {what}: needs {needed} octets, has {got}")
            }
            Error::UnknownFunctionCode(c) => {
                write!(f, "rfc5043 session control: unknown Function Code {c:#x}")
            }
            Error::PrivateDataTooLong { len } => {
                write!(
                    f,
                    "rfc5043 session control: Private Data {len} octets exceeds {MAX_PRIVATE_DATA}"
                )
            }
            Error::TerminateWithPrivateData { len } => {
                write!(
                    f,
                    "rfc5043 session control: Terminate carries {len} octets of Private Data"
                )
            }
            Error::BufferTooShort { needed, got } => {
                write!(f, "rfc5043 emit: needs {needed} octets, has {got}")
            }
        }
    }
}

impl std::error::Error for Error {}

/// A DDP Segment Chunk payload (RFC 5043 §5.2.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentChunk<'a> {
    /// DDP-SSN (§5.2.1).
    pub ddp_ssn: u16,
    /// The DDP Segment (RFC 5041 header and ULP payload).
    pub segment: &'a [u8],
}

impl<'a> SegmentChunk<'a> {
    /// Parses the user data of a PPID 16 DATA chunk.
    pub fn parse(b: &'a [u8]) -> Result<Self, Error> {
        if b.len() < SSN_LEN {
            return Err(Error::Truncated {
                what: "DDP Segment Chunk",
                needed: SSN_LEN,
                got: b.len(),
            });
        }
        Ok(SegmentChunk {
            ddp_ssn: u16::from_be_bytes([b[0], b[1]]),
            segment: &b[SSN_LEN..],
        })
    }
    /// Octets [`SegmentChunk::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        SSN_LEN + self.segment.len()
    }
    /// Writes the payload; returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        let n = self.buffer_len();
        let Some(o) = out.get_mut(..n) else {
            return Err(Error::BufferTooShort {
                needed: n,
                got: out.len(),
            });
        };
        o[..2].copy_from_slice(&self.ddp_ssn.to_be_bytes());
        o[2..].copy_from_slice(self.segment);
        Ok(n)
    }
}

/// A DDP Stream Session Control message (RFC 5043 §5.2.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlMessage<'a> {
    /// DDP-SSN (§5.2.1).
    pub ddp_ssn: u16,
    /// Function Code.
    pub function: FunctionCode,
    /// ULP-supplied Private Data (empty for Terminate).
    pub private_data: &'a [u8],
}

impl<'a> ControlMessage<'a> {
    fn check(&self) -> Result<(), Error> {
        let len = self.private_data.len();
        // §5.2.3: "Private Data MUST NOT be included in the DDP Stream
        // Session Terminate message."
        if self.function == FunctionCode::Terminate && len != 0 {
            return Err(Error::TerminateWithPrivateData { len });
        }
        // §5.2.3: "Private Data length MUST NOT exceed 512 bytes in any message."
        if len > MAX_PRIVATE_DATA {
            return Err(Error::PrivateDataTooLong { len });
        }
        Ok(())
    }

    /// Parses the user data of a PPID 17 DATA chunk, enforcing §5.2.3.
    pub fn parse(b: &'a [u8]) -> Result<Self, Error> {
        if b.len() < CONTROL_HEADER_LEN {
            return Err(Error::Truncated {
                what: "DDP Stream Session Control",
                needed: CONTROL_HEADER_LEN,
                got: b.len(),
            });
        }
        let code = u16::from_be_bytes([b[2], b[3]]);
        let function = FunctionCode::from_code(code).ok_or(Error::UnknownFunctionCode(code))?;
        let m = ControlMessage {
            ddp_ssn: u16::from_be_bytes([b[0], b[1]]),
            function,
            private_data: &b[CONTROL_HEADER_LEN..],
        };
        m.check()?;
        Ok(m)
    }
    /// Octets [`ControlMessage::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        CONTROL_HEADER_LEN + self.private_data.len()
    }
    /// Writes the message, refusing what §5.2.3 forbids; returns its length.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, Error> {
        self.check()?;
        let n = self.buffer_len();
        let Some(o) = out.get_mut(..n) else {
            return Err(Error::BufferTooShort {
                needed: n,
                got: out.len(),
            });
        };
        o[0..2].copy_from_slice(&self.ddp_ssn.to_be_bytes());
        o[2..4].copy_from_slice(&self.function.code().to_be_bytes());
        o[4..].copy_from_slice(self.private_data);
        Ok(n)
    }
    /// The message as a vector (control messages are small: at most 516 octets).
    pub fn to_vec(&self) -> Result<Vec<u8>, Error> {
        let mut v = vec![0u8; self.buffer_len()];
        self.emit(&mut v)?;
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_message_literal_bytes() {
        // RFC 5043 §5.2.3 layout: DDP-SSN 0, Function Code 0x001 (Initiate),
        // Private Data "hi".
        let b = [0x00, 0x00, 0x00, 0x01, b'h', b'i'];
        let m = ControlMessage::parse(&b).unwrap();
        assert_eq!(
            m,
            ControlMessage {
                ddp_ssn: 0,
                function: FunctionCode::Initiate,
                private_data: b"hi"
            }
        );
        assert_eq!(m.to_vec().unwrap(), b);
        // Accept, Reject, Terminate codes (§5.2.3).
        for (code, f) in [
            (2u8, FunctionCode::Accept),
            (3, FunctionCode::Reject),
            (4, FunctionCode::Terminate),
        ] {
            let b = [0x12, 0x34, 0x00, code];
            let m = ControlMessage::parse(&b).unwrap();
            assert_eq!(
                (m.ddp_ssn, m.function, m.private_data.len()),
                (0x1234, f, 0)
            );
        }
        assert_eq!(
            ControlMessage::parse(&[0, 0, 0, 5]),
            Err(Error::UnknownFunctionCode(5))
        );
        assert_eq!(
            ControlMessage::parse(&[0, 0, 0, 0]),
            Err(Error::UnknownFunctionCode(0))
        );
    }

    #[test]
    fn private_data_limits_of_5_2_3() {
        let pd = [7u8; 513];
        // 512 is allowed, 513 is not, both ways.
        let ok = ControlMessage {
            ddp_ssn: 0,
            function: FunctionCode::Accept,
            private_data: &pd[..512],
        };
        let v = ok.to_vec().unwrap();
        assert_eq!(v.len(), MIN_MULPDU);
        assert_eq!(ControlMessage::parse(&v).unwrap(), ok);
        let bad = ControlMessage {
            private_data: &pd,
            ..ok
        };
        assert_eq!(bad.to_vec(), Err(Error::PrivateDataTooLong { len: 513 }));
        let mut raw = vec![0, 0, 0, 2];
        raw.extend_from_slice(&pd);
        assert_eq!(
            ControlMessage::parse(&raw),
            Err(Error::PrivateDataTooLong { len: 513 })
        );
        // Terminate: no Private Data at all.
        let t = ControlMessage {
            ddp_ssn: 3,
            function: FunctionCode::Terminate,
            private_data: b"x",
        };
        assert_eq!(t.to_vec(), Err(Error::TerminateWithPrivateData { len: 1 }));
        assert_eq!(
            ControlMessage::parse(&[0, 3, 0, 4, b'x']),
            Err(Error::TerminateWithPrivateData { len: 1 })
        );
        // Zero-length Private Data is allowed for Initiate/Accept/Reject.
        assert!(ControlMessage::parse(&[0, 0, 0, 3]).is_ok());
    }

    #[test]
    fn segment_chunk_literal_bytes_and_truncation() {
        // §5.2.2: DDP-SSN 0x0102, then the DDP Segment.
        let b = [0x01, 0x02, 0xc1, 0x01, 0xaa];
        let s = SegmentChunk::parse(&b).unwrap();
        assert_eq!((s.ddp_ssn, s.segment), (0x0102, &b[2..]));
        let mut out = [0u8; 5];
        assert_eq!(s.emit(&mut out), Ok(5));
        assert_eq!(out, b);
        assert!(s.emit(&mut out[..4]).is_err());
        for cut in 0..SSN_LEN {
            assert_eq!(
                SegmentChunk::parse(&b[..cut]),
                Err(Error::Truncated {
                    what: "DDP Segment Chunk",
                    needed: SSN_LEN,
                    got: cut
                })
            );
        }
        // The DDP-SSN alone is a chunk with an empty segment (the DDP layer
        // judges that); one octet more is the segment.
        assert_eq!(
            SegmentChunk::parse(&b[..SSN_LEN]),
            Ok(SegmentChunk {
                ddp_ssn: 0x0102,
                segment: &[]
            })
        );
        assert_eq!(SegmentChunk::parse(&b[..3]).unwrap().segment, &[0xc1]);
        for cut in 0..CONTROL_HEADER_LEN {
            assert!(ControlMessage::parse(&[0, 0, 0, 1][..cut]).is_err());
        }
    }

    /// Each error says what was wrong with the peer's octets, with its values.
    #[test]
    fn errors_display_their_values() {
        let cases = [
            (
                Error::Truncated {
                    what: "DDP Segment Chunk",
                    needed: 2,
                    got: 1,
                },
                "rfc5043 DDP Segment Chunk: needs 2 octets, has 1",
            ),
            (
                Error::UnknownFunctionCode(0x1f),
                "rfc5043 session control: unknown Function Code 0x1f",
            ),
            (
                Error::PrivateDataTooLong { len: 513 },
                "rfc5043 session control: Private Data 513 octets exceeds 512",
            ),
            (
                Error::TerminateWithPrivateData { len: 3 },
                "rfc5043 session control: Terminate carries 3 octets of Private Data",
            ),
            (
                Error::BufferTooShort { needed: 6, got: 4 },
                "rfc5043 emit: needs 6 octets, has 4",
            ),
        ];
        for (e, want) in cases {
            assert_eq!(e.to_string(), want);
        }
    }
}
