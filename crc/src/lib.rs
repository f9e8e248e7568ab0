#![forbid(unsafe_code)]
//! CRC32c (Castagnoli: reflected polynomial 0x82F63B78, initial all-ones,
//! final complement), the checksum of MPA's FPDUs (RFC 5044 §6.1) and of
//! every SCTP packet (RFC 9260 §6.8, Appendix A).
//!
//! One streaming state, [`Crc32c`], a 4-octet `Copy` value, fed in pieces
//! of any length; [`crc32c()`] for one buffer; [`append`] for a raw value.
//! Two crates compute it, and the process picks one the first time a CRC
//! is asked for ([`backend`]):
//!
//! - **`crc-fast`** where the CPU has AVX-512 (`avx512vl`) with
//!   `vpclmulqdq` (its AVX-512 carry-less-multiply path, seen in `perf`). On a
//!   Zen 4 EPYC it was 2.9× `crc32c` on 1448 octets in one call, 1.45× on
//!   one FPDU fed in the deframer's pieces, 2.5× on 9000 octets, and no
//!   slower on 4- to 256-octet pieces (bench/README.md, "CRC32c").
//! - **`crc32c`** everywhere else: it runs three streams of the `crc32`
//!   instruction (SSE4.2, or the ARMv8 CRC instructions). On a Zen 3 EPYC
//!   without AVX-512, `crc-fast` took its SSE path there and ran
//!   0.75–1.25× of `crc32c`, slower on large buffers.
//!
//! Both give the same value for every input (tests below; the bench
//! crate checks them against each other and RFC 3720's vectors before
//! it times them).

use std::sync::atomic::{AtomicU8, Ordering};

/// Which crate computes CRC32c in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The `crc32c` crate (SSE4.2 / ARMv8 `crc32` instructions, three
    /// streams; a table on other CPUs).
    Crc32c,
    /// The `crc-fast` crate's carry-less-multiply folding (chosen only
    /// with AVX-512 VL and VPCLMULQDQ).
    CrcFast,
}

/// 0: not yet decided; 1: [`Backend::Crc32c`]; 2: [`Backend::CrcFast`].
static BACKEND: AtomicU8 = AtomicU8::new(0);

/// The implementation this process uses (decided once, from the CPU's
/// features; see the [crate docs](crate)).
#[inline]
pub fn backend() -> Backend {
    match BACKEND.load(Ordering::Relaxed) {
        1 => Backend::Crc32c,
        2 => Backend::CrcFast,
        _ => decide(),
    }
}

/// Use `backend` from now on, whatever the CPU has (benchmarks compare the
/// two in one process: `iwarp-perf --crc-backend`). Both compute the same
/// values, so a switch while CRCs are being summed is harmless.
pub fn force(backend: Backend) {
    store(backend);
}

fn store(b: Backend) {
    BACKEND.store(
        match b {
            Backend::Crc32c => 1,
            Backend::CrcFast => 2,
        },
        Ordering::Relaxed,
    );
}

#[cold]
fn decide() -> Backend {
    let b = if wide_clmul() {
        Backend::CrcFast
    } else {
        Backend::Crc32c
    };
    store(b);
    b
}

/// AVX-512 VL and VPCLMULQDQ: where `crc-fast` was measured faster.
#[cfg(target_arch = "x86_64")]
fn wide_clmul() -> bool {
    std::arch::is_x86_feature_detected!("avx512vl")
        && std::arch::is_x86_feature_detected!("vpclmulqdq")
}

#[cfg(not(target_arch = "x86_64"))]
fn wide_clmul() -> bool {
    false
}

/// The CRC32c of everything `crc` (a finished value: the CRC of the octets
/// before) covered, followed by `data`: the same contract as
/// `crc32c::crc32c_append`.
#[inline]
pub fn append(crc: u32, data: &[u8]) -> u32 {
    append_with(backend(), crc, data)
}

/// [`append`] by the named implementation (tests and benchmarks compare
/// them; the stack uses [`append`]).
#[inline]
pub fn append_with(backend: Backend, crc: u32, data: &[u8]) -> u32 {
    match backend {
        Backend::Crc32c => crc32c::crc32c_append(crc, data),
        Backend::CrcFast => {
            // crc-fast keeps the raw register (not complemented): the
            // finished value's complement, and back.
            let mut d = crc_fast::Digest::new_with_init_state(
                crc_fast::CrcAlgorithm::Crc32Iscsi,
                u64::from(!crc),
            );
            d.update(data);
            !(d.get_state() as u32)
        }
    }
}

