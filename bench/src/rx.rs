//! The per-FPDU receive benchmark's input and floor, shared by the
//! `datapath` bench and the `rx_fpdu` callgrind harness.

use iwarp_proto::mpa::{mulpdu, Framer};
use iwarp_proto::wire::ddp::{DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader};

/// Octets of each RDMA Write.
pub const MSG: usize = 64 << 10;
/// RDMA Writes in the stream.
pub const MSGS: usize = 16;

/// The wire bytes of `MSGS` RDMA Writes of `MSG` octets into STag `stag`,
/// one FPDU per EMSS-sized segment (as an MPA-aware sender cuts them); also
/// each segment's length.
pub fn write_stream(emss: u16, crc: bool, markers: bool, stag: u32) -> (Vec<u8>, Vec<usize>) {
    let mut f = Framer::new(crc, markers);
    let mut out = Vec::new();
    let payload: Vec<u8> = (0..MSG).map(|i| i as u8).collect();
    let room = usize::from(mulpdu(emss, markers)) - 14;
    let mut segs = Vec::new();
    for m in 0..MSGS {
        let mut off = 0;
        while off < MSG {
            let n = room.min(MSG - off);
            let h = DdpHeader::Tagged(TaggedHeader {
                ddp: DdpControl::new(true, off + n == MSG),
                rdmap: RdmapControl::new(Opcode::Write),
                stag,
                to: (m * MSG + off) as u64,
            });
            let (hb, hl) = h.to_array();
            let before = out.len();
            f.emit(&[&hb[..hl], &payload[off..off + n]], &mut out)
                .expect("fits");
            segs.push(out.len() - before);
            off += n;
        }
    }
    (out, segs)
}

/// The floor of receiving that stream (CRC on, no markers): CRC32c over each
/// FPDU and a copy of its payload into `dst`. Returns the CRCs folded.
pub fn floor(wire: &[u8], segs: &[usize], dst: &mut [u8]) -> u32 {
    let (mut at, mut out, mut acc) = (0, 0, 0u32);
    for &len in segs {
        let fpdu = &wire[at..at + len];
        acc ^= iwarp_proto::crc::crc32c(&fpdu[..len - 4]);
        // Payload after length (2) and tagged header (14), before PAD (at
        // most 3, copied along) and CRC (4).
        let n = (len - 20).min(dst.len() - out);
        dst[out..out + n].copy_from_slice(&fpdu[16..16 + n]);
        out += n;
        at += len;
    }
    acc
}
