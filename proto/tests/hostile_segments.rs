//! The hostile peer of `iwarp_proto::hostile` against a queue pair over the
//! segment lower layer (DDP over SCTP, RFC 5043): whole segments, delivered
//! out of DDP-SSN order, DDP-SSNs repeated or out of window now and then.
//! The same invariants as `hostile_fuzz.rs`.
use iwarp_proto::hostile::{run_segments, Summary};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn hostile_segment_peer_keeps_invariants(data in proptest::collection::vec(any::<u8>(), 0..4000)) {
        if let Err(v) = run_segments(&data) {
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

/// Out-of-order delivery does not stop the driver short of placement: over
/// fixed random inputs it places payload, completes receives and Reads.
#[test]
fn hostile_segment_driver_reaches_placement() {
    let mut total = Summary::default();
    for seed in 0..200 {
        let s = run_segments(&bytes(seed, 2000)).unwrap_or_else(|v| panic!("seed {seed}: {v}"));
        total.steps += s.steps;
        total.fpdus_rx += s.fpdus_rx;
        total.bytes_placed += s.bytes_placed;
        total.recv_ok += s.recv_ok;
        total.read_ok += s.read_ok;
        total.fpdus_tx += s.fpdus_tx;
        total.segments_held += s.segments_held;
    }
    eprintln!("{total:?}");
    assert!(total.bytes_placed > 1000, "{total:?}");
    assert!(total.recv_ok > 10, "{total:?}");
    assert!(total.read_ok > 0, "{total:?}");
    assert!(total.segments_held > 100, "{total:?}");
}
