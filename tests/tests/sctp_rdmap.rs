//! RDMAP over DDP/SCTP (RFC 5043) end to end in virtual time: two queue
//! pairs (`proto::qp::Qp` over the segment lower layer, glued by
//! `datapath::over_sctp::qp::SctpQp`) on two `DdpAssociation`s over a
//! seeded link with loss, duplication, reordering and corruption. Every
//! RDMAP operation — Send, Send with SE, Send with Invalidate, Send with
//! SE and Invalidate, RDMA Write, RDMA Read, Terminate — is checked byte
//! for byte, with its completions; a Terminate ends the DDP Stream Session
//! on both sides and leaves the association up (RFC 5043 §6.2, §11.3).
//! Segments go to SCTP by reference, as the stack sends them
//! (`AssocRefSink`): written into each packet from registered memory.
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use ddp_sctp::{listener, DdpAssociation, DdpEvent, SessionEnd};
use iwarp_datapath::over_sctp::qp::{AssocRefSink, AssocSink, SctpQp};
use iwarp_proto::mem::{Access, AccessError, MemoryTable, PdId, STag};
use iwarp_proto::qp::{
    Completion, QpConfig, QpEvent, QpState, Sge, WcOpcode, WcStatus, WorkRequest,
};
use iwarp_proto::wire::{DdpHeader, TermCode};
use iwarp_testlink::{DatagramLink, Dir, Faults, LinkConfig};
use sctp_lite::assoc::{CloseReason, Config, ListenOutcome, Listener};

const MS: u64 = 1_000_000;

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 2,
        max_packet: 1200,
        rto_initial: 100 * MS,
        rto_min: 50 * MS,
        rto_max: 2_000 * MS,
        max_retransmits: 30,
        sack_delay: 20 * MS,
        ..Config::default()
    }
}

fn qp_cfg(pd: PdId) -> QpConfig {
    QpConfig {
        pd,
        ird: 4,
        ord: 4,
        mulpdu: 0, // set from the association
        crc: false,
        markers_tx: false,
        markers_rx: false,
        sq_depth: 64,
        rq_depth: 64,
    }
}

/// One side: association, memory, QP and what it saw.
struct Side {
    assoc: Option<DdpAssociation>,
    mem: MemoryTable,
    pd: PdId,
    qp: Option<SctpQp>,
    events: Vec<DdpEvent>,
    comps: Vec<Completion>,
    qp_events: Vec<QpEvent>,
    /// The most segments its QP had given SCTP by reference and not yet
    /// seen acknowledged.
    max_records: usize,
}

impl Side {
    fn new(assoc: Option<DdpAssociation>) -> Side {
        let mut mem = MemoryTable::new();
        let pd = mem.alloc_pd();
        Side {
            assoc,
            mem,
            pd,
            qp: None,
            events: Vec::new(),
            comps: Vec::new(),
            qp_events: Vec::new(),
            max_records: 0,
        }
    }
    fn reg(&mut self, buf: Vec<u8>, access: Access) -> STag {
        self.mem.register(self.pd, buf, access, 0).unwrap()
    }
    fn bytes(&self, stag: STag) -> Vec<u8> {
        self.mem.snapshot(stag).unwrap()
    }
    fn qp(&mut self) -> &mut SctpQp {
        self.qp.as_mut().unwrap()
    }
    fn post(&mut self, wr: WorkRequest) {
        let q = self.qp.as_mut().unwrap();
        q.qp().post_send(&self.mem, wr).unwrap();
    }
    fn post_recv(&mut self, wr_id: u64, stag: STag, len: u32) {
        let q = self.qp.as_mut().unwrap();
        q.qp()
            .post_recv(&self.mem, wr_id, Sge { stag, to: 0, len })
            .unwrap();
    }
    /// Move packets out, events in, QP segments out; returns packets.
    fn turn(&mut self, now: u64) -> Vec<Vec<u8>> {
        let mut pkts = Vec::new();
        let Some(a) = self.assoc.as_mut() else {
            return pkts;
        };
        if let Some(q) = self.qp.as_mut() {
            q.transmit(&self.mem, &mut AssocRefSink(AssocSink { assoc: a, now }));
        }
        while let Some(e) = a.poll_event() {
            let used = match self.qp.as_mut() {
                Some(q) => q.handle_event(&e, &mut self.mem),
                None => false,
            };
            if !used || matches!(e, DdpEvent::SessionEnded { .. } | DdpEvent::Closed(_)) {
                self.events.push(e);
            }
        }
        if let Some(q) = self.qp.as_mut() {
            q.transmit(&self.mem, &mut AssocRefSink(AssocSink { assoc: a, now }));
            self.max_records = self.max_records.max(q.unacked_records());
            while let Some(c) = q.qp().poll_completion() {
                self.comps.push(c);
            }
            while let Some(e) = q.qp().poll_event() {
                self.qp_events.push(e);
            }
        }
        // Segments go by reference: each packet that carries one has it
        // written from the QP's record (registered memory), first
        // transmission and retransmissions alike.
        let mut buf = vec![0u8; 2048];
        let (qp, mem) = (&mut self.qp, &self.mem);
        let mut fill =
            |key: u64, dst: &mut [u8]| qp.as_mut().is_some_and(|q| q.fill(mem, key, dst));
        while let Some(n) = a.poll_transmit_with(now, &mut buf, &mut fill) {
            pkts.push(buf[..n].to_vec());
        }
        assert!(!a.ext_failed(), "every segment's record was there to write");
        pkts
    }
}

