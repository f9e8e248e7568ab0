//! Receive-path cost of the protocol core, per FPDU: a stream of RDMA Write
//! FPDUs (64 KiB messages cut to the MULPDU of an EMSS of 1460 or 9000
//! octets, one FPDU per TCP segment as an MPA-aware sender sends them) fed
//! to `Qp::receive` one segment at a time, which deframes, checks CRC and
//! markers, validates, and places into registered memory. Measured in the
//! same run beside two baselines: a plain `memcpy` of the payload octets, and
//! the floor of the work that cannot be avoided — CRC32c over each FPDU's
//! octets plus a `memcpy` of its payload. `qp_crc_inplace` is `qp_crc` with
//! the region in caller memory shared with the application (`iwarp-memreg`,
//! placement by atomic word stores) instead of a `Vec` the table owns.
//! Report ratios, not absolute numbers (the machine is shared).

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use iwarp_memreg::Region;
use iwarp_proto::mem::{Access, MemoryTable};
use iwarp_proto::mpa::mulpdu;
use iwarp_proto::qp::{Qp, QpConfig};

use iwarp_bench::rx::{floor, write_stream as stream, MSG, MSGS};

fn bench(c: &mut Criterion) {
    for emss in [1460u16, 9000] {
        let mut g = c.benchmark_group(format!("rx_fpdu_emss_{emss}"));
        g.throughput(Throughput::Bytes((MSG * MSGS) as u64));
        g.measurement_time(Duration::from_secs(3))
            .warm_up_time(Duration::from_millis(500))
            .sample_size(20);

        // Baseline 1: copy the payload octets, FPDU by FPDU.
        let (wire, segs) = stream(emss, true, false, 1);
        let per = usize::from(mulpdu(emss, false)) - 14;
        let src = vec![7u8; MSG * MSGS];
        let mut dst = vec![0u8; MSG * MSGS];
        g.bench_function("memcpy_baseline", |b| {
            b.iter(|| {
                for (d, s) in dst.chunks_mut(per).zip(src.chunks(per)) {
                    d.copy_from_slice(s);
                }
                std::hint::black_box(&dst);
            })
        });
        // Baseline 2, the floor: CRC32c over every FPDU plus the payload copy.
        g.bench_function("crc32c_plus_memcpy_floor", |b| {
            b.iter(|| {
                let acc = floor(&wire, &segs, &mut dst);
                std::hint::black_box((acc, &dst));
            })
        });

        // `inplace`: the region is caller memory shared with the application
        // (`iwarp-memreg`, atomic word copies) instead of a Vec the table owns.
        for (name, crc, markers, inplace) in [
            ("qp_no_crc", false, false, false),
            ("qp_crc", true, false, false),
            ("qp_crc_inplace", true, false, true),
            ("qp_crc_markers", true, true, false),
        ] {
            let mut mem = MemoryTable::new();
            let pd = mem.alloc_pd();
            let stag = if inplace {
                mem.register(pd, Region::zeroed(MSG * MSGS), Access::REMOTE_WRITE, 0)
            } else {
                mem.register(pd, vec![0; MSG * MSGS], Access::REMOTE_WRITE, 0)
            }
            .expect("register");
            let (wire, segs) = stream(emss, crc, markers, stag.0);
            let cfg = QpConfig {
                pd,
                ird: 1,
                ord: 1,
                mulpdu: mulpdu(emss, markers),
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
                        let mut at = 0;
                        for &len in &segs {
                            qp.receive(&wire[at..at + len], &mut mem);
                            at += len;
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
}

criterion_group!(benches, bench);
criterion_main!(benches);
