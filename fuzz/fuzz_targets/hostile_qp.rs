//! A hostile peer and random local operations against one queue pair, with
//! a shadow copy of every region: see `iwarp_proto::hostile` for the
//! invariants checked after every step.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Err(v) = iwarp_proto::hostile::run(data) {
        panic!("{v}");
    }
});
