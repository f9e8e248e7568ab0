//! The initiator's hold on FPDUs after the MPA Reply (`first_fpdu_delay`),
//! the workaround for Linux siw's first-FPDU race (interop README, finding
//! 2): with the hold, nothing (not even the RTR) reaches the responder
//! before it ends; without it, the first FPDU follows the Reply at once.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_control::{MpaConfig, RtrOffer};
use iwarp_proto::mem::Access;
use iwarp_proto::qp::{Sge, WorkRequest};
use iwarp_sim::tcp_link::{TcpSim, TcpSimConfig};

const MS: u64 = 1_000_000;

/// Returns (virtual ns from full operation at the initiator to the Send's
/// arrival, FPDUs the responder had received 1 ms before the hold ended).
fn run(delay: u64) -> (u64, u64) {
    let p2p = MpaConfig {
        peer_to_peer: true,
        rtr: RtrOffer {
            zero_length_fpdu: false,
            write: true,
            read: false,
        },
        ..MpaConfig::default()
    };
    let cfg = TcpSimConfig {
        initiator: MpaConfig {
            first_fpdu_delay: delay,
            ..p2p.clone()
        },
        responder: p2p,
        ..Default::default()
    };
    let mut s = TcpSim::new(cfg);
    assert!(s.run_until(200_000, |s| s.a.ready()));
    let t0 = s.now;
    assert!(s.run_until(200_000, |s| s.b.ready()));
    let src = s.a.register(vec![7; 64], Access::LOCAL_READ);
    let dst = s.b.register(vec![0; 64], Access::LOCAL_WRITE);
    let sge = |stag| Sge {
        stag,
        to: 0,
        len: 64,
    };
    s.b.post_recv(1, sge(dst)).unwrap();
    s.a.post_send(WorkRequest::Send {
        wr_id: 1,
        signaled: true,
        local: sge(src).into(),
        solicited: false,
        invalidate: None,
    })
    .unwrap();
    let mut early = 0;
    let mut sampled = false;
    assert!(s.run_until(2_000_000, |s| {
        if !sampled && delay > MS && s.now >= t0 + delay - MS {
            sampled = true;
            early = s.b.qp().stats().fpdus_rx;
        }
        !s.b.completions.is_empty()
    }));
    (s.now - t0, early)
}

#[test]
fn the_initiator_holds_its_first_fpdu_for_the_configured_time() {
    let (quick, _) = run(0);
    assert!(quick < MS, "without a hold the Send took {quick} ns");
    let (held, early) = run(50 * MS);
    assert_eq!(
        early, 0,
        "an FPDU (RTR or Send) reached the responder during the hold"
    );
    assert!(
        held >= 50 * MS,
        "the Send arrived {held} ns after the Reply"
    );
    assert!(held < 60 * MS, "the hold did not end on time: {held} ns");
}
