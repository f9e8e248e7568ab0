//! Terminate parser: never panics; parse/emit round-trips on the flagged parts.
#![no_main]
use iwarp_proto::wire::TerminateRepr;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = TerminateRepr::siw_swapped(data);
    if let Ok(t) = TerminateRepr::parse(data) {
        let _ = t.code.describe();
        let (a, n) = t.to_array();
        let back = TerminateRepr::parse(&a[..n]).expect("re-emitted terminate parses");
        assert_eq!(back.code, t.code);
        assert_eq!(back.ddp_header, t.ddp_header);
        assert_eq!(back.rdma_header, t.rdma_header);
    }
});
