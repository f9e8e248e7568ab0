//! Receives posted with an SCTP connect (`Command::IwarpOpening`, what
//! `ConnectOptions::recvs` sends) find the connection even when they reach
//! the loop after the association came up: the token names the connection
//! until it is freed. Before, the token was forgotten at the association's
//! COOKIE-ACK, such a receive was refused to no CQ at all, and the peer's
//! first Send, acknowledged by SCTP, never completed (seen once in about
//! 300 loaded runs of `sctp_context`'s AF_XDP test). Virtual time, no
//! threads: the late post is made at exactly that point.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;

use iwarp_datapath::link::virtual_link::{LinkConfig, Side, VirtualLink};
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::over_tcp::{CmEvent, HostCommand};
use iwarp_datapath::stack::{Command, CqEntry, CqRing, Output, Stack, StackConfig, Transport};
use iwarp_proto::mem::{Access, MemoryTable, PdId, STag};
use iwarp_proto::qp::{Sge, WcOpcode, WorkRequest};
use iwarp_tests::raw_sctp::ulp;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

fn stack(last: u8) -> (Stack, PdId, STag) {
    let c = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x6e, last]),
        Ipv4Address::new(10, 6, 1, last),
        24,
    ));
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let stag = mem
        .register(
            pd,
            vec![last; 4096],
            Access::LOCAL_READ | Access::LOCAL_WRITE,
            0,
        )
        .unwrap();
    (Stack::new(c, mem), pd, stag)
}

#[test]
fn a_receive_posted_with_connect_after_the_association_is_up_is_used() {
    let (sa, pd_a, stag_a) = stack(1);
    let (sb, pd_b, stag_b) = stack(2);
    let (cq_a, cq_b) = (Arc::new(CqRing::new(64)), Arc::new(CqRing::new(64)));
    let mut link = VirtualLink::new(sa, sb, LinkConfig::default());
    link.command(
        Side::A,
        Command::Listen {
            port: 7000,
            transport: Transport::Sctp,
            ulp: ulp(pd_a, Some(&cq_a), SetupTimeouts::default()),
        },
    );
    link.command(
        Side::B,
        Command::Connect {
            token: 7,
            remote: Ipv4Address::new(10, 6, 1, 1),
            port: 7000,
            transport: Transport::Sctp,
            ulp: ulp(pd_b, Some(&cq_b), SetupTimeouts::default()),
        },
    );
    // Until the association is up on B (COOKIE-ACK), with A's request
    // left unanswered: the session is not established yet.
    let mut request = None;
    assert!(link.run_until(1_000_000, |l| {
        while let Some(o) = l.outputs(Side::A).pop_front() {
            if let Output::Cm(sock, CmEvent::ConnectRequest(_)) = o {
                request = Some(sock);
            }
        }
        l.outputs(Side::B)
            .iter()
            .any(|o| matches!(o, Output::Connected { token: 7, .. }))
    }));
    // Now the receive the application posted with its connect arrives.
    link.command(
        Side::B,
        Command::IwarpOpening(
            7,
            HostCommand::PostRecv(
                42,
                Sge {
                    stag: stag_b,
                    to: 0,
                    len: 4096,
                }
                .into(),
            ),
        ),
    );
    assert!(link.run_until(1_000_000, |l| {
        while let Some(o) = l.outputs(Side::A).pop_front() {
            if let Output::Cm(sock, CmEvent::ConnectRequest(_)) = o {
                request = Some(sock);
            }
        }
        request.is_some()
    }));
    let sock_a = request.unwrap();
    link.command(
        Side::A,
        Command::Accept {
            sock: sock_a,
            private_data: Vec::new(),
            ird: 4,
            ord: 4,
            cq: Some(cq_a.clone().into()),
            pd: None,
        },
    );
    // A sends first, as soon as it accepted.
    link.command(
        Side::A,
        Command::Iwarp(
            sock_a,
            HostCommand::PostSend(WorkRequest::Send {
                wr_id: 1,
                signaled: true,
                local: Sge {
                    stag: stag_a,
                    to: 0,
                    len: 3000,
                }
                .into(),
                solicited: false,
                invalidate: None,
            }),
        ),
    );
    let mut got = None;
    assert!(
        link.run_until(2_000_000, |_| {
            if let Some((_, e)) = cq_b.ring.pop() {
                got = Some(e);
            }
            got.is_some()
        }),
        "no completion on B: the receive posted with the connect was lost"
    );
    match got.unwrap() {
        CqEntry::Done(c) => {
            assert_eq!((c.wr_id, c.opcode, c.byte_len), (42, WcOpcode::Recv, 3000));
        }
        other => panic!("{other:?}"),
    }
}
