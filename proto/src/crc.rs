//! CRC32c (Castagnoli) as MPA uses it (RFC 5044 §6.1, wire-facts.md "FPDU").
//!
//! The value is the standard CRC32c (initial all-ones, reflected, final
//! complement). On the wire MPA writes it least-significant octet first, the
//! same byte order iSCSI uses: [`Crc32c::to_wire`] / [`Crc32c::from_wire`].
//! The octets are summed by [`iwarp_crc`], which picks the faster of two
//! implementations for this CPU once per process.

/// Streaming CRC32c state. Feed bytes with [`update`](Self::update) in any
/// number of pieces; [`value`](Self::value) gives the CRC of everything fed so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Crc32c {
    /// CRC of the bytes fed so far (already complemented, as `crc32c_append` keeps it).
    crc: u32,
}

impl Default for Crc32c {
    fn default() -> Self {
        Self::new()
    }
}

impl Crc32c {
    /// A fresh state (the CRC of zero bytes).
    pub const fn new() -> Self {
        Crc32c { crc: 0 }
    }

    /// Feed more bytes.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.crc = iwarp_crc::append(self.crc, data);
    }

    /// The CRC32c of all bytes fed so far.
    #[inline]
    pub fn value(&self) -> u32 {
        self.crc
    }

    /// The four octets MPA puts on the wire for `crc` (least significant first).
    #[inline]
    pub fn to_wire(crc: u32) -> [u8; 4] {
        crc.to_le_bytes()
    }

    /// The CRC value carried by four wire octets.
    #[inline]
    pub fn from_wire(octets: [u8; 4]) -> u32 {
        u32::from_le_bytes(octets)
    }
}

/// CRC32c of one contiguous buffer.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    let mut c = Crc32c::new();
    c.update(data);
    c.value()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 3720 B.4 vectors, as listed in wire-facts.md, with their wire octets.
    #[test]
    fn rfc3720_vectors_and_wire_order() {
        let inc: Vec<u8> = (0u8..32).collect();
        let dec: Vec<u8> = (0u8..32).rev().collect();
        let cases: [(&[u8], u32, [u8; 4]); 5] = [
            (&[0u8; 32], 0x8A91_36AA, [0xaa, 0x36, 0x91, 0x8a]),
            (&[0xffu8; 32], 0x62A8_AB43, [0x43, 0xab, 0xa8, 0x62]),
            (&inc, 0x46DD_794E, [0x4e, 0x79, 0xdd, 0x46]),
            (&dec, 0x113F_DB5C, [0x5c, 0xdb, 0x3f, 0x11]),
            (b"123456789", 0xE306_9283, [0x83, 0x92, 0x06, 0xe3]),
        ];
        for (input, value, wire) in cases {
            assert_eq!(crc32c(input), value);
            assert_eq!(Crc32c::to_wire(value), wire);
            assert_eq!(Crc32c::from_wire(wire), value);
        }
    }

    /// The siw capture example from shared/interop/README.md: wire `67 71 41 4a` is 0x4a417167.
    #[test]
    fn siw_capture_byte_order() {
        assert_eq!(Crc32c::from_wire([0x67, 0x71, 0x41, 0x4a]), 0x4a41_7167);
    }

    #[test]
    fn streaming_equals_one_shot_at_every_split() {
        let data: Vec<u8> = (0..300u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = crc32c(&data);
        for cut in 0..=data.len() {
            let mut c = Crc32c::new();
            c.update(&data[..cut]);
            c.update(&data[cut..]);
            assert_eq!(c.value(), whole, "cut at {cut}");
        }
    }
}
