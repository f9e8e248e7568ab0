//! A receive posted before the connection exists is in place when the
//! peer's first Send arrives right behind its MPA Reply (RFC 6581 lets a
//! Rev 2 responder without peer-to-peer send at once; the two can share a
//! round of the loop or a segment). Before the fix the receive waited in
//! the host's pending queue until the round ended, and the Send drew a
//! "no buffer" Terminate.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use iwarp_datapath::over_tcp::{HostCommand, HostOutput};
use iwarp_proto::mem::Access;
use iwarp_proto::qp::{QpEvent, Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_sim::tcp_link::{TcpSim, TcpSimConfig};

#[test]
fn a_receive_posted_before_connecting_takes_a_send_that_follows_the_reply() {
    for seed in 1..=20 {
        let mut s = TcpSim::new(TcpSimConfig {
            seed,
            ..Default::default()
        });
        let dst = s.a.register(vec![0; 64], Access::LOCAL_WRITE);
        let src = s.b.register((0..64).collect(), Access::LOCAL_READ);
        let mut outs = Vec::new();
        let sge = |stag| Sge {
            stag,
            to: 0,
            len: 64,
        };
        // Both posted before either side is in full operation.
        s.a.stack.post(
            HostCommand::PostRecv(1, sge(dst).into()),
            s.now,
            &s.a.mem,
            &mut |o| outs.push(o),
        );
        s.b.stack.post(
            HostCommand::PostSend(WorkRequest::Send {
                wr_id: 2,
                signaled: true,
                local: sge(src).into(),
                solicited: false,
                invalidate: None,
            }),
            s.now,
            &s.b.mem,
            &mut |o| outs.push(o),
        );
        assert!(outs.is_empty(), "seed {seed}: {outs:?}");
        let done = s.run_until(200_000, |s| {
            // What a poll loop does after each round.
            let mut o = Vec::new();
            let (now, lat) = (s.now, &mut Default::default());
            s.a.stack.drain(now, &s.a.mem, lat, &mut |x| o.push(x));
            s.b.stack.drain(now, &s.b.mem, lat, &mut |x| o.push(x));
            for x in o {
                match x {
                    HostOutput::Completion(c) if c.wr_id == 1 => s.a.completions.push(c),
                    HostOutput::Event(e) => s.a.events.push(e),
                    HostOutput::Refused(id, e) | HostOutput::RefusedRecv(id, e) => {
                        panic!("seed {seed}: {id} refused: {e:?}")
                    }
                    _ => {}
                }
            }
            s.a.completions.iter().any(|c| c.wr_id == 1)
                || s.a
                    .events
                    .iter()
                    .any(|e| matches!(e, QpEvent::LocalError(_)))
        });
        assert!(done, "seed {seed}: nothing happened");
        assert!(
            !s.a.events
                .iter()
                .any(|e| matches!(e, QpEvent::LocalError(_) | QpEvent::TerminateSent(_))),
            "seed {seed}: {:?}",
            s.a.events
        );
        let c = s.a.completions.iter().find(|c| c.wr_id == 1).unwrap();
        assert_eq!(c.status, WcStatus::Success, "seed {seed}: {c:?}");
        assert_eq!((c.opcode, c.byte_len), (WcOpcode::Recv, 64), "seed {seed}");
        assert_eq!(
            s.a.mem.snapshot(dst).unwrap(),
            (0..64).collect::<Vec<u8>>().as_slice(),
            "seed {seed}"
        );
    }
}
