//! Receive-path throughput of the protocol core: a stream of RDMA Write FPDUs
//! (64 KiB messages at MSS 1448) fed to `Qp::receive`, which deframes, checks
//! CRC and markers, validates, and places into registered memory. The baseline
//! measured in the same run is a plain `memcpy` of the same payload octets;
//! report `qp / memcpy` ratios, not absolute numbers (the machine is shared).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::mpa::{mulpdu, Framer};
use iwarp_proto::qp::{Qp, QpConfig};
use iwarp_proto::wire::ddp::{DdpControl, DdpHeader, Opcode, RdmapControl, TaggedHeader};

const MSG: usize = 64 << 10;
const MSGS: usize = 16;
const EMSS: u16 = 1448;

/// The wire bytes of `MSGS` RDMA Writes of `MSG` octets into STag `stag`.
fn stream(crc: bool, markers: bool, stag: u32) -> Vec<u8> {
    let mut f = Framer::new(crc, markers);
    let mut out = Vec::new();
    let payload: Vec<u8> = (0..MSG).map(|i| i as u8).collect();
    let room = usize::from(mulpdu(EMSS, markers)) - 14;
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
            f.emit(&[&hb[..hl], &payload[off..off + n]], &mut out)
                .expect("fits");
            off += n;
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("rx_place_64KiB_writes");
    g.throughput(Throughput::Bytes((MSG * MSGS) as u64));
    g.measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(20);

    // Baseline: copy the same payload octets, segment by segment (1428 at a time).
    let src = vec![7u8; MSG * MSGS];
    let mut dst = vec![0u8; MSG * MSGS];
    g.bench_function("memcpy_baseline", |b| {
        b.iter(|| {
            for (d, s) in dst.chunks_mut(1428).zip(src.chunks(1428)) {
                d.copy_from_slice(s);
            }
            std::hint::black_box(&dst);
        })
    });

    for (name, crc, markers) in [
        ("qp_no_crc", false, false),
        ("qp_crc", true, false),
        ("qp_crc_markers", true, true),
    ] {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        let stag = mem
            .register(pd, vec![0; MSG * MSGS], Access::REMOTE_WRITE, 0)
            .expect("register");
        let wire = stream(crc, markers, stag.0);
        let cfg = QpConfig {
            pd,
            ird: 1,
            ord: 1,
            mulpdu: mulpdu(EMSS, markers),
            crc,
            markers_tx: false,
            markers_rx: markers,
            sq_depth: 1,
            rq_depth: 1,
        };
        g.bench_function(name, |b| {
            b.iter_batched(
                || Qp::new(cfg),
                |mut qp| {
                    for seg in wire.chunks(usize::from(EMSS)) {
                        qp.receive(seg, &mut mem);
                    }
                    assert_eq!(qp.stats().bytes_placed, (MSG * MSGS) as u64);
                    qp
                },
                BatchSize::SmallInput,
            )
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
