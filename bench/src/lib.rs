//! Shared inputs for the iWARP benchmarks (see `bench/README.md`).
//!
//! Every benchmark in `benches/` measures a baseline (e.g. `memcpy`) in the
//! same run, so results can be compared as ratios on a shared, noisy machine.
//! The tests here check that the implementations being compared compute the
//! same thing before their speed is compared.
#![forbid(unsafe_code)]

pub mod floor;
pub mod netns_cli;
pub mod perftest;
pub mod rx;

/// CPU seconds this process has used, user and system, all threads
/// (`/proc/self/stat` fields 14 and 15, in USER_HZ = 100 ticks; 0 where
/// unreadable). Time on CPU, unlike wall time, does not count the time a
/// busy machine keeps us off it.
pub fn cpu_time() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0.0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0.0);
    ticks / 100.0
}

/// Buffer sizes (octets) of the CRC benchmarks: a tiny FPDU, a small one, one
/// MPA FPDU at MSS 1448, a jumbo frame, and a 64 KiB (max ULPDU-sized) buffer.
pub const CRC_SIZES: [usize; 5] = [64, 512, 1448, 9000, 65536];

/// Piece sizes for the streaming benchmarks: how big each `update` call is
/// when one 1448-octet FPDU is fed in pieces (MPA headers and markers are
/// 2..18 and 4 octets, payload pieces run up to a whole segment).
pub const CRC_PIECES: [usize; 5] = [4, 16, 64, 256, 1448];

/// The octets of one 1448-octet FPDU as the MPA deframer feeds them to the
/// CRC with markers enabled: length field, DDP tagged header, payload up to
/// a marker, the 4-octet marker, the rest of the payload, then pad.
/// The pieces add up to [`MPA_FPDU_LEN`].
pub const MPA_FPDU_PIECES: [usize; 6] = [2, 14, 700, 4, 726, 2];

/// Total length of [`MPA_FPDU_PIECES`].
pub const MPA_FPDU_LEN: usize = 1448;

/// Deterministic pseudo-random octets (xorshift64*), so every run hashes the
/// same data without pulling in a random-number crate.
pub fn pseudo_random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x >> 12;
            x ^= x << 25;
            x ^= x >> 27;
            (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
        })
        .collect()
}

/// Distance, modulo 4096, that [`copy_destination`] puts between a copy's
/// source and destination.
pub const COPY_DISTANCE_MOD_4K: usize = 2048;

