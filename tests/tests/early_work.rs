//! Work posted before the connection is up waits in one queue type over
//! both transports (`datapath::early::EarlyWork`, issue 26 item 2) and is
//! bounded as the queue pair will be: with 16-deep queues, a 17th send
//! and a 17th receive posted with the connect are refused at once with
//! `QueueFull` (before, each transport held any number, without bound, and
//! the queue pair refused the excess only once it existed);
//! the 16 sends held go out once the connection is in full operation and
//! complete, in posting order. Virtual time, no threads.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;

use iwarp_datapath::link::virtual_link::{LinkConfig, Side, VirtualLink};
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::stack::{Command, CqEntry, CqRing, Output, Stack, StackConfig, Transport, Ulp};
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use iwarp_proto::qp::{PostError, Sge, WcOpcode, WcStatus, WorkRequest};
use iwarp_tests::raw_sctp::ulp;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

const DEPTH: u64 = 16;

fn stack(last: u8) -> (Stack, PdId, STag) {
    let c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x6f, last]),
        Ipv4Address::new(10, 6, 2, last),
        24,
    ));
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(
            pd,
            vec![last; 4096],
            Access::LOCAL_READ | Access::LOCAL_WRITE | Access::REMOTE_WRITE,
            0,
        )
        .unwrap();
    (Stack::new(c, mem), pd, stag)
}

fn run(transport: Transport) {
    let (sa, pd_a, stag_a) = stack(1);
    let (sb, pd_b, stag_b) = stack(2);
    let (cq_a, cq_b) = (Arc::new(CqRing::new(256)), Arc::new(CqRing::new(256)));
    let mut link = VirtualLink::new(sa, sb, LinkConfig::default());
    // A accepts by itself (over either transport).
    let mut listen = ulp(pd_a, Some(&cq_a), SetupTimeouts::default());
    if let Ulp::Iwarp { manual, .. } = &mut listen {
        *manual = false;
    }
    link.command(
        Side::A,
        Command::Listen {
            port: 7000,
            transport,
            ulp: listen,
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            token: 7,
            remote: Ipv4Address::new(10, 6, 2, 1),
            port: 7000,
            transport,
            ulp: ulp(pd_b, Some(&cq_b), SetupTimeouts::default()),
        },
    );
    // Right behind the connect, before anything is on the wire: one more
    // Write and one more receive than the queues hold.
    for i in 0..=DEPTH {
        let write = WorkRequest::Write {
            wr_id: i,
            signaled: true,
            local: Sge {
                stag: stag_b,
                to: 0,
                len: 64,
            }
            .into(),
            remote_stag: stag_a,
            remote_to: 64 * i,
        };
        link.command(
            Side::B,
            Command::IwarpOpening(7, HostCommand::PostSend(write)),
        );
        let recv = HostCommand::PostRecv(
            100 + i,
            Sge {
                stag: stag_b,
                to: 2048,
                len: 64,
            }
            .into(),
        );
        link.command(Side::B, Command::IwarpOpening(7, recv));
    }
    // One step: the commands handled, not yet a handshake (ARP first).
    // The two over the depths are refused already.
    link.step();
    let mut refused = Vec::new();
    while let Some((_, e)) = cq_b.ring.pop() {
        match e {
            CqEntry::Refused { wr_id, error } => refused.push((wr_id, error)),
            other => panic!("{transport:?}: {other:?} before the connection is up"),
        }
    }
    assert_eq!(
        refused,
        [
            (DEPTH, PostError::QueueFull),
            (100 + DEPTH, PostError::QueueFull)
        ],
        "{transport:?}: refused at once"
    );
    let mut done = Vec::new();
    let mut up = false;
    assert!(
        link.run_until(2_000_000, |l| {
            while let Some(o) = l.outputs(Side::B).pop_front() {
                up |= matches!(o, Output::Cm(_, CmEvent::Established(_)));
            }
            l.outputs(Side::A).clear();
            while let Some((_, e)) = cq_b.ring.pop() {
                match e {
                    CqEntry::Refused { wr_id, error } => refused.push((wr_id, error)),
                    CqEntry::Done(c) => {
                        assert_eq!((c.opcode, c.status), (WcOpcode::Write, WcStatus::Success));
                        done.push(c.wr_id);
                    }
                }
            }
            up && done.len() == DEPTH as usize
        }),
        "{transport:?}: up {up}, done {done:?}, refused {refused:?}"
    );
    assert_eq!(refused.len(), 2, "{transport:?}: refused later {refused:?}");
    assert_eq!(done, (0..DEPTH).collect::<Vec<_>>(), "{transport:?}");
}

#[test]
fn over_tcp_the_early_queue_holds_the_queue_depths() {
    run(Transport::Tcp);
}

#[test]
fn over_sctp_the_early_queue_holds_the_queue_depths() {
    run(Transport::Sctp);
}
