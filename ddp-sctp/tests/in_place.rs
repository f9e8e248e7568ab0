//! DDP Segments placed straight from the received packet
//! (`DdpAssociation::handle_packet_with`), against a raw SCTP peer that
//! writes RFC 5043 payloads as octets: whole segments of an established
//! session go to the placer with their DDP-SSN and make no event; a
//! segment behind a waiting event, one the placer declines, a fragmented
//! one and an invalid DDP-SSN take the usual way (events, §10 check).
#![allow(clippy::unwrap_used)] // test harness: a failed unwrap is a failed test

use ddp_sctp::{listener, DdpAssociation, DdpEvent, SessionEnd, PPID_DDP_SEGMENT};
use sctp_lite::assoc::{Association, Config, Event, ListenOutcome};

fn cfg(secret: u8) -> Config {
    Config {
        secret: [secret; 16],
        streams: 4,
        ..Config::default()
    }
}

/// Our side: the association, and what its placer took.
struct Placing {
    d: DdpAssociation,
    placed: Vec<(u16, u16, Vec<u8>)>,
    decline: bool,
}

impl Placing {
    fn rx(&mut self, now: u64, p: &[u8]) {
        let (placed, decline) = (&mut self.placed, self.decline);
        self.d.handle_packet_with(now, p, &mut |stream, ssn, seg| {
            if decline {
                return false;
            }
            placed.push((stream, ssn, seg.to_vec()));
            true
        });
    }
}

fn exchange(a: &mut Placing, b: &mut Association) {
    let mut buf = vec![0u8; 2048];
    for _ in 0..20 {
        let mut moved = false;
        while let Some(n) = a.d.poll_transmit(0, &mut buf) {
            b.handle_packet(0, &buf[..n]);
            moved = true;
        }
        while let Some(n) = b.poll_transmit(0, &mut buf) {
            a.rx(0, &buf[..n]);
            moved = true;
        }
        if !moved {
            break;
        }
    }
}

fn events(d: &mut DdpAssociation) -> Vec<DdpEvent> {
    std::iter::from_fn(|| d.poll_event()).collect()
}

/// A DDP Segment Chunk as octets (RFC 5043 §5.2.2): DDP-SSN, then the
/// DDP Segment.
fn seg_chunk(ssn: u16, seg: &[u8]) -> Vec<u8> {
    let mut v = ssn.to_be_bytes().to_vec();
    v.extend_from_slice(seg);
    v
}

#[test]
fn whole_segments_are_placed_in_place_the_rest_come_as_events() {
    let mut a = Placing {
        d: DdpAssociation::connect(cfg(1), 4000, 5000, 0, 1).unwrap(),
        placed: Vec::new(),
        decline: false,
    };
    let mut l = listener(cfg(2)).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let mut raw = None;
    for _ in 0..4 {
        let Some(n) = a.d.poll_transmit(0, &mut buf) else {
            continue;
        };
        match l.handle_packet(0, &buf[..n], &mut out) {
            ListenOutcome::Reply(m) => a.rx(0, &out[..m]),
            ListenOutcome::Accept(s) => {
                raw = Some(*s);
                break;
            }
            ListenOutcome::Drop => {}
        }
    }
    let mut b = raw.unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(a.d.poll_event(), Some(DdpEvent::Connected));
    while b.poll_event().is_some() {}

    a.d.initiate(1, b"hi").unwrap();
    exchange(&mut a, &mut b);
    assert!(matches!(b.poll_event(), Some(Event::Message(m)) if m.ppid == 17));
    // Accept (§5.2.3): DDP-SSN 0, Function Code 0x0002, no private data;
    // and segment DDP-SSN 1 sent behind it. The Accept's event waits for
    // the ULP, so the segment must not overtake it: it comes as an event.
    b.send(1, 17, true, &[0x00, 0x00, 0x00, 0x02]).unwrap();
    b.send(1, PPID_DDP_SEGMENT, true, &seg_chunk(1, b"one"))
        .unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(
        events(&mut a.d),
        vec![
            DdpEvent::SessionAccepted {
                stream: 1,
                private_data: Vec::new()
            },
            DdpEvent::Segment {
                stream: 1,
                ddp_ssn: 1,
                segment: b"one".to_vec()
            }
        ]
    );
    assert!(a.placed.is_empty());

    // Nothing waits now: DDP-SSNs 3 then 2 (any order, §10) placed in
    // place, no event, nothing held.
    for (ssn, s) in [(3u16, &b"three"[..]), (2, b"two")] {
        b.send(1, PPID_DDP_SEGMENT, true, &seg_chunk(ssn, s))
            .unwrap();
        exchange(&mut a, &mut b);
    }
    assert_eq!(
        a.placed,
        vec![(1, 3, b"three".to_vec()), (1, 2, b"two".to_vec())]
    );
    assert_eq!(events(&mut a.d), vec![]);
    assert_eq!(a.d.held(), 0);
    assert_eq!(a.d.sctp().stats().data_in_place, 2);

    // Declined by the placer: the usual event.
    a.decline = true;
    b.send(1, PPID_DDP_SEGMENT, true, &seg_chunk(4, b"four"))
        .unwrap();
    exchange(&mut a, &mut b);
    a.decline = false;
    assert_eq!(
        events(&mut a.d),
        vec![DdpEvent::Segment {
            stream: 1,
            ddp_ssn: 4,
            segment: b"four".to_vec()
        }]
    );

    // Fragmented over three DATA chunks (RFC 9260 §6.9): reassembled,
    // then the usual event.
    let big: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
    b.send(1, PPID_DDP_SEGMENT, true, &seg_chunk(5, &big))
        .unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(
        events(&mut a.d),
        vec![DdpEvent::Segment {
            stream: 1,
            ddp_ssn: 5,
            segment: big
        }]
    );
    assert_eq!(a.d.sctp().stats().data_in_place, 2);

    // DDP-SSN 2 again fails the validity check (§10): not placed; the
    // usual way ends the session (§6.1).
    b.send(1, PPID_DDP_SEGMENT, true, &seg_chunk(2, b"again"))
        .unwrap();
    exchange(&mut a, &mut b);
    assert_eq!(a.placed.len(), 2);
    assert!(matches!(
        events(&mut a.d).as_slice(),
        [DdpEvent::SessionEnded {
            stream: 1,
            why: SessionEnd::IllegalSequence(_),
            ..
        }]
    ));
    // The Terminate (Function Code 0x0004) went to the peer.
    let mut term = false;
    while let Some(e) = b.poll_event() {
        if let Event::Message(m) = e {
            term |= m.ppid == 17 && m.data.get(2..4) == Some(&[0, 4][..]);
        }
    }
    assert!(term);
}

