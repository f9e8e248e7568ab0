//! One setup exchange over either lower layer (`iwarp_control::setup`)
//! driven by a hostile peer and application: the fuzzer picks which
//! side and wire, then messages (stream octets in any cut, Initiate,
//! Accept, Reject) and calls (accept with any private data, accept_own,
//! reject, give_up) in any order. Invariants: no panic; the exchange
//! settles at most once; a request is held only between a `Request` and
//! its answer; once over, every message is refused and none is held.
#![no_main]
use iwarp_control::setup::{Exchange, Incoming, Progress};
use iwarp_control::MpaConfig;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&pick, mut rest)) = data.split_first() else {
        return;
    };
    let cfg = MpaConfig {
        peer_to_peer: pick & 4 != 0,
        ..MpaConfig::default()
    };
    let mut ex = match pick & 3 {
        0 => match Exchange::mpa_initiator(cfg) {
            Ok((e, _)) => e,
            Err(_) => return,
        },
        1 => Exchange::mpa_responder(cfg),
        2 => match Exchange::session_initiator(8, 8, b"pd") {
            Ok((e, _)) => e,
            Err(_) => return,
        },
        _ => Exchange::session_responder(8, 8, b"pd".to_vec()),
    };
    let mut settled = 0;
    while let [op, len, tail @ ..] = rest {
        let n = usize::from(*len).min(tail.len());
        let (body, next) = tail.split_at(n);
        rest = next;
        let was_over = ex.is_over();
        match op % 8 {
            0..=3 => {
                let msg = match op % 4 {
                    0 => Incoming::Stream(body),
                    1 => Incoming::Initiate(body),
                    2 => Incoming::Accept(body),
                    _ => Incoming::Reject(body),
                };
                let r = ex.receive(msg);
                if was_over {
                    assert!(r.is_err(), "a message after the end");
                }
                match r {
                    Ok(Progress::Established(..)) => settled += 1,
                    Ok(Progress::Request(_)) => assert!(ex.pending_request().is_some()),
                    _ => {}
                }
            }
            4 => {
                // Private data of any length, up to 1 KiB.
                let pd = vec![0u8; usize::from(*len) * 4];
                if ex.accept(pd, 4, 4).is_ok() {
                    settled += 1;
                }
            }
            5 => {
                if ex.accept_own().is_ok() {
                    settled += 1;
                }
            }
            6 => {
                let _ = ex.reject(body);
            }
            _ => {
                let _ = ex.give_up();
                assert!(ex.is_over());
            }
        }
        assert!(settled <= 1, "settled twice");
        if ex.is_over() {
            assert!(ex.pending_request().is_none());
        }
    }
});
