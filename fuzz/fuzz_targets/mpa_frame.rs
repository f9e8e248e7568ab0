//! MPA Request/Reply parser: never panics; what parses re-emits to the same bytes.
#![no_main]
use iwarp_proto::wire::{MpaFrame, MpaFrameRepr};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = MpaFrame::new_checked(data).map(|f| (f.kind(), f.flags(), f.rev(), f.private_data().len()));
    if let Ok((r, len)) = MpaFrameRepr::parse_bytes(data) {
        let v = r.to_vec().expect("a parsed frame re-emits");
        assert_eq!(v.len(), len);
        // Flags and PD round-trip; the Enhanced bit is re-derived from the words.
        let (back, _) = MpaFrameRepr::parse_bytes(&v).expect("re-emitted frame parses");
        assert_eq!(back.ulp_data, r.ulp_data);
        assert_eq!(back.enhanced, r.enhanced);
    }
});