/// `send_segment_chunk`: the caller's vector (two octets of room, then
/// the segment) goes out as the DDP Segment Chunk with the DDP-SSN
/// written in (§5.2.2), PPID 16, unordered (§10); refused ones come back.
#[test]
fn a_segment_chunk_built_by_the_caller_goes_out_as_is() {
    let mut a = DdpAssociation::connect(cfg(1), 4000, 5000, 0, 1).unwrap();
    let mut l = listener(cfg(2)).unwrap();
    let (mut buf, mut out) = (vec![0u8; 2048], vec![0u8; 2048]);
    let mut raw = None;
    for _ in 0..4 {
        let Some(n) = a.poll_transmit(0, &mut buf) else {
            continue;
        };
        match l.handle_packet(0, &buf[..n], &mut out) {
            ListenOutcome::Reply(m) => a.handle_packet(0, &out[..m]),
            ListenOutcome::Accept(s) => {
                raw = Some(*s);
                break;
            }
            ListenOutcome::Drop => {}
        }
    }
    let mut b = raw.unwrap();
    let mut p = Placing {
        d: a,
        placed: Vec::new(),
        decline: false,
    };
    exchange(&mut p, &mut b);
    while b.poll_event().is_some() {}
    // Before the session: refused, the vector back.
    let (_, v) = p.d.send_segment_chunk(0, vec![0, 0, 9]).unwrap_err();
    assert_eq!(v, [0, 0, 9]);
    p.d.initiate(0, b"").unwrap();
    b.send(0, 17, true, &[0x00, 0x00, 0x00, 0x02]).unwrap();
    exchange(&mut p, &mut b);
    while b.poll_event().is_some() {}
    assert!(events(&mut p.d).contains(&DdpEvent::SessionAccepted {
        stream: 0,
        private_data: Vec::new()
    }));
    assert_eq!(
        p.d.send_segment_chunk(0, vec![0xff, 0xff, b'x', b'y']),
        Ok(1)
    );
    assert_eq!(p.d.send_segment(0, b"z"), Ok(2));
    exchange(&mut p, &mut b);
    let mut got = Vec::new();
    while let Some(e) = b.poll_event() {
        if let Event::Message(m) = e {
            got.push((m.ppid, m.unordered, m.data));
        }
    }
    assert_eq!(
        got,
        vec![
            (PPID_DDP_SEGMENT, true, vec![0x00, 0x01, b'x', b'y']),
            (PPID_DDP_SEGMENT, true, vec![0x00, 0x02, b'z']),
        ]
    );
}
