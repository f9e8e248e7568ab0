//! RFC 5043 over sctp-lite, end to end on a clean in-memory link: the
//! adaptation indication, PPIDs and U flags on the wire, and the legal
//! (and illegal) DDP Stream Session sequences of §6.
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use ddp_sctp::{
    listener, mulpdu, DdpAssociation, DdpError, DdpEvent, SessionEnd, SessionState, ADAPTATION_DDP,
    MIN_MULPDU, PPID_DDP_SEGMENT, PPID_SESSION_CONTROL,
};
use sctp_lite::assoc::{Association, CloseReason, Config, ListenOutcome, Listener};
use sctp_lite::wire::{ChunkRepr, SctpPacket};

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 4,
        ..Config::default()
    }
}

trait Ep {
    fn tx(&mut self, now: u64, buf: &mut [u8]) -> Option<usize>;
    fn rx(&mut self, now: u64, p: &[u8]);
}
impl Ep for DdpAssociation {
    fn tx(&mut self, now: u64, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit(now, buf)
    }
    fn rx(&mut self, now: u64, p: &[u8]) {
        self.handle_packet(now, p)
    }
}
impl Ep for Association {
    fn tx(&mut self, now: u64, buf: &mut [u8]) -> Option<usize> {
        self.poll_transmit(now, buf)
    }
    fn rx(&mut self, now: u64, p: &[u8]) {
        self.handle_packet(now, p)
    }
}

/// Every packet that crossed the link, for wire checks.
type Log = Vec<Vec<u8>>;

fn exchange(a: &mut dyn Ep, b: &mut dyn Ep, log: &mut Log) {
    exchange_at(0, a, b, log)
}

