//! The `datapath` bench's `qp_crc` case (EMSS 1460, CRC on) as a plain
//! program, for instruction counts: `valgrind --tool=callgrind
//! target/release/examples/rx_fpdu` runs one warm-up pass and then
//! `ROUNDS` passes of 16 × 64 KiB RDMA Writes through `Qp::receive`, and
//! prints the FPDUs fed, so that callgrind's totals divide into
//! instructions per FPDU. `--floor` runs the CRC32c + memcpy floor instead.

use iwarp_bench::rx::{floor, write_stream, MSG, MSGS};
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::mpa::mulpdu;
use iwarp_proto::qp::{Qp, QpConfig};

const ROUNDS: usize = 20;
const EMSS: u16 = 1460;

fn main() {
    let floor_only = std::env::args().any(|a| a == "--floor");
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(pd, vec![0; MSG * MSGS], Access::REMOTE_WRITE, 0)
        .expect("register");
    let (wire, segs) = write_stream(EMSS, true, false, stag.0);
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
        if floor_only {
            let acc = floor(&wire, &segs, &mut dst);
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
