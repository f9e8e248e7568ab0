//! DDP/RDMAP header parsers: never panic; parse/emit round-trips.
#![no_main]
use iwarp_proto::wire::{DdpHeader, DdpSegment};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = DdpSegment::new_checked(data) {
        let _ = (s.control(), s.rdmap_control().opcode(), s.stag(), s.to(), s.qn(), s.msn(), s.mo(), s.payload().len());
    }
    if let Ok((h, n)) = DdpHeader::parse(data) {
        let mut out = [0u8; 18];
        assert_eq!(h.emit(&mut out).expect("fits"), n);
        assert_eq!(&out[..n], &data[..n]);
    }
});
