//! MPA FPDU and marker formats (RFC 5044 §4; wire-facts.md "FPDU", "Markers").
//!
//! ```text
//! FPDU:   ULPDU_LENGTH(2) | ULPDU | PAD(0-3) | CRC(4)     (markers removed)
//! marker: reserved(2) | FPDUPTR(2)
//! ```
//! The CRC covers ULPDU_LENGTH, ULPDU, PAD and any markers inside the FPDU; it
//! is written least-significant octet first. The streaming, marker-aware
//! receiver lives in [`crate::mpa`]; this view is for a marker-free FPDU held
//! contiguously (tests, fuzzing, tools).

use super::{be16, need, put16, WireError};
use crate::crc::{crc32c, Crc32c};

/// ULPDU_LENGTH field.
pub const LEN_FIELD: usize = 2;
/// CRC field.
pub const CRC_LEN: usize = 4;
/// Marker length.
pub const MARKER_LEN: usize = 4;
/// Markers sit every 512 octets of the stream (RFC 5044 §4.3).
pub const MARKER_INTERVAL: u64 = 512;
/// Smallest FPDU (a zero-length ULPDU).
pub const MIN_FPDU: usize = 8;

/// PAD length for a ULPDU of `ulpdu_len` octets: makes `2 + ULPDU_LENGTH` a multiple of 4.
pub const fn pad_len(ulpdu_len: usize) -> usize {
    (4 - ((LEN_FIELD + ulpdu_len) % 4)) % 4
}

/// Length of a marker-free FPDU carrying `ulpdu_len` octets.
pub const fn fpdu_len(ulpdu_len: usize) -> usize {
    LEN_FIELD + ulpdu_len + pad_len(ulpdu_len) + CRC_LEN
}

/// Zero-copy view of one marker-free FPDU.
#[derive(Debug, Clone)]
pub struct Fpdu<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Fpdu<T> {
    /// Wrap without checks.
    pub fn new_unchecked(buffer: T) -> Self {
        Fpdu { buffer }
    }
    /// Wrap after checking the buffer holds the whole FPDU its length field announces.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let f = Self::new_unchecked(buffer);
        need("MPA FPDU", f.buffer.as_ref(), LEN_FIELD)?;
        need("MPA FPDU", f.buffer.as_ref(), f.total_len())?;
        Ok(f)
    }
    /// ULPDU_LENGTH.
    pub fn ulpdu_length(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }
    /// Octets this FPDU occupies.
    pub fn total_len(&self) -> usize {
        fpdu_len(self.ulpdu_length() as usize)
    }
    /// The ULPDU (the DDP segment).
    pub fn ulpdu(&self) -> &[u8] {
        let n = self.ulpdu_length() as usize;
        self.buffer
            .as_ref()
            .get(LEN_FIELD..LEN_FIELD + n)
            .unwrap_or(&[])
    }
    /// The CRC field value.
    pub fn crc(&self) -> u32 {
        let at = self.total_len() - CRC_LEN;
        match self.buffer.as_ref().get(at..at + 4) {
            Some(s) => Crc32c::from_wire([s[0], s[1], s[2], s[3]]),
            None => 0,
        }
    }
    /// CRC computed over length, ULPDU and PAD.
    pub fn computed_crc(&self) -> u32 {
        let end = self.total_len() - CRC_LEN;
        crc32c(self.buffer.as_ref().get(..end).unwrap_or(&[]))
    }
    /// Whether the CRC field matches.
    pub fn crc_ok(&self) -> bool {
        self.crc() == self.computed_crc()
    }
}

/// Build a marker-free FPDU around `ulpdu` into `out`; the CRC field is zero
/// when `crc` is false (wire-facts.md: "a peer that did not negotiate C sends zero").
pub fn emit_fpdu(ulpdu: &[u8], crc: bool, out: &mut Vec<u8>) -> Result<usize, WireError> {
    if ulpdu.len() > u16::MAX as usize {
        return Err(WireError::Malformed {
            what: "MPA FPDU",
            field: "ULPDU_LENGTH",
            value: ulpdu.len() as u32,
        });
    }
    let start = out.len();
    let mut len = [0u8; 2];
    put16(&mut len, 0, ulpdu.len() as u16);
    out.extend_from_slice(&len);
    out.extend_from_slice(ulpdu);
    out.extend(core::iter::repeat_n(0u8, pad_len(ulpdu.len())));
    let c = if crc { crc32c(&out[start..]) } else { 0 };
    out.extend_from_slice(&Crc32c::to_wire(c));
    Ok(out.len() - start)
}

/// An MPA marker.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Marker {
    /// The 16 reserved bits (zero on transmit).
    pub reserved: u16,
    /// Octets from the start of the FPDU's ULPDU_LENGTH field to the marker
    /// (0 for a marker that sits right before an FPDU's length field).
    pub fpduptr: u16,
}

impl Marker {
    /// Parse four octets.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("MPA marker", buf, MARKER_LEN)?;
        Ok(Marker {
            reserved: be16(buf, 0),
            fpduptr: be16(buf, 2),
        })
    }
    /// The four octets.
    pub fn to_bytes(self) -> [u8; 4] {
        let mut b = [0u8; 4];
        put16(&mut b, 0, self.reserved);
        put16(&mut b, 2, self.fpduptr);
        b
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pad_and_sizes_match_wire_facts() {
        // wire-facts.md worked sizes: 0-octet Write 20, 1-octet Write 24, 8-octet Send 32, Read Request 52.
        assert_eq!(fpdu_len(14), 20);
        assert_eq!(fpdu_len(15), 24);
        assert_eq!(fpdu_len(18 + 8), 32);
        assert_eq!(fpdu_len(18 + 28), 52);
        assert_eq!(fpdu_len(0), MIN_FPDU);
        assert_eq!(fpdu_len(1442), 1448); // siw: FPDUs of exactly 1448 at MSS 1448
    }

    #[test]
    fn literal_rtr_fpdu_without_crc() {
        // siw p2p RTR: 000e c140 00000001 0000000000000000 + CRC field (zero without C)
        let ulpdu = [0xc1, 0x40, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut out = Vec::new();
        emit_fpdu(&ulpdu, false, &mut out).unwrap();
        assert_eq!(out.len(), 20);
        assert_eq!(&out[..2], &[0x00, 0x0e]);
        assert_eq!(&out[16..], &[0, 0, 0, 0]);
        let f = Fpdu::new_checked(&out[..]).unwrap();
        assert_eq!(f.ulpdu(), &ulpdu);
        assert_eq!(f.crc(), 0);
    }

    #[test]
    fn crc_roundtrip_and_corruption() {
        let mut out = Vec::new();
        emit_fpdu(b"hello, iwarp", true, &mut out).unwrap();
        assert!(Fpdu::new_checked(&out[..]).unwrap().crc_ok());
        for i in 0..out.len() {
            let mut bad = out.clone();
            bad[i] ^= 0x01;
            if let Ok(f) = Fpdu::new_checked(&bad[..]) {
                if f.total_len() == out.len() {
                    assert!(!f.crc_ok(), "flip at {i} not detected");
                }
            }
        }
        for n in 0..out.len() {
            assert!(Fpdu::new_checked(&out[..n]).is_err());
        }
    }

    #[test]
    fn marker_bytes() {
        let m = Marker {
            reserved: 0,
            fpduptr: 0x01fc,
        };
        assert_eq!(m.to_bytes(), [0, 0, 0x01, 0xfc]);
        assert_eq!(Marker::parse(&[0, 0, 0x01, 0xfc]).unwrap(), m);
        assert!(Marker::parse(&[0, 0, 1]).is_err());
    }
}
