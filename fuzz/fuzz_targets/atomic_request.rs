//! RFC 7306 Atomic Request parser: never panics; what parses re-emits to
//! the same 52 octets but the 28 reserved bits of the first word (ignored
//! on receipt, sent as zero: RFC 7306 §5.2.1), and parses back equal.
//! Executing it on any target value never panics either.
#![no_main]
use iwarp_proto::wire::rdmap::ATOMIC_REQUEST_LEN;
use iwarp_proto::wire::{AtomicOp, AtomicRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = AtomicRequest::parse(data) else {
        assert!(
            data.len() < ATOMIC_REQUEST_LEN,
            "{} octets refused",
            data.len()
        );
        return;
    };
    let a = r.to_bytes();
    let mut want = [0u8; ATOMIC_REQUEST_LEN];
    want.copy_from_slice(&data[..ATOMIC_REQUEST_LEN]);
    want[..3].fill(0);
    want[3] &= 0x0f;
    assert_eq!(a, want);
    assert_eq!(
        AtomicRequest::parse(&a).expect("re-emitted request parses"),
        r
    );
    let mut buf = [0u8; ATOMIC_REQUEST_LEN];
    assert_eq!(r.emit(&mut buf).expect("fits"), r.buffer_len());
    assert!(r.emit(&mut buf[..ATOMIC_REQUEST_LEN - 1]).is_err());
    // The target's value: the octets after the body, if any.
    let mut orig = [0u8; 8];
    let rest = &data[ATOMIC_REQUEST_LEN..];
    let n = rest.len().min(8);
    orig[..n].copy_from_slice(&rest[..n]);
    let orig = u64::from_be_bytes(orig);
    let new = r.apply(orig);
    match r.op {
        AtomicOp::FetchAdd => {
            let v = new.expect("Fetch and Add stores");
            if r.add_swap_mask == 0 {
                assert_eq!(v, orig.wrapping_add(r.add_swap));
            }
        }
        AtomicOp::Swap => {
            let v = new.expect("Swap stores");
            let m = r.add_swap_mask;
            assert_eq!(v, (orig & !m) | (r.add_swap & m));
        }
        AtomicOp::CmpSwap => {
            assert_eq!(new.is_some(), (orig ^ r.compare) & r.compare_mask == 0);
        }
        AtomicOp::Unknown(_) => assert_eq!(new, None),
    }
});
