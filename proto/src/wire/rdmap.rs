//! RDMA Read Request header (RFC 5040 §4.4): the 28 octets after the untagged
//! DDP header of a Read Request.

use super::{be32, be64, need, put32, put64, WireError};

/// Read Request body length.
pub const READ_REQUEST_LEN: usize = 28;

mod field {
    pub const SINK_STAG: usize = 0;
    pub const SINK_TO: usize = 4;
    pub const SIZE: usize = 12;
    pub const SRC_STAG: usize = 16;
    pub const SRC_TO: usize = 20;
}

/// RDMA Read Request header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReadRequest {
    /// Data Sink STag.
    pub sink_stag: u32,
    /// Data Sink Tagged Offset.
    pub sink_to: u64,
    /// RDMA Read Message Size.
    pub size: u32,
    /// Data Source STag.
    pub src_stag: u32,
    /// Data Source Tagged Offset.
    pub src_to: u64,
}

impl ReadRequest {
    /// Parse the 28-octet body.
    pub fn parse(buf: &[u8]) -> Result<Self, WireError> {
        need("RDMA Read Request header", buf, READ_REQUEST_LEN)?;
        Ok(ReadRequest {
            sink_stag: be32(buf, field::SINK_STAG),
            sink_to: be64(buf, field::SINK_TO),
            size: be32(buf, field::SIZE),
            src_stag: be32(buf, field::SRC_STAG),
            src_to: be64(buf, field::SRC_TO),
        })
    }
    /// Octets [`emit`](Self::emit) writes.
    pub const fn buffer_len(&self) -> usize {
        READ_REQUEST_LEN
    }
    /// Write the 28-octet body.
    pub fn emit(&self, buf: &mut [u8]) -> Result<usize, WireError> {
        need("RDMA Read Request header (emit)", buf, READ_REQUEST_LEN)?;
        put32(buf, field::SINK_STAG, self.sink_stag);
        put64(buf, field::SINK_TO, self.sink_to);
        put32(buf, field::SIZE, self.size);
        put32(buf, field::SRC_STAG, self.src_stag);
        put64(buf, field::SRC_TO, self.src_to);
        Ok(READ_REQUEST_LEN)
    }
    /// As a fixed array.
    pub fn to_bytes(&self) -> [u8; READ_REQUEST_LEN] {
        let mut a = [0u8; READ_REQUEST_LEN];
        let _ = self.emit(&mut a);
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_bytes() {
        let b: [u8; 28] = [
            0x00, 0x00, 0x12, 0x00, // sink stag
            0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x10, 0x00, // sink TO 4096
            0x00, 0x01, 0x00, 0x00, // size 65536
            0x00, 0x00, 0x34, 0x07, // src stag
            0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xf0, // src TO
        ];
        let r = ReadRequest::parse(&b).unwrap();
        assert_eq!(
            r,
            ReadRequest {
                sink_stag: 0x1200,
                sink_to: 4096,
                size: 65536,
                src_stag: 0x3407,
                src_to: 0xffff_ffff_ffff_fff0
            }
        );
        assert_eq!(r.to_bytes(), b);
        for n in 0..28 {
            assert!(ReadRequest::parse(&b[..n]).is_err());
        }
    }
}