struct World {
    now: u64,
    link: DatagramLink,
    a: Side,
    b: Side,
    l: Listener,
    /// Segments go to SCTP by reference (`SctpQp::set_by_reference`).
    by_ref: bool,
}

impl World {
    /// 1 ms one way; a reordered copy arrives up to 20 ms late.
    fn new(seed: u64, faults: Faults) -> World {
        World {
            now: 0,
            link: DatagramLink::new(LinkConfig {
                seed,
                faults,
                latency: MS,
                reorder_max: 20 * MS,
            }),
            a: Side::new(Some(
                DdpAssociation::connect(cfg(1), 4000, 5000, 0, seed).unwrap(),
            )),
            b: Side::new(None),
            l: listener(cfg(2)).unwrap(),
            by_ref: false,
        }
    }

    fn send(&mut self, to_b: bool, p: Vec<u8>) {
        self.link.send(self.now, Dir::to_b(to_b), p);
    }

    fn step(&mut self) -> bool {
        for p in self.a.turn(self.now) {
            self.send(true, p);
        }
        for p in self.b.turn(self.now) {
            self.send(false, p);
        }
        let next_pkt = self.link.next_arrival();
        let next = [
            next_pkt,
            self.a.assoc.as_ref().and_then(|a| a.poll_timeout()),
            self.b.assoc.as_ref().and_then(|b| b.poll_timeout()),
        ]
        .into_iter()
        .flatten()
        .min();
        let Some(next) = next else { return false };
        self.now = self.now.max(next);
        while let Some((dir, p)) = self.link.pop_due(self.now) {
            if dir == Dir::BtoA {
                if let Some(a) = self.a.assoc.as_mut() {
                    a.handle_packet(self.now, &p);
                }
            } else if let Some(b) = self.b.assoc.as_mut() {
                b.handle_packet(self.now, &p);
            } else {
                let mut out = vec![0u8; 2048];
                match self.l.handle_packet(self.now, &p, &mut out) {
                    ListenOutcome::Reply(n) => {
                        let r = out[..n].to_vec();
                        self.send(false, r);
                    }
                    ListenOutcome::Accept(s) => {
                        self.b.assoc = Some(DdpAssociation::wrap(*s, cfg(2).max_packet))
                    }
                    ListenOutcome::Drop => {}
                }
            }
        }
        for s in [&mut self.a, &mut self.b] {
            if let Some(x) = s.assoc.as_mut() {
                if x.poll_timeout().is_some_and(|t| t <= self.now) {
                    x.handle_timeout(self.now);
                }
            }
        }
        true
    }

    fn run_until(&mut self, what: &str, mut done: impl FnMut(&World) -> bool) {
        for _ in 0..2_000_000 {
            if done(self) {
                return;
            }
            let more = self.step();
            if !more && done(self) {
                return;
            }
            assert!(
                more,
                "stalled with nothing scheduled ({what}); A: {:?}; B: {:?}",
                self.a.events, self.b.events
            );
            assert!(self.now < 3_600_000 * MS, "virtual hour passed ({what})");
        }
        panic!("did not finish: {what}");
    }