/// Streaming CRC32c state. Feed octets with [`update`](Self::update) in any
/// number of pieces; [`value`](Self::value) gives the CRC of everything fed
/// so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Crc32c {
    /// CRC of the octets fed so far (finished: complemented).
    crc: u32,
}

impl Crc32c {
    /// A fresh state (the CRC of zero octets).
    pub const fn new() -> Self {
        Crc32c { crc: 0 }
    }

    /// Feed more octets.
    #[inline]
    pub fn update(&mut self, data: &[u8]) {
        self.crc = append(self.crc, data);
    }

    /// The CRC32c of all octets fed so far.
    #[inline]
    pub fn value(&self) -> u32 {
        self.crc
    }
}

/// CRC32c of one contiguous buffer.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    append(0, data)
}

/// How many zero octets to put before `n` octets of data for
/// [`crc32c_after_zeros`]: enough to make a whole number of `crc-fast`'s
/// 384-octet blocks.
#[inline]
pub fn zero_lead(n: usize) -> usize {
    (ZERO_LEAD_BLOCK - n % ZERO_LEAD_BLOCK) % ZERO_LEAD_BLOCK
}

/// The block [`zero_lead`] rounds to: `crc-fast`'s AVX-512 loop takes 384
/// octets a turn and sums what is left after its last turn 8 octets at a
/// time, one `crc32` instruction after the other.
pub const ZERO_LEAD_BLOCK: usize = 384;

/// Where the buffer given to [`crc32c_after_zeros`] should start: `crc-fast`
/// sums octets before a 64-octet boundary one at a time, then 8 at a time.
pub const ZERO_LEAD_ALIGN: usize = 64;

/// The CRC32c of `buf[lead..]`, where the caller put `lead` zero octets in
/// front of the data (`buf[..lead]` must be zero): with `crc-fast`, a
/// buffer that starts on a 64-octet boundary ([`ZERO_LEAD_ALIGN`]) and is
/// a whole number of 384-octet blocks ([`zero_lead`]) is summed by its
/// vector loop alone. On a Zen 4 the sum of a 1444-octet FPDU took about
/// 22 ns so, against 31 where a frame holds it (bench/README.md,
/// "`crc_zero_lead`").
///
/// Why it is the same value: a CRC register that starts at zero stays zero
/// through zero octets, so summing from a zero register gives
/// `raw(0, buf) = raw(0, data)`; and the register is linear in its start,
/// so the standard CRC (start all ones, complement at the end) is
/// `!(raw(!0, 0ⁿ) ^ raw(0, data)) = crc32c(0ⁿ) ^ raw(0, data)` for `n`
/// octets of data, where `crc32c(0ⁿ)` depends on `n` alone (kept per
/// thread for the last few lengths seen).
#[inline]
pub fn crc32c_after_zeros(buf: &[u8], lead: usize) -> u32 {
    crc32c_after_zeros_with(backend(), buf, lead)
}

/// [`crc32c_after_zeros`] by the named implementation.
pub fn crc32c_after_zeros_with(backend: Backend, buf: &[u8], lead: usize) -> u32 {
    let Some(data) = buf.get(lead..) else {
        return crc32c(&[]);
    };
    debug_assert!(buf[..lead].iter().all(|&b| b == 0), "the lead is not zero");
    match backend {
        Backend::Crc32c => append_with(Backend::Crc32c, 0, data),
        Backend::CrcFast => {
            let mut d =
                crc_fast::Digest::new_with_init_state(crc_fast::CrcAlgorithm::Crc32Iscsi, 0);
            d.update(buf);
            (d.get_state() as u32) ^ zeros_crc(data.len())
        }
    }
}

