//! RDMAP over DDP/SCTP between two of our stacks on real poll loops: two
//! `SctpHost` engines (raw IPv4 protocol 132) carry the DDP Segments of two
//! queue pairs (`SctpQp`, driven from the test thread through the engines'
//! command and output queues). Every RDMAP operation — the four Sends,
//! RDMA Write, RDMA Read, and a Terminate on a second DDP stream of the
//! same association — is checked byte for byte. Over `MemDevice`, over
//! `FaultyDevice` (loss, reordering, duplication, corruption) and over
//! AF_XDP on a veth pair between two network namespaces (needs root; under
//! `CI` the test fails rather than skips when it cannot run).
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

mod sctp_util;

use std::time::{Duration, Instant};

use ddp_sctp::{DdpError, DdpEvent, SessionEnd};
use iwarp_datapath::link::{Faults, FaultyDevice, MemDevice};
use iwarp_datapath::over_sctp::qp::{SctpQp, SegmentSink};
use iwarp_datapath::over_sctp::{AssocId, SctpCommand, SctpHost, SctpHostConfig, SctpOutput};
use iwarp_datapath::runtime::LoopHandle;
use iwarp_proto::mem::{Access, AccessError, MemoryTable, PdId, STag};
use iwarp_proto::qp::{
    Completion, QpConfig, QpEvent, QpState, Sge, WcOpcode, WcStatus, WorkRequest,
};
use iwarp_proto::wire::{DdpHeader, TermCode};
use sctp_lite::assoc::CloseReason;
use sctp_util::{start, Host, STEP};

const MAC_A: [u8; 6] = [0x02, 0, 0, 0, 0x5d, 0x0a];
const MAC_B: [u8; 6] = [0x02, 0, 0, 0, 0x5d, 0x0b];
const PORT_A: u16 = 40_002;
const PORT_B: u16 = 5_002;

/// Posts the QP's segments as engine commands.
struct CmdSink<'a> {
    host: &'a Host,
    assoc: AssocId,
}

impl SegmentSink for CmdSink<'_> {
    fn send_segment(&mut self, stream: u16, segment: &[u8]) -> Result<(), DdpError> {
        self.host.post(SctpCommand::Segment {
            assoc: self.assoc,
            stream,
            segment: segment.to_vec(),
        });
        Ok(())
    }
    fn terminate_session(&mut self, stream: u16) -> Result<(), DdpError> {
        self.host.post(SctpCommand::Terminate {
            assoc: self.assoc,
            stream,
        });
        Ok(())
    }
}

struct Side {
    host: Host,
    assoc: AssocId,
    mem: MemoryTable,
    pd: PdId,
    /// One QP per DDP stream in use (index = stream).
    qps: Vec<Option<SctpQp>>,
    events: Vec<DdpEvent>,
    comps: Vec<Vec<Completion>>,
    qp_events: Vec<Vec<QpEvent>>,
}

fn qp_cfg(pd: PdId) -> QpConfig {
    QpConfig {
        pd,
        ird: 4,
        ord: 4,
        mulpdu: 0,
        crc: false,
        markers_tx: false,
        markers_rx: false,
        sq_depth: 64,
        rq_depth: 64,
    }
}