    /// Association up, session on DDP stream 0, a QP on each side.
    fn open(&mut self) {
        self.run_until("connected", |w| {
            w.a.events.contains(&DdpEvent::Connected) && w.b.events.contains(&DdpEvent::Connected)
        });
        let mp = self.a.assoc.as_ref().unwrap().mulpdu();
        self.a.qp = Some(SctpQp::new(qp_cfg(self.a.pd), None, 0, mp, false));
        self.a.qp().set_by_reference(self.by_ref);
        self.a
            .assoc
            .as_mut()
            .unwrap()
            .initiate(0, b"ird=4 ord=4")
            .unwrap();
        self.run_until("session requested", |w| {
            w.b.events
                .iter()
                .any(|e| matches!(e, DdpEvent::SessionRequested { stream: 0, .. }))
        });
        let b = self.b.assoc.as_mut().unwrap();
        let mp = b.mulpdu();
        b.accept(0, b"ird=4 ord=4").unwrap();
        self.b.qp = Some(SctpQp::new(qp_cfg(self.b.pd), None, 0, mp, true));
        self.b.qp().set_by_reference(self.by_ref);
        self.run_until("session accepted", |w| {
            w.a.events
                .iter()
                .any(|e| matches!(e, DdpEvent::SessionAccepted { stream: 0, .. }))
        });
    }
}

fn pattern(len: usize, salt: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(salt) ^ (i >> 8) as u8)
        .collect()
}

/// 4% loss, 3% duplication, 15% of copies late, 1% corruption.
const LOSSY: Faults = Faults::per_mille(40, 30, 150, 10);

/// Every RDMAP data operation from A to B (and a Read and a Send back),
/// each checked byte for byte, then a clean session end and shutdown.
fn every_operation(seed: u64, faults: Faults) -> u64 {
    let (held, records) = every_operation_by(seed, faults, false);
    assert_eq!(records, 0, "copied, not given by reference");
    held
}