/// A buffer and an offset into it where `src.len()` octets can be copied so
/// that `(dst - src) % 4096 == COPY_DISTANCE_MOD_4K`.
///
/// Two heap buffers allocated one after the other typically start 16 octets
/// apart modulo 4096. On this machine's AMD EPYC, `memcpy` (glibc's
/// `rep movsb` path, used from about 16 KiB) then runs 10-15x slower
/// (measured: 64 KiB in ~23 us instead of ~1.4 us). A baseline must not hit
/// that, so the copy benchmarks place their destination with this.
pub fn copy_destination(src: &[u8]) -> (Vec<u8>, usize) {
    let buf = vec![0u8; src.len() + 4096];
    let s = src.as_ptr() as usize;
    let d = buf.as_ptr() as usize;
    let want = (s + COPY_DISTANCE_MOD_4K) % 4096;
    let off = (want + 4096 - d % 4096) % 4096;
    (buf, off)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crc_fast::{CrcAlgorithm, Digest};

    fn fast_one_shot(data: &[u8]) -> u32 {
        crc_fast::checksum(CrcAlgorithm::Crc32Iscsi, data) as u32
    }

    fn fast_streamed(pieces: &[&[u8]]) -> u32 {
        let mut d = Digest::new(CrcAlgorithm::Crc32Iscsi);
        for p in pieces {
            d.update(p);
        }
        d.finalize() as u32
    }

    fn proto_streamed(pieces: &[&[u8]]) -> u32 {
        let mut c = iwarp_proto::crc::Crc32c::new();
        for p in pieces {
            c.update(p);
        }
        c.value()
    }

    #[test]
    fn copy_destination_is_not_4k_aliased() {
        for len in [0, 64, 1448, 65536, 100_000] {
            let src = pseudo_random_bytes(len, 3);
            let (mut buf, off) = copy_destination(&src);
            let dst = &mut buf[off..off + len];
            let dist = (dst.as_ptr() as usize).wrapping_sub(src.as_ptr() as usize);
            assert_eq!(dist % 4096, COPY_DISTANCE_MOD_4K);
            dst.copy_from_slice(&src);
        }
    }

    /// RFC 3720 B.4 vectors plus the CRC catalogue check value.
    #[test]
    fn rfc3720_vectors_agree() {
        let inc: Vec<u8> = (0u8..=31).collect();
        let dec: Vec<u8> = (0u8..=31).rev().collect();
        let cases: [(&[u8], u32); 5] = [
            (&[0u8; 32], 0x8A91_36AA),
            (&[0xffu8; 32], 0x62A8_AB43),
            (&inc, 0x46DD_794E),
            (&dec, 0x113F_DB5C),
            (b"123456789", 0xE306_9283),
        ];
        for (input, want) in cases {
            assert_eq!(crc32c::crc32c(input), want, "crc32c {input:02x?}");
            assert_eq!(fast_one_shot(input), want, "crc-fast checksum {input:02x?}");
            assert_eq!(crc_fast::crc32_iscsi(input), want, "crc-fast crc32_iscsi");
            assert_eq!(fast_streamed(&[input]), want, "crc-fast Digest");
            assert_eq!(proto_streamed(&[input]), want, "iwarp_proto Crc32c");
        }
    }

    /// Random buffers of every length 0..=1100 and then the benchmark sizes
    /// plus odd neighbours (crossing both crates' small/large-buffer paths).
    #[test]
    fn random_buffers_agree() {
        let mut lens: Vec<usize> = (0..=1100).collect();
        for s in CRC_SIZES {
            lens.extend([s - 1, s, s + 1, s + 7]);
        }
        lens.extend([2047, 2048, 4095, 4096, 4097, 16383, 100_003]);
        for (i, len) in lens.into_iter().enumerate() {
            let data = pseudo_random_bytes(len, i as u64 + 1);
            let want = crc32c::crc32c(&data);
            assert_eq!(fast_one_shot(&data), want, "checksum len {len}");
            assert_eq!(crc_fast::crc32_iscsi(&data), want, "crc32_iscsi len {len}");
            assert_eq!(fast_streamed(&[&data]), want, "Digest len {len}");
            let (a, b) = data.split_at(len / 2);
            assert_eq!(crc32c::crc32c_append(crc32c::crc32c(a), b), want);
            assert_eq!(fast_streamed(&[a, b]), want, "Digest halves len {len}");
            assert_eq!(proto_streamed(&[a, b]), want, "proto halves len {len}");
        }
    }

    /// Streaming split at every point of a 300-octet buffer, plus a
    /// three-way split, equals the one-shot CRC for both crates.
    #[test]
    fn streaming_split_at_every_point() {
        let data = pseudo_random_bytes(300, 42);
        let want = crc32c::crc32c(&data);
        assert_eq!(fast_one_shot(&data), want);
        for cut in 0..=data.len() {
            let (a, b) = data.split_at(cut);
            assert_eq!(
                crc32c::crc32c_append(crc32c::crc32c(a), b),
                want,
                "crc32c cut {cut}"
            );
            assert_eq!(fast_streamed(&[a, b]), want, "crc-fast cut {cut}");
            assert_eq!(proto_streamed(&[a, b]), want, "proto cut {cut}");
            let (b1, b2) = b.split_at(b.len() / 3);
            assert_eq!(
                fast_streamed(&[a, b1, b2]),
                want,
                "crc-fast 3-way cut {cut}"
            );
            assert_eq!(proto_streamed(&[a, b1, b2]), want, "proto 3-way cut {cut}");
        }
    }

    /// The benchmark's piece patterns compute the right CRC.
    #[test]
    fn benchmark_piece_patterns_agree() {
        assert_eq!(MPA_FPDU_PIECES.iter().sum::<usize>(), MPA_FPDU_LEN);
        let data = pseudo_random_bytes(MPA_FPDU_LEN, 7);
        let want = crc32c::crc32c(&data);
        let mut pieces = Vec::new();
        let mut rest = &data[..];
        for n in MPA_FPDU_PIECES {
            let (p, r) = rest.split_at(n);
            pieces.push(p);
            rest = r;
        }
        assert_eq!(fast_streamed(&pieces), want);
        assert_eq!(proto_streamed(&pieces), want);
        for piece in CRC_PIECES {
            let chunks: Vec<&[u8]> = data.chunks(piece).collect();
            assert_eq!(fast_streamed(&chunks), want, "piece {piece}");
            assert_eq!(proto_streamed(&chunks), want, "piece {piece}");
        }
    }
}