impl Side {
    fn new(host: Host, assoc: AssocId) -> Side {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        Side {
            host,
            assoc,
            mem,
            pd,
            qps: (0..2).map(|_| None).collect(),
            events: Vec::new(),
            comps: vec![Vec::new(), Vec::new()],
            qp_events: vec![Vec::new(), Vec::new()],
        }
    }
    fn reg(&mut self, buf: Vec<u8>, access: Access) -> STag {
        self.mem.register(self.pd, buf, access, 0).unwrap()
    }
    fn bytes(&self, stag: STag) -> Vec<u8> {
        self.mem.snapshot(stag).unwrap()
    }
    fn qp(&mut self, stream: u16) -> &mut SctpQp {
        self.qps[usize::from(stream)].as_mut().unwrap()
    }
    fn post(&mut self, stream: u16, wr: WorkRequest) {
        let q = self.qps[usize::from(stream)].as_mut().unwrap();
        q.qp().post_send(&self.mem, wr).unwrap();
    }
    fn post_recv(&mut self, stream: u16, wr_id: u64, stag: STag, len: u32) {
        let q = self.qps[usize::from(stream)].as_mut().unwrap();
        q.qp()
            .post_recv(&self.mem, wr_id, Sge { stag, to: 0, len })
            .unwrap();
    }
    fn output(&mut self, o: SctpOutput) {
        match o {
            SctpOutput::Event(id, e) if id == self.assoc => {
                let mut used = false;
                for q in self.qps.iter_mut().flatten() {
                    used |= q.handle_event(&e, &mut self.mem);
                }
                if !used || matches!(e, DdpEvent::SessionEnded { .. } | DdpEvent::Closed(_)) {
                    self.events.push(e);
                }
            }
            SctpOutput::Refused(..) | SctpOutput::NoSuchAssoc(_) => {
                panic!("{}: {o:?}", self.host.name)
            }
            other => self.host.kept.push_back(other),
        }
    }
    /// One round: segments out, outputs in; true if anything moved.
    fn turn(&mut self) -> bool {
        let mut moved = false;
        for q in self.qps.iter_mut().flatten() {
            let mut sink = CmdSink {
                host: &self.host,
                assoc: self.assoc,
            };
            moved |= q.transmit(&self.mem, &mut sink) > 0;
        }
        let kept: Vec<_> = self.host.kept.drain(..).collect();
        for o in kept {
            self.output(o);
        }
        for _ in 0..256 {
            let Some(o) = self.host.h.poll() else { break };
            moved = true;
            self.output(o);
        }
        for (i, q) in self.qps.iter_mut().enumerate() {
            let Some(q) = q.as_mut() else { continue };
            while let Some(c) = q.qp().poll_completion() {
                self.comps[i].push(c);
                moved = true;
            }
            while let Some(e) = q.qp().poll_event() {
                self.qp_events[i].push(e);
                moved = true;
            }
        }
        moved
    }
}

/// Turn both sides until `done`, for at most [`STEP`].
fn run_until(a: &mut Side, b: &mut Side, what: &str, mut done: impl FnMut(&Side, &Side) -> bool) {
    let end = Instant::now() + STEP;
    while Instant::now() < end {
        let x = a.turn();
        let y = b.turn();
        if done(a, b) {
            return;
        }
        if !x && !y {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
    panic!(
        "no {what} within {STEP:?}; A: {:?} {:?} {:?}; B: {:?} {:?} {:?}",
        a.events, a.comps, a.qp_events, b.events, b.comps, b.qp_events
    );
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt) ^ (i >> 8) as u8)
        .collect()
}

/// Opens DDP stream `stream` with a QP on each side.
fn open_session(a: &mut Side, b: &mut Side, stream: u16, mulpdu: usize) {
    a.qps[usize::from(stream)] = Some(SctpQp::new(qp_cfg(a.pd), None, stream, mulpdu, false));
    a.host.post(SctpCommand::Initiate {
        assoc: a.assoc,
        stream,
        private_data: b"ird=4 ord=4".to_vec(),
    });
    let ib = b.assoc;
    b.host.wait("SessionRequested", |o| match o {
        SctpOutput::Event(x, DdpEvent::SessionRequested { stream: s, .. })
            if *x == ib && *s == stream =>
        {
            Some(())
        }
        _ => None,
    });
    b.qps[usize::from(stream)] = Some(SctpQp::new(qp_cfg(b.pd), None, stream, mulpdu, true));
    b.host.post(SctpCommand::Accept {
        assoc: ib,
        stream,
        private_data: b"ird=4 ord=4".to_vec(),
    });
    run_until(a, b, "SessionAccepted", |a, _| {
        a.events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionAccepted { stream: s, .. } if *s == stream))
    });
}