/// [`every_operation`], segments given to SCTP by reference (`by_ref`:
/// written into each packet from registered memory) or copied into it.
fn every_operation_by(seed: u64, faults: Faults, by_ref: bool) -> (u64, usize) {
    let mut w = World::new(seed, faults);
    w.by_ref = by_ref;
    w.open();
    const W: usize = 20_000;
    const R: usize = 30_000;
    const S: usize = 5_000;
    // A's sources and sinks.
    let a_send: Vec<STag> = (0..4)
        .map(|k| w.a.reg(pattern(S + k, 10 + k as u8), Access::LOCAL_READ))
        .collect();
    let a_write = w.a.reg(pattern(W, 20), Access::LOCAL_READ);
    let a_sink = w.a.reg(vec![0; R], Access::LOCAL_WRITE);
    let a_src = w.a.reg(pattern(R, 40), Access::ALL);
    let a_recv = w.a.reg(vec![0; S], Access::LOCAL_WRITE);
    // B's buffers.
    let b_recv: Vec<STag> = (0..4)
        .map(|_| w.b.reg(vec![0; S + 8], Access::LOCAL_WRITE))
        .collect();
    let b_write = w.b.reg(vec![0; W], Access::ALL);
    let b_src = w.b.reg(pattern(R, 30), Access::ALL);
    let b_sink = w.b.reg(vec![0; R], Access::LOCAL_WRITE);
    let b_send = w.b.reg(pattern(S, 50), Access::LOCAL_READ);
    // Two STags at B for the peer to invalidate.
    let inv1 = w.b.reg(vec![0; 64], Access::ALL);
    let inv2 = w.b.reg(vec![0; 64], Access::ALL);
    for (k, &s) in b_recv.iter().enumerate() {
        w.b.post_recv(100 + k as u64, s, (S + 8) as u32);
    }
    w.a.post_recv(200, a_recv, S as u32);
    // RDMA Write, then the four Sends (the first one tells B the Write is
    // there: RFC 5040 §5.5, placement before the later Send's delivery),
    // then an RDMA Read.
    w.a.post(WorkRequest::Write {
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
    });
    let kinds = [
        (false, None),
        (true, None),
        (false, Some(inv1)),
        (true, Some(inv2)),
    ];
    for (k, (se, inv)) in kinds.iter().enumerate() {
        w.a.post(WorkRequest::Send {
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
        });
    }
    w.a.post(WorkRequest::Read {
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
    });
    // B reads from A and sends to A at the same time.
    w.b.post(WorkRequest::Read {
        wr_id: 7,
        signaled: true,
        local: Sge {
            stag: b_sink,
            to: 0,
            len: R as u32,
        }
        .into(),
        remote_stag: a_src,
        remote_to: 0,
    });
    w.b.post(WorkRequest::Send {
        wr_id: 8,
        signaled: true,
        local: Sge {
            stag: b_send,
            to: 0,
            len: S as u32,
        }
        .into(),
        solicited: false,
        invalidate: None,
    });
    let mut write_seen_first = false;
    w.run_until("every operation", |w| {
        // When B's first receive completes, the Write before it is placed.
        if !write_seen_first && w.b.comps.iter().any(|c| c.wr_id == 100) {
            assert_eq!(w.b.bytes(b_write), pattern(W, 20), "seed {seed}");
            write_seen_first = true;
        }
        w.a.comps.len() == 7 && w.b.comps.len() == 6
    });
    assert!(write_seen_first);
    // A: Write, four Sends, Read in posting order; then its receive
    // (interleaved by arrival, so checked apart).
    let a_sq: Vec<_> =
        w.a.comps
            .iter()
            .filter(|c| c.opcode != WcOpcode::Recv)
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
        ],
        "seed {seed}"
    );
    let a_rx: Vec<_> =
        w.a.comps
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
            .map(|c| (c.wr_id, c.status, c.byte_len))
            .collect();
    assert_eq!(a_rx, vec![(200, WcStatus::Success, S as u32)]);
    assert_eq!(w.a.bytes(a_recv), pattern(S, 50));
    assert_eq!(w.a.bytes(a_sink), pattern(R, 30));
    // B: four receives in order with their flags, then its Read and Send.
    let b_rx: Vec<_> =
        w.b.comps
            .iter()
            .filter(|c| c.opcode == WcOpcode::Recv)
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
        assert_eq!(w.b.bytes(stag)[..S + k], pattern(S + k, 10 + k as u8)[..]);
    }
    // RFC 5040 §5.3: the STags are invalid once the Sends were delivered.
    for s in [inv1, inv2] {
        assert_eq!(
            w.b.mem
                .check(s, w.b.pd, Access::REMOTE_WRITE, 0, 1)
                .unwrap_err(),
            AccessError::InvalidStag
        );
    }
    let b_sq: Vec<_> =
        w.b.comps
            .iter()
            .filter(|c| c.opcode != WcOpcode::Recv)
            .map(|c| (c.wr_id, c.opcode, c.status, c.byte_len))
            .collect();
    assert_eq!(
        b_sq,
        vec![
            (7, WcOpcode::Read, WcStatus::Success, R as u32),
            (8, WcOpcode::Send, WcStatus::Success, S as u32),
        ]
    );
    assert_eq!(w.b.bytes(b_write), pattern(W, 20));
    assert_eq!(w.b.bytes(b_sink), pattern(R, 40));
    for s in [&mut w.a, &mut w.b] {
        assert!(s.qp_events.is_empty(), "{:?}", s.qp_events);
        assert_eq!(s.qp().qp_ref().state(), QpState::Rts);
    }
    let held = w.a.qp().qp_ref().segment_stats().unwrap().held
        + w.b.qp().qp_ref().segment_stats().unwrap().held;
    let (sa, sb) = (
        w.a.assoc.as_ref().unwrap().sctp().stats(),
        w.b.assoc.as_ref().unwrap().sctp().stats(),
    );
    println!("seed {seed}: {held} segments held for reordering; A {sa:?}; B {sb:?}");
    if faults.loss > 0 {
        assert!(
            sa.retransmits + sb.retransmits > 0
                && sa.dup_data_received + sb.dup_data_received > 0
                && held > 0,
            "seed {seed}: the faults were not exercised"
        );
    }
    // Clean end: SCTP shutdown; both QPs see their LLP go (nothing posted).
    w.a.assoc.as_mut().unwrap().shutdown(w.now);
    w.run_until("closed", |w| {
        w.a.events
            .contains(&DdpEvent::Closed(CloseReason::Shutdown))
            && w.b
                .events
                .contains(&DdpEvent::Closed(CloseReason::Shutdown))
    });
    (held, w.a.max_records.max(w.b.max_records))
}

#[test]
fn every_rdmap_operation_over_sctp_clean_link() {
    every_operation(1, Faults::NONE);
}

