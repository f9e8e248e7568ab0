//! The MPA Request/Reply state machines fed arbitrary peer bytes.
#![no_main]
use iwarp_control::{Initiator, MpaConfig, Responder};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut r = Responder::new(MpaConfig::default());
    let _ = r.receive(data);
    if let Ok((mut i, _)) = Initiator::new(MpaConfig { peer_to_peer: true, ..Default::default() }) {
        let _ = i.receive(data);
    }
});