fn rdmap(ha: LoopHandle<SctpHost>, hb: LoopHandle<SctpHost>, ip_b: [u8; 4], mulpdu: usize) {
    let mut ha = Host::new(ha, "A");
    let mut hb = Host::new(hb, "B");
    hb.post(SctpCommand::Listen { port: PORT_B });
    assert!(hb.wait("Listening", |o| match o {
        SctpOutput::Listening { port, ok } if *port == PORT_B => Some(*ok),
        _ => None,
    }));
    ha.post(SctpCommand::Connect {
        token: 3,
        remote: ip_b,
        port: PORT_B,
        local_port: PORT_A,
        udp_port: None,
    });
    let ia = ha.wait("Opening", |o| match o {
        SctpOutput::Opening { token: 3, result } => Some(result.unwrap()),
        _ => None,
    });
    let ib = hb.wait("Accepted", |o| match o {
        SctpOutput::Accepted { assoc, .. } => Some(*assoc),
        _ => None,
    });
    for (h, id) in [(&mut ha, ia), (&mut hb, ib)] {
        h.wait("Connected", |o| match o {
            SctpOutput::Event(x, DdpEvent::Connected) if *x == id => Some(()),
            _ => None,
        });
    }
    let mut a = Side::new(ha, ia);
    let mut b = Side::new(hb, ib);
    open_session(&mut a, &mut b, 0, mulpdu);

    // Stream 0: every data operation.
    const W: usize = 40_000;
    const R: usize = 50_000;
    const S: usize = 4_000;
    let a_send: Vec<STag> = (0..4)
        .map(|k| a.reg(pattern(S + k, 10 + k as u8), Access::LOCAL_READ))
        .collect();
    let a_write = a.reg(pattern(W, 20), Access::LOCAL_READ);
    let a_sink = a.reg(vec![0; R], Access::LOCAL_WRITE);
    let b_recv: Vec<STag> = (0..4)
        .map(|_| b.reg(vec![0; S + 8], Access::LOCAL_WRITE))
        .collect();
    let b_write = b.reg(vec![0; W], Access::ALL);
    let b_src = b.reg(pattern(R, 30), Access::ALL);
    let inv1 = b.reg(vec![0; 64], Access::ALL);
    let inv2 = b.reg(vec![0; 64], Access::ALL);
    for (k, &s) in b_recv.iter().enumerate() {
        b.post_recv(0, 100 + k as u64, s, (S + 8) as u32);
    }
    a.post(
        0,
        WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: a_write,
                to: 0,
                len: W as u32,
            }
            .into(),
            remote_stag: b_write,
            remote_to: 0,
        },
    );
    let kinds = [
        (false, None),
        (true, None),
        (false, Some(inv1)),
        (true, Some(inv2)),
    ];
    for (k, (se, inv)) in kinds.iter().enumerate() {
        a.post(
            0,
            WorkRequest::Send {
                wr_id: 2 + k as u64,
                signaled: true,
                local: Sge {
                    stag: a_send[k],
                    to: 0,
                    len: (S + k) as u32,
                }
                .into(),
                solicited: *se,
                invalidate: *inv,
            },
        );
    }
    a.post(
        0,
        WorkRequest::Read {
            wr_id: 6,
            signaled: true,
            local: Sge {
                stag: a_sink,
                to: 0,
                len: R as u32,
            }
            .into(),
            remote_stag: b_src,
            remote_to: 0,
        },
    );
    run_until(&mut a, &mut b, "every operation", |a, b| {
        a.comps[0].len() == 6 && b.comps[0].len() == 4
    });
    let a_sq: Vec<_> = a.comps[0]
        .iter()
        .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
        .collect();
    assert_eq!(
        a_sq,
        vec![
            (1, WcOpcode::Write, WcStatus::Success, W as u32),
            (2, WcOpcode::Send, WcStatus::Success, S as u32),
            (3, WcOpcode::Send, WcStatus::Success, S as u32 + 1),
            (4, WcOpcode::Send, WcStatus::Success, S as u32 + 2),
            (5, WcOpcode::Send, WcStatus::Success, S as u32 + 3),
            (6, WcOpcode::Read, WcStatus::Success, R as u32),
        ]
    );
    let b_rx: Vec<_> = b.comps[0]
        .iter()
        .map(|c| (c.wr_id, c.status, c.byte_len, c.solicited, c.invalidated))
        .collect();
    assert_eq!(
        b_rx,
        vec![
            (100, WcStatus::Success, S as u32, false, None),
            (101, WcStatus::Success, S as u32 + 1, true, None),
            (102, WcStatus::Success, S as u32 + 2, false, Some(inv1)),
            (103, WcStatus::Success, S as u32 + 3, true, Some(inv2)),
        ]
    );
    for (k, &stag) in b_recv.iter().enumerate() {
        assert_eq!(b.bytes(stag)[..S + k], pattern(S + k, 10 + k as u8)[..]);
    }
    assert_eq!(b.bytes(b_write), pattern(W, 20));
    assert_eq!(a.bytes(a_sink), pattern(R, 30));
    for s in [inv1, inv2] {
        assert_eq!(
            b.mem
                .check(s, b.pd, Access::REMOTE_WRITE, 0, 1)
                .unwrap_err(),
            AccessError::InvalidStag
        );
    }
    for s in [&mut a, &mut b] {
        assert!(s.qp_events[0].is_empty(), "{:?}", s.qp_events[0]);
        assert_eq!(s.qp(0).qp_ref().state(), QpState::Rts);
    }

    // Stream 1 of the same association: a Terminate (RDMA Write to a bad
    // STag), exactly as over MPA; the session ends both ways, stream 0 and
    // the association stay up.
    open_session(&mut a, &mut b, 1, mulpdu);
    let src = a.reg(pattern(3000, 1), Access::LOCAL_READ);
    let b_mr = b.reg(vec![0; 3000], Access::ALL);
    let b_rq = b.reg(vec![0; 100], Access::LOCAL_WRITE);
    b.post_recv(1, 50, b_rq, 100);
    let bad = STag(b_mr.0 ^ 0x100);
    a.post(
        1,
        WorkRequest::Write {
            wr_id: 1,
            signaled: true,
            local: Sge {
                stag: src,
                to: 0,
                len: 3000,
            }
            .into(),
            remote_stag: bad,
            remote_to: 0,
        },
    );
    let ended = |s: &Side| {
        s.events
            .iter()
            .any(|e| matches!(e, DdpEvent::SessionEnded { stream: 1, .. }))
    };
    run_until(&mut a, &mut b, "Terminate", |a, b| {
        a.qp_events[1]
            .iter()
            .any(|e| matches!(e, QpEvent::TerminateReceived(_)))
            && ended(a)
            && ended(b)
    });
    let sent = b.qp_events[1]
        .iter()
        .find_map(|e| match e {
            QpEvent::TerminateSent(t) => Some(*t),
            _ => None,
        })
        .expect("B sent a Terminate");
    let got = a.qp_events[1]
        .iter()
        .find_map(|e| match e {
            QpEvent::TerminateReceived(t) => Some(*t),
            _ => None,
        })
        .unwrap();
    assert_eq!(got, sent);
    assert_eq!(got.code, TermCode::DDP_T_INVALID_STAG);
    match got.ddp_header {
        Some(DdpHeader::Tagged(h)) => assert_eq!((h.stag, h.to), (bad.0, 0)),
        other => panic!("{other:?}"),
    }
    assert_eq!(b.bytes(b_mr), vec![0; 3000]);
    assert_eq!(
        b.comps[1]
            .iter()
            .map(|c| (c.wr_id, c.status))
            .collect::<Vec<_>>(),
        vec![(50, WcStatus::Flushed)]
    );
    for s in [&mut a, &mut b] {
        assert_eq!(s.qp(1).qp_ref().state(), QpState::Error);
        assert_eq!(s.qp(0).qp_ref().state(), QpState::Rts);
        assert!(s.events.iter().any(|e| matches!(
            e,
            DdpEvent::SessionEnded {
                stream: 1,
                why: SessionEnd::PeerTerminated | SessionEnd::LocalTerminated,
                ..
            }
        )));
    }
    // Stream 0 still carries data after stream 1's Terminate.
    let last = a.reg(pattern(2000, 99), Access::LOCAL_READ);
    a.post(
        0,
        WorkRequest::Write {
            wr_id: 9,
            signaled: true,
            local: Sge {
                stag: last,
                to: 0,
                len: 2000,
            }
            .into(),
            remote_stag: b_write,
            remote_to: 0,
        },
    );
    b.post_recv(0, 104, b_recv[0], S as u32);
    a.post(
        0,
        WorkRequest::Send {
            wr_id: 10,
            signaled: true,
            local: Sge {
                stag: last,
                to: 0,
                len: 10,
            }
            .into(),
            solicited: false,
            invalidate: None,
        },
    );
    run_until(&mut a, &mut b, "data after the Terminate", |_, b| {
        b.comps[0].len() == 5
    });
    assert_eq!(b.bytes(b_write)[..2000], pattern(2000, 99)[..]);

    // Graceful SCTP shutdown: both QPs of stream 0 see their LLP go.
    a.host.post(SctpCommand::Shutdown(ia));
    run_until(&mut a, &mut b, "Closed", |a, b| {
        a.events.contains(&DdpEvent::Closed(CloseReason::Shutdown))
            && b.events.contains(&DdpEvent::Closed(CloseReason::Shutdown))
    });
    let (ea, _) = a.host.h.stop().unwrap();
    let (eb, _) = b.host.h.stop().unwrap();
    println!("A: {:?}; B: {:?}", ea.stats(), eb.stats());
}

