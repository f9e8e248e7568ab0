//! CRC32c benchmarks: the `crc32c` crate (the design card's choice) against
//! `crc-fast` (CRC-32/ISCSI), and the stack's own `iwarp_proto::crc::Crc32c`,
//! each against a `memcpy` baseline measured in the same run.
//!
//! Run: `cargo bench -p iwarp-bench --bench crc` (about 3 minutes).
//! See `bench/README.md` for what each function measures.

use std::hint::black_box;
use std::time::Duration;

use crc_fast::{CrcAlgorithm, Digest};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use iwarp_bench::{
    copy_destination, pseudo_random_bytes, CRC_PIECES, CRC_SIZES, MPA_FPDU_LEN, MPA_FPDU_PIECES,
};
use iwarp_proto::crc::Crc32c;

/// Candidate streaming state with a plain `u32` field, driven through
/// crc-fast's public API: rebuild a `Digest` from the saved state on every
/// `update`. (The alternative, holding a `Digest`, is measured directly.)
#[derive(Debug, Clone, Copy)]
struct FastU32 {
    /// Raw (not yet complemented) CRC-32/ISCSI register.
    state: u32,
}

impl FastU32 {
    fn new() -> Self {
        FastU32 { state: !0 }
    }

    #[inline]
    fn update(&mut self, data: &[u8]) {
        let mut d = Digest::new_with_init_state(CrcAlgorithm::Crc32Iscsi, self.state as u64);
        d.update(data);
        self.state = d.get_state() as u32;
    }

    fn value(&self) -> u32 {
        !self.state
    }
}

fn config() -> Criterion {
    Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500))
        .sample_size(30)
}

/// Refuse to time implementations that disagree.
fn check_agreement() {
    for len in [0, 1, 3, 64, 1448, 65536] {
        let data = pseudo_random_bytes(len, 99);
        let want = crc32c::crc32c(&data);
        assert_eq!(
            crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, &data) as u32,
            want
        );
        let mut f = FastU32::new();
        for c in data.chunks(5) {
            f.update(c);
        }
        assert_eq!(f.value(), want);
        let mut p = Crc32c::new();
        for c in data.chunks(7) {
            p.update(c);
        }
        assert_eq!(p.value(), want);
    }
    eprintln!(
        "size_of: crc_fast::Digest = {} B, iwarp_proto::crc::Crc32c = {} B",
        std::mem::size_of::<Digest>(),
        std::mem::size_of::<Crc32c>()
    );
}

