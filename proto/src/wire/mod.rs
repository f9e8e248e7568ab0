//! Wire formats of MPA (RFC 5044/6581), DDP (RFC 5041) and RDMAP (RFC 5040).
//!
//! Each header has a zero-copy view over a caller buffer (`Packet<T: AsRef<[u8]>>`
//! style, getters named after the RFC fields) and a plain `Repr` with `parse`,
//! `buffer_len` and `emit`. Code points keep unknown values: a reserved opcode or
//! Terminate layer is carried and reported, never a panic.

pub mod ddp;
pub mod fpdu;
pub mod mpa_frame;
pub mod rdmap;
pub mod terminate;

pub use ddp::{
    DdpControl, DdpHeader, DdpSegment, Opcode, RdmapControl, TaggedHeader, UntaggedHeader,
};
pub use fpdu::{Fpdu, Marker};
pub use mpa_frame::{EnhancedParams, FrameKind, MpaFlags, MpaFrame, MpaFrameRepr};
pub use rdmap::{AtomicOp, AtomicRequest, AtomicResponse, ImmediateData, ReadRequest};
pub use terminate::{TermCode, TerminateRepr};

/// Why a buffer could not be parsed as a header. Says which header, which
/// field, and the lengths involved; carries no heap data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The buffer is shorter than the header (or the length its own fields declare).
    Truncated {
        /// Header being parsed.
        what: &'static str,
        /// Octets needed.
        needed: usize,
        /// Octets present.
        have: usize,
    },
    /// A field holds a value the format forbids (the field is named).
    Malformed {
        /// Header being parsed.
        what: &'static str,
        /// Offending field.
        field: &'static str,
        /// The value found.
        value: u32,
    },
}

impl core::fmt::Display for WireError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            WireError::Truncated { what, needed, have } => {
                write!(f, "{what}: truncated, need {needed} octets, have {have}")
            }
            WireError::Malformed { what, field, value } => {
                write!(f, "{what}: field {field} has invalid value {value:#x}")
            }
        }
    }
}

impl std::error::Error for WireError {}

pub(crate) fn need(what: &'static str, buf: &[u8], needed: usize) -> Result<(), WireError> {
    if buf.len() < needed {
        Err(WireError::Truncated {
            what,
            needed,
            have: buf.len(),
        })
    } else {
        Ok(())
    }
}

/// Big-endian readers over slices whose length the caller already checked.
/// They return 0 for short input instead of panicking (defence in depth).
pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    match b.get(at..at + 8) {
        Some(s) => {
            let mut a = [0u8; 8];
            a.copy_from_slice(s);
            u64::from_be_bytes(a)
        }
        None => 0,
    }
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    if let Some(s) = b.get_mut(at..at + 4) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}

pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    if let Some(s) = b.get_mut(at..at + 8) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
