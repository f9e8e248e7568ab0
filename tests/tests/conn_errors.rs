//! One error type for both transports (issue 26 item 2): a failed open
//! says which transport event ended it. Over TCP a RST to our SYN is
//! `ConnError::Refused` (tests/tests/stack_link.rs); over SCTP the peer's
//! ABORT is `ConnError::PeerAbort`, no longer squeezed into a TCP RST.
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::sync::Arc;
use std::time::{Duration, Instant};

use iwarp_datapath::link::MemDevice;
use iwarp_datapath::over_sctp::conn::SetupTimeouts;
use iwarp_datapath::runtime::{spawn, Mode};
use iwarp_datapath::stack::{Command, CqRing, Output, Stack, StackConfig, Transport};
use iwarp_datapath::ConnError;
use iwarp_proto::mem::MemoryTable;
use tcp_lite::iface::IfaceConfig;
use tcp_lite::wire::{EthernetAddress, Ipv4Address};

mod sctp_util;

#[test]
fn an_sctp_open_to_a_port_nobody_listens_on_fails_with_the_peers_abort() {
    let (da, db) = MemDevice::pair(4096);
    let mut mem = MemoryTable::new();
    let pd = mem.alloc_pd();
    let cfg = StackConfig::new(IfaceConfig::new(
        EthernetAddress([0x02, 0, 0, 0, 0x78, 1]),
        Ipv4Address::new(10, 0, 8, 1),
        24,
    ));
    let stack = spawn(
        Stack::new(cfg, mem),
        da,
        None,
        Mode::Adaptive {
            spins: 1_000,
            max_sleep: Duration::from_micros(200),
        },
        4096,
    );
    // A raw SCTP host that listens on nothing: it answers our INIT with
    // an ABORT (RFC 9260 §8.4 rule 3 lets it; sctp-lite does).
    let _peer = sctp_util::start([0x02, 0, 0, 0, 0x78, 2], [10, 0, 8, 2], db, false);
    let ring = Arc::new(CqRing::new(16));
    stack
        .post(Command::Connect {
            token: 7,
            remote: Ipv4Address::new(10, 0, 8, 2),
            port: 6000,
            transport: Transport::Sctp,
            ulp: iwarp_tests::raw_sctp::ulp(pd, Some(&ring), SetupTimeouts::default()),
        })
        .unwrap();
    let end = Instant::now() + Duration::from_secs(10);
    let mut seen = Vec::new();
    let error = loop {
        assert!(Instant::now() < end, "no Failed; outputs: {seen:?}");
        match stack.poll() {
            Some(Output::Failed { token: 7, error }) => break error,
            Some(o) => seen.push(o),
            None => std::thread::sleep(Duration::from_micros(200)),
        }
    };
    assert!(
        matches!(error, ConnError::PeerAbort(_)),
        "the peer's ABORT, named as SCTP's: {error:?}"
    );
    assert_eq!(error.transport(), Some("SCTP"));
    let _ = stack.stop();
}
