//! Two `SctpHost`s on the simulated link in virtual time
//! (`iwarp_datapath::virtual_link`): no threads, no clock, so each run is a
//! pure function of its seed and a failure replays exactly. Seeded loss,
//! loss bursts, reordering, duplication and corruption, over raw IPv4 and
//! over UDP (RFC 6951): association with the DDP indication, a session,
//! 120 segments A→B and 40 B→A (every DDP-SSN and octet checked), Terminate,
//! graceful shutdown; the link must have dropped and corrupted frames and
//! the associations must have retransmitted.

#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use std::collections::BTreeMap;

use ddp_sctp::{DdpEvent, SessionEnd};
use iwarp_datapath::link::virtual_link::{LinkConfig, LinkFaults, Side, VirtualLink};
use iwarp_datapath::over_sctp::{SctpCommand, SctpHost, SctpHostConfig, SctpOutput};
use sctp_lite::assoc::CloseReason;

const A_TO_B: usize = 120;
const B_TO_A: usize = 40;
const SEG: usize = 1000;
/// Bound on the steps (10 µs each) any one wait may take: 60 s virtual.
const MAX_STEPS: u64 = 6_000_000;

fn host(last: u8, udp: bool) -> SctpHost {
    let mut c = SctpHostConfig::new([0x02, 0, 0, 0, 0x5d, last], [10, 9, 0, last], [last; 16]);
    c.sctp.streams = 2;
    c.sctp.rto_min = 10_000_000;
    c.sctp.rto_initial = 50_000_000;
    c.sctp.sack_delay = 2_000_000;
    if udp {
        c.udp_port = Some(9899);
        c.sctp.max_packet -= 8;
    }
    SctpHost::new(c).unwrap()
}

fn segment(from: u8, i: usize) -> Vec<u8> {
    (0..SEG)
        .map(|k| (k as u8) ^ (i as u8).wrapping_mul(29) ^ from)
        .collect()
}

/// Steps until an output of `side` matches `pick`; takes it.
fn wait<T>(
    link: &mut VirtualLink<SctpHost>,
    side: Side,
    what: &str,
    mut pick: impl FnMut(&SctpOutput) -> Option<T>,
) -> T {
    for _ in 0..MAX_STEPS {
        let outs = link.outputs(side);
        if let Some(i) = outs.iter().position(|o| pick(o).is_some()) {
            let o = outs.remove(i).unwrap();
            return pick(&o).unwrap();
        }
        link.step();
    }
    panic!(
        "{side:?}: no {what} at {} ns; outputs: {:?}",
        link.now(),
        link.outputs(side)
    );
}

fn receive(
    link: &mut VirtualLink<SctpHost>,
    side: Side,
    id: u64,
    n: usize,
) -> BTreeMap<u16, Vec<u8>> {
    let mut got = BTreeMap::new();
    while got.len() < n {
        let (ssn, seg) = wait(link, side, "segment", |o| match o {
            SctpOutput::Event(
                x,
                DdpEvent::Segment {
                    stream: 0,
                    ddp_ssn,
                    segment,
                },
            ) if *x == id => Some((*ddp_ssn, segment.clone())),
            _ => None,
        });
        assert!(got.insert(ssn, seg).is_none(), "DDP-SSN {ssn} twice");
    }
    got
}