/// One buffer, hashed whole (one-shot) or as two halves (streaming).
fn whole_buffers(c: &mut Criterion) {
    check_agreement();
    let mut g = c.benchmark_group("crc");
    for size in CRC_SIZES {
        let src = pseudo_random_bytes(size, size as u64);
        let (mut dst_buf, off) = copy_destination(&src);
        let dst = &mut dst_buf[off..off + size];
        let (a, b) = src.split_at(size / 2);
        g.throughput(Throughput::Bytes(size as u64));

        g.bench_with_input(BenchmarkId::new("memcpy", size), &src, |bch, src| {
            bch.iter(|| {
                dst.copy_from_slice(black_box(src));
                black_box(&mut *dst);
            })
        });
        g.bench_with_input(
            BenchmarkId::new("crc32c_one_shot", size),
            &src,
            |bch, src| bch.iter(|| crc32c::crc32c(black_box(src))),
        );
        g.bench_with_input(
            BenchmarkId::new("crc32c_stream2", size),
            &(a, b),
            |bch, &(a, b)| {
                bch.iter(|| crc32c::crc32c_append(crc32c::crc32c(black_box(a)), black_box(b)))
            },
        );
        g.bench_with_input(
            BenchmarkId::new("crc_fast_one_shot", size),
            &src,
            |bch, src| bch.iter(|| crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, black_box(src))),
        );
        g.bench_with_input(
            BenchmarkId::new("crc_fast_stream2", size),
            &(a, b),
            |bch, &(a, b)| {
                bch.iter(|| {
                    let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
                    d.update(black_box(a));
                    d.update(black_box(b));
                    d.finalize()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("proto_stream2", size),
            &(a, b),
            |bch, &(a, b)| {
                bch.iter(|| {
                    let mut c = Crc32c::new();
                    c.update(black_box(a));
                    c.update(black_box(b));
                    c.value()
                })
            },
        );
    }
    g.finish();
}

/// One 1448-octet FPDU fed to a fresh state in equal pieces of `piece` octets:
/// the per-`update` overhead of each streaming API.
fn pieces(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc_pieces_of_1448");
    let src = pseudo_random_bytes(MPA_FPDU_LEN, 1);
    let (mut dst_buf, off) = copy_destination(&src);
    let dst = &mut dst_buf[off..off + MPA_FPDU_LEN];
    g.throughput(Throughput::Bytes(MPA_FPDU_LEN as u64));
    for piece in CRC_PIECES {
        g.bench_with_input(BenchmarkId::new("memcpy", piece), &piece, |bch, &p| {
            bch.iter(|| {
                for (d, s) in dst.chunks_mut(p).zip(black_box(&src).chunks(p)) {
                    d.copy_from_slice(s);
                }
                black_box(&mut *dst);
            })
        });
        g.bench_with_input(
            BenchmarkId::new("crc32c_append", piece),
            &piece,
            |bch, &p| bch.iter(|| black_box(&src).chunks(p).fold(0u32, crc32c::crc32c_append)),
        );
        g.bench_with_input(
            BenchmarkId::new("crc_fast_digest", piece),
            &piece,
            |bch, &p| {
                bch.iter(|| {
                    let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
                    for s in black_box(&src).chunks(p) {
                        d.update(s);
                    }
                    d.finalize()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("crc_fast_u32_reinit", piece),
            &piece,
            |bch, &p| {
                bch.iter(|| {
                    let mut f = FastU32::new();
                    for s in black_box(&src).chunks(p) {
                        f.update(s);
                    }
                    f.value()
                })
            },
        );
        g.bench_with_input(
            BenchmarkId::new("proto_crc32c", piece),
            &piece,
            |bch, &p| {
                bch.iter(|| {
                    let mut c = Crc32c::new();
                    for s in black_box(&src).chunks(p) {
                        c.update(s);
                    }
                    c.value()
                })
            },
        );
    }
    g.finish();
}

/// One 1448-octet FPDU fed the way the MPA deframer feeds it with markers
/// on: 2 (length) + 14 (DDP header) + 700 + 4 (marker) + 726 + 2 (pad).
fn mpa_fpdu(c: &mut Criterion) {
    let src = pseudo_random_bytes(MPA_FPDU_LEN, 2);
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut rest = &src[..];
    for n in MPA_FPDU_PIECES {
        let (p, r) = rest.split_at(n);
        parts.push(p);
        rest = r;
    }
    let (mut dst_buf, off) = copy_destination(&src);
    let dst = &mut dst_buf[off..off + MPA_FPDU_LEN];
    let mut g = c.benchmark_group("crc_mpa_fpdu_1448");
    g.throughput(Throughput::Bytes(MPA_FPDU_LEN as u64));
    g.bench_function("memcpy", |bch| {
        bch.iter(|| {
            let mut at = 0;
            for p in black_box(&parts) {
                dst[at..at + p.len()].copy_from_slice(p);
                at += p.len();
            }
            black_box(&mut *dst);
        })
    });
    g.bench_function("crc32c_append", |bch| {
        bch.iter(|| {
            black_box(&parts)
                .iter()
                .fold(0u32, |crc, p| crc32c::crc32c_append(crc, p))
        })
    });
    g.bench_function("crc_fast_digest", |bch| {
        bch.iter(|| {
            let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
            for p in black_box(&parts) {
                d.update(p);
            }
            d.finalize()
        })
    });
    g.bench_function("crc_fast_u32_reinit", |bch| {
        bch.iter(|| {
            let mut f = FastU32::new();
            for p in black_box(&parts) {
                f.update(p);
            }
            f.value()
        })
    });
    g.bench_function("proto_crc32c", |bch| {
        bch.iter(|| {
            let mut c = Crc32c::new();
            for p in black_box(&parts) {
                c.update(p);
            }
            c.value()
        })
    });
    g.finish();
}

/// One FPDU's octets before its CRC field (1444 at MTU 1500, 8944 at
/// 9000), summed as the transmit path once did and the receive path still
/// does, in one call on the octets where a frame holds them (here 2
/// octets past a 64-octet boundary, as behind a 66-octet Ethernet, IPv4
/// and TCP header with timestamps), and as the transmit path does now:
/// framed in a 64-aligned buffer behind zeros to whole 384-octet blocks
/// (`iwarp_crc::crc32c_after_zeros`), the framing copy included and
/// timed alone beside it.
fn zero_lead(c: &mut Criterion) {
    let mut g = c.benchmark_group("crc_zero_lead");
    for n in [1444usize, 8944] {
        let data = pseudo_random_bytes(n, 5);
        let mut frame = vec![0u8; n + 256];
        let at = frame.as_ptr().align_offset(64) + 2;
        frame[at..at + n].copy_from_slice(&data);
        let mut bounce = vec![0u8; n + 512];
        let start = bounce.as_ptr().align_offset(iwarp_crc::ZERO_LEAD_ALIGN);
        let lead = iwarp_crc::zero_lead(n);
        let want = iwarp_crc::crc32c(&data);
        {
            let buf = &mut bounce[start..start + lead + n];
            buf[lead..].copy_from_slice(&data);
            assert_eq!(iwarp_crc::crc32c_after_zeros(buf, lead), want);
        }
        g.throughput(Throughput::Bytes(n as u64));
        g.bench_with_input(BenchmarkId::new("in_the_frame", n), &n, |bch, _| {
            bch.iter(|| iwarp_crc::crc32c(black_box(&frame[at..at + n])))
        });
        g.bench_with_input(BenchmarkId::new("framed_behind_zeros", n), &n, |bch, _| {
            bch.iter(|| {
                let buf = &mut bounce[start..start + lead + n];
                let (zeros, body) = buf.split_at_mut(lead);
                zeros.fill(0);
                body.copy_from_slice(black_box(&frame[at..at + n]));
                iwarp_crc::crc32c_after_zeros(buf, lead)
            })
        });
        g.bench_with_input(
            BenchmarkId::new("the_framing_copy_alone", n),
            &n,
            |bch, _| {
                bch.iter(|| {
                    let buf = &mut bounce[start..start + lead + n];
                    let (zeros, body) = buf.split_at_mut(lead);
                    zeros.fill(0);
                    body.copy_from_slice(black_box(&frame[at..at + n]));
                    black_box(&mut *buf);
                })
            },
        );
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = config();
    targets = whole_buffers, pieces, mpa_fpdu, zero_lead
}
criterion_main!(benches);
