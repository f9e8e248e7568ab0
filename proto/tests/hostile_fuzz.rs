//! A hostile peer against one queue pair, with local operations in between:
//! no octet changes outside what was writable, queues stay bounded, every
//! posted request completes once (see `iwarp_proto::hostile`).
use iwarp_proto::hostile::{run, Summary};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn hostile_peer_keeps_invariants(data in proptest::collection::vec(any::<u8>(), 0..4000)) {
        if let Err(v) = run(&data) {
            prop_assert!(false, "{}", v);
        }
    }
}

/// SplitMix64, so the coverage check below is deterministic.
fn bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            (z ^ (z >> 31)) as u8
        })
        .collect()
}

/// The driver gets past the header checks: over fixed random inputs it
/// places payload, completes receives and Reads, and answers Read Requests.
#[test]
fn hostile_driver_reaches_placement() {
    let mut total = Summary::default();
    for seed in 0..200 {
        let s = run(&bytes(seed, 2000)).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        total.steps += s.steps;
        total.fpdus_rx += s.fpdus_rx;
        total.bytes_placed += s.bytes_placed;
        total.recv_ok += s.recv_ok;
        total.read_ok += s.read_ok;
        total.fpdus_tx += s.fpdus_tx;
        total.atomic_octets += s.atomic_octets;
    }
    eprintln!("{total:?}");
    // RFC 7306 atomics ran on memory only they may write.
    assert!(total.atomic_octets > 0, "{total:?}");
    assert!(total.bytes_placed > 1000, "{total:?}");
    assert!(total.recv_ok > 10, "{total:?}");
    assert!(total.read_ok > 0, "{total:?}");
}
