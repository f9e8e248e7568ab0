//! The small fixed formats: FPDU view, marker, Read Request, RFC 6581 words.
#![no_main]
use iwarp_proto::wire::{EnhancedParams, Fpdu, Marker, ReadRequest};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(f) = Fpdu::new_checked(data) {
        let _ = (f.ulpdu().len(), f.crc_ok(), f.total_len());
    }
    if let Ok(m) = Marker::parse(data) {
        assert_eq!(&m.to_bytes()[..], &data[..4]);
    }
    if let Ok(r) = ReadRequest::parse(data) {
        assert_eq!(&r.to_bytes()[..], &data[..28]);
    }
    if let Ok(e) = EnhancedParams::parse(data) {
        let _ = e.to_bytes();
    }
});