/// `crc32c` of `n` zero octets, remembered per thread for a few lengths
/// (a stream's FPDUs mostly have one or two).
fn zeros_crc(n: usize) -> u32 {
    const SLOTS: usize = 16;
    thread_local! {
        static SEEN: [std::cell::Cell<(usize, u32)>; SLOTS] =
            const { [const { std::cell::Cell::new((usize::MAX, 0)) }; SLOTS] };
    }
    SEEN.with(|seen| {
        let slot = &seen[n % SLOTS];
        let (m, crc) = slot.get();
        if m == n {
            return crc;
        }
        const ZEROS: [u8; 4096] = [0; 4096];
        let mut crc = 0;
        let mut left = n;
        while left > 0 {
            let k = left.min(ZEROS.len());
            crc = append(crc, &ZEROS[..k]);
            left -= k;
        }
        slot.set((n, crc));
        crc
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const BOTH: [Backend; 2] = [Backend::Crc32c, Backend::CrcFast];

    /// RFC 3720 B.4's vectors (wire-facts.md) and "123456789", by both.
    #[test]
    fn vectors_by_both() {
        let inc: Vec<u8> = (0u8..32).collect();
        let dec: Vec<u8> = (0u8..32).rev().collect();
        let cases: [(&[u8], u32); 5] = [
            (&[0u8; 32], 0x8A91_36AA),
            (&[0xffu8; 32], 0x62A8_AB43),
            (&inc, 0x46DD_794E),
            (&dec, 0x113F_DB5C),
            (b"123456789", 0xE306_9283),
        ];
        for b in BOTH {
            for (input, want) in cases {
                assert_eq!(append_with(b, 0, input), want, "{b:?}");
            }
            assert_eq!(append_with(b, 0, &[]), 0, "{b:?}: no octets");
        }
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    /// Every length to 1100 and some past a jumbo frame, at every
    /// alignment of 0..8, and chained from a non-zero value: both agree.
    #[test]
    fn backends_agree_on_lengths_and_alignments() {
        let buf: Vec<u8> = (0..70_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
            .collect();
        let lens = (0..=1100).chain([1448, 1460, 4096, 8948, 9000, 65_536, 69_000]);
        for len in lens {
            for off in 0..8 {
                let d = &buf[off..off + len];
                let a = append_with(Backend::Crc32c, 0x1234_5678, d);
                let b = append_with(Backend::CrcFast, 0x1234_5678, d);
                assert_eq!(a, b, "length {len} offset {off}");
            }
        }
    }

    /// Data behind zeros of any lead, at any length, by both backends:
    /// the value of the data alone.
    #[test]
    fn the_zero_lead_changes_nothing() {
        let data: Vec<u8> = (0..20_000u32)
            .map(|i| (i.wrapping_mul(2_654_435_761) >> 11) as u8)
            .collect();
        for b in BOTH {
            for n in (0..=800).chain([1444, 1448, 8948, 8960, 17_000]) {
                let want = append_with(Backend::Crc32c, 0, &data[..n]);
                for lead in [0, 1, 7, 64, zero_lead(n), 383] {
                    let mut buf = vec![0u8; lead + n];
                    buf[lead..].copy_from_slice(&data[..n]);
                    let got = crc32c_after_zeros_with(b, &buf, lead);
                    assert_eq!(got, want, "{b:?} n {n} lead {lead}");
                    // Twice: the second from the remembered zeros' CRC.
                    assert_eq!(crc32c_after_zeros_with(b, &buf, lead), want);
                }
                assert_eq!((zero_lead(n) + n) % ZERO_LEAD_BLOCK, 0);
            }
        }
        assert_eq!(crc32c_after_zeros(&[0, 0, 0], 3), 0);
        assert_eq!(crc32c_after_zeros(b"\x00123456789", 1), 0xE306_9283);
    }

    /// The state the stack uses fed in pieces equals one call.
    #[test]
    fn pieces_equal_one_call() {
        let data: Vec<u8> = (0..3000u32).map(|i| (i * 7 + 3) as u8).collect();
        let whole = crc32c(&data);
        for cut in (0..=data.len()).step_by(7) {
            let mut c = Crc32c::new();
            c.update(&data[..cut]);
            c.update(&data[cut..]);
            assert_eq!(c.value(), whole, "cut at {cut}");
        }
    }

    /// The choice is made once and stays.
    #[test]
    fn backend_is_stable() {
        let b = backend();
        assert_eq!(b, backend());
        #[cfg(target_arch = "x86_64")]
        assert_eq!(
            b == Backend::CrcFast,
            std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("vpclmulqdq")
        );
    }

    proptest! {
        /// Random pieces of random data: both implementations, and the
        /// streaming state, agree with one call.
        #[test]
        fn random_pieces(data in proptest::collection::vec(any::<u8>(), 0..4000),
                         cuts in proptest::collection::vec(0usize..4000, 0..6)) {
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            cuts.sort_unstable();
            for b in BOTH {
                let mut crc = 0;
                let mut at = 0;
                for &c in cuts.iter().chain(std::iter::once(&data.len())) {
                    crc = append_with(b, crc, &data[at..c]);
                    at = c;
                }
                prop_assert_eq!(crc, crc32c::crc32c(&data));
            }
        }
    }
}
