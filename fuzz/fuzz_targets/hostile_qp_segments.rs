//! The hostile peer against a queue pair over DDP/SCTP's segment lower
//! layer: whole segments in any DDP-SSN order (see `iwarp_proto::hostile`).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = iwarp_proto::hostile::run_segments(data) {
        panic!("{v}");
    }
});