fn exchange_at(now: u64, a: &mut dyn Ep, b: &mut dyn Ep, log: &mut Log) {
    let mut buf = vec![0u8; 2048];
    for _ in 0..20 {
        let mut moved = false;
        while let Some(n) = a.tx(now, &mut buf) {
            log.push(buf[..n].to_vec());
            b.rx(now, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.tx(now, &mut buf) {
            log.push(buf[..n].to_vec());
            a.rx(now, &buf[..n]);
            moved = true;
        }
        if !moved {
            break;
        }
    }
}

/// Connects `a` to a DDP listener; returns the server side.
fn accept(a: &mut dyn Ep, l: &mut Listener, log: &mut Log) -> Option<Association> {
    let mut buf = vec![0u8; 2048];
    let mut out = vec![0u8; 2048];
    for _ in 0..4 {
        let Some(n) = a.tx(0, &mut buf) else { continue };
        log.push(buf[..n].to_vec());
        match l.handle_packet(0, &buf[..n], &mut out) {
            ListenOutcome::Reply(m) => {
                log.push(out[..m].to_vec());
                a.rx(0, &out[..m]);
            }
            ListenOutcome::Accept(s) => return Some(*s),
            ListenOutcome::Drop => {}
        }
    }
    None
}

fn pair(log: &mut Log) -> (DdpAssociation, DdpAssociation) {
    let mut a = DdpAssociation::connect(cfg(1), 4000, 5000, 0, 1).unwrap();
    let mut l = listener(cfg(2)).unwrap();
    let s = accept(&mut a, &mut l, log).unwrap();
    let mut b = DdpAssociation::wrap(s, cfg(2).max_packet);
    exchange(&mut a, &mut b, log);
    assert_eq!(a.poll_event(), Some(DdpEvent::Connected));
    assert_eq!(b.poll_event(), Some(DdpEvent::Connected));
    (a, b)
}

fn events(d: &mut DdpAssociation) -> Vec<DdpEvent> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

/// (ppid, unordered) of every DATA chunk in the log.
fn data_chunks(log: &Log) -> Vec<(u32, bool)> {
    let mut v = Vec::new();
    for p in log {
        let p = SctpPacket::new_checked(&p[..]).unwrap();
        for c in p.chunks() {
            if let Ok(ChunkRepr::Data(d)) = ChunkRepr::parse(&c.unwrap()) {
                v.push((d.ppid, d.flags.unordered));
            }
        }
    }
    v
}

#[test]
fn mulpdu_follows_section_9() {
    // 1480-octet SCTP packets: 1480 - 12 - 16 - 2 - 16 (bundling reserve).
    assert_eq!(mulpdu(1480), 1434);
    // Never below 516 (§9).
    assert_eq!(mulpdu(300), MIN_MULPDU);
    assert_eq!(mulpdu(0), MIN_MULPDU);
}

#[test]
fn init_and_init_ack_carry_the_ddp_adaptation_indication() {
    let mut log = Log::new();
    let (a, b) = pair(&mut log);
    // §5.1 / §11.1: parameter 0xC006, length 8, value 0x00000001, in the
    // INIT (first packet) and the INIT-ACK (second), as literal bytes.
    let want = [0xc0, 0x06, 0x00, 0x08, 0x00, 0x00, 0x00, 0x01];
    for p in &log[..2] {
        assert!(
            p.windows(8).any(|w| w == want),
            "no DDP adaptation indication in {p:02x?}"
        );
    }
    assert_eq!(a.sctp().peer_adaptation(), Some(ADAPTATION_DDP));
    assert_eq!(b.sctp().peer_adaptation(), Some(ADAPTATION_DDP));
    // §8: the same number of streams both ways.
    let (o, i) = a.sctp().streams();
    assert_eq!(o, i);
    assert_eq!(a.ddp_streams(), 4);
}

#[test]
fn accepted_session_segments_and_terminate() {
    let mut log = Log::new();
    let (mut a, mut b) = pair(&mut log);
    // §6.6: no segment before the session is accepted.
    assert!(matches!(
        a.send_segment(1, b"early"),
        Err(DdpError::WrongState { .. })
    ));
    a.initiate(1, b"hello").unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert_eq!(
        events(&mut b),
        vec![DdpEvent::SessionRequested {
            stream: 1,
            private_data: b"hello".to_vec()
        }]
    );
    assert_eq!(b.session_state(1), Some(SessionState::InitiateReceived));
    b.accept(1, b"welcome").unwrap();
    // The passive side may send at once; its segments carry DDP-SSN 1, 2...
    assert_eq!(b.send_segment(1, b"from b"), Ok(1));
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut a);
    assert!(ev.contains(&DdpEvent::SessionAccepted {
        stream: 1,
        private_data: b"welcome".to_vec()
    }));
    assert!(ev.contains(&DdpEvent::Segment {
        stream: 1,
        ddp_ssn: 1,
        segment: b"from b".to_vec()
    }));
    // The active side's segments: DDP-SSN continues after the Initiate (0).
    for i in 1..=5u16 {
        assert_eq!(a.send_segment(1, &[i as u8; 100]), Ok(i));
    }
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    for i in 1..=5u16 {
        assert!(ev.contains(&DdpEvent::Segment {
            stream: 1,
            ddp_ssn: i,
            segment: vec![i as u8; 100]
        }));
    }
    // §9: larger than the MULPDU is refused.
    let big = vec![0u8; a.mulpdu() + 1];
    assert_eq!(
        a.send_segment(1, &big),
        Err(DdpError::SegmentTooLarge {
            len: big.len(),
            max: a.mulpdu()
        })
    );
    assert!(a.send_segment(1, &big[1..]).is_ok());
    a.terminate(0, 1).unwrap();
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    assert!(ev.contains(&DdpEvent::SessionEnded {
        stream: 1,
        why: SessionEnd::PeerTerminated,
        private_data: vec![]
    }));
    assert_eq!(b.session_state(1), Some(SessionState::Idle));
    // On the wire: only PPIDs 16 and 17 (§5.2), always unordered (§10).
    let chunks = data_chunks(&log);
    assert!(chunks.iter().any(|c| c.0 == PPID_DDP_SEGMENT));
    assert!(chunks.iter().any(|c| c.0 == PPID_SESSION_CONTROL));
    assert!(
        chunks
            .iter()
            .all(|&(ppid, u)| u && (ppid == 16 || ppid == 17)),
        "{chunks:?}"
    );
    // The stream can carry a new session once the old one is acknowledged.
    a.initiate(1, b"again").unwrap();
}

#[test]
fn rejected_session() {
    let mut log = Log::new();
    let (mut a, mut b) = pair(&mut log);
    a.initiate(2, b"").unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert_eq!(
        events(&mut b),
        vec![DdpEvent::SessionRequested {
            stream: 2,
            private_data: vec![]
        }]
    );
    b.reject(2, b"no PD for you").unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert_eq!(
        events(&mut a),
        vec![DdpEvent::SessionEnded {
            stream: 2,
            why: SessionEnd::Rejected,
            private_data: b"no PD for you".to_vec()
        }]
    );
    assert_eq!(a.session_state(2), Some(SessionState::Idle));
    // Reject only answers a request (§6.3).
    assert!(matches!(b.reject(2, b""), Err(DdpError::WrongState { .. })));
}

#[test]
fn initiates_over_the_pending_limit_are_answered_with_terminate() {
    let mut log = Log::new();
    let (mut a, mut b) = pair(&mut log);
    b.set_max_pending_requests(1);
    a.initiate(1, b"one").unwrap();
    a.initiate(2, b"two").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    assert!(ev.contains(&DdpEvent::SessionRequested {
        stream: 1,
        private_data: b"one".to_vec()
    }));
    assert!(ev.contains(&DdpEvent::SessionEnded {
        stream: 2,
        why: SessionEnd::TooManyPending,
        private_data: vec![]
    }));
    // §5.2.3 / §6.4: the active side sees a Terminate.
    let ev = events(&mut a);
    assert!(ev.contains(&DdpEvent::SessionEnded {
        stream: 2,
        why: SessionEnd::PeerTerminated,
        private_data: vec![]
    }));
}

#[test]
fn private_data_over_512_is_refused_locally() {
    let mut log = Log::new();
    let (mut a, _b) = pair(&mut log);
    assert_eq!(
        a.initiate(0, &[0; 513]),
        Err(DdpError::PrivateDataTooLong(513))
    );
    assert!(a.initiate(0, &[0; 512]).is_ok());
}

/// A raw sctp-lite peer with the DDP indication, to send what a correct
/// DDP peer never would.
fn raw_pair(log: &mut Log) -> (Association, DdpAssociation) {
    let mut a = Association::connect(ddp_sctp::config(cfg(1)), 4000, 5000, 0, 1).unwrap();
    let mut l = listener(cfg(2)).unwrap();
    let s = accept(&mut a, &mut l, log).unwrap();
    let mut b = DdpAssociation::wrap(s, cfg(2).max_packet);
    exchange(&mut a, &mut b, log);
    assert_eq!(b.poll_event(), Some(DdpEvent::Connected));
    (a, b)
}

fn illegal(ev: &[DdpEvent], stream: u16) -> bool {
    ev.iter().any(|e| matches!(e, DdpEvent::SessionEnded { stream: s, why: SessionEnd::IllegalSequence(_), .. } if *s == stream))
}

/// Streams on which `a` received a DDP Stream Session Terminate.
fn terminates_received(a: &mut Association) -> Vec<u16> {
    let mut v = Vec::new();
    while let Some(e) = a.poll_event() {
        if let sctp_lite::assoc::Event::Message(m) = e {
            if m.ppid == PPID_SESSION_CONTROL && m.data.get(2..4) == Some(&[0, 4][..]) {
                v.push(m.stream);
            }
        }
    }
    v
}

/// Issue 27 item 5: a DDP Segment, an ordered chunk or a non-DDP PPID on
/// an idle DDP stream is answered with a Terminate (RFC 5043 §6.1), not
/// only SACKed; while that Terminate is unacknowledged, more stray chunks
/// on the stream draw no more.
#[test]
fn stray_chunks_on_an_idle_stream_are_answered_with_terminate() {
    let mut log = Log::new();
    let (mut a, mut b) = raw_pair(&mut log);
    a.send(0, PPID_DDP_SEGMENT, true, &[0, 0, 1, 2, 3]).unwrap();
    a.send(1, PPID_DDP_SEGMENT, false, &[0, 0, 1, 2, 3])
        .unwrap();
    a.send(2, 99, true, b"plain sctp").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    for s in 0..3 {
        assert!(illegal(&ev, s), "stream {s} not flagged: {ev:?}");
    }
    let mut got = terminates_received(&mut a);
    got.sort();
    assert_eq!(got, vec![0, 1, 2]);
    assert_eq!(b.session_state(0), Some(SessionState::Idle));
    // Two more stray chunks in one go: one Terminate (the first was
    // acknowledged meanwhile).
    a.send(0, PPID_DDP_SEGMENT, true, &[0, 1, 1]).unwrap();
    a.send(0, PPID_DDP_SEGMENT, true, &[0, 2, 1]).unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert_eq!(terminates_received(&mut a), vec![0]);
    // The stream is still free for a session.
    a.send(0, PPID_SESSION_CONTROL, true, &[0, 0, 0, 1])
        .unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert!(events(&mut b)
        .iter()
        .any(|e| matches!(e, DdpEvent::SessionRequested { stream: 0, .. })));
}

#[test]
fn illegal_sequences_terminate_the_session() {
    let mut log = Log::new();
    let (mut a, mut b) = raw_pair(&mut log);
    // A DDP Segment with no session (§6.2).
    a.send(0, PPID_DDP_SEGMENT, true, &[0, 0, 1, 2, 3]).unwrap();
    // An ordered chunk (§10).
    a.send(1, PPID_SESSION_CONTROL, false, &[0, 0, 0, 1])
        .unwrap();
    // A PPID that is not DDP's (§5.1).
    a.send(2, 99, true, b"plain sctp").unwrap();
    // Accept with no Initiate (§6.2).
    a.send(3, PPID_SESSION_CONTROL, true, &[0, 0, 0, 2])
        .unwrap();
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    for s in 0..4 {
        assert!(illegal(&ev, s), "stream {s} not flagged: {ev:?}");
    }
    // A session whose peer sends a segment before the ULP accepted (§6.2),
    // and one whose Initiate does not start at DDP-SSN 0 (§6.1).
    a.send(1, PPID_SESSION_CONTROL, true, &[0, 0, 0, 1])
        .unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert_eq!(
        events(&mut b),
        vec![DdpEvent::SessionRequested {
            stream: 1,
            private_data: vec![]
        }]
    );
    a.send(1, PPID_DDP_SEGMENT, true, &[0, 1, 9]).unwrap();
    a.send(2, PPID_SESSION_CONTROL, true, &[0, 5, 0, 1])
        .unwrap();
    exchange(&mut a, &mut b, &mut log);
    let ev = events(&mut b);
    assert!(illegal(&ev, 1), "{ev:?}");
    assert!(illegal(&ev, 2), "{ev:?}");
    // The session on stream 1 was terminated: a Terminate went back.
    let mut got_terminate = false;
    while let Some(e) = a.poll_event() {
        if let sctp_lite::assoc::Event::Message(m) = e {
            if m.stream == 1 && m.ppid == PPID_SESSION_CONTROL && m.data[2..4] == [0, 4] {
                got_terminate = true;
            }
        }
    }
    assert!(got_terminate);
    // A DDP-SSN far outside the window fails the §10 validity check.
    a.send(3, PPID_SESSION_CONTROL, true, &[0, 0, 0, 1])
        .unwrap();
    exchange(&mut a, &mut b, &mut log);
    let _ = events(&mut b);
    b.accept(3, b"").unwrap();
    a.send(3, PPID_DDP_SEGMENT, true, &[0x80, 0x00, 1]).unwrap();
    exchange(&mut a, &mut b, &mut log);
    assert!(illegal(&events(&mut b), 3));
}

#[test]
fn peers_without_the_ddp_indication_are_refused() {
    // §7.1 / §11.1: a plain SCTP peer (no indication) is turned away by a
    // DDP listener...
    let mut log = Log::new();
    let mut plain = Association::connect(cfg(1), 4000, 5000, 0, 1).unwrap();
    let mut l = listener(cfg(2)).unwrap();
    assert!(accept(&mut plain, &mut l, &mut log).is_none());
    assert!(plain.is_closed());
    // ...and a DDP connector refuses a plain listener's INIT-ACK.
    let mut a = DdpAssociation::connect(cfg(1), 4000, 5000, 0, 1).unwrap();
    let mut pl = Listener::new(cfg(2)).unwrap();
    assert!(accept(&mut a, &mut pl, &mut log).is_none());
    assert_eq!(
        events(&mut a),
        vec![DdpEvent::Closed(CloseReason::AdaptationRefused)]
    );
}

#[test]
fn crossing_terminates_and_late_segments_are_quiet() {
    let mut log = Log::new();
    let (mut a, mut b) = pair(&mut log);
    a.initiate(0, b"").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let _ = events(&mut b);
    b.accept(0, b"").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let _ = events(&mut a);
    // B sends segments and terminates while A terminates too: neither side
    // may see an illegal sequence (§6.2: each side's final chunk MAY be a
    // Terminate; at least one side MUST send one).
    b.send_segment(0, b"late 1").unwrap();
    b.send_segment(0, b"late 2").unwrap();
    a.terminate(0, 0).unwrap();
    b.terminate(0, 0).unwrap();
    exchange(&mut a, &mut b, &mut log);
    for (name, ev) in [("a", events(&mut a)), ("b", events(&mut b))] {
        assert!(
            !ev.iter().any(|e| matches!(
                e,
                DdpEvent::SessionEnded {
                    why: SessionEnd::IllegalSequence(_),
                    ..
                }
            )),
            "{name}: {ev:?}"
        );
        assert!(
            ev.contains(&DdpEvent::SessionEnded {
                stream: 0,
                why: SessionEnd::LocalTerminated,
                private_data: vec![]
            }),
            "{name}: {ev:?}"
        );
    }
    assert_eq!(a.session_state(0), Some(SessionState::Terminated));
    // §6.6: not while B's Terminate is unacknowledged (the SACK for it is
    // delayed)...
    assert_eq!(b.initiate(0, b"next"), Err(DdpError::StreamBusy));
    // ...but once the delayed SACK went out, either side may start the next
    // session on the stream (§6.1: DDP-SSN from zero again).
    let later = 300_000_000;
    a.handle_timeout(later);
    b.handle_timeout(later);
    exchange_at(later, &mut a, &mut b, &mut log);
    b.initiate(0, b"next").unwrap();
    exchange_at(later, &mut a, &mut b, &mut log);
    assert_eq!(
        events(&mut a),
        vec![DdpEvent::SessionRequested {
            stream: 0,
            private_data: b"next".to_vec()
        }]
    );
}

#[test]
fn a_ulp_that_does_not_read_is_bounded() {
    let mut log = Log::new();
    let (mut a, mut b) = pair(&mut log);
    b.set_max_held(8 * 1024);
    a.initiate(0, b"").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let _ = events(&mut b);
    b.accept(0, b"").unwrap();
    exchange(&mut a, &mut b, &mut log);
    let _ = events(&mut a);
    let seg = vec![5u8; 1000];
    for _ in 0..200 {
        let _ = a.send_segment(0, &seg);
    }
    // B's ULP takes nothing: B holds at most 8 KiB (plus one segment) of
    // events, and SCTP's receive buffer the rest.
    for _ in 0..50 {
        exchange(&mut a, &mut b, &mut log);
    }
    assert!(b.held() <= 8 * 1024 + 1000, "held {}", b.held());
    assert!(b.held() >= 8 * 1024, "held {}", b.held());
    assert!(b.sctp().recv_buffered() <= cfg(2).recv_buffer as usize);
    // Taking the events lets the rest flow.
    let mut n = 0;
    for _ in 0..200 {
        while let Some(e) = b.poll_event() {
            if matches!(e, DdpEvent::Segment { .. }) {
                n += 1;
            }
        }
        exchange(&mut a, &mut b, &mut log);
    }
    assert_eq!(n, 200);
}