fn run(seed: u64, udp: bool) {
    let cfg = LinkConfig {
        seed,
        faults: LinkFaults {
            loss: 30_000,
            burst: 3_000,
            burst_len: 4,
            reorder: 20_000,
            dup: 10_000,
            corrupt: 20_000,
        },
        ..LinkConfig::default()
    };
    let mut link = VirtualLink::new(host(1, udp), host(2, udp), cfg);
    link.command(Side::B, SctpCommand::Listen { port: 5000 });
    link.command(
        Side::A,
        SctpCommand::Connect {
            token: 1,
            remote: [10, 9, 0, 2],
            port: 5000,
            local_port: 40000,
            udp_port: udp.then_some(9899),
        },
    );
    let ia = wait(&mut link, Side::A, "Opening", |o| match o {
        SctpOutput::Opening { token: 1, result } => Some(result.unwrap()),
        _ => None,
    });
    let ib = wait(&mut link, Side::B, "Accepted", |o| match o {
        SctpOutput::Accepted { assoc, .. } => Some(*assoc),
        _ => None,
    });
    for (side, id) in [(Side::A, ia), (Side::B, ib)] {
        wait(&mut link, side, "Connected", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
            _ => None,
        });
    }
    link.command(
        Side::A,
        SctpCommand::Initiate {
            assoc: ia,
            stream: 0,
            private_data: b"virtual".to_vec(),
        },
    );
    wait(&mut link, Side::B, "SessionRequested", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionRequested { stream: 0, .. }) if *x == ib => Some(()),
        _ => None,
    });
    link.command(
        Side::B,
        SctpCommand::Accept {
            assoc: ib,
            stream: 0,
            private_data: Vec::new(),
        },
    );
    wait(&mut link, Side::A, "SessionAccepted", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionAccepted { stream: 0, .. }) if *x == ia => Some(()),
        _ => None,
    });
    for i in 0..A_TO_B {
        link.command(
            Side::A,
            SctpCommand::Segment {
                assoc: ia,
                stream: 0,
                segment: segment(0xa, i),
            },
        );
    }
    for i in 0..B_TO_A {
        link.command(
            Side::B,
            SctpCommand::Segment {
                assoc: ib,
                stream: 0,
                segment: segment(0xb, i),
            },
        );
    }
    let at_b = receive(&mut link, Side::B, ib, A_TO_B);
    let at_a = receive(&mut link, Side::A, ia, B_TO_A);
    for (got, from) in [(&at_b, 0xa), (&at_a, 0xb)] {
        for (i, (ssn, seg)) in got.iter().enumerate() {
            // RFC 5043 §5.2.1: the Initiate / Accept took DDP-SSN 0.
            assert_eq!(usize::from(*ssn), i + 1);
            assert_eq!(seg, &segment(from, i), "seed {seed}: segment {i}");
        }
    }
    link.command(
        Side::A,
        SctpCommand::Terminate {
            assoc: ia,
            stream: 0,
        },
    );
    let why = wait(&mut link, Side::B, "SessionEnded", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionEnded { stream: 0, why, .. }) if *x == ib => {
            Some(*why)
        }
        _ => None,
    });
    assert_eq!(why, SessionEnd::PeerTerminated);
    link.command(Side::A, SctpCommand::Shutdown(ia));
    for (side, id) in [(Side::A, ia), (Side::B, ib)] {
        let why = wait(&mut link, side, "Closed", |o| match o {
            SctpOutput::Event(x, DdpEvent::Closed(why)) if *x == id => Some(*why),
            _ => None,
        });
        assert_eq!(why, CloseReason::Shutdown, "seed {seed} {side:?}");
    }
    for side in [Side::A, Side::B] {
        let refused: Vec<_> = link
            .outputs(side)
            .iter()
            .filter(|o| matches!(o, SctpOutput::Refused(..)))
            .cloned()
            .collect();
        assert!(refused.is_empty(), "{refused:?}");
    }
    let ls = link.stats();
    let (a, b) = link.into_engines();
    let (sa, sb) = (a.stats(), b.stats());
    println!("seed {seed} udp {udp}: link {ls:?}\nA {sa:?}\nB {sb:?}");
    assert!(ls.lost + ls.burst_lost > 0 && ls.corrupted > 0, "{ls:?}");
    assert!(sa.closed_retransmits + sb.closed_retransmits > 0);
}

#[test]
fn sctp_hosts_on_a_faulty_virtual_link() {
    for seed in 1..=3 {
        run(seed, false);
    }
}

#[test]
fn sctp_hosts_on_a_faulty_virtual_link_in_udp() {
    for seed in 11..=13 {
        run(seed, true);
    }
}
