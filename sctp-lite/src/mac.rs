//! SipHash-2-4 (Aumasson and Bernstein, 2012): a keyed pseudorandom
//! function with a 128-bit key and a 64-bit output.
//!
//! sctp-lite uses it for:
//!
//! * the State Cookie MAC (RFC 9260 §5.1.3 asks for a MAC computed with a
//!   secret key; HMAC-SHA-1 is only an example). SipHash-2-4 is a PRF
//!   designed as a short-input MAC; its 64-bit tag makes a forged cookie
//!   succeed with probability 2^-64 per try, and the secret key is the
//!   caller's ([`crate::assoc::Config::secret`]), to be rotated by the
//!   caller as RFC 9260 §5.1.3 suggests;
//! * verification tags and initial TSNs (RFC 9260 §5.3.1 wants them
//!   unpredictable): the crate reads no random source, so they come from
//!   SipHash over a counter and `now`, keyed with a second key derived from
//!   the caller's secret. They are unpredictable to anyone who does not
//!   know the secret.
//!
//! It is written here rather than taken from `std::hash::SipHasher`
//! (deprecated, and without a stable output guarantee); the test vectors
//! below are the reference ones.

/// A 128-bit SipHash key.
pub type Key = [u8; 16];

#[inline]
fn round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-2-4 of `msg` under `key`.
pub fn siphash24(key: &Key, msg: &[u8]) -> u64 {
    let mut k0b = [0u8; 8];
    let mut k1b = [0u8; 8];
    k0b.copy_from_slice(&key[..8]);
    k1b.copy_from_slice(&key[8..]);
    let k0 = u64::from_le_bytes(k0b);
    let k1 = u64::from_le_bytes(k1b);
    let mut v = [
        k0 ^ 0x736f_6d65_7073_6575,
        k1 ^ 0x646f_7261_6e64_6f6d,
        k0 ^ 0x6c79_6765_6e65_7261,
        k1 ^ 0x7465_6462_7974_6573,
    ];
    let mut blocks = msg.chunks_exact(8);
    for b in &mut blocks {
        let mut w = [0u8; 8];
        w.copy_from_slice(b);
        let m = u64::from_le_bytes(w);
        v[3] ^= m;
        round(&mut v);
        round(&mut v);
        v[0] ^= m;
    }
    let rest = blocks.remainder();
    let mut last = [0u8; 8];
    last[..rest.len()].copy_from_slice(rest);
    last[7] = msg.len() as u8;
    let m = u64::from_le_bytes(last);
    v[3] ^= m;
    round(&mut v);
    round(&mut v);
    v[0] ^= m;
    v[2] ^= 0xff;
    for _ in 0..4 {
        round(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// Derives an independent key for another purpose from `key` (domain
/// separation by a label).
pub fn derive(key: &Key, label: &[u8]) -> Key {
    let mut out = [0u8; 16];
    let mut m = [0u8; 64];
    let n = label.len().min(63);
    m[..n].copy_from_slice(&label[..n]);
    m[63] = 0;
    out[..8].copy_from_slice(&siphash24(key, &m[..=n]).to_le_bytes());
    m[63] = 1;
    m[n] = 1;
    out[8..].copy_from_slice(&siphash24(key, &m[..=n]).to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        core::array::from_fn(|i| i as u8)
    }

    #[test]
    fn reference_vectors() {
        // Paper, Appendix A: key 00..0f, message 00..0e.
        let msg: Vec<u8> = (0u8..15).collect();
        assert_eq!(siphash24(&key(), &msg), 0xa129_ca61_49be_45e5);
        // vectors.h, first entry: the empty message.
        assert_eq!(siphash24(&key(), &[]), 0x726f_db47_dd0e_0e31);
    }

    #[test]
    fn key_and_message_both_matter() {
        let a = siphash24(&key(), b"cookie");
        let mut k2 = key();
        k2[15] ^= 1;
        assert_ne!(a, siphash24(&k2, b"cookie"));
        assert_ne!(a, siphash24(&key(), b"cookiE"));
        assert_ne!(derive(&key(), b"tags"), derive(&key(), b"tsns"));
        assert_ne!(derive(&key(), b"tags"), key());
    }
}
