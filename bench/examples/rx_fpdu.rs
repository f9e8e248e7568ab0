//! The `datapath` bench's `qp_crc` case (EMSS 1460, CRC on) as a plain
//! program, for instruction counts: `valgrind --tool=callgrind
//! target/release/examples/rx_fpdu` runs one warm-up pass and then
//! `ROUNDS` passes of 16 × 64 KiB RDMA Writes through `Qp::receive`, and
//! prints the FPDUs fed, so that callgrind's totals divide into
//! instructions per FPDU. `--floor` runs the CRC32c + memcpy floor instead.

use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::mpa::{mulpdu, Framer};
use iwarp_proto::qp::{Qp, QpConfig};
use iwarp_proto::wire::ddp::{DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader};

const MSG: usize = 64 << 10;
const MSGS: usize = 16;
const ROUNDS: usize = 20;
const EMSS: u16 = 1460;

fn main() {
    let floor = std::env::args().any(|a| a == "--floor");
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; MSG * MSGS], Access::REMOTE_WRITE, 0)
        .expect("register");
    let mut f = Framer::new(true, false);
    let payload: Vec<u8> = (0..MSG).map(|i| i as u8).collect();
    let room = usize::from(mulpdu(EMSS, false)) - 14;
    let (mut wire, mut segs) = (Vec::new(), Vec::new());
    for m in 0..MSGS {
        let mut off = 0;
        while off < MSG {
            let n = room.min(MSG - off);
            let h = DdpHeader::Tagged(TaggedHeader {
                ddp: DdpControl::new(true, off + n == MSG),
                rdmap: RdmapControl::new(Opcode::Write),
                stag: stag.0,
                to: (m * MSG + off) as u64,
            });
            let (hb, hl) = h.to_array();
            let before = wire.len();
            f.emit(&[&hb[..hl], &payload[off..off + n]], &mut wire)
                .expect("fits");
            segs.push(wire.len() - before);
            off += n;
        }
    }
    let cfg = QpConfig {
        pd,
        ird: 1,
        ord: 1,
        mulpdu: mulpdu(EMSS, false),
        crc: true,
        markers_tx: false,
        markers_rx: false,
        sq_depth: 1,
        rq_depth: 1,
    };
    let mut dst = vec![0u8; MSG * MSGS];
    let mut fed = 0usize;
    for _ in 0..=ROUNDS {
        if floor {
            let (mut at, mut out, mut acc) = (0, 0, 0u32);
            for &len in &segs {
                let fpdu = &wire[at..at + len];
                acc ^= iwarp_proto::crc::crc32c(&fpdu[..len - 4]);
                let n = (len - 20).min(dst.len() - out);
                dst[out..out + n].copy_from_slice(&fpdu[16..16 + n]);
                out += n;
                at += len;
            }
            std::hint::black_box((acc, &dst));
        } else {
            let mut qp = Qp::new(cfg);
            let mut at = 0;
            for &len in &segs {
                qp.receive(&wire[at..at + len], &mut mem);
                at += len;
            }
            assert_eq!(qp.stats().bytes_placed, (MSG * MSGS) as u64);
        }
        fed += segs.len();
    }
    println!("{} FPDUs fed ({} per pass)", fed, segs.len());
}
