//! RFC 7306 Atomic Response parser: never panics; what parses re-emits
//! to the same 12 octets and parses back equal.
#![no_main]
use iwarp_proto::wire::rdmap::ATOMIC_RESPONSE_LEN;
use iwarp_proto::wire::AtomicResponse;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(r) = AtomicResponse::parse(data) else {
        assert!(
            data.len() < ATOMIC_RESPONSE_LEN,
            "{} octets refused",
            data.len()
        );
        return;
    };
    let a = r.to_bytes();
    assert_eq!(&a[..], &data[..ATOMIC_RESPONSE_LEN]);
    assert_eq!(
        AtomicResponse::parse(&a).expect("re-emitted response parses"),
        r
    );
    let mut buf = [0u8; ATOMIC_RESPONSE_LEN];
    assert_eq!(r.emit(&mut buf).expect("fits"), r.buffer_len());
    assert!(r.emit(&mut buf[..ATOMIC_RESPONSE_LEN - 1]).is_err());
});