fn mulpdu() -> usize {
    ddp_sctp::mulpdu(SctpHostConfig::new(MAC_A, [0; 4], [0; 16]).sctp.max_packet)
}

#[test]
fn rdmap_over_sctp_engines_memory_link() {
    let (da, db) = MemDevice::pair(4096);
    let ip_b = [10, 78, 0, 2];
    rdmap(
        start(MAC_A, [10, 78, 0, 1], da, false),
        start(MAC_B, ip_b, db, false),
        ip_b,
        mulpdu(),
    );
}

#[test]
fn rdmap_over_sctp_engines_faulty_link() {
    let faults = Faults {
        loss: 30_000,
        reorder: 20_000,
        dup: 10_000,
        corrupt: 10_000,
        ..Faults::default()
    };
    let (da, db) = MemDevice::pair(4096);
    let da = FaultyDevice::new(da, faults, 5);
    let db = FaultyDevice::new(db, faults, 6);
    let ip_b = [10, 78, 1, 2];
    rdmap(
        start(MAC_A, [10, 78, 1, 1], da, false),
        start(MAC_B, ip_b, db, false),
        ip_b,
        mulpdu(),
    );
}

#[test]
fn rdmap_over_sctp_on_af_xdp_in_namespaces() {
    use iwarp_xdp::{in_netns, Config as XdpConfig, XdpDevice};
    use netns_harness::{End, Netns, VethPair};

    if netns_harness::skip_test_without_root() {
        return;
    }
    // Dropped in reverse order of declaration: the veth before the
    // namespaces, each removed by its Drop, on failure too.
    let a = Netns::new("sctp-qa").unwrap();
    let b = Netns::new("sctp-qb").unwrap();
    let mut veth = VethPair::new("sctp").unwrap();
    veth.move_to(End::A, &a).unwrap();
    veth.move_to(End::B, &b).unwrap();
    for end in [End::A, End::B] {
        veth.disable_ipv6(end).unwrap();
        veth.set_up(end).unwrap();
    }
    let id = a.id();
    let ip_a = [10, (id >> 8) as u8, id as u8, 1];
    let ip_b = [10, (id >> 8) as u8, id as u8, 2];
    let open = |ns: &Netns, iface: &str, ip: [u8; 4]| {
        let cfg = XdpConfig::new(iface, ip);
        in_netns(&ns.ns_path(), || XdpDevice::open(&cfg))
            .unwrap()
            .unwrap_or_else(|e| panic!("open {iface}: {e}"))
    };
    let da = open(&a, veth.name(End::A), ip_a);
    let db = open(&b, veth.name(End::B), ip_b);
    let (ma, mb) = (da.mac_address(), db.mac_address());
    rdmap(
        start(ma, ip_a, da, false),
        start(mb, ip_b, db, false),
        ip_b,
        mulpdu(),
    );
}