#[test]
fn every_rdmap_operation_over_sctp_faulty_link() {
    let mut held = 0;
    for seed in 1..=4 {
        held += every_operation(seed, LOSSY);
    }
    // Segments did arrive ahead of earlier ones and waited for them.
    assert!(held > 0, "no segment arrived out of order");
}

/// The same with segments given to SCTP by reference: every packet that
/// carries one, retransmissions of lost and corrupted ones included, has
/// it written from registered memory, and the Sends and Writes complete
/// once SCTP has them acknowledged.
#[test]
fn every_rdmap_operation_over_sctp_by_reference() {
    let (_, records) = every_operation_by(1, Faults::NONE, true);
    assert!(records > 0, "no segment went by reference");
    let mut held = 0;
    for seed in 1..=4 {
        let (h, records) = every_operation_by(seed, LOSSY, true);
        assert!(records > 0, "no segment went by reference");
        held += h;
    }
    assert!(held > 0, "no segment arrived out of order");
}

/// A Terminate over SCTP behaves as over MPA: B finds A's RDMA Write
/// names an invalid STag, sends an RDMAP Terminate with the DDP header
/// (RFC 5041 §7.2 0x1/0x00), A receives exactly it; both QPs go to error
/// and flush; then the DDP Stream Session ends both ways (RFC 5043 §6.2)
/// and the association stays up (§11.3) until it is shut down.
#[test]
fn terminate_over_sctp() {
    for (seed, faults) in [(9, Faults::NONE), (10, LOSSY), (11, LOSSY)] {
        let mut w = World::new(seed, faults);
        w.open();
        let src = w.a.reg(pattern(3000, 1), Access::LOCAL_READ);
        let b_mr = w.b.reg(vec![0; 3000], Access::ALL);
        let b_rq = w.b.reg(vec![0; 100], Access::LOCAL_WRITE);
        w.b.post_recv(50, b_rq, 100);
        let bad = STag(b_mr.0 ^ 0x100);
        w.a.post(WorkRequest::Write {
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
        });
        w.run_until("terminate both ways", |w| {
            w.a.qp_events
                .iter()
                .any(|e| matches!(e, QpEvent::TerminateReceived(_)))
                && w.a
                    .events
                    .iter()
                    .any(|e| matches!(e, DdpEvent::SessionEnded { stream: 0, .. }))
                && w.b
                    .events
                    .iter()
                    .any(|e| matches!(e, DdpEvent::SessionEnded { stream: 0, .. }))
        });
        let sent =
            w.b.qp_events
                .iter()
                .find_map(|e| match e {
                    QpEvent::TerminateSent(t) => Some(*t),
                    _ => None,
                })
                .expect("B sent a Terminate");
        let got =
            w.a.qp_events
                .iter()
                .find_map(|e| match e {
                    QpEvent::TerminateReceived(t) => Some(*t),
                    _ => None,
                })
                .unwrap();
        assert_eq!(got, sent, "seed {seed}");
        assert_eq!(got.code, TermCode::DDP_T_INVALID_STAG);
        match got.ddp_header {
            Some(DdpHeader::Tagged(h)) => {
                assert_eq!((h.stag, h.to), (bad.0, 0));
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(w.b.bytes(b_mr), vec![0; 3000], "nothing placed");
        assert_eq!(w.a.qp().qp_ref().state(), QpState::Error);
        assert_eq!(w.b.qp().qp_ref().state(), QpState::Error);
        // B's posted receive is flushed.
        assert_eq!(
            w.b.comps
                .iter()
                .map(|c| (c.wr_id, c.status))
                .collect::<Vec<_>>(),
            vec![(50, WcStatus::Flushed)]
        );
        // The peer's Session Terminate (or ours) ended each side's session.
        for s in [&w.a, &w.b] {
            assert!(s.events.iter().any(|e| matches!(
                e,
                DdpEvent::SessionEnded {
                    stream: 0,
                    why: SessionEnd::PeerTerminated | SessionEnd::LocalTerminated,
                    ..
                }
            )));
            assert!(!s.events.iter().any(|e| matches!(e, DdpEvent::Closed(_))));
        }
        w.b.assoc.as_mut().unwrap().shutdown(w.now);
        w.run_until("closed", |w| {
            w.a.events
                .contains(&DdpEvent::Closed(CloseReason::Shutdown))
                && w.b
                    .events
                    .contains(&DdpEvent::Closed(CloseReason::Shutdown))
        });
    }
}
